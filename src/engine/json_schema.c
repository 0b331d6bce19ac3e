/*
 * json_schema.c: compiling a JSON schema (the subset json_output.h lists) into the nodes the
 * recognizer follows (json_syntax.c).
 *
 * Each schema object becomes one node, found again by its address when a $ref leads back to
 * it, so recursive schemas compile to cyclic nodes. A keyword outside the subset is refused
 * rather than ignored: a schema the output would not be held to is worse than a clear
 * error. Property names and enum values become texts, the bytes the recognizer matches: a
 * name as JSON writes it (its closing quote included, its opening one not), a value as its
 * compact JSON. A union is flat (a nested one's alternatives are its own); the recognizer
 * follows every alternative the bytes so far allow, but object alternatives that share a tag,
 * a first property whose literal value picks one, become one GRAFT__SCHEMA_TAGGED
 * alternative, followed as one state.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* The classes of first bytes of values. */
enum { C_OBJECT = 1, C_ARRAY = 2, C_STRING = 4, C_NUMBER = 8, C_BOOLEAN = 16, C_NULL = 32,
       C_ALL = 63 };

typedef struct compiler {
    graft__json_schema *out;
    json_t *root;
    const json_t **seen; /* (n_nodes) the schema object each node came from */
    size_t cap_nodes, cap_seen, cap_text_at, cap_value_of, cap_alts, cap_regexes, cap_bounds;
    size_t arena_len, arena_cap;
    char **errmsg;
    int status;
    int depth; /* compile calls under way: nesting, and $refs followed */
} compiler;

enum {
    MAX_NESTING = 64,
    MAX_ITEMS_BOUND = 65534, /* item counts saturate at 65535 (json_syntax.c) */
    MAX_LENGTH_BOUND = 10000 /* minLength, maxLength (the message says it) */
};

static const char *const annotations[] = {"title", "description", "default", "examples",
                                          "$schema", "$id", "$comment", "deprecated",
                                          "readOnly", "writeOnly", "$defs", "definitions",
                                          "discriminator"};
static const char *const keywords[] = {"type", "properties", "required",
                                       "additionalProperties", "items", "minItems",
                                       "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
                                       "$ref", "pattern", "format", "minLength", "maxLength",
                                       "minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum", "multipleOf"};
static const char *const string_keywords[] = {"pattern", "format", "minLength", "maxLength"};
/* Bounds first (lower, upper, exclusive lower, exclusive upper), then multipleOf. */
static const char *const number_keywords[] = {"minimum", "maximum", "exclusiveMinimum",
                                              "exclusiveMaximum", "multipleOf"};
enum { N_BOUND_KEYWORDS = 4 };

/* The string formats held to, as patterns (json_regex.c): RFC 3339's full-date (real
 * calendar days: February 29 in leap years only), full-time (an offset or Z required) and
 * date-time, RFC 4122's UUID, RFC 791's dotted quad, RFC 1123 host names (labels of 1 to 63
 * characters; the total length is not bounded), e-mail addresses as HTML's input element
 * takes them, and URIs as a scheme, ':' and RFC 3986's characters with whole percent
 * escapes. */
#define DATE                                                                                  \
    "(\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"          \
    "02-(0[1-9]|1\\d|2[0-8]))|"                                                                \
    "(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
#define TIME                                                                                  \
    "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d{1,9})?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
static const struct {
    const char *name, *pattern;
} formats[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "[Tt]" TIME "$"},
    {"uuid", "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"},
    {"ipv4", "^" OCTET "(\\." OCTET "){3}$"},
    {"hostname", "^" LABEL "(\\." LABEL ")*$"},
    {"email", "^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@" LABEL "(\\." LABEL ")*$"},
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*$"},
};

static bool listed(const char *key, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, names[i]) == 0)
            return true;
    return false;
}

#define LISTED(key, names) listed(key, names, sizeof names / sizeof names[0])

static int fail(compiler *c, const char *path, const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    c->status = graft__errmsg(c->errmsg, GRAFT_EINVAL, "json_schema%s: %s", path, msg);
    return -1;
}

static int out_of_memory(compiler *c)
{
    c->status = graft__errmsg(c->errmsg, GRAFT_ENOMEM, "json_schema: out of memory");
    return -1;
}

/* The classes of first bytes a node of `kind` takes (literals and unions: none until their
 * texts or alternatives are in). */
static uint8_t classes_of_kind(graft__schema_kind kind)
{
    switch (kind) {
    case GRAFT__SCHEMA_ANY:
        return C_ALL;
    case GRAFT__SCHEMA_ANY_OBJECT:
    case GRAFT__SCHEMA_OBJECT:
        return C_OBJECT;
    case GRAFT__SCHEMA_ARRAY:
        return C_ARRAY;
    case GRAFT__SCHEMA_STRING:
        return C_STRING;
    case GRAFT__SCHEMA_NUMBER:
    case GRAFT__SCHEMA_INTEGER:
        return C_NUMBER;
    case GRAFT__SCHEMA_BOOLEAN:
        return C_BOOLEAN;
    case GRAFT__SCHEMA_NULL:
        return C_NULL;
    default:
        return 0;
    }
}

int graft__json_first_class(uint8_t c)
{
    switch (c) {
    case '{':
        return C_OBJECT;
    case '[':
        return C_ARRAY;
    case '"':
        return C_STRING;
    case 't':
    case 'f':
        return C_BOOLEAN;
    case 'n':
        return C_NULL;
    default:
        return c == '-' || (c >= '0' && c <= '9') ? C_NUMBER : 0;
    }
}

