/*
 * filters.c: the `|name(args)` filters, each as jinja2 defines it.
 *
 * The filters real chat templates use: text (trim, upper, lower, capitalize, title,
 * replace, indent, string, safe, escape), sequences (length, first, last, list, join,
 * reverse, sort, unique, min, max, sum, items, dictsort), selection and mapping (select,
 * reject, selectattr, rejectattr, map with a filter name or attribute=), numbers (int,
 * float, abs, round), default, attr and tojson (Python's json.dumps, as Hugging Face
 * defines it). Where jinja2 returns a generator (select, map, unique, items, reverse) the
 * result is a list flagged TVF_GEN, so that it is always true and has no length, as there.
 * Names resolve at parse time; map and select look their filter or test up by name when
 * they run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

#define FILTER(fname)                                                                          \
    static tval fname(graft__tpl_render *r, tval v, tval *args, size_t n,                      \
                      graft__tpl_dict *kwargs, const graft__tpl_node *at)
#define UNUSED_ARGS (void)args, (void)n, (void)kwargs

static tval soft_str(graft__tpl_render *r, tval v)
{
    return graft__tpl_stringify(r->c, v);
}

static tval gen_list(graft__tpl_render *r)
{
    return graft__tpl_new_list(r->c, 0, TVF_GEN);
}

static bool opt_bool(tval *args, size_t n, graft__tpl_dict *kwargs, size_t i, const char *name)
{
    tval *a = graft__tpl_arg(args, n, kwargs, i, name);
    return a != NULL && graft__tpl_truthy(*a);
}

/* Lower-cases strings for case-insensitive sorting and uniqueness. */
static tval ignore_case(graft__tpl_render *r, tval v)
{
    return v.kind == TV_STR ? graft__tpl_str_case(r->c, v, 0) : v;
}

/* jinja2's make_attrgetter: "a.b.0" looked up part by part (digits as indices). */
static tval get_path(graft__tpl_render *r, tval item, tval attr, const graft__tpl_node *at)
{
    if (attr.kind != TV_STR)
        return graft__tpl_getitem(r, item, attr, at);
    size_t start = 0;
    for (size_t i = 0; i <= attr.n; i++) {
        if (i < attr.n && attr.u.s[i] != '.')
            continue;
        tval part = graft__tpl_str(attr.u.s + start, i - start);
        bool digits = part.n > 0;
        int64_t num = 0;
        for (size_t k = 0; k < part.n && digits; k++) {
            digits = part.u.s[k] >= '0' && part.u.s[k] <= '9';
            /* saturated: an index that large is out of range all the same */
            num = num > (INT64_MAX - 9) / 10 ? INT64_MAX : num * 10 + (part.u.s[k] - '0');
        }
        item = graft__tpl_getitem(r, item, digits ? graft__tpl_int(num) : part, at);
        start = i + 1;
    }
    return item;
}

/* ---- text -------------------------------------------------------------------------------- */

FILTER(f_trim)
{
    tval *chars = graft__tpl_arg(args, n, kwargs, 0, "chars");
    return graft__tpl_str_strip(r->c, soft_str(r, v), chars && chars->kind == TV_STR ? chars : NULL,
                                true, true);
    (void)at;
}

FILTER(f_upper) { UNUSED_ARGS; (void)at; return graft__tpl_str_case(r->c, soft_str(r, v), 1); }
FILTER(f_lower) { UNUSED_ARGS; (void)at; return graft__tpl_str_case(r->c, soft_str(r, v), 0); }
FILTER(f_capitalize) { UNUSED_ARGS; (void)at; return graft__tpl_str_case(r->c, soft_str(r, v), 2); }

