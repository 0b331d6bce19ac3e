/*
 * test_server_messages.c: Anthropic's Messages API through `graft serve` (the real binary on
 * stories260K, spoken to with libcurl): POST /v1/messages whole and streamed, POST
 * /v1/messages/count_tokens, errors in the API's shape, x-api-key.
 *
 * The oracle is the server's own chat completions (and, for a prefill, its text completions
 * of the rendered prompt): a Message runs as a chat completion of the same conversation, so
 * at temperature 0 it has the same text, bit for bit, the same thought and call, and the
 * same token counts.
 *
 * Checked: the system as a string or as text blocks gives the chat answer, stop_reason
 * max_tokens, end_turn or stop_sequence (with the string) as the chat's finish, usage's
 * input_tokens and cache_read_input_tokens adding up to the chat's prompt tokens, the
 * second asking read from the cache; streamed, the API's events in order, the deltas
 * spelling the whole Message's text and the last usage its usage; a prefill continues as the
 * text completion of the rendered prompt and the prefill does; a forced tool is a tool_use
 * block with the chat call's arguments as its input (streamed as input_json_delta), and its
 * tool_result sent back gives the chat answer to the tool message; a thinking model's
 * thought is a thinking block equal to the chat's reasoning_content (streamed as
 * thinking_delta, closed by a signature_delta), `thinking` disabled gives the text the chat
 * gives with enable_thinking false, an assistant's thinking block in the input reaches the
 * template as reasoning_content; count_tokens counts the prompt; errors are
 * {type: error, error: {type, message}} with the status and name the field, and disturb
 * nothing; a key is taken from x-api-key as from Authorization; /metrics counts the
 * endpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_client.h"

/* stories260K's end-of-text token: a bias of 19 on it ends the greedy answer to "Hi" after a
 * few tokens. */
#define EOS_TOKEN "2"
#define STORY_SYSTEM "You tell short stories about animals."
#define STORY_QUESTION "Tell me about a brave little dog."
#define WEATHER_QUESTION "Weather in Paris?"
#define CALL_TOKENS 96
#define WEATHER_PARAMETERS                                                                         \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": "     \
    "12}, \"unit\": {\"enum\": [\"C\", \"F\"]}}, \"required\": [\"city\", \"unit\"], "             \
    "\"additionalProperties\": false}"

static server plain, thinking;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "512", NULL};
    plain = graft_test_serve_begin(args);
    static char template[1024];
    snprintf(template, sizeof template, "%s/Qwen-QwQ-32B.jinja", getenv("GRAFT_TEMPLATES_DIR"));
    const char *thinking_args[] = {"--ctx", "512", "--chat-template", template, NULL};
    thinking = graft_test_start_server(thinking_args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int thinking_exit = graft_test_stop_server(&thinking);
    return graft_test_serve_end(&plain) == 0 && thinking_exit == 0 ? 0 : -1;
}

/* ---- requests -------------------------------------------------------------------------------- */

/* One POST of body (taken) with these headers (NULL-terminated, or NULL). */
static response post(const server *s, const char *path, json_t *body,
                     const char *const *headers)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    response r = graft_test_request_headers(s, "POST", path, text, NULL, headers);
    free(text);
    return r;
}

/* The JSON of a 200 answer to POST path with body (taken). */
static json_t *ask(const server *s, const char *path, json_t *body)
{
    response r = post(s, path, body, NULL);
    if (r.status != 200)
        fail_msg("POST %s: status %ld: %s", path, r.status, r.body ? r.body : "");
    json_t *j = graft_test_json_of(&r);
    graft_test_response_free(&r);
    return j;
}

static bool is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* A greedy Messages body of at most `tokens` with these messages (taken). */
static json_t *greedy(json_t *messages, int tokens)
{
    return json_pack("{s:s, s:o, s:i, s:f}", "model", "stories260K", "messages", messages,
                     "max_tokens", tokens, "temperature", 0.0);
}

static json_t *message(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

/* The chat completion body for the same conversation: the system (NULL: none) first. */
static json_t *chat_body(const char *system, json_t *messages, int tokens)
{
    json_t *all = system ? json_pack("[o]", message("system", system)) : json_array();
    json_array_extend(all, messages);
    json_decref(messages);
    return json_pack("{s:o, s:i, s:f}", "messages", all, "max_tokens", tokens, "temperature",
                     0.0);
}

static json_t *chat_message(const json_t *answer)
{
    return json_object_get(json_array_get(json_object_get(answer, "choices"), 0), "message");
}

static const char *chat_finish(const json_t *answer)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(answer, "choices"), 0), "finish_reason"));
}

static json_int_t usage_of(const json_t *j, const char *field)
{
    json_t *v = json_object_get(json_object_get(j, "usage"), field);
    if (!json_is_integer(v))
        fail_msg("usage.%s: %s", field, graft_test_shown(j));
    return json_integer_value(v);
}

/* ---- what a Message holds -------------------------------------------------------------------- */

/* The Message's fields, its blocks' types as given (e.g. "thinking,text"), and its usage. */
static void expect_message(const json_t *m, const char *blocks)
{
    const char *id = json_string_value(json_object_get(m, "id"));
    if (id == NULL || strncmp(id, "msg_", 4) != 0 || !is(json_object_get(m, "type"), "message") ||
        !is(json_object_get(m, "role"), "assistant") || !is(json_object_get(m, "model"),
                                                            "stories260K"))
        fail_msg("not a Message: %s", graft_test_shown(m));
    char types[256] = "";
    json_t *content = json_object_get(m, "content");
    for (size_t i = 0; i < json_array_size(content); i++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", i ? "," : "",
                 json_string_value(json_object_get(json_array_get(content, i), "type")));
    if (strcmp(types, blocks) != 0)
        fail_msg("blocks %s, expected %s: %s", types, blocks, graft_test_shown(m));
    assert_int_equal(usage_of(m, "cache_creation_input_tokens"), 0);
    assert_true(usage_of(m, "input_tokens") >= 1);
    assert_true(usage_of(m, "cache_read_input_tokens") >= 0);
}

