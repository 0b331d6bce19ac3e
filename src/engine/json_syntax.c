/*
 * json_syntax.c: the byte-at-a-time recognizer of one JSON object that holds a generation
 * to GRAFT_OUTPUT_JSON_OBJECT, and with a schema to GRAFT_OUTPUT_JSON_SCHEMA (the contract
 * and limits are in json_output.h).
 *
 * The state is a mode (what the next byte may be), the stack of open objects and arrays as
 * bits, and the few counters a mode needs. A number has no closing byte: the byte after it
 * ends it and is then read as what follows a value. Only prefixes that some accepted text
 * continues are accepted, so a generation held to it can always finish.
 *
 * A schema is followed at the syntax's events: a value begins (its first byte picks the
 * union's alternative and must suit the node; an object or array pushes a frame), a key
 * begins (the properties it may name become candidates), a key, enum value or integer is
 * read (each byte narrows the candidates; a bounded number's bytes must leave a completion
 * within its bounds; a held string's characters must leave a match of its automaton), a
 * comma or closer comes (a property must remain;
 * every required one must have come; the item counts must fit), a value ends (a literal
 * must be whole). Inside a value the schema leaves free (any value, any object) nothing but
 * the syntax is checked until that value ends.
 */
#include "engine/engine.h"

/* How the current key or scalar is checked against the schema. */
enum { CHECK_NONE, CHECK_NUMBER, CHECK_INTEGER, CHECK_LITERAL, CHECK_KEY, CHECK_STRING };

/* Digits a schema'd number may have in each part: an integer part of 18 digits fits a
 * 64-bit integer, and an exponent of 2 a double, so every parser reads the value. */
enum { MAX_INTEGER_DIGITS = 18, MAX_FRACTION_DIGITS = 18, MAX_EXPONENT_DIGITS = 2 };

enum {
    M_START,       /* before the object: whitespace or '{' */
    M_OBJECT_OPEN, /* after '{': whitespace, a key or '}' */
    M_KEY,         /* after ',' in an object: whitespace or a key */
    M_COLON,       /* after a key: whitespace or ':' */
    M_VALUE,       /* after ':', or ',' in an array: whitespace or a value */
    M_ARRAY_OPEN,  /* after '[': whitespace, a value or ']' */
    M_AFTER,       /* after a value in an object or array: whitespace, ',' or the closer */
    M_STRING,      /* in a string, at a character boundary */
    M_UTF8,        /* in a string, inside a multi-byte character */
    M_ESCAPE,      /* after '\' */
    M_HEX,         /* in a \u escape */
    M_LOW_SLASH,   /* after a high surrogate's escape: '\' must follow */
    M_LOW_U,       /* ... then 'u' */
    M_LITERAL,     /* in true, false or null */
    M_MINUS,       /* a number: after '-' */
    M_ZERO,        /* after a leading 0 */
    M_INTEGER,     /* in the integer digits (1-9 first) */
    M_POINT,       /* after '.' */
    M_FRACTION,    /* in the fraction's digits */
    M_E,           /* after 'e' or 'E' */
    M_EXP_SIGN,    /* after the exponent's sign */
    M_EXPONENT,    /* in the exponent's digits */
    M_DONE         /* after the object: whitespace only */
};

/* The run of whitespace before the next byte. */
enum {
    S_NONE,  /* empty */
    S_BLANK, /* one space or tab */
    S_CR,    /* a CR, which LF must follow */
    S_LINE   /* a line break, then `indent` spaces and tabs */
};

void graft__json_syntax_init(graft__json_syntax *s)
{
    graft__json_syntax_init_schema(s, NULL);
}

void graft__json_syntax_init_schema(graft__json_syntax *s, const graft__json_schema *schema)
{
    *s = (graft__json_syntax){.mode = M_START, .schema = schema};
    if (schema != NULL)
        s->expect = schema->root;
}

bool graft__json_syntax_done(const graft__json_syntax *s)
{
    return s->mode == M_DONE && s->space != S_CR;
}

