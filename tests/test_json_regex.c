/*
 * test_json_regex.c: the `pattern` regular expressions compiled to automata over code points
 * (graft__json_regex_*, json_output.h), checked against PCRE2 and against expectations written
 * here from the header, without reference to json_regex.c.
 *
 * The header fixes the language: the ECMA-262 subset it lists, matched with search semantics
 * (an alternative without ^ may begin anywhere, one without $ end anywhere). So:
 *   - hand cases (pattern, string, matches?) cover every element of the syntax; each
 *     expectation is also held to PCRE2, so a wrong one fails too; every escaped ASCII
 *     punctuation character, outside a class and inside one, matches itself alone; NUL and
 *     the ends of the code point range; compile reads exactly len bytes;
 *   - hand cases of liveness give the character at which step must first return DEAD (held
 *     to a brute-force search with PCRE2), and patterns that match nothing start DEAD;
 *   - patterns outside the subset or beyond the bounds are refused with GRAFT_EINVAL and a
 *     message (errmsg NULL is fine too), promptly; repeats up to 1000 count exactly;
 *     patterns the header leaves open (Annex B forms, empty classes, lone surrogates, bounds
 *     it does not name) are only held to "refused, or else right", each in a child process
 *     so that a crash or a sanitizer's report names its pattern; groups nested 100000 deep
 *     are compiled or refused, never a crash (also in a child);
 *   - random patterns over a small alphabet (every construct, bounded size) are fed strings
 *     drawn to match them, their mutations and random ones: after every prefix, accepts agrees
 *     with PCRE2 (the pattern matches somewhere in the prefix) and step returned DEAD exactly
 *     when no continuation of the prefix matches (the liveness oracle below); a DEAD one is
 *     cross-checked by a brute-force search for a short completion; after the prefixes of
 *     some strings, steps on the code points at the edges of the pattern's ranges (lo - 1, lo,
 *     hi, hi + 1) are checked the same way; for a quarter of the patterns, a breadth-first
 *     walk of the automaton over the alphabet checks every transition it finds, and that
 *     every string found to reach a state agrees with PCRE2 on whether it matches;
 *   - step and accepts are pure: the same state and code point give the same state again, and
 *     replaying a string later, or interleaved with another pattern, gives the same states.
 * What a test holds is freed after it even when a check fails (release_held), so that the
 * ASan build's leak report is about the code under test.
 *
 * The reference matcher is PCRE2 (8-bit, PCRE2_UTF, no PCRE2_UCP, PCRE2_DOLLAR_ENDONLY), run on
 * a translation of the pattern made by translate() here:
 *   - `.` becomes the class of every code point but \n \r U+2028 U+2029 (PCRE2's `.` has its
 *     own newline convention);
 *   - every class [...] / [^...] and every class escape (\d \D \w \W \s \S, with ECMA's lists,
 *     not PCRE2's, whose \s differs and whose \v is a class) is computed here as a set of code
 *     point ranges and written as an explicit class of \x{..} ranges (surrogates left out; an
 *     empty set becomes (?:(?!)), which matches nothing);
 *   - every character escape (\t \n \r \f \v \0 \xHH \uHHHH, a \u surrogate pair, \u{..}, an
 *     escaped punctuation character) becomes \x{..};
 *   - everything else (literal characters, groups, (?:, |, the quantifiers and their lazy
 *     forms, ^ first and $ last) means the same in PCRE2 and is copied.
 * PCRE2_DOLLAR_ENDONLY keeps $ from matching before a final \n; without PCRE2_UCP, PCRE2 and
 * ECMA agree that \d and \w are ASCII (and they are translated anyway).
 * The optimisations that could cut a partial match short are off (PCRE2_NO_AUTO_POSSESS,
 * PCRE2_NO_START_OPTIMIZE, PCRE2_NO_DOTSTAR_ANCHOR), and a match that runs past a modest
 * backtracking limit is redone by pcre2_dfa_match, which does not backtrack.
 *
 * The liveness oracle. A prefix p is live when some string p.s matches, i.e. some top-level
 * alternative A matches a substring of p.s, starting at 0 when A has ^ and ending at the end
 * when A has $. If some alternative without ^ matches any string w at all, then p.w (or p.w
 * followed by anything, without $) matches for every p: every prefix is live. Otherwise every
 * alternative that matches anything has ^, so p is live iff, for some such A, p is a prefix of
 * a string of L(A) (A with or without $) or has a prefix in L(A) (A without $): exactly what
 * PCRE2 reports, anchored at 0 with PCRE2_PARTIAL_HARD, as a match or a partial match, provided
 * every subpattern matches some string (a path that reaches the end of p can then always be
 * completed). The random patterns have no empty class, so every alternative matches something
 * and the oracle is exact; the hand cases with empty classes give their liveness by hand. The
 * empty prefix is live iff the pattern matches something, i.e. start is not DEAD. The brute
 * force search (completions of up to two characters of a small alphabet) is a one-sided check
 * of both the implementation and this oracle: a completion found means live.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "byte_buffer.h"
#include "json_oracle.h"
#include "graft.h"
#include "engine/json_output.h"

typedef graft_test_bytes bytes;

#define DEAD ((uint16_t)GRAFT__REGEX_DEAD)

/* ---- the PRNG ----------------------------------------------------------------------------- */

/* The seed is fixed (GRAFT_TEST_SEED overrides it) and printed with a failure. */
static uint64_t seed = 0x6a736f6e5f726567u;

static void seed_rng(uint64_t stream)
{
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

/* ---- reporting ---------------------------------------------------------------------------- */

static void print_cps(const uint32_t *s, size_t n)
{
    print_error("[");
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= 0x21 && s[i] < 0x7F && s[i] != '\'')
            print_error("%s'%c'", i ? " " : "", (char)s[i]);
        else
            print_error("%sU+%04" PRIX32, i ? " " : "", s[i]);
    }
    print_error("] (%zu code points)", n);
}

/* Fails the test after printing what, the pattern and the string (s may be NULL). */
static void fail_on(const char *what, const char *pat, size_t plen, const uint32_t *s, size_t n)
{
    print_error("%s (seed 0x%" PRIx64 "), pattern ", what, seed);
    graft_test_print_literal((const uint8_t *)pat, plen);
    if (s != NULL) {
        print_error(", string ");
        print_cps(s, n);
    }
    print_error("\n");
    fail();
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

/* Decodes well-formed UTF-8 into code points; returns the count. */
static size_t utf8_decode(const char *str, size_t len, uint32_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)str[i];
        uint32_t cp;
        size_t k;
        if (c < 0x80)
            cp = c, k = 1;
        else if (c < 0xE0)
            cp = c & 0x1F, k = 2;
        else if (c < 0xF0)
            cp = c & 0x0F, k = 3;
        else
            cp = c & 0x07, k = 4;
        assert_true(i + k <= len);
        for (size_t j = 1; j < k; j++)
            cp = (cp << 6) | ((unsigned char)str[i + j] & 0x3F);
        assert_true(n < cap);
        out[n++] = cp;
        i += k;
    }
    return n;
}

/* ---- sets of code points ------------------------------------------------------------------ */

#define SET_CAP 160
typedef struct {
    uint32_t lo[SET_CAP], hi[SET_CAP];
    size_t n;
} cpset;

static void set_add(cpset *s, uint32_t lo, uint32_t hi)
{
    assert_true(s->n < SET_CAP);
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->n++;
}

static void set_union(cpset *s, const cpset *t)
{
    for (size_t i = 0; i < t->n; i++)
        set_add(s, t->lo[i], t->hi[i]);
}

/* Sorts and merges the ranges. */
static void set_normalize(cpset *s)
{
    for (size_t i = 1; i < s->n; i++)
        for (size_t j = i; j > 0 && s->lo[j - 1] > s->lo[j]; j--) {
            uint32_t l = s->lo[j], h = s->hi[j];
            s->lo[j] = s->lo[j - 1], s->hi[j] = s->hi[j - 1];
            s->lo[j - 1] = l, s->hi[j - 1] = h;
        }
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (m > 0 && s->lo[i] <= s->hi[m - 1] + 1) {
            if (s->hi[i] > s->hi[m - 1])
                s->hi[m - 1] = s->hi[i];
        } else {
            s->lo[m] = s->lo[i], s->hi[m] = s->hi[i];
            m++;
        }
    }
    s->n = m;
}

static void set_complement(cpset *s)
{
    set_normalize(s);
    cpset c = {.n = 0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->lo[i] > next)
            set_add(&c, next, s->lo[i] - 1);
        next = s->hi[i] + 1;
    }
    if (next <= 0x10FFFF)
        set_add(&c, next, 0x10FFFF);
    *s = c;
}

static bool set_has(const cpset *s, uint32_t cp)
{
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->lo[i] && cp <= s->hi[i])
            return true;
    return false;
}

/* Whether the set holds a code point that is not a surrogate. */
static bool set_nonempty(const cpset *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->lo[i] < 0xD800 || s->hi[i] > 0xDFFF)
            return true;
    return false;
}

/* The class escapes, from the header: \d [0-9], \w [A-Za-z0-9_], \s ECMA's white space and
 * line terminators; the capitals are the complements. */
static void class_escape_set(char e, cpset *s)
{
    s->n = 0;
    switch (e) {
    case 'd': case 'D':
        set_add(s, '0', '9');
        break;
    case 'w': case 'W':
        set_add(s, '0', '9'), set_add(s, 'A', 'Z'), set_add(s, 'a', 'z'), set_add(s, '_', '_');
        break;
    default:
        set_add(s, 0x09, 0x0D), set_add(s, 0x20, 0x20), set_add(s, 0xA0, 0xA0);
        set_add(s, 0x1680, 0x1680), set_add(s, 0x2000, 0x200A), set_add(s, 0x2028, 0x2029);
        set_add(s, 0x202F, 0x202F), set_add(s, 0x205F, 0x205F), set_add(s, 0x3000, 0x3000);
        set_add(s, 0xFEFF, 0xFEFF);
        break;
    }
    set_normalize(s);
    if (e == 'D' || e == 'W' || e == 'S')
        set_complement(s);
}

/* ---- parsing the subset (for the translation and the generator) -------------------------- */

typedef struct {
    const char *p;
    size_t n, i;
} cursor;

static bool read_hex(cursor *c, size_t digits, uint32_t *v)
{
    *v = 0;
    for (size_t k = 0; k < digits; k++) {
        if (c->i >= c->n || graft_test_hex_digit(c->p[c->i]) < 0)
            return false;
        *v = *v * 16 + (uint32_t)graft_test_hex_digit(c->p[c->i++]);
    }
    return true;
}

static bool read_utf8(cursor *c, uint32_t *cp)
{
    if (c->i >= c->n)
        return false;
    unsigned char b = (unsigned char)c->p[c->i];
    size_t k = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (c->i + k > c->n)
        return false;
    utf8_decode(c->p + c->i, k, cp, 1);
    c->i += k;
    return true;
}

static bool is_ascii_punct(char ch)
{
    return (ch >= 0x21 && ch <= 0x2F) || (ch >= 0x3A && ch <= 0x40) ||
           (ch >= 0x5B && ch <= 0x60) || (ch >= 0x7B && ch <= 0x7E);
}

/* An escape, c at the character after the backslash: a class escape (*is_set, *set) or one
 * code point (*cp). False when outside the subset. */
