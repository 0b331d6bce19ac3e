/*
 * response.c: the JSON a completion request answers with (completion.h): OpenAI's shapes
 * (choices with text or a message, tool calls, log-probabilities, usage, chunks) and
 * llama-server's for POST /completion, with graft's own object (where the prompt came
 * from, tokens reused and computed, times).
 *
 * Log-probabilities (and token ids, asked for with return_tokens) go with the text they
 * produced: a chunk carries the tokens whose text begins in it; the final one carries the
 * rest (tokens that only made text a stop string cut are dropped with it). A token is shown
 * as the text it decodes to on its own; an echoed prompt's tokens as their parts of its
 * text (so that they spell it), the first of them with no log-probability (null).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

const char *graft__choice_finish_reason(const choice *ch)
{
    bool calls = ch->calls != NULL && json_array_size(ch->calls) > 0;
    const char *called = ch->c->req.legacy_functions ? "function_call" : "tool_calls";
    if (ch->stopped)
        return calls ? called : "stop";
    switch (ch->gen ? graft_generation_finish_reason(ch->gen) : GRAFT_FINISH_NONE) {
    case GRAFT_FINISH_STOP:
        return calls ? called : "stop";
    case GRAFT_FINISH_LENGTH:
        return "length";
    default:
        return NULL;
    }
}

size_t graft__generated_tokens(const completion *c)
{
    size_t generated = 0;
    for (int32_t i = 0; i < c->n_choices; i++)
        generated += c->choices[i].n_tokens;
    return generated;
}

/* A candidate's mean log-probability per token (-INFINITY without tokens). */
static double mean_logprob(const completion *c, const choice *ch)
{
    if (ch->n_tokens == 0)
        return -INFINITY;
    double sum = 0.0;
    for (size_t t = 0; t < ch->n_tokens; t++)
        sum += ch->logprobs[t * (size_t)c->width].logprob;
    return sum / (double)ch->n_tokens;
}

int32_t graft__answer_choices(completion *c, choice **out)
{
    double score[GRAFT__MAX_CHOICES];
    for (int32_t i = 0; i < c->n_choices; i++) {
        out[i] = &c->choices[i];
        score[i] = c->n_choices > c->req.n_choices ? mean_logprob(c, out[i]) : 0.0;
    }
    for (int32_t i = 1; i < c->n_choices; i++) /* stable: ties keep the lower index first */
        for (int32_t k = i; k > 0 && score[out[k]->index] > score[out[k - 1]->index]; k--) {
            choice *t = out[k];
            out[k] = out[k - 1];
            out[k - 1] = t;
        }
    int32_t n = c->n_choices < c->req.n_choices ? c->n_choices : c->req.n_choices;
    for (int32_t i = 0; i < n; i++)
        out[i]->index = i;
    return n;
}

json_t *graft__usage_counts_json(size_t prompt, size_t generated, size_t cached)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)generated, "total_tokens",
                     (json_int_t)(prompt + generated), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached);
}

size_t graft__thought_tokens(const completion *c)
{
    size_t n = 0;
    for (int32_t i = 0; i < c->n_choices; i++) {
        const choice *ch = &c->choices[i];
        if (ch->thought.state == GRAFT__THOUGHT_OPEN) { /* cut in the thought: all of it */
            n += ch->n_tokens;
        } else if (ch->thought.state == GRAFT__THOUGHT_CLOSED) {
            size_t content = graft__reasoning_content_start(&ch->thought, ch->len);
            for (size_t t = 0; t < ch->n_tokens && ch->token_start[t] < content; t++)
                n++;
        }
    }
    return n;
}

json_t *graft__usage_json(const completion *c)
{
    json_t *j = graft__usage_counts_json(c->n_prompt, graft__generated_tokens(c),
                                         (size_t)c->choices[0].reused);
    if (c->req.thought_tags != NULL)
        json_object_set_new(j, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens",
                                      (json_int_t)graft__thought_tokens(c)));
    return j;
}

