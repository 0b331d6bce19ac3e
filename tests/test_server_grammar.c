/*
 * test_server_grammar.c: llama-server's `grammar` field (GBNF) through `graft serve`, the real
 * binary on stories260K, spoken to with libcurl.
 *
 * Checked with the oracle of tests/support/gbnf_oracle.c (an Earley recognizer written apart
 * from the engine's): on POST /completion, /v1/completions (n = 2) and /v1/chat/completions,
 * an answer that stops is a whole match of the grammar and one cut by max_tokens the
 * beginning of one; streamed, the chunks add up to the whole answer; asked again, the answer
 * comes from the prefix cache with the same text; the same request without the grammar gives
 * text the grammar refuses (it is not ignored), and an empty grammar is none. A text that no
 * token can continue is a 500 saying so (an event in a stream); bad grammars and grammars
 * beside another output format are a 400 naming the field, with the line and column.
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

#include "gbnf_fixtures.h"
#include "graft.h"
#include "serve_client.h"

/* A story's first sentence, and a phone number (which stories never hold). */
#define SENTENCE "root ::= (\"Lily\" | \"Tom\") \" \" [a-z]+ (\" \" [a-z]+){1,6} \".\"\n"
#define PHONE "root ::= [0-9]{3} \"-\" [0-9]{4}\n"

static server grammar_server;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", NULL};
    grammar_server = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&grammar_server);
}

/* text by the oracle: a whole match when the answer stopped, else a match's beginning. */
static void expect_match(const gbnf_oracle *o, const char *text, bool stopped)
{
    bool ok = stopped ? gbnf_oracle_matches(o, text, strlen(text))
                      : gbnf_oracle_viable_prefix(o, text, strlen(text));
    if (!ok)
        fail_msg("%s \"%s\" is not %s of the grammar", stopped ? "stopped" : "cut", text,
                 stopped ? "a match" : "the beginning of a match");
}

