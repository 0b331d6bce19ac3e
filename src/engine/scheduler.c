/*
 * scheduler.c: one step of continuous batching (engine thread only).
 *
 * A step is one forward pass over a batch built from every live generation:
 *   1. Generations whose cancel flag is set settle first (cancel takes effect within one
 *      step); generations that waited kv_wait_ms for KV room, or that could never fit in the
 *      pool, fail with GRAFT_ECAPACITY.
 *   2. Decode first: each generation with a sampled token not yet fed back contributes that
 *      one token (with logits), starting from a rotating cursor so that a budget smaller
 *      than the number of decoders serves them in turn.
 *   3. Chunked prefill: the remaining budget (max_batch_tokens) goes to prompts in arrival
 *      order; a chunk asks for logits only when it ends its prompt and a token is to be
 *      sampled, or for every token when the prompt's log-probabilities are asked for: then
 *      the logits rows left (one per session, one kept for each prompt after it) bound its
 *      length.
 *
 * KV room (DESIGN.md invariant 4). Each slot is charged exactly the slices its positions take
 * now (graft__kv_seq_write_slices: a fresh block where the session has none, a copy where it
 * shares one; nothing for a position inside a block it owns alone). A generation starts, that
 * is takes its first step, only when everything it may still write fits in the free slices
 * beyond what the generations already started may still write (their reservations, counted
 * afresh each step from their sessions' tables); so a started generation always finds its
 * blocks, and generations that started cannot deadlock each other by each holding half of
 * the pool. A generation that cannot start waits, in arrival order (no later one starts
 * before it), and the engine asks the reclaim hooks for the KV it lacks; a hook closes
 * sessions (cache snapshots), whose closes run before the next step. A reservation can fall
 * short when a clone starts sharing a started generation's last block (its next write then
 * copies it): that generation waits too, under the same bound. When every live generation
 * waits the engine thread sleeps (`stalled`, engine.c) until a command arrives, a deadline
 * passes or a poll finds a cancel.
 *
 * After the forward pass each slot's tokens are committed to its session and the
 * generations that got logits sample (graft__gen_deliver). If the forward pass fails, only
 * the generations of this batch end (failed, or cancelled when their cancel flag is set);
 * their sessions keep their committed position.
 */
#include "engine/engine.h"

typedef struct plan {
    int32_t n_entries, n_slots, n_rows;
    int64_t free_slices;  /* slices left for this step's writes */
    int64_t headroom;     /* free slices beyond every started generation's reservation */
    int64_t short_slices; /* what the first generation that waits for KV lacks */
    bool start_blocked;   /* a generation waits to start: later ones may not start */
} plan;

/* One past the last position gen may still write: its committed position plus the rest of
 * its prompt, its pending token and every token it may still sample, capped at max_context. */
static int32_t write_end(const graft_engine *e, const graft_generation *gen)
{
    int64_t end = atomic_load(&gen->session->position);
    end += gen->n_prompt - gen->n_fed + (gen->has_pending ? 1 : 0);
    if (!gen->prefill_only)
        end += (gen->max_new > 0 ? gen->max_new : e->opts.max_context) - gen->n_out;
    return end < e->opts.max_context ? (int32_t)end : e->opts.max_context;
}

/* The slices gen may still take: its reservation. */
static int64_t reservation(const graft_engine *e, const graft_generation *gen)
{
    int32_t position = atomic_load(&gen->session->position);
    return graft__kv_seq_write_slices(e->kv, gen->session->seq, position,
                                      write_end(e, gen) - position);
}

/* gen's slot: `count` tokens from prompt index fed_from (-1: a sampled token), those from
 * index rows_from on with logits. */
static void add_slot(graft_engine *e, plan *p, graft_generation *gen, const int32_t *tokens,
                     int32_t count, int32_t fed_from, int32_t rows_from, int64_t slices)
{
    graft__slot *slot = &e->slots[p->n_slots++];
    int32_t position = atomic_load(&gen->session->position);
    slot->gen = gen;
    slot->first = p->n_entries;
    slot->count = count;
    slot->fed_from = fed_from;
    slot->row = rows_from < count ? p->n_rows : -1;
    p->n_rows += count - rows_from;
    for (int32_t i = 0; i < count; i++)
        e->entries[p->n_entries++] = (graft__batch_entry){
            gen->session->seq, position + i, tokens[i], i >= rows_from};
    p->free_slices -= slices;
    gen->kv_wait_since = 0;
}

/* gen gets no KV this step: it waits (from now, if it was not waiting). */
static void note_wait(graft_engine *e, plan *p, graft_generation *gen, int64_t lacking)
{
    if (gen->kv_wait_since == 0) {
        gen->kv_wait_since = graft__now_ns();
        e->counters.kv_waits++;
    }
    if (p->short_slices == 0)
        p->short_slices = lacking;
}

