/*
 * messages.c: Anthropic's Messages API (POST /v1/messages, POST /v1/messages/count_tokens), what
 * Claude Code and Anthropic's SDKs speak, on the chat completion path.
 *
 * A request is translated into a chat completion request: `system` (a string or text blocks)
 * becomes the system message; each message's blocks become chat messages (a user's text blocks its
 * content parts, its tool_result blocks tool messages before them; an assistant's text its content,
 * its thinking blocks its reasoning_content, its tool_use blocks its tool_calls); a last message of
 * the assistant's is a prefill, which the answer continues (continue_final_message); `tools`
 * (custom tools: name, description, input_schema) and `tool_choice` (auto, any, tool, none;
 * disable_parallel_tool_use) their chat counterparts; `stop_sequences` the stop strings; `thinking`
 * the template's enable_thinking (its budget_tokens the chat's thinking_token_budget);
 * `output_format` (json_schema) the response_format; max_tokens (required), temperature, top_p,
 * top_k, stream and graft's own fields (seed, min_p, penalties, llama.cpp's samplers, logit_bias,
 * session_id, chat_template_kwargs, reasoning_format) as they are. The completion runs as any chat
 * completion (prompt reuse, tool calls, thoughts, JSON output), and its one choice is answered as a
 * Message: the thought as a thinking block, the text as a text block (also when there is nothing
 * else), each call as a tool_use block; usage counts the prompt tokens graft reused as
 * cache_read_input_tokens and the rest as input_tokens. Streams give the API's events. What the API
 * has and graft does not (images, documents, server tools, MCP servers) is refused with a 400
 * naming the field; metadata, service_tier and cache_control are ignored (every prompt is cached).
 * Errors come in the API's shape (graft__messages_error_shape).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

typedef struct messages {
    bool started;        /* message_start went out */
    int next_index;      /* the next content block's index */
    int open;            /* the open block's index, or -1 */
    bool open_thinking;  /* the open block is the thinking block */
    bool thought_done;   /* the thinking block was closed */
    size_t text_sent;    /* the text's bytes given out (from the content's start) */
    size_t calls_sent;
} messages;

/* ---- the request as a chat completion --------------------------------------------------- */

/* Text blocks' texts as chat content parts (appended to parts); a string as one part. */
static int text_parts(const json_t *content, const char *path, json_t *parts, char **param,
                      char **message)
{
    if (json_is_string(content))
        return json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                                      content));
    if (!json_is_array(content))
        return graft__refuse(param, message, path, "'%s' must be a string or an array of "
                             "text blocks", path);
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *block = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(block, "type"));
        const json_t *text = json_object_get(block, "text");
        if (type == NULL || strcmp(type, "text") != 0 || !json_is_string(text))
            return graft__refuse(param, message, path, "'%s[%zu]' must be a text block "
                                 "(blocks of type '%.40s' are not supported here)", path, k,
                                 type ? type : "?");
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    }
    return 0;
}

/* A user message's blocks: tool_result blocks as tool messages, text blocks as a user
 * message's parts after them. */
