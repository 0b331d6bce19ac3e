/*
 * completion.c: one completion or chat completion request, from its validated fields to the
 * response (server.h).
 *
 * The prompt is tokenized on the HTTP thread; the prefix cache hands out a clone of the
 * longest cached prefix (the last prompt token is always computed), or a new session is
 * opened; a prompt capture wraps the channel's callbacks so the prompt's snapshot is taken
 * at the first output and collected into the cache when the generation ends. The answer is
 * the same bits whichever way the prompt's KV came (DESIGN.md invariant 1).
 *
 * Shapes: OpenAI's (choices, usage, chunks ending in [DONE]) for /v1/completions and
 * /v1/chat/completions; llama-server's for POST /completion (content, stop, stop_type,
 * tokens_predicted / evaluated / cached, timings; streamed chunks {content, stop} ending with
 * the one whose stop is true).
 *
 * Text: the HTTP thread turns tokens into text (a streaming detokenizer) and matches the
 * stop strings on the text. Text that could still be the start of a stop string is held
 * back; a match ends the generation (cancelled) and cuts the text before it. A whole
 * response waits on the channel in slices of 50 ms and looks at the client's socket between
 * them, so a client that went away cancels its generation within one slice; a streamed one
 * finds out when a write fails (http.c frees the stream, which cancels).
 *
 * Named sessions (sessions.c): a request with a session id takes its conversation's
 * session: the session itself when the prompt extends its committed history, else a clone at
 * their longest common prefix (as long as the session retains); the first request of a new
 * one starts as an anonymous one does. When the request ends, its session (prompt and reply
 * committed) becomes the conversation's.
 *
 * Ownership: the request's session, capture and generation belong to this request alone,
 * and are released when it ends (finish_request), whatever the outcome.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

enum { SLICE_MS = 50 };

static atomic_ullong next_id;

typedef struct completion {
    const graft__server_ctx *ctx;
    graft__completion_request req;
    bool llama;            /* llama-server's /completion shape */
    const char *stop_word; /* the stop string that matched, or NULL */
    char id[48];
    long long created;
    int32_t *prompt;
    size_t n_prompt;
    int32_t reused;
    const char *source;    /* where the reused KV came from: cold, cache, session */
    graft__named *named;   /* the named session taken, or NULL */
    graft_session *session;
    graft_prompt_capture *capture;
    graft_generation *gen;
    graft__channel channel;
    bool channel_ready;
    graft_detok *detok;
    uint64_t lookup_ns;
    /* text */
    char *text;
    size_t len, cap, sent; /* sent: bytes already given to the client */
    size_t n_tokens;
    bool stopped;          /* a stop string matched: text ends at len */
    bool done;
    /* streaming */
    char *out;             /* pending event bytes */
    size_t out_len, out_cap, out_off;
    bool sent_role, sent_final, sent_done;
} completion;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = (*cap ? *cap * 2 : 256);
        while (want < *len + n + 1)
            want *= 2;
        char *grown = realloc(*buf, want);
        if (grown == NULL)
            return false;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* ---- stop strings ---------------------------------------------------------------------------- */

/* Bytes of text that may be given out now: all of it but a suffix that could still grow
 * into a stop string; with a match, the text is cut before it and c->stopped is set. */
static size_t releasable(completion *c)
{
    const graft__completion_request *r = &c->req;
    size_t keep_from = c->len;
    for (size_t i = 0; i < r->n_stop; i++) {
        const char *stop = r->stop[i];
        size_t n = strlen(stop);
        size_t from = c->sent > n ? c->sent - n : 0;
        const char *hit = strstr(c->text ? c->text + from : "", stop);
        if (hit != NULL) {
            c->len = (size_t)(hit - c->text);
            c->text[c->len] = '\0';
            c->stopped = true;
            c->stop_word = stop;
            return c->len;
        }
        for (size_t k = n - 1; k > 0; k--) /* the longest tail that starts the stop string */
            if (k <= c->len && memcmp(c->text + c->len - k, stop, k) == 0) {
                if (c->len - k < keep_from)
                    keep_from = c->len - k;
                break;
            }
    }
    return keep_from < c->sent ? c->sent : keep_from;
}

