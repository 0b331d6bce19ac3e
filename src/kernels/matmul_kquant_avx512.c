/*
 * matmul_kquant_avx512.c: AVX-512 kernels for the K-quants Q4_K, Q5_K and Q6_K (part of the
 * avx512 path, see matmul_avx512.h; the block layouts are documented in dequantize.c). A
 * model's Q4_K matrices are packed for the path instead where their shapes allow
 * (matmul_r16_kquant_avx512.c).
 *
 * Activations are quantized per token in blocks of 256 as llama.cpp's Q8_K does: a scale
 * dx = max|x| / 127 (f32) and quants a = round(x / dx) in -127..127, plus per-sub-block
 * sums of the quants for the weights' offsets. The quants are stored in the order the
 * weights unpack to, so each 64-byte vector of weight quants meets its activations in one
 * vpdpbusd (unsigned weight quants times signed activation quants, four products to a
 * 32-bit lane). Every lane of such a product p belongs to one sub-block and |p| < 2^15, so
 * two products packed into 16-bit lanes (vpackssdw, which then saturates nothing) meet a
 * vector of their sub-blocks' scales in one vpdpwssd, which multiplies and adds them to
 * the block's integer sum S (2 pack + 2 vpdpwssd for the 4 products of a block):
 *
 *   Q4_K/Q5_K  element = d sc_j q - dmin m_j (sub-blocks j of 32, q in 0..15 / 0..31):
 *              dot = d dx S - sum_j dmin m_j (dx bsum_j),  S = sum_j sc_j sum q a,
 *              the min term one FMA with (dx bsum_j) precomputed per token.
 *   Q6_K       element = d sc_j (q - 32) (sub-blocks of 16, q in 0..63, sc_j signed):
 *              dot = d dx S,  S = sum_j sc_j sum q a + sum_j (32 sc_j) (-bsum_j),
 *              the offset term one more vpdpwssd on the per-token (-bsum_j).
 *
 * Quant order. Q4_K/Q5_K: the 128 quant bytes are two vectors of 64; the low nibbles of the
 * first hold sub-blocks 0 and 2, its high nibbles 1 and 3, the second vector 4/6 and 5/7;
 * activations are stored as [a0..31 a64..95] [a32..63 a96..127] [a128..159 a192..223]
 * [a160..191 a224..255]. Q5_K's fifth bits come from qh by a byte test per vector. Q6_K:
 * each 64 bytes of ql give elements 128h + 0..63 (low nibbles) and 128h + 64..127 (high),
 * so the activations keep their natural order; the top two bits come from qh by 16-bit
 * shifts and a byte mask.
 *
 * The integer sums are exact, and every (row, token) runs the same float operations in
 * the same order, so tiles of any shape give the same bits (matmul_avx512.h).
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx512.h"
#include "kernels/quant_formats.h"
#include "util/util.h"

/* One token's activations for one Q4_K/Q5_K block. */
typedef struct act_k4 {
    int8_t q[QK_K];  /* quants in the Q4_K order (see the top of the file) */
    float aux[16];   /* aux[j] = dx * (sum of sub-block j's quants) for j < 8; aux[8] = dx;
                        aux[9..15] = 0 */
} act_k4;

/* One token's activations for one Q6_K block. */
typedef struct act_k6 {
    int8_t q[QK_K];     /* quants in element order */
    int16_t nbsum[16];  /* -(sum of the quants of sub-block j (16 elements)) */
    float dx;
    uint8_t zero[28];   /* 0, so the whole 64 bytes can be a vpdpwssd operand */
} act_k6;

#define ACT_K_BYTES(name, type)                                                            \
    static size_t name(int64_t n_in)                                                       \
    {                                                                                      \
        return (size_t)(n_in / QK_K) * sizeof(type);                                       \
    }
ACT_K_BYTES(act_k4_bytes, act_k4)
ACT_K_BYTES(act_k6_bytes, act_k6)

/* ------------------------------------------------------------------------------------
 * Activations.
 */

