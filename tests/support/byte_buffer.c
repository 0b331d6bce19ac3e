/*
 * byte_buffer.c: the growing byte buffer and test seed of byte_buffer.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"

void graft_test_put(graft_test_bytes *b, const void *src, size_t n)
{
    if (b->p == NULL || b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n > 0)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

void graft_test_put_byte(graft_test_bytes *b, uint8_t c)
{
    graft_test_put(b, &c, 1);
}

void graft_test_put_str(graft_test_bytes *b, const char *s)
{
    graft_test_put(b, s, strlen(s));
}

void graft_test_put_utf8(graft_test_bytes *b, uint32_t cp)
{
    uint8_t out[4];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        out[i] = (uint8_t)(0x80 | (cp & 0x3F));
    out[0] = (uint8_t)(lead[n] | cp);
    graft_test_put(b, out, n);
}

uint64_t graft_test_seed(uint64_t fixed)
{
    const char *env = getenv("GRAFT_TEST_SEED");
    return env != NULL ? strtoull(env, NULL, 0) : fixed;
}
