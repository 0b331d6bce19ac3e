/*
 * test_json_syntax.c: the byte-at-a-time recognizer of one JSON object (graft__json_syntax_*,
 * json_output.h), checked against oracles written here from RFC 8259, the header's limits and
 * jansson, without reference to json_syntax.c.
 *
 * The header fixes what each byte does: feed accepts a byte exactly when the bytes so far can
 * still be completed to an accepted text (whitespace, one object, whitespace, within the limits),
 * and done says whether they are one. So:
 *   - hand-written cases give the index of the first refused byte at the grammar's corners and
 *     at the limits; each expectation is itself held to the oracle below (the text before the
 *     refused byte has a completion, the text through it has none), so a wrong one fails too;
 *   - random objects, serialised by jansson under several flag sets and by a serialiser here
 *     (random whitespace, escapes, number forms), are accepted to the end and done from the
 *     closing brace on, or refused exactly at the first byte that breaks a limit (a form of
 *     whitespace the header does not allow, the bracket of a 65th level), found by a scanner
 *     here; and in_text holds exactly inside strings between characters, as a scanner says;
 *   - mutations of those texts: the verdict on the whole text agrees with the oracle both ways,
 *     the prefix before the first refused byte has a completion and the prefix through it has
 *     none, among candidate completions that cover every lexical state;
 *   - a copy of the state is a fork: copies fed different bytes do not affect each other.
 *
 * The oracle of "accepted complete text" is jansson (json_loadb, root an object) plus checks
 * here of what jansson does not hold to or holds to beyond RFC 8259; see oracle().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "json_oracle.h"
#include "engine/json_output.h"

/* ---- bytes, the PRNG, reporting --------------------------------------------------------- */

typedef graft_test_bytes bytes;

/* The seed is fixed (GRAFT_TEST_SEED overrides it) and printed with a failure. */
static uint64_t seed = 0x6a736f6e5f737978u;

static void seed_rng(uint64_t stream)
{
    seed = graft_test_seed(seed);
    graft_test_random_start(seed, stream);
}

/* Fails the test after printing the check, `detail` and the text it was about. */
static void fail_on(const char *what, const char *detail, const uint8_t *t, size_t n)
{
    print_error("%s, %s (seed 0x%" PRIx64 "), text of %zu bytes: ", what, detail, seed, n);
    graft_test_print_literal(t, n);
    print_error("\n");
    fail();
}

/* A check about t[at] (or the prefix t[0..at), as `what` says). */
static void check_at(bool ok, const char *what, size_t at, const uint8_t *t, size_t n)
{
    char detail[64];
    if (ok)
        return;
    snprintf(detail, sizeof detail, "at %zu", at);
    fail_on(what, detail, t, n);
}

/* A check that a value (an index or a flag) about t[0..n) is the one expected. */
static void check_eq(size_t expected, size_t actual, const char *what, const uint8_t *t, size_t n)
{
    char detail[96];
    if (expected == actual)
        return;
    snprintf(detail, sizeof detail, "expected %zu, got %zu", expected, actual);
    fail_on(what, detail, t, n);
}

/* ---- the recognizer --------------------------------------------------------------------- */

/* refused: the index of the first refused byte, n when none was; done: done() of the state
 * that accepted t[0..refused). */
typedef struct {
    size_t refused;
    bool done;
} verdict;

/* Feeds t[0..n) to one state and stops at the first refusal (the state is then unspecified).
 * done_at and in_text_at, when given (n + 1 entries), get done() and in_text() after each
 * accepted prefix: done_at[k] is done() after k bytes, for k <= refused. */
static verdict recognize(const uint8_t *t, size_t n, bool *done_at, bool *in_text_at)
{
    graft__json_syntax s;
    graft__json_syntax_init(&s);
    for (size_t i = 0;; i++) {
        bool done = graft__json_syntax_done(&s);
        if (done_at != NULL)
            done_at[i] = done;
        if (in_text_at != NULL)
            in_text_at[i] = graft__json_syntax_in_text(&s);
        if (i == n || !graft__json_syntax_feed(&s, t[i]))
            return (verdict){i, done};
    }
}

/* ---- scanners written from the header --------------------------------------------------- */

static bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The index of the quote that closes a string whose content starts at t[i], or n. */
static size_t string_end(const uint8_t *t, size_t n, size_t i)
{
    for (; i < n; i++) {
        if (t[i] == '\\')
            i++;
        else if (t[i] == '"')
            return i;
    }
    return n;
}

/* The index of the first byte that breaks a limit the header adds to RFC 8259's grammar, or n:
 *   - whitespace between tokens (and before and after the object) is one space or tab, or one
 *     line break (LF or CR LF) and then at most GRAFT__JSON_MAX_INDENT spaces and tabs: the
 *     first byte that no such form continues with (for a lone CR, the byte after it);
 *   - the bracket that opens level GRAFT__JSON_MAX_DEPTH + 1 (the top object is level 1).
 * Bytes in strings are content, never whitespace. Any bytes may be given: brackets are counted,
 * not matched. */
static size_t limits_broken_at(const uint8_t *t, size_t n)
{
    enum { NO_SPACE, ONE_SPACE, CR, LINE } run = NO_SPACE; /* the whitespace just before */
    size_t indent = 0;                                      /* in a LINE run */
    long depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_space(t[i])) {
            if (run == NO_SPACE)
                run = t[i] == '\n' ? LINE : t[i] == '\r' ? CR : ONE_SPACE;
            else if (run == CR && t[i] == '\n')
                run = LINE;
            else if (run == LINE && t[i] != '\n' && t[i] != '\r' && indent < GRAFT__JSON_MAX_INDENT)
                indent++;
            else
                return i;
            continue;
        }
        if (run == CR)
            return i;
        run = NO_SPACE;
        indent = 0;
        if (t[i] == '"')
            i = string_end(t, n, i + 1);
        else if (t[i] == '{' || t[i] == '[') {
            if (++depth > GRAFT__JSON_MAX_DEPTH)
                return i;
        } else if (t[i] == '}' || t[i] == ']')
            depth--;
    }
    return n;
}

/* Whether, in every string, each \u escape of a high surrogate is followed at once by a \u
 * escape of a low one and no low one stands alone (the header's rule). Other malformed escapes
 * are jansson's to refuse: they break no pairing here. */
static bool surrogates_paired(const uint8_t *t, size_t n)
{
    bool in_string = false, high = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            in_string = t[i] == '"';
            continue;
        }
        if (t[i] == '\\' && i + 5 < n && t[i + 1] == 'u') {
            int unit = 0;
            for (size_t k = i + 2; k < i + 6 && unit >= 0; k++)
                unit = graft_test_hex_digit(t[k]) < 0 ? -1 : unit << 4 | graft_test_hex_digit(t[k]);
            if (unit >= 0) {
                bool low = unit >= 0xDC00 && unit <= 0xDFFF;
                if (high != low)
                    return false;
                high = unit >= 0xD800 && unit <= 0xDBFF;
                i += 5;
                continue;
            }
        }
        if (high)
            return false;
        if (t[i] == '\\')
            i++;
        else if (t[i] == '"')
            in_string = false;
    }
    return !high;
}

