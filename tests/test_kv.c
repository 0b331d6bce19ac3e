/*
 * test_kv.c: the paged, reference-counted KV pool (src/kv/) under real forward passes.
 *
 * Every claim is checked with logits compared by memcmp against a cold recomputation of the
 * same tokens in graft__kv_simple (same KV type, kernels and threads), so the pool is shown
 * to change nothing (DESIGN.md invariant 1) while it shares blocks (invariant 2), keeps or
 * refuses sliding windows (invariant 3, §4) and stays within its budget (invariant 4).
 * Models: stories260K (one layer group) and synth gemma3 tiny models, F32 and Q8_0 (window
 * 16, 6 layers: a 2-layer global group and a 4-layer sliding-window group), written to
 * $GRAFT_TEST_TMP.
 *
 * Cases: limits at create; pool logits == kv_simple logits; clone sharing, copy-on-write
 * and isolation; sliding-window retention; capacity refusals that leave sequences usable;
 * allocation-failure injection at every allocation point; a death test for reading a
 * dropped block; a seeded property test of random open / append / clone / truncate / close;
 * and the time of cloning a 4096-token sequence (printed, never failed on).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "kv/kv.h"
#include "models.h"

#define B GRAFT_KV_BLOCK_TOKENS

static struct graft_model *stories, *gemma_f32, *gemma_q8;

/* ---- fixtures -------------------------------------------------------------------------------- */

static int setup_models(void **state)
{
    (void)state;
    stories = graft_test_load_model(GRAFT_TEST_STORIES);
    gemma_f32 =
        graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_F32, 7, "kv-gemma3-tiny-F32.gguf");
    gemma_q8 =
        graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_Q8_0, 7, "kv-gemma3-tiny-Q8_0.gguf");
    return stories && gemma_f32 && gemma_q8 ? 0 : -1;
}

static int teardown_models(void **state)
{
    (void)state;
    graft_model_free(stories);
    graft_model_free(gemma_f32);
    graft_model_free(gemma_q8);
    return 0;
}

/* A model with the kernels, threads and KV type both stores use. */
typedef struct rig {
    const struct graft_model *m;
    graft__exec ex;
    uint32_t kv_type;
    int32_t n_vocab;
    size_t row_bytes; /* one position's logits */
} rig;

static rig rig_open(const struct graft_model *m, const char *kernels, int threads,
                    uint32_t kv_type)
{
    rig r = {m, {0}, kv_type, m->hp.n_vocab, (size_t)m->hp.n_vocab * sizeof(float)};
    assert_int_equal(graft__kernels_select(kernels, &r.ex.path, NULL), GRAFT_OK);
    r.ex.attend = graft__attend_for(r.ex.path);
    assert_int_equal(graft__pool_create(threads, &r.ex.pool), GRAFT_OK);
    return r;
}

static void rig_close(rig *r)
{
    graft__pool_free(r->ex.pool);
}

/* Bytes of one block of every layer (one block per group). */
static size_t blocks_bytes(const struct graft_model *m, uint32_t kv_type, int blocks)
{
    const graft__hparams *hp = &m->hp;
    size_t row = graft__type_row_bytes(kv_type, (uint64_t)hp->n_head_kv * hp->head_dim) +
                 graft__type_row_bytes(kv_type, (uint64_t)hp->n_head_kv * hp->head_dim_v);
    return (size_t)blocks * B * (size_t)hp->n_layer * row;
}

static graft__kv_pool *pool_new(const rig *r, int blocks, int32_t max_seqs, int32_t max_len)
{
    graft__kv_pool *p = NULL;
    char *err = NULL;
    int rc = graft__kv_pool_create(&r->m->hp, r->kv_type, blocks_bytes(r->m, r->kv_type, blocks),
                                   max_seqs, max_len, &p, &err);
    if (rc != GRAFT_OK)
        fail_msg("kv pool: %s", err ? err : graft_status_str(rc));
    return p;
}

static graft__kv_stats stats_of(const graft__kv_pool *p)
{
    graft__kv_stats st;
    graft__kv_pool_stats(p, &st);
    return st;
}

/* Every count of two stats is the same (field by field: padding is not compared). */
static void expect_same_stats(const graft__kv_stats *a, const graft__kv_stats *b)
{
    assert_int_equal(a->blocks_total, b->blocks_total);
    assert_int_equal(a->blocks_used, b->blocks_used);
    assert_int_equal(a->blocks_shared, b->blocks_shared);
    assert_int_equal(a->blocks_free, b->blocks_free);
    assert_int_equal(a->cow_copies, b->cow_copies);
    assert_int_equal(a->sequences, b->sequences);
    assert_int_equal(a->bytes_used, b->bytes_used);
    assert_int_equal(a->n_groups, b->n_groups);
    for (int32_t g = 0; g < a->n_groups; g++) {
        assert_int_equal(a->group[g].blocks_used, b->group[g].blocks_used);
        assert_int_equal(a->group[g].blocks_shared, b->group[g].blocks_shared);
    }
}

static uint32_t rng = 0x2545f491u;

static int32_t random_below(int32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (int32_t)(rng % (uint32_t)n);
}

static void random_tokens(const rig *r, int32_t *tokens, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        tokens[i] = random_below(r->n_vocab);
}

/* ---- forward passes -------------------------------------------------------------------------- */

/* Logits (n, n_vocab) of every position of tokens, computed cold in a fresh kv_simple. */
static float *cold(const rig *r, const int32_t *tokens, int32_t n)
{
    graft__kv_simple *s = NULL;
    assert_int_equal(graft__kv_simple_create(&r->m->hp, 1, n, r->kv_type, &s), GRAFT_OK);
    graft__kv kv = graft__kv_simple_iface(s);
    graft__batch_entry *e = malloc((size_t)n * sizeof *e);
    float *out = malloc((size_t)n * r->row_bytes);
    for (int32_t i = 0; i < n; i++)
        e[i] = (graft__batch_entry){0, i, tokens[i], true};
    assert_int_equal(graft__forward(r->m, &r->ex, &kv, e, n, out, NULL), GRAFT_OK);
    free(e);
    graft__kv_simple_free(s);
    return out;
}

/* Whether entry t is the last of its sequence in the batch. */
static bool last_of_seq(const graft__batch_entry *e, int32_t n, int32_t t)
{
    for (int32_t u = t + 1; u < n; u++)
        if (e[u].seq == e[t].seq)
            return false;
    return true;
}

