/*
 * test_gbnf_oracle.c: the self-test of the GBNF oracle (tests/support/gbnf_oracle.h), on
 * hand-made grammars and texts whose answers are worked out by hand here.
 *
 * Each text comes with its expected verdict: 'M' a whole match of root (and so a viable
 * prefix), 'P' a viable prefix that is not a match, 'N' neither. For 'M' and 'P', every
 * shorter byte prefix (cuts inside a UTF-8 character included) must be viable as well, which
 * the oracle must agree with for the same reason the hand answers do. The grammars cover the
 * literal and class forms with their escapes, '.', every repetition form and its edges,
 * nesting, empty alternatives, nullable and left-recursive rules, the layout rules (comments,
 * line breaks), llama.cpp's JSON grammar, partial and invalid UTF-8, and the parse errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_buffer.h"
#include "gbnf_fixtures.h"

/* ---- helpers --------------------------------------------------------------------------------- */

typedef struct {
    const char *text; /* NUL-terminated; see check_bytes for texts with NUL bytes */
    char want;        /* 'M', 'P' or 'N', as above */
} probe;


static void report(const char *grammar, const char *what, const char *t, size_t n)
{
    print_error("grammar:\n%s\n%s, text of %zu bytes: ", grammar, what, n);
    graft_test_print_literal((const uint8_t *)t, n);
    print_error("\n");
    fail();
}

/* Checks the verdict `want` on t[0, n) and, for 'M' and 'P', the viability of its prefixes. */
static void check_bytes(const gbnf_oracle *g, const char *grammar, const char *t, size_t n,
                        char want)
{
    bool viable = gbnf_oracle_viable_prefix(g, t, n);
    bool match = gbnf_oracle_matches(g, t, n);
    if (viable != (want != 'N'))
        report(grammar, viable ? "viable, expected not" : "not viable, expected viable", t, n);
    if (match != (want == 'M'))
        report(grammar, match ? "a match, expected not" : "no match, expected one", t, n);
    if (want == 'N')
        return;
    for (size_t k = 0; k < n; k++)
        if (!gbnf_oracle_viable_prefix(g, t, k))
            report(grammar, "a prefix of a viable text is not viable", t, k);
}

static void check_grammar(const char *grammar, const probe *probes, size_t n)
{
    gbnf_oracle *g = gbnf_test_oracle(grammar);
    for (size_t i = 0; i < n; i++)
        check_bytes(g, grammar, probes[i].text, strlen(probes[i].text), probes[i].want);
    gbnf_oracle_free(g);
}

#define CHECK(grammar, ...)                                                                   \
    do {                                                                                      \
        const probe probes_[] = {__VA_ARGS__};                                                \
        check_grammar(grammar, probes_, sizeof probes_ / sizeof probes_[0]);                  \
    } while (0)

/* ---- literals, classes, '.' ------------------------------------------------------------------ */

static void test_literals(void **state)
{
    (void)state;
    CHECK("root ::= \"abc\"",
          {"", 'P'}, {"a", 'P'}, {"ab", 'P'}, {"abc", 'M'}, {"abcd", 'N'}, {"b", 'N'},
          {"abd", 'N'}, {"A", 'N'});
    CHECK("root ::= \"ab\" \"cd\"", {"abc", 'P'}, {"abcd", 'M'}, {"abdc", 'N'});
    CHECK("root ::= \"\\n\\t\\r\\\\\\\"\\[\\]\\x41\\u00e9\\U0001F600\"",
          {"\n\t\r\\\"[]A\xc3\xa9\xf0\x9f\x98\x80", 'M'}, {"\n\t", 'P'},
          {"\n\t\r\\\"[]A\xc3", 'P'}, {"\n\t\r\\\"[]A\xc3\xa9\xf0\x9f", 'P'},
          {"\n\t\r\\\"[]a", 'N'}, {"\\n", 'N'});
    /* Raw UTF-8 in a literal, and cuts inside its characters. */
    CHECK("root ::= \"\xc3\xa9\xe2\x82\xac\"",
          {"\xc3\xa9\xe2\x82\xac", 'M'}, {"\xc3", 'P'}, {"\xc3\xa9\xe2", 'P'},
          {"\xc3\xa9\xe2\x82", 'P'}, {"\xc3\xa8", 'N'}, {"\xc3\xa9\xe2\x83", 'N'},
          {"\xc4", 'N'});
    CHECK("root ::= \"\" \"a\" \"\"", {"", 'P'}, {"a", 'M'}, {"aa", 'N'});
    CHECK("root ::= \"\"", {"", 'M'}, {"a", 'N'});
    /* A hex escape for '#' and a raw '#' inside a literal are not comments. */
    CHECK("root ::= \"#\\x23\" # a comment", {"##", 'M'}, {"#", 'P'});
    /* A raw line feed inside a literal stands for itself. */
    CHECK("root ::= \"a\nb\"", {"a\nb", 'M'}, {"ab", 'N'});
}

