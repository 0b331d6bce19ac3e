/*
 * attention_avx512.c: graft__attend (kernels.h) with AVX-512, for the avx512 kernel path.
 *
 * Same algorithm and chunking as the scalar reference (attention.c): online softmax over
 * chunks of GRAFT_ATTN_CHUNK keys counted from the first key, running max and sum
 * rescaled per chunk. Each key and value row is read once per chunk pass and used by every
 * query head of the GQA group. Per chunk:
 *
 *   scores  For 16 keys at a time, each head's dot product with each key is a 16-lane
 *           vector of partial sums (F16 rows widened with vcvtph2ps in registers); the 16
 *           vectors are then summed lane-wise by one transpose-and-add network, which
 *           reduces every key by the same tree ((e0+e2)+(e1+e3) within 128-bit lanes,
 *           then (L0+L1)+(L2+L3) across them) wherever it sits among the 16.
 *   softmax The chunk maximum, exp(s - max) with a vectorised exp (exp_ps below, within
 *           2 ulp of expf) and the running sum, 16 keys per vector.
 *   values  Each head's output accumulator stays in registers across the chunk's keys
 *           (as many heads at a time as fit in 16 vectors), adding p_j v_j per key.
 *
 * Which keys share a group of 16 and a chunk depends only on their index from the first
 * key, so a head's result depends only on its query and the keys (DESIGN.md invariant 1),
 * not on n_q or the batch. The head sizes 64, 128 and 256 get instances whose loops the
 * compiler unrolls into registers; other multiples of 16 run the same code with run-time
 * loops; the rest use the scalar reference.
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/util.h"

enum {
    LANES = 16,
    ACC_VECTORS = 16,  /* output accumulators kept in registers at once */
    PREFETCH_AHEAD = 8 /* rows requested ahead of the one being read */
};

/* exp(x) for x <= 0 (and -inf): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6
 * Taylor polynomial (error below 2e-8 relative on that range), scaled by 2^n. Below
 * -87.3 the result is 0, as expf's is within float's normal range. */
static inline __m512 exp_ps(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}

/* Vector v of a K or V row stored as kv_type. */
static inline __attribute__((always_inline)) __m512 load_vec(const void *row, int32_t v,
                                                             uint32_t kv_type)
{
    if (kv_type == GRAFT_TYPE_F32)
        return _mm512_loadu_ps((const float *)row + v * LANES);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row + v));
}

/* Asks for the cache lines of row `ahead` of the list (rows are scattered in the KV store,
 * so the hardware prefetcher does not find them). */
static inline void prefetch_row(const void *const *rows, int64_t ahead, int64_t n_rows,
                                int32_t bytes)
{
    if (ahead >= n_rows)
        return;
    for (int32_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)rows[ahead] + off, _MM_HINT_T0);
}

/* r[j] = the sum of the 16 lanes of v[j], for j < 16 (the network in the header). */
static inline __m512 sum_lanes16(const __m512 *v)
{
    __m512 t[8], w[4];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d c = _mm512_castps_pd(t[2 * i]), d = _mm512_castps_pd(t[2 * i + 1]);
        w[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(c, d)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)));
    }
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* scores[h][j] = scale * q[h] . k_j for the n[h] keys head h has in the chunk at c0 (n[h] <=
 * GRAFT_ATTN_CHUNK); n_max is the largest n[h]. A head's entries from n[h] up to the next
 * multiple of 16 are left as computed from zero partials. */
static inline __attribute__((always_inline)) void
chunk_scores(float (*scores)[GRAFT_ATTN_CHUNK], const float *const *q, const int *n,
             int n_max, int32_t n_heads, const void *const *keys, int64_t c0,
             int64_t n_keys, uint32_t kv_type, int32_t nvec, float scale)
{
    const int32_t row_bytes = nvec * LANES * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < n_max; j0 += LANES) {
        __m512 part[GRAFT_ATTN_MAX_HEADS][LANES]; // (heads, 16 keys) partial dot products
        int m = n_max - j0 < LANES ? n_max - j0 : LANES;
        for (int jj = 0; jj < m; jj++) {
            const void *k = keys[c0 + j0 + jj];
            prefetch_row(keys, c0 + j0 + jj + PREFETCH_AHEAD, n_keys, row_bytes);
            __m512 kr[ACC_VECTORS]; // the key row, when it fits in registers
            const bool in_regs = nvec <= ACC_VECTORS;
            if (in_regs)
                for (int32_t v = 0; v < nvec; v++)
                    kr[v] = load_vec(k, v, kv_type);
            for (int32_t h = 0; h < n_heads; h++) {
                if (j0 + jj >= n[h]) {
                    part[h][jj] = _mm512_setzero_ps();
                    continue;
                }
                const float *qh = q[h];
                __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qh),
                                           in_regs ? kr[0] : load_vec(k, 0, kv_type));
                for (int32_t v = 1; v < nvec; v++)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + v * LANES),
                                          in_regs ? kr[v] : load_vec(k, v, kv_type), acc);
                part[h][jj] = acc;
            }
        }
        for (int32_t h = 0; h < n_heads; h++) {
            if (j0 >= n[h])
                continue;
            for (int jj = m; jj < LANES; jj++)
                part[h][jj] = _mm512_setzero_ps();
            _mm512_storeu_ps(scores[h] + j0, _mm512_mul_ps(sum_lanes16(part[h]), vscale));
        }
    }
}