/* The `field` of the first block of this type (borrowed). */
static const char *block_field(const json_t *m, const char *type, const char *field)
{
    json_t *content = json_object_get(m, "content");
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *b = json_array_get(content, i);
        if (is(json_object_get(b, "type"), type))
            return json_string_value(json_object_get(b, field));
    }
    fail_msg("no %s block: %s", type, graft_test_shown(m));
    return NULL;
}

/* The Message m is the chat answer: text (and thought), stop reason and token counts. */
static void expect_chat_answer(const json_t *m, const json_t *answer)
{
    const json_t *msg = chat_message(answer);
    const char *content = json_string_value(json_object_get(msg, "content"));
    const char *finish = chat_finish(answer);
    const char *reason = json_string_value(json_object_get(m, "stop_reason"));
    if (content != NULL && content[0] != '\0')
        assert_string_equal(block_field(m, "text", "text"), content);
    const char *thought = json_string_value(json_object_get(msg, "reasoning_content"));
    if (thought != NULL && thought[0] != '\0')
        assert_string_equal(block_field(m, "thinking", "thinking"), thought);
    if (strcmp(finish, "length") == 0)
        assert_string_equal(reason, "max_tokens");
    else if (strcmp(finish, "tool_calls") == 0)
        assert_string_equal(reason, "tool_use");
    else if (strcmp(reason, "end_turn") != 0 && strcmp(reason, "stop_sequence") != 0)
        fail_msg("stop_reason %s for finish %s", reason, finish);
    assert_int_equal(usage_of(m, "output_tokens"), usage_of(answer, "completion_tokens"));
    assert_int_equal(usage_of(m, "input_tokens") + usage_of(m, "cache_read_input_tokens"),
                     usage_of(answer, "prompt_tokens"));
}

/* The story conversation, its system as a string or as text blocks. */
static json_t *story(bool blocks, int tokens)
{
    json_t *b = greedy(json_pack("[o]", message("user", STORY_QUESTION)), tokens);
    json_object_set_new(b, "system",
                        blocks ? json_pack("[{s:s, s:s}, {s:s, s:s}]", "type", "text", "text",
                                           "You tell short stories ", "type", "text", "text",
                                           "about animals.")
                               : json_string(STORY_SYSTEM));
    json_object_set_new(b, "metadata", json_pack("{s:s}", "user_id", "u1"));
    return b;
}

/* ---- whole Messages -------------------------------------------------------------------------- */

/* The story as a Message is the chat answer, whether the system is a string or blocks; the
 * second asking reads its prompt from the cache; an answer that ends is end_turn. */
static void test_whole_message_is_the_chat_answer(void **state)
{
    (void)state;
    json_t *answer = ask(&plain, "/v1/chat/completions",
                         chat_body(STORY_SYSTEM,
                                   json_pack("[o]", message("user", STORY_QUESTION)), 24));
    json_t *m = ask(&plain, "/v1/messages", story(false, 24));
    expect_message(m, "text");
    expect_chat_answer(m, answer);
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "max_tokens");
    assert_true(json_is_null(json_object_get(m, "stop_sequence")));
    json_t *again = ask(&plain, "/v1/messages", story(true, 24));
    expect_chat_answer(again, answer);
    /* the same prompt: all of it but the last token from the cache */
    assert_int_equal(usage_of(again, "cache_read_input_tokens"),
                     usage_of(answer, "prompt_tokens") - 1);
    assert_int_equal(usage_of(again, "input_tokens"), 1);
    json_decref(again);
    json_decref(m);
    json_decref(answer);

    json_t *end = greedy(json_pack("[o]", message("user", "Hi")), 16);
    json_object_set_new(end, "logit_bias", json_pack("{s:i}", EOS_TOKEN, 19));
    json_t *ended = ask(&plain, "/v1/messages", end);
    json_t *chat_end = chat_body(NULL, json_pack("[o]", message("user", "Hi")), 16);
    json_object_set_new(chat_end, "logit_bias", json_pack("{s:i}", EOS_TOKEN, 19));
    json_t *chat_ended = ask(&plain, "/v1/chat/completions", chat_end);
    assert_string_equal(chat_finish(chat_ended), "stop");
    assert_string_equal(json_string_value(json_object_get(ended, "stop_reason")), "end_turn");
    expect_chat_answer(ended, chat_ended);
    assert_true(usage_of(ended, "output_tokens") < 16);
    json_decref(ended);
    json_decref(chat_ended);

    /* llama.cpp's samplers pass on as they are: the chat answer with Mirostat and DRY,
     * which is not the answer without them */
    json_t *shaped = story(false, 24);
    json_t *chat_shaped = chat_body(STORY_SYSTEM,
                                    json_pack("[o]", message("user", STORY_QUESTION)), 24);
    json_t *chat_seeded = json_deep_copy(chat_shaped);
    json_t *fields = json_pack("{s:f, s:i, s:i, s:f, s:f}", "temperature", 1.0, "seed", 7,
                               "mirostat", 2, "mirostat_tau", 3.0, "dry_multiplier", 0.8);
    json_object_update(shaped, fields);
    json_object_update(chat_shaped, fields);
    json_object_set_new(chat_seeded, "temperature", json_real(1.0));
    json_object_set_new(chat_seeded, "seed", json_integer(7));
    json_decref(fields);
    json_t *shaped_answer = ask(&plain, "/v1/messages", shaped);
    json_t *chat_shaped_answer = ask(&plain, "/v1/chat/completions", chat_shaped);
    json_t *chat_seeded_answer = ask(&plain, "/v1/chat/completions", chat_seeded);
    expect_chat_answer(shaped_answer, chat_shaped_answer);
    assert_false(json_equal(json_object_get(chat_message(chat_shaped_answer), "content"),
                            json_object_get(chat_message(chat_seeded_answer), "content")));
    json_decref(shaped_answer);
    json_decref(chat_shaped_answer);
    json_decref(chat_seeded_answer);
}

