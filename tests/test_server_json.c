/*
 * test_server_json.c: output held to JSON through `graft serve`, the real binary on
 * stories260K, spoken to with libcurl: response_format json_object and json_schema,
 * llama-server's json_schema field, and forced tool calls.
 *
 * Checked: every choice that ends "stop" is one JSON object (jansson parses it), on
 * /v1/completions with n = 3 and on /v1/chat/completions; with a json_schema, each of n = 2
 * choices is an instance (checked here by hand from the schema; strings held to a format, a
 * pattern and lengths too), and so is llama-server's
 * /completion answer to its json_schema field; tool_choice naming a function or "required"
 * gives one call of it, its arguments held to its parameters, with no content (cut short,
 * the call's text is content once); streamed, each choice's deltas add up to its whole
 * answer; a cut by max_tokens ends "length"; the same request without the format gives
 * other text (the format is not ignored); bad formats and forced calls are refused naming
 * the field. A model trained on stories rarely closes an object by itself, so the requests
 * bias the tokens of '"', ':' and '}' (ids of stories260K's vocabulary: 37 and 436 are '"',
 * 61 and 467 ':', 128 '}').
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

#define AS_JSON_OBJECT "\"response_format\": {\"type\": \"json_object\"}"
#define CLOSING_BIAS                                                                          \
    "\"logit_bias\": {\"37\": 6, \"436\": 6, \"61\": 6, \"467\": 6, \"128\": 15}"

static server json_server;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", NULL};
    json_server = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&json_server);
}

/* text holds one JSON object and nothing but whitespace around it. */
static void expect_object(const char *text)
{
    json_error_t err;
    json_t *root = json_loads(text, JSON_ALLOW_NUL, &err);
    if (root == NULL)
        fail_msg("not JSON: '%s': %s", text, err.text);
    if (!json_is_object(root))
        fail_msg("not an object: '%s'", text);
    json_decref(root);
}

/* The text or message content of choice i of a whole response. */
static const char *choice_text(json_t *body, size_t i, bool chat)
{
    json_t *choice = json_array_get(json_object_get(body, "choices"), i);
    assert_non_null(choice);
    if (chat)
        return json_string_value(json_object_get(json_object_get(choice, "message"), "content"));
    return json_string_value(json_object_get(choice, "text"));
}

static const char *finish_of(json_t *body, size_t i)
{
    json_t *choice = json_array_get(json_object_get(body, "choices"), i);
    return json_string_value(json_object_get(choice, "finish_reason"));
}

/* Each index's streamed text (completions' "text" or chat's delta "content"). */
static void stream_texts(const response *r, bool chat, char **texts, size_t n)
{
    assert_int_equal(r->status, 200);
    for (size_t i = 0; i < n; i++)
        texts[i] = calloc(1, 1);
    char *body = strdup(r->body), *save = NULL;
    for (char *ev = strtok_r(body, "\n", &save); ev; ev = strtok_r(NULL, "\n", &save)) {
        if (strcmp(ev, "data: [DONE]") == 0)
            break;
        json_t *j = json_loads(ev + 6, 0, NULL);
        assert_non_null(j);
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        if (choice != NULL) {
            size_t i = (size_t)json_integer_value(json_object_get(choice, "index"));
            assert_true(i < n);
            json_t *piece = chat ? json_object_get(json_object_get(choice, "delta"), "content")
                                 : json_object_get(choice, "text");
            const char *t = json_string_value(piece) ? json_string_value(piece) : "";
            texts[i] = realloc(texts[i], strlen(texts[i]) + strlen(t) + 1);
            strcat(texts[i], t);
        }
        json_decref(j);
    }
    free(body);
}

/* Sends `fields` (a body without its closing brace) to path whole and streamed; returns the
 * whole response's JSON and each streamed choice's text in texts[0, n). */
