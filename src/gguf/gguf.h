/*
 * gguf.h: the GGUF file layer: a validating mmap reader, a writer, and the table of tensor
 * types (block sizes) the file format defines.
 *
 * Byte layout of a GGUF file (all integers little-endian):
 *
 *   u32 magic "GGUF" | u32 version (2 or 3; 1 is refused) | u64 n_tensors | u64 n_kv
 *   n_kv times:      gguf_string key | u32 value_type | value
 *   n_tensors times: gguf_string name | u32 n_dims (1..4) | u64 ne[n_dims] | u32 type | u64 offset
 *   padding to `general.alignment` (u32 key, default 32, a power of two)
 *   tensor data: each tensor at data_start + offset, offset a multiple of the alignment
 *
 *   gguf_string = u64 length | bytes (not NUL-terminated)
 *   value       = scalar of value_type | string | array
 *   array       = u32 elem_type | u64 count | count values of elem_type (arrays may nest)
 *
 * The reader validates everything against the file size with overflow-checked arithmetic
 * before anything is used; each error message names what is wrong and its byte offset.
 * All pointers the reader hands out point into the mapping (or the reader's own tables)
 * and stay valid until graft__gguf_close.
 */
#ifndef GRAFT_GGUF_H
#define GRAFT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/util.h"

#define GRAFT_GGUF_DEFAULT_ALIGNMENT 32
#define GRAFT_GGUF_MAX_DIMS 4

/* Metadata value types (the u32 value_type of the file). */
typedef enum graft__gguf_vtype {
    GRAFT_GGUF_UINT8 = 0,
    GRAFT_GGUF_INT8 = 1,
    GRAFT_GGUF_UINT16 = 2,
    GRAFT_GGUF_INT16 = 3,
    GRAFT_GGUF_UINT32 = 4,
    GRAFT_GGUF_INT32 = 5,
    GRAFT_GGUF_FLOAT32 = 6,
    GRAFT_GGUF_BOOL = 7,
    GRAFT_GGUF_STRING = 8,
    GRAFT_GGUF_ARRAY = 9,
    GRAFT_GGUF_UINT64 = 10,
    GRAFT_GGUF_INT64 = 11,
    GRAFT_GGUF_FLOAT64 = 12,
    GRAFT_GGUF_VTYPE_COUNT
} graft__gguf_vtype;

/* Tensor types (ggml type ids as stored in the file). Only the ones graft computes with are
 * named here; graft__type_traits() knows the block layout of every id the format defines,
 * so the reader can validate files holding other types too. */
typedef enum graft__type {
    GRAFT_TYPE_F32 = 0,
    GRAFT_TYPE_F16 = 1,
    GRAFT_TYPE_Q4_0 = 2,
    GRAFT_TYPE_Q4_1 = 3,
    GRAFT_TYPE_Q5_0 = 6,
    GRAFT_TYPE_Q5_1 = 7,
    GRAFT_TYPE_Q8_0 = 8,
    GRAFT_TYPE_Q8_1 = 9,
    GRAFT_TYPE_Q2_K = 10,
    GRAFT_TYPE_Q3_K = 11,
    GRAFT_TYPE_Q4_K = 12,
    GRAFT_TYPE_Q5_K = 13,
    GRAFT_TYPE_Q6_K = 14,
    GRAFT_TYPE_Q8_K = 15,
    GRAFT_TYPE_IQ4_NL = 20,
    GRAFT_TYPE_BF16 = 30,
    GRAFT_TYPE_COUNT = 40 /* ids at or above this are unknown */
} graft__type;

/* The block layout of every tensor type id the format defines (ggml's type traits):
 * X(name, id, elements per block, bytes per block). gguf_types.c makes the table of
 * graft__type_traits_of from it, and the GRAFT_GGUF_ELEMS_<name> / GRAFT_GGUF_BYTES_<name>
 * constants below let other layers check their own block formats against it at compile
 * time (kernels/quant_formats.h). Ids that were never assigned or were removed from ggml
 * (4 and 5, the repacked Q4_0_x_y / IQ4_NL_x_y ids 31-33 and 36-38) are not listed. */
