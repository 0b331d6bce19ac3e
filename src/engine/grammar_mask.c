/*
 * grammar_mask.c: which tokens can continue a text held to a GBNF grammar
 * (GRAFT_OUTPUT_GRAMMAR; graft__grammar_vocab, grammar.h).
 *
 * The engine builds one graft__grammar_vocab per model vocabulary when it starts, over its token
 * table (tokenizer.h): the tokens that have bytes, sorted by their bytes, each with the length of
 * the prefix it shares with the one before. Walking them in that order is a walk of the
 * vocabulary's trie: a token resumes from where the recognizer stood after the bytes it shares with
 * the token before (the run's trail), so a prefix is stepped once for all the tokens that begin
 * with it, and when a prefix cannot follow, the tokens after it that share it are refused without a
 * step. Tokens without bytes (control tokens: BOS, end of turn) never continue a text; generation.c
 * lets the end tokens through where the text is a whole match.
 *
 * In free text (a string, a run of letters) most characters lead from the committed stacks
 * to stacks equal to them. Such a step is found once per code point and mask, checked stack by
 * stack, and from then on taken as the committed state itself: no node is made, and the
 * tokens that go on in free text cost a table lookup per character.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

/* One allocation: the struct, then its arrays (immutable once built). */
struct graft__grammar_vocab {
    const graft__token_table *tokens; /* borrowed: it outlives this */
    int32_t n_sorted;  /* the tokens with bytes */
    int32_t *sorted;   /* (n_vocab) the tokens with bytes by their bytes, then the others */
    uint32_t *shared;  /* (n_sorted) the bytes sorted[i] shares with sorted[i - 1] (0 first) */
};

typedef struct token_bytes {
    const char *p;
    size_t len;
    int32_t token;
} token_bytes;

static int by_bytes(const void *a, const void *b)
{
    const token_bytes *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return (x->token > y->token) - (x->token < y->token);
}

void graft__grammar_vocab_free(graft__grammar_vocab *gv)
{
    graft__free(gv);
}

uint32_t graft__grammar_vocab_max_len(const graft__grammar_vocab *gv)
{
    return gv->tokens->max_len;
}

int graft__grammar_vocab_create(const graft__token_table *tokens, graft__grammar_vocab **out)
{
    size_t n_vocab = (size_t)tokens->n_vocab;
    graft__grammar_vocab *gv =
        graft__malloc(sizeof *gv + n_vocab * (sizeof(int32_t) + sizeof(uint32_t)));
    token_bytes *tb = graft__malloc((n_vocab + 1) * sizeof *tb);
    *out = gv;
    if (gv == NULL || tb == NULL) {
        graft__free(tb);
        return GRAFT_ENOMEM;
    }
    gv->tokens = tokens;
    gv->sorted = (int32_t *)(gv + 1); /* the struct's size keeps the arrays aligned */
    gv->shared = (uint32_t *)(gv->sorted + n_vocab);
    int32_t n = 0, n_none = 0;
    for (int32_t t = 0; t < tokens->n_vocab; t++) {
        size_t len;
        const char *bytes = graft__token_table_bytes(tokens, t, &len);
        if (len == 0)
            gv->sorted[tokens->n_vocab - 1 - n_none++] = t;
        else
            tb[n++] = (token_bytes){bytes, len, t};
    }
    qsort(tb, (size_t)n, sizeof *tb, by_bytes);
    for (int32_t i = 0; i < n; i++) {
        gv->sorted[i] = tb[i].token;
        uint32_t k = 0;
        while (i > 0 && k < tb[i].len && k < tb[i - 1].len && tb[i].p[k] == tb[i - 1].p[k])
            k++;
        gv->shared[i] = k;
    }
    gv->n_sorted = n;
    graft__free(tb);
    return GRAFT_OK;
}

/* Whether the stacks of *a and *b are the same (each set holds no stack twice). */
static bool same_stacks(const graft__grammar_run *run, const graft__grammar_at *a,
                        const graft__grammar_at *b)
{
    if (a->count != b->count)
        return false;
    for (uint32_t i = 0; i < a->count; i++) {
        bool found = false;
        for (uint32_t j = 0; j < b->count && !found; j++)
            found = graft__grammar_same_stack(run, run->sets[a->first + i],
                                              run->sets[b->first + j]);
        if (!found)
            return false;
    }
    return true;
}

