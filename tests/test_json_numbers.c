/*
 * test_json_numbers.c: number and integer values held to minimum, maximum, exclusiveMinimum
 * and exclusiveMaximum by the schema'd recognizer (graft__json_schema_compile,
 * graft__json_syntax_*, engine/json_output.h), checked against an oracle written here from
 * the header alone, without reference to json_syntax.c or json_schema.c.
 *
 * Every schema here is {"type":"object","properties":{"a": S},"required":["a"]} and every text
 * {"a":<value>} (a space may follow the colon and the value, and one the closing brace). The
 * recognizer must refuse exactly the first byte after which no completion of the text is an
 * instance, and done must hold exactly from the closing brace on. What the header says, as
 * read here:
 *   - a schema'd number has at most 18 digits before its point and 18 after it (and 2 in its
 *     exponent); a bounded number (one with a bound keyword) is written without an exponent
 *     (whether one whose every keyword constrains nothing, as minimum -1e30, takes one, the
 *     header does not say: no text here asks);
 *     an "integer" has neither a point nor an exponent; JSON's grammar otherwise (no '+', no
 *     leading zeros, a digit on both sides of the point); "-0" is the value 0;
 *   - the bounds mean what draft 2020-12 says, all the keywords given holding together; a bound
 *     written as a JSON integer is that integer, one written as a real is the shortest decimal
 *     that reads back as the same double (0.1 is 0.1, 9007199254740993.0 is 9007199254740992);
 *   - only the property "a" is listed, so nothing (no ',') can follow its value but whitespace
 *     and the closing brace.
 * The oracle:
 *   - exact decimals (a sign, significant digits and a power of ten, any length) compared
 *     digit by digit; bounds read from the schema with jansson (an integer exactly, a real as
 *     the shortest "%.*e" that strtod reads back as the same double);
 *   - a number prefix has a completion within the bounds iff a search over its one-byte
 *     extensions finds one, for each length (1 to 18) its part before the point may end with:
 *     then its completions are one interval, from its least to its greatest (the prefix followed
 *     by zeros, or by nines to that length and to 18 fraction digits, signed); when either end
 *     is within the bounds, there is one; when the whole interval lies beyond one side, there
 *     is none; else the search goes on into the extensions (a digit, the point), whose
 *     intervals are disjoint and in order, so that at most two hold a bound strictly inside.
 *     The complete number itself is the least or greatest end of its prefix's interval, so it
 *     is never missed;
 *   - a lexer over the bytes: the fixed head, one space, the value (the number, or null and
 *     simple strings where a type list allows them), one space, '}', one space.
 * Checks:
 *   - hand cases: the first refused byte, or acceptance (done after the closing brace), or an
 *     open prefix, each expectation first held to the oracle (so a wrong one fails too);
 *   - direct cases without the oracle: bounds in array items, anyOf, $ref and on two
 *     properties; a tab or a line break ending a number;
 *   - random bound sets (integer and number; JSON integers, plain reals, reals with exponents,
 *     up to 6 or so significant digits, sometimes up to 17; both signs; ranges across 0,
 *     narrow and single-point ranges, each keyword inclusive or exclusive or both, extremes near
 *     10^18 and 10^-18, JSON integers up to 2^63, reals up to 1.8e308 and down to 5e-324; at
 *     times in a type list beside "null"): the compiler accepts exactly
 *     the sets the oracle finds a number for (a list with null and no number either way),
 *     and then numbers near and across the bounds, random digit strings (19 digits too,
 *     leading zeros) and byte mutations of them: the first refused byte and done after every
 *     prefix are the oracle's; and for a quarter of the texts, after every accepted prefix a
 *     copy of the state fed one more byte answers what the oracle says (the state is a value);
 *   - compile refusals (GRAFT_EINVAL, a message naming the keyword or saying that no number is
 *     an instance) and acceptances.
 * A disagreement prints the schema, the seed (GRAFT_TEST_SEED overrides it) and the text (also
 * shrunk) as C string literals; every disagreement is counted and the test fails at its end.
 * GRAFT_TEST_SCALE multiplies the random bound sets (default 40: 16000 sets).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "json_oracle.h"
#include "tally.h"
#include "graft.h"
#include "engine/json_output.h"

/* ---- the PRNG, reporting ----------------------------------------------------------------- */

static uint64_t seed = 0x6a736f6e5f6e756du;

enum { MAX_PRINTED = 16 };

static void begin_test(uint64_t stream)
{
    graft_test_tally_begin(MAX_PRINTED);
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

/* ---- exact decimals ------------------------------------------------------------------------
 * value = sign * 0.d[0] d[1] ... d[n-1] * 10^exp, d[0] and d[n-1] not '0'; zero: sign 0. */

enum { DEC_DIGITS = 96 };

typedef struct dec {
    int sign;
    long exp;
    int n;
    char d[DEC_DIGITS];
} dec;

/* Reads -?digits(.digits*)?([eE][+-]?digits)? */
static dec dec_parse(const char *s)
{
    dec x;
    memset(&x, 0, sizeof x);
    bool neg = false;
    if (*s == '-') {
        neg = true;
        s++;
    }
    char all[2 * DEC_DIGITS];
    int na = 0, nfrac = 0;
    while (isdigit((unsigned char)*s)) {
        assert_true(na < (int)sizeof all);
        all[na++] = *s++;
    }
    if (*s == '.') {
        s++;
        while (isdigit((unsigned char)*s)) {
            assert_true(na < (int)sizeof all);
            all[na++] = *s++;
            nfrac++;
        }
    }
    long e = 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        long es = 1;
        if (*s == '+') {
            s++;
        } else if (*s == '-') {
            es = -1;
            s++;
        }
        while (isdigit((unsigned char)*s)) {
            if (e < 100000)
                e = e * 10 + (*s - '0');
            s++;
        }
        e *= es;
    }
    assert_true(*s == '\0');
    int lead = 0;
    while (lead < na && all[lead] == '0')
        lead++;
    if (lead == na)
        return x; /* zero, whatever its sign */
    int end = na;
    while (all[end - 1] == '0')
        end--;
    x.n = end - lead;
    assert_true(x.n <= DEC_DIGITS);
    memcpy(x.d, all + lead, (size_t)x.n);
    x.exp = (long)(na - lead) + e - nfrac;
    x.sign = neg ? -1 : 1;
    return x;
}

static int dec_cmp_mag(const dec *a, const dec *b)
{
    if (a->exp != b->exp)
        return a->exp < b->exp ? -1 : 1;
    int n = a->n > b->n ? a->n : b->n;
    for (int i = 0; i < n; i++) {
        char ca = i < a->n ? a->d[i] : '0', cb = i < b->n ? b->d[i] : '0';
        if (ca != cb)
            return ca < cb ? -1 : 1;
    }
    return 0;
}

static int dec_cmp(const dec *a, const dec *b)
{
    if (a->sign != b->sign)
        return a->sign < b->sign ? -1 : 1;
    if (a->sign == 0)
        return 0;
    int m = dec_cmp_mag(a, b);
    return a->sign > 0 ? m : -m;
}

/* x as a plain decimal (no exponent) into out; false when that would be long (|exp| large) */
static bool dec_plain(const dec *x, char *out, size_t cap)
{
    if (x->sign == 0) {
        snprintf(out, cap, "0");
        return true;
    }
    if (x->exp > 22 || x->exp < -22)
        return false;
    size_t o = 0;
    char buf[160];
    if (x->sign < 0)
        buf[o++] = '-';
    if (x->exp <= 0) {
        buf[o++] = '0';
        buf[o++] = '.';
        for (long i = 0; i < -x->exp; i++)
            buf[o++] = '0';
        memcpy(buf + o, x->d, (size_t)x->n);
        o += (size_t)x->n;
    } else if (x->exp >= x->n) {
        memcpy(buf + o, x->d, (size_t)x->n);
        o += (size_t)x->n;
        for (long i = x->n; i < x->exp; i++)
            buf[o++] = '0';
    } else {
        memcpy(buf + o, x->d, (size_t)x->exp);
        o += (size_t)x->exp;
        buf[o++] = '.';
        memcpy(buf + o, x->d + x->exp, (size_t)(x->n - x->exp));
        o += (size_t)(x->n - x->exp);
    }
    buf[o] = '\0';
    if (o + 1 > cap)
        return false;
    memcpy(out, buf, o + 1);
    return true;
}

/* The shortest "%.*e" of v that strtod reads back as v. */
static void shortest(double v, char *out, size_t cap)
{
    for (int p = 0; p <= 16; p++) {
        snprintf(out, cap, "%.*e", p, v);
        if (strtod(out, NULL) == v)
            return;
    }
    snprintf(out, cap, "%.16e", v);
}

/* ---- the bounds ------------------------------------------------------------------------------ */

enum { K_MIN, K_XMIN, K_MAX, K_XMAX, N_KEYS };
static const char *const key_names[N_KEYS] = {"minimum", "exclusiveMinimum", "maximum",
                                              "exclusiveMaximum"};

typedef struct ob {
    bool number_ok;   /* the schema types "number" or "integer" */
    bool integer;     /* ... "integer" (no point) */
    bool null_ok;     /* a type list holds "null" */
    bool string_ok;   /* ... "string" (the strings here: printable ASCII, no escapes) */
    bool exponent_ok; /* "number" without any bound keyword */
    bool has[N_KEYS];
    dec v[N_KEYS];
} ob;

