/*
 * kv_exclusive.c: which blocks a set of sequences holds alone (graft__kv_seqs_exclusive_bytes
 * in kv.h), for caches that must bound the memory only they keep alive.
 *
 * A block is held alone by the set when every one of its references comes from the set's
 * block tables. Two passes over the set's table entries: the first counts the set's
 * references per block in the group's `pending` scratch (all zero between calls, kv_impl.h),
 * the second compares each count with the block's reference count, adds the block's bytes
 * once, and clears the scratch. O(table entries of the set), no allocation.
 */
#include "kv/kv_impl.h"

/* One pass over the blocks the set holds in group g: counting its references (count), or
 * comparing them with the blocks' counts, summing the bytes of those held alone and
 * clearing the scratch. */
static int64_t visit_set(graft__kv_pool *p, int g, const int32_t *seqs, size_t n, bool count)
{
    kv_group *gr = &p->groups[g];
    const int64_t block_bytes = (int64_t)gr->n_layers * (int64_t)p->slice_bytes;
    int64_t bytes = 0;
    for (size_t k = 0; k < n; k++) {
        const kv_seq *s = graft__kv_seq_at(p, seqs[k]);
        if (s == NULL)
            continue;
        const int32_t end = graft__kv_entries_for(s->writable);
        for (int32_t i = s->first[g]; i < end; i++) {
            int32_t b = s->table[g][i];
            if (b == KV_NO_BLOCK)
                continue;
            if (count) {
                gr->pending[b]++;
            } else if (gr->pending[b] != 0) {
                bytes += gr->pending[b] == gr->refs[b] ? block_bytes : 0;
                gr->pending[b] = 0;
            }
        }
    }
    return bytes;
}

int64_t graft__kv_seqs_exclusive_bytes(graft__kv_pool *pool, const int32_t *seqs, size_t n)
{
    int64_t bytes = 0;
    for (int g = 0; g < pool->n_groups; g++) {
        visit_set(pool, g, seqs, n, true);
        bytes += visit_set(pool, g, seqs, n, false);
    }
    return bytes;
}
