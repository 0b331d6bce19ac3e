/*
 * matmul_q32_r8_avx2.c: Q8_0 and Q4_0 weights packed in groups of 8 interleaved rows for
 * the avx2 and avxvnni paths, and the tile that computes from them. Compiled twice: as is
 * for avx2, and with GRAFT_AVX_VNNI (matmul_q32_r8_avxvnni.c) for avxvnni; the packing is
 * the same for both and defined once, in the avx2 compilation.
 *
 * In GGUF order a vector of weights is one row's block, so every (row, token) pair needs
 * its own multiplies, a fold of the blocks into lanes and a conversion of the f16 scales
 * gathered one by one (matmul_avx2.c). Packed, each 32-bit lane of a vector is one of the 8
 * rows: vector k of a block holds elements 4k..4k+3 of every row, so a token's 4
 * activation bytes broadcast to all lanes give the 8 rows' partial sums in their lanes
 * with no fold, and the 8 rows' scales convert with one vcvtph2ps.
 *
 * A group's block (of 32 elements; 272 bytes for Q8_0, 144 for Q4_0: 8 times the GGUF
 * block, so a row still takes 34 or 18 bytes per block):
 *     d      f16 (8)          the rows' scales, row order
 *     Q8_0:  u8 (8, 32)       vector k, byte 4 r + e: element 4 k + e of row r, plus 128
 *     Q4_0:  u8 (4, 32)       vector m, byte 4 r + e: element 4 m + e of row r in the low
 *                             nibble, element 16 + 4 m + e in the high one (GGUF's byte
 *                             4 m + e of that row's block, moved)
 *
 * Per (row, token) and block the integer sum i = bias + sum of code x activation quant is
 * exact, where the codes are unsigned (Q8_0: w + 128, Q4_0: 0..15) and the token's bias,
 * -offset * (sum of its quants), takes the offset back out (graft__q32r8_layout). With VNNI
 * each vector costs one vpdpbusd. Without, Q4_0 sums its 8 vpmaddubsw products in int16 (at
 * most 8 * 2 * 15 * 127) and widens once; Q8_0 takes |w| against the activations carrying
 * w's sign (bias 0), one vpmaddubsw + vpmaddwd per vector. Both give the same i, and then
 * acc += (d dx) float(i), one FMA per block in block order: the two paths give the same
 * bits, and a tile of T tokens is T single-token computations side by side (batch
 * invariance, DESIGN.md invariant 1). Packed weights give other bits than the same weights
 * unpacked (matmul_path.h allows it); each form is batch invariant on its own.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx2.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

#define Q32R8_INLINE static inline __attribute__((always_inline))

enum {
    ROWS = GRAFT_AVX2_R8_ROWS,
    TOKS_MAX = 4,         /* tokens a tile computes side by side */
    PREFETCH_BYTES = 4096 /* how far ahead of the block being read the weights are fetched */
};

#ifndef GRAFT_AVX_VNNI
int graft__avx2_q32r8_packs(uint32_t type, int64_t n_in, int64_t n_out)
{
    return (type == GRAFT_TYPE_Q8_0 || type == GRAFT_TYPE_Q4_0) && n_in > 0 && n_in % QK == 0 &&
           n_out > 0 && n_out % ROWS == 0;
}

size_t graft__avx2_q32r8_block_bytes(uint32_t type)
{
    return type == GRAFT_TYPE_Q8_0 ? (size_t)ROWS * BLOCK_BYTES_Q8_0 : (size_t)ROWS * BLOCK_BYTES_Q4_0;
}

void graft__avx2_q32r8_pack(uint32_t type, void *dst, const void *w, int64_t n_in, int64_t n_out)
{
    GRAFT_ASSERT(graft__avx2_q32r8_packs(type, n_in, n_out));
    const int64_t nb = n_in / QK;
    const size_t bb = type == GRAFT_TYPE_Q8_0 ? BLOCK_BYTES_Q8_0 : BLOCK_BYTES_Q4_0;
    const size_t row_bytes = (size_t)nb * bb;
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_out / ROWS; g++)
        for (int64_t b = 0; b < nb; b++) {
            for (int r = 0; r < ROWS; r++) {
                const uint8_t *blk = (const uint8_t *)w + (size_t)(g * ROWS + r) * row_bytes +
                                     (size_t)b * bb;
                memcpy(out + 2 * r, blk, 2);
                if (type == GRAFT_TYPE_Q8_0) {
                    for (int k = 0; k < 8; k++)
                        for (int e = 0; e < 4; e++)
                            out[16 + 32 * k + 4 * r + e] = (uint8_t)(blk[2 + 4 * k + e] ^ 0x80);
                } else {
                    for (int m = 0; m < 4; m++)
                        memcpy(out + 16 + 32 * m + 4 * r, blk + 2 + 4 * m, 4);
                }
            }
            out += ROWS * bb;
        }
}
#endif

/* The 4 activation bytes at p in every 32-bit lane. */
Q32R8_INLINE __m256i broadcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* i[t] (8 rows) += the code dot of one Q8_0 block with the tokens' quants y[t] (32). */
Q32R8_INLINE void q8_block(int T, const uint8_t *codes, const int8_t *const *y, __m256i *i)
{
    for (int k = 0; k < 8; k++) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(codes + 32 * k));
#ifdef GRAFT_AVX_VNNI
        for (int t = 0; t < T; t++)
            i[t] = _mm256_dpbusd_avx_epi32(i[t], c, broadcast4(y[t] + 4 * k));
#else
        __m256i s = _mm256_xor_si256(c, _mm256_set1_epi8(-128)); /* w */
        __m256i a = _mm256_abs_epi8(s);
        for (int t = 0; t < T; t++) {
            __m256i p = _mm256_maddubs_epi16(a, _mm256_sign_epi8(broadcast4(y[t] + 4 * k), s));
            i[t] = _mm256_add_epi32(i[t], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
#endif
    }
}

