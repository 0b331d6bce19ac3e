/*
 * trace.c: reading, generating and expanding replay traces (trace.h).
 *
 * The generator's three shapes:
 *   agentic  root agents, one after another (root concurrency 1), each a loop of calls over
 *            a growing context: a shared 2048-token system prompt with tool definitions, a
 *            task, then per call the assistant's turn (its output length) and a tool result
 *            of 200-2000 tokens. At two of its calls a root forks two sub-agents: they and
 *            the root's next call arrive at the same moment from the same new context (the
 *            history plus a tool result nobody has computed), then each sub-agent runs
 *            three calls of its own, concurrently.
 *   chat     multi-turn sessions over a short shared system prompt, each turn adding a user
 *            message and the previous answer, a few seconds of reading between turns.
 *   shared   groups of four requests sharing a 2048-token prefix nobody computed before,
 *            each with its own question, arriving within 100 ms; groups arrive as a
 *            Poisson process (4 s apart on average unless told).
 * Lengths are whole blocks (64 tokens), so a prompt is exactly its blocks.
 */
#include "trace.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 64, SYSTEM_BLOCKS = 32 };

/* ---- reading ------------------------------------------------------------------------------ */

static int parse_request(json_t *j, int32_t index, trace_request *r)
{
    json_t *ids = json_object_get(j, "hash_ids");
    if (!json_is_array(ids))
        return -1;
    r->id = index;
    r->session = (int32_t)json_integer_value(json_object_get(j, "session"));
    json_t *after = json_object_get(j, "after");
    r->after = json_is_integer(after) ? (int32_t)json_integer_value(after) : -1;
    json_t *delay = json_object_get(j, "delay_ms");
    if (delay == NULL)
        delay = json_object_get(j, "timestamp");
    r->delay_ms = json_number_value(delay);
    r->n_hash = (int32_t)json_array_size(ids);
    r->hash_ids = malloc(sizeof *r->hash_ids * (size_t)(r->n_hash ? r->n_hash : 1));
    for (int32_t k = 0; k < r->n_hash; k++)
        r->hash_ids[k] = (int64_t)json_integer_value(json_array_get(ids, (size_t)k));
    r->input_length = (int32_t)json_integer_value(json_object_get(j, "input_length"));
    r->output_length = (int32_t)json_integer_value(json_object_get(j, "output_length"));
    return r->output_length > 0 && r->n_hash > 0 ? 0 : -1;
}

int trace_read(const char *path, int32_t default_block_tokens, trace *out)
{
    memset(out, 0, sizeof *out);
    out->block_tokens = default_block_tokens;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int32_t cap_req = 0, lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (j == NULL) {
            if (line[0] == '\n')
                continue;
            fprintf(stderr, "replay: %s:%d: %s\n", path, (int)lineno, e.text);
            goto fail;
        }
        if (json_object_get(j, "trace") != NULL) {
            json_t *b = json_object_get(j, "block_tokens");
            if (json_is_integer(b))
                out->block_tokens = (int32_t)json_integer_value(b);
            snprintf(out->shape, sizeof out->shape, "%s",
                     json_string_value(json_object_get(j, "shape")) ?: "");
            json_decref(j);
            continue;
        }
        if (out->n == cap_req) {
            cap_req = cap_req ? 2 * cap_req : 64;
            out->requests = realloc(out->requests, sizeof *out->requests * (size_t)cap_req);
        }
        trace_request *r = &out->requests[out->n];
        memset(r, 0, sizeof *r);
        int bad = parse_request(j, out->n, r);
        json_decref(j);
        out->n++;
        if (bad || r->after >= r->id) {
            fprintf(stderr, "replay: %s:%d: not a request line (hash_ids, output_length, an "
                    "earlier 'after')\n", path, (int)lineno);
            goto fail;
        }
        if (r->input_length <= 0 || r->input_length > r->n_hash * out->block_tokens)
            r->input_length = r->n_hash * out->block_tokens;
    }
    free(line);
    fclose(f);
    return 0;
fail:
    free(line);
    fclose(f);
    trace_free(out);
    return -1;
}

void trace_free(trace *t)
{
    for (int32_t i = 0; i < t->n; i++)
        free(t->requests[i].hash_ids);
    free(t->requests);
    memset(t, 0, sizeof *t);
}

/* ---- tokens --------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

int32_t *trace_tokens(const trace *t, const trace_request *r, int32_t lo, int32_t hi, size_t *n)
{
    int32_t *out = malloc(sizeof *out * (size_t)r->input_length);
    for (int32_t i = 0; i < r->input_length; i++) {
        int64_t block = r->hash_ids[i / t->block_tokens];
        uint64_t h = mix((uint64_t)block * 1000003u + (uint64_t)(i % t->block_tokens));
        out[i] = lo + (int32_t)(h % (uint64_t)(hi - lo));
    }
    *n = (size_t)r->input_length;
    return out;
}

/* ---- the ideal ------------------------------------------------------------------------------ */