bool graft__json_syntax_in_text(const graft__json_syntax *s)
{
    return s->mode == M_STRING &&
           (s->schema == NULL || s->free_depth != 0 || s->check < CHECK_LITERAL);
}

bool graft__json_syntax_in_held_text(const graft__json_syntax *s)
{
    return s->mode == M_STRING && s->schema != NULL && s->free_depth == 0 &&
           s->check == CHECK_STRING;
}

bool graft__json_syntax_text_follows(const graft__json_syntax *s, const char *text, size_t len)
{
    uint16_t state = s->re_state;
    for (size_t i = 0; i < len && state != GRAFT__REGEX_DEAD;) {
        uint32_t cp;
        size_t n = graft__utf8_decode(text + i, len - i, &cp);
        if (n == 0)
            return false;
        state = graft__json_regex_step(s->re, state, cp);
        i += n;
    }
    return state != GRAFT__REGEX_DEAD;
}

/* ---- following the schema ---- */

static bool schema_on(const graft__json_syntax *s)
{
    return s->schema != NULL && s->free_depth == 0;
}

static const graft__schema_node *node_of(const graft__json_syntax *s, uint16_t n)
{
    return &s->schema->nodes[n];
}

/* The open frame's item or property count, and its node. */
static uint16_t *frame_count(graft__json_syntax *s)
{
    return &s->frames[s->n_frames - 1].count;
}

static const graft__schema_node *frame_node(const graft__json_syntax *s)
{
    return node_of(s, s->frames[s->n_frames - 1].node);
}

static uint64_t low_bits(uint32_t n)
{
    return n >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
}

static uint32_t text_len(const graft__json_schema *schema, uint32_t i)
{
    return schema->text_at[i + 1] - schema->text_at[i];
}

/* Of the candidate texts of node `matched`, those whose byte at pos is c. */
static uint64_t narrow(const graft__json_syntax *s, uint8_t c)
{
    const graft__schema_node *n = node_of(s, s->matched);
    uint64_t left = 0;
    for (uint64_t bits = s->cand; bits != 0; bits &= bits - 1) {
        uint32_t i = n->first + (uint32_t)__builtin_ctzll(bits);
        if (s->pos < text_len(s->schema, i) &&
            (uint8_t)s->schema->arena[s->schema->text_at[i] + s->pos] == c)
            left |= bits & -bits;
    }
    return left;
}

/* The candidate read whole (its text is pos bytes long), or -1. */
static int whole_candidate(const graft__json_syntax *s)
{
    const graft__schema_node *n = node_of(s, s->matched);
    for (uint64_t bits = s->cand; bits != 0; bits &= bits - 1) {
        int i = __builtin_ctzll(bits);
        if (text_len(s->schema, n->first + (uint32_t)i) == s->pos)
            return i;
    }
    return -1;
}

static bool push_frame(graft__json_syntax *s, uint16_t node)
{
    if (s->n_frames == GRAFT__SCHEMA_MAX_DEPTH)
        return false;
    s->frames[s->n_frames].node = node;
    s->frames[s->n_frames++].count = 0;
    return true;
}

/* Counts in *matching the alternatives of union u whose values can begin with a byte of
 * `class` (a nested union's own in its place: json_schema.c nests one only while it is
 * being compiled, and none holds itself), *picked being the choice-th. */
static void union_matches(const graft__json_syntax *s, uint16_t u, int class,
                          uint32_t *matching, uint16_t *picked)
{
    const graft__schema_node *n = node_of(s, u);
    for (uint32_t i = 0; i < n->count; i++) {
        uint16_t a = s->schema->alts[n->first + i];
        if (!(node_of(s, a)->classes & class))
            continue;
        if (node_of(s, a)->kind == GRAFT__SCHEMA_UNION) {
            union_matches(s, a, class, matching, picked);
            continue;
        }
        if (*matching == s->choice)
            *picked = a;
        (*matching)++;
    }
}

/* A value of union node *n begins with c: *n becomes the alternative it follows, the
 * choice-th of those whose values can begin with c; where there are several, the fork is
 * recorded (graft__json_recognizer follows the others). */
