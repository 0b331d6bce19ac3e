/*
 * cmd_bench.c: `graft bench`: the subcommand dispatcher, and `graft bench speed`, measured
 * so it can be set side by side with llama.cpp. (`graft bench clone` is cmd_bench_clone.c,
 * `graft bench prefix` cmd_bench_prefix.c; the helpers they share are bench_util.c.)
 *
 * `graft bench speed` measures through the public API only, as bench/llama_speed.c measures
 * llama.cpp through its C API; the two link one benchmark library (src/bench/bench_lib.h)
 * and print the same JSON, so bench/compare.sh can put them in one table. --prompt takes a
 * list of lengths, each measured in turn every rep (one JSON line each); the report names
 * the kernel set and the processor's SIMD features (graft_cpu_features). What is measured
 * and how: bench/README.md. A timing never fails anything (DESIGN.md §5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench/bandwidth_probe.h"
#include "util/argmax.h"

#define SPEED "bench speed" /* the command, in messages */
#define SEQ_CONTEXT GRAFT_BENCH_SEQ_CONTEXT
#define SEQ_GEN GRAFT_BENCH_SEQ_GEN
#define MAX_SEQS GRAFT_BENCH_MAX_SEQS
#define WARMUP_TOKENS GRAFT_BENCH_WARMUP_TOKENS
#define MAX_PROMPTS 16 /* prompt lengths in one --prompt list */

static const char bench_usage[] =
    "usage: graft bench SUBCOMMAND [OPTIONS]\n"
    "\n"
    "Benchmarks graft. bench/compare.sh runs them side by side with llama.cpp.\n"
    "\n"
    "subcommands:\n"
    "  speed      prefill, decode and multi-session decode speed, memory bandwidth\n"
    "  clone      session clone latency, the KV a clone copies, memory of shared prompts\n"
    "  prefix     time to first token cold, and with the prompt's prefix in the prefix cache\n"
    "\n"
    "'graft bench SUBCOMMAND --help' describes a subcommand's options.\n";

static const char speed_usage[] =
    "usage: graft bench speed -m MODEL [--threads N] [--kernels K] [--prompt N[,N...]]\n"
    "                         [--gen N] [--reps N] [--json]\n"
    "\n"
    "Measures, on random valid token ids: prefill and decode through the engine (and on a\n"
    "graft_context, beside them), aggregate decode of 1, 2, 4 and 8 sessions, the memory\n"
    "read bandwidth and the decode rooflines it implies; each figure the median of --reps\n"
    "runs; with the kernel set and the processor's SIMD features. bench/README.md\n"
    "describes the method and the JSON fields.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE   GGUF model\n"
    "  --threads N        compute threads (default 0: one per online CPU)\n"
    "  --kernels K        scalar, avx2, avxvnni or avx512 (default: $GRAFT_KERNELS, else the best)\n"
    "  --prompt N[,N...]  prefill tokens, or a list of lengths (default 512); the\n"
    "                     context holds the longest plus --gen\n"
    "  --gen N            decode tokens (default 128)\n"
    "  --reps N           runs per figure, the median is reported (default 3)\n"
    "  --json             print one JSON object (a line per prompt length) instead of\n"
    "                     the table\n"
    "  -h, --help         show this help\n"
    "\n"
    "JSON fields (bench/README.md says what each means): engine, model, arch, threads,\n"
    "kernels, cpu_features, prompt_tokens, gen_tokens, seq_context_tokens, seq_gen_tokens, reps,\n"
    "weight_bytes, prefill_tps, decode_tps, context_prefill_tps, context_decode_tps,\n"
    "aggregate_tps, bandwidth_gbs, bandwidth_during_gbs, decode_roofline_weights_tps,\n"
    "kv_bytes_per_token, decode_roofline_tps, decode_roofline_during_tps.\n";

typedef struct speed_options {
    const char *model;
    const char *kernels;
    const char *prompt_list;      /* --prompt as given */
    int32_t prompts[MAX_PROMPTS]; /* its lengths */
    int32_t n_prompts;
    int32_t threads, n_prompt, n_gen, reps; /* n_prompt: the longest of prompts */
    int json;
} speed_options;

