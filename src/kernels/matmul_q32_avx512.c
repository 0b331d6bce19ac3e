/*
 * matmul_q32_avx512.c: AVX-512 kernels for the types with blocks of 32 elements: Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL (part of the avx512 path, see matmul_avx512.h; the
 * block layouts are documented in dequantize.c).
 *
 * Activations are quantized per token as llama.cpp does for these types: each block of 32
 * gets a scale dx = max|x| / 127 (kept as f32) and quants a = round(x / dx) in -127..127.
 * The products are then integer dot products of weight quants with activation quants,
 * done by vpdpbusd (unsigned bytes times signed bytes, summed four at a time into 32-bit
 * lanes). Weight quants are made unsigned by an offset, which the activation side corrects
 * for: Q4_0 quants are q - 8 with q in 0..15, Q5_0 q - 16, Q8_0 and IQ4_NL values v become
 * v + 128 (a flipped top bit; a table of value + 128), so
 *     sum (q - off) a = sum q a - off * sum a,
 * and -off * sum a is precomputed per block and starts the integer sum. Q4_1/Q5_1 weights
 * are d q + m: their min term m dx sum a uses dx sum a, also precomputed.
 *
 * Work is done in groups of 4 blocks (128 elements). For one weight row a group unpacks to
 * two vectors of 64 unsigned quants, "lo" and "hi", where byte 16b + j holds element j resp.
 * 16 + j of block b, and a vector of the 4 block scales each repeated over 4 lanes. The
 * activations are stored in the same order, so for each (row, token) a group costs
 *     i   = bias + vpdpbusd(lo, a_lo) + vpdpbusd(hi, a_hi)   (lanes 4b..4b+3: block b)
 *     acc = fma(float(i), d_w * dx, acc)                      (+ fma(m_w, dx sum a, acc))
 * The weight bytes of a group are gathered with word permutes (every field of these
 * blocks starts at an even offset) from one 64-byte load and the rest of the group (two or
 * three 64-byte loads for Q5_0 and Q8_0), never reading outside the group. A row whose
 * length is not a multiple of 128 ends with a group of 1-3 blocks, copied into a zeroed
 * buffer first; its missing blocks have scale 0.
 *
 * Packing: for prefill the driver can have these unpacked vectors stored once per row and
 * loaded by every token tile (graft__avx512_kernel.pack). It pays where unpacking is
 * heavier than three loads (Q8_0, Q5_0, IQ4_NL; for Q4_0, Q4_1, Q5_1 it makes no
 * difference), and only while a tile's activations stay in L1: the driver packs for n_in
 * up to 3072 (figures: bench/results/2026-12-01-kernel-decisions.md).
 *
 * The integer sums are exact, and every (row, token) runs the same float operations in
 * the same order, so tiles of any shape give the same bits (matmul_avx512.h).
 */
#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx512.h"
#include "kernels/quant_formats.h"
#include "util/util.h"

enum {
    GROUP = 128,       /* elements per group */
    GROUP_BLOCKS = 4,  /* blocks per group */
    MAX_GROUP_BYTES = GROUP_BLOCKS * BLOCK_BYTES_Q8_0
};

/* One token's activations for one group (128 elements), in the order the weights unpack
 * to. Types with a min term (Q4_1, Q5_1) use act32_min, the others act32. */
typedef struct act32 {
    int8_t lo[64];    /* byte 16b + j: quant of element 32b + j (block b < 4, j < 16) */
    int8_t hi[64];    /* byte 16b + j: quant of element 32b + 16 + j */
    int32_t bias[16]; /* lane 4b: -offset * (sum of block b's quants); other lanes 0 */
    float dx[16];     /* lanes 4b..4b+3: scale of block b */
} act32;

typedef struct act32_min {
    act32 q;
    float sx[16]; /* lane 4b: dx_b * (sum of block b's quants); other lanes 0 */
} act32_min;

/* One weight row's group, unpacked. */
typedef struct w32 {
    __m512i lo, hi; /* unsigned quants, ordered as act32 lo/hi */
    __m512 d;       /* lanes 4b..4b+3: scale of block b */
    __m512 m;       /* Q4_1/Q5_1: lanes 4b..4b+3: min of block b */
} w32;