static bool fails_lower(const ob *b, const dec *x)
{
    return (b->has[K_MIN] && dec_cmp(x, &b->v[K_MIN]) < 0) ||
           (b->has[K_XMIN] && dec_cmp(x, &b->v[K_XMIN]) <= 0);
}

static bool fails_upper(const ob *b, const dec *x)
{
    return (b->has[K_MAX] && dec_cmp(x, &b->v[K_MAX]) > 0) ||
           (b->has[K_XMAX] && dec_cmp(x, &b->v[K_XMAX]) >= 0);
}

static bool in_bounds(const ob *b, const dec *x)
{
    return !fails_lower(b, x) && !fails_upper(b, x);
}

/* A bound's value as the schema gives it: an integer exactly, a real as its double's shortest
 * decimal. */
static dec bound_of(const json_t *v)
{
    char buf[64];
    if (json_is_integer(v))
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else
        shortest(json_real_value(v), buf, sizeof buf);
    return dec_parse(buf);
}

/* The oracle's reading of S (a schema the tests here write: "type" a name or a list, bound
 * keywords with number values). */
static ob ob_of(const char *s_text)
{
    ob b;
    memset(&b, 0, sizeof b);
    json_error_t err;
    json_t *s = json_loads(s_text, 0, &err);
    if (s == NULL)
        fail_msg("the test's schema %s is not JSON: %s", s_text, err.text);
    json_t *type = json_object_get(s, "type");
    size_t n_types = json_is_array(type) ? json_array_size(type) : 1;
    for (size_t i = 0; i < n_types; i++) {
        const char *name = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        assert_non_null(name);
        if (strcmp(name, "integer") == 0)
            b.number_ok = b.integer = true;
        else if (strcmp(name, "number") == 0)
            b.number_ok = true;
        else if (strcmp(name, "null") == 0)
            b.null_ok = true;
        else if (strcmp(name, "string") == 0)
            b.string_ok = true;
    }
    bool any = false;
    for (int k = 0; k < N_KEYS; k++) {
        json_t *v = json_object_get(s, key_names[k]);
        if (v == NULL)
            continue;
        assert_true(json_is_number(v));
        b.has[k] = true;
        b.v[k] = bound_of(v);
        any = true;
    }
    b.exponent_ok = b.number_ok && !b.integer && !any;
    json_decref(s);
    return b;
}

/* A keyword that constrains nothing a schema'd text can write: a lower one at or below -10^18,
 * an upper one at or above 10^18. */
static bool vacuous(const ob *b, int k)
{
    static dec big;
    if (big.sign == 0)
        big = dec_parse("1000000000000000000");
    dec neg_big = big;
    neg_big.sign = -1;
    if (k == K_MIN || k == K_XMIN)
        return dec_cmp(&b->v[k], &neg_big) <= 0;
    return dec_cmp(&b->v[k], &big) >= 0;
}

static bool bounded(const ob *b)
{
    for (int k = 0; k < N_KEYS; k++)
        if (b->has[k] && !vacuous(b, k))
            return true;
    return false;
}

/* ---- a number prefix and its completions ------------------------------------------------- */

enum { MAX_PART = 18 };

typedef struct numpre {
    bool neg;
    int k;        /* digits before the point */
    char d[MAX_PART + 1];
    bool point;
    int j;        /* digits after it */
    char f[MAX_PART + 1];
} numpre;

static size_t put_nines(char *out, size_t o, int n)
{
    for (int i = 0; i < n; i++)
        out[o++] = '9';
    return o;
}

/* The magnitude of the least (greatest == false) or greatest completion of p's digits (p's sign
 * aside) whose part before the point has exactly len digits (p->k <= len; len == p->k once p
 * has its point), as an exact decimal. */
static dec magnitude(const ob *b, const numpre *p, int len, bool greatest)
{
    char t[80];
    size_t o = 0;
    if (!p->point) {
        memcpy(t, p->d, (size_t)p->k);
        o = (size_t)p->k;
        if (greatest) {
            o = put_nines(t, o, len - p->k);
            if (!b->integer) {
                t[o++] = '.';
                o = put_nines(t, o, MAX_PART);
            }
        } else if (p->k < len) {
            t[o++] = p->k == 0 && len > 1 ? '1' : '0'; /* no leading zero */
            for (int i = p->k + 1; i < len; i++)
                t[o++] = '0';
        }
    } else {
        memcpy(t, p->d, (size_t)p->k);
        o = (size_t)p->k;
        t[o++] = '.';
        memcpy(t + o, p->f, (size_t)p->j);
        o += (size_t)p->j;
        if (greatest)
            o = put_nines(t, o, MAX_PART - p->j);
        else if (p->j == 0)
            t[o++] = '0';
    }
    t[o] = '\0';
    return dec_parse(t);
}

static unsigned long viable_calls;

/* Whether some completion of p whose part before the point has exactly len digits is within
 * the bounds. Those completions are one interval, from the least to the greatest, and so are
 * those of each one-byte extension; the extensions' intervals are disjoint and in order, so at
 * most two of them hold a bound strictly inside, and the search is linear in the digits. */
static bool viable_len(const ob *b, const numpre *p, int len)
{
    viable_calls++;
    dec least = magnitude(b, p, len, false), most = magnitude(b, p, len, true);
    dec lo = p->neg ? most : least, hi = p->neg ? least : most;
    if (p->neg) {
        lo.sign = -lo.sign;
        hi.sign = -hi.sign;
    }
    if (in_bounds(b, &lo) || in_bounds(b, &hi))
        return true;
    if (fails_lower(b, &hi) || fails_upper(b, &lo))
        return false;
    numpre c;
    if (!p->point && p->k < len) {
        for (char digit = p->k == 0 && len > 1 ? '1' : '0'; digit <= '9'; digit++) {
            c = *p;
            c.d[c.k++] = digit;
            if (viable_len(b, &c, len))
                return true;
        }
    } else if (!p->point) {
        if (!b->integer) {
            c = *p;
            c.point = true;
            if (viable_len(b, &c, len))
                return true;
        }
    } else if (p->j < MAX_PART) {
        for (char digit = '0'; digit <= '9'; digit++) {
            c = *p;
            c.f[c.j++] = digit;
            if (viable_len(b, &c, len))
                return true;
        }
    }
    return false;
}

/* Whether some completion of p (digits, a point and digits where the type and the limits allow)
 * is within the bounds: over every length of the part before the point that p allows (one
 * after a leading 0). */
static bool viable(const ob *b, const numpre *p)
{
    if (p->point)
        return viable_len(b, p, p->k);
    int most = p->k > 0 && p->d[0] == '0' ? 1 : MAX_PART;
    for (int len = p->k > 0 ? p->k : 1; len <= most; len++)
        if (viable_len(b, p, len))
            return true;
    return false;
}

/* Whether the schema leaves some number: from the empty prefix, either sign. */
static bool any_number(const ob *b)
{
    numpre p;
    memset(&p, 0, sizeof p);
    if (viable(b, &p))
        return true;
    p.neg = true;
    return viable(b, &p);
}

static bool complete(const numpre *p)
{
    return p->k > 0 && (!p->point || p->j > 0);
}

static dec value_of(const numpre *p)
{
    char t[48];
    size_t o = 0;
    if (p->neg)
        t[o++] = '-';
    memcpy(t + o, p->d, (size_t)p->k);
    o += (size_t)p->k;
    if (p->point) {
        t[o++] = '.';
        memcpy(t + o, p->f, (size_t)p->j);
        o += (size_t)p->j;
    }
    t[o] = '\0';
    return dec_parse(t);
}

/* ---- the oracle over the bytes of {"a":<value>} ------------------------------------------ */

static const char HEAD[] = "{\"a\":";
enum { HEAD_LEN = sizeof HEAD - 1 };

/* refused: the index of the first byte after which no completion is an instance (n when none);
 * done[i]: whether t[0..i] (i < refused) is a complete text. */
