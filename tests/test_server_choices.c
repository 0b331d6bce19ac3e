/*
 * test_server_choices.c: what a request asks of its answer beyond text: n choices (one
 * prefill, each the answer a single request with seed + index gets), several prompts in one
 * request (each choice the answer of its prompt alone, whole and streamed, refused whole,
 * cancelled whole), log-probabilities in
 * both OpenAI shapes, logit biases and penalties, and tools (rendered by the template,
 * generated calls parsed into tool_calls), and a thinking model's thought given apart
 * (reasoning_content, a Responses reasoning item) where its template opened one.
 *
 * Through HTTP against a real `graft serve` on stories260K (serve_client.h), except the tool
 * call parser and the choice's hold-back of tool-call text, which stories260K never writes:
 * those are driven directly with Hermes / Qwen style text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"
#include "serve_client.h"
#include "server/completion.h"

static server srv;

/* Starts the group's server with the chat template `name` of the templates folder. */
static int serve_with_template(const char *name)
{
    char tmpl[1024];
    const char *dir = getenv("GRAFT_TEMPLATES_DIR");
    snprintf(tmpl, sizeof tmpl, "%s/%s", dir ? dir : "../shared/templates", name);
    const char *args[] = {"--ctx", "1024", "--chat-template", tmpl, NULL};
    srv = graft_test_serve_begin(args);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return serve_with_template("Qwen-Qwen2.5-7B-Instruct.jinja");
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&srv);
}

/* POSTs body (consumed) and returns the JSON answer, which must have `status`. */
static json_t *post(const char *path, json_t *body, long status)
{
    return graft_test_post_json(&srv, path, body, status);
}

static const char *choice_text(json_t *reply, size_t i)
{
    json_t *c = json_array_get(json_object_get(reply, "choices"), i);
    json_t *msg = json_object_get(c, "message");
    return json_string_value(msg ? json_object_get(msg, "content") : json_object_get(c, "text"));
}

/* Chat choice i's message. */
static json_t *message_of(json_t *reply, size_t i)
{
    return json_object_get(json_array_get(json_object_get(reply, "choices"), i), "message");
}

/* Its reasoning_content, or NULL. */
static const char *thought_of(json_t *reply, size_t i)
{
    return json_string_value(json_object_get(message_of(reply, i), "reasoning_content"));
}

static json_int_t graft_field(json_t *reply, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(reply, "graft"), key));
}

/* The events of a streamed reply, in order (to free); it must end with one [DONE]. */
static json_t *events_of(response *r)
{
    json_t *events = json_array();
    int dones = 0;
    for (char *line = strtok(r->body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) != 0)
            continue;
        assert_int_equal(dones, 0); /* nothing after [DONE] */
        if (strcmp(line + 6, "[DONE]") == 0) {
            dones++;
            continue;
        }
        json_t *ev = json_loads(line + 6, 0, NULL);
        assert_non_null(ev);
        json_array_append_new(events, ev);
    }
    assert_int_equal(dones, 1);
    return events;
}

/* ---- n choices ---------------------------------------------------------------------------- */

/* A fresh prompt with n = 3, sampled: each choice is the single request with seed + index,
 * and the prompt was computed once (then one token per other choice). */
static void test_choices_share_one_prefill(void **state)
{
    (void)state;
    const char *prompt = "A red bird sat on the old fence and sang";
    json_t *many = post("/v1/completions",
                        json_pack("{s:s, s:i, s:i, s:f, s:i}", "prompt", prompt, "max_tokens", 24,
                                  "n", 3, "temperature", 1.0, "seed", 11),
                        200);
    json_t *choices = json_object_get(many, "choices");
    assert_int_equal(json_array_size(choices), 3);
    json_t *usage = json_object_get(many, "usage");
    json_int_t n_prompt = json_integer_value(json_object_get(usage, "prompt_tokens"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(many, "graft"), "source")),
                        "cold");
    assert_int_equal(graft_field(many, "tokens_computed"), n_prompt + 2);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 3 * 24);
    int distinct = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(choices, i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
        json_t *one = post("/v1/completions",
                           json_pack("{s:s, s:i, s:f, s:i}", "prompt", prompt, "max_tokens", 24,
                                     "temperature", 1.0, "seed", 11 + (int)i),
                           200);
        assert_string_equal(choice_text(many, i), choice_text(one, 0));
        distinct += i > 0 && strcmp(choice_text(many, i), choice_text(many, 0)) != 0;
        json_decref(one);
    }
    assert_true(distinct > 0); /* the seeds differ, and so do the answers */
    json_decref(many);

    /* greedy: every choice is the greedy answer */
    json_t *greedy = post("/v1/completions",
                          json_pack("{s:s, s:i, s:i, s:f}", "prompt", "The sun", "max_tokens", 16,
                                    "n", 2, "temperature", 0.0),
                          200);
    json_t *single = post("/v1/completions",
                          json_pack("{s:s, s:i, s:f}", "prompt", "The sun", "max_tokens", 16,
                                    "temperature", 0.0),
                          200);
    assert_string_equal(choice_text(greedy, 0), choice_text(single, 0));
    assert_string_equal(choice_text(greedy, 1), choice_text(single, 0));
    json_decref(greedy);
    json_decref(single);

    json_t *err = post("/v1/completions", json_pack("{s:s, s:i}", "prompt", "x", "n", 17), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "error"), "param")),
                        "n");
    json_decref(err);
}

/* Streamed with n = 3 (chat): each index's deltas add up to that choice of the whole
 * answer, and each index ends exactly once. */
static void test_choices_streamed(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:[{s:s, s:s}], s:i, s:i, s:f, s:i}", "messages", "role", "user",
                             "content", "Tell me about a frog.", "max_tokens", 20, "n", 3,
                             "temperature", 0.9, "seed", 5);
    json_t *whole = post("/v1/chat/completions", json_incref(body), 200);
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/chat/completions", text);
    assert_int_equal(r.status, 200);
    char *acc[3] = {calloc(1, 1), calloc(1, 1), calloc(1, 1)};
    int finishes[3] = {0}, roles[3] = {0};
    json_t *events = events_of(&r);
    size_t e;
    json_t *ev;
    json_array_foreach(events, e, ev) {
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        size_t i = (size_t)json_integer_value(json_object_get(c, "index"));
        assert_true(i < 3);
        json_t *delta = json_object_get(c, "delta");
        roles[i] += json_object_get(delta, "role") != NULL;
        const char *piece = json_string_value(json_object_get(delta, "content"));
        if (piece != NULL) {
            acc[i] = realloc(acc[i], strlen(acc[i]) + strlen(piece) + 1);
            strcat(acc[i], piece);
        }
        finishes[i] += json_is_string(json_object_get(c, "finish_reason"));
    }
    json_decref(events);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(acc[i], choice_text(whole, i));
        assert_int_equal(finishes[i], 1);
        assert_int_equal(roles[i], 1);
        free(acc[i]);
    }
    graft_test_response_free(&r);
    free(text);
    json_decref(body);
    json_decref(whole);
}

/* ---- several prompts ------------------------------------------------------------------------ */

/* The prompt's token ids as a text prompt gets them (BOS first). */
static json_t *token_ids(const char *text)
{
    json_t *j = post("/tokenize", json_pack("{s:s, s:b}", "content", text, "add_special", 1), 200);
    json_t *ids = json_incref(json_object_get(j, "tokens"));
    json_decref(j);
    assert_true(json_array_size(ids) > 1);
    return ids;
}

