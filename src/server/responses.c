/*
 * responses.c: OpenAI's Responses API (POST /v1/responses, GET and DELETE
 * /v1/responses/{id}) on the chat completion path.
 *
 * A request is translated into a chat completion request: `instructions` become the system
 * message, the conversation of `previous_response_id` (response_store.c) and the request's
 * `input` items become the messages (message items, function calls as the assistant's
 * tool_calls, function call outputs as tool messages, reasoning items as the assistant's
 * reasoning_content), `tools` (function tools),
 * `tool_choice`, `text.format`, `include` of message.output_text.logprobs (with
 * `top_logprobs`) their chat counterparts; `max_output_tokens` (one of the chat
 * request's names for max_tokens, so that its errors name it) and the sampling fields pass
 * as they are (null ones left out). The completion then runs as any chat completion (prompt
 * reuse, tool calls, JSON output), and its one choice is answered as a response object: a
 * reasoning item with a thinking model's thought, a message item with the text and a
 * function_call item per call, streamed as the API's typed events (every event
 * carries its type and a sequence number). What the API has and graft does not (hosted
 * tools, images and files in the input, background responses) is refused with a 400 naming
 * the field; fields graft has no use for (reasoning, truncation, other include values,
 * metadata's meaning) are ignored, metadata given back as it came.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

typedef struct graft__responses {
    json_t *request;      /* the fields a response object gives back as they came */
    json_t *history;      /* previous_response_id's conversation items, or NULL */
    json_t *items;        /* this request's input items, then its output items */
    char *previous;       /* previous_response_id, or NULL */
    char *owner;
    bool store;
    json_t *final;        /* the response object, once settled (and stored) */
    char message_id[64];  /* the message item's: msg_ and the response's id */
    char reasoning_id[64]; /* the reasoning item's: rs_ and the response's id */
    /* streaming */
    long long sequence;
    bool created;
    bool message_open, message_done; /* the message item was added / closed */
    bool thought_open, thought_done; /* the reasoning item was added / closed */
    int thought_index;
    int output_index;     /* the next output item's */
    int message_index;
    size_t text_sent, calls_sent;
    size_t tokens_sent;   /* tokens whose log-probabilities went out with a delta */
} graft__responses;

static void responses_free(void *shaped)
{
    graft__responses *r = shaped;
    if (r == NULL)
        return;
    json_decref(r->request);
    json_decref(r->history);
    json_decref(r->items);
    json_decref(r->final);
    free(r->previous);
    free(r->owner);
    free(r);
}

/* ---- the request as a chat completion --------------------------------------------------- */

/* The text of a message's content: a string, or text parts (input_text, output_text,
 * text; a reasoning item's reasoning_text and summary_text) joined; NULL with the
 * refusal set for anything else. */
static json_t *content_text(const json_t *content, const char *path, char **param,
                            char **message)
{
    if (json_is_string(content))
        return json_incref((json_t *)content);
    if (!json_is_array(content))
        return graft__refuse(param, message, path, "%s must be a string or an array of parts",
                             "the content"), NULL;
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        char at[256];
        snprintf(at, sizeof at, "%s[%zu]", path, i);
        if (type == NULL || !json_is_string(text) ||
            (strcmp(type, "input_text") != 0 && strcmp(type, "output_text") != 0 &&
             strcmp(type, "text") != 0 && strcmp(type, "reasoning_text") != 0 &&
             strcmp(type, "summary_text") != 0))
            return graft__refuse(param, message, at, "a content part of type '%.40s' is not "
                                 "supported (only text)", type ? type : "?"), NULL;
        n += json_string_length(text);
    }
    char *joined = malloc(n + 1), *at = joined;
    if (joined == NULL)
        return NULL;
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *text = json_object_get(json_array_get(content, i), "text");
        memcpy(at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    json_t *s = json_stringn(joined, n);
    free(joined);
    return s;
}

/* The last message when it is an assistant's thought alone (a reasoning item's), which the
 * turn's message or calls that follow join; else NULL. */
