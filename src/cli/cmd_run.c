/*
 * cmd_run.c: `graft run`: generate text from a prompt through the engine.
 *
 * The prompt is tokenized (BOS added and control-token texts parsed, as a chat front end
 * would). An engine of one session of --ctx positions is started (its KV budget --kv-mem,
 * else the engine's default for that session), and one graft_session_generate feeds the
 * prompt and samples up to -n tokens. Its on_update callback runs on the engine thread and
 * must not block, so it only appends the token to a stream; this thread takes tokens from
 * the stream, detokenizes them and writes the text to stdout (flushed per token, so a pipe
 * sees text as it comes). Timings go to stderr, so stdout holds only the text. Without -p
 * the generation starts from BOS alone; without -m the model is looked up as model_path.c
 * describes.
 *
 * --logits-out: the engine does not hand out logits, so the prompt is evaluated once more on
 * a graft_context of the same kernels and threads; its last position's logits are the bits
 * the engine samples the first token from (DESIGN.md invariant 1).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char run_usage[] =
    "usage: graft run [-m MODEL] [-p PROMPT] [-n N] [OPTIONS]\n"
    "\n"
    "Generates text from PROMPT through the engine and streams it to stdout; timings go to\n"
    "stderr.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE        GGUF model (default: $GRAFT_MODEL, else stories260K.gguf in\n"
    "                          $GRAFT_MODELS_DIR, ../shared/models/ or next to the binary)\n"
    "  -p, --prompt TEXT       prompt (default: generate from BOS alone)\n"
    "  -n, --n-predict N       generate at most N tokens (default 128)\n"
    "  --temp T                temperature, 0 for greedy (default 0.8)\n"
    "  --top-k K               keep the K most likely tokens, 0 for all (default 40)\n"
    "  --top-p P               keep the smallest set of probability P, 1 for off (default 0.95)\n"
    "  --min-p P               drop tokens below P times the top probability (default 0.05)\n"
    "  --repeat-penalty R      penalty for every token already in the context, 1 for off\n"
    "                          (default 1)\n"
    "  --seed S                random seed (default 0)\n"
    "  --ctx N                 context positions (default: prompt + N, at most the model's)\n"
    "  --kv-mem SIZE           KV cache budget in bytes, with an optional K, M or G suffix\n"
    "                          (powers of 1024; default: what the engine gives one session\n"
    "                          of --ctx positions)\n"
    "  --threads N             compute threads (default 0: one per online CPU)\n"
    "  --kernels K             scalar, avx2 or avx512 (default: $GRAFT_KERNELS, else the best)\n"
    "  --logits-out FILE       write the last prompt position's logits (n_vocab float32,\n"
    "                          little-endian) to FILE\n"
    "  -h, --help              show this help\n";

typedef struct run_options {
    const char *model;
    const char *prompt;
    const char *logits_out;
    const char *kernels;
    int32_t n_predict;
    int32_t n_ctx;
    int32_t threads;
    size_t kv_mem;
    graft_sampling sampling;
} run_options;

/* Tokens on their way from the engine thread (on_update) to this one. */
typedef struct token_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *tokens; /* (cap) in sampling order; tokens beyond cap are not kept */
    size_t n, cap;
    bool settled;    /* on_settled ran: no more tokens come */
    bool ready;      /* mu and cv are initialised */
} token_stream;

/* What one run holds; freed by run_free. */
typedef struct run_state {
    graft_model *model;
    graft_model_info info;
    graft_engine *engine;
    graft_session *session;
    graft_generation *gen;
    graft_detok *detok;
    int32_t *prompt; /* (n_prompt) */
    size_t n_prompt;
    int32_t n_ctx;
    token_stream stream;
} run_state;

static void run_free(run_state *s)
{
    graft_generation_free(s->gen);
    graft_session_close(s->session);
    graft_engine_shutdown(s->engine);
    graft_detok_free(s->detok);
    graft_model_free(s->model);
    free(s->prompt);
    free(s->stream.tokens);
    if (s->stream.ready) {
        pthread_cond_destroy(&s->stream.cv);
        pthread_mutex_destroy(&s->stream.mu);
    }
}

