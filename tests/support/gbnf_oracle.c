/*
 * gbnf_oracle.c: the GBNF parser and Earley recognizer of gbnf_oracle.h, the tests' oracle of
 * grammar-constrained output.
 *
 * DESIGN
 *   The parser is recursive descent over the grammar text. It lowers the grammar to plain
 *   context-free productions whose symbols are rules and terminals, a terminal being one
 *   character class (a set of code-point ranges, possibly negated):
 *     - a literal is one terminal per code point, '.' the empty negated class;
 *     - a group is a new, unnamed rule with the group's alternatives;
 *     - x* is a new rule R ::= R x | (empty), x{m,n} is m copies of x followed by a chain of
 *       n - m nested optionals O1 ::= x O2 | (empty), ..., Ok ::= x | (empty); an element of
 *       several symbols (a literal, or one already repeated) is first made a rule of its own.
 *   Then the rules that derive no finite string are found (a fixpoint) and every production
 *   that uses one is dropped, and the nullable rules are found (another fixpoint).
 *
 *   The recognizer is Earley's, over code points: set i holds items (dotted production,
 *   origin). Each call builds the chart from scratch. The completion of nullable rules uses
 *   Aycock and Horspool's fix: predicting a nullable rule also moves the dot over it, so an
 *   item that waits on a rule which already completed empty in this set is not lost. Left
 *   recursion needs nothing special. A dotted production is one number (its "position");
 *   each set keeps a hash of its items, for uniqueness, and per rule a list of its items that
 *   wait on that rule, for completion.
 *
 *   Viability: as every production left after pruning can be completed, a prefix is viable
 *   exactly when its last set is not empty; a prefix that ends inside a UTF-8 character is
 *   viable when a terminal expected after the whole characters admits some valid completion
 *   of it (a range of code points, worked out from the bits the bytes fix).
 *
 * LAYOUT: memory helpers; UTF-8; character classes; the grammar; the parser; pruning; the
 * Earley chart; the public calls.
 */
#include "gbnf_oracle.h"
#include "util/util.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPEAT 10000u        /* the largest count of a {m,n} repetition */
#define MAX_SCALAR 0x10FFFFu
#define SURROGATE_LO 0xD800u
#define SURROGATE_HI 0xDFFFu
#define UNBOUNDED UINT32_MAX     /* the upper count of *, + and {m,} */
#define NONE UINT32_MAX          /* no item, no rule */

/* ---- memory ---------------------------------------------------------------------------------- */

static void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size > 0 ? size : 1);
    if (q == NULL) {
        fputs("gbnf_oracle: out of memory\n", stderr);
        abort();
    }
    return q;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n > 0 ? n : 1, size > 0 ? size : 1);
    if (p == NULL) {
        fputs("gbnf_oracle: out of memory\n", stderr);
        abort();
    }
    return p;
}

/* Makes room for one more element in the array *p of *n elements (capacity *cap). */
static void reserve_one(void **p, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return;
    *cap = *cap < 8 ? 8 : 2 * *cap;
    *p = xrealloc(*p, *cap * elem);
}

#define PUSH(arr, n, cap, value)                                                              \
    do {                                                                                      \
        void *p_ = (arr);                                                                     \
        reserve_one(&p_, (n), &(cap), sizeof *(arr));                                         \
        (arr) = p_;                                                                           \
        (arr)[(n)++] = (value);                                                               \
    } while (0)

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

typedef enum { UTF8_INVALID, UTF8_COMPLETE, UTF8_TRUNCATED } utf8_status;

/*
 * Reads the character that starts s[0, avail) (avail >= 1). It takes *len bytes (1 to 4)
 * by its first byte. COMPLETE: they are all there and are valid UTF-8 for *lo (== *hi).
 * TRUNCATED: fewer than *len bytes are there, and every valid completion of them has a value
 * in [*lo, *hi], which holds at least one (the surrogates, within or beside the range, are
 * never a completion). INVALID: no completion is valid UTF-8.
 */
