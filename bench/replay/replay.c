/*
 * replay.c: bench_replay, the agent-replay benchmark's program (bench/README.md): writes
 * traces, replays one against any OpenAI-compatible server, and reports runs side by side.
 *
 *   bench_replay generate --shape agentic|chat|shared [--sessions N] [--calls N]
 *                         [--gap-ms N] [--seed N] -o TRACE
 *   bench_replay run --trace TRACE --url http://HOST:PORT --label NAME -o RESULT.json
 *                    [--vocab LO,HI] [--max-output N] [--block-tokens N]
 *   bench_replay report --trace TRACE [--vocab LO,HI] [--cdf PREFIX] RESULT.json...
 *
 * run: every request of the trace as POST /v1/completions with its prompt as token ids (so
 * every server sees the same tokens), greedy, its output length with the end of generation
 * ignored, streamed; each starts delay_ms after the request it follows completed, so
 * requests of different sessions (and forked sub-agents) run concurrently. Measured per
 * request: time to first token (the first event with text), end-to-end latency, the prompt
 * tokens the server says it computed and reused (graft's `graft` object, llama-server's
 * `timings` or usage.prompt_tokens_details.cached_tokens), the output text and, where the
 * server gives them (return_tokens), its token ids. report: per run TTFT p50/p90/p99, e2e
 * p50, wall time, output tokens/s, prompt tokens computed and their ratio to the trace's
 * ideal, reuse by source, and whether every answer equals the first run's (token ids when
 * both runs have them, else text); with --cdf, each run's TTFT distribution as a data file
 * for a plot. Timings are printed, never judged.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- run ---------------------------------------------------------------------------------- */

typedef struct outcome {
    double start_ms, ttft_ms, e2e_ms;
    long status;
    int32_t computed, reused;
    char source[16];
    char *text;
    size_t text_len;
    json_t *tokens; /* the output's token ids, when the server gives them */
    char *pending; /* SSE bytes not yet split into lines */
    size_t pending_len;
} outcome;

typedef struct replay {
    const trace *t;
    const char *url;
    int32_t lo, hi, max_output;
    double t0;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double *done_ms; /* per request, 0 until it completed */
    outcome *out;
} replay;

typedef struct job {
    replay *rp;
    int32_t index;
} job;

static void on_event(outcome *o, const char *data, double t)
{
    if (strcmp(data, "[DONE]") == 0)
        return;
    json_t *j = json_loads(data, 0, NULL);
    if (j == NULL)
        return;
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(choice, "text"));
    if (text != NULL && text[0] != '\0') {
        if (o->ttft_ms == 0)
            o->ttft_ms = t - o->start_ms;
        size_t n = strlen(text);
        o->text = realloc(o->text, o->text_len + n + 1);
        memcpy(o->text + o->text_len, text, n + 1);
        o->text_len += n;
    }
    json_t *ids = json_object_get(choice, "tokens");
    if (json_is_array(ids)) {
        if (o->tokens == NULL)
            o->tokens = json_array();
        json_array_extend(o->tokens, ids);
    }
    json_t *g = json_object_get(j, "graft"), *timings = json_object_get(j, "timings"),
           *usage = json_object_get(j, "usage");
    if (json_is_object(g)) {
        o->computed = (int32_t)json_integer_value(json_object_get(g, "tokens_computed"));
        o->reused = (int32_t)json_integer_value(json_object_get(g, "tokens_reused"));
        snprintf(o->source, sizeof o->source, "%s",
                 json_string_value(json_object_get(g, "source")) ?: "?");
    } else if (json_is_object(timings)) { /* llama-server */
        o->computed = (int32_t)json_integer_value(json_object_get(timings, "prompt_n"));
        o->reused = (int32_t)json_integer_value(json_object_get(timings, "cache_n"));
        snprintf(o->source, sizeof o->source, "llama");
    } else if (json_is_object(usage) && o->source[0] == '\0') {
        json_int_t prompt = json_integer_value(json_object_get(usage, "prompt_tokens"));
        json_int_t cached = json_integer_value(
            json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
        o->computed = (int32_t)(prompt - cached);
        o->reused = (int32_t)cached;
        snprintf(o->source, sizeof o->source, "usage");
    }
    json_decref(j);
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    outcome *o = user;
    size_t bytes = size * n;
    double t = now_ms();
    o->pending = realloc(o->pending, o->pending_len + bytes + 1);
    memcpy(o->pending + o->pending_len, data, bytes);
    o->pending_len += bytes;
    o->pending[o->pending_len] = '\0';
    char *line = o->pending, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
        *nl = '\0';
        if (strncmp(line, "data: ", 6) == 0)
            on_event(o, line + 6, t);
        line = nl + 1;
    }
    size_t rest = o->pending_len - (size_t)(line - o->pending);
    memmove(o->pending, line, rest + 1);
    o->pending_len = rest;
    return bytes;
}

