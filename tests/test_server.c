/*
 * test_server.c: `graft serve` as clients see it: the real binary started on a free port of
 * 127.0.0.1, spoken to with libcurl.
 *
 * Checked: health and models (one by its id, HEAD); completions whole and streamed (SSE framing, the deltas add up
 * to the whole text, usage chunk, [DONE]); answers that never change: greedy and seeded
 * requests give the same text cold, from the prefix cache and among concurrent requests;
 * stop strings; every error with its status and JSON shape (400 naming the field or both
 * numbers, 404, 405, 413, 401, 429 with Retry-After); a client that disconnects mid-stream
 * cancels its generation; 64 concurrent streams with random hang-ups leave the server at its
 * baseline; SIGTERM lets a running request finish and exits 0; browsers' CORS preflights
 * and headers for --allow-origin's origins only.
 *
 * Each server runs in a child process with its stderr (its port, then one line per request)
 * in a file under GRAFT_TEST_TMP, where the test reads the port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "graft.h"
#include "serve_client.h"

/* ---- the tests -------------------------------------------------------------------------------- */

static server main_server;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--max-body", "4K", NULL};
    main_server = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&main_server);
}

/* Checks that r has header `name` with value `want` (NULL: has no such header). */
static void expect_header(const response *r, const char *name, const char *want)
{
    char *got = graft_test_header(r, name);
    if (want == NULL && got != NULL)
        fail_msg("%s: '%s', expected none", name, got);
    if (want != NULL && (got == NULL || strcmp(got, want) != 0))
        fail_msg("%s: '%s', expected '%s'", name, got ? got : "(none)", want);
    free(got);
}

static void test_health_and_models(void **state)
{
    (void)state;
    response r = graft_test_request(&main_server, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "stories260K");
    /* Anthropic's fields beside OpenAI's: the same model, one page */
    assert_string_equal(json_string_value(json_object_get(m, "type")), "model");
    assert_string_equal(json_string_value(json_object_get(m, "display_name")), "stories260K");
    const char *created_at = json_string_value(json_object_get(m, "created_at"));
    struct tm at = {0};
    assert_non_null(created_at);
    assert_non_null(strptime(created_at, "%Y-%m-%dT%H:%M:%SZ", &at));
    assert_int_equal((json_int_t)timegm(&at), json_integer_value(json_object_get(m, "created")));
    assert_true(json_is_false(json_object_get(j, "has_more")));
    assert_string_equal(json_string_value(json_object_get(j, "first_id")), "stories260K");
    assert_string_equal(json_string_value(json_object_get(j, "last_id")), "stories260K");
    json_decref(j);
    graft_test_response_free(&r);
    /* one model by its id, as the SDKs' models.retrieve asks */
    r = graft_test_request(&main_server, "GET", "/v1/models/stories260K", NULL);
    assert_int_equal(r.status, 200);
    j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "stories260K");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "model");
    json_decref(j);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "GET", "/v1/models/gpt-4o", NULL);
    free(graft_test_expect_error(&r, 404, "model"));
    graft_test_response_free(&r);
    /* HEAD: GET's status and headers, no body */
    r = graft_test_request(&main_server, "HEAD", "/health", NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    expect_header(&r, "Content-Type", "application/json");
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "HEAD", "/v1/completions", NULL);
    assert_int_equal(r.status, 405);
    expect_header(&r, "Allow", "POST, OPTIONS");
    graft_test_response_free(&r);
}

static const char *const GREEDY =
    "{\"prompt\": \"Once upon a time, there was a dog\", \"max_tokens\": 40, \"temperature\": 0}";

/* Cold, then from the cache: the same text, and the second reused the prompt. */
static void test_cold_and_cached_answers_agree(void **state)
{
    (void)state;
    const char *body = "{\"prompt\": \"Lily and her mom went to the park\", \"max_tokens\": 40, "
                       "\"temperature\": 0}";
    response a = graft_test_request(&main_server, "POST", "/v1/completions", body);
    response b = graft_test_request(&main_server, "POST", "/v1/completions", body);
    char *ta = graft_test_completion_text(&a), *tb = graft_test_completion_text(&b);
    assert_string_equal(ta, tb);
    assert_true(strlen(ta) > 20);
    json_t *ja = graft_test_json_of(&a), *jb = graft_test_json_of(&b);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ja, "graft"), "source")),
                        "cold");
    assert_string_equal(json_string_value(json_object_get(json_object_get(jb, "graft"), "source")),
                        "cache");
    json_t *usage = json_object_get(jb, "usage");
    int cached = (int)json_integer_value(
        json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
    int prompt = (int)json_integer_value(json_object_get(usage, "prompt_tokens"));
    assert_int_equal(cached, prompt - 1);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 40);
    assert_string_equal(json_string_value(json_object_get(json_array_get(
                            json_object_get(jb, "choices"), 0), "finish_reason")), "length");
    json_decref(ja);
    json_decref(jb);
    free(ta);
    free(tb);
    graft_test_response_free(&a);
    graft_test_response_free(&b);
    /* two answers of 40 tokens: at least 39 gaps each in the inter-token histogram */
    assert_true(graft_test_metric(&main_server, "graft_inter_token_seconds_count") >= 78);
    assert_true(graft_test_metric(&main_server, "graft_ttft_seconds_count") >= 2);
}

static void test_seeded_sampling_repeats(void **state)
{
    (void)state;
    const char *s1 = "{\"prompt\": \"The cat\", \"max_tokens\": 30, \"temperature\": 1.0, "
                     "\"seed\": 42}";
    const char *s2 = "{\"prompt\": \"The cat\", \"max_tokens\": 30, \"temperature\": 1.0, "
                     "\"seed\": 43}";
    response a = graft_test_request(&main_server, "POST", "/v1/completions", s1);
    response b = graft_test_request(&main_server, "POST", "/v1/completions", s1);
    response c = graft_test_request(&main_server, "POST", "/v1/completions", s2);
    char *ta = graft_test_completion_text(&a), *tb = graft_test_completion_text(&b), *tc = graft_test_completion_text(&c);
    assert_string_equal(ta, tb);
    assert_string_not_equal(ta, tc);
    free(ta);
    free(tb);
    free(tc);
    graft_test_response_free(&a);
    graft_test_response_free(&b);
    graft_test_response_free(&c);
}