static bool parse_escape(cursor *c, bool *is_set, cpset *set, uint32_t *cp)
{
    if (c->i >= c->n)
        return false;
    char e = c->p[c->i++];
    *is_set = false;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *is_set = true;
        class_escape_set(e, set);
        return true;
    case 't': *cp = 9; return true;
    case 'n': *cp = 10; return true;
    case 'v': *cp = 11; return true;
    case 'f': *cp = 12; return true;
    case 'r': *cp = 13; return true;
    case '0':
        *cp = 0;
        return !(c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9');
    case 'x':
        return read_hex(c, 2, cp);
    case 'u':
        if (c->i < c->n && c->p[c->i] == '{') {
            c->i++;
            size_t digits = 0;
            *cp = 0;
            while (c->i < c->n && graft_test_hex_digit(c->p[c->i]) >= 0) {
                *cp = *cp * 16 + (uint32_t)graft_test_hex_digit(c->p[c->i++]);
                if (*cp > 0x10FFFF)
                    return false;
                digits++;
            }
            if (digits == 0 || c->i >= c->n || c->p[c->i] != '}')
                return false;
            c->i++;
            return true;
        }
        if (!read_hex(c, 4, cp))
            return false;
        if (*cp >= 0xD800 && *cp <= 0xDBFF && c->i + 6 <= c->n && c->p[c->i] == '\\' &&
            c->p[c->i + 1] == 'u') {
            cursor d = *c;
            uint32_t lo;
            d.i += 2;
            if (read_hex(&d, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                *c = d;
            }
        }
        return true;
    default:
        *cp = (uint32_t)(unsigned char)e;
        return is_ascii_punct(e);
    }
}

/* A class, c at the character after '['; leaves c after ']'. */
static bool parse_class(cursor *c, cpset *out)
{
    bool neg = c->i < c->n && c->p[c->i] == '^';
    if (neg)
        c->i++;
    out->n = 0;
    for (;;) {
        if (c->i >= c->n)
            return false;
        if (c->p[c->i] == ']') {
            c->i++;
            break;
        }
        bool is_set = false;
        cpset s;
        uint32_t lo, hi;
        if (c->p[c->i] == '\\') {
            c->i++;
            if (!parse_escape(c, &is_set, &s, &lo))
                return false;
        } else if (!read_utf8(c, &lo))
            return false;
        if (is_set) {
            set_union(out, &s);
            continue;
        }
        if (c->i + 1 < c->n && c->p[c->i] == '-' && c->p[c->i + 1] != ']') {
            c->i++;
            if (c->p[c->i] == '\\') {
                c->i++;
                if (!parse_escape(c, &is_set, &s, &hi) || is_set)
                    return false;
            } else if (!read_utf8(c, &hi))
                return false;
            if (hi < lo)
                return false;
            set_add(out, lo, hi);
        } else
            set_add(out, lo, lo);
    }
    set_normalize(out);
    if (neg)
        set_complement(out);
    return true;
}

/* One atom that stands for a set of code points: a literal character, an escape, `.` or a
 * class. */
static bool parse_atom_set(cursor *c, cpset *out)
{
    uint32_t cp;
    out->n = 0;
    if (c->i >= c->n)
        return false;
    char ch = c->p[c->i];
    if (ch == '.') {
        c->i++;
        set_add(out, 0x0A, 0x0A), set_add(out, 0x0D, 0x0D), set_add(out, 0x2028, 0x2029);
        set_complement(out);
        return true;
    }
    if (ch == '[') {
        c->i++;
        return parse_class(c, out);
    }
    if (ch == '\\') {
        bool is_set;
        c->i++;
        if (!parse_escape(c, &is_set, out, &cp))
            return false;
        if (!is_set)
            set_add(out, cp, cp);
        return true;
    }
    if (!read_utf8(c, &cp))
        return false;
    set_add(out, cp, cp);
    return true;
}

/* ---- the translation for PCRE2 ------------------------------------------------------------ */

static void put_hex_cp(bytes *b, uint32_t cp)
{
    char t[16];
    snprintf(t, sizeof t, "\\x{%" PRIX32 "}", cp);
    graft_test_put_str(b, t);
}

static void emit_range(bytes *b, uint32_t lo, uint32_t hi)
{
    put_hex_cp(b, lo);
    if (hi > lo) {
        graft_test_put_str(b, "-");
        put_hex_cp(b, hi);
    }
}

static void emit_set(bytes *b, const cpset *s)
{
    if (!set_nonempty(s)) {
        graft_test_put_str(b, "(?:(?!))");
        return;
    }
    graft_test_put_str(b, "[");
    for (size_t i = 0; i < s->n; i++) { /* surrogates left out */
        if (s->lo[i] < 0xD800)
            emit_range(b, s->lo[i], s->hi[i] < 0xD7FF ? s->hi[i] : 0xD7FF);
        if (s->hi[i] > 0xDFFF)
            emit_range(b, s->lo[i] > 0xE000 ? s->lo[i] : 0xE000, s->hi[i]);
    }
    graft_test_put_str(b, "]");
}

/* The pattern for PCRE2 (out->n bytes, then a NUL); *has_empty when it has a class that
 * matches nothing. False when the pattern is outside what this translation knows. */
static bool translate(const char *pat, size_t len, bytes *out, bool *has_empty)
{
    cursor c = {pat, len, 0};
    out->n = 0;
    graft_test_put(out, "", 0);
    *has_empty = false;
    while (c.i < c.n) {
        char ch = c.p[c.i];
        if (ch == '.' || ch == '[' || ch == '\\') {
            cpset s;
            if (!parse_atom_set(&c, &s))
                return false;
            if (!set_nonempty(&s))
                *has_empty = true;
            if (s.n == 1 && s.lo[0] == s.hi[0] && set_nonempty(&s))
                put_hex_cp(out, s.lo[0]);
            else
                emit_set(out, &s);
        } else {
            graft_test_put_byte(out, (uint8_t)ch);
            c.i++;
        }
    }
    graft_test_put_byte(out, 0);
    out->n--;
    return true;
}

/* Whether some top-level alternative does not begin with ^. */
static bool some_alt_unanchored(const char *pat, size_t len)
{
    int depth = 0;
    bool in_class = false, at_alt_start = true;
    for (size_t i = 0; i < len; i++) {
        char ch = pat[i];
        if (at_alt_start && ch != '^')
            return true;
        at_alt_start = false;
        if (ch == '\\')
            i++;
        else if (in_class)
            in_class = ch != ']';
        else if (ch == '[')
            in_class = true;
        else if (ch == '(')
            depth++;
        else if (ch == ')')
            depth--;
        else if (ch == '|' && depth == 0)
            at_alt_start = true;
    }
    return at_alt_start; /* an empty last alternative */
}

/* ---- the oracle --------------------------------------------------------------------------- */

typedef struct {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    bool unanchored_alt; /* some top-level alternative without ^ */
    bool has_empty;      /* a class matches nothing: the liveness oracle is not exact */
    bytes subject;
} oracle;

/* The oracle of the test running (closed by release_held() when a check fails). */
static oracle the_oracle;
static bool the_oracle_open;

static void oracle_open(oracle *o, const char *pat, size_t len)
{
    bytes t = {0};
    memset(o, 0, sizeof *o);
    if (!translate(pat, len, &t, &o->has_empty)) {
        free(t.p);
        fail_on("the test cannot translate the pattern", pat, len, NULL, 0);
    }
    int err;
    PCRE2_SIZE off;
    o->code = pcre2_compile((PCRE2_SPTR)t.p, t.n,
                            PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_AUTO_POSSESS |
                                PCRE2_NO_START_OPTIMIZE | PCRE2_NO_DOTSTAR_ANCHOR,
                            &err, &off, NULL);
    if (o->code == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        print_error("PCRE2 refuses the translation %s: %s at %zu\n", (char *)t.p, (char *)msg,
                    (size_t)off);
        free(t.p);
        fail_on("the test's translation is wrong", pat, len, NULL, 0);
    }
    free(t.p);
    the_oracle_open = o == &the_oracle;
    o->md = pcre2_match_data_create_from_pattern(o->code, NULL);
    o->mc = pcre2_match_context_create(NULL);
    assert_non_null(o->md);
    assert_non_null(o->mc);
    pcre2_set_match_limit(o->mc, 50000); /* then pcre2_dfa_match, which does not backtrack */
    o->unanchored_alt = some_alt_unanchored(pat, len);
}

static void oracle_close(oracle *o)
{
    if (o == &the_oracle)
        the_oracle_open = false;
    pcre2_match_context_free(o->mc);
    pcre2_match_data_free(o->md);
    pcre2_code_free(o->code);
    free(o->subject.p);
}

/* PCRE2 on s[0..n) with options: true on a match or a partial one. */
static bool oracle_run(oracle *o, const uint32_t *s, size_t n, uint32_t options)
{
    o->subject.n = 0;
    graft_test_put(&o->subject, "", 0);
    for (size_t i = 0; i < n; i++)
        graft_test_put_utf8(&o->subject, s[i]);
    int rc = pcre2_match(o->code, o->subject.p, o->subject.n, 0, options, o->md, o->mc);
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT) {
        static int ws[20000];
        rc = pcre2_dfa_match(o->code, o->subject.p, o->subject.n, 0, options, o->md, NULL, ws,
                             sizeof ws / sizeof ws[0]);
    }
    if (rc >= 0 || rc == PCRE2_ERROR_PARTIAL)
        return true;
    if (rc != PCRE2_ERROR_NOMATCH)
        fail_msg("PCRE2 error %d", rc);
    return false;
}

/* Whether the pattern matches somewhere in s[0..n). */
static bool oracle_matches(oracle *o, const uint32_t *s, size_t n)
{
    return oracle_run(o, s, n, 0);
}

/* Whether some continuation of s[0..n) (n > 0) matches; exact when !o->has_empty (see the
 * comment at the top). */
static bool oracle_live(oracle *o, const uint32_t *s, size_t n)
{
    if (o->unanchored_alt)
        return true;
    return oracle_run(o, s, n, PCRE2_ANCHORED | PCRE2_PARTIAL_HARD);
}

/* The brute-force check: a completion of s[0..n) of at most two characters of a small
 * alphabet that matches. */
static const uint32_t brute_alphabet[] = {'a', 'b', 'c', '1', ' ', 0xE9, 0x1F600, '\n', '_'};
enum { N_BRUTE = sizeof brute_alphabet / sizeof brute_alphabet[0] };

static bool brute_completion(oracle *o, const uint32_t *s, size_t n)
{
    uint32_t t[72];
    assert_true(n + 2 <= 72);
    memcpy(t, s, n * sizeof *s);
    if (oracle_matches(o, t, n))
        return true;
    for (size_t a = 0; a < N_BRUTE; a++) {
        t[n] = brute_alphabet[a];
        if (oracle_matches(o, t, n + 1))
            return true;
        for (size_t b = 0; b < N_BRUTE; b++) {
            t[n + 1] = brute_alphabet[b];
            if (oracle_matches(o, t, n + 2))
                return true;
        }
    }
    return false;
}

/* ---- the implementation ------------------------------------------------------------------- */

/* What a test holds, freed by release_held() after each test, so that a failing check (which
 * leaves the test early) leaks nothing and the ASan build's leak report is about the code
 * under test. */
#define MAX_HELD 4
static graft__json_regex *held[MAX_HELD];
static void *the_gen; /* a gpattern */

static void hold(graft__json_regex *re)
{
    for (size_t i = 0; i < MAX_HELD; i++)
        if (held[i] == NULL) {
            held[i] = re;
            return;
        }
    fail_msg("the test holds too many patterns");
}

static void release(graft__json_regex *re)
{
    for (size_t i = 0; i < MAX_HELD; i++)
        if (held[i] == re)
            held[i] = NULL;
    graft__json_regex_free(re);
}

static void free_gen(void);

static int release_held(void **state)
{
    (void)state;
    for (size_t i = 0; i < MAX_HELD; i++)
        if (held[i] != NULL)
            release(held[i]);
    if (the_oracle_open)
        oracle_close(&the_oracle);
    free_gen();
    return 0;
}

static graft__json_regex *compile_ok(const char *pat, size_t len)
{
    graft__json_regex *re = NULL;
    char *err = NULL;
    int rc = graft__json_regex_compile(pat, len, &re, &err);
    if (rc != GRAFT_OK) {
        print_error("compile returned %d: %s\n", rc, err != NULL ? err : "(no message)");
        graft_free(err);
        fail_on("a pattern of the subset is refused", pat, len, NULL, 0);
    }
    graft_free(err);
    assert_non_null(re);
    hold(re);
    return re;
}

