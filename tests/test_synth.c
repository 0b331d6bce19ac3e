/*
 * test_synth.c: graft_synth_write checked through the GGUF reader.
 *
 * Only the tiny preset is written here (a few MB); the big presets share every code path
 * but their shapes, and those are checked by hand (see the report of the synth task).
 * Checks: metadata keys of each architecture, tensor names, shapes and types, the
 * statistics of the random values, the synthesized vocabulary, copying a vocabulary
 * file, determinism in the seed, the llama3 rope factors, option errors (and that they
 * leave no file behind), and allocation failures at every point.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/test_synth_%ld_%s", graft_test_tmp_dir(), (long)getpid(), name);
}

static int synth(const char *arch, int type, uint64_t seed, const char *vocab,
                 const char *path, char **err)
{
    graft_synth_options o = {.arch = arch, .preset = "tiny", .type = type, .seed = seed,
                             .vocab_path = vocab, .out_path = path};
    return graft_synth_write(&o, err);
}

static graft__gguf *synth_open(const char *arch, int type, uint64_t seed, const char *name)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    char *err = NULL;
    int rc = synth(arch, type, seed, NULL, path, &err);
    if (rc != GRAFT_OK)
        fail_msg("synth %s: %s", arch, err ? err : "?");
    graft__gguf *g = NULL;
    rc = graft__gguf_open(path, &g, &err);
    if (rc != GRAFT_OK)
        fail_msg("open %s: %s", path, err ? err : "?");
    unlink(path); /* the mapping stays valid */
    return g;
}

static uint32_t get_u32(const graft__gguf *g, const char *key)
{
    uint32_t v = 0;
    if (graft__gguf_get_u32(g, key, &v) != GRAFT_OK)
        fail_msg("missing u32 key %s", key);
    return v;
}

static float get_f32(const graft__gguf *g, const char *key)
{
    float v = 0;
    if (graft__gguf_get_f32(g, key, &v) != GRAFT_OK)
        fail_msg("missing f32 key %s", key);
    return v;
}

static void assert_str_key(const graft__gguf *g, const char *key, const char *want)
{
    graft__gguf_str s;
    if (graft__gguf_get_str(g, key, &s) != GRAFT_OK)
        fail_msg("missing string key %s", key);
    if (!graft__gguf_str_eq(s, want))
        fail_msg("%s is '%.*s', want '%s'", key, (int)s.len, s.ptr, want);
}

static void get_arr(const graft__gguf *g, const char *key, graft__gguf_vtype type,
                    const graft__gguf_array **out)
{
    if (graft__gguf_get_arr(g, key, type, out) != GRAFT_OK)
        fail_msg("missing array key %s", key);
}

static const graft__gguf_tensor *tensor(const graft__gguf *g, const char *name, uint32_t type,
                                        uint64_t ne0, uint64_t ne1)
{
    const graft__gguf_tensor *t = graft__gguf_find_tensor(g, name);
    if (t == NULL)
        fail_msg("missing tensor %s", name);
    assert_int_equal(t->type, type);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
    assert_int_equal(t->n_dims, ne1 > 1 ? 2 : 1);
    return t;
}

/* Mean and standard deviation of the first n values of a tensor (any supported type). */
static void tensor_stats(const graft__gguf_tensor *t, double *mean, double *std)
{
    int64_t n = (int64_t)t->n_elems;
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    size_t row_bytes = graft__type_row_bytes(t->type, t->ne[0]);
    for (uint64_t r = 0; r < t->n_elems / t->ne[0]; r++)
        graft__dequantize_row(t->type, (const uint8_t *)t->data + r * row_bytes,
                              v + r * t->ne[0], (int64_t)t->ne[0]);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    *mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++)
        sq += (v[i] - *mean) * (v[i] - *mean);
    *std = sqrt(sq / (double)n);
    free(v);
}

/* The tensor's values look drawn from Normal(mean, std): both within 5 standard errors
 * (plus 2% of std for quantization error). */
