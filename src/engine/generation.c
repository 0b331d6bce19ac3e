/*
 * generation.c: generations (graft_generation in include/graft.h): submission, admission,
 * token delivery, settling, and the handle's getters.
 *
 * Life of a generation: graft_session_generate allocates everything it will need (prompt
 * copy, stop list, sampler, output buffer) on the caller's thread and queues it. The engine
 * thread admits it (or settles it at once: session busy, prompt too long, shutting down);
 * the scheduler feeds its prompt in chunks, then one token per step; after each step that
 * gave it logits, graft__gen_deliver samples a token with the generation's own sampler,
 * reports it and decides whether it ends. graft__gen_settle runs exactly once per admitted
 * or refused generation: it records the outcome, runs on_settled and marks it done.
 *
 * Ownership: the handle is reference counted: one reference for the caller (dropped by
 * graft_generation_free), one for the engine (dropped when settled). Nothing is allocated
 * on the engine thread except the error message (its failure leaves the status's text).
 *
 * Locking: gen->mu guards the metrics and the done wait; the cancel flag, done flag,
 * finish reason and reference count are atomics. Results (status, error, tokens) are
 * written before the release store of `finish`, so a reader that sees a finish reason sees
 * them.
 */
#include <math.h>
#include <string.h>

#include "engine/dry.h"
#include "engine/engine.h"

graft_generate_config graft_generate_default(void)
{
    graft_generate_config c;
    memset(&c, 0, sizeof c);
    c.sampling = graft_sampling_default();
    return c;
}

static void gen_destroy(graft_generation *gen)
{
    graft__free(gen->prompt);
    graft__free(gen->stop);
    graft__free(gen->out);
    graft__free(gen->logprobs);
    graft__free(gen->prompt_logprobs);
    graft__free(gen->raw_logits);
    graft__free(gen->error);
    graft_sampler_free(gen->sampler);
    graft__json_schema_free(gen->schema);
    graft__grammar_free(gen->grammar);
    graft__grammar_run_free(gen->grammar_text);
    graft__free(gen->ends);
    graft__free(gen->end_logits);
    graft__thought_budget_free(&gen->thought);
    pthread_cond_destroy(&gen->cv);
    pthread_mutex_destroy(&gen->mu);
    graft__free(gen);
}

static void gen_unref(graft_generation *gen)
{
    if (atomic_fetch_sub(&gen->refs, 1) == 1)
        gen_destroy(gen);
}

static bool tokens_valid(const graft_model *m, const int32_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return false;
    return true;
}

