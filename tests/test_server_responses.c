/*
 * test_server_responses.c: OpenAI's Responses API through `graft serve` (the real binary on
 * stories260K, spoken to with libcurl): POST /v1/responses whole and streamed, GET and
 * DELETE /v1/responses/{id}.
 *
 * Written from the README ("The server") and the API's published documentation of its
 * objects and events, without reading the implementation. The oracle is the server's own
 * chat completions: a response runs as a chat completion (instructions the system message,
 * the input and any earlier responses' conversation the messages), so at temperature 0 the
 * same conversation gives the same text, bit for bit, and the same token counts.
 *
 * Checked: the input as a string, as message items (content a string or input_text parts)
 * and with the instructions as a system item gives the chat answer; the response object's
 * shape (output message, usage equal to the chat's, cached_tokens the prompt reused, status
 * incomplete when max_output_tokens cuts it, completed when it ends) and the request fields
 * given back. Streamed: every event named by its `event:` line, numbered from 0, in the
 * API's order, the deltas spelling the text, the last event the whole response; a client
 * that hangs up cancels the generation.
 * previous_response_id: a turn continues the stored conversation without its instructions,
 * from the prefix cache, over a chain of three; GET reads what POST answered, DELETE
 * forgets it, "store": false keeps nothing, --stored-responses forgets the least recently
 * used, --stored-responses-mem bounds the bytes kept (the store itself checked too, without
 * HTTP), a response is its API key's, and a stored turn can still be continued once a turn
 * before it is deleted or forgotten. Forced function calls: a function_call item with
 * the chat answer's arguments, streamed as its events, and its output sent back continues
 * as chat does with a tool message. text.format json_schema and json_object hold the answer.
 * Refusals are 400s naming the field (404 and 405 for the routes) and disturb nothing;
 * /metrics counts the endpoint.
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
#include <unistd.h>

#include "serve_client.h"
#include "server/server.h"

/* stories260K's end-of-text token: a bias of 19 on it ends the greedy answer to "Hi" after
 * a few tokens, so that a response can complete before max_output_tokens. */
#define EOS_TOKEN "2"
/* stories260K rarely closes a JSON object by itself: the ids of '"' (37, 436), ':' (61,
 * 467) and '}' (128) get a bias, as tests/test_server_json.c does. */
#define CLOSING_BIAS "{\"37\": 6, \"436\": 6, \"61\": 6, \"467\": 6, \"128\": 15}"

#define WEATHER_PARAMETERS                                                                         \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": "     \
    "12}, \"unit\": {\"enum\": [\"C\", \"F\"]}}, \"required\": [\"city\", \"unit\"], "             \
    "\"additionalProperties\": false}"

#define STORY_INSTRUCTIONS "You tell short stories about animals."
#define STORY_QUESTION "Tell me about a brave little dog."
#define STORY_TOKENS 12

static server main_server;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "512", NULL};
    main_server = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&main_server);
}

/* ---- requests ------------------------------------------------------------------------------- */

/* One request with body (taken; NULL: none) and a bearer key (NULL: none). */
static response send_json(const server *s, const char *method, const char *path, json_t *body,
                          const char *auth)
{
    char *text = NULL;
    if (body != NULL) {
        text = json_dumps(body, JSON_COMPACT);
        assert_non_null(text);
        json_decref(body);
    }
    response r = graft_test_request_full(s, method, path, text, auth, 0);
    free(text);
    return r;
}

/* The JSON of a 200 answer to body (taken). */
static json_t *ask(const server *s, const char *method, const char *path, json_t *body,
                   const char *auth)
{
    response r = send_json(s, method, path, body, auth);
    if (r.status != 200)
        fail_msg("%s %s: status %ld: %s", method, path, r.status, r.body ? r.body : "");
    json_t *j = graft_test_json_of(&r);
    graft_test_response_free(&r);
    return j;
}

static json_t *respond(json_t *body)
{
    return ask(&main_server, "POST", "/v1/responses", body, NULL);
}

static json_t *chat(json_t *body)
{
    return ask(&main_server, "POST", "/v1/chat/completions", body, NULL);
}

/* The JSON of a 200 answer to METHOD /v1/responses/{id}. */
static json_t *ask_stored(const server *s, const char *method, const char *id, const char *auth)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    return ask(s, method, path, NULL, auth);
}

/* METHOD /v1/responses/{id} is an error of this status. */
static void expect_stored_error(const server *s, const char *method, const char *id,
                                const char *auth, long status)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    response r = graft_test_request_full(s, method, path, NULL, auth, 0);
    if (strcmp(method, "HEAD") == 0 && r.status != status) /* HEAD: GET's status, no body */
        fail_msg("HEAD %s: status %ld, expected %ld", id, r.status, status);
    if (strcmp(method, "HEAD") != 0)
        free(graft_test_expect_error(&r, status, NULL));
    graft_test_response_free(&r);
}

/* param is the field `within` or a part of it (within.x, within[i]). */
static bool param_within(const char *param, const char *within)
{
    size_t n = strlen(within);
    return param != NULL && strncmp(param, within, n) == 0 &&
           (param[n] == '\0' || param[n] == '.' || param[n] == '[');
}

/* A 400 to body (taken) whose error.param is `within` or inside it. */
static void expect_refused_on(const server *s, json_t *body, const char *auth,
                              const char *within)
{
    char *text = json_dumps(body, JSON_COMPACT);
    response r = send_json(s, "POST", "/v1/responses", body, auth);
    free(graft_test_expect_error(&r, 400, NULL));
    json_t *j = graft_test_json_of(&r);
    const char *param = json_string_value(json_object_get(json_object_get(j, "error"), "param"));
    if (!param_within(param, within))
        fail_msg("%s: param %s, expected %s: %s", text, param ? param : "(none)", within, r.body);
    json_decref(j);
    free(text);
    graft_test_response_free(&r);
}

static void expect_refused(const char *body, const char *within)
{
    expect_refused_on(&main_server, graft_test_parse(body), NULL, within);
}

/* ---- what a response holds ------------------------------------------------------------------ */

static bool is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

static json_int_t usage_of(const json_t *j, const char *field)
{
    json_t *v = json_object_get(json_object_get(j, "usage"), field);
    if (!json_is_integer(v))
        fail_msg("usage.%s: %s", field, graft_test_shown(j));
    return json_integer_value(v);
}

static json_int_t cached_of(const json_t *resp)
{
    json_t *details = json_object_get(json_object_get(resp, "usage"), "input_tokens_details");
    json_t *v = json_object_get(details, "cached_tokens");
    if (!json_is_integer(v))
        fail_msg("usage.input_tokens_details.cached_tokens: %s", graft_test_shown(resp));
    return json_integer_value(v);
}

static const char *id_of(const json_t *resp)
{
    const char *id = json_string_value(json_object_get(resp, "id"));
    if (id == NULL || *id == '\0')
        fail_msg("no id: %s", graft_test_shown(resp));
    return id;
}

/* An output item: a message of the assistant, one output_text part, its status the
 * response's (an answer cut short is an incomplete message), or a whole function call. */
