/*
 * test_engine_thought_budget.c: a thought held to a number of tokens
 * (graft_generate_config.thought_budget, thought_close, thought_opens) on stories260K.
 *
 * The oracle is the engine without a budget: a budgeted greedy generation is the plain
 * greedy answer up to the budget, then the closing tokens (a line break and the tag,
 * tokenized here with graft_tokenize), then exactly the greedy answer a fresh session gives
 * to the prompt extended by all of those tokens. An output that closes the thought itself
 * before the budget, or that does not begin with the opening text, is the plain answer;
 * closing tokens that would pass max_new_tokens begin sooner and end at it. A
 * sampled budgeted generation is the same bits alone and batched. Bad configurations are
 * refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "graft.h"
#include "models.h"

enum { CONTEXT = 256, MAX_NEW = 40, BUDGET = 7 };

static graft_model *stories;
static const int32_t prompt[] = {1, 403, 407, 261, 378};
#define N_PROMPT (sizeof prompt / sizeof prompt[0])

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

/* The tokens of generating from tokens[0, n) with c on a new session of e (to free). */
static int32_t *generate(graft_engine *e, const int32_t *tokens, size_t n,
                         const graft_generate_config *c, size_t *n_out)
{
    graft_session *s = graft_test_open_session(e);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, tokens, n, c, NULL, NULL, NULL, &gen), GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    const int32_t *out = graft_generation_tokens(gen, n_out);
    int32_t *copy = malloc((*n_out ? *n_out : 1) * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, out, *n_out * sizeof *copy);
    graft_generation_free(gen);
    graft_session_close(s);
    return copy;
}

/* The text of tokens (a detokenizer's), NUL-terminated, to free. */
static char *text_of(const int32_t *tokens, size_t n)
{
    graft_detok *d = NULL;
    assert_int_equal(graft_detok_create(stories, &d), GRAFT_OK);
    char *text = calloc(1, 1);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t k;
        assert_int_equal(graft_detok_push(d, tokens[i], &piece, &k), GRAFT_OK);
        text = realloc(text, len + k + 1);
        assert_non_null(text);
        memcpy(text + len, piece, k);
        len += k;
        text[len] = '\0';
    }
    graft_detok_free(d);
    return text;
}

static int32_t *closing_tokens(const char *tag, size_t *n)
{
    char text[64];
    snprintf(text, sizeof text, "\n%s", tag);
    int32_t *tokens = NULL;
    assert_int_equal(graft_tokenize(stories, text, strlen(text), 0, 1, &tokens, n), GRAFT_OK);
    assert_true(*n > 0);
    return tokens;
}

/* The budgeted greedy generation against the oracle: the plain answer's first `budget`
 * tokens, the closing tokens, then a fresh greedy answer to everything before. */
static void check_closed_at_budget(graft_engine *e, const graft_generate_config *c,
                                   const int32_t *plain, int32_t budget)
{
    size_t n = 0, n_closing = 0;
    int32_t *out = generate(e, prompt, N_PROMPT, c, &n);
    int32_t *closing = closing_tokens(c->thought_close, &n_closing);
    assert_int_equal(n, MAX_NEW);
    assert_memory_equal(out, plain, (size_t)budget * sizeof *out);
    assert_memory_equal(out + budget, closing, n_closing * sizeof *out);
    size_t before = N_PROMPT + (size_t)budget + n_closing;
    int32_t *extended = malloc(before * sizeof *extended);
    assert_non_null(extended);
    memcpy(extended, prompt, sizeof prompt);
    memcpy(extended + N_PROMPT, out, ((size_t)budget + n_closing) * sizeof *out);
    graft_generate_config rest = graft_test_greedy(MAX_NEW - budget - (int32_t)n_closing);
    size_t n_rest = 0;
    int32_t *after = generate(e, extended, before, &rest, &n_rest);
    assert_int_equal(n_rest, n - (size_t)budget - n_closing);
    assert_memory_equal(out + budget + n_closing, after, n_rest * sizeof *out);
    free(after);
    free(extended);
    free(closing);
    free(out);
}