typedef struct bench_state {
    graft_model *model;
    graft_model_info info;
    graft_context *single; /* one sequence of n_prompt + n_gen positions */
    graft_engine *engine;  /* MAX_SEQS short sessions, or one of n_prompt + n_gen + 1 */
    int32_t n_prompt;      /* the prompt length being measured */
    int32_t *tokens;       /* (longest prompt) */
    float *logits;         /* (n_vocab) */
    double *samples;       /* (n_prompts, GRAFT_BENCH_N_FIGURES, reps); the aggregates in
                              the first only */
    graft__bench_rng rng;
    graft__probe probe;    /* the bandwidth probe, one thread per compute thread */
} bench_state;

/* The samples of a figure for prompt length li. */
static double *figure_samples(bench_state *s, const speed_options *o, int32_t li, int figure)
{
    return s->samples + ((size_t)li * GRAFT_BENCH_N_FIGURES + (size_t)figure) * (size_t)o->reps;
}

/* ---- the model measurements ------------------------------------------------------------- */

static int probe_failed(void)
{
    graft__cli_error(SPEED, "bandwidth probe: cannot start its threads");
    return GRAFT_CLI_FAILED;
}

/* Reports a failed graft_context_eval. */
static int eval_failed(const bench_state *s, int rc)
{
    const char *why = graft_context_errmsg(s->single);
    graft__cli_error(SPEED, "evaluation failed: %s", why ? why : graft_status_str(rc));
    return GRAFT_CLI_FAILED;
}

/* A step of the graft_context run (graft__bench_prefill_decode): the prompt on sequence 0,
 * or the argmax of the last logits. */
static int context_step(void *user, int32_t i)
{
    bench_state *s = user;
    if (i < 0)
        return graft_context_eval(s->single, s->tokens, (size_t)s->n_prompt, s->logits);
    int32_t next = graft__argmax(s->logits, s->info.n_vocab);
    return graft_context_eval(s->single, &next, 1, s->logits);
}

/* On the graft_context: prefill of s->n_prompt tokens, then n_gen single-token decodes,
 * with the bandwidth samples around and during the decode. */
static int measure_context(bench_state *s, const speed_options *o, int32_t li, int rep)
{
    graft_context_seq_reset(s->single, 0);
    graft__bench_run r;
    int rc = graft__bench_prefill_decode(&s->probe, s->n_prompt, o->n_gen, context_step, s, &r);
    if (rc < 0)
        return probe_failed();
    if (rc != 0)
        return eval_failed(s, r.step_status);
    figure_samples(s, o, li, GRAFT_BENCH_FIG_CONTEXT_PREFILL)[rep] = r.prefill_tps;
    figure_samples(s, o, li, GRAFT_BENCH_FIG_CONTEXT_DECODE)[rep] = r.decode_tps;
    figure_samples(s, o, li, GRAFT_BENCH_FIG_BANDWIDTH)[rep] = r.bandwidth_gbs;
    figure_samples(s, o, li, GRAFT_BENCH_FIG_BANDWIDTH_DURING)[rep] = r.bandwidth_during_gbs;
    return GRAFT_CLI_OK;
}

/* Through the engine, the path users get: one session given the same s->n_prompt tokens, then
 * n_gen + 1 greedy tokens (the first sampled after the prefill, then n_gen decode steps);
 * the figures are the generation's own metrics (prefill_tokens_per_s,
 * decode_tokens_per_s). */