/* ---- streams --------------------------------------------------------------------------------- */

/* The events of body (taken) streamed. */
static json_t *stream(const server *s, json_t *body)
{
    json_object_set_new(body, "stream", json_true());
    response r = post(s, "/v1/messages", body, NULL);
    json_t *events = graft_test_named_events(&r);
    graft_test_response_free(&r);
    return events;
}

/* Appends s to *text. */
static void append(char **text, const char *s)
{
    if (s == NULL)
        fail_msg("a delta without its text");
    size_t n = *text ? strlen(*text) : 0;
    *text = realloc(*text, n + strlen(s) + 1);
    strcpy(*text + n, s);
}

/* The Message a client assembles from the events, checked in the API's order: message_start
 * (and pings), each block's start, deltas of its kind and stop at increasing indexes, then
 * message_delta and message_stop last. */
static json_t *assemble(const json_t *events)
{
    json_t *start = json_array_get(events, 0);
    if (!is(json_object_get(start, "type"), "message_start"))
        fail_msg("first event: %s", graft_test_shown(start));
    json_t *m = json_deep_copy(json_object_get(start, "message"));
    assert_int_equal(json_array_size(json_object_get(m, "content")), 0);
    assert_true(json_is_null(json_object_get(m, "stop_reason")));
    assert_int_equal(usage_of(m, "output_tokens"), 0);
    json_t *content = json_object_get(m, "content");
    size_t n = json_array_size(events), i = 1;
    for (; i < n; i++) {
        json_t *e = json_array_get(events, i);
        if (is(json_object_get(e, "type"), "ping"))
            continue;
        if (!is(json_object_get(e, "type"), "content_block_start"))
            break;
        json_int_t index = json_integer_value(json_object_get(e, "index"));
        assert_int_equal(index, (json_int_t)json_array_size(content));
        json_t *block = json_deep_copy(json_object_get(e, "content_block"));
        const char *type = json_string_value(json_object_get(block, "type"));
        const char *key = strcmp(type, "text") == 0 ? "text"
                          : strcmp(type, "thinking") == 0 ? "thinking"
                                                          : "partial_json";
        char *text = NULL;
        append(&text, "");
        bool signed_off = false;
        for (i++; i < n && is(json_object_get(json_array_get(events, i), "type"),
                              "content_block_delta");
             i++) {
            json_t *d = json_array_get(events, i);
            json_t *delta = json_object_get(d, "delta");
            assert_int_equal(json_integer_value(json_object_get(d, "index")), index);
            if (signed_off)
                fail_msg("a delta after the signature: %s", graft_test_shown(d));
            if (strcmp(type, "thinking") == 0 && is(json_object_get(delta, "type"),
                                                    "signature_delta")) {
                signed_off = true;
                json_object_set(block, "signature", json_object_get(delta, "signature"));
                continue;
            }
            const char *kind = strcmp(type, "text") == 0       ? "text_delta"
                               : strcmp(type, "thinking") == 0 ? "thinking_delta"
                                                               : "input_json_delta";
            if (!is(json_object_get(delta, "type"), kind))
                fail_msg("a %s block's delta: %s", type, graft_test_shown(d));
            append(&text, json_string_value(json_object_get(delta, key)));
        }
        if (strcmp(type, "thinking") == 0 && !signed_off)
            fail_msg("a thinking block without its signature_delta");
        json_t *stop = json_array_get(events, i);
        if (!is(json_object_get(stop, "type"), "content_block_stop") ||
            json_integer_value(json_object_get(stop, "index")) != index)
            fail_msg("event %zu: %s, expected block %d's stop", i, graft_test_shown(stop),
                     (int)index);
        if (strcmp(type, "tool_use") == 0) {
            assert_int_equal(json_object_size(json_object_get(block, "input")), 0);
            json_object_set_new(block, "input", graft_test_parse(text));
        } else {
            json_object_set_new(block, key, json_string(text));
        }
        free(text);
        json_array_append_new(content, block);
    }
    json_t *delta = json_array_get(events, i);
    if (i + 2 != n || !is(json_object_get(delta, "type"), "message_delta") ||
        !is(json_object_get(json_array_get(events, i + 1), "type"), "message_stop"))
        fail_msg("event %zu of %zu: %s, expected message_delta then message_stop", i, n,
                 graft_test_shown(delta));
    json_object_update(m, json_object_get(delta, "delta"));
    json_object_set(m, "usage", json_object_get(delta, "usage"));
    return m;
}

/* The streamed Message of body (taken) equals the whole one but its ids and run fields (the
 * whole one asked again, so that both read the prompt from the cache alike). */
static void expect_streamed_as_whole(const server *s, json_t *body)
{
    json_decref(ask(s, "/v1/messages", json_deep_copy(body)));
    json_t *whole = ask(s, "/v1/messages", json_deep_copy(body));
    json_t *events = stream(s, body);
    json_t *streamed = assemble(events);
    json_object_del(whole, "graft");
    for (int k = 0; k < 2; k++) { /* ids are each request's own */
        json_t *m = k ? streamed : whole;
        json_object_del(m, "id");
        json_t *content = json_object_get(m, "content");
        for (size_t i = 0; i < json_array_size(content); i++)
            json_object_del(json_array_get(content, i), "id");
    }
    if (!json_equal(whole, streamed)) {
        char *w = json_dumps(whole, JSON_COMPACT);
        fail_msg("streamed %s\nwhole %s", graft_test_shown(streamed), w);
    }
    json_decref(streamed);
    json_decref(events);
    json_decref(whole);
}

