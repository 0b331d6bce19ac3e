/*
 * lookup.c: graft_prefix_cache_lookup (include/graft.h): which snapshot to clone, at which
 * boundary, and what to do when the engine refuses.
 *
 * Offers: every snapshot whose key shares m >= 1 leading tokens with the query offers
 * min(m, n - 1) tokens (the last prompt token is always computed fresh). The radix index
 * lists them by m (radix.c); they are ranked by offered length, then by recency (stamp), and
 * pinned, all under the cache lock. Then, with the lock released, the best offer is cloned
 * (one blocking engine round trip). A token match never proves the KV is there (DESIGN.md
 * invariant 3): on a sliding-window model the clone may be refused for retention when the
 * boundary lies inside the snapshot. The snapshot is then asked for the longest shorter
 * boundary it still retains (graft_session_retained_boundary); a positive one is ranked
 * again among the remaining offers (so it is tried before any shorter offer, and after any
 * longer one), otherwise the next offer is tried. Any other refusal (capacity, memory,
 * shutdown) ends the lookup, since every other clone would meet it too. Finally, under the
 * lock again: the offers are unpinned, a hit's snapshot becomes the most recently used, and
 * the outcome is counted.
 *
 * Locking: cache->mu around gathering and finishing; none while cloning.
 */
#include <stdlib.h>

#include "prefix/prefix.h"

typedef struct offer {
    graft__prefix_entry *entry; /* pinned */
    int32_t upto;               /* the boundary to clone at */
    uint64_t stamp;             /* the entry's recency when gathered */
} offer;

typedef struct offers {
    offer *v; /* (cap) ranked best first */
    size_t n, cap;
    size_t limit; /* n - 1 of the query: the most tokens an offer may give */
} offers;

/* graft__radix_visit: an entry sharing lcp tokens with the query. */
static void gather_one(void *value, size_t lcp, void *user)
{
    offers *o = user;
    graft__prefix_entry *entry = value;
    size_t upto = lcp < o->limit ? lcp : o->limit;
    if (upto > 0 && o->n < o->cap)
        o->v[o->n++] = (offer){entry, (int32_t)upto, entry->stamp};
}

/* Longer offers first; among equal ones the most recently used. */
static bool ranks_before(const offer *a, const offer *b)
{
    return a->upto > b->upto || (a->upto == b->upto && a->stamp > b->stamp);
}

static int compare_offers(const void *pa, const void *pb)
{
    const offer *a = pa, *b = pb;
    return ranks_before(a, b) ? -1 : ranks_before(b, a) ? 1 : 0;
}

/* Offer i's boundary shrank: moves it down past the offers that now rank before it. */
static void rerank(offers *o, size_t i)
{
    while (i + 1 < o->n && ranks_before(&o->v[i + 1], &o->v[i])) {
        offer t = o->v[i];
        o->v[i] = o->v[i + 1];
        o->v[i + 1] = t;
        i++;
    }
}

/* Under the lock: the ranked, pinned offers for tokens[0, n). GRAFT_ENOTFOUND: none. */
static int gather(graft_prefix_cache *cache, const int32_t *tokens, size_t n, offers *o)
{
    if (n < 2 || cache->n_entries == 0)
        return GRAFT_ENOTFOUND;
    o->cap = (size_t)cache->n_entries;
    o->limit = n - 1;
    o->v = graft__malloc(o->cap * sizeof *o->v);
    if (o->v == NULL)
        return GRAFT_ENOMEM;
    graft__radix_match(cache->index, tokens, n, gather_one, o);
    if (o->n == 0)
        return GRAFT_ENOTFOUND;
    qsort(o->v, o->n, sizeof *o->v, compare_offers);
    for (size_t i = 0; i < o->n; i++)
        graft__prefix_pin(o->v[i].entry);
    return GRAFT_OK;
}

/* Without the lock: clones the best offer the engine accepts. On a hit, *hit is its offer. */
static int try_offers(offers *o, graft_session **out, offer **hit, uint64_t *refusals)
{
    size_t i = 0;
    while (i < o->n) {
        offer *f = &o->v[i];
        graft_session *snapshot = f->entry->snapshot;
        int rc = graft_session_clone_wait(snapshot, f->upto, out, NULL);
        if (rc == GRAFT_OK) {
            *hit = f;
            return GRAFT_OK;
        }
        if (rc != GRAFT_ERETENTION)
            return rc;
        (*refusals)++;
        int32_t shorter = 0;
        if (graft_session_retained_boundary(snapshot, f->upto - 1, &shorter) == GRAFT_OK &&
            shorter > 0) {
            f->upto = shorter;
            rerank(o, i);
        } else {
            i++;
        }
    }
    return GRAFT_ERETENTION;
}

/* Under the lock: counts the outcome of a lookup that ran. */
static void count(graft_prefix_cache *cache, int rc, int32_t matched, uint64_t refusals)
{
    graft_prefix_cache_stats *st = &cache->stats;
    st->lookups++;
    st->retention_refusals += refusals;
    switch (rc) {
    case GRAFT_OK:
        st->hits++;
        st->hit_tokens += (uint64_t)matched;
        break;
    case GRAFT_ENOTFOUND:
        st->misses_no_match++;
        break;
    case GRAFT_ERETENTION:
        st->misses_retention++;
        break;
    case GRAFT_ECAPACITY:
        st->misses_capacity++;
        break;
    case GRAFT_ENOMEM:
        st->misses_nomem++;
        break;
    case GRAFT_ESHUTDOWN:
        st->misses_shutdown++;
        break;
    default:
        break;
    }
}

int graft_prefix_cache_lookup(graft_prefix_cache *cache, const int32_t *tokens, size_t n,
                              graft_session **out, int32_t *matched)
{
    if (out != NULL)
        *out = NULL;
    if (matched != NULL)
        *matched = 0;
    if (cache == NULL || out == NULL || matched == NULL || (n > 0 && tokens == NULL))
        return GRAFT_EINVAL;
    offers o = {0};
    offer *hit = NULL;
    uint64_t refusals = 0;
    pthread_mutex_lock(&cache->mu);
    int rc = gather(cache, tokens, n, &o);
    pthread_mutex_unlock(&cache->mu);
    if (rc == GRAFT_OK)
        rc = try_offers(&o, out, &hit, &refusals);
    pthread_mutex_lock(&cache->mu);
    if (hit != NULL) {
        *matched = hit->upto;
        graft__prefix_touch(cache, hit->entry);
    }
    for (size_t i = 0; i < o.n; i++) /* gathered offers are all pinned */
        graft__prefix_unpin(o.v[i].entry);
    if (rc != GRAFT_EINVAL)
        count(cache, rc, *matched, refusals);
    pthread_mutex_unlock(&cache->mu);
    graft__free(o.v);
    return rc;
}
