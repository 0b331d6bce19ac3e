/*
 * test_prefix.c: the prefix cache and prompt capture (src/prefix/, include/graft.h) on
 * stories260K and on a synth gemma3 tiny (sliding window 16, so retention matters).
 *
 * A hit is checked the way it is used: the next prompt token is generated on the returned
 * clone and the logits it is sampled from (seen through the engine's logits tap test hook)
 * are compared by memcmp with a cold prefill on a plain graft_context. Asynchronous results
 * are synchronised with the engine by a blocking call (metrics), which runs after every
 * command queued before it; leaks are checked with graft__alloc_live() after such a call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "captures.h"
#include "fixtures.h"
#include "graft.h"
#include "logits_taps.h"
#include "models.h"

enum { STORIES_CONTEXT = 256, GEMMA_CONTEXT = 128, WINDOW = 16, B = GRAFT_KV_BLOCK_TOKENS };

static graft_model *stories, *gemma;
static graft_context *stories_cold, *gemma_cold;

static int setup(void **state)
{
    (void)state;
    int rc = graft_test_load_models(&stories, &stories_cold, STORIES_CONTEXT, &gemma,
                                    &gemma_cold, GEMMA_CONTEXT, 13, "prefix-gemma3-tiny.gguf");
    return rc == 0 && gemma->hp.sliding_window == WINDOW ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    graft_test_free_models(stories, stories_cold, gemma, gemma_cold);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Fixture: a model's cold reference and an engine on the model with a logits tap.
 */

typedef struct fx {
    graft_context *cold;
    graft_engine *e;
    graft_test_taps tap;
} fx;

static void fx_start_with(fx *f, graft_model *m, const graft_engine_options *o)
{
    memset(f, 0, sizeof *f);
    f->cold = m == stories ? stories_cold : gemma_cold;
    f->tap.n_vocab = m->hp.n_vocab;
    f->e = graft_test_engine(m, o);
    graft__engine_set_tap(f->e, graft_test_tap, &f->tap);
}

static graft_engine_options options(graft_model *m, int32_t max_sessions)
{
    return graft_test_engine_options(max_sessions,
                                     m == stories ? STORIES_CONTEXT : GEMMA_CONTEXT);
}

static void fx_start(fx *f, graft_model *m, int32_t max_sessions)
{
    graft_engine_options o = options(m, max_sessions);
    fx_start_with(f, m, &o);
}

static int32_t sessions_open(graft_engine *e)
{
    return graft_test_metrics(e).sessions_open;
}

/* Shuts down after checking that nothing holds a session or a KV block. */
static void fx_end(fx *f)
{
    graft_test_taps_clear(&f->tap);
    graft_test_engine_end(f->e);
}

static graft_prefix_cache *cache_new(fx *f, int32_t max_entries, size_t max_bytes)
{
    graft_prefix_cache *c = NULL;
    assert_int_equal(graft_prefix_cache_create(f->e, max_entries, max_bytes, &c, NULL), GRAFT_OK);
    return c;
}

static graft_prefix_cache_stats stats(graft_prefix_cache *c)
{
    graft_prefix_cache_stats st;
    assert_int_equal(graft_prefix_cache_stats_get(c, &st), GRAFT_OK);
    return st;
}

/* Deterministic tokens in [3, n_vocab): seed picks the sequence. */
static void make_tokens(const graft_model *m, uint32_t seed, int32_t *out, int32_t n)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (int32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = 3 + (int32_t)((x >> 33) % (uint64_t)(m->hp.n_vocab - 3));
    }
}

/* A new session holding exactly tokens[0, n) (its one sampled token is not committed). */
static graft_session *computed(fx *f, const int32_t *tokens, int32_t n)
{
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(f->e, &s, NULL), GRAFT_OK);
    assert_int_equal(graft_test_run(s, tokens, n, 1), GRAFT_OK);
    assert_int_equal(graft_session_position(s), n);
    return s;
}

static void insert_ok(fx *f, graft_prefix_cache *c, const int32_t *tokens, int32_t n)
{
    assert_int_equal(graft_prefix_cache_insert(c, tokens, (size_t)n, computed(f, tokens, n)),
                     GRAFT_OK);
}

/* The clone s holds tokens[0, m): the logits of tokens[m] generated on it are those of a
 * cold prefill of tokens[0, m + 1), bit for bit. Leaves s at m + 1. */
static void check_clone(fx *f, graft_session *s, const int32_t *tokens, int32_t m)
{
    assert_int_equal(graft_session_position(s), m);
    graft_test_check_next_logits(&f->tap, s, f->cold, tokens, m);
}

/* A lookup of tokens[0, n) hits `want` tokens with the right KV; the clone is closed. */
static void expect_hit(fx *f, graft_prefix_cache *c, const int32_t *tokens, int32_t n,
                       int32_t want)
{
    graft_session *s = NULL;
    int32_t matched = -1;
    assert_int_equal(graft_prefix_cache_lookup(c, tokens, (size_t)n, &s, &matched), GRAFT_OK);
    assert_non_null(s);
    assert_int_equal(matched, want);
    check_clone(f, s, tokens, matched);
    graft_session_close(s);
}

static void expect_miss(graft_prefix_cache *c, const int32_t *tokens, int32_t n, int reason)
{
    graft_session *s = (graft_session *)&s;
    int32_t matched = -1;
    assert_int_equal(graft_prefix_cache_lookup(c, tokens, (size_t)n, &s, &matched), reason);
    assert_null(s);
    assert_int_equal(matched, 0);
}

/* tokens[0, n) of `base` followed by tokens of another sequence. */
static void diverge(const graft_model *m, const int32_t *base, int32_t n, uint32_t seed,
                    int32_t *out, int32_t total)
{
    memcpy(out, base, (size_t)n * sizeof *out);
    make_tokens(m, seed, out + n, total - n);
    if (out[n] == base[n])
        out[n] = base[n] == 3 ? 4 : 3;
}

