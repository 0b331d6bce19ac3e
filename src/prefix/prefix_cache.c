/*
 * prefix_cache.c: the prefix cache (graft_prefix_cache in include/graft.h): its entries,
 * the LRU list, pins, insert with eviction by count and by bytes, clear, destroy, stats.
 *
 * An entry is a snapshot session and its key (kept in the radix index, radix.c). Entries
 * are on a doubly linked LRU list, newest first; `stamp`, a clock tick per insert or hit,
 * orders equal offers in lookup.c. Eviction takes the oldest entry out of the index and the
 * list at once; its snapshot is closed then, or by the last unpin when a lookup or a
 * measurement is using it outside the lock (so evicting never waits and never closes a
 * session under someone). Closing a snapshot only drops its own KV references: a live
 * session sharing the blocks is untouched.
 *
 * Bytes: what the cache costs is the KV no live session shares, measured by the engine
 * (graft_engine_kv_exclusive_bytes) over the snapshots, pinned for the measurement. It
 * grows when a sharer closes, so it is measured when it matters: after each insert (while
 * over max_bytes: evicting the oldest entry and measuring again, or refusing the new
 * snapshot at once when it alone is over), on trim, and for stats.
 *
 * Reclaim: the cache registers a reclaim hook with the engine at create. When a generation
 * waits for KV room, the engine calls it on its thread: it evicts the least recently used
 * snapshots that no lookup is using until what they held alone covers the shortfall (their
 * closes run before the next step). It never blocks: when the lock is busy it gives nothing
 * this time, and the engine asks again at its next step.
 *
 * Locking: cache->mu (prefix.h). Engine calls happen with it released, but for the reclaim
 * hook, which runs on the engine thread and measures there directly.
 */
#include <string.h>

#include "prefix/prefix.h"

static void reclaim(graft_engine *engine, int64_t bytes_short, void *user);

int graft_prefix_cache_create(graft_engine *engine, int32_t max_entries, size_t max_bytes,
                              graft_prefix_cache **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out != NULL)
        *out = NULL;
    if (engine == NULL || out == NULL || max_entries < 0)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "prefix cache: NULL argument or max_entries %d below 0",
                             max_entries);
    graft_prefix_cache *cache = graft__calloc(1, sizeof *cache);
    if (cache == NULL || graft__radix_create(&cache->index) != GRAFT_OK ||
        pthread_mutex_init(&cache->mu, NULL) != 0) {
        if (cache != NULL)
            graft__radix_free(cache->index);
        graft__free(cache);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "prefix cache: out of memory");
    }
    cache->engine = engine;
    cache->max_entries = max_entries;
    cache->max_bytes = max_bytes;
    int rc = graft_engine_reclaim_add(engine, reclaim, cache);
    if (rc != GRAFT_OK) {
        graft__radix_free(cache->index);
        pthread_mutex_destroy(&cache->mu);
        graft__free(cache);
        return graft__errmsg(errmsg, rc, "prefix cache: cannot register with the engine: %s",
                             graft_status_str(rc));
    }
    *out = cache;
    return GRAFT_OK;
}

/* ---- entries: LRU list and pins (under mu) --------------------------------------------------- */

static void lru_unlink(graft_prefix_cache *cache, graft__prefix_entry *entry)
{
    if (entry->newer != NULL)
        entry->newer->older = entry->older;
    else
        cache->newest = entry->older;
    if (entry->older != NULL)
        entry->older->newer = entry->newer;
    else
        cache->oldest = entry->newer;
    entry->newer = entry->older = NULL;
}

static void lru_push_newest(graft_prefix_cache *cache, graft__prefix_entry *entry)
{
    entry->older = cache->newest;
    entry->newer = NULL;
    if (cache->newest != NULL)
        cache->newest->newer = entry;
    else
        cache->oldest = entry;
    cache->newest = entry;
    entry->stamp = ++cache->clock;
}

void graft__prefix_touch(graft_prefix_cache *cache, graft__prefix_entry *entry)
{
    if (entry->node == NULL)
        return; /* evicted while in use: it stays out */
    lru_unlink(cache, entry);
    lru_push_newest(cache, entry);
}

void graft__prefix_pin(graft__prefix_entry *entry)
{
    entry->pins++;
}

static void entry_release(graft__prefix_entry *entry)
{
    graft_session_close(entry->snapshot);
    graft__free(entry);
}

void graft__prefix_unpin(graft__prefix_entry *entry)
{
    GRAFT_ASSERT(entry->pins > 0);
    if (--entry->pins == 0 && entry->node == NULL)
        entry_release(entry);
}

/* Takes the entry out of the index and the list; closes its snapshot unless pinned. */
static void evict(graft_prefix_cache *cache, graft__prefix_entry *entry)
{
    lru_unlink(cache, entry);
    graft__radix_remove(cache->index, entry->node);
    entry->node = NULL;
    cache->n_entries--;
    if (entry->pins == 0)
        entry_release(entry);
}

