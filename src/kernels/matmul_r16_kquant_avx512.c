/*
 * matmul_r16_kquant_avx512.c: Q4_K matrices packed for the avx512 path like Q8_0 and Q4_0
 * (matmul_r16_avx512.c: blocks of 16 interleaved rows, lane r of every vector a piece of
 * row r), and the tiles that compute with them. matmul_r16_avx512.c's driver runs them.
 *
 * Why. The GGUF layout makes every (row, token) unpack its block's packed 6-bit scales
 * and mins and sum its lanes (matmul_kquant_avx512.c: about 40 vector operations a block
 * and row for one token). Packed, one vector holds the 16 rows, so the unpacking of a
 * super-block's quants and scales serves 16 rows at once and no lanes are summed: faster
 * from cache and for prefill, about the same for a decode step streaming from memory
 * (figures: bench/results/2026-12-01-kernel-decisions.md). The activations' scale per 32
 * elements (rather than per 256) also makes it more exact.
 *
 * A Q4_K super-block of 256 elements has d and dmin (f16) and per sub-block j of 32
 * elements a scale sc_j and a min m_j (6 bits each): element = d sc_j q - dmin m_j, q in
 * 0..15. Packed super-block of a row block (SB_BYTES, 64-byte aligned), 16 rows r:
 *     quants  32 vectors; vector 8g + k (g = 0..3, k = 0..7) has in lane r the quant bytes
 *             32g + 4k .. 32g + 4k + 3 of row r, whose low nibbles are elements 64g + 4k
 *             .. + 3 (sub-block 2g) and high nibbles 64g + 32 + 4k .. + 3 (sub-block 2g + 1)
 *     sc      8 x 16 bytes: sc_j of each row
 *     m       8 x 16 bytes: m_j of each row
 *     d, dmin 16 f16 each, in row order
 * The matrix is n_out / 16 row blocks of n_in / 256 such super-blocks, 2368 bytes each
 * against 16 x 144 in the GGUF layout.
 *
 * Activations are quantized per token and block of 32 as for the packed Q8_0 and Q4_0
 * (graft__avx512_quantize32): quants a, scale dx_j, and dx_j times the sum of the block's
 * quants. Per sub-block j, 16 rows and one token:
 *     i   = sum_k vpdpbusd(W_k, broadcast(a[4k..4k+3]))          (k = 0..7, exact)
 *     acc = fma(float(i), (d sc_j) dx_j, acc)
 *     acc = acc - (dmin m_j) (dx_j sum_j a)                        (one fnmadd)
 * with d sc_j and dmin m_j (exact products) made once per row block and sub-block for all
 * the tile's tokens. Every (row, token) runs these operations in this order whatever
 * tile it is in, so the result is the same bits for any n_tok, position in the batch and
 * row range.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx512.h"
#include "kernels/quant_formats.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

enum {
    ROWS = GRAFT_R16_ROWS,         /* rows per row block */
    SEGMENTS = 3,                  /* weight streams read side by side (see the kernel) */
    MAX_RB = SEGMENTS,             /* row blocks per tile */
    MAX_T = GRAFT_R16_MAX_T,       /* tokens per tile */
    IN_BLOCK = BLOCK_BYTES_Q4_K,   /* bytes of a GGUF Q4_K block */
    QS_BYTES = 32 * 64,            /* the packed quant vectors */
    SC_AT = QS_BYTES,              /* offsets of the packed scales, mins, d and dmin */
    M_AT = SC_AT + 8 * ROWS,
    D_AT = M_AT + 8 * ROWS,
    DMIN_AT = D_AT + 2 * ROWS,
    SB_BYTES = DMIN_AT + 2 * ROWS,
    AHEAD = 2 * SB_BYTES, /* prefetch distance: two super-blocks */
    PF_LINES = (SB_BYTES / 64 + 7) / 8 /* cache lines prefetched per sub-block */
};

static size_t row_block_bytes(int64_t n_in)
{
    return (size_t)(n_in / QK_K) * SB_BYTES;
}

/* ------------------------------------------------------------------------------------
 * Packing.
 */