static void test_classes(void **state)
{
    (void)state;
    CHECK("root ::= [a-cx0-9_]",
          {"", 'P'}, {"a", 'M'}, {"b", 'M'}, {"c", 'M'}, {"d", 'N'}, {"x", 'M'}, {"w", 'N'},
          {"5", 'M'}, {"_", 'M'}, {"A", 'N'}, {"ab", 'N'});
    CHECK("root ::= [^a-c\\n]",
          {"d", 'M'}, {"a", 'N'}, {"c", 'N'}, {"\n", 'N'}, {"\r", 'M'}, {"\xc3\xa9", 'M'},
          {"\xc3", 'P'}, {"", 'P'}, {"dd", 'N'});
    /* Escaped brackets and backslash; '^' not first and '-' last are themselves. */
    CHECK("root ::= [\\]\\[\\\\^-]",
          {"]", 'M'}, {"[", 'M'}, {"\\", 'M'}, {"^", 'M'}, {"-", 'M'}, {"a", 'N'}, {"Z", 'N'});
    CHECK("root ::= [-a]", {"-", 'M'}, {"a", 'M'}, {"b", 'N'});
    CHECK("root ::= [\\x41-\\x43]+", {"ABCA", 'M'}, {"D", 'N'}, {"AD", 'N'});
    /* U+03B1-U+03C9: lead CE covers U+0380-03BF, CF U+03C0-03FF, D0 U+0400-043F. */
    CHECK("root ::= [\xce\xb1-\xcf\x89]",
          {"\xce\xb2", 'M'}, {"\xcf\x89", 'M'}, {"\xcf\x8a", 'N'}, {"a", 'N'},
          {"\xce", 'P'}, {"\xcf", 'P'}, {"\xd0", 'N'}, {"\xce\x80", 'N'});
    CHECK("root ::= [\\u00FF-\\u0100]",
          {"\xc3\xbf", 'M'}, {"\xc4\x80", 'M'}, {"\xc3", 'P'}, {"\xc4", 'P'}, {"\xc5", 'N'},
          {"\xc3\xbe", 'N'});
    /* The empty negated class is any code point; the empty class none (choice). */
    CHECK("root ::= [^]", {"\xc3\xa9", 'M'}, {"\n", 'M'}, {"", 'P'});
    CHECK("root ::= \"a\" | \"b\" []", {"a", 'M'}, {"b", 'N'}, {"", 'P'});
}

static void test_any(void **state)
{
    (void)state;
    CHECK("root ::= . \"x\"",
          {"ax", 'M'}, {"\nx", 'M'}, {"\xc3\xa9x", 'M'}, {"\xf0\x9f\x98\x80x", 'M'},
          {"x", 'P'}, {"xx", 'M'}, {"", 'P'}, {"ab", 'N'}, {"\xe2", 'P'}, {"axx", 'N'});
    const char *grammar = "root ::= .";
    gbnf_oracle *g = gbnf_test_oracle(grammar);
    check_bytes(g, grammar, "\0", 1, 'M');
    check_bytes(g, grammar, "\0\0", 2, 'N');
    gbnf_oracle_free(g);
}

