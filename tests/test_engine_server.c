/*
 * test_engine_server.c: the engine and the prefix cache used as a concurrent server uses
 * them: sessions closed while clones and captures of them are in flight, commands queued
 * from callbacks, steps that fail under a cancel, a KV pool too small for every request at
 * once, sliding-window retention at every boundary, and the API a server needs (clones that
 * pick their boundary, committed tokens, resolved limits, reclaim hooks), and a generation
 * queued right after its session opened taking the very next step.
 *
 * Callbacks run on the engine thread and only record what they see; every assert is made
 * on the test's thread after a wait. Logits are compared by memcmp with a cold computation
 * on a plain graft_context. Asynchronous results are synchronised with the engine by a
 * blocking call (metrics), which runs after every command queued before it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "captures.h"
#include "fixtures.h"
#include "graft.h"
#include "logits_taps.h"
#include "models.h"

enum { CONTEXT = 256, GEMMA_CONTEXT = 160, EXTRA_TOKEN = 509, BOS = 1 };

static graft_model *stories, *gemma;
static graft_context *stories_cold, *gemma_cold;

static int setup(void **state)
{
    (void)state;
    return graft_test_load_models(&stories, &stories_cold, CONTEXT, &gemma, &gemma_cold,
                                  GEMMA_CONTEXT, 29, "server-gemma3-tiny.gguf");
}

static int teardown(void **state)
{
    (void)state;
    graft_test_free_models(stories, stories_cold, gemma, gemma_cold);
    return 0;
}

static graft_engine_options options(graft_model *m, int32_t max_sessions)
{
    return graft_test_engine_options(max_sessions, m == stories ? CONTEXT : GEMMA_CONTEXT);
}

/* Shuts down after checking that nothing holds a KV block once every session is closed. */
static void engine_end(graft_engine *e)
{
    assert_int_equal(graft_test_metrics(e).generations_live, 0);
    graft_test_engine_end(e);
}

static void random_tokens(uint32_t *seed, int32_t *out, int32_t n, int32_t lo, int32_t hi)
{
    for (int32_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        out[i] = lo + (int32_t)((*seed >> 8) % (uint32_t)(hi - lo));
    }
}

/* Cold logits of the token after history[0, n) on `model`. */
static void cold_logits(graft_model *m, const int32_t *history, int32_t n, float *out)
{
    graft_context *ctx = m == stories ? stories_cold : gemma_cold;
    assert_int_equal(graft_context_seq_reset(ctx, 0), GRAFT_OK);
    assert_int_equal(graft_context_eval(ctx, history, (size_t)n, out), GRAFT_OK);
}

/* The session's next-token logits (the probe hook) equal the cold ones of its history. */
static void expect_session_matches_cold(graft_model *m, graft_session *s)
{
    size_t vocab = (size_t)m->hp.n_vocab;
    int32_t *history = malloc(GEMMA_CONTEXT > CONTEXT ? GEMMA_CONTEXT * 4 : CONTEXT * 4);
    float *hot = malloc(vocab * sizeof *hot), *ref = malloc(vocab * sizeof *ref);
    int32_t n = 0;
    assert_int_equal(graft__session_probe(s, hot, history, &n), GRAFT_OK);
    cold_logits(m, history, n, ref);
    assert_memory_equal(hot, ref, vocab * sizeof *hot);
    free(history);
    free(hot);
    free(ref);
}

/* ---------------------------------------------------------------------------------------
 * Item 1: a clone (a prompt capture's) queued behind the close of its session.
 */

typedef struct closer_tap {
    atomic_int fired;
} closer_tap;

/* Logits tap: on the first logits row, before the token is sampled and reported, queues
 * the close of the generation's session, as a client thread that disconnects then would. */
static void close_at_first_logits(graft_generation *gen, const float *logits, void *user)
{
    (void)logits;
    closer_tap *t = user;
    if (atomic_exchange(&t->fired, 1) == 0)
        graft_session_close(graft_generation_session(gen));
}

static void test_capture_queued_behind_close(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 8, 0, &cache, NULL), GRAFT_OK);
    for (int round = 0; round < 50; round++) {
        /* another session holding KV, whose sequence id a clone of freed memory could take */
        graft_session *other = graft_test_open_session(e);
        int32_t warm[3] = {BOS, 300 + round, 301};
        assert_int_equal(graft_test_run(other, warm, 3, 1), GRAFT_OK);
        closer_tap t = {0};
        graft__engine_set_tap(e, close_at_first_logits, &t);
        graft_session *s = graft_test_open_session(e);
        int32_t prompt[6] = {BOS, 20 + round, 40, 41, 42, 43};
        graft_prompt_capture *cap = NULL;
        assert_int_equal(graft_prompt_capture_create(cache, s, prompt, 6, &cap), GRAFT_OK);
        graft_generation *gen = NULL;
        assert_int_equal(
            graft_test_generate_captured(s, cap, prompt, 6, 4, NULL, NULL, NULL, &gen), GRAFT_OK);
        int rc = graft_generation_wait(gen);
        assert_int_equal(rc, GRAFT_ECANCELLED); /* the close cancelled it */
        graft_generation_free(gen);
        /* the clone ran after the close: refused, nothing inserted under this prompt */
        assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_ECLOSED);
        graft_prompt_capture_free(cap);
        graft__engine_set_tap(e, NULL, NULL);
        graft_prefix_cache_stats cs;
        assert_int_equal(graft_prefix_cache_stats_get(cache, &cs), GRAFT_OK);
        assert_int_equal(cs.entries, 0);
        graft_session_close(other);
    }
    assert_int_equal(graft_test_metrics(e).clones_refused_closed, 50);
    graft_prefix_cache_free(cache);
    engine_end(e);
}

/* Many iterations with real threads: the test's thread generates with a capture, a closer
 * thread clones and closes the session at random moments. Every snapshot that made it into
 * the cache gives the cold logits of its key. */

typedef struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    graft_session *session; /* handed to the closer, NULL once it closed it */
    int32_t position_hint;
    bool quit;
    uint32_t seed;
    atomic_int clones_ok, clones_refused;
} mailbox;

static void on_stress_clone(int status, graft_session *clone, void *user)
{
    mailbox *mb = user;
    if (status == GRAFT_OK) {
        atomic_fetch_add(&mb->clones_ok, 1);
        graft_session_close(clone);
    } else {
        atomic_fetch_add(&mb->clones_refused, 1);
    }
}

