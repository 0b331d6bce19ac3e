/*
 * attention_avx2.c: graft__attend_heads (kernels.h) with AVX2, FMA and F16C, for the avx2
 * kernel path, and graft__attend_avx2, its one-group form.
 *
 * Same algorithm and chunking as the scalar reference (attention.c): each chunk of
 * GRAFT_ATTN_CHUNK keys, counted from the first key, gets its own maximum, weights and
 * weighted values, then is merged into the running maximum, sum and output.
 *
 * A call takes a tile of up to GRAFT_ATTN_MAX_HEADS query heads over one list of keys,
 * each head with its own key count (the heads of a GQA group for a run of tokens of one
 * sequence, in prefill). The keys and values are read in blocks of BLOCK_KEYS rows: each
 * block is widened to f32 once (F16C) into a buffer that stays in L1, and serves every head
 * of the tile, so a K or V row loaded from the KV store serves up to 32 queries. Per chunk:
 *
 *   scores  For each block of keys, every head's dot product with every key: tiles of 2
 *           heads x 4 keys run 8 independent FMA chains side by side (one chain alone
 *           waits on the FMA latency at every step). A dot product is q_0 k_0, then fused
 *           multiply-adds of the 8-lane vectors 1 .. nvec - 1 in order, then its 8 lanes
 *           summed by reduce_add's fixed tree, times the scale.
 *   softmax Per head over its keys of the chunk, 8 keys at a time: the maximum,
 *           p_j = exp(s_j - max) with a vectorised exp (graft__exp8_ps, within 2 ulp of
 *           expf) and their sum (8 lane sums, then reduce_add).
 *   values  For each block of values, each head's weighted values p_j v_j added in key order
 *           to its chunk sum (from zero), in tiles of 2 heads x 4 vectors of 8 lanes; then
 *           the chunk sum is merged into the head's output.
 *
 * Each (head, key) score and each (head, element) value sum goes through the same
 * operations in the same order whichever tile, block or call it is computed in, and a head
 * reads only its own first n_keys keys, so its result depends only on its query and those
 * keys (DESIGN.md invariant 1): the same bits alone, within any tile, or with any other key
 * counts beside it. Head sizes that are not a multiple of 8 use the scalar reference.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/exp_avx2.h"
#include "kernels/kernels.h"
#include "util/util.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

enum {
    LANES = 8,
    BLOCK_KEYS = 16,    /* K or V rows widened to f32 at once */
    TILE_HEADS = 2,     /* heads of one score or value tile */
    TILE_KEYS = 4,      /* keys of one score tile */
    TILE_VECS = 4       /* 8-lane vectors of one value tile */
};

/* The 8 lanes summed in one fixed order: halves, then pairs, then the last two. */
AVX2_INLINE float reduce_add(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Asks for the cache lines of rows[i] (bytes long), if i < n_rows. Rows are scattered in
 * the KV store, one sequence position apart, so the hardware prefetcher does not find them.
 * Always inlined: GCC takes a function whose only effect is a prefetch for one without
 * effects and, not inlining it, dropped every call. */
AVX2_INLINE void prefetch_row(const void *const *rows, int64_t i, int64_t n_rows, int32_t bytes)
{
    if (i >= n_rows)
        return;
    for (int32_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)rows[i] + off, _MM_HINT_T0);
}

/* buf (n, nvec * 8) = rows[0 .. n) of kv_type widened to f32; asks for the rows of the
 * next blocks (up to n_ahead of them exist after these). */
static void widen_block(float *buf, const void *const *rows, int n, int64_t n_ahead,
                        uint32_t kv_type, int32_t nvec)
{
    const int32_t bytes = nvec * LANES * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    for (int j = 0; j < n; j++) {
        prefetch_row(rows + n, j, n_ahead, bytes);
        float *dst = buf + (size_t)j * (size_t)nvec * LANES;
        if (kv_type == GRAFT_TYPE_F32) {
            memcpy(dst, rows[j], (size_t)nvec * LANES * sizeof(float));
            continue;
        }
        const __m128i *src = rows[j];
        for (int32_t v = 0; v < nvec; v++)
            _mm256_storeu_ps(dst + v * LANES, _mm256_cvtph_ps(_mm_loadu_si128(src + v)));
    }
}

/* s[h][k] = scale * q[h] . k_k for NH heads and NK keys (rows of kbuf, stride dim floats):
 * NH x NK chains side by side, each key vector loaded once for the NH heads. */
