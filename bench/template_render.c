/*
 * template_render.c: how long graft takes to render a chat template (a benchmark, not a
 * test: it prints figures and fails nothing on a timing).
 *
 * Renders a 50-message conversation (a system message, then users and assistants in turn,
 * a few hundred bytes each, one assistant with a tool call, tools defined) with a template
 * (default: Qwen3's, $GRAFT_TEMPLATES_DIR/Qwen-Qwen3-0.6B.jinja or
 * ../shared/templates/Qwen-Qwen3-0.6B.jinja), parsed once; prints the median, the fastest
 * and the slowest of the render times over --reps renders (after --warmup), the parse time,
 * and the output size.
 *
 *   build/release/bench_template [TEMPLATE.jinja] [--reps N] [--warmup N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_lib.h"
#include "graft.h"
#include "util/util.h"

static double now_us(void)
{
    return graft__bench_now_s() * 1e6;
}

/* The 50-message conversation as JSON (malloc'd). */
static char *conversation(void)
{
    size_t cap = 1 << 20, k = 0;
    char *j = malloc(cap);
    if (j == NULL)
        return NULL;
    k += (size_t)snprintf(j + k, cap - k,
                          "{\"add_generation_prompt\": true, \"enable_thinking\": true, "
                          "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                          "\"get_weather\", \"description\": \"Current weather\", "
                          "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                          "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}], "
                          "\"messages\": [{\"role\": \"system\", \"content\": \"You are a "
                          "helpful assistant who answers briefly and precisely.\"}");
    for (int i = 1; i < 50; i++) {
        if (i == 20)
            k += (size_t)snprintf(j + k, cap - k,
                                  ", {\"role\": \"assistant\", \"content\": \"\", "
                                  "\"tool_calls\": [{\"type\": \"function\", \"function\": "
                                  "{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                  "\"Paris\"}}}]}");
        else if (i == 21)
            k += (size_t)snprintf(j + k, cap - k,
                                  ", {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21}\"}");
        else if (i % 2 == 1)
            k += (size_t)snprintf(j + k, cap - k,
                                  ", {\"role\": \"user\", \"content\": \"Question %d: could you "
                                  "explain, in a few sentences, how the tides depend on the "
                                  "moon and the sun, and why there are two a day?\"}", i);
        else
            k += (size_t)snprintf(j + k, cap - k,
                                  ", {\"role\": \"assistant\", \"content\": \"<think>\\nThe "
                                  "user asks about tides again.\\n</think>\\n\\nAnswer %d: the "
                                  "moon's gravity pulls the ocean into two bulges, one facing "
                                  "it and one opposite; the earth turns under both each day, "
                                  "and the sun adds spring and neap tides.\"}", i);
    }
    snprintf(j + k, cap - k, "]}");
    return j;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int reps = 2000, warmup = 100;
    graft__bench_loop_args(argc, argv, &path, &reps, &warmup);
    char buf[4096];
    if (path == NULL) {
        const char *dir = getenv("GRAFT_TEMPLATES_DIR");
        snprintf(buf, sizeof buf, "%s/Qwen-Qwen3-0.6B.jinja", dir ? dir : "../shared/templates");
        path = buf;
    }
    size_t len;
    char *text = graft__read_file(path, &len);
    char *vars = conversation();
    if (text == NULL || vars == NULL) {
        fprintf(stderr, "bench_template: cannot read %s\n", path);
        return 1;
    }
    graft_template *t = NULL;
    char *err = NULL;
    double t0 = now_us();
    if (graft_template_parse(text, len, &t, &err) != GRAFT_OK) {
        fprintf(stderr, "bench_template: %s\n", err);
        return 1;
    }
    double parse_us = now_us() - t0;
    double *times = malloc((size_t)reps * sizeof *times);
    size_t out_len = 0;
    for (int i = -warmup; i < reps; i++) {
        char *out = NULL;
        double start = now_us();
        if (graft_template_render(t, vars, strlen(vars), NULL, &out, &out_len, &err) != GRAFT_OK) {
            fprintf(stderr, "bench_template: %s\n", err);
            return 1;
        }
        double us = now_us() - start;
        if (i >= 0)
            times[i] = us;
        graft_free(out);
    }
    double median = graft__bench_median(times, reps); /* sorts times */
    printf("template %s (%zu bytes), parsed in %.1f us\n", path, len, parse_us);
    printf("50 messages (%zu bytes of JSON) -> %zu bytes of prompt\n", strlen(vars), out_len);
    printf("render: median %.1f us, min %.1f us, max %.1f us over %d renders\n",
           median, times[0], times[reps - 1], reps);
    free(times);
    graft_template_free(t);
    free(vars);
    free(text);
    return 0;
}
