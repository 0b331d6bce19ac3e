/*
 * hsum_avx2.h: the sum of a vector's 8 float lanes in one fixed tree, for the avx2 kernels
 * (matmul_avx2.c's dot products, attention_avx2.c's scores and softmax sums). Included only
 * by files compiled for AVX2.
 */
#ifndef GRAFT_HSUM_AVX2_H
#define GRAFT_HSUM_AVX2_H

#include <immintrin.h>

/* Lanes (0+4, 1+5, 2+6, 3+7), then those in pairs, then the last two: the order never
 * depends on the values, so a sum is the same whatever else the kernel computes. */
static inline __attribute__((always_inline)) float graft__hsum8_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
