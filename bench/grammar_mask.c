/*
 * grammar_mask.c: what holding a generation to a GBNF grammar costs per sampled token (a
 * benchmark, not a test: it prints figures and fails nothing on a timing).
 *
 * Loads a vocabulary (default: the Qwen2 tokenizer, 151,936 tokens,
 * $GRAFT_MODELS_DIR/vocab/ggml-vocab-qwen2.gguf or ../shared/models/...), builds the engine's
 * sorted vocabulary once (timed), then:
 *   - for llama.cpp's JSON grammar (tests/grammars/json.gbnf) at a few texts generated so far,
 *     masks a logits row with it and with the engine's own JSON recognizer (the json_object
 *     format) in turn, --reps pairs (after --warmup), and prints the median of the per-pair
 *     ratios of their times with the least and greatest, beside each one's median;
 *   - for grammars of other shapes (digits, lowercase words, two words, free text up to a
 *     quote), the tokens left and the median, fastest and slowest mask time.
 * One thread: the engine masks on its own thread, between forward passes.
 *
 *   build/release/bench_grammar_mask [VOCAB.gguf] [--reps N] [--warmup N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_lib.h"
#include "engine/engine.h"

/* Texts generated so far: the start, inside a string, inside a number, a key. */
static const char *const json_prefixes[] = {"", "{\"name\": \"The qu",
                                            "{\"name\": \"A\", \"age\": 12",
                                            "{\"name\": \"A\", \"a"};

static const struct {
    const char *grammar, *prefix;
} shapes[] = {
    {"root ::= [0-9]+\n", "12"},
    {"root ::= [A-Z] [a-z]* (\" \" [a-z]+)* \".\"\n", "Once upon a ti"},
    {"root ::= (\"yes\" | \"no\")\n", ""},
    {"root ::= \"\\\"\" [^\"]* \"\\\"\"\n", "\"The quick brown f"},
};

static double now_us(void)
{
    return graft__bench_now_s() * 1e6;
}

static graft__grammar *compile_or_die(const char *text)
{
    graft__grammar *g = NULL;
    char *err = NULL;
    if (graft__grammar_compile(text, strlen(text), &g, &err) != GRAFT_OK) {
        fprintf(stderr, "bench_grammar_mask: %s\n", err ? err : "out of memory");
        exit(1);
    }
    return g;
}

/* A run of g after prefix. */
static graft__grammar_run *run_after(const graft__grammar *g, const graft__grammar_vocab *gv,
                                     const char *prefix)
{
    graft__grammar_run *run = NULL;
    if (graft__grammar_run_create(g, graft__grammar_vocab_max_len(gv), &run) != GRAFT_OK ||
        !graft__grammar_run_feed(run, prefix, strlen(prefix))) {
        fprintf(stderr, "bench_grammar_mask: '%s' is not a prefix\n", prefix);
        exit(1);
    }
    return run;
}

/* The GBNF JSON grammar against the JSON recognizer at prefix, alternated pair by pair. */
static void bench_json_pair(const graft__json_mask *mask, const graft__grammar_vocab *gv,
                            const graft__grammar *json, const char *prefix, float *logits,
                            int32_t n_vocab, int reps, int warmup)
{
    graft__json_recognizer r;
    graft__json_recognizer_init(&r, NULL);
    for (const char *p = prefix; *p != '\0'; p++)
        graft__json_recognizer_feed(&r, (uint8_t)*p);
    graft__grammar_run *run = run_after(json, gv, prefix);
    double *ratio = malloc((size_t)reps * sizeof *ratio);
    double *gbnf = malloc((size_t)reps * sizeof *gbnf);
    double *native = malloc((size_t)reps * sizeof *native);
    int32_t left_gbnf = 0, left_native = 0;
    for (int i = -warmup; i < reps; i++) {
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        double t0 = now_us();
        left_gbnf = graft__grammar_mask_apply(gv, run, logits);
        double t1 = now_us();
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        double t2 = now_us();
        left_native = graft__json_mask_apply(mask, &r, logits);
        double t3 = now_us();
        if (i >= 0) {
            gbnf[i] = t1 - t0;
            native[i] = t3 - t2;
            ratio[i] = gbnf[i] / native[i];
        }
    }
    double r_med = graft__bench_median(ratio, reps); /* each sorts its array */
    double g_med = graft__bench_median(gbnf, reps), n_med = graft__bench_median(native, reps);
    printf("json    %-26s %7d / %7d left  gbnf %7.3f ms  json %6.3f ms  ratio %6.2f "
           "(%.2f-%.2f)\n",
           prefix[0] ? prefix : "(start)", (int)left_gbnf, (int)left_native, g_med / 1e3,
           n_med / 1e3, r_med, ratio[0], ratio[reps - 1]);
    free(ratio);
    free(gbnf);
    free(native);
    graft__grammar_run_free(run);
}