/* A trie of the prompts as a hash table from (node, token) to child node. */
typedef struct trie {
    uint64_t *keys; /* (node << 32 | token) + 1; 0: empty */
    uint32_t *child;
    size_t cap, used;
    uint32_t nodes;
} trie;

static uint32_t trie_step(trie *tr, uint32_t node, int32_t token, int *created)
{
    if (2 * (tr->used + 1) > tr->cap) {
        trie grown = {calloc(tr->cap * 2, sizeof(uint64_t)), calloc(tr->cap * 2, sizeof(uint32_t)),
                      tr->cap * 2, 0, tr->nodes};
        for (size_t i = 0; i < tr->cap; i++)
            if (tr->keys[i]) {
                size_t at = mix(tr->keys[i]) & (grown.cap - 1);
                while (grown.keys[at])
                    at = (at + 1) & (grown.cap - 1);
                grown.keys[at] = tr->keys[i];
                grown.child[at] = tr->child[i];
                grown.used++;
            }
        free(tr->keys);
        free(tr->child);
        *tr = grown;
    }
    uint64_t key = ((uint64_t)node << 32 | (uint32_t)token) + 1;
    size_t at = mix(key) & (tr->cap - 1);
    while (tr->keys[at] && tr->keys[at] != key)
        at = (at + 1) & (tr->cap - 1);
    *created = tr->keys[at] == 0;
    if (*created) {
        tr->keys[at] = key;
        tr->child[at] = ++tr->nodes;
        tr->used++;
    }
    return tr->child[at];
}

int64_t trace_ideal(const trace *t, int32_t lo, int32_t hi)
{
    trie tr = {calloc(1024, sizeof(uint64_t)), calloc(1024, sizeof(uint32_t)), 1024, 0, 0};
    int64_t ideal = 0;
    for (int32_t i = 0; i < t->n; i++) {
        size_t n = 0;
        int32_t *tokens = trace_tokens(t, &t->requests[i], lo, hi, &n);
        uint32_t node = 0;
        int created = 0;
        for (size_t k = 0; k < n; k++) {
            node = trie_step(&tr, node, tokens[k], &created);
            ideal += created;
        }
        ideal += !created; /* its last token computed again, for fresh logits */
        free(tokens);
    }
    free(tr.keys);
    free(tr.child);
    return ideal;
}

/* ---- the generator -------------------------------------------------------------------------- */

typedef struct gen {
    FILE *f;
    uint64_t rng;
    int64_t next_block;
    int32_t next_id;
    double gap_ms; /* shared: mean time between groups */
} gen;

static double unit(gen *g)
{
    g->rng = mix(g->rng);
    return (double)(g->rng >> 11) / 9007199254740992.0;
}

static int32_t between(gen *g, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(unit(g) * (hi - lo + 1));
}

/* A growing context: its block ids. */
typedef struct context {
    int64_t *ids;
    int32_t n, cap;
} context;

static void add_blocks(gen *g, context *c, int32_t tokens)
{
    for (int32_t k = 0; k < (tokens + BLOCK - 1) / BLOCK; k++) {
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 64;
            c->ids = realloc(c->ids, sizeof *c->ids * (size_t)c->cap);
        }
        c->ids[c->n++] = g->next_block++;
    }
}

static context copy_context(const context *c)
{
    context d = {malloc(sizeof *c->ids * (size_t)(c->cap ? c->cap : 1)), c->n, c->cap ? c->cap : 1};
    memcpy(d.ids, c->ids, sizeof *c->ids * (size_t)c->n);
    return d;
}

/* Writes one request; returns its id. */
static int32_t emit(gen *g, int32_t session, int32_t after, double delay_ms, const context *c,
                    int32_t output)
{
    fprintf(g->f, "{\"id\": %d, \"session\": %d, \"after\": %d, \"delay_ms\": %.0f, \"hash_ids\": [",
            (int)g->next_id, (int)session, (int)after, delay_ms);
    for (int32_t k = 0; k < c->n; k++)
        fprintf(g->f, "%s%lld", k ? ", " : "", (long long)c->ids[k]);
    fprintf(g->f, "], \"input_length\": %d, \"output_length\": %d}\n", (int)(c->n * BLOCK),
            (int)output);
    return g->next_id++;
}