/* The streamed deltas add up to the whole text; the framing is SSE with a final [DONE]. */
static void test_stream_matches_whole(void **state)
{
    (void)state;
    response whole = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = graft_test_completion_text(&whole);
    const char *streamed_body =
        "{\"prompt\": \"Once upon a time, there was a dog\", \"max_tokens\": 40, "
        "\"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
    response st = graft_test_request(&main_server, "POST", "/v1/completions", streamed_body);
    assert_int_equal(st.status, 200);
    assert_non_null(strstr(st.headers, "text/event-stream"));
    char *text = calloc(1, 1);
    size_t len = 0;
    int chunks = 0, finishes = 0, usages = 0;
    bool done = false;
    char *save = NULL;
    for (char *ev = strtok_r(st.body, "\n", &save); ev != NULL; ev = strtok_r(NULL, "\n", &save)) {
        assert_true(strncmp(ev, "data: ", 6) == 0);
        assert_false(done); /* nothing after [DONE] */
        if (strcmp(ev + 6, "[DONE]") == 0) {
            done = true;
            continue;
        }
        json_error_t e;
        json_t *j = json_loads(ev + 6, 0, &e);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        if (choice == NULL) {
            usages++;
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                                "completion_tokens")), 40);
        } else {
            const char *t = json_string_value(json_object_get(choice, "text"));
            text = realloc(text, len + strlen(t) + 1);
            strcpy(text + len, t);
            len += strlen(t);
            chunks++;
            finishes += json_is_string(json_object_get(choice, "finish_reason"));
        }
        json_decref(j);
    }
    assert_true(done);
    assert_int_equal(finishes, 1);
    assert_int_equal(usages, 1);
    assert_true(chunks >= 2);
    assert_string_equal(text, expected);
    free(text);
    free(expected);
    graft_test_response_free(&whole);
    graft_test_response_free(&st);
}

static void test_stop_strings(void **state)
{
    (void)state;
    response whole = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    char *full = graft_test_completion_text(&whole);
    /* a stop string from the middle of the greedy text: the answer ends just before it */
    const char *cut = strstr(full + 5, " ");
    assert_non_null(cut);
    char stop[16];
    snprintf(stop, sizeof stop, "%.6s", cut + 1);
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a dog\", "
             "\"max_tokens\": 40, \"temperature\": 0, \"stop\": [\"zzzz\", \"%s\"]}", stop);
    response r = graft_test_request(&main_server, "POST", "/v1/completions", body);
    char *t = graft_test_completion_text(&r);
    assert_int_equal(strlen(t), (size_t)(strstr(full, stop) - full));
    assert_memory_equal(t, full, strlen(t));
    json_t *j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(json_array_get(
                            json_object_get(j, "choices"), 0), "finish_reason")), "stop");
    json_decref(j);
    free(t);
    free(full);
    graft_test_response_free(&r);
    graft_test_response_free(&whole);
}

typedef struct concurrent {
    char *text;
} concurrent;

static void *concurrent_main(void *arg)
{
    concurrent *c = arg;
    response r = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    c->text = r.status == 200 ? graft_test_completion_text(&r) : NULL;
    graft_test_response_free(&r);
    return NULL;
}

/* Eight identical requests at once (batched with each other, some from the cache) give the
 * text of one alone. */
static void test_concurrent_answers_agree(void **state)
{
    (void)state;
    response alone = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = graft_test_completion_text(&alone);
    pthread_t t[8];
    concurrent c[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, concurrent_main, &c[i]), 0);
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_non_null(c[i].text);
        assert_string_equal(c[i].text, expected);
        free(c[i].text);
    }
    free(expected);
    graft_test_response_free(&alone);
}

static void test_errors(void **state)
{
    (void)state;
    response r = graft_test_request(&main_server, "POST", "/v1/completions",
                         "{\"prompt\": \"x\", \"temperature\": 9}");
    free(graft_test_expect_error(&r, 400, "temperature"));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 500}");
    char *m = graft_test_expect_error(&r, 400, "max_tokens");
    assert_non_null(strstr(m, "500"));
    assert_non_null(strstr(m, "256"));
    free(m);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"functions\": [{\"name\": \"f\"}]}");
    free(graft_test_expect_error(&r, 400, "functions"));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"max_tokens\": 2, \"n\": 2, \"best_of\": 1}");
    free(graft_test_expect_error(&r, 400, "best_of"));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"max_tokens\": 2, \"suffix\": \"end\"}");
    free(graft_test_expect_error(&r, 400, "suffix"));
    graft_test_response_free(&r);
    /* the same fields at the values OpenAI takes when they are absent ask for nothing more */
    r = graft_test_request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"max_tokens\": 2, \"response_format\": "
                           "{\"type\": \"text\"}, \"best_of\": 1, \"suffix\": \"\", "
                           "\"echo\": false}");
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions", "{\"prompt\": [1, 99999]}");
    free(graft_test_expect_error(&r, 400, "prompt[1]"));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions", "{\"prompt\": ");
    free(graft_test_expect_error(&r, 400, NULL));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/v1/completions", "{\"max_tokens\": 3}");
    free(graft_test_expect_error(&r, 400, "prompt"));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "GET", "/v1/nothing", NULL);
    free(graft_test_expect_error(&r, 404, NULL));
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "GET", "/v1/completions", NULL);
    free(graft_test_expect_error(&r, 405, NULL));
    graft_test_response_free(&r);
    char *big = malloc(8192);
    memset(big, 'a', 8191);
    big[8191] = '\0';
    memcpy(big, "{\"prompt\": \"", 12);
    r = graft_test_request(&main_server, "POST", "/v1/completions", big);
    free(graft_test_expect_error(&r, 413, NULL));
    graft_test_response_free(&r);
    free(big);
    /* the server is untouched by all of it */
    r = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    free(graft_test_completion_text(&r));
    graft_test_response_free(&r);
}