static size_t oracle(const ob *b, const uint8_t *t, size_t n, bool *done)
{
    enum { HEAD_S, VALUE, VALUE_SP, NUM, EXP_E, EXP_SIGN, EXP_DIGITS, LIT, STR, AFTER,
           AFTER_SP, DONE, DONE_SP } st = HEAD_S;
    numpre p;
    memset(&p, 0, sizeof p);
    bool started = false; /* a '-' or a digit was read */
    int exp_digits = 0;
    size_t pos = 0;       /* HEAD_S, LIT: bytes matched */
    for (size_t i = 0; i < n; i++) {
        uint8_t c = t[i];
        bool ok = false;
        switch (st) {
        case HEAD_S:
            ok = c == (uint8_t)HEAD[pos];
            if (ok && ++pos == HEAD_LEN)
                st = VALUE;
            break;
        case VALUE:
        case VALUE_SP:
            if (c == ' ' && st == VALUE) {
                ok = true;
                st = VALUE_SP;
            } else if (c == 'n' && b->null_ok) {
                ok = true;
                st = LIT;
                pos = 1;
            } else if (c == '"' && b->string_ok) {
                ok = true;
                st = STR;
            } else if (b->number_ok && (c == '-' || isdigit(c))) {
                st = NUM;
                goto number;
            }
            break;
        case LIT:
            ok = c == (uint8_t)"null"[pos];
            if (ok && ++pos == 4)
                st = AFTER;
            break;
        case STR:
            ok = c >= 0x20 && c < 0x7F && c != '\\';
            if (c == '"')
                st = AFTER;
            break;
        case NUM:
        number:
            if (c == '-') {
                if (started)
                    break;
                p.neg = true;
            } else if (isdigit(c)) {
                if (!p.point) {
                    if (p.k > 0 && (p.d[0] == '0' || p.k == MAX_PART))
                        break;
                    p.d[p.k++] = (char)c;
                } else {
                    if (p.j == MAX_PART)
                        break;
                    p.f[p.j++] = (char)c;
                }
            } else if (c == '.') {
                if (b->integer || p.point || p.k == 0)
                    break;
                p.point = true;
            } else if (c == 'e' || c == 'E') {
                ok = b->exponent_ok && complete(&p);
                st = EXP_E;
                break;
            } else if (c == ' ' || c == '}') {
                if (!complete(&p)) /* started, so p has a sign or digits */
                    break;
                dec v = value_of(&p);
                ok = in_bounds(b, &v);
                st = c == ' ' ? AFTER_SP : DONE;
                break;
            } else {
                break;
            }
            started = true;
            ok = viable(b, &p);
            break;
        case EXP_E:
        case EXP_SIGN:
        case EXP_DIGITS:
            if ((c == '+' || c == '-') && st == EXP_E) {
                ok = true;
                st = EXP_SIGN;
            } else if (isdigit(c)) {
                ok = exp_digits < 2;
                exp_digits++;
                st = EXP_DIGITS;
            } else if (c == ' ' || c == '}') {
                ok = st == EXP_DIGITS;
                st = c == ' ' ? AFTER_SP : DONE;
            }
            break;
        case AFTER:
        case AFTER_SP:
            if (c == ' ' && st == AFTER) {
                ok = true;
                st = AFTER_SP;
            } else if (c == '}') {
                ok = true;
                st = DONE;
            }
            break;
        case DONE:
            ok = c == ' ';
            st = DONE_SP;
            break;
        case DONE_SP:
            break;
        }
        if (!ok)
            return i;
        done[i] = st == DONE || st == DONE_SP;
    }
    return n;
}

/* ---- the recognizer ------------------------------------------------------------------------ */

/* S wrapped as the property "a" of the root object (malloc'd). */
static char *wrap(const char *s)
{
    const char *head = "{\"type\":\"object\",\"properties\":{\"a\":";
    const char *tail = "},\"required\":[\"a\"]}";
    size_t n = strlen(head) + strlen(s) + strlen(tail) + 1;
    char *w = malloc(n);
    assert_non_null(w);
    snprintf(w, n, "%s%s%s", head, s, tail);
    return w;
}

static int compile(const char *s, graft__json_schema **out, char **errmsg)
{
    char *w = wrap(s);
    int rc = graft__json_schema_compile(w, strlen(w), out, errmsg);
    free(w);
    return rc;
}

/* The first refused byte (n when none) and done after each accepted byte. */
static size_t recognize(const graft__json_schema *schema, const uint8_t *t, size_t n, bool *done)
{
    graft__json_syntax s;
    graft__json_syntax_init_schema(&s, schema);
    for (size_t i = 0; i < n; i++) {
        if (!graft__json_syntax_feed(&s, t[i]))
            return i;
        done[i] = graft__json_syntax_done(&s);
    }
    return n;
}

enum { MAX_TEXT = 96 };

/* Where the recognizer and the oracle first part on t: the byte index, or -1 when they agree. */
static long disagreement(const graft__json_schema *schema, const ob *b, const uint8_t *t,
                         size_t n, size_t *got, size_t *want)
{
    bool rdone[MAX_TEXT], odone[MAX_TEXT];
    assert_true(n <= MAX_TEXT);
    *got = recognize(schema, t, n, rdone);
    *want = oracle(b, t, n, odone);
    size_t upto = *got < *want ? *got : *want;
    for (size_t i = 0; i < upto; i++)
        if (rdone[i] != odone[i])
            return (long)i;
    return *got != *want ? (long)upto : -1;
}

/* Counts a disagreement; prints it while few were; whether it did. */
static bool report(const char *s, const uint8_t *t, size_t n, size_t got, size_t want, long at,
                   const char *what)
{
    if (!graft_test_tally_count())
        return false;
    print_error("%s: S = %s (seed 0x%" PRIx64 "), text ", what, s, seed);
    graft_test_print_literal(t, n);
    if (got != want)
        print_error(": first refused byte: recognizer %zu, oracle %zu (n = %zu)\n", got, want, n);
    else
        print_error(": done differs after byte %ld\n", at);
    return true;
}

/* Compares on t and, on a disagreement, prints it and a shrunk text that still disagrees
 * (bytes after the head deleted one at a time while some disagreement remains). */
static void compare(const char *s, const graft__json_schema *schema, const ob *b,
                    const uint8_t *t, size_t n)
{
    size_t got, want;
    long at = disagreement(schema, b, t, n, &got, &want);
    if (at < 0)
        return;
    if (!report(s, t, n, got, want, at, "disagreement"))
        return;
    uint8_t u[MAX_TEXT];
    size_t m = n;
    memcpy(u, t, n);
    for (bool shrunk = true; shrunk;) {
        shrunk = false;
        for (size_t i = m; i-- > HEAD_LEN;) {
            uint8_t v[MAX_TEXT];
            memcpy(v, u, i);
            memcpy(v + i, u + i + 1, m - i - 1);
            size_t g2, w2;
            if (disagreement(schema, b, v, m - 1, &g2, &w2) >= 0) {
                memcpy(u, v, m - 1);
                m--;
                shrunk = true;
            }
        }
        /* also cut the text at the point of disagreement */
        size_t g2, w2;
        long a2 = disagreement(schema, b, u, m, &g2, &w2);
        if (a2 >= 0 && (size_t)a2 + 1 < m) {
            m = (size_t)a2 + 1;
            shrunk = true;
        }
    }
    size_t g3, w3;
    long a3 = disagreement(schema, b, u, m, &g3, &w3);
    if (m < n) {
        print_error("  shrunk: ");
        graft_test_print_literal(u, m);
        print_error(": recognizer %zu, oracle %zu, at %ld\n", g3, w3, a3);
    }
}

/* The state is a plain value: after each accepted prefix of t (from the head on), a copy fed one more byte (from
 * a small alphabet) answers what the oracle says of the prefix and that byte, done included,
 * and the original goes on unaffected (compare() checks it against the oracle). */
static void probe_copies(const char *s, const graft__json_schema *schema, const ob *b,
                         const uint8_t *t, size_t n)
{
    static const char alphabet[] = "0123456789-.eE+} ,n\t\n";
    graft__json_syntax st;
    graft__json_syntax_init_schema(&st, schema);
    uint8_t u[MAX_TEXT + 1];
    for (size_t i = 0; i <= n; i++) {
        if (i < HEAD_LEN) { /* the oracle reads the head as fixed bytes */
            if (i == n || !graft__json_syntax_feed(&st, t[i]))
                break;
            continue;
        }
        graft__json_syntax copy = st;
        uint8_t c = (uint8_t)alphabet[graft_test_below(sizeof alphabet - 1)];
        memcpy(u, t, i);
        u[i] = c;
        bool odone[MAX_TEXT + 1];
        bool want = oracle(b, u, i + 1, odone) == i + 1;
        bool fed = graft__json_syntax_feed(&copy, c);
        /* a tab or a line break: whitespace the oracle does not read, fed to the copy alone */
        if (c != '\t' && c != '\n' &&
            (fed != want || (want && graft__json_syntax_done(&copy) != odone[i]))) {
            if (graft_test_tally_count()) {
                print_error("a copy fed '%c' after %zu bytes: S = %s, text ", c, i, s);
                graft_test_print_literal(u, i + 1);
                print_error(": the oracle says %s\n", want ? "accepted" : "refused");
            }
        }
        if (i == n || !graft__json_syntax_feed(&st, t[i]))
            break;
    }
}

/* ---- hand cases ------------------------------------------------------------------------------ */

enum { ACCEPT = -1, OPEN = -2 };

typedef struct hand {
    const char *s;    /* S */
    const char *text;
    long expect;      /* the first refused byte, ACCEPT (accepted, done at the end), OPEN
                         (accepted, not done) */
} hand;

#define INT_18_130 "{\"type\":\"integer\",\"minimum\":18,\"exclusiveMaximum\":130}"
#define NUM_0_1 "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}"
#define NUM_5_5 "{\"type\":\"number\",\"minimum\":-5,\"maximum\":5}"
#define NUM_ONE_TENTH "{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.1}"
#define NUM_NEG "{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-1.25}"
#define INT_STRADDLE "{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}"
#define NUM_TINY "{\"type\":\"number\",\"minimum\":1.5e-17,\"maximum\":2e-17}"
#define Z18 "000000000000000000"
#define N18 "999999999999999999"

