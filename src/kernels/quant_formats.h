/*
 * quant_formats.h: the block formats of the quantized GGUF types graft computes with, in
 * one place (as ggml keeps them in ggml-common.h): elements and bytes per block, the layout
 * of each block, and the value table of IQ4_NL. Every kernel (reference and SIMD) takes
 * them from here.
 *
 * All multi-byte fields are little-endian. Layouts, offsets in bytes:
 *
 *   type    elems bytes  layout                                        element i
 *   Q4_0     32    18    d:f16 @0, qs[16] @2                           d * (q - 8)
 *   Q4_1     32    20    d:f16 @0, m:f16 @2, qs[16] @4                 d * q + m
 *   Q5_0     32    22    d:f16 @0, qh[4] @2, qs[16] @6                 d * (q - 16)
 *   Q5_1     32    24    d:f16 @0, m:f16 @2, qh[4] @4, qs[16] @8       d * q + m
 *   Q8_0     32    34    d:f16 @0, qs:int8[32] @2                      d * qs[i]
 *   IQ4_NL   32    18    d:f16 @0, qs[16] @2                           d * kvalues[q]
 *   Q4_K    256   144    d:f16 @0, dmin:f16 @2, scales[12] @4, qs[128] @16
 *   Q5_K    256   176    d:f16 @0, dmin:f16 @2, scales[12] @4, qh[32] @16, qs[128] @48
 *   Q6_K    256   210    ql[128] @0, qh[64] @128, scales:int8[16] @192, d:f16 @208
 *
 * 32-element types: byte qs[j] holds element j in its low nibble and element j + 16 in its
 * high nibble. Q5_0/Q5_1 add a fifth bit from the 32-bit word qh: bit j for element j.
 *
 * Q4_K/Q5_K: 8 sub-blocks of 32 elements, each with a 6-bit scale sc and 6-bit min m
 * packed into `scales` (see graft__scale_min_k4); element = (d * sc) * q - (dmin * m). The 256
 * elements form 4 groups of 64: in group g, byte qs[32g + l] holds element 64g + l (low
 * nibble, sub-block 2g) and element 64g + 32 + l (high nibble, sub-block 2g + 1). Q5_K's
 * fifth bit of those two elements is bit 2g resp. 2g + 1 of qh[l].
 *
 * Q6_K: 16 sub-blocks of 16 elements, element i scaled by the signed scales[i / 16];
 * element = (d * sc) * (q - 32), q 6 bits. Two halves of 128: in half h, for l < 32,
 * ql[64h + l] holds elements 128h + l (low nibble) and 128h + 64 + l (high nibble),
 * ql[64h + 32 + l] holds 128h + 32 + l and 128h + 96 + l, and qh[32h + l] holds the top two
 * bits of elements 128h + l, +32, +64, +96 in bits 0-1, 2-3, 4-5 and 6-7.
 *
 * Each byte count is written as the sum of its block's fields and checked at compile time
 * against the GGUF type table (GRAFT_GGUF_TYPES, gguf/gguf.h).
 */
#ifndef GRAFT_QUANT_FORMATS_H
#define GRAFT_QUANT_FORMATS_H

#include "gguf/gguf.h"

enum {
    QK = 32,   /* elements per block of the 32-element types (Q4_0 ... Q8_0, IQ4_NL) */
    QK_K = 256 /* elements per super-block of the K-quants */
};

enum {
    BLOCK_BYTES_Q4_0 = 2 + QK / 2,                         /* d, qs */
    BLOCK_BYTES_Q4_1 = 2 + 2 + QK / 2,                     /* d, m, qs */
    BLOCK_BYTES_Q5_0 = 2 + 4 + QK / 2,                     /* d, qh, qs */
    BLOCK_BYTES_Q5_1 = 2 + 2 + 4 + QK / 2,                 /* d, m, qh, qs */
    BLOCK_BYTES_Q8_0 = 2 + QK,                             /* d, qs */
    BLOCK_BYTES_IQ4_NL = 2 + QK / 2,                       /* d, qs */
    BLOCK_BYTES_Q4_K = 2 + 2 + 12 + QK_K / 2,              /* d, dmin, scales, qs */
    BLOCK_BYTES_Q5_K = 2 + 2 + 12 + QK_K / 8 + QK_K / 2,   /* d, dmin, scales, qh, qs */
    BLOCK_BYTES_Q6_K = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2 /* ql, qh, scales, d */
};

/* The block types graft computes with, each as X(TYPE, name, elems): TYPE is the suffix of
 * its GRAFT_TYPE_ id and its BLOCK_BYTES_ size, name that of its block coders
 * (dequantize_name in dequantize.c, quantize_name in quantize.c), elems its block's elements. */
#define GRAFT_BLOCK_TYPES(X)                                                               \
    X(Q4_0, q4_0, QK)                                                                      \
    X(Q4_1, q4_1, QK)                                                                      \
    X(Q5_0, q5_0, QK)                                                                      \
    X(Q5_1, q5_1, QK)                                                                      \
    X(Q8_0, q8_0, QK)                                                                      \
    X(IQ4_NL, iq4_nl, QK)                                                                  \
    X(Q4_K, q4_k, QK_K)                                                                    \
    X(Q5_K, q5_k, QK_K)                                                                    \
    X(Q6_K, q6_k, QK_K)

#define GRAFT_QF_CHECK(type, name, elems)                                                  \
    _Static_assert((int)BLOCK_BYTES_##type == (int)GRAFT_GGUF_BYTES_##type &&              \
                       (int)(elems) == (int)GRAFT_GGUF_ELEMS_##type,                       \
                   #type " block differs from the GGUF type table");
GRAFT_BLOCK_TYPES(GRAFT_QF_CHECK)
#undef GRAFT_QF_CHECK

/* The values of the 16 IQ4_NL codes (before scaling by d), code 0 first, each as X(value):
 * a kernel lays out its own table with them, e.g. {GRAFT_IQ4_NL_VALUES(GRAFT_QF_AS_IS)}. */
#define GRAFT_IQ4_NL_VALUES(X)                                                             \
    X(-127), X(-104), X(-83), X(-65), X(-49), X(-35), X(-22), X(-10), X(1), X(13), X(25),  \
        X(38), X(53), X(69), X(89), X(113)
#define GRAFT_QF_AS_IS(v) (v)

#endif /* GRAFT_QUANT_FORMATS_H */
