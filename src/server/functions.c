/*
 * functions.c: OpenAI's legacy function calling, the form of chat completions before tools
 * (server.h): `functions` (each {name, description, parameters}), `function_call` ("none",
 * "auto" or {"name": ...}), an assistant message's `function_call` ({name, arguments}) and
 * messages of role "function" (the result, with the function's name).
 *
 * A request in that form is run as the tools form it stands for: each function is a tool,
 * function_call is tool_choice, and since the legacy form has one call per answer,
 * parallel_tool_calls is false. In the conversation, an assistant message's function_call is
 * its one tool call, with the id "call_" and the message's index; a "function" message is a
 * tool message answering the latest call before it (tool_call_id that id, name kept). So the
 * template renders what it would for the same conversation told with tools, and the answer
 * comes back in the legacy shape (response.c): the message's function_call and the finish
 * reason "function_call".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* Whether v asks for something (absent and null do not). */
static bool given(const json_t *v)
{
    return v != NULL && !json_is_null(v);
}

static bool uses_legacy_messages(const json_t *messages)
{
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (given(json_object_get(m, "function_call")) ||
            (role != NULL && strcmp(role, "function") == 0))
            return true;
    }
    return false;
}

/* The functions as tools; GRAFT_EINVAL with the refusal naming the function's path. */
static int tools_of(const json_t *functions, json_t *out, char **param, char **message)
{
    if (!json_is_array(functions) || json_array_size(functions) == 0)
        return graft__refuse(param, message, "functions",
                             "'functions' must be a non-empty array of functions");
    json_t *tools = json_array();
    json_object_set_new(out, "tools", tools);
    for (size_t i = 0; i < json_array_size(functions); i++) {
        const json_t *fn = json_array_get(functions, i);
        char path[64];
        snprintf(path, sizeof path, "functions[%zu].name", i);
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return graft__refuse(param, message, path, "'%s' must be a string", path);
        json_array_append_new(tools, json_pack("{s:s, s:O}", "type", "function", "function",
                                               fn));
    }
    return GRAFT_OK;
}

/* function_call as tool_choice (absent: none, which means "auto" too). */
static int tool_choice_of(const json_t *call, json_t *out, char **param, char **message)
{
    const char *mode = json_string_value(call);
    const json_t *name = json_object_get(call, "name");
    if (!given(call))
        return GRAFT_OK;
    if (mode != NULL && (strcmp(mode, "none") == 0 || strcmp(mode, "auto") == 0))
        json_object_set_new(out, "tool_choice", json_string(mode));
    else if (json_is_object(call) && json_is_string(name))
        json_object_set_new(out, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                      name));
    else
        return graft__refuse(param, message, "function_call",
                             "'function_call' must be \"none\", \"auto\" or {\"name\": ...}");
    return GRAFT_OK;
}

/* The messages with each function_call a tool call and each "function" message a tool
 * message; GRAFT_EINVAL with the refusal naming the message's path. */