json_t *graft__graft_json(const completion *c)
{
    graft_generation_metrics first;
    graft_generation_metrics_get(c->choices[0].gen, &first);
    int32_t computed = 0;
    for (int32_t i = 0; i < c->n_choices; i++) {
        graft_generation_metrics m;
        if (c->choices[i].gen == NULL)
            continue;
        graft_generation_metrics_get(c->choices[i].gen, &m);
        computed += m.prompt_tokens_computed;
    }
    return json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f}", "source", c->source,
                     "tokens_reused", (int)c->choices[0].reused, "tokens_computed",
                     (int)computed, "clone_ms",
                     (c->lookup_ns - c->donor_result.wait_ns) / 1e6, "wait_ms",
                     c->donor_result.wait_ns / 1e6, "queue_ms", first.queue_wait_ns / 1e6,
                     "ttft_ms", (first.time_to_first_token_ns + c->lookup_ns) / 1e6);
}

json_t *graft__envelope_json(const completion *c, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", c->id, "object", object, "created",
                     (json_int_t)c->created, "model", c->ctx->config->alias,
                     "system_fingerprint", "graft-" GRAFT_VERSION);
}

json_t *graft__envelope_with_choice(const completion *c, json_t *choice)
{
    json_t *j = graft__envelope_json(c, c->req.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    return j;
}

/* ---- log-probabilities ------------------------------------------------------------------------ */

/* The text token decodes to on its own (to free). */
static char *token_piece(const graft_model *model, int32_t token)
{
    graft_detok *d = NULL;
    char *out = NULL;
    const char *a = "", *b = "";
    size_t na = 0, nb = 0;
    if (graft_detok_create(model, &d) == GRAFT_OK && graft_detok_push(d, token, &a, &na) == GRAFT_OK) {
        out = malloc(na + 1);
        if (out != NULL)
            memcpy(out, a, na);
        if (out != NULL && graft_detok_flush(d, &b, &nb) == GRAFT_OK && nb > 0) {
            char *grown = realloc(out, na + nb + 1);
            if (grown != NULL)
                memcpy(grown + na, b, nb);
            else
                free(out);
            out = grown;
            na = grown ? na + nb : 0;
        }
        if (out != NULL)
            out[na] = '\0';
    }
    graft_detok_free(d);
    return out ? out : strdup("");
}

/* {token, logprob, bytes} of one entry (chat's shape), with llama-server's id when with_id. */
static json_t *entry_json(const graft_model *model, const graft_token_logprob *e, bool with_id)
{
    char *piece = token_piece(model, e->token);
    json_t *j = json_pack("{s:s, s:f, s:o}", "token", piece, "logprob", (double)e->logprob,
                          "bytes", graft__token_bytes_json(model, e->token));
    if (with_id)
        json_object_set_new(j, "id", json_integer(e->token));
    free(piece);
    return j;
}

/* ch's tokens [from, to) as entries, each with its alternatives as top_logprobs: chat's
 * logprobs content, or (with_id) llama-server's completion_probabilities. */
static json_t *entries_json(const completion *c, const choice *ch, size_t from, size_t to,
                            bool with_id)
{
    const graft_model *model = c->ctx->model;
    size_t width = (size_t)c->width;
    json_t *entries = json_array();
    for (size_t t = from; t < to; t++) {
        const graft_token_logprob *e = ch->logprobs + t * width;
        json_t *j = entry_json(model, &e[0], with_id);
        json_t *top = json_array();
        for (size_t k = 1; k < width; k++)
            json_array_append_new(top, entry_json(model, &e[k], with_id));
        json_object_set_new(j, "top_logprobs", top);
        json_array_append_new(entries, j);
    }
    return entries;
}

/* The completions API's {tokens, token_logprobs, top_logprobs, text_offset}, filled a token
 * at a time. */
typedef struct legacy_logprobs {
    json_t *tokens, *lps, *tops, *offsets;
} legacy_logprobs;

static legacy_logprobs legacy_new(void)
{
    return (legacy_logprobs){json_array(), json_array(), json_array(), json_array()};
}

/* Appends a token shown as `shown` (its entries e: width of them, or NULL: none, as for a
 * prompt's first token) whose text begins at offset. */
static void legacy_append(const graft_model *model, legacy_logprobs *l, json_t *shown,
                          const graft_token_logprob *e, size_t width, size_t offset)
{
    json_array_append_new(l->tokens, shown);
    json_array_append_new(l->lps, e != NULL ? json_real(e[0].logprob) : json_null());
    json_t *top = e != NULL && width > 1 ? json_object() : json_null();
    for (size_t k = 1; e != NULL && k < width; k++) {
        char *alt = token_piece(model, e[k].token);
        if (json_object_get(top, alt) == NULL) /* tokens of the same text: the likelier */
            json_object_set_new(top, alt, json_real(e[k].logprob));
        free(alt);
    }
    json_array_append_new(l->tops, top);
    json_array_append_new(l->offsets, json_integer((json_int_t)offset));
}

/* echo: the prompt's tokens, the first without a log-probability, each shown as its part of
 * the echoed text, so that they spell it. */
static void legacy_append_prompt(const completion *c, legacy_logprobs *l)
{
    for (size_t t = 0; t < c->n_prompt; t++) {
        const graft_token_logprob *e = NULL;
        size_t n = 0;
        if (t > 0)
            graft_generation_prompt_logprobs(c->choices[0].gen, t - 1, &e, &n);
        size_t end = t + 1 < c->n_prompt ? c->echo_starts[t + 1] : c->echo_len;
        json_t *shown = json_stringn(c->echo_text ? c->echo_text + c->echo_starts[t] : "",
                                     end - c->echo_starts[t]);
        legacy_append(c->ctx->model, l, shown, e, n, c->echo_starts[t]);
    }
}

static json_t *legacy_json(legacy_logprobs *l)
{
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", l->tokens, "token_logprobs", l->lps,
                     "top_logprobs", l->tops, "text_offset", l->offsets);
}

