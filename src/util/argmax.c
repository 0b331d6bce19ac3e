/*
 * argmax.c: graft__argmax (argmax.h) in two passes: the largest value, kept in LANES running
 * maxima that do not depend on each other, then the first index holding it.
 *
 * The obvious loop (best = i whenever x[i] > x[best]) makes each step wait for the load
 * of x[best] behind the previous step's choice of best, at -O2 and -O3 alike; these two
 * passes have no such chain and give the same index (the first of the largest, comparing
 * with `>` and `==` as that loop does). Figures: bench/results/2026-12-01-kernel-decisions.md.
 */
#include "argmax.h"

enum { LANES = 8 };

int32_t graft__argmax(const float *x, int32_t n)
{
    if (n <= 1)
        return 0;
    float lane[LANES];
    for (int k = 0; k < LANES; k++)
        lane[k] = x[0];
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    float largest = lane[0];
    for (int k = 1; k < LANES; k++)
        largest = lane[k] > largest ? lane[k] : largest;
    for (; i < n; i++)
        largest = x[i] > largest ? x[i] : largest;
    for (i = 0; i < n; i++)
        if (x[i] == largest)
            return i;
    return 0;
}