static void agentic(gen *g, int roots, int calls)
{
    const int sub_calls = 3;
    roots = roots > 0 ? roots : 3;
    calls = calls > 0 ? calls : 8;
    context system = {0};
    add_blocks(g, &system, SYSTEM_BLOCKS * BLOCK); /* ids 0..31, shared by every root */
    int32_t previous_root_end = -1, session = 0;
    for (int r = 0; r < roots; r++) {
        context c = copy_context(&system);
        add_blocks(g, &c, BLOCK * between(g, 1, 3)); /* the task */
        int32_t last = previous_root_end;
        double delay = last < 0 ? 0 : between(g, 200, 800);
        int root_session = session++;
        for (int k = 0; k < calls; k++) {
            int32_t output = between(g, 50, 300);
            bool fork = k == 2 || k == 5; /* sub-agents fork at the third and sixth calls */
            int32_t id = emit(g, root_session, last, delay, &c, output);
            if (fork) /* sub-agents: the same moment, the same new context as call k */
                for (int s = 0; s < 2; s++) {
                    context sub = copy_context(&c);
                    add_blocks(g, &sub, BLOCK * between(g, 1, 2)); /* its instructions */
                    int32_t sub_last = last, sub_session = session++;
                    double sub_delay = delay;
                    for (int j = 0; j < sub_calls; j++) {
                        int32_t out = between(g, 50, 300);
                        sub_last = emit(g, sub_session, sub_last, sub_delay, &sub, out);
                        add_blocks(g, &sub, out);
                        add_blocks(g, &sub, between(g, 200, 2000));
                        sub_delay = between(g, 200, 800);
                    }
                    free(sub.ids);
                }
            last = id;
            add_blocks(g, &c, output);                  /* the assistant's turn */
            add_blocks(g, &c, between(g, 200, 2000));   /* the tool's result */
            delay = between(g, 200, 800);               /* the tool ran */
        }
        previous_root_end = last;
        free(c.ids);
    }
    free(system.ids);
}

static void chat(gen *g, int sessions, int turns)
{
    sessions = sessions > 0 ? sessions : 4;
    turns = turns > 0 ? turns : 6;
    context system = {0};
    add_blocks(g, &system, 4 * BLOCK);
    for (int s = 0; s < sessions; s++) {
        context c = copy_context(&system);
        int32_t last = -1;
        double delay = between(g, 0, 3000);
        for (int k = 0; k < turns; k++) {
            add_blocks(g, &c, BLOCK * between(g, 1, 3)); /* the user's message */
            int32_t output = between(g, 100, 300);
            last = emit(g, s, last, delay, &c, output);
            add_blocks(g, &c, output);
            delay = between(g, 1000, 3000);
        }
        free(c.ids);
    }
    free(system.ids);
}

static void shared(gen *g, int groups, int calls)
{
    (void)calls;
    groups = groups > 0 ? groups : 6;
    double at = 0;
    for (int k = 0; k < groups; k++) {
        context prefix = {0};
        add_blocks(g, &prefix, SYSTEM_BLOCKS * BLOCK);
        for (int m = 0; m < 4; m++) {
            context c = copy_context(&prefix);
            add_blocks(g, &c, BLOCK * between(g, 1, 2));
            emit(g, k * 4 + m, -1, at + between(g, 0, 100), &c, between(g, 32, 64));
            free(c.ids);
        }
        at += -log(1.0 - unit(g)) * g->gap_ms; /* Poisson arrivals, gap_ms apart on average */
        free(prefix.ids);
    }
}

int trace_generate(const char *shape, int sessions, int calls, double gap_ms, uint64_t seed,
                   const char *path)
{
    void (*make)(gen *, int, int) = strcmp(shape, "agentic") == 0 ? agentic
                               : strcmp(shape, "chat") == 0  ? chat
                               : strcmp(shape, "shared") == 0 ? shared
                                                              : NULL;
    if (make == NULL) {
        fprintf(stderr, "replay: unknown shape '%s' (agentic, chat, shared)\n", shape);
        return -1;
    }
    gen g = {fopen(path, "w"), seed ? seed : 1, 0, 0, gap_ms > 0 ? gap_ms : 4000.0};
    if (g.f == NULL) {
        fprintf(stderr, "replay: cannot write %s\n", path);
        return -1;
    }
    fprintf(g.f, "{\"trace\": \"graft-replay\", \"shape\": \"%s\", \"block_tokens\": %d, "
            "\"seed\": %llu, \"sessions\": %d, \"calls\": %d}\n", shape, BLOCK,
            (unsigned long long)seed, sessions, calls);
    make(&g, sessions, calls);
    return fclose(g.f) == 0 ? 0 : -1;
}