/* A new node of `kind` for schema object `from` (NULL: not reachable by a $ref); its index,
 * or -1. */
static int new_node(compiler *c, const json_t *from, graft__schema_kind kind)
{
    graft__json_schema *s = c->out;
    if (s->n_nodes == GRAFT__SCHEMA_MAX_NODES)
        return fail(c, "", "more than %s nodes", "4096");
    graft__schema_node *nodes =
        graft__grow_array(s->nodes, s->n_nodes, &c->cap_nodes, sizeof *nodes, 16);
    if (nodes == NULL)
        return out_of_memory(c);
    s->nodes = nodes;
    const json_t **seen = graft__grow_array(c->seen, s->n_nodes, &c->cap_seen, sizeof *seen, 16);
    if (seen == NULL)
        return out_of_memory(c);
    c->seen = seen;
    s->nodes[s->n_nodes] = (graft__schema_node){.kind = kind, .classes = classes_of_kind(kind),
                                                .max_items = UINT32_MAX};
    c->seen[s->n_nodes] = from;
    return (int)s->n_nodes++;
}

/* Appends a text (and, for a property, its value's node); its index, or -1. */
static int add_text(compiler *c, const char *bytes, size_t len, uint16_t value)
{
    graft__json_schema *s = c->out;
    uint32_t *at = graft__grow_array(s->text_at, s->n_texts + 1, &c->cap_text_at, sizeof *at, 32);
    if (at == NULL)
        return out_of_memory(c);
    s->text_at = at;
    uint16_t *values =
        graft__grow_array(s->value_of, s->n_texts, &c->cap_value_of, sizeof *values, 32);
    if (values == NULL)
        return out_of_memory(c);
    s->value_of = values;
    if (c->arena_len + len > c->arena_cap) {
        size_t cap = 2 * (c->arena_len + len) + 64;
        char *arena = graft__realloc(s->arena, cap);
        if (arena == NULL)
            return out_of_memory(c);
        s->arena = arena;
        c->arena_cap = cap;
    }
    memcpy(s->arena + c->arena_len, bytes, len);
    s->text_at[s->n_texts] = (uint32_t)c->arena_len;
    c->arena_len += len;
    s->text_at[s->n_texts + 1] = (uint32_t)c->arena_len;
    s->value_of[s->n_texts] = value;
    return (int)s->n_texts++;
}

static int add_alt(compiler *c, uint16_t node)
{
    graft__json_schema *s = c->out;
    uint16_t *alts = graft__grow_array(s->alts, s->n_alts, &c->cap_alts, sizeof *alts, 8);
    if (alts == NULL)
        return out_of_memory(c);
    s->alts = alts;
    s->alts[s->n_alts++] = node;
    return 0;
}

static int compile(compiler *c, const json_t *schema, const char *path);
static int compile_schema(compiler *c, const json_t *schema, const char *path);

/* path + suffix, for messages (cut to fit). */
static void join(char *buf, size_t cap, const char *path, const char *fmt, const char *key)
{
    int n = snprintf(buf, cap, "%s", path);
    snprintf(buf + n, cap - (size_t)n, fmt, key);
}

/* The schema a "$ref" names: "#" (the root), or "#/$defs/Name" or "#/definitions/Name" (a
 * name with "~1" for '/' and "~0" for '~', as JSON pointers write them). */
static const json_t *resolve(compiler *c, const char *ref)
{
    if (strcmp(ref, "#") == 0)
        return c->root;
    static const char *const pointers[] = {"#/$defs/", "#/definitions/"};
    static const char *const folders[] = {"$defs", "definitions"};
    for (size_t f = 0; f < 2; f++) {
        size_t prefix = strlen(pointers[f]);
        if (strncmp(ref, pointers[f], prefix) != 0 || strchr(ref + prefix, '/') != NULL)
            continue;
        char name[256];
        size_t n = 0;
        for (const char *q = ref + prefix; *q != '\0' && n + 1 < sizeof name; q++) {
            bool escape = q[0] == '~' && (q[1] == '0' || q[1] == '1');
            name[n++] = escape ? (q[1] == '0' ? '~' : '/') : *q;
            q += escape;
        }
        name[n] = '\0';
        return json_object_get(json_object_get(c->root, folders[f]), name);
    }
    return NULL;
}

/* A count keyword's value: an integer, or a real with no fraction (JSON Schema reads 3.0 as
 * the integer 3); negative when it is neither. */
static json_int_t count_of(const json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v);
    double x = json_real_value(v);
    return json_is_real(v) && x >= 0 && x < 1e15 && x == (double)(json_int_t)x ? (json_int_t)x
                                                                                : -1;
}

static bool count_in(const json_t *v, json_int_t most)
{
    json_int_t n = count_of(v);
    return n >= 0 && n <= most;
}

