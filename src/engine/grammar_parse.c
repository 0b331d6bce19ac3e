/*
 * grammar_parse.c: a GBNF grammar's text compiled into rules of elements (graft__grammar,
 * grammar.h), the form the recognizer (grammar_match.c) walks.
 *
 * A recursive descent over the text. Each rule's body is a list of elements: character
 * classes, references to rules, and the ends of alternatives. A literal is one class per
 * code point; a class's ranges are sorted and merged when it is read, and a negated class is
 * stored as its complement, so every class is a plain list of disjoint ranges. A group becomes
 * a rule of its own, and so do repetitions: x* is a rule `r ::= x r |` (its reference last, so
 * the recognizer keeps no stack entry per repeat), x+ is x x*, x? is `r ::= x |`, and x{m,n}
 * is m copies of x then n - m nested optional ones. The rules made for a rule `name` are named
 * `name_N` ('_' is no name character, so none clashes). Once every rule is read, references
 * to rules never defined, a missing root and left recursion are refused.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

enum { MAX_CODE_POINT = 0x10FFFF, UNBOUNDED = -1 };

typedef struct elem_list {
    graft__grammar_elem *items;
    size_t n, cap;
} elem_list;

typedef struct rule {
    char *name;
    elem_list body;
    const char *used_at; /* the first reference, while not defined: NULL */
    bool defined;
    uint32_t made;       /* the rules made for this one so far */
} rule;

typedef struct parser {
    const char *begin, *p, *end;
    rule *rules;
    size_t n_rules, cap_rules;
    graft__grammar_range *ranges;
    size_t n_ranges, cap_ranges;
    size_t n_elems; /* in every rule's body, for the limit */
    unsigned depth; /* groups open */
    char **errmsg;
    int status;
} parser;

static bool fail(parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(parser *ps, const char *at, const char *fmt, ...)
{
    if (ps->status != GRAFT_OK)
        return false;
    unsigned line = 1, column = 1;
    for (const char *q = ps->begin; q < at; q++) {
        column = *q == '\n' ? 1 : column + 1;
        line += *q == '\n';
    }
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ps->status = graft__errmsg(ps->errmsg, GRAFT_EINVAL, "grammar: line %u, column %u: %s",
                               line, column, what);
    return false;
}

static bool no_memory(parser *ps)
{
    if (ps->status == GRAFT_OK)
        ps->status = graft__errmsg(ps->errmsg, GRAFT_ENOMEM, "grammar: out of memory");
    return false;
}

static bool push(parser *ps, elem_list *list, uint32_t kind, uint32_t a, uint32_t n)
{
    if (ps->n_elems >= GRAFT__GRAMMAR_MAX_ELEMS)
        return fail(ps, ps->p, "the grammar compiles to more than %d elements",
                    GRAFT__GRAMMAR_MAX_ELEMS);
    graft__grammar_elem *items =
        graft__grow_array(list->items, list->n, &list->cap, sizeof *items, 16);
    if (items == NULL)
        return no_memory(ps);
    list->items = items;
    items[list->n++] = (graft__grammar_elem){.kind = kind, .a = a, .n = n};
    ps->n_elems++;
    return true;
}

/* The index of the rule named name[0, len), added (not yet defined) when missing; -1 when
 * memory runs out. */
static long find_rule(parser *ps, const char *name, size_t len)
{
    for (size_t i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i].name) == len && memcmp(ps->rules[i].name, name, len) == 0)
            return (long)i;
    rule *rules = graft__grow_array(ps->rules, ps->n_rules, &ps->cap_rules, sizeof *rules, 16);
    char *copy = rules != NULL ? graft__strndup(name, len) : NULL;
    if (rules != NULL)
        ps->rules = rules;
    if (copy == NULL) {
        no_memory(ps);
        return -1;
    }
    rules[ps->n_rules] = (rule){.name = copy};
    return (long)ps->n_rules++;
}

/* A new rule for a group or repetition inside rule `owner`: owner's name, '_', a number. */
static long made_rule(parser *ps, size_t owner)
{
    char name[160];
    const char *base = ps->rules[owner].name;
    size_t base_len = strcspn(base, "_");
    snprintf(name, sizeof name, "%.*s_%u", (int)(base_len < 100 ? base_len : 100), base,
             ++ps->rules[owner].made);
    long r = find_rule(ps, name, strlen(name));
    if (r >= 0)
        ps->rules[r].defined = true;
    return r;
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-';
}

