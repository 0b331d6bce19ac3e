/*
 * bench.h: what the `graft bench` subcommands share: the benchmark library
 * (src/bench/bench_lib.h: clocks, medians, random token ids, JSON), and from bench_util.c
 * the peak RSS and loading a model or starting an engine with the error reported the bench
 * way.
 *
 * Like the rest of src/cli/, written against include/graft.h only. cmd_bench.c dispatches
 * `graft bench SUBCOMMAND` and holds `speed`; cmd_bench_clone.c holds `clone`,
 * cmd_bench_prefix.c `prefix`.
 */
#ifndef GRAFT_CLI_BENCH_H
#define GRAFT_CLI_BENCH_H

#include "bench/bench_lib.h"
#include "cli.h"

/* graft__cli_parse for a bench subcommand, whose -m MODEL (the option writing *model) is
 * required: without it, a usage error naming cmd's --help. Returns graft__cli_parse's code,
 * or GRAFT_CLI_USAGE. */
int graft__bench_parse(const graft__cli_command *cmd, int argc, char **argv,
                       const char *const *model);

/* The compute threads an engine started with n_threads = requested runs: requested, or for 0
 * one per online CPU (at least one). */
int32_t graft__bench_threads(int32_t requested);

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
