/*
 * attention_avx512.c: graft__attend (kernels.h) with AVX-512, for the avx512 kernel path, in
 * two forms: the one-call form (graft__attend_heads_avx512), whose heads read the rows as
 * listed, and the chunk form (graft__attend_chunk_avx512 and graft__attend_merge_avx512),
 * whose heads read their slices of whole rows, one chunk per call.
 *
 * Same algorithm and chunking as the scalar reference (attention.c): each chunk of
 * GRAFT_ATTN_CHUNK keys, counted from the first key, gets its own maximum, weights and
 * weighted values, then is merged into the running maximum, sum and output. Each key and
 * value row is read once per chunk pass and used by every query head that reads the same
 * part of it (a GQA group). Per chunk:
 *
 *   scores  For 16 keys at a time, each head's dot product with each key is a 16-lane
 *           vector of partial sums (F16 rows widened with vcvtph2ps in registers); the 16
 *           vectors are then summed lane-wise by one transpose-and-add network, which
 *           reduces every key by the same tree ((e0+e2)+(e1+e3) within 128-bit lanes,
 *           then (L0+L1)+(L2+L3) across them) wherever it sits among the 16.
 *   softmax The chunk maximum, exp(s - max) with a vectorised exp (graft__exp_ps, within
 *           2 ulp of expf) and the sum of the weights, 16 keys per vector.
 *   values  Each head's weighted values accumulate from zero in registers across the
 *           chunk's keys (as many heads at a time as fit in 16 vectors), adding p_j v_j per
 *           key; then they are merged into the head's output (merge_factors, merge_vec), or,
 *           in the chunk form, stored as they are for graft__attend_merge_avx512 to merge
 *           by the same functions.
 *
 * In the one-call form, a tile of WIDEN_HEADS or more heads (prefill: the GQA group of up to
 * 16 tokens) over F16 rows first widens the chunk's K rows, then its V rows, into an f32
 * buffer (widen_rows) that the same code then reads as F32 rows, so each vector is widened
 * once rather than once per pair of heads; widening is exact, so the bits are the same.
 *
 * Which keys share a group of 16 and a chunk depends only on their index from the first
 * key, so a head's result depends only on its query and the keys (DESIGN.md invariant 1),
 * not on n_q or the batch. The head sizes 64, 128 and 256 get instances whose loops the
 * compiler unrolls into registers; other multiples of 16 run the same code with run-time
 * loops; the rest use the scalar reference (and have no chunk form).
 *
 * The chunk form. Over a long context, a decode step's attention is bound by reading the K
 * and V rows, and a row holds every KV head of its position. The forward pass makes each
 * chunk a task of the thread pool (or half of its heads, where that evens out the
 * threads' shares): a thread reads whole rows of its chunks (or their halves), one run
 * after another, and the merge takes the chunks in order afterwards. Memory serves such a
 * reader at its rate only if the reader asks for lines well ahead of their use: the scores
 * read the rows one after another, every head of a row in turn (row_scores), asking for
 * the row ROW_AHEAD on and for the first value slice of the row being read; the values add
 * a run of heads' slice of the chunk's rows at a time, as the one-call form does, each
 * pass asking for the next slice of the rows it reads. This order, rather than 8 rows a
 * slice after another each asked for 8 rows ahead, keeps memory streaming (figures:
 * bench/results/2026-12-01-kernel-decisions.md). Both forms compute each dot product,
 * each group of 16 keys and each value sum with the same operations in the same order, so
 * a head's output is the same bits in either form, whichever heads share a call and
 * whichever thread computed a chunk.
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/exp_avx512.h"
#include "kernels/kernels.h"
#include "util/util.h"

enum {
    LANES = 16,
    ACC_VECTORS = 16,    /* output accumulators kept in registers at once */
    PREFETCH_AHEAD = 8,  /* rows ahead whose slice the one-call form's values ask for */
    ROW_AHEAD = 4,       /* rows ahead that the chunk form's scores ask for */
    ROW_HEADS = 4,       /* heads of one slice whose dot products row_scores takes at once */
    SCORE_HEADS = 8,     /* heads whose partial sums chunk_scores keeps at once */
    SCORE_KEYS = 8,      /* keys whose dot products dot_block computes at once */
    WIDEN_HEADS = 4,     /* heads of a one-call tile from which F16 rows are widened first */
    WIDEN_MAX_DIM = 256  /* largest head size whose chunk of rows is widened */
};

