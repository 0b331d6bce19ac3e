/*
 * cmd_bench.c: `graft bench`: the subcommand dispatcher, and `graft bench speed`, measured
 * so it can be set side by side with llama.cpp. (`graft bench clone` is cmd_bench_clone.c,
 * `graft bench prefix` cmd_bench_prefix.c; the helpers they share are bench_util.c.)
 *
 * `graft bench speed` measures through the public API only, as bench/llama_speed.c measures
 * llama.cpp through its C API (same figures, same token counts, same JSON field names), so
 * bench/compare.sh can put the two in one table:
 *   - prefill: a prompt of random valid token ids evaluated in one batch (tokens/s), for
 *     each prompt length of --prompt (a list, e.g. 512,4096);
 *   - decode: tokens evaluated one at a time after that prompt, each the argmax of the
 *     previous logits (tokens/s);
 *   - aggregate decode, through the engine: 1, 2, 4 and 8 sessions, each first given a
 *     64-token context, then all generating 64 greedy tokens at once, as concurrent
 *     graft_session_generate calls that the engine's scheduler batches (tokens of all
 *     sessions / time from the first submission to the last generation done);
 *   - memory-read bandwidth: every thread streaming over its slice of a 512 MiB buffer
 *     (GB/s), sampled during the decode (one read every GRAFT_PROBE_EVERY decoded tokens
 *     after a short pause, not timed as decode; their mean), and around each prefill and
 *     decode run (just before and just after, each sample the best of 3 reads, the larger
 *     of the two being the run's). A machine's bandwidth can change from second to second
 *     with where its virtual cores run (bandwidth_probe.h), so the roofline is taken in
 *     the states the decode ran in; the one around it is the best the machine gave near
 *     the run. The decode roofline each implies: bandwidth / bytes read per decoded token.
 *     Those bytes are the weights, counted as graft_model_info.weight_bytes (all tensor
 *     data: exact for a model whose output matrix is its token embedding, as in every graft
 *     synth preset; for an untied embedding, of which a step reads one row, it overcounts,
 *     as the public API does not say which it is), plus the keys and values of the context
 *     each decoded token attends over, averaged over the decode (kv_bytes_per_token). The
 *     weights-only roofline is reported too.
 * Prefill and decode run on a graft_context (the kernels and forward pass alone, as
 * llama_decode is measured); the aggregate runs on an engine of MAX_SEQS sessions. Before
 * the timed runs, a short untimed evaluation on the context and a generation on the engine
 * map the weights in. Each figure is the median of --reps runs. The report names the kernel
 * set and the processor's SIMD features (graft_cpu_features). A timing never fails
 * anything (DESIGN.md §5).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth_probe.h"
#include "bench.h"
#include "util/argmax.h"

#define SEQ_CONTEXT 64                 /* tokens each session holds before aggregate decode */
#define SEQ_GEN 64                     /* tokens each session generates in aggregate decode */
#define MAX_SEQS 8                     /* the largest session count measured */
#define SPEED "bench speed"            /* the command, in messages */
#define WARMUP_TOKENS 8                /* untimed tokens that map the weights in */
#define MAX_PROMPTS 16                 /* prompt lengths in one --prompt list */

static const int32_t seq_counts[] = {1, 2, 4, 8};
#define N_SEQ_COUNTS ((int)(sizeof seq_counts / sizeof seq_counts[0]))

