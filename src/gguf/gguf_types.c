/*
 * gguf_types.c: the block layout of every tensor type id the GGUF format defines.
 *
 * A quantized tensor row is a sequence of fixed-size blocks: `block_elems` elements packed
 * into `block_bytes` bytes. The reader needs this table to check that a tensor's row length
 * is a whole number of blocks and that its data fits in the file; the writer and the model
 * loader use it to size rows. Ids that were never assigned or were removed from ggml
 * (4 and 5, the repacked Q4_0_x_y / IQ4_NL_x_y ids 31-33 and 36-38) have no entry.
 */
#include "gguf/gguf.h"

static const graft__type_traits type_table[GRAFT_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},
    [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},
    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},
    [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},
    [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},
    [39] = {"MXFP4", 32, 17},
};

const graft__type_traits *graft__type_traits_of(uint32_t type)
{
    if (type >= GRAFT_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

size_t graft__type_row_bytes(uint32_t type, uint64_t n)
{
    const graft__type_traits *t = graft__type_traits_of(type);
    if (t == NULL || n % t->block_elems != 0)
        return 0;
    uint64_t bytes;
    if (__builtin_mul_overflow(n / t->block_elems, (uint64_t)t->block_bytes, &bytes) ||
        bytes > SIZE_MAX)
        return 0;
    return (size_t)bytes;
}

const char *graft_type_name(int type)
{
    if (type < 0)
        return NULL;
    const graft__type_traits *t = graft__type_traits_of((uint32_t)type);
    return t != NULL ? t->name : NULL;
}