static int check_args(const graft_session *s, const int32_t *tokens, size_t n,
                      const graft_generate_config *c, graft_generation **out)
{
    if (s == NULL || tokens == NULL || c == NULL || out == NULL || n < 1 ||
        c->max_new_tokens < 0 || (c->n_stop_tokens > 0 && c->stop_tokens == NULL))
        return GRAFT_EINVAL;
    if (n > (size_t)s->engine->opts.max_context)
        return GRAFT_ERANGE;
    const graft_model *m = s->engine->model;
    if (!tokens_valid(m, tokens, n) || !tokens_valid(m, c->stop_tokens, c->n_stop_tokens))
        return GRAFT_EINVAL;
    if ((c->n_logit_bias > 0 && c->logit_bias == NULL) || c->top_logprobs < 0 ||
        c->top_logprobs > GRAFT_MAX_TOP_LOGPROBS || c->top_logprobs > m->hp.n_vocab ||
        (c->top_logprobs > 0 && !c->logprobs && !c->prompt_logprobs))
        return GRAFT_EINVAL;
    if (c->output_format != GRAFT_OUTPUT_TEXT && c->output_format != GRAFT_OUTPUT_JSON_OBJECT &&
        (c->output_format != GRAFT_OUTPUT_JSON_SCHEMA || c->json_schema == NULL) &&
        (c->output_format != GRAFT_OUTPUT_GRAMMAR || c->grammar == NULL))
        return GRAFT_EINVAL;
    const bool grammar = c->output_format == GRAFT_OUTPUT_GRAMMAR;
    if (grammar && (c->output_after != NULL || c->thought_budget != 0))
        return GRAFT_EINVAL;
    if (c->output_after != NULL &&
        (c->output_format == GRAFT_OUTPUT_TEXT || c->output_after[0] == '\0' ||
         strnlen(c->output_after, GRAFT_MAX_OUTPUT_AFTER + 1) > GRAFT_MAX_OUTPUT_AFTER))
        return GRAFT_EINVAL;
    if (c->output_opens != NULL &&
        (c->output_after == NULL || c->output_opens[0] == '\0' ||
         strnlen(c->output_opens, GRAFT_MAX_OUTPUT_AFTER + 1) > GRAFT_MAX_OUTPUT_AFTER))
        return GRAFT_EINVAL;
    if (c->thought_budget < 0 ||
        (c->thought_budget > 0 &&
         (c->thought_close == NULL || c->thought_close[0] == '\0' ||
          strnlen(c->thought_close, GRAFT_MAX_OUTPUT_AFTER + 1) > GRAFT_MAX_OUTPUT_AFTER ||
          (c->thought_opens != NULL &&
           (c->thought_opens[0] == '\0' ||
            strnlen(c->thought_opens, GRAFT_MAX_OUTPUT_AFTER + 1) > GRAFT_MAX_OUTPUT_AFTER)))))
        return GRAFT_EINVAL;
    return GRAFT_OK;
}

static int32_t *copy_tokens(const int32_t *tokens, size_t n)
{
    int32_t *copy = graft__malloc((n ? n : 1) * sizeof *copy);
    if (copy != NULL && n > 0)
        memcpy(copy, tokens, n * sizeof *copy);
    return copy;
}

/* The grammar compiled, its recognizer, and the tokens that end the generation. */
static int grammar_new(graft_generation *gen, const graft_engine *e,
                       const graft_generate_config *c)
{
    int rc = graft__grammar_compile(c->grammar, c->grammar_len, &gen->grammar, NULL);
    if (rc == GRAFT_OK)
        rc = graft__grammar_run_create(gen->grammar,
                                       graft__grammar_vocab_max_len(e->grammar_vocab),
                                       &gen->grammar_text);
    if (rc != GRAFT_OK)
        return rc;
    const int32_t n_vocab = e->model->hp.n_vocab;
    int32_t n = (int32_t)c->n_stop_tokens;
    for (int32_t t = 0; !c->ignore_eog && t < n_vocab; t++)
        n += graft_token_is_eog(e->model, t) != 0;
    gen->ends = graft__malloc((size_t)(n > 0 ? n : 1) * sizeof *gen->ends);
    gen->end_logits = graft__malloc((size_t)(n > 0 ? n : 1) * sizeof *gen->end_logits);
    if (gen->ends == NULL || gen->end_logits == NULL)
        return GRAFT_ENOMEM;
    for (size_t i = 0; i < c->n_stop_tokens; i++)
        gen->ends[gen->n_ends++] = c->stop_tokens[i];
    for (int32_t t = 0; !c->ignore_eog && t < n_vocab; t++)
        if (graft_token_is_eog(e->model, t))
            gen->ends[gen->n_ends++] = t;
    return GRAFT_OK;
}

/* Masks the tokens that cannot continue the grammar's text, the end tokens left as they were
 * where it is a whole match; how many are left, or -1 on the recognizer's overflow. */
static int32_t grammar_mask(const graft_engine *e, graft_generation *gen, float *logits)
{
    graft__grammar_run *run = gen->grammar_text;
    for (int32_t i = 0; i < gen->n_ends; i++)
        gen->end_logits[i] = logits[gen->ends[i]];
    int32_t allowed = graft__grammar_mask_apply(e->grammar_vocab, run, logits);
    if (allowed < 0 || !graft__grammar_run_accepts(run, &run->at))
        return allowed;
    for (int32_t i = 0; i < gen->n_ends; i++) {
        allowed += logits[gen->ends[i]] == -INFINITY && gen->end_logits[i] != -INFINITY;
        logits[gen->ends[i]] = gen->end_logits[i];
    }
    return allowed;
}

