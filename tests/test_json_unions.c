/*
 * test_json_unions.c: the schema'd recognizer (graft__json_schema_compile and
 * graft__json_recognizer_*, engine/json_output.h) on anyOf / oneOf unions whose alternatives
 * the first byte of a value does not tell apart, checked against an oracle written here from
 * the header's text alone, without reading json_syntax.c, json_recognizer.c, json_schema.c,
 * json_mask.c or json_regex.c.
 *
 * What the header says, as read here: the recognizer accepts exactly the prefixes of texts
 * that are instances of the schema, and done holds exactly when the text so far is one (only
 * whitespace may follow), with these restrictions beyond JSON Schema:
 *   - properties come in the order the schema lists them (optional ones may be skipped, ones
 *     not listed never come); keys and enum / const values are matched byte by byte against
 *     their compact JSON (a key written with an escape is refused);
 *   - whitespace between tokens (and around the root) is one space or tab, or one line break
 *     (LF or CR LF) followed by at most 32 spaces and tabs; a CR still waiting for its LF is
 *     not done;
 *   - a typed number has at most 18 digits before its point, 18 after it and 2 in its
 *     exponent; an "integer" has neither a point nor an exponent, and a bounded number no
 *     exponent; "-0" is 0; numbers in free values are JSON's, of any length;
 *   - a pattern's characters are the string's code points, escapes decoded, so a \u escape is
 *     refused at the hex digit after which no code point it can still be is taken;
 *   - anyOf takes up to 64 alternatives, nested unions flattened into it; a union that holds
 *     itself before any value begins is refused (one that holds itself inside an object or
 *     array value is not); oneOf likewise, but compiling refuses it unless the first byte of a
 *     value or a tag (the same first property, required, const or enum values none share)
 *     tells its alternatives apart, so that where it compiles it means what anyOf means: the
 *     oracle reads both alike, the random schemas write oneOf only where its alternatives are
 *     exclusive so (exclusive() below), and test_compile holds the compiler to refusing others;
 *   - at most GRAFT__JSON_MAX_STATES alternatives are followed at once: a text is compared only
 *     up to the byte before the first one at which the oracle follows more than STATE_LIMIT
 *     (8) configurations, or starts more than that many alternatives of the byte's class
 *     (test_state_limit goes to 16 and past it);
 *   - a bracket past the nesting limits (32 levels under the schema, 64 in all) is refused.
 *
 * The schema family (node below): objects with ordered properties and a required set, free
 * objects ("type":"object" alone) and free values ({}), arrays with items, minItems and
 * maxItems, strings free, held to minLength / maxLength, or to an anchored pattern of atoms
 * (a letter or a bracketed set of letters, once or with ?, * or +), enum and const (strings,
 * integers, booleans, null), integers and numbers with integral minimum, maximum,
 * exclusiveMinimum and exclusiveMaximum, booleans, null, scalars typed [T, "null"], anyOf and
 * oneOf of any of these (unions in unions), and $ref to $defs (objects or unions of objects)
 * or to the root "#" (recursion).
 * A schema is printed as JSON Schema text for the compiler, and read back from text (jansson)
 * for the hand cases.
 *
 * The oracle is a nondeterministic pushdown recognizer over that family. A configuration is a
 * stack of frames (the schema'd and free objects and arrays open, each with its next property
 * or its item count, and between them the alternative taken at each union whose value is
 * open), the mode at a token boundary (value, key, colon, after a value, done), the run of
 * whitespace, and the token being read: a literal matched byte by byte against its candidate
 * texts (keys, enum values, true / false / null), a string with its escape state and what
 * holds its characters (nothing, the pattern's position automaton, a count of code points),
 * or a number with its digits so far. A byte maps each configuration to its successors (a
 * union value's first byte starts one per alternative) and identical configurations are
 * merged. Invariant: every configuration kept can be completed to an instance. It holds
 * because every node of a schema here has an instance (finite heights, checked when a schema
 * is made), and a configuration is kept only while its own token can still end within its
 * node's constraints, decided exactly: a literal by its candidates; a pattern by its automaton
 * (every position reaches acceptance, each atom matching some letter); a \u escape by the
 * code points its hex digits still allow; a bounded number by the intervals of values its
 * completions span for each length of its integer part (every multiple of 10^-18, or of 1 for
 * an integer, in such an interval is a completion) met against the bounds. (The one exception
 * is the header's own: at 32 levels a prefix whose object still needs an object or array has no
 * completion, yet is taken; no schema here needs one there.) So the set empties exactly at the
 * first refused byte, and done holds where a configuration closed the root with no CR pending.
 *
 * Checks:
 *   - test_oracle: the oracle on its own: schemas printed, read back and printed again are
 *     the same text; random instances are accepted to the end and done exactly from the last
 *     closing brace on (trailing whitespace aside);
 *   - test_hand_cases: 134 (schema, text) pairs written by hand (pydantic's Union[Cat, Dog],
 *     alternatives one of whose properties are a prefix of the other's, an object beside a
 *     free one, enum values sharing prefixes, patterns, lengths, overlapping and disjoint
 *     bounds, integer beside number, nullable unions, exclusive oneOf and tagged ones, arrays
 *     of unions, unions in alternatives' properties and in unions, recursion through $defs,
 *     "#" and zod's recursive unions, whitespace), each with its first refused byte or
 *     acceptance and done; each expectation is first held to the oracle (a wrong one fails as
 *     "hand case"), then the recognizer to both after every prefix, every byte probed;
 *   - test_whitespace: union values written with one form of whitespace before every token,
 *     for each form the header allows and one with an indent too many;
 *   - test_deep: the nesting limits with a union's fork open at every level;
 *   - test_random: seeded random schemas of the family (a union first in the root, unions in
 *     random places, depth 4 or less) and for each, random instances, byte mutations of them,
 *     values of other nodes and of other alternatives spliced in, and random token strings:
 *     the first refused byte and done after every prefix are the oracle's; for a quarter of
 *     the texts every byte of the JSON alphabet is also probed after every prefix (a refused
 *     byte leaves the recognizer unchanged, so the text then goes on);
 *   - test_state_limit: 16 alternatives of one class, all followed exactly; 20: whatever is
 *     accepted and done is an instance, and the values of the first 16 are accepted;
 *   - test_compile: refusals (oneOf not told apart, keywords outside the subset inside
 *     alternatives, a $ref to nothing, a union holding itself, 65 alternatives flat or
 *     flattened, a root that is not an object) and acceptances (every schema here, 64
 *     alternatives flat and flattened).
 * A disagreement prints the schema, the seed (GRAFT_TEST_SEED overrides it) and the text as a
 * C string literal, with both verdicts; all are counted and the test fails at its end.
 * GRAFT_TEST_SCALE multiplies the random schemas (default 16: 1920 schemas, about 46000
 * texts); GRAFT_TEST_VERBOSE prints the counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "json_oracle.h"
#include "tally.h"
#include "engine/engine.h"

typedef __int128 i128;

/* ---- the seed, reporting --------------------------------------------------------------------- */

static uint64_t seed = 0x6a736f6e556e696fu;

enum { MAX_PRINTED = 12 };

static void begin_test(uint64_t stream)
{
    graft_test_tally_begin(MAX_PRINTED);
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

static bool verbose(void)
{
    return getenv("GRAFT_TEST_VERBOSE") != NULL;
}

/* Counts a failure; prints it (what, the schema, the text) while few were printed. The
 * schema goes in pieces: print_error's buffer is short. */
static void report(const char *what, const char *schema_text, const uint8_t *t, size_t n)
{
    if (!graft_test_tally_count())
        return;
    print_error("%s (seed 0x%" PRIx64 ")\n  schema: ", what, seed);
    for (size_t at = 0, len = strlen(schema_text); at < len; at += 256)
        print_error("%.*s", (int)(len - at < 256 ? len - at : 256), schema_text + at);
    print_error("\n  text of %zu bytes: ", n);
    graft_test_print_literal(t, n);
    print_error("\n");
}

/* text compiled, or NULL after reporting why not (every schema compiled here is in the
 * header's subset). */
static graft__json_schema *compile(const char *text)
{
    graft__json_schema *out = NULL;
    char *errmsg = NULL;
    int rc = graft__json_schema_compile(text, strlen(text), &out, &errmsg);
    if (rc != GRAFT_OK) {
        char what[400];
        snprintf(what, sizeof what, "compile: %d, %s", rc, errmsg != NULL ? errmsg : "(none)");
        report(what, text, (const uint8_t *)"", 0);
    }
    free(errmsg);
    return rc == GRAFT_OK ? out : NULL;
}

/* ---- the schema family ----------------------------------------------------------------------- */

enum {
    MAX_NODES = 512,
    MAX_PROPS = 6,
    MAX_ALTS = 24,
    MAX_LITS = 8,
    MAX_ATOMS = 4,
    MAX_DEFS = 3,
    TEXT_CAP = 32,        /* a key (with its quotes) or a literal's compact JSON */
    NODE_FREE = 0xFFFF,   /* no node: a free value (or free array items) */
    HEIGHT_INF = 1 << 20
};
#define NO_MAX UINT32_MAX

typedef enum node_kind {
    K_OBJECT,     /* the properties key[0, n_props) in order */
    K_ANY_OBJECT, /* "type":"object" alone: any object */
    K_ANY,        /* {}: any value */
    K_ARRAY,
    K_STRING,     /* a pattern (has_pattern) or lengths (none: any string) */
    K_ENUM,       /* enum, or const (is_const): the texts lit[0, n_lits) */
    K_INTEGER,
    K_NUMBER,
    K_BOOLEAN,
    K_NULL,
    K_UNION,      /* anyOf, or oneOf (one_of) */
    K_REF         /* $ref to defs[def], or to the root (def -1) */
} node_kind;

typedef struct atom {
    char set[4]; /* the letters it matches */
    char quant;  /* '\0' (once), '?', '*' or '+' */
} atom;

typedef struct node {
    node_kind kind;
    bool nullable; /* a scalar typed [T, "null"] */
    int n_props;
    char key[MAX_PROPS][TEXT_CAP]; /* "name", quotes included, as the text writes it */
    uint16_t prop[MAX_PROPS];
    bool required[MAX_PROPS];
    uint16_t items; /* NODE_FREE: no items keyword */
    uint32_t min_items, max_items;
    bool has_pattern;
    int n_atoms;
    atom atoms[MAX_ATOMS];
    uint32_t min_len, max_len;
    bool is_const;
    int n_lits;
    char lit[MAX_LITS][TEXT_CAP];
    /* numbers: the keywords as written (integral values) and what they leave, inclusive, in
     * units of 10^-18: lo and hi are multiples of 10^18 for an integer */
    bool has_lo, lo_excl, has_hi, hi_excl;
    long lo_v, hi_v;
    i128 lo, hi;
    bool one_of;
    int n_alts;
    uint16_t alt[MAX_ALTS];
    int def;
} node;

typedef struct schema {
    node nodes[MAX_NODES];
    int n_nodes;
    uint16_t root;
    int n_defs;
    char def_name[MAX_DEFS][16];
    uint16_t defs[MAX_DEFS];
    int height[MAX_NODES]; /* the fewest nested objects and arrays of an instance */
} schema;

/* 10^18: typed numbers have at most 18 fraction digits, so each is a whole number of units */
#define UNITS ((i128)1000000000000000000)

static i128 pow10_i128(int e)
{
    i128 r = 1;
    while (e-- > 0)
        r *= 10;
    return r;
}

static uint16_t new_node(schema *s, node_kind kind)
{
    assert_true(s->n_nodes < MAX_NODES);
    node *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->items = NODE_FREE;
    n->max_items = n->max_len = NO_MAX;
    return (uint16_t)s->n_nodes++;
}

/* lo and hi from the keywords: an exclusive bound moves by one step (1 for an integer, 10^-18
 * for a number: no typed number lies between). */
static void set_bounds(node *n)
{
    i128 step = n->kind == K_INTEGER ? UNITS : 1;
    n->lo = (i128)n->lo_v * UNITS + (n->lo_excl ? step : 0);
    n->hi = (i128)n->hi_v * UNITS - (n->hi_excl ? step : 0);
}

static uint16_t target_of(const schema *s, const node *n)
{
    return n->def < 0 ? s->root : s->defs[n->def];
}

/* The heights, by fixed point: every node has an instance exactly when every height is
 * finite (an object needs its required properties, an array minItems items, a union one
 * alternative). */
static bool compute_heights(schema *s)
{
    for (int i = 0; i < s->n_nodes; i++)
        s->height[i] = HEIGHT_INF;
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < s->n_nodes; i++) {
            const node *n = &s->nodes[i];
            int h = 0;
            switch (n->kind) {
            case K_OBJECT:
                h = 1;
                for (int p = 0; p < n->n_props; p++)
                    if (n->required[p] && s->height[n->prop[p]] + 1 > h)
                        h = s->height[n->prop[p]] + 1;
                break;
            case K_ARRAY:
                h = n->min_items > 0 && n->items != NODE_FREE ? s->height[n->items] + 1 : 1;
                break;
            case K_UNION:
                h = HEIGHT_INF;
                for (int a = 0; a < n->n_alts; a++)
                    if (s->height[n->alt[a]] < h)
                        h = s->height[n->alt[a]];
                break;
            case K_REF:
                h = s->height[target_of(s, n)];
                break;
            case K_ANY_OBJECT:
                h = 1;
                break;
            default:
                break;
            }
            if (h > HEIGHT_INF)
                h = HEIGHT_INF;
            if (h < s->height[i]) {
                s->height[i] = h;
                changed = true;
            }
        }
    }
    for (int i = 0; i < s->n_nodes; i++)
        if (s->height[i] >= HEIGHT_INF)
            return false;
    return true;
}

/* ---- printing a schema as JSON Schema text --------------------------------------------------- */

typedef graft_test_bytes bytes;

static void put(bytes *b, const char *text)
{
    graft_test_put_str(b, text);
}

static void putf(bytes *b, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    put(b, buf);
}

static void print_type(bytes *b, const node *n, const char *name)
{
    if (n->nullable)
        putf(b, "\"type\":[\"%s\",\"null\"]", name);
    else
        putf(b, "\"type\":\"%s\"", name);
}

static void print_node(const schema *s, uint16_t id, bytes *b);

static void print_object(const schema *s, const node *n, bytes *b)
{
    put(b, "\"type\":\"object\",\"properties\":{");
    for (int p = 0; p < n->n_props; p++) {
        putf(b, "%s%s:", p > 0 ? "," : "", n->key[p]);
        print_node(s, n->prop[p], b);
    }
    put(b, "}");
    bool any = false;
    for (int p = 0; p < n->n_props; p++)
        if (n->required[p]) {
            putf(b, "%s%s", any ? "," : ",\"required\":[", n->key[p]);
            any = true;
        }
    if (any)
        put(b, "]");
}

static void print_bound(bytes *b, bool has, const char *keyword, long v)
{
    if (has)
        putf(b, ",\"%s\":%ld", keyword, v);
}