/* One forward over the pool; on success commits each sequence of the batch once. */
static int pool_forward(const rig *r, graft__kv_pool *p, const graft__batch_entry *e, int32_t n,
                        float *logits)
{
    graft__kv kv = graft__kv_pool_iface(p);
    int rc = graft__forward(r->m, &r->ex, &kv, e, n, logits, NULL);
    for (int32_t t = 0; rc == GRAFT_OK && t < n; t++)
        if (last_of_seq(e, n, t))
            assert_int_equal(graft__kv_seq_commit(p, e[t].seq, e[t].pos + 1), GRAFT_OK);
    return rc;
}

/* Feeds tokens to seq after its committed positions; out (n, n_vocab) when not NULL. */
static int append(const rig *r, graft__kv_pool *p, int32_t seq, const int32_t *tokens,
                  int32_t n, float *out)
{
    const int32_t at = graft__kv_seq_length(p, seq);
    graft__batch_entry *e = malloc((size_t)n * sizeof *e);
    float *logits = malloc((size_t)n * r->row_bytes);
    for (int32_t i = 0; i < n; i++)
        e[i] = (graft__batch_entry){seq, at + i, tokens[i], true};
    int rc = pool_forward(r, p, e, n, logits);
    if (rc == GRAFT_OK && out != NULL)
        memcpy(out, logits, (size_t)n * r->row_bytes);
    free(logits);
    free(e);
    return rc;
}

/* A new sequence of p holding tokens[0, n), appended in one forward (both asserted). */
static int32_t seq_with(const rig *r, graft__kv_pool *p, const int32_t *tokens, int32_t n)
{
    int32_t seq;
    assert_int_equal(graft__kv_seq_open(p, &seq), GRAFT_OK);
    assert_int_equal(append(r, p, seq, tokens, n, NULL), GRAFT_OK);
    return seq;
}

/* The end of a test: the pool is consistent; it and the rig are freed. */
static void pool_end(rig *r, graft__kv_pool *p)
{
    assert_true(graft__kv_pool_check(p));
    graft__kv_pool_free(p);
    rig_close(r);
}

static void expect_rows(const rig *r, const float *want, const float *got, int32_t rows,
                        const char *what)
{
    for (int32_t i = 0; i < rows; i++)
        if (memcmp(want + (size_t)i * r->n_vocab, got + (size_t)i * r->n_vocab, r->row_bytes))
            fail_msg("%s: logits of row %d differ from the cold recomputation", what, i);
}

/* Appends `suffix` to seq, whose tokens so far are history[0, len), and checks every new
 * row against a cold recomputation of history + suffix. */
static void append_expect(const rig *r, graft__kv_pool *p, int32_t seq, const int32_t *history,
                          int32_t len, const int32_t *suffix, int32_t n, const char *what)
{
    assert_int_equal(graft__kv_seq_length(p, seq), len);
    int32_t *all = malloc((size_t)(len + n) * sizeof *all);
    memcpy(all, history, (size_t)len * sizeof *all);
    memcpy(all + len, suffix, (size_t)n * sizeof *all);
    float *got = malloc((size_t)n * r->row_bytes);
    assert_int_equal(append(r, p, seq, suffix, n, got), GRAFT_OK);
    float *want = cold(r, all, len + n);
    expect_rows(r, want + (size_t)len * r->n_vocab, got, n, what);
    free(want);
    free(got);
    free(all);
}

/* Checks that seq (tokens history[0, len)) continues correctly, on a throwaway clone. */
static void expect_continues(const rig *r, graft__kv_pool *p, int32_t seq, const int32_t *history,
                             int32_t len, const char *what)
{
    int32_t probe, token = 1 + (len % 7);
    assert_int_equal(graft__kv_seq_clone(p, seq, len, &probe), GRAFT_OK);
    append_expect(r, p, probe, history, len, &token, 1, what);
    graft__kv_seq_close(p, probe);
}

/* ---- limits at create ------------------------------------------------------------------------ */

static void expect_refused(const struct graft_model *m, uint32_t type, size_t budget,
                           int32_t max_seqs, int32_t max_len, int want, const char *words)
{
    static int sentinel;
    long live = graft__alloc_live();
    graft__kv_pool *p = (void *)&sentinel; /* create must reset it */
    char *err = NULL;
    assert_int_equal(graft__kv_pool_create(&m->hp, type, budget, max_seqs, max_len, &p, &err),
                     want);
    assert_null(p);
    assert_non_null(err);
    if (strstr(err, words) == NULL)
        fail_msg("message \"%s\" does not say \"%s\"", err, words);
    graft_free(err);
    assert_int_equal(graft__alloc_live(), live);
}

static void test_limits(void **state)
{
    (void)state;
    const size_t one = blocks_bytes(stories, GRAFT_TYPE_F32, 1);
    expect_refused(stories, GRAFT_TYPE_F32, one - 1, 4, 64, GRAFT_ECAPACITY,
                   "less than one block per layer group");
    expect_refused(stories, GRAFT_TYPE_F32, one, 4, 0, GRAFT_ERANGE, "max_len is 0");
    expect_refused(stories, GRAFT_TYPE_F32, one, 4, -5, GRAFT_ERANGE, "max_len is -5");
    expect_refused(stories, GRAFT_TYPE_F32, one, 0, 64, GRAFT_ERANGE, "max_seqs is 0");
    expect_refused(stories, GRAFT_TYPE_Q8_0, one, 4, 64, GRAFT_EINVAL, "neither F16");
    expect_refused(gemma_f32, GRAFT_TYPE_F16, blocks_bytes(gemma_f32, GRAFT_TYPE_F16, 1) - 1, 4,
                   64, GRAFT_ECAPACITY, "6 layers");
    assert_int_equal(graft__kv_pool_create(&stories->hp, GRAFT_TYPE_F32, one, 1, 1, NULL, NULL),
                     GRAFT_EINVAL);

    rig r = rig_open(gemma_f32, "scalar", 1, GRAFT_TYPE_F16);
    graft__kv_pool *p = pool_new(&r, 1, 2, 64);
    graft__kv_stats st = stats_of(p);
    assert_int_equal(st.n_groups, 2);
    assert_false(st.group[0].sliding);
    assert_int_equal(st.group[0].n_layers, 2);
    assert_true(st.group[1].sliding);
    assert_int_equal(st.group[1].n_layers, 4);
    assert_int_equal(st.group[1].window, 16);
    assert_int_equal(st.bytes_total, (int64_t)blocks_bytes(gemma_f32, GRAFT_TYPE_F16, 1));
    assert_int_equal(st.blocks_used, 0);

    int32_t a, b, c;
    assert_int_equal(graft__kv_seq_open(p, &a), GRAFT_OK);
    assert_int_equal(graft__kv_seq_open(p, &b), GRAFT_OK);
    assert_int_equal(graft__kv_seq_open(p, &c), GRAFT_ECAPACITY);
    assert_int_equal(graft__kv_seq_clone(p, a, 0, &c), GRAFT_ECAPACITY);
    graft__kv_seq_close(p, a);
    graft__kv_seq_close(p, a);
    assert_int_equal(graft__kv_seq_length(p, a), -1);
    assert_int_equal(graft__kv_seq_clone(p, b, 0, &c), GRAFT_OK);
    assert_int_equal(stats_of(p).sequences, 2);
    graft__kv_pool_free(p);
    rig_close(&r);
}

