/*
 * engine.h: the engine's internal interface, shared by the files of src/engine/.
 *
 * One engine thread owns all mutable state: the KV pool, the sessions' block tables and
 * token histories, the live generations and the scheduler. Other threads reach it only
 * through the command queue (engine.c: a mutex, a condition variable to wake the engine and
 * one to answer blocking callers) and through atomics (a generation's cancel flag, done flag
 * and reference count, a session's committed position).
 *
 * Files:
 *   engine.c      create / shutdown, the thread's loop, the command queue, the test hooks
 *   session.c     open, close, clone (async and blocking), position, tokens, the probe hook
 *   session_table.c  the index of open sessions by id, through which commands find theirs
 *   generation.c  generation handles: submit, admit, deliver a token, settle, the getters
 *   scheduler.c   one step: decode first, chunked prefill under the token and KV budgets,
 *                 KV reservations, reclaim requests, the forward pass
 *   metrics.c     engine metrics
 *   accounting.c  KV accounting for caches: bytes a set of sessions holds alone; reclaim hooks
 *   json_syntax.c, json_recognizer.c, json_schema.c, json_mask.c  holding a generation
 *                 to one JSON object (json_output.h): the recognizer, the alternatives of
 *                 unions it follows at once, the schemas it follows, and the vocabulary
 *                 indexed by bytes to mask the tokens that cannot continue it
 *   grammar_parse.c, grammar_match.c, grammar_mask.c  holding a generation to a GBNF
 *                 grammar (grammar.h): the grammar compiled, its recognizer, and the
 *                 vocabulary sorted by bytes to mask the tokens that cannot continue it
 *
 * Commands name their session by id (session_table.c), looked up when they run: a command
 * never holds a pointer that a command earlier in the queue (a close) can free.
 *
 * Locking: engine->mu guards the queue fields (head, tail, stopping, closed, paused, tap_set)
 * and the `replied` flags of blocking commands. gen->mu guards a generation's metrics and its
 * done wait. The engine thread never holds engine->mu while it runs a command, a step or a
 * callback, and never holds two of these locks at once.
 */
#ifndef GRAFT_ENGINE_H
#define GRAFT_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine/grammar.h"
#include "engine/json_output.h"
#include "kv/kv.h"
#include "model/model.h"
#include "util/util.h"

typedef enum graft__cmd_kind {
    GRAFT__CMD_OPEN,     /* blocking: open u.open (a new session) */
    GRAFT__CMD_CLOSE,    /* close session_id and free it */
    GRAFT__CMD_CLONE,    /* clone session_id in [min_upto, max_upto], answer through on_done */
    GRAFT__CMD_GENERATE, /* admit u.gen on session_id */
    GRAFT__CMD_PROBE,    /* blocking test hook: next-token logits of session_id */
    GRAFT__CMD_METRICS,  /* blocking: fill u.metrics */
    GRAFT__CMD_RETAINED, /* blocking: longest clonable boundary of session_id <= upto */
    GRAFT__CMD_TOKENS,   /* blocking: copy the committed tokens of session_id */
    GRAFT__CMD_EXCLUSIVE, /* blocking: KV bytes held only by the sessions u.exclusive.ids */
    GRAFT__CMD_RECLAIM,  /* blocking: add or remove the reclaim hook u.reclaim */
    GRAFT__CMD_SAVE,     /* blocking: write session_id to the file u.file (session_file.c) */
    GRAFT__CMD_LOAD      /* blocking: fill the empty session_id from the file u.file */
} graft__cmd_kind;

/* A registered reclaim hook (accounting.c), in the engine's list. */
typedef struct graft__reclaim_hook graft__reclaim_hook;
struct graft__reclaim_hook {
    graft_reclaim_cb cb;
    void *user;
    graft__reclaim_hook *next;
};

