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
 * sequence, in prefill). The keys and values are read in blocks of BLOCK_KEYS rows. With
 * more than IN_PLACE_HEADS heads, each block is widened to f32 once (F16C) into a buffer
 * that stays in L1 and serves every head of the tile, so a K or V row loaded from the KV
 * store serves up to 32 queries. With fewer (a decoded token's GQA group), the F16 rows are
 * converted where they are read instead: storing the widened rows and reading them back
 * costs more than converting each row once per pair of heads. Both give the same bits (the
 * conversion is exact). Per chunk:
 *
 *   scores  For each block of keys, every head's dot product with every key: tiles of 2
 *           heads x 4 keys run 8 independent FMA chains side by side (one chain alone
 *           waits on the FMA latency at every step). A dot product is q_0 k_0, then fused
 *           multiply-adds of the 8-lane vectors 1 .. nvec - 1 in order, then its 8 lanes
 *           summed by graft__hsum8_ps's fixed tree, times the scale.
 *   softmax Per head over its keys of the chunk, 8 keys at a time: the maximum,
 *           p_j = exp(s_j - max) with a vectorised exp (graft__exp8_ps, within 2 ulp of
 *           expf) and their sum (8 lane sums, then graft__hsum8_ps).
 *   values  For each block of values, each head's weighted values p_j v_j added in key order
 *           to its chunk sum (from zero), in tiles of 2 heads x 4 vectors of 8 lanes; then
 *           the chunk sum is merged into the head's output.
 *
 * The chunk form (graft__attend_chunk_avx2, graft__attend_merge_avx2; kernels.h) runs the
 * same computation over whole KV rows, each GQA group of heads as a run reading its own
 * columns: for each block, every run's scores (then values) before the next block, so the
 * columns of all the runs are read while the block's rows are in cache, as one stream from
 * memory. The merge afterwards, in chunk order, is the heads form's (merge_chunk).
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
#include "kernels/hsum_avx2.h"
#include "kernels/kernels.h"
#include "util/util.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

enum {
    LANES = 8,
    BLOCK_KEYS = 16,    /* K or V rows widened to f32 at once */
    TILE_HEADS = 2,     /* heads of one score or value tile */
    TILE_KEYS = 4,      /* keys of one score tile */
    TILE_VECS = 4,      /* 8-lane vectors of one value tile */
    IN_PLACE_HEADS = 4  /* at most this many heads read F16 rows in place */
};

/* The K or V rows of a block: row k at buf + k * dim (widened), or in F16 read in place at
 * byte col of rows[k]. f16 is a constant at every call, so each form compiles to its own
 * loop. */
typedef struct block_rows {
    const float *buf;
    const void *const *rows;
    size_t col;
    int f16;
} block_rows;

/* Vector v (8 lanes) of row k of a block. */
AVX2_INLINE __m256 row_vec(block_rows r, int32_t dim, int k, int32_t v)
{
    if (r.f16)
        return _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)((const uint8_t *)r.rows[k] + r.col) + v));
    return _mm256_loadu_ps(r.buf + (size_t)k * (size_t)dim + (size_t)v * LANES);
}

/* Row k + d of the block from row k's view: the same rows, d further on. */
AVX2_INLINE block_rows rows_from(block_rows r, int32_t dim, int d)
{
    if (r.f16)
        r.rows += d;
    else
        r.buf += (size_t)d * (size_t)dim;
    return r;
}

/* Asks for the cache lines of bytes [col, col + bytes) of rows[i], if i < n_rows. Rows are
 * scattered in the KV store, one sequence position apart, so the hardware prefetcher does
 * not find them. Always inlined: GCC takes a function whose only effect is a prefetch for
 * one without effects and, not inlining it, dropped every call. */
AVX2_INLINE void prefetch_row(const void *const *rows, int64_t i, int64_t n_rows, size_t col,
                              int32_t bytes)
{
    if (i >= n_rows)
        return;
    for (int32_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)rows[i] + col + off, _MM_HINT_T0);
}

/* buf (n, nvec * 8) = bytes [col, ...) of rows[0 .. n), of kv_type, widened to f32; asks
 * for the same bytes of the next block's rows (up to n_ahead of them exist after these). */
static void widen_block(float *buf, const void *const *rows, size_t col, int n, int64_t n_ahead,
                        uint32_t kv_type, int32_t nvec)
{
    const int32_t bytes = nvec * LANES * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    for (int j = 0; j < n; j++) {
        prefetch_row(rows + n, j, n_ahead, col, bytes);
        float *dst = buf + (size_t)j * (size_t)nvec * LANES;
        const uint8_t *src = (const uint8_t *)rows[j] + col;
        if (kv_type == GRAFT_TYPE_F32) {
            memcpy(dst, src, (size_t)nvec * LANES * sizeof(float));
            continue;
        }
        for (int32_t v = 0; v < nvec; v++)
            _mm256_storeu_ps(dst + v * LANES,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src + v)));
    }
}