/* Takes what the engine sent: text appended, stop strings checked. False once done. */
static bool pump(completion *c, int timeout_ms)
{
    int32_t tokens[64];
    bool settled = false;
    size_t k = graft__channel_take(&c->channel, tokens, 64, timeout_ms, &settled);
    for (size_t i = 0; i < k && !c->stopped; i++) {
        const char *piece;
        size_t n;
        c->n_tokens++;
        if (graft_detok_push(c->detok, tokens[i], &piece, &n) == GRAFT_OK && n > 0)
            append(&c->text, &c->len, &c->cap, piece, n);
        releasable(c);
    }
    if (c->stopped) {
        graft_generation_cancel(c->gen);
        settled = graft_generation_done(c->gen) || settled;
    }
    if (settled && !c->stopped) {
        const char *piece;
        size_t n;
        if (graft_detok_flush(c->detok, &piece, &n) == GRAFT_OK && n > 0)
            append(&c->text, &c->len, &c->cap, piece, n);
        releasable(c);
    }
    c->done = settled;
    return !settled;
}

/* ---- setup and teardown -------------------------------------------------------------------- */

static int tokenize_prompt(completion *c, graft__reply *reply)
{
    const graft__completion_request *r = &c->req;
    graft_model_info info;
    graft_model_get_info(c->ctx->model, &info);
    if (r->prompt_text != NULL) {
        /* a rendered chat prompt that starts with BOS does not get another one */
        int add_bos = !r->chat || !graft__chat_starts_with_bos(c->ctx->chat, r->prompt_text);
        if (graft_tokenize(c->ctx->model, r->prompt_text, strlen(r->prompt_text), add_bos, 1,
                           &c->prompt, &c->n_prompt) != GRAFT_OK) {
            graft__reply_error(reply, 500, "server_error", NULL, "cannot tokenize the prompt");
            return -1;
        }
    } else {
        c->n_prompt = r->n_prompt_tokens;
        c->prompt = malloc((c->n_prompt ? c->n_prompt : 1) * sizeof *c->prompt);
        if (c->prompt == NULL) {
            graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < c->n_prompt; i++) {
            if (r->prompt_tokens[i] >= info.n_vocab) {
                char path[40];
                snprintf(path, sizeof path, "prompt[%zu]", i);
                graft__reply_error(reply, 400, "invalid_request_error", path,
                                   "token id %d is outside the vocabulary of %d tokens",
                                   (int)r->prompt_tokens[i], (int)info.n_vocab);
                return -1;
            }
            c->prompt[i] = r->prompt_tokens[i];
        }
    }
    if (c->n_prompt == 0) {
        graft__reply_error(reply, 400, "invalid_request_error", r->chat ? "messages" : "prompt",
                           "the prompt is empty");
        return -1;
    }
    int32_t max_context = c->ctx->max_context;
    if ((int64_t)c->n_prompt + (int64_t)r->max_tokens > max_context) {
        graft__reply_error(reply, 400, "invalid_request_error",
                           r->max_tokens > 0 ? "max_tokens" : r->chat ? "messages" : "prompt",
                           "the prompt's %zu tokens and max_tokens %d exceed the context of "
                           "%d tokens", c->n_prompt, (int)r->max_tokens, (int)max_context);
        return -1;
    }
    return 0;
}

/* Tokens a and b have in common at their start. */
static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* The named session's conversation as the new prompt can use it: the session itself when
 * the prompt extends its history, else a clone at their common prefix. 0, or -1 when the
 * conversation gave nothing (held is closed then). */