static json_t *whole_and_streamed(const char *path, const char *fields, char **texts, size_t n)
{
    bool chat = strstr(path, "chat") != NULL;
    char body[2048];
    snprintf(body, sizeof body, "%s}", fields);
    response whole = graft_test_request(&json_server, "POST", path, body);
    json_t *j = graft_test_json_of(&whole);
    snprintf(body, sizeof body, "%s, \"stream\": true}", fields);
    response streamed = graft_test_request(&json_server, "POST", path, body);
    stream_texts(&streamed, chat, texts, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(texts[i], choice_text(j, i, chat));
    graft_test_response_free(&whole);
    graft_test_response_free(&streamed);
    return j;
}

/* n = 3 sampled completions held to JSON: each an object, ended "stop"; streamed alike. */
static void test_completions_json_object(void **state)
{
    (void)state;
    char *texts[3];
    json_t *j = whole_and_streamed("/v1/completions",
                                   "{\"prompt\": \"Once upon a time\", \"max_tokens\": 96, "
                                   "\"temperature\": 1, \"seed\": 5, \"n\": 3, " AS_JSON_OBJECT
                                   ", " CLOSING_BIAS,
                                   texts, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(finish_of(j, i), "stop");
        expect_object(choice_text(j, i, false));
        free(texts[i]);
    }
    /* the same request as plain text is not an object */
    char plain[512];
    snprintf(plain, sizeof plain,
             "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1, "
             "\"seed\": 5, " CLOSING_BIAS "}");
    response p = graft_test_request(&json_server, "POST", "/v1/completions", plain);
    char *pt = graft_test_completion_text(&p);
    assert_null(json_loads(pt, 0, NULL));
    free(pt);
    graft_test_response_free(&p);
    json_decref(j);
}

/* Chat, greedy: the message content is an object, and streamed the same. */
static void test_chat_json_object(void **state)
{
    (void)state;
    char *text;
    json_t *j = whole_and_streamed("/v1/chat/completions",
                                   "{\"messages\": [{\"role\": \"user\", \"content\": \"Answer "
                                   "in JSON.\"}], \"max_tokens\": 96, \"temperature\": 0, "
                                   AS_JSON_OBJECT ", " CLOSING_BIAS,
                                   &text, 1);
    assert_string_equal(finish_of(j, 0), "stop");
    expect_object(choice_text(j, 0, true));
    free(text);
    json_decref(j);
}

/* The schema of test_json_schema_answers: three properties, all required, in this order. */
#define PERSON_FORMAT                                                                         \
    "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"person\", "  \
    "\"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": "  \
    "\"string\"}, \"age\": {\"type\": \"integer\"}, \"pets\": {\"type\": \"array\", \"items\": "   \
    "{\"enum\": [\"cat\", \"dog\"]}, \"maxItems\": 2}}, \"required\": [\"name\", \"age\", "        \
    "\"pets\"], \"additionalProperties\": false}}}"

/* text is {"name": a string, "age": an integer, "pets": up to 2 of "cat" and "dog"}, its
 * keys in this order. */
static void expect_person(const char *text)
{
    static const char *const keys[] = {"name", "age", "pets"};
    json_t *v = json_loads(text, 0, NULL);
    if (!json_is_object(v) || json_object_size(v) != 3)
        fail_msg("not a person: '%s'", text);
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach (v, key, value)
        assert_string_equal(key, keys[i++]);
    assert_true(json_is_string(json_object_get(v, "name")));
    assert_true(json_is_integer(json_object_get(v, "age")));
    json_t *pets = json_object_get(v, "pets");
    assert_true(json_is_array(pets) && json_array_size(pets) <= 2);
    for (size_t p = 0; p < json_array_size(pets); p++) {
        const char *pet = json_string_value(json_array_get(pets, p));
        assert_true(pet != NULL && (strcmp(pet, "cat") == 0 || strcmp(pet, "dog") == 0));
    }
    json_decref(v);
}

/* json_schema, n = 2 sampled, chat: each choice is an instance, streamed alike. */
static void test_json_schema_answers(void **state)
{
    (void)state;
    char *texts[2];
    json_t *j = whole_and_streamed("/v1/chat/completions",
                                   "{\"messages\": [{\"role\": \"user\", \"content\": "
                                   "\"Who?\"}], \"max_tokens\": 96, \"temperature\": 1, "
                                   "\"seed\": 11, \"n\": 2, " PERSON_FORMAT ", " CLOSING_BIAS,
                                   texts, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(finish_of(j, i), "stop");
        expect_person(choice_text(j, i, true));
        free(texts[i]);
    }
    json_decref(j);
}

/* A date (format), a ticket code (pattern), a name of 2 to 5 code points and a quantity
 * from 1 to 9 (bounds). */
#define TICKET_FORMAT                                                                         \
    "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "          \
    "\"ticket\", \"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": "        \
    "{\"due\": {\"type\": \"string\", \"format\": \"date\"}, \"code\": {\"type\": "            \
    "\"string\", \"pattern\": \"^T-[0-9a-f]{4}$\"}, \"who\": {\"type\": \"string\", "           \
    "\"minLength\": 2, \"maxLength\": 5}, \"qty\": {\"type\": \"integer\", \"minimum\": 1, "    \
    "\"exclusiveMaximum\": 10}}, \"required\": [\"due\", \"code\", \"who\", \"qty\"], "         \
    "\"additionalProperties\": false}}}"

/* Whether the string s is YYYY-MM-DD, a day of the calendar. */
static bool is_date(const char *s)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (strlen(s) != 10 || s[4] != '-' || s[7] != '-')
        return false;
    for (int i = 0; i < 10; i++)
        if (i != 4 && i != 7 && (s[i] < '0' || s[i] > '9'))
            return false;
    int y = atoi(s), m = atoi(s + 5), d = atoi(s + 8);
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1] + (m == 2 && leap);
}