static void print_node(const schema *s, uint16_t id, bytes *b)
{
    const node *n = &s->nodes[id];
    put(b, "{");
    switch (n->kind) {
    case K_OBJECT:
        print_object(s, n, b);
        break;
    case K_ANY_OBJECT:
        put(b, "\"type\":\"object\"");
        break;
    case K_ANY:
        break;
    case K_ARRAY:
        put(b, "\"type\":\"array\"");
        if (n->items != NODE_FREE) {
            put(b, ",\"items\":");
            print_node(s, n->items, b);
        }
        if (n->min_items > 0)
            putf(b, ",\"minItems\":%u", n->min_items);
        if (n->max_items != NO_MAX)
            putf(b, ",\"maxItems\":%u", n->max_items);
        break;
    case K_STRING:
        print_type(b, n, "string");
        if (n->has_pattern) {
            put(b, ",\"pattern\":\"^");
            for (int i = 0; i < n->n_atoms; i++) {
                char quant[2] = {n->atoms[i].quant, '\0'};
                putf(b, strlen(n->atoms[i].set) > 1 ? "[%s]%s" : "%s%s", n->atoms[i].set, quant);
            }
            put(b, "$\"");
        }
        if (n->min_len > 0)
            putf(b, ",\"minLength\":%u", n->min_len);
        if (n->max_len != NO_MAX)
            putf(b, ",\"maxLength\":%u", n->max_len);
        break;
    case K_ENUM:
        if (n->is_const) {
            putf(b, "\"const\":%s", n->lit[0]);
        } else {
            put(b, "\"enum\":[");
            for (int i = 0; i < n->n_lits; i++)
                putf(b, "%s%s", i > 0 ? "," : "", n->lit[i]);
            put(b, "]");
        }
        break;
    case K_INTEGER:
    case K_NUMBER:
        print_type(b, n, n->kind == K_INTEGER ? "integer" : "number");
        print_bound(b, n->has_lo, n->lo_excl ? "exclusiveMinimum" : "minimum", n->lo_v);
        print_bound(b, n->has_hi, n->hi_excl ? "exclusiveMaximum" : "maximum", n->hi_v);
        break;
    case K_BOOLEAN:
        print_type(b, n, "boolean");
        break;
    case K_NULL:
        put(b, "\"type\":\"null\"");
        break;
    case K_UNION:
        put(b, n->one_of ? "\"oneOf\":[" : "\"anyOf\":[");
        for (int a = 0; a < n->n_alts; a++) {
            if (a > 0)
                put(b, ",");
            print_node(s, n->alt[a], b);
        }
        put(b, "]");
        break;
    case K_REF:
        if (n->def < 0)
            put(b, "\"$ref\":\"#\"");
        else
            putf(b, "\"$ref\":\"#/$defs/%s\"", s->def_name[n->def]);
        break;
    }
    put(b, "}");
}

/* The schema's text (a C string the caller frees): the root object, with $defs last. */
static char *print_schema(const schema *s)
{
    bytes b = {0};
    print_node(s, s->root, &b);
    if (s->n_defs > 0) {
        b.n--; /* the root's closing brace */
        put(&b, ",\"$defs\":{");
        for (int d = 0; d < s->n_defs; d++) {
            putf(&b, "%s\"%s\":", d > 0 ? "," : "", s->def_name[d]);
            print_node(s, s->defs[d], &b);
        }
        put(&b, "}}");
    }
    graft_test_put_byte(&b, '\0');
    return (char *)b.p;
}

/* ---- reading a schema of the family from text (the hand cases) ------------------------------- */

static void read_into(schema *s, uint16_t id, json_t *j);

static uint16_t read_node(schema *s, json_t *j)
{
    uint16_t id = new_node(s, K_ANY);
    read_into(s, id, j);
    return id;
}

static void read_pattern(node *n, const char *p)
{
    n->has_pattern = true;
    assert_true(*p++ == '^');
    while (*p != '$') {
        assert_true(n->n_atoms < MAX_ATOMS);
        atom *a = &n->atoms[n->n_atoms++];
        if (*p == '[') {
            const char *end = strchr(p, ']');
            assert_true(end != NULL && end - p - 1 < (long)sizeof a->set);
            memcpy(a->set, p + 1, (size_t)(end - p - 1));
            p = end + 1;
        } else {
            a->set[0] = *p++;
        }
        if (*p == '?' || *p == '*' || *p == '+')
            a->quant = *p++;
    }
    assert_true(p[1] == '\0');
}

static void read_literal(node *n, json_t *v)
{
    assert_true(n->n_lits < MAX_LITS);
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    assert_true(text != NULL && strlen(text) < TEXT_CAP);
    strcpy(n->lit[n->n_lits++], text);
    free(text);
}

static long read_long(json_t *j, const char *key, bool *has)
{
    json_t *v = json_object_get(j, key);
    *has = v != NULL;
    return v != NULL ? (long)json_integer_value(v) : 0;
}

static void read_typed(schema *s, node *n, json_t *j, const char *type)
{
    json_t *v;
    if (strcmp(type, "object") == 0) {
        json_t *props = json_object_get(j, "properties");
        n->kind = props != NULL ? K_OBJECT : K_ANY_OBJECT;
        const char *name;
        json_object_foreach(props, name, v) {
            assert_true(n->n_props < MAX_PROPS && strlen(name) + 3 <= TEXT_CAP);
            snprintf(n->key[n->n_props], TEXT_CAP, "\"%s\"", name);
            n->prop[n->n_props] = read_node(s, v);
            json_t *req = json_object_get(j, "required");
            for (size_t i = 0; i < json_array_size(req); i++)
                if (strcmp(json_string_value(json_array_get(req, i)), name) == 0)
                    n->required[n->n_props] = true;
            n->n_props++;
        }
    } else if (strcmp(type, "array") == 0) {
        n->kind = K_ARRAY;
        if ((v = json_object_get(j, "items")) != NULL)
            n->items = read_node(s, v);
        if ((v = json_object_get(j, "minItems")) != NULL)
            n->min_items = (uint32_t)json_integer_value(v);
        if ((v = json_object_get(j, "maxItems")) != NULL)
            n->max_items = (uint32_t)json_integer_value(v);
    } else if (strcmp(type, "string") == 0) {
        n->kind = K_STRING;
        if ((v = json_object_get(j, "pattern")) != NULL)
            read_pattern(n, json_string_value(v));
        if ((v = json_object_get(j, "minLength")) != NULL)
            n->min_len = (uint32_t)json_integer_value(v);
        if ((v = json_object_get(j, "maxLength")) != NULL)
            n->max_len = (uint32_t)json_integer_value(v);
    } else if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        n->kind = type[0] == 'i' ? K_INTEGER : K_NUMBER;
        bool inclusive, exclusive;
        n->lo_v = read_long(j, "minimum", &inclusive);
        if (!inclusive)
            n->lo_v = read_long(j, "exclusiveMinimum", &exclusive);
        n->has_lo = inclusive || exclusive;
        n->lo_excl = !inclusive && exclusive;
        n->hi_v = read_long(j, "maximum", &inclusive);
        if (!inclusive)
            n->hi_v = read_long(j, "exclusiveMaximum", &exclusive);
        n->has_hi = inclusive || exclusive;
        n->hi_excl = !inclusive && exclusive;
        set_bounds(n);
    } else if (strcmp(type, "boolean") == 0) {
        n->kind = K_BOOLEAN;
    } else {
        assert_string_equal(type, "null");
        n->kind = K_NULL;
    }
}

static void read_into(schema *s, uint16_t id, json_t *j)
{
    node *n = &s->nodes[id];
    json_t *v;
    if ((v = json_object_get(j, "$ref")) != NULL) {
        n->kind = K_REF;
        const char *ref = json_string_value(v);
        n->def = -1;
        for (int d = 0; d < s->n_defs && strcmp(ref, "#") != 0; d++)
            if (strncmp(ref, "#/$defs/", 8) == 0 && strcmp(ref + 8, s->def_name[d]) == 0)
                n->def = d;
        assert_true(n->def >= 0 || strcmp(ref, "#") == 0);
    } else if ((v = json_object_get(j, "anyOf")) != NULL ||
               (v = json_object_get(j, "oneOf")) != NULL) {
        n->kind = K_UNION;
        n->one_of = json_object_get(j, "oneOf") != NULL;
        for (size_t a = 0; a < json_array_size(v); a++) {
            assert_true(n->n_alts < MAX_ALTS);
            uint16_t alt = read_node(s, json_array_get(v, a));
            s->nodes[id].alt[s->nodes[id].n_alts++] = alt;
        }
    } else if ((v = json_object_get(j, "enum")) != NULL) {
        n->kind = K_ENUM;
        for (size_t i = 0; i < json_array_size(v); i++)
            read_literal(n, json_array_get(v, i));
    } else if ((v = json_object_get(j, "const")) != NULL) {
        n->kind = K_ENUM;
        n->is_const = true;
        read_literal(n, v);
    } else if ((v = json_object_get(j, "type")) != NULL) {
        const char *type = json_string_value(v);
        if (json_is_array(v)) {
            assert_true(json_array_size(v) == 2);
            assert_string_equal(json_string_value(json_array_get(v, 1)), "null");
            type = json_string_value(json_array_get(v, 0));
            n->nullable = true;
        }
        read_typed(s, n, j, type);
    }
}

/* Reads a schema of the family from its text (the hand cases'; the random ones' read back):
 * node slots for the root and its $defs first, so that references can name them. */
static void read_schema(schema *s, const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (j == NULL)
        fail_msg("the test's schema %s is not JSON: %s", text, err.text);
    memset(s, 0, sizeof *s);
    s->root = new_node(s, K_ANY);
    json_t *defs = json_object_get(j, "$defs"), *v;
    const char *name;
    json_object_foreach(defs, name, v) {
        assert_true(s->n_defs < MAX_DEFS && strlen(name) < sizeof s->def_name[0]);
        strcpy(s->def_name[s->n_defs], name);
        s->defs[s->n_defs++] = new_node(s, K_ANY);
    }
    for (int d = 0; d < s->n_defs; d++)
        read_into(s, s->defs[d], json_object_get(defs, s->def_name[d]));
    read_into(s, s->root, j);
    json_decref(j);
    assert_true(compute_heights(s));
}

/* ---- the oracle: configurations -------------------------------------------------------------- */

enum {
    MAX_FRAMES = 128, /* 64 containers and the union alternatives between them */
    STATE_LIMIT = 8, /* configurations (or alternatives started) the comparison trusts */
    MAX_INDENT = 32
};

typedef enum frame_kind { FR_OBJECT, FR_FREE_OBJECT, FR_ARRAY, FR_FREE_ARRAY, FR_UNION } frame_kind;

/* An open object or array (count: the next property that may come; the items begun), or the
 * alternative `choice` of union `node` taken for the value open above it. */
typedef struct frame {
    uint16_t node;
    uint8_t kind, choice;
    uint16_t count;
} frame;

typedef enum mode {
    MD_VALUE,        /* a value of `expect` (NODE_FREE: any value) */
    MD_ARRAY_FIRST,  /* after '[': an item of `expect` or ']' */
    MD_OBJECT_FIRST, /* after '{': a key or '}' */
    MD_KEY,          /* after ',' in an object */
    MD_COLON,        /* after a key; `expect` is its value's node */
    MD_AFTER,        /* after a value in the top frame: ',' or its closing bracket */
    MD_DONE          /* after the root: whitespace only */
} mode;

typedef enum space_run { WS_NONE, WS_ONE, WS_CR, WS_LINE } space_run;
typedef enum lex_kind { LX_NONE, LX_LITERAL, LX_STRING, LX_NUMBER } lex_kind;
typedef enum lit_source { LS_KEYS, LS_ENUM, LS_WORDS } lit_source;

/* The token being read (all zero at a token boundary). node: the literal's, string's or
 * number's node (NODE_FREE: free). */
typedef struct lexeme {
    uint8_t kind;
    uint8_t source;   /* literal: where its candidate texts are */
    uint16_t node;
    uint16_t pos;     /* literal: bytes matched */
    uint64_t cand;    /* literal: the texts still possible */
    uint8_t esc;      /* string: 0, 1 after '\\', 2 + k after "\u" and k hex digits */
    bool key;         /* string: a free object's key */
    bool need_low;    /* string: a high surrogate escape was read; a low one must follow */
    uint16_t unit;    /* string: the \u escape's digits so far */
    uint32_t nfa;     /* string with a pattern: the automaton's positions */
    uint32_t len;     /* string: code points read */
    bool neg, lead0, point;
    uint8_t exp;      /* number: 0, 1 after 'e', 2 after its sign, 3 in its digits */
    uint16_t k, j, ed; /* number: digits before the point, after it, in the exponent */
    int64_t ip, fp;   /* typed number: the values of those digits */
} lexeme;

typedef struct config {
    uint8_t mode, ws, indent, depth;
    uint16_t expect;
    lexeme lx;
    frame frames[MAX_FRAMES]; /* [0, depth) used; the rest zero */
} config;

typedef struct cset {
    config *v;
    size_t n, cap;
} cset;

/* Alternatives started (of the byte's class) in the step being taken. */
static size_t started;

static void cset_add(cset *set, const config *c)
{
    size_t len = offsetof(config, frames) + c->depth * sizeof(frame);
    for (size_t i = 0; i < set->n; i++)
        if (memcmp(&set->v[i], c, len) == 0)
            return;
    if (set->n == set->cap) {
        set->cap = 2 * set->cap + 16;
        set->v = realloc(set->v, set->cap * sizeof *set->v);
        assert_non_null(set->v);
    }
    memcpy(&set->v[set->n++], c, sizeof *c);
}

static frame *top(config *c)
{
    return &c->frames[c->depth - 1];
}

static void push(config *c, frame_kind kind, uint16_t node, int choice)
{
    assert_true(c->depth < MAX_FRAMES);
    frame *f = &c->frames[c->depth++];
    f->kind = (uint8_t)kind;
    f->node = node;
    f->choice = (uint8_t)choice;
    f->count = 0;
}

/* Opens an object or array: false (the bracket refused) past the header's limits, 32 levels
 * under the schema (the free value a "type":"object" alone begins is not) and 64 in all. At 32
 * levels a prefix whose object still needs an object or array has no completion, and the
 * header says the recognizer takes it all the same: so does this oracle; the schemas here
 * never need one there. */
static bool open_container(config *c, frame_kind kind, uint16_t node)
{
    int all = 0, schemad = 0;
    for (int i = 0; i < c->depth; i++) {
        all += c->frames[i].kind != FR_UNION;
        schemad += c->frames[i].kind == FR_OBJECT || c->frames[i].kind == FR_ARRAY;
    }
    if (all == GRAFT__JSON_MAX_DEPTH ||
        ((kind == FR_OBJECT || kind == FR_ARRAY) && schemad == GRAFT__SCHEMA_MAX_DEPTH))
        return false;
    push(c, kind, node, 0);
    return true;
}

static void pop(config *c)
{
    memset(&c->frames[--c->depth], 0, sizeof(frame));
}

/* A value ended: the unions it was an alternative of are done with it; next comes its
 * container's ',' or bracket, or after the root only whitespace. */
static void value_done(config *c)
{
    memset(&c->lx, 0, sizeof c->lx);
    c->expect = 0;
    while (c->depth > 0 && top(c)->kind == FR_UNION)
        pop(c);
    c->mode = c->depth == 0 ? MD_DONE : MD_AFTER;
}

static bool config_done(const config *c)
{
    return c->mode == MD_DONE && c->ws != WS_CR;
}

/* ---- the oracle: the classes of first bytes -------------------------------------------------- */

enum { C_OBJECT = 1, C_ARRAY = 2, C_STRING = 4, C_NUMBER = 8, C_BOOLEAN = 16, C_NULL = 32 };

static int class_of_byte(uint8_t b)
{
    if (b == '{')
        return C_OBJECT;
    if (b == '[')
        return C_ARRAY;
    if (b == '"')
        return C_STRING;
    if (b == '-' || (b >= '0' && b <= '9'))
        return C_NUMBER;
    if (b == 't' || b == 'f')
        return C_BOOLEAN;
    return b == 'n' ? C_NULL : 0;
}