/* Three prompts with n = 2, sampled: choice p * 2 + j is the single request with prompt p
 * and seed + j, bit for bit, whether the prompts are given as text or as token ids, and again
 * when the batch finds them in the prefix cache; usage counts every prompt. */
static void test_batch_of_prompts(void **state)
{
    (void)state;
    const char *prompts[3] = {"The little cat looked at the big moon and",
                              "The little cat looked at the big moon and then it",
                              "Tom had a blue ball that he liked"};
    json_t *as_text = json_pack("[s, s, s]", prompts[0], prompts[1], prompts[2]);
    json_t *as_ids = json_pack("[o, o, o]", token_ids(prompts[0]), token_ids(prompts[1]),
                               token_ids(prompts[2]));
    json_t *batches[3];
    json_t *shapes[3] = {as_text, as_ids, as_text};
    for (int b = 0; b < 3; b++)
        batches[b] = post("/v1/completions",
                          json_pack("{s:O, s:i, s:i, s:f, s:i}", "prompt", shapes[b],
                                    "max_tokens", 12, "n", 2, "temperature", 1.0, "seed", 7),
                          200);
    json_int_t prompt_tokens = 0, completion_tokens = 0;
    for (size_t p = 0; p < 3; p++) {
        for (size_t j = 0; j < 2; j++) {
            json_t *one = post("/v1/completions",
                               json_pack("{s:s, s:i, s:f, s:i}", "prompt", prompts[p],
                                         "max_tokens", 12, "temperature", 1.0, "seed",
                                         7 + (int)j),
                               200);
            json_t *usage = json_object_get(one, "usage");
            completion_tokens += json_integer_value(json_object_get(usage, "completion_tokens"));
            if (j == 0)
                prompt_tokens += json_integer_value(json_object_get(usage, "prompt_tokens"));
            for (int b = 0; b < 3; b++) {
                json_t *c = json_array_get(json_object_get(batches[b], "choices"), p * 2 + j);
                assert_int_equal(json_integer_value(json_object_get(c, "index")),
                                 (json_int_t)(p * 2 + j));
                assert_string_equal(choice_text(batches[b], p * 2 + j), choice_text(one, 0));
            }
            json_decref(one);
        }
    }
    for (int b = 0; b < 3; b++) {
        assert_int_equal(json_array_size(json_object_get(batches[b], "choices")), 6);
        json_t *usage = json_object_get(batches[b], "usage");
        assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")),
                         prompt_tokens);
        assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")),
                         completion_tokens);
        json_t *each = json_object_get(json_object_get(batches[b], "graft"), "prompts");
        assert_int_equal(json_array_size(each), 3);
    }
    /* the last batch came after all of them: every prompt from the cache */
    json_t *each = json_object_get(json_object_get(batches[2], "graft"), "prompts");
    for (size_t p = 0; p < 3; p++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(each, p), "source")), "cache");
    for (int b = 0; b < 3; b++)
        json_decref(batches[b]);
    json_decref(as_text);
    json_decref(as_ids);
}

/* A batch streamed: each index's deltas add up to the whole batch's choice, with one final
 * chunk each; one id throughout; one usage chunk, counting the tokens the whole batch
 * counts; one [DONE]. */
static void test_batch_streamed(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:[s, s, s], s:i, s:i, s:f, s:i}", "prompt", "A frog sat",
                             "The sun was hot and", "Lily and Ben went to the", "max_tokens", 14,
                             "n", 2, "temperature", 0.9, "seed", 3);
    json_t *whole = post("/v1/completions", json_incref(body), 200);
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *text = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/completions", text);
    assert_int_equal(r.status, 200);
    enum { N = 6 };
    char *acc[N];
    int finishes[N] = {0}, usages = 0;
    for (int i = 0; i < N; i++)
        acc[i] = calloc(1, 1);
    json_t *events = events_of(&r);
    const char *id = json_string_value(json_object_get(json_array_get(events, 0), "id"));
    size_t e;
    json_t *ev;
    json_array_foreach(events, e, ev) {
        assert_string_equal(json_string_value(json_object_get(ev, "id")), id);
        json_t *usage = json_object_get(ev, "usage");
        if (usage != NULL) {
            usages++;
            /* all but cached_tokens, which differ: the stream came second */
            static const char *const counts[] = {"prompt_tokens", "completion_tokens",
                                                 "total_tokens"};
            json_t *want = json_object_get(whole, "usage");
            for (size_t k = 0; k < 3; k++)
                assert_int_equal(json_integer_value(json_object_get(usage, counts[k])),
                                 json_integer_value(json_object_get(want, counts[k])));
            assert_int_equal(json_array_size(json_object_get(json_object_get(ev, "graft"),
                                                             "prompts")), 3);
        }
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        if (c != NULL) {
            json_int_t i = json_integer_value(json_object_get(c, "index"));
            assert_true(i >= 0 && i < N);
            const char *piece = json_string_value(json_object_get(c, "text"));
            acc[i] = realloc(acc[i], strlen(acc[i]) + strlen(piece) + 1);
            strcat(acc[i], piece);
            finishes[i] += json_is_string(json_object_get(c, "finish_reason"));
        }
    }
    json_decref(events);
    assert_int_equal(usages, 1);
    for (int i = 0; i < N; i++) {
        assert_string_equal(acc[i], choice_text(whole, (size_t)i));
        assert_int_equal(finishes[i], 1);
        free(acc[i]);
    }
    graft_test_response_free(&r);
    free(text);
    json_decref(body);
    json_decref(whole);
}

/* A client that hangs up after the first event of a streamed batch cancels every prompt's
 * generations, and the same for a whole batch whose client goes away: nothing stays live. */
static void test_batch_disconnect_cancels(void **state)
{
    (void)state;
    for (int streamed = 1; streamed >= 0; streamed--) {
        json_t *body = json_pack("{s:[s, [i, i, i]], s:i, s:i, s:b, s:i, s:b}", "prompt", "Once",
                                 1, 20, 30, "max_tokens", 300, "temperature", 0, "ignore_eos", 1,
                                 "n", 2, "stream", streamed);
        char *text = json_dumps(body, JSON_COMPACT);
        double before = graft_test_metric(&srv, "graft_client_disconnects_total");
        if (streamed) { /* hang up after the first event */
            response r = graft_test_request_full(&srv, "POST", "/v1/completions", text, NULL, 1);
            graft_test_response_free(&r);
        } else { /* give up waiting for the whole answer after 100 ms */
            char url[64];
            snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", srv.port);
            CURL *h = curl_easy_init();
            assert_non_null(h);
            curl_easy_setopt(h, CURLOPT_URL, url);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
            curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 100L);
            assert_int_equal(curl_easy_perform(h), CURLE_OPERATION_TIMEDOUT);
            curl_easy_cleanup(h);
        }
        graft_test_expect_cancelled(&srv, before);
        assert_true(graft_test_metric(&srv, "graft_client_disconnects_total") == before + 1);
        free(text);
        json_decref(body);
    }
}

typedef struct at_once {
    char body[256];
    response reply;
} at_once;

static void *at_once_main(void *arg)
{
    at_once *a = arg;
    a->reply = graft_test_request(&srv, "POST", "/v1/completions", a->body);
    return NULL;
}