static json_t *thought_only(json_t *messages)
{
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    const char *content = json_string_value(json_object_get(last, "content"));
    return role != NULL && strcmp(role, "assistant") == 0 && content != NULL &&
                   content[0] == '\0' &&
                   json_object_get(last, "tool_calls") == NULL &&
                   json_object_get(last, "reasoning_content") != NULL
               ? last
               : NULL;
}

/* Appends item (at path) to the chat messages; -1 with the refusal set. */
static int add_item(json_t *messages, const json_t *item, const char *path, char **param,
                    char **message)
{
    char at[256];
    if (!json_is_object(item))
        return graft__refuse(param, message, path, "%s must be an object", "an input item");
    const char *type = json_string_value(json_object_get(item, "type"));
    if (type == NULL || strcmp(type, "message") == 0) {
        const char *role = json_string_value(json_object_get(item, "role"));
        snprintf(at, sizeof at, "%s.role", path);
        if (role == NULL || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 &&
                             strcmp(role, "system") != 0 && strcmp(role, "developer") != 0))
            return graft__refuse(param, message, at,
                                 "%s must be user, assistant, system or developer", "the role");
        snprintf(at, sizeof at, "%s.content", path);
        json_t *text = content_text(json_object_get(item, "content"), at, param, message);
        if (text == NULL)
            return -1;
        json_t *thinking = thought_only(messages);
        if (thinking != NULL && strcmp(role, "assistant") == 0)
            return json_object_set_new(thinking, "content", text);
        return json_array_append_new(
            messages, json_pack("{s:s, s:o}", "role",
                                strcmp(role, "developer") == 0 ? "system" : role, "content",
                                text));
    }
    if (strcmp(type, "function_call") == 0) {
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        const char *name = json_string_value(json_object_get(item, "name"));
        const char *arguments = json_string_value(json_object_get(item, "arguments"));
        if (call_id == NULL || name == NULL || arguments == NULL)
            return graft__refuse(param, message, path,
                                 "%s needs call_id, name and arguments (strings)",
                                 "a function_call item");
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", call_id, "type", "function",
                                 "function", "name", name, "arguments", arguments);
        /* Calls that follow the assistant's text (or other calls) are that turn's. */
        json_t *last = json_array_get(messages, json_array_size(messages) - 1);
        const char *last_role = json_string_value(json_object_get(last, "role"));
        if (last_role != NULL && strcmp(last_role, "assistant") == 0) {
            json_t *calls = json_object_get(last, "tool_calls");
            if (calls == NULL)
                json_object_set_new(last, "tool_calls", calls = json_array());
            return json_array_append_new(calls, call);
        }
        return json_array_append_new(messages,
                                     json_pack("{s:s, s:n, s:[o]}", "role", "assistant",
                                               "content", "tool_calls", call));
    }
    if (strcmp(type, "function_call_output") == 0) {
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        snprintf(at, sizeof at, "%s.output", path);
        json_t *output = call_id == NULL ? NULL
                                         : content_text(json_object_get(item, "output"), at,
                                                        param, message);
        if (call_id == NULL)
            return graft__refuse(param, message, path, "%s needs a call_id (a string)",
                                 "a function_call_output item");
        if (output == NULL)
            return -1;
        return json_array_append_new(messages, json_pack("{s:s, s:s, s:o}", "role", "tool",
                                                         "tool_call_id", call_id, "content",
                                                         output));
    }
    if (strcmp(type, "reasoning") == 0) {
        snprintf(at, sizeof at, "%s.content", path);
        const json_t *parts = json_object_get(item, "content");
        if (parts == NULL || json_is_null(parts)) { /* a summary only */
            parts = json_object_get(item, "summary");
            snprintf(at, sizeof at, "%s.summary", path);
        }
        json_t *text = parts == NULL || json_is_null(parts)
                           ? json_string("")
                           : content_text(parts, at, param, message);
        if (text == NULL)
            return -1;
        /* content "": templates split an assistant's content as a string */
        return json_array_append_new(messages, json_pack("{s:s, s:s, s:o}", "role", "assistant",
                                                         "content", "", "reasoning_content",
                                                         text));
    }
    snprintf(at, sizeof at, "%s.type", path);
    return graft__refuse(param, message, at, "input items of type '%.40s' are not supported "
                         "(message, function_call, function_call_output, reasoning)", type);
}

