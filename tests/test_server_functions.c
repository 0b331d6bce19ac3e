/*
 * test_server_functions.c: OpenAI's legacy function calling (functions, function_call, an
 * assistant message's function_call, "function" messages) through `graft serve`, the real
 * binary on stories260K with Qwen2.5's chat template, which renders tools, calls and their
 * results.
 *
 * Checked against the tools form the legacy form stands for: a legacy conversation renders
 * the same prompt as its tools form; a call forced with function_call gives the arguments a
 * call forced with tool_choice gives, answered as the message's function_call with the
 * finish reason "function_call", whole and streamed, with no tool_calls; function_call
 * "none" gives the text tool_choice "none" gives; a call the model writes by itself
 * (function_call "auto", driven here with Qwen's call text) comes back as function_call too.
 * Malformed legacy fields, and ones beside their tools-form twins, are refused naming the
 * legacy field.
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

#include "graft.h"
#include "serve_client.h"
#include "server/completion.h"

/* Biases towards '"', ':' and '}' (stories260K's ids) so that a model trained on stories
 * closes the call's object within max_tokens. */
#define CLOSING_BIAS "{\"37\": 6, \"436\": 6, \"61\": 6, \"467\": 6, \"128\": 15}"

static server srv;

static int setup(void **state)
{
    (void)state;
    char tmpl[1024];
    const char *dir = getenv("GRAFT_TEMPLATES_DIR");
    snprintf(tmpl, sizeof tmpl, "%s/Qwen-Qwen2.5-7B-Instruct.jinja",
             dir ? dir : "../shared/templates");
    const char *args[] = {"--ctx", "1024", "--chat-template", tmpl, NULL};
    srv = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&srv);
}

/* POSTs body (consumed) to path; returns the JSON answer, which must have status 200. */
static json_t *post(const char *path, json_t *body)
{
    return graft_test_post_json(&srv, path, body, 200);
}

static json_t *parameters(void)
{
    return json_pack("{s:s, s:{s:{s:s}, s:{s:s}}, s:[s, s]}", "type", "object", "properties",
                     "city", "type", "string", "days", "type", "integer", "required", "city",
                     "days");
}

static json_t *functions(void)
{
    return json_pack("[{s:s, s:s, s:o}, {s:s, s:o}]", "name", "get_weather", "description",
                     "The weather in a city", "parameters", parameters(), "name", "get_time",
                     "parameters", json_pack("{s:s}", "type", "object"));
}

/* The same functions as tools. */
static json_t *tools(void)
{
    json_t *fns = functions(), *out = json_array();
    for (size_t i = 0; i < json_array_size(fns); i++)
        json_array_append_new(out, json_pack("{s:s, s:O}", "type", "function", "function",
                                             json_array_get(fns, i)));
    json_decref(fns);
    return out;
}

/* A greedy request about the weather, the closing bias on. */
static json_t *weather_request(int max_tokens)
{
    return json_pack("{s:[{s:s, s:s}], s:i, s:f, s:o}", "messages", "role", "user", "content",
                     "Weather in Paris?", "max_tokens", max_tokens, "temperature", 0.0,
                     "logit_bias", json_loads(CLOSING_BIAS, 0, NULL));
}

static json_t *choice_of(json_t *reply)
{
    return json_array_get(json_object_get(reply, "choices"), 0);
}

/* A conversation told in the legacy form (an assistant's function_call, the function's
 * result) renders the prompt of the same conversation told with tools: the call's id is
 * "call_" and its message's index, the result a tool message answering it. */
