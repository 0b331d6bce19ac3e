/*
 * session.c: sessions (graft_session in include/graft.h): open, close, clone, position, and
 * the probe test hook.
 *
 * A session is a KV sequence of the engine's pool plus the committed token history that the
 * sequence holds the KV of. The public functions only build commands and queue them; the
 * graft__session_run_* functions run them on the engine thread, which alone touches a
 * session's fields (its `position` is an atomic so other threads may read it).
 *
 * Identity: every session opened or cloned gets the next id of the engine's counter (engine
 * thread), before its handle is handed out; ids are never reused, so a handle whose memory
 * was freed and reused cannot be mistaken for the session it was. Commands carry the id and
 * find the session when they run (session_table.c): one queued behind the session's close is
 * answered GRAFT_ECLOSED.
 *
 * Clone: the boundary is chosen when the command runs, the longest in the requested range
 * that the source has committed and retains; the new session takes references to the
 * source's KV blocks for [0, boundary) through graft__kv_seq_clone (no KV bytes copied) and a
 * copy of the history. Every check is made before anything changes; the source is never
 * modified. The blocking form is the async one with a callback that hands the result to the
 * waiting thread under the engine's lock.
 *
 * Locking: none here beyond engine.c's queue (graft__engine_submit / _call / _reply).
 */
#include <string.h>

#include "engine/engine.h"

/* A session with no KV sequence yet (seq -1). */
static graft_session *session_new(graft_engine *e)
{
    graft_session *s = graft__calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->tokens = graft__malloc((size_t)e->opts.max_context * sizeof *s->tokens);
    if (s->tokens == NULL) {
        graft__free(s);
        return NULL;
    }
    s->engine = e;
    s->seq = -1;
    atomic_init(&s->position, 0);
    return s;
}

static void session_free(graft_session *s)
{
    graft__free(s->tokens);
    graft__free(s);
}

static void session_link(graft_engine *e, graft_session *s)
{
    s->prev = NULL;
    s->next = e->sessions;
    if (e->sessions)
        e->sessions->prev = s;
    e->sessions = s;
    e->n_sessions++;
}

static void session_unlink(graft_engine *e, graft_session *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        e->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    e->n_sessions--;
}

/* Gives s the next id and makes it findable. */
static void session_register(graft_engine *e, graft_session *s)
{
    s->id = ++e->last_session_id;
    session_link(e, s);
    graft__sessions_put(e, s);
}

/* The open session a command is about, or NULL when it was closed. */
static graft_session *cmd_session(graft_engine *e, const graft__cmd *cmd)
{
    return graft__sessions_find(e, cmd->session_id);
}

void graft__session_run_open(graft_engine *e, graft__cmd *cmd)
{
    graft_session *s = cmd->u.open;
    int rc = GRAFT_OK;
    if (e->draining)
        rc = GRAFT_ESHUTDOWN;
    else if (e->n_sessions >= e->opts.max_sessions)
        rc = GRAFT_ECAPACITY;
    else
        rc = graft__kv_seq_open(e->kv, &s->seq);
    if (rc == GRAFT_OK)
        session_register(e, s);
    graft__engine_reply(e, cmd, rc);
}

int graft_session_open(graft_engine *e, graft_session **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || e == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_session_open: NULL argument");
    *out = NULL;
    if (graft__engine_on_thread(e))
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_session_open: called from a callback");
    graft_session *s = session_new(e);
    if (s == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "session: out of memory");
    graft__cmd cmd = {.kind = GRAFT__CMD_OPEN, .u.open = s};
    int rc = graft__engine_call(e, &cmd);
    if (rc != GRAFT_OK) {
        session_free(s);
        if (rc == GRAFT_ECAPACITY)
            return graft__errmsg(errmsg, rc, "session: %d sessions are open (max_sessions)",
                                 e->opts.max_sessions);
        return graft__errmsg(errmsg, rc, "session: cannot open: %s", graft_status_str(rc));
    }
    *out = s;
    return GRAFT_OK;
}

