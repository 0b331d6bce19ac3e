/*
 * gguf_writer.c: builds GGUF files (versions 2 and 3; see gguf.h for the byte layout).
 *
 * DESIGN
 * Metadata is small, so each key/value is serialized as soon as it is set: the writer keeps
 * the key and the encoded value bytes (u32 value_type | value), and setting a key again
 * replaces its bytes in place (the first position is kept). Tensors are recorded with their
 * shapes and a data source: a borrowed pointer, or a fill callback called once per tensor,
 * at write time, with the tensor's whole size, so a multi-GB file streams through a buffer
 * the size of its largest filled tensor instead of being held in memory.
 *
 * Tensor offsets are assigned as tensors are added (each aligned), so the layout is known
 * before anything is written: header, kvs, tensor infos, zero padding to the alignment, then
 * each tensor's data preceded by zero padding to its offset. `general.alignment` is written
 * (as the first kv) when the alignment is not the default 32; setting that key to anything
 * but the writer's own alignment as a UINT32 is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

#define MAX_ARRAY_DEPTH 8 /* as in the reader: deeper nesting is refused */
#define MAX_ALIGNMENT (1u << 30)

/* A growable byte buffer; `failed` records an allocation failure so callers check once. */
typedef struct bytes {
    uint8_t *p;
    size_t len;
    size_t cap;
    bool failed;
} bytes;

typedef struct writer_kv {
    char *key;
    size_t key_len;
    bytes value; /* u32 value_type | encoded value */
} writer_kv;

typedef struct writer_tensor {
    char *name;
    size_t name_len;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GRAFT_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset; /* relative to the data section */
    const void *data;
    graft__gguf_fill_fn fill;
    void *fill_user;
} writer_tensor;

struct graft__gguf_writer {
    uint32_t version;
    uint32_t alignment;
    writer_kv *kvs;
    size_t n_kv;
    size_t cap_kv;
    writer_tensor *tensors;
    size_t n_tensors;
    size_t cap_tensors;
    uint64_t data_size; /* end of the last tensor's data, relative to the data section */
};

/* ---- byte buffers ------------------------------------------------------------------ */

static void put(bytes *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = graft__realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_le(bytes *b, uint64_t v, unsigned width)
{
    uint8_t le[8];
    for (unsigned i = 0; i < width; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, width);
}

static void put_u32(bytes *b, uint32_t v)
{
    put_le(b, v, 4);
}

static void put_u64(bytes *b, uint64_t v)
{
    put_le(b, v, 8);
}

static void put_str(bytes *b, const char *s, uint64_t len)
{
    put_u64(b, len);
    put(b, s, (size_t)len);
}

static void put_zeros(bytes *b, size_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        put(b, zeros, k);
        n -= k;
    }
}

static uint64_t align_up(uint64_t x, uint32_t a)
{
    return (x + a - 1) / a * a;
}

/* ---- value encoding ---------------------------------------------------------------- */

