/*
 * test_kernels.c: the scalar reference kernels (src/kernels/) against values known
 * independently of them.
 *
 * - Conversions: known bit patterns, rounding ties, every f16 value.
 * - Dequantizers: hand-built blocks of every type, decoded element by element from the
 *   format's definition written out again here (plus a few values worked out by hand).
 * - Quantizers: quantize -> dequantize error within each format's quantization step.
 * - Matmul: against a double dot product of the decoded rows, bit-equal to the plain float
 *   dot in element order, and bit-identical whatever the batch (n_tok, token order, rows).
 * - RoPE on a hand-computed example; rmsnorm, softmax, the gated activations, softcap and
 *   attention against double-precision formulas; attention's determinism over prefixes.
 * - graft__argmax (src/util/argmax.c, greedy sampling) against the plain one-pass loop.
 *   The AVX-512 rmsnorm and SwiGLU (ops_avx512.c) against the same formulas and tolerances,
 *   skipped (and reported so, tests/support/skips.h) where the processor lacks AVX-512.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "fixtures.h"
#include "kernels/kernels.h"
#include "skips.h"
#include "util/argmax.h"
#include "util/util.h"

/* ------------------------------------------------------------------------------------
 * Helpers: a deterministic random source, bit casts, block byte writers.
 */
static void rng_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(graft_test_rng_u32() >> 24);
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Half values used as block scales, written as bit patterns (exactly representable). */
#define H_ONE 0x3c00     /* 1.0 */
#define H_HALF 0x3800    /* 0.5 */
#define H_QUARTER 0x3400 /* 0.25 */
#define H_M1_5 0xbe00    /* -1.5 */

static void assert_float_bits_equal(float got, float want)
{
    if (graft__f32_bits(got) != graft__f32_bits(want))
        fail_msg("got %.9g (0x%08x), want %.9g (0x%08x)", got, graft__f32_bits(got), want,
                 graft__f32_bits(want));
}

static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.9g, want %.9g (tolerance %.3g)", got, want, tol);
}

/* ------------------------------------------------------------------------------------
 * Conversions.
 */
static void test_f16_to_f32_known(void **state)
{
    (void)state;
    assert_float_bits_equal(graft__f16_to_f32(0x3c00), 1.0f);
    assert_float_bits_equal(graft__f16_to_f32(0xc000), -2.0f);
    assert_float_bits_equal(graft__f16_to_f32(0x3555), 0.333251953125f);
    assert_float_bits_equal(graft__f16_to_f32(0x7bff), 65504.0f);
    assert_float_bits_equal(graft__f16_to_f32(0x0400), 0x1p-14f);
    assert_float_bits_equal(graft__f16_to_f32(0x0001), 0x1p-24f);
    assert_float_bits_equal(graft__f16_to_f32(0x03ff), 1023 * 0x1p-24f);
    assert_float_bits_equal(graft__f16_to_f32(0x8001), -0x1p-24f);
    assert_float_bits_equal(graft__f16_to_f32(0x0000), 0.0f);
    assert_float_bits_equal(graft__f16_to_f32(0x8000), -0.0f);
    assert_float_bits_equal(graft__f16_to_f32(0x7c00), INFINITY);
    assert_float_bits_equal(graft__f16_to_f32(0xfc00), -INFINITY);
    assert_true(isnan(graft__f16_to_f32(0x7e00)));
    assert_true(isnan(graft__f16_to_f32(0x7c01)));
}

static void test_f16_every_value(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
        double sign = (h & 0x8000) ? -1.0 : 1.0;
        float f = graft__f16_to_f32((uint16_t)h);
        if (exp == 0x1f) {
            assert_true(mant == 0 ? isinf(f) : isnan(f));
            if (mant != 0)
                assert_true(isnan(graft__f16_to_f32(graft__f32_to_f16(f))));
            else
                assert_int_equal(graft__f32_to_f16(f), h);
            continue;
        }
        double want = exp == 0 ? sign * ldexp((double)mant, -24)
                               : sign * ldexp((double)(1024 + mant), (int)exp - 25);
        assert_true((double)f == want);
        assert_int_equal(graft__f32_to_f16(f), h); /* exact values convert back exactly */
    }
}

