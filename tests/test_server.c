/*
 * test_server.c: `graft serve` as clients see it: the real binary started on a free port of
 * 127.0.0.1, spoken to with libcurl.
 *
 * Checked: health and models; completions whole and streamed (SSE framing, the deltas add up
 * to the whole text, usage chunk, [DONE]); answers that never change: greedy and seeded
 * requests give the same text cold, from the prefix cache and among concurrent requests;
 * stop strings; every error with its status and JSON shape (400 naming the field or both
 * numbers, 404, 405, 413, 401, 429 with Retry-After); a client that disconnects mid-stream
 * cancels its generation; 64 concurrent streams with random hang-ups leave the server at its
 * baseline; SIGTERM lets a running request finish and exits 0.
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

typedef struct server {
    pid_t pid;
    int port;
    char log[512];
} server;

/* Starts `graft serve --port 0 ARGS...` with its stderr in a log file, and waits for its
 * "listening on" line there. */
static server start_server(const char *const *extra)
{
    server s = {0};
    const char *bin = getenv("GRAFT_BIN"), *tmp = getenv("GRAFT_TEST_TMP");
    static int n_started;
    snprintf(s.log, sizeof s.log, "%s/server-%d-%d.log", tmp ? tmp : "/tmp", (int)getpid(),
             n_started++);
    s.pid = fork();
    assert_true(s.pid >= 0);
    if (s.pid == 0) {
        const char *argv[32] = {bin ? bin : "graft", "serve", "--port", "0", "--threads", "1"};
        int argc = 6;
        for (int i = 0; extra && extra[i]; i++)
            argv[argc++] = extra[i];
        argv[argc] = NULL;
        if (freopen(s.log, "w", stderr) == NULL)
            _exit(126);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    const char *mark = "graft: listening on http://127.0.0.1:";
    for (int tries = 0; tries < 6000 && s.port == 0; tries++) {
        FILE *log = fopen(s.log, "r");
        char line[1024];
        while (log != NULL && fgets(line, sizeof line, log) != NULL)
            if (strncmp(line, mark, strlen(mark)) == 0)
                s.port = atoi(line + strlen(mark));
        if (log != NULL)
            fclose(log);
        int status;
        if (s.port == 0 && waitpid(s.pid, &status, WNOHANG) == s.pid)
            fail_msg("graft serve exited before listening (see %s)", s.log);
        if (s.port == 0)
            usleep(10000);
    }
    if (s.port == 0)
        fail_msg("graft serve did not start listening within 60 s (see %s)", s.log);
    return s;
}

/* SIGTERM, then the exit status (0 expected). */
static int stop_server(server *s)
{
    kill(s->pid, SIGTERM);
    int status = 0;
    waitpid(s->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

typedef struct response {
    long status;
    char *body;
    size_t len;
    char *headers;
    size_t headers_len;
    int abort_after; /* stop reading after this many body writes (0: never) */
    int writes;
} response;

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    response *r = user;
    size_t bytes = size * n;
    r->body = realloc(r->body, r->len + bytes + 1);
    memcpy(r->body + r->len, data, bytes);
    r->len += bytes;
    r->body[r->len] = '\0';
    if (r->abort_after > 0 && ++r->writes >= r->abort_after)
        return 0;
    return bytes;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    response *r = user;
    size_t bytes = size * n;
    r->headers = realloc(r->headers, r->headers_len + bytes + 1);
    memcpy(r->headers + r->headers_len, data, bytes);
    r->headers_len += bytes;
    r->headers[r->headers_len] = '\0';
    return bytes;
}

static response request_full(const server *s, const char *method, const char *path,
                             const char *body, const char *auth, int abort_after)
{
    response r = {0};
    r.abort_after = abort_after;
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char bearer[256];
    if (auth != NULL) {
        snprintf(bearer, sizeof bearer, "Authorization: Bearer %s", auth);
        h = curl_slist_append(h, bearer);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

static response request(const server *s, const char *method, const char *path, const char *body)
{
    return request_full(s, method, path, body, NULL, 0);
}

static void response_free(response *r)
{
    free(r->body);
    free(r->headers);
}

static json_t *json_of(const response *r)
{
    json_error_t e;
    json_t *j = json_loads(r->body ? r->body : "", 0, &e);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", e.text, r->body ? r->body : "(empty)");
    return j;
}

/* The text of a whole completion response. */
static char *completion_text(const response *r)
{
    assert_int_equal(r->status, 200);
    json_t *j = json_of(r);
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                      "text"));
    assert_non_null(t);
    char *copy = strdup(t);
    json_decref(j);
    return copy;
}

/* An error response: status, {"error": {"message", "type", "param", "code"}}; returns the
 * message (to free) and checks param when given. */
static char *expect_error(const response *r, long status, const char *param)
{
    if (r->status != status)
        fail_msg("status %ld, expected %ld: %s", r->status, status, r->body ? r->body : "");
    json_t *j = json_of(r);
    json_t *err = json_object_get(j, "error");
    assert_non_null(err);
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(json_is_string(json_object_get(err, "type")));
    assert_int_equal(json_integer_value(json_object_get(err, "code")), status);
    if (param != NULL)
        assert_string_equal(json_string_value(json_object_get(err, "param")), param);
    char *m = strdup(json_string_value(json_object_get(err, "message")));
    json_decref(j);
    return m;
}

/* ---- the tests -------------------------------------------------------------------------------- */

static server main_server;

static int setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--ctx", "256", "--max-body", "4K", NULL};
    main_server = start_server(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = stop_server(&main_server);
    curl_global_cleanup();
    return rc == 0 ? 0 : -1;
}

static void test_health_and_models(void **state)
{
    (void)state;
    response r = request(&main_server, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    response_free(&r);
    r = request(&main_server, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    j = json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "stories260K");
    json_decref(j);
    response_free(&r);
}

static const char *const GREEDY =
    "{\"prompt\": \"Once upon a time, there was a dog\", \"max_tokens\": 40, \"temperature\": 0}";

/* Cold, then from the cache: the same text, and the second reused the prompt. */
static void test_cold_and_cached_answers_agree(void **state)
{
    (void)state;
    const char *body = "{\"prompt\": \"Lily and her mom went to the park\", \"max_tokens\": 40, "
                       "\"temperature\": 0}";
    response a = request(&main_server, "POST", "/v1/completions", body);
    response b = request(&main_server, "POST", "/v1/completions", body);
    char *ta = completion_text(&a), *tb = completion_text(&b);
    assert_string_equal(ta, tb);
    assert_true(strlen(ta) > 20);
    json_t *ja = json_of(&a), *jb = json_of(&b);
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
    response_free(&a);
    response_free(&b);
}

static void test_seeded_sampling_repeats(void **state)
{
    (void)state;
    const char *s1 = "{\"prompt\": \"The cat\", \"max_tokens\": 30, \"temperature\": 1.0, "
                     "\"seed\": 42}";
    const char *s2 = "{\"prompt\": \"The cat\", \"max_tokens\": 30, \"temperature\": 1.0, "
                     "\"seed\": 43}";
    response a = request(&main_server, "POST", "/v1/completions", s1);
    response b = request(&main_server, "POST", "/v1/completions", s1);
    response c = request(&main_server, "POST", "/v1/completions", s2);
    char *ta = completion_text(&a), *tb = completion_text(&b), *tc = completion_text(&c);
    assert_string_equal(ta, tb);
    assert_string_not_equal(ta, tc);
    free(ta);
    free(tb);
    free(tc);
    response_free(&a);
    response_free(&b);
    response_free(&c);
}

/* The streamed deltas add up to the whole text; the framing is SSE with a final [DONE]. */
static void test_stream_matches_whole(void **state)
{
    (void)state;
    response whole = request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = completion_text(&whole);
    const char *streamed_body =
        "{\"prompt\": \"Once upon a time, there was a dog\", \"max_tokens\": 40, "
        "\"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
    response st = request(&main_server, "POST", "/v1/completions", streamed_body);
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
    response_free(&whole);
    response_free(&st);
}

static void test_stop_strings(void **state)
{
    (void)state;
    response whole = request(&main_server, "POST", "/v1/completions", GREEDY);
    char *full = completion_text(&whole);
    /* a stop string from the middle of the greedy text: the answer ends just before it */
    const char *cut = strstr(full + 5, " ");
    assert_non_null(cut);
    char stop[16];
    snprintf(stop, sizeof stop, "%.6s", cut + 1);
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a dog\", "
             "\"max_tokens\": 40, \"temperature\": 0, \"stop\": [\"zzzz\", \"%s\"]}", stop);
    response r = request(&main_server, "POST", "/v1/completions", body);
    char *t = completion_text(&r);
    assert_int_equal(strlen(t), (size_t)(strstr(full, stop) - full));
    assert_memory_equal(t, full, strlen(t));
    json_t *j = json_of(&r);
    assert_string_equal(json_string_value(json_object_get(json_array_get(
                            json_object_get(j, "choices"), 0), "finish_reason")), "stop");
    json_decref(j);
    free(t);
    free(full);
    response_free(&r);
    response_free(&whole);
}

typedef struct concurrent {
    char *text;
} concurrent;

static void *concurrent_main(void *arg)
{
    concurrent *c = arg;
    response r = request(&main_server, "POST", "/v1/completions", GREEDY);
    c->text = r.status == 200 ? completion_text(&r) : NULL;
    response_free(&r);
    return NULL;
}

/* Eight identical requests at once (batched with each other, some from the cache) give the
 * text of one alone. */
static void test_concurrent_answers_agree(void **state)
{
    (void)state;
    response alone = request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = completion_text(&alone);
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
    response_free(&alone);
}

static void test_errors(void **state)
{
    (void)state;
    response r = request(&main_server, "POST", "/v1/completions",
                         "{\"prompt\": \"x\", \"temperature\": 9}");
    free(expect_error(&r, 400, "temperature"));
    response_free(&r);
    r = request(&main_server, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 500}");
    char *m = expect_error(&r, 400, "max_tokens");
    assert_non_null(strstr(m, "500"));
    assert_non_null(strstr(m, "256"));
    free(m);
    response_free(&r);
    r = request(&main_server, "POST", "/v1/completions",
                "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}}");
    free(expect_error(&r, 400, "response_format"));
    response_free(&r);
    r = request(&main_server, "POST", "/v1/completions", "{\"prompt\": [1, 99999]}");
    free(expect_error(&r, 400, "prompt[1]"));
    response_free(&r);
    r = request(&main_server, "POST", "/v1/completions", "{\"prompt\": ");
    free(expect_error(&r, 400, NULL));
    response_free(&r);
    r = request(&main_server, "POST", "/v1/completions", "{\"max_tokens\": 3}");
    free(expect_error(&r, 400, "prompt"));
    response_free(&r);
    r = request(&main_server, "GET", "/v1/nothing", NULL);
    free(expect_error(&r, 404, NULL));
    response_free(&r);
    r = request(&main_server, "GET", "/v1/completions", NULL);
    free(expect_error(&r, 405, NULL));
    response_free(&r);
    char *big = malloc(8192);
    memset(big, 'a', 8191);
    big[8191] = '\0';
    memcpy(big, "{\"prompt\": \"", 12);
    r = request(&main_server, "POST", "/v1/completions", big);
    free(expect_error(&r, 413, NULL));
    response_free(&r);
    free(big);
    /* the server is untouched by all of it */
    r = request(&main_server, "POST", "/v1/completions", GREEDY);
    free(completion_text(&r));
    response_free(&r);
}

static void test_tokenize_roundtrip(void **state)
{
    (void)state;
    response r = request(&main_server, "POST", "/tokenize", "{\"content\": \"Once upon a time\"}");
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    json_t *tokens = json_object_get(j, "tokens");
    assert_true(json_array_size(tokens) > 2);
    json_t *wrap = json_pack("{s:O}", "tokens", tokens);
    char *dump = json_dumps(wrap, JSON_COMPACT);
    json_decref(wrap);
    response d = request(&main_server, "POST", "/detokenize", dump);
    assert_int_equal(d.status, 200);
    json_t *jd = json_of(&d);
    assert_string_equal(json_string_value(json_object_get(jd, "content")), "Once upon a time");
    json_decref(jd);
    json_decref(j);
    free(dump);
    response_free(&r);
    response_free(&d);
}

/* A metric's value in /metrics (the first line starting with `name `), or -1. */
static double metric(const server *s, const char *name)
{
    response r = request(s, "GET", "/metrics", NULL);
    double v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = r.body ? strstr(r.body, key) : NULL;
    if (at != NULL)
        v = atof(at + strlen(key));
    response_free(&r);
    return v;
}

/* A client that reads the first event and hangs up: its generation is cancelled, its
 * session and KV released. */
static void test_disconnect_cancels(void **state)
{
    (void)state;
    double before = metric(&main_server, "graft_client_disconnects_total");
    response r = request_full(&main_server, "POST", "/v1/completions",
                              "{\"prompt\": \"Once\", \"max_tokens\": 200, \"temperature\": 0, "
                              "\"ignore_eos\": true, \"stream\": true}", NULL, 1);
    response_free(&r);
    double live = -1;
    for (int i = 0; i < 200; i++) {
        live = metric(&main_server, "graft_generations_live");
        if (live == 0 && metric(&main_server, "graft_client_disconnects_total") > before)
            break;
        usleep(10000);
    }
    assert_true(live == 0);
    assert_true(metric(&main_server, "graft_client_disconnects_total") > before);
    assert_true(metric(&main_server, "graft_requests_running") == 0);
}

static void test_api_key(void **state)
{
    (void)state;
    const char *args[] = {"--api-key", "sekret,other", NULL};
    server s = start_server(args);
    response r = request(&s, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    response_free(&r);
    r = request(&s, "GET", "/v1/models", NULL);
    free(expect_error(&r, 401, NULL));
    response_free(&r);
    r = request_full(&s, "GET", "/v1/models", NULL, "wrong", 0);
    free(expect_error(&r, 401, NULL));
    response_free(&r);
    r = request_full(&s, "GET", "/v1/models", NULL, "sekret", 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
    r = request_full(&s, "GET", "/v1/models", NULL, "other", 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
    /* a named session is its key's: another key is refused it, and does not see it */
    const char *body = "{\"prompt\": \"Once\", \"max_tokens\": 4, \"session_id\": \"mine\"}";
    r = request_full(&s, "POST", "/v1/completions", body, "sekret", 0);
    assert_int_equal(r.status, 200);
    response_free(&r);
    r = request_full(&s, "POST", "/v1/completions", body, "other", 0);
    free(expect_error(&r, 403, "session_id"));
    response_free(&r);
    r = request_full(&s, "GET", "/v1/sessions", NULL, "other", 0);
    assert_null(strstr(r.body, "\"mine\""));
    response_free(&r);
    r = request_full(&s, "GET", "/v1/sessions", NULL, "sekret", 0);
    assert_non_null(strstr(r.body, "\"mine\""));
    response_free(&r);
    r = request_full(&s, "DELETE", "/v1/sessions/mine", NULL, "other", 0);
    free(expect_error(&r, 404, NULL));
    response_free(&r);
    assert_int_equal(stop_server(&s), 0);
}

typedef struct long_call {
    const server *s;
    response r;
} long_call;

static void *long_main(void *arg)
{
    long_call *c = arg;
    c->r = request(c->s, "POST", "/v1/completions",
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
    server s = start_server(args);
    long_call first = {&s, {0}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, long_main, &first), 0);
    while (metric(&s, "graft_requests_running") < 1)
        usleep(2000);
    response r = request(&s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}");
    free(expect_error(&r, 429, NULL));
    assert_non_null(strstr(r.headers, "Retry-After"));
    response_free(&r);
    pthread_join(t, NULL);
    assert_int_equal(first.r.status, 200);
    response_free(&first.r);
    /* drain */
    assert_int_equal(pthread_create(&t, NULL, long_main, &first), 0);
    while (metric(&s, "graft_requests_running") < 1)
        usleep(2000);
    assert_int_equal(stop_server(&s), 0);
    pthread_join(t, NULL);
    assert_int_equal(first.r.status, 200);
    char *text = completion_text(&first.r);
    assert_true(strlen(text) > 100);
    free(text);
    response_free(&first.r);
}


/* The assistant's content of a whole chat completion response. */
static char *chat_text(const response *r)
{
    if (r->status != 200)
        fail_msg("status %ld: %s", r->status, r->body ? r->body : "");
    json_t *j = json_of(r);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    char *copy = strdup(json_string_value(json_object_get(msg, "content")));
    json_decref(j);
    return copy;
}

static int cached_tokens(const response *r)
{
    json_t *j = json_of(r);
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
    response a = request(s, "POST", "/v1/chat/completions", turn1);
    char *answer = chat_text(&a);
    json_t *t2 = json_loads(turn1, 0, NULL);
    json_t *msgs = json_object_get(t2, "messages");
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", answer));
    json_array_append_new(msgs, json_pack("{s:s, s:[{s:s, s:s}]}", "role", "user", "content",
                                          "type", "text", "text", "And then?"));
    char *turn2 = json_dumps(t2, JSON_COMPACT);
    response b = request(s, "POST", "/v1/chat/completions", turn2);
    response c = request(s, "POST", "/v1/chat/completions", turn2);
    char *tb = chat_text(&b), *tc = chat_text(&c);
    assert_string_equal(tb, tc);
    assert_true(cached_tokens(&b) > 0);
    /* streamed, the same text */
    json_object_set_new(t2, "stream", json_true());
    char *turn2s = json_dumps(t2, JSON_COMPACT);
    response d = request(s, "POST", "/v1/chat/completions", turn2s);
    char *td = chat_stream_text(&d);
    assert_string_equal(td, tb);
    /* a malformed message is refused naming its path */
    response e = request(s, "POST", "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                         "\"image_url\"}]}]}");
    free(expect_error(&e, 400, "messages[0].content[0]"));
    response f = request(s, "POST", "/v1/chat/completions", "{\"messages\": []}");
    free(expect_error(&f, 400, "messages"));
    json_decref(t2);
    free(turn2);
    free(turn2s);
    free(answer);
    free(tb);
    free(tc);
    free(td);
    response_free(&a);
    response_free(&b);
    response_free(&c);
    response_free(&d);
    response_free(&e);
    response_free(&f);
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
    server s = start_server(args);
    FILE *log = fopen(s.log, "r");
    char line[512];
    bool own = false;
    while (fgets(line, sizeof line, log))
        own = own || strstr(line, "chat template: the model's own") != NULL;
    fclose(log);
    assert_true(own);
    check_chat(&s);
    response t = request(&s, "POST", "/tokenize", "{\"content\": \"<|im_start|>user\"}");
    json_t *j = json_of(&t);
    assert_int_equal(json_array_size(json_object_get(j, "tokens")), 2); /* marker, "user" */
    json_decref(j);
    response_free(&t);
    assert_int_equal(stop_server(&s), 0);
}

/* The graft object's source of a whole response. */
static char *source_of(const response *r)
{
    json_t *j = json_of(r);
    char *src = strdup(json_string_value(json_object_get(json_object_get(j, "graft"), "source")));
    json_decref(j);
    return src;
}

static int reused_of(const response *r)
{
    json_t *j = json_of(r);
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
    response a = request(&main_server, "POST", "/v1/completions", turn1);
    char *t1 = completion_text(&a);
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a king%s. He\", "
             "\"max_tokens\": 16, \"temperature\": 0, \"session_id\": \"conv-1\"}", t1);
    response b = request(&main_server, "POST", "/v1/completions", body);
    char *src = source_of(&b), *t2 = completion_text(&b);
    assert_string_equal(src, "session");
    assert_true(reused_of(&b) > 10);
    free(src);
    /* the same turn without a session: the same text */
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time, there was a king%s. He\", "
             "\"max_tokens\": 16, \"temperature\": 0}", t1);
    response c = request(&main_server, "POST", "/v1/completions", body);
    char *t2_anonymous = completion_text(&c);
    assert_string_equal(t2, t2_anonymous);
    /* a rewind through the header: a clone at the common prefix */
    const char *rewind = "{\"prompt\": \"Once upon a time, there was a queen\", \"max_tokens\": 16, "
                         "\"temperature\": 0, \"session_id\": \"conv-1\"}";
    response d = request(&main_server, "POST", "/v1/completions", rewind);
    src = source_of(&d);
    assert_string_equal(src, "session");
    free(src);
    response e = request(&main_server, "POST", "/v1/completions",
                         "{\"prompt\": \"Once upon a time, there was a queen\", \"max_tokens\": "
                         "16, \"temperature\": 0}");
    char *td = completion_text(&d), *te = completion_text(&e);
    assert_string_equal(td, te);
    response l = request(&main_server, "GET", "/v1/sessions", NULL);
    assert_int_equal(l.status, 200);
    assert_non_null(strstr(l.body, "\"conv-1\""));
    response del = request(&main_server, "DELETE", "/v1/sessions/conv-1", NULL);
    assert_int_equal(del.status, 200);
    response again = request(&main_server, "DELETE", "/v1/sessions/conv-1", NULL);
    free(expect_error(&again, 404, NULL));
    response bad = request(&main_server, "POST", "/v1/completions",
                           "{\"prompt\": \"x\", \"session_id\": 7}");
    free(expect_error(&bad, 400, "session_id"));
    free(t1);
    free(t2);
    free(t2_anonymous);
    free(td);
    free(te);
    response_free(&a);
    response_free(&b);
    response_free(&c);
    response_free(&d);
    response_free(&e);
    response_free(&l);
    response_free(&del);
    response_free(&again);
    response_free(&bad);
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
        response r = request_full(c->s, "POST", "/v1/completions", body, NULL, abort_after);
        if (abort_after > 0 && r.status == 200 && !strstr(r.body ? r.body : "", "[DONE]"))
            c->aborted++;
        else if (r.status == 200)
            c->completed++;
        response_free(&r);
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
    server s = start_server(args);
    response before = request(&s, "POST", "/v1/completions", GREEDY);
    char *expected = completion_text(&before);
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
        live = metric(&s, "graft_generations_live");
        sessions = metric(&s, "graft_sessions_open");
        entries = metric(&s, "graft_cache_entries");
        if (live == 0 && sessions == entries && metric(&s, "graft_requests_running") == 0)
            break;
        usleep(10000);
    }
    assert_true(live == 0);
    assert_true(sessions == entries);
    assert_true(metric(&s, "graft_requests_running") == 0);
    assert_true(metric(&s, "graft_requests_queued") == 0);
    assert_true(metric(&s, "graft_client_disconnects_total") > 0);
    response after = request(&s, "POST", "/v1/completions", GREEDY);
    char *again = completion_text(&after);
    assert_string_equal(again, expected);
    free(expected);
    free(again);
    response_free(&before);
    response_free(&after);
    assert_int_equal(stop_server(&s), 0);
}

/* llama-server's GET /props and POST /apply-template. */
static void test_props_and_apply_template(void **state)
{
    (void)state;
    response r = request(&main_server, "GET", "/props", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "default_generation_settings"), "n_ctx")), 256);
    assert_non_null(strstr(json_string_value(json_object_get(j, "chat_template")), "im_start"));
    json_decref(j);
    response_free(&r);
    r = request(&main_server, "POST", "/apply-template",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    assert_int_equal(r.status, 200);
    j = json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    json_decref(j);
    response_free(&r);
    r = request(&main_server, "POST", "/apply-template", "{\"messages\": 3}");
    free(expect_error(&r, 400, "messages"));
    response_free(&r);
}