static bool union_pick(graft__json_syntax *s, uint16_t *n, uint8_t c)
{
    uint32_t matching = 0;
    uint16_t picked = 0;
    union_matches(s, *n, graft__json_first_class(c), &matching, &picked);
    if (matching > 1 && s->n_forks == GRAFT__SCHEMA_MAX_DEPTH + 1)
        matching = 1; /* unreachable (a fork's depth exceeds its outer one's): the first */
    if (matching > 1) {
        s->n_choices = (uint8_t)matching;
        s->forks[s->n_forks].at = s->fed;
        s->forks[s->n_forks].choice = s->choice;
        s->forks[s->n_forks++].depth = s->depth;
    }
    if (s->choice >= matching)
        return false;
    *n = picked;
    return true;
}

/* A value begins with c where the schema expects node s->expect. */
static bool schema_value_start(graft__json_syntax *s, uint8_t c)
{
    if (!schema_on(s))
        return true;
    if (s->n_frames > 0 && frame_node(s)->kind == GRAFT__SCHEMA_ARRAY) {
        if (*frame_count(s) == frame_node(s)->max_items)
            return false;
        if (*frame_count(s) < UINT16_MAX) /* bounds are below it (json_schema.c) */
            (*frame_count(s))++;
    }
    uint16_t n = s->expect;
    if (node_of(s, n)->kind == GRAFT__SCHEMA_UNION && !union_pick(s, &n, c))
        return false;
    const graft__schema_node *node = node_of(s, n);
    if (!(node->classes & graft__json_first_class(c)))
        return false;
    switch (node->kind) {
    case GRAFT__SCHEMA_ANY:
    case GRAFT__SCHEMA_ANY_OBJECT:
        s->free_depth = (uint8_t)(s->depth + 1);
        return true;
    case GRAFT__SCHEMA_OBJECT:
    case GRAFT__SCHEMA_TAGGED: /* its tag's value picks the object (value_end) */
        return push_frame(s, n);
    case GRAFT__SCHEMA_ARRAY:
        s->expect = node->items;
        return push_frame(s, n);
    case GRAFT__SCHEMA_NUMBER:
    case GRAFT__SCHEMA_INTEGER:
        s->check = node->kind == GRAFT__SCHEMA_NUMBER ? CHECK_NUMBER : CHECK_INTEGER;
        s->digits = c != '-';
        s->negative = c == '-';
        s->int_part = c == '-' ? 0 : (uint64_t)(c - '0');
        s->frac_part = 0;
        s->num_bounds = node->bounds ? &s->schema->bounds[node->bounds - 1] : NULL;
        return true;
    case GRAFT__SCHEMA_LITERALS:
        s->check = CHECK_LITERAL;
        s->matched = n;
        s->cand = low_bits(node->count);
        s->pos = 0;
        s->cand = narrow(s, c);
        s->pos = 1;
        return s->cand != 0;
    case GRAFT__SCHEMA_STRING:
        if (node->regex != 0) {
            s->check = CHECK_STRING;
            s->re = s->schema->regexes[node->regex - 1];
            s->re_state = graft__json_regex_start(s->re); /* never DEAD (json_schema.c) */
        }
        return true;
    default: /* boolean, null: the first byte's class says it all */
        return true;
    }
}

/* ---- a string held to an automaton: each byte must leave some character that continues a
 * match, so the text is refused at the first byte that rules every one out ---- */

/* Whether some code point in [lo, hi] continues the match. */
static bool some_char(const graft__json_syntax *s, uint32_t lo, uint32_t hi)
{
    return graft__json_regex_any_in(s->re, s->re_state, lo, hi);
}

static bool take_char(graft__json_syntax *s, uint32_t cp)
{
    s->re_state = graft__json_regex_step(s->re, s->re_state, cp);
    return s->re_state != GRAFT__REGEX_DEAD;
}

