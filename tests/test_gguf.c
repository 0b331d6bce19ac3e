/*
 * test_gguf.c: the GGUF layer on good input: the type table, writer -> reader round trips
 * (every value type, nested and string arrays, alignments 32 and 64, tensors of several
 * types, data borrowed or filled), the getters' type rules, every real file in
 * $GRAFT_MODELS_DIR checked against the facts its README states, and allocation-failure
 * injection over open and write. Malformed files are test_gguf_corrupt.c's business.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fixtures.h"
#include "gguf/gguf.h"

/* ---- helpers ----------------------------------------------------------------------- */

/* Path of a shared model file (fixtures.h), valid until the next call. */
static const char *model_path(const char *rel)
{
    static char path[4096];
    return graft_test_model_path(path, sizeof path, rel);
}

static graft__gguf *open_model(const char *rel)
{
    const char *path = model_path(rel);
    graft__gguf *g = NULL;
    char *err = NULL;
    int rc = graft__gguf_open(path, &g, &err);
    if (rc != GRAFT_OK)
        fail_msg("%s: %s", path, err ? err : "(no message)");
    assert_null(err);
    return g;
}

static graft__gguf *open_bytes(const void *data, size_t size)
{
    graft__gguf *g = NULL;
    char *err = NULL;
    int rc = graft__gguf_open_memory(data, size, &g, &err);
    if (rc != GRAFT_OK)
        fail_msg("reopen: %s", err ? err : "(no message)");
    return g;
}

static uint64_t get_u64_or_fail(const graft__gguf *g, const char *key)
{
    uint64_t v = 0;
    assert_int_equal(graft__gguf_get_u64(g, key, &v), GRAFT_OK);
    return v;
}

static void assert_str_value(const graft__gguf *g, const char *key, const char *want)
{
    graft__gguf_str s;
    assert_int_equal(graft__gguf_get_str(g, key, &s), GRAFT_OK);
    assert_true(graft__gguf_str_eq(s, want));
}

/* ---- the type table ---------------------------------------------------------------- */

static void test_type_traits(void **state)
{
    (void)state;
    static const struct { uint32_t id; const char *name; uint32_t elems, bytes; } known[] = {
        {0, "F32", 1, 4},       {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},     {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
        {20, "IQ4_NL", 32, 18}, {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},
        {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},      {25, "I16", 1, 2},
        {26, "I32", 1, 4},      {27, "I64", 1, 8},       {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 56}, {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66}, {39, "MXFP4", 32, 17},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const graft__type_traits *t = graft__type_traits_of(known[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, known[i].name);
        assert_int_equal(t->block_elems, known[i].elems);
        assert_int_equal(t->block_bytes, known[i].bytes);
        assert_string_equal(graft_type_name((int)known[i].id), known[i].name);
    }
    static const uint32_t unassigned[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unassigned / sizeof unassigned[0]; i++) {
        assert_null(graft__type_traits_of(unassigned[i]));
        assert_int_equal(graft__type_row_bytes(unassigned[i], 256), 0);
    }
    assert_null(graft_type_name(-1));
    assert_null(graft_type_name(4));
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_Q8_0, 64), 68);
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_Q4_K, 512), 288);
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_F16, 172), 344);
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_Q8_0, 33), 0);
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_Q6_K, 128), 0);
    assert_int_equal(graft__type_row_bytes(GRAFT_TYPE_F32, UINT64_MAX / 2), 0);
}

/* ---- exact bytes of a small file ---------------------------------------------------- */

/* A writer's output compared with a file laid out by hand from the format description. */
static void test_writer_exact_bytes(void **state)
{
    (void)state;
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_non_null(w);
    assert_int_equal(graft__gguf_writer_set_u32(w, "a.b", 7), GRAFT_OK);
    const float data[3] = {1.0f, -2.0f, 0.5f};
    const uint64_t ne[1] = {3};
    assert_int_equal(graft__gguf_writer_add_tensor(w, "t", GRAFT_TYPE_F32, 1, ne, data, NULL,
                                                   NULL), GRAFT_OK);
    void *out;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &out, &size), GRAFT_OK);
    static const uint8_t want[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0,  /* magic, version 3 */
        1, 0, 0, 0, 0, 0, 0, 0,          /* 1 tensor */
        1, 0, 0, 0, 0, 0, 0, 0,          /* 1 kv */
        3, 0, 0, 0, 0, 0, 0, 0, 'a', '.', 'b', /* key "a.b" */
        4, 0, 0, 0, 7, 0, 0, 0,          /* UINT32 7 */
        1, 0, 0, 0, 0, 0, 0, 0, 't',     /* tensor name "t" */
        1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, /* 1 dim: 3 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* type F32, offset 0 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,       /* padding from 76 to 96 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f, /* 1.0, -2.0, 0.5 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* padding from 108 */
    };
    assert_int_equal(size, sizeof want);
    assert_memory_equal(out, want, sizeof want);
    graft__free(out);
    graft__gguf_writer_free(w);
}

/* ---- round trips ------------------------------------------------------------------- */

static const uint8_t arr_u8[] = {0, 1, 255};
static const int8_t arr_i8[] = {-128, 0, 127};
static const uint16_t arr_u16[] = {0, 65535, 1234};
static const int16_t arr_i16[] = {-32768, 32767, -1};
static const uint32_t arr_u32[] = {0, UINT32_MAX, 42};
static const int32_t arr_i32[] = {INT32_MIN, INT32_MAX, -7};
static const float arr_f32v[] = {1.5f, -0.25f, 3.0e38f};
static const uint8_t arr_bool[] = {1, 0, 1};
static const uint64_t arr_u64[] = {0, UINT64_MAX, 1ull << 40};
static const int64_t arr_i64v[] = {INT64_MIN, INT64_MAX, -3};
static const double arr_f64[] = {0.1, -1e300, 2.0};

