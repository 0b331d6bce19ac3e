/*
 * test_sampler_mirostat.c: Mirostat v1 and v2 (graft_sampling.mirostat), the sampler alone:
 * its picks over many steps, that it takes the place of the other filters, greedy picks at
 * temperature 0, the argument checks and the seed's determinism.
 *
 * The oracle is written here from llama.cpp's Mirostat as graft defines it, not from the
 * sampler's code: mu starts at 2 * tau; every token is ranked by descending logit (equal
 * logits lower id first) and gets the float probability exp((logit - best) / T), summed in
 * float64 in rank order; v2 keeps the ranks before the first whose surprise -log2 q is above
 * mu (at least one), v1 estimates Zipf's exponent s_hat from the first 100 ranks and keeps
 * the top k = (eps 2^mu / (1 - n^-eps))^(1 / s_hat), eps = s_hat - 1; one draw of a
 * graft__rng seeded with the sampler's seed picks from the kept mass; then mu -= eta *
 * (surprise of the pick - tau). The oracle follows the definition's float and float64
 * choices exactly, so every pick of every step must be the oracle's: a wrong mu shows as
 * picks that part later.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"
#include "util/util.h"

enum {
    ZIPF_RANKS = 100,  /* m: v1 fits s_hat over the first m ranks (m - 1 ratios) */
    ROW_KINDS = 6,     /* the shapes of make_row */
    SMALL_VOCAB = 5000,
    LARGE_VOCAB = 32000,
    STEPS = 64,
};

/* ---- logit rows ------------------------------------------------------------------------- */

/* A standard normal float (Box-Muller; 1 - u keeps the log finite). */
static float normal(graft__rng *rng)
{
    double u = graft__rng_unit(rng), w = graft__rng_unit(rng);
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * w));
}

/* Logit row number `row`, of the shape row % ROW_KINDS, so that every branch of the oracle
 * decides some picks:
 *   0 normal floats of a spread from 0.25 (nearly flat) to 3.25 that varies with the row;
 *   1 multiples of 1/8 in [-2.5, 2.5]: many ties, at the top too; both zeros; some -inf;
 *   2 peaked: normal floats and one favourite 6 to 18 above them;
 *   3 flat: every logit 1.25 but an eighth of them -inf;
 *   4 sparse: one to four live tokens, the rest -inf (one live token: v1 keeps one);
 *   5 normal floats of spread 2 with a tenth of them -inf.
 * At least one logit is finite, so the best rank's probability is 1. */
static void make_row(float *logits, int32_t v, uint64_t row)
{
    graft__rng rng;
    graft__rng_seed(&rng, row ^ 0x5DEECE66DA3B1F07u); /* away from the samplers' seeds */
    int kind = (int)(row % ROW_KINDS);
    float spread = 0.25f * (float)(1 + (row / ROW_KINDS) % 13);
    for (int32_t i = 0; i < v; i++) {
        uint64_t r = graft__rng_next(&rng);
        switch (kind) {
        case 0:
            logits[i] = spread * normal(&rng);
            break;
        case 1:
            logits[i] = (float)((int)(r % 41) - 20) * 0.125f;
            if (logits[i] == 0.0f && (r >> 32) % 2)
                logits[i] = -0.0f;
            if ((r >> 40) % 50 == 0)
                logits[i] = -INFINITY;
            break;
        case 2:
            logits[i] = normal(&rng);
            break;
        case 3:
            logits[i] = r % 8 == 0 ? -INFINITY : 1.25f;
            break;
        case 4:
            logits[i] = -INFINITY;
            break;
        default:
            logits[i] = r % 10 == 0 ? -INFINITY : 2.0f * normal(&rng);
            break;
        }
    }
    uint64_t r = graft__rng_next(&rng);
    int32_t at = (int32_t)(r % (uint64_t)v);
    if (kind == 2)
        logits[at] = 6.0f + 4.0f * (float)((r >> 32) % 4);
    else if (kind == 3)
        logits[at] = 1.25f;
    else if (kind == 4)
        for (int live = 0; live <= (int)((r >> 32) % 4); live++)
            logits[(int32_t)(graft__rng_next(&rng) % (uint64_t)v)] = 2.0f * normal(&rng);
}

