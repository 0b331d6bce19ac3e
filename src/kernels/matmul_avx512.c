/*
 * matmul_avx512.c: the AVX-512 matmul path (graft__matmul_avx512, see matmul_path.h): the
 * path object, the driver that covers [o0, o1) x n_tok with tiles, and the kernels for
 * float weights (F32, F16, BF16). The quantized types live in matmul_q32_avx512.c and
 * matmul_kquant_avx512.c; matmul_avx512.h says how the pieces fit.
 *
 * Driver. The rows [o0, o1) are cut into a few contiguous segments, read side by side as
 * long sequential streams (matmul_avx512.h). Tokens are taken a panel at a time (as many
 * as keep the panel's prepared activations within 256 KiB, in L2), the row steps a block
 * at a time (256 KiB of weights), and every token tile of the panel passes over the
 * block while its weights are in cache: the first tile brings them from memory (and
 * prefetches ahead), the others reuse them. Each tile is the widest whose tokens fit in
 * what is left of the panel; the widths go down to 1, so nothing is padded. Kernels that
 * offer packing (matmul_q32_avx512.c) have a block's rows unpacked once into a stack
 * buffer when the panel has enough tokens to share the work. Which tile computes a
 * (row, token), packed or not, never changes its value (matmul_avx512.h), so the result
 * is the same bits for any n_tok, any position in the batch and any [o0, o1). Packed
 * weight types (matmul_path.h) go to matmul_r16_avx512.c, which has its own driver.
 *
 * Float weights. Activations stay f32 (copied, zero-padded to a multiple of 16). Each
 * (row, token) keeps one 16-lane accumulator: for each chunk of 16 inputs the weights are
 * widened to f32 (F16 with vcvtph2ps, BF16 by shifting into the top half) and added in with
 * one FMA; a ragged last chunk comes from a zero-padded copy. The 16 lanes are summed at
 * the end with graft__avx512_hsum. Compared with the scalar path (one running sum in
 * element order) only the rounding of the additions differs, far within 1e-5 of
 * sum |w||x|. (vdpbf16ps would need bf16 activations, whose 8-bit mantissa costs far more
 * than that.)
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

enum {
    PANEL_BYTES = 256 * 1024, /* prepared activations per token panel */
    BLOCK_BYTES = 256 * 1024, /* weights per row block */
    PACK_BYTES = 128 * 1024,  /* packed weights at a time (on the stack) */
    PACK_MIN_TOKS = 16,       /* fewest tokens in a panel worth packing for */
    PACK_MAX_ACT = 6 * 1024,  /* most activation bytes per token worth packing for (beyond,
                                 a tile's activations no longer fit in L1 with its weights) */
    LANES = 16                /* floats per vector */
};

/* ------------------------------------------------------------------------------------
 * Float weights.
 */

static size_t float_act_bytes(int64_t n_in)
{
    return ((size_t)n_in * sizeof(float) + 63) & ~(size_t)63;
}

static void float_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    (void)type;
    size_t bytes = (size_t)n_in * sizeof(float);
    memcpy(xa, x, bytes);
    memset((uint8_t *)xa + bytes, 0, float_act_bytes(n_in) - bytes);
}

/* The 16 weights at p as floats. */
static inline __m512 load_weights16(uint32_t type, const uint8_t *p)
{
    switch (type) {
    case GRAFT_TYPE_F32:
        return _mm512_loadu_ps(p);
    case GRAFT_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    default: /* BF16: the top 16 bits of an f32 */
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    }
}

/* acc (R, T) += the 16 weights of every row at byte offset `offset` of wrows[r] times
 * activations 16i..16i+15 of every token; prefetch: whether to prefetch the rows ahead. */
static inline __attribute__((always_inline)) void
float_step(uint32_t type, int R, int T, __m512 *acc, const uint8_t *const *wrows,
           size_t offset, const uint8_t *const *acts, int64_t i, int prefetch)
{
    size_t elem = type == GRAFT_TYPE_F32 ? 4 : 2;
    GRAFT_AVX512_UNROLL
    for (int r = 0; r < R; r++) {
        if (prefetch)
            graft__avx512_prefetch(wrows[r] + offset, LANES * elem);
        __m512 w = load_weights16(type, wrows[r] + offset);
        GRAFT_AVX512_UNROLL
        for (int t = 0; t < T; t++)
            acc[r * T + t] = _mm512_fmadd_ps(w, _mm512_load_ps(acts[t] + (size_t)i * 4),
                                             acc[r * T + t]);
    }
}

/* The tile function body for float weights: R, T are constants in each instance, and acc
 * is the instance's own array of exactly R * T accumulators (so the compiler can keep them
 * in registers). A ragged last chunk is read from zero-padded copies of the rows' ends
 * (masked loads would keep the accumulators in memory). */