/* With the prefix cache full of snapshots, as many requests as there are slots (the default
 * --max-sessions, 4), each of 16 choices (2 prompts x n = 8), run at once: every choice gets
 * a session. */
static void test_full_slots_of_full_batches(void **state)
{
    (void)state;
    for (int i = 0; i < 40; i++) { /* more distinct prompts than the cache's 32 entries */
        char body[128];
        snprintf(body, sizeof body, "{\"prompt\": [1, %d, %d, 7], \"max_tokens\": 1}", 100 + i,
                 300 + i);
        json_decref(post("/v1/completions", json_loads(body, 0, NULL), 200));
    }
    assert_true(graft_test_metric(&srv, "graft_cache_entries") == 32);
    at_once a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        snprintf(a[i].body, sizeof a[i].body,
                 "{\"prompt\": [\"A cat %d\", \"A dog %d\"], \"n\": 8, \"max_tokens\": 24, "
                 "\"temperature\": 1, \"seed\": %d}", i, i, i);
        assert_int_equal(pthread_create(&t[i], NULL, at_once_main, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        if (a[i].reply.status != 200)
            fail_msg("request %d: status %ld: %s", i, a[i].reply.status,
                     a[i].reply.body ? a[i].reply.body : "");
        json_t *j = graft_test_json_of(&a[i].reply);
        assert_int_equal(json_array_size(json_object_get(j, "choices")), 16);
        json_decref(j);
        graft_test_response_free(&a[i].reply);
    }
}

/* A batch is refused whole, naming the prompt at fault; what cannot go with several prompts
 * is refused; nothing of it stays running. */
static void test_batch_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *body, *param, *message;
    } cases[] = {
        {"{\"prompt\": [[1, 2], [3, -4]]}", "prompt[1][1]", "'prompt[1][1]' must be a token id"},
        {"{\"prompt\": [\"a\", 5]}", "prompt[1]", "must be a string or a non-empty array"},
        {"{\"prompt\": [\"a\", []]}", "prompt[1]", "must be a string or a non-empty array"},
        {"{\"prompt\": [[1, 2], [3, 100000]]}", "prompt[1][1]", "outside the vocabulary"},
        {"{\"prompt\": [\"a\", \"b\", \"c\"], \"n\": 6}", "prompt",
         "holds 3 prompts and 'n' is 6: a request makes at most 16 completions"},
        {"{\"prompt\": [\"a\", \"b\"], \"session_id\": \"s\"}", "prompt",
         "a named session takes one prompt"},
        {"{\"prompt\": [\"a\", \"b\"], \"max_tokens\": 5000}", "max_tokens", "exceed the context"},
        {"{\"prompt\": [\"a\", \"b\"], \"temperature\": -1}", "temperature", "temperature"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        response r = graft_test_request(&srv, "POST", "/v1/completions", cases[i].body);
        if (r.status != 400)
            fail_msg("%s: status %ld, expected 400: %s", cases[i].body, r.status,
                     r.body ? r.body : "");
        json_t *j = graft_test_json_of(&r);
        json_t *err = json_object_get(j, "error");
        const char *param = json_string_value(json_object_get(err, "param"));
        const char *message = json_string_value(json_object_get(err, "message"));
        if (param == NULL || strcmp(param, cases[i].param) != 0 || message == NULL ||
            strstr(message, cases[i].message) == NULL)
            fail_msg("%s: param %s, message %s", cases[i].body, param ? param : "(none)",
                     message ? message : "(none)");
        json_decref(j);
        graft_test_response_free(&r);
    }
    assert_true(graft_test_metric(&srv, "graft_generations_live") == 0);
    /* POST /completion (llama-server's) takes one prompt */
    json_t *one = post("/completion", json_pack("{s:[s, s]}", "prompt", "a", "b"), 400);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(one, "error"), "message")),
        "POST /completion takes one prompt"));
    json_decref(one);
}

/* ---- log-probabilities ------------------------------------------------------------------- */

/* The completions API's shape: tokens that spell the text, offsets where each begins, the
 * sampled token's log-probability equal to the best alternative's under greedy; and the
 * token ids return_tokens asks for. */
static void test_logprobs_completions_shape(void **state)
{
    (void)state;
    json_t *j = post("/v1/completions",
                     json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", "Once upon a time",
                               "max_tokens", 16, "temperature", 0.0, "logprobs", 3,
                               "return_tokens", 1),
                     200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(c, "text"));
    json_t *lp = json_object_get(c, "logprobs");
    json_t *tokens = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    assert_int_equal(json_array_size(tokens), 16);
    assert_int_equal(json_array_size(lps), 16);
    assert_int_equal(json_array_size(tops), 16);
    size_t at = 0;
    for (size_t i = 0; i < 16; i++) {
        const char *t = json_string_value(json_array_get(tokens, i));
        assert_int_equal(json_integer_value(json_array_get(offs, i)), (json_int_t)at);
        assert_memory_equal(text + at, t, strlen(t));
        at += strlen(t);
        double l = json_number_value(json_array_get(lps, i));
        assert_true(l <= 0.0);
        json_t *top = json_array_get(tops, i);
        assert_true(json_object_size(top) >= 1 && json_object_size(top) <= 3);
        double best = -INFINITY;
        const char *key;
        json_t *v;
        json_object_foreach(top, key, v) {
            if (json_number_value(v) > best)
                best = json_number_value(v);
        }
        assert_true(best == l);
        assert_true(json_number_value(json_object_get(top, t)) == l);
    }
    assert_int_equal(at, strlen(text));
    /* return_tokens: the ids, which detokenize to the text */
    json_t *ids = json_object_get(c, "tokens");
    assert_int_equal(json_array_size(ids), 16);
    json_t *detok = post("/detokenize", json_pack("{s:O}", "tokens", ids), 200);
    assert_string_equal(json_string_value(json_object_get(detok, "content")), text);
    json_decref(detok);
    json_decref(j);
}

/* Chat's shape, whole and streamed: the same entries; top_logprobs needs logprobs. */
static void test_logprobs_chat_stream_matches_whole(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:[{s:s, s:s}], s:i, s:f, s:b, s:i}", "messages", "role", "user",
                             "content", "Hello there.", "max_tokens", 12, "temperature", 0.0,
                             "logprobs", 1, "top_logprobs", 2);
    json_t *whole = post("/v1/chat/completions", json_incref(body), 200);
    json_t *content = json_object_get(
        json_object_get(json_array_get(json_object_get(whole, "choices"), 0), "logprobs"), "content");
    assert_int_equal(json_array_size(content), 12);
    json_t *e0 = json_array_get(content, 0);
    assert_int_equal(json_array_size(json_object_get(e0, "top_logprobs")), 2);
    assert_true(json_is_array(json_object_get(e0, "bytes")));
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/chat/completions", text);
    json_t *streamed = json_array();
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7) != 0)
            continue;
        json_t *ev = json_loads(line + 6, 0, NULL);
        json_t *lp = json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "logprobs");
        json_array_extend(streamed, json_object_get(lp, "content"));
        json_decref(ev);
    }
    assert_true(json_equal(streamed, content));
    json_decref(streamed);
    graft_test_response_free(&r);
    free(text);

    json_object_set_new(body, "logprobs", json_false());
    json_object_del(body, "stream");
    json_t *err = post("/v1/chat/completions", json_incref(body), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "error"), "param")),
                        "top_logprobs");
    json_decref(err);
    json_decref(body);
    json_decref(whole);
}

