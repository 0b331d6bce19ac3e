/*
 * test_attention_simd.c: the AVX2 and AVX-512 attention kernels (graft__attend_avx2,
 * graft__attend_avx512) against the scalar reference graft__attend, and their invariance.
 *
 * Shapes: head sizes 64, 128 and 256 (the instances the AVX-512 kernel specializes), 48 and
 * 80 (its run-time loops), 512 (wider than its register accumulators) and 40 (not a
 * multiple of 16: the scalar fallback); GQA groups of 1, 2, 4 and 8 heads; key counts
 * around the 16-key score groups and 64-key softmax chunks (0, 1, 15, 16, 17, 63, 64, 65,
 * 130, 300); F16 and F32 rows, each row at its own scattered address.
 *
 * Accuracy: every output element within 2e-6 * (1 + max |v|) of the reference. Both
 * compute the same softmax-weighted mean of the value rows; they differ only in the order
 * of the float additions and in exp (the kernels' vectorised exp is within a few ulp of
 * expf), a few times 2^-24 relative to the largest value.
 *
 * Invariance (memcmp): a head's output is the same whether it is computed alone (n_q = 1)
 * or within its group, and computing n keys gives the same bits however many times it is
 * repeated (no state carried between calls). The several-heads form (graft__attend_heads*,
 * which the forward pass uses for runs of tokens) gives each head, whatever the key counts
 * of the heads beside it, the bits the single form gives it alone. The chunk form of each
 * path (graft__attend_chunk_avx2 or _avx512 for each chunk, with all the heads in one call
 * or in two shares, the chunks computed first to last or last to first, then the path's
 * merge for each head) gives each head of rows holding several KV heads the bits the path's
 * heads kernel gives it over its own KV head's slice of the rows.
 * Tests are skipped (and reported so, tests/support/skips.h) when the processor lacks the
 * instructions of a kernel.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "graft.h"
#include "kernels/kernels.h"
#include "skips.h"

enum {
    MAX_KEYS = 300,
    MAX_DIM = 512,
    MAX_Q = 8
};

static const int32_t head_dims[] = {64, 128, 256, 48, 80, 512, 40};
static const int32_t groups[] = {1, 2, 4, 8};
static const int64_t key_counts[] = {0, 1, 15, 16, 17, 63, 64, 65, 130, 300};

typedef struct problem {
    uint8_t *store;         /* the rows, scattered */
    const void *keys[MAX_KEYS];
    const void *values[MAX_KEYS];
    float q[MAX_Q * MAX_DIM];
    float max_v;
} problem;

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float uniform(void)
{
    return (float)(graft_test_xorshift64(&rng_state) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A new problem (free_problem frees it): rows of kv_type with head_dim elements, every K and
 * V row at a different odd-stride place of one buffer (in reverse order for V), values of
 * magnitude up to 4. */
static problem *new_problem(uint32_t kv_type, int32_t head_dim)
{
    problem *p = malloc(sizeof *p);
    assert_non_null(p);
    size_t elem = kv_type == GRAFT_TYPE_F32 ? 4 : 2, row = (size_t)head_dim * elem;
    size_t stride = row + 96;
    p->store = malloc(stride * 2 * MAX_KEYS);
    assert_non_null(p->store);
    p->max_v = 0.0f;
    for (int64_t r = 0; r < 2 * MAX_KEYS; r++) {
        uint8_t *dst = p->store + (size_t)r * stride;
        for (int32_t i = 0; i < head_dim; i++) {
            float x = 4.0f * uniform();
            if (kv_type == GRAFT_TYPE_F32) {
                memcpy(dst + (size_t)i * 4, &x, 4);
            } else {
                uint16_t h = graft__f32_to_f16(x);
                x = graft__f16_to_f32(h);
                memcpy(dst + (size_t)i * 2, &h, 2);
            }
            if (r >= MAX_KEYS && fabsf(x) > p->max_v)
                p->max_v = fabsf(x);
        }
    }
    for (int64_t j = 0; j < MAX_KEYS; j++) {
        p->keys[j] = p->store + (size_t)j * stride;
        p->values[j] = p->store + (size_t)(2 * MAX_KEYS - 1 - j) * stride;
    }
    for (int32_t i = 0; i < MAX_Q * MAX_DIM; i++)
        p->q[i] = uniform();
    return p;
}

static void free_problem(problem *p)
{
    free(p->store);
    free(p);
}

static void check_kernel(graft__attend_fn attend)
{
    static float want[MAX_Q * MAX_DIM], got[MAX_Q * MAX_DIM], again[MAX_Q * MAX_DIM],
        alone[MAX_DIM];
    const uint32_t kv_types[] = {GRAFT_TYPE_F16, GRAFT_TYPE_F32};
    for (size_t ti = 0; ti < 2; ti++) {
        for (size_t di = 0; di < sizeof head_dims / sizeof *head_dims; di++) {
            int32_t dim = head_dims[di];
            problem *p = new_problem(kv_types[ti], dim);
            float scale = 1.0f / sqrtf((float)dim);
            for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++) {
                int32_t n_q = groups[gi];
                for (size_t ki = 0; ki < sizeof key_counts / sizeof *key_counts; ki++) {
                    int64_t n = key_counts[ki];
                    graft__attend(want, p->q, n_q, p->keys, p->values, kv_types[ti], n, dim,
                                  scale);
                    attend(got, p->q, n_q, p->keys, p->values, kv_types[ti], n, dim, scale);
                    float tol = 2e-6f * (1.0f + p->max_v);
                    for (int32_t i = 0; i < n_q * dim; i++) {
                        if (!(fabsf(got[i] - want[i]) <= tol))
                            fail_msg("type %u dim %d group %d keys %lld: element %d is %.9g, "
                                     "reference %.9g",
                                     kv_types[ti], dim, n_q, (long long)n, i, got[i], want[i]);
                    }
                    attend(again, p->q, n_q, p->keys, p->values, kv_types[ti], n, dim, scale);
                    assert_memory_equal(again, got, (size_t)n_q * (size_t)dim * sizeof(float));
                    for (int32_t h = 0; h < n_q; h++) {
                        attend(alone, p->q + (int64_t)h * dim, 1, p->keys, p->values,
                               kv_types[ti], n, dim, scale);
                        assert_memory_equal(alone, got + (int64_t)h * dim,
                                            (size_t)dim * sizeof(float));
                    }
                }
            }
            free_problem(p);
        }
    }
}

/* Head h of n writes dim floats at got + h * dim and reads one of the problem's queries. */
static void aim_heads(float **outs, const float **qs, int32_t n, float *got, const problem *p,
                      int32_t dim)
{
    for (int32_t h = 0; h < n; h++) {
        outs[h] = got + (int64_t)h * dim;
        qs[h] = p->q + (int64_t)(h % (MAX_Q * MAX_DIM / dim)) * dim;
    }
}

/* Up to GRAFT_ATTN_MAX_HEADS heads, each run of 1 or of 2 heads (the GQA group of one
 * token) having the next key count of counts (ragged, in and out of order, across chunk
 * and 16-key boundaries), so that heads side by side in a tile have the same or different
 * key counts. */
static void check_heads(graft__attend_fn attend, graft__attend_heads_fn heads)
{
    static const int64_t counts[] = {300, 1, 64, 65, 17, 130, 0, 16, 63, 299, 2, 128, 129, 15,
                                     200, 33};
    static float got[GRAFT_ATTN_MAX_HEADS * MAX_DIM], alone[MAX_DIM];
    const uint32_t kv_types[] = {GRAFT_TYPE_F16, GRAFT_TYPE_F32};
    const int32_t dims[] = {64, 128, 256, 80, 40};
    for (size_t ti = 0; ti < 2; ti++) {
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            int32_t dim = dims[di];
            problem *p = new_problem(kv_types[ti], dim);
            float *outs[GRAFT_ATTN_MAX_HEADS];
            const float *qs[GRAFT_ATTN_MAX_HEADS];
            int64_t n_keys[GRAFT_ATTN_MAX_HEADS];
            aim_heads(outs, qs, GRAFT_ATTN_MAX_HEADS, got, p, dim);
            for (int32_t run = 1; run <= 2; run++) { /* heads per key count */
                for (int32_t h = 0; h < GRAFT_ATTN_MAX_HEADS; h++)
                    n_keys[h] = counts[(h / run) % (sizeof counts / sizeof *counts)];
                for (int32_t n_heads = 1; n_heads <= GRAFT_ATTN_MAX_HEADS; n_heads += 7) {
                    heads(outs, qs, n_keys, n_heads, p->keys, p->values, kv_types[ti], dim,
                          0.1f);
                    for (int32_t h = 0; h < n_heads; h++) {
                        attend(alone, qs[h], 1, p->keys, p->values, kv_types[ti], n_keys[h],
                               dim, 0.1f);
                        assert_memory_equal(alone, outs[h], (size_t)dim * sizeof(float));
                    }
                }
            }
            free_problem(p);
        }
    }
}

