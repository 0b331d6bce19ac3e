/*
 * matmul_avx512.h: what the files of the AVX-512 matmul path share (private to them; only
 * files compiled with AVX-512 enabled, *_avx512.c, may include it).
 *
 * The path is split by weight family:
 *   matmul_avx512.c         the graft__matmul_path object, the tiling driver, F32/F16/BF16
 *   matmul_q32_avx512.c     Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32)
 *   matmul_kquant_avx512.c  Q4_K, Q5_K, Q6_K (blocks of 256)
 *   matmul_r16_avx512.c     packed Q8_0 and Q4_0 (16 interleaved rows), with its own
 *                           driver
 *   matmul_r16_kquant_avx512.c  packed Q4_K, run by that driver
 *
 * Each family provides a kernel per type: how to prepare a token's activations, and tile
 * functions that compute `rows` weight rows times `toks` tokens at a time over the whole of
 * n_in, for a run of row steps. The driver (matmul_avx512.c) cuts the caller's [o0, o1)
 * into `segments` contiguous segments, and step k of a tile takes row k of each of `rows`
 * segments: so the weights are read as a few long sequential streams, which (with a
 * software prefetch running ahead) reach the memory bandwidth, where many short
 * interleaved streams get less than half of it.
 *
 * Batch invariance rests on one rule every tile function keeps: the output of (row,
 * token) goes through the same instructions whatever tile and step it sits in, a tile
 * being nothing but several independent (row, token) computations run side by side. So
 * tiles may differ in shape, and a segment one row shorter than the others repeats its
 * last row in the final step (the repeat is computed and dropped) rather than calling a
 * differently written kernel.
 */
#ifndef GRAFT_MATMUL_AVX512_H
#define GRAFT_MATMUL_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    GRAFT_AVX512_MAX_ROWS = 8,      /* most segments, and so rows a tile computes */
    GRAFT_AVX512_MAX_TOKS = 8,      /* most tokens a tile computes */
    GRAFT_AVX512_TILE_VARIANTS = 4, /* tile widths (token counts) per type */
};

/* What the tile functions compute: y for the segments of rows and `toks` tokens. */
typedef struct graft__avx512_job {
    const uint8_t *w0[GRAFT_AVX512_MAX_ROWS]; /* weight row of each segment's step 0 */
    int64_t len[GRAFT_AVX512_MAX_ROWS];       /* steps each segment has a row for (>= 0) */
    float *y0[GRAFT_AVX512_MAX_ROWS];         /* output of step 0, token 0 of each segment */
    size_t row_bytes;
    int64_t ldy; /* floats from one token's outputs to the next */
    const uint8_t *acts[GRAFT_AVX512_MAX_TOKS]; /* prepared activations of each token */
    int64_t n_in;
    int prefetch; /* whether the weights may still be in memory rather than in cache */
    /* Packed weights (kernels that pack): the rows of steps [packed_k0, ...) of every
     * segment, row (k, j) at packed + ((k - packed_k0) * segments + j) * packed_row_bytes. */
    const uint8_t *packed;
    int64_t packed_k0;
    size_t packed_row_bytes;
    int segments;
} graft__avx512_job;

/* Computes steps [k0, k1) of segments [seg, seg + rows) of job: for each step k, segment j
 * and token t, y0[j][t * ldy + k] = dot(weight row w0[j] + k * row_bytes, acts[t]) where
 * k < len[j]. */
typedef void (*graft__avx512_tile_fn)(const graft__avx512_job *job, int seg, int64_t k0,
                                      int64_t k1);

typedef struct graft__avx512_tile {
    int toks, rows; /* rows divides the kernel's segments */
    graft__avx512_tile_fn fn;
} graft__avx512_tile;

typedef struct graft__avx512_kernel {
    /* Bytes of one token's prepared activations (a multiple of 64). */
    size_t (*act_bytes)(int64_t n_in);
    /* xa (act_bytes) = x (n_in) prepared for weights of `type`. */
    void (*act_prepare)(uint32_t type, void *xa, const float *x, int64_t n_in);
    int segments; /* how many segments the rows are cut into (<= GRAFT_AVX512_MAX_ROWS) */
    /* Tile widths, toks strictly decreasing, the last one with toks == 1. */
    graft__avx512_tile tiles[GRAFT_AVX512_TILE_VARIANTS];
    /* Kernels whose weights take work to unpack may also offer packing: the driver unpacks
     * a few rows once into a buffer (pack: steps [k0, k1) of every segment of job into dst,
     * packed_row_bytes(n_in) per row, a multiple of 64) and runs packed_tiles over it for
     * all the tokens of a panel. A packed tile computes exactly what the same shape of
     * tile computes from the rows themselves: packing only moves the unpacking out of the
     * loop over tokens. NULL pack: no packing. */
    size_t (*packed_row_bytes)(int64_t n_in);
    void (*pack)(const graft__avx512_job *job, int64_t k0, int64_t k1, uint8_t *dst);
    graft__avx512_tile packed_tiles[GRAFT_AVX512_TILE_VARIANTS];
} graft__avx512_kernel;

