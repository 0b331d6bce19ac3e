/*
 * test_matmul_avx512.c: the AVX-512 matmul path (graft__matmul_avx512) against the scalar
 * reference graft__matmul, and its bit-exact batch invariance, for every weight type.
 *
 * For each type, random weights (n_out = 37 rows, block magnitudes spread over 2^-3..2^3)
 * are quantized with graft__quantize_row and multiplied with 64 random tokens (uniform,
 * with about 1% outliers 20 times larger, like the channels LLM activations have), at
 * n_in = 256, 1024, 3072 and, where the block size allows, a length that is not a multiple
 * of the path's 128-element groups (96, 160) or of 16 (100, float types).
 *
 * Accuracy, per output y[t][o] with S = sum_i |w_i| |x_i| (w as decoded by the reference):
 *   - F32, F16, BF16 (f32 activations, FMA): |y - y_ref| <= 1e-5 S. Only the order of the
 *     float additions differs from the scalar path; the error of either is a few times
 *     2^-24 sqrt(n_in) S, orders of magnitude below the bound.
 *   - quantized types (activations quantized per token to 8 bits: blocks of 32 for the
 *     32-element types, of 256 for the K-quants): each x_i moves by at most half a step,
 *     max|x| / 254 over its activation block B, so
 *         |y - y_ref| <= sum_B (max_B |x| / 254) sum_{i in B} |w_i| + 1e-5 S,
 *     the second term covering the float rounding of both sides. This bound is reached
 *     only if every rounding goes the same way; over all outputs the squared error must
 *     stay within 1.5 times what independent roundings, uniform over a step, give:
 *         sum (y - y_ref)^2 <= 1.5 sum_{t,o} sum_B (max_B |x| / 127)^2 / 12 sum_{i in B} w_i^2
 *     (the expectation; with 2368 outputs the sum lands within a few percent of it), which
 *     a biased kernel (a scale slightly off, a dropped block) fails long before the bound.
 * Float types also keep the normalized mean squared error that ggml's test-backend-ops
 * reports, NMSE = sum (y - y_ref)^2 / sum y_ref^2, below 1e-10. The observed worst
 * |y - y_ref| / S, NMSE and the ratio to the rounding model per type are printed.
 *
 * Exactness of the integer part (quantized types, packed ones included): y must equal, up
 * to float rounding (2e-6 sum_i |w_i xq_i|), the double-precision dot product of the decoded
 * weights with the activations xq quantized as the path does (per block of 32, or of 256
 * for the K-quants unpacked; packed Q4_K quantizes per 32: d = amax / 127, q =
 * round-half-even(x * (127 / amax)), q = 0 when amax is 0). A wrong weight code, scale or
 * min term, which the bounds above may absorb, moves y far beyond that.
 *
 * Invariance (memcmp): each token computed alone (n_tok = 1) and in batches of 3, 8 and 13
 * starting at several positions equals its row of the n_tok = 64 result; and computing the
 * rows as [0, 5) + [5, 37), or [0, 1) + [1, 2) + [2, 11) + [11, 37), equals one call over
 * [0, 37), for n_tok = 64 and 13. The same again (without the slow reference) for 300 rows
 * of 1024 and of 3072 inputs, which the path cuts into several row blocks, token panels
 * and (the 32-element types) packed pieces.
 *
 * Packed weights (the path's packed_type/pack: Q8_0, Q4_0 and Q4_K in 16 interleaved rows):
 * the same accuracy and invariance checks on 48 rows (3 row blocks) at n_in 32 (256 for
 * Q4_K) to 3072 and 304 rows (19 row blocks, so an odd one is left over) at 1024 and 3072,
 * with row ranges cut on multiples of 16; and no packed form for other types, ragged row
 * counts or (Q4_K) inputs that are not whole blocks of 256.
 *
 * The weights start at an odd address and are allocated to their exact size, so a kernel
 * that assumed alignment or read past the matrix fails here (under ASan for the latter).
 * Tests are skipped (and reported so, tests/support/skips.h) when the processor lacks the
 * instructions the path uses.
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

#include "act_quant.h"
#include "fixtures.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/matmul_path.h"
#include "skips.h"

enum {
    N_OUT = 37,      /* rows of most problems: a ragged count */
    N_OUT_BIG = 300, /* rows of the problems that span several of the path's row blocks */
    N_OUT_PACKED = 48,      /* rows of most packed problems: 3 blocks of 16 */
    N_OUT_BIG_PACKED = 304, /* 19 blocks of 16 */
    N_TOK = 64,      /* tokens of every problem */
    MAX_IN = 3072    /* longest row */
};