/* The code points that high surrogates [lo, hi] (within D800-DBFF) begin. */
static bool some_pair(const graft__json_syntax *s, uint32_t lo, uint32_t hi)
{
    return lo <= hi && some_char(s, 0x10000 + ((lo - 0xD800) << 10),
                                 0x10000 + ((hi - 0xD800) << 10) + 0x3FF);
}

/* A hex digit of a \u escape, value v so far with `left` digits to come: some character the
 * escape can still be continues the match. */
static bool hex_char(graft__json_syntax *s, uint32_t v, int left)
{
    uint32_t lo = v << (4 * left), hi = lo | ((1u << (4 * left)) - 1);
    if (s->low_due) { /* the low half of a pair whose high half is s->cp */
        uint32_t base = 0x10000 + ((s->cp - 0xD800) << 10);
        lo = lo > 0xDC00 ? lo : 0xDC00;
        hi = hi < 0xDFFF ? hi : 0xDFFF;
        if (left == 0)
            return take_char(s, base + (v - 0xDC00));
        return lo <= hi && some_char(s, base + (lo - 0xDC00), base + (hi - 0xDC00));
    }
    if (left == 0 && v >= 0xD800 && v <= 0xDBFF) {
        s->cp = v;
        return some_pair(s, v, v);
    }
    if (left == 0)
        return take_char(s, v); /* a lone low surrogate is the syntax's to refuse */
    return (lo <= 0xD7FF && some_char(s, lo, hi < 0xD7FF ? hi : 0xD7FF)) ||
           (hi >= 0xE000 && some_char(s, lo > 0xE000 ? lo : 0xE000, hi)) ||
           some_pair(s, lo > 0xD800 ? lo : 0xD800, hi < 0xDBFF ? hi : 0xDBFF);
}

