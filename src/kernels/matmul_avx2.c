/*
 * matmul_avx2.c: the AVX2 + FMA + F16C matmul path (kernels/matmul_path.h) for every
 * supported weight type. Compiled with -mavx2 -mfma -mf16c; the caller selects it only
 * after CPUID reports those instructions.
 *
 * Activation schemes (act_prepare, one token at a time, so a token's prepared activations
 * never depend on the batch):
 *   - F32, F16, BF16 weights: activations stay f32; weights are widened to f32 in
 *     registers (F16C for f16, a 16-bit shift for bf16) and multiplied with FMAs.
 *   - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: activations quantized to int8 per block of 32
 *     (as llama.cpp's Q8_0), d = amax / 127, q = round-half-even(x * (127 / amax)).
 *   - Q4_K, Q5_K, Q6_K: the same per block of 256 (as llama.cpp's Q8_K), with the sums of
 *     each 16 quants that the mins of Q4_K/Q5_K and the offset of Q6_K need.
 * Integer dot products use vpmaddubsw (u8 x s8 -> pairs summed in s16) and vpmaddwd; the
 * sections below say how each family forms them. Scales are kept in f32 (not f16 as in
 * llama.cpp's blocks).
 *
 * The avxvnni path is this file compiled a second time with GRAFT_AVX_VNNI defined and
 * -mavxvnni (matmul_avxvnni.c), for CPUs with AVX-VNNI but no AVX-512 (Intel from Alder
 * Lake on). There vpdpbusd replaces vpmaddubsw + vpmaddwd (dot4_u8s8) and vpdpwssd a
 * vpmaddwd and its add (madd_add), and Q8_0 and IQ4_NL take their weights as w + 128
 * instead of |w| with the sign moved onto the activations. Every one of those integer sums
 * is exact on both paths and lands in the same lane, and the float operations are the
 * same, so the two paths give the same bits (test_matmul_avx2 checks it by memcmp).
 *
 * Packed weights (packed_type/pack): Q4_K, Q8_0 and Q4_0 matrices in groups of 8
 * interleaved rows, matmul_q4k_r8_avx2.c and matmul_q32_r8_avx2.c, computed in tiles of
 * one group through the same run_tiles.
 *
 * Tiling (run_tiles): outputs are computed in tiles of R rows x T tokens, T <= 6 (R is 4 for
 * one token, 2 for two, 1 above: measured best), over chunks of tokens whose activations
 * stay in L2 and blocks of ROW_BLOCK rows whose weights stay in L1 across the chunk. Each
 * tile prefetches the weights of the tiles after it (tile_prefetch), which decode needs to
 * overlap streaming with compute.
 *
 * Batch invariance (DESIGN.md invariant 1): every (row, token) pair owns one 8-lane f32
 * accumulator that goes through the same instructions in the same order whatever tile it is
 * computed in -- the tile only decides which pairs run side by side -- over the blocks in row
 * order, and is reduced at the end by graft__hsum8_ps's fixed tree (hsum_avx2.h). Ragged tiles
 * repeat their last row (computed, not stored) or use the instantiation for fewer tokens, never
 * a different algorithm. Integer partial sums are exact, so their grouping does not matter. A
 * tail group of fewer than 4 blocks is padded with zero weights and zero scales, the same for
 * every pair. The float operations are written as separate intrinsics, never as one a * b + c
 * expression, so no compiler contracts them differently in different tiles (GCC in ISO C mode
 * does not contract at all; clang only within one expression).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/hsum_avx2.h"
#include "kernels/kernels.h"
#include "kernels/matmul_avx2.h"
#include "kernels/matmul_path.h"
#include "kernels/quant_formats.h"
#include "util/util.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

#ifdef GRAFT_AVX_VNNI
enum { VNNI = 1 };
#else
enum { VNNI = 0 };
#endif

enum {
    GROUP = 4,      /* blocks folded into one accumulator update */
    RMAX = 4,       /* most rows in a tile */
    TMAX = 6,       /* tokens in a full tile */
    ROW_BLOCK = 16, /* rows whose weights are reused across a chunk of tokens */
    CHUNK_ACT_BYTES = 256 * 1024, /* activations of one token chunk (stays in L2) */
    PREFETCH_AHEAD = 4096 /* least distance of the weight prefetches (see tile_prefetch) */
};

/* ------------------------------------------------------------------------------------
 * Small helpers.
 */
static size_t round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

static uint16_t load_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------------------------------
 * Activation layouts.
 */
static bool is_float_type(uint32_t type)
{
    return type == GRAFT_TYPE_F32 || type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_BF16;
}

static bool is_kquant_type(uint32_t type)
{
    return type == GRAFT_TYPE_Q4_K || type == GRAFT_TYPE_Q5_K || type == GRAFT_TYPE_Q6_K;
}

/* The largest |x| of 32 floats. */
AVX2_INLINE float amax32(const float *x)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs_mask);
    for (int j = 1; j < 4; j++)
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + 8 * j), abs_mask));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The multiplier 127 / amax that maps a block onto -127..127, or 0 when amax is so small
 * (or NaN) that it would overflow; the block's scale is amax / 127 either way (so a NaN
 * still reaches the output). */
static float quant_multiplier(float amax)
{
    return amax > 0x1p-96f ? 127.0f / amax : 0.0f;
}

/* The sum of the 8 int32 lanes. */
AVX2_INLINE int32_t hsum8_epi32(__m256i s)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* q (32) = round-half-even(x (32) * id); half[0], half[1] = the sums of q[0..15] and
 * q[16..31]. */
AVX2_INLINE void quantize32(int8_t *q, const float *x, float id, int32_t half[2])
{
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i[4];
    for (int j = 0; j < 4; j++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), vid);
        i[j] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    /* packs work per 128-bit lane; the permute puts the 8 dwords back in element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    half[0] = hsum8_epi32(_mm256_add_epi32(i[0], i[1]));
    half[1] = hsum8_epi32(_mm256_add_epi32(i[2], i[3]));
}

/* acc + in each 32-bit lane the sum of the 4 products of unsigned bytes u and signed bytes
 * s in it. Without VNNI vpmaddubsw + vpmaddwd, which is the same wherever no two adjacent
 * products sum past int16 (so in every use here: |u| <= 128, |s| <= 127, or u <= 63). */
