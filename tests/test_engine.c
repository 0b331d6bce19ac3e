/*
 * test_engine.c: the engine (src/engine/) on stories260K: generation, sessions, clones,
 * callbacks, shutdown, allocation failures, and a property test of copy-on-write isolation.
 *
 * Next-token logits of a session come from the probe test hook (graft__session_probe: its
 * last committed token forwarded on a throwaway clone) and are compared by memcmp with a
 * cold recomputation of its token history on a plain graft_context (same kernels, same KV
 * type). Asynchronous results are synchronised with the engine by a blocking call (metrics),
 * which runs after every command queued before it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "fixtures.h"
#include "graft.h"
#include "models.h"

static const int32_t GOLDEN[10] = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298};
enum { BOS = 1, MAX_CONTEXT = 256, MAX_TOKENS = 512 };

static graft_model *model;
static graft_context *cold; /* the reference for cold recomputation */

static int setup(void **state)
{
    (void)state;
    return graft_test_load_stories(&model, &cold, MAX_CONTEXT);
}

static int teardown(void **state)
{
    (void)state;
    graft_test_free_stories(model, cold);
    return 0;
}

static graft_engine_options small_options(void)
{
    return graft_test_engine_options(8, MAX_CONTEXT);
}

static graft_engine *engine_with(const graft_engine_options *o)
{
    return graft_test_engine(model, o);
}

static graft_engine *engine_new(void)
{
    graft_engine_options o = small_options();
    return engine_with(&o);
}

/* What went wrong inside callbacks, which run on the engine thread: they count it here and
 * never assert there (a failed assert would jump across threads); engine_end asserts it on
 * the test's thread. */
static atomic_int callback_errors;

static void callback_check(bool ok)
{
    if (!ok)
        atomic_fetch_add(&callback_errors, 1);
}

/* Shuts down after checking that nothing holds a KV block once every session is closed and
 * that no callback saw anything wrong. */
static void engine_end(graft_engine *e)
{
    assert_int_equal(atomic_exchange(&callback_errors, 0), 0);
    graft_test_engine_end(e);
}

static graft_session *clone_at(graft_session *s, int32_t upto)
{
    graft_session *c = NULL;
    char *err = NULL;
    int rc = graft_session_clone_wait(s, upto, &c, &err);
    if (rc != GRAFT_OK)
        fprintf(stderr, "clone: %s\n", err ? err : "?");
    graft_free(err);
    assert_int_equal(rc, GRAFT_OK);
    assert_int_equal(graft_session_position(c), upto);
    return c;
}

/* What a generation's callbacks saw (written on the engine thread, read after a wait). */
typedef struct watch {
    int32_t tokens[MAX_TOKENS];
    int n_tokens, updates, settled;
    int cancel_at;       /* cancel on this update (1-based), 0: never */
    int close_at;        /* close the session on this update */
    int clone_at;        /* queue a clone at the committed position on this update */
    int32_t clone_offset; /* ... plus this */
    int pause_at;        /* pause the engine on this update (sets `paused`) */
    graft_generation *cancel_gen; /* cancel this other generation ... */
    int cancel_gen_at;            /* ... on this update */
    long sleep_ns;                /* slow the engine down on each update */
    graft_session *session;
    uint64_t steps_at_update;
    int32_t position_at_update;
    /* the clone's result */
    int clone_status, clone_calls;
    graft_session *clone;
    uint64_t steps_at_clone;
    graft_engine *engine;
} watch;

static atomic_int paused; /* set by a callback that paused the engine */

/* The engine's step count (from callbacks too). */
static uint64_t steps_now(graft_engine *e)
{
    graft_engine_metrics m;
    callback_check(graft_engine_metrics_get(e, &m) == GRAFT_OK);
    return m.steps;
}

static void on_clone(int status, graft_session *clone, void *user)
{
    watch *w = user;
    w->clone_calls++;
    w->clone_status = status;
    w->clone = clone;
    if (w->engine)
        w->steps_at_clone = steps_now(w->engine);
}

static void on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    watch *w = user;
    for (size_t i = 0; i < n && w->n_tokens < MAX_TOKENS; i++)
        w->tokens[w->n_tokens++] = tokens[i];
    w->updates++;
    if (w->updates == w->clone_at) {
        w->position_at_update = graft_session_position(w->session);
        w->steps_at_update = steps_now(w->engine);
        callback_check(graft_session_clone(w->session, w->position_at_update + w->clone_offset,
                                           on_clone, w) == GRAFT_OK);
    }
    if (w->updates == w->pause_at) {
        graft__engine_pause(w->engine, true);
        atomic_store(&paused, 1);
    }
    if (w->updates == w->cancel_gen_at)
        graft_generation_cancel(w->cancel_gen);
    if (w->sleep_ns > 0)
        nanosleep(&(struct timespec){0, w->sleep_ns}, NULL);
    if (w->updates == w->cancel_at)
        graft_generation_cancel(gen);
    if (w->updates == w->close_at)
        graft_session_close(w->session);
}

static void on_settled(graft_generation *gen, void *user)
{
    watch *w = user;
    w->settled++;
    callback_check(graft_generation_finish_reason(gen) != GRAFT_FINISH_NONE);
}

static graft_generate_config greedy(int32_t max_new)
{
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = max_new;
    c.sampling.temperature = 0.0f;
    return c;
}