FILTER(f_title)
{
    UNUSED_ARGS;
    (void)at;
    tval s = soft_str(r, v);
    graft__tpl_buf b = {0};
    bool word_start = true;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp = graft__tpl_utf8_next(s.u.s, s.n, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                   graft__tpl_is_space(cp);
        uint32_t out = sep ? cp : word_start ? graft__tpl_upper(cp) : graft__tpl_lower(cp);
        word_start = sep;
        char enc[4];
        graft__tpl_buf_add(r->c, &b, enc, (size_t)graft__tpl_utf8_put(out, enc));
    }
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

FILTER(f_replace)
{
    (void)kwargs;
    if (n < 2)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: replace() needs the old and new strings");
    tval s = soft_str(r, v);
    tval count = n > 2 ? args[2] : graft__tpl_none();
    int64_t c = count.kind == TV_INT ? count.u.i : -1;
    return graft__tpl_str_replace(r->c, s, soft_str(r, args[0]), soft_str(r, args[1]), c);
}

/* Lines as str.splitlines() splits them. */
static graft__tpl_list *split_lines(graft__tpl_render *r, tval s)
{
    graft__tpl_list *lines = graft__tpl_new_list(r->c, 0, 0).u.list;
    size_t start = 0;
    for (size_t i = 0; i < s.n;) {
        size_t at_i = i;
        uint32_t cp = graft__tpl_utf8_next(s.u.s, s.n, &i);
        if (!(cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
              cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029))
            continue;
        if (cp == '\r' && i < s.n && s.u.s[i] == '\n')
            i++;
        graft__tpl_list_push(r->c, lines, graft__tpl_str(s.u.s + start, at_i - start));
        start = i;
    }
    if (start < s.n)
        graft__tpl_list_push(r->c, lines, graft__tpl_str(s.u.s + start, s.n - start));
    return lines;
}

FILTER(f_indent)
{
    tval *width = graft__tpl_arg(args, n, kwargs, 0, "width");
    bool first = opt_bool(args, n, kwargs, 1, "first");
    bool blank = opt_bool(args, n, kwargs, 2, "blank");
    tval ind;
    if (width != NULL && width->kind == TV_STR) {
        ind = *width;
    } else {
        int64_t w = width == NULL ? 4 : width->kind == TV_INT ? width->u.i : width->kind == TV_BOOL ? width->u.b : -1;
        if (w < 0 && width != NULL && width->kind != TV_INT && width->kind != TV_BOOL)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: indent width must be an int or a string");
        if (w < 0)
            w = 0;
        if (w > 4096)
            w = 4096;
        char *sp = graft__tpl_alloc(r->c, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        ind = graft__tpl_str(sp, (size_t)w);
    }
    tval s = soft_str(r, v);
    graft__tpl_buf withnl = {0};
    graft__tpl_buf_add(r->c, &withnl, s.u.s, s.n);
    graft__tpl_buf_addc(r->c, &withnl, '\n');
    graft__tpl_list *lines = split_lines(r, graft__tpl_str(withnl.p, withnl.n));
    graft__tpl_buf b = {0};
    if (first)
        graft__tpl_buf_add(r->c, &b, ind.u.s, ind.n);
    for (size_t i = 0; i < lines->n; i++) {
        tval line = lines->items[i];
        if (i > 0) {
            graft__tpl_buf_addc(r->c, &b, '\n');
            if (blank || line.n > 0)
                graft__tpl_buf_add(r->c, &b, ind.u.s, ind.n);
        }
        graft__tpl_buf_add(r->c, &b, line.u.s, line.n);
    }
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

FILTER(f_string)
{
    UNUSED_ARGS;
    (void)at;
    return soft_str(r, v);
}

FILTER(f_safe)
{
    UNUSED_ARGS;
    (void)at;
    tval s = soft_str(r, v);
    s.flags = TVF_MARKUP;
    return s;
}

FILTER(f_escape)
{
    UNUSED_ARGS;
    (void)at;
    if (v.kind == TV_STR && (v.flags & TVF_MARKUP))
        return v;
    return graft__tpl_html_escape(r->c, soft_str(r, v));
}

/* ---- sequences --------------------------------------------------------------------------- */

FILTER(f_length)
{
    UNUSED_ARGS;
    return graft__tpl_int(graft__tpl_length(r->c, v, at->line, at->col));
}

FILTER(f_first)
{
    UNUSED_ARGS;
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    return items->n ? items->items[0] : graft__tpl_undef("first", 5);
}

FILTER(f_last)
{
    UNUSED_ARGS;
    if (v.kind == TV_LIST && (v.flags & TVF_GEN))
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: 'generator' object is not reversible");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    return items->n ? items->items[items->n - 1] : graft__tpl_undef("last", 4);
}

static tval copy_list(graft__tpl_render *r, const graft__tpl_list *items, uint8_t flags)
{
    tval out = graft__tpl_new_list(r->c, items->n, flags);
    if (items->n)
        memcpy(out.u.list->items, items->items, items->n * sizeof(tval));
    out.u.list->n = items->n;
    return out;
}

FILTER(f_list)
{
    UNUSED_ARGS;
    return copy_list(r, graft__tpl_iterate(r->c, v, at->line, at->col), 0);
}

FILTER(f_join)
{
    tval *sep = graft__tpl_arg(args, n, kwargs, 0, "d");
    tval *attr = graft__tpl_arg(args, n, kwargs, 1, "attribute");
    tval d = sep ? soft_str(r, *sep) : graft__tpl_cstr("");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    graft__tpl_buf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i)
            graft__tpl_buf_add(r->c, &b, d.u.s, d.n);
        tval item = attr && attr->kind != TV_NONE ? get_path(r, items->items[i], *attr, at)
                                                  : items->items[i];
        graft__tpl_to_str(r->c, &b, item);
    }
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

FILTER(f_reverse)
{
    UNUSED_ARGS;
    if (v.kind == TV_STR) {
        tval step = graft__tpl_int(-1);
        return graft__tpl_slice(r, v, NULL, NULL, &step, at);
    }
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval out = graft__tpl_new_list(r->c, items->n, v.flags & TVF_GEN ? 0 : TVF_GEN);
    for (size_t i = items->n; i-- > 0;)
        out.u.list->items[out.u.list->n++] = items->items[i];
    return out;
}

/* Stable merge sort of idx[0, n) by keys (reversed when rev); fails on unorderable keys. */
static void sort_indices(graft__tpl_render *r, size_t *idx, size_t *tmp, size_t n,
                         const tval *keys, bool rev, const graft__tpl_node *at)
{
    if (n < 2)
        return;
    size_t half = n / 2;
    sort_indices(r, idx, tmp, half, keys, rev, at);
    sort_indices(r, idx + half, tmp, n - half, keys, rev, at);
    size_t i = 0, j = half, k = 0;
    while (i < half && j < n) {
        int c = graft__tpl_compare(r->c, keys[idx[j]], keys[idx[i]], at->line, at->col);
        bool take_right = rev ? c > 0 : c < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < half)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static tval sorted_by(graft__tpl_render *r, const graft__tpl_list *items, const tval *keys,
                      bool rev, const graft__tpl_node *at)
{
    size_t *idx = graft__tpl_alloc(r->c, (items->n + 1) * sizeof *idx);
    size_t *tmp = graft__tpl_alloc(r->c, (items->n + 1) * sizeof *tmp);
    for (size_t i = 0; i < items->n; i++)
        idx[i] = i;
    sort_indices(r, idx, tmp, items->n, keys, rev, at);
    tval out = graft__tpl_new_list(r->c, items->n, 0);
    for (size_t i = 0; i < items->n; i++)
        out.u.list->items[i] = items->items[idx[i]];
    out.u.list->n = items->n;
    return out;
}

/* The sort / unique / min / max key of an item: its attribute, lower-cased unless
 * case-sensitive. */
static tval item_key(graft__tpl_render *r, tval item, const tval *attr, bool case_sensitive,
                     const graft__tpl_node *at)
{
    tval k = attr && attr->kind != TV_NONE ? get_path(r, item, *attr, at) : item;
    return case_sensitive ? k : ignore_case(r, k);
}

FILTER(f_sort)
{
    bool rev = opt_bool(args, n, kwargs, 0, "reverse");
    bool cs = opt_bool(args, n, kwargs, 1, "case_sensitive");
    tval *attr = graft__tpl_arg(args, n, kwargs, 2, "attribute");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval *keys = graft__tpl_alloc(r->c, (items->n + 1) * sizeof *keys);
    for (size_t i = 0; i < items->n; i++)
        keys[i] = item_key(r, items->items[i], attr, cs, at);
    return sorted_by(r, items, keys, rev, at);
}

FILTER(f_dictsort)
{
    bool cs = opt_bool(args, n, kwargs, 0, "case_sensitive");
    tval *by = graft__tpl_arg(args, n, kwargs, 1, "by");
    bool rev = opt_bool(args, n, kwargs, 2, "reverse");
    int pos = 0;
    if (by != NULL) {
        if (by->kind == TV_STR && by->n == 5 && memcmp(by->u.s, "value", 5) == 0)
            pos = 1;
        else if (!(by->kind == TV_STR && by->n == 3 && memcmp(by->u.s, "key", 3) == 0))
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    }
    if (v.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, v, at);
    if (v.kind != TV_DICT)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "AttributeError: '%s' object has no attribute 'items'",
                        graft__tpl_type_name(v));
    const graft__tpl_dict *d = v.u.dict;
    graft__tpl_list *pairs = graft__tpl_new_list(r->c, d->n, 0).u.list;
    tval *keys = graft__tpl_alloc(r->c, (d->n + 1) * sizeof *keys);
    for (size_t i = 0; i < d->n; i++) {
        tval pair = graft__tpl_new_list(r->c, 2, TVF_TUPLE);
        pair.u.list->items[0] = d->keys[i];
        pair.u.list->items[1] = d->vals[i];
        pair.u.list->n = 2;
        pairs->items[pairs->n++] = pair;
        keys[i] = cs ? (pos ? d->vals[i] : d->keys[i])
                     : ignore_case(r, pos ? d->vals[i] : d->keys[i]);
    }
    return sorted_by(r, pairs, keys, rev, at);
}

FILTER(f_items)
{
    UNUSED_ARGS;
    if (v.kind == TV_UNDEF)
        return gen_list(r);
    if (v.kind != TV_DICT)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: Can only get item pairs from a mapping.");
    tval out = graft__tpl_new_list(r->c, v.u.dict->n, TVF_GEN);
    for (size_t i = 0; i < v.u.dict->n; i++) {
        tval pair = graft__tpl_new_list(r->c, 2, TVF_TUPLE);
        pair.u.list->items[0] = v.u.dict->keys[i];
        pair.u.list->items[1] = v.u.dict->vals[i];
        pair.u.list->n = 2;
        out.u.list->items[out.u.list->n++] = pair;
    }
    return out;
}

static bool hashable(tval v)
{
    if (v.kind == TV_LIST && (v.flags & TVF_TUPLE)) {
        for (size_t i = 0; i < v.u.list->n; i++)
            if (!hashable(v.u.list->items[i]))
                return false;
        return true;
    }
    return v.kind != TV_LIST && v.kind != TV_DICT && v.kind != TV_NS;
}

FILTER(f_unique)
{
    bool cs = opt_bool(args, n, kwargs, 0, "case_sensitive");
    tval *attr = graft__tpl_arg(args, n, kwargs, 1, "attribute");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval out = gen_list(r);
    tval seen = graft__tpl_new_list(r->c, items->n, 0);
    for (size_t i = 0; i < items->n; i++) {
        tval key = item_key(r, items->items[i], attr, cs, at);
        if (!hashable(key))
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: unhashable type: '%s'", graft__tpl_type_name(key));
        bool dup = false;
        graft__tpl_charge(r, seen.u.list->n / 16, at);
        for (size_t k = 0; k < seen.u.list->n && !dup; k++)
            dup = graft__tpl_equal(seen.u.list->items[k], key);
        if (dup)
            continue;
        seen.u.list->items[seen.u.list->n++] = key;
        graft__tpl_list_push(r->c, out.u.list, items->items[i]);
    }
    return out;
}

static tval min_max(graft__tpl_render *r, tval v, tval *args, size_t n, graft__tpl_dict *kwargs,
                    const graft__tpl_node *at, bool want_max)
{
    bool cs = opt_bool(args, n, kwargs, 0, "case_sensitive");
    tval *attr = graft__tpl_arg(args, n, kwargs, 1, "attribute");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    if (items->n == 0)
        return graft__tpl_undef("min", 3);
    size_t best = 0;
    tval best_key = item_key(r, items->items[0], attr, cs, at);
    for (size_t i = 1; i < items->n; i++) {
        tval key = item_key(r, items->items[i], attr, cs, at);
        int c = graft__tpl_compare(r->c, key, best_key, at->line, at->col);
        if (want_max ? c > 0 : c < 0) {
            best = i;
            best_key = key;
        }
    }
    return items->items[best];
}

FILTER(f_min) { return min_max(r, v, args, n, kwargs, at, false); }
FILTER(f_max) { return min_max(r, v, args, n, kwargs, at, true); }

FILTER(f_sum)
{
    tval *attr = graft__tpl_arg(args, n, kwargs, 0, "attribute");
    tval *start = graft__tpl_arg(args, n, kwargs, 1, "start");
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval total = start ? *start : graft__tpl_int(0);
    for (size_t i = 0; i < items->n; i++) {
        tval item = attr && attr->kind != TV_NONE ? get_path(r, items->items[i], *attr, at)
                                                  : items->items[i];
        if (item.kind == TV_STR)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: unsupported operand type(s) for +: 'int' and 'str'");
        total = graft__tpl_binop(r, OP_ADD, total, item, at);
    }
    return total;
}

/* ---- select / map ------------------------------------------------------------------------ */

static tval select_common(graft__tpl_render *r, tval v, tval *args, size_t n,
                          graft__tpl_dict *kwargs, const graft__tpl_node *at, bool by_attr,
                          bool keep_if)
{
    size_t off = 0;
    tval attr = graft__tpl_none();
    if (by_attr) {
        if (n == 0)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "FilterArgumentError: Missing parameter for attribute name");
        attr = args[0];
        off = 1;
    }
    int test = -1;
    if (n > off) {
        tval name = args[off];
        if (name.kind != TV_STR || (test = graft__tpl_test_id(name.u.s, name.n)) < 0)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TemplateRuntimeError: No test named '%.*s'",
                            name.kind == TV_STR ? (int)name.n : 1,
                            name.kind == TV_STR ? name.u.s : "?");
        off++;
    }
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval out = gen_list(r);
    for (size_t i = 0; i < items->n; i++) {
        tval x = by_attr ? get_path(r, items->items[i], attr, at) : items->items[i];
        bool ok = test >= 0 ? graft__tpl_apply_test(r, test, x, args + off, n - off, kwargs, at)
                            : graft__tpl_truthy(x);
        if (ok == keep_if)
            graft__tpl_list_push(r->c, out.u.list, items->items[i]);
    }
    return out;
}