#define GRAFT_GGUF_TYPES(X)                                                                \
    X(F32, 0, 1, 4)                                                                        \
    X(F16, 1, 1, 2)                                                                        \
    X(Q4_0, 2, 32, 18)                                                                     \
    X(Q4_1, 3, 32, 20)                                                                     \
    X(Q5_0, 6, 32, 22)                                                                     \
    X(Q5_1, 7, 32, 24)                                                                     \
    X(Q8_0, 8, 32, 34)                                                                     \
    X(Q8_1, 9, 32, 36)                                                                     \
    X(Q2_K, 10, 256, 84)                                                                   \
    X(Q3_K, 11, 256, 110)                                                                  \
    X(Q4_K, 12, 256, 144)                                                                  \
    X(Q5_K, 13, 256, 176)                                                                  \
    X(Q6_K, 14, 256, 210)                                                                  \
    X(Q8_K, 15, 256, 292)                                                                  \
    X(IQ2_XXS, 16, 256, 66)                                                                \
    X(IQ2_XS, 17, 256, 74)                                                                 \
    X(IQ3_XXS, 18, 256, 98)                                                                \
    X(IQ1_S, 19, 256, 50)                                                                  \
    X(IQ4_NL, 20, 32, 18)                                                                  \
    X(IQ3_S, 21, 256, 110)                                                                 \
    X(IQ2_S, 22, 256, 82)                                                                  \
    X(IQ4_XS, 23, 256, 136)                                                                \
    X(I8, 24, 1, 1)                                                                        \
    X(I16, 25, 1, 2)                                                                       \
    X(I32, 26, 1, 4)                                                                       \
    X(I64, 27, 1, 8)                                                                       \
    X(F64, 28, 1, 8)                                                                       \
    X(IQ1_M, 29, 256, 56)                                                                  \
    X(BF16, 30, 1, 2)                                                                      \
    X(TQ1_0, 34, 256, 54)                                                                  \
    X(TQ2_0, 35, 256, 66)                                                                  \
    X(MXFP4, 39, 32, 17)

#define GRAFT_GGUF_LAYOUT_(name, id, elems, bytes)                                         \
    GRAFT_GGUF_ELEMS_##name = (elems), GRAFT_GGUF_BYTES_##name = (bytes),
enum { GRAFT_GGUF_TYPES(GRAFT_GGUF_LAYOUT_) };
#undef GRAFT_GGUF_LAYOUT_

typedef struct graft__type_traits {
    const char *name;     /* "Q4_K"; NULL for an unassigned id */
    uint32_t block_elems; /* elements per block (1 for F32/F16/BF16) */
    uint32_t block_bytes; /* bytes per block */
} graft__type_traits;

/* Traits of a type id; NULL when the id is unknown or unassigned. */
const graft__type_traits *graft__type_traits_of(uint32_t type);

/* Bytes of one row of n elements of `type`; 0 when n is not a multiple of the block size,
 * the type is unknown, or the size overflows. */
size_t graft__type_row_bytes(uint32_t type, uint64_t n);

typedef struct graft__gguf_str {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;
} graft__gguf_str;

typedef struct graft__gguf_value graft__gguf_value;

typedef struct graft__gguf_array {
    graft__gguf_vtype elem_type;
    uint64_t count;
    const void *raw;                /* numeric and bool elements: packed little-endian data
                                       in the mapping (may be unaligned: read with memcpy) */
    const graft__gguf_str *strings; /* elem_type STRING: `count` strings */
    const graft__gguf_value *items; /* elem_type ARRAY: `count` nested arrays */
} graft__gguf_array;

struct graft__gguf_value {
    graft__gguf_vtype type;
    union {
        uint64_t u64; /* UINT8..UINT64, BOOL (0/1) */
        int64_t i64;  /* INT8..INT64 */
        double f64;   /* FLOAT32, FLOAT64 */
        graft__gguf_str str;
        graft__gguf_array arr;
    } v;
};

typedef struct graft__gguf_kv {
    graft__gguf_str key;
    graft__gguf_value value;
    uint64_t offset; /* file offset of the key */
} graft__gguf_kv;

typedef struct graft__gguf_tensor {
    graft__gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GRAFT_GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint32_t type;
    uint64_t offset;   /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data;  /* into the mapping */
} graft__gguf_tensor;

typedef struct graft__gguf graft__gguf;

/* Opens and validates a file. Errors: GRAFT_EIO (open/map), GRAFT_EFORMAT and
 * GRAFT_EUNSUPPORTED (message: what and at which byte offset), GRAFT_ENOMEM. */
int graft__gguf_open(const char *path, graft__gguf **out, char **errmsg);
/* Same over bytes in memory, which must outlive the reader (no copy is made). */
int graft__gguf_open_memory(const void *data, size_t size, graft__gguf **out, char **errmsg);
void graft__gguf_close(graft__gguf *g);
/* Gives the memory of the whole pages within data (n bytes of the mapped file) back to the
 * system; they are read from the file again if touched. A file opened from memory is left
 * alone. For tensors the caller has copied elsewhere (packed weights). */
void graft__gguf_drop_pages(const graft__gguf *g, const void *data, size_t n);

uint32_t graft__gguf_version(const graft__gguf *g);
uint32_t graft__gguf_alignment(const graft__gguf *g);
uint64_t graft__gguf_file_size(const graft__gguf *g);
uint64_t graft__gguf_data_offset(const graft__gguf *g); /* start of the tensor data section */

