/*
 * test_server_reasoning.c: a thinking model's thought split off its chat answer, checked
 * against a reference of the rules that reads each text whole.
 *
 * Written from the specification alone, without reading the implementation (reasoning.c,
 * response.c, completion.c, responses.c, request.c): the reference below is the test's own
 * reading of the rules. A text T (cut at its first stop string) begins a thought at byte 0
 * when the prompt opened one, else right after the opening tag when T starts with it past
 * white space; the thought ends at the first closing tag, the content begins after the tag
 * and the white space after it (empty when the tag never comes), and reasoning_content is
 * the thought stripped (no field when that is empty). With tools, the content's Hermes
 * blocks are tool calls; without tags, all the text is content.
 *
 * A choice is driven as the server drives it (test_server_choices.c builds one the same
 * way): the text arrives as tokens, each stream step releases what may go out and sends it
 * as a delta. Every text is checked whole, streamed as one token, cut in two at every byte,
 * a byte a token, and in random tokens: the deltas must add up to the whole message, and
 * nothing given out may later turn out to be a tag or stripped white space. Hand cases
 * cover each rule; a seeded generator (GRAFT_TEST_SEED overrides the seed) builds texts
 * from tags, parts of tags, white space, words, tool calls and stop strings. The prompt's
 * side (which tags a template writes, a prompt that opened a thought, closing it) and the
 * request's (reasoning_format; JSON output after an opened thought, or after one the model
 * may open; a forced call closing an opened thought first) are checked too.
 *
 * A disagreement does not stop a test: each is counted by kind, the first two of a kind are
 * printed (the case as C literals, the expected and the got), and the test fails at its end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "graft.h"
#include "server/completion.h"

/* ---- the reference ------------------------------------------------------------------------ */

static const graft__reasoning_tags THINK = {"<think>", "</think>"};
static const graft__reasoning_tags COMMAND_R = {"<|START_THINKING|>", "<|END_THINKING|>"};

/* The tool calls the texts hold: Hermes blocks with the call each parses into. */
static const struct block {
    const char *text, *name, *arguments;
} BLOCKS[] = {
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
     "</tool_call>",
     "get_weather", "{\"city\": \"Paris\"}"},
    {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "get_time", "{}"},
};
enum { N_BLOCKS = sizeof BLOCKS / sizeof BLOCKS[0], MAX_CALLS = 8, MAX_STOPS = 2 };

/* What a choice is given: its generated text, and the request's side of the split. */
typedef struct split_case {
    const char *text;
    const graft__reasoning_tags *tags; /* NULL: not split */
    bool opened;                       /* the prompt opened the thought */
    bool tools;
    char *stops[MAX_STOPS];
    size_t n_stops;
} split_case;

/* The reference's answer for a case. */
typedef struct expect {
    size_t len;          /* the text cut at its first stop string */
    size_t stop_end;     /* where that stop string's first occurrence ends (SIZE_MAX: none) */
    bool thought;        /* there is a thought ... */
    bool closed;         /* ... and its closing tag came */
    size_t content;      /* the content's first byte (0 without a thought, len when no tag
                            closed it) */
    size_t content_to;   /* the content is text[content, content_to): up to the first call */
    size_t reasoning_from, reasoning_to; /* reasoning_content (none when empty) */
    size_t n_calls;
    size_t calls[MAX_CALLS]; /* indexes in BLOCKS */
} expect;

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
}

/* The first occurrence of needle in text[from, len), or len when none. */
static size_t find(const char *text, size_t len, size_t from, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = from; i + n <= len; i++)
        if (memcmp(text + i, needle, n) == 0)
            return i;
    return len;
}

static bool starts_with(const char *text, size_t len, size_t at, const char *prefix)
{
    size_t n = strlen(prefix);
    return at + n <= len && memcmp(text + at, prefix, n) == 0;
}

/* The rules applied to k's whole text. False when its content holds a tool call followed by
 * what is not one (the rules do not say what that is), which the random part skips. */
static bool reference(const split_case *k, expect *e)
{
    const char *t = k->text;
    size_t full = strlen(t);
    *e = (expect){.len = full, .stop_end = SIZE_MAX};
    for (size_t s = 0; s < k->n_stops; s++) {
        size_t at = find(t, full, 0, k->stops[s]);
        if (at < e->len) {
            e->len = at;
            e->stop_end = at + strlen(k->stops[s]);
        }
    }
    size_t len = e->len;
    e->content_to = len;
    if (k->tags != NULL) {
        size_t begin = 0;
        e->thought = k->opened;
        if (!k->opened) {
            while (begin < len && is_space(t[begin]))
                begin++;
            e->thought = starts_with(t, len, begin, k->tags->open);
            begin += strlen(k->tags->open);
        }
        if (e->thought) {
            size_t end = find(t, len, begin, k->tags->close);
            e->closed = end < len;
            e->content = len;
            if (e->closed) {
                e->content = end + strlen(k->tags->close);
                while (e->content < len && is_space(t[e->content]))
                    e->content++;
            }
            while (begin < end && is_space(t[begin]))
                begin++;
            while (end > begin && is_space(t[end - 1]))
                end--;
            e->reasoning_from = begin;
            e->reasoning_to = end;
        }
    }
    if (!k->tools)
        return true;
    size_t at = find(t, len, e->content, "<tool_call>");
    e->content_to = at;
    while (at < len) {
        if (is_space(t[at])) {
            at++;
            continue;
        }
        size_t b = 0;
        while (b < N_BLOCKS && !starts_with(t, len, at, BLOCKS[b].text))
            b++;
        if (b == N_BLOCKS || e->n_calls == MAX_CALLS)
            return false;
        e->calls[e->n_calls++] = b;
        at += strlen(BLOCKS[b].text);
    }
    return true;
}

/* The reasoning tokens of tokens starting at starts[0, n): those before the content. */
static size_t reference_tokens(const expect *e, const size_t *starts, size_t n)
{
    if (!e->thought)
        return 0;
    if (!e->closed)
        return n;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += starts[i] < e->content;
    return count;
}

