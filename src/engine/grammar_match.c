/*
 * grammar_match.c: the recognizer of a compiled GBNF grammar (graft__grammar_run, grammar.h).
 *
 * A stack is a node: the element it matches next (pos) and the stack below it (parent); node
 * 0 is the bottom, the empty stack. A stack whose element is a reference is expanded: it is
 * replaced by one stack per alternative of the rule, each on top of the element after the
 * reference (or, where the reference ends its alternative, on top of the stack below, so a
 * repetition written as a rule that refers to itself last adds no node per repeat). One at an
 * alternative's end is popped. What is left are stacks whose top is a character class, and
 * the bottom where the text is a whole match: a state's set, kept without duplicates (two
 * stacks are the same when their elements are, top to bottom). A code point steps each stack
 * whose class holds it past the class, and the results are expanded again.
 *
 * Nodes are never changed, so states share them and a probe only appends. After a feed the
 * nodes of the committed stacks are copied into the spare array (each once, tails shared: an
 * old node is marked copied and points at its copy) and the arrays swap, so the tree holds
 * what is in use and no more.
 */
#include "engine/engine.h"

enum { COPIED = 0x80000000u };

static bool ends_alternative(const graft__grammar *g, uint32_t pos)
{
    return g->elems[pos].kind == GRAFT__GRAMMAR_END || g->elems[pos].kind == GRAFT__GRAMMAR_ALT;
}