static unsigned scalar_size(graft__gguf_vtype t)
{
    static const unsigned sizes[GRAFT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GRAFT_GGUF_VTYPE_COUNT ? sizes[t] : 0;
}

static void put_scalar(bytes *b, const graft__gguf_value *v)
{
    unsigned width = scalar_size(v->type);
    if (v->type == GRAFT_GGUF_FLOAT32) {
        float f = (float)v->v.f64;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        put_u32(b, bits);
    } else if (v->type == GRAFT_GGUF_FLOAT64) {
        uint64_t bits;
        memcpy(&bits, &v->v.f64, sizeof bits);
        put_u64(b, bits);
    } else {
        put_le(b, v->v.u64, width);
    }
}

/* u32 elem_type | u64 count | elements. GRAFT_EINVAL for a malformed or too deep array. */
static int put_array(bytes *b, const graft__gguf_array *a, unsigned depth)
{
    if (depth > MAX_ARRAY_DEPTH || a->elem_type >= GRAFT_GGUF_VTYPE_COUNT)
        return GRAFT_EINVAL;
    put_u32(b, a->elem_type);
    put_u64(b, a->count);
    if (a->count == 0)
        return GRAFT_OK;
    if (a->elem_type == GRAFT_GGUF_STRING) {
        if (a->strings == NULL)
            return GRAFT_EINVAL;
        for (uint64_t i = 0; i < a->count; i++)
            put_str(b, a->strings[i].ptr, a->strings[i].len);
        return GRAFT_OK;
    }
    if (a->elem_type == GRAFT_GGUF_ARRAY) {
        if (a->items == NULL)
            return GRAFT_EINVAL;
        for (uint64_t i = 0; i < a->count; i++) {
            if (a->items[i].type != GRAFT_GGUF_ARRAY)
                return GRAFT_EINVAL;
            int rc = put_array(b, &a->items[i].v.arr, depth + 1);
            if (rc != GRAFT_OK)
                return rc;
        }
        return GRAFT_OK;
    }
    size_t n;
    if (a->raw == NULL || a->count > SIZE_MAX || !graft__mul_size((size_t)a->count,
                                                                 scalar_size(a->elem_type), &n))
        return GRAFT_EINVAL;
    put(b, a->raw, n);
    return GRAFT_OK;
}

static int put_value(bytes *b, const graft__gguf_value *v)
{
    if (v->type >= GRAFT_GGUF_VTYPE_COUNT)
        return GRAFT_EINVAL;
    put_u32(b, v->type);
    if (v->type == GRAFT_GGUF_STRING) {
        put_str(b, v->v.str.ptr, v->v.str.len);
        return GRAFT_OK;
    }
    if (v->type == GRAFT_GGUF_ARRAY)
        return put_array(b, &v->v.arr, 1);
    put_scalar(b, v);
    return GRAFT_OK;
}

/* ---- key/values -------------------------------------------------------------------- */

static writer_kv *find_kv(graft__gguf_writer *w, const char *key, size_t len)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kvs[i].key_len == len && memcmp(w->kvs[i].key, key, len) == 0)
            return &w->kvs[i];
    return NULL;
}

/* general.alignment may only restate the writer's own alignment, as a UINT32. */
static bool alignment_value_ok(const graft__gguf_writer *w, const graft__gguf_value *v)
{
    return v->type == GRAFT_GGUF_UINT32 && v->v.u64 == w->alignment;
}

/* Stores key = value (encoded now), replacing an earlier value of the same key. */
static int store_kv(graft__gguf_writer *w, const char *key, size_t key_len,
                    const graft__gguf_value *v)
{
    if (key == NULL)
        return GRAFT_EINVAL;
    if (key_len == strlen("general.alignment") &&
        memcmp(key, "general.alignment", key_len) == 0 && !alignment_value_ok(w, v))
        return GRAFT_EINVAL;
    bytes enc = {0};
    int rc = put_value(&enc, v);
    if (rc == GRAFT_OK && enc.failed)
        rc = GRAFT_ENOMEM;
    if (rc != GRAFT_OK) {
        graft__free(enc.p);
        return rc;
    }
    writer_kv *kv = find_kv(w, key, key_len);
    if (kv != NULL) {
        graft__free(kv->value.p);
        kv->value = enc;
        return GRAFT_OK;
    }
    char *copy = graft__strndup(key, key_len);
    writer_kv *kvs = graft__grow_array(w->kvs, w->n_kv, &w->cap_kv, sizeof *kvs, 16);
    if (kvs != NULL)
        w->kvs = kvs;
    if (copy == NULL || kvs == NULL) {
        graft__free(copy);
        graft__free(enc.p);
        return GRAFT_ENOMEM;
    }
    w->kvs[w->n_kv++] = (writer_kv){.key = copy, .key_len = key_len, .value = enc};
    return GRAFT_OK;
}

int graft__gguf_writer_copy_kv(graft__gguf_writer *w, const graft__gguf_kv *kv)
{
    if (kv->key.ptr == NULL && kv->key.len > 0)
        return GRAFT_EINVAL;
    return store_kv(w, kv->key.ptr, (size_t)kv->key.len, &kv->value);
}

