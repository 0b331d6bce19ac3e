/*
 * sampler.c: picking the next token from logits (graft_sampler in include/graft.h).
 *
 * Order of the filters, as in llama.cpp's common chain: repetition penalty, then greedy
 * (temperature 0) or: top-k, temperature softmax, top-p, min-p, and a draw from the
 * renormalised distribution. Each sampler owns its random state (xoshiro256** seeded by
 * splitmix64), so a generation's tokens depend only on its seed and its own logits, never
 * on what else runs at the same time.
 */
#include <math.h>
#include <stdlib.h>

#include "util/argmax.h"
#include "util/util.h"

typedef struct candidate {
    int32_t id;
    float logit;
    float prob;
} candidate;

struct graft_sampler {
    graft_sampling params;
    int32_t n_vocab;
    graft__rng rng;
    candidate *cand; /* n_vocab */
    uint8_t *seen;   /* n_vocab: marks for the repetition penalty, all 0 between calls */
};

graft_sampling graft_sampling_default(void)
{
    graft_sampling p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 0};
    return p;
}

static bool params_valid(const graft_sampling *p)
{
    return p->temperature >= 0.0f && isfinite(p->temperature) && p->top_k >= 0 &&
           p->top_p > 0.0f && p->top_p <= 1.0f && p->min_p >= 0.0f && p->min_p <= 1.0f &&
           p->repetition_penalty > 0.0f && isfinite(p->repetition_penalty);
}

int graft_sampler_create(const graft_sampling *params, int32_t n_vocab, graft_sampler **out)
{
    *out = NULL;
    if (params == NULL || n_vocab <= 0 || !params_valid(params))
        return GRAFT_EINVAL;
    graft_sampler *s = graft__calloc(1, sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    s->cand = graft__malloc((size_t)n_vocab * sizeof *s->cand);
    s->seen = graft__calloc((size_t)n_vocab, 1);
    if (s->cand == NULL || s->seen == NULL) {
        graft_sampler_free(s);
        return GRAFT_ENOMEM;
    }
    s->params = *params;
    s->n_vocab = n_vocab;
    graft__rng_seed(&s->rng, params->seed);
    *out = s;
    return GRAFT_OK;
}

void graft_sampler_free(graft_sampler *s)
{
    if (s == NULL)
        return;
    graft__free(s->cand);
    graft__free(s->seen);
    graft__free(s);
}

/* Each distinct token of the history is penalised once (llama.cpp's rule): a positive
 * logit is divided by the penalty, a negative one multiplied. */
static void apply_penalty(graft_sampler *s, float *logits, const int32_t *history,
                          size_t n_history)
{
    const float penalty = s->params.repetition_penalty;
    if (penalty == 1.0f)
        return;
    for (size_t i = 0; i < n_history; i++) {
        int32_t id = history[i];
        if (id < 0 || id >= s->n_vocab || s->seen[id])
            continue;
        s->seen[id] = 1;
        logits[id] = logits[id] > 0.0f ? logits[id] / penalty : logits[id] * penalty;
    }
    for (size_t i = 0; i < n_history; i++)
        if (history[i] >= 0 && history[i] < s->n_vocab)
            s->seen[history[i]] = 0;
}

/* Descending logit; equal logits keep the lower id first, so the order is total. */
static int by_logit_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Keeps the candidates the filters allow; returns how many remain (at least 1). */
static int32_t filter(graft_sampler *s, int32_t n)
{
    const graft_sampling *p = &s->params;
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->cand[i].prob = (float)exp((double)(s->cand[i].logit - s->cand[0].logit) / p->temperature);
        sum += s->cand[i].prob;
    }
    double cumulative = 0.0;
    int32_t keep = 0;
    while (keep < n) {
        double prob = s->cand[keep].prob / sum;
        if (keep > 0 && prob < p->min_p * (s->cand[0].prob / sum))
            break;
        cumulative += prob;
        keep++;
        if (cumulative >= p->top_p)
            break;
    }
    return keep;
}

int32_t graft_sampler_sample(graft_sampler *s, float *logits, const int32_t *history,
                             size_t n_history)
{
    apply_penalty(s, logits, history, n_history);
    if (s->params.temperature == 0.0f)
        return graft__argmax(logits, s->n_vocab);
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->cand[i] = (candidate){i, logits[i], 0.0f};
    qsort(s->cand, (size_t)s->n_vocab, sizeof *s->cand, by_logit_desc);
    int32_t n = filter(s, s->n_vocab);
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += s->cand[i].prob;
    double r = graft__rng_unit(&s->rng) * total;
    for (int32_t i = 0; i < n; i++) {
        r -= s->cand[i].prob;
        if (r < 0.0)
            return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
