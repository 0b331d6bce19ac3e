/*
 * prefix.h: the prefix cache's internal interface, shared by the files of src/prefix/.
 *
 * The prefix layer sits above the engine and is written against the public API
 * (include/graft.h) only, as a user's program would be; util/ gives it the allocation seam.
 *
 * Files:
 *   radix.c         the index: a radix tree of token sequences holding one value per key
 *   prefix_cache.c  the cache: entries, LRU list, pins, insert, eviction by count and bytes,
 *                   clear, destroy, stats
 *   lookup.c        lookup: ranking the snapshots that share a prefix, cloning the best one,
 *                   retention backoff
 *   capture.c       prompt capture: the wrapped callbacks and collect
 *
 * Locking: cache->mu guards the index, the entries (their LRU links, stamps and pins) and
 * the counters. It is never held while waiting for the engine: an entry in use outside the
 * lock is pinned instead, and an entry evicted while pinned leaves the index at once but
 * keeps its snapshot open until the last unpin. Lock order: cache->mu, then the engine's
 * queue lock (graft_session_close under cache->mu). On the engine thread cache->mu is only
 * tried (the reclaim hook, which gives nothing when it is busy) or taken by an insert
 * without a byte bound, both of which never wait for the engine while holding it. A capture
 * has its own mutex, taken on the engine thread by its callbacks.
 */
#ifndef GRAFT_PREFIX_H
#define GRAFT_PREFIX_H

#include <pthread.h>
#include <stdbool.h>

#include "graft.h"
#include "util/util.h"

/* ---- radix.c ---------------------------------------------------------------------------------
 * A radix tree (compressed trie) over int32 tokens. Each node holds the edge label from its
 * parent, the depth at the label's end, children sorted by their label's first token, and
 * at most one value: the value of the key that ends at that node. Keys are at least one
 * token long. Removal prunes empty leaves and merges an empty node into its only child.
 * Not thread-safe: the cache's mutex guards it.
 */
typedef struct graft__radix graft__radix;
typedef struct graft__radix_node graft__radix_node;

int graft__radix_create(graft__radix **out);
/* Frees the tree and its nodes; the values are the caller's. NULL is fine. */
void graft__radix_free(graft__radix *tree);

/* Puts `value` (not NULL) at key[0, n), n >= 1. GRAFT_OK: *node is where it is kept (stable
 * until removed). When the key already holds a value, nothing changes, *existing receives
 * that value and *node its node. GRAFT_ENOMEM: nothing changed. */
int graft__radix_insert(graft__radix *tree, const int32_t *key, size_t n, void *value,
                        graft__radix_node **node, void **existing);
/* Removes the value of `node` (from insert); the node may be freed. Never fails. */
void graft__radix_remove(graft__radix *tree, graft__radix_node *node);
/* The value at exactly key[0, n), or NULL. */
void *graft__radix_get(const graft__radix *tree, const int32_t *key, size_t n);

/* Calls visit(value, lcp, user) for every value whose key shares lcp >= 1 leading tokens
 * with query[0, n), in order of non-increasing lcp. O(query path + values visited). */
typedef void (*graft__radix_visit)(void *value, size_t lcp, void *user);
void graft__radix_match(const graft__radix *tree, const int32_t *query, size_t n,
                        graft__radix_visit visit, void *user);

/* Values and nodes (the root included) now held. */
size_t graft__radix_values(const graft__radix *tree);
size_t graft__radix_nodes(const graft__radix *tree);
/* Checks the tree's invariants (depths, sorted children, labels, counts; with `compact`
 * also that no valueless node but the root has fewer than two children, which holds unless
 * a merge failed for memory). O(nodes); for tests. */
bool graft__radix_check(const graft__radix *tree, bool compact);

/* ---- prefix_cache.c --------------------------------------------------------------------------
 */
typedef struct graft__prefix_entry graft__prefix_entry;
struct graft__prefix_entry {
    graft_session *snapshot;   /* owned; its position is the key's length */
    graft__radix_node *node;   /* its key's node while indexed; NULL once evicted */
    uint64_t stamp;            /* recency: the cache clock at its last insert or hit */
    graft__prefix_entry *newer, *older; /* the LRU list, while indexed */
    int32_t pins;              /* users outside the lock (lookups, measurements) */
};

struct graft_prefix_cache {
    graft_engine *engine;
    int32_t max_entries;
    size_t max_bytes;
    pthread_mutex_t mu;
    /* Under mu. */
    graft__radix *index;
    graft__prefix_entry *newest, *oldest;
    int32_t n_entries;
    uint64_t clock;
    graft_prefix_cache_stats stats; /* counters; entries and bytes are filled on demand */
};

/* Under mu: the entry becomes the most recently used. */
void graft__prefix_touch(graft_prefix_cache *cache, graft__prefix_entry *entry);
/* Under mu: pins keep an entry (and its snapshot) alive outside the lock; the last unpin of
 * an evicted entry closes its snapshot and frees it. */
void graft__prefix_pin(graft__prefix_entry *entry);
void graft__prefix_unpin(graft__prefix_entry *entry);
/* Counts a collected capture (takes mu). */
void graft__prefix_count_capture(graft_prefix_cache *cache, bool inserted);

#endif /* GRAFT_PREFIX_H */