static graft_generation *start(graft_session *s, const int32_t *tokens, size_t n,
                               const graft_generate_config *c, watch *w)
{
    graft_generation *gen = NULL;
    w->session = s;
    assert_int_equal(graft_session_generate(s, tokens, n, c, on_update, on_settled, w, &gen),
                     GRAFT_OK);
    return gen;
}

/* Runs a generation to its end; returns its status. */
static int run(graft_session *s, const int32_t *tokens, size_t n, const graft_generate_config *c,
               watch *w, graft_finish *finish)
{
    graft_generation *gen = start(s, tokens, n, c, w);
    int rc = graft_generation_wait(gen);
    assert_int_equal(graft_generation_done(gen), 1);
    if (finish)
        *finish = graft_generation_finish_reason(gen);
    graft_generation_free(gen);
    return rc;
}

/* The logits of the token after `history`, computed cold. */
static void cold_logits(const int32_t *history, int32_t n, float *logits)
{
    assert_int_equal(graft_context_seq_reset(cold, 0), GRAFT_OK);
    assert_int_equal(graft_context_eval(cold, history, (size_t)n, logits), GRAFT_OK);
}

/* The session's next-token logits equal a cold recomputation of its history, bit for bit;
 * returns the history's length. */
static int32_t check_session(graft_session *s)
{
    int32_t n_vocab = model->hp.n_vocab, history[MAX_CONTEXT], n = -1;
    float *hot = malloc((size_t)n_vocab * sizeof *hot);
    float *ref = malloc((size_t)n_vocab * sizeof *ref);
    int rc = graft__session_probe(s, hot, history, &n);
    if (rc == GRAFT_EINVAL) {
        assert_int_equal(n, 0); /* empty when probed */
    } else {
        assert_int_equal(rc, GRAFT_OK);
        cold_logits(history, n, ref);
        assert_memory_equal(hot, ref, (size_t)n_vocab * sizeof *hot);
    }
    free(hot);
    free(ref);
    return n;
}

/* The session's history (through the probe). */
static int32_t history_of(graft_session *s, int32_t *history)
{
    float *logits = malloc((size_t)model->hp.n_vocab * sizeof *logits);
    int32_t n = 0;
    assert_int_equal(graft__session_probe(s, logits, history, &n), GRAFT_OK);
    free(logits);
    return n;
}

/* ---------------------------------------------------------------------------------------
 * Generation
 */

static void test_greedy_golden(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = greedy(10);
    int32_t bos = BOS;
    watch w = {.engine = e};
    graft_generation *gen = start(s, &bos, 1, &c, &w);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_LENGTH);
    assert_null(graft_generation_error(gen));
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    assert_int_equal(n, 10);
    assert_memory_equal(out, GOLDEN, sizeof GOLDEN);
    assert_memory_equal(w.tokens, GOLDEN, sizeof GOLDEN);
    assert_int_equal(w.updates, 10);
    assert_int_equal(w.settled, 1);
    /* BOS and nine fed-back tokens are committed; the tenth is not. */
    assert_int_equal(graft_session_position(s), 10);
    graft_generation_metrics gm;
    graft_generation_metrics_get(gen, &gm);
    assert_int_equal(gm.prompt_tokens, 1);
    assert_int_equal(gm.prompt_tokens_computed, 1);
    assert_int_equal(gm.prompt_tokens_reused, 0);
    assert_int_equal(gm.generated_tokens, 10);
    assert_true(gm.time_to_first_token_ns >= gm.queue_wait_ns);
    graft_generation_free(gen);
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.steps, 10);
    assert_int_equal(m.prefill_tokens, 1);
    assert_int_equal(m.decode_tokens, 9);
    assert_int_equal(m.sampled_tokens, 10);
    assert_int_equal(m.generations_length, 1);
    assert_true(m.kv_blocks_used > 0);
    graft_session_close(s);
    engine_end(e);
}

/* Several sessions at once, a small step budget (chunked prefill) and a continuation that
 * feeds back the last sampled token all give the single-session greedy ids. */