static void assert_stats(const graft__gguf *g, const char *name, double mean, double std)
{
    const graft__gguf_tensor *t = graft__gguf_find_tensor(g, name);
    assert_non_null(t);
    double m, s, n = (double)t->n_elems;
    tensor_stats(t, &m, &s);
    if (fabs(m - mean) > 5 * std / sqrt(n) + 0.02 * std ||
        fabs(s - std) > (5 / sqrt(2 * n) + 0.02) * std)
        fail_msg("%s: mean %g std %g, want %g and %g", name, m, s, mean, std);
}

/* ---- metadata and tensors of each architecture ---------------------------------------- */

static void check_common_keys(const graft__gguf *g, const char *arch, uint32_t n_layer)
{
    char key[96];
    assert_str_key(g, "general.architecture", arch);
#define ARCH_U32(k, want)                                  \
    do {                                                   \
        snprintf(key, sizeof key, "%s.%s", arch, k);       \
        assert_int_equal(get_u32(g, key), (want));         \
    } while (0)
    ARCH_U32("context_length", 4096);
    ARCH_U32("embedding_length", 256);
    ARCH_U32("block_count", n_layer);
    ARCH_U32("feed_forward_length", 512);
    ARCH_U32("attention.head_count", 4);
    ARCH_U32("attention.head_count_kv", 2);
    ARCH_U32("attention.key_length", 64);
    ARCH_U32("attention.value_length", 64);
    ARCH_U32("rope.dimension_count", 64);
#undef ARCH_U32
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    assert_float_equal(get_f32(g, key), 10000.0f, 0.0f);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    assert_float_equal(get_f32(g, key), 1e-5f, 0.0f);
}

static void check_layer(const graft__gguf *g, int il, uint32_t type)
{
    char name[64];
#define T(what, t, a, b) \
    (snprintf(name, sizeof name, "blk.%d.%s", il, what), tensor(g, name, t, a, b))
    T("attn_norm.weight", GRAFT_TYPE_F32, 256, 1);
    T("attn_q.weight", type, 256, 256);
    T("attn_k.weight", type, 256, 128);
    T("attn_v.weight", type, 256, 128);
    T("attn_output.weight", type, 256, 256);
    T("ffn_norm.weight", GRAFT_TYPE_F32, 256, 1);
    T("ffn_gate.weight", type, 256, 512);
    T("ffn_up.weight", type, 256, 512);
    T("ffn_down.weight", type, 512, 256);
#undef T
}

static void check_arch(const char *arch, uint32_t n_layer, uint64_t per_layer)
{
    graft__gguf *g = synth_open(arch, GRAFT_TYPE_F32, 1, "arch.gguf");
    check_common_keys(g, arch, n_layer);
    tensor(g, "token_embd.weight", GRAFT_TYPE_F32, 256, 1024);
    tensor(g, "output_norm.weight", GRAFT_TYPE_F32, 256, 1);
    assert_null(graft__gguf_find_tensor(g, "output.weight")); /* tied */
    assert_null(graft__gguf_find_tensor(g, "rope_freqs.weight"));
    for (uint32_t il = 0; il < n_layer; il++)
        check_layer(g, (int)il, GRAFT_TYPE_F32);
    assert_int_equal(graft__gguf_n_tensors(g), 2 + n_layer * per_layer);
    char name[64];
    snprintf(name, sizeof name, "synth %s tiny F32", arch);
    assert_str_key(g, "general.name", name);
    graft__gguf_close(g);
}

static void test_llama(void **state)
{
    (void)state;
    check_arch("llama", 4, 9);
    graft__gguf *g = synth_open("llama", GRAFT_TYPE_F32, 1, "llama.gguf");
    assert_int_equal(get_u32(g, "general.file_type"), 0);
    assert_null(graft__gguf_find(g, "llama.attention.sliding_window"));
    assert_null(graft__gguf_find(g, "general.quantization_version"));
    assert_stats(g, "token_embd.weight", 0.0, 1.0);
    assert_stats(g, "blk.0.attn_q.weight", 0.0, 1.0 / 16);
    assert_stats(g, "blk.3.ffn_down.weight", 0.0, 1.0 / sqrt(512.0));
    assert_stats(g, "blk.1.attn_norm.weight", 1.0, 0.1);
    graft__gguf_close(g);
}

