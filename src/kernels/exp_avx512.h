/*
 * exp_avx512.h: exp of 16 floats at once, within 2 ulp of expf, for the avx512 kernels
 * (the softmax in attention_avx512.c, SiLU in ops_avx512.c). Included only by files
 * compiled for AVX-512.
 */
#ifndef GRAFT_EXP_AVX512_H
#define GRAFT_EXP_AVX512_H

#include <immintrin.h>

/* exp(x), lane by lane: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6 Taylor
 * polynomial (error below 2e-8 relative on that range), scaled by 2^n (vscalefps, which
 * gives +inf where that overflows: x above about 88.7, and for +inf). Below -87.3 the
 * result is 0, as expf's is within float's normal range. */
static inline __m512 graft__exp_ps(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}

#endif
