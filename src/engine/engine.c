/*
 * engine.c: the engine's lifecycle, its thread and its command queue (graft_engine in
 * include/graft.h; the internal interface is engine.h).
 *
 * The engine thread loops: take every queued command and run them in order, then run one
 * step of the scheduler. Callbacks run inside commands and steps and may queue more
 * commands: those go to a second queue that only the engine thread touches (`local`), which
 * is run until empty before the next step, so a command queued from a callback runs before
 * the next forward pass (DESIGN.md invariant 5), even when a callback of a command queued
 * it. Commands from other threads queued meanwhile wait for the next turn, except that
 * after answering blocking commands the thread waits a bounded moment for those callers'
 * next commands (await_follow_ups), so however many threads keep queuing, every turn runs
 * a step. With nothing queued and no live generation the thread
 * sleeps on `wake`; likewise while every live generation waits for KV room (`stalled`),
 * until a command arrives, a KV wait deadline passes or a short poll finds a cancel.
 *
 * Shutdown: the caller sets `stopping` and joins the thread. The thread then drains: it
 * answers every queued command with a refusal (closes still run), settles every live
 * generation cancelled with GRAFT_ESHUTDOWN, and repeats while callbacks queue more. When
 * the queue is empty it sets `closed` under the lock (later submissions get
 * GRAFT_ESHUTDOWN at once), closes every session and ends. The caller frees the rest.
 *
 * Locking: `mu` guards head, tail, stopping, closed, paused, tap_set and blocking commands'
 * `replied` flags. The thread holds it only to take commands or to answer one; never while
 * running a command, a step or a callback.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "kernels/matmul_path.h"

enum { DEFAULT_MAX_SESSIONS = 8, DEFAULT_MAX_CONTEXT = GRAFT_ENGINE_DEFAULT_CONTEXT,
       DEFAULT_BATCH = 512, DEFAULT_KV_WAIT_MS = 10000 };
enum { MAX_SESSIONS = GRAFT_ENGINE_MAX_SESSIONS, MAX_BATCH = 65536 };

/* The engine whose thread this is (NULL on other threads). */
static _Thread_local const graft_engine *current_engine;

bool graft__engine_on_thread(const graft_engine *e)
{
    return current_engine == e;
}

int graft_engine_on_thread(const graft_engine *e)
{
    return e != NULL && graft__engine_on_thread(e);
}

graft_engine_options graft_engine_default_options(void)
{
    graft_engine_options o;
    memset(&o, 0, sizeof o);
    return o;
}

static uint32_t kv_type(const graft_engine_options *o)
{
    return o->kv_f32 ? GRAFT_TYPE_F32 : GRAFT_TYPE_F16;
}

/* Fills the zero options with defaults. */
static void resolve_defaults(const graft_model *m, graft_engine_options *o)
{
    if (o->max_sessions == 0)
        o->max_sessions = DEFAULT_MAX_SESSIONS;
    if (o->max_context == 0)
        o->max_context = m->hp.n_ctx_train < DEFAULT_MAX_CONTEXT ? m->hp.n_ctx_train
                                                                 : DEFAULT_MAX_CONTEXT;
    if (o->max_batch_tokens == 0)
        o->max_batch_tokens = DEFAULT_BATCH;
    if (o->n_threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = cpus < 1 ? 1 : cpus > GRAFT_MAX_THREADS ? GRAFT_MAX_THREADS : (int32_t)cpus;
    }
    if (o->kv_wait_ms == 0)
        o->kv_wait_ms = DEFAULT_KV_WAIT_MS;
}

/* max_sessions * (max_context + spare) positions of KV; false on overflow. */
static bool default_kv_mem(const graft_model *m, const graft_engine_options *o, size_t *bytes)
{
    size_t positions = (size_t)o->max_sessions *
                       ((size_t)o->max_context + GRAFT_ENGINE_SPARE_POSITIONS);
    return graft__mul_size(positions, graft__model_kv_bytes_per_position(&m->hp, kv_type(o)),
                           bytes);
}

size_t graft_engine_default_kv_mem(const graft_model *model, const graft_engine_options *opts)
{
    if (model == NULL)
        return 0;
    graft_engine_options o = opts ? *opts : graft_engine_default_options();
    resolve_defaults(model, &o);
    size_t bytes;
    return default_kv_mem(model, &o, &bytes) ? bytes : 0;
}