/* ---- the oracle ------------------------------------------------------------------------- */

typedef graft_test_truth truth;

/* Whether t[0..n) is a complete text the header accepts: one object by jansson's reading
 * (json_oracle.h), within the whitespace and nesting limits (limits_broken_at), not ending
 * in a CR (its LF is due). surrogates_paired repeats jansson's surrogate rule, to hold the
 * oracle to the header's text. */
static truth oracle(const uint8_t *t, size_t n)
{
    if (limits_broken_at(t, n) < n || !surrogates_paired(t, n) || (n > 0 && t[n - 1] == '\r'))
        return GRAFT_TEST_INVALID;
    return graft_test_jansson_object(t, n);
}

/* Completions tried for a prefix: one that finishes the token in progress, then one that
 * finishes the member, then the brackets left open. Together they complete every prefix of an
 * accepted text: before the object ("{}"); in a string (the closing quote, after an escape's
 * remaining byte or hex digits, with a low surrogate escape or its rest after a high one, or a
 * UTF-8 sequence's continuation bytes, E0 and F0 needing A0 and 90 first); in a number ("0"
 * after - . e e+); in a literal (its rest); after a key (":0"), a colon or an array's comma
 * ("0"), an object's comma ("\"\":0"). After a lone CR the LF comes first. Nothing else adds
 * whitespace or a level, so the limits hold when they held for the prefix. */
static const char *const finish_token[] = {
    "", "{}", "0", "\"", "n\"",
    "0\"", "00\"", "000\"", "0000\"",
    "0\\uDC00\"", "00\\uDC00\"", "000\\uDC00\"", "0000\\uDC00\"",
    "\\uDC00\"", "uDC00\"", "DC00\"", "C00\"",
    "\x80\"", "\x80\x80\"", "\x80\x80\x80\"", "\xA0\x80\"", "\x90\x80\x80\"",
    "rue", "ue", "e", "alse", "lse", "se", "ull", "ll", "l",
};
static const char *const finish_member[] = {"", ":0", "0", "\"\":0"};

/* Valid when a candidate completion of t[0..n) is valid, else unknown when one is unknown. */
static truth completable(const uint8_t *t, size_t n)
{
    bytes open = {0}, text = {0};
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"')
            i = string_end(t, n, i + 1);
        else if (t[i] == '{' || t[i] == '[')
            graft_test_put_byte(&open, t[i] == '{' ? '}' : ']');
        else if ((t[i] == '}' || t[i] == ']') && open.n > 0)
            open.n--;
    }
    bool cr = n > 0 && t[n - 1] == '\r'; /* only whitespace has a raw CR */
    truth best = GRAFT_TEST_INVALID;
    for (size_t a = 0; a < sizeof finish_token / sizeof *finish_token && best != GRAFT_TEST_VALID;
         a++) {
        for (size_t b = 0; b < sizeof finish_member / sizeof *finish_member; b++) {
            text.n = 0;
            graft_test_put(&text, t, n);
            if (cr)
                graft_test_put_byte(&text, '\n');
            graft_test_put_str(&text, finish_token[a]);
            graft_test_put_str(&text, finish_member[b]);
            for (size_t k = open.n; k-- > 0;)
                graft_test_put_byte(&text, open.p[k]);
            truth o = oracle(text.p, text.n);
            if (o == GRAFT_TEST_VALID) {
                best = GRAFT_TEST_VALID;
                break;
            }
            if (o == GRAFT_TEST_UNKNOWN)
                best = GRAFT_TEST_UNKNOWN;
        }
    }
    free(open.p);
    free(text.p);
    return best;
}

/* ---- checks shared by all texts --------------------------------------------------------- */

/* done holds from the byte that closes the object on, over the whitespace after it but for a CR
 * that awaits its LF, and never before; the prefix where it first holds is a valid text. */
static void check_done_shape(const uint8_t *t, size_t n, verdict v, const bool *done_at)
{
    size_t first = 0;
    while (first <= v.refused && !done_at[first])
        first++;
    if (first > v.refused)
        return;
    check_at(first > 0 && t[first - 1] == '}',
             "done after a prefix not ending in '}' (at: its length)", first, t, n);
    check_at(oracle(t, first) != GRAFT_TEST_INVALID,
             "done after an invalid prefix (at: its length)", first, t, n);
    for (size_t k = first; k <= v.refused; k++) {
        check_at(done_at[k] == (t[k - 1] != '\r'),
                 "done wrong over the whitespace after the object (at: prefix length)", k, t, n);
        check_at(k == v.refused || is_space(t[k]), "accepted a non-space byte after done", k, t,
                 n);
    }
}

/* Runs the recognizer on t[0..n) and checks it against the oracle: the prefix before the first
 * refused byte has a completion, the prefix through it has none, and the whole text is an
 * accepted complete one exactly when the oracle says so. Returns the verdict. */
static verdict check_against_oracle(const uint8_t *t, size_t n)
{
    bool *done_at = malloc(n + 1);
    assert_non_null(done_at);
    verdict v = recognize(t, n, done_at, NULL);
    check_done_shape(t, n, v, done_at);
    free(done_at);
    check_at(completable(t, v.refused) != GRAFT_TEST_INVALID,
             "refused late: the bytes before the first refused one have no completion", v.refused,
             t, n);
    if (v.refused < n)
        check_at(completable(t, v.refused + 1) != GRAFT_TEST_VALID,
                 "refused a byte that has a completion", v.refused, t, n);
    truth whole = oracle(t, n);
    if (v.refused == n && v.done)
        check_at(whole != GRAFT_TEST_INVALID, "accepted and done on an invalid text", n, t, n);
    if (whole == GRAFT_TEST_VALID) {
        check_eq(n, v.refused, "first refused byte of a valid text", t, n);
        check_eq(true, v.done, "done at the end of a valid text", t, n);
    }
    return v;
}

/* A case whose first refused byte is known (n: none) and, when none is, whether it is done.
 * The expectation is first held to the oracle, so that a mistake in it is told apart. */
static void check_case(const uint8_t *t, size_t n, size_t refused, bool done)
{
    assert_true(refused <= n);
    check_at(completable(t, refused) != GRAFT_TEST_INVALID,
             "the case's expectation is wrong: the bytes before have no completion", refused, t, n);
    if (refused < n)
        check_at(completable(t, refused + 1) != GRAFT_TEST_VALID,
                 "the case's expectation is wrong: the bytes through have a completion", refused,
                 t, n);
    else
        check_eq(done, oracle(t, n) != GRAFT_TEST_INVALID,
                 "the case's expectation of done is wrong", t, n);
    verdict v = check_against_oracle(t, n);
    check_eq(refused, v.refused, "first refused byte", t, n);
    if (refused == n)
        check_eq(done, v.done, "done at the end", t, n);
}

