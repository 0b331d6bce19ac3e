/*
 * completion.h: one completion request's state, shared by completion.c (its life: prompt,
 * reuse, the generations of its choices, text) and response.c (its JSON shapes).
 *
 * A request with n choices computes its prompt once: choice 0 generates on the prompt's
 * session; when its prompt is committed (its first token, or its end), clones of that
 * session at the last prompt token are queued for the other choices (the fork), which each
 * compute only that token, with their own seed (seed + index). Everything here belongs to
 * the request's HTTP thread, except the fork's results, written by clone callbacks on the
 * engine thread under the channel's mutex.
 */
#ifndef GRAFT_SERVER_COMPLETION_H
#define GRAFT_SERVER_COMPLETION_H

#include "server/server.h"

typedef struct completion completion;

/* How long a whole response waits on its channel between looks at the client's socket. */
enum { GRAFT__SLICE_MS = 50 };

typedef struct choice {
    completion *c;
    int32_t index;
    graft_session *session;
    graft_generation *gen;
    graft__channel_port port;
    graft_detok *detok;
    int32_t reused;          /* prompt tokens its session held when it started */
    bool started, failed;    /* failed: could not start (its error is the reply) */
    int fail_status;         /* why not (GRAFT_ECAPACITY: the engine's sessions ran out) */
    /* text */
    char *text;
    size_t len, cap, sent;   /* sent: bytes already given to the client */
    size_t n_tokens;
    size_t *token_start;     /* (cap_tokens) each token's first byte in text */
    int32_t *token_ids;      /* (cap_tokens) the tokens */
    graft_token_logprob *logprobs; /* (cap_tokens x width) when asked for */
    size_t cap_tokens, n_tokens_sent; /* n_tokens_sent: tokens whose ids and logprobs went
                                         out */
    graft__reasoning thought; /* a thinking model's thought in text (chat) */
    size_t thought_sent;     /* streaming: the thought's bytes before it went out */
    bool stopped;            /* a stop string matched, or a limit: text ends at len */
    const char *stop_word;
    bool limited;            /* stopped by n_indent or t_max_predict_ms (llama-server's
                                stop_type "limit") */
    uint64_t first_token_ns; /* when its first token came (t_max_predict_ms) */
    size_t line_start;       /* n_indent: where the first line not yet judged begins (0: the
                                answer's first line, which is never judged, has not ended) */
    bool done;
    bool sent_final_chunk;   /* streaming: its final chunk went out */
    bool sent_role;          /* streaming (chat): the role went out */
    bool sent_echo;          /* streaming (echo): the prompt went out */
    /* tool calls (requests with tools) */
    size_t content_end;      /* text before it is content, after it tool calls */
    size_t tools_parsed;     /* text up to it parsed into calls */
    json_t *calls;           /* the calls parsed (OpenAI's shape) */
    char call_prefix[64];    /* their ids: call_<request id>_<choice>_<k> */
    size_t calls_sent;
    bool calls_bad;          /* text after content_end is not tool calls: it is content */
} choice;

/* The fork of a request with n > 1: clones of choice 0's prompt for the others. */
typedef struct fork_slot {
    completion *c;
    int32_t index;
    bool arrived;
    int status;
    graft_session *clone;
} fork_slot;

/* An API that runs on the chat completion path and answers in its own shape (responses.c,
 * messages.c): the request's state (completion's `shaped`) and what makes its replies. */
typedef struct graft__shape {
    /* The whole reply's body (a new reference) once every choice is done. */
    json_t *(*whole)(completion *c);
    /* A stream's events since the last step (graft__completion_produce's); `going`: the
     * choice still generates. The step after the last generation ends the stream. */
    void (*events)(completion *c, bool going);
    /* A stream's end on a failed generation, with the message. */
    void (*failed)(completion *c, const char *message);
    void (*free)(void *shaped);
} graft__shape;