static const graft__matmul_path *path = &graft__matmul_avx512;

/* ------------------------------------------------------------------------------------
 * Helpers.
 */
static bool is_float_type(uint32_t type)
{
    return type == GRAFT_TYPE_F32 || type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_BF16;
}

static bool is_kquant(uint32_t type)
{
    return type == GRAFT_TYPE_Q4_K || type == GRAFT_TYPE_Q5_K || type == GRAFT_TYPE_Q6_K;
}

/* Elements per activation quantization block (0: activations not quantized). */
static int act_block(uint32_t type)
{
    return is_float_type(type) ? 0 : is_kquant(type) ? 256 : 32;
}

/* One problem: weights, their decoded values, tokens, the reference result. */
typedef struct problem {
    uint32_t type;
    uint32_t gemm_type; /* type, or its packed type when the problem is packed */
    int64_t n_in, n_out;
    size_t row_bytes;
    uint8_t *w_alloc;
    uint8_t *w;    /* (n_out rows of row_bytes), at an odd address */
    float *wd;     /* (n_out, n_in) decoded weights */
    float *x;      /* (N_TOK, n_in) */
    float *y_ref;  /* (N_TOK, n_out) */
    uint8_t *packed; /* the weights packed by the path (64-byte aligned), or NULL */
    size_t act_bytes;
    uint8_t *xa;   /* (N_TOK, act_bytes) prepared activations, 64-byte aligned */
} problem;

/* The reference result is computed only if with_reference (it dominates the time). */
static void make_problem(problem *p, uint32_t type, int64_t n_in, int64_t n_out,
                         bool with_reference, bool packed, uint64_t seed)
{
    graft_test_rng_seed(seed);
    p->type = type;
    p->gemm_type = type;
    p->packed = NULL;
    p->n_in = n_in;
    p->n_out = n_out;
    p->row_bytes = graft__type_row_bytes(type, (uint64_t)n_in);
    assert_true(p->row_bytes > 0);
    p->w_alloc = malloc(p->row_bytes * (size_t)n_out + 1);
    p->w = p->w_alloc + 1;
    p->wd = malloc(sizeof(float) * (size_t)(n_out * n_in));
    p->x = malloc(sizeof(float) * N_TOK * (size_t)n_in);
    p->y_ref = malloc(sizeof(float) * N_TOK * (size_t)n_out);
    assert_non_null(p->w_alloc);
    assert_non_null(p->wd && p->x && p->y_ref);

    float row[MAX_IN];
    for (int o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i += 32) {
            float scale = exp2f((float)(graft_test_rng_u32() % 7) - 3.0f);
            for (int64_t j = i; j < i + 32 && j < n_in; j++)
                row[j] = scale * graft_test_rng_float();
        }
        assert_int_equal(graft__quantize_row(type, row, p->w + o * p->row_bytes, n_in), 0);
        graft__dequantize_row(type, p->w + o * p->row_bytes, p->wd + o * n_in, n_in);
    }
    for (int64_t i = 0; i < N_TOK * n_in; i++)
        p->x[i] = graft_test_rng_float() * (graft_test_rng_u32() % 100 == 0 ? 20.0f : 1.0f);
    if (with_reference)
        graft__matmul(p->y_ref, p->w, type, n_in, n_out, p->x, N_TOK);

    if (packed) {
        p->gemm_type = path->packed_type(type, n_in, n_out);
        assert_true(p->gemm_type >= GRAFT_TYPE_PACKED_BASE);
        size_t bytes = (path->packed_bytes(p->gemm_type, n_in, n_out) + 63) / 64 * 64;
        p->packed = aligned_alloc(64, bytes);
        assert_non_null(p->packed);
        path->pack(p->gemm_type, p->packed, p->w, n_in, n_out);
    }
    p->act_bytes = path->act_bytes(p->gemm_type, n_in);
    assert_int_equal(p->act_bytes % 64, 0);
    p->xa = aligned_alloc(64, p->act_bytes * N_TOK);
    assert_non_null(p->xa);
    for (int t = 0; t < N_TOK; t++)
        path->act_prepare(p->gemm_type, p->xa + t * p->act_bytes, p->x + t * n_in, n_in);
}

static void free_problem(problem *p)
{
    free(p->w_alloc);
    free(p->wd);
    free(p->x);
    free(p->y_ref);
    free(p->xa);
    free(p->packed);
}