/* The classes of a concrete node's values (not a union's or a reference's). */
static int classes_of(const node *n)
{
    int null = n->nullable ? C_NULL : 0;
    switch (n->kind) {
    case K_OBJECT:
    case K_ANY_OBJECT:
        return C_OBJECT;
    case K_ARRAY:
        return C_ARRAY;
    case K_STRING:
        return C_STRING | null;
    case K_INTEGER:
    case K_NUMBER:
        return C_NUMBER | null;
    case K_BOOLEAN:
        return C_BOOLEAN | null;
    case K_NULL:
        return C_NULL;
    case K_ENUM: {
        int classes = 0;
        for (int i = 0; i < n->n_lits; i++)
            classes |= class_of_byte((uint8_t)n->lit[i][0]);
        return classes;
    }
    default:
        return C_OBJECT | C_ARRAY | C_STRING | C_NUMBER | C_BOOLEAN | C_NULL;
    }
}

/* ---- the oracle: strings --------------------------------------------------------------------- */

static bool in_atom(const atom *a, uint32_t cp)
{
    return cp > 0 && cp < 0x80 && strchr(a->set, (int)cp) != NULL;
}

static bool atom_optional(const atom *a)
{
    return a->quant == '?' || a->quant == '*';
}

/* The pattern's positions after cp: bit 0 is the start, bit i + 1 "atom i matched last". From
 * position p the next character matches atom p - 1 again (under * or +) or any atom after it
 * up to and including the first one that is not optional. */
static uint32_t nfa_step(const node *n, uint32_t positions, uint32_t cp)
{
    uint32_t out = 0;
    for (int p = 0; p <= n->n_atoms; p++) {
        if (!(positions >> p & 1))
            continue;
        const atom *last = p > 0 ? &n->atoms[p - 1] : NULL;
        if (last != NULL && (last->quant == '*' || last->quant == '+') && in_atom(last, cp))
            out |= 1u << p;
        for (int a = p; a < n->n_atoms; a++) {
            if (in_atom(&n->atoms[a], cp))
                out |= 1u << (a + 1);
            if (!atom_optional(&n->atoms[a]))
                break;
        }
    }
    return out;
}

static bool nfa_accepts(const node *n, uint32_t positions)
{
    for (int p = 0; p <= n->n_atoms; p++) {
        if (!(positions >> p & 1))
            continue;
        bool rest_optional = true;
        for (int a = p; a < n->n_atoms; a++)
            rest_optional = rest_optional && atom_optional(&n->atoms[a]);
        if (rest_optional)
            return true;
    }
    return false;
}

/* Whether some code point in [lo, hi] (no surrogates there; astral ones stand for any astral
 * code point) can be the string's next character. */
static bool string_takes_some(const schema *s, const lexeme *lx, uint32_t lo, uint32_t hi)
{
    if (lx->node == NODE_FREE)
        return true;
    const node *n = &s->nodes[lx->node];
    if (!n->has_pattern)
        return lx->len < n->max_len;
    for (uint32_t cp = lo; cp <= hi && cp < 0x80; cp++)
        if (nfa_step(n, lx->nfa, cp) != 0)
            return true;
    return false;
}

static bool string_take(const schema *s, lexeme *lx, uint32_t cp)
{
    if (lx->node == NODE_FREE)
        return true;
    const node *n = &s->nodes[lx->node];
    if (n->has_pattern) {
        lx->nfa = nfa_step(n, lx->nfa, cp);
        return lx->nfa != 0;
    }
    return lx->len++ < n->max_len;
}

static bool string_can_end(const schema *s, const lexeme *lx)
{
    if (lx->node == NODE_FREE)
        return true;
    const node *n = &s->nodes[lx->node];
    return n->has_pattern ? nfa_accepts(n, lx->nfa) : lx->len >= n->min_len;
}

/* Whether the \u escape with k hex digits read (lx->unit) can still end in a character the
 * string takes: a low surrogate after a high one; otherwise a code point outside the
 * surrogates, or a high surrogate when some astral code point is taken. */
static bool escape_viable(const schema *s, const lexeme *lx, int k)
{
    uint32_t width = 1u << (4 * (4 - k));
    uint32_t lo = (uint32_t)lx->unit * width, hi = lo + width - 1;
    if (lx->need_low)
        return hi >= 0xDC00 && lo <= 0xDFFF && string_takes_some(s, lx, 0x10000, 0x10FFFF);
    if (lo < 0xD800 && string_takes_some(s, lx, lo, hi < 0xD7FF ? hi : 0xD7FF))
        return true;
    if (hi > 0xDFFF && string_takes_some(s, lx, lo > 0xE000 ? lo : 0xE000, hi))
        return true;
    return lo <= 0xDBFF && hi >= 0xD800 && string_takes_some(s, lx, 0x10000, 0x10FFFF);
}

static void after_string(config *c)
{
    if (c->lx.key) {
        memset(&c->lx, 0, sizeof c->lx);
        c->mode = MD_COLON;
        c->expect = NODE_FREE;
    } else {
        value_done(c);
    }
}

