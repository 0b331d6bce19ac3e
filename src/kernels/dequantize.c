/*
 * dequantize.c: turns rows stored in a GGUF tensor type back into floats.
 *
 * These are the reference decoders for every type graft computes with. They reproduce the
 * block layouts of ggml (the library that defines the GGUF tensor types) bit for bit, and
 * they evaluate each element with the same float operations in the same order as ggml's
 * reference dequantizers, so a file written by llama.cpp decodes to exactly the floats
 * llama.cpp sees. The matmul (matmul.c) decodes weights through graft__dequantize_row too.
 *
 * Blocks are read as bytes at fixed offsets (never through a struct pointer), so a row may
 * start at any address. The block layouts are documented in quant_formats.h.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant_formats.h"
#include "util/util.h"

/* The 16 values a 4-bit IQ4_NL code stands for (before scaling by d). */
static const int8_t iq4nl_values[16] = {GRAFT_IQ4_NL_VALUES(GRAFT_QF_AS_IS)};

static float load_f16(const uint8_t *p)
{
    return graft__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static void dequantize_q4_0(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void dequantize_q4_1(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    float m = load_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* The 5-bit values of a Q5_0/Q5_1 block: low nibbles from qs, fifth bits from qh. */
static void unpack_5bit(const uint8_t *qh_bytes, const uint8_t *qs, int *q) // q (32)
{
    uint32_t qh = load_u32(qh_bytes);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequantize_q5_0(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    int q[QK];
    unpack_5bit(b + 2, b + 6, q);
    for (int j = 0; j < QK; j++)
        y[j] = (float)(q[j] - 16) * d;
}

static void dequantize_q5_1(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    float m = load_f16(b + 2);
    int q[QK];
    unpack_5bit(b + 4, b + 8, q);
    for (int j = 0; j < QK; j++)
        y[j] = (float)q[j] * d + m;
}

static void dequantize_q8_0(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < QK; j++)
        y[j] = (float)qs[j] * d;
}

static void dequantize_iq4_nl(const uint8_t *b, float *y) // y (32)
{
    float d = load_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4nl_values[qs[j] & 0x0f];
        y[j + 16] = d * (float)iq4nl_values[qs[j] >> 4];
    }
}

/* Scale and min of sub-block j (0..7) from the 12 packed bytes of a Q4_K/Q5_K block:
 * bytes 0-3 hold the low 6 bits of scales 0-3 and their top 2 bits hold the high bits of
 * scales 4-7; bytes 4-7 likewise for mins; bytes 8-11 hold the low nibbles of scale j+4
 * (low nibble) and min j+4 (high nibble). */
void graft__scale_min_k4(const uint8_t *scales, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
        *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

/* Shared by Q4_K and Q5_K: q (256) holds the unpacked quants 0..15 or 0..31. */
static void dequantize_k4_sub_blocks(const uint8_t *b, const int *q, float *y) // y (256)
{
    float d = load_f16(b);
    float dmin = load_f16(b + 2);
    for (int j = 0; j < QK_K / 32; j++) {
        int sc, m;
        graft__scale_min_k4(b + 4, j, &sc, &m);
        float scale = d * (float)sc;
        float min = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            y[32 * j + l] = scale * (float)q[32 * j + l] - min;
    }
}

static void dequantize_q4_k(const uint8_t *b, float *y) // y (256)
{
    const uint8_t *qs = b + 16;
    int q[QK_K];
    for (int g = 0; g < 4; g++) {
        for (int l = 0; l < 32; l++) {
            q[64 * g + l] = qs[32 * g + l] & 0x0f;
            q[64 * g + 32 + l] = qs[32 * g + l] >> 4;
        }
    }
    dequantize_k4_sub_blocks(b, q, y);
}

static void dequantize_q5_k(const uint8_t *b, float *y) // y (256)
{
    const uint8_t *qh = b + 16;
    const uint8_t *qs = b + 48;
    int q[QK_K];
    for (int g = 0; g < 4; g++) {
        for (int l = 0; l < 32; l++) {
            q[64 * g + l] = (qs[32 * g + l] & 0x0f) | (((qh[l] >> (2 * g)) & 1) << 4);
            q[64 * g + 32 + l] = (qs[32 * g + l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
        }
    }
    dequantize_k4_sub_blocks(b, q, y);
}

static void dequantize_q6_k(const uint8_t *b, float *y) // y (256)
{
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = load_f16(b + 208);
    int q[QK_K];
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            int lo = ql[64 * h + l], hi = ql[64 * h + 32 + l], top = qh[32 * h + l];
            q[128 * h + l] = (lo & 0x0f) | ((top & 3) << 4);
            q[128 * h + 32 + l] = (hi & 0x0f) | (((top >> 2) & 3) << 4);
            q[128 * h + 64 + l] = (lo >> 4) | (((top >> 4) & 3) << 4);
            q[128 * h + 96 + l] = (hi >> 4) | (((top >> 6) & 3) << 4);
        }
    }
    for (int i = 0; i < QK_K; i++)
        y[i] = (d * (float)scales[i / 16]) * (float)(q[i] - 32);
}

static void dequantize_f16(const uint8_t *src, float *dst, int64_t n) // dst (n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = graft__f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
}

static void dequantize_bf16(const uint8_t *src, float *dst, int64_t n) // dst (n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = graft__bf16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
}

typedef void (*dequantize_block_fn)(const uint8_t *block, float *y);

/* The block decoder of each block type graft computes with, NULL for the others; the block
 * sizes are the GGUF type table's (graft__type_traits_of). */
#define DECODER(TYPE, name, elems) [GRAFT_TYPE_##TYPE] = dequantize_##name,
static const dequantize_block_fn block_decoders[GRAFT_TYPE_COUNT] = {GRAFT_BLOCK_TYPES(DECODER)};
#undef DECODER

bool graft__type_is_supported(uint32_t type)
{
    return type == GRAFT_TYPE_F32 || type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_BF16 ||
           (type < GRAFT_TYPE_COUNT && block_decoders[type] != NULL);
}

void graft__dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const uint8_t *bytes = src;
    GRAFT_ASSERT(n >= 0);
    switch (type) {
    case GRAFT_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case GRAFT_TYPE_F16:
        dequantize_f16(bytes, dst, n);
        return;
    case GRAFT_TYPE_BF16:
        dequantize_bf16(bytes, dst, n);
        return;
    }
    GRAFT_ASSERT(type < GRAFT_TYPE_COUNT && block_decoders[type] != NULL);
    dequantize_block_fn decode = block_decoders[type];
    const graft__type_traits *block = graft__type_traits_of(type);
    GRAFT_ASSERT(n % block->block_elems == 0);
    for (int64_t i = 0; i < n / block->block_elems; i++)
        decode(bytes + i * block->block_bytes, dst + i * block->block_elems);
}