/* The next_off of chunk_values when there is no next slice. */
#define NO_SLICE ((size_t)-1)

/* Vector v of a K or V row stored as kv_type. */
static inline __attribute__((always_inline)) __m512 load_vec(const void *row, int32_t v,
                                                             uint32_t kv_type)
{
    if (kv_type == GRAFT_TYPE_F32)
        return _mm512_loadu_ps((const float *)row + v * LANES);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row + v));
}

/* Bytes of one element of a K or V row. */
static inline int32_t elem_bytes(uint32_t kv_type)
{
    return kv_type == GRAFT_TYPE_F32 ? 4 : 2;
}

/* Bytes of one head's slice of a row. */
static inline int32_t slice_bytes(uint32_t kv_type, int32_t nvec)
{
    return nvec * LANES * elem_bytes(kv_type);
}

/* Asks for the bytes [lo, hi) of row, a cache line at a time. */
static inline __attribute__((always_inline)) void prefetch_span(const char *row, size_t lo,
                                                               size_t hi)
{
    for (size_t b = lo; b < hi; b += 64)
        _mm_prefetch(row + b, _MM_HINT_T0);
}

/* Asks for the slice of `bytes` at off of rows[i], if i < n_rows. The one-call form's
 * values call this for the row PREFETCH_AHEAD after the one they read, so that memory
 * serves several rows at once. */
