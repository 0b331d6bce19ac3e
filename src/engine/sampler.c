/*
 * sampler.c: picking the next token from logits (graft_sampler in include/graft.h).
 *
 * Order of the filters: logit biases, repetition penalty, presence and frequency penalties,
 * then greedy (temperature 0) or: top-n-sigma, top-k, temperature softmax (a dynamic
 * temperature, from the top-k candidates' entropy, when dynatemp_range is above 0), typical,
 * top-p, min-p, XTC, and a draw from the renormalised distribution. Temperature comes before
 * top-p and min-p, as in Hugging Face transformers and vLLM (llama.cpp applies it last, so at
 * a temperature other than 1 its top-p and min-p keep other tokens; top-n-sigma's cut does
 * not depend on the temperature). XTC takes one draw of the generator at every sampled step
 * where its probability is above 0, before the pick's own draw, as llama.cpp's does.
 *
 * Presence and frequency penalties count what this sampler picked, the generation's own
 * output (OpenAI's and vLLM's rule), so they do not depend on where the prompt's KV came
 * from or on a session's earlier turns. DRY (dry.c) comes after them, before the pick.
 *
 * Mirostat (llama.cpp's v1 and v2) takes the place of the filters after the penalties: every
 * token is a candidate at the given temperature, cut to hold the surprise near tau, and mu
 * (the cut) follows the surprise of each pick.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dry.h"
#include "model/model.h"
#include "util/argmax.h"
#include "util/util.h"

typedef struct candidate {
    int32_t id;
    float logit;
    float prob;
} candidate;

/* A candidate's distance from typical: |surprise - entropy|, and its rank by logit. */
typedef struct typicality {
    double shift;
    int32_t rank;
} typicality;

struct graft_sampler {
    graft_sampling params;
    int32_t n_vocab;
    graft__rng rng;
    /* Buffers exist only for the filters the parameters use (temperature > 0: cand, order,
     * order_tmp; a repetition penalty: seen), so a greedy generation allocates none of them.
     * A draw writes only the entries it needs, so the pages of the rest are never touched. */
    candidate *cand; /* top-k (n_vocab without one): the best, best first, of the last draw */
    uint64_t *order, *order_tmp; /* n_vocab: sort keys of the last draw (rank_candidates) */
    uint8_t *seen;   /* n_vocab: marks for the repetition penalty, all 0 between calls */
    int32_t *picked; /* n_vocab: times each token was picked, and */
    int32_t *distinct; /* n_vocab: the tokens picked, each once (n_distinct of them); both
                          with a presence or frequency penalty only, else NULL */
    typicality *typical; /* top-k's size: with typical_p below 1 only, else NULL */
    graft__dry *dry;     /* with dry_multiplier above 0 only, else NULL */
    double mu;           /* Mirostat's cut: the most surprise a candidate may have (v2) */
    int32_t n_distinct;
    graft_logit_bias *bias;
    size_t n_bias;
};

/* How many of the best candidates a draw keeps before the other filters (Mirostat: all). */
static int32_t top_k_of(const graft_sampling *p, int32_t n_vocab)
{
    return p->mirostat == 0 && p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
}

graft_sampling graft_sampling_default(void)
{
    graft_sampling p = {.temperature = 0.8f,
                        .top_k = 40,
                        .top_p = 0.95f,
                        .min_p = 0.05f,
                        .repetition_penalty = 1.0f,
                        .xtc_threshold = 0.1f,
                        .typical_p = 1.0f,
                        .dynatemp_exponent = 1.0f,
                        .mirostat_tau = 5.0f,
                        .mirostat_eta = 0.1f,
                        .dry_base = 1.75f,
                        .dry_allowed_length = 2};
    return p;
}

static bool params_valid(const graft_sampling *p)
{
    return p->temperature >= 0.0f && isfinite(p->temperature) && p->top_k >= 0 &&
           p->top_p >= 0.0f && p->top_p <= 1.0f && p->min_p >= 0.0f && p->min_p <= 1.0f &&
           p->repetition_penalty > 0.0f && isfinite(p->repetition_penalty) &&
           isfinite(p->presence_penalty) && isfinite(p->frequency_penalty) &&
           p->penalty_last_n >= 0 && isfinite(p->top_n_sigma) && p->xtc_probability >= 0.0f &&
           p->xtc_probability <= 1.0f && p->xtc_threshold >= 0.0f && p->xtc_threshold <= 1.0f &&
           p->typical_p >= 0.0f && p->typical_p <= 1.0f && p->dynatemp_range >= 0.0f &&
           isfinite(p->dynatemp_range) && p->dynatemp_exponent >= 0.0f &&
           isfinite(p->dynatemp_exponent) && p->mirostat >= 0 && p->mirostat <= 2 &&
           p->mirostat_tau >= 0.0f && isfinite(p->mirostat_tau) && p->mirostat_eta >= 0.0f &&
           isfinite(p->mirostat_eta) && p->dry_multiplier >= 0.0f &&
           isfinite(p->dry_multiplier) && p->dry_base >= 1.0f && isfinite(p->dry_base) &&
           p->dry_allowed_length >= 0 && p->dry_penalty_last_n >= 0 &&
           (p->dry_multiplier == 0.0f || p->dry_penalty_last_n > 0);
}

