/*
 * completion.c: one completion or chat completion request, from its validated fields to the
 * response (server.h, completion.h).
 *
 * The prompt is tokenized on the HTTP thread; the prefix cache hands out a clone of the
 * longest cached prefix (the last prompt token is always computed), or a new session is
 * opened; a prompt capture wraps the channel's callbacks so the prompt's snapshot is taken
 * at the first output and collected into the cache when the generation ends. The answer is
 * the same bits whichever way the prompt's KV came (DESIGN.md invariant 1), and so is each
 * of n choices: choice i is the answer a single request with seed + i gets (completion.h
 * says how they share the prompt).
 *
 * Text: the HTTP thread turns each choice's tokens into text (a streaming detokenizer) and
 * matches the stop strings on the text. Text that could still be the start of a stop
 * string is held back; a match ends that choice's generation (cancelled) and cuts the text
 * before it. With tools, text from the first "<tool_call>" on is parsed into tool calls
 * (tool_calls.c) rather than given as content. A whole response waits on the channel in
 * slices of GRAFT__SLICE_MS and looks at the client's socket between them, so a client that
 * went away cancels its generations within one slice; a streamed one finds out when a write
 * fails (http.c frees the stream, which cancels). Several prompts in one request are
 * batch.c's: one completion each.
 *
 * Echo (completions): the prompt's text comes before each choice's answer. With logprobs
 * too, choice 0 computes its whole prompt on a new session (a cache or donor keeps no
 * logits) with prompt_logprobs, and the prompt's entries are read from its generation once
 * committed (a stream sends them, with the text, as each choice's first chunk).
 *
 * Named sessions (sessions.c): a request with a session id takes its conversation's
 * session: the session itself when the prompt extends its committed history, else a clone at
 * their longest common prefix (as long as the session retains); the first request of a new
 * one starts as an anonymous one does. When the request ends, choice 0's session (prompt and
 * reply committed) becomes the conversation's.
 *
 * Ownership: the request's sessions, capture and generations belong to this request alone,
 * and are released when it ends (graft__completion_finish), whatever the outcome; it waits
 * for the fork's clone callbacks first, so none can outlive it.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "server/completion.h"

enum { TAKE = 64 };

static atomic_ullong next_id;

bool graft__append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
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

/* ---- stop strings and tool calls --------------------------------------------------------------- */

/* parallel_tool_calls false: the choice ends after its first call, as at a stop string
 * (calls parsed from the same text after it are dropped). */
static void end_at_first_call(choice *ch)
{
    while (json_array_size(ch->calls) > 1)
        json_array_remove(ch->calls, json_array_size(ch->calls) - 1);
    const char *close = strstr(ch->text + ch->content_end, "</tool_call>");
    ch->len = (size_t)(close - ch->text) + strlen("</tool_call>");
    ch->text[ch->len] = '\0';
    ch->tools_parsed = ch->len;
    ch->stopped = true;
}

/* n_indent: ends the answer before the first character other than a space or a tab of a
 * line after its first indented by fewer of them than n_indent (a blank line too), as
 * llama-server does for code completion. A line whose indentation may still grow is not
 * judged yet; its spaces stay whatever comes. */
static void stop_at_dedent(choice *ch, int32_t n_indent)
{
    const char *text = ch->text ? ch->text : "";
    if (ch->line_start == 0) { /* the first line is never judged */
        const char *nl = memchr(text, '\n', ch->len);
        if (nl == NULL)
            return;
        ch->line_start = (size_t)(nl - text) + 1;
    }
    for (;;) {
        size_t at = ch->line_start;
        while (at < ch->len && (text[at] == ' ' || text[at] == '\t'))
            at++;
        if (at == ch->len)
            return;
        if ((int64_t)(at - ch->line_start) < n_indent) {
            ch->len = at;
            ch->text[at] = '\0';
            ch->stopped = ch->limited = true;
            return;
        }
        const char *nl = memchr(text + at, '\n', ch->len - at);
        if (nl == NULL)
            return;
        ch->line_start = (size_t)(nl - text) + 1;
    }
}

size_t graft__choice_release(choice *ch)
{
    const graft__completion_request *r = &ch->c->req;
    size_t keep_from = ch->len;
    const char *first = NULL; /* the earliest stop string's match, and which */
    size_t first_stop = 0;
    for (size_t i = 0; i < r->n_stop && !ch->stopped; i++) {
        const char *stop = r->stop[i];
        size_t n = strlen(stop);
        size_t from = ch->sent > n ? ch->sent - n : 0;
        const char *hit = strstr(ch->text ? ch->text + from : "", stop);
        if (hit != NULL && (first == NULL || hit < first)) {
            first = hit;
            first_stop = i;
        }
        size_t tail = ch->done ? ch->len : graft__tail_start(ch->text, ch->len, stop);
        if (tail < keep_from)
            keep_from = tail;
    }
    if (first != NULL) {
        ch->len = (size_t)(first - ch->text);
        ch->text[ch->len] = '\0';
        ch->stopped = true;
        ch->stop_word = r->stop[first_stop];
        keep_from = ch->len;
    }
    if (r->n_indent > 0 && !ch->stopped) {
        stop_at_dedent(ch, r->n_indent);
        if (ch->len < keep_from)
            keep_from = ch->len;
    }
    size_t held = graft__reasoning_scan(&ch->thought, ch->text ? ch->text : "", ch->len,
                                        ch->done || ch->stopped);
    if (held < keep_from)
        keep_from = held;
    /* Tool calls are parsed from the content, once it is known where it begins, and only
     * from text that stays (not a tail that may be a stop string's start). */
    if (r->tools && (ch->thought.state == GRAFT__THOUGHT_NONE ||
                     ch->thought.state == GRAFT__THOUGHT_CLOSED)) {
        size_t stable = keep_from;
        size_t content = graft__reasoning_content_start(&ch->thought, stable);
        if (ch->content_end < content)
            ch->content_end = content;
        size_t from = ch->content_end < stable ? ch->content_end : stable;
        ch->content_end = from + graft__tool_calls_start(ch->text + from, stable - from);
        if (ch->content_end < keep_from)
            keep_from = ch->content_end;
        if (ch->tools_parsed < ch->content_end)
            ch->tools_parsed = ch->content_end;
        if (ch->call_prefix[0] == '\0') /* once, at the first text */
            snprintf(ch->call_prefix, sizeof ch->call_prefix, "call_%s_%d", ch->c->id,
                     (int)ch->index);
        if (!ch->calls_bad && ch->content_end < stable)
            graft__tool_calls_parse(ch->text, stable, &ch->tools_parsed, ch->call_prefix,
                                    ch->calls, &ch->calls_bad);
        if (r->one_call && json_array_size(ch->calls) > 0 && !ch->stopped)
            end_at_first_call(ch);
    }
    return keep_from < ch->sent ? ch->sent : keep_from;
}