static const hand hands[] = {
    /* the brief's integer example: 18 <= a < 130 */
    {INT_18_130, "{\"a\":17}", 6},
    {INT_18_130, "{\"a\":5", OPEN},
    {INT_18_130, "{\"a\":5}", 6},
    {INT_18_130, "{\"a\":50}", ACCEPT},
    {INT_18_130, "{\"a\":-", 5},
    {INT_18_130, "{\"a\":13", 6}, /* 13, 130..139, 1300.. are all out */
    {INT_18_130, "{\"a\":1300}", 6},
    {INT_18_130, "{\"a\":12", OPEN},
    {INT_18_130, "{\"a\":129}", ACCEPT},
    {INT_18_130, "{\"a\":18}", ACCEPT},
    {INT_18_130, "{\"a\":18 }", ACCEPT},
    {INT_18_130, "{\"a\": 18 } ", ACCEPT},
    {INT_18_130, "{\"a\":18  }", 8},
    {INT_18_130, "{\"a\":18,", 7},
    {INT_18_130, "{\"a\":1.5}", 6},
    {INT_18_130, "{\"a\":1e2}", 6},
    {INT_18_130, "{\"a\":0", 5},
    {INT_18_130, "{\"a\":20}", ACCEPT},
    {INT_18_130, "{\"a\":200}", 7},
    {INT_18_130, "{\"a\":+20}", 5},
    {INT_18_130, "{\"a\":\"20\"}", 5},
    /* the brief's number example: 0 < a <= 1 */
    {NUM_0_1, "{\"a\":0}", 6},
    {NUM_0_1, "{\"a\":0.0", OPEN},
    {NUM_0_1, "{\"a\":0.0}", 8},
    {NUM_0_1, "{\"a\":1.01}", 8},
    {NUM_0_1, "{\"a\":1.0", OPEN},
    {NUM_0_1, "{\"a\":-", 5},
    {NUM_0_1, "{\"a\":1}", ACCEPT},
    {NUM_0_1, "{\"a\":1." Z18 "}", ACCEPT},
    {NUM_0_1, "{\"a\":1." Z18 "0", 25},
    {NUM_0_1, "{\"a\":0.000000000000000001}", ACCEPT},
    {NUM_0_1, "{\"a\":0.00000000000000000", OPEN},
    {NUM_0_1, "{\"a\":0." Z18, 24},
    {NUM_0_1, "{\"a\":0." N18 "}", ACCEPT},
    {NUM_0_1, "{\"a\":0." N18 "9", 25},
    {NUM_0_1, "{\"a\":2", 5},
    {NUM_0_1, "{\"a\":10", 6},
    {NUM_0_1, "{\"a\":0.5e1}", 8},
    {NUM_0_1, "{\"a\":0.}", 7},
    {NUM_0_1, "{\"a\":.5}", 5},
    {NUM_0_1, "{\"a\":00.5}", 6},
    /* -0 is 0 */
    {"{\"type\":\"number\",\"minimum\":0}", "{\"a\":-0}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":0}", "{\"a\":-0.0}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":0}", "{\"a\":-0.01", 9},
    {"{\"type\":\"number\",\"minimum\":0}", "{\"a\":-1", 6},
    {"{\"type\":\"number\",\"minimum\":0}", "{\"a\":-0." Z18 "}", ACCEPT},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "{\"a\":-", 5},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "{\"a\":0}", 6},
    {"{\"type\":\"integer\",\"minimum\":0}", "{\"a\":-0}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":0}", "{\"a\":-1", 6},
    {"{\"type\":\"integer\",\"maximum\":0}", "{\"a\":-0}", ACCEPT},
    {"{\"type\":\"integer\",\"maximum\":0}", "{\"a\":0}", ACCEPT},
    {"{\"type\":\"integer\",\"maximum\":0}", "{\"a\":1", 5},
    {"{\"type\":\"integer\",\"maximum\":0}", "{\"a\":-" N18 "}", ACCEPT},
    {"{\"type\":\"integer\",\"maximum\":0}", "{\"a\":-1" Z18, 24},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":0}", "{\"a\":-0", 6},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":-0.0}", "{\"a\":-1}", ACCEPT},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":-0.0}", "{\"a\":0", 5},
    /* leading zeros, the point, the digit limits */
    {NUM_5_5, "{\"a\":01", 6},
    {NUM_5_5, "{\"a\":-01", 7},
    {NUM_5_5, "{\"a\":-00", 7},
    {NUM_5_5, "{\"a\":0.}", 7},
    {NUM_5_5, "{\"a\":5.0}", ACCEPT},
    {NUM_5_5, "{\"a\":-5.0}", ACCEPT},
    {NUM_5_5, "{\"a\":5.000000000000000001", 24},
    {NUM_5_5, "{\"a\":-5.000000000000000001", 25},
    {NUM_5_5, "{\"a\":4." N18 "}", ACCEPT},
    {NUM_5_5, "{\"a\":4." N18 "9", 25},
    {NUM_5_5, "{\"a\":+1", 5},
    {NUM_5_5, "{\"a\":1..", 7},
    {NUM_5_5, "{\"a\":1-", 6},
    {NUM_5_5, "{\"a\":--", 6},
    {NUM_5_5, "{\"a\":-}", 6},
    {NUM_5_5, "{\"a\":5", OPEN},
    {NUM_5_5, "{\"a\":55", 6},
    {NUM_5_5, "{\"a\":1E0}", 6},
    /* integer bounds that are not whole */
    {"{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":3.5}", "{\"a\":3}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":3.5}", "{\"a\":2", 5},
    {"{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":3.5}", "{\"a\":4", 5},
    {"{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":3.5}", "{\"a\":3.", 6},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":4}", "{\"a\":2", 5},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":4}", "{\"a\":3}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":-2.5}", "{\"a\":-2}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":-2.5}", "{\"a\":-3", 6},
    {"{\"type\":\"integer\",\"minimum\":-2.5}", "{\"a\":-20", 7},
    {"{\"type\":\"integer\",\"maximum\":-2.5}", "{\"a\":-2", OPEN},
    {"{\"type\":\"integer\",\"maximum\":-2.5}", "{\"a\":-2}", 7},
    {"{\"type\":\"integer\",\"maximum\":-2.5}", "{\"a\":-3}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":1.0,\"maximum\":1}", "{\"a\":1}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":1.0,\"maximum\":1}", "{\"a\":1.0}", 6},
    {"{\"type\":\"number\",\"minimum\":1.0,\"maximum\":1}", "{\"a\":1.0}", ACCEPT},
    /* a single point */
    {NUM_ONE_TENTH, "{\"a\":0.1}", ACCEPT},
    {NUM_ONE_TENTH, "{\"a\":0.10}", ACCEPT},
    {NUM_ONE_TENTH, "{\"a\":0.1" "00000000000000000}", ACCEPT},
    {NUM_ONE_TENTH, "{\"a\":0.1" "00000000000000001", 24},
    {NUM_ONE_TENTH, "{\"a\":0.11", 8},
    {NUM_ONE_TENTH, "{\"a\":0.0", 7},
    {NUM_ONE_TENTH, "{\"a\":0}", 6},
    {NUM_ONE_TENTH, "{\"a\":-", 5},
    {NUM_ONE_TENTH, "{\"a\":1", 5},
    {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":3}", "{\"a\":3}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":3}", "{\"a\":30", 6},
    {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":3}", "{\"a\":-", 5},
    {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", "{\"a\":-0}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", "{\"a\":0}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", "{\"a\":-1", 6},
    /* reals read as their shortest decimals */
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.2}", "{\"a\":0.1}", 8},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.2}",
     "{\"a\":0.100000000000000001}", ACCEPT},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.2}",
     "{\"a\":0.100000000000000000", 24},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.2}", "{\"a\":0.2}", ACCEPT},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.2}",
     "{\"a\":0.200000000000000001", 24},
    {"{\"type\":\"number\",\"minimum\":0.30000000000000004}", "{\"a\":0.3}", 8},
    {"{\"type\":\"number\",\"minimum\":0.30000000000000004}", "{\"a\":0.30000000000000004}",
     ACCEPT},
    {"{\"type\":\"number\",\"minimum\":0.30000000000000004}", "{\"a\":0.30000000000000003", 23},
    {"{\"type\":\"number\",\"minimum\":0.3000000000000000166}", "{\"a\":0.3}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":9007199254740993}", "{\"a\":9007199254740992}", 21},
    {"{\"type\":\"integer\",\"minimum\":9007199254740993}", "{\"a\":9007199254740993}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":9007199254740993.0}", "{\"a\":9007199254740992}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":9007199254740993.0}", "{\"a\":9007199254740991}", 21},
    {"{\"type\":\"number\",\"maximum\":1e2}", "{\"a\":100.0}", ACCEPT},
    {"{\"type\":\"number\",\"maximum\":1e2}", "{\"a\":100.01", 10},
    {"{\"type\":\"number\",\"maximum\":1.5E-1}", "{\"a\":0.15}", ACCEPT},
    {"{\"type\":\"number\",\"maximum\":1.5E-1}", "{\"a\":0.16", 8},
    /* the 18-digit limits at the bounds */
    {"{\"type\":\"integer\",\"minimum\":" N18 "}", "{\"a\":" N18 "}", ACCEPT},
    {"{\"type\":\"integer\",\"minimum\":" N18 "}", "{\"a\":99999999999999999}", 22},
    {"{\"type\":\"integer\",\"minimum\":" N18 "}", "{\"a\":1", 5},
    {"{\"type\":\"integer\",\"minimum\":" N18 "}", "{\"a\":-", 5},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":-999999999999999998}", "{\"a\":-" N18 "}",
     ACCEPT},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":-999999999999999998}",
     "{\"a\":-999999999999999998", 23},
    {"{\"type\":\"integer\",\"exclusiveMaximum\":-999999999999999998}", "{\"a\":0", 5},
    {"{\"type\":\"number\",\"minimum\":999999999999999900}", "{\"a\":" N18 "." N18 "}",
     ACCEPT},
    {"{\"type\":\"number\",\"minimum\":999999999999999900}", "{\"a\":" N18 "9", 23},
    {"{\"type\":\"number\",\"minimum\":999999999999999900}", "{\"a\":" "999999999999999" "89", 20},
    {"{\"type\":\"number\",\"exclusiveMaximum\":1e18}", "{\"a\":" N18 "." N18 "}", ACCEPT},
    {"{\"type\":\"number\",\"exclusiveMaximum\":1e18}", "{\"a\":-" N18 "." N18 "}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":-1e30,\"maximum\":5}", "{\"a\":-" N18 ".5}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":-1e30,\"maximum\":5}", "{\"a\":6", 5},
    {"{\"type\":\"integer\",\"minimum\":-1000000000000000000}", "{\"a\":-" N18 "}", ACCEPT},
    /* negative ranges, ranges across 0 */
    {NUM_NEG, "{\"a\":-1.25}", ACCEPT},
    {NUM_NEG, "{\"a\":-1.24", 9},
    {NUM_NEG, "{\"a\":-1.2}", 9},
    {NUM_NEG, "{\"a\":-1.29}", ACCEPT},
    {NUM_NEG, "{\"a\":-2.5}", ACCEPT},
    {NUM_NEG, "{\"a\":-2.50000000000000001", 24},
    {NUM_NEG, "{\"a\":-2.4999", OPEN},
    {NUM_NEG, "{\"a\":-3", 6},
    {NUM_NEG, "{\"a\":1", 5},
    {NUM_NEG, "{\"a\":-0", 6},
    {NUM_NEG, "{\"a\":-1}", 7},
    {INT_STRADDLE, "{\"a\":-3}", ACCEPT},
    {INT_STRADDLE, "{\"a\":-4", 6},
    {INT_STRADDLE, "{\"a\":-0}", ACCEPT},
    {INT_STRADDLE, "{\"a\":12}", ACCEPT},
    {INT_STRADDLE, "{\"a\":13", 6},
    {INT_STRADDLE, "{\"a\":-1", OPEN},
    {INT_STRADDLE, "{\"a\":-10", 7},
    {INT_STRADDLE, "{\"a\":0}", ACCEPT},
    {INT_STRADDLE, "{\"a\":00", 6},
    /* bounds with 18 fraction digits and beyond */
    {NUM_TINY, "{\"a\":0.000000000000000015}", ACCEPT},
    {NUM_TINY, "{\"a\":0.000000000000000014", 24},
    {NUM_TINY, "{\"a\":0.00000000000000002}", ACCEPT},
    {NUM_TINY, "{\"a\":0.000000000000000021", 24},
    {NUM_TINY, "{\"a\":0.00000000000000001}", 24},
    {NUM_TINY, "{\"a\":0.00000000000000001", OPEN},
    {NUM_TINY, "{\"a\":0.00000000000000003", 23},
    {NUM_TINY, "{\"a\":0}", 6},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1e-20,\"maximum\":1}",
     "{\"a\":0.000000000000000001}", ACCEPT},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1e-20,\"maximum\":1}", "{\"a\":0}", 6},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1e-20,\"maximum\":1}", "{\"a\":0." Z18, 24},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1e-20}", "{\"a\":0}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1e-20}", "{\"a\":0." Z18 "}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1e-20}", "{\"a\":0.000000000000000001", 24},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1e-20}", "{\"a\":1", 5},
    {"{\"type\":\"number\",\"minimum\":-1e-18,\"maximum\":-1e-18}",
     "{\"a\":-0.000000000000000001}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":-1e-18,\"maximum\":-1e-18}", "{\"a\":-0}", 7},
    {"{\"type\":\"number\",\"minimum\":-1e-18,\"maximum\":-1e-18}", "{\"a\":0", 5},
    /* lower bounds only, upper bounds only */
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":1", OPEN},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":1}", 6},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":1.", 6},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":4.9", 6},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":0", 5},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":5}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":" N18 "}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":5}", "{\"a\":1" Z18, 23},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-4", OPEN},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-4}", 7},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-5.", OPEN},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-5.0}", ACCEPT},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-4.", 7},
    {"{\"type\":\"number\",\"maximum\":-5}", "{\"a\":-40}", ACCEPT},
    /* every keyword at once: 1 <= a < 2 */
    {"{\"type\":\"number\",\"minimum\":1,\"exclusiveMinimum\":0,\"maximum\":3,"
     "\"exclusiveMaximum\":2}",
     "{\"a\":1." N18 "}", ACCEPT},
    {"{\"type\":\"number\",\"minimum\":1,\"exclusiveMinimum\":0,\"maximum\":3,"
     "\"exclusiveMaximum\":2}",
     "{\"a\":2", 5},
    {"{\"type\":\"number\",\"minimum\":1,\"exclusiveMinimum\":0,\"maximum\":3,"
     "\"exclusiveMaximum\":2}",
     "{\"a\":0", 5},
    /* without bounds: exponents (2 digits), the integer's forms */
    {"{\"type\":\"number\"}", "{\"a\":1e5}", ACCEPT},
    {"{\"type\":\"number\"}", "{\"a\":-1.5E+10}", ACCEPT},
    {"{\"type\":\"number\"}", "{\"a\":1e100", 9},
    {"{\"type\":\"number\"}", "{\"a\":1e}", 7},
    {"{\"type\":\"number\"}", "{\"a\":1.e5", 7},
    {"{\"type\":\"number\"}", "{\"a\":1" Z18, 23},
    {"{\"type\":\"integer\"}", "{\"a\":1.", 6},
    {"{\"type\":\"integer\"}", "{\"a\":1e", 6},
    {"{\"type\":\"integer\"}", "{\"a\":-" N18 "}", ACCEPT},
    /* type lists: the bounds hold the number alone */
    {"{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":3}", "{\"a\":null}", ACCEPT},
    {"{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":3}", "{\"a\":2}", ACCEPT},
    {"{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":3}", "{\"a\":4", 5},
    {"{\"type\":[\"integer\",\"null\"],\"minimum\":1,\"maximum\":3}", "{\"a\":nul}", 8},
    {"{\"type\":[\"null\",\"number\"],\"exclusiveMinimum\":0.5}", "{\"a\":0.5}", 8},
    {"{\"type\":[\"null\",\"number\"],\"exclusiveMinimum\":0.5}", "{\"a\":0.51}", ACCEPT},
    {"{\"type\":[\"null\",\"number\"],\"exclusiveMinimum\":0.5}", "{\"a\":0.5e1}", 8},
    {"{\"type\":[\"number\",\"string\"],\"exclusiveMaximum\":0}", "{\"a\":\"x 9\"}", ACCEPT},
    {"{\"type\":[\"number\",\"string\"],\"exclusiveMaximum\":0}", "{\"a\":-1}", ACCEPT},
    {"{\"type\":[\"number\",\"string\"],\"exclusiveMaximum\":0}", "{\"a\":0", 5},
    {"{\"type\":[\"number\",\"string\"],\"exclusiveMaximum\":0}", "{\"a\":-0", OPEN},
    {"{\"type\":[\"number\",\"string\"],\"exclusiveMaximum\":0}", "{\"a\":-0}", 7},
};