static inline int block_bytes(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_Q4_0:
        return BLOCK_BYTES_Q4_0;
    case GRAFT_TYPE_IQ4_NL:
        return BLOCK_BYTES_IQ4_NL;
    case GRAFT_TYPE_Q4_1:
        return BLOCK_BYTES_Q4_1;
    case GRAFT_TYPE_Q5_0:
        return BLOCK_BYTES_Q5_0;
    case GRAFT_TYPE_Q5_1:
        return BLOCK_BYTES_Q5_1;
    default: /* Q8_0 */
        return BLOCK_BYTES_Q8_0;
    }
}

static bool has_min(uint32_t type)
{
    return type == GRAFT_TYPE_Q4_1 || type == GRAFT_TYPE_Q5_1;
}

/* What the activation side subtracts: weight quant u (unsigned) stands for u - offset. */
static int quant_offset(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_Q4_0:
        return 8;
    case GRAFT_TYPE_Q5_0:
        return 16;
    case GRAFT_TYPE_Q8_0:
    case GRAFT_TYPE_IQ4_NL:
        return 128;
    default: /* Q4_1, Q5_1: unsigned quants, min term instead */
        return 0;
    }
}

/* ------------------------------------------------------------------------------------
 * Activations.
 */

static size_t act_stride(uint32_t type)
{
    return has_min(type) ? sizeof(act32_min) : sizeof(act32);
}

#define Q32_ACT_BYTES(name, stride)                                                        \
    static size_t name(int64_t n_in)                                                       \
    {                                                                                      \
        return (size_t)((n_in + GROUP - 1) / GROUP) * (stride);                            \
    }
Q32_ACT_BYTES(act_bytes_plain, sizeof(act32))
Q32_ACT_BYTES(act_bytes_min, sizeof(act32_min))

/* xa (act_bytes) = x (n_in) quantized per block, in groups (see act32). */
static void q32_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    GRAFT_ASSERT(n_in % QK == 0);
    size_t stride = act_stride(type);
    int offset = quant_offset(type);
    int64_t n_groups = (n_in + GROUP - 1) / GROUP;
    memset(xa, 0, (size_t)n_groups * stride);
    for (int64_t i = 0; i < n_in / QK; i++) {
        uint8_t *g = (uint8_t *)xa + (size_t)(i / GROUP_BLOCKS) * stride;
        act32 *a = (act32 *)g;
        int b = (int)(i % GROUP_BLOCKS);
        float dx;
        int sum = graft__avx512_quantize32(x + i * QK, a->lo + 16 * b, a->hi + 16 * b, &dx);
        a->bias[4 * b] = -offset * sum;
        for (int l = 0; l < 4; l++)
            a->dx[4 * b + l] = dx;
        if (has_min(type))
            ((act32_min *)g)->sx[4 * b] = dx * (float)sum;
    }
}

/* ------------------------------------------------------------------------------------
 * Weights: gathering a group's fields with 16-bit permutes.
 *
 * A group of 4 blocks of `s` bytes is read as z1 = the 64 bytes at the group start and
 * z2 = bytes from z2off to the group's end: the rest of the group when it is a whole
 * number of 8/16/32-byte loads (z2off = 64), else the 64 bytes that end with the group.
 * Nothing outside the group is read. Index WORD_AT(byte, z2off) names the 16-bit word at
 * `byte` in the pair (z1, z2) as vpermt2w counts: 0..31 in z1, 32..63 in z2.
 */
#define WORD_AT(byte, z2off) ((byte) < 64 ? (byte) / 2 : 32 + ((byte) - (z2off)) / 2)
/* Word k of a quants vector: block k / 8, bytes 2 (k % 8) of its 16 starting at off. */
#define QS_WORD(s, off, z2off, k) WORD_AT((s) * ((k) / 8) + (off) + 2 * ((k) % 8), z2off)
/* Word k of a scales vector: the f16 at off of block k / 4 (16 words; the rest unused). */
#define SC_WORD(s, off, z2off, k) ((k) < 16 ? WORD_AT((s) * ((k) / 4) + (off), z2off) : 0)
/* Q8_0's second halves, blocks 0-2 (block 3 comes from a third load, see unpack_q8_0). */
#define Q8_HI_WORD(s, off, z2off, k) ((k) < 24 ? QS_WORD(s, off, z2off, k) : 0)

