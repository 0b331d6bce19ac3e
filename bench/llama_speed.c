/*
 * llama_speed.c: the llama.cpp peer of `graft bench speed` (src/cli/cmd_bench.c).
 *
 * A small harness on llama.cpp's C API (include/llama.h of the exact release bundled by
 * node-llama-cpp; bench/setup.sh builds it against those headers and prebuilt libraries,
 * nothing of llama.cpp is committed). It links graft's benchmark library
 * (src/bench/bench_lib.h: the token stream, the medians, the bandwidth probe, the JSON)
 * and graft's argmax, and measures what graft's benchmark measures, the same way, on the
 * same GGUF file and thread count; bench/README.md describes the method. Prefill is one
 * llama_decode (n_batch = n_ubatch = max(512, --prompt)); the aggregate decode runs in one
 * context of n_seq_max 8; n_threads and n_threads_batch are both --threads, everything else
 * is llama.cpp's default (F16 KV cache, flash attention "auto", per-sequence KV streams).
 * `--check` only loads the model and decodes a few tokens: exit status 0 when llama.cpp
 * runs the file, else 1 with its error on stderr.
 *
 * The CPU backend variants (libggml-cpu-*.so) are loaded from $GGML_BACKEND_DIR, else from
 * the folder setup.sh compiled in (LLAMA_BINS_DIR).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bandwidth_probe.h" /* the same measurement as graft's */
#include "bench/bench_lib.h"
#include "util/argmax.h" /* graft's argmax, the same harness cost */
#include "ggml-backend.h"
#include "llama.h"

#ifndef LLAMA_BINS_DIR
#error "compile with -DLLAMA_BINS_DIR=\"<folder of libllama and libggml-cpu-*.so>\""
#endif

#define SEQ_CONTEXT GRAFT_BENCH_SEQ_CONTEXT
#define SEQ_GEN GRAFT_BENCH_SEQ_GEN
#define MAX_SEQS GRAFT_BENCH_MAX_SEQS
#define WARMUP_TOKENS GRAFT_BENCH_WARMUP_TOKENS

static const char usage[] =
    "usage: llama_speed -m MODEL [--threads N] [--prompt N] [--gen N] [--reps N] [--json]\n"
    "       llama_speed -m MODEL [--threads N] --check\n"
    "\n"
    "llama.cpp's figures for bench/compare.sh, measured as `graft bench speed` measures\n"
    "graft's (bench/README.md describes both). --check only tests that\n"
    "llama.cpp loads the model and decodes a few tokens. --verbose keeps llama.cpp's log.\n";

typedef struct options {
    const char *model;
    int threads, n_prompt, n_gen, reps;
    int json, check, verbose;
} options;

typedef struct state {
    struct llama_model *model;
    struct llama_context *single; /* one sequence of n_prompt + n_gen positions */
    struct llama_context *multi;  /* MAX_SEQS sequences of SEQ_CONTEXT + SEQ_GEN positions */
    struct llama_batch batch;     /* room for max(n_prompt, MAX_SEQS * SEQ_CONTEXT) tokens */
    int32_t n_vocab;
    int32_t n_prompt;             /* --prompt */
    double *samples;              /* (GRAFT_BENCH_N_FIGURES, reps) */
    graft__bench_rng rng;
} state;

/* ---- options ---------------------------------------------------------------------------- */

/* Parses a whole decimal argument within [min, max]; exits with status 2 otherwise. */
static int parse_int(const char *opt, const char *value, int min, int max)
{
    char *end;
    errno = 0;
    long v = value ? strtol(value, &end, 10) : 0;
    if (value == NULL || *value == '\0' || *end != '\0' || errno || v < min || v > max) {
        fprintf(stderr, "llama_speed: option %s needs an integer in [%d, %d]\n", opt, min,
                max);
        exit(2);
    }
    return (int)v;
}

/* The value after option argv[*i] (consumed), or NULL when it is the last argument. */
static const char *take_value(int argc, char **argv, int *i)
{
    return *i + 1 < argc ? argv[++*i] : NULL;
}

