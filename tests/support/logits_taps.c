/*
 * logits_taps.c: the logits tap of the parity tests (logits_taps.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "logits_taps.h"

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
