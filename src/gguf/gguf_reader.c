/*
 * gguf_reader.c: the validating GGUF reader (see gguf.h for the byte layout).
 *
 * DESIGN
 * The file is mapped read-only (or bytes in memory are borrowed) and parsed once, front to
 * back, by a cursor that checks every count, length and extent against the bytes that remain
 * before using it, with overflow-safe arithmetic. Nothing is trusted later: once open
 * succeeds, every string, array and tensor the reader exposes lies inside the mapping.
 *
 * What is allocated: the kv table, the tensor table, one table per string array, one table
 * per array of arrays, and two hash indexes (keys, tensor names). Every count is first
 * bounded by the bytes left divided by the smallest encoding of one element, so a table is
 * at most a small multiple of the file size: a hostile header cannot make us allocate big.
 * Numeric array data and strings stay in the mapping. Opening touches the header only, never
 * the tensor data pages.
 *
 * Errors: each failure formats "gguf: <what is wrong, with the numbers> (offset N)", N being
 * the file offset of the field concerned.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

#define MAX_ARRAY_DEPTH 8  /* arrays nested deeper than this are refused */
#define NAME_SHOWN 96      /* longest part of a key or tensor name quoted in a message */

/* A table allocated while parsing (string arrays, nested arrays), freed at close. */
typedef union owned_chunk {
    union owned_chunk *next;
    max_align_t align;
} owned_chunk;

/* Open-addressing index from names to positions in a table (slot value = position + 1). */
typedef struct name_index {
    uint64_t *slots;
    uint64_t mask;
} name_index;

struct graft__gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    graft__gguf_kv *kvs;
    uint64_t n_tensors;
    graft__gguf_tensor *tensors;
    name_index kv_index;
    name_index tensor_index;
    owned_chunk *chunks;
};

/* Where a tensor's data lies, for the extent and overlap checks after all infos are read. */
typedef struct tensor_extent {
    uint64_t begin; /* absolute file offsets */
    uint64_t end;
    uint64_t index;
    uint64_t field; /* file offset of the tensor's `offset` field */
} tensor_extent;

typedef struct reader {
    graft__gguf *g;
    uint64_t pos;
    char **errmsg;
    char ctx[160]; /* "key 'general.name'" or "tensor 'output.weight'", for messages */
} reader;

/* ---- messages ---------------------------------------------------------------------- */

