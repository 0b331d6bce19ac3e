/*
 * models.c: the models tests run on and their cold references (models.h).
 */
#include <stdio.h>

#include "fixtures.h"
#include "models.h"

graft_model *graft_test_load_model(const char *rel)
{
    char path[1024];
    graft_test_model_path(path, sizeof path, rel);
    graft_model *m = NULL;
    char *err = NULL;
    if (graft_model_load(path, &m, &err) != GRAFT_OK)
        fprintf(stderr, "cannot load %s: %s\n", path, err ? err : "?");
    graft_free(err);
    return m;
}

graft_model *graft_test_synth_model(const char *arch, const char *preset, int type,
                                    uint64_t seed, const char *file)
{
    char path[1024];
    graft_test_tmp_path(path, sizeof path, file);
    graft_synth_options so = {arch, preset, type, NULL, seed, path};
    graft_model *m = NULL;
    char *err = NULL;
    if (graft_synth_write(&so, &err) != GRAFT_OK || graft_model_load(path, &m, &err) != GRAFT_OK)
        fprintf(stderr, "cannot write or load %s: %s\n", path, err ? err : "?");
    graft_free(err);
    return m;
}

graft_context *graft_test_cold_context(const graft_model *m, int32_t n_ctx)
{
    graft_context_options o = graft_context_default_options();
    o.n_ctx = n_ctx;
    o.n_threads = 1;
    graft_context *ctx = NULL;
    return graft_context_create_ex(m, &o, &ctx, NULL) == GRAFT_OK ? ctx : NULL;
}

graft_generate_config graft_test_greedy(int32_t max_new)
{
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = max_new;
    c.ignore_eog = 1;
    c.sampling.temperature = 0.0f;
    return c;
}

int graft_test_run(graft_session *s, const int32_t *tokens, int32_t n, int32_t max_new)
{
    graft_generate_config c = graft_test_greedy(max_new);
    graft_generation *gen = NULL;
    int rc = graft_session_generate(s, tokens, (size_t)n, &c, NULL, NULL, NULL, &gen);
    if (rc != GRAFT_OK)
        return rc;
    rc = graft_generation_wait(gen);
    graft_generation_free(gen);
    return rc;
}