static int set_scalar(graft__gguf_writer *w, const char *key, graft__gguf_value v)
{
    if (key == NULL)
        return GRAFT_EINVAL;
    return store_kv(w, key, strlen(key), &v);
}

int graft__gguf_writer_set_u32(graft__gguf_writer *w, const char *key, uint32_t value)
{
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_UINT32, .v.u64 = value});
}

int graft__gguf_writer_set_i32(graft__gguf_writer *w, const char *key, int32_t value)
{
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_INT32, .v.i64 = value});
}

int graft__gguf_writer_set_u64(graft__gguf_writer *w, const char *key, uint64_t value)
{
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_UINT64, .v.u64 = value});
}

int graft__gguf_writer_set_f32(graft__gguf_writer *w, const char *key, float value)
{
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_FLOAT32, .v.f64 = value});
}

int graft__gguf_writer_set_bool(graft__gguf_writer *w, const char *key, bool value)
{
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_BOOL, .v.u64 = value});
}

int graft__gguf_writer_set_str(graft__gguf_writer *w, const char *key, const char *value)
{
    if (value == NULL)
        return GRAFT_EINVAL;
    graft__gguf_str s = {value, strlen(value)};
    return set_scalar(w, key, (graft__gguf_value){.type = GRAFT_GGUF_STRING, .v.str = s});
}

int graft__gguf_writer_set_arr(graft__gguf_writer *w, const char *key,
                               graft__gguf_vtype elem_type, const void *data, uint64_t count)
{
    if (scalar_size(elem_type) == 0 || (data == NULL && count > 0))
        return GRAFT_EINVAL;
    graft__gguf_value v = {.type = GRAFT_GGUF_ARRAY};
    v.v.arr = (graft__gguf_array){.elem_type = elem_type, .count = count, .raw = data};
    return set_scalar(w, key, v);
}

int graft__gguf_writer_set_arr_str(graft__gguf_writer *w, const char *key,
                                   const graft__gguf_str *strings, uint64_t count)
{
    if (strings == NULL && count > 0)
        return GRAFT_EINVAL;
    graft__gguf_value v = {.type = GRAFT_GGUF_ARRAY};
    v.v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_STRING, .count = count,
                                  .strings = strings};
    return set_scalar(w, key, v);
}

/* ---- construction ------------------------------------------------------------------ */

graft__gguf_writer *graft__gguf_writer_create(uint32_t version, uint32_t alignment)
{
    if ((version != 2 && version != 3) || alignment == 0 || alignment > MAX_ALIGNMENT ||
        (alignment & (alignment - 1)) != 0)
        return NULL;
    graft__gguf_writer *w = graft__calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->version = version;
    w->alignment = alignment;
    if (alignment != GRAFT_GGUF_DEFAULT_ALIGNMENT &&
        graft__gguf_writer_set_u32(w, "general.alignment", alignment) != GRAFT_OK) {
        graft__gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void graft__gguf_writer_free(graft__gguf_writer *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        graft__free(w->kvs[i].key);
        graft__free(w->kvs[i].value.p);
    }
    for (size_t i = 0; i < w->n_tensors; i++)
        graft__free(w->tensors[i].name);
    graft__free(w->kvs);
    graft__free(w->tensors);
    graft__free(w);
}

/* ---- tensors ----------------------------------------------------------------------- */

/* Byte size of a tensor of this shape, or 0 when the shape or type is invalid. */
static uint64_t tensor_bytes(uint32_t type, uint32_t n_dims, const uint64_t *ne)
{
    if (n_dims == 0 || n_dims > GRAFT_GGUF_MAX_DIMS || ne == NULL)
        return 0;
    uint64_t n_bytes = graft__type_row_bytes(type, ne[0]);
    uint64_t n_elems = ne[0];
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] == 0 || __builtin_mul_overflow(n_bytes, ne[d], &n_bytes) ||
            __builtin_mul_overflow(n_elems, ne[d], &n_elems))
            return 0;
    }
    return n_elems > (uint64_t)INT64_MAX ? 0 : n_bytes;
}

