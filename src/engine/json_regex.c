/*
 * json_regex.c: a JSON Schema `pattern` compiled to a deterministic automaton over code
 * points (json_output.h says which syntax and what a match is).
 *
 * Three stages, each a plain array: the pattern parses into a tree (character sets, concatenation,
 * alternation, repetition); the tree becomes a Thompson NFA (a repetition {n,m} is m copies
 * of its operand); subset construction makes the DFA. Its input symbols are the classes of code
 * points no set of the pattern tells apart: the intervals between consecutive bounds of
 * the sets' ranges, so a code point finds its class by binary search. Search semantics are
 * built in: an alternative not anchored at the start begins with "any code points", one not
 * anchored at the end ends with them. Last, the states from which no accepting state can
 * be reached are dropped: a step into one answers GRAFT__REGEX_DEAD, which is what lets the
 * recognizer refuse a character as soon as no continuation can match.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

enum {
    UNIVERSE_END = 0x110000,
    MAX_NFA_STATES = 30000,
    MAX_CLASSES = 4096,
    MAX_WORK = 50000000,        /* subset construction's inner steps */
    MAX_GROUP_DEPTH = 256,
    MAX_LENGTH_PAIRS = 1 << 22  /* (state, characters) pairs a length bound may take */
};

/* A raw automaton's missing transition. */
#define NO_STATE UINT32_MAX

typedef struct range {
    uint32_t lo, hi; /* inclusive */
} range;

typedef enum node_kind { N_EMPTY, N_SET, N_CAT, N_ALT, N_REPEAT } node_kind;

/* A tree node. N_SET: ranges [a, a + b) of the pool; N_CAT, N_ALT: children a and b;
 * N_REPEAT: child a, min to max times (max -1: no bound). */
typedef struct node {
    node_kind kind;
    uint32_t a, b;
    int32_t min, max;
} node;

typedef enum nfa_kind { S_EPS, S_SET, S_MATCH } nfa_kind;

typedef struct nfa_state {
    nfa_kind kind;
    int32_t out[2]; /* S_EPS: up to two epsilon edges (-1: none); S_SET: out[0] */
    uint32_t first, count; /* S_SET: its ranges in the pool, then its class intervals */
} nfa_state;

typedef struct compiler {
    const char *p, *end, *begin;
    int groups; /* open groups (the parse recurses into each) */
    char **errmsg;
    int status;
    node *nodes;
    size_t n_nodes, cap_nodes;
    range *ranges;
    size_t n_ranges, cap_ranges;
    nfa_state *nfa;
    size_t n_nfa, cap_nfa;
} compiler;

struct graft__json_regex {
    uint32_t *bounds;  /* (n_classes + 1) class i is [bounds[i], bounds[i + 1]) */
    uint32_t n_classes;
    uint16_t ascii_class[128]; /* the class of each ASCII code point, without the search */
    uint16_t *next;    /* (n_states x n_classes) */
    uint8_t *accepts;  /* (n_states) */
    uint16_t n_states, start;
};

/* ---- errors ---------------------------------------------------------------------------- */