static inline __attribute__((always_inline)) void
prefetch_slice(const void *const *rows, int64_t i, int64_t n_rows, size_t off, int32_t bytes)
{
    if (i < n_rows)
        prefetch_span(rows[i], off, off + (size_t)bytes);
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

/* part[h][jj + k] (h < NH <= ROW_HEADS, k < NK <= SCORE_KEYS, NH * NK <= 16) = the 16-lane
 * partial dot product of query q[h] with the key slice rows[k]: q_0 k_0, then fused
 * multiply-adds of vectors 1 .. nvec - 1 in order. The NH x NK chains are interleaved, so
 * that the processor overlaps their latencies, and each vector of a query or a key is
 * loaded once for all of them. */
static inline __attribute__((always_inline)) void
dot_block(__m512 (*part)[LANES], int jj, const float *const *q, int NH, int NK,
          const void *const *rows, uint32_t kv_type, int32_t nvec)
{
    __m512 acc[ROW_HEADS][SCORE_KEYS];
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            acc[h][k] = _mm512_mul_ps(_mm512_loadu_ps(q[h]), load_vec(rows[k], 0, kv_type));
    for (int32_t v = 1; v < nvec; v++) {
        __m512 key[SCORE_KEYS];
        for (int k = 0; k < NK; k++)
            key[k] = load_vec(rows[k], v, kv_type);
        for (int h = 0; h < NH; h++) {
            __m512 qv = _mm512_loadu_ps(q[h] + v * LANES);
            for (int k = 0; k < NK; k++)
                acc[h][k] = _mm512_fmadd_ps(qv, key[k], acc[h][k]);
        }
    }
    for (int h = 0; h < NH; h++)
        for (int k = 0; k < NK; k++)
            part[h][jj + k] = acc[h][k];
}

/* dot_block for the nh heads q[0 .. nh) (which read the same slice) and NK keys, two
 * heads at a time. */
static inline __attribute__((always_inline)) void
dot_heads(__m512 (*part)[LANES], int jj, const float *const *q, int32_t nh, int NK,
          const void *const *rows, uint32_t kv_type, int32_t nvec)
{
    int32_t h = 0;
    for (; h + 2 <= nh; h += 2)
        dot_block(part + h, jj, q + h, 2, NK, rows, kv_type, nvec);
    if (h < nh)
        dot_block(part + h, jj, q + h, 1, NK, rows, kv_type, nvec);
}

/* How many keys dot_keys takes at jj of the m in a group of 16: SCORE_KEYS, or one when
 * fewer are left. */
static inline int keys_at(int jj, int m)
{
    return m - jj < SCORE_KEYS ? 1 : SCORE_KEYS;
}

/* dot_heads for the nk (keys_at) keys at jj of the 16 at j0, keys[c0 + j0 + jj + k]. */
static inline __attribute__((always_inline)) void
dot_keys(__m512 (*part)[LANES], int jj, int nk, const float *const *q, int32_t nh,
         const void *const *keys, int64_t c0, int j0, uint32_t kv_type, int32_t nvec)
{
    const void *slice[SCORE_KEYS];
    for (int k = 0; k < nk; k++)
        slice[k] = keys[c0 + j0 + jj + k];
    if (nk == SCORE_KEYS)
        dot_heads(part, jj, q, nh, SCORE_KEYS, slice, kv_type, nvec);
    else
        dot_heads(part, jj, q, nh, 1, slice, kv_type, nvec);
}

/* scores[h_first + i][j0 ..] = scale * the lane sums of part[i] (i < nh), for the heads
 * that have keys in the 16 at j0 (m of them in the chunk); a head's partials from its
 * n[h]th key on are replaced by zeros first. */
static inline __attribute__((always_inline)) void
store_scores(float (*scores)[GRAFT_ATTN_CHUNK], __m512 (*part)[LANES], int32_t h_first,
             int32_t nh, const int *n, int j0, int m, __m512 vscale)
{
    for (int32_t i = 0; i < nh; i++) {
        const int32_t h = h_first + i;
        if (j0 >= n[h])
            continue;
        for (int jj = n[h] - j0 < m ? n[h] - j0 : m; jj < LANES; jj++)
            part[i][jj] = _mm512_setzero_ps();
        _mm512_storeu_ps(scores[h] + j0, _mm512_mul_ps(sum_lanes16(part[i]), vscale));
    }
}

/* scores[h][j] = scale * q[h] . k_j for the n[h] keys head h has in the chunk at c0 (n[h] <=
 * GRAFT_ATTN_CHUNK), k_j being keys[c0 + j] (the one-call form: every head reads the rows
 * as listed); n_max is the largest n[h]. A head's entries from n[h] up to the next multiple
 * of 16 are left as computed from zero partials. Per 16 keys, SCORE_HEADS heads at a time
 * over them, so that their partial sums stay in L1 (up to 32 heads read one slice),
 * SCORE_KEYS keys at a time (dot_keys, keys_at). */
static inline __attribute__((always_inline)) void
chunk_scores(float (*scores)[GRAFT_ATTN_CHUNK], const float *const *q, const int *n,
             int n_max, int32_t n_heads, const void *const *keys, int64_t c0, uint32_t kv_type,
             int32_t nvec, float scale)
{
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < n_max; j0 += LANES) {
        const int m = n_max - j0 < LANES ? n_max - j0 : LANES;
        for (int32_t hb = 0; hb < n_heads; hb += SCORE_HEADS) {
            const int32_t nh = n_heads - hb < SCORE_HEADS ? n_heads - hb : SCORE_HEADS;
            __m512 part[SCORE_HEADS][LANES];
            for (int jj = 0; jj < m; jj += keys_at(jj, m))
                dot_keys(part, jj, keys_at(jj, m), q + hb, nh, keys, c0, j0, kv_type, nvec);
            store_scores(scores, part, hb, nh, n, j0, m, vscale);
        }
    }
}

/* The chunk form's scores: scores[h][j] = scale * q[h] . k_j for the n_keys keys of the
 * chunk (n[h] = n_keys for every head), k_j being keys[j] + off[h] bytes, the same bits
 * as chunk_scores gives (the same dot_block and store_scores, one key at a time). The heads read
 * the bytes [lo, hi) of each row, off[0] first. The rows are read one after another, each
 * for every head, so the memory is read in address order; each row asks for those bytes
 * of the row ROW_AHEAD rows on, and for the first slice of its own value row (the first
 * that the values read). */
