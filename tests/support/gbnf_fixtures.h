/*
 * gbnf_fixtures.h: what the GBNF grammar tests share: the oracle of a test grammar, which must
 * parse, and the grammar files of tests/grammars/. Failures fail the calling test (cmocka).
 */
#ifndef GRAFT_TEST_GBNF_FIXTURES_H
#define GRAFT_TEST_GBNF_FIXTURES_H

#include <stdbool.h>
#include <stdint.h>

#include "gbnf_oracle.h"
#include "graft.h"

/* The oracle of grammar (to gbnf_oracle_free); a grammar it refuses fails the test. */
gbnf_oracle *gbnf_test_oracle(const char *grammar);
/* Whether token t of m may follow text[0, len) by the oracle: it has bytes, and the text with
 * them begins a match. text has room for a token's bytes after len (GRAFT_TEST_TOKEN_BYTES),
 * where they are written. */
bool gbnf_test_allows(const graft_model *m, const gbnf_oracle *o, char *text, size_t len,
                      int32_t t);
/* The text of tests/grammars/<name> under GRAFT_SOURCE_DIR (to free). */
char *gbnf_test_grammar(const char *name);

#endif /* GRAFT_TEST_GBNF_FIXTURES_H */