/* y (n_tok, n_out) rows [o0, o1) for tokens [t0, t0 + n_tok). */
static void run(const problem *p, float *y, int64_t o0, int64_t o1, int t0, int n_tok)
{
    const void *w = p->packed != NULL ? (const void *)p->packed : p->w;
    path->gemm(p->gemm_type, y, p->n_out, w, p->n_in, o0, o1, p->xa + t0 * p->act_bytes, n_tok);
}

/* A (N_TOK, n_out) output buffer, every float's bits 0xffffffff. */
static float *new_output(const problem *p)
{
    float *y = malloc(sizeof(float) * N_TOK * (size_t)p->n_out);
    assert_non_null(y);
    memset(y, 0xff, sizeof(float) * N_TOK * (size_t)p->n_out);
    return y;
}

/* ------------------------------------------------------------------------------------
 * Accuracy.
 */

/* Elements per block the path quantizes activations in (0: not quantized): the block of
 * act_block, except packed Q4_K, which quantizes per 32 (matmul_r16_kquant_avx512.c). */
static int path_act_block(const problem *p)
{
    return p->packed != NULL && p->type == GRAFT_TYPE_Q4_K ? 32 : act_block(p->type);
}

/* y equals the emulated integer dot products (see the top of the file) within the float
 * rounding; returns the worst |y - exact| / sum |w xq|. */
static double check_exact(const problem *p, const float *y)
{
    int block = path_act_block(p);
    double *xq = malloc(sizeof(double) * (size_t)p->n_in);
    assert_non_null(xq);
    double worst = 0;
    for (int t = 0; t < N_TOK; t++) {
        graft_test_quantize_acts(xq, p->x + t * p->n_in, p->n_in, block, 0.0f);
        for (int o = 0; o < p->n_out; o++) {
            const float *w = p->wd + o * p->n_in;
            double exact = 0, sq = 0;
            for (int64_t i = 0; i < p->n_in; i++) {
                exact += (double)w[i] * xq[i];
                sq += fabs((double)w[i] * xq[i]);
            }
            double got = y[t * p->n_out + o], err = fabs(got - exact);
            if (!(err <= 2e-6 * sq))
                fail_msg("%s%s n_in %lld: y[%d][%d] = %.9g, emulated %.9g (error %.3g of "
                         "sum |w xq| %.4g)", graft__type_traits_of(p->type)->name,
                         p->packed ? " packed" : "", (long long)p->n_in, t, o, got, exact,
                         sq > 0 ? err / sq : err, sq);
            worst = fmax(worst, sq > 0 ? err / sq : 0);
        }
    }
    free(xq);
    return worst;
}

/* The error bound of y[t][o] (see the top of the file); *s = sum |w||x|, *expected = the
 * expected squared error if each activation's rounding error is uniform over its step. */
static double error_bound(const problem *p, int t, int o, double *s, double *expected)
{
    const float *w = p->wd + o * p->n_in, *x = p->x + t * p->n_in;
    int blk = act_block(p->type);
    double sum = 0, quant = 0, var = 0;
    for (int64_t b = 0; b < p->n_in; b += blk ? blk : p->n_in) {
        int64_t end = blk ? b + blk : p->n_in;
        double amax = 0, wsum = 0, w2sum = 0;
        for (int64_t i = b; i < end; i++) {
            sum += fabs((double)w[i] * x[i]);
            amax = fmax(amax, fabs(x[i]));
            wsum += fabs(w[i]);
            w2sum += (double)w[i] * w[i];
        }
        if (blk) {
            double step = amax / 127.0;
            quant += step / 2 * wsum;
            var += step * step / 12 * w2sum;
        }
    }
    *s = sum;
    *expected = var;
    return quant + 1e-5 * sum;
}