void graft__session_close_now(graft_engine *e, graft_session *s)
{
    if (s->gen != NULL)
        graft__gen_settle(e, s->gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED,
                          "the session was closed");
    graft__kv_seq_close(e->kv, s->seq);
    session_unlink(e, s);
    graft__sessions_remove(e, s);
    session_free(s);
}

/* The command is the session's own close_cmd: closing frees it too (run_commands has read
 * its `next` already). A second close of one session finds nothing. */
void graft__session_run_close(graft_engine *e, graft__cmd *cmd)
{
    graft_session *s = cmd_session(e, cmd);
    if (s != NULL)
        graft__session_close_now(e, s);
}

void graft_session_close(graft_session *s)
{
    if (s == NULL)
        return;
    s->close_cmd = (graft__cmd){.kind = GRAFT__CMD_CLOSE, .session_id = s->id};
    (void)graft__engine_submit(s->engine, &s->close_cmd);
}

int32_t graft_session_position(const graft_session *s)
{
    return atomic_load(&s->position);
}

uint64_t graft_session_id(const graft_session *s)
{
    return s->id;
}

/* Engine thread: the longest b <= upto at which a clone of s keeps its sliding window
 * (0 always does). Scans down from upto: O(upto) checks of O(groups), no allocation. */
void graft__session_run_retained(graft_engine *e, graft__cmd *cmd)
{
    graft_session *s = cmd_session(e, cmd);
    int32_t upto = cmd->u.retained.upto;
    int rc = GRAFT_OK;
    if (e->draining)
        rc = GRAFT_ESHUTDOWN;
    else if (s == NULL)
        rc = GRAFT_ECLOSED;
    else if (upto < 0 || upto > atomic_load(&s->position))
        rc = GRAFT_EBOUNDARY;
    else
        while (upto > 0 && !graft__kv_seq_retains(e->kv, s->seq, upto))
            upto--;
    *cmd->u.retained.boundary = rc == GRAFT_OK ? upto : -1;
    graft__engine_reply(e, cmd, rc);
}

int graft_session_retained_boundary(graft_session *s, int32_t upto, int32_t *boundary)
{
    if (boundary != NULL)
        *boundary = -1;
    if (s == NULL || boundary == NULL)
        return GRAFT_EINVAL;
    graft__cmd cmd = {.kind = GRAFT__CMD_RETAINED, .session_id = s->id};
    cmd.u.retained.upto = upto;
    cmd.u.retained.boundary = boundary;
    return graft__engine_call(s->engine, &cmd);
}

/* Engine thread: the boundary to clone src at, in [min_upto, max_upto]: the longest one src
 * has committed and retains. */
static int clone_boundary(graft_engine *e, const graft_session *src, int32_t min_upto,
                          int32_t max_upto, int32_t *upto)
{
    int32_t position = atomic_load(&src->position);
    int32_t b = max_upto < position ? max_upto : position;
    if (min_upto < 0 || b < min_upto)
        return GRAFT_EBOUNDARY;
    while (b >= min_upto && !graft__kv_seq_retains(e->kv, src->seq, b))
        b--;
    if (b < min_upto)
        return GRAFT_ERETENTION;
    *upto = b;
    return GRAFT_OK;
}

/* Engine thread: the clone itself; *out is the new session on success. */
static int clone_session(graft_engine *e, const graft__cmd *cmd, graft_session **out)
{
    *out = NULL;
    if (e->draining)
        return GRAFT_ESHUTDOWN;
    graft_session *src = cmd_session(e, cmd);
    if (src == NULL)
        return GRAFT_ECLOSED;
    int32_t upto;
    int rc = clone_boundary(e, src, cmd->u.clone.min_upto, cmd->u.clone.max_upto, &upto);
    if (rc != GRAFT_OK)
        return rc;
    if (e->n_sessions >= e->opts.max_sessions)
        return GRAFT_ECAPACITY;
    graft_session *s = session_new(e);
    if (s == NULL)
        return GRAFT_ENOMEM;
    rc = graft__kv_seq_clone(e->kv, src->seq, upto, &s->seq);
    if (rc != GRAFT_OK) {
        session_free(s);
        return rc;
    }
    memcpy(s->tokens, src->tokens, (size_t)upto * sizeof *s->tokens);
    atomic_store(&s->position, upto);
    session_register(e, s);
    *out = s;
    return GRAFT_OK;
}

