/*
 * cmd_bench_prefix.c: `graft bench prefix`: what the prefix cache saves on the time to the
 * first token, measured through the engine API and graft_prefix_cache only.
 *
 * A prompt is a shared prefix of P random token ids (256, 1024, 4096, capped by
 * --max-prefix, plus --max-prefix itself) followed by a new suffix of S ids (16, 128). For
 * each P, one session computes the prefix with a prompt capture around its generation, so
 * the cache holds a snapshot of exactly P tokens (the session is then closed: the snapshot
 * alone holds the prefix's KV, whose bytes are reported). Then, per S, --reps times each:
 *   - cold: a new session is given all P + S tokens and samples one greedy token; the time
 *     from submission to that token (graft_generation_metrics.time_to_first_token_ns);
 *   - warm: graft_prefix_cache_lookup of the same P + S tokens, timed by itself (it must
 *     clone the snapshot at exactly P), then the S suffix tokens on the clone and one greedy
 *     token, timed as cold. Warm time = lookup + clone + that time to first token.
 * Medians are reported with the ideal warm time, (S + 1) / (P + S) x cold (the suffix and
 * the sampled token's share of the cold work), and warm / ideal. The warm first token must
 * be the cold one (DESIGN.md invariant 1: the same logits, so the same greedy token); a
 * difference is reported and makes the exit status 1. A timing never fails anything.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define PREFIX "bench prefix" /* the command, in messages */
#define WARMUP_TOKENS 8       /* untimed tokens that map the weights in */
#define MIN_PREFIX 16         /* the smallest --max-prefix */
#define TARGET_PREFIX 4096    /* the acceptance figure: warm within 1.2 x ideal at 4096 + 16 */
#define TARGET_SUFFIX 16
#define TARGET_RATIO 1.2
#define LOOKUP_TARGET_US 1000.0 /* lookup + clone should stay under 1 ms */

static const int32_t base_prefixes[] = {256, 1024, 4096};
static const int32_t suffixes[] = {16, 128};
#define MAX_PREFIXES ((int)(sizeof base_prefixes / sizeof base_prefixes[0]) + 1)
#define N_SUFFIXES ((int)(sizeof suffixes / sizeof suffixes[0]))
#define MAX_SUFFIX 128

static const char prefix_usage[] =
    "usage: graft bench prefix -m MODEL [--threads N] [--max-prefix N] [--reps N] [--json]\n"
    "\n"
    "Measures the time to first token (TTFT) of a prompt of random token ids, a shared\n"
    "prefix of P tokens (256, 1024 and 4096, capped by --max-prefix, and --max-prefix\n"
    "itself) then a new suffix of S tokens (16 and 128), through the engine and the prefix\n"
    "cache, one greedy token sampled:\n"
    "  cold       a new session given all P + S tokens: submission to first token\n"
    "  warm       with a snapshot of the P prefix tokens in the cache (taken by a prompt\n"
    "             capture): graft_prefix_cache_lookup of the P + S tokens (lookup and clone,\n"
    "             timed alone: it must match P tokens, in under 1 ms), then the S suffix\n"
    "             tokens on the clone: lookup + clone + TTFT\n"
    "  ideal      (S + 1) / (P + S) x cold; the target is warm within 1.2 x ideal at\n"
    "             P 4096, S 16\n"
    "  snapshot   KV bytes the cache holds for the P-token snapshot alone\n"
    "  same       whether the warm first token is the cold one (it must be: exit status 1\n"
    "             otherwise)\n"
    "Each time is the median of --reps runs, cold and warm alternating, after an untimed\n"
    "warm-up.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE     GGUF model\n"
    "  --threads N          compute threads (default 0: one per online CPU)\n"
    "  --max-prefix N       the longest prefix measured (default: 4096, at most the model's\n"
    "                       context length less 128; at least 16)\n"
    "  --reps N             runs per figure, the median is reported (default 3)\n"
    "  --json               print one JSON object instead of the table\n"
    "  -h, --help           show this help\n"
    "\n"
    "JSON fields: engine (\"graft\"), model (the path), arch, threads, reps, results (an\n"
    "array, one object per prefix and suffix: prefix_tokens, suffix_tokens, matched_tokens,\n"
    "cold_ttft_ms, warm_ttft_ms (the suffix's TTFT alone), lookup_clone_us, warm_total_ms\n"
    "(lookup + clone + warm_ttft_ms), ideal_ttft_ms, warm_over_ideal (warm_total_ms /\n"
    "ideal_ttft_ms), speedup (cold_ttft_ms / warm_total_ms), snapshot_bytes, same_token).\n";