/* ---------------------------------------------------------------------------------------
 * Ranking
 */

static void test_longest_prefix_wins(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 8, 0);
    int32_t t[61], q[61];
    make_tokens(stories, 1, t, 61);
    insert_ok(&f, c, t, 40);
    insert_ok(&f, c, t, 20); /* more recent, shorter */
    expect_hit(&f, c, t, 61, 40);
    /* a query leaving the longer key midway still takes the longer shared part */
    diverge(stories, t, 30, 2, q, 61);
    expect_hit(&f, c, q, 61, 30);
    /* the final prompt token is never matched: a query equal to a key gets n - 1 */
    expect_hit(&f, c, t, 40, 39);
    expect_hit(&f, c, t, 21, 20);
    expect_miss(c, t, 1, GRAFT_ENOTFOUND);
    diverge(stories, t, 0, 3, q, 61);
    expect_miss(c, q, 61, GRAFT_ENOTFOUND);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.hits, 4);
    assert_int_equal(st.hit_tokens, 40 + 30 + 39 + 20);
    assert_int_equal(st.misses_no_match, 2);
    assert_int_equal(st.lookups, 6);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* Equal offers go to the most recently used snapshot, whatever the insertion order: the
 * hit makes it the most recently used, which the next eviction shows. */
static void test_equal_lengths_prefer_recent(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    int32_t t[48], a[48], b[48], q[48], cc[48];
    make_tokens(stories, 4, t, 48);
    diverge(stories, t, 30, 5, a, 48);
    diverge(stories, t, 30, 6, b, 48);
    diverge(stories, t, 30, 7, q, 48);
    make_tokens(stories, 8, cc, 48);
    for (int order = 0; order < 2; order++) {
        graft_prefix_cache *c = cache_new(&f, 2, 0);
        insert_ok(&f, c, a, 40);
        insert_ok(&f, c, b, 40);
        if (order == 1)
            expect_hit(&f, c, a, 41, 40); /* a becomes the most recent */
        expect_hit(&f, c, q, 48, 30);    /* a and b both offer 30 */
        insert_ok(&f, c, cc, 40);        /* evicts the least recent */
        const int32_t *kept = order == 0 ? b : a, *gone = order == 0 ? a : b;
        expect_hit(&f, c, kept, 41, 40);
        expect_hit(&f, c, gone, 41, 30);
        assert_int_equal(stats(c).evictions, 1);
        graft_prefix_cache_free(c);
    }
    fx_end(&f);
}

static void test_duplicate_insert_refreshes_recency(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 2, 0);
    int32_t a[41], b[41], d[41];
    make_tokens(stories, 9, a, 41);
    make_tokens(stories, 10, b, 41);
    make_tokens(stories, 11, d, 41);
    insert_ok(&f, c, a, 40);
    insert_ok(&f, c, b, 40);
    assert_int_equal(sessions_open(f.e), 2);
    insert_ok(&f, c, a, 40); /* a duplicate: the new snapshot is closed */
    assert_int_equal(sessions_open(f.e), 2);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.inserts, 2);
    assert_int_equal(st.inserts_duplicate, 1);
    insert_ok(&f, c, d, 40); /* evicts b: a was refreshed */
    expect_hit(&f, c, a, 41, 40);
    expect_miss(c, b, 41, GRAFT_ENOTFOUND);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

static void test_hit_refreshes_lru_before_eviction(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 2, 0);
    int32_t a[41], b[41], d[41];
    make_tokens(stories, 12, a, 41);
    make_tokens(stories, 13, b, 41);
    make_tokens(stories, 14, d, 41);
    insert_ok(&f, c, a, 40);
    insert_ok(&f, c, b, 40);
    expect_hit(&f, c, a, 41, 40);
    insert_ok(&f, c, d, 40);
    expect_hit(&f, c, a, 41, 40);
    expect_hit(&f, c, d, 41, 40);
    expect_miss(c, b, 41, GRAFT_ENOTFOUND);
    assert_int_equal(stats(c).evictions, 1);
    assert_int_equal(sessions_open(f.e), 2);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Inserts that are not kept
 */

