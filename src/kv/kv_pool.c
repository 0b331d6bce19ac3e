/*
 * kv_pool.c: the KV pool's memory: layer groups, the slice arena bought from the budget,
 * blocks with reference counts and free lists, stats and the consistency check.
 *
 * Everything is allocated here, once, at create (DESIGN.md invariant 4): after it, blocks
 * are only taken from and given back to free lists. The slice arena asks for huge pages
 * (graft__advise_huge_pages): every attention pass sweeps a sequence's rows, often reading
 * only a few cache lines of each, so with 4 KiB pages the TLB would miss on nearly every
 * row. Sequences and their block tables are kv_seq.c; reserve, copy-on-write and row
 * lookup for the forward pass are kv_reserve.c. The structures and the layout are
 * described in kv_impl.h.
 */
#include <string.h>

#include "kv/kv_impl.h"

/* ---- geometry and limits --------------------------------------------------------------------- */

/* Splits the layers into groups: group 0 global, then the sliding-window group (only when
 * the model has a window); a group without layers is left out. */
static void plan_groups(graft__kv_pool *p, const graft__hparams *hp)
{
    int32_t counts[2] = {0, 0};
    for (int32_t il = 0; il < hp->n_layer; il++)
        counts[hp->sliding_window > 0 && hp->layer_is_swa[il]]++;
    int index[2] = {-1, -1};
    for (int kind = 0; kind < 2; kind++) {
        if (counts[kind] == 0)
            continue;
        index[kind] = p->n_groups;
        kv_group *g = &p->groups[p->n_groups++];
        g->sliding = kind == 1;
        g->window = g->sliding ? hp->sliding_window : 0;
    }
    for (int32_t il = 0; il < hp->n_layer; il++) {
        int g = index[hp->sliding_window > 0 && hp->layer_is_swa[il]];
        p->layer_group[il] = (uint8_t)g;
        p->layer_slot[il] = p->groups[g].n_layers++;
    }
}

static int check_limits(const graft__hparams *hp, uint32_t kv_type, int32_t max_seqs,
                        int32_t max_len, char **errmsg)
{
    if (kv_type != GRAFT_TYPE_F16 && kv_type != GRAFT_TYPE_F32)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "kv pool: KV type %u is neither F16 (%d) "
                             "nor F32 (%d)", kv_type, GRAFT_TYPE_F16, GRAFT_TYPE_F32);
    if (hp->n_layer < 1 || hp->n_layer > GRAFT_MAX_LAYERS || hp->n_head_kv < 1 ||
        hp->head_dim < 1 || hp->head_dim_v < 1)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "kv pool: bad model shape (%d layers, %d KV "
                             "heads of %d/%d)", hp->n_layer, hp->n_head_kv, hp->head_dim,
                             hp->head_dim_v);
    if (max_seqs < 1)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "kv pool: max_seqs is %d; it must be at "
                             "least 1", max_seqs);
    if (max_len < 1)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "kv pool: max_len is %d; it must be at "
                             "least 1", max_len);
    return GRAFT_OK;
}

/* Row and slice sizes, and how many slices the budget buys (at most INT32_MAX). */
static int plan_memory(graft__kv_pool *p, const graft__hparams *hp, size_t budget,
                       char **errmsg)
{
    p->k_bytes = graft__type_row_bytes(p->type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim);
    p->v_bytes =
        graft__type_row_bytes(p->type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim_v);
    size_t row, one_each;
    if (p->k_bytes == 0 || p->v_bytes == 0 || !graft__add_size(p->k_bytes, p->v_bytes, &row) ||
        !graft__mul_size(row, KV_B, &p->slice_bytes) ||
        !graft__mul_size(p->slice_bytes, (size_t)hp->n_layer, &one_each))
        return graft__errmsg(errmsg, GRAFT_EINVAL, "kv pool: KV rows of %d heads of %d/%d are "
                             "too large", hp->n_head_kv, hp->head_dim, hp->head_dim_v);
    size_t slices = budget / p->slice_bytes;
    if (slices < (size_t)hp->n_layer)
        return graft__errmsg(errmsg, GRAFT_ECAPACITY,
                             "kv pool: a budget of %zu bytes is less than one block per layer "
                             "group: %zu bytes (%d positions x %d layers x %zu bytes of K and V)",
                             budget, one_each, KV_B, hp->n_layer, row);
    p->slices_total = slices > INT32_MAX ? INT32_MAX : (int32_t)slices;
    return GRAFT_OK;
}

/* ---- allocation ------------------------------------------------------------------------------ */

/* A stack holding ids count-1 .. 0, so ids are handed out from 0 up. */
static void fill_stack(int32_t *stack, int32_t count)
{
    for (int32_t i = 0; i < count; i++)
        stack[i] = count - 1 - i;
}

