/*
 * test_engine_grammar.c: generations held to a GBNF grammar (GRAFT_OUTPUT_GRAMMAR).
 *
 * The oracle is tests/support/gbnf_oracle.c, an Earley recognizer written apart from the
 * engine's parser and recognizer (grammar_parse.c, grammar_match.c), from llama.cpp's
 * description of the syntax.
 * - The mask (grammar_mask.c: the vocabulary walked as a trie) against the oracle: along
 *   random walks of allowed tokens, on real vocabularies (stories260K's 512 tokens every
 *   token at every step; SPM and 152k-token BPE vocabularies a random sample of 2000 tokens
 *   a step), a token is allowed exactly when the text with its bytes begins a
 *   match, and the text is a whole match exactly when the oracle says so.
 * - Generations on stories260K: what stops is a whole match, what runs out a beginning of
 *   one; greedy picks are the best allowed token; the same seed gives the same tokens alone
 *   and batched beside other generations; the end of generation only where the text is a
 *   whole match, and never with ignore_eog.
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
#include "gbnf_oracle.h"
#include "graft.h"
#include "models.h"

enum { CONTEXT = 256, MAX_NEW = 48, MAX_TOKEN_BYTES = 256, MAX_TEXT = 8192, BOS = 1 };

static const char json_grammar[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? "
    "([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* Grammars whose walks cross every part of the recognizer: nesting, repetitions counted and
 * not, optional and empty alternatives, negated classes, multi-byte characters, recursion. */
static const char *const grammars[] = {
    json_grammar,
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

static size_t token_bytes(const graft_model *m, int32_t t, char *buf)
{
    int len = graft__token_bytes(m->vocab, t, buf, MAX_TOKEN_BYTES);
    assert_true(len >= 0 && len <= MAX_TOKEN_BYTES);
    return (size_t)len;
}

static int32_t vocab_size(const graft_model *m)
{
    graft_model_info info;
    graft_model_get_info(m, &info);
    return info.n_vocab;
}

static gbnf_oracle *oracle_of(const char *grammar)
{
    char err[256];
    gbnf_oracle *o = gbnf_oracle_parse(grammar, err, sizeof err);
    if (o == NULL)
        fail_msg("the oracle refuses a test grammar: %s", err);
    return o;
}

/* Whether token t may follow text[0, len) by the oracle: it has bytes, and the text with them
 * begins a match. */
static bool oracle_allows(const graft_model *m, const gbnf_oracle *o, char *text, size_t len,
                          int32_t t)
{
    size_t n = token_bytes(m, t, text + len);
    return n > 0 && gbnf_oracle_viable_prefix(o, text, len + n);
}

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
    const int32_t n_vocab = vocab_size(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    char *text = malloc(MAX_TEXT + MAX_TOKEN_BYTES);
    int32_t *allowed_ids = malloc((size_t)n_vocab * sizeof *allowed_ids);
    assert_true(logits && text && allowed_ids);
    gbnf_oracle *o = oracle_of(g);
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
                if (check && kept != oracle_allows(m, o, text, len, t))
                    fail_msg("grammar %.30s..., after \"%.*s\": token %d (\"%.*s\") %s", g,
                             (int)len, text, (int)t, (int)token_bytes(m, t, text + len),
                             text + len, kept ? "let through" : "masked");
                if (kept)
                    allowed_ids[n_allowed++] = t;
            }
            assert_int_equal(allowed, n_allowed);
            if (n_allowed == 0 || step == steps)
                break;
            int32_t t = allowed_ids[graft_test_rng_u32() % (uint32_t)n_allowed];
            assert_true(graft__grammar_mask_feed(gv, run, t));
            len += token_bytes(m, t, text + len);
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
    graft__grammar_vocab *gv = NULL;
    assert_int_equal(graft__grammar_vocab_create(m->vocab, vocab_size(m), &gv), GRAFT_OK);
    graft_test_rng_seed(7);
    for (int k = 0; k < N_GRAMMARS; k++)
        walk_grammar(m, gv, grammars[k], walks, steps, sample);
    graft__grammar_vocab_free(gv);
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
    /* llama.cpp's own grammars compile. */
    assert_int_equal(graft_grammar_check(json_grammar, strlen(json_grammar), NULL), GRAFT_OK);
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
        int rc = graft__grammar_compile(json_grammar, strlen(json_grammar), &g, &why);
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

/* ---- generations on stories260K ---------------------------------------------------------- */

static graft_model *stories;
static int32_t n_vocab;

static int setup(void **state)
{
    (void)state;
    stories = graft_test_load_model("stories260K.gguf");
    if (stories == NULL)
        return -1;
    n_vocab = vocab_size(stories);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    graft_model_free(stories);
    return 0;
}

static const int32_t prompt[] = {BOS, 403, 407, 261, 378};

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
        len += token_bytes(stories, tokens[i], text + len);
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
    char text[MAX_TEXT + MAX_TOKEN_BYTES];
    size_t len = text_of(out, n, text);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++)
        assert_true(token_bytes(stories, out[i], text + len) > 0);
    if (graft_generation_finish_reason(gen) == GRAFT_FINISH_STOP) {
        if (!gbnf_oracle_matches(o, text, len))
            fail_msg("stopped on a text that is no match: \"%.*s\"", (int)len, text);
    } else {
        assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_LENGTH);
        assert_int_equal(n, MAX_NEW);
        assert_true(gbnf_oracle_viable_prefix(o, text, len));
    }
}

