/*
 * test_engine_sampling.c: the sampling options a server passes through (logit biases,
 * presence and frequency penalties, the repetition penalty and its window, top-n-sigma and
 * XTC) and the log-probabilities the engine reports.
 *
 * The sampler is checked against oracles written here from OpenAI's definitions (a token
 * picked c > 0 times loses presence + c * frequency; a bias is added) and llama.cpp's (each
 * distinct token of the penalty's window divided or multiplied once). The engine's
 * log-probabilities are checked against a float64 log-softmax of the cold logits computed
 * here, a full sort for the top tokens, and for batch invariance by memcmp with the same
 * request run beside others; the prompt's log-probabilities (prompt_logprobs) the same way,
 * and against the log-probabilities its tokens were sampled with. Callbacks only record;
 * asserts run on the test's thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "graft.h"
#include "models.h"
#include "util/util.h"

enum { CONTEXT = 128, N_GEN = 12, TOP = 5, BOS = 1 };

static graft_model *stories;
static graft_context *cold;
static int32_t n_vocab;

static int setup(void **state)
{
    (void)state;
    if (graft_test_load_stories(&stories, &cold, CONTEXT) != 0)
        return -1;
    graft_model_info info;
    graft_model_get_info(stories, &info);
    n_vocab = info.n_vocab;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    graft_test_free_stories(stories, cold);
    return 0;
}

/* ---- the sampler alone ------------------------------------------------------------------ */

static graft_sampling greedy_sampling(void)
{
    graft_sampling p = graft_sampling_default();
    p.temperature = 0.0f;
    return p;
}

static void test_logit_bias_moves_greedy_pick(void **state)
{
    (void)state;
    enum { V = 16 };
    graft_sampling p = greedy_sampling();
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
    float logits[V] = {0};
    logits[3] = 1.0f;
    assert_int_equal(graft_sampler_sample(s, logits, NULL, 0), 3);
    graft_logit_bias bias[2] = {{7, 0.75f}, {7, 0.5f}}; /* listed twice: both are added */
    assert_int_equal(graft_sampler_set_logit_bias(s, bias, 2), GRAFT_OK);
    memset(logits, 0, sizeof logits);
    logits[3] = 1.0f;
    assert_int_equal(graft_sampler_sample(s, logits, NULL, 0), 7);
    assert_true(logits[7] == 1.25f);
    graft_logit_bias ban = {3, -100.0f};
    assert_int_equal(graft_sampler_set_logit_bias(s, &ban, 1), GRAFT_OK);
    memset(logits, 0, sizeof logits);
    logits[3] = 1.0f;
    assert_int_equal(graft_sampler_sample(s, logits, NULL, 0), 0); /* ties: lowest id */
    graft_logit_bias outside = {V, 1.0f}, not_a_number = {1, NAN}, up = {1, INFINITY};
    assert_int_equal(graft_sampler_set_logit_bias(s, &outside, 1), GRAFT_EINVAL);
    assert_int_equal(graft_sampler_set_logit_bias(s, &not_a_number, 1), GRAFT_EINVAL);
    assert_int_equal(graft_sampler_set_logit_bias(s, &up, 1), GRAFT_EINVAL);
    graft_sampler_free(s);
    /* -INFINITY: never sampled, greedy or drawn, even where every other logit is far below */
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
    graft_logit_bias never = {3, -INFINITY};
    assert_int_equal(graft_sampler_set_logit_bias(s, &never, 1), GRAFT_OK);
    for (int step = 0; step < 64; step++) {
        for (int i = 0; i < V; i++)
            logits[i] = i == 3 ? 50.0f : -50.0f + (float)i;
        assert_int_not_equal(graft_sampler_sample(s, logits, NULL, 0), 3);
    }
    graft_sampler_free(s);
}

/* The oracle: greedy over base logits minus OpenAI's penalties of what was picked. */
static int32_t oracle_pick(const float *base, int32_t v, const int32_t *counts, float presence,
                           float frequency)
{
    int32_t best = 0;
    double best_logit = -INFINITY;
    for (int32_t i = 0; i < v; i++) {
        double l = base[i] - (counts[i] > 0 ? presence : 0.0f) - (double)counts[i] * frequency;
        if (l > best_logit) {
            best_logit = l;
            best = i;
        }
    }
    return best;
}

static void test_presence_and_frequency_penalties(void **state)
{
    (void)state;
    enum { V = 8, STEPS = 40 };
    const float base[V] = {5.0f, 4.75f, 4.5f, 3.0f, 2.0f, 0.0f, -1.0f, 4.875f};
    /* dyadic penalties: exact in float and double alike, so ties are ties in both */
    const float cases[][2] = {{0.375f, 0.0f}, {0.0f, 0.1875f}, {0.25f, 0.125f}, {-0.5f, 0.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        graft_sampling p = greedy_sampling();
        p.presence_penalty = cases[c][0];
        p.frequency_penalty = cases[c][1];
        graft_sampler *s = NULL;
        assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
        int32_t counts[V] = {0};
        int distinct = 0;
        for (int step = 0; step < STEPS; step++) {
            float logits[V];
            memcpy(logits, base, sizeof logits);
            int32_t want = oracle_pick(base, V, counts, p.presence_penalty, p.frequency_penalty);
            int32_t got = graft_sampler_sample(s, logits, NULL, 0);
            if (got != want)
                fail_msg("case %zu step %d: picked %d, the oracle %d", c, step, got, want);
            distinct += counts[got]++ == 0;
        }
        /* a positive penalty spreads the picks; a negative one keeps repeating the best */
        if (p.presence_penalty < 0)
            assert_int_equal(distinct, 1);
        else
            assert_true(distinct > 1);
        graft_sampler_free(s);
    }
    graft_sampling bad = greedy_sampling();
    bad.frequency_penalty = INFINITY;
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&bad, V, &s), GRAFT_EINVAL);
    assert_null(s);
}

