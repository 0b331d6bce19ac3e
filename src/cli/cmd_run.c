/*
 * cmd_run.c: `graft run`: generate text from prompts through the engine.
 *
 * The prompts come in order from -p (repeatable) and --prompt-file (run_prompts.c), each
 * tokenized as a chat front end would (BOS added, control-token texts parsed); with --chat
 * each continues the conversation so far. One engine runs them all, one at a time: for
 * each, a session (run_cache.c: with --prompt-cache a clone of the longest cached prefix,
 * else a new one), one graft_session_generate that feeds the prompt's tokens the session
 * does not hold yet and samples up to -n tokens, and the text streamed to stdout as it
 * comes (run_stream.c); the engine's on_update must not block, so it only hands tokens
 * over. Per prompt, timings go to stderr, so stdout holds only the text: the prompt's, then
 * the continuation, then a newline. Without a prompt the generation starts from BOS alone;
 * without -m the model is looked up as model_path.c describes.
 *
 * The context (--ctx) and the KV budget (--kv-mem) are fixed when the engine starts: by
 * default the longest prompt plus -n (with --chat, every prompt and reply; with
 * --prompt-file, whose prompts are not known yet, the model's context length, at most
 * 4096), and the engine's budget for one session of that context. With --prompt-cache the
 * engine also holds up to --cache-entries snapshots, and the budget adds --cache-mem (by
 * default the KV of the context again, plus spare blocks).
 *
 * --logits-out: the engine does not hand out logits, so the prompt is evaluated once more on
 * a graft_context of the same kernels and threads; its last position's logits are the bits
 * the engine samples the first token from (DESIGN.md invariant 1).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

#define DEFAULT_CACHE_ENTRIES 16
#define FILE_CONTEXT GRAFT_ENGINE_DEFAULT_CONTEXT /* the longest default context with
                                                     --prompt-file: the engine's default */
#define MAX_CACHE_ENTRIES 4094 /* the engine's sessions, less the prompt's session and the
                                  capture's snapshot on its way into the cache */
_Static_assert(MAX_CACHE_ENTRIES == GRAFT_ENGINE_MAX_SESSIONS - 2, "MAX_CACHE_ENTRIES");
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