static void test_nul_bytes(void **state)
{
    (void)state;
    const char *grammar = "root ::= \"a\\x00b\" [^\\x00]";
    gbnf_oracle *g = gbnf_test_oracle(grammar);
    check_bytes(g, grammar, "a\0bc", 4, 'M');
    check_bytes(g, grammar, "a\0", 2, 'P');
    check_bytes(g, grammar, "a\0b\0", 4, 'N');
    check_bytes(g, grammar, "ab", 2, 'N');
    gbnf_oracle_free(g);
}

/* ---- repetitions ----------------------------------------------------------------------------- */

static void test_repetitions(void **state)
{
    (void)state;
    CHECK("root ::= \"a\"*", {"", 'M'}, {"a", 'M'}, {"aaaa", 'M'}, {"b", 'N'}, {"ab", 'N'});
    CHECK("root ::= \"a\"+", {"", 'P'}, {"a", 'M'}, {"aaa", 'M'}, {"ab", 'N'});
    CHECK("root ::= \"a\"?", {"", 'M'}, {"a", 'M'}, {"aa", 'N'});
    CHECK("root ::= \"a\"{3}", {"", 'P'}, {"aa", 'P'}, {"aaa", 'M'}, {"aaaa", 'N'});
    CHECK("root ::= \"a\"{2,}", {"a", 'P'}, {"aa", 'M'}, {"aaaaaaa", 'M'}, {"aab", 'N'});
    CHECK("root ::= \"a\"{2,4} \"b\"",
          {"ab", 'N'}, {"aab", 'M'}, {"aaab", 'M'}, {"aaaab", 'M'}, {"aaaaa", 'N'},
          {"aaaa", 'P'}, {"aaaaab", 'N'}, {"b", 'N'});
    CHECK("root ::= \"a\"{,2} \"b\"",
          {"b", 'M'}, {"ab", 'M'}, {"aab", 'M'}, {"aaab", 'N'}, {"aaa", 'N'}, {"aa", 'P'});
    CHECK("root ::= \"a\"{0} \"b\"", {"b", 'M'}, {"a", 'N'}, {"", 'P'});
    CHECK("root ::= \"a\"{0,0} \"b\"", {"b", 'M'}, {"a", 'N'});
    CHECK("root ::= \"a\"{,0} \"b\"", {"b", 'M'}, {"a", 'N'});
    CHECK("root ::= \"a\"{0,} \"b\"", {"b", 'M'}, {"aaab", 'M'}, {"aaa", 'P'});
    CHECK("root ::= \"a\"{1,1} \"b\"", {"ab", 'M'}, {"b", 'N'}, {"aab", 'N'});
    CHECK("root ::= \"a\"{0,1}", {"", 'M'}, {"a", 'M'}, {"aa", 'N'});
    CHECK("root ::= \"a\"{ 1 , 2 }", {"a", 'M'}, {"aa", 'M'}, {"aaa", 'N'}, {"", 'P'});
    CHECK("root ::= [0-9]{2,3} \"x\"",
          {"1x", 'N'}, {"12x", 'M'}, {"123x", 'M'}, {"1234", 'N'}, {"12", 'P'});
    /* A repeated literal repeats whole. */
    CHECK("root ::= \"ab\"{2}", {"abab", 'M'}, {"abb", 'N'}, {"aba", 'P'}, {"ababab", 'N'});
    CHECK("root ::= \"ab\"*", {"", 'M'}, {"ab", 'M'}, {"abab", 'M'}, {"aab", 'N'});
    /* A group repeated, and an operator after an operator (x{2}? is (x x)?: choice). */
    CHECK("root ::= (\"a\"{2})*", {"", 'M'}, {"aa", 'M'}, {"aaa", 'P'}, {"aaaa", 'M'});
    CHECK("root ::= \"a\"{2}?", {"", 'M'}, {"aa", 'M'}, {"a", 'P'}, {"aaa", 'N'});
    /* Spaces between an element and its operator. */
    CHECK("root ::= \"a\" * \"b\"", {"aaab", 'M'}, {"b", 'M'});
    /* {0,n} of something nullable, and a long bounded run. */
    CHECK("root ::= (\"a\"?){0,3} \"b\"", {"b", 'M'}, {"aaab", 'M'}, {"aaaab", 'N'});
    /* A long exact run: 100 is a match, 99 a prefix, 101 neither. */
    const char *grammar = "root ::= \"a\"{100}";
    gbnf_oracle *g = gbnf_test_oracle(grammar);
    char run[101];
    memset(run, 'a', sizeof run);
    check_bytes(g, grammar, run, 100, 'M');
    check_bytes(g, grammar, run, 99, 'P');
    check_bytes(g, grammar, run, 101, 'N');
    gbnf_oracle_free(g);
}