static inline __attribute__((always_inline)) void
row_scores(float (*scores)[GRAFT_ATTN_CHUNK], const float *const *q, const int *n,
           int32_t n_heads, int n_keys, const void *const *keys, const void *const *values,
           const size_t *off, size_t lo, size_t hi, uint32_t kv_type, int32_t nvec, float scale)
{
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < n_keys; j0 += LANES) {
        const int m = n_keys - j0 < LANES ? n_keys - j0 : LANES;
        __m512 part[GRAFT_ATTN_MAX_HEADS][LANES]; // (heads, 16 keys) partial dot products
        for (int jj = 0; jj < m; jj++) {
            const int j = j0 + jj;
            if (j + ROW_AHEAD < n_keys)
                prefetch_span(keys[j + ROW_AHEAD], lo, hi);
            prefetch_span(values[j], off[0], off[0] + (size_t)slice_bytes(kv_type, nvec));
            for (int32_t h0 = 0, h1; h0 < n_heads; h0 = h1) { /* heads reading one slice */
                for (h1 = h0 + 1; h1 < n_heads && off[h1] == off[h0]; h1++)
                    ;
                const void *row[1] = {(const char *)keys[j] + off[h0]};
                int32_t h = h0;
                for (; h + ROW_HEADS <= h1; h += ROW_HEADS)
                    dot_block(part + h, jj, q + h, ROW_HEADS, 1, row, kv_type, nvec);
                for (; h + 2 <= h1; h += 2)
                    dot_block(part + h, jj, q + h, 2, 1, row, kv_type, nvec);
                if (h < h1)
                    dot_block(part + h, jj, q + h, 1, 1, row, kv_type, nvec);
            }
        }
        store_scores(scores, part, 0, n_heads, n, j0, m, vscale);
    }
}

static inline void scale_row(float *x, int32_t nvec, float factor)
{
    __m512 f = _mm512_set1_ps(factor);
    for (int32_t v = 0; v < nvec; v++)
        _mm512_storeu_ps(x + v * LANES, _mm512_mul_ps(_mm512_loadu_ps(x + v * LANES), f));
}

/* One head's chunk: its n scores s become the weights p = exp(s - m), m the chunk's
 * maximum; returns m, and the sum of the weights in *sum. */
static inline float chunk_softmax(float *s, int n, float *sum)
{
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += LANES) {
        __mmask16 live = (__mmask16)(n - j >= LANES ? 0xffff : (1u << (n - j)) - 1);
        vmax = _mm512_mask_max_ps(vmax, live, vmax, _mm512_loadu_ps(s + j));
    }
    const float chunk_max = _mm512_reduce_max_ps(vmax);
    __m512 vm = _mm512_set1_ps(chunk_max), vsum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += LANES) {
        __mmask16 live = (__mmask16)(n - j >= LANES ? 0xffff : (1u << (n - j)) - 1);
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(s + j), vm);
        __m512 e = _mm512_maskz_mov_ps(live, graft__exp_ps(d));
        _mm512_storeu_ps(s + j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    *sum = _mm512_reduce_add_ps(vsum);
    return chunk_max;
}

/* Merging a chunk into the running maxima M and sums L of heads [0, n_heads) (those with
 * n[h] > 0 only, where n is given): head h's chunk has maximum max[h] and weight sum
 * sum[h]; a[h] and b[h] become the factors by which what the head has so far (0 before its
 * first chunk) and the chunk's weighted values are scaled, and M[h], L[h] the merged ones.
 * 16 heads at a time, lane by lane, so a head's factors do not depend on its neighbours. */