void graft__r16_q4_k_pack(void *dst, const void *w, int64_t n_in, int64_t n_out)
{
    size_t row_bytes = graft__type_row_bytes(GRAFT_TYPE_Q4_K, (uint64_t)n_in);
    size_t rbb = row_block_bytes(n_in);
    for (int64_t rb = 0; rb < n_out / ROWS; rb++) {
        for (int r = 0; r < ROWS; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(rb * ROWS + r) * row_bytes;
            for (int64_t sb = 0; sb < n_in / QK_K; sb++) {
                const uint8_t *block = row + (size_t)sb * IN_BLOCK;
                uint8_t *out = (uint8_t *)dst + (size_t)rb * rbb + (size_t)sb * SB_BYTES;
                memcpy(out + D_AT + 2 * r, block, 2);
                memcpy(out + DMIN_AT + 2 * r, block + 2, 2);
                for (int j = 0; j < 8; j++) {
                    int sc, m;
                    graft__scale_min_k4(block + 4, j, &sc, &m);
                    out[SC_AT + ROWS * j + r] = (uint8_t)sc;
                    out[M_AT + ROWS * j + r] = (uint8_t)m;
                }
                for (int v = 0; v < 32; v++) /* v = 8g + k: quant bytes 32g + 4k .. + 3 */
                    memcpy(out + 64 * v + 4 * r, block + 16 + 32 * (v / 8) + 4 * (v % 8), 4);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------
 * Activations (matmul_avx512.h): quants, then per block of 32 dx and dx times the sum of
 * its quants.
 */

void graft__r16_q4_k_act_prepare(void *xa, const float *x, int64_t n_in)
{
    GRAFT_ASSERT(n_in % QK_K == 0);
    memset(xa, 0, graft__r16_act_size(n_in));
    graft__r16_acts a = graft__r16_acts_at(xa, n_in);
    for (int64_t b = 0; b < n_in / QK; b++) {
        int8_t *q = (int8_t *)a.q + b * QK;
        int sum = graft__avx512_quantize32(x + b * QK, q, q + 16, (float *)&a.dx[b]);
        ((float *)a.extra)[b] = a.dx[b] * (float)sum;
    }
}

/* ------------------------------------------------------------------------------------
 * Tiles.
 */

/* The 16 rows' byte values at p (one per row) as floats, times f. */
static inline __m512 row_bytes_times(const uint8_t *p, __m512 f)
{
    __m512i bytes = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)p));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(bytes), f);
}

/* d or dmin (at D_AT or DMIN_AT) of the 16 rows of a super-block, as floats. */
static inline __m512 row_halves(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p));
}

/* acc[t] (T of them) += sub-block j of the row block's super-block at blk (quants, d sc_j,
 * dmin m_j) times sub-block j of super-block sb of token t; with prefetch, first asks for
 * this sub-block's share of the lines AHEAD bytes on. */
static inline __attribute__((always_inline)) void
k4_sub_block(int T, int prefetch, __m512 *acc, const uint8_t *blk, int j, int64_t sb,
             const graft__r16_acts *acts)
{
    if (prefetch)
        for (int l = j * PF_LINES; l < (j + 1) * PF_LINES && l < SB_BYTES / 64; l++)
            _mm_prefetch((const char *)blk + AHEAD + 64 * l, _MM_HINT_T0);
    const __m512i mask = _mm512_set1_epi8(0x0f);
    __m512i W[8]; /* nibbles j % 2 of vectors 8 (j / 2) + k */
    GRAFT_AVX512_UNROLL
    for (int k = 0; k < 8; k++) {
        __m512i z = _mm512_load_si512(blk + 64 * (8 * (j / 2) + k));
        W[k] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(z, 4) : z, mask);
    }
    const __m512 dsc = row_bytes_times(blk + SC_AT + ROWS * j, row_halves(blk + D_AT));
    const __m512 dmm = row_bytes_times(blk + M_AT + ROWS * j, row_halves(blk + DMIN_AT));
    const int64_t b = sb * (QK_K / QK) + j;
    GRAFT_AVX512_UNROLL
    for (int t = 0; t < T; t++) {
        __m512i isum = graft__r16_block_sum(_mm512_setzero_si512(), W, acts[t].q + b * QK);
        __m512 scale = _mm512_mul_ps(dsc, _mm512_set1_ps(acts[t].dx[b]));
        __m512 sum = _mm512_cvtepi32_ps(isum);
        acc[t] = _mm512_fmadd_ps(sum, scale, acc[t]);
        acc[t] = _mm512_fnmadd_ps(dmm, _mm512_set1_ps(((const float *)acts[t].extra)[b]),
                                 acc[t]);
    }
}

