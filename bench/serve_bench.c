/*
 * serve_bench.c: what the HTTP layer of `graft serve` costs, measured against the engine it
 * runs on, side by side in one run.
 *
 *   build/release/bench_serve -m MODEL [--threads N] [--streams 1,8,32] [--gen N]
 *                             [--cached N] [--reps N] [--samples N]
 *
 * Both sides run in this process on one engine: `graft serve`'s HTTP layer (libgraftserver,
 * as the command starts it, with its default limits and a prefix cache of its default size)
 * listens on a free port of 127.0.0.1 and serves from the engine the engine side calls
 * directly, so the two share the weights, the KV pool and the compute threads and differ
 * only in HTTP. (Two processes, each with its own copy of the packed weights, differ in
 * their compute by more than HTTP costs, and by a different amount from run to run.) One
 * engine and server per stream count serve all its rounds, as a server runs.
 *
 * Aggregate decode: --streams requests at once, each a distinct 16-token prompt given as
 * token ids and --gen greedy tokens (end of generation ignored), once through the engine
 * (N sessions generating together) and once through HTTP (N streaming /v1/completions
 * requests, all read by one client thread so that the client takes as little as it can of
 * the machine it shares). Two figures: generated tokens over the wall time from the first
 * request to the last token (prompts and arrivals included), and decode alone, the tokens
 * that arrived while every stream was decoding over that window (each token's arrival taken
 * where its user sees it: the engine's update callback, the client's event carrying its
 * id). Each is measured --reps times, engine and HTTP alternated (the engine first in even
 * rounds), each half after a pause in which the compute threads stop spinning; the medians,
 * the median of the rounds' ratios and their spread are printed.
 *
 * Time to first token of a cached prompt: the prompt of --cached token ids is computed and
 * captured once, then asked for --samples times through the engine and through HTTP, the
 * two alternated request by request (the cache gives all but its last token). Per pair: the
 * time from the client's call to send the HTTP request to its first event minus the
 * engine's own time to first token (the cache lookup and the generation's TTFT); and minus
 * that request's time to first token as the server reports it (graft.ttft_ms), which is
 * what HTTP costs it (on a connection kept alive, as SDKs keep theirs). Each request starts
 * after the same pause. Pairs, not separate medians, because one token's compute varies
 * from request to request by more than HTTP costs. Never fails on a timing.
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_lib.h"
#include "graft.h"
#include "server/server.h"

enum { PROMPT = 16, MAX_STREAMS = 64, MAX_REPS = 15, MAX_SAMPLES = 200, MAX_GEN = 1024 };

/* The pause before each measured part, longer than the compute threads spin after a job:
 * each part meets an idle machine, as a server's requests do, rather than sharing the cores
 * with workers still spinning after the other part. */
enum { IDLE_US = 5000 };

/* How long the client waits, once a stream has data, for the other streams' events of the
 * same engine step, so that it wakes about once a step rather than once a stream: a small
 * part of a decode step of the models this measures. */
enum { GATHER_US = 300 };

/* The median of v[0..n), v left as it is. */
static double median(const double *v, int n)
{
    double s[MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof *v);
    return graft__bench_median(s, n);
}

typedef struct opts {
    const char *model;
    int threads, gen, cached, reps, samples;
    int streams[8], n_streams;
} opts;

static int32_t n_vocab;
static FILE *bench_err; /* the stderr this benchmark was started with */

/* Token ids for stream `stream` of round `round`: distinct prompts, no special ids. */
static void prompt_of(int stream, int round, int32_t *out, int n)
{
    uint32_t x = (uint32_t)(stream * 7919 + round * 104729 + 1);
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        out[i] = 3 + (int32_t)((x >> 8) % (uint32_t)(n_vocab - 3));
    }
}

/* When each token of one stream arrived. */
typedef struct stream_times {
    double at[MAX_GEN];
    int n;
} stream_times;

static void note_tokens(stream_times *st, size_t n)
{
    double now = graft__bench_now_s();
    for (size_t i = 0; i < n && st->n < MAX_GEN; i++)
        st->at[st->n++] = now;
}

