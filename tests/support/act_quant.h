/*
 * act_quant.h: an emulation of the SIMD paths' activation quantization, for the exact
 * checks of test_matmul_avx2.c and test_matmul_avx512.c.
 *
 * Both paths quantize a token's activations per block as llama.cpp's Q8_0 / Q8_K do:
 * d = amax / 127 (f32) and q = round-half-even(x * (127 / amax)) in -127..127, with q = 0
 * when amax is at most `min_amax` (AVX2 2^-96, where 127 / amax would overflow; AVX-512
 * 0). A matmul on such activations must equal, up to float rounding, the dot product of
 * the decoded weights with xq = d * q.
 */
#ifndef GRAFT_TEST_ACT_QUANT_H
#define GRAFT_TEST_ACT_QUANT_H

#include <stdint.h>

/* xq (n) = x (n) quantized and decoded per block of `block` elements (n a multiple). */
void graft_test_quantize_acts(double *xq, const float *x, int64_t n, int block, float min_amax);

#endif /* GRAFT_TEST_ACT_QUANT_H */
