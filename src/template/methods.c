/*
 * methods.c: the Python methods templates call on strings, dicts and lists.
 *
 * `x.name` on a str, dict or list finds the method here and binds it (a TV_FUNC); calling
 * it runs the Python behaviour. Strings: strip / lstrip / rstrip, split / rsplit,
 * splitlines, startswith / endswith (a string or a tuple), replace, upper / lower / title
 * / capitalize, find / rfind, count, join and the is* predicates. Dicts: get, keys, values,
 * items. Lists: count, index. The methods that would change a list or dict (append, pop,
 * update, ...) are refused as ImmutableSandboxedEnvironment refuses them: the attribute is
 * an undefined value whose use raises SecurityError. Also here: the argument helpers every
 * builtin uses.
 */
#include <string.h>

#include "template/template.h"

tval *graft__tpl_arg(tval *args, size_t n, graft__tpl_dict *kwargs, size_t i, const char *name)
{
    if (i < n)
        return &args[i];
    if (kwargs != NULL && name != NULL)
        return graft__tpl_dict_find_str(kwargs, name, strlen(name));
    return NULL;
}

void graft__tpl_check_args(graft__tpl_render *r, const graft__tpl_node *at, const char *fn,
                           size_t n, size_t max)
{
    if (n > max)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: %s() takes at most %zu argument%s (%zu given)", fn, max,
                        max == 1 ? "" : "s", n);
}

tval graft__tpl_func_value(graft__tpl_render *r, const char *name, graft__tpl_builtin fn,
                           tval self)
{
    graft__tpl_func *f = graft__tpl_alloc(r->c, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    tval v = {.kind = TV_FUNC};
    v.u.func = f;
    return v;
}

static tval str_arg(graft__tpl_render *r, const graft__tpl_node *at, const tval *v,
                    const char *what)
{
    if (v == NULL || v->kind != TV_STR)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: %s must be str, not %s", what,
                        v ? graft__tpl_type_name(*v) : "nothing");
    return *v;
}

static int64_t int_arg(graft__tpl_render *r, const graft__tpl_node *at, const tval *v,
                       int64_t dflt)
{
    if (v == NULL || v->kind == TV_NONE)
        return dflt;
    if (v->kind == TV_INT)
        return v->u.i;
    if (v->kind == TV_BOOL)
        return v->u.b;
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                    "TypeError: '%s' object cannot be interpreted as an integer",
                    graft__tpl_type_name(*v));
}

/* ---- str --------------------------------------------------------------------------------- */

#define METHOD(fname)                                                                          \
    static tval fname(graft__tpl_render *r, tval self, tval *args, size_t n,                   \
                      graft__tpl_dict *kwargs, const graft__tpl_node *at)

static tval strip_common(graft__tpl_render *r, tval self, tval *args, size_t n,
                         const graft__tpl_node *at, bool left, bool right)
{
    graft__tpl_check_args(r, at, "strip", n, 1);
    const tval *chars = n > 0 && args[0].kind != TV_NONE ? &args[0] : NULL;
    if (chars)
        str_arg(r, at, chars, "strip arg");
    return graft__tpl_str_strip(r->c, self, chars, left, right);
}

METHOD(m_strip) { (void)kwargs; return strip_common(r, self, args, n, at, true, true); }
METHOD(m_lstrip) { (void)kwargs; return strip_common(r, self, args, n, at, true, false); }
METHOD(m_rstrip) { (void)kwargs; return strip_common(r, self, args, n, at, false, true); }