static inline void merge_factors(const float *max, const float *sum, const int *n,
                                 int32_t n_heads, float *M, float *L, float *a, float *b)
{
    for (int32_t h = 0; h < n_heads; h += LANES) {
        __mmask16 live = (__mmask16)(n_heads - h >= LANES ? 0xffff : (1u << (n_heads - h)) - 1);
        if (n != NULL)
            live &= _mm512_mask_cmpgt_epi32_mask(live, _mm512_maskz_loadu_epi32(live, n + h),
                                                 _mm512_setzero_si512());
        const __m512 m = _mm512_maskz_loadu_ps(live, max + h);
        const __m512 l = _mm512_maskz_loadu_ps(live, sum + h);
        const __m512 so_far = _mm512_maskz_loadu_ps(live, M + h);
        const __m512 total = _mm512_maskz_loadu_ps(live, L + h);
        const __m512 merged = _mm512_max_ps(m, so_far);
        const __mmask16 started =
            _mm512_cmp_ps_mask(so_far, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        const __m512 va =
            _mm512_maskz_mov_ps(started, graft__exp_ps(_mm512_sub_ps(so_far, merged)));
        const __m512 vb = graft__exp_ps(_mm512_sub_ps(m, merged));
        _mm512_mask_storeu_ps(a + h, live, va);
        _mm512_mask_storeu_ps(b + h, live, vb);
        _mm512_mask_storeu_ps(L + h, live,
                              _mm512_add_ps(_mm512_mul_ps(total, va), _mm512_mul_ps(l, vb)));
        _mm512_mask_storeu_ps(M + h, live, merged);
    }
}

/* A vector of a head's output after merging a chunk: so_far * a + chunk * b. */
static inline __m512 merge_vec(__m512 so_far, __m512 chunk, __m512 a, __m512 b)
{
    return _mm512_add_ps(_mm512_mul_ps(so_far, a), _mm512_mul_ps(chunk, b));
}

/* The chunk's weighted values sum_j p[h][j] v_j over head h's n[h] keys of the chunk at c0
 * (from zero, in key order), v_j being values[c0 + j] + off bytes, for heads [h0, h0 + nh)
 * and vectors [v0, v0 + nv) of each row, nh * nv <= ACC_VECTORS; stored into out[h] as they
 * are (raw), or merged into it with the factors a[h], b[h] (merge_vec). Heads without keys
 * in the chunk are left alone. The block that reads a slice first (first_block) asks for
 * what is read next: in the one-call form the slice PREFETCH_AHEAD rows on, in the chunk
 * form (raw) the next slice of the same row, at next_off (NO_SLICE: none), a whole pass
 * over the chunk's rows ahead (in time, 8 rows of one slice are too few). raw is the chunk
 * form's, where every head has all the chunk's keys, so no key is checked against n[h]
 * (a test per key the chunk form does not need). */
static inline __attribute__((always_inline)) void
chunk_values(float *const *out, float (*p)[GRAFT_ATTN_CHUNK], const int *n, int32_t h0,
             int32_t nh, int32_t v0, int32_t nv, const void *const *values, size_t off,
             int64_t c0, int64_t n_keys, uint32_t kv_type, int32_t nvec, bool first_block,
             size_t next_off, bool raw, const float *a, const float *b)
{
    int n_max = 0;
    for (int32_t h = 0; h < nh; h++)
        n_max = n[h0 + h] > n_max ? n[h0 + h] : n_max;
    __m512 acc[ACC_VECTORS];
    for (int32_t i = 0; i < nh * nv; i++)
        acc[i] = _mm512_setzero_ps();
    for (int j = 0; j < n_max; j++) {
        const char *row = (const char *)values[c0 + j] + off;
        if (first_block && raw && next_off != NO_SLICE)
            prefetch_span(values[c0 + j], next_off,
                          next_off + (size_t)slice_bytes(kv_type, nvec));
        else if (first_block && !raw)
            prefetch_slice(values, c0 + j + PREFETCH_AHEAD, n_keys, off,
                           slice_bytes(kv_type, nvec));
        for (int32_t v = 0; v < nv; v++) {
            __m512 x = load_vec(row, v0 + v, kv_type);
            for (int32_t h = 0; h < nh; h++)
                if (raw || j < n[h0 + h])
                    acc[h * nv + v] =
                        _mm512_fmadd_ps(_mm512_set1_ps(p[h0 + h][j]), x, acc[h * nv + v]);
        }
    }
    for (int32_t h = 0; h < nh; h++) {
        if (n[h0 + h] == 0)
            continue;
        float *o = out[h0 + h] + v0 * LANES;
        const __m512 va = _mm512_set1_ps(raw ? 0.0f : a[h0 + h]);
        const __m512 vb = _mm512_set1_ps(raw ? 0.0f : b[h0 + h]);
        for (int32_t v = 0; v < nv; v++)
            _mm512_storeu_ps(o + v * LANES,
                             raw ? acc[h * nv + v]
                                 : merge_vec(_mm512_loadu_ps(o + v * LANES), acc[h * nv + v],
                                             va, vb));
    }
}

/* chunk_values for every head, head h reading its slice at off[h]: per run of heads that
 * read one slice, as many heads at a time as their accumulators fit in ACC_VECTORS
 * registers, so each slice of the chunk's rows is read once per such block. */
static inline __attribute__((always_inline)) void
chunk_values_all(float *const *out, float (*p)[GRAFT_ATTN_CHUNK], const int *n,
                 int32_t n_heads, const void *const *values, const size_t *off, int64_t c0,
                 int64_t n_keys, uint32_t kv_type, int32_t nvec, bool raw, const float *a,
                 const float *b)
{
    const int32_t heads_at_once = nvec <= ACC_VECTORS ? ACC_VECTORS / nvec : 1;
    for (int32_t h0 = 0, h1; h0 < n_heads; h0 = h1) { /* heads reading one slice */
        for (h1 = h0 + 1; h1 < n_heads && off[h1] == off[h0]; h1++)
            ;
        for (int32_t hb = h0; hb < h1; hb += heads_at_once) {
            const int32_t nh = h1 - hb < heads_at_once ? h1 - hb : heads_at_once;
            for (int32_t v0 = 0; v0 < nvec; v0 += ACC_VECTORS) {
                const int32_t nv = nvec - v0 < ACC_VECTORS ? nvec - v0 : ACC_VECTORS;
                const bool first_block = hb == h0 && v0 == 0;
                const size_t next_off = h1 < n_heads ? off[h1] : NO_SLICE;
                /* A whole block with constant sizes keeps its accumulators in registers. */
                if (nh == heads_at_once && nv == nvec)
                    chunk_values(out, p, n, hb, heads_at_once, 0, nvec, values, off[h0], c0,
                                 n_keys, kv_type, nvec, first_block, next_off, raw, a, b);
                else
                    chunk_values(out, p, n, hb, nh, v0, nv, values, off[h0], c0, n_keys,
                                 kv_type, nvec, first_block, next_off, raw, a, b);
            }
        }
    }
}

/* wide (n, nvec * 16) = the F16 rows src[0 .. n) widened to f32, rows[j] = row j of wide;
 * asks for the rows of the next chunk (of the n_left rows from src on) as it goes. */
static inline __attribute__((always_inline)) void
widen_rows(float *wide, const void **rows, const void *const *src, int n, int64_t n_left,
           int32_t nvec)
{
    for (int j = 0; j < n; j++) {
        if (GRAFT_ATTN_CHUNK + j < n_left)
            prefetch_span(src[GRAFT_ATTN_CHUNK + j], 0, (size_t)slice_bytes(GRAFT_TYPE_F16, nvec));
        float *dst = wide + (size_t)j * (size_t)nvec * LANES;
        for (int32_t v = 0; v < nvec; v++)
            _mm512_storeu_ps(dst + v * LANES, load_vec(src[j], v, GRAFT_TYPE_F16));
        rows[j] = dst;
    }
}

/* The one-call form for one (kv_type, nvec), constants in the instances below: head h
 * attends with query q[h] over keys [0, n_keys[h]) as listed, into out[h], each chunk's
 * weighted values merged into out[h] as soon as they are computed. */
static inline __attribute__((always_inline)) void
heads_body(float *const *out, const float *const *q, const int64_t *n_keys, int32_t n_heads,
           const void *const *keys, const void *const *values, uint32_t kv_type, int32_t nvec,
           float scale)
{
    const size_t off[GRAFT_ATTN_MAX_HEADS] = {0};
    float scores[GRAFT_ATTN_MAX_HEADS][GRAFT_ATTN_CHUNK]; // (heads, chunk keys); then p
    float running_max[GRAFT_ATTN_MAX_HEADS], running_sum[GRAFT_ATTN_MAX_HEADS];
    float max[GRAFT_ATTN_MAX_HEADS], sum[GRAFT_ATTN_MAX_HEADS]; // of each head's chunk
    float a[GRAFT_ATTN_MAX_HEADS], b[GRAFT_ATTN_MAX_HEADS]; // merge factors of a chunk
    int n[GRAFT_ATTN_MAX_HEADS]; // keys of each head in the current chunk
    /* F16 rows widened once per chunk for a tile of many heads (exact, so the same bits) */
    const bool widen = kv_type == GRAFT_TYPE_F16 && n_heads >= WIDEN_HEADS &&
                       nvec * LANES <= WIDEN_MAX_DIM;
    float wide[GRAFT_ATTN_CHUNK * WIDEN_MAX_DIM]; // (chunk keys, head_dim) widened rows
    const void *rows[GRAFT_ATTN_CHUNK];          // the rows of wide
    int64_t most = 0;
    for (int32_t h = 0; h < n_heads; h++) {
        memset(out[h], 0, (size_t)nvec * LANES * sizeof(float));
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
        most = n_keys[h] > most ? n_keys[h] : most;
    }
    for (int64_t c0 = 0; c0 < most; c0 += GRAFT_ATTN_CHUNK) {
        int n_max = 0;
        for (int32_t h = 0; h < n_heads; h++) {
            int64_t left = n_keys[h] - c0;
            n[h] = left <= 0 ? 0 : left < GRAFT_ATTN_CHUNK ? (int)left : GRAFT_ATTN_CHUNK;
            n_max = n[h] > n_max ? n[h] : n_max;
        }
        if (widen) {
            widen_rows(wide, rows, keys + c0, n_max, most - c0, nvec);
            chunk_scores(scores, q, n, n_max, n_heads, rows, 0, GRAFT_TYPE_F32, nvec, scale);
        } else {
            chunk_scores(scores, q, n, n_max, n_heads, keys, c0, kv_type, nvec, scale);
        }
        for (int32_t h = 0; h < n_heads; h++)
            if (n[h] > 0)
                max[h] = chunk_softmax(scores[h], n[h], &sum[h]);
        merge_factors(max, sum, n, n_heads, running_max, running_sum, a, b);
        if (widen) {
            widen_rows(wide, rows, values + c0, n_max, most - c0, nvec);
            chunk_values_all(out, scores, n, n_heads, rows, off, 0, n_max, GRAFT_TYPE_F32,
                             nvec, false, a, b);
        } else {
            chunk_values_all(out, scores, n, n_heads, values, off, c0, most, kv_type, nvec,
                             false, a, b);
        }
    }
    for (int32_t h = 0; h < n_heads; h++)
        if (running_sum[h] > 0.0f)
            scale_row(out[h], nvec, 1.0f / running_sum[h]);
}

/* The chunk form: one chunk of n_keys keys (at most GRAFT_ATTN_CHUNK), head h reading its
 * slice at column col[h] of whole rows; out[h] = its weighted values, max[h] and sum[h] its
 * maximum and weight sum (graft__attend_chunk_avx512). */
static inline __attribute__((always_inline)) void
chunk_body(float *const *out, float *max, float *sum, const float *const *q,
           const int32_t *col, int32_t n_heads, int32_t n_keys, const void *const *keys,
           const void *const *values, uint32_t kv_type, int32_t nvec, float scale)
{
    float scores[GRAFT_ATTN_MAX_HEADS][GRAFT_ATTN_CHUNK]; // (heads, chunk keys); then p
    size_t off[GRAFT_ATTN_MAX_HEADS];
    int n[GRAFT_ATTN_MAX_HEADS];
    if (n_heads == 0)
        return;
    size_t lo = (size_t)col[0] * (size_t)elem_bytes(kv_type), hi = lo;
    for (int32_t h = 0; h < n_heads; h++) {
        off[h] = (size_t)col[h] * (size_t)elem_bytes(kv_type);
        n[h] = n_keys;
        const size_t end = off[h] + (size_t)slice_bytes(kv_type, nvec);
        lo = off[h] < lo ? off[h] : lo;
        hi = end > hi ? end : hi;
    }
    row_scores(scores, q, n, n_heads, n_keys, keys, values, off, lo, hi, kv_type, nvec, scale);
    for (int32_t h = 0; h < n_heads; h++)
        max[h] = chunk_softmax(scores[h], n_keys, &sum[h]);
    chunk_values_all(out, scores, n, n_heads, values, off, 0, n_keys, kv_type, nvec, true,
                     NULL, NULL);
}

#define ATTEND_INSTANCE(name, KV_TYPE, NVEC)                                               \
    static void name(float *const *out, const float *const *q, const int64_t *n_keys,      \
                     int32_t n_heads, const void *const *keys, const void *const *values,  \
                     float scale)                                                          \
    {                                                                                      \
        heads_body(out, q, n_keys, n_heads, keys, values, KV_TYPE, NVEC, scale);          \
    }                                                                                      \
    static void name##_chunk(float *const *out, float *max, float *sum,                    \
                             const float *const *q, const int32_t *col, int32_t n_heads,   \
                             int32_t n_keys, const void *const *keys,                      \
                             const void *const *values, float scale)                       \
    {                                                                                      \
        chunk_body(out, max, sum, q, col, n_heads, n_keys, keys, values, KV_TYPE, NVEC,    \
                   scale);                                                                 \
    }