struct completion {
    const graft__server_ctx *ctx;
    graft__completion_request req;
    bool llama;            /* llama-server's /completion shape */
    const graft__shape *shape; /* another API's shape (responses.c, messages.c), or NULL */
    void *shaped;          /* its state */
    bool max_tokens_fit;   /* max_tokens beyond the context's room is taken as that room
                              (Messages: Anthropic's clients send their models' limits) */
    char id[48];
    long long created;
    int32_t *prompt;
    size_t n_prompt;
    bool prompt_cut;       /* /infill: parts of the prompt were cut to fit the context */
    char *echo_text;       /* echo: the prompt's tokens decoded (NULL: none, or no text) */
    size_t echo_len;
    size_t *echo_starts;   /* (n_prompt) echo: where each prompt token's text begins */
    bool prompt_logprobs;  /* echo with logprobs: choice 0 computes the whole prompt and
                              gives its tokens' log-probabilities */
    const char *source;    /* where choice 0's prompt KV came from: cold, cache, session,
                              donor, donor_wait */
    int source_index;      /* GRAFT__FROM_*, or -1: cold */
    graft__named *named;   /* the named session taken, or NULL */
    graft__donor *donor;   /* its registration as a donor (active reuse), or NULL */
    graft__donor_result donor_result;
    graft_prompt_capture *capture;
    graft__channel channel;
    bool channel_ready;
    uint64_t lookup_ns;
    int32_t width;         /* log-probability entries per token: 1 + top, or 0 */
    graft_token_logprob *take_logprobs; /* (TAKE x width) what pump takes from the channel */
    int32_t max_new;
    choice choices[GRAFT__MAX_CHOICES];
    int32_t n_choices;
    int32_t index_base;    /* the response's index of choice 0 (a batch's prompt p: p * n) */
    char prompt_path[32];  /* the prompt's JSON path in the body: "prompt", "prompt[p]" */
    bool cancelled;        /* the client went away, or shutdown: nothing more starts */
    /* the fork (n > 1), under channel.mu */
    graft_update_cb inner_update;
    graft_settled_cb inner_settled;
    void *inner_user;
    bool fork_queued;
    int32_t fork_pending;  /* clones queued whose callback has not run */
    fork_slot slots[GRAFT__MAX_CHOICES];
    /* streaming */
    bool in_batch;         /* one prompt of a batch: the batch sends usage and [DONE] */
    char *out;             /* pending event bytes */
    size_t out_len, out_cap, out_off;
    bool sent_final, sent_done;
};

/* completion.c: a request's steps, which graft__completion_run takes in turn for one prompt
 * and batch.c for each prompt of a batch. */
/* A new request of that API, its id drawn; NULL with the reply set when out of memory. */
completion *graft__completion_new(const graft__server_ctx *ctx, graft__api api,
                                  graft__reply *reply);
/* Parses the body and tokenizes its prompt; -1 with the reply set (then
 * graft__completion_finish it all the same). */
int graft__completion_prepare(completion *c, const json_t *body, graft__api api,
                              graft__reply *reply);
/* Prepares, finds choice 0's session and starts it; -1 with the reply set (then
 * graft__completion_finish it all the same). */
int graft__completion_begin(completion *c, const json_t *body, graft__api api,
                            const char *session_header, const char *owner, graft__reply *reply);
/* Waits until every choice of the k completions cs is done, taking what the engine sends
 * them: between passes over all, on waker (poked by all their channels) when given, else on
 * cs[0]'s own channel (k = 1), a slice at most. A client that went away on fd (counted
 * once), or a shutdown, cancels them all. */
void graft__completion_wait(completion *const *cs, size_t k, graft__channel *waker, int fd);
/* The first status that is not OK among the choices, or GRAFT_OK; *message its text. */
int graft__completion_status(const completion *c, const char **message);
/* Counts choice 0's time to first token in the metrics once it has a token. */
void graft__completion_record_ttft(completion *c);
/* Ends the request: generations waited for, KV given back or kept (capture, named session),
 * metrics and log counted, c freed. */
void graft__completion_finish(completion *c, graft__request_log *log);
/* A stream's next step: takes what came within timeout_ms and appends its events to c->out
 * (new text, then each choice's final chunk, and the usage chunk when asked for); the step
 * after the last of them appends [DONE] (not in llama-server's shape, nor in a batch) and
 * sets sent_done. */
void graft__completion_produce(completion *c, int timeout_ms);
/* Appends data[0, n) to the text *buf of *len bytes (room for *cap), growing it, and keeps
 * it NUL-terminated; false when out of memory (nothing appended). */
bool graft__append(char **buf, size_t *len, size_t *cap, const char *data, size_t n);
/* Appends the event "data: <j>\n\n" (j consumed) to *buf as graft__append does; with a
 * name, "event: <name>\n" before it. */
void graft__append_event(char **buf, size_t *len, size_t *cap, const char *name, json_t *j);
/* A stream's read: copies pending bytes from *off (up to len, at most max) into buf and moves
 * *off past them; their count, or -1 when none is left. */
long graft__take_pending(const char *pending, size_t len, size_t *off, char *buf, size_t max);

/* responses.c: the Responses API on the chat completion path. */
/* graft__completion_begin for a Responses body: translated into a chat completion request
 * (c->shape set); -1 with the reply set. Its whole reply is the response object, stored the
 * first time when `store` says so; its stream's last event response.completed (or
 * response.incomplete, response.failed). */