/* The kernel of a 32-element block type, a K-quant type; NULL for other types. */
const graft__avx512_kernel *graft__avx512_kernel_q32(uint32_t type);
const graft__avx512_kernel *graft__avx512_kernel_kquant(uint32_t type);

/* Packed weights (matmul_r16_avx512.c): Q8_0, Q4_0 and Q4_K in row blocks of
 * GRAFT_R16_ROWS interleaved rows, one driver over the tiles each packed type provides. A
 * tile computes every output of its row blocks (indexes rbs) for the call's tokens; stream
 * tiles prefetch their weights GRAFT_R16_AHEAD_BYTES ahead, cached ones find them in
 * cache. [T - 1] holds the tile for T tokens. */
enum {
    GRAFT_R16_ROWS = 16,
    GRAFT_R16_MAX_SEGMENTS = 4, /* the most row blocks of a stream_all tile */
    GRAFT_R16_MAX_T = 4,
    GRAFT_R16_AHEAD_BYTES = 2048
};

typedef struct graft__r16_call {
    const uint8_t *w;   /* the packed matrix */
    size_t rbb;         /* bytes per row block */
    int64_t n_in;
    float *y;
    int64_t ldy;
    const uint8_t *acts[GRAFT_R16_MAX_T]; /* prepared activations of the tile's tokens */
    float *ys[GRAFT_R16_MAX_T];           /* their output rows */
} graft__r16_call;

typedef void (*graft__r16_tile_fn)(const graft__r16_call *c, const int64_t *rbs);

typedef struct graft__r16_kernel {
    int segments; /* weight streams a call reads side by side (<= GRAFT_R16_MAX_SEGMENTS) */
    size_t (*row_block_bytes)(int64_t n_in);
    size_t (*act_bytes)(int64_t n_in);
    graft__r16_tile_fn stream_all[GRAFT_R16_MAX_T]; /* `segments` row blocks */
    graft__r16_tile_fn stream_one[GRAFT_R16_MAX_T];
    graft__r16_tile_fn cached_two[GRAFT_R16_MAX_T];
    graft__r16_tile_fn cached_one[GRAFT_R16_MAX_T];
} graft__r16_kernel;

/* The path's packed_type, packed_bytes and pack (matmul_path.h; dst 64-byte aligned), and
 * act_bytes, act_prepare and gemm for the packed types. */
uint32_t graft__avx512_r16_packed_type(uint32_t type, int64_t n_in, int64_t n_out);
size_t graft__avx512_r16_packed_bytes(uint32_t ptype, int64_t n_in, int64_t n_out);
void graft__avx512_r16_pack(uint32_t ptype, void *dst, const void *w, int64_t n_in,
                            int64_t n_out);
size_t graft__avx512_r16_act_bytes(uint32_t ptype, int64_t n_in);
void graft__avx512_r16_act_prepare(uint32_t ptype, void *xa, const float *x, int64_t n_in);
void graft__avx512_r16_gemm(uint32_t ptype, float *y, int64_t ldy, const void *w, int64_t n_in,
                            int64_t o0, int64_t o1, const void *xa, int64_t n_tok);

/* Packed Q4_K (matmul_r16_kquant_avx512.c): its tiles, pack and activations. The packed
 * types' activations and the start and end of their tiles are at the end of this file. */
extern const graft__r16_kernel graft__r16_q4_k_kernel;
void graft__r16_q4_k_pack(void *dst, const void *w, int64_t n_in, int64_t n_out);
void graft__r16_q4_k_act_prepare(void *xa, const float *x, int64_t n_in);

/* Put before the loops over a tile's rows and tokens: they must be unrolled completely, so
 * that each (row, token) accumulator is a register of its own. */
#if defined(__clang__)
#define GRAFT_AVX512_UNROLL _Pragma("clang loop unroll(full)")
#else
#define GRAFT_AVX512_UNROLL _Pragma("GCC unroll 16")
#endif

