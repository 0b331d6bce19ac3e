/*
 * json_oracle.h: jansson 2.14 as the oracle of "one JSON object", reading \u escapes and
 * compiling a schema that must compile, for the recognizer's oracle tests (test_json_*.c).
 *
 * jansson decides RFC 8259's grammar and UTF-8 (it refuses overlong forms, encoded
 * surrogates, code points above U+10FFFF, raw control bytes in strings, lone and unpaired
 * surrogate escapes), with these differences, handled here:
 *   - it accepts a top-level array or scalar: the root must be an object;
 *   - it refuses \u0000 in a key even with JSON_ALLOW_NUL (json_error_null_byte_in_key),
 *     integers outside int64 and reals that overflow a double (json_error_numeric_overflow),
 *     all of which RFC 8259 allows: the verdict is then GRAFT_TEST_UNKNOWN;
 *   - its lexer loses a NUL byte that it reads past and puts back (after a number or a
 *     literal), so it loads {"a":1<NUL>}: a raw NUL byte, never valid, is refused here.
 * What jansson does not hold to (whitespace forms, nesting limits, a trailing CR) is each
 * test's own to check.
 */
#ifndef GRAFT_TEST_JSON_ORACLE_H
#define GRAFT_TEST_JSON_ORACLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { GRAFT_TEST_INVALID, GRAFT_TEST_VALID, GRAFT_TEST_UNKNOWN } graft_test_truth;

/* Whether t[0..n) is one JSON object by jansson's reading, as above. */
graft_test_truth graft_test_jansson_object(const uint8_t *t, size_t n);

/* The value of hexadecimal digit c (either case), or -1. */
int graft_test_hex_digit(int c);

/* schema_text compiled (graft__json_schema_compile), or NULL after printing, with cmocka's
 * print_error, the status and message: a failure for the calling test to count. */
struct graft__json_schema *graft_test_compile_schema(const char *schema_text);

#endif /* GRAFT_TEST_JSON_ORACLE_H */