/* Sampled (temperature > 0) with penalties: the same seed gives the same picks. */
static void test_penalised_sampling_is_deterministic(void **state)
{
    (void)state;
    enum { V = 64, STEPS = 200 };
    graft_sampling p = graft_sampling_default();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.top_p = 1.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.seed = 1234;
    graft_sampler *a = NULL, *b = NULL;
    assert_int_equal(graft_sampler_create(&p, V, &a), GRAFT_OK);
    assert_int_equal(graft_sampler_create(&p, V, &b), GRAFT_OK);
    int distinct[V] = {0};
    for (int step = 0; step < STEPS; step++) {
        float la[V], lb[V];
        for (int i = 0; i < V; i++)
            la[i] = lb[i] = (float)((i * 37) % 11) * 0.25f;
        int32_t x = graft_sampler_sample(a, la, NULL, 0);
        assert_int_equal(x, graft_sampler_sample(b, lb, NULL, 0));
        distinct[x] = 1;
    }
    int n = 0;
    for (int i = 0; i < V; i++)
        n += distinct[i];
    assert_true(n > 8); /* a real draw, not a constant */
    graft_sampler_free(a);
    graft_sampler_free(b);
}

/* The oracle of a sampled pick, from the chain sampler.c documents:
 *   - with top_n_sigma n > 0, the tokens whose logit is below the best finite one by more
 *     than n population standard deviations of the finite logits are out;
 *   - every other token ranked by a full comparison sort (descending logit, equal logits
 *     lower id first), the top_k best kept (0: all);
 *   - with dynatemp_range d > 0, the temperature from the entropy of those candidates'
 *     untempered distribution (float64, over those of nonzero probability) divided by the
 *     log of their count, raised to dynatemp_exponent: between max(0, T - d) and T + d
 *     (T kept with one such candidate, 0 taken as the least positive float);
 *   - probabilities exp((logit - best) / temperature) as floats, summed in float64 in rank
 *     order;
 *   - with typical_p below 1, the entropy H of those (float64) and, ordered by |-log q - H|
 *     (ties: the better rank), the tokens until their mass passes typical_p, the rest out
 *     (the sum taken again over the kept, in rank order);
 *   - then kept in rank order until one falls below min_p times the best or the kept mass
 *     reaches top_p;
 *   - then XTC (xtc_probability above 0, xtc_threshold at most 0.5): a draw of the sampler's
 *     generator, and when it falls below xtc_probability and two or more kept tokens hold
 *     xtc_threshold of the kept mass or more, all of those but the last are out;
 *   - then one draw over the kept mass.
 * *acted (when not NULL) counts the picks XTC changed the set of. */
typedef struct oracle_entry {
    int32_t id;
    float logit;
} oracle_entry;

static int by_logit_then_id(const void *a, const void *b)
{
    const oracle_entry *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int typical_cuts;   /* the oracle's picks where typical sampling dropped tokens */
static int dynatemp_moved; /* ... and where the dynamic temperature was not the given one */

static int32_t oracle_sampled_pick(const float *logits, int32_t v, const graft_sampling *p,
                                   graft__rng *rng, oracle_entry *ranked, float *prob,
                                   int *acted)
{
    double cut = -INFINITY;
    if (p->top_n_sigma > 0.0f) {
        double best = -INFINITY, sum = 0.0, squares = 0.0;
        int32_t finite = 0;
        for (int32_t i = 0; i < v; i++)
            if (isfinite(logits[i])) {
                best = logits[i] > best ? logits[i] : best;
                sum += logits[i];
                finite++;
            }
        for (int32_t i = 0; i < v; i++)
            if (isfinite(logits[i]))
                squares += ((double)logits[i] - sum / finite) * ((double)logits[i] - sum / finite);
        cut = best - p->top_n_sigma * sqrt(squares / finite);
    }
    for (int32_t i = 0; i < v; i++)
        ranked[i] = (oracle_entry){i, logits[i] < cut ? -INFINITY : logits[i]};
    qsort(ranked, (size_t)v, sizeof *ranked, by_logit_then_id);
    int32_t n = p->top_k > 0 && p->top_k < v ? p->top_k : v;
    double temperature = p->temperature;
    if (p->dynatemp_range > 0.0f) {
        double z = 0.0, entropy = 0.0;
        int32_t live = 0;
        for (int32_t i = 0; i < n; i++) {
            z += exp((double)(ranked[i].logit - ranked[0].logit));
            live += exp((double)(ranked[i].logit - ranked[0].logit)) > 0.0;
        }
        for (int32_t i = 0; i < n; i++) {
            double q = exp((double)(ranked[i].logit - ranked[0].logit)) / z;
            if (q > 0.0)
                entropy -= q * log(q);
        }
        if (live > 1) {
            double low = p->temperature > p->dynatemp_range
                             ? (double)p->temperature - p->dynatemp_range
                             : 0.0;
            double high = (double)p->temperature + p->dynatemp_range;
            temperature = low + (high - low) * pow(entropy / log((double)live),
                                                   p->dynatemp_exponent);
            temperature = temperature > 0.0 ? temperature : FLT_MIN;
        }
        dynatemp_moved += temperature != p->temperature;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        prob[i] = (float)exp((double)(ranked[i].logit - ranked[0].logit) / temperature);
        sum += prob[i];
    }
    if (p->typical_p < 1.0f) {
        double entropy = 0.0;
        for (int32_t i = 0; i < n; i++)
            entropy -= prob[i] > 0.0f ? (prob[i] / sum) * log(prob[i] / sum) : 0.0;
        /* a selection by distance, ties to the better rank, one token at a time */
        bool *in = calloc(n > 0 ? (size_t)n : 1, 1);
        assert_non_null(in);
        double mass = 0.0;
        for (int32_t taken = 0; taken < n && !(mass > p->typical_p); taken++) {
            int32_t best = -1;
            double best_shift = INFINITY;
            for (int32_t i = 0; i < n; i++) {
                double shift = prob[i] > 0.0f ? fabs(-log(prob[i] / sum) - entropy) : INFINITY;
                if (!in[i] && (best < 0 || shift < best_shift)) {
                    best = i;
                    best_shift = shift;
                }
            }
            in[best] = true;
            mass += prob[best] / sum;
        }
        int32_t at = 0;
        sum = 0.0;
        for (int32_t i = 0; i < n; i++)
            if (in[i]) {
                ranked[at] = ranked[i];
                prob[at] = prob[i];
                sum += prob[at++];
            }
        typical_cuts += at < n;
        n = at;
        free(in);
    }
    double mass = 0.0;
    int32_t keep = 0;
    while (keep < n) {
        double q = prob[keep] / sum;
        if (keep > 0 && q < p->min_p * (prob[0] / sum))
            break;
        mass += q;
        keep++;
        if (mass >= p->top_p)
            break;
    }
    int32_t first = 0;
    if (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f &&
        graft__rng_unit(rng) < p->xtc_probability) {
        double kept = 0.0;
        for (int32_t i = 0; i < keep; i++)
            kept += prob[i];
        int32_t above = 0;
        for (int32_t i = 0; i < keep && prob[i] / kept >= p->xtc_threshold; i++)
            above++;
        if (above >= 2) {
            first = above - 1;
            if (acted != NULL)
                (*acted)++;
        }
    }
    double total = 0.0;
    for (int32_t i = first; i < keep; i++)
        total += prob[i];
    double r = graft__rng_unit(rng) * total;
    for (int32_t i = first; i < keep; i++) {
        r -= prob[i];
        if (r < 0.0)
            return ranked[i].id;
    }
    return ranked[keep - 1].id;
}

/* Logits with many ties (multiples of 1/8), both zeros, banned tokens (-inf) and one clear
 * favourite, so that every filter and the tie order decide some picks. */
static void tied_logits(float *logits, int32_t v, uint64_t seed)
{
    graft__rng rng;
    graft__rng_seed(&rng, seed);
    for (int32_t i = 0; i < v; i++) {
        uint64_t r = graft__rng_next(&rng);
        float x = (float)((int)(r % 41) - 20) * 0.125f;
        if (x == 0.0f && (r >> 32) % 2)
            x = -0.0f;
        if ((r >> 40) % 97 == 0)
            x = -INFINITY;
        logits[i] = x;
    }
    logits[(int32_t)(seed % (uint64_t)v)] = 3.0f;
}

/* The oracle's buffers for a vocabulary of v tokens. */
typedef struct oracle_run {
    int32_t v;
    float *logits, *prob;
    oracle_entry *ranked;
    int acted;             /* picks where XTC changed the kept set */
} oracle_run;

static oracle_run oracle_open(int32_t v)
{
    oracle_run o = {v, malloc((size_t)v * sizeof(float)), malloc((size_t)v * sizeof(float)),
                    malloc((size_t)v * sizeof(oracle_entry)), 0};
    assert_non_null(o.logits);
    assert_non_null(o.prob);
    assert_non_null(o.ranked);
    return o;
}

static void oracle_close(oracle_run *o)
{
    free(o->logits);
    free(o->prob);
    free(o->ranked);
}

/* A sampler with p picks from the logits rows make(logits, v, first_row + step), step in
 * [0, steps), what the oracle picks (fails naming the parameters otherwise); picks[step]
 * gets the pick. */
static void check_picks(oracle_run *o, const graft_sampling *p, int steps, uint64_t first_row,
                        void (*make)(float *, int32_t, uint64_t), int32_t *picks)
{
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(p, o->v, &s), GRAFT_OK);
    graft__rng rng;
    graft__rng_seed(&rng, p->seed);
    for (int step = 0; step < steps; step++) {
        make(o->logits, o->v, first_row + (uint64_t)step);
        int32_t want = oracle_sampled_pick(o->logits, o->v, p, &rng, o->ranked, o->prob,
                                           &o->acted);
        make(o->logits, o->v, first_row + (uint64_t)step);
        picks[step] = graft_sampler_sample(s, o->logits, NULL, 0);
        if (picks[step] != want)
            fail_msg("top_k %d top_p %g min_p %g temperature %g top_n_sigma %g typical_p %g "
                     "xtc %g/%g, step %d: picked %d, the oracle %d", p->top_k,
                     (double)p->top_p, (double)p->min_p, (double)p->temperature,
                     (double)p->top_n_sigma, (double)p->typical_p,
                     (double)p->xtc_probability, (double)p->xtc_threshold, step, picks[step],
                     want);
    }
    graft_sampler_free(s);
}

