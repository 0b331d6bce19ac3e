/*
 * test_gguf_corrupt.c: the reader refuses malformed files, each with its specific message.
 *
 * Files are laid out byte by byte here, from the format description, not with the writer,
 * so the test knows the offset of every field. Three parts:
 *   - a truncation sweep: a file with every kind of field is cut at every length, and each
 *     cut must be refused with the message of the field it falls in, at that field's offset
 *     (the builder records, per field, its byte range, message and offset);
 *   - hand-made corruptions (bad magic and versions, huge counts and lengths, unknown types,
 *     bad shapes, misaligned, overlapping or out-of-file tensors, duplicates, alignment,
 *     nesting depth), each checked for status, a distinctive substring and "(offset N)";
 *   - every byte of the sweep's file overwritten with a few values: never a crash or leak.
 * Every refusal must leave graft__alloc_live() where it was (the test also runs under ASan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"

/* ---- a file builder that remembers where each field lies --------------------------- */

#define MAX_FILE 4096
#define MAX_SPANS 256

/* Cutting the file inside [begin, end) must give a message containing `what` at `offset`. */
typedef struct span {
    size_t begin;
    size_t end;
    uint64_t offset;
    char what[200];
} span;

typedef struct file {
    uint8_t buf[MAX_FILE];
    size_t len;
    span spans[MAX_SPANS];
    size_t n_spans;
} file;

static void expect_span(file *f, size_t begin, size_t end, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void expect_span(file *f, size_t begin, size_t end, uint64_t offset, const char *fmt, ...)
{
    assert_true(f->n_spans < MAX_SPANS);
    span *s = &f->spans[f->n_spans++];
    s->begin = begin;
    s->end = end;
    s->offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->what, sizeof s->what, fmt, ap);
    va_end(ap);
}

static size_t put_bytes(file *f, const void *p, size_t n)
{
    assert_true(f->len + n <= MAX_FILE);
    size_t at = f->len;
    memcpy(f->buf + at, p, n);
    f->len += n;
    return at;
}

