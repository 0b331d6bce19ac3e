/*
 * value.c: the template layer's values and Python's rules for them.
 *
 * Values are what JSON gives (none, bools, ints, floats, strings, lists, dicts) plus what
 * Jinja adds (undefined, namespaces, macros, bound builtins, the loop variable). They are
 * small structs passed by value; lists and dicts point into the render arena and, apart
 * from namespaces, never change once built, so sharing them is safe. This file has their
 * constructors, dict lookup (insertion ordered; linear while small, then hashed),
 * truthiness, equality and ordering as Python defines them, len() and iteration.
 */
#include <string.h>

#include "template/template.h"

tval graft__tpl_undef(const char *name, size_t n)
{
    tval v = {.kind = TV_UNDEF, .n = n};
    v.u.s = name;
    return v;
}

tval graft__tpl_none(void)
{
    tval v = {.kind = TV_NONE};
    return v;
}

tval graft__tpl_bool(bool b)
{
    tval v = {.kind = TV_BOOL};
    v.u.b = b;
    return v;
}

tval graft__tpl_int(int64_t i)
{
    tval v = {.kind = TV_INT};
    v.u.i = i;
    return v;
}

tval graft__tpl_float(double f)
{
    tval v = {.kind = TV_FLOAT};
    v.u.f = f;
    return v;
}

tval graft__tpl_str(const char *s, size_t n)
{
    tval v = {.kind = TV_STR, .n = n};
    v.u.s = s;
    return v;
}

tval graft__tpl_cstr(const char *s)
{
    return graft__tpl_str(s, strlen(s));
}

tval graft__tpl_str_copy(graft__tpl_ctx *c, const char *s, size_t n)
{
    return graft__tpl_str(graft__tpl_strdup(c, s, n), n);
}

tval graft__tpl_new_list(graft__tpl_ctx *c, size_t cap, uint8_t flags)
{
    tval v = {.kind = TV_LIST, .flags = flags};
    v.u.list = graft__tpl_alloc(c, sizeof *v.u.list);
    if (cap > 0) {
        v.u.list->items = graft__tpl_alloc(c, cap * sizeof(tval));
        v.u.list->cap = cap;
    }
    return v;
}

tval graft__tpl_new_dict(graft__tpl_ctx *c, size_t cap)
{
    tval v = {.kind = TV_DICT};
    v.u.dict = graft__tpl_alloc(c, sizeof *v.u.dict);
    if (cap > 0) {
        v.u.dict->keys = graft__tpl_alloc(c, cap * sizeof(tval));
        v.u.dict->vals = graft__tpl_alloc(c, cap * sizeof(tval));
        v.u.dict->cap = cap;
    }
    return v;
}

void graft__tpl_list_push(graft__tpl_ctx *c, graft__tpl_list *l, tval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tval *items = graft__tpl_alloc(c, cap * sizeof *items);
        if (l->n)
            memcpy(items, l->items, l->n * sizeof *items);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
}

/* Dicts up to this many entries are searched linearly; bigger ones get a hash index, so
 * that a template looping over a big input dict is not quadratic. */
#define INDEX_FROM 16

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static bool key_is(const tval *k, const char *s, size_t n)
{
    return k->kind == TV_STR && k->n == n &&
           (n == 0 || (k->u.s[0] == s[0] && memcmp(k->u.s, s, n) == 0));
}

tval *graft__tpl_dict_find_str(const graft__tpl_dict *d, const char *s, size_t n)
{
    if (d->n_slots == 0) {
        for (size_t i = 0; i < d->n; i++)
            if (key_is(&d->keys[i], s, n))
                return &d->vals[i];
        return NULL;
    }
    size_t mask = d->n_slots - 1;
    for (size_t at = hash_bytes(s, n) & mask;; at = (at + 1) & mask) {
        uint32_t e = d->slots[at];
        if (e == 0)
            return NULL;
        if (key_is(&d->keys[e - 1], s, n))
            return &d->vals[e - 1];
    }
}