static int add_user(json_t *out, const json_t *content, const char *path, char **param,
                    char **message)
{
    json_t *parts = json_array();
    json_t *user = json_pack("{s:s, s:o}", "role", "user", "content", parts);
    int rc = 0;
    size_t results = 0;
    for (size_t k = 0; rc == 0 && json_is_array(content) && k < json_array_size(content); k++) {
        const json_t *block = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(block, "type"));
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", path, k);
        if (type != NULL && strcmp(type, "text") == 0) {
            const json_t *text = json_object_get(block, "text");
            rc = json_is_string(text)
                     ? json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text",
                                                              "text", text))
                     : graft__refuse(param, message, at, "'%s.text' must be a string", at);
            continue;
        }
        if (type == NULL || strcmp(type, "tool_result") != 0) {
            rc = graft__refuse(param, message, at, "content blocks of type '%.40s' are not "
                               "supported in a user message (text, tool_result)",
                               type ? type : "?");
            break;
        }
        const char *id = json_string_value(json_object_get(block, "tool_use_id"));
        const json_t *result = json_object_get(block, "content");
        json_t *texts = json_array();
        char at_content[112];
        snprintf(at_content, sizeof at_content, "%s.content", at);
        rc = id == NULL ? graft__refuse(param, message, at, "'%s' needs a tool_use_id", at)
             : result == NULL ? 0
                              : text_parts(result, at_content, texts, param, message);
        if (rc == 0)
            rc = json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "role", "tool",
                                                      "tool_call_id", id, "content", texts));
        else
            json_decref(texts);
        results++;
    }
    if (rc == 0 && !json_is_array(content))
        rc = text_parts(content, path, parts, param, message);
    if (rc == 0 && (json_array_size(parts) > 0 || results == 0))
        return json_array_append_new(out, user);
    json_decref(user);
    return rc;
}

/* Appends the string s to the JSON string at key of m (made when absent). */
static void join_text(json_t *m, const char *key, const json_t *s)
{
    const json_t *old = json_object_get(m, key);
    size_t n = json_string_length(old), k = json_string_length(s);
    char *joined = malloc(n + k + 1);
    if (joined == NULL)
        return;
    memcpy(joined, json_string_value(old) ? json_string_value(old) : "", n);
    memcpy(joined + n, json_string_value(s), k);
    json_object_set_new(m, key, json_stringn(joined, n + k));
    free(joined);
}

/* An assistant message's blocks: text as its content, thinking as its reasoning_content,
 * tool_use as its tool_calls (arguments as the JSON text of the input). */
static int add_assistant(json_t *out, const json_t *content, const char *path, char **param,
                         char **message)
{
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
    if (json_array_append_new(out, m) != 0)
        return -1;
    if (json_is_string(content))
        return json_object_set(m, "content", (json_t *)content);
    if (!json_is_array(content))
        return graft__refuse(param, message, path, "'%s' must be a string or an array of "
                             "content blocks", path);
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *block = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(block, "type"));
        const json_t *text = json_object_get(block, "text");
        const json_t *thinking = json_object_get(block, "thinking");
        const char *id = json_string_value(json_object_get(block, "id"));
        const char *name = json_string_value(json_object_get(block, "name"));
        const json_t *input = json_object_get(block, "input");
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", path, k);
        if (type != NULL && strcmp(type, "text") == 0 && json_is_string(text)) {
            join_text(m, "content", text);
        } else if (type != NULL && strcmp(type, "thinking") == 0 && json_is_string(thinking)) {
            join_text(m, "reasoning_content", thinking);
        } else if (type != NULL && strcmp(type, "redacted_thinking") == 0) {
            continue; /* another model's, encrypted: nothing a template can render */
        } else if (type != NULL && strcmp(type, "tool_use") == 0 && id != NULL &&
                   name != NULL && json_is_object(input)) {
            char *arguments = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_t *calls = json_object_get(m, "tool_calls");
            if (calls == NULL)
                json_object_set_new(m, "tool_calls", calls = json_array());
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id,
                                                   "type", "function", "function", "name",
                                                   name, "arguments",
                                                   arguments ? arguments : "{}"));
            free(arguments);
        } else {
            return graft__refuse(param, message, at, "'%s' is not a content block graft "
                                 "takes in an assistant message (text, thinking, tool_use "
                                 "with id, name and an input object)", at);
        }
    }
    return 0;
}