/* Spaces, tabs and comments; line breaks too where newline_ok. */
static void skip_space(parser *ps, bool newline_ok)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r')))
            ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
                ps->p++;
        else
            break;
    }
}

/* The code point of a UTF-8 character at ps->p (strict), advancing past it. */
static bool read_utf8(parser *ps, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    uint32_t c = s[0], need, min;
    if (c < 0x80) {
        need = 0, min = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 1, min = 0x80, c &= 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, min = 0x800, c &= 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, min = 0x10000, c &= 0x07;
    } else {
        return fail(ps, ps->p, "invalid UTF-8");
    }
    if (left <= need)
        return fail(ps, ps->p, "invalid UTF-8");
    for (uint32_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return fail(ps, ps->p, "invalid UTF-8");
        c = c << 6 | (s[i] & 0x3F);
    }
    if (c < min || c > MAX_CODE_POINT || (c >= 0xD800 && c <= 0xDFFF))
        return fail(ps, ps->p, "invalid UTF-8");
    ps->p += need + 1;
    *cp = c;
    return true;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static bool read_char(parser *ps, uint32_t *cp)
{
    if (*ps->p != '\\')
        return read_utf8(ps, cp);
    const char *at = ps->p++;
    if (ps->p >= ps->end)
        return fail(ps, at, "a '\\' ends the text");
    char c = *ps->p++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits > 0) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++, ps->p++) {
            int d = ps->p < ps->end ? graft__hex_digit((unsigned char)*ps->p) : -1;
            if (d < 0)
                return fail(ps, at, "'\\%c' needs %d hex digits", c, digits);
            v = v << 4 | (uint32_t)d;
        }
        if (v > MAX_CODE_POINT)
            return fail(ps, at, "'\\%c' escapes U+%X, beyond U+10FFFF", c, (unsigned)v);
        *cp = v;
        return true;
    }
    static const char plain[] = "\\\"[]", named[] = "ntr", codes[] = "\n\t\r";
    const char *q = c != '\0' ? strchr(named, c) : NULL;
    if (q != NULL)
        *cp = (uint32_t)(unsigned char)codes[q - named];
    else if (c != '\0' && strchr(plain, c) != NULL)
        *cp = (uint32_t)(unsigned char)c;
    else
        return fail(ps, at, "unknown escape '\\%c'", c);
    return true;
}

static int by_lo(const void *a, const void *b)
{
    const graft__grammar_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends ranges raw[0, n) sorted and merged (their complement where negated) to the
 * grammar's ranges, and a class element of them to list. Sorts raw in place. */
static bool add_class(parser *ps, elem_list *list, graft__grammar_range *raw, size_t n,
                      bool negated)
{
    if (n > 1)
        qsort(raw, n, sizeof *raw, by_lo);
    size_t merged = 0;
    for (size_t i = 0; i < n; i++) {
        if (merged > 0 && raw[i].lo <= raw[merged - 1].hi + 1) {
            if (raw[i].hi > raw[merged - 1].hi)
                raw[merged - 1].hi = raw[i].hi;
        } else {
            raw[merged++] = raw[i];
        }
    }
    size_t first = ps->n_ranges;
    uint32_t next = 0; /* negated: the first code point not yet covered */
    for (size_t i = 0; i <= merged; i++) {
        graft__grammar_range r;
        if (!negated && i == merged)
            break;
        if (!negated) {
            r = raw[i];
        } else {
            uint32_t lo = next, hi = i < merged ? raw[i].lo : MAX_CODE_POINT + 1;
            next = i < merged ? raw[i].hi + 1 : 0;
            if (hi <= lo)
                continue;
            r = (graft__grammar_range){lo, hi - 1};
        }
        graft__grammar_range *ranges = graft__grow_array(ps->ranges, ps->n_ranges,
                                                         &ps->cap_ranges, sizeof *ranges, 64);
        if (ranges == NULL)
            return no_memory(ps);
        ps->ranges = ranges;
        ranges[ps->n_ranges++] = r;
    }
    return push(ps, list, GRAFT__GRAMMAR_CLASS, (uint32_t)first,
                (uint32_t)(ps->n_ranges - first));
}

static bool parse_literal(parser *ps, elem_list *list)
{
    const char *at = ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        graft__grammar_range r;
        if (!read_char(ps, &r.lo))
            return false;
        r.hi = r.lo;
        if (!add_class(ps, list, &r, 1, false))
            return false;
    }
    if (ps->p >= ps->end)
        return fail(ps, at, "the string is not closed");
    ps->p++;
    return true;
}