typedef struct arr_case {
    const char *key;
    graft__gguf_vtype type;
    const void *data;
    double want[3];
} arr_case;

static const arr_case arr_cases[] = {
    {"arr.u8", GRAFT_GGUF_UINT8, arr_u8, {0, 1, 255}},
    {"arr.i8", GRAFT_GGUF_INT8, arr_i8, {-128, 0, 127}},
    {"arr.u16", GRAFT_GGUF_UINT16, arr_u16, {0, 65535, 1234}},
    {"arr.i16", GRAFT_GGUF_INT16, arr_i16, {-32768, 32767, -1}},
    {"arr.u32", GRAFT_GGUF_UINT32, arr_u32, {0, 4294967295.0, 42}},
    {"arr.i32", GRAFT_GGUF_INT32, arr_i32, {-2147483648.0, 2147483647.0, -7}},
    {"arr.f32", GRAFT_GGUF_FLOAT32, arr_f32v, {1.5, -0.25, 3.0e38}},
    {"arr.bool", GRAFT_GGUF_BOOL, arr_bool, {1, 0, 1}},
    {"arr.u64", GRAFT_GGUF_UINT64, arr_u64, {0, 0, 1099511627776.0}},
    {"arr.i64", GRAFT_GGUF_INT64, arr_i64v, {0, 0, -3}},
    {"arr.f64", GRAFT_GGUF_FLOAT64, arr_f64, {0.1, -1e300, 2.0}},
};

/* Scalars the setters do not cover go through copy_kv. */
static void copy_scalar(graft__gguf_writer *w, const char *key, graft__gguf_value v)
{
    graft__gguf_kv kv = {.key = {key, strlen(key)}, .value = v};
    assert_int_equal(graft__gguf_writer_copy_kv(w, &kv), GRAFT_OK);
}

/* [[1, 2], [], [[3]]]: arrays of u32 inside an array of arrays, one level deeper inside. */
static const uint32_t nest_a[] = {1, 2};
static const uint32_t nest_c[] = {3};

static void add_nested(graft__gguf_writer *w)
{
    static graft__gguf_value deep[1];
    deep[0].type = GRAFT_GGUF_ARRAY;
    deep[0].v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_UINT32, .count = 1,
                                        .raw = nest_c};
    static graft__gguf_value items[3];
    items[0].type = items[1].type = items[2].type = GRAFT_GGUF_ARRAY;
    items[0].v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_UINT32, .count = 2,
                                         .raw = nest_a};
    items[1].v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_UINT8, .count = 0};
    items[2].v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_ARRAY, .count = 1,
                                         .items = deep};
    graft__gguf_value v = {.type = GRAFT_GGUF_ARRAY};
    v.v.arr = (graft__gguf_array){.elem_type = GRAFT_GGUF_ARRAY, .count = 3, .items = items};
    copy_scalar(w, "arr.nested", v);
}

static void add_all_values(graft__gguf_writer *w)
{
    assert_int_equal(graft__gguf_writer_set_u32(w, "s.u32", 4000000000u), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_i32(w, "s.i32", -123456), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_u64(w, "s.u64", 1ull << 63), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_f32(w, "s.f32", 1e-5f), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_bool(w, "s.bool", true), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_str(w, "s.str", "héllo"), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_str(w, "s.empty", ""), GRAFT_OK);
    copy_scalar(w, "s.u8", (graft__gguf_value){.type = GRAFT_GGUF_UINT8, .v.u64 = 200});
    copy_scalar(w, "s.i8", (graft__gguf_value){.type = GRAFT_GGUF_INT8, .v.i64 = -100});
    copy_scalar(w, "s.u16", (graft__gguf_value){.type = GRAFT_GGUF_UINT16, .v.u64 = 60000});
    copy_scalar(w, "s.i16", (graft__gguf_value){.type = GRAFT_GGUF_INT16, .v.i64 = -30000});
    copy_scalar(w, "s.i64", (graft__gguf_value){.type = GRAFT_GGUF_INT64, .v.i64 = INT64_MIN});
    copy_scalar(w, "s.f64", (graft__gguf_value){.type = GRAFT_GGUF_FLOAT64, .v.f64 = -2.5e-300});
    for (size_t i = 0; i < sizeof arr_cases / sizeof arr_cases[0]; i++)
        assert_int_equal(graft__gguf_writer_set_arr(w, arr_cases[i].key, arr_cases[i].type,
                                                    arr_cases[i].data, 3), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_arr(w, "arr.empty", GRAFT_GGUF_INT16, NULL, 0),
                     GRAFT_OK);
    const graft__gguf_str strs[] = {{"<s>", 3}, {"", 0}, {"a\0b", 3}};
    assert_int_equal(graft__gguf_writer_set_arr_str(w, "arr.str", strs, 3), GRAFT_OK);
    add_nested(w);
}