static void expect_output_item(const json_t *item, const char *status)
{
    const char *id = json_string_value(json_object_get(item, "id"));
    if (id == NULL || *id == '\0')
        fail_msg("an output item without an id: %s", graft_test_shown(item));
    if (is(json_object_get(item, "type"), "message")) {
        json_t *content = json_object_get(item, "content");
        json_t *part = json_array_get(content, 0);
        if (!is(json_object_get(item, "role"), "assistant") ||
            !is(json_object_get(item, "status"), status) || json_array_size(content) != 1 ||
            !is(json_object_get(part, "type"), "output_text") ||
            !json_is_string(json_object_get(part, "text")) ||
            !json_is_array(json_object_get(part, "annotations")))
            fail_msg("not an assistant message %s: %s", status, graft_test_shown(item));
    } else if (is(json_object_get(item, "type"), "function_call")) {
        const char *call_id = json_string_value(json_object_get(item, "call_id"));
        if (call_id == NULL || *call_id == '\0' ||
            !json_is_string(json_object_get(item, "name")) ||
            !json_is_string(json_object_get(item, "arguments")) ||
            !is(json_object_get(item, "status"), "completed"))
            fail_msg("not a whole function call: %s", graft_test_shown(item));
    } else {
        fail_msg("an output item of no known type: %s", graft_test_shown(item));
    }
}

/* What every finished response object holds: its id, object "response", the model, no error,
 * status completed (incomplete_details null) or incomplete (reason max_output_tokens), output
 * items, usage whose total is input + output and whose cached_tokens are the graft object's
 * tokens_reused, the prompt's reused part (the last prompt token is always computed). */
static void expect_response_object(const json_t *r)
{
    id_of(r);
    if (!is(json_object_get(r, "object"), "response") ||
        !is(json_object_get(r, "model"), "stories260K") ||
        !json_is_integer(json_object_get(r, "created_at")) ||
        !json_is_null(json_object_get(r, "error")))
        fail_msg("not a response object: %s", graft_test_shown(r));
    const char *status = json_string_value(json_object_get(r, "status"));
    json_t *details = json_object_get(r, "incomplete_details");
    if (status != NULL && strcmp(status, "incomplete") == 0) {
        if (!is(json_object_get(details, "reason"), "max_output_tokens"))
            fail_msg("incomplete, but not for max_output_tokens: %s", graft_test_shown(r));
    } else if (status == NULL || strcmp(status, "completed") != 0 || !json_is_null(details)) {
        fail_msg("neither completed nor incomplete: %s", graft_test_shown(r));
    }
    json_int_t in = usage_of(r, "input_tokens"), out = usage_of(r, "output_tokens");
    assert_int_equal(usage_of(r, "total_tokens"), in + out);
    json_int_t cached = cached_of(r);
    assert_true(cached >= 0 && cached < in);
    json_t *graft = json_object_get(r, "graft");
    assert_int_equal(json_integer_value(json_object_get(graft, "tokens_reused")), cached);
    assert_int_equal(json_integer_value(json_object_get(graft, "tokens_computed")), in - cached);
    json_t *output = json_object_get(r, "output");
    if (json_array_size(output) == 0)
        fail_msg("no output: %s", graft_test_shown(r));
    for (size_t i = 0; i < json_array_size(output); i++)
        expect_output_item(json_array_get(output, i), status);
}

/* The text of a response whose output is one message (valid while resp lives). */
static const char *message_text(const json_t *resp)
{
    json_t *output = json_object_get(resp, "output");
    json_t *item = json_array_get(output, 0);
    if (json_array_size(output) != 1 || !is(json_object_get(item, "type"), "message"))
        fail_msg("not one message: %s", graft_test_shown(resp));
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
    if (text == NULL)
        fail_msg("a message without text: %s", graft_test_shown(resp));
    return text;
}

static const char *chat_content(const json_t *answer)
{
    json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(choice, "message"),
                                                      "content"));
    if (t == NULL)
        fail_msg("no content: %s", graft_test_shown(answer));
    return t;
}

static const char *chat_finish(const json_t *answer)
{
    json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
    return json_string_value(json_object_get(choice, "finish_reason"));
}

/* Removes, at every depth, what two runs of one request may differ in: ids, timestamps, the
 * graft object (timings, cache source) and cached_tokens (what the cache held). */
static void drop_run_fields(json_t *j)
{
    static const char *const fields[] = {"id", "item_id", "call_id", "created_at",
                                         "completed_at", "graft", "cached_tokens"};
    if (json_is_object(j)) {
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
            json_object_del(j, fields[f]);
        const char *key;
        json_t *v;
        json_object_foreach (j, key, v)
            drop_run_fields(v);
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++)
            drop_run_fields(json_array_get(j, i));
    }
}

