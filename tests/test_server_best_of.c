/*
 * test_server_best_of.c: best_of on /v1/completions through `graft serve`, the real binary
 * on stories260K: best_of answers are generated (one prefill, as n choices share it) and the
 * n of highest mean log-probability per token are given.
 *
 * The oracle is the same request with n = best_of and logprobs: its choices are the
 * candidates (each the answer of its seed alone, test_server_choices checks), and the test
 * ranks them itself from their token_logprobs (ties: the lower index first). Checked: the
 * answer is that ranking's first n, in order, indexed from 0, with their log-probabilities
 * when asked for; usage counts every candidate's tokens; the prompt is computed once; a batch
 * of prompts ranks each prompt's candidates apart; best_of equal to n is n; what cannot be
 * honoured is refused naming best_of.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"
#include "serve_client.h"

enum { BEST_OF = 5, MAX_TOKENS = 12 };

static server srv;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", NULL};
    srv = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&srv);
}

/* POSTs body (consumed) to /v1/completions; returns the answer, which must have `status`. */
static json_t *complete(json_t *body, long status)
{
    return graft_test_post_json(&srv, "/v1/completions", body, status);
}

/* A sampled request for prompt (an array of prompts when it starts with '['). */
static json_t *request(const char *prompt, int seed)
{
    json_t *p = prompt[0] == '[' ? json_loads(prompt, 0, NULL) : json_string(prompt);
    assert_non_null(p);
    return json_pack("{s:o, s:i, s:f, s:i}", "prompt", p, "max_tokens", MAX_TOKENS,
                     "temperature", 1.0, "seed", seed);
}

static json_t *choice(json_t *answer, size_t i)
{
    json_t *c = json_array_get(json_object_get(answer, "choices"), i);
    assert_non_null(c);
    return c;
}

static json_int_t usage(json_t *answer, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(answer, "usage"), key));
}

/* A candidate's mean log-probability per token, from its token_logprobs. */
static double mean_logprob(json_t *c)
{
    json_t *lp = json_object_get(json_object_get(c, "logprobs"), "token_logprobs");
    size_t n = json_array_size(lp);
    assert_true(n > 0);
    double sum = 0.0;
    for (size_t t = 0; t < n; t++)
        sum += json_real_value(json_array_get(lp, t));
    return sum / (double)n;
}

/* The candidates' indexes [from, from + k) of `all`, best first (ties: the lower index). */
static void rank(json_t *all, size_t from, size_t k, size_t *order)
{
    double score[BEST_OF];
    for (size_t i = 0; i < k; i++) {
        order[i] = from + i;
        score[i] = mean_logprob(choice(all, from + i));
    }
    for (size_t i = 0; i < k; i++)
        for (size_t j = i + 1; j < k; j++)
            if (score[j] > score[i] || (score[j] == score[i] && order[j] < order[i])) {
                size_t o = order[i];
                double s = score[i];
                order[i] = order[j], score[i] = score[j];
                order[j] = o, score[j] = s;
            }
}

static const char *text_of(json_t *c)
{
    return json_string_value(json_object_get(c, "text"));
}

/* best_of 5 with n 1, 2 and 4: the first n of the candidates ranked, in order, indexed from
 * 0; usage counts every candidate; the prompt is computed once. */
static void test_best_of_gives_the_best_ranked(void **state)
{
    (void)state;
    const char *prompt = "Once upon a time, a small dog";
    json_t *oracle = request(prompt, 21);
    json_object_set_new(oracle, "n", json_integer(BEST_OF));
    json_object_set_new(oracle, "logprobs", json_integer(0));
    json_t *all = complete(oracle, 200);
    size_t order[BEST_OF];
    rank(all, 0, BEST_OF, order);
    int distinct = 0;
    for (size_t i = 1; i < BEST_OF; i++)
        distinct += mean_logprob(choice(all, order[i])) != mean_logprob(choice(all, order[0]));
    assert_true(distinct > 0); /* the ranking picks something */
    const int ns[] = {1, 2, BEST_OF - 1};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        json_t *body = request(prompt, 21);
        json_object_set_new(body, "n", json_integer(ns[k]));
        json_object_set_new(body, "best_of", json_integer(BEST_OF));
        json_t *best = complete(body, 200);
        assert_int_equal(json_array_size(json_object_get(best, "choices")), (size_t)ns[k]);
        for (size_t i = 0; i < (size_t)ns[k]; i++) {
            json_t *c = choice(best, i);
            assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
            assert_string_equal(text_of(c), text_of(choice(all, order[i])));
            assert_true(json_equal(json_object_get(c, "finish_reason"),
                                   json_object_get(choice(all, order[i]), "finish_reason")));
            assert_true(json_is_null(json_object_get(c, "logprobs"))); /* not asked for */
        }
        assert_int_equal(usage(best, "completion_tokens"), usage(all, "completion_tokens"));
        json_t *graft = json_object_get(best, "graft");
        assert_int_equal(json_integer_value(json_object_get(graft, "tokens_computed")) +
                             json_integer_value(json_object_get(graft, "tokens_reused")),
                         usage(best, "prompt_tokens") + BEST_OF - 1); /* one prefill */
        json_decref(best);
    }
    /* with logprobs: the chosen candidate's, as the oracle gave them */
    json_t *body = request(prompt, 21);
    json_object_set_new(body, "best_of", json_integer(BEST_OF));
    json_object_set_new(body, "logprobs", json_integer(2));
    json_t *best = complete(body, 200);
    json_t *with_top = request(prompt, 21);
    json_object_set_new(with_top, "n", json_integer(BEST_OF));
    json_object_set_new(with_top, "logprobs", json_integer(2));
    json_t *all_top = complete(with_top, 200);
    assert_true(json_equal(json_object_get(choice(best, 0), "logprobs"),
                           json_object_get(choice(all_top, order[0]), "logprobs")));
    json_decref(all_top);
    json_decref(best);
    json_decref(all);
}