static void test_batched_chunked_equal_golden(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    o.max_batch_tokens = 3;
    o.n_threads = 2;
    graft_engine *e = engine_with(&o);
    enum { N = 5 };
    graft_session *s[N];
    graft_generation *gen[N];
    watch w[N];
    int32_t prompt[6] = {BOS, GOLDEN[0], GOLDEN[1], GOLDEN[2], GOLDEN[3], GOLDEN[4]};
    graft_generate_config c = greedy(4);
    for (int i = 0; i < N; i++) {
        s[i] = graft_test_open_session(e);
        memset(&w[i], 0, sizeof w[i]);
        gen[i] = start(s[i], prompt, (size_t)(1 + i), &c, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(graft_generation_wait(gen[i]), GRAFT_OK);
        assert_int_equal(w[i].n_tokens, 4);
        assert_memory_equal(w[i].tokens, &GOLDEN[i], 4 * sizeof(int32_t));
        graft_generation_free(gen[i]);
    }
    /* continue session 0: feed its pending token (GOLDEN[3]) */
    watch more = {0};
    c = greedy(3);
    assert_int_equal(run(s[0], &GOLDEN[3], 1, &c, &more, NULL), GRAFT_OK);
    assert_memory_equal(more.tokens, &GOLDEN[4], 3 * sizeof(int32_t));
    assert_true(graft_test_metrics(e).batch_tokens_max <= 3);
    for (int i = 0; i < N; i++) {
        check_session(s[i]);
        graft_session_close(s[i]);
    }
    engine_end(e);
}

static void test_generate_bad_arguments(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = greedy(2);
    graft_generation *gen = NULL;
    int32_t bad = 100000, ok = BOS;
    assert_int_equal(graft_session_generate(s, &bad, 1, &c, NULL, NULL, NULL, &gen), GRAFT_EINVAL);
    assert_int_equal(graft_session_generate(s, &ok, 0, &c, NULL, NULL, NULL, &gen), GRAFT_EINVAL);
    c.sampling.top_p = 1.5f;
    assert_int_equal(graft_session_generate(s, &ok, 1, &c, NULL, NULL, NULL, &gen), GRAFT_EINVAL);
    c.sampling.top_p = 1.0f;
    c.sampling.mirostat = 3;
    assert_int_equal(graft_session_generate(s, &ok, 1, &c, NULL, NULL, NULL, &gen), GRAFT_EINVAL);
    c.sampling.mirostat = 0;
    c.sampling.dry_multiplier = 0.8f;
    const char *const too_long[] = {"12345678901234567890123456789012345678901"};
    c.dry_sequence_breakers = too_long;
    c.n_dry_sequence_breakers = 1;
    assert_int_equal(graft_session_generate(s, &ok, 1, &c, NULL, NULL, NULL, &gen), GRAFT_EINVAL);
    assert_null(gen);
    assert_int_equal(graft_session_position(s), 0);
    graft_session_close(s);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Clones
 */

static void test_clone_prefix_and_refusals(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = greedy(5);
    int32_t bos = BOS;
    watch w = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w, NULL), GRAFT_OK);
    assert_int_equal(graft_session_position(s), 5);

    graft_session *a = clone_at(s, 3);
    int32_t history[MAX_CONTEXT];
    assert_int_equal(history_of(a, history), 3);
    int32_t expect[3] = {BOS, GOLDEN[0], GOLDEN[1]};
    assert_memory_equal(history, expect, sizeof expect);
    assert_true(graft_test_metrics(e).kv_blocks_shared > 0);
    check_session(a);

    graft_session *b = clone_at(a, 2); /* clone of a clone */
    assert_int_equal(check_session(b), 2);
    graft_session *empty = clone_at(s, 0);
    assert_int_equal(graft_session_position(empty), 0);

    /* a clone starts idle: it generates at once, and continues the source's text */
    watch wa = {0};
    c = greedy(3);
    assert_int_equal(run(a, &GOLDEN[2], 1, &c, &wa, NULL), GRAFT_OK);
    assert_memory_equal(wa.tokens, &GOLDEN[3], 3 * sizeof(int32_t));
    watch we = {0};
    assert_int_equal(run(empty, &bos, 1, &c, &we, NULL), GRAFT_OK);
    assert_memory_equal(we.tokens, GOLDEN, 3 * sizeof(int32_t));

    /* refusals leave the source as it was */
    graft_session *none = (graft_session *)&none;
    char *err = NULL;
    assert_int_equal(graft_session_clone_wait(s, -1, &none, &err), GRAFT_EBOUNDARY);
    assert_null(none);
    assert_non_null(err);
    graft_free(err);
    assert_int_equal(graft_session_clone_wait(s, 6, &none, NULL), GRAFT_EBOUNDARY);
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.clones_done, 3);
    assert_int_equal(m.clones_refused_boundary, 2);
    assert_int_equal(check_session(s), 5);
    assert_int_equal(check_session(a), 6);
    graft_session_close(s);
    graft_session_close(a);
    graft_session_close(b);
    graft_session_close(empty);
    engine_end(e);
}

static void test_clone_capacity_refusal(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    o.max_sessions = 2;
    graft_engine *e = engine_with(&o);
    graft_session *s = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config c = greedy(2);
    watch w = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w, NULL), GRAFT_OK);
    graft_session *a = clone_at(s, 2);
    graft_session *none = NULL;
    assert_int_equal(graft_session_clone_wait(s, 1, &none, NULL), GRAFT_ECAPACITY);
    assert_int_equal(graft_session_open(e, &none, NULL), GRAFT_ECAPACITY);
    assert_int_equal(graft_test_metrics(e).clones_refused_capacity, 1);
    watch w2 = {0};
    assert_int_equal(run(s, &GOLDEN[1], 1, &c, &w2, NULL), GRAFT_OK);
    assert_memory_equal(w2.tokens, &GOLDEN[2], 2 * sizeof(int32_t));
    check_session(s);
    graft_session_close(a);
    graft_session_close(s);
    engine_end(e);
}

/* A clone at a pending token's position, and one queued at the first output: the latter
 * runs before the next forward pass and holds exactly the prompt. */