/* A path's chunk form and the heads kernel it must agree with. */
typedef struct chunk_form {
    graft__attend_chunk_fn chunk;
    graft__attend_merge_fn merge;
    graft__attend_heads_fn heads;
} chunk_form;

/* Rows of kv_heads KV heads of `dim` elements side by side; head h reads KV head h / group.
 * The chunk form over all the heads in one call, then in two shares, with the chunks
 * computed in order, then in reverse (as the threads of a decode step may take them), and
 * merged; want: the path's heads kernel for each head alone over its slice of the rows. */
static void check_chunk_shape(const chunk_form *f, problem *p, uint32_t kv_type, int32_t dim,
                              int32_t kv_heads, int32_t group)
{
    enum { MAX_CHUNKS = (MAX_KEYS + GRAFT_ATTN_CHUNK - 1) / GRAFT_ATTN_CHUNK };
    static float chunks[MAX_CHUNKS * GRAFT_ATTN_MAX_HEADS * MAX_DIM];
    static float max[MAX_CHUNKS * GRAFT_ATTN_MAX_HEADS], sum[MAX_CHUNKS * GRAFT_ATTN_MAX_HEADS];
    static float got[GRAFT_ATTN_MAX_HEADS * MAX_DIM], want[MAX_DIM];
    static const void *k_slice[MAX_KEYS], *v_slice[MAX_KEYS];
    const int32_t n_heads = kv_heads * group;
    const size_t elem = kv_type == GRAFT_TYPE_F32 ? 4 : 2;
    const float *qs[GRAFT_ATTN_MAX_HEADS];
    int32_t col[GRAFT_ATTN_MAX_HEADS];
    for (int32_t h = 0; h < n_heads; h++) {
        qs[h] = p->q + (int64_t)(h % MAX_Q) * dim;
        col[h] = h / group * dim;
    }
    for (size_t ki = 0; ki < sizeof key_counts / sizeof *key_counts; ki++) {
        const int64_t n_keys = key_counts[ki];
        const int32_t n_chunks = (int32_t)((n_keys + GRAFT_ATTN_CHUNK - 1) / GRAFT_ATTN_CHUNK);
        for (int way = 0; way < 4; way++) {
            const int shares = 1 + way % 2;
            const bool reverse = way >= 2;
            memset(chunks, 0xff, sizeof chunks);
            for (int32_t i = 0; i < n_chunks; i++) {
                const int32_t c = reverse ? n_chunks - 1 - i : i;
                const int64_t c0 = (int64_t)c * GRAFT_ATTN_CHUNK;
                const int32_t n = (int32_t)(n_keys - c0 < GRAFT_ATTN_CHUNK ? n_keys - c0
                                                                            : GRAFT_ATTN_CHUNK);
                for (int t = 0; t < shares; t++) {
                    const int32_t h0 = t * n_heads / shares, h1 = (t + 1) * n_heads / shares;
                    float *outs[GRAFT_ATTN_MAX_HEADS];
                    for (int32_t h = h0; h < h1; h++)
                        outs[h - h0] = chunks + ((int64_t)c * n_heads + h) * dim;
                    f->chunk(outs, max + c * n_heads + h0, sum + c * n_heads + h0, qs + h0,
                             col + h0, h1 - h0, n, p->keys + c0, p->values + c0, kv_type, dim,
                             0.1f);
                }
            }
            memset(got, 0xff, sizeof got);
            f->merge(got, chunks, max, sum, n_chunks, n_heads, dim);
            for (int32_t h = 0; h < n_heads; h++) {
                for (int64_t j = 0; j < n_keys; j++) {
                    k_slice[j] = (const uint8_t *)p->keys[j] + (size_t)col[h] * elem;
                    v_slice[j] = (const uint8_t *)p->values[j] + (size_t)col[h] * elem;
                }
                float *one[1] = {want};
                f->heads(one, &qs[h], &n_keys, 1, k_slice, v_slice, kv_type, dim, 0.1f);
                if (memcmp(want, got + (int64_t)h * dim, (size_t)dim * sizeof(float)) != 0)
                    fail_msg("type %u dim %d, %d KV heads of %d, %lld keys, %d share(s)%s: head "
                             "%d differs from the one-call kernel",
                             kv_type, dim, kv_heads, group, (long long)n_keys, shares,
                             reverse ? ", chunks in reverse" : "", h);
            }
        }
    }
}

