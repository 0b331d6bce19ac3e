/*
 * serve_bench.c: what the HTTP layer of `graft serve` costs, measured against the engine it
 * runs on, side by side in one run.
 *
 *   build/release/bench_serve -m MODEL [--threads N] [--streams 1,8,32] [--gen N]
 *                             [--cached N] [--reps N]
 *
 * Aggregate decode: --streams requests at once, each a distinct 16-token prompt given as
 * token ids and --gen greedy tokens (end of generation ignored), once through the engine in
 * this process (N sessions generating together) and once through `graft serve` (started on
 * a free port of 127.0.0.1, N streaming /v1/completions requests from N threads); the
 * figure is generated tokens over the wall time from the first request to the last token.
 * Time to first token of a cached prompt: a prompt of --cached token ids, computed once and
 * captured, then asked for again (the cache gives all but its last token): the engine's own
 * time to first token (the cache lookup and the generation's TTFT) against the time from
 * sending the HTTP request to receiving its first event; and that request's own time to
 * first token as the server reports it (graft.ttft_ms), whose difference from the client's
 * is what HTTP costs it (on a connection kept alive, as SDKs keep theirs). Each figure is measured --reps
 * times, engine and HTTP alternated (the engine first in odd rounds, the server first in
 * even ones); the medians, their ratio and the spread are printed. Never fails on a timing.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_lib.h"
#include "graft.h"

enum { PROMPT = 16, MAX_STREAMS = 64, MAX_REPS = 15 };

/* The median of v[0..n), v left as it is. */
static double median(const double *v, int n)
{
    double s[MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof *v);
    return graft__bench_median(s, n);
}

typedef struct opts {
    const char *model, *bin;
    int threads, gen, cached, reps;
    int streams[8], n_streams;
} opts;

static int32_t n_vocab;

/* Token ids for stream `stream` of round `round`: distinct prompts, no special ids. */
static void prompt_of(int stream, int round, int32_t *out, int n)
{
    uint32_t x = (uint32_t)(stream * 7919 + round * 104729 + 1);
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        out[i] = 3 + (int32_t)((x >> 8) % (uint32_t)(n_vocab - 3));
    }
}

/* ---- the engine side ------------------------------------------------------------------------ */

static double engine_aggregate(graft_model *m, const opts *o, int n, int round)
{
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = n;
    eo.max_context = PROMPT + o->gen + 8;
    eo.n_threads = o->threads;
    graft_engine *e = NULL;
    if (graft_engine_create(m, &eo, &e, NULL) != GRAFT_OK)
        return 0;
    graft_session *s[MAX_STREAMS];
    graft_generation *g[MAX_STREAMS];
    for (int i = 0; i < n; i++)
        graft_session_open(e, &s[i], NULL);
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = o->gen;
    c.ignore_eog = 1;
    c.sampling.temperature = 0;
    double t0 = graft__bench_now_s();
    for (int i = 0; i < n; i++) {
        int32_t p[PROMPT];
        prompt_of(i, round, p, PROMPT);
        graft_session_generate(s[i], p, PROMPT, &c, NULL, NULL, NULL, &g[i]);
    }
    for (int i = 0; i < n; i++)
        graft_generation_wait(g[i]);
    double wall = graft__bench_now_s() - t0;
    for (int i = 0; i < n; i++) {
        graft_generation_free(g[i]);
        graft_session_close(s[i]);
    }
    graft_engine_free(e);
    return n * o->gen / wall;
}

/* The engine's own time to first token of a prompt the cache holds (lookup included). */
static double engine_cached_ttft(graft_model *m, const opts *o, int round)
{
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = 4;
    eo.max_context = o->cached + 8;
    eo.n_threads = o->threads;
    graft_engine *e = NULL;
    graft_prefix_cache *cache = NULL;
    if (graft_engine_create(m, &eo, &e, NULL) != GRAFT_OK ||
        graft_prefix_cache_create(e, 2, 0, &cache, NULL) != GRAFT_OK)
        return 0;
    int32_t *p = malloc((size_t)o->cached * sizeof *p);
    prompt_of(999, round, p, o->cached);
    double ttft = 0;
    for (int pass = 0; pass < 2; pass++) {
        double t0 = graft__bench_now_s();
        graft_session *s = NULL;
        int32_t matched = 0;
        if (graft_prefix_cache_lookup(cache, p, (size_t)o->cached, &s, &matched) != GRAFT_OK) {
            graft_session_open(e, &s, NULL);
            matched = 0;
        }
        double lookup = graft__bench_now_s() - t0;
        graft_prompt_capture *cap = NULL;
        graft_prompt_capture_create(cache, s, p, (size_t)o->cached, &cap);
        graft_update_cb up = NULL;
        graft_settled_cb st = NULL;
        void *user = NULL;
        graft_prompt_capture_wrap(cap, &up, &st, &user);
        graft_generate_config c = graft_generate_default();
        c.max_new_tokens = 1;
        c.sampling.temperature = 0;
        graft_generation *g = NULL;
        graft_session_generate(s, p + matched, (size_t)(o->cached - matched), &c, up, st, user,
                               &g);
        graft_generation_wait(g);
        graft_generation_metrics gm;
        graft_generation_metrics_get(g, &gm);
        ttft = lookup + gm.time_to_first_token_ns / 1e9;
        graft_generation_free(g);
        graft_prompt_capture_collect(cap);
        graft_prompt_capture_free(cap);
        graft_session_close(s);
    }
    free(p);
    graft_prefix_cache_free(cache);
    graft_engine_free(e);
    return ttft;
}