/* One round's two figures: generated tokens over the wall time from the first request to
 * the last token (prompts and arrivals included), and decode alone: the tokens that arrived
 * while every stream was decoding (after the last stream's first token, up to the first
 * stream's last) over that window. */
typedef struct aggregate {
    double wall, decode;
} aggregate;

static aggregate aggregate_of(const stream_times *st, int n, double t0)
{
    double from = 0, to = 0, end = t0;
    long total = 0;
    for (int i = 0; i < n; i++) {
        if (st[i].n == 0)
            return (aggregate){0, 0};
        double first = st[i].at[0], last = st[i].at[st[i].n - 1];
        from = i == 0 || first > from ? first : from;
        to = i == 0 || last < to ? last : to;
        end = last > end ? last : end;
        total += st[i].n;
    }
    long inside = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < st[i].n; k++)
            inside += st[i].at[k] > from && st[i].at[k] <= to;
    return (aggregate){total / (end - t0), to > from ? inside / (to - from) : 0};
}

/* ---- the engine side ------------------------------------------------------------------------ */

static void on_engine_tokens(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    (void)gen, (void)tokens;
    note_tokens(user, n);
}

static aggregate engine_aggregate(graft_engine *e, const opts *o, int n, int round)
{
    static stream_times times[MAX_STREAMS];
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
        times[i].n = 0;
        graft_session_generate(s[i], p, PROMPT, &c, on_engine_tokens, NULL, &times[i], &g[i]);
    }
    for (int i = 0; i < n; i++)
        graft_generation_wait(g[i]);
    for (int i = 0; i < n; i++) {
        graft_generation_free(g[i]);
        graft_session_close(s[i]);
    }
    return aggregate_of(times, n, t0);
}

/* One request for prompt p through the engine as the server makes it (a cache lookup, the
 * prompt captured at the first output, one token); returns the lookup plus the
 * generation's time to first token. */
static double engine_ttft(graft_engine *e, graft_prefix_cache *cache, const int32_t *p, int n)
{
    double t0 = graft__bench_now_s();
    graft_session *s = NULL;
    int32_t matched = 0;
    if (graft_prefix_cache_lookup(cache, p, (size_t)n, &s, &matched) != GRAFT_OK) {
        graft_session_open(e, &s, NULL);
        matched = 0;
    }
    double lookup = graft__bench_now_s() - t0;
    graft_prompt_capture *cap = NULL;
    graft_prompt_capture_create(cache, s, p, (size_t)n, &cap);
    graft_update_cb up = NULL;
    graft_settled_cb st = NULL;
    void *user = NULL;
    graft_prompt_capture_wrap(cap, &up, &st, &user);
    graft_generate_config c = graft_generate_default();
    c.max_new_tokens = 1;
    c.sampling.temperature = 0;
    graft_generation *g = NULL;
    graft_session_generate(s, p + matched, (size_t)(n - matched), &c, up, st, user, &g);
    graft_generation_wait(g);
    graft_generation_metrics gm;
    graft_generation_metrics_get(g, &gm);
    graft_generation_free(g);
    graft_prompt_capture_collect(cap);
    graft_prompt_capture_free(cap);
    graft_session_close(s);
    return lookup + gm.time_to_first_token_ns / 1e9;
}

/* ---- the HTTP side -------------------------------------------------------------------------- */

/* An engine with a prefix cache, and graft serve's HTTP layer started in this process on a
 * free port of 127.0.0.1 serving from that engine: the engine side and the HTTP side share
 * the weights, the KV pool and the compute threads, and differ only in HTTP. */
typedef struct served {
    graft_engine *engine;
    graft_prefix_cache *cache;
    graft__server *http;
    int port;
} served;

/* Cache entries and server limits as `graft serve` has them by default; the engine sized as
 * it sizes its own for `slots` requests of `ctx` positions. 0 when all of it started. */
