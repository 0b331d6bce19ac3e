/*
 * quantize.c: reference quantizers, floats -> the block formats dequantize.c decodes.
 *
 * `graft synth` and the tests use these to write model files in any supported type. They
 * aim to be obviously correct, not to match llama.cpp's quantizers (which search for
 * better scales): every block they write is a valid ggml block, and decoding it gives back
 * each input to within half a quantization step of its block (or sub-block).
 *
 * Method, per type (the layouts are documented at the top of dequantize.c):
 *   - Q8_0: d = max|x| / 127, q = round(x / d).
 *   - Q4_0, Q5_0: d = m / -8 (resp. -16) where m is the element of largest magnitude, so m
 *     lands on the most negative code; q = round(x / d) + 8 (+16), clamped.
 *   - Q4_1, Q5_1: m = min, d = (max - min) / 15 (31); q = round((x - m) / d).
 *   - IQ4_NL: d = m / -127 as for Q4_0; q = the code whose value is nearest to x / d.
 *   - Q4_K, Q5_K: per 32-element sub-block, the min is min(0, smallest x) and the range
 *     runs from there to the largest x. The 6-bit mins and scales are rounded up (never
 *     down), so every element lies inside the grid of its sub-block and none is clamped.
 *   - Q6_K: per 16-element sub-block, scale = max|x| / 31 rounded up to a multiple of d, so
 *     q = round(x / scale) stays within -31..31.
 * The quants are always computed against the scales as stored (rounded to f16 and to
 * their 6/8-bit codes), so the rounding of the scales does not add to the error. Scales
 * that do not fit in f16 (inputs beyond about 65504 * 127) are not representable.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant_formats.h"
#include "util/util.h"

/* The values of the 16 IQ4_NL codes (the format's fixed table). */
static const int8_t iq4nl_values[16] = {GRAFT_IQ4_NL_VALUES(GRAFT_QF_AS_IS)};

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* Stores v as f16 at p; returns the value actually stored. */
static float store_f16(uint8_t *p, float v)
{
    uint16_t h = graft__f32_to_f16(v);
    put_u16(p, h);
    return graft__f16_to_f32(h);
}

/* Stores the smallest f16 >= v (v >= 0) at p; returns it. */
static float store_f16_at_least(uint8_t *p, float v)
{
    uint16_t h = graft__f32_to_f16(v);
    if (graft__f16_to_f32(h) < v)
        h++; /* the next larger positive half */
    put_u16(p, h);
    return graft__f16_to_f32(h);
}

static int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* round(x / d) clamped to [lo, hi]; 0 (clamped) when d is 0. */
static int quantize_value(float x, float d, int lo, int hi)
{
    if (d == 0.0f)
        return clamp_int(0, lo, hi);
    float r = roundf(x / d);
    if (!(r >= (float)lo)) /* also catches NaN */
        return lo;
    return r > (float)hi ? hi : (int)r;
}

/* The element of largest magnitude (the first one on a tie), sign kept. */
static float signed_abs_max(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(m))
            m = x[i];
    return m;
}

static float abs_max(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void min_max(const float *x, int n, float *min, float *max)
{
    *min = *max = x[0];
    for (int i = 1; i < n; i++) {
        *min = fminf(*min, x[i]);
        *max = fmaxf(*max, x[i]);
    }
}

/* Packs 32 codes of 4 bits: byte j = code j (low nibble) | code j + 16 (high nibble). */
static void pack_nibbles(uint8_t *qs, const int *q) // q (32)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
}

/* Packs 32 codes of 5 bits: nibbles as pack_nibbles, fifth bit of code j in bit j of qh. */
static void pack_5bit(uint8_t *qh_bytes, uint8_t *qs, const int *q) // q (32)
{
    uint32_t qh = 0;
    for (int j = 0; j < QK; j++)
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++)
        qh_bytes[k] = (uint8_t)(qh >> (8 * k));
    pack_nibbles(qs, q);
}

static void quantize_q8_0(const float *x, uint8_t *b) // x (32)
{
    float d = store_f16(b, abs_max(x, QK) / 127.0f);
    for (int j = 0; j < QK; j++)
        b[2 + j] = (uint8_t)(int8_t)quantize_value(x[j], d, -127, 127);
}

