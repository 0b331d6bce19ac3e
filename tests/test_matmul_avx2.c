/*
 * test_matmul_avx2.c: the avx2 matmul path (src/kernels/matmul_avx2.c) and the avxvnni path
 * (the same source compiled with AVX-VNNI, matmul_avxvnni.c) against the scalar reference
 * graft__matmul, for every supported weight type. Every check below runs on each path;
 * the avxvnni path must also give the avx2 path's bits (memcmp of the batch of 64).
 *
 * For each type, random weights in [-1, 1) quantized with graft__quantize_row and random
 * activations in [-1, 1), at n_in 256, 1024, 3072 plus a ragged size (a tail group of
 * blocks, or a tail of fewer than 8 floats), n_out 37 and n_tok 1, 3, 8, 13, 64:
 *
 *  1. Agreement with graft__matmul. Each output's error is bounded relative to the scale of
 *     its dot product, S = sum |w_i| |x_i| (w decoded), and the normalized mean squared
 *     error over all outputs, NMSE = sum (y - ref)^2 / sum ref^2, is bounded as ggml's
 *     test-backend-ops does (see `cases` for each type's budgets and why).
 *  2. Exactness of the integer part, for the types whose activations are quantized: the
 *     path must equal, up to float rounding (2e-6 S), the double-precision dot product of
 *     the decoded weights with the activations quantized as the path documents (per block
 *     of 32 or 256: d = amax / 127, q = round-half-even(x * (127 / amax)), q = 0 when
 *     amax <= 2^-96). This catches a wrong code or scale that check 1's looser bound hides.
 *  3. Batch invariance, by memcmp: token t's row is the same bits computed alone (n_tok 1),
 *     in batches of 2, 3, 5, 8, 11, 13 at various offsets and in the batch of 64; and rows
 *     computed in pieces [0, 5) [5, 37) or [0, 1) [1, 2) [2, 19) [19, 36) [36, 37), with 1,
 *     2 or 64 tokens, equal one call over [0, 37) in the batch of 64.
 *
 * Packed Q4_K, Q8_0 and Q4_0 (the path's packed_type/pack, 8 interleaved rows) go through
 * the same three checks on 40 rows, with row pieces on whole groups of 8; no other type,
 * and no row count that is not a multiple of 8, has a packed form. The packed weights are
 * allocated to their exact size, so a tile reading past them fails under ASan.
 *
 * Skipped (and reported so, tests/support/skips.h), path by path, when the processor lacks
 * AVX2, FMA or F16C, or AVX-VNNI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "act_quant.h"
#include "fixtures.h"
#include "kernels/kernels.h"
#include "kernels/matmul_path.h"
#include "skips.h"

/* Rows: 37 for the GGUF types (tiles of 4 rows leave one over), 40 for packed Q4_K (5
 * groups of 8). */
enum { N_OUT = 37, N_OUT_PACKED = 40, N_TOK = 64 };

/* ------------------------------------------------------------------------------------
 * Per-type budgets.
 *
 * F32/F16/BF16 keep f32 activations: the only difference from the reference is the order
 * of the float additions (8 lanes, then a tree, versus one running sum). Each rounding is
 * at most 2^-24 of a partial sum, itself at most S, and the roundings mostly cancel: the
 * error is a few 2^-24 S (measured worst: 2e-7 S). The bound 1e-5 S is the "1e-5 relative"
 * the model tests can absorb (they compare with a float64 reference at 2e-5); a widening
 * bug (an f16 or bf16 value off by one unit, 2^-11 or 2^-8 relative) lands far above it.
 *
 * Quantized activations: each x_i moves by at most half a step, d / 2 = amax / 254. The
 * rounding errors delta_i are independent and uniform in [-d/2, d/2], so for uniform w, x
 * in [-1, 1) the error sum w_i delta_i has standard deviation sqrt(n / 3 * d^2 / 12) =
 * d sqrt(n) / 6 while S is about n / 4: the error relative to S has sigma = 0.67 d / sqrt(n)
 * = 0.0053 / sqrt(n) (d = 1 / 127, for blocks of 32 and of 256 alike). The per-output bound
 * 0.04 / sqrt(n) * S is 7.6 sigma: a correct path crosses it with odds of about 1e-13 per
 * output (about 1e4 outputs per type). The expected NMSE is E[delta^2] / E[x^2] =
 * (d^2 / 12) / (1 / 3) = 1.6e-5 whatever n; the budget 4e-5 is 2.5 times that (over
 * hundreds of outputs the measured NMSE stays within 10% of the expectation).
 */