/* str.split / str.rsplit: sep None splits at runs of whitespace. */
static tval split_common(graft__tpl_render *r, tval self, tval *args, size_t n,
                         graft__tpl_dict *kwargs, const graft__tpl_node *at, bool from_right)
{
    graft__tpl_check_args(r, at, "split", n, 2);
    const tval *sep = graft__tpl_arg(args, n, kwargs, 0, "sep");
    int64_t maxsplit = int_arg(r, at, graft__tpl_arg(args, n, kwargs, 1, "maxsplit"), -1);
    tval out = graft__tpl_new_list(r->c, 0, 0);
    graft__tpl_list *l = out.u.list;
    const char *s = self.u.s;
    if (sep == NULL || sep->kind == TV_NONE) {
        /* words separated by whitespace; maxsplit counts from the chosen side */
        size_t i = 0;
        tval words = graft__tpl_new_list(r->c, 0, 0);
        while (i < self.n) {
            size_t j = i;
            uint32_t cp = graft__tpl_utf8_next(s, self.n, &j);
            if (graft__tpl_is_space(cp)) {
                i = j;
                continue;
            }
            size_t start = i;
            while (i < self.n) {
                j = i;
                cp = graft__tpl_utf8_next(s, self.n, &j);
                if (graft__tpl_is_space(cp))
                    break;
                i = j;
            }
            graft__tpl_list_push(r->c, words.u.list, graft__tpl_str(s + start, i - start));
        }
        graft__tpl_list *w = words.u.list;
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= w->n)
            return words;
        /* The rest keeps its spacing, except where the split consumed it. */
        if (!from_right) {
            for (int64_t k = 0; k < maxsplit; k++)
                graft__tpl_list_push(r->c, l, w->items[k]);
            const char *rest = w->items[maxsplit].u.s;
            graft__tpl_list_push(r->c, l, graft__tpl_str(rest, (size_t)(s + self.n - rest)));
        } else {
            size_t keep = w->n - (size_t)maxsplit;
            const tval *last_head = &w->items[keep - 1];
            graft__tpl_list_push(r->c, l,
                                 graft__tpl_str(s, (size_t)(last_head->u.s + last_head->n - s)));
            for (size_t k = keep; k < w->n; k++)
                graft__tpl_list_push(r->c, l, w->items[k]);
        }
        return out;
    }
    tval sp = str_arg(r, at, sep, "separator");
    if (sp.n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col, "ValueError: empty separator");
    if (!from_right || maxsplit < 0) {
        size_t pos = 0;
        int64_t splits = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit)
                                  ? memmem(s + pos, self.n - pos, sp.u.s, sp.n)
                                  : NULL;
            if (hit == NULL) {
                graft__tpl_list_push(r->c, l, graft__tpl_str(s + pos, self.n - pos));
                return out;
            }
            graft__tpl_list_push(r->c, l, graft__tpl_str(s + pos, (size_t)(hit - s) - pos));
            pos = (size_t)(hit - s) + sp.n;
            splits++;
        }
    }
    /* rsplit with a limit: find separators from the right. */
    graft__tpl_charge(r, (self.n / 64) * (sp.n / 64 + 1), at);
    size_t end = self.n;
    tval parts = graft__tpl_new_list(r->c, 0, 0);
    int64_t splits = 0;
    while (splits < maxsplit && end >= sp.n) {
        size_t k = end - sp.n + 1;
        bool found = false;
        while (k-- > 0)
            if (memcmp(s + k, sp.u.s, sp.n) == 0) {
                found = true;
                break;
            }
        if (!found)
            break;
        graft__tpl_list_push(r->c, parts.u.list, graft__tpl_str(s + k + sp.n, end - k - sp.n));
        end = k;
        splits++;
    }
    graft__tpl_list_push(r->c, l, graft__tpl_str(s, end));
    for (size_t k = parts.u.list->n; k-- > 0;)
        graft__tpl_list_push(r->c, l, parts.u.list->items[k]);
    return out;
}

METHOD(m_split) { return split_common(r, self, args, n, kwargs, at, false); }
METHOD(m_rsplit) { return split_common(r, self, args, n, kwargs, at, true); }