static int continue_named(completion *c, graft_session *held)
{
    int32_t *history = NULL;
    size_t n_history = 0;
    if (graft_session_tokens(held, &history, &n_history) != GRAFT_OK) {
        graft_session_close(held);
        return -1;
    }
    size_t lcp = common_prefix(history, n_history, c->prompt, c->n_prompt);
    graft_free(history);
    if (lcp == n_history && lcp < c->n_prompt) {
        c->session = held;
        c->reused = (int32_t)lcp;
        return 0;
    }
    size_t upto = lcp < c->n_prompt ? lcp : c->n_prompt - 1; /* the last token is computed */
    graft_session *clone = NULL;
    int rc = graft_session_clone_range_wait(held, 0, (int32_t)upto, &clone, NULL);
    graft_session_close(held);
    if (rc != GRAFT_OK || graft_session_position(clone) == 0) {
        graft_session_close(clone);
        return -1;
    }
    c->session = clone;
    c->reused = graft_session_position(clone);
    return 0;
}

/* The session to generate on: the named session's, a clone of the longest cached prefix, or
 * a new one. */
static int find_session(completion *c, const char *owner, graft__reply *reply)
{
    uint64_t t0 = now_ns();
    c->source = "cold";
    if (c->req.session_id != NULL) {
        graft_session *held = NULL;
        int rc = graft__sessions_acquire(c->ctx->sessions, c->req.session_id, owner, &c->named,
                                         &held);
        if (rc == GRAFT_EINVAL) {
            graft__reply_error(reply, 403, "permission_error", "session_id",
                               "the session belongs to another API key");
            return -1;
        }
        if (rc != GRAFT_OK) {
            graft__reply_error(reply, 503, "server_error", "session_id",
                               "no named session can be kept now: %s", graft_status_str(rc));
            return -1;
        }
        if (held != NULL && continue_named(c, held) == 0) {
            c->lookup_ns = now_ns() - t0;
            c->source = "session";
            return 0;
        }
    }
    int rc = graft_prefix_cache_lookup(c->ctx->cache, c->prompt, c->n_prompt, &c->session,
                                       &c->reused);
    c->lookup_ns = now_ns() - t0;
    if (rc == GRAFT_OK) {
        atomic_fetch_add(&c->ctx->metrics->cache_hits, 1);
        c->source = "cache";
        return 0;
    }
    atomic_fetch_add(&c->ctx->metrics->cache_misses, 1);
    c->reused = 0;
    rc = graft_session_open(c->ctx->engine, &c->session, NULL);
    if (rc != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "no session available: %s",
                           graft_status_str(rc));
        return -1;
    }
    return 0;
}

static int start_generation(completion *c, graft__reply *reply)
{
    const graft__completion_request *r = &c->req;
    int32_t max_new = r->max_tokens > 0 ? r->max_tokens : c->ctx->max_context - (int32_t)c->n_prompt;
    if (graft__channel_init(&c->channel, (size_t)max_new + 1) != GRAFT_OK ||
        graft_detok_create(c->ctx->model, &c->detok) != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return -1;
    }
    c->channel_ready = true;
    graft_update_cb up = graft__channel_on_update;
    graft_settled_cb st = graft__channel_on_settled;
    void *user = &c->channel;
    if (graft_prompt_capture_create(c->ctx->cache, c->session, c->prompt, c->n_prompt,
                                    &c->capture) != GRAFT_OK ||
        graft_prompt_capture_wrap(c->capture, &up, &st, &user) != GRAFT_OK) {
        graft_prompt_capture_free(c->capture);
        c->capture = NULL;
    }
    graft_generate_config cfg = graft_generate_default();
    cfg.max_new_tokens = max_new;
    cfg.ignore_eog = r->ignore_eos;
    cfg.sampling = r->sampling;
    int rc = graft_session_generate(c->session, c->prompt + c->reused, c->n_prompt - (size_t)c->reused,
                                    &cfg, up, st, user, &c->gen);
    if (rc != GRAFT_OK) {
        graft__reply_error(reply, rc == GRAFT_ESHUTDOWN ? 503 : 500, "server_error", NULL,
                           "cannot start the generation: %s", graft_status_str(rc));
        return -1;
    }
    return 0;
}

