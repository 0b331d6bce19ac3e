/*
 * test_json_schema.c: the recognizer held to a JSON schema (graft__json_schema_compile and
 * graft__json_syntax_init_schema, engine/json_output.h), checked against oracles written here
 * from the header's text alone, without reference to json_schema.c or json_syntax.c.
 *
 * The header fixes what each byte does: feed accepts a byte exactly when the bytes so far can
 * still be completed to an accepted text (the base JSON syntax, within its limits, that is also
 * an instance of the schema as the header reads it), and done says whether they are one. Two
 * oracles, written differently, say which texts those are:
 *   - the reference (reader below): a recursive-descent reader of prefixes, led by the schema,
 *     that stops at the first byte no instance continues with and otherwise writes a completion
 *     (the bytes that make the prefix an instance); it gives the index of the first refused
 *     byte, done after each prefix, and a witness for every prefix it calls completable;
 *   - the validator (truth_of): jansson decides the grammar and UTF-8 of a whole text, scanners
 *     here the header's limits on whitespace and nesting, and a validator here holds a tree of
 *     the raw text (key and value texts as written) to the schema.
 * They are held to each other on every text (a disagreement is labelled "oracle:" and is a
 * fault of this file), and the recognizer is held to both:
 *   - random instances of a fixed set of schemas (OpenAI structured outputs, pydantic with
 *     $defs / $ref / allOf and annotations, recursion through "#", numbers, const and enum,
 *     free values, array bounds, keys that need escapes, anyOf / oneOf / type lists), written
 *     with random whitespace, strings with escapes and multi-byte UTF-8, and random numbers
 *     (some at the digit limits of typed numbers),
 *     are accepted to the end and done exactly from the closing brace on;
 *   - mutations of them (bytes flipped, inserted, deleted; truncation; members swapped,
 *     dropped, duplicated, renamed; values replaced): the first refused byte is the
 *     reference's, done holds after exactly the prefixes that close the object, a text
 *     accepted and done is an instance (soundness) and an instance is accepted and done
 *     (completeness), the prefix the recognizer accepted has a completion that the validator
 *     takes, and a copy of the state is a fork;
 *   - hand-written cases at the subset's corners, each expectation first held to the
 *     reference;
 *   - the nesting limits (32 schema'd levels, 64 in all), the limit on the properties of an
 *     object and the values of an enum (GRAFT__SCHEMA_MAX_TEXTS), and compile errors: each keyword
 *     outside the subset (also nested), a root that is not an object schema, oneOf alternatives
 *     that a value could match together, a union holding itself before any value, bad $ref
 *     targets and malformed JSON give GRAFT_EINVAL and a message naming the keyword. (anyOf
 *     alternatives that begin alike are followed together: test_json_unions.c.)
 * A failure prints the schema, the seed (GRAFT_TEST_SEED overrides it) and the text as a C
 * string literal, and a shrunk text for a first-refused-byte disagreement; every disagreement
 * is counted and the test fails at its end, so that one run shows them all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "json_oracle.h"
#include "tally.h"
#include "engine/engine.h"

/* ---- buffers, the PRNG, reporting ------------------------------------------------------- */

/* The seed is fixed (GRAFT_TEST_SEED overrides it) and printed with a failure. */
static uint64_t seed = 0x6a736f6e5363686du;

