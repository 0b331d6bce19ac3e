/*
 * json.c: JSON in and out of template values.
 *
 * In: the render's variables come as JSON text, parsed with jansson (objects keep their
 * key order) and copied into the render arena. Out: the `tojson` filter is Python's
 * json.dumps(x, ensure_ascii, indent, separators, sort_keys), which is how Hugging Face
 * defines it for chat templates: the same escapes (only quotes, backslashes and control
 * characters unless ensure_ascii), the same float text, the same default separators
 * (", " and ": ", or "," and ": " once indent is given), and TypeError for what JSON cannot
 * hold (undefined, namespaces, macros, generators).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "template/template.h"

#define MAX_NEST 200

static tval from_jansson(graft__tpl_ctx *c, json_t *j, int depth)
{
    if (depth > MAX_NEST)
        graft__tpl_fail(c, GRAFT_EINVAL, 0, 0, "input: JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tval d = graft__tpl_new_dict(c, json_object_size(j));
        const char *key;
        json_t *value;
        json_object_foreach(j, key, value)
        {
            tval k = graft__tpl_str_copy(c, key, strlen(key));
            graft__tpl_dict_set(c, d.u.dict, k, from_jansson(c, value, depth + 1));
        }
        return d;
    }
    case JSON_ARRAY: {
        tval l = graft__tpl_new_list(c, json_array_size(j), 0);
        for (size_t i = 0; i < json_array_size(j); i++)
            l.u.list->items[l.u.list->n++] = from_jansson(c, json_array_get(j, i), depth + 1);
        return l;
    }
    case JSON_STRING:
        return graft__tpl_str_copy(c, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return graft__tpl_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return graft__tpl_float(json_real_value(j));
    case JSON_TRUE:
        return graft__tpl_bool(true);
    case JSON_FALSE:
        return graft__tpl_bool(false);
    default:
        return graft__tpl_none();
    }
}

tval graft__tpl_from_json(graft__tpl_ctx *c, const char *text, size_t len)
{
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (j == NULL)
        graft__tpl_fail(c, GRAFT_EINVAL, 0, 0, "input: line %d, column %d: %s", err.line,
                        err.column, err.text);
    /* A failure below jumps past json_decref: the entry point releases it then. */
    c->json_pending = j;
    tval v = from_jansson(c, j, 0);
    c->json_pending = NULL;
    json_decref(j);
    return v;
}

void graft__tpl_json_release(graft__tpl_ctx *c)
{
    if (c->json_pending != NULL)
        json_decref(c->json_pending);
    c->json_pending = NULL;
}

/* ---- json.dumps ------------------------------------------------------------------------ */

typedef struct dumper {
    graft__tpl_ctx *c;
    graft__tpl_buf *b;
    bool ensure_ascii, sort_keys;
    const char *indent;
    size_t indent_n;
    tval item_sep, key_sep;
    uint32_t line, col;
} dumper;

static void dump_str(dumper *d, const char *s, size_t n)
{
    graft__tpl_ctx *c = d->c;
    graft__tpl_buf_addc(c, d->b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (ch < 0x7f || (!d->ensure_ascii))) {
            i++;
            continue;
        }
        size_t start = i;
        uint32_t cp = ch < 0x80 ? (i++, ch) : graft__tpl_utf8_next(s, n, &i);
        graft__tpl_buf_add(c, d->b, s + run, start - run);
        run = i;
        switch (cp) {
        case '"': graft__tpl_buf_add(c, d->b, "\\\"", 2); break;
        case '\\': graft__tpl_buf_add(c, d->b, "\\\\", 2); break;
        case '\n': graft__tpl_buf_add(c, d->b, "\\n", 2); break;
        case '\r': graft__tpl_buf_add(c, d->b, "\\r", 2); break;
        case '\t': graft__tpl_buf_add(c, d->b, "\\t", 2); break;
        case '\b': graft__tpl_buf_add(c, d->b, "\\b", 2); break;
        case '\f': graft__tpl_buf_add(c, d->b, "\\f", 2); break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                graft__tpl_buf_addf(c, d->b, "\\u%04x\\u%04x", 0xd800 | (v >> 10),
                                    0xdc00 | (v & 0x3ff));
            } else {
                graft__tpl_buf_addf(c, d->b, "\\u%04x", cp);
            }
        }
    }
    graft__tpl_buf_add(c, d->b, s + run, n - run);
    graft__tpl_buf_addc(c, d->b, '"');
}

static void dump_float(dumper *d, double f)
{
    char num[40];
    if (isnan(f))
        strcpy(num, "NaN");
    else if (isinf(f))
        strcpy(num, f < 0 ? "-Infinity" : "Infinity");
    else
        graft__tpl_float_repr(f, num);
    graft__tpl_buf_add(d->c, d->b, num, strlen(num));
}

static void newline_indent(dumper *d, int level)
{
    graft__tpl_buf_addc(d->c, d->b, '\n');
    for (int i = 0; i < level; i++)
        graft__tpl_buf_add(d->c, d->b, d->indent, d->indent_n);
}