static const __m512i *vec(const void *p)
{
    return (const __m512i *)p;
}

/* q (256) = x (256) quantized to -127..127 with the returned scale (max|x| / 127). */
static float quantize_block(const float *x, int8_t *q)
{
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < QK_K; i += 16)
        amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    float m = _mm512_reduce_max_ps(amax);
    __m512 id = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
    for (int i = 0; i < QK_K; i += 16) {
        __m512i qi = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), id),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(qi));
    }
    return m / 127.0f;
}

/* The sum of n int8 at q (n a multiple of 16). */
static int sum_quants(const int8_t *q, int n)
{
    int s = 0;
    for (int i = 0; i < n; i += 16)
        s += _mm512_reduce_add_epi32(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + i))));
    return s;
}

/* Where the 32 elements of sub-block j go in act_k4.q: sub-blocks 0, 2, 1, 3, 4, 6, 5, 7
 * in that order (group j / 2 of 64 elements is half (j / 2) % 2 of vectors 2 (j / 4) and
 * 2 (j / 4) + 1; its low nibbles, sub-block j even, go to the first of the two). */
static int k4_position(int j)
{
    int g = j / 2;
    return 64 * (2 * (g / 2) + (j & 1)) + 32 * (g % 2);
}

static void k4_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    (void)type;
    GRAFT_ASSERT(n_in % QK_K == 0);
    for (int64_t i = 0; i < n_in / QK_K; i++) {
        act_k4 *a = (act_k4 *)xa + i;
        int8_t q[QK_K];
        float dx = quantize_block(x + i * QK_K, q);
        memset(a->aux, 0, sizeof a->aux);
        for (int j = 0; j < 8; j++) {
            memcpy(a->q + k4_position(j), q + 32 * j, 32);
            a->aux[j] = dx * (float)sum_quants(q + 32 * j, 32);
        }
        a->aux[8] = dx;
    }
}

static void k6_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    (void)type;
    GRAFT_ASSERT(n_in % QK_K == 0);
    for (int64_t i = 0; i < n_in / QK_K; i++) {
        act_k6 *a = (act_k6 *)xa + i;
        memset(a, 0, sizeof *a);
        a->dx = quantize_block(x + i * QK_K, a->q);
        for (int j = 0; j < 16; j++)
            a->nbsum[j] = (int16_t)-sum_quants(a->q + 16 * j, 16);
    }
}

/* ------------------------------------------------------------------------------------
 * Weights.
 */

/* One weight row's block, unpacked. */
typedef struct wk {
    __m512i q[4];  /* unsigned quants, in the order of the activations' q */
    __m512i sc[2]; /* word w: scale of word w of packs(product 2k, product 2k + 1) */
    __m512i sc32;  /* Q6_K: words 0..15 = 32 * sc_j, words 16..31 = 0 */
    __m512 d;      /* d in every lane */
    __m512 mins;   /* Q4_K/Q5_K: lanes j < 8 = dmin * m_j, other lanes 0 */
} wk;

static inline float load_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

/* Which sub-block word w of pair k = vpackssdw(p[2k], p[2k + 1]) belongs to. In each
 * 128-bit lane L (w / 8) the pack puts 4 lanes of p[2k] (words 0-3) then 4 of p[2k + 1].
 * Q4_K/Q5_K: p[0], p[1], p[2], p[3] hold sub-blocks 0|2, 1|3, 4|6, 5|7 in lanes 0-7|8-15.
 * Q6_K: lanes 4i..4i+3 of p[j] hold sub-block 4j + i. */