static void test_legacy_conversation_renders_as_tools(void **state)
{
    (void)state;
    json_t *legacy = json_pack(
        "{s:[{s:s, s:s}, {s:s, s:n, s:{s:s, s:s}}, {s:s, s:s, s:s}], s:o}", "messages", "role",
        "user", "content", "Weather in Paris?", "role", "assistant", "content", "function_call",
        "name", "get_weather", "arguments", "{\"city\": \"Paris\", \"days\": 1}", "role",
        "function", "name", "get_weather", "content", "sunny", "functions", functions());
    json_t *as_tools = json_pack(
        "{s:[{s:s, s:s}, {s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}, {s:s, s:s, s:s, s:s}], s:o, "
        "s:b}",
        "messages", "role", "user", "content", "Weather in Paris?", "role", "assistant",
        "content", "tool_calls", "id", "call_1", "type", "function", "function", "name",
        "get_weather", "arguments", "{\"city\": \"Paris\", \"days\": 1}", "role", "tool",
        "tool_call_id", "call_1", "name", "get_weather", "content", "sunny", "tools", tools(),
        "parallel_tool_calls", 0);
    json_t *translated = NULL;
    char *param = NULL, *message = NULL;
    bool legacy_answer = false;
    assert_int_equal(graft__functions_as_tools(legacy, true, &translated, &legacy_answer, &param,
                                               &message),
                     GRAFT_OK);
    if (!json_equal(translated, as_tools))
        fail_msg("translated: %s", graft_test_shown(translated));
    assert_true(legacy_answer);
    json_decref(translated);
    json_t *a = post("/apply-template", json_incref(legacy));
    json_t *b = post("/apply-template", json_incref(as_tools));
    const char *prompt = json_string_value(json_object_get(a, "prompt"));
    assert_string_equal(prompt, json_string_value(json_object_get(b, "prompt")));
    assert_non_null(strstr(prompt, "\"name\": \"get_time\"")); /* the functions, as tools */
    assert_non_null(strstr(prompt, "{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                   "\"Paris\", \"days\": 1}}"));
    assert_non_null(strstr(prompt, "<tool_response>\nsunny\n</tool_response>"));
    json_decref(a);
    json_decref(b);
    /* chat completions of both compute one prompt and give one answer */
    json_t *forms[2] = {legacy, as_tools}, *answers[2];
    for (int k = 0; k < 2; k++) {
        json_object_set_new(forms[k], "max_tokens", json_integer(6));
        json_object_set_new(forms[k], "temperature", json_real(0.0));
        answers[k] = post("/v1/chat/completions", forms[k]);
    }
    const char *keys[] = {"usage", "prompt_tokens"};
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(answers[0], keys[0]), keys[1])),
        json_integer_value(json_object_get(json_object_get(answers[1], keys[0]), keys[1])));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(choice_of(answers[0]), "message"),
                                          "content")),
        json_string_value(json_object_get(json_object_get(choice_of(answers[1]), "message"),
                                          "content")));
    json_decref(answers[0]);
    json_decref(answers[1]);
}

/* function_call naming a function: the call tool_choice naming it gives, as the message's
 * function_call (content null, no tool_calls, finish reason "function_call"); streamed, one
 * delta carries it and the last chunk the finish reason. */
static void test_forced_call_answers_as_function_call(void **state)
{
    (void)state;
    json_t *legacy = weather_request(96);
    json_object_set_new(legacy, "functions", functions());
    json_object_set_new(legacy, "function_call", json_pack("{s:s}", "name", "get_weather"));
    json_t *as_tools = weather_request(96);
    json_object_set_new(as_tools, "tools", tools());
    json_object_set_new(as_tools, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function",
                                                           "function", "name", "get_weather"));
    json_object_set_new(as_tools, "parallel_tool_calls", json_false());

    json_t *a = post("/v1/chat/completions", json_incref(legacy));
    json_t *b = post("/v1/chat/completions", as_tools);
    json_t *msg = json_object_get(choice_of(a), "message");
    assert_string_equal(json_string_value(json_object_get(choice_of(a), "finish_reason")),
                        "function_call");
    assert_true(json_is_null(json_object_get(msg, "content")));
    assert_null(json_object_get(msg, "tool_calls"));
    json_t *call = json_object_get(msg, "function_call");
    assert_int_equal(json_object_size(call), 2);
    assert_string_equal(json_string_value(json_object_get(call, "name")), "get_weather");
    json_t *expected = json_object_get(
        json_array_get(json_object_get(json_object_get(choice_of(b), "message"), "tool_calls"),
                       0),
        "function");
    assert_string_equal(json_string_value(json_object_get(call, "arguments")),
                        json_string_value(json_object_get(expected, "arguments")));
    json_t *args = json_loads(json_string_value(json_object_get(call, "arguments")), 0, NULL);
    assert_true(json_is_string(json_object_get(args, "city")));
    assert_true(json_is_integer(json_object_get(args, "days")));
    json_decref(args);

    json_object_set_new(legacy, "stream", json_true());
    char *text = json_dumps(legacy, JSON_COMPACT);
    response st = graft_test_request(&srv, "POST", "/v1/chat/completions", text);
    assert_int_equal(st.status, 200);
    char *whole = json_dumps(call, JSON_COMPACT);
    char member[2048];
    snprintf(member, sizeof member, "\"function_call\":%s", whole);
    assert_non_null(strstr(st.body, member));
    assert_ptr_equal(strstr(st.body, member), strstr(st.body, "\"function_call\":{"));
    assert_non_null(strstr(st.body, "\"finish_reason\":\"function_call\""));
    assert_null(strstr(st.body, "tool_calls"));
    assert_null(strstr(st.body, "<tool_call>"));
    free(whole);
    free(text);
    graft_test_response_free(&st);
    json_decref(legacy);
    json_decref(a);
    json_decref(b);
}

/* function_call "none": the text tool_choice "none" gives, with no call. */
static void test_function_call_none_answers_text(void **state)
{
    (void)state;
    json_t *legacy = weather_request(12);
    json_object_set_new(legacy, "functions", functions());
    json_object_set_new(legacy, "function_call", json_string("none"));
    json_t *as_tools = weather_request(12);
    json_object_set_new(as_tools, "tools", tools());
    json_object_set_new(as_tools, "tool_choice", json_string("none"));
    json_t *a = post("/v1/chat/completions", legacy);
    json_t *b = post("/v1/chat/completions", as_tools);
    json_t *msg = json_object_get(choice_of(a), "message");
    assert_null(json_object_get(msg, "function_call"));
    assert_string_equal(json_string_value(json_object_get(msg, "content")),
                        json_string_value(json_object_get(json_object_get(choice_of(b),
                                                                          "message"),
                                                          "content")));
    assert_string_equal(json_string_value(json_object_get(choice_of(a), "finish_reason")),
                        "length");
    json_decref(a);
    json_decref(b);
}