#define INDEX32(F, s, off, z2off)                                                           \
    {F(s, off, z2off, 0),  F(s, off, z2off, 1),  F(s, off, z2off, 2),  F(s, off, z2off, 3),  \
     F(s, off, z2off, 4),  F(s, off, z2off, 5),  F(s, off, z2off, 6),  F(s, off, z2off, 7),  \
     F(s, off, z2off, 8),  F(s, off, z2off, 9),  F(s, off, z2off, 10), F(s, off, z2off, 11), \
     F(s, off, z2off, 12), F(s, off, z2off, 13), F(s, off, z2off, 14), F(s, off, z2off, 15), \
     F(s, off, z2off, 16), F(s, off, z2off, 17), F(s, off, z2off, 18), F(s, off, z2off, 19), \
     F(s, off, z2off, 20), F(s, off, z2off, 21), F(s, off, z2off, 22), F(s, off, z2off, 23), \
     F(s, off, z2off, 24), F(s, off, z2off, 25), F(s, off, z2off, 26), F(s, off, z2off, 27), \
     F(s, off, z2off, 28), F(s, off, z2off, 29), F(s, off, z2off, 30), F(s, off, z2off, 31)}

/* Permute indexes per type: quants, scales (d) and mins (m). */
static const _Alignas(64) uint16_t q4_0_qs[32] = INDEX32(QS_WORD, BLOCK_BYTES_Q4_0, 2, 64);
static const _Alignas(64) uint16_t q4_0_d[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q4_0, 0, 64);
static const _Alignas(64) uint16_t q4_1_qs[32] = INDEX32(QS_WORD, BLOCK_BYTES_Q4_1, 4, 64);
static const _Alignas(64) uint16_t q4_1_d[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q4_1, 0, 64);
static const _Alignas(64) uint16_t q4_1_m[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q4_1, 2, 64);
static const _Alignas(64) uint16_t q5_0_qs[32] = INDEX32(QS_WORD, BLOCK_BYTES_Q5_0, 6, 24);
static const _Alignas(64) uint16_t q5_0_d[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q5_0, 0, 24);
static const _Alignas(64) uint16_t q5_1_qs[32] = INDEX32(QS_WORD, BLOCK_BYTES_Q5_1, 8, 64);
static const _Alignas(64) uint16_t q5_1_d[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q5_1, 0, 64);
static const _Alignas(64) uint16_t q5_1_m[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q5_1, 2, 64);
static const _Alignas(64) uint16_t q8_0_lo[32] = INDEX32(QS_WORD, BLOCK_BYTES_Q8_0, 2, 64);
static const _Alignas(64) uint16_t q8_0_hi[32] = INDEX32(Q8_HI_WORD, BLOCK_BYTES_Q8_0, 18, 64);
static const _Alignas(64) uint16_t q8_0_d[32] = INDEX32(SC_WORD, BLOCK_BYTES_Q8_0, 0, 64);

/* IQ4_NL's 16 values plus 128 (so unsigned), in each 128-bit lane for vpshufb. */
#define PLUS_128(v) ((v) + 128)
static const _Alignas(64) uint8_t iq4nl_values_u8[64] = {
    GRAFT_IQ4_NL_VALUES(PLUS_128), GRAFT_IQ4_NL_VALUES(PLUS_128),
    GRAFT_IQ4_NL_VALUES(PLUS_128), GRAFT_IQ4_NL_VALUES(PLUS_128)};
#undef PLUS_128

static inline __m512i index_vec(const uint16_t *idx)
{
    return _mm512_load_si512(idx);
}

/* Words idx of the pair (z1, z2) (vpermt2w). */
static inline __m512i gather_words(__m512i z1, const uint16_t *idx, __m512i z2)
{
    return _mm512_permutex2var_epi16(z1, index_vec(idx), z2);
}

/* The 4 f16 scales gathered by idx from (z1, z2), each over 4 lanes, as floats. */
static inline __m512 gather_scales(__m512i z1, const uint16_t *idx, __m512i z2)
{
    __m512i words = gather_words(z1, idx, z2);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(words));
}

