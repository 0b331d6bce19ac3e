/*
 * tool_calls.c: tool calls in generated text, in the Hermes / Qwen form the chat templates
 * of those models teach (server.h):
 *
 *     <tool_call>
 *     {"name": "get_weather", "arguments": {"city": "Paris"}}
 *     </tool_call>
 *
 * returned as OpenAI's tool_calls. Content comes first; the calls follow it, separated by
 * white space only. A block that does not hold such an object is not a tool call: the
 * caller keeps that text as content.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

size_t graft__tool_calls_start(const char *text, size_t len)
{
    const char *hit = strstr(text, OPEN);
    if (hit != NULL && (size_t)(hit - text) < len)
        return (size_t)(hit - text);
    return graft__tail_start(text, len, OPEN);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The call in body[0, n) as OpenAI's function object, or NULL. */
static json_t *function_of(const char *body, size_t n)
{
    json_t *j = json_loadb(body, n, 0, NULL);
    const char *name = json_string_value(json_object_get(j, "name"));
    json_t *args = json_object_get(j, "arguments");
    json_t *fn = NULL;
    if (json_is_object(j) && name != NULL && name[0] != '\0' &&
        (args == NULL || json_is_object(args))) {
        char *dump = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        fn = json_pack("{s:s, s:s}", "name", name, "arguments", dump ? dump : "{}");
        free(dump);
    }
    json_decref(j);
    return fn;
}

void graft__tool_calls_parse(const char *text, size_t len, size_t *from, const char *id_prefix,
                             json_t *calls, bool *bad)
{
    *bad = false;
    size_t pos = *from;
    for (;;) {
        size_t q = pos;
        while (q < len && is_space(text[q]))
            q++;
        size_t rest = len - q, open_len = sizeof OPEN - 1;
        if (rest == 0)
            return;
        if (rest < open_len) { /* text that may still grow into a block */
            *bad = memcmp(text + q, OPEN, rest) != 0;
            return;
        }
        if (memcmp(text + q, OPEN, open_len) != 0) {
            *bad = true;
            return;
        }
        const char *close = strstr(text + q + open_len, CLOSE);
        if (close == NULL || (size_t)(close - text) + sizeof CLOSE - 1 > len)
            return; /* not complete yet */
        json_t *fn = function_of(text + q + open_len, (size_t)(close - text) - q - open_len);
        if (fn == NULL) {
            *bad = true;
            *from = q;
            return;
        }
        char id[96];
        snprintf(id, sizeof id, "%s_%zu", id_prefix, json_array_size(calls));
        json_array_append_new(calls, json_pack("{s:s, s:s, s:o}", "id", id, "type", "function",
                                               "function", fn));
        pos = (size_t)(close - text) + sizeof CLOSE - 1;
        *from = pos;
    }
}