/* The figures, each sampled once per rep. */
enum { FIG_PREFILL, FIG_DECODE, FIG_AGGREGATE, FIG_BANDWIDTH = FIG_AGGREGATE + N_SEQ_COUNTS,
       FIG_BANDWIDTH_DURING, N_FIGURES };

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
    "Measures, on random valid token ids:\n"
    "  prefill    a prompt of --prompt tokens evaluated in one batch (each length of\n"
    "             the list in turn, every rep)\n"
    "  decode     --gen tokens evaluated one at a time after that prompt, each the argmax\n"
    "             of the previous logits\n"
    "  aggregate  through the engine: 1, 2, 4 and 8 sessions, each given a 64-token\n"
    "             context, then all generating 64 greedy tokens concurrently (tokens of\n"
    "             all sessions / time from the first submission to the last one done)\n"
    "  bandwidth  memory read by all threads streaming over a 512 MiB buffer, sampled\n"
    "             around each prefill and decode run (just before and just after, the\n"
    "             best of 3 reads each time, the larger of the two kept) and during the\n"
    "             decode (one read every 8 decoded tokens after a 2 ms pause, not timed\n"
    "             as decode; their mean);\n"
    "             the decode roofline is bandwidth / bytes a decoded token reads: the\n"
    "             weight bytes (all tensor data) plus the F16 keys and values of its\n"
    "             context (sliding-window layers: of their window), averaged over the\n"
    "             decoded tokens, from the bandwidth during the decode and from the one\n"
    "             around it; the weights-only roofline (bandwidth around / weight bytes)\n"
    "             is printed too\n"
    "Each figure is the median of --reps runs, after an untimed warm-up. The kernel set\n"
    "and the processor's SIMD features are printed with them.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE   GGUF model\n"
    "  --threads N        compute threads (default 0: one per online CPU)\n"
    "  --kernels K        scalar, avx2 or avx512 (default: $GRAFT_KERNELS, else the best)\n"
    "  --prompt N[,N...]  prefill tokens, or a list of lengths (default 512); the\n"
    "                     context holds the longest plus --gen\n"
    "  --gen N            decode tokens (default 128)\n"
    "  --reps N           runs per figure, the median is reported (default 3)\n"
    "  --json             print one JSON object (a line per prompt length) instead of\n"
    "                     the table\n"
    "  -h, --help         show this help\n"
    "\n"
    "JSON fields: engine (\"graft\"), model (the path), arch, threads, kernels,\n"
    "cpu_features, prompt_tokens, gen_tokens, seq_context_tokens, seq_gen_tokens, reps,\n"
    "weight_bytes, prefill_tps, decode_tps,\n"
    "aggregate_tps ({\"1\": tok/s, \"2\": .., \"4\": .., \"8\": ..}),\n"
    "bandwidth_gbs (around the decode, 1e9 bytes/s), kv_bytes_per_token (mean KV bytes a\n"
    "decoded token reads), decode_roofline_tps (bandwidth_gbs / (weight_bytes +\n"
    "kv_bytes_per_token)), decode_roofline_weights_tps (bandwidth_gbs / weight_bytes),\n"
    "bandwidth_during_gbs (during the decode), decode_roofline_during_tps\n"
    "(bandwidth_during_gbs / (weight_bytes + kv_bytes_per_token)).\n";

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
    graft_engine *engine;  /* MAX_SEQS sessions of SEQ_CONTEXT + SEQ_GEN positions */
    int32_t *tokens;       /* (n_prompt) */
    float *logits;         /* (n_vocab) */
    double *samples;       /* (n_prompts, N_FIGURES, reps); aggregates in the first only */
    graft__bench_rng rng;
    graft__probe probe;    /* the bandwidth probe, one thread per compute thread */
} bench_state;

/* The samples of a figure for prompt length li (the aggregates: li 0). */
static double *figure_samples(bench_state *s, const speed_options *o, int32_t li, int figure)
{
    return s->samples + ((size_t)li * N_FIGURES + (size_t)figure) * (size_t)o->reps;
}

/* ---- the model measurements ------------------------------------------------------------- */

static int probe_failed(void)
{
    graft__cli_error(SPEED, "bandwidth probe: cannot start its threads");
    return GRAFT_CLI_FAILED;
}

/* Prefill of prompts[li] tokens, then n_gen single-token decodes, on sequence 0. The bandwidth
 * is sampled twice: the larger of a sample just before and one just after (each the best
 * of 3 reads), and the mean of the samples taken between decoded tokens
 * (graft__probe_during; their pauses and reads are not timed as decode). */