tval *graft__tpl_dict_find(const graft__tpl_dict *d, tval key)
{
    if (key.kind == TV_STR)
        return graft__tpl_dict_find_str(d, key.u.s, key.n);
    for (size_t i = 0; i < d->n; i++)
        if (graft__tpl_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

static void index_entry(graft__tpl_dict *d, size_t i)
{
    const tval *k = &d->keys[i];
    if (k->kind != TV_STR)
        return;
    size_t mask = d->n_slots - 1;
    size_t at = hash_bytes(k->u.s, k->n) & mask;
    while (d->slots[at] != 0)
        at = (at + 1) & mask;
    d->slots[at] = (uint32_t)(i + 1);
}

/* (Re)builds the index when the dict has outgrown it. */
static void reindex(graft__tpl_ctx *c, graft__tpl_dict *d)
{
    if (d->n < INDEX_FROM || d->n * 2 <= d->n_slots)
        return;
    if (d->n >= UINT32_MAX / 4)
        graft__tpl_fail(c, GRAFT_ECAPACITY, 0, 0, "template: dict too large");
    size_t slots = 64;
    while (slots < d->n * 4)
        slots *= 2;
    d->slots = graft__tpl_alloc(c, slots * sizeof *d->slots);
    d->n_slots = slots;
    for (size_t i = 0; i < d->n; i++)
        index_entry(d, i);
}

void graft__tpl_dict_set(graft__tpl_ctx *c, graft__tpl_dict *d, tval key, tval v)
{
    tval *old = graft__tpl_dict_find(d, key);
    if (old != NULL) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tval *keys = graft__tpl_alloc(c, cap * sizeof *keys);
        tval *vals = graft__tpl_alloc(c, cap * sizeof *vals);
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof *keys);
            memcpy(vals, d->vals, d->n * sizeof *vals);
        }
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = v;
    d->n++;
    if (d->n_slots != 0 && d->n * 2 <= d->n_slots)
        index_entry(d, d->n - 1);
    else
        reindex(c, d);
}

bool graft__tpl_truthy(tval v)
{
    switch (v.kind) {
    case TV_UNDEF:
    case TV_NONE:
        return false;
    case TV_BOOL:
        return v.u.b;
    case TV_INT:
        return v.u.i != 0;
    case TV_FLOAT:
        return v.u.f != 0.0;
    case TV_STR:
        return v.n != 0;
    case TV_LIST:
        return (v.flags & TVF_GEN) || v.u.list->n != 0;
    case TV_DICT:
        return v.u.dict->n != 0;
    default:
        return true;
    }
}

bool graft__tpl_is_number(tval v)
{
    return v.kind == TV_BOOL || v.kind == TV_INT || v.kind == TV_FLOAT;
}

double graft__tpl_as_double(tval v)
{
    return v.kind == TV_FLOAT ? v.u.f : v.kind == TV_INT ? (double)v.u.i : (double)v.u.b;
}

int64_t graft__tpl_as_int(tval v)
{
    return v.kind == TV_INT ? v.u.i : (int64_t)v.u.b;
}

bool graft__tpl_equal(tval a, tval b)
{
    if (graft__tpl_is_number(a) && graft__tpl_is_number(b)) {
        if (a.kind == TV_FLOAT || b.kind == TV_FLOAT)
            return graft__tpl_as_double(a) == graft__tpl_as_double(b);
        return graft__tpl_as_int(a) == graft__tpl_as_int(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_STR:
        return a.n == b.n && (a.n == 0 || memcmp(a.u.s, b.u.s, a.n) == 0);
    case TV_LIST: {
        if ((a.flags & TVF_TUPLE) != (b.flags & TVF_TUPLE) || (a.flags & TVF_GEN) ||
            (b.flags & TVF_GEN))
            return a.u.list == b.u.list;
        if (a.u.list->n != b.u.list->n)
            return false;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!graft__tpl_equal(a.u.list->items[i], b.u.list->items[i]))
                return false;
        return true;
    }
    case TV_DICT: {
        if (a.u.dict->n != b.u.dict->n)
            return false;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            tval *other = graft__tpl_dict_find(b.u.dict, a.u.dict->keys[i]);
            if (other == NULL || !graft__tpl_equal(a.u.dict->vals[i], *other))
                return false;
        }
        return true;
    }
    default:
        return a.u.s == b.u.s;
    }
}