static void test_tokenize_roundtrip(void **state)
{
    (void)state;
    response r = graft_test_request(&main_server, "POST", "/tokenize", "{\"content\": \"Once upon a time\"}");
    assert_int_equal(r.status, 200);
    json_t *j = graft_test_json_of(&r);
    json_t *tokens = json_object_get(j, "tokens");
    assert_true(json_array_size(tokens) > 2);
    json_t *wrap = json_pack("{s:O}", "tokens", tokens);
    char *dump = json_dumps(wrap, JSON_COMPACT);
    json_decref(wrap);
    response d = graft_test_request(&main_server, "POST", "/detokenize", dump);
    assert_int_equal(d.status, 200);
    json_t *jd = graft_test_json_of(&d);
    assert_string_equal(json_string_value(json_object_get(jd, "content")), "Once upon a time");
    json_decref(jd);
    json_decref(j);
    free(dump);
    graft_test_response_free(&r);
    graft_test_response_free(&d);
    /* with_pieces: each id with its text, or with its bytes where they are a piece of a
     * character (stories260K spells an emoji in four byte tokens); the ids are the same */
    json_t *plain = graft_test_post_json(&main_server, "/tokenize",
                                         json_pack("{s:s}", "content", "a \xf0\x9f\x98\x80"),
                                         200);
    json_t *pieces = graft_test_post_json(&main_server, "/tokenize",
                                          json_pack("{s:s, s:b}", "content",
                                                    "a \xf0\x9f\x98\x80", "with_pieces", 1),
                                          200);
    json_t *ids = json_object_get(plain, "tokens"), *with = json_object_get(pieces, "tokens");
    assert_int_equal(json_array_size(with), json_array_size(ids));
    assert_string_equal(json_string_value(json_object_get(json_array_get(with, 0), "piece")),
                        " a");
    const unsigned char emoji[4] = {0xf0, 0x9f, 0x98, 0x80};
    for (size_t i = 0; i < json_array_size(ids); i++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(with, i), "id")),
                         json_integer_value(json_array_get(ids, i)));
    for (size_t b = 0; b < 4; b++) {
        json_t *piece = json_object_get(json_array_get(with, json_array_size(with) - 4 + b),
                                        "piece");
        assert_int_equal(json_array_size(piece), 1);
        assert_int_equal(json_integer_value(json_array_get(piece, 0)), emoji[b]);
    }
    /* a log-probability's bytes are the token's own: a byte token's byte, not U+FFFD's */
    json_t *byte_token = json_object_get(json_array_get(with, json_array_size(with) - 4), "id");
    json_t *bias = json_object();
    char key[16];
    snprintf(key, sizeof key, "%d", (int)json_integer_value(byte_token));
    json_object_set_new(bias, key, json_real(100));
    json_t *answer = graft_test_post_json(
        &main_server, "/v1/chat/completions",
        json_pack("{s:[{s:s, s:s}], s:i, s:f, s:b, s:o}", "messages", "role", "user",
                  "content", "Hi", "max_tokens", 1, "temperature", 0.0, "logprobs", 1,
                  "logit_bias", bias),
        200);
    json_t *entry = json_array_get(json_object_get(json_object_get(json_array_get(
                                                       json_object_get(answer, "choices"), 0),
                                                                   "logprobs"),
                                                   "content"),
                                   0);
    json_t *bytes = json_object_get(entry, "bytes");
    assert_int_equal(json_array_size(bytes), 1);
    assert_int_equal(json_integer_value(json_array_get(bytes, 0)), 0xf0);
    json_decref(answer);
    json_decref(plain);
    json_decref(pieces);
}

/* A metric's value in /metrics (the first line starting with `name `), or -1. */
/* A client that reads the first event and hangs up: its generation is cancelled, its
 * session and KV released. */
static void test_disconnect_cancels(void **state)
{
    (void)state;
    double before = graft_test_metric(&main_server, "graft_client_disconnects_total");
    response r = graft_test_request_full(&main_server, "POST", "/v1/completions",
                              "{\"prompt\": \"Once\", \"max_tokens\": 200, \"temperature\": 0, "
                              "\"ignore_eos\": true, \"stream\": true}", NULL, 1);
    graft_test_response_free(&r);
    graft_test_expect_cancelled(&main_server, before);
    assert_true(graft_test_metric(&main_server, "graft_requests_running") == 0);
}

