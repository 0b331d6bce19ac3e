/*
 * exp_avx2.h: exp of 8 floats at once, within 2 ulp of expf on the range attention uses,
 * for the avx2 kernels (the softmax in attention_avx2.c). Included only by files compiled
 * for AVX2 and FMA. The same method as exp_avx512.h, with 2^n built from its exponent bits
 * (AVX2 has no vscalefps).
 */
#ifndef GRAFT_EXP_AVX2_H
#define GRAFT_EXP_AVX2_H

#include <immintrin.h>

/* exp(x), lane by lane: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6 Taylor
 * polynomial (error below 2e-8 relative on that range), times 2^n. Below -87.3 the result
 * is 0, as expf's is within float's normal range; x is clamped to 88 above (attention's
 * arguments are differences from a maximum, never above 0). */
static inline __m256 graft__exp8_ps(__m256 x)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n is in [-126, 127] here, so 2^n is the normal float of biased exponent n + 127 */
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

#endif
