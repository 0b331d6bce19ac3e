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
 * A request makes at most GRAFT__MAX_CHOICES completions (prompts times n), the bound that
 * n alone has. One refused prompt refuses the request, naming that prompt's path
 * ("prompt[2][5]"). Several prompts are not streamed, and do not go with a named session:
 * both are refused with 400.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

bool graft__batch_is(const json_t *body)
{
    const json_t *p = json_object_get(body, "prompt");
    if (!json_is_array(p) || json_array_size(p) == 0)
        return false;
    const json_t *first = json_array_get(p, 0);
    return json_is_array(first) || (json_is_string(first) && json_array_size(p) > 1);
}

/* Checks what the completions cannot check alone: the prompts' shapes (with their paths in
 * the batch), their count against n, no stream, no named session. 0, or -1 with the reply
 * set. */
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
    const json_t *n = json_object_get(body, "n");
    json_int_t choices = json_is_integer(n) ? json_integer_value(n) : 1;
    if (choices >= 1 && (json_int_t)k * choices > GRAFT__MAX_CHOICES) {
        graft__reply_error(reply, 400, "invalid_request_error", "prompt",
                           "'prompt' holds %zu prompts and 'n' is %lld: a request makes at "
                           "most %d completions", k, (long long)choices, GRAFT__MAX_CHOICES);
        return -1;
    }
    if (json_is_true(json_object_get(body, "stream"))) {
        graft__reply_error(reply, 400, "invalid_request_error", "stream",
                           "several prompts are not streamed: send one request per prompt, "
                           "or leave out 'stream'");
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

/* Waits until every prompt's choices are done: each pass takes what came for every prompt,
 * then waits a slice on the first that is still going (the others' tokens wait in their
 * channels meanwhile). A client that went away, or a shutdown, cancels them all. */
static void wait_all(const graft__server_ctx *ctx, completion **cs, size_t k, int fd)
{
    bool done[GRAFT__MAX_CHOICES] = {false};
    bool gone = false;
    for (;;) {
        size_t going = k;
        for (size_t p = 0; p < k; p++) {
            if (!done[p])
                done[p] = !graft__completion_pump(cs[p], 0);
            if (!done[p] && going == k)
                going = p;
        }
        if (going == k)
            return;
        done[going] = !graft__completion_pump(cs[going], GRAFT__SLICE_MS);
        if (!gone && graft__client_gone(fd)) {
            gone = true;
            atomic_fetch_add(&ctx->metrics->disconnects, 1);
        }
        if (gone || atomic_load(&ctx->cancel_all))
            for (size_t p = 0; p < k; p++)
                graft__completion_cancel(cs[p]);
    }
}

static void batch_reply(completion **cs, size_t k, graft__reply *reply)
{
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
    json_t *choices = json_array(), *each = json_array();
    size_t prompt = 0, generated = 0, cached = 0;
    for (size_t p = 0; p < k; p++) {
        completion *c = cs[p];
        for (int32_t i = 0; i < c->n_choices; i++)
            json_array_append_new(choices, graft__choice_json(c, &c->choices[i], 0,
                                                              c->choices[i].len, false, true));
        json_array_append_new(each, graft__graft_json(c));
        prompt += c->n_prompt;
        generated += graft__generated_tokens(c);
        cached += (size_t)c->choices[0].reused;
    }
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", graft__usage_counts_json(prompt, generated, cached));
    json_object_set_new(j, "graft", json_pack("{s:o}", "prompts", each));
    graft__reply_json(reply, 200, j);
}

void graft__batch_run(const graft__server_ctx *ctx, const json_t *body, int fd,
                      const char *session_header, const char *owner, graft__reply *reply,
                      graft__request_log *log)
{
    if (check_batch(body, session_header, reply) != 0)
        return;
    const json_t *prompts = json_object_get(body, "prompt");
    size_t k = json_array_size(prompts);
    json_t *one = json_copy((json_t *)body); /* the body with prompt p alone */
    if (one == NULL) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return;
    }
    completion *cs[GRAFT__MAX_CHOICES];
    size_t made = 0;
    bool refused = false;
    while (made < k && !refused) {
        completion *c = graft__completion_new(ctx, GRAFT__API_TEXT, reply);
        if (c == NULL)
            break;
        cs[made++] = c;
        snprintf(c->prompt_path, sizeof c->prompt_path, "prompt[%zu]", made - 1);
        if (json_object_set(one, "prompt", json_array_get(prompts, made - 1)) != 0) {
            graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
            refused = true;
            break;
        }
        refused = graft__completion_begin(c, one, GRAFT__API_TEXT, NULL, owner, reply) != 0;
        c->index_base = (int32_t)(made - 1) * c->n_choices;
    }
    refused = refused || made < k; /* made < k: out of memory for a completion */
    json_decref(one);
    if (!refused) {
        wait_all(ctx, cs, k, fd);
        if (cs[0]->cancelled)
            graft__reply_error(reply, 499, "client_closed", NULL, "the client went away");
        else
            batch_reply(cs, k, reply);
    }
    graft__request_log sum = {0};
    for (size_t p = 0; p < made; p++) {
        graft__request_log each = {0};
        if (!refused)
            graft__completion_record_ttft(cs[p]);
        graft__completion_finish(cs[p], &each);
        sum.generated = sum.generated || each.generated;
        sum.reused += each.reused;
        sum.computed += each.computed;
        if (p == 0)
            sum.ttft_ms = each.ttft_ms;
    }
    if (log != NULL)
        *log = sum;
}