static size_t put_le(file *f, uint64_t v, unsigned width)
{
    uint8_t le[8];
    for (unsigned i = 0; i < width; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    return put_bytes(f, le, width);
}

static size_t put_u32(file *f, uint32_t v)
{
    return put_le(f, v, 4);
}

static size_t put_u64(file *f, uint64_t v)
{
    return put_le(f, v, 8);
}

/* A fixed-size field whose truncation reads "truncated <what>: need". */
static size_t field(file *f, uint64_t v, unsigned width, const char *what)
{
    expect_span(f, f->len, f->len + width, f->len, "truncated %s: need %u bytes", what, width);
    return put_le(f, v, width);
}

static size_t string_field(file *f, const char *s, const char *what)
{
    char len_what[200];
    snprintf(len_what, sizeof len_what, "length of %s", what);
    size_t at = field(f, strlen(s), 8, len_what);
    expect_span(f, f->len, f->len + strlen(s), f->len, "truncated %s: need %zu bytes", what,
                strlen(s));
    put_bytes(f, s, strlen(s));
    return at;
}

static void header(file *f, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    field(f, 0x46554747, 4, "header magic");
    field(f, version, 4, "header version");
    field(f, n_tensors, 8, "header tensor count");
    field(f, n_kv, 8, "header kv count");
    /* Counts are bounded by the bytes left: 13 per kv and 32 per tensor at the least. */
    expect_span(f, 24, 24 + 13 * n_kv, 16, "kv count %llu is too large",
                (unsigned long long)n_kv);
    expect_span(f, 24, 24 + 32 * n_tensors, 8, "tensor count %llu is too large",
                (unsigned long long)n_tensors);
}

static void key(file *f, uint64_t index, const char *k)
{
    char what[64];
    snprintf(what, sizeof what, "key of kv %llu", (unsigned long long)index);
    string_field(f, k, what);
}

static size_t vtype(file *f, const char *k, graft__gguf_vtype t)
{
    char what[200];
    snprintf(what, sizeof what, "value type of key '%s'", k);
    return field(f, t, 4, what);
}

static void kv_u32(file *f, uint64_t index, const char *k, uint32_t v)
{
    key(f, index, k);
    vtype(f, k, GRAFT_GGUF_UINT32);
    char what[200];
    snprintf(what, sizeof what, "UINT32 value of key '%s'", k);
    field(f, v, 4, what);
}

static void kv_str(file *f, uint64_t index, const char *k, const char *v)
{
    key(f, index, k);
    vtype(f, k, GRAFT_GGUF_STRING);
    char what[200];
    snprintf(what, sizeof what, "string value of key '%s'", k);
    string_field(f, v, what);
}

static const char *const type_names[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32",
                                         "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
                                         "UINT64", "INT64", "FLOAT64"};

/* Array header (element type and count) plus the guard on the count. */
static void array_head(file *f, const char *k, graft__gguf_vtype elem, uint64_t count,
                       unsigned min_size)
{
    char what[200];
    snprintf(what, sizeof what, "array element type of key '%s'", k);
    field(f, elem, 4, what);
    snprintf(what, sizeof what, "array count of key '%s'", k);
    size_t at = field(f, count, 8, what);
    expect_span(f, f->len, f->len + count * min_size, at,
                "key '%s': array count %llu of %s needs at least %u bytes per element", k,
                (unsigned long long)count, type_names[elem], min_size);
}

static void array_u16(file *f, const char *k, const uint16_t *v, uint64_t n)
{
    array_head(f, k, GRAFT_GGUF_UINT16, n, 2);
    for (uint64_t i = 0; i < n; i++)
        put_le(f, v[i], 2);
}

static void array_str(file *f, const char *k, const char *const *v, uint64_t n)
{
    array_head(f, k, GRAFT_GGUF_STRING, n, 8);
    for (uint64_t i = 0; i < n; i++) {
        char what[200];
        snprintf(what, sizeof what, "string element %llu of key '%s'", (unsigned long long)i,
                 k);
        string_field(f, v[i], what);
    }
}

static size_t tensor_info(file *f, uint64_t index, const char *name, uint32_t n_dims,
                          const uint64_t *ne, uint32_t type, uint64_t offset)
{
    char what[200];
    snprintf(what, sizeof what, "name of tensor %llu", (unsigned long long)index);
    string_field(f, name, what);
    snprintf(what, sizeof what, "dimension count of tensor '%s'", name);
    field(f, n_dims, 4, what);
    for (uint32_t d = 0; d < n_dims; d++) {
        snprintf(what, sizeof what, "dimension %u of tensor '%s'", d, name);
        field(f, ne[d], 8, what);
    }
    snprintf(what, sizeof what, "type of tensor '%s'", name);
    field(f, type, 4, what);
    snprintf(what, sizeof what, "data offset of tensor '%s'", name);
    return field(f, offset, 8, what);
}

static void pad_to(file *f, size_t alignment)
{
    static const uint8_t zeros[256];
    size_t n = (alignment - f->len % alignment) % alignment;
    put_bytes(f, zeros, n);
}

/* ---- refusal checks ---------------------------------------------------------------- */

/* Opening must fail with `status` and a message holding `what` and ending "(offset N)". */
static void expect_refused(const uint8_t *data, size_t size, int status, const char *what,
                           uint64_t offset)
{
    long live = graft__alloc_live();
    graft__gguf *g = (graft__gguf *)&live; /* any non-NULL value: a failed open sets NULL */
    char *err = NULL;
    int rc = graft__gguf_open_memory(data, size, &g, &err);
    if (rc != status || err == NULL || strstr(err, what) == NULL)
        fail_msg("size %zu: want status %d with \"%s\", got %d: %s", size, status, what, rc,
                 err ? err : "(no message)");
    char tail[64];
    snprintf(tail, sizeof tail, "(offset %llu)", (unsigned long long)offset);
    size_t n = strlen(err), t = strlen(tail);
    if (n < t || strcmp(err + n - t, tail) != 0)
        fail_msg("size %zu: want \"%s\" at the end of: %s", size, tail, err);
    assert_null(g);
    assert_int_equal(strncmp(err, "gguf: ", 6), 0);
    graft__free(err);
    assert_int_equal(graft__alloc_live(), live);
}

static void expect_format_error(const file *f, const char *what, uint64_t offset)
{
    expect_refused(f->buf, f->len, GRAFT_EFORMAT, what, offset);
}

static void expect_accepted(const file *f)
{
    long live = graft__alloc_live();
    graft__gguf *g = NULL;
    char *err = NULL;
    int rc = graft__gguf_open_memory(f->buf, f->len, &g, &err);
    if (rc != GRAFT_OK)
        fail_msg("refused: %s", err ? err : "(no message)");
    graft__gguf_close(g);
    assert_int_equal(graft__alloc_live(), live);
}

/* ---- the truncation sweep ---------------------------------------------------------- */

typedef struct sweep_tensor {
    const char *name;
    uint64_t begin, end; /* absolute data extent */
    uint64_t offset_field;
} sweep_tensor;

/* A file with a field of every kind: scalars, strings, string, bool, numeric and nested
 * arrays, general.alignment, two tensors of two types, padding and data. */
static void build_sweep_file(file *f, sweep_tensor *t, size_t *data_start, size_t *infos_end)
{
    header(f, 3, 2, 7);
    kv_str(f, 0, "general.name", "corrupt");
    key(f, 1, "u8");
    vtype(f, "u8", GRAFT_GGUF_UINT8);
    field(f, 7, 1, "UINT8 value of key 'u8'");
    key(f, 2, "f64");
    vtype(f, "f64", GRAFT_GGUF_FLOAT64);
    field(f, 0x3ff0000000000000ull, 8, "FLOAT64 value of key 'f64'");
    key(f, 3, "bools");
    vtype(f, "bools", GRAFT_GGUF_ARRAY);
    array_head(f, "bools", GRAFT_GGUF_BOOL, 2, 1);
    put_bytes(f, "\x01\x00", 2);
    key(f, 4, "tokens");
    vtype(f, "tokens", GRAFT_GGUF_ARRAY);
    static const char *const tokens[] = {"ab", "", "c"};
    array_str(f, "tokens", tokens, 3);
    key(f, 5, "nested");
    vtype(f, "nested", GRAFT_GGUF_ARRAY);
    array_head(f, "nested", GRAFT_GGUF_ARRAY, 2, 12);
    static const uint16_t small[] = {1, 2};
    array_u16(f, "nested", small, 2);
    static const char *const x[] = {"x"};
    array_str(f, "nested", x, 1);
    kv_u32(f, 6, "general.alignment", 32);
    const uint64_t ne0[2] = {4, 2}, ne1[1] = {32};
    t[0] = (sweep_tensor){"t0", 0, 32, tensor_info(f, 0, "t0", 2, ne0, GRAFT_TYPE_F32, 0)};
    t[1] = (sweep_tensor){"t1", 32, 66, tensor_info(f, 1, "t1", 1, ne1, GRAFT_TYPE_Q8_0, 32)};
    *infos_end = f->len;
    pad_to(f, 32);
    *data_start = f->len;
    for (int i = 0; i < 66; i++)
        put_le(f, (uint64_t)(i * 13 + 5), 1);
    for (int i = 0; i < 2; i++) {
        t[i].begin += *data_start;
        t[i].end += *data_start;
    }
}

static const span *span_at(const file *f, size_t cut)
{
    for (size_t i = 0; i < f->n_spans; i++)
        if (cut >= f->spans[i].begin && cut < f->spans[i].end)
            return &f->spans[i];
    return NULL;
}

static void test_truncated_everywhere(void **state)
{
    (void)state;
    static file f;
    sweep_tensor t[2];
    size_t data_start, infos_end;
    build_sweep_file(&f, t, &data_start, &infos_end);
    assert_int_equal(infos_end % 32 != 0, 1); /* the padding is not empty */
    expect_accepted(&f);
    for (size_t cut = 0; cut < f.len; cut++) {
        char what[200];
        uint64_t offset;
        const span *s = span_at(&f, cut);
        if (s != NULL) {
            snprintf(what, sizeof what, "%s", s->what);
            offset = s->offset;
        } else if (cut < data_start) {
            assert_true(cut >= infos_end);
            snprintf(what, sizeof what,
                     "truncated padding: the data section would start at %zu, past the end "
                     "of the file (size %zu)", data_start, cut);
            offset = infos_end;
        } else {
            const sweep_tensor *bad = t[0].end > cut ? &t[0] : &t[1];
            snprintf(what, sizeof what,
                     "tensor '%s' data [%llu, %llu) extends past end of file (size %zu)",
                     bad->name, (unsigned long long)bad->begin, (unsigned long long)bad->end,
                     cut);
            offset = bad->offset_field;
        }
        expect_refused(f.buf, cut, GRAFT_EFORMAT, what, offset);
    }
}

/* Every byte overwritten with a few values: accepted or refused, never a crash or a leak. */
static void test_every_byte_mutated(void **state)
{
    (void)state;
    static file f;
    sweep_tensor t[2];
    size_t data_start, infos_end;
    build_sweep_file(&f, t, &data_start, &infos_end);
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    long live = graft__alloc_live();
    for (size_t i = 0; i < data_start; i++) {
        for (size_t v = 0; v < sizeof values; v++) {
            uint8_t saved = f.buf[i];
            f.buf[i] = values[v];
            graft__gguf *g = NULL;
            char *err = NULL;
            int rc = graft__gguf_open_memory(f.buf, f.len, &g, &err);
            if (rc == GRAFT_OK) {
                assert_null(err);
                graft__gguf_close(g);
            } else {
                assert_true(rc == GRAFT_EFORMAT || rc == GRAFT_EUNSUPPORTED);
                assert_non_null(err);
                assert_non_null(strstr(err, "(offset "));
                graft__free(err);
            }
            f.buf[i] = saved;
            assert_int_equal(graft__alloc_live(), live);
        }
    }
}

/* ---- header ------------------------------------------------------------------------ */

static void test_bad_magic_and_versions(void **state)
{
    (void)state;
    static file f;
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 0);
    f.buf[3] = 'X';
    expect_format_error(&f, "bad magic 47 47 55 58, expected 'GGUF'", 0);
    static const struct { uint32_t version; int status; const char *what; } cases[] = {
        {0, GRAFT_EFORMAT, "bad GGUF version 0"},
        {1, GRAFT_EUNSUPPORTED, "GGUF version 1 is not supported"},
        {4, GRAFT_EUNSUPPORTED, "GGUF version 4 is not supported (only versions 2 and 3)"},
        {0xffffffffu, GRAFT_EUNSUPPORTED, "GGUF version 4294967295 is not supported"},
        {0x03000000u, GRAFT_EUNSUPPORTED, "the file looks big-endian"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&f, 0, sizeof f);
        header(&f, cases[i].version, 0, 0);
        expect_refused(f.buf, f.len, cases[i].status, cases[i].what, 4);
    }
    memset(&f, 0, sizeof f);
    header(&f, 2, 0, 0);
    expect_accepted(&f);
}