int graft_sampler_create(const graft_sampling *params, int32_t n_vocab, graft_sampler **out)
{
    *out = NULL;
    if (params == NULL || n_vocab <= 0 || !params_valid(params))
        return GRAFT_EINVAL;
    graft_sampler *s = graft__calloc(1, sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    bool draws = params->temperature != 0.0f;
    if (draws) {
        s->cand = graft__malloc((size_t)top_k_of(params, n_vocab) * sizeof *s->cand);
        s->order = graft__malloc((size_t)n_vocab * sizeof *s->order);
        s->order_tmp = graft__malloc((size_t)n_vocab * sizeof *s->order_tmp);
    }
    bool penalty = params->repetition_penalty != 1.0f;
    if (penalty)
        s->seen = graft__calloc((size_t)n_vocab, 1);
    bool counts = params->presence_penalty != 0.0f || params->frequency_penalty != 0.0f;
    if (counts) {
        s->picked = graft__calloc((size_t)n_vocab, sizeof *s->picked);
        s->distinct = graft__malloc((size_t)n_vocab * sizeof *s->distinct);
    }
    bool typical = draws && params->typical_p < 1.0f && params->mirostat == 0;
    if (typical)
        s->typical = graft__malloc((size_t)top_k_of(params, n_vocab) * sizeof *s->typical);
    bool dry = params->dry_multiplier > 0.0f;
    if (dry)
        s->dry = graft__dry_create(params, n_vocab);
    if ((draws && (s->cand == NULL || s->order == NULL || s->order_tmp == NULL)) ||
        (penalty && s->seen == NULL) || (counts && (s->picked == NULL || s->distinct == NULL)) ||
        (typical && s->typical == NULL) || (dry && s->dry == NULL)) {
        graft_sampler_free(s);
        return GRAFT_ENOMEM;
    }
    s->params = *params;
    s->n_vocab = n_vocab;
    s->mu = 2.0 * params->mirostat_tau;
    graft__rng_seed(&s->rng, params->seed);
    *out = s;
    return GRAFT_OK;
}

void graft_sampler_free(graft_sampler *s)
{
    if (s == NULL)
        return;
    graft__free(s->cand);
    graft__free(s->order);
    graft__free(s->order_tmp);
    graft__free(s->seen);
    graft__free(s->picked);
    graft__free(s->distinct);
    graft__free(s->typical);
    graft__dry_free(s->dry);
    graft__free(s->bias);
    graft__free(s);
}

int graft_sampler_set_logit_bias(graft_sampler *s, const graft_logit_bias *bias, size_t n)
{
    if (s == NULL || (n > 0 && bias == NULL))
        return GRAFT_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (bias[i].token < 0 || bias[i].token >= s->n_vocab || isnan(bias[i].bias) ||
            bias[i].bias == INFINITY)
            return GRAFT_EINVAL;
    graft_logit_bias *copy = NULL;
    if (n > 0) {
        copy = graft__malloc(n * sizeof *copy);
        if (copy == NULL)
            return GRAFT_ENOMEM;
        memcpy(copy, bias, n * sizeof *copy);
    }
    graft__free(s->bias);
    s->bias = copy;
    s->n_bias = n;
    return GRAFT_OK;
}

/* Each distinct token of the history's last penalty_last_n (all of it: 0) is penalised once
 * (llama.cpp's rule): a positive logit is divided by the penalty, a negative one multiplied. */
static void apply_penalty(graft_sampler *s, float *logits, const int32_t *history,
                          size_t n_history)
{
    const float penalty = s->params.repetition_penalty;
    if (penalty == 1.0f)
        return;
    size_t window = (size_t)s->params.penalty_last_n;
    if (window > 0 && n_history > window) {
        history += n_history - window;
        n_history = window;
    }
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

/* A token picked c > 0 times loses presence + c * frequency (OpenAI's definition). */
static void apply_picked_penalties(graft_sampler *s, float *logits)
{
    for (int32_t i = 0; i < s->n_distinct; i++) {
        int32_t id = s->distinct[i];
        logits[id] -= s->params.presence_penalty + (float)s->picked[id] * s->params.frequency_penalty;
    }
}

/* A key whose ascending order is descending logit: -0 and +0 map alike, as they compare
 * equal. */
static uint32_t descending_key(float logit)
{
    float f = logit + 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t ascending = (u & 0x80000000u) ? ~u : u | 0x80000000u;
    return ~ascending;
}

enum { RADIX_BITS = 11, RADIX_PASSES = 3, RADIX_DIGITS = 1 << RADIX_BITS }; /* 3 x 11 bits */

static uint32_t digit(uint64_t entry, int pass)
{
    return (uint32_t)(entry >> (32 + RADIX_BITS * pass)) & (RADIX_DIGITS - 1);
}

/* A sort entry: the key of the token's logit, then its id. */
static uint64_t entry_of(const float *logits, int32_t id)
{
    return (uint64_t)descending_key(logits[id]) << 32 | (uint32_t)id;
}

/* s->cand[0 .. n) := the n best candidates in the order of descending logit, equal logits
 * lower id first (a total order, so the draw is defined by the logits alone). Entries are
 * key << 32 | id. Only the tokens whose key's top digit is among the first digits that hold
 * n tokens can be among the n best; those are gathered in id order (only they are written)
 * and sorted by an LSD radix sort, stable, so the whole step is O(n_vocab), not a comparison
 * sort's. */
static void rank_candidates(graft_sampler *s, const float *logits, int32_t n)
{
    uint64_t *from = s->order, *to = s->order_tmp;
    int32_t start[RADIX_DIGITS] = {0};
    for (int32_t i = 0; i < s->n_vocab; i++)
        start[digit(entry_of(logits, i), RADIX_PASSES - 1)]++;
    int32_t m = 0;
    uint32_t cut = 0;
    while (m < n)
        m += start[cut++];
    int32_t kept = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        uint64_t entry = entry_of(logits, i);
        if (digit(entry, RADIX_PASSES - 1) < cut)
            from[kept++] = entry;
    }
    for (int pass = 0; pass < RADIX_PASSES; pass++) {
        memset(start, 0, sizeof start);
        for (int32_t i = 0; i < m; i++)
            start[digit(from[i], pass)]++;
        int32_t at = 0;
        for (int d = 0; d < RADIX_DIGITS; d++) {
            int32_t count = start[d];
            start[d] = at;
            at += count;
        }
        for (int32_t i = 0; i < m; i++)
            to[start[digit(from[i], pass)]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t id = (int32_t)(uint32_t)from[i];
        s->cand[i] = (candidate){id, logits[id], 0.0f};
    }
}

static int by_rank(const void *a, const void *b)
{
    const typicality *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int by_typicality(const void *a, const void *b)
{
    const typicality *x = a, *y = b;
    if (x->shift != y->shift)
        return x->shift < y->shift ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Locally typical sampling on the n candidates (best first) whose probabilities sum to *sum:
 * the entropy H of their distribution (float64), each one's distance |-log q - H| from it,
 * and, nearest first (ties: the better rank), the candidates until their mass passes
 * typical_p are kept, in their order by logit; returns how many, and their sum in *sum. */
static int32_t apply_typical(graft_sampler *s, int32_t n, double *sum)
{
    if (s->params.typical_p >= 1.0f)
        return n;
    double entropy = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double q = s->cand[i].prob / *sum;
        entropy -= q > 0.0 ? q * log(q) : 0.0;
    }
    for (int32_t i = 0; i < n; i++) {
        double q = s->cand[i].prob / *sum;
        s->typical[i] = (typicality){q > 0.0 ? fabs(-log(q) - entropy) : INFINITY, i};
    }
    qsort(s->typical, (size_t)n, sizeof *s->typical, by_typicality);
    double mass = 0.0;
    int32_t kept = n;
    for (int32_t i = 0; i < n; i++) {
        mass += s->cand[s->typical[i].rank].prob / *sum;
        if (mass > s->params.typical_p) {
            kept = i + 1;
            break;
        }
    }
    qsort(s->typical, (size_t)kept, sizeof *s->typical, by_rank); /* back to logit order */
    *sum = 0.0;
    for (int32_t i = 0; i < kept; i++) {
        s->cand[i] = s->cand[s->typical[i].rank]; /* rank >= i: a move towards the front */
        *sum += s->cand[i].prob;
    }
    return kept;
}

/* The temperature of a draw among the n candidates (best first). With dynatemp_range d > 0
 * (llama.cpp's dynamic temperature): the entropy of their untempered distribution (float64,
 * over those of nonzero probability), divided by the log of their count, raised to
 * dynatemp_exponent, places it between max(0, T - d) and T + d; with one such candidate the
 * temperature does not matter and T is kept. A temperature of 0 is taken as the least
 * positive float, which leaves the best candidates alone. */
static double temperature_of(const graft_sampler *s, int32_t n)
{
    const graft_sampling *p = &s->params;
    if (p->dynatemp_range <= 0.0f)
        return p->temperature;
    double sum = 0.0;
    int32_t live = 0;
    for (int32_t i = 0; i < n; i++) {
        double q = exp((double)(s->cand[i].logit - s->cand[0].logit));
        sum += q;
        live += q > 0.0;
    }
    if (live <= 1)
        return p->temperature;
    double entropy = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double q = exp((double)(s->cand[i].logit - s->cand[0].logit)) / sum;
        entropy -= q > 0.0 ? q * log(q) : 0.0;
    }
    double low = fmax(0.0, (double)p->temperature - p->dynatemp_range);
    double high = (double)p->temperature + p->dynatemp_range;
    double t = low + (high - low) * pow(entropy / log((double)live), p->dynatemp_exponent);
    return t > 0.0 ? t : FLT_MIN;
}

/* Of the n best candidates (top-k's), keeps those the other filters allow; returns how many
 * remain (at least 1). A candidate of probability 0 (a logit of -infinity, as a JSON mask
 * sets, or one that underflows) is never kept, so that no rounding of the draw can pick it. */
static int32_t filter(graft_sampler *s, int32_t n)
{
    const graft_sampling *p = &s->params;
    const double temperature = temperature_of(s, n);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->cand[i].prob = (float)exp((double)(s->cand[i].logit - s->cand[0].logit) / temperature);
        sum += s->cand[i].prob;
    }
    n = apply_typical(s, n, &sum);
    double cumulative = 0.0;
    int32_t keep = 0;
    while (keep < n) {
        double prob = s->cand[keep].prob / sum;
        if (keep > 0 && (prob == 0.0 || prob < p->min_p * (s->cand[0].prob / sum)))
            break;
        cumulative += prob;
        keep++;
        if (cumulative >= p->top_p)
            break;
    }
    return keep;
}

/* top-n-sigma: the tokens whose logit is below the best by more than n standard deviations
 * of the finite logits (float64 mean and population deviation) get -infinity, so that no
 * later filter keeps them. */
static void apply_top_n_sigma(const graft_sampler *s, float *logits)
{
    const float n = s->params.top_n_sigma;
    if (n <= 0.0f)
        return;
    double sum = 0.0, max = -INFINITY;
    int32_t finite = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (isfinite(logits[i])) {
            sum += logits[i];
            max = logits[i] > max ? logits[i] : max;
            finite++;
        }
    if (finite == 0)
        return;
    double mean = sum / finite, squares = 0.0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (isfinite(logits[i]))
            squares += (logits[i] - mean) * (logits[i] - mean);
    double lowest = max - n * sqrt(squares / finite);
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (logits[i] < lowest)
            logits[i] = -INFINITY;
}

/* XTC on the n kept candidates (best first): with probability xtc_probability, when two or
 * more have a probability (within the kept mass) of xtc_threshold or more, all of those but
 * the least likely are dropped; returns the count left, from s->cand[0]. */
static int32_t apply_xtc(graft_sampler *s, int32_t n)
{
    const graft_sampling *p = &s->params;
    if (p->xtc_probability <= 0.0f || p->xtc_threshold > 0.5f)
        return n;
    if (graft__rng_unit(&s->rng) >= p->xtc_probability)
        return n;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += s->cand[i].prob;
    int32_t above = 0;
    while (above < n && s->cand[above].prob / total >= p->xtc_threshold)
        above++;
    if (above < 2)
        return n;
    memmove(s->cand, s->cand + above - 1, (size_t)(n - above + 1) * sizeof *s->cand);
    return n - above + 1;
}

/* A draw among s->cand[0, n) by their probabilities; returns the index drawn and the
 * probabilities' sum in *total. */
static int32_t draw(graft_sampler *s, int32_t n, double *total)
{
    *total = 0.0;
    for (int32_t i = 0; i < n; i++)
        *total += s->cand[i].prob;
    double r = graft__rng_unit(&s->rng) * *total;
    for (int32_t i = 0; i < n; i++) {
        r -= s->cand[i].prob;
        if (r < 0.0)
            return i;
    }
    return n - 1;
}

/* Mirostat v1's cut among the `live` candidates of probability above 0 (best first, summing
 * to sum): Zipf's exponent s estimated from the best 100 by least squares, and k from it so
 * that the surprise expected of a pick among the best k is mu. */
static int32_t mirostat_v1_keep(const graft_sampler *s, int32_t live, double sum)
{
    enum { M = 100 };
    if (live < 2)
        return 1;
    double tb = 0.0, tt = 0.0;
    for (int32_t i = 0; i < M - 1 && i < live - 1; i++) {
        double t = log((double)(i + 2) / (double)(i + 1));
        double b = log((s->cand[i].prob / sum) / (s->cand[i + 1].prob / sum));
        tb += t * b;
        tt += t * t;
    }
    double zipf = tb / tt, epsilon = zipf - 1.0;
    double k = pow(epsilon * pow(2.0, s->mu) / (1.0 - pow((double)s->n_vocab, -epsilon)),
                   1.0 / zipf);
    if (!isfinite(k) || k >= live)
        return live;
    return k >= 1.0 ? (int32_t)k : 1;
}

/* Mirostat: every token a candidate at the temperature, cut (v1: to the best k; v2: before
 * the first whose surprise -log2 q is above mu), a draw, and mu moved by eta times the
 * pick's surprise (among the kept) less tau. */
static int32_t pick_mirostat(graft_sampler *s, const float *logits)
{
    const graft_sampling *p = &s->params;
    rank_candidates(s, logits, s->n_vocab);
    double sum = 0.0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        s->cand[i].prob =
            (float)exp((double)(s->cand[i].logit - s->cand[0].logit) / p->temperature);
        sum += s->cand[i].prob;
    }
    int32_t live = 1;
    while (live < s->n_vocab && s->cand[live].prob > 0.0f)
        live++;
    int32_t keep = 1;
    if (p->mirostat == 1)
        keep = mirostat_v1_keep(s, live, sum);
    else
        while (keep < live && -log2(s->cand[keep].prob / sum) <= s->mu)
            keep++;
    double total;
    int32_t at = draw(s, keep, &total);
    s->mu -= p->mirostat_eta * (-log2(s->cand[at].prob / total) - p->mirostat_tau);
    return s->cand[at].id;
}

