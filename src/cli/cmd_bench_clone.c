/*
 * cmd_bench_clone.c: `graft bench clone`: what cloning a session costs, measured through the
 * engine API only (DESIGN.md §1 invariant 2: a clone shares the KV blocks of the committed
 * prefix and copies none; the first write into a shared block copies that one block).
 *
 * One source session is prefilled with random token ids up to each measured context length
 * (256, 1024, 4096, capped by --max-context, plus --max-context itself). At each length:
 *   - latency: graft_session_clone_wait at two boundaries, the committed position and the
 *     middle of the last block before it, each the median of --reps clones (each closed
 *     again at once);
 *   - KV copied: from graft_engine_metrics before and after one more clone at each
 *     boundary, and after a first token written into that clone: blocks copied
 *     (kv_cow_copies x kv_block_bytes) and blocks allocated (kv_blocks_used).
 * Then memory: the source, at the largest length, is cloned N_CLONES times, every clone is
 * extended by EXTEND_TOKENS tokens (concurrent generations), and the pool's accounting
 * (kv_blocks_used x kv_block_bytes) is set against the bound "one prompt's KV + N_CLONES x
 * EXTEND_TOKENS tokens' KV + one block per session", as is the growth of the peak RSS from
 * before the first prefill (the pool reserves its budget without touching it, so RSS shows
 * the blocks really used; the engine's forward-pass buffers are resident from its creation,
 * so they are in the baseline).
 * With sliding-window layers (two KV layer groups) kv_block_bytes is the larger group's
 * block and the byte figures are upper bounds.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define CLONE "bench clone" /* the command, in messages */
#define N_CLONES 8          /* clones in the memory measurement */
#define EXTEND_TOKENS 128   /* tokens each of those clones is extended by */
#define WARMUP_TOKENS 8     /* untimed tokens that map the weights in */
#define MIN_CONTEXT 64      /* the smallest --max-context */

static const int32_t base_contexts[] = {256, 1024, 4096};
#define MAX_CONTEXTS ((int)(sizeof base_contexts / sizeof base_contexts[0]) + 1)

static const char clone_usage[] =
    "usage: graft bench clone -m MODEL [--threads N] [--max-context N] [--reps N] [--json]\n"
    "\n"
    "Measures session clones through the engine API, on a session prefilled with random\n"
    "token ids to each context length: 256, 1024 and 4096 positions, capped by\n"
    "--max-context, and --max-context itself.\n"
    "  latency    graft_session_clone_wait at the committed position and in the middle of\n"
    "             the last block before it (median of --reps clones)\n"
    "  KV copied  bytes copied and blocks allocated by one clone at each of those\n"
    "             boundaries, and by the first token then written into it (engine metrics:\n"
    "             kv_cow_copies x kv_block_bytes, kv_blocks_used)\n"
    "  memory     the longest prompt cloned 8 times, each clone extended by 128 tokens: the\n"
    "             KV pool's blocks in use x kv_block_bytes, and the growth of the peak RSS\n"
    "             since before the first prefill (the engine's own buffers are resident\n"
    "             from its creation, so the growth is what the sessions hold),\n"
    "             each against the bound: the prompt's KV + 8 x 128 tokens' KV + one block\n"
    "             per session\n"
    "\n"
    "options:\n"
    "  -m, --model FILE     GGUF model\n"
    "  --threads N          compute threads (default 0: one per online CPU)\n"
    "  --max-context N      the longest context measured (default: 4096, at most the\n"
    "                       model's context length less 128; at least 64)\n"
    "  --reps N             clones per latency figure, the median is reported (default 31)\n"
    "  --json               print one JSON object instead of the table\n"
    "  -h, --help           show this help\n"
    "\n"
    "JSON fields: engine (\"graft\"), model (the path), arch, threads, reps,\n"
    "kv_block_tokens, kv_block_bytes, clones (an array, one object per context and\n"
    "boundary: context, boundary, block_aligned, clone_us, clone_copied_bytes,\n"
    "clone_new_blocks, write_copied_bytes, write_new_blocks), memory (an object:\n"
    "prompt_tokens, clones, extend_tokens, kv_blocks_used, kv_used_bytes, bound_bytes,\n"
    "kv_within_bound, peak_rss_before_bytes, peak_rss_after_bytes, peak_rss_growth_bytes,\n"
    "rss_within_bound).\n";