/* The greedy pick: the best logit, the lowest id among equals. */
static int32_t argmax(const float *logits, int32_t v)
{
    int32_t best = 0;
    for (int32_t i = 1; i < v; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* ---- the oracle ------------------------------------------------------------------------- */

typedef struct ranked_token {
    int32_t id;
    float logit;
} ranked_token;

static int by_logit_then_id(const void *a, const void *b)
{
    const ranked_token *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* What the tests count of the oracle's steps, to show they were not vacuous. */
typedef struct oracle_tally {
    int steps;
    int cut;     /* steps that kept fewer than the live candidates */
    int several; /* steps that kept more than one */
    int beyond;  /* picks other than the best ranked token */
    int moved;   /* steps that changed mu */
} oracle_tally;

/* The shadow of one sampler (temperature above 0): its own generator, seeded as the
 * sampler's, its mu, and buffers for the n_vocab tokens. */
typedef struct mirostat_oracle {
    int32_t version, v;
    double tau, eta, temperature, mu;
    graft__rng rng;
    ranked_token *ranked;
    float *prob; /* prob[i]: the probability of ranked[i] before normalisation */
} mirostat_oracle;

static void oracle_open(mirostat_oracle *o, const graft_sampling *p, int32_t v)
{
    *o = (mirostat_oracle){p->mirostat, v, p->mirostat_tau, p->mirostat_eta, p->temperature,
                           2.0 * p->mirostat_tau, {{0}}, malloc((size_t)v * sizeof(ranked_token)),
                           malloc((size_t)v * sizeof(float))};
    assert_non_null(o->ranked);
    assert_non_null(o->prob);
    graft__rng_seed(&o->rng, p->seed);
}

static void oracle_close(mirostat_oracle *o)
{
    free(o->ranked);
    free(o->prob);
}

/* v1's count of kept candidates, `live` (> 0) of them of probability above 0 (a prefix of the
 * ranks: the probabilities fall with the rank), `sum` the float64 sum of them all. */
static int32_t zipf_keep(const mirostat_oracle *o, double sum, int32_t live)
{
    if (live < 2)
        return 1;
    int32_t ratios = live - 1 < ZIPF_RANKS - 1 ? live - 1 : ZIPF_RANKS - 1;
    double tb = 0.0, tt = 0.0;
    for (int32_t i = 0; i < ratios; i++) {
        double t = log((double)(i + 2) / (double)(i + 1));
        double b = log((o->prob[i] / sum) / (o->prob[i + 1] / sum));
        tb += t * b;
        tt += t * t;
    }
    double s_hat = tb / tt, epsilon = s_hat - 1.0;
    double k = pow(epsilon * pow(2.0, o->mu) / (1.0 - pow((double)o->v, -epsilon)), 1.0 / s_hat);
    if (!isfinite(k) || k >= live)
        return live;
    return k < 1.0 ? 1 : (int32_t)floor(k);
}

/* The oracle's pick from `logits` (not modified); moves its mu and generator as the sampler
 * must, and adds to *t. */
static int32_t oracle_pick(mirostat_oracle *o, const float *logits, oracle_tally *t)
{
    for (int32_t i = 0; i < o->v; i++)
        o->ranked[i] = (ranked_token){i, logits[i]};
    qsort(o->ranked, (size_t)o->v, sizeof *o->ranked, by_logit_then_id);
    double sum = 0.0;
    int32_t live = 0;
    for (int32_t i = 0; i < o->v; i++) {
        o->prob[i] = (float)exp((double)(o->ranked[i].logit - o->ranked[0].logit) /
                                o->temperature);
        sum += o->prob[i];
        live += o->prob[i] > 0.0f;
    }
    int32_t keep = 1;
    if (o->version == 1)
        keep = zipf_keep(o, sum, live);
    else /* keep < live: a candidate of probability 0 is never kept */
        while (keep < live && -log2(o->prob[keep] / sum) <= o->mu)
            keep++;
    double kept_sum = 0.0;
    for (int32_t i = 0; i < keep; i++)
        kept_sum += o->prob[i];
    double r = graft__rng_unit(&o->rng) * kept_sum;
    int32_t pick = keep - 1;
    for (int32_t i = 0; i < keep; i++) {
        r -= o->prob[i];
        if (r < 0.0) {
            pick = i;
            break;
        }
    }
    double before = o->mu;
    o->mu = o->mu - o->eta * (-log2(o->prob[pick] / kept_sum) - o->tau);
    t->steps++;
    t->cut += keep < live;
    t->several += keep > 1;
    t->beyond += pick > 0;
    t->moved += o->mu != before;
    return o->ranked[pick].id;
}

/* ---- the checks ------------------------------------------------------------------------- */

static graft_sampling mirostat_params(int32_t version, float tau, float eta, float temperature,
                                      uint64_t seed)
{
    graft_sampling p = graft_sampling_default();
    p.mirostat = version;
    p.mirostat_tau = tau;
    p.mirostat_eta = eta;
    p.temperature = temperature;
    p.seed = seed;
    return p;
}

/* A sampler with p over vocabulary v picks from the rows first_row .. first_row + steps - 1
 * what the oracle picks, at every step (fails naming the case, the step and mu otherwise). */
static void check_picks(const graft_sampling *p, int32_t v, uint64_t first_row, int steps,
                        oracle_tally *t)
{
    float *row = malloc((size_t)v * sizeof(float)), *copy = malloc((size_t)v * sizeof(float));
    assert_non_null(row);
    assert_non_null(copy);
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(p, v, &s), GRAFT_OK);
    mirostat_oracle o;
    oracle_open(&o, p, v);
    for (int step = 0; step < steps; step++) {
        make_row(row, v, first_row + (uint64_t)step);
        memcpy(copy, row, (size_t)v * sizeof(float)); /* the sampler may change its logits */
        double mu = o.mu;
        int32_t want = oracle_pick(&o, row, t);
        int32_t got = graft_sampler_sample(s, copy, NULL, 0);
        if (got != want)
            fail_msg("mirostat %d tau %g eta %g temperature %g seed %llu n_vocab %d, step %d "
                     "(row %llu, kind %d, mu %.17g): picked %d, the oracle %d", p->mirostat,
                     (double)p->mirostat_tau, (double)p->mirostat_eta,
                     (double)p->temperature, (unsigned long long)p->seed, v, step,
                     (unsigned long long)(first_row + (uint64_t)step),
                     (int)((first_row + (uint64_t)step) % ROW_KINDS), mu, got, want);
    }
    oracle_close(&o);
    graft_sampler_free(s);
    free(row);
    free(copy);
}

/* Every tau, eta and temperature of the grid over SMALL_VOCAB, and each tau, eta and
 * temperature again over LARGE_VOCAB (12 of the combinations), STEPS picks each; the
 * truncation cut some steps and kept several candidates in others, draws reached past the
 * favourite and mu moved. */
static void check_grid(int32_t version)
{
    const float taus[] = {1.0f, 3.0f, 5.0f, 8.0f}, etas[] = {0.0f, 0.1f, 1.0f};
    const float temperatures[] = {0.5f, 1.0f, 1.5f};
    const uint64_t seeds[] = {0, 1, 42, 1234567, UINT64_MAX, 0x8000000000000000u, 977};
    enum { N_SEEDS = sizeof seeds / sizeof seeds[0] };
    oracle_tally t = {0};
    int cases = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t e = 0; e < 3; e++)
            for (size_t m = 0; m < 3; m++, cases++) {
                graft_sampling p = mirostat_params(version, taus[a], etas[e], temperatures[m],
                                                   seeds[cases % N_SEEDS]);
                check_picks(&p, SMALL_VOCAB, (uint64_t)cases * STEPS, STEPS, &t);
            }
    for (int c = 0; c < 12; c++, cases++) { /* c % 4, c % 3: all twelve (tau, eta) pairs */
        graft_sampling p = mirostat_params(version, taus[c % 4], etas[c % 3],
                                           temperatures[(c / 4) % 3], seeds[cases % N_SEEDS]);
        check_picks(&p, LARGE_VOCAB, (uint64_t)cases * STEPS, STEPS, &t);
    }
    print_message("mirostat %d: %d steps, %d cut, %d kept several, %d beyond the favourite, "
                  "%d moved mu\n", version, t.steps, t.cut, t.several, t.beyond, t.moved);
    assert_true(t.cut > t.steps / 4);
    assert_true(t.several > t.steps / 4);
    assert_true(t.beyond > t.steps / 8);
    assert_true(t.moved > t.steps / 2); /* eta 0 is a third of the steps */
}

static void test_mirostat_v2_matches_oracle(void **state)
{
    (void)state;
    check_grid(2);
}

static void test_mirostat_v1_matches_oracle(void **state)
{
    (void)state;
    check_grid(1);
}

/* With Mirostat, top-k 1, top-p, min-p, typical, top-n-sigma, the dynamic temperature and XTC
 * (which would draw from the generator) change nothing: the picks are still the oracle's and
 * go past the favourite. */
static void test_mirostat_ignores_other_filters(void **state)
{
    (void)state;
    for (int32_t version = 1; version <= 2; version++) {
        graft_sampling p = mirostat_params(version, 8.0f, 0.1f, 1.0f, 31 + (uint64_t)version);
        p.top_k = 1;
        p.top_p = 0.05f;
        p.min_p = 0.95f;
        p.typical_p = 0.1f;
        p.top_n_sigma = 0.25f;
        p.dynatemp_range = 0.75f;
        p.dynatemp_exponent = 2.0f;
        p.xtc_probability = 1.0f;
        p.xtc_threshold = 0.01f;
        oracle_tally t = {0};
        check_picks(&p, SMALL_VOCAB, 7000 + 100 * (uint64_t)version, STEPS, &t);
        assert_true(t.beyond > STEPS / 8);
    }
}

/* v2 keeps a candidate whose surprise equals mu: with tau 1 and eta 0 mu stays 2, and of four
 * equal live logits each has q = 1/4 exactly, a surprise of exactly 2 bits, so the picks
 * spread over all four; with a fifth (q = 1/5, 2.32 bits) only the lowest id is kept. */
static void test_mirostat_v2_keeps_surprise_equal_to_mu(void **state)
{
    (void)state;
    enum { V = 8 };
    const int32_t tied[5] = {1, 3, 5, 6, 7};
    for (int n_tied = 4; n_tied <= 5; n_tied++) {
        graft_sampling p = mirostat_params(2, 1.0f, 0.0f, 1.0f, 77);
        graft_sampler *s = NULL;
        assert_int_equal(graft_sampler_create(&p, V, &s), GRAFT_OK);
        int seen[V] = {0};
        for (int step = 0; step < STEPS; step++) {
            float logits[V];
            for (int32_t i = 0; i < V; i++)
                logits[i] = -INFINITY;
            for (int i = 0; i < n_tied; i++)
                logits[tied[i]] = 0.5f;
            seen[graft_sampler_sample(s, logits, NULL, 0)]++;
        }
        if (n_tied == 4)
            for (int i = 0; i < 4; i++)
                assert_true(seen[tied[i]] > 0);
        else
            assert_int_equal(seen[tied[0]], STEPS);
        graft_sampler_free(s);
    }
}

/* At temperature 0 Mirostat picks greedily: the best logit, the lowest id among equals (the
 * tied and flat rows hold many equal best logits). tau 8 (mu 16) would keep many candidates
 * were Mirostat to run. */
static void test_mirostat_greedy_at_temperature_zero(void **state)
{
    (void)state;
    float *row = malloc(SMALL_VOCAB * sizeof(float));
    assert_non_null(row);
    for (int32_t version = 1; version <= 2; version++) {
        graft_sampling p = mirostat_params(version, 8.0f, 0.1f, 0.0f, 5);
        graft_sampler *s = NULL;
        assert_int_equal(graft_sampler_create(&p, SMALL_VOCAB, &s), GRAFT_OK);
        for (uint64_t r = 9000; r < 9000 + STEPS; r++) {
            make_row(row, SMALL_VOCAB, r);
            int32_t want = argmax(row, SMALL_VOCAB);
            assert_int_equal(graft_sampler_sample(s, row, NULL, 0), want);
        }
        graft_sampler_free(s);
    }
    free(row);
}

/* GRAFT_EINVAL for a version outside 0..2 and a negative or non-finite tau or eta (nothing
 * to free); 0, 1 and 2 with tau and eta 0 are accepted. */
static void test_mirostat_argument_checks(void **state)
{
    (void)state;
    const struct {
        int32_t mirostat;
        float tau, eta;
    } bad[] = {{3, 5.0f, 0.1f},      {-1, 5.0f, 0.1f},     {2, -1.0f, 0.1f},
               {1, NAN, 0.1f},       {2, INFINITY, 0.1f},  {2, 5.0f, NAN},
               {1, 5.0f, -INFINITY}, {2, 5.0f, -0.5f},     {INT32_MAX, 5.0f, 0.1f}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        graft_sampling p = mirostat_params(bad[i].mirostat, bad[i].tau, bad[i].eta, 1.0f, 0);
        graft_sampler *s = NULL;
        if (graft_sampler_create(&p, SMALL_VOCAB, &s) != GRAFT_EINVAL)
            fail_msg("mirostat %d tau %g eta %g: not refused", bad[i].mirostat,
                     (double)bad[i].tau, (double)bad[i].eta);
        assert_null(s);
    }
    for (int32_t version = 0; version <= 2; version++) {
        graft_sampling p = mirostat_params(version, 0.0f, 0.0f, 1.0f, 0);
        graft_sampler *s = NULL;
        assert_int_equal(graft_sampler_create(&p, SMALL_VOCAB, &s), GRAFT_OK);
        graft_sampler_free(s);
    }
}

/* Two samplers of the same seed pick alike, step after step; one of another seed parts from
 * them at some step (the rows keep many candidates: tau 8). */
static void test_mirostat_seed_determinism(void **state)
{
    (void)state;
    float *row = malloc(SMALL_VOCAB * sizeof(float)), *copy = malloc(SMALL_VOCAB * sizeof(float));
    assert_non_null(row);
    assert_non_null(copy);
    for (int32_t version = 1; version <= 2; version++) {
        graft_sampling p = mirostat_params(version, 8.0f, 0.1f, 1.0f, 2024);
        graft_sampler *a = NULL, *b = NULL, *other = NULL;
        assert_int_equal(graft_sampler_create(&p, SMALL_VOCAB, &a), GRAFT_OK);
        assert_int_equal(graft_sampler_create(&p, SMALL_VOCAB, &b), GRAFT_OK);
        p.seed = 2025;
        assert_int_equal(graft_sampler_create(&p, SMALL_VOCAB, &other), GRAFT_OK);
        int differ = 0;
        for (uint64_t r = 11000; r < 11000 + STEPS; r++) {
            make_row(row, SMALL_VOCAB, r);
            memcpy(copy, row, sizeof(float) * SMALL_VOCAB);
            int32_t x = graft_sampler_sample(a, copy, NULL, 0);
            memcpy(copy, row, sizeof(float) * SMALL_VOCAB);
            assert_int_equal(graft_sampler_sample(b, copy, NULL, 0), x);
            differ += graft_sampler_sample(other, row, NULL, 0) != x;
        }
        assert_true(differ > 0);
        graft_sampler_free(a);
        graft_sampler_free(b);
        graft_sampler_free(other);
    }
    free(row);
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mirostat_v2_matches_oracle),
        cmocka_unit_test(test_mirostat_v1_matches_oracle),
        cmocka_unit_test(test_mirostat_ignores_other_filters),
        cmocka_unit_test(test_mirostat_v2_keeps_surprise_equal_to_mu),
        cmocka_unit_test(test_mirostat_greedy_at_temperature_zero),
        cmocka_unit_test(test_mirostat_argument_checks),
        cmocka_unit_test(test_mirostat_seed_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