static int compile_object(compiler *c, const json_t *schema, int node, const char *path)
{
    const json_t *props = json_object_get(schema, "properties");
    const json_t *required = json_object_get(schema, "required");
    const json_t *extra = json_object_get(schema, "additionalProperties");
    char sub[512];
    if (props == NULL) {
        if (required != NULL && json_array_size(required) > 0)
            return fail(c, path, "'%s' names properties the schema does not list", "required");
        c->out->nodes[node].kind =
            json_is_false(extra) ? GRAFT__SCHEMA_OBJECT : GRAFT__SCHEMA_ANY_OBJECT;
        return node;
    }
    if (!json_is_object(props))
        return fail(c, path, "'%s' must be an object", "properties");
    if (json_object_size(props) > GRAFT__SCHEMA_MAX_TEXTS)
        return fail(c, path, "more than %s properties", "64");
    if (required != NULL && !json_is_array(required))
        return fail(c, path, "'%s' must be an array of names", "required");
    /* The names first, as consecutive texts; then the values' nodes. */
    uint32_t first = c->out->n_texts;
    const char *name;
    const json_t *value;
    json_object_foreach ((json_t *)props, name, value) {
        json_t *s = json_string(name);
        char *text = s ? json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(s);
        if (text == NULL)
            return out_of_memory(c);
        int rc = add_text(c, text + 1, strlen(text) - 1, 0);
        free(text);
        if (rc < 0)
            return -1;
    }
    c->out->nodes[node].first = first;
    c->out->nodes[node].count = (uint32_t)json_object_size(props);
    uint32_t i = 0;
    json_object_foreach ((json_t *)props, name, value) {
        join(sub, sizeof sub, path, ".properties.%.200s", name);
        int v = compile(c, value, sub);
        if (v < 0)
            return -1;
        c->out->value_of[first + i++] = (uint16_t)v;
    }
    for (size_t r = 0; r < json_array_size(required); r++) {
        const char *want = json_string_value(json_array_get(required, r));
        if (want == NULL)
            return fail(c, path, "'%s' must be an array of names", "required");
        const json_t *k;
        size_t at = 0;
        bool found = false;
        json_object_foreach ((json_t *)props, name, k) {
            if (strcmp(name, want) == 0) {
                c->out->nodes[node].required |= UINT64_C(1) << at;
                found = true;
            }
            at++;
        }
        if (!found)
            return fail(c, path, "required '%.200s' is not among the properties", want);
    }
    return node;
}

static int compile_array(compiler *c, const json_t *schema, int node, const char *path)
{
    const json_t *items = json_object_get(schema, "items");
    const json_t *lo = json_object_get(schema, "minItems"),
                 *hi = json_object_get(schema, "maxItems");
    if ((lo != NULL && !count_in(lo, MAX_ITEMS_BOUND)) ||
        (hi != NULL && !count_in(hi, MAX_ITEMS_BOUND)))
        return fail(c, path, "'%s' must be a count up to 65534",
                    lo && !count_in(lo, MAX_ITEMS_BOUND) ? "minItems" : "maxItems");
    uint32_t min = lo ? (uint32_t)count_of(lo) : 0;
    uint32_t max = hi ? (uint32_t)count_of(hi) : UINT32_MAX;
    if (min > max)
        return fail(c, path, "'%s' is above maxItems", "minItems");
    char sub[512];
    join(sub, sizeof sub, path, "%s", ".items");
    int item = items == NULL ? new_node(c, NULL, GRAFT__SCHEMA_ANY) : compile(c, items, sub);
    if (item < 0)
        return -1;
    graft__schema_node *n = &c->out->nodes[node];
    n->items = (uint16_t)item;
    n->min_items = min;
    n->max_items = max;
    return node;
}

static int add_regex(compiler *c, graft__json_regex *re)
{
    graft__json_schema *s = c->out;
    graft__json_regex **grown =
        graft__grow_array(s->regexes, s->n_regexes, &c->cap_regexes, sizeof *grown, 4);
    if (grown == NULL) {
        graft__json_regex_free(re);
        return out_of_memory(c);
    }
    s->regexes = grown;
    s->regexes[s->n_regexes++] = re;
    return (int)s->n_regexes;
}

/* A string length keyword's value (absent: keep *out). */
static int length_bound(compiler *c, const json_t *schema, const char *key, uint32_t *out,
                        const char *path)
{
    const json_t *v = json_object_get(schema, key);
    if (v == NULL)
        return 0;
    if (!count_in(v, MAX_LENGTH_BOUND))
        return fail(c, path, "'%s' must be an integer from 0 to 10000", key);
    *out = (uint32_t)count_of(v);
    return 0;
}

/* A string node's pattern, format and lengths, compiled into one automaton. */
static int compile_string(compiler *c, const json_t *schema, int node, const char *path)
{
    const json_t *pattern = json_object_get(schema, "pattern");
    const json_t *format = json_object_get(schema, "format");
    uint32_t min = 0, max = UINT32_MAX;
    if (length_bound(c, schema, "minLength", &min, path) < 0 ||
        length_bound(c, schema, "maxLength", &max, path) < 0)
        return -1;
    if (pattern == NULL && format == NULL && min == 0 && max == UINT32_MAX)
        return node;
    if (min > max)
        return fail(c, path, "'%s' is above 'maxLength'", "minLength");
    if (pattern != NULL && format != NULL)
        return fail(c, path, "'%s' and 'format' together are not supported", "pattern");
    if (pattern != NULL && !json_is_string(pattern))
        return fail(c, path, "'%s' must be a string", "pattern");
    const char *text = pattern != NULL ? json_string_value(pattern) : "";
    size_t len = pattern != NULL ? json_string_length(pattern) : 0;
    if (format != NULL) {
        size_t i = 0;
        while (i < sizeof formats / sizeof formats[0] &&
               !(json_is_string(format) && strcmp(json_string_value(format), formats[i].name) == 0))
            i++;
        if (i == sizeof formats / sizeof formats[0])
            return fail(c, path, "'format' %.60s is not supported (date, time, date-time, uuid, "
                                 "ipv4, hostname, email and uri are)",
                        json_is_string(format) ? json_string_value(format) : "(not a string)");
        text = formats[i].pattern;
        len = strlen(text);
    }
    graft__json_regex *re = NULL, *bounded = NULL;
    char *why = NULL;
    int rc = graft__json_regex_compile(text, len, &re, &why);
    if (rc == GRAFT_OK && (min > 0 || max != UINT32_MAX)) {
        rc = graft__json_regex_bound_length(re, min, max, &bounded, &why);
        graft__json_regex_free(re);
        re = bounded;
    }
    if (rc == GRAFT_OK && graft__json_regex_start(re) == GRAFT__REGEX_DEAD) {
        graft__json_regex_free(re);
        return fail(c, path, "%s", "no string is an instance (its pattern, format and lengths "
                                   "rule out every one)");
    }
    if (rc != GRAFT_OK) {
        fail(c, path, "%.200s", why ? why : "out of memory");
        c->status = rc;
        graft__free(why);
        return -1;
    }
    int index = add_regex(c, re);
    if (index < 0)
        return -1;
    c->out->nodes[node].regex = (uint16_t)index;
    return node;
}