/* String constraints and bounds, n = 3 sampled, completions: each choice's strings are a
 * calendar date, a code of the pattern and a name of 2 to 5 code points, its quantity from 1
 * to 9 (checked here by hand); streamed alike. */
static void test_string_formats(void **state)
{
    (void)state;
    char *texts[3];
    json_t *j = whole_and_streamed("/v1/completions",
                                   "{\"prompt\": \"Once\", \"max_tokens\": 128, "
                                   "\"temperature\": 1, \"seed\": 5, \"n\": 3, " TICKET_FORMAT
                                   ", " CLOSING_BIAS,
                                   texts, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(finish_of(j, i), "stop");
        json_t *v = json_loads(choice_text(j, i, false), 0, NULL);
        const char *due = json_string_value(json_object_get(v, "due"));
        const char *code = json_string_value(json_object_get(v, "code"));
        const char *who = json_string_value(json_object_get(v, "who"));
        if (due == NULL || !is_date(due) || code == NULL || strlen(code) != 6 ||
            strncmp(code, "T-", 2) != 0 || strspn(code + 2, "0123456789abcdef") != 4 ||
            who == NULL)
            fail_msg("not a ticket: %s", choice_text(j, i, false));
        size_t points = 0;
        for (const unsigned char *p = (const unsigned char *)who; *p; p++)
            points += (*p & 0xC0) != 0x80;
        assert_true(points >= 2 && points <= 5);
        json_t *qty = json_object_get(v, "qty");
        assert_true(json_is_integer(qty) && json_integer_value(qty) >= 1 &&
                    json_integer_value(qty) <= 9);
        json_decref(v);
        free(texts[i]);
    }
    json_decref(j);
}

/* llama-server's /completion with its json_schema field: the content is an instance; its
 * grammar field (GBNF, test_server_grammar.c) cannot go beside it. */