AVX2_INLINE __m256i dot4_u8s8(__m256i acc, __m256i u, __m256i s)
{
#ifdef GRAFT_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + vpmaddwd(a, b): pairs of int16 products summed into 32-bit lanes. */
AVX2_INLINE __m256i madd_add(__m256i acc, __m256i a, __m256i b)
{
#ifdef GRAFT_AVX_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* ------------------------------------------------------------------------------------
 * The tile loop shared by every type.
 */

/* Computes y[t * ldy + r] for t < nt and r < nr from weight rows w + r * row_bytes and the
 * prepared activations xa + t * act_bytes. Rows from nr up to the tile's R repeat row
 * nr - 1 and are not stored. */
typedef void (*tile_fn)(int nt, float *y, int64_t ldy, const uint8_t *w, size_t row_bytes,
                        int nr, const uint8_t *xa, size_t act_bytes, int64_t n_in);

typedef struct tiling {
    tile_fn run;
    int rows[TMAX + 1]; /* R of the tile for nt = 1..TMAX tokens */
} tiling;

typedef struct gemm_args {
    float *y;
    int64_t ldy;
    const uint8_t *w;
    size_t row_bytes;
    int64_t o0, o1;
    const uint8_t *xa;
    size_t act_bytes;
    int64_t n_tok, n_in;
} gemm_args;

/* The tiles of rows [r0, r1) for the tokens [t0, t1). */
static void run_row_block(const tiling *k, const gemm_args *a, int64_t r0, int64_t r1,
                          int64_t t0, int64_t t1)
{
    for (int64_t t = t0; t < t1; t += TMAX) {
        int nt = t1 - t < TMAX ? (int)(t1 - t) : TMAX;
        int rows = k->rows[nt];
        for (int64_t r = r0; r < r1; r += rows) {
            int nr = r1 - r < rows ? (int)(r1 - r) : rows;
            k->run(nt, a->y + t * a->ldy + r, a->ldy, a->w + (size_t)r * a->row_bytes,
                   a->row_bytes, nr, a->xa + (size_t)t * a->act_bytes, a->act_bytes, a->n_in);
        }
    }
}

/* Chunks of tokens whose activations stay in cache, blocks of rows reused across them. */
static void run_tiles(const tiling *k, const gemm_args *a)
{
    int64_t chunk = (int64_t)(CHUNK_ACT_BYTES / a->act_bytes) / TMAX * TMAX;
    if (chunk < TMAX)
        chunk = TMAX;
    for (int64_t t0 = 0; t0 < a->n_tok; t0 += chunk) {
        int64_t t1 = a->n_tok - t0 < chunk ? a->n_tok : t0 + chunk;
        for (int64_t r0 = a->o0; r0 < a->o1; r0 += ROW_BLOCK) {
            int64_t r1 = a->o1 - r0 < ROW_BLOCK ? a->o1 : r0 + ROW_BLOCK;
            run_row_block(k, a, r0, r1, t0, t1);
        }
    }
}

#define TILE_CASE(KERNEL, R, T)                                                            \
    case T:                                                                                \
        KERNEL(R, T, y, ldy, w, row_bytes, nr, xa, ab, n_in);                              \
        break;

/* Expands to the tile_fn NAME, which runs the always-inline KERNEL(R, T, ...) instantiated
 * for every token count T = 1..6 with R = R1..R6 rows, and to its tiling NAME_tiling. */
#define DEFINE_TILE(NAME, KERNEL, R1, R2, R3, R4, R5, R6)                                  \
    static void NAME(int nt, float *y, int64_t ldy, const uint8_t *w, size_t row_bytes,    \
                     int nr, const uint8_t *xa, size_t ab, int64_t n_in)                   \
    {                                                                                      \
        switch (nt) {                                                                      \
            TILE_CASE(KERNEL, R1, 1)                                                       \
            TILE_CASE(KERNEL, R2, 2)                                                       \
            TILE_CASE(KERNEL, R3, 3)                                                       \
            TILE_CASE(KERNEL, R4, 4)                                                       \
            TILE_CASE(KERNEL, R5, 5)                                                       \
            TILE_CASE(KERNEL, R6, 6)                                                       \
        }                                                                                  \
    }                                                                                      \
    static const tiling NAME##_tiling = {NAME, {0, R1, R2, R3, R4, R5, R6}};

/* wr (R) = the tile's row pointers; rows from nr on repeat row nr - 1. */
AVX2_INLINE void tile_rows(int R, const uint8_t *w, size_t row_bytes, int nr,
                           const uint8_t **wr)
{
    for (int r = 0; r < R; r++)
        wr[r] = w + (size_t)(r < nr ? r : nr - 1) * row_bytes;
}

/* y[t * ldy + r] = the sums of the tile's accumulators, for the nr real rows. */
AVX2_INLINE void store_tile(int R, int T, float *y, int64_t ldy, int nr,
                            __m256 acc[RMAX][TMAX])
{
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            if (r < nr)
                y[t * ldy + r] = graft__hsum8_ps(acc[r][t]);
}

/* How far ahead a tile of R rows prefetches its weights: the same offset in the rows a
 * whole number of tiles further on, at least PREFETCH_AHEAD bytes on. Tiles sweep w in
 * order, so these are the bytes the tiles after this one read; a distance inside the row
 * serves long rows worse (measured), and short rows end before the prefetch pays off. */
AVX2_INLINE size_t tile_prefetch(int R, size_t row_bytes)
{
    size_t tile = (size_t)R * row_bytes, ahead = tile;
    while (ahead < PREFETCH_AHEAD) /* no division: this runs once per tile */
        ahead += tile;
    return ahead;
}

/* The start of a tile of R rows and T tokens: each row's weights (wr), each token's
 * activations (xt), the accumulators zeroed; returns how far ahead the rows prefetch. */
AVX2_INLINE size_t tile_begin(int R, int T, const uint8_t *w, size_t row_bytes, int nr,
                              const uint8_t *xa, size_t ab, const uint8_t **wr,
                              const uint8_t **xt, __m256 acc[RMAX][TMAX])
{
    tile_rows(R, w, row_bytes, nr, wr);
    for (int t = 0; t < T; t++)
        xt[t] = xa + (size_t)t * ab;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    return tile_prefetch(R, row_bytes);
}

/* Prefetches the n bytes at p + ahead (an address computed as an integer: it may lie past
 * the end of w, which prefetching tolerates). */
AVX2_INLINE void prefetch_ahead(const uint8_t *p, size_t ahead, int n)
{
    for (int i = 0; i < n; i += 64)
        _mm_prefetch((const char *)((uintptr_t)p + ahead + (uintptr_t)i), _MM_HINT_T0);
}

/* ------------------------------------------------------------------------------------
 * F32, F16 and BF16 weights: f32 FMAs over 8 elements at a time.
 */
enum float_kind { KIND_F32, KIND_F16, KIND_BF16 };

/* 8 weights at element i of row w widened to f32; n < 8 reads only n (the rest are 0). */
AVX2_INLINE __m256 load_w8(enum float_kind kind, const uint8_t *w, int64_t i, int n)
{
    size_t es = kind == KIND_F32 ? 4 : 2;
    const uint8_t *p = w + (size_t)i * es;
    uint8_t tail[32] = {0};
    if (n < 8) {
        memcpy(tail, p, (size_t)n * es);
        p = tail;
    }
    if (kind == KIND_F32)
        return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (kind == KIND_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* acc[r][t] += weights (8 at element i) x activations, for every pair of the tile. */
AVX2_INLINE void float_step(int R, int T, enum float_kind kind, __m256 acc[RMAX][TMAX],
                            const uint8_t *const *wr, const float *const *xt, int64_t i, int n)
{
    for (int r = 0; r < R; r++) {
        __m256 wv = load_w8(kind, wr[r], i, n);
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt[t] + i), acc[r][t]);
    }
}

/* The tile_fn of the float kinds for R rows and T tokens. */
AVX2_INLINE void tile_float(int R, int T, enum float_kind kind, float *y, int64_t ldy,
                            const uint8_t *w, size_t row_bytes, int nr, const uint8_t *xa,
                            size_t ab, int64_t n_in)
{
    const int es = kind == KIND_F32 ? 4 : 2; /* bytes per weight */
    const size_t ahead = tile_prefetch(R, row_bytes);
    __m256 acc[RMAX][TMAX];
    const uint8_t *wr[RMAX];
    const float *xt[TMAX]; // (T, n_in rounded up to 16) activations, zero-padded
    tile_rows(R, w, row_bytes, nr, wr);
    for (int t = 0; t < T; t++)
        xt[t] = (const float *)(xa + (size_t)t * ab);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 64 / es <= n_in; i += 64 / es) { /* a cache line of weights at a time */
        for (int r = 0; r < R; r++)
            prefetch_ahead(wr[r] + i * es, ahead, 64);
        for (int64_t j = i; j < i + 64 / es; j += 8)
            float_step(R, T, kind, acc, wr, xt, j, 8);
    }
    for (; i + 8 <= n_in; i += 8)
        float_step(R, T, kind, acc, wr, xt, i, 8);
    if (i < n_in)
        float_step(R, T, kind, acc, wr, xt, i, (int)(n_in - i));
    store_tile(R, T, y, ldy, nr, acc);
}

#define TILE_F32(R, T, ...) tile_float(R, T, KIND_F32, __VA_ARGS__)
#define TILE_F16(R, T, ...) tile_float(R, T, KIND_F16, __VA_ARGS__)
#define TILE_BF16(R, T, ...) tile_float(R, T, KIND_BF16, __VA_ARGS__)
DEFINE_TILE(tile_f32, TILE_F32, 4, 4, 4, 3, 2, 2)
DEFINE_TILE(tile_f16, TILE_F16, 4, 4, 4, 3, 2, 2)
DEFINE_TILE(tile_bf16, TILE_BF16, 4, 4, 4, 3, 2, 2)

/* ------------------------------------------------------------------------------------
 * 32-element block types.
 *
 * The weights enter vpmaddubsw as unsigned bytes: the codes themselves for Q4_0, Q4_1,
 * Q5_0, Q5_1 (0..15 or 0..31), |w| for Q8_0 and IQ4_NL, whose activations then carry the
 * sign of w (vpsignb). What the codes leave out is added per block from the activation's
 * quant sum: Q4_0/Q5_0 subtract offset * sum in the integer domain, Q4_1/Q5_1 add
 * m * (d * sum) with one more FMA. With VNNI, Q8_0 and IQ4_NL are offset codes too: w + 128
 * (vpdpbusd sums u8 x s8 products without saturating), less 128 * sum per half block,
 * so that each lane below holds the same integer as |w| x sign(y, w) gives it.
 *
 * Four blocks make a group. fold4 adds the four blocks' product vectors down to one vector
 * in which block j occupies lanes j and j + 4, with unpacks and adds inside each 128-bit
 * half only, so a group costs one conversion, one multiply (of the folded weight and
 * activation scales) and one FMA per pair instead of four of each. The fold runs once per
 * pair and group, so it uses no op that crosses the halves (vperm2i128, vpermd, vphaddd):
 * where 256-bit ops execute as two 128-bit halves (AMD Zen 1) each of those costs several
 * unpacks.
 *
 *     lane    0  1  2  3  4  5  6  7
 *     block   0  1  2  3  0  1  2  3
 *
 * act_prepare lays out the per-block activation values in this order.
 */
enum q32_kind { KIND_Q8_0, KIND_Q4_0, KIND_Q4_1, KIND_Q5_0, KIND_Q5_1, KIND_IQ4_NL };

static enum q32_kind q32_kind_of(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_Q8_0:
        return KIND_Q8_0;
    case GRAFT_TYPE_Q4_0:
        return KIND_Q4_0;
    case GRAFT_TYPE_Q4_1:
        return KIND_Q4_1;
    case GRAFT_TYPE_Q5_0:
        return KIND_Q5_0;
    case GRAFT_TYPE_Q5_1:
        return KIND_Q5_1;
    default:
        return KIND_IQ4_NL;
    }
}