static long verdict_of(size_t refused, const bool *done, size_t n)
{
    if (refused < n)
        return (long)refused;
    return n > 0 && done[n - 1] ? ACCEPT : OPEN;
}

static void test_hand_cases(void **state)
{
    (void)state;
    begin_test(1);
    for (size_t k = 0; k < sizeof hands / sizeof hands[0]; k++) {
        const hand *h = &hands[k];
        const uint8_t *t = (const uint8_t *)h->text;
        size_t n = strlen(h->text);
        assert_true(n <= MAX_TEXT);
        ob b = ob_of(h->s);
        bool odone[MAX_TEXT], rdone[MAX_TEXT];
        long o = verdict_of(oracle(&b, t, n, odone), odone, n);
        if (o != h->expect) {
            graft_test_tally_count();
            print_error("the oracle says %ld, the case %ld: S = %s, text %s\n", o, h->expect, h->s,
                        h->text);
            continue;
        }
        graft__json_schema *schema = NULL;
        char *errmsg = NULL;
        int rc = compile(h->s, &schema, &errmsg);
        if (rc != GRAFT_OK) {
            graft_test_tally_count();
            print_error("compile S = %s: %d, %s\n", h->s, rc, errmsg != NULL ? errmsg : "(none)");
            free(errmsg);
            continue;
        }
        free(errmsg);
        long r = verdict_of(recognize(schema, t, n, rdone), rdone, n);
        size_t got, want;
        long at = disagreement(schema, &b, t, n, &got, &want);
        if (r != h->expect || at >= 0) {
            graft_test_tally_count();
            print_error("S = %s, text %s: expected %ld, the recognizer says %ld", h->s, h->text,
                        h->expect, r);
            if (at >= 0)
                print_error(" (done or refusal differs at byte %ld)", at);
            print_error("\n");
        }
        graft__json_schema_free(schema);
    }
    graft_test_tally_end(seed);
}