static int32_t pick(graft_sampler *s, float *logits)
{
    if (s->params.temperature == 0.0f)
        return graft__argmax(logits, s->n_vocab);
    if (s->params.mirostat != 0)
        return pick_mirostat(s, logits);
    apply_top_n_sigma(s, logits);
    int32_t n = top_k_of(&s->params, s->n_vocab);
    rank_candidates(s, logits, n);
    n = apply_xtc(s, filter(s, n));
    double total;
    return s->cand[draw(s, n, &total)].id;
}

int32_t graft_sampler_sample(graft_sampler *s, float *logits, const int32_t *history,
                             size_t n_history)
{
    for (size_t i = 0; i < s->n_bias; i++)
        logits[s->bias[i].token] += s->bias[i].bias;
    apply_penalty(s, logits, history, n_history);
    apply_picked_penalties(s, logits);
    if (s->dry != NULL)
        graft__dry_apply(s->dry, logits, history, n_history);
    int32_t token = pick(s, logits);
    if (s->picked != NULL && s->picked[token]++ == 0)
        s->distinct[s->n_distinct++] = token;
    return token;
}

int graft__sampler_set_dry_breakers(graft_sampler *s, const graft__vocab *v,
                                    const graft__token_table *t, const char *const *breakers,
                                    size_t n)
{
    if (s->dry == NULL) /* DRY off: the breakers are checked, not read */
        return graft__dry_breakers_valid(breakers, n) ? GRAFT_OK : GRAFT_EINVAL;
    return graft__dry_set_breakers(s->dry, v, t, breakers, n);
}

int graft_sampler_set_dry_breakers(graft_sampler *s, const graft_model *model,
                                   const char *const *breakers, size_t n)
{
    if (s == NULL || model == NULL)
        return GRAFT_EINVAL;
    if (s->dry == NULL || !graft__dry_breakers_valid(breakers, n))
        return graft__sampler_set_dry_breakers(s, model->vocab, NULL, breakers, n);
    graft__token_table *t;
    int rc = graft__token_table_create(model->vocab, s->n_vocab, &t);
    if (rc == GRAFT_OK)
        rc = graft__sampler_set_dry_breakers(s, model->vocab, t, breakers, n);
    graft__token_table_free(t);
    return rc;
}