AVX2_INLINE int q32_block_bytes(enum q32_kind kind)
{
    switch (kind) {
    case KIND_Q8_0:
        return 34;
    case KIND_Q4_1:
        return 20;
    case KIND_Q5_0:
        return 22;
    case KIND_Q5_1:
        return 24;
    default: /* Q4_0, IQ4_NL */
        return 18;
    }
}

/* Whether the weights are signed values (Q8_0, IQ4_NL) rather than unsigned codes. */
AVX2_INLINE bool q32_is_signed(enum q32_kind kind)
{
    return kind == KIND_Q8_0 || kind == KIND_IQ4_NL;
}

/* Whether the weights enter as |w| and the activations carry their sign (vpsignb): the
 * signed kinds without VNNI. */
AVX2_INLINE bool q32_sign_trick(enum q32_kind kind)
{
    return q32_is_signed(kind) && !VNNI;
}

AVX2_INLINE bool q32_has_min(enum q32_kind kind)
{
    return kind == KIND_Q4_1 || kind == KIND_Q5_1;
}

/* The offset of the unsigned codes of Q4_0 (8), Q5_0 (16) and, with VNNI, Q8_0 and IQ4_NL
 * (128); 0 for the others. */
AVX2_INLINE int q32_offset(enum q32_kind kind)
{
    return kind == KIND_Q4_0 ? 8 : kind == KIND_Q5_0 ? 16 : q32_is_signed(kind) && VNNI ? 128 : 0;
}