/* The request's input as items (a new array, which the output items will join): a string
 * is one user message. */
static json_t *input_items(const json_t *input)
{
    if (json_is_string(input))
        return json_pack("[{s:s, s:s, s:[{s:s, s:O}]}]", "type", "message", "role", "user",
                         "content", "type", "input_text", "text", input);
    return json_copy((json_t *)input);
}

/* Function tools in the chat's shape; -1 with the refusal set for other tools. */
static int chat_tools(const json_t *tools, json_t *chat, char **param, char **message)
{
    if (!json_is_array(tools))
        return graft__refuse(param, message, "tools", "%s must be an array", "'tools'");
    if (json_array_size(tools) == 0)
        return 0;
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        char at[64];
        snprintf(at, sizeof at, "tools[%zu].type", i);
        if (type == NULL || strcmp(type, "function") != 0)
            return graft__refuse(param, message, at,
                                 "tools of type '%.40s' are not supported (only function)",
                                 type ? type : "?");
        json_t *fn = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (json_object_get(t, keys[k]) != NULL)
                json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

/* tool_choice in the chat's shape. */
static int chat_tool_choice(const json_t *choice, json_t *chat, char **param, char **message)
{
    if (json_is_string(choice)) {
        json_object_set(chat, "tool_choice", (json_t *)choice);
        return 0;
    }
    const char *type = json_string_value(json_object_get(choice, "type"));
    const char *name = json_string_value(json_object_get(choice, "name"));
    if (type == NULL || strcmp(type, "function") != 0 || name == NULL)
        return graft__refuse(param, message, "tool_choice", "%s must be auto, none, required or "
                             "{\"type\": \"function\", \"name\": ...}", "'tool_choice'");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function",
                                                       "function", "name", name));
    return 0;
}

/* text.format as the chat's response_format. */
static int chat_format(const json_t *text, json_t *chat, char **param, char **message)
{
    const json_t *format = json_object_get(text, "format");
    if (format == NULL)
        return 0;
    const char *type = json_string_value(json_object_get(format, "type"));
    if (type != NULL && strcmp(type, "text") == 0)
        return 0;
    if (type != NULL && strcmp(type, "json_object") == 0) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (type == NULL || strcmp(type, "json_schema") != 0)
        return graft__refuse(param, message, "text.format.type", "%s must be text, json_object or "
                             "json_schema", "the format");
    json_t *spec = json_object();
    static const char *const keys[] = {"name", "schema", "strict", "description"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (json_object_get(format, keys[k]) != NULL)
            json_object_set(spec, keys[k], json_object_get(format, keys[k]));
    json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema",
                                                           "json_schema", spec));
    return 0;
}

/* The chat completion body for a Responses body (history: the items of
 * previous_response_id's conversation, or NULL); r->items gets the input items. -1 with
 * *param and *message set. */