static void spin_for(uint32_t *seed)
{
    *seed = *seed * 1664525u + 1013904223u;
    struct timespec ts = {0, (long)((*seed >> 8) % 300000u)};
    nanosleep(&ts, NULL);
}

static void *closer_main(void *arg)
{
    mailbox *mb = arg;
    pthread_mutex_lock(&mb->mu);
    for (;;) {
        while (mb->session == NULL && !mb->quit)
            pthread_cond_wait(&mb->cv, &mb->mu);
        if (mb->session == NULL)
            break;
        graft_session *s = mb->session;
        int32_t hint = mb->position_hint;
        pthread_mutex_unlock(&mb->mu);
        spin_for(&mb->seed);
        if (mb->seed & 1) /* a clone of the running session, anywhere up to its prompt */
            (void)graft_session_clone(s, (int32_t)(mb->seed >> 9) % (hint + 1), on_stress_clone, mb);
        if (mb->seed & 2)
            spin_for(&mb->seed);
        graft_session_close(s);
        pthread_mutex_lock(&mb->mu);
        mb->session = NULL;
        pthread_cond_broadcast(&mb->cv);
    }
    pthread_mutex_unlock(&mb->mu);
    return NULL;
}

enum { STRESS_ROUNDS = 1500, STRESS_MAX_PROMPT = 20 };

typedef struct key {
    int32_t tokens[STRESS_MAX_PROMPT + 1];
    int32_t n;
} key;

static void test_close_race_stress(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 16);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 10, 0, &cache, NULL), GRAFT_OK);
    mailbox mb = {.seed = 7};
    pthread_mutex_init(&mb.mu, NULL);
    pthread_cond_init(&mb.cv, NULL);
    pthread_t closer;
    assert_int_equal(pthread_create(&closer, NULL, closer_main, &mb), 0);
    key *keys = calloc(STRESS_ROUNDS, sizeof *keys);
    int n_keys = 0, collected = 0, missed = 0;
    uint32_t seed = 99;
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        key k;
        random_tokens(&seed, &k.n, 1, 2, STRESS_MAX_PROMPT);
        k.tokens[0] = BOS;
        random_tokens(&seed, k.tokens + 1, k.n - 1, 3, 40); /* few tokens: keys collide */
        graft_session *s = graft_test_open_session(e);
        graft_prompt_capture *cap = NULL;
        assert_int_equal(graft_prompt_capture_create(cache, s, k.tokens, (size_t)k.n, &cap),
                         GRAFT_OK);
        graft_generation *gen = NULL;
        int32_t max_new = 1 + (int32_t)(seed % 40); /* often closed mid-way */
        assert_int_equal(graft_test_generate_captured(s, cap, k.tokens, (size_t)k.n, max_new, NULL,
                                                      NULL, NULL, &gen),
                         GRAFT_OK);
        pthread_mutex_lock(&mb.mu);
        mb.session = s;
        mb.position_hint = k.n;
        pthread_cond_broadcast(&mb.cv);
        pthread_mutex_unlock(&mb.mu);
        int rc = graft_generation_wait(gen);
        assert_true(rc == GRAFT_OK || rc == GRAFT_ECANCELLED);
        graft_generation_free(gen);
        rc = graft_prompt_capture_collect(cap);
        graft_prompt_capture_free(cap);
        if (rc == GRAFT_OK) {
            keys[n_keys++] = k;
            collected++;
        } else {
            if (rc != GRAFT_ECLOSED && rc != GRAFT_ENOTFOUND)
                fail_msg("round %d: collect gave %s", round, graft_status_str(rc));
            missed++;
        }
        pthread_mutex_lock(&mb.mu);
        while (mb.session != NULL)
            pthread_cond_wait(&mb.cv, &mb.mu);
        pthread_mutex_unlock(&mb.mu);
    }
    pthread_mutex_lock(&mb.mu);
    mb.quit = true;
    pthread_cond_broadcast(&mb.cv);
    pthread_mutex_unlock(&mb.mu);
    pthread_join(closer, NULL);
    /* every key still cached: its snapshot holds exactly the key's KV */
    int verified = 0;
    for (int i = 0; i < n_keys; i++) {
        key q = keys[i];
        q.tokens[q.n] = EXTRA_TOKEN; /* no key contains it: the longest match is this key */
        graft_session *hit = NULL;
        int32_t matched = 0;
        if (graft_prefix_cache_lookup(cache, q.tokens, (size_t)q.n + 1, &hit, &matched) != GRAFT_OK)
            continue;
        if (matched == q.n) {
            int32_t *got = NULL;
            size_t n_got = 0;
            assert_int_equal(graft_session_tokens(hit, &got, &n_got), GRAFT_OK);
            assert_int_equal(n_got, (size_t)q.n);
            assert_memory_equal(got, q.tokens, n_got * sizeof *got);
            graft_free(got);
            expect_session_matches_cold(stories, hit);
            verified++;
        }
        graft_session_close(hit);
    }
    printf("close race: %d rounds, %d captures inserted, %d missed (closed first), %d clones "
           "made and %d refused by the closer, %d cached snapshots checked against cold\n",
           STRESS_ROUNDS, collected, missed, atomic_load(&mb.clones_ok),
           atomic_load(&mb.clones_refused), verified);
    /* how many closes landed before the first token depends on the machine's timing; every
     * snapshot that made it into the cache must hold its key's KV */
    assert_true(collected > 0 && verified > 0);
    free(keys);
    graft_prefix_cache_free(cache);
    pthread_cond_destroy(&mb.cv);
    pthread_mutex_destroy(&mb.mu);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Item 2: a command queued by a callback of a command runs before the next forward pass.
 */

typedef struct chain {
    graft_session *watched; /* generating all along */
    int32_t position_first, position_second;
    int status_first, status_second, done;
} chain;

static void second_clone_done(int status, graft_session *clone, void *user)
{
    chain *ch = user;
    ch->status_second = status;
    ch->position_second = graft_session_position(ch->watched);
    ch->done = 1;
    graft_session_close(clone);
}

static void first_clone_done(int status, graft_session *clone, void *user)
{
    chain *ch = user;
    ch->status_first = status;
    ch->position_first = graft_session_position(ch->watched);
    graft_session_close(clone);
    ch->status_second = graft_session_clone(ch->watched, 0, second_clone_done, ch);
}

static void refused_settled(graft_generation *gen, void *user)
{
    (void)gen;
    chain *ch = user;
    ch->position_first = graft_session_position(ch->watched);
    ch->status_first = graft_session_clone(ch->watched, 0, second_clone_done, ch);
}