static void test_llama_json_schema(void **state)
{
    (void)state;
    response r = graft_test_request(&json_server, "POST", "/completion",
                                    "{\"prompt\": \"Once\", \"n_predict\": 60, "
                                    "\"temperature\": 0, \"json_schema\": {\"type\": "
                                    "\"object\", \"properties\": {\"a\": {\"type\": "
                                    "\"boolean\"}}, \"required\": [\"a\"]}}");
    json_t *j = graft_test_json_of(&r);
    json_t *v = json_loads(json_string_value(json_object_get(j, "content")), 0, NULL);
    assert_true(json_is_object(v) && json_object_size(v) == 1);
    assert_true(json_is_boolean(json_object_get(v, "a")));
    json_decref(v);
    json_decref(j);
    graft_test_response_free(&r);
    r = graft_test_request(&json_server, "POST", "/completion",
                           "{\"prompt\": \"Once\", \"grammar\": \"root ::= \\\"a\\\"\", "
                           "\"json_schema\": {\"type\": \"object\"}}");
    free(graft_test_expect_error(&r, 400, "grammar"));
    graft_test_response_free(&r);
}

/* Two tools: get_weather's parameters the engine follows, get_time's it cannot ("format"). */
#define TOOLS                                                                                 \
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "          \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "  \
    "\"days\": {\"type\": \"integer\"}}, \"required\": [\"city\", \"days\"]}}}, {\"type\": "       \
    "\"function\", \"function\": {\"name\": \"get_time\", \"parameters\": {\"type\": "          \
    "\"object\", \"properties\": {\"tz\": {\"type\": \"string\", \"format\": \"tz\"}}}}}]"

/* The one tool call of a whole chat answer: its function's name, and its arguments parsed
 * (content null, finish reason "tool_calls"). */
static json_t *the_call(json_t *answer, const char **name)
{
    json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")),
                        "tool_calls");
    json_t *msg = json_object_get(choice, "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    *name = json_string_value(json_object_get(fn, "name"));
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    assert_true(json_is_object(args));
    return args;
}

/* tool_choice naming a function, or "required": the answer is one call of that function (of
 * one of the tools), its arguments held to the parameters the engine can follow, whole and
 * streamed alike; a strict tool whose parameters it cannot follow, an unknown name, a
 * forced call without tools or with a response format are refused. */
static void test_forced_tool_calls(void **state)
{
    (void)state;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], "
                       "\"max_tokens\": %d, \"temperature\": 0, " TOOLS ", " CLOSING_BIAS ", "
                       "\"tool_choice\": %s%s}";
    const char *choices[] = {"{\"type\": \"function\", \"function\": {\"name\": "
                             "\"get_weather\"}}",
                             "\"required\""};
    for (int k = 0; k < 2; k++) {
        char whole[2048], streamed[2048];
        snprintf(whole, sizeof whole, body, 96, choices[k], "");
        snprintf(streamed, sizeof streamed, body, 96, choices[k], ", \"stream\": true");
        response r = graft_test_request(&json_server, "POST", "/v1/chat/completions", whole);
        json_t *j = graft_test_json_of(&r);
        const char *name;
        json_t *args = the_call(j, &name);
        if (k == 0)
            assert_string_equal(name, "get_weather");
        /* each tool's call holds to its own parameters (told apart by the name) */
        assert_true(strcmp(name, "get_weather") == 0 || strcmp(name, "get_time") == 0);
        if (strcmp(name, "get_weather") == 0) {
            assert_true(json_is_string(json_object_get(args, "city")));
            assert_true(json_is_integer(json_object_get(args, "days")));
            assert_int_equal(json_object_size(args), 2);
        } else {
            assert_true(json_is_object(args));
        }
        /* streamed: the same call in a delta, no content */
        response st = graft_test_request(&json_server, "POST", "/v1/chat/completions", streamed);
        json_t *call = json_array_get(json_object_get(json_object_get(
                           json_array_get(json_object_get(j, "choices"), 0), "message"),
                                                      "tool_calls"), 0);
        char *fn = json_dumps(json_object_get(call, "function"), JSON_COMPACT);
        assert_non_null(strstr(st.body, fn + 1)); /* the function object's members */
        assert_null(strstr(st.body, "<tool_call>"));
        free(fn);
        json_decref(args);
        json_decref(j);
        graft_test_response_free(&r);
        graft_test_response_free(&st);
    }
    /* cut short, the call's text is content, once */
    char cut[2048];
    snprintf(cut, sizeof cut, body, 4, "\"required\"", "");
    response r = graft_test_request(&json_server, "POST", "/v1/chat/completions", cut);
    json_t *j = graft_test_json_of(&r);
    assert_string_equal(finish_of(j, 0), "length");
    const char *content = choice_text(j, 0, true);
    const char *open = strstr(content, "<tool_call>");
    assert_true(open == content && strstr(open + 1, "<tool_call>") == NULL);
    json_decref(j);
    graft_test_response_free(&r);
    static const struct {
        const char *tools, *choice, *param;
    } refused[] = {
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": "
         "true, \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
         "\"string\", \"pattern\": \"(?=x)\"}}}}}]",
         "\"required\"", "tools[0].function.parameters"},
        {TOOLS, "{\"type\": \"function\", \"function\": {\"name\": \"nope\"}}",
         "tool_choice.function.name"},
        {"\"tools\": []", "\"required\"", "tool_choice"},
        {TOOLS ", \"response_format\": {\"type\": \"json_object\"}", "\"required\"",
         "tool_choice"},
        {TOOLS ", \"parallel_tool_calls\": 1", "\"auto\"", "parallel_tool_calls"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char b[2048];
        snprintf(b, sizeof b, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s, "
                 "\"tool_choice\": %s}", refused[i].tools, refused[i].choice);
        response r = graft_test_request(&json_server, "POST", "/v1/chat/completions", b);
        free(graft_test_expect_error(&r, 400, refused[i].param));
        graft_test_response_free(&r);
    }
}