/* Layout of one token's activations (sections 64-byte aligned, zero padding):
 *     qs    int8  (ng, 128)   quants of the groups, ng = ceil(n_in / 128)
 *     dx    float (ng, 8)     block scales d = amax / 127, folded (each block twice)
 *     corr  (ng, 8)           Q4_0/Q5_0: int32 offset * sum(q), Q4_1/Q5_1: float d * sum(q),
 *                             once per block, in the first of its lanes, 0 in the other;
 *                             Q8_0/IQ4_NL with VNNI: int32 128 * the sum of q[0..15] in the
 *                             block's first lane and of q[16..31] in its second (the
 *                             elements the lanes hold); absent for Q8_0/IQ4_NL without
 */
typedef struct q32_layout {
    size_t dx, corr; /* byte offsets of the sections */
    size_t bytes;    /* one token */
} q32_layout;

static q32_layout q32_layout_of(enum q32_kind kind, int64_t n_in)
{
    size_t ng = round_up((size_t)n_in, QK * GROUP) / (QK * GROUP);
    q32_layout l;
    l.dx = ng * QK * GROUP;
    l.corr = l.dx + ng * 8 * sizeof(float);
    l.bytes = l.corr + (q32_sign_trick(kind) ? 0 : ng * 8 * sizeof(float));
    return l;
}

/* xa (q32_layout) = x (n_in) quantized per block of 32. */
static void prepare_q32(enum q32_kind kind, uint8_t *xa, const float *x, int64_t n_in)
{
    q32_layout l = q32_layout_of(kind, n_in);
    memset(xa, 0, l.bytes);
    for (int64_t b = 0; b < n_in / QK; b++) {
        int64_t lane = b / GROUP * 8 + b % GROUP;
        float amax = amax32(x + b * QK);
        float id = quant_multiplier(amax);
        float d = amax / 127.0f;
        int32_t half[2];
        quantize32((int8_t *)xa + b * QK, x + b * QK, id, half);
        float *dx = (float *)(xa + l.dx);
        dx[lane] = dx[lane + GROUP] = d;
        int32_t *corr = (int32_t *)(xa + l.corr);
        if (q32_has_min(kind)) {
            ((float *)corr)[lane] = d * (float)(half[0] + half[1]);
        } else if (q32_is_signed(kind) && VNNI) {
            corr[lane] = q32_offset(kind) * half[0];
            corr[lane + GROUP] = q32_offset(kind) * half[1];
        } else if (q32_offset(kind)) {
            corr[lane] = q32_offset(kind) * (half[0] + half[1]);
        }
    }
}

/* The values of the 16 IQ4_NL codes as bytes: signed, or with VNNI value + 128 unsigned. */
#define IQ4NL_BYTE(v) (uint8_t)((v) + 128 * VNNI)
static const uint8_t iq4nl_values[16] = {GRAFT_IQ4_NL_VALUES(IQ4NL_BYTE)};

/* 32 codes 0..15 in element order from the 16 bytes of nibbles at qs. */
AVX2_INLINE __m256i nibbles32(const uint8_t *qs)
{
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 0x10 in byte j where bit j of the little-endian 32-bit word at qh is set, else 0. */
AVX2_INLINE __m256i fifth_bits32(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i select = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
                                            2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), select);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The f16 values at p + j * stride for j < n (n <= 4), folded (block j in its two lanes;
 * 0 for the missing blocks). The halves are gathered in a general-purpose register. */
AVX2_INLINE __m256 f16x4_folded(const uint8_t *p, int stride, int n)
{
    uint64_t h = 0;
    for (int j = 0; j < n; j++)
        h |= (uint64_t)load_u16(p + j * stride) << (16 * j);
    __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
    return _mm256_set_m128(f, f);
}

/* One group of up to 4 weight blocks of one row, unpacked. */
typedef struct q32_group {
    __m256i q[GROUP]; /* unsigned codes: the codes, w + 128 (signed kinds with VNNI) or |w| */
    __m256i s[GROUP]; /* signed w (q32_sign_trick kinds only) */
    __m256 d, m;      /* folded scales and mins (m: Q4_1/Q5_1 only) */
} q32_group;

/* g = the n blocks (n <= 4) of kind at b; the missing blocks are zero. */
AVX2_INLINE void q32_unpack(enum q32_kind kind, const uint8_t *b, int n, q32_group *g)
{
    const int bb = q32_block_bytes(kind);
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values));
    for (int j = 0; j < GROUP; j++) {
        const uint8_t *p = b + j * bb;
        g->q[j] = g->s[j] = _mm256_setzero_si256();
        if (j >= n)
            continue;
        switch (kind) {
        case KIND_Q8_0:
            g->s[j] = _mm256_loadu_si256((const __m256i *)(p + 2));
            break;
        case KIND_IQ4_NL: /* with VNNI already w + 128 */
            g->s[j] = _mm256_shuffle_epi8(values, nibbles32(p + 2));
            break;
        case KIND_Q4_0:
            g->q[j] = nibbles32(p + 2);
            break;
        case KIND_Q4_1:
            g->q[j] = nibbles32(p + 4);
            break;
        case KIND_Q5_0:
            g->q[j] = _mm256_or_si256(nibbles32(p + 6), fifth_bits32(p + 2));
            break;
        case KIND_Q5_1:
            g->q[j] = _mm256_or_si256(nibbles32(p + 8), fifth_bits32(p + 4));
            break;
        }
        if (q32_sign_trick(kind))
            g->q[j] = _mm256_abs_epi8(g->s[j]);
        else if (kind == KIND_Q8_0)
            g->q[j] = _mm256_xor_si256(g->s[j], _mm256_set1_epi8(-128));
        else if (kind == KIND_IQ4_NL)
            g->q[j] = g->s[j];
    }
    g->d = f16x4_folded(b, bb, n);
    g->m = q32_has_min(kind) ? f16x4_folded(b + 2, bb, n) : _mm256_setzero_ps();
}

/* a + b in 16-bit (w16) or 32-bit lanes. */
AVX2_INLINE __m256i add_units(__m256i a, __m256i b, bool w16)
{
    return w16 ? _mm256_add_epi16(a, b) : _mm256_add_epi32(a, b);
}

/* The products of 4 blocks folded into one vector (see the lane table above): block j's
 * 32-bit units (int32, or pairs of int16 when w16) summed four to a lane. */
AVX2_INLINE __m256i fold4(const __m256i *p, bool w16)
{
    /* [p0 p1 p0 p1 | ...] and [p2 p3 p2 p3 | ...], each unit the sum of two */
    __m256i a = add_units(_mm256_unpacklo_epi32(p[0], p[1]),
                          _mm256_unpackhi_epi32(p[0], p[1]), w16);
    __m256i b = add_units(_mm256_unpacklo_epi32(p[2], p[3]),
                          _mm256_unpackhi_epi32(p[2], p[3]), w16);
    return add_units(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b), w16);
}