/* Asks for bytes [col, col + bytes) of the n rows after a block (up to n_ahead exist). */
static void prefetch_block(const void *const *rows, size_t col, int32_t bytes, int n,
                           int64_t n_ahead)
{
    for (int j = 0; j < n; j++)
        prefetch_row(rows + n, j, n_ahead, col, bytes);
}

/* s[h][k] = scale * q[h] . k_k for NH heads and NK keys (rows 0 .. NK of kr): NH x NK
 * chains side by side, each key vector loaded once for the NH heads. */
AVX2_INLINE void score_tile(int NH, int NK, float *const *s, const float *const *q,
                            block_rows kr, int32_t dim, int32_t nvec, float scale)
{
    __m256 acc[TILE_HEADS][TILE_KEYS];
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            acc[h][k] = _mm256_mul_ps(_mm256_loadu_ps(q[h]), row_vec(kr, dim, k, 0));
    for (int32_t v = 1; v < nvec; v++) {
        __m256 key[TILE_KEYS];
        for (int k = 0; k < NK; k++)
            key[k] = row_vec(kr, dim, k, v);
        for (int h = 0; h < NH; h++) {
            __m256 qv = _mm256_loadu_ps(q[h] + v * LANES);
            for (int k = 0; k < NK; k++)
                acc[h][k] = _mm256_fmadd_ps(qv, key[k], acc[h][k]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            s[h][k] = scale * graft__hsum8_ps(acc[h][k]);
}

/* scores[h][j0 + k] for the m keys of the block kr (k < m), every head: keys a tile at a
 * time, heads two at a time. Heads whose keys end inside the block get scores past their
 * end too, which the softmax does not read. */
AVX2_INLINE void block_scores(float (*scores)[GRAFT_ATTN_CHUNK], const float *const *q,
                              const int *n, int32_t n_heads, int j0, int m, block_rows kr,
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
            const block_rows at = rows_from(kr, dim, k);
            if (nh == TILE_HEADS)
                score_tile(TILE_HEADS, TILE_KEYS, s, q + h, at, dim, nvec, scale);
            else
                score_tile(1, TILE_KEYS, s, q + h, at, dim, nvec, scale);
        }
        for (; k < m; k++) {
            float *s[TILE_HEADS] = {scores[h] + j0 + k, scores[h + nh - 1] + j0 + k};
            const block_rows at = rows_from(kr, dim, k);
            if (nh == TILE_HEADS)
                score_tile(TILE_HEADS, 1, s, q + h, at, dim, nvec, scale);
            else
                score_tile(1, 1, s, q + h, at, dim, nvec, scale);
        }
    }
}

/* The largest of the 8 lanes, in one fixed order (as graft__hsum8_ps). */
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
 * *sum (8 lane sums in key order, then graft__hsum8_ps). s has room for whole vectors up to
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
    *sum = graft__hsum8_ps(vsum);
    return chunk_max;
}

/* acc[h][v] += p[h][j] * row j's vector v0 + v, for rows j in [j_lo, j_hi) of the block vr,
 * NH heads and NV vectors, with acc loaded from and stored back to c[h] + v0 * 8. */
AVX2_INLINE void value_tile(int NH, int NV, float *const *c, const float *const *p,
                            int j_lo, int j_hi, block_rows vr, int32_t dim, int32_t v0)
{
    __m256 acc[TILE_HEADS][TILE_VECS];
    for (int h = 0; h < NH; h++)
        for (int v = 0; v < NV; v++)
            acc[h][v] = _mm256_loadu_ps(c[h] + (v0 + v) * LANES);
    for (int j = j_lo; j < j_hi; j++) {
        __m256 x[TILE_VECS];
        for (int v = 0; v < NV; v++)
            x[v] = row_vec(vr, dim, j, v0 + v);
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
                            block_rows vr, int32_t nvec)
{
    const int32_t dim = nvec * LANES;
    int32_t v0 = 0;
    for (; v0 + TILE_VECS <= nvec; v0 += TILE_VECS)
        value_tile(NH, TILE_VECS, c, p, j_lo, j_hi, vr, dim, v0);
    for (; v0 < nvec; v0++)
        value_tile(NH, 1, c, p, j_lo, j_hi, vr, dim, v0);
}

/* chunk[h] (dim) += sum_j p[h][j] v_j over head h's keys among the m of the block at j0
 * (rows of vr, key j0 + i in row i), for every head: two heads at a time over the keys
 * both have, then the longer one alone over the rest. */
AVX2_INLINE void block_values(float *const *chunk, float (*p)[GRAFT_ATTN_CHUNK], const int *n,
                              int32_t n_heads, int j0, int m, block_rows vr, int32_t nvec)
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
                value_rows(1, chunk + h, ph, 0, end[0], vr, nvec);
            continue;
        }
        const int both = end[0] < end[1] ? end[0] : end[1];
        if (both > 0)
            value_rows(TILE_HEADS, chunk + h, ph, 0, both, vr, nvec);
        const int longer = end[0] > end[1] ? 0 : 1;
        if (end[longer] > both)
            value_rows(1, chunk + h + longer, ph + longer, both, end[longer], vr, nvec);
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