#define K4_SUB(k, w) (4 * (k) + ((w) / 8 >= 2 ? 2 : 0) + ((w) % 8) / 4)
#define K6_SUB(k, w) (8 * (k) + (w) / 8 + 4 * (((w) % 8) / 4))
#define PAIR_INDEX(F, k)                                                                   \
    {F(k, 0),  F(k, 1),  F(k, 2),  F(k, 3),  F(k, 4),  F(k, 5),  F(k, 6),  F(k, 7),         \
     F(k, 8),  F(k, 9),  F(k, 10), F(k, 11), F(k, 12), F(k, 13), F(k, 14), F(k, 15),        \
     F(k, 16), F(k, 17), F(k, 18), F(k, 19), F(k, 20), F(k, 21), F(k, 22), F(k, 23),        \
     F(k, 24), F(k, 25), F(k, 26), F(k, 27), F(k, 28), F(k, 29), F(k, 30), F(k, 31)}
static const _Alignas(64) uint16_t k4_pair_subs[2][32] = {PAIR_INDEX(K4_SUB, 0),
                                                          PAIR_INDEX(K4_SUB, 1)};
static const _Alignas(64) uint16_t k6_pair_subs[2][32] = {PAIR_INDEX(K6_SUB, 0),
                                                          PAIR_INDEX(K6_SUB, 1)};

/* sc[k] = the scale of each word of pair k, from the 16-bit scales of the sub-blocks. */
static inline void spread_scales(__m512i scales, const uint16_t (*subs)[32], wk *w)
{
    for (int k = 0; k < 2; k++)
        w->sc[k] = _mm512_permutexvar_epi16(_mm512_load_si512(subs[k]), scales);
}

/* Q4_K/Q5_K: d, dmin and the scales and mins (6 bits each) of the 8 sub-blocks, from the
 * block's first 16 bytes (d, dmin, then 12 packed bytes s: s[0..3] hold the low 6 bits of
 * sc 0-3 and in their top 2 bits the high bits of sc 4-7; s[4..7] the same for the mins;
 * s[8..11] the low nibbles of sc 4-7 and, in their high nibbles, of m 4-7). */
static inline void unpack_k4_scales(const uint8_t *b, wk *w)
{
    __m128i head = _mm_loadu_si128((const __m128i *)b);
    /* sc 0..7, m 0..7 (one byte each): low bits from `lows`, high bits from `highs`. The
     * packed byte s[i] is byte 4 + i of head; index -1 gives 0. */
    __m128i lows = _mm_shuffle_epi8(head, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10,
                                                        11, 12, 13, 14, 15));
    __m128i highs = _mm_shuffle_epi8(head, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1,
                                                         -1, -1, 8, 9, 10, 11));
    __m128i low_bits = _mm_or_si128(
        _mm_and_si128(lows, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0,
                                          0, 0, 0)),
        _mm_and_si128(_mm_srli_epi16(lows, 4),
                      _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
    __m128i scm = _mm_or_si128(low_bits, _mm_and_si128(_mm_srli_epi16(highs, 2),
                                                       _mm_set1_epi8(0x30)));
    spread_scales(_mm512_zextsi256_si512(_mm256_cvtepu8_epi16(scm)), k4_pair_subs, w);
    __m128 d_dmin = _mm_cvtph_ps(head); /* lanes 0, 1 */
    __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8)));
    __m256 dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(d_dmin));
    w->mins = _mm512_zextps256_ps512(_mm256_mul_ps(mf, dmin));
    w->d = _mm512_broadcastss_ps(d_dmin);
    w->sc32 = _mm512_setzero_si512();
}

static inline void unpack_k4_quants(const uint8_t *qs, wk *w)
{
    __m512i mask = _mm512_set1_epi8(0x0f);
    for (int v = 0; v < 2; v++) {
        __m512i z = graft__avx512_load_kept(qs + 64 * v);
        w->q[2 * v] = _mm512_and_si512(z, mask);
        w->q[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), mask);
    }
}

static inline void unpack_q4_k(const uint8_t *b, wk *w)
{
    unpack_k4_scales(b, w);
    unpack_k4_quants(b + 16, w);
}

/* Q5_K: fifth bit of element 64g + l (+ 32) is bit 2g (2g + 1) of qh[l]. Quant vector k
 * holds, per 32-byte half, the bits below. */