static void test_clone_at_first_output(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    int32_t prompt[3] = {BOS, GOLDEN[0], GOLDEN[1]};
    graft_generate_config c = greedy(5);
    watch w = {.engine = e, .clone_at = 1};
    graft_generation *gen = start(s, prompt, 3, &c, &w);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    graft_test_metrics(e); /* the clone's answer came before this */
    assert_int_equal(w.clone_calls, 1);
    assert_int_equal(w.clone_status, GRAFT_OK);
    assert_int_equal(w.position_at_update, 3);
    assert_int_equal(w.steps_at_clone, w.steps_at_update);
    assert_int_equal(graft_session_position(w.clone), 3);
    int32_t history[MAX_CONTEXT];
    assert_int_equal(history_of(w.clone, history), 3);
    assert_memory_equal(history, prompt, sizeof prompt);
    check_session(w.clone);
    graft_session_close(w.clone);
    /* the pending token's position is beyond the committed length */
    watch p = {.engine = e, .clone_at = 2, .clone_offset = 1};
    gen = start(s, &GOLDEN[3], 1, &c, &p);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    graft_generation_free(gen);
    graft_test_metrics(e);
    assert_int_equal(p.clone_calls, 1);
    assert_int_equal(p.clone_status, GRAFT_EBOUNDARY);
    assert_null(p.clone);
    graft_session_close(s);
    engine_end(e);
}

static void test_clone_survives_source_close(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config c = greedy(4);
    watch w = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w, NULL), GRAFT_OK);
    graft_session *a = clone_at(s, 4);
    graft_session_close(s);
    watch w2 = {0};
    c = greedy(6);
    assert_int_equal(run(a, &GOLDEN[3], 1, &c, &w2, NULL), GRAFT_OK);
    assert_memory_equal(w2.tokens, &GOLDEN[4], 6 * sizeof(int32_t));
    check_session(a);
    /* an async clone queued just before its source's close */
    watch w3 = {.engine = e};
    assert_int_equal(graft_session_clone(a, 5, on_clone, &w3), GRAFT_OK);
    graft_session_close(a);
    graft_test_metrics(e);
    assert_int_equal(w3.clone_calls, 1);
    assert_int_equal(w3.clone_status, GRAFT_OK);
    assert_int_equal(check_session(w3.clone), 5);
    /* an abandoned result closes its session */
    assert_int_equal(graft_session_clone(w3.clone, 2, NULL, NULL), GRAFT_OK);
    assert_int_equal(graft_test_metrics(e).sessions_open, 1);
    graft_session_close(w3.clone);
    engine_end(e);
}

/* A clone pending when its source's generation is cancelled or its session closed. */
static void test_pending_clone_cancel_close(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    int32_t prompt[2] = {BOS, GOLDEN[0]};
    graft_generate_config c = greedy(20);
    for (int mode = 0; mode < 2; mode++) {
        graft_session *s = graft_test_open_session(e);
        watch w = {.engine = e, .clone_at = 2};
        if (mode == 0)
            w.cancel_at = 2;
        else
            w.close_at = 2;
        graft_generation *gen = start(s, prompt, 2, &c, &w);
        assert_int_equal(graft_generation_wait(gen), GRAFT_ECANCELLED);
        assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_CANCELLED);
        assert_non_null(graft_generation_error(gen));
        graft_generation_free(gen);
        graft_test_metrics(e);
        assert_int_equal(w.settled, 1);
        assert_int_equal(w.updates, 2);
        assert_int_equal(w.clone_calls, 1);
        assert_int_equal(w.clone_status, GRAFT_OK);
        assert_int_equal(w.position_at_update, 3);
        assert_int_equal(check_session(w.clone), 3);
        if (mode == 0) {
            assert_int_equal(check_session(s), 3);
            graft_session_close(s);
        }
        graft_session_close(w.clone);
    }
    engine_end(e);
}

static void count_settled(graft_generation *gen, void *user)
{
    (void)gen;
    (*(int *)user)++;
}

/* Shutdown with a clone, a generation and an open queued, and a generation running. */
static void test_shutdown_answers_everything(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    graft_session *t = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config c = greedy(0);
    c.ignore_eog = 1;
    atomic_store(&paused, 0);
    watch live = {.engine = e, .pause_at = 2};
    graft_generation *running = start(t, &bos, 1, &c, &live);
    while (!atomic_load(&paused))
        ;
    watch w = {0};
    assert_int_equal(graft_session_clone(s, 0, on_clone, &w), GRAFT_OK);
    int queued_settled = 0;
    graft_generation *queued = NULL;
    assert_int_equal(
        graft_session_generate(s, &bos, 1, &c, NULL, count_settled, &queued_settled, &queued),
        GRAFT_OK);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
    assert_int_equal(w.clone_calls, 1);
    assert_int_equal(w.clone_status, GRAFT_ESHUTDOWN);
    assert_null(w.clone);
    assert_int_equal(queued_settled, 1);
    assert_int_equal(graft_generation_wait(queued), GRAFT_ESHUTDOWN);
    assert_int_equal(graft_generation_finish_reason(queued), GRAFT_FINISH_CANCELLED);
    assert_int_equal(graft_generation_wait(running), GRAFT_ESHUTDOWN);
    assert_int_equal(live.settled, 1);
    assert_int_equal(live.updates, 2);
    graft_generation_free(queued);
    graft_generation_free(running);
}

/* ---------------------------------------------------------------------------------------
 * on_settled exactly once per outcome
 */