static void string_byte(const schema *s, config *c, uint8_t b, cset *out)
{
    static const char shorts[] = "\"\\/bfnrt";
    static const uint8_t decoded[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
    lexeme *lx = &c->lx;
    assert_true(b < 0x80); /* the texts here are ASCII */
    if (lx->esc == 0) {
        if (lx->need_low) {
            if (b != '\\')
                return;
            lx->esc = 1;
        } else if (b == '"') {
            if (!string_can_end(s, lx))
                return;
            after_string(c);
        } else if (b == '\\') {
            if (!string_takes_some(s, lx, 0, 0x10FFFF))
                return;
            lx->esc = 1;
        } else if (b < 0x20 || !string_take(s, lx, b)) {
            return;
        }
        cset_add(out, c);
        return;
    }
    if (lx->esc == 1) {
        const char *e = b != '\0' ? strchr(shorts, b) : NULL;
        if (b == 'u') {
            lx->esc = 2;
            lx->unit = 0;
            if (!escape_viable(s, lx, 0))
                return;
        } else if (lx->need_low || e == NULL || !string_take(s, lx, decoded[e - shorts])) {
            return;
        } else {
            lx->esc = 0;
        }
        cset_add(out, c);
        return;
    }
    int v = graft_test_hex_digit(b);
    if (v < 0)
        return;
    lx->unit = (uint16_t)(lx->unit * 16 + v);
    int k = ++lx->esc - 2;
    if (!escape_viable(s, lx, k))
        return;
    if (k == 4) {
        if (lx->need_low) {
            lx->need_low = false;
            assert_true(string_take(s, lx, 0x10000)); /* escape_viable saw to it */
        } else if (lx->unit >= 0xD800 && lx->unit <= 0xDBFF) {
            lx->need_low = true;
        } else {
            assert_true(string_take(s, lx, lx->unit));
        }
        lx->esc = 0;
        lx->unit = 0;
    }
    cset_add(out, c);
}

/* ---- the oracle: numbers --------------------------------------------------------------------- */

/* Whether some completion with magnitude in [a, b] (units; negated when neg) meets n's bounds.
 * Every multiple of the node's step in [a, b] is a completion, and a, b and the bounds are
 * multiples of it, so meeting the interval is meeting a completion. */
static bool meets(const node *n, bool neg, i128 a, i128 b)
{
    i128 lo = neg ? -b : a, hi = neg ? -a : b;
    return !(n->has_lo && hi < n->lo) && !(n->has_hi && lo > n->hi);
}

static bool bounded(const node *n)
{
    return n->has_lo || n->has_hi;
}

/* Whether the number read so far has a completion within n's bounds: by the intervals its
 * completions span, one per length of its part before the point. */
static bool number_viable(const node *n, const lexeme *lx)
{
    if (!bounded(n))
        return true;
    i128 step = n->kind == K_INTEGER ? UNITS : 1;
    if (lx->point) {
        i128 w = pow10_i128(18 - lx->j), a = (i128)lx->ip * UNITS + (i128)lx->fp * w;
        return meets(n, lx->neg, a, a + w - 1);
    }
    if (lx->k == 0)
        return meets(n, lx->neg, 0, pow10_i128(18) * UNITS - step);
    if (lx->lead0)
        return meets(n, lx->neg, 0, UNITS - step);
    for (int len = lx->k; len <= 18; len++) {
        i128 m = pow10_i128(len - lx->k) * UNITS;
        if (meets(n, lx->neg, (i128)lx->ip * m, (i128)(lx->ip + 1) * m - step))
            return true;
    }
    return false;
}

static bool number_complete(const node *n, const lexeme *lx)
{
    if (lx->k == 0 || (lx->point && lx->j == 0) || lx->exp == 1 || lx->exp == 2)
        return false;
    if (n == NULL || !bounded(n))
        return true;
    i128 v = (i128)lx->ip * UNITS + (i128)lx->fp * pow10_i128(18 - lx->j);
    if (lx->neg)
        v = -v;
    return !(n->has_lo && v < n->lo) && !(n->has_hi && v > n->hi);
}

/* Reads b as the number's next byte when the grammar and the typed limits allow it. */
static bool number_extend(const node *n, lexeme *lx, uint8_t b)
{
    bool typed = n != NULL, integer = typed && n->kind == K_INTEGER;
    int d = b >= '0' && b <= '9' ? b - '0' : -1;
    if (lx->exp == 1 && (b == '+' || b == '-')) {
        lx->exp = 2;
    } else if (lx->exp > 0) {
        if (d < 0 || (typed && lx->ed == 2))
            return false;
        lx->ed++;
        lx->exp = 3;
    } else if (b == '-') {
        if (lx->neg || lx->k > 0)
            return false;
        lx->neg = true;
    } else if (d >= 0 && lx->point) {
        if (typed && lx->j == 18)
            return false;
        lx->j++;
        if (typed)
            lx->fp = lx->fp * 10 + d;
    } else if (d >= 0) {
        if (lx->lead0 || (typed && lx->k == 18))
            return false;
        lx->lead0 = lx->k == 0 && d == 0;
        lx->k++;
        if (typed)
            lx->ip = lx->ip * 10 + d;
    } else if (b == '.') {
        if (lx->point || lx->k == 0 || integer)
            return false;
        lx->point = true;
    } else if (b == 'e' || b == 'E') {
        if (lx->k == 0 || (lx->point && lx->j == 0) || integer || (typed && bounded(n)))
            return false;
        lx->exp = 1;
    } else {
        return false;
    }
    return true;
}

static void boundary_byte(const schema *s, config *c, uint8_t b, cset *out);

static void number_byte(const schema *s, config *c, uint8_t b, cset *out)
{
    const node *n = c->lx.node == NODE_FREE ? NULL : &s->nodes[c->lx.node];
    if (number_extend(n, &c->lx, b)) {
        if (n == NULL || number_viable(n, &c->lx))
            cset_add(out, c);
        return;
    }
    if (number_complete(n, &c->lx)) {
        value_done(c);
        boundary_byte(s, c, b, out);
    }
}

/* ---- the oracle: literals (keys, enum values, true / false / null) --------------------------- */

static const char *const words[] = {"true", "false", "null"};
enum { W_TRUE = 1, W_FALSE = 2, W_NULL = 4 };

static const char *lit_text(const schema *s, const lexeme *lx, int i)
{
    switch (lx->source) {
    case LS_KEYS:
        return s->nodes[lx->node].key[i];
    case LS_ENUM:
        return s->nodes[lx->node].lit[i];
    default:
        return words[i];
    }
}

static void literal_end(const schema *s, config *c, int i)
{
    if (c->lx.source == LS_KEYS) {
        frame *f = top(c);
        f->count = (uint16_t)(i + 1);
        memset(&c->lx, 0, sizeof c->lx);
        c->mode = MD_COLON;
        c->expect = s->nodes[f->node].prop[i];
    } else {
        value_done(c);
    }
}

/* A candidate that ends with '"' (a key, a string) ends there: no other shares its text. A
 * number or a word ends at the byte after it that continues no candidate. */
static void literal_byte(const schema *s, config *c, uint8_t b, cset *out)
{
    lexeme *lx = &c->lx;
    uint64_t next = 0;
    int ended = -1;
    for (int i = 0; i < 64; i++) {
        if (!(lx->cand >> i & 1))
            continue;
        const char *t = lit_text(s, lx, i);
        size_t len = strlen(t);
        if (lx->pos < len && (uint8_t)t[lx->pos] == b)
            next |= (uint64_t)1 << i;
        else if (lx->pos == len)
            ended = i;
    }
    if (next != 0) {
        lx->cand = next;
        lx->pos++;
        for (int i = 0; i < 64; i++) {
            const char *t = next >> i & 1 ? lit_text(s, lx, i) : NULL;
            if (t != NULL && strlen(t) == lx->pos && t[lx->pos - 1] == '"') {
                literal_end(s, c, i);
                break;
            }
        }
        cset_add(out, c);
    } else if (ended >= 0) {
        literal_end(s, c, ended);
        boundary_byte(s, c, b, out);
    }
}

static void start_literal(const schema *s, config *c, lit_source source, uint16_t node,
                          uint64_t cand, uint8_t b, cset *out)
{
    c->lx.kind = LX_LITERAL;
    c->lx.source = (uint8_t)source;
    c->lx.node = source == LS_WORDS ? 0 : node;
    c->lx.cand = cand;
    literal_byte(s, c, b, out);
}

/* ---- the oracle: values and containers ------------------------------------------------------- */

static void start_number(const schema *s, config *c, uint16_t node, uint8_t b, cset *out)
{
    c->lx.kind = LX_NUMBER;
    c->lx.node = node;
    number_byte(s, c, b, out);
}

static void start_string(config *c, uint16_t node, bool key, cset *out)
{
    c->lx.kind = LX_STRING;
    c->lx.node = node;
    c->lx.key = key;
    c->lx.nfa = 1;
    cset_add(out, c);
}

static void start_free(const schema *s, config *c, uint8_t b, cset *out)
{
    switch (class_of_byte(b)) {
    case C_OBJECT:
        if (!open_container(c, FR_FREE_OBJECT, 0))
            return;
        c->mode = MD_OBJECT_FIRST;
        cset_add(out, c);
        break;
    case C_ARRAY:
        if (!open_container(c, FR_FREE_ARRAY, 0))
            return;
        c->mode = MD_ARRAY_FIRST;
        c->expect = NODE_FREE;
        cset_add(out, c);
        break;
    case C_STRING:
        start_string(c, NODE_FREE, false, out);
        break;
    case C_NUMBER:
        start_number(s, c, NODE_FREE, b, out);
        break;
    case C_BOOLEAN:
    case C_NULL:
        start_literal(s, c, LS_WORDS, 0, W_TRUE | W_FALSE | W_NULL, b, out);
        break;
    default:
        break;
    }
}

/* b begins a value of x: a union starts one configuration per alternative, each with the
 * alternative's frame. */
static void start_value(const schema *s, const config *in, uint16_t x, uint8_t b, cset *out)
{
    config c = *in;
    c.expect = 0;
    c.mode = MD_VALUE; /* until a container opens or the token ends */
    if (x == NODE_FREE) {
        start_free(s, &c, b, out);
        return;
    }
    const node *n = &s->nodes[x];
    if (n->kind == K_REF) {
        start_value(s, &c, target_of(s, n), b, out);
        return;
    }
    if (n->kind == K_UNION) {
        for (int a = 0; a < n->n_alts; a++) {
            config d = c;
            push(&d, FR_UNION, x, a);
            start_value(s, &d, n->alt[a], b, out);
        }
        return;
    }
    if (classes_of(n) & class_of_byte(b))
        started++;
    if (n->nullable && b == 'n') {
        start_literal(s, &c, LS_WORDS, 0, W_NULL, b, out);
        return;
    }
    switch (n->kind) {
    case K_OBJECT:
    case K_ANY_OBJECT:
        if (b != '{' || !open_container(&c, n->kind == K_OBJECT ? FR_OBJECT : FR_FREE_OBJECT, x))
            return;
        c.mode = MD_OBJECT_FIRST;
        cset_add(out, &c);
        return;
    case K_ANY:
        start_free(s, &c, b, out);
        return;
    case K_ARRAY:
        if (b != '[' || !open_container(&c, FR_ARRAY, x))
            return;
        c.mode = MD_ARRAY_FIRST;
        c.expect = n->items;
        cset_add(out, &c);
        return;
    case K_STRING:
        if (b == '"')
            start_string(&c, x, false, out);
        return;
    case K_ENUM:
        start_literal(s, &c, LS_ENUM, x, ((uint64_t)1 << n->n_lits) - 1, b, out);
        return;
    case K_INTEGER:
    case K_NUMBER:
        if (class_of_byte(b) == C_NUMBER)
            start_number(s, &c, x, b, out);
        return;
    case K_BOOLEAN:
        start_literal(s, &c, LS_WORDS, 0, W_TRUE | W_FALSE, b, out);
        return;
    default: /* K_NULL */
        start_literal(s, &c, LS_WORDS, 0, W_NULL, b, out);
        return;
    }
}

static void close_container(config *c, cset *out)
{
    pop(c);
    value_done(c);
    cset_add(out, c);
}

static bool object_can_close(const schema *s, const frame *f)
{
    if (f->kind == FR_FREE_OBJECT)
        return true;
    const node *n = &s->nodes[f->node];
    for (int p = f->count; p < n->n_props; p++)
        if (n->required[p])
            return false;
    return true;
}

static bool array_can_close(const schema *s, const frame *f)
{
    return f->kind == FR_FREE_ARRAY || f->count >= s->nodes[f->node].min_items;
}

/* An item begins in the top (array) frame: false when it would pass maxItems. */
static bool begin_item(const schema *s, config *c)
{
    frame *f = top(c);
    if (f->kind == FR_FREE_ARRAY)
        return true;
    if (f->count >= s->nodes[f->node].max_items)
        return false;
    f->count++;
    return true;
}

/* '"' opens a key: of a schema'd object, one of the properties from the next on, up to and
 * including the first required one. */
static void start_key(const schema *s, config *c, cset *out)
{
    frame *f = top(c);
    if (f->kind == FR_FREE_OBJECT) {
        start_string(c, NODE_FREE, true, out);
        return;
    }
    const node *n = &s->nodes[f->node];
    uint64_t cand = 0;
    for (int p = f->count; p < n->n_props; p++) {
        cand |= (uint64_t)1 << p;
        if (n->required[p])
            break;
    }
    if (cand == 0)
        return;
    c->lx.kind = LX_LITERAL;
    c->lx.source = LS_KEYS;
    c->lx.node = f->node;
    c->lx.cand = cand;
    c->lx.pos = 1;
    cset_add(out, c);
}

static void after_value(const schema *s, config *c, uint8_t b, cset *out)
{
    frame *f = top(c);
    bool object = f->kind == FR_OBJECT || f->kind == FR_FREE_OBJECT;
    if (b == ',' && object) {
        if (f->kind == FR_OBJECT && f->count >= s->nodes[f->node].n_props)
            return;
        c->mode = MD_KEY;
        cset_add(out, c);
    } else if (b == ',') {
        if (!begin_item(s, c))
            return;
        c->mode = MD_VALUE;
        c->expect = f->kind == FR_ARRAY ? s->nodes[f->node].items : NODE_FREE;
        cset_add(out, c);
    } else if (b == '}' && object && object_can_close(s, f)) {
        close_container(c, out);
    } else if (b == ']' && !object && array_can_close(s, f)) {
        close_container(c, out);
    }
}

/* Whitespace: one space or tab, or a line break (LF, CR LF) and up to 32 spaces and tabs. */
static bool space(config *c, uint8_t b)
{
    switch (c->ws) {
    case WS_NONE:
        c->ws = b == '\n' ? WS_LINE : b == '\r' ? WS_CR : WS_ONE;
        return true;
    case WS_CR:
        c->ws = WS_LINE;
        return b == '\n';
    case WS_LINE:
        if ((b != ' ' && b != '\t') || c->indent == MAX_INDENT)
            return false;
        c->indent++;
        return true;
    default:
        return false;
    }
}

/* b at a token boundary. */
static void boundary_byte(const schema *s, config *c, uint8_t b, cset *out)
{
    if (b == ' ' || b == '\t' || b == '\n' || b == '\r') {
        if (space(c, b))
            cset_add(out, c);
        return;
    }
    if (c->ws == WS_CR)
        return;
    c->ws = WS_NONE;
    c->indent = 0;
    switch (c->mode) {
    case MD_VALUE:
        start_value(s, c, c->expect, b, out);
        break;
    case MD_ARRAY_FIRST:
        if (b == ']') {
            if (array_can_close(s, top(c)))
                close_container(c, out);
        } else if (begin_item(s, c)) {
            start_value(s, c, c->expect, b, out);
        }
        break;
    case MD_OBJECT_FIRST:
    case MD_KEY:
        if (b == '}' && c->mode == MD_OBJECT_FIRST) {
            if (object_can_close(s, top(c)))
                close_container(c, out);
        } else if (b == '"') {
            start_key(s, c, out);
        }
        break;
    case MD_COLON:
        if (b == ':') {
            c->mode = MD_VALUE;
            cset_add(out, c);
        }
        break;
    case MD_AFTER:
        after_value(s, c, b, out);
        break;
    default: /* MD_DONE */
        break;
    }
}

static void config_byte(const schema *s, const config *in, uint8_t b, cset *out)
{
    config c = *in;
    switch (c.lx.kind) {
    case LX_LITERAL:
        literal_byte(s, &c, b, out);
        break;
    case LX_STRING:
        string_byte(s, &c, b, out);
        break;
    case LX_NUMBER:
        number_byte(s, &c, b, out);
        break;
    default:
        boundary_byte(s, &c, b, out);
        break;
    }
}

/* ---- the oracle: runs ------------------------------------------------------------------------ */

typedef struct oracle {
    const schema *s;
    cset cur, next;
} oracle;

static void oracle_start(oracle *o, const schema *s)
{
    o->s = s;
    o->cur.n = o->next.n = 0;
    config c;
    memset(&c, 0, sizeof c);
    c.mode = MD_VALUE;
    c.expect = s->root;
    cset_add(&o->cur, &c);
}

static void oracle_free(oracle *o)
{
    free(o->cur.v);
    free(o->next.v);
}

/* The successors of the current set on b, into o->next; returns how many configurations
 * the step made or alternatives of b's class it started, whichever is more. */
static size_t oracle_try(oracle *o, uint8_t b)
{
    o->next.n = 0;
    started = 0;
    for (size_t i = 0; i < o->cur.n; i++)
        config_byte(o->s, &o->cur.v[i], b, &o->next);
    return o->next.n > started ? o->next.n : started;
}

static void oracle_commit(oracle *o)
{
    cset t = o->cur;
    o->cur = o->next;
    o->next = t;
}

static bool oracle_done(const oracle *o)
{
    for (size_t i = 0; i < o->cur.n; i++)
        if (config_done(&o->cur.v[i]))
            return true;
    return false;
}

typedef struct run {
    size_t refused; /* the first refused byte, or n */
    size_t cut;     /* the first byte past STATE_LIMIT, or n */
    bool done_end;  /* done after t[0, min(refused, cut)) */
} run;

/* The oracle over t[0, n): where it refuses, where a step passes `limit` (STATE_LIMIT, or
 * SIZE_MAX: never), done at the end; done_at (when not NULL) gets done after each prefix
 * t[0, i + 1) read. */
static run oracle_run(const schema *s, const uint8_t *t, size_t n, size_t limit, bool *done_at)
{
    oracle o = {0};
    oracle_start(&o, s);
    run r = {n, n, false};
    for (size_t i = 0; i < n; i++) {
        size_t width = oracle_try(&o, t[i]);
        if (width > limit) {
            r.cut = i;
            break;
        }
        if (o.next.n == 0) {
            r.refused = i;
            break;
        }
        oracle_commit(&o);
        if (done_at != NULL)
            done_at[i] = oracle_done(&o);
    }
    r.done_end = oracle_done(&o);
    oracle_free(&o);
    return r;
}

/* ---- generating schemas ---------------------------------------------------------------------- */

static const char *const name_pool[] = {"a", "ab", "abc", "b", "name", "kind", "x", "v"};
static const char *const word_pool[] = {"\"a\"", "\"ab\"", "\"abc\"", "\"b\"", "\"ba\"", "\"x\"",
                                        "\"xy\""};
static const char *const mixed_pool[] = {"1",    "2",    "12",    "20",   "-3",
                                         "null", "true", "\"a\"", "\"ab\""};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int below(size_t n)
{
    return (int)graft_test_below(n);
}

static bool has_key(const node *n, const char *key)
{
    for (int p = 0; p < n->n_props; p++)
        if (strcmp(n->key[p], key) == 0)
            return true;
    return false;
}

/* A property name not in n yet, into key (quoted); false when the pool is spent. */
static bool fresh_key(const node *n, char key[TEXT_CAP])
{
    for (int tries = 0; tries < 16; tries++) {
        snprintf(key, TEXT_CAP, "\"%s\"", name_pool[below(COUNT(name_pool))]);
        if (!has_key(n, key))
            return true;
    }
    return false;
}

static void random_bounds(node *n)
{
    do {
        n->has_lo = !graft_test_one_in(4);
        n->has_hi = !graft_test_one_in(4);
        n->lo_v = below(21) - 5;
        n->hi_v = n->lo_v + below(16) - 2;
        n->lo_excl = graft_test_one_in(4);
        n->hi_excl = graft_test_one_in(4);
        set_bounds(n);
    } while (n->has_lo && n->has_hi && n->lo > n->hi);
}

static void random_literals(node *n, const char *const *pool, size_t size)
{
    int want = 1 + below(4);
    n->kind = K_ENUM;
    for (int tries = 0; tries < 16 && n->n_lits < want; tries++) {
        const char *t = pool[below(size)];
        bool dup = false;
        for (int i = 0; i < n->n_lits; i++)
            dup = dup || strcmp(n->lit[i], t) == 0;
        if (!dup)
            strcpy(n->lit[n->n_lits++], t);
    }
    n->is_const = n->n_lits == 1 && graft_test_one_in(2);
}

static void random_string(node *n)
{
    static const char letters[] = "abx";
    n->kind = K_STRING;
    switch (below(3)) {
    case 0:
        n->has_pattern = true;
        n->n_atoms = 1 + below(3);
        for (int i = 0; i < n->n_atoms; i++) {
            atom *a = &n->atoms[i];
            a->set[0] = letters[below(3)];
            if (graft_test_one_in(3))
                a->set[1] = a->set[0] == 'b' ? 'a' : 'b';
            a->quant = "\0?*+"[below(4)];
        }
        break;
    case 1:
        n->min_len = (uint32_t)below(3);
        if (!graft_test_one_in(4))
            n->max_len = n->min_len + (uint32_t)below(4);
        break;
    default:
        break;
    }
}

static uint16_t random_scalar(schema *s)
{
    uint16_t id = new_node(s, K_STRING);
    node *n = &s->nodes[id];
    switch (below(9)) {
    case 0:
    case 1:
        random_string(n);
        break;
    case 2:
        random_literals(n, word_pool, COUNT(word_pool));
        break;
    case 3:
        random_literals(n, mixed_pool, COUNT(mixed_pool));
        break;
    case 4:
    case 5:
        n->kind = below(2) ? K_INTEGER : K_NUMBER;
        if (!graft_test_one_in(5))
            random_bounds(n);
        break;
    case 6:
    case 7:
        n->kind = K_BOOLEAN;
        break;
    default:
        n->kind = K_NULL;
        break;
    }
    if (n->kind != K_ENUM && n->kind != K_NULL && graft_test_one_in(6))
        n->nullable = true;
    return id;
}

static uint16_t random_node(schema *s, int depth);

static uint16_t random_object(schema *s, int depth, int most)
{
    uint16_t id = new_node(s, K_OBJECT);
    int want = 1 + below((size_t)most);
    char key[TEXT_CAP];
    while (s->nodes[id].n_props < want && fresh_key(&s->nodes[id], key)) {
        uint16_t value = random_node(s, depth + 1);
        node *n = &s->nodes[id];
        strcpy(n->key[n->n_props], key);
        n->prop[n->n_props] = value;
        n->required[n->n_props++] = !graft_test_one_in(3);
    }
    return id;
}

/* An object like base in its first property, different after it: a value replaced, a
 * property added at the end or dropped, a property's required flag or its name changed. */
static uint16_t variant_of(schema *s, uint16_t base, int depth)
{
    uint16_t id = new_node(s, K_OBJECT);
    s->nodes[id] = s->nodes[base];
    for (int edits = 1 + below(2); edits > 0; edits--) {
        node *n = &s->nodes[id];
        int p = n->n_props > 1 ? 1 + below((size_t)n->n_props - 1) : 0;
        char key[TEXT_CAP];
        switch (below(5)) {
        case 0: {
            uint16_t value = random_node(s, depth + 1);
            s->nodes[id].prop[p] = value;
            break;
        }
        case 1:
            if (n->n_props < MAX_PROPS && fresh_key(n, key)) {
                uint16_t value = random_node(s, depth + 1);
                n = &s->nodes[id];
                strcpy(n->key[n->n_props], key);
                n->prop[n->n_props] = value;
                n->required[n->n_props++] = graft_test_one_in(2);
            }
            break;
        case 2:
            if (n->n_props > 1)
                n->n_props--;
            break;
        case 3:
            n->required[p] = !n->required[p];
            break;
        default:
            if (p > 0 && fresh_key(n, key))
                strcpy(n->key[p], key);
            break;
        }
    }
    return id;
}

/* The alternatives of union x, nested unions and references flattened (as the header says
 * the compiler reads them), appended to out[0, n); returns the new count. */
static int flatten(const schema *s, uint16_t x, uint16_t *out, int n)
{
    const node *nd = &s->nodes[x];
    if (nd->kind == K_REF)
        return flatten(s, target_of(s, nd), out, n);
    if (nd->kind != K_UNION) {
        assert_true(n < MAX_NODES);
        out[n] = x;
        return n + 1;
    }
    for (int a = 0; a < nd->n_alts; a++)
        n = flatten(s, nd->alt[a], out, n);
    return n;
}

/* The enum node of object x's tag (its first property, required, const or enum), or -1. */
static int tag_of(const schema *s, uint16_t x)
{
    const node *n = &s->nodes[x];
    if (n->kind != K_OBJECT || n->n_props == 0 || !n->required[0])
        return -1;
    return s->nodes[n->prop[0]].kind == K_ENUM ? n->prop[0] : -1;
}

static bool share_literal(const node *a, const node *b)
{
    for (int i = 0; i < a->n_lits; i++)
        for (int j = 0; j < b->n_lits; j++)
            if (strcmp(a->lit[i], b->lit[j]) == 0)
                return true;
    return false;
}

/* Whether union u's alternatives are exclusive as far as the first byte or a tag tells (what
 * oneOf needs): no two share a class of first bytes, but objects with a tag of the same name
 * whose values none share. */
static bool exclusive(const schema *s, uint16_t u)
{
    uint16_t alts[MAX_NODES];
    int n = flatten(s, u, alts, 0);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const node *a = &s->nodes[alts[i]], *b = &s->nodes[alts[j]];
            int ta = tag_of(s, alts[i]), tb = tag_of(s, alts[j]);
            if (!(classes_of(a) & classes_of(b)))
                continue;
            if (ta < 0 || tb < 0 || strcmp(a->key[0], b->key[0]) != 0 ||
                share_literal(&s->nodes[ta], &s->nodes[tb]))
                return false;
        }
    return true;
}

