/*
 * dry.h: the DRY ("don't repeat yourself") penalty of graft_sampler (dry.c).
 *
 * A token that would extend a repeat of the history's end is penalised, more the longer the
 * repeat; a repeat does not reach back across a sequence breaker (graft_sampling and
 * graft_sampler_set_dry_breakers in include/graft.h say what the numbers and the breakers
 * mean). Every buffer is allocated when the sampler is made, none at a pick.
 */
#ifndef GRAFT_DRY_H
#define GRAFT_DRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graft.h"
#include "tokenizer/tokenizer.h"

/* A restart sequence: a head token, then the tokens tails[tail_at, tail_at + tail_len)
 * (none: the head alone is a breaker). */
typedef struct graft__dry_breaker {
    int32_t head;
    int32_t tail_at, tail_len;
} graft__dry_breaker;

typedef struct graft__dry {
    float multiplier, base;
    int32_t allowed_length, window, n_vocab;
    int32_t max_exponent;          /* the exponent dry_base^e is capped at (0: none) */
    graft__dry_breaker *breakers;  /* sorted by head, then tail length */
    size_t n_breakers;
    int32_t *tails;
    int32_t *z;       /* window: repeat lengths of the reversed window (Z-algorithm) */
    int32_t *longest; /* n_vocab: the longest repeat each token would extend, -1 between
                         picks */
    int32_t *marked;  /* window: the tokens longest holds a length for */
} graft__dry;

/* A DRY penalty with p's numbers (p->dry_multiplier above 0, p->dry_penalty_last_n above
 * 0) and no breakers; NULL when out of memory. */
graft__dry *graft__dry_create(const graft_sampling *p, int32_t n_vocab);
void graft__dry_free(graft__dry *d);
/* Whether n breaker strings are within graft_sampler_set_dry_breakers's bounds. */
bool graft__dry_breakers_valid(const char *const *breakers, size_t n);
/* Replaces the breakers with those of the n strings (graft_sampler_set_dry_breakers), read
 * against the vocabulary v whose bytes table t holds. GRAFT_EINVAL, GRAFT_ENOMEM: the
 * breakers are unchanged. */
int graft__dry_set_breakers(graft__dry *d, const graft__vocab *v, const graft__token_table *t,
                            const char *const *breakers, size_t n);
/* graft_sampler_set_dry_breakers with the vocabulary's bytes table t already built (the
 * engine's); t may be NULL when the sampler has DRY off or the breakers are out of bounds. */
int graft__sampler_set_dry_breakers(graft_sampler *s, const graft__vocab *v,
                                    const graft__token_table *t, const char *const *breakers,
                                    size_t n);
/* Subtracts the penalties from the logits of the tokens that would extend a repeat of the
 * history's end (its last window tokens). */
void graft__dry_apply(graft__dry *d, float *logits, const int32_t *history, size_t n_history);

#endif
