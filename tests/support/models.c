/*
 * models.c: the models tests run on and their cold references (models.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "fixtures.h"
#include "gguf/gguf.h"
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

static void check_loaded(const char *label, graft_model *m, graft_test_model_check check)
{
    if (m == NULL)
        fail_msg("%s: cannot be written or loaded", label);
    check(label, m);
    graft_model_free(m);
}

void graft_test_each_parity_model(const char *prefix, graft_test_model_check check)
{
    static const char *const files[] = {GRAFT_TEST_STORIES_ALL};
    char label[64], file[128];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *type = strchr(files[i], '-'); /* derived/stories260K-<type>.gguf */
        if (type == NULL)
            snprintf(label, sizeof label, "stories260K F32");
        else
            snprintf(label, sizeof label, "stories260K %.*s", (int)strcspn(type + 1, "."),
                     type + 1);
        check_loaded(label, graft_test_load_model(files[i]), check);
    }
    static const char *const archs[] = {"qwen3", "gemma3"};
    static const struct {
        int type;
        const char *name;
    } types[] = {{GRAFT_TYPE_F32, "F32"}, {GRAFT_TYPE_Q8_0, "Q8_0"}};
    for (size_t a = 0; a < 2; a++) {
        for (size_t t = 0; t < 2; t++) {
            snprintf(file, sizeof file, "%s-%s-%s.gguf", prefix, archs[a], types[t].name);
            snprintf(label, sizeof label, "synth %s tiny %s", archs[a], types[t].name);
            check_loaded(label, graft_test_synth_model(archs[a], "tiny", types[t].type, 5, file),
                         check);
        }
    }
}