typedef struct graft__cmd graft__cmd;
struct graft__cmd {
    graft__cmd_kind kind;
    graft__cmd *next;
    uint64_t session_id; /* the session the command is about, found when it runs */
    bool heap;    /* allocated for this command alone: the engine frees it after running it */
    bool replied; /* blocking commands: set under engine->mu once `status` is final */
    int status;
    union {
        graft_session *open;
        struct {
            int32_t min_upto, max_upto;
            graft_clone_cb on_done;
            void *user;
        } clone;
        graft_generation *gen;
        struct {
            float *logits;   /* n_vocab */
            int32_t *tokens; /* max_context: the history the logits follow */
            int32_t *n_tokens;
        } probe;
        graft_engine_metrics *metrics;
        struct {
            int32_t upto;
            int32_t *boundary;
        } retained;
        struct {
            int32_t **tokens_out; /* a copy, graft__malloc'd on the engine thread */
            size_t *n;
        } tokens;
        struct {
            const uint64_t *ids; /* (n) the sessions' ids */
            int32_t *seqs;       /* (n) scratch for their sequence ids */
            size_t n;
            int64_t *bytes;
        } exclusive;
        struct {
            const char *path;
            char **errmsg; /* set on failure (graft__errmsg) */
        } file;
        struct {
            graft__reclaim_hook *hook; /* to add (allocated by the caller) */
            graft_reclaim_cb cb;       /* to remove: the hook with this cb and user */
            void *user;
            bool add;
        } reclaim;
    } u;
};

struct graft_session {
    graft_engine *engine;  /* set at creation, never changes */
    uint64_t id;           /* unique in the engine; set by the engine thread before the handle
                              is handed out, never changes */
    int32_t seq;           /* KV sequence id (engine thread) */
    int32_t *tokens;       /* (max_context) committed history (engine thread) */
    atomic_int position;   /* committed length: written by the engine thread only */
    graft_generation *gen; /* the live generation, or NULL (engine thread) */
    graft_session *prev, *next; /* the engine's list of open sessions (engine thread) */
    graft__cmd close_cmd;  /* preallocated so that closing cannot fail */
};

/* thought_budget.c: a thought held to a number of tokens (graft_generate_config's
 * thought_budget): the output followed byte by byte, and the tokens that close the thought
 * once the budget is spent. */
typedef struct graft__thought_budget {
    int32_t budget;  /* tokens the output may have before the thought is closed; 0: none */
    char close[GRAFT_MAX_OUTPUT_AFTER], open[GRAFT_MAX_OUTPUT_AFTER];
    uint32_t close_len, open_len;
    uint32_t opening; /* before the thought: the opening text's bytes out (after white space) */
    uint32_t matched; /* in it: the closing tag's first bytes that the output ends with */
    bool inside;      /* the output is in the thought */
    bool over;        /* the thought closed, or the output has none: nothing more to do */
    int32_t *closing; /* a line break and the closing tag, tokenized (special tokens parsed) */
    int32_t n_closing, given; /* given: how many of them are out */
} graft__thought_budget;

/* budget 0: none (close and open are not read); else close is the closing tag (1 to
 * GRAFT_MAX_OUTPUT_AFTER bytes), open the text the output opens the thought with after white
 * space, or NULL when the output begins inside it. GRAFT_OK or GRAFT_ENOMEM. */
int graft__thought_budget_init(graft__thought_budget *b, const graft__vocab *v, int32_t budget,
                               const char *close, const char *open);
void graft__thought_budget_free(graft__thought_budget *b);
/* The token to give out instead of a sampled one when the output has n_out tokens of at
 * most max_new (0: no limit), or -1. */
int32_t graft__thought_budget_forced(const graft__thought_budget *b, int32_t n_out,
                                     int32_t max_new);
/* Follows one more token of the output (forced: the one graft__thought_budget_forced gave). */
void graft__thought_budget_feed(graft__thought_budget *b, const graft__vocab *v, int32_t token,
                                bool forced);

struct graft_generation {
    atomic_int refs;    /* the caller's reference and, until settled, the engine's */
    atomic_bool cancel; /* set by graft_generation_cancel from any thread */
    atomic_bool done;   /* set (release) after on_settled returned and results are final */
    pthread_mutex_t mu; /* guards `metrics`, `t` and the wait on `cv` */
    pthread_cond_t cv;
    const graft_engine *engine; /* compared only (the engine may be gone) */
    graft__cmd cmd;

