/*
 * server.h: the server layer's internal interface (`graft serve`), shared by the files of
 * src/server/.
 *
 * The server is written against the public API (include/graft.h) only, as a user's program
 * would be: HTTP threads parse and validate requests, tokenize, look up the prefix cache,
 * queue generations and format responses; the engine thread owns all compute. An engine
 * callback only appends to its request's channel (channel.c) under a mutex held for a copy;
 * the HTTP thread of that request is the only one that waits on it.
 *
 * Files:
 *   http.c        the daemon (libmicrohttpd, a thread per connection), routing, limits,
 *                 the API key, JSON errors, the request log line, shutdown
 *   request.c     a JSON body to a validated completion request (errors name the JSON path)
 *   completion.c  one completion: prompt, reuse, generation, stop strings, the response
 *                 (whole or streamed as server-sent events)
 *   response.c    the JSON shapes of a completion's answer (completion.h)
 *   batch.c       several prompts in one completions request, one completion each
 *   tool_calls.c  tool calls parsed from generated text
 *   chat.c        chat messages to prompt text through the model's chat template
 *   functions.c   OpenAI's legacy function calling, run as the tools form
 *   responses.c   the Responses API: a request as a chat completion, the answer as a
 *                 response object or its typed events
 *   response_store.c  stored responses, continued with previous_response_id
 *   sessions.c    named sessions: a conversation's KV kept between its requests
 *   donors.c      active reuse: a request takes a running request's computed prompt
 *   channel.c     tokens from the engine thread to the request's HTTP thread
 *   deadlines.c   how long a connection may take to send its request
 *   metrics.c     counters and the Prometheus text of /metrics
 *   cors.c        which web pages may call the API from a browser (--allow-origin)
 *
 * Locking: each channel has its mutex; metrics are atomics; the server's admission count
 * (http.c) has its own mutex. No lock is held while calling the engine.
 */
#ifndef GRAFT_SERVER_H
#define GRAFT_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "graft.h"

/* ---- small helpers ---------------------------------------------------------------------------- */

/* The monotonic clock in nanoseconds. */
static inline uint64_t graft__server_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CLOCK_REALTIME moment ms milliseconds from now, for pthread_cond_timedwait. */
static inline struct timespec graft__server_realtime_in_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

/* Tokens a and b have in common at their start. */
static inline size_t graft__common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* detokenize.c: tokens[0, n) as text (*text, *len; free *text), without SentencePiece's
 * leading space; starts (n entries, or NULL) receives where each token's text begins.
 * GRAFT_ENOMEM. */
int graft__detokenize(const graft_model *model, const int32_t *tokens, size_t n, char **text,
                      size_t *len, size_t *starts);
/* The bytes token stands for on its own as a JSON array of integers, not made valid UTF-8: a
 * piece of a character keeps its bytes, so that a client can join a character split across
 * tokens (logprobs' bytes, /tokenize's pieces). */
json_t *graft__token_bytes_json(const graft_model *model, int32_t token);
/* llama-server's piece of a token: its text where its bytes are valid UTF-8, else those
 * bytes as graft__token_bytes_json gives them. */
json_t *graft__token_piece_json(const graft_model *model, int32_t token);

/* ---- configuration (the `graft serve` options) ------------------------------------------- */

typedef struct graft__server_config {
    const char *host;       /* address to bind: "127.0.0.1" unless told otherwise */
    int port;               /* 0: any free port (the one taken is printed) */
    const char *alias;      /* the model id in responses */
    const char *api_key;    /* NULL: no key asked */
    size_t max_body;        /* request body bytes */
    int32_t max_queue;      /* requests waiting for a slot beyond the running ones */
    int32_t slots;          /* requests generating at once */
    int32_t max_connections;
    int32_t timeout_s;      /* idle connection timeout */
    int32_t request_timeout_s; /* a new connection's first request must arrive within it */
    int32_t named_sessions; /* named sessions kept at most */
    int32_t session_ttl_s;  /* an idle named session expires after this */
    int32_t stored_responses; /* responses kept for previous_response_id (0: none) */
    size_t stored_responses_mem; /* ... and the bytes of their JSON text at most */
    int32_t grace_ms;       /* shutdown: how long running requests may finish */
    int32_t reuse_min_tokens; /* active reuse: tokens a donor must save beyond the cache */
    int32_t reuse_wait_ms;    /* active reuse: how long to wait for a prefilling donor */
    const char *allow_origins; /* CORS: origins allowed, comma-separated, "*" for any;
                                * NULL: none (cors.c) */
} graft__server_config;