void graft__session_run_clone(graft_engine *e, graft__cmd *cmd)
{
    graft_session *clone;
    int rc = clone_session(e, cmd, &clone);
    graft__metrics_count_clone(e, rc);
    graft_clone_cb on_done = cmd->u.clone.on_done;
    void *user = cmd->u.clone.user;
    if (cmd->heap)
        graft__free(cmd);
    if (on_done != NULL)
        on_done(rc, clone, user);
    else if (clone != NULL)
        graft__session_close_now(e, clone);
}

int graft_session_clone_range(graft_session *s, int32_t min_upto, int32_t max_upto,
                              graft_clone_cb on_done, void *user)
{
    if (s == NULL)
        return GRAFT_EINVAL;
    graft__cmd *cmd = graft__calloc(1, sizeof *cmd);
    if (cmd == NULL)
        return GRAFT_ENOMEM;
    cmd->kind = GRAFT__CMD_CLONE;
    cmd->heap = true;
    cmd->session_id = s->id;
    cmd->u.clone.min_upto = min_upto;
    cmd->u.clone.max_upto = max_upto;
    cmd->u.clone.on_done = on_done;
    cmd->u.clone.user = user;
    int rc = graft__engine_submit(s->engine, cmd);
    if (rc != GRAFT_OK)
        graft__free(cmd);
    return rc;
}

int graft_session_clone(graft_session *s, int32_t upto, graft_clone_cb on_done, void *user)
{
    return graft_session_clone_range(s, upto, upto, on_done, user);
}

/* The waiting side of graft_session_clone_wait. */
typedef struct clone_waiter {
    graft_engine *engine;
    graft__cmd reply; /* only its replied / status fields are used */
    graft_session *clone;
} clone_waiter;

static void clone_wait_done(int status, graft_session *clone, void *user)
{
    clone_waiter *w = user;
    w->clone = clone;
    graft__engine_reply(w->engine, &w->reply, status);
}

static int clone_message(int rc, int32_t min_upto, int32_t max_upto, char **errmsg)
{
    switch (rc) {
    case GRAFT_EBOUNDARY:
        if (min_upto == max_upto)
            return graft__errmsg(errmsg, rc,
                                 "clone: boundary %d is outside [0, committed position]",
                                 min_upto);
        return graft__errmsg(errmsg, rc,
                             "clone: no boundary in [%d, %d] is within [0, committed position]",
                             min_upto, max_upto);
    case GRAFT_ERETENTION:
        return graft__errmsg(errmsg, rc,
                             "clone: the sliding-window KV before position %d is gone",
                             max_upto);
    case GRAFT_ECAPACITY:
        return graft__errmsg(errmsg, rc, "clone: no session capacity left (max_sessions)");
    case GRAFT_ECLOSED:
        return graft__errmsg(errmsg, rc, "clone: the session was closed");
    default:
        return graft__errmsg(errmsg, rc, "clone: %s", graft_status_str(rc));
    }
}

int graft_session_clone_range_wait(graft_session *s, int32_t min_upto, int32_t max_upto,
                                   graft_session **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || s == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_session_clone_wait: NULL argument");
    *out = NULL;
    graft_engine *e = s->engine;
    if (graft__engine_on_thread(e))
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "graft_session_clone_wait: called from a callback");
    clone_waiter w = {.engine = e};
    int rc = graft_session_clone_range(s, min_upto, max_upto, clone_wait_done, &w);
    if (rc == GRAFT_OK) {
        pthread_mutex_lock(&e->mu);
        while (!w.reply.replied)
            pthread_cond_wait(&e->replied, &e->mu);
        pthread_mutex_unlock(&e->mu);
        rc = w.reply.status;
    }
    if (rc != GRAFT_OK)
        return clone_message(rc, min_upto, max_upto, errmsg);
    *out = w.clone;
    return GRAFT_OK;
}

int graft_session_clone_wait(graft_session *s, int32_t upto, graft_session **out, char **errmsg)
{
    return graft_session_clone_range_wait(s, upto, upto, out, errmsg);
}