AVX2_INLINE void score_tile(int NH, int NK, float *const *s, const float *const *q,
                            const float *kbuf, int32_t dim, int32_t nvec, float scale)
{
    __m256 acc[TILE_HEADS][TILE_KEYS];
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            acc[h][k] = _mm256_mul_ps(_mm256_loadu_ps(q[h]), _mm256_loadu_ps(kbuf + k * dim));
    for (int32_t v = 1; v < nvec; v++) {
        __m256 key[TILE_KEYS];
        for (int k = 0; k < NK; k++)
            key[k] = _mm256_loadu_ps(kbuf + k * dim + v * LANES);
        for (int h = 0; h < NH; h++) {
            __m256 qv = _mm256_loadu_ps(q[h] + v * LANES);
            for (int k = 0; k < NK; k++)
                acc[h][k] = _mm256_fmadd_ps(qv, key[k], acc[h][k]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            s[h][k] = scale * reduce_add(acc[h][k]);
}

/* scores[h][j0 + k] for the m keys of the block in kbuf (k < m), every head: keys a tile
 * at a time, heads two at a time. Heads whose keys end inside the block get scores past
 * their end too, which the softmax does not read. */
static void block_scores(float (*scores)[GRAFT_ATTN_CHUNK], const float *const *q,
                         const int *n, int32_t n_heads, int j0, int m, const float *kbuf,
                         int32_t nvec, float scale)
{
    const int32_t dim = nvec * LANES;
    for (int32_t h = 0; h < n_heads; h += TILE_HEADS) {
        const int nh = n_heads - h >= TILE_HEADS ? TILE_HEADS : 1;
        if (n[h] <= j0 && (nh == 1 || n[h + 1] <= j0))
            continue;
        int k = 0;
        for (; k + TILE_KEYS <= m; k += TILE_KEYS) {
            float *s[TILE_HEADS] = {scores[h] + j0 + k, scores[h + nh - 1] + j0 + k};
            if (nh == TILE_HEADS)
                score_tile(TILE_HEADS, TILE_KEYS, s, q + h, kbuf + k * dim, dim, nvec, scale);
            else
                score_tile(1, TILE_KEYS, s, q + h, kbuf + k * dim, dim, nvec, scale);
        }
        for (; k < m; k++) {
            float *s[TILE_HEADS] = {scores[h] + j0 + k, scores[h + nh - 1] + j0 + k};
            if (nh == TILE_HEADS)
                score_tile(TILE_HEADS, 1, s, q + h, kbuf + k * dim, dim, nvec, scale);
            else
                score_tile(1, 1, s, q + h, kbuf + k * dim, dim, nvec, scale);
        }
    }
}

/* The largest of the 8 lanes, in one fixed order (as reduce_add). */
AVX2_INLINE float reduce_max(__m256 x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The lanes of the 8 keys at j that are among the first n. */
AVX2_INLINE __m256i live_lanes(int j, int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* One head's chunk: its n scores s become the weights p = exp(s - m), m the chunk's
 * maximum (graft__exp8_ps, 8 keys at a time); returns m, and the sum of the weights in
 * *sum (8 lane sums in key order, then reduce_add). s has room for whole vectors up to
 * GRAFT_ATTN_CHUNK; entries from n to the next multiple of 8 become 0. */
static float chunk_softmax(float *s, int n, float *sum)
{
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    __m256 vmax = minus_inf;
    for (int j = 0; j < n; j += LANES) {
        const __m256i live = live_lanes(j, n);
        const __m256 x = _mm256_blendv_ps(minus_inf, _mm256_maskload_ps(s + j, live),
                                          _mm256_castsi256_ps(live));
        vmax = _mm256_max_ps(vmax, x);
    }
    const float chunk_max = reduce_max(vmax);
    const __m256 vm = _mm256_set1_ps(chunk_max);
    __m256 vsum = _mm256_setzero_ps();
    for (int j = 0; j < n; j += LANES) {
        const __m256i live = live_lanes(j, n);
        const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(s + j, live), vm);
        const __m256 e = _mm256_and_ps(graft__exp8_ps(d), _mm256_castsi256_ps(live));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    *sum = reduce_add(vsum);
    return chunk_max;
}

/* acc[h][v] += p[h][j] * vbuf row j vector v0 + v, for rows j in [j_lo, j_hi) of the block,
 * NH heads and NV vectors, with acc loaded from and stored back to c[h] + v0 * 8. */
AVX2_INLINE void value_tile(int NH, int NV, float *const *c, const float *const *p,
                            int j_lo, int j_hi, const float *vbuf, int32_t dim, int32_t v0)
{
    __m256 acc[TILE_HEADS][TILE_VECS];
    for (int h = 0; h < NH; h++)
        for (int v = 0; v < NV; v++)
            acc[h][v] = _mm256_loadu_ps(c[h] + (v0 + v) * LANES);
    for (int j = j_lo; j < j_hi; j++) {
        __m256 x[TILE_VECS];
        for (int v = 0; v < NV; v++)
            x[v] = _mm256_loadu_ps(vbuf + j * dim + (v0 + v) * LANES);
        for (int h = 0; h < NH; h++) {
            __m256 pv = _mm256_set1_ps(p[h][j]);
            for (int v = 0; v < NV; v++)
                acc[h][v] = _mm256_fmadd_ps(pv, x[v], acc[h][v]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(c[h] + (v0 + v) * LANES, acc[h][v]);
}

/* value_tile over all nvec vectors of a row, TILE_VECS at a time. */
AVX2_INLINE void value_rows(int NH, float *const *c, const float *const *p, int j_lo, int j_hi,
                            const float *vbuf, int32_t nvec)
{
    const int32_t dim = nvec * LANES;
    int32_t v0 = 0;
    for (; v0 + TILE_VECS <= nvec; v0 += TILE_VECS)
        value_tile(NH, TILE_VECS, c, p, j_lo, j_hi, vbuf, dim, v0);
    for (; v0 < nvec; v0++)
        value_tile(NH, 1, c, p, j_lo, j_hi, vbuf, dim, v0);
}

/* chunk[h] (dim) += sum_j p[h][j] v_j over head h's keys among the m of the block at j0
 * (rows of vbuf, key j0 + i in row i), for every head: two heads at a time over the keys
 * both have, then the longer one alone over the rest. */
static void block_values(float *const *chunk, float (*p)[GRAFT_ATTN_CHUNK], const int *n,
                         int32_t n_heads, int j0, int m, const float *vbuf, int32_t nvec)
{
    for (int32_t h = 0; h < n_heads; h += TILE_HEADS) {
        const int nh = n_heads - h >= TILE_HEADS ? TILE_HEADS : 1;
        int end[TILE_HEADS] = {0, 0}; /* each head's keys in the block */
        for (int i = 0; i < nh; i++) {
            const int left = n[h + i] - j0;
            end[i] = left <= 0 ? 0 : left < m ? left : m;
        }
        const float *ph[TILE_HEADS] = {p[h] + j0, p[h + nh - 1] + j0};
        if (nh == 1) {
            if (end[0] > 0)
                value_rows(1, chunk + h, ph, 0, end[0], vbuf, nvec);
            continue;
        }
        const int both = end[0] < end[1] ? end[0] : end[1];
        if (both > 0)
            value_rows(TILE_HEADS, chunk + h, ph, 0, both, vbuf, nvec);
        const int longer = end[0] > end[1] ? 0 : 1;
        if (end[longer] > both)
            value_rows(1, chunk + h + longer, ph + longer, both, end[longer], vbuf, nvec);
    }
}

/* out (dim) = out * a + chunk * b */
static void merge_row(float *out, const float *chunk, int32_t nvec, float a, float b)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int32_t v = 0; v < nvec; v++)
        _mm256_storeu_ps(out + v * LANES,
                         _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(out + v * LANES), va),
                                       _mm256_mul_ps(_mm256_loadu_ps(chunk + v * LANES), vb)));
}

static void scale_row(float *x, int32_t nvec, float factor)
{
    __m256 f = _mm256_set1_ps(factor);
    for (int32_t v = 0; v < nvec; v++)
        _mm256_storeu_ps(x + v * LANES, _mm256_mul_ps(_mm256_loadu_ps(x + v * LANES), f));
}

/* The chunk at c0 for every head with keys in it: scores, softmax, values, merge. */
static void attend_chunk(float *const *out, float *const *chunk, const float *const *q,
                         const int64_t *n_keys, int32_t n_heads, const void *const *keys,
                         const void *const *values, uint32_t kv_type, int32_t nvec,
                         float scale, int64_t c0, int64_t most, float *running_max,
                         float *running_sum, float *buf)
{
    float scores[GRAFT_ATTN_MAX_HEADS][GRAFT_ATTN_CHUNK]; // (heads, chunk keys); then p
    float a[GRAFT_ATTN_MAX_HEADS], b[GRAFT_ATTN_MAX_HEADS]; // the chunk's merge factors
    int n[GRAFT_ATTN_MAX_HEADS]; // keys of each head in the chunk
    const int32_t dim = nvec * LANES;
    int n_max = 0;
    for (int32_t h = 0; h < n_heads; h++) {
        const int64_t left = n_keys[h] - c0;
        n[h] = left <= 0 ? 0 : left < GRAFT_ATTN_CHUNK ? (int)left : GRAFT_ATTN_CHUNK;
        n_max = n[h] > n_max ? n[h] : n_max;
    }
    for (int j0 = 0; j0 < n_max; j0 += BLOCK_KEYS) {
        const int m = n_max - j0 < BLOCK_KEYS ? n_max - j0 : BLOCK_KEYS;
        widen_block(buf, keys + c0 + j0, m, most - c0 - j0 - m, kv_type, nvec);
        block_scores(scores, q, n, n_heads, j0, m, buf, nvec, scale);
    }
    for (int32_t h = 0; h < n_heads; h++) {
        if (n[h] == 0)
            continue;
        float chunk_sum;
        const float chunk_max = chunk_softmax(scores[h], n[h], &chunk_sum);
        const float merged = fmaxf(running_max[h], chunk_max);
        a[h] = running_max[h] == -INFINITY ? 0.0f : expf(running_max[h] - merged);
        b[h] = expf(chunk_max - merged);
        running_sum[h] = running_sum[h] * a[h] + chunk_sum * b[h];
        running_max[h] = merged;
        memset(chunk[h], 0, (size_t)dim * sizeof(float));
    }
    for (int j0 = 0; j0 < n_max; j0 += BLOCK_KEYS) {
        const int m = n_max - j0 < BLOCK_KEYS ? n_max - j0 : BLOCK_KEYS;
        widen_block(buf, values + c0 + j0, m, most - c0 - j0 - m, kv_type, nvec);
        block_values(chunk, scores, n, n_heads, j0, m, buf, nvec);
    }
    for (int32_t h = 0; h < n_heads; h++)
        if (n[h] > 0)
            merge_row(out[h], chunk[h], nvec, a[h], b[h]);
}

void graft__attend_heads_avx2(float *const *out, const float *const *q, const int64_t *n_keys,
                              int32_t n_heads, const void *const *keys,
                              const void *const *values, uint32_t kv_type, int32_t head_dim,
                              float scale)
{
    GRAFT_ASSERT(n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    if (head_dim % LANES != 0 || head_dim > GRAFT_ATTN_MAX_HEAD_DIM) {
        for (int32_t h = 0; h < n_heads; h++)
            graft__attend(out[h], q[h], 1, keys, values, kv_type, n_keys[h], head_dim, scale);
        return;
    }
    GRAFT_ASSERT(kv_type == GRAFT_TYPE_F16 || kv_type == GRAFT_TYPE_F32);
    const int32_t nvec = head_dim / LANES;
    float buf[BLOCK_KEYS * GRAFT_ATTN_MAX_HEAD_DIM]; // (block keys, head_dim) widened rows
    float sums[GRAFT_ATTN_MAX_HEADS * GRAFT_ATTN_MAX_HEAD_DIM]; // (heads, head_dim) chunk sums
    float *chunk[GRAFT_ATTN_MAX_HEADS];
    float running_max[GRAFT_ATTN_MAX_HEADS], running_sum[GRAFT_ATTN_MAX_HEADS];
    int64_t most = 0;
    for (int32_t h = 0; h < n_heads; h++) {
        memset(out[h], 0, (size_t)head_dim * sizeof(float));
        chunk[h] = sums + (size_t)h * (size_t)head_dim;
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
        most = n_keys[h] > most ? n_keys[h] : most;
    }
    for (int64_t c0 = 0; c0 < most; c0 += GRAFT_ATTN_CHUNK)
        attend_chunk(out, chunk, q, n_keys, n_heads, keys, values, kv_type, nvec, scale, c0,
                     most, running_max, running_sum, buf);
    for (int32_t h = 0; h < n_heads; h++)
        if (running_sum[h] > 0.0f)
            scale_row(out[h], nvec, 1.0f / running_sum[h]);
}

void graft__attend_avx2(float *out, const float *q, int32_t n_q, const void *const *keys,
                        const void *const *values, uint32_t kv_type, int64_t n_keys,
                        int32_t head_dim, float scale)
{
    graft__attend_as_heads(graft__attend_heads_avx2, out, q, n_q, keys, values, kv_type, n_keys,
                           head_dim, scale);
}
