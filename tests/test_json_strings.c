/*
 * test_json_strings.c: string values held to `pattern`, `format` and `minLength` / `maxLength`
 * by the schema'd recognizer (graft__json_schema_compile, graft__json_syntax_*,
 * engine/json_output.h), checked against an oracle written here from the header and the
 * formats' definitions alone, without reference to json_syntax.c, json_schema.c or
 * json_regex.c. The formats, as read here: date = RFC 3339 full-date with real calendar days
 * (Feb 29 in years divisible by 4 and not by 100 unless by 400); time = HH:MM:SS (seconds
 * 00-60), an optional fraction of 1 to 9 digits, then Z / z or +HH:MM / -HH:MM (00-23,
 * 00-59); date-time = date, T or t, time; uuid = 8-4-4-4-12 hex digits of either case;
 * ipv4 = four dot-separated 0-255 without leading zeros; hostname = dot-separated labels of
 * 1 to 63 [A-Za-z0-9-] neither beginning nor ending with '-'; email =
 * [A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+ '@' hostname; uri = [A-Za-z][A-Za-z0-9+.-]* ':' then any
 * run of [A-Za-z0-9._~:/?#[\]@!$&'()*+,;=-] and %HH.
 *
 * Every schema here is {"type":"object","properties":{"a": S},"required":["a"]} and every
 * text {"a":"..."} (or {"a":null} where S allows null). The recognizer must refuse exactly
 * the first byte after which no completion of the text is an instance; the string's keywords
 * hold its DECODED value (after the JSON escapes), while the recognizer reads the escaped
 * bytes. The oracle:
 *   - "is this decoded string an instance" (inst): lengths counted in code points; PCRE2 for
 *     `pattern`, the ECMA-262 pattern translated where PCRE2 reads it differently ('.' does
 *     not match \n \r U+2028 U+2029; \s \S are ECMA's white space and line terminators; \v is
 *     U+000B; \uHHHH, surrogate pairs of them and \u{H...} become \x{...}; $ only at the end
 *     with PCRE2_DOLLAR_ENDONLY; \d \w stay ASCII, no PCRE2_UCP), matched unanchored as a JSON
 *     Schema validator searches; validators written here from the formats' definitions (date
 *     with real calendar days, time, date-time, uuid, ipv4, hostname, email, uri);
 *   - "can this decoded prefix still become an instance" (viable): a depth-first search over
 *     continuations. Each schema comes with a partition of the code points into classes such
 *     that swapping a character for another of its class never changes inst (checked at run
 *     time on random strings: test_oracle_classes), so one representative per class is
 *     enough; the search is cut where a sound necessary condition fails (a prefix check of
 *     the format's syntax and of its complete fields; PCRE2_PARTIAL_HARD on patterns whose
 *     every top-level alternative begins with ^, where "no partial match" means no extension
 *     matches) and bounded by the schema's maxLength or, without one, by minLength plus a
 *     slack argued per schema (from any viable prefix some completion of at most `slack`
 *     characters beyond minLength exists), so the search is exact for the schemas here;
 *   - a JSON string lexer over the text's bytes: in the middle of a UTF-8 character or a \u
 *     escape (or after a high surrogate's escape) the character can still become any code
 *     point of a set of ranges, and the prefix has a completion iff some code point of the
 *     ranges (one representative per class met) keeps the decoded prefix viable; the closing
 *     quote needs inst; after it come the header's whitespace forms and '}'.
 * The schemas (specs[]): each format; ["string","null"] with a format and with a pattern;
 * patterns over ASCII, Latin-1, astral characters (\u{...} ranges and surrogate-pair
 * escapes), '.' / \s / \S, negated classes, the code points beside the surrogates, lazy
 * quantifiers, {n,} and escapes of JSON's own specials; minLength / maxLength alone (also
 * 290..300); patterns with lengths (an unanchored search, alternatives with ^ on one and $ on
 * the other, astral characters counted as one); formats with lengths. They are kept simple
 * enough that the class partitions, the prunes and the slacks above are exact.
 * Checks:
 *   - hand cases per format, pattern and length bound: the first refused byte (or acceptance
 *     and done), each expectation first held to the oracle;
 *   - plain verdicts without the oracle: a type list with "integer" beside "string" (the
 *     integer not held to the pattern), maxLength 10000 (the largest the compiler takes)
 *     counted in code points to its end;
 *   - random instances from generators here, escaped at random (raw UTF-8, short escapes,
 *     \u escapes in either case, surrogate pairs, \/), accepted to the end and done exactly
 *     after the closing brace; mutations of them (characters changed, inserted, deleted
 *     before escaping; bytes changed, inserted, deleted after) and random strings: the first
 *     refused byte and done after every prefix are the oracle's; in_held_text holds exactly
 *     inside the string at a character boundary with no escape begun, and there
 *     text_follows, on random plain texts of 1 to 4 characters, answers what feeding a copy
 *     answers and what the oracle says; where in_text says "any run of plain characters can
 *     follow", the oracle must agree for every run of up to two characters (and there must
 *     be no maxLength);
 *   - compile refusals (GRAFT_EINVAL with a message naming the keyword) and acceptances.
 * A disagreement prints the schema, the seed (GRAFT_TEST_SEED overrides it) and the text
 * (also shrunk) as C string literals; every disagreement is counted and the test fails at
 * its end. GRAFT_TEST_SCALE multiplies the random texts (default 6); GRAFT_TEST_VERBOSE
 * prints, per schema, in which lexical state the oracle refused how many texts.
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

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "byte_buffer.h"
#include "graft.h"
#include "json_oracle.h"
#include "tally.h"
#include "engine/json_output.h"

typedef graft_test_bytes bytes;

/* ---- the PRNG, reporting ----------------------------------------------------------------- */

static uint64_t seed = 0x6a736f6e5f737472u;

static void seed_rng(uint64_t stream)
{
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

enum { MAX_PRINTED = 12 };

static void begin_test(uint64_t stream)
{
    graft_test_tally_begin(MAX_PRINTED);
    seed_rng(stream);
}

/* ---- code points ------------------------------------------------------------------------- */

enum { MAX_CPS = 600, BUF_CPS = MAX_CPS + 128 };
#define NO_MAX UINT32_MAX

typedef struct cps {
    uint32_t c[MAX_CPS];
    size_t n;
} cps;

static bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }
static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static bool is_alpha(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_alnum(uint32_t c) { return is_digit(c) || is_alpha(c); }
static bool is_hex(uint32_t c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static bool in_set(uint32_t c, const char *set)
{
    return c != 0 && c < 0x80 && strchr(set, (int)c) != NULL;
}

static void put_cp(cps *b, uint32_t c)
{
    assert_true(b->n < MAX_CPS);
    b->c[b->n++] = c;
}

static void put_ascii(cps *b, const char *s)
{
    while (*s != '\0')
        put_cp(b, (uint8_t)*s++);
}

static void utf8_of(bytes *out, const uint32_t *s, size_t n)
{
    out->n = 0;
    graft_test_put(out, "", 0);
    for (size_t i = 0; i < n; i++)
        graft_test_put_utf8(out, s[i]);
}

/* ---- the formats, from their definitions ---------------------------------------------------
 * Each has a complete check (ok) and a sound prefix check (prefix: false only when no
 * extension of s is an instance): the syntax so far and the fields already complete. */

static unsigned num2(const uint32_t *s) { return (s[0] - '0') * 10 + (s[1] - '0'); }

/* s[0..n) against a template: 'd' a digit, 'h' a hex digit, other characters themselves */
static bool fits(const char *tmpl, const uint32_t *s, size_t n)
{
    if (n > strlen(tmpl))
        return false;
    for (size_t i = 0; i < n; i++) {
        char t = tmpl[i];
        bool good = t == 'd' ? is_digit(s[i]) : t == 'h' ? is_hex(s[i]) : s[i] == (uint8_t)t;
        if (!good)
            return false;
    }
    return true;
}

static bool leap(unsigned y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

static unsigned days_in(unsigned y, unsigned m)
{
    static const unsigned days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : days[m - 1];
}

static bool date_prefix(const uint32_t *s, size_t n)
{
    if (!fits("dddd-dd-dd", s, n))
        return false;
    unsigned m = n >= 7 ? num2(s + 5) : 1;
    if (m < 1 || m > 12)
        return false;
    if (n == 10) {
        unsigned y = num2(s) * 100 + num2(s + 2), d = num2(s + 8);
        if (d < 1 || d > days_in(y, m))
            return false;
    }
    return true;
}

static bool date_ok(const uint32_t *s, size_t n) { return n == 10 && date_prefix(s, n); }

static bool time_prefix(const uint32_t *s, size_t n)
{
    if (!fits("dd:dd:dd", s, n < 8 ? n : 8))
        return false;
    if ((n >= 2 && num2(s) > 23) || (n >= 5 && num2(s + 3) > 59) || (n >= 8 && num2(s + 6) > 60))
        return false;
    size_t i = 8;
    if (n <= i)
        return true;
    if (s[i] == '.') {
        size_t digits = 0;
        for (i++; i < n && is_digit(s[i]); i++)
            digits++;
        if (digits > 9)
            return false;
        if (i == n)
            return true;
        if (digits == 0)
            return false;
    }
    if (s[i] == 'Z' || s[i] == 'z')
        return n == i + 1;
    if (s[i] != '+' && s[i] != '-')
        return false;
    const uint32_t *o = s + i + 1;
    size_t m = n - i - 1;
    if (!fits("dd:dd", o, m))
        return false;
    return !(m >= 2 && num2(o) > 23) && !(m >= 5 && num2(o + 3) > 59);
}

static bool time_ok(const uint32_t *s, size_t n)
{
    if (n < 9 || !time_prefix(s, n))
        return false;
    size_t i = 8;
    if (s[i] == '.') {
        for (i++; i < n && is_digit(s[i]); i++)
            ;
        if (i == n)
            return false;
    }
    if (s[i] == 'Z' || s[i] == 'z')
        return true;
    return n - i == 6;
}

static bool datetime_prefix(const uint32_t *s, size_t n)
{
    if (n <= 10)
        return date_prefix(s, n);
    return date_prefix(s, 10) && (s[10] == 'T' || s[10] == 't') && time_prefix(s + 11, n - 11);
}

static bool datetime_ok(const uint32_t *s, size_t n)
{
    return n > 11 && datetime_prefix(s, n) && time_ok(s + 11, n - 11);
}

static const char uuid_tmpl[] = "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";
static bool uuid_prefix(const uint32_t *s, size_t n) { return fits(uuid_tmpl, s, n); }
static bool uuid_ok(const uint32_t *s, size_t n) { return n == 36 && fits(uuid_tmpl, s, n); }

static bool ipv4_prefix(const uint32_t *s, size_t n)
{
    size_t dots = 0, len = 0;
    unsigned v = 0;
    uint32_t first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c == '.') {
            if (len == 0 || ++dots > 3)
                return false;
            len = 0;
            v = 0;
            continue;
        }
        if (!is_digit(c))
            return false;
        if (len == 0)
            first = c;
        else if (first == '0')
            return false; /* a leading zero */
        if (++len > 3)
            return false;
        v = v * 10 + (c - '0');
        if (v > 255)
            return false;
    }
    return true;
}

static bool ipv4_ok(const uint32_t *s, size_t n)
{
    size_t dots = 0;
    for (size_t i = 0; i < n; i++)
        dots += s[i] == '.';
    return n > 0 && dots == 3 && s[n - 1] != '.' && ipv4_prefix(s, n);
}

static bool hostname_prefix(const uint32_t *s, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c == '.') {
            if (len == 0 || s[i - 1] == '-')
                return false;
            len = 0;
            continue;
        }
        if (!is_alnum(c) && c != '-')
            return false;
        if (len == 0 && c == '-')
            return false;
        if (++len > 63)
            return false;
    }
    return true;
}

static bool hostname_ok(const uint32_t *s, size_t n)
{
    return n > 0 && hostname_prefix(s, n) && s[n - 1] != '.' && s[n - 1] != '-';
}

static const char local_punct[] = "!#$%&'*+/=?^_`{|}~";
static bool local_char(uint32_t c)
{
    return is_alnum(c) || c == '.' || c == '-' || in_set(c, local_punct);
}

static bool email_prefix(const uint32_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '@')
            return i > 0 && hostname_prefix(s + i + 1, n - i - 1);
        if (!local_char(s[i]))
            return false;
    }
    return true;
}

static bool email_ok(const uint32_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '@')
            return email_prefix(s, n) && hostname_ok(s + i + 1, n - i - 1);
    return false;
}

static const char uri_punct[] = "_~/?#[]@!$&'()*,;=";
static bool uri_char(uint32_t c)
{
    return is_alnum(c) || c == '.' || c == '-' || c == '+' || c == ':' || in_set(c, uri_punct);
}

