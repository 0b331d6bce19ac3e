/*
 * bench.h: what the `graft bench` subcommands share (bench_util.c): clocks and medians, the
 * fixed-seed stream of random token ids, JSON strings, peak RSS, and loading a model or
 * starting an engine with the error reported the bench way.
 *
 * Like the rest of src/cli/, written against include/graft.h only. cmd_bench.c dispatches
 * `graft bench SUBCOMMAND` and holds `speed`; cmd_bench_clone.c holds `clone`,
 * cmd_bench_prefix.c `prefix`.
 */
#ifndef GRAFT_CLI_BENCH_H
#define GRAFT_CLI_BENCH_H

#include "cli.h"

/* Seconds on the monotonic clock. */
double graft__bench_now_s(void);
/* n / seconds, or 0 when no time passed. */
double graft__bench_rate(double n, double seconds);
/* The median of v[0..n) (sorted in place; the mean of the middle two when n is even). */
double graft__bench_median(double *v, int n);

/* Valid token ids from a fixed-seed xorshift64* stream: the same ids on every run (and the
 * same as bench/llama_speed.c draws). */
typedef struct graft__bench_rng {
    uint64_t state;
    int32_t n_vocab;
} graft__bench_rng;

graft__bench_rng graft__bench_rng_init(int32_t n_vocab);
int32_t graft__bench_random_token(graft__bench_rng *rng);
/* Fills tokens[0..n) with random ids. */
void graft__bench_random_tokens(graft__bench_rng *rng, int32_t *tokens, size_t n);

/* Prints `text` as a JSON string literal on stdout (quotes, backslashes and control
 * characters escaped). */
void graft__bench_json_string(const char *text);

/* The process's peak resident set size so far, in bytes (getrusage). */
uint64_t graft__bench_peak_rss(void);

/* Loads the model at `path`; on failure prints "graft COMMAND: <message>" and returns
 * GRAFT_CLI_FAILED. */
int graft__bench_load_model(const char *command, const char *path, graft_model **model,
                            graft_model_info *info);

/* Starts an engine; on failure prints the engine's message and returns GRAFT_CLI_FAILED. */
int graft__bench_engine_create(const char *command, const graft_model *model,
                               const graft_engine_options *opts, graft_engine **engine);

/* Queues a generation on `session`: feeds tokens[0..n) and samples max_new greedy tokens;
 * end-of-generation tokens do not stop it. On failure prints why and returns
 * GRAFT_CLI_FAILED (*gen is then NULL). */
int graft__bench_submit(const char *command, graft_session *session, const int32_t *tokens,
                        size_t n, int32_t max_new, graft_generation **gen);
/* The same, with the generation's callbacks. */
int graft__bench_submit_cb(const char *command, graft_session *session, const int32_t *tokens,
                           size_t n, int32_t max_new, graft_update_cb on_update,
                           graft_settled_cb on_settled, void *user, graft_generation **gen);
/* Waits for `gen` and frees it. *last (when not NULL) receives the last token sampled,
 * which is not committed. A generation that failed or sampled fewer than it was asked is
 * reported and gives GRAFT_CLI_FAILED. Not from a callback. */
int graft__bench_finish(const char *command, graft_generation *gen, int32_t max_new,
                        int32_t *last);
/* graft__bench_submit, then graft__bench_finish. */
int graft__bench_generate(const char *command, graft_session *session, const int32_t *tokens,
                          size_t n, int32_t max_new, int32_t *last);

/* Opens a session; on failure prints the engine's message and returns GRAFT_CLI_FAILED. */
int graft__bench_session_open(const char *command, graft_engine *engine,
                              graft_session **session);

#endif /* GRAFT_CLI_BENCH_H */