static void test_disabled_cache_releases_snapshots(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 0, 0);
    int32_t a[41];
    make_tokens(stories, 15, a, 41);
    assert_int_equal(graft_prefix_cache_insert(c, a, 40, computed(&f, a, 40)), GRAFT_ECAPACITY);
    assert_int_equal(sessions_open(f.e), 0);
    expect_miss(c, a, 41, GRAFT_ENOTFOUND);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.inserts, 0);
    assert_int_equal(st.inserts_refused, 1);
    assert_int_equal(st.bytes, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

static void test_invalid_insert_keeps_existing(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t a[41];
    make_tokens(stories, 16, a, 41);
    insert_ok(&f, c, a, 40);
    /* a snapshot whose position is not the key's length, for the same key */
    assert_int_equal(graft_prefix_cache_insert(c, a, 40, computed(&f, a, 30)), GRAFT_EBOUNDARY);
    assert_int_equal(graft_prefix_cache_insert(c, a, 0, computed(&f, a, 30)), GRAFT_EINVAL);
    assert_int_equal(graft_prefix_cache_insert(c, NULL, 30, computed(&f, a, 30)), GRAFT_EINVAL);
    assert_int_equal(graft_prefix_cache_insert(NULL, a, 30, computed(&f, a, 30)), GRAFT_EINVAL);
    assert_int_equal(graft_prefix_cache_insert(c, a, 30, NULL), GRAFT_EINVAL);
    assert_int_equal(sessions_open(f.e), 1);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.inserts_refused, 4);
    expect_hit(&f, c, a, 41, 40);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Retention (gemma3 tiny: window 16, blocks of 32). A snapshot of L tokens keeps the
 * sliding-window blocks from ((L - 16) / 32) * 32 on; a clone at u reads keys from u - 15
 * on (the next query's window), so it can be cloned at u <= L only where (u - 15) / 32
 * reaches that block: u >= 79 for L = 100, u >= 47 for L = 50 or 75.
 */

static int32_t window_first(int32_t length)
{
    return length > WINDOW ? (length - WINDOW) / B : 0;
}

static int32_t window_needed(int32_t u)
{
    return u > WINDOW - 1 ? (u - WINDOW + 1) / B : 0;
}

/* Whether a snapshot of `length` tokens can be cloned at u (kv.h's rule). */
static bool retains(int32_t length, int32_t u)
{
    return u == 0 || window_needed(u) >= window_first(length);
}

static void test_retention_refusal_keeps_snapshot(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, gemma, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[101], q[101];
    make_tokens(gemma, 17, t, 101);
    insert_ok(&f, c, t, 100);
    diverge(gemma, t, 60, 18, q, 101);
    expect_miss(c, q, 101, GRAFT_ERETENTION);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.misses_retention, 1);
    assert_int_equal(st.retention_refusals, 1);
    assert_int_equal(graft_test_metrics(f.e).clones_refused_retention, 1);
    /* the snapshot is still there and serves what it retains */
    diverge(gemma, t, 90, 19, q, 101);
    expect_hit(&f, c, q, 101, 90);
    expect_hit(&f, c, t, 101, 100);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

static void test_older_snapshot_satisfies_refused_newer(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, gemma, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[101], q[101];
    make_tokens(gemma, 20, t, 101);
    insert_ok(&f, c, t, 50);
    insert_ok(&f, c, t, 100);
    diverge(gemma, t, 70, 21, q, 101);
    expect_hit(&f, c, q, 101, 50);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.retention_refusals, 1);
    assert_int_equal(st.entries, 2);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* Every boundary of three nested snapshots (50, 75, 100 tokens): the lookup returns the
 * longest offer the engine retains, backing off per boundary; the engine's retained-boundary
 * query agrees with kv.h's rule at every boundary. */
static void test_per_boundary_backoff(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, gemma, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[101], q[101];
    make_tokens(gemma, 22, t, 101);
    static const int32_t lengths[3] = {50, 75, 100};
    for (int i = 0; i < 3; i++)
        insert_ok(&f, c, t, lengths[i]);
    /* the engine's answer for a session of 100 tokens, at every boundary */
    graft_session *s = computed(&f, t, 100);
    for (int32_t u = 0; u <= 100; u++) {
        int32_t b = -1;
        assert_int_equal(graft_session_retained_boundary(s, u, &b), GRAFT_OK);
        assert_int_equal(b, retains(100, u) ? u : 0);
    }
    int32_t b = 0;
    assert_int_equal(graft_session_retained_boundary(s, 101, &b), GRAFT_EBOUNDARY);
    assert_int_equal(b, -1);
    graft_session_close(s);
    /* the model of the cache: offers ranked by length, then recency; a hit refreshes */
    uint64_t stamp[3] = {1, 2, 3}, clock = 3, refusals = 0;
    int hits = 0;
    for (int32_t shared = 1; shared <= 100; shared++) {
        diverge(gemma, t, shared, 23, q, 101);
        int order[3] = {0, 1, 2};
        int32_t u[3];
        for (int i = 0; i < 3; i++)
            u[i] = shared < lengths[i] ? shared : lengths[i];
        for (int i = 0; i < 3; i++)
            for (int j = i + 1; j < 3; j++)
                if (u[order[j]] > u[order[i]] ||
                    (u[order[j]] == u[order[i]] && stamp[order[j]] > stamp[order[i]])) {
                    int x = order[i];
                    order[i] = order[j];
                    order[j] = x;
                }
        int winner = -1;
        for (int k = 0; k < 3 && winner < 0; k++) {
            if (retains(lengths[order[k]], u[order[k]]))
                winner = order[k];
            else
                refusals++;
        }
        if (winner < 0) {
            expect_miss(c, q, shared + 1, GRAFT_ERETENTION);
            continue;
        }
        hits++;
        stamp[winner] = ++clock;
        graft_session *h = NULL;
        int32_t matched = -1;
        assert_int_equal(graft_prefix_cache_lookup(c, q, (size_t)shared + 1, &h, &matched),
                         GRAFT_OK);
        assert_int_equal(matched, u[winner]);
        if (shared % 7 == 0 || shared == 48 || shared == 79 || shared == 80)
            check_clone(&f, h, q, matched);
        graft_session_close(h);
    }
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.retention_refusals, refusals);
    assert_int_equal(st.hits, hits);
    assert_int_equal(st.misses_retention, 100 - hits);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Capacity and memory
 */

static void test_capacity_refusal_no_leak_no_evict(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 3);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t a[41];
    make_tokens(stories, 24, a, 41);
    insert_ok(&f, c, a, 40);
    graft_session *l1 = NULL, *l2 = NULL;
    assert_int_equal(graft_session_open(f.e, &l1, NULL), GRAFT_OK);
    assert_int_equal(graft_session_open(f.e, &l2, NULL), GRAFT_OK);
    stats(c);
    long live = graft__alloc_live();
    expect_miss(c, a, 41, GRAFT_ECAPACITY);
    /* a capture whose clone meets the same limit */
    graft_prompt_capture *cap = NULL;
    assert_int_equal(graft_prompt_capture_create(c, l1, a, 20, &cap), GRAFT_OK);
    graft_generation *gen = NULL;
    assert_int_equal(graft_test_generate_captured(l1, cap, a, 20, 2, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_ECAPACITY);
    graft_prompt_capture_free(cap);
    graft_session_close(l1);
    graft_session *l3 = NULL;
    assert_int_equal(graft_session_open(f.e, &l3, NULL), GRAFT_OK);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(graft__alloc_live(), live);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.misses_capacity, 1);
    assert_int_equal(st.captures_missed, 1);
    assert_int_equal(graft_test_metrics(f.e).clones_refused_capacity, 2);
    graft_session_close(l3);
    expect_hit(&f, c, a, 41, 40);
    graft_session_close(l2);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* Every single allocation failure in create, insert (split path, with and without a byte
 * bound), lookup and a whole capture: a clean refusal or miss, nothing leaked, the cache
 * and the engine keep serving. */
static void test_alloc_failures(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    int32_t e_key[41], k[41];
    make_tokens(stories, 25, e_key, 41);
    diverge(stories, e_key, 20, 26, k, 41);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    insert_ok(&f, c, e_key, 40);
    expect_hit(&f, c, e_key, 41, 40);
    stats(c);
    long base = graft__alloc_live();

    for (long n = 0;; n++) { /* create */
        graft_prefix_cache *other = (graft_prefix_cache *)&other;
        graft__alloc_fail_after(n, false);
        int rc = graft_prefix_cache_create(f.e, 4, 0, &other, NULL);
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            graft_prefix_cache_free(other);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(other);
        assert_int_equal(graft__alloc_live(), base);
    }
    for (int bounded = 0; bounded < 2; bounded++) { /* insert */
        graft_prefix_cache *ci = cache_new(&f, 4, bounded ? (size_t)1 << 30 : 0);
        for (long n = 0;; n++) {
            graft_prefix_cache_clear(ci);
            insert_ok(&f, ci, e_key, 40);
            stats(ci);
            long live = graft__alloc_live();
            graft_session *snap = computed(&f, k, 40);
            graft__alloc_fail_after(n, false);
            int rc = graft_prefix_cache_insert(ci, k, 40, snap);
            long failures = graft__alloc_failures();
            graft__alloc_fail_after(-1, false);
            graft_prefix_cache_stats st = stats(ci);
            if (rc == GRAFT_OK) {
                assert_int_equal(st.entries, 2);
                expect_hit(&f, ci, k, 41, 40);
                if (failures == 0)
                    break;
                continue;
            }
            assert_int_equal(rc, GRAFT_ENOMEM);
            assert_int_equal(st.entries, 1);
            assert_int_equal(graft__alloc_live(), live);
            expect_hit(&f, ci, e_key, 41, 40);
        }
        graft_prefix_cache_free(ci);
    }
    stats(c);
    base = graft__alloc_live();
    uint64_t nomem = 0;
    for (long n = 0;; n++) { /* lookup */
        graft_session *s = NULL;
        int32_t matched = -1;
        graft__alloc_fail_after(n, false);
        int rc = graft_prefix_cache_lookup(c, e_key, 41, &s, &matched);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            check_clone(&f, s, e_key, matched);
            graft_session_close(s);
            if (failures == 0)
                break;
            continue;
        }
        nomem++;
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(s);
        graft_prefix_cache_stats st = stats(c);
        assert_int_equal(st.entries, 1);
        assert_int_equal(st.misses_nomem, nomem);
        assert_int_equal(graft__alloc_live(), base);
    }
    graft_prefix_cache_clear(c);
    graft_test_metrics(f.e); /* an empty cache measures nothing: sync with the engine itself */
    base = graft__alloc_live();
    for (long n = 0;; n++) { /* a whole capture: create, generate, clone, collect */
        graft_session *s = NULL;
        assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
        graft_prompt_capture *cap = NULL;
        graft_generation *gen = NULL;
        int collected = GRAFT_ENOMEM;
        graft__alloc_fail_after(n, false);
        if (graft_prompt_capture_create(c, s, k, 40, &cap) == GRAFT_OK) {
            if (graft_test_generate_captured(s, cap, k, 40, 2, NULL, NULL, NULL, &gen) ==
                GRAFT_OK)
                graft_generation_wait(gen);
            collected = graft_prompt_capture_collect(cap);
        }
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        graft_generation_free(gen);
        graft_prompt_capture_free(cap);
        assert_true(collected == GRAFT_OK || collected == GRAFT_ENOMEM ||
                    collected == GRAFT_ENOTFOUND);
        assert_int_equal(stats(c).entries, collected == GRAFT_OK);
        if (collected == GRAFT_OK)
            expect_hit(&f, c, k, 41, 40);
        graft_session_close(s);
        graft_prefix_cache_clear(c);
        graft_test_metrics(f.e);
        assert_int_equal(graft__alloc_live(), base);
        if (collected == GRAFT_OK && failures == 0)
            break;
    }
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Lifetimes
 */

static void test_clear_and_destroy_release_own_snapshots(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[41], u[41];
    make_tokens(stories, 27, t, 41);
    make_tokens(stories, 28, u, 41);
    graft_session *live = computed(&f, t, 40), *snap = NULL;
    assert_int_equal(graft_session_clone_wait(live, 40, &snap, NULL), GRAFT_OK);
    assert_int_equal(graft_prefix_cache_insert(c, t, 40, snap), GRAFT_OK);
    insert_ok(&f, c, u, 40);
    graft_session *hit = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(c, t, 41, &hit, &matched), GRAFT_OK);
    assert_int_equal(sessions_open(f.e), 4);
    graft_prefix_cache_clear(c);
    assert_int_equal(sessions_open(f.e), 2);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.hits, 1);
    expect_miss(c, t, 41, GRAFT_ENOTFOUND);
    check_clone(&f, hit, t, matched);
    insert_ok(&f, c, u, 40);
    graft_prefix_cache_free(c);
    assert_int_equal(sessions_open(f.e), 2);
    assert_int_equal(graft_test_run(live, t + 40, 1, 3), GRAFT_OK);
    graft_session_close(live);
    graft_session_close(hit);
    fx_end(&f);
}