/* Whether s[0..n) is a prefix of a uri; *complete: whether it is one. */
static bool uri_scan(const uint32_t *s, size_t n, bool *complete)
{
    *complete = false;
    if (n == 0)
        return true;
    if (!is_alpha(s[0]))
        return false;
    size_t i = 1;
    for (; i < n && s[i] != ':'; i++)
        if (!is_alnum(s[i]) && s[i] != '+' && s[i] != '.' && s[i] != '-')
            return false;
    if (i == n)
        return true;
    bool partial = false;
    for (i++; i < n; i++) {
        if (s[i] == '%') {
            if ((i + 1 < n && !is_hex(s[i + 1])) || (i + 2 < n && !is_hex(s[i + 2])))
                return false;
            partial = i + 2 >= n;
            i += 2;
            continue;
        }
        if (!uri_char(s[i]))
            return false;
    }
    *complete = !partial;
    return true;
}

static bool uri_prefix(const uint32_t *s, size_t n)
{
    bool complete;
    return uri_scan(s, n, &complete);
}

static bool uri_ok(const uint32_t *s, size_t n)
{
    bool complete;
    return uri_scan(s, n, &complete) && complete;
}

/* ---- classes: code points a schema cannot tell apart ---------------------------------------
 * cls(c) == cls(d) must mean that swapping c for d anywhere never changes inst (held at run
 * time on random strings, test_oracle_classes). */

static int cls_any(uint32_t c)
{
    (void)c;
    return 0;
}
static int cls_date(uint32_t c) { return is_digit(c) ? 1 + (int)(c - '0') : c == '-' ? 11 : 0; }
static int cls_time(uint32_t c)
{
    if (is_digit(c))
        return 1 + (int)(c - '0');
    switch (c) {
    case ':': return 11;
    case '.': return 12;
    case '+': return 13;
    case '-': return 14;
    case 'Z': case 'z': return 15;
    case 'T': case 't': return 16;
    default: return 0;
    }
}
static int cls_uuid(uint32_t c) { return is_hex(c) ? 1 : c == '-' ? 2 : 0; }
static int cls_ipv4(uint32_t c) { return is_digit(c) ? 1 + (int)(c - '0') : c == '.' ? 11 : 0; }
static int cls_hostname(uint32_t c)
{
    return is_alnum(c) ? 1 : c == '-' ? 2 : c == '.' ? 3 : 0;
}
static int cls_email(uint32_t c)
{
    if (is_alnum(c))
        return 1;
    if (c == '-' || c == '.' || c == '@')
        return c == '-' ? 2 : c == '.' ? 3 : 4;
    return in_set(c, local_punct) ? 5 : 0;
}
static int cls_uri(uint32_t c)
{
    if (is_hex(c) && !is_digit(c))
        return 1;
    if (is_alpha(c))
        return 2;
    if (is_digit(c))
        return 3;
    if (c == '+' || c == '.' || c == '-')
        return 4;
    if (c == ':' || c == '%')
        return c == ':' ? 5 : 6;
    return in_set(c, uri_punct) ? 7 : 0;
}
static int cls_slug(uint32_t c)
{
    return c >= 'a' && c <= 'z' ? 1 : is_digit(c) ? 2 : c == '-' ? 3 : 0;
}
static int cls_ssn(uint32_t c) { return is_digit(c) ? 1 : c == '-' ? 2 : 0; }
static int cls_latin(uint32_t c)
{
    if (c >= 'a' && c <= 'z')
        return 1;
    if (c == 0xE9)
        return 2;
    if ((c >= 0xC0 && c <= 0xD6) || (c >= 0xD8 && c <= 0xF6) || (c >= 0xF8 && c <= 0xFF))
        return 3;
    return c == ' ' ? 4 : 0;
}
static int cls_astral(uint32_t c)
{
    return c >= 0x1F600 && c <= 0x1F64F ? 1 : c == 0x1F680 ? 2 : c == 'x' ? 3 : 0;
}
static bool ecma_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == ' ' || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000 || c == 0xFEFF;
}
static int cls_dot(uint32_t c)
{
    if (c == '\n' || c == '\r' || c == 0x2028 || c == 0x2029)
        return 1; /* \s, not . */
    return ecma_space(c) ? 2 : 3;
}
static int cls_mac(uint32_t c)
{
    return is_digit(c) || (c >= 'A' && c <= 'F') ? 1 : c == ':' ? 2 : 0;
}
static int cls_escapes(uint32_t c)
{
    if (c == '\t' || c == '/' || c == '\\' || c == '"')
        return 1;
    return c == 'A' ? 2 : c == 0xE9 ? 3 : 0;
}
static int cls_word(uint32_t c)
{
    return is_digit(c) ? 1 : is_alpha(c) || c == '_' ? 2 : c == '.' ? 3 : 0;
}
static int cls_digit(uint32_t c) { return is_digit(c) ? 1 : 0; }
static int cls_abcd(uint32_t c) { return c >= 'a' && c <= 'd' ? 1 + (int)(c - 'a') : 0; }
static int cls_lower_digits(uint32_t c)
{
    return c >= 'a' && c <= 'z' ? 1 : is_digit(c) ? 2 : 0;
}
static int cls_astral_a(uint32_t c) { return (c >= 0x1F600 && c <= 0x1F64F) || c == 'a' ? 1 : 0; }
static int cls_edges(uint32_t c)
{
    return c == 0xD7FF || c == 0xE000 || c == 0xFFFF || c == 0x10000 || c == 0x10FFFF ? 1 : 0;
}
static int cls_negated(uint32_t c)
{
    return (c >= 0x1F600 && c <= 0x1F64F) || (c >= 'a' && c <= 'z') || ecma_space(c) ? 1 : 0;
}

/* ---- the schemas -------------------------------------------------------------------------- */

typedef struct spec spec;
typedef void generator(const spec *sp, cps *out);

struct spec {
    const char *name;
    const char *type;    /* the JSON of S's "type" */
    const char *pattern; /* ECMA-262, or NULL */
    const char *format;  /* or NULL */
    uint32_t min_len, max_len;
    int (*cls)(uint32_t c);
    bool (*fmt_ok)(const uint32_t *s, size_t n);
    bool (*fmt_prefix)(const uint32_t *s, size_t n);
    bool anchored;  /* every top-level alternative of the pattern begins with ^ */
    uint32_t slack; /* without maxLength: a viable prefix has a completion this many
                       characters beyond minLength */
    generator *gen;
    unsigned n_random; /* instances generated (each with mutations); 0: hand cases only */
};

static generator gen_date, gen_time, gen_datetime, gen_uuid, gen_ipv4, gen_hostname, gen_email,
    gen_uri, gen_slug, gen_ssn, gen_latin, gen_astral, gen_dot, gen_mac, gen_escapes, gen_word,
    gen_lengths, gen_search, gen_alt, gen_lower_digits, gen_astral_a, gen_edges, gen_negated,
    gen_hostname_short, gen_uri_short;

#define STR "\"string\""
/* Slacks: the fixed-length formats' whole length; hostname: 1 ("a-" -> "a-a", "a." ->
 * "a.a"); email: 3 ("" -> "a@a"); uri: 2 ("" -> "a:", "a:%" -> "a:%AA"); the anchored
 * patterns' searches are cut exactly by partial matching, so a generous bound costs nothing
 * (their longest shortest completion: "" -> "a.00" for word, "" -> "000-00-0000" for ssn, 11
 * for mac). */
static const spec specs[] = {
    {"date", STR, NULL, "date", 0, NO_MAX, cls_date, date_ok, date_prefix, false, 10, gen_date,
     90},
    {"time", STR, NULL, "time", 0, NO_MAX, cls_time, time_ok, time_prefix, false, 24, gen_time,
     90},
    {"date-time", STR, NULL, "date-time", 0, NO_MAX, cls_time, datetime_ok, datetime_prefix,
     false, 35, gen_datetime, 70},
    {"uuid", STR, NULL, "uuid", 0, NO_MAX, cls_uuid, uuid_ok, uuid_prefix, false, 36, gen_uuid,
     50},
    {"ipv4", STR, NULL, "ipv4", 0, NO_MAX, cls_ipv4, ipv4_ok, ipv4_prefix, false, 15, gen_ipv4,
     90},
    {"hostname", STR, NULL, "hostname", 0, NO_MAX, cls_hostname, hostname_ok, hostname_prefix,
     false, 2, gen_hostname, 90},
    {"email", STR, NULL, "email", 0, NO_MAX, cls_email, email_ok, email_prefix, false, 3,
     gen_email, 90},
    {"uri", STR, NULL, "uri", 0, NO_MAX, cls_uri, uri_ok, uri_prefix, false, 3, gen_uri, 90},
    {"date-or-null", "[\"string\",\"null\"]", NULL, "date", 0, NO_MAX, cls_date, date_ok,
     date_prefix, false, 10, gen_date, 40},
    {"slug", STR, "^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$", NULL, 0, NO_MAX, cls_slug, NULL, NULL, true,
     12, gen_slug, 70},
    {"ssn", STR, "^\\d{3}-\\d{2}-\\d{4}$", NULL, 0, NO_MAX, cls_ssn, NULL, NULL, true, 12,
     gen_ssn, 50},
    {"latin", STR,
     "^[\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC3\xBF]{2,4}(?: [a-z\xC3\xA9]+)?$",
     NULL, 0, NO_MAX, cls_latin, NULL, NULL, true, 12, gen_latin, 80},
    {"astral", STR, "^[\\u{1F600}-\\u{1F64F}]+(?:\\uD83D\\uDE80|x)?$", NULL, 0, NO_MAX,
     cls_astral, NULL, NULL, true, 12, gen_astral, 80},
    {"dot", STR, "^.{1,3}\\s\\S+$", NULL, 0, NO_MAX, cls_dot, NULL, NULL, true, 12, gen_dot, 90},
    {"mac", STR, "^(?:[0-9A-F]{2}:){2,3}[0-9A-F]{2}$", NULL, 0, NO_MAX, cls_mac, NULL, NULL,
     true, 12, gen_mac, 50},
    {"escapes", STR, "^[\\t\\/\\\\\"]+?A?\\u00e9*$", NULL, 0, NO_MAX, cls_escapes, NULL, NULL,
     true, 12, gen_escapes, 70},
    {"word", STR, "^\\w+\\.\\d{2,}$", NULL, 0, NO_MAX, cls_word, NULL, NULL, true, 12, gen_word,
     60},
    {"len2-4", STR, NULL, NULL, 2, 4, cls_any, NULL, NULL, false, 0, gen_lengths, 70},
    {"max3", STR, NULL, NULL, 0, 3, cls_any, NULL, NULL, false, 0, gen_lengths, 50},
    {"min3", STR, NULL, NULL, 3, NO_MAX, cls_any, NULL, NULL, false, 0, gen_lengths, 50},
    {"max0", STR, NULL, NULL, 0, 0, cls_any, NULL, NULL, false, 0, gen_lengths, 10},
    {"search", STR, "[0-9]{2}", NULL, 3, 6, cls_digit, NULL, NULL, false, 0, gen_search, 80},
    {"alt", STR, "^ab|cd$", NULL, 0, 5, cls_abcd, NULL, NULL, false, 0, gen_alt, 80},
    {"lower-digits", STR, "^[a-z]+[0-9]*$", NULL, 3, 5, cls_lower_digits, NULL, NULL, true, 0,
     gen_lower_digits, 70},
    {"astral-len", STR, "^[\\u{1F600}-\\u{1F64F}a]+$", NULL, 2, 3, cls_astral_a, NULL, NULL, true,
     0, gen_astral_a, 70},
    {"edges", STR, "^[\\uD7FF\\uE000\\uFFFF\\u{10000}\\uDBFF\\uDFFF]+$", NULL, 0, NO_MAX,
     cls_edges, NULL, NULL, true, 12, gen_edges, 70},
    {"negated", STR, "^[^\\u{1F600}-\\u{1F64F}a-z\\s]{1,3}$", NULL, 0, NO_MAX, cls_negated, NULL,
     NULL, true, 12, gen_negated, 70},
    {"slug-or-null", "[\"null\",\"string\"]", "^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$", NULL, 0, NO_MAX,
     cls_slug, NULL, NULL, true, 12, gen_slug, 30},
    /* formats with lengths: hostname's searches are bounded by maxLength; uri's too */
    {"hostname-max8", STR, NULL, "hostname", 0, 8, cls_hostname, hostname_ok, hostname_prefix,
     false, 0, gen_hostname_short, 70},
    {"uri-len5-9", STR, NULL, "uri", 5, 9, cls_uri, uri_ok, uri_prefix, false, 0, gen_uri_short,
     70},
    {"len290-300", STR, NULL, NULL, 290, 300, cls_any, NULL, NULL, false, 0, gen_lengths, 4},
};
enum { N_SPECS = sizeof specs / sizeof specs[0], MAX_CLASSES = 24 };