static void plan_decodes(graft_engine *e, plan *p)
{
    int32_t n = e->n_active, taken = 0;
    for (int32_t k = 0; k < n && p->n_entries < e->opts.max_batch_tokens; k++) {
        graft_generation *gen = e->active[(e->decode_cursor + k) % n];
        if (!gen->has_pending)
            continue;
        int32_t position = atomic_load(&gen->session->position);
        int64_t slices = graft__kv_seq_write_slices(e->kv, gen->session->seq, position, 1);
        if (slices > p->free_slices) {
            note_wait(e, p, gen, slices - p->free_slices);
            continue;
        }
        add_slot(e, p, gen, &gen->out[gen->n_out - 1], 1, -1, 0, slices);
        taken++;
    }
    e->decode_cursor = n > 0 ? (e->decode_cursor + taken) % n : 0;
}

/* The longest prefix of `count` prompt tokens at `position` whose slices fit in p's free
 * slices: all of them, or a prefix ending at a block edge; *slices receives its cost. */
static int32_t fit_chunk(const graft_engine *e, const plan *p, const graft_generation *gen,
                         int32_t position, int32_t count, int64_t *slices)
{
    int32_t seq = gen->session->seq;
    *slices = graft__kv_seq_write_slices(e->kv, seq, position, count);
    if (*slices <= p->free_slices)
        return count;
    for (int32_t end = (position + count - 1) / GRAFT_KV_BLOCK_TOKENS * GRAFT_KV_BLOCK_TOKENS;
         end > position; end -= GRAFT_KV_BLOCK_TOKENS) {
        *slices = graft__kv_seq_write_slices(e->kv, seq, position, end - position);
        if (*slices <= p->free_slices)
            return end - position;
    }
    *slices = 0;
    return 0;
}

/* A generation that has not started takes its reservation out of the headroom, or waits. */
static bool try_start(graft_engine *e, plan *p, graft_generation *gen)
{
    if (p->start_blocked)
        return false;
    int64_t need = reservation(e, gen);
    if (need > p->headroom) {
        p->start_blocked = true;
        note_wait(e, p, gen, need - p->headroom);
        return false;
    }
    p->headroom -= need;
    gen->started = true;
    if (gen->kv_wait_since != 0) {
        pthread_mutex_lock(&gen->mu);
        gen->metrics.kv_wait_ns = graft__now_ns() - gen->kv_wait_since;
        pthread_mutex_unlock(&gen->mu);
    }
    return true;
}

/* The entry of a prompt chunk of `count` tokens from which it asks for logits (count:
 * none): every entry with prompt_logprobs, else the last one when it ends the prompt and a
 * token is to be sampled. */
static int32_t rows_from(const graft_generation *gen, int32_t count)
{
    if (gen->prompt_logprobs != NULL)
        return 0;
    bool ends = gen->n_fed + count == gen->n_prompt;
    return ends && !gen->prefill_only ? count - 1 : count;
}

/* The generations after active[i] still feeding their prompts: each may need a logits row
 * this step (those sampling have theirs from plan_decodes). */
static int32_t prompts_after(const graft_engine *e, int32_t i)
{
    int32_t n = 0;
    for (int32_t k = i + 1; k < e->n_active; k++)
        n += !e->active[k]->has_pending && e->active[k]->n_fed < e->active[k]->n_prompt;
    return n;
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
        if (gen->prompt_logprobs != NULL) {
            int32_t rows = e->opts.max_sessions - p->n_rows - prompts_after(e, i);
            left = rows < left ? rows : left;
        }
        if (left <= 0) { /* no logits row left: it waits, and so do later starts */
            p->start_blocked = p->start_blocked || !gen->started;
            continue;
        }
        if (!gen->started && !try_start(e, p, gen))
            continue;
        int32_t position = atomic_load(&gen->session->position);
        int32_t count = gen->n_prompt - gen->n_fed < left ? gen->n_prompt - gen->n_fed : left;
        int64_t slices;
        count = fit_chunk(e, p, gen, position, count, &slices);
        if (count > 0)
            add_slot(e, p, gen, gen->prompt + gen->n_fed, count, gen->n_fed,
                     rows_from(gen, count), slices);
        else
            note_wait(e, p, gen, graft__kv_seq_write_slices(e->kv, gen->session->seq,
                                                            position, 1) - p->free_slices);
    }
}

/* Settles, before planning, the generations cancelled, those that waited kv_wait_ms for KV,
 * and those that could never fit: more than the whole pool with what their session holds. */