static void test_streamed_message(void **state)
{
    (void)state;
    expect_streamed_as_whole(&plain, story(false, 24));
    json_t *end = greedy(json_pack("[o]", message("user", "Hi")), 16);
    json_object_set_new(end, "logit_bias", json_pack("{s:i}", EOS_TOKEN, 19));
    expect_streamed_as_whole(&plain, end);
}

/* A word of the greedy answer as a stop sequence cuts the text before it, whole and
 * streamed. */
static void test_stop_sequence(void **state)
{
    (void)state;
    json_t *m = ask(&plain, "/v1/messages", story(false, 24));
    const char *text = block_field(m, "text", "text");
    const char *space = strchr(text + 4, ' ');
    assert_non_null(space);
    char word[16];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(space + 1, " \n"), space + 1);
    assert_true(strlen(word) > 0);
    json_t *b = story(false, 24);
    json_object_set_new(b, "stop_sequences", json_pack("[s, s]", "no such words", word));
    json_t *stopped = ask(&plain, "/v1/messages", json_deep_copy(b));
    expect_message(stopped, "text");
    const char *cut = block_field(stopped, "text", "text");
    assert_int_equal(strlen(cut), strstr(text, word) - text);
    assert_memory_equal(cut, text, strlen(cut));
    assert_string_equal(json_string_value(json_object_get(stopped, "stop_reason")),
                        "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(stopped, "stop_sequence")), word);
    expect_streamed_as_whole(&plain, b);
    json_decref(stopped);
    json_decref(m);
}

/* ---- prefill --------------------------------------------------------------------------------- */

/* A last message of the assistant's is continued: the Message's text is the text completion
 * of the rendered conversation followed by the prefill; /apply-template renders it so with
 * continue_final_message. */
static void test_prefill_continues(void **state)
{
    (void)state;
    json_t *rendered = ask(&plain, "/apply-template",
                           json_pack("{s:[o]}", "messages", message("user", STORY_QUESTION)));
    const char *prompt = json_string_value(json_object_get(rendered, "prompt"));
    char full[1024];
    snprintf(full, sizeof full, "%sOnce upon", prompt);
    json_t *completion = ask(&plain, "/v1/completions",
                             json_pack("{s:s, s:i, s:f}", "prompt", full, "max_tokens", 12,
                                       "temperature", 0.0));
    const char *expected = json_string_value(json_object_get(
        json_array_get(json_object_get(completion, "choices"), 0), "text"));
    json_t *conversation = json_pack("[o, {s:s, s:[{s:s, s:s}]}]",
                                     message("user", STORY_QUESTION), "role", "assistant",
                                     "content", "type", "text", "text", "Once upon");
    json_t *m = ask(&plain, "/v1/messages", greedy(json_deep_copy(conversation), 12));
    expect_message(m, "text");
    assert_string_equal(block_field(m, "text", "text"), expected);
    assert_int_equal(usage_of(m, "input_tokens") + usage_of(m, "cache_read_input_tokens"),
                     usage_of(completion, "prompt_tokens"));
    json_t *with = ask(&plain, "/apply-template",
                       json_pack("{s:o, s:b}", "messages",
                                 json_pack("[o, o]", message("user", STORY_QUESTION),
                                           message("assistant", "Once upon")),
                                 "continue_final_message", 1));
    assert_string_equal(json_string_value(json_object_get(with, "prompt")), full);
    expect_streamed_as_whole(&plain, greedy(conversation, 12));
    const char *refused[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
        "\"continue_final_message\": true}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
        "\"assistant\", \"content\": \"Once\", \"reasoning_content\": \"hm\"}], "
        "\"continue_final_message\": true}"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        response r = graft_test_request(&plain, "POST", "/v1/chat/completions", refused[i]);
        free(graft_test_expect_error(&r, 400, "continue_final_message"));
        graft_test_response_free(&r);
    }
    json_decref(with);
    json_decref(m);
    json_decref(completion);
    json_decref(rendered);
}

/* ---- tools ----------------------------------------------------------------------------------- */

static json_t *weather_tool(void)
{
    return json_pack("{s:s, s:s, s:o}", "name", "get_weather", "description",
                     "The weather in a city", "input_schema", graft_test_parse(WEATHER_PARAMETERS));
}

/* The greedy body forcing get_weather (tool_choice taken), '"' raised so the call closes. */
static json_t *forced_call(json_t *tool_choice)
{
    json_t *b = greedy(json_pack("[o]", message("user", WEATHER_QUESTION)), CALL_TOKENS);
    json_object_set_new(b, "tools", json_pack("[o]", weather_tool()));
    json_object_set_new(b, "tool_choice", tool_choice);
    json_object_set_new(b, "logit_bias", json_pack("{s:i, s:i}", "37", 6, "436", 6));
    return b;
}

/* The chat completion forcing the same call. */
static json_t *forced_chat(void)
{
    json_t *b = chat_body(NULL, json_pack("[o]", message("user", WEATHER_QUESTION)),
                          CALL_TOKENS);
    json_object_set_new(b, "tools", json_pack("[{s:s, s:{s:s, s:s, s:o}}]", "type", "function",
                                              "function", "name", "get_weather", "description",
                                              "The weather in a city", "parameters",
                                              graft_test_parse(WEATHER_PARAMETERS)));
    json_object_set_new(b, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function",
                                                    "function", "name", "get_weather"));
    json_object_set_new(b, "logit_bias", json_pack("{s:i, s:i}", "37", 6, "436", 6));
    return ask(&plain, "/v1/chat/completions", b);
}

