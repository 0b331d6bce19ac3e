/*
 * kv_seq.c: sequences of the KV pool: their block tables, open / close, commit with
 * sliding-window drop, truncate, and clone with its retention check (DESIGN.md §1
 * invariants 2-3, §4).
 *
 * A sequence's tables are sized for max_len at open (one allocation), so neither reserve
 * nor commit ever allocates. Clone copies table entries and takes references: O(entries),
 * no KV bytes move. In the sliding-window group a sequence of length L keeps the blocks
 * that reach past L - W; a block whose end is at or below L - W is dropped at commit
 * (kv.h). A clone at upto takes, in that group, only the entries covering
 * [max(0, upto - W), upto) that the source still holds (at least [upto - W + 1, upto), which
 * the next query reads); the entries before are left empty, since no query of the clone can
 * read them. The memory side (blocks, counts) is kv_pool.c; reserve is kv_reserve.c.
 */
#include "kv/kv_impl.h"

/* First sliding-window entry a sequence of `length` positions keeps: the block holding
 * position length - W, the first key of the window of its last position length - 1, so that
 * a clone one position shorter (a cached prompt repeated, whose last token is computed
 * again) still has its window. */
static int32_t window_keep_first(const kv_group *g, int32_t length)
{
    int32_t lo = length - g->window;
    return g->sliding && lo > 0 ? lo / KV_B : 0;
}

/* First sliding-window entry a clone at `upto` needs: the block holding the first key of the
 * window of the next query, upto - W + 1 (the forward pass reads keys [pos - W + 1, pos]). */
static int32_t window_need_first(const kv_group *g, int32_t upto)
{
    int32_t lo = upto - g->window + 1;
    return g->sliding && lo > 0 ? lo / KV_B : 0;
}

/* Whether every group still holds the entries a sequence cut at `upto` needs. */
static bool keeps_window(const graft__kv_pool *p, const kv_seq *s, int32_t upto)
{
    for (int g = 0; g < p->n_groups; g++)
        if (upto > 0 && s->first[g] > window_need_first(&p->groups[g], upto))
            return false;
    return true;
}

/* Drops the references of entries [from, end of what is held) in every group. */
static void release_from(graft__kv_pool *p, kv_seq *s, int32_t from)
{
    const int32_t end = graft__kv_entries_for(s->writable);
    for (int g = 0; g < p->n_groups; g++) {
        for (int32_t i = from > s->first[g] ? from : s->first[g]; i < end; i++) {
            graft__kv_block_unref(p, g, s->table[g][i]);
            s->table[g][i] = KV_NO_BLOCK;
        }
        if (s->first[g] > from)
            s->first[g] = from;
    }
}

/* Sliding-window blocks that ended at or before length - W leave the sequence. */
static void drop_window(graft__kv_pool *p, kv_seq *s)
{
    for (int g = 0; g < p->n_groups; g++) {
        const int32_t keep = window_keep_first(&p->groups[g], s->length);
        for (; s->first[g] < keep; s->first[g]++) {
            graft__kv_block_unref(p, g, s->table[g][s->first[g]]);
            s->table[g][s->first[g]] = KV_NO_BLOCK;
        }
    }
}

/* A new, empty sequence in the lowest free id. */
static int seq_new(graft__kv_pool *p, int32_t *id, kv_seq **out)
{
    int32_t free_id = 0;
    while (free_id < p->max_seqs && p->seqs[free_id] != NULL)
        free_id++;
    if (free_id == p->max_seqs)
        return GRAFT_ECAPACITY;
    const size_t entries = (size_t)p->n_entries * (size_t)p->n_groups;
    kv_seq *s = graft__calloc(1, sizeof *s + entries * sizeof(int32_t));
    if (s == NULL)
        return GRAFT_ENOMEM;
    int32_t *tables = (int32_t *)(s + 1);
    for (size_t i = 0; i < entries; i++)
        tables[i] = KV_NO_BLOCK;
    for (int g = 0; g < p->n_groups; g++)
        s->table[g] = tables + (size_t)g * (size_t)p->n_entries;
    p->seqs[free_id] = s;
    p->n_seqs++;
    *id = free_id;
    *out = s;
    return GRAFT_OK;
}

int graft__kv_seq_open(graft__kv_pool *pool, int32_t *seq)
{
    kv_seq *s;
    return seq_new(pool, seq, &s);
}