/* ---- structure: nesting, empty alternatives, nullable and recursive rules -------------------- */

static void test_nesting(void **state)
{
    (void)state;
    CHECK("root ::= (\"a\" (\"b\" | \"c\")+ \"d\")* \"e\"",
          {"e", 'M'}, {"abde", 'M'}, {"abcbde", 'M'}, {"abdacde", 'M'}, {"ade", 'N'},
          {"abd", 'P'}, {"abdabd", 'P'}, {"ab", 'P'}, {"abdb", 'N'}, {"ee", 'N'});
    CHECK("root ::= ((((\"x\"))))", {"x", 'M'}, {"", 'P'});
}

static void test_empty_alternatives(void **state)
{
    (void)state;
    CHECK("root ::= \"a\" x \"b\"\nx ::= \"c\" | ",
          {"ab", 'M'}, {"acb", 'M'}, {"accb", 'N'}, {"ac", 'P'});
    CHECK("root ::= \"a\" x \"b\"\nx ::= | \"c\"", {"ab", 'M'}, {"acb", 'M'});
    CHECK("root ::= \"a\" (| \"c\" |) \"b\"", {"ab", 'M'}, {"acb", 'M'}, {"ccb", 'N'});
    CHECK("root ::= \"a\" () \"b\"", {"ab", 'M'}, {"a", 'P'});
    CHECK("root ::= ", {"", 'M'}, {"a", 'N'});
    CHECK("root ::= x x\nx ::=", {"", 'M'}, {"a", 'N'});
}

static void test_nullable_rules(void **state)
{
    (void)state;
    /* a takes at most 1 'a', b at most 2, c at most 2 or a "c": up to 5 a's, or 3 then c. */
    CHECK("root ::= a b c \"x\"\na ::= \"a\"?\nb ::= a a\nc ::= b | \"c\"",
          {"x", 'M'}, {"ax", 'M'}, {"aaaaax", 'M'}, {"aaaaaax", 'N'}, {"aaaaaa", 'N'},
          {"acx", 'M'}, {"aaacx", 'M'}, {"aaaacx", 'N'}, {"cx", 'M'}, {"ccx", 'N'});
    /* The classic case of naive Earley: A A "x" with A deriving only the empty string. */
    CHECK("root ::= a a \"x\"\na ::= e\ne ::= ", {"x", 'M'}, {"", 'P'}, {"xx", 'N'});
    CHECK("root ::= a \"x\"\na ::= b b\nb ::= c\nc ::= \"\" | \"y\"",
          {"x", 'M'}, {"yx", 'M'}, {"yyx", 'M'}, {"yyyx", 'N'}, {"yy", 'P'});
    /* Nullable rules completed in a set where items wait on them from later predictions. */
    CHECK("root ::= s\ns ::= a s b | \"z\"\na ::= | \"a\"\nb ::= \"b\" | ",
          {"z", 'M'}, {"az", 'M'}, {"zb", 'M'}, {"aazbb", 'M'}, {"azbbb", 'M'}, {"za", 'N'});
}