/* ---- biases and penalties ------------------------------------------------------------------ */

static void test_logit_bias_and_penalties(void **state)
{
    (void)state;
    json_t *plain = post("/v1/completions",
                         json_pack("{s:s, s:i, s:f, s:i}", "prompt", "The dog", "max_tokens", 1,
                                   "temperature", 0.0, "logprobs", 0),
                         200);
    json_t *c = json_array_get(json_object_get(plain, "choices"), 0);
    const char *first = json_string_value(json_object_get(c, "text"));
    /* its id: the token "The dog" + first has after those of "The dog" */
    char *longer = malloc(strlen(first) + 8);
    sprintf(longer, "The dog%s", first);
    json_t *tok = post("/tokenize", json_pack("{s:s}", "content", longer), 200);
    json_t *base = post("/tokenize", json_pack("{s:s}", "content", "The dog"), 200);
    size_t at = json_array_size(json_object_get(base, "tokens"));
    json_int_t id = json_integer_value(json_array_get(json_object_get(tok, "tokens"), at));
    json_decref(base);
    free(longer);
    char key[32];
    snprintf(key, sizeof key, "%lld", (long long)id);
    json_t *banned = post("/v1/completions",
                          json_pack("{s:s, s:i, s:f, s:{s:i}}", "prompt", "The dog", "max_tokens",
                                    1, "temperature", 0.0, "logit_bias", key, -100),
                          200);
    assert_string_not_equal(choice_text(banned, 0), first);
    /* llama-server's forms: [[id, bias]] and false (never sampled) ban it alike */
    json_t *pairs = post("/v1/completions",
                         json_pack("{s:s, s:i, s:f, s:[[I, f]]}", "prompt", "The dog",
                                   "max_tokens", 1, "temperature", 0.0, "logit_bias", id,
                                   -100.0),
                         200);
    json_t *never = post("/v1/completions",
                         json_pack("{s:s, s:i, s:f, s:[[I, b]]}", "prompt", "The dog",
                                   "max_tokens", 1, "temperature", 0.0, "logit_bias", id, 0),
                         200);
    assert_string_equal(choice_text(pairs, 0), choice_text(banned, 0));
    assert_string_equal(choice_text(never, 0), choice_text(banned, 0));
    json_decref(pairs);
    json_decref(never);
    json_decref(banned);
    json_decref(tok);
    json_decref(plain);
    /* a text's tokens, as a pair or as an object's key, false: none of them is sampled,
     * where the greedy story has them */
    const char *girl = "Once upon a time there was a little girl named";
    json_t *lily = post("/tokenize", json_pack("{s:s}", "content", "Lily"), 200);
    json_t *texts[3];
    for (int form = 0; form < 3; form++) {
        json_t *req = json_pack("{s:s, s:i, s:f, s:b}", "prompt", girl, "max_tokens", 12,
                                "temperature", 0.0, "return_tokens", 1);
        if (form == 1)
            json_object_set_new(req, "logit_bias", json_pack("[[s, b]]", "Lily", 0));
        if (form == 2)
            json_object_set_new(req, "logit_bias", json_pack("{s:b}", "Lily", 0));
        texts[form] = post("/v1/completions", req, 200);
    }
    json_t *lily_ids = json_object_get(lily, "tokens");
    bool had = false;
    for (int form = 0; form < 3; form++) {
        json_t *ids = json_object_get(json_array_get(json_object_get(texts[form], "choices"), 0),
                                      "tokens");
        for (size_t t = 0; t < json_array_size(ids); t++)
            for (size_t k = 0; k < json_array_size(lily_ids); k++) {
                bool same = json_equal(json_array_get(ids, t), json_array_get(lily_ids, k));
                if (form == 0)
                    had = had || same;
                else if (same)
                    fail_msg("form %d: a token of 'Lily' was sampled", form);
            }
    }
    assert_true(had);
    assert_string_equal(choice_text(texts[1], 0), choice_text(texts[2], 0));
    for (int form = 0; form < 3; form++)
        json_decref(texts[form]);
    json_decref(lily);

    /* penalties: deterministic, and a strong one changes a greedy story that repeats */
    json_t *body = json_pack("{s:s, s:i, s:f}", "prompt", "Once upon a time", "max_tokens", 60,
                             "temperature", 0.0);
    json_t *greedy = post("/v1/completions", json_incref(body), 200);
    json_object_set_new(body, "frequency_penalty", json_real(1.5));
    json_object_set_new(body, "presence_penalty", json_real(0.5));
    json_t *a = post("/v1/completions", json_incref(body), 200);
    json_t *b = post("/v1/completions", json_incref(body), 200);
    assert_string_equal(choice_text(a, 0), choice_text(b, 0));
    assert_string_not_equal(choice_text(a, 0), choice_text(greedy, 0));
    json_decref(a);
    json_decref(b);
    json_decref(greedy);
    json_decref(body);

    /* the repetition penalty's window (llama-server's repeat_last_n): -1 is the whole
     * history, as without it; 0 turns the penalty off; a window of 16 is neither */
    const char *story = "Once upon a time there was a little girl named Lily. Lily";
    const char *windows[] = {NULL, "-1", "0", "16", "none"};
    json_t *answers[5];
    for (int w = 0; w < 5; w++) {
        json_t *req = json_pack("{s:s, s:i, s:f}", "prompt", story, "max_tokens", 24,
                                "temperature", 0.0);
        if (w < 4)
            json_object_set_new(req, "repeat_penalty", json_real(1.5));
        if (windows[w] != NULL && w < 4)
            json_object_set_new(req, w == 3 ? "penalty_last_n" : "repeat_last_n",
                                json_integer(atoi(windows[w])));
        answers[w] = post("/v1/completions", req, 200);
    }
    assert_string_equal(choice_text(answers[1], 0), choice_text(answers[0], 0));
    assert_string_equal(choice_text(answers[2], 0), choice_text(answers[4], 0));
    assert_string_not_equal(choice_text(answers[0], 0), choice_text(answers[4], 0));
    assert_string_not_equal(choice_text(answers[3], 0), choice_text(answers[0], 0));
    assert_string_not_equal(choice_text(answers[3], 0), choice_text(answers[4], 0));
    for (int w = 0; w < 5; w++)
        json_decref(answers[w]);

    struct {
        const char *body, *param;
    } bad[] = {
        {"{\"prompt\": \"x\", \"repeat_last_n\": -2}", "repeat_last_n"},
        {"{\"prompt\": \"x\", \"typical_p\": 1.5}", "typical_p"},
        {"{\"prompt\": \"x\", \"mirostat\": 3}", "mirostat"},
        {"{\"prompt\": \"x\", \"mirostat_tau\": -1}", "mirostat_tau"},
        {"{\"prompt\": \"x\", \"mirostat_eta\": \"0.1\"}", "mirostat_eta"},
        {"{\"prompt\": \"x\", \"dry_multiplier\": -0.8}", "dry_multiplier"},
        {"{\"prompt\": \"x\", \"dry_base\": 0.5}", "dry_base"},
        {"{\"prompt\": \"x\", \"dry_allowed_length\": -1}", "dry_allowed_length"},
        {"{\"prompt\": \"x\", \"dry_penalty_last_n\": -2}", "dry_penalty_last_n"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": \"\\n\"}", "dry_sequence_breakers"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": [\":\", \"\"]}",
         "dry_sequence_breakers[1]"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": "
         "[\"12345678901234567890123456789012345678901\"]}", "dry_sequence_breakers[0]"},
        {"{\"prompt\": \"x\", \"dry_sequence_breakers\": [1]}", "dry_sequence_breakers[0]"},
        {"{\"prompt\": \"x\", \"xtc_probability\": 2}", "xtc_probability"},
        {"{\"prompt\": \"x\", \"xtc_threshold\": -1}", "xtc_threshold"},
        {"{\"prompt\": \"x\", \"top_n_sigma\": \"1\"}", "top_n_sigma"},
        {"{\"prompt\": \"x\", \"dynatemp_range\": -0.5}", "dynatemp_range"},
        {"{\"prompt\": \"x\", \"tfs_z\": 0.95}", "tfs_z"},
        {"{\"prompt\": \"x\", \"min_keep\": 2}", "min_keep"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"99999\": 1}}", "logit_bias.99999"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"abc\": \"1\"}}", "logit_bias.abc"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"5\": true}}", "logit_bias.5"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[5]]}", "logit_bias[0]"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[-5, 1]]}", "logit_bias[0][0]"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[\"\", 1]]}", "logit_bias[0][0]"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[5, 101]]}", "logit_bias[0][1]"},
        {"{\"prompt\": \"x\", \"logit_bias\": [[99999, 1]]}", "logit_bias.99999"},
        {"{\"prompt\": \"x\", \"logit_bias\": 5}", "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"5\": 101}}", "logit_bias.5"},
        {"{\"prompt\": \"x\", \"presence_penalty\": 3}", "presence_penalty"},
        {"{\"prompt\": \"x\", \"frequency_penalty\": \"a\"}", "frequency_penalty"},
        {"{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        response r = graft_test_request(&srv, "POST", "/v1/completions", bad[i].body);
        free(graft_test_expect_error(&r, 400, bad[i].param));
        graft_test_response_free(&r);
    }
    /* XTC, top-n-sigma, typical_p, dynatemp and Mirostat reach the sampler: the same seed
     * samples other text */
    const char *with[] = {NULL, "xtc", "top_n_sigma", "typical_p", "dynatemp_range",
                          "mirostat 1", "mirostat 2"};
    enum { N_WITH = sizeof with / sizeof with[0] };
    json_t *sampled[N_WITH];
    for (int w = 0; w < N_WITH; w++) {
        json_t *req = json_pack("{s:s, s:i, s:f, s:i, s:f, s:f, s:i}", "prompt",
                                "Once upon a time", "max_tokens", 24, "temperature", 1.5,
                                "top_k", 0, "top_p", 1.0, "min_p", 0.0, "seed", 3);
        if (w == 1) {
            json_object_set_new(req, "xtc_probability", json_real(1.0));
            json_object_set_new(req, "xtc_threshold", json_real(0.05));
        } else if (w == 2) {
            json_object_set_new(req, "top_n_sigma", json_real(0.5));
        } else if (w == 3) {
            json_object_set_new(req, "typical_p", json_real(0.5));
        } else if (w == 4) {
            json_object_set_new(req, "dynatemp_range", json_real(1.0));
        } else if (w >= 5) {
            json_object_set_new(req, "mirostat", json_integer(w - 4));
            json_object_set_new(req, "mirostat_tau", json_real(3.0));
        }
        sampled[w] = post("/v1/completions", req, 200);
        if (w > 0 && strcmp(choice_text(sampled[w], 0), choice_text(sampled[0], 0)) == 0)
            fail_msg("%s: the same text as without it", with[w]);
    }
    assert_string_not_equal(choice_text(sampled[5], 0), choice_text(sampled[6], 0));
    for (int w = 0; w < N_WITH; w++)
        json_decref(sampled[w]);
    /* top_p 0 (OpenAI's range starts there) keeps the likeliest token alone: greedy */
    json_t *greedy_story = post("/v1/completions",
                                json_pack("{s:s, s:i, s:f}", "prompt", story, "max_tokens", 24,
                                          "temperature", 0.0),
                                200);
    json_t *top_p0 = post("/v1/completions",
                          json_pack("{s:s, s:i, s:f, s:f, s:i}", "prompt", story, "max_tokens",
                                    24, "temperature", 1.5, "top_p", 0.0, "seed", 3),
                          200);
    assert_string_equal(choice_text(top_p0, 0), choice_text(greedy_story, 0));
    json_decref(greedy_story);
    json_decref(top_p0);
    /* DRY: greedy after a thrice repeated sentence, other text with it; a window of 0 is DRY
     * off and -1 the whole history, as without it; the breakers reach the sampler */
    const char *repeated = "Lily had a red ball. Lily had a red ball. Lily had a red ball. "
                           "Lily had a";
    const char *dry[] = {"off", "on", "window 0", "window -1", "breaker ."};
    enum { N_DRY = sizeof dry / sizeof dry[0] };
    json_t *dried[N_DRY];
    for (int d = 0; d < N_DRY; d++) {
        json_t *req = json_pack("{s:s, s:i, s:f}", "prompt", repeated, "max_tokens", 16,
                                "temperature", 0.0);
        if (d > 0)
            json_object_set_new(req, "dry_multiplier", json_real(0.8));
        if (d == 2 || d == 3)
            json_object_set_new(req, "dry_penalty_last_n", json_integer(d == 2 ? 0 : -1));
        if (d == 4)
            json_object_set_new(req, "dry_sequence_breakers", json_pack("[s]", "."));
        dried[d] = post("/v1/completions", req, 200);
    }
    assert_string_not_equal(choice_text(dried[1], 0), choice_text(dried[0], 0));
    assert_string_equal(choice_text(dried[2], 0), choice_text(dried[0], 0));
    assert_string_equal(choice_text(dried[3], 0), choice_text(dried[1], 0));
    assert_string_not_equal(choice_text(dried[4], 0), choice_text(dried[1], 0));
    for (int d = 0; d < N_DRY; d++)
        json_decref(dried[d]);
    /* llama.cpp's samplers at their off values (its web UI sends them all) ask for nothing */
    json_t *off = post("/v1/completions",
                       json_pack("{s:s, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:i}",
                                 "prompt", story, "max_tokens", 24, "temperature", 0.0,
                                 "typical_p", 1.0, "mirostat", 0, "dry_multiplier", 0.0,
                                 "xtc_probability", 0.0, "top_n_sigma", -1.0, "dynatemp_range",
                                 0.0, "tfs_z", 1.0, "min_keep", 0),
                       200);
    json_t *none = post("/v1/completions",
                        json_pack("{s:s, s:i, s:f}", "prompt", story, "max_tokens", 24,
                                  "temperature", 0.0),
                        200);
    assert_string_equal(choice_text(off, 0), choice_text(none, 0));
    json_decref(off);
    json_decref(none);
}