typedef struct graft__server graft__server;

/* The chat template a server renders messages with, the special tokens' text, and how a
 * thinking model's thoughts are answered. */
typedef struct graft__chat {
    graft_template *tmpl;
    char *text; /* the template's source */
    const char *bos_text, *eos_text;
    const struct graft__reasoning_tags *thought_tags; /* the template's (reasoning.c), or
                                                         NULL: its model writes none */
    bool split_thoughts; /* --reasoning-format: thoughts given as reasoning_content, unless
                            a request's reasoning_format says otherwise */
} graft__chat;

/* chat.c. The request body's messages (and chat_template_kwargs) rendered with chat's
 * template into *text; with continue_final_message, the last message's content (which
 * follows the text) into *prefill, else NULL. GRAFT_EINVAL with *param (the JSON path) and
 * *message for a malformed message or a template that raised. */
int graft__chat_render(const graft__chat *chat, const json_t *body, char **text,
                       char **prefill, char **param, char **message);
/* Whether rendered text starts with the BOS text (then tokenizing adds no BOS again). */
bool graft__chat_starts_with_bos(const graft__chat *chat, const char *text);

/* functions.c. When a chat body (chat true) uses OpenAI's legacy function calling
 * (functions, function_call, an assistant message's function_call, "function" messages),
 * *out is a copy of it in the tools form, else NULL; *legacy_answer: functions was given,
 * so the answer takes the legacy shape. Not chat: functions and function_call are refused.
 * GRAFT_EINVAL with *param (the JSON path) and *message. */
int graft__functions_as_tools(const json_t *body, bool chat, json_t **out, bool *legacy_answer,
                              char **param, char **message);
/* A refusal's path in the tools form (tools[N].function.X, tool_choice...) rewritten as the
 * legacy field the client gave (functions[N].X, function_call...), in *param and where the
 * message quotes it. */
void graft__functions_legacy_path(char **param, char **message);

/* Starts listening; until graft__server_set_ready, /health answers 503 and every other route
 * 503 too. *port_out receives the port bound. */
int graft__server_start(const graft__server_config *config, graft__server **out, int *port_out,
                        char **errmsg);
/* Serves from now on with this model, engine, prefix cache and chat template (the
 * caller's, freed after graft__server_stop). */
void graft__server_set_ready(graft__server *server, graft_model *model, graft_engine *engine,
                             graft_prefix_cache *cache, const graft__chat *chat);
/* Stops accepting, lets running requests finish within the grace period, cancels the rest,
 * and frees the server. */
void graft__server_stop(graft__server *server);

/* ---- cors.c ---------------------------------------------------------------------------------- */

struct MHD_Response;

/* Whether origin (a request's Origin header, NULL when it has none) is one of allowed
 * (--allow-origin's list, NULL for none). */
bool graft__cors_allowed(const char *allowed, const char *origin);
/* Whether list is a valid --allow-origin: comma-separated entries, each "*" or
 * http(s)://host[:port]. */
bool graft__cors_valid_list(const char *list);
/* Adds Access-Control-Allow-Origin (and Vary) to a response when origin is allowed. */
void graft__cors_add_headers(struct MHD_Response *r, const char *allowed, const char *origin);
/* The same for the answer to a preflight, with the method the route takes and the headers
 * the browser asked to send (Access-Control-Request-Headers, NULL when none). */
void graft__cors_add_preflight(struct MHD_Response *r, const char *allowed, const char *origin,
                               const char *method, const char *request_headers);

/* ---- deadlines.c ---------------------------------------------------------------------------- */

/* The watcher of connections too slow to send a request, and one connection's watch. */
typedef struct graft__deadlines graft__deadlines;
typedef struct graft__conn_watch graft__conn_watch;

/* Starts the watcher: a connection not busy with a request is cut first_s after it started
 * without having sent a whole request, or idle_s after its last response ended; each cut
 * counted in *cut_total (NULL: not counted). */
int graft__deadlines_start(int32_t first_s, int32_t idle_s, atomic_ullong *cut_total,
                           graft__deadlines **out);