static int refuse(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(compiler *c, const char *fmt, ...)
{
    if (c->status != GRAFT_OK)
        return -1;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->status = graft__errmsg(c->errmsg, GRAFT_EINVAL, "pattern: %s at byte %zu", what,
                              (size_t)(c->p - c->begin));
    return -1;
}

static int no_memory(compiler *c)
{
    if (c->status == GRAFT_OK)
        c->status = graft__errmsg(c->errmsg, GRAFT_ENOMEM, "pattern: out of memory");
    return -1;
}

/* ---- character sets ---------------------------------------------------------------------- */

static int add_range(compiler *c, uint32_t lo, uint32_t hi)
{
    range *grown = graft__grow_array(c->ranges, c->n_ranges, &c->cap_ranges, sizeof *grown, 64);
    if (grown == NULL)
        return no_memory(c);
    c->ranges = grown;
    c->ranges[c->n_ranges++] = (range){lo, hi};
    return 0;
}

/* Adds [lo, hi] without the surrogates, which no string holds. */
static int add_chars(compiler *c, uint32_t lo, uint32_t hi)
{
    if (lo < 0xD800 && add_range(c, lo, hi < 0xD800 ? hi : 0xD7FF) < 0)
        return -1;
    if (hi > 0xDFFF && add_range(c, lo > 0xE000 ? lo : 0xE000, hi) < 0)
        return -1;
    return 0;
}

static int by_lo(const void *x, const void *y)
{
    const range *a = x, *b = y;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Sorts and merges the ranges from `first` on; their new count. */
static uint32_t normalize(compiler *c, size_t first)
{
    size_t n = c->n_ranges - first, k = 0;
    if (n == 0)
        return 0;
    range *r = c->ranges + first;
    qsort(r, n, sizeof *r, by_lo);
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi)
                r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    c->n_ranges = first + k;
    return (uint32_t)k;
}

/* Replaces the normalized ranges from `first` on by their complement in the code points. */
static uint32_t negate(compiler *c, size_t first)
{
    size_t n = c->n_ranges - first;
    uint32_t next = 0;
    for (size_t i = 0; i < n; i++) {
        range r = c->ranges[first + i];
        if (r.lo > next && add_chars(c, next, r.lo - 1) < 0)
            return 0;
        next = r.hi + 1;
    }
    if (next < UNIVERSE_END && add_chars(c, next, UNIVERSE_END - 1) < 0)
        return 0;
    if (n > 0)
        memmove(c->ranges + first, c->ranges + first + n,
                (c->n_ranges - first - n) * sizeof *c->ranges);
    c->n_ranges -= n;
    return normalize(c, first);
}

static int new_node(compiler *c, node n)
{
    node *grown = graft__grow_array(c->nodes, c->n_nodes, &c->cap_nodes, sizeof *grown, 64);
    if (grown == NULL)
        return no_memory(c);
    c->nodes = grown;
    c->nodes[c->n_nodes] = n;
    return (int)c->n_nodes++;
}

/* A set node of the ranges from `first` on (normalized here). */
static int set_node(compiler *c, size_t first)
{
    if (c->status != GRAFT_OK)
        return -1;
    uint32_t count = normalize(c, first);
    return new_node(c, (node){N_SET, (uint32_t)first, count, 0, 0});
}

static int pair(compiler *c, node_kind kind, int a, int b)
{
    if (a < 0 || b < 0)
        return -1;
    return new_node(c, (node){kind, (uint32_t)a, (uint32_t)b, 0, 0});
}

/* ---- the parse ---------------------------------------------------------------------------- */

static bool at_end(const compiler *c)
{
    return c->p == c->end;
}

static int hex_value(compiler *c, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, c->p++) {
        int d = at_end(c) ? -1 : graft__hex_digit((unsigned char)*c->p);
        if (d < 0)
            return refuse(c, "an escape needs %d hexadecimal digits", digits);
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* The code point of \u escapes at c->p (after "\u"): HHHH, a pair of them, or {H...}. */
static int unicode_escape(compiler *c, uint32_t *cp)
{
    if (!at_end(c) && *c->p == '{') {
        c->p++;
        uint32_t v = 0;
        int n = 0;
        for (; !at_end(c) && *c->p != '}'; c->p++, n++) {
            int d = graft__hex_digit((unsigned char)*c->p);
            if (d < 0)
                return refuse(c, "'\\u{...}' needs hexadecimal digits");
            v = v * 16 + (uint32_t)d;
            if (v >= UNIVERSE_END)
                return refuse(c, "'\\u{...}' must name a code point up to 10FFFF");
        }
        if (at_end(c) || n == 0 || v >= UNIVERSE_END || (v >= 0xD800 && v <= 0xDFFF))
            return refuse(c, "'\\u{...}' must name a code point that is not a surrogate");
        c->p++;
        *cp = v;
        return 0;
    }
    if (hex_value(c, 4, cp) < 0)
        return -1;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        return refuse(c, "a low surrogate escape stands alone");
    if (*cp < 0xD800 || *cp > 0xDBFF)
        return 0;
    uint32_t low = 0;
    if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
        return refuse(c, "a high surrogate escape must be followed by a low one");
    c->p += 2;
    if (hex_value(c, 4, &low) < 0)
        return -1;
    if (low < 0xDC00 || low > 0xDFFF)
        return refuse(c, "a high surrogate escape must be followed by a low one");
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
    return 0;
}

/* \d \D \w \W \s \S: adds the class's ranges; false when `e` is none of them. */
static bool class_escape(compiler *c, char e, int *rc)
{
    static const range digits[] = {{'0', '9'}};
    static const range word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const range space[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                  {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    const range *r;
    size_t n;
    switch (e | 0x20) {
    case 'd': r = digits, n = 1; break;
    case 'w': r = word, n = 4; break;
    case 's': r = space, n = sizeof space / sizeof space[0]; break;
    default: return false;
    }
    size_t first = c->n_ranges;
    *rc = 0;
    for (size_t i = 0; i < n && *rc == 0; i++)
        *rc = add_range(c, r[i].lo, r[i].hi);
    if (*rc == 0 && e >= 'A' && e <= 'Z') { /* \D \W \S: the complement */
        normalize(c, first);
        negate(c, first);
        *rc = c->status == GRAFT_OK ? 0 : -1;
    }
    return true;
}

/* One character after a backslash (c->p past it) that stands for one code point. */
static int char_escape(compiler *c, uint32_t *cp)
{
    if (at_end(c))
        return refuse(c, "the pattern ends with a backslash");
    char e = *c->p++;
    switch (e) {
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'x': return hex_value(c, 2, cp);
    case 'u': return unicode_escape(c, cp);
    case '0':
        if (!at_end(c) && *c->p >= '0' && *c->p <= '9')
            return refuse(c, "octal escapes and backreferences are not supported");
        *cp = 0;
        return 0;
    default:
        break;
    }
    if ((unsigned char)e < 0x80 && e > ' ' && e < 0x7F && !(e >= '0' && e <= '9') &&
        !(e >= 'A' && e <= 'Z') && !(e >= 'a' && e <= 'z')) {
        *cp = (uint32_t)e;
        return 0;
    }
    c->p--;
    if (e >= '1' && e <= '9')
        return refuse(c, "backreferences are not supported");
    return refuse(c, "'\\%c' is not supported", e);
}

/* One literal code point of the pattern's UTF-8. */
static int literal(compiler *c, uint32_t *cp)
{
    size_t n = graft__utf8_decode(c->p, (size_t)(c->end - c->p), cp);
    if (n == 0)
        return refuse(c, "the pattern is not valid UTF-8");
    c->p += n;
    return 0;
}

/* A class member's code point (c->p at it), or a class escape added (*was_class). */
static int class_atom(compiler *c, uint32_t *cp, bool *was_class)
{
    *was_class = false;
    if (*c->p != '\\')
        return literal(c, cp);
    c->p++;
    int rc = 0;
    if (!at_end(c) && class_escape(c, *c->p, &rc)) {
        c->p++;
        *was_class = true;
        return rc;
    }
    if (!at_end(c) && *c->p == 'b')
        return refuse(c, "'\\b' is not supported");
    return char_escape(c, cp);
}

/* [...] (c->p past '['). */
static int parse_class(compiler *c)
{
    bool negated = !at_end(c) && *c->p == '^';
    c->p += negated;
    size_t first = c->n_ranges;
    while (!at_end(c) && *c->p != ']') {
        uint32_t lo, hi;
        bool lo_class, hi_class;
        if (class_atom(c, &lo, &lo_class) < 0)
            return -1;
        if (!lo_class && c->end - c->p >= 2 && c->p[0] == '-' && c->p[1] != ']') {
            c->p++;
            if (class_atom(c, &hi, &hi_class) < 0)
                return -1;
            if (hi_class)
                return refuse(c, "a range must end with a character");
            if (hi < lo)
                return refuse(c, "a range's end comes before its start");
            if (add_chars(c, lo, hi) < 0)
                return -1;
        } else if (!lo_class && add_chars(c, lo, lo) < 0) {
            return -1;
        }
    }
    if (at_end(c))
        return refuse(c, "a '[' is not closed");
    c->p++;
    normalize(c, first);
    if (negated && (negate(c, first), c->status != GRAFT_OK))
        return -1;
    return set_node(c, first);
}

static int parse_alternation(compiler *c, bool top);

static int parse_atom(compiler *c)
{
    char ch = *c->p;
    size_t first = c->n_ranges;
    uint32_t cp;
    int rc = 0;
    switch (ch) {
    case '(': {
        if (++c->groups > MAX_GROUP_DEPTH)
            return refuse(c, "groups nest more than %d deep", MAX_GROUP_DEPTH);
        c->p++;
        if (!at_end(c) && *c->p == '?') {
            if (c->end - c->p < 2 || c->p[1] != ':')
                return refuse(c, "lookaround and named groups are not supported");
            c->p += 2;
        }
        int inner = parse_alternation(c, false);
        if (inner < 0)
            return -1;
        if (at_end(c) || *c->p != ')')
            return refuse(c, "a '(' is not closed");
        c->p++;
        c->groups--;
        return inner;
    }
    case '[':
        c->p++;
        return parse_class(c);
    case '.':
        c->p++;
        if (add_chars(c, 0, '\n' - 1) < 0 || add_chars(c, '\n' + 1, '\r' - 1) < 0 ||
            add_chars(c, '\r' + 1, 0x2027) < 0 || add_chars(c, 0x202A, UNIVERSE_END - 1) < 0)
            return -1;
        return set_node(c, first);
    case '\\':
        c->p++;
        if (!at_end(c) && class_escape(c, *c->p, &rc)) {
            c->p++;
            return rc < 0 ? -1 : set_node(c, first);
        }
        if (!at_end(c) && (*c->p == 'b' || *c->p == 'B'))
            return refuse(c, "'\\%c' is not supported", *c->p);
        if (char_escape(c, &cp) < 0 || add_chars(c, cp, cp) < 0)
            return -1;
        return set_node(c, first);
    case '^':
    case '$':
        return refuse(c, "'%c' is supported only at the ends of the pattern or of its "
                         "top-level alternatives", ch);
    case '*':
    case '+':
    case '?':
    case '{':
        return refuse(c, "'%c' repeats nothing", ch);
    default:
        if (literal(c, &cp) < 0 || add_chars(c, cp, cp) < 0)
            return -1;
        return set_node(c, first);
    }
}

static int parse_count(compiler *c, int32_t *out)
{
    int32_t v = 0;
    const char *from = c->p;
    for (; !at_end(c) && *c->p >= '0' && *c->p <= '9'; c->p++)
        if ((v = v * 10 + (*c->p - '0')) > GRAFT__REGEX_MAX_REPEAT)
            return refuse(c, "a repetition bound is above %d", GRAFT__REGEX_MAX_REPEAT);
    if (c->p == from)
        return refuse(c, "a '{' that does not begin a repetition {n}, {n,} or {n,m}");
    *out = v;
    return 0;
}

/* A quantifier after an atom, if any: *min and *max (-1: none); false when there is none. */
static int parse_quantifier(compiler *c, int32_t *min, int32_t *max, bool *found)
{
    *found = !at_end(c) && (*c->p == '*' || *c->p == '+' || *c->p == '?' || *c->p == '{');
    if (!*found)
        return 0;
    char q = *c->p++;
    if (q == '*' || q == '+' || q == '?') {
        *min = q == '+' ? 1 : 0;
        *max = q == '?' ? 1 : -1;
    } else {
        if (parse_count(c, min) < 0)
            return -1;
        *max = *min;
        if (!at_end(c) && *c->p == ',') {
            c->p++;
            *max = -1;
            if (!at_end(c) && *c->p != '}' && parse_count(c, max) < 0)
                return -1;
        }
        if (at_end(c) || *c->p != '}')
            return refuse(c, "a '{' that does not begin a repetition {n}, {n,} or {n,m}");
        c->p++;
        if (*max >= 0 && *max < *min)
            return refuse(c, "a repetition {n,m} with m below n");
    }
    if (!at_end(c) && *c->p == '?') /* lazy: the same strings */
        c->p++;
    if (!at_end(c) && (*c->p == '*' || *c->p == '+' || *c->p == '?' || *c->p == '{'))
        return refuse(c, "'%c' repeats a repetition", *c->p);
    return 0;
}

/* A sequence of quantified atoms, up to '|', ')', the end, or (top) a final '$'. */
static int parse_sequence(compiler *c, bool top, bool *anchored_end)
{
    int seq = new_node(c, (node){N_EMPTY, 0, 0, 0, 0});
    *anchored_end = false;
    while (seq >= 0 && !at_end(c) && *c->p != '|' && *c->p != ')') {
        if (top && *c->p == '$' && (c->p + 1 == c->end || c->p[1] == '|')) {
            c->p++;
            *anchored_end = true;
            break;
        }
        int atom = parse_atom(c);
        int32_t min = 0, max = 0;
        bool found;
        if (atom < 0 || parse_quantifier(c, &min, &max, &found) < 0)
            return -1;
        if (found)
            atom = new_node(c, (node){N_REPEAT, (uint32_t)atom, 0, min, max});
        seq = pair(c, N_CAT, seq, atom);
    }
    return seq;
}

/* A pattern that matches any code points. */
static int any_string(compiler *c)
{
    size_t first = c->n_ranges;
    if (add_chars(c, 0, UNIVERSE_END - 1) < 0)
        return -1;
    int set = set_node(c, first);
    return set < 0 ? -1 : new_node(c, (node){N_REPEAT, (uint32_t)set, 0, 0, -1});
}

/* Alternatives up to ')' or the end; at the top, each with its own anchors. */
static int parse_alternation(compiler *c, bool top)
{
    int result = -1;
    for (;;) {
        bool anchored_start = top && !at_end(c) && *c->p == '^', anchored_end;
        c->p += anchored_start;
        int alt = parse_sequence(c, top, &anchored_end);
        if (top && alt >= 0 && !anchored_start)
            alt = pair(c, N_CAT, any_string(c), alt);
        if (top && alt >= 0 && !anchored_end)
            alt = pair(c, N_CAT, alt, any_string(c));
        if (alt < 0)
            return -1;
        result = result < 0 ? alt : pair(c, N_ALT, result, alt);
        if (at_end(c) || *c->p != '|')
            return result;
        c->p++;
    }
}

/* ---- the NFA --------------------------------------------------------------------------- */

static int new_state(compiler *c, nfa_kind kind)
{
    if (c->n_nfa == MAX_NFA_STATES)
        return refuse(c, "the pattern is too large (above %d automaton states before "
                         "determinisation)", MAX_NFA_STATES);
    nfa_state *grown = graft__grow_array(c->nfa, c->n_nfa, &c->cap_nfa, sizeof *grown, 64);
    if (grown == NULL)
        return no_memory(c);
    c->nfa = grown;
    c->nfa[c->n_nfa] = (nfa_state){kind, {-1, -1}, 0, 0};
    return (int)c->n_nfa++;
}

static void add_edge(compiler *c, int from, int to)
{
    nfa_state *s = &c->nfa[from];
    s->out[s->out[0] < 0 ? 0 : 1] = to;
}

/* Builds node n's automaton from state `in` (given one more edge); returns its end, a new
 * state with no edges, or -1. */
static int emit(compiler *c, uint32_t n, int in)
{
    int x = new_state(c, S_EPS);
    if (x < 0)
        return -1;
    add_edge(c, in, x);
    const node nd = c->nodes[n];
    switch (nd.kind) {
    case N_EMPTY:
        return x;
    case N_SET: {
        int s = new_state(c, S_SET), t = new_state(c, S_EPS);
        if (s < 0 || t < 0)
            return -1;
        c->nfa[s].first = nd.a;
        c->nfa[s].count = nd.b;
        add_edge(c, x, s);
        c->nfa[s].out[0] = t;
        return t;
    }
    case N_CAT: {
        int m = emit(c, nd.a, x);
        return m < 0 ? -1 : emit(c, nd.b, m);
    }
    case N_ALT: {
        int ea = emit(c, nd.a, x), eb = ea < 0 ? -1 : emit(c, nd.b, x);
        int t = eb < 0 ? -1 : new_state(c, S_EPS);
        if (t < 0)
            return -1;
        add_edge(c, ea, t);
        add_edge(c, eb, t);
        return t;
    }
    case N_REPEAT:
        break;
    }
    int cur = x;
    for (int32_t i = 0; i < nd.min && cur >= 0; i++)
        cur = emit(c, nd.a, cur);
    int t = cur < 0 ? -1 : new_state(c, S_EPS);
    if (t < 0)
        return -1;
    if (nd.max < 0) { /* a loop: cur -> l, l -> child -> l, l -> t */
        int l = new_state(c, S_EPS);
        if (l < 0)
            return -1;
        add_edge(c, cur, l);
        int e = emit(c, nd.a, l);
        if (e < 0)
            return -1;
        add_edge(c, e, l);
        add_edge(c, l, t);
        return t;
    }
    for (int32_t i = nd.min; i < nd.max; i++) { /* each further copy may be skipped */
        add_edge(c, cur, t);
        if ((cur = emit(c, nd.a, cur)) < 0)
            return -1;
    }
    add_edge(c, cur, t);
    return t;
}

/* ---- the DFA --------------------------------------------------------------------------- */

typedef struct dfa_builder {
    compiler *c;
    size_t words;       /* 64-bit words of a state set */
    uint64_t *sets;     /* (n_states x words) the NFA states (sets and the match) of each */
    uint32_t *next;     /* (n_states x n_classes) */
    size_t n_states, cap_states;
    int32_t *table;     /* hash table of state ids (-1: empty) */
    size_t table_cap;
    int32_t *stack;     /* (n_nfa) the closure's work list */
    uint64_t *seen;     /* (words) the closure's visited states, epsilon ones included */
    uint32_t *bounds, n_classes;
    int32_t match;
    long work;
} dfa_builder;

static uint64_t hash_set(const uint64_t *set, size_t words)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < words; i++)
        h = (h ^ set[i]) * 1099511628211u;
    return h;
}

/* Adds the closure of state s under epsilon edges to set (its set and match states). */
static void closure(dfa_builder *b, int32_t s, uint64_t *set)
{
    size_t top = 0;
    b->stack[top++] = s;
    while (top > 0) {
        int32_t t = b->stack[--top];
        if (b->seen[t / 64] >> (t % 64) & 1)
            continue;
        b->seen[t / 64] |= 1ull << (t % 64);
        const nfa_state *st = &b->c->nfa[t];
        if (st->kind != S_EPS) {
            set[t / 64] |= 1ull << (t % 64);
            continue;
        }
        for (int k = 0; k < 2; k++)
            if (st->out[k] >= 0)
                b->stack[top++] = st->out[k];
    }
}

/* The DFA state of `set` (in the scratch row past the last state): found, or added. */
static int32_t intern(dfa_builder *b)
{
    uint64_t *set = b->sets + b->n_states * b->words;
    size_t mask = b->table_cap - 1;
    for (size_t i = hash_set(set, b->words) & mask;; i = (i + 1) & mask) {
        int32_t id = b->table[i];
        if (id < 0) {
            if (b->n_states == GRAFT__REGEX_MAX_STATES) {
                refuse(b->c, "the pattern needs more than %d automaton states",
                       GRAFT__REGEX_MAX_STATES);
                return -1;
            }
            b->table[i] = (int32_t)b->n_states;
            return (int32_t)b->n_states++;
        }
        if (memcmp(b->sets + (size_t)id * b->words, set, b->words * sizeof *set) == 0)
            return id;
    }
}

/* Makes room for one more state's set (the scratch row) and transitions. */
static bool room(dfa_builder *b)
{
    if (b->n_states + 1 < b->cap_states)
        return true;
    size_t cap = b->cap_states * 2;
    uint64_t *sets = graft__realloc_array(b->sets, cap, b->words * sizeof *sets);
    if (sets != NULL)
        b->sets = sets;
    uint32_t *next = graft__realloc_array(b->next, cap, b->n_classes * sizeof *next);
    if (next != NULL)
        b->next = next;
    if (sets == NULL || next == NULL)
        return false;
    b->cap_states = cap;
    return true;
}

static int by_value(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* The classes: the intervals between the distinct bounds of every set's ranges; each set
 * state's ranges become class intervals (count and first then index them in bounds). */
static int make_classes(dfa_builder *b)
{
    compiler *c = b->c;
    size_t n = 2;
    for (size_t i = 0; i < c->n_nfa; i++)
        n += c->nfa[i].kind == S_SET ? 2 * (size_t)c->nfa[i].count : 0;
    b->bounds = graft__malloc(n * sizeof *b->bounds);
    if (b->bounds == NULL)
        return no_memory(c);
    size_t k = 0;
    b->bounds[k++] = 0;
    b->bounds[k++] = UNIVERSE_END;
    for (size_t i = 0; i < c->n_nfa; i++)
        for (uint32_t r = 0; c->nfa[i].kind == S_SET && r < c->nfa[i].count; r++) {
            b->bounds[k++] = c->ranges[c->nfa[i].first + r].lo;
            b->bounds[k++] = c->ranges[c->nfa[i].first + r].hi + 1;
        }
    qsort(b->bounds, k, sizeof *b->bounds, by_value);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m == 0 || b->bounds[i] != b->bounds[m - 1])
            b->bounds[m++] = b->bounds[i];
    if (m - 1 > MAX_CLASSES)
        return refuse(c, "the pattern's character sets split the code points into more than "
                         "%d classes", MAX_CLASSES);
    b->n_classes = (uint32_t)(m - 1);
    return 0;
}

/* The class of code point cp (below UNIVERSE_END). */
static uint32_t class_of(const uint32_t *bounds, uint32_t n_classes, uint32_t cp)
{
    uint32_t lo = 0, hi = n_classes; /* bounds[lo] <= cp < bounds[hi] */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (bounds[mid] <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Fills re's ASCII shortcut from its bounds. */
static void index_ascii(graft__json_regex *re)
{
    for (uint32_t cp = 0; cp < 128; cp++)
        re->ascii_class[cp] = (uint16_t)class_of(re->bounds, re->n_classes, cp);
}

/* Fills the transitions of DFA state d; -1 on failure. */
static int expand(dfa_builder *b, size_t d)
{
    compiler *c = b->c;
    for (uint32_t k = 0; k < b->n_classes; k++) {
        if (!room(b))
            return no_memory(c);
        uint64_t *target = b->sets + b->n_states * b->words;
        const uint64_t *set = b->sets + d * b->words;
        memset(target, 0, b->words * sizeof *target);
        memset(b->seen, 0, b->words * sizeof *b->seen);
        bool any = false;
        for (size_t w = 0; w < b->words; w++)
            for (uint64_t bits = set[w]; bits != 0; bits &= bits - 1) {
                int32_t s = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
                const nfa_state *st = &c->nfa[s];
                if (st->kind != S_SET)
                    continue;
                const range *r = c->ranges + st->first;
                uint32_t lo = b->bounds[k];
                bool in = false;
                for (uint32_t i = 0; i < st->count && !in; i++)
                    in = r[i].lo <= lo && lo <= r[i].hi;
                b->work += st->count;
                if (in) {
                    closure(b, st->out[0], target);
                    any = true;
                }
            }
        if (b->work > MAX_WORK)
            return refuse(c, "the pattern is too complex to compile");
        int32_t id = any ? intern(b) : -1;
        if (any && id < 0)
            return -1;
        b->next[d * b->n_classes + k] = id < 0 ? NO_STATE : (uint32_t)id;
    }
    return 0;
}

/* An automaton before its dead states go: next[d * n_classes + k] is a state or NO_STATE. */

typedef struct raw_dfa {
    uint32_t n_states, n_classes;
    const uint32_t *next;
    const uint8_t *accepts;
} raw_dfa;

/* Which states can reach an accepting one: live[d]. */
static void mark_live(const raw_dfa *a, uint8_t *live)
{
    memcpy(live, a->accepts, a->n_states);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t d = 0; d < a->n_states; d++)
            for (uint32_t k = 0; k < a->n_classes && !live[d]; k++) {
                uint32_t t = a->next[d * a->n_classes + k];
                if (t != NO_STATE && live[t])
                    live[d] = changed = true;
            }
    }
}

/* out: a's live states renumbered (state 0 is a's start), a step out of them DEAD. */
static int compact(const raw_dfa *a, graft__json_regex *out)
{
    uint8_t *live = graft__malloc(a->n_states + 1);
    uint16_t *id = graft__malloc((a->n_states + 1) * sizeof *id);
    out->next = graft__malloc(((size_t)a->n_states * a->n_classes + 1) * sizeof *out->next);
    out->accepts = graft__malloc((size_t)a->n_states + 1);
    bool ok = live != NULL && id != NULL && out->next != NULL && out->accepts != NULL;
    if (ok) {
        mark_live(a, live);
        uint16_t n = 0;
        for (size_t d = 0; d < a->n_states; d++)
            id[d] = live[d] ? n++ : GRAFT__REGEX_DEAD;
        out->n_states = n;
        out->start = id[0];
        out->n_classes = a->n_classes;
        for (size_t d = 0; d < a->n_states; d++) {
            if (!live[d])
                continue;
            out->accepts[id[d]] = a->accepts[d];
            for (uint32_t k = 0; k < a->n_classes; k++) {
                uint32_t t = a->next[d * a->n_classes + k];
                out->next[(size_t)id[d] * a->n_classes + k] = t == NO_STATE ? GRAFT__REGEX_DEAD
                                                                        : id[t];
            }
        }
    }
    graft__free(live);
    graft__free(id);
    return ok ? GRAFT_OK : GRAFT_ENOMEM;
}

static int determinize(compiler *c, int32_t start, int32_t match, graft__json_regex *out)
{
    dfa_builder b = {.c = c, .match = match, .words = (c->n_nfa + 63) / 64, .cap_states = 16};
    if (make_classes(&b) < 0) {
        graft__free(b.bounds);
        return -1;
    }
    b.table_cap = 2 * (size_t)GRAFT__REGEX_MAX_STATES;
    b.sets = graft__calloc(b.cap_states * b.words, sizeof *b.sets);
    b.next = graft__malloc(b.cap_states * b.n_classes * sizeof *b.next);
    b.table = graft__malloc(b.table_cap * sizeof *b.table);
    b.stack = graft__malloc((2 * c->n_nfa + 1) * sizeof *b.stack);
    b.seen = graft__malloc(b.words * sizeof *b.seen);
    int rc = -1;
    if (b.sets && b.next && b.table && b.stack && b.seen) {
        memset(b.table, 0xFF, b.table_cap * sizeof *b.table);
        memset(b.seen, 0, b.words * sizeof *b.seen);
        closure(&b, start, b.sets);
        intern(&b);
        rc = 0;
        for (size_t d = 0; d < b.n_states && rc == 0; d++)
            rc = expand(&b, d);
        uint8_t *accepts = rc == 0 ? graft__malloc(b.n_states) : NULL;
        if (rc == 0 && accepts == NULL)
            rc = no_memory(c);
        for (size_t d = 0; rc == 0 && d < b.n_states; d++)
            accepts[d] = b.sets[d * b.words + (size_t)match / 64] >> (match % 64) & 1;
        raw_dfa raw = {(uint32_t)b.n_states, b.n_classes, b.next, accepts};
        if (rc == 0 && compact(&raw, out) != GRAFT_OK)
            rc = no_memory(c);
        if (rc == 0) {
            out->bounds = b.bounds;
            b.bounds = NULL;
            index_ascii(out);
        }
        graft__free(accepts);
    } else {
        no_memory(c);
    }
    graft__free(b.bounds);
    graft__free(b.sets);
    graft__free(b.next);
    graft__free(b.table);
    graft__free(b.stack);
    graft__free(b.seen);
    return rc;
}

/* ---- the interface ----------------------------------------------------------------------- */

void graft__json_regex_free(graft__json_regex *re)
{
    if (re == NULL)
        return;
    graft__free(re->bounds);
    graft__free(re->next);
    graft__free(re->accepts);
    graft__free(re);
}

int graft__json_regex_compile(const char *pattern, size_t len, graft__json_regex **out,
                              char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    compiler c = {.p = pattern, .end = pattern + len, .begin = pattern, .errmsg = errmsg};
    graft__json_regex *re = graft__calloc(1, sizeof *re);
    if (re == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "pattern: out of memory");
    int root = parse_alternation(&c, true);
    if (root >= 0 && !at_end(&c))
        refuse(&c, "a ')' closes no group");
    int start = c.status == GRAFT_OK ? new_state(&c, S_EPS) : -1;
    int end = start < 0 ? -1 : emit(&c, (uint32_t)root, start);
    int match = end < 0 ? -1 : new_state(&c, S_MATCH);
    if (match >= 0) {
        add_edge(&c, end, match);
        determinize(&c, start, match, re);
    }
    graft__free(c.nodes);
    graft__free(c.ranges);
    graft__free(c.nfa);
    if (c.status != GRAFT_OK) {
        graft__json_regex_free(re);
        return c.status;
    }
    *out = re;
    return GRAFT_OK;
}

int graft__json_regex_bound_length(const graft__json_regex *re, uint32_t min_chars,
                                   uint32_t max_chars, graft__json_regex **out, char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    uint32_t cap = max_chars != UINT32_MAX ? max_chars : min_chars, n_classes = re->n_classes;
    size_t pairs = (size_t)(re->n_states ? re->n_states : 1) * ((size_t)cap + 1);
    if (pairs > MAX_LENGTH_PAIRS)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "minLength / maxLength: %u characters with this pattern need too "
                             "large an automaton", (unsigned)cap);
    /* product states: (pattern state a, characters k capped at cap), numbered as found */
    uint32_t *id = graft__malloc(pairs * sizeof *id);
    uint32_t *pair_of = graft__malloc(pairs * sizeof *pair_of);
    uint32_t *next = graft__malloc(pairs * n_classes * sizeof *next);
    uint8_t *accepts = graft__malloc(pairs);
    graft__json_regex *r = graft__calloc(1, sizeof *r);
    int rc = id && pair_of && next && accepts && r ? GRAFT_OK : GRAFT_ENOMEM;
    if (rc == GRAFT_OK)
        r->bounds = graft__malloc(((size_t)n_classes + 1) * sizeof *r->bounds);
    if (rc == GRAFT_OK && r->bounds == NULL)
        rc = GRAFT_ENOMEM;
    uint32_t n = 0;
    if (rc == GRAFT_OK) {
        memcpy(r->bounds, re->bounds, ((size_t)n_classes + 1) * sizeof *r->bounds);
        memcpy(r->ascii_class, re->ascii_class, sizeof r->ascii_class);
        memset(id, 0xFF, pairs * sizeof *id);
        pair_of[n++] = 0; /* the start: re's start with no characters (DEAD: no string) */
        accepts[0] = 0;
        for (uint32_t k = 0; k < n_classes; k++)
            next[k] = NO_STATE;
    }
    for (uint32_t d = 0; rc == GRAFT_OK && re->start != GRAFT__REGEX_DEAD && d < n; d++) {
        uint32_t a = d == 0 ? re->start : pair_of[d] / (cap + 1);
        uint32_t chars = d == 0 ? 0 : pair_of[d] % (cap + 1);
        accepts[d] = re->accepts[a] && chars >= min_chars;
        for (uint32_t k = 0; k < n_classes; k++) {
            uint16_t to = re->next[(size_t)a * n_classes + k];
            uint32_t more = chars + 1;
            if (max_chars == UINT32_MAX && more > cap)
                more = cap;
            if (to == GRAFT__REGEX_DEAD || more > cap) {
                next[(size_t)d * n_classes + k] = NO_STATE;
                continue;
            }
            uint32_t key = (uint32_t)to * (cap + 1) + more;
            if (id[key] == NO_STATE) {
                id[key] = n;
                pair_of[n++] = key;
            }
            next[(size_t)d * n_classes + k] = id[key];
        }
    }
    if (rc == GRAFT_OK && n > GRAFT__REGEX_MAX_LENGTH_STATES)
        rc = graft__errmsg(errmsg, GRAFT_EINVAL,
                           "minLength / maxLength: %u characters with this pattern need too "
                           "large an automaton", (unsigned)cap);
    raw_dfa raw = {n, n_classes, next, accepts};
    if (rc == GRAFT_OK)
        rc = compact(&raw, r);
    if (rc == GRAFT_ENOMEM)
        graft__errmsg(errmsg, GRAFT_ENOMEM, "minLength / maxLength: out of memory");
    graft__free(id);
    graft__free(pair_of);
    graft__free(next);
    graft__free(accepts);
    if (rc != GRAFT_OK) {
        graft__json_regex_free(r);
        return rc;
    }
    *out = r;
    return GRAFT_OK;
}

bool graft__json_regex_any_in(const graft__json_regex *re, uint16_t state, uint32_t lo,
                              uint32_t hi)
{
    if (hi >= UNIVERSE_END)
        hi = UNIVERSE_END - 1;
    if (lo > hi)
        return false;
    uint32_t first = class_of(re->bounds, re->n_classes, lo);
    uint32_t last = class_of(re->bounds, re->n_classes, hi);
    for (uint32_t k = first; k <= last; k++)
        if (re->next[(size_t)state * re->n_classes + k] != GRAFT__REGEX_DEAD)
            return true;
    return false;
}

uint16_t graft__json_regex_start(const graft__json_regex *re)
{
    return re->start;
}

uint16_t graft__json_regex_step(const graft__json_regex *re, uint16_t state, uint32_t cp)
{
    if (cp >= UNIVERSE_END)
        return GRAFT__REGEX_DEAD;
    uint32_t k = cp < 128 ? re->ascii_class[cp] : class_of(re->bounds, re->n_classes, cp);
    return re->next[(size_t)state * re->n_classes + k];
}


bool graft__json_regex_accepts(const graft__json_regex *re, uint16_t state)
{
    return re->accepts[state] != 0;
}