/* ---- direct cases: bounds elsewhere in a schema ----------------------------------------- */

static void expect_full(const char *schema_text, const char *text, long expect)
{
    graft__json_schema *schema = graft_test_compile_schema(schema_text);
    if (schema == NULL) {
        graft_test_tally_count();
        return;
    }
    size_t n = strlen(text);
    bool done[256];
    assert_true(n <= 256);
    long got = verdict_of(recognize(schema, (const uint8_t *)text, n, done), done, n);
    graft__json_schema_free(schema);
    if (got != expect) {
        graft_test_tally_count();
        print_error("%s, text %s: expected %ld, the recognizer says %ld\n", schema_text, text,
                    expect, got);
    }
}

static void test_direct(void **state)
{
    (void)state;
    begin_test(2);
    const char *items = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                        "{\"type\":\"integer\",\"minimum\":1,\"maximum\":3}}},\"required\":[\"a\"]}";
    expect_full(items, "{\"a\":[1,2,3]}", ACCEPT);
    expect_full(items, "{\"a\":[1,3,0", 10);
    expect_full(items, "{\"a\":[1, 4", 9);
    expect_full(items, "{\"a\":[]}", ACCEPT);
    const char *any_of =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"number\","
        "\"exclusiveMinimum\":-1,\"exclusiveMaximum\":1},{\"type\":\"string\"}]}},"
        "\"required\":[\"a\"]}";
    expect_full(any_of, "{\"a\":-0.5}", ACCEPT);
    expect_full(any_of, "{\"a\":\"9\"}", ACCEPT);
    expect_full(any_of, "{\"a\":-1}", 6);
    expect_full(any_of, "{\"a\":1}", 5);
    expect_full(any_of, "{\"a\":0.99}", ACCEPT);
    const char *two = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                      "\"minimum\":-3,\"maximum\":12},\"x\":{\"type\":\"number\",\"minimum\":0,"
                      "\"exclusiveMaximum\":1}},\"required\":[\"n\",\"x\"]}";
    expect_full(two, "{\"n\":12,\"x\":0.999}", ACCEPT);
    expect_full(two, "{\"n\":-3, \"x\":0}", ACCEPT);
    expect_full(two, "{\"n\":-3,\"x\":1}", 12);
    expect_full(two, "{\"n\":13", 6);
    const char *ref = "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/p\"}},"
                      "\"required\":[\"a\"],\"$defs\":{\"p\":{\"type\":\"integer\","
                      "\"exclusiveMinimum\":0}}}";
    expect_full(ref, "{\"a\":1}", ACCEPT);
    expect_full(ref, "{\"a\":0", 5);
    /* the other whitespace after a number also ends it, and is refused after one out of bounds */
    const char *int_18_130 = "{\"type\":\"object\",\"properties\":{\"a\":" INT_18_130
                             "},\"required\":[\"a\"]}";
    expect_full(int_18_130, "{\"a\":5\n}", 6);
    expect_full(int_18_130, "{\"a\":5\t", 6);
    expect_full(int_18_130, "{\"a\":5\r", 6);
    expect_full(int_18_130, "{\"a\":50\n  }", ACCEPT);
    expect_full(int_18_130, "{\"a\":50\r\n}", ACCEPT);
    expect_full(int_18_130, "{\"a\":\t129\t}", ACCEPT);
    expect_full(int_18_130, "{\"a\":\n130", 7);
    const char *num_0_1 = "{\"type\":\"object\",\"properties\":{\"a\":" NUM_0_1
                          "},\"required\":[\"a\"]}";
    expect_full(num_0_1, "{\"a\":0\t", 6);
    expect_full(num_0_1, "{\"a\":1.\n", 7);
    expect_full(num_0_1, "{\"a\":1.0\n}", ACCEPT);
    graft_test_tally_end(seed);
}

/* ---- random bound sets and numbers -------------------------------------------------------- */

static void rand_digits(char *out, int n, bool nonzero_first)
{
    for (int i = 0; i < n; i++)
        out[i] = (char)('0' + graft_test_below(10));
    if (n > 0 && nonzero_first)
        out[0] = (char)('1' + graft_test_below(9));
    out[n] = '\0';
}

/* A bound's JSON text: sign * 0.m * 10^p, m of nd digits (its first not 0), written as a JSON
 * integer (when whole and short), a plain real or a real with an exponent. */
static void bound_text(char *out, size_t cap, bool neg, const char *m, int p)
{
    int nd = (int)strlen(m);
    char buf[128];
    size_t o = 0;
    if (neg)
        buf[o++] = '-';
    size_t form = graft_test_below(3);
    if (form == 0 && p >= nd && p <= 18) { /* a JSON integer */
        memcpy(buf + o, m, (size_t)nd);
        o += (size_t)nd;
        for (int i = nd; i < p; i++)
            buf[o++] = '0';
    } else if (form <= 1 && p > -24 && p <= 20) { /* a plain real */
        if (p <= 0) {
            buf[o++] = '0';
            buf[o++] = '.';
            for (int i = 0; i < -p; i++)
                buf[o++] = '0';
            memcpy(buf + o, m, (size_t)nd);
            o += (size_t)nd;
        } else if (p >= nd) {
            memcpy(buf + o, m, (size_t)nd);
            o += (size_t)nd;
            for (int i = nd; i < p; i++)
                buf[o++] = '0';
            buf[o++] = '.';
            buf[o++] = '0';
        } else {
            memcpy(buf + o, m, (size_t)p);
            o += (size_t)p;
            buf[o++] = '.';
            memcpy(buf + o, m + p, (size_t)(nd - p));
            o += (size_t)(nd - p);
        }
        for (size_t z = graft_test_one_in(6) ? graft_test_below(3) + 1 : 0; z > 0; z--)
            if (memchr(buf, '.', o) != NULL)
                buf[o++] = '0';
    } else { /* an exponent */
        buf[o++] = m[0];
        if (nd > 1) {
            buf[o++] = '.';
            memcpy(buf + o, m + 1, (size_t)(nd - 1));
            o += (size_t)(nd - 1);
        }
        buf[o++] = graft_test_one_in(2) ? 'e' : 'E';
        int e = p - 1;
        if (e >= 0 && graft_test_one_in(2))
            buf[o++] = '+';
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%d", e);
    }
    buf[o] = '\0';
    assert_true(o + 1 <= cap);
    memcpy(out, buf, o + 1);
}

static const char *const extremes[] = {
    "1e18", "-1e18", "1000000000000000000", "-1000000000000000000", "999999999999999999",
    "-999999999999999999", "1e17", "-1e17", "99999999999999999", "1e-18", "-1e-18",
    "1.5e-17", "1e-19", "-5e-19", "0", "-0", "0.0", "-0.0", "1e30", "-1e30", "0.1", "-0.1",
    "0.30000000000000004", "9007199254740993", "9007199254740993.0", "1e-300",
    "0.123456789012345678", "123456789012345678", "123456789012345678.5",
    "999999999999999872", "-999999999999999872.0", "1e-17", "2.5", "-2.5", "1", "-1",
    "5000000000000000000", "-5000000000000000000", "9223372036854775807",
    "-9223372036854775808", "1e36", "-1e36", "1e38", "-1.8e38", "1e300", "-1e300",
    "1.7976931348623157e308", "-1.7976931348623157e308", "2e-308", "5e-324", "-5e-324",
    "1.2345678901234567e-5", "-9.876543210987654e-3", "0.99999999999999999", "1.0000000000000002",
};

typedef struct bset {
    char s[512]; /* S */
    ob b;
    bool listed; /* "type" is a list with "null" */
} bset;

static void value_text(char *out, size_t cap, int p, int nd)
{
    if (graft_test_one_in(12)) {
        snprintf(out, cap, "%s", extremes[graft_test_below(sizeof extremes / sizeof extremes[0])]);
        return;
    }
    char m[24];
    rand_digits(m, nd, true);
    bound_text(out, cap, graft_test_one_in(3), m, p);
}