static void test_api_key(void **state)
{
    (void)state;
    const char *args[] = {"--api-key", "sekret,other", NULL};
    server s = graft_test_start_server(args);
    response r = graft_test_request(&s, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    r = graft_test_request(&s, "GET", "/v1/models", NULL);
    free(graft_test_expect_error(&r, 401, NULL));
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "GET", "/v1/models", NULL, "wrong", 0);
    free(graft_test_expect_error(&r, 401, NULL));
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "GET", "/v1/models", NULL, "sekret", 0);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "GET", "/v1/models", NULL, "other", 0);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    /* a named session is its key's: another key is refused it, and does not see it */
    const char *body = "{\"prompt\": \"Once\", \"max_tokens\": 4, \"session_id\": \"mine\"}";
    r = graft_test_request_full(&s, "POST", "/v1/completions", body, "sekret", 0);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "POST", "/v1/completions", body, "other", 0);
    free(graft_test_expect_error(&r, 403, "session_id"));
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "GET", "/v1/sessions", NULL, "other", 0);
    assert_null(strstr(r.body, "\"mine\""));
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "GET", "/v1/sessions", NULL, "sekret", 0);
    assert_non_null(strstr(r.body, "\"mine\""));
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "DELETE", "/v1/sessions/mine", NULL, "other", 0);
    free(graft_test_expect_error(&r, 404, NULL));
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* --host takes a name as well as an address. */
static void test_host_name(void **state)
{
    (void)state;
    const char *args[] = {"--host", "localhost", NULL};
    server s = graft_test_start_server(args);
    response r = graft_test_request(&s, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* Browsers (CORS): a page of an --allow-origin origin has its preflight answered without the
 * API key, then reads whole, streamed and refused responses; a page of another origin, and
 * a client that sends no Origin, are named in none. Without --allow-origin no origin is. */
static void test_cors(void **state)
{
    (void)state;
    const char *args[] = {"--api-key", "sekret", "--allow-origin",
                          "http://localhost:3000,https://ui.example", "--ctx", "256", NULL};
    server s = graft_test_start_server(args);
    const char *preflight[] = {"Origin: http://localhost:3000",
                               "Access-Control-Request-Method: POST",
                               "Access-Control-Request-Headers: authorization, content-type",
                               NULL};
    response r = graft_test_request_headers(&s, "OPTIONS", "/v1/chat/completions", NULL, NULL,
                                            preflight);
    assert_int_equal(r.status, 204);
    expect_header(&r, "Access-Control-Allow-Origin", "http://localhost:3000");
    expect_header(&r, "Access-Control-Allow-Methods", "POST, OPTIONS");
    expect_header(&r, "Access-Control-Allow-Headers", "authorization, content-type");
    expect_header(&r, "Vary", "Origin");
    graft_test_response_free(&r);
    const char *stranger[] = {"Origin: http://evil.example", "Access-Control-Request-Method: POST",
                              NULL};
    r = graft_test_request_headers(&s, "OPTIONS", "/v1/chat/completions", NULL, NULL, stranger);
    assert_int_equal(r.status, 204);
    expect_header(&r, "Allow", "POST, OPTIONS");
    expect_header(&r, "Access-Control-Allow-Origin", NULL);
    expect_header(&r, "Access-Control-Allow-Methods", NULL);
    graft_test_response_free(&r);
    const char *page[] = {"Origin: https://ui.example", NULL};
    const char *body = "{\"prompt\": \"Once\", \"max_tokens\": 3}";
    const char *streamed = "{\"prompt\": \"Once\", \"max_tokens\": 3, \"stream\": true}";
    r = graft_test_request_headers(&s, "POST", "/v1/completions", body, "sekret", page);
    assert_int_equal(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", "https://ui.example");
    graft_test_response_free(&r);
    r = graft_test_request_headers(&s, "POST", "/v1/completions", streamed, "sekret", page);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    expect_header(&r, "Access-Control-Allow-Origin", "https://ui.example");
    graft_test_response_free(&r);
    r = graft_test_request_headers(&s, "POST", "/v1/completions", body, NULL, page);
    free(graft_test_expect_error(&r, 401, NULL));
    expect_header(&r, "Access-Control-Allow-Origin", "https://ui.example");
    graft_test_response_free(&r);
    r = graft_test_request_headers(&s, "POST", "/v1/completions", body, "sekret", stranger);
    assert_int_equal(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", NULL);
    graft_test_response_free(&r);
    r = graft_test_request_full(&s, "POST", "/v1/completions", body, "sekret", 0);
    assert_int_equal(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", NULL);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&s), 0);

    const char *any_args[] = {"--allow-origin", "*", "--ctx", "256", NULL};
    s = graft_test_start_server(any_args);
    r = graft_test_request_headers(&s, "GET", "/v1/models", NULL, NULL, stranger);
    assert_int_equal(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", "*");
    expect_header(&r, "Vary", NULL);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&s), 0);

    r = graft_test_request_headers(&main_server, "OPTIONS", "/v1/models", NULL, NULL, page);
    assert_int_equal(r.status, 204);
    expect_header(&r, "Allow", "GET, HEAD, OPTIONS");
    expect_header(&r, "Access-Control-Allow-Origin", NULL);
    graft_test_response_free(&r);
    r = graft_test_request_headers(&main_server, "OPTIONS", "/nowhere", NULL, NULL, page);
    free(graft_test_expect_error(&r, 404, NULL));
    graft_test_response_free(&r);
}

typedef struct long_call {
    const server *s;
    response r;
} long_call;

static void *long_main(void *arg)
{
    long_call *c = arg;
    c->r = graft_test_request(c->s, "POST", "/v1/completions",
                   "{\"prompt\": \"Once\", \"max_tokens\": 250, \"ignore_eos\": true, "
                   "\"temperature\": 0}");
    return NULL;
}

/* One slot, no queue: a second request while one runs is answered 429 with Retry-After.
 * Then SIGTERM while a request runs: it finishes, and the server exits 0. */
static void test_queue_limit_and_drain(void **state)
{
    (void)state;
    const char *args[] = {"--max-sessions", "1", "--max-queue", "0", "--ctx", "256", NULL};
    server s = graft_test_start_server(args);
    long_call first = {&s, {0}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, long_main, &first), 0);
    while (graft_test_metric(&s, "graft_requests_running") < 1)
        usleep(2000);
    response r = graft_test_request(&s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}");
    free(graft_test_expect_error(&r, 429, NULL));
    assert_non_null(strstr(r.headers, "Retry-After"));
    graft_test_response_free(&r);
    pthread_join(t, NULL);
    assert_int_equal(first.r.status, 200);
    graft_test_response_free(&first.r);
    /* drain */
    assert_int_equal(pthread_create(&t, NULL, long_main, &first), 0);
    while (graft_test_metric(&s, "graft_requests_running") < 1)
        usleep(2000);
    assert_int_equal(graft_test_stop_server(&s), 0);
    pthread_join(t, NULL);
    assert_int_equal(first.r.status, 200);
    char *text = graft_test_completion_text(&first.r);
    assert_true(strlen(text) > 100);
    free(text);
    graft_test_response_free(&first.r);
}


/* The assistant's content of a whole chat completion response. */
static char *chat_text(const response *r)
{
    if (r->status != 200)
        fail_msg("status %ld: %s", r->status, r->body ? r->body : "");
    json_t *j = graft_test_json_of(r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    char *copy = strdup(json_string_value(json_object_get(msg, "content")));
    json_decref(j);
    return copy;
}

static int cached_tokens(const response *r)
{
    json_t *j = graft_test_json_of(r);
    int n = (int)json_integer_value(json_object_get(
        json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    return n;
}

/* The deltas of a streamed chat completion joined (the first one carries the role). */
static char *chat_stream_text(const response *r)
{
    assert_int_equal(r->status, 200);
    char *body = strdup(r->body), *save = NULL, *text = calloc(1, 1);
    size_t len = 0;
    int n = 0;
    for (char *ev = strtok_r(body, "\n", &save); ev; ev = strtok_r(NULL, "\n", &save)) {
        if (strcmp(ev, "data: [DONE]") == 0)
            break;
        json_t *j = json_loads(ev + 6, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "object")),
                            "chat.completion.chunk");
        json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        if (n++ == 0)
            assert_string_equal(json_string_value(json_object_get(delta, "role")), "assistant");
        const char *t = json_string_value(json_object_get(delta, "content"));
        text = realloc(text, len + strlen(t) + 1);
        strcpy(text + len, t);
        len += strlen(t);
        json_decref(j);
    }
    free(body);
    return text;
}

/* A conversation through the model's template (ChatML for stories260K): the second turn
 * reuses the first's prompt from the cache and answers as a cold run of it does. */
static void check_chat(const server *s)
{
    const char *turn1 = "{\"messages\": [{\"role\": \"system\", \"content\": \"You tell "
                        "stories.\"}, {\"role\": \"user\", \"content\": \"A story about a "
                        "cat.\"}], \"max_tokens\": 24, \"temperature\": 0}";
    response a = graft_test_request(s, "POST", "/v1/chat/completions", turn1);
    char *answer = chat_text(&a);
    json_t *t2 = json_loads(turn1, 0, NULL);
    json_t *msgs = json_object_get(t2, "messages");
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", answer));
    json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role", "user", "content",
                                          "type", "text", "text", "And then?"));
    char *turn2 = json_dumps(t2, JSON_COMPACT);
    response b = graft_test_request(s, "POST", "/v1/chat/completions", turn2);
    response c = graft_test_request(s, "POST", "/v1/chat/completions", turn2);
    char *tb = chat_text(&b), *tc = chat_text(&c);
    assert_string_equal(tb, tc);
    assert_true(cached_tokens(&b) > 0);
    /* streamed, the same text */
    json_object_set_new(t2, "stream", json_true());
    char *turn2s = json_dumps(t2, JSON_COMPACT);
    response d = graft_test_request(s, "POST", "/v1/chat/completions", turn2s);
    char *td = chat_stream_text(&d);
    assert_string_equal(td, tb);
    /* sampled, n = 2: each choice is the answer of its seed alone */
    json_t *nb = json_loads(turn1, 0, NULL);
    json_object_set_new(nb, "temperature", json_real(1.0));
    json_object_set_new(nb, "seed", json_integer(3));
    json_object_set_new(nb, "n", json_integer(2));
    char *n_body = json_dumps(nb, JSON_COMPACT);
    response many = graft_test_request(s, "POST", "/v1/chat/completions", n_body);
    json_t *jm = graft_test_json_of(&many);
    for (int i = 0; i < 2; i++) {
        json_object_del(nb, "n");
        json_object_set_new(nb, "seed", json_integer(3 + i));
        char *one_body = json_dumps(nb, JSON_COMPACT);
        response one = graft_test_request(s, "POST", "/v1/chat/completions", one_body);
        char *alone = chat_text(&one);
        json_t *msg = json_object_get(json_array_get(json_object_get(jm, "choices"), (size_t)i),
                                      "message");
        assert_string_equal(json_string_value(json_object_get(msg, "content")), alone);
        free(alone);
        free(one_body);
        graft_test_response_free(&one);
    }
    json_decref(jm);
    json_decref(nb);
    free(n_body);
    graft_test_response_free(&many);
    /* a malformed message is refused naming its path */
    response e = graft_test_request(s, "POST", "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                         "\"image_url\"}]}]}");
    free(graft_test_expect_error(&e, 400, "messages[0].content[0]"));
    response f = graft_test_request(s, "POST", "/v1/chat/completions", "{\"messages\": []}");
    free(graft_test_expect_error(&f, 400, "messages"));
    json_decref(t2);
    free(turn2);
    free(turn2s);
    free(answer);
    free(tb);
    free(tc);
    free(td);
    graft_test_response_free(&a);
    graft_test_response_free(&b);
    graft_test_response_free(&c);
    graft_test_response_free(&d);
    graft_test_response_free(&e);
    graft_test_response_free(&f);
}

static void test_chat_stories(void **state)
{
    (void)state;
    check_chat(&main_server);
}

/* A synth qwen3 with the real Qwen tokenizer and its own chat template: the prompt is
 * rendered with <|im_start|> markers, tokenized as special tokens, and answers agree. */
static void test_chat_qwen_template(void **state)
{
    (void)state;
    const char *dir = getenv("GRAFT_MODELS_DIR"), *tmp = getenv("GRAFT_TEST_TMP");
    char vocab[1024], path[1024];
    snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-qwen2.gguf", dir ? dir : "../shared/models");
    snprintf(path, sizeof path, "%s/server-qwen3-tiny.gguf", tmp ? tmp : "/tmp");
    graft_synth_options so = {"qwen3", "tiny", 0, vocab, 7, path};
    assert_int_equal(graft_synth_write(&so, NULL), GRAFT_OK);
    const char *args[] = {"-m", path, "--ctx", "512", NULL};
    server s = graft_test_start_server(args);
    FILE *log = fopen(s.log, "r");
    char line[512];
    bool own = false;
    while (fgets(line, sizeof line, log))
        own = own || strstr(line, "chat template: the model's own") != NULL;
    fclose(log);
    assert_true(own);
    check_chat(&s);
    response t = graft_test_request(&s, "POST", "/tokenize", "{\"content\": \"<|im_start|>user\"}");
    json_t *j = graft_test_json_of(&t);
    assert_int_equal(json_array_size(json_object_get(j, "tokens")), 2); /* marker, "user" */
    json_decref(j);
    graft_test_response_free(&t);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* The graft object's source of a whole response. */
static char *source_of(const response *r)
{
    json_t *j = graft_test_json_of(r);
    char *src = strdup(json_string_value(json_object_get(json_object_get(j, "graft"), "source")));
    json_decref(j);
    return src;
}

static int reused_of(const response *r)
{
    json_t *j = graft_test_json_of(r);
    int n = (int)json_integer_value(json_object_get(json_object_get(j, "graft"), "tokens_reused"));
    json_decref(j);
    return n;
}

/* A named session: the next turn continues its KV (source "session"), a turn that rewinds
 * (an edited earlier message) clones it at the common prefix; both answer as the same
 * request without a session does. Listed, deleted, then gone. */
static void test_named_sessions(void **state)
{
    (void)state;
    const char *turn1 = "{\"prompt\": \"Once upon a time, there was a king\", \"max_tokens\": 16, "
                        "\"temperature\": 0, \"session_id\": \"conv-1\"}";
    response a = graft_test_request(&main_server, "POST", "/v1/completions", turn1);
    char *t1 = graft_test_completion_text(&a);
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a king%s. He\", "
             "\"max_tokens\": 16, \"temperature\": 0, \"session_id\": \"conv-1\"}", t1);
    response b = graft_test_request(&main_server, "POST", "/v1/completions", body);
    char *src = source_of(&b), *t2 = graft_test_completion_text(&b);
    assert_string_equal(src, "session");
    assert_true(reused_of(&b) > 10);
    free(src);
    /* the same turn without a session: the same text */
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a king%s. He\", "
             "\"max_tokens\": 16, \"temperature\": 0}", t1);
    response c = graft_test_request(&main_server, "POST", "/v1/completions", body);
    char *t2_anonymous = graft_test_completion_text(&c);
    assert_string_equal(t2, t2_anonymous);
    /* a rewind through the header: a clone at the common prefix */
    const char *rewind = "{\"prompt\": \"Once upon a time, there was a queen\", \"max_tokens\": 16, "
                         "\"temperature\": 0, \"session_id\": \"conv-1\"}";
    response d = graft_test_request(&main_server, "POST", "/v1/completions", rewind);
    src = source_of(&d);
    assert_string_equal(src, "session");
    free(src);
    response e = graft_test_request(&main_server, "POST", "/v1/completions",
                         "{\"prompt\": \"Once upon a time, there was a queen\", \"max_tokens\": "
                         "16, \"temperature\": 0}");
    char *td = graft_test_completion_text(&d), *te = graft_test_completion_text(&e);
    assert_string_equal(td, te);
    response l = graft_test_request(&main_server, "GET", "/v1/sessions", NULL);
    assert_int_equal(l.status, 200);
    assert_non_null(strstr(l.body, "\"conv-1\""));
    response del = graft_test_request(&main_server, "DELETE", "/v1/sessions/conv-1", NULL);
    assert_int_equal(del.status, 200);
    response again = graft_test_request(&main_server, "DELETE", "/v1/sessions/conv-1", NULL);
    free(graft_test_expect_error(&again, 404, NULL));
    response bad = graft_test_request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"session_id\": 7}");
    free(graft_test_expect_error(&bad, 400, "session_id"));
    free(t1);
    free(t2);
    free(t2_anonymous);
    free(td);
    free(te);
    graft_test_response_free(&a);
    graft_test_response_free(&b);
    graft_test_response_free(&c);
    graft_test_response_free(&d);
    graft_test_response_free(&e);
    graft_test_response_free(&l);
    graft_test_response_free(&del);
    graft_test_response_free(&again);
    graft_test_response_free(&bad);
}