/* Runs of heads that read the same columns of the rows (a GQA group each): run r is heads
 * [end[r - 1], end[r]) (end[-1] = 0), reading from byte col[r] of every row. */
typedef struct head_runs {
    int32_t n;
    int32_t end[GRAFT_ATTN_MAX_HEADS];
    size_t col[GRAFT_ATTN_MAX_HEADS];
} head_runs;

/* The scores (values: 0, 1) of one block of m rows at j0 for every run of heads. Blocks are
 * the outer loop, so the rows' columns of all runs are read while the block is in cache. */
static void block_of_runs(int values, float (*scores)[GRAFT_ATTN_CHUNK], float *const *chunk,
                          const float *const *q, const int *n, const head_runs *runs,
                          const void *const *rows, int j0, int m, int64_t ahead,
                          uint32_t kv_type, int32_t nvec, float scale, float *buf)
{
    const int32_t bytes = nvec * LANES * (kv_type == GRAFT_TYPE_F32 ? 4 : 2);
    for (int32_t r = 0, h = 0; r < runs->n; h = runs->end[r++]) {
        const int32_t count = runs->end[r] - h;
        const size_t col = runs->col[r];
        if (kv_type == GRAFT_TYPE_F16 && count <= IN_PLACE_HEADS) {
            const block_rows in_place = {NULL, rows, col, 1};
            prefetch_block(rows, col, bytes, m, ahead);
            if (values)
                block_values(chunk + h, scores + h, n + h, count, j0, m, in_place, nvec);
            else
                block_scores(scores + h, q + h, n + h, count, j0, m, in_place, nvec, scale);
        } else {
            const block_rows widened = {buf, NULL, 0, 0};
            widen_block(buf, rows, col, m, ahead, kv_type, nvec);
            if (values)
                block_values(chunk + h, scores + h, n + h, count, j0, m, widened, nvec);
            else
                block_scores(scores + h, q + h, n + h, count, j0, m, widened, nvec, scale);
        }
    }
}

/* One chunk of at most GRAFT_ATTN_CHUNK rows (keys[j], values[j]) for every head with keys
 * in it (head h has the first n[h]), the heads in runs: scores, softmax, then chunk[h]
 * (from zero) the sum of its weighted values, with its maximum and weight sum in
 * chunk_max[h] and chunk_sum[h]. n_ahead rows exist after the chunk (they are
 * prefetched). */
static void chunk_heads(float *const *chunk, float *chunk_max, float *chunk_sum,
                        const float *const *q, const int *n, const head_runs *runs,
                        const void *const *keys, const void *const *values, uint32_t kv_type,
                        int32_t nvec, float scale, int64_t n_ahead, float *buf)
{
    float scores[GRAFT_ATTN_MAX_HEADS][GRAFT_ATTN_CHUNK]; // (heads, chunk keys); then p
    const int32_t dim = nvec * LANES, n_heads = runs->end[runs->n - 1];
    int n_max = 0;
    for (int32_t h = 0; h < n_heads; h++)
        n_max = n[h] > n_max ? n[h] : n_max;
    for (int j0 = 0; j0 < n_max; j0 += BLOCK_KEYS) {
        const int m = n_max - j0 < BLOCK_KEYS ? n_max - j0 : BLOCK_KEYS;
        block_of_runs(0, scores, NULL, q, n, runs, keys + j0, j0, m, n_max - j0 - m + n_ahead,
                      kv_type, nvec, scale, buf);
    }
    for (int32_t h = 0; h < n_heads; h++) {
        if (n[h] == 0)
            continue;
        chunk_max[h] = chunk_softmax(scores[h], n[h], &chunk_sum[h]);
        memset(chunk[h], 0, (size_t)dim * sizeof(float));
    }
    for (int j0 = 0; j0 < n_max; j0 += BLOCK_KEYS) {
        const int m = n_max - j0 < BLOCK_KEYS ? n_max - j0 : BLOCK_KEYS;
        block_of_runs(1, scores, chunk, q, n, runs, values + j0, j0, m,
                      n_max - j0 - m + n_ahead, kv_type, nvec, scale, buf);
    }
}