static void test_cache_and_sessions_outlive_each_other(void **state)
{
    (void)state;
    long before = graft__alloc_live();
    fx f;
    fx_start(&f, stories, 8);
    int32_t t[41];
    make_tokens(stories, 29, t, 41);
    /* the cache goes first; its clone keeps working */
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    insert_ok(&f, c, t, 40);
    graft_session *hit = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(c, t, 41, &hit, &matched), GRAFT_OK);
    graft_prefix_cache_free(c);
    check_clone(&f, hit, t, matched);
    graft_session_close(hit);
    /* the clone goes first; the cache keeps working */
    c = cache_new(&f, 4, 0);
    insert_ok(&f, c, t, 40);
    assert_int_equal(graft_prefix_cache_lookup(c, t, 41, &hit, &matched), GRAFT_OK);
    graft_session_close(hit);
    expect_hit(&f, c, t, 41, 40);
    /* a clone still open at shutdown, after the cache */
    assert_int_equal(graft_prefix_cache_lookup(c, t, 41, &hit, &matched), GRAFT_OK);
    graft_prefix_cache_free(c);
    assert_int_equal(sessions_open(f.e), 1);
    graft_test_taps_clear(&f.tap);
    assert_int_equal(graft_engine_free(f.e), GRAFT_OK);
    assert_int_equal(graft__alloc_live(), before);
}