typedef struct run {
    graft_session *session;
    graft_generation *gen;
} run;

static void start(graft_engine *e, run *r, const graft_generate_config *c)
{
    r->session = graft_test_open_session(e);
    assert_int_equal(graft_session_generate(r->session, prompt,
                                            sizeof prompt / sizeof prompt[0], c, NULL, NULL,
                                            NULL, &r->gen),
                     GRAFT_OK);
}

static void release(run *r)
{
    graft_generation_free(r->gen);
    graft_session_close(r->session);
}

static void assert_same_tokens(graft_generation *a, graft_generation *b)
{
    size_t na = 0, nb = 0;
    const int32_t *ta = graft_generation_tokens(a, &na);
    const int32_t *tb = graft_generation_tokens(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na * sizeof *ta);
    assert_int_equal(graft_generation_finish_reason(a), graft_generation_finish_reason(b));
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
    run alone[N_STORY][SEEDS], together[N_STORY][SEEDS], text_run;
    int stopped = 0;
    for (int g = 0; g < N_STORY; g++) {
        gbnf_oracle *oracle = oracle_of(story_grammars[g]);
        for (int k = 0; k < SEEDS; k++) {
            c[g][k] = grammar_config(story_grammars[g], 1.0f, (uint64_t)k + 1);
            start(e, &alone[g][k], &c[g][k]);
            assert_int_equal(graft_generation_wait(alone[g][k].gen), GRAFT_OK);
            check_output(alone[g][k].gen, oracle);
            stopped += graft_generation_finish_reason(alone[g][k].gen) == GRAFT_FINISH_STOP;
        }
        gbnf_oracle_free(oracle);
    }
    assert_true(stopped >= N_STORY * SEEDS / 2);
    graft_generate_config plain = graft_test_greedy(MAX_NEW);
    start(e, &text_run, &plain);
    for (int g = 0; g < N_STORY; g++)
        for (int k = 0; k < SEEDS; k++)
            start(e, &together[g][k], &c[g][k]);
    for (int g = 0; g < N_STORY; g++) {
        for (int k = 0; k < SEEDS; k++) {
            assert_int_equal(graft_generation_wait(together[g][k].gen), GRAFT_OK);
            assert_same_tokens(alone[g][k].gen, together[g][k].gen);
            release(&alone[g][k]);
            release(&together[g][k]);
        }
    }
    assert_int_equal(graft_generation_wait(text_run.gen), GRAFT_OK);
    release(&text_run);
    graft_test_engine_end(e);
}

/* Every logits row the engine samples from (its tap, before the mask). */
typedef struct rows {
    float *logits; /* (MAX_NEW + 1, n_vocab) */
    int n;
} rows;

static void record_row(graft_generation *gen, const float *logits, void *user)
{
    (void)gen;
    rows *r = user;
    if (r->n <= MAX_NEW)
        memcpy(r->logits + (size_t)r->n++ * (size_t)n_vocab, logits,
               (size_t)n_vocab * sizeof *logits);
}