/* The messages into the chat's; a last message of the assistant's is continued. */
static int chat_messages(const json_t *body, json_t *chat, json_t *out, char **param,
                         char **message)
{
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return graft__refuse(param, message, "messages", "'messages' must be a non-empty "
                             "array of messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        char at[64];
        snprintf(at, sizeof at, "messages[%zu].role", i);
        if (role == NULL || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
            return graft__refuse(param, message, at, "'%s' must be \"user\" or "
                                 "\"assistant\"", at);
        snprintf(at, sizeof at, "messages[%zu].content", i);
        const json_t *content = json_object_get(m, "content");
        int rc = strcmp(role, "user") == 0 ? add_user(out, content, at, param, message)
                                           : add_assistant(out, content, at, param, message);
        if (rc != 0)
            return rc;
    }
    const json_t *last = json_array_get(out, json_array_size(out) - 1);
    if (strcmp(json_string_value(json_object_get(last, "role")), "assistant") != 0)
        return 0;
    if (json_object_get(last, "tool_calls") != NULL ||
        json_object_get(last, "reasoning_content") != NULL)
        return graft__refuse(param, message, "messages", "the last message is the "
                             "assistant's, which the answer continues: it cannot hold "
                             "tool_use or thinking blocks");
    return json_object_set_new(chat, "continue_final_message", json_true());
}

/* Custom tools in the chat's shape; -1 with the refusal set for other tools. */
static int chat_tools(const json_t *tools, json_t *chat, char **param, char **message)
{
    if (!json_is_array(tools))
        return graft__refuse(param, message, "tools", "'tools' must be an array");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *name = json_object_get(t, "name");
        const json_t *schema = json_object_get(t, "input_schema");
        char at[64];
        snprintf(at, sizeof at, "tools[%zu]", i);
        if (type != NULL && strcmp(type, "custom") != 0)
            return graft__refuse(param, message, at, "'%s': tools of type '%.60s' (server "
                                 "tools) are not supported (only custom tools)", at, type);
        if (!json_is_string(name) || !json_is_object(schema))
            return graft__refuse(param, message, at, "'%s' needs a name and an "
                                 "input_schema object", at);
        json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
        const json_t *description = json_object_get(t, "description");
        if (json_is_string(description))
            json_object_set(fn, "description", (json_t *)description);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

/* Whether the chat's tools (none: there is nothing to check yet) have one of that name. */
static bool among(const json_t *chat, const char *name)
{
    const json_t *tools = json_object_get(chat, "tools");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (strcmp(json_string_value(json_object_get(fn, "name")), name) == 0)
            return true;
    }
    return tools == NULL;
}

/* tool_choice in the chat's shape (and disable_parallel_tool_use as parallel_tool_calls). */
static int chat_tool_choice(const json_t *choice, json_t *chat, char **param, char **message)
{
    const char *type = json_string_value(json_object_get(choice, "type"));
    const char *name = json_string_value(json_object_get(choice, "name"));
    if (type != NULL && strcmp(type, "auto") == 0)
        json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (type != NULL && strcmp(type, "any") == 0)
        json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (type != NULL && strcmp(type, "none") == 0)
        json_object_set_new(chat, "tool_choice", json_string("none"));
    else if (type != NULL && strcmp(type, "tool") == 0 && name != NULL && !among(chat, name))
        return graft__refuse(param, message, "tool_choice.name",
                             "'tool_choice.name' %.100s is not among the tools", name);
    else if (type != NULL && strcmp(type, "tool") == 0 && name != NULL)
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:s}}", "type",
                                                           "function", "function", "name",
                                                           name));
    else
        return graft__refuse(param, message, "tool_choice", "'tool_choice' must be {\"type\": "
                             "\"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} or "
                             "{\"type\": \"tool\", \"name\": ...}");
    if (json_is_true(json_object_get(choice, "disable_parallel_tool_use")))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
    return 0;
}

/* thinking as the template's enable_thinking (unless chat_template_kwargs sets it), and
 * enabled's budget_tokens as thinking_token_budget. */