/* ---- hand-written cases ----------------------------------------------------------------- */

typedef struct {
    const char *text;
    size_t len, refused;
    bool done;
} hand_case;

#define ACCEPTS(text, done) {text, sizeof(text) - 1, sizeof(text) - 1, done}
#define REFUSES(text, at) {text, sizeof(text) - 1, at, false}

/* `{"a":` is 5 bytes, `{"a":"` 6: a value's first byte is at 5, a string's content at 6. */
static const hand_case hand_cases[] = {
    /* numbers */
    ACCEPTS("{\"a\":-0}", true),
    ACCEPTS("{\"a\":0.5}", true),
    ACCEPTS("{\"a\":1e10}", true),
    ACCEPTS("{\"a\":1E+2}", true),
    ACCEPTS("{\"a\":-1.5e-3}", true),
    ACCEPTS("{\"a\":0e0,\"b\":-0.0E-00,\"c\":10.01e+01}", true),
    ACCEPTS("{\"a\":123456789012345678}", true),
    ACCEPTS("{\"a\":[0,-0,1,-1,0.0]}", true),
    ACCEPTS("{\"a\":1", false),
    ACCEPTS("{\"a\":-", false),
    ACCEPTS("{\"a\":1.", false),
    ACCEPTS("{\"a\":1e", false),
    ACCEPTS("{\"a\":1e-", false),
    REFUSES("{\"a\":01}", 6),
    REFUSES("{\"a\":00}", 6),
    REFUSES("{\"a\":-01}", 7),
    REFUSES("{\"a\":0012}", 6),
    REFUSES("{\"a\":1.}", 7),
    REFUSES("{\"a\":1.e5}", 7),
    REFUSES("{\"a\":.5}", 5),
    REFUSES("{\"a\":-}", 6),
    REFUSES("{\"a\":--1}", 6),
    REFUSES("{\"a\":-.5}", 6),
    REFUSES("{\"a\":+1}", 5),
    REFUSES("{\"a\":1e}", 7),
    REFUSES("{\"a\":1e+}", 8),
    REFUSES("{\"a\":1e+-1}", 8),
    REFUSES("{\"a\":1.5.2}", 8),
    REFUSES("{\"a\":1e5.2}", 8),
    REFUSES("{\"a\":1e5e5}", 8),
    REFUSES("{\"a\":0x1}", 6),
    REFUSES("{\"a\":1 2}", 7),
    REFUSES("{\"a\":1a}", 6),
    REFUSES("{\"a\":0-1}", 6),
    REFUSES("{\"a\":Infinity}", 5),
    REFUSES("{\"a\":-Infinity}", 6),
    REFUSES("{\"a\":NaN}", 5),
    /* literals */
    ACCEPTS("{\"a\":true,\"b\":false,\"c\":null}", true),
    ACCEPTS("{\"a\":[true,false,null]}", true),
    ACCEPTS("{\"a\":tru", false),
    REFUSES("{\"a\":tru}", 8),
    REFUSES("{\"a\":nul l}", 8),
    REFUSES("{\"a\":True}", 5),
    REFUSES("{\"a\":NULL}", 5),
    REFUSES("{\"a\":trUe}", 7),
    REFUSES("{\"a\":truex}", 9),
    REFUSES("{\"a\":true1}", 9),
    REFUSES("{\"a\":truefalse}", 9),
    REFUSES("{\"a\":nulll}", 9),
    REFUSES("{\"a\":fals}", 9),
    REFUSES("{\"a\":flase}", 6),
    REFUSES("{\"a\":t}", 6),
    REFUSES("{\"a\":undefined}", 5),
    REFUSES("{true:1}", 1),
    /* escapes */
    ACCEPTS("{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\uABCD\"}", true),
    ACCEPTS("{\"a\":\"\\uabcd\\uAbCd\\u0000\\u001f\\u007F\"}", true),
    ACCEPTS("{\"\\u0000\":\"\\u0000\"}", true),
    ACCEPTS("{\"a\":\"\\", false),
    REFUSES("{\"a\":\"\\x\"}", 7),
    REFUSES("{\"a\":\"\\U0041\"}", 7),
    REFUSES("{\"a\":\"\\u12G4\"}", 10),
    REFUSES("{\"a\":\"\\u\"}", 8),
    REFUSES("{\"a\":\"\\u123\"}", 11),
    REFUSES("{\"a\":\"\\'\"}", 7),
    REFUSES("{\"a\":\"\\a\"}", 7),
    REFUSES("{\"a\":\"\\0\"}", 7),
    REFUSES("{\"a\":\"\\ \"}", 7),
    REFUSES("{\"\\x\":1}", 3),
    /* raw bytes in strings */
    ACCEPTS("{\"a\":\"\x7F\"}", true),
    ACCEPTS("{\"a\":\" ~\"}", true),
    REFUSES("{\"a\":\"x\x01\"}", 7),
    REFUSES("{\"a\":\"\t\"}", 6),
    REFUSES("{\"a\":\"\n\"}", 6),
    REFUSES("{\"a\":\"\r\"}", 6),
    REFUSES("{\"a\":\"\x1F\"}", 6),
    REFUSES("{\"a\":\"\0\"}", 6),
    REFUSES("{\"\x01\":1}", 2),
    /* surrogate escapes */
    ACCEPTS("{\"a\":\"\\uD83D\\uDE00\"}", true),
    ACCEPTS("{\"a\":\"\\ud83d\\ude00\\uDBFF\\uDFFF\\uD800\\uDC00\"}", true),
    ACCEPTS("{\"a\":\"\\uD7FF\\uE000\\uFFFF\"}", true),
    ACCEPTS("{\"\\uD834\\uDD1E\":1}", true),
    ACCEPTS("{\"a\":\"\\uD800", false),
    ACCEPTS("{\"a\":\"\\uD800\\uD", false),
    REFUSES("{\"a\":\"\\uD800\"}", 12),
    REFUSES("{\"a\":\"\\uD800x\"}", 12),
    REFUSES("{\"a\":\"\\uD800\\n\"}", 13),
    REFUSES("{\"a\":\"\\uD800\\\\\"}", 13),
    REFUSES("{\"a\":\"\\uD800\\uD800\"}", 15),
    REFUSES("{\"a\":\"\\uD800\\u0041\"}", 14),
    REFUSES("{\"a\":\"\\uD800\\uE000\"}", 14),
    REFUSES("{\"a\":\"\\uD800\\uDBFF\"}", 15),
    REFUSES("{\"a\":\"\\uDBFF\"}", 12),
    REFUSES("{\"a\":\"\\uDC00\"}", 9),  /* every \uDCxx is a lone low surrogate */
    REFUSES("{\"a\":\"\\udfff\"}", 9),
    REFUSES("{\"a\":\"\\uD800\\uDC00\\uDC00\"}", 21),
    REFUSES("{\"\\uD800\":1}", 8),
    /* UTF-8 */
    ACCEPTS("{\"a\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}", true),
    ACCEPTS("{\"\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80"
            "\xF4\x8F\xBF\xBF\":1}",
            true),
    ACCEPTS("{\"a\":\"\xF0\x9F", false),
    REFUSES("{\"a\":\"\xC0\x80\"}", 6),
    REFUSES("{\"a\":\"\xC1\xBF\"}", 6),
    REFUSES("{\"a\":\"\xE0\x80\x80\"}", 7),
    REFUSES("{\"a\":\"\xE0\x9F\xBF\"}", 7),
    REFUSES("{\"a\":\"\xF0\x80\x80\x80\"}", 7),
    REFUSES("{\"a\":\"\xF0\x8F\xBF\xBF\"}", 7),
    REFUSES("{\"a\":\"\xED\xA0\x80\"}", 7),
    REFUSES("{\"a\":\"\xED\xBF\xBF\"}", 7),
    REFUSES("{\"a\":\"\xF4\x90\x80\x80\"}", 7),
    REFUSES("{\"a\":\"\xF5\x80\x80\x80\"}", 6),
    REFUSES("{\"a\":\"\xF8\x88\x80\x80\x80\"}", 6),
    REFUSES("{\"a\":\"\xFE\"}", 6),
    REFUSES("{\"a\":\"\xFF\"}", 6),
    REFUSES("{\"a\":\"\x80\"}", 6),
    REFUSES("{\"a\":\"\xBF\"}", 6),
    REFUSES("{\"a\":\"\xC3\"}", 7),
    REFUSES("{\"a\":\"\xC3\xC3\xA9\"}", 7),
    REFUSES("{\"a\":\"\xC3\xA9\xA9\"}", 8),
    REFUSES("{\"a\":\"\xE2\x82\"}", 8),
    REFUSES("{\"a\":\"\xE2\x82" "A\"}", 8),
    REFUSES("{\"a\":\"\xF0\x9F\x98\"}", 9),
    REFUSES("{\"a\":\xC3\xA9}", 5),
    REFUSES("{\xC3\xA9:1}", 1),
    REFUSES("\xEF\xBB\xBF{}", 0),
    /* structure */
    ACCEPTS("{}", true),
    ACCEPTS("{\"a\":{}}", true),
    ACCEPTS("{\"a\":[]}", true),
    ACCEPTS("{\"\":\"\"}", true),
    ACCEPTS("{\"a\":[[],[[]],[1,[2,[3]]]]}", true),
    ACCEPTS("{\"a\":[{},{\"b\":[]}],\"a\":1}", true),
    ACCEPTS("", false),
    ACCEPTS("{", false),
    ACCEPTS("{\"a\"", false),
    ACCEPTS("{\"a\":{}", false),
    REFUSES("{\"a\":1,}", 7),
    REFUSES("{\"a\":[1,]}", 8),
    REFUSES("{\"a\":[,1]}", 6),
    REFUSES("{,}", 1),
    REFUSES("{\"a\":1,,\"b\":2}", 7),
    REFUSES("{\"a\":[1,,2]}", 8),
    REFUSES("{\"a\" 1}", 5),
    REFUSES("{\"a\"}", 4),
    REFUSES("{\"a\",1}", 4),
    REFUSES("{\"a\"::1}", 5),
    REFUSES("{\"a\":1:2}", 6),
    REFUSES("{a:1}", 1),
    REFUSES("{1:1}", 1),
    REFUSES("{'a':1}", 1),
    REFUSES("{null:1}", 1),
    REFUSES("{{}:1}", 1),
    REFUSES("{[]:1}", 1),
    REFUSES("{\"a\":}", 5),
    REFUSES("{\"a\":,}", 5),
    REFUSES("{\"a\":1 \"b\":2}", 7),
    REFUSES("{\"a\":[1 2]}", 8),
    REFUSES("{\"a\":[}", 6),
    REFUSES("{\"a\":{]}", 6),
    REFUSES("{\"a\":{\"b\"]}", 9),
    REFUSES("{\"a\":[1}", 7),
    REFUSES("{\"a\":1]", 6),
    REFUSES("{]", 1),
    /* the top level is an object */
    REFUSES("[]", 0),
    REFUSES("[1]", 0),
    REFUSES("\"a\"", 0),
    REFUSES("1", 0),
    REFUSES("-1", 0),
    REFUSES("true", 0),
    REFUSES("null", 0),
    REFUSES("}", 0),
    REFUSES(":", 0),
    REFUSES(" []", 1),
    /* after the object only whitespace */
    ACCEPTS("{} ", true),
    ACCEPTS("{}\r\n\t", true),
    REFUSES("{}{}", 2),
    REFUSES("{} {}", 3),
    REFUSES("{} x", 3),
    REFUSES("{}}", 2),
    REFUSES("{},", 2),
    REFUSES("{}[]", 2),
    REFUSES("{}1", 2),
    REFUSES("{}\"\"", 2),
    REFUSES("{}\0", 2),
    /* whitespace: one space or tab, or LF or CR LF and then spaces and tabs */
    ACCEPTS(" {}", true),
    ACCEPTS("\t{}\t", true),
    ACCEPTS("\n{}\n", true),
    ACCEPTS("\r\n{}\r\n", true),
    ACCEPTS("\n \t {}", true),
    ACCEPTS("{ \"a\" : [ 1 , 2 ] }", true),
    ACCEPTS("{\n\t\"a\": [1,\n\t\t2]\n}", true),
    ACCEPTS("\r\n\t{\r\n\t\"a\"\r\n\t:\r\n\t[\r\n\t1\r\n\t,\r\n\t2\r\n\t]\r\n\t}\r\n\t", true),
    ACCEPTS("{}\r", false), /* not yet complete: CR must become CR LF */
    ACCEPTS("{\r", false),
    REFUSES("  {}", 1),
    REFUSES(" \t{}", 1),
    REFUSES("\t\t{}", 1),
    REFUSES(" \n{}", 1),
    REFUSES("\n\n{}", 1),
    REFUSES("\n\r\n{}", 1),
    REFUSES("\r{}", 1),
    REFUSES("\r\r\n{}", 1),
    REFUSES("\r {}", 1),
    REFUSES("\n  \n{}", 3),
    REFUSES("{  }", 2),
    REFUSES("{\r}", 2),
    REFUSES("{\"a\":\r1}", 6),
    REFUSES("{\"a\":1 ,  \"b\":2}", 9),
    REFUSES("{}  ", 3),
    REFUSES("{} \n", 3),
    REFUSES("{} \t", 3),
    REFUSES("{}\n\n", 3),
    REFUSES("{}\r}", 3),
    REFUSES("\f{}", 0),
    REFUSES("{\v}", 1),
    REFUSES("{}\f", 2),
    REFUSES("{\"a\":1\f}", 6),
    REFUSES("\xC2\xA0{}", 0),
};

