/*
 * kv.h: the paged, reference-counted KV pool (DESIGN.md §1 invariant 2, §4).
 *
 * All K and V of all sessions live in one pool of fixed-size blocks, allocated up front
 * from a byte budget fixed at engine start. A block holds GRAFT_KV_BLOCK_TOKENS consecutive
 * positions of K and V for every layer of one layer group. Layer groups: the global layers
 * form one group, the sliding-window layers another (models without sliding windows have
 * one group). A sequence is a block table per group: entry i covers positions
 * [i * B, (i + 1) * B). Blocks are reference counted; clone(upto) takes references to the
 * blocks covering [0, upto) instead of copying them, and the first write into a block whose
 * count is above one copies that block (copy-on-write), so writers never disturb sharers.
 *
 * Sliding-window retention: a query at position p reads the keys [p - W + 1, p] of a
 * sliding-window layer (W the window). A sequence of length L keeps, in the sliding-window
 * group, the blocks that reach past L - W: the window of its last position L - 1, so that a
 * clone one position shorter still has its window; a block whose end is at or below L - W
 * leaves the sequence (no future query of it can see the block). clone(upto) needs the
 * blocks covering [max(0, upto - W + 1), upto), the keys the next query reads besides its
 * own: if any is gone the clone is refused with GRAFT_ERETENTION. A clone (a snapshot) holds
 * its own references, so its window stays.
 *
 * Threads: a pool and its sequences belong to one thread (the engine thread). Nothing here
 * locks.
 * CONSTRUCTOR: graft__kv_pool_create   DESTRUCTOR: graft__kv_pool_free
 */
#ifndef GRAFT_KV_H
#define GRAFT_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define GRAFT_KV_BLOCK_TOKENS 32

typedef struct graft__kv_pool graft__kv_pool;

#define GRAFT_KV_MAX_GROUPS 2

/* One layer group. Its blocks hold n_layers layers, so groups' blocks differ in size; the
 * budget's memory is shared by both groups in per-layer slices of
 * GRAFT_KV_BLOCK_TOKENS positions (a block of this group takes n_layers slices). */
typedef struct graft__kv_group_stats {
    bool sliding;          /* the sliding-window group */
    int32_t window;        /* its window (positions); 0 for the global group */
    int32_t n_layers;
    int64_t bytes_per_block;
    int64_t blocks_used;
    int64_t blocks_shared;
} graft__kv_group_stats;

typedef struct graft__kv_stats {
    int64_t blocks_total;  /* blocks the budget holds */
    int64_t blocks_used;   /* blocks with a reference count above zero */
    int64_t blocks_shared; /* blocks with a reference count above one */
    int64_t blocks_free;
    int64_t bytes_per_block;
    int64_t cow_copies;    /* blocks copied on write since creation */
    int32_t sequences;     /* open sequences */
    /* With two groups, blocks_total, blocks_free and bytes_per_block count blocks of the
     * larger group (a block of the smaller one takes less); blocks_used, blocks_shared and
     * cow_copies count blocks of both groups. With one group every count is exact. */
    int64_t slices_total;  /* the budget in slices (B positions of one layer): exact in both
                              groups, where a block of a group of n layers takes n slices */
    int64_t slices_free;
    int64_t bytes_total;   /* the block memory the budget bought */
    int64_t bytes_used;    /* of which held by blocks in use */
    int32_t n_groups;      /* 1 or 2: group[0] is the global group when the model has one */
    graft__kv_group_stats group[GRAFT_KV_MAX_GROUPS];
} graft__kv_stats;

/* Budget: `budget_bytes` of blocks (at least one block per group, else GRAFT_ECAPACITY);
 * max_seqs: the most sequences open at once; max_len: the most positions per sequence.
 * kv_type: GRAFT_TYPE_F16 or GRAFT_TYPE_F32. Every limit is checked before allocating.
 * Errors, each with a message naming the limit: GRAFT_EINVAL (NULL argument, kv_type,
 * layer count), GRAFT_ERANGE (max_seqs or max_len below 1), GRAFT_ECAPACITY, GRAFT_ENOMEM.
 * The budget buys at most INT32_MAX slices; metadata (a few bytes per block) and block
 * tables (4 bytes per GRAFT_KV_BLOCK_TOKENS positions of max_len per group, allocated at
 * open and clone) come on top of it. Leaves *out NULL on failure. */
int graft__kv_pool_create(const graft__hparams *hp, uint32_t kv_type, size_t budget_bytes,
                          int32_t max_seqs, int32_t max_len, graft__kv_pool **out,
                          char **errmsg);