/* DRY's breakers: the request's, or llama.cpp's when it names none. */
static int set_dry_breakers(graft_sampler *sampler, const graft_engine *e,
                            const graft_generate_config *c)
{
    if (c->dry_sequence_breakers == NULL) {
        size_t n;
        const char *const *llama_breakers = graft_dry_default_breakers(&n);
        return graft__sampler_set_dry_breakers(sampler, e->model->vocab, e->tokens,
                                               llama_breakers, n);
    }
    return graft__sampler_set_dry_breakers(sampler, e->model->vocab, e->tokens,
                                           c->dry_sequence_breakers, c->n_dry_sequence_breakers);
}

/* Allocates the generation and its buffers; GRAFT_ENOMEM or GRAFT_EINVAL (sampling). */
static int gen_new(graft_session *s, const int32_t *tokens, size_t n,
                   const graft_generate_config *c, graft_generation **out)
{
    const graft_engine *e = s->engine;
    graft_generation *gen = graft__calloc(1, sizeof *gen);
    if (gen == NULL)
        return GRAFT_ENOMEM;
    if (pthread_mutex_init(&gen->mu, NULL) != 0) {
        graft__free(gen);
        return GRAFT_ENOMEM;
    }
    if (pthread_cond_init(&gen->cv, NULL) != 0) {
        pthread_mutex_destroy(&gen->mu);
        graft__free(gen);
        return GRAFT_ENOMEM;
    }
    int32_t max_context = e->opts.max_context;
    gen->cap_out = c->max_new_tokens > 0 && c->max_new_tokens < max_context ? c->max_new_tokens
                                                                            : max_context;
    gen->prompt = copy_tokens(tokens, n);
    gen->stop = copy_tokens(c->stop_tokens, c->n_stop_tokens);
    gen->out = graft__malloc((size_t)gen->cap_out * sizeof *gen->out);
    const int32_t n_vocab = e->model->hp.n_vocab;
    bool logprobs_lost = false;
    gen->logprob_width = 1 + c->top_logprobs;
    if (c->logprobs) {
        gen->logprobs = graft__malloc((size_t)gen->cap_out * (size_t)gen->logprob_width *
                                      sizeof *gen->logprobs);
        gen->raw_logits = graft__malloc((size_t)n_vocab * sizeof *gen->raw_logits);
        logprobs_lost = gen->logprobs == NULL || gen->raw_logits == NULL;
    }
    if (c->prompt_logprobs) {
        gen->prompt_logprobs = graft__malloc((n > 1 ? n - 1 : 1) * (size_t)gen->logprob_width *
                                             sizeof *gen->prompt_logprobs);
        logprobs_lost = logprobs_lost || gen->prompt_logprobs == NULL;
    }
    int rc = c->output_format != GRAFT_OUTPUT_JSON_SCHEMA
                 ? GRAFT_OK
                 : graft__json_schema_compile(c->json_schema, c->json_schema_len, &gen->schema,
                                              NULL);
    if (rc == GRAFT_OK && c->output_format == GRAFT_OUTPUT_GRAMMAR)
        rc = grammar_new(gen, e, c);
    if (rc == GRAFT_OK)
        rc = graft__thought_budget_init(&gen->thought, e->model->vocab, c->thought_budget,
                                        c->thought_close, c->thought_opens);
    graft_sampling sampling = c->sampling;
    if (sampling.dry_penalty_last_n == 0 || sampling.dry_penalty_last_n > max_context)
        sampling.dry_penalty_last_n = max_context; /* the whole history */
    if (rc == GRAFT_OK)
        rc = graft_sampler_create(&sampling, n_vocab, &gen->sampler);
    if (rc == GRAFT_OK)
        rc = graft_sampler_set_logit_bias(gen->sampler, c->logit_bias, c->n_logit_bias);
    if (rc == GRAFT_OK)
        rc = set_dry_breakers(gen->sampler, e, c);
    if (rc == GRAFT_OK && (!gen->prompt || !gen->stop || !gen->out || logprobs_lost))
        rc = GRAFT_ENOMEM;
    if (rc != GRAFT_OK) {
        gen_destroy(gen);
        return rc;
    }
    *out = gen;
    return GRAFT_OK;
}