/* The integer dot products of the 4 blocks of g with the quants y (4, 32), folded.
 * Without VNNI, unsigned codes (at most 31) times |y| <= 127 give vpmaddubsw lanes of at
 * most 7874, so the fold runs in 16 bits (4 lanes per block: at most 31496) before the one
 * widening vpmaddwd; signed weights (|w| up to 128) widen each block first. With VNNI every
 * block is widened by its vpdpbusd. Either way a lane ends with the same exact sum. */
AVX2_INLINE __m256i q32_dot4(enum q32_kind kind, const q32_group *g, const int8_t *y)
{
    const __m256i zero = _mm256_setzero_si256();
    const bool w16 = !VNNI && !q32_sign_trick(kind);
    __m256i p[GROUP];
    for (int j = 0; j < GROUP; j++) {
        __m256i yv = _mm256_loadu_si256((const __m256i *)(y + j * QK));
        if (q32_sign_trick(kind))
            yv = _mm256_sign_epi8(yv, g->s[j]);
        p[j] = w16 ? _mm256_maddubs_epi16(g->q[j], yv) : dot4_u8s8(zero, g->q[j], yv);
    }
    if (w16)
        return _mm256_madd_epi16(fold4(p, true), _mm256_set1_epi16(1));
    return fold4(p, false);
}

/* acc += the group g of one row times the group of one token (quants y, folded scales dx,
 * corrections corr). */
AVX2_INLINE __m256 q32_pair(enum q32_kind kind, const q32_group *g, const int8_t *y,
                            const float *dx, const void *corr, __m256 acc)
{
    __m256i sum = q32_dot4(kind, g, y);
    if (q32_offset(kind))
        sum = _mm256_sub_epi32(sum, _mm256_loadu_si256((const __m256i *)corr));
    __m256 scale = _mm256_mul_ps(g->d, _mm256_loadu_ps(dx));
    acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sum), acc);
    if (q32_has_min(kind))
        acc = _mm256_fmadd_ps(g->m, _mm256_loadu_ps((const float *)corr), acc);
    return acc;
}

/* All pairs of the tile for group k, which has n blocks. */
AVX2_INLINE void q32_step(int R, int T, enum q32_kind kind, __m256 acc[RMAX][TMAX],
                          const uint8_t *const *wr, const uint8_t *const *xt,
                          const q32_layout *l, int64_t k, int n, size_t ahead)
{
    for (int r = 0; r < R; r++) {
        const uint8_t *b = wr[r] + k * GROUP * q32_block_bytes(kind);
        q32_group g;
        prefetch_ahead(b, ahead, GROUP * q32_block_bytes(kind));
        q32_unpack(kind, b, n, &g);
        for (int t = 0; t < T; t++) {
            const int8_t *y = (const int8_t *)xt[t] + k * GROUP * QK;
            const float *dx = (const float *)(xt[t] + l->dx) + k * 8;
            const uint8_t *corr = xt[t] + l->corr + k * 8 * sizeof(float);
            acc[r][t] = q32_pair(kind, &g, y, dx, corr, acc[r][t]);
        }
    }
}

/* The tile_fn of the 32-element kinds for R rows and T tokens. */
AVX2_INLINE void tile_q32(int R, int T, enum q32_kind kind, float *y, int64_t ldy,
                          const uint8_t *w, size_t row_bytes, int nr, const uint8_t *xa,
                          size_t ab, int64_t n_in)
{
    const q32_layout l = q32_layout_of(kind, n_in);
    const int64_t nb = n_in / QK;
    __m256 acc[RMAX][TMAX];
    const uint8_t *wr[RMAX];
    const uint8_t *xt[TMAX];
    const size_t ahead = tile_begin(R, T, w, row_bytes, nr, xa, ab, wr, xt, acc);
    int64_t k = 0;
    for (; (k + 1) * GROUP <= nb; k++)
        q32_step(R, T, kind, acc, wr, xt, &l, k, GROUP, ahead);
    if (k * GROUP < nb)
        q32_step(R, T, kind, acc, wr, xt, &l, k, (int)(nb - k * GROUP), ahead);
    store_tile(R, T, y, ldy, nr, acc);
}

#define TILE_Q8_0(R, T, ...) tile_q32(R, T, KIND_Q8_0, __VA_ARGS__)
#define TILE_Q4_0(R, T, ...) tile_q32(R, T, KIND_Q4_0, __VA_ARGS__)
#define TILE_Q4_1(R, T, ...) tile_q32(R, T, KIND_Q4_1, __VA_ARGS__)
#define TILE_Q5_0(R, T, ...) tile_q32(R, T, KIND_Q5_0, __VA_ARGS__)
#define TILE_Q5_1(R, T, ...) tile_q32(R, T, KIND_Q5_1, __VA_ARGS__)
#define TILE_IQ4_NL(R, T, ...) tile_q32(R, T, KIND_IQ4_NL, __VA_ARGS__)
DEFINE_TILE(tile_q8_0, TILE_Q8_0, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q4_0, TILE_Q4_0, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q4_1, TILE_Q4_1, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q5_0, TILE_Q5_0, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q5_1, TILE_Q5_1, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_iq4_nl, TILE_IQ4_NL, 4, 2, 1, 1, 1, 1)


/* ------------------------------------------------------------------------------------
 * K-quants: Q4_K, Q5_K, Q6_K against activations quantized per 256 (Q8_K-like).
 *
 * One token's layout: graft__q8k_layout (matmul_avx2.h); its sums of 32 quants serve the
 * packed Q4_K (matmul_q4k_r8_avx2.c).
 *
 * Per super-block and pair, the codes (unsigned: 0..15, 0..31, 0..63) go into vpmaddubsw
 * with the activations; vpmaddwd by the integer sub-block scales widens and scales in one
 * step; the int32 sums over the super-block are exact (at most 256 * 63 * 127 * 127). What
 * the codes leave out is taken from bsums with one more vpmaddwd: the mins of Q4_K/Q5_K
 * (scaled by -dmin instead of d: kq_finish folds them into lanes 2-3 and 6-7 of the same
 * vector) and the offset 32 of Q6_K. One conversion and one FMA per pair and super-block.
 */