/* ---- the pool changes nothing ---------------------------------------------------------------- */

/* Two sequences fed in the same batches (chunks of uneven sizes, interleaved) to the pool
 * and to kv_simple: every row of logits must be the same bytes. */
static void compare_stores(const rig *r, int32_t len_a, int32_t len_b, const char *what)
{
    int32_t *tokens = malloc((size_t)(len_a + len_b) * sizeof *tokens);
    random_tokens(r, tokens, len_a + len_b);
    graft__kv_simple *simple = NULL;
    assert_int_equal(graft__kv_simple_create(&r->m->hp, 2, len_a, r->kv_type, &simple), GRAFT_OK);
    graft__kv_pool *p = pool_new(r, 16, 2, len_a);
    int32_t ids[2];
    assert_int_equal(graft__kv_seq_open(p, &ids[0]), GRAFT_OK);
    assert_int_equal(graft__kv_seq_open(p, &ids[1]), GRAFT_OK);
    graft__batch_entry *es = malloc((size_t)(len_a + len_b) * sizeof *es);
    graft__batch_entry *ep = malloc((size_t)(len_a + len_b) * sizeof *ep);
    float *ls = malloc((size_t)(len_a + len_b) * r->row_bytes);
    float *lp = malloc((size_t)(len_a + len_b) * r->row_bytes);
    int32_t done[2] = {0, 0}, lens[2] = {len_a, len_b}, offs[2] = {0, len_a};
    for (int step = 0; done[0] < len_a || done[1] < len_b; step++) {
        int32_t n = 0;
        for (int s = 0; s < 2; s++) {
            int32_t k = 1 + (step * 13 + s * 5) % 19;
            for (int32_t i = 0; i < k && done[s] < lens[s]; i++, done[s]++, n++) {
                es[n] = (graft__batch_entry){s, done[s], tokens[offs[s] + done[s]], true};
                ep[n] = es[n];
                ep[n].seq = ids[s];
            }
        }
        graft__kv kv = graft__kv_simple_iface(simple);
        assert_int_equal(graft__forward(r->m, &r->ex, &kv, es, n, ls, NULL), GRAFT_OK);
        assert_int_equal(pool_forward(r, p, ep, n, lp), GRAFT_OK);
        expect_rows(r, ls, lp, n, what);
    }
    assert_true(graft__kv_pool_check(p));
    graft__kv_pool_free(p);
    graft__kv_simple_free(simple);
    free(tokens);
    free(es);
    free(ep);
    free(ls);
    free(lp);
}

static void test_matches_simple(void **state)
{
    (void)state;
    static const struct {
        const char *kernels;
        int threads;
        uint32_t kv_type;
    } configs[] = {
        {"scalar", 1, GRAFT_TYPE_F32}, {NULL, 2, GRAFT_TYPE_F16},
        {"scalar", 2, GRAFT_TYPE_F16}, {NULL, 1, GRAFT_TYPE_F32},
    };
    for (size_t c = 0; c < 4; c++) {
        rig r = rig_open(stories, configs[c].kernels, configs[c].threads, configs[c].kv_type);
        compare_stores(&r, 80, 30, "stories260K");
        rig_close(&r);
    }
    for (size_t c = 0; c < 2; c++) {
        rig r = rig_open(gemma_f32, configs[c].kernels, configs[c].threads, configs[c].kv_type);
        compare_stores(&r, 52, 12, "gemma3 F32");
        rig_close(&r);
        r = rig_open(gemma_q8, configs[c + 2].kernels, configs[c + 2].threads,
                     configs[c + 2].kv_type);
        compare_stores(&r, 52, 12, "gemma3 Q8_0");
        rig_close(&r);
    }
}

/* ---- clone ----------------------------------------------------------------------------------- */

static void test_clone(void **state)
{
    (void)state;
    rig r = rig_open(stories, NULL, 1, GRAFT_TYPE_F32);
    graft__kv_pool *p = pool_new(&r, 32, 8, 128);
    int32_t hist[128];
    random_tokens(&r, hist, 128);
    int32_t a = seq_with(&r, p, hist, 70); /* blocks 0, 1 full, 2 partial */
    graft__kv_stats before = stats_of(p);
    assert_int_equal(before.blocks_used, 3);

    int32_t c;
    assert_int_equal(graft__kv_seq_clone(p, a, 70, &c), GRAFT_OK);
    graft__kv_stats st = stats_of(p);
    assert_int_equal(st.blocks_used, 3);
    assert_int_equal(st.blocks_shared, 3);
    assert_int_equal(st.cow_copies, 0);
    assert_int_equal(graft__kv_seq_length(p, c), 70);

    /* The clone's first write copies the shared partial block, and only it. */
    int32_t chist[128];
    memcpy(chist, hist, 70 * sizeof *chist);
    random_tokens(&r, chist + 70, 10);
    append_expect(&r, p, c, chist, 70, chist + 70, 5, "clone + suffix");
    st = stats_of(p);
    assert_int_equal(st.cow_copies, 1);
    assert_int_equal(st.blocks_used, 4);
    assert_int_equal(st.blocks_shared, 2);
    /* The source writes in place (its block is no longer shared) and is undisturbed. */
    append_expect(&r, p, a, hist, 70, hist + 70, 3, "source after clone wrote");
    assert_int_equal(stats_of(p).cow_copies, 1);
    expect_continues(&r, p, c, chist, 75, "clone after source wrote");

    /* A clone at a block boundary shares only full blocks: no copy, one fresh block. */
    int32_t d;
    assert_int_equal(graft__kv_seq_clone(p, a, 64, &d), GRAFT_OK);
    int32_t dhist[128];
    memcpy(dhist, hist, 64 * sizeof *dhist);
    random_tokens(&r, dhist + 64, 4);
    st = stats_of(p);
    append_expect(&r, p, d, dhist, 64, dhist + 64, 4, "clone at a block boundary");
    assert_int_equal(stats_of(p).cow_copies, st.cow_copies);
    assert_int_equal(stats_of(p).blocks_used, st.blocks_used + 1);

    /* Clone of a clone, and the empty clone. */
    int32_t cc, e;
    assert_int_equal(graft__kv_seq_clone(p, c, 72, &cc), GRAFT_OK);
    int32_t cchist[73];
    memcpy(cchist, chist, 72 * sizeof *cchist);
    cchist[72] = 11;
    append_expect(&r, p, cc, cchist, 72, cchist + 72, 1, "clone of a clone");
    expect_continues(&r, p, c, chist, 75, "clone after its clone wrote");
    st = stats_of(p);
    assert_int_equal(graft__kv_seq_clone(p, a, 0, &e), GRAFT_OK);
    assert_int_equal(stats_of(p).blocks_used, st.blocks_used);
    assert_int_equal(graft__kv_seq_length(p, e), 0);
    append_expect(&r, p, e, hist, 0, hist, 40, "clone at 0");

    /* Bad boundaries are refused and change nothing. */
    st = stats_of(p);
    int32_t x = -7;
    assert_int_equal(graft__kv_seq_clone(p, a, -1, &x), GRAFT_EBOUNDARY);
    assert_int_equal(graft__kv_seq_clone(p, a, 74, &x), GRAFT_EBOUNDARY);
    assert_int_equal(graft__kv_seq_clone(p, 99, 0, &x), GRAFT_EINVAL);
    assert_int_equal(x, -7);
    assert_false(graft__kv_seq_retains(p, a, 74));
    assert_true(graft__kv_seq_retains(p, a, 73));
    graft__kv_stats after = stats_of(p);
    expect_same_stats(&st, &after);
    expect_continues(&r, p, a, hist, 73, "source after refused clones");
    assert_true(graft__kv_pool_check(p));

    graft__kv_seq_close(p, a);
    graft__kv_seq_close(p, c);
    graft__kv_seq_close(p, d);
    graft__kv_seq_close(p, cc);
    graft__kv_seq_close(p, e);
    assert_int_equal(stats_of(p).blocks_used, 0);
    graft__kv_pool_free(p);
    rig_close(&r);
}