static bool parse_class(parser *ps, elem_list *list)
{
    const char *at = ps->p++;
    bool negated = ps->p < ps->end && *ps->p == '^';
    ps->p += negated;
    graft__grammar_range *raw = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    while (ok && ps->p < ps->end && *ps->p != ']') {
        graft__grammar_range r;
        const char *item = ps->p;
        ok = read_char(ps, &r.lo);
        r.hi = r.lo;
        if (ok && ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            ok = read_char(ps, &r.hi) &&
                 (r.hi >= r.lo || fail(ps, item, "the range's end is below its start"));
        }
        graft__grammar_range *grown = ok ? graft__grow_array(raw, n, &cap, sizeof *raw, 8)
                                         : NULL;
        if (ok && grown == NULL)
            ok = no_memory(ps);
        if (ok) {
            raw = grown;
            raw[n++] = r;
        }
    }
    if (ok && ps->p >= ps->end)
        ok = fail(ps, at, "the class is not closed");
    if (ok) {
        ps->p++;
        ok = add_class(ps, list, raw, n, negated);
    }
    graft__free(raw);
    return ok;
}

/* A count of {m,n}: digits, at most GRAFT__GRAMMAR_MAX_REPEAT. */
static bool parse_count(parser *ps, long *out)
{
    const char *at = ps->p;
    long v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GRAFT__GRAMMAR_MAX_REPEAT)
            return fail(ps, at, "a repetition count above %d", GRAFT__GRAMMAR_MAX_REPEAT);
    }
    *out = ps->p > at ? v : UNBOUNDED;
    return true;
}

/* The bounds of * + ? {m} {m,} {m,n} {,n} at ps->p. */
static bool parse_bounds(parser *ps, bool nested, long *min, long *max)
{
    const char *at = ps->p;
    char c = *ps->p++;
    if (c != '{') {
        *min = c == '+';
        *max = c == '?' ? 1 : UNBOUNDED;
        return true;
    }
    skip_space(ps, nested);
    if (!parse_count(ps, min))
        return false;
    skip_space(ps, nested);
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, nested);
        if (!parse_count(ps, max))
            return false;
        skip_space(ps, nested);
        if (*min == UNBOUNDED)
            *min = 0;
    } else if (*min == UNBOUNDED) {
        return fail(ps, at, "'{' needs a count");
    } else {
        *max = *min;
    }
    if (ps->p >= ps->end || *ps->p != '}')
        return fail(ps, at, "'{' is not closed by '}'");
    ps->p++;
    if (*max != UNBOUNDED && *max < *min)
        return fail(ps, at, "{%ld,%ld}: the most is below the least", *min, *max);
    return true;
}

static bool append(parser *ps, elem_list *list, const graft__grammar_elem *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!push(ps, list, items[i].kind, items[i].a, items[i].n))
            return false;
    return true;
}

/* Rule r's body: sym, then a reference to rule `then` (if not negative), or nothing. */
static bool optional_rule(parser *ps, long r, const graft__grammar_elem *sym, size_t n,
                          long then)
{
    elem_list body = {0};
    bool ok = append(ps, &body, sym, n) &&
              (then < 0 || push(ps, &body, GRAFT__GRAMMAR_REF, (uint32_t)then, 0)) &&
              push(ps, &body, GRAFT__GRAMMAR_ALT, 0, 0) &&
              push(ps, &body, GRAFT__GRAMMAR_END, 0, 0);
    if (!ok) {
        graft__free(body.items);
        return false;
    }
    ps->rules[r].body = body;
    return true;
}

/* Replaces the symbol list[from, n) with its repetition from min to max times (an empty
 * symbol, such as "", repeated is itself). */
