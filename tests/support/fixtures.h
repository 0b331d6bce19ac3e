/*
 * fixtures.h: what every test finds its files and random numbers with.
 *
 * - Folders: the shared models ($GRAFT_MODELS_DIR, else ../shared/models, as CMakeLists.txt
 *   sets it) and the scratch folder ($GRAFT_TEST_TMP, else /tmp), and paths in them.
 * - The stories260K files of shared/models: the F32 original, its F16 copy and its six
 *   quantized "mix" copies (shared/models/README.md), as initializer lists.
 * - Deterministic random numbers: one LCG stream per test process (graft_test_rng_*; the
 *   kernel tests draw their problems from it) and the xorshift64 step.
 *
 * The test's own thread only (the stream is one global state).
 */
#ifndef GRAFT_TEST_FIXTURES_H
#define GRAFT_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

/* $name, which ctest sets (CMakeLists.txt); fails the test when it is unset or empty. */
const char *graft_test_env(const char *name);
/* $GRAFT_MODELS_DIR, or ../shared/models when it is unset or empty. */
const char *graft_test_models_dir(void);
/* $GRAFT_TEST_TMP, or /tmp when it is unset or empty. */
const char *graft_test_tmp_dir(void);

/* buf (cap bytes) = the shared models folder / rel; returns buf. Fails the test when the
 * path does not fit. */
char *graft_test_model_path(char *buf, size_t cap, const char *rel);
/* buf (cap bytes) = the scratch folder / name; returns buf. Fails the test when the path
 * does not fit. */
char *graft_test_tmp_path(char *buf, size_t cap, const char *name);
/* The whole file at path (to free), its size in *size; fails the test when it cannot be
 * read. */
void *graft_test_read_file(const char *path, size_t *size);

/* The stories260K files, relative to the shared models folder. */
#define GRAFT_TEST_STORIES "stories260K.gguf"
#define GRAFT_TEST_STORIES_F16 "derived/stories260K-F16.gguf"
/* All of them: the original, the F16 copy, the quantized copies. */
#define GRAFT_TEST_STORIES_ALL                                                              \
    GRAFT_TEST_STORIES, GRAFT_TEST_STORIES_F16, GRAFT_TEST_STORIES_QUANTIZED
/* Its quantized copies (each a mix of one type with a few tensors kept in another). */
#define GRAFT_TEST_STORIES_QUANTIZED                                                        \
    "derived/stories260K-Q8_0mix.gguf", "derived/stories260K-Q5_1mix.gguf",                 \
        "derived/stories260K-Q5_0mix.gguf", "derived/stories260K-Q4_1mix.gguf",             \
        "derived/stories260K-Q4_0mix.gguf", "derived/stories260K-IQ4_NLmix.gguf"

/* The LCG stream: graft_test_rng_seed starts it again from `seed`. */
void graft_test_rng_seed(uint64_t seed);
/* The next 32 bits (the high half of the 64-bit state). */
uint32_t graft_test_rng_u32(void);
/* Uniform in [-1, 1), from graft_test_rng_u32. */
float graft_test_rng_float(void);

/* One xorshift64 step of *state (13, 7, 17); returns the new state. */
uint64_t graft_test_xorshift64(uint64_t *state);

/* The index of the largest of x[0, n) by the plain loop (the first of equal ones; a NaN is
 * never moved to): the reference graft__argmax is checked against, and the tests' own
 * greedy pick. */
int32_t graft_test_argmax(const float *x, int32_t n);

#endif /* GRAFT_TEST_FIXTURES_H */
