/*
 * test_server_echo.c: `echo` on /v1/completions through `graft serve` (the real binary on
 * stories260K, spoken to with libcurl): the prompt comes back before the answer, with its
 * tokens' log-probabilities when logprobs are asked for, and max_tokens 0 asks for the
 * prompt alone (what evaluation harnesses send to score a text).
 *
 * The oracle is the server's own sampling path: a greedy answer's tokens, fed back as the
 * end of a prompt with echo and max_tokens 0, must get exactly the log-probabilities and top
 * tokens (the same JSON numbers) they were sampled with, and the same text offsets; the
 * first prompt token has none (null). Also checked: the same scoring request again, whole
 * and streamed, gives the same bytes of logprobs though the prompt is cached (it is computed
 * afresh: tokens_reused 0), echo without logprobs reuses the cache, n = 2 and a batch of
 * two prompts each echo their prompt, a harness's batch of token-id prompts scores each as
 * it would alone, and the refusals name their field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"
#include "serve_client.h"

#define PROMPT "Once upon a time, there was a little girl"

static server echo_server;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", NULL};
    echo_server = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&echo_server);
}

/* POST path body; expects 200 and returns the body's JSON. */
static json_t *post_ok(const char *path, const char *body)
{
    response r = graft_test_request(&echo_server, "POST", path, body);
    if (r.status != 200)
        fail_msg("%s %s: status %ld: %s", path, body, r.status, r.body ? r.body : "");
    json_t *j = graft_test_json_of(&r);
    graft_test_response_free(&r);
    return j;
}

static json_t *choice_of(json_t *body, size_t i)
{
    json_t *c = json_array_get(json_object_get(body, "choices"), i);
    assert_non_null(c);
    return c;
}

static json_t *logprobs_field(json_t *body, size_t i, const char *field)
{
    json_t *f = json_object_get(json_object_get(choice_of(body, i), "logprobs"), field);
    assert_true(json_is_array(f));
    return f;
}

/* The request body's JSON text, to free. */
static char *dumps(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    assert_non_null(s);
    json_decref(j);
    return s;
}

/* The prompt's token ids as the server tokenizes a prompt (BOS first). */
static json_t *prompt_ids(void)
{
    json_t *t = post_ok("/tokenize", "{\"content\": \"" PROMPT "\", \"add_special\": true}");
    json_t *ids = json_incref(json_object_get(t, "tokens"));
    json_decref(t);
    assert_true(json_array_size(ids) > 3);
    return ids;
}