static int chat_thinking(const json_t *thinking, json_t *chat, char **param, char **message)
{
    const char *type = json_string_value(json_object_get(thinking, "type"));
    if (type == NULL || (strcmp(type, "enabled") != 0 && strcmp(type, "disabled") != 0 &&
                         strcmp(type, "adaptive") != 0))
        return graft__refuse(param, message, "thinking.type", "'thinking.type' must be "
                             "\"enabled\", \"adaptive\" or \"disabled\"");
    const json_t *budget = json_object_get(thinking, "budget_tokens");
    if (strcmp(type, "enabled") == 0 && budget != NULL && !json_is_null(budget)) {
        if (!json_is_integer(budget) || json_integer_value(budget) < 1 ||
            json_integer_value(budget) > INT32_MAX)
            return graft__refuse(param, message, "thinking.budget_tokens",
                                 "'thinking.budget_tokens' must be an integer in [1, %d]",
                                 INT32_MAX);
        json_object_set(chat, "thinking_token_budget", (json_t *)budget);
    }
    json_t *kwargs = json_object_get(chat, "chat_template_kwargs");
    if (!json_is_object(kwargs))
        json_object_set_new(chat, "chat_template_kwargs", kwargs = json_object());
    if (json_object_get(kwargs, "enable_thinking") == NULL)
        json_object_set_new(kwargs, "enable_thinking",
                            json_boolean(strcmp(type, "disabled") != 0));
    return 0;
}

/* output_format (json_schema) as the chat's response_format. */
static int chat_format(const json_t *format, json_t *chat, char **param, char **message)
{
    const char *type = json_string_value(json_object_get(format, "type"));
    const json_t *schema = json_object_get(format, "schema");
    if (type == NULL || strcmp(type, "json_schema") != 0 || !json_is_object(schema))
        return graft__refuse(param, message, "output_format", "'output_format' must be "
                             "{\"type\": \"json_schema\", \"schema\": {...}}");
    json_object_set_new(chat, "response_format",
                        json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema",
                                  "name", "output", "schema", schema));
    return 0;
}

int graft__messages_to_chat(const json_t *body, bool counting, json_t **out, char **param,
                           char **message)
{
    json_t *chat = json_object(), *msgs = json_array();
    *out = chat;
    if (chat == NULL || msgs == NULL || json_object_set_new(chat, "messages", msgs) != 0)
        return -1;
    static const char *const same[] = {"max_tokens", "session_id", "chat_template_kwargs",
                                       "reasoning_format", "stream"};
    graft__copy_fields(chat, body, same, sizeof same / sizeof same[0]);
    graft__copy_sampling_fields(chat, body);
    if (!counting && json_object_get(chat, "max_tokens") == NULL)
        return graft__refuse(param, message, "max_tokens", "'max_tokens' is required");
    static const char *const refused[] = {"mcp_servers", "container"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const json_t *v = json_object_get(body, refused[i]);
        if (v != NULL && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
            return graft__refuse(param, message, refused[i], "'%s' is not supported",
                                 refused[i]);
    }
    const json_t *system = json_object_get(body, "system");
    if (system != NULL && !json_is_null(system)) {
        json_t *parts = json_array();
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content",
                                              parts));
        if (text_parts(system, "system", parts, param, message) != 0)
            return -1;
    }
    if (chat_messages(body, chat, msgs, param, message) != 0)
        return -1;
    const json_t *stop = json_object_get(body, "stop_sequences");
    if (stop != NULL && !json_is_null(stop)) {
        for (size_t i = 0; json_is_array(stop) && i < json_array_size(stop); i++)
            if (!json_is_string(json_array_get(stop, i)))
                stop = NULL;
        if (!json_is_array(stop) || json_array_size(stop) > GRAFT__MAX_STOP)
            return graft__refuse(param, message, "stop_sequences", "'stop_sequences' must "
                                 "be an array of at most %d strings", GRAFT__MAX_STOP);
        json_object_set(chat, "stop", (json_t *)stop);
    }
    const json_t *v;
    if ((v = json_object_get(body, "tools")) != NULL && !json_is_null(v) &&
        chat_tools(v, chat, param, message) != 0)
        return -1;
    if ((v = json_object_get(body, "tool_choice")) != NULL && !json_is_null(v) &&
        chat_tool_choice(v, chat, param, message) != 0)
        return -1;
    if ((v = json_object_get(body, "thinking")) != NULL && !json_is_null(v) &&
        chat_thinking(v, chat, param, message) != 0)
        return -1;
    if ((v = json_object_get(body, "output_format")) != NULL && !json_is_null(v) &&
        chat_format(v, chat, param, message) != 0)
        return -1;
    return 0;
}