typedef struct interval {
    uint32_t lo, hi;
    int cls;
} interval;

/* What a spec needs at run time. */
typedef struct rt {
    const spec *sp;
    char *schema_text;
    graft__json_schema *schema;
    pcre2_code *re;
    pcre2_match_data *md;
    bytes subject;
    interval *iv;
    size_t n_iv;
    int n_cls;
    bool has[MAX_CLASSES];
    uint32_t rep[MAX_CLASSES];   /* the lowest member of each class */
    uint32_t plain[MAX_CLASSES]; /* the lowest member >= 0x20 but '"' and '\\', or 0 */
    bool nullable;
} rt;

static rt rts[N_SPECS];
static bool rts_ready;
static bytes bad_text; /* a plain text text_follows was wrong on */

/* ECMA-262 pattern -> PCRE2 pattern (for the constructs the patterns here use). */
static const char ws_members[] = "\\t\\n\\x{B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
                                 "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";

static uint32_t read_hex(const char **p, size_t k)
{
    uint32_t v = 0;
    for (size_t i = 0; i < k; i++) {
        int d = graft_test_hex_digit((uint8_t) * (*p)++);
        assert_true(d >= 0);
        v = v * 16 + (uint32_t)d;
    }
    return v;
}

static void ecma_to_pcre2(const char *src, bytes *out)
{
    bool in_class = false;
    char tmp[32];
    for (const char *p = src; *p != '\0';) {
        if (*p == '\\') {
            char d = p[1];
            p += 2;
            if (d == 'u') {
                uint32_t cp = 0;
                if (*p == '{') {
                    p++;
                    while (*p != '}')
                        cp = cp * 16 + (uint32_t)graft_test_hex_digit((uint8_t)*p++);
                    p++;
                } else {
                    cp = read_hex(&p, 4);
                    if (cp >= 0xD800 && cp <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
                        const char *q = p + 2;
                        uint32_t lo = read_hex(&q, 4);
                        if (lo >= 0xDC00 && lo <= 0xDFFF) {
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            p = q;
                        }
                    }
                }
                snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)cp);
                graft_test_put_str(out, tmp);
            } else if (d == 'x') {
                snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)read_hex(&p, 2));
                graft_test_put_str(out, tmp);
            } else if (d == 's') {
                if (!in_class)
                    graft_test_put_str(out, "[");
                graft_test_put_str(out, ws_members);
                if (!in_class)
                    graft_test_put_str(out, "]");
            } else if (d == 'S') {
                assert_false(in_class);
                graft_test_put_str(out, "[^");
                graft_test_put_str(out, ws_members);
                graft_test_put_str(out, "]");
            } else if (d == 'v') {
                graft_test_put_str(out, "\\x{B}");
            } else if (d == '0') {
                graft_test_put_str(out, "\\x{0}");
            } else {
                graft_test_put_byte(out, '\\');
                graft_test_put_byte(out, (uint8_t)d);
            }
        } else if (*p == '[' && !in_class) {
            in_class = true;
            graft_test_put_byte(out, (uint8_t)*p++);
            if (*p == '^')
                graft_test_put_byte(out, (uint8_t)*p++);
        } else if (*p == ']' && in_class) {
            in_class = false;
            graft_test_put_byte(out, (uint8_t)*p++);
        } else if (*p == '.' && !in_class) {
            graft_test_put_str(out, "[^\\n\\r\\x{2028}\\x{2029}]");
            p++;
        } else {
            graft_test_put_byte(out, (uint8_t)*p++);
        }
    }
    graft_test_put_byte(out, 0);
}

/* {"type":"object","properties":{"a": S},"required":["a"]} */
static char *schema_text_of(const spec *sp)
{
    json_t *s = json_object();
    json_t *type = json_loads(sp->type, JSON_DECODE_ANY, NULL);
    assert_non_null(type);
    json_object_set_new(s, "type", type);
    if (sp->pattern != NULL)
        json_object_set_new(s, "pattern", json_string(sp->pattern));
    if (sp->format != NULL)
        json_object_set_new(s, "format", json_string(sp->format));
    if (sp->min_len > 0)
        json_object_set_new(s, "minLength", json_integer(sp->min_len));
    if (sp->max_len != NO_MAX)
        json_object_set_new(s, "maxLength", json_integer(sp->max_len));
    json_t *root = json_pack("{s:s, s:{s:o}, s:[s]}", "type", "object", "properties", "a", s,
                             "required", "a");
    assert_non_null(root);
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_non_null(text);
    json_decref(root);
    return text;
}

static void setup_rt(rt *r, const spec *sp)
{
    memset(r, 0, sizeof *r);
    r->sp = sp;
    r->nullable = strstr(sp->type, "null") != NULL;
    r->schema_text = schema_text_of(sp);
    char *errmsg = NULL;
    int rc = graft__json_schema_compile(r->schema_text, strlen(r->schema_text), &r->schema,
                                        &errmsg);
    if (rc != GRAFT_OK)
        fail_msg("schema %s (%s) does not compile: %d, %s", sp->name, r->schema_text, rc,
                 errmsg != NULL ? errmsg : "no message");
    free(errmsg);
    if (sp->pattern != NULL) {
        bytes pat = {0};
        ecma_to_pcre2(sp->pattern, &pat);
        int err;
        PCRE2_SIZE off;
        r->re = pcre2_compile((PCRE2_SPTR)pat.p, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, NULL);
        if (r->re == NULL)
            fail_msg("oracle: PCRE2 refuses %s (from %s): error %d at %zu", (char *)pat.p,
                     sp->pattern, err, (size_t)off);
        free(pat.p);
        r->md = pcre2_match_data_create_from_pattern(r->re, NULL);
        assert_non_null(r->md);
    }
    /* the classes' intervals, surrogates left out */
    size_t cap = 64;
    r->iv = malloc(cap * sizeof *r->iv);
    assert_non_null(r->iv);
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (c == 0xD800) {
            c = 0xDFFF;
            continue;
        }
        int k = sp->cls(c);
        assert_true(k >= 0 && k < MAX_CLASSES);
        if (r->n_iv > 0 && r->iv[r->n_iv - 1].cls == k && r->iv[r->n_iv - 1].hi == c - 1) {
            r->iv[r->n_iv - 1].hi = c;
            continue;
        }
        if (r->n_iv == cap) {
            cap *= 2;
            r->iv = realloc(r->iv, cap * sizeof *r->iv);
            assert_non_null(r->iv);
        }
        r->iv[r->n_iv++] = (interval){c, c, k};
        if (!r->has[k]) {
            r->has[k] = true;
            r->rep[k] = c;
        }
        if (k + 1 > r->n_cls)
            r->n_cls = k + 1;
    }
    for (size_t i = 0; i < r->n_iv; i++) {
        const interval *v = &r->iv[i];
        if (r->plain[v->cls] != 0)
            continue;
        for (uint32_t c = v->lo < 0x20 ? 0x20 : v->lo; c <= v->hi && c < v->lo + 8 + 0x20; c++)
            if (c != '"' && c != '\\') {
                r->plain[v->cls] = c;
                break;
            }
    }
}

static void free_rt(rt *r)
{
    free(r->schema_text);
    graft__json_schema_free(r->schema);
    pcre2_match_data_free(r->md);
    pcre2_code_free(r->re);
    free(r->subject.p);
    free(r->iv);
}

static int setup_all(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SPECS; i++)
        setup_rt(&rts[i], &specs[i]);
    rts_ready = true;
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    if (rts_ready)
        for (size_t i = 0; i < N_SPECS; i++)
            free_rt(&rts[i]);
    rts_ready = false;
    free(bad_text.p);
    bad_text = (bytes){0};
    return 0;
}

static rt *rt_named(const char *name)
{
    for (size_t i = 0; i < N_SPECS; i++)
        if (strcmp(specs[i].name, name) == 0)
            return &rts[i];
    fail_msg("no schema %s", name);
    return NULL;
}

/* ---- the oracle: inst, viable ------------------------------------------------------------- */

static bool re_match(rt *r, const uint32_t *s, size_t n, bool partial)
{
    utf8_of(&r->subject, s, n);
    int rc = pcre2_match(r->re, r->subject.p, r->subject.n, 0,
                         partial ? PCRE2_PARTIAL_HARD : 0, r->md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_PARTIAL)
        fail_msg("oracle: pcre2_match failed: %d", rc);
    return rc >= 0 || (partial && rc == PCRE2_ERROR_PARTIAL);
}

static bool inst(rt *r, const uint32_t *s, size_t n)
{
    const spec *sp = r->sp;
    if (n < sp->min_len || n > sp->max_len)
        return false;
    if (sp->fmt_ok != NULL && !sp->fmt_ok(s, n))
        return false;
    return r->re == NULL || re_match(r, s, n, false);
}

/* A sound necessary condition for a completion to exist. */
static bool alive(rt *r, const uint32_t *s, size_t n)
{
    const spec *sp = r->sp;
    if (n > sp->max_len)
        return false;
    if (sp->fmt_prefix != NULL && !sp->fmt_prefix(s, n))
        return false;
    return r->re == NULL || !sp->anchored || n == 0 || re_match(r, s, n, true);
}

static bool dfs(rt *r, uint32_t *s, size_t n, uint32_t budget)
{
    if (!alive(r, s, n))
        return false;
    if (inst(r, s, n))
        return true;
    if (budget == 0)
        return false;
    assert_true(n < BUF_CPS);
    for (int k = 0; k < r->n_cls; k++) {
        if (!r->has[k])
            continue;
        s[n] = r->rep[k];
        if (dfs(r, s, n + 1, budget - 1))
            return true;
    }
    return false;
}

/* Whether s[0..n) (s has room for BUF_CPS) can be extended to an instance. */
static bool viable(rt *r, uint32_t *s, size_t n)
{
    const spec *sp = r->sp;
    uint32_t budget;
    if (sp->max_len != NO_MAX) {
        if (n > sp->max_len)
            return false;
        budget = sp->max_len - (uint32_t)n;
    } else {
        budget = (n < sp->min_len ? sp->min_len - (uint32_t)n : 0) + sp->slack;
    }
    return dfs(r, s, n, budget);
}

typedef struct ranges {
    uint32_t lo[6], hi[6];
    size_t n;
} ranges;

static void push_range(ranges *g, uint32_t lo, uint32_t hi)
{
    assert_true(g->n < 6);
    g->lo[g->n] = lo;
    g->hi[g->n++] = hi;
}

/* [lo, hi] without the surrogates */
static void add_range(ranges *g, uint32_t lo, uint32_t hi)
{
    if (lo > hi)
        return;
    if (lo < 0xD800)
        push_range(g, lo, hi < 0xD7FF ? hi : 0xD7FF);
    if (hi > 0xDFFF)
        push_range(g, lo > 0xE000 ? lo : 0xE000, hi);
}

/* Whether some code point c in the ranges makes s[0..n) c viable. */
static bool viable_in(rt *r, uint32_t *s, size_t n, const ranges *g)
{
    bool tried[MAX_CLASSES] = {false};
    for (size_t j = 0; j < g->n; j++)
        for (size_t i = 0; i < r->n_iv; i++) {
            const interval *v = &r->iv[i];
            if (v->hi < g->lo[j] || v->lo > g->hi[j] || tried[v->cls])
                continue;
            tried[v->cls] = true;
            s[n] = v->lo > g->lo[j] ? v->lo : g->lo[j];
            assert_false(is_surrogate(s[n]));
            if (viable(r, s, n + 1))
                return true;
        }
    return false;
}

/* ---- the oracle: the text's bytes --------------------------------------------------------- */

enum lex_state {
    L_STR, L_UTF8, L_ESC, L_HEX, L_HIGH, L_HIGH_BS, L_LOW_HEX, L_NULL, L_AFTER_VALUE,
    L_AFTER_OBJECT
};
enum ws_state { WS_NONE, WS_SINGLE, WS_CR, WS_LINE };

typedef struct lexer {
    enum lex_state st;
    uint32_t s[BUF_CPS]; /* the decoded string so far */
    size_t n;
    uint32_t val, umin, umax; /* UTF-8: the bits so far and the range of its length */
    unsigned left;            /* UTF-8: continuation bytes left */
    uint32_t hex, high;       /* \u: the digits' value; a high surrogate read */
    unsigned digits;
    size_t lit;               /* null: bytes matched */
    enum ws_state ws;
    unsigned indent;
} lexer;

static void high_ranges(ranges *g, uint32_t h)
{
    uint32_t base = 0x10000 + ((h - 0xD800) << 10);
    add_range(g, base, base + 0x3FF);
}