/* a and b are the same response but for what differs between runs. */
static void expect_same_response(const json_t *a, const json_t *b)
{
    json_t *ca = json_deep_copy(a), *cb = json_deep_copy(b);
    drop_run_fields(ca);
    drop_run_fields(cb);
    if (!json_equal(ca, cb)) {
        char *sa = json_dumps(ca, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("responses differ:\n%s\n%s", sa, graft_test_shown(cb));
    }
    json_decref(ca);
    json_decref(cb);
}

/* ---- bodies --------------------------------------------------------------------------------- */

/* The weather tool: in the Responses API's flat shape, or in chat completions' nested one. */
static json_t *weather_tool(bool nested)
{
    json_t *fn = json_pack("{s:s, s:s, s:s, s:o, s:b}", "type", "function", "name",
                           "get_weather", "description", "The weather in a city", "parameters",
                           graft_test_parse(WEATHER_PARAMETERS), "strict", 1);
    if (!nested)
        return fn;
    json_object_del(fn, "type");
    return json_pack("{s:s, s:o}", "type", "function", "function", fn);
}

static json_t *message(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

/* A greedy response of at most `tokens` to input (taken), after prev's conversation (NULL:
 * none), with instructions (NULL: none). */
static json_t *greedy(json_t *input, int tokens, const char *prev, const char *instructions)
{
    json_t *b = json_pack("{s:o, s:i, s:f}", "input", input, "max_output_tokens", tokens,
                          "temperature", 0.0);
    if (prev != NULL)
        json_object_set_new(b, "previous_response_id", json_string(prev));
    if (instructions != NULL)
        json_object_set_new(b, "instructions", json_string(instructions));
    return b;
}

/* The greedy chat answer of at most `tokens` to messages (taken). */
static json_t *greedy_chat(json_t *messages, int tokens)
{
    return chat(json_pack("{s:o, s:i, s:f}", "messages", messages, "max_tokens", tokens,
                          "temperature", 0.0));
}

/* The story request: greedy, STORY_TOKENS at most, the input (taken) with instructions
 * (NULL: none), metadata and the weather tool. */
static json_t *story_request(json_t *input, const char *instructions)
{
    json_t *b = greedy(input, STORY_TOKENS, NULL, instructions);
    json_object_set_new(b, "metadata", json_pack("{s:s}", "topic", "dogs"));
    json_object_set_new(b, "tools", json_pack("[o]", weather_tool(false)));
    return b;
}

/* The request that ends by itself: "Hi", the end-of-text token raised. */
static json_t *ending_request(void)
{
    json_t *b = greedy(json_string("Hi"), 16, NULL, NULL);
    json_object_set_new(b, "logit_bias", json_pack("{s:i}", EOS_TOKEN, 19));
    return b;
}

/* The request fields a response gives back: instructions (NULL: null), metadata, the
 * output limit and the weather tool as sent. */
static void expect_story_fields(const json_t *resp, const char *instructions)
{
    json_t *got = json_object_get(resp, "instructions");
    if (instructions != NULL ? !is(got, instructions) : !json_is_null(got))
        fail_msg("instructions given back as %s", graft_test_shown(got));
    json_t *metadata = json_pack("{s:s}", "topic", "dogs");
    if (!json_equal(json_object_get(resp, "metadata"), metadata))
        fail_msg("metadata given back as %s", graft_test_shown(json_object_get(resp, "metadata")));
    json_decref(metadata);
    assert_int_equal(json_integer_value(json_object_get(resp, "max_output_tokens")),
                     STORY_TOKENS);
    json_t *tools = json_object_get(resp, "tools");
    json_t *sent = weather_tool(false), *tool = json_array_get(tools, 0);
    const char *key;
    json_t *value;
    if (json_array_size(tools) != 1)
        fail_msg("tools given back as %s", graft_test_shown(tools));
    json_object_foreach (sent, key, value)
        if (!json_equal(value, json_object_get(tool, key)))
            fail_msg("tools[0].%s given back as %s", key, graft_test_shown(tool));
    json_decref(sent);
}

/* ---- whole responses ------------------------------------------------------------------------ */

/* The input as a string, as a message item with string or input_text content, and the
 * instructions as a system item instead: each is the chat answer to [system, user], cut by
 * max_output_tokens (incomplete), with the chat's token counts; the request fields come
 * back. Sampled with a seed, the chat answer with that seed. A response that ends by itself
 * is completed. */
static void test_whole_response_is_the_chat_answer(void **state)
{
    (void)state;
    json_t *inputs[] = {
        json_string(STORY_QUESTION),
        json_pack("[o]", message("user", STORY_QUESTION)),
        json_pack("[{s:s, s:s, s:[{s:s, s:s}]}]", "type", "message", "role", "user", "content",
                  "type", "input_text", "text", STORY_QUESTION),
        json_pack("[o, o]", message("system", STORY_INSTRUCTIONS),
                  message("user", STORY_QUESTION)),
    };
    const size_t n = sizeof inputs / sizeof inputs[0];
    json_t *answers[sizeof inputs / sizeof inputs[0]];
    for (size_t i = 0; i < n; i++) {
        const char *instructions = i + 1 < n ? STORY_INSTRUCTIONS : NULL;
        answers[i] = respond(story_request(inputs[i], instructions));
        expect_response_object(answers[i]);
        expect_story_fields(answers[i], instructions);
        assert_string_equal(json_string_value(json_object_get(answers[i], "status")),
                            "incomplete");
        assert_int_equal(usage_of(answers[i], "output_tokens"), STORY_TOKENS);
        /* the same prompt as the first: all of it but its last token from the cache */
        if (i > 0)
            assert_int_equal(cached_of(answers[i]), usage_of(answers[i], "input_tokens") - 1);
    }
    json_t *oracle = chat(json_pack("{s:[o, o], s:i, s:f, s:[o]}", "messages",
                                    message("system", STORY_INSTRUCTIONS),
                                    message("user", STORY_QUESTION), "max_tokens", STORY_TOKENS,
                                    "temperature", 0.0, "tools", weather_tool(true)));
    assert_string_equal(chat_finish(oracle), "length");
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(message_text(answers[i]), chat_content(oracle));
        assert_int_equal(usage_of(answers[i], "input_tokens"), usage_of(oracle, "prompt_tokens"));
        assert_int_equal(usage_of(answers[i], "output_tokens"),
                         usage_of(oracle, "completion_tokens"));
        json_decref(answers[i]);
    }
    assert_true(strlen(chat_content(oracle)) > 0);
    json_decref(oracle);

    /* sampled with a seed: the chat answer with that seed */
    json_t *seeded = greedy(json_string(STORY_QUESTION), STORY_TOKENS, NULL, NULL);
    json_object_set_new(seeded, "temperature", json_real(1.0));
    json_object_set_new(seeded, "seed", json_integer(7));
    json_t *sampled = respond(seeded);
    json_t *chat_sampled = chat(json_pack("{s:[o], s:i, s:f, s:i}", "messages",
                                          message("user", STORY_QUESTION), "max_tokens",
                                          STORY_TOKENS, "temperature", 1.0, "seed", 7));
    assert_string_equal(message_text(sampled), chat_content(chat_sampled));
    /* llama.cpp's samplers pass on as they are: Mirostat and DRY give the chat answer with
     * them, which is not the answer without */
    json_t *shaped = greedy(json_string(STORY_QUESTION), STORY_TOKENS, NULL, NULL);
    json_object_set_new(shaped, "temperature", json_real(1.0));
    json_object_set_new(shaped, "seed", json_integer(7));
    json_object_set_new(shaped, "mirostat", json_integer(2));
    json_object_set_new(shaped, "dry_multiplier", json_real(0.8));
    json_t *shaped_answer = respond(shaped);
    json_t *chat_shaped = chat(json_pack("{s:[o], s:i, s:f, s:i, s:i, s:f}", "messages",
                                         message("user", STORY_QUESTION), "max_tokens",
                                         STORY_TOKENS, "temperature", 1.0, "seed", 7, "mirostat",
                                         2, "dry_multiplier", 0.8));
    assert_string_equal(message_text(shaped_answer), chat_content(chat_shaped));
    assert_string_not_equal(chat_content(chat_shaped), chat_content(chat_sampled));
    json_decref(chat_shaped);
    json_decref(shaped_answer);
    json_decref(chat_sampled);
    json_decref(sampled);

    json_t *ended = respond(ending_request());
    json_t *chat_ended = chat(json_pack("{s:[o], s:i, s:f, s:{s:i}}", "messages",
                                        message("user", "Hi"), "max_tokens", 16, "temperature",
                                        0.0, "logit_bias", EOS_TOKEN, 19));
    assert_string_equal(chat_finish(chat_ended), "stop"); /* the case this checks */
    expect_response_object(ended);
    assert_string_equal(json_string_value(json_object_get(ended, "status")), "completed");
    assert_string_equal(message_text(ended), chat_content(chat_ended));
    assert_int_equal(usage_of(ended, "output_tokens"), usage_of(chat_ended, "completion_tokens"));
    assert_true(usage_of(ended, "output_tokens") < 16);
    json_decref(chat_ended);
    json_decref(ended);
}

/* ---- streamed responses --------------------------------------------------------------------- */

/* The events of a streamed response: blocks "event: T\ndata: J" where J is an object of type
 * T numbered by sequence_number from 0. */
static json_t *sse_events(const response *r)
{
    json_t *events = graft_test_named_events(r);
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_t *seq = json_object_get(json_array_get(events, i), "sequence_number");
        if (!json_is_integer(seq) || json_integer_value(seq) != (json_int_t)i)
            fail_msg("event %zu numbered %s", i, graft_test_shown(seq));
    }
    return events;
}

/* event i of events, of type `type` (borrowed). */
static json_t *event_of(const json_t *events, size_t i, const char *type)
{
    json_t *e = json_array_get(events, i);
    if (!is(json_object_get(e, "type"), type))
        fail_msg("event %zu: %s, expected %s", i, graft_test_shown(e), type);
    return e;
}

static bool at(const json_t *events, size_t i, const char *type)
{
    return is(json_object_get(json_array_get(events, i), "type"), type);
}

/* e names item `item_id` at output_index `index` (and content_index 0 for a part). */
static void expect_place(const json_t *e, const char *item_id, size_t index, bool part)
{
    if (!is(json_object_get(e, "item_id"), item_id) ||
        json_integer_value(json_object_get(e, "output_index")) != (json_int_t)index ||
        (part && json_integer_value(json_object_get(e, "content_index")) != 0))
        fail_msg("not item %s at %zu: %s", item_id, index, graft_test_shown(e));
}

/* Appends s to *text. */
static void append(char **text, const char *s)
{
    if (s == NULL)
        fail_msg("a delta without its text");
    *text = realloc(*text, strlen(*text) + strlen(s) + 1);
    strcat(*text, s);
}

/* Follows the events of output item `index` from events[*i]: added (in progress), then a
 * message's part added, text deltas, text done, part done, or a call's argument deltas and
 * done; then the item done, whose text or arguments the deltas spell. Returns the done item
 * (borrowed). */