/* Defines `name`, a tile (graft__avx512_tile.run) of R rows x T tokens that hands its
 * accumulators to TILE_FN(TYPE, R, T, FROM, acc, job, seg, k0, k1): FROM is PREFETCHING on
 * jobs that prefetch (graft__avx512_job.prefetch) and PLAIN on the others, each a constant
 * so that the branch is compiled out of the loops. */
#define GRAFT_AVX512_DEFINE_TILE(name, TILE_FN, TYPE, R, T, PREFETCHING, PLAIN)           \
    static void name(const graft__avx512_job *job, int seg, int64_t k0, int64_t k1)        \
    {                                                                                      \
        __m512 acc[R * T];                                                                 \
        if (job->prefetch)                                                                 \
            TILE_FN(TYPE, R, T, PREFETCHING, acc, job, seg, k0, k1);                       \
        else                                                                               \
            TILE_FN(TYPE, R, T, PLAIN, acc, job, seg, k0, k1);                             \
    }

/* The sum of the 16 lanes of v, always added in the same order (halves folded onto each
 * other: 16 -> 8 -> 4 -> 2 -> 1). Every tile ends each (row, token) with this. */
static inline float graft__avx512_hsum(__m512 v)
{
    __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
    __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    __m128 v1 = _mm_add_ss(v2, _mm_movehdup_ps(v2));
    return _mm_cvtss_f32(v1);
}

/* The 64 bytes at p, in a register the compiler cannot reload from p. Use it for weights
 * that feed several instructions: the compiler otherwise prefers loading them again for
 * each use (vpermt2w overwrites its first table; vpsrlw and vpand each take a memory
 * operand), and unaligned weight loads are what these kernels run short of first. */
static inline __m512i graft__avx512_load_kept(const uint8_t *p)
{
    __m512i z = _mm512_loadu_si512(p);
    __asm__("" : "+v"(z));
    return z;
}

/* How far ahead of its use each weight row is prefetched: the hardware prefetchers alone
 * reach about half the memory bandwidth while the kernels compute between loads. Only the
 * first token tile over a block of rows prefetches (graft__avx512_job.prefetch): later
 * tiles find the block's weights in L2, and prefetching for them only pushes their
 * activations out of L1. */
#define GRAFT_AVX512_PREFETCH_BYTES 2048

/* Prefetches the cache lines of p + GRAFT_AVX512_PREFETCH_BYTES + [0, len): call once per
 * piece of a row (len > 0) as it is used, so the prefetches run ahead through the row. */
static inline __attribute__((always_inline)) void graft__avx512_prefetch(const uint8_t *p,
                                                                         size_t len)
{
    const char *ahead = (const char *)p + GRAFT_AVX512_PREFETCH_BYTES;
    for (size_t b = 0; b + 64 < len; b += 64)
        _mm_prefetch(ahead + b, _MM_HINT_T0);
    _mm_prefetch(ahead + len - 1, _MM_HINT_T0);
}

/* The weight row of step k of segment j: row k of the segment, or its last row (any valid
 * row for an empty segment) once it has run out. */
static inline const uint8_t *graft__avx512_step_row(const graft__avx512_job *job, int j,
                                                    int64_t k)
{
    int64_t len = job->len[j], last = len > 0 ? len - 1 : 0;
    return job->w0[j] + (size_t)(k < last ? k : last) * job->row_bytes;
}

/* rows (R) = the weight rows of step k of segments seg..seg+R-1. */
static inline __attribute__((always_inline)) void
graft__avx512_step_rows(const graft__avx512_job *job, int seg, int R, int64_t k,
                        const uint8_t **rows)
{
    GRAFT_AVX512_UNROLL
    for (int j = 0; j < R; j++)
        rows[j] = graft__avx512_step_row(job, seg + j, k);
}

/* rows (R) = the packed rows of step k of segments seg..seg+R-1. */
static inline __attribute__((always_inline)) void
graft__avx512_packed_rows(const graft__avx512_job *job, int seg, int R, int64_t k,
                          const uint8_t **rows)
{
    GRAFT_AVX512_UNROLL
    for (int j = 0; j < R; j++)
        rows[j] = job->packed + (size_t)((k - job->packed_k0) * job->segments + seg + j) *
                                    job->packed_row_bytes;
}

/* Ends step k: sums the lanes of each accumulator acc (R, T) with graft__avx512_hsum and
 * stores the results for the segments seg..seg+R-1 that have a row there. */