size_t graft__choice_stream_upto(choice *ch)
{
    size_t upto = graft__choice_release(ch);
    return ch->done && (!ch->c->req.tools || ch->calls_bad) ? ch->len : upto;
}

void graft__choice_settle_tools(choice *ch)
{
    if (!ch->c->req.tools)
        return;
    graft__choice_release(ch);
    /* a thought cut short: no content, no calls */
    size_t content = graft__reasoning_content_start(&ch->thought, ch->len);
    if (ch->content_end < content)
        ch->content_end = content;
    if (ch->tools_parsed < ch->content_end)
        ch->tools_parsed = ch->content_end;
    for (size_t i = ch->tools_parsed; i < ch->len && !ch->calls_bad; i++)
        ch->calls_bad = !(ch->text[i] == ' ' || ch->text[i] == '\n' || ch->text[i] == '\r' ||
                          ch->text[i] == '\t');
}

/* ---- the fork (n > 1): engine thread, in choice 0's callbacks ---------------------------------- */

static void fork_clone_done(int status, graft_session *clone, void *user)
{
    fork_slot *slot = user;
    graft__channel *chn = &slot->c->channel;
    pthread_mutex_lock(&chn->mu);
    slot->arrived = true;
    slot->status = status;
    slot->clone = clone;
    slot->c->fork_pending--;
    chn->poked = true;
    pthread_cond_signal(&chn->cv);
    /* under chn's mutex: the request waits for this callback (fork_pending) before it may
     * free a batch's waker */
    if (chn->forward != NULL)
        graft__channel_poke(chn->forward);
    pthread_mutex_unlock(&chn->mu);
}

/* Queues the clones of choice 0's session at the last prompt token (clone == false: the
 * prompt was not committed; each slot arrives empty). */
static void fork_queue(completion *c, graft_generation *gen, bool clone)
{
    graft__channel *chn = &c->channel;
    pthread_mutex_lock(&chn->mu);
    bool first = !c->fork_queued;
    c->fork_queued = true;
    if (first)
        c->fork_pending = clone ? c->n_choices - 1 : 0;
    for (int32_t i = 1; first && i < c->n_choices; i++)
        c->slots[i] = (fork_slot){c, i, !clone, clone ? GRAFT_OK : GRAFT_ECANCELLED, NULL};
    chn->poked = true;
    pthread_cond_signal(&chn->cv);
    pthread_mutex_unlock(&chn->mu);
    if (!first || !clone)
        return;
    graft_session *source = graft_generation_session(gen);
    for (int32_t i = 1; i < c->n_choices; i++) {
        int rc = graft_session_clone(source, (int32_t)c->n_prompt - 1, fork_clone_done,
                                     &c->slots[i]);
        if (rc != GRAFT_OK)
            fork_clone_done(rc, NULL, &c->slots[i]);
    }
}

static void fork_on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    completion *c = user;
    fork_queue(c, gen, true);
    c->inner_update(gen, tokens, n, c->inner_user);
}

static void fork_on_settled(graft_generation *gen, void *user)
{
    completion *c = user;
    graft_finish f = graft_generation_finish_reason(gen);
    fork_queue(c, gen, f == GRAFT_FINISH_STOP || f == GRAFT_FINISH_LENGTH);
    c->inner_settled(gen, c->inner_user);
}

/* ---- setup and teardown -------------------------------------------------------------------- */

/* llama-server's logit_bias texts: each token of each text joins logit_bias with its bias. */
static int bias_texts(completion *c, graft__reply *reply)
{
    graft__completion_request *r = &c->req;
    for (size_t i = 0; i < r->n_logit_bias_texts; i++) {
        const graft__bias_text *b = &r->logit_bias_texts[i];
        int32_t *tokens = NULL;
        size_t n = 0;
        graft_logit_bias *grown = NULL;
        if (graft_tokenize(c->ctx->model, b->text, strlen(b->text), 0, 0, &tokens, &n) ==
            GRAFT_OK)
            grown = realloc(r->logit_bias, (r->n_logit_bias + n + 1) * sizeof *grown);
        if (grown == NULL) {
            graft_free(tokens);
            graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
            return -1;
        }
        r->logit_bias = grown;
        for (size_t t = 0; t < n; t++)
            r->logit_bias[r->n_logit_bias++] = (graft_logit_bias){tokens[t], b->bias};
        graft_free(tokens);
    }
    return 0;
}

/* A prompt filled in the middle: within the context, less the answer's room (max_tokens, or
 * a quarter of the context without it), where /infill may cut it to fit. */
