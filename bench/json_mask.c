/*
 * json_mask.c: what holding a generation to JSON costs per sampled token (a benchmark, not a
 * test: it prints figures and fails nothing on a timing).
 *
 * Loads a vocabulary (default: the Qwen2 tokenizer, 151,936 tokens,
 * $GRAFT_MODELS_DIR/vocab/ggml-vocab-qwen2.gguf or ../shared/models/...), builds the
 * engine's mask index once (timed), then masks a logits row --reps times (after --warmup) at
 * each of a few texts generated so far, with no schema and with one (and inside strings held
 * to formats, whose masks walk every token, and where a union's alternatives are followed
 * together, and in free text before a JSON text that begins after "</think>": at the start
 * where the thought is optional, in a thought, and at "</think" whose ">" tokens must then
 * begin the object), and prints for each
 * the tokens left and the median, fastest and slowest mask time. One thread: the engine
 * masks on its own thread, between forward passes.
 *
 *   build/release/bench_json_mask [VOCAB.gguf] [--reps N] [--warmup N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_lib.h"
#include "engine/engine.h"

static const char schema_text[] =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": "
    "{\"type\": \"integer\"}, \"pets\": {\"type\": \"array\", \"items\": {\"enum\": [\"cat\", "
    "\"dog\"]}}}, \"required\": [\"name\", \"age\", \"pets\"]}";

/* Strings held to formats (an automaton over their characters). */
static const char strings_schema_text[] =
    "{\"type\": \"object\", \"properties\": {\"day\": {\"type\": \"string\", \"format\": "
    "\"date\"}, \"site\": {\"type\": \"string\", \"format\": \"uri\", \"maxLength\": 200}}}";

/* A union that the first byte of its values does not decide: cats and dogs both begin with a
 * name, so both are followed until a key tells them apart. */
static const char unions_schema_text[] =
    "{\"type\": \"object\", \"properties\": {\"pets\": {\"type\": \"array\", \"items\": "
    "{\"anyOf\": [{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
    "\"meow\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"meow\"]}, {\"type\": "
    "\"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"bark\": {\"type\": "
    "\"integer\"}}, \"required\": [\"name\", \"bark\"]}]}}}, \"required\": [\"pets\"]}";

/* Texts generated so far: the start, inside a string, inside a number, a key, an enum. */
static const char *const prefixes[] = {"", "{\"name\": \"The qu", "{\"name\": \"A\", \"age\": 12",
                                       "{\"name\": \"A\", \"a", "{\"name\": \"A\", \"age\": 1, "
                                                                "\"pets\": [\"c"};
/* Inside a date, and inside a URI of at most 200 characters. */
static const char *const string_prefixes[] = {"{\"day\": \"2024-0",
                                              "{\"day\": \"2024-01-02\", \"site\": \"https://ex"};

/* Before a union's value (where it forks), inside a string and at a key both follow. */
static const char *const union_prefixes[] = {"{\"pets\": [", "{\"pets\": [{\"name\": \"Fel",
                                             "{\"pets\": [{\"name\": \"Felix\", \""};

static double now_us(void)
{
    return graft__bench_now_s() * 1e6;
}

static void bench_prefix(const graft__json_mask *mask, const graft__json_schema *schema,
                         const char *prefix, float *logits, int32_t n_vocab, int reps,
                         int warmup)
{
    graft__json_recognizer s;
    graft__json_recognizer_init(&s, schema);
    for (const char *p = prefix; *p != '\0'; p++)
        if (!graft__json_recognizer_feed(&s, (uint8_t)*p)) {
            fprintf(stderr, "bench_json_mask: '%s' is not a prefix\n", prefix);
            exit(1);
        }
    double *times = malloc((size_t)reps * sizeof *times);
    int32_t allowed = 0;
    for (int i = -warmup; i < reps; i++) {
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        double start = now_us();
        allowed = graft__json_mask_apply(mask, &s, logits);
        if (i >= 0)
            times[i] = now_us() - start;
    }
    double median = graft__bench_median(times, reps); /* sorts times */
    printf("%-8s %-40s %7d left  median %6.3f ms  min %6.3f  max %6.3f\n",
           schema ? "schema" : "object", prefix[0] ? prefix : "(start)", (int)allowed,
           median / 1e3, times[0] / 1e3, times[reps - 1] / 1e3);
    free(times);
}

