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
#include "model/model.h"
#include "tokenizer/tokenizer.h"

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

int graft_test_load_stories(graft_model **stories, graft_context **cold, int32_t n_ctx)
{
    *stories = graft_test_load_model(GRAFT_TEST_STORIES);
    *cold = *stories ? graft_test_cold_context(*stories, n_ctx) : NULL;
    return *cold ? 0 : -1;
}

void graft_test_free_stories(graft_model *stories, graft_context *cold)
{
    graft_context_free(cold);
    graft_model_free(stories);
}

int graft_test_load_models(graft_model **stories, graft_context **stories_cold,
                           int32_t stories_ctx, graft_model **gemma, graft_context **gemma_cold,
                           int32_t gemma_ctx, uint64_t gemma_seed, const char *gemma_file)
{
    int rc = graft_test_load_stories(stories, stories_cold, stories_ctx);
    *gemma = graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_F32, gemma_seed, gemma_file);
    *gemma_cold = *gemma ? graft_test_cold_context(*gemma, gemma_ctx) : NULL;
    return rc == 0 && *gemma_cold ? 0 : -1;
}

void graft_test_free_models(graft_model *stories, graft_context *stories_cold,
                            graft_model *gemma, graft_context *gemma_cold)
{
    graft_test_free_stories(stories, stories_cold);
    graft_context_free(gemma_cold);
    graft_model_free(gemma);
}

graft_engine_options graft_test_engine_options(int32_t max_sessions, int32_t max_context)
{
    graft_engine_options o = graft_engine_default_options();
    o.max_sessions = max_sessions;
    o.max_context = max_context;
    o.max_batch_tokens = 64;
    o.n_threads = 1;
    return o;
}

graft_engine *graft_test_engine(const graft_model *m, const graft_engine_options *o)
{
    graft_engine *e = NULL;
    char *err = NULL;
    if (graft_engine_create(m, o, &e, &err) != GRAFT_OK)
        fail_msg("engine_create: %s", err ? err : "?");
    return e;
}

graft_engine_metrics graft_test_metrics(graft_engine *e)
{
    graft_engine_metrics m;
    assert_int_equal(graft_engine_metrics_get(e, &m), GRAFT_OK);
    return m;
}

graft_session *graft_test_open_session(graft_engine *e)
{
    graft_session *s = NULL;
    assert_int_equal(graft_session_open(e, &s, NULL), GRAFT_OK);
    assert_non_null(s);
    return s;
}

void graft_test_engine_end(graft_engine *e)
{
    graft_engine_metrics m = graft_test_metrics(e);
    assert_int_equal(m.sessions_open, 0);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(graft_engine_free(e), GRAFT_OK);
}

graft_generate_config graft_test_greedy(int32_t max_new)
{
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = max_new;
    c.ignore_eog = 1;
    c.sampling.temperature = 0.0f;
    return c;
}

int32_t graft_test_vocab_size(const graft_model *m)
{
    graft_model_info info;
    graft_model_get_info(m, &info);
    return info.n_vocab;
}

size_t graft_test_token_bytes(const graft_model *m, int32_t t, char *buf)
{
    int len = graft__token_bytes(m->vocab, t, buf, GRAFT_TEST_TOKEN_BYTES);
    assert_true(len >= 0 && len <= GRAFT_TEST_TOKEN_BYTES);
    return (size_t)len;
}

graft__token_table *graft_test_token_table(const graft_model *m)
{
    graft__token_table *tokens = NULL;
    assert_int_equal(graft__token_table_create(m->vocab, graft_test_vocab_size(m), &tokens),
                     GRAFT_OK);
    return tokens;
}

void graft_test_gen_start(graft_engine *e, graft_test_gen *r, const int32_t *prompt, size_t n,
                          const graft_generate_config *c)
{
    r->session = graft_test_open_session(e);
    assert_int_equal(graft_session_generate(r->session, prompt, n, c, NULL, NULL, NULL, &r->gen),
                     GRAFT_OK);
}

void graft_test_gen_release(graft_test_gen *r)
{
    graft_generation_free(r->gen);
    graft_session_close(r->session);
}

void graft_test_assert_same_tokens(graft_generation *a, graft_generation *b)
{
    size_t na = 0, nb = 0;
    const int32_t *ta = graft_generation_tokens(a, &na);
    const int32_t *tb = graft_generation_tokens(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na * sizeof *ta);
    assert_int_equal(graft_generation_finish_reason(a), graft_generation_finish_reason(b));
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