/* Greedy: each pick is the token of highest logit among those the oracle allows after the
 * text so far, or an end of generation where the text is a whole match (lowest id on ties),
 * recomputed from the rows the engine sampled from. */
static void test_greedy_picks_best_allowed_token(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    rows r = {.logits = malloc((size_t)(MAX_NEW + 1) * (size_t)n_vocab * sizeof(float))};
    assert_non_null(r.logits);
    for (int g = 0; g < N_STORY; g++) {
        gbnf_oracle *oracle = oracle_of(story_grammars[g]);
        r.n = 0;
        graft__engine_set_tap(e, record_row, &r);
        graft_generate_config c = grammar_config(story_grammars[g], 0.0f, 1);
        run one;
        start(e, &one, &c);
        assert_int_equal(graft_generation_wait(one.gen), GRAFT_OK);
        graft__engine_set_tap(e, NULL, NULL);
        check_output(one.gen, oracle);
        size_t n = 0;
        const int32_t *out = graft_generation_tokens(one.gen, &n);
        bool ended = graft_generation_finish_reason(one.gen) == GRAFT_FINISH_STOP;
        char text[MAX_TEXT + MAX_TOKEN_BYTES];
        size_t len = 0;
        for (int step = 0; step < r.n; step++) {
            const float *row = r.logits + (size_t)step * (size_t)n_vocab;
            bool whole = gbnf_oracle_matches(oracle, text, len);
            int32_t best = -1;
            for (int32_t t = 0; t < n_vocab; t++) {
                bool ok = oracle_allows(stories, oracle, text, len, t) ||
                          (whole && graft_token_is_eog(stories, t));
                if (ok && (best < 0 || row[t] > row[best]))
                    best = t;
            }
            if ((size_t)step < n) {
                assert_int_equal(out[step], best);
                len += token_bytes(stories, out[step], text + len);
            } else { /* the step that sampled the end of generation */
                assert_true(ended && graft_token_is_eog(stories, best));
            }
        }
        release(&one);
        gbnf_oracle_free(oracle);
    }
    free(r.logits);
    graft_test_engine_end(e);
}

/* The end of generation comes only where the text is a whole match: biased far above every
 * other token, it ends the answer right after its first letter; with ignore_eog it is masked
 * and the answer runs to max_new_tokens. */
static void test_end_of_generation_only_on_a_match(void **state)
{
    (void)state;
    static const char g[] = "root ::= [a-z] [a-z ]*\n";
    gbnf_oracle *oracle = oracle_of(g);
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    int32_t eos = -1;
    for (int32_t t = 0; t < n_vocab && eos < 0; t++)
        if (graft_token_is_eog(stories, t))
            eos = t;
    assert_true(eos >= 0);
    graft_logit_bias bias = {eos, 100.0f};
    for (int ignore = 0; ignore < 2; ignore++) {
        graft_generate_config c = grammar_config(g, 0.0f, 1);
        c.logit_bias = &bias;
        c.n_logit_bias = 1;
        c.ignore_eog = ignore;
        run one;
        start(e, &one, &c);
        assert_int_equal(graft_generation_wait(one.gen), GRAFT_OK);
        check_output(one.gen, oracle);
        size_t n = 0;
        graft_generation_tokens(one.gen, &n);
        assert_int_equal(graft_generation_finish_reason(one.gen),
                         ignore ? GRAFT_FINISH_LENGTH : GRAFT_FINISH_STOP);
        assert_int_equal(n, ignore ? MAX_NEW : 1);
        release(&one);
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
        cmocka_unit_test(test_refusals_name_what_and_where),
        cmocka_unit_test(test_recognizer_bounds),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_mask_matches_oracle_stories),
        cmocka_unit_test(test_mask_matches_oracle_spm_and_bpe),
        cmocka_unit_test(test_sampled_generations_match_and_batch_invariant),
        cmocka_unit_test(test_greedy_picks_best_allowed_token),
        cmocka_unit_test(test_end_of_generation_only_on_a_match),
        cmocka_unit_test(test_dead_ends_and_bad_configs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