static utf8_status utf8_read(const uint8_t *s, size_t avail, size_t *len, uint32_t *lo,
                             uint32_t *hi)
{
    uint8_t b = s[0];
    size_t need;
    uint32_t v, min;
    if (b < 0x80) {
        *len = 1;
        *lo = *hi = b;
        return UTF8_COMPLETE;
    } else if ((b & 0xE0) == 0xC0) {
        need = 2, v = b & 0x1Fu, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
        need = 3, v = b & 0x0Fu, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
        need = 4, v = b & 0x07u, min = 0x10000;
    } else {
        return UTF8_INVALID; /* a continuation byte, or F8-FF */
    }
    size_t have = avail < need ? avail : need;
    for (size_t i = 1; i < have; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return UTF8_INVALID;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    unsigned missing_bits = 6 * (unsigned)(need - have);
    uint32_t l = v << missing_bits;
    uint32_t h = l | ((1u << missing_bits) - 1);
    if (l < min)
        l = min; /* shorter forms are overlong */
    if (h > MAX_SCALAR)
        h = MAX_SCALAR;
    if (l >= SURROGATE_LO && l <= SURROGATE_HI)
        l = SURROGATE_HI + 1;
    if (h >= SURROGATE_LO && h <= SURROGATE_HI)
        h = SURROGATE_LO - 1;
    if (l > h)
        return UTF8_INVALID;
    *len = need;
    *lo = l;
    *hi = h;
    return have == need ? UTF8_COMPLETE : UTF8_TRUNCATED;
}

/* ---- character classes ----------------------------------------------------------------------- */

typedef struct {
    uint32_t lo, hi;
} cp_range;

typedef struct {
    bool negated; /* it matches the code points in none of the ranges */
    cp_range *ranges;
    size_t n, cap;
} char_class;

/* Whether class c holds some code point of [lo, hi] (lo <= hi). */
static bool class_hits(const char_class *c, uint32_t lo, uint32_t hi)
{
    if (!c->negated) {
        for (size_t i = 0; i < c->n; i++)
            if (c->ranges[i].lo <= hi && lo <= c->ranges[i].hi)
                return true;
        return false;
    }
    /* Negated: walk up from lo over the ranges that cover it; a point left uncovered hits. */
    uint32_t at = lo;
    for (;;) {
        bool covered = false;
        for (size_t i = 0; i < c->n; i++) {
            if (c->ranges[i].lo <= at && at <= c->ranges[i].hi) {
                if (c->ranges[i].hi >= hi)
                    return false;
                at = c->ranges[i].hi + 1;
                covered = true;
            }
        }
        if (!covered)
            return true;
    }
}

/* Whether class c holds some Unicode scalar value (not a surrogate) of [lo, hi]. */
static bool class_hits_scalar(const char_class *c, uint32_t lo, uint32_t hi)
{
    if (lo < SURROGATE_LO && class_hits(c, lo, hi < SURROGATE_LO ? hi : SURROGATE_LO - 1))
        return true;
    if (hi > SURROGATE_HI && class_hits(c, lo > SURROGATE_HI ? lo : SURROGATE_HI + 1, hi))
        return true;
    return false;
}

/* ---- the grammar ----------------------------------------------------------------------------- */

typedef struct {
    bool is_rule;
    uint32_t index; /* into rules or classes */
} symbol;

typedef struct {
    symbol *s;
    size_t n, cap;
} sequence;

typedef struct {
    uint32_t lhs;
    sequence seq;
    bool alive;         /* every symbol derives some finite string */
    uint32_t first_pos; /* the position of its dot at 0; the dot at k is first_pos + k */
} production;

typedef struct {
    char *name;         /* NULL for a rule the parser made (group, repetition) */
    bool defined;
    size_t first_use;   /* offset in the text of its first reference, while undefined */
    uint32_t *prods;    /* its alternatives (only the alive ones after pruning) */
    size_t n_prods, cap_prods;
    bool productive;
    bool nullable;
} rule;

struct gbnf_oracle {
    rule *rules;
    size_t n_rules, cap_rules;
    production *prods;
    size_t n_prods, cap_prods;
    char_class *classes;
    size_t n_classes, cap_classes;
    uint32_t root;
    /* Positions (dotted productions): position p is production pos_prod[p] with its dot
     * before symbol pos_dot[p] (at the end when pos_dot[p] == that production's length). */
    uint32_t *pos_prod;
    uint32_t *pos_dot;
    size_t n_pos;
};

static uint32_t add_rule(gbnf_oracle *g, const char *name, size_t name_len)
{
    rule r = {0};
    if (name != NULL) {
        r.name = xrealloc(NULL, name_len + 1);
        memcpy(r.name, name, name_len);
        r.name[name_len] = '\0';
    } else {
        r.defined = true;
    }
    PUSH(g->rules, g->n_rules, g->cap_rules, r);
    return (uint32_t)(g->n_rules - 1);
}

static uint32_t find_rule(const gbnf_oracle *g, const char *name, size_t name_len)
{
    for (size_t i = 0; i < g->n_rules; i++) {
        const char *n = g->rules[i].name;
        if (n != NULL && strlen(n) == name_len && memcmp(n, name, name_len) == 0)
            return (uint32_t)i;
    }
    return NONE;
}

/* Adds the alternative seq to rule lhs, taking seq's symbols (seq is left empty). */
static void add_production(gbnf_oracle *g, uint32_t lhs, sequence *seq)
{
    production p = {.lhs = lhs, .seq = *seq};
    *seq = (sequence){0};
    PUSH(g->prods, g->n_prods, g->cap_prods, p);
    rule *r = &g->rules[lhs];
    PUSH(r->prods, r->n_prods, r->cap_prods, (uint32_t)(g->n_prods - 1));
}

static uint32_t add_class(gbnf_oracle *g, char_class c)
{
    PUSH(g->classes, g->n_classes, g->cap_classes, c);
    return (uint32_t)(g->n_classes - 1);
}

static void push_symbol(sequence *q, bool is_rule, uint32_t index)
{
    symbol s = {.is_rule = is_rule, .index = index};
    PUSH(q->s, q->n, q->cap, s);
}

void gbnf_oracle_free(gbnf_oracle *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->n_rules; i++) {
        free(g->rules[i].name);
        free(g->rules[i].prods);
    }
    for (size_t i = 0; i < g->n_prods; i++)
        free(g->prods[i].seq.s);
    for (size_t i = 0; i < g->n_classes; i++)
        free(g->classes[i].ranges);
    free(g->rules);
    free(g->prods);
    free(g->classes);
    free(g->pos_prod);
    free(g->pos_dot);
    free(g);
}