int graft_session_generate(graft_session *s, const int32_t *tokens, size_t n,
                           const graft_generate_config *c, graft_update_cb on_update,
                           graft_settled_cb on_settled, void *user, graft_generation **out)
{
    if (out != NULL)
        *out = NULL;
    int rc = check_args(s, tokens, n, c, out);
    graft_generation *gen = NULL;
    if (rc == GRAFT_OK)
        rc = gen_new(s, tokens, n, c, &gen);
    if (rc != GRAFT_OK)
        return rc;
    atomic_init(&gen->refs, 2);
    gen->engine = s->engine;
    gen->session = s;
    gen->n_prompt = (int32_t)n;
    gen->n_stop = c->n_stop_tokens;
    gen->ignore_eog = c->ignore_eog != 0;
    gen->max_new = c->max_new_tokens;
    gen->prefill_only = c->prefill_only != 0;
    gen->json = c->output_format == GRAFT_OUTPUT_JSON_OBJECT ||
                c->output_format == GRAFT_OUTPUT_JSON_SCHEMA;
    graft__json_recognizer_init(&gen->json_text, gen->schema);
    graft__json_preamble_init(&gen->preamble, c->output_after, c->output_opens);
    gen->on_update = on_update;
    gen->on_settled = on_settled;
    gen->user = user;
    gen->metrics.prompt_tokens = (int32_t)n;
    gen->t.submit = graft__now_ns();
    gen->cmd = (graft__cmd){.kind = GRAFT__CMD_GENERATE, .session_id = s->id, .u.gen = gen};
    rc = graft__engine_submit(s->engine, &gen->cmd);
    if (rc != GRAFT_OK) {
        gen_destroy(gen);
        return rc;
    }
    *out = gen;
    return GRAFT_OK;
}

void graft__gen_admit(graft_engine *e, graft_generation *gen)
{
    graft_session *s = graft__sessions_find(e, gen->cmd.session_id);
    int32_t position = s != NULL ? atomic_load(&s->position) : 0;
    char message[160];
    if (e->draining) {
        graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ESHUTDOWN,
                          "the engine is shutting down");
    } else if (s == NULL) {
        graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECLOSED,
                          "the session was closed before the generation started");
    } else if (s->gen != NULL) {
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, GRAFT_EINVAL,
                          "the session already has a live generation");
    } else if (gen->n_prompt > e->opts.max_context - position) {
        snprintf(message, sizeof message,
                 "%d prompt tokens at position %d exceed max_context %d", gen->n_prompt,
                 position, e->opts.max_context);
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, GRAFT_ERANGE, message);
    } else {
        s->gen = gen;
        gen->admitted = true;
        e->active[e->n_active++] = gen;
        e->counters.generations_started++;
        pthread_mutex_lock(&gen->mu);
        gen->metrics.prompt_tokens_reused = position;
        pthread_mutex_unlock(&gen->mu);
    }
}

void graft__gen_note_step(graft_generation *gen, uint64_t now, int32_t prompt_tokens)
{
    pthread_mutex_lock(&gen->mu);
    if (gen->t.start == 0) {
        gen->t.start = now;
        gen->metrics.queue_wait_ns = now - gen->t.submit;
    }
    gen->metrics.prompt_tokens_computed += prompt_tokens;
    pthread_mutex_unlock(&gen->mu);
}

