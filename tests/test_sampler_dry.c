/*
 * test_sampler_dry.c: DRY ("don't repeat yourself"), the sampler's penalty on a token that
 * would extend a repeat of the history (the dry_* fields of graft_sampling and
 * graft_sampler_set_dry_breakers), on the Qwen2 vocabulary.
 *
 * The oracle is written here from llama.cpp's DRY sampler, naively (quadratic, no
 * Z-algorithm):
 *   - breakers: a token whose decoded bytes hold a breaker is a single-token breaker; a token
 *     whose bytes end with a proper prefix of one is the head of a restart sequence whose
 *     tail is the tokenization (graft_tokenize, nothing added, no special parsing) of the
 *     rest of the breaker;
 *   - a step looks at the window of the history's last dry_penalty_last_n tokens; the
 *     restart sequence nearest its end (the longest tail at the nearest head) caps a repeat
 *     at the tokens after it (rep_limit);
 *   - the repeat ending at each position is found by comparing the window with its end
 *     token by token; the token after it, unless a single-token breaker, loses
 *     multiplier * base^(length - allowed_length), computed in double and subtracted in
 *     float, the exponent capped where base > 1.000001 at (int)(88.7228391 / ln base) so
 *     the penalty stays finite.
 * A greedy sampler (temperature 0) leaves in the logits what its pick was made from, so its
 * logits are compared with the oracle's over the whole vocabulary by memcmp, and its pick
 * with their argmax. Hand-computed cases check the oracle itself; tallies of what the oracle
 * did (tokens penalised, repeats cut by a breaker, tails matched, exponents capped) keep the
 * comparisons from being vacuous.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "graft.h"
#include "models.h"

#define VOCAB "vocab/ggml-vocab-qwen2.gguf"

/* A tail is the tokenization of at most GRAFT_DRY_MAX_BREAKER_BYTES - 1 bytes, and no token
 * of the vocabulary is empty, so it never has more tokens than this. */
enum { MAX_TAIL = GRAFT_DRY_MAX_BREAKER_BYTES, MAX_HISTORY = 480, MAX_ALPHABET = 64 };

static graft_model *model;
static int32_t n_vocab;
/* Per-step buffers of n_vocab entries: the base logits, the sampler's, the oracle's, and the
 * oracle's repeat length per token. */
static float *base, *got, *want;
static int32_t *repeat;
/* What random histories are mostly made of: pieces of text (ordinary words, breakers,
 * multi-token breakers, and a control token whose text, not bytes, holds a breaker) as
 * tokenized, whole or a token at a time (the alphabet, their distinct tokens). */
static const char *const pieces[] = {"Hello", " world", " the", " cat", " sat", "\n", ":", "*",
                                     "\"", ".\n\n", "### Instruction", " ### Instruction",
                                     "<|im_start|>", " <|im_start|>", "0123456789abcdefghij",
                                     "<|im_start|>"};
enum { N_PIECES = sizeof pieces / sizeof pieces[0], MAX_PIECE = 16 };
static int32_t piece_tokens[N_PIECES][MAX_PIECE];
static size_t piece_len[N_PIECES];
static int32_t alphabet[MAX_ALPHABET];
static size_t n_alphabet;

/* ---- the oracle --------------------------------------------------------------------------- */

typedef struct restart {
    int32_t head;
    int32_t n_tail;
    int32_t tail[MAX_TAIL];
} restart;

/* The processed breakers: single[t] when token t's bytes hold a breaker; seqs, the restart
 * sequences with a tail, in no order, and head[t] when t heads one of them (only to skip the
 * others quickly). A sequence found twice is kept twice: duplicates change neither the
 * longest match nor whether a token is a single-token breaker. */
typedef struct oracle_breakers {
    unsigned char *single, *head;
    restart *seqs;
    size_t n_seqs, cap;
} oracle_breakers;

/* What the oracle did, over a test: the comparisons count only if these are not zero. */
typedef struct oracle_tally {
    long penalised; /* tokens that lost logit */
    long spared;    /* tokens a repeat reached that are single-token breakers */
    long limited;   /* steps where a restart sequence cut a repeat short */
    long tailed;    /* steps whose rep_limit came from a restart sequence with a tail */
    long capped;    /* penalties whose exponent was capped */
} oracle_tally;

static oracle_tally tally;

/* The oracle penalised, spared a breaker, cut a repeat, matched a tail and capped an
 * exponent: the comparisons met every case. */
