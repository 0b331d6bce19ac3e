/*
 * sessions.c: named sessions (server.h): a conversation's KV kept between its requests,
 * under the id a client gives (session_id in the body, or the X-Session-ID /
 * x-session-affinity header).
 *
 * An entry holds an idle engine session whose committed tokens are the conversation so far
 * (prompt and reply of its last request). A request on it takes the entry (requests on one
 * session run in arrival order: a ticket each, served in turn), and is given the session as
 * it fits the new prompt: kept whole when the prompt extends the committed history, or a
 * clone at their longest common prefix when it diverges (the clone's boundary is the
 * longest the session retains: never a cold replay when any of it can be kept). When the
 * request ends its session becomes the entry's. Idle entries expire after the TTL, and the
 * least recently used idle one is closed when the store is full. With an API key, an entry
 * belongs to the key that created it.
 *
 * Under KV pressure the store gives KV back too (a reclaim hook, graft__sessions_reclaim):
 * when a generation still waits for room a step after the prefix cache was asked (its
 * snapshots are cheaper to lose than a conversation), the least recently used idle entries
 * are closed until what they held alone covers the shortfall.
 *
 * Locking: store->mu guards the list and every entry's fields; it is never held while
 * calling the engine but for calls that do not block (an entry being handed over is busy,
 * so nobody else touches it), which is what lets the reclaim hook take it on the engine
 * thread.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

struct graft__named {
    char *id;
    char *owner;             /* the API key that made it, or NULL */
    graft_session *session;  /* the conversation's KV, idle; NULL until a request ends */
    uint64_t last_used_ns;
    uint64_t next_ticket, serving; /* arrival order of the requests on it */
    bool busy;
    graft__named *next;
};