static void test_huge_counts(void **state)
{
    (void)state;
    static file f;
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, UINT64_MAX);
    expect_format_error(&f, "kv count 18446744073709551615 is too large: 0 bytes left", 16);
    memset(&f, 0, sizeof f);
    header(&f, 3, UINT64_MAX, 0);
    expect_format_error(&f, "tensor count 18446744073709551615 is too large", 8);
    memset(&f, 0, sizeof f);
    header(&f, 3, 1ull << 40, 1);
    kv_u32(&f, 0, "k", 1);
    expect_format_error(&f, "tensor count 1099511627776 is too large: 17 bytes left hold at "
                            "most 0", 8);
}

/* ---- key/values -------------------------------------------------------------------- */

static void test_huge_lengths(void **state)
{
    (void)state;
    static file f;
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    put_u64(&f, UINT64_MAX);
    put_bytes(&f, "abcdefgh", 8);
    expect_format_error(&f, "truncated key of kv 0: need 18446744073709551615 bytes, 8 left",
                        32);

    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "k");
    vtype(&f, "k", GRAFT_GGUF_STRING);
    size_t at = put_u64(&f, 1ull << 62);
    put_bytes(&f, "0123456789abc", 13);
    expect_format_error(&f, "truncated string value of key 'k': need 4611686018427387904 bytes",
                        at + 8);

    static const struct { graft__gguf_vtype elem; const char *what; } arrays[] = {
        {GRAFT_GGUF_UINT8, "array count 18446744073709551615 of UINT8 needs at least 1 bytes"},
        {GRAFT_GGUF_UINT64, "array count 18446744073709551615 of UINT64 needs at least 8"},
        {GRAFT_GGUF_STRING, "array count 18446744073709551615 of STRING needs at least 8"},
        {GRAFT_GGUF_ARRAY, "array count 18446744073709551615 of ARRAY needs at least 12"},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        memset(&f, 0, sizeof f);
        header(&f, 3, 0, 1);
        key(&f, 0, "arr");
        vtype(&f, "arr", GRAFT_GGUF_ARRAY);
        put_u32(&f, arrays[i].elem);
        at = put_u64(&f, UINT64_MAX);
        put_bytes(&f, "0123456789abcdef", 16);
        expect_format_error(&f, arrays[i].what, at);
    }
    /* A string array whose count fits the bytes left but whose strings do not. */
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "toks");
    vtype(&f, "toks", GRAFT_GGUF_ARRAY);
    put_u32(&f, GRAFT_GGUF_STRING);
    put_u64(&f, 2);
    put_u64(&f, 1);
    put_bytes(&f, "a", 1);
    at = put_u64(&f, 1000);
    put_bytes(&f, "bcdefgh", 7);
    expect_format_error(&f, "truncated string element 1 of key 'toks': need 1000 bytes, 7 left",
                        at + 8);
}