/* ---- reporting ---------------------------------------------------------------------------- */

static void print_case(const split_case *k, const size_t *ends, size_t n_ends)
{
    print_error("case: tags %s, opened %d, tools %d, text ",
                k->tags == NULL ? "NULL" : k->tags->open, k->opened, k->tools);
    graft_test_print_literal((const uint8_t *)k->text, strlen(k->text));
    for (size_t s = 0; s < k->n_stops; s++) {
        print_error(", stop ");
        graft_test_print_literal((const uint8_t *)k->stops[s], strlen(k->stops[s]));
    }
    if (ends != NULL) {
        print_error(", tokens ending at");
        for (size_t i = 0; i < n_ends; i++)
            print_error(" %zu", ends[i]);
    }
    print_error("\n");
}

/* Disagreements: counted by kind (`what`, a static string), the first MAX_PRINTED of each
 * kind printed; a test with any fails at its end. Within one check (a stream, a whole
 * message) only the first counts: what follows it is its consequence. */
enum { MAX_PRINTED = 2, MAX_KINDS = 16 };
static struct {
    const char *what;
    size_t count;
} kinds[MAX_KINDS];
static size_t n_kinds;
static bool check_failed;

static void disagree(const split_case *k, const size_t *ends, size_t n_ends, const char *what,
                     const char *want, size_t want_len, const char *got, size_t got_len)
{
    if (check_failed)
        return;
    check_failed = true;
    size_t i = 0;
    while (i < n_kinds && kinds[i].what != what)
        i++;
    if (i == n_kinds && n_kinds < MAX_KINDS)
        kinds[n_kinds++].what = what;
    if (i < n_kinds && kinds[i].count++ >= MAX_PRINTED)
        return;
    print_case(k, ends, n_ends);
    print_error("%s: expected ", what);
    graft_test_print_literal((const uint8_t *)(want ? want : "(none)"),
                             want ? want_len : strlen("(none)"));
    print_error(", got ");
    graft_test_print_literal((const uint8_t *)(got ? got : "(none)"),
                             got ? got_len : strlen("(none)"));
    print_error("\n");
}

/* Ends a test: fails it when there were disagreements, after their count by kind. */
static void end_test(void)
{
    size_t total = 0;
    for (size_t i = 0; i < n_kinds; i++) {
        print_error("%zu disagreements: %s\n", kinds[i].count, kinds[i].what);
        total += kinds[i].count;
    }
    n_kinds = 0;
    if (total > 0)
        fail_msg("%zu checks disagree with the specification", total);
}

static void disagree_count(const split_case *k, const size_t *ends, size_t n_ends,
                           const char *what, size_t want, size_t got)
{
    char w[32], g[32];
    snprintf(w, sizeof w, "%zu", want);
    snprintf(g, sizeof g, "%zu", got);
    disagree(k, ends, n_ends, what, w, strlen(w), g, strlen(g));
}

/* ---- a choice driven as the server drives it --------------------------------------------- */

static graft__server_config config = {.alias = "m"};
static graft__server_ctx ctx = {.config = &config};

/* A chat completion of one choice for k, with room for n_tokens tokens, its split started. */
static completion *new_completion(const split_case *k, size_t n_tokens)
{
    completion *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->ctx = &ctx;
    c->req.chat = true;
    c->req.tools = k->tools;
    c->req.thought_tags = k->tags;
    c->req.thought_opened = k->opened;
    for (size_t s = 0; s < k->n_stops; s++)
        c->req.stop[s] = k->stops[s];
    c->req.n_stop = k->n_stops;
    snprintf(c->id, sizeof c->id, "chatcmpl-r");
    c->n_choices = 1;
    choice *ch = &c->choices[0];
    *ch = (choice){.c = c, .calls = json_array()};
    ch->token_start = calloc(n_tokens > 0 ? n_tokens : 1, sizeof *ch->token_start);
    assert_non_null(ch->token_start);
    ch->cap_tokens = n_tokens;
    graft__reasoning_start(&ch->thought, k->tags, k->opened);
    return c;
}

static void free_completion(completion *c)
{
    choice *ch = &c->choices[0];
    free(ch->text);
    free(ch->token_start);
    json_decref(ch->calls);
    free(c);
}

/* Appends text[0, n) to the choice as its next token. */
static void feed(choice *ch, const char *text, size_t n)
{
    char *grown = realloc(ch->text, ch->len + n + 1);
    assert_non_null(grown);
    ch->text = grown;
    memcpy(ch->text + ch->len, text, n);
    ch->text[ch->len + n] = '\0';
    ch->token_start[ch->n_tokens++] = ch->len;
    ch->len += n;
    ch->cap = ch->len + 1;
}

/* The kind of a disagreement on reasoning tokens: those of a thought that never closed
 * include a token that begins at the cut text's end or after it (the stop string's), or
 * not. */
static const char *tokens_what(const expect *e, const choice *ch)
{
    for (size_t i = 0; e->thought && !e->closed && i < ch->n_tokens; i++)
        if (ch->token_start[i] >= e->len)
            return "reasoning tokens (a thought never closed, a token at or past its end)";
    return "reasoning tokens";
}

/* A stream under way: its case, the reference's answer, and how much of the expected
 * reasoning_content and content the deltas gave so far. */
typedef struct stream {
    const split_case *k;
    const expect *e;
    const size_t *ends;
    size_t n_ends;
    size_t upto;
    size_t reasoning, content;
} stream;

