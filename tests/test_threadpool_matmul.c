/*
 * test_threadpool_matmul.c: graft__matmul_many splits a matmul's rows among the pool's
 * threads without changing a bit. On every kernel path this processor runs, three matrices
 * of different types over the same input, for 1 to 4 threads and batches of 1 to 37 tokens,
 * give each token exactly the outputs that token gets alone on one thread; every output is
 * written (the outputs start as NaN). Under TSan (the name puts it in that build) two tasks
 * writing the same rows, or a task reading activations still being prepared, is reported:
 * the TSan build declares each matmul task's reads and writes (src/kernels/dispatch.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_path.h"
#include "skips.h"

/* N_IN: one Q4_K super-block. The row counts are no multiples of the tasks' 64 rows, so
 * the last task of each matrix is a short one. */
enum { N_IN = 256, N_MATRICES = 3, MAX_TOK = 37, MAX_THREADS = 4 };
static const uint32_t types[N_MATRICES] = {GRAFT_TYPE_F32, GRAFT_TYPE_Q8_0, GRAFT_TYPE_Q4_K};
static const int64_t n_out[N_MATRICES] = {1000, 600, 1100};

typedef struct fixture {
    void *w[N_MATRICES];
    float x[MAX_TOK][N_IN];
    float *alone[N_MATRICES]; /* (MAX_TOK, n_out): token t computed alone on one thread */
    float *y[N_MATRICES];
} fixture;

static float uniform(uint32_t *seed)
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / 8388608.0f - 1.0f;
}

static void fixture_init(fixture *f)
{
    uint32_t seed = 17;
    float row[N_IN];
    for (int i = 0; i < N_MATRICES; i++) {
        size_t row_bytes = graft__type_row_bytes(types[i], N_IN);
        f->w[i] = malloc(row_bytes * (size_t)n_out[i]);
        f->alone[i] = malloc(sizeof(float) * MAX_TOK * (size_t)n_out[i]);
        f->y[i] = malloc(sizeof(float) * MAX_TOK * (size_t)n_out[i]);
        assert_true(f->w[i] != NULL && f->alone[i] != NULL && f->y[i] != NULL);
        for (int64_t o = 0; o < n_out[i]; o++) {
            for (int k = 0; k < N_IN; k++)
                row[k] = uniform(&seed);
            assert_int_equal(graft__quantize_row(types[i], row,
                                                 (uint8_t *)f->w[i] + (size_t)o * row_bytes, N_IN),
                             GRAFT_OK);
        }
    }
    for (int t = 0; t < MAX_TOK; t++)
        for (int k = 0; k < N_IN; k++)
            f->x[t][k] = uniform(&seed);
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < N_MATRICES; i++) {
        free(f->w[i]);
        free(f->alone[i]);
        free(f->y[i]);
    }
}

/* y[i] (n_tok, n_out[i]) = x[first..first + n_tok) times each matrix, on `threads` threads. */
static void run(const fixture *f, const graft__matmul_path *path, int threads, int first,
                int n_tok, float *const y[N_MATRICES])
{
    graft__matmul_one m[N_MATRICES];
    for (int i = 0; i < N_MATRICES; i++)
        m[i] = (graft__matmul_one){y[i], f->w[i], types[i], n_out[i]};
    graft__exec ex = {.path = path};
    assert_int_equal(graft__pool_create(threads, &ex.pool), GRAFT_OK);
    ex.work_size = graft__matmul_work_size(path, m, N_MATRICES, N_IN, n_tok);
    ex.work = aligned_alloc(64, (ex.work_size + 63) / 64 * 64);
    assert_non_null(ex.work);
    graft__matmul_many(&ex, m, N_MATRICES, N_IN, f->x[first], n_tok);
    free(ex.work);
    graft__pool_free(ex.pool);
}

static void check_path(const char *name)
{
    if (!graft_test_path_runs(name, "matmul rows split among threads"))
        return;
    const graft__matmul_path *path = graft__kernels_by_name(name);
    assert_non_null(path);
    static fixture f;
    fixture_init(&f);
    for (int t = 0; t < MAX_TOK; t++) {
        float *alone[N_MATRICES];
        for (int i = 0; i < N_MATRICES; i++)
            alone[i] = f.alone[i] + (size_t)t * (size_t)n_out[i];
        run(&f, path, 1, t, 1, alone);
    }
    static const int batches[] = {1, 2, 5, 8, MAX_TOK};
    for (int threads = 1; threads <= MAX_THREADS; threads++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            int n_tok = batches[b], first = MAX_TOK - n_tok;
            for (int i = 0; i < N_MATRICES; i++)
                for (size_t e = 0; e < (size_t)n_tok * (size_t)n_out[i]; e++)
                    f.y[i][e] = NAN;
            run(&f, path, threads, first, n_tok, f.y);
            for (int i = 0; i < N_MATRICES; i++)
                if (memcmp(f.y[i], f.alone[i] + (size_t)first * (size_t)n_out[i],
                           sizeof(float) * (size_t)n_tok * (size_t)n_out[i]) != 0)
                    fail_msg("%s path, matrix %d, %d threads, %d tokens: not the bits of "
                             "each token alone on one thread",
                             name, i, threads, n_tok);
        }
    fixture_free(&f);
}

static void test_scalar(void **state)
{
    (void)state;
    check_path("scalar");
}

static void test_avx2(void **state)
{
    (void)state;
    check_path("avx2");
}

static void test_avxvnni(void **state)
{
    (void)state;
    check_path("avxvnni");
}

static void test_avx512(void **state)
{
    (void)state;
    check_path("avx512");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avxvnni),
        cmocka_unit_test(test_avx512),
    };
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