/* out[h] (holding the running accumulators) += sum_j p[h][j] v_j over head h's n[h] keys
 * of the chunk at c0, for heads [h0, h0 + nh) and vectors [v0, v0 + nv) of each row,
 * nh * nv <= ACC_VECTORS. */
static inline __attribute__((always_inline)) void
chunk_values(float *const *out, float (*p)[GRAFT_ATTN_CHUNK], const int *n, int32_t h0,
             int32_t nh, int32_t v0, int32_t nv, const void *const *values, int64_t c0,
             int64_t n_keys, uint32_t kv_type, int32_t nvec)
{
    const int32_t row_bytes = nvec * LANES * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    int n_max = 0;
    for (int32_t h = 0; h < nh; h++)
        n_max = n[h0 + h] > n_max ? n[h0 + h] : n_max;
    __m512 acc[ACC_VECTORS];
    for (int32_t h = 0; h < nh; h++)
        for (int32_t v = 0; v < nv; v++)
            acc[h * nv + v] = _mm512_loadu_ps(out[h0 + h] + (v0 + v) * LANES);
    for (int j = 0; j < n_max; j++) {
        const void *row = values[c0 + j];
        if (h0 == 0 && v0 == 0)
            prefetch_row(values, c0 + j + PREFETCH_AHEAD, n_keys, row_bytes);
        for (int32_t v = 0; v < nv; v++) {
            __m512 x = load_vec(row, v0 + v, kv_type);
            for (int32_t h = 0; h < nh; h++)
                if (j < n[h0 + h])
                    acc[h * nv + v] =
                        _mm512_fmadd_ps(_mm512_set1_ps(p[h0 + h][j]), x, acc[h * nv + v]);
        }
    }
    for (int32_t h = 0; h < nh; h++)
        for (int32_t v = 0; v < nv; v++)
            _mm512_storeu_ps(out[h0 + h] + (v0 + v) * LANES, acc[h * nv + v]);
}

static inline void scale_row(float *x, int32_t nvec, float factor)
{
    __m512 f = _mm512_set1_ps(factor);
    for (int32_t v = 0; v < nvec; v++)
        _mm512_storeu_ps(x + v * LANES, _mm512_mul_ps(_mm512_loadu_ps(x + v * LANES), f));
}

/* The whole computation for one (kv_type, nvec): constants in the instances below. Head h
 * attends with query q[h] over keys [0, n_keys[h]) into out[h]. */
static inline __attribute__((always_inline)) void
attend_body(float *const *out, const float *const *q, const int64_t *n_keys, int32_t n_heads,
            const void *const *keys, const void *const *values, uint32_t kv_type, int32_t nvec,
            float scale)
{
    float scores[GRAFT_ATTN_MAX_HEADS][GRAFT_ATTN_CHUNK]; // (heads, chunk keys); then p
    float running_max[GRAFT_ATTN_MAX_HEADS], running_sum[GRAFT_ATTN_MAX_HEADS];
    int n[GRAFT_ATTN_MAX_HEADS]; // keys of each head in the current chunk
    int64_t most = 0;
    for (int32_t h = 0; h < n_heads; h++) {
        memset(out[h], 0, (size_t)nvec * LANES * sizeof(float));
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
        most = n_keys[h] > most ? n_keys[h] : most;
    }
    const int32_t heads_at_once = nvec <= ACC_VECTORS ? ACC_VECTORS / nvec : 1;
    for (int64_t c0 = 0; c0 < most; c0 += GRAFT_ATTN_CHUNK) {
        int n_max = 0;
        for (int32_t h = 0; h < n_heads; h++) {
            int64_t left = n_keys[h] - c0;
            n[h] = left <= 0 ? 0 : left < GRAFT_ATTN_CHUNK ? (int)left : GRAFT_ATTN_CHUNK;
            n_max = n[h] > n_max ? n[h] : n_max;
        }
        chunk_scores(scores, q, n, n_max, n_heads, keys, c0, most, kv_type, nvec, scale);
        for (int32_t h = 0; h < n_heads; h++) {
            if (n[h] == 0)
                continue;
            __m512 vmax = _mm512_set1_ps(-INFINITY);
            for (int j = 0; j < n[h]; j += LANES) {
                __mmask16 live = (__mmask16)(n[h] - j >= LANES ? 0xffff : (1u << (n[h] - j)) - 1);
                vmax = _mm512_mask_max_ps(vmax, live, vmax, _mm512_loadu_ps(scores[h] + j));
            }
            float chunk_max = _mm512_reduce_max_ps(vmax);
            if (chunk_max > running_max[h]) {
                float rescale = _mm512_cvtss_f32(
                    exp_ps(_mm512_set1_ps(running_max[h] - chunk_max))); /* 0 at first */
                running_sum[h] *= rescale;
                scale_row(out[h], nvec, rescale);
                running_max[h] = chunk_max;
            }
            __m512 vm = _mm512_set1_ps(running_max[h]), vsum = _mm512_setzero_ps();
            for (int j = 0; j < n[h]; j += LANES) {
                __mmask16 live = (__mmask16)(n[h] - j >= LANES ? 0xffff : (1u << (n[h] - j)) - 1);
                __m512 e = _mm512_maskz_mov_ps(
                    live, exp_ps(_mm512_sub_ps(_mm512_loadu_ps(scores[h] + j), vm)));
                _mm512_storeu_ps(scores[h] + j, e);
                vsum = _mm512_add_ps(vsum, e);
            }
            running_sum[h] += _mm512_reduce_add_ps(vsum);
        }
        for (int32_t h0 = 0; h0 < n_heads; h0 += heads_at_once) {
            int32_t nh = n_heads - h0 < heads_at_once ? n_heads - h0 : heads_at_once;
            for (int32_t v0 = 0; v0 < nvec; v0 += ACC_VECTORS) {
                int32_t nv = nvec - v0 < ACC_VECTORS ? nvec - v0 : ACC_VECTORS;
                /* A whole block with constant sizes keeps its accumulators in registers. */
                if (nh == heads_at_once && nv == nvec)
                    chunk_values(out, scores, n, h0, heads_at_once, 0, nvec, values, c0, most,
                                 kv_type, nvec);
                else
                    chunk_values(out, scores, n, h0, nh, v0, nv, values, c0, most, kv_type,
                                 nvec);
            }
        }
    }
    for (int32_t h = 0; h < n_heads; h++)
        if (running_sum[h] > 0.0f)
            scale_row(out[h], nvec, 1.0f / running_sum[h]);
}