typedef struct load_client {
    const server *s;
    unsigned seed;
    int completed, aborted;
} load_client;

static void *load_main(void *arg)
{
    load_client *c = arg;
    for (int i = 0; i < 3; i++) {
        c->seed = c->seed * 1103515245u + 12345u;
        int abort_after = (int)((c->seed >> 8) % 6); /* 0: read to the end */
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time %u\", \"max_tokens\": %u, "
                 "\"temperature\": 0.7, \"seed\": %u, \"stream\": true}",
                 (c->seed >> 4) % 3, 8 + (c->seed >> 12) % 40, c->seed % 1000);
        response r = graft_test_request_full(c->s, "POST", "/v1/completions", body, NULL, abort_after);
        if (abort_after > 0 && r.status == 200 && !strstr(r.body ? r.body : "", "[DONE]"))
            c->aborted++;
        else if (r.status == 200)
            c->completed++;
        graft_test_response_free(&r);
    }
    return NULL;
}

/* 64 concurrent streams, some hanging up after a few events, three requests each: after
 * them the server is back to its baseline (no generation live, no request running or
 * queued, no session but the cache's snapshots) and serves a request as before. */
static void test_load_with_disconnects(void **state)
{
    (void)state;
    const char *args[] = {"--max-sessions", "8", "--max-queue", "64", "--ctx", "256", NULL};
    server s = graft_test_start_server(args);
    response before = graft_test_request(&s, "POST", "/v1/completions", GREEDY);
    char *expected = graft_test_completion_text(&before);
    enum { CLIENTS = 64 };
    pthread_t t[CLIENTS];
    load_client c[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (load_client){&s, (unsigned)i * 7919u + 1u, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, load_main, &c[i]), 0);
    }
    int completed = 0, aborted = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        completed += c[i].completed;
        aborted += c[i].aborted;
    }
    assert_true(completed > 0 && aborted > 0);
    assert_int_equal(completed + aborted, 3 * CLIENTS);
    double live = -1, sessions = -1, entries = -2;
    for (int i = 0; i < 300; i++) { /* the last cancellations settle within a few steps */
        live = graft_test_metric(&s, "graft_generations_live");
        sessions = graft_test_metric(&s, "graft_sessions_open");
        entries = graft_test_metric(&s, "graft_cache_entries");
        if (live == 0 && sessions == entries && graft_test_metric(&s, "graft_requests_running") == 0)
            break;
        usleep(10000);
    }
    assert_true(live == 0);
    assert_true(sessions == entries);
    assert_true(graft_test_metric(&s, "graft_requests_running") == 0);
    assert_true(graft_test_metric(&s, "graft_requests_queued") == 0);
    assert_true(graft_test_metric(&s, "graft_client_disconnects_total") > 0);
    response after = graft_test_request(&s, "POST", "/v1/completions", GREEDY);
    char *again = graft_test_completion_text(&after);
    assert_string_equal(again, expected);
    free(expected);
    free(again);
    graft_test_response_free(&before);
    graft_test_response_free(&after);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* llama-server's GET /props and POST /apply-template. */