/* Frees the pool and every block; sequences still open are closed. */
void graft__kv_pool_free(graft__kv_pool *pool);

void graft__kv_pool_stats(const graft__kv_pool *pool, graft__kv_stats *stats);

/* Recounts every block reference held by the block tables and checks it against the
 * blocks' counts, the free lists and each table's shape. O(blocks + table entries), no
 * allocation; for tests and debug checks. True when everything agrees. */
bool graft__kv_pool_check(graft__kv_pool *pool);

/* Opens an empty sequence; *seq is its id (the `seq` of batch entries). GRAFT_ECAPACITY
 * when max_seqs are open, GRAFT_ENOMEM. */
int graft__kv_seq_open(graft__kv_pool *pool, int32_t *seq);
/* Drops the sequence's references and frees its id. An id that is not open is ignored. */
void graft__kv_seq_close(graft__kv_pool *pool, int32_t seq);

/* Positions [0, length) hold committed K and V. -1 for an id that is not open. */
int32_t graft__kv_seq_length(const graft__kv_pool *pool, int32_t seq);
/* Marks [0, length) committed after a forward wrote them (length may only grow by what the
 * last reserve made writable), releases what was reserved beyond it, then drops
 * sliding-window blocks now out of the window. GRAFT_EINVAL: id not open, length below the
 * current one or beyond what was reserved. */
int graft__kv_seq_commit(graft__kv_pool *pool, int32_t seq, int32_t length);
/* Forgets positions [length, old length) and anything reserved beyond (a cancelled or
 * failed step); 0 <= length <= current, else GRAFT_EINVAL. GRAFT_ERETENTION (nothing
 * changes) when the sliding-window blocks for [length - W + 1, length) were already dropped. */
int graft__kv_seq_truncate(graft__kv_pool *pool, int32_t seq, int32_t length);

/* Opens a new sequence holding exactly [0, upto) of `seq`, sharing its blocks.
 * GRAFT_EBOUNDARY: upto < 0 or upto > length. GRAFT_ERETENTION: a sliding-window block
 * needed for [upto - W + 1, upto) is gone. GRAFT_ECAPACITY: no sequence id left. GRAFT_ENOMEM.
 * The source is unchanged whatever the outcome. */
int graft__kv_seq_clone(graft__kv_pool *pool, int32_t seq, int32_t upto, int32_t *clone);
/* Whether a clone at `upto` would keep its sliding window (no allocation). */
bool graft__kv_seq_retains(const graft__kv_pool *pool, int32_t seq, int32_t upto);

/* Slices that making positions [from, from + n) of `seq` writable takes now: a fresh block
 * for each entry it lacks, a copy of each entry it shares, in every group (0 for a sequence
 * not open). The exact count reserve would take for this sequence alone. No allocation. */
int64_t graft__kv_seq_write_slices(const graft__kv_pool *pool, int32_t seq, int32_t from,
                                   int32_t n);
/* Slices of the blocks `seq` references (shared or not); 0 for an id not open. */
int64_t graft__kv_seq_held_slices(const graft__kv_pool *pool, int32_t seq);
/* Whether `seq` holds the KV of position pos in every layer group (pos below its length and
 * not dropped by the sliding window). For tests of retention. */
bool graft__kv_seq_holds(const graft__kv_pool *pool, int32_t seq, int32_t pos);

/* Bytes of the blocks (every group, each at its own block size) referenced only by the
 * sequences `seqs` (distinct ids; ids not open are skipped): what closing all of them would
 * free. O(table entries of the set), no allocation (kv_exclusive.c). */
int64_t graft__kv_seqs_exclusive_bytes(graft__kv_pool *pool, const int32_t *seqs, size_t n);

/* The graft__kv interface over the pool for graft__forward. Its reserve makes each entry's
 * (seq, pos) writable in every group: allocates missing blocks, copies shared ones
 * (copy-on-write); refuses with GRAFT_ECAPACITY (no free block, or pos >= max_len) or
 * GRAFT_EINVAL (unknown seq, or pos beyond length + batch) and then changes nothing. The
 * entries of one sequence must be its positions length, length + 1, ... in batch order
 * (committed positions are never rewritten). Reserve never allocates memory. Rows are
 * readable for every retained position below what was reserved; asking for a row of a
 * dropped block is a bug (GRAFT_ASSERT). */
graft__kv graft__kv_pool_iface(graft__kv_pool *pool);

#endif /* GRAFT_KV_H */