/* A byte of a held string, before the syntax reads it (which refuses what is not JSON). */
static bool string_char_byte(graft__json_syntax *s, uint8_t c)
{
    static const char simple[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
    switch (s->mode) {
    case M_STRING:
        if (c == '"')
            return graft__json_regex_accepts(s->re, s->re_state);
        if (c == '\\')
            return some_char(s, 0, 0x10FFFF);
        if (c < 0x80)
            return take_char(s, c);
        if (c >= 0xC2 && c <= 0xF4) {
            int left = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
            static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
            s->cp = c & (0x3Fu >> left);
            uint32_t lo = s->cp << (6 * left), hi = lo | ((1u << (6 * left)) - 1);
            return some_char(s, lo > least[left] ? lo : least[left], hi);
        }
        return true;
    case M_UTF8: {
        s->cp = s->cp << 6 | (c & 0x3Fu);
        int left = s->pending - 1;
        if (left == 0)
            return take_char(s, s->cp);
        uint32_t lo = s->cp << (6 * left);
        return some_char(s, lo, lo | ((1u << (6 * left)) - 1));
    }
    case M_ESCAPE:
        for (const char *e = simple; *e != '\0'; e += 2)
            if ((uint8_t)e[0] == c)
                return take_char(s, (uint8_t)e[1]);
        return true;
    case M_HEX: {
        int v = graft__hex_digit(c);
        return v < 0 || hex_char(s, (uint32_t)s->code << 4 | (uint32_t)v, s->pending - 1);
    }
    default: /* the rest of a surrogate pair's second escape */
        return true;
    }
}

/* A key begins: the candidates are the properties from the next one that may come up to
 * the first required one among them (properties come in the schema's order). */
static bool schema_key_start(graft__json_syntax *s)
{
    if (!schema_on(s))
        return true;
    const graft__schema_node *n = frame_node(s);
    s->pos = 0;
    s->check = CHECK_KEY;
    if (n->kind == GRAFT__SCHEMA_TAGGED) { /* the tag: the first property of every object */
        s->matched = s->schema->alts[n->first];
        s->cand = 1;
        return true;
    }
    uint32_t next = *frame_count(s);
    if (next >= n->count)
        return false;
    uint64_t remaining = low_bits(n->count) & ~low_bits(next);
    uint64_t required = n->required & remaining;
    s->cand = required ? remaining & low_bits((uint32_t)__builtin_ctzll(required) + 1)
                       : remaining;
    s->matched = s->frames[s->n_frames - 1].node;
    return true;
}

/* A key was read whole: its property is the next value's node. */
static bool schema_key_end(graft__json_syntax *s)
{
    int i = whole_candidate(s);
    if (i < 0)
        return false;
    *frame_count(s) = (uint16_t)(i + 1);
    const graft__schema_node *n = frame_node(s);
    s->expect = n->kind == GRAFT__SCHEMA_TAGGED ? n->items
                                                : s->schema->value_of[n->first + (uint32_t)i];
    s->check = CHECK_NONE;
    return true;
}

/* A comma in the open object or array: another property or item must be able to come. */
static bool schema_comma(graft__json_syntax *s)
{
    if (!schema_on(s))
        return true;
    const graft__schema_node *n = frame_node(s);
    if (n->kind != GRAFT__SCHEMA_ARRAY)
        return *frame_count(s) < n->count;
    s->expect = n->items;
    return *frame_count(s) < n->max_items;
}

/* The open object or array closes: every required property came; enough items came. */
static bool schema_close(graft__json_syntax *s)
{
    if (!schema_on(s))
        return true;
    const graft__schema_node *n = frame_node(s);
    uint32_t count = s->frames[--s->n_frames].count;
    if (n->kind == GRAFT__SCHEMA_ARRAY)
        return count >= n->min_items;
    return (n->required & ~low_bits(count)) == 0;
}

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

/* A digit of a number (read before the syntax moves on) within its part's limit. */
static bool digit_fits(graft__json_syntax *s, uint8_t c)
{
    if (!is_digit(c))
        return true;
    bool more = s->mode == M_INTEGER || s->mode == M_FRACTION || s->mode == M_EXPONENT;
    s->digits = more ? (uint8_t)(s->digits + 1) : 1;
    if (s->mode == M_MINUS || s->mode == M_INTEGER)
        s->int_part = s->int_part * 10 + (uint64_t)(c - '0');
    else if (s->mode == M_POINT || s->mode == M_FRACTION)
        s->frac_part = s->frac_part * 10 + (uint64_t)(c - '0');
    if (s->mode == M_E || s->mode == M_EXP_SIGN || s->mode == M_EXPONENT)
        return s->digits <= MAX_EXPONENT_DIGITS;
    if (s->mode == M_POINT || s->mode == M_FRACTION)
        return s->digits <= MAX_FRACTION_DIGITS;
    return s->digits <= MAX_INTEGER_DIGITS;
}

/* A byte of a key, enum value or number, before the syntax reads it. */
static bool schema_byte(graft__json_syntax *s, uint8_t c)
{
    bool number = s->mode >= M_MINUS && s->mode <= M_EXPONENT;
    bool extends = is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    if (number && !extends)
        return true; /* the byte ends the number: value_end checks what was read */
    if (s->check == CHECK_INTEGER && (c == '.' || c == 'e' || c == 'E'))
        return false;
    if (s->num_bounds != NULL && (c == 'e' || c == 'E')) /* bounded: written without one */
        return false;
    if (s->check == CHECK_NUMBER || s->check == CHECK_INTEGER)
        return digit_fits(s, c);
    if (s->check == CHECK_STRING)
        return string_char_byte(s, c);
    s->cand = narrow(s, c);
    s->pos++;
    return s->cand != 0;
}

/* ---- a bounded number: after each byte some completion must lie within its bounds ---- */

static __int128 power_of_ten(int n)
{
    __int128 p = 1;
    while (n-- > 0)
        p *= 10;
    return p;
}

/* Whether [lo, hi] (magnitudes; the number's sign applied here) holds a multiple of the
 * bounds' step within them (the bounds are multiples of it). */
static bool magnitudes_fit(const graft__json_syntax *s, __int128 lo, __int128 hi)
{
    const graft__json_bounds *b = s->num_bounds;
    __int128 from = s->negative ? -hi : lo, to = s->negative ? -lo : hi;
    from = from > b->lo ? from : b->lo;
    to = to < b->hi ? to : b->hi;
    if (from > to)
        return false;
    return graft__json_floor_multiple(to, b->step) >= from;
}

/* Whether some number that the text so far begins (mode: the syntax's, after the byte) lies
 * within the bounds: the values its completions reach, as intervals of magnitudes in units
 * of 10^-18 (an integer's: whole units). */
static bool number_viable(const graft__json_syntax *s)
{
    const __int128 one = GRAFT__JSON_SCALE;
    const bool integer = s->check == CHECK_INTEGER;
    const __int128 fraction = integer ? 0 : one - 1; /* what fraction digits can add */
    const __int128 whole = (__int128)s->int_part * one;
    switch (s->mode) {
    case M_MINUS:
        return magnitudes_fit(s, 0, (one - 1) * one + fraction);
    case M_ZERO:
        return magnitudes_fit(s, 0, fraction);
    case M_INTEGER:
        for (int more = 0; more <= MAX_INTEGER_DIGITS - s->digits; more++) {
            __int128 scale = power_of_ten(more);
            if (magnitudes_fit(s, whole * scale, (whole + one) * scale - one + fraction))
                return true;
        }
        return false;
    case M_POINT:
        return magnitudes_fit(s, whole, whole + one - 1);
    case M_FRACTION: {
        __int128 unit = power_of_ten(MAX_FRACTION_DIGITS - s->digits);
        __int128 at = whole + (__int128)s->frac_part * unit;
        return magnitudes_fit(s, at, at + unit - 1);
    }
    default:
        return true;
    }
}

/* A bounded number ends: its value is within the bounds. */
static bool number_within(const graft__json_syntax *s)
{
    __int128 at = (__int128)s->int_part * GRAFT__JSON_SCALE;
    if (s->mode == M_FRACTION)
        at += (__int128)s->frac_part * power_of_ten(MAX_FRACTION_DIGITS - s->digits);
    return magnitudes_fit(s, at, at);
}

/* Whether the innermost open container is an object. */
static bool in_object(const graft__json_syntax *s)
{
    return (s->nest >> (s->depth - 1)) & 1u;
}

/* A value ended (its last byte read, or for a number the byte after it). */
static bool value_end(graft__json_syntax *s)
{
    if (s->num_bounds != NULL && s->free_depth == 0 && !number_within(s))
        return false;
    if (s->n_forks > 0 && s->forks[s->n_forks - 1].depth == s->depth)
        s->n_forks--; /* the union's value ended: the alternative taken no longer matters */
    s->num_bounds = NULL;
    s->mode = s->depth == 0 ? M_DONE : M_AFTER;
    if (s->schema == NULL)
        return true;
    if (s->free_depth != 0) {
        if (s->depth + 1 == s->free_depth)
            s->free_depth = 0;
        return true;
    }
    int literal = s->check == CHECK_LITERAL ? whole_candidate(s) : 0;
    if (literal >= 0 && s->check == CHECK_LITERAL && s->n_frames > 0 &&
        frame_node(s)->kind == GRAFT__SCHEMA_TAGGED) { /* the tag's value picks the object */
        const graft__schema_node *tagged = frame_node(s);
        uint32_t text = node_of(s, tagged->items)->first + (uint32_t)literal;
        uint32_t chosen = tagged->first + s->schema->value_of[text];
        s->frames[s->n_frames - 1].node = s->schema->alts[chosen];
    }
    s->check = CHECK_NONE;
    return literal >= 0;
}

static bool open_container(graft__json_syntax *s, bool object)
{
    if (s->depth == GRAFT__JSON_MAX_DEPTH)
        return false;
    if (object)
        s->nest |= UINT64_C(1) << s->depth;
    else
        s->nest &= ~(UINT64_C(1) << s->depth);
    s->depth++;
    s->mode = object ? M_OBJECT_OPEN : M_ARRAY_OPEN;
    return true;
}

static bool close_container(graft__json_syntax *s)
{
    if (!schema_close(s))
        return false;
    s->depth--;
    return value_end(s);
}

static bool start_literal(graft__json_syntax *s, const char *rest)
{
    s->rest = rest;
    s->mode = M_LITERAL;
    return true;
}

static bool key_start(graft__json_syntax *s, uint8_t c)
{
    s->key = true;
    s->mode = M_STRING;
    return c == '"' && schema_key_start(s);
}

/* The first byte of a value. */
static bool value_start(graft__json_syntax *s, uint8_t c)
{
    if (!schema_value_start(s, c))
        return false;
    switch (c) {
    case '"':
        s->key = false;
        s->mode = M_STRING;
        return true;
    case '{':
        return open_container(s, true);
    case '[':
        return open_container(s, false);
    case 't':
        return start_literal(s, "rue");
    case 'f':
        return start_literal(s, "alse");
    case 'n':
        return start_literal(s, "ull");
    case '-':
        s->mode = M_MINUS;
        return true;
    case '0':
        s->mode = M_ZERO;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            s->mode = M_INTEGER;
            return true;
        }
        return false;
    }
}