static void test_props_and_apply_template(void **state)
{
    (void)state;
    response r = graft_test_request(&main_server, "GET", "/props", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = graft_test_json_of(&r);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "default_generation_settings"), "n_ctx")), 256);
    assert_non_null(strstr(json_string_value(json_object_get(j, "chat_template")), "im_start"));
    /* the default sampling, in llama-server's names: sent back as fields (all but
     * max_tokens, which is none), they sample what a request without them samples */
    json_t *params = json_object_get(json_object_get(j, "default_generation_settings"), "params");
    assert_true(json_object_size(params) >= 20);
    json_t *sent = json_deep_copy(params);
    json_object_del(sent, "max_tokens");
    json_object_set_new(sent, "prompt", json_string("Once upon a time"));
    json_object_set_new(sent, "max_tokens", json_integer(24));
    json_object_set_new(sent, "seed", json_integer(5));
    json_t *with = graft_test_post_json(&main_server, "/v1/completions", sent, 200);
    json_t *without = graft_test_post_json(&main_server, "/v1/completions",
                                           json_pack("{s:s, s:i, s:i}", "prompt",
                                                     "Once upon a time", "max_tokens", 24,
                                                     "seed", 5),
                                           200);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(with, "choices"), 0), "text")),
                        json_string_value(json_object_get(
                            json_array_get(json_object_get(without, "choices"), 0), "text")));
    json_decref(with);
    json_decref(without);
    json_decref(j);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/apply-template",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    assert_int_equal(r.status, 200);
    j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    json_decref(j);
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "POST", "/apply-template", "{\"messages\": 3}");
    free(graft_test_expect_error(&r, 400, "messages"));
    graft_test_response_free(&r);
}