static void test_recursion(void **state)
{
    (void)state;
    CHECK("root ::= root \"a\" | \"b\"",
          {"b", 'M'}, {"baaa", 'M'}, {"a", 'N'}, {"", 'P'}, {"bb", 'N'}, {"baab", 'N'});
    CHECK("root ::= expr\n"
          "expr ::= expr \"+\" term | term\n"
          "term ::= term \"*\" factor | factor\n"
          "factor ::= [0-9] | \"(\" expr \")\"",
          {"1+2*3", 'M'}, {"(1+2)*3", 'M'}, {"((7))", 'M'}, {"1+", 'P'}, {"1++", 'N'},
          {"(1", 'P'}, {"1)", 'N'}, {"12", 'N'}, {"(1+2", 'P'}, {"()", 'N'});
    /* Hidden left recursion (through a nullable rule): #x >= #z, z's before y, x's after. */
    CHECK("root ::= a root \"x\" | \"y\"\na ::= \"z\"?",
          {"y", 'M'}, {"yx", 'M'}, {"zyx", 'M'}, {"yxx", 'M'}, {"zyxx", 'M'}, {"zzyxx", 'M'},
          {"zzyx", 'P'}, {"zzy", 'P'}, {"xy", 'N'}, {"yz", 'N'});
    CHECK("root ::= \"a\" root | \"\"", {"", 'M'}, {"aaa", 'M'}, {"ab", 'N'});
    /* Mutual recursion, rules used before they are defined. */
    CHECK("root ::= even\neven ::= \"\" | \"a\" odd\nodd ::= \"a\" even",
          {"", 'M'}, {"a", 'P'}, {"aa", 'M'}, {"aaa", 'P'}, {"aaaa", 'M'});
    /* Ambiguous and doubly left-recursive. */
    CHECK("root ::= root root | \"a\" | ", {"", 'M'}, {"aaaaaaaa", 'M'}, {"ab", 'N'});
    /* An unproductive rule: its alternatives are never viable (beyond the brief's grammars). */
    CHECK("root ::= \"a\" | \"b\" x\nx ::= x \"c\"", {"a", 'M'}, {"b", 'N'}, {"", 'P'});
}

/* ---- layout ---------------------------------------------------------------------------------- */

static void test_layout(void **state)
{
    (void)state;
    CHECK("# a leading comment\n"
          "\n"
          "root ::= item+ # a trailing comment\n"
          "item ::= (\n"
          "    \"a\" # the first\n"
          "\n"
          "  | \"b\"\n"
          "  )\n"
          "  # between rules\n"
          "other-rule2 ::= \"c\"\n"
          "\n",
          {"abba", 'M'}, {"c", 'N'}, {"", 'P'});
    CHECK("root ::=\n  \"a\" |\n  \"b\"\n", {"a", 'M'}, {"b", 'M'}, {"ab", 'N'});
    CHECK("root ::= # comment after ::=\n  \"a\" | # comment after |\n  \"b\"",
          {"a", 'M'}, {"b", 'M'});
    CHECK("root ::= x\r\nx ::= \"a\"\r\n", {"a", 'M'});
    CHECK("root ::= x\rx ::= \"a\"", {"a", 'M'});
    CHECK("\t root\t::=\t\"a\"\t\"b\"\t", {"ab", 'M'});
    CHECK("root::=my-rule-2\nmy-rule-2::=\"z\"", {"z", 'M'});
    CHECK("root ::= (\"a\"\n\n  \"b\")", {"ab", 'M'});
    CHECK("root ::= (\"a\"{\n2\n})", {"aa", 'M'}, {"a", 'P'});
}

/* ---- llama.cpp's JSON grammar ---------------------------------------------------------------- */

/* tests/grammars/json.gbnf, read by the group setup. */
static char *json_grammar;