/* An engine, the greedy config without a budget, and its answer to the prompt. */
typedef struct plain_run {
    graft_engine *e;
    graft_generate_config c;
    int32_t *plain;
    size_t n_plain;
} plain_run;

static plain_run plain_begin(void)
{
    graft_engine_options o = graft_test_engine_options(2, CONTEXT);
    plain_run p = {.e = graft_test_engine(stories, &o), .c = graft_test_greedy(MAX_NEW)};
    p.plain = generate(p.e, prompt, N_PROMPT, &p.c, &p.n_plain);
    return p;
}

static void plain_end(plain_run *p)
{
    free(p->plain);
    graft_test_engine_end(p->e);
}

/* The budgeted config's answer is the plain one, token for token. */
static void expect_plain(const plain_run *p, const graft_generate_config *c)
{
    size_t n = 0;
    int32_t *out = generate(p->e, prompt, N_PROMPT, c, &n);
    assert_int_equal(n, p->n_plain);
    assert_memory_equal(out, p->plain, n * sizeof *out);
    free(out);
}

/* The prompt opened the thought (no opening text): closed at the budget, then the model's
 * own answer; a tag of special-token text and a budget of 1 alike. */
static void test_closed_at_the_budget(void **state)
{
    (void)state;
    plain_run p = plain_begin();
    graft_generate_config c = p.c;
    c.thought_close = "</think>";
    c.thought_budget = BUDGET;
    check_closed_at_budget(p.e, &c, p.plain, BUDGET);
    c.thought_budget = 1;
    c.thought_close = "</s>"; /* parsed as the special token */
    check_closed_at_budget(p.e, &c, p.plain, 1);
    plain_end(&p);
}

/* A thought the model closes itself within the budget is left alone; one it would close
 * after the budget is closed at the budget. The tag is the text of the plain answer's
 * tokens 2 and 3. */
static void test_closed_by_the_model(void **state)
{
    (void)state;
    plain_run p = plain_begin();
    graft_generate_config c = p.c;
    char *tag = text_of(p.plain + 2, 2);
    assert_true(strlen(tag) > 0 && strlen(tag) <= GRAFT_MAX_OUTPUT_AFTER);
    char *head = text_of(p.plain, 2);
    assert_null(strstr(head, tag)); /* not closed before token 2 */
    c.thought_close = tag;
    c.thought_budget = 4; /* the tag is out at 4 tokens: nothing forced */
    expect_plain(&p, &c);
    c.thought_budget = 2; /* the tag would come after the budget: closed at 2 */
    check_closed_at_budget(p.e, &c, p.plain, 2);
    free(head);
    free(tag);
    plain_end(&p);
}

/* thought_opens: an output that does not open with it has no thought (the plain answer);
 * one that does (the opening is the plain answer's first word) is closed at the budget. */
static void test_opening_text(void **state)
{
    (void)state;
    plain_run p = plain_begin();
    graft_generate_config c = p.c;
    c.thought_close = "</think>";
    c.thought_opens = "<think>";
    c.thought_budget = BUDGET;
    expect_plain(&p, &c);
    char *word = text_of(p.plain, 1);
    char *start = word + strspn(word, " \n");
    assert_true(strlen(start) > 0);
    c.thought_opens = start;
    check_closed_at_budget(p.e, &c, p.plain, BUDGET);
    free(word);
    plain_end(&p);
}

/* A budget whose closing tokens would pass max_new_tokens: they begin sooner and end at
 * it, the plain answer before them; a budget of max_new_tokens or more forces nothing. */
