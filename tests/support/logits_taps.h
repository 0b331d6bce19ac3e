/*
 * logits_taps.h: records the logits rows engine generations sample from, through the engine's
 * test hook (graft__engine_set_tap): the first row of each generation, for the parity tests,
 * or every row of one generation in order (graft_test_rows), for the tests that recompute
 * each pick.
 *
 * Usage: graft_test_taps t = {.n_vocab = n_vocab}; graft__engine_set_tap(e, graft_test_tap,
 * &t); ... graft_test_tapped(&t, gen) ...; graft_test_taps_clear(&t) before the tapped
 * generations are freed (a freed generation's address may be reused by the next one).
 * The tap runs on the engine thread; read the taps only after the generations settled.
 *
 * graft_test_check_next_logits is the check the prefix and retention tests make of a
 * session (a clone, say) against a cold prefill with the same tap.
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

/* Every row one generation samples from, in order; rows past max_rows are not kept. */
typedef struct graft_test_rows {
    int32_t n_vocab;
    int max_rows;
    int n;         /* rows recorded */
    float *logits; /* (max_rows, n_vocab), owned */
} graft_test_rows;
/* Allocates room for max_rows rows (asserted) and sets n to 0. */
void graft_test_rows_init(graft_test_rows *r, int32_t n_vocab, int max_rows);
/* The tap (user = the graft_test_rows): copies the row; allocates nothing. */
void graft_test_rows_tap(graft_generation *gen, const float *logits, void *user);
/* Row i, asserted recorded. */
const float *graft_test_row(const graft_test_rows *r, int i);
void graft_test_rows_free(graft_test_rows *r);

/* s holds tokens[0, n): generates tokens[n] on it (graft_test_run, one new token) and checks
 * that the row it sampled from, recorded by t (the engine's tap), equals bit for bit the
 * logits of a cold prefill of tokens[0, n + 1) on sequence 0 of `cold`, which is reset
 * first. Clears t before and after; leaves s at n + 1. */
void graft_test_check_next_logits(graft_test_taps *t, graft_session *s, graft_context *cold,
                                  const int32_t *tokens, int32_t n);
/* The same against ref (n_vocab), the cold logits of tokens[0, n + 1) computed before (a
 * test that checks many sessions at the same n computes them once). */
void graft_test_check_next_logits_against(graft_test_taps *t, graft_session *s,
                                          const int32_t *tokens, int32_t n, const float *ref);

#endif /* GRAFT_TEST_LOGITS_TAPS_H */
