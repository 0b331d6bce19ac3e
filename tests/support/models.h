/*
 * models.h: the models tests run on, loaded or written, and their cold references.
 *
 * - graft_test_load_model: a model of the shared models folder (fixtures.h), or NULL with
 *   the reason on stderr (a missing fixture fails the test; it is never a skip).
 * - graft_test_synth_model: a random-weight model of graft synth written to the scratch
 *   folder under `file` and loaded.
 * - graft_test_cold_context: a one-sequence, one-thread context of n_ctx positions, the
 *   reference engine tests compare logits with by memcmp.
 * - graft_test_greedy, graft_test_run: the greedy generation engine tests run.
 */
#ifndef GRAFT_TEST_MODELS_H
#define GRAFT_TEST_MODELS_H

#include <stdint.h>

#include "graft.h"

graft_model *graft_test_load_model(const char *rel);
graft_model *graft_test_synth_model(const char *arch, const char *preset, int type,
                                    uint64_t seed, const char *file);
graft_context *graft_test_cold_context(const graft_model *m, int32_t n_ctx);

/* The stories260K model with a cold one-thread context of n_ctx positions. 0, or -1 (after
 * printing why) when one cannot be made; free with graft_test_free_stories, also after a
 * failure. */
int graft_test_load_stories(graft_model **stories, graft_context **cold, int32_t n_ctx);
void graft_test_free_stories(graft_model *stories, graft_context *cold);

/* The stories260K model and a tiny synthetic gemma3 (F32, `gemma_seed`, written as
 * `gemma_file` in the scratch folder), each with a cold one-thread context of its own
 * length. 0, or -1 (after printing why) when one cannot be made; free with
 * graft_test_free_models, also after a failure. */
int graft_test_load_models(graft_model **stories, graft_context **stories_cold,
                           int32_t stories_ctx, graft_model **gemma, graft_context **gemma_cold,
                           int32_t gemma_ctx, uint64_t gemma_seed, const char *gemma_file);
void graft_test_free_models(graft_model *stories, graft_context *stories_cold,
                            graft_model *gemma, graft_context *gemma_cold);

/* Engine options for tests: max_sessions sessions of max_context positions, batches of 64
 * tokens, one thread (the pool's workers spin; CI machines are small). */
graft_engine_options graft_test_engine_options(int32_t max_sessions, int32_t max_context);
/* An engine on m, or the test fails with the engine's message. */
graft_engine *graft_test_engine(const graft_model *m, const graft_engine_options *o);
/* The engine's metrics, asserted taken. */
graft_engine_metrics graft_test_metrics(graft_engine *e);
/* A new session, asserted opened. */
graft_session *graft_test_open_session(graft_engine *e);
/* Frees e after asserting that no session is open and no KV block used. */
void graft_test_engine_end(graft_engine *e);

/* Greedy sampling of at most max_new tokens, end of generation ignored. */
graft_generate_config graft_test_greedy(int32_t max_new);

/* The model's vocabulary size. */
int32_t graft_test_vocab_size(const graft_model *m);
/* The bytes of token t into buf (GRAFT_TEST_TOKEN_BYTES at most, which a token of the test
 * vocabularies never exceeds) and their count (0: none, a control token). */
enum { GRAFT_TEST_TOKEN_BYTES = 256 };
size_t graft_test_token_bytes(const graft_model *m, int32_t t, char *buf);
/* The token table of the model's whole vocabulary, asserted built (graft__token_table_free). */
struct graft__token_table *graft_test_token_table(const graft_model *m);

/* A generation on a session of its own. */
typedef struct graft_test_gen {
    graft_session *session;
    graft_generation *gen;
} graft_test_gen;
/* Opens a session on e and submits prompt[0, n) with c there (no callbacks). */
void graft_test_gen_start(graft_engine *e, graft_test_gen *r, const int32_t *prompt, size_t n,
                          const graft_generate_config *c);
/* Frees the generation and closes its session. */
void graft_test_gen_release(graft_test_gen *r);
/* Two settled generations gave the same tokens and finish reason. */
void graft_test_assert_same_tokens(graft_generation *a, graft_generation *b);
/* Runs tokens[0, n) on s greedily (graft_test_greedy) with no callbacks to its end; returns
 * its status. */
int graft_test_run(graft_session *s, const int32_t *tokens, int32_t n, int32_t max_new);

/* The models the parity tables run on: every stories260K file (GRAFT_TEST_STORIES_ALL) and
 * tiny synthetic qwen3 and gemma3 models in F32 and Q8_0 (written as <prefix>-<arch>-<type>
 * .gguf in the scratch folder). Loads each, calls check(label, model), frees it; fails
 * the test when one cannot be written or loaded. */
typedef void (*graft_test_model_check)(const char *label, graft_model *m);
void graft_test_each_parity_model(const char *prefix, graft_test_model_check check);

#endif /* GRAFT_TEST_MODELS_H */