static void parse_options(int argc, char **argv, options *o)
{
    *o = (options){.n_prompt = 512, .n_gen = 128, .reps = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0)
            o->model = take_value(argc, argv, &i);
        else if (strcmp(a, "--threads") == 0)
            o->threads = parse_int(a, take_value(argc, argv, &i), 0, 4096);
        else if (strcmp(a, "--prompt") == 0)
            o->n_prompt = parse_int(a, take_value(argc, argv, &i), 1, 1 << 20);
        else if (strcmp(a, "--gen") == 0)
            o->n_gen = parse_int(a, take_value(argc, argv, &i), 1, 1 << 20);
        else if (strcmp(a, "--reps") == 0)
            o->reps = parse_int(a, take_value(argc, argv, &i), 1, 1000);
        else if (strcmp(a, "--json") == 0)
            o->json = 1;
        else if (strcmp(a, "--check") == 0)
            o->check = 1;
        else if (strcmp(a, "--verbose") == 0)
            o->verbose = 1;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        } else {
            fprintf(stderr, "llama_speed: unexpected argument '%s'\n%s", a, usage);
            exit(2);
        }
    }
    if (o->model == NULL) {
        fprintf(stderr, "llama_speed: missing -m MODEL\n%s", usage);
        exit(2);
    }
    if (o->threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = cpus < 1 ? 1 : (int)cpus;
    }
}

static double *figure_samples(state *s, const options *o, int figure)
{
    return s->samples + (size_t)figure * (size_t)o->reps;
}

/* ---- llama.cpp ---------------------------------------------------------------------------- */

static void log_errors_only(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* "avx512", "avx2" or "other": the widest x86 vector set of the CPU backend loaded. */
static const char *cpu_kernels(void)
{
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    ggml_backend_get_features_t get =
        reg ? (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(
                  reg, "ggml_backend_get_features")
            : NULL;
    int avx2 = 0, avx512 = 0;
    for (struct ggml_backend_feature *f = get ? get(reg) : NULL; f && f->name; f++) {
        avx2 |= strcmp(f->name, "AVX2") == 0;
        avx512 |= strcmp(f->name, "AVX512") == 0;
    }
    return avx512 ? "avx512" : avx2 ? "avx2" : "other";
}

static struct llama_context *create_context(state *s, const options *o, int n_seq, int n_ctx)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_seq * n_ctx);
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_batch = cp.n_ubatch = (uint32_t)(o->n_prompt > 512 ? o->n_prompt : 512);
    cp.n_threads = cp.n_threads_batch = o->threads;
    return llama_init_from_model(s->model, cp);
}

static int setup(state *s, const options *o)
{
    const char *dir = getenv("GGML_BACKEND_DIR");
    ggml_backend_load_all_from_path(dir && dir[0] ? dir : LLAMA_BINS_DIR);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    s->model = llama_model_load_from_file(o->model, mp);
    if (s->model == NULL) {
        fprintf(stderr, "llama_speed: llama.cpp cannot load '%s'\n", o->model);
        return -1;
    }
    s->n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(s->model));
    s->n_prompt = o->n_prompt;
    s->single = create_context(s, o, 1, o->n_prompt + o->n_gen);
    s->multi = create_context(s, o, MAX_SEQS, SEQ_CONTEXT + SEQ_GEN);
    if (s->single == NULL || s->multi == NULL) {
        fprintf(stderr, "llama_speed: llama.cpp cannot create a context for '%s'\n", o->model);
        return -1;
    }
    int room = o->n_prompt > MAX_SEQS * SEQ_CONTEXT ? o->n_prompt : MAX_SEQS * SEQ_CONTEXT;
    s->batch = llama_batch_init(room, 0, 1);
    s->samples = calloc((size_t)GRAFT_BENCH_N_FIGURES * (size_t)o->reps, sizeof *s->samples);
    s->rng = graft__bench_rng_init(s->n_vocab);
    return s->samples ? 0 : -1;
}

static void teardown(state *s)
{
    if (s->batch.token)
        llama_batch_free(s->batch);
    llama_free(s->single);
    llama_free(s->multi);
    llama_model_free(s->model);
    llama_backend_free();
    free(s->samples);
}

/* Appends one token to the batch: sequence seq, position pos. */
static void batch_add(struct llama_batch *b, int32_t token, int32_t pos, int32_t seq,
                      int want_logits)
{
    int i = b->n_tokens++;
    b->token[i] = token;
    b->pos[i] = pos;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = seq;
    b->logits[i] = (int8_t)(want_logits != 0);
}