static void test_json(void **state)
{
    (void)state;
    CHECK(json_grammar,
          {"{}", 'M'}, {"{\"a\": 1}", 'M'},
          {"{\"a\":[1, 2.5e3, \"x\\u00e9\", true, null, {\"b\": false}]}", 'M'},
          {"{}\n  ", 'M'}, {"{} ", 'M'}, {"{}  ", 'N'}, {"[1]", 'N'}, {"", 'P'},
          {"{\"a\" ", 'P'}, {"{\"a\" 1}", 'N'}, {"{,}", 'N'}, {"{\"a\":01}", 'N'},
          {"{\"a\":1.", 'P'}, {"{\"a\":1.}", 'N'}, {"{\"ke", 'P'}, {"{\"a\":tr", 'P'},
          {"{\"a\":tx", 'N'}, {"{\"a\":\"\x01\"}", 'N'}, {"{\"a\":\"\\u00G", 'N'},
          {"{\"a\":\"\\u00e", 'P'}, {"{\"a\":\"\xc3\xa9", 'P'}, {"{\"a\":\"\xc3", 'P'},
          {"{\"a\":\"\xc3\x28", 'N'}, {"{\"a\":-", 'P'}, {"{\"a\":-}", 'N'},
          {"{\"a\":{\"b\":{\"c\":[[[]]]}}}", 'M'}, {"{\"a\":\"\\q\"}", 'N'},
          {"{\"a\":\"\x7f\"}", 'N'}, {"{\"a\":1e05}", 'M'}, {"{\"a\":1,}", 'N'},
          {"{\n\t\"a\":1}", 'M'}, {"{\"a\":\"\\\"\\\\\\/\"}", 'N'}, {"{\"a\":\"\\\"\"}", 'M'},
          {"{\"a\":12345678901234567}", 'N'}, {"{\"a\":1234567890123456}", 'M'});
}