/* The same when all 4 are in z1 (vpermw leaves z1 intact for the quants' permute). */
static inline __m512 gather_scales1(__m512i z1, const uint16_t *idx)
{
    __m512i words = _mm512_permutexvar_epi16(index_vec(idx), z1);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(words));
}

/* Splits 64 bytes of packed nibbles into low and high nibbles. */
static inline void split_nibbles(__m512i qs, __m512i *lo, __m512i *hi)
{
    __m512i mask = _mm512_set1_epi8(0x0f);
    *lo = _mm512_and_si512(qs, mask);
    *hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), mask);
}

/* The fifth bits of a Q5 group: qh of block b is the u32 at g + b * s + off; bit j goes
 * to byte 16b + j of lo (j < 16) or of hi (j >= 16). */
static inline void add_fifth_bits(const uint8_t *g, int s, int off, w32 *w)
{
    uint64_t lo_bits = 0, hi_bits = 0;
    for (int b = 0; b < GROUP_BLOCKS; b++) {
        uint32_t qh;
        memcpy(&qh, g + b * s + off, sizeof qh);
        lo_bits |= (uint64_t)(qh & 0xffff) << (16 * b);
        hi_bits |= (uint64_t)(qh >> 16) << (16 * b);
    }
    __m512i sixteen = _mm512_set1_epi8(16);
    w->lo = _mm512_mask_add_epi8(w->lo, (__mmask64)lo_bits, w->lo, sixteen);
    w->hi = _mm512_mask_add_epi8(w->hi, (__mmask64)hi_bits, w->hi, sixteen);
}

static inline w32 unpack_q4_0(const uint8_t *g)
{
    w32 w;
    __m512i z1 = _mm512_loadu_si512(g);
    __m512i z2 = _mm512_zextsi128_si512(_mm_loadl_epi64((const __m128i *)(g + 64)));
    w.d = gather_scales1(z1, q4_0_d);
    split_nibbles(gather_words(z1, q4_0_qs, z2), &w.lo, &w.hi);
    w.m = _mm512_setzero_ps();
    return w;
}

static inline w32 unpack_iq4_nl(const uint8_t *g)
{
    w32 w = unpack_q4_0(g); /* same layout; codes index the value table */
    __m512i table = _mm512_load_si512(iq4nl_values_u8);
    w.lo = _mm512_shuffle_epi8(table, w.lo);
    w.hi = _mm512_shuffle_epi8(table, w.hi);
    return w;
}

static inline w32 unpack_q4_1(const uint8_t *g)
{
    w32 w;
    __m512i z1 = _mm512_loadu_si512(g);
    __m512i z2 = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(g + 64)));
    w.d = gather_scales1(z1, q4_1_d);
    w.m = gather_scales1(z1, q4_1_m);
    split_nibbles(gather_words(z1, q4_1_qs, z2), &w.lo, &w.hi);
    return w;
}

static inline w32 unpack_q5_0(const uint8_t *g)
{
    w32 w;
    __m512i z1 = graft__avx512_load_kept(g), z2 = _mm512_loadu_si512(g + 24);
    split_nibbles(gather_words(z1, q5_0_qs, z2), &w.lo, &w.hi);
    add_fifth_bits(g, 22, 2, &w);
    w.d = gather_scales(z1, q5_0_d, z2);
    w.m = _mm512_setzero_ps();
    return w;
}

static inline w32 unpack_q5_1(const uint8_t *g)
{
    w32 w;
    __m512i z1 = graft__avx512_load_kept(g);
    __m512i z2 = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(g + 64)));
    split_nibbles(gather_words(z1, q5_1_qs, z2), &w.lo, &w.hi);
    add_fifth_bits(g, 24, 4, &w);
    w.d = gather_scales(z1, q5_1_d, z2);
    w.m = gather_scales(z1, q5_1_m, z2);
    return w;
}

/* Q8_0: 136 bytes per group; the second half of block 3 (bytes 120..135) is words 24..31
 * of the 64 bytes at 72, exactly where hi wants them. */