static void test_qwen2(void **state)
{
    (void)state;
    check_arch("qwen2", 4, 12);
    graft__gguf *g = synth_open("qwen2", GRAFT_TYPE_Q8_0, 1, "qwen2.gguf");
    tensor(g, "blk.2.attn_q.bias", GRAFT_TYPE_F32, 256, 1);
    tensor(g, "blk.2.attn_k.bias", GRAFT_TYPE_F32, 128, 1);
    tensor(g, "blk.2.attn_v.bias", GRAFT_TYPE_F32, 128, 1);
    assert_stats(g, "blk.2.attn_q.bias", 0.0, 0.1);
    graft__gguf_close(g);
}

static void test_qwen3(void **state)
{
    (void)state;
    check_arch("qwen3", 4, 11);
    graft__gguf *g = synth_open("qwen3", GRAFT_TYPE_F32, 1, "qwen3.gguf");
    tensor(g, "blk.0.attn_q_norm.weight", GRAFT_TYPE_F32, 64, 1);
    tensor(g, "blk.0.attn_k_norm.weight", GRAFT_TYPE_F32, 64, 1);
    assert_null(graft__gguf_find_tensor(g, "blk.0.attn_q.bias"));
    graft__gguf_close(g);
}

static void test_gemma3(void **state)
{
    (void)state;
    check_arch("gemma3", 6, 13);
    graft__gguf *g = synth_open("gemma3", GRAFT_TYPE_F32, 1, "gemma3.gguf");
    assert_int_equal(get_u32(g, "gemma3.attention.sliding_window"), 16);
    assert_int_equal(get_u32(g, "gemma3.attention.sliding_window_pattern"), 3);
    assert_float_equal(get_f32(g, "gemma3.rope.freq_base_swa"), 10000.0f, 0.0f);
    tensor(g, "blk.5.post_attention_norm.weight", GRAFT_TYPE_F32, 256, 1);
    tensor(g, "blk.5.post_ffw_norm.weight", GRAFT_TYPE_F32, 256, 1);
    tensor(g, "blk.5.attn_k_norm.weight", GRAFT_TYPE_F32, 64, 1);
    assert_stats(g, "token_embd.weight", 0.0, 1.0 / 16);
    graft__gguf_close(g);
}

/* ---- types ------------------------------------------------------------------------------- */

static void check_type(int type, uint32_t file_type)
{
    graft__gguf *g = synth_open("llama", type, 3, "type.gguf");
    tensor(g, "token_embd.weight", (uint32_t)type, 256, 1024);
    check_layer(g, 0, (uint32_t)type);
    assert_int_equal(get_u32(g, "general.file_type"), file_type);
    bool quantized = type != GRAFT_TYPE_F32 && type != GRAFT_TYPE_F16 && type != GRAFT_TYPE_BF16;
    if (quantized)
        assert_int_equal(get_u32(g, "general.quantization_version"), 2);
    char want[64];
    snprintf(want, sizeof want, "synth llama tiny %s", graft_type_name(type));
    assert_str_key(g, "general.name", want);
    /* quantization error is small next to the spread of the values */
    assert_stats(g, "blk.0.attn_q.weight", 0.0, 1.0 / 16);
    graft__gguf_close(g);
}

static void test_types(void **state)
{
    (void)state;
    check_type(GRAFT_TYPE_F16, 1);
    check_type(GRAFT_TYPE_BF16, 32);
    check_type(GRAFT_TYPE_Q8_0, 7);
    check_type(GRAFT_TYPE_Q4_0, 2);
    check_type(GRAFT_TYPE_Q5_1, 9);
    check_type(GRAFT_TYPE_IQ4_NL, 25);
    check_type(GRAFT_TYPE_Q4_K, 14);
    check_type(GRAFT_TYPE_Q6_K, 18);
}