static bool repeat(parser *ps, elem_list *list, size_t from, size_t owner, long min, long max)
{
    size_t n = list->n - from;
    if (n == 0)
        return true;
    graft__grammar_elem *sym = graft__malloc(n * sizeof *sym);
    if (sym == NULL)
        return no_memory(ps);
    memcpy(sym, list->items + from, n * sizeof *sym);
    ps->n_elems -= n;
    list->n = from;
    bool ok = true;
    for (long i = 0; ok && i < min; i++)
        ok = append(ps, list, sym, n);
    long next = -1; /* the rule of the optional copies that follow */
    if (ok && max == UNBOUNDED) {
        next = made_rule(ps, owner);
        ok = next >= 0 && optional_rule(ps, next, sym, n, next);
    }
    for (long i = min; ok && max != UNBOUNDED && i < max; i++) {
        long r = made_rule(ps, owner);
        ok = r >= 0 && optional_rule(ps, r, sym, n, next);
        next = r;
    }
    if (ok && next >= 0)
        ok = push(ps, list, GRAFT__GRAMMAR_REF, (uint32_t)next, 0);
    graft__free(sym);
    return ok;
}

static bool parse_alternates(parser *ps, elem_list *list, size_t owner, bool nested);

/* A group's alternatives, as a rule of its own referred to from list. */
static bool parse_group(parser *ps, elem_list *list, size_t owner)
{
    const char *at = ps->p++;
    if (ps->depth >= GRAFT__GRAMMAR_MAX_NESTING)
        return fail(ps, at, "groups nest more than %d deep", GRAFT__GRAMMAR_MAX_NESTING);
    long r = made_rule(ps, owner);
    if (r < 0)
        return false;
    ps->depth++;
    skip_space(ps, true);
    elem_list body = {0};
    bool ok = parse_alternates(ps, &body, owner, true);
    ps->depth--;
    if (ok && (ps->p >= ps->end || *ps->p != ')'))
        ok = fail(ps, at, "the group is not closed by ')'");
    if (!ok) {
        graft__free(body.items);
        return false;
    }
    ps->p++;
    ps->rules[r].body = body;
    return push(ps, list, GRAFT__GRAMMAR_REF, (uint32_t)r, 0);
}

static bool parse_name_ref(parser *ps, elem_list *list)
{
    const char *name = ps->p;
    while (ps->p < ps->end && is_word(*ps->p))
        ps->p++;
    long r = find_rule(ps, name, (size_t)(ps->p - name));
    if (r < 0)
        return false;
    if (!ps->rules[r].defined && ps->rules[r].used_at == NULL)
        ps->rules[r].used_at = name;
    return push(ps, list, GRAFT__GRAMMAR_REF, (uint32_t)r, 0);
}

/* A sequence of elements, up to '|', ')', the end of the rule or of the text. */
static bool parse_sequence(parser *ps, elem_list *list, size_t owner, bool nested)
{
    size_t last = SIZE_MAX; /* where the last symbol begins in list */
    while (ps->p < ps->end) {
        char c = *ps->p;
        size_t start = list->n;
        bool ok;
        if (c == '"') {
            ok = parse_literal(ps, list);
        } else if (c == '[') {
            ok = parse_class(ps, list);
        } else if (c == '.') {
            graft__grammar_range any = {0, MAX_CODE_POINT};
            ps->p++;
            ok = add_class(ps, list, &any, 1, false);
        } else if (is_word(c)) {
            ok = parse_name_ref(ps, list);
        } else if (c == '(') {
            ok = parse_group(ps, list, owner);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            long min = 0, max = 0;
            if (last == SIZE_MAX)
                return fail(ps, ps->p, "'%c' has nothing before it to repeat", c);
            ok = parse_bounds(ps, nested, &min, &max) &&
                 repeat(ps, list, last, owner, min, max);
            start = last;
        } else if (c == '<') {
            return fail(ps, ps->p, "token references (<...>) are not supported");
        } else {
            break;
        }
        if (!ok)
            return false;
        last = start;
        skip_space(ps, nested);
    }
    return true;
}

static bool parse_alternates(parser *ps, elem_list *list, size_t owner, bool nested)
{
    if (!parse_sequence(ps, list, owner, nested))
        return false;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        skip_space(ps, true);
        if (!push(ps, list, GRAFT__GRAMMAR_ALT, 0, 0) ||
            !parse_sequence(ps, list, owner, nested))
            return false;
    }
    return push(ps, list, GRAFT__GRAMMAR_END, 0, 0);
}