static void random_bset(bset *r)
{
    for (;;) {
        bool integer = graft_test_below(5) < 2;
        int p = graft_test_one_in(6) ? (int)graft_test_below(40) - 20 : (int)graft_test_below(9) - 3;
        int nd = 1 + (int)graft_test_below(graft_test_one_in(8) ? 17 : 6);
        char v1[128], v2[128], v3[128];
        value_text(v1, sizeof v1, p, nd);
        if (graft_test_one_in(5))
            snprintf(v2, sizeof v2, "%s", v1);
        else
            value_text(v2, sizeof v2, p + (int)graft_test_below(3) - 1,
                       graft_test_one_in(2) ? nd : 1 + (int)graft_test_below(6));
        value_text(v3, sizeof v3, p, nd);
        /* lower gets the smaller of v1, v2 most of the time */
        dec d1 = dec_parse(v1), d2 = dec_parse(v2);
        bool swap = dec_cmp(&d1, &d2) > 0;
        if (graft_test_one_in(10))
            swap = !swap;
        const char *lo = swap ? v2 : v1, *hi = swap ? v1 : v2;
        const char *vals[N_KEYS] = {NULL, NULL, NULL, NULL};
        size_t lower = graft_test_below(5), upper = graft_test_below(5);
        /* 0: none, 1-2: minimum, 3: exclusiveMinimum, 4: both (one of them v3 at times) */
        if (lower == 1 || lower == 2 || lower == 4)
            vals[K_MIN] = lo;
        if (lower == 3 || lower == 4)
            vals[K_XMIN] = lower == 4 && graft_test_one_in(2) ? v3 : lo;
        if (upper == 1 || upper == 2 || upper == 4)
            vals[K_MAX] = hi;
        if (upper == 3 || upper == 4)
            vals[K_XMAX] = upper == 4 && graft_test_one_in(2) ? v3 : hi;
        /* at times in a type list beside null (the bounds hold the number alone) */
        static const char *const lists[] = {"[\"%s\",\"null\"]", "[\"null\",\"%s\"]"};
        char type[48];
        const char *name = integer ? "\"integer\"" : "\"number\"";
        r->listed = graft_test_one_in(8);
        if (r->listed)
            snprintf(type, sizeof type, lists[graft_test_below(2)], integer ? "integer" : "number");
        else
            snprintf(type, sizeof type, "%s", name);
        size_t o = (size_t)snprintf(r->s, sizeof r->s, "{\"type\":%s", type);
        /* keywords in a random order */
        int order[N_KEYS] = {0, 1, 2, 3};
        for (int i = N_KEYS - 1; i > 0; i--) {
            int j = (int)graft_test_below((size_t)i + 1), tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        for (int i = 0; i < N_KEYS; i++)
            if (vals[order[i]] != NULL)
                o += (size_t)snprintf(r->s + o, sizeof r->s - o, ",\"%s\":%s", key_names[order[i]],
                                      vals[order[i]]);
        snprintf(r->s + o, sizeof r->s - o, "}");
        r->b = ob_of(r->s);
        if (bounded(&r->b))
            return;
    }
}

/* A number's text near the bounds or at random, maybe perturbed. */
static void random_number(const ob *b, char *out, size_t cap)
{
    char s[160] = "";
    size_t pick = graft_test_below(6);
    if (pick <= 2) {
        int ks[N_KEYS], nk = 0;
        for (int k = 0; k < N_KEYS; k++)
            if (b->has[k])
                ks[nk++] = k;
        if (nk == 0 || !dec_plain(&b->v[ks[graft_test_below((size_t)nk)]], s, sizeof s))
            pick = 3;
    }
    if (pick == 3 || pick == 4) {
        size_t o = 0;
        if (graft_test_one_in(3))
            s[o++] = '-';
        int k = graft_test_one_in(4) ? (int)graft_test_below(21) : 1 + (int)graft_test_below(4);
        if (k == 0) {
            s[o++] = '0';
        } else {
            rand_digits(s + o, k, !graft_test_one_in(8));
            o += (size_t)k;
        }
        if (graft_test_one_in(2)) {
            s[o++] = '.';
            int j = graft_test_one_in(3) ? (int)graft_test_below(21) : 1 + (int)graft_test_below(4);
            rand_digits(s + o, j, false);
            o += (size_t)j;
        }
        s[o] = '\0';
    } else if (pick == 5) {
        static const char *const zeros[] = {"0", "-0", "0.0", "-0.0", "0.000000000000000001",
                                            "-0.000000000000000001", "0." Z18, "-0." Z18,
                                            "00", "-00", "0.", "-", "", "null"};
        snprintf(s, sizeof s, "%s", zeros[graft_test_below(sizeof zeros / sizeof zeros[0])]);
    }
    for (size_t steps = graft_test_below(3); steps > 0; steps--) {
        size_t len = strlen(s);
        switch (graft_test_below(8)) {
        case 0: /* the last digit one up or down */
            if (len > 0 && isdigit((unsigned char)s[len - 1])) {
                int d = s[len - 1] - '0' + (graft_test_one_in(2) ? 1 : -1);
                if (d >= 0 && d <= 9)
                    s[len - 1] = (char)('0' + d);
            }
            break;
        case 1: /* digits appended, after a point at times */
            if (strchr(s, '.') == NULL && graft_test_one_in(2) && len > 0)
                s[len++] = '.';
            for (size_t i = graft_test_below(3) + 1; i > 0 && len < 60; i--)
                s[len++] = (char)('0' + graft_test_below(10));
            s[len] = '\0';
            break;
        case 2: /* a few bytes cut */
            s[len - (len < 3 ? len : graft_test_below(3) + 1)] = '\0';
            break;
        case 3: /* the sign flipped */
            if (s[0] == '-')
                memmove(s, s + 1, len);
            else if (len + 1 < sizeof s) {
                memmove(s + 1, s, len + 1);
                s[0] = '-';
            }
            break;
        case 4: { /* the fraction filled to 17, 18 or 19 digits */
            char *pt = strchr(s, '.');
            if (pt == NULL) {
                if (len == 0)
                    break;
                s[len++] = '.';
                s[len] = '\0';
                pt = s + len - 1;
            }
            size_t want = 17 + graft_test_below(3);
            size_t have = strlen(pt + 1);
            len = strlen(s);
            char fill = graft_test_one_in(2) ? '0' : '9';
            for (; have < want && len < 60; have++)
                s[len++] = graft_test_one_in(4) ? (char)('0' + graft_test_below(10)) : fill;
            s[len] = '\0';
            break;
        }
        case 5: /* the integer part filled to 17, 18 or 19 digits */
        {
            size_t start = s[0] == '-' ? 1 : 0;
            size_t k = strcspn(s + start, ".");
            size_t want = 17 + graft_test_below(3);
            if (k >= want || len + (want - k) >= 60)
                break;
            memmove(s + start + (want - k), s + start, len - start + 1);
            char fill = graft_test_one_in(2) ? '9' : (char)('1' + graft_test_below(9));
            for (size_t i = 0; i < want - k; i++)
                s[start + i] = fill;
            break;
        }
        case 7: { /* the fraction cut to 18 digits, the last at times one up or down */
            char *pt = strchr(s, '.');
            if (pt == NULL || strlen(pt + 1) <= 18)
                break;
            pt[19] = '\0';
            int d = pt[18] - '0' + (int)graft_test_below(3) - 1;
            if (d >= 0 && d <= 9)
                pt[18] = (char)('0' + d);
            break;
        }
        case 6: /* a leading zero */
            if (len + 1 < sizeof s) {
                size_t start = s[0] == '-' ? 1 : 0;
                memmove(s + start + 1, s + start, len - start + 1);
                s[start] = '0';
            }
            break;
        }
    }
    snprintf(out, cap, "%s", s);
}

static void random_text(const ob *b, uint8_t *t, size_t *n)
{
    char num[160];
    random_number(b, num, sizeof num);
    static const char *const tails[] = {"}", "}", "}", " }", "", " ", "} ", ",\"b\":1}", "}}"};
    char buf[MAX_TEXT * 2];
    int len = snprintf(buf, sizeof buf, "%s%s%s%s", HEAD, graft_test_one_in(8) ? " " : "", num,
                       tails[graft_test_below(sizeof tails / sizeof tails[0])]);
    size_t m = (size_t)len < MAX_TEXT - 4 ? (size_t)len : MAX_TEXT - 4;
    static const char alphabet[] = "0123456789-.eE+} ,n\"x0919";
    for (size_t steps = graft_test_one_in(3) ? graft_test_below(3) + 1 : 0; steps > 0; steps--) {
        if (m <= HEAD_LEN)
            break;
        size_t at = HEAD_LEN + graft_test_below(m - HEAD_LEN + 1);
        uint8_t c = (uint8_t)alphabet[graft_test_below(sizeof alphabet - 1)];
        switch (graft_test_below(3)) {
        case 0: /* replace */
            if (at < m)
                buf[at] = (char)c;
            break;
        case 1: /* insert */
            memmove(buf + at + 1, buf + at, m - at);
            buf[at] = (char)c;
            m++;
            break;
        case 2: /* delete */
            if (at < m) {
                memmove(buf + at, buf + at + 1, m - at - 1);
                m--;
            }
            break;
        }
    }
    memcpy(t, buf, m);
    *n = m;
}

static size_t scale(void)
{
    const char *env = getenv("GRAFT_TEST_SCALE");
    long v = env != NULL ? strtol(env, NULL, 10) : 40;
    return v > 0 ? (size_t)v : 1;
}

static void test_random(void **state)
{
    (void)state;
    begin_test(3);
    size_t sets = 400 * scale(), texts = 0, refusals = 0, accepted = 0, no_number = 0;
    size_t listed_empty = 0, listed_empty_ok = 0;
    viable_calls = 0;
    for (size_t i = 0; i < sets; i++) {
        bset r;
        random_bset(&r);
        bool expect_ok = any_number(&r.b);
        graft__json_schema *schema = NULL;
        char *errmsg = NULL;
        int rc = compile(r.s, &schema, &errmsg);
        /* a type list with null and no number: the header does not say; either answer */
        bool either = r.listed && !expect_ok;
        if (((rc == GRAFT_OK) != expect_ok && !either) || (rc != GRAFT_OK && rc != GRAFT_EINVAL)) {
            if (graft_test_tally_count()) {
                print_error("compile S = %s: %d (%s), the oracle %s a number\n", r.s, rc,
                            errmsg != NULL ? errmsg : "no message",
                            expect_ok ? "finds" : "finds no");
            }
        }
        free(errmsg);
        listed_empty += either;
        listed_empty_ok += either && rc == GRAFT_OK;
        if (rc != GRAFT_OK) {
            no_number++;
            continue;
        }
        for (size_t k = 0; k < 24; k++) {
            uint8_t t[MAX_TEXT];
            size_t n;
            random_text(&r.b, t, &n);
            bool odone[MAX_TEXT];
            size_t o = oracle(&r.b, t, n, odone);
            refusals += o < n;
            accepted += o == n && n > 0 && odone[n - 1];
            texts++;
            compare(r.s, schema, &r.b, t, n);
            if (graft_test_one_in(4))
                probe_copies(r.s, schema, &r.b, t, n);
        }
        graft__json_schema_free(schema);
    }
    if (getenv("GRAFT_TEST_VERBOSE") != NULL)
        print_message("%zu bound sets (%zu with no number), %zu texts (%zu refused, %zu "
                      "accepted), %lu oracle searches; %zu lists with null and no number, "
                      "%zu of them compiled\n",
                      sets, no_number, texts, refusals, accepted, viable_calls, listed_empty,
                      listed_empty_ok);
    graft_test_tally_end(seed);
}

/* ---- the compiler --------------------------------------------------------------------------- */

typedef struct refusal {
    const char *s;         /* S */
    const char *names[4];  /* the message names one of these (case-insensitive) */
} refusal;

#define NO_NUMBER "minimum", "maximum", "number", "integer"

static const refusal refusals[] = {
    {"{\"minimum\":1}", {"minimum", "type"}},
    {"{\"exclusiveMaximum\":1}", {"exclusiveMaximum", "type"}},
    {"{\"type\":\"number\",\"minimum\":\"0\"}", {"minimum"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":true}", {"exclusiveMinimum"}},
    {"{\"type\":\"integer\",\"maximum\":null}", {"maximum"}},
    {"{\"type\":\"integer\",\"maximum\":[1]}", {"maximum"}},
    {"{\"enum\":[1,2],\"type\":\"integer\",\"exclusiveMaximum\":0}", {"exclusiveMaximum", "enum"}},
    {"{\"const\":3,\"minimum\":1}", {"minimum", "const"}},
    {"{\"type\":\"integer\",\"const\":3,\"maximum\":5}", {"maximum", "const"}},
    {"{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":1.9}", {NO_NUMBER}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":3}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"minimum\":1e30}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"maximum\":-1e30}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"minimum\":1e18}", {NO_NUMBER}},
    {"{\"type\":\"integer\",\"minimum\":1000000000000000000}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"exclusiveMaximum\":-1e18}", {NO_NUMBER}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":999999999999999999}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"minimum\":2,\"maximum\":1}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"minimum\":1,\"exclusiveMaximum\":1}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"minimum\":1e-20,\"maximum\":5e-19}", {NO_NUMBER}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1e-18}", {NO_NUMBER}},
    {"{\"type\":\"integer\",\"minimum\":-0.5,\"maximum\":-0.1}", {NO_NUMBER}},
};

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++) {
        size_t i = 0;
        while (i < n && hay[i] != '\0' &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

static void test_compile(void **state)
{
    (void)state;
    begin_test(4);
    for (size_t k = 0; k < sizeof refusals / sizeof refusals[0]; k++) {
        const refusal *f = &refusals[k];
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = compile(f->s, &out, &errmsg);
        bool named = false;
        for (size_t i = 0; i < 4 && f->names[i] != NULL; i++)
            named = named || (errmsg != NULL && contains_nocase(errmsg, f->names[i]));
        if (rc != GRAFT_EINVAL || !named) {
            graft_test_tally_count();
            print_error("compile S = %s: %d (expected %d), message %s\n", f->s, rc, GRAFT_EINVAL,
                        errmsg != NULL ? errmsg : "(none)");
        }
        if (rc == GRAFT_OK)
            graft__json_schema_free(out);
        if (getenv("GRAFT_TEST_VERBOSE") != NULL)
            print_message("S = %s: %s\n", f->s, errmsg != NULL ? errmsg : "(none)");
        free(errmsg);
        /* the oracle agrees where it reads the schema: no number is an instance */
        json_t *j = json_loads(f->s, 0, NULL);
        assert_non_null(j);
        json_t *type = json_object_get(j, "type");
        bool plain = json_is_string(type) && json_object_get(j, "enum") == NULL &&
                     json_object_get(j, "const") == NULL;
        for (int key = 0; plain && key < N_KEYS; key++) {
            json_t *v = json_object_get(j, key_names[key]);
            plain = v == NULL || json_is_number(v);
        }
        json_decref(j);
        if (plain) {
            ob b = ob_of(f->s);
            if (any_number(&b)) {
                graft_test_tally_count();
                print_error("the oracle finds a number for the refused S = %s\n", f->s);
            }
        }
        /* errmsg may be NULL */
        out = NULL;
        rc = compile(f->s, &out, NULL);
        if (rc != GRAFT_EINVAL) {
            graft_test_tally_count();
            print_error("compile S = %s without errmsg: %d\n", f->s, rc);
        }
        if (rc == GRAFT_OK)
            graft__json_schema_free(out);
    }
    static const char *const accepted[] = {
        "{\"type\":\"number\",\"minimum\":-1e30,\"maximum\":5}",
        "{\"type\":\"number\",\"minimum\":-1e30}",
        "{\"type\":\"number\",\"exclusiveMaximum\":1e18}",
        "{\"type\":\"integer\",\"maximum\":1e300}",
        "{\"type\":\"integer\",\"minimum\":-1000000000000000000}",
        "{\"type\":[\"integer\",\"null\"],\"minimum\":0}",
        "{\"type\":[\"null\",\"number\",\"string\"],\"maximum\":0}",
        "{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.1}",
        "{\"type\":\"integer\",\"minimum\":3,\"maximum\":3}",
        "{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":3.5}",
        "{\"type\":\"number\",\"minimum\":1,\"exclusiveMinimum\":0,\"maximum\":2,"
        "\"exclusiveMaximum\":3}",
        "{\"type\":\"number\",\"minimum\":-0.0,\"maximum\":0}",
        "{\"type\":\"number\",\"minimum\":1e-20,\"maximum\":1e-18}",
        "{\"type\":\"integer\",\"minimum\":" N18 "}",
        "{\"type\":\"number\",\"maximum\":-999999999999999999}",
        "{\"type\":\"number\",\"minimum\":0,\"title\":\"t\",\"description\":\"d\"}",
        "{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0},{\"type\":\"string\"}]}",
    };
    for (size_t k = 0; k < sizeof accepted / sizeof accepted[0]; k++) {
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = compile(accepted[k], &out, &errmsg);
        if (rc != GRAFT_OK) {
            graft_test_tally_count();
            print_error("compile S = %s: %d (expected 0), message %s\n", accepted[k], rc,
                        errmsg != NULL ? errmsg : "(none)");
        } else {
            graft__json_schema_free(out);
        }
        free(errmsg);
    }
    graft_test_tally_end(seed);
}

/* The oracle's arithmetic on its own: comparisons and the shortest decimals. */
static void test_oracle(void **state)
{
    (void)state;
    static const char *const ordered[] = {
        "-1e30", "-999999999999999999.5", "-2.5", "-2.49999999999999999999", "-1", "-1e-300",
        "0", "1e-300", "0.000000000000000001", "0.1", "0.10000000000000000001", "1", "1.5",
        "10", "999999999999999999", "1e18", "1e30",
    };
    size_t n = sizeof ordered / sizeof ordered[0];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            dec a = dec_parse(ordered[i]), b = dec_parse(ordered[j]);
            int c = dec_cmp(&a, &b);
            assert_int_equal(c, i < j ? -1 : i > j ? 1 : 0);
        }
    static const char *const same[][2] = {
        {"-0", "0"}, {"0.0", "-0.000"}, {"1.50", "15e-1"}, {"100", "1E2"}, {"0.001", "1e-3"},
        {"12.5", "0.125e+2"},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        dec a = dec_parse(same[i][0]), b = dec_parse(same[i][1]);
        assert_int_equal(dec_cmp(&a, &b), 0);
    }
    char buf[64];
    shortest(0.1, buf, sizeof buf);
    assert_string_equal(buf, "1e-01");
    shortest(0.1 + 0.2, buf, sizeof buf);
    assert_string_equal(buf, "3.0000000000000004e-01");
    shortest(9007199254740993.0, buf, sizeof buf);
    dec a = dec_parse(buf), b = dec_parse("9007199254740992");
    assert_int_equal(dec_cmp(&a, &b), 0);
    dec x = dec_parse("-0.0125");
    assert_true(dec_plain(&x, buf, sizeof buf));
    assert_string_equal(buf, "-0.0125");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_compile),
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_direct),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