/* ---- vocabulary ---------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    const graft__gguf_str *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->ptr, y->ptr, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void test_synth_vocab(void **state)
{
    (void)state;
    graft__gguf *g = synth_open("qwen3", GRAFT_TYPE_F32, 1, "vocab.gguf");
    assert_str_key(g, "tokenizer.ggml.model", "llama");
    const graft__gguf_array *tokens, *scores, *types;
    get_arr(g, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING, &tokens);
    get_arr(g, "tokenizer.ggml.scores", GRAFT_GGUF_FLOAT32, &scores);
    get_arr(g, "tokenizer.ggml.token_type", GRAFT_GGUF_INT32, &types);
    assert_int_equal(tokens->count, 1024);
    assert_int_equal(scores->count, 1024);
    assert_int_equal(types->count, 1024);
    assert_true(graft__gguf_str_eq(tokens->strings[0], "<unk>"));
    assert_true(graft__gguf_str_eq(tokens->strings[1], "<s>"));
    assert_true(graft__gguf_str_eq(tokens->strings[2], "</s>"));
    assert_true(graft__gguf_str_eq(tokens->strings[3], "<0x00>"));
    assert_true(graft__gguf_str_eq(tokens->strings[3 + 0x0A], "<0x0A>"));
    assert_true(graft__gguf_str_eq(tokens->strings[258], "<0xFF>"));
    assert_true(graft__gguf_str_eq(tokens->strings[259], "\xe2\x96\x81"));
    assert_int_equal(graft__gguf_arr_i64(types, 0), GRAFT_TOKEN_UNKNOWN);
    assert_int_equal(graft__gguf_arr_i64(types, 1), GRAFT_TOKEN_CONTROL);
    assert_int_equal(graft__gguf_arr_i64(types, 2), GRAFT_TOKEN_CONTROL);
    for (uint64_t i = 3; i < 259; i++)
        assert_int_equal(graft__gguf_arr_i64(types, i), GRAFT_TOKEN_BYTE);
    for (uint64_t i = 259; i < 1024; i++) {
        assert_int_equal(graft__gguf_arr_i64(types, i), GRAFT_TOKEN_NORMAL);
        if (i > 259)
            assert_true(graft__gguf_arr_f32(scores, i) < graft__gguf_arr_f32(scores, i - 1));
    }
    graft__gguf_str *sorted = malloc(1024 * sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, tokens->strings, 1024 * sizeof *sorted);
    qsort(sorted, 1024, sizeof *sorted, cmp_str);
    for (int i = 1; i < 1024; i++)
        assert_int_not_equal(cmp_str(&sorted[i - 1], &sorted[i]), 0);
    free(sorted);
    assert_int_equal(get_u32(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_u32(g, "tokenizer.ggml.eos_token_id"), 2);
    bool add_bos = false;
    assert_int_equal(graft__gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), 0);
    assert_true(add_bos);
    graft__gguf_close(g);
}

/* The synthesized vocabulary compresses English: fewer tokens than bytes. */
static void test_synth_vocab_tokenizes(void **state)
{
    (void)state;
    graft__gguf *g = synth_open("llama", GRAFT_TYPE_F32, 1, "tok.gguf");
    graft__vocab *v = NULL;
    char *err = NULL;
    if (graft__vocab_load(g, &v, &err) != GRAFT_OK)
        fail_msg("vocab: %s", err ? err : "?");
    static const char text[] = "Once upon a time, there was a little girl named Lily. She loved "
                               "to play outside in the park with her friends.";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(graft__tokenize(v, text, strlen(text), false, false, &ids, &n), GRAFT_OK);
    assert_true(n > 0);
    assert_true(n < (strlen(text) * 2) / 3);
    graft__free(ids);
    graft__vocab_free(v);
    graft__gguf_close(g);
}