/* graft__grammar_step, but a step from the committed stacks back to the same stacks is known
 * by its code point after the first time, and lands on the committed stacks themselves. */
static bool walk_step(graft__grammar_run *run, const graft__grammar_at *from, uint8_t byte,
                      graft__grammar_at *to)
{
    const graft__grammar_at *committed = &run->at;
    uint32_t cp = UINT32_MAX; /* the code point byte completes, if known here */
    if (from->first == committed->first && from->count == committed->count) {
        if (from->need == 0 && byte < 0x80)
            cp = byte;
        else if (from->need == 1 && byte >= from->lo && byte <= from->hi)
            cp = from->cp << 6 | (byte & 0x3Fu);
    }
    if (cp == UINT32_MAX)
        return graft__grammar_step(run, from, byte, to);
    uint32_t slot = cp % GRAFT__GRAMMAR_LOOP_CACHE;
    bool known = run->loop_cp[slot] == cp + 1;
    if (known && run->loops[slot]) {
        *to = (graft__grammar_at){.first = from->first, .count = from->count, .cp = cp,
                                  .lo = 0x80, .hi = 0xBF};
        return true;
    }
    uint32_t n_nodes = run->n_nodes, n_sets = run->n_sets;
    bool ok = graft__grammar_step(run, from, byte, to);
    if (known || !ok)
        return ok;
    run->loop_cp[slot] = cp + 1;
    run->loops[slot] = same_stacks(run, to, committed);
    if (run->loops[slot]) { /* the same stacks: the step's nodes are not needed */
        run->n_nodes = n_nodes, run->n_sets = n_sets;
        to->first = committed->first;
    }
    return true;
}

int32_t graft__grammar_mask_apply(const graft__grammar_vocab *gv, graft__grammar_run *run,
                                  float *logits)
{
    const graft__token_table *tokens = gv->tokens;
    for (int32_t i = gv->n_sorted; i < tokens->n_vocab; i++)
        logits[gv->sorted[i]] = -INFINITY;
    const uint32_t n_nodes = run->n_nodes, n_sets = run->n_sets;
    run->spent = 0;
    memset(run->loop_cp, 0, sizeof run->loop_cp);
    run->trail[0] = run->at;
    run->trail_nodes[0] = n_nodes;
    run->trail_sets[0] = n_sets;
    uint32_t alive = 0; /* the trail holds where the last token walked stood, to this depth */
    int32_t allowed = 0;
    for (int32_t i = 0; i < gv->n_sorted && !run->overflow; i++) {
        int32_t t = gv->sorted[i];
        size_t n_bytes;
        const char *bytes = graft__token_table_bytes(tokens, t, &n_bytes);
        uint32_t len = (uint32_t)n_bytes, d = gv->shared[i];
        bool ok = false;
        if (d <= alive) { /* else it shares the byte that refused the token before */
            run->n_nodes = run->trail_nodes[d];
            run->n_sets = run->trail_sets[d];
            while (d < len &&
                   walk_step(run, &run->trail[d], (uint8_t)bytes[d], &run->trail[d + 1])) {
                d++;
                run->trail_nodes[d] = run->n_nodes;
                run->trail_sets[d] = run->n_sets;
            }
            alive = d;
            ok = d == len;
        }
        if (ok)
            allowed++;
        else
            logits[t] = -INFINITY;
    }
    run->n_nodes = n_nodes;
    run->n_sets = n_sets;
    return run->overflow ? -1 : allowed;
}

bool graft__grammar_mask_feed(const graft__grammar_vocab *gv, graft__grammar_run *run,
                              int32_t token)
{
    if (token < 0 || token >= gv->tokens->n_vocab)
        return false;
    size_t len;
    const char *bytes = graft__token_table_bytes(gv->tokens, token, &len);
    return len > 0 && graft__grammar_run_feed(run, bytes, len);
}
