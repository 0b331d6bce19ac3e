/*
 * byte_buffer.h: a growing byte buffer (with UTF-8 encoding) and the seed of a randomised
 * test, for the tests that build texts byte by byte (test_json_syntax.c,
 * test_json_schema.c).
 *
 * The buffer allocates on its first put, even of 0 bytes, so that its bytes are never NULL
 * once put to; running out of memory fails the test. The seed is the test's fixed one, or
 * GRAFT_TEST_SEED (any base strtoull reads) when set, so that a printed seed reruns a
 * failure.
 */
#ifndef GRAFT_TEST_BYTE_BUFFER_H
#define GRAFT_TEST_BYTE_BUFFER_H

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

#endif /* GRAFT_TEST_BYTE_BUFFER_H */