static int fail_at(reader *r, int status, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(reader *r, int status, uint64_t offset, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return graft__errmsg(r->errmsg, status, "gguf: %s (offset %llu)", what,
                         (unsigned long long)offset);
}

static int fail_nomem(reader *r)
{
    return graft__errmsg(r->errmsg, GRAFT_ENOMEM, "gguf: out of memory");
}

/* Sets the message context to `kind 'name'` (the name cut to NAME_SHOWN bytes). */
static void set_ctx(reader *r, const char *kind, graft__gguf_str name)
{
    int shown = name.len > NAME_SHOWN ? NAME_SHOWN : (int)name.len;
    snprintf(r->ctx, sizeof r->ctx, "%s '%.*s%s'", kind, shown, name.ptr,
             name.len > NAME_SHOWN ? "..." : "");
}

/* ---- the cursor -------------------------------------------------------------------- */

static uint64_t bytes_left(const reader *r)
{
    return r->g->size - r->pos;
}

/* The "truncated <prefix><what>" error for a field of n bytes at the cursor. */
static int truncated(reader *r, uint64_t n, const char *prefix, const char *fmt, va_list ap)
{
    char what[256];
    vsnprintf(what, sizeof what, fmt, ap);
    return fail_at(r, GRAFT_EFORMAT, r->pos, "truncated %s%s: need %llu bytes, %llu left", prefix,
                   what, (unsigned long long)n, (unsigned long long)bytes_left(r));
}

/* In the readers below, the printf-style `fmt` names the field for the error message and is
 * formatted only on failure: a vocabulary of 150k strings costs no formatting. */

/* Fails with "truncated <what>" unless n bytes remain. */
static int need(reader *r, uint64_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int need(reader *r, uint64_t n, const char *fmt, ...)
{
    if (bytes_left(r) >= n)
        return GRAFT_OK;
    va_list ap;
    va_start(ap, fmt);
    int rc = truncated(r, n, "", fmt, ap);
    va_end(ap);
    return rc;
}

static const uint8_t *here(const reader *r)
{
    return r->g->base + r->pos;
}

static uint64_t take_le(reader *r, unsigned width)
{
    uint64_t v = 0;
    const uint8_t *p = here(r);
    for (unsigned i = 0; i < width; i++)
        v |= (uint64_t)p[i] << (8 * i);
    r->pos += width;
    return v;
}

static int read_fixed(reader *r, unsigned width, uint64_t *out, const char *fmt, va_list ap)
{
    if (bytes_left(r) < width)
        return truncated(r, width, "", fmt, ap);
    *out = take_le(r, width);
    return GRAFT_OK;
}

static int read_u32(reader *r, uint32_t *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int read_u32(reader *r, uint32_t *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    uint64_t v = 0;
    int rc = read_fixed(r, 4, &v, fmt, ap);
    va_end(ap);
    *out = (uint32_t)v;
    return rc;
}

static int read_u64(reader *r, uint64_t *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int read_u64(reader *r, uint64_t *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = read_fixed(r, 8, out, fmt, ap);
    va_end(ap);
    return rc;
}

/* A gguf_string: u64 length, then that many bytes (checked to be present). */
static int read_str(reader *r, graft__gguf_str *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int read_str(reader *r, graft__gguf_str *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = GRAFT_OK;
    uint64_t len = 0;
    if (bytes_left(r) < 8)
        rc = truncated(r, 8, "length of ", fmt, ap);
    else if ((len = take_le(r, 8)) > bytes_left(r))
        rc = truncated(r, len, "", fmt, ap);
    va_end(ap);
    if (rc != GRAFT_OK)
        return rc;
    out->ptr = (const char *)here(r);
    out->len = len;
    r->pos += len;
    return GRAFT_OK;
}

/* ---- tables owned by the reader ---------------------------------------------------- */

/* A zeroed table of count * size bytes, freed at close (the caller bounded count). */
static void *alloc_owned(graft__gguf *g, uint64_t count, size_t size)
{
    size_t bytes, total;
    if (count > SIZE_MAX || !graft__mul_size((size_t)count, size, &bytes) ||
        !graft__add_size(bytes, sizeof(owned_chunk), &total))
        return NULL;
    owned_chunk *c = graft__calloc(1, total);
    if (c == NULL)
        return NULL;
    c->next = g->chunks;
    g->chunks = c;
    return c + 1;
}

static uint64_t hash_name(const char *p, uint64_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < len; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int index_init(name_index *ix, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = graft__calloc((size_t)cap, sizeof *ix->slots);
    if (ix->slots == NULL)
        return GRAFT_ENOMEM;
    ix->mask = cap - 1;
    return GRAFT_OK;
}

/* The slot holding `name`, or the empty slot where it would go. names(i) gives entry i. */
static uint64_t *index_slot(const name_index *ix, const char *name, uint64_t len,
                            const graft__gguf_str *(*name_of)(const graft__gguf *, uint64_t),
                            const graft__gguf *g)
{
    uint64_t i = hash_name(name, len) & ix->mask;
    for (;;) {
        uint64_t *slot = &ix->slots[i];
        if (*slot == 0)
            return slot;
        const graft__gguf_str *s = name_of(g, *slot - 1);
        if (s->len == len && memcmp(s->ptr, name, len) == 0)
            return slot;
        i = (i + 1) & ix->mask;
    }
}

static const graft__gguf_str *kv_name(const graft__gguf *g, uint64_t i)
{
    return &g->kvs[i].key;
}

static const graft__gguf_str *tensor_name(const graft__gguf *g, uint64_t i)
{
    return &g->tensors[i].name;
}

/* ---- metadata values --------------------------------------------------------------- */

static const char *const vtype_names[GRAFT_GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

/* Bytes of a scalar of type t; 0 for STRING and ARRAY. */
static unsigned scalar_size(graft__gguf_vtype t)
{
    static const unsigned sizes[GRAFT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return sizes[t];
}

/* The fewest bytes one value of type t takes in the file (string: its length; array: its
 * element type and count). */
static unsigned min_encoded_size(graft__gguf_vtype t)
{
    if (t == GRAFT_GGUF_STRING)
        return 8;
    if (t == GRAFT_GGUF_ARRAY)
        return 12;
    return scalar_size(t);
}

/* A value type field; `kind` ("value type", "array element type") names it in messages. */
static int read_vtype(reader *r, graft__gguf_vtype *out, const char *kind)
{
    uint64_t at = r->pos;
    uint32_t t;
    int rc = read_u32(r, &t, "%s of %s", kind, r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    if (t >= GRAFT_GGUF_VTYPE_COUNT)
        return fail_at(r, GRAFT_EFORMAT, at, "%s: unknown value type %u", r->ctx, t);
    *out = (graft__gguf_vtype)t;
    return GRAFT_OK;
}

static int64_t sign_extend(uint64_t v, unsigned width)
{
    unsigned shift = 64 - 8 * width;
    return (int64_t)(v << shift) >> shift;
}

static int check_bool(reader *r, uint8_t b, uint64_t at)
{
    if (b > 1)
        return fail_at(r, GRAFT_EFORMAT, at, "%s: bool value %u is not 0 or 1", r->ctx, b);
    return GRAFT_OK;
}

static int read_scalar(reader *r, graft__gguf_value *val)
{
    unsigned width = scalar_size(val->type);
    uint64_t at = r->pos;
    int rc = need(r, width, "%s value of %s", vtype_names[val->type], r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    uint64_t raw = take_le(r, width);
    switch (val->type) {
    case GRAFT_GGUF_INT8:
    case GRAFT_GGUF_INT16:
    case GRAFT_GGUF_INT32:
    case GRAFT_GGUF_INT64:
        val->v.i64 = sign_extend(raw, width);
        break;
    case GRAFT_GGUF_FLOAT32: {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        val->v.f64 = f;
        break;
    }
    case GRAFT_GGUF_FLOAT64:
        memcpy(&val->v.f64, &raw, sizeof raw);
        break;
    case GRAFT_GGUF_BOOL:
        val->v.u64 = raw;
        return check_bool(r, (uint8_t)raw, at);
    default:
        val->v.u64 = raw;
        break;
    }
    return GRAFT_OK;
}

static int read_array(reader *r, graft__gguf_array *arr, unsigned depth);

static int read_string_elems(reader *r, graft__gguf_array *arr)
{
    graft__gguf_str *strs = alloc_owned(r->g, arr->count, sizeof *strs);
    if (strs == NULL)
        return fail_nomem(r);
    for (uint64_t i = 0; i < arr->count; i++) {
        int rc = read_str(r, &strs[i], "string element %llu of %s", (unsigned long long)i,
                          r->ctx);
        if (rc != GRAFT_OK)
            return rc;
    }
    arr->strings = strs;
    return GRAFT_OK;
}

static int read_array_elems(reader *r, graft__gguf_array *arr, unsigned depth)
{
    graft__gguf_value *items = alloc_owned(r->g, arr->count, sizeof *items);
    if (items == NULL)
        return fail_nomem(r);
    for (uint64_t i = 0; i < arr->count; i++) {
        items[i].type = GRAFT_GGUF_ARRAY;
        int rc = read_array(r, &items[i].v.arr, depth + 1);
        if (rc != GRAFT_OK)
            return rc;
    }
    arr->items = items;
    return GRAFT_OK;
}

/* Numeric and bool elements stay in the mapping; bools are checked to be 0 or 1. */
static int read_numeric_elems(reader *r, graft__gguf_array *arr)
{
    arr->raw = here(r);
    uint64_t bytes = arr->count * scalar_size(arr->elem_type);
    if (arr->elem_type == GRAFT_GGUF_BOOL) {
        for (uint64_t i = 0; i < arr->count; i++) {
            int rc = check_bool(r, here(r)[i], r->pos + i);
            if (rc != GRAFT_OK)
                return rc;
        }
    }
    r->pos += bytes;
    return GRAFT_OK;
}

/* array = u32 elem_type | u64 count | elements. depth: 1 for a kv's own array, one more
 * per level of nesting. */
static int read_array(reader *r, graft__gguf_array *arr, unsigned depth)
{
    uint64_t at = r->pos;
    if (depth > MAX_ARRAY_DEPTH)
        return fail_at(r, GRAFT_EFORMAT, at, "%s: arrays nested deeper than %d", r->ctx,
                       MAX_ARRAY_DEPTH);
    int rc = read_vtype(r, &arr->elem_type, "array element type");
    if (rc != GRAFT_OK)
        return rc;
    uint64_t count_at = r->pos;
    rc = read_u64(r, &arr->count, "array count of %s", r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    unsigned min = min_encoded_size(arr->elem_type);
    if (arr->count > bytes_left(r) / min)
        return fail_at(r, GRAFT_EFORMAT, count_at,
                       "%s: array count %llu of %s needs at least %llu bytes per element, "
                       "%llu bytes left",
                       r->ctx, (unsigned long long)arr->count, vtype_names[arr->elem_type],
                       (unsigned long long)min, (unsigned long long)bytes_left(r));
    if (arr->count == 0)
        return GRAFT_OK;
    if (arr->elem_type == GRAFT_GGUF_STRING)
        return read_string_elems(r, arr);
    if (arr->elem_type == GRAFT_GGUF_ARRAY)
        return read_array_elems(r, arr, depth);
    return read_numeric_elems(r, arr);
}

static int read_value(reader *r, graft__gguf_value *val)
{
    int rc = read_vtype(r, &val->type, "value type");
    if (rc != GRAFT_OK)
        return rc;
    if (val->type == GRAFT_GGUF_STRING)
        return read_str(r, &val->v.str, "string value of %s", r->ctx);
    if (val->type == GRAFT_GGUF_ARRAY)
        return read_array(r, &val->v.arr, 1);
    return read_scalar(r, val);
}

/* ---- header and key/value section -------------------------------------------------- */

static int read_header(reader *r, uint64_t *n_tensors, uint64_t *n_kv)
{
    int rc = need(r, 4, "header magic");
    if (rc != GRAFT_OK)
        return rc;
    if (memcmp(here(r), "GGUF", 4) != 0) {
        const uint8_t *m = here(r);
        return fail_at(r, GRAFT_EFORMAT, 0,
                       "bad magic %02x %02x %02x %02x, expected 'GGUF' (47 47 55 46): "
                       "not a GGUF file", m[0], m[1], m[2], m[3]);
    }
    r->pos += 4;
    rc = read_u32(r, &r->g->version, "%s", "header version");
    if (rc != GRAFT_OK)
        return rc;
    uint32_t v = r->g->version;
    if (v == 0)
        return fail_at(r, GRAFT_EFORMAT, 4, "bad GGUF version 0");
    if (v == 1)
        return fail_at(r, GRAFT_EUNSUPPORTED, 4,
                       "GGUF version 1 is not supported (only versions 2 and 3)");
    if (v > 3)
        return fail_at(r, GRAFT_EUNSUPPORTED, 4,
                       "GGUF version %u is not supported (only versions 2 and 3)%s", v,
                       __builtin_bswap32(v) <= 3 ? "; the file looks big-endian" : "");
    if ((rc = read_u64(r, n_tensors, "%s", "header tensor count")) != GRAFT_OK ||
        (rc = read_u64(r, n_kv, "%s", "header kv count")) != GRAFT_OK)
        return rc;
    /* Smallest kv: key length, empty key, type, one byte. Smallest tensor info: name
     * length, empty name, n_dims, one dim, type, offset. */
    if (*n_kv > bytes_left(r) / 13)
        return fail_at(r, GRAFT_EFORMAT, 16,
                       "kv count %llu is too large: %llu bytes left hold at most %llu",
                       (unsigned long long)*n_kv, (unsigned long long)bytes_left(r),
                       (unsigned long long)(bytes_left(r) / 13));
    if (*n_tensors > bytes_left(r) / 32)
        return fail_at(r, GRAFT_EFORMAT, 8,
                       "tensor count %llu is too large: %llu bytes left hold at most %llu",
                       (unsigned long long)*n_tensors, (unsigned long long)bytes_left(r),
                       (unsigned long long)(bytes_left(r) / 32));
    return GRAFT_OK;
}

/* general.alignment, when present, must be a UINT32 power of two. */
static int apply_alignment(reader *r, const graft__gguf_kv *kv)
{
    if (!graft__gguf_str_eq(kv->key, "general.alignment"))
        return GRAFT_OK;
    if (kv->value.type != GRAFT_GGUF_UINT32)
        return fail_at(r, GRAFT_EFORMAT, kv->offset,
                       "general.alignment must be of type UINT32, not %s",
                       vtype_names[kv->value.type]);
    uint64_t a = kv->value.v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return fail_at(r, GRAFT_EFORMAT, kv->offset,
                       "general.alignment %llu is not a power of two", (unsigned long long)a);
    r->g->alignment = (uint32_t)a;
    return GRAFT_OK;
}

static int read_kv(reader *r, uint64_t i)
{
    graft__gguf *g = r->g;
    graft__gguf_kv *kv = &g->kvs[i];
    kv->offset = r->pos;
    snprintf(r->ctx, sizeof r->ctx, "kv %llu", (unsigned long long)i);
    int rc = read_str(r, &kv->key, "key of %s", r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    set_ctx(r, "key", kv->key);
    uint64_t *slot = index_slot(&g->kv_index, kv->key.ptr, kv->key.len, kv_name, g);
    if (*slot != 0)
        return fail_at(r, GRAFT_EFORMAT, kv->offset, "duplicate %s (first at offset %llu)",
                       r->ctx, (unsigned long long)g->kvs[*slot - 1].offset);
    rc = read_value(r, &kv->value);
    if (rc != GRAFT_OK)
        return rc;
    *slot = i + 1;
    return apply_alignment(r, kv);
}

static int read_kvs(reader *r)
{
    graft__gguf *g = r->g;
    if (g->n_kv > 0) {
        g->kvs = graft__calloc((size_t)g->n_kv, sizeof *g->kvs);
        if (g->kvs == NULL)
            return fail_nomem(r);
    }
    if (index_init(&g->kv_index, g->n_kv) != GRAFT_OK)
        return fail_nomem(r);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        int rc = read_kv(r, i);
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

/* ---- tensor infos ------------------------------------------------------------------ */

static int read_dims(reader *r, graft__gguf_tensor *t)
{
    uint64_t at = r->pos;
    int rc = read_u32(r, &t->n_dims, "dimension count of %s", r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    if (t->n_dims == 0 || t->n_dims > GRAFT_GGUF_MAX_DIMS)
        return fail_at(r, GRAFT_EFORMAT, at, "%s has %u dimensions, must be 1 to %d", r->ctx,
                       t->n_dims, GRAFT_GGUF_MAX_DIMS);
    t->n_elems = 1;
    for (uint32_t d = 0; d < GRAFT_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        at = r->pos;
        if ((rc = read_u64(r, &t->ne[d], "dimension %u of %s", d, r->ctx)) != GRAFT_OK)
            return rc;
        if (t->ne[d] == 0)
            return fail_at(r, GRAFT_EFORMAT, at, "%s dimension %u is 0", r->ctx, d);
        if (__builtin_mul_overflow(t->n_elems, t->ne[d], &t->n_elems) ||
            t->n_elems > (uint64_t)INT64_MAX)
            return fail_at(r, GRAFT_EFORMAT, at,
                           "%s element count overflows at dimension %u (%llu)", r->ctx, d,
                           (unsigned long long)t->ne[d]);
    }
    return GRAFT_OK;
}

static int read_tensor_type(reader *r, graft__gguf_tensor *t)
{
    uint64_t at = r->pos;
    int rc = read_u32(r, &t->type, "type of %s", r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    const graft__type_traits *tt = graft__type_traits_of(t->type);
    if (tt == NULL)
        return fail_at(r, GRAFT_EUNSUPPORTED, at, "%s has unknown tensor type %u", r->ctx,
                       t->type);
    if (t->ne[0] % tt->block_elems != 0)
        return fail_at(r, GRAFT_EFORMAT, at,
                       "%s row length %llu is not a multiple of the block size %u of type %s",
                       r->ctx, (unsigned long long)t->ne[0], tt->block_elems, tt->name);
    uint64_t row = graft__type_row_bytes(t->type, t->ne[0]);
    if (row == 0 || __builtin_mul_overflow(row, t->n_elems / t->ne[0], &t->n_bytes))
        return fail_at(r, GRAFT_EFORMAT, at, "%s byte size overflows", r->ctx);
    return GRAFT_OK;
}

static int read_tensor_info(reader *r, uint64_t i, tensor_extent *ext)
{
    graft__gguf *g = r->g;
    graft__gguf_tensor *t = &g->tensors[i];
    uint64_t at = r->pos;
    snprintf(r->ctx, sizeof r->ctx, "tensor %llu", (unsigned long long)i);
    int rc = read_str(r, &t->name, "name of %s", r->ctx);
    if (rc != GRAFT_OK)
        return rc;
    set_ctx(r, "tensor", t->name);
    uint64_t *slot = index_slot(&g->tensor_index, t->name.ptr, t->name.len, tensor_name, g);
    if (*slot != 0)
        return fail_at(r, GRAFT_EFORMAT, at, "duplicate tensor name: %s is also tensor %llu",
                       r->ctx, (unsigned long long)(*slot - 1));
    if ((rc = read_dims(r, t)) != GRAFT_OK || (rc = read_tensor_type(r, t)) != GRAFT_OK)
        return rc;
    ext->field = r->pos;
    if ((rc = read_u64(r, &t->offset, "data offset of %s", r->ctx)) != GRAFT_OK)
        return rc;
    if (t->offset % g->alignment != 0)
        return fail_at(r, GRAFT_EFORMAT, ext->field,
                       "%s data offset %llu is not a multiple of the alignment %u", r->ctx,
                       (unsigned long long)t->offset, g->alignment);
    ext->index = i;
    *slot = i + 1;
    return GRAFT_OK;
}

/* The data section starts at the first aligned offset after the tensor infos. A file
 * without tensors may end before it (writers need not pad an empty data section). */
static int place_data_section(reader *r)
{
    graft__gguf *g = r->g;
    uint64_t a = g->alignment;
    uint64_t start;
    if (__builtin_add_overflow(r->pos, a - 1, &start))
        start = UINT64_MAX;
    start = start / a * a;
    if (g->n_tensors > 0 && start > g->size)
        return fail_at(r, GRAFT_EFORMAT, r->pos,
                       "truncated padding: the data section would start at %llu, past the "
                       "end of the file (size %llu)",
                       (unsigned long long)start, (unsigned long long)g->size);
    g->data_offset = start;
    return GRAFT_OK;
}

/* By start, then by position in the file, so the tensor named in an overlap is stable. */
static int extent_cmp(const void *a, const void *b)
{
    const tensor_extent *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Every tensor lies inside the file, and no two tensors share a byte. */
static int check_extents(reader *r, tensor_extent *ext)
{
    graft__gguf *g = r->g;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        graft__gguf_tensor *t = &g->tensors[ext[i].index];
        set_ctx(r, "tensor", t->name);
        if (__builtin_add_overflow(g->data_offset, t->offset, &ext[i].begin) ||
            __builtin_add_overflow(ext[i].begin, t->n_bytes, &ext[i].end))
            return fail_at(r, GRAFT_EFORMAT, ext[i].field,
                           "%s data offset %llu + size %llu overflows", r->ctx,
                           (unsigned long long)t->offset, (unsigned long long)t->n_bytes);
        if (ext[i].end > g->size)
            return fail_at(r, GRAFT_EFORMAT, ext[i].field,
                           "%s data [%llu, %llu) extends past end of file (size %llu)", r->ctx,
                           (unsigned long long)ext[i].begin, (unsigned long long)ext[i].end,
                           (unsigned long long)g->size);
        t->data = g->base + ext[i].begin;
    }
    if (g->n_tensors > 1)
        qsort(ext, (size_t)g->n_tensors, sizeof *ext, extent_cmp);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        if (ext[i].begin >= ext[i - 1].end)
            continue;
        const graft__gguf_tensor *a = &g->tensors[ext[i - 1].index];
        set_ctx(r, "tensor", g->tensors[ext[i].index].name);
        int shown = a->name.len > NAME_SHOWN ? NAME_SHOWN : (int)a->name.len;
        return fail_at(r, GRAFT_EFORMAT, ext[i].field,
                       "%s data [%llu, %llu) overlaps tensor '%.*s' data [%llu, %llu)",
                       r->ctx, (unsigned long long)ext[i].begin,
                       (unsigned long long)ext[i].end, shown, a->name.ptr,
                       (unsigned long long)ext[i - 1].begin,
                       (unsigned long long)ext[i - 1].end);
    }
    return GRAFT_OK;
}

static int read_tensors(reader *r)
{
    graft__gguf *g = r->g;
    tensor_extent *ext = NULL;
    if (g->n_tensors > 0) {
        g->tensors = graft__calloc((size_t)g->n_tensors, sizeof *g->tensors);
        ext = graft__calloc((size_t)g->n_tensors, sizeof *ext);
        if (g->tensors == NULL || ext == NULL) {
            graft__free(ext);
            return fail_nomem(r);
        }
    }
    int rc = index_init(&g->tensor_index, g->n_tensors);
    if (rc != GRAFT_OK)
        rc = fail_nomem(r);
    for (uint64_t i = 0; rc == GRAFT_OK && i < g->n_tensors; i++)
        rc = read_tensor_info(r, i, &ext[i]);
    if (rc == GRAFT_OK)
        rc = place_data_section(r);
    if (rc == GRAFT_OK)
        rc = check_extents(r, ext);
    graft__free(ext);
    return rc;
}

/* ---- open and close ---------------------------------------------------------------- */

static int parse(graft__gguf *g, char **errmsg)
{
    reader r = {.g = g, .pos = 0, .errmsg = errmsg, .ctx = "header"};
    g->alignment = GRAFT_GGUF_DEFAULT_ALIGNMENT;
    int rc = read_header(&r, &g->n_tensors, &g->n_kv);
    if (rc == GRAFT_OK)
        rc = read_kvs(&r);
    if (rc == GRAFT_OK)
        rc = read_tensors(&r);
    return rc;
}

int graft__gguf_open_memory(const void *data, size_t size, graft__gguf **out, char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    graft__gguf *g = graft__calloc(1, sizeof *g);
    if (g == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    int rc = parse(g, errmsg);
    if (rc != GRAFT_OK) {
        graft__gguf_close(g);
        return rc;
    }
    *out = g;
    return GRAFT_OK;
}

static int map_file(const char *path, const void **base, size_t *size, char **errmsg)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return graft__errmsg(errmsg, GRAFT_EIO, "gguf: cannot open '%s': %s", path,
                             strerror(errno));
    struct stat st;
    int rc = GRAFT_OK;
    if (fstat(fd, &st) != 0)
        rc = graft__errmsg(errmsg, GRAFT_EIO, "gguf: cannot stat '%s': %s", path,
                           strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = graft__errmsg(errmsg, GRAFT_EIO, "gguf: '%s' is not a regular file", path);
    *size = rc == GRAFT_OK ? (size_t)st.st_size : 0;
    *base = "";
    if (rc == GRAFT_OK && *size > 0) {
        void *p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = graft__errmsg(errmsg, GRAFT_EIO, "gguf: cannot map '%s': %s", path,
                               strerror(errno));
        else
            *base = p;
    }
    close(fd);
    return rc;
}

int graft__gguf_open(const char *path, graft__gguf **out, char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    const void *base = NULL;
    size_t size = 0;
    int rc = map_file(path, &base, &size, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    rc = graft__gguf_open_memory(base, size, out, errmsg);
    if (rc != GRAFT_OK) {
        if (size > 0)
            munmap((void *)base, size);
        return rc;
    }
    (*out)->mapped = size > 0;
    return GRAFT_OK;
}

void graft__gguf_drop_pages(const graft__gguf *g, const void *data, size_t n)
{
    if (!g->mapped || n == 0)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)data + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)data + n) / page * page;
    if (end > start)
        madvise((void *)start, end - start, MADV_DONTNEED);
}

void graft__gguf_close(graft__gguf *g)
{
    if (g == NULL)
        return;
    while (g->chunks != NULL) {
        owned_chunk *next = g->chunks->next;
        graft__free(g->chunks);
        g->chunks = next;
    }
    graft__free(g->kv_index.slots);
    graft__free(g->tensor_index.slots);
    graft__free(g->kvs);
    graft__free(g->tensors);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    graft__free(g);
}

/* ---- accessors --------------------------------------------------------------------- */

uint32_t graft__gguf_version(const graft__gguf *g)
{
    return g->version;
}

uint32_t graft__gguf_alignment(const graft__gguf *g)
{
    return g->alignment;
}

uint64_t graft__gguf_file_size(const graft__gguf *g)
{
    return g->size;
}

uint64_t graft__gguf_data_offset(const graft__gguf *g)
{
    return g->data_offset;
}

uint64_t graft__gguf_n_kv(const graft__gguf *g)
{
    return g->n_kv;
}

const graft__gguf_kv *graft__gguf_kv_at(const graft__gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const graft__gguf_value *graft__gguf_find(const graft__gguf *g, const char *key)
{
    uint64_t slot = *index_slot(&g->kv_index, key, strlen(key), kv_name, g);
    return slot != 0 ? &g->kvs[slot - 1].value : NULL;
}

uint64_t graft__gguf_n_tensors(const graft__gguf *g)
{
    return g->n_tensors;
}

const graft__gguf_tensor *graft__gguf_tensor_at(const graft__gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const graft__gguf_tensor *graft__gguf_find_tensor(const graft__gguf *g, const char *name)
{
    uint64_t slot = *index_slot(&g->tensor_index, name, strlen(name), tensor_name, g);
    return slot != 0 ? &g->tensors[slot - 1] : NULL;
}

bool graft__gguf_str_eq(graft__gguf_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

/* ---- typed getters ----------------------------------------------------------------- */

static bool is_unsigned(graft__gguf_vtype t)
{
    return t == GRAFT_GGUF_UINT8 || t == GRAFT_GGUF_UINT16 || t == GRAFT_GGUF_UINT32 ||
           t == GRAFT_GGUF_UINT64;
}

static bool is_signed(graft__gguf_vtype t)
{
    return t == GRAFT_GGUF_INT8 || t == GRAFT_GGUF_INT16 || t == GRAFT_GGUF_INT32 ||
           t == GRAFT_GGUF_INT64;
}

/* An integer value as a wide signed range: *neg set when it is below zero. */
static int get_int(const graft__gguf *g, const char *key, bool *neg, uint64_t *mag)
{
    const graft__gguf_value *v = graft__gguf_find(g, key);
    if (v == NULL)
        return GRAFT_ENOTFOUND;
    if (is_unsigned(v->type)) {
        *neg = false;
        *mag = v->v.u64;
        return GRAFT_OK;
    }
    if (!is_signed(v->type))
        return GRAFT_ETYPE;
    *neg = v->v.i64 < 0;
    *mag = *neg ? 0 - (uint64_t)v->v.i64 : (uint64_t)v->v.i64;
    return GRAFT_OK;
}

int graft__gguf_get_u64(const graft__gguf *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    int rc = get_int(g, key, &neg, &mag);
    if (rc != GRAFT_OK)
        return rc;
    if (neg)
        return GRAFT_ETYPE;
    *out = mag;
    return GRAFT_OK;
}

int graft__gguf_get_u32(const graft__gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    int rc = graft__gguf_get_u64(g, key, &v);
    if (rc != GRAFT_OK)
        return rc;
    if (v > UINT32_MAX)
        return GRAFT_ETYPE;
    *out = (uint32_t)v;
    return GRAFT_OK;
}

int graft__gguf_get_i32(const graft__gguf *g, const char *key, int32_t *out)
{
    bool neg;
    uint64_t mag;
    int rc = get_int(g, key, &neg, &mag);
    if (rc != GRAFT_OK)
        return rc;
    if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX)
        return GRAFT_ETYPE;
    *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return GRAFT_OK;
}

int graft__gguf_get_f32(const graft__gguf *g, const char *key, float *out)
{
    const graft__gguf_value *v = graft__gguf_find(g, key);
    if (v == NULL)
        return GRAFT_ENOTFOUND;
    if (v->type != GRAFT_GGUF_FLOAT32 && v->type != GRAFT_GGUF_FLOAT64)
        return GRAFT_ETYPE;
    *out = (float)v->v.f64;
    return GRAFT_OK;
}

int graft__gguf_get_bool(const graft__gguf *g, const char *key, bool *out)
{
    const graft__gguf_value *v = graft__gguf_find(g, key);
    if (v == NULL)
        return GRAFT_ENOTFOUND;
    if (v->type != GRAFT_GGUF_BOOL)
        return GRAFT_ETYPE;
    *out = v->v.u64 != 0;
    return GRAFT_OK;
}

int graft__gguf_get_str(const graft__gguf *g, const char *key, graft__gguf_str *out)
{
    const graft__gguf_value *v = graft__gguf_find(g, key);
    if (v == NULL)
        return GRAFT_ENOTFOUND;
    if (v->type != GRAFT_GGUF_STRING)
        return GRAFT_ETYPE;
    *out = v->v.str;
    return GRAFT_OK;
}

int graft__gguf_get_arr(const graft__gguf *g, const char *key, graft__gguf_vtype elem_type,
                        const graft__gguf_array **out)
{
    const graft__gguf_value *v = graft__gguf_find(g, key);
    if (v == NULL)
        return GRAFT_ENOTFOUND;
    if (v->type != GRAFT_GGUF_ARRAY ||
        (elem_type != GRAFT_GGUF_VTYPE_COUNT && v->v.arr.elem_type != elem_type))
        return GRAFT_ETYPE;
    *out = &v->v.arr;
    return GRAFT_OK;
}

/* ---- numeric array elements -------------------------------------------------------- */

/* Element i's little-endian bytes, zero-extended. */
static uint64_t arr_raw(const graft__gguf_array *a, uint64_t i, unsigned width)
{
    const uint8_t *p = (const uint8_t *)a->raw + i * width;
    uint64_t v = 0;
    for (unsigned b = 0; b < width; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

static double arr_f64(const graft__gguf_array *a, uint64_t i)
{
    GRAFT_ASSERT(i < a->count && a->elem_type < GRAFT_GGUF_VTYPE_COUNT);
    unsigned width = scalar_size(a->elem_type);
    GRAFT_ASSERT(width > 0);
    uint64_t raw = arr_raw(a, i, width);
    if (a->elem_type == GRAFT_GGUF_FLOAT32) {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    if (a->elem_type == GRAFT_GGUF_FLOAT64) {
        double d;
        memcpy(&d, &raw, sizeof d);
        return d;
    }
    if (is_signed(a->elem_type))
        return (double)sign_extend(raw, width);
    return (double)raw;
}

float graft__gguf_arr_f32(const graft__gguf_array *a, uint64_t i)
{
    return (float)arr_f64(a, i);
}

int64_t graft__gguf_arr_i64(const graft__gguf_array *a, uint64_t i)
{
    GRAFT_ASSERT(i < a->count && a->elem_type < GRAFT_GGUF_VTYPE_COUNT);
    unsigned width = scalar_size(a->elem_type);
    GRAFT_ASSERT(width > 0);
    if (a->elem_type == GRAFT_GGUF_FLOAT32 || a->elem_type == GRAFT_GGUF_FLOAT64) {
        double d = arr_f64(a, i); /* saturated: a cast of an out-of-range double is undefined */
        if (!(d > -9.2e18))
            return d != d ? 0 : INT64_MIN;
        return d < 9.2e18 ? (int64_t)d : INT64_MAX;
    }
    uint64_t raw = arr_raw(a, i, width);
    return is_signed(a->elem_type) ? sign_extend(raw, width) : (int64_t)raw;
}