/* Takes a delta's field `key`: it must go on the expected value want[0, want_len). */
static void take(stream *s, const json_t *delta, const char *key, const char *want,
                 size_t want_len, size_t *got)
{
    const json_t *v = json_object_get(delta, key);
    if (v == NULL || json_is_null(v))
        return;
    const char *what = strcmp(key, "content") == 0 ? "a delta's content (the rest expected)"
                                                   : "a delta's reasoning_content (the rest "
                                                     "expected)";
    if (!json_is_string(v)) {
        disagree(s->k, s->ends, s->n_ends, what, want + *got, want_len - *got, "(not a string)",
                 strlen("(not a string)"));
        return;
    }
    const char *piece = json_string_value(v);
    size_t n = json_string_length(v);
    if (n > want_len - *got || memcmp(want + *got, piece, n) != 0)
        disagree(s->k, s->ends, s->n_ends, what, want + *got, want_len - *got, piece, n);
    else
        *got += n;
}

static void take_delta(stream *s, json_t *j)
{
    const char *t = s->k->text;
    const json_t *delta = json_object_get(j, "delta");
    assert_non_null(delta);
    take(s, delta, "reasoning_content", t + s->e->reasoning_from,
         s->e->reasoning_to - s->e->reasoning_from, &s->reasoning);
    take(s, delta, "content", t + s->e->content, s->e->content_to - s->e->content, &s->content);
    json_decref(j);
}

/* One stream step, as the server takes it. */
static void step(stream *s, completion *c, choice *ch)
{
    s->upto = graft__choice_release(ch);
    if (ch->done && (!c->req.tools || ch->calls_bad))
        s->upto = ch->len;
    take_delta(s, graft__choice_json(c, ch, ch->sent, s->upto, true, false));
    if (s->upto > ch->sent)
        ch->sent = s->upto;
}

static size_t streams_checked, steps_checked, wholes_checked;

/* Streams k's text as the tokens ending at ends[0, n) (the last at the text's end) and
 * checks every delta and the reasoning tokens against e. */
static void check_stream(const split_case *k, const expect *e, const size_t *ends, size_t n)
{
    check_failed = false;
    completion *c = new_completion(k, n);
    choice *ch = &c->choices[0];
    stream s = {.k = k, .e = e, .ends = ends, .n_ends = n};
    size_t fed = 0;
    for (size_t i = 0; i < n && !ch->stopped; i++) {
        feed(ch, k->text + fed, ends[i] - fed);
        fed = ends[i];
        step(&s, c, ch);
        steps_checked++;
        if (ch->stopped != (fed >= e->stop_end))
            disagree_count(k, ends, n, "ch->stopped after a token", fed >= e->stop_end,
                           ch->stopped);
    }
    if (ch->len != e->len)
        disagree_count(k, ends, n, "the text's length after its stop string", e->len, ch->len);
    ch->done = true;
    if (k->tools)
        graft__choice_settle_tools(ch);
    step(&s, c, ch);
    take_delta(&s, graft__choice_json(c, ch, s.upto, s.upto, true, true));
    size_t reasoning_len = e->reasoning_to - e->reasoning_from;
    if (s.reasoning != reasoning_len)
        disagree(k, ends, n, "the deltas' reasoning_content in all", k->text + e->reasoning_from,
                 reasoning_len, k->text + e->reasoning_from, s.reasoning);
    if (s.content != e->content_to - e->content)
        disagree(k, ends, n, "the deltas' content in all", k->text + e->content,
                 e->content_to - e->content, k->text + e->content, s.content);
    size_t tokens = reference_tokens(e, ch->token_start, ch->n_tokens);
    if (graft__thought_tokens(c) != tokens)
        disagree_count(k, ends, n, tokens_what(e, ch), tokens, graft__thought_tokens(c));
    free_completion(c);
    streams_checked++;
}

/* A message's field as text (its bytes in *len): its string, "(none)" when absent, "(not a
 * string)" otherwise. */
static const char *field_text(const json_t *v, size_t *len)
{
    const char *s = v == NULL            ? "(none)"
                    : json_is_string(v) ? json_string_value(v)
                                        : "(not a string)";
    *len = json_is_string(v) ? json_string_length(v) : strlen(s);
    return s;
}

/* Whether v is the string want[0, want_len). */
static bool same(const json_t *v, const char *want, size_t want_len)
{
    return json_is_string(v) && json_string_length(v) == want_len &&
           memcmp(json_string_value(v), want, want_len) == 0;
}