static void test_sampled_pick_matches_oracle(void **state)
{
    (void)state;
    enum { V = 20011, STEPS = 6 };
    const int32_t top_ks[] = {0, 1, 7, 40, V - 1, V, V + 5};
    const float top_ps[] = {1.0f, 0.9f, 0.3f}, min_ps[] = {0.0f, 0.05f};
    const float temperatures[] = {0.7f, 1.5f, 4.0f};
    oracle_run o = oracle_open(V);
    int cases = 0, picks_not_best = 0;
    for (size_t k = 0; k < sizeof top_ks / sizeof top_ks[0]; k++)
        for (size_t t = 0; t < sizeof top_ps / sizeof top_ps[0]; t++)
            for (size_t m = 0; m < sizeof min_ps / sizeof min_ps[0]; m++) {
                graft_sampling p = graft_sampling_default();
                p.top_k = top_ks[k];
                p.top_p = top_ps[t];
                p.min_p = min_ps[m];
                p.temperature = temperatures[cases % 3];
                p.seed = (uint64_t)cases + 11;
                int32_t picks[STEPS];
                uint64_t first = (uint64_t)(cases * STEPS);
                check_picks(&o, &p, STEPS, first, tied_logits, picks);
                for (int step = 0; step < STEPS; step++)
                    picks_not_best += picks[step] != (int32_t)((first + step) % (uint64_t)V);
                cases++;
            }
    /* the draws reached past the favourite, into the tied ranks */
    assert_true(picks_not_best > cases);
    oracle_close(&o);
}

/* tied_logits with three strong tokens (the favourite at 4, two more just below), so that
 * after top-k several hold a large share of the mass. */
static void strong_logits(float *logits, int32_t v, uint64_t seed)
{
    tied_logits(logits, v, seed);
    logits[(int32_t)(seed % (uint64_t)v)] = 4.0f;
    logits[(int32_t)((seed * 7 + 1) % (uint64_t)v)] = 3.875f;
    logits[(int32_t)((seed * 13 + 2) % (uint64_t)v)] = 3.75f;
}

/* top-n-sigma, XTC, typical sampling and the dynamic temperature, alone and together with
 * the other filters, pick what the oracle picks; each acts (one sigma keeps only the strong
 * tokens, so the favourite is picked more often; XTC drops strong tokens; typical drops
 * tokens; the dynamic temperature moves); out-of-range values are refused. */