static int to_chat(const json_t *body, const json_t *history, graft__responses *r,
                   json_t **out, char **param, char **message)
{
    json_t *chat = json_object(), *messages = json_array();
    *out = chat;
    json_object_set_new(chat, "messages", messages);
    static const char *const same[] = {"stop", "parallel_tool_calls", "session_id",
                                       "chat_template_kwargs", "stream", "max_output_tokens"};
    graft__copy_fields(chat, body, same, sizeof same / sizeof same[0]);
    graft__copy_sampling_fields(chat, body);
    if (json_is_true(json_object_get(body, "background")))
        return graft__refuse(param, message, "background", "%s responses are not supported",
                             "background");
    const json_t *instructions = json_object_get(body, "instructions");
    if (instructions != NULL && !json_is_null(instructions)) {
        if (!json_is_string(instructions))
            return graft__refuse(param, message, "instructions", "%s must be a string",
                                 "'instructions'");
        json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "system", "content",
                                                  instructions));
    }
    for (size_t i = 0; i < json_array_size(history); i++) {
        char at[64];
        snprintf(at, sizeof at, "previous_response_id (item %zu)", i);
        if (add_item(messages, json_array_get(history, i), at, param, message) != 0)
            return -1;
    }
    const json_t *input = json_object_get(body, "input");
    if (!json_is_string(input) && !json_is_array(input))
        return graft__refuse(param, message, "input", "%s must be a string or an array of items",
                             "'input'");
    r->items = input_items(input);
    if (r->items == NULL)
        return -1; /* out of memory: no message */
    for (size_t i = 0; i < json_array_size(r->items); i++) {
        char at[64];
        snprintf(at, sizeof at, "input[%zu]", i);
        if (add_item(messages, json_array_get(r->items, i), at, param, message) != 0)
            return -1;
    }
    if (json_array_size(messages) == 0)
        return graft__refuse(param, message, "input", "%s is empty", "the conversation");
    const json_t *tools = json_object_get(body, "tools");
    if (tools != NULL && !json_is_null(tools) && chat_tools(tools, chat, param, message) != 0)
        return -1;
    const json_t *choice = json_object_get(body, "tool_choice");
    if (choice != NULL && chat_tool_choice(choice, chat, param, message) != 0)
        return -1;
    const json_t *include = json_object_get(body, "include");
    if (include != NULL && !json_is_null(include) && !json_is_array(include))
        return graft__refuse(param, message, "include", "%s must be an array of strings",
                             "'include'");
    for (size_t i = 0; i < json_array_size(include); i++) {
        const char *what = json_string_value(json_array_get(include, i));
        if (what != NULL && strcmp(what, "message.output_text.logprobs") == 0) {
            json_object_set_new(chat, "logprobs", json_true());
            const json_t *top = json_object_get(body, "top_logprobs");
            if (top != NULL && !json_is_null(top))
                json_object_set(chat, "top_logprobs", (json_t *)top);
        }
    }
    const json_t *text = json_object_get(body, "text");
    return text == NULL ? 0 : chat_format(text, chat, param, message);
}

/* ---- the response object ---------------------------------------------------------------- */

/* The tokens whose text begins before byte `end` of ch's text, counted on from token t (one
 * known to begin before it). */
static size_t tokens_before(const choice *ch, size_t t, size_t end)
{
    while (t < ch->n_tokens && ch->token_start[t] < end)
        t++;
    return t;
}

/* The log-probabilities of ch's tokens [from, to) when include asked for them, else []. */
static json_t *text_logprobs(const completion *c, const choice *ch, size_t from, size_t to)
{
    return c->req.logprobs ? graft__choice_token_logprobs(c, ch, from, to) : json_array();
}

/* Whether the answer has a message item: content, or no calls and no thought cut short
 * (its content [start, end)). */
static bool wants_message(const choice *ch, size_t start, size_t end, size_t n_calls)
{
    return end > start || (n_calls == 0 && ch->thought.state != GRAFT__THOUGHT_OPEN);
}

/* A finished thought's item status: incomplete when max_output_tokens cut it. */
static const char *thought_status(const choice *ch)
{
    const char *finish = graft__choice_finish_reason(ch);
    return ch->thought.state == GRAFT__THOUGHT_OPEN && finish != NULL &&
                   strcmp(finish, "length") == 0
               ? "incomplete"
               : "completed";
}

/* A reasoning item holding the thought (a reference taken). */
static json_t *reasoning_item(const completion *c, json_t *thought, const char *status)
{
    const graft__responses *r = c->shaped;
    return json_pack("{s:s, s:s, s:s, s:[], s:[{s:s, s:O}]}", "type", "reasoning", "id",
                     r->reasoning_id, "status", status, "summary", "content", "type",
                     "reasoning_text", "text", thought);
}

/* The output items of the finished choice ch: its thought as a reasoning item, its text as
 * a message (unless it is only calls, or only a thought), then its calls. */