/* Object alternatives tagged: a first property "tag", required, whose values (one or two,
 * "tA", "uA" for alternative A) no two alternatives share; but at times one shares "t0", so
 * that the tag does not tell them apart. */
static void tag_objects(schema *s, const uint16_t *alts, int n)
{
    for (int a = 0; a < n; a++) {
        uint16_t value = new_node(s, K_ENUM);
        node *v = &s->nodes[value];
        snprintf(v->lit[v->n_lits++], TEXT_CAP, "\"t%d\"", graft_test_one_in(6) ? 0 : a);
        if (graft_test_one_in(3))
            snprintf(v->lit[v->n_lits++], TEXT_CAP, "\"u%d\"", a);
        v->is_const = v->n_lits == 1 && graft_test_one_in(2);
        node *o = &s->nodes[alts[a]];
        strcpy(o->key[0], "\"tag\"");
        o->prop[0] = value;
        o->required[0] = true;
    }
}

/* A union whose alternatives tend to share first bytes (theme, or -1: any): 0, objects alike
 * in their first property (at times tagged); 1, strings; 2, numbers; 3, anything; 4, a union
 * inside; 5, references; 6, alternatives of different classes; at times null too. oneOf
 * where the alternatives are exclusive (as the header requires of it), at times. */
static uint16_t random_union(schema *s, int depth, int theme)
{
    static const node_kind distinct[] = {K_OBJECT, K_STRING, K_NUMBER, K_BOOLEAN, K_ARRAY};
    uint16_t id = new_node(s, K_UNION);
    int want = 2 + below(3), first_kind = below(COUNT(distinct));
    if (theme < 0)
        theme = below(7);
    bool tagged = theme == 0 && graft_test_one_in(3);
    uint16_t alts[MAX_ALTS];
    int n = 0;
    for (int a = 0; a < want; a++) {
        uint16_t alt;
        switch (theme) {
        case 0:
            alt = a == 0 ? random_object(s, depth, 3) : variant_of(s, alts[0], depth);
            if (a > 0 && !tagged && graft_test_one_in(6))
                alt = new_node(s, K_ANY_OBJECT);
            break;
        case 1:
            alt = new_node(s, K_STRING);
            if (graft_test_one_in(2))
                random_literals(&s->nodes[alt], word_pool, COUNT(word_pool));
            else
                random_string(&s->nodes[alt]);
            break;
        case 2:
            alt = new_node(s, below(2) ? K_INTEGER : K_NUMBER);
            if (!graft_test_one_in(5))
                random_bounds(&s->nodes[alt]);
            break;
        case 4:
            alt = a == 0 && depth < 3 ? random_union(s, depth + 1, -1)
                                        : random_node(s, depth + 1);
            break;
        case 5:
            if (s->n_defs > 0 && a < want - 1) {
                alt = new_node(s, K_REF);
                s->nodes[alt].def = below((size_t)s->n_defs);
                break;
            }
            alt = random_object(s, depth, 3);
            break;
        case 6:
            if (a >= (int)COUNT(distinct))
                continue;
            switch (distinct[(first_kind + a) % COUNT(distinct)]) {
            case K_OBJECT:
                alt = random_object(s, depth, 3);
                break;
            case K_ARRAY:
                alt = new_node(s, K_ARRAY);
                s->nodes[alt].max_items = 2;
                break;
            case K_STRING:
                alt = new_node(s, K_STRING);
                random_string(&s->nodes[alt]);
                break;
            default:
                alt = new_node(s, distinct[(first_kind + a) % COUNT(distinct)]);
                if (s->nodes[alt].kind == K_NUMBER && graft_test_one_in(2))
                    random_bounds(&s->nodes[alt]);
                break;
            }
            break;
        default:
            alt = random_node(s, depth + 1);
            break;
        }
        alts[n++] = alt;
    }
    if (tagged)
        tag_objects(s, alts, n);
    if (tagged && graft_test_one_in(4))
        alts[n++] = random_object(s, depth, 3); /* untagged beside them */
    if (graft_test_one_in(4))
        alts[n++] = new_node(s, K_NULL);
    node *u = &s->nodes[id];
    u->n_alts = n;
    memcpy(u->alt, alts, (size_t)n * sizeof alts[0]);
    u->one_of = graft_test_one_in(2) && exclusive(s, id);
    return id;
}

static uint16_t random_node(schema *s, int depth)
{
    if (s->n_nodes > MAX_NODES / 2)
        depth = 4; /* scalars only from here: the schema is large enough */
    int r = depth >= 4 ? 46 + below(54) : below(100);
    if (r < 14)
        return random_object(s, depth, 4);
    if (r < 32)
        return random_union(s, depth, -1);
    if (r < 38) {
        uint16_t items = random_node(s, depth + 1);
        uint16_t id = new_node(s, K_ARRAY);
        node *n = &s->nodes[id];
        n->items = items;
        n->min_items = (uint32_t)below(3) / 2;
        if (graft_test_one_in(2))
            n->max_items = n->min_items + (uint32_t)below(3);
        return id;
    }
    if (r < 42 && s->n_defs > 0) {
        uint16_t id = new_node(s, K_REF);
        s->nodes[id].def = below((size_t)s->n_defs);
        return id;
    }
    if (r < 43) {
        uint16_t id = new_node(s, K_REF);
        s->nodes[id].def = -1;
        return id;
    }
    if (r < 45)
        return new_node(s, K_ANY_OBJECT);
    if (r < 46)
        return new_node(s, K_ANY);
    return random_scalar(s);
}

/* A random schema of the family whose every node has an instance: $defs (objects, unions of
 * objects, each may refer to the others and to itself), then the root, whose first property is
 * a union. */
static void random_schema(schema *s)
{
    do {
        memset(s, 0, sizeof *s);
        s->root = new_node(s, K_OBJECT);
        s->n_defs = below(3);
        for (int d = 0; d < s->n_defs; d++) {
            snprintf(s->def_name[d], sizeof s->def_name[d], "D%d", d);
            s->defs[d] = new_node(s, K_OBJECT);
        }
        for (int d = 0; d < s->n_defs; d++) {
            /* an object, or a union of objects (whose alternatives are no references, so
             * that no union holds itself before a value begins) */
            uint16_t body = graft_test_one_in(3) ? random_union(s, 2, 0) : random_object(s, 2, 3);
            s->nodes[s->defs[d]] = s->nodes[body];
        }
        uint16_t body = random_object(s, 1, 4), first = random_union(s, 1, -1);
        s->nodes[s->root] = s->nodes[body];
        s->nodes[s->root].prop[0] = first; /* a union, at least there */
    } while (!compute_heights(s));
}

/* ---- generating texts ------------------------------------------------------------------------ */

enum { DEEP = 3, MAX_SPANS = 256, MAX_OPENINGS = 12 };

/* Where a schema'd value was written (its leading whitespace included). */
typedef struct span {
    size_t at, end;
    uint16_t node;
} span;

typedef struct writer {
    bytes *b;
    size_t ws_rate;      /* a token gets whitespace before it one time in ws_rate (0: never) */
    const char *ws_form; /* that whitespace, or NULL: a random form */
    span spans[MAX_SPANS];
    size_t n_spans;
} writer;

static const char *const ws_forms[] = {" ", "\t", "\n", "\r\n", "\n  ", "\r\n\t\t", "\n\t \t",
                                       "\n                                "};

/* Before a token: at most one run of whitespace (none before the first byte). */
static void lead(writer *w)
{
    if (w->ws_rate == 0 || w->b->n == 0 || !graft_test_one_in(w->ws_rate))
        return;
    put(w->b, w->ws_form != NULL ? w->ws_form : ws_forms[below(COUNT(ws_forms))]);
}

static void token(writer *w, const char *text)
{
    lead(w);
    put(w->b, text);
}

/* One character of a string: a letter of `letters`, or at times the same as an escape. */
static void put_char(bytes *b, char ch)
{
    if (graft_test_one_in(6))
        putf(b, graft_test_one_in(2) ? "\\u%04x" : "\\u%04X", (unsigned)ch);
    else
        graft_test_put_byte(b, (uint8_t)ch);
}

/* count characters of a free string: letters, short escapes, \u escapes, a surrogate pair. */
static void put_free_chars(bytes *b, uint32_t count)
{
    static const char *const escapes[] = {"\\n", "\\\"", "\\\\", "\\/", "\\u0041", "\\t",
                                          "\\uD83D\\uDE00", " "};
    for (uint32_t i = 0; i < count; i++) {
        if (graft_test_one_in(5))
            put(b, escapes[below(COUNT(escapes))]);
        else
            put_char(b, "abxy"[below(4)]);
    }
}

static void put_units(bytes *b, i128 v)
{
    if (v < 0) {
        put(b, "-");
        v = -v;
    }
    putf(b, "%" PRIu64, (uint64_t)(v / UNITS));
    uint64_t frac = (uint64_t)(v % UNITS);
    if (frac == 0)
        return;
    char digits[24];
    snprintf(digits, sizeof digits, "%018" PRIu64, frac);
    for (int i = 17; digits[i] == '0'; i--)
        digits[i] = '\0';
    putf(b, ".%s", digits);
}

static void put_number(bytes *b, const node *n)
{
    static const char *const free_forms[] = {"0", "-0", "7", "-12", "999999999999999999",
                                             "-100000000000000000"};
    static const char *const real_forms[] = {"0.5", "-2.25", "1e5", "-7E+12", "2.5e-3",
                                             "0.000000000000000001", "123456789012345678.9"};
    bool integer = n->kind == K_INTEGER;
    if (!bounded(n)) {
        if (integer || graft_test_one_in(2))
            put(b, free_forms[below(COUNT(free_forms))]);
        else
            put(b, real_forms[below(COUNT(real_forms))]);
        return;
    }
    static const i128 grains[] = {UNITS, UNITS / 10, UNITS / 100, 1};
    i128 lo = n->has_lo ? n->lo : n->hi - 40 * UNITS, hi = n->has_hi ? n->hi : lo + 40 * UNITS;
    for (int g = integer ? 0 : below(4); g < 4; g++) {
        i128 grain = grains[g];
        i128 first = lo >= 0 ? (lo + grain - 1) / grain : -((-lo) / grain);
        i128 last = hi >= 0 ? hi / grain : -((-hi + grain - 1) / grain);
        if (first > last)
            continue;
        i128 span_ = last - first + 1;
        uint64_t pick = graft_test_random() % (uint64_t)(span_ < ((i128)1 << 62) ? span_
                                                                              : (i128)1 << 62);
        put_units(b, (first + (i128)pick) * grain);
        return;
    }
    fail_msg("no number within bounds");
}

static void write_value(const schema *s, writer *w, uint16_t id, int depth);

static void write_free(writer *w, int depth)
{
    static const char *const scalars[] = {"true", "false", "null", "0", "-1.5e300",
                                          "123456789012345678901234", "\"\"", "\"a\\u00e9\""};
    int r = depth >= DEEP ? 3 : below(6);
    if (r == 0 || r == 1) {
        bool object = r == 0;
        token(w, object ? "{" : "[");
        for (int i = 0, count = below(3); i < count; i++) {
            if (i > 0)
                token(w, ",");
            if (object) {
                lead(w);
                put(w->b, "\"");
                put_free_chars(w->b, (uint32_t)below(3));
                put(w->b, "\"");
                token(w, ":");
            }
            write_free(w, depth + 1);
        }
        token(w, object ? "}" : "]");
    } else if (r == 2) {
        lead(w);
        put(w->b, "\"");
        put_free_chars(w->b, (uint32_t)below(4));
        put(w->b, "\"");
    } else {
        token(w, scalars[below(COUNT(scalars))]);
    }
}

static void write_string(bytes *b, const node *n)
{
    put(b, "\"");
    if (n->has_pattern) {
        for (int i = 0; i < n->n_atoms; i++) {
            const atom *a = &n->atoms[i];
            int reps = a->quant == '\0' ? 1 : a->quant == '?' ? below(2)
                                          : a->quant == '*' ? below(4) : 1 + below(3);
            for (int r = 0; r < reps; r++)
                put_char(b, a->set[below(strlen(a->set))]);
        }
    } else {
        uint32_t most = n->max_len != NO_MAX ? n->max_len : n->min_len + 4;
        put_free_chars(b, n->min_len + (uint32_t)below(most - n->min_len + 1));
    }
    put(b, "\"");
}

/* An instance of node id; below DEEP levels the fewest objects and arrays it can have. */
static void write_value(const schema *s, writer *w, uint16_t id, int depth)
{
    size_t at = w->b->n;
    if (id == NODE_FREE) {
        write_free(w, depth);
        return;
    }
    const node *n = &s->nodes[id];
    bool deep = depth >= DEEP;
    if (n->nullable && graft_test_one_in(4)) {
        token(w, "null");
    } else if (n->kind == K_OBJECT) {
        token(w, "{");
        bool first = true;
        for (int p = 0; p < n->n_props; p++) {
            if (!n->required[p] && (deep || graft_test_one_in(2)))
                continue;
            if (!first)
                token(w, ",");
            token(w, n->key[p]);
            token(w, ":");
            write_value(s, w, n->prop[p], depth + 1);
            first = false;
        }
        token(w, "}");
    } else if (n->kind == K_ANY_OBJECT) {
        token(w, "{");
        for (int i = 0, count = deep ? 0 : below(3); i < count; i++) {
            if (i > 0)
                token(w, ",");
            token(w, graft_test_one_in(2) ? "\"a\"" : "\"zz\"");
            token(w, ":");
            write_free(w, depth + 1);
        }
        token(w, "}");
    } else if (n->kind == K_ANY) {
        write_free(w, depth);
    } else if (n->kind == K_ARRAY) {
        uint32_t most = n->max_items != NO_MAX ? n->max_items : n->min_items + 3;
        uint32_t count = n->min_items + (deep ? 0 : (uint32_t)below(most - n->min_items + 1));
        token(w, "[");
        for (uint32_t i = 0; i < count; i++) {
            if (i > 0)
                token(w, ",");
            write_value(s, w, n->items, depth + 1);
        }
        token(w, "]");
    } else if (n->kind == K_STRING) {
        lead(w);
        write_string(w->b, n);
    } else if (n->kind == K_ENUM) {
        token(w, n->lit[below((size_t)n->n_lits)]);
    } else if (n->kind == K_INTEGER || n->kind == K_NUMBER) {
        lead(w);
        put_number(w->b, n);
    } else if (n->kind == K_BOOLEAN) {
        token(w, graft_test_one_in(2) ? "true" : "false");
    } else if (n->kind == K_NULL) {
        token(w, "null");
    } else if (n->kind == K_UNION) {
        int pick = below((size_t)n->n_alts);
        for (int a = 0; deep && a < n->n_alts; a++)
            if (s->height[n->alt[a]] < s->height[n->alt[pick]])
                pick = a;
        write_value(s, w, n->alt[pick], depth);
    } else {
        write_value(s, w, target_of(s, n), depth);
    }
    if (w->n_spans < MAX_SPANS)
        w->spans[w->n_spans++] = (span){at, w->b->n, id};
}