/* function_call "auto" with a call the model wrote: stories260K never writes one, so the
 * choice is driven with Qwen's call text, as the answer of a legacy request. */
static void test_written_call_answers_as_function_call(void **state)
{
    (void)state;
    static graft__server_config config = {.alias = "m"};
    static graft__server_ctx ctx = {.config = &config};
    completion *c = calloc(1, sizeof *c);
    c->ctx = &ctx;
    c->req.chat = c->req.tools = c->req.one_call = c->req.legacy_functions = true;
    c->n_choices = 1;
    choice *ch = &c->choices[0];
    *ch = (choice){.c = c, .calls = json_array()};
    const char *text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
                       "\"get_time\"}\n</tool_call>";
    ch->text = strdup(text);
    ch->len = strlen(text);
    graft__choice_release(ch);
    assert_true(ch->stopped); /* one call per answer */
    graft__choice_settle_tools(ch);
    json_t *j = graft__choice_json(c, ch, 0, ch->content_end, false, true);
    json_t *msg = json_object_get(j, "message");
    assert_null(json_object_get(msg, "tool_calls"));
    json_t *call = json_object_get(msg, "function_call");
    assert_string_equal(json_string_value(json_object_get(call, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(call, "arguments")),
                        "{\"city\":\"Paris\",\"days\":2}");
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")),
                        "function_call");
    json_decref(j);
    free(ch->text);
    json_decref(ch->calls);
    free(c);
}

/* Malformed legacy fields, legacy fields beside their tools-form twins, and legacy fields
 * off chat are refused naming the legacy field, also where the tools form found the fault. */
static void test_refusals_name_the_legacy_field(void **state)
{
    (void)state;
    static const struct {
        const char *path, *extra, *param;
    } refused[] = {
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}], \"tools\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\"}}]", "functions"},
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}], \"function_call\": "
         "\"auto\", \"tool_choice\": \"auto\"", "function_call"},
        {"/v1/chat/completions", "\"function_call\": \"auto\"", "function_call"},
        {"/v1/chat/completions", "\"functions\": []", "functions"},
        {"/v1/chat/completions", "\"functions\": {\"name\": \"f\"}", "functions"},
        {"/v1/chat/completions", "\"functions\": [{\"nom\": \"f\"}]", "functions[0].name"},
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}], \"function_call\": 7",
         "function_call"},
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}], \"function_call\": "
         "\"always\"", "function_call"},
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}], \"function_call\": "
         "{\"name\": \"g\"}", "function_call.name"},
        {"/v1/chat/completions", "\"functions\": [{\"name\": \"f\"}, {\"name\": \"g\", "
         "\"strict\": true, \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": "
         "{\"type\": \"string\", \"pattern\": \"(?=x)\"}}}}], \"function_call\": {\"name\": "
         "\"g\"}", "functions[1].parameters"},
        {"/v1/completions", "\"functions\": [{\"name\": \"f\"}]", "functions"},
        {"/v1/completions", "\"function_call\": \"auto\"", "function_call"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                 "\"prompt\": \"x\", %s}", refused[i].extra);
        response r = graft_test_request(&srv, "POST", refused[i].path, body);
        char *message = graft_test_expect_error(&r, 400, refused[i].param);
        /* it speaks of what was sent, not of the tools form's paths */
        if (strstr(message, "tool_choice.function") != NULL || strstr(message, "tools[") != NULL)
            fail_msg("%s: %s", refused[i].extra, message);
        free(message);
        graft_test_response_free(&r);
    }
    static const struct {
        const char *messages, *param;
    } bad_messages[] = {
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"function\", \"content\": "
         "\"r\"}]", "messages[1].name"},
        {"[{\"role\": \"user\", \"content\": \"x\", \"function_call\": {\"name\": \"f\", "
         "\"arguments\": \"{}\"}}]", "messages[0].function_call"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
         "\"function_call\": {\"name\": \"f\", \"arguments\": {}}}]", "messages[1].function_call"},
    };
    for (size_t i = 0; i < sizeof bad_messages / sizeof bad_messages[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\": %s}", bad_messages[i].messages);
        response r = graft_test_request(&srv, "POST", "/v1/chat/completions", body);
        free(graft_test_expect_error(&r, 400, bad_messages[i].param));
        graft_test_response_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_conversation_renders_as_tools),
        cmocka_unit_test(test_forced_call_answers_as_function_call),
        cmocka_unit_test(test_function_call_none_answers_text),
        cmocka_unit_test(test_written_call_answers_as_function_call),
        cmocka_unit_test(test_refusals_name_the_legacy_field),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