/* The watched generation runs all along: restarted (on a new session) whenever it ended,
 * as on a loaded machine it may finish within a few of the test's rounds. */
static void keep_generating(graft_engine *e, graft_session **s, graft_generation **gen)
{
    if (*gen != NULL && !graft_generation_done(*gen))
        return;
    graft_generation_free(*gen);
    graft_session_close(*s);
    *s = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config c = graft_test_greedy(500);
    assert_int_equal(graft_session_generate(*s, &bos, 1, &c, NULL, NULL, NULL, gen), GRAFT_OK);
}

static void test_callback_commands_before_step(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    o.max_context = 512;
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = NULL;
    graft_generation *gen = NULL;
    int32_t bos = BOS;
    for (int i = 0; i < 20; i++) {
        keep_generating(e, &s, &gen);
        /* a clone's on_done queues another clone */
        chain ch = {.watched = s};
        assert_int_equal(graft_session_clone(s, 0, first_clone_done, &ch), GRAFT_OK);
        (void)graft_test_metrics(e);
        (void)graft_test_metrics(e); /* the second clone was queued by the first's callback */
        assert_int_equal(ch.done, 1);
        assert_int_equal(ch.status_first, GRAFT_OK);
        assert_int_equal(ch.status_second, GRAFT_OK);
        assert_int_equal(ch.position_second, ch.position_first);
        /* a refused admission's on_settled queues a clone */
        keep_generating(e, &s, &gen);
        chain rf = {.watched = s};
        graft_generation *refused = NULL;
        graft_generate_config one = graft_test_greedy(1);
        assert_int_equal(graft_session_generate(s, &bos, 1, &one, NULL, refused_settled, &rf,
                                                &refused),
                         GRAFT_OK);
        int status = graft_generation_wait(refused);
        /* refused while s is busy; admitted only if the watched one ended just before */
        assert_true(status == GRAFT_EINVAL || (status == GRAFT_OK && graft_generation_done(gen)));
        graft_generation_free(refused);
        (void)graft_test_metrics(e);
        assert_int_equal(rf.done, 1);
        assert_int_equal(rf.status_first, GRAFT_OK);
        assert_int_equal(rf.position_second, rf.position_first);
    }
    graft_generation_cancel(gen);
    graft_generation_wait(gen);
    graft_generation_free(gen);
    graft_session_close(s);
    graft_test_engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Item 3: a step that fails settles the generations cancelled meanwhile as cancelled.
 */

typedef struct fail_hook {
    int steps, fail_at;
} fail_hook;

/* Step hook: at step fail_at, the first generation is cancelled (by "another thread", as
 * during the forward pass) and the step fails. */
static int cancel_then_fail(graft_engine *e, graft_generation *const *gens, int32_t n, void *user)
{
    (void)e;
    fail_hook *h = user;
    if (++h->steps != h->fail_at || n < 2)
        return GRAFT_OK;
    graft_generation_cancel(gens[0]);
    return GRAFT_ENOMEM;
}

static void test_failed_step_settles_cancelled(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *a = graft_test_open_session(e), *b = graft_test_open_session(e);
    int32_t bos = BOS;
    fail_hook h = {0, 6};
    graft__engine_set_step_hook(e, cancel_then_fail, &h);
    graft__engine_pause(e, true); /* both admitted before the first step */
    graft_generate_config c = graft_test_greedy(50);
    graft_generation *ga = NULL, *gb = NULL;
    assert_int_equal(graft_session_generate(a, &bos, 1, &c, NULL, NULL, NULL, &ga), GRAFT_OK);
    assert_int_equal(graft_session_generate(b, &bos, 1, &c, NULL, NULL, NULL, &gb), GRAFT_OK);
    graft__engine_pause(e, false);
    assert_int_equal(graft_generation_wait(ga), GRAFT_ECANCELLED);
    assert_int_equal(graft_generation_finish_reason(ga), GRAFT_FINISH_CANCELLED);
    assert_int_equal(graft_generation_wait(gb), GRAFT_ENOMEM);
    assert_int_equal(graft_generation_finish_reason(gb), GRAFT_FINISH_FAILED);
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.step_failures, 1);
    assert_int_equal(m.generations_cancelled, 1);
    assert_int_equal(m.generations_failed, 1);
    /* the failed step left both sessions at their committed positions, usable */
    assert_int_equal(graft_session_position(a), graft_session_position(b));
    graft__engine_set_step_hook(e, NULL, NULL);
    expect_session_matches_cold(stories, a);
    graft_generation_free(ga);
    graft_generation_free(gb);
    graft_session_close(a);
    graft_session_close(b);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Item 4: sliding-window retention, against the forward pass's own key range.
 */

/* The first key a query at pos reads in the model's sliding-window layers. */
static int32_t first_key_read(const graft_model *m, int32_t pos)
{
    for (int32_t il = 0; il < m->hp.n_layer; il++)
        if (m->hp.layer_is_swa[il])
            return graft__model_first_key(&m->hp, il, pos);
    return 0;
}

/* For a session of every other length L over two block periods, and boundaries u <= L: the
 * engine clones at u exactly when the session still holds every key the next query reads
 * ([first key read for u, u)), and a clone computes position u as a cold run does. */
static void test_retention_matches_forward_reads(void **state)
{
    (void)state;
    graft_engine_options o = options(gemma, 8);
    graft_engine *e = graft_test_engine(gemma, &o);
    graft_test_taps tap = {.n_vocab = gemma->hp.n_vocab};
    graft__engine_set_tap(e, graft_test_tap, &tap);
    uint32_t seed = 5;
    int32_t tokens[GEMMA_CONTEXT];
    random_tokens(&seed, tokens, GEMMA_CONTEXT, 0, gemma->hp.n_vocab);
    int accepted = 0, refused = 0;
    float *cold_rows[GEMMA_CONTEXT] = {0}; /* [u]: cold logits of tokens[0, u + 1), once */
    for (int32_t L = 60; L <= 130; L += 2) {
        graft_session *s = graft_test_open_session(e);
        assert_int_equal(graft_test_run(s, tokens, L, 1), GRAFT_OK); /* commits L tokens */
        assert_int_equal(graft_session_position(s), L);
        for (int32_t u = 0; u <= L; u += (L % 7 == 0 ? 1 : 5)) {
            (void)graft_test_metrics(e); /* the engine is idle: its pool may be read */
            bool holds = true;
            for (int32_t p = first_key_read(gemma, u); p < u; p++)
                holds = holds && graft__kv_seq_holds(e->kv, s->seq, p);
            graft_session *c = NULL;
            int rc = graft_session_clone_wait(s, u, &c, NULL);
            if (!holds) {
                assert_int_equal(rc, GRAFT_ERETENTION);
                refused++;
                continue;
            }
            assert_int_equal(rc, GRAFT_OK);
            accepted++;
            if (cold_rows[u] == NULL) {
                cold_rows[u] = malloc((size_t)gemma->hp.n_vocab * sizeof(float));
                assert_non_null(cold_rows[u]);
                assert_int_equal(graft_context_seq_reset(gemma_cold, 0), GRAFT_OK);
                assert_int_equal(graft_context_eval(gemma_cold, tokens, (size_t)u + 1, cold_rows[u]),
                                 GRAFT_OK);
            }
            graft_test_check_next_logits_against(&tap, c, tokens, u, cold_rows[u]);
            graft_session_close(c);
        }
        graft_session_close(s);
    }
    printf("retention: %d clones accepted and checked against cold, %d refused where the "
           "forward pass's keys were gone\n", accepted, refused);
    assert_true(accepted > 0 && refused > 0);
    for (int32_t u = 0; u < GEMMA_CONTEXT; u++)
        free(cold_rows[u]);
    graft__engine_set_tap(e, NULL, NULL);
    graft_test_taps_clear(&tap);
    engine_end(e);
}

/* An exact repeat of a captured prompt hits the cache at L - 1 for every L of a block
 * period (the lookup recomputes the last prompt token on a clone at L - 1). */
static void test_exact_repeat_hits_at_every_length(void **state)
{
    (void)state;
    graft_engine_options o = options(gemma, 8);
    graft_engine *e = graft_test_engine(gemma, &o);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 4, 0, &cache, NULL), GRAFT_OK);
    uint32_t seed = 11;
    int32_t tokens[GEMMA_CONTEXT];
    random_tokens(&seed, tokens, GEMMA_CONTEXT, 0, gemma->hp.n_vocab);
    for (int32_t L = 40; L < 40 + 2 * GRAFT_KV_BLOCK_TOKENS; L++) {
        graft_session *s = graft_test_open_session(e);
        graft_prompt_capture *cap = NULL;
        assert_int_equal(graft_prompt_capture_create(cache, s, tokens, (size_t)L, &cap), GRAFT_OK);
        graft_generation *gen = NULL; /* 20 tokens: on past the window of L - 1 */
        assert_int_equal(
            graft_test_generate_captured(s, cap, tokens, (size_t)L, 20, NULL, NULL, NULL, &gen),
            GRAFT_OK);
        assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
        graft_generation_free(gen);
        assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_OK);
        graft_prompt_capture_free(cap);
        graft_session_close(s);
        graft_session *hit = NULL;
        int32_t matched = 0;
        int rc = graft_prefix_cache_lookup(cache, tokens, (size_t)L, &hit, &matched);
        if (rc != GRAFT_OK)
            fail_msg("exact repeat of %d tokens missed: %s", L, graft_status_str(rc));
        assert_int_equal(matched, L - 1);
        graft_session_close(hit);
        graft_prefix_cache_clear(cache);
    }
    graft_prefix_cache_free(cache);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Item 5: a pool for two full sessions, a cache full of snapshots, eight sessions
 * generating at once: all finish, with the tokens of cold runs; the cache gave back.
 */