static json_t *follow_item(const json_t *events, size_t *i, size_t index)
{
    json_t *added = event_of(events, (*i)++, "response.output_item.added");
    json_t *item = json_object_get(added, "item");
    const char *id = json_string_value(json_object_get(item, "id"));
    if (id == NULL || !is(json_object_get(item, "status"), "in_progress") ||
        json_integer_value(json_object_get(added, "output_index")) != (json_int_t)index)
        fail_msg("not item %zu added in progress: %s", index, graft_test_shown(added));
    char *text = calloc(1, 1);
    bool is_message = is(json_object_get(item, "type"), "message");
    if (is_message) {
        json_t *e = event_of(events, (*i)++, "response.content_part.added");
        expect_place(e, id, index, true);
        json_t *part = json_object_get(e, "part");
        if (!is(json_object_get(part, "type"), "output_text") ||
            !is(json_object_get(part, "text"), ""))
            fail_msg("not an empty output_text part: %s", graft_test_shown(e));
        for (; at(events, *i, "response.output_text.delta"); (*i)++) {
            e = json_array_get(events, *i);
            expect_place(e, id, index, true);
            append(&text, json_string_value(json_object_get(e, "delta")));
        }
        e = event_of(events, (*i)++, "response.output_text.done");
        expect_place(e, id, index, true);
        assert_true(is(json_object_get(e, "text"), text));
        e = event_of(events, (*i)++, "response.content_part.done");
        expect_place(e, id, index, true);
        assert_true(is(json_object_get(json_object_get(e, "part"), "text"), text));
    } else if (is(json_object_get(item, "type"), "function_call")) {
        for (; at(events, *i, "response.function_call_arguments.delta"); (*i)++) {
            json_t *e = json_array_get(events, *i);
            expect_place(e, id, index, false);
            append(&text, json_string_value(json_object_get(e, "delta")));
        }
        json_t *e = event_of(events, (*i)++, "response.function_call_arguments.done");
        expect_place(e, id, index, false);
        assert_true(is(json_object_get(e, "arguments"), text));
    } else {
        fail_msg("an item of no known type added: %s", graft_test_shown(added));
    }
    json_t *done = event_of(events, (*i)++, "response.output_item.done");
    json_t *whole = json_object_get(done, "item");
    if (json_integer_value(json_object_get(done, "output_index")) != (json_int_t)index ||
        !is(json_object_get(whole, "id"), id) ||
        !is(is_message ? json_object_get(json_array_get(json_object_get(whole, "content"), 0),
                                         "text")
                       : json_object_get(whole, "arguments"),
            text))
        fail_msg("item %zu done is not what its deltas spelled ('%s'): %s", index, text,
                 graft_test_shown(done));
    free(text);
    return whole;
}

/* The API's order: created and in_progress (the response in progress, no output), each
 * output item's events, then response.completed or response.incomplete as its status says,
 * nothing after; the items done are the final response's output. Returns the final
 * response (borrowed from events). */
static json_t *check_event_order(const json_t *events)
{
    size_t n = json_array_size(events), i = 0;
    json_t *created = json_object_get(event_of(events, i++, "response.created"), "response");
    json_t *progress = json_object_get(event_of(events, i++, "response.in_progress"),
                                       "response");
    const char *id = id_of(created);
    if (!is(json_object_get(created, "status"), "in_progress") ||
        json_array_size(json_object_get(created, "output")) != 0 ||
        !is(json_object_get(progress, "id"), id) ||
        !is(json_object_get(progress, "status"), "in_progress"))
        fail_msg("not created in progress: %s", graft_test_shown(created));
    json_t *items = json_array();
    while (i + 1 < n)
        json_array_append(items, follow_item(events, &i, json_array_size(items)));
    json_t *last = json_array_get(events, n - 1);
    json_t *final = json_object_get(last, "response");
    const char *status = json_string_value(json_object_get(final, "status"));
    char type[64];
    snprintf(type, sizeof type, "response.%s", status ? status : "(none)");
    event_of(events, n - 1, type);
    if (!is(json_object_get(final, "id"), id) ||
        !json_equal(json_object_get(final, "output"), items))
        fail_msg("the final response is not the one streamed: %s", graft_test_shown(final));
    json_decref(items);
    return final;
}

/* Streams body (taken) on the main server; returns its events. */
static json_t *stream(json_t *body)
{
    json_object_set_new(body, "stream", json_true());
    response r = send_json(&main_server, "POST", "/v1/responses", body, NULL);
    json_t *events = sse_events(&r);
    graft_test_response_free(&r);
    return events;
}

/* Streamed, cut short and ended by itself: the events in order, the deltas spelling the
 * whole response's text, the final response the whole one but for ids and timings, and
 * stored as it was streamed. */
static void test_streamed_events(void **state)
{
    (void)state;
    json_t *wholes[2] = {
        respond(story_request(json_string(STORY_QUESTION), STORY_INSTRUCTIONS)),
        respond(ending_request()),
    };
    json_t *streams[2] = {
        stream(story_request(json_string(STORY_QUESTION), STORY_INSTRUCTIONS)),
        stream(ending_request()),
    };
    const char *statuses[2] = {"incomplete", "completed"};
    for (size_t k = 0; k < 2; k++) {
        json_t *final = check_event_order(streams[k]);
        expect_response_object(final);
        assert_string_equal(json_string_value(json_object_get(final, "status")), statuses[k]);
        assert_string_equal(message_text(final), message_text(wholes[k]));
        expect_same_response(final, wholes[k]);
        json_t *stored = ask_stored(&main_server, "GET", id_of(final), NULL);
        if (!json_equal(stored, final))
            fail_msg("stored as %s", graft_test_shown(stored));
        json_decref(stored);
        json_decref(streams[k]);
        json_decref(wholes[k]);
    }
}

/* A client that hangs up after the first event cancels its generation. */
static void test_hang_up_cancels(void **state)
{
    (void)state;
    double before = graft_test_metric(&main_server, "graft_client_disconnects_total");
    json_t *body = greedy(json_string("Once upon a time"), 400, NULL, NULL);
    json_object_set_new(body, "ignore_eos", json_true());
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    response r = graft_test_request_full(&main_server, "POST", "/v1/responses", text, NULL, 1);
    free(text);
    graft_test_response_free(&r);
    graft_test_expect_cancelled(&main_server, before);
}

/* ---- stored conversations ------------------------------------------------------------------- */

/* Turn 2 after a turn with instructions is the chat answer to the conversation without them
 * (they are not carried over): [user, assistant = turn 1's text, user]; with instructions of
 * its own, they are the system message before all of it. */
static void test_previous_response_drops_instructions(void **state)
{
    (void)state;
    const char *first = "Where did the cat go?", *next = "And then?";
    const char *instructions = "Always answer in one word.";
    json_t *t1 = respond(greedy(json_string(first), 10, NULL, instructions));
    const char *a1 = message_text(t1);
    json_t *t2 = respond(greedy(json_string(next), 10, id_of(t1), NULL));
    expect_response_object(t2);
    assert_true(is(json_object_get(t2, "previous_response_id"), id_of(t1)));
    assert_true(json_is_null(json_object_get(t2, "instructions")));
    json_t *without = greedy_chat(json_pack("[o, o, o]", message("user", first),
                                            message("assistant", a1), message("user", next)),
                                  10);
    json_t *with = greedy_chat(json_pack("[o, o, o, o]", message("system", instructions),
                                         message("user", first), message("assistant", a1),
                                         message("user", next)),
                               10);
    /* the instructions change the answer here, so the check below tells them apart */
    assert_string_not_equal(chat_content(with), chat_content(without));
    assert_string_equal(message_text(t2), chat_content(without));
    assert_int_equal(usage_of(t2, "input_tokens"), usage_of(without, "prompt_tokens"));
    /* turn 2's own instructions are the system message before the whole conversation */
    const char *own = "You are a pirate.";
    json_t *t2_own = respond(greedy(json_string(next), 10, id_of(t1), own));
    json_t *with_own = greedy_chat(json_pack("[o, o, o, o]", message("system", own),
                                             message("user", first), message("assistant", a1),
                                             message("user", next)),
                                   10);
    assert_string_equal(message_text(t2_own), chat_content(with_own));
    assert_true(is(json_object_get(t2_own, "instructions"), own));
    json_decref(with_own);
    json_decref(t2_own);
    json_decref(with);
    json_decref(without);
    json_decref(t2);
    json_decref(t1);
}