/* ---- tools ------------------------------------------------------------------------------------ */

static json_t *weather_tools(void)
{
    return json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}}}}]", "type", "function",
                     "function", "name", "get_weather", "description", "The weather in a city",
                     "parameters", "type", "object", "properties", "city", "type", "string");
}

/* The template renders the tools and an earlier call's arguments as an object; requests
 * with tools answer; a malformed tool_choice or tool is refused by name (forced calls are
 * test_server_json's). */
static void test_tools_rendered_and_checked(void **state)
{
    (void)state;
    json_t *messages = json_pack(
        "[{s:s, s:s}, {s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, {s:s, s:s, s:s}]", "role", "user",
        "content", "Weather in Paris?", "role", "assistant", "content", "tool_calls", "id", "c1",
        "type", "function", "function", "name", "get_weather", "arguments", "{\"city\": \"Paris\"}",
        "role", "tool", "tool_call_id", "c1", "content", "sunny");
    json_t *body = json_pack("{s:O, s:o}", "messages", messages, "tools", weather_tools());
    json_t *rendered = post("/apply-template", json_incref(body), 200);
    const char *prompt = json_string_value(json_object_get(rendered, "prompt"));
    assert_non_null(strstr(prompt, "<tools>"));
    assert_non_null(strstr(prompt, "\"get_weather\""));
    assert_non_null(strstr(prompt, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));
    json_decref(rendered);

    json_object_set_new(body, "max_tokens", json_integer(8));
    json_object_set_new(body, "temperature", json_real(0));
    json_t *answer = post("/v1/chat/completions", json_incref(body), 200);
    json_t *msg = message_of(answer, 0);
    assert_true(json_is_string(json_object_get(msg, "content")));
    json_decref(answer);

    json_object_set_new(body, "tool_choice", json_string("none"));
    json_t *none = post("/apply-template", json_incref(body), 200);
    assert_null(strstr(json_string_value(json_object_get(none, "prompt")), "<tools>"));
    json_decref(none);

    json_object_set_new(body, "tool_choice", json_string("always"));
    json_t *err = post("/v1/chat/completions", json_incref(body), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "error"), "param")),
                        "tool_choice");
    json_decref(err);
    json_object_del(body, "tool_choice");
    json_object_set_new(body, "tools", json_pack("[{s:s, s:{}}]", "type", "function", "function"));
    err = post("/v1/chat/completions", json_incref(body), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "error"), "param")),
                        "tools[0].function.name");
    json_decref(err);
    json_decref(messages);
    json_decref(body);
}

