/*
 * matmul.c: the scalar reference matrix multiplication y = x w^T for weights of any
 * supported type.
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

void graft__matmul(float *y, const void *w, uint32_t type, int64_t n_in, int64_t n_out,
                   const float *x, int64_t n_tok)
{
    GRAFT_ASSERT(graft__type_is_supported(type));
    GRAFT_ASSERT(n_in >= 0 && n_out >= 0 && n_tok >= 0);
    const graft__type_traits *traits = graft__type_traits_of(type);
    GRAFT_ASSERT(n_in % traits->block_elems == 0);
    const uint8_t *weights = w;
    size_t row_bytes = graft__type_row_bytes(type, (uint64_t)n_in);
    float chunk[ROWS][CHUNK]; // (ROWS, CHUNK): decoded weights of the current rows

    for (int64_t o0 = 0; o0 < n_out; o0 += ROWS) {
        int nr = n_out - o0 < ROWS ? (int)(n_out - o0) : ROWS;
        for (int64_t t = 0; t < n_tok; t++)
            memset(y + t * n_out + o0, 0, (size_t)nr * sizeof(float));
        for (int64_t k0 = 0; k0 < n_in; k0 += CHUNK) {
            int len = n_in - k0 < CHUNK ? (int)(n_in - k0) : CHUNK;
            size_t offset = graft__type_row_bytes(type, (uint64_t)k0);
            for (int r = 0; r < ROWS; r++) {
                if (r < nr)
                    graft__dequantize_row(type, weights + (size_t)(o0 + r) * row_bytes + offset,
                                          chunk[r], len);
                else
                    memset(chunk[r], 0, sizeof chunk[r]);
            }
            for (int64_t t = 0; t < n_tok; t++)
                accumulate_chunk(y + t * n_out + o0, nr, chunk, x + t * n_in + k0, len);
        }
    }
}
