/*
 * gbnf_oracle.h: a GBNF grammar recognizer written for the tests only, as the oracle that the
 * engine's grammar-constrained sampling is checked against. It is written from llama.cpp's
 * grammars/README.md, without reference to the engine's own grammar code, and favours
 * clarity over speed: a plain Earley recognizer over code points, run afresh on each call.
 *
 * Syntax read (each choice where the README leaves room is marked "choice"):
 *   - rules `name ::= alternatives`, names of ASCII letters, digits and '-'; the start rule
 *     is `root`; a name defined twice, a reference to an undefined name and a grammar with no
 *     `root` are errors;
 *   - alternatives separated by '|', each a sequence of elements, possibly empty;
 *   - elements: "literals", [classes] and [^negated classes] (ranges a-z; '-' first or last
 *     is itself; `[]` matches nothing and `[^]` any code point: choice), '.', rule names,
 *     ( groups ); the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, exactly that many
 *     hex digits, at most U+10FFFF; any other escape is an error; raw characters (a raw line
 *     feed too) stand for themselves and must be valid UTF-8; a range whose end is below its
 *     start is an error (choice);
 *   - postfix operators * + ? {m} {m,} {m,n} {,n} (spaces allowed around the numbers, counts
 *     at most 10000, n >= m; `{}` and `{,}` are errors: choice); an operator applies to the
 *     element before it, a whole literal included ("ab"* repeats "ab"), and may follow
 *     another (x{2}? is (x x)?), as in llama.cpp: choice;
 *   - '#' comments to the end of the line; spaces and tabs separate elements; a line feed
 *     (or CR, CR LF) ends a rule except inside parentheses and right after `::=` or '|';
 *   - token references (<[123]>, <|name|>) and any other character are errors.
 *
 * Matching is over Unicode scalar values: the input's bytes are decoded as UTF-8, and
 * invalid UTF-8 (overlong forms, surrogates, values above U+10FFFF, stray or missing
 * continuation bytes) never matches. A rule that derives no finite string is dropped with
 * every alternative that uses it, so that "the chart is not empty" means "viable" even then.
 *
 * The oracle is read-only after parsing: the calls on one may run on several threads.
 * Running out of memory aborts the process (it is test code).
 */
#ifndef GRAFT_TEST_GBNF_ORACLE_H
#define GRAFT_TEST_GBNF_ORACLE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gbnf_oracle gbnf_oracle;

/* Parses a GBNF grammar (NUL-terminated text). NULL on a syntax error or an undefined rule or
 * a missing `root` rule, with a message in err (err_size bytes, NUL-terminated; err may be
 * NULL when err_size is 0). The message starts "line L, column C: " where it has a place. */
gbnf_oracle *gbnf_oracle_parse(const char *text, char *err, size_t err_size);
/* Frees g; NULL is allowed. */
void gbnf_oracle_free(gbnf_oracle *g);
/* Whether bytes[0, len) is the beginning of some string that rule `root` matches. The bytes
 * are UTF-8 and may end inside a character: then it is viable when some completion of that
 * character could be matched at that point. Invalid UTF-8 (overlong forms, surrogates
 * U+D800-DFFF, above U+10FFFF, stray continuation bytes) is never viable. bytes may be NULL
 * when len is 0. */
bool gbnf_oracle_viable_prefix(const gbnf_oracle *g, const char *bytes, size_t len);
/* Whether bytes[0, len) (complete, valid UTF-8) is a whole string that `root` matches; false
 * for anything that is not complete, valid UTF-8. */
bool gbnf_oracle_matches(const gbnf_oracle *g, const char *bytes, size_t len);

#endif /* GRAFT_TEST_GBNF_ORACLE_H */