static int32_t output_of(const replay *rp, const trace_request *r)
{
    return rp->max_output > 0 && r->output_length > rp->max_output ? rp->max_output
                                                                   : r->output_length;
}

static char *request_body(const replay *rp, const trace_request *r)
{
    size_t n = 0;
    int32_t *tokens = trace_tokens(rp->t, r, rp->lo, rp->hi, &n);
    json_t *ids = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(ids, json_integer(tokens[i]));
    free(tokens);
    int32_t out = output_of(rp, r);
    json_t *body = json_pack("{s:s, s:o, s:i, s:f, s:b, s:b, s:{s:b}, s:b}", "model", "replay",
                             "prompt", ids, "max_tokens", (int)out, "temperature", 0.0,
                             "ignore_eos", 1, "stream", 1, "stream_options", "include_usage", 1,
                             "cache_prompt", 1);
    json_object_set_new(body, "return_tokens", json_true());
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return s;
}

static void *run_one(void *arg)
{
    job *jb = arg;
    replay *rp = jb->rp;
    const trace_request *r = &rp->t->requests[jb->index];
    double base = rp->t0;
    pthread_mutex_lock(&rp->mu);
    while (r->after >= 0 && rp->done_ms[r->after] == 0)
        pthread_cond_wait(&rp->cv, &rp->mu);
    if (r->after >= 0)
        base = rp->done_ms[r->after];
    pthread_mutex_unlock(&rp->mu);
    double wait = base + r->delay_ms - now_ms();
    if (wait > 0) {
        struct timespec ts = {(time_t)(wait / 1e3), (long)(((long long)(wait * 1e6)) % 1000000000)};
        nanosleep(&ts, NULL);
    }
    char *body = request_body(rp, r);
    outcome *o = &rp->out[jb->index];
    char url[512];
    snprintf(url, sizeof url, "%s/v1/completions", rp->url);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, o);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 3600L);
    o->start_ms = now_ms();
    curl_easy_perform(c);
    double end = now_ms();
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &o->status);
    o->e2e_ms = end - o->start_ms;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(body);
    free(o->pending);
    o->pending = NULL;
    pthread_mutex_lock(&rp->mu);
    rp->done_ms[jb->index] = end;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    return NULL;
}

static int run(const trace *t, const char *url, const char *label, int32_t lo, int32_t hi,
               int32_t max_output, const char *out_path)
{
    replay rp = {t, url, lo, hi, max_output, 0, PTHREAD_MUTEX_INITIALIZER,
                 PTHREAD_COND_INITIALIZER, calloc((size_t)t->n, sizeof(double)),
                 calloc((size_t)t->n, sizeof(outcome))};
    pthread_t *threads = malloc(sizeof *threads * (size_t)t->n);
    job *jobs = malloc(sizeof *jobs * (size_t)t->n);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    rp.t0 = now_ms();
    for (int32_t i = 0; i < t->n; i++) {
        jobs[i] = (job){&rp, i};
        pthread_create(&threads[i], &attr, run_one, &jobs[i]);
    }
    for (int32_t i = 0; i < t->n; i++)
        pthread_join(threads[i], NULL);
    double wall = now_ms() - rp.t0;
    json_t *reqs = json_array();
    int failed = 0;
    for (int32_t i = 0; i < t->n; i++) {
        outcome *o = &rp.out[i];
        failed += o->status != 200;
        json_array_append_new(
            reqs, json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:i, s:i, s:s, s:s}", "id", (int)i,
                            "status", (int)o->status, "start_ms", o->start_ms - rp.t0, "ttft_ms",
                            o->ttft_ms, "e2e_ms", o->e2e_ms, "output",
                            (int)output_of(&rp, &t->requests[i]), "computed", (int)o->computed,
                            "reused", (int)o->reused, "source", o->source, "text",
                            o->text ? o->text : ""));
        if (o->tokens != NULL)
            json_object_set_new(json_array_get(reqs, json_array_size(reqs) - 1), "tokens",
                                o->tokens);
        free(o->text);
    }
    json_t *result = json_pack("{s:s, s:s, s:f, s:o}", "label", label, "url", url, "wall_ms",
                               wall, "requests", reqs);
    int rc = json_dump_file(result, out_path, JSON_INDENT(1));
    json_decref(result);
    free(threads);
    free(jobs);
    free(rp.done_ms);
    free(rp.out);
    fprintf(stderr, "replay: %s: %d requests in %.1f s, %d failed\n", label, (int)t->n,
            wall / 1e3, failed);
    return rc == 0 && failed == 0 ? 0 : 1;
}