/* ---- the Message -------------------------------------------------------------------------- */

/* The usage in the API's names: the prompt tokens reused from earlier requests are read
 * from the cache, the others are input; output_tokens once finished. */
static json_t *usage_json(const completion *c, bool finished)
{
    size_t reused = (size_t)c->choices[0].reused;
    return json_pack("{s:I, s:i, s:I, s:I}", "input_tokens", (json_int_t)(c->n_prompt - reused),
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens",
                     (json_int_t)reused, "output_tokens",
                     (json_int_t)(finished ? graft__generated_tokens(c) : 0));
}

/* Sets j's stop_reason and stop_sequence: those of the finished choice ch, else null. */
static void set_stop(json_t *j, const choice *ch)
{
    const char *finish = graft__choice_finish_reason(ch);
    const char *reason = finish == NULL                       ? NULL
                         : strcmp(finish, "tool_calls") == 0 ? "tool_use"
                         : strcmp(finish, "length") == 0     ? "max_tokens"
                         : ch->stop_word != NULL             ? "stop_sequence"
                                                             : "end_turn";
    json_object_set_new(j, "stop_reason", reason ? json_string(reason) : json_null());
    json_object_set_new(j, "stop_sequence", reason != NULL && ch->stop_word != NULL &&
                                                    strcmp(reason, "stop_sequence") == 0
                                                ? json_string(ch->stop_word)
                                                : json_null());
}

/* The calls ch gives out (none when its tool-call text did not parse). */
static size_t calls_of(const choice *ch)
{
    return ch->calls_bad || ch->calls == NULL ? 0 : json_array_size(ch->calls);
}

/* Call k of ch as a tool_use block, its input given (the arguments parsed), or {}. */
static json_t *tool_use_block(const choice *ch, size_t k, bool with_input)
{
    const json_t *call = json_array_get(ch->calls, k);
    const json_t *fn = json_object_get(call, "function");
    json_t *input = with_input ? json_loads(json_string_value(json_object_get(fn,
                                                                              "arguments")),
                                            0, NULL)
                               : NULL;
    if (!json_is_object(input)) {
        json_decref(input);
        input = json_object();
    }
    return json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                     json_object_get(call, "id"), "name", json_object_get(fn, "name"), "input",
                     input);
}

/* The content blocks of the finished choice ch: its thought, its text (also when it has
 * nothing else), its calls. */
static json_t *content_json(const completion *c, choice *ch)
{
    json_t *blocks = json_array();
    json_t *thought = graft__choice_thought(ch, ch->len, false);
    bool thinks = thought != NULL && json_string_length(thought) > 0;
    if (thinks)
        json_array_append_new(blocks, json_pack("{s:s, s:O, s:s}", "type", "thinking",
                                                "thinking", thought, "signature", ""));
    json_decref(thought);
    size_t start = graft__reasoning_content_start(&ch->thought, ch->len);
    size_t end = c->req.tools && !ch->calls_bad ? ch->content_end : ch->len;
    size_t n_calls = calls_of(ch);
    if (end > start || (!thinks && n_calls == 0))
        json_array_append_new(blocks, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                ch->text ? ch->text + start : "",
                                                end > start ? end - start : 0));
    for (size_t k = 0; k < n_calls; k++)
        json_array_append_new(blocks, tool_use_block(ch, k, true));
    return blocks;
}