/* Where a bound lies beside the numbers a text can write (magnitudes below 10^18). */
typedef enum bound_place { BOUND_WITHIN, BOUND_BELOW_ALL, BOUND_ABOVE_ALL } bound_place;

/* JSON number v in units of GRAFT__JSON_SCALE, rounded up or down to a unit (*exact: no
 * rounding was needed). A real is read as the shortest decimal that gives its double
 * back, the number its schema's author wrote. */
static bound_place scaled_bound(const json_t *v, bool up, __int128 *out, bool *exact)
{
    const __int128 limit = GRAFT__JSON_SCALE; /* magnitudes below 10^18 */
    *exact = true;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i <= -(json_int_t)limit || i >= (json_int_t)limit)
            return i < 0 ? BOUND_BELOW_ALL : BOUND_ABOVE_ALL;
        *out = (__int128)i * GRAFT__JSON_SCALE;
        return BOUND_WITHIN;
    }
    double d = json_real_value(v);
    if (!(d > -1e18 && d < 1e18))
        return d < 0 ? BOUND_BELOW_ALL : BOUND_ABOVE_ALL;
    char text[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*e", digits - 1, d);
        if (strtod(text, NULL) == d)
            break;
    }
    /* text: [-]D[.DDD]e[+-]X: the mantissa's digits and the power of ten of the last */
    bool negative = text[0] == '-';
    __int128 mantissa = 0;
    int n_digits = 0;
    const char *p = text + negative;
    for (; *p != 'e'; p++)
        if (*p != '.')
            mantissa = mantissa * 10 + (*p - '0'), n_digits++;
    int power = atoi(p + 1) - (n_digits - 1) + 18; /* value = mantissa 10^power units */
    __int128 magnitude = mantissa;
    bool remainder = false;
    for (; power > 0; power--)
        magnitude *= 10;
    for (; power < 0; power++) {
        remainder = remainder || magnitude % 10 != 0;
        magnitude /= 10;
    }
    *exact = !remainder;
    if (remainder && up != negative) /* away from zero is up for a positive value */
        magnitude += 1;
    *out = negative ? -magnitude : magnitude;
    return BOUND_WITHIN;
}

/* One bound keyword into *bound (kept when absent, or when it is less strict), a multiple
 * of unit. */
static int bound_keyword(compiler *c, const json_t *schema, const char *key, bool lower,
                         bool exclusive, __int128 unit, __int128 *bound, const char *path)
{
    const json_t *v = json_object_get(schema, key);
    if (v == NULL)
        return 0;
    if (!json_is_number(v))
        return fail(c, path, "'%s' must be a number", key);
    __int128 x;
    bool exact;
    bound_place place = scaled_bound(v, lower, &x, &exact);
    if (place == (lower ? BOUND_BELOW_ALL : BOUND_ABOVE_ALL))
        return 0; /* beyond every number a text can write: no bound */
    if (place != BOUND_WITHIN)
        return fail(c, path, "no number is an instance ('%s' is beyond 18 digits)", key);
    if (exclusive && exact)
        x += lower ? 1 : -1;
    /* to a multiple of the unit, inwards */
    x = lower ? -graft__json_floor_multiple(-x, unit) : graft__json_floor_multiple(x, unit);
    if (lower ? x > *bound : x < *bound)
        *bound = x;
    return 0;
}

