/*
 * convert_avx2.c: graft__store_row (kernels.h) with F16C, for the avx2 and avx512 kernel
 * paths, which both require F16C.
 *
 * vcvtps2ph with round-to-nearest-even gives the same half as the scalar graft__f32_to_f16
 * for every number (normal, subnormal, overflow to infinity); only the payload bits of a
 * NaN may differ. Eight floats at a time; the last n % 8 go through the scalar
 * conversion.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/util.h"

void graft__store_row_f16c(uint32_t type, void *dst, const float *src, int64_t n)
{
    GRAFT_ASSERT(type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_F32);
    if (type == GRAFT_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = graft__f32_to_f16(src[i]);
}