/* Whitespace and '}' after the value (value true) or after the object. */
static bool step_after(lexer *L, uint8_t b, bool value)
{
    if (b == '}' && value && L->ws != WS_CR) {
        L->st = L_AFTER_OBJECT;
        L->ws = WS_NONE;
        return true;
    }
    switch (L->ws) {
    case WS_NONE:
        if (b == ' ' || b == '\t')
            L->ws = WS_SINGLE;
        else if (b == '\n')
            L->ws = WS_LINE, L->indent = 0;
        else if (b == '\r')
            L->ws = WS_CR;
        else
            return false;
        return true;
    case WS_SINGLE:
        return false;
    case WS_CR:
        if (b != '\n')
            return false;
        L->ws = WS_LINE;
        L->indent = 0;
        return true;
    case WS_LINE:
        if ((b == ' ' || b == '\t') && L->indent < GRAFT__JSON_MAX_INDENT) {
            L->indent++;
            return true;
        }
        return false;
    }
    return false;
}

/* Feeds byte b (after the text's prefix {"a": ); whether the prefix through it has a
 * completion. */
static bool step(rt *r, lexer *L, uint8_t b)
{
    ranges g = {0};
    switch (L->st) {
    case L_STR:
        if (b == '"') {
            if (!inst(r, L->s, L->n))
                return false;
            L->st = L_AFTER_VALUE;
            L->ws = WS_NONE;
            return true;
        }
        if (b == '\\') {
            L->st = L_ESC;
            add_range(&g, 0, 0x10FFFF);
            return viable_in(r, L->s, L->n, &g);
        }
        if (b < 0x20)
            return false;
        if (b < 0x80) {
            L->s[L->n++] = b;
            return viable(r, L->s, L->n);
        }
        if (b >= 0xC0 && b <= 0xDF)
            L->val = b & 0x1F, L->left = 1, L->umin = 0x80, L->umax = 0x7FF;
        else if (b >= 0xE0 && b <= 0xEF)
            L->val = b & 0x0F, L->left = 2, L->umin = 0x800, L->umax = 0xFFFF;
        else if (b >= 0xF0 && b <= 0xF7)
            L->val = b & 0x07, L->left = 3, L->umin = 0x10000, L->umax = 0x10FFFF;
        else
            return false;
        L->st = L_UTF8;
        goto utf8_range;
    case L_UTF8:
        if ((b & 0xC0) != 0x80)
            return false;
        L->val = (L->val << 6) | (b & 0x3F);
        if (--L->left == 0) {
            if (L->val < L->umin || L->val > L->umax || is_surrogate(L->val))
                return false;
            L->s[L->n++] = L->val;
            L->st = L_STR;
            return viable(r, L->s, L->n);
        }
    utf8_range: {
        uint32_t lo = L->val << (6 * L->left), hi = lo | ((1u << (6 * L->left)) - 1);
        if (lo < L->umin)
            lo = L->umin;
        if (hi > L->umax)
            hi = L->umax;
        add_range(&g, lo, hi);
        return viable_in(r, L->s, L->n, &g);
    }
    case L_ESC: {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        if (b == 'u') {
            L->st = L_HEX;
            L->hex = 0;
            L->digits = 0;
            add_range(&g, 0, 0x10FFFF);
            return viable_in(r, L->s, L->n, &g);
        }
        const char *at = b != 0 ? strchr(from, b) : NULL;
        if (at == NULL)
            return false;
        L->s[L->n++] = (uint8_t)to[at - from];
        L->st = L_STR;
        return viable(r, L->s, L->n);
    }
    case L_HEX:
    case L_LOW_HEX: {
        int d = graft_test_hex_digit(b);
        if (d < 0)
            return false;
        L->hex = L->hex * 16 + (uint32_t)d;
        L->digits++;
        uint32_t span = 1u << (4 * (4 - L->digits));
        uint32_t lo = L->hex * span, hi = lo + span - 1;
        if (L->st == L_LOW_HEX) {
            if (lo < 0xDC00)
                lo = 0xDC00;
            if (hi > 0xDFFF)
                hi = 0xDFFF;
            if (lo > hi)
                return false;
            uint32_t base = 0x10000 + ((L->high - 0xD800) << 10) - 0xDC00;
            if (L->digits == 4) {
                L->s[L->n++] = base + L->hex;
                L->st = L_STR;
                return viable(r, L->s, L->n);
            }
            add_range(&g, base + lo, base + hi);
            return viable_in(r, L->s, L->n, &g);
        }
        if (L->digits == 4) {
            if (L->hex >= 0xDC00 && L->hex <= 0xDFFF)
                return false;
            if (L->hex >= 0xD800 && L->hex <= 0xDBFF) {
                L->high = L->hex;
                L->st = L_HIGH;
                high_ranges(&g, L->high);
                return viable_in(r, L->s, L->n, &g);
            }
            L->s[L->n++] = L->hex;
            L->st = L_STR;
            return viable(r, L->s, L->n);
        }
        add_range(&g, lo, hi);
        uint32_t a = lo > 0xD800 ? lo : 0xD800, z = hi < 0xDBFF ? hi : 0xDBFF;
        if (a <= z)
            add_range(&g, 0x10000 + ((a - 0xD800) << 10), 0x10000 + ((z - 0xD800) << 10) + 0x3FF);
        return viable_in(r, L->s, L->n, &g);
    }
    case L_HIGH:
    case L_HIGH_BS:
        if (b != (L->st == L_HIGH ? '\\' : 'u'))
            return false;
        if (L->st == L_HIGH_BS) {
            L->st = L_LOW_HEX;
            L->hex = 0;
            L->digits = 0;
        } else {
            L->st = L_HIGH_BS;
        }
        high_ranges(&g, L->high);
        return viable_in(r, L->s, L->n, &g);
    case L_NULL:
        if (b != (uint8_t)"null"[L->lit])
            return false;
        if (++L->lit == 4) {
            L->st = L_AFTER_VALUE;
            L->ws = WS_NONE;
        }
        return true;
    case L_AFTER_VALUE:
        return step_after(L, b, true);
    case L_AFTER_OBJECT:
        return step_after(L, b, false);
    }
    return false;
}

static const char text_prefix[] = "{\"a\":";
enum { PREFIX_LEN = sizeof text_prefix - 1, DONE_UNKNOWN = 2 };

typedef struct verdict {
    size_t refused;     /* the first refused byte, or n */
    uint8_t *done;      /* after each accepted byte: 0, 1, or DONE_UNKNOWN (after "}\r") */
    enum lex_state *st; /* the lexer's state after each accepted byte */
    size_t *len;        /* the decoded string's length after each accepted byte */
} verdict;

static void verdict_free(verdict *v)
{
    free(v->done);
    free(v->st);
    free(v->len);
}

/* How many texts the oracle refused in each state (GRAFT_TEST_VERBOSE prints them). */
static unsigned long refused_in[L_AFTER_OBJECT + 2], oracle_runs;

/* The oracle on a whole text (which begins with {"a": ). *L: the lexer at the end. */
static verdict oracle(rt *r, const uint8_t *t, size_t n, lexer *L)
{
    verdict v = {n, calloc(n + 1, 1), calloc(n + 1, sizeof *v.st), calloc(n + 1, sizeof *v.len)};
    assert_true(v.done != NULL && v.st != NULL && v.len != NULL);
    assert_true(n > PREFIX_LEN && memcmp(t, text_prefix, PREFIX_LEN) == 0);
    memset(L, 0, sizeof *L);
    oracle_runs++;
    L->st = L_AFTER_OBJECT; /* so that the prefix's bytes read as "not done" below */
    for (size_t i = 0; i < n; i++) {
        bool ok;
        enum lex_state before = L->st;
        if (i < PREFIX_LEN) {
            v.done[i] = 0;
            v.st[i] = L_NULL;
            continue;
        }
        if (i == PREFIX_LEN) {
            if (t[i] == '"') {
                L->st = L_STR;
                L->n = 0;
                ok = viable(r, L->s, 0);
            } else if (t[i] == 'n' && r->nullable) {
                L->st = L_NULL;
                L->lit = 1;
                ok = true;
            } else {
                ok = false;
            }
        } else {
            ok = step(r, L, t[i]);
        }
        if (!ok) {
            v.refused = i;
            refused_in[i == PREFIX_LEN ? L_AFTER_OBJECT + 1 : before]++;
            return v;
        }
        v.st[i] = L->st;
        v.len[i] = L->n;
        v.done[i] = L->st != L_AFTER_OBJECT ? 0 : L->ws == WS_CR ? DONE_UNKNOWN : 1;
    }
    return v;
}

/* ---- the recognizer ----------------------------------------------------------------------- */

typedef struct run {
    size_t refused;
    bool *done, *in_text, *held;  /* after each accepted byte: done, in_text, in_held_text */
    graft__json_syntax *states;   /* after each accepted byte (keep_states), or NULL */
} run;

static run recognize(const rt *r, const uint8_t *t, size_t n, bool keep_states)
{
    run u = {n, calloc(n + 1, 1), calloc(n + 1, 1), calloc(n + 1, 1),
             keep_states ? calloc(n + 1, sizeof(graft__json_syntax)) : NULL};
    assert_true(u.done != NULL && u.in_text != NULL && u.held != NULL);
    assert_true(!keep_states || u.states != NULL);
    graft__json_syntax s;
    graft__json_syntax_init_schema(&s, r->schema);
    for (size_t i = 0; i < n; i++) {
        if (!graft__json_syntax_feed(&s, t[i])) {
            u.refused = i;
            break;
        }
        u.done[i] = graft__json_syntax_done(&s);
        u.in_text[i] = graft__json_syntax_in_text(&s);
        u.held[i] = graft__json_syntax_in_held_text(&s);
        if (keep_states)
            u.states[i] = s;
    }
    return u;
}

static void run_free(run *u)
{
    free(u->done);
    free(u->in_text);
    free(u->held);
    free(u->states);
}

static uint32_t random_char(const rt *r);

/* With in_held_text after byte i: text_follows on random plain texts answers what feeding a
 * copy answers, and what the oracle says (the decoded prefix p[0..n) and the text's
 * characters viable). Returns whether all agreed; *bad_text: the last text that did not. */
static bool text_follows_agrees(rt *r, const graft__json_syntax *st, const uint32_t *p, size_t n,
                                bytes *bad_text)
{
    static uint32_t s[BUF_CPS];
    bytes text = {0};
    bool all = true;
    for (int probe = 0; probe < 3; probe++) {
        memcpy(s, p, n * sizeof s[0]);
        size_t m = n;
        text.n = 0;
        graft_test_put(&text, "", 0);
        for (size_t k = 1 + graft_test_below(4); k > 0; k--) {
            uint32_t c;
            do
                c = random_char(r);
            while (c < 0x20 || c == '"' || c == '\\');
            s[m++] = c;
            graft_test_put_utf8(&text, c);
        }
        bool follows = graft__json_syntax_text_follows(st, (const char *)text.p, text.n);
        graft__json_syntax copy = *st;
        bool fed = true;
        for (size_t i = 0; i < text.n && fed; i++)
            fed = graft__json_syntax_feed(&copy, text.p[i]);
        bool want = viable(r, s, m);
        if (follows != fed || follows != want) {
            all = false;
            bad_text->n = 0;
            graft_test_put(bad_text, text.p, text.n);
        }
    }
    free(text.p);
    return all;
}

/* Whether every run of up to two plain characters keeps s[0..n) viable (and no maxLength). */
static bool any_run_follows(rt *r, uint32_t *s, size_t n)
{
    if (r->sp->max_len != NO_MAX)
        return false;
    for (int a = 0; a < r->n_cls; a++) {
        if (r->plain[a] == 0)
            continue;
        s[n] = r->plain[a];
        if (!viable(r, s, n + 1))
            return false;
        for (int b = 0; b < r->n_cls; b++) {
            if (r->plain[b] == 0)
                continue;
            s[n] = r->plain[a];
            s[n + 1] = r->plain[b];
            if (!viable(r, s, n + 2))
                return false;
        }
    }
    return true;
}