static void check_scalars(const graft__gguf *g)
{
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    assert_int_equal(graft__gguf_get_u32(g, "s.u32", &u32), GRAFT_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(graft__gguf_get_i32(g, "s.i32", &i32), GRAFT_OK);
    assert_int_equal(i32, -123456);
    assert_int_equal(graft__gguf_get_u64(g, "s.u64", &u64), GRAFT_OK);
    assert_true(u64 == 1ull << 63);
    assert_int_equal(graft__gguf_get_f32(g, "s.f32", &f32), GRAFT_OK);
    assert_true(f32 == 1e-5f);
    assert_int_equal(graft__gguf_get_bool(g, "s.bool", &b), GRAFT_OK);
    assert_true(b);
    assert_str_value(g, "s.str", "héllo");
    assert_str_value(g, "s.empty", "");
    assert_int_equal(graft__gguf_find(g, "s.u8")->type, GRAFT_GGUF_UINT8);
    assert_int_equal(get_u64_or_fail(g, "s.u8"), 200);
    assert_int_equal(graft__gguf_find(g, "s.i8")->v.i64, -100);
    assert_int_equal(get_u64_or_fail(g, "s.u16"), 60000);
    assert_int_equal(graft__gguf_get_i32(g, "s.i16", &i32), GRAFT_OK);
    assert_int_equal(i32, -30000);
    assert_true(graft__gguf_find(g, "s.i64")->v.i64 == INT64_MIN);
    assert_int_equal(graft__gguf_find(g, "s.f64")->type, GRAFT_GGUF_FLOAT64);
    assert_true(graft__gguf_find(g, "s.f64")->v.f64 == -2.5e-300);
}

static size_t elem_width(graft__gguf_vtype t)
{
    static const size_t widths[GRAFT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return widths[t];
}

static void check_arrays(const graft__gguf *g)
{
    const graft__gguf_array *a;
    for (size_t i = 0; i < sizeof arr_cases / sizeof arr_cases[0]; i++) {
        const arr_case *c = &arr_cases[i];
        assert_int_equal(graft__gguf_get_arr(g, c->key, c->type, &a), GRAFT_OK);
        assert_int_equal(a->count, 3);
        assert_memory_equal(a->raw, c->data, 3 * elem_width(c->type));
        if (c->type == GRAFT_GGUF_FLOAT32 || c->type == GRAFT_GGUF_FLOAT64) {
            for (int k = 0; k < 3; k++)
                assert_true(graft__gguf_arr_f32(a, k) == (float)c->want[k]);
        } else if (c->type != GRAFT_GGUF_UINT64 && c->type != GRAFT_GGUF_INT64) {
            for (int k = 0; k < 3; k++)
                assert_true(graft__gguf_arr_i64(a, k) == (int64_t)c->want[k]);
        }
    }
    assert_int_equal(graft__gguf_get_arr(g, "arr.u64", GRAFT_GGUF_UINT64, &a), GRAFT_OK);
    assert_true((uint64_t)graft__gguf_arr_i64(a, 1) == UINT64_MAX);
    assert_int_equal(graft__gguf_get_arr(g, "arr.i64", GRAFT_GGUF_INT64, &a), GRAFT_OK);
    assert_true(graft__gguf_arr_i64(a, 0) == INT64_MIN);
    assert_int_equal(graft__gguf_get_arr(g, "arr.empty", GRAFT_GGUF_INT16, &a), GRAFT_OK);
    assert_int_equal(a->count, 0);
    assert_int_equal(graft__gguf_get_arr(g, "arr.str", GRAFT_GGUF_STRING, &a), GRAFT_OK);
    assert_int_equal(a->count, 3);
    assert_true(graft__gguf_str_eq(a->strings[0], "<s>"));
    assert_true(graft__gguf_str_eq(a->strings[1], ""));
    assert_int_equal(a->strings[2].len, 3);
    assert_memory_equal(a->strings[2].ptr, "a\0b", 3);
}

static void check_nested(const graft__gguf *g)
{
    const graft__gguf_array *a;
    assert_int_equal(graft__gguf_get_arr(g, "arr.nested", GRAFT_GGUF_ARRAY, &a), GRAFT_OK);
    assert_int_equal(a->count, 3);
    const graft__gguf_array *x = &a->items[0].v.arr, *y = &a->items[1].v.arr;
    const graft__gguf_array *z = &a->items[2].v.arr;
    assert_int_equal(x->elem_type, GRAFT_GGUF_UINT32);
    assert_int_equal(x->count, 2);
    assert_int_equal(graft__gguf_arr_i64(x, 1), 2);
    assert_int_equal(y->elem_type, GRAFT_GGUF_UINT8);
    assert_int_equal(y->count, 0);
    assert_int_equal(z->elem_type, GRAFT_GGUF_ARRAY);
    assert_int_equal(z->count, 1);
    assert_int_equal(z->items[0].v.arr.count, 1);
    assert_int_equal(graft__gguf_arr_i64(&z->items[0].v.arr, 0), 3);
}

static void roundtrip_values(uint32_t version, uint32_t alignment)
{
    long live = graft__alloc_live();
    graft__gguf_writer *w = graft__gguf_writer_create(version, alignment);
    assert_non_null(w);
    add_all_values(w);
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
    graft__gguf *g = open_bytes(data, size);
    assert_int_equal(graft__gguf_version(g), version);
    assert_int_equal(graft__gguf_alignment(g), alignment);
    assert_int_equal(graft__gguf_n_tensors(g), 0);
    /* 13 scalars, 11 numeric arrays, the empty, string and nested arrays, general.alignment */
    assert_int_equal(graft__gguf_n_kv(g), 13 + 11 + 3 + (alignment != 32));
    check_scalars(g);
    check_arrays(g);
    check_nested(g);
    graft__gguf_close(g);
    graft__free(data);
    graft__gguf_writer_free(w);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_roundtrip_values_v3(void **state)
{
    (void)state;
    roundtrip_values(3, 32);
}

static void test_roundtrip_values_v2_align64(void **state)
{
    (void)state;
    roundtrip_values(2, 64);
}

/* ---- tensors ----------------------------------------------------------------------- */

typedef struct fill_state {
    int calls;
    size_t last_size;
    uint8_t seed;
} fill_state;

static int fill_pattern(void *user, void *dst, size_t size)
{
    fill_state *f = user;
    f->calls++;
    f->last_size = size;
    for (size_t i = 0; i < size; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(f->seed + i * 7);
    return GRAFT_OK;
}

static int fill_fails(void *user, void *dst, size_t size)
{
    (void)user;
    (void)dst;
    (void)size;
    return GRAFT_ERANGE;
}

typedef struct tensor_case {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t n_bytes; /* worked out by hand from the block sizes */
} tensor_case;

static const tensor_case tensor_cases[] = {
    {"f32.matrix", GRAFT_TYPE_F32, 2, {3, 2, 1, 1}, 24},
    {"f16.vector", GRAFT_TYPE_F16, 1, {5, 1, 1, 1}, 10},
    {"q8_0", GRAFT_TYPE_Q8_0, 2, {64, 3, 1, 1}, 204},
    {"q4_k.3d", GRAFT_TYPE_Q4_K, 3, {256, 2, 2, 1}, 576},
    {"q6_k.4d", GRAFT_TYPE_Q6_K, 4, {512, 1, 1, 2}, 840},
    {"bf16", GRAFT_TYPE_BF16, 1, {1, 1, 1, 1}, 2},
};
#define N_TENSOR_CASES (sizeof tensor_cases / sizeof tensor_cases[0])

static void roundtrip_tensors(uint32_t alignment, bool to_file)
{
    long live = graft__alloc_live();
    graft__gguf_writer *w = graft__gguf_writer_create(3, alignment);
    assert_non_null(w);
    static uint8_t borrowed[N_TENSOR_CASES][1024];
    fill_state fills[N_TENSOR_CASES];
    for (size_t i = 0; i < N_TENSOR_CASES; i++) {
        const tensor_case *c = &tensor_cases[i];
        fills[i] = (fill_state){.seed = (uint8_t)(i * 31 + 1)};
        bool by_fill = i % 2 == 1;
        if (!by_fill)
            fill_pattern(&fills[i], borrowed[i], c->n_bytes);
        assert_int_equal(graft__gguf_writer_add_tensor(w, c->name, c->type, c->n_dims, c->ne,
                                                       by_fill ? NULL : borrowed[i],
                                                       by_fill ? fill_pattern : NULL,
                                                       &fills[i]),
                         GRAFT_OK);
    }
    assert_int_equal(graft__gguf_writer_set_str(w, "general.architecture", "test"), GRAFT_OK);
    void *data = NULL;
    size_t size;
    graft__gguf *g = NULL;
    if (to_file) {
        char path[4096];
        graft_test_tmp_path(path, sizeof path, "test_gguf_tensors.bin");
        char *err = NULL;
        assert_int_equal(graft__gguf_writer_write_file(w, path, &err), GRAFT_OK);
        assert_null(err);
        assert_int_equal(graft__gguf_open(path, &g, &err), GRAFT_OK);
        remove(path); /* the mapping stays valid */
    } else {
        assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
        g = open_bytes(data, size);
    }
    assert_int_equal(graft__gguf_alignment(g), alignment);
    assert_int_equal(graft__gguf_data_offset(g) % alignment, 0);
    assert_int_equal(graft__gguf_file_size(g) % alignment, 0);
    assert_int_equal(graft__gguf_n_tensors(g), N_TENSOR_CASES);
    assert_str_value(g, "general.architecture", "test");
    for (size_t i = 0; i < N_TENSOR_CASES; i++) {
        const tensor_case *c = &tensor_cases[i];
        const graft__gguf_tensor *t = graft__gguf_find_tensor(g, c->name);
        assert_ptr_equal(t, graft__gguf_tensor_at(g, i));
        assert_int_equal(t->type, c->type);
        assert_int_equal(t->n_dims, c->n_dims);
        assert_memory_equal(t->ne, c->ne, sizeof t->ne);
        assert_int_equal(t->n_bytes, c->n_bytes);
        assert_int_equal(t->offset % alignment, 0);
        if (i % 2 == 1) {
            assert_int_equal(fills[i].calls, 1);
            assert_int_equal(fills[i].last_size, c->n_bytes);
        }
        fill_state again = {.seed = (uint8_t)(i * 31 + 1)};
        uint8_t want[1024];
        fill_pattern(&again, want, c->n_bytes);
        assert_memory_equal(t->data, want, c->n_bytes);
    }
    assert_null(graft__gguf_find_tensor(g, "missing"));
    assert_null(graft__gguf_tensor_at(g, N_TENSOR_CASES));
    graft__gguf_close(g);
    graft__free(data);
    graft__gguf_writer_free(w);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_roundtrip_tensors_align32(void **state)
{
    (void)state;
    roundtrip_tensors(32, false);
}

static void test_roundtrip_tensors_align64_file(void **state)
{
    (void)state;
    roundtrip_tensors(64, true);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    assert_null(graft__gguf_writer_create(1, 32));
    assert_null(graft__gguf_writer_create(4, 32));
    assert_null(graft__gguf_writer_create(3, 0));
    assert_null(graft__gguf_writer_create(3, 48));
    graft__gguf_writer *w = graft__gguf_writer_create(3, 64);
    assert_non_null(w);
    const uint64_t ne[2] = {64, 2}, odd[1] = {33}, zero[2] = {32, 0};
    const uint8_t buf[256] = {0};
    assert_int_equal(graft__gguf_writer_add_tensor(w, "a", GRAFT_TYPE_Q8_0, 2, ne, buf, NULL,
                                                   NULL), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "a", GRAFT_TYPE_Q8_0, 2, ne, buf, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "b", GRAFT_TYPE_Q8_0, 1, odd, buf, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "c", GRAFT_TYPE_Q8_0, 2, zero, buf, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "d", 4, 2, ne, buf, NULL, NULL),
                     GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "e", GRAFT_TYPE_Q8_0, 0, ne, buf, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "f", GRAFT_TYPE_Q8_0, 5, ne, buf, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_add_tensor(w, "g", GRAFT_TYPE_Q8_0, 2, ne, NULL, NULL,
                                                   NULL), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_set_u32(w, "general.alignment", 32), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_set_u64(w, "general.alignment", 64), GRAFT_EINVAL);
    assert_int_equal(graft__gguf_writer_set_u32(w, "general.alignment", 64), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_arr(w, "k", GRAFT_GGUF_STRING, buf, 1),
                     GRAFT_EINVAL);
    /* Setting a key again replaces its value and keeps its place. */
    assert_int_equal(graft__gguf_writer_set_str(w, "k", "first"), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_u32(w, "k2", 1), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_i32(w, "k", -5), GRAFT_OK);
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
    graft__gguf *g = open_bytes(data, size);
    assert_int_equal(graft__gguf_n_kv(g), 3);
    assert_true(graft__gguf_str_eq(graft__gguf_kv_at(g, 0)->key, "general.alignment"));
    assert_true(graft__gguf_str_eq(graft__gguf_kv_at(g, 1)->key, "k"));
    assert_int_equal(graft__gguf_kv_at(g, 1)->value.type, GRAFT_GGUF_INT32);
    assert_int_equal(graft__gguf_kv_at(g, 1)->value.v.i64, -5);
    assert_int_equal(graft__gguf_alignment(g), 64);
    graft__gguf_close(g);
    graft__free(data);
    graft__gguf_writer_free(w);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_writer_fill_failure(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_non_null(w);
    const uint64_t ne[1] = {8};
    assert_int_equal(graft__gguf_writer_add_tensor(w, "broken", GRAFT_TYPE_F32, 1, ne, NULL,
                                                   fill_fails, NULL), GRAFT_OK);
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_ERANGE);
    assert_null(data);
    char path[4096];
    graft_test_tmp_path(path, sizeof path, "test_gguf_fill_fails.bin");
    char *err = NULL;
    assert_int_equal(graft__gguf_writer_write_file(w, path, &err), GRAFT_ERANGE);
    assert_non_null(strstr(err, "filling tensor 'broken'"));
    graft__free(err);
    FILE *f = fopen(path, "rb");
    assert_null(f); /* the partial file is removed */
    assert_int_equal(graft__gguf_writer_write_file(w, "/nonexistent-dir/x.bin", &err),
                     GRAFT_EIO);
    assert_non_null(strstr(err, "cannot create '/nonexistent-dir/x.bin'"));
    graft__free(err);
    graft__gguf_writer_free(w);
    assert_int_equal(graft__alloc_live(), live);
}

/* ---- getters' type rules ----------------------------------------------------------- */

static void test_getter_rules(void **state)
{
    (void)state;
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_non_null(w);
    add_all_values(w);
    assert_int_equal(graft__gguf_writer_set_u64(w, "big", 1ull << 32), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_i32(w, "neg", -1), GRAFT_OK);
    assert_int_equal(graft__gguf_writer_set_u32(w, "u32max", UINT32_MAX), GRAFT_OK);
    copy_scalar(w, "i64min32", (graft__gguf_value){.type = GRAFT_GGUF_INT64, .v.i64 = INT32_MIN});
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
    graft__gguf *g = open_bytes(data, size);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    graft__gguf_str s;
    const graft__gguf_array *a;
    assert_int_equal(graft__gguf_get_u32(g, "nope", &u32), GRAFT_ENOTFOUND);
    assert_int_equal(graft__gguf_get_u32(g, "big", &u32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_u64(g, "big", &u64), GRAFT_OK);
    assert_true(u64 == 1ull << 32);
    assert_int_equal(graft__gguf_get_u32(g, "neg", &u32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_u64(g, "neg", &u64), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_i32(g, "u32max", &i32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_i32(g, "i64min32", &i32), GRAFT_OK);
    assert_int_equal(i32, INT32_MIN);
    assert_int_equal(graft__gguf_get_i32(g, "s.i64", &i32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_i32(g, "s.u8", &i32), GRAFT_OK);
    assert_int_equal(i32, 200);
    assert_int_equal(graft__gguf_get_u32(g, "s.f32", &u32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_u32(g, "s.bool", &u32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_u32(g, "s.str", &u32), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_f32(g, "s.f64", &f), GRAFT_OK);
    assert_true(f == (float)-2.5e-300);
    assert_int_equal(graft__gguf_get_f32(g, "s.u32", &f), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_bool(g, "s.u8", &b), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_str(g, "arr.str", &s), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_str(g, "nope", &s), GRAFT_ENOTFOUND);
    assert_int_equal(graft__gguf_get_arr(g, "arr.str", GRAFT_GGUF_UINT32, &a), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_arr(g, "arr.str", GRAFT_GGUF_VTYPE_COUNT, &a), GRAFT_OK);
    assert_int_equal(graft__gguf_get_arr(g, "s.str", GRAFT_GGUF_VTYPE_COUNT, &a), GRAFT_ETYPE);
    assert_int_equal(graft__gguf_get_arr(g, "nope", GRAFT_GGUF_VTYPE_COUNT, &a),
                     GRAFT_ENOTFOUND);
    assert_null(graft__gguf_find(g, "s.u3"));
    assert_null(graft__gguf_kv_at(g, graft__gguf_n_kv(g)));
    graft__gguf_close(g);
    graft__free(data);
    graft__gguf_writer_free(w);
}

/* ---- real files -------------------------------------------------------------------- */

static int count_type(const graft__gguf *g, uint32_t type)
{
    int n = 0;
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++)
        n += graft__gguf_tensor_at(g, i)->type == type;
    return n;
}

static void test_stories260k(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    graft__gguf *g = open_model("stories260K.gguf");
    assert_int_equal(graft__gguf_version(g), 3);
    assert_int_equal(graft__gguf_n_tensors(g), 48);
    assert_int_equal(graft__gguf_data_offset(g), 14176);
    assert_int_equal(graft__gguf_alignment(g), 32);
    assert_int_equal(graft__gguf_file_size(g), 1185376);
    assert_str_value(g, "general.architecture", "llama");
    assert_str_value(g, "tokenizer.ggml.model", "llama");
    assert_int_equal(get_u64_or_fail(g, "llama.block_count"), 5);
    assert_int_equal(get_u64_or_fail(g, "llama.embedding_length"), 64);
    assert_int_equal(get_u64_or_fail(g, "llama.feed_forward_length"), 172);
    assert_int_equal(get_u64_or_fail(g, "llama.attention.head_count"), 8);
    assert_int_equal(get_u64_or_fail(g, "llama.attention.head_count_kv"), 4);
    assert_int_equal(get_u64_or_fail(g, "llama.context_length"), 2048);
    assert_int_equal(get_u64_or_fail(g, "tokenizer.ggml.padding_token_id"), 0xFFFFFFFFu);
    assert_null(graft__gguf_find(g, "llama.rope.freq_base"));
    float eps;
    assert_int_equal(graft__gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps),
                     GRAFT_OK);
    assert_true(fabsf(eps - 1e-5f) < 1e-9f);
    const graft__gguf_array *tokens, *scores, *types;
    assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING, &tokens),
                     GRAFT_OK);
    assert_int_equal(tokens->count, 512);
    assert_true(graft__gguf_str_eq(tokens->strings[0], "<unk>"));
    assert_true(graft__gguf_str_eq(tokens->strings[1], "<s>"));
    assert_true(graft__gguf_str_eq(tokens->strings[2], "</s>"));
    assert_true(graft__gguf_str_eq(tokens->strings[3], "<0x00>"));
    assert_true(graft__gguf_str_eq(tokens->strings[258], "<0xFF>"));
    assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.scores", GRAFT_GGUF_FLOAT32,
                                         &scores), GRAFT_OK);
    float lo = 0, hi = -1000;
    for (uint64_t i = 0; i < scores->count; i++) {
        lo = fminf(lo, graft__gguf_arr_f32(scores, i));
        hi = fmaxf(hi, graft__gguf_arr_f32(scores, i));
    }
    assert_true(lo == -252.0f && hi == 0.0f);
    assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.token_type", GRAFT_GGUF_INT32,
                                         &types), GRAFT_OK);
    /* Token types: 1 normal, 2 unknown, 3 control, 6 byte. */
    int n_byte = 0, n_control = 0, n_normal = 0;
    for (uint64_t i = 0; i < types->count; i++) {
        int64_t t = graft__gguf_arr_i64(types, i);
        n_byte += t == 6;
        n_control += t == 3;
        n_normal += t == 1;
    }
    assert_int_equal(graft__gguf_arr_i64(types, 0), 2);
    assert_int_equal(n_byte, 256);
    assert_int_equal(n_control, 2);
    assert_int_equal(n_normal, 253);
    const graft__gguf_tensor *emb = graft__gguf_find_tensor(g, "token_embd.weight");
    const graft__gguf_tensor *out = graft__gguf_find_tensor(g, "output.weight");
    const graft__gguf_tensor *down = graft__gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(emb);
    assert_non_null(out);
    assert_non_null(down);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    assert_int_equal(emb->n_bytes, 64 * 512 * 4);
    assert_int_equal(down->ne[0], 172);
    assert_int_equal(down->ne[1], 64);
    assert_memory_equal(emb->data, out->data, emb->n_bytes); /* output is a copy of embd */
    assert_int_equal(count_type(g, GRAFT_TYPE_F32), 48);
    char name[64];
    for (int layer = 0; layer < 5; layer++) {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", layer);
        assert_non_null(graft__gguf_find_tensor(g, name));
    }
    assert_null(graft__gguf_find_tensor(g, "blk.5.attn_q.weight"));
    graft__gguf_close(g);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_derived_files(void **state)
{
    (void)state;
    static const struct { const char *file; int q_type, n_q, n_q8, n_f16; } files[] = {
        {"derived/stories260K-F16.gguf", GRAFT_TYPE_F16, 37, 0, 37},
        {"derived/stories260K-Q8_0mix.gguf", GRAFT_TYPE_Q8_0, 32, 32, 5},
        {"derived/stories260K-Q5_1mix.gguf", GRAFT_TYPE_Q5_1, 31, 1, 5},
        {"derived/stories260K-Q5_0mix.gguf", GRAFT_TYPE_Q5_0, 29, 3, 5},
        {"derived/stories260K-Q4_1mix.gguf", GRAFT_TYPE_Q4_1, 32, 0, 5},
        {"derived/stories260K-Q4_0mix.gguf", GRAFT_TYPE_Q4_0, 32, 0, 5},
        {"derived/stories260K-IQ4_NLmix.gguf", GRAFT_TYPE_IQ4_NL, 31, 1, 5},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        graft__gguf *g = open_model(files[i].file);
        assert_int_equal(graft__gguf_n_tensors(g), 48);
        assert_int_equal(count_type(g, (uint32_t)files[i].q_type), files[i].n_q);
        assert_int_equal(count_type(g, GRAFT_TYPE_Q8_0), files[i].n_q8);
        assert_int_equal(count_type(g, GRAFT_TYPE_F16), files[i].n_f16);
        assert_int_equal(count_type(g, GRAFT_TYPE_F32), 11);
        const graft__gguf_tensor *down = graft__gguf_find_tensor(g, "blk.0.ffn_down.weight");
        assert_int_equal(down->type, GRAFT_TYPE_F16);
        graft__gguf_close(g);
    }
}

static void test_untrained_file(void **state)
{
    (void)state;
    graft__gguf *g = open_model("untrained/llama-2-tiny-random.gguf");
    assert_int_equal(graft__gguf_n_tensors(g), 12);
    assert_int_equal(count_type(g, GRAFT_TYPE_F16), 9);
    assert_int_equal(count_type(g, GRAFT_TYPE_F32), 3);
    const graft__gguf_tensor *out = graft__gguf_find_tensor(g, "output.weight");
    assert_non_null(out);
    assert_int_equal(out->ne[0], 8);
    assert_int_equal(out->ne[1], 32000);
    assert_int_equal(get_u64_or_fail(g, "llama.embedding_length"), 8);
    assert_int_equal(get_u64_or_fail(g, "llama.context_length"), 4096);
    const graft__gguf_array *tokens;
    assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING, &tokens),
                     GRAFT_OK);
    assert_int_equal(tokens->count, 32000);
    assert_true(graft__gguf_str_eq(tokens->strings[15043], "\xe2\x96\x81Hello"));
    graft__gguf_close(g);
}

static void test_vocab_files(void **state)
{
    (void)state;
    static const struct { const char *file, *arch, *model; uint64_t n_vocab; } files[] = {
        {"vocab/ggml-vocab-llama-spm.gguf", "llama", "llama", 32000},
        {"vocab/ggml-vocab-phi-3.gguf", "phi3", "llama", 32064},
        {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257},
        {"vocab/ggml-vocab-bert-bge.gguf", "bert", "bert", 30522},
        {"vocab/ggml-vocab-deepseek-coder.gguf", "llama", "gpt2", 32256},
        {"vocab/ggml-vocab-deepseek-llm.gguf", "llama", "gpt2", 102400},
        {"vocab/ggml-vocab-falcon.gguf", "falcon", "gpt2", 65024},
        {"vocab/ggml-vocab-starcoder.gguf", "starcoder2", "gpt2", 49152},
        {"vocab/ggml-vocab-mpt.gguf", "mpt", "gpt2", 50432},
        {"vocab/ggml-vocab-refact.gguf", "refact", "gpt2", 49216},
        {"vocab/ggml-vocab-gpt-neox.gguf", "gptneox", "gpt2", 50432},
        {"vocab/ggml-vocab-baichuan.gguf", "baichuan", "llama", 64000},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        graft__gguf *g = open_model(files[i].file);
        assert_int_equal(graft__gguf_n_tensors(g), 0);
        assert_str_value(g, "general.architecture", files[i].arch);
        assert_str_value(g, "tokenizer.ggml.model", files[i].model);
        const graft__gguf_array *tokens;
        assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING,
                                             &tokens), GRAFT_OK);
        assert_int_equal(tokens->count, files[i].n_vocab);
        graft__gguf_close(g);
    }
    graft__gguf *g = open_model("vocab/ggml-vocab-gpt-2.gguf");
    const graft__gguf_array *merges;
    assert_int_equal(graft__gguf_get_arr(g, "tokenizer.ggml.merges", GRAFT_GGUF_STRING, &merges),
                     GRAFT_OK);
    assert_int_equal(merges->count, 50000);
    graft__gguf_close(g);
}

