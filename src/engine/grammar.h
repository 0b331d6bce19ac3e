/*
 * grammar.h: holding a generation's output to a GBNF grammar (GRAFT_OUTPUT_GRAMMAR, the format
 * of llama.cpp's `grammar` field): the grammar compiled from its text, the recognizer that
 * follows it over Unicode code points, and the vocabulary sorted by bytes, to mask the tokens
 * that cannot continue a text. Part of the engine's internal interface (engine.h).
 */
#ifndef GRAFT_GRAMMAR_H
#define GRAFT_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* grammar_parse.c: the text compiled. The syntax is llama.cpp's (grammars/README.md):
 *   - rules `name ::= alternatives`, names of ASCII letters, digits and '-'; the output is
 *     held to rule `root`; a rule defined twice, or used and never defined, is refused;
 *   - alternatives separated by '|', each a sequence, possibly empty;
 *   - elements: string literals "..." and classes [...] / [^...] (characters and ranges
 *     a-z), with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH; '.' (any code point);
 *     rule names; groups (...); each may be followed by * + ? {m} {m,} {m,n} {,n};
 *   - '#' comments to the end of the line; a line break ends a rule except inside a group
 *     and right after "::=" or '|'.
 * Token references (<[id]>, <|name|>) are refused. So is left recursion (a rule that can
 * reach itself before matching a character), which no top-down recognizer ends on. Counted
 * repetitions are at most GRAFT__GRAMMAR_MAX_REPEAT, groups nest at most
 * GRAFT__GRAMMAR_MAX_NESTING deep, and the compiled grammar has at most
 * GRAFT__GRAMMAR_MAX_ELEMS elements. */
enum {
    GRAFT__GRAMMAR_MAX_REPEAT = 1000,
    GRAFT__GRAMMAR_MAX_NESTING = 128,
    GRAFT__GRAMMAR_MAX_ELEMS = 1 << 17
};

typedef enum graft__grammar_kind {
    GRAFT__GRAMMAR_END,   /* the end of a rule's last alternative */
    GRAFT__GRAMMAR_ALT,   /* the end of an alternative that another follows */
    GRAFT__GRAMMAR_REF,   /* rule `a` */
    GRAFT__GRAMMAR_CLASS  /* one code point in ranges[a, a + n) (sorted, disjoint, apart) */
} graft__grammar_kind;

typedef struct graft__grammar_elem {
    uint32_t kind, a, n;
} graft__grammar_elem;

typedef struct graft__grammar_range {
    uint32_t lo, hi; /* inclusive */
} graft__grammar_range;

typedef struct graft__grammar {
    graft__grammar_elem *elems;
    uint32_t n_elems;
    graft__grammar_range *ranges;
    uint32_t n_ranges;
    /* Rule r's alternatives begin at elements alt_at[rule_alts[r] .. rule_alts[r + 1]). */
    uint32_t *alt_at;
    uint32_t *rule_alts;
    uint32_t n_rules;
    uint32_t root;
} graft__grammar;

/* GRAFT_OK, GRAFT_EINVAL (*errmsg, when errmsg is not NULL, says what and at which line and
 * column, or which rule), GRAFT_ENOMEM. */
int graft__grammar_compile(const char *text, size_t len, graft__grammar **out, char **errmsg);
void graft__grammar_free(graft__grammar *g);

/* grammar_match.c: the recognizer, a pushdown automaton over code points that follows every
 * way the text read so far can be parsed. A parse is a stack of places in the grammar (the
 * element to match next, and where each rule it is inside goes on); the recognizer keeps the
 * distinct stacks whose top is a character class, and the empty stack when the text so far
 * is a whole match of root. Stacks share their tails as nodes of a tree (node 0: the bottom),
 * so a step costs the stacks it changes. Bytes are fed one at a time and decoded as strict
 * UTF-8 (no overlong forms, surrogates or code points above U+10FFFF); in the middle of a
 * character, the text can go on when some code point it could still become can be matched.
 *
 * All memory is allocated when the run is created, and the work of a feed or of a mask is
 * bounded, so that no grammar can stall the engine thread: a step that would need more
 * stacks than GRAFT__GRAMMAR_MAX_STACKS, more nodes than the run holds or more pending
 * expansions than GRAFT__GRAMMAR_MAX_WORK, or a feed or mask whose expansions and stack
 * comparisons pass GRAFT__GRAMMAR_BUDGET (a grammar that makes a text ambiguous beyond
 * reason), fails and marks the run `overflow`. */
enum {
    GRAFT__GRAMMAR_MAX_STACKS = 256,
    GRAFT__GRAMMAR_MAX_WORK = 1 << 16,
    GRAFT__GRAMMAR_NODES = 1 << 16,
    GRAFT__GRAMMAR_BUDGET = 1 << 25,
    GRAFT__GRAMMAR_LOOP_CACHE = 512
};