/* What differs between the oracle and the recognizer on t, or NULL; *at: where. */
static const char *disagreement(rt *r, const uint8_t *t, size_t n, size_t *want, size_t *got)
{
    static lexer L;
    verdict v = oracle(r, t, n, &L);
    run u = recognize(r, t, n, true);
    const char *what = NULL;
    *want = v.refused;
    *got = u.refused;
    if (v.refused != u.refused) {
        what = "first refused byte";
    } else {
        for (size_t i = 0; i < v.refused && what == NULL; i++) {
            bool held = i >= PREFIX_LEN && v.st[i] == L_STR;
            static uint32_t prefix[BUF_CPS];
            if (v.done[i] != DONE_UNKNOWN && (bool)v.done[i] != u.done[i]) {
                what = "done after byte (expected, got)";
                *want = i * 10 + v.done[i];
                *got = i * 10 + u.done[i];
            } else if (u.held[i] != held) {
                what = "in_held_text after byte (expected, got)";
                *want = i * 10 + held;
                *got = i * 10 + u.held[i];
            } else if (held && (memcpy(prefix, L.s, v.len[i] * sizeof prefix[0]),
                                !text_follows_agrees(r, &u.states[i], prefix, v.len[i],
                                                     &bad_text))) {
                what = "text_follows differs from feeding or from the oracle, after byte";
                *want = *got = i;
            } else if (u.in_text[i]) {
                bool ok = v.st[i] == L_STR;
                if (ok) {
                    /* the decoded prefix through byte i: the final one's first len[i] */
                    memcpy(prefix, L.s, v.len[i] * sizeof prefix[0]);
                    ok = any_run_follows(r, prefix, v.len[i]);
                }
                if (!ok) {
                    what = "in_text true where not every run of plain characters can follow, "
                           "after byte";
                    *want = *got = i;
                }
            }
        }
    }
    verdict_free(&v);
    run_free(&u);
    return what;
}

/* Checks t against the oracle; must_accept: t is an instance (the oracle is held to that). */
static void check_text(rt *r, const uint8_t *t, size_t n, bool must_accept)
{
    if (must_accept) {
        static lexer L;
        verdict v = oracle(r, t, n, &L);
        bool good = v.refused == n && v.done[n - 1] == 1;
        verdict_free(&v);
        if (!good) {
            if (graft_test_tally_count()) {
                print_error("oracle: refuses an instance [schema %s, seed 0x%" PRIx64 "]: ",
                            r->sp->name, seed);
                graft_test_print_literal(t, n);
                print_error("\n");
            }
            return;
        }
    }
    size_t want, got;
    const char *what = disagreement(r, t, n, &want, &got);
    if (what == NULL)
        return;
    if (!graft_test_tally_count())
        return;
    print_error("%s [schema %s, seed 0x%" PRIx64 "]: oracle %zu, recognizer %zu; text: ", what,
                r->schema_text, seed, want, got);
    graft_test_print_literal(t, n);
    print_error("\n");
    if (strncmp(what, "text_follows", 12) == 0) {
        print_error("    the plain text that followed: ");
        graft_test_print_literal(bad_text.p, bad_text.n);
        print_error("\n");
    }
    /* shrink: drop bytes after the prefix while some disagreement remains */
    uint8_t *s = malloc(n);
    assert_non_null(s);
    memcpy(s, t, n);
    size_t m = n;
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t j = PREFIX_LEN + 1; j < m; j++) {
            uint8_t keep = s[j];
            memmove(s + j, s + j + 1, m - j - 1);
            size_t w2, g2;
            if (m - 1 > PREFIX_LEN + 1 && disagreement(r, s, m - 1, &w2, &g2) != NULL) {
                m--;
                progress = true;
                j--;
            } else {
                memmove(s + j + 1, s + j, m - j - 1);
                s[j] = keep;
            }
        }
    }
    what = disagreement(r, s, m, &want, &got);
    print_error("    shrunk: %s: oracle %zu, recognizer %zu; text: ", what, want, got);
    graft_test_print_literal(s, m);
    print_error("\n");
    free(s);
}

/* ---- generators ------------------------------------------------------------------------------ */

static uint32_t pick(const char *set) { return (uint8_t)set[graft_test_below(strlen(set))]; }

static void put_num(cps *o, unsigned v, int width)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%0*u", width, v);
    put_ascii(o, buf);
}

static void gen_date(const spec *sp, cps *o)
{
    (void)sp;
    static const unsigned years[] = {0, 1, 4, 100, 400, 1600, 1900, 1999, 2000, 2023, 2024,
                                     2100, 9996, 9999};
    unsigned y = graft_test_one_in(2) ? years[graft_test_below(sizeof years / sizeof years[0])] : (unsigned)graft_test_below(10000);
    unsigned m = graft_test_one_in(3) ? 2 : 1 + (unsigned)graft_test_below(12);
    unsigned dim = days_in(y, m);
    unsigned d = graft_test_one_in(2) ? dim - (unsigned)graft_test_below(2) : 1 + (unsigned)graft_test_below(dim);
    put_num(o, y, 4);
    put_cp(o, '-');
    put_num(o, m, 2);
    put_cp(o, '-');
    put_num(o, d, 2);
}

static void gen_time_of(cps *o)
{
    put_num(o, graft_test_one_in(4) ? 23 : (unsigned)graft_test_below(24), 2);
    put_cp(o, ':');
    put_num(o, graft_test_one_in(4) ? 59 : (unsigned)graft_test_below(60), 2);
    put_cp(o, ':');
    put_num(o, graft_test_one_in(4) ? 60 : (unsigned)graft_test_below(61), 2);
    if (graft_test_one_in(2)) {
        put_cp(o, '.');
        for (size_t k = graft_test_one_in(3) ? 9 : 1 + graft_test_below(9); k > 0; k--)
            put_cp(o, '0' + (uint32_t)graft_test_below(10));
    }
    if (graft_test_one_in(3)) {
        put_cp(o, graft_test_one_in(2) ? 'Z' : 'z');
    } else {
        put_cp(o, graft_test_one_in(2) ? '+' : '-');
        put_num(o, graft_test_one_in(4) ? 23 : (unsigned)graft_test_below(24), 2);
        put_cp(o, ':');
        put_num(o, graft_test_one_in(4) ? 59 : (unsigned)graft_test_below(60), 2);
    }
}

static void gen_time(const spec *sp, cps *o)
{
    (void)sp;
    gen_time_of(o);
}

static void gen_datetime(const spec *sp, cps *o)
{
    gen_date(sp, o);
    put_cp(o, graft_test_one_in(2) ? 'T' : 't');
    gen_time_of(o);
}

static const char hex_digits[] = "0123456789abcdefABCDEF";

static void gen_uuid(const spec *sp, cps *o)
{
    (void)sp;
    for (const char *t = uuid_tmpl; *t != '\0'; t++)
        put_cp(o, *t == 'h' ? pick(hex_digits) : (uint8_t)*t);
}

static void gen_ipv4(const spec *sp, cps *o)
{
    (void)sp;
    static const unsigned octets[] = {0, 1, 9, 10, 25, 99, 100, 199, 200, 249, 250, 255};
    for (int k = 0; k < 4; k++) {
        if (k > 0)
            put_cp(o, '.');
        put_num(o, graft_test_one_in(2) ? octets[graft_test_below(12)] : (unsigned)graft_test_below(256), 0);
    }
}

static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

static void gen_hostname_into(cps *o)
{
    size_t labels = 1 + graft_test_below(3);
    for (size_t k = 0; k < labels; k++) {
        if (k > 0)
            put_cp(o, '.');
        size_t len = graft_test_one_in(10) ? 63 : 1 + graft_test_below(8);
        for (size_t i = 0; i < len; i++)
            put_cp(o, i > 0 && i + 1 < len && graft_test_one_in(4) ? '-' : pick(alnum));
    }
}

static void gen_hostname(const spec *sp, cps *o)
{
    (void)sp;
    gen_hostname_into(o);
}

static void gen_email(const spec *sp, cps *o)
{
    (void)sp;
    static const char local[] = "abcXYZ019.!#$%&'*+/=?^_`{|}~-";
    for (size_t k = 1 + graft_test_below(8); k > 0; k--)
        put_cp(o, pick(local));
    put_cp(o, '@');
    gen_hostname_into(o);
}

static void gen_uri(const spec *sp, cps *o)
{
    (void)sp;
    put_cp(o, pick("abczABCZ"));
    for (size_t k = graft_test_below(5); k > 0; k--)
        put_cp(o, pick("ahzHZ09+.-"));
    put_cp(o, ':');
    static const char rest[] = "aqzAQZ09._~:/?#[]@!$&'()*+,;=-";
    for (size_t k = graft_test_below(14); k > 0; k--) {
        if (graft_test_one_in(5)) {
            put_cp(o, '%');
            put_cp(o, pick(hex_digits));
            put_cp(o, pick(hex_digits));
        } else {
            put_cp(o, pick(rest));
        }
    }
}

static void gen_slug(const spec *sp, cps *o)
{
    (void)sp;
    static const char lower[] = "abcdefghijklmnopqrstuvwxyz", lower_digit[] = "az09mq5";
    put_cp(o, pick(lower));
    for (size_t k = graft_test_below(5); k > 0; k--)
        put_cp(o, pick(lower_digit));
    for (size_t g = graft_test_below(3); g > 0; g--) {
        put_cp(o, '-');
        for (size_t k = 1 + graft_test_below(4); k > 0; k--)
            put_cp(o, pick(lower_digit));
    }
}

static void gen_ssn(const spec *sp, cps *o)
{
    (void)sp;
    for (const char *t = "ddd-dd-dddd"; *t != '\0'; t++)
        put_cp(o, *t == 'd' ? '0' + (uint32_t)graft_test_below(10) : (uint8_t)*t);
}

static void gen_latin(const spec *sp, cps *o)
{
    (void)sp;
    static const uint32_t lat[] = {0xC0, 0xC9, 0xD6, 0xD8, 0xE9, 0xF6, 0xF8, 0xFF, 0xDF, 0xE0};
    for (size_t k = 2 + graft_test_below(3); k > 0; k--)
        put_cp(o, lat[graft_test_below(10)]);
    if (graft_test_one_in(2)) {
        put_cp(o, ' ');
        for (size_t k = 1 + graft_test_below(4); k > 0; k--)
            put_cp(o, graft_test_one_in(4) ? 0xE9 : pick("abcxyz"));
    }
}

static void gen_astral(const spec *sp, cps *o)
{
    (void)sp;
    for (size_t k = 1 + graft_test_below(3); k > 0; k--)
        put_cp(o, 0x1F600 + (uint32_t)graft_test_below(0x50));
    if (graft_test_one_in(3))
        put_cp(o, 0x1F680);
    else if (graft_test_one_in(2))
        put_cp(o, 'x');
}

static void gen_dot(const spec *sp, cps *o)
{
    (void)sp;
    static const uint32_t dot[] = {'a', ' ', '\t', 0xA0, 0x1F600, 0xE9, 0x7F, 0, 0x85, 0xFEFF, '"'};
    static const uint32_t space[] = {' ', '\t', '\n', '\r', 0x0B, 0x0C, 0xA0, 0x1680, 0x2000,
                                     0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF};
    static const uint32_t non_space[] = {'a', 0xE9, 0x1F600, 0x85, 0x180E, 0x200B, '\\', 0x10FFFF};
    for (size_t k = 1 + graft_test_below(3); k > 0; k--)
        put_cp(o, dot[graft_test_below(sizeof dot / sizeof dot[0])]);
    put_cp(o, space[graft_test_below(sizeof space / sizeof space[0])]);
    for (size_t k = 1 + graft_test_below(3); k > 0; k--)
        put_cp(o, non_space[graft_test_below(sizeof non_space / sizeof non_space[0])]);
}

static void gen_mac(const spec *sp, cps *o)
{
    (void)sp;
    for (size_t g = 2 + graft_test_below(2); g > 0; g--) {
        put_cp(o, pick("0123456789ABCDEF"));
        put_cp(o, pick("0123456789ABCDEF"));
        put_cp(o, ':');
    }
    put_cp(o, pick("09AF"));
    put_cp(o, pick("19BE"));
}

static void gen_escapes(const spec *sp, cps *o)
{
    (void)sp;
    for (size_t k = 1 + graft_test_below(3); k > 0; k--)
        put_cp(o, pick("\t/\\\""));
    if (graft_test_one_in(2))
        put_cp(o, 'A');
    for (size_t k = graft_test_below(3); k > 0; k--)
        put_cp(o, 0xE9);
}

static void gen_word(const spec *sp, cps *o)
{
    (void)sp;
    for (size_t k = 1 + graft_test_below(4); k > 0; k--)
        put_cp(o, pick("aZ_09"));
    put_cp(o, '.');
    for (size_t k = 2 + graft_test_below(3); k > 0; k--)
        put_cp(o, pick("0123456789"));
}

static const uint32_t palette[] = {
    'a', 'Z', 'x', 'A', 'T', 'z', '0', '9', '-', ':', '.', '@', '%', '/', '\\', '"', ' ', '_',
    '\t', '\n', '\r', 0x00, 0x1F, 0x7F, 0x85, 0xA0, 0xE9, 0xFF, 0x100, 0x7FF, 0x800, 0x2028,
    0xFEFF, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x1F64F, 0x1F680, 0x10FFFF};
enum { N_PALETTE = sizeof palette / sizeof palette[0] };