    /* Set at submission, then owned by the engine thread. */
    graft_session *session;
    int32_t *prompt;
    int32_t n_prompt, n_fed;
    int32_t *stop;
    size_t n_stop;
    bool ignore_eog;
    int32_t max_new;
    graft_sampler *sampler;
    bool json;               /* held to one JSON object (GRAFT_OUTPUT_JSON_OBJECT, _SCHEMA) */
    graft__json_schema *schema;     /* GRAFT_OUTPUT_JSON_SCHEMA: the schema, compiled */
    graft__json_recognizer json_text; /* what it generated so far, when json */
    graft__json_preamble preamble;    /* the text the JSON text begins after, when json */
    graft__grammar *grammar;          /* GRAFT_OUTPUT_GRAMMAR: the grammar, compiled, ... */
    graft__grammar_run *grammar_text; /* ... and what it generated so far */
    int32_t *ends;       /* with a grammar: the tokens that end the generation (the stop
                            tokens, and the end-of-generation ones unless ignored) ... */
    float *end_logits;   /* ... and room for their logits while the mask is applied */
    int32_t n_ends;
    graft__thought_budget thought;    /* the thought's budget, when there is one */
    graft_update_cb on_update;
    graft_settled_cb on_settled;
    void *user;
    int32_t *out; /* (cap_out) tokens sampled */
    graft_token_logprob *logprobs; /* (cap_out x logprob_width) when asked for, else NULL */
    float *raw_logits;             /* (n_vocab) the logits before sampling, when asked for */
    int32_t logprob_width;         /* 1 + top_logprobs */
    graft_token_logprob *prompt_logprobs; /* ((n_prompt - 1) x logprob_width) when asked for */
    atomic_bool prompt_done; /* set (release) once every prompt token is committed and its
                                log-probabilities written */
    bool prefill_only;
    int32_t n_out, cap_out;
    bool has_pending; /* out[n_out - 1] was sampled and is not fed back yet */
    bool admitted;    /* in the engine's active list */
    bool started;     /* took its first step: its KV reservation counts (scheduler.c) */
    uint64_t kv_wait_since; /* when it began waiting for KV, 0 when not waiting */

    /* Results: status and error are written by the engine thread before `finish` is stored
     * (release), which happens before on_settled runs. */
    atomic_int finish; /* graft_finish */
    int status;
    char *error;

    /* Under mu. */
    graft_generation_metrics metrics;
    struct {
        uint64_t submit, start, first, last;
    } t;
};

/* Test hook: runs on the engine thread before each forward pass with the generations of the
 * step; a status other than GRAFT_OK makes the step fail with it as if the forward pass had
 * (the forward pass does not run). */
typedef int (*graft__step_hook)(graft_engine *e, graft_generation *const *gens, int32_t n,
                                void *user);

/* Test hook: sees each logits row a generation samples from, before sampling (engine
 * thread). */
typedef void (*graft__logits_tap)(graft_generation *gen, const float *logits, void *user);

/* One generation's share of a step. */
typedef struct graft__slot {
    graft_generation *gen;
    int32_t first, count; /* its entries in the batch */
    int32_t fed_from;     /* a prompt chunk: the prompt index of its first token; -1: a
                             sampled token fed back */
    int32_t row;          /* its first logits row (its entries from the first that asked for
                             logits have consecutive rows), or -1 */
} graft__slot;

struct graft_engine {
    const graft_model *model;
    graft_engine_options opts; /* resolved: no zero defaults left */
    graft__kv_pool *kv;
    graft__kv kv_iface;
    graft__pool *pool;
    graft__exec ex;
    graft__scratch *scratch; /* the forward pass's buffers, for max_batch_tokens entries */
    int32_t n_groups; /* KV layer groups (global, sliding-window) */
    int64_t kv_blocks_total; /* the pool's blocks, of its larger group (fixed at create) */
    uint64_t model_fingerprint; /* the weights session files are bound to (session_file.c) */
    uint64_t kv_fingerprint;    /* ... with the kernel set and KV type */
    pthread_t thread;