METHOD(m_splitlines)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "splitlines", n, 1);
    bool keep = n > 0 && graft__tpl_truthy(args[0]);
    tval out = graft__tpl_new_list(r->c, 0, 0);
    size_t start = 0;
    for (size_t i = 0; i < self.n;) {
        size_t at_i = i;
        uint32_t cp = graft__tpl_utf8_next(self.u.s, self.n, &i);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c ||
                   cp == 0x1d || cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk)
            continue;
        if (cp == '\r' && i < self.n && self.u.s[i] == '\n')
            i++;
        graft__tpl_list_push(r->c, out.u.list,
                             graft__tpl_str(self.u.s + start, (keep ? i : at_i) - start));
        start = i;
    }
    if (start < self.n)
        graft__tpl_list_push(r->c, out.u.list, graft__tpl_str(self.u.s + start, self.n - start));
    return out;
}

static bool affix_match(tval s, tval affix, bool end)
{
    if (affix.n > s.n)
        return false;
    return memcmp(end ? s.u.s + s.n - affix.n : s.u.s, affix.u.s, affix.n) == 0;
}

static tval affix_common(graft__tpl_render *r, tval self, tval *args, size_t n,
                         const graft__tpl_node *at, bool end)
{
    graft__tpl_check_args(r, at, end ? "endswith" : "startswith", n, 1);
    if (n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: %s() takes at least 1 argument (0 given)",
                        end ? "endswith" : "startswith");
    if (args[0].kind == TV_LIST && (args[0].flags & TVF_TUPLE)) {
        for (size_t i = 0; i < args[0].u.list->n; i++)
            if (affix_match(self, str_arg(r, at, &args[0].u.list->items[i], "tuple item"), end))
                return graft__tpl_bool(true);
        return graft__tpl_bool(false);
    }
    return graft__tpl_bool(affix_match(self, str_arg(r, at, &args[0], "prefix"), end));
}

METHOD(m_startswith) { (void)kwargs; return affix_common(r, self, args, n, at, false); }
METHOD(m_endswith) { (void)kwargs; return affix_common(r, self, args, n, at, true); }

METHOD(m_replace)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "replace", n, 3);
    if (n < 2)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: replace expected at least 2 arguments, got %zu", n);
    return graft__tpl_str_replace(r->c, self, str_arg(r, at, &args[0], "replace() argument 1"),
                                  str_arg(r, at, &args[1], "replace() argument 2"),
                                  int_arg(r, at, n > 2 ? &args[2] : NULL, -1));
}

static tval case_common(graft__tpl_render *r, tval self, size_t n, const graft__tpl_node *at,
                        int mode)
{
    graft__tpl_check_args(r, at, "case", n, 0);
    return graft__tpl_str_case(r->c, self, mode);
}

METHOD(m_lower) { (void)args; (void)kwargs; return case_common(r, self, n, at, 0); }
METHOD(m_upper) { (void)args; (void)kwargs; return case_common(r, self, n, at, 1); }
METHOD(m_capitalize) { (void)args; (void)kwargs; return case_common(r, self, n, at, 2); }
METHOD(m_title) { (void)args; (void)kwargs; return case_common(r, self, n, at, 3); }

static tval find_common(graft__tpl_render *r, tval self, tval *args, size_t n,
                        const graft__tpl_node *at, bool from_right)
{
    graft__tpl_check_args(r, at, "find", n, 1);
    tval sub = str_arg(r, at, n ? &args[0] : NULL, "find() argument");
    graft__tpl_charge(r, (self.n / 64) * (sub.n / 64 + 1), at);
    int64_t found = -1;
    for (size_t i = 0; i + sub.n <= self.n; i++)
        if (memcmp(self.u.s + i, sub.u.s, sub.n) == 0) {
            found = (int64_t)i;
            if (!from_right)
                break;
        }
    if (found < 0)
        return graft__tpl_int(-1);
    return graft__tpl_int((int64_t)graft__tpl_utf8_count(self.u.s, (size_t)found));
}

METHOD(m_find) { (void)kwargs; return find_common(r, self, args, n, at, false); }
METHOD(m_rfind) { (void)kwargs; return find_common(r, self, args, n, at, true); }