static void expect_every_case_met(void)
{
    assert_true(tally.penalised > 0);
    assert_true(tally.spared > 0);
    assert_true(tally.limited > 0);
    assert_true(tally.tailed > 0);
    assert_true(tally.capped > 0);
}

/* Whether needle[0, n) occurs in hay[0, len). */
static int holds(const char *hay, size_t len, const char *needle, size_t n)
{
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return 1;
    return 0;
}

static void add_restart(oracle_breakers *o, int32_t head, const int32_t *tail, size_t n_tail)
{
    assert_true(n_tail >= 1 && n_tail <= MAX_TAIL);
    if (o->n_seqs == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 256;
        o->seqs = realloc(o->seqs, o->cap * sizeof *o->seqs);
        assert_non_null(o->seqs);
    }
    o->head[head] = 1;
    restart *r = &o->seqs[o->n_seqs++];
    r->head = head;
    r->n_tail = (int32_t)n_tail;
    memcpy(r->tail, tail, n_tail * sizeof *tail);
}

static void oracle_breakers_build(oracle_breakers *o, const char *const *breakers, size_t n)
{
    o->single = calloc((size_t)n_vocab, 1);
    o->head = calloc((size_t)n_vocab, 1);
    assert_true(o->single && o->head);
    o->seqs = NULL;
    o->n_seqs = o->cap = 0;
    char bytes[GRAFT_TEST_TOKEN_BYTES];
    for (size_t b = 0; b < n; b++) {
        const char *brk = breakers[b];
        size_t len = strlen(brk);
        assert_true(len >= 1 && len <= GRAFT_DRY_MAX_BREAKER_BYTES);
        /* tails[k]: the tokenization of brk[k, len), the tail after a head ending with brk's
         * first k bytes */
        int32_t *tails[GRAFT_DRY_MAX_BREAKER_BYTES] = {0};
        size_t n_tails[GRAFT_DRY_MAX_BREAKER_BYTES] = {0};
        for (size_t k = 1; k < len; k++)
            assert_int_equal(graft_tokenize(model, brk + k, len - k, 0, 0, &tails[k],
                                            &n_tails[k]),
                             GRAFT_OK);
        for (int32_t t = 0; t < n_vocab; t++) {
            size_t nb = graft_test_token_bytes(model, t, bytes);
            if (holds(bytes, nb, brk, len)) {
                o->single[t] = 1;
                continue;
            }
            /* bytes[pos, nb) is a proper, non-empty prefix of the breaker */
            for (size_t pos = 0; pos < nb; pos++)
                if (nb - pos < len && memcmp(bytes + pos, brk, nb - pos) == 0)
                    add_restart(o, t, tails[nb - pos], n_tails[nb - pos]);
        }
        for (size_t k = 1; k < len; k++)
            graft_free(tails[k]);
    }
}

static void oracle_breakers_free(oracle_breakers *o)
{
    free(o->single);
    free(o->head);
    free(o->seqs);
}

/* The repeat limit of window w[0, n): the distance from the end to the nearest restart
 * sequence (head and matching tail) less its tail's length, the longest tail at that head;
 * n when there is none. */
static int64_t rep_limit_of(const oracle_breakers *br, const int32_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int32_t head = w[n - 1 - i]; /* i tokens from the end */
        int64_t longest = br->single[head] ? 0 : -1;
        for (size_t s = 0; br->head[head] && s < br->n_seqs; s++) {
            const restart *r = &br->seqs[s];
            if (r->head != head || (size_t)r->n_tail > i || r->n_tail <= longest)
                continue;
            /* the tail follows the head: tail[o] is the token i - 1 - o from the end */
            int match = 1;
            for (int32_t o = 0; o < r->n_tail; o++)
                match &= r->tail[o] == w[n - i + (size_t)o];
            if (match)
                longest = r->n_tail;
        }
        if (longest >= 0) {
            tally.tailed += longest > 0;
            return (int64_t)i - longest;
        }
    }
    return (int64_t)n;
}