static json_t *output_items(const completion *c, choice *ch, const char *status)
{
    const graft__responses *r = c->shaped;
    json_t *items = json_array();
    size_t start = graft__reasoning_content_start(&ch->thought, ch->len);
    size_t end = c->req.tools && !ch->calls_bad ? ch->content_end : ch->len;
    size_t n_calls = ch->calls_bad || ch->calls == NULL ? 0 : json_array_size(ch->calls);
    char id[80];
    json_t *thought = graft__choice_thought(ch, ch->len, false);
    if (thought != NULL)
        json_array_append_new(items, reasoning_item(c, thought, thought_status(ch)));
    json_decref(thought);
    if (wants_message(ch, start, end, n_calls)) {
        size_t first = tokens_before(ch, 0, start);
        json_array_append_new(
            items, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[], s:o}]}", "type",
                             "message", "id", r->message_id, "status", status, "role",
                             "assistant", "content", "type", "output_text", "text",
                             ch->text ? ch->text + start : "", end > start ? end - start : 0,
                             "annotations", "logprobs",
                             text_logprobs(c, ch, first, tokens_before(ch, first, end))));
    }
    for (size_t k = 0; k < n_calls; k++) {
        const json_t *call = json_array_get(ch->calls, k);
        const json_t *fn = json_object_get(call, "function");
        const char *call_id = json_string_value(json_object_get(call, "id"));
        snprintf(id, sizeof id, "fc_%s", call_id ? call_id : "");
        json_array_append_new(items, json_pack("{s:s, s:s, s:O, s:O, s:O, s:s}", "type",
                                               "function_call", "id", id, "call_id",
                                               json_object_get(call, "id"), "name",
                                               json_object_get(fn, "name"), "arguments",
                                               json_object_get(fn, "arguments"), "status",
                                               "completed"));
    }
    return items;
}

/* The usage in the API's names. */
static json_t *usage_json(const completion *c)
{
    size_t generated = graft__generated_tokens(c);
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens",
                     (json_int_t)c->n_prompt, "input_tokens_details", "cached_tokens",
                     (json_int_t)c->choices[0].reused, "output_tokens", (json_int_t)generated,
                     "output_tokens_details", "reasoning_tokens",
                     (json_int_t)graft__thought_tokens(c), "total_tokens",
                     (json_int_t)(c->n_prompt + generated));
}

/* The response object: in progress (no output yet), or finished with the choice's output. */
static json_t *response_json(completion *c, bool finished)
{
    graft__responses *r = c->shaped;
    choice *ch = &c->choices[0];
    const char *finish = finished ? graft__choice_finish_reason(ch) : NULL;
    bool cut = finish != NULL && strcmp(finish, "length") == 0;
    const char *status = !finished ? "in_progress" : cut ? "incomplete" : "completed";
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:n}", "id", c->id, "object",
                          "response", "created_at", (json_int_t)c->created, "status", status,
                          "model", c->ctx->config->alias, "error", "incomplete_details");
    if (cut)
        json_object_set_new(j, "incomplete_details",
                            json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_update(j, r->request);
    json_object_set_new(j, "previous_response_id",
                        r->previous ? json_string(r->previous) : json_null());
    json_object_set_new(j, "store", json_boolean(r->store));
    json_object_set_new(j, "output", finished ? output_items(c, ch, status) : json_array());
    json_object_set_new(j, "usage", finished ? usage_json(c) : json_null());
    if (finished)
        json_object_set_new(j, "graft", graft__graft_json(c));
    return j;
}

/* The finished response object (a reference), stored the first time when `store` says so. */
static json_t *settle(completion *c)
{
    graft__responses *r = c->shaped;
    if (r->final == NULL) {
        r->final = response_json(c, true);
        json_array_extend(r->items, json_object_get(r->final, "output"));
        json_t *conversation = r->history ? json_copy(r->history) : json_array();
        if (r->store && conversation != NULL && json_array_extend(conversation, r->items) == 0 &&
            graft__response_store_put(c->ctx->responses, c->id, r->owner, conversation,
                                      r->final) == GRAFT_ERANGE) {
            /* the object says what happened: it was not stored */
            json_object_set_new(r->final, "store", json_false());
            fprintf(stderr, "graft: response %s not stored: its conversation is over "
                            "--stored-responses-mem\n", c->id);
        }
        json_decref(conversation);
    }
    return json_incref(r->final);
}