typedef struct type_case {
    uint32_t type;
    const char *name;
    int act_block;       /* elements per activation scale: 0 (f32 activations), 32, 256 */
    int64_t ragged_n_in; /* an n_in with a tail the kernels handle separately */
    double tol;          /* per output: |y - ref| <= tol * S with f32 activations,
                            tol / sqrt(n_in) * S with quantized ones */
    double nmse;         /* over all outputs */
    bool packed;         /* computed from the path's packed form of the weights */
} type_case;

#define FLOAT_BUDGET 1e-5, 1e-10, false
#define Q8_BUDGET 0.04, 4e-5, false
#define Q8_PACKED_BUDGET 0.04, 4e-5, true

static const type_case cases[] = {
    {GRAFT_TYPE_F32, "F32", 0, 37, FLOAT_BUDGET},
    {GRAFT_TYPE_F16, "F16", 0, 37, FLOAT_BUDGET},
    {GRAFT_TYPE_BF16, "BF16", 0, 37, FLOAT_BUDGET},
    {GRAFT_TYPE_Q8_0, "Q8_0", 32, 160, Q8_BUDGET},
    {GRAFT_TYPE_Q8_0, "Q8_0 packed", 32, 160, Q8_PACKED_BUDGET},
    {GRAFT_TYPE_Q4_0, "Q4_0", 32, 96, Q8_BUDGET},
    {GRAFT_TYPE_Q4_0, "Q4_0 packed", 32, 96, Q8_PACKED_BUDGET},
    {GRAFT_TYPE_Q4_1, "Q4_1", 32, 160, Q8_BUDGET},
    {GRAFT_TYPE_Q5_0, "Q5_0", 32, 96, Q8_BUDGET},
    {GRAFT_TYPE_Q5_1, "Q5_1", 32, 224, Q8_BUDGET},
    {GRAFT_TYPE_IQ4_NL, "IQ4_NL", 32, 160, Q8_BUDGET},
    {GRAFT_TYPE_Q4_K, "Q4_K", 256, 768, Q8_BUDGET},
    {GRAFT_TYPE_Q4_K, "Q4_K packed", 256, 768, Q8_PACKED_BUDGET},
    {GRAFT_TYPE_Q5_K, "Q5_K", 256, 768, Q8_BUDGET},
    {GRAFT_TYPE_Q6_K, "Q6_K", 256, 768, Q8_BUDGET},
};

/* ------------------------------------------------------------------------------------
 * Helpers.
 */
