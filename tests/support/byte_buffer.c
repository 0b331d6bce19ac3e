/*
 * byte_buffer.c: the growing byte buffer, test seed, random numbers and literal printing of
 * byte_buffer.h.
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

static uint64_t random_state;

void graft_test_random_start(uint64_t seed, uint64_t stream)
{
    random_state = seed ^ stream;
}

uint64_t graft_test_random(void)
{
    uint64_t z = (random_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

size_t graft_test_below(size_t n)
{
    return (size_t)(graft_test_random() % n);
}

bool graft_test_one_in(size_t n)
{
    return graft_test_below(n) == 0;
}

void graft_test_print_literal(const uint8_t *t, size_t n)
{
    print_error("\"");
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"' || t[i] == '\\')
            print_error("\\%c", t[i]);
        else if (t[i] == '\n')
            print_error("\\n");
        else if (t[i] == '\r')
            print_error("\\r");
        else if (t[i] == '\t')
            print_error("\\t");
        else if (t[i] >= 0x20 && t[i] < 0x7F)
            print_error("%c", t[i]);
        else
            print_error("\\x%02X\"\"", t[i]); /* "" ends the escape before a hex digit */
    }
    print_error("\"");
}