enum { FULL_GENS = 8, FULL_PROMPT = 40, FULL_NEW = 60, FULL_SNAPSHOTS = 4, SNAP_LEN = 100 };

typedef struct full_job {
    graft_engine *engine;
    int32_t prompt[FULL_PROMPT];
    int32_t out[FULL_NEW];
    size_t n_out;
    int status;
} full_job;

static void *full_worker(void *arg)
{
    full_job *j = arg;
    graft_session *s = NULL;
    j->status = graft_session_open(j->engine, &s, NULL);
    if (j->status != GRAFT_OK)
        return NULL;
    graft_generate_config c = graft_test_greedy(FULL_NEW);
    graft_generation *gen = NULL;
    j->status = graft_session_generate(s, j->prompt, FULL_PROMPT, &c, NULL, NULL, NULL, &gen);
    if (j->status == GRAFT_OK) {
        j->status = graft_generation_wait(gen);
        const int32_t *t = graft_generation_tokens(gen, &j->n_out);
        memcpy(j->out, t, j->n_out * sizeof *t);
        graft_generation_free(gen);
    }
    graft_session_close(s);
    return NULL;
}

static void expected_tokens(const int32_t *prompt, int32_t *out)
{
    graft_engine_options o = options(stories, 2);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = graft_test_greedy(FULL_NEW);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, prompt, FULL_PROMPT, &c, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    size_t n = 0;
    const int32_t *t = graft_generation_tokens(gen, &n);
    assert_int_equal(n, FULL_NEW);
    memcpy(out, t, n * sizeof *t);
    graft_generation_free(gen);
    graft_session_close(s);
    engine_end(e);
}

static void test_full_pool_waits_and_reclaims(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(stories, &info);
    graft_engine_options o = options(stories, 16);
    o.kv_mem = (size_t)(2 * CONTEXT) * (size_t)info.kv_bytes_per_position;
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 8, 0, &cache, NULL), GRAFT_OK);
    uint32_t seed = 3;
    for (int i = 0; i < FULL_SNAPSHOTS; i++) { /* each holds its blocks alone */
        int32_t t[SNAP_LEN];
        random_tokens(&seed, t, SNAP_LEN, 3, 500);
        graft_session *s = graft_test_open_session(e);
        assert_int_equal(graft_test_run(s, t, SNAP_LEN, 1), GRAFT_OK);
        graft_session *snap = NULL;
        assert_int_equal(graft_session_clone_wait(s, SNAP_LEN, &snap, NULL), GRAFT_OK);
        graft_session_close(s);
        assert_int_equal(graft_prefix_cache_insert(cache, t, SNAP_LEN, snap), GRAFT_OK);
    }
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.kv_blocks_free, 0); /* the snapshots fill the pool */
    full_job jobs[FULL_GENS];
    int32_t expected[FULL_GENS][FULL_NEW];
    pthread_t threads[FULL_GENS];
    for (int i = 0; i < FULL_GENS; i++) {
        jobs[i] = (full_job){.engine = e};
        jobs[i].prompt[0] = BOS;
        random_tokens(&seed, jobs[i].prompt + 1, FULL_PROMPT - 1, 3, 500);
        expected_tokens(jobs[i].prompt, expected[i]);
    }
    for (int i = 0; i < FULL_GENS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, full_worker, &jobs[i]), 0);
    for (int i = 0; i < FULL_GENS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < FULL_GENS; i++) {
        if (jobs[i].status != GRAFT_OK)
            fail_msg("generation %d: %s", i, graft_status_str(jobs[i].status));
        assert_int_equal(jobs[i].n_out, FULL_NEW);
        assert_memory_equal(jobs[i].out, expected[i], sizeof expected[i]);
    }
    m = graft_test_metrics(e);
    graft_prefix_cache_stats cs;
    assert_int_equal(graft_prefix_cache_stats_get(cache, &cs), GRAFT_OK);
    printf("full pool: %lld blocks, %d generations finished, %llu waited for KV, %llu reclaim "
           "calls, %llu snapshots evicted to give KV back\n", (long long)m.kv_blocks_total,
           FULL_GENS, (unsigned long long)m.kv_waits, (unsigned long long)m.kv_reclaims,
           (unsigned long long)cs.evictions);
    assert_true(m.kv_waits > 0);
    assert_true(m.kv_reclaims > 0);
    assert_true(cs.evictions > 0);
    assert_int_equal(m.kv_wait_failures, 0);
    graft_prefix_cache_free(cache);
    engine_end(e);
}

