/*
 * capture.c: prompt capture (graft_prompt_capture in include/graft.h): a snapshot of a
 * generation's full prompt, taken at its first output and inserted into the prefix cache
 * on the caller's thread.
 *
 * The capture replaces the generation's callbacks and user pointer with its own. At the first
 * update that carries tokens (or, when the first sampled token stopped the generation, at its
 * settling), on the engine thread, the wrapper finds the generation's session
 * (graft_generation_session), checks that it is the session the capture is bound to (by id: the
 * handle the caller passed may be gone or reused) and that its committed position is the full
 * prompt, and queues a clone there before it calls the caller's callback. Commands queued from a
 * callback run before the next forward pass, and in order, so the clone holds exactly the prompt,
 * with its sliding window, and runs before a close or cancel queued by the caller's callback.
 * Nothing blocks on the engine thread. collect, on the caller's thread, waits for that clone's
 * answer (certain: every clone is answered, if only with GRAFT_ESHUTDOWN) and inserts the snapshot.
 *
 * States: WAITING until the first update with tokens; then REQUESTED (clone queued) or
 * MISSED (session or position did not match); REQUESTED becomes ANSWERED when the clone's
 * callback runs; collect makes any state COLLECTED (waiting out REQUESTED first).
 *
 * Lifetime: reference counted: the caller's reference (dropped by free) and one for a clone
 * in flight (dropped by its callback). Whoever drops the last frees it; a snapshot that
 * arrives after free, or is never collected, is closed.
 *
 * Locking: capture->mu guards state, status, snapshot, freed and refs; it is taken on the
 * engine thread by the wrappers and the clone callback, briefly, and never held across an
 * engine call or a user callback.
 */
#include <string.h>

#include "prefix/prefix.h"

typedef enum capture_state {
    CAPTURE_WAITING,
    CAPTURE_REQUESTED,
    CAPTURE_ANSWERED,
    CAPTURE_MISSED,
    CAPTURE_COLLECTED
} capture_state;

struct graft_prompt_capture {
    graft_prefix_cache *cache;
    uint64_t session_id;
    int32_t *tokens; /* (n) the full prompt */
    int32_t n;
    bool wrapped;
    graft_update_cb on_update; /* the caller's, set by wrap before the generation is queued */
    graft_settled_cb on_settled;
    void *user;
    pthread_mutex_t mu;
    pthread_cond_t answered;
    /* Under mu. */
    capture_state state;
    int status;             /* ANSWERED / MISSED: the clone's status or the reason missed */
    graft_session *snapshot; /* ANSWERED with GRAFT_OK: the clone, until collected */
    bool freed;
    int refs;
};

int graft_prompt_capture_create(graft_prefix_cache *cache, graft_session *session,
                                const int32_t *tokens, size_t n, graft_prompt_capture **out)
{
    if (out != NULL)
        *out = NULL;
    if (cache == NULL || session == NULL || tokens == NULL || out == NULL || n < 1 ||
        n > INT32_MAX)
        return GRAFT_EINVAL;
    graft_prompt_capture *c = graft__calloc(1, sizeof *c);
    if (c == NULL)
        return GRAFT_ENOMEM;
    c->tokens = graft__malloc(n * sizeof *tokens);
    if (c->tokens == NULL || pthread_mutex_init(&c->mu, NULL) != 0) {
        graft__free(c->tokens);
        graft__free(c);
        return GRAFT_ENOMEM;
    }
    if (pthread_cond_init(&c->answered, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        graft__free(c->tokens);
        graft__free(c);
        return GRAFT_ENOMEM;
    }
    memcpy(c->tokens, tokens, n * sizeof *tokens);
    c->n = (int32_t)n;
    c->cache = cache;
    c->session_id = graft_session_id(session);
    c->state = CAPTURE_WAITING;
    c->refs = 1;
    *out = c;
    return GRAFT_OK;
}

static void capture_destroy(graft_prompt_capture *c)
{
    pthread_cond_destroy(&c->answered);
    pthread_mutex_destroy(&c->mu);
    graft__free(c->tokens);
    graft__free(c);
}

/* Drops a reference; the last one frees the capture. */
static void capture_unref(graft_prompt_capture *c)
{
    pthread_mutex_lock(&c->mu);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        capture_destroy(c);
}

/* graft_clone_cb (engine thread): the snapshot, or the clone's refusal. */
static void clone_answered(int status, graft_session *clone, void *user)
{
    graft_prompt_capture *c = user;
    pthread_mutex_lock(&c->mu);
    bool orphan = c->freed;
    if (!orphan) {
        c->state = CAPTURE_ANSWERED;
        c->status = status;
        c->snapshot = clone;
        pthread_cond_broadcast(&c->answered);
    }
    pthread_mutex_unlock(&c->mu);
    if (orphan)
        graft_session_close(clone);
    capture_unref(c);
}

/* Engine thread, first update with tokens: the session to clone, or NULL after recording
 * why not. Under mu. */
static graft_session *bound_session(graft_prompt_capture *c, graft_generation *gen)
{
    graft_session *s = graft_generation_session(gen);
    if (graft_session_id(s) != c->session_id || graft_session_position(s) != c->n) {
        c->state = CAPTURE_MISSED;
        c->status = GRAFT_EBOUNDARY;
        return NULL;
    }
    c->state = CAPTURE_REQUESTED;
    c->refs++;
    return s;
}

/* Engine thread, the prompt complete: queues the clone of the bound session at n (unless
 * the capture was past WAITING already). */
static void request_snapshot(graft_prompt_capture *c, graft_generation *gen)
{
    graft_session *source = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->state == CAPTURE_WAITING)
        source = bound_session(c, gen);
    pthread_mutex_unlock(&c->mu);
    if (source != NULL) {
        int rc = graft_session_clone(source, c->n, clone_answered, c);
        if (rc != GRAFT_OK) {
            pthread_mutex_lock(&c->mu);
            c->state = CAPTURE_ANSWERED;
            c->status = rc;
            c->refs--; /* not the last: the caller's reference lives until settled */
            pthread_cond_broadcast(&c->answered);
            pthread_mutex_unlock(&c->mu);
        }
    }
}