/* ---- the parser ------------------------------------------------------------------------------ */

typedef struct {
    gbnf_oracle *g;
    const char *text; /* the grammar, NUL-terminated */
    const char *end;  /* its NUL */
    const char *p;    /* the next character to read */
    char *err;
    size_t err_size;
} parser;

/* Writes the message, with the line and column of `at` when it is not NULL; returns false. */
static bool fail(parser *ps, const char *at, const char *fmt, ...)
{
    if (ps->err == NULL || ps->err_size == 0)
        return false;
    char message[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (at == NULL) {
        snprintf(ps->err, ps->err_size, "%s", message);
        return false;
    }
    unsigned line = 1, column = 1;
    for (const char *c = ps->text; c < at; c++) {
        if (*c == '\n') {
            line++;
            column = 1;
        } else {
            column++;
        }
    }
    snprintf(ps->err, ps->err_size, "line %u, column %u: %s", line, column, message);
    return false;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Skips spaces, tabs and comments, and line breaks too when newline_ok. */
static void skip_space(parser *ps, bool newline_ok)
{
    for (;;) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else if (c == '#') {
            while (*ps->p != '\0' && *ps->p != '\n' && *ps->p != '\r')
                ps->p++;
        } else {
            return;
        }
    }
}

/* Reads one character of a literal or class (an escape, or a raw UTF-8 character) into *cp.
 * The caller has checked that it is not the end of the text. */
static bool parse_char(parser *ps, uint32_t *cp)
{
    const char *at = ps->p;
    if (*at != '\\') {
        size_t len;
        uint32_t lo, hi;
        utf8_status st = utf8_read((const uint8_t *)at, (size_t)(ps->end - at), &len, &lo, &hi);
        if (st != UTF8_COMPLETE)
            return fail(ps, at, "invalid UTF-8 in the grammar");
        *cp = lo;
        ps->p += len;
        return true;
    }
    unsigned digits = 0;
    switch (at[1]) {
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case '\\': case '"': case '[': case ']': *cp = (uint8_t)at[1]; break;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    case '\0': return fail(ps, at, "escape at the end of the grammar");
    default: return fail(ps, at, "unknown escape '\\%c'", at[1]);
    }
    if (digits == 0) {
        ps->p += 2;
        return true;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < digits; i++) {
        int d = graft__hex_digit((unsigned char)at[2 + i]);
        if (d < 0)
            return fail(ps, at, "escape '\\%c' needs %u hex digits", at[1], digits);
        v = v << 4 | (unsigned)d;
    }
    if (v > MAX_SCALAR)
        return fail(ps, at, "escape above U+10FFFF");
    *cp = (uint32_t)v;
    ps->p += 2 + digits;
    return true;
}

/* Reads "..." (ps->p at the opening quote): one terminal per code point onto q. */
static bool parse_literal(parser *ps, sequence *q)
{
    const char *at = ps->p++;
    while (*ps->p != '"') {
        if (*ps->p == '\0')
            return fail(ps, at, "unterminated string literal");
        uint32_t cp;
        if (!parse_char(ps, &cp))
            return false;
        char_class c = {0};
        PUSH(c.ranges, c.n, c.cap, ((cp_range){cp, cp}));
        push_symbol(q, false, add_class(ps->g, c));
    }
    ps->p++;
    return true;
}

/* Reads [...] or [^...] (ps->p at the '['): one terminal onto q. */
static bool parse_class(parser *ps, sequence *q)
{
    const char *at = ps->p++;
    char_class c = {0};
    if (*ps->p == '^') {
        c.negated = true;
        ps->p++;
    }
    while (*ps->p != ']') {
        if (*ps->p == '\0') {
            free(c.ranges);
            return fail(ps, at, "unterminated character class");
        }
        const char *range_at = ps->p;
        uint32_t lo, hi;
        if (!parse_char(ps, &lo)) {
            free(c.ranges);
            return false;
        }
        hi = lo;
        if (ps->p[0] == '-' && ps->p[1] != ']' && ps->p[1] != '\0') {
            ps->p++;
            if (!parse_char(ps, &hi)) {
                free(c.ranges);
                return false;
            }
            if (hi < lo) {
                free(c.ranges);
                return fail(ps, range_at, "range whose end is below its start");
            }
        }
        PUSH(c.ranges, c.n, c.cap, ((cp_range){lo, hi}));
    }
    ps->p++;
    push_symbol(q, false, add_class(ps->g, c));
    return true;
}

/* Reads a repetition count (digits at ps->p) into *v. */
static bool parse_count(parser *ps, uint32_t *v)
{
    const char *at = ps->p;
    uint32_t n = 0;
    while (is_digit(*ps->p)) {
        n = 10 * n + (uint32_t)(*ps->p - '0');
        if (n > MAX_REPEAT)
            return fail(ps, at, "repetition count above %u", MAX_REPEAT);
        ps->p++;
    }
    *v = n;
    return true;
}

/* Reads a postfix operator (ps->p at it) into [*min, *max] (*max UNBOUNDED for no bound). */
static bool parse_operator(parser *ps, bool nested, uint32_t *min, uint32_t *max)
{
    const char *at = ps->p;
    char c = *ps->p++;
    if (c == '*' || c == '+' || c == '?') {
        *min = c == '+' ? 1 : 0;
        *max = c == '?' ? 1 : UNBOUNDED;
        return true;
    }
    skip_space(ps, nested);
    bool has_min = is_digit(*ps->p), has_max = false;
    if (has_min && !parse_count(ps, min))
        return false;
    skip_space(ps, nested);
    if (*ps->p == '}') {
        if (!has_min)
            return fail(ps, at, "empty repetition count {}");
        *max = *min;
    } else if (*ps->p == ',') {
        ps->p++;
        skip_space(ps, nested);
        has_max = is_digit(*ps->p);
        if (has_max && !parse_count(ps, max))
            return false;
        skip_space(ps, nested);
        if (*ps->p != '}')
            return fail(ps, ps->p, "expected '}' to close the repetition count");
        if (!has_min && !has_max)
            return fail(ps, at, "repetition count {,} without a bound");
        if (!has_min)
            *min = 0;
        if (!has_max)
            *max = UNBOUNDED;
    } else {
        return fail(ps, ps->p, "expected a number, ',' or '}' in the repetition count");
    }
    ps->p++;
    if (*max != UNBOUNDED && *max < *min)
        return fail(ps, at, "repetition count {%u,%u} with its maximum below its minimum",
                    (unsigned)*min, (unsigned)*max);
    return true;
}

/* Replaces the element q->s[start, q->n) with itself repeated min to max times. */
static void repeat_element(gbnf_oracle *g, sequence *q, size_t start, uint32_t min,
                           uint32_t max)
{
    symbol x;
    if (q->n - start == 1) {
        x = q->s[start];
    } else {
        sequence whole = {0};
        for (size_t i = start; i < q->n; i++)
            PUSH(whole.s, whole.n, whole.cap, q->s[i]);
        uint32_t r = add_rule(g, NULL, 0);
        add_production(g, r, &whole);
        x = (symbol){.is_rule = true, .index = r};
    }
    q->n = start;
    for (uint32_t i = 0; i < min; i++)
        PUSH(q->s, q->n, q->cap, x);
    if (max == UNBOUNDED) {
        /* R ::= R x | (empty) */
        uint32_t r = add_rule(g, NULL, 0);
        sequence more = {0}, none = {0};
        push_symbol(&more, true, r);
        PUSH(more.s, more.n, more.cap, x);
        add_production(g, r, &more);
        add_production(g, r, &none);
        push_symbol(q, true, r);
    } else if (max > min) {
        /* Ok ::= x | (empty), then O(j) ::= x O(j+1) | (empty) outwards. */
        uint32_t inner = NONE;
        for (uint32_t k = 0; k < max - min; k++) {
            uint32_t r = add_rule(g, NULL, 0);
            sequence some = {0}, none = {0};
            PUSH(some.s, some.n, some.cap, x);
            if (inner != NONE)
                push_symbol(&some, true, inner);
            add_production(g, r, &some);
            add_production(g, r, &none);
            inner = r;
        }
        push_symbol(q, true, inner);
    }
}

static bool parse_alternates(parser *ps, uint32_t lhs, bool nested);

/* Reads a sequence of elements onto q; it ends before the first character that starts no
 * element ('|', ')', a line break that ends the rule, the end, or an error for the caller). */
static bool parse_sequence(parser *ps, sequence *q, bool nested)
{
    size_t last = SIZE_MAX; /* where the last element's symbols start in q; none yet */
    for (;;) {
        const char *at = ps->p;
        char c = *at;
        if (c == '"') {
            last = q->n;
            if (!parse_literal(ps, q))
                return false;
        } else if (c == '[') {
            last = q->n;
            if (!parse_class(ps, q))
                return false;
        } else if (c == '.') {
            last = q->n;
            ps->p++;
            push_symbol(q, false, add_class(ps->g, (char_class){.negated = true}));
        } else if (is_name_char(c)) {
            last = q->n;
            while (is_name_char(*ps->p))
                ps->p++;
            size_t len = (size_t)(ps->p - at);
            uint32_t r = find_rule(ps->g, at, len);
            if (r == NONE) {
                r = add_rule(ps->g, at, len);
                ps->g->rules[r].first_use = (size_t)(at - ps->text);
            }
            push_symbol(q, true, r);
        } else if (c == '(') {
            last = q->n;
            ps->p++;
            skip_space(ps, true);
            uint32_t r = add_rule(ps->g, NULL, 0);
            if (!parse_alternates(ps, r, true))
                return false;
            if (*ps->p != ')')
                return fail(ps, ps->p, *ps->p == '\0' ? "unclosed '('" : "expected ')'");
            ps->p++;
            push_symbol(q, true, r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == SIZE_MAX)
                return fail(ps, at, "'%c' with no element before it to repeat", c);
            uint32_t min = 0, max = 0;
            if (!parse_operator(ps, nested, &min, &max))
                return false;
            repeat_element(ps->g, q, last, min, max);
        } else if (c == '<') {
            return fail(ps, at, "token references are not supported");
        } else {
            return true;
        }
        skip_space(ps, nested);
    }
}

/* Reads alternatives separated by '|' as productions of rule lhs. */
static bool parse_alternates(parser *ps, uint32_t lhs, bool nested)
{
    for (;;) {
        sequence q = {0};
        if (!parse_sequence(ps, &q, nested)) {
            free(q.s);
            return false;
        }
        add_production(ps->g, lhs, &q);
        if (*ps->p != '|')
            return true;
        ps->p++;
        skip_space(ps, true);
    }
}

/* Reads `name ::= alternatives` and the line break (or end) after it. */
static bool parse_rule(parser *ps)
{
    const char *at = ps->p;
    while (is_name_char(*ps->p))
        ps->p++;
    size_t len = (size_t)(ps->p - at);
    if (len == 0)
        return fail(ps, at, "expected a rule name");
    skip_space(ps, false);
    if (strncmp(ps->p, "::=", 3) != 0)
        return fail(ps, ps->p, "expected '::=' after the rule name");
    uint32_t r = find_rule(ps->g, at, len);
    if (r == NONE)
        r = add_rule(ps->g, at, len);
    else if (ps->g->rules[r].defined)
        return fail(ps, at, "rule '%s' defined twice", ps->g->rules[r].name);
    ps->g->rules[r].defined = true;
    ps->p += 3;
    skip_space(ps, true);
    if (!parse_alternates(ps, r, false))
        return false;
    if (*ps->p == '\r')
        ps->p += ps->p[1] == '\n' ? 2 : 1;
    else if (*ps->p == '\n')
        ps->p++;
    else if (*ps->p != '\0')
        return fail(ps, ps->p, "unexpected '%c' (expected a line break or the end)", *ps->p);
    skip_space(ps, true);
    return true;
}

/* ---- pruning, nullable rules, positions ------------------------------------------------------ */

static bool symbol_productive(const gbnf_oracle *g, symbol s)
{
    return s.is_rule ? g->rules[s.index].productive
                     : class_hits_scalar(&g->classes[s.index], 0, MAX_SCALAR);
}

static void prepare(gbnf_oracle *g)
{
    /* Productive rules: a production is alive when each of its symbols derives a string. */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < g->n_prods; i++) {
            production *p = &g->prods[i];
            if (p->alive)
                continue;
            bool all = true;
            for (size_t k = 0; k < p->seq.n && all; k++)
                all = symbol_productive(g, p->seq.s[k]);
            if (all) {
                p->alive = true;
                g->rules[p->lhs].productive = true;
                changed = true;
            }
        }
    }
    for (size_t i = 0; i < g->n_rules; i++) {
        rule *r = &g->rules[i];
        size_t kept = 0;
        for (size_t k = 0; k < r->n_prods; k++)
            if (g->prods[r->prods[k]].alive)
                r->prods[kept++] = r->prods[k];
        r->n_prods = kept;
    }
    /* Nullable rules: those with an alive production of nullable rules only. */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < g->n_prods; i++) {
            const production *p = &g->prods[i];
            if (!p->alive || g->rules[p->lhs].nullable)
                continue;
            bool all = true;
            for (size_t k = 0; k < p->seq.n && all; k++)
                all = p->seq.s[k].is_rule && g->rules[p->seq.s[k].index].nullable;
            if (all) {
                g->rules[p->lhs].nullable = true;
                changed = true;
            }
        }
    }
    g->n_pos = 0;
    for (size_t i = 0; i < g->n_prods; i++)
        g->n_pos += g->prods[i].seq.n + 1;
    g->pos_prod = xcalloc(g->n_pos, sizeof *g->pos_prod);
    g->pos_dot = xcalloc(g->n_pos, sizeof *g->pos_dot);
    size_t at = 0;
    for (size_t i = 0; i < g->n_prods; i++) {
        g->prods[i].first_pos = (uint32_t)at;
        for (size_t k = 0; k <= g->prods[i].seq.n; k++, at++) {
            g->pos_prod[at] = (uint32_t)i;
            g->pos_dot[at] = (uint32_t)k;
        }
    }
}

