/*
 * run.h: the pieces of `graft run` (cmd_run.c) that live in their own files.
 *
 *   run_prompts.c  the prompts in order (-p values, then --prompt-file lines read as they
 *                  are needed) and the tokens each gives the engine; with --chat, the
 *                  conversation so far (prompts and replies) followed by the new text
 *   run_stream.c   sampled tokens on their way from the engine thread to stdout
 *   run_cache.c    --prompt-cache: where a prompt runs (a clone of the longest cached
 *                  prefix, else a new session), the capture of its prompt, and what the
 *                  cache keeps afterwards
 *
 * Like the rest of src/cli/, written against include/graft.h only. Every function that
 * fails prints one "graft run: ..." line and returns GRAFT_CLI_FAILED.
 */
#ifndef GRAFT_CLI_RUN_H
#define GRAFT_CLI_RUN_H

#include <pthread.h>

#include "cli.h"

/* ---- run_prompts.c --------------------------------------------------------------------- */

typedef struct graft__run_prompts {
    const graft_model *model;
    int32_t bos;
    const char *const *texts; /* the -p values (borrowed from argv) */
    int n_texts, next_text;
    FILE *file;               /* --prompt-file, or NULL */
    const char *file_name;
    char *line;               /* (line_cap) getline's buffer */
    size_t line_cap;
    bool chat;
    bool bos_alone;           /* no prompt given: one prompt of BOS alone */
    int index;                /* prompts given out so far */
    int32_t *tokens;          /* (cap) the tokens of the current prompt, with --chat the
                                 conversation up to and including it */
    size_t n, cap;
} graft__run_prompts;

/* Prompts from `texts` (n_texts -p values), then from the lines of `file_name` ("-":
 * stdin; NULL: none). Without either, one prompt of BOS alone. */
int graft__run_prompts_open(graft__run_prompts *p, const graft_model *model,
                            const char *const *texts, int n_texts, const char *file_name,
                            bool chat);
void graft__run_prompts_close(graft__run_prompts *p);

/* The next prompt: *more tells whether there is one; if so *text receives its text (NULL
 * for BOS alone; borrowed until the next call) and p->tokens[0, p->n) what the engine is
 * given. GRAFT_CLI_FAILED after printing why. */
int graft__run_prompts_next(graft__run_prompts *p, const char **text, bool *more);

/* With --chat, appends the reply's tokens to the conversation (nothing otherwise). */
int graft__run_prompts_reply(graft__run_prompts *p, const int32_t *tokens, size_t n);

/* The positions the -p prompts need with n_predict tokens after each (*positions: the
 * longest prompt plus n_predict, or with --chat the whole conversation) and the longest
 * prompt alone (*longest); BOS alone without any. Tokenizes them, so a prompt that cannot
 * be is reported before anything runs. */
int graft__run_prompts_measure(const graft_model *model, const char *const *texts,
                               int n_texts, bool chat, int32_t n_predict, int64_t *positions,
                               int64_t *longest);

/* ---- run_stream.c ---------------------------------------------------------------------- */

/* Tokens on their way from the engine thread (the callbacks below) to this one. */
typedef struct graft__run_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *tokens; /* (cap) in sampling order; tokens beyond cap are not kept */
    size_t n, cap;
    bool settled;    /* on_settled ran: no more tokens come */
    bool ready;      /* mu and cv are initialised */
} graft__run_stream;

/* Empties the stream for a generation of at most cap tokens. */
int graft__run_stream_reset(graft__run_stream *st, size_t cap);
void graft__run_stream_free(graft__run_stream *st);

/* The generation's callbacks (engine thread), with the stream as `user`. */
void graft__run_stream_update(graft_generation *gen, const int32_t *tokens, size_t n,
                              void *user);
void graft__run_stream_settled(graft_generation *gen, void *user);

/* Writes text to stdout and flushes it. */
void graft__run_put_text(const char *text, size_t len);

/* Prints the streamed tokens as they come through a fresh `detok`, the first `limit` of
 * them, until settled, then a newline. */
void graft__run_stream_print(graft__run_stream *st, graft_detok *detok, size_t limit);

/* ---- run_cache.c ----------------------------------------------------------------------- */

/* Where one prompt runs. */
typedef struct graft__run_turn {
    graft_session *session;
    graft_prompt_capture *capture; /* NULL without a cache */
    int32_t reused;                /* tokens of the prompt the session already holds */
} graft__run_turn;

/* A session for tokens[0, n): with a cache, a clone of its longest cached prefix (else a
 * new session) and a capture of the prompt that replaces *on_update, *on_settled and *user
 * with its wrappers; without one (cache NULL), a new session. */
int graft__run_turn_begin(graft_engine *engine, graft_prefix_cache *cache,
                          const int32_t *tokens, size_t n, graft_update_cb *on_update,
                          graft_settled_cb *on_settled, void **user, graft__run_turn *turn);

/* After the generation settled: the captured prompt goes into the cache; then the session
 * is closed or, when `history` is not NULL (--chat: the conversation, n_history tokens of
 * prompt and reply, of which the session holds the first graft_session_position), kept in
 * the cache too. */
void graft__run_turn_end(graft_prefix_cache *cache, graft__run_turn *turn,
                         const int32_t *history, size_t n_history);

/* "prompt cache: ..." on stderr: lookups, hits, tokens reused, snapshots and bytes held. */
void graft__run_cache_summary(graft_prefix_cache *cache);

#endif /* GRAFT_CLI_RUN_H */