/* The choice as a stream sees it: text arrives in pieces; content is never given past the
 * start of a tool call, each complete call is parsed once, and the final message carries
 * the content and the calls; with parallel_tool_calls false only the first call. */
static void feed(choice *ch, const char *piece)
{
    size_t n = strlen(piece);
    ch->text = realloc(ch->text, ch->len + n + 1);
    memcpy(ch->text + ch->len, piece, n + 1);
    ch->len += n;
}

static void test_tool_calls_parsed_from_text(void **state)
{
    (void)state;
    static graft__server_config config = {.alias = "m"};
    static graft__server_ctx ctx = {.config = &config};
    completion *c = calloc(1, sizeof *c);
    c->ctx = &ctx;
    c->req.chat = c->req.tools = true;
    snprintf(c->id, sizeof c->id, "chatcmpl-9");
    c->n_choices = 1;
    choice *ch = &c->choices[0];
    *ch = (choice){.c = c, .calls = json_array()};
    const char *pieces[] = {"Let me check", ".\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                            "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                            "\n<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>\n"};
    size_t released_max = 0;
    size_t calls_after[5];
    for (size_t i = 0; i < 5; i++) {
        feed(ch, pieces[i]);
        size_t upto = graft__choice_release(ch);
        assert_true(upto <= strlen("Let me check.\n"));
        assert_null(memchr(ch->text, '<', upto));
        released_max = upto > released_max ? upto : released_max;
        calls_after[i] = json_array_size(ch->calls);
    }
    assert_int_equal(released_max, strlen("Let me check.\n"));
    assert_int_equal(calls_after[2], 0); /* not complete yet */
    assert_int_equal(calls_after[3], 1);
    assert_int_equal(calls_after[4], 2);
    ch->done = true;
    graft__choice_settle_tools(ch);
    assert_false(ch->calls_bad);
    json_t *j = graft__choice_json(c, ch, 0, ch->content_end, false, true);
    json_t *msg = json_object_get(j, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Let me check.\n");
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"city\":\"Paris\"}");
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")),
                        "call_chatcmpl-9_0_0");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(calls, 1), "function"), "arguments")),
                        "{}");
    json_decref(j);

    /* parallel_tool_calls false: the choice ends after its first call, even when the text
     * holds a second complete one */
    free(ch->text);
    json_decref(ch->calls);
    *ch = (choice){.c = c, .calls = json_array()};
    c->req.one_call = true;
    for (size_t i = 0; i < 5; i++)
        feed(ch, pieces[i]);
    graft__choice_release(ch);
    assert_true(ch->stopped);
    assert_int_equal(json_array_size(ch->calls), 1);
    assert_int_equal(ch->len, strlen(pieces[0]) + strlen(pieces[1]) + strlen(pieces[2]) +
                                  strlen(pieces[3]));
    graft__choice_settle_tools(ch);
    assert_false(ch->calls_bad);
    assert_string_equal(graft__choice_finish_reason(ch), "tool_calls");
    c->req.one_call = false;

    /* a block that is not a call is content after all */
    free(ch->text);
    json_decref(ch->calls);
    *ch = (choice){.c = c, .calls = json_array()};
    feed(ch, "Sure: <tool_call>not json</tool_call> done");
    graft__choice_release(ch);
    graft__choice_settle_tools(ch);
    assert_true(ch->calls_bad);
    assert_int_equal(json_array_size(ch->calls), 0);
    j = graft__choice_json(c, ch, 0, ch->content_end, false, true);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "message"), "content")),
                        "Sure: <tool_call>not json</tool_call> done");
    assert_null(json_object_get(json_object_get(j, "message"), "tool_calls"));
    json_decref(j);

    /* text that only looked like the start of a call */
    free(ch->text);
    json_decref(ch->calls);
    *ch = (choice){.c = c, .calls = json_array()};
    feed(ch, "a <tool");
    assert_int_equal(graft__choice_release(ch), 2);
    graft__choice_settle_tools(ch);
    j = graft__choice_json(c, ch, 0, ch->content_end, false, true);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "message"), "content")),
                        "a <tool");
    json_decref(j);
    free(ch->text);
    json_decref(ch->calls);
    free(c);
}

/* ---- a thinking model's template ------------------------------------------------------------ */

/* The same server with QwQ's template, whose generation prompt opens a thought when
 * enable_thinking is true (stories260K never closes it: its whole answer is the thought). */
static int thinking_setup(void **state)
{
    (void)state;
    return serve_with_template("Qwen-QwQ-32B.jinja");
}

/* A greedy chat request of max_tokens about a story, thinking on; reasoning_format when
 * given. */
static json_t *thinking_body(int max_tokens, const char *reasoning_format)
{
    json_t *body = json_pack("{s:[{s:s, s:s}], s:i, s:f, s:{s:b}}", "messages", "role", "user",
                             "content", "Tell me a story.", "max_tokens", max_tokens,
                             "temperature", 0.0, "chat_template_kwargs", "enable_thinking", 1);
    if (reasoning_format != NULL)
        json_object_set_new(body, "reasoning_format", json_string(reasoning_format));
    return body;
}

static json_int_t reasoning_tokens(json_t *reply)
{
    json_t *details = json_object_get(json_object_get(reply, "usage"),
                                      "completion_tokens_details");
    assert_non_null(details);
    return json_integer_value(json_object_get(details, "reasoning_tokens"));
}