/* The mask before a JSON text that begins after </think>: at the answer's start when the
 * thought is optional (opens: "<think>"), else in the thought, the output ending with the
 * tag's first `matched` bytes. */
static void bench_preamble(const graft__json_mask *mask, const char *opens, uint32_t matched,
                           float *logits, int32_t n_vocab, int reps, int warmup)
{
    graft__json_preamble p;
    graft__json_preamble_init(&p, "</think>", opens);
    p.matched = matched;
    graft__json_recognizer r;
    graft__json_recognizer_init(&r, NULL);
    double *times = malloc((size_t)reps * sizeof *times);
    int32_t allowed = 0;
    for (int i = -warmup; i < reps; i++) {
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        double start = now_us();
        allowed = graft__json_mask_apply_preamble(mask, &p, &r, logits);
        if (i >= 0)
            times[i] = now_us() - start;
    }
    double median = graft__bench_median(times, reps); /* sorts times */
    char where[64];
    if (opens != NULL)
        snprintf(where, sizeof where, "(start: %s or the object)", opens);
    else
        snprintf(where, sizeof where, "(before </think>, ending \"%.*s\")", (int)matched,
                 "</think>");
    printf("%-8s %-40s %7d left  median %6.3f ms  min %6.3f  max %6.3f\n", "thought", where,
           (int)allowed, median / 1e3, times[0] / 1e3, times[reps - 1] / 1e3);
    free(times);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int reps = 200, warmup = 20;
    graft__bench_loop_args(argc, argv, &path, &reps, &warmup);
    char buf[4096];
    if (path == NULL) {
        const char *dir = getenv("GRAFT_MODELS_DIR");
        snprintf(buf, sizeof buf, "%s/vocab/ggml-vocab-qwen2.gguf",
                 dir ? dir : "../shared/models");
        path = buf;
    }
    graft_model *model = NULL;
    char *err = NULL;
    if (graft_model_load_vocab(path, &model, &err) != GRAFT_OK) {
        fprintf(stderr, "bench_json_mask: %s\n", err ? err : path);
        return 1;
    }
    graft_model_info info;
    graft_model_get_info(model, &info);
    graft__token_table *tokens = NULL;
    graft__json_mask *mask = NULL;
    graft__json_schema *schema = NULL, *strings_schema = NULL, *unions_schema = NULL;
    double t0 = now_us();
    int rc = graft__token_table_create(model->vocab, info.n_vocab, &tokens);
    rc = rc != GRAFT_OK ? rc : graft__json_mask_create(tokens, &mask);
    double build_ms = (now_us() - t0) / 1e3;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (rc != GRAFT_OK || logits == NULL ||
        graft__json_schema_compile(schema_text, strlen(schema_text), &schema, NULL) != GRAFT_OK ||
        graft__json_schema_compile(strings_schema_text, strlen(strings_schema_text),
                                   &strings_schema, NULL) != GRAFT_OK ||
        graft__json_schema_compile(unions_schema_text, strlen(unions_schema_text),
                                   &unions_schema, NULL) != GRAFT_OK) {
        fprintf(stderr, "bench_json_mask: out of memory\n");
        return 1;
    }
    printf("vocabulary %s: %d tokens, mask index built in %.1f ms; %d masks each\n", path,
           (int)info.n_vocab, build_ms, reps);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        bench_prefix(mask, NULL, prefixes[i], logits, info.n_vocab, reps, warmup);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        bench_prefix(mask, schema, prefixes[i], logits, info.n_vocab, reps, warmup);
    for (size_t i = 0; i < sizeof string_prefixes / sizeof string_prefixes[0]; i++)
        bench_prefix(mask, strings_schema, string_prefixes[i], logits, info.n_vocab, reps,
                     warmup);
    for (size_t i = 0; i < sizeof union_prefixes / sizeof union_prefixes[0]; i++)
        bench_prefix(mask, unions_schema, union_prefixes[i], logits, info.n_vocab, reps,
                     warmup);
    bench_preamble(mask, "<think>", 0, logits, info.n_vocab, reps, warmup);
    bench_preamble(mask, NULL, 0, logits, info.n_vocab, reps, warmup);
    bench_preamble(mask, NULL, 7, logits, info.n_vocab, reps, warmup);
    free(logits);
    graft__json_schema_free(schema);
    graft__json_schema_free(strings_schema);
    graft__json_schema_free(unions_schema);
    graft__json_mask_free(mask);
    graft__token_table_free(tokens);
    graft_model_free(model);
    return 0;
}
