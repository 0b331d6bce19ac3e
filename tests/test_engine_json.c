/*
 * test_engine_json.c: generations held to one JSON object (GRAFT_OUTPUT_JSON_OBJECT).
 *
 * - The engine's mask (json_mask.c: tokens grouped by first byte, plain string text taken
 *   without feeding) against brute force, every token's bytes fed to a copy of the
 *   recognizer, on real vocabularies (SPM, GPT-2 style BPE with 152k tokens) at every prefix
 *   of texts that cross each part of the syntax. The recognizer itself is checked against
 *   jansson in test_json_syntax.c.
 * - Greedy generations on stories260K, each step's pick recomputed here from the logits the
 *   engine sampled from (its tap) as the best token whose bytes continue the text; what
 *   ends with the object parses with jansson as an object; max_new_tokens still cuts.
 * - Sampled generations: every pick continues the text, the same seed gives the same
 *   tokens, and they are the same bits alone and batched beside other generations; held to
 *   schemas, what stops is an instance (checked by hand: nested objects, strings held to
 *   formats, a pattern and lengths, numbers within bounds, a tagged union of objects,
 *   unions whose alternatives begin alike).
 * - Free text before the JSON text (output_after, a thinking model's "</think>", and
 *   output_opens, "<think>", which makes it optional): the preamble's mask against brute
 *   force (the text so far and the token's bytes searched for the opening and the tag, what
 *   follows fed to a fresh recognizer) for tags that overlap themselves, at every prefix of
 *   texts that hold them, on SPM and BPE vocabularies; a greedy generation whose every pick
 *   is recomputed from the engine's logits with that rule, then the JSON rule once the tag
 *   is out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "fixtures.h"
#include "graft.h"
#include "logits_taps.h"
#include "models.h"

enum { CONTEXT = 256, MAX_NEW = 160, BOS = 1 };

/* A schema of every kind of node: properties in order, optional ones, an integer, an enum
 * of mixed scalars, a nullable string, an array with bounds, a free value, a recursion. */
#define PERSON_SCHEMA                                                                         \
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": "        \
    "{\"type\": \"integer\"}, \"pets\": {\"type\": \"array\", \"items\": {\"enum\": [\"cat\", "   \
    "\"dog\", 7, null]}, \"minItems\": 1, \"maxItems\": 3}, \"nick\": {\"anyOf\": [{\"type\": "    \
    "\"string\"}, {\"type\": \"null\"}]}, \"extra\": {}, \"kids\": {\"type\": \"array\", "        \
    "\"items\": {\"$ref\": \"#\"}}}, \"required\": [\"name\", \"age\", \"pets\"]}"

/* Strings held to formats, a pattern and lengths (in code points). */
#define STRINGS_SCHEMA                                                                        \
    "{\"type\": \"object\", \"properties\": {\"day\": {\"type\": \"string\", \"format\": "      \
    "\"date\"}, \"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3}$\"}, "          \
    "\"name\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 6}, \"id\": {\"type\": "    \
    "[\"string\", \"null\"], \"format\": \"uuid\"}, \"note\": {\"type\": \"string\", "            \
    "\"pattern\": \"\\u00e9|\\u00e8\"}}, \"required\": [\"day\", \"code\", \"name\"]}"

/* Numbers within bounds: an integer in [-3, 12], a number in [0, 1), an even integer and a
 * price in quarters. */
#define NUMBERS_SCHEMA                                                                        \
    "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": -3, "    \
    "\"maximum\": 12}, \"score\": {\"type\": \"number\", \"minimum\": 0, \"exclusiveMaximum\": "   \
    "1}, \"even\": {\"type\": \"integer\", \"multipleOf\": 2}, \"price\": {\"type\": \"number\", " \
    "\"multipleOf\": 0.25, \"minimum\": 0, \"maximum\": 10}}, \"required\": [\"n\", \"score\", "   \
    "\"even\", \"price\"]}"

/* A tagged union of objects (the kind picks the shape), or null. */
#define SHAPES_SCHEMA                                                                         \
    "{\"type\": \"object\", \"properties\": {\"shape\": {\"anyOf\": [{\"type\": \"object\", "   \
    "\"properties\": {\"kind\": {\"const\": \"circle\"}, \"r\": {\"type\": \"integer\", "        \
    "\"minimum\": 1, \"maximum\": 9}}, \"required\": [\"kind\", \"r\"]}, {\"type\": \"object\", "  \
    "\"properties\": {\"kind\": {\"enum\": [\"square\", \"box\"]}, \"side\": {\"type\": "        \
    "\"integer\", \"minimum\": 1, \"maximum\": 9}}, \"required\": [\"kind\", \"side\"]}, "         \
    "{\"type\": \"null\"}]}}, \"required\": [\"shape\"]}"

/* Unions that the first byte of a value does not decide, followed together: pets that are
 * cats or dogs (both begin with a name), an id that is a small integer or a number from 100
 * to 200, a tag of a's or one of two words. */
#define UNIONS_SCHEMA                                                                         \
    "{\"type\": \"object\", \"properties\": {\"pets\": {\"type\": \"array\", \"minItems\": 1, "   \
    "\"maxItems\": 2, \"items\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"name\": "  \
    "{\"type\": \"string\", \"maxLength\": 8}, \"meow\": {\"type\": \"boolean\"}}, "               \
    "\"required\": [\"name\", \"meow\"]}, {\"type\": \"object\", \"properties\": {\"name\": "     \
    "{\"type\": \"string\", \"maxLength\": 8}, \"bark\": {\"type\": \"integer\", \"minimum\": 1, " \
    "\"maximum\": 5}}, \"required\": [\"name\", \"bark\"]}]}}, \"id\": {\"anyOf\": [{\"type\": "   \
    "\"integer\", \"minimum\": 0, \"maximum\": 9}, {\"type\": \"number\", \"minimum\": 100, "      \
    "\"maximum\": 200}]}, \"tag\": {\"anyOf\": [{\"type\": \"string\", \"pattern\": \"^a+$\"}, "   \
    "{\"enum\": [\"b\", \"ab\"]}]}}, \"required\": [\"pets\", \"id\", \"tag\"]}"