/* Sharers writing one shared block in the same batch: all but the last holder copy it, and
 * reserve counts exactly that (the pool has no block to spare). */
static void test_shared_writers(void **state)
{
    (void)state;
    rig r = rig_open(stories, "scalar", 2, GRAFT_TYPE_F16);
    graft__kv_pool *p = pool_new(&r, 3, 4, 64); /* one block used, exactly two to copy */
    int32_t hist[64], ids[3];
    random_tokens(&r, hist, 64);
    ids[0] = seq_with(&r, p, hist, 20);
    assert_int_equal(graft__kv_seq_clone(p, ids[0], 20, &ids[1]), GRAFT_OK);
    assert_int_equal(graft__kv_seq_clone(p, ids[0], 20, &ids[2]), GRAFT_OK);
    graft__batch_entry e[6];
    for (int i = 0; i < 6; i++)
        e[i] = (graft__batch_entry){ids[i % 3], 20 + i / 3, hist[20 + i], true};
    float *got = malloc(6 * r.row_bytes);
    assert_int_equal(pool_forward(&r, p, e, 6, got), GRAFT_OK);
    graft__kv_stats st = stats_of(p);
    assert_int_equal(st.cow_copies, 2);
    assert_int_equal(st.blocks_used, 3);
    assert_int_equal(st.blocks_shared, 0);
    for (int s = 0; s < 3; s++) {
        int32_t seq_hist[22];
        memcpy(seq_hist, hist, 20 * sizeof *seq_hist);
        seq_hist[20] = hist[20 + s];
        seq_hist[21] = hist[23 + s];
        float *want = cold(&r, seq_hist, 22);
        float rows[2 * 512];
        assert_true(r.n_vocab <= 512);
        memcpy(rows, got + (size_t)s * r.n_vocab, r.row_bytes);
        memcpy(rows + r.n_vocab, got + (size_t)(s + 3) * r.n_vocab, r.row_bytes);
        expect_rows(&r, want + 20 * (size_t)r.n_vocab, rows, 2, "sharers in one batch");
        free(want);
    }
    free(got);
    pool_end(&r, p);
}

/* A forward whose rows are only partly accepted: commit keeps what it is told and gives
 * the rest of the reservation back; the sequence goes on from there. */