FILTER(f_select) { return select_common(r, v, args, n, kwargs, at, false, true); }
FILTER(f_reject) { return select_common(r, v, args, n, kwargs, at, false, false); }
FILTER(f_selectattr) { return select_common(r, v, args, n, kwargs, at, true, true); }
FILTER(f_rejectattr) { return select_common(r, v, args, n, kwargs, at, true, false); }

FILTER(f_map)
{
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, at->line, at->col);
    tval out = gen_list(r);
    tval *attr = kwargs ? graft__tpl_dict_find_str(kwargs, "attribute", 9) : NULL;
    if (n == 0 && attr != NULL) {
        tval *dflt = graft__tpl_dict_find_str(kwargs, "default", 7);
        for (size_t i = 0; i < items->n; i++) {
            tval x = get_path(r, items->items[i], *attr, at);
            if (dflt != NULL && dflt->kind != TV_NONE && x.kind == TV_UNDEF)
                x = *dflt;
            graft__tpl_list_push(r->c, out.u.list, x);
        }
        return out;
    }
    if (n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "FilterArgumentError: map requires a filter argument");
    int id = args[0].kind == TV_STR ? graft__tpl_filter_id(args[0].u.s, args[0].n) : -1;
    if (id < 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TemplateRuntimeError: No filter named '%.*s'",
                        args[0].kind == TV_STR ? (int)args[0].n : 1,
                        args[0].kind == TV_STR ? args[0].u.s : "?");
    for (size_t i = 0; i < items->n; i++)
        graft__tpl_list_push(r->c, out.u.list,
                             graft__tpl_apply_filter(r, id, items->items[i], args + 1, n - 1,
                                                     kwargs, at));
    return out;
}