/* A generation that cannot get KV waits kv_wait_ms, then fails with GRAFT_ECAPACITY; one
 * that fits after a close runs. */
static void test_kv_wait_is_bounded(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(stories, &info);
    graft_engine_options o = options(stories, 4);
    o.kv_mem = (size_t)CONTEXT * (size_t)info.kv_bytes_per_position; /* 8 blocks */
    o.kv_wait_ms = 50;
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *hog = graft_test_open_session(e);
    int32_t t[CONTEXT];
    uint32_t seed = 1;
    random_tokens(&seed, t, CONTEXT, 3, 500);
    assert_int_equal(graft_test_run(hog, t, 200, 1), GRAFT_OK); /* 7 blocks held */
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = graft_test_greedy(60);
    graft_generation *gen = NULL;
    uint64_t t0 = graft__now_ns();
    assert_int_equal(graft_session_generate(s, t, 40, &c, NULL, NULL, NULL, &gen), GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_ECAPACITY);
    assert_true(graft__now_ns() - t0 >= 50000000u);
    assert_non_null(strstr(graft_generation_error(gen), "kv_wait_ms"));
    graft_generation_free(gen);
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.kv_wait_failures, 1);
    assert_int_equal(m.generations_waiting_kv, 0);
    /* a generation waiting for KV starts once the session holding it closes */
    assert_int_equal(graft_session_generate(s, t, 40, &c, NULL, NULL, NULL, &gen), GRAFT_OK);
    graft_session_close(hog);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    graft_session_close(s);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Items 6, 7, 8, 9: the prefix cache from callbacks, an insert that evicts itself, an
 * over-long prompt, a first token that stops.
 */

typedef struct from_callback {
    graft_prefix_cache *cache;
    graft_prompt_capture *cap;
    graft_session *snapshot; /* given to the insert made from the callback */
    int insert_rc, collect_rc;
} from_callback;

static void cache_calls_settled(graft_generation *gen, void *user)
{
    (void)gen;
    from_callback *fc = user;
    int32_t key[1] = {BOS};
    fc->insert_rc = graft_prefix_cache_insert(fc->cache, key, 1, fc->snapshot);
    fc->collect_rc = graft_prompt_capture_collect(fc->cap);
}

/* An insert into a byte-bounded cache and a collect, made from an engine callback, are
 * refused with GRAFT_EINVAL (they would wait for the engine thread itself). */
static void test_cache_calls_from_callbacks(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *bounded = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 8, 1 << 20, &bounded, NULL), GRAFT_OK);
    graft_session *s = graft_test_open_session(e), *spare = graft_test_open_session(e);
    int32_t bos = BOS;
    assert_int_equal(graft_test_run(spare, &bos, 1, 1), GRAFT_OK);
    graft_session *snapshot = NULL;
    assert_int_equal(graft_session_clone_wait(spare, 1, &snapshot, NULL), GRAFT_OK);
    /* a capture whose collect is called from the generation's own on_settled */
    graft_prompt_capture *cap = NULL;
    assert_int_equal(graft_prompt_capture_create(bounded, s, &bos, 1, &cap), GRAFT_OK);
    from_callback fc = {bounded, cap, snapshot, 0, 0};
    graft_generation *gen = NULL;
    assert_int_equal(
        graft_test_generate_captured(s, cap, &bos, 1, 2, NULL, cache_calls_settled, &fc, &gen),
        GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    assert_int_equal(fc.insert_rc, GRAFT_EINVAL);
    assert_int_equal(fc.collect_rc, GRAFT_EINVAL);
    /* the capture is still whole: collected on the test's thread it inserts */
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_OK);
    graft_prompt_capture_free(cap);
    /* the insert from the callback closed its snapshot; only the capture is cached */
    graft_prefix_cache_stats cs;
    assert_int_equal(graft_prefix_cache_stats_get(bounded, &cs), GRAFT_OK);
    assert_int_equal(cs.entries, 1);
    graft_prefix_cache_free(bounded);
    graft_session_close(s);
    graft_session_close(spare);
    engine_end(e);
}

/* Inserting a snapshot larger than the byte bound, with the measurement of it alone failing
 * for memory, never reports as kept a snapshot the insert evicted. */