static int parse_run_options(int argc, char **argv, run_options *o)
{
    o->n_predict = 128;
    o->sampling = graft_sampling_default();
    graft_sampling *sp = &o->sampling;
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--prompt", "-p", GRAFT_CLI_STRING, &o->prompt, 0, 0, 0},
        {"--n-predict", "-n", GRAFT_CLI_INT, &o->n_predict, 0, INT32_MAX, 0},
        {"--temp", NULL, GRAFT_CLI_FLOAT, &sp->temperature, 0, 1e30, 0},
        {"--top-k", NULL, GRAFT_CLI_INT, &sp->top_k, 0, INT32_MAX, 0},
        {"--top-p", NULL, GRAFT_CLI_FLOAT, &sp->top_p, 0, 1, 0},
        {"--min-p", NULL, GRAFT_CLI_FLOAT, &sp->min_p, 0, 1, 0},
        {"--repeat-penalty", NULL, GRAFT_CLI_FLOAT, &sp->repetition_penalty, 0.01, 100, 0},
        {"--seed", NULL, GRAFT_CLI_U64, &sp->seed, 0, 0, 0},
        {"--ctx", NULL, GRAFT_CLI_INT, &o->n_ctx, 0, INT32_MAX, 0},
        {"--kv-mem", NULL, GRAFT_CLI_SIZE, &o->kv_mem, 1, (double)SIZE_MAX, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, 4096, 0},
        {"--kernels", NULL, GRAFT_CLI_STRING, &o->kernels, 0, 0, 0},
        {"--logits-out", NULL, GRAFT_CLI_STRING, &o->logits_out, 0, 0, 0},
    };
    const graft__cli_command cmd = {"run", run_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    return graft__cli_parse(&cmd, argc, argv, NULL);
}

static int load_model(const run_options *o, run_state *s)
{
    char *path = graft__cli_find_model("run", o->model);
    if (path == NULL)
        return GRAFT_CLI_FAILED;
    char *err = NULL;
    int rc = graft_model_load(path, &s->model, &err);
    if (rc != GRAFT_OK)
        graft__cli_error("run", "%s", err ? err : "cannot load the model");
    graft_free(err);
    free(path);
    if (rc != GRAFT_OK)
        return GRAFT_CLI_FAILED;
    graft_model_get_info(s->model, &s->info);
    return GRAFT_CLI_OK;
}

/* s->prompt = the prompt's tokens (BOS alone without -p). */
static int tokenize_prompt(const run_options *o, run_state *s)
{
    if (o->prompt == NULL) {
        if (s->info.bos < 0) {
            graft__cli_error("run", "the model has no BOS token: give a prompt with -p");
            return GRAFT_CLI_FAILED;
        }
        s->prompt = malloc(sizeof *s->prompt);
        if (s->prompt == NULL) {
            graft__cli_error("run", "out of memory");
            return GRAFT_CLI_FAILED;
        }
        s->prompt[0] = s->info.bos;
        s->n_prompt = 1;
        return GRAFT_CLI_OK;
    }
    int32_t *tokens = NULL;
    size_t n = 0;
    int rc = graft_tokenize(s->model, o->prompt, strlen(o->prompt), 1, 1, &tokens, &n);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot tokenize the prompt: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    if (n == 0) {
        graft__cli_error("run", "the prompt gives no tokens");
        graft_free(tokens);
        return GRAFT_CLI_FAILED;
    }
    s->prompt = malloc(n * sizeof *s->prompt);
    if (s->prompt != NULL)
        memcpy(s->prompt, tokens, n * sizeof *tokens);
    graft_free(tokens);
    if (s->prompt == NULL) {
        graft__cli_error("run", "out of memory");
        return GRAFT_CLI_FAILED;
    }
    s->n_prompt = n;
    return GRAFT_CLI_OK;
}

/* --ctx, or the prompt plus -n, at most the training context (but never below the prompt). */
static int32_t context_size(const run_options *o, const run_state *s)
{
    if (o->n_ctx > 0)
        return o->n_ctx;
    int64_t want = (int64_t)s->n_prompt + o->n_predict;
    if (s->info.n_ctx_train > 0 && want > s->info.n_ctx_train)
        want = s->info.n_ctx_train;
    if (want < (int64_t)s->n_prompt)
        want = (int64_t)s->n_prompt;
    return want > INT32_MAX ? INT32_MAX : (int32_t)want;
}

/* With one KV layer group (no sliding-window layers beside global ones) every block holds
 * all layers, so the pool holds exactly kv_blocks_total * kv_block_tokens positions: check
 * that the session's n_ctx fit before generating. (With two groups the engine refuses the
 * step that runs out, and the generation's error says so.) */