static void test_v1_refused(void **state)
{
    (void)state;
    const char *path = model_path("legacy-gguf-v1/tinyllamas-stories-260k-f32.gguf");
    long live = graft__alloc_live();
    graft__gguf *g = (graft__gguf *)&g; /* any non-NULL value: a failed open sets NULL */
    char *err = NULL;
    assert_int_equal(graft__gguf_open(path, &g, &err), GRAFT_EUNSUPPORTED);
    assert_null(g);
    assert_non_null(err);
    assert_non_null(strstr(err, "GGUF version 1 is not supported"));
    assert_non_null(strstr(err, "(offset 4)"));
    graft__free(err);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_open_errors(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    graft__gguf *g;
    char *err = NULL;
    assert_int_equal(graft__gguf_open("/nonexistent/model.gguf", &g, &err), GRAFT_EIO);
    assert_non_null(strstr(err, "cannot open '/nonexistent/model.gguf'"));
    graft__free(err);
    assert_int_equal(graft__gguf_open("/", &g, &err), GRAFT_EIO);
    assert_non_null(strstr(err, "not a regular file"));
    graft__free(err);
    assert_int_equal(graft__gguf_open("/dev/null", &g, &err), GRAFT_EIO);
    graft__free(err);
    assert_int_equal(graft__gguf_open_memory("", 0, &g, &err), GRAFT_EFORMAT);
    assert_non_null(strstr(err, "truncated header magic"));
    graft__free(err);
    assert_int_equal(graft__alloc_live(), live);
}

/* Copying every real file through copy_kv and borrowed tensors reproduces it exactly. */
static void copy_through_writer(const char *rel)
{
    graft__gguf *g = open_model(rel);
    graft__gguf_writer *w = graft__gguf_writer_create(graft__gguf_version(g),
                                                      graft__gguf_alignment(g));
    assert_non_null(w);
    for (uint64_t i = 0; i < graft__gguf_n_kv(g); i++)
        assert_int_equal(graft__gguf_writer_copy_kv(w, graft__gguf_kv_at(g, i)), GRAFT_OK);
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(g, i);
        char *name = graft__strndup(t->name.ptr, (size_t)t->name.len);
        assert_int_equal(graft__gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne,
                                                       t->data, NULL, NULL), GRAFT_OK);
        graft__free(name);
    }
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
    FILE *f = fopen(model_path(rel), "rb");
    assert_non_null(f);
    uint8_t *orig = malloc(size + 1);
    assert_non_null(orig);
    assert_int_equal(fread(orig, 1, size + 1, f), size);
    fclose(f);
    assert_memory_equal(orig, data, size);
    free(orig);
    graft__free(data);
    graft__gguf_writer_free(w);
    graft__gguf_close(g);
}