    pthread_mutex_t mu;
    pthread_cond_t wake;    /* the engine thread waits here for commands */
    pthread_cond_t replied; /* blocking callers wait here for their answer */
    graft__cmd *head, *tail;
    bool stopping; /* shutdown requested */
    bool closed;   /* the queue takes no more commands */
    bool paused;   /* test hook: the engine thread runs nothing until unpaused */
    graft__logits_tap tap_set; /* test hook as last set; copied to `tap` by the thread */
    void *tap_set_user;
    graft__step_hook step_hook_set; /* test hook as last set; copied likewise */
    void *step_hook_set_user;
    bool stalled; /* set by the thread: live generations all wait for KV; it sleeps until a
                     command, the next KV wait deadline or a poll (engine.c) */

    /* Engine thread only. */
    bool draining; /* answering commands for shutdown */
    graft__cmd *local_head, *local_tail; /* commands queued from callbacks (engine.c) */
    bool closed_local; /* the local queue takes no more: submissions answer GRAFT_ESHUTDOWN */
    int32_t replies_unfollowed; /* blocking commands answered since the thread last awaited
                                   their callers' next commands (engine.c) */
    graft_session *sessions;
    int32_t n_sessions;
    graft_session **by_id; /* (id_cap) open sessions by id (session_table.c) */
    size_t id_cap;
    graft__reclaim_hook *reclaim; /* hooks caches registered */
    uint64_t last_session_id;  /* the id given to the last session opened or cloned */
    graft_generation **active; /* (max_sessions) admitted generations, in arrival order */
    int32_t n_active;
    int32_t decode_cursor;     /* where the next step starts taking decodes */
    graft__batch_entry *entries; /* (max_batch_tokens) */
    graft__slot *slots;          /* (max_sessions) */
    float *logits;               /* (max_sessions, n_vocab) */
    graft__token_table *tokens;          /* every token's bytes, read by the masks below */
    graft__json_mask *json_mask;         /* for generations held to JSON */
    graft__grammar_vocab *grammar_vocab; /* for generations held to a grammar */
    graft_engine_metrics counters; /* the counting fields of the metrics */
    graft__logits_tap tap;
    void *tap_user;
    graft__step_hook step_hook;
    void *step_hook_user;
    graft_generation **step_gens; /* (max_sessions) the step hook's argument */
};

/* engine.c */
bool graft__engine_on_thread(const graft_engine *e);
/* Queues cmd (any thread); GRAFT_ESHUTDOWN once the queue is closed. */
int graft__engine_submit(graft_engine *e, graft__cmd *cmd);
/* Queues a blocking command and waits for its status. GRAFT_EINVAL on the engine thread. */
int graft__engine_call(graft_engine *e, graft__cmd *cmd);
/* Engine thread: marks a blocking command answered. */
void graft__engine_reply(graft_engine *e, graft__cmd *cmd, int status);
/* Test hook: while paused the engine thread runs no command and no step (shutdown still
 * proceeds). Commands queued meanwhile run in order once unpaused. */
void graft__engine_pause(graft_engine *e, bool paused);
/* Test hook: installs a logits tap (NULL removes it); the engine thread picks it up before
 * it next runs commands or a step. */
void graft__engine_set_tap(graft_engine *e, graft__logits_tap tap, void *user);
/* Test hook: installs a step hook (NULL removes it), picked up like the tap. */
void graft__engine_set_step_hook(graft_engine *e, graft__step_hook hook, void *user);

/* session_table.c (engine thread; init at create) */
int graft__sessions_init(graft_engine *e);
void graft__sessions_free(graft_engine *e);
void graft__sessions_put(graft_engine *e, graft_session *s);
void graft__sessions_remove(graft_engine *e, const graft_session *s);
/* The open session with this id, or NULL (closed, or never opened). */
graft_session *graft__sessions_find(const graft_engine *e, uint64_t id);

/* session_file.c: the fingerprints a session file is bound to, set at create (after the
 * kernel set is chosen); GRAFT__CMD_SAVE and GRAFT__CMD_LOAD on the engine thread. */