static bool has_tensor(const graft__gguf_writer *w, const char *name, size_t len)
{
    for (size_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].name_len == len && memcmp(w->tensors[i].name, name, len) == 0)
            return true;
    return false;
}

int graft__gguf_writer_add_tensor(graft__gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne, const void *data,
                                  graft__gguf_fill_fn fill, void *fill_user)
{
    uint64_t n_bytes = tensor_bytes(type, n_dims, ne);
    if (name == NULL || n_bytes == 0 || (data == NULL && fill == NULL) ||
        has_tensor(w, name, strlen(name)))
        return GRAFT_EINVAL;
    uint64_t offset = align_up(w->data_size, w->alignment), end;
    if (offset < w->data_size || __builtin_add_overflow(offset, n_bytes, &end) ||
        end > (uint64_t)INT64_MAX)
        return GRAFT_EINVAL;
    char *copy = graft__strndup(name, strlen(name));
    writer_tensor *tensors =
        graft__grow_array(w->tensors, w->n_tensors, &w->cap_tensors, sizeof *tensors, 16);
    if (tensors != NULL)
        w->tensors = tensors;
    if (copy == NULL || tensors == NULL) {
        graft__free(copy);
        return GRAFT_ENOMEM;
    }
    writer_tensor *t = &w->tensors[w->n_tensors++];
    *t = (writer_tensor){.name = copy, .name_len = strlen(name), .type = type, .n_dims = n_dims,
                         .n_bytes = n_bytes, .offset = offset, .data = data, .fill = fill,
                         .fill_user = fill_user};
    for (uint32_t d = 0; d < GRAFT_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    w->data_size = end;
    return GRAFT_OK;
}

/* ---- output ------------------------------------------------------------------------ */

/* Everything before the tensor data: header, kvs, tensor infos, and padding to the data
 * section (left out without tensors, as llama.cpp's vocab files do: an empty data section
 * needs no alignment). */
static int build_metadata(const graft__gguf_writer *w, bytes *meta)
{
    put(meta, "GGUF", 4);
    put_u32(meta, w->version);
    put_u64(meta, w->n_tensors);
    put_u64(meta, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(meta, w->kvs[i].key, w->kvs[i].key_len);
        put(meta, w->kvs[i].value.p, w->kvs[i].value.len);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        put_str(meta, t->name, t->name_len);
        put_u32(meta, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(meta, t->ne[d]);
        put_u32(meta, t->type);
        put_u64(meta, t->offset);
    }
    if (w->n_tensors > 0)
        put_zeros(meta, (size_t)(align_up(meta->len, w->alignment) - meta->len));
    return meta->failed ? GRAFT_ENOMEM : GRAFT_OK;
}

/* Where the bytes go: a FILE, or a buffer sized to the whole file. */
typedef struct sink {
    FILE *f;
    uint8_t *mem;
    uint64_t pos;
    uint8_t *scratch; /* file sink: room for the largest filled tensor */
} sink;

static int sink_write(sink *s, const void *p, size_t n)
{
    if (s->f != NULL && n > 0 && fwrite(p, 1, n, s->f) != n)
        return GRAFT_EIO;
    if (s->mem != NULL && n > 0)
        memcpy(s->mem + s->pos, p, n);
    s->pos += n;
    return GRAFT_OK;
}

static int sink_zeros(sink *s, uint64_t n)
{
    static const uint8_t zeros[4096];
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        int rc = sink_write(s, zeros, k);
        if (rc != GRAFT_OK)
            return rc;
        n -= k;
    }
    return GRAFT_OK;
}

/* Writes one tensor's data; *failed is set when its fill callback fails. */
static int sink_tensor(sink *s, const writer_tensor *t, const writer_tensor **failed)
{
    if (t->data != NULL)
        return sink_write(s, t->data, (size_t)t->n_bytes);
    uint8_t *dst = s->mem != NULL ? s->mem + s->pos : s->scratch;
    int rc = t->fill(t->fill_user, dst, (size_t)t->n_bytes);
    if (rc != GRAFT_OK) {
        *failed = t;
        return rc;
    }
    if (s->mem != NULL) {
        s->pos += t->n_bytes;
        return GRAFT_OK;
    }
    return sink_write(s, dst, (size_t)t->n_bytes);
}

/* Bytes of the data section: every tensor, each padded to the alignment (the last one too,
 * as llama.cpp writes it, so a file copied through the writer comes out byte-identical). */
static uint64_t data_section_size(const graft__gguf_writer *w)
{
    return align_up(w->data_size, w->alignment);
}

/* Writes the metadata, then each tensor at data_start + offset after zero padding. */
static int write_all(const graft__gguf_writer *w, const bytes *meta, sink *s,
                     const writer_tensor **failed)
{
    int rc = sink_write(s, meta->p, meta->len);
    for (size_t i = 0; rc == GRAFT_OK && i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        rc = sink_zeros(s, meta->len + t->offset - s->pos);
        if (rc == GRAFT_OK)
            rc = sink_tensor(s, t, failed);
    }
    if (rc == GRAFT_OK)
        rc = sink_zeros(s, meta->len + data_section_size(w) - s->pos);
    return rc;
}

static uint64_t largest_filled(const graft__gguf_writer *w)
{
    uint64_t max = 0;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].data == NULL && w->tensors[i].n_bytes > max)
            max = w->tensors[i].n_bytes;
    return max;
}

