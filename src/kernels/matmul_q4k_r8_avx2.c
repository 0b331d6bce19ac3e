/*
 * matmul_q4k_r8_avx2.c: Q4_K weights packed in groups of 8 interleaved rows for the AVX2
 * path, and the tile that computes from them.
 *
 * In GGUF's Q4_K layout, one vector of 32 codes is one row's sub-block of 32 elements, so
 * every vpmaddubsw (u8 codes x s8 activations, pairs summed in int16) needs its own
 * vpmaddwd by the sub-block's scale before the next can be added: two multiplies on the
 * one pipe that runs both, per 32 weights and token. Packed, one vector holds 8 elements
 * of 4 rows; the four vectors of a sub-block are summed in int16 (at most 4 * 2 * 15 * 127)
 * and then take one vpmaddwd by the 4 rows' scales, so that pipe runs 1.25 multiplies per 32
 * weights and token. The scales, mins and f16 scales are unpacked once, when packing.
 *
 * A group's super-block (1184 bytes, GRAFT_AVX2_R8_BLOCK_BYTES):
 *     d      f16 (8)          the rows' d, row order
 *     ndmin  f16 (8)          the rows' -dmin, row order
 *     sc     u8 (8, 8)        sub-block j's scales: half 0's 4 slots, then half 1's
 *     mn     u8 (4, 8, 2)     sub-blocks 2p and 2p + 1's mins of each row, row order
 *     codes  u8 (8, 4, 32)    sub-block j, quarter q (elements 32 j + 8 q ...): byte 8 i + e
 *                             holds element e of the row in slot i of half 0 (low nibble)
 *                             and of half 1 (high nibble)
 * The halves' slots hold rows (0, 1, 4, 5) and (2, 3, 6, 7): vphaddd of the two halves'
 * int32 sums (two per row) then gives the 8 rows in order.
 *
 * Per (row, token) and super-block: isum = sum over sub-blocks of scale * the exact int32
 * code dot, msum = sum of min * (the token's sum of that sub-block's quants); then
 * acc += (d dx) isum, acc += (-dmin dx) msum, two FMAs in that order. The integer sums are
 * exact (|isum| <= 256 * 63 * 15 * 127), so the tile's shape never changes a bit: a tile of
 * T tokens is T single-token computations side by side (batch invariance, DESIGN.md
 * invariant 1). Packed weights give other bits than the same weights unpacked
 * (matmul_path.h allows it); either form is batch invariant on its own.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_avx2.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

#define R8_INLINE static inline __attribute__((always_inline))

enum {
    OFF_D = 0,
    OFF_NDMIN = 16,
    OFF_SC = 32,
    OFF_MN = 96,
    OFF_CODES = 160,
    TOKS_MAX = 3,         /* tokens a tile computes side by side */
    PREFETCH_BYTES = 4096 /* how far ahead of the block being read the weights are fetched */
};
_Static_assert(OFF_CODES + 8 * 4 * 32 == GRAFT_AVX2_R8_BLOCK_BYTES, "block layout");
_Static_assert(GRAFT_AVX2_R8_BLOCK_BYTES % GRAFT_AVX2_R8_ROWS == 0, "whole bytes per row");

/* The row in slot i (0..3) of half h (0, 1). */
static int slot_row(int h, int i)
{
    return (i < 2 ? i : i + 2) + 2 * h;
}

int graft__avx2_r8_packs(uint32_t type, int64_t n_in, int64_t n_out)
{
    return type == GRAFT_TYPE_Q4_K && n_in > 0 && n_in % QK_K == 0 && n_out > 0 &&
           n_out % GRAFT_AVX2_R8_ROWS == 0;
}

/* codes (256) = the 4-bit codes of a Q4_K block, in element order: qs byte 32 c + l holds
 * element 64 c + l in its low nibble and element 64 c + 32 + l in its high one. */