typedef struct prefix_options {
    const char *model;
    int32_t threads, max_prefix, reps;
    int json;
} prefix_options;

/* The figures of one prefix and suffix. */
typedef struct prefix_result {
    int32_t prefix, suffix, matched;
    double cold_ms, warm_ms, lookup_us; /* medians */
    int64_t snapshot_bytes;
    bool same_token; /* at every rep */
} prefix_result;

typedef struct prefix_state {
    graft_model *model;
    graft_model_info info;
    graft_engine *engine;
    graft_prefix_cache *cache;
    int32_t *tokens;   /* (longest prefix + MAX_SUFFIX) random ids */
    double *samples;   /* (3, reps): cold, warm, lookup */
    int32_t prefixes[MAX_PREFIXES];
    int n_prefixes;
    int32_t threads;
    prefix_result results[MAX_PREFIXES * N_SUFFIXES];
} prefix_state;

/* ---- set-up ----------------------------------------------------------------------------- */

static int parse_prefix_options(int argc, char **argv, prefix_options *o)
{
    o->reps = 3;
    const graft__cli_opt opts[] = {
        {"--model", "-m", GRAFT_CLI_STRING, &o->model, 0, 0, 0},
        {"--threads", NULL, GRAFT_CLI_INT, &o->threads, 0, GRAFT_MAX_THREADS, 0},
        {"--max-prefix", NULL, GRAFT_CLI_INT, &o->max_prefix, MIN_PREFIX, 1 << 24, 0},
        {"--reps", NULL, GRAFT_CLI_INT, &o->reps, 1, 1000, 0},
        {"--json", NULL, GRAFT_CLI_FLAG, &o->json, 0, 0, 1},
    };
    const graft__cli_command cmd = {PREFIX, prefix_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    return graft__bench_parse(&cmd, argc, argv, &o->model);
}

/* The prefixes measured: base_prefixes below the longest, then the longest. */
static int plan_prefixes(prefix_state *s, const prefix_options *o)
{
    int32_t limit = s->info.n_ctx_train - MAX_SUFFIX;
    if (limit < MIN_PREFIX) {
        graft__cli_error(PREFIX, "the model's context length %d is too short: prefixes of %d "
                         "tokens or more are measured, plus suffixes of up to %d",
                         (int)s->info.n_ctx_train, MIN_PREFIX, MAX_SUFFIX);
        return GRAFT_CLI_FAILED;
    }
    int32_t longest = o->max_prefix > 0       ? o->max_prefix
                      : limit < TARGET_PREFIX ? limit
                                              : TARGET_PREFIX;
    if (longest > limit) {
        graft__cli_error(PREFIX, "--max-prefix %d is too long: the model's context length is "
                         "%d and suffixes are up to %d tokens, so at most %d", (int)longest,
                         (int)s->info.n_ctx_train, MAX_SUFFIX, (int)limit);
        return GRAFT_CLI_FAILED;
    }
    for (int i = 0; i < MAX_PREFIXES - 1 && base_prefixes[i] < longest; i++)
        s->prefixes[s->n_prefixes++] = base_prefixes[i];
    s->prefixes[s->n_prefixes++] = longest;
    return GRAFT_CLI_OK;
}

/* An engine of three sessions (the cold one or the prefix's, the snapshot, the warm clone)
 * of the longest prompt, and a cache of one snapshot. */
static int prefix_setup(prefix_state *s, const prefix_options *o)
{
    if (graft__bench_load_model(PREFIX, o->model, &s->model, &s->info) != GRAFT_CLI_OK ||
        plan_prefixes(s, o) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_engine_options eo = graft_engine_default_options();
    eo.max_sessions = 3;
    eo.max_context = s->prefixes[s->n_prefixes - 1] + MAX_SUFFIX;
    eo.n_threads = o->threads;
    if (graft__bench_engine_create(PREFIX, s->model, &eo, &s->engine) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    char *err = NULL;
    int rc = graft_prefix_cache_create(s->engine, 1, 0, &s->cache, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error(PREFIX, "cannot create the prefix cache: %s",
                         err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    s->threads = graft__bench_threads(o->threads);
    graft__bench_rng rng = graft__bench_rng_init(s->info.n_vocab);
    s->tokens = malloc((size_t)eo.max_context * sizeof *s->tokens);
    s->samples = malloc(3 * (size_t)o->reps * sizeof *s->samples);
    if (s->tokens == NULL || s->samples == NULL) {
        graft__cli_error(PREFIX, "out of memory");
        return GRAFT_CLI_FAILED;
    }
    graft__bench_random_tokens(&rng, s->tokens, (size_t)eo.max_context);
    return GRAFT_CLI_OK;
}

static void prefix_free(prefix_state *s)
{
    graft_prefix_cache_free(s->cache);
    graft_engine_free(s->engine);
    graft_model_free(s->model);
    free(s->tokens);
    free(s->samples);
}

/* ---- the measurements ------------------------------------------------------------------- */

/* Feeds tokens[0, n) to `session` and samples one greedy token: its time to first token
 * and the token. */
static int first_token(graft_session *session, const int32_t *tokens, size_t n,
                       double *ttft_ms, int32_t *token)
{
    graft_generation *gen;
    if (graft__bench_submit(PREFIX, session, tokens, n, 1, &gen) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_generation_wait(gen);
    graft_generation_metrics m;
    graft_generation_metrics_get(gen, &m);
    *ttft_ms = (double)m.time_to_first_token_ns * 1e-6;
    return graft__bench_finish(PREFIX, gen, 1, token);
}

/* Computes the first `prefix` tokens on a new session with a prompt capture around the
 * generation, and closes the session: the cache's snapshot alone then holds their KV. */
static int capture_prefix(prefix_state *s, int32_t prefix)
{
    graft_session *session;
    if (graft__bench_session_open(PREFIX, s->engine, &session) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_prompt_capture *capture = NULL;
    graft_update_cb on_update = NULL;
    graft_settled_cb on_settled = NULL;
    void *user = NULL;
    int rc = graft_prompt_capture_create(s->cache, session, s->tokens, (size_t)prefix,
                                         &capture);
    if (rc == GRAFT_OK)
        rc = graft_prompt_capture_wrap(capture, &on_update, &on_settled, &user);
    graft_generation *gen;
    int status = rc != GRAFT_OK ? GRAFT_CLI_FAILED
                                : graft__bench_submit_cb(PREFIX, session, s->tokens,
                                                         (size_t)prefix, 1, on_update,
                                                         on_settled, user, &gen);
    if (status == GRAFT_CLI_OK)
        status = graft__bench_finish(PREFIX, gen, 1, NULL);
    if (status == GRAFT_CLI_OK)
        rc = graft_prompt_capture_collect(capture);
    graft_prompt_capture_free(capture);
    graft_session_close(session);
    if (rc != GRAFT_OK) {
        graft__cli_error(PREFIX, "cannot capture the %d-token prefix for the cache: %s",
                         (int)prefix, graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    return status;
}

/* Replaces the cache's content with a snapshot of the first `prefix` tokens; *bytes: the
 * KV it holds. */
static int snapshot_prefix(prefix_state *s, int32_t prefix, int64_t *bytes)
{
    graft_prefix_cache_clear(s->cache);
    if (capture_prefix(s, prefix) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    graft_prefix_cache_stats st;
    int rc = graft_prefix_cache_stats_get(s->cache, &st);
    if (rc != GRAFT_OK || st.entries != 1) {
        graft__cli_error(PREFIX, "the cache holds %d snapshots after the capture of the "
                         "%d-token prefix (%s)", (int)st.entries, (int)prefix,
                         graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    *bytes = st.bytes;
    return GRAFT_CLI_OK;
}

/* One warm run: lookup (timed) of the whole prompt, which must clone the prefix's
 * snapshot, then the suffix on the clone. */
static int warm_run(prefix_state *s, prefix_result *r, double *lookup_us, double *ttft_ms,
                    int32_t *token)
{
    graft_session *clone;
    size_t n = (size_t)(r->prefix + r->suffix);
    double t0 = graft__bench_now_s();
    int rc = graft_prefix_cache_lookup(s->cache, s->tokens, n, &clone, &r->matched);
    *lookup_us = (graft__bench_now_s() - t0) * 1e6;
    if (rc != GRAFT_OK) {
        graft__cli_error(PREFIX, "the lookup of a %zu-token prompt missed: %s", n,
                         graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    if (r->matched != r->prefix) {
        graft__cli_error(PREFIX, "the lookup of a %zu-token prompt matched %d tokens, not the "
                         "%d of the cached prefix", n, (int)r->matched, (int)r->prefix);
        graft_session_close(clone);
        return GRAFT_CLI_FAILED;
    }
    rc = first_token(clone, s->tokens + r->prefix, (size_t)r->suffix, ttft_ms, token);
    graft_session_close(clone);
    return rc;
}

/* Cold and warm, reps times each, alternating. */
static int measure_pair(prefix_state *s, const prefix_options *o, prefix_result *r)
{
    double *cold = s->samples, *warm = cold + o->reps, *lookup = warm + o->reps;
    r->same_token = true;
    for (int rep = 0; rep < o->reps; rep++) {
        graft_session *session;
        int32_t cold_token, warm_token;
        if (graft__bench_session_open(PREFIX, s->engine, &session) != GRAFT_CLI_OK)
            return GRAFT_CLI_FAILED;
        int rc = first_token(session, s->tokens, (size_t)(r->prefix + r->suffix), &cold[rep],
                             &cold_token);
        graft_session_close(session);
        if (rc == GRAFT_CLI_OK)
            rc = warm_run(s, r, &lookup[rep], &warm[rep], &warm_token);
        if (rc != GRAFT_CLI_OK)
            return rc;
        r->same_token = r->same_token && warm_token == cold_token;
    }
    r->cold_ms = graft__bench_median(cold, o->reps);
    r->warm_ms = graft__bench_median(warm, o->reps);
    r->lookup_us = graft__bench_median(lookup, o->reps);
    return GRAFT_CLI_OK;
}

/* A few untimed tokens on a throwaway session, so that the weights are mapped in. */
static int warm_up(prefix_state *s)
{
    graft_session *session;
    if (graft__bench_session_open(PREFIX, s->engine, &session) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    int rc = graft__bench_generate(PREFIX, session, s->tokens, WARMUP_TOKENS, 1, NULL);
    graft_session_close(session);
    return rc;
}

static int measure_all(prefix_state *s, const prefix_options *o)
{
    int rc = warm_up(s);
    for (int i = 0; rc == GRAFT_CLI_OK && i < s->n_prefixes; i++) {
        int64_t bytes = 0;
        rc = snapshot_prefix(s, s->prefixes[i], &bytes);
        for (int j = 0; rc == GRAFT_CLI_OK && j < N_SUFFIXES; j++) {
            prefix_result *r = &s->results[i * N_SUFFIXES + j];
            r->prefix = s->prefixes[i];
            r->suffix = suffixes[j];
            r->snapshot_bytes = bytes;
            rc = measure_pair(s, o, r);
        }
    }
    return rc;
}

/* ---- reporting -------------------------------------------------------------------------- */

/* Derived figures of a result. */
typedef struct prefix_figures {
    double warm_total_ms, ideal_ms, over_ideal, speedup;
} prefix_figures;

static prefix_figures figures(const prefix_result *r)
{
    prefix_figures f;
    f.warm_total_ms = r->warm_ms + r->lookup_us * 1e-3;
    f.ideal_ms = (double)(r->suffix + 1) / (double)(r->prefix + r->suffix) * r->cold_ms;
    f.over_ideal = f.ideal_ms > 0 ? f.warm_total_ms / f.ideal_ms : 0.0;
    f.speedup = f.warm_total_ms > 0 ? r->cold_ms / f.warm_total_ms : 0.0;
    return f;
}

static int n_results(const prefix_state *s)
{
    return s->n_prefixes * N_SUFFIXES;
}

/* "448.00 MiB" */
static const char *format_bytes(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 3) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

/* The acceptance line, when the target prefix and suffix were measured, and the lookup
 * bound over every result. */
static void print_verdicts(const prefix_state *s)
{
    double worst_lookup = 0;
    for (int i = 0; i < n_results(s); i++) {
        const prefix_result *r = &s->results[i];
        worst_lookup = r->lookup_us > worst_lookup ? r->lookup_us : worst_lookup;
        if (r->prefix == TARGET_PREFIX && r->suffix == TARGET_SUFFIX) {
            prefix_figures f = figures(r);
            printf("  target: warm within %.1f x ideal at prefix %d, suffix %d: %.2f x, %s\n",
                   TARGET_RATIO, TARGET_PREFIX, TARGET_SUFFIX, f.over_ideal,
                   f.over_ideal <= TARGET_RATIO ? "met" : "not met");
        }
    }
    printf("  target: lookup + clone under 1 ms: at most %.1f us, %s\n", worst_lookup,
           worst_lookup < LOOKUP_TARGET_US ? "met" : "not met");
}

static void print_table(const prefix_state *s, const prefix_options *o)
{
    printf("graft bench prefix: %s\n", o->model);
    printf("  %s, %d layers; %d thread%s; median of %d run%s; one greedy token per prompt\n\n",
           s->info.arch, (int)s->info.n_layer, (int)s->threads, s->threads > 1 ? "s" : "",
           (int)o->reps, o->reps > 1 ? "s" : "");
    printf("  %6s  %6s  %12s  %12s  %12s  %12s  %10s  %8s  %12s  %4s\n", "prefix", "suffix",
           "cold TTFT", "lookup+clone", "warm TTFT", "ideal", "warm/ideal", "speedup",
           "snapshot", "same");
    for (int i = 0; i < n_results(s); i++) {
        const prefix_result *r = &s->results[i];
        prefix_figures f = figures(r);
        char bytes[32];
        printf("  %6d  %6d  %9.2f ms  %9.1f us  %9.2f ms  %9.2f ms  %10.2f  %7.1fx  %12s  %4s\n",
               (int)r->prefix, (int)r->suffix, r->cold_ms, r->lookup_us, r->warm_ms, f.ideal_ms,
               f.over_ideal, f.speedup,
               format_bytes(bytes, sizeof bytes, (double)r->snapshot_bytes),
               r->same_token ? "yes" : "NO");
    }
    printf("\n  warm/ideal and speedup count lookup + clone + warm TTFT; ideal = (suffix + 1) /\n"
           "  (prefix + suffix) x cold TTFT\n");
    print_verdicts(s);
}

static void print_json(const prefix_state *s, const prefix_options *o)
{
    printf("{\"engine\": \"graft\", \"model\": ");
    graft__bench_json_string(o->model);
    printf(", \"arch\": ");
    graft__bench_json_string(s->info.arch);
    printf(", \"threads\": %d, \"reps\": %d, \"results\": [", (int)s->threads, (int)o->reps);
    for (int i = 0; i < n_results(s); i++) {
        const prefix_result *r = &s->results[i];
        prefix_figures f = figures(r);
        printf("%s{\"prefix_tokens\": %d, \"suffix_tokens\": %d, \"matched_tokens\": %d, "
               "\"cold_ttft_ms\": %.3f, \"warm_ttft_ms\": %.3f, \"lookup_clone_us\": %.3f, "
               "\"warm_total_ms\": %.3f, \"ideal_ttft_ms\": %.3f, \"warm_over_ideal\": %.4f, "
               "\"speedup\": %.3f, \"snapshot_bytes\": %lld, \"same_token\": %s}",
               i ? ", " : "", (int)r->prefix, (int)r->suffix, (int)r->matched, r->cold_ms,
               r->warm_ms, r->lookup_us, f.warm_total_ms, f.ideal_ms, f.over_ideal, f.speedup,
               (long long)r->snapshot_bytes, r->same_token ? "true" : "false");
    }
    printf("]}\n");
}

/* GRAFT_CLI_FAILED, after a message per result, when a warm first token was not the cold
 * one. */
static int check_tokens(const prefix_state *s)
{
    int rc = GRAFT_CLI_OK;
    for (int i = 0; i < n_results(s); i++) {
        const prefix_result *r = &s->results[i];
        if (!r->same_token) {
            graft__cli_error(PREFIX, "prefix %d, suffix %d: the first token from the cache "
                             "differs from the cold one", (int)r->prefix, (int)r->suffix);
            rc = GRAFT_CLI_FAILED;
        }
    }
    return rc;
}

int graft__cli_bench_prefix(int argc, char **argv)
{
    prefix_options o = {0};
    int rc = parse_prefix_options(argc, argv, &o);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    prefix_state s = {0};
    rc = prefix_setup(&s, &o);
    if (rc == GRAFT_CLI_OK)
        rc = measure_all(&s, &o);
    if (rc == GRAFT_CLI_OK) {
        if (o.json)
            print_json(&s, &o);
        else
            print_table(&s, &o);
        rc = check_tokens(&s);
    }
    prefix_free(&s);
    return rc;
}