/* ---------------------------------------------------------------------------------------
 * Bytes
 */

static void test_bytes_count_blocks_held_alone(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    const int64_t block = graft_test_metrics(f.e).kv_block_bytes;
    graft_prefix_cache *c = cache_new(&f, 8, 0);
    int32_t t[65], u[71];
    make_tokens(stories, 30, t, 65);
    make_tokens(stories, 31, u, 71);
    graft_session *live = computed(&f, t, 64), *s64 = NULL, *s40 = NULL;
    assert_int_equal(graft_session_clone_wait(live, 64, &s64, NULL), GRAFT_OK);
    assert_int_equal(graft_session_clone_wait(live, 40, &s40, NULL), GRAFT_OK);
    assert_int_equal(graft_prefix_cache_insert(c, t, 64, s64), GRAFT_OK);
    assert_int_equal(graft_prefix_cache_insert(c, t, 40, s40), GRAFT_OK);
    assert_int_equal(stats(c).bytes, 0); /* every block is shared with the live session */
    graft_session_close(live);
    assert_int_equal(stats(c).bytes, 2 * block); /* now the cache's alone, counted once */
    insert_ok(&f, c, u, 70);
    assert_int_equal(stats(c).bytes, 5 * block);
    graft_session *hit = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(c, u, 71, &hit, &matched), GRAFT_OK);
    assert_int_equal(stats(c).bytes, 2 * block); /* the hit shares u's three blocks */
    graft_session_close(hit);
    assert_int_equal(stats(c).bytes, 5 * block);
    graft_prefix_cache_clear(c);
    assert_int_equal(stats(c).bytes, 0);
    assert_int_equal(graft_test_metrics(f.e).kv_blocks_used, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

static void test_bytes_bound_evicts_lru(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    const int64_t block = graft_test_metrics(f.e).kv_block_bytes;
    graft_prefix_cache *c = cache_new(&f, 8, (size_t)(4 * block));
    int32_t a[65], b[65], d[65], big[201];
    make_tokens(stories, 32, a, 65);
    make_tokens(stories, 33, b, 65);
    make_tokens(stories, 34, d, 65);
    make_tokens(stories, 35, big, 201);
    insert_ok(&f, c, a, 64);
    insert_ok(&f, c, b, 64);
    assert_int_equal(stats(c).bytes, 4 * block);
    expect_hit(&f, c, a, 65, 64); /* a becomes the most recent */
    insert_ok(&f, c, d, 64);      /* 6 blocks: b goes */
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.bytes, 4 * block);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.evictions, 1);
    expect_miss(c, b, 65, GRAFT_ENOTFOUND);
    /* a snapshot alone over the bound is refused; nothing else goes for it */
    assert_int_equal(graft_prefix_cache_insert(c, big, 200, computed(&f, big, 200)),
                     GRAFT_ECAPACITY);
    st = stats(c);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.inserts_refused, 1);
    assert_int_equal(sessions_open(f.e), 2);
    expect_hit(&f, c, a, 65, 64);
    expect_hit(&f, c, d, 65, 64);
    graft_prefix_cache_clear(c);
    assert_int_equal(stats(c).bytes, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Prompt capture
 */

/* The caller's callbacks behind a capture. */
typedef struct user_cb {
    int updates, settled;
    int close_at, cancel_at, pause_at; /* on this update (1-based); 0: never */
    graft_session *session;
    graft_engine *engine;
} user_cb;

static void user_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    (void)tokens;
    (void)n;
    user_cb *u = user;
    u->updates++;
    if (u->updates == u->cancel_at)
        graft_generation_cancel(gen);
    if (u->updates == u->close_at)
        graft_session_close(u->session);
    if (u->updates == u->pause_at)
        graft__engine_pause(u->engine, true);
}

static void user_settled(graft_generation *gen, void *user)
{
    (void)gen;
    ((user_cb *)user)->settled++;
}

/* Checks that may run on a worker thread of test_threads_share_a_cache: there a failure is
 * counted (a cmocka assert would jump across threads) and the test's thread asserts the
 * count after joining; on the test's thread it is an assert. */
static _Thread_local bool on_worker;
static atomic_int worker_failures;
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (on_worker) {                                                                      \
            if (!(cond)) {                                                                    \
                fprintf(stderr, "%s:%d: check failed on a worker: %s\n", __FILE__, __LINE__, \
                        #cond);                                                               \
                atomic_fetch_add(&worker_failures, 1);                                        \
            }                                                                                 \
        } else {                                                                              \
            assert_true(cond);                                                                \
        }                                                                                     \
    } while (0)