/* One allocation per group for its four arrays. */
static int alloc_group(kv_group *g, int32_t slices_total)
{
    g->max_blocks = slices_total / g->n_layers;
    size_t per_block = 3 + (size_t)g->n_layers, ints;
    if (!graft__mul_size(per_block * sizeof(int32_t), (size_t)g->max_blocks, &ints))
        return GRAFT_ENOMEM;
    g->free_ids = graft__calloc(1, ints);
    if (g->free_ids == NULL)
        return GRAFT_ENOMEM;
    g->refs = g->free_ids + g->max_blocks;
    g->pending = g->refs + g->max_blocks;
    g->slices = g->pending + g->max_blocks;
    g->n_free = g->max_blocks;
    fill_stack(g->free_ids, g->max_blocks);
    return GRAFT_OK;
}

static int alloc_memory(graft__kv_pool *p)
{
    p->arena = graft__malloc_aligned((size_t)p->slices_total * p->slice_bytes, GRAFT_HUGE_PAGE);
    p->free_slices = graft__malloc((size_t)p->slices_total * sizeof(int32_t));
    p->seqs = graft__calloc((size_t)p->max_seqs, sizeof *p->seqs);
    if (p->arena == NULL || p->free_slices == NULL || p->seqs == NULL)
        return GRAFT_ENOMEM;
    graft__advise_huge_pages(p->arena, (size_t)p->slices_total * p->slice_bytes);
    p->n_free_slices = p->slices_total;
    fill_stack(p->free_slices, p->slices_total);
    for (int g = 0; g < p->n_groups; g++)
        if (alloc_group(&p->groups[g], p->slices_total) != GRAFT_OK)
            return GRAFT_ENOMEM;
    return GRAFT_OK;
}

int graft__kv_pool_create(const graft__hparams *hp, uint32_t kv_type, size_t budget_bytes,
                          int32_t max_seqs, int32_t max_len, graft__kv_pool **out,
                          char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || hp == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "kv pool: NULL argument");
    *out = NULL;
    int rc = check_limits(hp, kv_type, max_seqs, max_len, errmsg);
    graft__kv_pool plan = {.type = kv_type, .max_seqs = max_seqs, .max_len = max_len,
                           .n_layer = hp->n_layer, .n_entries = graft__kv_entries_for(max_len)};
    if (rc == GRAFT_OK)
        rc = plan_memory(&plan, hp, budget_bytes, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    plan_groups(&plan, hp);
    graft__kv_pool *p = graft__malloc(sizeof *p);
    if (p != NULL)
        *p = plan;
    if (p == NULL || alloc_memory(p) != GRAFT_OK) {
        graft__kv_pool_free(p);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "kv pool: out of memory for %d slices of "
                             "%zu bytes", plan.slices_total, plan.slice_bytes);
    }
    *out = p;
    return GRAFT_OK;
}

void graft__kv_pool_free(graft__kv_pool *pool)
{
    if (pool == NULL)
        return;
    for (int32_t id = 0; pool->seqs != NULL && id < pool->max_seqs; id++)
        graft__kv_seq_close(pool, id);
    for (int g = 0; g < pool->n_groups; g++)
        graft__free(pool->groups[g].free_ids);
    graft__free(pool->seqs);
    graft__free(pool->free_slices);
    graft__free(pool->arena);
    graft__free(pool);
}

/* ---- blocks ---------------------------------------------------------------------------------- */

int32_t graft__kv_block_new(graft__kv_pool *p, int g)
{
    kv_group *gr = &p->groups[g];
    GRAFT_ASSERT(gr->n_free > 0 && p->n_free_slices >= gr->n_layers);
    int32_t b = gr->free_ids[--gr->n_free];
    for (int32_t i = 0; i < gr->n_layers; i++)
        gr->slices[(size_t)b * gr->n_layers + i] = p->free_slices[--p->n_free_slices];
    gr->refs[b] = 1;
    return b;
}

void graft__kv_block_ref(graft__kv_pool *p, int g, int32_t b)
{
    kv_group *gr = &p->groups[g];
    GRAFT_ASSERT(gr->refs[b] > 0);
    if (++gr->refs[b] == 2)
        gr->shared++;
}

void graft__kv_block_unref(graft__kv_pool *p, int g, int32_t b)
{
    kv_group *gr = &p->groups[g];
    GRAFT_ASSERT(gr->refs[b] > 0);
    int32_t left = --gr->refs[b];
    if (left == 1)
        gr->shared--;
    if (left > 0)
        return;
    for (int32_t i = gr->n_layers - 1; i >= 0; i--)
        p->free_slices[p->n_free_slices++] = gr->slices[(size_t)b * gr->n_layers + i];
    gr->free_ids[gr->n_free++] = b;
}