static void test_hand_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof hand_cases / sizeof *hand_cases; i++) {
        const hand_case *c = &hand_cases[i];
        check_case((const uint8_t *)c->text, c->len, c->refused, c->done);
    }
}

/* ---- whitespace and depth limits -------------------------------------------------------- */

/* `lead`, then `indent` spaces and tabs. */
static void put_space(bytes *b, const char *lead, size_t indent)
{
    graft_test_put_str(b, lead);
    for (size_t i = 0; i < indent; i++)
        graft_test_put_byte(b, (uint8_t)" \t"[i % 2]);
}

/* Each form of whitespace, at every place whitespace may be (before, between and after the
 * tokens): accepted, or refused at the byte it cannot go on with (after a lone CR, the token;
 * at the end of the text nothing is, but the text is not complete before the LF). Indents of
 * GRAFT__JSON_MAX_INDENT at all places at once are accepted; a string's spaces are content. */
static void test_whitespace_forms(void **state)
{
    (void)state;
    static const char *const tokens[] = {"{", "\"a\"", ":", "[", "1", ",", "{", "\"b\"", ":",
                                         "true", "}", "]", ",", "\"c\"", ":", "\"d\"", "}"};
    enum { N_TOKENS = sizeof tokens / sizeof *tokens, MAX = GRAFT__JSON_MAX_INDENT };
    static const struct {
        const char *lead;
        size_t indent, refused; /* refused: the offset in the run, SIZE_MAX for none */
    } forms[] = {
        {" ", 0, SIZE_MAX},     {"\t", 0, SIZE_MAX},         {"\n", MAX, SIZE_MAX},
        {"\r\n", MAX, SIZE_MAX}, {"\n", MAX + 1, 1 + MAX},    {"\r\n", MAX + 1, 2 + MAX},
        {"  ", 0, 1},           {"\t ", 0, 1},              {" \n", 0, 1},
        {"\n\n", 0, 1},         {"\n\r\n", 0, 1},           {"\r\r\n", 0, 1},
        {"\r", 0, 1},           {"\n\t\n", 0, 2},
    };
    bytes t = {0};
    for (size_t at = 0; at <= N_TOKENS; at++) {
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
            t.n = 0;
            size_t run_start = 0;
            for (size_t k = 0; k <= N_TOKENS; k++) {
                if (k == at) {
                    run_start = t.n;
                    put_space(&t, forms[f].lead, forms[f].indent);
                }
                if (k < N_TOKENS)
                    graft_test_put_str(&t, tokens[k]);
            }
            size_t refused = forms[f].refused == SIZE_MAX ? t.n : run_start + forms[f].refused;
            check_case(t.p, t.n, refused < t.n ? refused : t.n, t.p[t.n - 1] != '\r');
        }
    }
    t.n = 0;
    for (size_t k = 0; k <= N_TOKENS; k++) {
        put_space(&t, k % 2 ? "\n" : "\r\n", MAX);
        if (k < N_TOKENS)
            graft_test_put_str(&t, tokens[k]);
    }
    check_case(t.p, t.n, t.n, true);
    t.n = 0;
    graft_test_put_str(&t, "{\"a\":\"");
    for (size_t i = 0; i < 4 * MAX; i++)
        graft_test_put_byte(&t, ' ');
    graft_test_put_str(&t, "\"}");
    check_case(t.p, t.n, t.n, true);
    free(t.p);
}