/* A head's chunk (maximum, weight sum, weighted values) merged into its running maximum,
 * sum and output: the one merge of both forms, so they give the same bits. */
static void merge_chunk(float *out, const float *chunk, float chunk_max, float chunk_sum,
                        float *running_max, float *running_sum, int32_t nvec)
{
    const float merged = fmaxf(*running_max, chunk_max);
    const float a = *running_max == -INFINITY ? 0.0f : expf(*running_max - merged);
    const float b = expf(chunk_max - merged);
    *running_sum = *running_sum * a + chunk_sum * b;
    *running_max = merged;
    merge_row(out, chunk, nvec, a, b);
}

/* The chunk at c0 for every head with keys in it, merged into the heads' outputs. */
static void attend_chunk(float *const *out, float *const *chunk, const float *const *q,
                         const int64_t *n_keys, int32_t n_heads, const void *const *keys,
                         const void *const *values, uint32_t kv_type, int32_t nvec,
                         float scale, int64_t c0, int64_t most, float *running_max,
                         float *running_sum, float *buf)
{
    float chunk_max[GRAFT_ATTN_MAX_HEADS], chunk_sum[GRAFT_ATTN_MAX_HEADS];
    int n[GRAFT_ATTN_MAX_HEADS]; // keys of each head in the chunk
    int n_max = 0;
    for (int32_t h = 0; h < n_heads; h++) {
        const int64_t left = n_keys[h] - c0;
        n[h] = left <= 0 ? 0 : left < GRAFT_ATTN_CHUNK ? (int)left : GRAFT_ATTN_CHUNK;
        n_max = n[h] > n_max ? n[h] : n_max;
    }
    const head_runs one = {1, {n_heads}, {0}};
    chunk_heads(chunk, chunk_max, chunk_sum, q, n, &one, keys + c0, values + c0, kv_type, nvec,
                scale, most - c0 - n_max, buf);
    for (int32_t h = 0; h < n_heads; h++)
        if (n[h] > 0)
            merge_chunk(out[h], chunk[h], chunk_max[h], chunk_sum[h], &running_max[h],
                        &running_sum[h], nvec);
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

void graft__attend_chunk_avx2(float *const *out, float *max, float *sum, const float *const *q,
                              const int32_t *col, int32_t n_heads, int32_t n_keys,
                              const void *const *keys, const void *const *values,
                              uint32_t kv_type, int32_t head_dim, float scale)
{
    GRAFT_ASSERT(n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    GRAFT_ASSERT(head_dim % LANES == 0 && head_dim <= GRAFT_ATTN_MAX_HEAD_DIM);
    GRAFT_ASSERT(n_keys >= 1 && n_keys <= GRAFT_ATTN_CHUNK);
    GRAFT_ASSERT(kv_type == GRAFT_TYPE_F16 || kv_type == GRAFT_TYPE_F32);
    if (n_heads == 0)
        return;
    const size_t elem = kv_type == GRAFT_TYPE_F32 ? 4 : 2;
    float buf[BLOCK_KEYS * GRAFT_ATTN_MAX_HEAD_DIM]; // (block keys, head_dim) widened rows
    int n[GRAFT_ATTN_MAX_HEADS];
    head_runs runs = {0, {0}, {0}};
    for (int32_t h = 0; h < n_heads; h++) {
        n[h] = n_keys;
        if (h == 0 || col[h] != col[h - 1])
            runs.col[runs.n++] = (size_t)col[h] * elem;
        runs.end[runs.n - 1] = h + 1;
    }
    chunk_heads(out, max, sum, q, n, &runs, keys, values, kv_type, head_dim / LANES, scale, 0,
                buf);
}

void graft__attend_merge_avx2(float *out, const float *chunks, const float *max,
                              const float *sum, int32_t n_chunks, int32_t n_heads,
                              int32_t head_dim)
{
    GRAFT_ASSERT(head_dim % LANES == 0 && n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    const int32_t nvec = head_dim / LANES;
    for (int32_t h = 0; h < n_heads; h++) {
        float *o = out + (int64_t)h * head_dim;
        float running_max = -INFINITY, running_sum = 0.0f;
        memset(o, 0, (size_t)head_dim * sizeof(float));
        for (int32_t c = 0; c < n_chunks; c++) {
            const int64_t at = (int64_t)c * n_heads + h;
            merge_chunk(o, chunks + at * head_dim, max[at], sum[at], &running_max, &running_sum,
                        nvec);
        }
        if (running_sum > 0.0f)
            scale_row(o, nvec, 1.0f / running_sum);
    }
}