typedef struct clone_options {
    const char *model;
    int32_t threads, max_context, reps;
    int json;
} clone_options;

/* The figures of one boundary. */
typedef struct boundary_result {
    int32_t context, boundary;
    bool aligned;
    double clone_us; /* median latency of graft_session_clone_wait */
    int64_t clone_copied_bytes, clone_new_blocks;
    int64_t write_copied_bytes, write_new_blocks;
} boundary_result;

typedef struct memory_result {
    int32_t prompt_tokens;
    int64_t blocks_used, used_bytes, bound_bytes;
    uint64_t rss_before, rss_after;
} memory_result;

typedef struct clone_state {
    graft_model *model;
    graft_model_info info;
    graft_engine *engine;
    graft_session *source;
    graft_session *clones[N_CLONES];
    graft__bench_rng rng;
    int32_t *tokens;  /* (longest + EXTEND_TOKENS) random ids */
    double *samples;  /* (reps) */
    int32_t contexts[MAX_CONTEXTS];
    int n_contexts;
    int32_t block_tokens;
    int64_t block_bytes;
    int32_t threads;
    boundary_result results[2 * MAX_CONTEXTS];
    memory_result mem;
} clone_state;

/* ---- set-up ----------------------------------------------------------------------------- */

static int parse_clone_options(int argc, char **argv, clone_options *o)
{
    o->reps = 31;
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, GRAFT_MAX_THREADS, 0},
        {"--max-context", NULL, GRAFT_CLI_INT, &o->max_context, MIN_CONTEXT, 1 << 24, 0},
        {"--reps", NULL, GRAFT_CLI_INT, &o->reps, 1, 100000, 0},
        {"--json", NULL, GRAFT_CLI_FLAG, &o->json, 0, 0, 1},
    };
    const graft__cli_command cmd = {CLONE, clone_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    return graft__bench_parse(&cmd, argc, argv, &o->model);
}

/* The context lengths measured: base_contexts up to the longest, then the longest. */
static int plan_contexts(clone_state *s, const clone_options *o)
{
    int32_t limit = s->info.n_ctx_train - EXTEND_TOKENS;
    if (limit < MIN_CONTEXT) {
        graft__cli_error(CLONE, "the model's context length %d is too short: clones are "
                         "measured at %d positions or more, plus %d", (int)s->info.n_ctx_train,
                         MIN_CONTEXT, EXTEND_TOKENS);
        return GRAFT_CLI_FAILED;
    }
    int32_t longest = o->max_context > 0 ? o->max_context : limit < 4096 ? limit : 4096;
    if (longest > limit) {
        graft__cli_error(CLONE, "--max-context %d is too long: the model's context length is "
                         "%d and each clone is extended by %d tokens, so at most %d",
                         (int)longest, (int)s->info.n_ctx_train, EXTEND_TOKENS, (int)limit);
        return GRAFT_CLI_FAILED;
    }
    for (int i = 0; i < MAX_CONTEXTS - 1 && base_contexts[i] < longest; i++)
        s->contexts[s->n_contexts++] = base_contexts[i];
    s->contexts[s->n_contexts++] = longest;
    return GRAFT_CLI_OK;
}

