/*
 * matmul.c: the scalar reference matrix multiplication y = x w^T for weights of any
 * supported type, as graft__matmul and as the "scalar" path of matmul_path.h.
 *
 * Batch invariance (DESIGN.md invariant 1) is the contract: y[t][o] is the dot product of
 * weight row o, decoded by graft__dequantize_row, with activation row t, summed in float
 * in element order starting from 0:
 *
 *     acc = 0; for i in 0..n_in: acc += w[o][i] * x[t][i]
 *
 * and nothing else. How many tokens or rows share a call never changes that order.
 *
 * The loops are arranged to avoid waste without touching the order:
 *   - rows are taken ROWS at a time and their weights decoded one CHUNK of elements at a
 *     time into a stack buffer, so each weight block is decoded exactly once per call and
 *     then used by every token;
 *   - y itself carries the running sums between chunks (a float stored and reloaded is the
 *     same float), and within a chunk the ROWS independent sums of one token advance
 *     together, which keeps the processor busy even when n_tok is 1.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

enum {
    ROWS = 8,   /* weight rows decoded and accumulated together */
    CHUNK = 256 /* elements decoded at a time: a multiple of every block size */
};

/* y (nr) += the dot products of the chunk's rows w (ROWS, CHUNK) with x (len), each one
 * continuing its sum in element order. Rows from nr to ROWS are padding and not stored. */
static void accumulate_chunk(float *y, int nr, const float (*w)[CHUNK], const float *x,
                             int len)
{
    float acc[ROWS] = {0};
    for (int r = 0; r < nr; r++)
        acc[r] = y[r];
    for (int i = 0; i < len; i++) {
        float xi = x[i];
        for (int r = 0; r < ROWS; r++)
            acc[r] += w[r][i] * xi;
    }
    for (int r = 0; r < nr; r++)
        y[r] = acc[r];
}

/* y[t * ldy + o] for o in [o0, o1), t in [0, n_tok): x rows are x_stride floats apart. */
static void scalar_gemm(uint32_t type, float *y, int64_t ldy, const void *w, int64_t n_in,
                        int64_t o0, int64_t o1, const float *x, int64_t x_stride, int64_t n_tok)
{
    GRAFT_ASSERT(graft__type_is_supported(type));
    GRAFT_ASSERT(n_in >= 0 && o0 >= 0 && o1 >= o0 && n_tok >= 0);
    const graft__type_traits *traits = graft__type_traits_of(type);
    GRAFT_ASSERT(n_in % traits->block_elems == 0);
    const uint8_t *weights = w;
    size_t row_bytes = graft__type_row_bytes(type, (uint64_t)n_in);
    float chunk[ROWS][CHUNK]; // (ROWS, CHUNK): decoded weights of the current rows

    for (int64_t r0 = o0; r0 < o1; r0 += ROWS) {
        int nr = o1 - r0 < ROWS ? (int)(o1 - r0) : ROWS;
        for (int64_t t = 0; t < n_tok; t++)
            memset(y + t * ldy + r0, 0, (size_t)nr * sizeof(float));
        for (int64_t k0 = 0; k0 < n_in; k0 += CHUNK) {
            int len = n_in - k0 < CHUNK ? (int)(n_in - k0) : CHUNK;
            size_t offset = graft__type_row_bytes(type, (uint64_t)k0);
            for (int r = 0; r < ROWS; r++) {
                if (r < nr)
                    graft__dequantize_row(type, weights + (size_t)(r0 + r) * row_bytes + offset,
                                          chunk[r], len);
                else
                    memset(chunk[r], 0, sizeof chunk[r]);
            }
            for (int64_t t = 0; t < n_tok; t++)
                accumulate_chunk(y + t * ldy + r0, nr, chunk, x + t * x_stride + k0, len);
        }
    }
}

void graft__matmul(float *y, const void *w, uint32_t type, int64_t n_in, int64_t n_out,
                   const float *x, int64_t n_tok)
{
    scalar_gemm(type, y, n_out, w, n_in, 0, n_out, x, n_in, n_tok);
}

/* The scalar path of matmul_path.h: activations stay float, padded to 64-byte rows. */
static size_t scalar_act_bytes(uint32_t type, int64_t n_in)
{
    (void)type;
    return ((size_t)n_in * sizeof(float) + 63) / 64 * 64;
}

static void scalar_act_prepare(uint32_t type, void *xa, const float *x, int64_t n_in)
{
    (void)type;
    memcpy(xa, x, (size_t)n_in * sizeof(float));
}

static void scalar_path_gemm(uint32_t type, float *y, int64_t ldy, const void *w, int64_t n_in,
                             int64_t o0, int64_t o1, const void *xa, int64_t n_tok)
{
    int64_t stride = (int64_t)(scalar_act_bytes(type, n_in) / sizeof(float));
    scalar_gemm(type, y, ldy, w, n_in, o0, o1, xa, stride, n_tok);
}

const graft__matmul_path graft__matmul_scalar = {.name = "scalar",
                                                 .act_bytes = scalar_act_bytes,
                                                 .act_prepare = scalar_act_prepare,
                                                 .gemm = scalar_path_gemm};
