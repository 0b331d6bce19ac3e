/*
 * logits_taps.h: records the first logits row each engine generation samples from, through
 * the engine's test hook (graft__engine_set_tap), for the parity tests.
 *
 * Usage: graft_test_taps t = {.n_vocab = n_vocab}; graft__engine_set_tap(e, graft_test_tap,
 * &t); ... graft_test_tapped(&t, gen) ...; graft_test_taps_clear(&t) before the tapped
 * generations are freed (a freed generation's address may be reused by the next one).
 * The tap runs on the engine thread; read the taps only after the generations settled.
 */
#ifndef GRAFT_TEST_LOGITS_TAPS_H
#define GRAFT_TEST_LOGITS_TAPS_H

#include <stdint.h>

#include "graft.h"

enum { GRAFT_TEST_TAPS = 16 }; /* generations recorded at most; later ones are ignored */

typedef struct graft_test_taps {
    int32_t n_vocab;
    int n;
    graft_generation *gen[GRAFT_TEST_TAPS];
    float *logits[GRAFT_TEST_TAPS]; /* (n_vocab) each, owned */
} graft_test_taps;

/* The tap (a graft__logits_tap, user = the graft_test_taps): keeps a copy of the first row
 * each generation samples from. */
void graft_test_tap(graft_generation *gen, const float *logits, void *user);
/* The row recorded for gen; fails the test when there is none. */
const float *graft_test_tapped(const graft_test_taps *t, const graft_generation *gen);
/* Frees what was recorded and forgets it. */
void graft_test_taps_clear(graft_test_taps *t);

#endif /* GRAFT_TEST_LOGITS_TAPS_H */