/* A greedy answer's tokens fed back get the log-probabilities they were sampled with. */
static void test_scored_answer_matches_its_sampling(void **state)
{
    (void)state;
    json_t *ids = prompt_ids();
    size_t n_prompt = json_array_size(ids);
    char *ask = dumps(json_pack("{s:O, s:i, s:f, s:i, s:b, s:b}", "prompt", ids, "max_tokens", 8,
                                "temperature", 0.0, "logprobs", 3, "return_tokens", 1,
                                "echo", 1));
    json_t *sampled = post_ok("/v1/completions", ask);
    free(ask);
    json_t *answer = json_object_get(choice_of(sampled, 0), "tokens");
    assert_int_equal(json_array_size(answer), 8);
    /* the echo: the prompt's tokens, the first with no log-probability */
    json_t *lps = logprobs_field(sampled, 0, "token_logprobs");
    assert_int_equal(json_array_size(lps), n_prompt + 8);
    assert_true(json_is_null(json_array_get(lps, 0)));
    assert_true(json_is_null(json_array_get(logprobs_field(sampled, 0, "top_logprobs"), 0)));
    for (size_t i = 1; i < n_prompt + 8; i++)
        assert_true(json_is_real(json_array_get(lps, i)));
    const char *text = json_string_value(json_object_get(choice_of(sampled, 0), "text"));
    assert_memory_equal(text, PROMPT, strlen(PROMPT));
    /* the tokens spell the text, and each offset is where its token's text begins */
    json_t *tokens = logprobs_field(sampled, 0, "tokens");
    json_t *offsets = logprobs_field(sampled, 0, "text_offset");
    size_t at = 0;
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        const char *piece = json_string_value(json_array_get(tokens, i));
        assert_int_equal(json_integer_value(json_array_get(offsets, i)), at);
        assert_memory_equal(text + at, piece, strlen(piece));
        at += strlen(piece);
    }
    assert_int_equal(at, strlen(text));

    json_t *all = json_deep_copy(ids);
    json_array_extend(all, answer);
    char *score = dumps(json_pack("{s:o, s:i, s:i, s:b}", "prompt", all, "max_tokens", 0,
                                  "logprobs", 3, "echo", 1));
    json_t *scored = post_ok("/v1/completions", score);
    assert_string_equal(json_string_value(json_object_get(choice_of(scored, 0), "text")), text);
    assert_string_equal(json_string_value(json_object_get(choice_of(scored, 0), "finish_reason")),
                        "length");
    const char *fields[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (size_t f = 0; f < 4; f++) {
        char *a = json_dumps(logprobs_field(sampled, 0, fields[f]), JSON_COMPACT);
        char *b = json_dumps(logprobs_field(scored, 0, fields[f]), JSON_COMPACT);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    json_t *usage = json_object_get(scored, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")), n_prompt + 8);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 0);

    /* again: the prompt is cached now, yet computed afresh, and scored the same */
    json_t *again = post_ok("/v1/completions", score);
    json_t *graft = json_object_get(again, "graft");
    assert_int_equal(json_integer_value(json_object_get(graft, "tokens_reused")), 0);
    assert_int_equal(json_integer_value(json_object_get(graft, "tokens_computed")), n_prompt + 8);
    char *a = json_dumps(json_object_get(choice_of(scored, 0), "logprobs"), JSON_COMPACT);
    char *b = json_dumps(json_object_get(choice_of(again, 0), "logprobs"), JSON_COMPACT);
    assert_string_equal(a, b);
    free(a);
    free(b);
    json_decref(again);
    json_decref(scored);
    json_decref(sampled);
    json_decref(ids);
    free(score);
}

/* Streamed: the first chunk of each choice is the prompt with its log-probabilities, the
 * same as the whole response's; the chunks add up to the whole text. */
static void test_streamed_echo(void **state)
{
    (void)state;
    const char *whole_body = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 6, \"temperature\": 0, "
                             "\"logprobs\": 2, \"echo\": true, \"n\": 2}";
    json_t *whole = post_ok("/v1/completions", whole_body);
    char *stream_body = dumps(json_pack("{s:s, s:i, s:i, s:i, s:b, s:i, s:b}", "prompt", PROMPT,
                                        "max_tokens", 6, "temperature", 0, "logprobs", 2, "echo",
                                        1, "n", 2, "stream", 1));
    response r = graft_test_request(&echo_server, "POST", "/v1/completions", stream_body);
    free(stream_body);
    assert_int_equal(r.status, 200);
    char *texts[2] = {calloc(1, 1), calloc(1, 1)};
    json_t *first_lp[2] = {NULL, NULL};
    for (char *line = strtok(r.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7) != 0)
            continue;
        json_t *chunk = json_loads(line + 6, 0, NULL);
        assert_non_null(chunk);
        json_t *c = choice_of(chunk, 0);
        size_t i = (size_t)json_integer_value(json_object_get(c, "index"));
        assert_true(i < 2);
        const char *piece = json_string_value(json_object_get(c, "text"));
        texts[i] = realloc(texts[i], strlen(texts[i]) + strlen(piece) + 1);
        strcat(texts[i], piece);
        if (first_lp[i] == NULL)
            first_lp[i] = json_incref(json_object_get(json_object_get(c, "logprobs"),
                                                      "token_logprobs"));
        json_decref(chunk);
    }
    graft_test_response_free(&r);
    json_t *whole_lps = logprobs_field(whole, 0, "token_logprobs");
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(texts[i],
                            json_string_value(json_object_get(choice_of(whole, i), "text")));
        assert_memory_equal(texts[i], PROMPT, strlen(PROMPT));
        /* the first chunk: the prompt's entries, as the whole response begins */
        size_t n = json_array_size(first_lp[i]);
        assert_true(n > 3);
        assert_true(json_is_null(json_array_get(first_lp[i], 0)));
        for (size_t k = 1; k < n; k++)
            assert_true(json_equal(json_array_get(first_lp[i], k),
                                   json_array_get(whole_lps, k)));
        json_decref(first_lp[i]);
        free(texts[i]);
    }
    json_decref(whole);
}

/* Echo alone: the prompt's text; the prefix cache still serves it, n = 2 and a batch of two
 * prompts each echo their own. */