static void test_llama_samplers_match_oracle(void **state)
{
    (void)state;
    enum { V = 4001, STEPS = 8 };
    const float sigmas[] = {0.0f, 0.5f, 1.0f, 2.5f};
    const float xtc[][2] = {{0.0f, 0.1f}, {1.0f, 0.05f}, {0.5f, 0.1f}, {1.0f, 0.6f}};
    const float typical[] = {1.0f, 0.9f, 0.2f};
    oracle_run o = oracle_open(V);
    int cases = 0, favourite[2] = {0, 0}; /* picks of the favourite: sigma 0 / 1 */
    for (size_t g = 0; g < sizeof sigmas / sizeof sigmas[0]; g++)
        for (size_t x = 0; x < sizeof xtc / sizeof xtc[0]; x++)
            for (int filters = 0; filters < 4; filters++) { /* 1..3: typical 1, 0.9, 0.2 */
                graft_sampling p = graft_sampling_default();
                p.top_k = filters ? 40 : 0; /* the oracle's typical selection is quadratic */
                p.top_p = filters ? 0.9f : 1.0f;
                p.min_p = filters ? 0.05f : 0.0f;
                p.temperature = filters ? 0.7f : 1.5f;
                p.top_n_sigma = sigmas[g];
                p.typical_p = filters ? typical[filters - 1] : 1.0f;
                p.xtc_probability = xtc[x][0];
                p.xtc_threshold = xtc[x][1];
                p.seed = (uint64_t)cases + 101;
                int32_t picks[STEPS];
                uint64_t first = (uint64_t)(cases * STEPS);
                check_picks(&o, &p, STEPS, first, strong_logits, picks);
                for (int step = 0; step < STEPS && x == 0 && !filters && (g == 0 || g == 2);
                     step++)
                    favourite[g == 2] += picks[step] == (int32_t)((first + step) % (uint64_t)V);
                cases++;
            }
    /* dynamic temperature, alone and with the other filters */
    const float ranges[] = {0.5f, 1.5f}, exponents[] = {1.0f, 2.5f, 0.0f};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (size_t e = 0; e < sizeof exponents / sizeof exponents[0]; e++)
            for (int filters = 0; filters < 2; filters++) {
                graft_sampling p = graft_sampling_default();
                p.top_k = filters ? 40 : 0;
                p.top_p = filters ? 0.9f : 1.0f;
                p.min_p = filters ? 0.05f : 0.0f;
                p.temperature = filters ? 0.7f : 1.0f;
                p.dynatemp_range = ranges[r];
                p.dynatemp_exponent = exponents[e];
                p.seed = (uint64_t)cases + 101;
                int32_t picks[STEPS];
                check_picks(&o, &p, STEPS, (uint64_t)(cases * STEPS), strong_logits, picks);
                cases++;
            }
    assert_true(dynatemp_moved > 0);
    assert_true(o.acted > 0);
    assert_true(typical_cuts > 0);
    assert_true(favourite[1] > favourite[0]);
    graft_sampling bad = graft_sampling_default();
    bad.xtc_probability = 1.5f;
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&bad, V, &s), GRAFT_EINVAL);
    bad = graft_sampling_default();
    bad.top_n_sigma = NAN;
    assert_int_equal(graft_sampler_create(&bad, V, &s), GRAFT_EINVAL);
    bad = graft_sampling_default();
    bad.xtc_threshold = -0.1f;
    assert_int_equal(graft_sampler_create(&bad, V, &s), GRAFT_EINVAL);
    bad = graft_sampling_default();
    bad.dynatemp_range = -1.0f;
    assert_int_equal(graft_sampler_create(&bad, V, &s), GRAFT_EINVAL);
    assert_null(s);
    oracle_close(&o);
}

/* A greedy sampler holds no vocabulary-sized buffer (a server creates one per request);
 * one that uses every filter fails cleanly wherever an allocation fails, and then draws. */
static void test_sampler_allocations(void **state)
{
    (void)state;
    enum { V = 4099 };
    long base = graft__alloc_live();
    graft_sampler *s = NULL;
    graft_sampling g = greedy_sampling();
    assert_int_equal(graft_sampler_create(&g, V, &s), GRAFT_OK);
    assert_int_equal(graft__alloc_live() - base, 1);
    graft_sampler_free(s);

    graft_sampling p = graft_sampling_default();
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.typical_p = 0.9f;
    p.top_k = 0;
    p.dry_multiplier = 0.8f;
    p.dry_penalty_last_n = 64;
    float *logits = malloc((size_t)V * sizeof *logits);
    assert_non_null(logits);
    const int32_t history[] = {5, 9, 5};
    for (long n = 0;; n++) {
        s = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft_sampler_create(&p, V, &s);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            assert_true(n >= 11); /* the sampler, its seven buffers and DRY's four */
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(s);
        assert_int_equal(graft__alloc_live(), base);
    }
    /* DRY's breakers: a failure leaves nothing allocated and the sampler as it was */
    const char *const breakers[] = {"\n", "ab"};
    long held = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = graft_sampler_set_dry_breakers(s, stories, breakers, 2);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            assert_true(n >= 3); /* a token table, a tokenization, the breakers */
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_int_equal(graft__alloc_live(), held);
    }
    for (int step = 0; step < 4; step++) {
        tied_logits(logits, V, (uint64_t)step);
        int32_t got = graft_sampler_sample(s, logits, history, 3);
        assert_true(got >= 0 && got < V);
    }
    graft_sampler_free(s);
    assert_int_equal(graft__alloc_live(), base);
    free(logits);
}

/* The oracle of the repetition penalty: each distinct token among the last `window` of the
 * history (all of it: 0) has its logit divided by the penalty when positive, multiplied
 * when not. */
static void oracle_penalise(float *logits, int32_t v, const int32_t *history, size_t n,
                            size_t window, float penalty)
{
    bool seen[64] = {false};
    assert_true(v <= 64);
    size_t from = window > 0 && n > window ? n - window : 0;
    for (size_t i = from; i < n; i++) {
        int32_t id = history[i];
        if (seen[id])
            continue;
        seen[id] = true;
        logits[id] = logits[id] > 0.0f ? logits[id] / penalty : logits[id] * penalty;
    }
}

/* The repetition penalty over the whole history, and over its last penalty_last_n tokens:
 * the logits it leaves equal the oracle's bit for bit, and the greedy pick follows them (a
 * token penalised in the whole history wins once it falls out of the window). */
