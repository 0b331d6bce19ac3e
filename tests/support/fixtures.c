/*
 * fixtures.c: folders, paths and random numbers for the tests (fixtures.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "fixtures.h"

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : fallback;
}

const char *graft_test_models_dir(void)
{
    return env_or("GRAFT_MODELS_DIR", "../shared/models");
}

const char *graft_test_tmp_dir(void)
{
    return env_or("GRAFT_TEST_TMP", "/tmp");
}

static char *join(char *buf, size_t cap, const char *dir, const char *name)
{
    int len = snprintf(buf, cap, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= cap)
        fail_msg("path %s/%s is longer than %zu bytes", dir, name, cap);
    return buf;
}

char *graft_test_model_path(char *buf, size_t cap, const char *rel)
{
    return join(buf, cap, graft_test_models_dir(), rel);
}

char *graft_test_tmp_path(char *buf, size_t cap, const char *name)
{
    return join(buf, cap, graft_test_tmp_dir(), name);
}

void *graft_test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*size ? *size : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, *size, f), *size);
    fclose(f);
    return p;
}

static uint64_t lcg_state;

void graft_test_rng_seed(uint64_t seed)
{
    lcg_state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
}

uint32_t graft_test_rng_u32(void)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(lcg_state >> 32);
}

float graft_test_rng_float(void)
{
    return (float)((double)graft_test_rng_u32() / 2147483648.0 - 1.0);
}

uint64_t graft_test_xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

int32_t graft_test_argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

const char *graft_test_env(const char *name)
{
    const char *value = getenv(name);
    if (value == NULL || value[0] == '\0')
        fail_msg("$%s must be set (ctest sets it)", name);
    return value;
}