static bool parse_rule(parser *ps)
{
    const char *name = ps->p;
    while (ps->p < ps->end && is_word(*ps->p))
        ps->p++;
    size_t len = (size_t)(ps->p - name);
    if (len == 0)
        return fail(ps, name, "expected a rule name");
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
        return fail(ps, ps->p, "expected '::=' after the rule name '%.*s'",
                    (int)(len < 64 ? len : 64), name);
    ps->p += 3;
    long r = find_rule(ps, name, len);
    if (r < 0)
        return false;
    if (ps->rules[r].defined)
        return fail(ps, name, "rule '%.*s' is defined twice", (int)(len < 64 ? len : 64),
                    name);
    ps->rules[r].defined = true;
    skip_space(ps, true);
    elem_list body = {0};
    if (!parse_alternates(ps, &body, (size_t)r, false)) {
        graft__free(body.items);
        return false;
    }
    ps->rules[r].body = body;
    if (ps->p < ps->end && *ps->p == '\r')
        ps->p++;
    if (ps->p < ps->end && *ps->p != '\n')
        return fail(ps, ps->p, "unexpected '%c'", *ps->p);
    skip_space(ps, true);
    return true;
}

/* ---- the compiled form ---------------------------------------------------------------- */

void graft__grammar_free(graft__grammar *g)
{
    graft__free(g);
}

/* The grammar in one block (the struct, then its arrays of 4-byte items): the rules' bodies
 * one after another, where each alternative begins, and the classes' ranges. */
static int flatten(parser *ps, uint32_t root, graft__grammar **out)
{
    size_t n_alts = 0, n_elems = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        n_elems += ps->rules[r].body.n;
        for (size_t i = 0; i < ps->rules[r].body.n; i++)
            n_alts += ps->rules[r].body.items[i].kind != GRAFT__GRAMMAR_REF &&
                      ps->rules[r].body.items[i].kind != GRAFT__GRAMMAR_CLASS;
    }
    graft__grammar *g = graft__malloc(sizeof *g + n_elems * sizeof *g->elems +
                                      ps->n_ranges * sizeof *g->ranges +
                                      (n_alts + ps->n_rules + 1) * sizeof(uint32_t));
    *out = g;
    if (g == NULL)
        return GRAFT_ENOMEM;
    *g = (graft__grammar){.n_rules = (uint32_t)ps->n_rules, .root = root,
                          .n_ranges = (uint32_t)ps->n_ranges};
    g->elems = (graft__grammar_elem *)(g + 1); /* the struct's size keeps them aligned */
    g->ranges = (graft__grammar_range *)(g->elems + n_elems);
    g->alt_at = (uint32_t *)(g->ranges + ps->n_ranges);
    g->rule_alts = g->alt_at + n_alts;
    if (ps->n_ranges > 0)
        memcpy(g->ranges, ps->ranges, ps->n_ranges * sizeof *g->ranges);
    uint32_t at = 0, alts = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const elem_list *body = &ps->rules[r].body;
        g->rule_alts[r] = alts;
        g->alt_at[alts++] = at;
        for (size_t i = 0; i < body->n; i++) {
            g->elems[at++] = body->items[i];
            if (body->items[i].kind == GRAFT__GRAMMAR_ALT)
                g->alt_at[alts++] = at;
        }
    }
    g->rule_alts[ps->n_rules] = alts;
    g->n_elems = at;
    return GRAFT_OK;
}

/* Whether each rule can match the empty text. */
static void find_nullable(const graft__grammar *g, bool *nullable)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            for (uint32_t k = g->rule_alts[r]; !nullable[r] && k < g->rule_alts[r + 1]; k++) {
                const graft__grammar_elem *e = &g->elems[g->alt_at[k]];
                while (e->kind == GRAFT__GRAMMAR_REF && nullable[e->a])
                    e++;
                if (e->kind == GRAFT__GRAMMAR_END || e->kind == GRAFT__GRAMMAR_ALT)
                    changed = nullable[r] = true;
            }
        }
    }
}

/* A rule that can reach itself before any character (-1: none): a depth-first walk of the
 * rules each alternative may begin with (those behind nullable ones included). */