/* ---- streaming --------------------------------------------------------------------------- */

/* Appends the event `type` with j's fields (consumed). */
static void event(completion *c, const char *type, json_t *j)
{
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number",
                        json_integer(((graft__responses *)c->shaped)->sequence++));
    graft__append_event(&c->out, &c->out_len, &c->out_cap, type, j);
}

static void open_message(completion *c)
{
    graft__responses *r = c->shaped;
    const char *id = r->message_id;
    r->message_index = r->output_index++;
    event(c, "response.output_item.added",
          json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[]}}", "output_index", r->message_index,
                    "item", "type", "message", "id", id, "status", "in_progress", "role",
                    "assistant", "content"));
    event(c, "response.content_part.added",
          json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", id, "output_index",
                    r->message_index, "content_index", 0, "part", "type", "output_text",
                    "text", "", "annotations"));
    r->message_open = true;
}

/* Closes the message item with its whole text, ch's text[start, start + n) (the tokens from
 * `first` its own). */
static void close_message(completion *c, size_t start, size_t n, const char *status)
{
    graft__responses *r = c->shaped;
    const choice *ch = &c->choices[0];
    const char *id = r->message_id, *text = ch->text ? ch->text + start : "";
    size_t first = tokens_before(ch, 0, start);
    json_t *logprobs = text_logprobs(c, ch, first, tokens_before(ch, first, start + n));
    event(c, "response.output_text.done",
          json_pack("{s:s, s:i, s:i, s:s%, s:O}", "item_id", id, "output_index",
                    r->message_index, "content_index", 0, "text", text, n, "logprobs",
                    logprobs));
    json_t *part = json_pack("{s:s, s:s%, s:[], s:o}", "type", "output_text", "text", text, n,
                             "annotations", "logprobs", logprobs);
    event(c, "response.content_part.done",
          json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", r->message_index,
                    "content_index", 0, "part", part));
    event(c, "response.output_item.done",
          json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:[o]}}", "output_index", r->message_index,
                    "item", "type", "message", "id", id, "status", status, "role", "assistant",
                    "content", part));
    r->message_done = true;
}

/* The reasoning item's events: added, with its text part, before the first piece. */
static void open_thought(completion *c)
{
    graft__responses *r = c->shaped;
    r->thought_index = r->output_index++;
    event(c, "response.output_item.added",
          json_pack("{s:i, s:{s:s, s:s, s:s, s:[], s:[]}}", "output_index", r->thought_index,
                    "item", "type", "reasoning", "id", r->reasoning_id, "status", "in_progress",
                    "summary", "content"));
    event(c, "response.content_part.added",
          json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", r->reasoning_id, "output_index",
                    r->thought_index, "content_index", 0, "part", "type", "reasoning_text",
                    "text", ""));
    r->thought_open = true;
}

/* Closes the reasoning item with the whole thought. */
static void close_thought(completion *c, const char *status)
{
    graft__responses *r = c->shaped;
    json_t *thought = graft__choice_thought(&c->choices[0], 0, false);
    if (thought == NULL)
        thought = json_string("");
    json_t *item = reasoning_item(c, thought, status);
    event(c, "response.reasoning_text.done",
          json_pack("{s:s, s:i, s:i, s:O}", "item_id", r->reasoning_id, "output_index",
                    r->thought_index, "content_index", 0, "text", thought));
    event(c, "response.content_part.done",
          json_pack("{s:s, s:i, s:i, s:{s:s, s:o}}", "item_id", r->reasoning_id,
                    "output_index", r->thought_index, "content_index", 0, "part", "type",
                    "reasoning_text", "text", thought));
    event(c, "response.output_item.done",
          json_pack("{s:i, s:o}", "output_index", r->thought_index, "item", item));
    r->thought_done = true;
}