/* DRY on logits[0, n_vocab) for a step with history[0, n_history), as specified above. */
static void oracle_dry(const oracle_breakers *br, const graft_sampling *p,
                       const int32_t *history, size_t n_history, float *logits)
{
    size_t n = n_history < (size_t)p->dry_penalty_last_n ? n_history
                                                          : (size_t)p->dry_penalty_last_n;
    const int32_t *w = history + (n_history - n);
    int64_t allowed = p->dry_allowed_length;
    if ((int64_t)n <= allowed)
        return;
    int64_t limit = rep_limit_of(br, w, n);
    if (limit < allowed)
        return;
    for (int32_t t = 0; t < n_vocab; t++)
        repeat[t] = -1;
    int cut = 0;
    for (size_t q = 0; q + 1 < n; q++) {
        /* the longest m with w[q - m + 1, q] == w[n - m, n): matching is prefix-closed, so
         * the count of equal tokens walking back from q and from the end */
        int64_t m = 0;
        while ((size_t)m < q + 1 && w[q - (size_t)m] == w[n - 1 - (size_t)m])
            m++;
        cut |= m > limit;
        int64_t len = m < limit ? m : limit;
        if (len >= allowed && len > repeat[w[q + 1]])
            repeat[w[q + 1]] = (int32_t)len;
    }
    tally.limited += cut;
    int capping = p->dry_base > 1.000001f;
    int max_exponent = capping ? (int)(88.7228391f / logf(p->dry_base)) : 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (repeat[t] < 0)
            continue;
        if (br->single[t]) {
            tally.spared++;
            continue;
        }
        int64_t e = repeat[t] - allowed;
        if (capping && e > max_exponent) {
            e = max_exponent;
            tally.capped++;
        }
        logits[t] -= (float)((double)p->dry_multiplier * pow((double)p->dry_base, (double)e));
        tally.penalised++;
    }
}

/* ---- fixtures --------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    char path[1024];
    if (graft_model_load_vocab(graft_test_model_path(path, sizeof path, VOCAB), &model, NULL) !=
        GRAFT_OK) {
        fprintf(stderr, "cannot load %s\n", path);
        return -1;
    }
    n_vocab = graft_test_vocab_size(model);
    base = malloc((size_t)n_vocab * sizeof *base);
    got = malloc((size_t)n_vocab * sizeof *got);
    want = malloc((size_t)n_vocab * sizeof *want);
    repeat = malloc((size_t)n_vocab * sizeof *repeat);
    if (!base || !got || !want || !repeat)
        return -1;
    for (size_t i = 0; i < N_PIECES; i++) {
        int32_t *t = NULL;
        size_t n = 0;
        /* the last piece parsed as the control token, the others as plain text */
        int rc = graft_tokenize(model, pieces[i], strlen(pieces[i]), 0, i == N_PIECES - 1, &t,
                                &n);
        if (rc != GRAFT_OK || n > MAX_PIECE) {
            graft_free(t);
            return -1;
        }
        memcpy(piece_tokens[i], t, n * sizeof *t);
        piece_len[i] = n;
        for (size_t j = 0; j < n; j++) {
            size_t k = 0;
            while (k < n_alphabet && alphabet[k] != t[j])
                k++;
            if (k == n_alphabet && n_alphabet < MAX_ALPHABET)
                alphabet[n_alphabet++] = t[j];
        }
        graft_free(t);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(base);
    free(got);
    free(want);
    free(repeat);
    graft_model_free(model);
    return 0;
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* The breaker sets the comparisons run with. */
static const char *const default_breakers[] = {"\n", ":", "\"", "*"};
static const char *const instruction_breakers[] = {"### Instruction"};
/* "###" heads two restart sequences that both match "### Instruction:": the longer counts */
static const char *const nested_breakers[] = {"### Instruction", "### Instruction:"};
static const char *const chatml_breakers[] = {"<|im_start|>", "\n"};
/* 40 bytes (the most a breaker may have), a word, and a piece ending many tokens */
static const char *const custom_breakers[] = {"0123456789abcdefghij0123456789abcdefghij",
                                              " world", "ing"};

typedef struct breaker_set {
    const char *label;
    const char *const *breakers;
    size_t n;
    int set; /* 0: graft_sampler_set_dry_breakers is not called (none until set) */
} breaker_set;

static const breaker_set breaker_sets[] = {
    {"default", default_breakers, 4, 1},
    {"none", default_breakers, 0, 1}, /* set, with n 0 */
    {"unset", NULL, 0, 0},
    {"instruction", instruction_breakers, 1, 1},
    {"nested", nested_breakers, 2, 1},
    {"chatml", chatml_breakers, 2, 1},
    {"custom", custom_breakers, 3, 1},
};
enum { N_SETS = sizeof breaker_sets / sizeof breaker_sets[0] };