/* llama-server's POST /completion: the same text as /v1/completions, in its shape, whole and
 * streamed (chunks {content, stop}, the last with stop true; no [DONE]). */
static void test_llama_completion(void **state)
{
    (void)state;
    response o = request(&main_server, "POST", "/v1/completions", GREEDY);
    char *expected = completion_text(&o);
    const char *body = "{\"prompt\": \"Once upon a time, there was a dog\", \"n_predict\": 40, "
                       "\"temperature\": 0, \"cache_prompt\": true}";
    response r = request(&main_server, "POST", "/completion", body);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_string_equal(json_string_value(json_object_get(j, "content")), expected);
    assert_true(json_is_true(json_object_get(j, "stop")));
    assert_string_equal(json_string_value(json_object_get(j, "stop_type")), "limit");
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_predicted")), 40);
    assert_true(json_integer_value(json_object_get(j, "tokens_cached")) > 0);
    json_decref(j);
    const char *streamed = "{\"prompt\": \"Once upon a time, there was a dog\", \"n_predict\": "
                           "40, \"temperature\": 0, \"stream\": true}";
    response st = request(&main_server, "POST", "/completion", streamed);
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
    response_free(&o);
    response_free(&r);
    response_free(&st);
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
        cmocka_unit_test(test_chat_stories),
        cmocka_unit_test(test_named_sessions),
        cmocka_unit_test(test_chat_qwen_template),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_queue_limit_and_drain),
        cmocka_unit_test(test_load_with_disconnects),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
