/*
 * matmul_r16_avx512.c: the avx512 path's packed weights (matmul_path.h): Q8_0 and Q4_0
 * matrices repacked once, when the model loads, into blocks of 16 interleaved rows, and the
 * kernels that compute with them; Q4_K's packing and tiles are matmul_r16_kquant_avx512.c,
 * run by the driver here.
 *
 * Why. vpdpbusd multiplies 64 unsigned by 64 signed bytes and adds each four products into
 * one of 16 32-bit lanes. In the GGUF layout a lane holds a piece of one row, so every
 * (row, token) pays for its own scales, its own conversions and a final sum of lanes
 * (matmul_q32_avx512.c: about 6 operations for 2 vpdpbusd). Here lane r of every weight
 * vector holds four consecutive quants of row r of a 16-row block, so one vpdpbusd with
 * the token's four matching activation quants broadcast to all lanes computes four
 * products for each of the 16 rows; the lanes are the rows and never need summing, and one
 * vector of the 16 rows' scales serves them all. Per block of 32 inputs, 16 rows and one
 * token:
 *     i   = bias + sum_k vpdpbusd(W_k, broadcast(a[4k..4k+3]))   (k = 0..7, exact)
 *     acc = fma(float(i), d_w * dx, acc)                          (lane r: row r)
 * 8 vpdpbusd and 5 other operations; the weight vectors are loaded (Q4_0: and split into
 * nibbles) once per tile and used by all its tokens.
 *
 * Activations are quantized per token and block of 32 as for the unpacked kernels
 * (graft__avx512_quantize32): quants a, scale dx, and bias = -offset * sum(a), which turns
 * the unsigned weight quants u back into signed ones: Q8_0 is stored as u = q + 128 (top
 * bit flipped), Q4_0 keeps its nibbles u = q + 8.
 *
 * Packed matrix: n_out / 16 row blocks of row_block_bytes each, 64-byte aligned. Row
 * block R (rows 16R..16R+15) holds its blocks b < nb = n_in / 32 in pairs: the quant
 * vectors of block 2p, those of 2p + 1, then the two blocks' f16 scales (16 each, row
 * order); an odd last block is paired with zeros. Quant vectors: Q8_0 has 8 per block,
 * vector k lane r = bytes 4k..4k+3 of row 16R + r's quants; Q4_0 has 4, vector k lane r =
 * the row's nibble bytes 4k..4k+3, whose low nibbles are elements 4k..4k+3 and high
 * nibbles 16 + 4k..16 + 4k + 3. So a row block is one sequential stream, read in order.
 *
 * Tiles are 1, 2 or 4 row blocks times 1-4 tokens (graft__avx512_r16_gemm says which run
 * where). Every (row, token) sums its blocks in order with one accumulator, whatever tile
 * it is in, so the result is the same bits for any n_tok, position in the batch and row
 * range.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx512.h"
#include "kernels/quant_formats.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

enum {
    ROWS = GRAFT_R16_ROWS,             /* rows per row block */
    SEGMENTS = 4,                      /* weight streams read side by side (Q8_0, Q4_0) */
    MAX_SEGMENTS = GRAFT_R16_MAX_SEGMENTS, /* the most any packed kernel reads */
    MAX_RB = MAX_SEGMENTS,             /* row blocks per tile */
    MAX_T = GRAFT_R16_MAX_T,           /* tokens per tile */
    PANEL_BYTES = 192 * 1024,          /* prepared activations per token panel (in L2) */
    AHEAD_BYTES = GRAFT_R16_AHEAD_BYTES
};

_Static_assert((int)SEGMENTS <= (int)MAX_SEGMENTS, "the driver's segment arrays");

#define Q8_0_R16 (GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q8_0)
#define Q4_0_R16 (GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q4_0)
#define Q4_K_R16 (GRAFT_TYPE_PACKED_BASE + GRAFT_TYPE_Q4_K)

/* Quant bytes of one block of a row block. */
static inline size_t block_qs_bytes(uint32_t ptype)
{
    return ptype == Q8_0_R16 ? 8 * 64 : 4 * 64;
}

/* Bytes of a pair of blocks of a row block: two blocks' quants, then their scales. */
static inline size_t pair_bytes(uint32_t ptype)
{
    return 2 * block_qs_bytes(ptype) + 2 * ROWS * sizeof(uint16_t);
}

static size_t row_block_bytes(uint32_t ptype, int64_t n_in)
{
    return (size_t)((n_in / QK + 1) / 2) * pair_bytes(ptype);
}

