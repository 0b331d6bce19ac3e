/*
 * convert.c: scalar conversions between float and the two 16-bit float formats GGUF files
 * use, IEEE binary16 ("f16", also the scale type of every quant block) and bfloat16.
 *
 * Everything is done on bit patterns, so the results do not depend on the compiler or on
 * hardware half-precision support:
 *   - f16 -> f32 is exact (subnormals, infinities and NaN payloads included).
 *   - f32 -> f16 rounds to nearest, ties to even; values from 65520 up become infinity;
 *     NaN stays a (quiet) NaN.
 *   - bf16 -> f32 is exact (bf16 is the top half of an f32).
 *   - f32 -> bf16 rounds to nearest, ties to even; NaN stays a (quiet) NaN.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "util/util.h"

/* Binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. */
float graft__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f) /* infinity or NaN: keep the payload */
        return graft__f32_of_bits(sign | 0x7f800000 | (mant << 13));
    if (exp != 0) /* normal */
        return graft__f32_of_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
    if (mant == 0)
        return graft__f32_of_bits(sign);
    /* Subnormal: mant * 2^-24. Shift the leading one up to the implicit-bit position. */
    uint32_t e = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
        mant <<= 1;
        e--;
    }
    return graft__f32_of_bits(sign | (e << 23) | ((mant & 0x3ff) << 13));
}

/* Rounds `value >> shift` to nearest, ties to even (shift >= 1). */
static uint32_t shift_round_even(uint32_t value, uint32_t shift)
{
    uint32_t kept = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1)))
        kept++;
    return kept;
}

uint16_t graft__f32_to_f16(float f)
{
    uint32_t u = graft__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t mag = u & 0x7fffffff;

    if (mag > 0x7f800000) /* NaN: quiet it, keep the top of the payload */
        return (uint16_t)(sign | 0x7e00 | ((mag >> 13) & 0x3ff));
    if (mag >= 0x477ff000) /* 65520 and up (and infinity) round to infinity */
        return (uint16_t)(sign | 0x7c00);
    if (mag >= 0x38800000) { /* 2^-14 and up: a normal half */
        /* Re-bias the exponent in place; rounding may carry into it, which is right. */
        uint32_t rebased = mag - ((uint32_t)(127 - 15) << 23);
        return (uint16_t)(sign | shift_round_even(rebased, 13));
    }
    /* Below 2^-14: a subnormal half (or zero), the number of 2^-24 units, rounded. An f32 of
     * exponent field e and 24-bit significand m is m * 2^(e - 150), i.e. m >> (126 - e)
     * units. */
    uint32_t e = mag >> 23;
    uint32_t shift = 126 - e;
    if (shift > 24) /* below 2^-25: rounds to zero */
        return sign;
    uint32_t m = (mag & 0x7fffff) | 0x800000;
    return (uint16_t)(sign | shift_round_even(m, shift));
}

float graft__bf16_to_f32(uint16_t b)
{
    return graft__f32_of_bits((uint32_t)b << 16);
}

uint16_t graft__f32_to_bf16(float f)
{
    uint32_t u = graft__f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) /* NaN: quiet it */
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)(shift_round_even(u, 16));
}

void graft__store_row(uint32_t type, void *dst, const float *src, int64_t n)
{
    GRAFT_ASSERT(type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_F32);
    if (type == GRAFT_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = graft__f32_to_f16(src[i]);
}