/* graft_update_cb wrapper: at the first update with tokens, queues the clone, then calls
 * the caller's on_update. */
static void capture_on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    graft_prompt_capture *c = user;
    if (n > 0)
        request_snapshot(c, gen);
    if (c->on_update != NULL)
        c->on_update(gen, tokens, n, c->user);
}

/* graft_settled_cb wrapper. A generation whose first sampled token was a stop token gave no
 * update, yet its session holds exactly the prompt: the clone is queued here, before the
 * caller's on_settled (and whatever close it queues). */
static void capture_on_settled(graft_generation *gen, void *user)
{
    graft_prompt_capture *c = user;
    graft_generation_metrics m;
    graft_generation_metrics_get(gen, &m);
    if (m.generated_tokens > 0)
        request_snapshot(c, gen);
    if (c->on_settled != NULL)
        c->on_settled(gen, c->user);
}

int graft_prompt_capture_wrap(graft_prompt_capture *c, graft_update_cb *on_update,
                              graft_settled_cb *on_settled, void **user)
{
    if (c == NULL || on_update == NULL || on_settled == NULL || user == NULL || c->wrapped)
        return GRAFT_EINVAL;
    c->wrapped = true;
    c->on_update = *on_update;
    c->on_settled = *on_settled;
    c->user = *user;
    *on_update = capture_on_update;
    *on_settled = capture_on_settled;
    *user = c;
    return GRAFT_OK;
}

int graft_prompt_capture_collect(graft_prompt_capture *c)
{
    if (c == NULL || graft_engine_on_thread(c->cache->engine))
        return GRAFT_EINVAL; /* waiting for the clone would wait for this very thread */
    pthread_mutex_lock(&c->mu);
    while (c->state == CAPTURE_REQUESTED)
        pthread_cond_wait(&c->answered, &c->mu);
    capture_state was = c->state;
    int status = was == CAPTURE_WAITING ? GRAFT_ENOTFOUND : c->status;
    graft_session *snapshot = c->snapshot;
    c->snapshot = NULL;
    c->state = CAPTURE_COLLECTED;
    pthread_mutex_unlock(&c->mu);
    if (was == CAPTURE_COLLECTED)
        return GRAFT_EINVAL;
    if (snapshot == NULL) {
        graft__prefix_count_capture(c->cache, false);
        return status;
    }
    int rc = graft_prefix_cache_insert(c->cache, c->tokens, (size_t)c->n, snapshot);
    graft__prefix_count_capture(c->cache, rc == GRAFT_OK);
    return rc;
}

void graft_prompt_capture_free(graft_prompt_capture *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->freed = true;
    graft_session *snapshot = c->snapshot;
    c->snapshot = NULL;
    pthread_mutex_unlock(&c->mu);
    graft_session_close(snapshot);
    capture_unref(c);
}