/* GET, HEAD and DELETE of the first turn: GET gives what POST answered, HEAD its status,
 * DELETE says it is deleted; then it is not there (404), nor can it be continued (400). */
static void forget(const json_t *turn)
{
    const char *id = id_of(turn);
    json_t *got = ask_stored(&main_server, "GET", id, NULL);
    if (!json_equal(got, turn))
        fail_msg("GET %s gave %s", id, graft_test_shown(got));
    json_decref(got);
    char path[256];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    response head = graft_test_request(&main_server, "HEAD", path, NULL);
    assert_int_equal(head.status, 200);
    assert_int_equal(head.len, 0);
    graft_test_response_free(&head);
    json_t *deleted = ask_stored(&main_server, "DELETE", id, NULL);
    if (!is(json_object_get(deleted, "id"), id) ||
        !json_is_true(json_object_get(deleted, "deleted")))
        fail_msg("DELETE %s answered %s", id, graft_test_shown(deleted));
    json_decref(deleted);
    expect_stored_error(&main_server, "GET", id, NULL, 404);
    expect_stored_error(&main_server, "DELETE", id, NULL, 404);
    expect_refused_on(&main_server, greedy(json_string("More?"), 4, id, NULL), NULL,
                      "previous_response_id");
}

/* A chain of three turns: each the chat answer to the whole conversation, its input tokens
 * the chat's, reusing at least the previous turn's prompt from the prefix cache; the same
 * conversation sent whole as items gives the same answer; then the first turn is read,
 * deleted and gone. */
static void test_conversation_chain(void **state)
{
    (void)state;
    const char *asked[3] = {"The dog ran to the park.", "What did he find?", "Was he happy?"};
    json_t *turns[3] = {NULL, NULL, NULL};
    json_t *messages = json_array(); /* the conversation for chat completions */
    json_t *items = json_array();    /* the same as input items */
    for (size_t k = 0; k < 3; k++) {
        json_array_append_new(messages, message("user", asked[k]));
        json_array_append_new(items, message("user", asked[k]));
        turns[k] = respond(greedy(json_string(asked[k]), 8, k ? id_of(turns[k - 1]) : NULL, NULL));
        expect_response_object(turns[k]);
        const char *text = message_text(turns[k]);
        json_t *oracle = greedy_chat(json_deep_copy(messages), 8);
        assert_string_equal(text, chat_content(oracle));
        assert_int_equal(usage_of(turns[k], "input_tokens"), usage_of(oracle, "prompt_tokens"));
        json_decref(oracle);
        if (k > 0) {
            json_t *graft = json_object_get(turns[k], "graft");
            if (!is(json_object_get(graft, "source"), "cache") ||
                cached_of(turns[k]) < usage_of(turns[k - 1], "input_tokens"))
                fail_msg("turn %zu did not reuse turn %zu's %lld prompt tokens: %s", k + 1, k,
                         (long long)usage_of(turns[k - 1], "input_tokens"),
                         graft_test_shown(turns[k]));
            /* the conversation sent whole: output_text items, or chat's own messages */
            json_t *inputs[2] = {json_deep_copy(items), json_deep_copy(messages)};
            for (size_t i = 0; i < 2; i++) {
                json_t *whole = respond(greedy(inputs[i], 8, NULL, NULL));
                assert_string_equal(message_text(whole), text);
                json_decref(whole);
            }
        }
        json_array_append_new(messages, message("assistant", text));
        json_array_append_new(items, json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "type", "message",
                                               "role", "assistant", "content", "type",
                                               "output_text", "text", text));
    }
    forget(turns[0]);
    for (size_t k = 0; k < 3; k++)
        json_decref(turns[k]);
    json_decref(items);
    json_decref(messages);
}

/* Four turns on s, each continuing the one before, each the chat answer to the whole
 * conversation; with delete_first, the first turn is deleted before the third. */
static void expect_chain_continues(const server *s, bool delete_first)
{
    static const char *const asked[] = {"Tom saw a bird.", "Where did it fly?",
                                        "Did Tom follow?", "What then?"};
    json_t *turns[4] = {NULL, NULL, NULL, NULL};
    json_t *messages = json_array();
    for (size_t k = 0; k < 4; k++) {
        if (k == 2 && delete_first)
            json_decref(ask_stored(s, "DELETE", id_of(turns[0]), NULL));
        json_array_append_new(messages, message("user", asked[k]));
        if (k > 0) /* the turn continued is stored */
            json_decref(ask_stored(s, "GET", id_of(turns[k - 1]), NULL));
        response r = send_json(s, "POST", "/v1/responses",
                               greedy(json_string(asked[k]), 4, k ? id_of(turns[k - 1]) : NULL,
                                      NULL),
                               NULL);
        if (r.status != 200)
            fail_msg("turn %zu, continuing %s (stored: GET answers it): %ld %s", k + 1,
                     k ? id_of(turns[k - 1]) : "none", r.status, r.body ? r.body : "");
        turns[k] = graft_test_json_of(&r);
        graft_test_response_free(&r);
        json_t *oracle = ask(s, "POST", "/v1/chat/completions",
                             json_pack("{s:O, s:i, s:f}", "messages", messages, "max_tokens", 4,
                                       "temperature", 0.0),
                             NULL);
        assert_string_equal(message_text(turns[k]), chat_content(oracle));
        json_array_append_new(messages, message("assistant", message_text(turns[k])));
        json_decref(oracle);
    }
    for (size_t k = 0; k < 4; k++)
        json_decref(turns[k]);
    json_decref(messages);
}

/* A stored response can be continued, as its whole conversation, though a turn before it was
 * deleted. The README refuses only the continuation of a forgotten response; the one
 * continued here is stored (GET reads it). */
static void test_deleted_turn_leaves_later_turns_whole(void **state)
{
    (void)state;
    expect_chain_continues(&main_server, true);
}

/* With --stored-responses 2, a chain of four: the turn continued is stored (GET reads it),
 * though the turns before it that the store forgot are not; it is continued as its whole
 * conversation. */
static void test_forgotten_turn_leaves_later_turns_whole(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "512", "--stored-responses", "2", NULL};
    server s = graft_test_start_server(args);
    expect_chain_continues(&s, false);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* "store": false: answered as usual, given back, but not kept: GET 404, continuing it 400. */
static void test_unstored_response(void **state)
{
    (void)state;
    json_t *body = greedy(json_string("Lily had a red ball."), 6, NULL, NULL);
    json_object_set_new(body, "store", json_false());
    json_t *r = respond(body);
    expect_response_object(r);
    assert_true(json_is_false(json_object_get(r, "store")));
    expect_stored_error(&main_server, "GET", id_of(r), NULL, 404);
    expect_refused_on(&main_server, greedy(json_string("More?"), 4, id_of(r), NULL), NULL,
                      "previous_response_id");
    json_decref(r);
}