static void test_unknown_value_types(void **state)
{
    (void)state;
    static file f;
    static const uint32_t bad[] = {13, 100, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&f, 0, sizeof f);
        header(&f, 3, 0, 1);
        key(&f, 0, "k");
        size_t at = put_u32(&f, bad[i]);
        put_u64(&f, 0);
        char what[80];
        snprintf(what, sizeof what, "key 'k': unknown value type %u", bad[i]);
        expect_format_error(&f, what, at);

        memset(&f, 0, sizeof f);
        header(&f, 3, 0, 1);
        key(&f, 0, "k");
        vtype(&f, "k", GRAFT_GGUF_ARRAY);
        at = put_u32(&f, bad[i]);
        put_u64(&f, 0);
        expect_format_error(&f, what, at);
    }
}

static void test_bad_bools(void **state)
{
    (void)state;
    static file f;
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "b");
    vtype(&f, "b", GRAFT_GGUF_BOOL);
    size_t at = put_bytes(&f, "\x02", 1);
    expect_format_error(&f, "key 'b': bool value 2 is not 0 or 1", at);

    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "b");
    vtype(&f, "b", GRAFT_GGUF_ARRAY);
    put_u32(&f, GRAFT_GGUF_BOOL);
    put_u64(&f, 3);
    at = put_bytes(&f, "\x01\xff\x00", 3);
    expect_format_error(&f, "key 'b': bool value 255 is not 0 or 1", at + 1);
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    static file f;
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 3);
    kv_u32(&f, 0, "a", 1);
    kv_u32(&f, 1, "b", 2);
    size_t at = f.len;
    kv_str(&f, 2, "a", "again");
    expect_format_error(&f, "duplicate key 'a' (first at offset 24)", at);
}