static const char run_usage[] =
    "usage: graft run [-m MODEL] [-p PROMPT]... [--prompt-file FILE] [-n N] [OPTIONS]\n"
    "\n"
    "Generates text from each PROMPT in turn through one engine and streams it to stdout:\n"
    "the prompt, its continuation, a newline. Timings go to stderr, a line per prompt.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE        GGUF model (default: $GRAFT_MODEL, else stories260K.gguf in\n"
    "                          $GRAFT_MODELS_DIR, ../shared/models/ or next to the binary)\n"
    "  -p, --prompt TEXT       a prompt; repeat for several, run in order (default: generate\n"
    "                          from BOS alone)\n"
    "  --prompt-file FILE      more prompts after the -p ones, one per line (empty lines are\n"
    "                          skipped); - reads stdin, each line run as it arrives\n"
    "  --chat                  each prompt continues the conversation: it is given after\n"
    "                          every earlier prompt and reply, without BOS\n"
    "  --prompt-cache          keep the KV of prompts already computed (and with --chat of\n"
    "                          replies) in a prefix cache: a prompt that starts as an earlier\n"
    "                          one did computes only the rest; stderr tells per prompt the\n"
    "                          tokens reused and computed, then sums up the cache\n"
    "  --cache-entries N       snapshots the cache holds at most (default "
    STRINGIFY(DEFAULT_CACHE_ENTRIES) ", at most " STRINGIFY(MAX_CACHE_ENTRIES) ")\n"
    "  --cache-mem SIZE        KV bytes the cache holds alone at most, with an optional K, M or\n"
    "                          G suffix (default: the KV of --ctx positions, plus 64 per\n"
    "                          entry for the partly filled blocks of snapshots)\n"
    "  -n, --n-predict N       generate at most N tokens per prompt (default 128)\n"
    "  --temp T                temperature, 0 for greedy (default 0.8)\n"
    "  --top-k K               keep the K most likely tokens, 0 for all (default 40)\n"
    "  --top-p P               keep the smallest set of probability P, 1 for off (default 0.95)\n"
    "  --min-p P               drop tokens below P times the top probability (default 0.05)\n"
    "  --repeat-penalty R      penalty for every token already in the context, 1 for off\n"
    "                          (default 1)\n"
    "  --repeat-last-n N       the penalty looks at the context's last N tokens, -1 for all of\n"
    "                          it, 0 for none (default -1)\n"
    "  --top-nsigma N          keep the tokens within N standard deviations of the best logit,\n"
    "                          0 or below for off (default 0)\n"
    "  --typical P             keep the tokens nearest the entropy until they hold more than\n"
    "                          P of the mass, 1 for off (default 1)\n"
    "  --dynatemp-range R      dynamic temperature: within the temperature +- R, by the\n"
    "                          entropy of the top-k tokens, 0 for off (default 0)\n"
    "  --dynatemp-exp E        the exponent of the normalised entropy (default 1)\n"
    "  --xtc-probability P     how often XTC drops the likeliest tokens, 0 for off (default 0)\n"
    "  --xtc-threshold T       XTC drops all tokens of probability T or more but the least\n"
    "                          likely of them (default 0.1)\n"
    "  --mirostat N            Mirostat 1 or 2 in place of top-k, top-p, min-p, typical,\n"
    "                          top-nsigma, XTC and dynatemp, 0 for off (default 0)\n"
    "  --mirostat-ent TAU      Mirostat's target surprise in bits (default 5)\n"
    "  --mirostat-lr ETA       Mirostat's learning rate (default 0.1)\n"
    "  --dry-multiplier M      DRY: a token that would extend a repeat of the context loses\n"
    "                          M * base^(length - allowed length), 0 for off (default 0)\n"
    "  --dry-base B            DRY's base, at least 1 (default 1.75)\n"
    "  --dry-allowed-length N  repeats shorter than N go unpenalised (default 2)\n"
    "  --dry-penalty-last-n N  DRY looks at the context's last N tokens, -1 for all of it, 0\n"
    "                          for none (default -1)\n"
    "  --dry-sequence-breaker S\n"
    "                          a repeat does not reach back across S (1 to 40 bytes);\n"
    "                          repeatable: the first replaces the defaults \\n : \" *, and\n"
    "                          \"none\" removes those given before it\n"
    "  --seed S                random seed, the same for every prompt (default 0)\n"
    "  --ctx N                 context positions (default: the longest prompt + N, with --chat\n"
    "                          every prompt and reply, with --prompt-file the model's; at most\n"
    "                          the model's and 4096 with --prompt-file)\n"
    "  --kv-mem SIZE           KV cache budget in bytes, with an optional K, M or G suffix\n"
    "                          (powers of 1024; default: what the engine gives one session\n"
    "                          of --ctx positions, plus --cache-mem with --prompt-cache)\n"
    "  --threads N             compute threads (default 0: one per online CPU)\n"
    "  --json                  each continuation is one JSON object: tokens that cannot\n"
    "                          continue one are never sampled, and it ends as the object\n"
    "                          closes\n"
    "  --json-schema FILE      the same, and the object is an instance of the JSON schema in\n"
    "                          FILE (the subset the README lists; others are refused)\n"
    "  --grammar-file FILE     each continuation matches the GBNF grammar in FILE (llama.cpp's\n"
    "                          syntax; rule root): tokens that cannot continue a match are\n"
    "                          never sampled; the end of generation comes only after a\n"
    "                          whole match, and a match nothing can follow ends it\n"
    "  --kernels K             scalar, avx2, avxvnni or avx512 (default: $GRAFT_KERNELS, else the best)\n"
    "  --logits-out FILE       write the last prompt position's logits (n_vocab float32,\n"
    "                          little-endian) to FILE; one prompt only\n"
    "  -h, --help              show this help\n";

typedef struct run_options {
    const char *model;
    graft__cli_list prompts;
    const char *prompt_file;
    const char *logits_out;
    const char *kernels;
    const char *json_schema_file; /* --json-schema */
    const char *grammar_file;     /* --grammar-file */
    int json;                     /* --json */
    int32_t n_predict;
    int32_t repeat_last_n; /* -1: the whole context, 0: no penalty */
    int32_t dry_last_n;    /* -1: the whole context, 0: DRY off */
    graft__cli_list dry_breakers; /* --dry-sequence-breaker, as given ("none" included) */
    int32_t n_ctx;
    int32_t threads;
    int32_t cache_entries; /* 0: not given */
    size_t kv_mem;
    size_t cache_mem;      /* 0: not given */
    int chat, prompt_cache;
    graft_sampling sampling;
} run_options;