/* Feeds s[0..n), stopping at DEAD; states[k] is the state after k code points (DEAD at the
 * stop). Returns the number of code points fed before DEAD (n when none). Checks that each
 * step, repeated, gives the same state. */
static size_t feed(const graft__json_regex *re, const uint32_t *s, size_t n, uint16_t *states)
{
    uint16_t st = graft__json_regex_start(re);
    assert_int_equal(st, graft__json_regex_start(re));
    states[0] = st;
    if (st == DEAD)
        return 0;
    for (size_t k = 0; k < n; k++) {
        uint16_t nx = graft__json_regex_step(re, st, s[k]);
        assert_int_equal(nx, graft__json_regex_step(re, st, s[k]));
        states[k + 1] = nx;
        if (nx == DEAD)
            return k;
        st = nx;
    }
    return n;
}

static size_t brute_checks, dead_prefixes, live_prefixes, matching_prefixes;

/* Every prefix of s[0..n) against the oracle: accepts agrees with "matches somewhere", and
 * step returns DEAD exactly when the prefix through that character has no matching
 * continuation. live_exact: whether the liveness oracle holds (else only the live prefixes'
 * matches are checked). */
static void check_string(const graft__json_regex *re, oracle *o, const char *pat, size_t plen,
                         const uint32_t *s, size_t n, bool live_exact, bool brute)
{
    uint16_t states[72];
    assert_true(n < 72);
    size_t fed = feed(re, s, n, states);
    if (states[0] == DEAD) {
        if (live_exact)
            fail_on("start is DEAD for a pattern that matches", pat, plen, NULL, 0);
        return;
    }
    size_t last = fed < n ? fed + 1 : n; /* states[fed + 1] is DEAD when fed < n */
    for (size_t k = 0; k <= last; k++) {
        if (k > 0) {
            bool live = states[k] != DEAD;
            bool want = live_exact ? oracle_live(o, s, k) : live;
            if (live != want) {
                char what[128];
                snprintf(what, sizeof what, "step on the code point at %zu gives %s, expected %s",
                         k - 1, live ? "a live state" : "DEAD", want ? "a live state" : "DEAD");
                fail_on(what, pat, plen, s, n);
            }
            if (!live) {
                dead_prefixes++;
                if (brute) {
                    brute_checks++;
                    if (brute_completion(o, s, k))
                        fail_on(live_exact ? "the liveness oracle says DEAD but a short "
                                             "completion matches (a test bug)"
                                           : "step gives DEAD but a short completion matches",
                                pat, plen, s, k);
                }
                break;
            }
            live_prefixes++;
        }
        bool acc = graft__json_regex_accepts(re, states[k]);
        assert_true(acc == graft__json_regex_accepts(re, states[k]));
        bool want = oracle_matches(o, s, k);
        if (acc != want) {
            char what[128];
            snprintf(what, sizeof what, "accepts after %zu code points is %s, expected %s", k,
                     acc ? "true" : "false", want ? "true" : "false");
            fail_on(what, pat, plen, s, n);
        }
        matching_prefixes += want;
    }
    /* replaying gives the same states */
    uint16_t again[72];
    size_t fed2 = feed(re, s, n, again);
    assert_int_equal(fed, fed2);
    for (size_t k = 0; k <= last; k++)
        assert_int_equal(states[k], again[k]);
}

/* ---- hand cases: matching ----------------------------------------------------------------- */

typedef struct {
    const char *pattern, *string; /* UTF-8 */
    bool matches;
} match_case;

