/*
 * bench_lib.h: the benchmark library both speed harnesses link, `graft bench speed`
 * (src/cli/cmd_bench.c) and llama.cpp's bench/llama_speed.c, so that what they share is one
 * piece of code compiled once: the clock and the median, the fixed-seed stream of token ids,
 * the figures they both measure, the JSON they both print, and the bandwidth probe
 * (bandwidth_probe.h). CMakeLists.txt builds it as libgraftbench.a with the project's flags;
 * bench/setup.sh links llama_speed against that archive (and takes graft__argmax from
 * libgraftcore.a, the object the sampler runs). Plain C11 and POSIX threads: nothing of
 * graft's API. The method is described once, in bench/README.md.
 */
#ifndef GRAFT_BENCH_LIB_H
#define GRAFT_BENCH_LIB_H

#include <stddef.h>
#include <stdint.h>

/* The aggregate decode both harnesses measure: for each of GRAFT_BENCH_SEQ_COUNTS
 * sequences, each first given GRAFT_BENCH_SEQ_CONTEXT tokens, then GRAFT_BENCH_SEQ_GEN more
 * each. GRAFT_BENCH_WARMUP_TOKENS untimed tokens map the weights in first. */
#define GRAFT_BENCH_SEQ_CONTEXT 64
#define GRAFT_BENCH_SEQ_GEN 64
#define GRAFT_BENCH_MAX_SEQS 8
#define GRAFT_BENCH_WARMUP_TOKENS 8
#define GRAFT_BENCH_N_SEQ_COUNTS 4
extern const int graft__bench_seq_counts[GRAFT_BENCH_N_SEQ_COUNTS]; /* 1, 2, 4, 8 */

/* The figures each harness samples once per rep. */
enum {
    GRAFT_BENCH_FIG_PREFILL,
    GRAFT_BENCH_FIG_DECODE,
    GRAFT_BENCH_FIG_AGGREGATE, /* one per entry of graft__bench_seq_counts */
    GRAFT_BENCH_FIG_BANDWIDTH = GRAFT_BENCH_FIG_AGGREGATE + GRAFT_BENCH_N_SEQ_COUNTS,
    GRAFT_BENCH_FIG_BANDWIDTH_DURING,
    GRAFT_BENCH_FIG_CONTEXT_PREFILL, /* graft only: on a graft_context */
    GRAFT_BENCH_FIG_CONTEXT_DECODE,  /* graft only: on a graft_context */
    GRAFT_BENCH_N_FIGURES
};

/* Seconds on the monotonic clock. */
double graft__bench_now_s(void);
/* n / seconds, or 0 when no time passed. */
double graft__bench_rate(double n, double seconds);
/* The median of v[0..n) (sorted in place; the mean of the middle two when n is even). */
double graft__bench_median(double *v, int n);

/* The arguments of a timing loop's command line: [PATH] [--reps N] [--warmup N], each
 * written into its pointer when given (*path stays NULL without one); reps is at least 1. */
void graft__bench_loop_args(int argc, char **argv, const char **path, int *reps, int *warmup);

/* Valid token ids from a fixed-seed xorshift64* stream: the same ids on every run and in
 * both harnesses. */
typedef struct graft__bench_rng {
    uint64_t state;
    int32_t n_vocab;
} graft__bench_rng;

graft__bench_rng graft__bench_rng_init(int32_t n_vocab);
int32_t graft__bench_random_token(graft__bench_rng *rng);
/* Fills tokens[0..n) with random ids. */
void graft__bench_random_tokens(graft__bench_rng *rng, int32_t *tokens, size_t n);

/* One prefill-and-decode run, timed the one way both harnesses time it. step(user, -1)
 * evaluates the prompt; step(user, i) for i in [0, n_gen) picks the next token (the argmax
 * of the last logits) and evaluates it; a step returns 0, or nonzero to stop the run. Only
 * the steps are timed. The bandwidth is sampled just before and just after the run (the
 * larger kept) and during the decode (graft__probe_during, between steps). */
typedef int (*graft__bench_step)(void *user, int32_t i);
typedef struct graft__bench_run {
    double prefill_tps, decode_tps;
    double bandwidth_gbs, bandwidth_during_gbs;
    int step_status; /* what the last step returned */
} graft__bench_run;
struct graft__probe;
/* 0 with *out filled; 1 when a step failed (its value in out->step_status); -1 when the
 * probe could not start its threads. */
int graft__bench_prefill_decode(struct graft__probe *probe, int32_t n_prompt, int32_t n_gen,
                                graft__bench_step step, void *user, graft__bench_run *out);

/* Prints `text` as a JSON string literal on stdout (quotes, backslashes and control
 * characters escaped). */
void graft__bench_json_string(const char *text);

/* What one harness measured: the medians of its figures (GRAFT_BENCH_FIG_*; the two
 * graft_context figures < 0 where the harness has none) and what they were measured on. */
typedef struct graft__bench_speed {
    const char *engine, *model, *arch, *kernels;
    const char *cpu_features; /* the processor's SIMD features, or NULL where not known */
    int threads, prompt_tokens, gen_tokens, reps;
    uint64_t weight_bytes;
    double kv_bytes_per_token; /* mean KV bytes a decoded token reads; 0 where not known */
    double fig[GRAFT_BENCH_N_FIGURES];
} graft__bench_speed;

/* The rooflines of a measurement: bandwidth / bytes read per decoded token. `weights`: the
 * bandwidth around the decode / weight bytes; `around` and `during`: the bandwidth around
 * and during the decode / (weight bytes + kv_bytes_per_token), 0 when that is not known. */
typedef struct graft__bench_rooflines {
    double weights, around, during;
} graft__bench_rooflines;
graft__bench_rooflines graft__bench_speed_rooflines(const graft__bench_speed *s);

/* Prints s as one JSON object and a newline on stdout; bench/README.md lists the fields. */
void graft__bench_speed_json(const graft__bench_speed *s);

#endif /* GRAFT_BENCH_LIB_H */