/* A response POSTed to s (by key auth) of at most 2 tokens. */
static json_t *short_response(const server *s, const char *input, const char *prev,
                              bool store, const char *auth)
{
    json_t *body = greedy(json_string(input), 2, prev, NULL);
    json_object_set_new(body, "store", json_boolean(store));
    return ask(s, "POST", "/v1/responses", body, auth);
}

/* --stored-responses 2: a third response forgets the least recently used of two, where a
 * GET and a continuation (stored or not) are uses; continuing a forgotten one is a 400. */
static void test_stored_responses_lru(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--stored-responses", "2", NULL};
    server s = graft_test_start_server(args);
    json_t *a = short_response(&s, "One", NULL, true, NULL);
    json_t *b = short_response(&s, "Two", NULL, true, NULL);
    json_decref(ask_stored(&s, "GET", id_of(a), NULL)); /* a used after b */
    json_t *c = short_response(&s, "Three", NULL, true, NULL);
    expect_stored_error(&s, "GET", id_of(b), NULL, 404);
    json_decref(ask_stored(&s, "GET", id_of(a), NULL));
    json_decref(ask_stored(&s, "GET", id_of(c), NULL)); /* now c is the last used */
    json_decref(short_response(&s, "Four", id_of(a), false, NULL)); /* then a */
    json_t *d = short_response(&s, "Five", NULL, true, NULL);
    expect_stored_error(&s, "GET", id_of(c), NULL, 404);
    json_decref(ask_stored(&s, "GET", id_of(a), NULL));
    json_decref(ask_stored(&s, "GET", id_of(d), NULL));
    expect_refused_on(&s, greedy(json_string("Six"), 2, id_of(c), NULL), NULL,
                      "previous_response_id");
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* --stored-responses-mem 1: no response fits; each says it was not stored ("store": false)
 * and is not there to read or continue. */
static void test_response_over_the_store_bytes(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--stored-responses-mem", "1", NULL};
    server s = graft_test_start_server(args);
    json_t *a = short_response(&s, "One", NULL, true, NULL);
    assert_true(json_is_false(json_object_get(a, "store")));
    expect_stored_error(&s, "GET", id_of(a), NULL, 404);
    expect_refused_on(&s, greedy(json_string("Two"), 2, id_of(a), NULL), NULL,
                      "previous_response_id");
    json_decref(a);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* The store's byte bound (response_store.c, without HTTP): each entry counts its items' and
 * its response's compact JSON text, shared items again in each entry; beyond the bound the
 * least recently used go, and an entry over it alone is refused, leaving the others. */
static size_t compact_bytes(const json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    size_t n = strlen(text);
    free(text);
    return n;
}

static void test_store_bytes_bound(void **state)
{
    (void)state;
    json_t *item = json_pack("{s:s}", "t", "0123456789012345678901234567890123456789");
    json_t *items = json_pack("[O, O]", item, item); /* one object, shared */
    json_t *response = json_pack("{s:s}", "id", "r");
    size_t one = compact_bytes(items) + compact_bytes(response);
    assert_int_equal(one, 99 + 10);
    graft__response_store st;
    assert_int_equal(graft__response_store_init(&st, 100, 3 * one), GRAFT_OK);
    const char *ids[] = {"a", "b", "c"};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(graft__response_store_put(&st, ids[i], NULL, items, response), GRAFT_OK);
    assert_int_equal(st.bytes, 3 * one);
    json_decref(graft__response_store_get(&st, "a", NULL)); /* a used after b */
    assert_int_equal(graft__response_store_put(&st, "d", NULL, items, response), GRAFT_OK);
    assert_int_equal(st.count, 3);
    assert_int_equal(st.bytes, 3 * one);
    assert_null(graft__response_store_get(&st, "b", NULL));
    json_t *kept = graft__response_store_get(&st, "a", NULL);
    assert_non_null(kept);
    json_decref(kept);
    json_t *big = json_pack("[O, O, O, O]", item, item, item, item); /* alone over the bound */
    assert_int_equal(graft__response_store_put(&st, "e", NULL, big, big), GRAFT_ERANGE);
    assert_int_equal(st.count, 3);
    assert_null(graft__response_store_get(&st, "e", NULL));
    assert_int_equal(graft__response_store_delete(&st, "c", NULL), GRAFT_OK);
    assert_int_equal(st.bytes, 2 * one);
    graft__response_store_free(&st);
    json_decref(big);
    json_decref(response);
    json_decref(items);
    json_decref(item);
}

/* --api-key k1,k2: a response made with k1 is not there for k2 (GET and DELETE 404, not
 * continued), and stays k1's, whole. */
static void test_responses_belong_to_their_key(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--api-key", "k1,k2", NULL};
    server s = graft_test_start_server(args);
    json_t *mine = short_response(&s, "Once", NULL, true, "k1");
    const char *id = id_of(mine);
    expect_stored_error(&s, "GET", id, "k2", 404);
    expect_stored_error(&s, "DELETE", id, "k2", 404);
    expect_stored_error(&s, "GET", id, NULL, 401);
    /* another key's response is one this key does not have: the 400 of an unknown id (or
     * the 404 of GET), naming the field */
    response r = send_json(&s, "POST", "/v1/responses", greedy(json_string("More"), 2, id, NULL),
                           "k2");
    if (r.status != 400 && r.status != 404)
        fail_msg("k2 continued k1's response: %ld %s", r.status, r.body ? r.body : "");
    free(graft_test_expect_error(&r, r.status, "previous_response_id"));
    graft_test_response_free(&r);
    json_t *got = ask_stored(&s, "GET", id, "k1");
    if (!json_equal(got, mine))
        fail_msg("k1's response became %s", graft_test_shown(got));
    json_decref(got);
    json_decref(short_response(&s, "More", id, true, "k1"));
    json_decref(mine);
    assert_int_equal(graft_test_stop_server(&s), 0);
}

/* ---- function calls ------------------------------------------------------------------------- */

#define WEATHER_QUESTION "Weather in Paris?"
#define CALL_TOKENS 96

/* Each key of the weather call's arguments, in the order the parameters list them: a city
 * of at most 12 code points and a unit, C or F. */
static void expect_weather_arguments(const char *arguments)
{
    static const char *const keys[] = {"city", "unit"};
    json_t *args = graft_test_parse(arguments);
    size_t n = 0;
    const char *key;
    json_t *value;
    json_object_foreach (args, key, value)
        if (n >= 2 || strcmp(key, keys[n++]) != 0)
            fail_msg("not the weather tool's arguments: %s", arguments);
    const char *city = json_string_value(json_object_get(args, "city"));
    const char *unit = json_string_value(json_object_get(args, "unit"));
    size_t points = 0;
    for (const char *p = city; p != NULL && *p != '\0'; p++)
        points += (*p & 0xC0) != 0x80;
    if (n != 2 || city == NULL || points > 12 || unit == NULL ||
        (strcmp(unit, "C") != 0 && strcmp(unit, "F") != 0))
        fail_msg("not the weather tool's arguments: %s", arguments);
    json_decref(args);
}

/* The request that forces a call of get_weather. */
static json_t *forced_call_request(void)
{
    json_t *b = greedy(json_string(WEATHER_QUESTION), CALL_TOKENS, NULL, NULL);
    json_object_set_new(b, "tools", json_pack("[o]", weather_tool(false)));
    json_object_set_new(b, "tool_choice",
                        json_pack("{s:s, s:s}", "type", "function", "name", "get_weather"));
    json_object_set_new(b, "logit_bias", json_pack("{s:i, s:i}", "37", 6, "436", 6));
    return b;
}

/* The chat completion of forced_call_request with this tool_choice (taken), in chat's shape,
 * of at most `tokens`. */
static json_t *forced_chat(json_t *tool_choice, int tokens)
{
    return chat(json_pack("{s:[o], s:i, s:f, s:[o], s:o, s:{s:i, s:i}}", "messages",
                          message("user", WEATHER_QUESTION), "max_tokens", tokens,
                          "temperature", 0.0, "tools", weather_tool(true), "tool_choice",
                          tool_choice, "logit_bias", "37", 6, "436", 6));
}

/* The arguments of a chat answer's one tool call (borrowed). */
static const char *chat_arguments(const json_t *answer)
{
    json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
    json_t *calls = json_object_get(json_object_get(choice, "message"), "tool_calls");
    const char *arguments = json_string_value(
        json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
    if (json_array_size(calls) != 1 || arguments == NULL)
        fail_msg("not one tool call: %s", graft_test_shown(answer));
    return arguments;
}

/* The output of resp is one call of get_weather (borrowed). */
static json_t *the_call(const json_t *resp)
{
    json_t *output = json_object_get(resp, "output");
    json_t *item = json_array_get(output, 0);
    if (json_array_size(output) != 1 || !is(json_object_get(item, "type"), "function_call") ||
        !is(json_object_get(item, "name"), "get_weather"))
        fail_msg("not one call of get_weather: %s", graft_test_shown(resp));
    return item;
}

/* tool_choice naming the tool: the output is one function_call item whose arguments are the
 * forced chat completion's, held to the parameters; "required" and "none" as chat's;
 * streamed, its events come and the final response holds it. Its output sent back, after the
 * stored response or with the whole conversation as items, gives the chat answer to [user,
 * assistant tool call, tool]. */
static void test_forced_function_call(void **state)
{
    (void)state;
    json_t *r = respond(forced_call_request());
    expect_response_object(r);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    json_t *call = the_call(r);
    const char *arguments = json_string_value(json_object_get(call, "arguments"));
    const char *call_id = json_string_value(json_object_get(call, "call_id"));
    expect_weather_arguments(arguments);

    json_t *forced = forced_chat(json_pack("{s:s, s:{s:s}}", "type", "function", "function",
                                           "name", "get_weather"),
                                 CALL_TOKENS);
    assert_string_equal(chat_finish(forced), "tool_calls");
    assert_string_equal(chat_arguments(forced), arguments);
    assert_int_equal(usage_of(r, "input_tokens"), usage_of(forced, "prompt_tokens"));
    assert_int_equal(usage_of(r, "output_tokens"), usage_of(forced, "completion_tokens"));
    json_decref(forced);
    /* "required" forces a call as chat's does; "none" answers in text as chat's does */
    json_t *required = forced_call_request();
    json_object_set_new(required, "tool_choice", json_string("required"));
    json_t *r_required = respond(required);
    json_t *chat_required = forced_chat(json_string("required"), CALL_TOKENS);
    assert_string_equal(json_string_value(json_object_get(the_call(r_required), "arguments")),
                        chat_arguments(chat_required));
    json_decref(chat_required);
    json_decref(r_required);
    json_t *none = forced_call_request();
    json_object_set_new(none, "tool_choice", json_string("none"));
    json_object_set_new(none, "max_output_tokens", json_integer(8));
    json_t *r_none = respond(none);
    json_t *chat_none = forced_chat(json_string("none"), 8);
    expect_response_object(r_none);
    assert_string_equal(message_text(r_none), chat_content(chat_none));
    json_decref(chat_none);
    json_decref(r_none);

    json_t *events = stream(forced_call_request());
    json_t *final = check_event_order(events);
    expect_response_object(final);
    assert_string_equal(json_string_value(json_object_get(the_call(final), "arguments")),
                        arguments);
    expect_same_response(final, r);
    json_decref(events);

    json_t *result = json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id",
                               call_id, "output", "21 C");
    json_t *after = greedy(json_pack("[O]", result), 8, id_of(r), NULL);
    json_t *whole = greedy(json_pack("[o, {s:s, s:s, s:s, s:s}, O]",
                                     message("user", WEATHER_QUESTION), "type", "function_call",
                                     "call_id", call_id, "name", "get_weather", "arguments",
                                     arguments, result),
                           8, NULL, NULL);
    json_t *bodies[2] = {after, whole};
    json_t *oracle = chat(json_pack(
        "{s:[o, {s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, {s:s, s:s, s:s}], s:i, s:f, s:[o]}",
        "messages", message("user", WEATHER_QUESTION), "role", "assistant", "content",
        "tool_calls", "id", call_id, "type", "function", "function", "name", "get_weather",
        "arguments", arguments, "role", "tool", "tool_call_id", call_id, "content", "21 C",
        "max_tokens", 8, "temperature", 0.0, "tools", weather_tool(true)));
    for (size_t k = 0; k < 2; k++) {
        json_object_set_new(bodies[k], "tools", json_pack("[o]", weather_tool(false)));
        json_t *answer = respond(bodies[k]);
        expect_response_object(answer);
        assert_string_equal(message_text(answer), chat_content(oracle));
        assert_int_equal(usage_of(answer, "input_tokens"), usage_of(oracle, "prompt_tokens"));
        json_decref(answer);
    }
    json_decref(oracle);
    json_decref(result);
    json_decref(r);
}

/* ---- text formats --------------------------------------------------------------------------- */

#define PET_SCHEMA                                                                                 \
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": "     \
    "8}, \"happy\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"happy\"], "               \
    "\"additionalProperties\": false}"

/* text.format json_schema and json_object: the answer ends by itself (completed), is the
 * chat answer with the same response_format, parses as one object and, with the schema, is
 * an instance of it, its keys in the schema's order; the format is given back. */
static void test_text_formats(void **state)
{
    (void)state;
    json_t *formats[2] = {
        json_pack("{s:s, s:s, s:o, s:b}", "type", "json_schema", "name", "pet", "schema",
                  graft_test_parse(PET_SCHEMA), "strict", 1),
        json_pack("{s:s}", "type", "json_object"),
    };
    json_t *response_formats[2] = {
        json_pack("{s:s, s:{s:s, s:o, s:b}}", "type", "json_schema", "json_schema", "name", "pet",
                  "schema", graft_test_parse(PET_SCHEMA), "strict", 1),
        json_pack("{s:s}", "type", "json_object"),
    };
    for (size_t k = 0; k < 2; k++) {
        json_t *body = greedy(json_string("Describe your pet in JSON."), 96, NULL, NULL);
        json_object_set_new(body, "text", json_pack("{s:O}", "format", formats[k]));
        json_object_set_new(body, "logit_bias", graft_test_parse(CLOSING_BIAS));
        json_t *r = respond(body);
        expect_response_object(r);
        assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
        json_t *format = json_object_get(json_object_get(r, "text"), "format");
        if (!json_equal(json_object_get(format, "type"), json_object_get(formats[k], "type")) ||
            (k == 0 && !json_equal(json_object_get(format, "schema"),
                                   json_object_get(formats[k], "schema"))))
            fail_msg("text.format given back as %s", graft_test_shown(format));
        json_t *oracle = chat(json_pack("{s:[o], s:i, s:f, s:O, s:o}", "messages",
                                        message("user", "Describe your pet in JSON."),
                                        "max_tokens", 96, "temperature", 0.0, "response_format",
                                        response_formats[k], "logit_bias",
                                        graft_test_parse(CLOSING_BIAS)));
        assert_string_equal(chat_finish(oracle), "stop");
        const char *text = message_text(r);
        assert_string_equal(text, chat_content(oracle));
        json_t *v = graft_test_parse(text);
        if (!json_is_object(v))
            fail_msg("not an object: %s", text);
        if (k == 0) {
            const char *first = json_object_iter_key(json_object_iter(v));
            const char *name = json_string_value(json_object_get(v, "name"));
            size_t points = 0;
            for (const char *p = name; p != NULL && *p != '\0'; p++)
                points += (*p & 0xC0) != 0x80;
            if (json_object_size(v) != 2 || first == NULL || strcmp(first, "name") != 0 ||
                name == NULL || points > 8 || !json_is_boolean(json_object_get(v, "happy")))
                fail_msg("not a pet: %s", text);
        }
        json_decref(v);
        json_decref(oracle);
        json_decref(r);
        json_decref(formats[k]);
        json_decref(response_formats[k]);
    }
}

/* ---- refusals ------------------------------------------------------------------------------- */

/* r is a 405 whose Allow header lists exactly `methods` (NULL-terminated), in any order. */
static void expect_allow(const response *r, const char *const *methods)
{
    free(graft_test_expect_error(r, 405, NULL));
    char *allow = graft_test_header(r, "Allow"), *save = NULL;
    if (allow == NULL)
        fail_msg("a 405 without Allow");
    size_t listed = 0, n = 0;
    while (methods[n] != NULL)
        n++;
    for (char *m = strtok_r(allow, ", ", &save); m != NULL; m = strtok_r(NULL, ", ", &save)) {
        size_t i = 0;
        while (i < n && strcmp(m, methods[i]) != 0)
            i++;
        if (i == n)
            fail_msg("Allow lists %s", m);
        listed++;
    }
    assert_int_equal(listed, n);
    free(allow);
}

/* Each refused with a 400 naming its field (or a part of it): hosted tools, images, files and
 * other item types in the input, background, bad max_output_tokens, instructions and input,
 * an unknown previous_response_id; GET, HEAD and DELETE of an unknown id are 404, other
 * methods 405 with Allow. None of it changes the answer to a request before and after, nor
 * do the fields the README says are ignored (reasoning, truncation, include, user). */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}", "tools[0]"},
        {"{\"input\": \"x\", \"tools\": [{\"type\": \"file_search\", \"vector_store_ids\": "
         "[\"vs_1\"]}]}",
         "tools[0]"},
        {"{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": "
         "\"What is it?\"}, {\"type\": \"input_image\", \"image_url\": "
         "\"https://example.com/a.png\"}]}]}",
         "input[0].content[1]"},
        {"{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_file\", "
         "\"file_id\": \"file-1\"}]}]}",
         "input[0].content[0]"},
        {"{\"input\": [{\"role\": \"user\", \"content\": \"x\"}, {\"type\": \"computer_call\", "
         "\"call_id\": \"c\", \"action\": {}}]}",
         "input[1]"},
        {"{\"input\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "input[0]"},
        {"{\"input\": \"x\", \"background\": true}", "background"},
        {"{\"input\": \"x\", \"background\": true, \"stream\": true}", "background"},
        {"{\"input\": \"x\", \"max_output_tokens\": 0}", "max_output_tokens"},
        {"{\"input\": \"x\", \"max_output_tokens\": \"8\"}", "max_output_tokens"},
        {"{\"input\": \"x\", \"max_output_tokens\": 100000}", "max_output_tokens"},
        {"{\"input\": \"x\", \"instructions\": 5}", "instructions"},
        {"{\"input\": \"x\", \"instructions\": [\"Be nice.\"]}", "instructions"},
        {"{\"max_output_tokens\": 8}", "input"},
        {"{\"input\": 7}", "input"},
        {"{\"input\": \"x\", \"previous_response_id\": \"resp_unknown\"}",
         "previous_response_id"},
        {"{\"input\": \"x\", \"previous_response_id\": 7}", "previous_response_id"},
        {"{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"xml\"}}}", "text.format"},
        {"{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"f\", "
         "\"parameters\": {\"type\": \"object\"}}], \"tool_choice\": {\"type\": \"function\", "
         "\"name\": \"g\"}}",
         "tool_choice"},
        {"{\"input\": \"x\", \"temperature\": 9}", "temperature"},
        {"{\"input\": \"x\", \"tools\": \"get_weather\"}", "tools"},
        {"{\"input\": \"x\", \"include\": \"message.output_text.logprobs\"}", "include"},
        {"{\"input\": \"x\", \"store\": \"yes\"}", "store"},
    };
    json_t *before = respond(greedy(json_string("Hi there"), 6, NULL, NULL));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refused(cases[i].body, cases[i].param);
    static const char *const methods[] = {"GET", "HEAD", "DELETE"};
    for (size_t i = 0; i < 3; i++)
        expect_stored_error(&main_server, methods[i], "resp_unknown", NULL, 404);
    response r = graft_test_request(&main_server, "PUT", "/v1/responses/resp_unknown", "{}");
    expect_allow(&r, (const char *const[]){"GET", "HEAD", "DELETE", "OPTIONS", NULL});
    graft_test_response_free(&r);
    r = graft_test_request(&main_server, "PUT", "/v1/responses", "{}");
    expect_allow(&r, (const char *const[]){"POST", "OPTIONS", NULL});
    graft_test_response_free(&r);
    json_t *after = respond(greedy(json_string("Hi there"), 6, NULL, NULL));
    assert_string_equal(message_text(after), message_text(before));
    json_decref(after);
    /* the fields the README says are ignored change nothing */
    json_t *ignoring = greedy(json_string("Hi there"), 6, NULL, NULL);
    json_object_set_new(ignoring, "reasoning", json_pack("{s:s}", "effort", "low"));
    json_object_set_new(ignoring, "truncation", json_string("auto"));
    json_object_set_new(ignoring, "include", json_pack("[s]", "message.output_text.logprobs"));
    json_object_set_new(ignoring, "user", json_string("user-1"));
    after = respond(ignoring);
    assert_string_equal(message_text(after), message_text(before));
    json_decref(after);
    json_decref(before);
}

