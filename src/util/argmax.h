/*
 * argmax.h: the index of the largest logit, shared by the sampler (greedy decoding), `graft
 * bench speed` and bench/llama_speed.c, so that both engines' decode figures pay the same
 * harness cost. It depends on nothing of graft (plain C11), so the llama.cpp harness
 * compiles argmax.c as it is.
 */
#ifndef GRAFT_ARGMAX_H
#define GRAFT_ARGMAX_H

#include <stdint.h>

/* The index of the largest of x[0, n), the lowest among equal ones; 0 when n <= 1 or x[0]
 * is a NaN. A NaN after x[0] is never the largest. */
int32_t graft__argmax(const float *x, int32_t n);

#endif