static void test_settled_once_per_outcome(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    o.max_context = 16;
    graft_engine *e = engine_with(&o);
    graft_session *s = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_finish finish;

    graft_generate_config c = greedy(10);
    int32_t stop = GOLDEN[2];
    c.stop_tokens = &stop;
    c.n_stop_tokens = 1;
    watch w1 = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w1, &finish), GRAFT_OK);
    assert_int_equal(finish, GRAFT_FINISH_STOP);
    assert_int_equal(w1.settled, 1);
    assert_int_equal(w1.n_tokens, 2);
    assert_int_equal(graft_session_position(s), 3);

    /* length: the context fills up (16 positions) */
    c = greedy(0);
    c.ignore_eog = 1;
    watch w2 = {0};
    assert_int_equal(run(s, &GOLDEN[2], 1, &c, &w2, &finish), GRAFT_OK);
    assert_int_equal(finish, GRAFT_FINISH_LENGTH);
    assert_int_equal(w2.settled, 1);
    assert_int_equal(graft_session_position(s), 16);

    /* failure: the prompt does not fit */
    watch w3 = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w3, &finish), GRAFT_ERANGE);
    assert_int_equal(finish, GRAFT_FINISH_FAILED);
    assert_int_equal(w3.settled, 1);
    graft_session_close(s);

    /* cancel from a callback; close from a callback */
    for (int mode = 0; mode < 2; mode++) {
        graft_session *t = graft_test_open_session(e);
        watch w = {0};
        if (mode == 0)
            w.cancel_at = 3;
        else
            w.close_at = 3;
        assert_int_equal(run(t, &bos, 1, &c, &w, &finish), GRAFT_ECANCELLED);
        assert_int_equal(finish, GRAFT_FINISH_CANCELLED);
        assert_int_equal(w.settled, 1);
        assert_int_equal(w.updates, 3);
        if (mode == 0) {
            assert_int_equal(graft_session_position(t), 3);
            graft_session_close(t);
        }
    }

    /* failure: a second generation on a busy session */
    graft_session *u = graft_test_open_session(e);
    watch busy = {0}, second = {0};
    c = greedy(0);
    c.ignore_eog = 1;
    graft__engine_pause(e, true);
    graft_generation *g1 = start(u, &bos, 1, &c, &busy);
    graft_generation *g2 = start(u, &bos, 1, &c, &second);
    graft_generation_cancel(g1);
    graft__engine_pause(e, false);
    assert_int_equal(graft_generation_wait(g2), GRAFT_EINVAL);
    assert_int_equal(graft_generation_finish_reason(g2), GRAFT_FINISH_FAILED);
    assert_int_equal(graft_generation_wait(g1), GRAFT_ECANCELLED);
    assert_int_equal(busy.settled + second.settled, 2);
    graft_generation_free(g1);
    graft_generation_free(g2);

    /* freeing an unfinished generation cancels it; its callbacks still run */
    int settled = 0;
    graft_generation *g3 = NULL;
    graft__engine_pause(e, true);
    assert_int_equal(graft_session_generate(u, &bos, 1, &c, NULL, count_settled, &settled, &g3),
                     GRAFT_OK);
    graft_generation_free(g3);
    graft__engine_pause(e, false);
    graft_test_metrics(e);
    check_session(u);
    graft_session_close(u);
    graft_test_metrics(e);
    assert_int_equal(settled, 1);
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.generations_stop, 1);
    assert_int_equal(m.generations_length, 1);
    assert_int_equal(m.generations_failed, 2);
    assert_int_equal(m.generations_cancelled, 4);
    engine_end(e);
}

/* A KV pool too small for a prompt fails that generation only, at once (it could never fit);
 * the engine keeps serving. */
static void test_kv_capacity_failure(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    graft_engine *probe = engine_new();
    int64_t block_bytes = graft_test_metrics(probe).kv_block_bytes;
    engine_end(probe);
    o.kv_mem = (size_t)block_bytes * 3;
    graft_engine *e = engine_with(&o);
    graft_session *s = graft_test_open_session(e);
    int32_t prompt[MAX_CONTEXT];
    for (int i = 0; i < 4 * GRAFT_KV_BLOCK_TOKENS; i++)
        prompt[i] = GOLDEN[i % 10];
    graft_generate_config c = greedy(1);
    watch w = {0};
    graft_finish finish;
    assert_int_equal(run(s, prompt, 4 * GRAFT_KV_BLOCK_TOKENS, &c, &w, &finish), GRAFT_ECAPACITY);
    assert_int_equal(finish, GRAFT_FINISH_FAILED);
    assert_int_equal(w.settled, 1);
    assert_int_equal(graft_session_position(s), 0); /* it could never fit: refused at once */
    assert_int_equal(graft_test_metrics(e).kv_wait_failures, 1);
    graft_session_close(s);
    graft_session *t = graft_test_open_session(e);
    int32_t bos = BOS;
    watch w2 = {0};
    c = greedy(10);
    assert_int_equal(run(t, &bos, 1, &c, &w2, NULL), GRAFT_OK);
    assert_memory_equal(w2.tokens, GOLDEN, sizeof GOLDEN);
    graft_session_close(t);
    engine_end(e);
}