/* A value at level 2 that opens levels 2..depth, each an array or an object (bit d % 64 of
 * `kinds`: level d is an object), the last one empty, and closes them, level `wrong` (if any)
 * with the other kind's bracket; *opener gets the index of the last level's bracket and
 * *wrong_at that of the wrong one. */
static void put_nested(bytes *b, size_t depth, uint64_t kinds, size_t wrong, size_t *opener,
                       size_t *wrong_at)
{
    for (size_t d = 2; d <= depth; d++) {
        bool object = kinds >> (d % 64) & 1;
        *opener = b->n;
        graft_test_put_byte(b, object ? '{' : '[');
        if (object && d < depth)
            graft_test_put_str(b, "\"k\":");
    }
    for (size_t d = depth; d >= 2; d--) {
        bool object = (kinds >> (d % 64) & 1) != (d == wrong);
        if (d == wrong)
            *wrong_at = b->n;
        graft_test_put_byte(b, object ? '}' : ']');
    }
}

/* Nesting GRAFT__JSON_MAX_DEPTH deep is accepted (the top object is level 1) and the bracket
 * that opens the next level is refused, in a first or a second branch: depth is the levels open
 * now, so two branches each GRAFT__JSON_MAX_DEPTH deep are accepted. Each level, the deepest
 * ones too, closes only with its own kind's bracket. */
static void test_depth_limit(void **state)
{
    (void)state;
    enum { MAX = GRAFT__JSON_MAX_DEPTH };
    static const uint64_t kinds[] = {0, ~(uint64_t)0, 0x5555555555555555u, 0x0123456789abcdefu};
    static const size_t cases[][3] = {/* depth of branch a, of branch b, level closed wrongly */
                                      {MAX - 1, MAX, 0},   {MAX, MAX, 0},   {MAX + 1, MAX, 0},
                                      {MAX, MAX + 1, 0},   {MAX, MAX, MAX}, {MAX, MAX, MAX - 1},
                                      {MAX, MAX, 2}};
    bytes t = {0};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            size_t first = 0, second = 0, wrong_at = 0;
            t.n = 0;
            graft_test_put_str(&t, "{\"a\":");
            put_nested(&t, cases[c][0], kinds[k], cases[c][2], &first, &wrong_at);
            graft_test_put_str(&t, ",\"b\":");
            put_nested(&t, cases[c][1], ~kinds[k], 0, &second, &wrong_at);
            graft_test_put_byte(&t, '}');
            size_t refused = cases[c][0] > MAX ? first
                             : cases[c][1] > MAX ? second
                             : cases[c][2] > 0   ? wrong_at
                                                 : t.n;
            check_case(t.p, t.n, refused, true);
        }
    }
    free(t.p);
}

/* ---- random objects --------------------------------------------------------------------- */

/* The code point at s[*i] of valid UTF-8 (jansson's strings are). */
static uint32_t get_utf8(const uint8_t *s, size_t *i)
{
    uint8_t c = s[(*i)++];
    if (c < 0x80)
        return c;
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (0x3Fu >> more);
    while (more-- > 0)
        cp = cp << 6 | (s[(*i)++] & 0x3Fu);
    return cp;
}

/* Any scalar value, weighted to the edges of each UTF-8 length, escapes and control bytes. */
static uint32_t random_code_point(void)
{
    static const uint32_t edges[] = {0x00,   0x1F,   0x20,   0x7F,   0x80,    0x7FF,  0x800,
                                     0xFFF,  0x1000, 0xD7FF, 0xE000, 0xFFFD,  0xFFFF, 0x10000,
                                     0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF};
    switch (graft_test_below(10)) {
    case 0:
        return edges[graft_test_below(sizeof edges / sizeof *edges)];
    case 1:
        return (uint8_t)"\"\\/"[graft_test_below(3)];
    case 2:
        return (uint32_t)graft_test_below(0x20);
    case 3:
        return 0x80 + (uint32_t)graft_test_below(0x800 - 0x80);
    case 4: {
        uint32_t cp = 0x800 + (uint32_t)graft_test_below(0x10000 - 0x800);
        return cp >= 0xD800 && cp <= 0xDFFF ? cp + 0x800 : cp; /* no surrogates */
    }
    case 5:
        return 0x10000 + (uint32_t)graft_test_below(0x110000 - 0x10000);
    default:
        return 0x20 + (uint32_t)graft_test_below(0x7F - 0x20);
    }
}

