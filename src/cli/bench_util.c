/*
 * bench_util.c: helpers the `graft bench` subcommands share (declared in bench.h).
 *
 * Option parsing with the -m MODEL every subcommand needs, the thread count an engine resolves, the
 * peak resident set size, and thin wrappers over the engine API that report failures in the bench's
 * words: the subcommands measure, so each wrapper either succeeds or prints one line and gives exit
 * status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

uint64_t graft__bench_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux counts kilobytes */
}

int graft__bench_parse(const graft__cli_command *cmd, int argc, char **argv,
                       const char *const *model)
{
    int rc = graft__cli_parse(cmd, argc, argv, NULL);
    if (rc == GRAFT_CLI_RUN && *model == NULL) {
        graft__cli_error(cmd->name, "missing -m MODEL (see 'graft %s --help')", cmd->name);
        return GRAFT_CLI_USAGE;
    }
    return rc;
}

int32_t graft__bench_threads(int32_t requested)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return requested > 0 ? requested : cpus > 0 ? (int32_t)cpus : 1;
}

/* ---- the model and the engine -------------------------------------------------------------- */

int graft__bench_load_model(const char *command, const char *path, graft_model **model,
                            graft_model_info *info)
{
    char *err = NULL;
    int rc = graft_model_load(path, model, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error(command, "%s", err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    graft_model_get_info(*model, info);
    return GRAFT_CLI_OK;
}

int graft__bench_engine_create(const char *command, const graft_model *model,
                               const graft_engine_options *opts, graft_engine **engine)
{
    char *err = NULL;
    int rc = graft_engine_create(model, opts, engine, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error(command, "cannot start the engine: %s",
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

int graft__bench_session_open(const char *command, graft_engine *engine,
                              graft_session **session)
{
    char *err = NULL;
    int rc = graft_session_open(engine, session, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error(command, "cannot open a session: %s", err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

int graft__bench_submit(const char *command, graft_session *session, const int32_t *tokens,
                        size_t n, int32_t max_new, graft_generation **gen)
{
    return graft__bench_submit_cb(command, session, tokens, n, max_new, NULL, NULL, NULL, gen);
}

int graft__bench_submit_cb(const char *command, graft_session *session, const int32_t *tokens,
                           size_t n, int32_t max_new, graft_update_cb on_update,
                           graft_settled_cb on_settled, void *user, graft_generation **gen)
{
    graft_generate_config config = graft_generate_default();
    config.max_new_tokens = max_new;
    config.ignore_eog = 1;
    config.sampling.temperature = 0.0f;
    int rc = graft_session_generate(session, tokens, n, &config, on_update, on_settled, user,
                                    gen);
    if (rc != GRAFT_OK) {
        graft__cli_error(command, "cannot queue a generation of %zu tokens: %s", n,
                         graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

int graft__bench_finish(const char *command, graft_generation *gen, int32_t max_new,
                        int32_t *last)
{
    int rc = graft_generation_wait(gen);
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    int status = GRAFT_CLI_OK;
    if (rc != GRAFT_OK) {
        graft__cli_error(command, "generation failed: %s", graft_generation_error(gen));
        status = GRAFT_CLI_FAILED;
    } else if (n != (size_t)max_new) {
        graft__cli_error(command, "a generation sampled %zu tokens instead of %d (the context "
                         "is full)", n, (int)max_new);
        status = GRAFT_CLI_FAILED;
    } else if (last != NULL) {
        *last = out[n - 1];
    }
    graft_generation_free(gen);
    return status;
}

int graft__bench_generate(const char *command, graft_session *session, const int32_t *tokens,
                          size_t n, int32_t max_new, int32_t *last)
{
    graft_generation *gen;
    int rc = graft__bench_submit(command, session, tokens, n, max_new, &gen);
    return rc == GRAFT_CLI_OK ? graft__bench_finish(command, gen, max_new, last) : rc;
}