void graft__kv_seq_close(graft__kv_pool *pool, int32_t seq)
{
    kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL)
        return;
    release_from(pool, s, 0);
    graft__free(s);
    pool->seqs[seq] = NULL;
    pool->n_seqs--;
}

int32_t graft__kv_seq_length(const graft__kv_pool *pool, int32_t seq)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    return s ? s->length : -1;
}

int graft__kv_seq_commit(graft__kv_pool *pool, int32_t seq, int32_t length)
{
    kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL || length < s->length || length > s->writable)
        return GRAFT_EINVAL;
    release_from(pool, s, graft__kv_entries_for(length));
    s->length = s->writable = length;
    drop_window(pool, s);
    GRAFT_DEBUG_ASSERT(graft__kv_pool_check(pool));
    return GRAFT_OK;
}

int graft__kv_seq_truncate(graft__kv_pool *pool, int32_t seq, int32_t length)
{
    kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL || length < 0 || length > s->length)
        return GRAFT_EINVAL;
    if (!keeps_window(pool, s, length))
        return GRAFT_ERETENTION;
    release_from(pool, s, graft__kv_entries_for(length));
    s->length = s->writable = length;
    GRAFT_DEBUG_ASSERT(graft__kv_pool_check(pool));
    return GRAFT_OK;
}

bool graft__kv_seq_retains(const graft__kv_pool *pool, int32_t seq, int32_t upto)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    return s != NULL && upto >= 0 && upto <= s->length && keeps_window(pool, s, upto);
}

/* The clone c takes references to the entries of s that a sequence of length upto keeps
 * (those s still holds: at least what the clone needs, keeps_window checked it). */
static void share_prefix(graft__kv_pool *p, const kv_seq *s, kv_seq *c, int32_t upto)
{
    const int32_t end = graft__kv_entries_for(upto);
    for (int g = 0; g < p->n_groups; g++) {
        const int32_t keep = window_keep_first(&p->groups[g], upto);
        c->first[g] = keep > s->first[g] ? keep : s->first[g];
        if (c->first[g] > end)
            c->first[g] = end;
        for (int32_t i = c->first[g]; i < end; i++) {
            c->table[g][i] = s->table[g][i];
            graft__kv_block_ref(p, g, c->table[g][i]);
        }
    }
    c->length = c->writable = upto;
}

int graft__kv_seq_clone(graft__kv_pool *pool, int32_t seq, int32_t upto, int32_t *clone)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL)
        return GRAFT_EINVAL;
    if (upto < 0 || upto > s->length)
        return GRAFT_EBOUNDARY;
    if (!keeps_window(pool, s, upto))
        return GRAFT_ERETENTION;
    kv_seq *c;
    int rc = seq_new(pool, clone, &c);
    if (rc != GRAFT_OK)
        return rc;
    share_prefix(pool, s, c, upto);
    GRAFT_DEBUG_ASSERT(graft__kv_pool_check(pool));
    return GRAFT_OK;
}

int64_t graft__kv_seq_write_slices(const graft__kv_pool *pool, int32_t seq, int32_t from,
                                   int32_t n)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL || n <= 0)
        return 0;
    int64_t slices = 0;
    const int32_t last = (int32_t)(((int64_t)from + n - 1) / KV_B);
    for (int g = 0; g < pool->n_groups; g++) {
        const kv_group *gr = &pool->groups[g];
        for (int32_t i = from / KV_B; i <= last && i < pool->n_entries; i++) {
            const int32_t b = i >= s->first[g] ? s->table[g][i] : KV_NO_BLOCK;
            if (b == KV_NO_BLOCK || gr->refs[b] > 1)
                slices += gr->n_layers;
        }
    }
    return slices;
}

int64_t graft__kv_seq_held_slices(const graft__kv_pool *pool, int32_t seq)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL)
        return 0;
    int64_t slices = 0;
    const int32_t end = graft__kv_entries_for(s->writable);
    for (int g = 0; g < pool->n_groups; g++)
        slices += (int64_t)(end - s->first[g]) * pool->groups[g].n_layers;
    return slices;
}

bool graft__kv_seq_holds(const graft__kv_pool *pool, int32_t seq, int32_t pos)
{
    const kv_seq *s = graft__kv_seq_at(pool, seq);
    if (s == NULL || pos < 0 || pos >= s->length)
        return false;
    for (int g = 0; g < pool->n_groups; g++)
        if (pos / KV_B < s->first[g] || s->table[g][pos / KV_B] == KV_NO_BLOCK)
            return false;
    return true;
}