/* Keys have no U+0000: jansson refuses to load one (oracle()), which would make the oracle
 * unknown for every mutation of the text; the hand cases have \u0000 keys. */
static void random_string(bytes *b, bool key)
{
    b->n = 0;
    graft_test_put(b, "",
                   0); /* b->p is not NULL even for an empty string: jansson refuses a NULL one */
    size_t len = graft_test_one_in(8) ? graft_test_below(40) : graft_test_below(8);
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = random_code_point();
        graft_test_put_utf8(b, key && cp == 0 ? 1 : cp);
    }
}

static json_t *random_scalar(void)
{
    static const json_int_t edges[] = {0, 1, -1, INT64_MAX, INT64_MIN};
    switch (graft_test_below(6)) {
    case 0: {
        bytes s = {0};
        random_string(&s, false);
        json_t *v = json_stringn((const char *)s.p, s.n);
        free(s.p);
        return v;
    }
    case 1:
        return json_integer(graft_test_one_in(3) ? edges[graft_test_below(5)]
                                      : (json_int_t)(graft_test_random() >> graft_test_below(64)) *
                                            (graft_test_one_in(2) ? -1 : 1));
    case 2:
        return json_real(ldexp((double)(graft_test_random() >> 11), (int)graft_test_below(400) - 200) *
                         (graft_test_one_in(2) ? -1 : 1));
    case 3:
        return json_boolean(graft_test_one_in(2));
    case 4:
        return json_null();
    default:
        return json_string("plain");
    }
}

static json_t *random_container(size_t depth, bool object, size_t spine_to, int *budget);

static json_t *random_value(size_t depth, int *budget)
{
    if (*budget > 0 && graft_test_one_in(3))
        return random_container(depth, graft_test_one_in(2), 0, budget);
    return random_scalar();
}

/* A container at level `depth` with up to 4 members (each costs *budget; containers only while
 * it lasts) and, while depth < spine_to, one more member that is a container a level down. */
static json_t *random_container(size_t depth, bool object, size_t spine_to, int *budget)
{
    json_t *c = object ? json_object() : json_array();
    size_t members = *budget > 0 ? graft_test_below(5) : 0;
    size_t spine = depth < spine_to ? graft_test_below(members + 1) : SIZE_MAX;
    bytes key = {0};
    for (size_t i = 0; i < members + (spine != SIZE_MAX); i++) {
        --*budget;
        json_t *v = i == spine ? random_container(depth + 1, graft_test_one_in(2), spine_to, budget)
                               : random_value(depth + 1, budget);
        assert_non_null(v);
        if (object) {
            random_string(&key, true);
            assert_int_equal(json_object_setn_new(c, (const char *)key.p, key.n, v), 0);
        } else {
            assert_int_equal(json_array_append_new(c, v), 0);
        }
    }
    free(key.p);
    return c;
}

/* Whitespace between two tokens: half the time none, else one space or tab or a line break
 * and an indent (often the longest); when `over`, now and then a form the header does not
 * allow, which the recognizer must refuse at the byte that breaks it. */
static void put_random_space(bytes *b, bool over)
{
    static const char *const broken[] = {"  ", "\t ", " \n", "\n\n", "\r", "\r\r\n", "\n\r\n"};
    if (over && graft_test_one_in(64)) {
        if (graft_test_one_in(4))
            put_space(b, "\n", GRAFT__JSON_MAX_INDENT + 1);
        else
            graft_test_put_str(b, broken[graft_test_below(sizeof broken / sizeof *broken)]);
        return;
    }
    switch (graft_test_below(8)) {
    case 0: case 1: case 2: case 3:
        return;
    case 4:
        graft_test_put_byte(b, (uint8_t)" \t"[graft_test_below(2)]);
        return;
    default:
        graft_test_put_str(b, graft_test_one_in(3) ? "\r\n" : "\n");
        for (size_t i = 0, indent = graft_test_one_in(3) ? GRAFT__JSON_MAX_INDENT
                                              : graft_test_below(GRAFT__JSON_MAX_INDENT + 1);
             i < indent; i++)
            graft_test_put_byte(b, (uint8_t)" \t"[graft_test_below(2)]);
    }
}

static void put_u_escape(bytes *b, uint32_t unit)
{
    graft_test_put_str(b, "\\u");
    for (int shift = 12; shift >= 0; shift -= 4) {
        unsigned d = unit >> shift & 0xF;
        graft_test_put_byte(b, (uint8_t)(d < 10 ? '0' + d : (graft_test_one_in(2) ? 'a' : 'A') + d - 10));
    }
}

/* Each code point raw, as its short escape or as \u escapes (a pair above U+FFFF), at random;
 * control bytes, quote and backslash always escaped. */
static void put_string(bytes *b, const char *s, size_t len)
{
    static const char shorts[] = "\"\\/\b\f\n\r\t", short_names[] = "\"\\/bfnrt";
    graft_test_put_byte(b, '"');
    for (size_t i = 0; i < len;) {
        size_t at = i;
        uint32_t cp = get_utf8((const uint8_t *)s, &i);
        const char *named = cp != 0 && cp < 0x80 ? strchr(shorts, (int)cp) : NULL;
        bool must = cp < 0x20 || cp == '"' || cp == '\\';
        size_t choice = graft_test_below(4);
        if (named != NULL && choice < 2) {
            graft_test_put_byte(b, '\\');
            graft_test_put_byte(b, (uint8_t)short_names[named - shorts]);
        } else if (must || choice == 2) {
            if (cp < 0x10000) {
                put_u_escape(b, cp);
            } else {
                put_u_escape(b, 0xD800 + ((cp - 0x10000) >> 10));
                put_u_escape(b, 0xDC00 + ((cp - 0x10000) & 0x3FF));
            }
        } else {
            graft_test_put(b, s + at, i - at);
        }
    }
    graft_test_put_byte(b, '"');
}

/* Integers in decimal (0 now and then as -0), with a fraction and an exponent added at random;
 * reals as %.17g, which is JSON for finite values. */