/* The events of a function call (whole: calls are given out once they parse). */
static void call_events(completion *c, const json_t *call)
{
    graft__responses *r = c->shaped;
    const json_t *fn = json_object_get(call, "function");
    const char *call_id = json_string_value(json_object_get(call, "id"));
    char id[80];
    snprintf(id, sizeof id, "fc_%s", call_id ? call_id : "");
    int index = r->output_index++;
    event(c, "response.output_item.added",
          json_pack("{s:i, s:{s:s, s:s, s:O, s:O, s:s, s:s}}", "output_index", index, "item",
                    "type", "function_call", "id", id, "call_id", json_object_get(call, "id"),
                    "name", json_object_get(fn, "name"), "arguments", "", "status",
                    "in_progress"));
    event(c, "response.function_call_arguments.delta",
          json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", index, "delta",
                    json_object_get(fn, "arguments")));
    event(c, "response.function_call_arguments.done",
          json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", index, "arguments",
                    json_object_get(fn, "arguments")));
    event(c, "response.output_item.done",
          json_pack("{s:i, s:{s:s, s:s, s:O, s:O, s:O, s:s}}", "output_index", index, "item",
                    "type", "function_call", "id", id, "call_id", json_object_get(call, "id"),
                    "name", json_object_get(fn, "name"), "arguments",
                    json_object_get(fn, "arguments"), "status", "completed"));
}

/* The stream's events since the last step; the last step ends with response.completed (or
 * response.incomplete). */
static void events(completion *c, bool going)
{
    graft__responses *r = c->shaped;
    choice *ch = &c->choices[0];
    if (!r->created) {
        json_t *begun = response_json(c, false);
        event(c, "response.created", json_pack("{s:O}", "response", begun));
        event(c, "response.in_progress", json_pack("{s:o}", "response", begun));
        r->created = true;
    }
    if (!ch->started)
        return;
    size_t upto = graft__choice_stream_upto(ch);
    json_t *piece = r->thought_done ? NULL : graft__choice_thought(ch, upto, true);
    if (piece != NULL) {
        if (!r->thought_open)
            open_thought(c);
        event(c, "response.reasoning_text.delta",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", r->reasoning_id, "output_index",
                        r->thought_index, "content_index", 0, "delta", piece));
    }
    size_t start = graft__reasoning_content_start(&ch->thought, ch->len);
    size_t from = r->text_sent > start ? r->text_sent : start;
    size_t n_calls = ch->calls_bad || ch->calls == NULL ? 0 : json_array_size(ch->calls);
    if (r->thought_open && !r->thought_done &&
        (upto > from || n_calls > r->calls_sent || ch->done))
        close_thought(c, ch->done ? thought_status(ch) : "completed");
    if (upto > from && !r->message_done) {
        if (!r->message_open) {
            open_message(c);
            r->tokens_sent = tokens_before(ch, r->tokens_sent, start);
        }
        const char *id = r->message_id;
        size_t tokens = tokens_before(ch, r->tokens_sent, upto);
        event(c, "response.output_text.delta",
              json_pack("{s:s, s:i, s:i, s:s%, s:o}", "item_id", id, "output_index",
                        r->message_index, "content_index", 0, "delta", ch->text + from,
                        upto - from, "logprobs", text_logprobs(c, ch, r->tokens_sent, tokens)));
        r->text_sent = upto;
        r->tokens_sent = tokens;
    }
    if (n_calls > r->calls_sent && r->message_open && !r->message_done)
        close_message(c, start, r->text_sent - start, "completed");
    for (; r->calls_sent < n_calls; r->calls_sent++)
        call_events(c, json_array_get(ch->calls, r->calls_sent));
    if (going || !ch->done)
        return;
    json_t *final = settle(c);
    const char *status = json_string_value(json_object_get(final, "status"));
    size_t end = c->req.tools && !ch->calls_bad ? ch->content_end : ch->len;
    if (!r->message_open && !r->message_done && wants_message(ch, start, end, n_calls))
        open_message(c);
    if (r->message_open && !r->message_done)
        close_message(c, start, r->text_sent > start ? r->text_sent - start : 0, status);
    event(c, strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", final));
}