static inline __attribute__((always_inline)) void
graft__avx512_finish(const graft__avx512_job *job, int seg, int R, int T, int64_t k,
                     const __m512 *acc)
{
    GRAFT_AVX512_UNROLL
    for (int j = 0; j < R; j++) {
        if (k < job->len[seg + j]) {
            GRAFT_AVX512_UNROLL
            for (int t = 0; t < T; t++)
                job->y0[seg + j][t * job->ldy + k] = graft__avx512_hsum(acc[j * T + t]);
        }
    }
}

/* Quantizes the 32 floats at x as llama.cpp's Q8_0 does: *dx = max|x| / 127, quants
 * round(x / dx) in -127..127, the first 16 stored at lo and the last 16 at hi. Returns the
 * sum of the quants. */
static inline int graft__avx512_quantize32(const float *x, int8_t *lo, int8_t *hi, float *dx)
{
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, vid),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, vid),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)lo, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)hi, _mm512_cvtepi32_epi8(q1));
    *dx = amax / 127.0f;
    return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

/* Prepared activations of the packed types: quants (n_in, padded to 64 bytes), then per
 * block of 32 its scale dx (f32) and a 32-bit value of the type's own (Q8_0 and Q4_0: a
 * bias; Q4_K: dx times the sum of the quants), each array padded to 64 bytes. */
static inline size_t graft__r16_pad64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static inline size_t graft__r16_act_size(int64_t n_in)
{
    return graft__r16_pad64((size_t)n_in) + 2 * graft__r16_pad64((size_t)(n_in / 32) * 4);
}

/* The arrays of one token's prepared activations at xa. */
typedef struct graft__r16_acts {
    const int8_t *q;
    const float *dx;
    const void *extra; /* int32_t (Q8_0, Q4_0) or float (Q4_K) */
} graft__r16_acts;

static inline graft__r16_acts graft__r16_acts_at(const uint8_t *xa, int64_t n_in)
{
    size_t q_bytes = graft__r16_pad64((size_t)n_in);
    graft__r16_acts a = {(const int8_t *)xa, (const float *)(xa + q_bytes),
                         xa + q_bytes + graft__r16_pad64((size_t)(n_in / 32) * 4)};
    return a;
}

/* The start of a packed tile: acts[t] = the activations of its token t (t < T), rbw[r] =
 * the weights of row block rbs[r] (r < RB), and the RB * T accumulators zeroed. */
static inline __attribute__((always_inline)) void
graft__r16_tile_begin(const graft__r16_call *c, const int64_t *rbs, int RB, int T,
                      graft__r16_acts *acts, const uint8_t **rbw, __m512 *acc)
{
    GRAFT_AVX512_UNROLL
    for (int t = 0; t < T; t++)
        acts[t] = graft__r16_acts_at(c->acts[t], c->n_in);
    GRAFT_AVX512_UNROLL
    for (int r = 0; r < RB; r++)
        rbw[r] = c->w + (size_t)rbs[r] * c->rbb;
    GRAFT_AVX512_UNROLL
    for (int i = 0; i < RB * T; i++)
        acc[i] = _mm512_setzero_ps();
}

/* The end of a packed tile: accumulator r * T + t holds the 16 outputs of row block rbs[r]
 * for the tile's token t. */
static inline __attribute__((always_inline)) void
graft__r16_tile_end(const graft__r16_call *c, const int64_t *rbs, int RB, int T,
                    const __m512 *acc)
{
    GRAFT_AVX512_UNROLL
    for (int r = 0; r < RB; r++) {
        GRAFT_AVX512_UNROLL
        for (int t = 0; t < T; t++)
            _mm512_storeu_ps(c->ys[t] + rbs[r] * GRAFT_R16_ROWS, acc[r * T + t]);
    }
}

/* init + the 16 rows' integer dot products of a block of 32: W[k] (unsigned quants, lane r
 * = row r) with the token's signed quants q[4k..4k+3] broadcast, k = 0..7, in two chains
 * (k even, k odd) added at the end. */
static inline __attribute__((always_inline)) __m512i
graft__r16_block_sum(__m512i init, const __m512i *W, const int8_t *q)
{
    __m512i i0 = init, i1 = _mm512_setzero_si512();
    GRAFT_AVX512_UNROLL
    for (int k = 0; k < 8; k += 2) {
        int32_t a0, a1;
        memcpy(&a0, q + 4 * k, sizeof a0);
        memcpy(&a1, q + 4 * k + 4, sizeof a1);
        i0 = _mm512_dpbusd_epi32(i0, W[k], _mm512_set1_epi32(a0));
        i1 = _mm512_dpbusd_epi32(i1, W[k + 1], _mm512_set1_epi32(a1));
    }
    return _mm512_add_epi32(i0, i1);
}

#endif /* GRAFT_MATMUL_AVX512_H */