/* A cancelled prefill keeps exactly the chunks it consumed. */
static void test_cancelled_prefill_keeps_prefix(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    o.max_batch_tokens = 4;
    graft_engine *e = engine_with(&o);
    graft_session *a = graft_test_open_session(e);
    graft_session *b = graft_test_open_session(e);
    int32_t prompt[60];
    for (int i = 0; i < 60; i++)
        prompt[i] = GOLDEN[(i * 7) % 10];
    int32_t bos = BOS;
    graft_generate_config c = greedy(30);
    c.ignore_eog = 1;
    graft__engine_pause(e, true);
    watch wa = {.cancel_gen_at = 3}, wb = {0};
    graft_generation *ga = start(a, &bos, 1, &c, &wa);
    graft_generation *gb = start(b, prompt, 60, &c, &wb);
    wa.cancel_gen = gb;
    graft__engine_pause(e, false);
    assert_int_equal(graft_generation_wait(gb), GRAFT_ECANCELLED);
    assert_int_equal(wb.updates, 0);
    /* steps 1-3 gave b 3 tokens each (a took one); a's third output cancelled b */
    int32_t history[MAX_CONTEXT];
    int32_t n = history_of(b, history);
    assert_int_equal(n, 9);
    assert_memory_equal(history, prompt, (size_t)n * sizeof(int32_t));
    check_session(b);
    assert_int_equal(graft_generation_wait(ga), GRAFT_OK);
    graft_generation_free(ga);
    graft_generation_free(gb);
    graft_session_close(a);
    graft_session_close(b);
    engine_end(e);
}

/* Sliding-window retention on a synth gemma3 (window 16): a clone within the window works,
 * one whose window the session dropped is refused, and a snapshot taken earlier still
 * serves that boundary. */
static void test_sliding_window_retention(void **state)
{
    (void)state;
    graft_model *gemma =
        graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_F32, 11, "engine-gemma3-tiny.gguf");
    assert_non_null(gemma);
    assert_int_equal(gemma->hp.sliding_window, 16);
    graft_engine_options o = small_options();
    o.max_context = 128;
    graft_engine *e = NULL;
    assert_int_equal(graft_engine_create(gemma, &o, &e, NULL), GRAFT_OK);
    int32_t prompt[100];
    for (int i = 0; i < 100; i++)
        prompt[i] = (int32_t)((i * 37 + 5) % gemma->hp.n_vocab);
    graft_session *s = graft_test_open_session(e);
    graft_generate_config c = greedy(1);
    watch w = {0};
    assert_int_equal(run(s, prompt, 50, &c, &w, NULL), GRAFT_OK);
    graft_session *snapshot = clone_at(s, 50);
    watch w2 = {0};
    assert_int_equal(run(s, prompt + 50, 50, &c, &w2, NULL), GRAFT_OK);
    assert_int_equal(graft_session_position(s), 100);
    graft_session *recent = clone_at(s, 90);
    graft_session *none = NULL;
    assert_int_equal(graft_session_clone_wait(s, 50, &none, NULL), GRAFT_ERETENTION);
    assert_int_equal(graft_test_metrics(e).clones_refused_retention, 1);
    graft_session *old = clone_at(snapshot, 50);
    /* each serves its boundary with the logits of a cold run */
    graft_context_options co = graft_context_default_options();
    co.n_ctx = 128;
    co.n_threads = 1;
    graft_context *ref = NULL;
    assert_int_equal(graft_context_create_ex(gemma, &co, &ref, NULL), GRAFT_OK);
    size_t bytes = (size_t)gemma->hp.n_vocab * sizeof(float);
    float *hot = malloc(bytes), *want = malloc(bytes);
    int32_t history[MAX_CONTEXT], n = 0;
    graft_session *check[3] = {old, recent, s};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(graft__session_probe(check[i], hot, history, &n), GRAFT_OK);
        assert_memory_equal(history, prompt, (size_t)(n < 100 ? n : 100) * sizeof(int32_t));
        assert_int_equal(graft_context_seq_reset(ref, 0), GRAFT_OK);
        assert_int_equal(graft_context_eval(ref, history, (size_t)n, want), GRAFT_OK);
        assert_memory_equal(hot, want, bytes);
    }
    free(hot);
    free(want);
    graft_context_free(ref);
    graft_session_close(old);
    graft_session_close(recent);
    graft_session_close(snapshot);
    graft_session_close(s);
    engine_end(e);
    graft_model_free(gemma);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failures
 */

/* Creating an engine fails cleanly wherever an allocation fails (its buffers, KV pool,
 * threads, token table and masks): GRAFT_ENOMEM, nothing left allocated; then it is
 * created and runs. */