/* A random code point of class k of r. */
static uint32_t member_of(const rt *r, int k)
{
    size_t count = 0;
    for (size_t i = 0; i < r->n_iv; i++)
        count += r->iv[i].cls == k;
    size_t want = graft_test_below(count);
    for (size_t i = 0; i < r->n_iv; i++) {
        if (r->iv[i].cls != k)
            continue;
        if (want-- == 0) {
            const interval *v = &r->iv[i];
            if (graft_test_one_in(2))
                return v->lo;
            return v->lo + (uint32_t)graft_test_below((size_t)(v->hi - v->lo) + 1);
        }
    }
    fail_msg("no class %d", k);
    return 0;
}

static uint32_t random_char(const rt *r)
{
    if (graft_test_one_in(2))
        return palette[graft_test_below(N_PALETTE)];
    int k;
    do
        k = (int)graft_test_below((size_t)r->n_cls);
    while (!r->has[k]);
    return member_of(r, k);
}

static rt *gen_rt; /* the schema gen_lengths and friends draw characters for */

static void gen_lengths(const spec *sp, cps *o)
{
    uint32_t hi = sp->max_len != NO_MAX ? sp->max_len : sp->min_len + 6;
    size_t len = sp->min_len + graft_test_below(hi - sp->min_len + 1);
    for (size_t i = 0; i < len; i++)
        put_cp(o, random_char(gen_rt));
}

static void gen_search(const spec *sp, cps *o)
{
    size_t len = 3 + graft_test_below(4), at = graft_test_below(len - 1);
    for (size_t i = 0; i < len; i++)
        put_cp(o, i == at || i == at + 1 ? '0' + (uint32_t)graft_test_below(10) : random_char(gen_rt));
    (void)sp;
}

static void gen_alt(const spec *sp, cps *o)
{
    (void)sp;
    size_t extra = graft_test_below(4);
    if (graft_test_one_in(2)) {
        put_ascii(o, "ab");
        for (size_t i = 0; i < extra; i++)
            put_cp(o, random_char(gen_rt));
    } else {
        for (size_t i = 0; i < extra; i++)
            put_cp(o, random_char(gen_rt));
        put_ascii(o, "cd");
    }
}

static void gen_lower_digits(const spec *sp, cps *o)
{
    (void)sp;
    size_t len = 3 + graft_test_below(3), letters = 1 + graft_test_below(len);
    for (size_t i = 0; i < len; i++)
        put_cp(o, i < letters ? pick("abmyz") : pick("0159"));
}

static void gen_astral_a(const spec *sp, cps *o)
{
    (void)sp;
    for (size_t k = 2 + graft_test_below(2); k > 0; k--)
        put_cp(o, graft_test_one_in(3) ? 'a' : 0x1F600 + (uint32_t)graft_test_below(0x50));
}

static void gen_edges(const spec *sp, cps *o)
{
    (void)sp;
    static const uint32_t edges[] = {0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t k = 1 + graft_test_below(4); k > 0; k--)
        put_cp(o, edges[graft_test_below(5)]);
}

static void gen_negated(const spec *sp, cps *o)
{
    (void)sp;
    static const uint32_t chars[] = {'A', '0', '"', '\\', 0x7F, 0x85, 0x1F5FF, 0x1F650, 0xE9,
                                     0x200B, 0x10FFFF, 0};
    for (size_t k = 1 + graft_test_below(3); k > 0; k--)
        put_cp(o, chars[graft_test_below(sizeof chars / sizeof chars[0])]);
}

/* Instances of gen_rt's schema from a generator of longer strings, by rejection. */
static void gen_rejecting(cps *o, void (*gen)(const spec *sp, cps *o))
{
    for (int tries = 0; tries < 10000; tries++) {
        o->n = 0;
        gen(gen_rt->sp, o);
        if (inst(gen_rt, o->c, o->n))
            return;
    }
    fail_msg("no instance of %s generated", gen_rt->sp->name);
}

static void gen_hostname_short(const spec *sp, cps *o)
{
    (void)sp;
    gen_rejecting(o, gen_hostname);
}

static void gen_uri_short(const spec *sp, cps *o)
{
    (void)sp;
    gen_rejecting(o, gen_uri);
}

/* ---- escaping and mutating ------------------------------------------------------------------- */

static void put_u(bytes *b, uint32_t v)
{
    graft_test_put_str(b, "\\u");
    for (int k = 3; k >= 0; k--) {
        unsigned d = (v >> (4 * k)) & 15;
        graft_test_put_byte(b, (uint8_t)(d < 10 ? '0' + d : (graft_test_one_in(2) ? 'a' : 'A') + d - 10));
    }
}

/* The string s as JSON string content, each character written one of its ways at random
 * (style 0: raw where it can be, 1: \u everywhere, 2: a mix). */
static void escape_into(bytes *b, const uint32_t *s, size_t n, int style)
{
    static const char shorts_from[] = "\b\f\n\r\t", shorts_to[] = "bfnrt";
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        bool u = style == 1 || (style == 2 && graft_test_one_in(3));
        if (u) {
            if (c >= 0x10000) {
                put_u(b, 0xD800 + ((c - 0x10000) >> 10));
                put_u(b, 0xDC00 + ((c - 0x10000) & 0x3FF));
            } else {
                put_u(b, c);
            }
        } else if (c == '"' || c == '\\') {
            graft_test_put_byte(b, '\\');
            graft_test_put_byte(b, (uint8_t)c);
        } else if (c < 0x20) {
            const char *at = c != 0 ? strchr(shorts_from, (int)c) : NULL;
            if (at != NULL) {
                graft_test_put_byte(b, '\\');
                graft_test_put_byte(b, (uint8_t)shorts_to[at - shorts_from]);
            } else {
                put_u(b, c);
            }
        } else if (c == '/' && graft_test_one_in(2)) {
            graft_test_put_str(b, "\\/");
        } else {
            graft_test_put_utf8(b, c);
        }
    }
}

static void text_of(bytes *t, const uint32_t *s, size_t n, int style)
{
    t->n = 0;
    graft_test_put_str(t, text_prefix);
    graft_test_put_byte(t, '"');
    escape_into(t, s, n, style);
    graft_test_put_str(t, "\"}");
}

static void mutate_chars(const rt *r, cps *s)
{
    for (size_t edits = 1 + graft_test_below(2); edits > 0; edits--) {
        size_t op = graft_test_below(3);
        if (s->n == 0 || (op == 1 && s->n + 1 < MAX_CPS)) {
            size_t at = graft_test_below(s->n + 1);
            memmove(s->c + at + 1, s->c + at, (s->n - at) * sizeof s->c[0]);
            s->c[at] = random_char(r);
            s->n++;
        } else if (op == 0) {
            s->c[graft_test_below(s->n)] = random_char(r);
        } else {
            size_t at = graft_test_below(s->n);
            memmove(s->c + at, s->c + at + 1, (s->n - at - 1) * sizeof s->c[0]);
            s->n--;
        }
    }
}

static const uint8_t byte_palette[] = {'"', '\\', 'u', '/', 'n', 't', 'b', '0', '9', 'a', 'F',
                                       'D', '8', 'C', 'E', '-', ':', '.', ' ', '@', '%', '}',
                                       0x01, 0x1F, 0x7F, 0x80, 0x98, 0x9F, 0xA0, 0xBF, 0xC0,
                                       0xC3, 0xE0, 0xE2, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};

/* Changes, inserts or deletes one byte of the string's content (between the quotes). */
static void mutate_byte(bytes *t)
{
    size_t lo = PREFIX_LEN + 1, hi = t->n - 2; /* content [lo, hi) */
    uint8_t c = byte_palette[graft_test_below(sizeof byte_palette)];
    size_t op = graft_test_below(3);
    if (hi == lo || op == 1) {
        size_t at = lo + graft_test_below(hi - lo + 1);
        graft_test_put_byte(t, 0);
        memmove(t->p + at + 1, t->p + at, t->n - 1 - at);
        t->p[at] = c;
    } else if (op == 0) {
        t->p[lo + graft_test_below(hi - lo)] = c;
    } else {
        size_t at = lo + graft_test_below(hi - lo);
        memmove(t->p + at, t->p + at + 1, t->n - at - 1);
        t->n--;
    }
}

/* ---- the tests ------------------------------------------------------------------------------ */

/* Classes: swapping characters within their classes never changes inst; the generators
 * make instances. */
static void test_oracle_classes(void **state)
{
    (void)state;
    begin_test(1);
    static cps s, t;
    for (size_t k = 0; k < N_SPECS; k++) {
        rt *r = &rts[k];
        gen_rt = r;
        for (int round = 0; round < 400; round++) {
            s.n = 0;
            if (round % 2 == 0) {
                r->sp->gen(r->sp, &s);
                if (!inst(r, s.c, s.n)) {
                    graft_test_tally_count();
                    print_error("oracle: generator of %s made a non-instance (round %d)\n",
                                r->sp->name, round);
                }
                if (graft_test_one_in(2))
                    mutate_chars(r, &s);
            } else {
                for (size_t i = graft_test_below(10); i > 0; i--)
                    put_cp(&s, random_char(r));
            }
            bool v = inst(r, s.c, s.n);
            t = s;
            for (size_t i = 0; i < t.n; i++)
                t.c[i] = member_of(r, r->sp->cls(t.c[i]));
            if (inst(r, t.c, t.n) != v) {
                graft_test_tally_count();
                print_error("oracle: classes of %s: inst changes under a swap within classes "
                            "(round %d)\n",
                            r->sp->name, round);
            }
        }
    }
    graft_test_tally_end(seed);
}

enum { ACCEPT = -1, OPEN = -2 };

typedef struct hand_case {
    const char *schema;
    const char *text;
    long expect; /* the first refused byte; ACCEPT: accepted and done; OPEN: accepted, not done */
} hand_case;

#define A10 "aaaaaaaaaa"
#define A62 A10 A10 A10 A10 A10 A10 "aa"
#define A63 A62 "a"
#define E4 "\\uD83D\\uDE00"