/* The first of a class's ranges whose end is at or above cp (e->n when none). */
static uint32_t range_at(const graft__grammar *g, const graft__grammar_elem *e, uint32_t cp)
{
    uint32_t lo = 0, hi = e->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->ranges[e->a + mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether class e holds a code point in [lo, hi]. */
static bool class_meets(const graft__grammar *g, const graft__grammar_elem *e, uint32_t lo,
                        uint32_t hi)
{
    uint32_t i = range_at(g, e, lo);
    return i < e->n && g->ranges[e->a + i].lo <= hi;
}

static uint32_t new_node(graft__grammar_run *run, uint32_t pos, uint32_t parent)
{
    if (run->n_nodes >= GRAFT__GRAMMAR_NODES) {
        run->overflow = true;
        return 0;
    }
    uint32_t below = run->nodes[parent].hash;
    uint32_t hash = (pos + 1u) * 0x9E3779B1u ^ (below << 7 | below >> 25);
    run->nodes[run->n_nodes] = (graft__grammar_node){pos, parent, hash};
    return run->n_nodes++;
}

/* Counts one unit of work: false (and overflow) once the feed or mask is over its budget. */
static bool spend(graft__grammar_run *run)
{
    if (++run->spent > GRAFT__GRAMMAR_BUDGET)
        run->overflow = true;
    return !run->overflow;
}

bool graft__grammar_same_stack(const graft__grammar_run *run, uint32_t a, uint32_t b)
{
    if (run->nodes[a].hash != run->nodes[b].hash)
        return false;
    while (a != b) {
        if (a == 0 || b == 0 || run->nodes[a].pos != run->nodes[b].pos)
            return false;
        a = run->nodes[a].parent;
        b = run->nodes[b].parent;
    }
    return true;
}

/* Adds stack s to the set being built at sets[first, n_sets) unless it is there. */
static void add_stack(graft__grammar_run *run, uint32_t first, uint32_t s)
{
    for (uint32_t i = first; i < run->n_sets; i++)
        if (!spend(run) || graft__grammar_same_stack(run, run->sets[i], s))
            return;
    if (run->n_sets - first >= GRAFT__GRAMMAR_MAX_STACKS || run->n_sets >= GRAFT__GRAMMAR_NODES) {
        run->overflow = true;
        return;
    }
    run->sets[run->n_sets++] = s;
}

/* Expands stack s into the set being built at sets[first, n_sets). */
static void expand(graft__grammar_run *run, uint32_t first, uint32_t s)
{
    const graft__grammar *g = run->g;
    uint32_t n = 0;
    run->work[n++] = s;
    while (n > 0 && spend(run)) {
        s = run->work[--n];
        if (s == 0) {
            add_stack(run, first, 0);
            continue;
        }
        graft__grammar_node node = run->nodes[s];
        const graft__grammar_elem *e = &g->elems[node.pos];
        if (e->kind == GRAFT__GRAMMAR_CLASS) {
            add_stack(run, first, s);
            continue;
        }
        if (e->kind != GRAFT__GRAMMAR_REF) { /* an alternative's end: pop */
            run->work[n++] = node.parent;
            continue;
        }
        uint32_t rest = ends_alternative(g, node.pos + 1) ? node.parent
                                                          : new_node(run, node.pos + 1,
                                                                     node.parent);
        uint32_t from = g->rule_alts[e->a], to = g->rule_alts[e->a + 1];
        if (n + (to - from) > GRAFT__GRAMMAR_MAX_WORK) {
            run->overflow = true;
            break;
        }
        for (uint32_t k = to; k > from; k--) { /* the first alternative is expanded first */
            uint32_t at = g->alt_at[k - 1]; /* an empty one is `rest` at once */
            run->work[n++] = ends_alternative(g, at) ? rest : new_node(run, at, rest);
        }
    }
}

/* The code points a character begun as *at can still become, in [*lo, *hi]. */
static void pending_range(const graft__grammar_at *at, uint32_t *lo, uint32_t *hi)
{
    unsigned rest = 6u * (at->need - 1u);
    *lo = ((at->cp << 6) | (at->lo & 0x3Fu)) << rest;
    *hi = ((((at->cp << 6) | (at->hi & 0x3Fu)) + 1u) << rest) - 1u;
}

/* Decodes byte into *to (from *from): 1 when it completes a code point (to->cp), 0 when a
 * character goes on, -1 when it is no UTF-8 there. */
static int decode(const graft__grammar_at *from, uint8_t byte, graft__grammar_at *to)
{
    *to = *from;
    if (from->need > 0) {
        if (byte < from->lo || byte > from->hi)
            return -1;
        to->cp = from->cp << 6 | (byte & 0x3Fu);
        to->need--;
        to->lo = 0x80, to->hi = 0xBF;
        return to->need == 0;
    }
    to->lo = 0x80, to->hi = 0xBF;
    if (byte < 0x80) {
        to->cp = byte;
        return 1;
    }
    if (byte >= 0xC2 && byte <= 0xDF)
        to->need = 1, to->cp = byte & 0x1Fu;
    else if (byte >= 0xE0 && byte <= 0xEF)
        to->need = 2, to->cp = byte & 0x0Fu;
    else if (byte >= 0xF0 && byte <= 0xF4)
        to->need = 3, to->cp = byte & 0x07u;
    else
        return -1;
    if (byte == 0xE0)
        to->lo = 0xA0; /* no overlong forms ... */
    else if (byte == 0xED)
        to->hi = 0x9F; /* ... no surrogates ... */
    else if (byte == 0xF0)
        to->lo = 0x90;
    else if (byte == 0xF4)
        to->hi = 0x8F; /* ... nothing above U+10FFFF */
    return 0;
}

bool graft__grammar_step(graft__grammar_run *run, const graft__grammar_at *from, uint8_t byte,
                         graft__grammar_at *to)
{
    const graft__grammar *g = run->g;
    graft__grammar_at was = *from;
    int done = decode(&was, byte, to);
    if (done < 0 || run->overflow)
        return false;
    if (done == 0) { /* the same stacks: can one of them take what the character may be? */
        uint32_t lo, hi;
        pending_range(to, &lo, &hi);
        for (uint32_t i = 0; i < was.count; i++) {
            uint32_t s = run->sets[was.first + i];
            if (s != 0 && class_meets(g, &g->elems[run->nodes[s].pos], lo, hi))
                return true;
        }
        return false;
    }
    to->first = run->n_sets;
    to->need = 0;
    for (uint32_t i = 0; i < was.count && !run->overflow; i++) {
        uint32_t s = run->sets[was.first + i];
        if (s == 0 || !class_meets(g, &g->elems[run->nodes[s].pos], to->cp, to->cp))
            continue;
        graft__grammar_node node = run->nodes[s]; /* past the class; past the alternative */
        uint32_t next = ends_alternative(g, node.pos + 1) ? node.parent
                                                          : new_node(run, node.pos + 1,
                                                                     node.parent);
        if (!run->overflow)
            expand(run, to->first, next);
    }
    to->count = run->n_sets - to->first;
    return to->count > 0 && !run->overflow;
}

/* Stack s's copy in the spare array (its nodes copied once each). */
static uint32_t copy_stack(graft__grammar_run *run, uint32_t s, uint32_t *n_spare)
{
    uint32_t chain = 0;
    while (s != 0 && !(run->nodes[s].pos & COPIED)) {
        run->work[chain++] = s;
        s = run->nodes[s].parent;
    }
    uint32_t below = s == 0 ? 0 : run->nodes[s].parent;
    while (chain > 0) {
        graft__grammar_node *old = &run->nodes[run->work[--chain]];
        run->spare[*n_spare] = (graft__grammar_node){old->pos, below, old->hash};
        old->pos |= COPIED;
        old->parent = below = (*n_spare)++;
    }
    return below;
}

/* Makes *at the committed state, holding only its stacks' nodes. */
static void commit(graft__grammar_run *run, const graft__grammar_at *at)
{
    uint32_t n_spare = 1;
    run->spare[0] = (graft__grammar_node){0, 0, 0};
    for (uint32_t i = 0; i < at->count; i++)
        run->sets[at->first + i] = copy_stack(run, run->sets[at->first + i], &n_spare);
    memmove(run->sets, run->sets + at->first, at->count * sizeof *run->sets);
    graft__grammar_node *old = run->nodes;
    run->nodes = run->spare;
    run->spare = old;
    run->n_nodes = n_spare;
    run->n_sets = at->count;
    run->at = *at;
    run->at.first = 0;
}

bool graft__grammar_run_feed(graft__grammar_run *run, const char *bytes, size_t len)
{
    uint32_t n_nodes = run->n_nodes, n_sets = run->n_sets;
    graft__grammar_at at = run->at;
    run->spent = 0;
    for (size_t i = 0; i < len; i++) {
        if (!graft__grammar_step(run, &at, (uint8_t)bytes[i], &at)) {
            run->n_nodes = n_nodes, run->n_sets = n_sets;
            return false;
        }
    }
    commit(run, &at);
    return true;
}

bool graft__grammar_run_accepts(const graft__grammar_run *run, const graft__grammar_at *at)
{
    for (uint32_t i = 0; at->need == 0 && i < at->count; i++)
        if (run->sets[at->first + i] == 0)
            return true;
    return false;
}

bool graft__grammar_run_complete(const graft__grammar_run *run, const graft__grammar_at *at)
{
    return at->need == 0 && at->count == 1 && run->sets[at->first] == 0;
}

void graft__grammar_run_free(graft__grammar_run *run)
{
    graft__free(run);
}

int graft__grammar_run_create(const graft__grammar *g, uint32_t trail_len,
                              graft__grammar_run **out)
{
    *out = NULL;
    /* One block: the struct, then its arrays, each of 4-byte items after 8-byte ones. */
    const size_t trail = (size_t)trail_len + 1, nodes = GRAFT__GRAMMAR_NODES;
    size_t bytes = sizeof(graft__grammar_run) + 2 * nodes * sizeof(graft__grammar_node) +
                   nodes * sizeof(uint32_t) + GRAFT__GRAMMAR_MAX_WORK * sizeof(uint32_t) +
                   trail * (sizeof(graft__grammar_at) + 2 * sizeof(uint32_t));
    graft__grammar_run *run = graft__malloc(bytes);
    if (run == NULL)
        return GRAFT_ENOMEM;
    *run = (graft__grammar_run){.g = g};
    run->nodes = (graft__grammar_node *)(run + 1); /* the struct's size keeps them aligned */
    run->spare = run->nodes + nodes;
    run->sets = (uint32_t *)(run->spare + nodes);
    run->work = run->sets + nodes;
    run->trail = (graft__grammar_at *)(run->work + GRAFT__GRAMMAR_MAX_WORK);
    run->trail_nodes = (uint32_t *)(run->trail + trail);
    run->trail_sets = run->trail_nodes + trail;
    run->trail_len = trail_len;
    run->nodes[0] = (graft__grammar_node){0, 0, 0};
    run->n_nodes = 1;
    for (uint32_t k = g->rule_alts[g->root]; k < g->rule_alts[g->root + 1]; k++)
        expand(run, 0, new_node(run, g->alt_at[k], 0));
    run->at = (graft__grammar_at){.first = 0, .count = run->n_sets};
    if (run->overflow) {
        graft__grammar_run_free(run);
        return GRAFT_ERANGE;
    }
    commit(run, &run->at);
    *out = run;
    return GRAFT_OK;
}