static void test_partial_commit(void **state)
{
    (void)state;
    rig r = rig_open(stories, NULL, 1, GRAFT_TYPE_F32);
    graft__kv_pool *p = pool_new(&r, 8, 2, 128);
    int32_t hist[128];
    random_tokens(&r, hist, 128);
    int32_t a = seq_with(&r, p, hist, 30);
    graft__batch_entry e[40];
    for (int32_t i = 0; i < 40; i++)
        e[i] = (graft__batch_entry){a, 30 + i, hist[30 + i], false};
    graft__kv kv = graft__kv_pool_iface(p);
    assert_int_equal(graft__forward(r.m, &r.ex, &kv, e, 40, NULL, NULL), GRAFT_OK);
    assert_int_equal(stats_of(p).blocks_used, 3);
    assert_int_equal(graft__kv_seq_commit(p, a, 71), GRAFT_EINVAL);
    assert_int_equal(graft__kv_seq_commit(p, a, 29), GRAFT_EINVAL);
    assert_int_equal(graft__kv_seq_commit(p, a, 35), GRAFT_OK);
    assert_int_equal(stats_of(p).blocks_used, 2);
    assert_int_equal(graft__kv_seq_commit(p, a, 36), GRAFT_EINVAL); /* given back */
    int32_t other[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    append_expect(&r, p, a, hist, 35, other, 8, "after a partial commit");
    pool_end(&r, p);
}

/* ---- sliding window -------------------------------------------------------------------------- */

static void test_sliding_window(void **state)
{
    (void)state;
    rig r = rig_open(gemma_f32, NULL, 1, GRAFT_TYPE_F32);
    graft__kv_pool *p = pool_new(&r, 24, 6, 128);
    int32_t hist[128], a, snap;
    random_tokens(&r, hist, 128);
    a = seq_with(&r, p, hist, 40);
    assert_int_equal(graft__kv_seq_clone(p, a, 40, &snap), GRAFT_OK);
    for (int32_t pos = 40; pos < 100; pos++)
        assert_int_equal(append(&r, p, a, hist + pos, 1, NULL), GRAFT_OK);

    /* A keeps sliding-window entries 2 and 3 only (from 84 on); 0 and 1 live on in snap. A
     * clone at 79 keeps its window: its next query reads keys [64, 79]. */
    assert_true(graft__kv_seq_retains(p, a, 100));
    assert_true(graft__kv_seq_retains(p, a, 80));
    assert_true(graft__kv_seq_retains(p, a, 79));
    assert_false(graft__kv_seq_retains(p, a, 78));
    assert_false(graft__kv_seq_retains(p, a, 40));
    assert_true(graft__kv_seq_retains(p, a, 0));
    graft__kv_stats st = stats_of(p);
    int32_t x;
    assert_int_equal(graft__kv_seq_clone(p, a, 40, &x), GRAFT_ERETENTION);
    assert_int_equal(graft__kv_seq_clone(p, a, 78, &x), GRAFT_ERETENTION);
    assert_int_equal(graft__kv_seq_truncate(p, a, 70), GRAFT_ERETENTION);
    graft__kv_stats after = stats_of(p);
    expect_same_stats(&st, &after);
    assert_int_equal(graft__kv_seq_length(p, a), 100);
    /* The snapshot shares entry 0 of both groups; A's first write at 40 copied entry 1. */
    assert_int_equal(st.cow_copies, 2);
    assert_int_equal(st.group[0].blocks_used, 5);
    assert_int_equal(st.group[0].blocks_shared, 1);
    assert_int_equal(st.group[1].blocks_used, 4); /* A: entries 2, 3; snap: 0, 1 */
    assert_int_equal(st.group[1].blocks_shared, 0);

    /* The snapshot still serves the boundary A lost, and a clone of it too. */
    int32_t from_snap;
    assert_int_equal(graft__kv_seq_clone(p, snap, 40, &from_snap), GRAFT_OK);
    int32_t shist[128];
    memcpy(shist, hist, 40 * sizeof *shist);
    random_tokens(&r, shist + 40, 30);
    append_expect(&r, p, from_snap, shist, 40, shist + 40, 30, "clone of the snapshot");
    expect_continues(&r, p, a, hist, 100, "A after the snapshot's clone");
    expect_continues(&r, p, a, hist, 79, "A cloned at its earliest kept boundary");

    /* Truncating within the window works; A then continues like a cold recomputation. */
    assert_int_equal(graft__kv_seq_truncate(p, a, 90), GRAFT_OK);
    append_expect(&r, p, a, hist, 90, hist + 90, 3, "A truncated to 90");

    /* Dropped windows go back to the free list: without a snapshot, a sequence of 100
     * holds 4 global blocks but only 2 sliding-window blocks. */
    graft__kv_seq_close(p, snap);
    graft__kv_seq_close(p, from_snap);
    graft__kv_seq_close(p, a);
    assert_int_equal(stats_of(p).blocks_used, 0);
    int32_t b;
    assert_int_equal(graft__kv_seq_open(p, &b), GRAFT_OK);
    for (int32_t pos = 0; pos < 100; pos += 9)
        assert_int_equal(append(&r, p, b, hist + pos, pos + 9 > 100 ? 100 - pos : 9, NULL),
                         GRAFT_OK);
    st = stats_of(p);
    assert_int_equal(st.group[0].blocks_used, 4);
    assert_int_equal(st.group[1].blocks_used, 2);
    assert_int_equal(st.bytes_used,
                     4 * st.group[0].bytes_per_block + 2 * st.group[1].bytes_per_block);
    expect_continues(&r, p, b, hist, 100, "B after its windows dropped");
    pool_end(&r, p);
}

/* Reading a row of a dropped sliding-window block is a bug the pool catches. */
static void test_dropped_row_asserts(void **state)
{
    (void)state;
    rig r = rig_open(gemma_f32, NULL, 1, GRAFT_TYPE_F32);
    graft__kv_pool *p = pool_new(&r, 8, 2, 128);
    int32_t hist[70];
    random_tokens(&r, hist, 70);
    int32_t a = seq_with(&r, p, hist, 70);
    graft__kv kv = graft__kv_pool_iface(p);
    assert_non_null(kv.k_row(kv.self, 2, a, 0)); /* layer 2 is global: kept */
    assert_non_null(kv.k_row(kv.self, 0, a, 60));
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        kv.v_row(kv.self, 0, a, 10); /* layer 0 slides: block 0 dropped at length 48 */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    graft__kv_pool_free(p);
    rig_close(&r);
}

/* ---- capacity -------------------------------------------------------------------------------- */

static void test_capacity(void **state)
{
    (void)state;
    rig r = rig_open(stories, "scalar", 1, GRAFT_TYPE_F32);
    graft__kv_pool *p = pool_new(&r, 6, 4, 128);
    int32_t hist[128], a, b, d;
    random_tokens(&r, hist, 128);
    assert_int_equal(graft__kv_seq_open(p, &a), GRAFT_OK);
    assert_int_equal(graft__kv_seq_open(p, &b), GRAFT_OK);
    assert_int_equal(graft__kv_seq_open(p, &d), GRAFT_OK);
    assert_int_equal(append(&r, p, a, hist, 100, NULL), GRAFT_OK); /* 4 blocks */
    assert_int_equal(append(&r, p, b, hist, 32, NULL), GRAFT_OK);  /* 1 block */
    assert_int_equal(append(&r, p, d, hist, 20, NULL), GRAFT_OK);  /* 1 block: full */
    graft__kv_stats full = stats_of(p);
    assert_int_equal(full.blocks_free, 0);

    /* B needs a new block: refused, and nothing changes. */
    assert_int_equal(append(&r, p, b, hist + 32, 1, NULL), GRAFT_ECAPACITY);
    graft__kv_stats st = stats_of(p);
    expect_same_stats(&full, &st);
    assert_int_equal(graft__kv_seq_length(p, b), 32);
    /* A batch of A (fits in its partial block) and B (does not) is refused as a whole. */
    graft__batch_entry e[2] = {{a, 100, hist[100], true}, {b, 32, hist[32], true}};
    graft__kv kv = graft__kv_pool_iface(p);
    assert_int_equal(kv.reserve(kv.self, e, 2), GRAFT_ECAPACITY);
    assert_int_equal(graft__kv_seq_commit(p, a, 101), GRAFT_EINVAL); /* nothing reserved */
    st = stats_of(p);
    expect_same_stats(&full, &st);
    /* A alone fits; reserve, commit and truncate never allocate memory. */
    graft__alloc_fail_after(0, true);
    assert_int_equal(kv.reserve(kv.self, e, 1), GRAFT_OK);
    assert_int_equal(graft__kv_seq_truncate(p, a, 100), GRAFT_OK);
    assert_int_equal(kv.reserve(kv.self, e, 1), GRAFT_OK);
    assert_int_equal(graft__kv_seq_commit(p, a, 100), GRAFT_OK);
    graft__alloc_fail_after(-1, false);
    append_expect(&r, p, a, hist, 100, hist + 100, 2, "A in a full pool");

    /* Closing D frees a block: B goes on as if never refused. */
    graft__kv_seq_close(p, d);
    append_expect(&r, p, b, hist, 32, hist + 32, 5, "B after space was freed");
    /* Copy-on-write needs a block too: a clone of A and A itself are refused... */
    int32_t c;
    assert_int_equal(graft__kv_seq_clone(p, a, 102, &c), GRAFT_OK);
    assert_int_equal(append(&r, p, c, hist + 102, 1, NULL), GRAFT_ECAPACITY);
    assert_int_equal(append(&r, p, a, hist + 102, 1, NULL), GRAFT_ECAPACITY);
    /* ...until truncating B gives its second block back. */
    assert_int_equal(graft__kv_seq_truncate(p, b, 30), GRAFT_OK);
    assert_int_equal(stats_of(p).blocks_free, 1);
    expect_continues(&r, p, b, hist, 30, "B after truncation");
    int32_t chist[128];
    memcpy(chist, hist, 102 * sizeof *chist);
    random_tokens(&r, chist + 102, 3);
    append_expect(&r, p, c, chist, 102, chist + 102, 3, "clone after space was freed");
    append_expect(&r, p, a, hist, 102, hist + 102, 4, "A after its clone copied");

    /* Gaps, rewrites of committed positions, repeats and unknown sequences are invalid. */
    graft__batch_entry bad[][2] = {
        {{b, 31, 1, true}, {b, 32, 1, true}}, {{b, 29, 1, true}, {b, 30, 1, true}},
        {{b, 30, 1, true}, {b, 30, 1, true}}, {{b, 30, 1, true}, {3, 0, 1, true}},
    };
    float logits[2 * 512];
    st = stats_of(p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(kv.reserve(kv.self, bad[i], 2), GRAFT_EINVAL);
    assert_int_equal(graft__forward(r.m, &r.ex, &kv, bad[0], 2, logits, NULL), GRAFT_EINVAL);
    assert_int_equal(graft__kv_seq_commit(p, b, 31), GRAFT_EINVAL);
    graft__kv_stats after = stats_of(p);
    expect_same_stats(&st, &after);
    assert_int_equal(graft__kv_seq_length(p, b), 30);
    assert_true(graft__kv_pool_check(p));
    graft__kv_pool_free(p);

    /* Positions at or past max_len are refused. */
    p = pool_new(&r, 4, 1, 40);
    a = seq_with(&r, p, hist, 40);
    assert_int_equal(append(&r, p, a, hist, 1, NULL), GRAFT_ECAPACITY);
    assert_int_equal(graft__kv_seq_length(p, a), 40);
    graft__kv_pool_free(p);
    rig_close(&r);
}

/* ---- allocation failures --------------------------------------------------------------------- */

/* Each loop fails the n-th allocation of one operation for n = 0, 1, ... and ends only with a
 * run in which no injected failure was reached (graft__alloc_failures() == 0): a run that
 * succeeded although a failure was injected (absorbed by a fallback) is undone and the loop
 * goes on, so the allocations after an absorbed one are tried too. */
static void test_alloc_failures(void **state)
{
    (void)state;
    rig r = rig_open(gemma_q8, "scalar", 1, GRAFT_TYPE_F16);
    const size_t budget = blocks_bytes(gemma_q8, GRAFT_TYPE_F16, 8);
    graft__kv_pool *p = NULL;
    long live = graft__alloc_live();
    int failures = 0;
    for (long n = 0;; n++) {
        char *err = NULL;
        graft__alloc_fail_after(n, false);
        int rc = graft__kv_pool_create(&gemma_q8->hp, GRAFT_TYPE_F16, budget, 3, 96, &p, &err);
        long injected = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (injected == 0) {
            assert_int_equal(rc, GRAFT_OK);
            break;
        }
        if (rc == GRAFT_OK) { /* absorbed */
            assert_true(graft__kv_pool_check(p));
            graft__kv_pool_free(p);
            p = NULL;
            assert_int_equal(graft__alloc_live(), live);
            continue;
        }
        failures++;
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(p);
        graft_free(err);
        assert_int_equal(graft__alloc_live(), live);
    }
    assert_true(failures >= 4);

    int32_t hist[64], a, c = -1;
    /* a reaches 50, so it keeps the window of boundaries from 48 on (window 16). */
    random_tokens(&r, hist, 64);
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = graft__kv_seq_open(p, &a);
        long injected = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (injected == 0) {
            assert_int_equal(rc, GRAFT_OK);
            break;
        }
        if (rc == GRAFT_OK) /* absorbed */
            graft__kv_seq_close(p, a);
        else
            assert_int_equal(rc, GRAFT_ENOMEM);
        assert_int_equal(stats_of(p).sequences, 0);
    }
    assert_int_equal(append(&r, p, a, hist, 50, NULL), GRAFT_OK);
    graft__kv_stats before = stats_of(p);
    long live_pool = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = graft__kv_seq_clone(p, a, 48, &c);
        long injected = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (injected == 0) {
            assert_int_equal(rc, GRAFT_OK);
            break;
        }
        if (rc == GRAFT_OK) /* absorbed */
            graft__kv_seq_close(p, c);
        else
            assert_int_equal(rc, GRAFT_ENOMEM);
        graft__kv_stats st = stats_of(p);
        expect_same_stats(&before, &st);
        assert_int_equal(graft__alloc_live(), live_pool);
    }
    /* A forward that fails for memory after reserve: truncating drops the reservation (the
     * clone keeps the copies of its shared entry 1 that reserve made, in each group), and
     * retries hold no more than that. */
    const int32_t suffix[3] = {5, 6, 7};
    const int64_t cloned = stats_of(p).blocks_used;
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = append(&r, p, c, suffix, 3, NULL);
        long injected = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (injected == 0) {
            assert_int_equal(rc, GRAFT_OK);
            break;
        }
        if (rc != GRAFT_OK) /* else absorbed: undone by the truncation as a failure is */
            assert_int_equal(rc, GRAFT_ENOMEM);
        assert_int_equal(graft__kv_seq_truncate(p, c, 48), GRAFT_OK);
        assert_in_range(stats_of(p).blocks_used, cloned, cloned + 2);
        assert_true(graft__kv_pool_check(p));
    }
    assert_int_equal(graft__kv_seq_truncate(p, c, 48), GRAFT_OK);
    int32_t chist[51];
    memcpy(chist, hist, 48 * sizeof *chist);
    memcpy(chist + 48, suffix, sizeof suffix);
    append_expect(&r, p, c, chist, 48, chist + 48, 3, "clone after injected failures");
    expect_continues(&r, p, a, hist, 50, "source after injected failures");
    graft__kv_pool_free(p);
    assert_int_equal(graft__alloc_live(), live);
    rig_close(&r);
}