/* Generates tokens[from, n) on s with a capture of tokens[0, n) for c; waits; returns the
 * generation's status in *gen_rc and collect's status. */
static int captured_run(graft_prefix_cache *c, graft_session *s, const int32_t *tokens,
                        int32_t from, int32_t n, int32_t max_new, user_cb *u, int *gen_rc)
{
    graft_prompt_capture *cap = NULL;
    CHECK(graft_prompt_capture_create(c, s, tokens, (size_t)n, &cap) == GRAFT_OK);
    graft_update_cb up = user_update;
    graft_settled_cb st = user_settled;
    void *user = u;
    CHECK(graft_prompt_capture_wrap(cap, &up, &st, &user) == GRAFT_OK);
    CHECK(graft_prompt_capture_wrap(cap, &up, &st, &user) == GRAFT_EINVAL);
    CHECK(user == (void *)cap);
    u->session = s;
    graft_generate_config cfg = graft_test_greedy(max_new);
    graft_generation *gen = NULL;
    *gen_rc = graft_session_generate(s, tokens + from, (size_t)(n - from), &cfg, up, st, user,
                                     &gen);
    if (*gen_rc == GRAFT_OK) {
        *gen_rc = graft_generation_wait(gen);
        CHECK(u->settled == 1);
        graft_generation_free(gen);
    }
    int rc = graft_prompt_capture_collect(cap);
    CHECK(graft_prompt_capture_collect(cap) == GRAFT_EINVAL);
    graft_prompt_capture_free(cap);
    return rc;
}

/* gemma3, a prompt of 105 tokens: at 112 committed the session drops the sliding-window
 * block that a clone at 105 needs (keys from 90 on), so only a snapshot taken before the
 * next forward pass holds it. */
static void test_capture_precedes_retention_loss(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, gemma, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[120];
    make_tokens(gemma, 36, t, 120);
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
    user_cb u = {0};
    int gen_rc;
    assert_int_equal(captured_run(c, s, t, 0, 105, 8, &u, &gen_rc), GRAFT_OK);
    assert_int_equal(gen_rc, GRAFT_OK);
    assert_int_equal(u.updates, 8);
    assert_int_equal(graft_session_position(s), 112);
    graft_session *late = NULL;
    assert_int_equal(graft_session_clone_wait(s, 105, &late, NULL), GRAFT_ERETENTION);
    graft_session_close(s);
    assert_int_equal(stats(c).captures, 1);
    expect_hit(&f, c, t, 106, 105);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

static void test_capture_after_hit_snapshots_full_history(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[61];
    make_tokens(stories, 37, t, 61);
    insert_ok(&f, c, t, 30);
    graft_session *s = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(c, t, 60, &s, &matched), GRAFT_OK);
    assert_int_equal(matched, 30);
    user_cb u = {0};
    int gen_rc;
    assert_int_equal(captured_run(c, s, t, matched, 60, 3, &u, &gen_rc), GRAFT_OK);
    graft_session_close(s);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.captures, 1);
    /* the captured snapshot holds all 60 tokens: its probe history and its logits */
    assert_int_equal(graft_prefix_cache_lookup(c, t, 61, &s, &matched), GRAFT_OK);
    assert_int_equal(matched, 60);
    int32_t history[STORIES_CONTEXT], n = 0;
    float logits[512];
    assert_int_equal(graft__session_probe(s, logits, history, &n), GRAFT_OK);
    assert_int_equal(n, 60);
    assert_memory_equal(history, t, 60 * sizeof(int32_t));
    check_clone(&f, s, t, 60);
    graft_session_close(s);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* Refused at submission, failed at admission, cancelled during prefill, failed during
 * prefill (KV capacity): no update, nothing captured. */