/* bsums (16) = the sums of each 16 of the 256 quants q. */
static void block_sums16(int16_t *bsums, const int8_t *q)
{
    for (int i = 0; i < 16; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(q + 16 * i));
        __m128i s = _mm_madd_epi16(_mm_maddubs_epi16(_mm_set1_epi8(1), v), _mm_set1_epi16(1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        bsums[i] = (int16_t)_mm_cvtsi128_si32(s);
    }
}

/* xa (graft__q8k_layout) = x (n_in) quantized per block of 256. */
static void prepare_q8k(uint8_t *xa, const float *x, int64_t n_in)
{
    graft__q8k_layout l = graft__q8k_layout_of(n_in);
    memset(xa, 0, l.bytes);
    int8_t *qs = (int8_t *)xa;
    float *d = (float *)(xa + l.d);
    int16_t *bsums = (int16_t *)(xa + l.bsums);
    int16_t *bsums32 = (int16_t *)(xa + l.bsums32);
    for (int64_t b = 0; b < n_in / QK_K; b++) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K / QK; j++) {
            float m = amax32(x + b * QK_K + j * QK);
            amax = m > amax ? m : amax;
        }
        float id = quant_multiplier(amax);
        d[b] = amax / 127.0f;
        int32_t half[2]; /* not needed: block_sums16 makes the sums of 16 */
        for (int j = 0; j < QK_K / QK; j++)
            quantize32(qs + b * QK_K + j * QK, x + b * QK_K + j * QK, id, half);
        block_sums16(bsums + b * 16, qs + b * QK_K);
        for (int j = 0; j < 8; j++)
            bsums32[b * 8 + j] = (int16_t)(bsums[b * 16 + 2 * j] + bsums[b * 16 + 2 * j + 1]);
    }
}

enum kq_kind { KIND_Q4_K, KIND_Q5_K, KIND_Q6_K };

AVX2_INLINE int kq_block_bytes(enum kq_kind kind)
{
    return kind == KIND_Q4_K   ? BLOCK_BYTES_Q4_K
           : kind == KIND_Q5_K ? BLOCK_BYTES_Q5_K
                               : BLOCK_BYTES_Q6_K;
}

/* What one row's super-block needs beyond its codes. */
typedef struct kq_row {
    __m256i sc;  /* Q4_K/Q5_K: the 8 scales as int16, in both 128-bit lanes;
                    Q6_K: the 16 scales as int16 */
    __m256i aux; /* Q4_K/Q5_K: the 8 mins as int16, each twice; Q6_K: 32 * the scales */
    __m256 dd;   /* Q4_K/Q5_K: d, d, -dmin, -dmin (twice); Q6_K: d */
    __m256i qh;  /* Q5_K: the fifth bits */
} kq_row;

/* Scales and mins of a Q4_K/Q5_K super-block (6 bits each, packed in 12 bytes; see
 * scale_min_k4 in dequantize.c) as 8 bytes each. */
AVX2_INLINE void k4_scales(const uint8_t *packed, uint64_t *sc, uint64_t *mn)
{
    uint32_t u[3];
    memcpy(u, packed, sizeof u);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    uint32_t sc_hi = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);
    uint32_t mn_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);
    *sc = (u[0] & low6) | (uint64_t)sc_hi << 32;
    *mn = (u[1] & low6) | (uint64_t)mn_hi << 32;
}

AVX2_INLINE float f16_at(const uint8_t *p)
{
    return _cvtsh_ss(load_u16(p));
}

/* k = what the super-block b of one row needs beyond its codes. */
AVX2_INLINE void kq_row_load(enum kq_kind kind, const uint8_t *b, kq_row *k)
{
    if (kind == KIND_Q6_K) {
        k->sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
        k->aux = _mm256_slli_epi16(k->sc, 5);
        k->dd = _mm256_set1_ps(f16_at(b + 208));
        return;
    }
    uint64_t sc, mn;
    k4_scales(b + 4, &sc, &mn);
    __m128i sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc));
    __m128i mn8 = _mm_cvtsi64_si128((long long)mn);
    k->sc = _mm256_broadcastsi128_si256(sc16);
    k->aux = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
    uint32_t d_dmin; /* the two f16 scales d, dmin at the start of the block */
    memcpy(&d_dmin, b, sizeof d_dmin);
    __m256 f = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128((int)d_dmin)));
    f = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1));
    k->dd = _mm256_xor_ps(f, _mm256_setr_ps(0.0f, 0.0f, -0.0f, -0.0f, 0.0f, 0.0f, -0.0f, -0.0f));
    if (kind == KIND_Q5_K)
        k->qh = _mm256_loadu_si256((const __m256i *)(b + 16));
}

/* The int16 j of each 128-bit lane of v, in all 16 lanes (j in both halves). */
AVX2_INLINE __m256i broadcast_i16(__m256i v, int j)
{
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* The 16 int16 of v: int16 lo of lane h in the low half, int16 hi of lane h in the high. */
AVX2_INLINE __m256i broadcast_i16_pair(__m256i v, int h, int lo, int hi)
{
    __m256i lane = h ? _mm256_permute2x128_si256(v, v, 0x11) : _mm256_permute2x128_si256(v, v, 0x00);
    __m256i sel = _mm256_setr_m128i(_mm_set1_epi16((short)(((2 * lo + 1) << 8) | (2 * lo))),
                                    _mm_set1_epi16((short)(((2 * hi + 1) << 8) | (2 * hi))));
    return _mm256_shuffle_epi8(lane, sel);
}

/* 0x10 in each byte of v whose bit `bit` is set, else 0. */
AVX2_INLINE __m256i bit_to_16(__m256i v, int bit)
{
    if (bit <= 4)
        v = _mm256_slli_epi16(v, 4 - bit);
    else
        v = _mm256_srli_epi16(v, bit - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Codes and scales of 64 elements (step s of 4) of one row's super-block: 2 vectors of 32
 * codes for elements 64 s + 32 i + l, and the int16 scale vectors for vpmaddwd. */
typedef struct kq_codes {
    __m256i q[2];
    __m256i sc[2];
} kq_codes;

/* c = step s (0..3) of the super-block b. */
AVX2_INLINE void kq_unpack(enum kq_kind kind, const uint8_t *b, const kq_row *k, int s,
                           kq_codes *c)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    if (kind == KIND_Q6_K) {
        /* half h = s / 2; steps 2h, 2h + 1 cover vectors k = 0, 1 and 2, 3 of the half */
        int h = s / 2, k0 = 2 * (s % 2);
        __m256i qa = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
        __m256i qb = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        const __m256i top2 = _mm256_set1_epi8(0x30);
        if (k0 == 0) {
            c->q[0] = _mm256_or_si256(_mm256_and_si256(qa, low4),
                                      _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2));
            c->q[1] = _mm256_or_si256(_mm256_and_si256(qb, low4),
                                      _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2));
        } else {
            c->q[0] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), low4),
                                      _mm256_and_si256(qh, top2));
            c->q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), low4),
                                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2));
        }
        for (int i = 0; i < 2; i++)
            c->sc[i] = broadcast_i16_pair(k->sc, h, 2 * (k0 + i), 2 * (k0 + i) + 1);
        return;
    }
    const uint8_t *qs = b + (kind == KIND_Q4_K ? 16 : 48);
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * s));
    c->q[0] = _mm256_and_si256(v, low4);
    c->q[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if (kind == KIND_Q5_K) {
        c->q[0] = _mm256_or_si256(c->q[0], bit_to_16(k->qh, 2 * s));
        c->q[1] = _mm256_or_si256(c->q[1], bit_to_16(k->qh, 2 * s + 1));
    }
    c->sc[0] = broadcast_i16(k->sc, 2 * s);
    c->sc[1] = broadcast_i16(k->sc, 2 * s + 1);
}