static void note_token(graft_generation *gen, uint64_t now)
{
    pthread_mutex_lock(&gen->mu);
    if (gen->t.first == 0) {
        gen->t.first = now;
        gen->metrics.time_to_first_token_ns = now - gen->t.submit;
    } else if (now - gen->t.last > gen->metrics.inter_token_max_ns) {
        gen->metrics.inter_token_max_ns = now - gen->t.last;
    }
    gen->t.last = now;
    gen->metrics.generated_tokens++;
    pthread_mutex_unlock(&gen->mu);
}

static bool is_stop(const graft_engine *e, const graft_generation *gen, int32_t token)
{
    for (size_t i = 0; i < gen->n_stop; i++)
        if (gen->stop[i] == token)
            return true;
    return !gen->ignore_eog && graft_token_is_eog(e->model, token);
}

void graft__gen_deliver(graft_engine *e, graft_generation *gen, float *logits)
{
    if (atomic_load(&gen->cancel)) {
        graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED, "cancelled");
        return;
    }
    graft_session *s = gen->session;
    int32_t position = atomic_load(&s->position);
    if (e->tap != NULL)
        e->tap(gen, logits, e->tap_user);
    const int32_t n_vocab = e->model->hp.n_vocab;
    if (gen->logprobs != NULL) /* the sampler changes the logits in place */
        memcpy(gen->raw_logits, logits, (size_t)n_vocab * sizeof *logits);
    bool before_json = gen->json && !gen->preamble.over;
    int32_t token = graft__thought_budget_forced(&gen->thought, gen->n_out, gen->max_new);
    bool forced = token >= 0;
    if (!forced && gen->json &&
        (before_json ? graft__json_mask_apply_preamble(e->json_mask, &gen->preamble,
                                                       &gen->json_text, logits)
                     : graft__json_mask_apply(e->json_mask, &gen->json_text, logits)) == 0) {
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, GRAFT_ERANGE,
                          "no token of the vocabulary can continue the JSON object");
        return;
    }
    int32_t grammar_allowed = gen->grammar_text != NULL ? grammar_mask(e, gen, logits) : 1;
    if (grammar_allowed <= 0) {
        graft__gen_settle(e, gen, GRAFT_FINISH_FAILED, GRAFT_ERANGE,
                          grammar_allowed < 0
                              ? "following the grammar takes more than the recognizer's "
                                "bounds (too many ways to parse the text)"
                              : "no token of the vocabulary can continue the grammar's text");
        return;
    }
    if (!forced)
        token = graft_sampler_sample(gen->sampler, logits, s->tokens, (size_t)position);
    graft__thought_budget_feed(&gen->thought, e->model->vocab, token, forced);
    note_token(gen, graft__now_ns());
    e->counters.sampled_tokens++;
    if (is_stop(e, gen, token)) {
        graft__gen_settle(e, gen, GRAFT_FINISH_STOP, GRAFT_OK, NULL);
        return;
    }
    /* The mask let only tokens through that continue the text. */
    bool continues = !gen->json ||
                     (before_json ? graft__json_mask_feed_preamble(e->json_mask, &gen->preamble,
                                                                   &gen->json_text, token)
                                  : graft__json_mask_feed(e->json_mask, &gen->json_text, token));
    if (gen->grammar_text != NULL)
        continues = graft__grammar_mask_feed(e->grammar_vocab, gen->grammar_text, token);
    GRAFT_ASSERT(continues);
    GRAFT_ASSERT(gen->n_out < gen->cap_out);
    if (gen->logprobs != NULL)
        graft__logprobs_fill(gen->raw_logits, n_vocab, token, gen->logprob_width - 1,
                             gen->logprobs + (size_t)gen->n_out * (size_t)gen->logprob_width);
    gen->out[gen->n_out++] = token;
    gen->has_pending = true;
    if (gen->on_update != NULL)
        gen->on_update(gen, &gen->out[gen->n_out - 1], 1, gen->user);
    if ((gen->json && gen->preamble.over && graft__json_recognizer_done(&gen->json_text)) ||
        (gen->grammar_text != NULL &&
         graft__grammar_run_complete(gen->grammar_text, &gen->grammar_text->at)))
        graft__gen_settle(e, gen, GRAFT_FINISH_STOP, GRAFT_OK, NULL);
    else if (gen->n_out == gen->max_new || position >= e->opts.max_context)
        graft__gen_settle(e, gen, GRAFT_FINISH_LENGTH, GRAFT_OK, NULL);
}

