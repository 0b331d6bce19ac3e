/*
 * scheduler.c: one step of continuous batching (engine thread only).
 *
 * A step is one forward pass over a batch built from every live generation:
 *   1. Generations whose cancel flag is set settle first (cancel takes effect within one
 *      step).
 *   2. Decode first: each generation with a sampled token not yet fed back contributes that
 *      one token (with logits), starting from a rotating cursor so that a budget smaller
 *      than the number of decoders serves them in turn.
 *   3. Chunked prefill: the remaining budget (max_batch_tokens) goes to prompts in arrival
 *      order; a chunk asks for logits only when it ends its prompt.
 *   KV room is budgeted as the batch is built: each slot is charged a conservative count of
 *   the blocks its positions may need (every block its positions touch, in every layer
 *   group, the first one in case it is shared and must be copied). A slot that does not fit
 *   waits for a later step, or a prompt chunk is shortened, unless the batch is still empty:
 *   then it runs and the pool decides.
 * After the forward pass each slot's tokens are committed to its session and the
 * generations that got logits sample (graft__gen_deliver). If the forward pass fails, only
 * the generations of this batch fail; their sessions keep their committed position.
 */
#include "engine/engine.h"

typedef struct plan {
    int32_t n_entries, n_slots, n_rows;
    int64_t free_blocks;
} plan;

/* The most blocks writing positions [from, from + n) may take. */
static int64_t blocks_needed(const graft_engine *e, int32_t from, int32_t n)
{
    int64_t spanned = (from + n - 1) / GRAFT_KV_BLOCK_TOKENS - from / GRAFT_KV_BLOCK_TOKENS + 1;
    return spanned * e->n_groups;
}

static void add_slot(graft_engine *e, plan *p, graft_generation *gen, const int32_t *tokens,
                     int32_t count, bool logits)
{
    graft__slot *slot = &e->slots[p->n_slots++];
    int32_t position = atomic_load(&gen->session->position);
    slot->gen = gen;
    slot->first = p->n_entries;
    slot->count = count;
    slot->row = logits ? p->n_rows++ : -1;
    for (int32_t i = 0; i < count; i++)
        e->entries[p->n_entries++] = (graft__batch_entry){
            gen->session->seq, position + i, tokens[i], logits && i == count - 1};
    p->free_blocks -= blocks_needed(e, position, count);
}

static void plan_decodes(graft_engine *e, plan *p)
{
    int32_t n = e->n_active, taken = 0;
    for (int32_t k = 0; k < n && p->n_entries < e->opts.max_batch_tokens; k++) {
        graft_generation *gen = e->active[(e->decode_cursor + k) % n];
        if (!gen->has_pending)
            continue;
        int32_t position = atomic_load(&gen->session->position);
        if (blocks_needed(e, position, 1) > p->free_blocks && p->n_slots > 0)
            continue;
        add_slot(e, p, gen, &gen->out[gen->n_out - 1], 1, true);
        taken++;
    }
    e->decode_cursor = n > 0 ? (e->decode_cursor + taken) % n : 0;
}

/* How many of `count` prompt tokens at `position` fit in the KV room left. */
static int32_t fit_chunk(const graft_engine *e, const plan *p, int32_t position, int32_t count)
{
    if (blocks_needed(e, position, count) <= p->free_blocks)
        return count;
    int64_t per_group = p->free_blocks / e->n_groups;
    if (per_group > 0) {
        int64_t end = (position / GRAFT_KV_BLOCK_TOKENS + per_group) * GRAFT_KV_BLOCK_TOKENS;
        return (int32_t)(end - position < count ? end - position : count);
    }
    if (p->n_slots > 0)
        return 0;
    int32_t in_block = GRAFT_KV_BLOCK_TOKENS - position % GRAFT_KV_BLOCK_TOKENS;
    return in_block < count ? in_block : count;
}