static int measure_engine(bench_state *s, const speed_options *o, int32_t li, int rep)
{
    graft_session *session;
    graft_generation *gen;
    if (graft__bench_session_open(SPEED, s->engine, &session) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    int rc = graft__bench_submit(SPEED, session, s->tokens, (size_t)s->n_prompt, o->n_gen + 1,
                                 &gen);
    if (rc == GRAFT_CLI_OK) {
        graft_generation_wait(gen);
        graft_generation_metrics m;
        graft_generation_metrics_get(gen, &m);
        figure_samples(s, o, li, GRAFT_BENCH_FIG_PREFILL)[rep] = m.prefill_tokens_per_s;
        figure_samples(s, o, li, GRAFT_BENCH_FIG_DECODE)[rep] = m.decode_tokens_per_s;
        rc = graft__bench_finish(SPEED, gen, o->n_gen + 1, NULL);
    }
    graft_session_close(session);
    return rc;
}

/* Prompt length li: on the graft_context, then through the engine. */
static int measure_prefill_decode(bench_state *s, const speed_options *o, int32_t li, int rep)
{
    s->n_prompt = o->prompts[li];
    graft__bench_random_tokens(&s->rng, s->tokens, (size_t)s->n_prompt);
    int rc = measure_context(s, o, li, rep);
    return rc == GRAFT_CLI_OK ? measure_engine(s, o, li, rep) : rc;
}

/* Opens n sessions and gives each SEQ_CONTEXT random tokens (untimed); next[i] receives the
 * token session i sampled after them, not yet fed back. */
static int give_contexts(bench_state *s, graft_session **sessions, int32_t n, int32_t *next)
{
    int32_t context[SEQ_CONTEXT];
    for (int32_t i = 0; i < n; i++) {
        graft__bench_random_tokens(&s->rng, context, SEQ_CONTEXT);
        if (graft__bench_session_open(SPEED, s->engine, &sessions[i]) != GRAFT_CLI_OK ||
            graft__bench_generate(SPEED, sessions[i], context, SEQ_CONTEXT, 1, &next[i]) !=
                GRAFT_CLI_OK)
            return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* n sessions generating SEQ_GEN tokens each, all queued at once; tokens/s over them all. */
static int measure_aggregate(bench_state *s, int32_t n, double *tps)
{
    graft_session *sessions[MAX_SEQS] = {0};
    graft_generation *gens[MAX_SEQS];
    int32_t next[MAX_SEQS], queued = 0;
    int rc = give_contexts(s, sessions, n, next);
    double t0 = graft__bench_now_s();
    while (rc == GRAFT_CLI_OK && queued < n) {
        rc = graft__bench_submit(SPEED, sessions[queued], &next[queued], 1, SEQ_GEN,
                                 &gens[queued]);
        queued += rc == GRAFT_CLI_OK;
    }
    for (int32_t i = 0; i < queued; i++) {
        int done = graft__bench_finish(SPEED, gens[i], SEQ_GEN, NULL);
        rc = rc == GRAFT_CLI_OK ? done : rc;
    }
    *tps = graft__bench_rate((double)n * SEQ_GEN, graft__bench_now_s() - t0);
    for (int32_t i = 0; i < n; i++)
        graft_session_close(sessions[i]);
    return rc;
}

/* A few untimed tokens on the context and on the engine, so the timed runs find the
 * weights mapped in. */
static int warm_up(bench_state *s)
{
    int32_t warm[WARMUP_TOKENS];
    graft__bench_random_tokens(&s->rng, warm, WARMUP_TOKENS);
    int rc = graft_context_eval(s->single, warm, WARMUP_TOKENS, s->logits);
    if (rc != GRAFT_OK)
        return eval_failed(s, rc);
    graft_context_seq_reset(s->single, 0);
    graft_session *session;
    if (graft__bench_session_open(SPEED, s->engine, &session) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    rc = graft__bench_generate(SPEED, session, warm, WARMUP_TOKENS, 1, NULL);
    graft_session_close(session);
    return rc;
}

static int measure_all(bench_state *s, const speed_options *o)
{
    int rc = warm_up(s);
    for (int rep = 0; rc == GRAFT_CLI_OK && rep < o->reps; rep++) {
        for (int32_t li = 0; rc == GRAFT_CLI_OK && li < o->n_prompts; li++)
            rc = measure_prefill_decode(s, o, li, rep);
        for (int i = 0; rc == GRAFT_CLI_OK && i < GRAFT_BENCH_N_SEQ_COUNTS; i++)
            rc = measure_aggregate(s, graft__bench_seq_counts[i],
                                   &figure_samples(s, o, 0, GRAFT_BENCH_FIG_AGGREGATE + i)[rep]);
    }
    return rc;
}

/* ---- set-up ----------------------------------------------------------------------------- */

/* o->prompts = the lengths of the comma-separated list o->prompt_list (each 1 .. 2^20), and
 * o->n_prompt their largest; a usage error names a bad one. */
static int parse_prompt_list(speed_options *o)
{
    const char *p = o->prompt_list;
    o->n_prompts = 0;
    o->n_prompt = 0;
    for (;;) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || n < 1 || n > (1L << 20) ||
            o->n_prompts == MAX_PROMPTS) {
            graft__cli_error(SPEED, "--prompt: '%s' is not a list of up to %d lengths, each 1 "
                             "to %ld", o->prompt_list, MAX_PROMPTS, 1L << 20);
            return GRAFT_CLI_USAGE;
        }
        o->prompts[o->n_prompts++] = (int32_t)n;
        o->n_prompt = (int32_t)n > o->n_prompt ? (int32_t)n : o->n_prompt;
        if (*end == '\0')
            return GRAFT_CLI_RUN;
        p = end + 1;
    }
}

static int parse_speed_options(int argc, char **argv, speed_options *o)
{
    o->prompt_list = "512";
    o->n_gen = 128;
    o->reps = 3;
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, GRAFT_MAX_THREADS, 0},
        {"--kernels", NULL, GRAFT_CLI_STRING, &o->kernels, 0, 0, 0},
        {"--prompt", NULL, GRAFT_CLI_STRING, &o->prompt_list, 0, 0, 0},
        {"--gen", NULL, GRAFT_CLI_INT, &o->n_gen, 1, 1 << 20, 0},
        {"--reps", NULL, GRAFT_CLI_INT, &o->reps, 1, 1000, 0},
        {"--json", NULL, GRAFT_CLI_FLAG, &o->json, 0, 0, 1},
    };
    const graft__cli_command cmd = {SPEED, speed_usage, opts,
                                    sizeof opts / sizeof opts[0], NULL, 0};
    int rc = graft__bench_parse(&cmd, argc, argv, &o->model);
    return rc == GRAFT_CLI_RUN ? parse_prompt_list(o) : rc;
}