static void bench_shape(const graft__grammar_vocab *gv, const char *grammar, const char *prefix,
                        float *logits, int32_t n_vocab, int reps, int warmup)
{
    graft__grammar *g = compile_or_die(grammar);
    graft__grammar_run *run = run_after(g, gv, prefix);
    double *times = malloc((size_t)reps * sizeof *times);
    int32_t left = 0;
    for (int i = -warmup; i < reps; i++) {
        memset(logits, 0, (size_t)n_vocab * sizeof *logits);
        double start = now_us();
        left = graft__grammar_mask_apply(gv, run, logits);
        if (i >= 0)
            times[i] = now_us() - start;
    }
    double median = graft__bench_median(times, reps); /* sorts times */
    printf("grammar %-44.*s after %-20s %7d left  median %7.3f ms  min %7.3f  max %7.3f\n",
           (int)strcspn(grammar, "\n"), grammar, prefix[0] ? prefix : "(start)", (int)left,
           median / 1e3, times[0] / 1e3, times[reps - 1] / 1e3);
    free(times);
    graft__grammar_run_free(run);
    graft__grammar_free(g);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int reps = 50, warmup = 5;
    graft__bench_loop_args(argc, argv, &path, &reps, &warmup);
    char buf[4096], json_path[4096];
    const char *dir = getenv("GRAFT_MODELS_DIR");
    if (path == NULL) {
        snprintf(buf, sizeof buf, "%s/vocab/ggml-vocab-qwen2.gguf",
                 dir ? dir : "../shared/models");
        path = buf;
    }
    const char *src = getenv("GRAFT_SOURCE_DIR");
    snprintf(json_path, sizeof json_path, "%s/tests/grammars/json.gbnf", src ? src : ".");
    char *json_text = graft__read_file(json_path, NULL);
    graft_model *model = NULL;
    char *err = NULL;
    if (json_text == NULL || graft_model_load_vocab(path, &model, &err) != GRAFT_OK) {
        fprintf(stderr, "bench_grammar_mask: %s\n",
                json_text == NULL ? json_path : err ? err : path);
        return 1;
    }
    graft_model_info info;
    graft_model_get_info(model, &info);
    graft__token_table *tokens = NULL;
    graft__grammar_vocab *gv = NULL;
    graft__json_mask *mask = NULL;
    int rc = graft__token_table_create(model->vocab, info.n_vocab, &tokens);
    double t0 = now_us();
    rc = rc != GRAFT_OK ? rc : graft__grammar_vocab_create(tokens, &gv);
    double build_ms = (now_us() - t0) / 1e3;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (rc != GRAFT_OK || logits == NULL || graft__json_mask_create(tokens, &mask) != GRAFT_OK) {
        fprintf(stderr, "bench_grammar_mask: out of memory\n");
        return 1;
    }
    printf("vocabulary %s: %d tokens, sorted in %.1f ms; %d masks each (pairs for json)\n",
           path, (int)info.n_vocab, build_ms, reps);
    graft__grammar *json = compile_or_die(json_text);
    for (size_t i = 0; i < sizeof json_prefixes / sizeof json_prefixes[0]; i++)
        bench_json_pair(mask, gv, json, json_prefixes[i], logits, info.n_vocab, reps, warmup);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        bench_shape(gv, shapes[i].grammar, shapes[i].prefix, logits, info.n_vocab, reps,
                    warmup);
    graft__grammar_free(json);
    free(json_text);
    free(logits);
    graft__json_mask_free(mask);
    graft__grammar_vocab_free(gv);
    graft__token_table_free(tokens);
    graft_model_free(model);
    return 0;
}
