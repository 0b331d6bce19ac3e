/*
 * attention_avx2.c: graft__attend (kernels.h) with AVX2 and FMA, for the avx2 kernel path.
 *
 * Same algorithm and chunking as the scalar reference (attention.c): each chunk of
 * GRAFT_ATTN_CHUNK keys gets its own maximum, weights and weighted values, then is merged
 * into the running maximum, sum and output. Each key and value
 * row is decoded once (F16 -> F32 with F16C) and used by every query head of the GQA
 * group. Dot products run 8 lanes wide and are reduced by one fixed instruction sequence,
 * so each head's result depends only on its query and the keys. Head sizes that are not a
 * multiple of 8 use the scalar reference.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

enum {
    LANES = 8,
    MAX_GROUP = 32,
    PREFETCH_AHEAD = 8 /* rows requested ahead of the one being read */
};

/* row (head_dim floats) = a K or V row of kv_type. */
static void load_row(float *row, const void *src, uint32_t kv_type, int32_t nvec)
{
    for (int32_t v = 0; v < nvec; v++) {
        __m256 x = kv_type == GRAFT_TYPE_F32
                       ? _mm256_loadu_ps((const float *)src + v * LANES)
                       : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src + v));
        _mm256_storeu_ps(row + v * LANES, x);
    }
}

/* The 8 lanes summed in one fixed order: halves, then pairs, then the last two. */
static float reduce_add(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Asks for the cache lines of row `ahead` of the list (rows are scattered in the KV store,
 * one sequence position apart, so the hardware prefetcher does not find them). Always
 * inlined: GCC takes a function whose only effect is a prefetch for one without effects
 * and, not inlining it, dropped every call. */
static inline __attribute__((always_inline)) void
prefetch_row(const void *const *rows, int64_t ahead, int64_t n_rows, int32_t bytes)
{
    if (ahead >= n_rows)
        return;
    for (int32_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)rows[ahead] + off, _MM_HINT_T0);
}

static float dot(const float *q, const float *k, int32_t nvec)
{
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
    for (int32_t v = 1; v < nvec; v++)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + v * LANES), _mm256_loadu_ps(k + v * LANES), acc);
    return reduce_add(acc);
}

static void scale_row(float *x, int32_t nvec, float factor)
{
    __m256 f = _mm256_set1_ps(factor);
    for (int32_t v = 0; v < nvec; v++)
        _mm256_storeu_ps(x + v * LANES, _mm256_mul_ps(_mm256_loadu_ps(x + v * LANES), f));
}

/* acc (head_dim) += p * row (head_dim) */
static void add_scaled(float *acc, const float *row, int32_t nvec, float p)
{
    __m256 pv = _mm256_set1_ps(p);
    for (int32_t v = 0; v < nvec; v++)
        _mm256_storeu_ps(acc + v * LANES, _mm256_fmadd_ps(pv, _mm256_loadu_ps(row + v * LANES),
                                                          _mm256_loadu_ps(acc + v * LANES)));
}

/* out (head_dim) = out * a + chunk * b */
static void merge_row(float *out, const float *chunk, int32_t nvec, float a, float b)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int32_t v = 0; v < nvec; v++)
        _mm256_storeu_ps(out + v * LANES,
                         _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(out + v * LANES), va),
                                       _mm256_mul_ps(_mm256_loadu_ps(chunk + v * LANES), vb)));
}

void graft__attend_avx2(float *out, const float *q, int32_t n_q, const void *const *keys,
                          const void *const *values, uint32_t kv_type, int64_t n_keys,
                          int32_t head_dim, float scale)
{
    if (head_dim % LANES != 0 || head_dim > GRAFT_ATTN_MAX_HEAD_DIM || n_q > MAX_GROUP) {
        graft__attend(out, q, n_q, keys, values, kv_type, n_keys, head_dim, scale);
        return;
    }
    const int32_t nvec = head_dim / LANES;
    const int32_t row_bytes = head_dim * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    float row[GRAFT_ATTN_MAX_HEAD_DIM];              // (head_dim) one decoded K or V row
    float scores[MAX_GROUP][GRAFT_ATTN_CHUNK];       // (n_q, chunk keys); then the weights
    float chunk[MAX_GROUP * GRAFT_ATTN_MAX_HEAD_DIM]; // (n_q, head_dim) weighted values
    float running_max[MAX_GROUP], running_sum[MAX_GROUP], a[MAX_GROUP], b[MAX_GROUP];
    memset(out, 0, (size_t)n_q * (size_t)head_dim * sizeof(float));
    for (int32_t h = 0; h < n_q; h++) {
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
    }
    for (int64_t c0 = 0; c0 < n_keys; c0 += GRAFT_ATTN_CHUNK) {
        int n = n_keys - c0 < GRAFT_ATTN_CHUNK ? (int)(n_keys - c0) : GRAFT_ATTN_CHUNK;
        for (int j = 0; j < n; j++) {
            prefetch_row(keys, c0 + j + PREFETCH_AHEAD, n_keys, row_bytes);
            load_row(row, keys[c0 + j], kv_type, nvec);
            for (int32_t h = 0; h < n_q; h++)
                scores[h][j] = scale * dot(q + h * head_dim, row, nvec);
        }
        for (int32_t h = 0; h < n_q; h++) {
            float chunk_max = -INFINITY, chunk_sum = 0.0f;
            for (int j = 0; j < n; j++)
                chunk_max = fmaxf(chunk_max, scores[h][j]);
            for (int j = 0; j < n; j++) {
                scores[h][j] = expf(scores[h][j] - chunk_max);
                chunk_sum += scores[h][j];
            }
            float merged = fmaxf(running_max[h], chunk_max);
            a[h] = running_max[h] == -INFINITY ? 0.0f : expf(running_max[h] - merged);
            b[h] = expf(chunk_max - merged);
            running_sum[h] = running_sum[h] * a[h] + chunk_sum * b[h];
            running_max[h] = merged;
        }
        memset(chunk, 0, (size_t)n_q * (size_t)head_dim * sizeof(float));
        for (int j = 0; j < n; j++) {
            prefetch_row(values, c0 + j + PREFETCH_AHEAD, n_keys, row_bytes);
            load_row(row, values[c0 + j], kv_type, nvec);
            for (int32_t h = 0; h < n_q; h++)
                add_scaled(chunk + h * head_dim, row, nvec, scores[h][j]);
        }
        for (int32_t h = 0; h < n_q; h++)
            merge_row(out + h * head_dim, chunk + h * head_dim, nvec, a[h], b[h]);
    }
    for (int32_t h = 0; h < n_q; h++)
        if (running_sum[h] > 0.0f)
            scale_row(out + h * head_dim, nvec, 1.0f / running_sum[h]);
}

void graft__attend_heads_avx2(float *const *out, const float *const *q, const int64_t *n_keys,
                              int32_t n_heads, const void *const *keys,
                              const void *const *values, uint32_t kv_type, int32_t head_dim,
                              float scale)
{
    graft__attend_heads_by_runs(graft__attend_avx2, out, q, n_keys, n_heads, keys, values,
                                kv_type, head_dim, scale);
}