/* A random instance of s into b (emptied first), with the spans of its values in w. */
static void write_instance(const schema *s, writer *w, bytes *b)
{
    b->n = 0;
    w->b = b;
    w->n_spans = 0;
    write_value(s, w, s->root, 0);
    lead(w);
}

static size_t openings(const uint8_t *t, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += t[i] == '{' || t[i] == '[';
    return k;
}

/* The bytes mutations and random texts draw from: JSON's structure, whitespace, the letters
 * of the names, literals and escapes here, digits and number signs. */
static const char alphabet[] = "{}[]:,\"\\ \t\n\r0123456789-+.eEabcdfklmnrstuvxyzADF/";

static void mutate(bytes *t)
{
    for (int edits = 1 + below(3); edits > 0; edits--) {
        size_t at = graft_test_below(t->n + 1);
        uint8_t c = (uint8_t)alphabet[below(sizeof alphabet - 1)];
        switch (below(3)) {
        case 0:
            if (at < t->n)
                t->p[at] = c;
            break;
        case 1:
            graft_test_put_byte(t, 0);
            memmove(t->p + at + 1, t->p + at, t->n - 1 - at);
            t->p[at] = c;
            break;
        default:
            if (at < t->n) {
                memmove(t->p + at, t->p + at + 1, t->n - at - 1);
                t->n--;
            }
            break;
        }
    }
}

/* One value of the instance in t replaced by a value of: the same node, another alternative
 * of the same union, or another node of the schema. */
static void splice(const schema *s, writer *w, bytes *t)
{
    if (w->n_spans == 0)
        return;
    span sp = w->spans[graft_test_below(w->n_spans)];
    uint16_t id = sp.node;
    const node *n = &s->nodes[id];
    int r = below(3);
    if (r == 0 && n->kind == K_UNION)
        id = n->alt[below((size_t)n->n_alts)];
    else if (r == 1)
        id = (uint16_t)below((size_t)s->n_nodes);
    bytes value = {0};
    writer v = *w;
    v.b = &value;
    v.n_spans = 0;
    graft_test_put_byte(&value, ' '); /* so that lead() may write whitespace first */
    write_value(s, &v, id, 1);
    bytes out = {0};
    graft_test_put(&out, t->p, sp.at);
    graft_test_put(&out, value.p + 1, value.n - 1);
    graft_test_put(&out, t->p + sp.end, t->n - sp.end);
    free(value.p);
    free(t->p);
    *t = out;
}

/* A random token string opening with '{': names, literals, brackets, numbers, whitespace. */
static void random_tokens(const schema *s, bytes *t)
{
    static const char *const tokens[] = {"{", "}", "[", "]", ":", ",", " ", "\n  ", "null",
                                         "true", "1", "-2.5", "12", "\"\"", "\"ab\"", "\"\\u0061\"",
                                         "1e5"};
    t->n = 0;
    put(t, "{");
    for (int i = 0, count = below(14); i < count; i++) {
        const node *n = &s->nodes[below((size_t)s->n_nodes)];
        int r = below(10);
        if (r < 3 && n->kind == K_OBJECT && n->n_props > 0)
            put(t, n->key[below((size_t)n->n_props)]);
        else if (r < 4 && n->kind == K_ENUM)
            put(t, n->lit[below((size_t)n->n_lits)]);
        else if (r < 5)
            graft_test_put_byte(t, (uint8_t)alphabet[below(sizeof alphabet - 1)]);
        else
            put(t, tokens[below(COUNT(tokens))]);
    }
}

/* ---- comparing the recognizer with the oracle ------------------------------------------------ */

/* What the comparisons covered: forked counts the bytes read while the oracle followed two
 * configurations or more, widest the most it followed. */
typedef struct tally {
    size_t texts, bytes, refused, done, cut, probes, forked, widest;
} tally;

static tally counts;

/* After t[0, i): every byte of the alphabet is fed to the recognizer (restored when it takes
 * one) and tried on the oracle, where the step stays within limit. */
static void probe(const char *schema_text, oracle *o, graft__json_recognizer *r,
                  const uint8_t *t, size_t i, size_t limit)
{
    graft__json_recognizer saved = *r;
    for (size_t k = 0; k < sizeof alphabet - 1; k++) {
        uint8_t b = (uint8_t)alphabet[k];
        if (oracle_try(o, b) > limit)
            continue;
        bool want = o->next.n > 0, got = graft__json_recognizer_feed(r, b);
        counts.probes++;
        if (got)
            *r = saved;
        if (want != got) {
            char what[160];
            snprintf(what, sizeof what, "probe: after the %zu bytes below, byte '%c' (0x%02X): "
                     "the oracle %s it, the recognizer %s it", i, b >= 0x20 ? b : '?', b,
                     want ? "takes" : "refuses", got ? "takes" : "refuses");
            report(what, schema_text, t, i);
        }
    }
}

/* The recognizer on t[0, n) against the oracle: the first refused byte, done after every
 * prefix (and, with probe_all, every byte of the alphabet after every prefix), up to the
 * first step past limit (STATE_LIMIT but where a test knows better). */
static void compare(const char *schema_text, const graft__json_schema *compiled,
                    const schema *s, const uint8_t *t, size_t n, bool probe_all, size_t limit)
{
    oracle o = {0};
    oracle_start(&o, s);
    graft__json_recognizer r;
    graft__json_recognizer_init(&r, compiled);
    unsigned before = graft_test_tally_failures();
    counts.texts++;
    for (size_t i = 0; i < n && graft_test_tally_failures() == before; i++) {
        if (probe_all)
            probe(schema_text, &o, &r, t, i, limit);
        size_t width = oracle_try(&o, t[i]);
        if (width > limit) {
            counts.cut++;
            break;
        }
        counts.forked += o.next.n > 1;
        counts.widest = width > counts.widest ? width : counts.widest;
        bool want = o.next.n > 0, got = graft__json_recognizer_feed(&r, t[i]);
        counts.bytes++;
        char what[200];
        if (want != got) {
            snprintf(what, sizeof what, "byte %zu ('%c'): the oracle %s it, the recognizer %s "
                     "it", i, t[i] >= 0x20 ? t[i] : '?', want ? "takes" : "refuses",
                     got ? "takes" : "refuses");
            report(what, schema_text, t, n);
            break;
        }
        if (!want) {
            counts.refused++;
            if (graft__json_recognizer_done(&r) != oracle_done(&o)) {
                snprintf(what, sizeof what, "done after the refused byte %zu changed", i);
                report(what, schema_text, t, n);
            }
            break;
        }
        oracle_commit(&o);
        bool want_done = oracle_done(&o), got_done = graft__json_recognizer_done(&r);
        if (want_done != got_done) {
            snprintf(what, sizeof what, "done after %zu bytes: the oracle says %d, the "
                     "recognizer %d", i + 1, want_done, got_done);
            report(what, schema_text, t, n);
        }
        counts.done += i + 1 == n && want_done;
    }
    oracle_free(&o);
}

/* ---- test_oracle ----------------------------------------------------------------------------- */

static void test_oracle(void **state)
{
    (void)state;
    begin_test(1);
    static schema s, back;
    bytes t = {0};
    writer w = {.ws_rate = 8};
    for (int k = 0; k < 200; k++) {
        random_schema(&s);
        char *text = print_schema(&s);
        read_schema(&back, text);
        char *again = print_schema(&back);
        if (strcmp(text, again) != 0)
            report("oracle: a schema read back prints differently", text,
                   (const uint8_t *)again, strlen(again));
        for (int i = 0; i < 10; i++) {
            write_instance(&s, &w, &t);
            if (openings(t.p, t.n) > MAX_OPENINGS)
                continue;
            bool done_at[4096];
            assert_true(t.n <= sizeof done_at);
            run r = oracle_run(&s, t.p, t.n, STATE_LIMIT, done_at);
            if (r.cut < t.n)
                continue;
            size_t last = t.n;
            while (t.p[last - 1] != '}')
                last--;
            bool ok = r.refused == t.n;
            for (size_t j = 0; ok && j < t.n; j++)
                ok = done_at[j] == (j + 1 >= last && t.p[j] != '\r');
            if (!ok)
                report("oracle: an instance is not accepted, or done before its end", text,
                       t.p, t.n);
        }
        free(text);
        free(again);
    }
    free(t.p);
    graft_test_tally_end(seed);
}

/* ---- test_hand_cases ------------------------------------------------------------------------- */

typedef struct hand {
    const char *schema;
    const char *text;
    size_t refused; /* the first refused byte, or SIZE_MAX: all accepted */
    bool done;      /* accepted: done at the end */
} hand;

#define REFUSES(S, HEAD, TAIL) {S, HEAD TAIL, sizeof(HEAD) - 1, false}
#define ACCEPTS(S, T, DONE) {S, T, SIZE_MAX, DONE}

#define OBJ(PROPS, REQ) "{\"type\":\"object\",\"properties\":{" PROPS "},\"required\":[" REQ "]}"
#define ROOT(PROP) OBJ("\"v\":" PROP, "\"v\"")
#define ANY2(A, B) "{\"anyOf\":[" A "," B "]}"
#define ONE2(A, B) "{\"oneOf\":[" A "," B "]}"
#define STR "{\"type\":\"string\"}"
#define INT "{\"type\":\"integer\"}"
#define BOOL "{\"type\":\"boolean\"}"
#define NUL "{\"type\":\"null\"}"
#define RANGE(T, LO, HI) "{\"type\":\"" T "\",\"minimum\":" #LO ",\"maximum\":" #HI "}"

/* pydantic's Union[Cat, Dog]: a required "name" first in each, different after it */
#define CAT OBJ("\"name\":" STR ",\"meows\":" BOOL, "\"name\",\"meows\"")
#define DOG OBJ("\"name\":" STR ",\"barks\":" RANGE("integer", 0, 9), "\"name\",\"barks\"")
#define PET ROOT(ANY2(CAT, DOG))
/* one alternative's properties a prefix of the other's */
#define SHORT OBJ("\"a\":" INT, "\"a\"")
#define LONG OBJ("\"a\":" INT ",\"b\":" STR, "\"a\",\"b\"")
#define PREFIX ROOT(ANY2(SHORT, LONG))
/* a listed object beside a free one */
#define FREE_OBJ "{\"type\":\"object\"}"
#define BESIDE ROOT(ANY2(SHORT, FREE_OBJ))
/* enum values sharing prefixes across alternatives */
#define ENUMS ROOT(ANY2("{\"enum\":[\"ab\",\"x\"]}", "{\"const\":\"abc\"}"))
/* patterns */
#define PATTERNS ROOT(ANY2("{\"type\":\"string\",\"pattern\":\"^a+$\"}", \
                           "{\"type\":\"string\",\"pattern\":\"^b[ab]*$\"}"))
#define LENGTHS ROOT(ANY2("{\"type\":\"string\",\"maxLength\":2}", \
                          "{\"type\":\"string\",\"pattern\":\"^x*y$\"}"))
/* numbers: overlapping and disjoint bounds, integer beside number */
#define OVERLAP ROOT(ANY2(RANGE("integer", 0, 10), RANGE("number", 5, 20)))
#define DISJOINT ROOT(ANY2(RANGE("integer", 0, 9), RANGE("integer", 100, 199)))
#define SIGNS ROOT(ANY2("{\"type\":\"integer\",\"minimum\":0}", \
                        "{\"type\":\"number\",\"maximum\":0}"))
#define EXCL ROOT(ANY2("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", \
                       "{\"type\":\"integer\",\"exclusiveMinimum\":1}"))
#define LITNUM ROOT(ANY2("{\"enum\":[1,2]}", "{\"type\":\"integer\",\"minimum\":10}"))
/* nullable union, oneOf with overlapping alternatives */
#define NULLABLE ROOT("{\"anyOf\":[" CAT "," DOG "," NUL "]}")
/* oneOf: alternatives the first byte tells apart, or a tag (pydantic's discriminator) */
#define ONEOF ROOT(ONE2(CAT, "{\"type\":[\"string\",\"null\"],\"maxLength\":3}"))
#define TAGGED ROOT(ONE2(OBJ("\"tag\":{\"const\":\"cat\"},\"lives\":" RANGE("integer", 0, 9), \
                             "\"tag\",\"lives\""), \
                         OBJ("\"tag\":{\"enum\":[\"dog\",\"cow\"]},\"lives\":" STR, "\"tag\"")))
/* a tag value two alternatives share: the tag does not pick, both are followed */
#define TAG_T OBJ("\"tag\":{\"const\":\"t\"},\"a\":" INT, "\"tag\",\"a\"")
#define TAG_TU OBJ("\"tag\":{\"enum\":[\"t\",\"u\"]},\"b\":" STR, "\"tag\",\"b\"")
#define SHARED_TAG ROOT(ANY2(TAG_T, TAG_TU))
/* an array of unions */
#define PETS ROOT("{\"type\":\"array\",\"items\":" ANY2(CAT, DOG) ",\"maxItems\":3}")
/* a union in an alternative's property */
#define INNER ANY2(INT, "{\"type\":\"string\",\"enum\":[\"n\",\"nu\"]}")
#define NESTED ROOT(ANY2(OBJ("\"k\":" STR ",\"x\":" INNER, "\"k\",\"x\""), \
                         OBJ("\"k\":" STR ",\"x\":" NUL ",\"y\":" BOOL, "\"k\",\"x\"")))
/* unions in unions */
#define DEEPU ROOT(ANY2(ANY2(RANGE("integer", 1, 3), "{\"const\":\"q\"}"), \
                        ANY2(RANGE("integer", 30, 39), "{\"const\":\"qq\"}")))
/* a recursive tree with union leaves, through $defs */
#define TREE "{\"type\":\"object\",\"properties\":{\"t\":{\"$ref\":\"#/$defs/T\"}}," \
             "\"required\":[\"t\"],\"$defs\":{\"T\":{\"type\":\"object\",\"properties\":{" \
             "\"v\":" ANY2(INT, "{\"enum\":[\"x\",\"xy\"]}") ",\"kids\":{\"type\":\"array\"," \
             "\"items\":{\"$ref\":\"#/$defs/T\"}}},\"required\":[\"v\"]}}}"
/* a union of references to $defs, and recursion through the root */
#define REFS "{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[{\"$ref\":\"#/$defs/A\"}," \
             "{\"$ref\":\"#/$defs/B\"}]}},\"required\":[\"v\"],\"$defs\":{" \
             "\"A\":" OBJ("\"n\":" INT, "\"n\"") ",\"B\":" OBJ("\"n\":" STR, "\"n\"") "}}"
#define SELF "{\"type\":\"object\",\"properties\":{\"v\":" ANY2(INT, "{\"$ref\":\"#\"}") \
             "},\"required\":[\"v\"]}"
/* zod's recursive union (z.lazy): a $defs union whose objects hold it again, nullable, in a
 * property or in array items; and two unions holding each other through an object */
#define NODE_REF "{\"$ref\":\"#/$defs/Node\"}"
#define LEAF OBJ("\"leaf\":" INT, "\"leaf\"")
#define NULLABLE_NODE ANY2(NODE_REF, NUL)
#define ZOD_TREE "{\"type\":\"object\",\"properties\":{\"t\":" NODE_REF "},\"required\":[\"t\"]," \
                 "\"$defs\":{\"Node\":" ANY2(LEAF, OBJ("\"left\":" NULLABLE_NODE ",\"right\":" \
                                                  NULLABLE_NODE, "\"left\",\"right\"")) "}}"