static inline w32 unpack_q8_0(const uint8_t *g)
{
    w32 w;
    __m512i z1 = graft__avx512_load_kept(g), z2 = _mm512_loadu_si512(g + 64);
    __m512i z3 = _mm512_loadu_si512(g + 72);
    __m512i flip = _mm512_set1_epi8((char)0x80);
    w.lo = _mm512_xor_si512(gather_words(z1, q8_0_lo, z2), flip);
    __m512i hi = gather_words(z1, q8_0_hi, z2);
    w.hi = _mm512_xor_si512(_mm512_mask_mov_epi16(hi, 0xff000000u, z3), flip);
    w.d = gather_scales(z1, q8_0_d, z2);
    w.m = _mm512_setzero_ps();
    return w;
}

static inline __attribute__((always_inline)) w32 unpack(uint32_t type, const uint8_t *g)
{
    switch (type) {
    case GRAFT_TYPE_Q4_0:
        return unpack_q4_0(g);
    case GRAFT_TYPE_IQ4_NL:
        return unpack_iq4_nl(g);
    case GRAFT_TYPE_Q4_1:
        return unpack_q4_1(g);
    case GRAFT_TYPE_Q5_0:
        return unpack_q5_0(g);
    case GRAFT_TYPE_Q5_1:
        return unpack_q5_1(g);
    default:
        return unpack_q8_0(g);
    }
}

/* ------------------------------------------------------------------------------------
 * Tiles.
 */

/* acc += the (row, token) dot product of one group. */
static inline __attribute__((always_inline)) __m512 dot_group(uint32_t type, __m512 acc,
                                                              const w32 *w, const uint8_t *ag)
{
    const act32 *a = (const act32 *)ag;
    __m512i i = _mm512_load_si512(a->bias);
    i = _mm512_dpbusd_epi32(i, w->lo, _mm512_load_si512(a->lo));
    i = _mm512_dpbusd_epi32(i, w->hi, _mm512_load_si512(a->hi));
    __m512 scale = _mm512_mul_ps(w->d, _mm512_load_ps(a->dx));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scale, acc);
    if (has_min(type))
        acc = _mm512_fmadd_ps(w->m, _mm512_load_ps(((const act32_min *)ag)->sx), acc);
    return acc;
}

/* How a tile gets its weights: unpacking the rows (prefetching them or not), or loading
 * what pack stored (the same vectors, so the same results). */
enum { FROM_ROWS, FROM_ROWS_PREFETCH, FROM_PACKED };

/* Bytes of one group of a packed row: lo, hi, d and (Q4_1/Q5_1) m. */
static inline size_t packed_group_bytes(uint32_t type)
{
    return (has_min(type) ? 4 : 3) * sizeof(__m512);
}

static inline void store_packed(uint32_t type, uint8_t *p, const w32 *w)
{
    _mm512_store_si512(p, w->lo);
    _mm512_store_si512(p + 64, w->hi);
    _mm512_store_ps(p + 128, w->d);
    if (has_min(type))
        _mm512_store_ps(p + 192, w->m);
}

static inline w32 load_packed(uint32_t type, const uint8_t *p)
{
    w32 w;
    w.lo = _mm512_load_si512(p);
    w.hi = _mm512_load_si512(p + 64);
    w.d = _mm512_load_ps(p + 128);
    w.m = has_min(type) ? _mm512_load_ps(p + 192) : _mm512_setzero_ps();
    return w;
}

/* acc (R, T) += one group of every row (at wg[r] + offset: raw blocks, or packed groups)
 * with the same group of every token (at ag[t] + act_offset). */
static inline __attribute__((always_inline)) void
tile_group(uint32_t type, int R, int T, int source, __m512 *acc, const uint8_t *const *wg,
           size_t offset, const uint8_t *const *ag, size_t act_offset)
{
    GRAFT_AVX512_UNROLL
    for (int r = 0; r < R; r++) {
        if (source == FROM_ROWS_PREFETCH)
            graft__avx512_prefetch(wg[r] + offset, GROUP_BLOCKS * (size_t)block_bytes(type));
        w32 w = source == FROM_PACKED ? load_packed(type, wg[r] + offset)
                                      : unpack(type, wg[r] + offset);
        GRAFT_AVX512_UNROLL
        for (int t = 0; t < T; t++)
            acc[r * T + t] = dot_group(type, acc[r * T + t], &w, ag[t] + act_offset);
    }
}