static void test_rejected_generation_captures_nothing(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    const int64_t block = graft_test_metrics(f.e).kv_block_bytes;
    int32_t t[300];
    make_tokens(stories, 38, t, 300);
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
    user_cb u = {0};
    int gen_rc;
    t[5] = 100000; /* out of the vocabulary: refused by graft_session_generate */
    assert_int_equal(captured_run(c, s, t, 0, 10, 2, &u, &gen_rc), GRAFT_ENOTFOUND);
    assert_int_equal(gen_rc, GRAFT_EINVAL);
    make_tokens(stories, 38, t, 300);
    /* admitted, then failed: 150 prompt tokens at position 150 exceed max_context */
    assert_int_equal(graft_test_run(s, t, 150, 1), GRAFT_OK);
    memset(&u, 0, sizeof u);
    assert_int_equal(captured_run(c, s, t, 150, 300, 2, &u, &gen_rc), GRAFT_ENOTFOUND);
    assert_int_equal(gen_rc, GRAFT_ERANGE);
    graft_session_close(s);
    /* cancelled before its first token (queued while the engine is paused) */
    assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
    graft_prompt_capture *cap = NULL;
    assert_int_equal(graft_prompt_capture_create(c, s, t, 100, &cap), GRAFT_OK);
    graft_generation *gen = NULL;
    graft__engine_pause(f.e, true);
    assert_int_equal(graft_test_generate_captured(s, cap, t, 100, 4, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    graft_generation_cancel(gen);
    graft__engine_pause(f.e, false);
    assert_int_equal(graft_generation_wait(gen), GRAFT_ECANCELLED);
    graft_generation_free(gen);
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_ENOTFOUND);
    graft_prompt_capture_free(cap);
    graft_session_close(s);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.captures_missed, 3);
    assert_int_equal(st.entries, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
    /* failed during prefill: the KV pool holds 3 blocks, the prompt needs 4 */
    graft_engine_options o = options(stories, 4);
    o.kv_mem = 3 * (size_t)block;
    fx_start_with(&f, stories, &o);
    c = cache_new(&f, 4, 0);
    assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
    memset(&u, 0, sizeof u);
    assert_int_equal(captured_run(c, s, t, 0, 4 * B, 2, &u, &gen_rc), GRAFT_ENOTFOUND);
    assert_int_equal(gen_rc, GRAFT_ECAPACITY);
    assert_int_equal(u.updates, 0);
    graft_session_close(s);
    assert_int_equal(stats(c).entries, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* Relays a generation's updates to the capture's wrapper, turning some into empty ones. */
typedef struct relay {
    graft_update_cb update;
    graft_settled_cb settled;
    void *user;
    int updates;
    int empty_until; /* updates 1..empty_until reach the capture empty */
} relay;

static void relay_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    relay *r = user;
    r->updates++;
    r->update(gen, tokens, 0, r->user); /* an empty update first, every time */
    if (r->updates > r->empty_until)
        r->update(gen, tokens, n, r->user);
}

static void relay_settled(graft_generation *gen, void *user)
{
    relay *r = user;
    r->settled(gen, r->user);
}

static void test_empty_updates_do_not_trigger(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[41];
    make_tokens(stories, 39, t, 41);
    for (int empty_until = 0; empty_until < 2; empty_until++) {
        graft_session *s = NULL;
        assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
        graft_prompt_capture *cap = NULL;
        assert_int_equal(graft_prompt_capture_create(c, s, t, 40, &cap), GRAFT_OK);
        user_cb u = {0};
        relay r = {user_update, user_settled, &u, 0, empty_until};
        void *user = &u;
        assert_int_equal(graft_prompt_capture_wrap(cap, &r.update, &r.settled, &user), GRAFT_OK);
        r.user = user;
        graft_generate_config cfg = graft_test_greedy(3);
        graft_generation *gen = NULL;
        assert_int_equal(
            graft_session_generate(s, t, 40, &cfg, relay_update, relay_settled, &r, &gen),
            GRAFT_OK);
        assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
        graft_generation_free(gen);
        assert_int_equal(u.updates, 3 + (3 - empty_until)); /* empties are passed on too */
        assert_int_equal(u.settled, 1);
        /* the first update with tokens triggers: at update 1 (position 40) it captures; at
         * update 2 (position 41) the session is past the prompt and the capture misses */
        assert_int_equal(graft_prompt_capture_collect(cap),
                         empty_until == 0 ? GRAFT_OK : GRAFT_EBOUNDARY);
        graft_prompt_capture_free(cap);
        graft_session_close(s);
        assert_int_equal(stats(c).entries, 1);
    }
    expect_hit(&f, c, t, 41, 40);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* The caller's on_update closes the session, or cancels the generation, at the first token:
 * the clone queued before it still holds the prompt. */
static void test_capture_completes_when_callback_closes_source(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    int32_t t[41];
    make_tokens(stories, 40, t, 41);
    for (int mode = 0; mode < 2; mode++) {
        graft_prefix_cache *c = cache_new(&f, 4, 0);
        graft_session *s = NULL;
        assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
        user_cb u = {0};
        if (mode == 0)
            u.close_at = 1;
        else
            u.cancel_at = 1;
        int gen_rc;
        assert_int_equal(captured_run(c, s, t, 0, 40, 10, &u, &gen_rc), GRAFT_OK);
        assert_int_equal(gen_rc, GRAFT_ECANCELLED);
        assert_int_equal(u.updates, 1);
        if (mode == 1)
            graft_session_close(s);
        assert_int_equal(sessions_open(f.e), 1);
        expect_hit(&f, c, t, 41, 40);
        graft_prefix_cache_free(c);
    }
    fx_end(&f);
}

/* The capture keeps no pointer to the caller's handle: the handle may be moved, or the
 * session closed before collect; and a capture bound to a closed session ignores another
 * session, even one that reuses its handle's memory. */
static void test_capture_moved_or_freed_handles(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[41], t2[41];
    make_tokens(stories, 41, t, 41);
    make_tokens(stories, 42, t2, 41);
    /* moved: the handle is copied elsewhere and the original overwritten */
    struct holder {
        graft_session *s;
    } a = {NULL}, b;
    assert_int_equal(graft_session_open(f.e, &a.s, NULL), GRAFT_OK);
    graft_prompt_capture *cap = NULL;
    assert_int_equal(graft_prompt_capture_create(c, a.s, t, 40, &cap), GRAFT_OK);
    b = a;
    memset(&a, 0xa5, sizeof a);
    graft_generation *gen = NULL;
    assert_int_equal(graft_test_generate_captured(b.s, cap, t, 40, 2, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    /* freed: the session is closed before collect */
    graft_session_close(b.s);
    assert_int_equal(sessions_open(f.e), 1);
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_OK);
    graft_prompt_capture_free(cap);
    expect_hit(&f, c, t, 41, 40);
    /* bound to the identity: a capture for a closed session, wrapped on a new one */
    graft_session *s1 = NULL, *s2 = NULL;
    assert_int_equal(graft_session_open(f.e, &s1, NULL), GRAFT_OK);
    uint64_t id1 = graft_session_id(s1);
    assert_int_equal(graft_prompt_capture_create(c, s1, t2, 40, &cap), GRAFT_OK);
    graft_session_close(s1);
    assert_int_equal(graft_session_open(f.e, &s2, NULL), GRAFT_OK);
    assert_true(graft_session_id(s2) != id1);
    user_cb u = {0};
    assert_int_equal(
        graft_test_generate_captured(s2, cap, t2, 40, 2, user_update, user_settled, &u, &gen),
        GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    assert_int_equal(u.updates, 2);
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_EBOUNDARY);
    graft_prompt_capture_free(cap);
    graft_session_close(s2);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.captures, 1);
    assert_int_equal(st.captures_missed, 1);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* A capture freed without collect closes its snapshot: after the clone arrived, and before
 * (the engine paused by the caller's callback holds the clone back). */
static void test_capture_freed_uncollected(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 8);
    graft_prefix_cache *c = cache_new(&f, 4, 0);
    int32_t t[41];
    make_tokens(stories, 43, t, 41);
    for (int early = 0; early < 2; early++) {
        graft_session *s = NULL;
        assert_int_equal(graft_session_open(f.e, &s, NULL), GRAFT_OK);
        graft_prompt_capture *cap = NULL;
        assert_int_equal(graft_prompt_capture_create(c, s, t, 40, &cap), GRAFT_OK);
        user_cb u = {.pause_at = early ? 1 : 0, .engine = f.e};
        graft_generation *gen = NULL;
        assert_int_equal(
            graft_test_generate_captured(s, cap, t, 40, 1, user_update, user_settled, &u, &gen),
            GRAFT_OK);
        assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
        graft_generation_free(gen);
        if (!early)
            assert_int_equal(sessions_open(f.e), 2);
        graft_prompt_capture_free(cap);
        graft__engine_pause(f.e, false);
        graft_test_metrics(f.e); /* the late clone's callback queues its close: one more turn */
        assert_int_equal(sessions_open(f.e), 1);
        graft_session_close(s);
    }
    assert_int_equal(stats(c).entries, 0);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

/* ---------------------------------------------------------------------------------------
 * Threads: several callers share one small cache (evictions while lookups hold pins,
 * captures collected concurrently, byte measurements, a clear).
 */

enum { THREADS = 3, ROUNDS = 10 };

typedef struct worker {
    fx *f;
    graft_prefix_cache *c;
    int index;
    int hits;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    on_worker = true;
    int32_t t[72], history[STORIES_CONTEXT];
    float logits[512];
    make_tokens(stories, 44, t, 24); /* a prefix every prompt shares */
    for (int round = 0; round < ROUNDS; round++) {
        make_tokens(stories, 45 + (uint32_t)((w->index + round) % 4), t + 24, 24);
        make_tokens(stories, 50 + (uint32_t)(w->index * ROUNDS + round), t + 48, 24);
        int32_t n = 48 + (round % 3) * 8;
        graft_session *s = NULL;
        int32_t matched = 0;
        int rc = graft_prefix_cache_lookup(w->c, t, (size_t)n, &s, &matched);
        CHECK(rc == GRAFT_OK || rc == GRAFT_ENOTFOUND);
        if (rc == GRAFT_OK) {
            w->hits++;
            int32_t got = 0;
            CHECK(graft__session_probe(s, logits, history, &got) == GRAFT_OK);
            CHECK(got == matched);
            CHECK(memcmp(history, t, (size_t)matched * sizeof(int32_t)) == 0);
        } else {
            CHECK(graft_session_open(w->f->e, &s, NULL) == GRAFT_OK);
        }
        if (s == NULL)
            return NULL;
        user_cb u = {0};
        int gen_rc;
        rc = captured_run(w->c, s, t, matched, n, 2, &u, &gen_rc);
        CHECK(gen_rc == GRAFT_OK);
        CHECK(rc == GRAFT_OK || rc == GRAFT_ECAPACITY);
        graft_session_close(s);
        if (w->index == 0 && round == ROUNDS / 2)
            graft_prefix_cache_clear(w->c);
    }
    return NULL;
}

static void test_threads_share_a_cache(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, stories, 16);
    const int64_t block = graft_test_metrics(f.e).kv_block_bytes;
    graft_prefix_cache *c = cache_new(&f, 3, (size_t)(6 * block));
    pthread_t threads[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&f, c, i, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &w[i]), 0);
    }
    int hits = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        hits += w[i].hits;
    }
    assert_int_equal(atomic_load(&worker_failures), 0);
    graft_prefix_cache_stats st = stats(c);
    assert_int_equal(st.lookups, THREADS * ROUNDS);
    assert_int_equal(st.hits, hits);
    assert_true(st.hits > 0);
    assert_true(st.entries <= 3);
    assert_int_equal(sessions_open(f.e), st.entries);
    /* the sessions the snapshots shared blocks with are closed: trim enforces the bound */
    assert_int_equal(graft_prefix_cache_trim(c), GRAFT_OK);
    st = stats(c);
    assert_true(st.bytes <= 6 * block);
    assert_int_equal(sessions_open(f.e), st.entries);
    graft_prefix_cache_free(c);
    fx_end(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longest_prefix_wins),
        cmocka_unit_test(test_equal_lengths_prefer_recent),
        cmocka_unit_test(test_duplicate_insert_refreshes_recency),
        cmocka_unit_test(test_hit_refreshes_lru_before_eviction),
        cmocka_unit_test(test_disabled_cache_releases_snapshots),
        cmocka_unit_test(test_invalid_insert_keeps_existing),
        cmocka_unit_test(test_retention_refusal_keeps_snapshot),
        cmocka_unit_test(test_older_snapshot_satisfies_refused_newer),
        cmocka_unit_test(test_per_boundary_backoff),
        cmocka_unit_test(test_capacity_refusal_no_leak_no_evict),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_clear_and_destroy_release_own_snapshots),
        cmocka_unit_test(test_cache_and_sessions_outlive_each_other),
        cmocka_unit_test(test_bytes_count_blocks_held_alone),
        cmocka_unit_test(test_bytes_bound_evicts_lru),
        cmocka_unit_test(test_capture_precedes_retention_loss),
        cmocka_unit_test(test_capture_after_hit_snapshots_full_history),
        cmocka_unit_test(test_rejected_generation_captures_nothing),
        cmocka_unit_test(test_empty_updates_do_not_trigger),
        cmocka_unit_test(test_capture_completes_when_callback_closes_source),
        cmocka_unit_test(test_capture_moved_or_freed_handles),
        cmocka_unit_test(test_capture_freed_uncollected),
        cmocka_unit_test(test_threads_share_a_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