/* The text without white space at either end (to free). */
static char *stripped(const char *text)
{
    while (*text == ' ' || *text == '\n' || *text == '\r' || *text == '\t')
        text++;
    size_t n = strlen(text);
    while (n > 0 && strchr(" \n\r\t", text[n - 1]) != NULL)
        n--;
    return strndup(text, n);
}

/* A prompt that opened the thought: the answer is reasoning_content (its text as written,
 * stripped, which reasoning_format none gives as content), the content empty; every token
 * counted as reasoning (in usage and /metrics); streamed, the deltas add up to it and carry
 * no content. */
static void test_thought_whole_streamed_and_raw(void **state)
{
    (void)state;
    double reasoning_before = graft_test_metric(&srv, "graft_reasoning_tokens_total");
    json_t *whole = post("/v1/chat/completions", thinking_body(24, NULL), 200);
    assert_true(graft_test_metric(&srv, "graft_reasoning_tokens_total") ==
                reasoning_before + 24);
    const char *thought = thought_of(whole, 0);
    assert_non_null(thought);
    assert_true(strlen(thought) > 0);
    assert_string_equal(choice_text(whole, 0), "");
    assert_int_equal(reasoning_tokens(whole), 24);

    json_t *raw = post("/v1/chat/completions", thinking_body(24, "none"), 200);
    assert_null(thought_of(raw, 0));
    assert_null(json_object_get(json_object_get(raw, "usage"), "completion_tokens_details"));
    char *raw_stripped = stripped(choice_text(raw, 0));
    assert_string_equal(raw_stripped, thought);
    free(raw_stripped);
    json_decref(raw);

    json_t *body = thinking_body(24, "deepseek");
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *text = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/chat/completions", text);
    assert_int_equal(r.status, 200);
    json_t *events = events_of(&r);
    char *acc = calloc(1, 1);
    size_t e;
    json_t *ev;
    json_array_foreach(events, e, ev) {
        json_t *delta = json_object_get(json_array_get(json_object_get(ev, "choices"), 0),
                                        "delta");
        const char *piece = json_string_value(json_object_get(delta, "reasoning_content"));
        const char *content = json_string_value(json_object_get(delta, "content"));
        assert_true(content == NULL || content[0] == '\0');
        if (piece != NULL) {
            assert_true(piece[0] != '\0');
            acc = realloc(acc, strlen(acc) + strlen(piece) + 1);
            strcat(acc, piece);
        }
        if (json_object_get(ev, "usage") != NULL)
            assert_int_equal(reasoning_tokens(ev), 24);
    }
    assert_string_equal(acc, thought);
    free(acc);
    json_decref(events);
    graft_test_response_free(&r);
    free(text);
    json_decref(body);
    json_decref(whole);

    /* a prompt that does not open one (thinking off closes it in the template): content */
    body = thinking_body(12, NULL);
    json_object_set_new(json_object_get(body, "chat_template_kwargs"), "enable_thinking",
                        json_false());
    json_t *off = post("/v1/chat/completions", body, 200);
    assert_true(strlen(choice_text(off, 0)) > 0);
    assert_null(thought_of(off, 0));
    assert_int_equal(reasoning_tokens(off), 0);
    json_decref(off);

    /* a bad reasoning_format is refused by name */
    response bad = graft_test_request(&srv, "POST", "/v1/chat/completions",
                                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                                      " \"reasoning_format\": \"deepseek-legacy\"}");
    free(graft_test_expect_error(&bad, 400, "reasoning_format"));
    graft_test_response_free(&bad);
}

/* n = 3 sampled choices, each with its own thought: streamed, each index's reasoning deltas
 * add up to that choice's reasoning_content of the whole answer, and each choice's is the
 * answer of its seed alone. */
static void test_thought_per_choice(void **state)
{
    (void)state;
    json_t *body = thinking_body(16, NULL);
    json_object_set_new(body, "n", json_integer(3));
    json_object_set_new(body, "temperature", json_real(0.9));
    json_object_set_new(body, "seed", json_integer(21));
    json_t *whole = post("/v1/chat/completions", json_incref(body), 200);
    assert_int_equal(reasoning_tokens(whole), 3 * 16);
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/chat/completions", text);
    assert_int_equal(r.status, 200);
    char *acc[3] = {calloc(1, 1), calloc(1, 1), calloc(1, 1)};
    json_t *events = events_of(&r);
    size_t e;
    json_t *ev;
    json_array_foreach(events, e, ev) {
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        size_t i = (size_t)json_integer_value(json_object_get(c, "index"));
        const char *piece = json_string_value(json_object_get(json_object_get(c, "delta"),
                                                              "reasoning_content"));
        if (c != NULL && piece != NULL) {
            assert_true(i < 3);
            acc[i] = realloc(acc[i], strlen(acc[i]) + strlen(piece) + 1);
            strcat(acc[i], piece);
        }
    }
    for (size_t i = 0; i < 3; i++) {
        const char *thought = thought_of(whole, i);
        assert_non_null(thought);
        assert_string_equal(acc[i], thought);
        json_t *one = thinking_body(16, NULL);
        json_object_set_new(one, "temperature", json_real(0.9));
        json_object_set_new(one, "seed", json_integer(21 + (int)i));
        json_t *alone = post("/v1/chat/completions", one, 200);
        assert_string_equal(thought_of(alone, 0), thought);
        json_decref(alone);
        free(acc[i]);
    }
    json_decref(events);
    graft_test_response_free(&r);
    free(text);
    json_decref(body);
    json_decref(whole);
}

/* JSON output on a prompt that opened a thought begins after the thought: the thought is
 * the one a plain answer thinks (stories260K never closes it, so no JSON comes within
 * max_tokens). A forced call, whose tag ends the prompt, gets the thought closed empty first:
 * its prompt is the rendered one, white space cut, then "\n\n</think>\n\n<tool_call>\n". */
static void test_thought_before_json(void **state)
{
    (void)state;
    json_t *plain = post("/v1/chat/completions", thinking_body(24, NULL), 200);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(plain, "choices"), 0),
                            "finish_reason")),
                        "length");
    json_t *body = thinking_body(24, NULL);
    json_object_set_new(body, "response_format", json_pack("{s:s}", "type", "json_object"));
    json_t *chat = post("/v1/chat/completions", body, 200);
    assert_string_equal(thought_of(chat, 0), thought_of(plain, 0));
    assert_string_equal(choice_text(chat, 0), "");
    assert_int_equal(reasoning_tokens(chat), 24);
    json_decref(chat);
    json_decref(plain);

    body = thinking_body(48, NULL);
    json_object_set_new(body, "tools", weather_tools());
    json_object_set_new(body, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function",
                                                       "function", "name", "get_weather"));
    json_t *call = post("/v1/chat/completions", json_incref(body), 200);
    json_t *rendered = post("/apply-template", body, 200);
    const char *prompt = json_string_value(json_object_get(rendered, "prompt"));
    char *closed = stripped(prompt);
    assert_true(strlen(closed) < strlen(prompt)); /* it ended with "<think>\n" */
    closed = realloc(closed, strlen(closed) + 32);
    strcat(closed, "\n\n</think>\n\n<tool_call>\n");
    json_t *tokens = post("/tokenize", json_pack("{s:s, s:b}", "content", closed, "add_special",
                                                 1),
                          200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(call, "usage"),
                                                        "prompt_tokens")),
                     (json_int_t)json_array_size(json_object_get(tokens, "tokens")));
    assert_null(thought_of(call, 0));
    assert_int_equal(reasoning_tokens(call), 0);
    free(closed);
    json_decref(tokens);
    json_decref(rendered);
    json_decref(call);
}

