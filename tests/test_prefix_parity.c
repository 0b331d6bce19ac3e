/*
 * test_prefix_parity.c: a prompt served warm from the prefix cache gives the same bytes as
 * computed cold (DESIGN.md invariants 1-3), across the parity matrix of the engine issue,
 * and the table of issue 5.
 *
 * Per model, on one engine with the logits tap test hook:
 *   donor    a prompt sharing the first 85 of the 100 prompt tokens (90 tokens), run with a
 *            prompt capture, so the cache holds its snapshot;
 *   cold     the 100-token prompt on a new session: first-token logits and 64 greedy tokens;
 *   warm@85  a lookup of the prompt hits the donor's snapshot at 85 (inside a KV block: the
 *            suffix copies it on write); the rest of the prompt is generated on the clone,
 *            with a capture of the full prompt;
 *   warm@99  a lookup hits that captured snapshot at 99 (the last prompt token is always
 *            recomputed); the last token is generated on the clone.
 * The warm first-token logits are compared with the cold ones by memcmp, and the 64-token
 * greedy continuations token for token. Models: stories260K (F32 and every derived quantized
 * copy) and synth qwen3 / gemma3 tiny (F32 and Q8_0). On gemma3 (window 16) the sessions
 * drop sliding-window blocks before position 100 - 16, so the hits also exercise retention.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "graft.h"
#include "logits_taps.h"
#include "models.h"

enum { PROMPT = 100, SHARED = 85, DONOR = 90, CONTINUE = 64 };

/* One run's results: the first logits row and the greedy continuation. */
typedef struct result {
    float *logits;
    int32_t tokens[CONTINUE];
    size_t n_tokens;
} result;

/* Generates tokens[from, n) on s, greedy, CONTINUE new tokens; with a cache, captures the
 * prompt tokens[0, n) into it. Fills r (r->logits allocated). */
static void generate(graft_session *s, const int32_t *tokens, int32_t from, int32_t n,
                     graft_prefix_cache *cache, graft_test_taps *t, result *r)
{
    graft_prompt_capture *cap = NULL;
    graft_update_cb up = NULL;
    graft_settled_cb settled = NULL;
    void *user = NULL;
    if (cache != NULL) {
        assert_int_equal(graft_prompt_capture_create(cache, s, tokens, (size_t)n, &cap), GRAFT_OK);
        assert_int_equal(graft_prompt_capture_wrap(cap, &up, &settled, &user), GRAFT_OK);
    }
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = CONTINUE;
    c.ignore_eog = 1;
    c.sampling.temperature = 0.0f;
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, tokens + from, (size_t)(n - from), &c, up, settled,
                                            user, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    const int32_t *out = graft_generation_tokens(gen, &r->n_tokens);
    assert_int_equal(r->n_tokens, CONTINUE);
    memcpy(r->tokens, out, sizeof r->tokens);
    r->logits = malloc((size_t)t->n_vocab * sizeof(float));
    memcpy(r->logits, graft_test_tapped(t, gen), (size_t)t->n_vocab * sizeof(float));
    graft_test_taps_clear(t);
    graft_generation_free(gen);
    if (cap != NULL) {
        assert_int_equal(graft_prompt_capture_collect(cap), GRAFT_OK);
        graft_prompt_capture_free(cap);
    }
}

static graft_session *open_session(graft_engine *e)
{
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
    return s;
}

/* A warm run: the lookup must hit `want` tokens. */
static void warm(graft_prefix_cache *cache, const int32_t *prompt, int32_t want, bool capture,
                 graft_test_taps *t, result *r)
{
    graft_session *s = NULL;
    int32_t matched = 0;
    assert_int_equal(graft_prefix_cache_lookup(cache, prompt, PROMPT, &s, &matched), GRAFT_OK);
    assert_int_equal(matched, want);
    generate(s, prompt, matched, PROMPT, capture ? cache : NULL, t, r);
    graft_session_close(s);
}

static bool same_logits(const result *a, const result *b, int32_t n_vocab)
{
    return memcmp(a->logits, b->logits, (size_t)n_vocab * sizeof(float)) == 0;
}

static bool same_tokens(const result *a, const result *b)
{
    return a->n_tokens == b->n_tokens && memcmp(a->tokens, b->tokens, sizeof a->tokens) == 0;
}

static int cases, identical;

static void check_model(const char *label, graft_model *m)
{
    graft_test_taps t = {.n_vocab = m->hp.n_vocab};
    graft_engine_options o = graft_engine_default_options();
    o.max_sessions = 8;
    o.max_context = PROMPT + CONTINUE + 32;
    o.n_threads = 1;
    graft_engine *e = NULL;
    assert_int_equal(graft_engine_create(m, &o, &e, NULL), GRAFT_OK);
    graft__engine_set_tap(e, graft_test_tap, &t);
    graft_prefix_cache *cache = NULL;
    assert_int_equal(graft_prefix_cache_create(e, 8, 0, &cache, NULL), GRAFT_OK);
    int32_t prompt[PROMPT], donor[DONOR];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 131 + 7) % m->hp.n_vocab);
    memcpy(donor, prompt, SHARED * sizeof(int32_t));
    for (int i = SHARED; i < DONOR; i++)
        donor[i] = (int32_t)((i * 71 + 3) % m->hp.n_vocab);
    assert_true(donor[SHARED] != prompt[SHARED]);

    result r_donor, cold, warm85, warm99;
    graft_session *s = open_session(e);
    generate(s, donor, 0, DONOR, cache, &t, &r_donor);
    graft_session_close(s);
    s = open_session(e);
    generate(s, prompt, 0, PROMPT, NULL, &t, &cold);
    graft_session_close(s);
    warm(cache, prompt, SHARED, true, &t, &warm85);
    warm(cache, prompt, PROMPT - 1, false, &t, &warm99);

    bool r[4] = {same_logits(&warm85, &cold, m->hp.n_vocab), same_tokens(&warm85, &cold),
                 same_logits(&warm99, &cold, m->hp.n_vocab), same_tokens(&warm99, &cold)};
    printf("| %-24s |", label);
    for (int i = 0; i < 4; i++) {
        printf(" %-9s |", r[i] ? "identical" : "DIFFERENT");
        cases++;
        identical += r[i];
    }
    printf("\n");
    graft_prefix_cache_stats st;
    assert_int_equal(graft_prefix_cache_stats_get(cache, &st), GRAFT_OK);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.captures, 2);
    graft_prefix_cache_free(cache);
    graft_engine_metrics mm;
    assert_int_equal(graft_engine_metrics_get(e, &mm), GRAFT_OK);
    assert_int_equal(mm.kv_blocks_used, 0);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
    result *all[4] = {&r_donor, &cold, &warm85, &warm99};
    for (int i = 0; i < 4; i++)
        free(all[i]->logits);
}

static void test_parity_table(void **state)
{
    (void)state;
    printf("| %-24s | %-9s | %-9s | %-9s | %-9s |\n", "model (prompt 100 tokens)",
           "logits@85", "64 tok@85", "logits@99", "64 tok@99");
    graft_test_each_parity_model("prefix-parity", check_model);
    printf("warm from the prefix cache identical to cold: %d/%d cases\n", identical, cases);
    assert_int_equal(identical, cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