static int measure_prefill_decode(bench_state *s, const speed_options *o, int32_t li, int rep)
{
    int32_t n_vocab = s->info.n_vocab, n_prompt = o->prompts[li];
    graft_context_seq_reset(s->single, 0);
    graft__bench_random_tokens(&s->rng, s->tokens, (size_t)n_prompt);
    double before, after, during = 0, decode_s = 0;
    int n_during = 0;
    if (graft__probe_sample(&s->probe, &before) != 0)
        return probe_failed();
    double t0 = graft__bench_now_s();
    int rc = graft_context_eval(s->single, s->tokens, (size_t)n_prompt, s->logits);
    double t1 = graft__bench_now_s();
    for (int32_t i = 0; rc == GRAFT_OK && i < o->n_gen; i++) {
        if (graft__probe_during(&s->probe, i, o->n_gen, &during, &n_during) != 0)
            return probe_failed();
        double t = graft__bench_now_s();
        int32_t next = graft__argmax(s->logits, n_vocab);
        rc = graft_context_eval(s->single, &next, 1, s->logits);
        decode_s += graft__bench_now_s() - t;
    }
    if (graft__probe_sample(&s->probe, &after) != 0)
        return probe_failed();
    figure_samples(s, o, li, FIG_PREFILL)[rep] = graft__bench_rate(n_prompt, t1 - t0);
    figure_samples(s, o, li, FIG_DECODE)[rep] = graft__bench_rate(o->n_gen, decode_s);
    figure_samples(s, o, li, FIG_BANDWIDTH)[rep] = before > after ? before : after;
    figure_samples(s, o, li, FIG_BANDWIDTH_DURING)[rep] = n_during > 0 ? during / n_during : 0;
    if (rc != GRAFT_OK) {
        graft__cli_error(SPEED, "evaluation failed: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
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
    graft_context_seq_reset(s->single, 0);
    if (rc != GRAFT_OK) {
        graft__cli_error(SPEED, "evaluation failed: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
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
        for (int i = 0; rc == GRAFT_CLI_OK && i < N_SEQ_COUNTS; i++)
            rc = measure_aggregate(s, seq_counts[i],
                                   &figure_samples(s, o, 0, FIG_AGGREGATE + i)[rep]);
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
            return -1;
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
    int rc = graft__cli_parse(&cmd, argc, argv, NULL);
    if (rc < 0 && o->model == NULL) {
        graft__cli_error(SPEED, "missing -m MODEL (see 'graft bench speed --help')");
        return GRAFT_CLI_USAGE;
    }
    return rc < 0 ? parse_prompt_list(o) : rc;
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

/* MAX_SEQS sessions of SEQ_CONTEXT + SEQ_GEN positions; the KV budget is the default. */
static int create_engine(bench_state *s, const speed_options *o)
{
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = MAX_SEQS;
    eo.max_context = SEQ_CONTEXT + SEQ_GEN;
    eo.n_threads = o->threads;
    eo.kernels = o->kernels;
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
    s->samples = calloc((size_t)o->n_prompts * N_FIGURES * (size_t)o->reps, sizeof *s->samples);
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
    graft_engine_shutdown(s->engine);
    graft_context_free(s->single);
    graft_model_free(s->model);
    free(s->tokens);
    free(s->logits);
    free(s->samples);
    graft__probe_free(&s->probe);
}

/* ---- reporting -------------------------------------------------------------------------- */

typedef struct speed_results {
    double fig[N_FIGURES]; /* medians */
    double kv_bytes;       /* mean KV bytes read per decoded token */
    double roofline_tps;   /* bandwidth / (weight bytes + kv_bytes) */
    double roofline_weights_tps; /* bandwidth / weight bytes */
    double roofline_during_tps;  /* bandwidth during the decode / (weight bytes + kv_bytes) */
} speed_results;

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

/* The results for prompt length li (with the aggregates, which are measured once). */
static void summarize(bench_state *s, const speed_options *o, int32_t li, speed_results *r)
{
    for (int f = 0; f < N_FIGURES; f++) {
        const bool shared = f >= FIG_AGGREGATE && f < FIG_AGGREGATE + N_SEQ_COUNTS;
        r->fig[f] = graft__bench_median(figure_samples(s, o, shared ? 0 : li, f), o->reps);
    }
    r->kv_bytes = kv_bytes_per_token(&s->info, o->prompts[li], o->n_gen);
    r->roofline_tps = graft__bench_rate(r->fig[FIG_BANDWIDTH] * 1e9,
                                        (double)s->info.weight_bytes + r->kv_bytes);
    r->roofline_weights_tps =
        graft__bench_rate(r->fig[FIG_BANDWIDTH] * 1e9, (double)s->info.weight_bytes);
    r->roofline_during_tps = graft__bench_rate(r->fig[FIG_BANDWIDTH_DURING] * 1e9,
                                               (double)s->info.weight_bytes + r->kv_bytes);
}

/* One JSON object (a line) for prompt length li. */
static void print_json(const bench_state *s, const speed_options *o, int32_t li,
                       const speed_results *r)
{
    printf("{\"engine\": \"graft\", \"model\": ");
    graft__bench_json_string(o->model);
    printf(", \"arch\": ");
    graft__bench_json_string(s->info.arch);
    printf(", \"threads\": %d, \"kernels\": ", (int)graft_context_threads(s->single));
    graft__bench_json_string(graft_context_kernels(s->single));
    printf(", \"cpu_features\": ");
    graft__bench_json_string(graft_cpu_features());
    printf(", \"prompt_tokens\": %d, \"gen_tokens\": %d, \"seq_context_tokens\": %d, "
           "\"seq_gen_tokens\": %d, \"reps\": %d, \"weight_bytes\": %llu",
           (int)o->prompts[li], (int)o->n_gen, SEQ_CONTEXT, SEQ_GEN, (int)o->reps,
           (unsigned long long)s->info.weight_bytes);
    printf(", \"prefill_tps\": %.3f, \"decode_tps\": %.3f, \"aggregate_tps\": {",
           r->fig[FIG_PREFILL], r->fig[FIG_DECODE]);
    for (int i = 0; i < N_SEQ_COUNTS; i++)
        printf("%s\"%d\": %.3f", i ? ", " : "", (int)seq_counts[i], r->fig[FIG_AGGREGATE + i]);
    printf("}, \"bandwidth_gbs\": %.3f, \"kv_bytes_per_token\": %.0f, "
           "\"decode_roofline_tps\": %.3f, \"decode_roofline_weights_tps\": %.3f, "
           "\"bandwidth_during_gbs\": %.3f, \"decode_roofline_during_tps\": %.3f}\n",
           r->fig[FIG_BANDWIDTH], r->kv_bytes, r->roofline_tps, r->roofline_weights_tps,
           r->fig[FIG_BANDWIDTH_DURING], r->roofline_during_tps);
}

/* "  decode     128 tokens after 512          1234.56 tok/s" */
static void print_row(const char *what, const char *detail, double value, const char *unit)
{
    printf("  %-10s %-36s %12.2f %s", what, detail, value, unit);
}

static void print_header(const bench_state *s, const speed_options *o)
{
    printf("graft bench speed: %s\n", o->model);
    int32_t threads = graft_context_threads(s->single);
    printf("  %s, %.2f MiB of weights; %d thread%s, %s kernels; median of %d run%s\n",
           s->info.arch, (double)s->info.weight_bytes / (1024.0 * 1024.0), (int)threads,
           threads > 1 ? "s" : "", graft_context_kernels(s->single), (int)o->reps,
           o->reps > 1 ? "s" : "");
    printf("  cpu features: %s\n", graft_cpu_features());
}

/* The rows of prompt length li; the aggregates with the first only. */
static void print_table(const bench_state *s, const speed_options *o, int32_t li,
                        const speed_results *r)
{
    char detail[64];
    printf("\n");
    snprintf(detail, sizeof detail, "%d tokens in one batch", (int)o->prompts[li]);
    print_row("prefill", detail, r->fig[FIG_PREFILL], "tok/s\n");
    snprintf(detail, sizeof detail, "%d tokens after %d", (int)o->n_gen, (int)o->prompts[li]);
    print_row("decode", detail, r->fig[FIG_DECODE], "tok/s");
    printf("  (%.1f%% of the roofline during it; around it %.1f%%, %.1f%% of weights only)\n",
           100.0 * graft__bench_rate(r->fig[FIG_DECODE], r->roofline_during_tps),
           100.0 * graft__bench_rate(r->fig[FIG_DECODE], r->roofline_tps),
           100.0 * graft__bench_rate(r->fig[FIG_DECODE], r->roofline_weights_tps));
    for (int i = 0; li == 0 && i < N_SEQ_COUNTS; i++) {
        snprintf(detail, sizeof detail, "%d session%s, %d tokens after %d", (int)seq_counts[i],
                 seq_counts[i] > 1 ? "s" : "", SEQ_GEN, SEQ_CONTEXT);
        print_row(i ? "" : "aggregate", detail, r->fig[FIG_AGGREGATE + i], "tok/s\n");
    }
    snprintf(detail, sizeof detail, "memory read, %d threads, %zu MiB",
             (int)graft_context_threads(s->single), GRAFT_PROBE_BYTES >> 20);
    print_row("bandwidth", detail, r->fig[FIG_BANDWIDTH], "GB/s  (around the decode)\n");
    snprintf(detail, sizeof detail, "mean of samples between decoded tokens");
    print_row("", detail, r->fig[FIG_BANDWIDTH_DURING], "GB/s  (during the decode)\n");
    print_row("roofline", "during / (weights + mean KV read)", r->roofline_during_tps, "tok/s");
    printf("  (KV %.2f MiB a token)\n", r->kv_bytes / (1024.0 * 1024.0));
    print_row("", "around / (weights + mean KV read)", r->roofline_tps, "tok/s\n");
    print_row("", "around / weight bytes", r->roofline_weights_tps, "tok/s\n");
}

static int bench_speed(int argc, char **argv)
{
    speed_options o = {0};
    int rc = parse_speed_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    bench_state s = {0};
    rc = bench_setup(&s, &o);
    if (rc == GRAFT_CLI_OK)
        rc = measure_all(&s, &o);
    if (rc == GRAFT_CLI_OK && !o.json)
        print_header(&s, &o);
    for (int32_t li = 0; rc == GRAFT_CLI_OK && li < o.n_prompts; li++) {
        speed_results r;
        summarize(&s, &o, li, &r);
        if (o.json)
            print_json(&s, &o, li, &r);
        else
            print_table(&s, &o, li, &r);
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