/* What one run holds; freed by run_free. */
typedef struct run_state {
    graft_model *model;
    graft_model_info info;
    graft_engine *engine;
    graft_prefix_cache *cache; /* --prompt-cache */
    graft__run_prompts prompts;
    graft__run_stream stream;
    int32_t n_ctx;
    size_t cache_mem;
    char *json_schema; /* --json-schema's text */
    size_t json_schema_len;
    char *grammar;     /* --grammar-file's text */
    size_t grammar_len;
} run_state;

static void run_free(run_state *s)
{
    free(s->json_schema);
    free(s->grammar);
    graft_prefix_cache_free(s->cache);
    graft_engine_free(s->engine);
    graft_model_free(s->model);
    graft__run_prompts_close(&s->prompts);
    graft__run_stream_free(&s->stream);
}

/* Options that only make sense together. */
static int check_combinations(const run_options *o)
{
    const char *cache_opt = o->cache_entries > 0 ? "--cache-entries"
                            : o->cache_mem > 0   ? "--cache-mem"
                                                 : NULL;
    if (cache_opt != NULL && !o->prompt_cache) {
        graft__cli_error("run", "option %s needs --prompt-cache", cache_opt);
        return GRAFT_CLI_USAGE;
    }
    if (o->json + (o->json_schema_file != NULL) + (o->grammar_file != NULL) > 1) {
        graft__cli_error("run", "options --json, --json-schema and --grammar-file exclude each "
                         "other");
        return GRAFT_CLI_USAGE;
    }
    for (int i = 0; i < o->dry_breakers.n; i++) {
        size_t len = strlen(o->dry_breakers.items[i]);
        if (len == 0 || len > GRAFT_DRY_MAX_BREAKER_BYTES || i >= GRAFT_DRY_MAX_BREAKERS) {
            graft__cli_error("run", "option --dry-sequence-breaker takes at most %d strings of "
                             "1 to %d bytes", GRAFT_DRY_MAX_BREAKERS,
                             GRAFT_DRY_MAX_BREAKER_BYTES);
            return GRAFT_CLI_USAGE;
        }
    }
    if (o->logits_out != NULL && (o->prompts.n > 1 || o->prompt_file != NULL)) {
        graft__cli_error("run", "option --logits-out takes one prompt, not several -p or "
                         "--prompt-file");
        return GRAFT_CLI_USAGE;
    }
    return GRAFT_CLI_RUN;
}

