/*
 * logprobs.c: the log-probabilities a generation reports with its tokens (config.logprobs,
 * graft_generation_logprobs in include/graft.h).
 *
 * A log-softmax of the model's logits in a fixed order (the maximum, then the sum of
 * exponentials in float64 from token 0 up), so the figures are the same bits for the same
 * logits, which the engine's batch invariance already makes the same whatever else ran.
 */
#include <math.h>

#include "engine/engine.h"

void graft__logprobs_fill(const float *logits, int32_t n_vocab, int32_t token, int32_t top,
                          graft_token_logprob *entries)
{
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max)
            max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - (double)max);
    const double log_norm = (double)max + log(sum);
    entries[0] = (graft_token_logprob){token, (float)((double)logits[token] - log_norm)};
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
