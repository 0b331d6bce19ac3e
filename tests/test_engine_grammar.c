/*
 * test_engine_grammar.c: generations held to a GBNF grammar (GRAFT_OUTPUT_GRAMMAR), on
 * stories260K; the grammar's compiler, recognizer and mask on their own are test_grammar.c's.
 *
 * Checked with the oracle of tests/support/gbnf_oracle.c (an Earley recognizer written apart
 * from the engine's): what stops is a whole match, what runs out a beginning of one; greedy
 * picks are the best token the oracle allows; the same seed gives the same tokens alone and
 * batched beside other generations; the end of generation comes only where the text is a
 * whole match, and never with ignore_eog; a text nothing can continue fails, saying so; bad
 * configs are refused at submission.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "fixtures.h"
#include "gbnf_fixtures.h"
#include "graft.h"
#include "logits_taps.h"
#include "models.h"

enum { CONTEXT = 256, MAX_NEW = 48, MAX_TEXT = 8192, BOS = 1 };

static graft_model *stories;

static int setup(void **state)
{
    (void)state;
    stories = graft_test_load_model("stories260K.gguf");
    return stories != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    graft_model_free(stories);
    return 0;
}

static const int32_t prompt[] = {BOS, 403, 407, 261, 378};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* Story-shaped grammars a model trained on stories gets through within MAX_NEW tokens. */
static const char *const story_grammars[] = {
    "root ::= (\"Lily\" | \"Tom\") \" \" [a-z]+ (\" \" [a-z]+){1,6} \".\"\n",
    "root ::= [A-Z] [a-z]* (\" \" [a-z]+)* [.!]\n",
    "root ::= \"The \" [a-z]+ \" was \" (\"happy\" | \"sad\" | [a-z]+) \".\"\n",
};
enum { N_STORY = sizeof story_grammars / sizeof story_grammars[0] };

static graft_generate_config grammar_config(const char *g, float temperature, uint64_t seed)
{
    graft_generate_config c = graft_test_greedy(MAX_NEW);
    c.ignore_eog = 0;
    c.sampling.temperature = temperature;
    c.sampling.seed = seed;
    c.output_format = GRAFT_OUTPUT_GRAMMAR;
    c.grammar = g;
    c.grammar_len = strlen(g);
    return c;
}

/* The text of tokens. */
static size_t text_of(const int32_t *tokens, size_t n, char *text)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        len += graft_test_token_bytes(stories, tokens[i], text + len);
        assert_true(len < MAX_TEXT);
    }
    return len;
}

/* A settled generation's output by the oracle: each token has bytes, a stopped one is a
 * whole match, one cut by length MAX_NEW tokens of a match's beginning. */
static void check_output(graft_generation *gen, const gbnf_oracle *o)
{
    assert_int_equal(graft_generation_status(gen), GRAFT_OK);
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    char text[MAX_TEXT + GRAFT_TEST_TOKEN_BYTES];
    size_t len = text_of(out, n, text);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++)
        assert_true(graft_test_token_bytes(stories, out[i], text + len) > 0);
    if (graft_generation_finish_reason(gen) == GRAFT_FINISH_STOP) {
        if (!gbnf_oracle_matches(o, text, len))
            fail_msg("stopped on a text that is no match: \"%.*s\"", (int)len, text);
    } else {
        assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_LENGTH);
        assert_int_equal(n, MAX_NEW);
        assert_true(gbnf_oracle_viable_prefix(o, text, len));
    }
}

/* Sampled generations of each story grammar, seeds 1..SEEDS, alone and then all at once beside
 * a plain greedy generation: the same tokens either way, each output right by the oracle, and
 * most of them whole matches. */