static void put_number(bytes *b, const json_t *v)
{
    char text[64];
    if (json_is_real(v)) {
        snprintf(text, sizeof text, "%.17g", json_real_value(v));
        graft_test_put_str(b, text);
        return;
    }
    json_int_t x = json_integer_value(v);
    snprintf(text, sizeof text, "%s%" JSON_INTEGER_FORMAT, x == 0 && graft_test_one_in(2) ? "-" : "", x);
    graft_test_put_str(b, text);
    if (graft_test_one_in(4)) {
        graft_test_put_byte(b, '.');
        for (size_t i = 0, digits = 1 + graft_test_below(3); i < digits; i++)
            graft_test_put_byte(b, (uint8_t)('0' + graft_test_below(10)));
    }
    if (graft_test_one_in(4)) {
        graft_test_put_byte(b, (uint8_t)"eE"[graft_test_below(2)]);
        if (!graft_test_one_in(3))
            graft_test_put_byte(b, (uint8_t)"+-"[graft_test_below(2)]);
        for (size_t i = 0, digits = 1 + graft_test_below(2); i < digits; i++)
            graft_test_put_byte(b, (uint8_t)('0' + graft_test_below(10)));
    }
}

/* The serialiser here: one run of whitespace (maybe empty) between any two tokens. */
static void serialise(bytes *b, json_t *v, bool over)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        size_t key_len;
        json_t *member;
        bool first = true;
        graft_test_put_byte(b, '{');
        if (json_object_size(v) == 0)
            put_random_space(b, over);
        json_object_keylen_foreach(v, key, key_len, member)
        {
            if (!first)
                graft_test_put_byte(b, ',');
            first = false;
            put_random_space(b, over);
            put_string(b, key, key_len);
            put_random_space(b, over);
            graft_test_put_byte(b, ':');
            put_random_space(b, over);
            serialise(b, member, over);
            put_random_space(b, over);
        }
        graft_test_put_byte(b, '}');
        break;
    }
    case JSON_ARRAY: {
        graft_test_put_byte(b, '[');
        if (json_array_size(v) == 0)
            put_random_space(b, over);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i > 0)
                graft_test_put_byte(b, ',');
            put_random_space(b, over);
            serialise(b, json_array_get(v, i), over);
            put_random_space(b, over);
        }
        graft_test_put_byte(b, ']');
        break;
    }
    case JSON_STRING:
        put_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
    case JSON_REAL:
        put_number(b, v);
        break;
    case JSON_TRUE:
        graft_test_put_str(b, "true");
        break;
    case JSON_FALSE:
        graft_test_put_str(b, "false");
        break;
    case JSON_NULL:
        graft_test_put_str(b, "null");
        break;
    }
}

/* jansson's serialisations: with JSON_INDENT(n) a line at level d is indented n * d spaces, so
 * deep texts break the indent limit there. */
static const size_t dump_flags[] = {
    JSON_COMPACT,
    0,
    JSON_INDENT(1),
    JSON_INDENT(2) | JSON_SORT_KEYS,
    JSON_INDENT(4) | JSON_ENSURE_ASCII,
    JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH,
    JSON_COMPACT | JSON_REAL_PRECISION(3),
};
enum {
    N_DUMPS = sizeof dump_flags / sizeof *dump_flags,
    N_TEXTS = N_DUMPS + 2, /* and two of the serialiser here: within the limits, and not */
    N_TREES = 400,
    TREE_BUDGET = 24,
};

/* The texts of one random object (levels up to 66 deep now and then): jansson's, then the
 * serialiser's with whitespace around, the last one with whitespace the header does not allow
 * at times. */
static void random_texts(bytes texts[N_TEXTS])
{
    int budget = TREE_BUDGET;
    size_t spine_to = graft_test_one_in(5) ? GRAFT__JSON_MAX_DEPTH + graft_test_below(3) : 0;
    json_t *root = random_container(1, true, spine_to, &budget);
    for (size_t f = 0; f < N_TEXTS; f++) {
        texts[f].n = 0;
        if (f < N_DUMPS) {
            char *s = json_dumps(root, dump_flags[f]);
            assert_non_null(s);
            graft_test_put_str(&texts[f], s);
            free(s);
        } else {
            bool over = f == N_TEXTS - 1;
            put_random_space(&texts[f], over);
            serialise(&texts[f], root, over);
            put_random_space(&texts[f], over);
        }
    }
    json_decref(root);
}

/* in_text[k]: whether t[0..k) of a valid text ends inside a string between two characters,
 * with no escape begun; the escape of a high surrogate begins a pair that its low one ends (a
 * raw character cannot follow it: json_output.h says in_text promises that any can). */
static void strings_open(const uint8_t *t, size_t n, bool *in_text)
{
    bool in_string = false, backslash = false, low_due = false;
    size_t continuation = 0, hex = 0;
    unsigned unit = 0;
    in_text[0] = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            in_string = t[i] == '"';
        } else if (continuation > 0) {
            continuation--;
        } else if (backslash) {
            backslash = false;
            hex = t[i] == 'u' ? 4 : 0;
            unit = 0;
        } else if (hex > 0) {
            unit = unit << 4 | (unsigned)graft_test_hex_digit(t[i]);
            if (--hex == 0)
                low_due = unit >= 0xD800 && unit <= 0xDBFF;
        } else if (t[i] == '\\') {
            backslash = true;
        } else if (t[i] == '"') {
            in_string = false;
        } else {
            continuation = t[i] >= 0xF0 ? 3 : t[i] >= 0xE0 ? 2 : t[i] >= 0xC0 ? 1 : 0;
        }
        in_text[i + 1] = in_string && !backslash && continuation == 0 && hex == 0 && !low_due;
    }
}

/* A valid JSON text: accepted up to the first byte that breaks a limit, refused there; done
 * from its closing brace on (but after a CR that awaits its LF) and not before; in_text as
 * strings_open says. */
static void check_valid_text(const uint8_t *t, size_t n)
{
    size_t broken = limits_broken_at(t, n);
    bool complete = broken == n && t[n - 1] != '\r';
    check_eq(complete ? GRAFT_TEST_VALID : GRAFT_TEST_INVALID, oracle(t, n),
             "the test's serialisation is wrong", t, n);
    size_t end = n;
    while (end > 0 && is_space(t[end - 1]))
        end--;
    bool *done_at = malloc(n + 1), *in_text_at = malloc(n + 1), *in_text = malloc(n + 1);
    assert_true(done_at != NULL && in_text_at != NULL && in_text != NULL);
    strings_open(t, n, in_text);
    verdict v = recognize(t, n, done_at, in_text_at);
    check_eq(broken, v.refused, "first refused byte of a JSON text", t, n);
    for (size_t k = 0; k <= v.refused; k++) {
        bool done = k >= end && t[k - 1] != '\r';
        check_at(done_at[k] == done,
                 done ? "not done after a complete text (at: its length)"
                      : "done after an incomplete prefix (at: its length)",
                 k, t, n);
        check_at(in_text_at[k] == in_text[k],
                 in_text[k] ? "not in_text inside a string (at: prefix length)"
                            : "in_text outside a string's text (at: prefix length)",
                 k, t, n);
    }
    free(done_at);
    free(in_text_at);
    free(in_text);
}