/* ---- numbers ----------------------------------------------------------------------------- */

/* Python int(str) / float(str): optional whitespace and sign, underscores between digits. */
static bool parse_number_text(tval s, bool want_int, double *f, int64_t *i)
{
    char buf[128];
    size_t k = 0;
    tval t = graft__tpl_str_strip(NULL, s, NULL, true, true);
    if (t.n == 0 || t.n >= sizeof buf)
        return false;
    for (size_t j = 0; j < t.n; j++) {
        char ch = t.u.s[j];
        if (ch == '_') {
            if (j == 0 || j + 1 == t.n || !(t.u.s[j - 1] >= '0' && t.u.s[j - 1] <= '9') ||
                !(t.u.s[j + 1] >= '0' && t.u.s[j + 1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = ch;
    }
    buf[k] = '\0';
    char *end;
    if (want_int) {
        for (size_t j = (buf[0] == '-' || buf[0] == '+'); j < k; j++)
            if (buf[j] < '0' || buf[j] > '9')
                return false;
        if (k == 0 || ((buf[0] == '-' || buf[0] == '+') && k == 1))
            return false;
        *i = strtoll(buf, &end, 10);
        return *end == '\0';
    }
    *f = strtod(buf, &end);
    if (*end != '\0' || end == buf)
        return false;
    return !(buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'));
}

/* int(f): truncation; beyond 64 bits an overflow (Python would make a big integer). */
static tval float_to_int(graft__tpl_render *r, double f, const graft__tpl_node *at)
{
    if (!(f > -9223372036854775808.0 && f < 9223372036854775808.0))
        graft__tpl_fail(r->c, GRAFT_ERANGE, at->line, at->col,
                        "OverflowError: integer result beyond 64 bits");
    return graft__tpl_int((int64_t)f);
}

FILTER(f_int)
{
    tval *dflt = graft__tpl_arg(args, n, kwargs, 0, "default");
    tval fallback = dflt ? *dflt : graft__tpl_int(0);
    double f;
    int64_t i;
    switch (v.kind) {
    case TV_INT:
        return v;
    case TV_BOOL:
        return graft__tpl_int(v.u.b);
    case TV_FLOAT:
        if (!isfinite(v.u.f))
            return fallback;
        return float_to_int(r, v.u.f, at);
    case TV_STR:
        if (parse_number_text(v, true, &f, &i))
            return graft__tpl_int(i);
        if (parse_number_text(v, false, &f, &i) && isfinite(f))
            return float_to_int(r, f, at);
        return fallback;
    case TV_UNDEF:
        graft__tpl_undefined_error(r, v, at);
    default:
        return fallback;
    }
}

FILTER(f_float)
{
    tval *dflt = graft__tpl_arg(args, n, kwargs, 0, "default");
    tval fallback = dflt ? *dflt : graft__tpl_float(0.0);
    double f;
    int64_t i;
    switch (v.kind) {
    case TV_INT:
        return graft__tpl_float((double)v.u.i);
    case TV_BOOL:
        return graft__tpl_float(v.u.b);
    case TV_FLOAT:
        return v;
    case TV_STR:
        return parse_number_text(v, false, &f, &i) ? graft__tpl_float(f) : fallback;
    case TV_UNDEF:
        graft__tpl_undefined_error(r, v, at);
    default:
        return fallback;
    }
}

FILTER(f_abs)
{
    UNUSED_ARGS;
    if (v.kind == TV_INT && v.u.i != INT64_MIN)
        return graft__tpl_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.kind == TV_BOOL)
        return graft__tpl_int(v.u.b);
    if (v.kind == TV_FLOAT)
        return graft__tpl_float(fabs(v.u.f));
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                    "TypeError: bad operand type for abs(): '%s'", graft__tpl_type_name(v));
}

FILTER(f_round)
{
    tval *prec = graft__tpl_arg(args, n, kwargs, 0, "precision");
    tval *method = graft__tpl_arg(args, n, kwargs, 1, "method");
    int64_t p = prec && prec->kind == TV_INT ? prec->u.i : 0;
    if (p < 0 || p > 300)
        graft__tpl_fail(r->c, GRAFT_EUNSUPPORTED, at->line, at->col,
                        "round: precision %lld is not supported", (long long)p);
    const char *m = "common";
    if (method != NULL && method->kind == TV_STR) {
        if (method->n == 4 && memcmp(method->u.s, "ceil", 4) == 0)
            m = "ceil";
        else if (method->n == 5 && memcmp(method->u.s, "floor", 5) == 0)
            m = "floor";
        else if (!(method->n == 6 && memcmp(method->u.s, "common", 6) == 0))
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "FilterArgumentError: method must be common, ceil or floor");
    }
    if (v.kind != TV_INT && v.kind != TV_FLOAT && v.kind != TV_BOOL)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: type %s doesn't define __round__ method",
                        graft__tpl_type_name(v));
    double x = v.kind == TV_FLOAT ? v.u.f : v.kind == TV_INT ? (double)v.u.i : v.u.b;
    if (m[0] == 'c' && m[1] == 'o') {
        if (v.kind != TV_FLOAT)
            return v.kind == TV_BOOL ? graft__tpl_int(v.u.b) : v;
        if (!isfinite(x))
            return v;
        char buf[700]; /* 309 integer digits, the point and 300 decimals at most */
        snprintf(buf, sizeof buf, "%.*f", (int)p, x);
        return graft__tpl_float(strtod(buf, NULL));
    }
    double scale = pow(10.0, (double)p);
    return graft__tpl_float((m[0] == 'c' ? ceil(x * scale) : floor(x * scale)) / scale);
}

/* ---- the rest ---------------------------------------------------------------------------- */

FILTER(f_default)
{
    (void)r;
    (void)at;
    tval *dflt = graft__tpl_arg(args, n, kwargs, 0, "default_value");
    bool boolean = opt_bool(args, n, kwargs, 1, "boolean");
    if (v.kind == TV_UNDEF || (boolean && !graft__tpl_truthy(v)))
        return dflt ? *dflt : graft__tpl_cstr("");
    return v;
}

FILTER(f_attr)
{
    (void)kwargs;
    if (n < 1 || args[0].kind != TV_STR)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: attr() needs an attribute name");
    /* Python getattr only: a dict's keys are not its attributes. */
    switch (v.kind) {
    case TV_UNDEF:
        graft__tpl_undefined_error(r, v, at);
    case TV_STR:
    case TV_LIST:
    case TV_DICT:
        return graft__tpl_method(r, v, args[0].u.s, args[0].n);
    case TV_NS:
    case TV_LOOP:
        return graft__tpl_getattr(r, v, args[0].u.s, args[0].n);
    default:
        return graft__tpl_undef(args[0].u.s, args[0].n);
    }
}

FILTER(f_tojson)
{
    tval *ascii = graft__tpl_arg(args, n, kwargs, 0, "ensure_ascii");
    tval *indent = graft__tpl_arg(args, n, kwargs, 1, "indent");
    tval *seps = graft__tpl_arg(args, n, kwargs, 2, "separators");
    bool sort_keys = opt_bool(args, n, kwargs, 3, "sort_keys");
    const char *ind = NULL;
    size_t ind_n = 0;
    if (indent != NULL && indent->kind != TV_NONE) {
        if (indent->kind == TV_STR) {
            ind = indent->u.s;
            ind_n = indent->n;
        } else if (indent->kind == TV_INT || indent->kind == TV_BOOL) {
            int64_t w = indent->kind == TV_INT ? indent->u.i : indent->u.b;
            ind_n = w < 0 ? 0 : w > 4096 ? 4096 : (size_t)w;
            char *sp = graft__tpl_alloc(r->c, ind_n + 1);
            memset(sp, ' ', ind_n);
            ind = sp;
        } else {
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: indent must be an int or a string");
        }
    }
    tval item_sep = graft__tpl_none(), key_sep = graft__tpl_none();
    if (seps != NULL && seps->kind != TV_NONE) {
        if (seps->kind != TV_LIST || (seps->flags & TVF_GEN) || seps->u.list->n != 2 ||
            seps->u.list->items[0].kind != TV_STR || seps->u.list->items[1].kind != TV_STR)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: separators must be a pair of strings");
        item_sep = seps->u.list->items[0];
        key_sep = seps->u.list->items[1];
    }
    graft__tpl_buf b = {0};
    graft__tpl_to_json(r->c, &b, v, ascii != NULL && graft__tpl_truthy(*ascii), ind, ind_n,
                       item_sep, key_sep, sort_keys, at->line, at->col);
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

/* ---- table ------------------------------------------------------------------------------- */

typedef tval (*filter_fn)(graft__tpl_render *r, tval v, tval *args, size_t n,
                          graft__tpl_dict *kwargs, const graft__tpl_node *at);

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs},           {"attr", f_attr},         {"capitalize", f_capitalize},
    {"count", f_length},      {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},
    {"first", f_first},       {"float", f_float},       {"indent", f_indent},
    {"int", f_int},           {"items", f_items},       {"join", f_join},
    {"last", f_last},         {"length", f_length},     {"list", f_list},
    {"lower", f_lower},       {"map", f_map},           {"max", f_max},
    {"min", f_min},           {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},   {"round", f_round},
    {"safe", f_safe},         {"select", f_select},     {"selectattr", f_selectattr},
    {"sort", f_sort},         {"string", f_string},     {"sum", f_sum},
    {"title", f_title},       {"tojson", f_tojson},     {"trim", f_trim},
    {"unique", f_unique},     {"upper", f_upper},
};

int graft__tpl_filter_id(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (strlen(filters[i].name) == n && memcmp(filters[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

tval graft__tpl_apply_filter(graft__tpl_render *r, int id, tval v, tval *args, size_t n,
                             graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    return filters[id].fn(r, v, args, n, kwargs, at);
}