static __int128 gcd(__int128 a, __int128 b)
{
    while (b != 0) {
        __int128 t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* multipleOf into *step (the unit of the node's numbers): the least multiple of both. */
static int multiple_keyword(compiler *c, const json_t *schema, __int128 *step, const char *path)
{
    const json_t *v = json_object_get(schema, "multipleOf");
    if (v == NULL)
        return 0;
    __int128 m;
    bool exact;
    if (!json_is_number(v) || json_number_value(v) <= 0 ||
        scaled_bound(v, true, &m, &exact) != BOUND_WITHIN || !exact || m == 0)
        return fail(c, path, "'%s' must be a number above 0, below 10^18, with at most 18 "
                    "digits after its point", "multipleOf");
    __int128 times = m / gcd(m, *step), most = GRAFT__JSON_SCALE * GRAFT__JSON_SCALE;
    *step = times > most / *step ? most : times * *step; /* most: only 0 is a multiple */
    return 0;
}

static int add_bounds(compiler *c, graft__json_bounds b)
{
    graft__json_schema *s = c->out;
    graft__json_bounds *grown =
        graft__grow_array(s->bounds, s->n_bounds, &c->cap_bounds, sizeof *grown, 4);
    if (grown == NULL)
        return out_of_memory(c);
    s->bounds = grown;
    s->bounds[s->n_bounds++] = b;
    return (int)s->n_bounds;
}

/* A number or integer node's bounds. */
static int compile_bounds(compiler *c, const json_t *schema, int node, bool integer,
                          const char *path)
{
    const __int128 most = GRAFT__JSON_SCALE * GRAFT__JSON_SCALE - 1; /* 18 and 18 digits */
    graft__json_bounds b = {0, 0, integer ? GRAFT__JSON_SCALE : 1};
    if (multiple_keyword(c, schema, &b.step, path) < 0)
        return -1;
    b.hi = graft__json_floor_multiple(most, b.step);
    b.lo = -b.hi;
    bool any = json_object_get(schema, "multipleOf") != NULL;
    for (size_t i = 0; i < N_BOUND_KEYWORDS; i++) {
        bool lower = i % 2 == 0, exclusive = i >= 2;
        any = any || json_object_get(schema, number_keywords[i]) != NULL;
        if (bound_keyword(c, schema, number_keywords[i], lower, exclusive, b.step,
                          lower ? &b.lo : &b.hi, path) < 0)
            return -1;
    }
    if (!any)
        return node;
    if (b.lo > b.hi)
        return fail(c, path, "%s", "no number is an instance (its bounds leave none)");
    int index = add_bounds(c, b);
    if (index < 0)
        return -1;
    c->out->nodes[node].bounds = (uint16_t)index;
    return node;
}

static bool type_named(const char *type, graft__schema_kind *kind)
{
    static const struct {
        const char *name;
        graft__schema_kind kind;
    } types[] = {{"object", GRAFT__SCHEMA_OBJECT}, {"array", GRAFT__SCHEMA_ARRAY},
                 {"string", GRAFT__SCHEMA_STRING}, {"number", GRAFT__SCHEMA_NUMBER},
                 {"integer", GRAFT__SCHEMA_INTEGER}, {"boolean", GRAFT__SCHEMA_BOOLEAN},
                 {"null", GRAFT__SCHEMA_NULL}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (type != NULL && strcmp(type, types[i].name) == 0) {
            *kind = types[i].kind;
            return true;
        }
    return false;
}

/* A node of one type for schema (the keywords of that type applied). */
static int compile_typed(compiler *c, const json_t *schema, const json_t *from,
                         graft__schema_kind kind, const char *path)
{
    int node = new_node(c, from, kind);
    if (node < 0)
        return -1;
    if (kind == GRAFT__SCHEMA_OBJECT)
        return compile_object(c, schema, node, path);
    if (kind == GRAFT__SCHEMA_ARRAY)
        return compile_array(c, schema, node, path);
    if (kind == GRAFT__SCHEMA_STRING)
        return compile_string(c, schema, node, path);
    if (kind == GRAFT__SCHEMA_NUMBER || kind == GRAFT__SCHEMA_INTEGER)
        return compile_bounds(c, schema, node, kind == GRAFT__SCHEMA_INTEGER, path);
    return node;
}

/* Whether literal value v is of a type the schema's "type" (absent: any) allows. */
static bool literal_typed(const json_t *type, const json_t *v)
{
    if (type == NULL)
        return true;
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1); i++) {
        const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        if (t == NULL)
            continue;
        if ((strcmp(t, "string") == 0 && json_is_string(v)) ||
            (strcmp(t, "number") == 0 && json_is_number(v)) ||
            (strcmp(t, "integer") == 0 && json_is_integer(v)) ||
            (strcmp(t, "boolean") == 0 && json_is_boolean(v)) ||
            (strcmp(t, "null") == 0 && json_is_null(v)))
            return true;
    }
    return false;
}

/* enum or const: the values (scalars) as texts. */
static int compile_literals(compiler *c, const json_t *schema, const char *path)
{
    const json_t *one = json_object_get(schema, "const"), *values = json_object_get(schema, "enum");
    if (values != NULL && (!json_is_array(values) || json_array_size(values) == 0))
        return fail(c, path, "'%s' must be a non-empty array", "enum");
    int node = new_node(c, schema, GRAFT__SCHEMA_LITERALS);
    if (node < 0)
        return -1;
    const json_t *type = json_object_get(schema, "type");
    uint32_t first = c->out->n_texts, count = 0;
    size_t n = one != NULL ? 1 : json_array_size(values);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = one != NULL ? one : json_array_get(values, i);
        if (json_is_object(v) || json_is_array(v))
            return fail(c, path, "'%s' holds an object or array: only scalars are supported",
                        one ? "const" : "enum");
        if (!literal_typed(type, v) || (one != NULL && values != NULL))
            continue;
        if (count == GRAFT__SCHEMA_MAX_TEXTS)
            return fail(c, path, "'%s' has more than 64 values", "enum");
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL)
            return out_of_memory(c);
        c->out->nodes[node].classes |= (uint8_t)graft__json_first_class((uint8_t)text[0]);
        int rc = add_text(c, text, strlen(text), 0);
        free(text);
        if (rc < 0)
            return -1;
        count++;
    }
    if (count == 0)
        return fail(c, path, "'%s' leaves no value of the schema's type", one ? "const" : "enum");
    c->out->nodes[node].first = first;
    c->out->nodes[node].count = count;
    return node;
}

/* The literals node of object node o's tag (its first property, required, held to const or
 * enum values), or NULL when it has none. */
static const graft__schema_node *tag_values(const graft__json_schema *s, uint16_t o)
{
    const graft__schema_node *n = &s->nodes[o];
    if (n->kind != GRAFT__SCHEMA_OBJECT || n->count == 0 || !(n->required & 1) ||
        s->value_of[n->first] >= s->n_nodes)
        return NULL;
    const graft__schema_node *values = &s->nodes[s->value_of[n->first]];
    return values->kind == GRAFT__SCHEMA_LITERALS ? values : NULL;
}