/* max_tokens cuts an object short: "length", and the text is where it was cut. */
static void test_json_cut_by_length(void **state)
{
    (void)state;
    response r = graft_test_request(&json_server, "POST", "/v1/completions",
                                    "{\"prompt\": \"Once\", \"max_tokens\": 4, \"temperature\": "
                                    "0, " AS_JSON_OBJECT "}");
    json_t *j = graft_test_json_of(&r);
    assert_string_equal(finish_of(j, 0), "length");
    assert_non_null(strchr(choice_text(j, 0, false), '{'));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                        "completion_tokens")),
                     4);
    json_decref(j);
    graft_test_response_free(&r);
}

static void test_bad_formats(void **state)
{
    (void)state;
    static const struct {
        const char *format, *param, *words;
    } cases[] = {
        {"{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": "
         "\"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": \"ipv6\"}}}}}",
         "response_format.json_schema.schema", "'format' ipv6 is not supported"},
        {"{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": "
         "\"string\"}}}",
         "response_format.json_schema.schema", "root"},
        {"{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}",
         "response_format.json_schema.schema", "schema"},
        {"{\"type\": \"xml\"}", "response_format.type", "xml"},
        {"\"json\"", "response_format", "object"},
        {"{}", "response_format", "type"},
        {"{\"type\": \"json_object\"}, \"json_schema\": {\"type\": \"object\"}", "json_schema",
         "both"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\": \"x\", \"response_format\": %s}",
                 cases[i].format);
        response r = graft_test_request(&json_server, "POST", "/v1/completions", body);
        char *message = graft_test_expect_error(&r, 400, cases[i].param);
        if (strstr(message, cases[i].words) == NULL)
            fail_msg("'%s' does not say '%s'", message, cases[i].words);
        free(message);
        graft_test_response_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completions_json_object),
        cmocka_unit_test(test_chat_json_object),
        cmocka_unit_test(test_json_schema_answers),
        cmocka_unit_test(test_string_formats),
        cmocka_unit_test(test_llama_json_schema),
        cmocka_unit_test(test_forced_tool_calls),
        cmocka_unit_test(test_json_cut_by_length),
        cmocka_unit_test(test_bad_formats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