static const match_case match_cases[] = {
    /* literals, search semantics, anchors */
    {"b", "abc", true},
    {"b", "ac", false},
    {"^b$", "abc", false},
    {"^b$", "b", true},
    {"^b", "ba", true},
    {"^b", "ab", false},
    {"b$", "ab", true},
    {"b$", "ba", false},
    {"b$", "b\n", false},
    {"^$", "", true},
    {"^$", "a", false},
    {"^$", "\n", false},
    {"", "", true},
    {"", "abc", true},
    {"abc", "xxabcxx", true},
    {"abc", "abxc", false},
    {"A", "a", false},
    {"a", "A", false},
    {"a b", "a b", true},
    {"a b", "ab", false},
    {"-", "a-b", true},
    {"_", "a_b", true},
    {"/", "a/b", true},
    {"@", "a@b", true},
    {",", "a,b", true},
    {"^a:b=c!$", "a:b=c!", true},
    /* escapes */
    {"\\.", "a", false},
    {"\\.", ".", true},
    {"a\\.b", "a.b", true},
    {"a\\.b", "axb", false},
    {"\\\\", "\\", true},
    {"\\/", "/", true},
    {"\\-", "-", true},
    {"\\[\\]", "[]", true},
    {"\\(\\)", "()", true},
    {"\\{\\}", "{}", true},
    {"\\*\\+\\?", "*+?", true},
    {"\\^\\$", "^$", true},
    {"\\|", "|", true},
    {"\\t", "\t", true},
    {"\\t", "t", false},
    {"\\n", "\n", true},
    {"\\n", "n", false},
    {"\\r", "\r", true},
    {"\\f", "\f", true},
    {"\\v", "\v", true},
    {"\\v", "\n", false},
    {"\\v", "v", false},
    {"\\x41", "A", true},
    {"\\x41", "x41", false},
    {"\\x7e", "~", true},
    {"\\xe9", "\u00e9", true},
    {"\\u0041", "A", true},
    {"\\u00e9", "caf\u00e9", true},
    {"\\u00E9", "\u00e9", true},
    {"\\u4e2d", "\u4e2d", true},
    {"\\u{41}", "A", true},
    {"\\u{000041}", "A", true},
    {"\\u{1F600}", "\U0001F600", true},
    {"\\u{1f600}", "\U0001F601", false},
    {"\\u{10FFFF}", "\U0010FFFF", true},
    {"\\uD83D\\uDE00", "\U0001F600", true},
    {"\\uD83D\\uDE00", "\U0001F601", false},
    {"^\\uD83D\\uDE00$", "\U0001F600", true},
    {"^\\uD83D\\uDE00{2}$", "\U0001F600\U0001F600", true},
    {"^\\u{1F600}+$", "\U0001F600\U0001F600\U0001F600", true},
    {"^\\x41\\u0042\\u{43}$", "ABC", true},
    /* . */
    {"^.$", "a", true},
    {"^.$", "\u00e9", true},
    {"^.$", "\u4e2d", true},
    {"^.$", "\U0001F600", true},
    {"^.$", "\U0010FFFF", true},
    {"^.$", "\n", false},
    {"^.$", "\r", false},
    {"^.$", "\u2028", false},
    {"^.$", "\u2029", false},
    {"^.$", "\t", true},
    {"^.$", "\xc2\x85", true},
    {"^.$", "\v", true},
    {"^.$", "ab", false},
    {"^..$", "\U0001F600", false},
    {"^...$", "a\U0001F600b", true},
    {"a.c", "a\nc", false},
    {"a.c", "a\u00e9c", true},
    /* classes */
    {"[abc]", "xbx", true},
    {"[abc]", "xyz", false},
    {"^[a-c]$", "b", true},
    {"^[a-c]$", "d", false},
    {"^[a-c]$", "`", false},
    {"^[^a-c]$", "d", true},
    {"^[^a-c]$", "b", false},
    {"^[^a-c]$", "\n", true},
    {"^[^a-c]$", "\U0001F600", true},
    {"^[a-cx-z]$", "y", true},
    {"^[a-cx-z]$", "m", false},
    {"^[.]$", ".", true},
    {"^[.]$", "a", false},
    {"^[\\d.]$", ".", true},
    {"^[\\d.]$", "7", true},
    {"^[\\d.]$", "x", false},
    {"^[\\]]$", "]", true},
    {"^[\\\\]$", "\\", true},
    {"^[\\[]$", "[", true},
    {"^[a\\-z]$", "-", true},
    {"^[a\\-z]$", "b", false},
    {"^[-a]$", "-", true},
    {"^[a-]$", "-", true},
    {"^[a-]$", "b", false},
    {"^[\\w-]+$", "a-b_c", true},
    {"^[\\w-]+$", "a.b", false},
    {"^[\\w.-]+$", "a.b", true},
    {"^[$^]+$", "$^", true},
    {"^[a^]$", "^", true},
    {"^[*+?(){}|]+$", "*+?(){}|", true},
    {"^[\\u00e0-\\u00ff]$", "\u00e9", true},
    {"^[\\u00e0-\\u00ff]$", "e", false},
    {"^[\u00e0-\u00ff]$", "\u00e9", true},
    {"^[\\x41-\\x43]+$", "ABC", true},
    {"^[\\x41-\\x43]+$", "ABD", false},
    {"^[\U0001F600-\U0001F64F]$", "\U0001F601", true},
    {"^[\U0001F600-\U0001F64F]$", "\U0001F650", false},
    {"^[\\u{1F600}-\\u{1F64F}]$", "\U0001F64F", true},
    {"^[\\uD83D\\uDE00-\\uD83D\\uDE4F]$", "\U0001F620", true},
    {"^[\\uD83D\\uDE00-\\uD83D\\uDE4F]$", "\U0001F650", false},
    {"^[\\uD83D\\uDE00]$", "\U0001F600", true},
    {"^[^\\x00-\\x7F]$", "\u00e9", true},
    {"^[^\\x00-\\x7F]$", "a", false},
    {"^[\\t\\n]$", "\n", true},
    {"^[\\v]$", "\v", true},
    {"^[\\v]$", "\n", false},
    {"^[\\/]$", "/", true},
    {"^[\u4e00-\u9fa5]+$", "\u4e2d\u6587", true},
    {"^[\u4e00-\u9fa5]+$", "\u4e2dx", false},
    /* \d \D \w \W \s \S */
    {"^\\d$", "7", true},
    {"^\\d$", "a", false},
    {"^\\d$", "\u0663", false},
    {"^\\D$", "a", true},
    {"^\\D$", "7", false},
    {"^\\D$", "\u0663", true},
    {"^\\w$", "_", true},
    {"^\\w$", "Z", true},
    {"^\\w$", "\u00e9", false},
    {"^\\w$", "-", false},
    {"^\\W$", "\u00e9", true},
    {"^\\W$", "a", false},
    {"^\\s$", " ", true},
    {"^\\s$", "\t", true},
    {"^\\s$", "\n", true},
    {"^\\s$", "\v", true},
    {"^\\s$", "\f", true},
    {"^\\s$", "\r", true},
    {"^\\s$", "\u00a0", true},
    {"^\\s$", "\u1680", true},
    {"^\\s$", "\u2000", true},
    {"^\\s$", "\u200a", true},
    {"^\\s$", "\u200b", false},
    {"^\\s$", "\u2028", true},
    {"^\\s$", "\u2029", true},
    {"^\\s$", "\u202f", true},
    {"^\\s$", "\u205f", true},
    {"^\\s$", "\u3000", true},
    {"^\\s$", "\ufeff", true},
    {"^\\s$", "\xc2\x85", false},
    {"^\\s$", "\u180e", false},
    {"^\\s$", "a", false},
    {"^\\S$", "a", true},
    {"^\\S$", "\xc2\x85", true},
    {"^\\S$", "\u00a0", false},
    {"^\\S$", "\ufeff", false},
    {"^\\S$", " ", false},
    {"^[\\s]$", "\u3000", true},
    {"^[\\S]$", "\u3000", false},
    {"^[\\S]$", "x", true},
    {"^[^\\s]$", "x", true},
    {"^[^\\s]$", "\u00a0", false},
    {"^[^\\S]$", "\u00a0", true},
    {"^[^\\S]$", "x", false},
    {"^[\\sa]+$", " a\u2003", true},
    {"^[\\Sa]$", "\u00a0", false},
    {"^[\\S ]$", " ", true},
    {"^[\\d\\s]+$", "1 2", true},
    {"^[^\\d\\s]$", "1", false},
    {"^[^\\d\\s]$", "x", true},
    {"^[\\w]+$", "ab_9", true},
    {"^[\\W]$", "\u00e9", true},
    {"^[^\\W]$", "a", true},
    {"^[^\\W]$", "\u00e9", false},
    {"^[\\D]$", "x", true},
    {"^[^\\D]$", "5", true},
    {"^[^\\D]$", "x", false},
    {"^\\d{3}-\\d{4}$", "555-1234", true},
    {"^\\d{3}-\\d{4}$", "555-123", false},
    /* groups, alternation */
    {"^(ab)+$", "abab", true},
    {"^(ab)+$", "aba", false},
    {"^(?:ab)+$", "abab", true},
    {"^(?:ab)+$", "", false},
    {"^(?:ab|c)*$", "abcab", true},
    {"^(?:ab|c)*$", "acb", false},
    {"^(a|b)c$", "bc", true},
    {"^(a|b)c$", "cc", false},
    {"^((a)(b))$", "ab", true},
    {"()", "x", true},
    {"(?:)", "", true},
    {"^()$", "", true},
    {"^(?:(?:a|b)(?:c|d))+$", "adbc", true},
    {"a|b", "xbx", true},
    {"a|b", "xyz", false},
    {"a|", "xyz", true},
    {"|a", "xyz", true},
    {"^a|b$", "ax", true},
    {"^a|b$", "xb", true},
    {"^a|b$", "xa", false},
    {"^a|b$", "bx", false},
    {"^a$|^b$", "a", true},
    {"^a$|^b$", "ab", false},
    {"^a|^b", "bx", true},
    {"x$|y$", "ay", true},
    {"^abc|xyz$|mid", "zzmidzz", true},
    {"^abc|xyz$|mid", "zzabc", false},
    {"^(?:a|b)$", "b", true},
    {"^a|bc|d$", "xbcx", true},
    /* quantifiers and their lazy forms */
    {"^a*$", "", true},
    {"^a*$", "aaa", true},
    {"^a*$", "ab", false},
    {"^a+$", "", false},
    {"^a+$", "aa", true},
    {"^a?$", "", true},
    {"^a?$", "a", true},
    {"^a?$", "aa", false},
    {"^a{2}$", "aa", true},
    {"^a{2}$", "a", false},
    {"^a{2}$", "aaa", false},
    {"^a{2,}$", "aa", true},
    {"^a{2,}$", "aaaaa", true},
    {"^a{2,}$", "a", false},
    {"^a{1,3}$", "a", true},
    {"^a{1,3}$", "aaa", true},
    {"^a{1,3}$", "aaaa", false},
    {"^a{1,3}$", "", false},
    {"^a{0}$", "", true},
    {"^a{0}$", "a", false},
    {"^a{0,0}b$", "b", true},
    {"^a{0,1}$", "a", true},
    {"^a{10}$", "aaaaaaaaaa", true},
    {"^a{10}$", "aaaaaaaaa", false},
    {"^a*?$", "aaa", true},
    {"^a*?$", "ab", false},
    {"^a+?$", "", false},
    {"^a+?$", "aa", true},
    {"^a??$", "", true},
    {"^a??$", "aa", false},
    {"^a{2}?$", "aa", true},
    {"^a{2}?$", "aaa", false},
    {"^a{2,}?$", "aaa", true},
    {"^a{2,}?$", "a", false},
    {"^a{1,3}?$", "aaa", true},
    {"^a{1,3}?$", "aaaa", false},
    {"a+?b", "xaab", true},
    {"^(?:ab){2,3}$", "ababab", true},
    {"^(?:ab){2,3}$", "ab", false},
    {"^(?:a*)*$", "aaa", true},
    {"^(?:a?b?)+$", "abba", true},
    {"^(?:a|ab)(?:c|bcd)(?:d*)$", "abcd", true},
    {"^\\d+(?:\\.\\d+)?$", "3.14", true},
    {"^\\d+(?:\\.\\d+)?$", "3.", false},
    {"^a{3}b{0,2}c{1,}$", "aaabbccc", true},
    {"^a{3}b{0,2}c{1,}$", "aaabbbc", false},
    {"^.{2,3}$", "\U0001F600\U0001F600", true},
    {"^.{2,3}$", "\U0001F600", false},
    /* non-ASCII literals */
    {"\u00e9", "caf\u00e9", true},
    {"\u00e9", "cafe", false},
    {"^caf\u00e9$", "caf\u00e9", true},
    {"\u4e2d\u6587", "\u6211\u7231\u4e2d\u6587", true},
    {"\u4e2d\u6587", "\u4e2d\u6210", false},
    {"\U0001F600", "a\U0001F600b", true},
    {"\U0001F600", "\U0001F601", false},
    {"^\U0001F600+$", "\U0001F600\U0001F600", true},
    {"^\U0001F600{2}$", "\U0001F600\U0001F600", true},
    {"^\U0001F600{2}$", "\U0001F600", false},
    {"^(?:\u00e9|\U0001F600)*$", "\u00e9\U0001F600\u00e9", true},
    /* what schemas write */
    {"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "555-1212", true},
    {"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "(888)555-1212", true},
    {"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "(888)555-1212 ext. 532", false},
    {"^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", "(800)FLOWERS", false},
    {"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$", "j.doe+x@mail.example.org", true},
    {"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$", "j.doe@localhost", false},
    {"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
     "123e4567-e89b-12d3-a456-426614174000", true},
    {"^\\d{4}-\\d{2}-\\d{2}$", "2024-01-31", true},
    {"^\\d{4}-\\d{2}-\\d{2}$", "2024-1-31", false},
    {"^https?://", "https://x", true},
    {"^https?://", "ftp://x", false},
    {"^#[0-9a-f]{6}$", "#00ff7a", true},
    {"^[a-z]+(?:-[a-z]+)*$", "kebab-case-name", true},
    {"^[a-z]+(?:-[a-z]+)*$", "kebab--case", false},
};

/* Every hand case: the expectation agrees with PCRE2 and with accepts after feeding the
 * string (and every prefix is held to the oracles too). */
static void test_hand_cases_match(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof match_cases / sizeof match_cases[0]; i++) {
        const match_case *mc = &match_cases[i];
        size_t plen = strlen(mc->pattern);
        uint32_t s[64];
        size_t n = utf8_decode(mc->string, strlen(mc->string), s, 64);
        oracle *o = &the_oracle;
        oracle_open(o, mc->pattern, plen);
        if (oracle_matches(o, s, n) != mc->matches)
            fail_on(mc->matches ? "PCRE2 says the hand case does not match (a test bug)"
                                : "PCRE2 says the hand case matches (a test bug)",
                    mc->pattern, plen, s, n);
        graft__json_regex *re = compile_ok(mc->pattern, plen);
        uint16_t states[72];
        size_t fed = feed(re, s, n, states);
        bool acc = fed == n && states[n] != DEAD && graft__json_regex_accepts(re, states[n]);
        if (acc != mc->matches)
            fail_on(mc->matches ? "the string does not match" : "the string matches",
                    mc->pattern, plen, s, n);
        check_string(re, o, mc->pattern, plen, s, n, !o->has_empty, true);
        release(re);
        oracle_close(o);
    }
}

/* The 32 ASCII punctuation characters, escaped, outside a class and inside one, match
 * themselves and nothing else (all of them are tried before failing, and the ones that fail
 * are listed). */
static void test_punctuation_escapes(void **state)
{
    (void)state;
    char refused[300] = "", wrong[300] = ""; /* 64 cases of at most 4 characters */
    size_t n_refused = 0, n_wrong = 0;
    for (int in_class = 0; in_class < 2; in_class++)
        for (int ch = 0x21; ch < 0x7F; ch++) {
            if (!is_ascii_punct((char)ch))
                continue;
            char pat[6];
            size_t len = 0;
            pat[len++] = '^';
            if (in_class)
                pat[len++] = '[';
            pat[len++] = '\\';
            pat[len++] = (char)ch;
            if (in_class)
                pat[len++] = ']';
            pat[len++] = '$';
            graft__json_regex *re = NULL;
            char *err = NULL;
            int rc = graft__json_regex_compile(pat, len, &re, &err);
            graft_free(err);
            if (rc != GRAFT_OK) {
                if (in_class)
                    refused[n_refused++] = '[';
                refused[n_refused++] = (char)ch;
                if (in_class)
                    refused[n_refused++] = ']';
                refused[n_refused++] = ' ';
                continue;
            }
            uint16_t st = graft__json_regex_start(re);
            bool ok = st != DEAD;
            for (uint32_t cp = 0; ok && cp < 0x80; cp++) {
                uint16_t nx = graft__json_regex_step(re, st, cp);
                bool acc = nx != DEAD && graft__json_regex_accepts(re, nx);
                ok = (nx != DEAD) == (cp == (uint32_t)ch) && acc == (cp == (uint32_t)ch);
            }
            if (!ok) {
                if (in_class)
                    wrong[n_wrong++] = '[';
                wrong[n_wrong++] = (char)ch;
                if (in_class)
                    wrong[n_wrong++] = ']';
                wrong[n_wrong++] = ' ';
            }
            release(re);
        }
    if (n_refused > 0 || n_wrong > 0)
        fail_msg("escaped ASCII punctuation: refused %s; matching wrongly %s", refused, wrong);
}

/* Code points the UTF-8 hand cases cannot hold: NUL, and the ends of the range. */
static void test_special_code_points(void **state)
{
    (void)state;
    static const struct {
        const char *pattern;
        size_t plen; /* 0: strlen */
        uint32_t cp;
        bool matches;
    } cases[] = {
        {"^\\0$", 0, 0, true},
        {"^\\0$", 0, '0', false},
        {"^\\x00$", 0, 0, true},
        {"^\\u0000$", 0, 0, true},
        {"^\\u{0}$", 0, 0, true},
        {"^.$", 0, 0, true},
        {"^[^a]$", 0, 0, true},
        {"^[^a]$", 0, 0x10FFFF, true},
        {"^\\S$", 0, 0, true},
        {"^\\W$", 0, 0x10FFFF, true},
        {"^\\D$", 0, 0xE000, true},
        {"^[\\0-\\x1f]$", 0, 0, true},
        {"^[\\0-\\x1f]$", 0, 0x1F, true},
        {"^[\\0-\\x1f]$", 0, 0x20, false},
        {"^[\\u{10000}-\\u{10FFFF}]$", 0, 0x10FFFF, true},
        {"^[\\u{10000}-\\u{10FFFF}]$", 0, 0xFFFF, false},
        {"^[\\u{10000}-\\u{10FFFF}]$", 0, 0x10000, true},
        {"^[^\\u{10000}-\\u{10FFFF}]$", 0, 0xFFFF, true},
        {"^[^\\u{10000}-\\u{10FFFF}]$", 0, 0x10000, false},
        {"^[\\uD7FF\\uE000]$", 0, 0xE000, true},
        {"^[\\uD7FF\\uE000]$", 0, 0xD7FF, true},
        {"^[\\uD7FF\\uE000]$", 0, 0xE001, false},
        /* a literal NUL in the pattern is a literal character */
        {"^\0$", 3, 0, true},
        {"^\0$", 3, 'a', false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *pat = cases[i].pattern;
        size_t plen = cases[i].plen ? cases[i].plen : strlen(pat);
        oracle *o = &the_oracle;
        oracle_open(o, pat, plen);
        uint32_t s[1] = {cases[i].cp};
        if (oracle_matches(o, s, 1) != cases[i].matches)
            fail_on("PCRE2 disagrees with the hand case (a test bug)", pat, plen, s, 1);
        graft__json_regex *re = compile_ok(pat, plen);
        uint16_t st = graft__json_regex_start(re);
        assert_int_not_equal(st, DEAD);
        uint16_t nx = graft__json_regex_step(re, st, cases[i].cp);
        bool acc = nx != DEAD && graft__json_regex_accepts(re, nx);
        if (acc != cases[i].matches || (nx != DEAD) != cases[i].matches)
            fail_on(cases[i].matches ? "the code point does not match" : "the code point matches",
                    pat, plen, s, 1);
        release(re);
        oracle_close(o);
    }
}

/* compile reads exactly len bytes: the pattern need not end in NUL, and bytes after len do
 * not count. */
static void test_length_is_honoured(void **state)
{
    (void)state;
    char *exact = malloc(4);
    assert_non_null(exact);
    memcpy(exact, "^ab$", 4);
    graft__json_regex *re = compile_ok(exact, 4);
    uint32_t ab[3] = {'a', 'b', 'c'};
    uint16_t st[4];
    assert_int_equal(feed(re, ab, 2, st), 2);
    assert_true(graft__json_regex_accepts(re, st[2]));
    assert_int_equal(feed(re, ab, 3, st), 2); /* DEAD on the c */
    release(re);
    free(exact);

    re = compile_ok("^ab$(", 4);
    assert_int_equal(feed(re, ab, 2, st), 2);
    assert_true(graft__json_regex_accepts(re, st[2]));
    release(re);

    re = compile_ok("^a[", 2); /* "^a": "abc" matches */
    assert_int_equal(feed(re, ab, 3, st), 3);
    assert_true(graft__json_regex_accepts(re, st[3]));
    release(re);

    re = compile_ok("", 0);
    assert_int_equal(feed(re, ab, 3, st), 3);
    for (int k = 0; k <= 3; k++)
        assert_true(graft__json_regex_accepts(re, st[k]));
    release(re);
}

/* ---- hand cases: liveness ----------------------------------------------------------------- */

typedef struct {
    const char *pattern, *string;
    int dead_at;      /* the index of the code point whose step gives DEAD; -1 none; -2 start */
    bool accepts_end; /* when not dead: accepts after the whole string */
} live_case;

static const live_case live_cases[] = {
    {"^ab", "ac", 1, false},
    {"^ab", "abzzz", -1, true},
    {"^ab$", "abc", 2, false},
    {"^ab$", "a", -1, false},
    {"ab", "xyzxyz", -1, false},
    {"ab$", "abx", -1, false},
    {"^a|b", "xxx", -1, false},
    {"^a$|^b$", "ab", 1, false},
    {"^a$|^b$", "c", 0, false},
    {"^$", "", -1, true},
    {"^$", "a", 0, false},
    {"^a{2}$", "aaa", 2, false},
    {"^a{2}$", "aa", -1, true},
    {"^\\d+$", "12a", 2, false},
    {"^\\d+$", "123", -1, true},
    {"^(?:ab)*$", "abab", -1, true},
    {"^(?:ab)*$", "aba", -1, false},
    {"^(?:ab)*$", "abb", 2, false},
    {"^.*$", "a\nb", 1, false},
    {"^.*", "a\nb", -1, true},
    {".$", "a\n", -1, false},
    {"^[^\\s]+$", "ab ", 2, false},
    {"^a|^b|^c", "d", 0, false},
    {"^a|^b|^c", "cd", -1, true},
    {"^\U0001F600\u00e9$", "\U0001F600e", 1, false},
    {"^\U0001F600\u00e9$", "\U0001F600\u00e9", -1, true},
    /* classes that match nothing */
    {"[^\\d\\D]", "", -2, false},
    {"[^\\s\\S]", "", -2, false},
    {"^[^\\w\\W]|[^\\d\\D]$", "", -2, false},
    {"a[^\\d\\D]", "", -2, false},
    {"(?:[^\\d\\D])+", "", -2, false},
    {"x[^\\d\\D]|^b", "x", 0, false},
    {"x[^\\d\\D]|^b", "b", -1, true},
    {"x[^\\d\\D]|^b", "bx", -1, true},
    {"^ab*[^\\d\\D]|^ac", "ab", 1, false},
    {"^ab*[^\\d\\D]|^ac", "ac", -1, true},
    {"[^\\d\\D]*", "xyz", -1, true},
    {"^a[^\\d\\D]?$", "a", -1, true},
    {"^a[^\\d\\D]?$", "ab", 1, false},
    {"^a[^\\d\\D]{0}b$", "ab", -1, true},
};

static void test_hand_cases_liveness(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof live_cases / sizeof live_cases[0]; i++) {
        const live_case *lc = &live_cases[i];
        size_t plen = strlen(lc->pattern);
        uint32_t s[64];
        size_t n = utf8_decode(lc->string, strlen(lc->string), s, 64);
        oracle *o = &the_oracle;
        oracle_open(o, lc->pattern, plen);
        /* the expectation against PCRE2: the prefix before the dead code point has a short
         * completion, the one through it has none; the whole string matches as said */
        bool agrees;
        if (lc->dead_at >= 0)
            agrees = brute_completion(o, s, (size_t)lc->dead_at) &&
                     !brute_completion(o, s, (size_t)lc->dead_at + 1);
        else if (lc->dead_at == -1)
            agrees = oracle_matches(o, s, n) == lc->accepts_end;
        else
            agrees = !brute_completion(o, s, 0);
        if (!agrees)
            fail_on("the hand liveness case disagrees with PCRE2 (a test bug)", lc->pattern, plen,
                    s, n);

        graft__json_regex *re = compile_ok(lc->pattern, plen);
        uint16_t states[72];
        size_t fed = feed(re, s, n, states);
        if (lc->dead_at == -2) {
            if (states[0] != DEAD)
                fail_on("start is not DEAD for a pattern that matches nothing", lc->pattern, plen,
                        NULL, 0);
        } else if (states[0] == DEAD) {
            fail_on("start is DEAD for a pattern that matches", lc->pattern, plen, NULL, 0);
        } else if (lc->dead_at >= 0) {
            if (fed != (size_t)lc->dead_at) {
                char what[96];
                snprintf(what, sizeof what, "expected DEAD on the code point at %d, got %s %zu",
                         lc->dead_at, fed == n ? "none up to" : "it at", fed);
                fail_on(what, lc->pattern, plen, s, n);
            }
        } else {
            if (fed != n)
                fail_on("step gives DEAD on a live prefix", lc->pattern, plen, s, fed + 1);
            if (graft__json_regex_accepts(re, states[n]) != lc->accepts_end)
                fail_on("accepts disagrees", lc->pattern, plen, s, n);
        }
        if (!o->has_empty && states[0] != DEAD)
            check_string(re, o, lc->pattern, plen, s, n, true, true);
        release(re);
        oracle_close(o);
    }
}

/* ---- refusals ----------------------------------------------------------------------------- */

static const char *const refused_patterns[] = {
    /* backreferences */
    "\\1", "(a)\\1", "(a)\\2", "\\k<n>", "(?<n>a)\\k<n>",
    /* lookaround, named groups, other group forms, flags */
    "(?=a)", "a(?=b)", "(?!a)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(?<n>a)", "(?P<n>a)",
    "(?i)a", "(?i:a)", "(?m)^a$", "(?>a)", "(?|a)", "(?#x)a", "(?", "(?a)",
    /* assertions and escapes outside the subset */
    "\\b", "a\\b", "a\\B", "\\A", "\\z", "\\Z", "\\G", "\\q", "\\a", "\\e", "\\cA", "\\p{L}",
    "\\P{L}", "\\h", "\\R", "\\X", "\\N", "\\K", "\\8", "\\g1", "\\y", "\\E", "\\Q",
    "\\", "a\\", "[\\", "[a\\",
    /* broken \x and \u escapes */
    "\\x", "\\x4", "\\xZZ", "\\x4g", "\\u", "\\u12", "\\u123", "\\uZZZZ", "\\u{", "\\u{}",
    "\\u{41", "\\u{110000}", "\\u{FFFFFFFFF}", "\\u{g}", "[\\x4]", "[\\u12]",
    /* ^ and $ elsewhere */
    "a^b", "a^", "a$b", "$a", "(a^b)", "a|b^c", "a$|b$c", "a(b$)c", "(?:a$)b", "a*^", "^*",
    "^+a", "$*", "a|^?", "a(?:^b)",
    /* unbalanced */
    "(", ")", "(a", "a)", "((a)", "(a))", "(?:a", "[", "[a", "[^", "[a-", "(a|b", "a|b)",
    /* dangling and doubled quantifiers */
    "*", "+", "?", "*a", "+a", "?a", "a**", "a++", "a*+", "a?*", "a{2}*", "a{2}{3}", "a**?",
    "a*??", "a+?+", "(*a)", "(+)", "a|*", "a|+b", "(|*)", "{2}", "a|{2}", "({1})", "a{1}+",
    /* bounds */
    "a{2,1}", "a{3,0}", "a{1001}", "a{0,1001}", "a{1001,}", "a{1001,2000}", "a{99999}",
    "a{4294967297}", "a{18446744073709551617}", "(?:ab){1001}",
    /* classes */
    "[z-a]", "[b-a]", "[\\u00ff-\\u00e0]", "[\U0001F601-\U0001F600]", "[9-0]",
};

/* Patterns that must be refused; the message is non-empty, and errmsg may be NULL. */
static void test_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refused_patterns / sizeof refused_patterns[0]; i++) {
        const char *pat = refused_patterns[i];
        size_t len = strlen(pat);
        graft__json_regex *re = NULL;
        char *err = NULL;
        int rc = graft__json_regex_compile(pat, len, &re, &err);
        if (rc == GRAFT_OK) {
            graft_free(err);
            release(re);
            fail_on("a pattern outside the subset compiles", pat, len, NULL, 0);
        }
        if (rc != GRAFT_EINVAL) {
            graft_free(err);
            fail_on("refusal is not GRAFT_EINVAL", pat, len, NULL, 0);
        }
        if (err == NULL || err[0] == '\0') {
            graft_free(err);
            fail_on("refusal without a message", pat, len, NULL, 0);
        }
        graft_free(err);
        re = NULL;
        rc = graft__json_regex_compile(pat, len, &re, NULL);
        if (rc != GRAFT_EINVAL)
            fail_on("refusal with errmsg NULL is not GRAFT_EINVAL", pat, len, NULL, 0);
    }
    /* errmsg NULL on success */
    graft__json_regex *re = NULL;
    assert_int_equal(graft__json_regex_compile("^a$", 3, &re, NULL), GRAFT_OK);
    assert_non_null(re);
    release(re);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A pattern beyond the bounds: GRAFT_EINVAL with a message, within a generous time. */
static void check_refused_promptly(const char *pat)
{
    graft__json_regex *re = NULL;
    char *err = NULL;
    double t0 = now_s();
    int rc = graft__json_regex_compile(pat, strlen(pat), &re, &err);
    double dt = now_s() - t0;
    if (rc == GRAFT_OK) {
        graft_free(err);
        release(re);
        fail_on("a pattern beyond the state bound compiles", pat, strlen(pat), NULL, 0);
    }
    if (rc != GRAFT_EINVAL || err == NULL) {
        print_error("compile returned %d\n", rc);
        graft_free(err);
        fail_on("a pattern beyond the state bound is not GRAFT_EINVAL with a message", pat,
                strlen(pat), NULL, 0);
    }
    graft_free(err);
    if (dt > 20.0) {
        print_error("%.1f s\n", dt);
        fail_on("refusing a pattern beyond the state bound takes too long", pat, strlen(pat),
                NULL, 0);
    }
}

/* Bounds: repeats up to 1000 compile and count exactly; automata beyond
 * GRAFT__REGEX_MAX_STATES are refused with GRAFT_EINVAL, promptly. */
static void test_bounds(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "a{1000}", "^a{1000}$", "a{0,1000}", "a{1000,}", "^[0-9a-f]{1000}$", "^(?:ab){1000}$",
        "^\\d{0,1000}$", "a{1000,1000}", "^(?:a{1000}){3}$", "^[ab]{1000}c{1000}$",
        "^(?:a{0,1000}b){2}$",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        graft__json_regex *re = compile_ok(ok[i], strlen(ok[i]));
        release(re);
    }
    /* ^a{1000}$: exactly 1000 a's */
    const char *pat = "^a{1000}$";
    graft__json_regex *re = compile_ok(pat, strlen(pat));
    uint16_t st = graft__json_regex_start(re);
    for (int k = 0; k < 1000; k++) {
        assert_int_not_equal(st, DEAD);
        assert_false(graft__json_regex_accepts(re, st));
        st = graft__json_regex_step(re, st, 'a');
    }
    assert_int_not_equal(st, DEAD);
    assert_true(graft__json_regex_accepts(re, st));
    assert_int_equal(graft__json_regex_step(re, st, 'a'), DEAD);
    release(re);

    /* large counts, exactly: accepts after k code points iff lo <= k <= hi, DEAD from the
     * code point after hi on (never, for an unbounded or unanchored pattern) */
    static const struct {
        const char *pattern;
        const char *cycle; /* the string fed, repeated */
        int lo, hi, dead_at;
    } counts[] = {
        {"^[ab]{3,1000}$", "ab", 3, 1000, 1000},
        {"^(?:ab){1000}$", "ab", 2000, 2000, 2000},
        {"^a{1000,}$", "a", 1000, 3000, -1},
        {"^a{0,999}$", "a", 0, 999, 999},
        {"^\\d{1000}", "1", 1000, 3000, -1},
        {"x{1000}", "x", 1000, 3000, -1},
        {"^.{999}\u00e9$", "\u00e9", 1000, 1000, 1000},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const char *cp = counts[i].pattern;
        uint32_t cyc[4];
        size_t n_cyc = utf8_decode(counts[i].cycle, strlen(counts[i].cycle), cyc, 4);
        re = compile_ok(cp, strlen(cp));
        st = graft__json_regex_start(re);
        for (int k = 0; k <= 3000; k++) {
            uint32_t s1[1] = {cyc[(size_t)k % n_cyc]};
            if (st == DEAD) {
                if (k - 1 != counts[i].dead_at)
                    fail_on("DEAD at the wrong count", cp, strlen(cp), s1, 1);
                break;
            }
            if (counts[i].dead_at >= 0 && k - 1 == counts[i].dead_at)
                fail_on("not DEAD past the count", cp, strlen(cp), s1, 1);
            if (graft__json_regex_accepts(re, st) != (k >= counts[i].lo && k <= counts[i].hi)) {
                print_error("after %d code points\n", k);
                fail_on("accepts disagrees with the count", cp, strlen(cp), s1, 1);
            }
            if (k < 3000)
                st = graft__json_regex_step(re, st, s1[0]);
        }
        release(re);
    }
    /* unanchored x{1000}: a run of 999 broken by y does not count */
    re = compile_ok("x{1000}", 7);
    st = graft__json_regex_start(re);
    for (int k = 0; k < 2000; k++) {
        st = graft__json_regex_step(re, st, k == 999 ? 'y' : 'x');
        assert_int_not_equal(st, DEAD);
        assert_true(graft__json_regex_accepts(re, st) == (k >= 1999));
    }
    release(re);

    static const char *const too_big[] = {
        "(a|b)*a(a|b){15}",
        "^(a|b)*a(a|b){15}$",
        "[ab]*a[ab]{20}",
        "(?:a{100}){100}",
        "a{1000}b{1000}c{1000}d{1000}e{1000}",
    };
    for (size_t i = 0; i < sizeof too_big / sizeof too_big[0]; i++)
        check_refused_promptly(too_big[i]);
}