uint64_t graft__gguf_n_kv(const graft__gguf *g);
const graft__gguf_kv *graft__gguf_kv_at(const graft__gguf *g, uint64_t i);
/* The value of `key`, or NULL. */
const graft__gguf_value *graft__gguf_find(const graft__gguf *g, const char *key);

uint64_t graft__gguf_n_tensors(const graft__gguf *g);
const graft__gguf_tensor *graft__gguf_tensor_at(const graft__gguf *g, uint64_t i);
const graft__gguf_tensor *graft__gguf_find_tensor(const graft__gguf *g, const char *name);

/* Typed getters. They return GRAFT_OK, GRAFT_ENOTFOUND (no such key) or GRAFT_ETYPE (a
 * value of another type, or an integer that does not fit). Integer getters accept any
 * integer type whose value fits; float getters accept FLOAT32 and FLOAT64. */
int graft__gguf_get_u32(const graft__gguf *g, const char *key, uint32_t *out);
int graft__gguf_get_i32(const graft__gguf *g, const char *key, int32_t *out);
int graft__gguf_get_u64(const graft__gguf *g, const char *key, uint64_t *out);
int graft__gguf_get_f32(const graft__gguf *g, const char *key, float *out);
int graft__gguf_get_bool(const graft__gguf *g, const char *key, bool *out);
int graft__gguf_get_str(const graft__gguf *g, const char *key, graft__gguf_str *out);
/* An array value; `elem_type` must match unless it is GRAFT_GGUF_VTYPE_COUNT (any). */
int graft__gguf_get_arr(const graft__gguf *g, const char *key, graft__gguf_vtype elem_type,
                        const graft__gguf_array **out);

/* Compares a file string with a C string. */
bool graft__gguf_str_eq(graft__gguf_str s, const char *cstr);

/* Element i of a numeric array, converted (the caller checked elem_type). */
float graft__gguf_arr_f32(const graft__gguf_array *a, uint64_t i);
int64_t graft__gguf_arr_i64(const graft__gguf_array *a, uint64_t i);

/* ------------------------------------------------------------------------------------
 * Writer. Builds a file in memory (metadata) and streams tensor data at write time.
 * CONSTRUCTOR: graft__gguf_writer_create   DESTRUCTOR: graft__gguf_writer_free
 * Setters copy keys and strings; setting an existing key replaces its value.
 */
typedef struct graft__gguf_writer graft__gguf_writer;

/* Fills `size` bytes of tensor data at write time (for tensors too big to hold at once). */
typedef int (*graft__gguf_fill_fn)(void *user, void *dst, size_t size);

graft__gguf_writer *graft__gguf_writer_create(uint32_t version, uint32_t alignment);
void graft__gguf_writer_free(graft__gguf_writer *w);

int graft__gguf_writer_set_u32(graft__gguf_writer *w, const char *key, uint32_t value);
int graft__gguf_writer_set_i32(graft__gguf_writer *w, const char *key, int32_t value);
int graft__gguf_writer_set_u64(graft__gguf_writer *w, const char *key, uint64_t value);
int graft__gguf_writer_set_f32(graft__gguf_writer *w, const char *key, float value);
int graft__gguf_writer_set_bool(graft__gguf_writer *w, const char *key, bool value);
int graft__gguf_writer_set_str(graft__gguf_writer *w, const char *key, const char *value);
/* An array of numeric/bool elements of `elem_type`, `count` packed little-endian values. */
int graft__gguf_writer_set_arr(graft__gguf_writer *w, const char *key,
                               graft__gguf_vtype elem_type, const void *data, uint64_t count);
int graft__gguf_writer_set_arr_str(graft__gguf_writer *w, const char *key,
                                   const graft__gguf_str *strings, uint64_t count);
/* Copies a key/value (any type, nested arrays included) from a reader. */
int graft__gguf_writer_copy_kv(graft__gguf_writer *w, const graft__gguf_kv *kv);

/* Adds a tensor whose data (n_bytes = row bytes × rows) is `data`, borrowed until the
 * write, or produced by `fill` at write time when data is NULL. */
int graft__gguf_writer_add_tensor(graft__gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne, const void *data,
                                  graft__gguf_fill_fn fill, void *fill_user);

/* Writes the whole file. GRAFT_EIO with a message on write failure. */
int graft__gguf_writer_write_file(graft__gguf_writer *w, const char *path, char **errmsg);
/* Writes the whole file into a new heap buffer (free with graft__free). */
int graft__gguf_writer_write_memory(graft__gguf_writer *w, void **data, size_t *size);

#endif /* GRAFT_GGUF_H */