#define ZOD_LIST "{\"type\":\"object\",\"properties\":{\"t\":" NODE_REF "},\"$defs\":{\"Node\":" \
                 ANY2(LEAF, OBJ("\"kids\":{\"type\":\"array\",\"items\":" NULLABLE_NODE "}", \
                                "\"kids\"")) "}}"
#define MUTUAL "{\"type\":\"object\",\"properties\":{\"t\":" NODE_REF "},\"$defs\":{\"Node\":" \
               ANY2(LEAF, OBJ("\"next\":{\"$ref\":\"#/$defs/U\"}", "\"next\"")) ",\"U\":" \
               ANY2(NODE_REF, INT) "}}"
#define NULLS ROOT(ANY2("{\"type\":[\"integer\",\"null\"],\"maximum\":5}", \
                        "{\"type\":[\"string\",\"null\"],\"pattern\":\"^z$\"}"))
#define ANYVAL ROOT(ANY2("{\"enum\":[\"a\"]}", "{}"))

static const hand hand_cases[] = {
    /* Union[Cat, Dog] */
    ACCEPTS(PET, "{\"v\":{\"name\":\"Tom\",\"meows\":true}}", true),
    ACCEPTS(PET, "{\"v\":{\"name\":\"Rex\",\"barks\":3}}", true),
    ACCEPTS(PET, "{\"v\":{\"name\":\"Rex\",\"ba", false),
    REFUSES(PET, "{\"v\":{\"name\":\"Rex\",\"barks\":-", "1}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Rex\",\"barks\":1", "0}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Tom\",\"meows\":", "1}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Tom\",\"", "purrs\":true}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Tom\"", "}}"),
    REFUSES(PET, "{\"v\":{", "}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Tom\",\"meows\":true", ",\"barks\":1}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Tom\",\"meows\":true}", ",}"),
    REFUSES(PET, "{\"v\":{\"", "barks\":1,\"name\":\"Rex\"}}"),
    /* one alternative's properties a prefix of the other's */
    ACCEPTS(PREFIX, "{\"v\":{\"a\":1}}", true),
    ACCEPTS(PREFIX, "{\"v\":{\"a\":1,\"b\":\"s\"}}", true),
    ACCEPTS(PREFIX, "{\"v\":{\"a\":12", false),
    REFUSES(PREFIX, "{\"v\":{\"a\":1,", "}}"),
    REFUSES(PREFIX, "{\"v\":{\"a\":1,\"b\":", "2}}"),
    REFUSES(PREFIX, "{\"v\":{\"a\":1,\"", "c\":2}}"),
    REFUSES(PREFIX, "{\"v\":{\"a\":1,\"b\":\"s\"", ",\"a\":1}}"),
    /* a listed object beside a free one: the free one takes what the listed one refuses */
    ACCEPTS(BESIDE, "{\"v\":{\"a\":\"text\"}}", true),
    ACCEPTS(BESIDE, "{\"v\":{\"b\":[1,{\"c\":null}],\"a\":1}}", true),
    ACCEPTS(BESIDE, "{\"v\":{}}", true),
    ACCEPTS(BESIDE, "{\"v\":{\"a\":1.5e300}}", true),
    REFUSES(BESIDE, "{\"v\":{\"a\":1", "]}}"),
    REFUSES(BESIDE, "{\"v\":", "[]}"),
    /* enum values sharing prefixes */
    ACCEPTS(ENUMS, "{\"v\":\"ab\"}", true),
    ACCEPTS(ENUMS, "{\"v\":\"abc\"}", true),
    ACCEPTS(ENUMS, "{\"v\":\"x\"}", true),
    REFUSES(ENUMS, "{\"v\":\"a", "\"}"),
    REFUSES(ENUMS, "{\"v\":\"ab", "d\"}"),
    REFUSES(ENUMS, "{\"v\":\"abc", "c\"}"),
    REFUSES(ENUMS, "{\"v\":\"", "\\u0061b\"}"),
    /* patterns: characters are code points, escapes decoded */
    ACCEPTS(PATTERNS, "{\"v\":\"aaa\"}", true),
    ACCEPTS(PATTERNS, "{\"v\":\"babba\"}", true),
    ACCEPTS(PATTERNS, "{\"v\":\"\\u0062\\u0061\"}", true),
    REFUSES(PATTERNS, "{\"v\":\"", "\"}"),
    REFUSES(PATTERNS, "{\"v\":\"aa", "b\"}"),
    REFUSES(PATTERNS, "{\"v\":\"\\u006", "3\"}"),
    REFUSES(PATTERNS, "{\"v\":\"\\u00", "7"),
    REFUSES(PATTERNS, "{\"v\":\"b\\", "n\"}"),
    ACCEPTS(LENGTHS, "{\"v\":\"xy\"}", true),
    ACCEPTS(LENGTHS, "{\"v\":\"xxxy\"}", true),
    ACCEPTS(LENGTHS, "{\"v\":\"\\uD83D\\uDE00\"}", true),
    REFUSES(LENGTHS, "{\"v\":\"xxxx", "\"}"),
    REFUSES(LENGTHS, "{\"v\":\"ab", "c\"}"),
    REFUSES(LENGTHS, "{\"v\":\"xy", "y\"}"),
    REFUSES(LENGTHS, "{\"v\":\"xx\\u", "D83D\"}"),
    /* overlapping bounds, integer beside number */
    ACCEPTS(OVERLAP, "{\"v\":7}", true),
    ACCEPTS(OVERLAP, "{\"v\":7.5}", true),
    ACCEPTS(OVERLAP, "{\"v\":-0}", true),
    ACCEPTS(OVERLAP, "{\"v\":20.000}", true),
    REFUSES(OVERLAP, "{\"v\":3", ".5}"),
    REFUSES(OVERLAP, "{\"v\":2", "1}"),
    REFUSES(OVERLAP, "{\"v\":20.00", "1}"),
    REFUSES(OVERLAP, "{\"v\":-", "1}"),
    REFUSES(OVERLAP, "{\"v\":1", "e1}"),
    /* disjoint bounds */
    ACCEPTS(DISJOINT, "{\"v\":150}", true),
    ACCEPTS(DISJOINT, "{\"v\":9}", true),
    REFUSES(DISJOINT, "{\"v\":5", "0}"),
    REFUSES(DISJOINT, "{\"v\":15", "}"),
    REFUSES(DISJOINT, "{\"v\":2", "0}"),
    REFUSES(SIGNS, "{\"v\":1", ".5}"),
    ACCEPTS(SIGNS, "{\"v\":-1.5}", true),
    ACCEPTS(SIGNS, "{\"v\":0.0}", true),
    REFUSES(SIGNS, "{\"v\":0.0", "1}"),
    REFUSES(SIGNS, "{\"v\":-1", "e2}"),
    ACCEPTS(EXCL, "{\"v\":0.999999999999999999}", true),
    ACCEPTS(EXCL, "{\"v\":2}", true),
    REFUSES(EXCL, "{\"v\":1", "}"),
    REFUSES(EXCL, "{\"v\":0", "}"),
    ACCEPTS(LITNUM, "{\"v\":12}", true),
    ACCEPTS(LITNUM, "{\"v\":1}", true),
    REFUSES(LITNUM, "{\"v\":3", "}"),
    REFUSES(LITNUM, "{\"v\":1", ".0}"),
    /* nullable union */
    ACCEPTS(NULLABLE, "{\"v\":null}", true),
    REFUSES(NULLABLE, "{\"v\":nul", "x}"),
    ACCEPTS(NULLABLE, "{\"v\":{\"name\":\"x\",\"barks\":0}}", true),
    /* oneOf whose alternatives the first byte or a tag tells apart */
    ACCEPTS(ONEOF, "{\"v\":null}", true),
    ACCEPTS(ONEOF, "{\"v\":\"abc\"}", true),
    ACCEPTS(ONEOF, "{\"v\":{\"name\":\"\",\"meows\":false}}", true),
    REFUSES(ONEOF, "{\"v\":\"abc", "d\"}"),
    ACCEPTS(TAGGED, "{\"v\":{\"tag\":\"cat\",\"lives\":3}}", true),
    ACCEPTS(TAGGED, "{\"v\":{\"tag\":\"cow\",\"lives\":\"x\"}}", true),
    ACCEPTS(TAGGED, "{\"v\":{\"tag\":\"dog\"}}", true),
    REFUSES(TAGGED, "{\"v\":{\"tag\":\"cat\"", "}}"),
    REFUSES(TAGGED, "{\"v\":{\"tag\":\"ca", "w\"}}"),
    REFUSES(TAGGED, "{\"v\":{\"tag\":\"cat\",\"lives\":", "\"x\"}}"),
    REFUSES(TAGGED, "{\"v\":{\"tag\":\"dog\",\"lives\":", "3}}"),
    ACCEPTS(SHARED_TAG, "{\"v\":{\"tag\":\"t\",\"a\":1}}", true),
    ACCEPTS(SHARED_TAG, "{\"v\":{\"tag\":\"t\",\"b\":\"x\"}}", true),
    REFUSES(SHARED_TAG, "{\"v\":{\"tag\":\"u\",\"", "a\":1}}"),
    REFUSES(SHARED_TAG, "{\"v\":{\"tag\":\"t\"", "}}"),
    /* an array of unions, the alternatives alternating */
    ACCEPTS(PETS, "{\"v\":[{\"name\":\"a\",\"meows\":false},{\"name\":\"b\",\"barks\":1},"
                  "{\"name\":\"c\",\"meows\":true}]}", true),
    REFUSES(PETS, "{\"v\":[{\"name\":\"a\",\"barks\":1},{\"name\":\"b\",\"meows\":", "1}]}"),
    REFUSES(PETS, "{\"v\":[{\"name\":\"a\",\"barks\":1},{\"name\":\"b\",\"meows\":true}",
            "}"),
    REFUSES(PETS, "{\"v\":[{\"name\":\"a\",\"barks\":1},{\"name\":\"b\",\"barks\":2},"
                  "{\"name\":\"c\",\"barks\":3}", ",{}]}"),
    /* a union inside an alternative's property */
    ACCEPTS(NESTED, "{\"v\":{\"k\":\"\",\"x\":\"nu\"}}", true),
    ACCEPTS(NESTED, "{\"v\":{\"k\":\"\",\"x\":null,\"y\":true}}", true),
    ACCEPTS(NESTED, "{\"v\":{\"k\":\"\",\"x\":-4}}", true),
    REFUSES(NESTED, "{\"v\":{\"k\":\"\",\"x\":\"nu\"", ",\"y\":true}}"),
    REFUSES(NESTED, "{\"v\":{\"k\":\"\",\"x\":nu", "\"}}"),
    REFUSES(NESTED, "{\"v\":{\"k\":\"\",\"x\":\"nu", "l\"}}"),
    /* unions in unions */
    ACCEPTS(DEEPU, "{\"v\":35}", true),
    ACCEPTS(DEEPU, "{\"v\":\"qq\"}", true),
    REFUSES(DEEPU, "{\"v\":", "4}"),
    REFUSES(DEEPU, "{\"v\":33", "3}"),
    REFUSES(DEEPU, "{\"v\":\"qq", "q\"}"),
    /* recursion */
    ACCEPTS(TREE, "{\"t\":{\"v\":1,\"kids\":[{\"v\":\"x\"},{\"v\":\"xy\",\"kids\":[]}]}}", true),
    REFUSES(TREE, "{\"t\":{\"v\":1,\"kids\":[{\"v\":\"xy", "z\"}]}}"),
    REFUSES(TREE, "{\"t\":{\"v\":1,\"kids\":[{", "}]}}"),
    ACCEPTS(REFS, "{\"v\":{\"n\":1}}", true),
    ACCEPTS(REFS, "{\"v\":{\"n\":\"1\"}}", true),
    REFUSES(REFS, "{\"v\":{\"n\":", "true}}"),
    ACCEPTS(SELF, "{\"v\":{\"v\":{\"v\":7}}}", true),
    ACCEPTS(ZOD_TREE, "{\"t\":{\"leaf\":1}}", true),
    ACCEPTS(ZOD_TREE, "{\"t\":{\"left\":{\"leaf\":1},\"right\":null}}", true),
    ACCEPTS(ZOD_TREE, "{\"t\":{\"left\":null,\"right\":{\"left\":null,\"right\":{\"leaf\":2}}}}",
            true),
    REFUSES(ZOD_TREE, "{\"t\":{\"left\":null,\"right\":{\"leaf\":", "\"x\"}}}"),
    REFUSES(ZOD_TREE, "{\"t\":{\"left\":null", "}}"),
    ACCEPTS(ZOD_LIST, "{\"t\":{\"kids\":[null,{\"leaf\":3},{\"kids\":[]}]}}", true),
    ACCEPTS(MUTUAL, "{\"t\":{\"next\":{\"next\":4}}}", true),
    REFUSES(MUTUAL, "{\"t\":{\"next\":{\"next\":", "null}}}"),
    REFUSES(SELF, "{\"v\":{\"v\":{", "}}}"),
    /* type lists beside each other */
    ACCEPTS(NULLS, "{\"v\":null}", true),
    ACCEPTS(NULLS, "{\"v\":\"z\"}", true),
    REFUSES(NULLS, "{\"v\":", "6}"),
    /* a free value beside an enum */
    ACCEPTS(ANYVAL, "{\"v\":[\"a\",{}]}", true),
    ACCEPTS(ANYVAL, "{\"v\":\"b\"}", true),
    /* whitespace the same in every alternative */
    ACCEPTS(PET, "{ \"v\" : { \"name\" : \"Rex\" , \"barks\" : 3 } }", true),
    ACCEPTS(PET, "{\n  \"v\":\r\n\t{\"name\":\"Tom\",\n\"meows\": false\n}\n}\n", true),
    REFUSES(PET, "{\"v\":{\"name\":\"Rex\" ", " ,\"barks\":3}}"),
    REFUSES(PET, "{\"v\":{\"name\":\"Rex\",\"barks\":3\r", " }}"),
    ACCEPTS(OVERLAP, "{\"v\":7.5 }", true),
    ACCEPTS(OVERLAP, "{\"v\":7.5}\r", false),
};

static void check_hand_case(const hand *h, size_t index)
{
    static schema s;
    read_schema(&s, h->schema);
    const uint8_t *t = (const uint8_t *)h->text;
    size_t n = strlen(h->text);
    run r = oracle_run(&s, t, n, STATE_LIMIT, NULL);
    bool accepted = h->refused == SIZE_MAX;
    char what[160];
    if (r.cut < n || r.refused != (accepted ? n : h->refused) ||
        (accepted && r.done_end != h->done)) {
        snprintf(what, sizeof what, "hand case %zu: the oracle refuses byte %zu (cut %zu, done "
                 "%d), the case says %zu (done %d)", index, r.refused, r.cut, r.done_end,
                 h->refused, h->done);
        report(what, h->schema, t, n);
        return;
    }
    graft__json_schema *compiled = compile(h->schema);
    if (compiled == NULL)
        return;
    compare(h->schema, compiled, &s, t, n, true, STATE_LIMIT);
    graft__json_schema_free(compiled);
}

static void test_hand_cases(void **state)
{
    (void)state;
    begin_test(2);
    for (size_t i = 0; i < COUNT(hand_cases); i++)
        check_hand_case(&hand_cases[i], i);
    if (verbose())
        print_message("%zu hand cases\n", COUNT(hand_cases));
    graft_test_tally_end(seed);
}

/* ---- test_whitespace ------------------------------------------------------------------------- */

