/*
 * ops_avx512.c: RMS norm and SwiGLU (kernels.h) with AVX-512, for the avx512 kernel path.
 *
 * graft__rmsnorm_avx512 sums the squares in four 16-lane accumulators, element i going to
 * lane i mod 16 of accumulator (i / 16) mod 4, then adds the four (0+1, 2+3, then the
 * two) and the 16 lanes (_mm512_reduce_add_ps's fixed tree), with a scalar tail in order
 * after them: the order depends only on n, never on which row or batch this is, so a
 * row's result is the same bits however it is batched (DESIGN.md invariant 1). It
 * differs from the scalar reference, which sums in element order, by a few ulp; the
 * scaling x * inv_rms * w is the reference's, element by element.
 * graft__swiglu_avx512 computes silu(x) y = x / (1 + exp(-x)) y with graft__exp_ps
 * (within 2 ulp of expf), element by element, so its result does not depend on n either.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/exp_avx512.h"
#include "kernels/kernels.h"

enum { LANES = 16, SUMS = 4 };

void graft__rmsnorm_avx512(float *out, const float *x, const float *weight, int64_t n,
                           float eps)
{
    __m512 acc[SUMS];
    for (int k = 0; k < SUMS; k++)
        acc[k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + SUMS * LANES <= n; i += SUMS * LANES)
        for (int k = 0; k < SUMS; k++) {
            __m512 v = _mm512_loadu_ps(x + i + k * LANES);
            acc[k] = _mm512_fmadd_ps(v, v, acc[k]);
        }
    for (int k = 0; i + LANES <= n; i += LANES, k++) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc[k] = _mm512_fmadd_ps(v, v, acc[k]);
    }
    float sum_sq = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    for (; i < n; i++)
        sum_sq += x[i] * x[i];
    float mean = sum_sq / (float)n;
    float inv_rms = 1.0f / sqrtf(mean + eps);
    const __m512 vinv = _mm512_set1_ps(inv_rms);
    i = 0;
    for (; i + LANES <= n; i += LANES)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv),
                                                _mm512_loadu_ps(weight + i)));
    for (; i < n; i++)
        out[i] = x[i] * inv_rms * weight[i];
}

void graft__swiglu_avx512(float *x, const float *y, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 e = graft__exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v));
        __m512 silu = _mm512_div_ps(v, _mm512_add_ps(one, e));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(silu, _mm512_loadu_ps(y + i)));
    }
    if (i < n) { /* masked only here: masked loads and stores cost more than plain ones */
        __mmask16 live = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(live, x + i);
        __m512 e = graft__exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v));
        __m512 silu = _mm512_div_ps(v, _mm512_add_ps(one, e));
        __m512 g = _mm512_maskz_loadu_ps(live, y + i);
        _mm512_mask_storeu_ps(x + i, live, _mm512_mul_ps(silu, g));
    }
}