/* ---- report ------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return n ? v[k < n ? k : n - 1] : 0;
}

/* Writes the TTFT CDF of run k to PREFIX-k.dat: "ttft_ms fraction" per request, sorted. */
static void write_cdf(const char *prefix, int k, const char *label, double *ttft, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s-%d.dat", prefix, k);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    fprintf(f, "# %s\n", label);
    qsort(ttft, n, sizeof *ttft, cmp_double);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.3f %.4f\n", ttft[i], (double)(i + 1) / (double)n);
    fclose(f);
}

static int report(const trace *t, int32_t lo, int32_t hi, int n_files, char **files,
                  const char *cdf_prefix)
{
    int64_t ideal = trace_ideal(t, lo, hi);
    printf("Trace: %s, %d requests, ideal prompt tokens computed %lld.\n\n", t->shape, (int)t->n,
           (long long)ideal);
    printf("| run | TTFT p50 ms | p90 | p99 | e2e p50 ms | wall s | output tok/s | computed | "
           "÷ ideal | reused by source | answers = first run |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    json_t *first = NULL;
    int status = 0;
    for (int f = 0; f < n_files; f++) {
        json_t *j = json_load_file(files[f], 0, NULL);
        json_t *reqs = json_object_get(j, "requests");
        size_t n = json_array_size(reqs);
        if (j == NULL || n != (size_t)t->n) {
            fprintf(stderr, "replay: %s is not a run of this trace\n", files[f]);
            json_decref(j);
            status = 1;
            continue;
        }
        double *ttft = malloc(sizeof *ttft * n), *e2e = malloc(sizeof *e2e * n);
        long long computed = 0, out_tokens = 0;
        char sources[256] = "";
        const char *names[6] = {"cold", "cache", "session", "donor", "donor_wait", "llama"};
        long long by[6] = {0};
        size_t same = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *r = json_array_get(reqs, i);
            ttft[i] = json_number_value(json_object_get(r, "ttft_ms"));
            e2e[i] = json_number_value(json_object_get(r, "e2e_ms"));
            computed += json_integer_value(json_object_get(r, "computed"));
            out_tokens += json_integer_value(json_object_get(r, "output"));
            const char *src = json_string_value(json_object_get(r, "source")) ?: "";
            for (int k = 0; k < 6; k++)
                if (strcmp(src, names[k]) == 0)
                    by[k] += json_integer_value(json_object_get(r, "reused"));
            json_t *r0 = first ? json_array_get(json_object_get(first, "requests"), i) : r;
            json_t *ids = json_object_get(r, "tokens"), *ids0 = json_object_get(r0, "tokens");
            same += ids && ids0 ? json_equal(ids, ids0)
                                : json_equal(json_object_get(r, "text"), json_object_get(r0, "text"));
        }
        for (int k = 1; k < 6; k++)
            if (by[k] > 0)
                snprintf(sources + strlen(sources), sizeof sources - strlen(sources), "%s%s %lld",
                         sources[0] ? ", " : "", names[k], by[k]);
        double wall = json_number_value(json_object_get(j, "wall_ms")) / 1e3;
        if (cdf_prefix != NULL)
            write_cdf(cdf_prefix, f, json_string_value(json_object_get(j, "label")), ttft, n);
        printf("| %s | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f | %lld | %.2f | %s | %zu/%zu |\n",
               json_string_value(json_object_get(j, "label")), percentile(ttft, n, 0.5),
               percentile(ttft, n, 0.9), percentile(ttft, n, 0.99), percentile(e2e, n, 0.5), wall,
               wall > 0 ? (double)out_tokens / wall : 0, computed,
               ideal ? (double)computed / (double)ideal : 0, sources[0] ? sources : "-", same, n);
        free(ttft);
        free(e2e);
        if (first == NULL)
            first = j;
        else
            json_decref(j);
    }
    json_decref(first);
    return status;
}