/* The tokens [from, to) of ch: chat's {"content": [...]} or the completions API's shape,
 * after the echoed prompt's tokens when with_prompt. */
static json_t *logprobs_json(const completion *c, const choice *ch, size_t from, size_t to,
                             bool with_prompt)
{
    const graft_model *model = c->ctx->model;
    size_t width = (size_t)c->width;
    if (c->req.chat)
        return json_pack("{s:o}", "content", entries_json(c, ch, from, to, false));
    legacy_logprobs l = legacy_new();
    if (with_prompt)
        legacy_append_prompt(c, &l);
    for (size_t t = from; t < to; t++) {
        char *piece = token_piece(model, ch->token_ids[t]);
        legacy_append(model, &l, json_string(piece), ch->logprobs + t * width, width,
                      c->echo_len + ch->token_start[t]);
        free(piece);
    }
    return legacy_json(&l);
}

json_t *graft__choice_token_logprobs(const completion *c, const choice *ch, size_t from,
                                     size_t to)
{
    json_t *chat = logprobs_json(c, ch, from, to, false);
    json_t *entries = json_incref(json_object_get(chat, "content"));
    json_decref(chat);
    return entries;
}

bool graft__echo_ready(const completion *c)
{
    const graft_token_logprob *e = NULL;
    size_t n = 0;
    return !c->prompt_logprobs || c->n_prompt < 2 || graft_generation_done(c->choices[0].gen) ||
           graft_generation_prompt_logprobs(c->choices[0].gen, 0, &e, &n) == GRAFT_OK;
}

