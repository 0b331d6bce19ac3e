/*
 * strings.c: Python's str operations that filters and methods share.
 *
 * strip / lstrip / rstrip (Unicode whitespace, or a set of characters), replace (with
 * Python's rule for an empty pattern), case changes (lower, upper, capitalize, and title
 * as str.title() does it: a letter after a cased letter is lowered, any other raised) and
 * HTML escaping for the `escape` filter and Markup concatenation.
 */
#include <string.h>

#include "template/template.h"

static bool in_chars(uint32_t cp, const tval *chars)
{
    if (chars == NULL || chars->kind != TV_STR)
        return graft__tpl_is_space(cp);
    for (size_t i = 0; i < chars->n;) {
        if (graft__tpl_utf8_next(chars->u.s, chars->n, &i) == cp)
            return true;
    }
    return false;
}

tval graft__tpl_str_strip(graft__tpl_ctx *c, tval s, const tval *chars, bool left, bool right)
{
    (void)c;
    size_t lo = 0, hi = s.n;
    if (left)
        while (lo < hi) {
            size_t i = lo;
            if (!in_chars(graft__tpl_utf8_next(s.u.s, hi, &i), chars))
                break;
            lo = i;
        }
    if (right)
        while (hi > lo) {
            size_t k = hi - 1;
            while (k > lo && ((unsigned char)s.u.s[k] & 0xc0) == 0x80)
                k--;
            size_t i = k;
            uint32_t cp = graft__tpl_utf8_next(s.u.s, hi, &i);
            if (i != hi || !in_chars(cp, chars))
                break;
            hi = k;
        }
    return graft__tpl_str(s.u.s + lo, hi - lo);
}

tval graft__tpl_str_replace(graft__tpl_ctx *c, tval s, tval old, tval new_, int64_t count)
{
    graft__tpl_buf b = {0};
    if (count < 0)
        count = INT64_MAX;
    if (old.n == 0) {
        /* Python inserts new_ before every character and at the end. */
        size_t i = 0;
        while (i < s.n && count > 0) {
            graft__tpl_buf_add(c, &b, new_.u.s, new_.n);
            size_t start = i;
            graft__tpl_utf8_next(s.u.s, s.n, &i);
            graft__tpl_buf_add(c, &b, s.u.s + start, i - start);
            count--;
        }
        if (count > 0)
            graft__tpl_buf_add(c, &b, new_.u.s, new_.n);
        graft__tpl_buf_add(c, &b, s.u.s + i, s.n - i);
        return graft__tpl_str(b.p ? b.p : "", b.n);
    }
    size_t pos = 0;
    bool any = false;
    while (count > 0 && pos + old.n <= s.n) {
        const char *hit = memmem(s.u.s + pos, s.n - pos, old.u.s, old.n);
        if (hit == NULL)
            break;
        size_t at = (size_t)(hit - s.u.s);
        graft__tpl_buf_add(c, &b, s.u.s + pos, at - pos);
        graft__tpl_buf_add(c, &b, new_.u.s, new_.n);
        pos = at + old.n;
        count--;
        any = true;
    }
    if (!any)
        return s;
    graft__tpl_buf_add(c, &b, s.u.s + pos, s.n - pos);
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

static bool is_cased(uint32_t cp)
{
    return graft__tpl_upper(cp) != cp || graft__tpl_lower(cp) != cp;
}

tval graft__tpl_str_case(graft__tpl_ctx *c, tval s, int mode)
{
    graft__tpl_buf b = {0};
    bool prev_cased = false;
    size_t k = 0;
    for (size_t i = 0; i < s.n; k++) {
        uint32_t cp = graft__tpl_utf8_next(s.u.s, s.n, &i);
        uint32_t out;
        switch (mode) {
        case 0: out = graft__tpl_lower(cp); break;
        case 1: out = graft__tpl_upper(cp); break;
        case 2: out = k == 0 ? graft__tpl_upper(cp) : graft__tpl_lower(cp); break;
        default:
            out = prev_cased ? graft__tpl_lower(cp) : graft__tpl_upper(cp);
            prev_cased = is_cased(cp);
        }
        char enc[4];
        graft__tpl_buf_add(c, &b, enc, (size_t)graft__tpl_utf8_put(out, enc));
    }
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

tval graft__tpl_html_escape(graft__tpl_ctx *c, tval s)
{
    graft__tpl_buf b = {0};
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        const char *rep;
        switch (s.u.s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        graft__tpl_buf_add(c, &b, s.u.s + run, i - run);
        graft__tpl_buf_add(c, &b, rep, strlen(rep));
        run = i + 1;
    }
    graft__tpl_buf_add(c, &b, s.u.s + run, s.n - run);
    tval v = graft__tpl_str(b.p ? b.p : "", b.n);
    v.flags = TVF_MARKUP;
    return v;
}