static void test_repetition_penalty_and_its_window(void **state)
{
    (void)state;
    enum { V = 16 };
    const int32_t history[] = {3, 7, 3, 12, 0, 9, 7, 15, 2, 2, 11, 4};
    const size_t n = sizeof history / sizeof history[0];
    const int32_t windows[] = {0, 1, 3, 5, 12, 40};
    const float penalties[] = {1.5f, 0.75f};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
        for (size_t k = 0; k < 2; k++) {
            graft_sampling p = greedy_sampling();
            p.repetition_penalty = penalties[k];
            p.penalty_last_n = windows[w];
            graft_sampler *s = NULL;
            assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
            float logits[V], want[V];
            for (int32_t i = 0; i < V; i++)
                logits[i] = want[i] = (float)((i * 7) % 11) - 4.5f + (float)i / 64.0f;
            oracle_penalise(want, V, history, n, (size_t)windows[w], penalties[k]);
            int32_t got = graft_sampler_sample(s, logits, history, n);
            assert_memory_equal(logits, want, sizeof want);
            int32_t best = 0;
            for (int32_t i = 1; i < V; i++)
                best = want[i] > want[best] ? i : best;
            assert_int_equal(got, best);
            graft_sampler_free(s);
        }
    /* token 7 holds the highest logit: penalised anywhere in the history, it loses to token
     * 8; outside a window of 4 it wins */
    float logits[V] = {0};
    logits[7] = 2.0f;
    logits[8] = 1.5f;
    graft_sampling p = greedy_sampling();
    p.repetition_penalty = 2.0f;
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
    assert_int_equal(graft_sampler_sample(s, logits, history, n), 8);
    graft_sampler_free(s);
    logits[7] = 2.0f;
    logits[8] = 1.5f;
    p.penalty_last_n = 4;
    assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
    assert_int_equal(graft_sampler_sample(s, logits, history, n), 7);
    graft_sampler_free(s);
    p.penalty_last_n = -1;
    assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_EINVAL);
    assert_null(s);
}

/* ---- log-probabilities through the engine ---------------------------------------------- */

static graft_engine *new_engine(void)
{
    graft_engine_options o = graft_test_engine_options(8, CONTEXT);
    return graft_test_engine(stories, &o);
}

typedef graft_test_gen run;

static void finish(run *r)
{
    assert_int_equal(graft_generation_wait(r->gen), GRAFT_OK);
}

/* start, then finish. */
static void run_whole(graft_engine *e, run *r, const int32_t *prompt, size_t n,
                      const graft_generate_config *c)
{
    graft_test_gen_start(e, r, prompt, n, c);
    finish(r);
}

/* The prompt the log-probability tests generate after. */
static const int32_t prompt6[6] = {BOS, 403, 261, 347, 41, 280};

static graft_generate_config with_logprobs(int32_t top)
{
    graft_generate_config c = graft_test_greedy(N_GEN);
    c.logprobs = 1;
    c.top_logprobs = top;
    return c;
}

/* The float64 log-softmax of the cold logits after history, and its order (a full sort). */
typedef struct ref_entry {
    int32_t id;
    double logit;
} ref_entry;

static int by_logit(const void *a, const void *b)
{
    const ref_entry *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void expect_logprobs_match_cold(const int32_t *history, size_t n_history, int32_t token,
                                       const graft_token_logprob *got, size_t n_got)
{
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    ref_entry *sorted = malloc((size_t)n_vocab * sizeof *sorted);
    assert_int_equal(graft_context_seq_reset(cold, 0), GRAFT_OK);
    assert_int_equal(graft_context_eval(cold, history, n_history, logits), GRAFT_OK);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i]);
    for (int32_t i = 0; i < n_vocab; i++)
        sorted[i] = (ref_entry){i, (double)logits[i] - log(sum)};
    assert_int_equal(got[0].token, token);
    assert_float_equal(got[0].logprob, sorted[token].logit, 1e-4);
    qsort(sorted, (size_t)n_vocab, sizeof *sorted, by_logit);
    for (size_t k = 1; k < n_got; k++) {
        assert_int_equal(got[k].token, sorted[k - 1].id);
        assert_float_equal(got[k].logprob, sorted[k - 1].logit, 1e-4);
    }
    free(logits);
    free(sorted);
}