static void test_echo_without_logprobs(void **state)
{
    (void)state;
    json_t *first = post_ok("/v1/completions",
                            "{\"prompt\": \"" PROMPT " and\", \"max_tokens\": 0, "
                            "\"echo\": true, \"n\": 2}");
    for (size_t i = 0; i < 2; i++) {
        json_t *c = choice_of(first, i);
        assert_string_equal(json_string_value(json_object_get(c, "text")), PROMPT " and");
        assert_true(json_is_null(json_object_get(c, "logprobs")));
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    }
    json_decref(first);
    json_t *again = post_ok("/v1/completions",
                            "{\"prompt\": \"" PROMPT " and\", \"max_tokens\": 2, "
                            "\"echo\": true, \"temperature\": 0}");
    json_t *graft = json_object_get(again, "graft");
    assert_string_equal(json_string_value(json_object_get(graft, "source")), "cache");
    const char *text = json_string_value(json_object_get(choice_of(again, 0), "text"));
    assert_true(strlen(text) > strlen(PROMPT " and"));
    assert_memory_equal(text, PROMPT " and", strlen(PROMPT " and"));
    json_decref(again);

    json_t *batch = post_ok("/v1/completions", "{\"prompt\": [\"Once upon\", \"The cat\"], "
                                               "\"max_tokens\": 3, \"echo\": true}");
    assert_int_equal(json_array_size(json_object_get(batch, "choices")), 2);
    assert_memory_equal(json_string_value(json_object_get(choice_of(batch, 0), "text")),
                        "Once upon", 9);
    assert_memory_equal(json_string_value(json_object_get(choice_of(batch, 1), "text")),
                        "The cat", 7);
    json_decref(batch);
}

/* What an evaluation harness sends (lm-evaluation-harness's local-completions): several
 * token-id prompts in one request, echo, logprobs 1, max_tokens 1, greedy. Each prompt's
 * log-probabilities are, byte for byte in the JSON, those of the prompt sent alone. */
static void test_scoring_batch(void **state)
{
    (void)state;
    json_t *ids = prompt_ids();
    json_t *shorter = json_deep_copy(ids);
    json_array_remove(shorter, json_array_size(shorter) - 1);
    char *batch = dumps(json_pack("{s:[O, O], s:i, s:i, s:b, s:i, s:i}", "prompt", ids, shorter,
                                  "max_tokens", 1, "logprobs", 1, "echo", 1, "temperature", 0,
                                  "seed", 1234));
    json_t *both = post_ok("/v1/completions", batch);
    assert_int_equal(json_array_size(json_object_get(both, "choices")), 2);
    json_t *prompts[2] = {ids, shorter};
    for (size_t p = 0; p < 2; p++) {
        char *one = dumps(json_pack("{s:O, s:i, s:i, s:b, s:i, s:i}", "prompt", prompts[p],
                                    "max_tokens", 1, "logprobs", 1, "echo", 1, "temperature", 0,
                                    "seed", 1234));
        json_t *alone = post_ok("/v1/completions", one);
        char *a = json_dumps(json_object_get(choice_of(alone, 0), "logprobs"), JSON_COMPACT);
        char *b = json_dumps(json_object_get(choice_of(both, p), "logprobs"), JSON_COMPACT);
        assert_string_equal(a, b);
        /* the prompt's tokens and the one answer token */
        assert_int_equal(json_array_size(logprobs_field(both, p, "tokens")),
                         json_array_size(prompts[p]) + 1);
        free(a);
        free(b);
        free(one);
        json_decref(alone);
    }
    free(batch);
    json_decref(both);
    json_decref(shorter);
    json_decref(ids);
}

static void expect_refused(const char *path, const char *body, const char *param)
{
    response r = graft_test_request(&echo_server, "POST", path, body);
    free(graft_test_expect_error(&r, 400, param));
    graft_test_response_free(&r);
}

static void test_echo_refusals(void **state)
{
    (void)state;
    expect_refused("/v1/chat/completions",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"echo\": true}",
                   "echo");
    expect_refused("/completion", "{\"prompt\": \"hi\", \"echo\": true}", "echo");
    expect_refused("/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 0}", "max_tokens");
    expect_refused("/v1/completions", "{\"prompt\": \"hi\", \"echo\": 1}", "echo");
    expect_refused("/v1/completions",
                   "{\"prompt\": \"hi\", \"echo\": true, \"logprobs\": 1, \"session_id\": \"s\"}",
                   "echo");
    /* the server goes on */
    json_t *ok =
        post_ok("/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 1, \"echo\": false}");
    json_decref(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scored_answer_matches_its_sampling),
        cmocka_unit_test(test_streamed_echo),
        cmocka_unit_test(test_echo_without_logprobs),
        cmocka_unit_test(test_scoring_batch),
        cmocka_unit_test(test_echo_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