/* tool_choice tool (and any): a tool_use block whose input is the chat call's arguments,
 * stop_reason tool_use, streamed alike; the tool_result sent back (as a string and as text
 * blocks) gives the chat answer to the tool message. */
static void test_forced_tool_use(void **state)
{
    (void)state;
    json_t *answer = forced_chat();
    assert_string_equal(chat_finish(answer), "tool_calls");
    json_t *call = json_array_get(json_object_get(chat_message(answer), "tool_calls"), 0);
    const char *arguments = json_string_value(
        json_object_get(json_object_get(call, "function"), "arguments"));
    json_t *args = graft_test_parse(arguments);
    json_t *m = ask(&plain, "/v1/messages",
                    forced_call(json_pack("{s:s, s:s}", "type", "tool", "name", "get_weather")));
    expect_message(m, "tool_use");
    expect_chat_answer(m, answer);
    json_t *use = json_array_get(json_object_get(m, "content"), 0);
    assert_true(is(json_object_get(use, "name"), "get_weather"));
    if (!json_equal(json_object_get(use, "input"), args))
        fail_msg("input %s, arguments %s", graft_test_shown(json_object_get(use, "input")),
                 arguments);
    json_t *any = ask(&plain, "/v1/messages", forced_call(json_pack("{s:s}", "type", "any")));
    assert_true(json_equal(json_object_get(json_array_get(json_object_get(any, "content"), 0),
                                           "input"),
                           args));
    expect_streamed_as_whole(&plain,
                             forced_call(json_pack("{s:s, s:s}", "type", "tool", "name",
                                                   "get_weather")));

    /* the result sent back */
    const char *id = json_string_value(json_object_get(use, "id"));
    json_t *tool_chat = chat_body(NULL, json_pack("[o]", message("user", WEATHER_QUESTION)),
                                  16);
    json_array_append_new(json_object_get(tool_chat, "messages"),
                          json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}", "role",
                                    "assistant", "content", "", "tool_calls", "id", id, "type",
                                    "function", "function", "name", "get_weather", "arguments",
                                    arguments));
    json_array_append_new(json_object_get(tool_chat, "messages"),
                          json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id,
                                    "content", "Sunny, 21 C"));
    json_object_set_new(tool_chat, "tools", json_pack("[{s:s, s:{s:s, s:s, s:o}}]", "type",
                                                      "function", "function", "name",
                                                      "get_weather", "description",
                                                      "The weather in a city", "parameters",
                                                      graft_test_parse(WEATHER_PARAMETERS)));
    json_t *chat_after = ask(&plain, "/v1/chat/completions", tool_chat);
    for (int blocks = 0; blocks < 2; blocks++) {
        json_t *result = blocks ? json_pack("[{s:s, s:s}, {s:s, s:s}]", "type", "text", "text",
                                            "Sunny, ", "type", "text", "text", "21 C")
                                : json_string("Sunny, 21 C");
        json_t *b = greedy(json_pack("[o, {s:s, s:[O]}, {s:s, s:[{s:s, s:s, s:o}]}]",
                                     message("user", WEATHER_QUESTION), "role", "assistant",
                                     "content", use, "role", "user", "content", "type",
                                     "tool_result", "tool_use_id", id, "content", result),
                           16);
        json_object_set_new(b, "tools", json_pack("[o]", weather_tool()));
        json_t *after = ask(&plain, "/v1/messages", b);
        expect_chat_answer(after, chat_after);
        json_decref(after);
    }
    json_decref(chat_after);
    json_decref(any);
    json_decref(m);
    json_decref(args);
    json_decref(answer);
}

/* ---- thoughts -------------------------------------------------------------------------------- */

/* QwQ's template opens a thought when enable_thinking is true (stories260K never closes
 * it): `thinking` enabled gives a thinking block, the chat's reasoning_content, streamed as
 * thinking deltas; disabled, the chat's text with enable_thinking false. */
static void test_thinking_block(void **state)
{
    (void)state;
    json_t *chat_on = chat_body(NULL, json_pack("[o]", message("user", "Hi")), 20);
    json_object_set_new(chat_on, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking",
                                                                   1));
    json_t *answer = ask(&thinking, "/v1/chat/completions", chat_on);
    const char *thought = json_string_value(json_object_get(chat_message(answer),
                                                            "reasoning_content"));
    assert_non_null(thought);
    assert_true(strlen(thought) > 0);
    json_t *b = greedy(json_pack("[o]", message("user", "Hi")), 20);
    json_object_set_new(b, "thinking", json_pack("{s:s, s:i}", "type", "enabled",
                                                 "budget_tokens", 1024));
    json_t *m = ask(&thinking, "/v1/messages", json_deep_copy(b));
    expect_message(m, "thinking");
    expect_chat_answer(m, answer);
    assert_string_equal(block_field(m, "thinking", "thinking"), thought);
    assert_non_null(block_field(m, "thinking", "signature"));
    expect_streamed_as_whole(&thinking, b);

    json_t *chat_off = chat_body(NULL, json_pack("[o]", message("user", "Hi")), 20);
    json_object_set_new(chat_off, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking",
                                                                    0));
    json_t *answer_off = ask(&thinking, "/v1/chat/completions", chat_off);
    json_t *off = greedy(json_pack("[o]", message("user", "Hi")), 20);
    json_object_set_new(off, "thinking", json_pack("{s:s}", "type", "disabled"));
    json_t *m_off = ask(&thinking, "/v1/messages", off);
    expect_message(m_off, "text");
    expect_chat_answer(m_off, answer_off);
    json_decref(m_off);
    json_decref(answer_off);
    json_decref(m);
    json_decref(answer);
}

