/*
 * metrics.c: the server's counters and the Prometheus text format of GET /metrics
 * (server.h).
 *
 * Counters are atomics bumped by the HTTP threads; the engine's and the prefix cache's own
 * figures are read through their public getters when the text is made. The time to first
 * token and the inter-token latency are histograms with fixed bucket bounds.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/server.h"

static const double bounds_ms[12] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
static const char *const endpoints[GRAFT__EP_COUNT] = {
    "completions", "chat_completions", "responses", "messages", "infill", "other", "unknown"};
static const char *const classes[GRAFT__STATUS_CLASSES] = {"2xx", "3xx", "4xx",
                                                           "5xx", "429", "401"};

static void observe(graft__histogram *h, uint64_t ns)
{
    double ms = ns / 1e6;
    for (int i = 0; i < 12; i++)
        if (ms <= bounds_ms[i])
            atomic_fetch_add(&h->bucket[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, (unsigned long long)(ns / 1000));
}

void graft__metrics_ttft(graft__server_metrics *m, uint64_t ns)
{
    observe(&m->ttft, ns);
}

void graft__metrics_itl(graft__server_metrics *m, uint64_t ns)
{
    observe(&m->itl, ns);
}

typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->buf != NULL && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t want = t->cap ? t->cap * 2 : 4096;
        while (want < t->len + (size_t)n + 1)
            want *= 2;
        char *grown = realloc(t->buf, want);
        if (grown == NULL)
            return;
        t->buf = grown;
        t->cap = want;
    }
}

static void counter(text *t, const char *name, const char *help, unsigned long long v)
{
    put(t, "# HELP graft_%s %s\n# TYPE graft_%s counter\ngraft_%s %llu\n", name, help, name,
        name, v);
}

static void gauge(text *t, const char *name, const char *help, long long v)
{
    put(t, "# HELP graft_%s %s\n# TYPE graft_%s gauge\ngraft_%s %lld\n", name, help, name, name,
        v);
}

static void histogram(text *t, const char *name, const char *help, graft__histogram *h)
{
    put(t, "# HELP graft_%s %s\n# TYPE graft_%s histogram\n", name, help, name);
    for (int i = 0; i < 12; i++)
        put(t, "graft_%s_bucket{le=\"%g\"} %llu\n", name, bounds_ms[i] / 1e3,
            (unsigned long long)atomic_load(&h->bucket[i]));
    unsigned long long count = atomic_load(&h->count);
    put(t, "graft_%s_bucket{le=\"+Inf\"} %llu\ngraft_%s_sum %.6f\ngraft_%s_count %llu\n", name,
        count, name, atomic_load(&h->sum_us) / 1e6, name, count);
}

static void donor_metrics(text *t, graft__donors *d)
{
    counter(t, "donor_attempts_total", "clones of a running request's prompt tried",
            atomic_load(&d->attempts));
    counter(t, "donor_successes_total", "requests that took a running request's prompt",
            atomic_load(&d->successes));
    counter(t, "donor_tokens_saved_total", "prompt tokens taken from donors beyond the cache",
            atomic_load(&d->tokens_saved));
    put(t, "# HELP graft_donor_refusals_total donor clones refused, by reason\n"
           "# TYPE graft_donor_refusals_total counter\n");
    const char *reasons[GRAFT__DONOR_REASONS] = {"retention", "boundary", "closed", "capacity",
                                                 "other"};
    for (int i = 0; i < GRAFT__DONOR_REASONS; i++)
        put(t, "graft_donor_refusals_total{reason=\"%s\"} %llu\n", reasons[i],
            (unsigned long long)atomic_load(&d->refusals[i]));
    counter(t, "donor_waits_total", "requests that waited for a prefilling donor",
            atomic_load(&d->waits));
    counter(t, "donor_waits_released_total", "waits ended by the donor going away",
            atomic_load(&d->waits_released));
    counter(t, "donor_waits_timed_out_total", "waits that reached --active-reuse-wait-ms",
            atomic_load(&d->waits_timed_out));
    put(t, "# HELP graft_donor_wait_seconds_total time spent waiting for donors\n"
           "# TYPE graft_donor_wait_seconds_total counter\ngraft_donor_wait_seconds_total %.6f\n",
        atomic_load(&d->wait_ns_total) / 1e9);
}

char *graft__metrics_text(graft__server_metrics *m, graft_engine *engine,
                          graft_prefix_cache *cache, graft__donors *donors,
                          graft__session_store *sessions, size_t *len)
{
    text t = {0};
    put(&t, "# HELP graft_requests_total HTTP requests by endpoint and status class\n"
            "# TYPE graft_requests_total counter\n");
    for (int e = 0; e < GRAFT__EP_COUNT; e++)
        for (int c = 0; c < GRAFT__STATUS_CLASSES; c++)
            put(&t, "graft_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", endpoints[e],
                classes[c], (unsigned long long)atomic_load(&m->requests[e][c]));
    put(&t, "# HELP graft_prompt_tokens_total prompt tokens by where their KV came from\n"
            "# TYPE graft_prompt_tokens_total counter\n"
            "graft_prompt_tokens_total{source=\"reused\"} %llu\n"
            "graft_prompt_tokens_total{source=\"computed\"} %llu\n",
        (unsigned long long)atomic_load(&m->prompt_tokens_reused),
        (unsigned long long)atomic_load(&m->prompt_tokens_computed));
    put(&t, "# HELP graft_prompt_tokens_reused_total reused prompt tokens by where they came "
            "from\n# TYPE graft_prompt_tokens_reused_total counter\n");
    const char *sources[GRAFT__SOURCES] = {"cache", "session", "donor", "donor_wait"};
    for (int i = 0; i < GRAFT__SOURCES; i++)
        put(&t, "graft_prompt_tokens_reused_total{from=\"%s\"} %llu\n", sources[i],
            (unsigned long long)atomic_load(&m->reused_from[i]));
    counter(&t, "generated_tokens_total", "tokens generated",
            atomic_load(&m->generated_tokens));
    counter(&t, "reasoning_tokens_total",
            "tokens generated in a thinking model's thought (given as reasoning_content)",
            atomic_load(&m->reasoning_tokens));
    counter(&t, "client_disconnects_total", "requests whose client went away before the end",
            atomic_load(&m->disconnects));
    counter(&t, "connections_cut_total",
            "connections closed for not sending a whole request in time (--request-timeout, "
            "--timeout)",
            atomic_load(&m->connections_cut));
    gauge(&t, "requests_running", "requests generating now", atomic_load(&m->running));
    gauge(&t, "requests_queued", "requests waiting for a slot", atomic_load(&m->queued));
    histogram(&t, "ttft_seconds", "time to first token", &m->ttft);
    histogram(&t, "inter_token_seconds", "gaps between a generation's tokens", &m->itl);
    graft_engine_metrics em;
    if (graft_engine_metrics_get(engine, &em) == GRAFT_OK) {
        gauge(&t, "kv_blocks_total", "KV blocks of the pool", em.kv_blocks_total);
        gauge(&t, "kv_blocks_used", "KV blocks referenced", em.kv_blocks_used);
        gauge(&t, "kv_blocks_shared", "KV blocks referenced more than once", em.kv_blocks_shared);
        gauge(&t, "kv_blocks_free", "KV blocks free", em.kv_blocks_free);
        gauge(&t, "sessions_open", "engine sessions open (cache snapshots included)",
              em.sessions_open);
        gauge(&t, "generations_live", "generations admitted and not settled", em.generations_live);
        gauge(&t, "generations_waiting_kv", "generations waiting for KV room",
              em.generations_waiting_kv);
        counter(&t, "clones_total", "session clones made", em.clones_done);
        put(&t, "# HELP graft_clones_refused_total clones refused, by reason\n"
                "# TYPE graft_clones_refused_total counter\n");
        const char *reasons[6] = {"boundary", "retention", "capacity", "nomem", "shutdown",
                                  "closed"};
        uint64_t counts[6] = {em.clones_refused_boundary, em.clones_refused_retention,
                              em.clones_refused_capacity, em.clones_refused_nomem,
                              em.clones_refused_shutdown, em.clones_refused_closed};
        for (int i = 0; i < 6; i++)
            put(&t, "graft_clones_refused_total{reason=\"%s\"} %llu\n", reasons[i],
                (unsigned long long)counts[i]);
        counter(&t, "kv_waits_total", "generations that waited for KV room", em.kv_waits);
    }
    graft_prefix_cache_stats cs;
    if (graft_prefix_cache_stats_get(cache, &cs) == GRAFT_OK) {
        gauge(&t, "cache_entries", "prefix cache snapshots", cs.entries);
        gauge(&t, "cache_bytes", "KV bytes the prefix cache holds alone", cs.bytes);
        counter(&t, "cache_hits_total", "prefix cache lookups that hit", cs.hits);
        put(&t, "# HELP graft_cache_misses_total prefix cache misses, by reason\n"
                "# TYPE graft_cache_misses_total counter\n"
                "graft_cache_misses_total{reason=\"no_match\"} %llu\n"
                "graft_cache_misses_total{reason=\"retention\"} %llu\n"
                "graft_cache_misses_total{reason=\"capacity\"} %llu\n",
            (unsigned long long)cs.misses_no_match, (unsigned long long)cs.misses_retention,
            (unsigned long long)cs.misses_capacity);
        counter(&t, "cache_evictions_total", "prefix cache snapshots evicted", cs.evictions);
    }
    donor_metrics(&t, donors);
    pthread_mutex_lock(&sessions->mu);
    long long named = sessions->count;
    unsigned long long reclaimed = sessions->reclaimed;
    pthread_mutex_unlock(&sessions->mu);
    gauge(&t, "named_sessions", "named sessions kept", named);
    counter(&t, "named_sessions_reclaimed_total",
            "idle named sessions closed to give KV back to a waiting request", reclaimed);
    *len = t.len;
    return t.buf;
}