/* The Responses API: the thought is a reasoning item (as chat's reasoning_content; no
 * message, since it was cut short), streamed as reasoning_text deltas that add up to it; a
 * stored response with a reasoning item can be continued, and a reasoning item sent back as
 * input joins the assistant turn after it. */
static void test_thought_as_reasoning_item(void **state)
{
    (void)state;
    json_t *chat = post("/v1/chat/completions", thinking_body(16, NULL), 200);
    const char *thought = thought_of(chat, 0);
    json_t *body = json_pack("{s:s, s:i, s:f, s:{s:b}}", "input", "Tell me a story.",
                             "max_output_tokens", 16, "temperature", 0.0,
                             "chat_template_kwargs", "enable_thinking", 1);
    json_t *resp = post("/v1/responses", json_incref(body), 200);
    assert_string_equal(json_string_value(json_object_get(resp, "status")), "incomplete");
    json_t *output = json_object_get(resp, "output");
    assert_int_equal(json_array_size(output), 1);
    json_t *item = json_array_get(output, 0);
    assert_string_equal(json_string_value(json_object_get(item, "type")), "reasoning");
    const char *text = json_string_value(json_object_get(
        json_array_get(json_object_get(item, "content"), 0), "text"));
    assert_string_equal(text, thought);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(resp, "usage"), "output_tokens_details"),
                         "reasoning_tokens")),
                     16);

    json_object_set_new(body, "stream", json_true());
    char *sent = json_dumps(body, JSON_COMPACT);
    response r = graft_test_request(&srv, "POST", "/v1/responses", sent);
    assert_int_equal(r.status, 200);
    char *acc = calloc(1, 1);
    const char *order[] = {"response.created", "response.in_progress",
                           "response.output_item.added", "response.content_part.added",
                           "response.reasoning_text.done", "response.content_part.done",
                           "response.output_item.done", "response.incomplete"};
    size_t next = 0;
    for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) != 0)
            continue;
        json_t *ev = json_loads(line + 6, 0, NULL);
        assert_non_null(ev);
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (strcmp(type, "response.reasoning_text.delta") == 0) {
            assert_int_equal(next, 4); /* inside the item's part */
            const char *piece = json_string_value(json_object_get(ev, "delta"));
            acc = realloc(acc, strlen(acc) + strlen(piece) + 1);
            strcat(acc, piece);
        } else {
            assert_true(next < sizeof order / sizeof order[0]);
            assert_string_equal(type, order[next]);
            next++;
        }
        if (strcmp(type, "response.reasoning_text.done") == 0)
            assert_string_equal(json_string_value(json_object_get(ev, "text")), thought);
        json_decref(ev);
    }
    assert_int_equal(next, sizeof order / sizeof order[0]);
    assert_string_equal(acc, thought);
    free(acc);
    free(sent);
    graft_test_response_free(&r);

    json_t *more = post("/v1/responses",
                        json_pack("{s:s, s:O, s:i}", "input", "Go on.", "previous_response_id",
                                  json_object_get(resp, "id"), "max_output_tokens", 4),
                        200);
    json_decref(more);
    json_t *replay = post("/v1/responses",
                          json_pack("{s:[{s:s, s:s}, O, {s:s, s:s}, {s:s, s:s}], s:i}", "input",
                                    "role", "user", "content", "Tell me a story.", item, "role",
                                    "assistant", "content", "Once.", "role", "user", "content",
                                    "Go on.", "max_output_tokens", 4),
                          200);
    json_t *same = post("/v1/chat/completions",
                        json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:s}, {s:s, s:s}], s:i}",
                                  "messages", "role", "user", "content", "Tell me a story.",
                                  "role", "assistant", "content", "Once.", "reasoning_content",
                                  thought, "role", "user", "content", "Go on.", "max_tokens", 4),
                        200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(replay, "usage"),
                                                        "input_tokens")),
                     json_integer_value(json_object_get(json_object_get(same, "usage"),
                                                        "prompt_tokens")));
    json_decref(same);
    json_decref(replay);
    json_decref(resp);
    json_decref(body);
    json_decref(chat);
}

/* Qwen3's template, whose model opens its thought itself (the prompt does not). */
static int qwen3_setup(void **state)
{
    (void)state;
    return serve_with_template("Qwen-Qwen3-0.6B.jinja");
}

/* JSON output where the model may open a thought: it begins, after white space, with the
 * thought (stories260K takes that way, greedy: the answer as written is white space,
 * <think> and the thought, which is reasoning_content) or with the JSON text; with
 * thinking off (the prompt ends with a closed thought) the JSON text comes at once. */
static void test_thought_or_json(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:[{s:s, s:s}], s:i, s:f, s:{s:s}}", "messages", "role", "user",
                             "content", "Tell me a story.", "max_tokens", 32, "temperature",
                             0.0, "response_format", "type", "json_object");
    json_t *split = post("/v1/chat/completions", json_incref(body), 200);
    json_object_set_new(body, "reasoning_format", json_string("none"));
    json_t *raw = post("/v1/chat/completions", json_incref(body), 200);
    const char *text = choice_text(raw, 0);
    const char *open = text + strspn(text, " \n");
    assert_int_equal(strncmp(open, "<think>", 7), 0);
    assert_null(strstr(open, "</think>"));
    char *thought = stripped(open + 7);
    assert_string_equal(thought_of(split, 0),
                        thought);
    free(thought);
    json_object_set_new(body, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));
    json_t *off = post("/v1/chat/completions", body, 200);
    text = choice_text(off, 0);
    assert_true(text[strspn(text, " \n")] == '{');
    json_decref(off);
    json_decref(raw);
    json_decref(split);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choices_share_one_prefill),
        cmocka_unit_test(test_choices_streamed),
        cmocka_unit_test(test_batch_of_prompts),
        cmocka_unit_test(test_batch_streamed),
        cmocka_unit_test(test_batch_disconnect_cancels),
        cmocka_unit_test(test_full_slots_of_full_batches),
        cmocka_unit_test(test_batch_refusals),
        cmocka_unit_test(test_logprobs_completions_shape),
        cmocka_unit_test(test_logprobs_chat_stream_matches_whole),
        cmocka_unit_test(test_logit_bias_and_penalties),
        cmocka_unit_test(test_tools_rendered_and_checked),
        cmocka_unit_test(test_tool_calls_parsed_from_text),
    };
    const struct CMUnitTest thinking[] = {
        cmocka_unit_test(test_thought_whole_streamed_and_raw),
        cmocka_unit_test(test_thought_per_choice),
        cmocka_unit_test(test_thought_before_json),
        cmocka_unit_test(test_thought_as_reasoning_item),
    };
    const struct CMUnitTest qwen3[] = {
        cmocka_unit_test(test_thought_or_json),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    failed += cmocka_run_group_tests(thinking, thinking_setup, teardown);
    return failed + cmocka_run_group_tests(qwen3, qwen3_setup, teardown);
}