int graft__responses_begin(completion *c, const json_t *body, const char *session_header,
                           const char *owner, graft__reply *reply);

/* messages.c: Anthropic's Messages API on the chat completion path. */
/* graft__completion_begin for a Messages body: translated into a chat completion request
 * (c->shape set); -1 with the reply set (in the OpenAI shape, as every error until
 * graft__messages_error_shape). Its whole reply is a Message; its stream ends with
 * message_stop (or an error event). */
int graft__messages_begin(completion *c, const json_t *body, const char *session_header,
                          const char *owner, graft__reply *reply);

/* batch.c */
/* Whether a completions body holds several prompts: `prompt` an array of strings (more
 * than one) or of token-id arrays. */
bool graft__batch_is(const json_t *body);
/* Runs such a request as graft__completion_run runs one prompt (a whole response). */
void graft__batch_run(const graft__server_ctx *ctx, const json_t *body, int fd,
                      const char *session_header, const char *owner, graft__reply *reply,
                      graft__request_log *log);
/* Bytes of ch's text that may be given out now (as its thought or its content): all of it
 * but a suffix that could still grow into a stop string or a thought's tag, and (with
 * tools) nothing from the tool calls on, which are parsed into ch->calls as they complete;
 * with a stop string's match, the text is cut before it and ch->stopped is set. */
size_t graft__choice_release(choice *ch);
/* What a stream gives out of ch now: graft__choice_release's bytes, and once ch is done
 * all of its text, unless tool calls took its tail. */
size_t graft__choice_stream_upto(choice *ch);
/* At the end: tool-call text that did not parse as calls is content after all
 * (ch->calls_bad). */
void graft__choice_settle_tools(choice *ch);

/* response.c */
/* The finish reason of a finished choice ("stop", "length", "tool_calls"), or NULL. */
const char *graft__choice_finish_reason(const choice *ch);
/* Tokens generated over every choice. */
size_t graft__generated_tokens(const completion *c);
/* The choices a whole answer gives, in its order, into out (GRAFT__MAX_CHOICES); returns
 * their count. With best_of above n, the n of highest mean log-probability per token (ties:
 * the lower index first; a choice without tokens last); each one's index becomes its place
 * in the answer. */
int32_t graft__answer_choices(completion *c, choice **out);
/* Tokens generated over every choice that begin in a thought. */
size_t graft__thought_tokens(const completion *c);
/* OpenAI's usage object: prompt, completion and total tokens, and the cached ones. */
json_t *graft__usage_counts_json(size_t prompt, size_t generated, size_t cached);
/* The usage of a request: its prompt, every choice's tokens, choice 0's reused ones (and,
 * where thoughts are split off, those tokens as reasoning_tokens). */
json_t *graft__usage_json(const completion *c);
json_t *graft__graft_json(const completion *c);
json_t *graft__envelope_json(const completion *c, const char *object);
/* A stream's chunk: the envelope with one choice (consumed). */
json_t *graft__envelope_with_choice(const completion *c, json_t *choice);
/* A choice of a whole response (with echo: the prompt first), or of a chunk (delta)
 * carrying text[from, upto) and the log-probabilities of the tokens that begin there (all
 * the rest when final). */
json_t *graft__choice_json(completion *c, choice *ch, size_t from, size_t upto, bool delta,
                           bool final);
/* ch's thought (a new string), or NULL when it has none: whole, or (delta) its bytes
 * within text[0, upto) that have not gone out yet, which are then counted as sent. */
json_t *graft__choice_thought(choice *ch, size_t upto, bool delta);
/* Chat's log-probability entries ({token, logprob, bytes, top_logprobs}) of ch's tokens
 * [from, to), for a request that asked for them. */
json_t *graft__choice_token_logprobs(const completion *c, const choice *ch, size_t from,
                                     size_t to);
/* Whether a stream may send ch's echo: the prompt's log-probabilities, when asked for, are
 * there (choice 0 committed its prompt). */
bool graft__echo_ready(const completion *c);
/* A streamed choice's first chunk with echo: the prompt's text and log-probabilities. */
json_t *graft__echo_choice_json(completion *c, choice *ch);
/* llama-server's /completion fields: choice 0's text [from, upto) (and with return_tokens
 * the ids of its tokens not given yet), and with stop its last fields. */
json_t *graft__llama_json(completion *c, size_t from, size_t upto, bool stop);

#endif /* GRAFT_SERVER_COMPLETION_H */
