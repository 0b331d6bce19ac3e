/*
 * json_output.h: holding a generation's output to JSON (GRAFT_OUTPUT_JSON_OBJECT and
 * GRAFT_OUTPUT_JSON_SCHEMA): the recognizer, the schemas it can follow, and the mask of the
 * tokens that can continue a text. Part of the engine's internal interface (engine.h).
 */
#ifndef GRAFT_JSON_OUTPUT_H
#define GRAFT_JSON_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* json_regex.c: a regular expression of JSON Schema's `pattern` (and of the string
 * `format`s json_schema.c knows) compiled to a deterministic automaton over Unicode code
 * points, so that the recognizer can tell after every character of a string whether some
 * continuation of it still matches. The syntax is the subset of ECMA-262 that schemas use:
 *   - literal characters; escaped ones (\\ \. \/ \- \[ ... any ASCII punctuation), \t \n
 *     \r \f \v \0, \xHH, \uHHHH, \u{H...} (a surrogate pair of \u escapes is one code point);
 *   - `.`: any code point but the line terminators \n \r U+2028 U+2029;
 *   - classes [...] and [^...] of characters, ranges a-z and the escapes here; \d \D \w \W
 *     (ASCII: [0-9], [A-Za-z0-9_]) and \s \S (ECMA's white space and line terminators:
 *     \t \n \v \f \r, space, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
 *     U+3000, U+FEFF), inside classes too;
 *   - groups (...) and (?:...), alternation |, the quantifiers * + ? {n} {n,} {n,m} and their
 *     lazy forms (*? ...: the same strings);
 *   - ^ first and $ last in the pattern or in one of its top-level alternatives. An
 *     alternative without ^ may begin anywhere in the string and one without $ end anywhere,
 *     as a JSON Schema validator searches for the pattern.
 * Anything else (backreferences, lookaround, \b, named groups, ^ or $ elsewhere, flags) is
 * refused, naming what and where. Matching is case-sensitive; strings are sequences of code
 * points U+0000..U+10FFFF, surrogates excluded. Bounds: {n,m} at most 1000, the automaton
 * at most GRAFT__REGEX_MAX_STATES states. */
enum {
    GRAFT__REGEX_DEAD = 0xFFFF,
    GRAFT__REGEX_MAX_STATES = 4096,        /* a pattern's automaton */
    GRAFT__REGEX_MAX_LENGTH_STATES = 65534, /* with a length bound (bound_length) */
    GRAFT__REGEX_MAX_REPEAT = 1000
};
typedef struct graft__json_regex graft__json_regex;
/* GRAFT_OK, GRAFT_EINVAL (outside the subset, or beyond the bounds: *errmsg says what, at
 * which character of the pattern; errmsg may be NULL), GRAFT_ENOMEM. */
int graft__json_regex_compile(const char *pattern, size_t len, graft__json_regex **out,
                              char **errmsg);
void graft__json_regex_free(graft__json_regex *re);
/* The state before any character: GRAFT__REGEX_DEAD when no string matches. */
uint16_t graft__json_regex_start(const graft__json_regex *re);
/* The state after code point cp from `state` (not DEAD): GRAFT__REGEX_DEAD when no string
 * that begins with the characters fed so far and cp matches. */
uint16_t graft__json_regex_step(const graft__json_regex *re, uint16_t state, uint32_t cp);
/* Whether the characters fed so far (that led to state, not DEAD) match. */
bool graft__json_regex_accepts(const graft__json_regex *re, uint16_t state);
/* Whether some code point in [lo, hi] leads from state (not DEAD) to a state that is not
 * DEAD. */
bool graft__json_regex_any_in(const graft__json_regex *re, uint16_t state, uint32_t lo,
                              uint32_t hi);
/* *out: the strings re matches that have min_chars to max_chars code points (UINT32_MAX: no
 * most), as an automaton of the same interface (at most GRAFT__REGEX_MAX_LENGTH_STATES
 * states). GRAFT_EINVAL (too large, *errmsg says so), GRAFT_ENOMEM. */
int graft__json_regex_bound_length(const graft__json_regex *re, uint32_t min_chars,
                                   uint32_t max_chars, graft__json_regex **out, char **errmsg);

/* json_schema.c: a JSON schema compiled for the recognizer. The subset (what OpenAI's
 * structured outputs and pydantic / zod write): type (a name or a list of names), properties and
 * required (the properties are generated in the order the schema lists them; ones not listed are
 * never generated, whatever additionalProperties says), items, minItems and maxItems (up to 65534),
 * enum and const (strings, numbers, booleans, null), anyOf of up to 64 alternatives (nested unions
 * are flattened into it, or walked into where a recursion leads back to one; a union that holds
 * itself before any value begins is refused): the first byte of a value picks the alternatives of
 * its class (an object, an array, a string, a number, a boolean, null), and where it leaves several
 * the recognizer follows them all (graft__json_recognizer), except objects whose first property is
 * a tag (the same name first in each, required, with const or enum values no two share), which the
 * tag's value picks (GRAFT__SCHEMA_TAGGED, one state); oneOf likewise, but its alternatives must be
 * exclusive as far as the first byte or a tag tells (exactly one must match, which following them
 * all could not hold to); allOf of one schema, $ref to "#" or into $defs / definitions, and on
 * string schemas (with "type" string or a list holding it) pattern (json_regex.c), format (date,
 * time, date-time, uuid, ipv4, hostname, email, uri: json_schema.c says as which patterns) or, not
 * both, and minLength / maxLength (code points, at most 10000), all held to by one automaton per
 * string schema; on number and integer schemas minimum, maximum, exclusiveMinimum, exclusiveMaximum
 * and multipleOf (numbers with at most 18 digits after the point; a bounded number is written
 * without an exponent). Annotations (title, description, default, examples, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly) are ignored. Any other keyword restricts values in a way the
 * recognizer does not hold to, so compiling refuses it, naming it. The root must be an object
 * schema. A number the schema types has at most 18 digits before its point, 18 after it and 2 in
 * its exponent, so that every parser reads it (64-bit integers exactly). */
/* A schema'd text opens at most GRAFT__SCHEMA_MAX_DEPTH objects and arrays under the
 * schema's control (inside a free value, the syntax's 64). The opening bracket beyond is
 * refused where it comes; a prefix 32 deep whose object still needs a required object or
 * array has no completion then, and a generation that reaches one fails with GRAFT_ERANGE
 * (only recursive schemas get there). */
enum {
    GRAFT__SCHEMA_MAX_DEPTH = 32,  /* nested objects and arrays a schema'd text opens */
    GRAFT__SCHEMA_MAX_TEXTS = 64,  /* properties of an object, values of an enum */
    GRAFT__SCHEMA_MAX_NODES = 4096
};

typedef enum graft__schema_kind {
    GRAFT__SCHEMA_ANY,        /* any value */
    GRAFT__SCHEMA_ANY_OBJECT, /* any object */
    GRAFT__SCHEMA_OBJECT,     /* the properties texts[first, first + count) */
    GRAFT__SCHEMA_ARRAY,
    GRAFT__SCHEMA_STRING,
    GRAFT__SCHEMA_NUMBER,
    GRAFT__SCHEMA_INTEGER,
    GRAFT__SCHEMA_BOOLEAN,
    GRAFT__SCHEMA_NULL,
    GRAFT__SCHEMA_LITERALS,   /* one of the values texts[first, first + count) */
    GRAFT__SCHEMA_UNION,      /* one of the nodes alts[first, first + count): those the
                                 first byte of the value allows (a union among them only
                                 where a recursion led back to it while it was compiled:
                                 its alternatives count in its place) */
    GRAFT__SCHEMA_TAGGED      /* one of the object nodes alts[first, first + count), told
                                 apart by the value of their first property (the tag: the
                                 same name, required in each, const or enum values none
                                 share): `items` is the literals node of every tag value,
                                 value_of of each text the index of its object */
} graft__schema_kind;

typedef struct graft__schema_node {
    graft__schema_kind kind;
    uint8_t classes;    /* the classes of first bytes its values can have (a union's, once
                           its alternatives are compiled) */
    uint32_t first, count;
    uint64_t required;  /* object: bit i set when property first + i is required */
    uint16_t items;     /* array: the node of its items */
    uint32_t min_items, max_items;
    uint16_t regex;     /* string: 1 + the index of the automaton its characters follow
                           (pattern, format, lengths), or 0: any string */
    uint16_t bounds;    /* number, integer: 1 + the index of its bounds, or 0: none */
} graft__schema_node;

/* A number's bounds, inclusive, in units of 10^-18 (GRAFT__JSON_SCALE per 1): what
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum and multipleOf leave of the numbers a
 * schema'd text can write (at most 18 digits before the point and 18 after it): the
 * multiples of step in [lo, hi] (step: 1 for a number, GRAFT__JSON_SCALE for an integer,
 * with multipleOf the least multiple of both; lo and hi are multiples of it). */
#define GRAFT__JSON_SCALE ((__int128)1000000000000000000)
typedef struct graft__json_bounds {
    __int128 lo, hi, step;
} graft__json_bounds;

/* The greatest multiple of unit (> 0) at or below x. */
static inline __int128 graft__json_floor_multiple(__int128 x, __int128 unit)
{
    __int128 q = x / unit;
    if (x % unit != 0 && x < 0)
        q--;
    return q * unit;
}

struct graft__json_schema {
    graft__schema_node *nodes; /* the root is nodes[root] */
    uint32_t n_nodes;
    /* A property's text is its name as JSON writes it, without the opening quote and with
     * the closing one (what follows the '"' that opens a key); a literal's is its compact
     * JSON. text i is arena[text_at[i], text_at[i + 1]). */
    char *arena;
    uint32_t *text_at;
    uint16_t *value_of; /* (per text) a property's node; unused for literals */
    uint32_t n_texts;
    uint16_t *alts;
    uint32_t n_alts;
    graft__json_regex **regexes; /* the string nodes' automata */
    uint32_t n_regexes;
    graft__json_bounds *bounds;  /* the number nodes' bounds */
    uint32_t n_bounds;
    uint16_t root;
};

/* The class of values a first byte begins (a bit: object, array, string, number, boolean,
 * null), or 0 when no value begins with it. */
int graft__json_first_class(uint8_t byte);
typedef struct graft__json_schema graft__json_schema;

/* GRAFT_OK, GRAFT_EINVAL (not JSON, or a schema outside the subset, with *errmsg saying
 * which keyword at which JSON path), GRAFT_ENOMEM. errmsg may be NULL. */
int graft__json_schema_compile(const char *text, size_t len, graft__json_schema **out,
                               char **errmsg);
void graft__json_schema_free(graft__json_schema *schema);

/* json_syntax.c: a recognizer of one JSON object (RFC 8259) fed a byte at a time, the
 * syntax GRAFT_OUTPUT_JSON_OBJECT holds a generation to (and, with a schema,
 * GRAFT_OUTPUT_JSON_SCHEMA: then it accepts exactly the prefixes of texts that are also
 * instances of the schema, as json_schema.c reads it). It accepts exactly the prefixes of
 * texts of the form: whitespace, an object, whitespace; with these limits beyond the RFC's
 * grammar, so that what it accepts is also accepted by strict parsers and cannot grow
 * without end on filler:
 *   - strings are valid UTF-8 (no overlong forms, surrogates or code points above
 *     U+10FFFF), control bytes (below 0x20) only escaped;
 *   - a \u escape of a high surrogate (D800-DBFF) must be followed at once by a \u escape
 *     of a low one (DC00-DFFF), and a low one never stands alone;
 *   - objects and arrays nest at most GRAFT__JSON_MAX_DEPTH deep;
 *   - whitespace between tokens (and before and after the object) is one space or tab, or
 *     one line break (LF or CR LF) followed by at most GRAFT__JSON_MAX_INDENT spaces and
 *     tabs: what compact and indented printers write, and no room for a model to pad.
 * The state is a plain value: copying it forks the recognizer. */
enum { GRAFT__JSON_MAX_DEPTH = 64, GRAFT__JSON_MAX_INDENT = 32 };

typedef struct graft__json_syntax {
    uint64_t nest;    /* bit d: level d is an object (1) or an array (0) */
    uint8_t depth;    /* open objects and arrays */
    uint8_t mode;     /* what the next byte may be (json_syntax.c) */
    uint8_t space;    /* what the current run of whitespace holds (json_syntax.c) */
    uint8_t indent;   /* spaces and tabs after its line break */
    uint8_t pending;  /* literal: bytes left; UTF-8: continuation bytes left; \u: hex left */
    uint8_t lo, hi;   /* the range of the next UTF-8 continuation byte */
    uint16_t code;    /* the \u escape's value so far */
    const char *rest; /* a literal's remaining bytes (true, false, null) */
    bool key;         /* the string being read is an object's key */
    bool low_due;     /* a high surrogate was read: a \u low surrogate must follow */

    /* With a schema (json_syntax.c). */
    const graft__json_schema *schema; /* NULL: any object */
    uint16_t expect;  /* the node the next value must match */
    uint8_t check;    /* how the current scalar or key is checked */
    uint8_t digits;   /* a number: the digits of its current part */
    bool negative;    /* a bounded number: its sign, ... */
    uint64_t int_part, frac_part; /* ... and the values of its parts' digits so far */
    const graft__json_bounds *num_bounds; /* the number's bounds, or NULL */
    uint8_t free_depth; /* inside a value the schema leaves free: the depth it began at + 1 */
    const graft__json_regex *re; /* a string held to a pattern, format or lengths: ... */
    uint16_t re_state; /* ... its automaton's state after the characters read, ... */
    uint32_t cp;       /* ... and the character being read (a high surrogate's, once read) */
    uint16_t matched; /* key or literal: the node whose texts it is matched against, ... */
    uint16_t pos;     /* ... the bytes matched so far, ... */
    uint64_t cand;    /* ... and the texts still possible (bit i: text i) */
    uint8_t n_frames; /* the schema'd objects and arrays open */

    /* Forks (graft__json_recognizer): a value that begins where a union's alternatives
     * share its first byte's class follows the choice-th of them (in the union's order) and
     * sets n_choices to how many there are; the forks whose values are still open are
     * kept, outermost first, as where each began (bytes fed) and the alternative taken. */
    uint8_t choice;
    uint8_t n_choices;
    uint8_t n_forks;
    uint32_t fed;

    /* The stacks, last: graft__json_syntax_copy copies their live entries only. */
    struct {
        uint16_t node;  /* the object or array node */
        uint16_t count; /* object: the index of the next property that may come; array: the
                           items begun */
    } frames[GRAFT__SCHEMA_MAX_DEPTH];
    struct {
        uint32_t at;
        uint8_t choice, depth;
    } forks[GRAFT__SCHEMA_MAX_DEPTH + 1];
} graft__json_syntax;

/* *dst = *src, copying only the stacks' live entries (the recognizer's hot copy). */
static inline void graft__json_syntax_copy(graft__json_syntax *dst, const graft__json_syntax *src)
{
    memcpy(dst, src, offsetof(graft__json_syntax, frames));
    memcpy(dst->frames, src->frames, src->n_frames * sizeof src->frames[0]);
    memcpy(dst->forks, src->forks, src->n_forks * sizeof src->forks[0]);
}

void graft__json_syntax_init(graft__json_syntax *s);
/* The same, for the instances of schema (which must outlive the state and its copies). */
void graft__json_syntax_init_schema(graft__json_syntax *s, const graft__json_schema *schema);
/* Whether `byte` can follow what was fed; when it cannot, *s is left unspecified (feed a
 * copy to probe). */
bool graft__json_syntax_feed(graft__json_syntax *s, uint8_t byte);
/* Whether the object is complete (only whitespace may follow). */
bool graft__json_syntax_done(const graft__json_syntax *s);
/* Whether *s is inside a string at a character boundary, with no escape begun: any run of
 * complete UTF-8 characters without '"', '\\' or control bytes can follow. */
bool graft__json_syntax_in_text(const graft__json_syntax *s);
/* Whether *s is inside a string held to an automaton (pattern, format, lengths) at a
 * character boundary with no escape begun: then text_follows tells what plain text may
 * follow, without feeding it. */
bool graft__json_syntax_in_held_text(const graft__json_syntax *s);
/* With in_held_text: whether text[0, len), complete UTF-8 characters without '"', '\\' or
 * control bytes, can follow *s (what feeding it would answer). */
bool graft__json_syntax_text_follows(const graft__json_syntax *s, const char *text, size_t len);

/* A recognizer that follows every alternative a union's value may still be: each state
 * is a graft__json_syntax that took one alternative at each union whose alternatives the
 * first byte of its value did not tell apart. It accepts a byte when some state does, and
 * drops the states that refuse it; states whose open forks took the same alternatives are
 * the same state (outside a union's value the recognizer is deterministic), so only one is
 * kept. At most GRAFT__JSON_MAX_STATES are followed at once: where a fork would make more,
 * the alternatives listed later are not followed (what is accepted is still an instance).
 * A plain value: copying it copies the recognizer. */
enum { GRAFT__JSON_MAX_STATES = 16 };
typedef struct graft__json_recognizer {
    uint32_t n_states;
    graft__json_syntax states[GRAFT__JSON_MAX_STATES];
} graft__json_recognizer;

/* schema NULL: any object, as graft__json_syntax_init. */
void graft__json_recognizer_init(graft__json_recognizer *r, const graft__json_schema *schema);
/* Whether `byte` can follow what was fed; when it cannot, *r is unchanged. */
bool graft__json_recognizer_feed(graft__json_recognizer *r, uint8_t byte);
/* Whether the object is complete (only whitespace may follow). */
bool graft__json_recognizer_done(const graft__json_recognizer *r);

/* Free text before a JSON text (graft_generate_config.output_after, .output_opens): the
 * output holds the tag before the JSON text begins, right after it. With an opening text,
 * the free text is optional: the output begins, after white space, with the opening text
 * and then the free text, or with the JSON text at once. */
enum { GRAFT__JSON_MAX_LEAD = 64 };
typedef struct graft__json_preamble {
    char tag[GRAFT_MAX_OUTPUT_AFTER], open[GRAFT_MAX_OUTPUT_AFTER];
    uint32_t len, open_len;
    uint32_t matched;  /* in the free text: the tag's first bytes that the output ends with */
    uint32_t opening;  /* before it: the opening text's first bytes out, after white space */
    char lead[GRAFT__JSON_MAX_LEAD]; /* before it: that white space (the JSON text's, should */
    uint32_t n_lead;                 /* the JSON text come at once; more than fits: it cannot) */
    bool in_free;      /* the free text began (its opening text is out, or there is none) */
    bool over;         /* the JSON text began (or there is no tag) */
} graft__json_preamble;

/* tag NULL: none (the JSON text begins at once); open NULL: the free text begins at once.
 * Each at most GRAFT_MAX_OUTPUT_AFTER bytes. */
void graft__json_preamble_init(graft__json_preamble *p, const char *tag, const char *open);

/* json_mask.c: the token table indexed by first byte, to mask the tokens that cannot continue
 * a JSON text. Immutable once built; read by the engine thread. The table must outlive it. */
typedef struct graft__json_mask graft__json_mask;
int graft__json_mask_create(const graft__token_table *tokens, graft__json_mask **out);
void graft__json_mask_free(graft__json_mask *m);
/* Sets the logits of the tokens whose bytes cannot all follow *s to -INFINITY (tokens
 * without bytes included); returns how many tokens are left. */
int32_t graft__json_mask_apply(const graft__json_mask *m, const graft__json_recognizer *r,
                               float *logits);
/* Feeds token's bytes to *s; false when they cannot all follow (or it has none). */
bool graft__json_mask_feed(const graft__json_mask *m, graft__json_recognizer *r, int32_t token);
/* Before the JSON text (p not over; r as initialised): sets the logits of the tokens without
 * bytes, of those that break the opening text off (when the free text is optional and its
 * opening text began), and of those whose bytes of the JSON text (after the tag, or all of
 * them after the white space when the JSON text comes at once) cannot follow r, to
 * -INFINITY; returns how many tokens are left. */
int32_t graft__json_mask_apply_preamble(const graft__json_mask *m,
                                        const graft__json_preamble *p,
                                        const graft__json_recognizer *r, float *logits);
/* Feeds token's bytes to p and, once the JSON text began, its bytes to r (p is then over);
 * false when they cannot all follow (or the token has no bytes). */
bool graft__json_mask_feed_preamble(const graft__json_mask *m, graft__json_preamble *p,
                                    graft__json_recognizer *r, int32_t token);

#endif /* GRAFT_JSON_OUTPUT_H */