gbnf_oracle *gbnf_oracle_parse(const char *text, char *err, size_t err_size)
{
    if (err != NULL && err_size > 0)
        err[0] = '\0';
    gbnf_oracle *g = xcalloc(1, sizeof *g);
    parser ps = {g, text, text + strlen(text), text, err, err_size};
    bool ok = true;
    skip_space(&ps, true);
    while (ok && *ps.p != '\0')
        ok = parse_rule(&ps);
    for (size_t i = 0; ok && i < g->n_rules; i++)
        if (!g->rules[i].defined)
            ok = fail(&ps, text + g->rules[i].first_use, "undefined rule '%s'",
                      g->rules[i].name);
    if (ok) {
        g->root = find_rule(g, "root", 4);
        if (g->root == NONE)
            ok = fail(&ps, NULL, "the grammar has no 'root' rule");
    }
    if (!ok) {
        gbnf_oracle_free(g);
        return NULL;
    }
    prepare(g);
    return g;
}

/* ---- the Earley chart ------------------------------------------------------------------------ */

typedef struct {
    uint32_t pos;       /* the dotted production */
    uint32_t origin;    /* the set where it was predicted */
    uint32_t next_wait; /* the previous item of this set that waits on the same rule, or NONE */
} item;

typedef struct {
    item *items;
    size_t n, cap;
    uint32_t *table;     /* open addressing: 1 + an item's index, 0 for a free slot */
    size_t table_cap;    /* a power of 2, or 0 */
    uint32_t *wait_head; /* per rule, the last item waiting on it, or NONE */
} earley_set;