/* ---- main --------------------------------------------------------------------------------- */

static const char usage[] =
    "usage: bench_replay generate --shape agentic|chat|shared [--sessions N] [--calls N]\n"
    "                             [--gap-ms N] [--seed N] -o TRACE\n"
    "       bench_replay run --trace TRACE --url URL --label NAME -o RESULT.json\n"
    "                        [--vocab LO,HI] [--max-output N] [--block-tokens N]\n"
    "       bench_replay report --trace TRACE [--vocab LO,HI] [--block-tokens N]\n"
    "                           [--cdf PREFIX] RESULT.json...\n"
    "Token ids of the prompts are drawn from [LO, HI) (default 1000,150000: inside the Qwen\n"
    "vocabulary); --max-output caps each request's output length (default: the trace's).\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1], *shape = NULL, *out = NULL, *trace_path = NULL, *url = NULL,
               *label = NULL, *cdf = NULL;
    int sessions = 0, calls = 0, n_files = 0;
    double gap_ms = 0;
    long long seed = 1;
    int32_t lo = 1000, hi = 150000, max_output = 0, block_tokens = 512;
    char **files = calloc((size_t)argc, sizeof *files);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--shape") == 0 && v)
            shape = argv[++i];
        else if (strcmp(a, "--sessions") == 0 && v)
            sessions = atoi(argv[++i]);
        else if (strcmp(a, "--gap-ms") == 0 && v)
            gap_ms = atof(argv[++i]);
        else if (strcmp(a, "--calls") == 0 && v)
            calls = atoi(argv[++i]);
        else if (strcmp(a, "--seed") == 0 && v)
            seed = atoll(argv[++i]);
        else if (strcmp(a, "-o") == 0 && v)
            out = argv[++i];
        else if (strcmp(a, "--trace") == 0 && v)
            trace_path = argv[++i];
        else if (strcmp(a, "--url") == 0 && v)
            url = argv[++i];
        else if (strcmp(a, "--label") == 0 && v)
            label = argv[++i];
        else if (strcmp(a, "--cdf") == 0 && v)
            cdf = argv[++i];
        else if (strcmp(a, "--max-output") == 0 && v)
            max_output = atoi(argv[++i]);
        else if (strcmp(a, "--block-tokens") == 0 && v)
            block_tokens = atoi(argv[++i]);
        else if (strcmp(a, "--vocab") == 0 && v && sscanf(argv[++i], "%d,%d", &lo, &hi) == 2)
            continue;
        else if (a[0] != '-')
            files[n_files++] = argv[i];
        else {
            fprintf(stderr, "bench_replay: unknown or incomplete option '%s'\n%s", a, usage);
            free(files);
            return 2;
        }
    }
    int rc = 2;
    if (strcmp(cmd, "generate") == 0 && shape && out && sessions >= 0 && calls >= 0) {
        rc = trace_generate(shape, sessions, calls, gap_ms, (uint64_t)seed, out) == 0 ? 0 : 1;
    } else if ((strcmp(cmd, "run") == 0 && trace_path && url && label && out) ||
               (strcmp(cmd, "report") == 0 && trace_path && n_files > 0)) {
        trace t;
        if (lo < 0 || hi <= lo || trace_read(trace_path, block_tokens, &t) != 0) {
            free(files);
            return 1;
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        rc = cmd[0] == 'r' && cmd[1] == 'u' ? run(&t, url, label, lo, hi, max_output, out)
                                            : report(&t, lo, hi, n_files, files, cdf);
        curl_global_cleanup();
        trace_free(&t);
    } else {
        fputs(usage, stderr);
    }
    free(files);
    return rc;
}