static void test_vocab_file(void **state)
{
    (void)state;
    char vocab[512], path[512];
    snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-gpt-2.gguf", graft_test_models_dir());
    tmp_path(path, sizeof path, "gpt2.gguf");
    char *err = NULL;
    int rc = synth("qwen2", GRAFT_TYPE_Q8_0, 5, vocab, path, &err);
    if (rc != GRAFT_OK)
        fail_msg("synth: %s", err ? err : "?");
    graft__gguf *g = NULL;
    assert_int_equal(graft__gguf_open(path, &g, NULL), GRAFT_OK);
    unlink(path);
    assert_str_key(g, "tokenizer.ggml.model", "gpt2");
    assert_str_key(g, "tokenizer.ggml.pre", "gpt-2");
    const graft__gguf_array *tokens, *merges;
    get_arr(g, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING, &tokens);
    assert_int_equal(tokens->count, 50257);
    get_arr(g, "tokenizer.ggml.merges", GRAFT_GGUF_STRING, &merges);
    assert_int_equal(merges->count, 50000);
    assert_null(graft__gguf_find(g, "gpt2.context_length")); /* only tokenizer.* is copied */
    assert_int_equal(get_u32(g, "qwen2.vocab_size"), 50257);
    tensor(g, "token_embd.weight", GRAFT_TYPE_Q8_0, 256, 50257);
    graft__gguf_close(g);
}

/* ---- determinism and the rope factors ------------------------------------------------------- */

static void *synth_bytes(uint64_t seed, size_t *size)
{
    char path[512];
    tmp_path(path, sizeof path, "seed.gguf");
    assert_int_equal(synth("gemma3", GRAFT_TYPE_Q4_K, seed, NULL, path, NULL), GRAFT_OK);
    void *p = graft_test_read_file(path, size);
    unlink(path);
    return p;
}

static const void *tensor_in(const void *file, size_t size, const char *name, size_t *n_bytes)
{
    graft__gguf *g = NULL;
    assert_int_equal(graft__gguf_open_memory(file, size, &g, NULL), GRAFT_OK);
    const graft__gguf_tensor *t = graft__gguf_find_tensor(g, name);
    assert_non_null(t);
    const void *data = t->data;
    *n_bytes = (size_t)t->n_bytes;
    graft__gguf_close(g);
    return data;
}