int graft__sessions_store_init(graft__session_store *st, int32_t max, int32_t ttl_s)
{
    memset(st, 0, sizeof *st);
    st->max = max;
    st->ttl_ns = (uint64_t)ttl_s * 1000000000u;
    if (pthread_mutex_init(&st->mu, NULL) != 0)
        return GRAFT_ENOMEM;
    if (pthread_cond_init(&st->cv, NULL) != 0) {
        pthread_mutex_destroy(&st->mu);
        return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

static void entry_free(graft__named *e)
{
    graft_session_close(e->session);
    free(e->id);
    free(e->owner);
    free(e);
}

void graft__sessions_store_free(graft__session_store *st)
{
    while (st->head != NULL) {
        graft__named *e = st->head;
        st->head = e->next;
        entry_free(e);
    }
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
}

static void unlink_entry(graft__session_store *st, graft__named *e)
{
    for (graft__named **at = &st->head; *at != NULL; at = &(*at)->next)
        if (*at == e) {
            *at = e->next;
            st->count--;
            return;
        }
}

/* Under mu: closes idle entries past the TTL, then the least recently used idle ones while
 * the store is full. */
static void sweep(graft__session_store *st)
{
    uint64_t now = graft__server_now_ns();
    for (graft__named *e = st->head, *next; e != NULL; e = next) {
        next = e->next;
        if (!e->busy && e->next_ticket == e->serving && now - e->last_used_ns > st->ttl_ns) {
            unlink_entry(st, e);
            entry_free(e);
        }
    }
    while (st->count >= st->max) {
        graft__named *oldest = NULL;
        for (graft__named *e = st->head; e != NULL; e = e->next)
            if (!e->busy && e->next_ticket == e->serving &&
                (oldest == NULL || e->last_used_ns < oldest->last_used_ns))
                oldest = e;
        if (oldest == NULL)
            return;
        unlink_entry(st, oldest);
        entry_free(oldest);
    }
}

static graft__named *find(graft__session_store *st, const char *id)
{
    for (graft__named *e = st->head; e != NULL; e = e->next)
        if (e->id != NULL && strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

int graft__sessions_acquire(graft__session_store *st, const char *id, const char *owner,
                            graft__named **out, graft_session **session)
{
    *out = NULL;
    *session = NULL;
    pthread_mutex_lock(&st->mu);
    graft__named *e = find(st, id);
    if (e == NULL) {
        sweep(st);
        if (st->count >= st->max) {
            pthread_mutex_unlock(&st->mu);
            return GRAFT_ECAPACITY;
        }
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->id = strdup(id)) == NULL ||
            (owner != NULL && (e->owner = strdup(owner)) == NULL)) {
            if (e != NULL)
                free(e->id);
            free(e);
            pthread_mutex_unlock(&st->mu);
            return GRAFT_ENOMEM;
        }
        e->next = st->head;
        st->head = e;
        st->count++;
    } else if ((e->owner == NULL) != (owner == NULL) ||
               (owner != NULL && strcmp(e->owner, owner) != 0)) {
        pthread_mutex_unlock(&st->mu);
        return GRAFT_EINVAL; /* another key's session */
    }
    uint64_t ticket = e->next_ticket++;
    while (e->busy || e->serving != ticket)
        pthread_cond_wait(&st->cv, &st->mu);
    e->busy = true;
    *session = e->session;
    e->session = NULL;
    pthread_mutex_unlock(&st->mu);
    *out = e;
    return GRAFT_OK;
}

void graft__sessions_release(graft__session_store *st, graft__named *e, graft_session *session)
{
    pthread_mutex_lock(&st->mu);
    graft_session_close(e->session);
    e->session = session;
    e->busy = false;
    e->serving++;
    e->last_used_ns = graft__server_now_ns();
    bool gone = e->id == NULL && e->next_ticket == e->serving; /* deleted, none waits */
    if (gone)
        unlink_entry(st, e);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    if (gone)
        entry_free(e);
}

void graft__sessions_reclaim(graft_engine *engine, int64_t bytes_short, void *user)
{
    graft__session_store *st = user;
    pthread_mutex_lock(&st->mu);
    uint64_t now = graft__server_now_ns();
    /* the first call of a shortage only marks it: the prefix cache gives back first */
    bool again = st->reclaim_seen_ns != 0 && now - st->reclaim_seen_ns < 1000000000u;
    st->reclaim_seen_ns = now;
    int64_t given = 0;
    while (again && given < bytes_short) {
        graft__named *oldest = NULL;
        for (graft__named *e = st->head; e != NULL; e = e->next)
            if (!e->busy && e->next_ticket == e->serving && e->session != NULL &&
                (oldest == NULL || e->last_used_ns < oldest->last_used_ns))
                oldest = e;
        if (oldest == NULL)
            break;
        int64_t alone = 0;
        graft_session *one[1] = {oldest->session};
        if (graft_engine_kv_exclusive_bytes(engine, one, 1, &alone) == GRAFT_OK)
            given += alone;
        unlink_entry(st, oldest);
        entry_free(oldest);
        st->reclaimed++;
    }
    pthread_mutex_unlock(&st->mu);
}

int graft__sessions_delete(graft__session_store *st, const char *id, const char *owner)
{
    pthread_mutex_lock(&st->mu);
    graft__named *e = find(st, id);
    int rc = GRAFT_OK;
    if (e == NULL || (e->owner == NULL) != (owner == NULL) ||
        (owner != NULL && strcmp(e->owner, owner) != 0)) {
        rc = GRAFT_ENOTFOUND;
    } else if (e->busy || e->next_ticket != e->serving) {
        free(e->id); /* found no more; the last request on it frees it */
        e->id = NULL;
    } else {
        unlink_entry(st, e);
        entry_free(e);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

json_t *graft__sessions_list(graft__session_store *st, const char *owner)
{
    json_t *list = json_array();
    pthread_mutex_lock(&st->mu);
    sweep(st);
    uint64_t now = graft__server_now_ns();
    for (graft__named *e = st->head; e != NULL; e = e->next) {
        if (e->id == NULL || (e->owner == NULL) != (owner == NULL) ||
            (owner != NULL && strcmp(e->owner, owner) != 0))
            continue;
        json_array_append_new(
            list, json_pack("{s:s, s:i, s:b, s:f}", "id", e->id, "tokens",
                            e->session ? (int)graft_session_position(e->session) : 0, "busy",
                            e->busy, "idle_s", e->busy ? 0.0 : (now - e->last_used_ns) / 1e9));
    }
    pthread_mutex_unlock(&st->mu);
    return list;
}