/* llama_decode, with the reason on stderr when it fails. */
static int decode(struct llama_context *ctx, struct llama_batch b)
{
    int rc = llama_decode(ctx, b);
    if (rc != 0)
        fprintf(stderr, "llama_speed: llama_decode of %d tokens failed (%d)\n", b.n_tokens, rc);
    return rc;
}

static void reset_seq(struct llama_context *ctx, int32_t seq)
{
    llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
}

/* Evaluates n random tokens on sequence 0 of ctx from position 0, then forgets them. */
static int warm_up(state *s, struct llama_context *ctx, int n)
{
    s->batch.n_tokens = 0;
    for (int i = 0; i < n; i++)
        batch_add(&s->batch, graft__bench_random_token(&s->rng), i, 0, i + 1 == n);
    int rc = decode(ctx, s->batch);
    reset_seq(ctx, 0);
    return rc;
}

static int probe_failed(void)
{
    fprintf(stderr, "llama_speed: bandwidth probe: cannot start its threads\n");
    return -1;
}

/* A step of the prefill-and-decode run (graft__bench_prefill_decode): the prompt already in
 * the batch, or the argmax of the last logits. */
static int single_step(void *user, int32_t i)
{
    state *s = user;
    if (i >= 0) {
        int32_t next = graft__argmax(llama_get_logits_ith(s->single, -1), s->n_vocab);
        s->batch.n_tokens = 0;
        batch_add(&s->batch, next, s->n_prompt + i, 0, 1);
    }
    return decode(s->single, s->batch);
}

/* Prefill and decode on sequence 0, with the bandwidth samples, as graft's. */
static int measure_prefill_decode(state *s, const options *o, graft__probe *p, int rep)
{
    reset_seq(s->single, 0);
    s->batch.n_tokens = 0;
    for (int i = 0; i < o->n_prompt; i++)
        batch_add(&s->batch, graft__bench_random_token(&s->rng), i, 0, i + 1 == o->n_prompt);
    graft__bench_run r;
    int rc = graft__bench_prefill_decode(p, o->n_prompt, o->n_gen, single_step, s, &r);
    if (rc < 0)
        return probe_failed();
    figure_samples(s, o, GRAFT_BENCH_FIG_PREFILL)[rep] = r.prefill_tps;
    figure_samples(s, o, GRAFT_BENCH_FIG_DECODE)[rep] = r.decode_tps;
    figure_samples(s, o, GRAFT_BENCH_FIG_BANDWIDTH)[rep] = r.bandwidth_gbs;
    figure_samples(s, o, GRAFT_BENCH_FIG_BANDWIDTH_DURING)[rep] = r.bandwidth_during_gbs;
    return rc;
}

/* Resets sequence seq and gives it SEQ_CONTEXT random tokens; *next = the argmax after. */
static int give_context(state *s, int32_t seq, int32_t *next)
{
    reset_seq(s->multi, seq);
    s->batch.n_tokens = 0;
    for (int i = 0; i < SEQ_CONTEXT; i++)
        batch_add(&s->batch, graft__bench_random_token(&s->rng), i, seq, i + 1 == SEQ_CONTEXT);
    int rc = decode(s->multi, s->batch);
    if (rc == 0)
        *next = graft__argmax(llama_get_logits_ith(s->multi, -1), s->n_vocab);
    return rc;
}

static int measure_aggregate(state *s, int n_seqs, double *tps)
{
    int32_t next[MAX_SEQS];
    int rc = 0;
    for (int seq = 0; rc == 0 && seq < n_seqs; seq++)
        rc = give_context(s, seq, &next[seq]);
    double t0 = graft__bench_now_s();
    for (int step = 0; rc == 0 && step < SEQ_GEN; step++) {
        s->batch.n_tokens = 0;
        for (int seq = 0; seq < n_seqs; seq++)
            batch_add(&s->batch, next[seq], SEQ_CONTEXT + step, seq, 1);
        rc = decode(s->multi, s->batch);
        for (int seq = 0; rc == 0 && seq < n_seqs; seq++)
            next[seq] = graft__argmax(llama_get_logits_ith(s->multi, seq), s->n_vocab);
    }
    *tps = graft__bench_rate((double)n_seqs * SEQ_GEN, graft__bench_now_s() - t0);
    return rc;
}