static const hand_case hand_cases[] = {
    /* date */
    {"date", "{\"a\":\"2024-02-29\"}", ACCEPT},
    {"date", "{\"a\":\"2000-02-29\"}", ACCEPT},
    {"date", "{\"a\":\"0000-02-29\"}", ACCEPT},
    {"date", "{\"a\":\"9999-12-31\"}", ACCEPT},
    {"date", "{\"a\":\"1900-02-29\"}", 15},
    {"date", "{\"a\":\"2100-02-29\"}", 15},
    {"date", "{\"a\":\"2023-02-29\"}", 15},
    {"date", "{\"a\":\"2023-04-31\"}", 15},
    {"date", "{\"a\":\"2023-02-30\"}", 14},
    {"date", "{\"a\":\"2024-02-30\"}", 14},
    {"date", "{\"a\":\"2023-13-01\"}", 12},
    {"date", "{\"a\":\"2023-00-01\"}", 12},
    {"date", "{\"a\":\"2023-1-01\"}", 12},
    {"date", "{\"a\":\"2024-02-2\"}", 15},
    {"date", "{\"a\":\"2024-02-29T\"}", 16},
    {"date", "{\"a\":\"\\u0032024-01-31\"}", ACCEPT},
    {"date", "{\"a\":\"\\u0041\"}", 10},
    {"date", "{\"a\":\"\\u003a\"}", 11},
    {"date", "{\"a\":\"\\uD835\\uDFCE\"}", 8}, /* U+1D7CE, a mathematical digit */
    {"date", "{\"a\":\"\xD9\xA2\"}", 6},       /* U+0662, an Arabic-Indic digit */
    {"date", "{\"a\":\"2024-01-01\"", OPEN},
    /* time */
    {"time", "{\"a\":\"23:59:60Z\"}", ACCEPT},
    {"time", "{\"a\":\"00:00:00.123456789z\"}", ACCEPT},
    {"time", "{\"a\":\"12:00:00+23:59\"}", ACCEPT},
    {"time", "{\"a\":\"12:00:00-00:00\"}", ACCEPT},
    {"time", "{\"a\":\"24:00:00Z\"}", 7},
    {"time", "{\"a\":\"12:60:00Z\"}", 9},
    {"time", "{\"a\":\"12:00:61Z\"}", 13},
    {"time", "{\"a\":\"12:00:00\"}", 14},
    {"time", "{\"a\":\"12:00:00.1234567890Z\"}", 24},
    {"time", "{\"a\":\"12:00:00.Z\"}", 15},
    {"time", "{\"a\":\"12:00:00+24:00\"}", 16},
    {"time", "{\"a\":\"12:00:00+05:60\"}", 18},
    {"time", "{\"a\":\"12:00:00+0500\"}", 17},
    {"time", "{\"a\":\"12:00:00Zx\"}", 15},
    {"time", "{\"a\":\"1:00:00Z\"}", 7},
    /* date-time */
    {"date-time", "{\"a\":\"2024-02-29T23:59:60.5+05:30\"}", ACCEPT},
    {"date-time", "{\"a\":\"2024-02-29t00:00:00z\"}", ACCEPT},
    {"date-time", "{\"a\":\"2024-02-29 12:00:00Z\"}", 16},
    {"date-time", "{\"a\":\"2023-02-29T12:00:00Z\"}", 15},
    {"date-time", "{\"a\":\"2024-02-29T12:00Z\"}", 22},
    {"date-time", "{\"a\":\"2024-02-29\"}", 16},
    /* uuid */
    {"uuid", "{\"a\":\"123e4567-E89B-12d3-a456-426614174000\"}", ACCEPT},
    {"uuid", "{\"a\":\"123e4567-e89b-12d3-a456-42661417400g\"}", 41},
    {"uuid", "{\"a\":\"123e4567e89b\"}", 14},
    {"uuid", "{\"a\":\"123e4567-e89b-12d3-a456-4266141740000\"}", 42},
    {"uuid", "{\"a\":\"123e4567-e89b-12d3-a456-42661417400\"}", 41},
    /* ipv4 */
    {"ipv4", "{\"a\":\"192.168.0.1\"}", ACCEPT},
    {"ipv4", "{\"a\":\"255.255.255.255\"}", ACCEPT},
    {"ipv4", "{\"a\":\"0.0.0.0\"}", ACCEPT},
    {"ipv4", "{\"a\":\"256.1.1.1\"}", 8},
    {"ipv4", "{\"a\":\"300.1.1.1\"}", 8},
    {"ipv4", "{\"a\":\"01.2.3.4\"}", 7},
    {"ipv4", "{\"a\":\"1.2.3\"}", 11},
    {"ipv4", "{\"a\":\"1.2.3.4.5\"}", 13},
    {"ipv4", "{\"a\":\"1..2.3\"}", 8},
    {"ipv4", "{\"a\":\"1.2.3.04\"}", 13},
    {"ipv4", "{\"a\":\"1.2.3.1000\"}", 15},
    {"ipv4", "{\"a\":\".1.2.3\"}", 6},
    /* hostname */
    {"hostname", "{\"a\":\"example.com\"}", ACCEPT},
    {"hostname", "{\"a\":\"xn--bcher-kva.example\"}", ACCEPT},
    {"hostname", "{\"a\":\"1.2\"}", ACCEPT},
    {"hostname", "{\"a\":\"" A63 ".b\"}", ACCEPT},
    {"hostname", "{\"a\":\"" A63 "a\"}", 69},
    {"hostname", "{\"a\":\"" A62 "-b\"}", 68},
    {"hostname", "{\"a\":\"a-.com\"}", 8},
    {"hostname", "{\"a\":\"-a\"}", 6},
    {"hostname", "{\"a\":\"a..b\"}", 8},
    {"hostname", "{\"a\":\"a.\"}", 8},
    {"hostname", "{\"a\":\"a_b\"}", 7},
    {"hostname", "{\"a\":\"b\xC3\xBC" "cher.de\"}", 7},
    {"hostname", "{\"a\":\"\"}", 6},
    /* email */
    {"email", "{\"a\":\"user.name+tag@example.com\"}", ACCEPT},
    {"email", "{\"a\":\"a@b\"}", ACCEPT},
    {"email", "{\"a\":\"!#$%&'*+\\/=?^_`{|}~-.@x\"}", ACCEPT},
    {"email", "{\"a\":\"@a\"}", 6},
    {"email", "{\"a\":\"a@\"}", 8},
    {"email", "{\"a\":\"a@@b\"}", 8},
    {"email", "{\"a\":\"a b@c\"}", 7},
    {"email", "{\"a\":\"a@-b\"}", 8},
    {"email", "{\"a\":\"a@b.\"}", 10},
    {"email", "{\"a\":\"\\u00fc@a\"}", 10},
    {"email", "{\"a\":\"a\\\"b@c\"}", 8},
    /* uri */
    {"uri", "{\"a\":\"https://example.com/a?b=c#d\"}", ACCEPT},
    {"uri", "{\"a\":\"urn:isbn:0451450523\"}", ACCEPT},
    {"uri", "{\"a\":\"a:%2F%2f\"}", ACCEPT},
    {"uri", "{\"a\":\"a:[::1]\"}", ACCEPT},
    {"uri", "{\"a\":\"x+y.z-w:\"}", ACCEPT},
    {"uri", "{\"a\":\"1http:\"}", 6},
    {"uri", "{\"a\":\"a:%2\"}", 10},
    {"uri", "{\"a\":\"a:%g\"}", 9},
    {"uri", "{\"a\":\"a:b c\"}", 9},
    {"uri", "{\"a\":\"ab\"}", 8},
    {"uri", "{\"a\":\"a_b:c\"}", 7},
    {"uri", "{\"a\":\"a:<\"}", 8},
    {"uri", "{\"a\":\"a:\\\\\"}", 9},
    /* a type list */
    {"date-or-null", "{\"a\":null}", ACCEPT},
    {"date-or-null", "{\"a\":\"2024-01-01\"}", ACCEPT},
    {"date-or-null", "{\"a\":nul}", 8},
    {"date-or-null", "{\"a\":\"null\"}", 6},
    {"date-or-null", "{\"a\":true}", 5},
    {"date", "{\"a\":null}", 5},
    /* patterns */
    {"slug", "{\"a\":\"ab-c9\"}", ACCEPT},
    {"slug", "{\"a\":\"ab--c\"}", 9},
    {"slug", "{\"a\":\"-a\"}", 6},
    {"slug", "{\"a\":\"Ab\"}", 6},
    {"slug", "{\"a\":\"ab-\"}", 9},
    {"slug", "{\"a\":\"9a\"}", 6},
    {"ssn", "{\"a\":\"123-45-6789\"}", ACCEPT},
    {"ssn", "{\"a\":\"123-456\"}", 12},
    {"ssn", "{\"a\":\"12a\"}", 8},
    {"latin", "{\"a\":\"\xC3\x89\xC3\xA9\"}", ACCEPT},
    {"latin", "{\"a\":\"\\u00C0\\u00c0\"}", ACCEPT},
    {"latin", "{\"a\":\"\xC3\x80\xC3\x80 caf\xC3\xA9\"}", ACCEPT},
    {"latin", "{\"a\":\"\xC3\x80\"}", 8},
    {"latin", "{\"a\":\"\xC3\x97\"}", 7},
    {"latin", "{\"a\":\"\xC3\x80\xC3\x80\xC3\x80\xC3\x80\xC3\x80\"}", 14},
    {"latin", "{\"a\":\"\xC3\x80\xC3\x80 \xC3\x89\"}", 12},
    {"astral", "{\"a\":\"\xF0\x9F\x98\x80\"}", ACCEPT},
    {"astral", "{\"a\":\"" E4 "\\uD83D\\uDE80\"}", ACCEPT},
    {"astral", "{\"a\":\"\\ud83d\\ude00x\"}", ACCEPT},
    {"astral", "{\"a\":\"\\uD83D\\uDE80\"}", 16},
    {"astral", "{\"a\":\"\xF0\x9F\x9A\x80\"}", 8},
    {"astral", "{\"a\":\"\\uD83D\"}", 12},
    {"astral", "{\"a\":\"\\uDE00\"}", 9},
    {"astral", "{\"a\":\"\\uD83Dx\"}", 12},
    {"astral", "{\"a\":\"\\uD83D\\n\"}", 13},
    {"astral", "{\"a\":\"x\"}", 6},
    {"astral", "{\"a\":\"\\u{1F600}\"}", 8},
    {"dot", "{\"a\":\"ab\\u2028c\"}", ACCEPT},
    {"dot", "{\"a\":\"a\\nb\"}", ACCEPT},
    {"dot", "{\"a\":\"a b\"}", ACCEPT},
    {"dot", "{\"a\":\"a \\u0085\"}", ACCEPT},
    {"dot", "{\"a\":\"\xF0\x9F\x98\x80\xC2\xA0\xF0\x9F\x98\x80\"}", ACCEPT},
    {"dot", "{\"a\":\"\\u2028\"}", 11},
    {"dot", "{\"a\":\"abcd e\"}", 9},
    {"dot", "{\"a\":\"a  \"}", 9},
    {"dot", "{\"a\":\"a \\u00a0\"}", 14},
    {"mac", "{\"a\":\"0A:1B:2C\"}", ACCEPT},
    {"mac", "{\"a\":\"0A:1B:2C:3D\"}", ACCEPT},
    {"mac", "{\"a\":\"0a\"}", 7},
    {"mac", "{\"a\":\"0A:1B:2C:3D:\"}", 17},
    {"escapes", "{\"a\":\"\\t\\/\\\\\\\"A\\u00e9\\u00E9\"}", ACCEPT},
    {"escapes", "{\"a\":\"/\xC3\xA9\"}", ACCEPT},
    {"escapes", "{\"a\":\"A\"}", 6},
    {"escapes", "{\"a\":\"\\\"AA\"}", 9},
    {"escapes", "{\"a\":\"\\b\"}", 7},
    {"word", "{\"a\":\"a_1.05\"}", ACCEPT},
    {"word", "{\"a\":\"a.0\"}", 9},
    {"word", "{\"a\":\".5\"}", 6},
    /* lengths */
    {"len2-4", "{\"a\":\"ab\"}", ACCEPT},
    {"len2-4", "{\"a\":\"a\"}", 7},
    {"len2-4", "{\"a\":\"abcde\"}", 10},
    {"len2-4", "{\"a\":\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"}",
     ACCEPT},
    {"len2-4", "{\"a\":\"" E4 E4 E4 E4 "\"}", ACCEPT},
    {"len2-4", "{\"a\":\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80"
               "\xF0\x9F\x98\x80\"}", 22},
    {"len2-4", "{\"a\":\"" E4 E4 E4 E4 E4 "\"}", 54},
    {"max0", "{\"a\":\"\"}", ACCEPT},
    {"max0", "{\"a\":\"x\"}", 6},
    {"max0", "{\"a\":\"\\u0000\"}", 6},
    {"min3", "{\"a\":\"ab\"}", 8},
    {"min3", "{\"a\":\"abc\"}", ACCEPT},
    {"min3", "{\"a\":\"\\u0000\\n\\u2028\"}", ACCEPT},
    {"max3", "{\"a\":\"\"}", ACCEPT},
    {"max3", "{\"a\":\"abcd\"}", 9},
    /* patterns with lengths */
    {"search", "{\"a\":\"a12\"}", ACCEPT},
    {"search", "{\"a\":\"12\"}", 8},
    {"search", "{\"a\":\"abcde1\"}", 10},
    {"search", "{\"a\":\"1a2b3c\"}", 11},
    {"alt", "{\"a\":\"abxyz\"}", ACCEPT},
    {"alt", "{\"a\":\"xyzcd\"}", ACCEPT},
    {"alt", "{\"a\":\"cd\"}", ACCEPT},
    {"alt", "{\"a\":\"xyzc\"}", 10},
    {"alt", "{\"a\":\"xyzw\"}", 9},
    {"alt", "{\"a\":\"abxyzw\"}", 11},
    {"lower-digits", "{\"a\":\"ab1\"}", ACCEPT},
    {"lower-digits", "{\"a\":\"abcde\"}", ACCEPT},
    {"lower-digits", "{\"a\":\"a1\"}", 8},
    {"lower-digits", "{\"a\":\"a1b\"}", 8},
    {"lower-digits", "{\"a\":\"abcdef\"}", 11},
    {"astral-len", "{\"a\":\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"}", ACCEPT},
    {"astral-len", "{\"a\":\"" E4 "a" E4 "\"}", ACCEPT},
    {"astral-len", "{\"a\":\"\xF0\x9F\x98\x80\"}", 10},
    {"astral-len", "{\"a\":\"\xF0\x9F\x98\x80" "a\xF0\x9F\x98\x80" "a\"}", 15},
    {"edges", "{\"a\":\"\\uD7FF\\uE000\\uFFFF\\uDBFF\\uDFFF\\ud800\\udc00\"}", ACCEPT},
    {"edges", "{\"a\":\"\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\"}",
     ACCEPT},
    {"edges", "{\"a\":\"\\uD7FE\"}", 11},
    {"edges", "{\"a\":\"\\uDBFF\\uDFFE\"}", 17},
    {"edges", "{\"a\":\"\\uD801\"}", 11},
    {"edges", "{\"a\":\"\xF4\x8F\xBF\xBE\"}", 9},
    {"edges", "{\"a\":\"\xF4\x90\"}", 7},
    {"edges", "{\"a\":\"\xED\xA0\x80\"}", 7},
    {"edges", "{\"a\":\"\xEE\x80\x81\"}", 8},
    {"negated", "{\"a\":\"A\\\"\\u0000\"}", ACCEPT},
    {"negated", "{\"a\":\"A\\u0020\"}", 12},
    {"negated", "{\"a\":\"ABCD\"}", 9},
    {"negated", "{\"a\":\"\xF0\x9F\x98\x80\"}", 8},
    {"slug-or-null", "{\"a\":null}", ACCEPT},
    {"slug-or-null", "{\"a\":\"a-b\"}", ACCEPT},
    {"hostname-max8", "{\"a\":\"abc.defg\"}", ACCEPT},
    {"hostname-max8", "{\"a\":\"abc.defgh\"}", 14},
    {"hostname-max8", "{\"a\":\"abcdefg-\"}", 13},
    {"hostname-max8", "{\"a\":\"abcdefg.\"}", 13},
    {"uri-len5-9", "{\"a\":\"a:bcd\"}", ACCEPT},
    {"uri-len5-9", "{\"a\":\"a:bc\"}", 10},
    {"uri-len5-9", "{\"a\":\"a:bcdefg%\"}", 14},
    {"uri-len5-9", "{\"a\":\"abcdefghi:\"}", 14},
    /* after the string */
    {"date", "{\"a\":\"2024-01-01\" }", ACCEPT},
    {"date", "{\"a\":\"2024-01-01\",", 17},
    {"date", "{\"a\":\"2024-01-01\"}x", 18},
};