static int check_limits(const graft_model *m, graft_engine_options *o, char **errmsg)
{
    if (o->max_sessions < 1 || o->max_sessions > MAX_SESSIONS)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "engine: max_sessions %d is outside [1, %d]",
                             o->max_sessions, MAX_SESSIONS);
    if (o->max_context < 1 || o->max_context > m->hp.n_ctx_train)
        return graft__errmsg(errmsg, GRAFT_ERANGE,
                             "engine: max_context %d is outside [1, %d] (the model's context "
                             "length)", o->max_context, m->hp.n_ctx_train);
    if (o->max_batch_tokens < 1 || o->max_batch_tokens > MAX_BATCH)
        return graft__errmsg(errmsg, GRAFT_ERANGE,
                             "engine: max_batch_tokens %d is outside [1, %d]",
                             o->max_batch_tokens, MAX_BATCH);
    if (o->n_threads < 1 || o->n_threads > GRAFT_MAX_THREADS)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "engine: n_threads %d is outside [1, %d]",
                             o->n_threads, GRAFT_MAX_THREADS);
    if (o->kv_wait_ms < 0)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "engine: kv_wait_ms %d is below 0",
                             o->kv_wait_ms);
    if (o->kv_mem == 0 && !default_kv_mem(m, o, &o->kv_mem))
        return graft__errmsg(errmsg, GRAFT_ERANGE, "engine: default kv_mem overflows");
    return GRAFT_OK;
}

/* The buffers a step uses, sized from the limits. */
static int alloc_buffers(graft_engine *e)
{
    size_t rows = (size_t)e->opts.max_sessions, vocab = (size_t)e->model->hp.n_vocab, bytes;
    e->active = graft__calloc(rows, sizeof *e->active);
    e->step_gens = graft__calloc(rows, sizeof *e->step_gens);
    e->slots = graft__calloc(rows, sizeof *e->slots);
    e->entries = graft__calloc((size_t)e->opts.max_batch_tokens, sizeof *e->entries);
    if (!graft__mul_size(rows * sizeof(float), vocab, &bytes))
        return GRAFT_ENOMEM;
    e->logits = graft__malloc(bytes);
    if (!e->active || !e->step_gens || !e->slots || !e->entries || !e->logits ||
        graft__token_table_create(e->model->vocab, e->model->hp.n_vocab, &e->tokens) !=
            GRAFT_OK ||
        graft__json_mask_create(e->tokens, &e->json_mask) != GRAFT_OK ||
        graft__grammar_vocab_create(e->tokens, &e->grammar_vocab) != GRAFT_OK)
        return GRAFT_ENOMEM;
    return graft__sessions_init(e);
}