static void test_insert_never_reports_evicted_as_kept(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    int64_t block = graft_test_metrics(e).kv_block_bytes;
    int outcomes[3] = {0, 0, 0}; /* kept, refused too big, refused for memory */
    for (long fail_at = 0; fail_at < 40; fail_at++) {
        graft_prefix_cache *c = NULL;
        assert_int_equal(graft_prefix_cache_create(e, 8, (size_t)block, &c, NULL), GRAFT_OK);
        uint32_t seed = 21;
        int32_t a[40], b[100];
        random_tokens(&seed, a, 40, 3, 500);
        random_tokens(&seed, b, 100, 3, 500);
        /* an entry that shares every block with a live session: it costs nothing */
        graft_session *live = graft_test_open_session(e);
        assert_int_equal(graft_test_run(live, a, 40, 1), GRAFT_OK);
        graft_session *snap_a = NULL;
        assert_int_equal(graft_session_clone_wait(live, 40, &snap_a, NULL), GRAFT_OK);
        assert_int_equal(graft_prefix_cache_insert(c, a, 40, snap_a), GRAFT_OK);
        /* a snapshot that holds 4 blocks alone, over the bound of one block */
        graft_session *src = graft_test_open_session(e);
        assert_int_equal(graft_test_run(src, b, 100, 1), GRAFT_OK);
        graft_session *snap_b = NULL;
        assert_int_equal(graft_session_clone_wait(src, 100, &snap_b, NULL), GRAFT_OK);
        graft_session_close(src);
        (void)graft_test_metrics(e);
        graft__alloc_fail_after(fail_at, false);
        int rc = graft_prefix_cache_insert(c, b, 100, snap_b);
        graft__alloc_fail_after(-1, false);
        graft_prefix_cache_stats cs;
        assert_int_equal(graft_prefix_cache_stats_get(c, &cs), GRAFT_OK);
        int32_t q[101];
        memcpy(q, b, sizeof b);
        q[100] = EXTRA_TOKEN;
        graft_session *hit = NULL;
        int32_t matched = 0;
        bool cached = graft_prefix_cache_lookup(c, q, 101, &hit, &matched) == GRAFT_OK &&
                      matched == 100;
        graft_session_close(hit);
        if (rc == GRAFT_OK)
            assert_true(cached); /* the bug: OK for a snapshot evicted at its insert */
        else
            assert_false(cached);
        outcomes[rc == GRAFT_OK ? 0 : rc == GRAFT_ECAPACITY ? 1 : 2]++;
        graft_prefix_cache_free(c);
        graft_session_close(live);
    }
    printf("insert over the byte bound under injected failures: %d kept, %d refused too big, "
           "%d refused for memory\n", outcomes[0], outcomes[1], outcomes[2]);
    assert_true(outcomes[1] > 0);
    engine_end(e);
}

static void test_overlong_prompt_is_erange(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 2);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = graft_test_open_session(e);
    int32_t *t = calloc(CONTEXT + 1, sizeof *t);
    for (int i = 0; i <= CONTEXT; i++)
        t[i] = 5 + i % 100;
    graft_generate_config c = graft_test_greedy(1);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, t, CONTEXT + 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_ERANGE);
    assert_null(gen);
    /* at a position: admitted, then refused with the numbers */
    assert_int_equal(graft_test_run(s, t, 10, 1), GRAFT_OK);
    assert_int_equal(graft_session_generate(s, t, CONTEXT - 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_ERANGE);
    assert_non_null(strstr(graft_generation_error(gen), "exceed max_context"));
    graft_generation_free(gen);
    free(t);
    graft_session_close(s);
    engine_end(e);
}

/* A generation whose first sampled token stops it leaves the session holding exactly the
 * prompt: the capture takes it. */
static void test_capture_when_first_token_stops(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 8, 0, &cache, NULL), GRAFT_OK);
    int32_t prompt[4] = {BOS, 403, 407, 261};
    /* the greedy token after the prompt, to use as the stop token */
    graft_session *probe = graft_test_open_session(e);
    graft_generate_config one = graft_test_greedy(1);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(probe, prompt, 4, &one, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    size_t n = 0;
    int32_t first = graft_generation_tokens(gen, &n)[0];
    graft_generation_free(gen);
    graft_session_close(probe);
    graft_session *s = graft_test_open_session(e);
    graft_prompt_capture *cap = NULL;
    assert_int_equal(graft_prompt_capture_create(cache, s, prompt, 4, &cap), GRAFT_OK);
    graft_update_cb up = NULL;
    graft_settled_cb st = NULL;
    void *user = NULL;
    assert_int_equal(graft_prompt_capture_wrap(cap, &up, &st, &user), GRAFT_OK);
    graft_generate_config c = graft_test_greedy(10);
    c.stop_tokens = &first;
    c.n_stop_tokens = 1;
    assert_int_equal(graft_session_generate(s, prompt, 4, &c, up, st, user, &gen), GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_STOP);
    graft_generation_tokens(gen, &n);
    assert_int_equal(n, 0);
    graft_generation_free(gen);
    assert_int_equal(graft_session_position(s), 4);
    assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_OK);
    graft_prompt_capture_free(cap);
    graft_session_close(s);
    int32_t q[5] = {BOS, 403, 407, 261, EXTRA_TOKEN};
    graft_session *hit = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(cache, q, 5, &hit, &matched), GRAFT_OK);
    assert_int_equal(matched, 4);
    expect_session_matches_cold(stories, hit);
    graft_session_close(hit);
    graft_prefix_cache_free(cache);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * The API a server needs.
 */

typedef struct range_result {
    atomic_int done;
    int status;
    int32_t boundary;
    int32_t donor_position; /* the donor's committed position when the clone ran */
    graft_session *donor;
    graft_session *clone;
} range_result;

static void on_range(int status, graft_session *clone, void *user)
{
    range_result *r = user;
    r->status = status;
    r->boundary = clone ? graft_session_position(clone) : -1;
    r->donor_position = graft_session_position(r->donor);
    r->clone = clone;
    atomic_store(&r->done, 1);
}

static void test_clone_range_picks_boundary_when_it_runs(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 8);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *donor = graft_test_open_session(e);
    int32_t prompt[100];
    uint32_t seed = 8;
    prompt[0] = BOS;
    random_tokens(&seed, prompt + 1, 99, 3, 500);
    graft_generate_config c = graft_test_greedy(100);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(donor, prompt, 100, &c, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    /* while the donor prefills and decodes: clones of its prompt, never past max_upto */
    int taken = 0;
    for (int i = 0; i < 1000 && !graft_generation_done(gen); i++) {
        range_result r = {.donor = donor};
        assert_int_equal(graft_session_clone_range(donor, 0, 99, on_range, &r), GRAFT_OK);
        (void)graft_test_metrics(e);
        assert_int_equal(atomic_load(&r.done), 1);
        assert_int_equal(r.status, GRAFT_OK);
        assert_true(r.boundary == (r.donor_position < 99 ? r.donor_position : 99));
        int32_t *got = NULL;
        size_t n = 0;
        assert_int_equal(graft_session_tokens(r.clone, &got, &n), GRAFT_OK);
        assert_int_equal(n, (size_t)r.boundary);
        if (n > 0)
            assert_memory_equal(got, prompt, n * sizeof *got);
        graft_free(got);
        if (r.boundary > 0) {
            expect_session_matches_cold(stories, r.clone);
            taken++;
        }
        graft_session_close(r.clone);
    }
    assert_true(taken > 0);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    /* refusals: nothing committed in range, a bad range */
    graft_session *c2 = NULL;
    assert_int_equal(graft_session_clone_range_wait(donor, 250, 300, &c2, NULL), GRAFT_EBOUNDARY);
    assert_int_equal(graft_session_clone_range_wait(donor, 10, 5, &c2, NULL), GRAFT_EBOUNDARY);
    assert_int_equal(graft_session_clone_range_wait(donor, -1, 5, &c2, NULL), GRAFT_EBOUNDARY);
    assert_int_equal(graft_session_clone_range_wait(donor, 150, 1000, &c2, NULL), GRAFT_OK);
    assert_int_equal(graft_session_position(c2), graft_session_position(donor));
    graft_session_close(c2);
    graft_session_close(donor);
    engine_end(e);
}