/* A byte of a string at a character boundary: a UTF-8 lead byte sets the range of the next
 * continuation byte so that overlong forms, surrogates and code points above U+10FFFF are
 * refused at their first impossible byte. */
static bool string_byte(graft__json_syntax *s, uint8_t c)
{
    if (c == '"') {
        if (!s->key)
            return value_end(s);
        s->mode = M_COLON;
        return true;
    }
    if (c == '\\') {
        s->mode = M_ESCAPE;
        return true;
    }
    if (c < 0x20)
        return false;
    if (c < 0x80)
        return true;
    uint8_t lo = 0x80, hi = 0xBF, more;
    if (c >= 0xC2 && c <= 0xDF)
        more = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        more = 2;
    else if (c >= 0xF0 && c <= 0xF4)
        more = 3;
    else
        return false;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    s->pending = more;
    s->lo = lo;
    s->hi = hi;
    s->mode = M_UTF8;
    return true;
}

static bool escape_byte(graft__json_syntax *s, uint8_t c)
{
    switch (c) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        s->mode = M_STRING;
        return true;
    case 'u':
        s->code = 0;
        s->pending = 4;
        s->mode = M_HEX;
        return true;
    default:
        return false;
    }
}

/* A hex digit of a \u escape: a low surrogate (DC00-DFFF) must come exactly where one is
 * due, which the first two digits decide, so a wrong one is refused at its first digit that
 * rules it out. */
