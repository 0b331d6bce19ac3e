/*
 * logprobs.c: the log-probabilities a generation reports with its tokens (config.logprobs,
 * graft_generation_logprobs in include/graft.h).
 *
 * A log-softmax of the model's logits in a fixed order: the maximum, then the exponentials
 * of the logits less it summed in blocks (eight float lanes a block, each block's total added
 * in float64, blocks in order), so the figures are the same bits for the same logits, which
 * the engine's batch invariance already makes the same whatever else ran. The exponential is
 * this file's own, without branches, so that the compiler vectorizes the sum on any x86-64;
 * the sum is within 1e-5 relative of float64's, which a log-probability reads as 1e-5.
 */
#include <math.h>
#include <string.h>

#include "engine/engine.h"

enum { LANES = 8, BLOCK = 1024 };

/* exp(x) for x <= 0 within a few ulp of expf: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by
 * its degree-6 Taylor polynomial, scaled by 2^n built in the exponent bits. Below -87 it is
 * exp(-87) (about 1.6e-38, nothing beside the maximum's 1), so 2^n stays a normal float. */
static inline float exp_nonpositive(float x)
{
    /* x = max(x, -87) on the bits (for x <= 0, +0 included, a larger uint32 is a smaller
     * float): an integer comparison, which the compiler turns into a vector blend where a
     * float one would trap */
    uint32_t xb, floor_bits;
    const float floor_value = -87.0f;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&floor_bits, &floor_value, sizeof floor_bits);
    xb = xb > floor_bits ? floor_bits : xb;
    memcpy(&x, &xb, sizeof x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504f + shifter) - shifter;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* An int32 that orders as float f does (NaNs aside): a negative float's magnitude bits
 * reversed. Its own inverse. Integer comparisons vectorize where float ones would trap. */
static inline int32_t float_order(int32_t bits)
{
    return bits ^ (int32_t)((uint32_t)(bits >> 31) >> 1);
}

static float max_of(const float *x, int32_t n)
{
    int32_t lane[LANES], m, bits;
    int32_t i = 0;
    memcpy(&bits, x, sizeof bits);
    for (int k = 0; k < LANES; k++)
        lane[k] = float_order(bits);
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            memcpy(&bits, &x[i + k], sizeof bits);
            int32_t v = float_order(bits);
            lane[k] = v > lane[k] ? v : lane[k];
        }
    m = lane[0];
    for (int k = 1; k < LANES; k++)
        m = lane[k] > m ? lane[k] : m;
    for (; i < n; i++) {
        memcpy(&bits, &x[i], sizeof bits);
        m = float_order(bits) > m ? float_order(bits) : m;
    }
    bits = float_order(m);
    float max;
    memcpy(&max, &bits, sizeof max);
    return max;
}

/* The sum of exp(x[i] - max) in the fixed order above. */
static double sum_exp(const float *x, int32_t n, float max)
{
    double sum = 0.0;
    int32_t i = 0;
    while (i + LANES <= n) {
        float lane[LANES] = {0};
        int32_t end = i + BLOCK <= n ? i + BLOCK : n - (n - i) % LANES;
        for (; i < end; i += LANES)
            for (int k = 0; k < LANES; k++)
                lane[k] += exp_nonpositive(x[i + k] - max);
        for (int k = 0; k < LANES; k++)
            sum += (double)lane[k];
    }
    for (; i < n; i++)
        sum += (double)exp_nonpositive(x[i] - max);
    return sum;
}

void graft__logprobs_fill(const float *logits, int32_t n_vocab, int32_t token, int32_t top,
                          graft_token_logprob *entries)
{
    const float max = max_of(logits, n_vocab);
    const double log_norm = (double)max + log(sum_exp(logits, n_vocab, max));
    entries[0] = (graft_token_logprob){token, (float)((double)logits[token] - log_norm)};
    if (top == 0)
        return;
    /* entries[1..top]: the best `top` so far, descending, by insertion; a strict > keeps
     * the lower id first among equal logits */
    graft_token_logprob *best = entries + 1;
    int32_t n_best = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (n_best == top && !(logits[i] > best[top - 1].logprob))
            continue;
        int32_t at = n_best < top ? n_best++ : top - 1;
        while (at > 0 && logits[i] > best[at - 1].logprob) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = (graft_token_logprob){i, logits[i]};
    }
    for (int32_t k = 0; k < n_best; k++)
        best[k].logprob = (float)((double)best[k].logprob - log_norm);
}