static void test_clone_range_retention(void **state)
{
    (void)state;
    graft_engine_options o = options(gemma, 4);
    graft_engine *e = graft_test_engine(gemma, &o);
    graft_session *s = graft_test_open_session(e);
    int32_t t[GEMMA_CONTEXT];
    uint32_t seed = 4;
    random_tokens(&seed, t, GEMMA_CONTEXT, 0, gemma->hp.n_vocab);
    assert_int_equal(graft_test_run(s, t, 100, 1), GRAFT_OK); /* keeps keys from 64 on */
    graft_session *c = NULL;
    assert_int_equal(graft_session_clone_range_wait(s, 5, 40, &c, NULL), GRAFT_ERETENTION);
    assert_int_equal(graft_session_clone_range_wait(s, 5, 100, &c, NULL), GRAFT_OK);
    assert_int_equal(graft_session_position(c), 100);
    graft_session_close(c);
    graft_session_close(s);
    engine_end(e);
}

static void tokens_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    (void)tokens;
    (void)n;
    int *rc = user;
    int32_t *copy = NULL;
    size_t count = 0;
    if (*rc == 1) {
        *rc = graft_session_tokens(graft_generation_session(gen), &copy, &count);
        if (*rc == GRAFT_OK && count != 3)
            *rc = GRAFT_EFORMAT;
        graft_free(copy);
    }
}

static void test_session_tokens(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 4);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = graft_test_open_session(e);
    int32_t *t = NULL;
    size_t n = 7;
    assert_int_equal(graft_session_tokens(s, &t, &n), GRAFT_OK);
    assert_null(t);
    assert_int_equal(n, 0);
    int32_t prompt[3] = {BOS, 30, 31};
    int from_callback = 1;
    graft_generate_config c = graft_test_greedy(3);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, prompt, 3, &c, tokens_update, NULL,
                                            &from_callback, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    assert_int_equal(from_callback, GRAFT_OK);
    size_t n_out = 0;
    const int32_t *out = graft_generation_tokens(gen, &n_out);
    assert_int_equal(graft_session_tokens(s, &t, &n), GRAFT_OK);
    assert_int_equal(n, 3 + n_out - 1); /* the last sampled token is not committed */
    assert_memory_equal(t, prompt, sizeof prompt);
    assert_memory_equal(t + 3, out, (n_out - 1) * sizeof *out);
    graft_free(t);
    graft_generation_free(gen);
    assert_int_equal(graft_session_tokens(NULL, &t, &n), GRAFT_EINVAL);
    graft_session_close(s);
    engine_end(e);
}

/* graft_prefix_cache_insert checks the key against the snapshot's committed tokens. */
static void test_insert_checks_key(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 4);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_prefix_cache *c = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 4, 0, &c, NULL), GRAFT_OK);
    int32_t t[8] = {BOS, 10, 11, 12, 13, 14, 15, 16}, wrong[8];
    memcpy(wrong, t, sizeof t);
    wrong[5] = 99;
    graft_session *s = graft_test_open_session(e);
    assert_int_equal(graft_test_run(s, t, 8, 1), GRAFT_OK);
    graft_session *snap = NULL;
    assert_int_equal(graft_session_clone_wait(s, 8, &snap, NULL), GRAFT_OK);
    assert_int_equal(graft_prefix_cache_insert(c, wrong, 8, snap), GRAFT_EINVAL);
    graft_prefix_cache_stats cs;
    assert_int_equal(graft_prefix_cache_stats_get(c, &cs), GRAFT_OK);
    assert_int_equal(cs.entries, 0);
    assert_int_equal(cs.inserts_refused, 1);
    assert_int_equal(graft_session_clone_wait(s, 8, &snap, NULL), GRAFT_OK);
    assert_int_equal(graft_prefix_cache_insert(c, t, 8, snap), GRAFT_OK);
    graft_prefix_cache_free(c);
    graft_session_close(s);
    engine_end(e);
}

static void test_engine_config(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(stories, &info);
    assert_int_equal(info.head_dim_v, info.head_dim);
    assert_int_equal(info.kv_bytes_per_position,
                     (int64_t)info.n_layer * info.n_head_kv * (info.head_dim + info.head_dim_v) * 2);
    graft_engine_options o = options(stories, 3);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_engine_config cfg;
    graft_engine_get_config(e, &cfg);
    assert_int_equal(cfg.options.max_sessions, 3);
    assert_int_equal(cfg.options.max_context, CONTEXT);
    assert_int_equal(cfg.options.max_batch_tokens, 64);
    assert_int_equal(cfg.options.kv_wait_ms, 10000);
    assert_non_null(cfg.options.kernels);
    assert_int_equal(cfg.kv_block_positions, GRAFT_KV_BLOCK_POSITIONS);
    assert_int_equal(cfg.kv_bytes_per_position, info.kv_bytes_per_position);
    assert_int_equal(cfg.options.kv_mem, graft_engine_default_kv_mem(stories, &o));
    assert_int_equal(cfg.options.kv_mem,
                     3 * (CONTEXT + GRAFT_ENGINE_SPARE_POSITIONS) * info.kv_bytes_per_position);
    assert_int_equal(cfg.kv_blocks_total, graft_test_metrics(e).kv_blocks_total);
    assert_int_equal(graft_engine_on_thread(e), 0);
    engine_end(e);
    o.kv_f32 = 1;
    assert_int_equal(graft_engine_default_kv_mem(stories, &o),
                     2 * 3 * (CONTEXT + GRAFT_ENGINE_SPARE_POSITIONS) * info.kv_bytes_per_position);
}

static void count_reclaim(graft_engine *e, int64_t bytes_short, void *user)
{
    (void)e;
    (void)bytes_short;
    atomic_fetch_add((atomic_int *)user, 1);
}