/* ---- property test --------------------------------------------------------------------------- */

#define P_SLOTS 8
#define P_MAX 120

/* What each live sequence should hold: its tokens, the cold logits of every position, and
 * from which position its sliding-window blocks are still there (the spec of kv.h: at
 * length L a sequence keeps the blocks ending after L - W; a clone at u, those from the
 * block of u - W on). */
typedef struct model_seq {
    bool live;
    int32_t id;
    int32_t len;
    int32_t kept;
    int32_t tokens[P_MAX];
    float *ref; /* (P_MAX, n_vocab) */
} model_seq;

typedef struct world {
    const rig *r;
    graft__kv_pool *p;
    int32_t window; /* 0: no sliding-window group */
    model_seq seqs[P_SLOTS];
    int refused;    /* appends refused for capacity */
    int lost;       /* clones and truncations refused for retention */
} world;

/* The first sliding-window position a sequence of len positions keeps: the block of the
 * first key its last position reads (so a clone at len - 1 keeps its window). */
static int32_t window_from(const world *w, int32_t len)
{
    return w->window > 0 && len > w->window ? (len - w->window) / B * B : 0;
}

/* The first key the forward pass reads for a query at pos in a sliding-window layer. */
static int32_t first_key_read(const world *w, int32_t pos)
{
    const graft__hparams *hp = &w->r->m->hp;
    for (int32_t il = 0; il < hp->n_layer; il++)
        if (hp->layer_is_swa[il])
            return graft__model_first_key(hp, il, pos);
    return 0;
}