/* The quants and the scales of block b of the row block at rbw. */
static inline const uint8_t *block_qs(uint32_t ptype, const uint8_t *rbw, int64_t b)
{
    return rbw + (size_t)(b / 2) * pair_bytes(ptype) + (size_t)(b % 2) * block_qs_bytes(ptype);
}

static inline const uint8_t *block_scales(uint32_t ptype, const uint8_t *rbw, int64_t b)
{
    return rbw + (size_t)(b / 2) * pair_bytes(ptype) + 2 * block_qs_bytes(ptype) +
           (size_t)(b % 2) * ROWS * sizeof(uint16_t);
}

/* ------------------------------------------------------------------------------------
 * Packing.
 */

/* dst = w (n_out rows of Q8_0 or Q4_0) packed (see the top of the file). */
static void q32_pack(uint32_t ptype, void *dst, const void *w, int64_t n_in, int64_t n_out)
{
    uint32_t type = ptype - GRAFT_TYPE_PACKED_BASE;
    bool q8 = type == GRAFT_TYPE_Q8_0;
    size_t in_block = q8 ? 34 : 18;
    size_t row_bytes = graft__type_row_bytes(type, (uint64_t)n_in);
    size_t rbb = row_block_bytes(ptype, n_in);
    int64_t nb = n_in / QK;
    for (int64_t rb = 0; rb < n_out / ROWS; rb++) {
        uint8_t *out = (uint8_t *)dst + (size_t)rb * rbb;
        for (int r = 0; r < ROWS; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(rb * ROWS + r) * row_bytes;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *block = row + (size_t)b * in_block;
                uint8_t *q = (uint8_t *)block_qs(ptype, out, b) + 4 * r;
                memcpy((uint8_t *)block_scales(ptype, out, b) + 2 * r, block, 2);
                for (int k = 0; k < (q8 ? 8 : 4); k++) {
                    uint32_t four;
                    memcpy(&four, block + 2 + 4 * k, 4);
                    if (q8)
                        four ^= 0x80808080u;
                    memcpy(q + 64 * k, &four, 4);
                }
            }
        }
        if (nb % 2 == 1) { /* the zeros an odd last block is paired with */
            memset((uint8_t *)block_qs(ptype, out, nb), 0, block_qs_bytes(ptype));
            memset((uint8_t *)block_scales(ptype, out, nb), 0, ROWS * sizeof(uint16_t));
        }
    }
}

/* ------------------------------------------------------------------------------------
 * Activations (matmul_avx512.h): quants, then per block dx and the bias that turns the
 * unsigned weight quants back into signed ones.
 */

static void q32_act_prepare(uint32_t ptype, void *xa, const float *x, int64_t n_in)
{
    GRAFT_ASSERT(n_in % QK == 0);
    int offset = ptype == Q8_0_R16 ? 128 : 8;
    memset(xa, 0, graft__r16_act_size(n_in));
    graft__r16_acts a = graft__r16_acts_at(xa, n_in);
    for (int64_t b = 0; b < n_in / QK; b++) {
        int8_t *q = (int8_t *)a.q + b * QK;
        int sum = graft__avx512_quantize32(x + b * QK, q, q + 16, (float *)&a.dx[b]);
        ((int32_t *)a.extra)[b] = -offset * sum;
    }
}

/* ------------------------------------------------------------------------------------
 * Tiles.
 */

/* W (8) = the weight vectors of one block at qs; W[k] meets activation quants 4k..4k+3. */
static inline __attribute__((always_inline)) void load_block(uint32_t ptype,
                                                             const uint8_t *qs, __m512i *W)
{
    if (ptype == Q8_0_R16) {
        GRAFT_AVX512_UNROLL
        for (int k = 0; k < 8; k++)
            W[k] = _mm512_load_si512(qs + 64 * k);
        return;
    }
    __m512i mask = _mm512_set1_epi8(0x0f);
    GRAFT_AVX512_UNROLL
    for (int k = 0; k < 4; k++) {
        __m512i z = graft__avx512_load_kept(qs + 64 * k);
        W[k] = _mm512_and_si512(z, mask);
        W[k + 4] = _mm512_and_si512(_mm512_srli_epi16(z, 4), mask);
    }
}

/* acc += one block of 16 rows (W, scales dw) times one token's block (quants q). */
static inline __attribute__((always_inline)) __m512
dot_block(__m512 acc, const __m512i *W, __m512 dw, const int8_t *q, float dx, int32_t bias)
{
    __m512i i = graft__r16_block_sum(_mm512_set1_epi32(bias), W, q);
    __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scale, acc);
}

