/*
 * engine.c: the engine's lifecycle, its thread and its command queue (graft_engine in
 * include/graft.h; the internal interface is engine.h).
 *
 * The engine thread loops: take every queued command, run them in order, then run one step
 * of the scheduler. Callbacks run inside commands and steps and may queue more commands;
 * those are taken at the top of the next turn, so they run before the next forward pass
 * (DESIGN.md invariant 5). With nothing queued and no live generation the thread sleeps on
 * `wake`.
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
#include <unistd.h>

#include "engine/engine.h"
#include "kernels/matmul_path.h"

enum { DEFAULT_MAX_SESSIONS = 8, DEFAULT_MAX_CONTEXT = 4096, DEFAULT_BATCH = 512 };
enum { MAX_SESSIONS = 4096, MAX_BATCH = 65536 };

/* The engine whose thread this is (NULL on other threads). */
static _Thread_local const graft_engine *current_engine;

bool graft__engine_on_thread(const graft_engine *e)
{
    return current_engine == e;
}

graft_engine_options graft_engine_default_options(void)
{
    graft_engine_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* KV bytes of one position over all layers (both K and V). */
static size_t kv_bytes_per_position(const graft__hparams *hp, bool f32)
{
    size_t elem = f32 ? 4 : 2;
    size_t row = (size_t)hp->n_head_kv * (size_t)(hp->head_dim + hp->head_dim_v) * elem;
    return row * (size_t)hp->n_layer;
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
    if (o->kv_mem == 0) {
        size_t positions = (size_t)o->max_sessions * (size_t)o->max_context;
        size_t spare = (size_t)o->max_sessions * 2 * GRAFT_KV_BLOCK_TOKENS;
        if (!graft__mul_size(positions + spare, kv_bytes_per_position(&m->hp, o->kv_f32),
                             &o->kv_mem))
            return graft__errmsg(errmsg, GRAFT_ERANGE, "engine: default kv_mem overflows");
    }
    return GRAFT_OK;
}

/* The buffers a step uses, sized from the limits. */
static int alloc_buffers(graft_engine *e)
{
    size_t rows = (size_t)e->opts.max_sessions, vocab = (size_t)e->model->hp.n_vocab, bytes;
    e->active = graft__calloc(rows, sizeof *e->active);
    e->slots = graft__calloc(rows, sizeof *e->slots);
    e->entries = graft__calloc((size_t)e->opts.max_batch_tokens, sizeof *e->entries);
    if (!graft__mul_size(rows * sizeof(float), vocab, &bytes))
        return GRAFT_ENOMEM;
    e->logits = graft__malloc(bytes);
    return e->active && e->slots && e->entries && e->logits ? GRAFT_OK : GRAFT_ENOMEM;
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
    graft__free(e->slots);
    graft__free(e->entries);
    graft__free(e->logits);
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
    rc = graft__kv_pool_create(hp, o->kv_f32 ? GRAFT_TYPE_F32 : GRAFT_TYPE_F16, e->opts.kv_mem,
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

int graft_engine_shutdown(graft_engine *e)
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

int graft__engine_submit(graft_engine *e, graft__cmd *cmd)
{
    cmd->next = NULL;
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

/* Waits until there is something to do; takes the queued commands (and the test hook's
 * tap). Returns whether a shutdown was requested. */
static bool take_commands(graft_engine *e, graft__cmd **cmds)
{
    pthread_mutex_lock(&e->mu);
    while (!e->stopping && (e->paused || (e->head == NULL && e->n_active == 0)))
        pthread_cond_wait(&e->wake, &e->mu);
    *cmds = e->head;
    e->head = e->tail = NULL;
    e->tap = e->tap_set;
    e->tap_user = e->tap_set_user;
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
        graft__session_run_close(e, cmd->session);
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
    case GRAFT__CMD_EXCLUSIVE:
        graft__accounting_run_exclusive(e, cmd);
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

/* Takes whatever is queued without waiting; when nothing is queued and no generation is
 * live, closes the queue. Returns the commands taken. */
static graft__cmd *take_or_close(graft_engine *e)
{
    pthread_mutex_lock(&e->mu);
    graft__cmd *cmds = e->head;
    e->head = e->tail = NULL;
    if (cmds == NULL && e->n_active == 0)
        e->closed = true;
    pthread_mutex_unlock(&e->mu);
    return cmds;
}

static void drain(graft_engine *e, graft__cmd *cmds)
{
    e->draining = true;
    for (;;) {
        run_commands(e, cmds);
        while (e->n_active > 0)
            graft__gen_settle(e, e->active[0], GRAFT_FINISH_CANCELLED, GRAFT_ESHUTDOWN,
                              "the engine is shutting down");
        cmds = take_or_close(e);
        if (cmds == NULL && e->n_active == 0)
            break;
    }
    while (e->sessions != NULL)
        graft__session_run_close(e, e->sessions);
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
        run_commands(e, cmds);
        graft__sched_step(e);
    }
    current_engine = NULL;
    return NULL;
}