static void check_accuracy(const problem *p, const float *y)
{
    double err2 = 0, ref2 = 0, expected2 = 0, worst = 0;
    for (int t = 0; t < N_TOK; t++) {
        for (int o = 0; o < p->n_out; o++) {
            double s, expected;
            double bound = error_bound(p, t, o, &s, &expected);
            double ref = p->y_ref[t * p->n_out + o];
            double err = fabs((double)y[t * p->n_out + o] - ref);
            if (!(err <= bound))
                fail_msg("%s n_in %lld: y[%d][%d] = %.9g, reference %.9g, error %.3g > %.3g",
                         graft__type_traits_of(p->type)->name, (long long)p->n_in, t, o,
                         (double)y[t * p->n_out + o], ref, err, bound);
            err2 += err * err;
            ref2 += ref * ref;
            expected2 += expected;
            worst = fmax(worst, s > 0 ? err / s : 0);
        }
    }
    double nmse = err2 / ref2;
    double exact = is_float_type(p->type) ? 0.0 : check_exact(p, y);
    print_message("    %-6s n_in %4lld n_out %3lld: max |err| / sum|w||x| = %.2e, NMSE = %.2e"
                  " (%.2f of the rounding model), vs emulation %.2e\n",
                  graft__type_traits_of(p->type)->name, (long long)p->n_in,
                  (long long)p->n_out, worst, nmse,
                  expected2 > 0 ? err2 / expected2 : 0.0, exact);
    if (is_float_type(p->type))
        assert_true(nmse <= 1e-10);
    else
        assert_true(err2 <= 1.5 * expected2);
}

/* ------------------------------------------------------------------------------------
 * Invariance.
 */

/* Batches of n_tok tokens at several starts: each row equals the full batch's row. */
static void check_token_batches(const problem *p, const float *y_full, int n_tok)
{
    static const int starts[] = {0, 1, 7, 13, 30, 51, 63};
    float *y = new_output(p);
    size_t row = sizeof(float) * (size_t)p->n_out;
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        int t0 = starts[k] + n_tok <= N_TOK ? starts[k] : N_TOK - n_tok;
        run(p, y, 0, p->n_out, t0, n_tok);
        for (int t = 0; t < n_tok; t++)
            if (memcmp(y + t * p->n_out, y_full + (t0 + t) * p->n_out, row) != 0)
                fail_msg("%s n_in %lld: token %d computed in a batch of %d at %d differs",
                         graft__type_traits_of(p->type)->name, (long long)p->n_in, t0 + t,
                         n_tok, t0);
    }
    free(y);
}

/* Rows computed in pieces split at `cuts` equal one call over all rows. */
static void check_row_split(const problem *p, const float *y_full, int n_tok,
                            const int *cuts, int n_cuts)
{
    float *y = new_output(p);
    int64_t o0 = 0;
    for (int k = 0; k <= n_cuts; k++) {
        int64_t o1 = k < n_cuts ? cuts[k] : p->n_out;
        run(p, y, o0, o1, 0, n_tok);
        o0 = o1;
    }
    assert_memory_equal(y, y_full, sizeof(float) * (size_t)(p->n_out * n_tok));
    free(y);
}

/* Accuracy (if `accuracy`) and invariance for one shape, of the weights as they are or
 * packed by the path. Packed matrices are split only on multiples of 16 rows. */
static void check_shape(uint32_t type, int64_t n_in, int64_t n_out, bool accuracy, bool packed)
{
    problem p;
    make_problem(&p, type, n_in, n_out, accuracy, packed,
                 (uint64_t)type * 1000 + (uint64_t)(n_in + n_out));
    float *y64 = new_output(&p), *y13 = new_output(&p);
    run(&p, y64, 0, n_out, 0, N_TOK);
    if (accuracy)
        check_accuracy(&p, y64);

    static const int batches[] = {1, 3, 5, 8, 13};
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++)
        check_token_batches(&p, y64, batches[k]);

    static const int split2[] = {5}, split4[] = {1, 2, 11};
    static const int packed2[] = {16}, packed3[] = {16, 32};
    const int *cuts2 = packed ? packed2 : split2, *cuts = packed ? packed3 : split4;
    int n_cuts = packed ? 2 : 3;
    run(&p, y13, 0, n_out, 0, 13);
    check_row_split(&p, y64, N_TOK, cuts2, 1);
    check_row_split(&p, y64, N_TOK, cuts, n_cuts);
    check_row_split(&p, y13, 13, cuts2, 1);
    check_row_split(&p, y13, 13, cuts, n_cuts);
    free(y64);
    free(y13);
    free_problem(&p);
}

static void test_type(void **state)
{
    uint32_t type = *(const uint32_t *)*state;
    char what[32];
    snprintf(what, sizeof what, "matmul %s", graft__type_traits_of(type)->name);
    GRAFT_TEST_REQUIRE_PATH("avx512", what);
    static const int64_t common[] = {256, 1024, 3072};
    for (size_t k = 0; k < sizeof common / sizeof common[0]; k++)
        check_shape(type, common[k], N_OUT, true, false);
    if (is_float_type(type))
        check_shape(type, 100, N_OUT, true, false);
    else if (!is_kquant(type)) {
        check_shape(type, 96, N_OUT, true, false);
        check_shape(type, 160, N_OUT, true, false);
    }
    check_shape(type, 1024, N_OUT_BIG, false, false);
    check_shape(type, 3072, N_OUT_BIG, false, false);
}

