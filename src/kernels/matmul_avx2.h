/*
 * matmul_avx2.h: what the files of the AVX2 matmul path share (private to them; only files
 * compiled with AVX2 enabled, *_avx2.c, may include it).
 *
 *   matmul_avx2.c          the graft__matmul_path object, the tiling driver and the kernels
 *                          of every GGUF type
 *   matmul_q4k_r8_avx2.c   packed Q4_K (8 interleaved rows): the packing and its tile
 *   matmul_q32_r8_avx2.c   packed Q8_0 and Q4_0 (8 interleaved rows): the same
 * The avxvnni path compiles matmul_avx2.c and matmul_q32_r8_avx2.c a second time with
 * GRAFT_AVX_VNNI defined; GRAFT_AVX2_NAME names what each compilation exports.
 */
#ifndef GRAFT_MATMUL_AVX2_H
#define GRAFT_MATMUL_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant_formats.h"

#ifdef GRAFT_AVX_VNNI
#define GRAFT_AVX2_NAME(name) graft__avxvnni_##name
#else
#define GRAFT_AVX2_NAME(name) graft__avx2_##name
#endif

/* One token's activations for the K-quants, quantized per 256 (Q8_K-like), each section
 * 64-byte aligned:
 *     qs      int8  (n_in)                 the quants
 *     d       float (nbk rounded up to 16) super-block scales, nbk = n_in / 256
 *     bsums   int16 (nbk, 16)              sums of the quants of each 16 elements
 *     bsums32 int16 (nbk, 8)               sums of the quants of each 32 elements */
typedef struct graft__q8k_layout {
    size_t d, bsums, bsums32; /* byte offsets of the sections */
    size_t bytes;             /* one token */
} graft__q8k_layout;

static inline graft__q8k_layout graft__q8k_layout_of(int64_t n_in)
{
    size_t nbk = (size_t)n_in / QK_K;
    graft__q8k_layout l;
    l.d = ((size_t)n_in + 63) / 64 * 64;
    l.bsums = l.d + (nbk + 15) / 16 * 16 * sizeof(float);
    l.bsums32 = l.bsums + (nbk * 16 * sizeof(int16_t) + 63) / 64 * 64;
    l.bytes = l.bsums32 + (nbk * 8 * sizeof(int16_t) + 63) / 64 * 64;
    return l;
}

/* Packed Q4_K: rows in groups of 8, each group's super-blocks one after the other, 1184
 * bytes each (matmul_q4k_r8_avx2.c), so a row takes 148 bytes per super-block. */
enum { GRAFT_AVX2_R8_ROWS = 8, GRAFT_AVX2_R8_BLOCK_BYTES = 1184 };

/* Whether weights (n_out, n_in) of `type` have the packed form: Q4_K with n_in a multiple
 * of 256 and n_out a positive multiple of 8. */
int graft__avx2_r8_packs(uint32_t type, int64_t n_in, int64_t n_out);
/* dst (n_out / 8 * n_in / 256 * 1184 bytes) = the Q4_K matrix w (n_out, n_in) packed. */
void graft__avx2_r8_pack(void *dst, const void *w, int64_t n_in, int64_t n_out);
/* The tile of packed Q4_K: y[t * ldy + r] for t < nt (1..6) and the 8 rows of the group at
 * w (nr must be 8), from the activations xa + t * act_bytes (graft__q8k_layout_of). */
void graft__avx2_r8_tile(int nt, float *y, int64_t ldy, const uint8_t *w, size_t row_bytes,
                         int nr, const uint8_t *xa, size_t act_bytes, int64_t n_in);

/* One token's activations for packed Q8_0 and Q4_0, quantized per 32 (as for Q8_0), each
 * section 64-byte aligned:
 *     qs    int8  (n_in)   the quants
 *     dx    float (nb)     block scales, nb = n_in / 32
 *     bias  int32 (nb)     -offset * the sum of the block's quants, offset the one the
 *                          packed codes carry: Q4_0 8; Q8_0 128 with VNNI, else 0 */
typedef struct graft__q32r8_layout {
    size_t dx, bias; /* byte offsets of the sections */
    size_t bytes;    /* one token */
} graft__q32r8_layout;

static inline graft__q32r8_layout graft__q32r8_layout_of(int64_t n_in)
{
    size_t nb = (size_t)n_in / QK;
    graft__q32r8_layout l;
    l.dx = ((size_t)n_in + 63) / 64 * 64;
    l.bias = l.dx + (nb * sizeof(float) + 63) / 64 * 64;
    l.bytes = l.bias + (nb * sizeof(int32_t) + 63) / 64 * 64;
    return l;
}

/* Packed Q8_0 and Q4_0: rows in groups of 8, each group's blocks one after the other
 * (matmul_q32_r8_avx2.c), 8 times the GGUF block size each.
 * packs: whether weights (n_out, n_in) of `type` have the packed form: Q8_0 or Q4_0 with
 * n_in a multiple of 32 and n_out a positive multiple of 8. block_bytes: a group's block.
 * pack: dst (n_out / 8 * n_in / 32 blocks) = the matrix w (n_out, n_in) of `type` packed. */
int graft__avx2_q32r8_packs(uint32_t type, int64_t n_in, int64_t n_out);
size_t graft__avx2_q32r8_block_bytes(uint32_t type);
void graft__avx2_q32r8_pack(uint32_t type, void *dst, const void *w, int64_t n_in, int64_t n_out);
/* The tiles of packed Q8_0 and Q4_0, each path its own (GRAFT_AVX2_NAME): y[t * ldy + r] for
 * t < nt (1..6) and the 8 rows of the group at w (nr must be 8), from the activations
 * xa + t * act_bytes (graft__q32r8_layout). */
void graft__avx2_q32r8_tile_q8_0(int nt, float *y, int64_t ldy, const uint8_t *w,
                                 size_t row_bytes, int nr, const uint8_t *xa, size_t act_bytes,
                                 int64_t n_in);
void graft__avx2_q32r8_tile_q4_0(int nt, float *y, int64_t ldy, const uint8_t *w,
                                 size_t row_bytes, int nr, const uint8_t *xa, size_t act_bytes,
                                 int64_t n_in);
void graft__avxvnni_q32r8_tile_q8_0(int nt, float *y, int64_t ldy, const uint8_t *w,
                                    size_t row_bytes, int nr, const uint8_t *xa,
                                    size_t act_bytes, int64_t n_in);
void graft__avxvnni_q32r8_tile_q4_0(int nt, float *y, int64_t ldy, const uint8_t *w,
                                    size_t row_bytes, int nr, const uint8_t *xa,
                                    size_t act_bytes, int64_t n_in);

#endif /* GRAFT_MATMUL_AVX2_H */