static void finish_request(completion *c, graft__request_log *log)
{
    if (c->gen != NULL) {
        graft_generation_cancel(c->gen);
        graft_generation_wait(c->gen);
        graft_generation_metrics m;
        graft_generation_metrics_get(c->gen, &m);
        atomic_fetch_add(&c->ctx->metrics->prompt_tokens_reused, (unsigned long long)c->reused);
        atomic_fetch_add(&c->ctx->metrics->prompt_tokens_computed,
                         (unsigned long long)m.prompt_tokens_computed);
        atomic_fetch_add(&c->ctx->metrics->generated_tokens, (unsigned long long)c->n_tokens);
        if (log != NULL) {
            log->generated = true;
            log->reused = c->reused;
            log->computed = m.prompt_tokens_computed;
            log->ttft_ms = m.time_to_first_token_ns / 1e6;
        }
    }
    if (c->capture != NULL) {
        graft_prompt_capture_collect(c->capture);
        graft_prompt_capture_free(c->capture);
    }
    graft_generation_free(c->gen);
    if (c->named != NULL)
        graft__sessions_release(c->ctx->sessions, c->named, c->session);
    else
        graft_session_close(c->session);
    if (c->channel_ready)
        graft__channel_free(&c->channel);
    graft_detok_free(c->detok);
    graft__request_free(&c->req);
    free(c->prompt);
    free(c->text);
    free(c->out);
    free(c);
}

/* ---- responses ------------------------------------------------------------------------------- */

static const char *finish_reason(const completion *c)
{
    if (c->stopped)
        return "stop";
    switch (graft_generation_finish_reason(c->gen)) {
    case GRAFT_FINISH_STOP:
        return "stop";
    case GRAFT_FINISH_LENGTH:
        return "length";
    default:
        return NULL;
    }
}

static json_t *usage_json(const completion *c)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)c->n_prompt,
                     "completion_tokens", (json_int_t)c->n_tokens, "total_tokens",
                     (json_int_t)(c->n_prompt + c->n_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)c->reused);
}

static json_t *graft_json(const completion *c)
{
    graft_generation_metrics m;
    graft_generation_metrics_get(c->gen, &m);
    return json_pack("{s:s, s:i, s:i, s:f, s:f, s:f}", "source", c->source,
                     "tokens_reused", (int)c->reused, "tokens_computed",
                     (int)m.prompt_tokens_computed, "clone_ms", c->lookup_ns / 1e6, "queue_ms",
                     m.queue_wait_ns / 1e6, "ttft_ms",
                     (m.time_to_first_token_ns + c->lookup_ns) / 1e6);
}

static json_t *envelope(const completion *c, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", c->id, "object", object, "created",
                     (json_int_t)c->created, "model", c->ctx->config->alias,
                     "system_fingerprint", "graft-" GRAFT_VERSION);
}

static json_t *choice_json(const completion *c, const char *text, size_t n, const char *finish,
                           bool delta)
{
    json_t *choice = json_pack("{s:i}", "index", 0);
    json_t *content = json_stringn(text, n);
    if (c->req.chat) {
        json_t *msg = json_object();
        if (!delta || !c->sent_role)
            json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", content);
        json_object_set_new(choice, delta ? "delta" : "message", msg);
    } else {
        json_object_set_new(choice, "text", content);
        json_object_set_new(choice, "logprobs", json_null());
    }
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    return choice;
}