static bool hex_byte(graft__json_syntax *s, uint8_t c)
{
    int v = graft__hex_digit(c);
    if (v < 0)
        return false;
    s->code = (uint16_t)(s->code << 4 | (unsigned)v);
    s->pending--;
    if (s->pending == 3 && s->low_due && s->code != 0xD)
        return false;
    if (s->pending == 2 && s->low_due != (s->code >= 0xDC && s->code <= 0xDF))
        return false;
    if (s->pending > 0)
        return true;
    bool high = s->code >= 0xD800 && s->code <= 0xDBFF;
    s->low_due = high;
    s->mode = high ? M_LOW_SLASH : M_STRING;
    return true;
}

static bool syntax_byte(graft__json_syntax *s, uint8_t c);

/* A byte while reading a number: a byte that cannot extend it ends it when it may end. */
static bool number_byte(graft__json_syntax *s, uint8_t c)
{
    bool digit = is_digit(c), e = c == 'e' || c == 'E';
    switch (s->mode) {
    case M_MINUS:
        if (!digit)
            return false;
        s->mode = c == '0' ? M_ZERO : M_INTEGER;
        return true;
    case M_POINT:
        s->mode = M_FRACTION;
        return digit;
    case M_E:
        if (c == '+' || c == '-') {
            s->mode = M_EXP_SIGN;
            return true;
        }
        s->mode = M_EXPONENT;
        return digit;
    case M_EXP_SIGN:
        s->mode = M_EXPONENT;
        return digit;
    case M_INTEGER:
    case M_FRACTION:
    case M_EXPONENT:
        if (digit)
            return true;
        break;
    default: /* M_ZERO */
        break;
    }
    if (c == '.' && (s->mode == M_ZERO || s->mode == M_INTEGER)) {
        s->mode = M_POINT;
        return true;
    }
    if (e && s->mode != M_EXPONENT) {
        s->mode = M_E;
        return true;
    }
    return value_end(s) && syntax_byte(s, c);
}