static bool same_bytes(const graft__json_schema *s, uint32_t i, uint32_t k)
{
    uint32_t len = s->text_at[i + 1] - s->text_at[i];
    return s->text_at[k + 1] - s->text_at[k] == len &&
           memcmp(s->arena + s->text_at[k], s->arena + s->text_at[i], len) == 0;
}

/* Whether object alternatives objects[0, n) are told apart by a tag: each a schema'd object
 * whose first property has the same name, is required and holds literals (at most 64 in
 * all, of at most 256 bytes) that no other alternative holds. */
static bool tagged(const graft__json_schema *s, const uint16_t *objects, size_t n)
{
    uint32_t n_values = 0;
    for (size_t i = 0; i < n; i++) {
        const graft__schema_node *values = tag_values(s, objects[i]);
        if (values == NULL || !same_bytes(s, s->nodes[objects[i]].first,
                                          s->nodes[objects[0]].first))
            return false;
        n_values += values->count;
        for (uint32_t k = values->first; k < values->first + values->count; k++) {
            if (s->text_at[k + 1] - s->text_at[k] > 256)
                return false;
            for (size_t j = 0; j < i; j++) {
                const graft__schema_node *other = tag_values(s, objects[j]);
                for (uint32_t l = other->first; l < other->first + other->count; l++)
                    if (same_bytes(s, k, l))
                        return false;
            }
        }
    }
    return n_values <= GRAFT__SCHEMA_MAX_TEXTS;
}