/* llama-server's /completion fields of a finished request (the text given separately). */
static json_t *llama_json(const completion *c, const char *text, size_t n, bool stop)
{
    graft_generation_metrics m;
    graft_generation_metrics_get(c->gen, &m);
    const char *reason = finish_reason(c);
    json_t *j = json_pack("{s:s%, s:b, s:i}", "content", text, n, "stop", stop, "id_slot", 0);
    if (!stop)
        return j;
    json_object_set_new(j, "model", json_string(c->ctx->config->alias));
    json_object_set_new(j, "tokens_predicted", json_integer((json_int_t)c->n_tokens));
    json_object_set_new(j, "tokens_evaluated", json_integer((json_int_t)c->n_prompt));
    json_object_set_new(j, "tokens_cached", json_integer(c->reused));
    json_object_set_new(j, "truncated", json_false());
    json_object_set_new(j, "stop_type", json_string(c->stopped ? "word"
                                                    : reason && strcmp(reason, "length") == 0
                                                        ? "limit"
                                                        : "eos"));
    json_object_set_new(j, "stopping_word", json_string(c->stop_word ? c->stop_word : ""));
    json_object_set_new(j, "timings",
                        json_pack("{s:i, s:i, s:f}", "prompt_n", (int)m.prompt_tokens_computed,
                                  "predicted_n", (int)c->n_tokens, "predicted_per_second",
                                  m.decode_tokens_per_s));
    json_object_set_new(j, "graft", graft_json(c));
    return j;
}

static void whole_reply(completion *c, graft__reply *reply)
{
    int status = graft_generation_status(c->gen);
    if (!c->stopped && status != GRAFT_OK) {
        graft__reply_error(reply, status == GRAFT_ECAPACITY ? 503 : 500, "server_error", NULL,
                           "generation failed: %s", graft_generation_error(c->gen));
        return;
    }
    if (c->llama) {
        graft__reply_json(reply, 200, llama_json(c, c->text ? c->text : "", c->len, true));
        return;
    }
    json_t *j = envelope(c, c->req.chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    json_array_append_new(choices, choice_json(c, c->text ? c->text : "", c->len,
                                               finish_reason(c), false));
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", usage_json(c));
    json_object_set_new(j, "graft", graft_json(c));
    graft__reply_json(reply, 200, j);
}

/* Whether the client closed its end of the connection. */
static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return true;
    char byte;
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- the entry points ------------------------------------------------------------------------ */

void graft__completion_run(const graft__server_ctx *ctx, const json_t *body, graft__api api, int fd,
                           const char *session_header, const char *owner, graft__reply *reply,
                           graft__request_log *log)
{
    completion *c = calloc(1, sizeof *c);
    if (c == NULL) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return;
    }
    bool chat = api == GRAFT__API_CHAT;
    c->ctx = ctx;
    c->llama = api == GRAFT__API_LLAMA;
    c->created = (long long)time(NULL);
    snprintf(c->id, sizeof c->id, "%s-%llu", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&next_id, 1) + 1);
    char *param = NULL, *message = NULL;
    int rc = graft__request_parse(body, chat, ctx->chat ? graft__chat_render : NULL,
                                  (void *)ctx->chat, &c->req, &param, &message);
    if (rc != GRAFT_OK) {
        if (rc == GRAFT_EUNSUPPORTED)
            graft__reply_error(reply, 501, "server_error", NULL,
                               "this model has no chat template to render messages with");
        else
            graft__reply_error(reply, 400, "invalid_request_error", param, "%s",
                               message ? message : "invalid request");
        free(param);
        free(message);
        free(c);
        return;
    }
    if (c->req.session_id == NULL && session_header != NULL && session_header[0] != '\0')
        c->req.session_id = strndup(session_header, 128);
    if (tokenize_prompt(c, reply) != 0 || find_session(c, owner, reply) != 0 ||
        start_generation(c, reply) != 0) {
        finish_request(c, log);
        return;
    }
    if (c->req.stream) {
        reply->status = 200;
        reply->content_type = "text/event-stream";
        reply->stream = c;
        return;
    }
    while (pump(c, SLICE_MS)) {
        if (client_gone(fd)) {
            atomic_fetch_add(&ctx->metrics->disconnects, 1);
            graft_generation_cancel(c->gen);
        }
        if (atomic_load(&ctx->cancel_all))
            graft_generation_cancel(c->gen);
    }
    if (graft_generation_finish_reason(c->gen) == GRAFT_FINISH_CANCELLED && !c->stopped)
        graft__reply_error(reply, 499, "client_closed", NULL, "the client went away");
    else
        whole_reply(c, reply);
    graft_generation_metrics m;
    graft_generation_metrics_get(c->gen, &m);
    if (m.generated_tokens > 0)
        graft__metrics_ttft(ctx->metrics, m.time_to_first_token_ns + c->lookup_ns);
    finish_request(c, log);
}