static long find_left_recursion(const graft__grammar *g, const bool *nullable, uint8_t *color,
                                uint32_t *stack, uint32_t *edge)
{
    for (uint32_t start = 0; start < g->n_rules; start++) {
        if (color[start] != 0)
            continue;
        uint32_t depth = 0;
        stack[depth] = start, edge[depth] = 0, color[start] = 1;
        for (;;) {
            uint32_t r = stack[depth];
            /* The next reference among r's alternatives' beginnings, edge counting them. */
            long next = -1;
            uint32_t seen = 0;
            for (uint32_t k = g->rule_alts[r]; next < 0 && k < g->rule_alts[r + 1]; k++) {
                for (const graft__grammar_elem *e = &g->elems[g->alt_at[k]];
                     e->kind == GRAFT__GRAMMAR_REF; e++) {
                    if (seen++ == edge[depth]) {
                        next = e->a;
                        break;
                    }
                    if (!nullable[e->a])
                        break;
                }
            }
            if (next < 0) {
                color[r] = 2;
                if (depth == 0)
                    break;
                depth--;
                continue;
            }
            edge[depth]++;
            if (color[next] == 1)
                return next;
            if (color[next] == 0) {
                depth++;
                stack[depth] = (uint32_t)next, edge[depth] = 0, color[next] = 1;
            }
        }
    }
    return -1;
}

static int check_left_recursion(parser *ps, const graft__grammar *g)
{
    bool *nullable = graft__calloc(g->n_rules, sizeof *nullable);
    uint8_t *color = graft__calloc(g->n_rules, sizeof *color);
    uint32_t *stack = graft__malloc(g->n_rules * sizeof *stack);
    uint32_t *edge = graft__malloc(g->n_rules * sizeof *edge);
    int rc = GRAFT_ENOMEM;
    if (nullable != NULL && color != NULL && stack != NULL && edge != NULL) {
        find_nullable(g, nullable);
        long r = find_left_recursion(g, nullable, color, stack, edge);
        const char *name = r >= 0 ? ps->rules[r].name : "";
        rc = r < 0 ? GRAFT_OK
                   : graft__errmsg(ps->errmsg, GRAFT_EINVAL,
                                   "grammar: rule '%.*s' is left-recursive: it, or a group or "
                                   "repetition in it, can reach itself before matching a "
                                   "character (a repetition of what can be empty does too)",
                                   (int)strcspn(name, "_"), name);
    }
    graft__free(nullable);
    graft__free(color);
    graft__free(stack);
    graft__free(edge);
    return rc;
}

/* The rules read checked: each used one defined, root there (*root). */
static int check_rules(parser *ps, uint32_t *root)
{
    for (size_t r = 0; r < ps->n_rules; r++) {
        if (!ps->rules[r].defined) {
            fail(ps, ps->rules[r].used_at, "rule '%s' is used but not defined",
                 ps->rules[r].name);
            return ps->status;
        }
    }
    for (size_t r = 0; r < ps->n_rules; r++) {
        if (strcmp(ps->rules[r].name, "root") == 0) {
            *root = (uint32_t)r;
            return GRAFT_OK;
        }
    }
    return graft__errmsg(ps->errmsg, GRAFT_EINVAL, "grammar: there is no rule 'root'");
}

int graft__grammar_compile(const char *text, size_t len, graft__grammar **out, char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    parser ps = {.begin = text, .p = text, .end = text + len, .errmsg = errmsg};
    skip_space(&ps, true);
    while (ps.p < ps.end && parse_rule(&ps))
        ;
    graft__grammar *g = NULL;
    uint32_t root = 0;
    int rc = ps.status;
    if (rc == GRAFT_OK)
        rc = check_rules(&ps, &root);
    if (rc == GRAFT_OK)
        rc = flatten(&ps, root, &g);
    if (rc == GRAFT_OK)
        rc = check_left_recursion(&ps, g);
    if (rc == GRAFT_ENOMEM && (errmsg == NULL || *errmsg == NULL))
        graft__errmsg(errmsg, rc, "grammar: out of memory");
    for (size_t r = 0; r < ps.n_rules; r++) {
        graft__free(ps.rules[r].name);
        graft__free(ps.rules[r].body.items);
    }
    graft__free(ps.rules);
    graft__free(ps.ranges);
    if (rc != GRAFT_OK) {
        graft__grammar_free(g);
        return rc;
    }
    *out = g;
    return GRAFT_OK;
}

int graft_grammar_check(const char *grammar, size_t len, char **errmsg)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    if (grammar == NULL)
        return GRAFT_EINVAL;
    graft__grammar *g = NULL;
    int rc = graft__grammar_compile(grammar, len, &g, errmsg);
    graft__grammar_free(g);
    return rc;
}
