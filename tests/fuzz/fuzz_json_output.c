/*
 * fuzz_json_output.c: libFuzzer target for the JSON schema compiler and the recognizer that
 * holds generations to JSON (src/engine/json_output.h).
 *
 * An input is a document, or a schema, a line "\n---\n" and a document. The schema must
 * compile or be refused with GRAFT_EINVAL and a message that starts "json_schema"; the
 * document is then fed a byte at a time until one is refused. Each byte is also fed to a
 * copy of the state, which must answer alike (the state is a plain value), and done() may
 * only hold after a '}' or whitespace. ASan and UBSan do the rest. Seeds live in
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
    graft__json_syntax s;
    graft__json_syntax_init_schema(&s, schema);
    for (size_t i = 0; i < doc_len; i++) {
        graft__json_syntax copy = s;
        bool ok = graft__json_syntax_feed(&s, doc[i]);
        require(graft__json_syntax_feed(&copy, doc[i]) == ok);
        if (!ok)
            break;
        require(!graft__json_syntax_done(&s) || doc[i] == '}' || doc[i] == ' ' ||
                doc[i] == '\t' || doc[i] == '\n');
    }
    graft__json_schema_free(schema);
    return 0;
}