/* The symbol after the dot of position pos, or NULL at the end. */
static const symbol *next_symbol(const gbnf_oracle *g, uint32_t pos)
{
    const production *p = &g->prods[g->pos_prod[pos]];
    uint32_t dot = g->pos_dot[pos];
    return dot < p->seq.n ? &p->seq.s[dot] : NULL;
}

static size_t item_hash(uint32_t pos, uint32_t origin, size_t mask)
{
    uint64_t h = ((uint64_t)pos << 32 | origin) * 0x9E3779B97F4A7C15u;
    return (size_t)(h >> 32) & mask;
}

static void set_init(const gbnf_oracle *g, earley_set *s)
{
    *s = (earley_set){0};
    s->wait_head = xcalloc(g->n_rules, sizeof *s->wait_head);
    memset(s->wait_head, 0xFF, g->n_rules * sizeof *s->wait_head); /* all NONE */
}

static void set_free(earley_set *s)
{
    free(s->items);
    free(s->table);
    free(s->wait_head);
}

static void set_rehash(earley_set *s)
{
    free(s->table);
    s->table_cap = s->table_cap == 0 ? 64 : 2 * s->table_cap;
    s->table = xcalloc(s->table_cap, sizeof *s->table);
    for (size_t i = 0; i < s->n; i++) {
        size_t h = item_hash(s->items[i].pos, s->items[i].origin, s->table_cap - 1);
        while (s->table[h] != 0)
            h = (h + 1) & (s->table_cap - 1);
        s->table[h] = (uint32_t)(i + 1);
    }
}