static void test_copy_is_byte_identical(void **state)
{
    (void)state;
    copy_through_writer("stories260K.gguf");
    copy_through_writer("derived/stories260K-Q5_0mix.gguf");
    copy_through_writer("untrained/llama-2-tiny-random.gguf");
    copy_through_writer("vocab/ggml-vocab-bert-bge.gguf");
}

/* ---- big files --------------------------------------------------------------------- */

/* A sparse 4 GiB file: opening it reads the header and leaves the tensor data pages alone
 * (mincore finds them absent from the page cache). */
static void test_open_does_not_touch_data(void **state)
{
    (void)state;
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_non_null(w);
    assert_int_equal(graft__gguf_writer_set_str(w, "general.architecture", "big"), GRAFT_OK);
    const uint64_t ne[1] = {8};
    static const float small[8];
    assert_int_equal(graft__gguf_writer_add_tensor(w, "big", GRAFT_TYPE_F32, 1, ne, small, NULL,
                                                   NULL), GRAFT_OK);
    void *meta;
    size_t meta_size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &meta, &meta_size), GRAFT_OK);
    graft__gguf_writer_free(w);
    /* Grow the tensor to 2^30 F32 elements by rewriting ne[0] after the name "big". */
    uint8_t *ne0 = memmem(meta, meta_size, "\x03\0\0\0\0\0\0\0big\x01\0\0\0", 15);
    assert_non_null(ne0);
    const uint64_t big = 1ull << 30;
    memcpy(ne0 + 15, &big, sizeof big);
    char path[4096];
    graft_test_tmp_path(path, sizeof path, "test_gguf_sparse.bin");
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    size_t data_start = meta_size - 32; /* the small tensor's 32 bytes end the file */
    assert_int_equal(write(fd, meta, data_start), (ssize_t)data_start);
    assert_int_equal(ftruncate(fd, (off_t)(data_start + 4 * big)), 0);
    close(fd);
    graft__free(meta);

    graft__gguf *g = NULL;
    char *err = NULL;
    assert_int_equal(graft__gguf_open(path, &g, &err), GRAFT_OK);
    remove(path);
    const graft__gguf_tensor *t = graft__gguf_find_tensor(g, "big");
    assert_non_null(t);
    assert_true(t->n_bytes == 4 * big);
    assert_int_equal(graft__gguf_data_offset(g), data_start);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t first = ((uintptr_t)t->data + 64u * 1024 * 1024) & ~(uintptr_t)(page - 1);
    int resident = 0;
    for (int i = 0; i < 200; i++) { /* 64 MiB to 3.2 GiB into the data */
        unsigned char vec;
        uintptr_t addr = first + (uintptr_t)i * (16u * 1024 * 1024);
        assert_int_equal(mincore((void *)addr, (size_t)page, &vec), 0);
        resident += vec & 1;
    }
    assert_int_equal(resident, 0);
    graft__gguf_close(g);
}