static int messages_of(const json_t *messages, json_t *out, char **param, char **message)
{
    json_t *copy = json_deep_copy(messages);
    json_object_set_new(out, "messages", copy);
    char id[32] = "";
    for (size_t i = 0; i < json_array_size(copy); i++) {
        json_t *m = json_array_get(copy, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *call = json_object_get(m, "function_call");
        char path[64];
        if (given(call)) {
            snprintf(path, sizeof path, "messages[%zu].function_call", i);
            const json_t *args = json_object_get(call, "arguments");
            if (role == NULL || strcmp(role, "assistant") != 0 ||
                given(json_object_get(m, "tool_calls")))
                return graft__refuse(param, message, path, "'%s' belongs to an assistant "
                                     "message without tool_calls", path);
            if (!json_is_object(call) || !json_is_string(json_object_get(call, "name")) ||
                !json_is_string(args))
                return graft__refuse(param, message, path, "'%s' must be {\"name\": ..., "
                                     "\"arguments\": \"...\"}", path);
            snprintf(id, sizeof id, "call_%zu", i);
            json_t *calls = json_pack("[{s:s, s:s, s:O}]", "id", id, "type", "function",
                                      "function", call);
            json_object_set_new(m, "tool_calls", calls);
            json_object_del(m, "function_call");
        } else if (role != NULL && strcmp(role, "function") == 0) {
            snprintf(path, sizeof path, "messages[%zu].name", i);
            if (!json_is_string(json_object_get(m, "name")))
                return graft__refuse(param, message, path, "'%s' must be a string (the "
                                     "function whose result the message is)", path);
            json_object_set_new(m, "role", json_string("tool"));
            if (id[0] != '\0')
                json_object_set_new(m, "tool_call_id", json_string(id));
        }
    }
    return GRAFT_OK;
}

int graft__functions_as_tools(const json_t *body, bool chat, json_t **out, bool *legacy_answer,
                              char **param, char **message)
{
    *out = NULL;
    const json_t *functions = json_object_get(body, "functions");
    const json_t *call = json_object_get(body, "function_call");
    const json_t *messages = json_object_get(body, "messages");
    *legacy_answer = given(functions);
    const char *field = given(functions) ? "functions" : "function_call";
    if (!chat && (given(functions) || given(call)))
        return graft__refuse(param, message, field, "'%s' needs /v1/chat/completions", field);
    if (!chat || (!given(functions) && !given(call) && !uses_legacy_messages(messages)))
        return GRAFT_OK;
    if (given(call) && !given(functions))
        return graft__refuse(param, message, "function_call", "'function_call' needs "
                             "'functions'");
    if (given(functions) && given(json_object_get(body, "tools")))
        return graft__refuse(param, message, "functions", "'functions' is the legacy form of "
                             "'tools': give one of them");
    if (given(call) && given(json_object_get(body, "tool_choice")))
        return graft__refuse(param, message, "function_call", "'function_call' is the legacy "
                             "form of 'tool_choice': give one of them");
    *out = json_deep_copy(body);
    json_object_del(*out, "functions");
    json_object_del(*out, "function_call");
    int rc = GRAFT_OK;
    if (given(functions)) {
        rc = tools_of(functions, *out, param, message);
        if (rc == GRAFT_OK)
            rc = tool_choice_of(call, *out, param, message);
        json_object_set_new(*out, "parallel_tool_calls", json_false());
    }
    if (rc == GRAFT_OK && json_is_array(messages))
        rc = messages_of(messages, *out, param, message);
    if (rc != GRAFT_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

/* The legacy field that gave a tools-form path, or NULL when none did (malloc'd). */
static char *legacy_of(const char *path)
{
    static const struct {
        const char *tools, *legacy;
    } fields[] = {{"tool_choice.function.name", "function_call.name"},
                  {"tool_choice", "function_call"},
                  {"tools[", "functions["}};
    if (strcmp(path, "tools") == 0)
        return strdup("functions");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        size_t n = strlen(fields[i].tools);
        if (strncmp(path, fields[i].tools, n) != 0)
            continue;
        const char *rest = path + n;
        size_t digits = strspn(rest, "0123456789"); /* tools[N]: N and its ']' kept */
        const char *tail = rest + digits;
        if (fields[i].tools[n - 1] == '[') {
            if (strncmp(tail, "].function", 10) != 0)
                return NULL; /* tools[N] itself: the translation made it, not the client */
            tail += 10;
        }
        size_t len = strlen(fields[i].legacy) + digits + 1 + strlen(tail) + 1;
        char *legacy = malloc(len);
        if (legacy != NULL)
            snprintf(legacy, len, "%s%.*s%s%s", fields[i].legacy, (int)digits, rest,
                     digits ? "]" : "", tail);
        return legacy;
    }
    return NULL;
}

void graft__functions_legacy_path(char **param, char **message)
{
    char *legacy = *param ? legacy_of(*param) : NULL;
    if (legacy == NULL)
        return;
    char *quoted = *message ? strstr(*message, *param) : NULL;
    size_t old_len = strlen(*param), new_len = strlen(legacy);
    if (quoted != NULL && quoted > *message && quoted[-1] == '\'' && quoted[old_len] == '\'') {
        size_t head = (size_t)(quoted - *message), total = strlen(*message) - old_len + new_len;
        char *said = malloc(total + 1);
        if (said != NULL) {
            snprintf(said, total + 1, "%.*s%s%s", (int)head, *message, legacy, quoted + old_len);
            free(*message);
            *message = said;
        }
    }
    free(*param);
    *param = legacy;
}