static inline void unpack_q5_k(const uint8_t *b, wk *w)
{
    unpack_k4_scales(b, w);
    unpack_k4_quants(b + 48, w);
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
    static const uint8_t bit_lo[4] = {0x01, 0x02, 0x10, 0x20}; /* first half of q[k] */
    __m512i sixteen = _mm512_set1_epi8(16);
    for (int k = 0; k < 4; k++) {
        __m512i bits = _mm512_mask_blend_epi8((__mmask64)0xffffffff00000000ull,
                                              _mm512_set1_epi8((char)bit_lo[k]),
                                              _mm512_set1_epi8((char)(bit_lo[k] << 2)));
        __mmask64 set = _mm512_test_epi8_mask(qh, bits);
        w->q[k] = _mm512_mask_add_epi8(w->q[k], set, w->q[k], sixteen);
    }
}

static inline void unpack_q6_k(const uint8_t *b, wk *w)
{
    __m512i mask = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
    /* 16-bit shift counts: first 32 bytes, second 32 bytes */
    __m512i shl = _mm512_mask_blend_epi16((__mmask32)0xffff0000u, _mm512_set1_epi16(4),
                                          _mm512_set1_epi16(2));
    __m512i shr = _mm512_mask_blend_epi16((__mmask32)0xffff0000u, _mm512_setzero_si512(),
                                          _mm512_set1_epi16(2));
    for (int h = 0; h < 2; h++) {
        __m512i ql = graft__avx512_load_kept(b + 64 * h);
        __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
        __m512i lo = _mm512_and_si512(ql, mask);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), mask);
        w->q[2 * h] = _mm512_or_si512(lo, _mm512_and_si512(_mm512_sllv_epi16(qh, shl), top));
        w->q[2 * h + 1] =
            _mm512_or_si512(hi, _mm512_and_si512(_mm512_srlv_epi16(qh, shr), top));
    }
    __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
    spread_scales(_mm512_zextsi256_si512(sc), k6_pair_subs, w);
    w->sc32 = _mm512_zextsi256_si512(_mm256_slli_epi16(sc, 5));
    w->d = _mm512_set1_ps(load_f16(b + 208));
    w->mins = _mm512_setzero_ps();
}

static inline __attribute__((always_inline)) void unpack(uint32_t type, const uint8_t *b, wk *w)
{
    switch (type) {
    case GRAFT_TYPE_Q4_K:
        unpack_q4_k(b, w);
        return;
    case GRAFT_TYPE_Q5_K:
        unpack_q5_k(b, w);
        return;
    default:
        unpack_q6_k(b, w);
        return;
    }
}

static inline int block_bytes(uint32_t type)
{
    return type == GRAFT_TYPE_Q4_K   ? BLOCK_BYTES_Q4_K
           : type == GRAFT_TYPE_Q5_K ? BLOCK_BYTES_Q5_K
                                     : BLOCK_BYTES_Q6_K;
}

/* ------------------------------------------------------------------------------------
 * Tiles.
 */

/* acc += the (row, token) dot product of one block. */
static inline __attribute__((always_inline)) __m512 dot_block(uint32_t type, __m512 acc,
                                                              const wk *w, const uint8_t *ab)
{
    __m512i zero = _mm512_setzero_si512();
    __m512i s;
    float dx;
    if (type == GRAFT_TYPE_Q6_K) {
        const act_k6 *a = (const act_k6 *)ab;
        s = _mm512_dpwssd_epi32(zero, w->sc32, _mm512_load_si512(vec(a->nbsum)));
        dx = a->dx;
    } else {
        s = zero;
        dx = ((const act_k4 *)ab)->aux[8];
    }
    __m512i p[4];
    for (int k = 0; k < 4; k++)
        p[k] = _mm512_dpbusd_epi32(zero, w->q[k], _mm512_load_si512(vec(ab + 64 * k)));
    for (int k = 0; k < 2; k++)
        s = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(p[2 * k], p[2 * k + 1]), w->sc[k]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w->d, _mm512_set1_ps(dx)), acc);
    if (type != GRAFT_TYPE_Q6_K)
        acc = _mm512_fnmadd_ps(w->mins, _mm512_load_ps(((const act_k4 *)ab)->aux), acc);
    return acc;
}