/* The GRAFT__SCHEMA_TAGGED node of object alternatives objects[0, n) (tagged() holds). */
static int compile_tagged(compiler *c, const uint16_t *objects, size_t n)
{
    graft__json_schema *s = c->out;
    int tags = new_node(c, NULL, GRAFT__SCHEMA_LITERALS);
    int node = tags < 0 ? -1 : new_node(c, NULL, GRAFT__SCHEMA_TAGGED);
    if (node < 0)
        return -1;
    uint32_t texts = s->n_texts;
    for (size_t i = 0; i < n; i++) {
        const graft__schema_node *values = tag_values(s, objects[i]);
        for (uint32_t k = values->first; k < values->first + values->count; k++) {
            char value[256];
            uint32_t len = s->text_at[k + 1] - s->text_at[k];
            memcpy(value, s->arena + s->text_at[k], len); /* add_text may move the arena */
            if (add_text(c, value, len, (uint16_t)i) < 0)
                return -1;
            s->nodes[tags].classes |= (uint8_t)graft__json_first_class((uint8_t)value[0]);
        }
    }
    s->nodes[tags].first = texts;
    s->nodes[tags].count = s->n_texts - texts;
    s->nodes[node].classes = C_OBJECT;
    s->nodes[node].items = (uint16_t)tags;
    s->nodes[node].required = 1;
    s->nodes[node].first = s->n_alts;
    s->nodes[node].count = (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        if (add_alt(c, objects[i]) < 0)
            return -1;
    return node;
}

/* Adds node alt (an alternative of the union being compiled, `key` at path) to alts, or its
 * alternatives when it is a union itself (a union is flat); object nodes to objects. */
static int add_alternative(compiler *c, uint16_t alt, uint16_t *alts, size_t *n_alts,
                           uint16_t *objects, size_t *n_objects, const char *key,
                           const char *path)
{
    const graft__schema_node *node = &c->out->nodes[alt];
    /* A union still being compiled (a recursion through it: a property or item of one of
     * its alternatives leads back) has no alternatives yet: it stays one, nested, and the
     * recognizer walks into it (resolve_unions checks that no union holds itself). */
    bool flatten = node->kind == GRAFT__SCHEMA_UNION && node->count > 0;
    uint32_t count = flatten ? node->count : 1;
    for (uint32_t i = 0; i < count; i++) {
        uint16_t one = flatten ? c->out->alts[node->first + i] : alt;
        bool object = c->out->nodes[one].classes == C_OBJECT;
        if (*n_alts + *n_objects == GRAFT__SCHEMA_MAX_TEXTS)
            return fail(c, path, "'%s' has more than 64 alternatives (nested ones counted)",
                        key);
        if (object)
            objects[(*n_objects)++] = one;
        else
            alts[(*n_alts)++] = one;
    }
    return 0;
}

/* Whether no value can be an instance of two of the union's alternatives, as far as the
 * first byte (alts[0, m), and n_objects objects) or a tag (by_tag) tells: oneOf needs
 * exactly one, which the recognizer, following all that match, could not hold to. */
static bool exclusive(const graft__json_schema *s, const uint16_t *alts, size_t m,
                      size_t n_objects, bool by_tag)
{
    int seen = n_objects > 0 ? C_OBJECT : 0;
    if (n_objects > 1 && !by_tag)
        return false;
    for (size_t i = 0; i < m; i++) {
        if (s->nodes[alts[i]].classes & seen)
            return false;
        seen |= s->nodes[alts[i]].classes;
    }
    return true;
}

/* A union of the nodes made for each of n alternatives (nested unions flattened); object
 * alternatives that a tag tells apart become one GRAFT__SCHEMA_TAGGED alternative. A single
 * alternative is returned as is. Alternatives of anyOf (and of a type list) whose values can
 * begin alike are followed together by the recognizer (json_recognizer.c); oneOf's must be
 * exclusive. */
static int compile_union(compiler *c, const json_t *schema, const json_t *list, size_t n,
                         const char *key, const char *path)
{
    if (n == 0 || n > GRAFT__SCHEMA_MAX_TEXTS)
        return fail(c, path, "'%s' must list 1 to 64 alternatives", key);
    if (n == 1 && strcmp(key, "type") != 0)
        return compile(c, json_array_get(list, 0), path);
    /* The union's node first, so that a $ref back to this schema finds it. */
    int node = n == 1 ? 0 : new_node(c, schema, GRAFT__SCHEMA_UNION);
    if (node < 0)
        return -1;
    char sub[512];
    uint16_t alts[GRAFT__SCHEMA_MAX_TEXTS], objects[GRAFT__SCHEMA_MAX_TEXTS];
    size_t m = 0, n_objects = 0;
    for (size_t i = 0; i < n; i++) {
        int alt;
        graft__schema_kind kind;
        const json_t *item = json_array_get(list, i);
        if (strcmp(key, "type") == 0) {
            if (!type_named(json_string_value(item), &kind))
                return fail(c, path, "'type' lists '%.40s', not a JSON type",
                            json_string_value(item) ? json_string_value(item) : "?");
            alt = compile_typed(c, schema, n == 1 ? schema : NULL, kind, path);
        } else {
            snprintf(sub, sizeof sub, "%s.%s[%zu]", path, key, i);
            alt = compile(c, item, sub);
        }
        if (alt < 0 || add_alternative(c, (uint16_t)alt, alts, &m, objects, &n_objects, key,
                                       path) < 0)
            return -1;
    }
    bool by_tag = n_objects > 1 && tagged(c->out, objects, n_objects);
    bool nested = false;
    for (size_t i = 0; i < m; i++)
        nested = nested || c->out->nodes[alts[i]].kind == GRAFT__SCHEMA_UNION;
    if (strcmp(key, "oneOf") == 0 && nested)
        return fail(c, path, "'%s' has an alternative that leads back to a union holding it: "
                    "which alternative matches cannot be told here (anyOf takes it)", key);
    if (strcmp(key, "oneOf") == 0 && !exclusive(c->out, alts, m, n_objects, by_tag))
        return fail(c, path, "'%s' has alternatives that a value could match together: the "
                    "first byte of a value, or a tag, must pick one (anyOf takes them)", key);
    if (by_tag) {
        int objects_node = compile_tagged(c, objects, n_objects);
        if (objects_node < 0)
            return -1;
        alts[m++] = (uint16_t)objects_node;
    } else {
        for (size_t i = 0; i < n_objects; i++)
            alts[m++] = objects[i];
    }
    if (n == 1)
        return alts[0];
    uint8_t classes = 0;
    for (size_t i = 0; i < m; i++)
        classes |= c->out->nodes[alts[i]].classes;
    c->out->nodes[node].first = c->out->n_alts;
    c->out->nodes[node].count = (uint32_t)m;
    c->out->nodes[node].classes = classes;
    for (size_t i = 0; i < m; i++)
        if (add_alt(c, alts[i]) < 0)
            return -1;
    return node;
}

/* Only annotations may stand beside a keyword that replaces the schema ($ref, anyOf...). */
static int check_alone(compiler *c, const json_t *schema, const char *key, const char *path)
{
    const char *k;
    const json_t *v;
    json_object_foreach ((json_t *)schema, k, v) {
        if (strcmp(k, key) != 0 && !LISTED(k, annotations)) {
            char what[128];
            snprintf(what, sizeof what, "'%.40s' beside '%s'", k, key);
            return fail(c, path, "%s is not supported", what);
        }
    }
    return 0;
}

/* The node for schema (memoised by address, so $ref cycles close). */
static int compile(compiler *c, const json_t *schema, const char *path)
{
    for (uint32_t i = 0; i < c->out->n_nodes; i++)
        if (c->seen[i] == schema)
            return (int)i;
    if (c->depth == MAX_NESTING)
        return fail(c, path, "the schema nests or refers more than %s deep", "64");
    c->depth++;
    int node = compile_schema(c, schema, path);
    c->depth--;
    return node;
}

static int compile_schema(compiler *c, const json_t *schema, const char *path)
{
    if (json_is_true(schema))
        return new_node(c, schema, GRAFT__SCHEMA_ANY);
    if (!json_is_object(schema))
        return fail(c, path, "%s must be an object (or true)", "a schema");
    const char *key;
    const json_t *v;
    json_object_foreach ((json_t *)schema, key, v) {
        if (!LISTED(key, annotations) && !LISTED(key, keywords))
            return fail(c, path, "'%.60s' is not supported", key);
    }
    static const char *const replacing[] = {"$ref", "anyOf", "oneOf", "allOf"};
    for (size_t i = 0; i < sizeof replacing / sizeof replacing[0]; i++) {
        const json_t *r = json_object_get(schema, replacing[i]);
        if (r == NULL)
            continue;
        if (check_alone(c, schema, replacing[i], path) < 0)
            return -1;
        if (i == 0) {
            const json_t *target = json_is_string(r) ? resolve(c, json_string_value(r)) : NULL;
            if (target == NULL)
                return fail(c, path, "'$ref' %.100s names no schema of this document",
                            json_string_value(r) ? json_string_value(r) : "(not a string)");
            return compile(c, target, json_string_value(r));
        }
        if (!json_is_array(r))
            return fail(c, path, "'%s' must be an array of schemas", replacing[i]);
        if (i == 3 && json_array_size(r) != 1)
            return fail(c, path, "'%s' with more than one schema is not supported", "allOf");
        return compile_union(c, schema, r, json_array_size(r), replacing[i], path);
    }
    const json_t *type = json_object_get(schema, "type");
    const size_t n_string = sizeof string_keywords / sizeof string_keywords[0];
    for (size_t i = 0; i < n_string + sizeof number_keywords / sizeof number_keywords[0]; i++) {
        bool text = i < n_string;
        const char *key = text ? string_keywords[i] : number_keywords[i - n_string];
        if (json_object_get(schema, key) == NULL)
            continue;
        if (json_object_get(schema, "enum") != NULL || json_object_get(schema, "const") != NULL)
            return fail(c, path, "'%s' beside 'enum' or 'const' is not supported", key);
        if (type == NULL)
            return fail(c, path,
                        text ? "'%s' needs \"type\": \"string\" (or a list with it)"
                             : "'%s' needs \"type\": \"number\" or \"integer\" (or a list "
                               "with one)",
                        key);
    }
    if (json_object_get(schema, "enum") != NULL || json_object_get(schema, "const") != NULL)
        return compile_literals(c, schema, path);
    graft__schema_kind kind;
    if (json_is_array(type))
        return compile_union(c, schema, type, json_array_size(type), "type", path);
    if (type != NULL && !type_named(json_string_value(type), &kind))
        return fail(c, path, "'%s' must be a JSON type or a list of them", "type");
    if (type == NULL) {
        if (json_object_get(schema, "properties") || json_object_get(schema, "required") ||
            json_object_get(schema, "additionalProperties"))
            kind = GRAFT__SCHEMA_OBJECT;
        else if (json_object_get(schema, "items") || json_object_get(schema, "minItems") ||
                 json_object_get(schema, "maxItems"))
            kind = GRAFT__SCHEMA_ARRAY;
        else
            return new_node(c, schema, GRAFT__SCHEMA_ANY);
    }
    return compile_typed(c, schema, schema, kind, path);
}

void graft__json_schema_free(graft__json_schema *s)
{
    if (s == NULL)
        return;
    graft__free(s->nodes);
    graft__free(s->arena);
    graft__free(s->text_at);
    graft__free(s->value_of);
    graft__free(s->alts);
    for (uint32_t i = 0; i < s->n_regexes; i++)
        graft__json_regex_free(s->regexes[i]);
    graft__free(s->regexes);
    graft__free(s->bounds);
    graft__free(s);
}

/* Whether union u reaches union `target` through alternatives that are unions alone
 * (seen: the unions already walked). */
static bool reaches(const graft__json_schema *s, uint16_t u, uint16_t target, uint8_t *seen)
{
    seen[u] = 1;
    const graft__schema_node *n = &s->nodes[u];
    for (uint32_t i = 0; i < n->count; i++) {
        uint16_t a = s->alts[n->first + i];
        if (s->nodes[a].kind != GRAFT__SCHEMA_UNION)
            continue;
        if (a == target || (!seen[a] && reaches(s, a, target, seen)))
            return true;
    }
    return false;
}

/* Once every node is compiled: a union nested in another because it was still being compiled
 * then (add_alternative) has its alternatives now, so every union's classes become its
 * alternatives' (until none changes); and no union may hold itself through unions alone,
 * whose values could never begin. */
static int resolve_unions(compiler *c)
{
    graft__json_schema *s = c->out;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t u = 0; u < s->n_nodes; u++) {
            graft__schema_node *n = &s->nodes[u];
            uint8_t classes = n->classes;
            for (uint32_t i = 0; n->kind == GRAFT__SCHEMA_UNION && i < n->count; i++)
                classes |= s->nodes[s->alts[n->first + i]].classes;
            changed = changed || classes != n->classes;
            n->classes = classes;
        }
    }
    uint8_t *seen = graft__calloc(s->n_nodes, 1);
    if (seen == NULL)
        return out_of_memory(c);
    for (uint32_t u = 0; u < s->n_nodes; u++) {
        if (s->nodes[u].kind != GRAFT__SCHEMA_UNION)
            continue;
        memset(seen, 0, s->n_nodes);
        if (reaches(s, (uint16_t)u, (uint16_t)u, seen)) {
            graft__free(seen);
            return fail(c, "", "%s", "'anyOf' holds itself before any value begins (an "
                        "alternative that is the union again): its values could never begin");
        }
    }
    graft__free(seen);
    return 0;
}

