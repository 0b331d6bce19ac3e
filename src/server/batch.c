/*
 * batch.c: a completions request with several prompts (POST /v1/completions with `prompt`
 * an array of strings, or of token-id arrays, as OpenAI and vLLM take it), answered as one
 * response.
 *
 * Each prompt is a completion of its own (completion.c), begun in the order given, so that
 * a later prompt can take an earlier one's prompt KV as any request can (the prefix cache,
 * active reuse); they then generate together in the engine's batches. Choice j of prompt p
 * is the response's choice p * n + j, the same bits that a request with that prompt alone
 * gets (DESIGN.md invariant 1). `usage` counts every prompt; `graft.prompts` holds each
 * prompt's `graft` object.
 *
 * Streamed, the prompts' events are interleaved as they come, each chunk carrying its
 * choice's index, under the one id of the request; then one usage chunk (when asked for)
 * and one [DONE]. Every prompt's channel forwards its wake-ups to the batch's waker, on
 * which the request's thread waits between passes over all of them.
 *
 * A request makes at most GRAFT__MAX_CHOICES completions (prompts times n), the bound that
 * n alone has. One refused prompt refuses the request, naming that prompt's path
 * ("prompt[2][5]"). Several prompts do not go with a named session: that is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

typedef struct batch {
    const graft__server_ctx *ctx;
    completion *cs[GRAFT__MAX_CHOICES]; /* prompt p's completion */
    size_t k;
    graft__channel waker;  /* poked by every prompt's channel (their `forward`) */
    /* streaming */
    char *out;             /* pending event bytes */
    size_t len, cap, off;
    bool ended;            /* the usage chunk and [DONE] are out */
} batch;

bool graft__batch_is(const json_t *body)
{
    const json_t *p = json_object_get(body, "prompt");
    if (!json_is_array(p) || json_array_size(p) == 0)
        return false;
    const json_t *first = json_array_get(p, 0);
    return json_is_array(first) || (json_is_string(first) && json_array_size(p) > 1);
}

/* Checks what the completions cannot check alone: the prompts' shapes (with their paths in
 * the batch), their count against n, no named session. 0, or -1 with the reply set. */
static int check_batch(const json_t *body, const char *session_header, graft__reply *reply)
{
    const json_t *prompts = json_object_get(body, "prompt");
    size_t k = json_array_size(prompts);
    for (size_t p = 0; p < k; p++) {
        const json_t *one = json_array_get(prompts, p);
        char path[64];
        snprintf(path, sizeof path, "prompt[%zu]", p);
        if (json_is_string(one))
            continue;
        if (!json_is_array(one) || json_array_size(one) == 0) {
            graft__reply_error(reply, 400, "invalid_request_error", path,
                               "'%s' must be a string or a non-empty array of token ids", path);
            return -1;
        }
        for (size_t i = 0; i < json_array_size(one); i++) {
            int32_t id;
            if (!graft__json_token_id(json_array_get(one, i), &id)) {
                snprintf(path, sizeof path, "prompt[%zu][%zu]", p, i);
                graft__reply_error(reply, 400, "invalid_request_error", path,
                                   "'%s' must be a token id", path);
                return -1;
            }
        }
    }
    const json_t *n = json_object_get(body, "n"), *best_of = json_object_get(body, "best_of");
    json_int_t choices = json_is_integer(n) ? json_integer_value(n) : 1;
    const char *field = "n";
    if (json_is_integer(best_of) && json_integer_value(best_of) > choices) {
        choices = json_integer_value(best_of);
        field = "best_of";
    }
    if (choices >= 1 && (json_int_t)k * choices > GRAFT__MAX_CHOICES) {
        graft__reply_error(reply, 400, "invalid_request_error", "prompt",
                           "'prompt' holds %zu prompts and '%s' is %lld: a request makes at "
                           "most %d completions", k, field, (long long)choices,
                           GRAFT__MAX_CHOICES);
        return -1;
    }
    const json_t *sid = json_object_get(body, "session_id");
    if ((sid != NULL && !json_is_null(sid)) ||
        (session_header != NULL && session_header[0] != '\0')) {
        graft__reply_error(reply, 400, "invalid_request_error", "prompt",
                           "a named session takes one prompt per request");
        return -1;
    }
    return 0;
}

/* Sets j's usage (every prompt's) and graft object ({prompts: [each prompt's]}). */
static void set_totals(json_t *j, completion *const *cs, size_t k)
{
    json_t *each = json_array();
    size_t prompt = 0, generated = 0, cached = 0;
    for (size_t p = 0; p < k; p++) {
        json_array_append_new(each, graft__graft_json(cs[p]));
        prompt += cs[p]->n_prompt;
        generated += graft__generated_tokens(cs[p]);
        cached += (size_t)cs[p]->choices[0].reused;
    }
    json_object_set_new(j, "usage", graft__usage_counts_json(prompt, generated, cached));
    json_object_set_new(j, "graft", json_pack("{s:o}", "prompts", each));
}

static void batch_reply(const batch *b, graft__reply *reply)
{
    completion *const *cs = b->cs;
    size_t k = b->k;
    for (size_t p = 0; p < k; p++) {
        const char *message = NULL;
        int status = graft__completion_status(cs[p], &message);
        if (status != GRAFT_OK) {
            graft__reply_error(reply, status == GRAFT_ECAPACITY ? 503 : 500, "server_error",
                               NULL, "generation failed for prompt[%zu]: %s", p,
                               message ? message : graft_status_str(status));
            return;
        }
    }
    json_t *j = graft__envelope_json(cs[0], "text_completion");
    json_t *choices = json_array();
    for (size_t p = 0; p < k; p++) {
        choice *answer[GRAFT__MAX_CHOICES];
        int32_t n = graft__answer_choices(cs[p], answer);
        for (int32_t i = 0; i < n; i++)
            json_array_append_new(choices, graft__choice_json(cs[p], answer[i], 0,
                                                              answer[i]->len, false, true));
    }
    json_object_set_new(j, "choices", choices);
    set_totals(j, cs, k);
    graft__reply_json(reply, 200, j);
}

