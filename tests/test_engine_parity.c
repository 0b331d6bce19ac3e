/*
 * test_engine_parity.c: the engine's first-token logits are the same bytes however the
 * prompt reached the KV (DESIGN.md invariants 1 and 2), and the parity table of issue 4.
 *
 * For each model, the logits a generation samples its first token from (seen through the
 * engine's logits tap test hook) are compared by memcmp with a cold prefill on a plain
 * graft_context (same kernels, same KV type), in three ways of computing the prompt:
 *   clone + suffix  the first part generated on one session, cloned at a boundary inside a
 *                   KV block, the rest generated on the clone (copy-on-write);
 *   chunked         prefilled in chunks of 5 tokens (max_batch_tokens 5);
 *   batched         prefilled in one step together with 7 other sessions' prompts.
 * Models: stories260K (F32 and every derived quantized copy) and synth qwen3 / gemma3 tiny
 * (F32 and Q8_0), the prompt longer than gemma3's sliding window. The table is printed.
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

enum { PROMPT = 45, SPLIT = 21, OTHERS = 7 };

static graft_engine *engine_for(graft_model *m, int32_t max_batch, graft_test_taps *t)
{
    graft_engine_options o = graft_engine_default_options();
    o.max_sessions = OTHERS + 1;
    o.max_context = 128;
    o.max_batch_tokens = max_batch;
    o.n_threads = 1;
    graft_engine *e = NULL;
    assert_int_equal(graft_engine_create(m, &o, &e, NULL), GRAFT_OK);
    graft__engine_set_tap(e, graft_test_tap, t);
    return e;
}

static graft_generation *generate(graft_session *s, const int32_t *tokens, size_t n)
{
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = 1;
    c.sampling.temperature = 0.0f;
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, tokens, n, &c, NULL, NULL, NULL, &gen), GRAFT_OK);
    return gen;
}

static void finish(graft_generation *gen)
{
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
}

static void end_engine(graft_engine *e, graft_test_taps *t)
{
    graft_engine_metrics m;
    assert_int_equal(graft_engine_metrics_get(e, &m), GRAFT_OK);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
    graft_test_taps_clear(t);
}

static bool same(const float *a, const float *b, int32_t n_vocab)
{
    return memcmp(a, b, (size_t)n_vocab * sizeof(float)) == 0;
}

static bool clone_and_suffix(graft_model *m, const int32_t *prompt, const float *cold)
{
    graft_test_taps t = {.n_vocab = m->hp.n_vocab};
    graft_engine *e = engine_for(m, 512, &t);
    graft_session *a = NULL, *b = NULL;
    assert_int_equal(graft_session_open(e, &a, NULL), GRAFT_OK);
    graft_generation *first = generate(a, prompt, SPLIT);
    finish(first);
    assert_int_equal(graft_session_clone_wait(a, SPLIT, &b, NULL), GRAFT_OK);
    graft_generation *rest = generate(b, prompt + SPLIT, PROMPT - SPLIT);
    finish(rest);
    bool ok = same(graft_test_tapped(&t, rest), cold, m->hp.n_vocab);
    graft_generation_free(first);
    graft_generation_free(rest);
    graft_session_close(a);
    graft_session_close(b);
    end_engine(e, &t);
    return ok;
}

static bool chunked(graft_model *m, const int32_t *prompt, const float *cold)
{
    graft_test_taps t = {.n_vocab = m->hp.n_vocab};
    graft_engine *e = engine_for(m, 5, &t);
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
    graft_generation *gen = generate(s, prompt, PROMPT);
    finish(gen);
    bool ok = same(graft_test_tapped(&t, gen), cold, m->hp.n_vocab);
    graft_generation_free(gen);
    graft_session_close(s);
    end_engine(e, &t);
    return ok;
}

/* Other sessions' prompts: lengths 5, 10, ..., 35. */
static int32_t other_prompt(const graft_model *m, int i, int32_t *tokens)
{
    int32_t n = 5 * (i + 1);
    for (int32_t k = 0; k < n; k++)
        tokens[k] = (k * 17 + i * 101 + 3) % m->hp.n_vocab;
    return n;
}

static bool batched(graft_model *m, const int32_t *prompt, const float *cold)
{
    graft_test_taps t = {.n_vocab = m->hp.n_vocab};
    graft_engine *e = engine_for(m, 512, &t);
    graft_session *s[OTHERS + 1];
    graft_generation *gen[OTHERS + 1];
    for (int i = 0; i <= OTHERS; i++)
        assert_int_equal(graft_session_open(e, &s[i], NULL), GRAFT_OK);
    graft__engine_pause(e, true);
    for (int i = 0; i < OTHERS; i++) {
        int32_t other[PROMPT];
        int32_t n = other_prompt(m, i, other);
        gen[i + 1] = generate(s[i + 1], other, (size_t)n);
    }
    gen[0] = generate(s[0], prompt, PROMPT);
    graft__engine_pause(e, false);
    for (int i = 0; i <= OTHERS; i++)
        finish(gen[i]);
    graft_engine_metrics mm;
    assert_int_equal(graft_engine_metrics_get(e, &mm), GRAFT_OK);
    assert_int_equal(mm.steps, 1); /* all eight prompts in one forward pass */
    assert_int_equal(mm.batch_generations, OTHERS + 1);
    bool ok = same(graft_test_tapped(&t, gen[0]), cold, m->hp.n_vocab);
    for (int i = 0; i <= OTHERS; i++) {
        graft_generation_free(gen[i]);
        graft_session_close(s[i]);
    }
    end_engine(e, &t);
    return ok;
}

static void cold_logits(graft_model *m, const int32_t *prompt, float *out)
{
    graft_context_options o = graft_context_default_options();
    o.n_ctx = 128;
    o.n_threads = 1;
    graft_context *ctx = NULL;
    assert_int_equal(graft_context_create_ex(m, &o, &ctx, NULL), GRAFT_OK);
    assert_int_equal(graft_context_eval(ctx, prompt, PROMPT, out), GRAFT_OK);
    graft_context_free(ctx);
}

static int cases, identical;

static void check_model(const char *label, graft_model *m)
{
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((i * 131 + 7) % m->hp.n_vocab);
    float *cold = malloc((size_t)m->hp.n_vocab * sizeof(float));
    cold_logits(m, prompt, cold);
    bool r[3] = {clone_and_suffix(m, prompt, cold), chunked(m, prompt, cold),
                 batched(m, prompt, cold)};
    printf("| %-28s | %-9s | %-9s | %-9s |\n", label, r[0] ? "identical" : "DIFFERENT",
           r[1] ? "identical" : "DIFFERENT", r[2] ? "identical" : "DIFFERENT");
    for (int i = 0; i < 3; i++) {
        cases++;
        identical += r[i];
    }
    free(cold);
}

static void test_parity_table(void **state)
{
    (void)state;
    printf("| %-28s | %-9s | %-9s | %-9s |\n", "model (prompt 45 tokens)", "clone+sfx",
           "chunked", "batched");
    graft_test_each_parity_model("parity", check_model);
    printf("first-token logits identical to a cold prefill: %d/%d cases\n", identical, cases);
    assert_int_equal(identical, cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
