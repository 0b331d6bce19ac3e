/*
 * byte_buffer.h: a growing byte buffer (with UTF-8 encoding), the seed and random numbers of
 * a randomised test, and texts printed as C literals, for the tests that build texts byte by
 * byte (test_json_syntax.c, test_json_schema.c, test_json_regex.c, test_json_strings.c).
 *
 * The buffer allocates on its first put, even of 0 bytes, so that its bytes are never NULL
 * once put to; running out of memory fails the test. The seed is the test's fixed one, or
 * GRAFT_TEST_SEED (any base strtoull reads) when set, so that a printed seed reruns a
 * failure.
 */
#ifndef GRAFT_TEST_BYTE_BUFFER_H
#define GRAFT_TEST_BYTE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct graft_test_bytes {
    uint8_t *p;
    size_t n, cap;
} graft_test_bytes;

void graft_test_put(graft_test_bytes *b, const void *src, size_t n);
void graft_test_put_byte(graft_test_bytes *b, uint8_t c);
void graft_test_put_str(graft_test_bytes *b, const char *s);
/* Code point cp (below 0x110000) as UTF-8. */
void graft_test_put_utf8(graft_test_bytes *b, uint32_t cp);

uint64_t graft_test_seed(uint64_t fixed);

/* The randomised tests' numbers: a splitmix64 stream, one per test process, started at
 * seed ^ stream (a test's seed, and a stream per check so that checks do not shift each
 * other's draws). */
void graft_test_random_start(uint64_t seed, uint64_t stream);
uint64_t graft_test_random(void);
/* Uniform in [0, n) (n > 0); true one time in n. */
size_t graft_test_below(size_t n);
bool graft_test_one_in(size_t n);

/* Prints t[0, n) with cmocka's print_error as a C string literal (line feed, carriage return
 * and tab as \n, \r and \t; other control and non-ASCII bytes as \x escapes), so that a
 * failure can be pasted into a hand-written case. */
void graft_test_print_literal(const uint8_t *t, size_t n);

#endif /* GRAFT_TEST_BYTE_BUFFER_H */
