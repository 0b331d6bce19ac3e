/*
 * json_oracle.c: jansson as the oracle of one JSON object, and the tests' schema compile
 * (json_oracle.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_output.h"
#include "json_oracle.h"

graft_test_truth graft_test_jansson_object(const uint8_t *t, size_t n)
{
    if (memchr(t, 0, n) != NULL)
        return GRAFT_TEST_INVALID;
    json_error_t error;
    json_t *root = json_loadb((const char *)t, n, JSON_ALLOW_NUL, &error);
    if (root == NULL) {
        enum json_error_code code = json_error_code(&error);
        return code == json_error_null_byte_in_key || code == json_error_numeric_overflow
                   ? GRAFT_TEST_UNKNOWN
                   : GRAFT_TEST_INVALID;
    }
    bool object = json_is_object(root);
    json_decref(root);
    return object ? GRAFT_TEST_VALID : GRAFT_TEST_INVALID;
}

int graft_test_hex_digit(int c)
{
    static const char digits[] = "0123456789abcdef";
    const char *at = c != 0 ? strchr(digits, tolower(c)) : NULL;
    return at != NULL ? (int)(at - digits) : -1;
}

graft__json_schema *graft_test_compile_schema(const char *schema_text)
{
    graft__json_schema *schema = NULL;
    char *errmsg = NULL;
    int rc = graft__json_schema_compile(schema_text, strlen(schema_text), &schema, &errmsg);
    if (rc != GRAFT_OK)
        print_error("compile %s: %d, %s\n", schema_text, rc, errmsg != NULL ? errmsg : "(none)");
    free(errmsg);
    return schema;
}