static int create_context(bench_state *s, const speed_options *o)
{
    graft_context_options co = graft_context_default_options();
    co.n_ctx = o->n_prompt + o->n_gen;
    co.n_threads = o->threads;
    co.kernels = o->kernels;
    char *err = NULL;
    int rc = graft_context_create_ex(s->model, &co, &s->single, &err);
    if (rc != GRAFT_OK)
        graft__cli_error(SPEED, "%s", err ? err : graft_status_str(rc));
    graft_free(err);
    return rc == GRAFT_OK ? GRAFT_CLI_OK : GRAFT_CLI_FAILED;
}

/* MAX_SEQS sessions of SEQ_CONTEXT + SEQ_GEN positions, or one of n_prompt + n_gen + 1
 * prefilled in one forward pass; the KV budget is the default for the larger of the two. */
static int create_engine(bench_state *s, const speed_options *o)
{
    graft_engine_options eo = graft_engine_default_options(), one;
    eo.max_sessions = MAX_SEQS;
    eo.max_context = SEQ_CONTEXT + SEQ_GEN;
    eo.n_threads = o->threads;
    eo.kernels = o->kernels;
    one = eo;
    one.max_sessions = 1;
    one.max_context = o->n_prompt + o->n_gen + 1;
    size_t kv_many = graft_engine_default_kv_mem(s->model, &eo);
    size_t kv_one = graft_engine_default_kv_mem(s->model, &one);
    eo.kv_mem = kv_many > kv_one ? kv_many : kv_one;
    if (one.max_context > eo.max_context)
        eo.max_context = one.max_context;
    if (o->n_prompt > 512)
        eo.max_batch_tokens = o->n_prompt;
    return graft__bench_engine_create(SPEED, s->model, &eo, &s->engine);
}