static void test_bad_alignment(void **state)
{
    (void)state;
    static file f;
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&f, 0, sizeof f);
        header(&f, 3, 0, 2);
        kv_u32(&f, 0, "x", 1);
        size_t at = f.len;
        kv_u32(&f, 1, "general.alignment", bad[i]);
        char what[80];
        snprintf(what, sizeof what, "general.alignment %u is not a power of two", bad[i]);
        expect_format_error(&f, what, at);
    }
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "general.alignment");
    vtype(&f, "general.alignment", GRAFT_GGUF_INT32);
    put_u32(&f, 32);
    expect_format_error(&f, "general.alignment must be of type UINT32, not INT32", 24);
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    kv_str(&f, 0, "general.alignment", "32");
    expect_format_error(&f, "general.alignment must be of type UINT32, not STRING", 24);
    memset(&f, 0, sizeof f);
    header(&f, 3, 0, 1);
    key(&f, 0, "general.alignment");
    vtype(&f, "general.alignment", GRAFT_GGUF_UINT64);
    put_u64(&f, 32);
    expect_format_error(&f, "general.alignment must be of type UINT32, not UINT64", 24);
}

/* `depth` arrays nested in one another, the innermost holding one UINT8. */
static size_t nested_file(file *f, int depth)
{
    memset(f, 0, sizeof *f);
    header(f, 3, 0, 1);
    key(f, 0, "deep");
    vtype(f, "deep", GRAFT_GGUF_ARRAY);
    size_t deepest = 0;
    for (int d = 1; d <= depth; d++) {
        deepest = put_u32(f, d < depth ? GRAFT_GGUF_ARRAY : GRAFT_GGUF_UINT8);
        put_u64(f, 1);
    }
    put_bytes(f, "\x05", 1);
    return deepest;
}