/* Texts whose prefixes cover every mode of the recognizer, each with the schema it is an
 * instance of (NULL: any object). */
static const struct {
    const char *schema, *text;
} texts[] = {
    {NULL, "{\"a\": [1, -0.5e+3, 20, 3E7, 0, -0.25, true, false, null, \"\"], \"b\": {}}"},
    {NULL, "{\"k\\u00e9y\": \"caf\\u00e9 \\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t \xc3\xb1 \xe6\x97\xa5 "
           "\xf0\x9f\x98\x80 \\ud83d\\ude00\", \"n\": {\"x\": [[], [{}]]}}"},
    {NULL, " {\n  \"list\": [\n\t\t1,\r\n    2\n  ],\n  \"ok\": true\n}\n"},
    {PERSON_SCHEMA, "{\"name\": \"Ann \\u00e9\", \"age\": -31, \"pets\": [\"cat\", 7, null], "
                    "\"nick\": null, \"extra\": {\"any\": [1.5]}, \"kids\": [{\"name\": \"B\", "
                    "\"age\": 2, \"pets\": [\"dog\"], \"nick\": \"b\"}]}"},
    {PERSON_SCHEMA, "{\n  \"name\": \"\",\n  \"age\": 0,\n  \"pets\": [\n    \"dog\"\n  ]\n}"},
    {STRINGS_SCHEMA, "{\"day\": \"2024-02-29\", \"code\": \"AB-\\u0030\\u00312\", \"name\": "
                     "\"\\u00e9t\xc3\xa9 \xf0\x9f\x98\x80\", \"id\": "
                     "\"123e4567-E89b-12d3-a456-426614174000\", \"note\": "
                     "\"caf\xc3\xa9 \\ud83d\\ude00\"}"},
    {NUMBERS_SCHEMA, "{\"n\": -3, \"score\": 0.999999999999999999, \"even\": -14, "
                     "\"price\": 9.75}"},
    {NUMBERS_SCHEMA, "{\"n\": 12, \"score\": 0, \"even\": 0, \"price\": 0.250}"},
    {SHAPES_SCHEMA, "{\"shape\": {\"kind\": \"box\", \"side\": 3}}"},
    {SHAPES_SCHEMA, "{\"shape\": {\"kind\": \"circle\", \"r\": 9}}"},
    {UNIONS_SCHEMA, "{\"pets\": [{\"name\": \"a\", \"meow\": true}, {\"name\": \"b\", "
                    "\"bark\": 2}], \"id\": 150, \"tag\": \"ab\"}"},
};

/* Brute force: whether all of t's bytes, one or more, can follow r. */
static bool token_follows(const graft_model *m, const graft__json_recognizer *r, int32_t t)
{
    char buf[GRAFT_TEST_TOKEN_BYTES];
    size_t n = graft_test_token_bytes(m, t, buf);
    graft__json_recognizer probe = *r;
    for (size_t i = 0; i < n; i++)
        if (!graft__json_recognizer_feed(&probe, (uint8_t)buf[i]))
            return false;
    return n > 0;
}

/* The JSON mask of a model's vocabulary, and a row of logits to apply it to. */
typedef struct mask_under_test {
    graft__token_table *tokens;
    graft__json_mask *mask;
    float *logits; /* (n_vocab) */
} mask_under_test;

static mask_under_test mask_open(const graft_model *m)
{
    mask_under_test u = {.tokens = graft_test_token_table(m)};
    assert_int_equal(graft__json_mask_create(u.tokens, &u.mask), GRAFT_OK);
    u.logits = malloc((size_t)graft_test_vocab_size(m) * sizeof *u.logits);
    assert_non_null(u.logits);
    return u;
}

static void mask_close(mask_under_test *u)
{
    free(u->logits);
    graft__json_mask_free(u->mask);
    graft__token_table_free(u->tokens);
}

/* At each `stride`-th prefix of each text, the mask leaves exactly the tokens brute force
 * allows, at their logits, and counts them. */
static void check_mask(const graft_model *m, int stride)
{
    const int32_t n_vocab = graft_test_vocab_size(m);
    mask_under_test u = mask_open(m);
    graft__json_mask *mask = u.mask;
    float *logits = u.logits;
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        graft__json_schema *schema = NULL;
        if (texts[k].schema != NULL)
            assert_int_equal(graft__json_schema_compile(texts[k].schema,
                                                        strlen(texts[k].schema), &schema, NULL),
                             GRAFT_OK);
        graft__json_recognizer s;
        graft__json_recognizer_init(&s, schema);
        const char *text = texts[k].text;
        size_t len = strlen(text);
        for (size_t at = 0; at <= len; at++) {
            if (at % (size_t)stride == 0 || at == len) {
                for (int32_t t = 0; t < n_vocab; t++)
                    logits[t] = (float)t;
                int32_t allowed = graft__json_mask_apply(mask, &s, logits);
                int32_t expected = 0;
                for (int32_t t = 0; t < n_vocab; t++) {
                    bool follows = token_follows(m, &s, t);
                    expected += follows;
                    if (logits[t] != (follows ? (float)t : -INFINITY))
                        fail_msg("text %zu, prefix %zu: token %d %s", k, at, (int)t,
                                 follows ? "masked" : "let through");
                }
                assert_int_equal(allowed, expected);
                /* Every byte is a token of these vocabularies, so an unfinished text can
                 * always go on. */
                assert_true(at == len || expected > 0);
            }
            if (at < len)
                assert_true(graft__json_recognizer_feed(&s, (uint8_t)text[at]));
        }
        assert_true(graft__json_recognizer_done(&s));
        graft__json_schema_free(schema);
    }
    mask_close(&u);
}