/* Q4_0 (bits 4) and Q5_0 (bits 5): symmetric around zero, codes offset by 2^(bits-1). */
static void quantize_symmetric(const float *x, uint8_t *b, int bits) // x (32)
{
    int offset = 1 << (bits - 1);
    float d = store_f16(b, signed_abs_max(x, QK) / (float)-offset);
    int q[QK];
    for (int j = 0; j < QK; j++)
        q[j] = quantize_value(x[j], d, -offset, offset - 1) + offset;
    if (bits == 4)
        pack_nibbles(b + 2, q);
    else
        pack_5bit(b + 2, b + 6, q);
}

/* Q4_1 (bits 4) and Q5_1 (bits 5): codes 0..2^bits-1 spanning [min, max]. */
static void quantize_min_scale(const float *x, uint8_t *b, int bits) // x (32)
{
    int top = (1 << bits) - 1;
    float min, max;
    min_max(x, QK, &min, &max);
    float d = store_f16(b, (max - min) / (float)top);
    float m = store_f16(b + 2, min);
    int q[QK];
    for (int j = 0; j < QK; j++)
        q[j] = quantize_value(x[j] - m, d, 0, top);
    if (bits == 4)
        pack_nibbles(b + 4, q);
    else
        pack_5bit(b + 4, b + 8, q);
}

static int nearest_iq4nl_code(float v)
{
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)iq4nl_values[k]) < fabsf(v - (float)iq4nl_values[best]))
            best = k;
    return best;
}

static void quantize_iq4_nl(const float *x, uint8_t *b) // x (32)
{
    float d = store_f16(b, signed_abs_max(x, QK) / -127.0f);
    int q[QK];
    for (int j = 0; j < QK; j++)
        q[j] = d == 0.0f ? nearest_iq4nl_code(0.0f) : nearest_iq4nl_code(x[j] / d);
    pack_nibbles(b + 2, q);
}

/* Inverse of dequantize.c's scale_min_k4: packs eight 6-bit scales and mins in 12 bytes. */
static void pack_scales_k4(uint8_t *scales, const int *sc, const int *m) // sc, m (8)
{
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}

/* Chooses d, dmin and the 6-bit scales and mins of a Q4_K/Q5_K block (top = 15 or 31),
 * writes them to b, and returns each sub-block's scale d*sc and min dmin*m as the decoder
 * computes them. */
static void choose_scales_k4(const float *x, uint8_t *b, int top, float *scale,
                             float *min) // x (256), scale, min (8)
{
    float lo[8], hi[8], range[8];
    float max_lo = 0.0f, max_range = 0.0f;
    for (int j = 0; j < 8; j++) {
        min_max(x + 32 * j, 32, &lo[j], &hi[j]);
        lo[j] = fminf(lo[j], 0.0f);
        max_lo = fmaxf(max_lo, -lo[j]);
    }
    float dmin = store_f16_at_least(b + 2, max_lo / 63.0f);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        m[j] = dmin > 0.0f ? clamp_int((int)ceilf(-lo[j] / dmin), 0, 63) : 0;
        min[j] = dmin * (float)m[j];
        range[j] = fmaxf(hi[j] + min[j], 0.0f);
        max_range = fmaxf(max_range, range[j]);
    }
    float d = store_f16_at_least(b, max_range / (float)(top * 63));
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? clamp_int((int)ceilf(range[j] / ((float)top * d)), 0, 63) : 0;
        scale[j] = d * (float)sc[j];
    }
    pack_scales_k4(b + 4, sc, m);
}

/* The codes 0..top of a Q4_K/Q5_K block against its chosen scales and mins. */
static void quantize_k4_codes(const float *x, const float *scale, const float *min, int top,
                              int *q) // x, q (256)
{
    for (int i = 0; i < QK_K; i++)
        q[i] = quantize_value(x[i] + min[i / 32], scale[i / 32], 0, top);
}