static void test_logprobs_match_cold_logits(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    const int32_t *prompt = prompt6;
    graft_generate_config c = with_logprobs(TOP);
    run r;
    run_whole(e, &r, prompt, 6, &c);
    size_t n_out = 0;
    const int32_t *out = graft_generation_tokens(r.gen, &n_out);
    assert_int_equal(n_out, N_GEN);
    int32_t history[6 + N_GEN];
    memcpy(history, prompt6, sizeof prompt6);
    for (size_t i = 0; i < n_out; i++) {
        const graft_token_logprob *lp = NULL;
        size_t n = 0;
        assert_int_equal(graft_generation_logprobs(r.gen, i, &lp, &n), GRAFT_OK);
        assert_int_equal(n, 1 + TOP);
        /* greedy: the sampled token is the most likely one */
        assert_int_equal(lp[1].token, out[i]);
        assert_true(lp[0].logprob == lp[1].logprob);
        expect_logprobs_match_cold(history, 6 + i, out[i], lp, n);
        history[6 + i] = out[i];
    }
    const graft_token_logprob *lp = NULL;
    size_t n = 0;
    assert_int_equal(graft_generation_logprobs(r.gen, n_out, &lp, &n), GRAFT_EINVAL);
    graft_test_gen_release(&r);

    /* without logprobs asked for there are none */
    graft_generate_config plain = graft_test_greedy(4);
    run_whole(e, &r, prompt, 6, &plain);
    assert_int_equal(graft_generation_logprobs(r.gen, 0, &lp, &n), GRAFT_EINVAL);
    graft_test_gen_release(&r);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* Without alternatives (top_logprobs 0, what OpenAI's "logprobs": true asks for) each token
 * still gets its own log-probability: the float64 one, and the same bits as with
 * alternatives; and so do a prompt's tokens. */
static void test_logprobs_without_alternatives(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    const int32_t *prompt = prompt6;
    graft_generate_config bare = with_logprobs(0), full = with_logprobs(TOP);
    bare.prompt_logprobs = full.prompt_logprobs = true;
    run a, b;
    run_whole(e, &a, prompt, 6, &bare);
    run_whole(e, &b, prompt, 6, &full);
    size_t n_out = 0;
    const int32_t *out = graft_generation_tokens(a.gen, &n_out);
    assert_int_equal(n_out, N_GEN);
    int32_t history[6 + N_GEN];
    memcpy(history, prompt6, sizeof prompt6);
    for (size_t i = 0; i < n_out; i++) {
        const graft_token_logprob *lp = NULL, *with = NULL;
        size_t n = 0, n_with = 0;
        assert_int_equal(graft_generation_logprobs(a.gen, i, &lp, &n), GRAFT_OK);
        assert_int_equal(graft_generation_logprobs(b.gen, i, &with, &n_with), GRAFT_OK);
        assert_int_equal(n, 1);
        assert_int_equal(lp[0].token, with[0].token);
        assert_memory_equal(&lp[0].logprob, &with[0].logprob, sizeof lp[0].logprob);
        expect_logprobs_match_cold(history, 6 + i, out[i], lp, n);
        history[6 + i] = out[i];
    }
    for (size_t i = 0; i + 1 < 6; i++) { /* given token i + 1 */
        const graft_token_logprob *lp = NULL, *with = NULL;
        size_t n = 0, n_with = 0;
        assert_int_equal(graft_generation_prompt_logprobs(a.gen, i, &lp, &n), GRAFT_OK);
        assert_int_equal(graft_generation_prompt_logprobs(b.gen, i, &with, &n_with), GRAFT_OK);
        assert_int_equal(n, 1);
        assert_memory_equal(lp, with, sizeof *lp);
        expect_logprobs_match_cold(prompt, i + 1, prompt[i + 1], lp, n);
    }
    graft_test_gen_release(&a);
    graft_test_gen_release(&b);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* A bias changes the pick, not the reported distribution (the model's logits). */
static void test_bias_changes_pick_not_logprobs(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    const int32_t prompt[4] = {BOS, 403, 261, 347};
    graft_generate_config c = with_logprobs(3);
    c.max_new_tokens = 1;
    run r;
    run_whole(e, &r, prompt, 4, &c);
    size_t n_out = 0;
    int32_t favourite = graft_generation_tokens(r.gen, &n_out)[0];
    graft_test_gen_release(&r);

    graft_logit_bias ban = {favourite, -100.0f};
    c.logit_bias = &ban;
    c.n_logit_bias = 1;
    run_whole(e, &r, prompt, 4, &c);
    int32_t second = graft_generation_tokens(r.gen, &n_out)[0];
    assert_int_not_equal(second, favourite);
    const graft_token_logprob *lp = NULL;
    size_t n = 0;
    assert_int_equal(graft_generation_logprobs(r.gen, 0, &lp, &n), GRAFT_OK);
    assert_int_equal(lp[0].token, second);
    assert_int_equal(lp[1].token, favourite); /* still the model's most likely */
    assert_int_equal(lp[2].token, second);     /* greedy took the next one */
    expect_logprobs_match_cold(prompt, 4, second, lp, n);
    graft_test_gen_release(&r);

    graft_logit_bias outside = {n_vocab, 1.0f};
    c.logit_bias = &outside;
    graft_generation *gen = NULL;
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
    assert_int_equal(graft_session_generate(s, prompt, 4, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.logit_bias = NULL;
    c.n_logit_bias = 0;
    c.top_logprobs = GRAFT_MAX_TOP_LOGPROBS + 1;
    assert_int_equal(graft_session_generate(s, prompt, 4, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.top_logprobs = 2;
    c.logprobs = 0;
    assert_int_equal(graft_session_generate(s, prompt, 4, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    assert_null(gen);
    graft_session_close(s);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* Log-probabilities of a request run alone equal, bit for bit, those of the same request
 * batched with three others of different lengths (sampled, penalised, biased). */
static void test_logprobs_batch_invariant(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = i == 0 ? BOS : 200 + (i * 7) % 250;
    graft_generate_config c = with_logprobs(TOP);
    c.sampling = graft_sampling_default();
    c.sampling.seed = 99;
    c.sampling.presence_penalty = 0.4f;
    c.sampling.frequency_penalty = 0.2f;
    graft_logit_bias bias = {300, 2.0f};
    c.logit_bias = &bias;
    c.n_logit_bias = 1;
    run alone;
    run_whole(e, &alone, prompt, 40, &c);

    run others[3], again;
    graft_generate_config oc = with_logprobs(2);
    for (int i = 0; i < 3; i++)
        graft_test_gen_start(e, &others[i], prompt + 1 + i, (size_t)(10 + 9 * i), &oc);
    run_whole(e, &again, prompt, 40, &c);
    for (int i = 0; i < 3; i++)
        finish(&others[i]);

    size_t na = 0, nb = 0;
    const int32_t *ta = graft_generation_tokens(alone.gen, &na);
    const int32_t *tb = graft_generation_tokens(again.gen, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na * sizeof *ta);
    for (size_t i = 0; i < na; i++) {
        const graft_token_logprob *la = NULL, *lb = NULL;
        size_t ka = 0, kb = 0;
        assert_int_equal(graft_generation_logprobs(alone.gen, i, &la, &ka), GRAFT_OK);
        assert_int_equal(graft_generation_logprobs(again.gen, i, &lb, &kb), GRAFT_OK);
        assert_int_equal(ka, kb);
        assert_memory_equal(la, lb, ka * sizeof *la);
    }
    graft_test_gen_release(&alone);
    graft_test_gen_release(&again);
    for (int i = 0; i < 3; i++)
        graft_test_gen_release(&others[i]);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* ---- DRY and Mirostat through the engine ------------------------------------------------ */

/* What a generation with sampling p samples after prompt[0, n): the engine's tokens equal
 * those of a sampler made alone with the same numbers (DRY's window: the engine's context;
 * llama.cpp's breakers, which a generation naming none gets) picking from the cold logits
 * after the whole history, prompt included; out gets the n_out tokens. */
static void expect_engine_samples_as_alone(graft_engine *e, const int32_t *prompt, size_t n,
                                           const graft_sampling *p, int32_t *out, int n_out)
{
    graft_generate_config c = graft_test_greedy(n_out);
    c.sampling = *p;
    run r;
    run_whole(e, &r, prompt, n, &c);
    size_t n_got = 0;
    const int32_t *got = graft_generation_tokens(r.gen, &n_got);
    assert_int_equal(n_got, n_out);
    memcpy(out, got, (size_t)n_out * sizeof *out);
    graft_test_gen_release(&r);

    graft_sampling alone = *p;
    alone.dry_penalty_last_n = CONTEXT;
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&alone, n_vocab, &s), GRAFT_OK);
    const char *const breakers[] = {"\n", ":", "\"", "*"};
    assert_int_equal(graft_sampler_set_dry_breakers(s, stories, breakers, 4), GRAFT_OK);
    int32_t history[CONTEXT];
    memcpy(history, prompt, n * sizeof *prompt);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    assert_non_null(logits);
    for (int i = 0; i < n_out; i++) {
        assert_int_equal(graft_context_seq_reset(cold, 0), GRAFT_OK);
        assert_int_equal(graft_context_eval(cold, history, n + (size_t)i, logits), GRAFT_OK);
        history[n + (size_t)i] = graft_sampler_sample(s, logits, history, n + (size_t)i);
        assert_int_equal(out[i], history[n + (size_t)i]);
    }
    free(logits);
    graft_sampler_free(s);
}

/* DRY sees the prompt as history and, greedy, changes what is picked after a repeated
 * sentence; with Mirostat 2 too, the engine samples as the sampler alone does. */
static void test_dry_and_mirostat_through_engine(void **state)
{
    (void)state;
    enum { N_OUT = 24 };
    const char *text = "Lily had a red ball. Lily had a red ball. Lily had a red ball. Lily had a";
    int32_t *prompt = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(stories, text, strlen(text), 1, 0, &prompt, &n), GRAFT_OK);
    assert_true(n + N_OUT <= CONTEXT);
    graft_engine *e = new_engine();
    graft_sampling p = greedy_sampling();
    int32_t plain[N_OUT], dry[N_OUT], mirostat[N_OUT];
    expect_engine_samples_as_alone(e, prompt, n, &p, plain, N_OUT);
    p.dry_multiplier = 0.8f;
    expect_engine_samples_as_alone(e, prompt, n, &p, dry, N_OUT);
    assert_memory_not_equal(plain, dry, sizeof plain);
    p.temperature = 1.0f;
    p.mirostat = 2;
    p.mirostat_tau = 3.0f;
    p.seed = 9;
    expect_engine_samples_as_alone(e, prompt, n, &p, mirostat, N_OUT);
    graft_test_engine_end(e);
    graft_free(prompt);
}

/* ---- the prompt's log-probabilities ------------------------------------------------------ */

static graft_generate_config prompt_logprobs_only(int32_t top)
{
    graft_generate_config c = graft_generate_default();
    c.prompt_logprobs = 1;
    c.top_logprobs = top;
    c.prefill_only = 1;
    return c;
}

/* What the first update saw of the prompt's log-probabilities (asserted afterwards). */
typedef struct first_look {
    bool looked;
    int status;
    graft_token_logprob entries[1 + TOP];
} first_look;

static void look_at_prompt(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    (void)tokens;
    (void)n;
    first_look *f = user;
    if (f->looked)
        return;
    const graft_token_logprob *lp = NULL;
    size_t k = 0;
    f->looked = true;
    f->status = graft_generation_prompt_logprobs(gen, 3, &lp, &k);
    if (f->status == GRAFT_OK && k == 1 + TOP)
        memcpy(f->entries, lp, k * sizeof *lp);
}

/* Every given token after the first: its log-probability and the top tokens after the
 * tokens before it, against a float64 log-softmax of the cold logits; prefill_only samples
 * nothing and commits the prompt. */
static void test_prompt_logprobs_match_cold_logits(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    enum { N = 20 };
    int32_t prompt[N];
    for (int i = 0; i < N; i++)
        prompt[i] = i == 0 ? BOS : 100 + (i * 37) % 400;
    graft_generate_config c = prompt_logprobs_only(TOP);
    run r;
    run_whole(e, &r, prompt, N, &c);
    assert_int_equal(graft_generation_finish_reason(r.gen), GRAFT_FINISH_LENGTH);
    size_t n_out = 99;
    graft_generation_tokens(r.gen, &n_out);
    assert_int_equal(n_out, 0);
    assert_int_equal(graft_session_position(r.session), N);
    for (size_t i = 0; i + 1 < N; i++) {
        const graft_token_logprob *lp = NULL;
        size_t n = 0;
        assert_int_equal(graft_generation_prompt_logprobs(r.gen, i, &lp, &n), GRAFT_OK);
        assert_int_equal(n, 1 + TOP);
        expect_logprobs_match_cold(prompt, i + 1, prompt[i + 1], lp, n);
    }
    const graft_token_logprob *lp = NULL;
    size_t n = 0;
    assert_int_equal(graft_generation_prompt_logprobs(r.gen, N - 1, &lp, &n), GRAFT_EINVAL);
    assert_null(lp);
    assert_int_equal(graft_generation_logprobs(r.gen, 0, &lp, &n), GRAFT_EINVAL);
    graft_token_logprob kept[1 + TOP];
    assert_int_equal(graft_generation_prompt_logprobs(r.gen, 3, &lp, &n), GRAFT_OK);
    memcpy(kept, lp, sizeof kept);
    graft_test_gen_release(&r);

    /* sampling after the prompt: the log-probabilities are there at the first update */
    graft_generate_config sampled = graft_test_greedy(3);
    sampled.prompt_logprobs = 1;
    sampled.top_logprobs = TOP;
    first_look look = {0};
    assert_int_equal(graft_session_open(e, &r.session, NULL), GRAFT_OK);
    assert_int_equal(graft_session_generate(r.session, prompt, N, &sampled, look_at_prompt, NULL,
                                            &look, &r.gen),
                     GRAFT_OK);
    finish(&r);
    assert_true(look.looked);
    assert_int_equal(look.status, GRAFT_OK);
    assert_memory_equal(look.entries, kept, sizeof kept);
    graft_generation_tokens(r.gen, &n_out);
    assert_int_equal(n_out, 3);
    assert_int_equal(graft_generation_logprobs(r.gen, 0, &lp, &n), GRAFT_EINVAL);
    graft_test_gen_release(&r);

    /* without prompt_logprobs there are none; a one-token prompt has none to give */
    graft_generate_config plain = graft_test_greedy(2);
    run_whole(e, &r, prompt, N, &plain);
    assert_int_equal(graft_generation_prompt_logprobs(r.gen, 0, &lp, &n), GRAFT_EINVAL);
    graft_test_gen_release(&r);
    run_whole(e, &r, prompt, 1, &c);
    assert_int_equal(graft_generation_finish_reason(r.gen), GRAFT_FINISH_LENGTH);
    assert_int_equal(graft_generation_prompt_logprobs(r.gen, 0, &lp, &n), GRAFT_EINVAL);
    graft_test_gen_release(&r);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* A sampled answer fed back as a prompt gets, bit for bit, the log-probabilities it was
 * sampled with: the prompt's rows and the sampling rows are the same logits. */
static void test_prompt_logprobs_equal_sampled_ones(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    const int32_t *prompt = prompt6;
    graft_generate_config c = with_logprobs(3);
    run r;
    run_whole(e, &r, prompt, 6, &c);
    size_t n_out = 0;
    const int32_t *out = graft_generation_tokens(r.gen, &n_out);
    assert_int_equal(n_out, N_GEN);
    int32_t all[6 + N_GEN];
    memcpy(all, prompt6, sizeof prompt6);
    memcpy(all + 6, out, n_out * sizeof *out);

    run fed;
    graft_generate_config pc = prompt_logprobs_only(3);
    graft_test_gen_start(e, &fed, all, 6 + N_GEN, &pc);
    finish(&fed);
    for (size_t i = 0; i < N_GEN; i++) {
        const graft_token_logprob *sampled = NULL, *given = NULL;
        size_t ns = 0, ng = 0;
        assert_int_equal(graft_generation_logprobs(r.gen, i, &sampled, &ns), GRAFT_OK);
        assert_int_equal(graft_generation_prompt_logprobs(fed.gen, 5 + i, &given, &ng), GRAFT_OK);
        assert_int_equal(ns, ng);
        assert_memory_equal(sampled, given, ns * sizeof *given);
    }
    graft_test_gen_release(&r);
    graft_test_gen_release(&fed);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* The same prompt's log-probabilities, bit for bit, in one chunk alone and in chunks of
 * five and of one (logits rows for three sessions, then one) beside generations that sample
 * and feed prompts of their own. */
static void test_prompt_logprobs_chunk_and_batch_invariant(void **state)
{
    (void)state;
    enum { N = 45 };
    int32_t prompt[N];
    for (int i = 0; i < N; i++)
        prompt[i] = i == 0 ? BOS : 50 + (i * 11) % 450;
    graft_generate_config c = prompt_logprobs_only(TOP);
    graft_engine *e = new_engine();
    run alone;
    run_whole(e, &alone, prompt, N, &c);

    const int32_t sessions[2] = {3, 1};
    for (int k = 0; k < 2; k++) {
        graft_engine_options o = graft_test_engine_options(sessions[k], CONTEXT);
        o.max_batch_tokens = 5;
        graft_engine *small = graft_test_engine(stories, &o);
        run others[2], again;
        graft_generate_config oc = with_logprobs(2);
        int32_t n_others = sessions[k] - 1;
        for (int32_t i = 0; i < n_others; i++)
            graft_test_gen_start(small, &others[i], prompt + 1 + i, (size_t)(3 + 17 * i), &oc);
        graft_test_gen_start(small, &again, prompt, N, &c);
        finish(&again);
        for (size_t i = 0; i + 1 < N; i++) {
            const graft_token_logprob *la = NULL, *lb = NULL;
            size_t ka = 0, kb = 0;
            assert_int_equal(graft_generation_prompt_logprobs(alone.gen, i, &la, &ka), GRAFT_OK);
            assert_int_equal(graft_generation_prompt_logprobs(again.gen, i, &lb, &kb), GRAFT_OK);
            assert_int_equal(ka, kb);
            assert_memory_equal(la, lb, ka * sizeof *la);
        }
        for (int32_t i = 0; i < n_others; i++) {
            finish(&others[i]);
            graft_test_gen_release(&others[i]);
        }
        graft_test_gen_release(&again);
        assert_int_equal(graft_engine_free(small), GRAFT_OK);
    }
    graft_test_gen_release(&alone);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

/* top_logprobs needs logprobs or prompt_logprobs. */
static void test_prompt_logprobs_refusals(void **state)
{
    (void)state;
    graft_engine *e = new_engine();
    const int32_t prompt[3] = {BOS, 403, 261};
    graft_session *s = NULL;
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
    graft_generate_config c = prompt_logprobs_only(GRAFT_MAX_TOP_LOGPROBS + 1);
    assert_int_equal(graft_session_generate(s, prompt, 3, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.top_logprobs = 2;
    c.prompt_logprobs = 0;
    assert_int_equal(graft_session_generate(s, prompt, 3, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    assert_null(gen);
    const graft_token_logprob *lp = NULL;
    size_t n = 0;
    assert_int_equal(graft_generation_prompt_logprobs(NULL, 0, &lp, &n), GRAFT_EINVAL);
    graft_session_close(s);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logit_bias_moves_greedy_pick),
        cmocka_unit_test(test_presence_and_frequency_penalties),
        cmocka_unit_test(test_repetition_penalty_and_its_window),
        cmocka_unit_test(test_dry_and_mirostat_through_engine),
        cmocka_unit_test(test_llama_samplers_match_oracle),
        cmocka_unit_test(test_penalised_sampling_is_deterministic),
        cmocka_unit_test(test_sampled_pick_matches_oracle),
        cmocka_unit_test(test_sampler_allocations),
        cmocka_unit_test(test_logprobs_match_cold_logits),
        cmocka_unit_test(test_logprobs_without_alternatives),
        cmocka_unit_test(test_bias_changes_pick_not_logprobs),
        cmocka_unit_test(test_logprobs_batch_invariant),
        cmocka_unit_test(test_prompt_logprobs_match_cold_logits),
        cmocka_unit_test(test_prompt_logprobs_equal_sampled_ones),
        cmocka_unit_test(test_prompt_logprobs_chunk_and_batch_invariant),
        cmocka_unit_test(test_prompt_logprobs_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