static int check_kv_room(const run_options *o, run_state *s)
{
    bool two_groups = s->info.n_swa_layers > 0 && s->info.n_swa_layers < s->info.n_layer;
    graft_engine_metrics m;
    if (two_groups || graft_engine_metrics_get(s->engine, &m) != GRAFT_OK)
        return GRAFT_CLI_OK;
    int64_t room = m.kv_blocks_total * m.kv_block_tokens;
    if (room >= s->n_ctx)
        return GRAFT_CLI_OK;
    graft__cli_error("run", "--kv-mem %zu holds %lld positions (%lld block%s of %d positions, "
                     "%lld bytes each) but the context needs %d (%s)", o->kv_mem,
                     (long long)room, (long long)m.kv_blocks_total,
                     m.kv_blocks_total == 1 ? "" : "s", (int)m.kv_block_tokens,
                     (long long)m.kv_block_bytes, (int)s->n_ctx,
                     o->n_ctx > 0 ? "--ctx" : "the prompt plus -n");
    return GRAFT_CLI_FAILED;
}

static int start_engine(const run_options *o, run_state *s)
{
    s->n_ctx = context_size(o, s);
    if ((size_t)s->n_ctx < s->n_prompt) {
        graft__cli_error("run", "the prompt has %zu tokens but --ctx is %d", s->n_prompt,
                         (int)s->n_ctx);
        return GRAFT_CLI_FAILED;
    }
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = 1;
    eo.max_context = s->n_ctx;
    eo.kv_mem = o->kv_mem;
    eo.n_threads = o->threads;
    eo.kernels = o->kernels;
    char *err = NULL;
    int rc = graft_engine_create(s->model, &eo, &s->engine, &err);
    if (rc != GRAFT_OK) {
        const char *why = err ? err : graft_status_str(rc);
        if (rc == GRAFT_ECAPACITY && o->kv_mem > 0)
            graft__cli_error("run", "--kv-mem %zu is too small: %s", o->kv_mem, why);
        else
            graft__cli_error("run", "cannot start the engine for a context of %d positions: "
                             "%s", (int)s->n_ctx, why);
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    if (o->kv_mem > 0 && check_kv_room(o, s) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    rc = graft_session_open(s->engine, &s->session, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot open a session: %s", err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* n float32 values, little-endian whatever the host's byte order. */
static int write_logits(const char *path, const float *logits, int32_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        graft__cli_error("run", "cannot create '%s': %s", path, strerror(errno));
        return GRAFT_CLI_FAILED;
    }
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) {
        uint32_t bits;
        memcpy(&bits, &logits[i], sizeof bits);
        unsigned char le[4] = {(unsigned char)bits, (unsigned char)(bits >> 8),
                               (unsigned char)(bits >> 16), (unsigned char)(bits >> 24)};
        ok = fwrite(le, 1, sizeof le, f) == sizeof le;
    }
    if (fclose(f) != 0 || !ok) {
        graft__cli_error("run", "cannot write '%s': %s", path, strerror(errno));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* Evaluates the prompt on a graft_context and writes its last position's logits. */
static int prompt_logits(const run_options *o, run_state *s)
{
    graft_context_options co = graft_context_default_options();
    co.n_ctx = (int32_t)s->n_prompt;
    co.n_threads = o->threads;
    co.kernels = o->kernels;
    graft_context *ctx = NULL;
    char *err = NULL;
    int rc = graft_context_create_ex(s->model, &co, &ctx, &err);
    float *logits = malloc((size_t)s->info.n_vocab * sizeof *logits);
    if (rc == GRAFT_OK && logits == NULL)
        rc = GRAFT_ENOMEM;
    if (rc == GRAFT_OK)
        rc = graft_context_eval(ctx, s->prompt, s->n_prompt, logits);
    int status = GRAFT_CLI_OK;
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot evaluate the prompt for --logits-out: %s",
                         err ? err : graft_status_str(rc));
        status = GRAFT_CLI_FAILED;
    } else {
        status = write_logits(o->logits_out, logits, s->info.n_vocab);
    }
    graft_free(err);
    free(logits);
    graft_context_free(ctx);
    return status;
}

/* ---- the generation ------------------------------------------------------------------------ */

static void put_text(const char *text, size_t len)
{
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* Engine thread: appends the new tokens to the stream and wakes the printer. */
static void on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    (void)gen;
    token_stream *st = user;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < n && st->n < st->cap; i++)
        st->tokens[st->n++] = tokens[i];
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

/* Engine thread: no more tokens come. */
static void on_settled(graft_generation *gen, void *user)
{
    (void)gen;
    token_stream *st = user;
    pthread_mutex_lock(&st->mu);
    st->settled = true;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static int stream_init(token_stream *st, size_t cap)
{
    if (pthread_mutex_init(&st->mu, NULL) != 0)
        return GRAFT_ENOMEM;
    if (pthread_cond_init(&st->cv, NULL) != 0) {
        pthread_mutex_destroy(&st->mu);
        return GRAFT_ENOMEM;
    }
    st->ready = true;
    st->tokens = malloc(cap * sizeof *st->tokens);
    st->cap = cap;
    return st->tokens != NULL ? GRAFT_OK : GRAFT_ENOMEM;
}

/* Prints the streamed tokens as they come, the first `limit` of them, until settled. */
static void print_stream(run_state *s, size_t limit)
{
    token_stream *st = &s->stream;
    size_t printed = 0;
    const char *text;
    size_t len;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (printed == st->n && !st->settled)
            pthread_cond_wait(&st->cv, &st->mu);
        if (printed == st->n)
            break;
        int32_t token = st->tokens[printed++];
        pthread_mutex_unlock(&st->mu);
        if (printed <= limit && graft_detok_push(s->detok, token, &text, &len) == GRAFT_OK)
            put_text(text, len);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    if (graft_detok_flush(s->detok, &text, &len) == GRAFT_OK)
        put_text(text, len);
    put_text("\n", 1);
}

/* Queues the generation: -n tokens (one, not shown, for -n 0: the engine reads 0 as "until
 * the context is full"), sampled with the run's settings. */
static int submit(const run_options *o, run_state *s)
{
    int32_t max_new = o->n_predict > 0 ? o->n_predict : 1;
    int32_t most = s->n_ctx - (int32_t)s->n_prompt + 1; /* the context bounds the tokens */
    int rc = graft_detok_create(s->model, &s->detok);
    if (rc == GRAFT_OK)
        rc = stream_init(&s->stream, (size_t)(max_new < most ? max_new : most));
    graft_generate_config config = graft_generate_default();
    config.max_new_tokens = max_new;
    config.sampling = o->sampling;
    if (rc == GRAFT_OK)
        rc = graft_session_generate(s->session, s->prompt, s->n_prompt, &config, on_update,
                                    on_settled, &s->stream, &s->gen);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot start the generation: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* Waits for the generation to settle, then reports how it ended and its speed: the prompt
 * from submission to the first token, the rest from the first token to the last. */
static int report(const run_options *o, run_state *s)
{
    int rc = graft_generation_wait(s->gen);
    size_t n_gen;
    graft_generation_tokens(s->gen, &n_gen);
    if (rc == GRAFT_ECAPACITY && o->kv_mem > 0) {
        graft__cli_error("run", "generation failed after %zu tokens: %s (--kv-mem %zu is too "
                         "small for this context)", n_gen, graft_generation_error(s->gen),
                         o->kv_mem);
        return GRAFT_CLI_FAILED;
    }
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "generation failed: %s", graft_generation_error(s->gen));
        return GRAFT_CLI_FAILED;
    }
    if (n_gen > (size_t)o->n_predict)
        n_gen = (size_t)o->n_predict;
    if (graft_generation_finish_reason(s->gen) == GRAFT_FINISH_LENGTH &&
        n_gen < (size_t)o->n_predict)
        graft__cli_error("run", "the context is full (%d positions)", (int)s->n_ctx);
    graft_generation_metrics m;
    graft_generation_metrics_get(s->gen, &m);
    double prompt_s = (double)m.time_to_first_token_ns * 1e-9;
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s | eval: %d tokens, %.1f tok/s\n",
            (int)s->n_prompt, prompt_s > 0 ? (double)s->n_prompt / prompt_s : 0.0, (int)n_gen,
            m.decode_tokens_per_s);
    return GRAFT_CLI_OK;
}

static int run_generation(const run_options *o, run_state *s)
{
    if (o->logits_out != NULL && prompt_logits(o, s) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    if (submit(o, s) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    if (o->prompt != NULL)
        put_text(o->prompt, strlen(o->prompt));
    print_stream(s, (size_t)o->n_predict);
    return report(o, s);
}

int graft__cli_run(int argc, char **argv)
{
    run_options o = {0};
    int rc = parse_run_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    run_state s = {0};
    rc = load_model(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = tokenize_prompt(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = start_engine(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = run_generation(&o, &s);
    run_free(&s);
    return rc;
}