/* Nested repeats whose expansion is huge (10^6 and 10^9 positions): still refused promptly,
 * as a schema from a client may hold one. */
static void test_bounds_nested(void **state)
{
    (void)state;
    check_refused_promptly("^(?:.{0,1000}){1000}x");
    check_refused_promptly("(?:(?:a{1000}){1000}){1000}");
}

/* Patterns the header leaves open (ECMA's Annex B forms, an escape of a lone surrogate, empty
 * classes and the like): refused, or else they behave as ECMA-262 says. The check after a
 * successful compile is a string and whether it matches. */
static const struct {
    const char *pattern;
    const char *string;
    bool matches;
} open_cases[] = {
    {"^a]$", "a]", true},
    {"^a}$", "a}", true},
    {"^a{$", "a{", true},
    {"^a{,3}$", "a{,3}", true},
    {"^a{x}$", "a{x}", true},
    {"(^a)", "ba", false},
    {"(^a)", "ab", true},
    {"(a$)", "ab", false},
    {"(a$)", "ba", true},
    {"^^a", "a", true},
    {"a$$", "a", true},
    {"^[\\d-z]$", "-", true},
    {"[]", "a", false},
    {"[^]", "\n", true},
    {"[\\b]", "\b", true},
    {"\\uD83D", "\U0001F600", false},
    {"^\\uD83Dx$", "\U0001F600x", false},
    {"^[^]$", "\n", true},
    {"[]|a", "a", true},
    {"a[]", "a", false},
    {"^[]*$", "", true},
    /* ECMA allows any number of digits in \u{...} and in a repeat count */
    {"^\\u{0000041}$", "A", true},
    {"^a{0000000000000000000001}$", "a", true},
    /* bounds the header does not name: the automata of these have one or two states, but
     * their expansions before determinisation are large */
    {"(?:\\d{0,1000}){20}", "x", true},
    {"^(?:(?:a*){1000}){29}$", "aa", true},
};