static void test_serialised_objects(void **state)
{
    (void)state;
    seed_rng(1);
    bytes texts[N_TEXTS] = {{0}};
    for (size_t tree = 0; tree < N_TREES; tree++) {
        random_texts(texts);
        for (size_t f = 0; f < N_TEXTS; f++)
            check_valid_text(texts[f].p, texts[f].n);
    }
    for (size_t f = 0; f < N_TEXTS; f++)
        free(texts[f].p);
}

/* ---- mutations -------------------------------------------------------------------------- */

/* Bytes that matter to the grammar, UTF-8 lead and continuation edges, NUL and DEL. */
static const uint8_t tricky[] = "{}[]:,\"\\/ \t\n\r0123456789-+.eEtrufalsnbu"
                                "\x1F\x7F\x80\xBF\xC0\xC2\xDF\xE0\xED\xEF\xF0\xF4\xF5\xFF";

static uint8_t random_byte(void)
{
    return graft_test_one_in(4) ? (uint8_t)graft_test_below(256) : tricky[graft_test_below(sizeof tricky)]; /* with its NUL */
}

/* u = t with one edit: a byte replaced, inserted or deleted, a cut, a span deleted, copied
 * elsewhere, or two bytes swapped. u may be t: t is read before u is replaced. */
static void mutate(const bytes *t, bytes *u)
{
    size_t n = t->n, p = graft_test_below(n + 1), len = 1 + graft_test_below(8);
    size_t q = graft_test_below(n + 1), span = len < n - q ? len : n - q;
    bytes out = {0};
    graft_test_put(&out, t->p, p);
    switch (graft_test_below(7)) {
    case 0: /* replace */
        graft_test_put_byte(&out, random_byte());
        if (p < n)
            graft_test_put(&out, t->p + p + 1, n - p - 1);
        break;
    case 1: /* insert */
        graft_test_put_byte(&out, random_byte());
        graft_test_put(&out, t->p + p, n - p);
        break;
    case 2: /* delete */
        if (p < n)
            graft_test_put(&out, t->p + p + 1, n - p - 1);
        break;
    case 3: /* cut */
        break;
    case 4: /* delete a span */
        if (p + len < n)
            graft_test_put(&out, t->p + p + len, n - p - len);
        break;
    case 5: /* copy t[q..q+span) to p */
        graft_test_put(&out, t->p + q, span);
        graft_test_put(&out, t->p + p, n - p);
        break;
    default: /* swap t[p] and t[p+1] */
        if (p + 1 < n) {
            graft_test_put_byte(&out, t->p[p + 1]);
            graft_test_put_byte(&out, t->p[p]);
            graft_test_put(&out, t->p + p + 2, n - p - 2);
        } else {
            graft_test_put(&out, t->p + p, n - p);
        }
    }
    free(u->p);
    *u = out;
}

static size_t common_prefix(const bytes *a, const bytes *b)
{
    size_t i = 0;
    while (i < a->n && i < b->n && a->p[i] == b->p[i])
        i++;
    return i;
}

enum { MUTATIONS = 8, MUTATED_MAX = 1024 };

/* Each mutation of a valid text (one or two edits) against the oracle; and the recognizer
 * accepts at least the part before the first edit, up to where the original broke a limit. */
static void test_mutations_agree_with_oracle(void **state)
{
    (void)state;
    seed_rng(2);
    bytes texts[N_TEXTS] = {{0}}, u = {0};
    size_t checked = 0;
    for (size_t tree = 0; tree < N_TREES; tree++) {
        random_texts(texts);
        for (size_t m = 0; m < MUTATIONS; m++) {
            const bytes *t = &texts[graft_test_below(N_TEXTS)];
            if (t->n > MUTATED_MAX) /* jansson's deep indented texts: the oracle's cost */
                continue;
            mutate(t, &u);
            if (graft_test_one_in(3))
                mutate(&u, &u);
            size_t kept = common_prefix(t, &u), broken = limits_broken_at(t->p, t->n);
            verdict v = check_against_oracle(u.p, u.n);
            size_t floor = kept < broken ? kept : broken;
            check_at(v.refused >= floor, "refused within the unedited prefix", v.refused, u.p,
                     u.n);
            checked++;
        }
    }
    assert_true(checked > N_TREES * MUTATIONS / 2);
    for (size_t f = 0; f < N_TEXTS; f++)
        free(texts[f].p);
    free(u.p);
}

/* ---- forks ------------------------------------------------------------------------------ */

/* One copy of the state fed t[at..] and another fed u[at..], a byte to each in turn, after the
 * original was wiped and freed (a copy that leans on its storage answers wrongly, or ASan
 * stops it): each answers as a fresh run over its text does. */
static void check_fork(const bytes *t, const bytes *u)
{
    bool *done_t = malloc(t->n + 1), *done_u = malloc(u->n + 1);
    assert_non_null(done_t);
    assert_non_null(done_u);
    verdict vt = recognize(t->p, t->n, done_t, NULL), vu = recognize(u->p, u->n, done_u, NULL);
    size_t limit = common_prefix(t, u);
    limit = limit < vt.refused ? limit : vt.refused;
    limit = limit < vu.refused ? limit : vu.refused;
    size_t at = graft_test_below(limit + 1);
    graft__json_syntax *s = malloc(sizeof *s);
    assert_non_null(s);
    graft__json_syntax_init(s);
    for (size_t i = 0; i < at; i++)
        assert_true(graft__json_syntax_feed(s, t->p[i]));
    graft__json_syntax a = *s, b = *s;
    explicit_bzero(s, sizeof *s); /* not elided as a store before free */
    free(s);
    size_t i = at, j = at;
    bool a_live = true, b_live = true;
    while (a_live || b_live) {
        if (a_live) {
            check_eq(done_t[i], graft__json_syntax_done(&a), "fork: done", t->p, t->n);
            a_live = i < t->n && graft__json_syntax_feed(&a, t->p[i]);
            i += a_live;
        }
        if (b_live) {
            check_eq(done_u[j], graft__json_syntax_done(&b), "fork: done", u->p, u->n);
            b_live = j < u->n && graft__json_syntax_feed(&b, u->p[j]);
            j += b_live;
        }
    }
    check_eq(vt.refused, i, "fork: first refused byte", t->p, t->n);
    check_eq(vu.refused, j, "fork: first refused byte", u->p, u->n);
    free(done_t);
    free(done_u);
}

static void test_copies_fork(void **state)
{
    (void)state;
    seed_rng(3);
    bytes texts[N_TEXTS] = {{0}}, u = {0};
    for (size_t tree = 0; tree < N_TREES / 2; tree++) {
        random_texts(texts);
        for (size_t k = 0; k < 4; k++) {
            const bytes *t = &texts[graft_test_below(N_TEXTS)];
            mutate(t, &u);
            check_fork(t, &u);
            check_fork(t, &texts[graft_test_below(N_TEXTS)]);
        }
    }
    for (size_t f = 0; f < N_TEXTS; f++)
        free(texts[f].p);
    free(u.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_whitespace_forms),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_serialised_objects),
        cmocka_unit_test(test_mutations_agree_with_oracle),
        cmocka_unit_test(test_copies_fork),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