void graft__prefix_count_capture(graft_prefix_cache *cache, bool inserted)
{
    pthread_mutex_lock(&cache->mu);
    if (inserted)
        cache->stats.captures++;
    else
        cache->stats.captures_missed++;
    pthread_mutex_unlock(&cache->mu);
}

/* ---- bytes ----------------------------------------------------------------------------------- */

/* Under mu (released during the engine call; the entries are pinned meanwhile): the KV
 * bytes held alone by entries[0, n). sessions: scratch for n handles. */
static int measure_entries(graft_prefix_cache *cache, graft__prefix_entry *const *entries,
                           size_t n, graft_session **sessions, int64_t *bytes)
{
    for (size_t k = 0; k < n; k++) {
        sessions[k] = entries[k]->snapshot;
        graft__prefix_pin(entries[k]);
    }
    pthread_mutex_unlock(&cache->mu);
    int rc = graft_engine_kv_exclusive_bytes(cache->engine, sessions, n, bytes);
    pthread_mutex_lock(&cache->mu);
    for (size_t k = 0; k < n; k++)
        graft__prefix_unpin(entries[k]);
    return rc;
}

/* Under mu: the KV bytes held alone by every indexed snapshot. */
static int measure_all(graft_prefix_cache *cache, int64_t *bytes)
{
    *bytes = 0;
    size_t n = (size_t)cache->n_entries;
    if (n == 0)
        return GRAFT_OK;
    graft__prefix_entry **entries = graft__malloc(n * (sizeof *entries + sizeof(graft_session *)));
    if (entries == NULL)
        return GRAFT_ENOMEM;
    size_t k = 0;
    for (graft__prefix_entry *e = cache->oldest; e != NULL; e = e->newer)
        entries[k++] = e;
    int rc = measure_entries(cache, entries, n, (graft_session **)(entries + n), bytes);
    graft__free(entries);
    return rc;
}

/* Under mu: while the bytes held alone exceed max_bytes, evicts the oldest entry, unless
 * `fresh` (pinned, just inserted; may be NULL) alone is over (checked once, the first time
 * the bound is exceeded): then it goes, and nothing else. Returns the status
 * of the last measurement. */
static int enforce_bytes(graft_prefix_cache *cache, graft__prefix_entry *fresh)
{
    int64_t bytes, alone;
    graft_session *one[1];
    int rc;
    while ((rc = measure_all(cache, &bytes)) == GRAFT_OK && (size_t)bytes > cache->max_bytes) {
        if (fresh != NULL && fresh->node != NULL &&
            measure_entries(cache, &fresh, 1, one, &alone) == GRAFT_OK &&
            (size_t)alone > cache->max_bytes && fresh->node != NULL) {
            evict(cache, fresh);
            return GRAFT_OK;
        }
        fresh = NULL;
        if (cache->oldest == NULL)
            return GRAFT_OK;
        evict(cache, cache->oldest);
        cache->stats.evictions++;
    }
    return rc;
}

/* ---- reclaim --------------------------------------------------------------------------------- */

/* graft_reclaim_cb (engine thread): evicts the oldest unpinned snapshots until those evicted
 * held at least bytes_short alone, each measured alone (a block two of them shared counts
 * for neither, so this may evict one more than needed). */
static void reclaim(graft_engine *engine, int64_t bytes_short, void *user)
{
    graft_prefix_cache *cache = user;
    if (pthread_mutex_trylock(&cache->mu) != 0)
        return;
    int64_t given = 0;
    graft__prefix_entry *e = cache->oldest;
    while (e != NULL && given < bytes_short) {
        graft__prefix_entry *newer = e->newer;
        if (e->pins == 0) {
            int64_t alone = 0;
            graft_session *one[1] = {e->snapshot};
            if (graft_engine_kv_exclusive_bytes(engine, one, 1, &alone) == GRAFT_OK)
                given += alone;
            evict(cache, e);
            cache->stats.evictions++;
            cache->stats.reclaim_evictions++;
        }
        e = newer;
    }
    pthread_mutex_unlock(&cache->mu);
}

/* ---- insert ---------------------------------------------------------------------------------- */

/* Closes a snapshot the cache does not keep; counts it refused. Returns status. */
static int refuse(graft_prefix_cache *cache, graft_session *snapshot, int status)
{
    graft_session_close(snapshot);
    if (cache != NULL) {
        pthread_mutex_lock(&cache->mu);
        cache->stats.inserts_refused++;
        pthread_mutex_unlock(&cache->mu);
    }
    return status;
}

/* Under mu: indexes the snapshot as the newest entry, or refreshes a cached key. *fresh is
 * the new entry (pinned), or NULL for a duplicate. */