/* graft_requests_total counts POST /v1/responses under endpoint="responses", whole,
 * streamed and refused. */
static void test_metrics_count_responses(void **state)
{
    (void)state;
    const char *ok = "graft_requests_total{endpoint=\"responses\",status=\"2xx\"}";
    const char *refused = "graft_requests_total{endpoint=\"responses\",status=\"4xx\"}";
    double ok_before = graft_test_metric(&main_server, ok);
    double refused_before = graft_test_metric(&main_server, refused);
    assert_true(ok_before >= 0 && refused_before >= 0);
    json_decref(respond(greedy(json_string("Hi"), 2, NULL, NULL)));
    json_decref(stream(greedy(json_string("Hi"), 2, NULL, NULL)));
    expect_refused("{\"input\": 7}", "input");
    /* a request is counted as it ends, which its client may see first */
    for (int i = 0; i < 100 && graft_test_metric(&main_server, ok) < ok_before + 2; i++)
        usleep(10000);
    assert_int_equal(graft_test_metric(&main_server, ok), ok_before + 2);
    assert_int_equal(graft_test_metric(&main_server, refused), refused_before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_response_is_the_chat_answer),
        cmocka_unit_test(test_streamed_events),
        cmocka_unit_test(test_hang_up_cancels),
        cmocka_unit_test(test_previous_response_drops_instructions),
        cmocka_unit_test(test_conversation_chain),
        cmocka_unit_test(test_deleted_turn_leaves_later_turns_whole),
        cmocka_unit_test(test_forgotten_turn_leaves_later_turns_whole),
        cmocka_unit_test(test_unstored_response),
        cmocka_unit_test(test_stored_responses_lru),
        cmocka_unit_test(test_response_over_the_store_bytes),
        cmocka_unit_test(test_store_bytes_bound),
        cmocka_unit_test(test_responses_belong_to_their_key),
        cmocka_unit_test(test_forced_function_call),
        cmocka_unit_test(test_text_formats),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_metrics_count_responses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