static void test_create_alloc_failures(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    graft_engine *warm = engine_with(&o); /* packs the model's weights once, outside the loop */
    graft_test_engine_end(warm);
    long base = graft__alloc_live();
    for (long n = 0;; n++) {
        graft_engine *e = NULL;
        char *err = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft_engine_create(model, &o, &e, &err);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            assert_true(n > 10); /* the loop reached past the first few allocations */
            graft_session *s = graft_test_open_session(e);
            int32_t bos = BOS;
            graft_generate_config c = greedy(3);
            watch w = {0};
            assert_int_equal(run(s, &bos, 1, &c, &w, NULL), GRAFT_OK);
            graft_session_close(s);
            graft_test_engine_end(e);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(e);
        graft_free(err);
        assert_int_equal(graft__alloc_live(), base);
    }
    assert_int_equal(graft__alloc_live(), base);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    graft_engine *e = engine_new();
    graft_session *s = graft_test_open_session(e);
    int32_t bos = BOS;
    graft_generate_config c = greedy(3);
    watch w0 = {0};
    assert_int_equal(run(s, &bos, 1, &c, &w0, NULL), GRAFT_OK);
    graft_test_metrics(e);
    long base = graft__alloc_live();

    /* open */
    for (long n = 0;; n++) {
        graft_session *t = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft_session_open(e, &t, NULL);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            graft_session_close(t);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(t);
        graft_test_metrics(e);
        assert_int_equal(graft__alloc_live(), base);
    }
    /* clone */
    for (long n = 0;; n++) {
        graft_session *t = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft_session_clone_wait(s, 2, &t, NULL);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            check_session(t);
            graft_session_close(t);
            if (failures == 0)
                break;
            continue;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        graft_test_metrics(e);
        assert_int_equal(graft__alloc_live(), base);
        assert_int_equal(graft_test_metrics(e).sessions_open, 1);
    }
    /* generate, its admission and its steps (with every buffer a generation may ask for) */
    c.logprobs = 1;
    c.prompt_logprobs = 1;
    c.top_logprobs = 2;
    int32_t position = graft_session_position(s);
    for (long n = 0;; n++) {
        graft_session *t = clone_at(s, position);
        graft_test_metrics(e);
        long live = graft__alloc_live();
        graft_generation *gen = NULL;
        graft__engine_pause(e, true);
        graft__alloc_fail_after(n, false);
        watch w = {0};
        int rc = graft_session_generate(t, &GOLDEN[2], 1, &c, on_update, on_settled, &w, &gen);
        graft__engine_pause(e, false);
        if (rc == GRAFT_OK)
            rc = graft_generation_wait(gen);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        graft_generation_free(gen);
        graft_test_metrics(e);
        assert_int_equal(graft__alloc_live(), live);
        if (rc == GRAFT_OK) {
            assert_memory_equal(w.tokens, &GOLDEN[3], 3 * sizeof(int32_t));
            graft_session_close(t);
            if (failures == 0)
                break;
            continue;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        if (gen != NULL)
            assert_int_equal(w.settled, 1);
        if (graft_session_position(t) > 0)
            check_session(t);
        graft_session_close(t);
    }
    check_session(s);
    graft_session_close(s);
    engine_end(e);
}

/* ---------------------------------------------------------------------------------------
 * Property test: random interleavings keep every session's logits equal to a cold
 * recomputation of its history.
 */

enum { P_SESSIONS = 6, P_OPS = 120, P_MAX_POSITION = 96 };

/* The last history checked per slot and its reference logits. The reference is a plain
 * graft_context sequence per slot (contiguous KV, never shared or cloned): a history that
 * extends the last one is evaluated from where that one ended, any other from scratch. */
typedef struct checked {
    int32_t history[MAX_CONTEXT];
    int32_t n;
    float *ref;
} checked;

typedef struct prop {
    graft_context *ref;
    graft_engine *e;
    graft_session *s[P_SESSIONS];
    graft_generation *gen[P_SESSIONS];
    watch w[P_SESSIONS];
    checked last[P_SESSIONS];
    float *hot;
    uint64_t rng;
} prop;

static void prop_check(prop *p, int i)
{
    int32_t history[MAX_CONTEXT], n = -1;
    int rc = graft__session_probe(p->s[i], p->hot, history, &n);
    if (rc == GRAFT_EINVAL) {
        assert_int_equal(n, 0); /* empty when probed */
        return;
    }
    assert_int_equal(rc, GRAFT_OK);
    checked *c = &p->last[i];
    if (n != c->n || memcmp(history, c->history, (size_t)n * sizeof *history) != 0) {
        bool extends = c->n > 0 && n > c->n &&
                       memcmp(history, c->history, (size_t)c->n * sizeof *history) == 0;
        int32_t from = extends ? c->n : 0;
        if (!extends)
            assert_int_equal(graft_context_seq_reset(p->ref, i), GRAFT_OK);
        graft_batch_token batch[MAX_CONTEXT];
        for (int32_t k = from; k < n; k++)
            batch[k - from] = (graft_batch_token){i, history[k], k == n - 1};
        assert_int_equal(graft_context_eval_batch(p->ref, batch, (size_t)(n - from), c->ref),
                         GRAFT_OK);
        memcpy(c->history, history, (size_t)n * sizeof *history);
        c->n = n;
    }
    assert_memory_equal(p->hot, c->ref, (size_t)model->hp.n_vocab * sizeof(float));
}

static uint32_t rnd(prop *p, uint32_t n)
{
    p->rng = p->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(p->rng >> 33) % n;
}

static void prop_reap(prop *p, int i)
{
    if (p->gen[i] != NULL && graft_generation_done(p->gen[i])) {
        assert_int_equal(p->w[i].settled, 1);
        graft_generation_free(p->gen[i]);
        p->gen[i] = NULL;
    }
}

static void prop_close(prop *p, int i);

static void prop_generate(prop *p, int i)
{
    prop_reap(p, i);
    if (p->gen[i] != NULL)
        return;
    if (graft_session_position(p->s[i]) > P_MAX_POSITION) {
        prop_close(p, i);
        return;
    }
    int32_t prompt[8];
    int32_t n = 1 + (int32_t)rnd(p, 8);
    for (int32_t k = 0; k < n; k++)
        prompt[k] = (int32_t)rnd(p, (uint32_t)model->hp.n_vocab);
    graft_generate_config c = greedy(1 + (int32_t)rnd(p, 16));
    c.ignore_eog = 1;
    if (rnd(p, 2)) {
        c.sampling = graft_sampling_default();
        c.sampling.seed = p->rng;
    }
    memset(&p->w[i], 0, sizeof p->w[i]);
    p->w[i].sleep_ns = 300000;
    p->gen[i] = start(p->s[i], prompt, (size_t)n, &c, &p->w[i]);
}

static void prop_clone(prop *p, int from, int to)
{
    int32_t position = graft_session_position(p->s[from]);
    int32_t upto = rnd(p, 2) ? position : (int32_t)rnd(p, (uint32_t)position + 1);
    graft_session *c = NULL;
    int rc = graft_session_clone_wait(p->s[from], upto, &c, NULL);
    assert_true(rc == GRAFT_OK || rc == GRAFT_ECAPACITY);
    if (rc == GRAFT_OK)
        p->s[to] = c;
}

static void prop_close(prop *p, int i)
{
    graft_session_close(p->s[i]);
    p->s[i] = NULL;
    if (p->gen[i] != NULL) {
        graft_generation_wait(p->gen[i]);
        prop_reap(p, i);
    }
}

/* A random slot holding a session (want_live) or an empty one; -1 when there is none. */
static int pick(prop *p, bool want_live)
{
    int first = (int)rnd(p, P_SESSIONS);
    for (int k = 0; k < P_SESSIONS; k++) {
        int i = (first + k) % P_SESSIONS;
        if ((p->s[i] != NULL) == want_live)
            return i;
    }
    return -1;
}

static void prop_step(prop *p)
{
    int live = pick(p, true), empty = pick(p, false);
    switch (rnd(p, 8)) {
    case 0:
        if (empty >= 0)
            p->s[empty] = graft_test_open_session(p->e);
        break;
    case 1:
    case 2:
        if (live >= 0)
            prop_generate(p, live);
        break;
    case 3:
    case 4:
        if (live >= 0 && empty >= 0)
            prop_clone(p, live, empty);
        break;
    case 5:
        if (live >= 0 && p->gen[live] != NULL)
            graft_generation_cancel(p->gen[live]);
        break;
    case 6:
        if (live >= 0)
            prop_close(p, live);
        break;
    default:
        if (live >= 0 && p->gen[live] != NULL)
            graft_generation_wait(p->gen[live]);
        break;
    }
}

static void test_property_cow_isolation(void **state)
{
    (void)state;
    graft_engine_options o = small_options();
    o.max_batch_tokens = 7;
    prop p = {.e = engine_with(&o), .rng = 0x9e3779b97f4a7c15ull};
    graft_context_options co = graft_context_default_options();
    co.n_ctx = MAX_CONTEXT;
    co.n_seq = P_SESSIONS;
    co.n_threads = 1;
    assert_int_equal(graft_context_create_ex(model, &co, &p.ref, NULL), GRAFT_OK);
    p.hot = malloc((size_t)model->hp.n_vocab * sizeof(float));
    for (int i = 0; i < P_SESSIONS; i++) {
        p.last[i].ref = malloc((size_t)model->hp.n_vocab * sizeof(float));
        p.last[i].n = -1;
    }
    for (int op = 0; op < P_OPS; op++) {
        prop_step(&p);
        for (int i = 0; i < P_SESSIONS; i++)
            if (p.s[i] != NULL)
                prop_check(&p, i);
    }
    for (int i = 0; i < P_SESSIONS; i++) {
        if (p.gen[i] != NULL)
            graft_generation_cancel(p.gen[i]);
        if (p.s[i] != NULL)
            prop_close(&p, i);
        else if (p.gen[i] != NULL) {
            graft_generation_wait(p.gen[i]);
            prop_reap(&p, i);
        }
    }
    graft_engine_metrics m = graft_test_metrics(p.e);
    assert_true(m.clones_done > 0);
    assert_true(m.kv_cow_copies > 0);
    assert_true(m.generations_started > 5);
    engine_end(p.e);
    free(p.hot);
    for (int i = 0; i < P_SESSIONS; i++)
        free(p.last[i].ref);
    graft_context_free(p.ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_golden),
        cmocka_unit_test(test_batched_chunked_equal_golden),
        cmocka_unit_test(test_generate_bad_arguments),
        cmocka_unit_test(test_clone_prefix_and_refusals),
        cmocka_unit_test(test_clone_capacity_refusal),
        cmocka_unit_test(test_clone_at_first_output),
        cmocka_unit_test(test_clone_survives_source_close),
        cmocka_unit_test(test_pending_clone_cancel_close),
        cmocka_unit_test(test_shutdown_answers_everything),
        cmocka_unit_test(test_settled_once_per_outcome),
        cmocka_unit_test(test_kv_capacity_failure),
        cmocka_unit_test(test_cancelled_prefill_keeps_prefix),
        cmocka_unit_test(test_sliding_window_retention),
        cmocka_unit_test(test_create_alloc_failures),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_property_cow_isolation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