static const breaker_set *find_set(const char *label)
{
    for (size_t i = 0; i < N_SETS; i++)
        if (strcmp(breaker_sets[i].label, label) == 0)
            return &breaker_sets[i];
    fail_msg("no breaker set %s", label);
    return NULL;
}

/* The DRY settings of one sampler. */
typedef struct dry_config {
    int32_t allowed;
    float base;
    float multiplier;
    int32_t last_n;
} dry_config;

/* Greedy sampling (temperature 0, every other stage at its default) with c's DRY. */
static graft_sampling dry_sampling(const dry_config *c)
{
    graft_sampling p = graft_sampling_default();
    p.temperature = 0.0f;
    p.dry_multiplier = c->multiplier;
    p.dry_base = c->base;
    p.dry_allowed_length = c->allowed;
    p.dry_penalty_last_n = c->last_n;
    return p;
}

static graft_sampler *dry_sampler(const graft_sampling *p, const breaker_set *set)
{
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(p, n_vocab, &s), GRAFT_OK);
    if (set->set)
        assert_int_equal(graft_sampler_set_dry_breakers(s, model, set->breakers, set->n),
                         GRAFT_OK);
    return s;
}

static void print_history(const int32_t *h, size_t n)
{
    fprintf(stderr, "history (%zu):", n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", h[i]);
    fprintf(stderr, "\n");
}

/* One greedy step on random base logits: the sampler's logits (after the logit biases bias,
 * which it was given, and DRY) equal the oracle's bit for bit, and its pick is their argmax. */
static void check_step(graft_sampler *s, const oracle_breakers *br, const graft_sampling *p,
                       const graft_logit_bias *bias, size_t n_bias, const int32_t *h, size_t n,
                       const char *label)
{
    for (int32_t t = 0; t < n_vocab; t++)
        base[t] = 4.0f * graft_test_rng_float();
    memcpy(got, base, (size_t)n_vocab * sizeof *got);
    memcpy(want, base, (size_t)n_vocab * sizeof *want);
    for (size_t i = 0; i < n_bias; i++)
        want[bias[i].token] += bias[i].bias;
    oracle_dry(br, p, h, n, want);
    int32_t pick = graft_sampler_sample(s, got, h, n);
    if (memcmp(got, want, (size_t)n_vocab * sizeof *got) != 0) {
        print_history(h, n);
        for (int32_t t = 0; t < n_vocab; t++)
            if (memcmp(&got[t], &want[t], sizeof *got) != 0)
                fail_msg("%s (allowed %d, base %g, multiplier %g, last_n %d): token %d: "
                         "base %.9g, expected %.9g, got %.9g",
                         label, p->dry_allowed_length, (double)p->dry_base,
                         (double)p->dry_multiplier, p->dry_penalty_last_n, t, (double)base[t],
                         (double)want[t], (double)got[t]);
    }
    assert_int_equal(pick, graft_test_argmax(want, n_vocab));
}

/* The tokens of text (plain, nothing added) appended to h[*n, MAX_HISTORY). */
static void append_text(int32_t *h, size_t *n, const char *text)
{
    int32_t *t = NULL;
    size_t k = 0;
    assert_int_equal(graft_tokenize(model, text, strlen(text), 0, 0, &t, &k), GRAFT_OK);
    assert_true(*n + k <= MAX_HISTORY);
    memcpy(h + *n, t, k * sizeof *t);
    *n += k;
    graft_free(t);
}

/* A random history of fewer than cap tokens: whole pieces, alphabet tokens, some tokens
 * anywhere in the vocabulary, and copies of earlier stretches, so repeats are long and
 * frequent and multi-token breakers whole now and then. */
static size_t random_history(int32_t *h, size_t cap)
{
    size_t n = graft_test_rng_u32() % cap;
    size_t i = 0;
    while (i < n) {
        uint32_t r = graft_test_rng_u32() % 10;
        if (r < 3 && i > 0) {
            size_t from = graft_test_rng_u32() % i, len = 1 + graft_test_rng_u32() % 16;
            for (size_t j = 0; j < len && i < n; j++, i++)
                h[i] = h[from + j]; /* from + j < i: already written */
        } else if (r < 5) {
            size_t k = graft_test_rng_u32() % N_PIECES;
            for (size_t j = 0; j < piece_len[k] && i < n; j++)
                h[i++] = piece_tokens[k][j];
        } else if (r < 9) {
            h[i++] = alphabet[graft_test_rng_u32() % n_alphabet];
        } else {
            h[i++] = (int32_t)(graft_test_rng_u32() % (uint32_t)n_vocab);
        }
    }
    return n;
}

/* ---- hand-computed cases ---------------------------------------------------------------- */

/* One greedy step on zero logits: the sampler's and the oracle's logits equal `expected`
 * (a token id and its logit per pair, every other token 0). Base 2 and multiplier 1 keep
 * the penalties exact. */
static void check_hand(const char *set_label, int32_t allowed, const int32_t *h, size_t n,
                       const int32_t *expected, size_t n_expected)
{
    const dry_config c = {allowed, 2.0f, 1.0f, 64};
    graft_sampling p = dry_sampling(&c);
    const breaker_set *set = find_set(set_label);
    graft_sampler *s = dry_sampler(&p, set);
    oracle_breakers br;
    oracle_breakers_build(&br, set->breakers, set->n);
    memset(got, 0, (size_t)n_vocab * sizeof *got);
    memset(want, 0, (size_t)n_vocab * sizeof *want);
    oracle_dry(&br, &p, h, n, want);
    graft_sampler_sample(s, got, h, n);
    for (int32_t t = 0; t < n_vocab; t++) {
        float e = 0.0f;
        for (size_t i = 0; i < n_expected; i++)
            if (expected[2 * i] == t)
                e = (float)expected[2 * i + 1];
        if (want[t] != e)
            fail_msg("oracle, %s, allowed %d: token %d: %g, not %g", set_label, allowed, t,
                     (double)want[t], (double)e);
        if (got[t] != e)
            fail_msg("sampler, %s, allowed %d: token %d: %g, not %g", set_label, allowed, t,
                     (double)got[t], (double)e);
    }
    oracle_breakers_free(&br);
    graft_sampler_free(s);
}

static void test_dry_hand_examples(void **state)
{
    (void)state;
    int32_t *t = NULL, *nl = NULL, *ins = NULL, *colon = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(model, "Hello world the cat", 19, 0, 0, &t, &n), GRAFT_OK);
    assert_int_equal(n, 4);
    const int32_t x = t[0], a = t[1], b = t[2], c = t[3];
    assert_int_equal(graft_tokenize(model, "\n", 1, 0, 0, &nl, &n), GRAFT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(graft_tokenize(model, "### Instruction", 15, 0, 0, &ins, &n), GRAFT_OK);
    assert_int_equal(n, 2); /* "###" and " Instruction" */
    assert_int_equal(graft_tokenize(model, ":", 1, 0, 0, &colon, &n), GRAFT_OK);
    assert_int_equal(n, 1);

    /* llama.cpp's example, a b c c b c y a b c (x for y): the repeats of the end "a b c" end
     * at c (3 tokens, before the second c), c (1, before b) and c (2, before x) */
    const int32_t w1[] = {a, b, c, c, b, c, x, a, b, c};
    const int32_t e1_allowed2[] = {c, -2, x, -1};         /* 2^(3-2), 2^(2-2) */
    const int32_t e1_allowed1[] = {c, -4, x, -2, b, -1}; /* 2^(3-1), 2^(2-1), 2^(1-1) */
    check_hand("none", 2, w1, 10, e1_allowed2, 2);
    check_hand("none", 1, w1, 10, e1_allowed1, 3);

    /* x a b \n a b x a b \n a b: the last "\n" limits repeats to 2 tokens; the repeat of 6
     * before x is cut to 2, and "\n" itself is never penalised */
    const int32_t w2[] = {x, a, b, nl[0], a, b, x, a, b, nl[0], a, b};
    const int32_t e2_nl[] = {x, -1};
    const int32_t e2_none[] = {x, -16, nl[0], -1}; /* 2^(6-2), 2^(2-2) */
    check_hand("chatml", 2, w2, 12, e2_nl, 1);
    check_hand("none", 2, w2, 12, e2_none, 2);

    /* x ### Instruction a b x ### Instruction a b: "###" is the head of a restart sequence
     * whose tail is " Instruction", so the repeat of 5 before x is cut to 2 */
    const int32_t w3[] = {x, ins[0], ins[1], a, b, x, ins[0], ins[1], a, b};
    const int32_t e3_ins[] = {x, -1};
    const int32_t e3_none[] = {x, -8}; /* 2^(5-2) */
    check_hand("instruction", 2, w3, 10, e3_ins, 1);
    check_hand("none", 2, w3, 10, e3_none, 1);

    /* x ### Instruction : a b x ### Instruction : a b: both " Instruction" and " Instruction"
     * ":" follow "###"; the longer tail limits repeats to 2 (the shorter would to 3) */
    const int32_t w4[] = {x, ins[0], ins[1], colon[0], a, b, x, ins[0], ins[1], colon[0], a, b};
    const int32_t e4_nested[] = {x, -1};
    const int32_t e4_none[] = {x, -16}; /* 2^(6-2) */
    check_hand("nested", 2, w4, 12, e4_nested, 1);
    check_hand("none", 2, w4, 12, e4_none, 1);

    graft_free(t);
    graft_free(nl);
    graft_free(ins);
    graft_free(colon);
}

/* ---- comparisons with the oracle ------------------------------------------------------- */

/* allowed lengths 0, 1, 2, 3, 4; bases 1, 1.75, 2.5 and 1e10 (whose exponent cap is 3);
 * windows smaller and larger than the histories */
static const dry_config random_configs[] = {
    {2, 1.75f, 0.8f, 64}, {0, 1.75f, 0.8f, MAX_HISTORY}, {1, 1.0f, 0.8f, 24},
    {4, 1.75f, 1.5f, MAX_HISTORY}, {2, 1e10f, 0.8f, 100}, {3, 2.5f, 0.8f, 5},
};

static void test_dry_random_histories_match_oracle(void **state)
{
    (void)state;
    enum { STEPS = 10 };
    memset(&tally, 0, sizeof tally);
    graft_test_rng_seed(20240611);
    int32_t h[MAX_HISTORY];
    /* the first and fifth configurations also carry logit biases on the alphabet, which DRY
     * comes after: (logit + bias) - penalty rounds otherwise than (logit - penalty) + bias */
    graft_logit_bias bias[MAX_ALPHABET];
    for (size_t i = 0; i < n_alphabet; i++)
        bias[i] = (graft_logit_bias){alphabet[i], 0.3f + 0.0371f * (float)i};
    for (size_t si = 0; si < N_SETS; si++) {
        const breaker_set *set = &breaker_sets[si];
        oracle_breakers br;
        oracle_breakers_build(&br, set->breakers, set->n);
        for (size_t ci = 0; ci < sizeof random_configs / sizeof random_configs[0]; ci++) {
            graft_sampling p = dry_sampling(&random_configs[ci]);
            graft_sampler *s = dry_sampler(&p, set);
            size_t n_bias = ci == 0 || ci == 4 ? n_alphabet : 0;
            if (n_bias)
                assert_int_equal(graft_sampler_set_logit_bias(s, bias, n_bias), GRAFT_OK);
            for (int step = 0; step < STEPS; step++) {
                size_t n = random_history(h, MAX_HISTORY);
                check_step(s, &br, &p, bias, n_bias, h, n, set->label);
            }
            graft_sampler_free(s);
        }
        oracle_breakers_free(&br);
    }
    expect_every_case_met();
}

/* A history made of text pieces, checked with one breaker set and configuration. */
typedef struct structured_case {
    const char *set;
    dry_config config;
    const char *text[4];
    int repeat; /* the last piece repeated this many times more */
} structured_case;

static const structured_case structured_cases[] = {
    /* a repeated phrase, no breaker in it */
    {"default", {2, 1.75f, 0.8f, 64}, {"The cat sat on the mat. The cat sat on the mat. The cat"},
     0},
    /* breakers inside: ':' after Q cuts the repeat */
    {"default", {2, 1.75f, 0.8f, 64},
     {"Q: the cat sat on the mat\nA: the cat sat on the mat\nQ: the cat sat on"}, 0},
    {"none", {2, 1.75f, 0.8f, 64},
     {"Q: the cat sat on the mat\nA: the cat sat on the mat\nQ: the cat sat on"}, 0},
    /* ending in a breaker (rep_limit 0): no change with allowed length 2; with 0, every
     * token after a position counts, at length 0 */
    {"default", {2, 1.75f, 0.8f, 64}, {"the cat sat\nthe cat sat\n"}, 0},
    {"default", {0, 1.75f, 0.8f, 64}, {"the cat sat\nthe cat sat\n"}, 0},
    /* multi-token breakers: "###" then " Instruction" (or " Instruction" ":" as well, the
     * longer tail counting); '<' then "|im_start|>" in 5 tokens */
    {"instruction", {2, 1.75f, 0.8f, 64},
     {"### Instruction: say the cat sat\n### Response: the cat sat\n### Instruction: say the"},
     0},
    {"nested", {2, 1.75f, 0.8f, 64},
     {"### Instruction: say the cat sat\n### Instruction: say the cat sat\n### Instruction: say"},
     0},
    {"chatml", {1, 1.75f, 0.8f, 64},
     {"<|im_start|>user\nsay the cat sat<|im_start|>assistant\nthe cat sat<|im_start|>user\n",
      "say the cat"},
     0},
    {"chatml", {2, 1.75f, 0.8f, 64},
     {"<|im_start|>user\nsay the cat sat<|im_start|>assistant\nthe cat sat<|im_start|>"}, 0},
    /* heads with bytes before the breaker's start: " ###", ".<" and " <|" */
    {"instruction", {2, 1.75f, 0.8f, 64},
     {"hi ### Instruction: say the cat sat\nhi ### Instruction: say the cat"}, 0},
    {"chatml", {2, 1.75f, 0.8f, 64},
     {"hi.<|im_start|>user the cat sat hi <|im_start|>user the cat sat hi.<|im_start|>user the"},
     0},
    /* the 40-byte breaker, and " world" as a single-token breaker */
    {"custom", {1, 1.75f, 0.8f, 200},
     {"x0123456789abcdefghij0123456789abcdefghij y 0123456789abcdefghij0123 y 0123456789ab",
      " hello world hello world hello"},
     0},
    /* windows smaller than the history */
    {"default", {2, 1.75f, 0.8f, 7}, {"The cat sat on the mat. The cat sat on the mat. The cat"},
     0},
    {"default", {2, 1.75f, 0.8f, 3}, {"The cat sat on the mat. The cat sat on the mat. The cat"},
     0},
    /* base 1: every penalty is the multiplier */
    {"default", {1, 1.0f, 0.8f, 64}, {"The cat sat on the mat. The cat sat on the mat. The cat"},
     0},
    /* exponent caps: 1e10 caps at 3, 1.75 at 158 (a repeat of about 400 tokens) */
    {"default", {2, 1e10f, 0.8f, 64}, {"The cat sat on the mat. The cat sat on the mat. The cat"},
     0},
    {"default", {2, 1.75f, 0.8f, MAX_HISTORY}, {" the cat sat"}, 140},
    {"default", {4, 1.75f, 0.8f, MAX_HISTORY}, {"go", " the cat sat"}, 140},
};

static void test_dry_structured_histories_match_oracle(void **state)
{
    (void)state;
    memset(&tally, 0, sizeof tally);
    graft_test_rng_seed(7);
    int32_t h[MAX_HISTORY];
    for (size_t i = 0; i < sizeof structured_cases / sizeof structured_cases[0]; i++) {
        const structured_case *c = &structured_cases[i];
        size_t n = 0, last = 0;
        for (size_t j = 0; j < 4 && c->text[j]; j++) {
            last = n;
            append_text(h, &n, c->text[j]);
        }
        size_t piece = n - last;
        for (int r = 0; r < c->repeat; r++) {
            assert_true(n + piece <= MAX_HISTORY);
            memcpy(h + n, h + last, piece * sizeof *h);
            n += piece;
        }
        const breaker_set *set = find_set(c->set);
        oracle_breakers br;
        oracle_breakers_build(&br, set->breakers, set->n);
        graft_sampling p = dry_sampling(&c->config);
        graft_sampler *s = dry_sampler(&p, set);
        char label[64];
        snprintf(label, sizeof label, "structured case %zu (%s)", i, c->set);
        /* every prefix of the history, so breakers and repeats are met at every distance */
        for (size_t k = 0; k <= n; k++)
            check_step(s, &br, &p, NULL, 0, h, k, label);
        graft_sampler_free(s);
        oracle_breakers_free(&br);
    }
    expect_every_case_met();
}

/* ---- DRY off, arguments, sampled runs --------------------------------------------------- */

static void test_dry_off_leaves_logits(void **state)
{
    (void)state;
    graft_test_rng_seed(99);
    const dry_config c = {2, 1.75f, 0.0f, 0}; /* multiplier 0: a window of 0 is accepted */
    graft_sampling p = dry_sampling(&c);
    graft_sampler *s = dry_sampler(&p, find_set("default"));
    int32_t h[MAX_HISTORY];
    for (int step = 0; step < 20; step++) {
        size_t n = random_history(h, MAX_HISTORY);
        for (int32_t t = 0; t < n_vocab; t++)
            base[t] = 4.0f * graft_test_rng_float();
        memcpy(got, base, (size_t)n_vocab * sizeof *got);
        int32_t pick = graft_sampler_sample(s, got, h, n);
        assert_memory_equal(got, base, (size_t)n_vocab * sizeof *got);
        assert_int_equal(pick, graft_test_argmax(base, n_vocab));
    }
    graft_sampler_free(s);
}

static void test_dry_argument_checks(void **state)
{
    (void)state;
    graft_sampling p = graft_sampling_default();
    p.dry_multiplier = 0.8f;
    p.dry_penalty_last_n = 0; /* a sampler alone needs a window with DRY on */
    graft_sampler *s = NULL;
    assert_int_equal(graft_sampler_create(&p, n_vocab, &s), GRAFT_EINVAL);
    assert_null(s);
    p.dry_penalty_last_n = 64;
    p.dry_base = 0.99f;
    assert_int_equal(graft_sampler_create(&p, n_vocab, &s), GRAFT_EINVAL);
    assert_null(s);
    p.dry_base = 1.0f;
    assert_int_equal(graft_sampler_create(&p, n_vocab, &s), GRAFT_OK);

    const char *many[GRAFT_DRY_MAX_BREAKERS + 1];
    for (size_t i = 0; i < GRAFT_DRY_MAX_BREAKERS + 1; i++)
        many[i] = "a";
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, many, GRAFT_DRY_MAX_BREAKERS + 1),
                     GRAFT_EINVAL);
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, many, GRAFT_DRY_MAX_BREAKERS),
                     GRAFT_OK);
    const char *empty[] = {"\n", ""};
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, empty, 2), GRAFT_EINVAL);
    char longest[GRAFT_DRY_MAX_BREAKER_BYTES + 2];
    memset(longest, 'x', GRAFT_DRY_MAX_BREAKER_BYTES + 1);
    longest[GRAFT_DRY_MAX_BREAKER_BYTES + 1] = '\0';
    const char *one[] = {longest};
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, one, 1), GRAFT_EINVAL);
    longest[GRAFT_DRY_MAX_BREAKER_BYTES] = '\0';
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, one, 1), GRAFT_OK);
    assert_int_equal(graft_sampler_set_dry_breakers(s, model, one, 0), GRAFT_OK);
    graft_sampler_free(s);
}