static _Noreturn void not_serializable(dumper *d, tval v)
{
    graft__tpl_fail(d->c, GRAFT_EINVAL, d->line, d->col,
                    "TypeError: Object of type %s is not JSON serializable",
                    graft__tpl_type_name(v));
}

/* The text of a dict key as json.dumps converts it. */
static tval key_text(dumper *d, tval k)
{
    switch (k.kind) {
    case TV_STR:
        return k;
    case TV_BOOL:
        return graft__tpl_cstr(k.u.b ? "true" : "false");
    case TV_NONE:
        return graft__tpl_cstr("null");
    case TV_INT:
    case TV_FLOAT:
        return graft__tpl_stringify(d->c, k);
    default:
        graft__tpl_fail(d->c, GRAFT_EINVAL, d->line, d->col,
                        "TypeError: keys must be str, int, float, bool or None, not %s",
                        graft__tpl_type_name(k));
    }
}

static void dump(dumper *d, tval v, int level);

/* Stable merge sort of order[0, n) by keys (Python's sorted(dct.items())). */
static void sort_keys(dumper *d, const tval *keys, size_t *order, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t half = n / 2, i = 0, j = half, k = 0;
    sort_keys(d, keys, order, tmp, half);
    sort_keys(d, keys, order + half, tmp, n - half);
    while (i < half && j < n)
        tmp[k++] = graft__tpl_compare(d->c, keys[order[j]], keys[order[i]], d->line, d->col) < 0
                       ? order[j++]
                       : order[i++];
    while (i < half)
        tmp[k++] = order[i++];
    while (j < n)
        tmp[k++] = order[j++];
    memcpy(order, tmp, n * sizeof *order);
}

static void dump_dict(dumper *d, const graft__tpl_dict *dict, int level)
{
    graft__tpl_ctx *c = d->c;
    if (dict->n == 0) {
        graft__tpl_buf_add(c, d->b, "{}", 2);
        return;
    }
    size_t *order = graft__tpl_alloc(c, dict->n * sizeof *order);
    for (size_t i = 0; i < dict->n; i++)
        order[i] = i;
    if (d->sort_keys) {
        size_t *tmp = graft__tpl_alloc(c, dict->n * sizeof *tmp);
        sort_keys(d, dict->keys, order, tmp, dict->n);
    }
    graft__tpl_buf_addc(c, d->b, '{');
    for (size_t i = 0; i < dict->n; i++) {
        if (i)
            graft__tpl_buf_add(c, d->b, d->item_sep.u.s, d->item_sep.n);
        if (d->indent)
            newline_indent(d, level + 1);
        tval k = key_text(d, dict->keys[order[i]]);
        dump_str(d, k.u.s, k.n);
        graft__tpl_buf_add(c, d->b, d->key_sep.u.s, d->key_sep.n);
        dump(d, dict->vals[order[i]], level + 1);
    }
    if (d->indent)
        newline_indent(d, level);
    graft__tpl_buf_addc(c, d->b, '}');
}

static void dump(dumper *d, tval v, int level)
{
    graft__tpl_ctx *c = d->c;
    if (level > MAX_NEST)
        graft__tpl_fail(c, GRAFT_EINVAL, d->line, d->col,
                        "RecursionError: value nested too deeply for tojson");
    switch (v.kind) {
    case TV_NONE:
        graft__tpl_buf_add(c, d->b, "null", 4);
        return;
    case TV_BOOL:
        graft__tpl_buf_add(c, d->b, v.u.b ? "true" : "false", v.u.b ? 4 : 5);
        return;
    case TV_INT:
        graft__tpl_buf_addf(c, d->b, "%lld", (long long)v.u.i);
        return;
    case TV_FLOAT:
        dump_float(d, v.u.f);
        return;
    case TV_STR:
        dump_str(d, v.u.s, v.n);
        return;
    case TV_LIST: {
        if (v.flags & TVF_GEN)
            not_serializable(d, v);
        const graft__tpl_list *l = v.u.list;
        if (l->n == 0) {
            graft__tpl_buf_add(c, d->b, "[]", 2);
            return;
        }
        graft__tpl_buf_addc(c, d->b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                graft__tpl_buf_add(c, d->b, d->item_sep.u.s, d->item_sep.n);
            if (d->indent)
                newline_indent(d, level + 1);
            dump(d, l->items[i], level + 1);
        }
        if (d->indent)
            newline_indent(d, level);
        graft__tpl_buf_addc(c, d->b, ']');
        return;
    }
    case TV_DICT:
        dump_dict(d, v.u.dict, level);
        return;
    default:
        not_serializable(d, v);
    }
}

void graft__tpl_to_json(graft__tpl_ctx *c, graft__tpl_buf *b, tval v, bool ensure_ascii,
                        const char *indent, size_t indent_n, tval item_sep, tval key_sep,
                        bool sort_keys, uint32_t line, uint32_t col)
{
    dumper d = {c, b, ensure_ascii, sort_keys, indent, indent_n, item_sep, key_sep, line, col};
    if (d.item_sep.kind != TV_STR)
        d.item_sep = graft__tpl_cstr(indent ? "," : ", ");
    if (d.key_sep.kind != TV_STR)
        d.key_sep = graft__tpl_cstr(": ");
    dump(&d, v, 0);
}