/* Head sizes: the avx512 path's unrolled 64, 128, 256 and its general loop; multiples of
 * the avx2 path's 8 lanes. */
static void check_chunks(const chunk_form *f, const int32_t *dims, size_t n_dims)
{
    const uint32_t kv_types[] = {GRAFT_TYPE_F16, GRAFT_TYPE_F32};
    static const int32_t shapes[][2] = {{2, 1}, {3, 2}, {8, 2}, {2, 4}, {4, 8}}; /* KV, group */
    for (size_t ti = 0; ti < 2; ti++) {
        for (size_t di = 0; di < n_dims; di++) {
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
                int32_t dim = dims[di], kv_heads = shapes[si][0], group = shapes[si][1];
                problem *p = new_problem(kv_types[ti], kv_heads * dim);
                check_chunk_shape(f, p, kv_types[ti], dim, kv_heads, group);
                free_problem(p);
            }
        }
    }
}

static void test_chunks_avx2(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx2", "attention in chunks");
    const chunk_form f = {graft__attend_chunk_avx2, graft__attend_merge_avx2,
                          graft__attend_heads_avx2};
    const int32_t dims[] = {64, 128, 256, 40, 72, 512};
    check_chunks(&f, dims, sizeof dims / sizeof *dims);
}

static void test_chunks_avx512(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "attention in chunks");
    const chunk_form f = {graft__attend_chunk_avx512, graft__attend_merge_avx512,
                          graft__attend_heads_avx512};
    const int32_t dims[] = {64, 128, 256, 48, 80, 512};
    check_chunks(&f, dims, sizeof dims / sizeof *dims);
}

static void test_heads_reference(void **state)
{
    (void)state;
    check_heads(graft__attend, graft__attend_heads);
}

static void test_heads_avx2(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx2", "attention heads");
    check_heads(graft__attend_avx2, graft__attend_heads_avx2);
}

static void test_heads_avx512(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "attention heads");
    check_heads(graft__attend_avx512, graft__attend_heads_avx512);
}

static void test_avx2_matches_reference(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx2", "attention vs reference");
    check_kernel(graft__attend_avx2);
}

static void test_avx512_matches_reference(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "attention vs reference");
    check_kernel(graft__attend_avx512);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx2_matches_reference),
        cmocka_unit_test(test_avx512_matches_reference),
        cmocka_unit_test(test_heads_reference),
        cmocka_unit_test(test_heads_avx2),
        cmocka_unit_test(test_heads_avx512),
        cmocka_unit_test(test_chunks_avx2),
        cmocka_unit_test(test_chunks_avx512),
    };
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