METHOD(m_str_count)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "count", n, 1);
    tval sub = str_arg(r, at, n ? &args[0] : NULL, "count() argument");
    if (sub.n == 0)
        return graft__tpl_int((int64_t)graft__tpl_utf8_count(self.u.s, self.n) + 1);
    graft__tpl_charge(r, (self.n / 64) * (sub.n / 64 + 1), at);
    int64_t count = 0;
    for (size_t i = 0; i + sub.n <= self.n;) {
        if (memcmp(self.u.s + i, sub.u.s, sub.n) == 0) {
            count++;
            i += sub.n;
        } else {
            i++;
        }
    }
    return graft__tpl_int(count);
}

METHOD(m_join)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "join", n, 1);
    if (n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: join() takes exactly one argument (0 given)");
    graft__tpl_list *items = graft__tpl_iterate(r->c, args[0], at->line, at->col);
    graft__tpl_buf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i)
            graft__tpl_buf_add(r->c, &b, self.u.s, self.n);
        tval item = str_arg(r, at, &items->items[i], "sequence item");
        graft__tpl_buf_add(r->c, &b, item.u.s, item.n);
    }
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

/* str.isdigit / isalpha / isalnum / isspace / islower / isupper (ASCII classes for digits
 * and letters; letters beyond ASCII count as alphabetic). */
static tval is_common(graft__tpl_render *r, tval self, size_t n, const graft__tpl_node *at,
                      char kind)
{
    graft__tpl_check_args(r, at, "is", n, 0);
    if (self.n == 0)
        return graft__tpl_bool(false);
    bool any_cased = false;
    for (size_t i = 0; i < self.n;) {
        uint32_t cp = graft__tpl_utf8_next(self.u.s, self.n, &i);
        bool digit = cp >= '0' && cp <= '9';
        bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
                     (cp >= 0xc0 && !graft__tpl_is_space(cp) && cp != 0xd7 && cp != 0xf7);
        switch (kind) {
        case 'd': if (!digit) return graft__tpl_bool(false); break;
        case 'a': if (!alpha) return graft__tpl_bool(false); break;
        case 'n': if (!alpha && !digit) return graft__tpl_bool(false); break;
        case 's': if (!graft__tpl_is_space(cp)) return graft__tpl_bool(false); break;
        case 'l':
            if (graft__tpl_lower(cp) != cp) return graft__tpl_bool(false);
            any_cased |= graft__tpl_upper(cp) != cp;
            break;
        default:
            if (graft__tpl_upper(cp) != cp) return graft__tpl_bool(false);
            any_cased |= graft__tpl_lower(cp) != cp;
        }
    }
    return graft__tpl_bool(kind == 'l' || kind == 'u' ? any_cased : true);
}

METHOD(m_isdigit) { (void)args; (void)kwargs; return is_common(r, self, n, at, 'd'); }
METHOD(m_isalpha) { (void)args; (void)kwargs; return is_common(r, self, n, at, 'a'); }
METHOD(m_isalnum) { (void)args; (void)kwargs; return is_common(r, self, n, at, 'n'); }
METHOD(m_isspace) { (void)args; (void)kwargs; return is_common(r, self, n, at, 's'); }
METHOD(m_islower) { (void)args; (void)kwargs; return is_common(r, self, n, at, 'l'); }
METHOD(m_isupper) { (void)args; (void)kwargs; return is_common(r, self, n, at, 'u'); }

/* ---- dict -------------------------------------------------------------------------------- */

METHOD(m_get)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "get", n, 2);
    if (n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: get expected at least 1 argument, got 0");
    tval *v = graft__tpl_dict_find(self.u.dict, args[0]);
    return v ? *v : n > 1 ? args[1] : graft__tpl_none();
}