static void test_reclaim_hooks(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 4);
    graft_engine *e = graft_test_engine(stories, &o);
    atomic_int calls = 0;
    assert_int_equal(graft_engine_reclaim_add(e, NULL, NULL), GRAFT_EINVAL);
    assert_int_equal(graft_engine_reclaim_add(e, count_reclaim, &calls), GRAFT_OK);
    assert_int_equal(graft_engine_reclaim_remove(e, count_reclaim, &calls), GRAFT_OK);
    assert_int_equal(graft_engine_reclaim_remove(e, count_reclaim, &calls), GRAFT_ENOTFOUND);
    assert_int_equal(graft_engine_reclaim_add(e, count_reclaim, &calls), GRAFT_OK);
    engine_end(e); /* a hook still registered is freed at shutdown */
}

/* A model loaded for its tokenizer alone tokenizes, and contexts and engines refuse it. */
static void test_vocab_only_model(void **state)
{
    (void)state;
    char path[1024];
    graft_test_model_path(path, sizeof path, "vocab/ggml-vocab-qwen2.gguf");
    graft_model *v = NULL;
    assert_int_equal(graft_model_load_vocab(path, &v, NULL), GRAFT_OK);
    graft_model_info info;
    graft_model_get_info(v, &info);
    assert_string_equal(info.arch, "qwen2");
    assert_true(info.n_vocab > 150000);
    int32_t *t = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(v, "<|im_start|>user", 16, 0, 1, &t, &n), GRAFT_OK);
    assert_int_equal(n, 2);
    graft_free(t);
    graft_engine *e = NULL;
    graft_context *ctx = NULL;
    assert_int_equal(graft_engine_create(v, NULL, &e, NULL), GRAFT_EINVAL);
    assert_int_equal(graft_context_create(v, 64, &ctx, NULL), GRAFT_EINVAL);
    assert_null(e);
    assert_null(ctx);
    graft_model_free(v);
}

/* ---------------------------------------------------------------------------------------
 * A request's round trips cost no step: a generation queued right after its session was
 * opened, while another generation keeps the engine stepping, is in the very next step.
 */

enum { SLOW_STEP_MS = 20, FOLLOW_UP_ATTEMPTS = 5 };

typedef struct next_step_hook {
    atomic_int steps; /* steps counted: each only once its hook has slept */
    _Atomic(graft_session *) watched;
    atomic_int watched_step; /* the first step with the watched session's generation, or 0 */
} next_step_hook;

/* Step hook: notes the first step holding the watched session's generation, then holds
 * the step SLOW_STEP_MS before counting it, so that a step which started as soon as a
 * blocking call was answered is not counted yet when its caller reads the count. */
static int slow_steps(graft_engine *e, graft_generation *const *gens, int32_t n, void *user)
{
    (void)e;
    next_step_hook *h = user;
    int step = atomic_load(&h->steps) + 1;
    graft_session *watched = atomic_load(&h->watched);
    for (int32_t i = 0; i < n; i++)
        if (watched != NULL && gens[i]->session == watched &&
            atomic_load(&h->watched_step) == 0)
            atomic_store(&h->watched_step, step);
    struct timespec pause = {0, SLOW_STEP_MS * 1000000L};
    nanosleep(&pause, NULL);
    atomic_store(&h->steps, step);
    return GRAFT_OK;
}

static void test_generation_after_open_takes_next_step(void **state)
{
    (void)state;
    graft_engine_options o = options(stories, 4);
    graft_engine *e = graft_test_engine(stories, &o);
    next_step_hook h = {0};
    graft__engine_set_step_hook(e, slow_steps, &h);
    graft_session *busy = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config long_run = graft_test_greedy(CONTEXT - 8);
    long_run.ignore_eog = 1;
    graft_generation *running = NULL;
    assert_int_equal(graft_session_generate(busy, &bos, 1, &long_run, NULL, NULL, NULL, &running),
                     GRAFT_OK);
    struct timespec tick = {0, 1000000L};
    while (atomic_load(&h.steps) < 2)
        nanosleep(&tick, NULL);
    /* Without the engine awaiting the opener's next command, the step after the open starts
     * at once and the generation waits for the one after it, every time. With it, only a
     * caller slower than the engine's bound misses the next step: a few attempts allow it. */
    bool in_next_step = false;
    for (int attempt = 0; attempt < FOLLOW_UP_ATTEMPTS && !in_next_step; attempt++) {
        graft_session *s = NULL;
        assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
        int answered_after = atomic_load(&h.steps);
        atomic_store(&h.watched_step, 0);
        atomic_store(&h.watched, s);
        graft_generate_config one = graft_test_greedy(1);
        graft_generation *g = NULL;
        assert_int_equal(graft_session_generate(s, &bos, 1, &one, NULL, NULL, NULL, &g), GRAFT_OK);
        assert_int_equal(graft_generation_wait(g), GRAFT_OK);
        in_next_step = atomic_load(&h.watched_step) == answered_after + 1;
        atomic_store(&h.watched, NULL);
        graft_generation_free(g);
        graft_session_close(s);
    }
    assert_true(in_next_step);
    assert_false(graft_generation_done(running));
    graft_generation_cancel(running);
    graft_generation_wait(running);
    graft_generation_free(running);
    graft_session_close(busy);
    graft__engine_set_step_hook(e, NULL, NULL);
    engine_end(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_queued_behind_close),
        cmocka_unit_test(test_close_race_stress),
        cmocka_unit_test(test_callback_commands_before_step),
        cmocka_unit_test(test_failed_step_settles_cancelled),
        cmocka_unit_test(test_retention_matches_forward_reads),
        cmocka_unit_test(test_exact_repeat_hits_at_every_length),
        cmocka_unit_test(test_full_pool_waits_and_reclaims),
        cmocka_unit_test(test_kv_wait_is_bounded),
        cmocka_unit_test(test_cache_calls_from_callbacks),
        cmocka_unit_test(test_insert_never_reports_evicted_as_kept),
        cmocka_unit_test(test_overlong_prompt_is_erange),
        cmocka_unit_test(test_capture_when_first_token_stops),
        cmocka_unit_test(test_clone_range_picks_boundary_when_it_runs),
        cmocka_unit_test(test_clone_range_retention),
        cmocka_unit_test(test_session_tokens),
        cmocka_unit_test(test_insert_checks_key),
        cmocka_unit_test(test_engine_config),
        cmocka_unit_test(test_reclaim_hooks),
        cmocka_unit_test(test_vocab_only_model),
        cmocka_unit_test(test_generation_after_open_takes_next_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