/* The verdict on open case i: 0 right, 20 refused other than with GRAFT_EINVAL and a message,
 * 21 compiled but wrong (other exit statuses are the sanitizers'). */
static int open_case_verdict(size_t i)
{
    const char *pat = open_cases[i].pattern;
    graft__json_regex *re = NULL;
    char *err = NULL;
    int rc = graft__json_regex_compile(pat, strlen(pat), &re, &err);
    if (rc != GRAFT_OK) {
        bool with_message = err != NULL;
        graft_free(err);
        return rc == GRAFT_EINVAL && with_message ? 0 : 20;
    }
    graft_free(err);
    uint32_t s[16];
    uint16_t states[72];
    size_t n = utf8_decode(open_cases[i].string, strlen(open_cases[i].string), s, 16);
    size_t fed = feed(re, s, n, states);
    bool acc = states[0] != DEAD && fed == n && graft__json_regex_accepts(re, states[n]);
    release(re);
    return acc == open_cases[i].matches ? 0 : 21;
}

/* Each open case runs in a child process, so that a crash (or, in the sanitizer build,
 * undefined behaviour) is reported with its pattern and the other cases still run. */
static void test_open_cases(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof open_cases / sizeof open_cases[0]; i++) {
        const char *pat = open_cases[i].pattern;
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(open_case_verdict(i));
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        const char *what = NULL;
        if (WIFSIGNALED(status))
            what = "compiling or matching dies of a signal";
        else if (!WIFEXITED(status))
            what = "the child did not exit";
        else if (WEXITSTATUS(status) == 20)
            what = "a refusal is not GRAFT_EINVAL with a message";
        else if (WEXITSTATUS(status) == 21)
            what = open_cases[i].matches ? "compiled, but the string does not match"
                                         : "compiled, but the string matches";
        else if (WEXITSTATUS(status) != 0)
            what = "the child failed (a sanitizer's report is above)";
        if (what != NULL) {
            print_error("%s (status 0x%x), pattern ", what, (unsigned)status);
            graft_test_print_literal((const uint8_t *)pat, strlen(pat));
            print_error("\n");
            failures++;
        }
    }
    if (failures > 0)
        fail_msg("%d open cases failed", failures);
}

/* A class of many separate code points (its automaton has three states): compiled, or (the
 * header names no bound on classes) refused with GRAFT_EINVAL and a message; either way
 * nothing leaks (the ASan build's leak check). */
static void test_large_classes(void **state)
{
    (void)state;
    static const int sizes[] = {100, 2047, 3000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bytes b = {0};
        graft_test_put_str(&b, "^[");
        for (int k = 0; k < sizes[i]; k++) {
            char t[16];
            snprintf(t, sizeof t, "\\u{%X}", 0x100 + 2 * k);
            graft_test_put_str(&b, t);
        }
        graft_test_put_str(&b, "]$");
        graft__json_regex *re = NULL;
        char *err = NULL;
        int rc = graft__json_regex_compile((const char *)b.p, b.n, &re, &err);
        if (rc == GRAFT_OK) {
            uint16_t st = graft__json_regex_start(re);
            assert_int_not_equal(st, DEAD);
            for (int k = 0; k < 2 * sizes[i] + 2; k++) {
                uint32_t cp = 0xFF + (uint32_t)k;
                uint16_t nx = graft__json_regex_step(re, st, cp);
                bool in = cp >= 0x100 && (cp - 0x100) % 2 == 0 &&
                          cp < 0x100 + 2 * (uint32_t)sizes[i];
                bool acc = nx != DEAD && graft__json_regex_accepts(re, nx);
                if ((nx != DEAD) != in || acc != in) {
                    uint32_t s[1] = {cp};
                    fail_on("a large class", (const char *)b.p, b.n, s, 1);
                }
            }
            release(re);
        } else if (rc != GRAFT_EINVAL || err == NULL) {
            graft_free(err);
            fail_on("a large class is refused, but not with GRAFT_EINVAL and a message",
                    (const char *)b.p, b.n, NULL, 0);
        }
        graft_free(err);
        free(b.p);
    }
}

/* Compiles groups nested `depth` deep around "a" (opens "(" or "(?:"): 0 when compiled and
 * right or refused with GRAFT_EINVAL and a message, 1 otherwise. Run in a child process. */
static int nested_child(const char *open, int depth)
{
    size_t lo = strlen(open), n = 0;
    char *p = malloc((size_t)depth * (lo + 1) + 1);
    if (p == NULL)
        return 1;
    for (int k = 0; k < depth; k++, n += lo)
        memcpy(p + n, open, lo);
    p[n++] = 'a';
    for (int k = 0; k < depth; k++)
        p[n++] = ')';
    graft__json_regex *re = NULL;
    char *err = NULL;
    int rc = graft__json_regex_compile(p, n, &re, &err), bad = 0;
    if (rc == GRAFT_OK) {
        uint16_t st = graft__json_regex_start(re);
        st = st == DEAD ? DEAD : graft__json_regex_step(re, st, 'a');
        bad = st == DEAD || !graft__json_regex_accepts(re, st);
        release(re);
    } else
        bad = rc != GRAFT_EINVAL || err == NULL;
    graft_free(err);
    free(p);
    return bad;
}

/* Groups nested 100000 deep (a pattern from a client may be anything): compiled or refused
 * with GRAFT_EINVAL, never a crash. The compile runs in a child process, so that a stack
 * overflow is reported here. */