static int serve_start(graft_model *m, const opts *o, int slots, int ctx, served *sv)
{
    enum { CACHE_ENTRIES = 32, QUEUE = 64 };
    *sv = (served){NULL, NULL, NULL, 0};
    graft_engine_options eo = graft_engine_default_options();
    eo.max_context = ctx;
    eo.max_sessions = 2 * slots;
    eo.n_threads = o->threads;
    eo.kv_mem = graft_engine_default_kv_mem(m, &eo);
    eo.max_sessions = 2 * slots + CACHE_ENTRIES + 1;
    if (graft_engine_create(m, &eo, &sv->engine, NULL) != GRAFT_OK ||
        graft_prefix_cache_create(sv->engine, CACHE_ENTRIES, 0, &sv->cache, NULL) != GRAFT_OK)
        return -1;
    graft__server_config cfg = {.host = "127.0.0.1",
                                .alias = "bench",
                                .max_body = 1 << 20,
                                .max_queue = QUEUE,
                                .slots = slots,
                                .max_connections = 2 * (slots + QUEUE) + 16,
                                .timeout_s = 600,
                                .request_timeout_s = 30,
                                .named_sessions = 16,
                                .session_ttl_s = 600,
                                .grace_ms = 5000,
                                .reuse_min_tokens = 16,
                                .reuse_wait_ms = 30000};
    char *err = NULL;
    if (graft__server_start(&cfg, &sv->http, &sv->port, &err) != GRAFT_OK) {
        free(err);
        return -1;
    }
    graft__server_set_ready(sv->http, m, sv->engine, sv->cache, NULL);
    return 0;
}

static void serve_stop(served *sv)
{
    graft__server_stop(sv->http);
    graft_prefix_cache_free(sv->cache);
    graft_engine_free(sv->engine);
}

typedef struct call {
    int port;
    CURL *keep; /* the connection of the cached-prompt requests, kept alive between them */
    char body[32768];
    double t_send, t_first;
    double server_ttft; /* the usage event's graft.ttft_ms, in seconds; 0 when missing */
    char event[8192];   /* the event being received, up to its blank line */
    size_t event_len;
    stream_times times; /* each token's arrival, counted from the events' "tokens" */
} call;

/* The number of ids in the event's "tokens" array (return_tokens), 0 without one. */
static size_t tokens_in(const char *event)
{
    const char *at = strstr(event, "\"tokens\":[");
    if (at == NULL)
        return 0;
    at += strlen("\"tokens\":[");
    if (*at == ']')
        return 0;
    size_t n = 1;
    for (; *at && *at != ']'; at++)
        n += *at == ',';
    return n;
}

/* Adds received bytes to the event being read; a complete event notes its tokens. */
static void read_events(call *c, const char *data, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) {
        if (c->event_len + 1 < sizeof c->event)
            c->event[c->event_len++] = data[i];
        if (c->event_len >= 2 && c->event[c->event_len - 1] == '\n' &&
            c->event[c->event_len - 2] == '\n') {
            c->event[c->event_len] = '\0';
            note_tokens(&c->times, tokens_in(c->event));
            const char *ttft = strstr(c->event, "\"ttft_ms\":");
            if (ttft != NULL)
                c->server_ttft = atof(ttft + strlen("\"ttft_ms\":")) / 1e3;
            c->event_len = 0;
        }
    }
}

static size_t on_data(char *data, size_t size, size_t n, void *user)
{
    call *c = user;
    size_t bytes = size * n;
    if (c->t_first == 0)
        c->t_first = graft__bench_now_s();
    read_events(c, data, bytes);
    return bytes;
}

/* Sets up handle h to post c's body to s's /v1/completions, its events read into c. */
static void prepare(CURL *h, call *c)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", c->port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* SIGPIPE is ignored once, not around each call */
    c->t_first = 0;
    c->server_ttft = 0;
    c->event_len = 0;
    c->times.n = 0;
}

/* Posts c's body on its kept-alive connection and waits for the whole response. */
static void post(call *c)
{
    prepare(c->keep, c);
    c->t_send = graft__bench_now_s();
    curl_easy_perform(c->keep);
}

static void body_of(char *out, size_t cap, const int32_t *p, int n, int max_tokens)
{
    size_t len = (size_t)snprintf(out, cap, "{\"prompt\": [");
    for (int i = 0; i < n && len + 16 < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "", (int)p[i]);
    snprintf(out + len, cap - len, "], \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": "
             "true, \"stream\": true, \"return_tokens\": true, \"stream_options\": "
             "{\"include_usage\": true}}",
             max_tokens);
}