static void seed_rng(uint64_t stream)
{
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Disagreements are counted; the first MAX_PRINTED of a test are printed, and the test fails
 * at its end (graft_test_tally_end) when there was any. */
enum { MAX_PRINTED = 16 };
static const char *current = "";

/* Counts a disagreement; returns whether it was printed. */
static bool report(const char *what, const uint8_t *t, size_t n, size_t expected, size_t actual)
{
    if (!graft_test_tally_count())
        return false;
    print_error("%s [schema %s, seed 0x%" PRIx64 "]: expected %zu, got %zu; text of %zu bytes: ",
                what, current, seed, expected, actual, n);
    graft_test_print_literal(t, n);
    print_error("\n");
    return true;
}

static void begin_test(const char *name, uint64_t stream)
{
    current = name;
    graft_test_tally_begin(MAX_PRINTED);
    seed_rng(stream);
}

/* ---- the schemas ---------------------------------------------------------------------------- */

enum {
    S_OPENAI,   /* structured outputs: all required, closed, nested, array of objects, nullable */
    S_PYDANTIC, /* $defs, $ref with siblings, allOf of one, titles, defaults, annotations */
    S_TREE,     /* recursion through "#": children, and a parent through anyOf */
    S_LIST,     /* recursion through "#/definitions/..." */
    S_NUMBERS,  /* integer against number, array bounds */
    S_CONST,    /* const and enum of each scalar kind; texts as json_dumps writes them */
    S_FREE,     /* values the schema leaves free, objects without properties */
    S_ARRAYS,   /* minItems, maxItems, nested arrays */
    S_KEYS,     /* property names that need escapes or are keyword names */
    S_ALTS,     /* anyOf / oneOf / type lists over every kind */
    S_CLOSED,   /* no properties, additionalProperties false: only {} */
    S_OPEN,     /* no properties: any object */
    S_PREFIX,   /* keys and enum texts that are prefixes of others; anyOf in anyOf, in items */
    N_SCHEMAS
};

static const struct {
    const char *name, *text;
} schema_defs[N_SCHEMAS] = {
    [S_OPENAI] = {"openai",
                  "{\"type\":\"object\",\"properties\":{"
                  "\"name\":{\"type\":\"string\",\"description\":\"full name\"},"
                  "\"age\":{\"type\":\"integer\"},"
                  "\"score\":{\"type\":\"number\"},"
                  "\"address\":{\"type\":\"object\",\"properties\":{"
                  "\"street\":{\"type\":\"string\"},"
                  "\"zip\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"street\",\"zip\"],"
                  "\"additionalProperties\":false},"
                  "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
                  "\"label\":{\"type\":\"string\"},\"weight\":{\"anyOf\":[{\"type\":\"number\"},"
                  "{\"type\":\"null\"}]}},\"required\":[\"label\",\"weight\"],"
                  "\"additionalProperties\":false},\"maxItems\":3},"
                  "\"status\":{\"type\":\"string\",\"enum\":[\"active\",\"inactive\",\"pending\"]},"
                  "\"nickname\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
                  "\"verified\":{\"type\":\"boolean\"}},"
                  "\"required\":[\"name\",\"age\",\"score\",\"address\",\"tags\",\"status\","
                  "\"nickname\",\"verified\"],\"additionalProperties\":false}"},
    [S_PYDANTIC] = {"pydantic",
                    "{\"$defs\":{"
                    "\"Color\":{\"enum\":[\"red\",\"green\",\"blue\"],\"title\":\"Color\","
                    "\"type\":\"string\"},"
                    "\"Item\":{\"properties\":{"
                    "\"id\":{\"title\":\"Id\",\"type\":\"integer\"},"
                    "\"color\":{\"$ref\":\"#/$defs/Color\",\"default\":\"red\"},"
                    "\"price\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}],"
                    "\"default\":null,\"title\":\"Price\"},"
                    "\"labels\":{\"items\":{\"type\":\"string\"},\"title\":\"Labels\","
                    "\"type\":\"array\",\"default\":[]}},"
                    "\"required\":[\"id\"],\"title\":\"Item\",\"type\":\"object\"}},"
                    "\"properties\":{"
                    "\"items\":{\"items\":{\"$ref\":\"#/$defs/Item\"},\"title\":\"Items\","
                    "\"type\":\"array\"},"
                    "\"owner\":{\"default\":\"nobody\",\"title\":\"Owner\",\"type\":\"string\","
                    "\"examples\":[\"ann\"]},"
                    "\"main\":{\"allOf\":[{\"$ref\":\"#/$defs/Item\"}],"
                    "\"description\":\"the main item\",\"deprecated\":true},"
                    "\"count\":{\"default\":0,\"title\":\"Count\",\"type\":\"integer\","
                    "\"readOnly\":true},"
                    "\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],"
                    "\"default\":null,\"writeOnly\":true,\"$comment\":\"free text\"}},"
                    "\"required\":[\"items\"],\"title\":\"Order\",\"type\":\"object\","
                    "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
                    "\"$id\":\"https://example.com/order\",\"description\":\"An order\"}"},
    [S_TREE] = {"tree",
                "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
                "\"parent\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},"
                "\"required\":[\"name\",\"children\"],\"additionalProperties\":false}"},
    [S_LIST] = {"list",
                "{\"definitions\":{\"Node\":{\"type\":\"object\",\"properties\":{"
                "\"value\":{\"type\":\"integer\"},"
                "\"next\":{\"anyOf\":[{\"$ref\":\"#/definitions/Node\"},{\"type\":\"null\"}]}},"
                "\"required\":[\"value\",\"next\"]}},"
                "\"type\":\"object\",\"properties\":{\"head\":{\"$ref\":\"#/definitions/Node\"},"
                "\"size\":{\"type\":\"integer\"}},\"required\":[\"head\"]}"},
    [S_NUMBERS] = {"numbers",
                   "{\"type\":\"object\",\"properties\":{\"i\":{\"type\":\"integer\"},"
                   "\"n\":{\"type\":\"number\"},"
                   "\"ia\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,"
                   "\"maxItems\":4},"
                   "\"na\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
                   "\"required\":[\"i\",\"n\",\"ia\"]}"},
    [S_CONST] = {"const",
                 "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"point\"},"
                 "\"version\":{\"const\":2},\"flag\":{\"const\":true},\"nothing\":{\"const\":null},"
                 "\"level\":{\"enum\":[1,2,10,-3,2.5,4.0]},"
                 "\"mixed\":{\"enum\":[\"a\",1,null,false,\"a\\\"b\",\"\xc3\xa9 \xc3\xbc\","
                 "\"line\\nbreak\",\"\\u001f\"]},"
                 "\"ratio\":{\"const\":0.5}},\"required\":[\"kind\",\"version\"]}"},
    [S_FREE] = {"free",
                "{\"type\":\"object\",\"properties\":{\"meta\":{\"type\":\"object\"},"
                "\"anything\":{},\"also\":true,"
                "\"described\":{\"description\":\"no type\",\"title\":\"D\"},"
                "\"open\":{\"type\":\"object\",\"additionalProperties\":true},"
                "\"closed\":{\"type\":\"object\",\"additionalProperties\":false},"
                "\"list\":{\"type\":\"array\"},"
                "\"empty\":{\"type\":\"object\",\"properties\":{}}},"
                "\"required\":[\"meta\",\"closed\"]}"},
    [S_ARRAYS] = {"arrays",
                  "{\"type\":\"object\",\"properties\":{"
                  "\"pair\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2,"
                  "\"maxItems\":2},"
                  "\"some\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1},"
                  "\"none\":{\"type\":\"array\",\"maxItems\":0},"
                  "\"matrix\":{\"type\":\"array\",\"items\":{\"type\":\"array\","
                  "\"items\":{\"type\":\"integer\"},"
                  "\"minItems\":1,\"maxItems\":3},\"maxItems\":3}},"
                  "\"required\":[\"pair\",\"some\"]}"},
    [S_KEYS] = {"keys",
                "{\"type\":\"object\",\"properties\":{\"a b\":{\"type\":\"integer\"},"
                "\"quo\\\"te\":{\"type\":\"string\"},\"back\\\\slash\":{\"type\":\"null\"},"
                "\"\xc3\xbcn\xc3\xaf\":{\"type\":\"boolean\"},\"tab\\t\":{\"type\":\"integer\"},"
                "\"slash/\":{\"type\":\"integer\"},"
                "\"emoji\xf0\x9f\x98\x80\":{\"type\":\"integer\"},"
                "\"pattern\":{\"type\":\"string\"},\"format\":{\"type\":\"integer\"},"
                "\"\":{\"type\":\"integer\"}},\"required\":[\"quo\\\"te\"]}"},
    [S_ALTS] = {"alternatives",
                "{\"type\":\"object\",\"properties\":{"
                "\"v\":{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"integer\"}},"
                "\"w\":{\"anyOf\":[{\"type\":\"object\","
                "\"properties\":{\"x\":{\"type\":\"integer\"}},"
                "\"required\":[\"x\"],\"additionalProperties\":false},"
                "{\"type\":\"array\",\"items\":{\"type\":\"string\"}},{\"type\":\"string\"},"
                "{\"type\":\"number\"},{\"type\":\"boolean\"},{\"type\":\"null\"}]},"
                "\"o\":{\"oneOf\":[{\"type\":\"string\",\"enum\":[\"x\",\"y\"]},"
                "{\"type\":\"integer\"}]},"
                "\"t\":{\"type\":[\"object\",\"null\"],"
                "\"properties\":{\"k\":{\"type\":\"boolean\"}}},"
                "\"s\":{\"type\":[\"string\",\"integer\",\"boolean\"]}},\"required\":[\"w\"]}"},
    [S_CLOSED] = {"closed", "{\"type\":\"object\",\"additionalProperties\":false}"},
    [S_OPEN] = {"open", "{\"type\":\"object\",\"title\":\"anything\"}"},
    [S_PREFIX] = {"prefix",
                  "{\"$defs\":{\"A\":{\"$ref\":\"#/$defs/B\"},"
                  "\"B\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
                  "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                  "\"ab\":{\"type\":\"string\"},\"abc\":{\"type\":\"boolean\"},"
                  "\"b\":{\"type\":\"null\"},\"abd\":{\"type\":\"integer\"},"
                  "\"e\":{\"enum\":[\"a\",\"ab\",\"abc\",1,12,123,-1,true]},"
                  "\"opt\":{\"anyOf\":[{\"enum\":[\"x\",\"y\"]},{\"type\":\"null\"}]},"
                  "\"nest\":{\"anyOf\":[{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
                  "{\"type\":\"integer\"}]},"
                  "\"arr\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\"},"
                  "{\"type\":\"integer\"}]},\"maxItems\":2},"
                  "\"chain\":{\"$ref\":\"#/$defs/A\"},"
                  "\"loose\":{\"type\":\"array\",\"items\":true,\"maxItems\":2},"
                  "\"empty\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}},"
                  "\"required\":[\"abc\"]}"},
};

/* The schema under test: as jansson reads it (the oracles' view) and as compiled. */
static json_t *root_schema;
static graft__json_schema *compiled;

/* ---- texts of schema nodes, cached by node ------------------------------------------------ */

/* For an object schema (props): its properties in the order listed, each as the compact JSON
 * text of its name (the only way a key may be written), its schema and whether it is
 * required. For an enum or const (not props): the compact JSON text of each value (the only
 * way a value may be written). Built once per node of root_schema; cache_clear frees them. */
typedef struct {
    const json_t *node; /* NULL: a free slot */
    bool props;
    size_t n;
    char **text;
    size_t *len;
    json_t **schema;
    bool *required;
    bool listed; /* props: the node has a "properties" keyword */
    bool closed; /* props: additionalProperties is false */
} texts;

enum { CACHE_SLOTS = 1024, MAX_TEXTS = 64 /* bits of a uint64_t set of candidates */ };
static texts cache[CACHE_SLOTS];

static texts *cache_slot(const json_t *node, bool props)
{
    size_t h = (size_t)(((uintptr_t)node >> 4) * 2654435761u) + props;
    for (size_t k = 0;; k++) {
        assert_true(k < CACHE_SLOTS);
        texts *e = &cache[(h + k) % CACHE_SLOTS];
        if (e->node == NULL || (e->node == node && e->props == props))
            return e;
    }
}

static void cache_clear(void)
{
    for (size_t k = 0; k < CACHE_SLOTS; k++) {
        for (size_t i = 0; i < cache[k].n; i++)
            free(cache[k].text[i]);
        free(cache[k].text);
        free(cache[k].len);
        free(cache[k].schema);
        free(cache[k].required);
    }
    memset(cache, 0, sizeof cache);
}

static void texts_alloc(texts *e, size_t n)
{
    assert_true(n <= MAX_TEXTS);
    e->n = n;
    e->text = calloc(n + 1, sizeof *e->text);
    e->len = calloc(n + 1, sizeof *e->len);
    e->schema = calloc(n + 1, sizeof *e->schema);
    e->required = calloc(n + 1, sizeof *e->required);
    assert_true(e->text && e->len && e->schema && e->required);
}

/* The header's "compact JSON text": json_dumps with JSON_COMPACT | JSON_ENCODE_ANY. */
static void set_text(texts *e, size_t k, const json_t *v)
{
    e->text[k] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    assert_non_null(e->text[k]);
    e->len[k] = strlen(e->text[k]);
}

static const texts *enum_of(const json_t *s)
{
    texts *e = cache_slot(s, false);
    if (e->node != NULL)
        return e;
    const json_t *list = json_object_get(s, "enum");
    texts_alloc(e, list != NULL ? json_array_size(list) : 1);
    for (size_t k = 0; k < e->n; k++)
        set_text(e, k, list != NULL ? json_array_get(list, k) : json_object_get(s, "const"));
    e->node = s;
    return e;
}

/* json_object_foreach visits members in the order the schema text lists them (jansson keeps
 * insertion order since 2.8), which is the order properties are generated in. */
static const texts *props_of(json_t *s)
{
    texts *e = cache_slot(s, true);
    if (e->node != NULL)
        return e;
    json_t *props = json_object_get(s, "properties"), *required = json_object_get(s, "required");
    texts_alloc(e, json_object_size(props));
    e->props = true;
    e->listed = props != NULL;
    e->closed = json_is_false(json_object_get(s, "additionalProperties"));
    size_t k = 0, r;
    const char *name;
    json_t *sub, *req;
    json_object_foreach(props, name, sub) {
        json_t *str = json_string(name);
        set_text(e, k, str);
        json_decref(str);
        e->schema[k] = sub;
        json_array_foreach(required, r, req) {
            e->required[k] |= strcmp(json_string_value(req), name) == 0;
        }
        k++;
    }
    e->node = s;
    return e;
}

/* An object's (or free object's) member rules when nothing is listed or closed. */
static const texts free_members;

/* ---- kinds, and the branch a value's first byte picks -------------------------------------- */

enum kind { K_NONE = -1, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_BOOL, K_NULL, N_KINDS };

static enum kind kind_of(int c)
{
    switch (c) {
    case '{':
        return K_OBJECT;
    case '[':
        return K_ARRAY;
    case '"':
        return K_STRING;
    case 't':
    case 'f':
        return K_BOOL;
    case 'n':
        return K_NULL;
    default:
        return c == '-' || (c >= '0' && c <= '9') ? K_NUMBER : K_NONE;
    }
}

static enum kind kind_of_type(const char *type)
{
    static const char *const names[] = {"object", "array", "string", "number", "boolean", "null"};
    if (strcmp(type, "integer") == 0)
        return K_NUMBER;
    for (int k = 0; k < N_KINDS; k++)
        if (strcmp(type, names[k]) == 0)
            return (enum kind)k;
    return K_NONE;
}

/* Follows $ref ("#", "#/$defs/X", "#/definitions/X") and allOf of one schema (its siblings in
 * these schemas are annotations). */
static json_t *deref(json_t *s)
{
    for (int hops = 0; json_is_object(s); hops++) {
        assert_true(hops < 64); /* a cycle of references with no value between: not here */
        json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
        if (ref != NULL) {
            const char *to = json_string_value(ref);
            if (strcmp(to, "#") == 0)
                s = root_schema;
            else if (strncmp(to, "#/$defs/", 8) == 0)
                s = json_object_get(json_object_get(root_schema, "$defs"), to + 8);
            else {
                assert_true(strncmp(to, "#/definitions/", 14) == 0);
                s = json_object_get(json_object_get(root_schema, "definitions"), to + 14);
            }
            assert_non_null(s);
        } else if (all != NULL)
            s = json_array_get(all, 0);
        else
            break;
    }
    return s;
}

/* `true`, `{}` or a schema with no type (nor enum, const, anyOf, oneOf): any JSON value. */
static bool is_any(const json_t *s)
{
    return json_is_true(s) ||
           (json_is_object(s) && json_object_get(s, "type") == NULL &&
            json_object_get(s, "enum") == NULL && json_object_get(s, "const") == NULL &&
            json_object_get(s, "anyOf") == NULL && json_object_get(s, "oneOf") == NULL);
}

typedef enum { PICK_NONE, PICK_ANY, PICK_ENUM, PICK_TYPED } pick_kind;

/* The schema a value of kind k must match under s: none, any value, one of the texts of the
 * enum or const w.s, or the node w.s read as type w.type (one name of a type list). The
 * alternatives of anyOf / oneOf begin differently, so the first that takes k is the one. */
typedef struct {
    json_t *s;
    const char *type;
} view;

static pick_kind pick(json_t *s, enum kind k, view *w)
{
    s = deref(s);
    if (is_any(s))
        return PICK_ANY;
    w->s = s;
    if (json_object_get(s, "enum") != NULL || json_object_get(s, "const") != NULL) {
        const texts *e = enum_of(s);
        for (size_t i = 0; i < e->n; i++)
            if (kind_of((uint8_t)e->text[i][0]) == k)
                return PICK_ENUM;
        return PICK_NONE;
    }
    json_t *alts = json_object_get(s, "anyOf");
    if (alts == NULL)
        alts = json_object_get(s, "oneOf");
    size_t i;
    json_t *a;
    if (alts != NULL) {
        json_array_foreach(alts, i, a) {
            pick_kind p = pick(a, k, w);
            if (p != PICK_NONE)
                return p;
        }
        return PICK_NONE;
    }
    json_t *type = json_object_get(s, "type");
    if (json_is_string(type) && kind_of_type(json_string_value(type)) == k) {
        w->type = json_string_value(type);
        return PICK_TYPED;
    }
    json_array_foreach(type, i, a) {
        if (kind_of_type(json_string_value(a)) == k) {
            w->type = json_string_value(a);
            return PICK_TYPED;
        }
    }
    return PICK_NONE;
}

static size_t min_items(const json_t *s)
{
    return (size_t)json_integer_value(json_object_get(s, "minItems"));
}

static size_t max_items(const json_t *s)
{
    const json_t *m = json_object_get(s, "maxItems");
    return m != NULL ? (size_t)json_integer_value(m) : SIZE_MAX;
}

/* The header: a number the schema types (not an enum's, not a free value's) has at most 18
 * digits before its point, 18 after it and 2 in its exponent. */
enum { TYPED_DIGITS = 18, TYPED_EXPONENT_DIGITS = 2 };

static bool is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* ---- the reference: a reader of prefixes led by the schema -------------------------------- */

/* Reads t[0..n) as the start of an instance. Each function reads one construct; when it meets
 * a byte that no instance continues with, it records the byte's index in fail and returns
 * false; when the input runs out, it writes to out what finishes the construct (the empty
 * string, a "0", the rest of a key or enum text, the required properties, minItems items,
 * closing brackets, the LF after a CR), and the callers finish theirs: so every read from then
 * on writes. A construct is refused at the byte that makes it impossible: a key at the first
 * byte that no allowed property's text has there, '}' when a required property is missing, ','
 * when no property or item can follow, a number's '.' or 'e' under "integer", a digit past a
 * typed number's limits (TYPED_DIGITS, TYPED_EXPONENT_DIGITS), a bracket that
 * opens level GRAFT__SCHEMA_MAX_DEPTH + 1 under the schema or GRAFT__JSON_MAX_DEPTH + 1 in
 * all. */
typedef struct {
    const uint8_t *t;
    size_t n, i;
    graft_test_bytes *out;
    size_t fail;       /* SIZE_MAX while nothing was refused */
    int depth, sdepth; /* objects and arrays open; of them, those under the schema */
} reader;

static int peek(const reader *r) { return r->i < r->n ? r->t[r->i] : -1; }

static bool refuse(reader *r)
{
    r->fail = r->i;
    return false;
}

static bool take(reader *r, uint8_t c)
{
    if (r->i == r->n) {
        graft_test_put_byte(r->out, c);
        return true;
    }
    if (r->t[r->i] != c)
        return refuse(r);
    r->i++;
    return true;
}

/* Empty, one space or tab, or a line break (LF or CR LF) and at most GRAFT__JSON_MAX_INDENT
 * spaces and tabs. A second run right after is refused by whoever reads the next token. */
static bool ws(reader *r)
{
    int c = peek(r);
    if (c == ' ' || c == '\t') {
        r->i++;
        return true;
    }
    if (c == '\r') {
        r->i++;
        if (peek(r) < 0) {
            graft_test_put_byte(r->out, '\n');
            return true;
        }
        if (peek(r) != '\n')
            return refuse(r);
        c = '\n';
    }
    if (c != '\n')
        return true;
    r->i++;
    for (int k = 0; k < GRAFT__JSON_MAX_INDENT && (peek(r) == ' ' || peek(r) == '\t'); k++)
        r->i++;
    return true;
}

static bool literal(reader *r, const char *word)
{
    for (; *word != '\0'; word++)
        if (!take(r, (uint8_t)*word))
            return false;
    return true;
}

/* One or more digits, at most max (a digit past them is refused); "0" written when the input
 * runs out first. */
static bool digits(reader *r, size_t max)
{
    if (peek(r) < 0) {
        graft_test_put_byte(r->out, '0');
        return true;
    }
    if (!is_digit(peek(r)))
        return refuse(r);
    for (size_t k = 0; is_digit(peek(r)); k++) {
        if (k == max)
            return refuse(r);
        r->i++;
    }
    return true;
}

/* RFC 8259's number. typed: the schema types it, so the digit limits hold; integer: without
 * fraction and exponent. It ends at the first byte that cannot continue it, which its caller
 * reads. */
static bool number(reader *r, bool typed, bool integer)
{
    size_t max = typed ? TYPED_DIGITS : SIZE_MAX;
    if (peek(r) == '-')
        r->i++;
    if (peek(r) == '0')
        r->i++;
    else if (!digits(r, max))
        return false;
    if (peek(r) == '.') {
        if (integer)
            return refuse(r);
        r->i++;
        if (!digits(r, max))
            return false;
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        if (integer)
            return refuse(r);
        r->i++;
        if (peek(r) == '+' || peek(r) == '-')
            r->i++;
        if (!digits(r, typed ? TYPED_EXPONENT_DIGITS : SIZE_MAX))
            return false;
    }
    return true;
}

/* After the backslash. *high: a \u escape of a high surrogate came just before, so this must
 * be a \u escape of a low one. A \u escape is refused at the digit that rules out every
 * allowed unit: after a high one, a first digit other than D or a second below C; otherwise a
 * second digit that makes it a low one (DC-DF). Running out, it finishes with 1s (no
 * surrogate can be made so but one begun), or the rest of "DC00" when a low one is due. */
static bool escape(reader *r, bool *high)
{
    int c = peek(r);
    if (c < 0) {
        graft_test_put_str(r->out, *high ? "uDC00" : "n");
        *high = false;
        return true;
    }
    if (*high && c != 'u')
        return refuse(r);
    if (c != 'u') {
        if (c == 0 || memchr("\"\\/bfnrt", c, 8) == NULL)
            return refuse(r);
        r->i++;
        return true;
    }
    r->i++;
    unsigned unit = 0;
    for (int k = 0; k < 4; k++) {
        c = peek(r);
        if (c < 0) {
            if (*high) {
                graft_test_put_str(r->out, &"DC00"[k]);
                *high = false;
                return true;
            }
            for (int m = k; m < 4; m++) {
                graft_test_put_byte(r->out, '1');
                unit = unit << 4 | 1;
            }
            *high = unit >= 0xD800 && unit <= 0xDBFF;
            return true;
        }
        int d = graft_test_hex_digit(c);
        if (d < 0)
            return refuse(r);
        unsigned so_far = unit << 4 | (unsigned)d;
        if ((*high && k == 0 && d != 0xD) || (*high && k == 1 && d < 0xC) ||
            (!*high && k == 1 && so_far >= 0xDC && so_far <= 0xDF))
            return refuse(r);
        unit = so_far;
        r->i++;
    }
    *high = !*high && unit >= 0xD800 && unit <= 0xDBFF;
    return true;
}

/* One UTF-8 character from its lead byte, without overlong forms, surrogates or code points
 * above U+10FFFF; running out, the smallest continuation bytes. */
static bool utf8(reader *r)
{
    int c = peek(r), more;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        more = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        more = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        more = 3;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else
        return refuse(r);
    r->i++;
    for (; more > 0; more--, lo = 0x80, hi = 0xBF) {
        c = peek(r);
        if (c < 0) {
            graft_test_put_byte(r->out, lo);
            for (int m = 1; m < more; m++)
                graft_test_put_byte(r->out, 0x80);
            return true;
        }
        if (c < lo || c > hi)
            return refuse(r);
        r->i++;
    }
    return true;
}

static bool string(reader *r)
{
    if (!take(r, '"'))
        return false;
    bool high = false;
    for (;;) {
        int c = peek(r);
        if (c < 0) {
            graft_test_put_str(r->out, high ? "\\uDC00\"" : "\"");
            return true;
        }
        if (high && c != '\\')
            return refuse(r);
        if (c == '"') {
            r->i++;
            return true;
        }
        if (c < 0x20)
            return refuse(r);
        if (c == '\\') {
            r->i++;
            if (!escape(r, &high))
                return false;
        } else if (c < 0x80)
            r->i++;
        else if (!utf8(r))
            return false;
    }
}

static size_t lowest(uint64_t set) { return (size_t)__builtin_ctzll(set); }

/* The value's text is one of e's texts, byte for byte. It ends where no text continues and
 * one has ended; running out, the first text still possible is finished. */
static bool enum_value(reader *r, const texts *e)
{
    uint64_t alive = e->n == 64 ? ~0ull : (1ull << e->n) - 1;
    for (size_t pos = 0;; pos++) {
        bool ended = false;
        uint64_t still = 0;
        int c = peek(r);
        for (uint64_t a = alive; a != 0; a &= a - 1) {
            size_t k = lowest(a);
            ended |= e->len[k] == pos;
            if (e->len[k] > pos && (uint8_t)e->text[k][pos] == c)
                still |= 1ull << k;
        }
        if (c < 0) {
            if (!ended)
                graft_test_put(r->out, e->text[lowest(alive)] + pos, e->len[lowest(alive)] - pos);
            return true;
        }
        if (still == 0)
            return ended ? true : refuse(r);
        alive = still;
        r->i++;
    }
}

/* The key of a listed property: the next one that may come is `next`; one may be skipped
 * when it is not required. The key's text is the property's compact text, byte for byte (the
 * texts are complete JSON strings, so none is a prefix of another). */
static bool key(reader *r, const texts *p, size_t next, size_t *j)
{
    uint64_t alive = 0;
    for (size_t k = next; k < p->n; k++) {
        alive |= 1ull << k;
        if (p->required[k])
            break;
    }
    if (alive == 0)
        return refuse(r);
    for (size_t pos = 0;; pos++) {
        int c = peek(r);
        if (c < 0) {
            *j = lowest(alive);
            graft_test_put(r->out, p->text[*j] + pos, p->len[*j] - pos);
            return true;
        }
        uint64_t still = 0;
        for (uint64_t a = alive; a != 0; a &= a - 1)
            if (p->len[lowest(a)] > pos && (uint8_t)p->text[lowest(a)][pos] == c)
                still |= 1ull << lowest(a);
        if (still == 0)
            return refuse(r);
        alive = still;
        r->i++;
        for (uint64_t a = alive; a != 0; a &= a - 1)
            if (p->len[lowest(a)] == pos + 1) {
                *j = lowest(a);
                return true;
            }
    }
}

static bool value(reader *r, json_t *s);
static bool free_value(reader *r);

/* schemad: the level is under the schema's control and counts toward its limit. */
static bool open_level(reader *r, uint8_t bracket, bool schemad)
{
    if (r->depth >= GRAFT__JSON_MAX_DEPTH || (schemad && r->sdepth >= GRAFT__SCHEMA_MAX_DEPTH))
        return refuse(r);
    r->depth++;
    r->sdepth += schemad;
    return take(r, bracket);
}

static bool close_level(reader *r, uint8_t bracket, bool schemad)
{
    r->depth--;
    r->sdepth -= schemad;
    return take(r, bracket);
}

static bool required_from(const texts *p, size_t next)
{
    for (; next < p->n; next++)
        if (p->required[next])
            return true;
    return false;
}

static bool member(reader *r, const texts *p, size_t *next)
{
    json_t *vs = NULL; /* NULL: the value is free */
    if (p->listed) {
        size_t j;
        if (!key(r, p, *next, &j))
            return false;
        vs = p->schema[j];
        *next = j + 1;
    } else if (p->closed)
        return refuse(r);
    else if (!string(r))
        return false;
    if (!ws(r) || !take(r, ':') || !ws(r))
        return false;
    return vs != NULL ? value(r, vs) : free_value(r);
}

static bool end_object(reader *r, const texts *p, size_t next, bool schemad)
{
    if (required_from(p, next))
        return refuse(r);
    return close_level(r, '}', schemad);
}

/* Members in the listed order (p->listed), or any members (neither listed nor closed), or none
 * (closed). Running out, the required properties not yet read are written. */
static bool object(reader *r, const texts *p, bool schemad)
{
    size_t next = 0; /* the index of the first property that may still come */
    if (!open_level(r, '{', schemad) || !ws(r))
        return false;
    int c = peek(r);
    if (c == '}' || (c < 0 && !required_from(p, 0)))
        return end_object(r, p, 0, schemad);
    for (;;) {
        if (!member(r, p, &next) || !ws(r))
            return false;
        c = peek(r);
        if (c == ',' || (c < 0 && required_from(p, next))) {
            if (p->listed ? next >= p->n : p->closed)
                return refuse(r);
            if (!take(r, ',') || !ws(r))
                return false;
        } else if (c == '}' || c < 0)
            return end_object(r, p, next, schemad);
        else
            return refuse(r);
    }
}

static bool end_array(reader *r, size_t min, size_t count, bool schemad)
{
    if (count < min)
        return refuse(r);
    return close_level(r, ']', schemad);
}

/* items NULL: the items are free. Running out, items are written up to min. */
static bool array(reader *r, json_t *items, size_t min, size_t max, bool schemad)
{
    size_t count = 0;
    if (!open_level(r, '[', schemad) || !ws(r))
        return false;
    int c = peek(r);
    if (c == ']' || (c < 0 && min == 0))
        return end_array(r, min, 0, schemad);
    if (max == 0)
        return refuse(r);
    for (;;) {
        if (!(items != NULL ? value(r, items) : free_value(r)) || !ws(r))
            return false;
        count++;
        c = peek(r);
        if (c == ',' || (c < 0 && count < min)) {
            if (count >= max)
                return refuse(r);
            if (!take(r, ',') || !ws(r))
                return false;
        } else if (c == ']' || c < 0)
            return end_array(r, min, count, schemad);
        else
            return refuse(r);
    }
}

/* Any JSON value; its objects and arrays are not under the schema. */
static bool free_value(reader *r)
{
    int c = peek(r);
    switch (c < 0 ? K_NULL : kind_of(c)) {
    case K_OBJECT:
        return object(r, &free_members, false);
    case K_ARRAY:
        return array(r, NULL, 0, SIZE_MAX, false);
    case K_STRING:
        return string(r);
    case K_NUMBER:
        return number(r, false, false);
    case K_BOOL:
        return literal(r, c == 'f' ? "false" : "true");
    case K_NULL:
        return literal(r, "null");
    default:
        return refuse(r);
    }
}

/* The kind written for s when the input runs out before a value: a scalar first, so that
 * recursive schemas end. */
static enum kind first_kind(json_t *s)
{
    static const enum kind order[] = {K_NULL, K_BOOL, K_NUMBER, K_STRING, K_ARRAY, K_OBJECT};
    view w;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (pick(s, order[i], &w) != PICK_NONE)
            return order[i];
    return K_NONE;
}

static bool value(reader *r, json_t *s)
{
    int c = peek(r);
    enum kind k = c < 0 ? first_kind(s) : kind_of(c);
    view w = {NULL, NULL};
    switch (k == K_NONE ? PICK_NONE : pick(s, k, &w)) {
    case PICK_NONE:
        return refuse(r);
    case PICK_ANY:
        return free_value(r);
    case PICK_ENUM:
        return enum_value(r, enum_of(w.s));
    case PICK_TYPED:
        break;
    }
    switch (k) {
    case K_OBJECT:
        return object(r, props_of(w.s), true);
    case K_ARRAY:
        return array(r, json_object_get(w.s, "items"), min_items(w.s), max_items(w.s), true);
    case K_STRING:
        return string(r);
    case K_NUMBER:
        return number(r, true, strcmp(w.type, "integer") == 0);
    case K_BOOL:
        return literal(r, c == 'f' ? "false" : "true");
    default:
        return literal(r, "null");
    }
}

typedef struct {
    size_t fail;     /* the first byte no instance continues with; SIZE_MAX: none */
    size_t closed;   /* the length of the prefix that closes the top object; SIZE_MAX: none */
    graft_test_bytes completion;  /* when nothing was refused: what makes the text an instance */
} reading;

/* Whitespace, the top object, whitespace; nothing after. */
static reading reference(const uint8_t *t, size_t n)
{
    reading g = {SIZE_MAX, SIZE_MAX, {NULL, 0, 0}};
    graft_test_put(&g.completion, "", 0);
    reader r = {t, n, 0, &g.completion, SIZE_MAX, 0, 0};
    if (ws(&r)) {
        if (peek(&r) >= 0 && peek(&r) != '{')
            refuse(&r);
        else if (value(&r, root_schema)) {
            if (g.completion.n == 0)
                g.closed = r.i;
            if (ws(&r) && peek(&r) >= 0)
                refuse(&r);
        }
    }
    g.fail = r.fail;
    return g;
}

/* ---- the validator: jansson, the header's limits, and the schema on the raw text ---------- */

typedef graft_test_truth truth;

/* Whether every run of whitespace between tokens (and around the object) is empty, one space
 * or tab, or one line break (LF or CR LF) and at most GRAFT__JSON_MAX_INDENT spaces and tabs,
 * and brackets nest at most GRAFT__JSON_MAX_DEPTH deep. For a text jansson takes. */
static bool layout_ok(const uint8_t *t, size_t n)
{
    int depth = 0;
    for (size_t i = 0; i < n;) {
        if (t[i] == '"') {
            for (i++; t[i] != '"'; i += t[i] == '\\' ? 2 : 1)
                ;
            i++;
        } else if (is_space(t[i])) {
            size_t run = 1;
            if (t[i] == '\r')
                run = i + 1 < n && t[i + 1] == '\n' ? 2 : 0;
            if (run == 0)
                return false;
            if (t[i] != ' ' && t[i] != '\t')
                for (size_t k = 0; k < GRAFT__JSON_MAX_INDENT && i + run < n &&
                                   (t[i + run] == ' ' || t[i + run] == '\t');
                     k++)
                    run++;
            i += run;
            if (i < n && is_space(t[i]))
                return false;
        } else {
            if (t[i] == '{' || t[i] == '[')
                depth++;
            else if (t[i] == '}' || t[i] == ']')
                depth--;
            if (depth > GRAFT__JSON_MAX_DEPTH)
                return false;
            i++;
        }
    }
    return true;
}

/* A value of a text jansson takes, as written: its kind and text, and for an object or array
 * its members' key texts (quotes included) and values. */
typedef struct tnode {
    enum kind kind;
    size_t start, end;
    size_t n, cap;
    struct tnode *kids;
    size_t *key_start, *key_end;
} tnode;

static size_t skip_space(const uint8_t *t, size_t n, size_t i)
{
    while (i < n && is_space(t[i]))
        i++;
    return i;
}

/* i: after an opening quote; returns the index after the closing one. */
static size_t past_string(const uint8_t *t, size_t i)
{
    for (; t[i] != '"'; i += t[i] == '\\' ? 2 : 1)
        ;
    return i + 1;
}

static size_t build(const uint8_t *t, size_t n, size_t i, tnode *v)
{
    memset(v, 0, sizeof *v);
    v->kind = kind_of(t[i]);
    v->start = i;
    if (v->kind == K_OBJECT || v->kind == K_ARRAY) {
        uint8_t close = v->kind == K_OBJECT ? '}' : ']';
        for (i = skip_space(t, n, i + 1); t[i] != close;) {
            if (v->n == v->cap) {
                v->cap = 2 * v->cap + 4;
                v->kids = realloc(v->kids, v->cap * sizeof *v->kids);
                v->key_start = realloc(v->key_start, v->cap * sizeof *v->key_start);
                v->key_end = realloc(v->key_end, v->cap * sizeof *v->key_end);
                assert_true(v->kids && v->key_start && v->key_end);
            }
            if (v->kind == K_OBJECT) {
                v->key_start[v->n] = i;
                i = v->key_end[v->n] = past_string(t, i + 1);
                i = skip_space(t, n, skip_space(t, n, i) + 1); /* the colon */
            }
            i = skip_space(t, n, build(t, n, i, &v->kids[v->n]));
            v->n++;
            if (t[i] == ',')
                i = skip_space(t, n, i + 1);
        }
        i++;
    } else if (v->kind == K_STRING)
        i = past_string(t, i + 1);
    else
        while (i < n && !is_space(t[i]) && memchr(",]}", t[i], 3) == NULL)
            i++;
    v->end = i;
    return i;
}

static void free_tree(tnode *v)
{
    for (size_t k = 0; k < v->n; k++)
        free_tree(&v->kids[k]);
    free(v->kids);
    free(v->key_start);
    free(v->key_end);
}

static bool validate(json_t *s, const uint8_t *t, const tnode *v, int sdepth);

/* Keys in the listed order, skipping only properties that are not required, every required
 * one present; with nothing listed, any members, or none when closed. */
static bool validate_object(json_t *s, const uint8_t *t, const tnode *v, int sdepth)
{
    const texts *p = props_of(s);
    if (!p->listed)
        return !p->closed || v->n == 0;
    size_t next = 0;
    for (size_t m = 0; m < v->n; m++) {
        size_t len = v->key_end[m] - v->key_start[m], j = next;
        while (j < p->n &&
               !(p->len[j] == len && memcmp(p->text[j], t + v->key_start[m], len) == 0)) {
            if (p->required[j])
                return false;
            j++;
        }
        if (j == p->n || !validate(p->schema[j], t, &v->kids[m], sdepth))
            return false;
        next = j + 1;
    }
    return !required_from(p, next);
}

/* sdepth: the objects and arrays under the schema that enclose v. */
static bool validate(json_t *s, const uint8_t *t, const tnode *v, int sdepth)
{
    view w = {NULL, NULL};
    switch (pick(s, v->kind, &w)) {
    case PICK_NONE:
        return false;
    case PICK_ANY:
        return true;
    case PICK_ENUM: {
        const texts *e = enum_of(w.s);
        for (size_t k = 0; k < e->n; k++)
            if (e->len[k] == v->end - v->start && memcmp(e->text[k], t + v->start, e->len[k]) == 0)
                return true;
        return false;
    }
    case PICK_TYPED:
        break;
    }
    if (v->kind == K_NUMBER) { /* the digit limits, and no fraction or exponent in an integer */
        bool integer = strcmp(w.type, "integer") == 0;
        size_t run = 0, limit = TYPED_DIGITS;
        for (size_t i = v->start; i < v->end; i++) {
            if (is_digit(t[i]) && ++run > limit)
                return false;
            if (t[i] == '.' || t[i] == 'e' || t[i] == 'E') {
                if (integer)
                    return false;
                run = 0;
                limit = t[i] == '.' ? TYPED_DIGITS : TYPED_EXPONENT_DIGITS;
            }
        }
        return true;
    }
    if (v->kind == K_OBJECT)
        return sdepth < GRAFT__SCHEMA_MAX_DEPTH && validate_object(w.s, t, v, sdepth + 1);
    if (v->kind != K_ARRAY)
        return true;
    json_t *items = json_object_get(w.s, "items");
    if (sdepth >= GRAFT__SCHEMA_MAX_DEPTH || v->n < min_items(w.s) || v->n > max_items(w.s))
        return false;
    for (size_t k = 0; k < v->n && items != NULL; k++)
        if (!validate(items, t, &v->kids[k], sdepth + 1))
            return false;
    return true;
}

/* Whether t[0..n) is an instance: one object by jansson's reading (json_oracle.h), then the
 * limits (layout_ok) and the schema (validate). */
static truth truth_of(const uint8_t *t, size_t n)
{
    truth object = graft_test_jansson_object(t, n);
    if (object != GRAFT_TEST_VALID)
        return object;
    if (!layout_ok(t, n))
        return GRAFT_TEST_INVALID;
    tnode tree;
    build(t, n, skip_space(t, n, 0), &tree);
    bool ok = validate(root_schema, t, &tree, 0);
    free_tree(&tree);
    return ok ? GRAFT_TEST_VALID : GRAFT_TEST_INVALID;
}

/* ---- the recognizer against the oracles ---------------------------------------------------- */

typedef struct {
    size_t refused; /* the index of the first refused byte; n when none was */
    bool done;      /* done() of the state that accepted t[0..refused) */
} verdict;

/* done_at, when given (n + 1 entries), gets done() after each accepted prefix. */
static verdict recognize(const uint8_t *t, size_t n, bool *done_at)
{
    graft__json_syntax s;
    graft__json_syntax_init_schema(&s, compiled);
    for (size_t i = 0;; i++) {
        bool done = graft__json_syntax_done(&s);
        if (done_at != NULL)
            done_at[i] = done;
        if (i == n || !graft__json_syntax_feed(&s, t[i]))
            return (verdict){i, done};
    }
}

/* The reference's first refused byte (n: none) and whether the whole text is an instance. */
typedef struct {
    size_t refused;
    bool done;
} expected;

static expected expect_of(const reading *g, size_t n)
{
    return (expected){g->fail == SIZE_MAX ? n : g->fail,
                      g->fail == SIZE_MAX && g->completion.n == 0};
}

static bool disagrees(const uint8_t *t, size_t n)
{
    reading g = reference(t, n);
    expected e = expect_of(&g, n);
    free(g.completion.p);
    verdict v = recognize(t, n, NULL);
    return g.fail != n && (v.refused != e.refused || (e.refused == n && v.done != e.done));
}

/* Deletes runs of bytes while the recognizer and the reference still disagree, and prints
 * what is left: a small case to paste into hand_cases. */
static void shrink(const uint8_t *t, size_t n)
{
    graft_test_bytes b = {NULL, 0, 0}, c = {NULL, 0, 0};
    graft_test_put(&b, t, n);
    for (size_t chunk = 32; chunk > 0; chunk /= 2) {
        for (size_t i = 0; i + chunk <= b.n;) {
            c.n = 0;
            graft_test_put(&c, b.p, i);
            graft_test_put(&c, b.p + i + chunk, b.n - i - chunk);
            if (disagrees(c.p, c.n)) {
                graft_test_bytes swap = b;
                b = c;
                c = swap;
            } else
                i++;
        }
    }
    reading g = reference(b.p, b.n);
    expected e = expect_of(&g, b.n);
    verdict v = recognize(b.p, b.n, NULL);
    print_error("    shrunk: refused at %zu (done %d) expected, at %zu (done %d) got: ", e.refused,
                e.done, v.refused, v.done);
    graft_test_print_literal(b.p, b.n);
    print_error("\n");
    free(g.completion.p);
    free(b.p);
    free(c.p);
}

/* The reference's completion of t[0..k), appended to it; false when it has none. */
static bool complete(const uint8_t *t, size_t k, graft_test_bytes *out)
{
    reading g = reference(t, k);
    out->n = 0;
    graft_test_put(out, t, k);
    graft_test_put(out, g.completion.p, g.completion.n);
    free(g.completion.p);
    return g.fail == SIZE_MAX;
}

/* A copy of the state is a fork: fed the rest of t while the original is fed another byte, it
 * gives the same verdict as one state fed all of t. */
static void check_fork(const uint8_t *t, size_t n, verdict v)
{
    size_t at = graft_test_below(v.refused + 1);
    graft__json_syntax s, copy;
    graft__json_syntax_init_schema(&s, compiled);
    for (size_t i = 0; i < at; i++)
        assert_true(graft__json_syntax_feed(&s, t[i]));
    copy = s;
    (void)graft__json_syntax_feed(&s, (uint8_t)"}]\",0 x"[graft_test_below(7)]);
    for (size_t i = at;; i++) {
        bool done = graft__json_syntax_done(&copy);
        if (i == n || !graft__json_syntax_feed(&copy, t[i])) {
            if (i != v.refused || done != v.done)
                report("a copy of the state is not a fork (index: the copy's first refused byte)",
                       t, n, v.refused, i);
            return;
        }
    }
}

/* Holds the recognizer on t[0..n) to the oracles (see the header comment); generated: t is a
 * generated instance, which the oracles must take. */
static void check_text(const uint8_t *t, size_t n, bool generated)
{
    reading g = reference(t, n);
    expected e = expect_of(&g, n);
    truth whole = truth_of(t, n);
    if (g.fail == n)
        report("oracle: the reference refused at the end", t, n, n + 1, n);
    if (whole != GRAFT_TEST_UNKNOWN && (whole == GRAFT_TEST_VALID) != e.done)
        report("oracle: the reference and the validator disagree on the whole text", t, n,
               whole == GRAFT_TEST_VALID, e.done);
    if (generated && whole != GRAFT_TEST_VALID)
        report("oracle: a generated instance is not valid", t, n, GRAFT_TEST_VALID, whole);

    bool *done_at = malloc(n + 1);
    assert_non_null(done_at);
    verdict v = recognize(t, n, done_at);
    graft_test_bytes witness = {NULL, 0, 0};
    if (v.refused != e.refused) {
        if (report("first refused byte", t, n, e.refused, v.refused)) {
            if (v.refused < e.refused && complete(t, v.refused + 1, &witness)) {
                print_error("    an instance that goes on with the refused byte: ");
                graft_test_print_literal(witness.p, witness.n);
                print_error("\n");
            }
            shrink(t, n);
        }
    } else if (e.refused == n && v.done != e.done &&
               report("done at the end", t, n, e.done, v.done))
        shrink(t, n);
    if (v.refused == n && v.done && whole == GRAFT_TEST_INVALID)
        report("soundness: accepted to the end and done, but not an instance", t, n, 0, 1);
    if (whole == GRAFT_TEST_VALID && (v.refused < n || !v.done))
        report("completeness: an instance not accepted to the end and done (got: refused at)", t,
               n, n, v.refused);

    /* done exactly after the prefixes that close the object (and any whitespace after it but
     * a CR awaiting its LF), among those both accept */
    for (size_t k = 0; k <= min_size(v.refused, e.refused); k++) {
        bool want = g.closed != SIZE_MAX && k >= g.closed && t[k - 1] != '\r';
        if (done_at[k] != want) {
            report("done after the prefix printed", t, k, want, done_at[k]);
            break;
        }
    }
    free(done_at);

    /* the prefix the recognizer accepted has a completion the validator takes */
    if (complete(t, v.refused, &witness) && truth_of(witness.p, witness.n) == GRAFT_TEST_INVALID)
        report("oracle: the reference's completion of the accepted prefix is not an instance",
               witness.p, witness.n, GRAFT_TEST_VALID, GRAFT_TEST_INVALID);
    free(witness.p);
    free(g.completion.p);
    check_fork(t, n, v);
}

/* ---- random instances ---------------------------------------------------------------------- */

enum { GEN_DEPTH = 4 }; /* below this many levels only required properties and minItems */

/* Whitespace that the header allows between tokens; mostly none. */
static void gen_ws(graft_test_bytes *b)
{
    switch (graft_test_below(12)) {
    case 0:
        graft_test_put_byte(b, ' ');
        break;
    case 1:
        graft_test_put_byte(b, '\t');
        break;
    case 2:
    case 3: {
        graft_test_put_str(b, graft_test_one_in(2) ? "\n" : "\r\n");
        size_t indent = graft_test_one_in(4) ? GRAFT__JSON_MAX_INDENT : graft_test_below(GRAFT__JSON_MAX_INDENT + 1);
        for (; indent > 0; indent--)
            graft_test_put_byte(b, graft_test_one_in(4) ? '\t' : ' ');
        break;
    }
    default:
        break;
    }
}

static void put_unit(graft_test_bytes *b, unsigned unit)
{
    char esc[8];
    snprintf(esc, sizeof esc, graft_test_one_in(2) ? "\\u%04X" : "\\u%04x", unit);
    graft_test_put_str(b, esc);
}

static bool is_surrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

/* A JSON string: plain characters, short escapes, \u escapes (pairs for the astral planes)
 * and raw UTF-8 of 2, 3 and 4 bytes. nul: whether \u0000 may appear (not in free keys, which
 * jansson cannot load). */
static void gen_string(graft_test_bytes *b, bool nul)
{
    static const char *const escapes[] = {"\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"};
    graft_test_put_byte(b, '"');
    for (size_t k = graft_test_below(7); k > 0; k--) {
        uint32_t cp;
        switch (graft_test_below(7)) {
        case 0:
            graft_test_put_str(b, escapes[graft_test_below(8)]);
            break;
        case 1:
            cp = (uint32_t)graft_test_below(0x10000);
            put_unit(b, is_surrogate(cp) || (cp == 0 && !nul) ? 0x41 : cp);
            break;
        case 2:
            put_unit(b, 0xD800 + (unsigned)graft_test_below(0x400));
            put_unit(b, 0xDC00 + (unsigned)graft_test_below(0x400));
            break;
        case 3:
            cp = 0x80 + (uint32_t)graft_test_below(0x10000 - 0x80);
            graft_test_put_utf8(b, is_surrogate(cp) ? 0xE9 : cp);
            break;
        case 4:
            graft_test_put_utf8(b, 0x10000 + (uint32_t)graft_test_below(0x100000));
            break;
        default:
            cp = 0x20 + (uint32_t)graft_test_below(0x5F);
            graft_test_put_byte(b, cp == '"' || cp == '\\' ? 'q' : (uint8_t)cp);
            break;
        }
    }
    graft_test_put_byte(b, '"');
}

static void gen_digits(graft_test_bytes *b, size_t count)
{
    for (; count > 0; count--)
        graft_test_put_byte(b, (uint8_t)('0' + graft_test_below(10)));
}

/* Within the digit limits of a typed number, and now and then at all of them at once (where
 * a mutation's extra digit meets them); so within jansson's int64 and double too, and the
 * oracle of whole texts decides them. */
static void gen_number(graft_test_bytes *b, bool integer)
{
    bool at_limits = graft_test_one_in(8);
    if (graft_test_one_in(3))
        graft_test_put_byte(b, '-');
    if (graft_test_one_in(4) && !at_limits)
        graft_test_put_byte(b, '0');
    else {
        graft_test_put_byte(b, (uint8_t)('1' + graft_test_below(9)));
        gen_digits(b, at_limits ? TYPED_DIGITS - 1 : graft_test_below(9));
    }
    if (integer)
        return;
    if (at_limits || graft_test_one_in(2)) {
        graft_test_put_byte(b, '.');
        gen_digits(b, at_limits ? TYPED_DIGITS : 1 + graft_test_below(4));
    }
    if (at_limits || graft_test_one_in(3)) {
        graft_test_put_byte(b, graft_test_one_in(2) ? 'e' : 'E');
        if (!graft_test_one_in(3))
            graft_test_put_byte(b, graft_test_one_in(2) ? '+' : '-');
        gen_digits(b, at_limits ? TYPED_EXPONENT_DIGITS : 1 + graft_test_below(2));
    }
}

static void gen_value(graft_test_bytes *b, json_t *s, int depth);
static void gen_free(graft_test_bytes *b, enum kind k, int depth);

static enum kind random_kind(int depth)
{
    return (enum kind)(depth >= GEN_DEPTH ? K_STRING + (int)graft_test_below(4) : (int)graft_test_below(N_KINDS));
}

static void gen_object(graft_test_bytes *b, const texts *p, int depth)
{
    bool first = true;
    graft_test_put_byte(b, '{');
    gen_ws(b);
    size_t free_members_left = depth >= GEN_DEPTH ? 0 : graft_test_below(4);
    for (size_t j = 0; p->listed ? j < p->n : !p->closed && j < free_members_left; j++) {
        if (p->listed && !p->required[j] && (depth >= GEN_DEPTH || graft_test_one_in(2)))
            continue;
        if (!first) {
            gen_ws(b);
            graft_test_put_byte(b, ',');
            gen_ws(b);
        }
        first = false;
        if (p->listed)
            graft_test_put(b, p->text[j], p->len[j]);
        else
            gen_string(b, false);
        gen_ws(b);
        graft_test_put_byte(b, ':');
        gen_ws(b);
        if (p->listed)
            gen_value(b, p->schema[j], depth + 1);
        else
            gen_free(b, random_kind(depth + 1), depth + 1);
    }
    if (!first)
        gen_ws(b);
    graft_test_put_byte(b, '}');
}

static void gen_array(graft_test_bytes *b, json_t *items, size_t min, size_t max, int depth)
{
    size_t count = min + (depth >= GEN_DEPTH ? 0 : graft_test_below(min_size(max - min, 3) + 1));
    graft_test_put_byte(b, '[');
    gen_ws(b);
    for (size_t k = 0; k < count; k++) {
        if (k > 0) {
            gen_ws(b);
            graft_test_put_byte(b, ',');
            gen_ws(b);
        }
        if (items != NULL)
            gen_value(b, items, depth + 1);
        else
            gen_free(b, random_kind(depth + 1), depth + 1);
    }
    if (count > 0)
        gen_ws(b);
    graft_test_put_byte(b, ']');
}

static void gen_free(graft_test_bytes *b, enum kind k, int depth)
{
    switch (k) {
    case K_OBJECT:
        gen_object(b, &free_members, depth);
        break;
    case K_ARRAY:
        gen_array(b, NULL, 0, SIZE_MAX, depth);
        break;
    case K_STRING:
        gen_string(b, true);
        break;
    case K_NUMBER:
        gen_number(b, false);
        break;
    case K_BOOL:
        graft_test_put_str(b, graft_test_one_in(2) ? "true" : "false");
        break;
    default:
        graft_test_put_str(b, "null");
        break;
    }
}

/* A random instance of s: a kind the schema allows (deep down, a scalar where it allows one,
 * so that recursive schemas end), then a value of it. */
static void gen_value(graft_test_bytes *b, json_t *s, int depth)
{
    enum kind kinds[N_KINDS];
    size_t n = 0, scalars = 0;
    view w = {NULL, NULL};
    for (int k = 0; k < N_KINDS; k++)
        if (pick(s, (enum kind)k, &w) != PICK_NONE) {
            kinds[n++] = (enum kind)k;
            scalars += k >= K_STRING;
        }
    assert_true(n > 0);
    enum kind k = depth >= GEN_DEPTH && scalars > 0 ? kinds[n - scalars + graft_test_below(scalars)]
                                                    : kinds[graft_test_below(n)];
    pick_kind how = pick(s, k, &w);
    if (how == PICK_ANY)
        gen_free(b, k, depth);
    else if (how == PICK_ENUM) {
        const texts *e = enum_of(w.s);
        size_t options[MAX_TEXTS], count = 0;
        for (size_t i = 0; i < e->n; i++)
            if (kind_of((uint8_t)e->text[i][0]) == k)
                options[count++] = i;
        size_t i = options[graft_test_below(count)];
        graft_test_put(b, e->text[i], e->len[i]);
    } else if (k == K_OBJECT)
        gen_object(b, props_of(w.s), depth);
    else if (k == K_ARRAY)
        gen_array(b, json_object_get(w.s, "items"), min_items(w.s), max_items(w.s), depth);
    else if (k == K_NUMBER)
        gen_number(b, strcmp(w.type, "integer") == 0);
    else
        gen_free(b, k, depth);
}

/* ---- mutations ----------------------------------------------------------------------------- */

/* Bytes that matter to the grammar, UTF-8 lead and continuation bytes of each range, and NUL
 * (the array's terminator is one of its entries). */
static const uint8_t alphabet[] = "{}[]\":,\\ \t\n\r0123456789-+.eEtrufalsnxAFDCb"
"\x01\x1f\x7f\x80\x8f"
                                  "\x9f\xa0\xbf\xc0\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5\xff";

static const char *const snippets[] = {
    ",", ":", "\"", "{}", "[]", "null", "true", "false", "0", "-1", "1.0", "1e2", "-0", "01",
    "\\u0061", "\\uD800", "\\uDC00", "\\n", " ", "  ", "\n", "\r", "\r\n", "\t", ",\"x\":1",
    "\"a\"", "}", "]", "\xC3\xA9", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF",
    "\n                                 ", /* 33 spaces: one too many */
};

enum { MAX_NODES = 512 };

static void collect(const tnode *v, const tnode **all, size_t *n)
{
    if (*n == MAX_NODES)
        return;
    all[(*n)++] = v;
    for (size_t k = 0; k < v->n; k++)
        collect(&v->kids[k], all, n);
}

/* A random object among all[0..n) with at least `members` members, or NULL. */
static const tnode *random_object(const tnode **all, size_t n, size_t members)
{
    const tnode *found[MAX_NODES];
    size_t count = 0;
    for (size_t k = 0; k < n; k++)
        if (all[k]->kind == K_OBJECT && all[k]->n >= members)
            found[count++] = all[k];
    return count > 0 ? found[graft_test_below(count)] : NULL;
}

/* out: t with [from, to) replaced by src[0..len). */
static void splice(graft_test_bytes *out, const uint8_t *t, size_t n, size_t from, size_t to,
                   const void *src, size_t len)
{
    out->n = 0;
    graft_test_put(out, t, from);
    graft_test_put(out, src, len);
    graft_test_put(out, t + to, n - to);
}

/* One mutation of the instance t[0..n) (tree: its values). */
static void mutate(const uint8_t *t, size_t n, const tnode *tree, graft_test_bytes *out)
{
    const tnode *all[MAX_NODES];
    size_t nodes = 0;
    collect(tree, all, &nodes);
    size_t at = graft_test_below(n + 1), what = graft_test_below(10);
    const tnode *o = random_object(all, nodes, what == 4 ? 2 : 1);
    graft_test_bytes tmp = {NULL, 0, 0};
    if (what == 4 && o != NULL) { /* swap two adjacent members */
        size_t m = graft_test_below(o->n - 1);
        size_t a0 = o->key_start[m], a1 = o->kids[m].end, b0 = o->key_start[m + 1],
               b1 = o->kids[m + 1].end;
        graft_test_put(&tmp, t + b0, b1 - b0);
        graft_test_put(&tmp, t + a1, b0 - a1);
        graft_test_put(&tmp, t + a0, a1 - a0);
        splice(out, t, n, a0, b1, tmp.p, tmp.n);
    } else if (what == 5 && o != NULL) { /* drop a member, with a comma */
        size_t m = graft_test_below(o->n);
        if (m + 1 < o->n)
            splice(out, t, n, o->key_start[m], o->key_start[m + 1], "", 0);
        else if (m > 0)
            splice(out, t, n, o->kids[m - 1].end, o->kids[m].end, "", 0);
        else
            splice(out, t, n, o->key_start[m], o->kids[m].end, "", 0);
    } else if (what == 6 && o != NULL) { /* duplicate a member */
        size_t m = graft_test_below(o->n);
        graft_test_put_byte(&tmp, ',');
        graft_test_put(&tmp, t + o->key_start[m], o->kids[m].end - o->key_start[m]);
        splice(out, t, n, o->kids[m].end, o->kids[m].end, tmp.p, tmp.n);
    } else if (what == 7 && o != NULL) { /* give a member the key of another (or its own) */
        const tnode *from = random_object(all, nodes, 1);
        size_t m = graft_test_below(o->n), f = graft_test_below(from->n);
        splice(out, t, n, o->key_start[m], o->key_end[m], t + from->key_start[f],
               from->key_end[f] - from->key_start[f]);
    } else if (what == 8 && nodes > 1) { /* replace a value with a random one */
        const tnode *v = all[1 + graft_test_below(nodes - 1)];
        gen_free(&tmp, random_kind(GEN_DEPTH - 1), GEN_DEPTH - 1);
        splice(out, t, n, v->start, v->end, tmp.p, tmp.n);
    } else if (what == 9) { /* insert a snippet */
        const char *s = snippets[graft_test_below(sizeof snippets / sizeof *snippets)];
        splice(out, t, n, at, at, s, strlen(s));
    } else if (what == 1) { /* insert a byte */
        splice(out, t, n, at, at, &alphabet[graft_test_below(sizeof alphabet)], 1);
    } else if (what == 2 && at < n) { /* delete a byte */
        splice(out, t, n, at, at + 1, "", 0);
    } else if (what == 3) { /* truncate */
        splice(out, t, at, at, at, "", 0);
    } else { /* flip a byte */
        at = graft_test_below(n);
        splice(out, t, n, at, at + 1, &alphabet[graft_test_below(sizeof alphabet)], 1);
    }
    free(tmp.p);
}

/* ---- the tests ----------------------------------------------------------------------------- */

static void load_text(const char *name, const char *text)
{
    json_error_t error;
    root_schema = json_loads(text, 0, &error);
    if (root_schema == NULL)
        fail_msg("schema %s is not JSON: %s", name, error.text);
    char *errmsg = NULL;
    int rc = graft__json_schema_compile(text, strlen(text), &compiled, &errmsg);
    if (rc != GRAFT_OK)
        fail_msg("schema %s did not compile: %d (%s)", name, rc,
                 errmsg != NULL ? errmsg : "no message");
    free(errmsg);
}

static void load(int which) { load_text(schema_defs[which].name, schema_defs[which].text); }

static void unload(void)
{
    graft__json_schema_free(compiled);
    json_decref(root_schema);
    compiled = NULL;
    root_schema = NULL;
    cache_clear();
}

enum { INSTANCES = 200, MUTATIONS = 10 };

static int schema_ids[N_SCHEMAS] = {S_OPENAI, S_PYDANTIC, S_TREE, S_LIST,   S_NUMBERS,
                                    S_CONST,  S_FREE,     S_ARRAYS, S_KEYS, S_ALTS,
                                    S_CLOSED, S_OPEN,     S_PREFIX};

/* Random instances of one schema, each accepted to the end, and mutations of each. */
static void test_instances(void **state)
{
    int which = *(int *)*state;
    begin_test(schema_defs[which].name, (uint64_t)which);
    load(which);
    graft_test_bytes text = {NULL, 0, 0}, mutant = {NULL, 0, 0};
    for (size_t k = 0; k < INSTANCES; k++) {
        text.n = 0;
        gen_ws(&text);
        gen_value(&text, root_schema, 0);
        gen_ws(&text);
        check_text(text.p, text.n, true);
        tnode tree;
        build(text.p, text.n, skip_space(text.p, text.n, 0), &tree);
        for (size_t m = 0; m < MUTATIONS; m++) {
            mutate(text.p, text.n, &tree, &mutant);
            check_text(mutant.p, mutant.n, false);
        }
        free_tree(&tree);
    }
    free(text.p);
    free(mutant.p);
    unload();
    graft_test_tally_end(seed);
}

typedef struct {
    int schema;
    const char *text;
    size_t len, refused;
    bool done;
} hand_case;

#define ACCEPTS(schema, text, done) {schema, text, sizeof(text) - 1, sizeof(text) - 1, done}
/* refused: the first byte of `after` */
#define REFUSES(schema, before, after)                                                         \
    {schema, before after, sizeof(before after) - 1, sizeof(before) - 1, false}

#define OAI_HEAD                                                                               \
    "{\"name\":\"Ann\",\"age\":30,\"score\":9.5,\"address\":{\"street\":\"Main 1\",\"zip\":null},"
#define OAI_TAIL "\"status\":\"active\",\"nickname\":null,\"verified\":true}"
#define SPACES32 "                                "
#define CONST_HEAD "{\"kind\":\"point\",\"version\":2,"
#define PAIR "{\"pair\":[\"a\",\"b\"],\"some\":[false],"
#define QUOTE "{\"quo\\\"te\":\"\","
#define ABC "{\"abc\":true,"

static const hand_case hand_cases[] = {
    /* openai: every property required, in order; closed objects; nullable two ways */
    ACCEPTS(S_OPENAI, OAI_HEAD "\"tags\":[]," OAI_TAIL, true),
    ACCEPTS(S_OPENAI,
            "\n  " OAI_HEAD "\"tags\":[{\"label\":\"a\",\"weight\":0.5},{\"label\":\"b\","
            "\"weight\":null}]," OAI_TAIL "\r\n",
            true),
    ACCEPTS(S_OPENAI, OAI_HEAD "\"tags\":[]," OAI_TAIL "\r", false),
    ACCEPTS(S_OPENAI, OAI_HEAD "\"tags\":[],\"status\":\"act", false),
    ACCEPTS(S_OPENAI, "{\"name\"\n\t\t:\r\n" SPACES32 "\"x\"", false),
    REFUSES(S_OPENAI, "{\"name\":\n" SPACES32, " \"x\""),
    REFUSES(S_OPENAI, "{\"name\":\r", "\"x\""),
    REFUSES(S_OPENAI, "{ ", " \"name\""),
    REFUSES(S_OPENAI, "{", "}"),
    REFUSES(S_OPENAI, "{\"name\":\"x\"", "}"),
    REFUSES(S_OPENAI, "{\"name\":\"x\",\"", "score\":1}"),
    REFUSES(S_OPENAI, "{\"n", "\\u0061me\":\"x\"}"),
    REFUSES(S_OPENAI, "{\"name\":\"x\",\"age\":1", ".5}"),
    REFUSES(S_OPENAI, "{\"name\":\"x\",\"age\":1", "e3}"),
    REFUSES(S_OPENAI,
            "{\"name\":\"x\",\"age\":1,\"score\":1,\"address\":{\"street\":\"s\",\"zip\":",
            "1}"),
    REFUSES(S_OPENAI,
            "{\"name\":\"x\",\"age\":1,\"score\":1,\"address\":{\"street\":\"s\",\"zip\":\"z\"",
            ",\"city\":\"c\"}"),
    REFUSES(S_OPENAI, OAI_HEAD "\"tags\":[{\"label\":\"a\",\"weight\":", "\"heavy\"}]"),
    REFUSES(S_OPENAI,
            OAI_HEAD "\"tags\":[{\"label\":\"a\",\"weight\":1},{\"label\":\"b\",\"weight\":2},"
                     "{\"label\":\"c\",\"weight\":3}",
            ",{"),
    REFUSES(S_OPENAI, OAI_HEAD "\"tags\":[],\"status\":\"act", "ual\""),
    REFUSES(S_OPENAI, OAI_HEAD "\"tags\":[],\"status\":\"active\",\"nickname\":", "5"),
    REFUSES(S_OPENAI,
            OAI_HEAD "\"tags\":[],\"status\":\"active\",\"nickname\":null,\"verified\":true",
            ",\"x\":1}"),
    REFUSES(S_OPENAI, OAI_HEAD "\"tags\":[]," OAI_TAIL, "x"),
    REFUSES(S_OPENAI, OAI_HEAD "\"tags\":[]," OAI_TAIL " ", " "),
    /* pydantic: only items required; $ref, allOf, annotations */
    ACCEPTS(S_PYDANTIC, "{\"items\":[]}", true),
    ACCEPTS(S_PYDANTIC,
            "{\"items\":[{\"id\":1,\"price\":null},"
            "{\"id\":-2,\"color\":\"blue\",\"labels\":[\"x\"]}],"
            "\"count\":3}",
            true),
    ACCEPTS(S_PYDANTIC,
            "{\"items\":[],\"main\":{\"id\":2,\"color\":\"green\",\"price\":1.5e3},"
            "\"note\":\"hi\"}",
            true),
    REFUSES(S_PYDANTIC, "{", "}"),
    REFUSES(S_PYDANTIC, "{\"", "owner\":\"x\"}"),
    REFUSES(S_PYDANTIC, "{\"items\":[{\"id\":1,\"color\":\"", "purple\"}]}"),
    REFUSES(S_PYDANTIC, "{\"items\":[{\"", "color\":\"red\"}]}"),
    REFUSES(S_PYDANTIC, "{\"items\":[],\"count\":1,\"", "owner\":\"x\"}"),
    REFUSES(S_PYDANTIC, "{\"items\":[],\"main\":{\"id\":2", ".0}}"),
    REFUSES(S_PYDANTIC, "{\"items\":[],\"main\":", "null}"),
    REFUSES(S_PYDANTIC, "{\"items\":[],\"note\":null", ",\"count\":1}"),
    REFUSES(S_PYDANTIC, "{\"items\":[],\"", "title\":\"x\"}"),
    /* recursion through "#" */
    ACCEPTS(S_TREE,
            "{\"name\":\"a\",\"children\":[{\"name\":\"b\",\"children\":[]},{\"name\":\"c\","
            "\"children\":[],\"parent\":null}],\"parent\":{\"name\":\"p\",\"children\":[]}}",
            true),
    REFUSES(S_TREE, "{\"name\":\"a\",\"children\":[{\"name\":\"b\"", "}]}"),
    REFUSES(S_TREE, "{\"name\":\"a\",\"children\":[", "1]}"),
    REFUSES(S_TREE, "{\"name\":\"a\",\"children\":[],\"parent\":", "[]}"),
    /* recursion through definitions */
    ACCEPTS(S_LIST, "{\"head\":{\"value\":1,\"next\":{\"value\":2,\"next\":null}},\"size\":2}",
            true),
    REFUSES(S_LIST, "{\"head\":{\"value\":1", "}}"),
    REFUSES(S_LIST, "{\"head\":{\"value\":1,\"next\":", "false}}"),
    REFUSES(S_LIST, "{\"", "size\":0}"),
    /* integer against number */
    ACCEPTS(S_NUMBERS, "{\"i\":-0,\"n\":-0.5e+3,\"ia\":[1,2]}", true),
    ACCEPTS(S_NUMBERS,
            "{\"i\":123456789012,\"n\":1E-7,\"ia\":[0,-0,7],\"na\":[1.5,2e10,-0,0.0]}", true),
    ACCEPTS(S_NUMBERS, "{\"i\":1,\"n\":1e", false),
    /* the digit limits of typed numbers: 18, 18 and 2 */
    ACCEPTS(S_NUMBERS, "{\"i\":-123456789012345678,\"n\":0.123456789012345678e-10,\"ia\":[0,0]}",
            true),
    ACCEPTS(S_NUMBERS, "{\"i\":0,\"n\":1E07,\"ia\":[0,0]}", true),
    REFUSES(S_NUMBERS, "{\"i\":-123456789012345678", "9,\"n\":0,\"ia\":[0,0]}"),
    REFUSES(S_NUMBERS, "{\"i\":0,\"n\":123456789012345678", "9.5}"),
    REFUSES(S_NUMBERS, "{\"i\":0,\"n\":0.123456789012345678", "9}"),
    REFUSES(S_NUMBERS, "{\"i\":0,\"n\":1E00", "7,\"ia\":[0,0]}"),
    REFUSES(S_NUMBERS, "{\"i\":0,\"n\":0,\"ia\":[0,0],\"na\":[1e+99", "9]}"),
    REFUSES(S_NUMBERS, "{\"i\":1", "E2"),
    REFUSES(S_NUMBERS, "{\"i\":0", "1"),
    REFUSES(S_NUMBERS, "{\"i\":", "+1"),
    REFUSES(S_NUMBERS, "{\"i\":-", "-1"),
    REFUSES(S_NUMBERS, "{\"i\":1,\"n\":1,\"ia\":[1", "]}"),
    REFUSES(S_NUMBERS, "{\"i\":1,\"n\":1,\"ia\":[1,2,3,4", ",5]}"),
    REFUSES(S_NUMBERS, "{\"i\":1,\"n\":1,\"ia\":[1,2", ".0]}"),
    REFUSES(S_NUMBERS, "{\"i\":1,\"n\":1.", "e5"),
    REFUSES(S_NUMBERS, "{\"i\":1,\"n\":", ".5"),
    /* const and enum: the compact text exactly */
    ACCEPTS(S_CONST, "{\"kind\":\"point\",\"version\":2}", true),
    ACCEPTS(S_CONST,
            CONST_HEAD "\"flag\":true,\"nothing\":null,\"level\":10,"
            "\"mixed\":\"a\\\"b\",\"ratio\":0.5}",
            true),
    ACCEPTS(S_CONST, CONST_HEAD "\"level\":2.5}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"level\":4.0}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"level\":-3}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"mixed\":\"line\\nbreak\"}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"mixed\":\"\xc3\xa9 \xc3\xbc\"}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"mixed\":\"\\u001F\"}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"mixed\":null}", true),
    ACCEPTS(S_CONST, CONST_HEAD "\"mixed\":1}", true),
    REFUSES(S_CONST, "{\"kind\":\"", "Point\""),
    REFUSES(S_CONST, "{\"kind\":\"point\",\"version\":2", ".0}"),
    REFUSES(S_CONST, "{\"kind\":\"point\",\"version\":2", "0}"),
    REFUSES(S_CONST, "{\"kind\":\"point\",\"version\":", "\"2\"}"),
    REFUSES(S_CONST, CONST_HEAD "\"flag\":", "false}"),
    REFUSES(S_CONST, CONST_HEAD "\"nothing\":", "\"null\"}"),
    REFUSES(S_CONST, CONST_HEAD "\"level\":1", "1}"),
    REFUSES(S_CONST, CONST_HEAD "\"level\":4", "}"),
    REFUSES(S_CONST, CONST_HEAD "\"level\":2.5", "0}"),
    REFUSES(S_CONST, CONST_HEAD "\"level\":-", "0}"),
    REFUSES(S_CONST, CONST_HEAD "\"level\":", "3}"),
    REFUSES(S_CONST, CONST_HEAD "\"mixed\":\"a\\", "u0022b\"}"),
    REFUSES(S_CONST, CONST_HEAD "\"mixed\":\"\\u00", "e9 \xc3\xbc\"}"), /* \u001F goes so far */
    REFUSES(S_CONST, CONST_HEAD "\"mixed\":\"\\u001", "f\"}"),
    REFUSES(S_CONST, CONST_HEAD "\"mixed\":", "true}"),
    REFUSES(S_CONST, CONST_HEAD "\"ratio\":0.5", "0}"),
    /* free values and objects without properties */
    ACCEPTS(S_FREE, "{\"meta\":{\"x\":[1,{\"y\":null}],\"z\":\"\\uD83D\\uDE00\"},\"closed\":{}}",
            true),
    ACCEPTS(S_FREE,
            "{\"meta\":{},\"anything\":[[[\"deep\"]]],\"also\":-1,\"described\":{\"k\":true},"
            "\"open\":{\"a\":1},\"closed\":{ },\"list\":[1,\"a\",{}],\"empty\":{}}",
            true),
    ACCEPTS(S_FREE, "{\"meta\":{\"\":0,\"a\":\"\\u0000\"},\"closed\":{}}", true),
    ACCEPTS(S_FREE, "{\"meta\":{\"a\":-1234567890123456789012.5e-123},\"closed\":{}}", true),
    REFUSES(S_FREE, "{\"meta\":", "[]"),
    REFUSES(S_FREE, "{\"meta\":{},\"closed\":{", "\"a\":1}}"),
    REFUSES(S_FREE, "{\"meta\":{},\"closed\":{},\"list\":", "{}}"),
    REFUSES(S_FREE, "{\"meta\":{},\"closed\":{},\"empty\":{", "\"a\":1}}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":[1,", "]}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":\"\\uD800", "\"}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":\"\\uD", "C00\"}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":\"\xc3", "(\"}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":\"\xe0", "\x80\x80\"}"),
    REFUSES(S_FREE, "{\"meta\":{\"a\":\"", "\x01\"}"),
    REFUSES(S_FREE, "{\"meta\":{},\"anything\":tru", "th}"),
    /* array bounds */
    ACCEPTS(S_ARRAYS, "{\"pair\":[\"a\",\"b\"],\"some\":[true]}", true),
    ACCEPTS(S_ARRAYS, PAIR "\"none\":[ ],\"matrix\":[[1],[1,2,3]]}", true),
    REFUSES(S_ARRAYS, "{\"pair\":[\"a\"", "]}"),
    REFUSES(S_ARRAYS, "{\"pair\":[\"a\",", "]}"),
    REFUSES(S_ARRAYS, "{\"pair\":[\"a\",\"b\"", ",\"c\"]}"),
    REFUSES(S_ARRAYS, "{\"pair\":[\"a\",\"b\"],\"some\":[", "]}"),
    REFUSES(S_ARRAYS, PAIR "\"none\":[", "1]}"),
    REFUSES(S_ARRAYS, PAIR "\"matrix\":[[", "]]}"),
    REFUSES(S_ARRAYS, PAIR "\"matrix\":[[1,2,3", ",4]]}"),
    REFUSES(S_ARRAYS, PAIR "\"matrix\":[[1],[2],[3]", ",[4]]}"),
    /* keys as jansson writes them */
    ACCEPTS(S_KEYS, "{\"quo\\\"te\":\"x\"}", true),
    ACCEPTS(S_KEYS,
            "{\"a b\":1,\"quo\\\"te\":\"\",\"back\\\\slash\":null,\"\xc3\xbcn\xc3\xaf\":true,"
            "\"tab\\t\":1,\"slash/\":2,\"emoji\xf0\x9f\x98\x80\":3,\"pattern\":\"p\",\"format\":4,"
            "\"\":5}",
            true),
    ACCEPTS(S_KEYS, QUOTE "\"\":1}", true),
    REFUSES(S_KEYS, QUOTE "\"tab", "\t\":1}"),
    REFUSES(S_KEYS, QUOTE "\"slash", "\\/\":1}"),
    REFUSES(S_KEYS, QUOTE "\"", "\\u00fcn\\u00ef\":true}"),
    REFUSES(S_KEYS, QUOTE "\"emoji", "\\ud83d\\ude00\":1}"),
    REFUSES(S_KEYS, QUOTE "\"format\":1,\"", "pattern\":\"p\"}"),
    REFUSES(S_KEYS, QUOTE "\"", "a b\":1}"),
    REFUSES(S_KEYS, "{\"", "\":1}"),
    REFUSES(S_KEYS, "{\"quo\\", "u0022te\":\"\"}"),
    /* anyOf, oneOf, type lists */
    ACCEPTS(S_ALTS, "{\"w\":{\"x\":1}}", true),
    ACCEPTS(S_ALTS, "{\"w\":[\"s\"]}", true),
    ACCEPTS(S_ALTS, "{\"w\":\"s\"}", true),
    ACCEPTS(S_ALTS, "{\"w\":-1.5e3}", true),
    ACCEPTS(S_ALTS, "{\"w\":false}", true),
    ACCEPTS(S_ALTS, "{\"w\":null}", true),
    ACCEPTS(S_ALTS, "{\"v\":null,\"w\":1}", true),
    ACCEPTS(S_ALTS, "{\"v\":[1,2],\"w\":1}", true),
    ACCEPTS(S_ALTS, "{\"w\":1,\"o\":7}", true),
    ACCEPTS(S_ALTS, "{\"w\":1,\"o\":\"y\"}", true),
    ACCEPTS(S_ALTS, "{\"w\":1,\"t\":{\"k\":true}}", true),
    ACCEPTS(S_ALTS, "{\"w\":1,\"t\":{}}", true),
    ACCEPTS(S_ALTS, "{\"w\":1,\"t\":null,\"s\":\"x\"}", true),
    REFUSES(S_ALTS, "{\"w\":{", "}}"),
    REFUSES(S_ALTS, "{\"w\":{\"x\":1", ",\"y\":2}}"),
    REFUSES(S_ALTS, "{\"w\":[", "1]}"),
    REFUSES(S_ALTS, "{\"v\":[1", ".5]"),
    REFUSES(S_ALTS, "{\"v\":", "\"a\""),
    REFUSES(S_ALTS, "{\"w\":1,\"o\":\"", "z\"}"),
    REFUSES(S_ALTS, "{\"w\":1,\"o\":7", ".5}"),
    REFUSES(S_ALTS, "{\"w\":1,\"t\":{\"", "j\":1}}"),
    REFUSES(S_ALTS, "{\"w\":1,\"t\":", "[]}"),
    REFUSES(S_ALTS, "{\"w\":1,\"s\":", "null}"),
    REFUSES(S_ALTS, "{\"w\":1,\"s\":1", ".5}"),
    /* the root without properties */
    ACCEPTS(S_CLOSED, "{}", true),
    ACCEPTS(S_CLOSED, " { } ", true),
    REFUSES(S_CLOSED, "{", "\"a\":1}"),
    ACCEPTS(S_OPEN, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", true),
    REFUSES(S_OPEN, "", "[]"),
    REFUSES(S_OPEN, "{\"a\":1,", "}"),
    /* texts that are prefixes of others */
    ACCEPTS(S_PREFIX, "{\"abc\":true}", true),
    ACCEPTS(S_PREFIX, "{\"a\":1,\"ab\":\"x\",\"abc\":false,\"b\":null,\"abd\":2}", true),
    REFUSES(S_PREFIX, "{\"ab", "d\":1}"),
    REFUSES(S_PREFIX, "{\"abc\":true,\"a", "\":1}"),
    REFUSES(S_PREFIX, "{\"abc\":true,\"abd\":1,\"", "b\":null}"),
    ACCEPTS(S_PREFIX, ABC "\"e\":123}", true),
    ACCEPTS(S_PREFIX, ABC "\"e\":12}", true),
    ACCEPTS(S_PREFIX, ABC "\"e\":-1}", true),
    ACCEPTS(S_PREFIX, ABC "\"e\":\"ab\"}", true),
    ACCEPTS(S_PREFIX, ABC "\"e\":true}", true),
    REFUSES(S_PREFIX, ABC "\"e\":123", "4}"),
    REFUSES(S_PREFIX, ABC "\"e\":\"abc", "d\"}"),
    REFUSES(S_PREFIX, ABC "\"e\":-", "2}"),
    REFUSES(S_PREFIX, ABC "\"e\":", "false}"),
    ACCEPTS(S_PREFIX, ABC "\"opt\":null}", true),
    ACCEPTS(S_PREFIX, ABC "\"opt\":\"y\"}", true),
    REFUSES(S_PREFIX, ABC "\"opt\":\"", "z\"}"),
    ACCEPTS(S_PREFIX, ABC "\"nest\":null}", true),
    ACCEPTS(S_PREFIX, ABC "\"nest\":-5}", true),
    REFUSES(S_PREFIX, ABC "\"nest\":", "true}"),
    REFUSES(S_PREFIX, ABC "\"nest\":5", ".5}"),
    ACCEPTS(S_PREFIX, ABC "\"arr\":[\"a\",1]}", true),
    REFUSES(S_PREFIX, ABC "\"arr\":[1,2", ",3]}"),
    REFUSES(S_PREFIX, ABC "\"arr\":[", "null]}"),
    ACCEPTS(S_PREFIX, ABC "\"chain\":null}", true),
    REFUSES(S_PREFIX, ABC "\"chain\":", "1}"),
    ACCEPTS(S_PREFIX, ABC "\"loose\":[{\"x\":[]},null]}", true),
    REFUSES(S_PREFIX, ABC "\"loose\":[1,2", ",3]}"),
    ACCEPTS(S_PREFIX, ABC "\"empty\":{}}", true),
    REFUSES(S_PREFIX, ABC "\"empty\":{\"", "y\":1}}"),
};

/* Each case's expectation is first held to the reference (a wrong one is told apart as
 * "expectation"), then the recognizer to the case and to the oracles. */
static void check_case(const uint8_t *t, size_t n, size_t refused, bool done)
{
    reading g = reference(t, n);
    expected e = expect_of(&g, n);
    free(g.completion.p);
    if (e.refused != refused || (refused == n && e.done != done))
        report("expectation: the hand-written case disagrees with the reference", t, n, refused,
               e.refused);
    verdict v = recognize(t, n, NULL);
    if (v.refused != refused || (refused == n && v.done != done))
        report("hand-written case (index: first refused byte)", t, n, refused, v.refused);
    check_text(t, n, false);
}

static void test_hand_cases(void **state)
{
    (void)state;
    begin_test("hand cases", 100);
    for (int which = 0; which < N_SCHEMAS; which++) {
        current = schema_defs[which].name;
        load(which);
        for (size_t k = 0; k < sizeof hand_cases / sizeof *hand_cases; k++)
            if (hand_cases[k].schema == which)
                check_case((const uint8_t *)hand_cases[k].text, hand_cases[k].len,
                           hand_cases[k].refused, hand_cases[k].done);
        unload();
    }
    graft_test_tally_end(seed);
}

/* The limits on nesting: under the schema, GRAFT__SCHEMA_MAX_DEPTH levels (the top object is
 * level 1) and the bracket of the next is refused; in a value the schema leaves free, only
 * GRAFT__JSON_MAX_DEPTH in all, so free nesting deeper than the schema's limit is accepted. */
static void test_depth(void **state)
{
    (void)state;
    begin_test("depth", 200);
    static const char open_node[] = "{\"name\":\"\",\"children\":[";
    enum { NODE = sizeof open_node - 1, LEVELS = GRAFT__SCHEMA_MAX_DEPTH / 2 };
    graft_test_bytes b = {NULL, 0, 0};
    load(S_TREE);
    /* LEVELS objects, each with its children array: GRAFT__SCHEMA_MAX_DEPTH levels */
    for (int extra = 0; extra <= 1; extra++) {
        b.n = 0;
        for (int k = 0; k < LEVELS + extra; k++)
            graft_test_put_str(&b, open_node);
        for (int k = 0; k < LEVELS + extra; k++)
            graft_test_put_str(&b, "]}");
        check_case(b.p, b.n, extra ? LEVELS * NODE : b.n, !extra);
    }
    unload();

    static const char head[] = "{\"meta\":{},\"anything\":", tail[] = ",\"closed\":{}}";
    load(S_FREE);
    for (int extra = 0; extra <= 1; extra++) {
        b.n = 0;
        graft_test_put_str(&b, head);
        for (int k = 0; k < GRAFT__JSON_MAX_DEPTH - 1 + extra; k++)
            graft_test_put_byte(&b, '[');
        for (int k = 0; k < GRAFT__JSON_MAX_DEPTH - 1 + extra; k++)
            graft_test_put_byte(&b, ']');
        graft_test_put_str(&b, tail);
        check_case(b.p, b.n, extra ? sizeof head - 1 + GRAFT__JSON_MAX_DEPTH - 1 : b.n, !extra);
    }
    unload();
    free(b.p);
    graft_test_tally_end(seed);
}

/* GRAFT__SCHEMA_MAX_TEXTS properties of an object, and values of an enum, compile and are
 * followed; one more is refused. */
static void test_text_limits(void **state)
{
    (void)state;
    begin_test("text limits", 400);
    enum { MAX = GRAFT__SCHEMA_MAX_TEXTS };
    _Static_assert(MAX == 64, "the cases below name text 63");
    graft_test_bytes b = {NULL, 0, 0};
    char item[64];
    for (int extra = 0; extra <= 1; extra++) {
        for (int enums = 0; enums <= 1; enums++) {
            b.n = 0;
            graft_test_put_str(&b, enums ? "{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":["
                              : "{\"type\":\"object\",\"properties\":{");
            for (int k = 0; k < MAX + extra; k++) {
                snprintf(item, sizeof item, enums ? "%s%d" : "%s\"p%d\":{\"type\":\"integer\"}",
                         k > 0 ? "," : "", k);
                graft_test_put_str(&b, item);
            }
            /* the last property required, so that a key must skip all the others */
            snprintf(item, sizeof item, enums ? "]}}}" : "},\"required\":[\"p%d\"]}",
                     MAX - 1 + extra);
            graft_test_put_str(&b, item);
            graft_test_put_byte(&b, '\0');
            const char *text = (const char *)b.p;
            if (extra) {
                graft__json_schema *out = NULL;
                int rc = graft__json_schema_compile(text, strlen(text), &out, NULL);
                if (rc == GRAFT_OK)
                    graft__json_schema_free(out);
                if (rc != GRAFT_EINVAL)
                    report("compile: one text past the limit (status)", b.p, strlen(text),
                           (size_t)-GRAFT_EINVAL, (size_t)-rc);
                continue;
            }
            load_text(current, text);
            if (enums) {
                static const char last[] = "{\"e\":63}", past[] = "{\"e\":64}";
                check_case((const uint8_t *)last, sizeof last - 1, sizeof last - 1, true);
                check_case((const uint8_t *)past, sizeof past - 1, 6, false);
            } else {
                static const char last[] = "{\"p0\":0,\"p63\":1}", skip[] = "{\"p62\":0}";
                check_case((const uint8_t *)last, sizeof last - 1, sizeof last - 1, true);
                check_case((const uint8_t *)skip, sizeof skip - 1, sizeof skip - 2, false);
            }
            unload();
        }
    }
    free(b.p);
    graft_test_tally_end(seed);
}

#define PROP(schema) "{\"type\":\"object\",\"properties\":{\"a\":" schema "}}"

/* Schemas outside the subset, and the keyword the message must name (NULL: any message). */
static const struct {
    const char *text, *keyword;
} bad_schemas[] = {
    /* the string keywords beyond what they support (json_regex.c) */
    {PROP("{\"type\":\"string\",\"pattern\":\"(?=a)\"}"), "pattern"},
    {PROP("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"ipv6\"}}"), "format"},
    {PROP("{\"type\":\"string\",\"minLength\":-1}"), "minLength"},
    {PROP("{\"type\":\"string\",\"maxLength\":3.5}"), "maxLength"},
    {PROP("{\"type\":\"array\",\"maxItems\":2.5}"), "maxItems"},
    {PROP("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":20000},{\"type\":\"null\"}]}"),
     "maxLength"},
    {PROP("{\"pattern\":\"^a\"}"), "pattern"},
    {PROP("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}"), "minLength"},
    {PROP("{\"type\":\"string\",\"pattern\":\"^a\",\"format\":\"date\"}"), "pattern"},
    {PROP("{\"type\":\"string\",\"enum\":[\"a\"],\"pattern\":\"^a\"}"), "pattern"},
    {PROP("{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}"), NULL},
    /* the number bounds beyond what they support */
    {PROP("{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\","
          "\"minimum\":\"0\"}}}"),
     "minimum"},
    {PROP("{\"maximum\":1}"), "maximum"},
    {PROP("{\"type\":\"number\",\"exclusiveMinimum\":true}"), "exclusiveMinimum"},
    {PROP("{\"enum\":[1,2],\"type\":\"integer\",\"exclusiveMaximum\":0}"), "exclusiveMaximum"},
    {PROP("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":1.9}"), NULL},
    {PROP("{\"type\":\"number\",\"minimum\":1e30}"), "minimum"},
    {PROP("{\"type\":\"integer\",\"multipleOf\":0}"), "multipleOf"},
    {PROP("{\"type\":\"number\",\"multipleOf\":1e-20}"), "multipleOf"},
    {PROP("{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":1,\"maximum\":2}"), NULL},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{\"type\":\"string\"}}}",
     "patternProperties"},
    {PROP("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}]}"), "prefixItems"},
    {PROP("{\"type\":\"array\",\"uniqueItems\":true}"), "uniqueItems"},
    {PROP("{\"type\":\"array\",\"contains\":{\"type\":\"string\"}}"), "contains"},
    {PROP("{\"not\":{\"type\":\"string\"}}"), "not"},
    {"{\"type\":\"object\",\"if\":{\"properties\":{\"a\":{\"const\":1}}},"
     "\"then\":{\"required\":[\"b\"]}}",
     "if"},
    {"{\"type\":\"object\",\"minProperties\":1}", "minProperties"},
    {PROP("{\"type\":\"object\",\"maxProperties\":1}"), "maxProperties"},
    {"{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", "propertyNames"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
     "\"dependentRequired\":{\"a\":[\"b\"]}}",
     "dependentRequired"},
    {"{\"$defs\":{\"S\":{\"type\":\"string\",\"pattern\":\"(x)\\\\1\"}},\"type\":\"object\","
     "\"properties\":{\"a\":{\"$ref\":\"#/$defs/S\"}}}",
     "pattern"},
    {"{\"type\":\"object\",\"x-unknown\":1}", "x-unknown"},
    /* the root is not an object schema */
    {"{\"type\":\"array\",\"items\":{}}", NULL},
    {"{\"type\":\"string\"}", NULL},
    {"[]", NULL},
    {"\"object\"", NULL},
    /* oneOf alternatives a value could match together (anyOf follows them all) */
    {PROP("{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{}}]}"), "oneOf"},
    {PROP("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":1}},"
          "\"required\":[\"t\"]},{\"type\":\"object\",\"properties\":{\"t\":{\"enum\":[2,1]}},"
          "\"required\":[\"t\"]}]}"),
     "oneOf"},
    {PROP("{\"oneOf\":[{\"type\":\"string\"},{\"enum\":[\"x\",\"y\"]}]}"), "oneOf"},
    {PROP("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}"), "oneOf"},
    {PROP("{\"oneOf\":[{\"type\":\"string\"},{\"anyOf\":[{\"type\":\"null\"},"
          "{\"type\":\"string\"}]}]}"),
     "oneOf"},
    /* a union that holds itself before any value begins */
    {"{\"$defs\":{\"U\":{\"anyOf\":[{\"$ref\":\"#/$defs/U\"},{\"type\":\"string\"}]}},"
     "\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/U\"}}}",
     "anyOf"},
    /* references outside "#", $defs and definitions, or to nothing */
    {PROP("{\"$ref\":\"#/$defs/Missing\"}"), "$ref"},
    {PROP("{\"$ref\":\"other.json\"}"), "$ref"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/properties/b\"},"
     "\"b\":{\"type\":\"string\"}}}",
     "$ref"},
    /* the rest of the subset's own limits */
    {PROP("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"string\"}]}"), "allOf"},
    {PROP("{\"enum\":[{\"x\":1}]}"), "enum"},
    {PROP("{\"const\":[1]}"), "const"},
    {PROP("{\"type\":\"strnig\"}"), "type"},
    /* not JSON */
    {"{\"type\":\"object\",", NULL},
    {"", NULL},
    {"{\"type\":\"object\"} x", NULL},
};

static void test_compile_refuses(void **state)
{
    (void)state;
    begin_test("compile", 300);
    for (size_t k = 0; k < sizeof bad_schemas / sizeof *bad_schemas; k++) {
        const char *text = bad_schemas[k].text, *keyword = bad_schemas[k].keyword;
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = graft__json_schema_compile(text, strlen(text), &out, &errmsg);
        if (rc == GRAFT_OK)
            graft__json_schema_free(out);
        if (rc != GRAFT_EINVAL)
            report("compile: status (EINVAL expected)", (const uint8_t *)text, strlen(text),
                   (size_t)-GRAFT_EINVAL, (size_t)-rc);
        else if (errmsg == NULL || (keyword != NULL && strstr(errmsg, keyword) == NULL)) {
            if (report("compile: the message does not name the keyword", (const uint8_t *)text,
                       strlen(text), 1, 0))
                print_error("    keyword %s, message: %s\n", keyword != NULL ? keyword : "(any)",
                            errmsg != NULL ? errmsg : "(none)");
        }
        free(errmsg);
    }
    /* errmsg may be NULL */
    graft__json_schema *out = NULL;
    static const char not_schema[] = "{\"type\":\"object\",\"not\":{}}";
    assert_int_equal(graft__json_schema_compile(not_schema, sizeof not_schema - 1, &out, NULL),
                     GRAFT_EINVAL);
    graft_test_tally_end(seed);
}

/* Keyword names as property names, $defs names and annotation contents are not keywords; the
 * text is read to len, not to a NUL. */
static void test_compile_accepts(void **state)
{
    (void)state;
    begin_test("compile", 301);
    static const char *const good[] = {
        /* objects told apart by a tag (pydantic's discriminated union, its annotation) */
        ("{\"$defs\":{\"Cat\":{\"type\":\"object\",\"properties\":{\"pet\":{\"const\":\"cat\"},"
         "\"meows\":{\"type\":\"integer\"}},\"required\":[\"pet\",\"meows\"]},\"Dog\":{\"type\":"
         "\"object\",\"properties\":{\"pet\":{\"enum\":[\"dog\",\"pup\"]}},\"required\":[\"pet\"]}},"
         "\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},"
         "{\"$ref\":\"#/$defs/Dog\"},{\"type\":\"null\"}],\"discriminator\":{\"propertyName\":"
         "\"pet\"}}}}"),
        ("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
         "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":2},\"next\":{\"$ref\":\"#\"}},"
         "\"required\":[\"k\"]}]}"),
        /* counts written as reals without a fraction are counts (3.0 is 3) */
        PROP("{\"type\":\"array\",\"minItems\":2.0,\"maxItems\":3.0}"),
        PROP("{\"type\":\"string\",\"maxLength\":3.0}"),
        ("{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\"},"
         "\"minimum\":{\"type\":\"integer\"}},\"default\":{\"minimum\":1,\"pattern\":\"x\"},"
         "\"examples\":[{\"format\":\"x\"}],\"description\":\"minLength\",\"$comment\":\"not\","
         "\"title\":\"if\",\"deprecated\":false,\"readOnly\":false,\"writeOnly\":false,"
         "\"$id\":\"x\",\"$schema\":\"y\"}"),
        ("{\"$defs\":{\"pattern\":{\"type\":\"string\"}},\"type\":\"object\","
         "\"properties\":{\"a\":{\"$ref\":\"#/$defs/pattern\"}}}"),
        "{\"type\":\"object\"}garbage",
    };
    for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
        size_t len = strstr(good[k], "garbage") != NULL ? strlen(good[k]) - 7 : strlen(good[k]);
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = graft__json_schema_compile(good[k], len, &out, &errmsg);
        if (rc != GRAFT_OK && report("compile: refused a schema in the subset",
                                     (const uint8_t *)good[k], len, GRAFT_OK, (size_t)-rc))
            print_error("    message: %s\n", errmsg != NULL ? errmsg : "(none)");
        if (rc == GRAFT_OK)
            graft__json_schema_free(out);
        free(errmsg);
    }
    for (int which = 0; which < N_SCHEMAS; which++) {
        load(which);
        unload();
    }
    graft_test_tally_end(seed);
}

#define INSTANCES_OF(id) cmocka_unit_test_prestate(test_instances, &schema_ids[id])

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_refuses), cmocka_unit_test(test_compile_accepts),
        cmocka_unit_test(test_hand_cases),      cmocka_unit_test(test_depth),
        cmocka_unit_test(test_text_limits),
        INSTANCES_OF(S_OPENAI),                 INSTANCES_OF(S_PYDANTIC),
        INSTANCES_OF(S_TREE),                   INSTANCES_OF(S_LIST),
        INSTANCES_OF(S_NUMBERS),                INSTANCES_OF(S_CONST),
        INSTANCES_OF(S_FREE),                   INSTANCES_OF(S_ARRAYS),
        INSTANCES_OF(S_KEYS),                   INSTANCES_OF(S_ALTS),
        INSTANCES_OF(S_CLOSED),                 INSTANCES_OF(S_OPEN),
        INSTANCES_OF(S_PREFIX),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