static void *alloc64(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

/* One problem: weights, activations, their prepared and decoded forms. */
typedef struct problem {
    const graft__matmul_path *path;
    const type_case *c;
    int64_t n_in, n_out;
    uint32_t gemm_type; /* c->type, or its packed type */
    size_t row_bytes, act_bytes;
    uint8_t *w;      /* (n_out, row_bytes) */
    uint8_t *packed; /* w packed, or NULL */
    float *wf;   /* (n_out, n_in) w decoded */
    float *x;    /* (N_TOK, n_in) */
    uint8_t *xa; /* (N_TOK, act_bytes) prepared by the path */
} problem;

static void problem_init(problem *p, const graft__matmul_path *path, const type_case *c,
                         int64_t n_in, uint64_t seed)
{
    p->path = path;
    p->c = c;
    p->n_in = n_in;
    p->n_out = c->packed ? N_OUT_PACKED : N_OUT;
    p->gemm_type = c->packed ? path->packed_type(c->type, n_in, p->n_out) : c->type;
    assert_true(!c->packed || p->gemm_type >= GRAFT_TYPE_PACKED_BASE);
    p->row_bytes = graft__type_row_bytes(c->type, (uint64_t)n_in);
    assert_true(p->row_bytes > 0);
    p->act_bytes = path->act_bytes(p->gemm_type, n_in);
    assert_int_equal(p->act_bytes % 64, 0);
    p->w = alloc64((size_t)p->n_out * p->row_bytes);
    p->wf = alloc64((size_t)p->n_out * (size_t)n_in * sizeof(float));
    p->x = alloc64(N_TOK * (size_t)n_in * sizeof(float));
    p->xa = alloc64(N_TOK * p->act_bytes);
    graft_test_rng_seed(seed);
    float *row = p->wf; /* scratch for the float weights before quantization */
    for (int64_t o = 0; o < p->n_out; o++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = graft_test_rng_float();
        assert_int_equal(graft__quantize_row(c->type, row, p->w + o * p->row_bytes, n_in), 0);
    }
    for (int64_t o = 0; o < p->n_out; o++)
        graft__dequantize_row(c->type, p->w + o * p->row_bytes, p->wf + o * n_in, n_in);
    for (int64_t i = 0; i < N_TOK * n_in; i++)
        p->x[i] = graft_test_rng_float();
    for (int64_t t = 0; t < N_TOK; t++)
        path->act_prepare(p->gemm_type, p->xa + t * p->act_bytes, p->x + t * n_in, n_in);
    p->packed = NULL;
    if (c->packed) { /* exactly its size: a tile reading past the matrix fails under ASan */
        size_t bytes = path->packed_bytes(p->gemm_type, n_in, p->n_out);
        p->packed = malloc(bytes);
        assert_non_null(p->packed);
        path->pack(p->gemm_type, p->packed, p->w, n_in, p->n_out);
    }
}

static void problem_free(problem *p)
{
    free(p->w);
    free(p->wf);
    free(p->x);
    free(p->xa);
    free(p->packed);
}

/* y (n_tok, n_out) rows [o0, o1) = the path's gemm for tokens [t0, t0 + n_tok). */
static void path_gemm(const problem *p, float *y, int64_t o0, int64_t o1, int64_t t0,
                      int64_t n_tok)
{
    const void *w = p->packed != NULL ? (const void *)p->packed : p->w;
    p->path->gemm(p->gemm_type, y, p->n_out, w, p->n_in, o0, o1, p->xa + t0 * p->act_bytes,
                  n_tok);
}

/* S = sum |w_i| |x_i| of row o and token t. */
static double dot_scale(const problem *p, int64_t o, int64_t t)
{
    double s = 0;
    for (int64_t i = 0; i < p->n_in; i++)
        s += fabs((double)p->wf[o * p->n_in + i] * p->x[t * p->n_in + i]);
    return s;
}

/* ------------------------------------------------------------------------------------
 * Checks.
 */

/* Check 1 and 2 for one problem and one n_tok. */
static void check_accuracy(const problem *p, int64_t n_tok)
{
    const int64_t n_in = p->n_in;
    float *y = alloc64((size_t)n_tok * p->n_out * sizeof(float));
    float *ref = alloc64((size_t)n_tok * p->n_out * sizeof(float));
    double *xq = alloc64((size_t)n_in * sizeof(double));
    path_gemm(p, y, 0, p->n_out, 0, n_tok);
    graft__matmul(ref, p->w, p->c->type, n_in, p->n_out, p->x, n_tok);
    double tol = p->c->act_block ? p->c->tol / sqrt((double)n_in) : p->c->tol;
    double err2 = 0, ref2 = 0, worst = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        if (p->c->act_block)
            graft_test_quantize_acts(xq, p->x + t * n_in, n_in, p->c->act_block, 0x1p-96f);
        for (int64_t o = 0; o < p->n_out; o++) {
            double got = y[t * p->n_out + o], want = ref[t * p->n_out + o];
            double s = dot_scale(p, o, t);
            err2 += (got - want) * (got - want);
            ref2 += want * want;
            worst = fmax(worst, fabs(got - want) / s);
            if (fabs(got - want) > tol * s)
                fail_msg("%s n_in %lld token %lld row %lld: %.9g vs reference %.9g (S %.4g)",
                         p->c->name, (long long)n_in, (long long)t, (long long)o, got, want, s);
            if (!p->c->act_block)
                continue;
            double exact = 0, sq = 0;
            for (int64_t i = 0; i < n_in; i++) {
                exact += (double)p->wf[o * n_in + i] * xq[i];
                sq += fabs((double)p->wf[o * n_in + i] * xq[i]);
            }
            if (fabs(got - exact) > 2e-6 * sq)
                fail_msg("%s n_in %lld token %lld row %lld: %.9g vs emulated %.9g",
                         p->c->name, (long long)n_in, (long long)t, (long long)o, got, exact);
        }
    }
    double nmse = err2 / ref2;
    if (nmse > p->c->nmse)
        fail_msg("%s n_in %lld n_tok %lld: NMSE %.3g over budget %.3g", p->c->name,
                 (long long)n_in, (long long)n_tok, nmse, p->c->nmse);
    if (n_tok == N_TOK)
        print_message("  %-6s n_in %5lld: NMSE %.2e, worst |err| / S %.2e (bound %.2e)\n",
                      p->c->name, (long long)n_in, nmse, worst, tol);
    free(y);
    free(ref);
    free(xq);
}