/* The n streams are read by one thread (libcurl's multi interface) that wakes about once
 * for the tokens of a step rather than once per stream: the machine is shared with the
 * server, and what the client spends is taken from the server's compute. */
static aggregate http_aggregate(int port, const opts *o, int n, int round)
{
    static call calls[MAX_STREAMS];
    CURL *h[MAX_STREAMS];
    CURLM *multi = curl_multi_init();
    for (int i = 0; i < n; i++) {
        int32_t p[PROMPT];
        prompt_of(i, round, p, PROMPT);
        calls[i].port = port;
        body_of(calls[i].body, sizeof calls[i].body, p, PROMPT, o->gen);
        h[i] = curl_easy_init();
        prepare(h[i], &calls[i]);
        curl_multi_add_handle(multi, h[i]);
    }
    double t0 = graft__bench_now_s();
    int running = n;
    while (running > 0) {
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            break;
        if (running > 0) {
            curl_multi_poll(multi, NULL, 0, 1000, NULL);
            usleep(GATHER_US);
        }
    }
    static stream_times times[MAX_STREAMS];
    for (int i = 0; i < n; i++) {
        curl_multi_remove_handle(multi, h[i]);
        curl_easy_cleanup(h[i]);
        times[i] = calls[i].times;
        if (times[i].n != o->gen)
            fprintf(bench_err, "bench_serve: stream %d counted %d tokens of %d\n", i,
                    times[i].n, o->gen);
    }
    curl_multi_cleanup(multi);
    return aggregate_of(times, n, t0);
}

/* The cached-prompt figure: one engine and one server, each given the prompt once cold
 * (computed and captured), then --samples requests for it on each, alternated (the engine
 * first in even samples); per sample, the HTTP time to first event minus the engine's
 * (diff) and minus the server's own graft.ttft_ms (cost). */
static int cached_pairs(graft_model *m, const opts *o, double *diff, double *cost)
{
    served sv;
    if (serve_start(m, o, 1, o->cached + 8, &sv) != 0) {
        serve_stop(&sv);
        return -1;
    }
    int32_t *p = malloc((size_t)o->cached * sizeof *p);
    static call c;
    c.port = sv.port;
    c.keep = curl_easy_init(); /* as SDKs do: one connection, kept alive */
    prompt_of(999, 0, p, o->cached);
    body_of(c.body, sizeof c.body, p, o->cached, 1);
    engine_ttft(sv.engine, sv.cache, p, o->cached);
    post(&c);
    for (int i = 0; i < o->samples; i++) {
        double engine = 0;
        for (int half = 0; half < 2; half++) {
            usleep(IDLE_US);
            if ((half == 0) == (i % 2 == 0))
                engine = engine_ttft(sv.engine, sv.cache, p, o->cached);
            else
                post(&c);
        }
        double web = c.t_first - c.t_send;
        diff[i] = (web - engine) * 1e3;
        cost[i] = (web - c.server_ttft) * 1e3;
    }
    curl_easy_cleanup(c.keep);
    c.keep = NULL;
    free(p);
    serve_stop(&sv);
    return 0;
}

/* Prints "median (min-max)" of the rounds' ratios. */
static void print_ratio(const double *ratio, int n)
{
    double lo = ratio[0], hi = ratio[0];
    for (int r = 1; r < n; r++)
        lo = ratio[r] < lo ? ratio[r] : lo, hi = ratio[r] > hi ? ratio[r] : hi;
    printf("%.3f (%.3f-%.3f)", median(ratio, n), lo, hi);
}

