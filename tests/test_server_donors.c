/*
 * test_server_donors.c: active prefix reuse (src/server/donors.c), in process against a real
 * engine and prefix cache, where the donors' positions are set exactly; then through HTTP,
 * where requests really arrive together.
 *
 * Checked: a donor's prompt is taken and the answer is the cold one; the min-tokens rule
 * (the cache wins ties); a recipient waits for a prefilling donor, and is released to the
 * cache's offer when its donor goes away; a donor closed while a clone of it is queued; a
 * donor refused for retention (gemma3, sliding window) falls back, counted by reason; two
 * identical long prompts sent together compute the prefix once; n > 1 with a donor; the
 * prompts of one request (a batch) share their prefix as separate requests do.
 * Assertions run on the test's thread; other threads only record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include <jansson.h>
#include "fixtures.h"
#include "graft.h"
#include "models.h"
#include "serve_client.h"
#include "server/server.h"

enum { CONTEXT = 256, MIN_TOKENS = 8, N_GEN = 10, BOS = 1 };

static graft_model *stories, *gemma;
static server http_srv; /* the HTTP test's, stopped by teardown too should a check fail */

static int setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    stories = graft_test_load_model(GRAFT_TEST_STORIES);
    gemma = graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_F32, 31, "donors-gemma3-tiny.gguf");
    return stories && gemma ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    graft_model_free(stories);
    graft_model_free(gemma);
    if (http_srv.pid > 0)
        graft_test_stop_server(&http_srv);
    curl_global_cleanup();
    return 0;
}

typedef struct rig {
    graft_engine *engine;
    graft_prefix_cache *cache;
    graft__donors donors;
} rig;

static void rig_up(rig *r, graft_model *m, int32_t wait_ms)
{
    graft_engine_options o = graft_test_engine_options(32, CONTEXT);
    o.max_batch_tokens = 16; /* prompts take several steps */
    r->engine = graft_test_engine(m, &o);
    assert_int_equal(graft_prefix_cache_create(r->engine, 8, 0, &r->cache, NULL), GRAFT_OK);
    assert_int_equal(graft__donors_init(&r->donors, MIN_TOKENS, wait_ms), GRAFT_OK);
}

static void rig_down(rig *r)
{
    graft__donors_free(&r->donors);
    graft_prefix_cache_free(r->cache);
    graft_test_engine_end(r->engine);
}

static void make_prompt(int32_t *out, int32_t n, uint32_t seed)
{
    if (n <= 0)
        return;
    out[0] = BOS;
    for (int32_t i = 1; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        out[i] = 300 + (int32_t)((seed >> 8) % 150);
    }
}

/* A session holding prompt[0, upto), committed. */
static graft_session *session_at(rig *r, const int32_t *prompt, int32_t upto)
{
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(r->engine, &s, NULL), GRAFT_OK);
    if (upto > 0)
        assert_int_equal(graft_test_run(s, prompt, upto, 1), GRAFT_OK);
    assert_int_equal(graft_session_position(s), upto);
    return s;
}