/* A clone at upto keeps what the next query reads: [first_key_read(upto), upto). */
static bool keeps(const world *w, const model_seq *m, int32_t upto)
{
    return upto == 0 || first_key_read(w, upto) / B * B >= m->kept;
}

static int pick(const world *w, bool live)
{
    int start = random_below(P_SLOTS);
    for (int i = 0; i < P_SLOTS; i++) {
        int s = (start + i) % P_SLOTS;
        if (w->seqs[s].live == live)
            return s;
    }
    return -1;
}

static void op_open(world *w)
{
    int s = pick(w, false);
    if (s < 0)
        return;
    assert_int_equal(graft__kv_seq_open(w->p, &w->seqs[s].id), GRAFT_OK);
    w->seqs[s].live = true;
    w->seqs[s].len = 0;
    w->seqs[s].kept = 0;
}

/* Checks the appended rows of m against a cold recomputation of its new history. */
static void check_appended(world *w, model_seq *m, int32_t k, const graft__batch_entry *e,
                           int32_t n, const float *got)
{
    float *want = cold(w->r, m->tokens, m->len + k);
    memcpy(m->ref, want, (size_t)(m->len + k) * w->r->row_bytes);
    free(want);
    for (int32_t t = 0; t < n; t++)
        if (e[t].seq == m->id)
            expect_rows(w->r, m->ref + (size_t)e[t].pos * w->r->n_vocab,
                        got + (size_t)t * w->r->n_vocab, 1, "property: append");
    m->len += k;
    if (window_from(w, m->len) > m->kept)
        m->kept = window_from(w, m->len);
}

/* Appends to one or two sequences in one batch (interleaved) and checks every row. */
static void op_append(world *w, int count)
{
    int s[2] = {pick(w, true), -1}, k[2] = {0, 0};
    if (s[0] < 0)
        return;
    if (count == 2) {
        s[1] = (s[0] + 1 + random_below(P_SLOTS - 1)) % P_SLOTS;
        if (!w->seqs[s[1]].live)
            count = 1;
    }
    for (int j = 0; j < count; j++) {
        model_seq *m = &w->seqs[s[j]];
        k[j] = 1 + random_below(count == 1 ? 24 : 8);
        if (k[j] > P_MAX - m->len)
            k[j] = P_MAX - m->len;
        random_tokens(w->r, m->tokens + m->len, k[j]);
    }
    graft__batch_entry e[48];
    int32_t n = 0;
    for (int32_t i = 0; i < 24; i++)
        for (int j = 0; j < count; j++)
            if (i < k[j]) {
                const model_seq *m = &w->seqs[s[j]];
                e[n++] = (graft__batch_entry){m->id, m->len + i, m->tokens[m->len + i], true};
            }
    if (n == 0)
        return;
    float *got = malloc((size_t)n * w->r->row_bytes);
    int rc = pool_forward(w->r, w->p, e, n, got);
    w->refused += rc == GRAFT_ECAPACITY;
    if (rc != GRAFT_ECAPACITY) {
        assert_int_equal(rc, GRAFT_OK);
        for (int j = 0; j < count; j++)
            check_appended(w, &w->seqs[s[j]], k[j], e, n, got);
    }
    free(got);
}

static void op_clone(world *w)
{
    int from = pick(w, true), to = pick(w, false);
    if (from < 0 || to < 0)
        return;
    model_seq *src = &w->seqs[from], *dst = &w->seqs[to];
    int32_t upto = random_below(3) == 0 ? src->len : random_below(src->len + 1);
    graft__kv_stats st = stats_of(w->p);
    if (!keeps(w, src, upto)) {
        w->lost++;
        assert_int_equal(graft__kv_seq_clone(w->p, src->id, upto, &dst->id), GRAFT_ERETENTION);
        graft__kv_stats after = stats_of(w->p);
        expect_same_stats(&st, &after);
        return;
    }
    assert_int_equal(graft__kv_seq_clone(w->p, src->id, upto, &dst->id), GRAFT_OK);
    assert_int_equal(stats_of(w->p).blocks_used, st.blocks_used);
    dst->live = true;
    dst->len = upto;
    dst->kept = window_from(w, upto);
    memcpy(dst->tokens, src->tokens, (size_t)upto * sizeof *dst->tokens);
    memcpy(dst->ref, src->ref, (size_t)upto * w->r->row_bytes);
}