/* check_mask on the tokenizer of a vocab-only file of the models folder. */
static void check_vocab_mask(const char *rel, int stride)
{
    char path[1024];
    graft_model *m = NULL;
    assert_int_equal(graft_model_load_vocab(graft_test_model_path(path, sizeof path, rel), &m,
                                            NULL),
                     GRAFT_OK);
    check_mask(m, stride);
    graft_model_free(m);
}

static void test_mask_matches_brute_force_spm(void **state)
{
    (void)state;
    check_vocab_mask("stories260K.gguf", 1);
    check_vocab_mask("vocab/ggml-vocab-llama-spm.gguf", 2);
}

static void test_mask_matches_brute_force_bpe(void **state)
{
    (void)state;
    check_vocab_mask("vocab/ggml-vocab-qwen2.gguf", 3);
}

/* ---- free text before the JSON text ------------------------------------------------------- */

/* Whether text[0, len) can begin a JSON object (white space first allowed). */
static bool json_prefix(const char *text, size_t len)
{
    graft__json_recognizer r;
    graft__json_recognizer_init(&r, NULL);
    for (size_t i = 0; i < len; i++)
        if (!graft__json_recognizer_feed(&r, (uint8_t)text[i]))
            return false;
    return true;
}

/* Brute force: whether token t may follow text[0, len) (in which the JSON text has not
 * begun) when the JSON text begins after tag, the free text before it opening with `open`
 * (then optional: the JSON text may come at once) or at once (open NULL): t has bytes, and
 * the text with them is a JSON text's beginning (open only), or free text, after white space
 * a JSON text may begin with and open, where what follows the tag's first occurrence begins
 * a JSON text. */
static bool preamble_follows(const graft_model *m, const char *tag, const char *open,
                             const char *text, size_t len, int32_t t)
{
    char joined[512 + GRAFT_TEST_TOKEN_BYTES + 1];
    size_t n = graft_test_token_bytes(m, t, joined + len);
    if (n == 0)
        return false;
    memcpy(joined, text, len);
    joined[len + n] = '\0';
    size_t total = len + n, at = 0;
    if (open != NULL && json_prefix(joined, total))
        return true;
    if (open != NULL) { /* white space a JSON text may begin with, then open */
        while (at < total && strchr(" \n\r\t", joined[at]) != NULL && joined[at] != '\0')
            at++;
        if (!json_prefix(joined, at))
            return false;
        size_t rest = total - at, k = strlen(open);
        if (rest < k)
            return memcmp(joined + at, open, rest) == 0;
        if (memcmp(joined + at, open, k) != 0)
            return false;
        at += k;
    }
    const char *hit = memmem(joined + at, total - at, tag, strlen(tag));
    if (hit == NULL)
        return true;
    const char *after = hit + strlen(tag);
    return json_prefix(after, (size_t)(joined + total - after));
}

/* At every stride-th prefix of each text up to where its JSON text begins, the preamble
 * (reached by feeding the prefix a byte at a time, each byte a token of the vocabulary)
 * masks exactly the tokens brute force refuses; each token it leaves can be fed. */
static void check_preamble_mask(const char *rel, size_t stride)
{
    static const struct {
        const char *tag, *open, *text;
    } cases[] = {
        {"</think>", NULL, "Let me think. a<b, so </thin</think>\n{\"a\": 1}"},
        {"</think>", NULL, "<</</t</think>{}"},
        {"abab", NULL, "abaabab {}"},
        {".", NULL, "Once upon a time. {\"x\": [true]}"},
        {"<|END_THINKING|>", NULL, "ok <|END_THINK <|END_THINKING|> {}"},
        {"</think>", "<think>", "\n  <think>\nso </thi</think>\n{\"k\": \"v\"}"},
        {"</think>", "<think>", "<think></think>{}"},
        {"</think>", "<think>", "\n {\"a\": [1, 2]}"},
    };
    char path[1024];
    graft_model *m = NULL;
    assert_int_equal(graft_model_load_vocab(graft_test_model_path(path, sizeof path, rel), &m,
                                            NULL),
                     GRAFT_OK);
    const int32_t n_vocab = graft_test_vocab_size(m);
    mask_under_test u = mask_open(m);
    graft__json_mask *mask = u.mask;
    float *logits = u.logits;
    int32_t byte_token[256];
    for (int b = 0; b < 256; b++)
        byte_token[b] = -1;
    for (int32_t t = n_vocab - 1; t >= 0; t--) {
        char buf[GRAFT_TEST_TOKEN_BYTES];
        if (graft_test_token_bytes(m, t, buf) == 1)
            byte_token[(uint8_t)buf[0]] = t;
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *tag = cases[k].tag, *open = cases[k].open, *text = cases[k].text;
        graft__json_preamble p;
        graft__json_preamble_init(&p, tag, open);
        graft__json_recognizer r;
        graft__json_recognizer_init(&r, NULL);
        size_t at = 0;
        for (; !p.over; at++) {
            int32_t next = byte_token[(uint8_t)text[at]];
            assert_true(next >= 0);
            if (at % stride != 0) {
                assert_true(graft__json_mask_feed_preamble(mask, &p, &r, next));
                continue;
            }
            for (int32_t t = 0; t < n_vocab; t++)
                logits[t] = (float)t;
            int32_t allowed = graft__json_mask_apply_preamble(mask, &p, &r, logits);
            int32_t expected = 0;
            for (int32_t t = 0; t < n_vocab; t++) {
                bool follows = preamble_follows(m, tag, open, text, at, t);
                expected += follows;
                if (logits[t] != (follows ? (float)t : -INFINITY))
                    fail_msg("%s, case %zu, prefix %zu: token %d %s", rel, k, at, (int)t,
                             follows ? "masked" : "let through");
                if (follows && t % 11 == 0) {
                    graft__json_preamble q = p;
                    graft__json_recognizer qr = r;
                    assert_true(graft__json_mask_feed_preamble(mask, &q, &qr, t));
                }
            }
            assert_int_equal(allowed, expected);
            assert_true(graft__json_mask_feed_preamble(mask, &p, &r, next));
        }
        /* the JSON text began where the case says; the rest of the text follows */
        assert_true(open == NULL ? at == (size_t)(strstr(text, tag) - text) + strlen(tag)
                                 : at <= strlen(text));
        for (; text[at] != '\0'; at++)
            assert_true(graft__json_recognizer_feed(&r, (uint8_t)text[at]));
        assert_true(graft__json_recognizer_done(&r));
    }
    mask_close(&u);
    graft_model_free(m);
}

