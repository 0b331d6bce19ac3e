/*
 * trace.h: request traces for the replay benchmark (bench/replay/README section of
 * bench/README.md): the JSONL format, its generator, the token ids a trace stands for, and
 * the ideal a perfect server would compute.
 *
 * A trace is a header line {"trace": "graft-replay", "block_tokens": B, ...} then one
 * request a line:
 *   {"id": 7, "session": 2, "after": 5, "delay_ms": 800, "hash_ids": [0, 1, 2, 41],
 *    "input_length": 230, "output_length": 64}
 * A request is sent delay_ms after request `after` completed (after -1: after the replay
 * started). Its prompt is its blocks' tokens, B per block id (the same id is the same
 * tokens, as in Mooncake's traces), cut to input_length. Mooncake's own lines (timestamp,
 * input_length, output_length, hash_ids) read as requests after -1 with delay_ms the
 * timestamp.
 */
#ifndef GRAFT_BENCH_TRACE_H
#define GRAFT_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct trace_request {
    int32_t id, session, after; /* after: index of the request it follows, or -1 */
    double delay_ms;
    int64_t *hash_ids;
    int32_t n_hash;
    int32_t input_length, output_length;
} trace_request;

typedef struct trace {
    int32_t block_tokens;
    char shape[32];
    trace_request *requests; /* in id order: requests[i].id == i */
    int32_t n;
} trace;

/* Reads a trace file; 0, or -1 with a message on stderr. */
int trace_read(const char *path, int32_t default_block_tokens, trace *out);
void trace_free(trace *t);

/* The shapes the generator writes: "agentic", "chat", "shared". `sessions` is the number of
 * root agents, chats or groups (0: 3, 4 and 6); `calls` the calls per root agent or turns
 * per chat (0: 8 and 6); gap_ms the mean time between shared-prefix groups (0: 4000). 0,
 * or -1 (unknown shape, cannot write). */
int trace_generate(const char *shape, int sessions, int calls, double gap_ms, uint64_t seed,
                   const char *path);

/* The prompt of request r as token ids in [lo, hi) (to free); *n receives its length. */
int32_t *trace_tokens(const trace *t, const trace_request *r, int32_t lo, int32_t hi, size_t *n);

/* Prompt tokens a perfect server computes for the whole trace: each distinct prefix token
 * once, plus each request's last prompt token when it was computed before. */
int64_t trace_ideal(const trace *t, int32_t lo, int32_t hi);

#endif /* GRAFT_BENCH_TRACE_H */