/* Stops the watcher and frees what is left (after the daemon stopped). */
void graft__deadlines_stop(graft__deadlines *d);
/* A connection started on socket fd; NULL when out of memory (it is then not watched). */
graft__conn_watch *graft__deadlines_add(graft__deadlines *d, int fd);
/* The connection closes: its watch is freed (NULL is fine). Before its socket closes. */
void graft__deadlines_remove(graft__deadlines *d, graft__conn_watch *w);
/* A whole request arrived (busy), or its response ended (not busy: the idle clock starts). */
void graft__deadlines_busy(graft__deadlines *d, graft__conn_watch *w, bool busy);

/* ---- channel.c ------------------------------------------------------------------------------ */

enum { GRAFT__MAX_CHOICES = 16 }; /* n, at most */

typedef struct graft__channel_entry {
    int32_t choice;
    int32_t token;
} graft__channel_entry;

/* The tokens of a request's generations (one per choice) on their way from the engine
 * thread to the request's HTTP thread. */
typedef struct graft__channel {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    graft__channel_entry *entries;  /* (cap) received, not yet taken */
    graft_token_logprob *logprobs;  /* (cap x logprob_width) theirs, when asked for */
    int32_t logprob_width;          /* 0: none */
    size_t n, cap;
    uint32_t settled;  /* choices whose generation settled (a bit each) */
    uint32_t reported; /* of them, those take reported (all their tokens taken) */
    bool poked;
    struct graft__channel *forward; /* poked too at each update, settle and poke, or NULL
                                       (a batch's waker: batch.c); set under mu */
} graft__channel;

/* One choice's generation's way into the channel: the `user` of the callbacks below. */
typedef struct graft__server_metrics graft__server_metrics;

typedef struct graft__channel_port {
    graft__channel *channel;
    int32_t choice;
    size_t delivered;      /* tokens reported so far (engine thread) */
    uint64_t last_ns;      /* when the last one was (engine thread) */
    graft__server_metrics *metrics; /* where the gaps between tokens are counted */
} graft__channel_port;

int graft__channel_init(graft__channel *ch, size_t cap, int32_t logprob_width);
void graft__channel_free(graft__channel *ch);
/* Engine callbacks, user a graft__channel_port (never block beyond the mutex). */
void graft__channel_on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user);
void graft__channel_on_settled(graft_generation *gen, void *user);
/* Wakes the reader (any thread). */
void graft__channel_poke(graft__channel *ch);
/* Waits up to timeout_ms for a poke (one since the last wait counts), for a channel used only
 * to wake a thread that reads several (a batch's). */
void graft__channel_wait_poke(graft__channel *ch, int timeout_ms);
/* HTTP thread: waits up to timeout_ms for tokens, a settled choice or a poke; moves what
 * came into out (room for cap entries) and logprobs (cap x logprob_width) and returns how
 * many; *settled receives the choices that are over (settled, every token taken). */
size_t graft__channel_take(graft__channel *ch, graft__channel_entry *out,
                           graft_token_logprob *logprobs, size_t cap, int timeout_ms,
                           uint32_t *settled);

/* ---- request.c ------------------------------------------------------------------------------ */

enum { GRAFT__MAX_STOP = 8 };

/* llama-server's logit_bias entry by text: every token of the text gets the bias. */
typedef struct graft__bias_text {
    char *text;
    float bias;
} graft__bias_text;