#define ATTEND_INSTANCE(name, KV_TYPE, NVEC)                                               \
    static void name(float *const *out, const float *const *q, const int64_t *n_keys,      \
                     int32_t n_heads, const void *const *keys, const void *const *values,  \
                     float scale)                                                          \
    {                                                                                      \
        attend_body(out, q, n_keys, n_heads, keys, values, KV_TYPE, NVEC, scale);         \
    }
ATTEND_INSTANCE(attend_f16_64, GRAFT_TYPE_F16, 4)
ATTEND_INSTANCE(attend_f16_128, GRAFT_TYPE_F16, 8)
ATTEND_INSTANCE(attend_f16_256, GRAFT_TYPE_F16, 16)
ATTEND_INSTANCE(attend_f32_64, GRAFT_TYPE_F32, 4)
ATTEND_INSTANCE(attend_f32_128, GRAFT_TYPE_F32, 8)
ATTEND_INSTANCE(attend_f32_256, GRAFT_TYPE_F32, 16)

void graft__attend_heads_avx512(float *const *out, const float *const *q,
                                const int64_t *n_keys, int32_t n_heads,
                                const void *const *keys, const void *const *values,
                                uint32_t kv_type, int32_t head_dim, float scale)
{
    GRAFT_ASSERT(n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    if (head_dim % LANES != 0 || head_dim > GRAFT_ATTN_MAX_HEAD_DIM) {
        for (int32_t h = 0; h < n_heads; h++)
            graft__attend(out[h], q[h], 1, keys, values, kv_type, n_keys[h], head_dim, scale);
        return;
    }
    bool f16 = kv_type == GRAFT_TYPE_F16;
    switch (head_dim) {
    case 64:
        (f16 ? attend_f16_64 : attend_f32_64)(out, q, n_keys, n_heads, keys, values, scale);
        return;
    case 128:
        (f16 ? attend_f16_128 : attend_f32_128)(out, q, n_keys, n_heads, keys, values, scale);
        return;
    case 256:
        (f16 ? attend_f16_256 : attend_f32_256)(out, q, n_keys, n_heads, keys, values, scale);
        return;
    default:
        attend_body(out, q, n_keys, n_heads, keys, values, kv_type, head_dim / LANES, scale);
    }
}

void graft__attend_avx512(float *out, const float *q, int32_t n_q, const void *const *keys,
                          const void *const *values, uint32_t kv_type, int64_t n_keys,
                          int32_t head_dim, float scale)
{
    if (n_q > GRAFT_ATTN_MAX_HEADS) {
        graft__attend(out, q, n_q, keys, values, kv_type, n_keys, head_dim, scale);
        return;
    }
    float *outs[GRAFT_ATTN_MAX_HEADS];
    const float *qs[GRAFT_ATTN_MAX_HEADS];
    int64_t counts[GRAFT_ATTN_MAX_HEADS];
    for (int32_t h = 0; h < n_q; h++) {
        outs[h] = out + (int64_t)h * head_dim;
        qs[h] = q + (int64_t)h * head_dim;
        counts[h] = n_keys;
    }
    graft__attend_heads_avx512(outs, qs, counts, n_q, keys, values, kv_type, head_dim, scale);
}