/* Groups [0, n) of the rows into acc (R, T): the whole groups from wg (raw or packed, as
 * source says), and a raw row's last group of 1-3 blocks from a zero-padded copy. */
static inline __attribute__((always_inline)) void
tile_row(uint32_t type, int R, int T, int source, __m512 *acc, const uint8_t *const *wg,
         const graft__avx512_job *job)
{
    size_t stride = act_stride(type);
    int64_t n_full = job->n_in / GROUP, n_groups = (job->n_in + GROUP - 1) / GROUP;
    if (source == FROM_PACKED) {
        for (int64_t g = 0; g < n_groups; g++)
            tile_group(type, R, T, source, acc, wg, (size_t)g * packed_group_bytes(type),
                       job->acts, (size_t)g * stride);
        return;
    }
    size_t gbytes = (size_t)(GROUP_BLOCKS * block_bytes(type));
    for (int64_t g = 0; g < n_full; g++)
        tile_group(type, R, T, source, acc, wg, (size_t)g * gbytes, job->acts,
                   (size_t)g * stride);
    size_t tail_bytes = (size_t)((job->n_in % GROUP) / QK * block_bytes(type));
    if (tail_bytes > 0) {
        uint8_t tail[GRAFT_AVX512_MAX_ROWS][MAX_GROUP_BYTES]; // (R, group bytes)
        const uint8_t *tails[GRAFT_AVX512_MAX_ROWS];
        for (int r = 0; r < R; r++) {
            memset(tail[r], 0, sizeof tail[r]);
            memcpy(tail[r], wg[r] + (size_t)n_full * gbytes, tail_bytes);
            tails[r] = tail[r];
        }
        tile_group(type, R, T, FROM_ROWS, acc, tails, 0, job->acts, (size_t)n_full * stride);
    }
}

/* The tile function body: R, T, source are constants in each instance, and acc is the
 * instance's own array of exactly R * T accumulators (so the compiler can keep them in
 * registers). */
static inline __attribute__((always_inline)) void
q32_tile(uint32_t type, int R, int T, int source, __m512 *acc, const graft__avx512_job *job,
         int seg, int64_t k0, int64_t k1)
{
    for (int64_t k = k0; k < k1; k++) {
        const uint8_t *rows[GRAFT_AVX512_MAX_ROWS];
        if (source == FROM_PACKED)
            graft__avx512_packed_rows(job, seg, R, k, rows);
        else
            graft__avx512_step_rows(job, seg, R, k, rows);
        GRAFT_AVX512_UNROLL
        for (int i = 0; i < R * T; i++)
            acc[i] = _mm512_setzero_ps();
        tile_row(type, R, T, source, acc, rows, job);
        graft__avx512_finish(job, seg, R, T, k, acc);
    }
}

/* dst = steps [k0, k1) of every segment of job, unpacked (see graft__avx512_kernel.pack). */
static inline __attribute__((always_inline)) void
q32_pack(uint32_t type, const graft__avx512_job *job, int64_t k0, int64_t k1, uint8_t *dst)
{
    int64_t n_full = job->n_in / GROUP, n_groups = (job->n_in + GROUP - 1) / GROUP;
    size_t gbytes = (size_t)(GROUP_BLOCKS * block_bytes(type));
    size_t tail_bytes = (size_t)((job->n_in % GROUP) / QK * block_bytes(type));
    for (int64_t k = k0; k < k1; k++) {
        for (int j = 0; j < job->segments; j++) {
            const uint8_t *row = graft__avx512_step_row(job, j, k);
            for (int64_t g = 0; g < n_full; g++) {
                graft__avx512_prefetch(row + (size_t)g * gbytes, gbytes);
                w32 w = unpack(type, row + (size_t)g * gbytes);
                store_packed(type, dst + (size_t)g * packed_group_bytes(type), &w);
            }
            if (n_groups > n_full) {
                uint8_t tail[MAX_GROUP_BYTES] = {0};
                memcpy(tail, row + (size_t)n_full * gbytes, tail_bytes);
                w32 w = unpack(type, tail);
                store_packed(type, dst + (size_t)n_full * packed_group_bytes(type), &w);
            }
            dst += (size_t)n_groups * packed_group_bytes(type);
        }
    }
}