static void test_preamble_mask_matches_brute_force(void **state)
{
    (void)state;
    check_preamble_mask("stories260K.gguf", 1);
    check_preamble_mask("vocab/ggml-vocab-qwen2.gguf", 8);
}

/* ---------------------------------------------------------------------------------------
 * Generations on stories260K.
 */

static graft_model *stories;
static int32_t n_vocab;

static int setup(void **state)
{
    (void)state;
    stories = graft_test_load_model("stories260K.gguf");
    if (stories == NULL)
        return -1;
    n_vocab = graft_test_vocab_size(stories);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    graft_model_free(stories);
    return 0;
}

/* A JSON generation's config: greedy or sampled, with biases towards closing tokens so
 * that a model trained on stories ends its objects within MAX_NEW tokens. */
static graft_generate_config json_config(float temperature, uint64_t seed,
                                         graft_logit_bias *bias, size_t *n_bias)
{
    graft_generate_config c = graft_test_greedy(MAX_NEW);
    c.sampling.temperature = temperature;
    c.sampling.seed = seed;
    c.output_format = GRAFT_OUTPUT_JSON_OBJECT;
    *n_bias = 0;
    char buf[GRAFT_TEST_TOKEN_BYTES];
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t n = graft_test_token_bytes(stories, t, buf);
        if (n == 1 && (buf[0] == '"' || buf[0] == '}' || buf[0] == ':'))
            bias[(*n_bias)++] = (graft_logit_bias){t, buf[0] == '}' ? 15.0f : 6.0f};
    }
    assert_true(*n_bias >= 3);
    c.logit_bias = bias;
    c.n_logit_bias = *n_bias;
    return c;
}

static const int32_t prompt[] = {BOS, 403, 407, 261, 378};

/* The text of tokens, as the recognizer read it. */
static size_t text_of(const int32_t *tokens, size_t n, char *text, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char buf[GRAFT_TEST_TOKEN_BYTES];
        size_t b = graft_test_token_bytes(stories, tokens[i], buf);
        assert_true(len + b < cap);
        memcpy(text + len, buf, b);
        len += b;
    }
    text[len] = '\0';
    return len;
}

/* A settled JSON generation's output: each token continues the text; a generation that
 * stopped holds one object (jansson agrees), one cut by length holds MAX_NEW tokens. */
static void check_output(graft_generation *gen)
{
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    graft__json_recognizer s;
    graft__json_recognizer_init(&s, NULL);
    for (size_t i = 0; i < n; i++) {
        assert_true(token_follows(stories, &s, out[i]));
        char buf[GRAFT_TEST_TOKEN_BYTES];
        size_t b = graft_test_token_bytes(stories, out[i], buf);
        for (size_t j = 0; j < b; j++)
            graft__json_recognizer_feed(&s, (uint8_t)buf[j]);
        assert_true(i + 1 == n || !graft__json_recognizer_done(&s));
    }
    char text[MAX_NEW * GRAFT_TEST_TOKEN_BYTES];
    size_t len = text_of(out, n, text, sizeof text);
    if (graft_generation_finish_reason(gen) == GRAFT_FINISH_STOP) {
        assert_true(graft__json_recognizer_done(&s));
        json_error_t err;
        json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &err);
        if (root == NULL)
            fail_msg("jansson refuses %s: %s", text, err.text);
        assert_true(json_is_object(root));
        json_decref(root);
    } else {
        assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_LENGTH);
        assert_int_equal(n, MAX_NEW);
    }
}

/* Greedy: each pick is the token of highest biased logit among those whose bytes continue
 * the text (lowest id on ties), recomputed from the rows the engine sampled from. With
 * `after` (output_after), until the output holds it each pick is the best token brute force
 * lets through before a JSON text instead, and what follows it is one object. */