/* Adds item (pos, origin) to s unless it is there. */
static void set_add(const gbnf_oracle *g, earley_set *s, uint32_t pos, uint32_t origin)
{
    if (2 * (s->n + 1) > s->table_cap)
        set_rehash(s);
    size_t h = item_hash(pos, origin, s->table_cap - 1);
    for (; s->table[h] != 0; h = (h + 1) & (s->table_cap - 1)) {
        const item *it = &s->items[s->table[h] - 1];
        if (it->pos == pos && it->origin == origin)
            return;
    }
    item it = {.pos = pos, .origin = origin, .next_wait = NONE};
    const symbol *next = next_symbol(g, pos);
    uint32_t index = (uint32_t)s->n;
    if (next != NULL && next->is_rule) {
        it.next_wait = s->wait_head[next->index];
        s->wait_head[next->index] = index;
    }
    PUSH(s->items, s->n, s->cap, it);
    s->table[h] = index + 1;
}

/* Predicts and completes in set i (sets[0, i] filled) until nothing new comes. */
static void set_close(const gbnf_oracle *g, earley_set *sets, uint32_t i)
{
    earley_set *s = &sets[i];
    for (size_t k = 0; k < s->n; k++) {
        item it = s->items[k];
        const symbol *next = next_symbol(g, it.pos);
        if (next == NULL) {
            /* Complete: advance every item of the origin set that waits on this rule. When
             * the origin is this set, items added later are handled by the prediction. */
            uint32_t lhs = g->prods[g->pos_prod[it.pos]].lhs;
            const earley_set *o = &sets[it.origin];
            for (uint32_t j = o->wait_head[lhs]; j != NONE; j = o->items[j].next_wait)
                set_add(g, s, o->items[j].pos + 1, o->items[j].origin);
        } else if (next->is_rule) {
            const rule *r = &g->rules[next->index];
            for (size_t q = 0; q < r->n_prods; q++)
                set_add(g, s, g->prods[r->prods[q]].first_pos, i);
            if (r->nullable) /* Aycock and Horspool */
                set_add(g, s, it.pos + 1, it.origin);
        }
    }
}