/* ---- allocation failures ----------------------------------------------------------- */

static void open_under_injection(const char *rel)
{
    const char *path = model_path(rel);
    long live = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__gguf *g = NULL;
        char *err = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft__gguf_open(path, &g, &err);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (failures == 0) {
            assert_int_equal(rc, GRAFT_OK);
            assert_int_equal(graft__gguf_n_kv(g) > 0, 1);
            graft__gguf_close(g);
            assert_true(n > 3);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(g);
        graft__free(err);
        assert_int_equal(graft__alloc_live(), live);
        assert_true(n < 1000);
    }
    assert_int_equal(graft__alloc_live(), live);
}

static void test_open_alloc_failures(void **state)
{
    (void)state;
    open_under_injection("stories260K.gguf");
    open_under_injection("vocab/ggml-vocab-gpt-2.gguf");
}

/* Builds and writes the all-values file with allocation n failing, persistently. */
static int build_under_injection(long n, bool *injected)
{
    graft__alloc_fail_after(n, true);
    graft__gguf_writer *w = graft__gguf_writer_create(3, 64);
    int rc = w == NULL ? GRAFT_ENOMEM : GRAFT_OK;
    const graft__gguf_str strs[] = {{"x", 1}, {"yz", 2}};
    const uint64_t ne[1] = {32};
    static const float data[32];
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_set_str(w, "a", "value");
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_set_arr_str(w, "b", strs, 2);
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_add_tensor(w, "t", GRAFT_TYPE_F32, 1, ne, data, NULL, NULL);
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_set_u32(w, "c", 1);
    void *out = NULL;
    size_t size;
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_write_memory(w, &out, &size);
    *injected = graft__alloc_failures() > 0;
    graft__alloc_fail_after(-1, false);
    if (rc == GRAFT_OK) {
        graft__gguf *g = open_bytes(out, size);
        assert_int_equal(graft__gguf_n_kv(g), 4);
        graft__gguf_close(g);
    }
    graft__free(out);
    graft__gguf_writer_free(w);
    return rc;
}

static void test_writer_alloc_failures(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    for (long n = 0; n < 1000; n++) {
        bool injected;
        int rc = build_under_injection(n, &injected);
        assert_int_equal(graft__alloc_live(), live);
        if (!injected) {
            assert_int_equal(rc, GRAFT_OK);
            return;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
    }
    fail_msg("the writer never succeeded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_traits),
        cmocka_unit_test(test_writer_exact_bytes),
        cmocka_unit_test(test_roundtrip_values_v3),
        cmocka_unit_test(test_roundtrip_values_v2_align64),
        cmocka_unit_test(test_roundtrip_tensors_align32),
        cmocka_unit_test(test_roundtrip_tensors_align64_file),
        cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_writer_fill_failure),
        cmocka_unit_test(test_getter_rules),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_derived_files),
        cmocka_unit_test(test_untrained_file),
        cmocka_unit_test(test_vocab_files),
        cmocka_unit_test(test_v1_refused),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_copy_is_byte_identical),
        cmocka_unit_test(test_open_does_not_touch_data),
        cmocka_unit_test(test_open_alloc_failures),
        cmocka_unit_test(test_writer_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