/* A greedy chat answer of the thinking server, thought on, its token ids given back, with
 * a thinking_token_budget when budget > 0. */
static json_t *thinking_answer(int budget)
{
    json_t *b = chat_body(NULL, json_pack("[o]", message("user", "Hi")), 30);
    json_object_set_new(b, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 1));
    json_object_set_new(b, "return_tokens", json_true());
    if (budget > 0)
        json_object_set_new(b, "thinking_token_budget", json_integer(budget));
    return ask(&thinking, "/v1/chat/completions", b);
}

/* The text of tokens[from, to) by POST /detokenize, to free. */
static char *detokenized(const json_t *tokens, size_t from, size_t to)
{
    json_t *ids = json_array();
    for (size_t i = from; i < to; i++)
        json_array_append(ids, json_array_get(tokens, i));
    json_t *d = ask(&thinking, "/detokenize", json_pack("{s:o}", "tokens", ids));
    char *text = strdup(json_string_value(json_object_get(d, "content")));
    json_decref(d);
    return text;
}

/* thinking_token_budget, and budget_tokens: the thought is closed after that many tokens
 * (stories260K never closes it itself): the answer's tokens are the unbudgeted answer's
 * first ones, a line break and "</think>", then the content; the thought is the first
 * ones' text and the content what follows the tag, each stripped as thoughts are. The
 * Message with budget_tokens is that chat answer, whole and streamed. */
static void test_thinking_budget(void **state)
{
    (void)state;
    enum { BUDGET = 4 };
    json_t *unbudgeted = thinking_answer(0);
    json_t *budgeted = thinking_answer(BUDGET);
    const json_t *plain_ids = json_object_get(
        json_array_get(json_object_get(unbudgeted, "choices"), 0), "tokens");
    const json_t *ids = json_object_get(
        json_array_get(json_object_get(budgeted, "choices"), 0), "tokens");
    assert_true(json_array_size(ids) == 30 && json_array_size(plain_ids) == 30);
    for (size_t i = 0; i < BUDGET; i++)
        assert_true(json_equal(json_array_get(ids, i), json_array_get(plain_ids, i)));
    char *thought = detokenized(ids, 0, BUDGET);
    char *rest = detokenized(ids, BUDGET, json_array_size(ids));
    const char *tag = "\n</think>";
    if (strncmp(rest, tag, strlen(tag)) != 0)
        fail_msg("after the budget: %s", rest);
    const json_t *msg = chat_message(budgeted);
    const char *t = thought + strspn(thought, " \n");
    size_t n = strlen(t);
    while (n > 0 && strchr(" \n", t[n - 1]) != NULL)
        n--;
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    assert_non_null(reasoning);
    assert_int_equal(strlen(reasoning), n);
    assert_memory_equal(reasoning, t, n);
    const char *after = rest + strlen(tag);
    assert_string_equal(json_string_value(json_object_get(msg, "content")),
                        after + strspn(after, " \n"));
    json_t *b = greedy(json_pack("[o]", message("user", "Hi")), 30);
    json_object_set_new(b, "thinking", json_pack("{s:s, s:i}", "type", "enabled",
                                                 "budget_tokens", BUDGET));
    json_t *m = ask(&thinking, "/v1/messages", json_deep_copy(b));
    expect_chat_answer(m, budgeted);
    expect_streamed_as_whole(&thinking, b);
    response r = graft_test_request(&thinking, "POST", "/v1/chat/completions",
                                    "{\"messages\": [{\"role\": \"user\", \"content\": "
                                    "\"Hi\"}], \"thinking_token_budget\": 0}");
    free(graft_test_expect_error(&r, 400, "thinking_token_budget"));
    graft_test_response_free(&r);
    json_decref(m);
    free(rest);
    free(thought);
    json_decref(budgeted);
    json_decref(unbudgeted);
}

/* An assistant turn's thinking block reaches the template as its reasoning_content: Qwen3's
 * renders it for the turns of a tool loop (after the last user query), so the prompt of
 * [user, assistant thinking and tool_use, user tool_result] counts as many tokens as the
 * chat's with reasoning_content, and more than without the thinking block. */
static void test_thinking_in_the_input(void **state)
{
    (void)state;
    static char template[1024];
    snprintf(template, sizeof template, "%s/Qwen-Qwen3-0.6B.jinja",
             getenv("GRAFT_TEMPLATES_DIR"));
    const char *args[] = {"--ctx", "1024", "--chat-template", template, NULL};
    server qwen3 = graft_test_start_server(args);
    json_int_t counts[2];
    for (int with = 0; with < 2; with++) {
        json_t *assistant = json_pack("{s:s, s:[{s:s, s:s, s:s, s:{s:s, s:s}}]}", "role",
                                      "assistant", "content", "type", "tool_use", "id", "t1",
                                      "name", "get_weather", "input", "city", "Paris", "unit",
                                      "C");
        if (with)
            json_array_insert_new(json_object_get(assistant, "content"), 0,
                                  json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking",
                                            "The user wants the weather.", "signature", ""));
        json_t *b = json_pack("{s:[o, o, {s:s, s:[{s:s, s:s, s:s}]}], s:[o]}", "messages",
                              message("user", WEATHER_QUESTION), assistant, "role", "user",
                              "content", "type", "tool_result", "tool_use_id", "t1", "content",
                              "Sunny", "tools", weather_tool());
        json_t *counted = ask(&qwen3, "/v1/messages/count_tokens", b);
        counts[with] = json_integer_value(json_object_get(counted, "input_tokens"));
        json_decref(counted);
    }
    json_t *turns = json_pack("[o, {s:s, s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}, "
                              "{s:s, s:s, s:s}]",
                              message("user", WEATHER_QUESTION), "role", "assistant", "content",
                              "", "reasoning_content", "The user wants the weather.",
                              "tool_calls", "id", "t1", "type", "function", "function", "name",
                              "get_weather", "arguments", "{\"city\":\"Paris\",\"unit\":\"C\"}",
                              "role", "tool", "tool_call_id", "t1", "content", "Sunny");
    json_t *b = chat_body(NULL, turns, 1);
    json_object_set_new(b, "tools", json_pack("[{s:s, s:{s:s, s:s, s:o}}]", "type", "function",
                                              "function", "name", "get_weather", "description",
                                              "The weather in a city", "parameters",
                                              graft_test_parse(WEATHER_PARAMETERS)));
    json_t *answer = ask(&qwen3, "/v1/chat/completions", b);
    assert_int_equal(counts[1], usage_of(answer, "prompt_tokens"));
    assert_true(counts[1] > counts[0]);
    json_decref(answer);
    assert_int_equal(graft_test_stop_server(&qwen3), 0);
}