/* isum += the scaled integer dot of 64 codes with the activations y (64). */
AVX2_INLINE __m256i kq_dot(const kq_codes *c, const int8_t *y, __m256i isum)
{
    for (int i = 0; i < 2; i++) {
        __m256i yv = _mm256_loadu_si256((const __m256i *)(y + 32 * i));
        isum = madd_add(isum, _mm256_maddubs_epi16(c->q[i], yv), c->sc[i]);
    }
    return isum;
}

/* acc += one pair's super-block: isum (scaled code dots) corrected by bsums (16), times
 * the row's dd and the token's scale dx. */
AVX2_INLINE __m256 kq_finish(enum kq_kind kind, const kq_row *k, __m256i isum,
                             const int16_t *bsums, float dx, __m256 acc)
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    __m256i aux = _mm256_madd_epi16(k->aux, bs);
    if (kind == KIND_Q6_K)
        isum = _mm256_sub_epi32(isum, aux);
    else /* scale sums into lanes 0-1 and 4-5, min sums into 2-3 and 6-7 */
        isum = _mm256_add_epi32(_mm256_blend_epi32(isum, aux, 0xcc),
                                _mm256_shuffle_epi32(_mm256_blend_epi32(aux, isum, 0xcc), 0x4e));
    __m256 scale = _mm256_mul_ps(k->dd, _mm256_set1_ps(dx));
    return _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc);
}

/* All pairs of the tile for super-block sb. */
AVX2_INLINE void kq_step(int R, int T, enum kq_kind kind, __m256 acc[RMAX][TMAX],
                         const uint8_t *const *wr, const uint8_t *const *xt,
                         const graft__q8k_layout *l, int64_t sb, size_t ahead)
{
    for (int r = 0; r < R; r++) {
        const uint8_t *b = wr[r] + sb * kq_block_bytes(kind);
        kq_row k;
        prefetch_ahead(b, ahead, kq_block_bytes(kind));
        kq_row_load(kind, b, &k);
        __m256i isum[TMAX];
        for (int t = 0; t < T; t++)
            isum[t] = _mm256_setzero_si256();
        for (int s = 0; s < 4; s++) {
            kq_codes c;
            kq_unpack(kind, b, &k, s, &c);
            for (int t = 0; t < T; t++)
                isum[t] = kq_dot(&c, (const int8_t *)xt[t] + sb * QK_K + 64 * s, isum[t]);
        }
        for (int t = 0; t < T; t++) {
            const int16_t *bsums = (const int16_t *)(xt[t] + l->bsums) + sb * 16;
            float dx = ((const float *)(xt[t] + l->d))[sb];
            acc[r][t] = kq_finish(kind, &k, isum[t], bsums, dx, acc[r][t]);
        }
    }
}

/* The tile_fn of the K-quants for R rows and T tokens. */
AVX2_INLINE void tile_kq(int R, int T, enum kq_kind kind, float *y, int64_t ldy,
                         const uint8_t *w, size_t row_bytes, int nr, const uint8_t *xa,
                         size_t ab, int64_t n_in)
{
    const graft__q8k_layout l = graft__q8k_layout_of(n_in);
    __m256 acc[RMAX][TMAX];
    const uint8_t *wr[RMAX];
    const uint8_t *xt[TMAX];
    const size_t ahead = tile_begin(R, T, w, row_bytes, nr, xa, ab, wr, xt, acc);
    for (int64_t sb = 0; sb < n_in / QK_K; sb++)
        kq_step(R, T, kind, acc, wr, xt, &l, sb, ahead);
    store_tile(R, T, y, ldy, nr, acc);
}

#define TILE_Q4_K(R, T, ...) tile_kq(R, T, KIND_Q4_K, __VA_ARGS__)
#define TILE_Q5_K(R, T, ...) tile_kq(R, T, KIND_Q5_K, __VA_ARGS__)
#define TILE_Q6_K(R, T, ...) tile_kq(R, T, KIND_Q6_K, __VA_ARGS__)
DEFINE_TILE(tile_q4_k, TILE_Q4_K, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q5_k, TILE_Q5_K, 4, 2, 1, 1, 1, 1)
DEFINE_TILE(tile_q6_k, TILE_Q6_K, 4, 2, 1, 1, 1, 1)

/* ------------------------------------------------------------------------------------
 * The path.
 */
/* The packed forms of Q4_K (matmul_q4k_r8_avx2.c), Q8_0 and Q4_0 (matmul_q32_r8_avx2.c). */
enum {
    PACKED_Q4_K = GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q4_K,
    PACKED_Q8_0 = GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q8_0,
    PACKED_Q4_0 = GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q4_0
};

static const tiling tile_q4_k_r8_tiling = {graft__avx2_r8_tile, {0, 8, 8, 8, 8, 8, 8}};
static const tiling tile_q8_0_r8_tiling = {GRAFT_AVX2_NAME(q32r8_tile_q8_0), {0, 8, 8, 8, 8, 8, 8}};
static const tiling tile_q4_0_r8_tiling = {GRAFT_AVX2_NAME(q32r8_tile_q4_0), {0, 8, 8, 8, 8, 8, 8}};

static bool is_packed_q32(uint32_t type)
{
    return type == PACKED_Q8_0 || type == PACKED_Q4_0;
}

/* A GGUF type this path computes, or one of its packed forms. */
static bool type_known(uint32_t type)
{
    return graft__type_is_supported(type) || type == PACKED_Q4_K || is_packed_q32(type);
}

/* xa (graft__q32r8_layout) = x (n_in) quantized per block of 32 for the packed form of
 * Q8_0 or Q4_0 (type). */