static void test_f32_to_f16_rounding(void **state)
{
    (void)state;
    assert_int_equal(graft__f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(graft__f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(graft__f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie: to even */
    assert_int_equal(graft__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie: to even */
    assert_int_equal(graft__f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(graft__f32_to_f16(2047.0f / 2048.0f), 0x3bff);
    assert_int_equal(graft__f32_to_f16(4095.0f / 4096.0f), 0x3c00); /* carries into exp */
    assert_int_equal(graft__f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(graft__f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(graft__f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(graft__f32_to_f16(-1e6f), 0xfc00);
    assert_int_equal(graft__f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(graft__f32_to_f16(0x1p-14f), 0x0400);
    assert_int_equal(graft__f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* 1023.5 units */
    assert_int_equal(graft__f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(graft__f32_to_f16(0x1p-25f), 0x0000);     /* half a unit: to even */
    assert_int_equal(graft__f32_to_f16(1.5f * 0x1p-25f), 0x0001);
    assert_int_equal(graft__f32_to_f16(3 * 0x1p-25f), 0x0002); /* 1.5 units: to even */
    assert_int_equal(graft__f32_to_f16(-5 * 0x1p-25f), 0x8002); /* 2.5 units: to even */
    assert_int_equal(graft__f32_to_f16(0x1p-30f), 0x0000);
    assert_int_equal(graft__f32_to_f16(graft__f32_of_bits(0x00000001)), 0x0000);
    uint16_t nan = graft__f32_to_f16(graft__f32_of_bits(0x7f800001)); /* signalling, low payload */
    assert_int_equal(nan & 0x7c00, 0x7c00);
    assert_true((nan & 0x3ff) != 0);
}

static void test_bf16(void **state)
{
    (void)state;
    assert_float_bits_equal(graft__bf16_to_f32(0x3f80), 1.0f);
    assert_float_bits_equal(graft__bf16_to_f32(0xc040), -3.0f);
    assert_float_bits_equal(graft__bf16_to_f32(0x0001), graft__f32_of_bits(0x00010000));
    assert_int_equal(graft__f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(graft__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie: to even */
    assert_int_equal(graft__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: to even */
    assert_int_equal(graft__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(graft__f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(graft__f32_to_bf16(INFINITY), 0x7f80);
    /* The largest finite float rounds to infinity. */
    assert_int_equal(graft__f32_to_bf16(graft__f32_of_bits(0x7f7fffff)), 0x7f80);
    /* A NaN whose payload is only in the low bits. */
    uint16_t nan = graft__f32_to_bf16(graft__f32_of_bits(0x7f800001));
    assert_true(isnan(graft__bf16_to_f32(nan)));
    assert_true(isnan(graft__bf16_to_f32(graft__f32_to_bf16(-NAN))));
}

/* ------------------------------------------------------------------------------------
 * Dequantizers. Each expected value is computed from the format's definition: the
 * element's code, scale and offset are located in the block bytes directly.
 */
/* The 4-bit code of element j (0..31) of a legacy block's 16 quant bytes. */
static int nibble_of(const uint8_t *qs, int j)
{
    return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

/* The fifth bit of element j from a legacy block's 4 qh bytes (a little-endian u32). */
static int qh_bit_of(const uint8_t *qh, int j)
{
    return (qh[j / 8] >> (j % 8)) & 1;
}

static void dequantize_block(uint32_t type, const uint8_t *block, float *y, int n)
{
    graft__dequantize_row(type, block, y, n);
}

static void test_dequantize_q4_0(void **state)
{
    (void)state;
    uint8_t b[18];
    float y[32];
    graft_test_rng_seed(1);
    rng_bytes(b, sizeof b);
    put_u16(b, H_HALF);
    b[2] = 0x1f; /* element 0: code 15, element 16: code 1 */
    dequantize_block(GRAFT_TYPE_Q4_0, b, y, 32);
    assert_float_bits_equal(y[0], 3.5f);   /* (15 - 8) * 0.5 */
    assert_float_bits_equal(y[16], -3.5f); /* (1 - 8) * 0.5 */
    for (int j = 0; j < 32; j++)
        assert_float_bits_equal(y[j], (float)(nibble_of(b + 2, j) - 8) * 0.5f);

    put_u16(b, H_M1_5); /* a negative scale is legal */
    dequantize_block(GRAFT_TYPE_Q4_0, b, y, 32);
    for (int j = 0; j < 32; j++)
        assert_float_bits_equal(y[j], (float)(nibble_of(b + 2, j) - 8) * -1.5f);
}

static void test_dequantize_q4_1(void **state)
{
    (void)state;
    uint8_t b[20];
    float y[32];
    graft_test_rng_seed(2);
    rng_bytes(b, sizeof b);
    put_u16(b, H_QUARTER);
    put_u16(b + 2, H_M1_5);
    b[4] = 0xa3; /* element 0: code 3, element 16: code 10 */
    dequantize_block(GRAFT_TYPE_Q4_1, b, y, 32);
    assert_float_bits_equal(y[0], -0.75f); /* 3 * 0.25 - 1.5 */
    assert_float_bits_equal(y[16], 1.0f);  /* 10 * 0.25 - 1.5 */
    for (int j = 0; j < 32; j++)
        assert_float_bits_equal(y[j], (float)nibble_of(b + 4, j) * 0.25f - 1.5f);
}

static void test_dequantize_q5_0(void **state)
{
    (void)state;
    uint8_t b[22];
    float y[32];
    graft_test_rng_seed(3);
    rng_bytes(b, sizeof b);
    put_u16(b, H_HALF);
    b[2] = 0x01;  /* qh bit 0: element 0 has its fifth bit */
    b[4] &= 0xfe; /* qh bit 16: element 16 has not */
    b[6] = 0x5f;  /* element 0: low 15, element 16: low 5 */
    dequantize_block(GRAFT_TYPE_Q5_0, b, y, 32);
    assert_float_bits_equal(y[0], 7.5f);   /* (31 - 16) * 0.5 */
    assert_float_bits_equal(y[16], -5.5f); /* (5 - 16) * 0.5 */
    for (int j = 0; j < 32; j++) {
        int q = nibble_of(b + 6, j) + 16 * qh_bit_of(b + 2, j);
        assert_float_bits_equal(y[j], (float)(q - 16) * 0.5f);
    }
}

static void test_dequantize_q5_1(void **state)
{
    (void)state;
    uint8_t b[24];
    float y[32];
    graft_test_rng_seed(4);
    rng_bytes(b, sizeof b);
    put_u16(b, H_QUARTER);
    put_u16(b + 2, H_ONE);
    b[6] |= 0x01; /* qh bit 16: element 16 has its fifth bit */
    b[8] = 0x20;  /* element 16: low 2 */
    dequantize_block(GRAFT_TYPE_Q5_1, b, y, 32);
    assert_float_bits_equal(y[16], 5.5f); /* 18 * 0.25 + 1 */
    for (int j = 0; j < 32; j++) {
        int q = nibble_of(b + 8, j) + 16 * qh_bit_of(b + 4, j);
        assert_float_bits_equal(y[j], (float)q * 0.25f + 1.0f);
    }
}

static void test_dequantize_q8_0(void **state)
{
    (void)state;
    uint8_t b[34];
    float y[32];
    graft_test_rng_seed(5);
    rng_bytes(b, sizeof b);
    put_u16(b, H_QUARTER);
    b[2] = 0x80; /* -128 */
    b[3] = 0x7f; /* 127 */
    dequantize_block(GRAFT_TYPE_Q8_0, b, y, 32);
    assert_float_bits_equal(y[0], -32.0f);
    assert_float_bits_equal(y[1], 31.75f);
    for (int j = 0; j < 32; j++)
        assert_float_bits_equal(y[j], (float)(int8_t)b[2 + j] * 0.25f);
}

static void test_dequantize_iq4_nl(void **state)
{
    (void)state;
    static const int values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
    uint8_t b[18];
    float y[32];
    graft_test_rng_seed(6);
    rng_bytes(b, sizeof b);
    put_u16(b, H_HALF);
    b[2] = 0xf0; /* element 0: code 0, element 16: code 15 */
    dequantize_block(GRAFT_TYPE_IQ4_NL, b, y, 32);
    assert_float_bits_equal(y[0], -63.5f);
    assert_float_bits_equal(y[16], 56.5f);
    for (int j = 0; j < 32; j++)
        assert_float_bits_equal(y[j], 0.5f * (float)values[nibble_of(b + 2, j)]);
}

/* Q4_K/Q5_K: 6-bit scale and min of sub-block j from the 12 scale bytes. Sub-blocks 0-3
 * keep theirs in the low 6 bits of bytes j and j+4; sub-blocks 4-7 keep their low 4 bits
 * in byte j+4 (scale: low nibble, min: high nibble) and their top 2 bits in the top of
 * bytes j-4 (scale) and j (min). */
static int k4_scale(const uint8_t *s, int j)
{
    return j < 4 ? s[j] % 64 : s[j + 4] % 16 + 16 * (s[j - 4] / 64);
}

static int k4_min(const uint8_t *s, int j)
{
    return j < 4 ? s[j + 4] % 64 : s[j + 4] / 16 + 16 * (s[j] / 64);
}

/* Q4_K/Q5_K: low 4 bits of element e: groups of 64 share 32 bytes, the first 32 elements
 * of a group in the low nibbles, the next 32 in the high nibbles. */
static int k4_nibble(const uint8_t *qs, int e)
{
    int byte = qs[32 * (e / 64) + e % 32];
    return e % 64 < 32 ? byte & 15 : byte >> 4;
}

/* Super-block scales for the element-by-element checks: powers of two, and values with a
 * full 11-bit significand. */
static const uint16_t k_d_bits[2] = {H_HALF, 0x3555};    /* 0.5, 0.333251953125 */
static const uint16_t k_dmin_bits[2] = {H_ONE, 0x2e66};  /* 1, 0.0999755859375 */

static void test_dequantize_q4_k(void **state)
{
    (void)state;
    uint8_t b[144];
    float y[256];
    graft_test_rng_seed(7);
    rng_bytes(b, sizeof b);
    put_u16(b, H_HALF);     /* d */
    put_u16(b + 2, H_ONE);  /* dmin */
    uint8_t *s = b + 4, *qs = b + 16;
    s[0] = 0x45;  /* scale 0 = 5; top bits 01 -> scale 4 gets +16 */
    s[4] = 0x83;  /* min 0 = 3; top bits 10 -> min 4 gets +32 */
    s[8] = 0x72;  /* scale 4 low = 2, min 4 low = 7: scale 4 = 18, min 4 = 39 */
    qs[0] = 0x9c; /* element 0: 12 (sub-block 0), element 32: 9 (sub-block 1) */
    qs[64] = 0x0b; /* element 128: 11 (sub-block 4) */
    dequantize_block(GRAFT_TYPE_Q4_K, b, y, 256);
    assert_float_bits_equal(y[0], 27.0f);   /* 0.5 * 5 * 12 - 1 * 3 */
    assert_float_bits_equal(y[128], 60.0f); /* 0.5 * 18 * 11 - 1 * 39 */
    for (int k = 0; k < 2; k++) {
        put_u16(b, k_d_bits[k]);
        put_u16(b + 2, k_dmin_bits[k]);
        float d = graft__f16_to_f32(k_d_bits[k]), dmin = graft__f16_to_f32(k_dmin_bits[k]);
        dequantize_block(GRAFT_TYPE_Q4_K, b, y, 256);
        for (int e = 0; e < 256; e++) {
            int j = e / 32;
            float scale = d * (float)k4_scale(s, j), min = dmin * (float)k4_min(s, j);
            assert_float_bits_equal(y[e], scale * (float)k4_nibble(qs, e) - min);
        }
    }
}

static void test_dequantize_q5_k(void **state)
{
    (void)state;
    uint8_t b[176];
    float y[256];
    graft_test_rng_seed(8);
    rng_bytes(b, sizeof b);
    put_u16(b, H_QUARTER);
    put_u16(b + 2, H_HALF);
    uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
    s[1] = 0x0a;  /* scale 1 = 10 */
    s[5] = 0x04;  /* min 1 = 4 */
    qs[3] = 0x70; /* element 35 (group 0, high half): low 4 bits 7 */
    qh[3] = 0x02; /* bit 1: element 35 has its fifth bit */
    dequantize_block(GRAFT_TYPE_Q5_K, b, y, 256);
    assert_float_bits_equal(y[35], 55.5f); /* 0.25 * 10 * 23 - 0.5 * 4 */
    for (int k = 0; k < 2; k++) {
        put_u16(b, k_d_bits[k]);
        put_u16(b + 2, k_dmin_bits[k]);
        float d = graft__f16_to_f32(k_d_bits[k]), dmin = graft__f16_to_f32(k_dmin_bits[k]);
        dequantize_block(GRAFT_TYPE_Q5_K, b, y, 256);
        for (int e = 0; e < 256; e++) {
            int j = e / 32, g = e / 64, high_half = e % 64 >= 32;
            int q = k4_nibble(qs, e) + 16 * ((qh[e % 32] >> (2 * g + high_half)) & 1);
            float scale = d * (float)k4_scale(s, j), min = dmin * (float)k4_min(s, j);
            assert_float_bits_equal(y[e], scale * (float)q - min);
        }
    }
}

static void test_dequantize_q6_k(void **state)
{
    (void)state;
    uint8_t b[210];
    float y[256];
    graft_test_rng_seed(9);
    rng_bytes(b, sizeof b);
    uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
    put_u16(b + 208, H_HALF);
    sc[0] = 0xfd;  /* -3 */
    sc[14] = 0x07; /* 7: elements 224..239 */
    ql[0] = 0x05;  /* element 0: low 4 bits 5 */
    qh[0] = 0x01;  /* element 0: top bits 01 -> code 21 */
    ql[96] = 0xe0; /* half 1, byte 32: high nibble = element 128 + 96 + 0 = 224: 14 */
    qh[32] = 0xc0; /* half 1, byte 0, bits 6-7: element 224 top bits 11 -> code 62 */
    dequantize_block(GRAFT_TYPE_Q6_K, b, y, 256);
    assert_float_bits_equal(y[0], 16.5f);   /* 0.5 * -3 * (21 - 32) */
    assert_float_bits_equal(y[224], 105.0f); /* 0.5 * 7 * (62 - 32) */
    for (int c = 0; c < 2; c++) {
        put_u16(b + 208, k_d_bits[c]);
        float d = graft__f16_to_f32(k_d_bits[c]);
        dequantize_block(GRAFT_TYPE_Q6_K, b, y, 256);
        for (int e = 0; e < 256; e++) {
            int h = e / 128, k = (e % 128) / 32, l = e % 32;
            int byte = ql[64 * h + 32 * (k % 2) + l];
            int q = (k < 2 ? byte & 15 : byte >> 4) + 16 * ((qh[32 * h + l] >> (2 * k)) & 3);
            float scale = d * (float)(int8_t)sc[e / 16];
            assert_float_bits_equal(y[e], scale * (float)(q - 32));
        }
    }
}

static void test_dequantize_float_types(void **state)
{
    (void)state;
    const float f32[3] = {1.5f, -0.0f, 1e-30f};
    float y[3];
    graft__dequantize_row(GRAFT_TYPE_F32, f32, y, 3);
    assert_memory_equal(y, f32, sizeof y);
    const uint8_t f16[6] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0xc2}; /* 1, 2^-24, -3 */
    graft__dequantize_row(GRAFT_TYPE_F16, f16, y, 3);
    assert_float_bits_equal(y[0], 1.0f);
    assert_float_bits_equal(y[1], 0x1p-24f);
    assert_float_bits_equal(y[2], -3.0f);
    const uint8_t bf16[6] = {0x80, 0x3f, 0x40, 0xc0, 0x00, 0x00}; /* 1, -3, 0 */
    graft__dequantize_row(GRAFT_TYPE_BF16, bf16, y, 3);
    assert_float_bits_equal(y[0], 1.0f);
    assert_float_bits_equal(y[1], -3.0f);
    assert_float_bits_equal(y[2], 0.0f);
}

/* A row of several blocks decodes block by block (the second block is not the first). */
static void test_dequantize_multi_block_row(void **state)
{
    (void)state;
    uint8_t row[2 * 210];
    float y[512], one[256];
    graft_test_rng_seed(10);
    rng_bytes(row, sizeof row);
    put_u16(row + 208, H_HALF);
    put_u16(row + 210 + 208, H_QUARTER);
    graft__dequantize_row(GRAFT_TYPE_Q6_K, row, y, 512);
    graft__dequantize_row(GRAFT_TYPE_Q6_K, row + 210, one, 256);
    assert_memory_equal(y + 256, one, sizeof one);
}

static void test_supported_types(void **state)
{
    (void)state;
    const uint32_t yes[] = {GRAFT_TYPE_F32,  GRAFT_TYPE_F16,  GRAFT_TYPE_BF16,
                            GRAFT_TYPE_Q8_0, GRAFT_TYPE_Q4_0, GRAFT_TYPE_Q4_1,
                            GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1, GRAFT_TYPE_IQ4_NL,
                            GRAFT_TYPE_Q4_K, GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K};
    const uint32_t no[] = {GRAFT_TYPE_Q8_1, GRAFT_TYPE_Q2_K, GRAFT_TYPE_Q3_K,
                           GRAFT_TYPE_Q8_K, 4, 39, 40, 1000};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_true(graft__type_is_supported(yes[i]));
    float x[256] = {0};
    uint8_t out[512];
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        assert_false(graft__type_is_supported(no[i]));
        assert_int_equal(graft__quantize_row(no[i], x, out, 256), GRAFT_EUNSUPPORTED);
    }
}

/* ------------------------------------------------------------------------------------
 * Quantize -> dequantize round trips. Inputs: blocks of varied magnitude, some offset so
 * that whole sub-blocks are positive or negative. Every bound below is the format's
 * quantization step (from the input's own range), halved, plus the small slack the f16
 * scales and the 6/8-bit sub-block scales allow.
 */
#define RT_N 1024

static void make_test_row(float *x, int n, uint64_t seed)
{
    graft_test_rng_seed(seed);
    for (int i = 0; i < n; i++) {
        int sub = i / 16;
        float amp = (float)(1 + sub % 7) * 0.3f;
        float shift = sub % 5 == 1 ? 2.0f * amp : sub % 5 == 3 ? -1.5f * amp : 0.0f;
        x[i] = graft_test_rng_float() * amp + shift;
    }
}

static void round_trip(uint32_t type, const float *x, float *y, int n)
{
    static uint8_t buf[RT_N * 4];
    assert_int_equal(graft__quantize_row(type, x, buf, n), GRAFT_OK);
    graft__dequantize_row(type, buf, y, n);
}

static double span_abs_max(const float *x, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

/* The element of largest magnitude, with its sign (the first on ties). */
static double span_signed_max(const float *x, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        if (fabs((double)x[i]) > fabs(m))
            m = x[i];
    return m;
}

static void span_min_max(const float *x, int n, double *lo, double *hi)
{
    *lo = *hi = x[0];
    for (int i = 1; i < n; i++) {
        *lo = fmin(*lo, x[i]);
        *hi = fmax(*hi, x[i]);
    }
}

static void assert_error_within(float got, float want, double bound, uint32_t type, int i)
{
    double err = fabs((double)got - (double)want);
    if (!(err <= bound))
        fail_msg("type %u element %d: %.9g for %.9g, error %.3g over bound %.3g", type, i,
                 got, want, err, bound);
}

static void test_round_trip_float_types(void **state)
{
    (void)state;
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, 11);
    round_trip(GRAFT_TYPE_F32, x, y, RT_N);
    assert_memory_equal(x, y, sizeof x);
    round_trip(GRAFT_TYPE_F16, x, y, RT_N);
    for (int i = 0; i < RT_N; i++)
        assert_error_within(y[i], x[i], fabs(x[i]) * 0x1p-11, GRAFT_TYPE_F16, i);
    round_trip(GRAFT_TYPE_BF16, x, y, RT_N);
    for (int i = 0; i < RT_N; i++)
        assert_error_within(y[i], x[i], fabs(x[i]) * 0x1p-8, GRAFT_TYPE_BF16, i);
}

static void test_round_trip_q8_0(void **state)
{
    (void)state;
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, 12);
    round_trip(GRAFT_TYPE_Q8_0, x, y, RT_N);
    for (int b = 0; b < RT_N; b += 32) {
        double step = span_abs_max(x + b, 32) / 127;
        for (int i = b; i < b + 32; i++)
            assert_error_within(y[i], x[i], 0.5 * step * 1.001 + 1e-6 * step * 127,
                                GRAFT_TYPE_Q8_0, i);
    }
    /* Values on the grid of an exact scale come back exactly. */
    for (int j = 0; j < 32; j++)
        x[j] = 0.125f * (float)((j * 37) % 255 - 127);
    round_trip(GRAFT_TYPE_Q8_0, x, y, 32);
    assert_memory_equal(x, y, 32 * sizeof(float));
}

/* Q4_0 (bits 4) and Q5_0 (bits 5): the step is max|x| / 2^(bits-1). Codes reach from
 * -2^(bits-1) steps (where the largest-magnitude element sits) to 2^(bits-1) - 1 steps, so
 * an element of the opposite sign beyond that is clamped: its error grows by the excess. */
static void check_symmetric_round_trip(uint32_t type, int bits, uint64_t seed)
{
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, seed);
    round_trip(type, x, y, RT_N);
    double half_codes = (double)(1 << (bits - 1));
    for (int b = 0; b < RT_N; b += 32) {
        double m = span_signed_max(x + b, 32);
        double step = fabs(m) / half_codes;
        for (int i = b; i < b + 32; i++) {
            double codes = -half_codes * x[i] / m; /* position in steps, the extreme at -8 */
            double excess = fmax(0.0, codes - (half_codes - 0.5)) * step;
            assert_error_within(y[i], x[i], 0.5 * step * 1.01 + excess + 1e-6 * fabs(m),
                                type, i);
        }
    }
}

static void test_round_trip_q4_0(void **state)
{
    (void)state;
    check_symmetric_round_trip(GRAFT_TYPE_Q4_0, 4, 13);
}

static void test_round_trip_q5_0(void **state)
{
    (void)state;
    check_symmetric_round_trip(GRAFT_TYPE_Q5_0, 5, 14);
}

/* Q4_1 / Q5_1: the step is (max - min) / (2^bits - 1); the f16 min and scale add at most
 * their rounding at the ends of the range. */
static void check_min_scale_round_trip(uint32_t type, int bits, uint64_t seed)
{
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, seed);
    round_trip(type, x, y, RT_N);
    double top = (double)((1 << bits) - 1);
    for (int b = 0; b < RT_N; b += 32) {
        double lo, hi;
        span_min_max(x + b, 32, &lo, &hi);
        double step = (hi - lo) / top;
        double bound = 0.5 * step + top * step * 0x1p-11 + fabs(lo) * 0x1p-11 +
                       1e-6 * (fabs(lo) + fabs(hi));
        for (int i = b; i < b + 32; i++)
            assert_error_within(y[i], x[i], bound, type, i);
    }
}

static void test_round_trip_q4_1(void **state)
{
    (void)state;
    check_min_scale_round_trip(GRAFT_TYPE_Q4_1, 4, 15);
}

static void test_round_trip_q5_1(void **state)
{
    (void)state;
    check_min_scale_round_trip(GRAFT_TYPE_Q5_1, 5, 16);
}

/* IQ4_NL: the scale puts the extreme element on the table's -127; the table's widest gap
 * is 24 (89..113) and its end 113 lies 14 short of 127, so no element is more than 14
 * scale units away from its code (plus what the f16 rounding of the scale shifts). */
static void test_round_trip_iq4_nl(void **state)
{
    (void)state;
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, 17);
    round_trip(GRAFT_TYPE_IQ4_NL, x, y, RT_N);
    for (int b = 0; b < RT_N; b += 32) {
        double unit = span_abs_max(x + b, 32) / 127;
        for (int i = b; i < b + 32; i++)
            assert_error_within(y[i], x[i], 14.1 * unit + 1e-6 * unit * 127,
                                GRAFT_TYPE_IQ4_NL, i);
    }
    /* Table values times an exact scale come back exactly. */
    static const int values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
    for (int j = 0; j < 32; j++)
        x[j] = 0.25f * (float)values[(j * 7) % 16];
    round_trip(GRAFT_TYPE_IQ4_NL, x, y, 32);
    assert_memory_equal(x, y, 32 * sizeof(float));
}

/* Q4_K (top 15) / Q5_K (top 31): per 32-element sub-block the codes span from min(0, min)
 * to the max: step range/top. The 6-bit scales and mins are multiples of d and dmin, which
 * are about G/(63 top) and G/63 for the block's largest span G, so each sub-block's step
 * may grow by up to about d + dmin/top. */
static void check_k4_round_trip(uint32_t type, int top, uint64_t seed)
{
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, seed);
    round_trip(type, x, y, RT_N);
    for (int b = 0; b < RT_N; b += 256) {
        double range[8], widest = 0;
        for (int j = 0; j < 8; j++) {
            double lo, hi;
            span_min_max(x + b + 32 * j, 32, &lo, &hi);
            lo = fmin(lo, 0.0);
            range[j] = hi - lo;
            widest = fmax(widest, fmax(range[j], -lo));
        }
        for (int i = b; i < b + 256; i++) {
            double bound = 0.5 * range[(i - b) / 32] / top + 1.1 * widest / (63.0 * top) +
                           1e-6 * widest;
            assert_error_within(y[i], x[i], bound, type, i);
        }
    }
}

static void test_round_trip_q4_k(void **state)
{
    (void)state;
    check_k4_round_trip(GRAFT_TYPE_Q4_K, 15, 18);
}

static void test_round_trip_q5_k(void **state)
{
    (void)state;
    check_k4_round_trip(GRAFT_TYPE_Q5_K, 31, 19);
}

/* Q6_K: per 16-element sub-block the step is max|x| / 31; the 8-bit scales are multiples of
 * d, about A/(31 * 127) for the block's largest magnitude A. */
static void test_round_trip_q6_k(void **state)
{
    (void)state;
    float x[RT_N], y[RT_N];
    make_test_row(x, RT_N, 20);
    round_trip(GRAFT_TYPE_Q6_K, x, y, RT_N);
    for (int b = 0; b < RT_N; b += 256) {
        double widest = span_abs_max(x + b, 256);
        for (int i = b; i < b + 256; i++) {
            double amax = span_abs_max(x + b + 16 * ((i - b) / 16), 16);
            double bound = 0.5 * amax / 31 + 0.51 * widest / (31.0 * 127) + 1e-6 * widest;
            assert_error_within(y[i], x[i], bound, GRAFT_TYPE_Q6_K, i);
        }
    }
}

static void test_quantize_zeros_and_bad_length(void **state)
{
    (void)state;
    const uint32_t types[] = {GRAFT_TYPE_Q8_0, GRAFT_TYPE_Q4_0, GRAFT_TYPE_Q4_1,
                              GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1, GRAFT_TYPE_IQ4_NL,
                              GRAFT_TYPE_Q4_K, GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K};
    float x[256] = {0}, y[256];
    uint8_t buf[256 * 2];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        assert_int_equal(graft__quantize_row(types[t], x, buf, 256), GRAFT_OK);
        graft__dequantize_row(types[t], buf, y, 256);
        for (int i = 0; i < 256; i++)
            assert_true(y[i] == 0.0f);
        assert_int_equal(graft__quantize_row(types[t], x, buf, 16), GRAFT_EINVAL);
    }
}

/* ------------------------------------------------------------------------------------
 * Matmul.
 */
static const uint32_t all_types[] = {GRAFT_TYPE_F32,  GRAFT_TYPE_F16,  GRAFT_TYPE_BF16,
                                     GRAFT_TYPE_Q8_0, GRAFT_TYPE_Q4_0, GRAFT_TYPE_Q4_1,
                                     GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1, GRAFT_TYPE_IQ4_NL,
                                     GRAFT_TYPE_Q4_K, GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K};

#define MM_IN 768 /* three K-quant blocks: the decoder's 256-element chunks, three times */
#define MM_OUT 11 /* not a multiple of the rows the matmul takes together */
#define MM_TOK 13

/* Bytes of one row of n elements of a supported type (independent of gguf_types.c). */
static size_t row_bytes(uint32_t type, int n)
{
    switch (type) {
    case GRAFT_TYPE_F32: return (size_t)n * 4;
    case GRAFT_TYPE_F16:
    case GRAFT_TYPE_BF16: return (size_t)n * 2;
    case GRAFT_TYPE_Q8_0: return (size_t)n / 32 * 34;
    case GRAFT_TYPE_Q4_0:
    case GRAFT_TYPE_IQ4_NL: return (size_t)n / 32 * 18;
    case GRAFT_TYPE_Q4_1: return (size_t)n / 32 * 20;
    case GRAFT_TYPE_Q5_0: return (size_t)n / 32 * 22;
    case GRAFT_TYPE_Q5_1: return (size_t)n / 32 * 24;
    case GRAFT_TYPE_Q4_K: return (size_t)n / 256 * 144;
    case GRAFT_TYPE_Q5_K: return (size_t)n / 256 * 176;
    case GRAFT_TYPE_Q6_K: return (size_t)n / 256 * 210;
    }
    fail_msg("no row size for type %u", type);
    return 0;
}

typedef struct mm_case {
    uint8_t w[MM_OUT * MM_IN * 4];     // (n_out, row bytes)
    float w_decoded[MM_OUT][MM_IN];    // (n_out, n_in)
    float x[MM_TOK * MM_IN];           // (n_tok, n_in), rows n_in apart
    float y[MM_TOK][MM_OUT];           // (n_tok, n_out)
} mm_case;

static mm_case mm;

/* Quantized random weights (and their decoded rows) and random activations. */
static void make_matmul_case(uint32_t type, int n_in, uint64_t seed)
{
    float row[MM_IN];
    for (int o = 0; o < MM_OUT; o++) {
        make_test_row(row, n_in, seed + (uint64_t)o);
        uint8_t *dst = mm.w + (size_t)o * row_bytes(type, n_in);
        assert_int_equal(graft__quantize_row(type, row, dst, n_in), GRAFT_OK);
        graft__dequantize_row(type, dst, mm.w_decoded[o], n_in);
    }
    graft_test_rng_seed(seed * 31 + 7);
    for (int t = 0; t < MM_TOK; t++)
        for (int i = 0; i < n_in; i++)
            mm.x[t * n_in + i] = graft_test_rng_float();
}

static void check_matmul_against_references(uint32_t type, int n_in)
{
    make_matmul_case(type, n_in, 100 + type);
    graft__matmul(&mm.y[0][0], mm.w, type, n_in, MM_OUT, mm.x, MM_TOK);
    for (int t = 0; t < MM_TOK; t++) {
        for (int o = 0; o < MM_OUT; o++) {
            double exact = 0, magnitude = 0;
            float in_order = 0.0f;
            for (int i = 0; i < n_in; i++) {
                float w = mm.w_decoded[o][i], x = mm.x[t * n_in + i];
                exact += (double)w * (double)x;
                magnitude += fabs((double)w * (double)x);
                in_order += w * x;
            }
            /* the classic bound of float summation: (n + 1) units of rounding */
            assert_near(mm.y[t][o], exact, (n_in + 1) * 0x1p-24 * magnitude * 1.01);
            assert_float_bits_equal(mm.y[t][o], in_order);
        }
    }
}

static void test_matmul_all_types(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof all_types / sizeof all_types[0]; k++)
        check_matmul_against_references(all_types[k], MM_IN);
}

/* Rows whose length is not a multiple of the decoder's chunk (172 like stories260K's
 * ffn_down; 32 and 96 for the 32-element block types). */
static void test_matmul_short_rows(void **state)
{
    (void)state;
    check_matmul_against_references(GRAFT_TYPE_F32, 172);
    check_matmul_against_references(GRAFT_TYPE_F16, 172);
    check_matmul_against_references(GRAFT_TYPE_BF16, 5);
    check_matmul_against_references(GRAFT_TYPE_Q8_0, 32);
    check_matmul_against_references(GRAFT_TYPE_Q4_1, 96);
    check_matmul_against_references(GRAFT_TYPE_IQ4_NL, 288);
}

static void test_matmul_empty(void **state)
{
    (void)state;
    float y[3][2];
    memset(y, 0xff, sizeof y);
    graft__matmul(&y[0][0], mm.w, GRAFT_TYPE_F32, 0, 2, mm.x, 3);
    for (int t = 0; t < 3; t++)
        for (int o = 0; o < 2; o++)
            assert_float_bits_equal(y[t][o], 0.0f);
    graft__matmul(&y[0][0], mm.w, GRAFT_TYPE_F32, 4, 2, mm.x, 0); /* no tokens */
}

/* One token alone, all tokens together, tokens in another order, and fewer rows all give
 * bit-identical values. */
static void check_batch_invariance(uint32_t type)
{
    make_matmul_case(type, MM_IN, 200 + type);
    graft__matmul(&mm.y[0][0], mm.w, type, MM_IN, MM_OUT, mm.x, MM_TOK);

    float single[MM_OUT];
    for (int t = 0; t < MM_TOK; t++) {
        graft__matmul(single, mm.w, type, MM_IN, MM_OUT, mm.x + t * MM_IN, 1);
        assert_memory_equal(single, mm.y[t], sizeof single);
    }

    static float x_shuffled[MM_TOK][MM_IN], y_shuffled[MM_TOK][MM_OUT];
    int order[MM_TOK];
    for (int t = 0; t < MM_TOK; t++)
        order[t] = (t * 5 + 3) % MM_TOK; /* 5 is coprime with 13: a permutation */
    for (int t = 0; t < MM_TOK; t++)
        memcpy(x_shuffled[t], mm.x + order[t] * MM_IN, sizeof x_shuffled[t]);
    graft__matmul(&y_shuffled[0][0], mm.w, type, MM_IN, MM_OUT, &x_shuffled[0][0], MM_TOK);
    for (int t = 0; t < MM_TOK; t++)
        assert_memory_equal(y_shuffled[t], mm.y[order[t]], sizeof y_shuffled[t]);

    float part[MM_TOK][3]; /* rows 2..4 alone: a different grouping of rows */
    const uint8_t *w_part = mm.w + 2 * row_bytes(type, MM_IN);
    graft__matmul(&part[0][0], w_part, type, MM_IN, 3, mm.x, MM_TOK);
    for (int t = 0; t < MM_TOK; t++)
        assert_memory_equal(part[t], &mm.y[t][2], sizeof part[t]);
}

static void test_matmul_batch_invariance(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof all_types / sizeof all_types[0]; k++)
        check_batch_invariance(all_types[k]);
}

/* ------------------------------------------------------------------------------------
 * Norm, RoPE, activations.
 */
/* rmsnorm against a float64 computation for n elements of inputs x scaled by `scale`; in
 * place gives the same bits as out of place. */
static void check_rmsnorm_n(graft__rmsnorm_fn rmsnorm, int n, float scale)
{
    enum { MAX_N = 1100 };
    static float x[MAX_N], w[MAX_N], out[MAX_N];
    assert_true(n <= MAX_N);
    for (int i = 0; i < n; i++) {
        x[i] = graft_test_rng_float() * scale;
        w[i] = graft_test_rng_float();
    }
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + 1e-5);
    rmsnorm(out, x, w, n, 1e-5f);
    for (int i = 0; i < n; i++)
        assert_near(out[i], x[i] * inv * w[i], 2e-5 * fabs(x[i] * inv) + 1e-12);
    rmsnorm(x, x, w, n, 1e-5f); /* in place */
    assert_memory_equal(x, out, (size_t)n * sizeof *out);
}

/* Lengths that leave every kind of tail after blocks of 64 and vectors of 16; tiny inputs,
 * where eps dominates the mean square; an exact case. */
static void check_rmsnorm(graft__rmsnorm_fn rmsnorm)
{
    static const int lengths[] = {1, 4, 15, 16, 17, 63, 64, 65, 100, 128, 1024, 1030};
    graft_test_rng_seed(30);
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        check_rmsnorm_n(rmsnorm, lengths[i], 3.0f);
        check_rmsnorm_n(rmsnorm, lengths[i], 1e-3f);
    }
    const float ones[4] = {2, 2, 2, 2}, unit[4] = {1, 1, 1, 1}; /* rms 2: exactly 1 each */
    float o4[4];
    rmsnorm(o4, ones, unit, 4, 0.0f);
    for (int i = 0; i < 4; i++)
        assert_float_bits_equal(o4[i], 1.0f);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    check_rmsnorm(graft__rmsnorm);
}

static void test_rmsnorm_avx512(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "rmsnorm");
    check_rmsnorm(graft__rmsnorm_avx512);
}

/* graft__rope at position pos, its angles computed first. */
static void rope_at(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dims, int32_t pos,
                    float base, float freq_scale, const float *freq_factors,
                    graft__rope_layout layout)
{
    float angle[8];
    assert_true(rot_dims <= 8);
    graft__rope_angles(angle, rot_dims, pos, base, freq_scale, freq_factors);
    graft__rope(x, n_heads, head_dim, rot_dims, angle, layout);
}

/* Two heads of 4: (1, 2, 3, 4) and (-1, 0.5, 2, -3), position 3, base 100: the pairs turn
 * by 3 * 100^0 = 3 and 3 * 100^(-1/2) = 0.3 radians. */
static void test_rope(void **state)
{
    (void)state;
    const float in[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
    float x[8];
    const double a = 3.0, b = 0.3;

    memcpy(x, in, sizeof x);
    rope_at(x, 2, 4, 4, 3, 100.0f, 1.0f, NULL, GRAFT_ROPE_ADJACENT);
    for (int h = 0; h < 2; h++) {
        const float *v = in + 4 * h;
        const double want[4] = {v[0] * cos(a) - v[1] * sin(a), v[0] * sin(a) + v[1] * cos(a),
                                v[2] * cos(b) - v[3] * sin(b), v[2] * sin(b) + v[3] * cos(b)};
        for (int i = 0; i < 4; i++)
            assert_near(x[4 * h + i], want[i], 4e-6);
    }

    memcpy(x, in, sizeof x);
    rope_at(x, 2, 4, 4, 3, 100.0f, 1.0f, NULL, GRAFT_ROPE_HALVES);
    for (int h = 0; h < 2; h++) {
        const float *v = in + 4 * h;
        const double want[4] = {v[0] * cos(a) - v[2] * sin(a), v[1] * cos(b) - v[3] * sin(b),
                                v[0] * sin(a) + v[2] * cos(a), v[1] * sin(b) + v[3] * cos(b)};
        for (int i = 0; i < 4; i++)
            assert_near(x[4 * h + i], want[i], 4e-6);
    }
}

/* rot_dims 2 of head_dim 4: only the first pair turns, by pos * freq_scale / factor =
 * 3 * 0.5 / 2 = 0.75; dims 2 and 3 stay as they were, bit for bit. */
static void test_rope_partial_scaled(void **state)
{
    (void)state;
    const float in[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
    const float factors[1] = {2.0f};
    const double a = 0.75;
    for (int layout = 0; layout < 2; layout++) {
        float x[8];
        memcpy(x, in, sizeof x);
        rope_at(x, 2, 4, 2, 3, 10000.0f, 0.5f, factors, (graft__rope_layout)layout);
        for (int h = 0; h < 2; h++) {
            const float *v = in + 4 * h;
            assert_near(x[4 * h + 0], v[0] * cos(a) - v[1] * sin(a), 4e-6);
            assert_near(x[4 * h + 1], v[0] * sin(a) + v[1] * cos(a), 4e-6);
            assert_float_bits_equal(x[4 * h + 2], v[2]);
            assert_float_bits_equal(x[4 * h + 3], v[3]);
        }
    }
    float x[4] = {1, 2, 3, 4}; /* position 0 turns nothing */
    rope_at(x, 1, 4, 4, 0, 10000.0f, 1.0f, NULL, GRAFT_ROPE_ADJACENT);
    for (int i = 0; i < 4; i++)
        assert_float_bits_equal(x[i], (float)(i + 1));
}

static void test_softmax(void **state)
{
    (void)state;
    enum { N = 37 };
    float x[N];
    double want[N], sum = 0, max = -INFINITY;
    graft_test_rng_seed(31);
    for (int i = 0; i < N; i++) {
        x[i] = graft_test_rng_float() * 20.0f + 100.0f; /* exp overflows without the max subtracted */
        max = fmax(max, x[i]);
    }
    for (int i = 0; i < N; i++)
        sum += want[i] = exp((double)x[i] - max);
    graft__softmax(x, N);
    for (int i = 0; i < N; i++)
        assert_near(x[i], want[i] / sum, 1e-5 * want[i] / sum + 1e-9);
    float two[2] = {0.0f, logf(3.0f)}; /* e^0 : e^ln3 = 1 : 3 */
    graft__softmax(two, 2);
    assert_near(two[0], 0.25, 1e-7);
    assert_near(two[1], 0.75, 1e-7);
}

/* swiglu against float64 for n elements (tails of every length after vectors of 16), and
 * saturation without NaN. */
static void check_swiglu(graft__swiglu_fn swiglu)
{
    enum { MAX_N = 100 };
    static const int lengths[] = {1, 15, 16, 17, 64, 100};
    float x[MAX_N], g[MAX_N], u[MAX_N];
    graft_test_rng_seed(32);
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++) {
        const int n = lengths[li];
        for (int i = 0; i < n; i++) {
            g[i] = graft_test_rng_float() * 8.0f;
            u[i] = graft_test_rng_float() * 2.0f;
        }
        memcpy(x, g, sizeof x);
        swiglu(x, u, n);
        for (int i = 0; i < n; i++) {
            double v = g[i], silu = v / (1.0 + exp(-v));
            assert_near(x[i], silu * u[i], 1e-5 * fabs(silu * u[i]) + 1e-6);
        }
    }
    float big[3] = {-200.0f, 0.0f, 200.0f}, one[3] = {1, 1, 1};
    swiglu(big, one, 3); /* silu saturates to 0 and to x without NaN */
    assert_near(big[0], 0.0, 1e-30);
    assert_near(big[1], 0.0, 0.0);
    assert_near(big[2], 200.0, 0.0);
}

static void test_gated_activations(void **state)
{
    (void)state;
    enum { N = 64 };
    float x[N], g[N], u[N];
    check_swiglu(graft__swiglu);
    graft_test_rng_seed(33);
    for (int i = 0; i < N; i++) {
        g[i] = graft_test_rng_float() * 8.0f;
        u[i] = graft_test_rng_float() * 2.0f;
    }
    memcpy(x, g, sizeof x);
    graft__geglu(x, u, N);
    for (int i = 0; i < N; i++) {
        double v = g[i];
        double gelu = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
        assert_near(x[i], gelu * u[i], 1e-5 * fabs(gelu * u[i]) + 1e-6);
    }
}

static void test_swiglu_avx512(void **state)
{
    (void)state;
    GRAFT_TEST_REQUIRE_PATH("avx512", "swiglu");
    check_swiglu(graft__swiglu_avx512);
}

/* Every length up to 40 (all tails of the lanes), values drawn from a few levels so that
 * ties are common, with the largest first, last or repeated, NaNs and signed zeros. */
static void test_argmax(void **state)
{
    (void)state;
    enum { MAX_N = 40 };
    float x[MAX_N] = {0};
    graft_test_rng_seed(17);
    assert_int_equal(graft__argmax(x, 0), 0);
    for (int32_t n = 1; n <= MAX_N; n++) {
        for (int round = 0; round < 200; round++) {
            for (int32_t i = 0; i < n; i++)
                x[i] = (float)(int)(graft_test_rng_u32() % 5) - 2.0f;
            if (round % 4 == 1)
                x[graft_test_rng_u32() % (uint32_t)n] = NAN;
            if (round % 4 == 2)
                x[0] = NAN;
            if (round % 4 == 3)
                for (int32_t i = 0; i < n; i++)
                    x[i] = graft_test_rng_u32() % 2 ? 0.0f : -0.0f;
            assert_int_equal(graft__argmax(x, n), graft_test_argmax(x, n));
        }
    }
}

static void test_softcap(void **state)
{
    (void)state;
    float x[5] = {-100.0f, -1.0f, 0.0f, 3.0f, 1000.0f};
    const float in[5] = {-100.0f, -1.0f, 0.0f, 3.0f, 1000.0f};
    graft__softcap(x, 5, 30.0f);
    for (int i = 0; i < 5; i++)
        assert_near(x[i], 30.0 * tanh(in[i] / 30.0), 2e-6 * 30.0);
    assert_true(x[4] <= 30.0f);
}

/* ------------------------------------------------------------------------------------
 * Attention.
 */
#define AT_KEYS 150 /* two full chunks of 64 and a partial one */
#define AT_DIM 16

static float at_q[AT_DIM], at_k[AT_KEYS][AT_DIM], at_v[AT_KEYS][AT_DIM];
static const void *at_kp[AT_KEYS], *at_vp[AT_KEYS];

static void make_attention_case(uint64_t seed, float q_scale)
{
    graft_test_rng_seed(seed);
    for (int d = 0; d < AT_DIM; d++)
        at_q[d] = graft_test_rng_float() * q_scale;
    for (int j = 0; j < AT_KEYS; j++) {
        for (int d = 0; d < AT_DIM; d++) {
            at_k[j][d] = graft_test_rng_float();
            at_v[j][d] = graft_test_rng_float();
        }
        at_kp[j] = at_k[j];
        at_vp[j] = at_v[j];
    }
}

/* Two-pass softmax attention over the first n keys, in double. */
static void naive_attention(double *out, int n, float scale)
{
    double s[AT_KEYS], max = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
        double dot = 0;
        for (int d = 0; d < AT_DIM; d++)
            dot += (double)at_q[d] * at_k[j][d];
        s[j] = scale * dot;
        max = fmax(max, s[j]);
    }
    for (int d = 0; d < AT_DIM; d++)
        out[d] = 0;
    for (int j = 0; j < n; j++) {
        double p = exp(s[j] - max);
        sum += p;
        for (int d = 0; d < AT_DIM; d++)
            out[d] += p * at_v[j][d];
    }
    for (int d = 0; d < AT_DIM; d++)
        out[d] /= sum;
}

static void test_attend_against_two_pass(void **state)
{
    (void)state;
    const int counts[] = {1, 2, 63, 64, 65, 128, 129, AT_KEYS};
    const float q_scales[] = {0.5f, 40.0f}; /* flat and very peaked distributions */
    for (size_t s = 0; s < 2; s++) {
        make_attention_case(40 + s, q_scales[s]);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            float out[AT_DIM];
            double want[AT_DIM];
            graft__attend(out, at_q, 1, at_kp, at_vp, GRAFT_TYPE_F32, counts[c], AT_DIM, 0.25f);
            naive_attention(want, counts[c], 0.25f);
            for (int d = 0; d < AT_DIM; d++)
                assert_near(out[d], want[d], 3e-5);
        }
    }
    /* A single key: its value, exactly. */
    float out[AT_DIM];
    graft__attend(out, at_q, 1, at_kp, at_vp, GRAFT_TYPE_F32, 1, AT_DIM, 0.25f);
    assert_memory_equal(out, at_v[0], sizeof out);
}

/* Same keys, same bits; and the result for the first n keys does not depend on keys after
 * them (changed or absent), nor on where the key and value vectors live in memory. */
static void test_attend_deterministic_prefix(void **state)
{
    (void)state;
    make_attention_case(50, 2.0f);
    float first[AT_DIM], again[AT_DIM];
    graft__attend(first, at_q, 1, at_kp, at_vp, GRAFT_TYPE_F32, 100, AT_DIM, 0.3f);
    graft__attend(again, at_q, 1, at_kp, at_vp, GRAFT_TYPE_F32, 100, AT_DIM, 0.3f);
    assert_memory_equal(first, again, sizeof first);

    /* Copies elsewhere in memory, the same up to key 100 and different after it. */
    static float k_copy[AT_KEYS][AT_DIM], v_copy[AT_KEYS][AT_DIM];
    const void *kp[AT_KEYS], *vp[AT_KEYS];
    for (int j = 0; j < AT_KEYS; j++) {
        for (int d = 0; d < AT_DIM; d++) {
            k_copy[j][d] = j < 100 ? at_k[j][d] : 5.0f * at_k[j][d];
            v_copy[j][d] = j < 100 ? at_v[j][d] : -at_v[j][d];
        }
        kp[j] = k_copy[j];
        vp[j] = v_copy[j];
    }
    graft__attend(again, at_q, 1, kp, vp, GRAFT_TYPE_F32, 100, AT_DIM, 0.3f);
    assert_memory_equal(first, again, sizeof first);

    float more[AT_DIM]; /* with the later keys present the answer does change */
    graft__attend(more, at_q, 1, kp, vp, GRAFT_TYPE_F32, AT_KEYS, AT_DIM, 0.3f);
    assert_true(memcmp(first, more, sizeof more) != 0);
}

static void test_attend_no_keys(void **state)
{
    (void)state;
    float out[AT_DIM];
    memset(out, 0xff, sizeof out);
    graft__attend(out, at_q, 1, at_kp, at_vp, GRAFT_TYPE_F32, 0, AT_DIM, 1.0f);
    for (int d = 0; d < AT_DIM; d++)
        assert_float_bits_equal(out[d], 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_known),
        cmocka_unit_test(test_f16_every_value),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dequantize_q4_0),
        cmocka_unit_test(test_dequantize_q4_1),
        cmocka_unit_test(test_dequantize_q5_0),
        cmocka_unit_test(test_dequantize_q5_1),
        cmocka_unit_test(test_dequantize_q8_0),
        cmocka_unit_test(test_dequantize_iq4_nl),
        cmocka_unit_test(test_dequantize_q4_k),
        cmocka_unit_test(test_dequantize_q5_k),
        cmocka_unit_test(test_dequantize_q6_k),
        cmocka_unit_test(test_dequantize_float_types),
        cmocka_unit_test(test_dequantize_multi_block_row),
        cmocka_unit_test(test_supported_types),
        cmocka_unit_test(test_round_trip_float_types),
        cmocka_unit_test(test_round_trip_q8_0),
        cmocka_unit_test(test_round_trip_q4_0),
        cmocka_unit_test(test_round_trip_q5_0),
        cmocka_unit_test(test_round_trip_q4_1),
        cmocka_unit_test(test_round_trip_q5_1),
        cmocka_unit_test(test_round_trip_iq4_nl),
        cmocka_unit_test(test_round_trip_q4_k),
        cmocka_unit_test(test_round_trip_q5_k),
        cmocka_unit_test(test_round_trip_q6_k),
        cmocka_unit_test(test_quantize_zeros_and_bad_length),
        cmocka_unit_test(test_matmul_all_types),
        cmocka_unit_test(test_matmul_short_rows),
        cmocka_unit_test(test_matmul_empty),
        cmocka_unit_test(test_matmul_batch_invariance),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rmsnorm_avx512),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_partial_scaled),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_gated_activations),
        cmocka_unit_test(test_swiglu_avx512),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_attend_against_two_pass),
        cmocka_unit_test(test_attend_deterministic_prefix),
        cmocka_unit_test(test_attend_no_keys),
    };
    return graft_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