/* The greedy answer after prompt[0, n) on s, which holds prompt[0, reused). */
static void answer(graft_session *s, const int32_t *prompt, int32_t n, int32_t reused,
                   int32_t out[N_GEN])
{
    graft_generate_config c = graft_test_greedy(N_GEN);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_position(s), reused);
    assert_int_equal(graft_session_generate(s, prompt + reused, (size_t)(n - reused), &c, NULL,
                                            NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    size_t k = 0;
    const int32_t *t = graft_generation_tokens(gen, &k);
    assert_int_equal(k, N_GEN);
    memcpy(out, t, sizeof(int32_t) * N_GEN);
    graft_generation_free(gen);
}

static void expect_cold_answer(rig *r, graft_session *s, const int32_t *prompt, int32_t n,
                               int32_t reused)
{
    int32_t warm[N_GEN], cold[N_GEN];
    answer(s, prompt, n, reused, warm);
    graft_session *fresh = session_at(r, prompt, 0);
    answer(fresh, prompt, n, 0, cold);
    graft_session_close(fresh);
    assert_memory_equal(warm, cold, sizeof warm);
}

/* A recipient as the server makes one: the cache's offer, then the donors. */
typedef struct recipient {
    rig *r;
    const int32_t *prompt;
    int32_t n;
    graft_session *session;
    int32_t reused;
    graft__donor *self;
    graft__donor_result result;
    int status;
} recipient;

static void *recipient_main(void *arg)
{
    recipient *x = arg;
    if (graft_prefix_cache_lookup(x->r->cache, x->prompt, (size_t)x->n, &x->session,
                                  &x->reused) != GRAFT_OK) {
        x->reused = 0;
        graft_session_open(x->r->engine, &x->session, NULL);
    }
    x->status = graft__donors_join(&x->r->donors, x->prompt, (size_t)x->n, true, &x->session,
                                   &x->reused, &x->self, &x->result);
    return NULL;
}

static recipient arrive(rig *r, const int32_t *prompt, int32_t n)
{
    recipient x = {.r = r, .prompt = prompt, .n = n};
    recipient_main(&x);
    assert_int_equal(x.status, GRAFT_OK);
    return x;
}

static void depart(rig *r, recipient *x)
{
    graft__donors_leave(&r->donors, x->self);
    graft_session_close(x->session);
}

/* A donor: session holding prompt[0, position) registered with the whole prompt. */
typedef struct donor {
    graft_session *session;
    graft__donor *self;
} donor;

static donor register_donor(rig *r, const int32_t *prompt, int32_t n, int32_t position)
{
    donor d = {session_at(r, prompt, position), NULL};
    int32_t reused = position;
    graft__donor_result res;
    assert_int_equal(graft__donors_join(&r->donors, prompt, (size_t)n, false, &d.session, &reused,
                                        &d.self, &res),
                     GRAFT_OK);
    assert_false(res.from_donor);
    return d;
}

static void drop_donor(rig *r, donor *d)
{
    graft__donors_leave(&r->donors, d->self);
    graft_session_close(d->session);
}

static void test_donor_taken_answer_unchanged(void **state)
{
    (void)state;
    rig r;
    rig_up(&r, stories, 0);
    int32_t a[60], b[70];
    make_prompt(a, 60, 1);
    memcpy(b, a, 50 * sizeof *b);
    make_prompt(b + 50, 20, 2);
    donor d = register_donor(&r, a, 60, 60);

    recipient x = arrive(&r, b, 70); /* shares 50 tokens */
    assert_true(x.result.from_donor);
    assert_false(x.result.waited);
    assert_int_equal(x.reused, 50);
    expect_cold_answer(&r, x.session, b, 70, 50);
    depart(&r, &x);

    recipient same = arrive(&r, a, 60); /* the whole prompt but its last token */
    assert_int_equal(same.reused, 59);
    expect_cold_answer(&r, same.session, a, 60, 59);
    depart(&r, &same);
    assert_int_equal(atomic_load(&r.donors.successes), 2);
    assert_int_equal(atomic_load(&r.donors.tokens_saved), 50 + 59);
    drop_donor(&r, &d);
    rig_down(&r);
}

/* The cache holds 30 tokens of the prompt; a donor offering 30 + MIN_TOKENS - 1 is not
 * taken, one offering 30 + MIN_TOKENS is. With active reuse off nothing is taken. */
static void test_min_tokens_rule_cache_wins_ties(void **state)
{
    (void)state;
    rig r;
    rig_up(&r, stories, 0);
    int32_t p[80];
    make_prompt(p, 80, 3);
    assert_int_equal(graft_prefix_cache_insert(r.cache, p, 30, session_at(&r, p, 30)), GRAFT_OK);

    donor short_donor = register_donor(&r, p, 80, 30 + MIN_TOKENS - 1);
    recipient x = arrive(&r, p, 80);
    assert_false(x.result.from_donor);
    assert_int_equal(x.reused, 30);
    expect_cold_answer(&r, x.session, p, 80, 30);
    depart(&r, &x);
    drop_donor(&r, &short_donor);

    donor enough = register_donor(&r, p, 80, 30 + MIN_TOKENS);
    recipient y = arrive(&r, p, 80);
    assert_true(y.result.from_donor);
    assert_int_equal(y.reused, 30 + MIN_TOKENS);
    expect_cold_answer(&r, y.session, p, 80, 30 + MIN_TOKENS);
    depart(&r, &y);

    r.donors.min_tokens = 0; /* off */
    recipient z = arrive(&r, p, 80);
    assert_false(z.result.from_donor);
    assert_int_equal(z.reused, 30);
    depart(&r, &z);
    drop_donor(&r, &enough);
    rig_down(&r);
}

/* Polls until the donors have seen `n` waits begin. */
static void until_waits(rig *r, unsigned long long n)
{
    for (int i = 0; i < 20000 && atomic_load(&r->donors.waits) < n; i++) {
        struct timespec t = {0, 500000};
        nanosleep(&t, NULL);
    }
    assert_true(atomic_load(&r->donors.waits) >= n);
}

static void test_waits_for_prefilling_donor(void **state)
{
    (void)state;
    rig r;
    rig_up(&r, stories, 60000);
    int32_t p[90];
    make_prompt(p, 90, 4);
    donor d = register_donor(&r, p, 90, MIN_TOKENS / 2); /* behind: nothing to take yet */
    recipient x = {.r = &r, .prompt = p, .n = 90};
    pthread_t t;
    pthread_create(&t, NULL, recipient_main, &x);
    until_waits(&r, 1);
    /* the donor computes its prompt on; the recipient takes it once committed */
    assert_int_equal(graft_test_run(d.session, p + MIN_TOKENS / 2, 90 - MIN_TOKENS / 2, 4),
                     GRAFT_OK);
    pthread_join(t, NULL);
    assert_int_equal(x.status, GRAFT_OK);
    assert_true(x.result.from_donor);
    assert_true(x.result.waited);
    assert_int_equal(x.reused, 89);
    expect_cold_answer(&r, x.session, p, 90, 89);
    depart(&r, &x);
    drop_donor(&r, &d);
    rig_down(&r);
}

static void test_waiter_released_when_donor_goes(void **state)
{
    (void)state;
    rig r;
    rig_up(&r, stories, 60000);
    int32_t p[50];
    make_prompt(p, 50, 5);
    donor d = register_donor(&r, p, 50, 2);
    recipient x = {.r = &r, .prompt = p, .n = 50};
    pthread_t t;
    pthread_create(&t, NULL, recipient_main, &x);
    until_waits(&r, 1);
    drop_donor(&r, &d); /* failed or cancelled: it leaves before closing */
    pthread_join(t, NULL);
    assert_int_equal(x.status, GRAFT_OK);
    assert_false(x.result.from_donor);
    assert_int_equal(x.reused, 0);
    assert_int_equal(atomic_load(&r.donors.waits_released), 1);
    expect_cold_answer(&r, x.session, p, 50, 0);
    depart(&r, &x);
    rig_down(&r);
}

static void *join_main(void *arg)
{
    recipient *x = arg;
    x->status = graft__donors_join(&x->r->donors, x->prompt, (size_t)x->n, true, &x->session,
                                   &x->reused, &x->self, &x->result);
    return NULL;
}

/* The donor leaves and closes while the recipient's clone of it waits in the engine's
 * queue: the clone, queued first, still holds the donor's prompt, and answers as cold. */
static void test_donor_closed_while_clone_queued(void **state)
{
    (void)state;
    rig r;
    rig_up(&r, stories, 0);
    int32_t p[64];
    make_prompt(p, 64, 6);
    donor d = register_donor(&r, p, 64, 64);
    recipient x = {.r = &r, .prompt = p, .n = 64};
    assert_int_equal(graft_session_open(r.engine, &x.session, NULL), GRAFT_OK);
    graft__engine_pause(r.engine, true);
    pthread_t t;
    pthread_create(&t, NULL, join_main, &x);
    for (int i = 0; i < 20000 && atomic_load(&r.donors.attempts) == 0; i++) {
        struct timespec pause = {0, 500000};
        nanosleep(&pause, NULL);
    }
    assert_int_equal(atomic_load(&r.donors.attempts), 1);
    drop_donor(&r, &d); /* the close is queued behind the clone */
    graft__engine_pause(r.engine, false);
    pthread_join(t, NULL);
    assert_int_equal(x.status, GRAFT_OK);
    assert_true(x.result.from_donor);
    assert_int_equal(x.reused, 63);
    expect_cold_answer(&r, x.session, p, 64, 63);
    depart(&r, &x);
    rig_down(&r);
}

/* gemma3 tiny: the donor has moved far past the shared prefix, so its sliding window no
 * longer holds what a clone there needs: refused for retention, the recipient goes on from
 * the cache's offer (none), counted. */
static void test_retention_refusal_falls_back(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(gemma, &info);
    assert_true(info.sliding_window > 0 && info.sliding_window < 64);
    rig r;
    rig_up(&r, gemma, 0);
    int32_t a[150], b[60];
    make_prompt(a, 150, 7);
    memcpy(b, a, 40 * sizeof *b);
    make_prompt(b + 40, 20, 8);
    donor d = register_donor(&r, a, 150, 150);
    recipient x = arrive(&r, b, 60);
    assert_false(x.result.from_donor);
    assert_int_equal(x.reused, 0);
    assert_int_equal(atomic_load(&r.donors.refusals[GRAFT__DONOR_RETENTION]), 1);
    expect_cold_answer(&r, x.session, b, 60, 0);
    depart(&r, &x);
    drop_donor(&r, &d);
    rig_down(&r);
}

/* ---- through HTTP ---------------------------------------------------------------------------- */

typedef struct post_job {
    const server *srv;
    char *body;
    response reply;
} post_job;

static void *post_main(void *arg)
{
    post_job *j = arg;
    j->reply = graft_test_request(j->srv, "POST", "/v1/completions", j->body);
    return NULL;
}

/* A completions body of the token ids prefix (seeded) + tail (seeded), and extra fields. */
static char *ids_body(uint32_t prefix_seed, int32_t n_prefix, uint32_t tail_seed, int32_t n_tail,
                      const char *extra)
{
    int32_t *p = malloc(sizeof *p * (size_t)(n_prefix + n_tail));
    make_prompt(p, n_prefix, prefix_seed);
    make_prompt(p + n_prefix, n_tail, tail_seed);
    if (n_tail > 0)
        p[n_prefix] = 400; /* not BOS */
    size_t cap = 64 + 8 * (size_t)(n_prefix + n_tail) + strlen(extra), len = 0;
    char *b = malloc(cap);
    len += (size_t)snprintf(b, cap, "{\"prompt\": [");
    for (int32_t i = 0; i < n_prefix + n_tail; i++)
        len += (size_t)snprintf(b + len, cap - len, "%s%d", i ? "," : "", (int)p[i]);
    snprintf(b + len, cap - len, "], %s}", extra);
    free(p);
    return b;
}

static double computed(const server *s)
{
    return graft_test_metric(s, "graft_prompt_tokens_total{source=\"computed\"}");
}

/* Sent together, the same 400-token prompt is computed once (then its last token again);
 * a choice of n = 2 beside a donor is its seed's answer alone. Whether the second request
 * took the first's prompt as a donor or, arriving after it ended, from the cache, depends on
 * timing; the tokens computed are the same either way, and that is what is checked. */
static void test_together_over_http(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "512", NULL};
    http_srv = graft_test_start_server(args);
    const server srv = http_srv;
    double before = computed(&srv);
    post_job jobs[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (post_job){&srv, ids_body(11, 400, 0, 0, "\"max_tokens\": 16, \"temperature\": 0"),
                             {0}};
        pthread_create(&t[i], NULL, post_main, &jobs[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    char *a = graft_test_completion_text(&jobs[0].reply), *b = graft_test_completion_text(&jobs[1].reply);
    assert_string_equal(a, b);
    double delta = computed(&srv) - before;
    if (delta != 400 + 1)
        fail_msg("computed %g prompt tokens, expected %d: %s / %s", delta, 400 + 1,
                 jobs[0].reply.body, jobs[1].reply.body);
    free(a);
    free(b);
    for (int i = 0; i < 2; i++) {
        graft_test_response_free(&jobs[i].reply);
        free(jobs[i].body);
    }

    /* a donor and a recipient with n = 2 share 401 tokens (the tails' first token too): the
     * first computes 429 (BOS is cached from above), the other 29, and the second choice 1 */
    before = computed(&srv);
    jobs[0] = (post_job){&srv, ids_body(12, 400, 1, 30, "\"max_tokens\": 16, \"temperature\": 0"),
                         {0}};
    jobs[1] = (post_job){&srv,
                         ids_body(12, 400, 2, 30,
                                  "\"max_tokens\": 16, \"temperature\": 1, \"seed\": 9, \"n\": 2"),
                         {0}};
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, post_main, &jobs[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    delta = computed(&srv) - before;
    if (delta != 429 + 29 + 1)
        fail_msg("computed %g prompt tokens, expected %d: %s / %s", delta, 429 + 29 + 1,
                 jobs[0].reply.body, jobs[1].reply.body);
    json_t *many = graft_test_json_of(&jobs[1].reply);
    for (int i = 0; i < 2; i++) {
        char extra[96];
        snprintf(extra, sizeof extra, "\"max_tokens\": 16, \"temperature\": 1, \"seed\": %d", 9 + i);
        char *body = ids_body(12, 400, 2, 30, extra);
        response one = graft_test_request(&srv, "POST", "/v1/completions", body);
        char *alone = graft_test_completion_text(&one);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(many, "choices"), (size_t)i), "text")),
                            alone);
        free(alone);
        free(body);
        graft_test_response_free(&one);
    }
    json_decref(many);
    for (int i = 0; i < 2; i++) {
        graft_test_response_free(&jobs[i].reply);
        free(jobs[i].body);
    }

    /* one request with both prompts (a batch): the second takes the first's 401 tokens, as a
     * second request does, and each answer is its prompt's alone */
    before = computed(&srv);
    json_t *batch = json_pack("{s:[], s:i, s:i}", "prompt", "max_tokens", 16, "temperature", 0);
    char *alone[2];
    for (int i = 0; i < 2; i++) {
        alone[i] = ids_body(13, 400, 1 + (uint32_t)i, 30, "\"max_tokens\": 16, \"temperature\": 0");
        json_t *one = json_loads(alone[i], 0, NULL);
        json_array_append(json_object_get(batch, "prompt"), json_object_get(one, "prompt"));
        json_decref(one);
    }
    char *text = json_dumps(batch, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/completions", text);
    assert_int_equal(r.status, 200);
    delta = computed(&srv) - before;
    if (delta != 429 + 29)
        fail_msg("computed %g prompt tokens, expected %d: %s", delta, 429 + 29, r.body);
    json_t *both = graft_test_json_of(&r);
    for (int i = 0; i < 2; i++) {
        response one = graft_test_request(&srv, "POST", "/v1/completions", alone[i]);
        char *want = graft_test_completion_text(&one);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(both, "choices"), (size_t)i), "text")),
                            want);
        free(want);
        free(alone[i]);
        graft_test_response_free(&one);
    }
    json_decref(both);
    json_decref(batch);
    free(text);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&http_srv), 0);
    http_srv.pid = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_donor_taken_answer_unchanged),
        cmocka_unit_test(test_min_tokens_rule_cache_wins_ties),
        cmocka_unit_test(test_waits_for_prefilling_donor),
        cmocka_unit_test(test_waiter_released_when_donor_goes),
        cmocka_unit_test(test_donor_closed_while_clone_queued),
        cmocka_unit_test(test_retention_refusal_falls_back),
        cmocka_unit_test(test_together_over_http),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