/* Engine thread: a graft__malloc'd copy of s's committed tokens (NULL when empty). */
static int copy_history(const graft_session *s, int32_t **tokens, size_t *n)
{
    size_t count = (size_t)atomic_load(&s->position);
    *tokens = NULL;
    *n = 0;
    if (count == 0)
        return GRAFT_OK;
    *tokens = graft__malloc(count * sizeof **tokens);
    if (*tokens == NULL)
        return GRAFT_ENOMEM;
    memcpy(*tokens, s->tokens, count * sizeof **tokens);
    *n = count;
    return GRAFT_OK;
}

void graft__session_run_tokens(graft_engine *e, graft__cmd *cmd)
{
    graft_session *s = cmd_session(e, cmd);
    int rc = e->draining ? GRAFT_ESHUTDOWN : s == NULL ? GRAFT_ECLOSED : GRAFT_OK;
    if (rc == GRAFT_OK)
        rc = copy_history(s, cmd->u.tokens.tokens_out, cmd->u.tokens.n);
    graft__engine_reply(e, cmd, rc);
}

int graft_session_tokens(graft_session *s, int32_t **tokens, size_t *n)
{
    if (tokens != NULL)
        *tokens = NULL;
    if (n != NULL)
        *n = 0;
    if (s == NULL || tokens == NULL || n == NULL)
        return GRAFT_EINVAL;
    graft_engine *e = s->engine;
    if (graft__engine_on_thread(e)) {
        const graft_session *found = graft__sessions_find(e, s->id);
        return found == NULL ? GRAFT_ECLOSED : copy_history(found, tokens, n);
    }
    graft__cmd cmd = {.kind = GRAFT__CMD_TOKENS, .session_id = s->id};
    cmd.u.tokens.tokens_out = tokens;
    cmd.u.tokens.n = n;
    return graft__engine_call(e, &cmd);
}

/* Appends the entries' tokens (consecutive positions of s from its committed length) to
 * the committed history. */
int graft__session_commit(graft_engine *e, graft_session *s, const graft__batch_entry *entries,
                          int32_t n)
{
    int32_t position = atomic_load(&s->position);
    int rc = graft__kv_seq_commit(e->kv, s->seq, position + n);
    if (rc != GRAFT_OK)
        return rc;
    for (int32_t i = 0; i < n; i++)
        s->tokens[position + i] = entries[i].token;
    atomic_store(&s->position, position + n);
    return GRAFT_OK;
}

/* Engine thread: forwards the last committed token on a throwaway clone at position - 1. */
static int probe(graft_engine *e, graft_session *s, float *logits)
{
    int32_t position = atomic_load(&s->position);
    if (position < 1)
        return GRAFT_EINVAL;
    int32_t seq;
    int rc = graft__kv_seq_clone(e->kv, s->seq, position - 1, &seq);
    if (rc != GRAFT_OK)
        return rc;
    graft__batch_entry entry = {seq, position - 1, s->tokens[position - 1], true};
    rc = graft__forward_in(e->model, e->scratch, &e->kv_iface, &entry, 1, logits, NULL);
    graft__kv_seq_close(e->kv, seq);
    return rc;
}

void graft__session_run_probe(graft_engine *e, graft__cmd *cmd)
{
    graft_session *s = cmd_session(e, cmd);
    int rc = e->draining ? GRAFT_ESHUTDOWN
             : s == NULL ? GRAFT_ECLOSED
                         : probe(e, s, cmd->u.probe.logits);
    int32_t n = rc == GRAFT_OK ? atomic_load(&s->position) : 0;
    if (n > 0)
        memcpy(cmd->u.probe.tokens, s->tokens, (size_t)n * sizeof *s->tokens);
    *cmd->u.probe.n_tokens = n;
    graft__engine_reply(e, cmd, rc);
}

int graft__session_probe(graft_session *s, float *logits, int32_t *tokens, int32_t *n_tokens)
{
    graft__cmd cmd = {.kind = GRAFT__CMD_PROBE, .session_id = s->id};
    cmd.u.probe.logits = logits;
    cmd.u.probe.tokens = tokens;
    cmd.u.probe.n_tokens = n_tokens;
    return graft__engine_call(s->engine, &cmd);
}