static void assert_rows_equal(const problem *p, const float *got, const float *want,
                              int64_t n_rows, const char *what)
{
    if (memcmp(got, want, (size_t)n_rows * (size_t)p->n_out * sizeof(float)) != 0)
        fail_msg("%s n_in %lld: %s differs from the batch of %d", p->c->name,
                 (long long)p->n_in, what, N_TOK);
}

/* Rows [0, n_out) of tokens [0, n_tok) computed in the pieces between consecutive bounds
 * equal `want`. */
static void check_row_pieces(const problem *p, const float *want, int64_t n_tok,
                             const int64_t *bounds, int n_bounds)
{
    float *part = alloc64(N_TOK * (size_t)p->n_out * sizeof(float));
    memset(part, 0xff, N_TOK * (size_t)p->n_out * sizeof(float));
    for (int k = 0; k + 1 < n_bounds; k++)
        path_gemm(p, part, bounds[k], bounds[k + 1], 0, n_tok);
    assert_rows_equal(p, part, want, n_tok, "rows computed in pieces");
    free(part);
}

/* Check 3 for one problem. Tiles hold up to 6 tokens and, with 1 or 2 tokens, 4 or 2
 * rows, so the batches below cover every tile shape, ragged ones included. */
static void check_batch_invariance(const problem *p)
{
    float *full = alloc64(N_TOK * (size_t)p->n_out * sizeof(float));
    float *part = alloc64(N_TOK * (size_t)p->n_out * sizeof(float));
    path_gemm(p, full, 0, p->n_out, 0, N_TOK);

    static const int64_t alone[] = {0, 1, 5, 31, 62, 63};
    for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++) {
        path_gemm(p, part, 0, p->n_out, alone[i], 1);
        assert_rows_equal(p, part, full + alone[i] * p->n_out, 1, "a token alone");
    }
    static const int64_t batches[][2] = {{0, 2}, {0, 3},  {7, 3},  {10, 5}, {3, 8},
                                         {20, 11}, {50, 13}, {1, 13}, {51, 13}};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        path_gemm(p, part, 0, p->n_out, batches[i][0], batches[i][1]);
        assert_rows_equal(p, part, full + batches[i][0] * p->n_out, batches[i][1], "a smaller batch");
    }
    /* packed: pieces on whole groups of 8 rows, as matmul_path.h allows */
    static const int64_t halves[] = {0, 5, N_OUT}, pieces[] = {0, 1, 2, 19, 36, N_OUT};
    static const int64_t halves8[] = {0, 16, N_OUT_PACKED}, pieces8[] = {0, 8, 16, 32, N_OUT_PACKED};
    static const int64_t n_toks[] = {1, 2, N_TOK};
    for (size_t i = 0; i < sizeof n_toks / sizeof n_toks[0]; i++) {
        check_row_pieces(p, full, n_toks[i], p->packed ? halves8 : halves, 3);
        check_row_pieces(p, full, n_toks[i], p->packed ? pieces8 : pieces, p->packed ? 5 : 6);
    }
    free(full);
    free(part);
}

/* A path other than avx2 gives the avx2 path's bits for p's weights and activations. */
static void check_same_as_avx2(const problem *p, uint64_t seed)
{
    problem q;
    problem_init(&q, &graft__matmul_avx2, p->c, p->n_in, seed);
    float *got = alloc64(N_TOK * (size_t)p->n_out * sizeof(float));
    float *want = alloc64(N_TOK * (size_t)p->n_out * sizeof(float));
    path_gemm(p, got, 0, p->n_out, 0, N_TOK);
    path_gemm(&q, want, 0, p->n_out, 0, N_TOK);
    if (memcmp(got, want, N_TOK * (size_t)p->n_out * sizeof(float)) != 0)
        fail_msg("%s n_in %lld: the %s path differs from the avx2 path", p->c->name,
                 (long long)p->n_in, p->path->name);
    free(got);
    free(want);
    problem_free(&q);
}