static void plan_prefills(graft_engine *e, plan *p)
{
    for (int32_t i = 0; i < e->n_active; i++) {
        graft_generation *gen = e->active[i];
        int32_t left = e->opts.max_batch_tokens - p->n_entries;
        if (left == 0)
            break;
        if (gen->has_pending || gen->n_fed == gen->n_prompt)
            continue;
        int32_t count = gen->n_prompt - gen->n_fed < left ? gen->n_prompt - gen->n_fed : left;
        count = fit_chunk(e, p, atomic_load(&gen->session->position), count);
        if (count > 0)
            add_slot(e, p, gen, gen->prompt + gen->n_fed, count,
                     gen->n_fed + count == gen->n_prompt);
    }
}

static void settle_cancelled(graft_engine *e)
{
    for (int32_t i = 0; i < e->n_active;) {
        graft_generation *gen = e->active[i];
        if (atomic_load(&gen->cancel))
            graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED, "cancelled");
        else
            i++;
    }
}

/* Forgets the KV a failed step reserved beyond the session's committed position. */
static void rollback(graft_engine *e, graft_session *s)
{
    (void)graft__kv_seq_truncate(e->kv, s->seq, atomic_load(&s->position));
}

static void fail_step(graft_engine *e, const plan *p, int rc, const char *errmsg)
{
    char message[256];
    snprintf(message, sizeof message, "step failed: %s",
             errmsg != NULL ? errmsg : graft_status_str(rc));
    e->counters.step_failures++;
    for (int32_t i = 0; i < p->n_slots; i++) {
        graft_generation *gen = e->slots[i].gen;
        rollback(e, gen->session);
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, rc, message);
    }
}

/* Commits a slot's tokens and advances its generation (`started`: when the step's forward
 * pass began); false when that failed (the generation is settled). */
static bool commit_slot(graft_engine *e, const graft__slot *slot, uint64_t started)
{
    graft_generation *gen = slot->gen;
    int rc = graft__session_commit(e, gen->session, &e->entries[slot->first], slot->count);
    if (rc != GRAFT_OK) {
        rollback(e, gen->session);
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, rc, "cannot commit the step's KV");
        return false;
    }
    if (gen->has_pending) {
        gen->has_pending = false;
        e->counters.decode_tokens++;
        graft__gen_note_step(gen, started, 0);
    } else {
        gen->n_fed += slot->count;
        e->counters.prefill_tokens += (uint64_t)slot->count;
        graft__gen_note_step(gen, started, slot->count);
    }
    return true;
}

static void finish_step(graft_engine *e, const plan *p, uint64_t started)
{
    const size_t n_vocab = (size_t)e->model->hp.n_vocab;
    for (int32_t i = 0; i < p->n_slots; i++) {
        const graft__slot *slot = &e->slots[i];
        if (commit_slot(e, slot, started) && slot->row >= 0)
            graft__gen_deliver(e, slot->gen, e->logits + (size_t)slot->row * n_vocab);
    }
}

static void count_step(graft_engine *e, const plan *p)
{
    e->counters.steps++;
    e->counters.batch_tokens += (uint64_t)p->n_entries;
    e->counters.batch_generations += (uint64_t)p->n_slots;
    if (p->n_entries > e->counters.batch_tokens_max)
        e->counters.batch_tokens_max = p->n_entries;
}

void graft__sched_step(graft_engine *e)
{
    settle_cancelled(e);
    if (e->n_active == 0)
        return;
    graft__kv_stats stats;
    graft__kv_pool_stats(e->kv, &stats);
    plan p = {0, 0, 0, stats.blocks_free};
    plan_decodes(e, &p);
    plan_prefills(e, &p);
    if (p.n_entries == 0)
        return;
    char *errmsg = NULL;
    uint64_t started = graft__now_ns();
    int rc = graft__forward_in(e->model, e->scratch, &e->kv_iface, e->entries, p.n_entries,
                               e->logits, &errmsg);
    count_step(e, &p);
    if (rc != GRAFT_OK)
        fail_step(e, &p, rc, errmsg);
    else
        finish_step(e, &p, started);
    graft__free(errmsg);
}
