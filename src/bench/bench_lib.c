/*
 * bench_lib.c: the benchmark library both speed harnesses link (bench_lib.h).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bandwidth_probe.h"
#include "bench_lib.h"

const int graft__bench_seq_counts[GRAFT_BENCH_N_SEQ_COUNTS] = {1, 2, 4, 8};

double graft__bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double graft__bench_rate(double n, double seconds)
{
    return seconds > 0 ? n / seconds : 0.0;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double graft__bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

graft__bench_rng graft__bench_rng_init(int32_t n_vocab)
{
    graft__bench_rng rng = {0x9E3779B97F4A7C15ull, n_vocab};
    return rng;
}

int32_t graft__bench_random_token(graft__bench_rng *rng)
{
    rng->state ^= rng->state >> 12;
    rng->state ^= rng->state << 25;
    rng->state ^= rng->state >> 27;
    return (int32_t)((rng->state * 0x2545F4914F6CDD1Dull >> 33) % (uint64_t)rng->n_vocab);
}

void graft__bench_random_tokens(graft__bench_rng *rng, int32_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tokens[i] = graft__bench_random_token(rng);
}

int graft__bench_prefill_decode(graft__probe *probe, int32_t n_prompt, int32_t n_gen,
                                graft__bench_step step, void *user, graft__bench_run *out)
{
    double before, after, during = 0, decode_s = 0;
    int n_during = 0;
    if (graft__probe_sample(probe, &before) != 0)
        return -1;
    double t0 = graft__bench_now_s();
    int rc = step(user, -1);
    double t1 = graft__bench_now_s();
    for (int32_t i = 0; rc == 0 && i < n_gen; i++) {
        if (graft__probe_during(probe, i, n_gen, &during, &n_during) != 0)
            return -1;
        double t = graft__bench_now_s();
        rc = step(user, i);
        decode_s += graft__bench_now_s() - t;
    }
    if (graft__probe_sample(probe, &after) != 0)
        return -1;
    out->prefill_tps = graft__bench_rate(n_prompt, t1 - t0);
    out->decode_tps = graft__bench_rate(n_gen, decode_s);
    out->bandwidth_gbs = before > after ? before : after;
    out->bandwidth_during_gbs = n_during > 0 ? during / n_during : 0;
    out->step_status = rc;
    return rc != 0;
}

void graft__bench_json_string(const char *text)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

graft__bench_rooflines graft__bench_speed_rooflines(const graft__bench_speed *s)
{
    double weights = (double)s->weight_bytes, all = weights + s->kv_bytes_per_token;
    bool known = s->kv_bytes_per_token > 0;
    graft__bench_rooflines r = {
        graft__bench_rate(s->fig[GRAFT_BENCH_FIG_BANDWIDTH] * 1e9, weights),
        known ? graft__bench_rate(s->fig[GRAFT_BENCH_FIG_BANDWIDTH] * 1e9, all) : 0,
        known ? graft__bench_rate(s->fig[GRAFT_BENCH_FIG_BANDWIDTH_DURING] * 1e9, all) : 0,
    };
    return r;
}

/* `, "name": value` with three decimals. */
static void field(const char *name, double value)
{
    printf(", \"%s\": %.3f", name, value);
}

void graft__bench_speed_json(const graft__bench_speed *s)
{
    const double *fig = s->fig;
    printf("{\"engine\": ");
    graft__bench_json_string(s->engine);
    printf(", \"model\": ");
    graft__bench_json_string(s->model);
    printf(", \"arch\": ");
    graft__bench_json_string(s->arch);
    printf(", \"threads\": %d, \"kernels\": ", s->threads);
    graft__bench_json_string(s->kernels);
    if (s->cpu_features != NULL) {
        printf(", \"cpu_features\": ");
        graft__bench_json_string(s->cpu_features);
    }
    printf(", \"prompt_tokens\": %d, \"gen_tokens\": %d, \"seq_context_tokens\": %d, "
           "\"seq_gen_tokens\": %d, \"reps\": %d, \"weight_bytes\": %llu",
           s->prompt_tokens, s->gen_tokens, GRAFT_BENCH_SEQ_CONTEXT, GRAFT_BENCH_SEQ_GEN,
           s->reps, (unsigned long long)s->weight_bytes);
    field("prefill_tps", fig[GRAFT_BENCH_FIG_PREFILL]);
    field("decode_tps", fig[GRAFT_BENCH_FIG_DECODE]);
    if (fig[GRAFT_BENCH_FIG_CONTEXT_PREFILL] >= 0) {
        field("context_prefill_tps", fig[GRAFT_BENCH_FIG_CONTEXT_PREFILL]);
        field("context_decode_tps", fig[GRAFT_BENCH_FIG_CONTEXT_DECODE]);
    }
    printf(", \"aggregate_tps\": {");
    for (int i = 0; i < GRAFT_BENCH_N_SEQ_COUNTS; i++)
        printf("%s\"%d\": %.3f", i ? ", " : "", graft__bench_seq_counts[i],
               fig[GRAFT_BENCH_FIG_AGGREGATE + i]);
    printf("}");
    graft__bench_rooflines r = graft__bench_speed_rooflines(s);
    field("bandwidth_gbs", fig[GRAFT_BENCH_FIG_BANDWIDTH]);
    field("bandwidth_during_gbs", fig[GRAFT_BENCH_FIG_BANDWIDTH_DURING]);
    field("decode_roofline_weights_tps", r.weights);
    if (s->kv_bytes_per_token > 0) {
        printf(", \"kv_bytes_per_token\": %.0f", s->kv_bytes_per_token);
        field("decode_roofline_tps", r.around);
        field("decode_roofline_during_tps", r.during);
    }
    printf("}\n");
}

void graft__bench_loop_args(int argc, char **argv, const char **path, int *reps, int *warmup)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            *reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            *warmup = atoi(argv[++i]);
        else
            *path = argv[i];
    }
    if (*reps < 1)
        *reps = 1;
}
