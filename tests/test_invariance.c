/*
 * test_invariance.c: batch invariance, proven by memcmp (DESIGN.md invariant 1).
 *
 * For each model and each kernel set this processor runs, the logits of every position of
 * one prompt are computed (a) one token at a time, (b) in one prefill, (c) in chunks of 1,
 * 7 and 64, (d) in batches mixed with tokens of three unrelated sequences, and (e) with 1
 * and 2 threads, in one prefill and one token at a time (a lone token's attention may run
 * split over the two threads); all must be the same bytes. Across kernel sets (which may quantize
 * activations) the logits must agree with the scalar reference within a stated tolerance.
 * Models: stories260K (F32 and every derived quantized copy) and synth qwen3 / gemma3 tiny
 * models in Q8_0 and Q4_K, the gemma3 prompt longer than its sliding window. Each kernel set
 * runs on a model loaded for it alone, so the paths that pack weights (Q8_0, Q4_0 and
 * Q4_K on avx2, avxvnni and avx512) are checked on their packed forms. The avxvnni kernels
 * must give the avx2 kernels' logits bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "graft.h"
#include "models.h"
#include "skips.h"

#define PROMPT_LEN 72
#define OTHERS 3

static const char *const kernel_sets[] = {"scalar", "avx2", "avxvnni", "avx512"};

typedef struct subject {
    char path[1024]; /* the model's file: each kernel set loads its own copy */
    graft_model *model;
    int32_t n_vocab;
    int32_t prompt[PROMPT_LEN];
    int32_t other[OTHERS][PROMPT_LEN];
} subject;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_random(void)
{
    return (uint32_t)(graft_test_xorshift64(&rng_state) >> 11);
}

static graft_context *open_context(const subject *s, const char *kernels, int threads)
{
    graft_context_options o = graft_context_default_options();
    o.n_ctx = (OTHERS + 3) * PROMPT_LEN; /* chunks of 1 give others up to OTHERS + 1 tokens a step */
    o.n_seq = 1 + OTHERS;
    o.n_threads = threads;
    o.kernels = kernels;
    graft_context *ctx = NULL;
    assert_int_equal(graft_context_create_ex(s->model, &o, &ctx, NULL), GRAFT_OK);
    return ctx;
}

/* Logits (PROMPT_LEN, n_vocab) of sequence 0, fed in chunks of `chunk` tokens; with
 * `mixed`, each batch also carries tokens of the other sequences before and after. */
static float *run_prompt(const subject *s, const char *kernels, int threads, int chunk, bool mixed)
{
    graft_context *ctx = open_context(s, kernels, threads);
    float *out = malloc((size_t)PROMPT_LEN * (size_t)s->n_vocab * sizeof(float));
    graft_batch_token batch[PROMPT_LEN + 4 * OTHERS];
    float *logits = malloc((size_t)(PROMPT_LEN + 4 * OTHERS) * (size_t)s->n_vocab * sizeof(float));
    int other_pos[OTHERS] = {0}, filled = 0;
    for (int start = 0; start < PROMPT_LEN; start += chunk) {
        int len = PROMPT_LEN - start < chunk ? PROMPT_LEN - start : chunk, n = 0;
        for (int o = 0; mixed && o < OTHERS; o++)
            for (int k = 0; k < 1 + o; k++)
                batch[n++] = (graft_batch_token){1 + o, s->other[o][other_pos[o]++ % PROMPT_LEN], k == 0};
        for (int i = 0; i < len; i++)
            batch[n++] = (graft_batch_token){0, s->prompt[start + i], 1};
        for (int o = 0; mixed && o < OTHERS; o++)
            batch[n++] = (graft_batch_token){1 + o, s->other[o][other_pos[o]++ % PROMPT_LEN], 1};
        assert_int_equal(graft_context_eval_batch(ctx, batch, (size_t)n, logits), GRAFT_OK);
        int row = 0;
        for (int i = 0; i < n; i++) {
            if (!batch[i].want_logits)
                continue;
            if (batch[i].seq == 0)
                memcpy(out + (size_t)(filled++) * s->n_vocab, logits + (size_t)row * s->n_vocab,
                       (size_t)s->n_vocab * sizeof(float));
            row++;
        }
    }
    assert_int_equal(filled, PROMPT_LEN);
    free(logits);
    graft_context_free(ctx);
    return out;
}

static void expect_same(const float *want, const float *got, const subject *s, const char *what,
                        const char *kernels)
{
    size_t bytes = (size_t)PROMPT_LEN * (size_t)s->n_vocab * sizeof(float);
    if (memcmp(want, got, bytes) != 0) {
        for (int p = 0; p < PROMPT_LEN; p++)
            if (memcmp(want + (size_t)p * s->n_vocab, got + (size_t)p * s->n_vocab,
                       (size_t)s->n_vocab * sizeof(float)) != 0)
                fail_msg("%s kernels: %s differs from one prefill at position %d", kernels, what,
                         p);
    }
}

