/*
 * kv_impl.h: the KV pool's private structures, shared by the files of src/kv/ only:
 *   kv_pool.c     the memory: slices, blocks, reference counts, free lists, stats, checks;
 *   kv_seq.c      sequences: block tables, open / close / commit / truncate / clone, retention;
 *   kv_reserve.c  the graft__kv interface: reserve (with copy-on-write) and row lookup;
 *   kv_exclusive.c  the blocks a set of sequences holds alone (accounting for caches).
 * Nothing outside src/kv/ includes this file; kv.h is the interface.
 *
 * Memory: the budget buys `slices_total` slices, each GRAFT_KV_BLOCK_TOKENS positions of one
 * layer: K rows of all those positions, then their V rows. A block of a group of n layers
 * is n slices (one per layer of the group, in layer order), so blocks of a 2-layer global
 * group and a 4-layer sliding-window group share one free list of slices and neither group's
 * share of the budget is fixed in advance. Block ids are per group; a block id names a
 * descriptor (its reference count and its slice ids).
 *
 * Block tables: table[g][i] is the block of group g covering positions [i * B, (i + 1) * B),
 * or KV_NO_BLOCK. The shape is an invariant (graft__kv_pool_check tests it): entries
 * [first[g], ceil(writable / B)) hold blocks, every other entry is empty; entries below
 * first[g] were dropped by the sliding window (first is 0 in the global group).
 */
#ifndef GRAFT_KV_IMPL_H
#define GRAFT_KV_IMPL_H

#include "kv/kv.h"

#define KV_NO_BLOCK (-1)
#define KV_B GRAFT_KV_BLOCK_TOKENS

typedef struct kv_group {
    bool sliding;
    int32_t window;     /* positions; 0 in the global group */
    int32_t n_layers;   /* slices per block */
    int32_t max_blocks; /* descriptors: slices_total / n_layers, so slices run out first */
    int32_t n_free;     /* descriptors on the free stack */
    int32_t *free_ids;  /* (max_blocks) stack of free block ids */
    int32_t *refs;      /* (max_blocks) reference counts */
    int32_t *pending;   /* (max_blocks) scratch counts: copies reserve plans, references the
                           check and kv_exclusive.c recount; all zero between calls */
    int32_t *slices;    /* (max_blocks, n_layers) slice of each layer of each block */
    int64_t shared;     /* blocks with refs > 1 */
} kv_group;

typedef struct kv_seq {
    int32_t length;                       /* committed positions */
    int32_t writable;                     /* >= length: end of what reserve made writable */
    int32_t first[GRAFT_KV_MAX_GROUPS];   /* entries below were dropped (sliding window) */
    int32_t *table[GRAFT_KV_MAX_GROUPS];  /* (n_entries) block ids or KV_NO_BLOCK */
    uint64_t visit;                       /* reserve's scratch: pass that last met it */
    int32_t next_pos;                     /* reserve's scratch: next position expected */
    int32_t last_entry;                   /* reserve's scratch: last table entry visited */
} kv_seq;

struct graft__kv_pool {
    uint32_t type;
    int32_t max_seqs, max_len;
    int32_t n_entries;                       /* table entries per group: ceil(max_len / B) */
    int32_t n_groups;
    kv_group groups[GRAFT_KV_MAX_GROUPS];
    uint8_t layer_group[GRAFT_MAX_LAYERS];   /* group of each layer */
    int32_t layer_slot[GRAFT_MAX_LAYERS];    /* index of the layer inside its group */
    int32_t n_layer;
    size_t k_bytes, v_bytes;                 /* one row */
    size_t slice_bytes;                      /* B * (k_bytes + v_bytes) */
    int32_t slices_total, n_free_slices;
    int32_t *free_slices;                    /* (slices_total) stack of free slice ids */
    uint8_t *arena;                          /* (slices_total, slice_bytes) */
    kv_seq **seqs;                           /* (max_seqs) NULL where the id is free */
    int32_t n_seqs;
    uint64_t visits;                         /* reserve's passes so far */
    int64_t cow_copies;
};

/* Table entries covering [0, n) positions. */
static inline int32_t graft__kv_entries_for(int32_t n)
{
    return (int32_t)(((int64_t)n + KV_B - 1) / KV_B);
}

/* The open sequence `id`, or NULL. */
static inline kv_seq *graft__kv_seq_at(const graft__kv_pool *p, int32_t id)
{
    return id >= 0 && id < p->max_seqs ? p->seqs[id] : NULL;
}

/* Blocks (kv_pool.c). new: a fresh block (count 1); the caller has checked that a block's
 * slices are free. ref / unref: count up / down; the last unref frees it. unshare: the
 * writer's own copy of a shared block b (whole block copied, the writer's reference to b
 * dropped, cow_copies counted). slice: the memory of one layer of a block. */
int32_t graft__kv_block_new(graft__kv_pool *p, int g);
void graft__kv_block_ref(graft__kv_pool *p, int g, int32_t b);
void graft__kv_block_unref(graft__kv_pool *p, int g, int32_t b);
int32_t graft__kv_block_unshare(graft__kv_pool *p, int g, int32_t b);
uint8_t *graft__kv_block_slice(const graft__kv_pool *p, int g, int32_t b, int32_t slot);

#endif /* GRAFT_KV_IMPL_H */