static int infill_prompt(completion *c, const graft_model_info *info, graft__reply *reply)
{
    const graft__completion_request *r = &c->req;
    int32_t room = r->max_tokens > 0 ? r->max_tokens : c->ctx->max_context / 4;
    int rc = graft__infill_tokens(c->ctx->model, info, r->infill,
                                  (int64_t)c->ctx->max_context - room, &c->prompt, &c->n_prompt,
                                  &c->prompt_cut);
    if (rc == GRAFT_EUNSUPPORTED) {
        graft__reply_error(reply, 400, "invalid_request_error",
                           json_object_get(r->infill, "files") ? "input_prefix" : "suffix",
                           "this model has no fill-in-the-middle tokens (its vocabulary names "
                           "no prefix, suffix and middle tokens)");
        return -1;
    }
    if (rc != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return -1;
    }
    return 0;
}

static int tokenize_prompt(completion *c, graft__reply *reply)
{
    const graft__completion_request *r = &c->req;
    graft_model_info info;
    graft_model_get_info(c->ctx->model, &info);
    if (r->infill != NULL) {
        if (infill_prompt(c, &info, reply) != 0)
            return -1;
    } else if (r->prompt_text != NULL) {
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
                char path[64];
                snprintf(path, sizeof path, "%s[%zu]", c->prompt_path, i);
                graft__reply_error(reply, 400, "invalid_request_error", path,
                                   "token id %d is outside the vocabulary of %d tokens",
                                   (int)r->prompt_tokens[i], (int)info.n_vocab);
                return -1;
            }
            c->prompt[i] = r->prompt_tokens[i];
        }
    }
    if (bias_texts(c, reply) != 0)
        return -1;
    for (size_t i = 0; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].token >= info.n_vocab) {
            char path[40];
            snprintf(path, sizeof path, "logit_bias.%d", (int)r->logit_bias[i].token);
            graft__reply_error(reply, 400, "invalid_request_error", path,
                               "token id %d is outside the vocabulary of %d tokens",
                               (int)r->logit_bias[i].token, (int)info.n_vocab);
            return -1;
        }
    if (c->n_prompt == 0) {
        graft__reply_error(reply, 400, "invalid_request_error",
                           r->chat ? "messages" : c->prompt_path, "the prompt is empty");
        return -1;
    }
    return 0;
}

/* The prompt and max_tokens within the context (max_tokens cut to the room left where
 * c->max_tokens_fit says so); -1 with the reply set. Only a request that runs needs it:
 * counting a prompt's tokens works for any length. */
static int fits_context(completion *c, graft__reply *reply)
{
    const graft__completion_request *r = &c->req;
    int32_t max_context = c->ctx->max_context;
    if (c->max_tokens_fit && (int64_t)c->n_prompt < max_context &&
        (int64_t)c->n_prompt + (int64_t)r->max_tokens > max_context)
        c->req.max_tokens = max_context - (int32_t)c->n_prompt;
    if ((int64_t)c->n_prompt + (int64_t)r->max_tokens > max_context) {
        const char *param = r->max_tokens > 0 ? r->max_tokens_key
                            : r->chat         ? "messages"
                                              : c->prompt_path;
        graft__reply_error(reply, 400, "invalid_request_error", param,
                           "the prompt's %zu tokens and %s %d exceed the context of %d tokens",
                           c->n_prompt, r->max_tokens_key ? r->max_tokens_key : "max_tokens",
                           (int)r->max_tokens, (int)max_context);
        return -1;
    }
    return 0;
}

/* echo: the prompt's text, as POST /detokenize gives it, and where each token's begins. */
static int echo_prompt(completion *c, graft__reply *reply)
{
    c->echo_starts = malloc(c->n_prompt * sizeof *c->echo_starts);
    if (c->echo_starts == NULL || graft__detokenize(c->ctx->model, c->prompt, c->n_prompt,
                                                    &c->echo_text, &c->echo_len,
                                                    c->echo_starts) != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return -1;
    }
    return 0;
}

/* The named session's conversation as the new prompt can use it: the session itself when
 * the prompt extends its history, else a clone at their common prefix. 0, or -1 when the
 * conversation gave nothing (held is closed then). */