/* Scans from set i into set i + 1 (initialised) the items whose terminal admits some scalar
 * value in [lo, hi]. */
static void set_scan(const gbnf_oracle *g, earley_set *sets, uint32_t i, uint32_t lo,
                     uint32_t hi)
{
    const earley_set *s = &sets[i];
    for (size_t k = 0; k < s->n; k++) {
        const symbol *next = next_symbol(g, s->items[k].pos);
        if (next != NULL && !next->is_rule &&
            class_hits_scalar(&g->classes[next->index], lo, hi))
            set_add(g, &sets[i + 1], s->items[k].pos + 1, s->items[k].origin);
    }
}

/* Whether set s could scan some scalar value of [lo, hi]. */
static bool set_expects(const gbnf_oracle *g, const earley_set *s, uint32_t lo, uint32_t hi)
{
    for (size_t k = 0; k < s->n; k++) {
        const symbol *next = next_symbol(g, s->items[k].pos);
        if (next != NULL && !next->is_rule &&
            class_hits_scalar(&g->classes[next->index], lo, hi))
            return true;
    }
    return false;
}

/*
 * Fills sets[0, n] over the code points cps[0, n) (sets has n + 1 elements, each to be freed
 * by the caller whether or not it was filled). Returns false, leaving the rest unfilled, at
 * the first set that comes out empty.
 */
