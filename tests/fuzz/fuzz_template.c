/*
 * fuzz_template.c: libFuzzer target for the template parser and renderer.
 *
 * An input is a template, optionally followed by a line "\n---\n" and a JSON object of
 * variables (else a small conversation is used). It is parsed and rendered under tight
 * limits (10000 steps, 64 KiB of output, 16 MiB of memory, macros 20 deep) so that no
 * input can take long. Parsing must succeed or fail with GRAFT_EFORMAT and a message with
 * a line and column; rendering must succeed with a NUL-terminated text of the length it
 * says, or fail with a message. ASan and UBSan do the rest. Seeds live in
 * tests/fuzz/seeds/fuzz_template/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graft.h"

static const char default_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi {{ there }} \\u00e9\"}, {\"role\": \"assistant\", \"content\": null, "
    "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
    "\"arguments\": {\"a\": [1, 2.5, true]}}}]}, {\"role\": \"tool\", \"content\": \"ok\"}], "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t tlen = size;
    const char *vars = default_vars;
    size_t vlen = sizeof default_vars - 1;
    const char *sep = memmem(text, size, "\n---\n", 5);
    if (sep != NULL) {
        tlen = (size_t)(sep - text);
        vars = sep + 5;
        vlen = size - tlen - 5;
    }
    graft_template *t = NULL;
    char *err = NULL;
    int rc = graft_template_parse(text, tlen, &t, &err);
    if (rc != GRAFT_OK) {
        require(rc == GRAFT_EFORMAT || rc == GRAFT_ENOMEM);
        require(t == NULL && err != NULL && strncmp(err, "line ", 5) == 0);
        graft_free(err);
        return 0;
    }
    require(err == NULL);
    graft_template_options opts = {0};
    opts.max_steps = 10000;
    opts.max_output = 64 << 10;
    opts.max_memory = 16 << 20;
    opts.max_depth = 20;
    opts.now = 1767225600;
    char *out = NULL;
    size_t out_len = 0;
    rc = graft_template_render(t, vars, vlen, &opts, &out, &out_len, &err);
    if (rc == GRAFT_OK) {
        require(out != NULL && err == NULL && strlen(out) <= out_len && out[out_len] == '\0');
        require(out_len <= (size_t)64 << 10);
    } else {
        require(out == NULL && err != NULL);
    }
    graft_free(out);
    graft_free(err);
    graft_template_free(t);
    return 0;
}