/* The prompt log-probabilities of a chunk's rows: task k fills given token from + k + 1's. */
typedef struct prompt_rows {
    const graft_generation *gen;
    const float *rows;
    int32_t from, n_vocab;
} prompt_rows;

static void fill_prompt_row(void *ctx, int64_t k, int thread)
{
    (void)thread;
    const prompt_rows *p = ctx;
    const graft_generation *gen = p->gen;
    size_t i = (size_t)p->from + (size_t)k, width = (size_t)gen->logprob_width;
    graft__logprobs_fill(p->rows + (size_t)k * (size_t)p->n_vocab, p->n_vocab,
                         gen->prompt[i + 1], (int32_t)width - 1,
                         gen->prompt_logprobs + i * width);
}

void graft__gen_prompt_fed(graft_engine *e, graft_generation *gen, int32_t from, int32_t count,
                           float *rows)
{
    const size_t n_vocab = (size_t)e->model->hp.n_vocab;
    if (gen->prompt_logprobs != NULL) { /* rows are independent: spread over the pool */
        int32_t n_rows = from + count < gen->n_prompt ? count : gen->n_prompt - 1 - from;
        prompt_rows p = {gen, rows, from, (int32_t)n_vocab};
        if (n_rows > 0)
            graft__pool_run(e->pool, n_rows, fill_prompt_row, &p);
    }
    if (from + count < gen->n_prompt)
        return;
    atomic_store(&gen->prompt_done, true);
    if (!gen->prefill_only)
        graft__gen_deliver(e, gen,
                           rows + (gen->prompt_logprobs ? (size_t)(count - 1) * n_vocab : 0));
    else if (atomic_load(&gen->cancel))
        graft__gen_settle(e, gen, GRAFT_FINISH_CANCELLED, GRAFT_ECANCELLED, "cancelled");
    else
        graft__gen_settle(e, gen, GRAFT_FINISH_LENGTH, GRAFT_OK, NULL);
}

static void deactivate(graft_engine *e, graft_generation *gen)
{
    int32_t i = 0;
    while (e->active[i] != gen)
        i++;
    memmove(&e->active[i], &e->active[i + 1], (size_t)(e->n_active - i - 1) * sizeof *e->active);
    e->n_active--;
    gen->session->gen = NULL;
    gen->admitted = false;
}

static void count_outcome(graft_engine *e, graft_finish finish)
{
    switch (finish) {
    case GRAFT_FINISH_STOP:
        e->counters.generations_stop++;
        break;
    case GRAFT_FINISH_LENGTH:
        e->counters.generations_length++;
        break;
    case GRAFT_FINISH_CANCELLED:
        e->counters.generations_cancelled++;
        break;
    default:
        e->counters.generations_failed++;
        break;
    }
}

void graft__gen_settle(graft_engine *e, graft_generation *gen, graft_finish finish, int status,
                       const char *message)
{
    if (gen->admitted)
        deactivate(e, gen);
    gen->has_pending = false;
    gen->status = status;
    if (message != NULL && status != GRAFT_OK)
        gen->error = graft__strndup(message, strlen(message));
    count_outcome(e, finish);
    atomic_store(&gen->finish, (int)finish);
    if (gen->on_settled != NULL)
        gen->on_settled(gen, gen->user);
    pthread_mutex_lock(&gen->mu);
    atomic_store(&gen->done, true);
    pthread_cond_broadcast(&gen->cv);
    pthread_mutex_unlock(&gen->mu);
    gen_unref(gen);
}