/* A text of about 300 code points: a match, and every prefix viable (check_bytes). */
static void test_json_long(void **state)
{
    (void)state;
    gbnf_oracle *g = gbnf_test_oracle(json_grammar);
    graft_test_bytes b = {0};
    graft_test_put_str(&b, "{\"items\": [");
    for (int i = 0; i < 20; i++)
        graft_test_put_str(&b, i == 0 ? "{\"k\xc3\xa9\": -12.5e7, \"v\": [true]}"
                                      : ", {\"k\xc3\xa9\": -12.5e7, \"v\": [true]}");
    graft_test_put_str(&b, "]}\n ");
    check_bytes(g, json_grammar, (const char *)b.p, b.n, 'M');
    b.p[b.n - 3] = ')';
    check_bytes(g, json_grammar, (const char *)b.p, b.n, 'N');
    free(b.p);
    gbnf_oracle_free(g);
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

static void test_partial_utf8(void **state)
{
    (void)state;
    /* The first byte of a 2-byte character: viable where U+00E9 is admitted only. */
    CHECK("root ::= [\xc3\xa9]",
          {"\xc3", 'P'}, {"\xc3\xa9", 'M'}, {"\xc3\xa8", 'N'}, {"\xc2", 'N'}, {"\xe0", 'N'});
    CHECK("root ::= [a-z]", {"\xc3", 'N'}, {"\xe2\x82", 'N'}, {"a", 'M'});
    CHECK("root ::= \"\\u20AC\"",
          {"\xe2", 'P'}, {"\xe2\x82", 'P'}, {"\xe2\x82\xac", 'M'}, {"\xe2\x83", 'N'},
          {"\xe3", 'N'});
    CHECK("root ::= \"a\" | \"\xc3\xa9\" \"b\"",
          {"\xc3", 'P'}, {"\xc3\xa9", 'P'}, {"\xc3\xa9" "b", 'M'});
    /* A 4-byte character cut after each byte. */
    CHECK("root ::= [\\U0001F600-\\U0001F64F]",
          {"\xf0", 'P'}, {"\xf0\x9f", 'P'}, {"\xf0\x9f\x98", 'P'}, {"\xf0\x9f\x98\x80", 'M'},
          {"\xf0\x9f\x97", 'N'}, {"\xf0\x9e", 'N'}, {"\xf1", 'N'});
    /* A class of every code point but 'a': the cuts that valid characters can follow. */
    CHECK("root ::= [^a]",
          {"\xc3", 'P'}, {"\xe0", 'P'}, {"\xf0", 'P'}, {"\xf4", 'P'}, {"\xf4\x8f", 'P'},
          {"\xf4\x90", 'N'}, {"\xed", 'P'}, {"\xed\x9f", 'P'}, {"\xed\xa0", 'N'},
          {"\xe0\x80", 'N'}, {"\xe0\x9f", 'N'}, {"\xe0\xa0", 'P'}, {"\xf0\x8f", 'N'},
          {"\xf0\x90", 'P'}, {"\xc0", 'N'}, {"\xc1", 'N'}, {"\xc2", 'P'}, {"\xf5", 'N'},
          {"\xf8", 'N'}, {"\xff", 'N'}, {"\x80", 'N'}, {"\xbf", 'N'});
    /* Negated classes that cover the start, or all, of a lead byte's range (C3: C0-FF). */
    CHECK("root ::= [^\\u00C0-\\u00DF]", {"\xc3", 'P'}, {"\xc3\xa0", 'M'}, {"\xc3\x80", 'N'});
    CHECK("root ::= [^\\u00C0-\\u00FF]", {"\xc3", 'N'}, {"\xc2", 'P'}, {"\xc4", 'P'});
    CHECK("root ::= [^\\u00E0-\\u00FF\\u00C0-\\u00DF]", {"\xc3", 'N'}, {"\xc4", 'P'});
    CHECK("root ::= [^\\u00E0-\\u00FF\\u00C0-\\u00CF]", {"\xc3", 'P'}, {"\xc3\x90", 'M'});
    /* Only the surrogates' neighbours are encodable: a literal surrogate never matches. */
    CHECK("root ::= \"\\uD800\" | \"a\"", {"\xed\xa0\x80", 'N'}, {"\xed", 'N'}, {"a", 'M'});
    CHECK("root ::= [\\uD000-\\uDFFF]", {"\xed", 'P'}, {"\xed\x9f\xbf", 'M'},
          {"\xed\xa0", 'N'});
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    CHECK("root ::= [^a]*",
          {"\xc3\xa9\x80", 'N'}, {"b\x80", 'N'}, {"\xc3\x28", 'N'}, {"\xe2\x82\xac", 'M'},
          {"\xe2\x82", 'P'}, {"\xf0\x9f\x98\x80", 'M'}, {"\xf0\x9f\x98", 'P'},
          {"\xf0\x8f\xbf\xbf", 'N'}, {"\xed\xa0\x80", 'N'}, {"\xed\xbf\xbf", 'N'},
          {"\xf4\x90\x80\x80", 'N'}, {"\xf4\x8f\xbf\xbf", 'M'}, {"\xef\xbf\xbf", 'M'},
          {"\xc0\x80", 'N'}, {"\xc1\xbf", 'N'}, {"\xe0\x80\x80", 'N'}, {"\xe0\x9f\xbf", 'N'},
          {"\xe0\xa0\x80", 'M'}, {"\xc2\x80", 'M'}, {"\xdf\xbf", 'M'}, {"\xfe", 'N'},
          {"\xe2\x82x", 'N'}, {"\xf0\x9f\x98x", 'N'}, {"\xc3\xa9\xc3", 'P'},
          {"\xc3\xc3", 'N'}, {"\xed\x9f\xbf", 'M'}, {"\xee\x80\x80", 'M'});
    /* matches() on a truncated text is false even where the prefix is viable. */
    gbnf_oracle *g = gbnf_test_oracle("root ::= [^a]*");
    assert_false(gbnf_oracle_matches(g, "\xc3", 1));
    assert_true(gbnf_oracle_viable_prefix(g, NULL, 0));
    assert_true(gbnf_oracle_matches(g, NULL, 0));
    gbnf_oracle_free(g);
}

/* ---- parse errors ---------------------------------------------------------------------------- */

static void expect_error(const char *grammar)
{
    char err[256];
    memset(err, 'x', sizeof err);
    gbnf_oracle *g = gbnf_oracle_parse(grammar, err, sizeof err);
    if (g != NULL) {
        gbnf_oracle_free(g);
        fail_msg("grammar accepted, expected an error:\n%s", grammar);
    }
    if (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')
        fail_msg("no message for the error in:\n%s", grammar);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        /* undefined rule */
        "root ::= foo",
        "root ::= \"a\" | x\ny ::= \"b\"",
        /* no root */
        "start ::= \"a\"",
        "",
        "# only a comment\n\n",
        /* names are case-sensitive */
        "Root ::= \"a\"",
        /* unterminated string */
        "root ::= \"abc",
        "root ::= \"abc\\\"",
        /* a line break outside parentheses */
        "root ::= \"a\"{\n2}",
        /* unterminated class */
        "root ::= [abc",
        "root ::= [abc\\]",
        /* unknown escape */
        "root ::= \"\\q\"",
        "root ::= [\\-]",
        /* too few hex digits */
        "root ::= \"\\x4\"",
        "root ::= \"\\x4g\"",
        "root ::= \"\\u12\"",
        "root ::= \"\\U0010FFF\"",
        /* above U+10FFFF */
        "root ::= \"\\U00110000\"",
        /* escape at the end */
        "root ::= \"\\",
        /* token references */
        "root ::= <[123]>",
        "root ::= <|end|>",
        "root ::= \"a\" <|end|>",
        /* defined twice */
        "root ::= \"a\"\nroot ::= \"b\"",
        "root ::= x\nx ::= \"a\"\nx ::= \"b\"",
        /* no ::= */
        "root \"a\"",
        "root := \"a\"",
        /* no name */
        "::= \"a\"",
        /* unbalanced parentheses */
        "root ::= (\"a\"",
        "root ::= \"a\")",
        "root ::= (\"a\" | \"b\"",
        /* nothing to repeat */
        "root ::= *",
        "root ::= \"a\" | +",
        "root ::= ( ? )",
        /* bad counts */
        "root ::= \"a\"{3,2}",
        "root ::= \"a\"{}",
        "root ::= \"a\"{,}",
        "root ::= \"a\"{2",
        "root ::= \"a\"{x}",
        "root ::= \"a\"{2,x}",
        "root ::= \"a\"{-1}",
        "root ::= \"a\"{10001}",
        /* a line break ends the rule */
        "root ::= \"a\"\n  \"b\"",
        "root ::= \"a\"\n  | \"b\"",
        /* a line break after '|' does not end x */
        "root ::= x\nx ::= \"a\" |\ny ::= \"b\"",
        /* stray characters */
        "root ::= \"a\" ; \"b\"",
        "root ::= \"a\" & \"b\"",
        "root ::= a_b\na_b ::= \"x\"",
        /* reversed range */
        "root ::= [z-a]",
        /* invalid UTF-8 in the grammar */
        "root ::= \"\xc3\"",
        "root ::= \"\xed\xa0\x80\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(bad[i]);

    /* A short or absent message buffer. */
    char small[8];
    assert_null(gbnf_oracle_parse("root ::= foo", small, sizeof small));
    assert_non_null(memchr(small, '\0', sizeof small));
    assert_null(gbnf_oracle_parse("root ::= foo", NULL, 0));
    /* The message of an undefined rule names it and its place. */
    char err[256];
    assert_null(gbnf_oracle_parse("root ::= \"a\"\n  x ::= \"b\" yy", err, sizeof err));
    assert_non_null(strstr(err, "yy"));
    assert_non_null(strstr(err, "line 2"));
    gbnf_oracle_free(NULL);
}

static int setup(void **state)
{
    (void)state;
    json_grammar = gbnf_test_grammar("json.gbnf");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(json_grammar);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_any),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_repetitions),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_empty_alternatives),
        cmocka_unit_test(test_nullable_rules),
        cmocka_unit_test(test_recursion),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_json_long),
        cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