static inline __attribute__((always_inline)) void
float_tile(uint32_t type, int R, int T, int prefetch, __m512 *acc, const graft__avx512_job *job,
           int seg, int64_t k0, int64_t k1)
{
    size_t elem = type == GRAFT_TYPE_F32 ? 4 : 2;
    int64_t n_in = job->n_in, n_full = n_in / LANES * LANES;
    for (int64_t k = k0; k < k1; k++) {
        const uint8_t *rows[GRAFT_AVX512_MAX_ROWS];
        graft__avx512_step_rows(job, seg, R, k, rows);
        GRAFT_AVX512_UNROLL
        for (int i = 0; i < R * T; i++)
            acc[i] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i < n_full; i += LANES)
            float_step(type, R, T, acc, rows, (size_t)i * elem, job->acts, i, prefetch);
        if (i < n_in) {
            uint8_t tail[GRAFT_AVX512_MAX_ROWS][LANES * sizeof(float)]; // (R, one chunk)
            const uint8_t *tails[GRAFT_AVX512_MAX_ROWS];
            for (int r = 0; r < R; r++) {
                memset(tail[r], 0, sizeof tail[r]);
                memcpy(tail[r], rows[r] + (size_t)i * elem, (size_t)(n_in - i) * elem);
                tails[r] = tail[r];
            }
            float_step(type, R, T, acc, tails, 0, job->acts, i, 0);
        }
        graft__avx512_finish(job, seg, R, T, k, acc);
    }
}

#define FLOAT_TILE(name, TYPE, R, T)                                                   \
    GRAFT_AVX512_DEFINE_TILE(name, float_tile, TYPE, R, T, 1, 0)

