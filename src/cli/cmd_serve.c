/*
 * cmd_serve.c: `graft serve`: the OpenAI-compatible HTTP server on one model (src/server/).
 *
 * Order of start: parse and validate every option, start listening (GET /health answers 503
 * while loading), load the model, start the engine and the prefix cache (and with
 * --cache-dir read the snapshots an earlier run wrote), mark the server ready and print
 * "graft: listening on http://HOST:PORT" with a curl command to paste. Then the main thread
 * waits for SIGINT or SIGTERM (blocked in every thread, taken here with sigwait), drains the
 * server (running requests finish within --grace-ms, the rest are cancelled), writes the
 * cache's snapshots to --cache-dir, and releases everything; the exit status is 0.
 *
 * Engine limits: --max-sessions requests generate at once; the engine holds one session per running
 * request, one for its prompt's snapshot on its way into the cache, the cache's snapshots
 * (--cache-entries) and the named sessions (--named-sessions). Its KV budget (--kv-mem, default:
 * what the engine gives that many sessions of --ctx) is shared, and the prefix cache gives blocks
 * back when a request waits for KV.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "server/server.h"

#define DEFAULT_PORT 8080
#define DEFAULT_SLOTS 4
#define DEFAULT_CACHE_ENTRIES 32
#define DEFAULT_MAX_BODY (1 << 20)
#define DEFAULT_MAX_QUEUE 64
#define DEFAULT_TIMEOUT_S 600
#define DEFAULT_REQUEST_TIMEOUT_S 30
#define DEFAULT_GRACE_MS 5000
#define DEFAULT_NAMED 16
#define DEFAULT_TTL_S 600
#define DEFAULT_STORED_RESPONSES 256
#define DEFAULT_STORED_RESPONSES_MEM ((size_t)256 << 20)
#define DEFAULT_REUSE_MIN_TOKENS 16
#define DEFAULT_REUSE_WAIT_MS 30000

static const char serve_usage[] =
    "usage: graft serve [-m MODEL] [OPTIONS]\n"
    "\n"
    "Serves the model over HTTP with an OpenAI-compatible API: POST /v1/completions,\n"
    "/v1/chat/completions and /v1/responses (streamed as server-sent events with \"stream\":\n"
    "true), and Anthropic's POST /v1/messages (streamed too) and /v1/messages/count_tokens;\n"
    "GET /v1/models[/ID], /v1/responses/ID, /health, /metrics (Prometheus), /v1/sessions\n"
    "and /props; POST /tokenize, /detokenize, /apply-template and llama-server's\n"
    "/completion and /infill (code completion, as /v1/completions' suffix, for models with\n"
    "fill-in-the-middle tokens); DELETE /v1/sessions/ID and /v1/responses/ID.\n"
    "Prompts that begin as an earlier one did reuse its KV from the prefix cache, or from a\n"
    "request still running (active reuse); the answer is the same bits either way. Runs\n"
    "until SIGINT or SIGTERM, then finishes running requests.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE        GGUF model (default: $GRAFT_MODEL, else stories260K.gguf in\n"
    "                          $GRAFT_MODELS_DIR, ../shared/models/ or next to the binary)\n"
    "  --host ADDR             IPv4 address or host name to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8080; 0: any free port)\n"
    "  --alias NAME            the model id in responses (default: the file's name)\n"
    "  --ctx N                 positions per request, prompt and output (default: the\n"
    "                          model's context length, at most 4096)\n"
    "  --max-sessions N        requests generating at once (default 4); more wait\n"
    "  --max-queue N           requests waiting beyond those; more get 429 (default 64)\n"
    "  --kv-mem SIZE           KV budget in bytes, with an optional K, M or G suffix\n"
    "                          (default: what the engine gives its sessions of --ctx)\n"
    "  --cache-entries N       prompt snapshots the prefix cache holds (default 32)\n"
    "  --named-sessions N      named sessions kept (session_id, X-Session-ID; default 16)\n"
    "  --session-ttl S         seconds an idle named session is kept (default 600)\n"
    "  --stored-responses N    responses kept for previous_response_id and GET\n"
    "                          /v1/responses/ID, least recently used first to go\n"
    "                          (default 256; 0: none)\n"
    "  --stored-responses-mem SIZE\n"
    "                          their JSON text's bytes at most, each one's whole\n"
    "                          conversation counted (default 256M); a response over it\n"
    "                          alone is not kept\n"
    "  --cache-mem SIZE        KV bytes the cache holds alone at most (default: no bound\n"
    "                          but --kv-mem; it gives blocks back when a request waits)\n"
    "  --cache-dir DIR         keep the prefix cache across restarts: read its snapshots\n"
    "                          from DIR at start and write them there at stop (DIR is made\n"
    "                          when missing; files of other models, kernel sets or KV types\n"
    "                          are left alone)\n"
    "  --threads N             compute threads (default: one per online CPU)\n"
    "  --kernels K             scalar, avx2, avxvnni or avx512 (default: the best this CPU runs)\n"
    "  --api-key KEY[,KEY...]  require 'Authorization: Bearer KEY' or 'x-api-key: KEY', one of\n"
    "                          these keys (not on /health); a named session belongs to the\n"
    "                          key that made it\n"
    "  --allow-origin ORIGIN[,ORIGIN...]\n"
    "                          let web pages of these origins (http://host:port, or * for\n"
    "                          any) call the API from a browser (CORS); default: none\n"
    "  --chat-template FILE    the Jinja chat template for /v1/chat/completions (default:\n"
    "                          the model's own, else ChatML)\n"
    "  --reasoning-format F    a thinking model's thought (its template's <think> tags):\n"
    "                          auto or deepseek, given apart as reasoning_content\n"
    "                          (default); none, left in the content as written. A\n"
    "                          request's reasoning_format overrides it\n"
    "  --max-body SIZE         request body bytes at most (default 1M); more get 413\n"
    "  --timeout S             seconds an idle connection is kept, and a kept-alive one\n"
    "                          has to send its next whole request (default 600)\n"
    "  --request-timeout S     seconds a new connection has to send its first whole\n"
    "                          request, headers and body (default 30); slower ones are\n"
    "                          closed\n"
    "  --grace-ms N            on SIGINT/SIGTERM, how long running requests may finish\n"
    "                          before they are cancelled (default 5000)\n"
    "  --active-reuse-min-tokens N\n"
    "                          a request takes a running request's prompt when that saves\n"
    "                          at least N tokens more than the prefix cache (default 16;\n"
    "                          0: active reuse off)\n"
    "  --active-reuse-wait-ms N\n"
    "                          how long a request may wait for a running request still\n"
    "                          computing a prefix it shares (default 30000; 0: never wait)\n"
    "  -h, --help              this text\n";

typedef struct serve_options {
    const char *model;
    const char *host;
    const char *alias;
    const char *api_key;
    const char *kernels;
    const char *chat_template;
    const char *allow_origins;
    const char *reasoning_format;
    const char *cache_dir;
    int32_t port, ctx, slots, queue, cache_entries, threads, timeout_s, request_timeout_s,
        grace_ms;
    int32_t named, ttl_s, stored, reuse_min_tokens, reuse_wait_ms;
    size_t kv_mem, cache_mem, max_body, stored_mem;
} serve_options;

static int parse(int argc, char **argv, serve_options *o)
{
    *o = (serve_options){.host = "127.0.0.1", .port = DEFAULT_PORT, .slots = DEFAULT_SLOTS,
                         .queue = DEFAULT_MAX_QUEUE, .cache_entries = DEFAULT_CACHE_ENTRIES,
                         .timeout_s = DEFAULT_TIMEOUT_S,
                         .request_timeout_s = DEFAULT_REQUEST_TIMEOUT_S, .grace_ms = DEFAULT_GRACE_MS,
                         .max_body = DEFAULT_MAX_BODY, .named = DEFAULT_NAMED,
                         .ttl_s = DEFAULT_TTL_S, .stored = DEFAULT_STORED_RESPONSES,
                         .stored_mem = DEFAULT_STORED_RESPONSES_MEM,
                         .reuse_min_tokens = DEFAULT_REUSE_MIN_TOKENS,
                         .reuse_wait_ms = DEFAULT_REUSE_WAIT_MS};
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--host", NULL, GRAFT_CLI_STRING, &o->host, 0, 0, 0},
        {"--port", NULL, GRAFT_CLI_INT, &o->port, 0, 65535, 0},
        {"--alias", NULL, GRAFT_CLI_STRING, &o->alias, 0, 0, 0},
        {"--ctx", NULL, GRAFT_CLI_INT, &o->ctx, 1, INT32_MAX, 0},
        {"--max-sessions", NULL, GRAFT_CLI_INT, &o->slots, 1, 1000, 0},
        {"--max-queue", NULL, GRAFT_CLI_INT, &o->queue, 0, 100000, 0},
        {"--kv-mem", NULL, GRAFT_CLI_SIZE, &o->kv_mem, 1, (double)SIZE_MAX, 0},
        {"--cache-entries", NULL, GRAFT_CLI_INT, &o->cache_entries, 0, 2000, 0},
        {"--cache-mem", NULL, GRAFT_CLI_SIZE, &o->cache_mem, 1, (double)SIZE_MAX, 0},
        {"--cache-dir", NULL, GRAFT_CLI_STRING, &o->cache_dir, 0, 0, 0},
        {"--named-sessions", NULL, GRAFT_CLI_INT, &o->named, 1, 1000, 0},
        {"--session-ttl", NULL, GRAFT_CLI_INT, &o->ttl_s, 1, 30 * 86400, 0},
        {"--stored-responses", NULL, GRAFT_CLI_INT, &o->stored, 0, 100000, 0},
        {"--stored-responses-mem", NULL, GRAFT_CLI_SIZE, &o->stored_mem, 1, (double)SIZE_MAX, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, GRAFT_MAX_THREADS, 0},
        {"--kernels", NULL, GRAFT_CLI_STRING, &o->kernels, 0, 0, 0},
        {"--api-key", NULL, GRAFT_CLI_STRING, &o->api_key, 0, 0, 0},
        {"--allow-origin", NULL, GRAFT_CLI_STRING, &o->allow_origins, 0, 0, 0},
        {"--chat-template", NULL, GRAFT_CLI_STRING, &o->chat_template, 0, 0, 0},
        {"--reasoning-format", NULL, GRAFT_CLI_STRING, &o->reasoning_format, 0, 0, 0},
        {"--max-body", NULL, GRAFT_CLI_SIZE, &o->max_body, 64, (double)SIZE_MAX, 0},
        {"--timeout", NULL, GRAFT_CLI_INT, &o->timeout_s, 1, 86400, 0},
        {"--request-timeout", NULL, GRAFT_CLI_INT, &o->request_timeout_s, 1, 86400, 0},
        {"--grace-ms", NULL, GRAFT_CLI_INT, &o->grace_ms, 0, 3600000, 0},
        {"--active-reuse-min-tokens", NULL, GRAFT_CLI_INT, &o->reuse_min_tokens, 0, INT32_MAX, 0},
        {"--active-reuse-wait-ms", NULL, GRAFT_CLI_INT, &o->reuse_wait_ms, 0, 3600000, 0},
    };
    const graft__cli_command cmd = {"serve", serve_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    int rc = graft__cli_parse(&cmd, argc, argv, NULL);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    if (o->api_key != NULL && o->api_key[0] == '\0') {
        graft__cli_error("serve", "option --api-key: the key is empty");
        return GRAFT_CLI_USAGE;
    }
    if (o->allow_origins != NULL && !graft__cors_valid_list(o->allow_origins)) {
        graft__cli_error("serve", "option --allow-origin: '%s' is not a list of origins such "
                                  "as http://localhost:3000, or *", o->allow_origins);
        return GRAFT_CLI_USAGE;
    }
    if (o->reasoning_format != NULL && strcmp(o->reasoning_format, "auto") != 0 &&
        strcmp(o->reasoning_format, "deepseek") != 0 && strcmp(o->reasoning_format, "none") != 0) {
        graft__cli_error("serve", "option --reasoning-format: '%s' is not auto, deepseek or none",
                         o->reasoning_format);
        return GRAFT_CLI_USAGE;
    }
    struct stat st;
    if (o->cache_dir != NULL && mkdir(o->cache_dir, 0777) != 0 &&
        (errno != EEXIST || stat(o->cache_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        graft__cli_error("serve", "option --cache-dir: cannot make %s: %s", o->cache_dir,
                         errno == EEXIST ? "a file of that name is there" : strerror(errno));
        return GRAFT_CLI_USAGE;
    }
    return GRAFT_CLI_RUN;
}

/* The file name of a path, without its folder and .gguf. */
static char *model_alias(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    return strndup(base, n);
}