typedef struct graft__completion_request {
    bool chat;              /* /v1/chat/completions */
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    bool ignore_eos;
    char *prompt_text;      /* the prompt as text (NULL when given as token ids) */
    int32_t *prompt_tokens; /* or as token ids */
    size_t n_prompt_tokens;
    json_t *infill;         /* or filled in the middle, then neither: {prefix, suffix} for a
                               suffix, and for /infill also {prompt, files: [{filename, text}]}
                               (infill.c) */
    int32_t max_tokens;     /* 0: until the context is full, or nothing with prompt_only */
    const char *max_tokens_key; /* the field it was given in (static), or NULL */
    bool echo;              /* completions: the prompt's text (and log-probabilities) first */
    bool prompt_only;       /* echo with max_tokens 0: the prompt is computed, nothing sampled */
    graft_sampling sampling;
    graft_logit_bias *logit_bias; /* (n_logit_bias) token ids checked against the vocabulary
                                     when the prompt is tokenized, and then ... */
    size_t n_logit_bias;
    graft__bias_text *logit_bias_texts; /* ... these texts' tokens (llama-server's form) */
    size_t n_logit_bias_texts;
    char *stop[GRAFT__MAX_STOP];
    size_t n_stop;
    bool dry_breakers_given;  /* dry_sequence_breakers was sent (else llama.cpp's) ... */
    char *dry_breakers[GRAFT_DRY_MAX_BREAKERS]; /* ... as these (n_dry_breakers) */
    size_t n_dry_breakers;
    char *session_id;       /* a named session's id (body or header), or NULL */
    int32_t n_choices;      /* n: 1 .. GRAFT__MAX_CHOICES */
    int32_t best_of;        /* completions: the answers generated (n .. GRAFT__MAX_CHOICES),
                               of which the n with the highest mean log-probability per token
                               are given; n elsewhere */
    bool logprobs;          /* report each token's log-probability ... */
    int32_t top_logprobs;   /* ... and the most likely tokens' */
    bool tools;             /* chat with tools (tool_choice not "none"): tool calls parsed */
    bool legacy_functions;  /* given as functions: the call is answered as function_call */
    bool return_tokens;     /* each choice also gives its token ids (llama-server's field) */
    int32_t n_indent;       /* completions (llama-server's field): after the answer's first
                               line, a line indented by fewer spaces and tabs ends it, before
                               the line's first other character; 0: off */
    int32_t t_max_predict_ms; /* completions (llama-server's): a token with a line break ends
                                 the answer once this long has passed since its first token;
                                 0: off */
    bool one_call;          /* parallel_tool_calls false: a choice ends after its first call */
    bool forced_call;       /* tool_choice required or a named function: the answer is one
                               call (output_format and json_schema hold it to the call) */
    graft_output_format output_format; /* response_format, json_schema or a forced call */
    char *json_schema;      /* the schema of GRAFT_OUTPUT_JSON_SCHEMA, compact JSON */
    char *grammar;          /* the GBNF grammar of GRAFT_OUTPUT_GRAMMAR, grammar_len bytes */
    size_t grammar_len;
    const struct graft__reasoning_tags *thought_tags; /* chat: the tags its answer's thought
                                                         is split off by, or NULL: not split */
    bool thought_opened;    /* the prompt opened a thought: the answer begins inside it */
    const char *output_after; /* the text output_format begins after (a thought's closing
                                 tag), or NULL: at the first token */
    const char *output_opens; /* the text that opens that thought when the answer has one
                                 (the model opens it), or NULL: the prompt opened it */
    int32_t thought_budget;   /* thinking_token_budget: tokens the answer's thought may take
                                 before it is closed (0: no budget) ... */
    const char *thought_close, *thought_opens; /* ... its closing tag, and its opening text
                                 when the model opens it (NULL: the prompt opened it) */
} graft__completion_request;

/* What a request's prompt is made of. */
typedef enum graft__prompt_kind {
    GRAFT__PROMPT_TEXT,  /* prompt: text or token ids (with suffix: filled in the middle) */
    GRAFT__PROMPT_CHAT,  /* messages, through the chat template */
    GRAFT__PROMPT_INFILL /* llama-server's /infill: input_prefix, input_suffix, input_extra and
                            prompt */
} graft__prompt_kind;

/* Fills r from the body of a completion, chat completion or infill request. On a bad
 * field returns GRAFT_EINVAL with *param the field's JSON path ("temperature",
 * "messages[2].content") and *message a sentence (both to free); r is then freed. Chat
 * requests render their messages with chat_template (NULL: GRAFT_EUNSUPPORTED), which also
 * says how a thought in the answer is split off. */
int graft__request_parse(const json_t *body, graft__prompt_kind kind,
                         const graft__chat *chat_template, graft__completion_request *r,
                         char **param, char **message);
/* A refusal of a request's field: *param its JSON path, *message the sentence (new strings,
 * NULL when out of memory); GRAFT_EINVAL. */