static void test_seed(void **state)
{
    (void)state;
    size_t n1, n2, n3;
    void *a = synth_bytes(42, &n1);
    void *b = synth_bytes(42, &n2);
    void *c = synth_bytes(43, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_int_equal(n1, n3);
    static const char *const names[] = {"token_embd.weight", "blk.0.attn_q.weight",
                                        "blk.5.ffn_down.weight", "blk.2.attn_norm.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t ba, bc;
        const void *ta = tensor_in(a, n1, names[i], &ba);
        const void *tc = tensor_in(c, n3, names[i], &bc);
        assert_int_equal(ba, bc);
        assert_int_not_equal(memcmp(ta, tc, ba), 0);
    }
    /* each tensor has its own stream: same-shaped tensors differ */
    size_t b0, b1;
    const void *q0 = tensor_in(a, n1, "blk.0.attn_q.weight", &b0);
    const void *q1 = tensor_in(a, n1, "blk.1.attn_q.weight", &b1);
    assert_int_equal(b0, b1);
    assert_int_not_equal(memcmp(q0, q1, b0), 0);
    free(a);
    free(b);
    free(c);
}

static void test_llama3_rope_factors(void **state)
{
    (void)state;
    /* Llama 3.2 1B: head_dim 64, base 500000, factor 32, low 1, high 4, original ctx 8192;
     * expected values computed separately in double precision. */
    float f[32];
    graft__synth_llama3_rope_factors(f, 64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
    static const struct {
        int i;
        double want;
    } cases[] = {{0, 1.0},           {7, 1.0},  {14, 1.0}, {15, 1.6513292457638984},
                 {16, 3.2922621029408843}, {17, 9.666728978753293}, {18, 32.0}, {31, 32.0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        assert_float_equal(f[cases[k].i], cases[k].want, 1e-5 * cases[k].want);
}

/* ---- errors ------------------------------------------------------------------------------ */

/* No file named like `path` (the output or a temporary beside it) exists. */
static void assert_no_trace(const char *path)
{
    assert_int_not_equal(access(path, F_OK), 0);
    const char *slash = strrchr(path, '/');
    DIR *d = opendir(graft_test_tmp_dir());
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, slash + 1, strlen(slash + 1)) == 0)
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
}

static void expect_error(graft_synth_options o, int status, const char *words)
{
    char *err = NULL;
    assert_int_equal(graft_synth_write(&o, &err), status);
    assert_non_null(err);
    if (strstr(err, words) == NULL)
        fail_msg("message '%s' lacks '%s'", err, words);
    graft_free(err);
    if (o.out_path != NULL)
        assert_no_trace(o.out_path);
}

static void test_bad_options(void **state)
{
    (void)state;
    char path[512], not_vocab[512], text_file[512], missing[512];
    tmp_path(path, sizeof path, "bad.gguf");
    tmp_path(not_vocab, sizeof not_vocab, "novocab.gguf");
    snprintf(text_file, sizeof text_file, "%s/stories260K.tokenizer-tests.inp", graft_test_models_dir());
    snprintf(missing, sizeof missing, "%s/no-such-vocab.gguf", graft_test_models_dir());
    graft_synth_options ok = {.arch = "llama", .preset = "tiny", .type = GRAFT_TYPE_F32,
                              .out_path = path};
    graft_synth_options o = ok;
    o.arch = "mamba";
    expect_error(o, GRAFT_EINVAL, "unknown architecture 'mamba'");
    o = ok;
    o.preset = "llama-70b";
    expect_error(o, GRAFT_EINVAL, "unknown preset 'llama-70b'");
    o = ok;
    o.type = GRAFT_TYPE_Q2_K;
    expect_error(o, GRAFT_EINVAL, "Q2_K");
    o = ok;
    o.type = 99;
    expect_error(o, GRAFT_EINVAL, "type 99");
    o = ok;
    o.out_path = NULL;
    expect_error(o, GRAFT_EINVAL, "no output path");
    o = ok;
    o.preset = "gemma3-1b";
    o.type = GRAFT_TYPE_Q4_K;
    expect_error(o, GRAFT_EINVAL, "1152 (n_embd)");
    o = ok;
    o.vocab_path = missing;
    expect_error(o, GRAFT_EIO, "no-such-vocab.gguf");
    o = ok;
    o.vocab_path = text_file;
    expect_error(o, GRAFT_EFORMAT, "cannot read vocabulary");
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_int_equal(graft__gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(graft__gguf_writer_write_file(w, not_vocab, NULL), 0);
    graft__gguf_writer_free(w);
    o = ok;
    o.vocab_path = not_vocab;
    expect_error(o, GRAFT_EINVAL, "is not a vocabulary");
    unlink(not_vocab);
    o = ok;
    o.out_path = "/nonexistent-dir/x.gguf";
    expect_error(o, GRAFT_EIO, "/nonexistent-dir/x.gguf");
    assert_int_equal(graft_synth_write(NULL, NULL), GRAFT_EINVAL);
}

/* Every allocation failure is a clean GRAFT_ENOMEM that leaks nothing and leaves no file. */
static void test_alloc_failures(void **state)
{
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "oom.gguf");
    long baseline = graft__alloc_live();
    int rc = GRAFT_ENOMEM;
    long n = 0;
    for (; rc != GRAFT_OK; n++) {
        graft__alloc_fail_after(n, false);
        char *err = NULL;
        rc = synth("qwen2", GRAFT_TYPE_Q8_0, 1, NULL, path, &err);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        graft_free(err);
        assert_int_equal(graft__alloc_live(), baseline);
        assert_no_trace(path);
    }
    unlink(path);
    assert_int_equal(graft__alloc_live(), baseline);
    assert_true(n > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_synth_vocab),
        cmocka_unit_test(test_synth_vocab_tokenizes),
        cmocka_unit_test(test_vocab_file),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_llama3_rope_factors),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