/* ---- streams ---------------------------------------------------------------------------------- */

/* Moves c's pending events (whole events: c writes them whole) to the batch's. */
static void take_events(batch *b, completion *c)
{
    if (c->out_len > c->out_off)
        graft__append(&b->out, &b->len, &b->cap, c->out + c->out_off, c->out_len - c->out_off);
    c->out_len = c->out_off = 0;
}

/* The end of the stream: the usage chunk when asked for, then [DONE]. */
static void end_stream(batch *b)
{
    if (b->cs[0]->req.include_usage) {
        json_t *u = graft__envelope_json(b->cs[0], "text_completion");
        json_object_set_new(u, "choices", json_array());
        set_totals(u, b->cs, b->k);
        graft__append_event(&b->out, &b->len, &b->cap, NULL, u);
    }
    graft__append(&b->out, &b->len, &b->cap, "data: [DONE]\n\n", 14);
    b->ended = true;
}

static long stream_read(void *stream, char *buf, size_t max)
{
    batch *b = stream;
    while (b->off == b->len && !b->ended) {
        b->len = b->off = 0;
        bool going = false;
        for (size_t p = 0; p < b->k; p++) {
            if (!b->cs[p]->sent_done)
                graft__completion_produce(b->cs[p], 0);
            take_events(b, b->cs[p]);
            going = going || !b->cs[p]->sent_done;
        }
        if (!going)
            end_stream(b);
        else if (b->len == 0)
            graft__channel_wait_poke(&b->waker, GRAFT__SLICE_MS);
    }
    return graft__take_pending(b->out, b->len, &b->off, buf, max);
}

/* Finishes every prompt's completion (log: their figures added up, choice 0's of prompt 0
 * for the time to first token) and frees b. */
static void finish_all(batch *b, graft__request_log *log)
{
    graft__request_log sum = {0};
    for (size_t p = 0; p < b->k; p++) {
        graft__request_log each = {0};
        graft__completion_finish(b->cs[p], &each);
        sum.generated = sum.generated || each.generated;
        sum.reused += each.reused;
        sum.computed += each.computed;
        if (p == 0)
            sum.ttft_ms = each.ttft_ms;
    }
    if (log != NULL)
        *log = sum;
    graft__channel_free(&b->waker);
    free(b->out);
    free(b);
}

static void stream_free(void *stream, graft__request_log *log)
{
    finish_all(stream, log);
}

static const graft__stream_ops batch_stream = {stream_read, stream_free};

/* ---- the request ------------------------------------------------------------------------------ */

/* Begins a completion per prompt, in order, into b (b->k of them made); false with the reply
 * set when a prompt is refused or memory runs out. */
static bool begin_all(batch *b, const json_t *body, const char *owner, graft__reply *reply)
{
    const json_t *prompts = json_object_get(body, "prompt");
    json_t *one = json_copy((json_t *)body); /* the body with prompt p alone */
    bool ok = one != NULL;
    if (!ok)
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
    for (size_t p = 0; ok && p < json_array_size(prompts); p++) {
        completion *c = graft__completion_new(b->ctx, GRAFT__API_TEXT, reply);
        if (c == NULL) {
            ok = false;
            break;
        }
        b->cs[b->k++] = c;
        snprintf(c->prompt_path, sizeof c->prompt_path, "prompt[%zu]", p);
        if (p > 0) { /* one request, one id */
            memcpy(c->id, b->cs[0]->id, sizeof c->id);
            c->created = b->cs[0]->created;
        }
        if (json_object_set(one, "prompt", json_array_get(prompts, p)) != 0) {
            graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
            ok = false;
            break;
        }
        ok = graft__completion_begin(c, one, GRAFT__API_TEXT, NULL, owner, reply) == 0;
        c->index_base = (int32_t)p * c->req.n_choices;
        c->in_batch = true;
    }
    json_decref(one);
    return ok;
}

void graft__batch_run(const graft__server_ctx *ctx, const json_t *body, int fd,
                      const char *session_header, const char *owner, graft__reply *reply,
                      graft__request_log *log)
{
    if (check_batch(body, session_header, reply) != 0)
        return;
    batch *b = calloc(1, sizeof *b);
    if (b == NULL) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return;
    }
    b->ctx = ctx;
    if (graft__channel_init(&b->waker, 1, 0) != GRAFT_OK) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        free(b);
        return;
    }
    if (!begin_all(b, body, owner, reply)) {
        finish_all(b, log);
        return;
    }
    for (size_t p = 0; p < b->k; p++) { /* wake-ups before this are found by the first pass */
        graft__channel *ch = &b->cs[p]->channel;
        pthread_mutex_lock(&ch->mu);
        ch->forward = &b->waker;
        pthread_mutex_unlock(&ch->mu);
    }
    if (b->cs[0]->req.stream) {
        reply->status = 200;
        reply->content_type = "text/event-stream";
        reply->stream = b;
        reply->stream_ops = &batch_stream;
        return;
    }
    graft__completion_wait(b->cs, b->k, &b->waker, fd);
    if (b->cs[0]->cancelled)
        graft__reply_error(reply, 499, "client_closed", NULL, "the client went away");
    else
        batch_reply(b, reply);
    for (size_t p = 0; p < b->k; p++)
        graft__completion_record_ttft(b->cs[p]);
    finish_all(b, log);
}