static int parse_run_options(int argc, char **argv, run_options *o)
{
    o->n_predict = 128;
    o->repeat_last_n = -1;
    o->dry_last_n = -1;
    o->sampling = graft_sampling_default();
    o->prompts.items = calloc((size_t)argc, sizeof *o->prompts.items);
    o->dry_breakers.items = calloc((size_t)argc, sizeof *o->dry_breakers.items);
    if (o->prompts.items == NULL || o->dry_breakers.items == NULL) {
        graft__cli_error("run", "out of memory");
        return GRAFT_CLI_FAILED;
    }
    graft_sampling *sp = &o->sampling;
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--prompt", "-p", GRAFT_CLI_LIST, &o->prompts, 0, 0, 0},
        {"--prompt-file", NULL, GRAFT_CLI_STRING, &o->prompt_file, 0, 0, 0},
        {"--chat", NULL, GRAFT_CLI_FLAG, &o->chat, 0, 0, 1},
        {"--prompt-cache", NULL, GRAFT_CLI_FLAG, &o->prompt_cache, 0, 0, 1},
        {"--cache-entries", NULL, GRAFT_CLI_INT, &o->cache_entries, 1, MAX_CACHE_ENTRIES, 0},
        {"--cache-mem", NULL, GRAFT_CLI_SIZE, &o->cache_mem, 1, (double)SIZE_MAX, 0},
        {"--n-predict", "-n", GRAFT_CLI_INT, &o->n_predict, 0, INT32_MAX, 0},
        {"--temp", NULL, GRAFT_CLI_FLOAT, &sp->temperature, 0, 1e30, 0},
        {"--top-k", NULL, GRAFT_CLI_INT, &sp->top_k, 0, INT32_MAX, 0},
        {"--top-p", NULL, GRAFT_CLI_FLOAT, &sp->top_p, 0, 1, 0},
        {"--min-p", NULL, GRAFT_CLI_FLOAT, &sp->min_p, 0, 1, 0},
        {"--repeat-penalty", NULL, GRAFT_CLI_FLOAT, &sp->repetition_penalty, 0.01, 100, 0},
        {"--repeat-last-n", NULL, GRAFT_CLI_INT, &o->repeat_last_n, -1, INT32_MAX, 0},
        {"--top-nsigma", NULL, GRAFT_CLI_FLOAT, &sp->top_n_sigma, -1, 100, 0},
        {"--typical", NULL, GRAFT_CLI_FLOAT, &sp->typical_p, 0, 1, 0},
        {"--dynatemp-range", NULL, GRAFT_CLI_FLOAT, &sp->dynatemp_range, 0, 100, 0},
        {"--dynatemp-exp", NULL, GRAFT_CLI_FLOAT, &sp->dynatemp_exponent, 0, 100, 0},
        {"--xtc-probability", NULL, GRAFT_CLI_FLOAT, &sp->xtc_probability, 0, 1, 0},
        {"--xtc-threshold", NULL, GRAFT_CLI_FLOAT, &sp->xtc_threshold, 0, 1, 0},
        {"--mirostat", NULL, GRAFT_CLI_INT, &sp->mirostat, 0, 2, 0},
        {"--mirostat-ent", NULL, GRAFT_CLI_FLOAT, &sp->mirostat_tau, 0, 100, 0},
        {"--mirostat-lr", NULL, GRAFT_CLI_FLOAT, &sp->mirostat_eta, 0, 10, 0},
        {"--dry-multiplier", NULL, GRAFT_CLI_FLOAT, &sp->dry_multiplier, 0, 100, 0},
        {"--dry-base", NULL, GRAFT_CLI_FLOAT, &sp->dry_base, 1, 100, 0},
        {"--dry-allowed-length", NULL, GRAFT_CLI_INT, &sp->dry_allowed_length, 0, INT32_MAX, 0},
        {"--dry-penalty-last-n", NULL, GRAFT_CLI_INT, &o->dry_last_n, -1, INT32_MAX, 0},
        {"--dry-sequence-breaker", NULL, GRAFT_CLI_LIST, &o->dry_breakers, 0, 0, 0},
        {"--seed", NULL, GRAFT_CLI_U64, &sp->seed, 0, 0, 0},
        {"--ctx", NULL, GRAFT_CLI_INT, &o->n_ctx, 0, INT32_MAX, 0},
        {"--kv-mem", NULL, GRAFT_CLI_SIZE, &o->kv_mem, 1, (double)SIZE_MAX, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, GRAFT_MAX_THREADS, 0},
        {"--kernels", NULL, GRAFT_CLI_STRING, &o->kernels, 0, 0, 0},
        {"--logits-out", NULL, GRAFT_CLI_STRING, &o->logits_out, 0, 0, 0},
        {"--json", NULL, GRAFT_CLI_FLAG, &o->json, 0, 0, 1},
        {"--json-schema", NULL, GRAFT_CLI_STRING, &o->json_schema_file, 0, 0, 0},
        {"--grammar-file", NULL, GRAFT_CLI_STRING, &o->grammar_file, 0, 0, 0},
    };
    const graft__cli_command cmd = {"run", run_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    int rc = graft__cli_parse(&cmd, argc, argv, NULL);
    if (o->repeat_last_n == 0)
        sp->repetition_penalty = 1.0f;
    sp->penalty_last_n = o->repeat_last_n > 0 ? o->repeat_last_n : 0;
    if (o->dry_last_n == 0)
        sp->dry_multiplier = 0.0f;
    sp->dry_penalty_last_n = o->dry_last_n > 0 ? o->dry_last_n : 0;
    return rc != GRAFT_CLI_RUN ? rc : check_combinations(o);
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

/* --ctx; else what the -p prompts need with -n after each, at most the training context
 * (but never below the longest prompt); else, with --prompt-file, the training context, at
 * most FILE_CONTEXT. */
static int context_size(const run_options *o, run_state *s)
{
    if (o->n_ctx > 0) {
        s->n_ctx = o->n_ctx;
        return GRAFT_CLI_OK;
    }
    int64_t want = FILE_CONTEXT, longest = 1;
    if (o->prompt_file == NULL &&
        graft__run_prompts_measure(s->model, o->prompts.items, o->prompts.n, o->chat,
                                   o->n_predict, &want, &longest) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    if (s->info.n_ctx_train > 0 && want > s->info.n_ctx_train)
        want = s->info.n_ctx_train;
    if (want < longest)
        want = longest;
    s->n_ctx = want > INT32_MAX ? INT32_MAX : (int32_t)want;
    return GRAFT_CLI_OK;
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

/* a + b, or SIZE_MAX when it does not fit (the engine then refuses the budget). */
static size_t add_sizes(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* The engine's limits: one session, plus the cache's snapshots and the capture's snapshot
 * on its way; a budget of the session's context and spare blocks, plus the cache's bytes. */
static graft_engine_options engine_options(const run_options *o, run_state *s)
{
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = 1;
    eo.max_context = s->n_ctx;
    eo.kv_mem = o->kv_mem;
    eo.n_threads = o->threads;
    eo.kernels = o->kernels;
    if (!o->prompt_cache)
        return eo;
    size_t per_position = (size_t)s->info.kv_bytes_per_position;
    int32_t entries = o->cache_entries > 0 ? o->cache_entries : DEFAULT_CACHE_ENTRIES;
    eo.max_sessions = entries + 2;
    size_t cache_positions =
        (size_t)s->n_ctx + (size_t)GRAFT_ENGINE_SPARE_POSITIONS * (size_t)entries;
    s->cache_mem = o->cache_mem > 0 ? o->cache_mem : per_position * cache_positions;
    if (o->kv_mem == 0) {
        size_t positions =
            (size_t)s->n_ctx + (size_t)GRAFT_ENGINE_SPARE_POSITIONS * (size_t)eo.max_sessions;
        eo.kv_mem = add_sizes(per_position * positions, s->cache_mem);
    }
    return eo;
}

static int create_cache(const run_options *o, run_state *s)
{
    int32_t entries = o->cache_entries > 0 ? o->cache_entries : DEFAULT_CACHE_ENTRIES;
    char *err = NULL;
    int rc = graft_prefix_cache_create(s->engine, entries, s->cache_mem, &s->cache, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot create the prompt cache: %s",
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

static int start_engine(const run_options *o, run_state *s)
{
    graft_engine_options eo = engine_options(o, s);
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
    return o->prompt_cache ? create_cache(o, s) : GRAFT_CLI_OK;
}

/* ---- --logits-out ------------------------------------------------------------------------ */

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
    const graft__run_prompts *p = &s->prompts;
    graft_context_options co = graft_context_default_options();
    co.n_ctx = (int32_t)p->n;
    co.n_threads = o->threads;
    co.kernels = o->kernels;
    graft_context *ctx = NULL;
    char *err = NULL;
    int rc = graft_context_create_ex(s->model, &co, &ctx, &err);
    float *logits = malloc((size_t)s->info.n_vocab * sizeof *logits);
    if (rc == GRAFT_OK && logits == NULL)
        rc = GRAFT_ENOMEM;
    if (rc == GRAFT_OK)
        rc = graft_context_eval(ctx, p->tokens, p->n, logits);
    int status = GRAFT_CLI_OK;
    const char *why = err ? err : graft_context_errmsg(ctx);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot evaluate the prompt for --logits-out: %s",
                         why ? why : graft_status_str(rc));
        status = GRAFT_CLI_FAILED;
    } else {
        status = write_logits(o->logits_out, logits, s->info.n_vocab);
    }
    graft_free(err);
    free(logits);
    graft_context_free(ctx);
    return status;
}

/* ---- one prompt ---------------------------------------------------------------------------- */

/* "prompt" when the run has one prompt, else "prompt 3". */
static const char *prompt_name(const run_options *o, const run_state *s, char *buf, size_t cap)
{
    if (o->prompts.n <= 1 && o->prompt_file == NULL)
        snprintf(buf, cap, "prompt");
    else
        snprintf(buf, cap, "prompt %d", s->prompts.index);
    return buf;
}

/* The prompt fits the context, else a message. */
static int check_context(const run_options *o, const run_state *s)
{
    const graft__run_prompts *p = &s->prompts;
    if (p->n <= (size_t)s->n_ctx)
        return GRAFT_CLI_OK;
    char name[32];
    prompt_name(o, s, name, sizeof name);
    if (o->chat && p->index > 1)
        graft__cli_error("run", "at %s the conversation has %zu tokens but the context is %d "
                         "positions (--ctx)", name, p->n, (int)s->n_ctx);
    else
        graft__cli_error("run", "%s%s has %zu tokens but --ctx is %d",
                         strcmp(name, "prompt") == 0 ? "the " : "", name, p->n, (int)s->n_ctx);
    return GRAFT_CLI_FAILED;
}

/* Queues the generation on turn->session: the prompt's tokens the session does not hold
 * yet, then -n tokens (one, not shown, for -n 0: the engine reads 0 as "until the context
 * is full"), sampled with the run's settings. */
static int submit(const run_options *o, run_state *s, graft__run_turn *turn,
                  graft_generation **gen)
{
    const graft__run_prompts *p = &s->prompts;
    int32_t max_new = o->n_predict > 0 ? o->n_predict : 1;
    int32_t most = s->n_ctx - (int32_t)p->n + 1; /* the context bounds the tokens */
    graft_update_cb on_update = graft__run_stream_update;
    graft_settled_cb on_settled = graft__run_stream_settled;
    void *user = &s->stream;
    int rc = graft__run_stream_reset(&s->stream, (size_t)(max_new < most ? max_new : most));
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "out of memory");
        return GRAFT_CLI_FAILED;
    }
    if (graft__run_turn_begin(s->engine, s->cache, p->tokens, p->n, &on_update, &on_settled,
                              &user, turn) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_generate_config config = graft_generate_default();
    config.max_new_tokens = max_new;
    config.sampling = o->sampling;
    config.output_format = o->json                 ? GRAFT_OUTPUT_JSON_OBJECT
                           : s->json_schema != NULL ? GRAFT_OUTPUT_JSON_SCHEMA
                           : s->grammar != NULL     ? GRAFT_OUTPUT_GRAMMAR
                                                    : GRAFT_OUTPUT_TEXT;
    config.json_schema = s->json_schema;
    config.json_schema_len = s->json_schema_len;
    config.grammar = s->grammar;
    config.grammar_len = s->grammar_len;
    if (o->dry_breakers.n > 0) { /* those after the last "none" */
        int first = o->dry_breakers.n;
        while (first > 0 && strcmp(o->dry_breakers.items[first - 1], "none") != 0)
            first--;
        config.dry_sequence_breakers = o->dry_breakers.items + first;
        config.n_dry_sequence_breakers = (size_t)(o->dry_breakers.n - first);
    }
    rc = graft_session_generate(turn->session, p->tokens + turn->reused,
                                p->n - (size_t)turn->reused, &config, on_update, on_settled,
                                user, gen);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot start the generation: %s", graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

/* One line on stderr: the prompt's tokens (reused from the cache and computed, with
 * --prompt-cache), their speed (computed tokens from submission to the first token) and
 * the time to the first token, then the generated tokens and their speed. */
static void print_timings(const run_options *o, const run_state *s, graft_generation *gen,
                          size_t n_gen)
{
    graft_generation_metrics m;
    graft_generation_metrics_get(gen, &m);
    double first_s = (double)m.time_to_first_token_ns * 1e-9;
    double rate = first_s > 0 ? (double)m.prompt_tokens_computed / first_s : 0.0;
    char name[32];
    prompt_name(o, s, name, sizeof name);
    if (s->cache != NULL)
        fprintf(stderr, "%s: %zu tokens, %d reused from the cache, %d computed at %.1f tok/s, "
                "first token after %.2f ms", name, s->prompts.n, (int)m.prompt_tokens_reused,
                (int)m.prompt_tokens_computed, rate, first_s * 1e3);
    else
        fprintf(stderr, "%s: %zu tokens, %.1f tok/s, first token after %.2f ms", name,
                s->prompts.n, rate, first_s * 1e3);
    fprintf(stderr, " | eval: %d tokens, %.1f tok/s\n", (int)n_gen, m.decode_tokens_per_s);
}

/* Waits for the generation to settle, then reports how it ended and its timings; *n_gen
 * receives the tokens shown (at most -n). */
static int report(const run_options *o, run_state *s, graft_generation *gen, size_t *n_gen)
{
    int rc = graft_generation_wait(gen);
    graft_generation_tokens(gen, n_gen);
    if (rc == GRAFT_ECAPACITY && o->kv_mem > 0) {
        graft__cli_error("run", "generation failed after %zu tokens: %s (--kv-mem %zu is too "
                         "small for this context)", *n_gen, graft_generation_error(gen),
                         o->kv_mem);
        return GRAFT_CLI_FAILED;
    }
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "generation failed: %s", graft_generation_error(gen));
        return GRAFT_CLI_FAILED;
    }
    if (*n_gen > (size_t)o->n_predict)
        *n_gen = (size_t)o->n_predict;
    if (graft_generation_finish_reason(gen) == GRAFT_FINISH_LENGTH &&
        *n_gen < (size_t)o->n_predict)
        graft__cli_error("run", "the context is full (%d positions)", (int)s->n_ctx);
    print_timings(o, s, gen, *n_gen);
    return GRAFT_CLI_OK;
}

/* Runs the current prompt (s->prompts): generates, prints, reports; with --chat the reply
 * joins the conversation. */
static int run_prompt(const run_options *o, run_state *s, const char *text)
{
    graft__run_prompts *p = &s->prompts;
    if (check_context(o, s) != GRAFT_CLI_OK ||
        (o->logits_out != NULL && prompt_logits(o, s) != GRAFT_CLI_OK))
        return GRAFT_CLI_FAILED;
    graft_detok *detok = NULL;
    if (graft_detok_create(s->model, &detok) != GRAFT_OK) {
        graft__cli_error("run", "out of memory");
        return GRAFT_CLI_FAILED;
    }
    graft__run_turn turn = {0};
    graft_generation *gen = NULL;
    int rc = submit(o, s, &turn, &gen);
    size_t n_gen = 0;
    if (rc == GRAFT_CLI_OK) {
        if (text != NULL)
            graft__run_put_text(text, strlen(text));
        graft__run_stream_print(&s->stream, detok, (size_t)o->n_predict);
        rc = report(o, s, gen, &n_gen);
    }
    if (rc == GRAFT_CLI_OK) {
        size_t n_sampled;
        const int32_t *reply = graft_generation_tokens(gen, &n_sampled);
        rc = graft__run_prompts_reply(p, reply, n_gen);
    }
    graft__run_turn_end(s->cache, &turn, rc == GRAFT_CLI_OK && o->chat ? p->tokens : NULL,
                        p->n);
    graft_generation_free(gen);
    graft_detok_free(detok);
    return rc;
}

static int run_prompts(const run_options *o, run_state *s)
{
    int rc = graft__run_prompts_open(&s->prompts, s->model, o->prompts.items, o->prompts.n,
                                     o->prompt_file, o->chat);
    const char *text;
    bool more = rc == GRAFT_CLI_OK;
    while (more && rc == GRAFT_CLI_OK) {
        rc = graft__run_prompts_next(&s->prompts, &text, &more);
        if (rc == GRAFT_CLI_OK && more)
            rc = run_prompt(o, s, text);
    }
    if (rc == GRAFT_CLI_OK && s->cache != NULL)
        graft__run_cache_summary(s->cache);
    return rc;
}

/* The file of option `option` (path NULL: not given) into *text, checked by `check` to be
 * something the engine can hold output to (a JSON schema, a grammar). */
static int load_format(const char *option, const char *path,
                       int (*check)(const char *, size_t, char **), char **text, size_t *len)
{
    if (path == NULL)
        return GRAFT_CLI_OK;
    *text = graft__cli_read_file("run", path, len);
    if (*text == NULL)
        return GRAFT_CLI_FAILED;
    char *why = NULL;
    int rc = check(*text, *len, &why);
    if (rc != GRAFT_OK)
        graft__cli_error("run", "%s %s: %s", option, path, why ? why : graft_status_str(rc));
    graft_free(why);
    return rc == GRAFT_OK ? GRAFT_CLI_OK : GRAFT_CLI_FAILED;
}

int graft__cli_run(int argc, char **argv)
{
    run_options o = {0};
    int rc = parse_run_options(argc, argv, &o);
    if (rc != GRAFT_CLI_RUN) {
        free(o.prompts.items);
        free(o.dry_breakers.items);
        return rc;
    }
    run_state s = {0};
    rc = load_format("--json-schema", o.json_schema_file, graft_json_schema_check,
                     &s.json_schema, &s.json_schema_len);
    if (rc == GRAFT_CLI_OK)
        rc = load_format("--grammar-file", o.grammar_file, graft_grammar_check, &s.grammar,
                         &s.grammar_len);
    if (rc == GRAFT_CLI_OK)
        rc = load_model(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = context_size(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = start_engine(&o, &s);
    if (rc == GRAFT_CLI_OK)
        rc = run_prompts(&o, &s);
    run_free(&s);
    free(o.prompts.items);
    free(o.dry_breakers.items);
    return rc;
}