/* ---- count_tokens ---------------------------------------------------------------------------- */

static void test_count_tokens(void **state)
{
    (void)state;
    json_t *b = forced_call(json_pack("{s:s}", "type", "auto"));
    json_object_del(b, "max_tokens"); /* count_tokens does not need it */
    json_t *counted = ask(&plain, "/v1/messages/count_tokens", json_deep_copy(b));
    assert_int_equal(json_object_size(counted), 1);
    json_object_set_new(b, "max_tokens", json_integer(4));
    json_t *m = ask(&plain, "/v1/messages", b);
    assert_int_equal(json_integer_value(json_object_get(counted, "input_tokens")),
                     usage_of(m, "input_tokens") + usage_of(m, "cache_read_input_tokens"));
    json_decref(m);
    json_decref(counted);
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* The response is an error in the API's shape, of this status and type, whose message
 * names `names`. */
static void expect_error(const response *r, long status, const char *type, const char *names)
{
    if (r->status != status)
        fail_msg("status %ld, expected %ld: %s", r->status, status, r->body ? r->body : "");
    json_t *j = graft_test_json_of(r);
    json_t *err = json_object_get(j, "error");
    const char *message = json_string_value(json_object_get(err, "message"));
    if (!is(json_object_get(j, "type"), "error") || !is(json_object_get(err, "type"), type) ||
        message == NULL || json_object_size(j) != 2 || json_object_size(err) != 2 ||
        strstr(message, names) == NULL)
        fail_msg("not a %s error naming %s: %s", type, names, r->body);
    json_decref(j);
}

static void expect_refused(const char *body, const char *names)
{
    response r = graft_test_request(&plain, "POST", "/v1/messages", body);
    expect_error(&r, 400, "invalid_request_error", names);
    graft_test_response_free(&r);
}

/* n bytes of "abc abc ..." (to free): a prompt whose length in tokens grows with n. */
static char *filler(size_t n)
{
    char *text = malloc(n + 1);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        text[i] = i % 4 == 3 ? ' ' : 'a' + (char)(i % 4);
    text[n] = '\0';
    return text;
}

/* A user message of about `tokens` prompt tokens (the count_tokens of plain), to free. */
static char *text_of_tokens(int tokens, json_int_t *counted)
{
    size_t n = (size_t)tokens;
    for (int tries = 0; tries < 8; tries++) {
        char *text = filler(n);
        json_t *c = ask(&plain, "/v1/messages/count_tokens",
                        json_pack("{s:[o]}", "messages", message("user", text)));
        *counted = json_integer_value(json_object_get(c, "input_tokens"));
        json_decref(c);
        if (*counted >= tokens - 12 && *counted <= tokens)
            return text;
        free(text);
        n = n * (size_t)tokens / (size_t)*counted - (*counted > tokens ? 4 : 0);
    }
    fail_msg("no text of about %d tokens", tokens);
    return NULL;
}

/* max_tokens beyond the context's room (Claude's clients send 32000) is that room: the
 * Message ends at the context; chat completions refuse it, as OpenAI's servers do. */
static void test_max_tokens_fit(void **state)
{
    (void)state;
    json_int_t counted = 0;
    char *text = text_of_tokens(500, &counted);
    json_t *b = greedy(json_pack("[o]", message("user", text)), 32000);
    free(text);
    json_t *m = ask(&plain, "/v1/messages", json_deep_copy(b));
    json_int_t out = usage_of(m, "output_tokens"), room = 512 - counted;
    assert_int_equal(usage_of(m, "input_tokens") + usage_of(m, "cache_read_input_tokens"),
                     counted);
    assert_true(out >= 1 && out <= room);
    if (is(json_object_get(m, "stop_reason"), "max_tokens"))
        assert_int_equal(out, room);
    char *body = json_dumps(b, 0);
    response r = graft_test_request(&plain, "POST", "/v1/chat/completions", body);
    free(graft_test_expect_error(&r, 400, "max_tokens"));
    graft_test_response_free(&r);
    free(body);
    json_decref(b);
    json_decref(m);
}

/* A prompt longer than the context is counted all the same; running it is refused. */
static void test_count_tokens_beyond_the_context(void **state)
{
    (void)state;
    char *text = filler(4000);
    json_t *b = json_pack("{s:[o]}", "messages", message("user", text));
    free(text);
    json_t *counted = ask(&plain, "/v1/messages/count_tokens", json_deep_copy(b));
    assert_true(json_integer_value(json_object_get(counted, "input_tokens")) > 512);
    json_decref(counted);
    json_object_set_new(b, "max_tokens", json_integer(4));
    char *body = json_dumps(b, 0);
    json_decref(b);
    response r = graft_test_request(&plain, "POST", "/v1/messages", body);
    expect_error(&r, 400, "invalid_request_error", "exceed the context of 512 tokens");
    graft_test_response_free(&r);
    free(body);
}

#define USER_HI "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]"

static void test_errors(void **state)
{
    (void)state;
    expect_refused("{" USER_HI "}", "max_tokens");
    expect_refused("{\"max_tokens\": 4}", "messages");
    expect_refused("{\"max_tokens\": 4, \"messages\": [{\"role\": \"system\", \"content\": "
                   "\"x\"}]}",
                   "messages[0].role");
    expect_refused("{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": "
                   "[{\"type\": \"image\", \"source\": {\"type\": \"base64\", \"media_type\": "
                   "\"image/png\", \"data\": \"AA==\"}}]}]}",
                   "messages[0].content[0]");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"tools\": [{\"type\": "
                   "\"web_search_20250305\", \"name\": \"web_search\"}]}",
                   "tools[0]");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"tools\": [{\"name\": \"f\"}]}",
                   "tools[0]");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"tool_choice\": {\"type\": \"all\"}}",
                   "tool_choice");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"tools\": [{\"name\": \"f\", "
                   "\"input_schema\": {\"type\": \"object\"}}], \"tool_choice\": {\"type\": "
                   "\"tool\", \"name\": \"g\"}}",
                   "'tool_choice.name' g");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"stop_sequences\": [1]}",
                   "stop_sequences");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"thinking\": {\"type\": \"on\"}}",
                   "thinking.type");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"thinking\": {\"type\": \"enabled\", "
                   "\"budget_tokens\": 0}}",
                   "thinking.budget_tokens");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"temperature\": -1}", "temperature");
    expect_refused("{\"max_tokens\": 4, " USER_HI ", \"mcp_servers\": [{\"url\": \"x\"}]}",
                   "mcp_servers");
    expect_refused("{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": "
                   "\"Hi\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", "
                   "\"id\": \"t\", \"name\": \"f\", \"input\": {}}]}]}",
                   "tool_use");
    expect_refused("{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": "
                   "\"Hi\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", "
                   "\"thinking\": \"hm\", \"signature\": \"\"}]}]}",
                   "thinking blocks");
    expect_refused("{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": "
                   "[{\"type\": \"tool_result\", \"content\": \"x\"}]}]}",
                   "tool_use_id");
    expect_refused("not json", "not JSON");
    response r = graft_test_request(&plain, "GET", "/v1/messages", NULL);
    expect_error(&r, 405, "invalid_request_error", "POST");
    graft_test_response_free(&r);
    r = graft_test_request(&plain, "POST", "/v1/messages/count_tokens", "{\"messages\": 1}");
    expect_error(&r, 400, "invalid_request_error", "messages");
    graft_test_response_free(&r);
    /* nothing disturbed */
    json_t *m = ask(&plain, "/v1/messages", story(false, 4));
    expect_message(m, "text");
    json_decref(m);
}

