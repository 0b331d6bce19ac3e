/*
 * logits_taps.c: the logits tap of the engine tests and the check made with it
 * (logits_taps.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "logits_taps.h"
#include "models.h"

void graft_test_tap(graft_generation *gen, const float *logits, void *user)
{
    graft_test_taps *t = user;
    for (int i = 0; i < t->n; i++)
        if (t->gen[i] == gen)
            return;
    if (t->n == GRAFT_TEST_TAPS)
        return;
    t->gen[t->n] = gen;
    t->logits[t->n] = malloc((size_t)t->n_vocab * sizeof(float));
    assert_non_null(t->logits[t->n]);
    memcpy(t->logits[t->n], logits, (size_t)t->n_vocab * sizeof(float));
    t->n++;
}

const float *graft_test_tapped(const graft_test_taps *t, const graft_generation *gen)
{
    for (int i = 0; i < t->n; i++)
        if (t->gen[i] == gen)
            return t->logits[i];
    fail_msg("no logits tapped for a generation");
    return NULL;
}

void graft_test_taps_clear(graft_test_taps *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->logits[i]);
    t->n = 0;
}

void graft_test_rows_init(graft_test_rows *r, int32_t n_vocab, int max_rows)
{
    *r = (graft_test_rows){.n_vocab = n_vocab, .max_rows = max_rows};
    r->logits = malloc((size_t)max_rows * (size_t)n_vocab * sizeof(float));
    assert_non_null(r->logits);
}

void graft_test_rows_tap(graft_generation *gen, const float *logits, void *user)
{
    (void)gen;
    graft_test_rows *r = user;
    if (r->n < r->max_rows)
        memcpy(r->logits + (size_t)r->n++ * (size_t)r->n_vocab, logits,
               (size_t)r->n_vocab * sizeof *logits);
}

const float *graft_test_row(const graft_test_rows *r, int i)
{
    assert_true(i >= 0 && i < r->n);
    return r->logits + (size_t)i * (size_t)r->n_vocab;
}

void graft_test_rows_free(graft_test_rows *r)
{
    free(r->logits);
    r->logits = NULL;
}

void graft_test_check_next_logits_against(graft_test_taps *t, graft_session *s,
                                          const int32_t *tokens, int32_t n, const float *ref)
{
    graft_test_taps_clear(t);
    assert_int_equal(graft_test_run(s, tokens + n, 1, 1), GRAFT_OK);
    assert_int_equal(t->n, 1);
    assert_memory_equal(t->logits[0], ref, (size_t)t->n_vocab * sizeof(float));
    graft_test_taps_clear(t);
}

void graft_test_check_next_logits(graft_test_taps *t, graft_session *s, graft_context *cold,
                                  const int32_t *tokens, int32_t n)
{
    float *ref = malloc((size_t)t->n_vocab * sizeof(float));
    assert_non_null(ref);
    assert_int_equal(graft_context_seq_reset(cold, 0), GRAFT_OK);
    assert_int_equal(graft_context_eval(cold, tokens, (size_t)n + 1, ref), GRAFT_OK);
    graft_test_check_next_logits_against(t, s, tokens, n, ref);
    free(ref);
}