static void test_nesting_depth(void **state)
{
    (void)state;
    static file f;
    nested_file(&f, 8);
    expect_accepted(&f);
    size_t at = nested_file(&f, 9);
    expect_format_error(&f, "key 'deep': arrays nested deeper than 8", at);
    nested_file(&f, 100);
    expect_format_error(&f, "key 'deep': arrays nested deeper than 8", at);
}

/* ---- tensor infos ------------------------------------------------------------------ */

/* A file with one kv and the given tensor infos, padded, and `data` bytes of data. */
typedef struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} tinfo;

static void tensor_file(file *f, uint32_t alignment, const tinfo *t, size_t n, size_t data,
                        size_t *field_at)
{
    memset(f, 0, sizeof *f);
    header(f, 3, n, 1);
    kv_u32(f, 0, "general.alignment", alignment);
    for (size_t i = 0; i < n; i++) {
        field_at[i] = f->len;
        tensor_info(f, i, t[i].name, t[i].n_dims, t[i].ne, t[i].type, t[i].offset);
    }
    pad_to(f, alignment);
    for (size_t i = 0; i < data; i++)
        put_le(f, i, 1);
}

/* Offset of the n_dims field, dims, type and offset fields of a tensor info at `at`. */
static size_t dims_field(const tinfo *t, size_t at)
{
    return at + 8 + strlen(t->name);
}

static size_t type_field(const tinfo *t, size_t at)
{
    return dims_field(t, at) + 4 + 8 * t->n_dims;
}

static size_t offset_field(const tinfo *t, size_t at)
{
    return type_field(t, at) + 4;
}