static void quantize_q4_k(const float *x, uint8_t *b) // x (256)
{
    float scale[8], min[8];
    int q[QK_K];
    choose_scales_k4(x, b, 15, scale, min);
    quantize_k4_codes(x, scale, min, 15, q);
    uint8_t *qs = b + 16;
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            qs[32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
}

static void quantize_q5_k(const float *x, uint8_t *b) // x (256)
{
    float scale[8], min[8];
    int q[QK_K];
    choose_scales_k4(x, b, 31, scale, min);
    quantize_k4_codes(x, scale, min, 31, q);
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int g = 0; g < 4; g++) {
        for (int l = 0; l < 32; l++) {
            int low = q[64 * g + l], high = q[64 * g + 32 + l];
            qs[32 * g + l] = (uint8_t)((low & 0x0f) | ((high & 0x0f) << 4));
            qh[l] |= (uint8_t)(((low >> 4) << (2 * g)) | ((high >> 4) << (2 * g + 1)));
        }
    }
}

static void quantize_q6_k(const float *x, uint8_t *b) // x (256)
{
    uint8_t *ql = b, *qh = b + 128, *scales = b + 192;
    float amax[16], max_amax = 0.0f;
    for (int s = 0; s < 16; s++) {
        amax[s] = abs_max(x + 16 * s, 16);
        max_amax = fmaxf(max_amax, amax[s]);
    }
    float d = store_f16_at_least(b + 208, max_amax / (31.0f * 127.0f));
    int q[QK_K];
    for (int s = 0; s < 16; s++) {
        int sc = d > 0.0f ? clamp_int((int)ceilf(amax[s] / (31.0f * d)), 0, 127) : 0;
        scales[s] = (uint8_t)sc;
        float scale = d * (float)sc;
        for (int l = 0; l < 16; l++)
            q[16 * s + l] = quantize_value(x[16 * s + l], scale, -32, 31) + 32;
    }
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            const int *e = q + 128 * h + l; /* elements l, l+32, l+64, l+96 of the half */
            ql[64 * h + l] = (uint8_t)((e[0] & 0x0f) | ((e[64] & 0x0f) << 4));
            ql[64 * h + 32 + l] = (uint8_t)((e[32] & 0x0f) | ((e[96] & 0x0f) << 4));
            qh[32 * h + l] = (uint8_t)((e[0] >> 4) | ((e[32] >> 4) << 2) | ((e[64] >> 4) << 4) |
                                       ((e[96] >> 4) << 6));
        }
    }
}

static void quantize_q4_0(const float *x, uint8_t *b) { quantize_symmetric(x, b, 4); }
static void quantize_q5_0(const float *x, uint8_t *b) { quantize_symmetric(x, b, 5); }
static void quantize_q4_1(const float *x, uint8_t *b) { quantize_min_scale(x, b, 4); }
static void quantize_q5_1(const float *x, uint8_t *b) { quantize_min_scale(x, b, 5); }

typedef void (*quantize_block_fn)(const float *x, uint8_t *block);

/* The block encoder of each block type graft computes with, NULL for the others; the block
 * sizes are the GGUF type table's (graft__type_traits_of). */
#define ENCODER(TYPE, name, elems) [GRAFT_TYPE_##TYPE] = quantize_##name,
static const quantize_block_fn block_encoders[GRAFT_TYPE_COUNT] = {GRAFT_BLOCK_TYPES(ENCODER)};
#undef ENCODER

int graft__quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    uint8_t *out = dst;
    if (n < 0)
        return GRAFT_EINVAL;
    switch (type) {
    case GRAFT_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return GRAFT_OK;
    case GRAFT_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            put_u16(out + 2 * i, graft__f32_to_f16(src[i]));
        return GRAFT_OK;
    case GRAFT_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            put_u16(out + 2 * i, graft__f32_to_bf16(src[i]));
        return GRAFT_OK;
    }
    quantize_block_fn encode = type < GRAFT_TYPE_COUNT ? block_encoders[type] : NULL;
    if (encode == NULL)
        return GRAFT_EUNSUPPORTED;
    const graft__type_traits *block = graft__type_traits_of(type);
    if (n % block->block_elems != 0)
        return GRAFT_EINVAL;
    for (int64_t i = 0; i < n / block->block_elems; i++)
        encode(src + i * block->block_elems, out + i * block->block_bytes);
    return GRAFT_OK;
}