/* Union values written with one form of whitespace before every token: the same in every
 * alternative; 33 spaces after a line break refused at the 33rd. */
static void test_whitespace(void **state)
{
    (void)state;
    begin_test(3);
    static const char *const schemas[] = {PET, PREFIX, BESIDE, ENUMS, OVERLAP, NESTED, DEEPU,
                                          TREE, PETS, NULLS, ANYVAL, LITNUM};
    static const char *const forms[] = {" ", "\t", "\n", "\r\n", "\n\t\t", "\r\n    ",
                                        "\n                                ",
                                        "\n                                 "};
    static schema s;
    bytes t = {0};
    for (size_t k = 0; k < COUNT(schemas); k++) {
        read_schema(&s, schemas[k]);
        graft__json_schema *compiled = compile(schemas[k]);
        if (compiled == NULL)
            continue;
        for (size_t f = 0; f < COUNT(forms); f++) {
            writer w = {.ws_rate = 1, .ws_form = forms[f]};
            for (int i = 0; i < 12; i++) {
                write_instance(&s, &w, &t);
                run r = oracle_run(&s, t.p, t.n, STATE_LIMIT, NULL);
                bool too_deep = strlen(forms[f]) > 1 + MAX_INDENT;
                if (r.refused != (too_deep ? 2 + MAX_INDENT : t.n) || r.cut < t.n)
                    report("oracle: whitespace", schemas[k], t.p, t.n);
                compare(schemas[k], compiled, &s, t.p, t.n, i == 0, STATE_LIMIT);
            }
        }
        graft__json_schema_free(compiled);
    }
    free(t.p);
    graft_test_tally_end(seed);
}

/* ---- test_deep ------------------------------------------------------------------------------- */

/* T: a union of two objects told apart by their key, each holding T again: a fork stays open
 * at every level. f: a listed object beside a free one. */
#define T_REF "{\"$ref\":\"#/$defs/T\"}"
#define DEEP_T "{\"type\":\"object\",\"properties\":{\"n\":" T_REF ",\"f\":" ANY2(SHORT, FREE_OBJ) \
               "},\"$defs\":{\"T\":" ANY2(OBJ("\"a\":" T_REF ",\"x\":" NUL, ""), \
                                          OBJ("\"b\":" T_REF ",\"y\":" INT, "")) "}}"

/* The nesting limits with a fork open at every level: under n, objects of T down to 32
 * levels in all (the last one "{}") and one more (refused at its bracket); under f, a free
 * value down to 64 levels and one more. Every prefix is compared and probed. */
static void test_deep(void **state)
{
    (void)state;
    begin_test(7);
    static schema s;
    read_schema(&s, DEEP_T);
    graft__json_schema *compiled = compile(DEEP_T);
    if (compiled == NULL) {
        graft_test_tally_end(seed);
        return;
    }
    bytes t = {0};
    for (int free_value = 0; free_value < 2; free_value++)
        for (int extra = 0; extra < 2; extra++) {
            /* below the root: 31 (+1) objects of T, the last one "{}", or 63 (+1) free
             * objects and arrays around a 1 */
            int levels = (free_value ? GRAFT__JSON_MAX_DEPTH : GRAFT__SCHEMA_MAX_DEPTH) - 1 + extra;
            int keyed = free_value ? levels : levels - 1;
            size_t bracket = 0; /* where the last level opens */
            t.n = 0;
            put(&t, free_value ? "{\"f\":" : "{\"n\":");
            for (int k = 0; k < keyed; k++) {
                bracket = t.n;
                if (free_value && k % 3 == 2)
                    put(&t, "[");
                else if (free_value)
                    put(&t, "{\"x\":");
                else
                    put(&t, k % 3 == 0 ? "{\"b\":" : "{\"a\":");
            }
            if (!free_value)
                bracket = t.n;
            put(&t, free_value ? "1" : "{}");
            for (int k = keyed - 1; k >= 0; k--)
                put(&t, free_value && k % 3 == 2 ? "]" : "}");
            put(&t, "}");
            run r = oracle_run(&s, t.p, t.n, STATE_LIMIT, NULL);
            if (r.refused != (extra ? bracket : t.n) || r.cut < t.n || r.done_end == extra)
                report("oracle: the nesting limits", DEEP_T, t.p, t.n);
            compare(DEEP_T, compiled, &s, t.p, t.n, true, STATE_LIMIT);
        }
    graft__json_schema_free(compiled);
    free(t.p);
    graft_test_tally_end(seed);
}

/* ---- test_random ----------------------------------------------------------------------------- */

static size_t scale(void)
{
    const char *env = getenv("GRAFT_TEST_SCALE");
    long v = env != NULL ? strtol(env, NULL, 10) : 16;
    return v > 0 ? (size_t)v : 1;
}

static void test_random(void **state)
{
    (void)state;
    begin_test(4);
    static schema s;
    bytes t = {0};
    memset(&counts, 0, sizeof counts);
    size_t schemas = 120 * scale(), skipped = 0;
    for (size_t k = 0; k < schemas; k++) {
        random_schema(&s);
        char *text = print_schema(&s);
        graft__json_schema *compiled = compile(text);
        if (compiled == NULL) { /* reported */
            free(text);
            continue;
        }
        writer w = {.ws_rate = graft_test_one_in(3) ? 0 : 2 + (size_t)below(10)};
        /* kinds of text: 0, an instance; 1 and 2, one mutated; 3, one with a value spliced
         * in; 4, both; 5, random tokens */
        for (int i = 0; i < 24; i++) {
            int kind = i % 6;
            if (kind == 5) {
                random_tokens(&s, &t);
            } else {
                write_instance(&s, &w, &t);
                if (kind == 3 || kind == 4)
                    splice(&s, &w, &t);
                if (kind == 1 || kind == 2 || kind == 4)
                    mutate(&t);
            }
            if (openings(t.p, t.n) > MAX_OPENINGS) {
                skipped++;
                continue;
            }
            if (kind == 0) {
                run r = oracle_run(&s, t.p, t.n, STATE_LIMIT, NULL);
                if (r.cut == t.n && (r.refused < t.n || !r.done_end))
                    report("oracle: an instance is not accepted and done", text, t.p, t.n);
            }
            compare(text, compiled, &s, t.p, t.n, graft_test_one_in(4), STATE_LIMIT);
        }
        graft__json_schema_free(compiled);
        free(text);
    }
    if (verbose())
        print_message("%zu schemas; %zu texts (%zu skipped as deep), %zu bytes (%zu read with "
                      "configurations forked, at most %zu), %zu refused, %zu done at the end, "
                      "%zu cut at the state limit; %zu probes\n",
                      schemas, counts.texts, skipped, counts.bytes, counts.forked, counts.widest,
                      counts.refused, counts.done, counts.cut, counts.probes);
    free(t.p);
    graft_test_tally_end(seed);
}

/* ---- test_state_limit ------------------------------------------------------------------------ */

/* A union of `count` alternatives as the root's property v: integer ranges [10a + 10,
 * 10a + 14], or string enums "a", "aa", ... (a C string to free). */
static char *limit_schema(int count, bool strings)
{
    bytes b = {0};
    put(&b, "{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[");
    for (int a = 0; a < count; a++) {
        put(&b, a > 0 ? "," : "");
        if (strings)
            putf(&b, "{\"enum\":[\"%.*s\"]}", a + 1, "aaaaaaaaaaaaaaaaaaaaaaaa");
        else
            putf(&b, "{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", 10 * a + 10,
                 10 * a + 14);
    }
    put(&b, "]}},\"required\":[\"v\"]}");
    graft_test_put_byte(&b, '\0');
    return (char *)b.p;
}

/* {"v":V} for V the integers 0 to 259 or "", "a", "aa", ... (22 a's), "ab", "aab". */
static void limit_text(bytes *t, int k, bool strings)
{
    t->n = 0;
    if (!strings)
        putf(t, "{\"v\":%d}", k);
    else
        putf(t, "{\"v\":\"%.*s%s\"}", k % 23, "aaaaaaaaaaaaaaaaaaaaaaaa", k >= 23 ? "b" : "");
}

/* GRAFT__JSON_MAX_STATES alternatives of one class: all followed, exactly (every prefix
 * compared and probed). 20: past the limit the later ones may be dropped, but what is
 * accepted and done is an instance, and the values of the first 16 are accepted. */
static void test_state_limit(void **state)
{
    (void)state;
    begin_test(5);
    static schema s;
    bytes t = {0};
    for (int k = 0; k < 4; k++) {
        bool strings = k % 2 != 0;
        int count = k < 2 ? GRAFT__JSON_MAX_STATES : 20;
        char *text = limit_schema(count, strings);
        read_schema(&s, text);
        graft__json_schema *compiled = compile(text);
        for (int v = 0; compiled != NULL && v < (strings ? 46 : 260); v++) {
            limit_text(&t, v, strings);
            if (count == GRAFT__JSON_MAX_STATES) {
                compare(text, compiled, &s, t.p, t.n, true, GRAFT__JSON_MAX_STATES);
                continue;
            }
            graft__json_recognizer r;
            graft__json_recognizer_init(&r, compiled);
            size_t i = 0;
            while (i < t.n && graft__json_recognizer_feed(&r, t.p[i]))
                i++;
            bool done = i == t.n && graft__json_recognizer_done(&r);
            run o = oracle_run(&s, t.p, t.n, SIZE_MAX, NULL);
            bool instance = o.refused == t.n && o.done_end;
            bool early = strings ? v >= 1 && v <= GRAFT__JSON_MAX_STATES
                                 : v >= 10 && v < 10 * (GRAFT__JSON_MAX_STATES + 1) && v % 10 <= 4;
            if ((done && !instance) || (early && !done))
                report(done ? "past the state limit: a text accepted and done is no instance"
                            : "past the state limit: a value of one of the first 16 refused",
                       text, t.p, t.n);
        }
        if (compiled != NULL)
            graft__json_schema_free(compiled);
        free(text);
    }
    free(t.p);
    graft_test_tally_end(seed);
}

/* ---- test_compile ---------------------------------------------------------------------------- */

/* A union of integer ranges as the root's property (a C string to free): `first`
 * alternatives, or with `second` > 0 an anyOf of two anyOfs of first and second. */
static char *union_text(int first, int second)
{
    bytes b = {0};
    put(&b, "{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[");
    for (int part = 0, k = 0; part < (second > 0 ? 2 : 1); part++) {
        int count = part == 0 ? first : second;
        put(&b, part > 0 ? "]},{\"anyOf\":[" : second > 0 ? "{\"anyOf\":[" : "");
        for (int a = 0; a < count; a++, k++)
            putf(&b, "%s{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", a > 0 ? "," : "",
                 k, k + 100);
    }
    put(&b, second > 0 ? "]}]}}}" : "]}}}");
    graft_test_put_byte(&b, '\0');
    return (char *)b.p;
}

/* Whether message names one of the words in names ("a|b|c"). */
static bool mentions(const char *message, const char *names)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", names);
    for (char *word = strtok(buf, "|"); message != NULL && word != NULL; word = strtok(NULL, "|"))
        if (strstr(message, word) != NULL)
            return true;
    return false;
}

static void expect_refused(const char *text, const char *names)
{
    graft__json_schema *out = NULL;
    char *errmsg = NULL;
    int rc = graft__json_schema_compile(text, strlen(text), &out, &errmsg);
    if (rc != GRAFT_EINVAL || !mentions(errmsg, names)) {
        char what[320];
        snprintf(what, sizeof what, "compile: %d (expected %d), message %s (expected to name %s)",
                 rc, GRAFT_EINVAL, errmsg != NULL ? errmsg : "(none)", names);
        report(what, text, (const uint8_t *)"", 0);
    }
    if (rc == GRAFT_OK)
        graft__json_schema_free(out);
    if (verbose())
        print_message("refused: %s\n", errmsg != NULL ? errmsg : "(none)");
    free(errmsg);
}

static void expect_compiled(const char *text)
{
    graft__json_schema *out = compile(text);
    if (out != NULL)
        graft__json_schema_free(out);
}

/* What the header says compiling refuses, in and around unions, and what it takes. */
static void test_compile(void **state)
{
    (void)state;
    begin_test(6);
    static const struct {
        const char *schema, *names;
    } refused[] = {
        /* oneOf whose alternatives neither the first byte nor a tag tells apart */
        {ROOT(ONE2(STR, "{\"enum\":[\"a\"]}")), "oneOf"},
        {ROOT(ONE2(SHORT, FREE_OBJ)), "oneOf"},
        {ROOT(ONE2(RANGE("integer", 0, 9), RANGE("integer", 10, 19))), "oneOf"},
        {ROOT(ONE2(CAT, DOG)), "oneOf"},
        {ROOT(ONE2(TAG_T, TAG_TU)), "oneOf"},
        /* keywords outside the subset, inside alternatives */
        {ROOT(ANY2(STR, "{\"not\":{\"type\":\"string\"}}")), "not"},
        {ROOT(ANY2(SHORT, "{\"allOf\":[" SHORT "," LONG "]}")), "allOf"},
        {ROOT(ANY2(SHORT, "{\"type\":\"object\",\"properties\":{\"a\":" INT "},"
                          "\"minProperties\":1}")), "minProperties"},
        {ROOT(ANY2("{\"type\":\"array\",\"uniqueItems\":true}", "{\"type\":\"array\"}")),
         "uniqueItems"},
        {ROOT(ANY2(STR, "{\"if\":" STR ",\"then\":" STR "}")), "if"},
        {ROOT(ANY2(OBJ("\"a\":" INT, "\"a\""), "{\"type\":\"object\",\"patternProperties\":"
                                               "{\"^a\":" INT "}}")), "patternProperties"},
        /* references to nothing, a union that holds itself before any value begins */
        {ROOT(ANY2(STR, "{\"$ref\":\"#/$defs/missing\"}")), "$ref"},
        {"{\"type\":\"object\",\"properties\":{\"v\":{\"$ref\":\"#/$defs/U\"}},\"$defs\":{\"U\":"
         ANY2("{\"$ref\":\"#/$defs/U\"}", STR) "}}", "anyOf|$ref"},
        /* not a union; a root that is not an object */
        {ROOT("{\"anyOf\":" STR "}"), "anyOf"},
        {"{\"type\":\"array\",\"items\":" ANY2(SHORT, LONG) "}", "object"},
    };
    for (size_t k = 0; k < COUNT(refused); k++)
        expect_refused(refused[k].schema, refused[k].names);
    /* at most 64 alternatives, nested unions flattened into their union */
    char *texts[4] = {union_text(65, 0), union_text(33, 32), union_text(64, 0),
                      union_text(32, 32)};
    expect_refused(texts[0], "anyOf");
    expect_refused(texts[1], "anyOf");
    expect_compiled(texts[2]);
    expect_compiled(texts[3]);
    for (size_t k = 0; k < COUNT(texts); k++)
        free(texts[k]);
    const char *const accepted[] = {PET, PREFIX, BESIDE, ENUMS, PATTERNS, LENGTHS, OVERLAP,
                                    DISJOINT, SIGNS, EXCL, LITNUM, NULLABLE, ONEOF, TAGGED,
                                    SHARED_TAG,
                                    PETS, NESTED, DEEPU, TREE, REFS, SELF, ZOD_TREE, ZOD_LIST,
                                    MUTUAL, NULLS, ANYVAL, DEEP_T};
    for (size_t k = 0; k < COUNT(accepted); k++)
        expect_compiled(accepted[k]);
    graft_test_tally_end(seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_deep),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_state_limit),
        cmocka_unit_test(test_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