/* The same for a Q4_0 block. */
Q32R8_INLINE void q4_block(int T, const uint8_t *codes, const int8_t *const *y, __m256i *i)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
#ifndef GRAFT_AVX_VNNI
    __m256i s16[TOKS_MAX];
#endif
    for (int m = 0; m < 4; m++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(codes + 32 * m));
        __m256i lo = _mm256_and_si256(v, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int t = 0; t < T; t++) {
            __m256i ylo = broadcast4(y[t] + 4 * m), yhi = broadcast4(y[t] + 16 + 4 * m);
#ifdef GRAFT_AVX_VNNI
            i[t] = _mm256_dpbusd_avx_epi32(i[t], lo, ylo);
            i[t] = _mm256_dpbusd_avx_epi32(i[t], hi, yhi);
#else
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi));
            s16[t] = m == 0 ? p : _mm256_add_epi16(s16[t], p);
#endif
        }
    }
#ifndef GRAFT_AVX_VNNI
    for (int t = 0; t < T; t++)
        i[t] = _mm256_add_epi32(i[t], _mm256_madd_epi16(s16[t], _mm256_set1_epi16(1)));
#endif
}

/* y[t * ldy + r] for T tokens and the group's 8 rows, from the group's blocks at w. */
Q32R8_INLINE void q32r8_tile(int T, bool q8, float *y, int64_t ldy, const uint8_t *w,
                           const uint8_t *xa, size_t act_bytes, int64_t n_in)
{
    const graft__q32r8_layout l = graft__q32r8_layout_of(n_in);
    const size_t bb = q8 ? (size_t)ROWS * BLOCK_BYTES_Q8_0 : (size_t)ROWS * BLOCK_BYTES_Q4_0;
    const uint8_t *xt[TOKS_MAX];
    __m256 acc[TOKS_MAX];
    for (int t = 0; t < T; t++) {
        xt[t] = xa + (size_t)t * act_bytes;
        acc[t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n_in / QK; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        for (size_t i = 0; i < bb; i += 64) /* may lie past w: harmless */
            _mm_prefetch((const char *)((uintptr_t)blk + PREFETCH_BYTES + (uintptr_t)i),
                         _MM_HINT_T0);
        const int8_t *yq[TOKS_MAX];
        __m256i isum[TOKS_MAX];
        for (int t = 0; t < T; t++) {
            yq[t] = (const int8_t *)xt[t] + b * QK;
            isum[t] = _mm256_set1_epi32(((const int32_t *)(xt[t] + l.bias))[b]);
        }
        if (q8)
            q8_block(T, blk + 2 * ROWS, yq, isum);
        else
            q4_block(T, blk + 2 * ROWS, yq, isum);
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        for (int t = 0; t < T; t++) {
            __m256 dx = _mm256_set1_ps(((const float *)(xt[t] + l.dx))[b]);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        _mm256_storeu_ps(y + t * ldy, acc[t]);
}

/* One instantiation per type and token count, so each inlines its own loops. */
#define Q32R8_TILE(NAME, Q8, T)                                                               \
    static void NAME(float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa, size_t ab, \
                     int64_t n_in)                                                           \
    {                                                                                        \
        q32r8_tile(T, Q8, y, ldy, w, xa, ab, n_in);                                           \
    }
Q32R8_TILE(q8_tile1, true, 1)
Q32R8_TILE(q8_tile2, true, 2)
Q32R8_TILE(q8_tile3, true, 3)
Q32R8_TILE(q8_tile4, true, 4)
Q32R8_TILE(q4_tile1, false, 1)
Q32R8_TILE(q4_tile2, false, 2)
Q32R8_TILE(q4_tile3, false, 3)
Q32R8_TILE(q4_tile4, false, 4)

typedef void (*q32r8_fn)(float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa, size_t ab,
                        int64_t n_in);

/* nt tokens (1..6) in tiles of at most 4. */
static void q32r8_tiles(const q32r8_fn fns[TOKS_MAX], int nt, float *y, int64_t ldy,
                       const uint8_t *w, int nr, const uint8_t *xa, size_t act_bytes,
                       int64_t n_in)
{
    GRAFT_ASSERT(nr == ROWS && nt >= 1);
    for (int t = 0; t < nt;) {
        int left = nt - t;
        int n = left == 5 ? 3 : left < TOKS_MAX ? left : TOKS_MAX;
        fns[n - 1](y + t * ldy, ldy, w, xa + (size_t)t * act_bytes, act_bytes, n_in);
        t += n;
    }
}

void GRAFT_AVX2_NAME(q32r8_tile_q8_0)(int nt, float *y, int64_t ldy, const uint8_t *w,
                                     size_t row_bytes, int nr, const uint8_t *xa,
                                     size_t act_bytes, int64_t n_in)
{
    static const q32r8_fn fns[TOKS_MAX] = {q8_tile1, q8_tile2, q8_tile3, q8_tile4};
    (void)row_bytes;
    q32r8_tiles(fns, nt, y, ldy, w, nr, xa, act_bytes, n_in);
}

void GRAFT_AVX2_NAME(q32r8_tile_q4_0)(int nt, float *y, int64_t ldy, const uint8_t *w,
                                     size_t row_bytes, int nr, const uint8_t *xa,
                                     size_t act_bytes, int64_t n_in)
{
    static const q32r8_fn fns[TOKS_MAX] = {q4_tile1, q4_tile2, q4_tile3, q4_tile4};
    (void)row_bytes;
    q32r8_tiles(fns, nt, y, ldy, w, nr, xa, act_bytes, n_in);
}