int graft_generation_wait(graft_generation *gen)
{
    if (!atomic_load(&gen->done)) {
        if (graft__engine_on_thread(gen->engine))
            return GRAFT_EINVAL;
        pthread_mutex_lock(&gen->mu);
        while (!atomic_load(&gen->done))
            pthread_cond_wait(&gen->cv, &gen->mu);
        pthread_mutex_unlock(&gen->mu);
    }
    return gen->status;
}

void graft_generation_cancel(graft_generation *gen)
{
    atomic_store(&gen->cancel, true);
}

graft_session *graft_generation_session(const graft_generation *gen)
{
    return gen->session;
}

int graft_generation_done(const graft_generation *gen)
{
    return atomic_load(&gen->done);
}

graft_finish graft_generation_finish_reason(const graft_generation *gen)
{
    return (graft_finish)atomic_load(&gen->finish);
}

int graft_generation_status(const graft_generation *gen)
{
    return atomic_load(&gen->finish) == GRAFT_FINISH_NONE ? GRAFT_OK : gen->status;
}

const char *graft_generation_error(const graft_generation *gen)
{
    if (atomic_load(&gen->finish) == GRAFT_FINISH_NONE || gen->status == GRAFT_OK)
        return NULL;
    return gen->error != NULL ? gen->error : graft_status_str(gen->status);
}

const int32_t *graft_generation_tokens(const graft_generation *gen, size_t *n)
{
    bool finished = atomic_load(&gen->finish) != GRAFT_FINISH_NONE;
    *n = finished ? (size_t)gen->n_out : 0;
    return finished ? gen->out : NULL;
}

int graft_generation_logprobs(const graft_generation *gen, size_t index,
                              const graft_token_logprob **entries, size_t *n)
{
    if (entries != NULL)
        *entries = NULL;
    if (n != NULL)
        *n = 0;
    if (gen == NULL || entries == NULL || n == NULL || gen->logprobs == NULL ||
        index >= (size_t)gen->n_out)
        return GRAFT_EINVAL;
    *entries = gen->logprobs + index * (size_t)gen->logprob_width;
    *n = (size_t)gen->logprob_width;
    return GRAFT_OK;
}

int graft_generation_prompt_logprobs(const graft_generation *gen, size_t index,
                                     const graft_token_logprob **entries, size_t *n)
{
    if (entries != NULL)
        *entries = NULL;
    if (n != NULL)
        *n = 0;
    if (gen == NULL || entries == NULL || n == NULL || gen->prompt_logprobs == NULL ||
        index + 1 >= (size_t)gen->n_prompt || !atomic_load(&gen->prompt_done))
        return GRAFT_EINVAL;
    *entries = gen->prompt_logprobs + index * (size_t)gen->logprob_width;
    *n = (size_t)gen->logprob_width;
    return GRAFT_OK;
}

void graft_generation_metrics_get(graft_generation *gen, graft_generation_metrics *out)
{
    pthread_mutex_lock(&gen->mu);
    *out = gen->metrics;
    uint64_t prefill_ns = gen->t.first > gen->t.start ? gen->t.first - gen->t.start : 0;
    uint64_t decode_ns = gen->t.last - gen->t.first;
    int32_t gaps = out->generated_tokens - 1;
    pthread_mutex_unlock(&gen->mu);
    out->prefill_tokens_per_s =
        prefill_ns > 0 ? (double)out->prompt_tokens_computed * 1e9 / (double)prefill_ns : 0.0;
    out->decode_tokens_per_s = gaps > 0 && decode_ns > 0 ? (double)gaps * 1e9 / (double)decode_ns
                                                         : 0.0;
    out->inter_token_mean_ns = gaps > 0 ? decode_ns / (uint64_t)gaps : 0;
}

void graft_generation_free(graft_generation *gen)
{
    if (gen == NULL)
        return;
    if (!atomic_load(&gen->done))
        atomic_store(&gen->cancel, true);
    gen_unref(gen);
}