json_t *graft__echo_choice_json(completion *c, choice *ch)
{
    json_t *j = json_pack("{s:i, s:s%}", "index", (int)(c->index_base + ch->index), "text",
                          c->echo_text ? c->echo_text : "", c->echo_len);
    json_t *lp = json_null();
    if (c->req.logprobs) {
        legacy_logprobs l = legacy_new();
        legacy_append_prompt(c, &l);
        lp = legacy_json(&l);
    }
    json_object_set_new(j, "logprobs", lp);
    json_object_set_new(j, "finish_reason", json_null());
    return j;
}

/* The tokens a chunk ending at `upto` carries: up to the first that begins at or after it;
 * the final one all that made text kept (every token when no stop string cut it). */
static size_t tokens_upto(const choice *ch, size_t upto, bool final)
{
    size_t t = ch->n_tokens_sent;
    if (final && !ch->stopped)
        return ch->n_tokens;
    size_t limit = final ? ch->len : upto;
    while (t < ch->n_tokens && ch->token_start[t] < limit)
        t++;
    return t;
}

/* return_tokens: the ids of ch's tokens from the first not given yet to `to`. */
static json_t *token_ids_json(const choice *ch, size_t to)
{
    json_t *ids = json_array();
    for (size_t t = ch->n_tokens_sent; t < to; t++)
        json_array_append_new(ids, json_integer(ch->token_ids[t]));
    return ids;
}

/* ---- choices ------------------------------------------------------------------------------------ */

/* The content of ch in [from, upto) (not before the content's start, after a thought), and
 * at the end of a content that stops where the calls began, the tool-call text that did not
 * parse (a stream gave it out before its final chunk). */
static json_t *content_json(const choice *ch, size_t from, size_t upto, bool final)
{
    const char *text = ch->text ? ch->text : "";
    size_t start = graft__reasoning_content_start(&ch->thought, ch->len);
    from = from > start ? from : start;
    if (!(final && ch->c->req.tools && ch->calls_bad && upto < ch->len))
        return json_stringn(text + from, upto > from ? upto - from : 0);
    size_t head = upto > from ? upto - from : 0, tail = ch->len - ch->tools_parsed;
    char *joined = malloc(head + tail + 1);
    if (joined == NULL)
        return json_string("");
    memcpy(joined, text + from, head);
    memcpy(joined + head, text + ch->tools_parsed, tail);
    json_t *j = json_stringn(joined, head + tail);
    free(joined);
    return j;
}

json_t *graft__choice_thought(choice *ch, size_t upto, bool delta)
{
    size_t from, to;
    graft__reasoning_span(&ch->thought, ch->text, delta ? upto : ch->len, &from, &to);
    if (delta) {
        from = from > ch->thought_sent ? from : ch->thought_sent;
        ch->thought_sent = to > ch->thought_sent ? to : ch->thought_sent;
    }
    return to > from ? json_stringn(ch->text + from, to - from) : NULL;
}