/* Where a text stands: its stacks (sets[first, first + count) of the run), and the character
 * being read (cp: its bits so far, need: the bytes it still needs, the next one in [lo, hi]). */
typedef struct graft__grammar_at {
    uint32_t first, count;
    uint32_t cp;
    uint8_t need, lo, hi;
} graft__grammar_at;

typedef struct graft__grammar_node {
    uint32_t pos, parent;
    uint32_t hash; /* of the stack's elements, top to bottom: equal stacks hash alike */
} graft__grammar_node;

typedef struct graft__grammar_run {
    const graft__grammar *g;
    graft__grammar_node *nodes, *spare; /* the tree, and the one it is compacted into */
    uint32_t n_nodes;
    uint32_t *sets; /* the stacks of every state in use, committed first */
    uint32_t n_sets;
    uint32_t *work; /* pending expansions; in a commit, the nodes of a stack to copy */
    graft__grammar_at at; /* the text fed so far (graft__grammar_run_feed) */
    uint32_t spent;       /* the work of the current feed or mask, against the budget */
    bool overflow;
    /* A walk through a token's bytes (grammar_mask.c): where it stands after each byte, and
     * the nodes and stacks in use then; trail_len + 1 of each. */
    graft__grammar_at *trail;
    uint32_t *trail_nodes, *trail_sets;
    uint32_t trail_len;
    /* For one mask: the code points known to lead from the committed stacks back to the same
     * stacks, or not (free text), direct-mapped by code point (loop_cp: the code point + 1,
     * 0 when the entry is empty). */
    uint32_t loop_cp[GRAFT__GRAMMAR_LOOP_CACHE];
    bool loops[GRAFT__GRAMMAR_LOOP_CACHE];
} graft__grammar_run;

/* The run of g before any byte, for walks of tokens of at most trail_len bytes; GRAFT_ENOMEM,
 * or GRAFT_ERANGE (overflow at the start). */
int graft__grammar_run_create(const graft__grammar *g, uint32_t trail_len,
                              graft__grammar_run **out);
void graft__grammar_run_free(graft__grammar_run *run);
/* *to: where *from stands after byte; false when no text that goes on so can match (or on
 * overflow). Appends nodes and stacks to the run: a caller that probes saves n_nodes and
 * n_sets and puts them back (and sets spent to 0 before a walk of its own). */
bool graft__grammar_step(graft__grammar_run *run, const graft__grammar_at *from, uint8_t byte,
                         graft__grammar_at *to);
/* Whether stacks a and b (nodes of the run) hold the same elements, top to bottom. */
bool graft__grammar_same_stack(const graft__grammar_run *run, uint32_t a, uint32_t b);
/* Feeds bytes to the run's text (all or nothing): false when they cannot follow it. */
bool graft__grammar_run_feed(graft__grammar_run *run, const char *bytes, size_t len);
/* Whether the text fed is a whole match of root, ... */
bool graft__grammar_run_accepts(const graft__grammar_run *run, const graft__grammar_at *at);
/* ... and whether it is one that nothing can follow. */
bool graft__grammar_run_complete(const graft__grammar_run *run, const graft__grammar_at *at);

/* grammar_mask.c: the token table's tokens with bytes, sorted by their bytes, each with the
 * length of the bytes it shares with the one before: masking walks them as a trie, a prefix
 * stepped once for all the tokens that share it, and the tokens after a prefix that cannot
 * follow are refused without a step. Immutable once built; read by the engine thread. The
 * table must outlive it. */
typedef struct graft__grammar_vocab graft__grammar_vocab;
int graft__grammar_vocab_create(const graft__token_table *tokens, graft__grammar_vocab **out);
/* The most bytes a token has (a run's trail_len). */
uint32_t graft__grammar_vocab_max_len(const graft__grammar_vocab *gv);
void graft__grammar_vocab_free(graft__grammar_vocab *gv);
/* Sets the logits of the tokens whose bytes cannot follow the run's text to -INFINITY (every
 * token without bytes included; generation.c lets the end tokens through where the text is a
 * whole match); returns how many tokens are left, or -1 on overflow. */
int32_t graft__grammar_mask_apply(const graft__grammar_vocab *gv, graft__grammar_run *run,
                                  float *logits);
/* Feeds token's bytes to the run: false when it has none or they cannot follow. */
bool graft__grammar_mask_feed(const graft__grammar_vocab *gv, graft__grammar_run *run,
                              int32_t token);

#endif /* GRAFT_GRAMMAR_H */