int graft__refuse(char **param, char **message, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void graft__request_free(graft__completion_request *r);
/* Sets in `to` the fields of `from` named by names[0, n) that are there and not null. */
void graft__copy_fields(json_t *to, const json_t *from, const char *const *names, size_t n);
/* The same for every sampling field a completion request reads (the penalties, llama.cpp's
 * samplers and logit_bias included): what the Messages and Responses APIs pass on to the
 * chat completion they make. */
void graft__copy_sampling_fields(json_t *to, const json_t *from);
/* Whether t is a token id as a request may give one (an integer in [0, INT32_MAX]), into *id;
 * the vocabulary is checked later. */
bool graft__json_token_id(const json_t *t, int32_t *id);

/* What a forced tool call's prompt ends with, and its answer with when the call is whole. */
#define GRAFT__FORCED_CALL_OPEN "<tool_call>\n"
#define GRAFT__FORCED_CALL_CLOSE "\n</tool_call>"

/* ---- infill.c ------------------------------------------------------------------------------- */

/* The fill-in-the-middle fields of a body into r->infill: `suffix` beside a text prompt
 * (kind TEXT; none: r unchanged), or /infill's fields (kind INFILL). Refusals as
 * graft__request_parse. */
int graft__infill_parse(const json_t *body, graft__prompt_kind kind,
                        graft__completion_request *r, char **param, char **message);

/* The prompt's tokens (*tokens, to free()), info being the model's graft_model_info (its FIM
 * tokens and BOS): [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>
 * for a suffix; for /infill as llama-server lays it out, the other files first, and within
 * `budget` tokens where it can be met: the other files' start goes first, then the prefix's
 * start and the suffix's end (the suffix keeps at least a quarter of what is left when both
 * are long); the prompt is never cut. *cut: whether anything was. GRAFT_EUNSUPPORTED: the
 * model has no fill-in-the-middle tokens; GRAFT_ENOMEM. */
int graft__infill_tokens(const graft_model *model, const graft_model_info *info,
                         const json_t *infill, int64_t budget, int32_t **tokens,
                         size_t *n_tokens, bool *cut);

/* ---- reasoning.c ---------------------------------------------------------------------------- */

/* Where the longest tail of text[0, len) that begins tag (and is shorter) starts, or len:
 * text there may still grow into tag (a stop string, a tool call's or a thought's tag). */
size_t graft__tail_start(const char *text, size_t len, const char *tag);

/* The tags a thinking model writes its thought between. */
typedef struct graft__reasoning_tags {
    const char *open, *close;
} graft__reasoning_tags;

/* The tags of the thinking model whose chat template is template_text (the first known
 * pair whose closing tag it mentions), or NULL: its model does not write thoughts. */
const graft__reasoning_tags *graft__reasoning_tags_of(const char *template_text);
/* Whether a rendered prompt ends inside a thought (with the opening tag, and white space):
 * then the answer begins with the thought. */
bool graft__reasoning_opened(const graft__reasoning_tags *tags, const char *prompt);
/* Whether a rendered prompt ends with a closed thought (the closing tag, and white space):
 * thinking off, as templates write it. */
bool graft__reasoning_closed(const graft__reasoning_tags *tags, const char *prompt);
/* Closes the thought such a prompt opened, empty ("<think>\n\n</think>\n\n", as Qwen3's
 * template does with thinking off): for an answer held to a format from its first token.
 * GRAFT_ENOMEM leaves *prompt as it was. */
int graft__reasoning_close(const graft__reasoning_tags *tags, char **prompt);

enum {
    GRAFT__THOUGHT_NONE,      /* no thought: all the text is content (a zeroed split) */
    GRAFT__THOUGHT_UNDECIDED, /* only white space and a part of the opening tag so far */
    GRAFT__THOUGHT_OPEN,
    GRAFT__THOUGHT_CLOSED
};

/* Where a choice's thought and its content lie in its text, followed as the text grows. */
typedef struct graft__reasoning {
    const graft__reasoning_tags *tags; /* NULL: not split */
    int state;      /* GRAFT__THOUGHT_* */
    size_t begin;   /* the thought's first byte, after the opening tag */
    size_t end;     /* closed: the closing tag's first byte; open: where to look for it on */
    size_t content; /* closed: the content's first byte (white space after the tag skipped) */
} graft__reasoning;

/* A choice's split: by tags (NULL: none), the thought open from the start when the prompt
 * opened it. */
void graft__reasoning_start(graft__reasoning *t, const graft__reasoning_tags *tags,
                            bool opened);
/* Follows text[0, len) (final: it will not grow, or was cut); returns how much of it may be
 * given out now: not a tail that could still grow into a tag, nor white space before a
 * possible opening tag. */
size_t graft__reasoning_scan(graft__reasoning *t, const char *text, size_t len, bool final);
/* The content's first byte in text[0, len): len while the thought is undecided or open. */
size_t graft__reasoning_content_start(const graft__reasoning *t, size_t len);
/* The thought's bytes within text[0, upto), white space stripped at both ends: [*from, *to)
 * (empty when *from == *to). */
void graft__reasoning_span(const graft__reasoning *t, const char *text, size_t upto,
                           size_t *from, size_t *to);

/* ---- tool_calls.c --------------------------------------------------------------------------- */

/* Where the tool calls of generated text begin: the offset of the first "<tool_call>" (the
 * Hermes and Qwen form), or, when the text ends with what could still grow into one, the
 * offset of that tail; len when neither. Text before it is the message's content. */
size_t graft__tool_calls_start(const char *text, size_t len);
/* Parses the complete blocks <tool_call>{"name": ..., "arguments": {...}}</tool_call> from
 * text[*from, len), appending each to calls as OpenAI's {id, type, function: {name,
 * arguments (a JSON string)}} with id `id_prefix`_k; *from moves past the last complete
 * block. A block that is not such an object ends the parse: *bad is set and *from stays at
 * it. */
void graft__tool_calls_parse(const char *text, size_t len, size_t *from, const char *id_prefix,
                             json_t *calls, bool *bad);

/* ---- sessions.c ----------------------------------------------------------------------------- */

typedef struct graft__named graft__named;
typedef struct graft__session_store {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* requests waiting their turn on an entry */
    graft__named *head;
    int32_t count, max;
    uint64_t ttl_ns;
    uint64_t reclaim_seen_ns; /* the reclaim hook's last call */
    uint64_t reclaimed;       /* entries closed to give KV back */
} graft__session_store;

int graft__sessions_store_init(graft__session_store *st, int32_t max, int32_t ttl_s);
/* Closes every entry's session. No request may be using the store. */
void graft__sessions_store_free(graft__session_store *st);
/* Takes the entry `id` (made when new; owner: the API key, or NULL), after the requests that
 * arrived on it before: *session is its conversation's session, now the caller's, or NULL for
 * a new entry. GRAFT_EINVAL: the entry belongs to another key; GRAFT_ECAPACITY: the store is
 * full of busy entries; GRAFT_ENOMEM. */
int graft__sessions_acquire(graft__session_store *st, const char *id, const char *owner,
                            graft__named **entry, graft_session **session);
/* Gives the entry back with `session` (NULL: none) as its conversation's state. */
void graft__sessions_release(graft__session_store *st, graft__named *entry,
                             graft_session *session);
/* Closes the entry (once its running requests end). GRAFT_ENOTFOUND when there is none for
 * this owner. */
int graft__sessions_delete(graft__session_store *st, const char *id, const char *owner);
/* graft_reclaim_cb, user the store: closes least recently used idle entries when a
 * generation still waits for KV a step after the first call. */
void graft__sessions_reclaim(graft_engine *engine, int64_t bytes_short, void *user);
/* The owner's entries: [{id, tokens, busy, idle_s}]. */
json_t *graft__sessions_list(graft__session_store *st, const char *owner);

/* ---- response_store.c -------------------------------------------------------------------------- */

typedef struct graft__stored graft__stored;

/* The responses kept (least recently used first to go), under mu. */
typedef struct graft__response_store {
    pthread_mutex_t mu;
    graft__stored *newest, *oldest;
    int32_t count, max;
    size_t bytes, max_bytes; /* their JSON text's, each entry's whole conversation counted */
} graft__response_store;

int graft__response_store_init(graft__response_store *st, int32_t max, size_t max_bytes);
void graft__response_store_free(graft__response_store *st);
/* Keeps response `id` (owner: the API key, or NULL) with its conversation's items (those
 * of the responses it continued, then its input and output items) and its response object,
 * both referenced, not consumed. Beyond max entries or max_bytes, the least recently used
 * are forgotten; max 0 keeps nothing. GRAFT_ERANGE (nothing kept) when the entry alone is
 * over max_bytes; GRAFT_ENOMEM. */
int graft__response_store_put(graft__response_store *st, const char *id, const char *owner,
                              json_t *items, json_t *response);
/* The owner's response `id`'s conversation items (a reference), or NULL. */
json_t *graft__response_store_items(graft__response_store *st, const char *id,
                                    const char *owner);
/* The owner's response object `id` (a reference), or NULL. */
json_t *graft__response_store_get(graft__response_store *st, const char *id, const char *owner);
/* Forgets it. GRAFT_ENOTFOUND when the owner has none of that id. */
int graft__response_store_delete(graft__response_store *st, const char *id, const char *owner);

/* ---- donors.c -------------------------------------------------------------------------------- */

enum { GRAFT__DONOR_RETENTION, GRAFT__DONOR_BOUNDARY, GRAFT__DONOR_CLOSED, GRAFT__DONOR_CAPACITY,
       GRAFT__DONOR_OTHER, GRAFT__DONOR_REASONS };

typedef struct graft__donor graft__donor;

/* The running requests whose prompts others may take (active reuse), and its counters. */
typedef struct graft__donors {
    pthread_mutex_t mu;
    graft__donor *head;
    uint64_t next_id;
    int32_t min_tokens; /* a donor must save this many more tokens than the cache; 0: off */
    uint64_t wait_ns;   /* how long a request may wait for a prefilling donor; 0: never */
    atomic_ullong attempts, successes, tokens_saved;
    atomic_ullong refusals[GRAFT__DONOR_REASONS];
    atomic_ullong waits, waits_released, waits_timed_out, wait_ns_total;
} graft__donors;

typedef struct graft__donor_result {
    bool from_donor; /* the session is a clone of a donor's */
    bool waited;     /* after waiting for it */
    uint64_t wait_ns;
} graft__donor_result;

int graft__donors_init(graft__donors *d, int32_t min_tokens, int32_t wait_ms);
/* No request may be registered. */
void graft__donors_free(graft__donors *d);
/* A request with prompt[0, n) (kept by the caller until it leaves) and *session holding
 * *reused of it (the prefix cache's clone, or a new session): with `take`, takes a running
 * request's prompt when it offers at least min_tokens more, waiting for a prefilling one
 * when that pays (then *session, closed, is replaced by the clone and *reused is its
 * position); then registers the request as a donor with its session. *self is its
 * registration, for graft__donors_leave. Blocking (a clone, a bounded wait); HTTP threads.
 * GRAFT_ENOMEM (nothing changed). */
int graft__donors_join(graft__donors *d, const int32_t *prompt, size_t n, bool take,
                       graft_session **session, int32_t *reused, graft__donor **self,
                       graft__donor_result *result);
/* Leaves the registry (before the request closes its session) and frees self; NULL is
 * fine. */
void graft__donors_leave(graft__donors *d, graft__donor *self);

/* ---- metrics.c ------------------------------------------------------------------------------ */

/* Where a request's reused prompt KV came from (besides cold). */
enum { GRAFT__FROM_CACHE, GRAFT__FROM_SESSION, GRAFT__FROM_DONOR, GRAFT__FROM_DONOR_WAIT,
       GRAFT__SOURCES };

/* A latency histogram with fixed bucket bounds (metrics.c), cumulative as Prometheus'. */
typedef struct graft__histogram {
    atomic_ullong bucket[12];
    atomic_ullong count, sum_us;
} graft__histogram;

/* The endpoints /metrics counts requests of (graft_requests_total's endpoint label). */
typedef enum graft__endpoint {
    GRAFT__EP_COMPLETIONS, /* /v1/completions, /completion */
    GRAFT__EP_CHAT,
    GRAFT__EP_RESPONSES,
    GRAFT__EP_MESSAGES,    /* /v1/messages and its count_tokens */
    GRAFT__EP_INFILL,
    GRAFT__EP_OTHER,       /* every other route */
    GRAFT__EP_UNKNOWN,     /* no route */
    GRAFT__EP_COUNT
} graft__endpoint;

/* Status classes of graft_requests_total: 2xx .. 5xx as 0..3, 4: 429, 5: 401. */
enum { GRAFT__STATUS_CLASSES = 6 };

struct graft__server_metrics {
    atomic_ullong requests[GRAFT__EP_COUNT][GRAFT__STATUS_CLASSES];
    atomic_ullong prompt_tokens_reused, prompt_tokens_computed, generated_tokens;
    atomic_ullong reasoning_tokens; /* generated tokens of thoughts split off */
    atomic_ullong reused_from[GRAFT__SOURCES]; /* prompt_tokens_reused by source */
    atomic_ullong cache_hits, cache_misses;
    atomic_ullong disconnects;
    atomic_ullong connections_cut; /* too slow to send a request (deadlines.c) */
    atomic_int running, queued;
    graft__histogram ttft; /* time to first token */
    graft__histogram itl;  /* inter-token latency: the gaps between a generation's tokens */
};

/* Records a time to first token, or the gap between two tokens of a generation (any
 * thread, the engine's included: atomics only). */
void graft__metrics_ttft(graft__server_metrics *m, uint64_t ns);
void graft__metrics_itl(graft__server_metrics *m, uint64_t ns);
/* The Prometheus text (to free), engine and cache figures included. */
char *graft__metrics_text(graft__server_metrics *m, graft_engine *engine,
                          graft_prefix_cache *cache, graft__donors *donors,
                          graft__session_store *sessions, size_t *len);

/* ---- http.c: what completion.c needs of the server ----------------------------------------- */

/* How responses and stream events are written: compact, numbers with 9 significant digits,
 * enough for a float (a log-probability) to read back as the same float, without the noise
 * digits of a double's shortest form (2.260685, not 2.2606850000000001). */
#define GRAFT__JSON_OUT (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* What one request's log line tells. */
typedef struct graft__request_log {
    bool generated; /* a generation ran: the figures below are its */
    int32_t reused, computed;
    double ttft_ms;
} graft__request_log;

/* A streamed reply's source, called on the connection's thread: read puts the next bytes
 * of the event stream into buf (at most max) and gives their count, -1 at the end; free
 * cancels what still runs and frees it (the response ended, or the client went away). */
typedef struct graft__stream_ops {
    long (*read)(void *stream, char *buf, size_t max);
    void (*free)(void *stream, graft__request_log *log);
} graft__stream_ops;

/* A response under construction, sent by http.c. */
typedef struct graft__reply {
    int status;
    char *body;  /* JSON or text, to free */
    size_t len;
    const char *content_type;
    char allow[32]; /* a 405's Allow header: the methods the route takes */
    /* Streaming: instead of a body, events read from stream (NULL: none) by stream_ops. */
    void *stream;
    const graft__stream_ops *stream_ops;
} graft__reply;

typedef struct graft__server_ctx {
    graft_model *model;
    graft_engine *engine;
    graft_prefix_cache *cache;
    const graft__server_config *config;
    graft__server_metrics *metrics;
    int32_t max_context;
    const graft__chat *chat;
    graft__session_store *sessions;
    graft__donors *donors;
    graft__response_store *responses;
    atomic_bool cancel_all;  /* shutdown after the grace period: every completion cancels */
} graft__server_ctx;

/* Sets an OpenAI-shaped JSON error reply {"error": {message, type, param, code}}. */
void graft__reply_error(graft__reply *reply, int status, const char *type, const char *param,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Sets a JSON reply from j (consumed). */
void graft__reply_json(graft__reply *reply, int status, json_t *j);

/* ---- completion.c --------------------------------------------------------------------------- */

/* The shape of a completion endpoint: OpenAI's text or chat completions, its Responses API,
 * Anthropic's Messages API, or llama-server's POST /completion and POST /infill. */
typedef enum graft__api {
    GRAFT__API_TEXT, GRAFT__API_CHAT, GRAFT__API_RESPONSES, GRAFT__API_MESSAGES,
    GRAFT__API_LLAMA, GRAFT__API_INFILL
} graft__api;

/* messages.c: the chat completion body (*out, to json_decref whatever the result) for a
 * Messages API body, max_tokens required unless counting; nonzero with *param and *message
 * set as graft__refuse sets them (both NULL: out of memory). */
int graft__messages_to_chat(const json_t *body, bool counting, json_t **out, char **param,
                           char **message);
/* POST /v1/messages/count_tokens: {input_tokens}, the prompt tokens of a
 * Messages body. */
void graft__messages_count_tokens(const graft__server_ctx *ctx, const json_t *body,
                                  graft__reply *reply);
/* An error reply in Anthropic's shape ({type: "error", error: {type, message}}), for the
 * Messages API's routes. */
void graft__messages_error_shape(graft__reply *reply);

/* Runs a completion request (its body parsed) and fills the reply: a whole JSON body, or a
 * stream (reply->stream and its stream_ops). `fd` is the client's socket, watched for a
 * disconnect while a whole response is made. */
void graft__completion_run(const graft__server_ctx *ctx, const json_t *body, graft__api api, int fd,
                           const char *session_header, const char *owner, graft__reply *reply,
                           graft__request_log *log);

#endif /* GRAFT_SERVER_H */