static int continue_named(completion *c, graft_session *held)
{
    choice *ch = &c->choices[0];
    int32_t *history = NULL;
    size_t n_history = 0;
    if (graft_session_tokens(held, &history, &n_history) != GRAFT_OK) {
        graft_session_close(held);
        return -1;
    }
    size_t lcp = graft__common_prefix(history, n_history, c->prompt, c->n_prompt);
    graft_free(history);
    if (lcp == n_history && lcp < c->n_prompt) {
        ch->session = held;
        ch->reused = (int32_t)lcp;
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
    ch->session = clone;
    ch->reused = graft_session_position(clone);
    return 0;
}

/* Active reuse (donors.c): with `take`, a running request's prompt replaces choice 0's
 * session when it offers more; then the request is a donor itself. */
static int join_donors(completion *c, bool take, uint64_t t0, graft__reply *reply)
{
    choice *ch = &c->choices[0];
    if (graft__donors_join(c->ctx->donors, c->prompt, c->n_prompt, take, &ch->session,
                           &ch->reused, &c->donor, &c->donor_result) != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return -1;
    }
    if (c->donor_result.from_donor) {
        c->source_index = c->donor_result.waited ? GRAFT__FROM_DONOR_WAIT : GRAFT__FROM_DONOR;
        c->source = c->donor_result.waited ? "donor_wait" : "donor";
    }
    c->lookup_ns = graft__server_now_ns() - t0;
    return 0;
}

/* Choice 0's session: the named session's, a clone of the longest cached prefix, or a new
 * one; or a running request's prompt (join_donors). */
static int find_session(completion *c, const char *owner, graft__reply *reply)
{
    choice *ch = &c->choices[0];
    uint64_t t0 = graft__server_now_ns();
    c->source = "cold";
    if (c->prompt_logprobs) { /* every prompt token's logits: none can be reused */
        ch->reused = 0;
        if (graft_session_open(c->ctx->engine, &ch->session, NULL) != GRAFT_OK) {
            graft__reply_error(reply, 503, "server_error", NULL, "no session available");
            return -1;
        }
        return join_donors(c, false, t0, reply);
    }
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
            c->source = "session";
            c->source_index = GRAFT__FROM_SESSION;
            return join_donors(c, false, t0, reply);
        }
    }
    int rc = graft_prefix_cache_lookup(c->ctx->cache, c->prompt, c->n_prompt, &ch->session,
                                       &ch->reused);
    if (rc == GRAFT_OK) {
        atomic_fetch_add(&c->ctx->metrics->cache_hits, 1);
        c->source = "cache";
        c->source_index = GRAFT__FROM_CACHE;
        return join_donors(c, true, t0, reply);
    }
    atomic_fetch_add(&c->ctx->metrics->cache_misses, 1);
    ch->reused = 0;
    rc = graft_session_open(c->ctx->engine, &ch->session, NULL);
    if (rc != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "no session available: %s",
                           graft_status_str(rc));
        return -1;
    }
    return join_donors(c, true, t0, reply);
}

/* Starts choice i's generation on ch->session (holding ch->reused prompt tokens); choice 0
 * with the capture and, for n > 1, the fork wrapped around its callbacks. */
static int start_choice(completion *c, choice *ch)
{
    const graft__completion_request *r = &c->req;
    ch->started = true;
    ch->cap_tokens = (size_t)c->max_new + 1;
    ch->token_start = malloc(ch->cap_tokens * sizeof *ch->token_start);
    ch->token_ids = malloc(ch->cap_tokens * sizeof *ch->token_ids);
    if (c->width > 0)
        ch->logprobs = malloc(ch->cap_tokens * (size_t)c->width * sizeof *ch->logprobs);
    if (r->tools)
        ch->calls = json_array();
    if (ch->token_start == NULL || ch->token_ids == NULL || (c->width > 0 && ch->logprobs == NULL) ||
        (r->tools && ch->calls == NULL) || graft_detok_create(c->ctx->model, &ch->detok) != GRAFT_OK)
        return GRAFT_ENOMEM;
    graft__reasoning_start(&ch->thought, r->thought_tags, r->thought_opened);
    /* A forced call's opening tag ends the prompt: its text begins the answer's tool calls. */
    if (r->forced_call && !graft__append(&ch->text, &ch->len, &ch->cap, GRAFT__FORCED_CALL_OPEN,
                                         sizeof GRAFT__FORCED_CALL_OPEN - 1))
        return GRAFT_ENOMEM;
    ch->port = (graft__channel_port){&c->channel, ch->index, 0, 0, c->ctx->metrics};
    graft_update_cb up = graft__channel_on_update;
    graft_settled_cb st = graft__channel_on_settled;
    void *user = &ch->port;
    if (ch->index == 0) {
        if (graft_prompt_capture_create(c->ctx->cache, ch->session, c->prompt, c->n_prompt,
                                        &c->capture) != GRAFT_OK ||
            graft_prompt_capture_wrap(c->capture, &up, &st, &user) != GRAFT_OK) {
            graft_prompt_capture_free(c->capture);
            c->capture = NULL;
        }
        if (c->n_choices > 1) {
            c->inner_update = up;
            c->inner_settled = st;
            c->inner_user = user;
            up = fork_on_update;
            st = fork_on_settled;
            user = c;
        }
    }
    graft_generate_config cfg = graft_generate_default();
    cfg.max_new_tokens = c->max_new;
    cfg.ignore_eog = r->ignore_eos;
    cfg.sampling = r->sampling;
    cfg.sampling.seed += (uint64_t)ch->index;
    cfg.logit_bias = r->logit_bias;
    cfg.n_logit_bias = r->n_logit_bias;
    cfg.dry_sequence_breakers = r->dry_breakers_given ? (const char *const *)r->dry_breakers
                                                      : NULL;
    cfg.n_dry_sequence_breakers = r->n_dry_breakers;
    cfg.logprobs = c->width > 0; /* asked for, or best_of ranks by them */
    cfg.top_logprobs = r->top_logprobs;
    cfg.prompt_logprobs = c->prompt_logprobs && ch->index == 0;
    cfg.prefill_only = r->prompt_only;
    cfg.output_format = r->output_format;
    cfg.json_schema = r->json_schema;
    cfg.json_schema_len = r->json_schema ? strlen(r->json_schema) : 0;
    cfg.grammar = r->grammar;
    cfg.grammar_len = r->grammar_len;
    cfg.output_after = r->output_after;
    cfg.output_opens = r->output_opens;
    cfg.thought_budget = r->thought_budget;
    cfg.thought_close = r->thought_close;
    cfg.thought_opens = r->thought_opens;
    return graft_session_generate(ch->session, c->prompt + ch->reused,
                                  c->n_prompt - (size_t)ch->reused, &cfg, up, st, user, &ch->gen);
}

/* Choice i > 0 once its clone came: on the clone, or on a new session when the clone was
 * refused (the whole prompt computed again). A cancelled request starts nothing. */