static tval dict_view(graft__tpl_render *r, tval self, size_t n, const graft__tpl_node *at,
                      int which)
{
    graft__tpl_check_args(r, at, which == 0 ? "keys" : which == 1 ? "values" : "items", n, 0);
    const graft__tpl_dict *d = self.u.dict;
    tval out = graft__tpl_new_list(r->c, d->n, 0);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 2) {
            tval pair = graft__tpl_new_list(r->c, 2, TVF_TUPLE);
            pair.u.list->items[0] = d->keys[i];
            pair.u.list->items[1] = d->vals[i];
            pair.u.list->n = 2;
            out.u.list->items[i] = pair;
        } else {
            out.u.list->items[i] = which == 0 ? d->keys[i] : d->vals[i];
        }
    }
    out.u.list->n = d->n;
    return out;
}

METHOD(m_keys) { (void)args; (void)kwargs; return dict_view(r, self, n, at, 0); }
METHOD(m_values) { (void)args; (void)kwargs; return dict_view(r, self, n, at, 1); }
METHOD(m_items) { (void)args; (void)kwargs; return dict_view(r, self, n, at, 2); }

/* ---- list -------------------------------------------------------------------------------- */

METHOD(m_list_count)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "count", n, 1);
    int64_t count = 0;
    for (size_t i = 0; n > 0 && i < self.u.list->n; i++)
        count += graft__tpl_equal(self.u.list->items[i], args[0]);
    return graft__tpl_int(count);
}

METHOD(m_index)
{
    (void)kwargs;
    graft__tpl_check_args(r, at, "index", n, 1);
    for (size_t i = 0; n > 0 && i < self.u.list->n; i++)
        if (graft__tpl_equal(self.u.list->items[i], args[0]))
            return graft__tpl_int((int64_t)i);
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col, "ValueError: value is not in list");
}

/* ---- lookup ------------------------------------------------------------------------------ */

typedef struct method_entry {
    const char *name;
    graft__tpl_builtin fn; /* NULL: exists but modifies its receiver (refused) */
} method_entry;

static const method_entry str_methods[] = {
    {"strip", m_strip},         {"lstrip", m_lstrip},       {"rstrip", m_rstrip},
    {"split", m_split},         {"rsplit", m_rsplit},       {"splitlines", m_splitlines},
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"replace", m_replace},
    {"lower", m_lower},         {"upper", m_upper},         {"capitalize", m_capitalize},
    {"title", m_title},         {"find", m_find},           {"rfind", m_rfind},
    {"count", m_str_count},     {"join", m_join},           {"isdigit", m_isdigit},
    {"isalpha", m_isalpha},     {"isalnum", m_isalnum},     {"isspace", m_isspace},
    {"islower", m_islower},     {"isupper", m_isupper},     {NULL, NULL}};

static const method_entry dict_methods[] = {
    {"get", m_get},     {"keys", m_keys},   {"values", m_values}, {"items", m_items},
    {"pop", NULL},      {"popitem", NULL},  {"setdefault", NULL}, {"update", NULL},
    {"clear", NULL},    {NULL, NULL}};

static const method_entry list_methods[] = {
    {"count", m_list_count}, {"index", m_index}, {"append", NULL}, {"extend", NULL},
    {"insert", NULL},        {"pop", NULL},      {"remove", NULL}, {"reverse", NULL},
    {"sort", NULL},          {"clear", NULL},    {NULL, NULL}};

tval graft__tpl_method(graft__tpl_render *r, tval self, const char *name, size_t n)
{
    const method_entry *table = self.kind == TV_STR    ? str_methods
                                : self.kind == TV_DICT ? dict_methods
                                : self.kind == TV_LIST && !(self.flags & TVF_GEN) ? list_methods
                                                                                  : NULL;
    for (; table != NULL && table->name != NULL; table++) {
        if (strlen(table->name) != n || memcmp(table->name, name, n) != 0)
            continue;
        if (table->fn == NULL) {
            tval u = graft__tpl_undef(name, n);
            u.flags = TVF_UNSAFE;
            return u;
        }
        return graft__tpl_func_value(r, table->name, table->fn, self);
    }
    return graft__tpl_undef(name, n);
}