static void check_greedy_picks(const char *after)
{
    graft_engine_options o = graft_test_engine_options(2, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_test_rows r; /* every row the engine samples from */
    graft_test_rows_init(&r, n_vocab, MAX_NEW + 1);
    graft__engine_set_tap(e, graft_test_rows_tap, &r);
    graft_logit_bias bias[16];
    size_t n_bias;
    graft_generate_config c = json_config(0.0f, 0, bias, &n_bias);
    c.output_after = after;
    graft_session *s = graft_test_open_session(e);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, prompt, sizeof prompt / sizeof prompt[0], &c,
                                            NULL, NULL, NULL, &gen),
                     GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    assert_int_equal(graft_generation_finish_reason(gen), GRAFT_FINISH_STOP);
    if (after == NULL)
        check_output(gen);
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    assert_int_equal(r.n, (int)n);
    char text[MAX_NEW * GRAFT_TEST_TOKEN_BYTES];
    size_t len = 0, free_tokens = 0;
    text[0] = '\0';
    graft__json_recognizer syn;
    graft__json_recognizer_init(&syn, NULL);
    graft__json_preamble pre;
    graft__json_preamble_init(&pre, after, NULL);
    for (size_t i = 0; i < n; i++) {
        const float *row = graft_test_row(&r, (int)i);
        bool before = !pre.over;
        int32_t best = -1;
        float best_logit = -INFINITY;
        for (int32_t t = 0; t < n_vocab; t++) {
            float logit = row[t];
            for (size_t b = 0; b < n_bias; b++)
                logit += bias[b].token == t ? bias[b].bias : 0.0f;
            bool ok = before ? preamble_follows(stories, after, NULL, text, len, t)
                             : token_follows(stories, &syn, t);
            if (ok && (best < 0 || logit > best_logit)) {
                best = t;
                best_logit = logit;
            }
        }
        assert_int_equal(out[i], best);
        free_tokens += before;
        assert_true(before ? graft__json_mask_feed_preamble(e->json_mask, &pre, &syn, out[i])
                           : graft__json_mask_feed(e->json_mask, &syn, out[i]));
        len += graft_test_token_bytes(stories, out[i], text + len);
        text[len] = '\0';
    }
    if (after != NULL) {
        assert_true(free_tokens > 1); /* the story ran before the tag */
        const char *json = strstr(text, after) + strlen(after);
        json_error_t err;
        json_t *root = json_loads(json, 0, &err);
        if (!json_is_object(root))
            fail_msg("after the tag, not one object: %s (%s)", json, err.text);
        json_decref(root);
    }
    graft__engine_set_tap(e, NULL, NULL);
    graft_generation_free(gen);
    graft_session_close(s);
    graft_test_rows_free(&r);
    graft_test_engine_end(e);
}

static void test_greedy_picks_best_continuing_token(void **state)
{
    (void)state;
    check_greedy_picks(NULL);
}

/* The JSON text after "." (a tag stories260K writes). */
static void test_json_after_a_tag(void **state)
{
    (void)state;
    check_greedy_picks(".");
}

typedef graft_test_gen run;

/* A generation of the prompt with c, on a session of its own. */
static void start(graft_engine *e, run *r, const graft_generate_config *c)
{
    graft_test_gen_start(e, r, prompt, sizeof prompt / sizeof prompt[0], c);
}

/* Sampled JSON generations, seeds 1..SEEDS: each alone, then all at once beside a plain
 * greedy text generation; the same tokens either way, every output well formed, and most
 * of them closed objects (the biases make closing likely; a seed that runs to MAX_NEW is
 * checked as a well-formed prefix). */
static void test_sampled_json_is_well_formed_and_batch_invariant(void **state)
{
    (void)state;
    enum { SEEDS = 6 };
    graft_engine_options o = graft_test_engine_options(2 * SEEDS + 1, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_logit_bias bias[SEEDS][16];
    graft_generate_config c[SEEDS];
    run alone[SEEDS], together[SEEDS], text_run;
    int closed = 0;
    for (int k = 0; k < SEEDS; k++) {
        size_t n_bias;
        c[k] = json_config(1.0f, (uint64_t)k + 1, bias[k], &n_bias);
        start(e, &alone[k], &c[k]);
        assert_int_equal(graft_generation_wait(alone[k].gen), GRAFT_OK);
        check_output(alone[k].gen);
        closed += graft_generation_finish_reason(alone[k].gen) == GRAFT_FINISH_STOP;
    }
    assert_true(closed >= SEEDS / 2);
    graft_generate_config plain = graft_test_greedy(MAX_NEW);
    start(e, &text_run, &plain);
    for (int k = 0; k < SEEDS; k++)
        start(e, &together[k], &c[k]);
    for (int k = 0; k < SEEDS; k++) {
        assert_int_equal(graft_generation_wait(together[k].gen), GRAFT_OK);
        graft_test_assert_same_tokens(alone[k].gen, together[k].gen);
    }
    assert_int_equal(graft_generation_wait(text_run.gen), GRAFT_OK);
    graft_test_gen_release(&text_run);
    for (int k = 0; k < SEEDS; k++) {
        graft_test_gen_release(&alone[k]);
        graft_test_gen_release(&together[k]);
    }
    graft_test_engine_end(e);
}

/* Whether v is an instance of PERSON_SCHEMA with its properties in the schema's order,
 * checked here from the schema's text by hand. */
static bool is_person(const json_t *v)
{
    static const char *const order[] = {"name", "age", "pets", "nick", "extra", "kids"};
    if (!json_is_object(v))
        return false;
    size_t next = 0;
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *)v, key, value) {
        while (next < 6 && strcmp(order[next], key) != 0)
            next++;
        if (next == 6)
            return false; /* unknown, repeated or out of order */
        next++;
    }
    const json_t *pets = json_object_get(v, "pets"), *nick = json_object_get(v, "nick");
    const json_t *kids = json_object_get(v, "kids");
    if (!json_is_string(json_object_get(v, "name")) ||
        !json_is_integer(json_object_get(v, "age")) || !json_is_array(pets) ||
        json_array_size(pets) < 1 || json_array_size(pets) > 3 ||
        (nick != NULL && !json_is_string(nick) && !json_is_null(nick)) ||
        (kids != NULL && !json_is_array(kids)))
        return false;
    for (size_t i = 0; i < json_array_size(pets); i++) {
        const json_t *p = json_array_get(pets, i);
        const char *name = json_string_value(p);
        if (!(json_is_null(p) || (json_is_integer(p) && json_integer_value(p) == 7) ||
              (name != NULL && (strcmp(name, "cat") == 0 || strcmp(name, "dog") == 0))))
            return false;
    }
    for (size_t i = 0; i < json_array_size(kids); i++)
        if (!is_person(json_array_get(kids, i)))
            return false;
    return true;
}