static void start_forked(completion *c, bool cancelled)
{
    fork_slot arrived[GRAFT__MAX_CHOICES];
    int32_t n = 0;
    pthread_mutex_lock(&c->channel.mu);
    for (int32_t i = 1; i < c->n_choices; i++)
        if (c->slots[i].arrived && !c->choices[i].started && !c->choices[i].done)
            arrived[n++] = c->slots[i];
    for (int32_t k = 0; k < n; k++)
        c->slots[arrived[k].index].clone = NULL; /* now the choice's */
    pthread_mutex_unlock(&c->channel.mu);
    for (int32_t k = 0; k < n; k++) {
        choice *ch = &c->choices[arrived[k].index];
        ch->session = arrived[k].clone;
        ch->reused = ch->session ? graft_session_position(ch->session) : 0;
        if (cancelled) {
            ch->done = true;
            continue;
        }
        int rc = ch->session ? GRAFT_OK : graft_session_open(c->ctx->engine, &ch->session, NULL);
        if (rc == GRAFT_OK)
            rc = start_choice(c, ch);
        if (rc != GRAFT_OK) {
            ch->failed = ch->done = true;
            ch->fail_status = rc;
            graft_generation_free(ch->gen);
            ch->gen = NULL;
        }
    }
}

static void cancel_all(completion *c)
{
    c->cancelled = true;
    for (int32_t i = 0; i < c->n_choices; i++)
        if (c->choices[i].gen != NULL)
            graft_generation_cancel(c->choices[i].gen);
}

/* t_max_predict_ms (llama-server's, for code completion): whether a token whose text (piece)
 * breaks a line came after the limit, counted from the choice's first token; the answer then
 * ends with it. */
static bool past_time_limit(const choice *ch, const char *piece, size_t n)
{
    int32_t limit_ms = ch->c->req.t_max_predict_ms;
    return limit_ms > 0 && n > 0 && memchr(piece, '\n', n) != NULL &&
           graft__server_now_ns() - ch->first_token_ns > (uint64_t)limit_ms * 1000000u;
}

/* Takes what the engine sent to every choice: text appended, stop strings checked, choices
 * that ended marked done. False once all are done. */
static bool pump(completion *c, int timeout_ms)
{
    graft__channel_entry entries[TAKE];
    graft_token_logprob *lp = c->take_logprobs;
    uint32_t settled = 0;
    size_t k = graft__channel_take(&c->channel, entries, lp, TAKE, timeout_ms, &settled);
    for (size_t i = 0; i < k; i++) {
        choice *ch = &c->choices[entries[i].choice];
        if (ch->stopped || ch->n_tokens == ch->cap_tokens)
            continue;
        const char *piece = NULL;
        size_t n;
        ch->token_start[ch->n_tokens] = ch->len;
        ch->token_ids[ch->n_tokens] = entries[i].token;
        if (c->width > 0)
            memcpy(ch->logprobs + ch->n_tokens * (size_t)c->width, lp + i * (size_t)c->width,
                   (size_t)c->width * sizeof *lp);
        ch->n_tokens++;
        if (ch->n_tokens == 1)
            ch->first_token_ns = graft__server_now_ns();
        if (graft_detok_push(ch->detok, entries[i].token, &piece, &n) != GRAFT_OK)
            n = 0;
        if (n > 0)
            graft__append(&ch->text, &ch->len, &ch->cap, piece, n);
        graft__choice_release(ch);
        if (!ch->stopped && past_time_limit(ch, piece, n)) {
            ch->stopped = ch->limited = true;
            graft__choice_release(ch);
        }
    }
    if (c->n_choices > 1)
        start_forked(c, c->cancelled);
    bool all_done = true;
    for (int32_t i = 0; i < c->n_choices; i++) {
        choice *ch = &c->choices[i];
        if (ch->done)
            continue;
        if (!ch->started) {
            all_done = false;
            continue;
        }
        bool over = (settled >> i) & 1u;
        if (ch->stopped) {
            graft_generation_cancel(ch->gen);
            over = over || graft_generation_done(ch->gen);
        }
        if (over && !ch->stopped) {
            const char *piece;
            size_t n;
            if (graft_detok_flush(ch->detok, &piece, &n) == GRAFT_OK && n > 0)
                graft__append(&ch->text, &ch->len, &ch->cap, piece, n);
            if (c->req.forced_call && graft_generation_finish_reason(ch->gen) == GRAFT_FINISH_STOP)
                graft__append(&ch->text, &ch->len, &ch->cap, GRAFT__FORCED_CALL_CLOSE,
                              sizeof GRAFT__FORCED_CALL_CLOSE - 1); /* the call's object closed */
            graft__choice_release(ch);
        }
        if (over)
            graft__choice_settle_tools(ch);
        ch->done = over;
        all_done = all_done && over;
    }
    return !all_done;
}