json_t *graft__choice_json(completion *c, choice *ch, size_t from, size_t upto, bool delta,
                           bool final)
{
    json_t *j = json_pack("{s:i}", "index", (int)(c->index_base + ch->index));
    json_t *content = content_json(ch, from, upto, final);
    size_t calls = ch->calls ? json_array_size(ch->calls) : 0;
    if (c->req.chat) {
        json_t *msg = json_object();
        if (!delta || !ch->sent_role)
            json_object_set_new(msg, "role", json_string("assistant"));
        ch->sent_role = true;
        json_t *thought = graft__choice_thought(ch, upto, delta);
        if (thought != NULL)
            json_object_set_new(msg, "reasoning_content", thought);
        if (!delta && calls > 0 && json_string_length(content) == 0) {
            json_decref(content);
            content = json_null();
        }
        if (delta && (calls > ch->calls_sent || thought != NULL) &&
            json_string_length(content) == 0)
            json_decref(content); /* a delta of tool calls or of the thought alone */
        else
            json_object_set_new(msg, "content", content);
        if (calls > ch->calls_sent && c->req.legacy_functions) { /* one call (one_call) */
            json_object_set_new(msg, "function_call",
                                json_deep_copy(json_object_get(json_array_get(ch->calls, 0),
                                                               "function")));
            ch->calls_sent = calls;
        } else if (calls > ch->calls_sent) {
            json_t *out = json_array();
            for (size_t k = delta ? ch->calls_sent : 0; k < calls; k++) {
                json_t *call = json_deep_copy(json_array_get(ch->calls, k));
                if (delta)
                    json_object_set_new(call, "index", json_integer((json_int_t)k));
                json_array_append_new(out, call);
            }
            json_object_set_new(msg, "tool_calls", out);
            ch->calls_sent = calls;
        }
        json_object_set_new(j, delta ? "delta" : "message", msg);
    } else if (c->req.echo && !delta) { /* the prompt, then the answer */
        size_t n = json_string_length(content);
        char *joined = malloc(c->echo_len + n + 1);
        if (joined != NULL) {
            memcpy(joined, c->echo_text ? c->echo_text : "", c->echo_len);
            memcpy(joined + c->echo_len, json_string_value(content), n);
        }
        json_object_set_new(j, "text", joined ? json_stringn(joined, c->echo_len + n)
                                              : json_string(""));
        free(joined);
        json_decref(content);
    } else {
        json_object_set_new(j, "text", content);
    }
    size_t to = tokens_upto(ch, upto, final);
    json_object_set_new(j, "logprobs",
                        c->req.logprobs ? logprobs_json(c, ch, ch->n_tokens_sent, to,
                                                        c->req.echo && !delta)
                                        : json_null());
    if (c->req.return_tokens)
        json_object_set_new(j, "tokens", token_ids_json(ch, to));
    ch->n_tokens_sent = to;
    const char *finish = final ? graft__choice_finish_reason(ch) : NULL;
    json_object_set_new(j, "finish_reason", finish ? json_string(finish) : json_null());
    return j;
}

json_t *graft__llama_json(completion *c, size_t from, size_t upto, bool stop)
{
    choice *ch = &c->choices[0];
    graft_generation_metrics m;
    graft_generation_metrics_get(ch->gen, &m);
    const char *reason = graft__choice_finish_reason(ch);
    json_t *j = json_pack("{s:s%, s:b, s:i}", "content", ch->text ? ch->text + from : "",
                          upto - from, "stop", stop, "id_slot", 0);
    if (c->req.return_tokens || c->req.logprobs) {
        size_t to = tokens_upto(ch, upto, stop);
        if (c->req.return_tokens)
            json_object_set_new(j, "tokens", token_ids_json(ch, to));
        if (c->req.logprobs && to > ch->n_tokens_sent)
            json_object_set_new(j, "completion_probabilities",
                                entries_json(c, ch, ch->n_tokens_sent, to, true));
        ch->n_tokens_sent = to;
    }
    if (!stop)
        return j;
    json_object_set_new(j, "model", json_string(c->ctx->config->alias));
    json_object_set_new(j, "tokens_predicted", json_integer((json_int_t)ch->n_tokens));
    json_object_set_new(j, "tokens_evaluated", json_integer((json_int_t)c->n_prompt));
    json_object_set_new(j, "tokens_cached", json_integer(ch->reused));
    json_object_set_new(j, "truncated", json_boolean(c->prompt_cut));
    json_object_set_new(j, "stop_type", json_string(ch->limited   ? "limit"
                                                    : ch->stopped ? "word"
                                                    : reason && strcmp(reason, "length") == 0
                                                        ? "limit"
                                                        : "eos"));
    json_object_set_new(j, "stopping_word", json_string(ch->stop_word ? ch->stop_word : ""));
    json_object_set_new(j, "timings",
                        json_pack("{s:i, s:i, s:f}", "prompt_n", (int)m.prompt_tokens_computed,
                                  "predicted_n", (int)ch->n_tokens, "predicted_per_second",
                                  m.decode_tokens_per_s));
    json_object_set_new(j, "graft", graft__graft_json(c));
    return j;
}