/* ---- the HTTP side -------------------------------------------------------------------------- */

typedef struct server {
    pid_t pid;
    int port;
} server;

static server start_server(const opts *o, int slots, int ctx)
{
    server s = {0};
    char log[] = "/tmp/bench_serve_XXXXXX";
    int fd = mkstemp(log);
    close(fd);
    s.pid = fork();
    if (s.pid == 0) {
        char threads[16], sl[16], cx[16];
        snprintf(threads, sizeof threads, "%d", o->threads);
        snprintf(sl, sizeof sl, "%d", slots);
        snprintf(cx, sizeof cx, "%d", ctx);
        if (freopen(log, "w", stderr) == NULL)
            _exit(126);
        execl(o->bin, o->bin, "serve", "-m", o->model, "--port", "0", "--threads", threads,
              "--max-sessions", sl, "--ctx", cx, (char *)NULL);
        _exit(127);
    }
    const char *mark = "graft: listening on http://127.0.0.1:";
    for (int i = 0; i < 12000 && s.port == 0; i++) {
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, mark, strlen(mark)) == 0)
                s.port = atoi(line + strlen(mark));
        if (f)
            fclose(f);
        if (s.port == 0)
            usleep(10000);
    }
    unlink(log);
    return s;
}

static void stop_server(server *s)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
}

typedef struct call {
    const server *s;
    CURL *keep; /* a connection kept alive between calls, or NULL: a new one per call */
    char body[32768];
    double t_send, t_first, t_end;
    char tail[4096]; /* the end of the event stream: the usage chunk's graft object */
    size_t tail_len;
} call;

static size_t on_data(char *data, size_t size, size_t n, void *user)
{
    call *c = user;
    size_t bytes = size * n;
    if (c->t_first == 0)
        c->t_first = graft__bench_now_s();
    size_t keep = bytes < sizeof c->tail - 1 ? bytes : sizeof c->tail - 1;
    if (c->tail_len + keep >= sizeof c->tail)
        c->tail_len = 0;
    memcpy(c->tail + c->tail_len, data + bytes - keep, keep);
    c->tail_len += keep;
    c->tail[c->tail_len] = '\0';
    return bytes;
}

static void *post(void *arg)
{
    call *c = arg;
    CURL *h = c->keep ? c->keep : curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", c->s->port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    c->t_first = 0;
    c->tail_len = 0;
    c->t_send = graft__bench_now_s();
    curl_easy_perform(h);
    c->t_end = graft__bench_now_s();
    if (c->keep == NULL)
        curl_easy_cleanup(h);
    return NULL;
}

static void body_of(char *out, size_t cap, const int32_t *p, int n, int max_tokens)
{
    size_t len = (size_t)snprintf(out, cap, "{\"prompt\": [");
    for (int i = 0; i < n && len + 16 < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "", (int)p[i]);
    snprintf(out + len, cap - len, "], \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": "
             "true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}",
             max_tokens);
}

static double http_aggregate(const opts *o, int n, int round)
{
    server s = start_server(o, n, PROMPT + o->gen + 8);
    static call calls[MAX_STREAMS];
    pthread_t t[MAX_STREAMS];
    for (int i = 0; i < n; i++) {
        int32_t p[PROMPT];
        prompt_of(i, round, p, PROMPT);
        calls[i].s = &s;
        body_of(calls[i].body, sizeof calls[i].body, p, PROMPT, o->gen);
    }
    double t0 = graft__bench_now_s();
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, post, &calls[i]);
    double end = t0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (calls[i].t_end > end)
            end = calls[i].t_end;
    }
    stop_server(&s);
    return n * o->gen / (end - t0);
}

/* The server's own time to first token of the last request (its graft.ttft_ms: the cache
 * lookup and the generation's TTFT), in seconds; 0 when missing. */
static double server_ttft(const call *c)
{
    const char *at = strstr(c->tail, "\"ttft_ms\":");
    return at ? atof(at + strlen("\"ttft_ms\":")) / 1e3 : 0;
}

static double http_cached_ttft(const opts *o, int round, double *inside)
{
    server s = start_server(o, 1, o->cached + 8);
    int32_t *p = malloc((size_t)o->cached * sizeof *p);
    prompt_of(999, round, p, o->cached);
    static call c;
    c.s = &s;
    c.keep = curl_easy_init(); /* as SDKs do: one connection, kept alive */
    body_of(c.body, sizeof c.body, p, o->cached, 1);
    post(&c); /* cold: computed and captured */
    post(&c); /* cached */
    *inside = server_ttft(&c);
    curl_easy_cleanup(c.keep);
    c.keep = NULL;
    free(p);
    stop_server(&s);
    return c.t_first - c.t_send;
}