typedef struct serving {
    graft_model *model;
    graft_engine *engine;
    graft_prefix_cache *cache;
    graft__chat chat;
} serving;

/* The chat template: --chat-template's file, the model's own, or ChatML; says which. */
static int load_template(const serve_options *o, serving *sv)
{
    graft_model_chat mc;
    graft_model_get_chat(sv->model, &mc);
    sv->chat.bos_text = mc.bos_text;
    sv->chat.eos_text = mc.eos_text;
    char *file = NULL;
    size_t len = 0;
    const char *text = mc.chat_template, *which = "the model's own";
    if (o->chat_template != NULL) {
        file = graft__cli_read_file("serve", o->chat_template, &len);
        if (file == NULL)
            return GRAFT_CLI_USAGE;
        text = file;
        which = o->chat_template;
    } else if (text == NULL) {
        text = graft_template_default();
        which = "ChatML (the model has none)";
    }
    char *err = NULL;
    int rc = graft_template_parse(text, file ? len : strlen(text), &sv->chat.tmpl, &err);
    sv->chat.text = strdup(text); /* for GET /props */
    free(file);
    if (rc != GRAFT_OK) {
        graft__cli_error("serve", "the chat template (%s) does not parse: %s", which,
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    sv->chat.thought_tags = graft__reasoning_tags_of(sv->chat.text);
    sv->chat.split_thoughts =
        o->reasoning_format == NULL || strcmp(o->reasoning_format, "none") != 0;
    fprintf(stderr, "graft: chat template: %s%s%s%s\n", which,
            sv->chat.thought_tags ? " (thoughts between " : "",
            sv->chat.thought_tags ? sv->chat.thought_tags->open : "",
            sv->chat.thought_tags ? " and its closing tag)" : "");
    return GRAFT_CLI_OK;
}

static int start_engine(const serve_options *o, const char *path, serving *sv)
{
    char *err = NULL;
    if (graft_model_load(path, &sv->model, &err) != GRAFT_OK) {
        graft__cli_error("serve", "%s", err ? err : "cannot load the model");
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    graft_model_info info;
    graft_model_get_info(sv->model, &info);
    graft_engine_options eo = graft_engine_default_options();
    eo.max_context = o->ctx > 0 ? o->ctx : 0;
    if (o->ctx > info.n_ctx_train) {
        graft__cli_error("serve", "option --ctx: %d is above the model's context length %d",
                         (int)o->ctx, (int)info.n_ctx_train);
        return GRAFT_CLI_USAGE;
    }
    /* A request may hold a session per choice (n, or prompts x n: at most GRAFT__MAX_CHOICES)
     * and a snapshot per prompt being captured; the cache and the named sessions hold theirs. */
    int64_t sessions =
        (int64_t)o->slots * 2 * GRAFT__MAX_CHOICES + o->cache_entries + o->named + 1;
    eo.max_sessions = (int32_t)(sessions < GRAFT_ENGINE_MAX_SESSIONS ? sessions
                                                                    : GRAFT_ENGINE_MAX_SESSIONS);
    eo.n_threads = o->threads;
    eo.kernels = o->kernels;
    if (o->kv_mem > 0) {
        eo.kv_mem = o->kv_mem;
    } else {
        graft_engine_options per_request = eo;
        per_request.max_sessions = 2 * o->slots;
        eo.kv_mem = graft_engine_default_kv_mem(sv->model, &per_request);
    }
    int rc = graft_engine_create(sv->model, &eo, &sv->engine, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("serve", "cannot start the engine: %s", err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    rc = graft_prefix_cache_create(sv->engine, o->cache_entries, o->cache_mem, &sv->cache, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("serve", "cannot create the prefix cache: %s",
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return load_template(o, sv);
}

/* --cache-dir at start: the snapshots an earlier run wrote, into the cache. */
static void read_cache(graft_prefix_cache *cache, const char *dir)
{
    int32_t loaded = 0, refused = 0;
    char *why = NULL;
    int rc = graft_prefix_cache_load(cache, dir, &loaded, &refused, &why);
    if (rc != GRAFT_OK)
        fprintf(stderr, "graft: prefix cache: %s\n", why ? why : graft_status_str(rc));
    else if (refused > 0)
        fprintf(stderr, "graft: prefix cache: %d snapshots read from %s, %d skipped (%s)\n",
                (int)loaded, dir, (int)refused, why ? why : "refused");
    else
        fprintf(stderr, "graft: prefix cache: %d snapshots read from %s\n", (int)loaded, dir);
    graft_free(why);
}

/* --cache-dir at stop: the cache's snapshots, for the next start. */
static void write_cache(graft_prefix_cache *cache, const char *dir)
{
    int32_t saved = 0;
    char *why = NULL;
    int rc = graft_prefix_cache_save(cache, dir, &saved, &why);
    if (rc != GRAFT_OK)
        fprintf(stderr, "graft: prefix cache: %s\n", why ? why : graft_status_str(rc));
    else
        fprintf(stderr, "graft: prefix cache: %d snapshots written to %s\n", (int)saved, dir);
    graft_free(why);
}

static void stop_engine(serving *sv)
{
    graft_template_free(sv->chat.tmpl);
    free(sv->chat.text);
    graft_prefix_cache_free(sv->cache);
    graft_engine_free(sv->engine);
    graft_model_free(sv->model);
}

int graft__cli_serve(int argc, char **argv)
{
    serve_options o;
    int rc = parse(argc, argv, &o);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    char *path = graft__cli_find_model("serve", o.model);
    if (path == NULL)
        return GRAFT_CLI_FAILED;
    char *alias = o.alias ? strdup(o.alias) : model_alias(path);
    /* SIGINT and SIGTERM go to sigwait below, not to any thread started from here on. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    graft__server_config cfg = {.host = o.host,
                                .port = o.port,
                                .alias = alias,
                                .api_key = o.api_key,
                                .max_body = o.max_body,
                                .max_queue = o.queue,
                                .slots = o.slots,
                                .max_connections = 2 * (o.slots + o.queue) + 16,
                                .timeout_s = o.timeout_s,
                                .request_timeout_s = o.request_timeout_s,
                                .named_sessions = o.named,
                                .session_ttl_s = o.ttl_s,
                                .stored_responses = o.stored,
                                .stored_responses_mem = o.stored_mem,
                                .grace_ms = o.grace_ms,
                                .reuse_min_tokens = o.reuse_min_tokens,
                                .reuse_wait_ms = o.reuse_wait_ms,
                                .allow_origins = o.allow_origins};
    graft__server *server = NULL;
    int port = 0;
    char *err = NULL;
    if (graft__server_start(&cfg, &server, &port, &err) != GRAFT_OK) {
        graft__cli_error("serve", "%s", err ? err : "cannot start the server");
        free(err);
        free(alias);
        free(path);
        return GRAFT_CLI_FAILED;
    }
    serving sv = {0};
    rc = start_engine(&o, path, &sv);
    if (rc != GRAFT_CLI_OK) {
        graft__server_stop(server);
        stop_engine(&sv);
        free(alias);
        free(path);
        return rc;
    }
    if (o.cache_dir != NULL)
        read_cache(sv.cache, o.cache_dir);
    graft__server_set_ready(server, sv.model, sv.engine, sv.cache, &sv.chat);
    fprintf(stderr, "graft: listening on http://%s:%d\n", o.host, port);
    fprintf(stderr, "graft: try: curl http://%s:%d/v1/completions -H 'Content-Type: "
                    "application/json' -d '{\"prompt\": \"Once upon a time\", \"max_tokens\": "
                    "32}'\n", o.host, port);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "graft: %s: stopping (running requests have %d ms to finish)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (int)o.grace_ms);
    graft__server_stop(server);
    if (o.cache_dir != NULL)
        write_cache(sv.cache, o.cache_dir);
    stop_engine(&sv);
    free(alias);
    free(path);
    return GRAFT_CLI_OK;
}