/* A stream's end on a failed generation: response.failed with the message. */
static void failed(completion *c, const char *message)
{
    json_t *j = response_json(c, false);
    json_object_set_new(j, "status", json_string("failed"));
    json_object_set_new(j, "error", json_pack("{s:s, s:s}", "code", "server_error", "message",
                                              message));
    event(c, "response.failed", json_pack("{s:o}", "response", j));
}

/* ---- the request ------------------------------------------------------------------------- */

/* The fields a response gives back as the request set them (or their defaults). */
static json_t *echoed_fields(const json_t *body)
{
    json_t *j = json_object();
    static const char *const keys[] = {"instructions", "max_output_tokens", "temperature",
                                       "top_p", "tools", "tool_choice", "text",
                                       "parallel_tool_calls", "metadata", "truncation",
                                       "reasoning", "user"};
    static const char *const defaults[] = {"null", "null", "1", "1", "[]", "\"auto\"",
                                           "{\"format\": {\"type\": \"text\"}}", "true", "{}",
                                           "\"disabled\"", "null", "null"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = json_object_get(body, keys[k]);
        json_object_set_new(j, keys[k], v != NULL ? json_incref(v)
                                                  : json_loads(defaults[k], JSON_DECODE_ANY,
                                                               NULL));
    }
    return j;
}

int graft__responses_begin(completion *c, const json_t *body, const char *session_header,
                           const char *owner, graft__reply *reply)
{
    static const graft__shape shape = {settle, events, failed, responses_free};
    graft__responses *r = calloc(1, sizeof *r);
    if (r == NULL)
        return graft__reply_error(reply, 503, "server_error", NULL, "out of memory"), -1;
    c->shape = &shape;
    c->shaped = r;
    snprintf(r->message_id, sizeof r->message_id, "msg_%s", c->id);
    snprintf(r->reasoning_id, sizeof r->reasoning_id, "rs_%s", c->id);
    const json_t *store = json_object_get(body, "store");
    const json_t *previous = json_object_get(body, "previous_response_id");
    if (store != NULL && !json_is_null(store) && !json_is_boolean(store))
        return graft__reply_error(reply, 400, "invalid_request_error", "store",
                                  "'store' must be true or false"), -1;
    r->store = store == NULL || json_is_null(store) || json_is_true(store);
    r->request = echoed_fields(body);
    if (owner != NULL && (r->owner = strdup(owner)) == NULL)
        return graft__reply_error(reply, 503, "server_error", NULL, "out of memory"), -1;
    if (previous != NULL && !json_is_null(previous)) {
        if (!json_is_string(previous))
            return graft__reply_error(reply, 400, "invalid_request_error",
                                      "previous_response_id", "'previous_response_id' must "
                                      "be a string"), -1;
        r->previous = strdup(json_string_value(previous));
        r->history = r->previous == NULL ? NULL
                                         : graft__response_store_items(c->ctx->responses,
                                                                       r->previous, owner);
        if (r->history == NULL)
            return graft__reply_error(reply, 400, "invalid_request_error",
                                      "previous_response_id", "no stored response "
                                      "'%.100s'", json_string_value(previous)), -1;
    }
    json_t *chat = NULL;
    char *param = NULL, *message = NULL;
    int rc = to_chat(body, r->history, r, &chat, &param, &message);
    if (rc != 0)
        graft__reply_error(reply, message ? 400 : 503,
                           message ? "invalid_request_error" : "server_error", param, "%s",
                           message ? message : "out of memory");
    else
        rc = graft__completion_begin(c, chat, GRAFT__API_CHAT, session_header, owner, reply);
    free(param);
    free(message);
    json_decref(chat);
    return rc;
}
