/*
 * cmd_run.c: `graft run`: generate text from a prompt with one graft_context.
 *
 * The prompt is tokenized (BOS added and control-token texts parsed, as a chat front end
 * would) and evaluated in one batch; then each token is sampled, streamed to stdout through
 * the detokenizer (flushed per token, so a pipe sees text as it comes) and fed back, until
 * an end-of-generation token or -n tokens. Timings go to stderr, so stdout holds only the
 * text. Without -p the generation starts from BOS alone; without -m the model is looked
 * up as model_path.c describes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define PENALTY_WINDOW 64 /* the repetition penalty looks at this many recent tokens */

static const char run_usage[] =
    "usage: graft run [-m MODEL] [-p PROMPT] [-n N] [OPTIONS]\n"
    "\n"
    "Generates text from PROMPT and streams it to stdout; timings go to stderr.\n"
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
    "  --repeat-penalty R      penalty for the last 64 tokens, 1 for off (default 1)\n"
    "  --seed S                random seed (default 0)\n"
    "  --ctx N                 context positions (default: prompt + N, at most the model's)\n"
    "  --logits-out FILE       write the last prompt position's logits (n_vocab float32,\n"
    "                          little-endian) to FILE\n"
    "  -h, --help              show this help\n";

typedef struct run_options {
    const char *model;
    const char *prompt;
    const char *logits_out;
    int32_t n_predict;
    int32_t n_ctx;
    graft_sampling sampling;
} run_options;

/* What one generation holds; freed by run_free. */
typedef struct run_state {
    graft_model *model;
    graft_model_info info;
    graft_context *ctx;
    graft_sampler *sampler;
    graft_detok *detok;
    int32_t *tokens; /* the prompt, then the generated tokens */
    size_t n_prompt, n_tokens, cap_tokens;
    int32_t n_ctx;
    float *logits;   /* (n_vocab) */
} run_state;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_free(run_state *s)
{
    graft_detok_free(s->detok);
    graft_sampler_free(s->sampler);
    graft_context_free(s->ctx);
    graft_model_free(s->model);
    free(s->tokens);
    free(s->logits);
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

/* s->tokens = the prompt's tokens (BOS alone without -p), with room for n_predict more. */
static int tokenize_prompt(const run_options *o, run_state *s)
{
    int32_t *prompt = NULL;
    size_t n = 0;
    if (o->prompt != NULL) {
        int rc = graft_tokenize(s->model, o->prompt, strlen(o->prompt), 1, 1, &prompt, &n);
        if (rc != GRAFT_OK) {
            graft__cli_error("run", "cannot tokenize the prompt: %s", graft_status_str(rc));
            return GRAFT_CLI_FAILED;
        }
    } else if (s->info.bos < 0) {
        graft__cli_error("run", "the model has no BOS token: give a prompt with -p");
        return GRAFT_CLI_FAILED;
    }
    if (o->prompt != NULL && n == 0) {
        graft__cli_error("run", "the prompt gives no tokens");
        graft_free(prompt);
        return GRAFT_CLI_FAILED;
    }
    s->n_prompt = o->prompt != NULL ? n : 1;
    s->cap_tokens = s->n_prompt + (size_t)o->n_predict;
    s->tokens = malloc(s->cap_tokens * sizeof *s->tokens);
    if (s->tokens != NULL) {
        if (o->prompt != NULL)
            memcpy(s->tokens, prompt, n * sizeof *prompt);
        else
            s->tokens[0] = s->info.bos;
    }
    graft_free(prompt);
    s->n_tokens = s->n_prompt;
    if (s->tokens == NULL) {
        graft__cli_error("run", "out of memory");
        return GRAFT_CLI_FAILED;
    }
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

static int create_generation(const run_options *o, run_state *s)
{
    s->n_ctx = context_size(o, s);
    if ((size_t)s->n_ctx < s->n_prompt) {
        graft__cli_error("run", "the prompt has %zu tokens but --ctx is %d", s->n_prompt,
                         (int)s->n_ctx);
        return GRAFT_CLI_FAILED;
    }
    char *err = NULL;
    int rc = graft_context_create(s->model, s->n_ctx, &s->ctx, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot create a context of %d positions: %s", (int)s->n_ctx,
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    rc = graft_sampler_create(&o->sampling, s->info.n_vocab, &s->sampler);
    if (rc == GRAFT_OK)
        rc = graft_detok_create(s->model, &s->detok);
    s->logits = malloc((size_t)s->info.n_vocab * sizeof *s->logits);
    if (rc != GRAFT_OK || s->logits == NULL) {
        graft__cli_error("run", "cannot set up sampling: %s",
                         graft_status_str(rc != GRAFT_OK ? rc : GRAFT_ENOMEM));
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

static void put_text(const char *text, size_t len)
{
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* Samples from s->logits, streams and feeds back tokens until EOG or n_predict. */
static int generate(const run_options *o, run_state *s)
{
    for (int32_t i = 0; i < o->n_predict; i++) {
        size_t n_hist = s->n_tokens < PENALTY_WINDOW ? s->n_tokens : PENALTY_WINDOW;
        int32_t tok = graft_sampler_sample(s->sampler, s->logits,
                                           s->tokens + s->n_tokens - n_hist, n_hist);
        if (graft_token_is_eog(s->model, tok))
            break;
        s->tokens[s->n_tokens++] = tok;
        const char *text;
        size_t len;
        if (graft_detok_push(s->detok, tok, &text, &len) == GRAFT_OK)
            put_text(text, len);
        if (i + 1 == o->n_predict)
            break;
        if (graft_context_position(s->ctx) >= s->n_ctx) {
            graft__cli_error("run", "the context is full (%d positions)", (int)s->n_ctx);
            break;
        }
        int rc = graft_context_eval(s->ctx, &tok, 1, s->logits);
        if (rc != GRAFT_OK) {
            graft__cli_error("run", "evaluation failed: %s", graft_status_str(rc));
            return GRAFT_CLI_FAILED;
        }
    }
    const char *text;
    size_t len;
    if (graft_detok_flush(s->detok, &text, &len) == GRAFT_OK)
        put_text(text, len);
    put_text("\n", 1);
    return GRAFT_CLI_OK;
}

static double rate(size_t n, double seconds)
{
    return seconds > 0 ? (double)n / seconds : 0.0;
}

static int run_generation(const run_options *o, run_state *s)
{
    if (o->prompt != NULL)
        put_text(o->prompt, strlen(o->prompt));
    double t0 = now_s();
    int rc = graft_context_eval(s->ctx, s->tokens, s->n_prompt, s->logits);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "evaluating the prompt failed: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    double t1 = now_s();
    if (o->logits_out != NULL && write_logits(o->logits_out, s->logits, s->info.n_vocab))
        return GRAFT_CLI_FAILED;
    rc = generate(o, s);
    double t2 = now_s();
    size_t n_gen = s->n_tokens - s->n_prompt;
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s | eval: %d tokens, %.1f tok/s\n",
            (int)s->n_prompt, rate(s->n_prompt, t1 - t0), (int)n_gen, rate(n_gen, t2 - t1));
    return rc;
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
        rc = create_generation(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = run_generation(&o, &s);
    run_free(&s);
    return rc;
}