const char *graft__tpl_type_name(tval v)
{
    switch (v.kind) {
    case TV_UNDEF:
        return "Undefined";
    case TV_NONE:
        return "NoneType";
    case TV_BOOL:
        return "bool";
    case TV_INT:
        return "int";
    case TV_FLOAT:
        return "float";
    case TV_STR:
        return "str";
    case TV_LIST:
        return v.flags & TVF_GEN ? "generator" : v.flags & TVF_TUPLE ? "tuple" : "list";
    case TV_DICT:
        return "dict";
    case TV_NS:
        return "Namespace";
    case TV_MACRO:
        return "Macro";
    case TV_FUNC:
        return "builtin_function_or_method";
    default:
        return "LoopContext";
    }
}

int graft__tpl_compare(graft__tpl_ctx *c, tval a, tval b, uint32_t line, uint32_t col)
{
    if (graft__tpl_is_number(a) && graft__tpl_is_number(b)) {
        if (a.kind == TV_FLOAT || b.kind == TV_FLOAT) {
            double x = graft__tpl_as_double(a), y = graft__tpl_as_double(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = graft__tpl_as_int(a), y = graft__tpl_as_int(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == TV_STR && b.kind == TV_STR) {
        size_t m = a.n < b.n ? a.n : b.n;
        int r = m ? memcmp(a.u.s, b.u.s, m) : 0;
        if (r != 0)
            return r < 0 ? -1 : 1;
        return a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
    }
    if (a.kind == TV_LIST && b.kind == TV_LIST && !((a.flags | b.flags) & TVF_GEN) &&
        (a.flags & TVF_TUPLE) == (b.flags & TVF_TUPLE)) {
        const graft__tpl_list *x = a.u.list, *y = b.u.list;
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (graft__tpl_equal(x->items[i], y->items[i]))
                continue;
            return graft__tpl_compare(c, x->items[i], y->items[i], line, col);
        }
        return x->n < y->n ? -1 : x->n > y->n ? 1 : 0;
    }
    graft__tpl_fail(c, GRAFT_EINVAL, line, col,
                    "TypeError: '<' not supported between instances of '%s' and '%s'",
                    graft__tpl_type_name(a), graft__tpl_type_name(b));
}

int64_t graft__tpl_length(graft__tpl_ctx *c, tval v, uint32_t line, uint32_t col)
{
    switch (v.kind) {
    case TV_UNDEF:
        if (v.flags & TVF_UNSAFE)
            break;
        return 0;
    case TV_STR:
        return (int64_t)graft__tpl_utf8_count(v.u.s, v.n);
    case TV_LIST:
        if (v.flags & TVF_GEN)
            break;
        return (int64_t)v.u.list->n;
    case TV_DICT:
        return (int64_t)v.u.dict->n;
    default:
        break;
    }
    graft__tpl_fail(c, GRAFT_EINVAL, line, col, "TypeError: object of type '%s' has no len()",
                    graft__tpl_type_name(v));
}

graft__tpl_list *graft__tpl_iterate(graft__tpl_ctx *c, tval v, uint32_t line, uint32_t col)
{
    switch (v.kind) {
    case TV_UNDEF:
        if (v.flags & TVF_UNSAFE)
            break;
        return graft__tpl_new_list(c, 0, 0).u.list;
    case TV_LIST:
        return v.u.list;
    case TV_DICT: {
        graft__tpl_list *l = graft__tpl_new_list(c, v.u.dict->n, 0).u.list;
        if (v.u.dict->n)
            memcpy(l->items, v.u.dict->keys, v.u.dict->n * sizeof(tval));
        l->n = v.u.dict->n;
        return l;
    }
    case TV_STR: {
        graft__tpl_list *l = graft__tpl_new_list(c, v.n, 0).u.list;
        for (size_t i = 0; i < v.n;) {
            size_t start = i;
            graft__tpl_utf8_next(v.u.s, v.n, &i);
            l->items[l->n++] = graft__tpl_str(v.u.s + start, i - start);
        }
        return l;
    }
    default:
        break;
    }
    graft__tpl_fail(c, GRAFT_EINVAL, line, col, "TypeError: '%s' object is not iterable",
                    graft__tpl_type_name(v));
}