/* Max |a - b| over all logits, relative to the largest |b|. */
static double relative_gap(const float *a, const float *b, size_t count)
{
    double worst = 0.0, scale = 1.0;
    for (size_t i = 0; i < count; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return worst / scale;
}

/* The model of s->path, loaded afresh: the first path to run a model packs it for itself
 * (model_pack.c), so each kernel set gets its own copy and computes from its packed form. */
static void load_subject(subject *s)
{
    char *err = NULL;
    s->model = NULL;
    if (graft_model_load(s->path, &s->model, &err) != GRAFT_OK)
        fail_msg("cannot load %s: %s", s->path, err ? err : "?");
    graft_free(err);
    graft_model_info info;
    graft_model_get_info(s->model, &info);
    s->n_vocab = info.n_vocab;
}

static void check_subject(subject *s, const char *name, double simd_tolerance)
{
    load_subject(s);
    for (int i = 0; i < PROMPT_LEN; i++) {
        s->prompt[i] = (int32_t)(next_random() % (uint32_t)s->n_vocab);
        for (int o = 0; o < OTHERS; o++)
            s->other[o][i] = (int32_t)(next_random() % (uint32_t)s->n_vocab);
    }
    float *scalar = NULL, *avx2 = NULL;
    for (size_t k = 0; k < sizeof kernel_sets / sizeof kernel_sets[0]; k++) {
        const char *ks = kernel_sets[k];
        if (!graft_test_path_runs(ks, name))
            continue;
        if (k > 0) {
            graft_model_free(s->model);
            load_subject(s);
        }
        float *prefill = run_prompt(s, ks, 1, PROMPT_LEN, false);
        static const int chunks[] = {1, 7, 64};
        for (size_t c = 0; c < 3; c++) {
            char what[64];
            snprintf(what, sizeof what, "chunks of %d", chunks[c]);
            float *got = run_prompt(s, ks, 1, chunks[c], false);
            expect_same(prefill, got, s, what, ks);
            free(got);
            snprintf(what, sizeof what, "chunks of %d mixed with 3 sequences", chunks[c]);
            got = run_prompt(s, ks, 2, chunks[c], true);
            expect_same(prefill, got, s, what, ks);
            free(got);
        }
        float *threaded = run_prompt(s, ks, 2, PROMPT_LEN, false);
        expect_same(prefill, threaded, s, "2 threads", ks);
        free(threaded);
        threaded = run_prompt(s, ks, 2, 1, false);
        expect_same(prefill, threaded, s, "one token at a time on 2 threads", ks);
        free(threaded);
        if (scalar == NULL) {
            scalar = prefill;
            printf("%-28s %-7s identical over 9 ways of batching\n", name, ks);
            continue;
        }
        double gap = relative_gap(prefill, scalar, (size_t)PROMPT_LEN * (size_t)s->n_vocab);
        printf("%-28s %-7s identical over 9 ways of batching; vs scalar %.2e (tolerance %.0e)\n",
               name, ks, gap, simd_tolerance);
        if (gap > simd_tolerance)
            fail_msg("%s: %s kernels differ from scalar by %.3e (relative), over %.0e", name, ks,
                     gap, simd_tolerance);
        if (strcmp(ks, "avxvnni") == 0 && avx2 != NULL)
            expect_same(avx2, prefill, s, "the avx2 kernels' logits", ks);
        if (strcmp(ks, "avx2") == 0)
            avx2 = prefill;
        else
            free(prefill);
    }
    free(scalar);
    free(avx2);
    graft_model_free(s->model);
}

/* Tolerances across kernel sets, relative to the largest logit. Float kernels differ from
 * scalar only in summation order (about 1e-6), but K and V are stored in float16 (the
 * default), where a last-bit difference can round to the neighbouring half: 1e-3. 8-bit
 * activation quantization moves logits by up to a few percent of their range on these
 * small models. */
#define FLOAT_TOLERANCE 1e-3
#define QUANT_TOLERANCE 5e-2

static void test_stories(void **state)
{
    (void)state;
    static const char *files[] = {GRAFT_TEST_STORIES_ALL};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        static subject s;
        graft_test_model_path(s.path, sizeof s.path, files[i]);
        check_subject(&s, strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i],
                      i < 2 ? FLOAT_TOLERANCE : QUANT_TOLERANCE);
    }
}

static void check_synth(const char *arch, int type)
{
    char file[64], path[512];
    snprintf(file, sizeof file, "invariance-%s-%d.gguf", arch, type);
    graft_model *m = graft_test_synth_model(arch, "tiny", type, 7, file);
    assert_non_null(m);
    graft_model_info info;
    graft_model_get_info(m, &info);
    if (strcmp(arch, "gemma3") == 0)
        assert_true(info.sliding_window > 0 && info.sliding_window * 3 < PROMPT_LEN);
    graft_model_free(m);
    static subject s;
    graft_test_tmp_path(s.path, sizeof s.path, file);
    char name[64];
    snprintf(name, sizeof name, "synth %s %s", arch, graft_type_name(type));
    check_subject(&s, name, QUANT_TOLERANCE);
    remove(graft_test_tmp_path(path, sizeof path, file));
}

static void test_synth_qwen3(void **state)
{
    (void)state;
    check_synth("qwen3", 8);  /* Q8_0 */
    check_synth("qwen3", 12); /* Q4_K */
}

static void test_synth_gemma3(void **state)
{
    (void)state;
    check_synth("gemma3", 8);
    check_synth("gemma3", 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_synth_qwen3),
        cmocka_unit_test(test_synth_gemma3),
    };
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