#define Q32_TILE(name, TYPE, R, T)                                                         \
    GRAFT_AVX512_DEFINE_TILE(name, q32_tile, TYPE, R, T, FROM_ROWS_PREFETCH, FROM_ROWS)    \
    static void name##_packed(const graft__avx512_job *job, int seg, int64_t k0,           \
                              int64_t k1)                                                  \
    {                                                                                      \
        __m512 acc[R * T];                                                                 \
        q32_tile(TYPE, R, T, FROM_PACKED, acc, job, seg, k0, k1);                          \
    }

#define Q32_PACKED_ROW_BYTES(name, group_bytes)                                            \
    static size_t name(int64_t n_in)                                                       \
    {                                                                                      \
        return (size_t)((n_in + GROUP - 1) / GROUP) * (group_bytes);                       \
    }
Q32_PACKED_ROW_BYTES(packed_row_bytes_plain, 3 * sizeof(__m512))
Q32_PACKED_ROW_BYTES(packed_row_bytes_min, 4 * sizeof(__m512))

/* The rows are cut into Q32_SEGMENTS segments; the tile shapes (R rows x T tokens). */
#define Q32_SEGMENTS 4
#define Q32_KERNEL(name, TYPE, ACT_BYTES, PACKED_ROW_BYTES)                                \
    Q32_TILE(name##_4x4, TYPE, 4, 4)                                                       \
    Q32_TILE(name##_4x3, TYPE, 4, 3)                                                       \
    Q32_TILE(name##_4x2, TYPE, 4, 2)                                                       \
    Q32_TILE(name##_4x1, TYPE, 4, 1)                                                       \
    static void name##_pack(const graft__avx512_job *job, int64_t k0, int64_t k1,          \
                            uint8_t *dst)                                                  \
    {                                                                                      \
        q32_pack(TYPE, job, k0, k1, dst);                                                  \
    }                                                                                      \
    static const graft__avx512_kernel name = {                                             \
        ACT_BYTES,                                                                         \
        q32_act_prepare,                                                                   \
        Q32_SEGMENTS,                                                                      \
        {{4, 4, name##_4x4}, {3, 4, name##_4x3}, {2, 4, name##_4x2}, {1, 4, name##_4x1}},  \
        PACKED_ROW_BYTES,                                                                  \
        name##_pack,                                                                       \
        {{4, 4, name##_4x4_packed},                                                        \
         {3, 4, name##_4x3_packed},                                                        \
         {2, 4, name##_4x2_packed},                                                        \
         {1, 4, name##_4x1_packed}}};

Q32_KERNEL(q8_0_kernel, GRAFT_TYPE_Q8_0, act_bytes_plain, packed_row_bytes_plain)
Q32_KERNEL(q4_0_kernel, GRAFT_TYPE_Q4_0, act_bytes_plain, packed_row_bytes_plain)
Q32_KERNEL(q4_1_kernel, GRAFT_TYPE_Q4_1, act_bytes_min, packed_row_bytes_min)
Q32_KERNEL(q5_0_kernel, GRAFT_TYPE_Q5_0, act_bytes_plain, packed_row_bytes_plain)
Q32_KERNEL(q5_1_kernel, GRAFT_TYPE_Q5_1, act_bytes_min, packed_row_bytes_min)
Q32_KERNEL(iq4_nl_kernel, GRAFT_TYPE_IQ4_NL, act_bytes_plain, packed_row_bytes_plain)

const graft__avx512_kernel *graft__avx512_kernel_q32(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_Q8_0:
        return &q8_0_kernel;
    case GRAFT_TYPE_Q4_0:
        return &q4_0_kernel;
    case GRAFT_TYPE_Q4_1:
        return &q4_1_kernel;
    case GRAFT_TYPE_Q5_0:
        return &q5_0_kernel;
    case GRAFT_TYPE_Q5_1:
        return &q5_1_kernel;
    case GRAFT_TYPE_IQ4_NL:
        return &iq4_nl_kernel;
    default:
        return NULL;
    }
}
