/*
 * gbnf_fixtures.c: the GBNF tests' shared fixtures (gbnf_fixtures.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "fixtures.h"
#include "gbnf_fixtures.h"
#include "models.h"
#include "util/util.h"

gbnf_oracle *gbnf_test_oracle(const char *grammar)
{
    char err[256];
    gbnf_oracle *o = gbnf_oracle_parse(grammar, err, sizeof err);
    if (o == NULL)
        fail_msg("the oracle refuses a test grammar (%s):\n%s", err, grammar);
    return o;
}

char *gbnf_test_grammar(const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/grammars/%s", graft_test_env("GRAFT_SOURCE_DIR"),
             name);
    char *text = graft__read_file(path, NULL);
    if (text == NULL)
        fail_msg("cannot read %s", path);
    return text;
}

bool gbnf_test_allows(const graft_model *m, const gbnf_oracle *o, char *text, size_t len,
                      int32_t t)
{
    size_t n = graft_test_token_bytes(m, t, text + len);
    return n > 0 && gbnf_oracle_viable_prefix(o, text, len + n);
}