static void op_truncate(world *w)
{
    int s = pick(w, true);
    if (s < 0)
        return;
    model_seq *m = &w->seqs[s];
    int32_t len = random_below(m->len + 1);
    if (!keeps(w, m, len)) {
        w->lost++;
        assert_int_equal(graft__kv_seq_truncate(w->p, m->id, len), GRAFT_ERETENTION);
        return;
    }
    assert_int_equal(graft__kv_seq_truncate(w->p, m->id, len), GRAFT_OK);
    m->len = len;
    if (len == 0)
        m->kept = 0;
}

static void op_close(world *w)
{
    int s = pick(w, true);
    if (s < 0)
        return;
    graft__kv_seq_close(w->p, w->seqs[s].id);
    w->seqs[s].live = false;
}

/* Every live sequence recomputes its last position from the pool's KV (on a throwaway
 * clone at len - 1, where its window allows one and a block is free) and must get the
 * cold logits again; retention answers agree with the spec. */
static void verify_world(world *w)
{
    assert_true(graft__kv_pool_check(w->p));
    int live = 0;
    for (int i = 0; i < P_SLOTS; i++) {
        model_seq *m = &w->seqs[i];
        live += m->live;
        if (!m->live)
            continue;
        assert_int_equal(graft__kv_seq_length(w->p, m->id), m->len);
        int32_t upto = random_below(m->len + 1);
        assert_int_equal(graft__kv_seq_retains(w->p, m->id, upto), keeps(w, m, upto));
        if (m->len == 0 || !keeps(w, m, m->len - 1) || stats_of(w->p).blocks_free == 0)
            continue;
        int32_t probe;
        float *got = malloc(w->r->row_bytes);
        assert_int_equal(graft__kv_seq_clone(w->p, m->id, m->len - 1, &probe), GRAFT_OK);
        assert_int_equal(append(w->r, w->p, probe, &m->tokens[m->len - 1], 1, got), GRAFT_OK);
        expect_rows(w->r, m->ref + (size_t)(m->len - 1) * w->r->n_vocab, got, 1,
                    "property: recomputed last position");
        graft__kv_seq_close(w->p, probe);
        free(got);
    }
    assert_int_equal(stats_of(w->p).sequences, live);
}

static void world_step(world *w)
{
    switch (random_below(10)) {
    case 0: op_open(w); break;
    case 1: case 2: case 3: case 4: op_append(w, 1); break;
    case 5: op_append(w, 2); break;
    case 6: case 7: op_clone(w); break;
    case 8: op_truncate(w); break;
    default: op_close(w); break;
    }
}

static void run_world(const rig *r, const char *name, int blocks, uint32_t seed, int ops)
{
    world w = {r, pool_new(r, blocks, P_SLOTS + 1, P_MAX), 0, {{0}}, 0, 0};
    graft__kv_stats st = stats_of(w.p);
    w.window = st.n_groups == 2 ? st.group[1].window : 0;
    for (int i = 0; i < P_SLOTS; i++)
        w.seqs[i].ref = malloc((size_t)P_MAX * r->row_bytes);
    rng = seed;
    for (int op = 0; op < ops; op++) {
        int64_t cow = stats_of(w.p).cow_copies;
        world_step(&w);
        verify_world(&w);
        assert_true(stats_of(w.p).cow_copies >= cow);
    }
    st = stats_of(w.p);
    printf("property %s (%d blocks, seed %u): %d operations, %lld copies on write, %d appends "
           "refused for capacity, %d clones/truncations for retention\n", name, blocks, seed,
           ops, (long long)st.cow_copies, w.refused, w.lost);
    for (int i = 0; i < P_SLOTS; i++) {
        if (w.seqs[i].live)
            graft__kv_seq_close(w.p, w.seqs[i].id);
        free(w.seqs[i].ref);
    }
    st = stats_of(w.p);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.sequences, 0);
    assert_true(graft__kv_pool_check(w.p));
    graft__kv_pool_free(w.p);
}

static void test_property(void **state)
{
    (void)state;
    rig r = rig_open(stories, NULL, 1, GRAFT_TYPE_F32);
    run_world(&r, "stories260K", 64, 1, 300);
    run_world(&r, "stories260K", 8, 2, 200);
    rig_close(&r);
    r = rig_open(gemma_f32, NULL, 1, GRAFT_TYPE_F16);
    run_world(&r, "gemma3", 48, 3, 120);
    rig_close(&r);
}

/* ---- clone time ------------------------------------------------------------------------------ */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Clones a 4096-position sequence of stories260K (KV written by reserve + commit: clone
 * never looks at the bytes) and prints the median time. Never fails on a timing. */
static void test_clone_time(void **state)
{
    (void)state;
    enum { LEN = 4096, CHUNK = 512, REPS = 200 };
    rig r = rig_open(stories, "scalar", 1, GRAFT_TYPE_F16);
    graft__kv_pool *p = pool_new(&r, LEN / B + 4, 2, LEN);
    graft__kv kv = graft__kv_pool_iface(p);
    int32_t a, c;
    assert_int_equal(graft__kv_seq_open(p, &a), GRAFT_OK);
    static graft__batch_entry e[CHUNK];
    for (int32_t at = 0; at < LEN; at += CHUNK) {
        for (int32_t i = 0; i < CHUNK; i++)
            e[i] = (graft__batch_entry){a, at + i, 0, false};
        assert_int_equal(kv.reserve(kv.self, e, CHUNK), GRAFT_OK);
        assert_int_equal(graft__kv_seq_commit(p, a, at + CHUNK), GRAFT_OK);
    }
    graft__kv_stats st = stats_of(p);
    uint64_t ns[REPS];
    for (int i = 0; i < REPS; i++) {
        uint64_t t0 = graft__now_ns();
        assert_int_equal(graft__kv_seq_clone(p, a, LEN, &c), GRAFT_OK);
        ns[i] = graft__now_ns() - t0;
        graft__kv_stats now = stats_of(p);
        assert_int_equal(now.blocks_used, st.blocks_used);
        assert_int_equal(now.cow_copies, 0);
        graft__kv_seq_close(p, c);
    }
    qsort(ns, REPS, sizeof ns[0], compare_u64);
    printf("clone of a %d-position stories260K sequence (%lld blocks, %.1f MiB of KV): median "
           "%.2f us, min %.2f us\n", LEN, (long long)st.blocks_used,
           (double)st.bytes_used / (1024.0 * 1024.0), (double)ns[REPS / 2] / 1e3,
           (double)ns[0] / 1e3);
    graft__kv_pool_free(p);
    rig_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_matches_simple),
        cmocka_unit_test(test_clone),
        cmocka_unit_test(test_shared_writers),
        cmocka_unit_test(test_partial_commit),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_dropped_row_asserts),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_clone_time),
    };
    return cmocka_run_group_tests(tests, setup_models, teardown_models);
}