/* The packed forms (Q8_0, Q4_0 and Q4_K, 16 interleaved rows): the same accuracy and invariance
 * checks on row counts that are multiples of 16 (an odd number of row blocks included),
 * and no packed form for other types or for a ragged row count. */
static void test_packed(void **state)
{
    uint32_t type = *(const uint32_t *)*state;
    char what[32];
    snprintf(what, sizeof what, "matmul %s packed", graft__type_traits_of(type)->name);
    GRAFT_TEST_REQUIRE_PATH("avx512", what);
    static const int64_t n_ins[] = {32, 96, 256, 1024, 3072};
    for (size_t k = 0; k < sizeof n_ins / sizeof n_ins[0]; k++)
        if (n_ins[k] % act_block(type) == 0)
            check_shape(type, n_ins[k], N_OUT_PACKED, true, true);
    check_shape(type, 1024, N_OUT_BIG_PACKED, false, true);
    check_shape(type, 3072, N_OUT_BIG_PACKED, false, true);
    assert_int_equal(path->packed_type(type, 1024, N_OUT), 0);
    assert_int_equal(path->packed_type(type, 1024, 0), 0);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q4_K, 1024 + 32, 64), 0);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q5_K, 1024, 64), 0);
    assert_int_equal(path->packed_type(GRAFT_TYPE_F16, 1024, 64), 0);
}

/* Degenerate calls: no rows, no tokens, a single row, and the path's name. */
static void test_edges(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "matmul degenerate calls");
    assert_string_equal(path->name, "avx512");
    problem p;
    make_problem(&p, GRAFT_TYPE_Q4_0, 256, N_OUT, false, false, 7);
    float *y = new_output(&p);
    run(&p, y, 3, 3, 0, N_TOK); /* empty row range */
    run(&p, y, 0, N_OUT, 0, 0); /* no tokens */
    for (size_t i = 0; i < N_TOK * N_OUT; i++)
        assert_int_equal(((uint32_t *)y)[i], 0xffffffffu);
    run(&p, y, 36, 37, 0, N_TOK);
    for (int t = 0; t < N_TOK; t++) {
        assert_int_equal(((uint32_t *)y)[t * N_OUT + 35], 0xffffffffu);
        assert_int_not_equal(((uint32_t *)y)[t * N_OUT + 36], 0xffffffffu);
    }
    free(y);
    free_problem(&p);
}

static const uint32_t types[] = {
    GRAFT_TYPE_F32,  GRAFT_TYPE_F16,  GRAFT_TYPE_BF16, GRAFT_TYPE_Q8_0,
    GRAFT_TYPE_Q4_0, GRAFT_TYPE_Q4_1, GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1,
    GRAFT_TYPE_IQ4_NL, GRAFT_TYPE_Q4_K, GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K};

int main(void)
{
    const struct CMUnitTest tests[] = {
        {"F32", test_type, NULL, NULL, (void *)&types[0]},
        {"F16", test_type, NULL, NULL, (void *)&types[1]},
        {"BF16", test_type, NULL, NULL, (void *)&types[2]},
        {"Q8_0", test_type, NULL, NULL, (void *)&types[3]},
        {"Q4_0", test_type, NULL, NULL, (void *)&types[4]},
        {"Q4_1", test_type, NULL, NULL, (void *)&types[5]},
        {"Q5_0", test_type, NULL, NULL, (void *)&types[6]},
        {"Q5_1", test_type, NULL, NULL, (void *)&types[7]},
        {"IQ4_NL", test_type, NULL, NULL, (void *)&types[8]},
        {"Q4_K", test_type, NULL, NULL, (void *)&types[9]},
        {"Q5_K", test_type, NULL, NULL, (void *)&types[10]},
        {"Q6_K", test_type, NULL, NULL, (void *)&types[11]},
        {"Q8_0 packed", test_packed, NULL, NULL, (void *)&types[3]},
        {"Q4_0 packed", test_packed, NULL, NULL, (void *)&types[4]},
        {"Q4_K packed", test_packed, NULL, NULL, (void *)&types[9]},
        cmocka_unit_test(test_edges),
    };
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