void graft__completion_finish(completion *c, graft__request_log *log)
{
    uint64_t computed = 0, generated = 0;
    for (int32_t i = 0; i < c->n_choices; i++) {
        choice *ch = &c->choices[i];
        if (ch->gen == NULL)
            continue;
        graft_generation_cancel(ch->gen);
        graft_generation_wait(ch->gen);
        graft_generation_metrics m;
        graft_generation_metrics_get(ch->gen, &m);
        computed += (uint64_t)m.prompt_tokens_computed;
        generated += ch->n_tokens;
        if (i == 0 && log != NULL) {
            log->generated = true;
            log->reused = ch->reused;
            log->ttft_ms = m.time_to_first_token_ns / 1e6;
        }
    }
    if (log != NULL)
        log->computed = (int32_t)computed;
    graft__donors_leave(c->ctx->donors, c->donor); /* before its session closes */
    if (c->choices[0].gen != NULL) {
        atomic_fetch_add(&c->ctx->metrics->prompt_tokens_reused,
                         (unsigned long long)c->choices[0].reused);
        if (c->source_index >= 0)
            atomic_fetch_add(&c->ctx->metrics->reused_from[c->source_index],
                             (unsigned long long)c->choices[0].reused);
        atomic_fetch_add(&c->ctx->metrics->prompt_tokens_computed, computed);
        atomic_fetch_add(&c->ctx->metrics->generated_tokens, generated);
        atomic_fetch_add(&c->ctx->metrics->reasoning_tokens, graft__thought_tokens(c));
    }
    if (c->channel_ready) { /* every clone callback of the fork has run */
        pthread_mutex_lock(&c->channel.mu);
        while (c->fork_pending > 0)
            pthread_cond_wait(&c->channel.cv, &c->channel.mu);
        pthread_mutex_unlock(&c->channel.mu);
        for (int32_t i = 1; i < c->n_choices; i++)
            graft_session_close(c->slots[i].clone);
    }
    if (c->capture != NULL) {
        graft_prompt_capture_collect(c->capture);
        graft_prompt_capture_free(c->capture);
    }
    for (int32_t i = 0; i < c->n_choices; i++) {
        choice *ch = &c->choices[i];
        graft_generation_free(ch->gen);
        if (i == 0 && c->named != NULL)
            graft__sessions_release(c->ctx->sessions, c->named, ch->session);
        else
            graft_session_close(ch->session);
        graft_detok_free(ch->detok);
        free(ch->text);
        free(ch->token_start);
        free(ch->token_ids);
        free(ch->logprobs);
        json_decref(ch->calls);
    }
    if (c->channel_ready)
        graft__channel_free(&c->channel);
    graft__request_free(&c->req);
    free(c->prompt);
    free(c->echo_text);
    free(c->echo_starts);
    free(c->out);
    free(c->take_logprobs);
    if (c->shape != NULL)
        c->shape->free(c->shaped);
    free(c);
}

/* ---- whole responses -------------------------------------------------------------------------- */

/* The first status that is not OK among the choices (a choice stopped by a stop string is
 * fine), or GRAFT_OK; *message its text. */
int graft__completion_status(const completion *c, const char **message)
{
    for (int32_t i = 0; i < c->n_choices; i++) {
        const choice *ch = &c->choices[i];
        if (ch->failed) {
            *message = ch->fail_status == GRAFT_ECAPACITY
                           ? "cannot start a choice's generation: no session available"
                           : "cannot start a choice's generation";
            return ch->fail_status;
        }
        int status = ch->gen ? graft_generation_status(ch->gen) : GRAFT_OK;
        if (!ch->stopped && status != GRAFT_OK) {
            *message = graft_generation_error(ch->gen);
            return status;
        }
    }
    return GRAFT_OK;
}