static void parse_list(const char *s, opts *o)
{
    o->n_streams = 0;
    for (const char *p = s; *p && o->n_streams < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        int v = atoi(p);
        if (v >= 1 && v <= MAX_STREAMS)
            o->streams[o->n_streams++] = v;
    }
}

int main(int argc, char **argv)
{
    opts o = {NULL, getenv("GRAFT_BIN"), 2, 32, 2048, 3, {1, 8, 32}, 3};
    if (o.bin == NULL)
        o.bin = "build/release/graft";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(argv[i], "-m") == 0)
            o.model = v, i++;
        else if (strcmp(argv[i], "--threads") == 0)
            o.threads = atoi(v), i++;
        else if (strcmp(argv[i], "--gen") == 0)
            o.gen = atoi(v), i++;
        else if (strcmp(argv[i], "--cached") == 0)
            o.cached = atoi(v), i++;
        else if (strcmp(argv[i], "--reps") == 0)
            o.reps = atoi(v), i++;
        else if (strcmp(argv[i], "--streams") == 0)
            parse_list(v, &o), i++;
        else {
            fprintf(stderr, "usage: bench_serve -m MODEL [--threads N] [--streams 1,8,32] "
                            "[--gen N] [--cached N] [--reps N]\n");
            return 2;
        }
    }
    if (o.model == NULL || o.reps < 1 || o.reps > MAX_REPS || o.gen < 1 || o.cached < 2 ||
        o.cached > 4000) {
        fprintf(stderr, "bench_serve: -m MODEL is required; --reps 1..15, --gen >= 1, "
                        "--cached 2..4000\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    graft_model *m = NULL;
    char *err = NULL;
    if (graft_model_load(o.model, &m, &err) != GRAFT_OK) {
        fprintf(stderr, "bench_serve: %s\n", err ? err : "cannot load the model");
        return 1;
    }
    graft_model_info info;
    graft_model_get_info(m, &info);
    n_vocab = info.n_vocab;
    printf("model %s, %d threads, %d reps (engine and HTTP alternated)\n\n", o.model, o.threads,
           o.reps);
    printf("| streams | engine tok/s | HTTP tok/s | HTTP / engine (median, min-max) |\n"
           "|---|---|---|---|\n");
    for (int k = 0; k < o.n_streams; k++) {
        int n = o.streams[k];
        double eng[MAX_REPS], web[MAX_REPS], ratio[MAX_REPS];
        for (int r = 0; r < o.reps; r++) {
            if (r % 2 == 0) {
                eng[r] = engine_aggregate(m, &o, n, r);
                web[r] = http_aggregate(&o, n, r);
            } else {
                web[r] = http_aggregate(&o, n, r);
                eng[r] = engine_aggregate(m, &o, n, r);
            }
            ratio[r] = web[r] / eng[r];
        }
        double lo = ratio[0], hi = ratio[0];
        for (int r = 1; r < o.reps; r++)
            lo = ratio[r] < lo ? ratio[r] : lo, hi = ratio[r] > hi ? ratio[r] : hi;
        printf("| %d | %.1f | %.1f | %.3f (%.3f-%.3f) |\n", n, median(eng, o.reps),
               median(web, o.reps), median(ratio, o.reps), lo, hi);
        fflush(stdout);
    }
    double eng[MAX_REPS], web[MAX_REPS], diff[MAX_REPS], inside[MAX_REPS], cost[MAX_REPS];
    for (int r = 0; r < o.reps; r++) {
        if (r % 2 == 0) {
            eng[r] = engine_cached_ttft(m, &o, r);
            web[r] = http_cached_ttft(&o, r, &inside[r]);
        } else {
            web[r] = http_cached_ttft(&o, r, &inside[r]);
            eng[r] = engine_cached_ttft(m, &o, r);
        }
        diff[r] = (web[r] - eng[r]) * 1e3;
        cost[r] = (web[r] - inside[r]) * 1e3;
    }
    double lo = diff[0], hi = diff[0];
    for (int r = 1; r < o.reps; r++)
        lo = diff[r] < lo ? diff[r] : lo, hi = diff[r] > hi ? diff[r] : hi;
    printf("\ncached prompt of %d tokens: TTFT engine %.2f ms, HTTP %.2f ms, HTTP - engine "
           "%.2f ms (median; %.2f to %.2f)\n", o.cached, median(eng, o.reps) * 1e3,
           median(web, o.reps) * 1e3, median(diff, o.reps), lo, hi);
    lo = hi = cost[0];
    for (int r = 1; r < o.reps; r++)
        lo = cost[r] < lo ? cost[r] : lo, hi = cost[r] > hi ? cost[r] : hi;
    printf("the same request seen from inside the server (its graft.ttft_ms) and from the "
           "client: HTTP costs %.2f ms (median; %.2f to %.2f)\n", median(cost, o.reps), lo, hi);
    graft_model_free(m);
    curl_global_cleanup();
    return 0;
}