/* y of row blocks rbs (RB) for the call's T tokens: RB, T, prefetch are constants in each
 * instance, acc its own array of RB * T accumulators. With prefetch, each row block's
 * weights are prefetched AHEAD_BYTES ahead of their reads, which runs on into the row
 * blocks that follow it. */
static inline __attribute__((always_inline)) void r16_tile(uint32_t ptype, int RB, int T,
                                                           int prefetch, __m512 *acc,
                                                           const graft__r16_call *c,
                                                           const int64_t *rbs)
{
    int64_t nb = c->n_in / QK;
    graft__r16_acts acts[MAX_T];
    const uint8_t *rbw[MAX_RB];
    graft__r16_tile_begin(c, rbs, RB, T, acts, rbw, acc);
    for (int64_t b2 = 0; b2 < nb; b2 += 2) {
        GRAFT_AVX512_UNROLL
        for (int r = 0; r < RB; r++) {
            if (prefetch) {
                const char *ahead = (const char *)block_qs(ptype, rbw[r], b2) + AHEAD_BYTES;
                for (size_t l = 0; l < pair_bytes(ptype); l += 64)
                    _mm_prefetch(ahead + l, _MM_HINT_T0);
            }
            for (int64_t b = b2; b < b2 + 2 && b < nb; b++) {
                __m512i W[8];
                load_block(ptype, block_qs(ptype, rbw[r], b), W);
                __m512 dw = _mm512_cvtph_ps(
                    _mm256_load_si256((const __m256i *)block_scales(ptype, rbw[r], b)));
                GRAFT_AVX512_UNROLL
                for (int t = 0; t < T; t++)
                    acc[r * T + t] = dot_block(acc[r * T + t], W, dw, acts[t].q + b * QK,
                                               acts[t].dx[b], ((const int32_t *)acts[t].extra)[b]);
            }
        }
    }
    graft__r16_tile_end(c, rbs, RB, T, acc);
}

#define R16_TILE(name, PTYPE, RB, T, PREFETCH)                                             \
    static void name(const graft__r16_call *c, const int64_t *rbs)                         \
    {                                                                                      \
        __m512 acc[RB * T];                                                                \
        r16_tile(PTYPE, RB, T, PREFETCH, acc, c, rbs);                                     \
    }