ATTEND_INSTANCE(attend_f16_64, GRAFT_TYPE_F16, 4)
ATTEND_INSTANCE(attend_f16_128, GRAFT_TYPE_F16, 8)
ATTEND_INSTANCE(attend_f16_256, GRAFT_TYPE_F16, 16)
ATTEND_INSTANCE(attend_f32_64, GRAFT_TYPE_F32, 4)
ATTEND_INSTANCE(attend_f32_128, GRAFT_TYPE_F32, 8)
ATTEND_INSTANCE(attend_f32_256, GRAFT_TYPE_F32, 16)

/* Whether the vectorised kernels take this head size (else the scalar reference does). */
static bool vectorised(int32_t head_dim)
{
    return head_dim % LANES == 0 && head_dim <= GRAFT_ATTN_MAX_HEAD_DIM;
}

void graft__attend_heads_avx512(float *const *out, const float *const *q,
                                const int64_t *n_keys, int32_t n_heads,
                                const void *const *keys, const void *const *values,
                                uint32_t kv_type, int32_t head_dim, float scale)
{
    GRAFT_ASSERT(n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    if (!vectorised(head_dim)) {
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
        heads_body(out, q, n_keys, n_heads, keys, values, kv_type, head_dim / LANES, scale);
    }
}

void graft__attend_chunk_avx512(float *const *out, float *max, float *sum,
                                const float *const *q, const int32_t *col, int32_t n_heads,
                                int32_t n_keys, const void *const *keys,
                                const void *const *values, uint32_t kv_type, int32_t head_dim,
                                float scale)
{
    GRAFT_ASSERT(n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS && vectorised(head_dim));
    GRAFT_ASSERT(n_keys >= 1 && n_keys <= GRAFT_ATTN_CHUNK);
    bool f16 = kv_type == GRAFT_TYPE_F16;
    switch (head_dim) {
    case 64:
        (f16 ? attend_f16_64_chunk : attend_f32_64_chunk)(out, max, sum, q, col, n_heads,
                                                          n_keys, keys, values, scale);
        return;
    case 128:
        (f16 ? attend_f16_128_chunk : attend_f32_128_chunk)(out, max, sum, q, col, n_heads,
                                                            n_keys, keys, values, scale);
        return;
    case 256:
        (f16 ? attend_f16_256_chunk : attend_f32_256_chunk)(out, max, sum, q, col, n_heads,
                                                            n_keys, keys, values, scale);
        return;
    default:
        chunk_body(out, max, sum, q, col, n_heads, n_keys, keys, values, kv_type,
                   head_dim / LANES, scale);
    }
}

void graft__attend_merge_avx512(float *out, const float *chunks, const float *max,
                                const float *sum, int32_t n_chunks, int32_t n_heads,
                                int32_t head_dim)
{
    GRAFT_ASSERT(vectorised(head_dim) && n_heads >= 0 && n_heads <= GRAFT_ATTN_MAX_HEADS);
    const int32_t nvec = head_dim / LANES;
    float running_max[GRAFT_ATTN_MAX_HEADS], running_sum[GRAFT_ATTN_MAX_HEADS];
    float a[GRAFT_ATTN_MAX_HEADS], b[GRAFT_ATTN_MAX_HEADS]; // a chunk's merge factors
    for (int32_t h = 0; h < n_heads; h++) {
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
    }
    memset(out, 0, (size_t)n_heads * (size_t)head_dim * sizeof(float));
    for (int32_t c = 0; c < n_chunks; c++) {
        const int64_t first = (int64_t)c * n_heads;
        merge_factors(max + first, sum + first, NULL, n_heads, running_max, running_sum, a, b);
        for (int32_t h = 0; h < n_heads; h++) {
            float *o = out + (int64_t)h * head_dim;
            const float *chunk = chunks + (first + h) * head_dim;
            const __m512 va = _mm512_set1_ps(a[h]), vb = _mm512_set1_ps(b[h]);
            for (int32_t v = 0; v < nvec; v++)
                _mm512_storeu_ps(o + v * LANES, merge_vec(_mm512_loadu_ps(o + v * LANES),
                                                          _mm512_loadu_ps(chunk + v * LANES),
                                                          va, vb));
        }
    }
    for (int32_t h = 0; h < n_heads; h++)
        if (running_sum[h] > 0.0f)
            scale_row(out + (int64_t)h * head_dim, nvec, 1.0f / running_sum[h]);
}

void graft__attend_avx512(float *out, const float *q, int32_t n_q, const void *const *keys,
                          const void *const *values, uint32_t kv_type, int64_t n_keys,
                          int32_t head_dim, float scale)
{
    graft__attend_as_heads(graft__attend_heads_avx512, out, q, n_q, keys, values, kv_type, n_keys,
                           head_dim, scale);
}