static void test_deep_nesting(void **state)
{
    (void)state;
    static const char *const opens[] = {"(", "(?:"};
    for (size_t i = 0; i < 2; i++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(nested_child(opens[i], 100000));
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
            fail_msg("groups %s...) nested 100000 deep: compile dies of signal %d", opens[i],
                     WTERMSIG(status));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("groups %s...) nested 100000 deep: compiled wrongly, or refused other than "
                     "with GRAFT_EINVAL and a message (child status %d)",
                     opens[i], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
}

/* ---- random patterns ---------------------------------------------------------------------- */

/* The pattern's tree, for drawing strings that match. */
enum { N_LIT, N_CAT, N_ALT, N_REP };
#define MAX_NODES 96
#define MAX_KIDS 6
typedef struct {
    int kind;
    int kids[MAX_KIDS];
    int n_kids;
    int min, max; /* N_REP; max -1: unbounded */
    cpset set;    /* N_LIT */
} gnode;

typedef struct {
    bytes pat;
    gnode nodes[MAX_NODES];
    int n_nodes;
    int alt_seq[4];
    bool alt_caret[4], alt_dollar[4];
    int n_alts;
} gpattern;

static int new_node(gpattern *g, int kind)
{
    if (g->n_nodes >= MAX_NODES)
        return -1;
    gnode *nd = &g->nodes[g->n_nodes];
    nd->kind = kind;
    nd->n_kids = 0;
    nd->set.n = 0;
    return g->n_nodes++;
}

/* The alphabet of the random strings (weighted by repetition). */
static const uint32_t alphabet[] = {
    'a', 'a', 'a', 'b', 'b', 'b', 'c', 'c', '1', '1', ' ', '_', '-', 0xE9, 0xE9, 0x1F600,
    0x1F600, '\n', 0xA0, 0x2028, 'Z', '.', 0xFEFF, 0x10FFFF, 0x2003, 0,
    0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000,
};
enum { N_ALPHABET = sizeof alphabet / sizeof alphabet[0] };

static uint32_t random_char(void) { return alphabet[graft_test_below(N_ALPHABET)]; }

static const char *const lit_atoms[] = {"a", "a", "b", "b", "c", "1", " ", "_", "-",
                                        "\u00e9", "\U0001F600", "Z", "\u2003"};
static const char *const esc_atoms[] = {
    "\\.", "\\-", "\\_", "\\x61", "\\u0062", "\\u{63}", "\\u{1F600}", "\\uD83D\\uDE00",
    "\\n", "\\t", "\\u00e9", "\\/", "\\$", "\\^", "\\*", "\\\\", "\\0", "\\xA0", "\\u{10FFFF}",
    "\\v",
};
static const char *const class_esc_atoms[] = {"\\d", "\\D", "\\w", "\\W", "\\s", "\\S"};
static const char *const class_lits[] = {
    "a", "b", "c", "1", " ", "\u00e9", "\U0001F600", "_", "$", ".", "*", "(", ")", "|", "+",
    "?", "{", "}", "/", "\\-", "\\]", "\\\\", "\\^", "\\[", "\\uD83D\\uDE00", "\\n", "\\u00a0",
    "\\x2d",
};
static const char *const class_ranges[] = {
    "a-c", "a-b", "b-c", "0-9", "a-z", "A-Z", "\u00e0-\u00ff", "\U0001F600-\U0001F602",
    "\\u{1F600}-\\u{1F64F}", "\\x20-\\x7e", "\\u0041-\\u005A", "\\0-\\x1f", " -a",
    "\\u2000-\\u2030", "\\uD83D\\uDE00-\\uD83D\\uDE4F", "a-\\u{10FFFF}",
    "\\u007F-\\u0080", "\\u07FF-\\u0800", "\\uFFF0-\\u{10010}", "\\uD7FF-\\uE000",
    "\\0-\\u{10FFFF}",
};

#define PICK(arr) (arr[graft_test_below(sizeof arr / sizeof arr[0])])

static int gen_alts(gpattern *g, int depth);

static int gen_class(gpattern *g)
{
    size_t start = g->pat.n;
    for (int attempt = 0;; attempt++) {
        g->pat.n = start;
        graft_test_put_str(&g->pat, "[");
        if (graft_test_one_in(3))
            graft_test_put_str(&g->pat, "^");
        int k = 1 + (int)graft_test_below(3);
        for (int e = 0; e < k; e++) {
            size_t r = graft_test_below(10);
            if (e == 0 && r == 0)
                graft_test_put_str(&g->pat, "-");
            else if (r <= 3)
                graft_test_put_str(&g->pat, PICK(class_lits));
            else if (r <= 6)
                graft_test_put_str(&g->pat, PICK(class_ranges));
            else
                graft_test_put_str(&g->pat, PICK(class_esc_atoms));
        }
        graft_test_put_str(&g->pat, "]");
        cpset s;
        cursor c = {(const char *)g->pat.p, g->pat.n, start};
        assert_true(parse_atom_set(&c, &s));
        assert_int_equal(c.i, g->pat.n);
        if (set_nonempty(&s)) {
            int id = new_node(g, N_LIT);
            if (id >= 0)
                g->nodes[id].set = s;
            return id;
        }
        assert_true(attempt < 100);
    }
}

/* One atom; -1 when out of nodes. */
static int gen_atom(gpattern *g, int depth)
{
    size_t r = graft_test_below(12);
    size_t start = g->pat.n;
    if (r >= 10 && depth < 3) {
        graft_test_put_str(&g->pat, graft_test_one_in(2) ? "(" : "(?:");
        int id = gen_alts(g, depth + 1);
        graft_test_put_str(&g->pat, ")");
        return id;
    }
    if (r >= 7 && r < 10)
        return gen_class(g);
    if (r == 6)
        graft_test_put_str(&g->pat, ".");
    else if (r == 5)
        graft_test_put_str(&g->pat, PICK(class_esc_atoms));
    else if (r == 4)
        graft_test_put_str(&g->pat, PICK(esc_atoms));
    else {
        const char *lit = PICK(lit_atoms);
        /* \0 followed by a digit is not \0 */
        if (lit[0] == '1' && g->pat.n >= 2 && g->pat.p[g->pat.n - 1] == '0' &&
            g->pat.p[g->pat.n - 2] == '\\')
            lit = "a";
        graft_test_put_str(&g->pat, lit);
    }
    int id = new_node(g, N_LIT);
    if (id < 0)
        return -1;
    cursor c = {(const char *)g->pat.p, g->pat.n, start};
    assert_true(parse_atom_set(&c, &g->nodes[id].set));
    assert_int_equal(c.i, g->pat.n);
    return id;
}

static int gen_item(gpattern *g, int depth)
{
    int atom = gen_atom(g, depth);
    if (atom < 0 || !graft_test_one_in(3))
        return atom;
    int min, max;
    char q[32];
    switch (graft_test_below(6)) {
    case 0: min = 0, max = -1, snprintf(q, sizeof q, "*"); break;
    case 1: min = 1, max = -1, snprintf(q, sizeof q, "+"); break;
    case 2: min = 0, max = 1, snprintf(q, sizeof q, "?"); break;
    case 3:
        min = max = (int)graft_test_below(graft_test_one_in(8) ? 13 : 4);
        snprintf(q, sizeof q, "{%d}", min);
        break;
    case 4:
        min = (int)graft_test_below(4), max = -1;
        snprintf(q, sizeof q, "{%d,}", min);
        break;
    default:
        min = (int)graft_test_below(3), max = min + (int)graft_test_below(3);
        snprintf(q, sizeof q, "{%d,%d}", min, max);
        break;
    }
    graft_test_put_str(&g->pat, q);
    if (graft_test_one_in(3))
        graft_test_put_str(&g->pat, "?");
    int id = new_node(g, N_REP);
    if (id < 0)
        return -1;
    g->nodes[id].kids[0] = atom;
    g->nodes[id].n_kids = 1;
    g->nodes[id].min = min;
    g->nodes[id].max = max;
    return id;
}

static int gen_seq(gpattern *g, int depth)
{
    int id = new_node(g, N_CAT);
    if (id < 0)
        return -1;
    int k = (int)graft_test_below(depth == 0 ? 5 : 4);
    for (int i = 0; i < k; i++) {
        int kid = gen_item(g, depth);
        if (kid < 0)
            return -1;
        g->nodes[id].kids[g->nodes[id].n_kids++] = kid;
    }
    return id;
}

static int gen_alts(gpattern *g, int depth)
{
    int id = new_node(g, N_ALT);
    if (id < 0)
        return -1;
    int k = graft_test_one_in(3) ? 2 + (int)graft_test_below(2) : 1;
    for (int i = 0; i < k; i++) {
        if (i > 0)
            graft_test_put_str(&g->pat, "|");
        int kid = gen_seq(g, depth);
        if (kid < 0)
            return -1;
        g->nodes[id].kids[g->nodes[id].n_kids++] = kid;
    }
    return id;
}

/* A random pattern; false when it grew out of the node pool (then draw another). */
static bool gen_pattern(gpattern *g)
{
    g->pat.n = 0;
    graft_test_put(&g->pat, "", 0);
    g->n_nodes = 0;
    g->n_alts = graft_test_one_in(3) ? 2 + (int)graft_test_below(2) : 1;
    bool all_caret = graft_test_one_in(2); /* so that prefixes can die */
    for (int a = 0; a < g->n_alts; a++) {
        if (a > 0)
            graft_test_put_str(&g->pat, "|");
        g->alt_caret[a] = all_caret || graft_test_one_in(2);
        g->alt_dollar[a] = graft_test_one_in(3);
        if (g->alt_caret[a])
            graft_test_put_str(&g->pat, "^");
        g->alt_seq[a] = gen_seq(g, 0);
        if (g->alt_seq[a] < 0)
            return false;
        if (g->alt_dollar[a])
            graft_test_put_str(&g->pat, "$");
    }
    return true;
}

static uint32_t random_member(const cpset *s)
{
    for (int t = 0; t < 8; t++) {
        uint32_t cp = random_char();
        if (set_has(s, cp))
            return cp;
    }
    for (;;) {
        size_t i = graft_test_below(s->n);
        uint32_t cp = s->lo[i] + (uint32_t)graft_test_below((size_t)(s->hi[i] - s->lo[i]) + 1);
        if (cp < 0xD800 || cp > 0xDFFF)
            return cp;
    }
}

static void gen_match(const gpattern *g, int id, uint32_t *s, size_t *n, size_t cap)
{
    const gnode *nd = &g->nodes[id];
    switch (nd->kind) {
    case N_LIT:
        if (*n < cap)
            s[(*n)++] = random_member(&nd->set);
        break;
    case N_CAT:
        for (int i = 0; i < nd->n_kids; i++)
            gen_match(g, nd->kids[i], s, n, cap);
        break;
    case N_ALT:
        gen_match(g, nd->kids[graft_test_below((size_t)nd->n_kids)], s, n, cap);
        break;
    default: {
        int hi = nd->max < 0 || nd->max > nd->min + 3 ? nd->min + 3 : nd->max;
        int count = nd->min + (int)graft_test_below((size_t)(hi - nd->min + 1));
        for (int i = 0; i < count; i++)
            gen_match(g, nd->kids[0], s, n, cap);
        break;
    }
    }
}

#define STR_CAP 40

/* A string drawn to match (usually: the cap may cut it). */
static size_t gen_matching_string(const gpattern *g, uint32_t *s)
{
    size_t n = 0;
    int a = (int)graft_test_below((size_t)g->n_alts);
    if (!g->alt_caret[a])
        for (size_t k = graft_test_below(3); k > 0; k--)
            s[n++] = random_char();
    gen_match(g, g->alt_seq[a], s, &n, STR_CAP - 3);
    if (!g->alt_dollar[a])
        for (size_t k = graft_test_below(3); k > 0; k--)
            s[n++] = random_char();
    return n;
}

static size_t mutate(uint32_t *s, size_t n)
{
    for (size_t m = 1 + graft_test_below(2); m > 0; m--) {
        size_t r = graft_test_below(3);
        if (r == 0 && n > 0) { /* delete */
            size_t i = graft_test_below(n);
            memmove(s + i, s + i + 1, (n - i - 1) * sizeof *s);
            n--;
        } else if (r == 1 && n + 1 < STR_CAP) { /* insert */
            size_t i = graft_test_below(n + 1);
            memmove(s + i + 1, s + i, (n - i) * sizeof *s);
            s[i] = random_char();
            n++;
        } else if (n > 0) {
            s[graft_test_below(n)] = random_char();
        }
    }
    return n;
}

/* The code points at the edges of the pattern's sets (lo - 1, lo, hi, hi + 1), surrogates
 * left out; returns the count. */
static size_t edge_points(const gpattern *g, uint32_t *out, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cpset *set = &g->nodes[i].set;
        if (g->nodes[i].kind != N_LIT)
            continue;
        for (size_t r = 0; r < set->n; r++) {
            int64_t c[4] = {(int64_t)set->lo[r] - 1, set->lo[r], set->hi[r],
                            (int64_t)set->hi[r] + 1};
            for (int k = 0; k < 4; k++) {
                if (c[k] < 0 || c[k] > 0x10FFFF || (c[k] >= 0xD800 && c[k] <= 0xDFFF))
                    continue;
                bool seen = false;
                for (size_t j = 0; j < n && !seen; j++)
                    seen = out[j] == (uint32_t)c[k];
                if (!seen && n < cap)
                    out[n++] = (uint32_t)c[k];
            }
        }
    }
    return n;
}

/* After every live prefix of s[0..n), a step on each of some edge points agrees with the
 * oracles. */
static void check_edges(const graft__json_regex *re, oracle *o, const char *pat, size_t plen,
                        const uint32_t *s, size_t n, const uint32_t *edges, size_t n_edges)
{
    uint16_t states[72];
    uint32_t t[72];
    assert_true(n + 1 < 72);
    size_t fed = feed(re, s, n, states);
    memcpy(t, s, n * sizeof *s);
    for (size_t k = 0; k <= fed && k <= n; k++) {
        if (states[k] == DEAD)
            break;
        for (size_t e = 0; e < 12 && e < n_edges; e++) {
            uint32_t cp = edges[n_edges <= 12 ? e : graft_test_below(n_edges)];
            t[k] = cp;
            uint16_t nx = graft__json_regex_step(re, states[k], cp);
            bool live = nx != DEAD, want = oracle_live(o, t, k + 1);
            if (live != want)
                fail_on(live ? "step on an edge code point gives a live state, expected DEAD"
                             : "step on an edge code point gives DEAD, expected a live state",
                        pat, plen, t, k + 1);
            if (live && graft__json_regex_accepts(re, nx) != oracle_matches(o, t, k + 1))
                fail_on("accepts after an edge code point disagrees with PCRE2", pat, plen, t,
                        k + 1);
        }
        if (k < n)
            t[k] = s[k];
    }
}

/* A breadth-first walk of the automaton over the alphabet and some edge points, from start,
 * up to BFS_STATES states and strings of BFS_DEPTH code points: every transition agrees with
 * the oracles for the first string found to reach its state, and every other string found to
 * reach a state agrees with PCRE2 on whether it matches (a state stands for strings with the
 * same future). */
#define BFS_STATES 48
#define BFS_DEPTH 6
static int32_t bfs_index[65536];

static void check_bfs(const graft__json_regex *re, oracle *o, const char *pat, size_t plen,
                      const uint32_t *edges, size_t n_edges)
{
    static uint32_t reps[BFS_STATES][BFS_DEPTH + 1];
    static size_t rep_len[BFS_STATES];
    static uint16_t ids[BFS_STATES];
    uint32_t chars[64], t[BFS_DEPTH + 2];
    size_t n_chars = 0;
    for (size_t i = 0; i < N_ALPHABET; i++) {
        bool seen = false;
        for (size_t j = 0; j < n_chars && !seen; j++)
            seen = chars[j] == alphabet[i];
        if (!seen)
            chars[n_chars++] = alphabet[i];
    }
    for (size_t i = 0; i < 8 && i < n_edges; i++)
        chars[n_chars++] = edges[graft_test_below(n_edges)];
    size_t n_states = 0, head = 0;
    ids[0] = graft__json_regex_start(re);
    if (ids[0] == DEAD)
        return;
    rep_len[0] = 0;
    bfs_index[ids[0]] = 0;
    n_states = 1;
    while (head < n_states) {
        size_t at = head++;
        size_t len = rep_len[at];
        memcpy(t, reps[at], len * sizeof *t);
        for (size_t c = 0; c < n_chars; c++) {
            t[len] = chars[c];
            uint16_t nx = graft__json_regex_step(re, ids[at], chars[c]);
            bool live = nx != DEAD, want = oracle_live(o, t, len + 1);
            if (live != want)
                fail_on(live ? "step gives a live state, expected DEAD (walk)"
                             : "step gives DEAD, expected a live state (walk)",
                        pat, plen, t, len + 1);
            if (!live)
                continue;
            if (graft__json_regex_accepts(re, nx) != oracle_matches(o, t, len + 1))
                fail_on("accepts disagrees with PCRE2 (walk)", pat, plen, t, len + 1);
            if (bfs_index[nx] < 0 && n_states < BFS_STATES && len + 1 <= BFS_DEPTH) {
                bfs_index[nx] = (int32_t)n_states;
                ids[n_states] = nx;
                memcpy(reps[n_states], t, (len + 1) * sizeof *t);
                rep_len[n_states] = len + 1;
                n_states++;
            }
        }
    }
    for (size_t i = 0; i < n_states; i++)
        bfs_index[ids[i]] = -1;
}

static bool message_names_bound(const char *msg)
{
    static const char *const words[] = {"state", "automaton", "large", "complex", "bound",
                                        "limit", "big"};
    for (const char *p = msg; *p != '\0'; p++)
        for (size_t w = 0; w < sizeof words / sizeof words[0]; w++)
            if (strncasecmp(p, words[w], strlen(words[w])) == 0)
                return true;
    return false;
}

#define N_PATTERNS 5000
#define N_MATCHING 8
#define N_MUTATED 8
#define N_RANDOM 6

static void test_random_patterns(void **state)
{
    (void)state;
    seed_rng(0x72616e646f6d);
    gpattern *g = calloc(1, sizeof *g);
    the_gen = g;
    assert_non_null(g);
    size_t n_refused = 0, n_strings = 0, n_matching = 0, n_compiled = 0;
    brute_checks = dead_prefixes = live_prefixes = matching_prefixes = 0;
    memset(bfs_index, 0xFF, sizeof bfs_index);
    for (int p = 0; p < N_PATTERNS; p++) {
        while (!gen_pattern(g))
            ;
        const char *pat = (const char *)g->pat.p;
        size_t plen = g->pat.n;
        graft__json_regex *re = NULL;
        char *err = NULL;
        int rc = graft__json_regex_compile(pat, plen, &re, &err);
        if (rc != GRAFT_OK) {
            if (rc != GRAFT_EINVAL || err == NULL || !message_names_bound(err)) {
                print_error("compile returned %d: %s\n", rc, err != NULL ? err : "(none)");
                graft_free(err);
                fail_on("a random pattern of the subset is refused", pat, plen, NULL, 0);
            }
            if (n_refused < 3) {
                print_message("refused for the bound: %s (", err);
                graft_test_print_literal((const uint8_t *)pat, plen);
                print_message(")\n");
            }
            graft_free(err);
            n_refused++;
            continue;
        }
        graft_free(err);
        hold(re);
        n_compiled++;
        oracle *o = &the_oracle;
        oracle_open(o, pat, plen);
        assert_false(o->has_empty);
        if (graft__json_regex_start(re) == DEAD)
            fail_on("start is DEAD for a pattern that matches", pat, plen, NULL, 0);
        uint32_t s[STR_CAP], edges[256];
        size_t n_edges = edge_points(g, edges, 256);
        if (p % 4 == 0)
            check_bfs(re, o, pat, plen, edges, n_edges);
        for (int k = 0; k < N_MATCHING + N_MUTATED + N_RANDOM; k++) {
            size_t n;
            if (k < N_MATCHING) {
                n = gen_matching_string(g, s);
            } else if (k < N_MATCHING + N_MUTATED) {
                n = gen_matching_string(g, s);
                n = mutate(s, n);
            } else {
                n = graft_test_below(9);
                for (size_t i = 0; i < n; i++)
                    s[i] = random_char();
            }
            n_strings++;
            if (k < N_MATCHING && oracle_matches(o, s, n))
                n_matching++;
            check_string(re, o, pat, plen, s, n, true, graft_test_one_in(4));
            if (k == 0 || k == N_MATCHING)
                check_edges(re, o, pat, plen, s, n, edges, n_edges);
        }
        release(re);
        oracle_close(o);
    }
    print_message("random patterns: %zu compiled, %zu refused for the bound; %zu strings, %zu "
                  "drawn to match that do; prefixes: %zu live, %zu dead (%zu brute-checked), "
                  "%zu matching\n",
                  n_compiled, n_refused, n_strings, n_matching, live_prefixes, dead_prefixes,
                  brute_checks, matching_prefixes);
    if (n_refused * 100 > N_PATTERNS)
        fail_msg("%zu of %d random patterns refused for the bound", n_refused, N_PATTERNS);
    free_gen();
}

static void free_gen(void)
{
    gpattern *g = the_gen;
    if (g != NULL) {
        free(g->pat.p);
        free(g);
    }
    the_gen = NULL;
}

/* Two compiled patterns used in turn do not disturb each other; a state is a value that can
 * be stepped from again (a fork). */
static void test_purity_interleaved(void **state)
{
    (void)state;
    const char *p1 = "^(?:ab|a)*c?$", *p2 = "\\d{2,}|x.y";
    graft__json_regex *r1 = compile_ok(p1, strlen(p1)), *r2 = compile_ok(p2, strlen(p2));
    const uint32_t s[] = {'a', 'b', 'a', 'a', 'b', 'c'};
    const uint32_t t[] = {'x', '1', 'x', 0xE9, 'y', '2', '3'};
    uint16_t a1[8], a2[8], b1[8], b2[8];
    size_t f1 = feed(r1, s, 6, a1), f2 = feed(r2, t, 7, a2);
    assert_int_equal(f1, 6);
    assert_int_equal(f2, 7);
    uint16_t x = graft__json_regex_start(r1), y = graft__json_regex_start(r2);
    b1[0] = x, b2[0] = y;
    for (size_t k = 0; k < 7; k++) {
        if (k < 6)
            b1[k + 1] = x = graft__json_regex_step(r1, x, s[k]);
        b2[k + 1] = y = graft__json_regex_step(r2, y, t[k]);
        assert_int_not_equal(y, DEAD);
        if (k < 6)
            assert_int_not_equal(x, DEAD);
    }
    for (size_t k = 0; k <= 6; k++)
        assert_int_equal(a1[k], b1[k]);
    for (size_t k = 0; k <= 7; k++)
        assert_int_equal(a2[k], b2[k]);
    assert_true(graft__json_regex_accepts(r1, a1[6]));
    assert_true(graft__json_regex_accepts(r2, a2[7]));
    uint16_t fork = graft__json_regex_step(r1, a1[2], 'c');
    assert_int_not_equal(fork, DEAD);
    assert_true(graft__json_regex_accepts(r1, fork));
    assert_int_equal(graft__json_regex_step(r1, a1[2], 'a'), a1[3]);
    assert_int_equal(graft__json_regex_step(r1, fork, 'a'), DEAD);
    release(r1);
    release(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hand_cases_match, release_held),
        cmocka_unit_test_teardown(test_punctuation_escapes, release_held),
        cmocka_unit_test_teardown(test_special_code_points, release_held),
        cmocka_unit_test_teardown(test_length_is_honoured, release_held),
        cmocka_unit_test_teardown(test_hand_cases_liveness, release_held),
        cmocka_unit_test_teardown(test_refusals, release_held),
        cmocka_unit_test_teardown(test_bounds, release_held),
        cmocka_unit_test_teardown(test_bounds_nested, release_held),
        cmocka_unit_test_teardown(test_open_cases, release_held),
        cmocka_unit_test_teardown(test_random_patterns, release_held),
        cmocka_unit_test_teardown(test_purity_interleaved, release_held),
        cmocka_unit_test_teardown(test_large_classes, release_held),
        cmocka_unit_test_teardown(test_deep_nesting, release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
