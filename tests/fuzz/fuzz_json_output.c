/*
 * fuzz_json_output.c: libFuzzer target for the JSON schema compiler and the recognizer that
 * holds generations to JSON (src/engine/json_output.h).
 *
 * An input is a document, or a schema, a line "\n---\n" and a document. The schema must
 * compile or be refused with GRAFT_EINVAL and a message that starts "json_schema"; the
 * document is then fed a byte at a time to the recognizer (graft__json_recognizer, which
 * follows the alternatives of unions together) until one is refused, which must leave it
 * unchanged. Each byte is also fed to a copy, which must answer alike (the recognizer is a
 * plain value), the states followed stay within GRAFT__JSON_MAX_STATES, and done() may only
 * hold after a '}' or whitespace. ASan and UBSan do the rest. Seeds live in
 * tests/fuzz/seeds/fuzz_json_output/.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *doc = data;
    size_t doc_len = size;
    graft__json_schema *schema = NULL;
    const uint8_t *sep = memmem(data, size, "\n---\n", 5);
    if (sep != NULL) {
        char *err = NULL;
        int rc = graft__json_schema_compile((const char *)data, (size_t)(sep - data), &schema,
                                            &err);
        if (rc != GRAFT_OK) {
            require((rc == GRAFT_EINVAL || rc == GRAFT_ENOMEM) && schema == NULL);
            require(rc == GRAFT_ENOMEM || (err != NULL && strncmp(err, "json_schema", 11) == 0));
            free(err);
            return 0;
        }
        require(err == NULL);
        doc = sep + 5;
        doc_len = size - (size_t)(doc - data);
    }
    graft__json_recognizer *r = malloc(2 * sizeof *r);
    require(r != NULL);
    graft__json_recognizer_init(&r[0], schema);
    for (size_t i = 0; i < doc_len; i++) {
        r[1] = r[0];
        bool ok = graft__json_recognizer_feed(&r[0], doc[i]);
        if (!ok) {
            require(memcmp(&r[0], &r[1], sizeof r[0]) == 0);
            break;
        }
        require(graft__json_recognizer_feed(&r[1], doc[i]));
        require(r[0].n_states == r[1].n_states && r[0].n_states >= 1 &&
                r[0].n_states <= GRAFT__JSON_MAX_STATES);
        require(!graft__json_recognizer_done(&r[0]) || doc[i] == '}' || doc[i] == ' ' ||
                doc[i] == '\t' || doc[i] == '\n');
    }
    free(r);
    graft__json_schema_free(schema);
    return 0;
}