/* The whole (non-stream) message of k's text against e. */
static void check_whole(const split_case *k, const expect *e)
{
    check_failed = false;
    completion *c = new_completion(k, 1);
    choice *ch = &c->choices[0];
    feed(ch, k->text, strlen(k->text));
    ch->done = true;
    graft__choice_release(ch);
    if (k->tools)
        graft__choice_settle_tools(ch);
    json_t *j = graft__choice_json(c, ch, 0, k->tools ? ch->content_end : ch->len, false, true);
    const json_t *msg = json_object_get(j, "message");
    assert_non_null(msg);

    const json_t *r = json_object_get(msg, "reasoning_content");
    size_t reasoning_len = e->reasoning_to - e->reasoning_from;
    size_t got_len;
    const char *got = field_text(r, &got_len);
    if (reasoning_len == 0 ? r != NULL : !same(r, k->text + e->reasoning_from, reasoning_len))
        disagree(k, NULL, 0, "the message's reasoning_content",
                 reasoning_len ? k->text + e->reasoning_from : NULL, reasoning_len, got,
                 got_len);

    const json_t *content = json_object_get(msg, "content");
    size_t content_len = e->content_to - e->content;
    got = field_text(content, &got_len);
    /* no content before a call may also be null, as OpenAI gives it */
    if (!same(content, k->text + e->content, content_len) &&
        !(content_len == 0 && e->n_calls > 0 && json_is_null(content)))
        disagree(k, NULL, 0, "the message's content", k->text + e->content, content_len, got,
                 got_len);

    const json_t *calls = json_object_get(msg, "tool_calls");
    if (json_array_size(calls) != e->n_calls)
        disagree_count(k, NULL, 0, "tool calls", e->n_calls, json_array_size(calls));
    for (size_t i = 0; i < e->n_calls; i++) {
        const struct block *b = &BLOCKS[e->calls[i]];
        const json_t *fn = json_object_get(json_array_get(calls, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (name == NULL || strcmp(name, b->name) != 0)
            disagree(k, NULL, 0, "a call's name", b->name, strlen(b->name), name,
                     name ? strlen(name) : 0);
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *want_args = json_loads(b->arguments, 0, NULL);
        json_t *got_args = args ? json_loads(args, 0, NULL) : NULL;
        if (!json_equal(want_args, got_args))
            disagree(k, NULL, 0, "a call's arguments", b->arguments, strlen(b->arguments), args,
                     args ? strlen(args) : 0);
        json_decref(want_args);
        json_decref(got_args);
    }
    size_t tokens = reference_tokens(e, ch->token_start, ch->n_tokens);
    if (graft__thought_tokens(c) != tokens)
        disagree_count(k, NULL, 0, tokens_what(e, ch), tokens, graft__thought_tokens(c));
    json_decref(j);
    free_completion(c);
    wholes_checked++;
}

enum { MAX_TEXT = 400, RANDOM_SPLITS = 3 };

/* Checks k whole, and streamed: as one token, in two at every byte, a byte a token, and in
 * RANDOM_SPLITS random tokens of 1 to 6 bytes. */
static void check_case(const split_case *k, const expect *e)
{
    size_t len = strlen(k->text);
    assert_true(len < MAX_TEXT);
    size_t ends[MAX_TEXT];
    check_whole(k, e);
    ends[0] = len;
    check_stream(k, e, ends, 1);
    if (len == 0)
        return;
    for (size_t cut = 1; cut < len; cut++) {
        ends[0] = cut;
        ends[1] = len;
        check_stream(k, e, ends, 2);
    }
    for (size_t i = 0; i < len; i++)
        ends[i] = i + 1;
    check_stream(k, e, ends, len);
    for (int r = 0; r < RANDOM_SPLITS; r++) {
        size_t n = 0;
        for (size_t at = 0; at < len; n++) {
            at += 1 + graft_test_below(6);
            ends[n] = at < len ? at : len;
            at = ends[n];
        }
        check_stream(k, e, ends, n);
    }
}

/* ---- hand cases ---------------------------------------------------------------------------- */

#define WEATHER                                                                            \
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"     \
    "</tool_call>"
#define TIME "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"

/* A case's split_case: plain, with tools, with n stop strings (and tools when `calls`). */
#define SPLIT(t, g, o) {.text = (t), .tags = (g), .opened = (o)}
#define TOOLS(t, g, o) {.text = (t), .tags = (g), .opened = (o), .tools = true}
#define STOPPED(t, g, o, calls, n, ...)                                                    \
    {.text = (t), .tags = (g), .opened = (o), .tools = (calls), .stops = {__VA_ARGS__},    \
     .n_stops = (n)}

typedef struct hand_case {
    split_case k;
    const char *reasoning; /* NULL: no reasoning_content */
    const char *content;
    size_t n_calls;
} hand_case;

static const hand_case HAND[] = {
    /* rule 1: where the thought begins */
    {SPLIT("<think>\nI ponder.\n</think>\n\nHello!", &THINK, false), "I ponder.", "Hello!", 0},
    {SPLIT("I ponder.\n</think>\n\nHello!", &THINK, true), "I ponder.", "Hello!", 0},
    {SPLIT(" \n\t\r<think>x</think>y", &THINK, false), "x", "y", 0},
    {SPLIT("  Hello <think>x</think>", &THINK, false), NULL, "  Hello <think>x</think>", 0},
    {SPLIT("\n\n  Hello", &THINK, false), NULL, "\n\n  Hello", 0},
    {SPLIT("\n  idea\r\n</think>ok", &THINK, true), "idea", "ok", 0},
    {SPLIT("<think>a</think>b", &THINK, true), "<think>a", "b", 0},
    /* white space only */
    {SPLIT(" \n\t\r ", &THINK, false), NULL, " \n\t\r ", 0},
    {SPLIT(" \n\t\r ", &THINK, true), NULL, "", 0},
    {SPLIT("", &THINK, false), NULL, "", 0},
    {SPLIT("", &THINK, true), NULL, "", 0},
    /* a part of the opening tag at the end */
    {SPLIT("<thi", &THINK, false), NULL, "<thi", 0},
    {SPLIT("  <thi", &THINK, false), NULL, "  <thi", 0},
    {SPLIT("<thi", &THINK, true), "<thi", "", 0},
    {SPLIT("<think", &THINK, false), NULL, "<think", 0},
    {SPLIT("<think>", &THINK, false), NULL, "", 0},
    {SPLIT("<thinking>x</think>y", &THINK, false), NULL, "<thinking>x</think>y", 0},
    /* rule 2: where it ends */
    {SPLIT("<think>a<think>b</think>c</think>d", &THINK, false), "a<think>b", "c</think>d", 0},
    {SPLIT("<think>still thinking", &THINK, false), "still thinking", "", 0},
    {SPLIT("<think>still </think", &THINK, false), "still </think", "", 0},
    {SPLIT("<think>x</think>", &THINK, false), "x", "", 0},
    {SPLIT("<think>x</think> \n\t", &THINK, false), "x", "", 0},
    {SPLIT("<think>x</think>  b  ", &THINK, false), "x", "b  ", 0},
    {SPLIT("<think></think>", &THINK, false), NULL, "", 0},
    {SPLIT("<think>\n\n</think>\n\nHi", &THINK, false), NULL, "Hi", 0},
    {SPLIT("Answer</think> more", &THINK, false), NULL, "Answer</think> more", 0},
    {SPLIT("Answer</think> more", &THINK, true), "Answer", "more", 0},
    {SPLIT("<think>a</thinkb</think>c", &THINK, false), "a</thinkb", "c", 0},
    /* the Command R pair */
    {SPLIT("<|START_THINKING|>plan<|END_THINKING|>\nDone", &COMMAND_R, false), "plan", "Done",
     0},
    {SPLIT("plan\n<|END_THINKING|>Done", &COMMAND_R, true), "plan", "Done", 0},
    {SPLIT("<think>a</think>b", &COMMAND_R, false), NULL, "<think>a</think>b", 0},
    {SPLIT("<|START_THINK", &COMMAND_R, false), NULL, "<|START_THINK", 0},
    {SPLIT("<|START_THINKING|>a</think><|END_THINKING|>", &COMMAND_R, false), "a</think>", "",
     0},
    /* rule 4: stop strings, in the thought, in a tag, in the content */
    {STOPPED("<think>abc STOP def</think>hi", &THINK, false, false, 1, "STOP"), "abc", "", 0},
    {STOPPED("<think>abc</think>hi", &THINK, false, false, 1, "nk>"), NULL, "<thi", 0},
    {STOPPED("abc</think>hi", &THINK, true, false, 1, "nk>"), "abc</thi", "", 0},
    {STOPPED("<think>abc</think>x", &THINK, false, false, 1, "</th"), "abc", "", 0},
    {STOPPED("<think>a</think>b STOP c", &THINK, false, false, 2, "STOP", "\n\n"), "a", "b ",
     0},
    {STOPPED("<think>a\n\nb</think>c", &THINK, false, false, 2, "STOP", "\n\n"), "a", "", 0},
    {STOPPED("  STOP<think>a</think>b", &THINK, false, false, 1, "STOP"), NULL, "  ", 0},
    {STOPPED("x\n\ny</think>z", &THINK, false, false, 2, "nk>", "\n\n"), NULL, "x", 0},
    {STOPPED("<think>a</think>b ST", &THINK, false, true, 1, "STOP"), "a", "b ST", 0},
    {STOPPED("<think>a ST", &THINK, false, true, 1, "STOP"), "a ST", "", 0},
    {STOPPED("<|START_THINKING|>a<|END_THINKING|>b", &COMMAND_R, false, false, 1, "ING|>"),
     NULL, "<|START_THINK", 0},
    /* rule 5: tool calls after a thought, and tool-call text inside one */
    {TOOLS("<think>I'll call.</think>\n" WEATHER, &THINK, false), "I'll call.", "", 1},
    {TOOLS("<think>t</think>Let me check.\n" WEATHER "\n" TIME "\n", &THINK, false), "t",
     "Let me check.\n", 2},
    {TOOLS("<think>maybe " WEATHER "?</think>Fine.", &THINK, false), "maybe " WEATHER "?",
     "Fine.", 0},
    {TOOLS("<think>maybe <tool_call></think>\n" TIME, &THINK, false), "maybe <tool_call>", "",
     1},
    {TOOLS("<think>x <tool_call>", &THINK, false), "x <tool_call>", "", 0},
    {TOOLS("x <tool_call></think>" TIME, &THINK, true), "x <tool_call>", "", 1},
    {TOOLS("No thought.\n" WEATHER, &THINK, false), NULL, "No thought.\n", 1},
    {TOOLS("<think>a</think>b <tool", &THINK, false), "a", "b <tool", 0},
    {TOOLS(TIME, &THINK, false), NULL, "", 1},
    {TOOLS(" " WEATHER, &COMMAND_R, false), NULL, " ", 1},
    {STOPPED("<think>a</think>Hi " WEATHER "STOP", &THINK, false, true, 1, "STOP"), "a", "Hi ",
     1},
    {STOPPED("Hi " WEATHER "</think>x", &THINK, false, true, 1, "</th"), NULL, "Hi ", 1},
    {STOPPED("<think>a\n\n</think>b" WEATHER, &THINK, false, true, 1, "\n\n"), "a", "", 0},
    /* rule 6: no tags, no split */
    {SPLIT("<think>a</think>b", NULL, false), NULL, "<think>a</think>b", 0},
    {SPLIT("<think>a</think>b", NULL, true), NULL, "<think>a</think>b", 0},
    {SPLIT("a</think>b", NULL, true), NULL, "a</think>b", 0},
    {TOOLS("<think>a</think>" WEATHER, NULL, false), NULL, "<think>a</think>", 1},
};

/* Each hand case: the reference gives the answer written by hand, and the choice gives the
 * reference's, whole and streamed in every way. */
static void test_hand_cases(void **state)
{
    (void)state;
    graft_test_random_start(graft_test_seed(0x7265617330u), 1);
    for (size_t i = 0; i < sizeof HAND / sizeof HAND[0]; i++) {
        const hand_case *h = &HAND[i];
        expect e;
        assert_true(reference(&h->k, &e));
        const char *t = h->k.text;
        size_t reasoning_len = e.reasoning_to - e.reasoning_from;
        if (h->reasoning == NULL ? reasoning_len != 0
                                 : reasoning_len != strlen(h->reasoning) ||
                                       memcmp(t + e.reasoning_from, h->reasoning,
                                              reasoning_len) != 0)
            fail_msg("hand case %zu: the reference's reasoning is \"%.*s\"", i,
                     (int)reasoning_len, t + e.reasoning_from);
        if (e.content_to - e.content != strlen(h->content) ||
            memcmp(t + e.content, h->content, strlen(h->content)) != 0)
            fail_msg("hand case %zu: the reference's content is \"%.*s\"", i,
                     (int)(e.content_to - e.content), t + e.content);
        assert_int_equal(e.n_calls, h->n_calls);
        check_case(&h->k, &e);
    }
    print_message("hand cases: %zu, %zu whole messages, %zu streams, %zu stream steps\n",
                  sizeof HAND / sizeof HAND[0], wholes_checked, streams_checked, steps_checked);
    end_test();
}

/* ---- random texts ------------------------------------------------------------------------- */

/* Stop strings, parts of tags among them. None holds another after its first byte, so that of
 * two occurrences the one that begins first also ends first: a stream that stops on the
 * first whole stop string stops where the whole text is cut. */
static char *const STOPS[] = {"STOP", "nk>", "\n\n", "</th", "ING|>"};
enum { N_STOPS = sizeof STOPS / sizeof STOPS[0], RANDOM_TEXTS = 2000 };

/* Appends s to buf[0, len) when it fits (below MAX_TEXT); the new length. */
static size_t put(char *buf, size_t len, const char *s, size_t n)
{
    if (len + n >= MAX_TEXT)
        return len;
    memcpy(buf + len, s, n);
    buf[len + n] = '\0';
    return len + n;
}

static size_t put_str(char *buf, size_t len, const char *s)
{
    return put(buf, len, s, strlen(s));
}

static size_t put_space(char *buf, size_t len)
{
    for (size_t n = 1 + graft_test_below(3); n > 0; n--)
        len = put(buf, len, &" \n\r\t"[graft_test_below(4)], 1);
    return len;
}

/* Appends a random fragment: a tag of pair or of the other pair, a part of one, white space,
 * a word, a stop string, tool-call text. */
static size_t put_fragment(char *buf, size_t len, const graft__reasoning_tags *pair)
{
    static const char *const words[] = {"a", "Hello.", "x<y", "<", ">", "/", "think", "tool",
                                        "<tool", "_call>", "ok\n", "END"};
    const graft__reasoning_tags *other = pair == &THINK ? &COMMAND_R : &THINK;
    switch (graft_test_below(14)) {
    case 0:
    case 1:
        return put_str(buf, len, pair->open);
    case 2:
    case 3:
        return put_str(buf, len, pair->close);
    case 4:
        return put(buf, len, pair->open, 1 + graft_test_below(strlen(pair->open) - 1));
    case 5:
        return put(buf, len, pair->close, 1 + graft_test_below(strlen(pair->close) - 1));
    case 6:
        return put_str(buf, len, graft_test_one_in(2) ? other->open : other->close);
    case 7:
    case 8:
        return put_space(buf, len);
    case 9:
    case 10:
        return put_str(buf, len, words[graft_test_below(sizeof words / sizeof words[0])]);
    case 11:
        return put_str(buf, len, STOPS[graft_test_below(N_STOPS)]);
    case 12:
        return put_str(buf, len, "<tool_call>");
    default:
        return put_str(buf, len, BLOCKS[graft_test_below(N_BLOCKS)].text);
    }
}

/* A random case in k, its text in buf (MAX_TEXT bytes). */
static void random_case(split_case *k, char *buf)
{
    size_t pick = graft_test_below(10);
    *k = (split_case){.text = buf,
                      .tags = pick == 0 ? NULL : pick < 3 ? &COMMAND_R : &THINK,
                      .opened = graft_test_one_in(2),
                      .tools = graft_test_one_in(3)};
    size_t n_stops = graft_test_below(5) / 2; /* 0, 0, 1, 1, 2 */
    size_t first = graft_test_below(N_STOPS);
    for (size_t s = 0; s < n_stops; s++)
        k->stops[k->n_stops++] = STOPS[(first + s) % N_STOPS];
    const graft__reasoning_tags *pair = k->tags ? k->tags : &THINK;
    size_t len = 0;
    buf[0] = '\0';
    if (graft_test_one_in(3))
        len = put_space(buf, len);
    if (!k->opened && graft_test_one_in(2))
        len = put_str(buf, len, pair->open);
    for (size_t n = graft_test_below(9); n > 0; n--)
        len = put_fragment(buf, len, pair);
    if (k->tools && graft_test_one_in(2)) {
        len = put_str(buf, len, pair->close);
        if (graft_test_one_in(2))
            len = put_space(buf, len);
        if (graft_test_one_in(2))
            len = put_str(buf, len, "Let me check.\n");
        for (size_t n = 1 + graft_test_below(2); n > 0; n--) {
            len = put_str(buf, len, BLOCKS[graft_test_below(N_BLOCKS)].text);
            if (graft_test_one_in(2))
                len = put_str(buf, len, "\n");
        }
    }
}

/* Random texts, each checked as the hand cases are; texts whose content holds a tool call
 * followed by other text are skipped (the rules leave them open). */
static void test_random_texts(void **state)
{
    (void)state;
    uint64_t seed = graft_test_seed(0x7265617331u);
    graft_test_random_start(seed, 2);
    print_message("seed 0x%llx (GRAFT_TEST_SEED reruns it)\n", (unsigned long long)seed);
    size_t checked = 0, skipped = 0, with_thought = 0, closed = 0, stopped = 0, calls = 0;
    wholes_checked = streams_checked = steps_checked = 0;
    char buf[MAX_TEXT];
    for (int i = 0; i < RANDOM_TEXTS; i++) {
        split_case k;
        random_case(&k, buf);
        expect e;
        if (!reference(&k, &e)) {
            skipped++;
            continue;
        }
        check_case(&k, &e);
        checked++;
        with_thought += e.thought;
        closed += e.closed;
        stopped += e.stop_end != SIZE_MAX;
        calls += e.n_calls > 0;
    }
    print_message("random texts: %zu checked (%zu with a thought, %zu of them closed, %zu cut "
                  "at a stop string, %zu with tool calls), %zu skipped; %zu whole messages, "
                  "%zu streams, %zu stream steps\n",
                  checked, with_thought, closed, stopped, calls, skipped, wholes_checked,
                  streams_checked, steps_checked);
    assert_true(with_thought > checked / 4 && closed > checked / 8 && calls > checked / 20);
    end_test();
}

/* ---- the prompt's side -------------------------------------------------------------------- */

static void expect_closed(const graft__reasoning_tags *tags, const char *prompt,
                          const char *want)
{
    char *p = strdup(prompt);
    assert_non_null(p);
    assert_int_equal(graft__reasoning_close(tags, &p), GRAFT_OK);
    assert_string_equal(p, want);
    free(p);
}

static void test_prompt_side(void **state)
{
    (void)state;
    const graft__reasoning_tags *think = graft__reasoning_tags_of(
        "{%- if m.role == 'assistant' %}{{ m.content.split('</think>')[-1] }}{% endif %}");
    assert_non_null(think);
    assert_string_equal(think->open, "<think>");
    assert_string_equal(think->close, "</think>");
    const graft__reasoning_tags *command_r =
        graft__reasoning_tags_of("{{ '<|START_THINKING|>' + t + '<|END_THINKING|>' }}");
    assert_non_null(command_r);
    assert_string_equal(command_r->open, "<|START_THINKING|>");
    assert_string_equal(command_r->close, "<|END_THINKING|>");
    assert_null(graft__reasoning_tags_of("{{ messages[0].content }}"));
    assert_null(graft__reasoning_tags_of("{{ '<think>' }}")); /* only the opening tag */
    assert_null(graft__reasoning_tags_of("<|START_THINKING|>"));
    assert_null(graft__reasoning_tags_of(""));

    assert_true(graft__reasoning_opened(think, "<|im_start|>assistant\n<think>"));
    assert_true(graft__reasoning_opened(think, "<|im_start|>assistant\n<think>\n"));
    assert_true(graft__reasoning_opened(think, "<think> \n\r\t"));
    assert_true(graft__reasoning_opened(think, "<think>"));
    assert_false(graft__reasoning_opened(think, "<think>x"));
    assert_false(graft__reasoning_opened(think, "<think>\nx\n"));
    assert_false(graft__reasoning_opened(think, "<think></think>\n\n"));
    assert_false(graft__reasoning_opened(think, "</think>\n"));
    assert_false(graft__reasoning_opened(think, "<think"));
    assert_false(graft__reasoning_opened(think, "assistant\n"));
    assert_false(graft__reasoning_opened(think, ""));
    assert_false(graft__reasoning_opened(think, "<|START_THINKING|>"));
    assert_true(graft__reasoning_opened(command_r, "<|CHATBOT_TOKEN|><|START_THINKING|>\n"));
    assert_false(graft__reasoning_opened(command_r, "<|START_THINKING|><|END_THINKING|>"));
    assert_false(graft__reasoning_opened(command_r, "<think>\n"));

    expect_closed(think, "A\n<think>\n", "A\n<think>\n\n</think>\n\n");
    expect_closed(think, "A\n<think>", "A\n<think>\n\n</think>\n\n");
    expect_closed(think, "A\n<think> \r\n\t ", "A\n<think>\n\n</think>\n\n");
    expect_closed(think, "plain  \n", "plain\n\n</think>\n\n");
    expect_closed(command_r, "<|START_THINKING|>\n",
                  "<|START_THINKING|>\n\n<|END_THINKING|>\n\n");
}

/* ---- the request's side ------------------------------------------------------------------ */

/* Renders each message on its line; the generation prompt opens a thought when `open`. */
static const char OPENING[] = "{#- a thought ends with </think> #}"
                              "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}\n"
                              "{% endfor %}"
                              "{%- if add_generation_prompt %}<|assistant|><think>\n{% endif %}";
static const char NOT_OPENING[] = "{#- a thought ends with </think> #}"
                                  "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}\n"
                                  "{% endfor %}"
                                  "{%- if add_generation_prompt %}<|assistant|>{% endif %}";

static graft__chat chat_of(const char *text, bool split)
{
    graft__chat chat = {.bos_text = "", .eos_text = "", .split_thoughts = split};
    chat.text = strdup(text);
    assert_non_null(chat.text);
    char *err = NULL;
    assert_int_equal(graft_template_parse(text, strlen(text), &chat.tmpl, &err), GRAFT_OK);
    chat.thought_tags = graft__reasoning_tags_of(text);
    return chat;
}

static void free_chat(graft__chat *chat)
{
    graft_template_free(chat->tmpl);
    free(chat->text);
}

/* A chat body with one user message, reasoning_format (NULL: absent, a JSON text otherwise)
 * and a response_format of type json_format (NULL: none). */
static json_t *body_of(const char *reasoning_format, const char *json_format)
{
    json_t *body = json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", "hi");
    if (reasoning_format != NULL)
        json_object_set_new(body, "reasoning_format", json_loads(reasoning_format,
                                                                 JSON_DECODE_ANY, NULL));
    if (json_format != NULL && strcmp(json_format, "json_schema") == 0)
        json_object_set_new(body, "response_format",
                            json_pack("{s:s, s:{s:s, s:{s:s}}}", "type", "json_schema",
                                      "json_schema", "name", "answer", "schema", "type",
                                      "object"));
    else if (json_format != NULL)
        json_object_set_new(body, "response_format", json_pack("{s:s}", "type", json_format));
    return body;
}

static bool ends_with(const char *text, const char *suffix)
{
    size_t n = strlen(text), m = strlen(suffix);
    return n >= m && strcmp(text + n - m, suffix) == 0;
}

/* The request parsed from body (consumed) with chat; it must parse. */
static graft__completion_request parsed(const graft__chat *chat, json_t *body)
{
    graft__completion_request r;
    char *param = NULL, *message = NULL;
    int rc = graft__request_parse(body, GRAFT__PROMPT_CHAT, chat, &r, &param, &message);
    if (rc != GRAFT_OK)
        fail_msg("refused (%d): %s: %s", rc, param ? param : "", message ? message : "");
    json_decref(body);
    assert_non_null(r.prompt_text);
    return r;
}

static void test_request_side(void **state)
{
    (void)state;
    size_t wrong = 0; /* disagreements, each printed */
    graft__chat chat = chat_of(OPENING, true);
    assert_ptr_equal(chat.thought_tags, graft__reasoning_tags_of("</think>"));
    assert_non_null(chat.thought_tags);

    /* absent, auto, deepseek: split; none: not */
    const char *const splitting[] = {NULL, "\"auto\"", "\"deepseek\""};
    for (size_t i = 0; i < 3; i++) {
        graft__completion_request r = parsed(&chat, body_of(splitting[i], NULL));
        assert_ptr_equal(r.thought_tags, chat.thought_tags);
        assert_true(r.thought_opened);
        assert_true(ends_with(r.prompt_text, "<|assistant|><think>\n"));
        graft__request_free(&r);
    }
    graft__completion_request r = parsed(&chat, body_of("\"none\"", NULL));
    assert_null(r.thought_tags);
    graft__request_free(&r);

    /* the server's default off: absent is not split, auto and deepseek are */
    chat.split_thoughts = false;
    r = parsed(&chat, body_of(NULL, NULL));
    assert_null(r.thought_tags);
    graft__request_free(&r);
    r = parsed(&chat, body_of("\"none\"", NULL));
    assert_null(r.thought_tags);
    graft__request_free(&r);
    for (size_t i = 1; i < 3; i++) {
        r = parsed(&chat, body_of(splitting[i], NULL));
        assert_ptr_equal(r.thought_tags, chat.thought_tags);
        assert_true(r.thought_opened);
        graft__request_free(&r);
    }
    chat.split_thoughts = true;

    /* null is absent, as for every field of a request */
    r = parsed(&chat, body_of("null", NULL));
    assert_ptr_equal(r.thought_tags, chat.thought_tags);
    graft__request_free(&r);

    /* any other value or type is refused by name */
    const char *const bad[] = {"\"deepseek-legacy\"", "\"\"", "\"AUTO\"", "1", "true", "{}",
                               "[\"auto\"]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *param = NULL, *message = NULL;
        json_t *body = body_of(bad[i], NULL);
        int rc = graft__request_parse(body, GRAFT__PROMPT_CHAT, &chat, &r, &param, &message);
        if (rc != GRAFT_EINVAL || param == NULL || strcmp(param, "reasoning_format") != 0 ||
            message == NULL) {
            print_error("reasoning_format %s: rc %d, param %s (expected GRAFT_EINVAL naming "
                        "reasoning_format)\n", bad[i], rc, param ? param : "(none)");
            wrong++;
        }
        if (rc == GRAFT_OK)
            graft__request_free(&r);
        free(param);
        free(message);
        json_decref(body);
    }

    /* JSON output in an opened thought begins after its closing tag, the prompt as it is
     * (whether the thought is split off or not) */
    const char *const formats[] = {"json_object", "json_schema"};
    const char *const formats_with[] = {NULL, "\"none\"", "\"auto\""};
    for (size_t f = 0; f < 2; f++) {
        for (size_t i = 0; i < 3; i++) {
            r = parsed(&chat, body_of(formats_with[i], formats[f]));
            if (!ends_with(r.prompt_text, "<|assistant|><think>\n") || !r.thought_opened ||
                r.output_after == NULL || strcmp(r.output_after, "</think>") != 0 ||
                r.output_opens != NULL) {
                print_error("%s, reasoning_format %s: the prompt is \"%s\", opened %d, "
                            "output_after %s, output_opens %s (expected the JSON text after "
                            "</think>)\n", formats[f],
                            formats_with[i] ? formats_with[i] : "absent", r.prompt_text,
                            r.thought_opened, r.output_after ? r.output_after : "NULL",
                            r.output_opens ? r.output_opens : "NULL");
                wrong++;
            }
            graft__request_free(&r);
        }
    }
    /* a forced call, whose tag ends the prompt: the opened thought is closed, empty, first */
    json_t *body = body_of(NULL, NULL);
    json_object_set_new(body, "tools", json_pack("[{s:s, s:{s:s, s:{s:s}}}]", "type", "function",
                                                 "function", "name", "f", "parameters", "type",
                                                 "object"));
    json_object_set_new(body, "tool_choice", json_string("required"));
    r = parsed(&chat, body);
    if (!ends_with(r.prompt_text, "<|assistant|><think>\n\n</think>\n\n<tool_call>\n") ||
        r.thought_opened || r.output_after != NULL) {
        print_error("a forced call: the prompt is \"%s\", opened %d (expected closed)\n",
                    r.prompt_text, r.thought_opened);
        wrong++;
    }
    graft__request_free(&r);
    free_chat(&chat);

    /* a template that mentions the tag but does not open a thought */
    chat = chat_of(NOT_OPENING, true);
    r = parsed(&chat, body_of(NULL, NULL));
    assert_ptr_equal(r.thought_tags, chat.thought_tags);
    assert_false(r.thought_opened);
    assert_true(ends_with(r.prompt_text, "<|assistant|>"));
    graft__request_free(&r);
    r = parsed(&chat, body_of(NULL, "json_object")); /* the model may open one first */
    assert_false(r.thought_opened);
    assert_true(ends_with(r.prompt_text, "<|assistant|>"));
    assert_string_equal(r.output_after, "</think>");
    assert_string_equal(r.output_opens, "<think>");
    graft__request_free(&r);
    free_chat(&chat);

    /* a template that closes the thought (thinking off): JSON output at once */
    chat = chat_of("{#- a thought ends with </think> #}"
                   "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                   "{%- if add_generation_prompt %}<|assistant|><think>\n\n</think>\n\n"
                   "{% endif %}",
                   true);
    r = parsed(&chat, body_of(NULL, "json_object"));
    assert_false(r.thought_opened);
    assert_null(r.output_after);
    assert_null(r.output_opens);
    graft__request_free(&r);
    free_chat(&chat);

    /* a model that writes no thoughts: nothing is split, whatever is asked */
    chat = chat_of(OPENING, true);
    chat.thought_tags = NULL;
    for (size_t i = 0; i < 3; i++) {
        r = parsed(&chat, body_of(splitting[i], NULL));
        assert_null(r.thought_tags);
        graft__request_free(&r);
    }
    free_chat(&chat);
    if (wrong > 0)
        fail_msg("%zu requests disagree with the specification", wrong);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_random_texts),
        cmocka_unit_test(test_prompt_side),
        cmocka_unit_test(test_request_side),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