static void test_hand_cases(void **state)
{
    (void)state;
    begin_test(2);
    for (size_t k = 0; k < sizeof hand_cases / sizeof hand_cases[0]; k++) {
        const hand_case *h = &hand_cases[k];
        rt *r = rt_named(h->schema);
        const uint8_t *t = (const uint8_t *)h->text;
        size_t n = strlen(h->text);
        static lexer L;
        verdict v = oracle(r, t, n, &L);
        long oracle_says = v.refused < n ? (long)v.refused : v.done[n - 1] == 1 ? ACCEPT : OPEN;
        verdict_free(&v);
        if (oracle_says != h->expect) {
            graft_test_tally_count();
            print_error("oracle: hand case %zu [%s] expects %ld, the oracle says %ld: ", k,
                        h->schema, h->expect, oracle_says);
            graft_test_print_literal(t, n);
            print_error("\n");
        }
        run u = recognize(r, t, n, false);
        long got = u.refused < n ? (long)u.refused : u.done[n - 1] ? ACCEPT : OPEN;
        run_free(&u);
        if (got != h->expect) {
            graft_test_tally_count();
            print_error("hand case %zu [%s]: expected %ld, the recognizer says %ld: ", k,
                        r->schema_text, h->expect, got);
            graft_test_print_literal(t, n);
            print_error("\n");
        }
        size_t want, gotb;
        const char *what = disagreement(r, t, n, &want, &gotb);
        if (what != NULL && got == h->expect) {
            graft_test_tally_count();
            print_error("hand case %zu [%s]: %s: oracle %zu, recognizer %zu\n", k, h->schema,
                        what, want, gotb);
        }
    }
    graft_test_tally_end(seed);
}

static void random_texts(rt *r)
{
    static cps s, m;
    bytes t = {0};
    gen_rt = r;
    const spec *sp = r->sp;
    const char *scale_env = getenv("GRAFT_TEST_SCALE");
    unsigned long scale = scale_env != NULL ? strtoul(scale_env, NULL, 0) : 6;
    for (unsigned long k = 0; k < sp->n_random * scale; k++) {
        s.n = 0;
        sp->gen(sp, &s);
        text_of(&t, s.c, s.n, (int)graft_test_below(3));
        check_text(r, t.p, t.n, true);
        for (int j = 0; j < 3; j++) {
            m = s;
            mutate_chars(r, &m);
            text_of(&t, m.c, m.n, (int)graft_test_below(3));
            check_text(r, t.p, t.n, false);
        }
        for (int j = 0; j < 2; j++) {
            text_of(&t, s.c, s.n, (int)graft_test_below(3));
            for (size_t e = 1 + graft_test_below(2); e > 0; e--)
                mutate_byte(&t);
            check_text(r, t.p, t.n, false);
        }
        /* a random string */
        m.n = 0;
        for (size_t i = graft_test_below(12); i > 0; i--)
            put_cp(&m, random_char(r));
        text_of(&t, m.c, m.n, (int)graft_test_below(3));
        check_text(r, t.p, t.n, false);
    }
    if (r->nullable) {
        static const char *const nulls[] = {"{\"a\":null}", "{\"a\":null }", "{\"a\":nulll}",
                                            "{\"a\":nu\"}", "{\"a\":null\n  }"};
        for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
            check_text(r, (const uint8_t *)nulls[i], strlen(nulls[i]), i == 0 || i == 1 || i == 4);
    }
    free(t.p);
}

static void test_random(void **state)
{
    const spec *sp = *state;
    rt *r = &rts[sp - specs];
    begin_test(100 + (uint64_t)(sp - specs));
    memset(refused_in, 0, sizeof refused_in);
    oracle_runs = 0;
    random_texts(r);
    if (getenv("GRAFT_TEST_VERBOSE") != NULL) {
        static const char *const names[] = {"char", "utf8", "esc", "hex", "high", "high\\",
                                            "low", "null", "after value", "after object",
                                            "value"};
        print_message("%s: %lu oracle runs; refused in:", sp->name, oracle_runs);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            print_message(" %s %lu", names[i], refused_in[i]);
        print_message("\n");
    }
    graft_test_tally_end(seed);
}

/* The recognizer alone on texts whose verdicts are plain: other members of a type list beside
 * "string" are not held to the string keywords; the longest maxLength the compiler takes
 * (10000, its message says) counts code points to the end. */
static void expect_text(const char *schema_text, const uint8_t *t, size_t n, long expect)
{
    graft__json_schema *schema = graft_test_compile_schema(schema_text);
    if (schema == NULL) {
        graft_test_tally_count();
        return;
    }
    rt r = {.schema = schema};
    run u = recognize(&r, t, n, false);
    long got = u.refused < n ? (long)u.refused : u.done[n - 1] ? ACCEPT : OPEN;
    run_free(&u);
    graft__json_schema_free(schema);
    if (got != expect) {
        graft_test_tally_count();
        print_error("%s: expected %ld, the recognizer says %ld on a text of %zu bytes: ",
                    schema_text, expect, got, n);
        graft_test_print_literal(t, n < 80 ? n : 80);
        print_error("%s\n", n < 80 ? "" : "...");
    }
}

static void expect_str(const char *schema_text, const char *text, long expect)
{
    expect_text(schema_text, (const uint8_t *)text, strlen(text), expect);
}

static void test_direct(void **state)
{
    (void)state;
    begin_test(4);
    const char *int_or_str =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"integer\",\"string\"],"
        "\"pattern\":\"^a\",\"maxLength\":2}},\"required\":[\"a\"]}";
    expect_str(int_or_str, "{\"a\":12345}", ACCEPT);
    expect_str(int_or_str, "{\"a\":\"ab\"}", ACCEPT);
    expect_str(int_or_str, "{\"a\":\"b\"}", 6);
    expect_str(int_or_str, "{\"a\":\"abc\"}", 8);
    const char *long_text = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                            "\"minLength\":9999,\"maxLength\":10000}},\"required\":[\"a\"]}";
    bytes t = {0};
    for (size_t chars = 9998; chars <= 10001; chars++) {
        t.n = 0;
        graft_test_put_str(&t, "{\"a\":\"");
        size_t last = 0; /* where the last character begins */
        for (size_t i = 0; i < chars; i++) {
            last = t.n;
            if (i % 3 == 0)
                graft_test_put_str(&t, "\xC3\xA9");
            else if (i % 3 == 1)
                graft_test_put_str(&t, "\\uD83D\\uDE00");
            else
                graft_test_put_byte(&t, 'x');
        }
        size_t before_quote = t.n;
        graft_test_put_str(&t, "\"}");
        /* 9998: the quote is refused; 10001: the last character's first byte */
        long expect = chars == 9998 ? (long)before_quote : chars == 10001 ? (long)last : ACCEPT;
        expect_text(long_text, t.p, t.n, expect);
    }
    free(t.p);
    graft_test_tally_end(seed);
}

typedef struct refusal {
    const char *string_schema; /* S in {"type":"object","properties":{"a": S},"required":["a"]} */
    const char *names[3];      /* the message names one of these */
} refusal;

static const refusal refusals[] = {
    {"{\"type\":\"string\",\"pattern\":\"^a\",\"format\":\"date\"}", {"pattern", "format"}},
    {"{\"type\":\"string\",\"enum\":[\"ab\"],\"pattern\":\"a\"}", {"pattern", "enum"}},
    {"{\"enum\":[\"ab\",\"cd\"],\"maxLength\":3}", {"maxLength", "enum"}},
    {"{\"type\":\"string\",\"const\":\"x\",\"format\":\"date\"}", {"format", "const"}},
    {"{\"pattern\":\"a\"}", {"pattern", "type"}},
    {"{\"minLength\":1}", {"minLength", "type"}},
    {"{\"format\":\"date\"}", {"format", "type"}},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", {"minLength", "maxLength"}},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}", {"format", "ipv6"}},
    {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", {"pattern"}},
    {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", {"pattern"}},
    {"{\"type\":\"string\",\"pattern\":\"\\\\bfoo\"}", {"pattern"}},
    {"{\"type\":\"string\",\"pattern\":\"a^b\"}", {"pattern"}},
    {"{\"type\":\"string\",\"pattern\":\"[a\"}", {"pattern"}},
    {"{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", {"pattern", "minLength"}},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":9}", {"format", "maxLength"}},
    {"{\"type\":\"string\",\"minLength\":-1}", {"minLength"}},
    {"{\"type\":\"string\",\"pattern\":5}", {"pattern"}},
};

static char *wrap(const char *string_schema)
{
    const char *head = "{\"type\":\"object\",\"properties\":{\"a\":";
    const char *tail = "},\"required\":[\"a\"]}";
    size_t n = strlen(head) + strlen(string_schema) + strlen(tail) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%s%s%s", head, string_schema, tail);
    return s;
}

static void test_compile(void **state)
{
    (void)state;
    begin_test(3);
    for (size_t k = 0; k < sizeof refusals / sizeof refusals[0]; k++) {
        const refusal *f = &refusals[k];
        char *text = wrap(f->string_schema);
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = graft__json_schema_compile(text, strlen(text), &out, &errmsg);
        bool named = false;
        for (size_t i = 0; i < 3 && f->names[i] != NULL; i++)
            named = named || (errmsg != NULL && strstr(errmsg, f->names[i]) != NULL);
        if (rc != GRAFT_EINVAL || !named) {
            graft_test_tally_count();
            print_error("compile %s: %d (expected %d), message %s\n", text, rc, GRAFT_EINVAL,
                        errmsg != NULL ? errmsg : "(none)");
        }
        if (rc == GRAFT_OK)
            graft__json_schema_free(out);
        free(errmsg);
        free(text);
    }
    static const char *const accepted[] = {
        "{\"type\":[\"string\",\"null\"],\"pattern\":\"^a\"}",
        "{\"type\":\"string\",\"format\":\"date\",\"minLength\":10,\"maxLength\":10}",
        "{\"type\":\"string\",\"pattern\":\"\\\\u{10FFFF}|\\\\x41\\\\v\\\\0[^\\\\s\\\\d]+?\"}",
        "{\"type\":\"string\",\"minLength\":0}",
        "{\"type\":\"string\",\"pattern\":\"^a|b$\",\"maxLength\":1000}",
    };
    for (size_t k = 0; k < sizeof accepted / sizeof accepted[0]; k++) {
        char *text = wrap(accepted[k]);
        graft__json_schema *out = NULL;
        char *errmsg = NULL;
        int rc = graft__json_schema_compile(text, strlen(text), &out, &errmsg);
        if (rc != GRAFT_OK) {
            graft_test_tally_count();
            print_error("compile %s: %d (expected 0), message %s\n", text, rc,
                        errmsg != NULL ? errmsg : "(none)");
        } else {
            graft__json_schema_free(out);
        }
        free(errmsg);
        free(text);
    }
    graft_test_tally_end(seed);
}

int main(void)
{
    struct CMUnitTest tests[4 + N_SPECS] = {
        cmocka_unit_test(test_compile),
        cmocka_unit_test(test_oracle_classes),
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_direct),
    };
    for (size_t i = 0; i < N_SPECS; i++) {
        tests[4 + i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_random, (void *)&specs[i]);
        tests[4 + i].name = specs[i].name;
    }
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