/* Appends "data: <json>\n\n" to the pending output. */
static void emit(completion *c, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        return;
    append(&c->out, &c->out_len, &c->out_cap, "data: ", 6);
    append(&c->out, &c->out_len, &c->out_cap, s, strlen(s));
    append(&c->out, &c->out_len, &c->out_cap, "\n\n", 2);
    free(s);
}

static json_t *chunk(completion *c, const char *text, size_t n, const char *finish)
{
    if (c->llama)
        return llama_json(c, text, n, finish != NULL);
    json_t *j = envelope(c, c->req.chat ? "chat.completion.chunk" : "text_completion");
    json_t *choices = json_array();
    json_array_append_new(choices, choice_json(c, text, n, finish, true));
    json_object_set_new(j, "choices", choices);
    c->sent_role = true;
    return j;
}

/* Produces the next events: new text, then at the end the final chunk, usage, [DONE]. */
static void produce(completion *c)
{
    while (c->out_len == c->out_off && !c->sent_done) {
        c->out_len = c->out_off = 0;
        if (!c->done) {
            if (atomic_load(&c->ctx->cancel_all))
                graft_generation_cancel(c->gen);
            bool was_first = c->n_tokens == 0;
            pump(c, SLICE_MS);
            if (was_first && c->n_tokens > 0) {
                graft_generation_metrics m;
                graft_generation_metrics_get(c->gen, &m);
                graft__metrics_ttft(c->ctx->metrics, m.time_to_first_token_ns + c->lookup_ns);
            }
            size_t upto = c->done ? c->len : releasable(c);
            if (upto > c->sent) {
                emit(c, chunk(c, c->text + c->sent, upto - c->sent, NULL));
                c->sent = upto;
            }
            continue;
        }
        if (!c->sent_final) {
            int status = graft_generation_status(c->gen);
            if (!c->stopped && status != GRAFT_OK) {
                json_t *err = json_pack("{s:{s:s, s:s}}", "error", "message",
                                        graft_generation_error(c->gen), "type", "server_error");
                emit(c, err);
            } else {
                if (c->len > c->sent)
                    emit(c, chunk(c, c->text + c->sent, c->len - c->sent, NULL));
                c->sent = c->len;
                emit(c, chunk(c, "", 0, c->llama && !finish_reason(c) ? "stop"
                                                                        : finish_reason(c)));
                if (c->req.include_usage && !c->llama) {
                    json_t *u = envelope(c, c->req.chat ? "chat.completion.chunk"
                                                        : "text_completion");
                    json_object_set_new(u, "choices", json_array());
                    json_object_set_new(u, "usage", usage_json(c));
                    json_object_set_new(u, "graft", graft_json(c));
                    emit(c, u);
                }
            }
            c->sent_final = true;
            continue;
        }
        if (!c->llama) /* llama-server's stream ends with its stop chunk */
            append(&c->out, &c->out_len, &c->out_cap, "data: [DONE]\n\n", 14);
        c->sent_done = true;
    }
}

long graft__completion_stream_read(void *stream, char *buf, size_t max)
{
    completion *c = stream;
    produce(c);
    if (c->out_off == c->out_len)
        return -1;
    size_t n = c->out_len - c->out_off < max ? c->out_len - c->out_off : max;
    memcpy(buf, c->out + c->out_off, n);
    c->out_off += n;
    return (long)n;
}

void graft__completion_stream_free(void *stream, graft__request_log *log)
{
    completion *c = stream;
    if (!c->done && !c->stopped)
        atomic_fetch_add(&c->ctx->metrics->disconnects, 1);
    finish_request(c, log);
}