int graft__json_schema_compile(const char *text, size_t len, graft__json_schema **out,
                               char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (root == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "json_schema: not JSON: %s", err.text);
    compiler c = {.root = root, .errmsg = errmsg, .status = GRAFT_OK};
    c.out = graft__calloc(1, sizeof *c.out);
    int node = c.out == NULL ? out_of_memory(&c) : compile(&c, root, "");
    if (node >= 0 && resolve_unions(&c) < 0)
        node = -1;
    if (node >= 0 && c.out->nodes[node].classes != C_OBJECT)
        fail(&c, "", "%s", "the root must be an object schema");
    else if (node >= 0)
        c.out->root = (uint16_t)node;
    json_decref(root);
    graft__free(c.seen);
    if (c.status != GRAFT_OK) {
        graft__json_schema_free(c.out);
        return c.status;
    }
    *out = c.out;
    return GRAFT_OK;
}

int graft_json_schema_check(const char *schema, size_t len, char **errmsg)
{
    graft__json_schema *compiled = NULL;
    int rc = schema == NULL ? graft__errmsg(errmsg, GRAFT_EINVAL, "json_schema: none given")
                            : graft__json_schema_compile(schema, len, &compiled, errmsg);
    graft__json_schema_free(compiled);
    return rc;
}