uint8_t *graft__kv_block_slice(const graft__kv_pool *p, int g, int32_t b, int32_t slot)
{
    const kv_group *gr = &p->groups[g];
    return p->arena + (size_t)gr->slices[(size_t)b * gr->n_layers + slot] * p->slice_bytes;
}

int32_t graft__kv_block_unshare(graft__kv_pool *p, int g, int32_t b)
{
    int32_t copy = graft__kv_block_new(p, g);
    for (int32_t i = 0; i < p->groups[g].n_layers; i++)
        memcpy(graft__kv_block_slice(p, g, copy, i), graft__kv_block_slice(p, g, b, i),
               p->slice_bytes);
    graft__kv_block_unref(p, g, b);
    p->cow_copies++;
    return copy;
}

/* ---- stats and checks ------------------------------------------------------------------------ */

void graft__kv_pool_stats(const graft__kv_pool *pool, graft__kv_stats *st)
{
    memset(st, 0, sizeof *st);
    int32_t largest = 0, used_slices = 0;
    for (int g = 0; g < pool->n_groups; g++) {
        const kv_group *gr = &pool->groups[g];
        graft__kv_group_stats *gs = &st->group[g];
        gs->sliding = gr->sliding;
        gs->window = gr->window;
        gs->n_layers = gr->n_layers;
        gs->bytes_per_block = (int64_t)gr->n_layers * (int64_t)pool->slice_bytes;
        gs->blocks_used = gr->max_blocks - gr->n_free;
        gs->blocks_shared = gr->shared;
        st->blocks_used += gs->blocks_used;
        st->blocks_shared += gs->blocks_shared;
        used_slices += (int32_t)gs->blocks_used * gr->n_layers;
        largest = gr->n_layers > largest ? gr->n_layers : largest;
    }
    st->n_groups = pool->n_groups;
    st->blocks_total = pool->slices_total / largest;
    st->blocks_free = pool->n_free_slices / largest;
    st->bytes_per_block = (int64_t)largest * (int64_t)pool->slice_bytes;
    st->slices_total = pool->slices_total;
    st->slices_free = pool->n_free_slices;
    st->bytes_total = (int64_t)pool->slices_total * (int64_t)pool->slice_bytes;
    st->bytes_used = (int64_t)used_slices * (int64_t)pool->slice_bytes;
    st->cow_copies = pool->cow_copies;
    st->sequences = pool->n_seqs;
}

/* Whether a sequence's table g has the shape kv_impl.h describes; counts its references
 * into the group's pending array. */
static bool check_table(graft__kv_pool *p, const kv_seq *s, int g)
{
    kv_group *gr = &p->groups[g];
    const int32_t end = graft__kv_entries_for(s->writable);
    bool ok = s->first[g] >= 0 && s->first[g] <= end && (gr->sliding || s->first[g] == 0);
    for (int32_t i = 0; i < p->n_entries; i++) {
        int32_t b = s->table[g][i];
        bool held = i >= s->first[g] && i < end;
        if (!held) {
            ok = ok && b == KV_NO_BLOCK;
            continue;
        }
        ok = ok && b >= 0 && b < gr->max_blocks && gr->refs[b] > 0;
        if (ok)
            gr->pending[b]++;
    }
    return ok;
}

/* Compares the recount in `pending` with the counts and free list of group g, and clears
 * the recount. */
static bool check_group(graft__kv_pool *p, int g, int32_t *slices_used)
{
    kv_group *gr = &p->groups[g];
    int32_t used = 0;
    int64_t shared = 0;
    bool ok = true;
    for (int32_t b = 0; b < gr->max_blocks; b++) {
        ok = ok && gr->pending[b] == gr->refs[b];
        used += gr->refs[b] > 0;
        shared += gr->refs[b] > 1;
        gr->pending[b] = 0;
    }
    *slices_used += used * gr->n_layers;
    return ok && shared == gr->shared && used + gr->n_free == gr->max_blocks;
}

bool graft__kv_pool_check(graft__kv_pool *pool)
{
    bool ok = true;
    int32_t open = 0, slices_used = 0;
    for (int32_t id = 0; id < pool->max_seqs; id++) {
        const kv_seq *s = pool->seqs[id];
        if (s == NULL)
            continue;
        open++;
        ok = ok && s->length >= 0 && s->length <= s->writable && s->writable <= pool->max_len;
        for (int g = 0; g < pool->n_groups; g++)
            ok = check_table(pool, s, g) && ok;
    }
    for (int g = 0; g < pool->n_groups; g++)
        ok = check_group(pool, g, &slices_used) && ok;
    return ok && open == pool->n_seqs && slices_used + pool->n_free_slices == pool->slices_total;
}