static void whole_reply(completion *c, graft__reply *reply)
{
    const char *message = NULL;
    int status = graft__completion_status(c, &message);
    if (status != GRAFT_OK) {
        graft__reply_error(reply, status == GRAFT_ECAPACITY ? 503 : 500, "server_error", NULL,
                           "generation failed: %s", message ? message : graft_status_str(status));
        return;
    }
    choice *first = &c->choices[0];
    if (c->shape != NULL) {
        graft__reply_json(reply, 200, c->shape->whole(c));
        return;
    }
    if (c->llama) {
        graft__reply_json(reply, 200,
                          graft__llama_json(c, 0, first->len, true));
        return;
    }
    json_t *j = graft__envelope_json(c, c->req.chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    choice *answer[GRAFT__MAX_CHOICES];
    int32_t n = graft__answer_choices(c, answer);
    for (int32_t i = 0; i < n; i++) {
        choice *ch = answer[i];
        /* With tools the content ends where the calls begin (graft__choice_json adds what
         * did not parse as calls). */
        size_t content = c->req.tools ? ch->content_end : ch->len;
        json_array_append_new(choices, graft__choice_json(c, ch, 0, content, false, true));
    }
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", graft__usage_json(c));
    json_object_set_new(j, "graft", graft__graft_json(c));
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

void graft__completion_wait(completion *const *cs, size_t k, graft__channel *waker, int fd)
{
    bool done[GRAFT__MAX_CHOICES] = {false};
    bool gone = false;
    for (;;) {
        bool going = false;
        for (size_t p = 0; p < k; p++) {
            if (!done[p])
                done[p] = !pump(cs[p], waker != NULL ? 0 : GRAFT__SLICE_MS);
            going = going || !done[p];
        }
        if (!going)
            return;
        if (waker != NULL)
            graft__channel_wait_poke(waker, GRAFT__SLICE_MS);
        if (!gone && client_gone(fd)) {
            gone = true;
            atomic_fetch_add(&cs[0]->ctx->metrics->disconnects, 1);
        }
        if (gone || atomic_load(&cs[0]->ctx->cancel_all))
            for (size_t p = 0; p < k; p++)
                cancel_all(cs[p]);
    }
}

void graft__completion_record_ttft(completion *c)
{
    graft_generation_metrics m;
    graft_generation_metrics_get(c->choices[0].gen, &m);
    if (m.generated_tokens > 0)
        graft__metrics_ttft(c->ctx->metrics, m.time_to_first_token_ns + c->lookup_ns);
}

/* ---- the steps of a request ------------------------------------------------------------------- */

int graft__completion_prepare(completion *c, const json_t *body, graft__api api,
                              graft__reply *reply)
{
    graft__prompt_kind kind = api == GRAFT__API_CHAT     ? GRAFT__PROMPT_CHAT
                              : api == GRAFT__API_INFILL ? GRAFT__PROMPT_INFILL
                                                         : GRAFT__PROMPT_TEXT;
    char *param = NULL, *message = NULL;
    int rc = graft__request_parse(body, kind, c->ctx->chat, &c->req, &param, &message);
    if (rc != GRAFT_OK) {
        if (rc == GRAFT_EUNSUPPORTED)
            graft__reply_error(reply, 501, "server_error", NULL,
                               "this model has no chat template to render messages with");
        else
            graft__reply_error(reply, 400, "invalid_request_error", param, "%s",
                               message ? message : "invalid request");
        free(param);
        free(message);
        return -1;
    }
    if (c->llama && (c->req.best_of > 1 || c->req.echo)) {
        const char *field = c->req.echo ? "echo" : c->req.n_choices > 1 ? "n" : "best_of";
        graft__reply_error(reply, 400, "invalid_request_error", field,
                           "POST %s gives one completion without its prompt: use "
                           "/v1/completions for '%s'",
                           api == GRAFT__API_INFILL ? "/infill" : "/completion", field);
        return -1;
    }
    if (api == GRAFT__API_INFILL)
        strcpy(c->prompt_path, "input_prefix");
    c->n_choices = c->req.best_of;
    for (int32_t i = 0; i < c->n_choices; i++)
        c->choices[i] = (choice){.c = c, .index = i};
    c->width = c->req.logprobs                     ? 1 + c->req.top_logprobs
               : c->req.best_of > c->req.n_choices ? 1
                                                   : 0;
    return tokenize_prompt(c, reply);
}

/* Prepares, finds choice 0's session and starts it; -1 with the reply set. */
int graft__completion_begin(completion *c, const json_t *body, graft__api api,
                            const char *session_header, const char *owner, graft__reply *reply)
{
    if (graft__completion_prepare(c, body, api, reply) != 0 || fits_context(c, reply) != 0)
        return -1;
    if (c->req.session_id == NULL && session_header != NULL && session_header[0] != '\0')
        c->req.session_id = strndup(session_header, 128);
    c->prompt_logprobs = c->req.echo && c->req.logprobs;
    if (c->prompt_logprobs && c->req.session_id != NULL) {
        graft__reply_error(reply, 400, "invalid_request_error", "echo",
                           "'echo' with 'logprobs' computes the whole prompt afresh, so it "
                           "cannot continue a named session");
        return -1;
    }
    if ((c->req.echo && echo_prompt(c, reply) != 0) || find_session(c, owner, reply) != 0)
        return -1;
    c->max_new = c->req.prompt_only     ? 0
                 : c->req.max_tokens > 0 ? c->req.max_tokens
                                         : c->ctx->max_context - (int32_t)c->n_prompt;
    size_t cap = (size_t)c->n_choices * ((size_t)c->max_new + 1);
    if (graft__channel_init(&c->channel, cap, c->width) != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return -1;
    }
    c->channel_ready = true;
    if (c->width > 0) {
        c->take_logprobs = malloc((size_t)TAKE * (size_t)c->width * sizeof *c->take_logprobs);
        if (c->take_logprobs == NULL) {
            graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
            return -1;
        }
    }
    int rc = start_choice(c, &c->choices[0]);
    if (rc != GRAFT_OK) {
        graft_generation_free(c->choices[0].gen);
        c->choices[0].gen = NULL;
        graft__reply_error(reply, rc == GRAFT_ESHUTDOWN ? 503 : 500, "server_error", NULL,
                           "cannot start the generation: %s", graft_status_str(rc));
        return -1;
    }
    return 0;
}

completion *graft__completion_new(const graft__server_ctx *ctx, graft__api api,
                                  graft__reply *reply)
{
    completion *c = calloc(1, sizeof *c);
    if (c == NULL) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return NULL;
    }
    c->ctx = ctx;
    c->llama = api == GRAFT__API_LLAMA || api == GRAFT__API_INFILL;
    c->created = (long long)time(NULL);
    const char *prefix = api == GRAFT__API_CHAT        ? "chatcmpl-"
                         : api == GRAFT__API_RESPONSES ? "resp_"
                         : api == GRAFT__API_MESSAGES  ? "msg_"
                                                       : "cmpl-";
    unsigned char secret[12];
    if (api == GRAFT__API_RESPONSES && getrandom(secret, sizeof secret, 0) == sizeof secret) {
        /* a stored response is read back by its id: one that cannot be guessed */
        int at = snprintf(c->id, sizeof c->id, "%s", prefix);
        for (size_t i = 0; i < sizeof secret; i++)
            at += snprintf(c->id + at, sizeof c->id - (size_t)at, "%02x", secret[i]);
    } else {
        snprintf(c->id, sizeof c->id, "%s%llu", prefix,
                 (unsigned long long)atomic_fetch_add(&next_id, 1) + 1);
    }
    c->n_choices = 1; /* until parsed: what graft__completion_finish walks */
    c->source_index = -1;
    strcpy(c->prompt_path, "prompt");
    return c;
}

/* ---- streams ---------------------------------------------------------------------------------- */

void graft__append_event(char **buf, size_t *len, size_t *cap, const char *name, json_t *j)
{
    char *s = json_dumps(j, GRAFT__JSON_OUT);
    json_decref(j);
    if (s == NULL)
        return;
    if (name != NULL) {
        graft__append(buf, len, cap, "event: ", 7);
        graft__append(buf, len, cap, name, strlen(name));
        graft__append(buf, len, cap, "\n", 1);
    }
    graft__append(buf, len, cap, "data: ", 6);
    graft__append(buf, len, cap, s, strlen(s));
    graft__append(buf, len, cap, "\n\n", 2);
    free(s);
}

static void emit(completion *c, json_t *j)
{
    graft__append_event(&c->out, &c->out_len, &c->out_cap, NULL, j);
}

/* A chunk of choice ch: its text [from, upto) (or llama-server's shape). */
static json_t *chunk(completion *c, choice *ch, size_t from, size_t upto, bool final)
{
    if (c->llama)
        return graft__llama_json(c, from, upto, final);
    return graft__envelope_with_choice(c, graft__choice_json(c, ch, from, upto, true, final));
}

/* The events of one choice since the last: new content and new tool calls, and at its end
 * a last chunk with its finish reason. */
static void produce_choice(completion *c, choice *ch)
{
    if (!ch->started || ch->failed)
        return;
    if (c->req.echo && !ch->sent_echo) {
        if (!graft__echo_ready(c))
            return;
        emit(c, graft__envelope_with_choice(c, graft__echo_choice_json(c, ch)));
        ch->sent_echo = true;
    }
    size_t upto = graft__choice_stream_upto(ch);
    size_t calls = ch->calls ? json_array_size(ch->calls) : 0;
    size_t content = graft__reasoning_content_start(&ch->thought, ch->len), from, to;
    graft__reasoning_span(&ch->thought, ch->text, upto, &from, &to);
    /* new content, calls or thought (white space a thought may end with waits) */
    if (upto > (ch->sent > content ? ch->sent : content) || calls > ch->calls_sent ||
        to > ch->thought_sent)
        emit(c, chunk(c, ch, ch->sent, upto, false));
    ch->sent = upto > ch->sent ? upto : ch->sent;
    if (ch->done) /* the last chunk: the finish reason (and what did not parse as calls) */
        emit(c, chunk(c, ch, upto, upto, true));
}

void graft__completion_produce(completion *c, int timeout_ms)
{
    if (c->sent_final) {
        /* llama-server's stream ends with its stop chunk, a response's with its last event */
        if (!c->llama && !c->in_batch && c->shape == NULL)
            graft__append(&c->out, &c->out_len, &c->out_cap, "data: [DONE]\n\n", 14);
        c->sent_done = true;
        return;
    }
    if (atomic_load(&c->ctx->cancel_all))
        cancel_all(c);
    bool was_first = c->choices[0].n_tokens == 0;
    bool going = pump(c, timeout_ms);
    if (was_first && c->choices[0].n_tokens > 0)
        graft__completion_record_ttft(c);
    const char *message = NULL;
    int status = going ? GRAFT_OK : graft__completion_status(c, &message);
    if (status != GRAFT_OK) {
        if (c->shape != NULL)
            c->shape->failed(c, message ? message : graft_status_str(status));
        else
            emit(c, json_pack("{s:{s:s, s:s}}", "error", "message",
                              message ? message : graft_status_str(status), "type",
                              "server_error"));
        c->sent_final = true;
        return;
    }
    if (c->shape != NULL) {
        c->shape->events(c, going);
        c->sent_final = !going;
        return;
    }
    for (int32_t i = 0; i < c->n_choices; i++) {
        choice *ch = &c->choices[i];
        bool was_done = ch->done && ch->sent_final_chunk;
        if (!was_done)
            produce_choice(c, ch);
        ch->sent_final_chunk = ch->done;
    }
    if (going)
        return;
    if (c->req.include_usage && !c->llama && !c->in_batch) {
        json_t *u = graft__envelope_json(c, c->req.chat ? "chat.completion.chunk"
                                                        : "text_completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", graft__usage_json(c));
        json_object_set_new(u, "graft", graft__graft_json(c));
        emit(c, u);
    }
    c->sent_final = true;
}

static long stream_read(void *stream, char *buf, size_t max)
{
    completion *c = stream;
    while (c->out_len == c->out_off && !c->sent_done) {
        c->out_len = c->out_off = 0;
        graft__completion_produce(c, GRAFT__SLICE_MS);
    }
    return graft__take_pending(c->out, c->out_len, &c->out_off, buf, max);
}

long graft__take_pending(const char *pending, size_t len, size_t *off, char *buf, size_t max)
{
    if (*off == len)
        return -1;
    size_t n = len - *off < max ? len - *off : max;
    memcpy(buf, pending + *off, n);
    *off += n;
    return (long)n;
}

static void stream_free(void *stream, graft__request_log *log)
{
    graft__completion_finish(stream, log);
}

static const graft__stream_ops completion_stream = {stream_read, stream_free};

/* ---- the request ------------------------------------------------------------------------------ */

void graft__completion_run(const graft__server_ctx *ctx, const json_t *body, graft__api api, int fd,
                           const char *session_header, const char *owner, graft__reply *reply,
                           graft__request_log *log)
{
    if (api == GRAFT__API_TEXT && graft__batch_is(body)) {
        graft__batch_run(ctx, body, fd, session_header, owner, reply, log);
        return;
    }
    completion *c = graft__completion_new(ctx, api, reply);
    if (c == NULL)
        return;
    int begun = api == GRAFT__API_RESPONSES
                    ? graft__responses_begin(c, body, session_header, owner, reply)
                : api == GRAFT__API_MESSAGES
                    ? graft__messages_begin(c, body, session_header, owner, reply)
                    : graft__completion_begin(c, body, api, session_header, owner, reply);
    if (begun != 0) {
        graft__completion_finish(c, log);
        return;
    }
    if (c->req.stream) {
        reply->status = 200;
        reply->content_type = "text/event-stream";
        reply->stream = c;
        reply->stream_ops = &completion_stream;
        return;
    }
    graft__completion_wait(&c, 1, NULL, fd);
    if (c->cancelled)
        graft__reply_error(reply, 499, "client_closed", NULL, "the client went away");
    else
        whole_reply(c, reply);
    graft__completion_record_ttft(c);
    graft__completion_finish(c, log);
}