/* best_of equal to n gives what n gives, in index order. */
static void test_best_of_equal_to_n_is_n(void **state)
{
    (void)state;
    json_t *body = request("The old tree", 3);
    json_object_set_new(body, "n", json_integer(3));
    json_t *plain = complete(json_deep_copy(body), 200);
    json_object_set_new(body, "best_of", json_integer(3));
    json_t *same = complete(body, 200);
    assert_true(json_equal(json_object_get(plain, "choices"), json_object_get(same, "choices")));
    json_decref(plain);
    json_decref(same);
}

/* Several prompts: each prompt's candidates are ranked apart; prompt p's answers have the
 * indexes p * n .. p * n + n - 1. */
static void test_batch_ranks_each_prompt(void **state)
{
    (void)state;
    const char *prompts[] = {"The cat", "A boy went to the park"};
    json_t *body = request("[\"The cat\", \"A boy went to the park\"]", 9);
    json_object_set_new(body, "best_of", json_integer(3));
    json_object_set_new(body, "n", json_integer(2));
    json_t *batch = complete(body, 200);
    assert_int_equal(json_array_size(json_object_get(batch, "choices")), 4);
    for (size_t p = 0; p < 2; p++) {
        json_t *oracle = request(prompts[p], 9);
        json_object_set_new(oracle, "n", json_integer(3));
        json_object_set_new(oracle, "logprobs", json_integer(0));
        json_t *all = complete(oracle, 200);
        size_t order[3];
        rank(all, 0, 3, order);
        for (size_t i = 0; i < 2; i++) {
            json_t *c = choice(batch, 2 * p + i);
            assert_int_equal(json_integer_value(json_object_get(c, "index")),
                             (json_int_t)(2 * p + i));
            assert_string_equal(text_of(c), text_of(choice(all, order[i])));
        }
        json_decref(all);
    }
    json_decref(batch);
}

/* What cannot be honoured is refused naming best_of (1, what OpenAI takes when it is
 * absent, is accepted everywhere). */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *path, *body, *param;
    } refused[] = {
        {"/v1/completions", "{\"prompt\": \"x\", \"n\": 3, \"best_of\": 2}", "best_of"},
        {"/v1/completions", "{\"prompt\": \"x\", \"best_of\": 2, \"stream\": true}", "best_of"},
        {"/v1/completions", "{\"prompt\": \"x\", \"best_of\": 17}", "best_of"},
        {"/v1/completions", "{\"prompt\": \"x\", \"best_of\": 0}", "best_of"},
        {"/v1/completions", "{\"prompt\": \"x\", \"best_of\": \"2\"}", "best_of"},
        {"/v1/completions", "{\"prompt\": [\"x\", \"y\", \"z\"], \"best_of\": 6}", "prompt"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
         "\"best_of\": 2}", "best_of"},
        {"/completion", "{\"prompt\": \"x\", \"best_of\": 2}", "best_of"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        response r = graft_test_request(&srv, "POST", refused[i].path, refused[i].body);
        free(graft_test_expect_error(&r, 400, refused[i].param));
        graft_test_response_free(&r);
    }
    static const struct {
        const char *path, *body;
    } accepted[] = {
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2, \"best_of\": 1}"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2, \"n\": 2, \"best_of\": 2, "
         "\"stream\": true}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
         "\"max_tokens\": 2, \"n\": 2, \"best_of\": 1}"},
        {"/completion", "{\"prompt\": \"x\", \"n_predict\": 2, \"best_of\": 1}"},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        response r = graft_test_request(&srv, "POST", accepted[i].path, accepted[i].body);
        if (r.status != 200)
            fail_msg("%s %s: %ld %s", accepted[i].path, accepted[i].body, r.status, r.body);
        graft_test_response_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_of_gives_the_best_ranked),
        cmocka_unit_test(test_best_of_equal_to_n_is_n),
        cmocka_unit_test(test_batch_ranks_each_prompt),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