/* Prints "median (p10 to p90)" of v[0..n), sorting v. */
static void print_spread(double *v, int n)
{
    double mid = graft__bench_median(v, n);
    printf("%.2f ms (median; p10 %.2f, p90 %.2f)", mid, v[n / 10], v[n - 1 - n / 10]);
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
    opts o = {NULL, 2, 32, 2048, 3, 31, {1, 8, 32}, 3};
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
        else if (strcmp(argv[i], "--samples") == 0)
            o.samples = atoi(v), i++;
        else if (strcmp(argv[i], "--streams") == 0)
            parse_list(v, &o), i++;
        else {
            fprintf(stderr, "usage: bench_serve -m MODEL [--threads N] [--streams 1,8,32] "
                            "[--gen N] [--cached N] [--reps N] [--samples N]\n");
            return 2;
        }
    }
    if (o.model == NULL || o.reps < 1 || o.reps > MAX_REPS || o.gen < 1 || o.gen > MAX_GEN || o.cached < 2 ||
        o.cached > 4000 || o.samples < 1 || o.samples > MAX_SAMPLES) {
        fprintf(stderr, "bench_serve: -m MODEL is required; --reps 1..15, --gen 1..1024, "
                        "--cached 2..4000, --samples 1..200\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
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
    /* The server's log, a line per request on stderr, goes to /dev/null; the benchmark's
     * own messages go to the stderr it was started with. */
    bench_err = fdopen(dup(STDERR_FILENO), "w");
    int devnull = open("/dev/null", O_WRONLY);
    if (bench_err == NULL || devnull < 0 || dup2(devnull, STDERR_FILENO) < 0) {
        fprintf(stderr, "bench_serve: cannot set the server's log aside\n");
        return 1;
    }
    close(devnull);
    printf("model %s, %d threads, %d reps (engine and HTTP alternated)\n\n", o.model, o.threads,
           o.reps);
    printf("| streams | engine tok/s | HTTP tok/s | HTTP / engine (median, min-max) | engine "
           "decode tok/s | HTTP decode tok/s | HTTP / engine, decode |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < o.n_streams; k++) {
        int n = o.streams[k];
        double eng[MAX_REPS], web[MAX_REPS], ratio[MAX_REPS];
        double eng_dec[MAX_REPS], web_dec[MAX_REPS], ratio_dec[MAX_REPS];
        served sv;
        if (serve_start(m, &o, n, PROMPT + o.gen + 8, &sv) != 0) {
            fprintf(bench_err, "bench_serve: cannot start the engine and server for %d streams\n",
                    n);
            serve_stop(&sv);
            graft_model_free(m);
            return 1;
        }
        for (int r = 0; r < o.reps; r++) {
            aggregate ea = {0, 0}, ha = {0, 0};
            for (int half = 0; half < 2; half++) {
                usleep(IDLE_US);
                if ((half == 0) == (r % 2 == 0))
                    ea = engine_aggregate(sv.engine, &o, n, r);
                else
                    ha = http_aggregate(sv.port, &o, n, r);
            }
            eng[r] = ea.wall, web[r] = ha.wall, ratio[r] = ea.wall > 0 ? ha.wall / ea.wall : 0;
            eng_dec[r] = ea.decode, web_dec[r] = ha.decode;
            ratio_dec[r] = ea.decode > 0 ? ha.decode / ea.decode : 0;
        }
        serve_stop(&sv);
        printf("| %d | %.1f | %.1f | ", n, median(eng, o.reps), median(web, o.reps));
        print_ratio(ratio, o.reps);
        printf(" | %.1f | %.1f | ", median(eng_dec, o.reps), median(web_dec, o.reps));
        print_ratio(ratio_dec, o.reps);
        printf(" |\n");
        fflush(stdout);
    }
    double diff[MAX_SAMPLES], cost[MAX_SAMPLES];
    if (cached_pairs(m, &o, diff, cost) != 0) {
        fprintf(bench_err, "bench_serve: cannot start the engine and server for the cached "
                           "prompt\n");
        graft_model_free(m);
        return 1;
    }
    printf("\ncached prompt of %d tokens, %d requests on each side alternated: HTTP - engine ",
           o.cached, o.samples);
    print_spread(diff, o.samples);
    printf("\nthe same requests seen from inside the server (graft.ttft_ms) and from the client: "
           "HTTP costs ");
    print_spread(cost, o.samples);
    printf("\n");
    graft_model_free(m);
    curl_global_cleanup();
    return 0;
}