/* llama-server's POST /completion: the same text as /v1/completions, in its shape, whole and
 * streamed (chunks {content, stop}, the last with stop true; no [DONE]). */
static void test_llama_completion(void **state)
{
    (void)state;
    response o = graft_test_request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = graft_test_completion_text(&o);
    const char *body = "{\"prompt\": \"Once upon a time, there was a dog\", \"n_predict\": 40, "
                       "\"temperature\": 0, \"cache_prompt\": true}";
    response r = graft_test_request(&main_server, "POST", "/completion", body);
    assert_int_equal(r.status, 200);
    json_t *j = graft_test_json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "content")), expected);
    assert_true(json_is_true(json_object_get(j, "stop")));
    assert_string_equal(json_string_value(json_object_get(j, "stop_type")), "limit");
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_predicted")), 40);
    assert_true(json_integer_value(json_object_get(j, "tokens_cached")) > 0);
    json_decref(j);
    const char *streamed = "{\"prompt\": \"Once upon a time, there was a dog\", \"n_predict\": "
                           "40, \"temperature\": 0, \"stream\": true}";
    response st = graft_test_request(&main_server, "POST", "/completion", streamed);
    assert_int_equal(st.status, 200);
    assert_null(strstr(st.body, "[DONE]"));
    char *text = calloc(1, 1), *save = NULL;
    size_t len = 0;
    int stops = 0;
    for (char *ev = strtok_r(st.body, "\n", &save); ev; ev = strtok_r(NULL, "\n", &save)) {
        assert_true(strncmp(ev, "data: ", 6) == 0);
        json_t *c = json_loads(ev + 6, 0, NULL);
        assert_non_null(c);
        assert_int_equal(stops, 0); /* nothing after the stop chunk */
        const char *t = json_string_value(json_object_get(c, "content"));
        text = realloc(text, len + strlen(t) + 1);
        strcpy(text + len, t);
        len += strlen(t);
        stops += json_is_true(json_object_get(c, "stop"));
        json_decref(c);
    }
    assert_int_equal(stops, 1);
    assert_string_equal(text, expected);
    free(text);
    free(expected);
    graft_test_response_free(&o);
    graft_test_response_free(&r);
    graft_test_response_free(&st);
}

/* A pool of 10 KV blocks: an idle named session holding 7 of them is closed when a request
 * needs 8 and the prefix cache had nothing to give; the request is answered, not refused. */
/* llama-server's n_probs on /completion: completion_probabilities, a token each, with its
 * id, the log-probability /v1/completions gives it and n_probs alternatives (greedy: the
 * first is the token itself); streamed, the chunks' lists make the whole one. */