/* The Message: begun (no content yet), or finished. */
static json_t *message_json(completion *c, bool finished)
{
    choice *ch = &c->choices[0];
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:n, s:n, s:o}", "id", c->id, "type",
                          "message", "role", "assistant", "model", c->ctx->config->alias,
                          "content", finished ? content_json(c, ch) : json_array(),
                          "stop_reason", "stop_sequence", "usage", usage_json(c, finished));
    if (finished) {
        set_stop(j, ch);
        json_object_set_new(j, "graft", graft__graft_json(c));
    }
    return j;
}

static json_t *whole(completion *c)
{
    return message_json(c, true);
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* Appends the event `type` with j's fields (consumed) after its type. */
static void event(completion *c, const char *type, json_t *j)
{
    json_t *e = json_pack("{s:s}", "type", type);
    json_object_update(e, j);
    json_decref(j);
    graft__append_event(&c->out, &c->out_len, &c->out_cap, type, e);
}

/* Opens the next content block (consumed) with its content_block_start. */
static void open_block(completion *c, json_t *block)
{
    messages *m = c->shaped;
    m->open = m->next_index++;
    m->open_thinking = strcmp(json_string_value(json_object_get(block, "type")),
                              "thinking") == 0;
    event(c, "content_block_start", json_pack("{s:i, s:o}", "index", m->open, "content_block",
                                              block));
}

/* A content_block_delta of the open block (delta consumed). */
static void block_delta(completion *c, json_t *delta)
{
    messages *m = c->shaped;
    event(c, "content_block_delta", json_pack("{s:i, s:o}", "index", m->open, "delta", delta));
}

static void close_block(completion *c)
{
    messages *m = c->shaped;
    if (m->open_thinking) {
        block_delta(c, json_pack("{s:s, s:s}", "type", "signature_delta", "signature", ""));
        m->thought_done = true;
    }
    event(c, "content_block_stop", json_pack("{s:i}", "index", m->open));
    m->open = -1;
    m->open_thinking = false;
}

/* The stream's events since the last step: the thought's and the text's pieces as they are
 * released, each call whole once it parses; the last step ends with message_delta (the stop
 * reason and the usage) and message_stop. */
static void events(completion *c, bool going)
{
    messages *m = c->shaped;
    choice *ch = &c->choices[0];
    if (!m->started) {
        event(c, "message_start", json_pack("{s:o}", "message", message_json(c, false)));
        event(c, "ping", json_object());
        m->started = true;
    }
    if (!ch->started)
        return;
    size_t upto = graft__choice_stream_upto(ch);
    json_t *piece = m->thought_done ? NULL : graft__choice_thought(ch, upto, true);
    if (piece != NULL && json_string_length(piece) > 0) {
        if (m->open < 0)
            open_block(c, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                    "signature", ""));
        block_delta(c, json_pack("{s:s, s:O}", "type", "thinking_delta", "thinking", piece));
    }
    json_decref(piece);
    size_t start = graft__reasoning_content_start(&ch->thought, ch->len);
    size_t from = m->text_sent > start ? m->text_sent : start;
    size_t n_calls = calls_of(ch);
    if (m->open_thinking && (upto > from || n_calls > m->calls_sent || ch->done))
        close_block(c);
    if (upto > from) {
        if (m->open < 0)
            open_block(c, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        block_delta(c, json_pack("{s:s, s:s%}", "type", "text_delta", "text", ch->text + from,
                                 upto - from));
        m->text_sent = upto;
    }
    if (n_calls > m->calls_sent && m->open >= 0)
        close_block(c);
    for (; m->calls_sent < n_calls; m->calls_sent++) {
        const json_t *fn = json_object_get(json_array_get(ch->calls, m->calls_sent),
                                           "function");
        open_block(c, tool_use_block(ch, m->calls_sent, false));
        block_delta(c, json_pack("{s:s, s:O}", "type", "input_json_delta", "partial_json",
                                 json_object_get(fn, "arguments")));
        close_block(c);
    }
    if (going || !ch->done)
        return;
    if (m->open >= 0)
        close_block(c);
    if (m->next_index == 0) { /* an empty answer: an empty text block, as the whole one has */
        open_block(c, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        close_block(c);
    }
    json_t *delta = json_object();
    set_stop(delta, ch);
    event(c, "message_delta", json_pack("{s:o, s:o}", "delta", delta, "usage",
                                        usage_json(c, true)));
    event(c, "message_stop", json_object());
}

/* A stream's end on a failed generation: an error event. */
static void failed(completion *c, const char *message)
{
    event(c, "error", json_pack("{s:{s:s, s:s}}", "error", "type", "api_error", "message",
                                message));
}

static void messages_free(void *shaped)
{
    free(shaped);
}

/* ---- the requests ------------------------------------------------------------------------- */

/* The translation of body into *chat; -1 with the reply set. */
static int translate(const json_t *body, bool counting, json_t **chat, graft__reply *reply)
{
    char *param = NULL, *message = NULL;
    int rc = graft__messages_to_chat(body, counting, chat, &param, &message);
    if (rc != 0)
        graft__reply_error(reply, message ? 400 : 503,
                           message ? "invalid_request_error" : "server_error", param, "%s",
                           message ? message : "out of memory");
    free(param);
    free(message);
    return rc != 0 ? -1 : 0;
}

int graft__messages_begin(completion *c, const json_t *body, const char *session_header,
                          const char *owner, graft__reply *reply)
{
    static const graft__shape shape = {whole, events, failed, messages_free};
    messages *m = calloc(1, sizeof *m);
    if (m == NULL)
        return graft__reply_error(reply, 503, "server_error", NULL, "out of memory"), -1;
    m->open = -1;
    c->shape = &shape;
    c->max_tokens_fit = true;
    c->shaped = m;
    json_t *chat = NULL;
    int rc = translate(body, false, &chat, reply);
    if (rc == 0)
        rc = graft__completion_begin(c, chat, GRAFT__API_CHAT, session_header, owner, reply);
    json_decref(chat);
    return rc;
}

void graft__messages_count_tokens(const graft__server_ctx *ctx, const json_t *body,
                                  graft__reply *reply)
{
    json_t *chat = NULL;
    completion *c = graft__completion_new(ctx, GRAFT__API_MESSAGES, reply);
    if (c != NULL && translate(body, true, &chat, reply) == 0 &&
        graft__completion_prepare(c, chat, GRAFT__API_CHAT, reply) == 0)
        graft__reply_json(reply, 200, json_pack("{s:I}", "input_tokens",
                                                (json_int_t)c->n_prompt));
    json_decref(chat);
    if (c != NULL)
        graft__completion_finish(c, NULL);
}

/* The API's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

void graft__messages_error_shape(graft__reply *reply)
{
    if (reply->status < 400 || reply->body == NULL)
        return;
    json_t *body = json_loadb(reply->body, reply->len, 0, NULL);
    const json_t *err = json_object_get(body, "error");
    const char *text = json_string_value(json_object_get(err, "message"));
    const char *param = json_string_value(json_object_get(err, "param"));
    if (text != NULL) {
        char message[1200];
        /* the field first, as the API words it ("max_tokens: ..."), unless the text names
         * it */
        if (param != NULL && param[0] != '\0' && strstr(text, param) == NULL)
            snprintf(message, sizeof message, "%s: %s", param, text);
        else
            snprintf(message, sizeof message, "%s", text);
        free(reply->body);
        graft__reply_json(reply, reply->status,
                          json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                    error_type(reply->status), "message", message));
    }
    json_decref(body);
}
