/*
 * chat.c: the messages of a chat completion request, rendered into prompt text with the
 * model's own chat template (or --chat-template's) (server.h).
 *
 * The template's input is what Hugging Face's apply_chat_template gives it: messages (each
 * with its role and content; content given as an array of text parts is joined into one
 * string, as llama-server does, since most templates only handle strings), add_generation_
 * prompt true, bos_token and eos_token (the model's), and the variables of
 * chat_template_kwargs (e.g. enable_thinking), and the request's tools unless tool_choice
 * is "none". An assistant message's tool_calls carry their arguments as OpenAI sends them,
 * a JSON string; templates expect the object (Hugging Face's convention), so a string that
 * holds a JSON object is given as that object. A message that is malformed is refused
 * naming its JSON path; a template that raises (roles out of order) is refused with its
 * message.
 *
 * With continue_final_message (vLLM's name; what Anthropic's API calls a prefill) the last
 * message is the assistant's answer begun: the messages before it are rendered with the
 * generation prompt and its content is given apart, to follow that prompt, so that the
 * model continues it rather than beginning a new turn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

typedef struct why {
    char **param, **message;
} why;

static int refuse(const why *w, const char *fmt, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, fmt, path);
    *w->message = strdup(buf);
    *w->param = strdup(path);
    return GRAFT_EINVAL;
}

/* The content of message i as the template sees it, or NULL after setting *message. */
static json_t *content_of(const json_t *m, size_t i, const why *w)
{
    char path[64];
    const json_t *c = json_object_get(m, "content");
    if (c == NULL || json_is_null(c) || json_is_string(c))
        return c ? json_incref((json_t *)c) : json_null();
    snprintf(path, sizeof path, "messages[%zu].content", i);
    if (!json_is_array(c)) {
        refuse(w, "'%s' must be a string, an array of text parts or null", path);
        return NULL;
    }
    size_t len = 0;
    char *text = calloc(1, 1);
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *t = json_string_value(json_object_get(part, "text"));
        if (type == NULL || strcmp(type, "text") != 0 || t == NULL) {
            snprintf(path, sizeof path, "messages[%zu].content[%zu]", i, k);
            refuse(w, "'%s' must be a text part {\"type\": \"text\", \"text\": ...}", path);
            free(text);
            return NULL;
        }
        size_t n = strlen(t);
        text = realloc(text, len + n + 1);
        memcpy(text + len, t, n + 1);
        len += n;
    }
    json_t *joined = json_stringn(text, len);
    free(text);
    return joined;
}

/* tool_calls[k].function.arguments: a JSON string holding an object becomes the object. */
static void arguments_as_objects(json_t *calls)
{
    if (!json_is_array(calls))
        return;
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *fn = json_object_get(json_array_get(calls, k), "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (args == NULL)
            continue;
        json_t *parsed = json_loads(args, 0, NULL);
        if (json_is_object(parsed))
            json_object_set_new(fn, "arguments", parsed);
        else
            json_decref(parsed);
    }
}

/* The template's messages: each the request's with its content normalised. */
static json_t *messages_of(const json_t *body, const why *w)
{
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        refuse(w, "'%s' must be a non-empty array of messages", "messages");
        return NULL;
    }
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        char path[64];
        snprintf(path, sizeof path, "messages[%zu].role", i);
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
            refuse(w, "'%s' must be a string", path);
            json_decref(out);
            return NULL;
        }
        json_t *copy = json_deep_copy(m);
        json_t *content = content_of(m, i, w);
        if (content == NULL) {
            json_decref(copy);
            json_decref(out);
            return NULL;
        }
        json_object_set_new(copy, "content", content);
        arguments_as_objects(json_object_get(copy, "tool_calls"));
        json_array_append_new(out, copy);
    }
    return out;
}

/* With continue_final_message: the last message (the assistant's, without tool calls)
 * taken off messages, its content into *prefill; GRAFT_EINVAL with the refusal set. */
static int take_prefill(const json_t *body, json_t *messages, char **prefill, const why *w)
{
    const json_t *flag = json_object_get(body, "continue_final_message");
    if (flag == NULL || json_is_null(flag) || json_is_false(flag))
        return GRAFT_OK;
    if (!json_is_true(flag))
        return refuse(w, "'%s' must be true or false", "continue_final_message");
    size_t last = json_array_size(messages) - 1;
    const json_t *m = json_array_get(messages, last);
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *calls = json_object_get(m, "tool_calls");
    if (strcmp(role, "assistant") != 0 || (calls != NULL && !json_is_null(calls) &&
                                           json_array_size(calls) > 0))
        return refuse(w, "'%s' continues the last message: it must be the assistant's, "
                      "without tool calls", "continue_final_message");
    const json_t *thought = json_object_get(m, "reasoning_content");
    if (json_is_string(thought) && json_string_length(thought) > 0)
        return refuse(w, "'%s' continues the last message's content: it cannot hold "
                      "reasoning_content", "continue_final_message");
    const char *content = json_string_value(json_object_get(m, "content"));
    if ((*prefill = strdup(content ? content : "")) == NULL)
        return GRAFT_ENOMEM;
    json_array_remove(messages, last);
    return GRAFT_OK;
}

/* The template's render of messages (consumed) with the body's variables. */
static int render(const graft__chat *chat, const json_t *body, json_t *messages, char **text,
                  char **message)
{
    json_t *input = json_object();
    const json_t *kwargs = json_object_get(body, "chat_template_kwargs");
    if (json_is_object(kwargs))
        json_object_update(input, (json_t *)kwargs);
    json_object_set_new(input, "messages", messages);
    const json_t *tools = json_object_get(body, "tools");
    const char *tool_choice = json_string_value(json_object_get(body, "tool_choice"));
    if (json_is_array(tools) && json_array_size(tools) > 0 &&
        !(tool_choice != NULL && strcmp(tool_choice, "none") == 0))
        json_object_set(input, "tools", (json_t *)tools);
    json_object_set_new(input, "add_generation_prompt", json_true());
    json_object_set_new(input, "bos_token", json_string(chat->bos_text));
    json_object_set_new(input, "eos_token", json_string(chat->eos_text));
    char *dump = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(input);
    if (dump == NULL)
        return GRAFT_ENOMEM;
    char *rendered = NULL, *err = NULL;
    int rc = graft_template_render(chat->tmpl, dump, strlen(dump), NULL, &rendered, NULL, &err);
    free(dump);
    if (rc != GRAFT_OK) {
        char buf[512];
        snprintf(buf, sizeof buf, "the chat template refused the messages: %s",
                 err ? err : graft_status_str(rc));
        *message = strdup(buf);
        graft_free(err);
        return GRAFT_EINVAL;
    }
    *text = strdup(rendered);
    graft_free(rendered);
    return *text ? GRAFT_OK : GRAFT_ENOMEM;
}

int graft__chat_render(const graft__chat *chat, const json_t *body, char **text,
                       char **prefill, char **param, char **message)
{
    const why w = {param, message};
    *text = *prefill = NULL;
    json_t *messages = messages_of(body, &w);
    if (messages == NULL)
        return GRAFT_EINVAL;
    int rc = take_prefill(body, messages, prefill, &w);
    if (rc != GRAFT_OK) {
        json_decref(messages);
        return rc;
    }
    rc = render(chat, body, messages, text, message);
    if (rc != GRAFT_OK) {
        free(*prefill);
        *prefill = NULL;
    }
    return rc;
}

bool graft__chat_starts_with_bos(const graft__chat *chat, const char *text)
{
    size_t n = strlen(chat->bos_text);
    return n > 0 && strncmp(text, chat->bos_text, n) == 0;
}