/* The rows are cut into FLOAT_SEGMENTS segments; the tile shapes (R rows x T tokens). */
#define FLOAT_SEGMENTS 4
#define FLOAT_KERNEL(name, TYPE)                                                           \
    FLOAT_TILE(name##_4x4, TYPE, 4, 4)                                                     \
    FLOAT_TILE(name##_4x3, TYPE, 4, 3)                                                     \
    FLOAT_TILE(name##_4x2, TYPE, 4, 2)                                                     \
    FLOAT_TILE(name##_4x1, TYPE, 4, 1)                                                     \
    static const graft__avx512_kernel name = {                                             \
        .act_bytes = float_act_bytes,                                                      \
        .act_prepare = float_act_prepare,                                                  \
        .segments = FLOAT_SEGMENTS,                                                        \
        .tiles = {{4, 4, name##_4x4}, {3, 4, name##_4x3}, {2, 4, name##_4x2},              \
                  {1, 4, name##_4x1}}};

FLOAT_KERNEL(f32_kernel, GRAFT_TYPE_F32)
FLOAT_KERNEL(f16_kernel, GRAFT_TYPE_F16)
FLOAT_KERNEL(bf16_kernel, GRAFT_TYPE_BF16)

/* ------------------------------------------------------------------------------------
 * The path.
 */

static const graft__avx512_kernel *kernel_of(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_F32:
        return &f32_kernel;
    case GRAFT_TYPE_F16:
        return &f16_kernel;
    case GRAFT_TYPE_BF16:
        return &bf16_kernel;
    case GRAFT_TYPE_Q4_K:
    case GRAFT_TYPE_Q5_K:
    case GRAFT_TYPE_Q6_K:
        return graft__avx512_kernel_kquant(type);
    default:
        return graft__avx512_kernel_q32(type);
    }
}

static const graft__avx512_kernel *checked_kernel(uint32_t type)
{
    const graft__avx512_kernel *k = kernel_of(type);
    GRAFT_ASSERT(k != NULL);
    return k;
}

static size_t avx512_act_bytes(uint32_t type, int64_t n_in)
{
    GRAFT_ASSERT(n_in >= 0);
    if (type >= GRAFT_TYPE_PACKED_BASE)
        return graft__avx512_r16_act_bytes(type, n_in);
    return checked_kernel(type)->act_bytes(n_in);
}

static void avx512_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    GRAFT_ASSERT(n_in >= 0);
    if (type >= GRAFT_TYPE_PACKED_BASE)
        graft__avx512_r16_act_prepare(type, xa, x, n_in);
    else
        checked_kernel(type)->act_prepare(type, xa, x, n_in);
}

/* The widest of tiles whose tokens fit in n_left (> 0). */
static const graft__avx512_tile *tile_for(const graft__avx512_tile *tiles, int64_t n_left)
{
    int v = 0;
    while (tiles[v].toks > n_left)
        v++;
    return &tiles[v];
}

/* Cuts rows [o0, o1) (not empty) into job->segments contiguous segments, their first rows
 * in seg_start; returns the number of steps (the longest segment). */
static int64_t split_rows(graft__avx512_job *job, const uint8_t *w, int64_t o0, int64_t o1,
                          int64_t *seg_start)
{
    int64_t n = o1 - o0, q = n / job->segments, rem = n % job->segments, start = o0;
    for (int j = 0; j < job->segments; j++) {
        job->len[j] = q + (j < rem);
        seg_start[j] = start;
        job->w0[j] = w + (size_t)(job->len[j] > 0 ? start : o0) * job->row_bytes;
        start += job->len[j];
    }
    return q + (rem > 0);
}

/* One gemm call's operands, and where it is. */
typedef struct gemm_call {
    graft__avx512_job job;
    const graft__avx512_kernel *k;
    float *y;
    const uint8_t *xa;
    size_t act_bytes;
    int64_t seg_start[GRAFT_AVX512_MAX_ROWS];
} gemm_call;

/* Steps [k0, k1) of every segment for the tokens [tp, tp_end) of a panel, in tiles from
 * `tiles`; the first tile over the rows prefetches them (the others find them cached). */
static void run_tiles(gemm_call *c, const graft__avx512_tile *tiles, int64_t tp,
                      int64_t tp_end, int64_t k0, int64_t k1)
{
    const graft__avx512_tile *tile;
    for (int64_t t0 = tp; t0 < tp_end; t0 += tile->toks) {
        tile = tile_for(tiles, tp_end - t0);
        for (int t = 0; t < tile->toks; t++)
            c->job.acts[t] = c->xa + (size_t)(t0 + t) * c->act_bytes;
        for (int j = 0; j < c->job.segments; j++)
            c->job.y0[j] = c->y + t0 * c->job.ldy + c->seg_start[j];
        c->job.prefetch = t0 == tp;
        for (int seg = 0; seg < c->job.segments; seg += tile->rows)
            tile->fn(&c->job, seg, k0, k1);
    }
}

/* The same, packing the rows into buf (PACK_BYTES) a few steps at a time first. */
static void run_packed_tiles(gemm_call *c, uint8_t *buf, int64_t tp, int64_t tp_end,
                             int64_t k0, int64_t k1)
{
    size_t step_bytes = c->job.packed_row_bytes * (size_t)c->job.segments;
    int64_t steps = (int64_t)(PACK_BYTES / step_bytes);
    for (int64_t ks = k0; ks < k1; ks += steps) {
        int64_t ke = k1 - ks < steps ? k1 : ks + steps;
        c->k->pack(&c->job, ks, ke, buf);
        c->job.packed = buf;
        c->job.packed_k0 = ks;
        run_tiles(c, c->k->packed_tiles, tp, tp_end, ks, ke);
    }
}

static void avx512_gemm(uint32_t type, float *y, int64_t ldy, const void *w, int64_t n_in,
                        int64_t o0, int64_t o1, const void *xa, int64_t n_tok)
{
    if (type >= GRAFT_TYPE_PACKED_BASE) {
        graft__avx512_r16_gemm(type, y, ldy, w, n_in, o0, o1, xa, n_tok);
        return;
    }
    gemm_call c;
    c.k = checked_kernel(type);
    GRAFT_ASSERT(n_in >= 0 && 0 <= o0 && o0 <= o1 && n_tok >= 0);
    if (o0 == o1 || n_tok == 0)
        return;
    c.y = y;
    c.xa = xa;
    c.act_bytes = c.k->act_bytes(n_in);
    c.job.row_bytes = graft__type_row_bytes(type, (uint64_t)n_in);
    c.job.ldy = ldy;
    c.job.n_in = n_in;
    c.job.segments = c.k->segments;
    c.job.packed_row_bytes = c.k->pack ? c.k->packed_row_bytes(n_in) : 0;
    GRAFT_ASSERT(c.job.row_bytes > 0 || n_in == 0);
    int64_t steps = split_rows(&c.job, w, o0, o1, c.seg_start);
    int can_pack = c.k->pack != NULL && c.act_bytes <= PACK_MAX_ACT &&
                   c.job.packed_row_bytes * (size_t)c.job.segments <= PACK_BYTES;
    _Alignas(64) uint8_t pack_buf[PACK_BYTES]; // packed rows of a few steps

    /* Row steps per block: the block's weights stay in L2 while every token tile of the
     * panel passes over them. */
    size_t block_bytes = (size_t)c.job.segments * c.job.row_bytes;
    int64_t block =
        block_bytes > 0 && block_bytes < BLOCK_BYTES ? (int64_t)(BLOCK_BYTES / block_bytes) : 1;
    int64_t panel = (int64_t)(PANEL_BYTES / (c.act_bytes ? c.act_bytes : 1));
    panel = panel < GRAFT_AVX512_MAX_TOKS ? GRAFT_AVX512_MAX_TOKS
                                          : panel / GRAFT_AVX512_MAX_TOKS * GRAFT_AVX512_MAX_TOKS;
    for (int64_t tp = 0; tp < n_tok; tp += panel) {
        int64_t tp_end = n_tok - tp < panel ? n_tok : tp + panel;
        int pack = can_pack && tp_end - tp >= PACK_MIN_TOKS;
        for (int64_t kb = 0; kb < steps; kb += block) {
            int64_t kb_end = steps - kb < block ? steps : kb + block;
            if (pack)
                run_packed_tiles(&c, pack_buf, tp, tp_end, kb, kb_end);
            else
                run_tiles(&c, c.k->tiles, tp, tp_end, kb, kb_end);
        }
    }
}

const graft__matmul_path graft__matmul_avx512 = {
    .name = "avx512",
    .act_bytes = avx512_act_bytes,
    .act_prepare = avx512_act_prepare,
    .gemm = avx512_gemm,
    .packed_type = graft__avx512_r16_packed_type,
    .packed_bytes = graft__avx512_r16_packed_bytes,
    .pack = graft__avx512_r16_pack,
};