/* y of row blocks rbs (RB) for the call's T tokens: RB, T, prefetch are constants in each
 * instance, acc its own array of RB * T accumulators. With prefetch, each row block's
 * weights are prefetched AHEAD bytes ahead of their reads, a few lines per sub-block (one
 * burst per super-block stalls the decode). One token (a decode step) takes a sub-block
 * of every row block in turn, so that the row blocks' streams advance together; more
 * tokens take a super-block of each row block in turn, whose weights then stay in
 * registers and L1 for all of them (figures: bench/results/2026-12-01-kernel-decisions.md).
 * Either way each (row, token) adds its sub-blocks in order. */
static inline __attribute__((always_inline)) void k4_tile(int RB, int T, int prefetch,
                                                          __m512 *acc,
                                                          const graft__r16_call *c,
                                                          const int64_t *rbs)
{
    graft__r16_acts acts[MAX_T];
    const uint8_t *rbw[MAX_RB];
    graft__r16_tile_begin(c, rbs, RB, T, acts, rbw, acc);
    for (int64_t sb = 0; sb < c->n_in / QK_K; sb++) {
        if (T == 1) {
            for (int j = 0; j < 8; j++) {
                GRAFT_AVX512_UNROLL
                for (int r = 0; r < RB; r++)
                    k4_sub_block(T, prefetch, acc + r * T, rbw[r] + (size_t)sb * SB_BYTES, j,
                                 sb, acts);
            }
        } else {
            GRAFT_AVX512_UNROLL
            for (int r = 0; r < RB; r++)
                for (int j = 0; j < 8; j++)
                    k4_sub_block(T, prefetch, acc + r * T, rbw[r] + (size_t)sb * SB_BYTES, j,
                                 sb, acts);
        }
    }
    graft__r16_tile_end(c, rbs, RB, T, acc);
}

#define K4_TILE(name, RB, T, PREFETCH)                                                     \
    static void name(const graft__r16_call *c, const int64_t *rbs)                         \
    {                                                                                      \
        __m512 acc[RB * T];                                                                \
        k4_tile(RB, T, PREFETCH, acc, c, rbs);                                             \
    }

#define K4_TILES_T(T)                                                                      \
    K4_TILE(q4_k_s3x##T, SEGMENTS, T, 1)                                                   \
    K4_TILE(q4_k_s1x##T, 1, T, 1)                                                          \
    K4_TILE(q4_k_c2x##T, 2, T, 0)                                                          \
    K4_TILE(q4_k_c1x##T, 1, T, 0)

K4_TILES_T(1)
K4_TILES_T(2)
K4_TILES_T(3)
K4_TILES_T(4)

/* Three weight streams, where Q8_0 and Q4_0 read four: each Q4_K sub-block takes more
 * arithmetic per byte, and with four the decode's streams fall further behind memory
 * (figures for two, three, four and eight: bench/results/2026-12-01-kernel-decisions.md). */
_Static_assert((int)SEGMENTS <= (int)GRAFT_R16_MAX_SEGMENTS, "the driver's segment arrays");
const graft__r16_kernel graft__r16_q4_k_kernel = {
    SEGMENTS,
    row_block_bytes,
    graft__r16_act_size,
    {q4_k_s3x1, q4_k_s3x2, q4_k_s3x3, q4_k_s3x4},
    {q4_k_s1x1, q4_k_s1x2, q4_k_s1x3, q4_k_s1x4},
    {q4_k_c2x1, q4_k_c2x2, q4_k_c2x3, q4_k_c2x4},
    {q4_k_c1x1, q4_k_c1x2, q4_k_c1x3, q4_k_c1x4}};
