/*
 * response_store.c: the responses kept for the Responses API (`store`), so that a request can
 * continue one with `previous_response_id` and GET /v1/responses/{id} can read it again.
 *
 * Each entry keeps its whole conversation: the items of the responses it continued, then its
 * own input and output items (the item objects are shared between the entries of one
 * conversation, not copied), so that forgetting or deleting an earlier response leaves the
 * later ones whole. The store holds at most `max` entries, and at most `max_bytes` of their
 * JSON text, each entry's whole conversation counted (items an entry shares with others are
 * counted again, so the bound holds whatever is shared), and forgets the least recently
 * used first (a read or a continuation uses an entry). With API keys, an entry belongs to the
 * key that made it and no other key sees it.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

struct graft__stored {
    char *id, *owner;
    size_t bytes;     /* its items' and its response's JSON text */
    json_t *items;    /* the conversation: earlier responses' items, its input, its output */
    json_t *response; /* the response object as it was sent */
    graft__stored *newer, *older;
};

int graft__response_store_init(graft__response_store *st, int32_t max, size_t max_bytes)
{
    *st = (graft__response_store){.max = max, .max_bytes = max_bytes};
    return pthread_mutex_init(&st->mu, NULL) == 0 ? GRAFT_OK : GRAFT_ENOMEM;
}

static void entry_free(graft__stored *e)
{
    free(e->id);
    free(e->owner);
    json_decref(e->items);
    json_decref(e->response);
    free(e);
}

void graft__response_store_free(graft__response_store *st)
{
    while (st->newest != NULL) {
        graft__stored *e = st->newest;
        st->newest = e->older;
        entry_free(e);
    }
    pthread_mutex_destroy(&st->mu);
}

static void unlink_entry(graft__response_store *st, graft__stored *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        st->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        st->oldest = e->newer;
    st->count--;
    st->bytes -= e->bytes;
}

static void push_newest(graft__response_store *st, graft__stored *e)
{
    e->newer = NULL;
    e->older = st->newest;
    if (st->newest != NULL)
        st->newest->newer = e;
    else
        st->oldest = e;
    st->newest = e;
    st->count++;
    st->bytes += e->bytes;
}

static bool same_owner(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The owner's entry `id` (made the most recently used), or NULL. Under st->mu. */
static graft__stored *find(graft__response_store *st, const char *id, const char *owner)
{
    for (graft__stored *e = st->newest; e != NULL; e = e->older) {
        if (strcmp(e->id, id) == 0 && same_owner(e->owner, owner)) {
            unlink_entry(st, e);
            push_newest(st, e);
            return e;
        }
    }
    return NULL;
}

/* The bytes of j's compact JSON text. */
static int add_size(const char *buffer, size_t size, void *data)
{
    (void)buffer;
    *(size_t *)data += size;
    return 0;
}

static size_t json_bytes(const json_t *j)
{
    size_t n = 0;
    json_dump_callback(j, add_size, &n, JSON_COMPACT);
    return n;
}

int graft__response_store_put(graft__response_store *st, const char *id, const char *owner,
                              json_t *items, json_t *response)
{
    if (st->max == 0)
        return GRAFT_OK;
    size_t bytes = json_bytes(items) + json_bytes(response);
    if (bytes > st->max_bytes)
        return GRAFT_ERANGE;
    graft__stored *e = calloc(1, sizeof *e);
    if (e == NULL || (e->id = strdup(id)) == NULL ||
        (owner != NULL && (e->owner = strdup(owner)) == NULL)) {
        if (e != NULL)
            entry_free(e);
        return GRAFT_ENOMEM;
    }
    e->items = json_incref(items);
    e->response = json_incref(response);
    e->bytes = bytes;
    pthread_mutex_lock(&st->mu);
    while (st->count >= st->max || st->bytes + bytes > st->max_bytes) {
        graft__stored *old = st->oldest;
        unlink_entry(st, old);
        entry_free(old);
    }
    push_newest(st, e);
    pthread_mutex_unlock(&st->mu);
    return GRAFT_OK;
}

json_t *graft__response_store_items(graft__response_store *st, const char *id,
                                    const char *owner)
{
    pthread_mutex_lock(&st->mu);
    graft__stored *e = find(st, id, owner);
    json_t *items = e != NULL ? json_incref(e->items) : NULL;
    pthread_mutex_unlock(&st->mu);
    return items;
}

json_t *graft__response_store_get(graft__response_store *st, const char *id, const char *owner)
{
    pthread_mutex_lock(&st->mu);
    graft__stored *e = find(st, id, owner);
    json_t *response = e != NULL ? json_incref(e->response) : NULL;
    pthread_mutex_unlock(&st->mu);
    return response;
}

int graft__response_store_delete(graft__response_store *st, const char *id, const char *owner)
{
    pthread_mutex_lock(&st->mu);
    graft__stored *e = find(st, id, owner);
    if (e != NULL)
        unlink_entry(st, e);
    pthread_mutex_unlock(&st->mu);
    if (e == NULL)
        return GRAFT_ENOTFOUND;
    entry_free(e);
    return GRAFT_OK;
}