static void test_bad_shapes(void **state)
{
    (void)state;
    static file f;
    size_t at[2];
    tinfo t = {"w", 0, {1}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' has 0 dimensions, must be 1 to 4", dims_field(&t, at[0]));
    t = (tinfo){"w", 5, {1, 1, 1, 1, 1}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' has 5 dimensions, must be 1 to 4", dims_field(&t, at[0]));
    t = (tinfo){"w", 3, {4, 0, 2}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' dimension 1 is 0", dims_field(&t, at[0]) + 4 + 8);
    t = (tinfo){"w", 2, {1ull << 32, 1ull << 32}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' element count overflows at dimension 1",
                        dims_field(&t, at[0]) + 4 + 8);
    t = (tinfo){"w", 1, {1ull << 63}, 24 /* I8 */, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' element count overflows at dimension 0",
                        dims_field(&t, at[0]) + 4);
    t = (tinfo){"w", 2, {1ull << 31, 1ull << 31}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    expect_format_error(&f, "tensor 'w' byte size overflows", type_field(&t, at[0]));
    t = (tinfo){"w", 2, {33, 2}, GRAFT_TYPE_Q8_0, 0};
    tensor_file(&f, 32, &t, 1, 128, at);
    expect_format_error(&f, "tensor 'w' row length 33 is not a multiple of the block size 32 "
                            "of type Q8_0", type_field(&t, at[0]));
    t = (tinfo){"w", 1, {128}, GRAFT_TYPE_Q4_K, 0};
    tensor_file(&f, 32, &t, 1, 256, at);
    expect_format_error(&f, "row length 128 is not a multiple of the block size 256 of type Q4_K",
                        type_field(&t, at[0]));
}

static void test_unknown_tensor_types(void **state)
{
    (void)state;
    static file f;
    size_t at[1];
    static const uint32_t bad[] = {4, 5, 31, 38, 40, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tinfo t = {"w", 1, {32}, bad[i], 0};
        tensor_file(&f, 32, &t, 1, 256, at);
        char what[80];
        snprintf(what, sizeof what, "tensor 'w' has unknown tensor type %u", bad[i]);
        expect_refused(f.buf, f.len, GRAFT_EUNSUPPORTED, what, type_field(&t, at[0]));
    }
}

static void test_bad_offsets(void **state)
{
    (void)state;
    static file f;
    size_t at[2];
    tinfo t = {"w", 1, {8}, GRAFT_TYPE_F32, 4};
    tensor_file(&f, 32, &t, 1, 64, at);
    expect_format_error(&f, "tensor 'w' data offset 4 is not a multiple of the alignment 32",
                        offset_field(&t, at[0]));
    t.offset = 32;
    tensor_file(&f, 64, &t, 1, 128, at);
    expect_format_error(&f, "tensor 'w' data offset 32 is not a multiple of the alignment 64",
                        offset_field(&t, at[0]));
    t.offset = 64;
    tensor_file(&f, 64, &t, 1, 96, at);
    size_t start = f.len - 96;
    char what[160];
    snprintf(what, sizeof what, "tensor 'w' data [%zu, %zu) extends past end of file (size %zu)",
             start + 64, start + 96, f.len - 1);
    expect_refused(f.buf, f.len - 1, GRAFT_EFORMAT, what, offset_field(&t, at[0]));
    expect_accepted(&f);
    t.offset = UINT64_MAX - 31;
    tensor_file(&f, 32, &t, 1, 64, at);
    expect_format_error(&f, "tensor 'w' data offset 18446744073709551584 + size 32 overflows",
                        offset_field(&t, at[0]));
    t.offset = 1ull << 40;
    tensor_file(&f, 32, &t, 1, 64, at);
    expect_format_error(&f, "extends past end of file", offset_field(&t, at[0]));
}

static void test_overlapping_tensors(void **state)
{
    (void)state;
    static file f;
    size_t at[2];
    const tinfo t[2] = {{"a", 1, {16}, GRAFT_TYPE_F32, 0}, {"b", 1, {8}, GRAFT_TYPE_F32, 32}};
    tensor_file(&f, 32, t, 2, 96, at);
    size_t start = f.len - 96;
    char what[160];
    snprintf(what, sizeof what, "tensor 'b' data [%zu, %zu) overlaps tensor 'a' data [%zu, %zu)",
             start + 32, start + 64, start, start + 64);
    expect_format_error(&f, what, offset_field(&t[1], at[1]));
    /* Listed in the other order, the later tensor in the file is still the one named. */
    const tinfo r[2] = {{"b", 1, {8}, GRAFT_TYPE_F32, 32}, {"a", 1, {16}, GRAFT_TYPE_F32, 0}};
    tensor_file(&f, 32, r, 2, 96, at);
    expect_format_error(&f, what, offset_field(&r[0], at[0]));
    const tinfo same[2] = {{"a", 1, {8}, GRAFT_TYPE_F32, 0}, {"b", 1, {8}, GRAFT_TYPE_F32, 0}};
    tensor_file(&f, 32, same, 2, 96, at);
    expect_format_error(&f, "tensor 'b' data", offset_field(&same[1], at[1]));
    const tinfo apart[2] = {{"a", 1, {8}, GRAFT_TYPE_F32, 32}, {"b", 1, {8}, GRAFT_TYPE_F32, 0}};
    tensor_file(&f, 32, apart, 2, 96, at);
    expect_accepted(&f);
}

static void test_duplicate_tensor_names(void **state)
{
    (void)state;
    static file f;
    size_t at[3];
    const tinfo t[3] = {{"w", 1, {8}, GRAFT_TYPE_F32, 0},
                        {"v", 1, {8}, GRAFT_TYPE_F32, 32},
                        {"w", 1, {8}, GRAFT_TYPE_F32, 64}};
    tensor_file(&f, 32, t, 3, 96, at);
    expect_format_error(&f, "duplicate tensor name: tensor 'w' is also tensor 0", at[2]);
}

static void test_long_names_are_cut(void **state)
{
    (void)state;
    static file f;
    size_t at[1];
    char name[301];
    memset(name, 'n', 300);
    name[300] = '\0';
    tinfo t = {name, 0, {1}, GRAFT_TYPE_F32, 0};
    tensor_file(&f, 32, &t, 1, 32, at);
    char what[160];
    snprintf(what, sizeof what, "tensor '%.96s...' has 0 dimensions", name);
    expect_format_error(&f, what, dims_field(&t, at[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_every_byte_mutated),
        cmocka_unit_test(test_bad_magic_and_versions),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_huge_lengths),
        cmocka_unit_test(test_unknown_value_types),
        cmocka_unit_test(test_bad_bools),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_nesting_depth),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_unknown_tensor_types),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_overlapping_tensors),
        cmocka_unit_test(test_duplicate_tensor_names),
        cmocka_unit_test(test_long_names_are_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