static int clone_setup(clone_state *s, const clone_options *o)
{
    if (graft__bench_load_model(CLONE, o->model, &s->model, &s->info) != GRAFT_CLI_OK ||
        plan_contexts(s, o) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    int32_t longest = s->contexts[s->n_contexts - 1];
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = 1 + N_CLONES;
    eo.max_context = longest + EXTEND_TOKENS;
    eo.n_threads = o->threads;
    if (graft__bench_engine_create(CLONE, s->model, &eo, &s->engine) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_engine_metrics m;
    if (graft_engine_metrics_get(s->engine, &m) != GRAFT_OK) {
        graft__cli_error(CLONE, "cannot read the engine's metrics");
        return GRAFT_CLI_FAILED;
    }
    s->block_tokens = m.kv_block_tokens;
    s->block_bytes = m.kv_block_bytes;
    s->threads = graft__bench_threads(o->threads);
    s->rng = graft__bench_rng_init(s->info.n_vocab);
    s->tokens = malloc((size_t)eo.max_context * sizeof *s->tokens);
    s->samples = malloc((size_t)o->reps * sizeof *s->samples);
    if (s->tokens == NULL || s->samples == NULL) {
        graft__cli_error(CLONE, "out of memory");
        return GRAFT_CLI_FAILED;
    }
    graft__bench_random_tokens(&s->rng, s->tokens, (size_t)eo.max_context);
    return GRAFT_CLI_OK;
}

static void clone_free(clone_state *s)
{
    for (int i = 0; i < N_CLONES; i++)
        graft_session_close(s->clones[i]);
    graft_session_close(s->source);
    graft_engine_free(s->engine);
    graft_model_free(s->model);
    free(s->tokens);
    free(s->samples);
}

/* ---- the measurements ------------------------------------------------------------------- */

static int read_metrics(clone_state *s, graft_engine_metrics *m)
{
    if (graft_engine_metrics_get(s->engine, m) == GRAFT_OK)
        return GRAFT_CLI_OK;
    graft__cli_error(CLONE, "cannot read the engine's metrics");
    return GRAFT_CLI_FAILED;
}

static int clone_at(clone_state *s, int32_t upto, graft_session **clone)
{
    char *err = NULL;
    int rc = graft_session_clone_wait(s->source, upto, clone, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error(CLONE, "clone at %d refused: %s", (int)upto,
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* The median latency of --reps clones at `upto`, each closed at once. */
static int time_clones(clone_state *s, const clone_options *o, int32_t upto, double *us)
{
    for (int rep = 0; rep < o->reps; rep++) {
        graft_session *clone;
        double t0 = graft__bench_now_s();
        if (clone_at(s, upto, &clone) != GRAFT_CLI_OK)
            return GRAFT_CLI_FAILED;
        s->samples[rep] = (graft__bench_now_s() - t0) * 1e6;
        graft_session_close(clone);
    }
    *us = graft__bench_median(s->samples, o->reps);
    return GRAFT_CLI_OK;
}

/* One clone at r->boundary, then one token written into it: what each copied and took. */
static int count_copies(clone_state *s, boundary_result *r)
{
    graft_engine_metrics m0, m1, m2;
    graft_session *clone = NULL;
    int32_t token = graft__bench_random_token(&s->rng);
    int rc = read_metrics(s, &m0);
    if (rc == GRAFT_CLI_OK)
        rc = clone_at(s, r->boundary, &clone);
    if (rc == GRAFT_CLI_OK)
        rc = read_metrics(s, &m1);
    if (rc == GRAFT_CLI_OK)
        rc = graft__bench_generate(CLONE, clone, &token, 1, 1, NULL);
    if (rc == GRAFT_CLI_OK)
        rc = read_metrics(s, &m2);
    graft_session_close(clone);
    if (rc != GRAFT_CLI_OK)
        return rc;
    r->clone_copied_bytes = (int64_t)(m1.kv_cow_copies - m0.kv_cow_copies) * s->block_bytes;
    r->clone_new_blocks = m1.kv_blocks_used - m0.kv_blocks_used;
    r->write_copied_bytes = (int64_t)(m2.kv_cow_copies - m1.kv_cow_copies) * s->block_bytes;
    r->write_new_blocks = m2.kv_blocks_used - m1.kv_blocks_used;
    return GRAFT_CLI_OK;
}

/* The middle of the last block that ends at or before `context`. */
static int32_t mid_block(const clone_state *s, int32_t context)
{
    int32_t b = s->block_tokens;
    int32_t mid = (context - 1) / b * b + b / 2;
    return mid < context ? mid : mid - b;
}

static int measure_context(clone_state *s, const clone_options *o, int32_t context,
                           boundary_result *results)
{
    int32_t position = graft_session_position(s->source);
    int rc = graft__bench_generate(CLONE, s->source, s->tokens + position,
                                   (size_t)(context - position), 1, NULL);
    const int32_t boundaries[2] = {context, mid_block(s, context)};
    for (int i = 0; rc == GRAFT_CLI_OK && i < 2; i++) {
        boundary_result *r = &results[i];
        r->context = context;
        r->boundary = boundaries[i];
        r->aligned = r->boundary % s->block_tokens == 0;
        rc = time_clones(s, o, r->boundary, &r->clone_us);
        if (rc == GRAFT_CLI_OK)
            rc = count_copies(s, r);
    }
    return rc;
}

/* N_CLONES clones of the source, each extended by EXTEND_TOKENS tokens at once. */
static int measure_memory(clone_state *s)
{
    memory_result *m = &s->mem;
    m->prompt_tokens = graft_session_position(s->source);
    graft_generation *gens[N_CLONES];
    int queued = 0, rc = GRAFT_CLI_OK;
    for (int i = 0; rc == GRAFT_CLI_OK && i < N_CLONES; i++)
        rc = clone_at(s, m->prompt_tokens, &s->clones[i]);
    const int32_t *extension = s->tokens + m->prompt_tokens;
    while (rc == GRAFT_CLI_OK && queued < N_CLONES) {
        rc = graft__bench_submit(CLONE, s->clones[queued], extension, EXTEND_TOKENS, 1,
                                 &gens[queued]);
        queued += rc == GRAFT_CLI_OK;
    }
    for (int i = 0; i < queued; i++) {
        int done = graft__bench_finish(CLONE, gens[i], 1, NULL);
        rc = rc == GRAFT_CLI_OK ? done : rc;
    }
    graft_engine_metrics em;
    if (rc != GRAFT_CLI_OK || read_metrics(s, &em) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    m->rss_after = graft__bench_peak_rss();
    int64_t per_position = s->block_bytes / s->block_tokens;
    m->blocks_used = em.kv_blocks_used;
    m->used_bytes = em.kv_blocks_used * s->block_bytes;
    m->bound_bytes = ((int64_t)m->prompt_tokens + (int64_t)N_CLONES * EXTEND_TOKENS) *
                         per_position + (1 + N_CLONES) * s->block_bytes;
    return GRAFT_CLI_OK;
}

/* A few untimed tokens on a throwaway session, so that the weights are mapped in. */
static int warm_up(clone_state *s)
{
    graft_session *session;
    if (graft__bench_session_open(CLONE, s->engine, &session) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    int32_t warm[WARMUP_TOKENS];
    graft__bench_random_tokens(&s->rng, warm, WARMUP_TOKENS);
    int rc = graft__bench_generate(CLONE, session, warm, WARMUP_TOKENS, 1, NULL);
    graft_session_close(session);
    return rc;
}

static int measure_all(clone_state *s, const clone_options *o)
{
    int rc = warm_up(s);
    s->mem.rss_before = graft__bench_peak_rss();
    if (rc == GRAFT_CLI_OK)
        rc = graft__bench_session_open(CLONE, s->engine, &s->source);
    for (int i = 0; rc == GRAFT_CLI_OK && i < s->n_contexts; i++)
        rc = measure_context(s, o, s->contexts[i], &s->results[2 * i]);
    return rc == GRAFT_CLI_OK ? measure_memory(s) : rc;
}

/* ---- reporting -------------------------------------------------------------------------- */

/* "0 B", "512 B", "3.50 MiB" */
static const char *format_bytes(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = bytes < 0 ? -bytes : bytes;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", bytes);
    else
        snprintf(buf, cap, "%.2f %s", bytes < 0 ? -v : v, units[u]);
    return buf;
}

/* "within the bound", or "over the bound by 3.48 MiB" */
static const char *verdict(char *buf, size_t cap, int64_t value, int64_t bound)
{
    char over[32];
    if (value <= bound)
        snprintf(buf, cap, "within the bound");
    else
        snprintf(buf, cap, "over the bound by %s",
                 format_bytes(over, sizeof over, (double)(value - bound)));
    return buf;
}

static void print_table(const clone_state *s, const clone_options *o)
{
    char a[32], b[32], c[32], v[64];
    printf("graft bench clone: %s\n", o->model);
    printf("  %s, %d layers; KV blocks of %d positions, %s each; %d thread%s; median of %d "
           "clone%s\n\n", s->info.arch, (int)s->info.n_layer, (int)s->block_tokens,
           format_bytes(a, sizeof a, (double)s->block_bytes), (int)s->threads,
           s->threads > 1 ? "s" : "", (int)o->reps, o->reps > 1 ? "s" : "");
    printf("  %-7s  %-18s  %13s  %13s  %10s  %19s  %10s\n", "context", "boundary",
           "clone latency", "clone: copied", "new blocks", "first write: copied", "new blocks");
    for (int i = 0; i < 2 * s->n_contexts; i++) {
        const boundary_result *r = &s->results[i];
        char where[32];
        snprintf(where, sizeof where, "%d (%s)", (int)r->boundary,
                 r->aligned ? "block edge" : "mid-block");
        printf("  %-7d  %-18s  %10.2f us  %13s  %10lld  %19s  %10lld\n", (int)r->context, where,
               r->clone_us, format_bytes(a, sizeof a, (double)r->clone_copied_bytes),
               (long long)r->clone_new_blocks,
               format_bytes(b, sizeof b, (double)r->write_copied_bytes),
               (long long)r->write_new_blocks);
    }
    const memory_result *m = &s->mem;
    int64_t growth = (int64_t)m->rss_after - (int64_t)m->rss_before;
    printf("\n  memory: a %d-token prompt cloned %d times, each clone extended by %d tokens\n"
           "  bound: the prompt's KV + %d x %d tokens' KV + one block per session = %s\n",
           (int)m->prompt_tokens, N_CLONES, EXTEND_TOKENS, N_CLONES, EXTEND_TOKENS,
           format_bytes(a, sizeof a, (double)m->bound_bytes));
    printf("  KV pool in use    %lld blocks = %s: %s\n", (long long)m->blocks_used,
           format_bytes(b, sizeof b, (double)m->used_bytes),
           verdict(v, sizeof v, m->used_bytes, m->bound_bytes));
    printf("  peak RSS          %s before, %s after: +%s, %s\n",
           format_bytes(a, sizeof a, (double)m->rss_before),
           format_bytes(b, sizeof b, (double)m->rss_after),
           format_bytes(c, sizeof c, (double)growth),
           verdict(v, sizeof v, growth, m->bound_bytes));
}

static void print_json(const clone_state *s, const clone_options *o)
{
    printf("{\"engine\": \"graft\", \"model\": ");
    graft__bench_json_string(o->model);
    printf(", \"arch\": ");
    graft__bench_json_string(s->info.arch);
    printf(", \"threads\": %d, \"reps\": %d, \"kv_block_tokens\": %d, \"kv_block_bytes\": %lld, "
           "\"clones\": [", (int)s->threads, (int)o->reps, (int)s->block_tokens,
           (long long)s->block_bytes);
    for (int i = 0; i < 2 * s->n_contexts; i++) {
        const boundary_result *r = &s->results[i];
        printf("%s{\"context\": %d, \"boundary\": %d, \"block_aligned\": %s, \"clone_us\": %.3f, "
               "\"clone_copied_bytes\": %lld, \"clone_new_blocks\": %lld, "
               "\"write_copied_bytes\": %lld, \"write_new_blocks\": %lld}", i ? ", " : "",
               (int)r->context, (int)r->boundary, r->aligned ? "true" : "false", r->clone_us,
               (long long)r->clone_copied_bytes, (long long)r->clone_new_blocks,
               (long long)r->write_copied_bytes, (long long)r->write_new_blocks);
    }
    const memory_result *m = &s->mem;
    int64_t growth = (int64_t)m->rss_after - (int64_t)m->rss_before;
    printf("], \"memory\": {\"prompt_tokens\": %d, \"clones\": %d, \"extend_tokens\": %d, "
           "\"kv_blocks_used\": %lld, \"kv_used_bytes\": %lld, \"bound_bytes\": %lld, "
           "\"kv_within_bound\": %s, \"peak_rss_before_bytes\": %llu, "
           "\"peak_rss_after_bytes\": %llu, \"peak_rss_growth_bytes\": %lld, "
           "\"rss_within_bound\": %s}}\n",
           (int)m->prompt_tokens, N_CLONES, EXTEND_TOKENS, (long long)m->blocks_used,
           (long long)m->used_bytes, (long long)m->bound_bytes,
           m->used_bytes <= m->bound_bytes ? "true" : "false",
           (unsigned long long)m->rss_before, (unsigned long long)m->rss_after,
           (long long)growth, growth <= m->bound_bytes ? "true" : "false");
}

int graft__cli_bench_clone(int argc, char **argv)
{
    clone_options o = {0};
    int rc = parse_clone_options(argc, argv, &o);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    clone_state s = {0};
    rc = clone_setup(&s, &o);
    if (rc == GRAFT_CLI_OK)
        rc = measure_all(&s, &o);
    if (rc == GRAFT_CLI_OK && o.json)
        print_json(&s, &o);
    else if (rc == GRAFT_CLI_OK)
        print_table(&s, &o);
    clone_free(&s);
    return rc;
}