static int add_entry(graft_prefix_cache *cache, const int32_t *tokens, size_t n,
                     graft_session *snapshot, graft__prefix_entry **fresh)
{
    *fresh = NULL;
    graft__prefix_entry *entry = graft__calloc(1, sizeof *entry);
    if (entry == NULL)
        return GRAFT_ENOMEM;
    void *existing;
    int rc = graft__radix_insert(cache->index, tokens, n, entry, &entry->node, &existing);
    if (rc != GRAFT_OK || existing != NULL) {
        graft__free(entry);
        if (existing != NULL) {
            graft__prefix_touch(cache, existing);
            cache->stats.inserts_duplicate++;
        }
        return rc;
    }
    entry->snapshot = snapshot;
    lru_push_newest(cache, entry);
    cache->n_entries++;
    while (cache->n_entries > cache->max_entries) {
        evict(cache, cache->oldest);
        cache->stats.evictions++;
    }
    graft__prefix_pin(entry);
    *fresh = entry;
    return GRAFT_OK;
}

/* Whether the snapshot's committed history is tokens[0, n): GRAFT_OK, GRAFT_EINVAL when it
 * is not, or the query's failure. */
static int check_key(graft_session *snapshot, const int32_t *tokens, size_t n)
{
    int32_t *held = NULL;
    size_t n_held = 0;
    int rc = graft_session_tokens(snapshot, &held, &n_held);
    if (rc == GRAFT_OK && (n_held != n || memcmp(held, tokens, n * sizeof *tokens) != 0))
        rc = GRAFT_EINVAL;
    graft_free(held);
    return rc;
}

int graft_prefix_cache_insert(graft_prefix_cache *cache, const int32_t *tokens, size_t n,
                              graft_session *snapshot)
{
    if (snapshot == NULL)
        return refuse(cache, NULL, GRAFT_EINVAL);
    if (cache == NULL || tokens == NULL || n < 1 || n > INT32_MAX)
        return refuse(cache, snapshot, GRAFT_EINVAL);
    if (cache->max_bytes > 0 && graft_engine_on_thread(cache->engine))
        return refuse(cache, snapshot, GRAFT_EINVAL); /* measuring would wait for itself */
    if (graft_session_position(snapshot) != (int32_t)n)
        return refuse(cache, snapshot, GRAFT_EBOUNDARY);
    if (cache->max_entries == 0)
        return refuse(cache, snapshot, GRAFT_ECAPACITY);
    int checked = check_key(snapshot, tokens, n);
    if (checked == GRAFT_ECLOSED || checked == GRAFT_ESHUTDOWN)
        return refuse(cache, NULL, checked); /* nothing left to close */
    if (checked != GRAFT_OK)
        return refuse(cache, snapshot, checked);
    pthread_mutex_lock(&cache->mu);
    graft__prefix_entry *fresh;
    int rc = add_entry(cache, tokens, n, snapshot, &fresh);
    if (rc == GRAFT_OK && fresh != NULL) {
        if (cache->max_bytes > 0)
            (void)enforce_bytes(cache, fresh); /* a failed measurement waits for the next */
        /* evicted already: too big alone, or by the bound once the others were gone */
        rc = fresh->node == NULL ? GRAFT_ECAPACITY : GRAFT_OK;
        if (rc == GRAFT_OK)
            cache->stats.inserts++;
        else
            cache->stats.inserts_refused++;
        graft__prefix_unpin(fresh);
    }
    pthread_mutex_unlock(&cache->mu);
    if (rc == GRAFT_ENOMEM)
        return refuse(cache, snapshot, rc);
    if (rc == GRAFT_OK && fresh == NULL)
        graft_session_close(snapshot); /* a duplicate */
    return rc;
}

int graft_prefix_cache_trim(graft_prefix_cache *cache)
{
    if (cache == NULL || graft_engine_on_thread(cache->engine))
        return GRAFT_EINVAL;
    pthread_mutex_lock(&cache->mu);
    int rc = cache->max_bytes > 0 ? enforce_bytes(cache, NULL) : GRAFT_OK;
    pthread_mutex_unlock(&cache->mu);
    return rc;
}

/* ---- clear, destroy, stats ------------------------------------------------------------------- */

void graft_prefix_cache_clear(graft_prefix_cache *cache)
{
    if (cache == NULL)
        return;
    pthread_mutex_lock(&cache->mu);
    while (cache->oldest != NULL)
        evict(cache, cache->oldest);
    pthread_mutex_unlock(&cache->mu);
}

void graft_prefix_cache_free(graft_prefix_cache *cache)
{
    if (cache == NULL)
        return;
    (void)graft_engine_reclaim_remove(cache->engine, reclaim, cache);
    graft_prefix_cache_clear(cache);
    graft__radix_free(cache->index);
    pthread_mutex_destroy(&cache->mu);
    graft__free(cache);
}

int graft_prefix_cache_stats_get(graft_prefix_cache *cache, graft_prefix_cache_stats *out)
{
    if (cache == NULL || out == NULL || graft_engine_on_thread(cache->engine))
        return GRAFT_EINVAL;
    pthread_mutex_lock(&cache->mu);
    *out = cache->stats;
    out->entries = cache->n_entries;
    int rc = measure_all(cache, &out->bytes);
    pthread_mutex_unlock(&cache->mu);
    return rc;
}