/* --api-key: x-api-key (Anthropic's clients) is taken as Authorization: Bearer is; a
 * missing or wrong key is the API's authentication_error. */
static void test_api_key(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--api-key", "k1", NULL};
    server keyed = graft_test_start_server(args);
    const char *body = "{\"max_tokens\": 2, " USER_HI "}";
    response r = graft_test_request(&keyed, "POST", "/v1/messages", body);
    expect_error(&r, 401, "authentication_error", "key");
    graft_test_response_free(&r);
    const char *wrong[] = {"x-api-key: k2", NULL};
    r = graft_test_request_headers(&keyed, "POST", "/v1/messages", body, NULL, wrong);
    expect_error(&r, 401, "authentication_error", "key");
    graft_test_response_free(&r);
    const char *right[] = {"x-api-key: k1", "anthropic-version: 2023-06-01", NULL};
    r = graft_test_request_headers(&keyed, "POST", "/v1/messages", body, NULL, right);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    r = graft_test_request_full(&keyed, "POST", "/v1/messages", body, "k1", 0);
    assert_int_equal(r.status, 200);
    graft_test_response_free(&r);
    assert_int_equal(graft_test_stop_server(&keyed), 0);
}

/* /metrics counts the Messages API's requests as its own endpoint. */
static void test_metrics_count_messages(void **state)
{
    (void)state;
    const char *ok = "graft_requests_total{endpoint=\"messages\",status=\"2xx\"}";
    const char *refused = "graft_requests_total{endpoint=\"messages\",status=\"4xx\"}";
    double ok_before = graft_test_metric(&plain, ok);
    double refused_before = graft_test_metric(&plain, refused);
    json_decref(ask(&plain, "/v1/messages", story(false, 2)));
    expect_refused("{" USER_HI "}", "max_tokens");
    assert_true(graft_test_metric(&plain, ok) == ok_before + 1);
    assert_true(graft_test_metric(&plain, refused) == refused_before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_message_is_the_chat_answer),
        cmocka_unit_test(test_streamed_message),
        cmocka_unit_test(test_stop_sequence),
        cmocka_unit_test(test_prefill_continues),
        cmocka_unit_test(test_forced_tool_use),
        cmocka_unit_test(test_thinking_block),
        cmocka_unit_test(test_thinking_budget),
        cmocka_unit_test(test_thinking_in_the_input),
        cmocka_unit_test(test_count_tokens),
        cmocka_unit_test(test_count_tokens_beyond_the_context),
        cmocka_unit_test(test_max_tokens_fit),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_metrics_count_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