/* Samples SEEDS generations held to `schema` (the first greedy): what ends "stop" must be
 * an instance by is_instance (hand-written, not the recognizer), what runs out is MAX_NEW
 * tokens of a prefix, and the same seed gives the same tokens again. At least half stop. */
static void sample_instances(const char *schema, bool (*is_instance)(const json_t *))
{
    enum { SEEDS = 8 };
    graft_engine_options o = graft_test_engine_options(2, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    int instances = 0;
    for (int k = 0; k < SEEDS; k++) {
        graft_logit_bias bias[16];
        size_t n_bias;
        graft_generate_config c = json_config(k == 0 ? 0.0f : 1.0f, (uint64_t)k, bias, &n_bias);
        c.output_format = GRAFT_OUTPUT_JSON_SCHEMA;
        c.json_schema = schema;
        c.json_schema_len = strlen(schema);
        run r, again;
        start(e, &r, &c);
        assert_int_equal(graft_generation_wait(r.gen), GRAFT_OK);
        size_t n = 0;
        const int32_t *out = graft_generation_tokens(r.gen, &n);
        char text[MAX_NEW * GRAFT_TEST_TOKEN_BYTES];
        size_t len = text_of(out, n, text, sizeof text);
        if (graft_generation_finish_reason(r.gen) == GRAFT_FINISH_STOP) {
            json_t *v = json_loadb(text, len, 0, NULL);
            if (!is_instance(v))
                fail_msg("seed %d: not an instance: %s", k, text);
            json_decref(v);
            instances++;
        } else {
            assert_int_equal(n, MAX_NEW);
        }
        start(e, &again, &c);
        assert_int_equal(graft_generation_wait(again.gen), GRAFT_OK);
        graft_test_assert_same_tokens(r.gen, again.gen);
        graft_test_gen_release(&r);
        graft_test_gen_release(&again);
    }
    assert_true(instances >= SEEDS / 2);
    graft_test_engine_end(e);
}

/* Held to PERSON_SCHEMA: nested objects, enums, a recursion. */
static void test_schema_generations(void **state)
{
    (void)state;
    sample_instances(PERSON_SCHEMA, is_person);
}

/* Whether text[0, n) is a date of the proleptic Gregorian calendar, YYYY-MM-DD. */
static bool is_date(const char *text, size_t n)
{
    int y, m, d;
    char tail;
    if (n != 10 || sscanf(text, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || text[4] != '-' ||
        text[7] != '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (i != 4 && i != 7 && (text[i] < '0' || text[i] > '9'))
            return false;
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1] + (m == 2 && leap);
}

/* Code points of UTF-8 text. */
static size_t code_points(const char *text)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        n += (*p & 0xC0) != 0x80;
    return n;
}

/* Whether v is an instance of STRINGS_SCHEMA (its required properties), checked by hand. */
static bool is_strings_instance(const json_t *v)
{
    const json_t *day = json_object_get(v, "day"), *code = json_object_get(v, "code");
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *c = json_string_value(code);
    return json_is_object(v) && json_is_string(day) &&
           is_date(json_string_value(day), json_string_length(day)) && c != NULL &&
           json_string_length(code) == 6 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' &&
           c[1] <= 'Z' && c[2] == '-' && c[3] >= '0' && c[3] <= '9' && c[4] >= '0' &&
           c[4] <= '9' && c[5] >= '0' && c[5] <= '9' && name != NULL &&
           code_points(name) >= 2 && code_points(name) <= 6;
}

/* Whether v is an instance of NUMBERS_SCHEMA, checked by hand. */
static bool is_numbers_instance(const json_t *v)
{
    const json_t *n = json_object_get(v, "n"), *score = json_object_get(v, "score");
    const json_t *even = json_object_get(v, "even"), *price = json_object_get(v, "price");
    double quarters = json_number_value(price) * 4;
    return json_is_integer(n) && json_integer_value(n) >= -3 && json_integer_value(n) <= 12 &&
           json_is_number(score) && json_number_value(score) >= 0 &&
           json_number_value(score) < 1 && json_is_integer(even) &&
           json_integer_value(even) % 2 == 0 && json_is_number(price) &&
           json_number_value(price) >= 0 && json_number_value(price) <= 10 &&
           quarters == (double)(long)quarters;
}

/* Whether v is an instance of SHAPES_SCHEMA, checked by hand. */
static bool is_shapes_instance(const json_t *v)
{
    const json_t *shape = json_object_get(v, "shape");
    if (json_is_null(shape))
        return json_object_size(v) == 1;
    const char *kind = json_string_value(json_object_get(shape, "kind"));
    const char *size = kind == NULL ? NULL : strcmp(kind, "circle") == 0 ? "r" : "side";
    const json_t *n = size ? json_object_get(shape, size) : NULL;
    bool known = kind != NULL && (strcmp(kind, "circle") == 0 || strcmp(kind, "square") == 0 ||
                                  strcmp(kind, "box") == 0);
    return json_is_object(shape) && known && json_object_size(shape) == 2 &&
           json_is_integer(n) && json_integer_value(n) >= 1 && json_integer_value(n) <= 9;
}

/* A text and the index of the first byte the recognizer must refuse in it (SIZE_MAX: it
 * accepts the whole text). */
typedef struct refusal {
    const char *text;
    size_t refused;
} refusal;

/* Each case's text fed under schema is refused exactly where the case says. */
static void expect_refusals(const char *schema, const refusal *cases, size_t n)
{
    graft__json_schema *compiled = NULL;
    assert_int_equal(graft__json_schema_compile(schema, strlen(schema), &compiled, NULL),
                     GRAFT_OK);
    for (size_t i = 0; i < n; i++) {
        graft__json_recognizer s;
        graft__json_recognizer_init(&s, compiled);
        size_t at = 0;
        const char *text = cases[i].text;
        while (text[at] != '\0' && graft__json_recognizer_feed(&s, (uint8_t)text[at]))
            at++;
        size_t want = cases[i].refused == SIZE_MAX ? strlen(cases[i].text) : cases[i].refused;
        if (at != want)
            fail_msg("'%s': refused at %zu, expected %zu", cases[i].text, at, want);
    }
    graft__json_schema_free(compiled);
}

/* Held to SHAPES_SCHEMA: the tag's value picks the object the rest is held to, refused at
 * the first byte that no shape allows; sampled answers are instances. */
static void test_tagged_union(void **state)
{
    (void)state;
    static const refusal cases[] = {
        {"{\"shape\": {\"kind\": \"square\", \"side\": 9}}", SIZE_MAX},
        {"{\"shape\": null}", SIZE_MAX},
        {"{\"shape\": {}", 11},                          /* the tag is required */
        {"{\"shape\": {\"side\"", 12},                    /* the tag comes first */
        {"{\"shape\": {\"kind\": \"cube\"", 21},          /* no shape's tag */
        {"{\"shape\": {\"kind\": \"circle\", \"side\"", 30}, /* a square's property */
        {"{\"shape\": {\"kind\": \"box\"}", 24},           /* its required side */
        {"{\"shape\": {\"kind\": \"box\", \"side\": 10", 35}, /* beyond its maximum */
    };
    expect_refusals(SHAPES_SCHEMA, cases, sizeof cases / sizeof cases[0]);
    sample_instances(SHAPES_SCHEMA, is_shapes_instance);
}

/* Whether v is an instance of UNIONS_SCHEMA, checked by hand. */
static bool is_unions_instance(const json_t *v)
{
    const json_t *pets = json_object_get(v, "pets"), *id = json_object_get(v, "id");
    const char *tag = json_string_value(json_object_get(v, "tag"));
    if (!json_is_array(pets) || json_array_size(pets) < 1 || json_array_size(pets) > 2 ||
        json_object_size(v) != 3 || tag == NULL)
        return false;
    for (size_t i = 0; i < json_array_size(pets); i++) {
        const json_t *pet = json_array_get(pets, i), *bark = json_object_get(pet, "bark");
        const char *name = json_string_value(json_object_get(pet, "name"));
        bool cat = json_is_boolean(json_object_get(pet, "meow"));
        bool dog = json_is_integer(bark) && json_integer_value(bark) >= 1 &&
                   json_integer_value(bark) <= 5;
        if (name == NULL || code_points(name) > 8 || json_object_size(pet) != 2 ||
            !(cat || dog))
            return false;
    }
    double x = json_number_value(id);
    bool small = json_is_integer(id) && json_integer_value(id) >= 0 &&
                 json_integer_value(id) <= 9;
    bool large = json_is_number(id) && x >= 100 && x <= 200;
    bool a_run = tag[0] != '\0' && strspn(tag, "a") == strlen(tag);
    return (small || large) &&
           (a_run || strcmp(tag, "b") == 0 || strcmp(tag, "ab") == 0);
}

/* Held to UNIONS_SCHEMA: alternatives whose values begin alike are followed together, so a
 * byte is refused only when every one of them refuses it; sampled answers are instances. */
static void test_untagged_unions(void **state)
{
    (void)state;
#define PET "{\"pets\": [{\"name\": \"a\", "
#define CAT "{\"pets\": [{\"name\": \"a\", \"meow\": false}], "
    static const refusal cases[] = {
        {PET "\"meow\": true}, {\"name\": \"b\", \"bark\": 2}], \"id\": 150, \"tag\": \"ab\"}",
         SIZE_MAX},
        {CAT "\"id\": 100, \"tag\": \"aaa\"}", SIZE_MAX},
        {CAT "\"id\": 0, \"tag\": \"b\"}", SIZE_MAX},
        {PET "\"bark\": true", 32},    /* a dog's bark is an integer */
        {"{\"pets\": [{\"name\": \"a\"}", 22}, /* cat and dog both need a second property */
        {PET "\"woof\"", 25},          /* neither's property */
        {"{\"pets\": [{\"name\": \"abcdefghi\"", 28}, /* beyond both names' maxLength */
        {CAT "\"id\": 15,", 49},         /* neither 0 to 9 nor 100 to 200 */
        {CAT "\"id\": 201", 49},
        {CAT "\"id\": 9.5", 48},
        {CAT "\"id\": 3, \"tag\": \"aab\"", 60}, /* neither a's nor a word */
        {CAT "\"id\": 3, \"tag\": \"abc\"", 60},
    };
#undef PET
#undef CAT
    expect_refusals(UNIONS_SCHEMA, cases, sizeof cases / sizeof cases[0]);
    sample_instances(UNIONS_SCHEMA, is_unions_instance);
}

/* Held to NUMBERS_SCHEMA: the numbers come out within their bounds and multiples, refused
 * at the first byte no such number can follow. */
static void test_number_bounds(void **state)
{
    (void)state;
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"multipleOf\": "
        "5, \"minimum\": 0, \"maximum\": 100}, \"b\": {\"type\": \"number\", \"multipleOf\": "
        "0.25}}}";
    static const refusal cases[] = {
        {"{\"a\": 75, \"b\": -1.25}", SIZE_MAX},
        {"{\"a\": 7}", 7},      /* 7 is no multiple of 5 (70 and 75 would be) */
        {"{\"a\": 101", 8},     /* beyond 100 */
        {"{\"b\": 0.3", 8},     /* no quarter in [0.3, 0.4) */
        {"{\"b\": 0.2}", 9},    /* 0.25 was still possible */
        {"{\"b\": 0.250}", SIZE_MAX},
    };
    expect_refusals(schema, cases, sizeof cases / sizeof cases[0]);
    sample_instances(NUMBERS_SCHEMA, is_numbers_instance);
}

/* Held to STRINGS_SCHEMA: whatever the model would write, the strings come out as dates,
 * codes and names of the lengths asked for; none is left without a token to go on with. */
static void test_string_constraints(void **state)
{
    (void)state;
    sample_instances(STRINGS_SCHEMA, is_strings_instance);
}

/* A JSON generation cut by max_new_tokens ends LENGTH with a well-formed prefix; an unknown
 * format, a schema format without a schema and a schema outside the subset are refused. */
static void test_length_and_bad_format(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(2, CONTEXT);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_generate_config c = graft_test_greedy(3);
    c.output_format = GRAFT_OUTPUT_JSON_OBJECT;
    run r;
    start(e, &r, &c);
    assert_int_equal(graft_generation_wait(r.gen), GRAFT_OK);
    assert_int_equal(graft_generation_finish_reason(r.gen), GRAFT_FINISH_LENGTH);
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(r.gen, &n);
    assert_int_equal(n, 3);
    char text[4 * GRAFT_TEST_TOKEN_BYTES];
    text_of(out, n, text, sizeof text);
    assert_true(strchr(text, '{') != NULL);
    graft_test_gen_release(&r);
    c.output_format = GRAFT_OUTPUT_JSON_SCHEMA; /* without a schema */
    graft_session *s = graft_test_open_session(e);
    graft_generation *gen = NULL;
    assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    static const char *const refused[] = {
        "{\"type\": \"object\", \"minProperties\": 1}",
        "{\"type\": \"object\", \"properties\": {\"a\": {\"maxItems\": 65535}}}",
    };
    for (size_t i = 0; i < 2; i++) {
        c.json_schema = refused[i];
        c.json_schema_len = strlen(c.json_schema);
        assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                         GRAFT_EINVAL);
    }
    c.output_format = (graft_output_format)7;
    assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    /* output_after: 1 to 32 bytes, with a JSON format; output_opens only with it */
    c.output_format = GRAFT_OUTPUT_JSON_OBJECT;
    static const char *const bad_after[] = {"", "123456789012345678901234567890123"};
    for (size_t i = 0; i < 2; i++) {
        c.output_after = bad_after[i];
        assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                         GRAFT_EINVAL);
    }
    c.output_after = NULL;
    c.output_opens = "<think>";
    assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.output_after = "</think>";
    c.output_opens = "";
    assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    c.output_opens = NULL;
    c.output_format = GRAFT_OUTPUT_TEXT;
    assert_int_equal(graft_session_generate(s, prompt, 1, &c, NULL, NULL, NULL, &gen),
                     GRAFT_EINVAL);
    assert_null(gen);
    graft_session_close(s);
    graft_test_engine_end(e);
}

int main(void)
{
    /* Whole vocabularies masked by brute force on the test's own thread: the release and ASan
     * flavours run them. TSan is here for the engine's threads, which they do not touch, and
     * instrumented they are by far the slowest part of its flavour. */
#ifdef GRAFT_TEST_TSAN
    (void)test_mask_matches_brute_force_spm;
    (void)test_mask_matches_brute_force_bpe;
    (void)test_preamble_mask_matches_brute_force;
#endif
    const struct CMUnitTest tests[] = {
#ifndef GRAFT_TEST_TSAN
        cmocka_unit_test(test_mask_matches_brute_force_spm),
        cmocka_unit_test(test_mask_matches_brute_force_bpe),
        cmocka_unit_test(test_preamble_mask_matches_brute_force),
#endif
        cmocka_unit_test(test_greedy_picks_best_continuing_token),
        cmocka_unit_test(test_json_after_a_tag),
        cmocka_unit_test(test_sampled_json_is_well_formed_and_batch_invariant),
        cmocka_unit_test(test_schema_generations),
        cmocka_unit_test(test_string_constraints),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_tagged_union),
        cmocka_unit_test(test_untagged_unions),
        cmocka_unit_test(test_length_and_bad_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
