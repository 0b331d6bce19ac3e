/*
 * kv_reserve.c: the graft__kv interface over the pool, as graft__forward uses it: reserve
 * makes a batch's positions writable (fresh blocks, copy-on-write of shared ones), and
 * k_row / v_row find a row through the block tables.
 *
 * Reserve is all-or-nothing in three passes over the batch: check the positions, count the
 * slices the batch needs, and only when they are free, apply. The count simulates the apply
 * exactly: a shared block is copied by each writer but the last holder of it, so the count
 * keeps, per block, the copies already planned (`pending`, zero between calls). Each pass
 * visits a (sequence, table entry) once, using the sequence's scratch fields stamped with
 * the pass number. Nothing here allocates memory. Blocks are kv_pool.c, tables kv_seq.c.
 */
#include "kv/kv_impl.h"

typedef void (*entry_fn)(graft__kv_pool *p, kv_seq *s, int g, int32_t entry, int64_t *acc);

/* The sequence of a batch entry, open: checked by check_batch before any visit. */
static kv_seq *entry_seq(const graft__kv_pool *p, const graft__batch_entry *e)
{
    kv_seq *s = graft__kv_seq_at(p, e->seq);
    GRAFT_ASSERT(s != NULL);
    return s;
}

/* Each sequence's entries must be its positions length, length + 1, ... in order. */
static int check_batch(graft__kv_pool *p, const graft__batch_entry *e, int32_t n)
{
    const uint64_t pass = ++p->visits;
    for (int32_t t = 0; t < n; t++) {
        kv_seq *s = graft__kv_seq_at(p, e[t].seq);
        if (s == NULL)
            return GRAFT_EINVAL;
        if (s->visit != pass) {
            s->visit = pass;
            s->next_pos = s->length;
        }
        if (e[t].pos != s->next_pos)
            return GRAFT_EINVAL;
        if (e[t].pos >= p->max_len)
            return GRAFT_ECAPACITY;
        s->next_pos++;
    }
    return GRAFT_OK;
}

/* Calls fn once for each (sequence, table entry, group) the batch writes into. */
static void visit_entries(graft__kv_pool *p, const graft__batch_entry *e, int32_t n,
                          entry_fn fn, int64_t *acc)
{
    const uint64_t pass = ++p->visits;
    for (int32_t t = 0; t < n; t++) {
        kv_seq *s = entry_seq(p, &e[t]);
        const int32_t entry = e[t].pos / KV_B;
        if (s->visit == pass && s->last_entry == entry)
            continue;
        s->visit = pass;
        s->last_entry = entry;
        for (int g = 0; g < p->n_groups; g++)
            fn(p, s, g, entry, acc);
    }
}

/* Counts the slices an entry needs: a fresh block, or a copy of a block that will still be
 * shared when this writer gets to it. */
static void plan_entry(graft__kv_pool *p, kv_seq *s, int g, int32_t entry, int64_t *slices)
{
    kv_group *gr = &p->groups[g];
    const int32_t b = s->table[g][entry];
    if (b != KV_NO_BLOCK && gr->refs[b] - gr->pending[b] <= 1)
        return;
    if (b != KV_NO_BLOCK)
        gr->pending[b]++;
    *slices += gr->n_layers;
}

static void unplan_entry(graft__kv_pool *p, kv_seq *s, int g, int32_t entry, int64_t *unused)
{
    (void)unused;
    const int32_t b = s->table[g][entry];
    if (b != KV_NO_BLOCK)
        p->groups[g].pending[b] = 0;
}

static void make_writable(graft__kv_pool *p, kv_seq *s, int g, int32_t entry, int64_t *unused)
{
    (void)unused;
    kv_group *gr = &p->groups[g];
    const int32_t b = s->table[g][entry];
    if (b == KV_NO_BLOCK) {
        s->table[g][entry] = graft__kv_block_new(p, g);
        return;
    }
    gr->pending[b] = 0;
    if (gr->refs[b] > 1)
        s->table[g][entry] = graft__kv_block_unshare(p, g, b);
}

static int pool_reserve(void *self, const graft__batch_entry *e, int32_t n)
{
    graft__kv_pool *p = self;
    int rc = check_batch(p, e, n);
    if (rc != GRAFT_OK)
        return rc;
    int64_t slices = 0;
    visit_entries(p, e, n, plan_entry, &slices);
    if (slices > p->n_free_slices) {
        visit_entries(p, e, n, unplan_entry, NULL);
        return GRAFT_ECAPACITY;
    }
    visit_entries(p, e, n, make_writable, NULL);
    for (int32_t t = 0; t < n; t++) {
        kv_seq *s = entry_seq(p, &e[t]);
        if (s->writable <= e[t].pos)
            s->writable = e[t].pos + 1;
    }
    return GRAFT_OK;
}

/* The slice holding (layer, seq, pos). Reading a dropped block, or a position the sequence
 * never reserved, is a caller's bug. */
static uint8_t *slice_of(const graft__kv_pool *p, int32_t layer, int32_t seq, int32_t pos)
{
    GRAFT_ASSERT(layer >= 0 && layer < p->n_layer);
    const kv_seq *s = graft__kv_seq_at(p, seq);
    GRAFT_ASSERT(s != NULL && pos >= 0 && pos < s->writable);
    const int g = p->layer_group[layer];
    const int32_t b = s->table[g][pos / KV_B];
    GRAFT_ASSERT(b != KV_NO_BLOCK);
    return graft__kv_block_slice(p, g, b, p->layer_slot[layer]);
}

static void *pool_k_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    const graft__kv_pool *p = self;
    return slice_of(p, layer, seq, pos) + (size_t)(pos % KV_B) * p->k_bytes;
}

static void *pool_v_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    const graft__kv_pool *p = self;
    return slice_of(p, layer, seq, pos) + (size_t)KV_B * p->k_bytes +
           (size_t)(pos % KV_B) * p->v_bytes;
}

graft__kv graft__kv_pool_iface(graft__kv_pool *pool)
{
    graft__kv kv = {pool, pool->type, pool_reserve, pool_k_row, pool_v_row};
    return kv;
}