static void prepare_q32r8(uint32_t type, uint8_t *xa, const float *x, int64_t n_in)
{
    const graft__q32r8_layout l = graft__q32r8_layout_of(n_in);
    const int32_t offset = type == PACKED_Q4_0 ? 8 : VNNI ? 128 : 0;
    memset(xa, 0, l.bytes);
    for (int64_t b = 0; b < n_in / QK; b++) {
        float amax = amax32(x + b * QK);
        int32_t half[2];
        quantize32((int8_t *)xa + b * QK, x + b * QK, quant_multiplier(amax), half);
        ((float *)(xa + l.dx))[b] = amax / 127.0f;
        ((int32_t *)(xa + l.bias))[b] = -offset * (half[0] + half[1]);
    }
}

/* Whether a type's activations are prepared as Q8_K (the k-quants and the packed form). */
static bool takes_q8k(uint32_t type)
{
    return is_kquant_type(type) || type == PACKED_Q4_K;
}

static size_t act_bytes(uint32_t type, int64_t n_in)
{
    GRAFT_ASSERT(type_known(type) && n_in >= 0);
    if (is_float_type(type))
        return round_up((size_t)n_in * sizeof(float), 64);
    if (takes_q8k(type))
        return graft__q8k_layout_of(n_in).bytes;
    if (is_packed_q32(type))
        return graft__q32r8_layout_of(n_in).bytes;
    return q32_layout_of(q32_kind_of(type), n_in).bytes;
}

static void act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    GRAFT_ASSERT(type_known(type) && n_in >= 0);
    if (is_float_type(type)) {
        memcpy(xa, x, (size_t)n_in * sizeof(float));
        memset((float *)xa + n_in, 0, act_bytes(type, n_in) - (size_t)n_in * sizeof(float));
    } else if (takes_q8k(type)) {
        GRAFT_ASSERT(n_in % QK_K == 0);
        prepare_q8k(xa, x, n_in);
    } else if (is_packed_q32(type)) {
        GRAFT_ASSERT(n_in % QK == 0);
        prepare_q32r8(type, xa, x, n_in);
    } else {
        GRAFT_ASSERT(n_in % QK == 0);
        prepare_q32(q32_kind_of(type), xa, x, n_in);
    }
}

static const tiling *tiling_of(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_F32:
        return &tile_f32_tiling;
    case GRAFT_TYPE_F16:
        return &tile_f16_tiling;
    case GRAFT_TYPE_BF16:
        return &tile_bf16_tiling;
    case GRAFT_TYPE_Q8_0:
        return &tile_q8_0_tiling;
    case GRAFT_TYPE_Q4_0:
        return &tile_q4_0_tiling;
    case GRAFT_TYPE_Q4_1:
        return &tile_q4_1_tiling;
    case GRAFT_TYPE_Q5_0:
        return &tile_q5_0_tiling;
    case GRAFT_TYPE_Q5_1:
        return &tile_q5_1_tiling;
    case GRAFT_TYPE_IQ4_NL:
        return &tile_iq4_nl_tiling;
    case GRAFT_TYPE_Q4_K:
        return &tile_q4_k_tiling;
    case GRAFT_TYPE_Q5_K:
        return &tile_q5_k_tiling;
    case GRAFT_TYPE_Q6_K:
        return &tile_q6_k_tiling;
    case PACKED_Q4_K:
        return &tile_q4_k_r8_tiling;
    case PACKED_Q8_0:
        return &tile_q8_0_r8_tiling;
    case PACKED_Q4_0:
        return &tile_q4_0_r8_tiling;
    default:
        return NULL;
    }
}

static void gemm(uint32_t type, float *y, int64_t ldy, const void *w, int64_t n_in, int64_t o0,
                 int64_t o1, const void *xa, int64_t n_tok)
{
    GRAFT_ASSERT(type_known(type));
    GRAFT_ASSERT(n_in >= 0 && 0 <= o0 && o0 <= o1 && n_tok >= 0);
    if (n_in == 0) { /* empty dot products */
        for (int64_t t = 0; t < n_tok; t++)
            memset(y + t * ldy + o0, 0, (size_t)(o1 - o0) * sizeof(float));
        return;
    }
    /* a packed row's share of its group's bytes: the GGUF row size for every packed form
     * but Q4_K's */
    bool packed = type >= GRAFT_TYPE_PACKED_BASE;
    size_t row_bytes = type == PACKED_Q4_K
                           ? (size_t)(n_in / QK_K) * GRAFT_AVX2_R8_BLOCK_BYTES / GRAFT_AVX2_R8_ROWS
                           : graft__type_row_bytes(packed ? type - GRAFT_TYPE_PACKED_BASE : type,
                                                   (uint64_t)n_in);
    GRAFT_ASSERT(!packed || (o0 % GRAFT_AVX2_R8_ROWS == 0 && o1 % GRAFT_AVX2_R8_ROWS == 0));
    gemm_args a = {y, ldy, w, row_bytes, o0, o1, xa, act_bytes(type, n_in), n_tok, n_in};
    GRAFT_ASSERT(a.row_bytes > 0);
    run_tiles(tiling_of(type), &a);
}

static uint32_t packed_type(uint32_t type, int64_t n_in, int64_t n_out)
{
    if (graft__avx2_r8_packs(type, n_in, n_out) || graft__avx2_q32r8_packs(type, n_in, n_out))
        return GRAFT_TYPE_PACKED_BASE + type;
    return 0;
}

static size_t packed_bytes(uint32_t ptype, int64_t n_in, int64_t n_out)
{
    size_t groups = (size_t)(n_out / GRAFT_AVX2_R8_ROWS);
    if (ptype == PACKED_Q4_K)
        return groups * (size_t)(n_in / QK_K) * GRAFT_AVX2_R8_BLOCK_BYTES;
    GRAFT_ASSERT(is_packed_q32(ptype));
    return groups * (size_t)(n_in / QK) *
           graft__avx2_q32r8_block_bytes(ptype - GRAFT_TYPE_PACKED_BASE);
}

static void pack(uint32_t ptype, void *dst, const void *w, int64_t n_in, int64_t n_out)
{
    if (ptype == PACKED_Q4_K) {
        graft__avx2_r8_pack(dst, w, n_in, n_out);
        return;
    }
    GRAFT_ASSERT(is_packed_q32(ptype));
    graft__avx2_q32r8_pack(ptype - GRAFT_TYPE_PACKED_BASE, dst, w, n_in, n_out);
}

#ifdef GRAFT_AVX_VNNI
const graft__matmul_path graft__matmul_avxvnni = {.name = "avxvnni",
#else
const graft__matmul_path graft__matmul_avx2 = {.name = "avx2",
#endif
                                               .act_bytes = act_bytes,
                                               .act_prepare = act_prepare,
                                               .gemm = gemm,
                                               .packed_type = packed_type,
                                               .packed_bytes = packed_bytes,
                                               .pack = pack};