/* A whitespace byte between tokens, if the run can hold it. */
static bool space_byte(graft__json_syntax *s, uint8_t c)
{
    switch (c) {
    case ' ':
    case '\t':
        if (s->space == S_NONE) {
            s->space = S_BLANK;
            return true;
        }
        return s->space == S_LINE && s->indent++ < GRAFT__JSON_MAX_INDENT;
    case '\r':
        if (s->space != S_NONE)
            return false;
        s->space = S_CR;
        return true;
    default: /* '\n' */
        if (s->space != S_NONE && s->space != S_CR)
            return false;
        s->space = S_LINE;
        s->indent = 0;
        return true;
    }
}

/* A byte between tokens: whitespace the run can hold, or what the mode takes. */
static bool structural_byte(graft__json_syntax *s, uint8_t c)
{
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
        return space_byte(s, c);
    if (s->space == S_CR)
        return false;
    s->space = S_NONE;
    switch (s->mode) {
    case M_START:
        return c == '{' && schema_value_start(s, c) && open_container(s, true);
    case M_OBJECT_OPEN:
        return c == '}' ? close_container(s) : key_start(s, c);
    case M_KEY:
        return key_start(s, c);
    case M_COLON:
        s->mode = M_VALUE;
        return c == ':';
    case M_ARRAY_OPEN:
        return c == ']' ? close_container(s) : value_start(s, c);
    case M_VALUE:
        return value_start(s, c);
    case M_AFTER:
        if (c == ',') {
            s->mode = in_object(s) ? M_KEY : M_VALUE;
            return schema_comma(s);
        }
        return c == (in_object(s) ? '}' : ']') && close_container(s);
    default: /* M_DONE */
        return false;
    }
}

/* The byte as JSON syntax (with the schema's checks at its events). */
static bool syntax_byte(graft__json_syntax *s, uint8_t c)
{
    switch (s->mode) {
    case M_STRING:
        return string_byte(s, c);
    case M_UTF8:
        if (c < s->lo || c > s->hi)
            return false;
        s->lo = 0x80;
        s->hi = 0xBF;
        if (--s->pending == 0)
            s->mode = M_STRING;
        return true;
    case M_ESCAPE:
        return escape_byte(s, c);
    case M_HEX:
        return hex_byte(s, c);
    case M_LOW_SLASH:
        s->mode = M_LOW_U;
        return c == '\\';
    case M_LOW_U:
        s->code = 0;
        s->pending = 4;
        s->mode = M_HEX;
        return c == 'u';
    case M_LITERAL:
        if (c != (uint8_t)*s->rest)
            return false;
        return *++s->rest != '\0' || value_end(s);
    case M_MINUS:
    case M_ZERO:
    case M_INTEGER:
    case M_POINT:
    case M_FRACTION:
    case M_E:
    case M_EXP_SIGN:
    case M_EXPONENT:
        return number_byte(s, c);
    default:
        return structural_byte(s, c);
    }
}

bool graft__json_syntax_feed(graft__json_syntax *s, uint8_t c)
{
    s->fed++;
    bool checked = schema_on(s) && s->check != CHECK_NONE;
    if (checked && !schema_byte(s, c))
        return false;
    if (!syntax_byte(s, c))
        return false;
    if (s->num_bounds != NULL && s->mode >= M_MINUS && s->mode <= M_EXPONENT &&
        !number_viable(s))
        return false;
    return !(checked && s->check == CHECK_KEY && s->mode == M_COLON) || schema_key_end(s);
}
