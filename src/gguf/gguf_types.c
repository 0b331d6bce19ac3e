/*
 * gguf_types.c: the block layout of every tensor type id the GGUF format defines.
 *
 * A quantized tensor row is a sequence of fixed-size blocks: `block_elems` elements packed
 * into `block_bytes` bytes. The reader needs this table to check that a tensor's row length
 * is a whole number of blocks and that its data fits in the file; the writer and the model
 * loader use it to size rows. The table is made from GRAFT_GGUF_TYPES (gguf.h); ids it
 * does not list have no entry.
 */
#include "gguf/gguf.h"

#define TYPE_ENTRY(name, id, elems, bytes) [id] = {#name, elems, bytes},
static const graft__type_traits type_table[GRAFT_TYPE_COUNT] = {GRAFT_GGUF_TYPES(TYPE_ENTRY)};
#undef TYPE_ENTRY

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