static int init_sync(graft_engine *e)
{
    if (pthread_mutex_init(&e->mu, NULL) != 0)
        return GRAFT_ENOMEM;
    if (pthread_cond_init(&e->wake, NULL) != 0) {
        pthread_mutex_destroy(&e->mu);
        return GRAFT_ENOMEM;
    }
    if (pthread_cond_init(&e->replied, NULL) != 0) {
        pthread_cond_destroy(&e->wake);
        pthread_mutex_destroy(&e->mu);
        return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

static void free_parts(graft_engine *e)
{
    graft__kv_pool_free(e->kv);
    graft__scratch_free(e->scratch);
    graft__pool_free(e->pool);
    graft__free(e->active);
    graft__free(e->step_gens);
    graft__sessions_free(e);
    graft__free(e->slots);
    graft__free(e->entries);
    graft__free(e->logits);
    graft__json_mask_free(e->json_mask);
    graft__grammar_vocab_free(e->grammar_vocab);
    graft__token_table_free(e->tokens);
    graft__free(e);
}

/* Allocates everything but the thread. */
static int build(graft_engine *e, const graft_engine_options *o, char **errmsg)
{
    const graft__hparams *hp = &e->model->hp;
    int rc = graft__kernels_select(o->kernels, &e->ex.path, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    e->opts.kernels = e->ex.path->name;
    graft__session_file_bind(e, kv_type(o));
    if (alloc_buffers(e) != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "engine: out of memory");
    rc = graft__pool_create(e->opts.n_threads, &e->pool);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, rc, "engine: cannot start %d compute threads: %s",
                             e->opts.n_threads, graft_status_str(rc));
    e->ex.pool = e->pool;
    rc = graft__model_pack(e->model, e->ex.path, e->pool, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    rc = graft__kv_pool_create(hp, kv_type(o), e->opts.kv_mem,
                               e->opts.max_sessions + 1, e->opts.max_context, &e->kv, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    e->kv_iface = graft__kv_pool_iface(e->kv);
    if (graft__scratch_create(e->model, &e->ex, e->opts.max_batch_tokens,
                              e->opts.max_context - 1, &e->scratch) != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "engine: out of memory");
    graft__kv_stats stats;
    graft__kv_pool_stats(e->kv, &stats);
    e->n_groups = stats.n_groups;
    e->kv_blocks_total = stats.blocks_total;
    return init_sync(e) == GRAFT_OK
               ? GRAFT_OK
               : graft__errmsg(errmsg, GRAFT_ENOMEM, "engine: cannot create its locks");
}

static void *engine_main(void *arg);

int graft_engine_create(const graft_model *model, const graft_engine_options *opts,
                        graft_engine **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || model == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_engine_create: NULL argument");
    *out = NULL;
    if (model->vocab_only_arch != NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "engine: the model was loaded for its tokenizer only");
    graft_engine_options o = opts ? *opts : graft_engine_default_options();
    resolve_defaults(model, &o);
    int rc = check_limits(model, &o, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    graft_engine *e = graft__calloc(1, sizeof *e);
    if (e == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "engine: out of memory");
    e->model = model;
    e->opts = o;
    e->opts.kernels = NULL;
    rc = build(e, &o, errmsg);
    if (rc == GRAFT_OK && pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        pthread_cond_destroy(&e->replied);
        pthread_cond_destroy(&e->wake);
        pthread_mutex_destroy(&e->mu);
        rc = graft__errmsg(errmsg, GRAFT_ENOMEM, "engine: cannot start the engine thread");
    }
    if (rc != GRAFT_OK) {
        free_parts(e);
        return rc;
    }
    *out = e;
    return GRAFT_OK;
}

int graft_engine_free(graft_engine *e)
{
    if (e == NULL)
        return GRAFT_OK;
    if (graft__engine_on_thread(e))
        return GRAFT_EINVAL;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->replied);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->mu);
    free_parts(e);
    return GRAFT_OK;
}

void graft_engine_get_config(const graft_engine *e, graft_engine_config *out)
{
    memset(out, 0, sizeof *out);
    out->options = e->opts;
    out->options.kernels = e->ex.path->name;
    out->kv_bytes_per_position =
        (int64_t)graft__model_kv_bytes_per_position(&e->model->hp, kv_type(&e->opts));
    out->kv_block_positions = GRAFT_KV_BLOCK_TOKENS;
    out->kv_blocks_total = e->kv_blocks_total;
    out->kv_fingerprint = e->kv_fingerprint;
}

int graft__engine_submit(graft_engine *e, graft__cmd *cmd)
{
    cmd->next = NULL;
    if (graft__engine_on_thread(e) && !e->closed_local) {
        if (e->local_tail)
            e->local_tail->next = cmd;
        else
            e->local_head = cmd;
        e->local_tail = cmd;
        return GRAFT_OK;
    }
    pthread_mutex_lock(&e->mu);
    if (e->closed) {
        pthread_mutex_unlock(&e->mu);
        return GRAFT_ESHUTDOWN;
    }
    if (e->tail)
        e->tail->next = cmd;
    else
        e->head = cmd;
    e->tail = cmd;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return GRAFT_OK;
}

int graft__engine_call(graft_engine *e, graft__cmd *cmd)
{
    if (graft__engine_on_thread(e))
        return GRAFT_EINVAL;
    cmd->replied = false;
    int rc = graft__engine_submit(e, cmd);
    if (rc != GRAFT_OK)
        return rc;
    pthread_mutex_lock(&e->mu);
    while (!cmd->replied)
        pthread_cond_wait(&e->replied, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return cmd->status;
}

void graft__engine_reply(graft_engine *e, graft__cmd *cmd, int status)
{
    e->replies_unfollowed++;
    pthread_mutex_lock(&e->mu);
    cmd->status = status;
    cmd->replied = true;
    pthread_cond_broadcast(&e->replied);
    pthread_mutex_unlock(&e->mu);
}

void graft__engine_pause(graft_engine *e, bool paused)
{
    pthread_mutex_lock(&e->mu);
    e->paused = paused;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
}

void graft__engine_set_tap(graft_engine *e, graft__logits_tap tap, void *user)
{
    pthread_mutex_lock(&e->mu);
    e->tap_set = tap;
    e->tap_set_user = user;
    pthread_mutex_unlock(&e->mu);
}

void graft__engine_set_step_hook(graft_engine *e, graft__step_hook hook, void *user)
{
    pthread_mutex_lock(&e->mu);
    e->step_hook_set = hook;
    e->step_hook_set_user = user;
    pthread_mutex_unlock(&e->mu);
}

/* Whether the thread has nothing to do now: no command, and no live generation that can
 * run (none, or all waiting for KV with no cancel pending). Under mu. */
static bool idle(const graft_engine *e)
{
    if (e->local_head != NULL)
        return false;
    if (e->paused)
        return true;
    if (e->head != NULL || e->n_active == 0)
        return e->head == NULL;
    if (!e->stalled)
        return false;
    for (int32_t i = 0; i < e->n_active; i++)
        if (atomic_load(&e->active[i]->cancel))
            return false;
    return true;
}

/* The CLOCK_REALTIME moment `ns` from now, for pthread_cond_timedwait. */
static struct timespec realtime_in(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t at = (uint64_t)ts.tv_nsec + ns % 1000000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u + at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    return ts;
}

/* When a stalled thread looks again: the earliest moment a waiting generation's kv_wait_ms
 * runs out, or STALL_POLL_MS from now if sooner (a cancel sets a flag without waking the
 * thread: the generation handle may outlive the engine, so it cannot reach the lock). */
enum { STALL_POLL_MS = 10 };
static struct timespec stall_deadline(const graft_engine *e)
{
    uint64_t first = UINT64_MAX;
    for (int32_t i = 0; i < e->n_active; i++)
        if (e->active[i]->kv_wait_since != 0 && e->active[i]->kv_wait_since < first)
            first = e->active[i]->kv_wait_since;
    uint64_t now = graft__now_ns();
    uint64_t at = first == UINT64_MAX ? now : first + (uint64_t)e->opts.kv_wait_ms * 1000000u;
    uint64_t left = at > now ? at - now : 0;
    if (left > (uint64_t)STALL_POLL_MS * 1000000u)
        left = (uint64_t)STALL_POLL_MS * 1000000u;
    return realtime_in(left + 1000000u); /* 1 ms past it */
}

/* Under mu: the test hooks as last set. */
static void pick_up_hooks(graft_engine *e)
{
    e->tap = e->tap_set;
    e->tap_user = e->tap_set_user;
    e->step_hook = e->step_hook_set;
    e->step_hook_user = e->step_hook_set_user;
}

/* Waits until there is something to do; takes the queued commands (and the test hooks).
 * Returns whether a shutdown was requested. */
static bool take_commands(graft_engine *e, graft__cmd **cmds)
{
    pthread_mutex_lock(&e->mu);
    while (!e->stopping && idle(e)) {
        if (e->stalled && !e->paused) {
            struct timespec until = stall_deadline(e);
            if (pthread_cond_timedwait(&e->wake, &e->mu, &until) != 0)
                break; /* a deadline: the step fails the generation that waited too long */
        } else {
            pthread_cond_wait(&e->wake, &e->mu);
        }
    }
    *cmds = e->head;
    e->head = e->tail = NULL;
    pick_up_hooks(e);
    bool stop = e->stopping;
    pthread_mutex_unlock(&e->mu);
    return stop;
}


/* Runs a command, or answers it with a refusal when draining. */
static void run_command(graft_engine *e, graft__cmd *cmd)
{
    switch (cmd->kind) {
    case GRAFT__CMD_OPEN:
        graft__session_run_open(e, cmd);
        break;
    case GRAFT__CMD_CLOSE:
        graft__session_run_close(e, cmd);
        break;
    case GRAFT__CMD_CLONE:
        graft__session_run_clone(e, cmd);
        break;
    case GRAFT__CMD_GENERATE:
        graft__gen_admit(e, cmd->u.gen);
        break;
    case GRAFT__CMD_PROBE:
        graft__session_run_probe(e, cmd);
        break;
    case GRAFT__CMD_METRICS:
        graft__metrics_fill(e, cmd->u.metrics);
        graft__engine_reply(e, cmd, GRAFT_OK);
        break;
    case GRAFT__CMD_RETAINED:
        graft__session_run_retained(e, cmd);
        break;
    case GRAFT__CMD_TOKENS:
        graft__session_run_tokens(e, cmd);
        break;
    case GRAFT__CMD_EXCLUSIVE:
        graft__accounting_run_exclusive(e, cmd);
        break;
    case GRAFT__CMD_RECLAIM:
        graft__accounting_run_reclaim(e, cmd);
        break;
    case GRAFT__CMD_SAVE:
    case GRAFT__CMD_LOAD:
        graft__session_run_file(e, cmd);
        break;
    }
}

/* Runs a list of commands in order (each may free itself). */
static void run_commands(graft_engine *e, graft__cmd *cmd)
{
    while (cmd != NULL) {
        graft__cmd *next = cmd->next;
        run_command(e, cmd);
        cmd = next;
    }
}

/* Runs the commands callbacks queued, and those their callbacks queue, until none is left. */
static void run_local(graft_engine *e)
{
    while (e->local_head != NULL) {
        graft__cmd *cmds = e->local_head;
        e->local_head = e->local_tail = NULL;
        run_commands(e, cmds);
    }
}

/* Takes whatever is queued without waiting; when nothing is queued and no generation is
 * live, closes the queue. Returns the commands taken. */
static graft__cmd *take_or_close(graft_engine *e)
{
    pthread_mutex_lock(&e->mu);
    graft__cmd *cmds = e->head;
    e->head = e->tail = NULL;
    if (cmds == NULL && e->n_active == 0) {
        e->closed = true;
        e->closed_local = true;
    }
    pthread_mutex_unlock(&e->mu);
    return cmds;
}

static void drain(graft_engine *e, graft__cmd *cmds)
{
    e->draining = true;
    for (;;) {
        run_local(e);
        run_commands(e, cmds);
        run_local(e);
        while (e->n_active > 0)
            graft__gen_settle(e, e->active[0], GRAFT_FINISH_CANCELLED, GRAFT_ESHUTDOWN,
                              "the engine is shutting down");
        run_local(e);
        cmds = take_or_close(e);
        if (cmds == NULL && e->n_active == 0)
            break;
    }
    while (e->sessions != NULL)
        graft__session_close_now(e, e->sessions);
    graft__accounting_free_hooks(e);
}

/* Waits, while generations are live, for the commands that callers answered since the last
 * step send next, and runs them (and what they queue) as they come; returns after as many
 * commands as answers, FOLLOW_UP_GRACE_US after the first wait, or on shutdown or pause.
 * A caller answered between two steps (a session opened or cloned for a new request)
 * usually queues its generation within microseconds; had the step started at once, that
 * generation would wait the whole step before its first, so each round trip a request
 * makes would cost it a step of latency. The bound keeps an answered caller that sends
 * nothing from delaying the live generations by more than that. */
enum { FOLLOW_UP_GRACE_US = 1000 };
static void await_follow_ups(graft_engine *e)
{
    if (e->replies_unfollowed == 0)
        return;
    struct timespec until = realtime_in((uint64_t)FOLLOW_UP_GRACE_US * 1000u);
    while (e->replies_unfollowed > 0 && e->n_active > 0) {
        pthread_mutex_lock(&e->mu);
        while (e->head == NULL && !e->stopping && !e->paused)
            if (pthread_cond_timedwait(&e->wake, &e->mu, &until) != 0)
                break;
        graft__cmd *cmds = e->stopping || e->paused ? NULL : e->head;
        if (cmds != NULL)
            e->head = e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        if (cmds == NULL)
            break;
        for (graft__cmd *c = cmds; c != NULL && e->replies_unfollowed > 0; c = c->next)
            e->replies_unfollowed--;
        run_commands(e, cmds);
        run_local(e);
    }
    e->replies_unfollowed = 0;
}

static void *engine_main(void *arg)
{
    graft_engine *e = arg;
    current_engine = e;
    for (;;) {
        graft__cmd *cmds;
        if (take_commands(e, &cmds)) {
            drain(e, cmds);
            break;
        }
        run_local(e); /* queued by the last step's callbacks */
        run_commands(e, cmds);
        run_local(e);
        await_follow_ups(e);
        graft__sched_step(e);
    }
    current_engine = NULL;
    return NULL;
}