static void q4k_codes(const uint8_t *block, uint8_t *codes)
{
    const uint8_t *qs = block + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            codes[64 * c + l] = qs[32 * c + l] & 15;
            codes[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
}

static void pack_block(uint8_t *dst, const uint8_t *const rows[GRAFT_AVX2_R8_ROWS])
{
    int sc[GRAFT_AVX2_R8_ROWS][8], mn[GRAFT_AVX2_R8_ROWS][8];
    uint8_t codes[GRAFT_AVX2_R8_ROWS][QK_K];
    for (int r = 0; r < GRAFT_AVX2_R8_ROWS; r++) {
        memcpy(dst + OFF_D + 2 * r, rows[r], 2);
        uint16_t dmin;
        memcpy(&dmin, rows[r] + 2, 2);
        dmin ^= 0x8000; /* f16 negation: the sign bit */
        memcpy(dst + OFF_NDMIN + 2 * r, &dmin, 2);
        for (int j = 0; j < 8; j++)
            graft__scale_min_k4(rows[r] + 4, j, &sc[r][j], &mn[r][j]);
        q4k_codes(rows[r], codes[r]);
    }
    for (int j = 0; j < 8; j++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++)
                dst[OFF_SC + 8 * j + 4 * h + i] = (uint8_t)sc[slot_row(h, i)][j];
    for (int p = 0; p < 4; p++)
        for (int r = 0; r < GRAFT_AVX2_R8_ROWS; r++) {
            dst[OFF_MN + 16 * p + 2 * r] = (uint8_t)mn[r][2 * p];
            dst[OFF_MN + 16 * p + 2 * r + 1] = (uint8_t)mn[r][2 * p + 1];
        }
    for (int i = 0; i < 4; i++) {
        const uint8_t *lo = codes[slot_row(0, i)], *hi = codes[slot_row(1, i)];
        for (int e32 = 0; e32 < QK_K; e32 += 8) /* e32 = 32 j + 8 q */
            for (int e = 0; e < 8; e++)
                dst[OFF_CODES + 4 * e32 + 8 * i + e] = (uint8_t)(lo[e32 + e] | hi[e32 + e] << 4);
    }
}

void graft__avx2_r8_pack(void *dst, const void *w, int64_t n_in, int64_t n_out)
{
    GRAFT_ASSERT(graft__avx2_r8_packs(GRAFT_TYPE_Q4_K, n_in, n_out));
    const int64_t nbk = n_in / QK_K;
    const size_t row_bytes = (size_t)nbk * BLOCK_BYTES_Q4_K;
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_out / GRAFT_AVX2_R8_ROWS; g++)
        for (int64_t b = 0; b < nbk; b++) {
            const uint8_t *rows[GRAFT_AVX2_R8_ROWS];
            for (int r = 0; r < GRAFT_AVX2_R8_ROWS; r++)
                rows[r] = (const uint8_t *)w + (size_t)(g * GRAFT_AVX2_R8_ROWS + r) * row_bytes +
                          (size_t)b * BLOCK_BYTES_Q4_K;
            pack_block(out, rows);
            out += GRAFT_AVX2_R8_BLOCK_BYTES;
        }
}

/* The int16 scale vector of half h for vpmaddwd: lanes 4 i .. 4 i + 3 hold slot i's scale,
 * from sc8, the 8 scale bytes of a sub-block in both 128-bit lanes. */
R8_INLINE __m256i half_scales(__m256i sc8, int h)
{
    const char z = (char)0x80, a = (char)(4 * h), b = (char)(4 * h + 1);
    const char c = (char)(4 * h + 2), d = (char)(4 * h + 3);
    const __m256i idx = _mm256_setr_epi8(a, z, a, z, a, z, a, z, b, z, b, z, b, z, b, z,
                                         c, z, c, z, c, z, c, z, d, z, d, z, d, z, d, z);
    return _mm256_shuffle_epi8(sc8, idx);
}