void graft__session_file_bind(graft_engine *e, uint32_t kv_type);
void graft__session_run_file(graft_engine *e, graft__cmd *cmd);

/* session.c (engine thread) */
void graft__session_run_open(graft_engine *e, graft__cmd *cmd);
/* Closes and frees s: its live generation settles cancelled, its KV references drop. */
void graft__session_close_now(graft_engine *e, graft_session *s);
void graft__session_run_close(graft_engine *e, graft__cmd *cmd);
void graft__session_run_clone(graft_engine *e, graft__cmd *cmd);
void graft__session_run_probe(graft_engine *e, graft__cmd *cmd);
void graft__session_run_retained(graft_engine *e, graft__cmd *cmd);
void graft__session_run_tokens(graft_engine *e, graft__cmd *cmd);
/* Commits positions [position, position + n) of tokens to the session. */
int graft__session_commit(graft_engine *e, graft_session *s, const graft__batch_entry *entries,
                          int32_t n);
/* Test hook (any thread but the engine's): the session's next-token logits (n_vocab floats,
 * computed by forwarding its last committed token on a throwaway clone) and the committed
 * history they follow (tokens: max_context entries; *n_tokens set, 0 on failure).
 * GRAFT_EINVAL for an empty session; on a sliding-window model GRAFT_ERETENTION when the
 * session already dropped the window of position - 1 (position - window a multiple of
 * GRAFT_KV_BLOCK_TOKENS). */
int graft__session_probe(graft_session *s, float *logits, int32_t *tokens, int32_t *n_tokens);

/* generation.c (engine thread) */
void graft__gen_admit(graft_engine *e, graft_generation *gen);
/* Samples the generation's next token from its logits row, reports it, and settles the
 * generation when it ends. */
void graft__gen_deliver(graft_engine *e, graft_generation *gen, float *logits);
/* After a prompt chunk of `count` tokens from prompt index `from` was committed: keeps the
 * prompt log-probabilities its logits rows give (`rows`: one a token with prompt_logprobs,
 * else the last token's alone when the chunk ends the prompt and a token is to be sampled;
 * NULL when it has none), and when the chunk ends the prompt samples the first token, or
 * settles a prefill_only generation. */
void graft__gen_prompt_fed(graft_engine *e, graft_generation *gen, int32_t from, int32_t count,
                           float *rows);
/* Ends the generation: records the outcome, runs on_settled, marks it done, drops the
 * engine's reference. message may be NULL. */
void graft__gen_settle(graft_engine *e, graft_generation *gen, graft_finish finish, int status,
                       const char *message);
/* Records that the generation took part in a step whose forward pass began at `now` and
 * had `prompt_tokens` of its prompt computed in it. */
void graft__gen_note_step(graft_generation *gen, uint64_t now, int32_t prompt_tokens);

/* logprobs.c. entries[0]: `token`'s log-probability under the softmax of `logits`;
 * entries[1 .. top]: the `top` most likely tokens', descending (equal logits: lower id
 * first). top <= n_vocab. */
void graft__logprobs_fill(const float *logits, int32_t n_vocab, int32_t token, int32_t top,
                          graft_token_logprob *entries);

/* scheduler.c (engine thread) */
/* Runs one step if any generation has work: settles cancelled generations, plans a batch,
 * runs the forward pass and hands out the results. */
void graft__sched_step(graft_engine *e);

/* metrics.c (engine thread) */
void graft__metrics_fill(graft_engine *e, graft_engine_metrics *m);
void graft__metrics_count_clone(graft_engine *e, int status);

/* accounting.c (engine thread) */
void graft__accounting_run_exclusive(graft_engine *e, graft__cmd *cmd);
void graft__accounting_run_reclaim(graft_engine *e, graft__cmd *cmd);
/* Asks every reclaim hook to give back `bytes_short` of KV (they queue closes). */
void graft__accounting_reclaim(graft_engine *e, int64_t bytes_short);
/* Frees the hooks left at shutdown. */
void graft__accounting_free_hooks(graft_engine *e);

#endif /* GRAFT_ENGINE_H */