/* Sampled (temperature > 0) with DRY over a growing history: the same seed, the same picks. */
static void test_dry_sampled_is_deterministic(void **state)
{
    (void)state;
    enum { STEPS = 48 };
    const dry_config c = {2, 1.75f, 0.8f, 64};
    graft_sampling p = dry_sampling(&c);
    p.temperature = 1.0f;
    p.seed = 4321;
    const breaker_set *set = find_set("default");
    graft_sampler *a = dry_sampler(&p, set), *b = dry_sampler(&p, set);
    int32_t h[MAX_HISTORY];
    size_t n = 0;
    append_text(h, &n, "The cat sat on the mat. The cat sat on the mat. The cat");
    graft_test_rng_seed(5);
    /* the alphabet well above the rest, so the draws repeat themselves and DRY acts */
    for (int32_t t = 0; t < n_vocab; t++)
        base[t] = graft_test_rng_float() - 8.0f;
    for (size_t i = 0; i < n_alphabet; i++)
        base[alphabet[i]] = 2.0f + graft_test_rng_float();
    int distinct = 0;
    for (int step = 0; step < STEPS; step++) {
        memcpy(got, base, (size_t)n_vocab * sizeof *got);
        memcpy(want, base, (size_t)n_vocab * sizeof *want);
        int32_t x = graft_sampler_sample(a, got, h, n);
        assert_int_equal(x, graft_sampler_sample(b, want, h, n));
        int seen = 0;
        for (size_t i = 0; i < n; i++)
            seen |= h[i] == x;
        distinct += !seen;
        h[n++] = x;
    }
    assert_true(distinct > 1); /* a real draw, not a constant */
    graft_sampler_free(a);
    graft_sampler_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dry_hand_examples),
        cmocka_unit_test(test_dry_random_histories_match_oracle),
        cmocka_unit_test(test_dry_structured_histories_match_oracle),
        cmocka_unit_test(test_dry_off_leaves_logits),
        cmocka_unit_test(test_dry_argument_checks),
        cmocka_unit_test(test_dry_sampled_is_deterministic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