static void test_closing_fits_max_new(void **state)
{
    (void)state;
    plain_run p = plain_begin();
    size_t n_closing = 0;
    int32_t *closing = closing_tokens("</think>", &n_closing);
    assert_true(n_closing >= 2);
    int32_t max_new = BUDGET + (int32_t)n_closing - 1;
    graft_generate_config c = p.c;
    c.max_new_tokens = max_new;
    c.thought_close = "</think>";
    c.thought_budget = BUDGET;
    size_t n = 0;
    int32_t *out = generate(p.e, prompt, N_PROMPT, &c, &n);
    assert_int_equal(n, max_new);
    size_t from = (size_t)max_new - n_closing;
    assert_memory_equal(out, p.plain, from * sizeof *out);
    assert_memory_equal(out + from, closing, n_closing * sizeof *out);
    free(out);
    c.thought_budget = max_new;
    out = generate(p.e, prompt, N_PROMPT, &c, &n);
    assert_int_equal(n, max_new);
    assert_memory_equal(out, p.plain, n * sizeof *out);
    free(out);
    free(closing);
    plain_end(&p);
}

/* Sampled with a budget: the same bits alone and beside other generations. */
static void test_sampled_batch_invariant(void **state)
{
    (void)state;
    enum { SEEDS = 4 };
    graft_engine_options o = graft_test_engine_options(2 * SEEDS + 1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_generate_config c[SEEDS];
    int32_t *alone[SEEDS];
    size_t n_alone[SEEDS];
    for (int k = 0; k < SEEDS; k++) {
        c[k] = graft_test_greedy(MAX_NEW);
        c[k].sampling.temperature = 1.0f;
        c[k].sampling.seed = (uint64_t)k + 1;
        c[k].thought_close = "</think>";
        c[k].thought_budget = BUDGET + k;
        alone[k] = generate(e, prompt, N_PROMPT, &c[k], &n_alone[k]);
    }
    graft_session *s[SEEDS];
    graft_generation *g[SEEDS];
    for (int k = 0; k < SEEDS; k++) {
        s[k] = graft_test_open_session(e);
        assert_int_equal(graft_session_generate(s[k], prompt, N_PROMPT, &c[k], NULL, NULL, NULL,
                                                &g[k]),
                         GRAFT_OK);
    }
    size_t n_closing = 0;
    int32_t *closing = closing_tokens("</think>", &n_closing);
    for (int k = 0; k < SEEDS; k++) {
        assert_int_equal(graft_generation_wait(g[k]), GRAFT_OK);
        size_t n = 0;
        const int32_t *out = graft_generation_tokens(g[k], &n);
        assert_int_equal(n, n_alone[k]);
        assert_memory_equal(out, alone[k], n * sizeof *out);
        assert_memory_equal(out + BUDGET + k, closing, n_closing * sizeof *out);
        graft_generation_free(g[k]);
        graft_session_close(s[k]);
        free(alone[k]);
    }
    free(closing);
    graft_test_engine_end(e);
}

static void test_bad_configs(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *s = graft_test_open_session(e);
    graft_generation *gen = NULL;
    static const char *const closes[] = {NULL, "", "123456789012345678901234567890123"};
    graft_generate_config c = graft_test_greedy(4);
    for (size_t i = 0; i < sizeof closes / sizeof *closes; i++) {
        c.thought_budget = 3;
        c.thought_close = closes[i];
        assert_int_equal(graft_session_generate(s, prompt, N_PROMPT, &c, NULL, NULL, NULL, &gen),
                         GRAFT_EINVAL);
    }
    c.thought_close = "</think>";
    c.thought_opens = "";
    assert_int_equal(graft_session_generate(s, prompt, N_PROMPT, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.thought_opens = NULL;
    c.thought_budget = -1;
    assert_int_equal(graft_session_generate(s, prompt, N_PROMPT, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    graft_session_close(s);
    graft_test_engine_end(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_at_the_budget),
        cmocka_unit_test(test_closed_by_the_model),
        cmocka_unit_test(test_opening_text),
        cmocka_unit_test(test_closing_fits_max_new),
        cmocka_unit_test(test_sampled_batch_invariant),
        cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