static void settle_unrunnable(graft_engine *e, int64_t slices_total)
{
    const uint64_t now = graft__now_ns(), bound = (uint64_t)e->opts.kv_wait_ms * 1000000u;
    char message[200];
    for (int32_t i = 0; i < e->n_active;) {
        graft_generation *gen = e->active[i];
        if (atomic_load(&gen->cancel)) {
            graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED, "cancelled");
            continue;
        }
        int64_t held = graft__kv_seq_held_slices(e->kv, gen->session->seq);
        int64_t need = gen->started ? 0 : reservation(e, gen) + held;
        if (need > slices_total) {
            snprintf(message, sizeof message,
                     "KV room: positions up to %d take %lld KV slices (the session holds %lld "
                     "of them); the pool has %lld in all (kv_mem)", write_end(e, gen),
                     (long long)need, (long long)held, (long long)slices_total);
        } else if (gen->kv_wait_since != 0 && now - gen->kv_wait_since > bound) {
            snprintf(message, sizeof message,
                     "KV room: none for this generation within kv_wait_ms (%d ms)",
                     e->opts.kv_wait_ms);
        } else {
            i++;
            continue;
        }
        e->counters.kv_wait_failures++;
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, GRAFT_ECAPACITY, message);
    }
}

/* Forgets the KV a failed step reserved beyond the session's committed position. */
static void rollback(graft_engine *e, graft_session *s)
{
    (void)graft__kv_seq_truncate(e->kv, s->seq, atomic_load(&s->position));
}

/* Ends a generation whose step failed: cancelled if it was asked to stop meanwhile. */
static void settle_failed(graft_engine *e, graft_generation *gen, int rc, const char *message)
{
    rollback(e, gen->session);
    if (atomic_load(&gen->cancel))
        graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED, "cancelled");
    else
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, rc, message);
}

static void fail_step(graft_engine *e, const plan *p, int rc, const char *errmsg)
{
    char message[256];
    snprintf(message, sizeof message, "step failed: %s",
             errmsg != NULL ? errmsg : graft_status_str(rc));
    e->counters.step_failures++;
    for (int32_t i = 0; i < p->n_slots; i++)
        settle_failed(e, e->slots[i].gen, rc, message);
}

/* Commits a slot's tokens and advances its generation (`started`: when the step's forward
 * pass began); false when that failed (the generation is settled). */
static bool commit_slot(graft_engine *e, const graft__slot *slot, uint64_t started)
{
    graft_generation *gen = slot->gen;
    int rc = graft__session_commit(e, gen->session, &e->entries[slot->first], slot->count);
    if (rc != GRAFT_OK) {
        settle_failed(e, gen, rc, "cannot commit the step's KV");
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
        if (!commit_slot(e, slot, started))
            continue;
        float *rows = slot->row >= 0 ? e->logits + (size_t)slot->row * n_vocab : NULL;
        if (slot->fed_from < 0)
            graft__gen_deliver(e, slot->gen, rows);
        else
            graft__gen_prompt_fed(e, slot->gen, slot->fed_from, slot->count, rows);
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

/* The test hook's verdict on the planned step (GRAFT_OK without a hook). */
static int run_step_hook(graft_engine *e, const plan *p)
{
    if (e->step_hook == NULL)
        return GRAFT_OK;
    for (int32_t i = 0; i < p->n_slots; i++)
        e->step_gens[i] = e->slots[i].gen;
    return e->step_hook(e, e->step_gens, p->n_slots, e->step_hook_user);
}

/* Plans the step's batch: reservations, decodes, prefills. */
static void plan_step(graft_engine *e, plan *p, const graft__kv_stats *stats)
{
    int64_t reserved = 0;
    for (int32_t i = 0; i < e->n_active; i++)
        if (e->active[i]->started)
            reserved += reservation(e, e->active[i]);
    *p = (plan){.free_slices = stats->slices_free, .headroom = stats->slices_free - reserved};
    plan_decodes(e, p);
    plan_prefills(e, p);
}

void graft__sched_step(graft_engine *e)
{
    graft__kv_stats stats;
    graft__kv_pool_stats(e->kv, &stats);
    settle_unrunnable(e, stats.slices_total);
    e->stalled = false;
    if (e->n_active == 0)
        return;
    plan p;
    plan_step(e, &p, &stats);
    if (p.short_slices > 0)
        graft__accounting_reclaim(e, p.short_slices * (stats.bytes_total / stats.slices_total));
    if (p.n_entries == 0) {
        e->stalled = true;
        return;
    }
    char *errmsg = NULL;
    uint64_t started = graft__now_ns();
    int rc = run_step_hook(e, &p);
    if (rc == GRAFT_OK)
        rc = graft__forward_in(e->model, e->scratch, &e->kv_iface, e->entries, p.n_entries,
                               e->logits, &errmsg);
    count_step(e, &p);
    if (rc != GRAFT_OK)
        fail_step(e, &p, rc, errmsg);
    else
        finish_step(e, &p, started);
    graft__free(errmsg);
}