static void test_sampled_generations_match_and_batch_invariant(void **state)
{
    (void)state;
    enum { SEEDS = 4 };
    graft_engine_options o = graft_test_engine_options(2 * N_STORY * SEEDS + 1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_generate_config c[N_STORY][SEEDS];
    graft_test_gen alone[N_STORY][SEEDS], together[N_STORY][SEEDS], text_run;
    int stopped = 0;
    for (int g = 0; g < N_STORY; g++) {
        gbnf_oracle *oracle = gbnf_test_oracle(story_grammars[g]);
        for (int k = 0; k < SEEDS; k++) {
            c[g][k] = grammar_config(story_grammars[g], 1.0f, (uint64_t)k + 1);
            graft_test_gen_start(e, &alone[g][k], prompt, N_PROMPT, &c[g][k]);
            assert_int_equal(graft_generation_wait(alone[g][k].gen), GRAFT_OK);
            check_output(alone[g][k].gen, oracle);
            stopped += graft_generation_finish_reason(alone[g][k].gen) == GRAFT_FINISH_STOP;
        }
        gbnf_oracle_free(oracle);
    }
    assert_true(stopped >= N_STORY * SEEDS / 2);
    graft_generate_config plain = graft_test_greedy(MAX_NEW);
    graft_test_gen_start(e, &text_run, prompt, N_PROMPT, &plain);
    for (int g = 0; g < N_STORY; g++)
        for (int k = 0; k < SEEDS; k++)
            graft_test_gen_start(e, &together[g][k], prompt, N_PROMPT, &c[g][k]);
    for (int g = 0; g < N_STORY; g++) {
        for (int k = 0; k < SEEDS; k++) {
            assert_int_equal(graft_generation_wait(together[g][k].gen), GRAFT_OK);
            graft_test_assert_same_tokens(alone[g][k].gen, together[g][k].gen);
            graft_test_gen_release(&alone[g][k]);
            graft_test_gen_release(&together[g][k]);
        }
    }
    assert_int_equal(graft_generation_wait(text_run.gen), GRAFT_OK);
    graft_test_gen_release(&text_run);
    graft_test_engine_end(e);
}

/* Greedy: each pick is the token of highest logit among those the oracle allows after the
 * text so far, or an end of generation where the text is a whole match (lowest id on ties),
 * recomputed from the rows the engine sampled from. */
static void test_greedy_picks_best_allowed_token(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    const int32_t n_vocab = graft_test_vocab_size(stories);
    graft_test_rows r; /* every row the engine samples from (its tap, before the mask) */
    graft_test_rows_init(&r, n_vocab, MAX_NEW + 1);
    for (int g = 0; g < N_STORY; g++) {
        gbnf_oracle *oracle = gbnf_test_oracle(story_grammars[g]);
        r.n = 0;
        graft__engine_set_tap(e, graft_test_rows_tap, &r);
        graft_generate_config c = grammar_config(story_grammars[g], 0.0f, 1);
        graft_test_gen one;
        graft_test_gen_start(e, &one, prompt, N_PROMPT, &c);
        assert_int_equal(graft_generation_wait(one.gen), GRAFT_OK);
        graft__engine_set_tap(e, NULL, NULL);
        check_output(one.gen, oracle);
        size_t n = 0;
        const int32_t *out = graft_generation_tokens(one.gen, &n);
        bool ended = graft_generation_finish_reason(one.gen) == GRAFT_FINISH_STOP;
        assert_true(r.n == (int)n || (ended && r.n == (int)n + 1)); /* + the end's row */
        char text[MAX_TEXT + GRAFT_TEST_TOKEN_BYTES];
        size_t len = 0;
        for (int step = 0; step < r.n; step++) {
            const float *row = graft_test_row(&r, step);
            bool whole = gbnf_oracle_matches(oracle, text, len);
            int32_t best = -1;
            for (int32_t t = 0; t < n_vocab; t++) {
                bool ok = gbnf_test_allows(stories, oracle, text, len, t) ||
                          (whole && graft_token_is_eog(stories, t));
                if (ok && (best < 0 || row[t] > row[best]))
                    best = t;
            }
            if ((size_t)step < n) {
                assert_int_equal(out[step], best);
                len += graft_test_token_bytes(stories, out[step], text + len);
            } else { /* the step that sampled the end of generation */
                assert_true(ended && graft_token_is_eog(stories, best));
            }
        }
        graft_test_gen_release(&one);
        gbnf_oracle_free(oracle);
    }
    graft_test_rows_free(&r);
    graft_test_engine_end(e);
}

/* The end of generation comes only where the text is a whole match: biased far above every
 * other token, it ends the answer right after its first letter; with ignore_eog it is masked
 * and the answer runs to max_new_tokens. */
static void test_end_of_generation_only_on_a_match(void **state)
{
    (void)state;
    static const char g[] = "root ::= [a-z] [a-z ]*\n";
    gbnf_oracle *oracle = gbnf_test_oracle(g);
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    int32_t eos = -1;
    for (int32_t t = 0; t < graft_test_vocab_size(stories) && eos < 0; t++)
        if (graft_token_is_eog(stories, t))
            eos = t;
    assert_true(eos >= 0);
    graft_logit_bias bias = {eos, 100.0f};
    for (int ignore = 0; ignore < 2; ignore++) {
        graft_generate_config c = grammar_config(g, 0.0f, 1);
        c.logit_bias = &bias;
        c.n_logit_bias = 1;
        c.ignore_eog = ignore;
        graft_test_gen one;
        graft_test_gen_start(e, &one, prompt, N_PROMPT, &c);
        assert_int_equal(graft_generation_wait(one.gen), GRAFT_OK);
        check_output(one.gen, oracle);
        size_t n = 0;
        graft_generation_tokens(one.gen, &n);
        assert_int_equal(graft_generation_finish_reason(one.gen),
                         ignore ? GRAFT_FINISH_LENGTH : GRAFT_FINISH_STOP);
        assert_int_equal(n, ignore ? MAX_NEW : 1);
        graft_test_gen_release(&one);
    }
    gbnf_oracle_free(oracle);
    graft_test_engine_end(e);
}

/* A text that nothing can continue fails the generation, saying so; bad configs are refused
 * at submission. */
static void test_dead_ends_and_bad_configs(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = graft_test_open_session(e);
    graft_generation *gen = NULL;
    graft_generate_config c = grammar_config("root ::= [a-z] []\n", 0.0f, 1);
    assert_int_equal(graft_session_generate(s, prompt, 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_ERANGE);
    assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_FAILED);
    assert_non_null(strstr(graft_generation_error(gen), "can continue the grammar's text"));
    size_t n = 0;
    graft_generation_tokens(gen, &n);
    assert_int_equal(n, 1);
    graft_generation_free(gen);
    gen = NULL;
    c = grammar_config("root ::= nothing\n", 0.0f, 1);
    assert_int_equal(graft_session_generate(s, prompt, 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.grammar = NULL;
    assert_int_equal(graft_session_generate(s, prompt, 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c = grammar_config(story_grammars[0], 0.0f, 1);
    c.output_after = "</think>";
    assert_int_equal(graft_session_generate(s, prompt, 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c = grammar_config(story_grammars[0], 0.0f, 1);
    c.thought_budget = 4;
    c.thought_close = "</think>";
    assert_int_equal(graft_session_generate(s, prompt, 5, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    assert_null(gen);
    graft_session_close(s);
    graft_test_engine_end(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_generations_match_and_batch_invariant),
        cmocka_unit_test(test_greedy_picks_best_allowed_token),
        cmocka_unit_test(test_end_of_generation_only_on_a_match),
        cmocka_unit_test(test_dead_ends_and_bad_configs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