/* acc[t] (the 8 rows of token t) += super-block sb of the group's block blk, T tokens. */
R8_INLINE void r8_block(int T, const uint8_t *blk, const uint8_t *const *xt,
                        const graft__q8k_layout *l, int64_t sb, __m256 *acc)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i isum[TOKS_MAX][2];
    for (int t = 0; t < T; t++)
        isum[t][0] = isum[t][1] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i s16[TOKS_MAX][2];
        for (int q = 0; q < 4; q++) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(blk + OFF_CODES + 128 * j + 32 * q));
            __m256i c0 = _mm256_and_si256(packed, low4);
            __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
            for (int t = 0; t < T; t++) {
                int64_t x_off = sb * QK_K + 32 * j + 8 * q;
                long long x8;
                memcpy(&x8, xt[t] + x_off, sizeof x8);
                __m256i xv = _mm256_set1_epi64x(x8);
                __m256i p0 = _mm256_maddubs_epi16(c0, xv);
                __m256i p1 = _mm256_maddubs_epi16(c1, xv);
                s16[t][0] = q == 0 ? p0 : _mm256_add_epi16(s16[t][0], p0);
                s16[t][1] = q == 0 ? p1 : _mm256_add_epi16(s16[t][1], p1);
            }
        }
        long long sc_bytes;
        memcpy(&sc_bytes, blk + OFF_SC + 8 * j, sizeof sc_bytes);
        __m256i sc8 = _mm256_set1_epi64x(sc_bytes);
        __m256i sc_h0 = half_scales(sc8, 0), sc_h1 = half_scales(sc8, 1);
        for (int t = 0; t < T; t++) {
            isum[t][0] = _mm256_add_epi32(isum[t][0], _mm256_madd_epi16(s16[t][0], sc_h0));
            isum[t][1] = _mm256_add_epi32(isum[t][1], _mm256_madd_epi16(s16[t][1], sc_h1));
        }
    }
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + OFF_D)));
    __m256 ndmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + OFF_NDMIN)));
    for (int t = 0; t < T; t++) {
        const int16_t *bs32 = (const int16_t *)(xt[t] + l->bsums32) + sb * 8;
        __m256i msum = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            int32_t pair;
            memcpy(&pair, bs32 + 2 * p, sizeof pair);
            __m256i mins = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(blk + OFF_MN + 16 * p)));
            msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins, _mm256_set1_epi32(pair)));
        }
        /* pairs summed: half 0's slots 0-1 and half 1's in the low lane (rows 0-3), slots
         * 2-3 in the high lane (rows 4-7) */
        __m256i rows = _mm256_hadd_epi32(isum[t][0], isum[t][1]);
        __m256 dx = _mm256_set1_ps(((const float *)(xt[t] + l->d))[sb]);
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(rows), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(ndmin, dx), _mm256_cvtepi32_ps(msum), acc[t]);
    }
}

/* y[t * ldy + r] for T tokens and the group's 8 rows. */
R8_INLINE void r8_tile(int T, float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa,
                       size_t act_bytes, int64_t n_in)
{
    const graft__q8k_layout l = graft__q8k_layout_of(n_in);
    const uint8_t *xt[TOKS_MAX];
    __m256 acc[TOKS_MAX];
    for (int t = 0; t < T; t++) {
        xt[t] = xa + (size_t)t * act_bytes;
        acc[t] = _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < n_in / QK_K; sb++) {
        const uint8_t *blk = w + (size_t)sb * GRAFT_AVX2_R8_BLOCK_BYTES;
        for (int i = 0; i < GRAFT_AVX2_R8_BLOCK_BYTES; i += 64) /* may lie past w: harmless */
            _mm_prefetch((const char *)((uintptr_t)blk + PREFETCH_BYTES + (uintptr_t)i),
                         _MM_HINT_T0);
        r8_block(T, blk, xt, &l, sb, acc);
    }
    for (int t = 0; t < T; t++)
        _mm256_storeu_ps(y + t * ldy, acc[t]);
}

static void r8_tile1(float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa, size_t ab,
                     int64_t n_in)
{
    r8_tile(1, y, ldy, w, xa, ab, n_in);
}

static void r8_tile2(float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa, size_t ab,
                     int64_t n_in)
{
    r8_tile(2, y, ldy, w, xa, ab, n_in);
}

static void r8_tile3(float *y, int64_t ldy, const uint8_t *w, const uint8_t *xa, size_t ab,
                     int64_t n_in)
{
    r8_tile(3, y, ldy, w, xa, ab, n_in);
}

void graft__avx2_r8_tile(int nt, float *y, int64_t ldy, const uint8_t *w, size_t row_bytes,
                         int nr, const uint8_t *xa, size_t act_bytes, int64_t n_in)
{
    (void)row_bytes;
    GRAFT_ASSERT(nr == GRAFT_AVX2_R8_ROWS && nt >= 1);
    for (int t = 0; t < nt;) {
        int left = nt - t;
        int n = left == 4 ? 2 : left < TOKS_MAX ? left : TOKS_MAX;
        float *yt = y + t * ldy;
        const uint8_t *xat = xa + (size_t)t * act_bytes;
        if (n == 3)
            r8_tile3(yt, ldy, w, xat, act_bytes, n_in);
        else if (n == 2)
            r8_tile2(yt, ldy, w, xat, act_bytes, n_in);
        else
            r8_tile1(yt, ldy, w, xat, act_bytes, n_in);
        t += n;
    }
}