/* One type on one path. */
typedef struct path_case {
    const char *path;
    const type_case *c;
    char name[48];
} path_case;

static void test_type(const path_case *pc)
{
    const type_case *c = pc->c;
    char what[48];
    snprintf(what, sizeof what, "matmul %s", c->name);
    GRAFT_TEST_REQUIRE_PATH(pc->path, what);
    const graft__matmul_path *path = graft__kernels_by_name(pc->path);
    const int64_t n_ins[] = {256, 1024, 3072, c->ragged_n_in};
    static const int64_t n_toks[] = {1, 3, 8, 13, 64};
    for (size_t i = 0; i < sizeof n_ins / sizeof n_ins[0]; i++) {
        problem p;
        uint64_t seed = 1000 + i * 17 + c->type;
        problem_init(&p, path, c, n_ins[i], seed);
        for (size_t k = 0; k < sizeof n_toks / sizeof n_toks[0]; k++)
            check_accuracy(&p, n_toks[k]);
        check_batch_invariance(&p);
        if (path != &graft__matmul_avx2)
            check_same_as_avx2(&p, seed);
        problem_free(&p);
    }
}

/* ------------------------------------------------------------------------------------
 * One cmocka test per path and type; the state is the path_case.
 */
static void test_case(void **state)
{
    test_type(*state);
}

/* Only Q4_K, Q8_0 and Q4_0, in whole blocks and whole groups of 8 rows, have a packed form;
 * the state is the path's name. */
static void test_packed_forms(void **state)
{
    GRAFT_TEST_REQUIRE_PATH(*state, "matmul packed forms");
    const graft__matmul_path *path = graft__kernels_by_name(*state);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q4_K, 1024, 64), GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q4_K);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q4_K, 1024, N_OUT), 0);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q4_K, 1024, 0), 0);
    assert_int_equal(path->packed_type(GRAFT_TYPE_Q4_K, 0, 64), 0);
    static const uint32_t q32[] = {GRAFT_TYPE_Q8_0, GRAFT_TYPE_Q4_0};
    for (size_t i = 0; i < sizeof q32 / sizeof q32[0]; i++) {
        assert_int_equal(path->packed_type(q32[i], 1024, 64), GRAFT_TYPE_PACKED_BASE + q32[i]);
        assert_int_equal(path->packed_type(q32[i], 96, 8), GRAFT_TYPE_PACKED_BASE + q32[i]);
        assert_int_equal(path->packed_type(q32[i], 1024, N_OUT), 0);
        assert_int_equal(path->packed_type(q32[i], 1000, 64), 0);
        assert_int_equal(path->packed_type(q32[i], 0, 64), 0);
    }
    static const uint32_t unpacked[] = {GRAFT_TYPE_F32,  GRAFT_TYPE_F16,  GRAFT_TYPE_Q4_1,
                                        GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1, GRAFT_TYPE_IQ4_NL,
                                        GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof unpacked / sizeof unpacked[0]; i++)
        assert_int_equal(path->packed_type(unpacked[i], 1024, 64), 0);
}

int main(void)
{
    static const char *const paths[] = {"avx2", "avxvnni"};
    enum { N_PATHS = sizeof paths / sizeof paths[0], N_CASES = sizeof cases / sizeof cases[0] };
    static path_case pcs[N_PATHS][N_CASES];
    static char packed_names[N_PATHS][48];
    struct CMUnitTest tests[N_PATHS * (N_CASES + 1)];
    int n = 0;
    for (int k = 0; k < N_PATHS; k++) {
        for (int i = 0; i < N_CASES; i++) {
            path_case *pc = &pcs[k][i];
            pc->path = paths[k];
            pc->c = &cases[i];
            snprintf(pc->name, sizeof pc->name, "%s %s", paths[k], cases[i].name);
            tests[n++] = (struct CMUnitTest){pc->name, test_case, NULL, NULL, pc};
        }
        snprintf(packed_names[k], sizeof packed_names[k], "%s packed forms", paths[k]);
        tests[n++] = (struct CMUnitTest){packed_names[k], test_packed_forms, NULL, NULL,
                                         (void *)paths[k]};
    }
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