static void test_llama_n_probs(void **state)
{
    (void)state;
    enum { N = 12, PROBS = 3 };
    const char *body = "{\"prompt\": \"Once upon a time, there was a dog\", \"n_predict\": 12, "
                       "\"temperature\": 0, \"n_probs\": 3, \"return_tokens\": true}";
    json_t *whole = graft_test_post_json(&main_server, "/completion", json_loads(body, 0, NULL),
                                         200);
    json_t *probs = json_object_get(whole, "completion_probabilities");
    json_t *ids = json_object_get(whole, "tokens");
    assert_int_equal(json_array_size(probs), N);
    json_t *openai = graft_test_post_json(
        &main_server, "/v1/completions",
        json_pack("{s:s, s:i, s:f, s:i}", "prompt", "Once upon a time, there was a dog",
                  "max_tokens", N, "temperature", 0.0, "logprobs", PROBS),
        200);
    json_t *lps = json_object_get(json_object_get(json_array_get(json_object_get(openai,
                                                                                 "choices"),
                                                                 0),
                                                  "logprobs"),
                                  "token_logprobs");
    for (size_t t = 0; t < N; t++) {
        json_t *p = json_array_get(probs, t);
        json_t *top = json_object_get(p, "top_logprobs");
        assert_int_equal(json_integer_value(json_object_get(p, "id")),
                         json_integer_value(json_array_get(ids, t)));
        assert_true(json_real_value(json_object_get(p, "logprob")) ==
                    json_real_value(json_array_get(lps, t)));
        assert_int_equal(json_array_size(top), PROBS);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(top, 0), "id")),
                         json_integer_value(json_object_get(p, "id")));
        assert_true(json_equal(json_object_get(json_array_get(top, 0), "logprob"),
                               json_object_get(p, "logprob")));
        assert_true(json_is_string(json_object_get(p, "token")));
        assert_true(json_is_array(json_object_get(p, "bytes")));
    }
    const char *streamed = "{\"prompt\": \"Once upon a time, there was a dog\", "
                           "\"n_predict\": 12, \"temperature\": 0, \"n_probs\": 3, "
                           "\"stream\": true}";
    response st = graft_test_request(&main_server, "POST", "/completion", streamed);
    assert_int_equal(st.status, 200);
    json_t *joined = json_array();
    char *save = NULL;
    for (char *ev = strtok_r(st.body, "\n", &save); ev; ev = strtok_r(NULL, "\n", &save)) {
        json_t *c = json_loads(ev + 6, 0, NULL);
        assert_non_null(c);
        json_t *part = json_object_get(c, "completion_probabilities");
        if (part != NULL)
            json_array_extend(joined, part);
        json_decref(c);
    }
    assert_true(json_equal(joined, probs));
    json_decref(joined);
    graft_test_response_free(&st);
    json_decref(whole);
    json_decref(openai);
    struct {
        const char *body, *param;
    } bad[] = {{"{\"prompt\": \"x\", \"n_probs\": 21}", "n_probs"},
               {"{\"prompt\": \"x\", \"n_probs\": 2, \"post_sampling_probs\": true}",
                "post_sampling_probs"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        response r = graft_test_request(&main_server, "POST", "/completion", bad[i].body);
        free(graft_test_expect_error(&r, 400, bad[i].param));
        graft_test_response_free(&r);
    }
}

/* llama-server's names of OpenAI's paths without /v1 answer as those paths do. */
static void test_paths_without_v1(void **state)
{
    (void)state;
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                       "\"max_tokens\": 8, \"temperature\": 0}";
    const char *completion = "{\"prompt\": \"Once\", \"max_tokens\": 8, \"temperature\": 0}";
    const struct {
        const char *method, *alias, *path, *body;
    } same[] = {{"GET", "/models", "/v1/models", NULL},
                {"GET", "/v1/health", "/health", NULL},
                {"POST", "/completions", "/v1/completions", completion},
                {"POST", "/chat/completions", "/v1/chat/completions", chat}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        response a = graft_test_request(&main_server, same[i].method, same[i].alias,
                                        same[i].body);
        response b = graft_test_request(&main_server, same[i].method, same[i].path,
                                        same[i].body);
        assert_int_equal(a.status, 200);
        assert_int_equal(b.status, 200);
        json_t *ja = graft_test_json_of(&a), *jb = graft_test_json_of(&b);
        json_t *ca = json_array_get(json_object_get(ja, "choices"), 0);
        json_t *cb = json_array_get(json_object_get(jb, "choices"), 0);
        assert_true(same[i].body == NULL || ca != NULL);
        const char *fields[] = {"text", "message", "object", "status", "data"};
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            json_t *fa = json_object_get(f < 2 ? ca : ja, fields[f]);
            json_t *fb = json_object_get(f < 2 ? cb : jb, fields[f]);
            if (fa == NULL ? fb != NULL : !json_equal(fa, fb))
                fail_msg("%s: '%s' differs from %s's", same[i].alias, fields[f], same[i].path);
        }
        json_decref(ja);
        json_decref(jb);
        graft_test_response_free(&a);
        graft_test_response_free(&b);
    }
    response r = graft_test_request(&main_server, "GET", "/chat/completions", NULL);
    assert_int_equal(r.status, 405);
    graft_test_response_free(&r);
}

static void test_named_sessions_give_kv_back(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--kv-mem", "200K", NULL};
    server s = graft_test_start_server(args);
    assert_int_equal(graft_test_metric(&s, "graft_kv_blocks_total"), 10);
    response r = graft_test_request(&s, "POST", "/v1/completions",
                                    "{\"prompt\": \"Once upon a time\", \"max_tokens\": 180, "
                                    "\"temperature\": 0, \"ignore_eos\": true, \"session_id\": "
                                    "\"conv1\"}");
    free(graft_test_completion_text(&r));
    graft_test_response_free(&r);
    assert_int_equal(graft_test_metric(&s, "graft_named_sessions"), 1);
    assert_true(graft_test_metric(&s, "graft_kv_blocks_free") < 8);
    r = graft_test_request(&s, "POST", "/v1/completions",
                           "{\"prompt\": \"The dog ran\", \"max_tokens\": 200, \"temperature\": 0, "
                           "\"ignore_eos\": true}");
    free(graft_test_completion_text(&r));
    graft_test_response_free(&r);
    assert_int_equal(graft_test_metric(&s, "graft_named_sessions_reclaimed_total"), 1);
    assert_int_equal(graft_test_metric(&s, "graft_named_sessions"), 0);
    r = graft_test_request(&s, "GET", "/v1/sessions", NULL);
    json_t *list = graft_test_json_of(&r);
    assert_int_equal(json_array_size(json_object_get(list, "data")), 0);
    json_decref(list);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_models),
        cmocka_unit_test(test_cold_and_cached_answers_agree),
        cmocka_unit_test(test_seeded_sampling_repeats),
        cmocka_unit_test(test_stream_matches_whole),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_concurrent_answers_agree),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tokenize_roundtrip),
        cmocka_unit_test(test_props_and_apply_template),
        cmocka_unit_test(test_llama_completion),
        cmocka_unit_test(test_paths_without_v1),
        cmocka_unit_test(test_llama_n_probs),
        cmocka_unit_test(test_chat_stories),
        cmocka_unit_test(test_named_sessions),
        cmocka_unit_test(test_chat_qwen_template),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_cors),
        cmocka_unit_test(test_host_name),
        cmocka_unit_test(test_queue_limit_and_drain),
        cmocka_unit_test(test_load_with_disconnects),
        cmocka_unit_test(test_named_sessions_give_kv_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