static int bench_setup(bench_state *s, const speed_options *o)
{
    if (graft__bench_load_model(SPEED, o->model, &s->model, &s->info) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    s->rng = graft__bench_rng_init(s->info.n_vocab);
    if (create_context(s, o) != GRAFT_CLI_OK || create_engine(s, o) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    s->tokens = malloc((size_t)o->n_prompt * sizeof *s->tokens);
    s->logits = malloc((size_t)s->info.n_vocab * sizeof *s->logits);
    s->samples = calloc((size_t)o->n_prompts * GRAFT_BENCH_N_FIGURES * (size_t)o->reps,
                        sizeof *s->samples);
    if (s->tokens == NULL || s->logits == NULL || s->samples == NULL) {
        graft__cli_error(SPEED, "out of memory");
        return GRAFT_CLI_FAILED;
    }
    if (graft__probe_create(&s->probe, graft_context_threads(s->single)) != 0) {
        graft__cli_error(SPEED, "bandwidth probe: cannot allocate %zu MiB or start its "
                         "threads", GRAFT_PROBE_BYTES >> 20);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

static void bench_free(bench_state *s)
{
    graft_engine_free(s->engine);
    graft_context_free(s->single);
    graft_model_free(s->model);
    free(s->tokens);
    free(s->logits);
    free(s->samples);
    graft__probe_free(&s->probe);
}

/* ---- reporting -------------------------------------------------------------------------- */

/* The KV bytes decode step t (0 <= t < n_gen) reads, averaged over the steps: step t
 * attends over n_prompt + t + 1 positions (a sliding-window layer over at most its
 * window), each holding one layer's share of kv_bytes_per_position (F16 K and V, the
 * context's default KV type). */
static double kv_bytes_per_token(const graft_model_info *info, int32_t n_prompt, int32_t n_gen)
{
    double row = (double)info->kv_bytes_per_position / info->n_layer, sum = 0;
    int32_t n_global = info->n_layer - info->n_swa_layers;
    for (int32_t t = 0; t < n_gen; t++) {
        double keys = (double)n_prompt + t + 1;
        double swa_keys = info->sliding_window > 0 && keys > info->sliding_window
                              ? info->sliding_window
                              : keys;
        sum += row * (n_global * keys + info->n_swa_layers * swa_keys);
    }
    return n_gen > 0 ? sum / n_gen : 0;
}

/* The results of prompt length li (with the aggregates, measured once). */
static void summarize(bench_state *s, const speed_options *o, int32_t li, graft__bench_speed *r)
{
    *r = (graft__bench_speed){
        .engine = "graft",
        .model = o->model,
        .arch = s->info.arch,
        .kernels = graft_context_kernels(s->single),
        .cpu_features = graft_cpu_features(),
        .threads = (int)graft_context_threads(s->single),
        .prompt_tokens = (int)o->prompts[li],
        .gen_tokens = (int)o->n_gen,
        .reps = (int)o->reps,
        .weight_bytes = s->info.weight_bytes,
        .kv_bytes_per_token = kv_bytes_per_token(&s->info, o->prompts[li], o->n_gen),
    };
    for (int f = 0; f < GRAFT_BENCH_N_FIGURES; f++) {
        bool aggregate = f >= GRAFT_BENCH_FIG_AGGREGATE &&
                         f < GRAFT_BENCH_FIG_AGGREGATE + GRAFT_BENCH_N_SEQ_COUNTS;
        r->fig[f] = graft__bench_median(figure_samples(s, o, aggregate ? 0 : li, f), o->reps);
    }
}

/* "  decode     128 tokens after 512          1234.56 tok/s" */
static void print_row(const char *what, const char *detail, double value, const char *unit)
{
    printf("  %-10s %-36s %12.2f %s", what, detail, value, unit);
}

/* The table of one prompt length; the header and the aggregates with the first only. */
static void print_table(const graft__bench_speed *r, bool first)
{
    const double *fig = r->fig;
    graft__bench_rooflines roof = graft__bench_speed_rooflines(r);
    char detail[64];
    if (first) {
        printf("graft bench speed: %s\n", r->model);
        printf("  %s, %.2f MiB of weights; %d thread%s, %s kernels; median of %d run%s\n",
               r->arch, (double)r->weight_bytes / (1024.0 * 1024.0), r->threads,
               r->threads > 1 ? "s" : "", r->kernels, r->reps, r->reps > 1 ? "s" : "");
        printf("  cpu features: %s\n", r->cpu_features);
    }
    printf("\n");
    snprintf(detail, sizeof detail, "%d tokens in one batch, engine", r->prompt_tokens);
    print_row("prefill", detail, fig[GRAFT_BENCH_FIG_PREFILL], "tok/s\n");
    snprintf(detail, sizeof detail, "the same, graft_context");
    print_row("", detail, fig[GRAFT_BENCH_FIG_CONTEXT_PREFILL], "tok/s\n");
    snprintf(detail, sizeof detail, "%d tokens after %d, engine", r->gen_tokens,
             r->prompt_tokens);
    print_row("decode", detail, fig[GRAFT_BENCH_FIG_DECODE], "tok/s");
    printf("  (%.1f%% of the roofline during it; around it %.1f%%, %.1f%% of weights only)\n",
           100.0 * graft__bench_rate(fig[GRAFT_BENCH_FIG_DECODE], roof.during),
           100.0 * graft__bench_rate(fig[GRAFT_BENCH_FIG_DECODE], roof.around),
           100.0 * graft__bench_rate(fig[GRAFT_BENCH_FIG_DECODE], roof.weights));
    snprintf(detail, sizeof detail, "the same, graft_context");
    print_row("", detail, fig[GRAFT_BENCH_FIG_CONTEXT_DECODE], "tok/s\n");
    for (int i = 0; first && i < GRAFT_BENCH_N_SEQ_COUNTS; i++) {
        int n = graft__bench_seq_counts[i];
        snprintf(detail, sizeof detail, "%d session%s, %d tokens after %d", n,
                 n > 1 ? "s" : "", SEQ_GEN, SEQ_CONTEXT);
        print_row(i ? "" : "aggregate", detail, fig[GRAFT_BENCH_FIG_AGGREGATE + i], "tok/s\n");
    }
    snprintf(detail, sizeof detail, "memory read, %d threads, %zu MiB", r->threads,
             GRAFT_PROBE_BYTES >> 20);
    print_row("bandwidth", detail, fig[GRAFT_BENCH_FIG_BANDWIDTH], "GB/s  (around the decode)\n");
    snprintf(detail, sizeof detail, "mean of samples between decoded tokens");
    print_row("", detail, fig[GRAFT_BENCH_FIG_BANDWIDTH_DURING], "GB/s  (during the decode)\n");
    print_row("roofline", "during / (weights + mean KV read)", roof.during, "tok/s");
    printf("  (KV %.2f MiB a token)\n", r->kv_bytes_per_token / (1024.0 * 1024.0));
    print_row("", "around / (weights + mean KV read)", roof.around, "tok/s\n");
    print_row("", "around / weight bytes", roof.weights, "tok/s\n");
}

static int bench_speed(int argc, char **argv)
{
    speed_options o = {0};
    int rc = parse_speed_options(argc, argv, &o);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    bench_state s = {0};
    rc = bench_setup(&s, &o);
    if (rc == GRAFT_CLI_OK)
        rc = measure_all(&s, &o);
    for (int32_t li = 0; rc == GRAFT_CLI_OK && li < o.n_prompts; li++) {
        graft__bench_speed r;
        summarize(&s, &o, li, &r);
        if (o.json)
            graft__bench_speed_json(&r);
        else
            print_table(&r, li == 0);
    }
    bench_free(&s);
    return rc;
}

int graft__cli_bench(int argc, char **argv)
{
    if (argc < 2) {
        fputs(bench_usage, stderr);
        return GRAFT_CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(bench_usage, stdout);
        return GRAFT_CLI_OK;
    }
    if (strcmp(argv[1], "speed") == 0)
        return bench_speed(argc - 1, argv + 1);
    if (strcmp(argv[1], "clone") == 0)
        return graft__cli_bench_clone(argc - 1, argv + 1);
    if (strcmp(argv[1], "prefix") == 0)
        return graft__cli_bench_prefix(argc - 1, argv + 1);
    graft__cli_error("bench", "unknown subcommand '%s' (see 'graft bench --help')", argv[1]);
    return GRAFT_CLI_USAGE;
}