int graft__gguf_writer_write_memory(graft__gguf_writer *w, void **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    bytes meta = {0};
    int rc = build_metadata(w, &meta);
    uint64_t total = meta.len + data_section_size(w);
    sink s = {0};
    if (rc == GRAFT_OK && (total > SIZE_MAX || (s.mem = graft__malloc((size_t)total)) == NULL))
        rc = GRAFT_ENOMEM;
    const writer_tensor *failed = NULL;
    if (rc == GRAFT_OK)
        rc = write_all(w, &meta, &s, &failed);
    graft__free(meta.p);
    if (rc != GRAFT_OK) {
        graft__free(s.mem);
        return rc;
    }
    *data = s.mem;
    *size = (size_t)total;
    return GRAFT_OK;
}

static int write_stream(graft__gguf_writer *w, const char *path, FILE *f, char **errmsg)
{
    bytes meta = {0};
    if (build_metadata(w, &meta) != GRAFT_OK) {
        graft__free(meta.p);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "gguf: out of memory writing '%s'", path);
    }
    sink s = {.f = f};
    uint64_t scratch = largest_filled(w);
    if (scratch > 0 && (scratch > SIZE_MAX || (s.scratch = graft__malloc(scratch)) == NULL)) {
        graft__free(meta.p);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "gguf: out of memory writing '%s'", path);
    }
    const writer_tensor *failed = NULL;
    errno = 0;
    int rc = write_all(w, &meta, &s, &failed);
    graft__free(meta.p);
    graft__free(s.scratch);
    if (rc != GRAFT_OK && failed != NULL)
        return graft__errmsg(errmsg, rc, "gguf: filling tensor '%s' of '%s' failed: %s",
                             failed->name, path, graft_status_str(rc));
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, rc, "gguf: cannot write '%s': %s", path,
                             strerror(errno ? errno : EIO));
    return GRAFT_OK;
}

int graft__gguf_writer_write_file(graft__gguf_writer *w, const char *path, char **errmsg)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return graft__errmsg(errmsg, GRAFT_EIO, "gguf: cannot create '%s': %s", path,
                             strerror(errno));
    int rc = write_stream(w, path, f, errmsg);
    if (fclose(f) != 0 && rc == GRAFT_OK)
        rc = graft__errmsg(errmsg, GRAFT_EIO, "gguf: cannot write '%s': %s", path,
                           strerror(errno));
    if (rc != GRAFT_OK)
        unlink(path);
    return rc;
}