/* A body with the grammar as a JSON string field beside `fields` (a JSON object's members). */
static char *body_with_grammar(const char *grammar, const char *fields)
{
    json_t *body = graft_test_parse(fields);
    json_object_set_new(body, "grammar", json_string(grammar));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

/* POST /completion, whole and streamed, with the grammar: the same content either way, right
 * by the oracle; returns the whole answer's JSON. */
static json_t *completion(const gbnf_oracle *o, const char *grammar, const char *fields)
{
    char *body = body_with_grammar(grammar, fields);
    response whole = graft_test_request(&grammar_server, "POST", "/completion", body);
    json_t *j = graft_test_json_of(&whole);
    assert_int_equal(whole.status, 200);
    const char *content = json_string_value(json_object_get(j, "content"));
    const char *stop_type = json_string_value(json_object_get(j, "stop_type"));
    assert_non_null(content);
    expect_match(o, content, strcmp(stop_type, "limit") != 0);
    json_t *streamed_body = graft_test_parse(body);
    json_object_set_new(streamed_body, "stream", json_true());
    char *text = json_dumps(streamed_body, JSON_COMPACT);
    response streamed = graft_test_request(&grammar_server, "POST", "/completion", text);
    json_t *events = graft_test_data_events(&streamed);
    size_t len = 0;
    char joined[4096] = "";
    for (size_t i = 0; i < json_array_size(events); i++) {
        const char *piece = json_string_value(json_object_get(json_array_get(events, i),
                                                              "content"));
        size_t n = piece ? strlen(piece) : 0;
        assert_true(len + n < sizeof joined);
        memcpy(joined + len, piece ? piece : "", n + 1);
        len += n;
    }
    assert_string_equal(joined, content);
    json_decref(events);
    graft_test_response_free(&streamed);
    free(text);
    json_decref(streamed_body);
    graft_test_response_free(&whole);
    free(body);
    return j;
}

static void test_completion_follows_the_grammar(void **state)
{
    (void)state;
    gbnf_oracle *o = gbnf_test_oracle(SENTENCE);
    int stopped = 0;
    for (int seed = 1; seed <= 4; seed++) {
        char fields[256];
        snprintf(fields, sizeof fields,
                 "{\"prompt\": \"Once upon a time\", \"n_predict\": 40, \"temperature\": 1, "
                 "\"seed\": %d}", seed);
        json_t *first = completion(o, SENTENCE, fields);
        json_t *again = completion(o, SENTENCE, fields);
        assert_string_equal(json_string_value(json_object_get(first, "content")),
                            json_string_value(json_object_get(again, "content")));
        json_t *graft = json_object_get(again, "graft");
        assert_string_equal(json_string_value(json_object_get(graft, "source")), "cache");
        stopped += strcmp(json_string_value(json_object_get(first, "stop_type")), "eos") == 0;
        json_decref(first);
        json_decref(again);
    }
    assert_true(stopped >= 2);
    gbnf_oracle_free(o);
}

/* The OpenAI endpoints: each choice right by the oracle. */
static void test_openai_endpoints_follow_the_grammar(void **state)
{
    (void)state;
    gbnf_oracle *o = gbnf_test_oracle(SENTENCE);
    static const struct {
        const char *path, *fields;
    } cases[] = {
        {"/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"n\": 2, "
                            "\"seed\": 3}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me "
                                 "a story\"}], \"max_tokens\": 40, \"seed\": 5}"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bool chat = strstr(cases[k].path, "chat") != NULL;
        char *body = body_with_grammar(SENTENCE, cases[k].fields);
        response r = graft_test_request(&grammar_server, "POST", cases[k].path, body);
        json_t *j = graft_test_json_of(&r);
        assert_int_equal(r.status, 200);
        json_t *choices = json_object_get(j, "choices");
        assert_int_equal(json_array_size(choices), chat ? 1 : 2);
        for (size_t i = 0; i < json_array_size(choices); i++) {
            json_t *c = json_array_get(choices, i);
            const char *text = chat ? json_string_value(json_object_get(
                                          json_object_get(c, "message"), "content"))
                                    : json_string_value(json_object_get(c, "text"));
            const char *finish = json_string_value(json_object_get(c, "finish_reason"));
            assert_non_null(text);
            expect_match(o, text, strcmp(finish, "stop") == 0);
        }
        json_decref(j);
        graft_test_response_free(&r);
        free(body);
    }
    gbnf_oracle_free(o);
}

/* Without the grammar the model writes story text; with it, a phone number; an empty grammar
 * is none. */
static void test_grammar_is_not_ignored(void **state)
{
    (void)state;
    gbnf_oracle *o = gbnf_test_oracle(PHONE);
    const char *fields = "{\"prompt\": \"Once upon a time\", \"n_predict\": 12, "
                         "\"temperature\": 0}";
    response plain = graft_test_request(&grammar_server, "POST", "/completion", fields);
    json_t *p = graft_test_json_of(&plain);
    const char *story = json_string_value(json_object_get(p, "content"));
    assert_false(gbnf_oracle_viable_prefix(o, story, strlen(story)));
    json_t *held = completion(o, PHONE, fields);
    assert_string_equal(json_string_value(json_object_get(held, "stop_type")), "eos");
    assert_int_equal(strlen(json_string_value(json_object_get(held, "content"))), 8);
    char *body = body_with_grammar("", fields);
    response empty = graft_test_request(&grammar_server, "POST", "/completion", body);
    json_t *e = graft_test_json_of(&empty);
    assert_string_equal(json_string_value(json_object_get(e, "content")), story);
    free(body);
    json_decref(e);
    json_decref(held);
    json_decref(p);
    graft_test_response_free(&empty);
    graft_test_response_free(&plain);
    gbnf_oracle_free(o);
}

/* A text no token can continue: the whole answer is a 500, a stream ends with an error event. */
static void test_dead_end_says_so(void **state)
{
    (void)state;
    char *body = body_with_grammar("root ::= [a-z] []\n",
                                   "{\"prompt\": \"Once\", \"max_tokens\": 8}");
    response r = graft_test_request(&grammar_server, "POST", "/v1/completions", body);
    char *message = graft_test_expect_error(&r, 500, NULL);
    assert_non_null(strstr(message, "no token of the vocabulary can continue the grammar"));
    free(message);
    graft_test_response_free(&r);
    free(body);
    body = body_with_grammar("root ::= [a-z] []\n",
                             "{\"prompt\": \"Once\", \"max_tokens\": 8, \"stream\": true}");
    r = graft_test_request(&grammar_server, "POST", "/v1/completions", body);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "can continue the grammar"));
    graft_test_response_free(&r);
    free(body);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *path, *body, *message;
    } cases[] = {
        {"/completion", "{\"prompt\": \"a\", \"grammar\": \"root ::= item\\n\"}",
         "grammar: line 1, column 10: rule 'item' is used but not defined"},
        {"/v1/completions", "{\"prompt\": \"a\", \"grammar\": \"root ::= [a-\"}",
         "line 1, column 10: the class is not closed"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                                 "\"grammar\": \"root ::= \\\"x\\\" <[7]>\"}",
         "token references"},
        {"/completion", "{\"prompt\": \"a\", \"grammar\": 7}", "'grammar' must be a string"},
        {"/v1/completions", "{\"prompt\": \"a\", \"grammar\": \"root ::= \\\"x\\\"\", "
                            "\"response_format\": {\"type\": \"json_object\"}}",
         "'grammar' cannot go with 'response_format' or 'json_schema'"},
        {"/completion", "{\"prompt\": \"a\", \"grammar\": \"root ::= \\\"x\\\"\", "
                        "\"json_schema\": {\"type\": \"object\"}}",
         "'grammar' cannot go with"},
        {"/v1/chat/completions",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"grammar\": \"root ::= "
         "\\\"x\\\"\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
         "\"parameters\": {\"type\": \"object\"}}}], \"tool_choice\": \"required\"}",
         "a forced tool call's output is the call"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        response r = graft_test_request(&grammar_server, "POST", cases[i].path, cases[i].body);
        char *message = graft_test_expect_error(&r, 400, "grammar");
        if (strstr(message, cases[i].message) == NULL)
            fail_msg("case %zu: \"%s\", expected \"%s\"", i, message, cases[i].message);
        free(message);
        graft_test_response_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_follows_the_grammar),
        cmocka_unit_test(test_openai_endpoints_follow_the_grammar),
        cmocka_unit_test(test_grammar_is_not_ignored),
        cmocka_unit_test(test_dead_end_says_so),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
