/*
 * act_quant.c: the emulated activation quantization (act_quant.h).
 */
#include <math.h>

#include "act_quant.h"

void graft_test_quantize_acts(double *xq, const float *x, int64_t n, int block, float min_amax)
{
    for (int64_t b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int i = 0; i < block; i++)
            amax = fmaxf(amax, fabsf(x[b + i]));
        float id = amax > min_amax ? 127.0f / amax : 0.0f;
        float d = amax / 127.0f;
        for (int i = 0; i < block; i++)
            xq[b + i] = (double)d * nearbyintf(x[b + i] * id);
    }
}