static bool chart_run(const gbnf_oracle *g, earley_set *sets, const uint32_t *cps, size_t n)
{
    for (size_t i = 0; i <= n; i++)
        set_init(g, &sets[i]);
    const rule *root = &g->rules[g->root];
    for (size_t q = 0; q < root->n_prods; q++)
        set_add(g, &sets[0], g->prods[root->prods[q]].first_pos, 0);
    for (uint32_t i = 0;; i++) {
        if (sets[i].n == 0)
            return false;
        set_close(g, sets, i);
        if (i == n)
            return true;
        set_scan(g, sets, i, cps[i], cps[i]);
    }
}

/* Decodes bytes[0, len) into *cps (malloc'd, *n code points). A truncated last character is
 * allowed when tail is not NULL: its range of completions goes to tail[0], tail[1] and
 * *has_tail is set. Returns false on invalid UTF-8 (*cps is then freed). */
static bool decode(const char *bytes, size_t len, uint32_t **cps, size_t *n, uint32_t *tail,
                   bool *has_tail)
{
    const uint8_t *b = (const uint8_t *)bytes;
    *cps = xcalloc(len, sizeof **cps);
    *n = 0;
    if (has_tail != NULL)
        *has_tail = false;
    for (size_t i = 0; i < len;) {
        size_t step;
        uint32_t lo, hi;
        utf8_status st = utf8_read(b + i, len - i, &step, &lo, &hi);
        if (st == UTF8_COMPLETE) {
            (*cps)[(*n)++] = lo;
            i += step;
        } else if (st == UTF8_TRUNCATED && tail != NULL) {
            tail[0] = lo;
            tail[1] = hi;
            *has_tail = true;
            return true; /* truncated means the bytes ran out */
        } else {
            free(*cps);
            *cps = NULL;
            return false;
        }
    }
    return true;
}

/* ---- the public calls ------------------------------------------------------------------------ */

bool gbnf_oracle_viable_prefix(const gbnf_oracle *g, const char *bytes, size_t len)
{
    uint32_t *cps, tail[2] = {0, 0};
    size_t n;
    bool has_tail;
    if (!decode(bytes, len, &cps, &n, tail, &has_tail))
        return false;
    earley_set *sets = xcalloc(n + 1, sizeof *sets);
    bool viable = chart_run(g, sets, cps, n);
    if (viable && has_tail)
        viable = set_expects(g, &sets[n], tail[0], tail[1]);
    for (size_t i = 0; i <= n; i++)
        set_free(&sets[i]);
    free(sets);
    free(cps);
    return viable;
}

bool gbnf_oracle_matches(const gbnf_oracle *g, const char *bytes, size_t len)
{
    uint32_t *cps;
    size_t n;
    if (!decode(bytes, len, &cps, &n, NULL, NULL))
        return false;
    earley_set *sets = xcalloc(n + 1, sizeof *sets);
    bool match = false;
    if (chart_run(g, sets, cps, n)) {
        for (size_t k = 0; k < sets[n].n && !match; k++) {
            const item *it = &sets[n].items[k];
            match = it->origin == 0 && next_symbol(g, it->pos) == NULL &&
                    g->prods[g->pos_prod[it->pos]].lhs == g->root;
        }
    }
    for (size_t i = 0; i <= n; i++)
        set_free(&sets[i]);
    free(sets);
    free(cps);
    return match;
}
