/*
 * test_grammar.c: GBNF grammars (src/engine/grammar*.c) compiled, followed and masked, on their
 * own; generations held to them are test_engine_grammar.c's.
 *
 * The oracle is tests/support/gbnf_oracle.c, an Earley recognizer written apart from the
 * engine's parser and recognizer (grammar_parse.c, grammar_match.c), from llama.cpp's
 * description of the syntax.
 * - The mask (grammar_mask.c: the vocabulary walked as a trie) against the oracle: along
 *   random walks of allowed tokens, on real vocabularies (stories260K's 512 tokens every
 *   token at every step; SPM and 152k-token BPE vocabularies a random sample of 2000 tokens
 *   a step), a token is allowed exactly when the text with its bytes begins a match, and the
 *   text is a whole match exactly when the oracle says so.
 * - Refusals with their messages, the recognizer's bounds (a repetition adds no stack entry
 *   per repeat; ambiguity beyond the bounds fails cleanly), allocation failures.
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
#include "models.h"

enum { MAX_TEXT = 8192 };

/* Grammars whose walks cross every part of the recognizer: nesting, repetitions counted and
 * not, optional and empty alternatives, negated classes, multi-byte characters, recursion. */
static const char *grammars[] = {
    NULL, /* tests/grammars/json.gbnf, read by setup */
    "root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
    "root ::= \"Once upon a time, \" name (\", \" name){0,3} \" and \" name \".\"\n"
    "name ::= [A-Z] [a-z]+\n",
    "root ::= ws (\"yes\" | \"no\" | \"maybe\")? ws \"!\"? [^!]*\nws ::= [ \\t\\n]*\n",
    "root ::= \"(\" root \")\" root | \"\"\n",
    "root ::= (\"\\u00e9\" | [\\u03b1-\\u03c9]+ | \"\\u65e5\\u672c\" | [^\\x00-\\x7F] | [a-z] | "
    "\" \"){1,40}\n",
    "root ::= [a-zA-Z ,.]{0,30} \"\\n\" . .? \"end\"\n",
};
enum { N_GRAMMARS = sizeof grammars / sizeof grammars[0] };