#define R16_TILES_T(name, PTYPE, T)                                                        \
    R16_TILE(name##_s4x##T, PTYPE, SEGMENTS, T, 1)                                         \
    R16_TILE(name##_s1x##T, PTYPE, 1, T, 1)                                                \
    R16_TILE(name##_c2x##T, PTYPE, 2, T, 0)                                                \
    R16_TILE(name##_c1x##T, PTYPE, 1, T, 0)

#define R16_KERNEL(name, PTYPE, ROW_BLOCK_BYTES)                                           \
    R16_TILES_T(name, PTYPE, 1)                                                            \
    R16_TILES_T(name, PTYPE, 2)                                                            \
    R16_TILES_T(name, PTYPE, 3)                                                            \
    R16_TILES_T(name, PTYPE, 4)                                                            \
    static const graft__r16_kernel name = {                                                \
        SEGMENTS,                                                                          \
        ROW_BLOCK_BYTES,                                                                   \
        graft__r16_act_size,                                                               \
        {name##_s4x1, name##_s4x2, name##_s4x3, name##_s4x4},                              \
        {name##_s1x1, name##_s1x2, name##_s1x3, name##_s1x4},                              \
        {name##_c2x1, name##_c2x2, name##_c2x3, name##_c2x4},                              \
        {name##_c1x1, name##_c1x2, name##_c1x3, name##_c1x4}};

static size_t q8_0_row_block_bytes(int64_t n_in)
{
    return row_block_bytes(Q8_0_R16, n_in);
}

static size_t q4_0_row_block_bytes(int64_t n_in)
{
    return row_block_bytes(Q4_0_R16, n_in);
}

R16_KERNEL(q8_0_kernel, Q8_0_R16, q8_0_row_block_bytes)
R16_KERNEL(q4_0_kernel, Q4_0_R16, q4_0_row_block_bytes)

/* ------------------------------------------------------------------------------------
 * The driver.
 */

static const graft__r16_kernel *kernel_of(uint32_t ptype)
{
    switch (ptype) {
    case Q8_0_R16:
        return &q8_0_kernel;
    case Q4_K_R16:
        return &graft__r16_q4_k_kernel;
    default:
        GRAFT_ASSERT(ptype == Q4_0_R16);
        return &q4_0_kernel;
    }
}

/* The row blocks [rb0, rb1) are cut into the kernel's `segments` contiguous segments, and
 * step k takes row block k of each. The first token tile of a panel streams a step's
 * weights from memory, all segments side by side, each with a prefetch running ahead
 * through its segment: a few concurrent sequential streams (one stream at a time keeps
 * too few reads in flight for a decode; how many is best depends on the kernel, see its
 * `segments`). The other token tiles of the panel find the step's weights in cache and
 * take its row blocks two at a time. */
void graft__avx512_r16_gemm(uint32_t ptype, float *y, int64_t ldy, const void *w, int64_t n_in,
                            int64_t o0, int64_t o1, const void *xa, int64_t n_tok)
{
    GRAFT_ASSERT(n_in > 0 && 0 <= o0 && o0 <= o1 && n_tok >= 0);
    GRAFT_ASSERT(o0 % ROWS == 0 && o1 % ROWS == 0);
    const graft__r16_kernel *k = kernel_of(ptype);
    graft__r16_call c = {w, k->row_block_bytes(n_in), n_in, y, ldy, {0}, {0}};
    size_t act_bytes = k->act_bytes(n_in);
    int64_t panel = (int64_t)(PANEL_BYTES / act_bytes);
    panel = panel < MAX_T ? MAX_T : panel / MAX_T * MAX_T;
    int64_t rb0 = o0 / ROWS, n_rb = o1 / ROWS - rb0;
    const int segments = k->segments;
    int64_t seg_len = n_rb / segments, rem = n_rb % segments, seg_start[MAX_SEGMENTS];
    for (int j = 0; j < segments; j++)
        seg_start[j] = rb0 + j * seg_len + (j < rem ? j : rem);
    int64_t steps = seg_len + (rem > 0);
    for (int64_t tp = 0; tp < n_tok; tp += panel) {
        int64_t tp_end = n_tok - tp < panel ? n_tok : tp + panel;
        for (int64_t step = 0; step < steps; step++) {
            int64_t rbs[MAX_SEGMENTS];
            int n = 0;
            for (int j = 0; j < segments; j++)
                if (step < seg_len + (j < rem))
                    rbs[n++] = seg_start[j] + step;
            for (int64_t t0 = tp; t0 < tp_end; t0 += MAX_T) {
                int n_t = tp_end - t0 < MAX_T ? (int)(tp_end - t0) : MAX_T;
                for (int t = 0; t < n_t; t++) {
                    c.acts[t] = (const uint8_t *)xa + (size_t)(t0 + t) * act_bytes;
                    c.ys[t] = y + (t0 + t) * ldy;
                }
                int r = 0;
                if (t0 == tp && n == segments) {
                    k->stream_all[n_t - 1](&c, rbs);
                    r = n;
                }
                for (; t0 != tp && r + 2 <= n; r += 2)
                    k->cached_two[n_t - 1](&c, rbs + r);
                for (; r < n; r++)
                    (t0 == tp ? k->stream_one : k->cached_one)[n_t - 1](&c, rbs + r);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------
 * The path's entries for packed types.
 */

uint32_t graft__avx512_r16_packed_type(uint32_t type, int64_t n_in, int64_t n_out)
{
    if (type != GRAFT_TYPE_Q8_0 && type != GRAFT_TYPE_Q4_0 && type != GRAFT_TYPE_Q4_K)
        return 0;
    const int64_t block = type == GRAFT_TYPE_Q4_K ? 256 : QK;
    if (n_in <= 0 || n_in % block != 0 || n_out <= 0 || n_out % ROWS != 0)
        return 0;
    return GRAFT_TYPE_PACKED_BASE + type;
}

size_t graft__avx512_r16_packed_bytes(uint32_t ptype, int64_t n_in, int64_t n_out)
{
    return (size_t)(n_out / ROWS) * kernel_of(ptype)->row_block_bytes(n_in);
}

void graft__avx512_r16_pack(uint32_t ptype, void *dst, const void *w, int64_t n_in,
                            int64_t n_out)
{
    GRAFT_ASSERT(graft__avx512_r16_packed_type(ptype - GRAFT_TYPE_PACKED_BASE, n_in, n_out) ==
                 ptype);
    if (ptype == Q4_K_R16)
        graft__r16_q4_k_pack(dst, w, n_in, n_out);
    else
        q32_pack(ptype, dst, w, n_in, n_out);
}

size_t graft__avx512_r16_act_bytes(uint32_t ptype, int64_t n_in)
{
    return kernel_of(ptype)->act_bytes(n_in);
}

void graft__avx512_r16_act_prepare(uint32_t ptype, void *xa, const float *x, int64_t n_in)
{
    if (ptype == Q4_K_R16)
        graft__r16_q4_k_act_prepare(xa, x, n_in);
    else
        q32_act_prepare(ptype, xa, x, n_in);
}