static int measure_all(state *s, const options *o)
{
    graft__probe p = {0};
    int rc = graft__probe_create(&p, o->threads);
    if (rc != 0)
        fprintf(stderr, "llama_speed: bandwidth probe: cannot allocate %zu MiB or start "
                        "its threads\n", GRAFT_PROBE_BYTES >> 20);
    if (rc == 0)
        rc = warm_up(s, s->single, WARMUP_TOKENS);
    if (rc == 0)
        rc = warm_up(s, s->multi, WARMUP_TOKENS);
    for (int rep = 0; rc == 0 && rep < o->reps; rep++) {
        rc = measure_prefill_decode(s, o, &p, rep);
        for (int i = 0; rc == 0 && i < GRAFT_BENCH_N_SEQ_COUNTS; i++)
            rc = measure_aggregate(s, graft__bench_seq_counts[i],
                                   &figure_samples(s, o, GRAFT_BENCH_FIG_AGGREGATE + i)[rep]);
    }
    graft__probe_free(&p);
    return rc;
}

/* ---- reporting ------------------------------------------------------------------------- */

static void print_table(const graft__bench_speed *r)
{
    const double *fig = r->fig;
    printf("llama.cpp speed: %s (%d threads, %s, median of %d)\n", r->model, r->threads,
           r->kernels, r->reps);
    printf("  prefill    %12.2f tok/s  (%d tokens in one batch)\n",
           fig[GRAFT_BENCH_FIG_PREFILL], r->prompt_tokens);
    printf("  decode     %12.2f tok/s  (%d tokens after %d)\n", fig[GRAFT_BENCH_FIG_DECODE],
           r->gen_tokens, r->prompt_tokens);
    for (int i = 0; i < GRAFT_BENCH_N_SEQ_COUNTS; i++)
        printf("  aggregate  %12.2f tok/s  (%d sequence%s)\n",
               fig[GRAFT_BENCH_FIG_AGGREGATE + i], graft__bench_seq_counts[i],
               graft__bench_seq_counts[i] > 1 ? "s" : "");
    printf("  bandwidth  %12.2f GB/s  (around the decode)\n", fig[GRAFT_BENCH_FIG_BANDWIDTH]);
    printf("             %12.2f GB/s  (during the decode)\n",
           fig[GRAFT_BENCH_FIG_BANDWIDTH_DURING]);
    printf("  roofline   %12.2f tok/s  (%llu weight bytes)\n",
           graft__bench_speed_rooflines(r).weights, (unsigned long long)r->weight_bytes);
}

static void report(state *s, const options *o)
{
    static char arch[64];
    llama_model_meta_val_str(s->model, "general.architecture", arch, sizeof arch);
    graft__bench_speed r = {
        .engine = "llama.cpp",
        .model = o->model,
        .arch = arch,
        .kernels = cpu_kernels(),
        .threads = o->threads,
        .prompt_tokens = o->n_prompt,
        .gen_tokens = o->n_gen,
        .reps = o->reps,
        .weight_bytes = llama_model_size(s->model),
    };
    for (int f = 0; f < GRAFT_BENCH_N_FIGURES; f++)
        r.fig[f] = graft__bench_median(figure_samples(s, o, f), o->reps);
    r.fig[GRAFT_BENCH_FIG_CONTEXT_PREFILL] = r.fig[GRAFT_BENCH_FIG_CONTEXT_DECODE] = -1;
    if (o->json)
        graft__bench_speed_json(&r);
    else
        print_table(&r);
}

int main(int argc, char **argv)
{
    options o;
    parse_options(argc, argv, &o);
    if (!o.verbose)
        llama_log_set(log_errors_only, NULL);
    state s = {0};
    int rc = setup(&s, &o);
    if (rc == 0 && o.check) {
        rc = warm_up(&s, s.single, WARMUP_TOKENS);
        if (rc == 0)
            rc = warm_up(&s, s.multi, WARMUP_TOKENS);
        if (rc == 0)
            printf("llama.cpp runs %s (%s kernels)\n", o.model, cpu_kernels());
    } else if (rc == 0) {
        rc = measure_all(&s, &o);
        if (rc == 0)
            report(&s, &o);
    }
    teardown(&s);
    return rc == 0 ? 0 : 1;
}