/* The tile function body: R, T, prefetch are constants in each instance, and acc is the
 * instance's own array of exactly R * T accumulators (so the compiler can keep them in
 * registers). No packing (graft__avx512_kernel.pack): loading 10 unpacked vectors per
 * block is no faster than unpacking the block, the unpacking being shared by 8 tokens in
 * the widest tile. */
static inline __attribute__((always_inline)) void
kquant_tile(uint32_t type, int R, int T, int prefetch, __m512 *acc, const graft__avx512_job *job,
            int seg, int64_t k0, int64_t k1)
{
    size_t bbytes = (size_t)block_bytes(type);
    size_t stride = type == GRAFT_TYPE_Q6_K ? sizeof(act_k6) : sizeof(act_k4);
    for (int64_t k = k0; k < k1; k++) {
        const uint8_t *rows[GRAFT_AVX512_MAX_ROWS];
        graft__avx512_step_rows(job, seg, R, k, rows);
        GRAFT_AVX512_UNROLL
        for (int i = 0; i < R * T; i++)
            acc[i] = _mm512_setzero_ps();
        for (int64_t i = 0; i < job->n_in / QK_K; i++) {
            GRAFT_AVX512_UNROLL
            for (int r = 0; r < R; r++) {
                wk w;
                const uint8_t *b = rows[r] + (size_t)i * bbytes;
                if (prefetch)
                    graft__avx512_prefetch(b, bbytes);
                unpack(type, b, &w);
                GRAFT_AVX512_UNROLL
                for (int t = 0; t < T; t++)
                    acc[r * T + t] = dot_block(type, acc[r * T + t], &w,
                                               job->acts[t] + (size_t)i * stride);
            }
        }
        graft__avx512_finish(job, seg, R, T, k, acc);
    }
}

#define KQUANT_TILE(name, TYPE, R, T)                                                  \
    GRAFT_AVX512_DEFINE_TILE(name, kquant_tile, TYPE, R, T, 1, 0)

/* The rows are cut into KQUANT_SEGMENTS segments; the tile shapes (R rows x T tokens). */
#define KQUANT_SEGMENTS 4
#define KQUANT_KERNEL(name, TYPE, ACT_BYTES, ACT_PREPARE)                                  \
    KQUANT_TILE(name##_2x8, TYPE, 2, 8)                                                    \
    KQUANT_TILE(name##_2x4, TYPE, 2, 4)                                                    \
    KQUANT_TILE(name##_2x2, TYPE, 2, 2)                                                    \
    KQUANT_TILE(name##_4x1, TYPE, 4, 1)                                                    \
    static const graft__avx512_kernel name = {                                             \
        .act_bytes = ACT_BYTES,                                                            \
        .act_prepare = ACT_PREPARE,                                                        \
        .segments = KQUANT_SEGMENTS,                                                       \
        .tiles = {{8, 2, name##_2x8}, {4, 2, name##_2x4}, {2, 2, name##_2x2},              \
                  {1, 4, name##_4x1}}};

KQUANT_KERNEL(q4_k_kernel, GRAFT_TYPE_Q4_K, act_k4_bytes, k4_act_prepare)
KQUANT_KERNEL(q5_k_kernel, GRAFT_TYPE_Q5_K, act_k4_bytes, k4_act_prepare)
KQUANT_KERNEL(q6_k_kernel, GRAFT_TYPE_Q6_K, act_k6_bytes, k6_act_prepare)

const graft__avx512_kernel *graft__avx512_kernel_kquant(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_Q4_K:
        return &q4_k_kernel;
    case GRAFT_TYPE_Q5_K:
        return &q5_k_kernel;
    case GRAFT_TYPE_Q6_K:
        return &q6_k_kernel;
    default:
        return NULL;
    }
}