/* Whether text[0, len) ends inside a UTF-8 character. */
static bool ends_inside_char(const char *text, size_t len)
{
    size_t i = len, back = 0;
    while (i > 0 && back < 4 && ((uint8_t)text[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i == 0)
        return back > 0;
    uint8_t lead = (uint8_t)text[i - 1];
    size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    return need > back;
}

/* Random walks of `steps` tokens through grammar g on model m's vocabulary: at each step the
 * mask keeps exactly the tokens the oracle allows, at their logits (every token when
 * sample is 0, else the allowed ones and `sample` random others), and the run accepts
 * exactly when the oracle matches the text. */
static void walk_grammar(const graft_model *m, const graft__grammar_vocab *gv, const char *g,
                         int walks, int steps, int sample)
{
    const int32_t n_vocab = graft_test_vocab_size(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    char *text = malloc(MAX_TEXT + GRAFT_TEST_TOKEN_BYTES);
    int32_t *allowed_ids = malloc((size_t)n_vocab * sizeof *allowed_ids);
    assert_true(logits && text && allowed_ids);
    gbnf_oracle *o = gbnf_test_oracle(g);
    graft__grammar *compiled = NULL;
    assert_int_equal(graft__grammar_compile(g, strlen(g), &compiled, NULL), GRAFT_OK);
    for (int w = 0; w < walks; w++) {
        graft__grammar_run *run = NULL;
        assert_int_equal(graft__grammar_run_create(compiled, graft__grammar_vocab_max_len(gv),
                                                   &run),
                         GRAFT_OK);
        size_t len = 0;
        for (int step = 0; step <= steps; step++) {
            bool whole = !ends_inside_char(text, len) && gbnf_oracle_matches(o, text, len);
            if (graft__grammar_run_accepts(run, &run->at) != whole)
                fail_msg("grammar %.30s..., walk %d: \"%.*s\" accepted: %d, oracle %d", g, w,
                         (int)len, text, !whole, whole);
            for (int32_t t = 0; t < n_vocab; t++)
                logits[t] = (float)t;
            int32_t allowed = graft__grammar_mask_apply(gv, run, logits);
            int32_t n_allowed = 0;
            for (int32_t t = 0; t < n_vocab; t++) {
                bool kept = logits[t] == (float)t;
                assert_true(kept || logits[t] == -INFINITY);
                bool check = sample == 0 ||
                             graft_test_rng_u32() % (uint32_t)n_vocab < (uint32_t)sample;
                if (check && kept != gbnf_test_allows(m, o, text, len, t)) {
                    int n = (int)graft_test_token_bytes(m, t, text + len);
                    fail_msg("grammar %.30s..., after \"%.*s\": token %d (\"%.*s\") %s", g,
                             (int)len, text, (int)t, n, text + len,
                             kept ? "let through" : "masked");
                }
                if (kept)
                    allowed_ids[n_allowed++] = t;
            }
            assert_int_equal(allowed, n_allowed);
            if (n_allowed == 0 || step == steps)
                break;
            int32_t t = allowed_ids[graft_test_rng_u32() % (uint32_t)n_allowed];
            assert_true(graft__grammar_mask_feed(gv, run, t));
            len += graft_test_token_bytes(m, t, text + len);
            assert_true(len < MAX_TEXT);
        }
        graft__grammar_run_free(run);
    }
    graft__grammar_free(compiled);
    gbnf_oracle_free(o);
    free(allowed_ids);
    free(text);
    free(logits);
}

static void walk_vocab(const char *rel, int walks, int steps, int sample)
{
    char path[1024];
    graft_model *m = NULL;
    assert_int_equal(graft_model_load_vocab(graft_test_model_path(path, sizeof path, rel), &m,
                                            NULL),
                     GRAFT_OK);
    graft__token_table *tokens = graft_test_token_table(m);
    graft__grammar_vocab *gv = NULL;
    assert_int_equal(graft__grammar_vocab_create(tokens, &gv), GRAFT_OK);
    graft_test_rng_seed(7);
    for (int k = 0; k < N_GRAMMARS; k++)
        walk_grammar(m, gv, grammars[k], walks, steps, sample);
    graft__grammar_vocab_free(gv);
    graft__token_table_free(tokens);
    graft_model_free(m);
}

static void test_mask_matches_oracle_stories(void **state)
{
    (void)state;
    walk_vocab("stories260K.gguf", 4, 40, 0);
}

static void test_mask_matches_oracle_spm_and_bpe(void **state)
{
    (void)state;
    walk_vocab("vocab/ggml-vocab-llama-spm.gguf", 2, 12, 2000);
    walk_vocab("vocab/ggml-vocab-qwen2.gguf", 2, 12, 2000);
}

/* ---- compiling ------------------------------------------------------------------------- */

static void test_refusals_name_what_and_where(void **state)
{
    (void)state;
    static const struct {
        const char *grammar, *message;
    } cases[] = {
        {"", "there is no rule 'root'"},
        {"start ::= \"a\"\n", "there is no rule 'root'"},
        {"root ::= item\n", "line 1, column 10: rule 'item' is used but not defined"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"abc\n", "line 1, column 10: the string is not closed"},
        {"root ::= [a-z\n", "the class is not closed"},
        {"root ::= [z-a]\n", "the range's end is below its start"},
        {"root ::= \"\\q\"\n", "unknown escape '\\q'"},
        {"root ::= \"\\x4\"\n", "'\\x' needs 2 hex digits"},
        {"root ::= \"\\U00110000\"\n", "beyond U+10FFFF"},
        {"root ::= (\"a\" | \"b\"\n", "the group is not closed by ')'"},
        {"root ::= \"a\" )\n", "line 1, column 14: unexpected ')'"},
        {"root ::= * \"a\"\n", "'*' has nothing before it to repeat"},
        {"root ::= \"a\"{1001}\n", "a repetition count above 1000"},
        {"root ::= \"a\"{3,2}\n", "the most is below the least"},
        {"root ::= \"a\"{\n", "'{' needs a count"},
        {"root ::= \"a\" <[42]>\n", "token references (<...>) are not supported"},
        {"root ::= \"a\" <|eot_id|>\n", "token references"},
        {"root \"a\"\n", "expected '::=' after the rule name 'root'"},
        {"::= \"a\"\n", "expected a rule name"},
        {"root ::= root \"a\" | \"b\"\n", "rule 'root' is left-recursive"},
        {"root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"\n", "rule 'x' is left-recursive"},
        {"root ::= (\"a\"?)*\n", "rule 'root' is left-recursive"},
        {"root ::= \"\xc3\x28\"\n", "invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *why = NULL;
        int rc = graft_grammar_check(cases[i].grammar, strlen(cases[i].grammar), &why);
        if (rc != GRAFT_EINVAL || why == NULL || strstr(why, cases[i].message) == NULL)
            fail_msg("case %zu: rc %d, \"%s\", expected \"%s\"", i, rc, why ? why : "(none)",
                     cases[i].message);
        graft_free(why);
    }
    /* Nesting beyond the bound is refused, not a deep recursion. */
    enum { DEEP = GRAFT__GRAMMAR_MAX_NESTING + 1 };
    char deep[16 + 2 * DEEP + 8];
    size_t n = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < DEEP; i++)
        deep[n++] = '(';
    deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"';
    for (int i = 0; i < DEEP; i++)
        deep[n++] = ')';
    char *why = NULL;
    assert_int_equal(graft_grammar_check(deep, n, &why), GRAFT_EINVAL);
    assert_non_null(strstr(why, "groups nest more than"));
    graft_free(why);
    /* Repetitions that would compile beyond the bound are refused, not built. */
    char big[400];
    snprintf(big, sizeof big, "root ::= \"%0200d\"{1000}\n", 0);
    assert_int_equal(graft_grammar_check(big, strlen(big), &why), GRAFT_EINVAL);
    assert_non_null(strstr(why, "more than 131072 elements"));
    graft_free(why);
    /* The test grammars, llama.cpp's JSON grammar among them, compile. */
    for (int k = 0; k < N_GRAMMARS; k++)
        assert_int_equal(graft_grammar_check(grammars[k], strlen(grammars[k]), NULL), GRAFT_OK);
}

/* Feeds text to a new run of grammar g; whether it all went in, and the run (to free). */
static bool feed_text(const char *g, const char *text, size_t len, graft__grammar **compiled,
                      graft__grammar_run **run)
{
    assert_int_equal(graft__grammar_compile(g, strlen(g), compiled, NULL), GRAFT_OK);
    assert_int_equal(graft__grammar_run_create(*compiled, 16, run), GRAFT_OK);
    for (size_t i = 0; i < len; i += 97)
        if (!graft__grammar_run_feed(*run, text + i, len - i < 97 ? len - i : 97))
            return false;
    return true;
}

static void test_recognizer_bounds(void **state)
{
    (void)state;
    enum { LONG = 20000 };
    char *text = malloc(LONG);
    assert_non_null(text);
    graft__grammar *g = NULL;
    graft__grammar_run *run = NULL;
    /* A repetition, even one inside a group, keeps the stacks as they were. */
    for (int i = 0; i < LONG; i++)
        text[i] = (char)('a' + i % 26);
    assert_true(feed_text("root ::= ([a-m] | [n-z])* \".\"\n", text, LONG, &g, &run));
    assert_true(run->n_nodes < 16);
    assert_true(graft__grammar_run_feed(run, ".", 1));
    assert_true(graft__grammar_run_complete(run, &run->at));
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    /* Nesting holds one node a level, so it stays within the bound to thousands deep ... */
    for (int i = 0; i < 4000; i++)
        text[i] = '(', text[8000 - 1 - i] = ')';
    assert_true(feed_text(grammars[4], text, 8000, &g, &run));
    assert_true(graft__grammar_run_accepts(run, &run->at));
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    /* ... and beyond it the run fails and says so. */
    memset(text, '(', LONG);
    assert_false(feed_text(grammars[4], text, LONG, &g, &run) &&
                 graft__grammar_run_feed(run, text, GRAFT__GRAMMAR_NODES));
    assert_true(run->overflow);
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    /* An empty symbol repeated is empty. */
    assert_true(feed_text("root ::= \"a\" \"\"* \"\"{3} \"\"+ \"b\"\n", "ab", 2, &g, &run));
    assert_true(graft__grammar_run_complete(run, &run->at));
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    /* A text ambiguous more ways than the stacks' bound: where the first run of a's ends. */
    memset(text, 'a', LONG);
    bool fed = feed_text("root ::= \"a\"{0,1000} \"a\"{0,1000}\n", text, 1100, &g, &run);
    assert_false(fed);
    assert_true(run->overflow);
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    free(text);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    long live = graft__alloc_live();
    int failures = 0;
    for (long k = 0;; k++) {
        graft__alloc_fail_after(k, false);
        graft__grammar *g = NULL;
        graft__grammar_run *run = NULL;
        char *why = NULL;
        int rc = graft__grammar_compile(grammars[0], strlen(grammars[0]), &g, &why);
        if (rc == GRAFT_OK)
            rc = graft__grammar_run_create(g, 64, &run);
        bool injected = graft__alloc_failures() > 0;
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK)
            assert_true(graft__grammar_run_feed(run, "{\"a\": [1, 2]}", 13));
        else
            assert_int_equal(rc, GRAFT_ENOMEM);
        assert_true(rc == GRAFT_OK || injected);
        graft__grammar_run_free(run);
        graft__grammar_free(g);
        graft_free(why);
        assert_int_equal(graft__alloc_live(), live);
        if (!injected)
            break;
        failures++;
    }
    assert_true(failures > 10);
}

static int setup(void **state)
{
    (void)state;
    grammars[0] = gbnf_test_grammar("json.gbnf");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free((char *)grammars[0]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals_name_what_and_where),
        cmocka_unit_test(test_recognizer_bounds),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_mask_matches_oracle_stories),
        cmocka_unit_test(test_mask_matches_oracle_spm_and_bpe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
