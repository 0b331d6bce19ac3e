/*
 * test_cli.c: the `graft` executable, run as a user runs it.
 *
 * Each case spawns $GRAFT_BIN with posix_spawn, its stdout and stderr going to scratch
 * files in $GRAFT_TEST_TMP, and checks the exit status and the output: --help of every
 * command, usage errors (exit 2, one line naming the option), runtime failures (exit 1),
 * `info`, `tokenize` and `run` on stories260K against its golden data (run's KV budget,
 * threads and kernels included), `run` with several prompts, --chat and --prompt-cache (the
 * same text with and without the cache, the tokens reused), `synth` files of every
 * architecture that `info` and `run` then accept, and `bench clone`, `bench speed` and
 * `bench prefix` on a tiny synth model, their --json output checked for every field their
 * --help documents, and `template` (stdout alone, stdin input, a model's default, errors).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fixtures.h"

extern char **environ;

#define GOLDEN_TEXT                                                                             \
    " Once upon a time, there was a little girl named Lily. She loved to play outside in the " \
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high"

typedef struct cli_result {
    int status; /* exit status; -1 when killed by a signal */
    char *out;
    char *err;
} cli_result;

static const char *bin(void)
{
    const char *b = getenv("GRAFT_BIN");
    return b && b[0] ? b : "./graft";
}

static char *stories(void)
{
    static char path[512];
    graft_test_model_path(path, sizeof path, GRAFT_TEST_STORIES);
    return path;
}

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/test_cli_%ld_%s", graft_test_tmp_dir(), (long)getpid(), name);
}

static char *slurp_fd(int fd)
{
    off_t size = lseek(fd, 0, SEEK_END);
    assert_true(size >= 0);
    char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, (size_t)size, 0), size);
    buf[size] = '\0';
    close(fd);
    return buf;
}

static int scratch_fd(const char *what)
{
    char path[512];
    snprintf(path, sizeof path, "%s/test_cli_%ld_%s_XXXXXX", graft_test_tmp_dir(), (long)getpid(), what);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    return fd;
}

/* environ without the variables named in `unset` (NULL-terminated), plus `set`. */
static char **make_env(const char *const *unset, const char *const *set)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 8, sizeof *env);
    assert_non_null(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool drop = false;
        for (const char *const *u = unset; u && *u; u++)
            if (strncmp(environ[i], *u, strlen(*u)) == 0 && environ[i][strlen(*u)] == '=')
                drop = true;
        if (!drop)
            env[k++] = environ[i];
    }
    for (const char *const *s = set; s && *s; s++)
        env[k++] = (char *)*s;
    return env;
}

/* Runs graft with `args` (NULL-terminated) in the environment `env` (NULL: ours), its stdin
 * read from the file `in` (NULL: ours). */
static cli_result spawn_graft(char **env, const char *in, const char *const *args)
{
    const char *argv[32] = {bin()};
    size_t n = 1;
    while (args[n - 1] != NULL && n < 31) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    int out = scratch_fd("out"), err = scratch_fd("err");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in != NULL)
        posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, bin(), &fa, NULL, (char *const *)argv, env ? env : environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("cannot run %s: %s", bin(), strerror(rc));
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    cli_result r = {WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, slurp_fd(out), slurp_fd(err)};
    return r;
}

static cli_result run(const char *const *args)
{
    return spawn_graft(NULL, NULL, args);
}

#define GRAFT(...) run((const char *const[]){__VA_ARGS__, NULL})

static void result_free(cli_result *r)
{
    free(r->out);
    free(r->err);
}

static void expect_status(const cli_result *r, int status)
{
    if (r->status != status)
        fail_msg("exit status %d, want %d\nstdout: %s\nstderr: %s", r->status, status, r->out,
                 r->err);
}

static void expect_contains(const char *text, const char *words)
{
    if (strstr(text, words) == NULL)
        fail_msg("'%s' not found in:\n%s", words, text);
}

/* The value of the `label` line of `graft info` ("layers          5" gives "5"). */
static const char *info_field(const char *out, const char *label, char *buf, size_t cap)
{
    size_t len = strlen(label);
    for (const char *line = out; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        if (strncmp(line, label, len) == 0 && line[len] == ' ') {
            const char *v = line + len;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, "\n");
            snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
            return buf;
        }
    }
    fail_msg("no '%s' line in:\n%s", label, out);
    return NULL;
}

/* ---- help and usage errors ------------------------------------------------------------- */

static void test_help(void **state)
{
    (void)state;
    cli_result r = GRAFT("--help");
    expect_status(&r, 0);
    expect_contains(r.out, "usage: graft");
    static const char *const cmds[] = {"run", "info", "tokenize", "synth", "bench"};
    for (size_t i = 0; i < 5; i++)
        expect_contains(r.out, cmds[i]);
    result_free(&r);
    for (size_t i = 0; i < 5; i++) {
        r = GRAFT(cmds[i], "--help");
        expect_status(&r, 0);
        char want[64];
        snprintf(want, sizeof want, "usage: graft %s", cmds[i]);
        expect_contains(r.out, want);
        assert_string_equal(r.err, "");
        result_free(&r);
    }
    r = GRAFT("--version");
    expect_status(&r, 0);
    expect_contains(r.out, "graft ");
    result_free(&r);
    r = GRAFT("run", "-h");
    expect_status(&r, 0);
    static const char *const run_opts[] = {"--logits-out", "--kv-mem", "--threads",
                                           "--kernels", "--prompt-file", "--chat",
                                           "--prompt-cache", "--cache-entries", "--cache-mem"};
    for (size_t i = 0; i < sizeof run_opts / sizeof run_opts[0]; i++)
        expect_contains(r.out, run_opts[i]);
    result_free(&r);
    r = GRAFT("bench", "--help");
    expect_status(&r, 0);
    expect_contains(r.out, "speed");
    expect_contains(r.out, "clone");
    expect_contains(r.out, "prefix");
    result_free(&r);
}

static void expect_usage_error(const char *const *args, const char *words)
{
    cli_result r = run(args);
    expect_status(&r, 2);
    expect_contains(r.err, words);
    char *nl = strchr(r.err, '\n');
    if (nl == NULL || nl[1] != '\0')
        fail_msg("want one line on stderr, got:\n%s", r.err);
    assert_string_equal(r.out, "");
    result_free(&r);
}

#define USAGE_ERROR(words, ...) expect_usage_error((const char *const[]){__VA_ARGS__, NULL}, words)

/* A failure at run time: exit 1, `words` on stderr. */
static void expect_failure(const char *const *args, const char *words)
{
    cli_result r = run(args);
    expect_status(&r, 1);
    expect_contains(r.err, words);
    result_free(&r);
}

#define FAILURE(words, ...) expect_failure((const char *const[]){__VA_ARGS__, NULL}, words)

/* A port another socket listens on: `graft serve` says so, with the reason, and exits 1. */
static void test_serve_port_taken(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    char port[16], want[96];
    snprintf(port, sizeof port, "%d", (int)ntohs(a.sin_port));
    snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%s: Address already in use", port);
    FAILURE(want, "serve", "--port", port);
    close(fd);
}

static void test_usage_errors(void **state)
{
    (void)state;
    USAGE_ERROR("'frobnicate'", "frobnicate");
    USAGE_ERROR("'--bogus'", "run", "--bogus");
    USAGE_ERROR("option -n: 'abc' is not an integer", "run", "-n", "abc");
    USAGE_ERROR("option --temp: -1 is out of range", "run", "--temp", "-1");
    USAGE_ERROR("option --top-p", "run", "--top-p", "1.5");
    USAGE_ERROR("option --min-p", "run", "--min-p=x");
    USAGE_ERROR("option --seed", "run", "--seed", "-3");
    USAGE_ERROR("option --ctx", "run", "--ctx", "12345678901");
    USAGE_ERROR("option -m needs a value", "run", "-m");
    USAGE_ERROR("unexpected argument 'extra'", "run", "extra");
    USAGE_ERROR("missing MODEL", "info");
    USAGE_ERROR("unexpected argument 'b'", "info", "a", "b");
    USAGE_ERROR("missing TEXT", "tokenize", "model.gguf");
    USAGE_ERROR("'--bos'", "tokenize", "--bos", "m", "t");
    USAGE_ERROR("option --no-special takes no value", "tokenize", "--no-special=1", "m", "t");
    USAGE_ERROR("option --kv-mem: '12X' is not a size", "run", "--kv-mem", "12X");
    USAGE_ERROR("option --kv-mem: '1MB' is not a size", "run", "--kv-mem=1MB");
    USAGE_ERROR("option --kv-mem: 0 is out of range", "run", "--kv-mem", "0");
    USAGE_ERROR("option --kv-mem: 99999999999G is out of range", "run", "--kv-mem",
                "99999999999G");
    USAGE_ERROR("option --threads: -1 is out of range", "run", "--threads", "-1");
    USAGE_ERROR("option --kernels needs a value", "run", "--kernels");
    USAGE_ERROR("option --port: 70000 is out of range", "serve", "--port", "70000");
    USAGE_ERROR("option --max-sessions: 0 is out of range", "serve", "--max-sessions", "0");
    USAGE_ERROR("option --api-key: the key is empty", "serve", "--api-key", "");
    USAGE_ERROR("option --allow-origin: 'http://ui/path' is not a list of origins", "serve",
                "--allow-origin", "http://ui/path");
    USAGE_ERROR("option --allow-origin: 'http://a,' is not a list", "serve", "--allow-origin",
                "http://a,");
    USAGE_ERROR("option --allow-origin: 'localhost:3000'", "serve", "--allow-origin",
                "localhost:3000");
    USAGE_ERROR("unknown subcommand 'frob'", "bench", "frob");
    USAGE_ERROR("missing -m MODEL", "bench", "clone");
    USAGE_ERROR("option --max-context: 10 is out of range", "bench", "clone", "-m", "x.gguf",
                "--max-context", "10");
    USAGE_ERROR("option --reps: 'x'", "bench", "clone", "-m", "x.gguf", "--reps", "x");
    USAGE_ERROR("missing -m MODEL", "bench", "speed", "--json");
    USAGE_ERROR("--prompt: '512,x' is not a list", "bench", "speed", "-m", "x.gguf", "--prompt",
                "512,x");
    USAGE_ERROR("missing -m MODEL", "bench", "prefix", "--reps", "1");
    USAGE_ERROR("option --max-prefix: 8 is out of range (must be at least 16)", "bench",
                "prefix", "-m", "x.gguf", "--max-prefix", "8");
    USAGE_ERROR("option --cache-entries needs --prompt-cache", "run", "--cache-entries", "4");
    USAGE_ERROR("option --cache-mem needs --prompt-cache", "run", "-p", "a", "--cache-mem",
                "1M");
    USAGE_ERROR("option --cache-entries: 0 is out of range (must be at least 1)", "run",
                "--prompt-cache", "--cache-entries", "0");
    USAGE_ERROR("option --cache-entries: 5000 is out of range (must be at most 4094)", "run",
                "--prompt-cache", "--cache-entries", "5000");
    USAGE_ERROR("option --cache-mem: '2Q' is not a size", "run", "--prompt-cache",
                "--cache-mem", "2Q");
    USAGE_ERROR("option --logits-out takes one prompt, not several -p or --prompt-file", "run",
                "-p", "a", "-p", "b", "--logits-out", "l.bin");
    USAGE_ERROR("option --prompt-file needs a value", "run", "--prompt-file");
    USAGE_ERROR("option --chat takes no value", "run", "--chat=yes");
    USAGE_ERROR("unknown command ''", "");
    cli_result r = run((const char *const[]){NULL});
    expect_status(&r, 2);
    expect_contains(r.err, "usage: graft");
    result_free(&r);
}

static void test_missing_model(void **state)
{
    (void)state;
    static const char path[] = "/nonexistent/model.gguf";
    FAILURE(path, "info", path);
    FAILURE(path, "tokenize", path, "hello");
    FAILURE(path, "run", "-m", path, "-n", "4");
    char text[512];
    snprintf(text, sizeof text, "%s/stories260K.tokenizer-tests.inp", graft_test_models_dir());
    FAILURE("graft info: ", "info", text);
}

/* ---- info, tokenize, run on stories260K ------------------------------------------------ */

static void test_info(void **state)
{
    (void)state;
    cli_result r = GRAFT("info", stories());
    expect_status(&r, 0);
    char buf[256];
    assert_string_equal(info_field(r.out, "architecture", buf, sizeof buf), "llama");
    assert_string_equal(info_field(r.out, "layers", buf, sizeof buf), "5");
    assert_string_equal(info_field(r.out, "embedding", buf, sizeof buf), "64");
    assert_string_equal(info_field(r.out, "feed-forward", buf, sizeof buf), "172");
    expect_contains(info_field(r.out, "attention", buf, sizeof buf), "8 heads, 4 KV heads");
    expect_contains(info_field(r.out, "vocabulary", buf, sizeof buf), "512 tokens, spm");
    expect_contains(info_field(r.out, "special tokens", buf, sizeof buf), "BOS 1 '<s>'");
    expect_contains(info_field(r.out, "tensor types", buf, sizeof buf), "F32 x48");
    expect_contains(info_field(r.out, "file", buf, sizeof buf), "1185376 bytes");
    assert_string_equal(info_field(r.out, "sliding window", buf, sizeof buf), "none");
    result_free(&r);
}

/* Case `index` of the stories260K tokenizer tests: its text and expected ids. */
static void tokenizer_case(int index, char **text, int *ids, int *n_ids)
{
    char path[512];
    snprintf(path, sizeof path, "%s/stories260K.tokenizer-tests.inp", graft_test_models_dir());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *inp = calloc(1, 1 << 16);
    assert_non_null(inp);
    assert_true(fread(inp, 1, (1 << 16) - 1, f) > 0);
    fclose(f);
    char *start = inp;
    for (int i = 0; i < index; i++)
        start = strstr(start, "\n__ggml_vocab_test__\n") + 21;
    char *end = strstr(start, "\n__ggml_vocab_test__\n");
    *text = strndup(start, (size_t)(end - start));
    free(inp);
    snprintf(path, sizeof path, "%s/stories260K.tokenizer-tests.out", graft_test_models_dir());
    f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    for (int i = 0; i <= index; i++)
        assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    *n_ids = 0;
    char *p = line, *next;
    for (long id = strtol(p, &next, 10); next != p; id = strtol(p, &next, 10)) {
        ids[(*n_ids)++] = (int)id;
        p = next;
    }
}

/* The ids `graft tokenize` printed (lines `ID  "TEXT"`); checks the count line after them. */
static int parse_tokens(const char *out, int *ids)
{
    int n = 0;
    const char *line = out;
    for (;;) {
        char *end;
        long id = strtol(line, &end, 10);
        if (end == line || strncmp(end, "  \"", 3) != 0)
            break;
        ids[n++] = (int)id;
        line = strchr(line, '\n') + 1;
    }
    int count = -1;
    assert_int_equal(sscanf(line, "%d token", &count), 1);
    assert_int_equal(count, n);
    return n;
}

static void check_tokenize_case(int index)
{
    char *text;
    int want[256], got[256], n_want;
    tokenizer_case(index, &text, want, &n_want);
    cli_result r = GRAFT("tokenize", stories(), text, "--no-special");
    expect_status(&r, 0);
    int n = parse_tokens(r.out, got);
    assert_int_equal(n, n_want);
    assert_memory_equal(got, want, (size_t)n * sizeof *got);
    result_free(&r);
    r = GRAFT("tokenize", "--", stories(), text);
    expect_status(&r, 0);
    n = parse_tokens(r.out, got);
    assert_int_equal(n, n_want + 1);
    assert_int_equal(got[0], 1);
    assert_memory_equal(got + 1, want, (size_t)n_want * sizeof *got);
    result_free(&r);
    free(text);
}

static void test_tokenize(void **state)
{
    (void)state;
    check_tokenize_case(0); /* Once upon a time */
    check_tokenize_case(3); /* Lily's mom said, "Lily, let's go to the park." */
    check_tokenize_case(4); /* two lines */
    cli_result r = GRAFT("tokenize", stories(), "say \"hi\"\n", "--no-special");
    expect_status(&r, 0);
    expect_contains(r.out, "\"<0x0A>\"");
    result_free(&r);
    r = GRAFT("tokenize", stories(), "<s>", "--no-special", "--parse-special");
    expect_status(&r, 0);
    expect_contains(r.out, "      1  \"<s>\"\n1 token\n");
    result_free(&r);
    /* a vocab-only GGUF of an architecture graft does not run (GPT-2's BPE) */
    char gpt2[1024];
    snprintf(gpt2, sizeof gpt2, "%s/vocab/ggml-vocab-gpt-2.gguf", graft_test_models_dir());
    r = GRAFT("tokenize", gpt2, "hello world");
    expect_status(&r, 0);
    expect_contains(r.out, "  31373  \"hello\"\n    995  \"\xc4\xa0world\"\n2 tokens\n");
    result_free(&r);
}

static void test_run_golden(void **state)
{
    (void)state;
    cli_result r = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "60");
    expect_status(&r, 0);
    assert_string_equal(r.out, GOLDEN_TEXT "\n");
    expect_contains(r.err, "prompt: 1 tokens, ");
    expect_contains(r.err, "eval: 60 tokens, ");
    result_free(&r);
}

static void test_run_prompt(void **state)
{
    (void)state;
    cli_result r = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "--temp", "0", "-n",
                         "12", "--seed", "7", "--top-k", "5");
    expect_status(&r, 0);
    expect_contains(r.out, "Once upon a time, there was a little girl named Lily.");
    assert_int_equal(strncmp(r.out, "Once upon a time,", 17), 0);
    expect_contains(r.err, "prompt: 5 tokens, ");
    result_free(&r);
    /* Sampled: the prompt echoed, then 20 generated tokens; the same seed gives the same
     * text, another seed (4, whose text is known to differ for this model) other text. */
    cli_result sampled[3];
    static const char *const seeds[3] = {"3", "3", "4"};
    for (int i = 0; i < 3; i++) {
        sampled[i] = GRAFT("run", "-m", stories(), "-p", "Once", "-n", "20", "--temp", "0.8",
                           "--top-p", "0.9", "--min-p", "0.1", "--repeat-penalty", "1.1",
                           "--seed", seeds[i]);
        expect_status(&sampled[i], 0);
        assert_int_equal(strncmp(sampled[i].out, "Once", 4), 0);
        assert_true(strlen(sampled[i].out) > strlen("Once") + 20); /* 20 tokens of text */
        expect_contains(sampled[i].err, "eval: 20 tokens, ");
    }
    assert_string_equal(sampled[0].out, sampled[1].out);
    if (strcmp(sampled[0].out, sampled[2].out) == 0)
        fail_msg("seeds 3 and 4 sampled the same text: %s", sampled[0].out);
    for (int i = 0; i < 3; i++)
        result_free(&sampled[i]);
    /* --repeat-last-n: -1 is the whole context, as without it; 0 turns the penalty off; a
     * window of 16 is neither */
    static const char *const story = "Once upon a time there was a little girl named Lily. Lily";
    static const char *const windows[4] = {NULL, "-1", "0", "16"};
    cli_result penalised[4];
    for (int i = 0; i < 4; i++) {
        penalised[i] = windows[i] == NULL
                           ? GRAFT("run", "-m", stories(), "-p", story, "-n", "24", "--temp",
                                   "0", "--repeat-penalty", "1.5")
                           : GRAFT("run", "-m", stories(), "-p", story, "-n", "24", "--temp",
                                   "0", "--repeat-penalty", "1.5", "--repeat-last-n", windows[i]);
        expect_status(&penalised[i], 0);
    }
    cli_result plain = GRAFT("run", "-m", stories(), "-p", story, "-n", "24", "--temp", "0");
    expect_status(&plain, 0);
    assert_string_equal(penalised[1].out, penalised[0].out);
    assert_string_equal(penalised[2].out, plain.out);
    assert_string_not_equal(penalised[0].out, plain.out);
    assert_string_not_equal(penalised[3].out, penalised[0].out);
    assert_string_not_equal(penalised[3].out, plain.out);
    for (int i = 0; i < 4; i++)
        result_free(&penalised[i]);
    result_free(&plain);
    r = GRAFT("run", "-m", stories(), "-p", story, "--repeat-last-n", "-2");
    expect_status(&r, 2);
    expect_contains(r.err, "--repeat-last-n");
    result_free(&r);
    /* --top-nsigma, --typical, --dynatemp-range and XTC reach the sampler: the same seed
     * samples other text */
    cli_result base = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24", "--temp",
                            "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "3");
    cli_result sigma = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24",
                             "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                             "--seed", "3", "--top-nsigma", "0.5");
    cli_result xtc = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24", "--temp",
                           "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "3",
                           "--xtc-probability", "1", "--xtc-threshold", "0.05");
    cli_result typical = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24",
                               "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                               "--seed", "3", "--typical", "0.5");
    cli_result dynatemp = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24",
                                "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                                "--seed", "3", "--dynatemp-range", "1", "--dynatemp-exp", "2");
    expect_status(&base, 0);
    expect_status(&sigma, 0);
    expect_status(&xtc, 0);
    expect_status(&typical, 0);
    expect_status(&dynatemp, 0);
    assert_string_not_equal(sigma.out, base.out);
    assert_string_not_equal(xtc.out, base.out);
    assert_string_not_equal(typical.out, base.out);
    assert_string_not_equal(dynatemp.out, base.out);
    result_free(&base);
    result_free(&sigma);
    result_free(&xtc);
    result_free(&typical);
    result_free(&dynatemp);
    r = GRAFT("run", "-m", stories(), "-p", story, "--xtc-probability", "1.5");
    expect_status(&r, 2);
    expect_contains(r.err, "--xtc-probability");
    result_free(&r);
}

/* Mirostat and DRY reach the sampler; their windows, breakers and bounds are read as
 * llama-cli reads them. */
static void test_run_mirostat_and_dry(void **state)
{
    (void)state;
    /* the same seed samples other text with Mirostat 1 and with 2 than without */
    cli_result sampled[3];
    static const char *const mirostat[3] = {"0", "1", "2"};
    for (int i = 0; i < 3; i++) {
        sampled[i] = GRAFT("run", "-m", stories(), "-p", "Once upon a time", "-n", "24",
                           "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                           "--seed", "3", "--mirostat", mirostat[i], "--mirostat-ent", "3",
                           "--mirostat-lr", "0.2");
        expect_status(&sampled[i], 0);
    }
    assert_string_not_equal(sampled[1].out, sampled[0].out);
    assert_string_not_equal(sampled[2].out, sampled[0].out);
    assert_string_not_equal(sampled[2].out, sampled[1].out);
    for (int i = 0; i < 3; i++)
        result_free(&sampled[i]);
    /* greedy after a thrice repeated sentence: DRY changes the text; a window of 0 is DRY
     * off; "." as the one breaker changes it again; "none" drops the breakers before it */
    const char *repeated = "Lily had a red ball. Lily had a red ball. Lily had a red ball. "
                           "Lily had a";
    cli_result off = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp", "0");
    cli_result on = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp", "0",
                          "--dry-multiplier", "0.8");
    cli_result no_window = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp",
                                 "0", "--dry-multiplier", "0.8", "--dry-penalty-last-n", "0");
    cli_result dot = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp", "0",
                           "--dry-multiplier", "0.8", "--dry-sequence-breaker", ".");
    cli_result dot_none = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp",
                                "0", "--dry-multiplier", "0.8", "--dry-sequence-breaker", ".",
                                "--dry-sequence-breaker", "none");
    cli_result none = GRAFT("run", "-m", stories(), "-p", repeated, "-n", "16", "--temp", "0",
                            "--dry-multiplier", "0.8", "--dry-sequence-breaker", "none");
    cli_result *all[] = {&off, &on, &no_window, &dot, &dot_none, &none};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        expect_status(all[i], 0);
    assert_string_not_equal(on.out, off.out);
    assert_string_equal(no_window.out, off.out);
    assert_string_not_equal(dot.out, on.out);
    assert_string_equal(dot_none.out, none.out);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        result_free(all[i]);
    struct {
        const char *option, *value;
    } bad[] = {{"--mirostat", "3"}, {"--mirostat-ent", "-1"}, {"--dry-base", "0.5"},
               {"--dry-penalty-last-n", "-2"}, {"--dry-sequence-breaker", ""},
               {"--dry-sequence-breaker", "12345678901234567890123456789012345678901"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cli_result r = GRAFT("run", "-m", stories(), "-p", "x", bad[i].option, bad[i].value);
        expect_status(&r, 2);
        expect_contains(r.err, bad[i].option);
        result_free(&r);
    }
}

static void test_run_default_model(void **state)
{
    (void)state;
    char models[600];
    snprintf(models, sizeof models, "GRAFT_MODELS_DIR=%s", graft_test_models_dir());
    char **env = make_env((const char *const[]){"GRAFT_MODEL", "GRAFT_MODELS_DIR", NULL},
                          (const char *const[]){models, NULL});
    cli_result r =
        spawn_graft(env, NULL, (const char *const[]){"run", "--temp", "0", "-n", "5", NULL});
    expect_status(&r, 0);
    assert_string_equal(r.out, " Once upon a time,\n");
    result_free(&r);
    free(env);
    char model[600];
    snprintf(model, sizeof model, "GRAFT_MODEL=%s", stories());
    env = make_env((const char *const[]){"GRAFT_MODEL", "GRAFT_MODELS_DIR", NULL},
                   (const char *const[]){model, NULL});
    r = spawn_graft(env, NULL, (const char *const[]){"run", "--temp", "0", "-n", "3", NULL});
    expect_status(&r, 0);
    assert_string_equal(r.out, " Once upon a\n");
    result_free(&r);
    free(env);
}

static void test_logits_out(void **state)
{
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "logits.bin");
    cli_result r = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "1", "--logits-out", path);
    expect_status(&r, 0);
    result_free(&r);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char bytes[512 * 4 + 1];
    assert_int_equal(fread(bytes, 1, sizeof bytes, f), 512 * 4);
    fclose(f);
    unlink(path);
    float logits[512];
    for (int i = 0; i < 512; i++) {
        uint32_t bits = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 |
                        (uint32_t)bytes[4 * i + 2] << 16 | (uint32_t)bytes[4 * i + 3] << 24;
        memcpy(&logits[i], &bits, sizeof bits);
    }
    static const int top_ids[5] = {403, 385, 410, 317, 407};
    static const float top_vals[5] = {17.02352f, 15.40621f, 13.10826f, 12.76917f, 12.41809f};
    bool used[512] = {0};
    for (int k = 0; k < 5; k++) {
        int best = -1;
        for (int i = 0; i < 512; i++)
            if (!used[i] && (best < 0 || logits[i] > logits[best]))
                best = i;
        used[best] = true;
        assert_int_equal(best, top_ids[k]);
        assert_float_equal(logits[best], top_vals[k], 1e-3);
    }
    FAILURE("/nonexistent/dir/l.bin", "run", "-m", stories(), "-n", "1", "--logits-out",
            "/nonexistent/dir/l.bin");
}

static void test_run_engine_options(void **state)
{
    (void)state;
    cli_result r = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "60", "--kv-mem", "1M",
                         "--threads", "1");
    expect_status(&r, 0);
    assert_string_equal(r.out, GOLDEN_TEXT "\n");
    result_free(&r);
    r = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "60", "--kv-mem", "1000");
    expect_status(&r, 1);
    expect_contains(r.err, "graft run: --kv-mem 1000 is too small: ");
    expect_contains(r.err, "20480 bytes");
    assert_string_equal(r.out, "");
    result_free(&r);
    FAILURE("graft run: --kv-mem 20480 holds 32 positions (1 block of 32 positions, 20480 "
            "bytes each) but the context needs 61",
            "run", "-m", stories(), "--temp", "0", "-n", "60", "--kv-mem", "20k");
    FAILURE("sse9", "run", "-m", stories(), "-n", "4", "--kernels", "sse9");
    r = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "60", "--ctx", "10");
    expect_status(&r, 0);
    assert_string_equal(r.out, " Once upon a time, there was a little g\n");
    expect_contains(r.err, "the context is full (10 positions)");
    result_free(&r);
    /* Two KV layer groups: the budget runs out during the generation, which says so. */
    char path[512];
    tmp_path(path, sizeof path, "gemma3.gguf");
    r = GRAFT("synth", "--arch", "gemma3", "--preset", "tiny", "-o", path);
    expect_status(&r, 0);
    result_free(&r);
    r = GRAFT("run", "-m", path, "-p", "Hello", "--temp", "0", "-n", "200", "--kv-mem", "200K");
    expect_status(&r, 1);
    expect_contains(r.err, "the pool has");
    expect_contains(r.err, "(--kv-mem 204800 is too small for this context)");
    result_free(&r);
    unlink(path);
}

/* ---- run: several prompts, --chat, --prompt-cache ----------------------------------------- */

/* Writes `text` to the scratch file `name`; its path goes to path. */
static void write_file(char *path, size_t cap, const char *name, const char *text)
{
    tmp_path(path, cap, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* --json-schema: the continuation is an instance ({"a": a boolean}, checked here from the
 * text), and the run ends as the object closes, before -n; a schema outside the subset, a
 * missing file and --json with --json-schema are refused. */
static void test_run_json(void **state)
{
    (void)state;
    char schema[1024], bad[1024];
    write_file(schema, sizeof schema, "cli-schema.json",
               "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"boolean\"}}, "
               "\"required\": [\"a\"], \"additionalProperties\": false}");
    write_file(bad, sizeof bad, "cli-schema-bad.json",
               "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"uniqueItems\": true}}}");
    cli_result r = GRAFT("run", "-m", stories(), "-p", "Once", "--temp", "0", "-n", "60",
                         "--json-schema", schema);
    expect_status(&r, 0);
    assert_int_equal(strncmp(r.out, "Once", 4), 0);
    const char *open = strchr(r.out, '{'), *close = strrchr(r.out, '}');
    assert_true(open != NULL && close != NULL && close > open);
    char *object = strndup(open, (size_t)(close - open + 1));
    char squeezed[64];
    size_t n = 0;
    for (const char *c = object; *c != '\0' && n + 1 < sizeof squeezed; c++)
        if (*c != ' ' && *c != '\n')
            squeezed[n++] = *c;
    squeezed[n] = '\0';
    if (strcmp(squeezed, "{\"a\":true}") != 0 && strcmp(squeezed, "{\"a\":false}") != 0)
        fail_msg("not an instance: %s", object);
    free(object);
    assert_null(strstr(r.err, "eval: 60 tokens")); /* it ended as the object closed */
    result_free(&r);
    FAILURE("'uniqueItems' is not supported", "run", "-m", stories(), "--json-schema", bad);
    FAILURE("cannot open", "run", "-m", stories(), "--json-schema", "/nonexistent/schema.json");
    USAGE_ERROR("exclude each other", "run", "--json", "--json-schema", schema);
}

/* --grammar-file: each continuation is a phone number (the story model never writes one),
 * ending as the grammar can go no further, before -n; a grammar that does not compile says
 * where, and the output formats exclude each other. */
static void test_run_grammar(void **state)
{
    (void)state;
    char grammar[1024], bad[1024];
    write_file(grammar, sizeof grammar, "cli-phone.gbnf",
               "# a phone number\nroot ::= [0-9]{3} \"-\" [0-9]{4}\n");
    write_file(bad, sizeof bad, "cli-bad.gbnf", "root ::= digit\n");
    cli_result r = GRAFT("run", "-m", stories(), "-p", "Once", "-p", "Twice", "--temp", "1",
                         "--seed", "3", "-n", "60", "--grammar-file", grammar);
    expect_status(&r, 0);
    char *save = NULL;
    int lines = 0;
    for (char *line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *prompt = lines == 0 ? "Once" : "Twice";
        size_t n = strlen(prompt);
        assert_int_equal(strncmp(line, prompt, n), 0);
        const char *number = line + n;
        if (strlen(number) != 8 || number[3] != '-' ||
            strspn(number, "0123456789") != 3 || strspn(number + 4, "0123456789") != 4)
            fail_msg("not a phone number: \"%s\"", number);
        lines++;
    }
    assert_int_equal(lines, 2);
    assert_null(strstr(r.err, "eval: 60 tokens"));
    result_free(&r);
    FAILURE("line 1, column 10: rule 'digit' is used but not defined", "run", "-m", stories(),
            "--grammar-file", bad);
    USAGE_ERROR("exclude each other", "run", "--json", "--grammar-file", grammar);
}

static void test_run_prompt_cache(void **state)
{
    (void)state;
    static const char p1[] = "Once upon a time", p2[] = "Once upon a time, there was a girl";
    cli_result cold = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "20", "-p", p1, "-p",
                            p2);
    expect_status(&cold, 0);
    assert_int_equal(strncmp(cold.out, "Once upon a time, there was a little girl", 41), 0);
    expect_contains(cold.out, "\nOnce upon a time, there was a girl");
    expect_contains(cold.err, "prompt 1: 5 tokens, ");
    expect_contains(cold.err, "prompt 2: 12 tokens, ");
    expect_contains(cold.err, "first token after ");
    cli_result warm = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "20", "-p", p1, "-p",
                            p2, "--prompt-cache");
    expect_status(&warm, 0);
    assert_string_equal(warm.out, cold.out);
    expect_contains(warm.err, "prompt 1: 5 tokens, 0 reused from the cache, 5 computed");
    expect_contains(warm.err, "prompt 2: 12 tokens, 5 reused from the cache, 7 computed");
    expect_contains(warm.err, "prompt cache: 2 lookups, 1 hit, 5 tokens reused; 2 snapshots");
    result_free(&warm);
    result_free(&cold);
    /* A bound of one snapshot and one block of KV (20480 bytes): still the same text. */
    warm = GRAFT("run", "-m", stories(), "--temp", "0", "-n", "20", "-p", p1, "-p", p2, "-p",
                 p1, "--prompt-cache", "--cache-entries", "1", "--cache-mem", "20K");
    expect_status(&warm, 0);
    expect_contains(warm.err, "prompt 3: 5 tokens, 4 reused from the cache, 1 computed");
    expect_contains(warm.err, "1 snapshot held, 20.0 KiB of KV");
    result_free(&warm);
}

/* --chat, prompts from -p and a file: every turn computes the last reply token and its new
 * text only; sampled text (seeded, with a repetition penalty) is the same as without. */
static void test_run_chat(void **state)
{
    (void)state;
    char path[512];
    write_file(path, sizeof path, "turns.txt", "there was a dog\n\nThe end\r\n");
    const char *const args[] = {"run", "-m", stories(), "-n", "16", "--temp", "0.8", "--seed",
                                "5", "--repeat-penalty", "1.1", "--chat", "-p",
                                "Once upon a time", "--prompt-file", path, NULL, NULL};
    cli_result cold = run(args);
    expect_status(&cold, 0);
    expect_contains(cold.err, "prompt 3: ");
    assert_int_equal(strncmp(cold.out, "Once upon a time", 16), 0);
    const char *line = strchr(cold.out, '\n') + 1;
    assert_int_equal(strncmp(line, "there was a dog", 15), 0);
    line = strchr(line, '\n') + 1;
    assert_int_equal(strncmp(line, "The end", 7), 0);
    const char *cached[sizeof args / sizeof args[0]];
    memcpy(cached, args, sizeof args);
    cached[16] = "--prompt-cache";
    cli_result warm = run(cached);
    expect_status(&warm, 0);
    assert_string_equal(warm.out, cold.out);
    expect_contains(warm.err, "prompt 2: 26 tokens, 20 reused from the cache, 6 computed");
    expect_contains(warm.err, "prompt 3: 45 tokens, 41 reused from the cache, 4 computed");
    result_free(&warm);
    result_free(&cold);
    /* The conversation outgrows --ctx at the second turn. */
    cold = GRAFT("run", "-m", stories(), "-n", "16", "--chat", "--ctx", "24", "-p",
                 "Once upon a time", "-p", "there was a dog");
    expect_status(&cold, 1);
    expect_contains(cold.err, "graft run: at prompt 2 the conversation has 26 tokens but the "
                              "context is 24 positions (--ctx)");
    result_free(&cold);
    cold = GRAFT("run", "-m", stories(), "--ctx", "3", "-p", "Once upon a time");
    expect_status(&cold, 1);
    expect_contains(cold.err, "graft run: the prompt has 5 tokens but --ctx is 3");
    result_free(&cold);
    cold = GRAFT("run", "-m", stories(), "--ctx", "3", "--prompt-file", path);
    expect_status(&cold, 1);
    expect_contains(cold.err, "graft run: prompt 1 has 6 tokens but --ctx is 3");
    result_free(&cold);
    unlink(path);
    cold = GRAFT("run", "-m", stories(), "--prompt-file", path);
    expect_status(&cold, 1);
    expect_contains(cold.err, "graft run: cannot open '");
    result_free(&cold);
}

/* ---- synth ------------------------------------------------------------------------------- */

static void synth_and_use(const char *arch, const char *type)
{
    char path[512];
    tmp_path(path, sizeof path, "synth.gguf");
    cli_result r = GRAFT("synth", "--arch", arch, "--preset", "tiny", "--type", type, "--seed",
                         "11", "-o", path);
    expect_status(&r, 0);
    expect_contains(r.out, path);
    result_free(&r);
    r = GRAFT("info", path);
    expect_status(&r, 0);
    char buf[256];
    assert_string_equal(info_field(r.out, "architecture", buf, sizeof buf), arch);
    assert_string_equal(info_field(r.out, "layers", buf, sizeof buf),
                        strcmp(arch, "gemma3") == 0 ? "6" : "4");
    expect_contains(info_field(r.out, "vocabulary", buf, sizeof buf), "1024 tokens, spm");
    expect_contains(info_field(r.out, "tensor types", buf, sizeof buf), type);
    if (strcmp(arch, "gemma3") == 0)
        expect_contains(info_field(r.out, "sliding window", buf, sizeof buf),
                        "16 tokens on 4 of 6 layers");
    result_free(&r);
    r = GRAFT("run", "-m", path, "-n", "8", "--temp", "0", "-p", "Once upon a time");
    expect_status(&r, 0);
    expect_contains(r.err, "prompt: ");
    result_free(&r);
    unlink(path);
}

static void test_synth_archs(void **state)
{
    (void)state;
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma3"};
    static const char *const kquants[] = {"Q4_K", "Q5_K", "Q6_K", "Q4_K"};
    for (int i = 0; i < 4; i++) {
        synth_and_use(archs[i], "F32");
        synth_and_use(archs[i], "Q8_0");
        synth_and_use(archs[i], kquants[i]);
    }
}

static void test_synth_vocab(void **state)
{
    (void)state;
    char path[512], vocab[512];
    tmp_path(path, sizeof path, "gpt2.gguf");
    snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-gpt-2.gguf", graft_test_models_dir());
    cli_result r = GRAFT("synth", "--arch", "llama", "--preset", "tiny", "--type", "q8_0",
                         "--vocab", vocab, "-o", path);
    expect_status(&r, 0);
    result_free(&r);
    r = GRAFT("info", path);
    expect_status(&r, 0);
    char buf[256];
    expect_contains(info_field(r.out, "vocabulary", buf, sizeof buf), "50257 tokens, bpe");
    assert_null(strstr(r.out, "fill in middle")); /* GPT-2 has no FIM tokens */
    result_free(&r);
    /* StarCoder's FIM tokens, found by their texts */
    snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-starcoder.gguf", graft_test_models_dir());
    r = GRAFT("synth", "--arch", "qwen2", "--preset", "tiny", "--vocab", vocab, "-o", path);
    expect_status(&r, 0);
    result_free(&r);
    r = GRAFT("info", path);
    expect_status(&r, 0);
    expect_contains(info_field(r.out, "fill in middle", buf, sizeof buf),
                    "prefix 1 '<fim_prefix>', suffix 3 '<fim_suffix>', middle 2 '<fim_middle>', "
                    "repository none, file none");
    result_free(&r);
    unlink(path);
}

static void test_synth_errors(void **state)
{
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "bad.gguf");
    USAGE_ERROR("unknown architecture 'mamba'", "synth", "--arch", "mamba", "--preset", "tiny",
                "-o", path);
    USAGE_ERROR("unknown preset 'huge'", "synth", "--arch", "llama", "--preset", "huge", "-o",
                path);
    USAGE_ERROR("option --type: unknown type 'Q9_9'", "synth", "--arch", "llama", "--preset",
                "tiny", "--type", "Q9_9", "-o", path);
    USAGE_ERROR("Q2_K", "synth", "--arch", "llama", "--preset", "tiny", "--type", "q2_k", "-o",
                path);
    USAGE_ERROR("1152 (n_embd)", "synth", "--arch", "gemma3", "--preset", "gemma3-1b", "--type",
                "Q4_K", "-o", path);
    USAGE_ERROR("missing -o", "synth", "--arch", "llama", "--preset", "tiny");
    USAGE_ERROR("missing --arch", "synth", "--preset", "tiny", "-o", path);
    USAGE_ERROR("missing --preset", "synth", "--arch", "llama", "-o", path);
    USAGE_ERROR("option --seed: 'x'", "synth", "--arch", "llama", "--preset", "tiny", "--seed",
                "x", "-o", path);
    USAGE_ERROR("unexpected argument", "synth", "--arch", "llama", "--preset", "tiny", "-o",
                path, "more");
    assert_int_not_equal(access(path, F_OK), 0);
    FAILURE("/nonexistent/vocab.gguf", "synth", "--arch", "llama", "--preset", "tiny",
            "--vocab", "/nonexistent/vocab.gguf", "-o", path);
    assert_int_not_equal(access(path, F_OK), 0);
}

/* ---- bench --------------------------------------------------------------------------------- */

/* Writes a tiny qwen3 model for the bench tests to `path`. */
static void synth_tiny(char *path, size_t cap)
{
    tmp_path(path, cap, "bench.gguf");
    cli_result r = GRAFT("synth", "--arch", "qwen3", "--preset", "tiny", "--type", "Q8_0", "-o",
                         path);
    expect_status(&r, 0);
    result_free(&r);
}

/* The number after the first `"key": ` in `json` (true/false as 1/0); fails when absent. */
static double json_number(const char *json, const char *key)
{
    char want[64];
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *at = strstr(json, want);
    if (at == NULL)
        fail_msg("no field %s in:\n%s", want, json);
    at += strlen(want);
    if (strncmp(at, "true", 4) == 0 || strncmp(at, "false", 5) == 0)
        return at[0] == 't';
    char *end;
    double v = strtod(at, &end);
    if (end == at)
        fail_msg("field %s is not a number in:\n%s", want, json);
    return v;
}

/* Runs graft with `args`, a bench command with --json, which must exit 0: every name in
 * `fields` (NULL-terminated) appears in that command's --help text and as a key of the JSON
 * object it prints. Returns the run, for result_free. */
static cli_result run_bench_json(const char *const *fields, const char *const *args)
{
    cli_result help = GRAFT("bench", args[1], "--help");
    expect_status(&help, 0);
    cli_result r = run(args);
    expect_status(&r, 0);
    const char *json = r.out;
    assert_int_equal(json[0], '{');
    assert_int_equal(json[strlen(json) - 2], '}');
    for (const char *const *f = fields; *f; f++) {
        expect_contains(help.out, *f);
        char key[64];
        snprintf(key, sizeof key, "\"%s\": ", *f);
        expect_contains(json, key);
    }
    result_free(&help);
    return r;
}

#define BENCH_JSON(fields, ...) run_bench_json(fields, (const char *const[]){__VA_ARGS__, NULL})

/* The clone objects of bench clone's JSON: each checked for the zero-copy properties. */
static int check_clone_objects(const char *json, int64_t block_bytes)
{
    int n = 0;
    for (const char *at = strstr(json, "{\"context\": "); at;
         at = strstr(at + 1, "{\"context\": ")) {
        assert_true(json_number(at, "clone_us") > 0);
        assert_int_equal((int64_t)json_number(at, "clone_copied_bytes"), 0);
        assert_int_equal((int64_t)json_number(at, "clone_new_blocks"), 0);
        assert_int_equal((int64_t)json_number(at, "write_new_blocks"), 1);
        bool aligned = json_number(at, "block_aligned") != 0;
        assert_int_equal((int64_t)json_number(at, "boundary") % 32 == 0, aligned);
        assert_int_equal((int64_t)json_number(at, "write_copied_bytes"),
                         aligned ? 0 : block_bytes);
        n++;
    }
    return n;
}

static void test_bench_clone(void **state)
{
    (void)state;
    static const char *const fields[] = {
        "engine", "model", "arch", "threads", "reps", "kv_block_tokens", "kv_block_bytes",
        "clones", "context", "boundary", "block_aligned", "clone_us", "clone_copied_bytes",
        "clone_new_blocks", "write_copied_bytes", "write_new_blocks", "memory",
        "prompt_tokens", "extend_tokens", "kv_blocks_used", "kv_used_bytes", "bound_bytes",
        "kv_within_bound", "peak_rss_before_bytes", "peak_rss_after_bytes",
        "peak_rss_growth_bytes", "rss_within_bound", NULL};
    char path[512];
    synth_tiny(path, sizeof path);
    cli_result r = BENCH_JSON(fields, "bench", "clone", "-m", path, "--max-context", "300",
                              "--reps", "3", "--threads", "1", "--json");
    int64_t block_bytes = (int64_t)json_number(r.out, "kv_block_bytes");
    assert_int_equal((int64_t)json_number(r.out, "kv_block_tokens"), 32);
    assert_int_equal(check_clone_objects(r.out, block_bytes), 4); /* 256 and 300, 2 each */
    const char *mem = strstr(r.out, "\"memory\": ");
    assert_non_null(mem);
    assert_int_equal((int)json_number(mem, "prompt_tokens"), 300);
    assert_int_equal((int)json_number(mem, "clones"), 8);
    assert_int_equal((int)json_number(mem, "extend_tokens"), 128);
    /* 300 positions: 10 blocks, the last shared by the 8 clones, each of which copies it
     * and adds 4: 10 + 8 * 5 */
    assert_int_equal((int64_t)json_number(mem, "kv_blocks_used"), 50);
    assert_int_equal((int64_t)json_number(mem, "kv_used_bytes"), 50 * block_bytes);
    assert_int_equal((int64_t)json_number(mem, "bound_bytes"),
                     (300 + 8 * 128) * block_bytes / 32 + 9 * block_bytes);
    assert_int_equal((int)json_number(mem, "kv_within_bound"), 1);
    result_free(&r);
    r = GRAFT("bench", "clone", "-m", path, "--max-context", "64", "--reps", "1");
    expect_status(&r, 0);
    expect_contains(r.out, "64 (block edge)");
    expect_contains(r.out, "48 (mid-block)");
    expect_contains(r.out, "KV pool in use");
    result_free(&r);
    FAILURE("--max-context 4000 is too long: the model's context length is 4096 and each "
            "clone is extended by 128 tokens, so at most 3968",
            "bench", "clone", "-m", path, "--max-context", "4000");
    unlink(path);
}

static void test_bench_speed(void **state)
{
    (void)state;
    static const char *const fields[] = {
        "engine", "model", "arch", "threads", "kernels", "cpu_features", "prompt_tokens",
        "gen_tokens", "seq_context_tokens", "seq_gen_tokens", "reps", "weight_bytes",
        "prefill_tps", "decode_tps", "context_prefill_tps", "context_decode_tps",
        "aggregate_tps", "bandwidth_gbs", "decode_roofline_tps", "decode_roofline_weights_tps",
        "kv_bytes_per_token", "bandwidth_during_gbs", "decode_roofline_during_tps", NULL};
    char path[512];
    synth_tiny(path, sizeof path);
    cli_result r = BENCH_JSON(fields, "bench", "speed", "-m", path, "--prompt", "16", "--gen",
                              "4", "--reps", "1", "--threads", "1", "--json");
    assert_int_equal((int)json_number(r.out, "prompt_tokens"), 16);
    assert_int_equal((int)json_number(r.out, "seq_context_tokens"), 64);
    assert_true(json_number(r.out, "bandwidth_during_gbs") > 0); /* one sample, before token 2 */
    assert_true(json_number(r.out, "decode_roofline_during_tps") > 0);
    assert_true(json_number(r.out, "prefill_tps") > 0); /* the engine's */
    assert_true(json_number(r.out, "decode_tps") > 0);
    assert_true(json_number(r.out, "context_prefill_tps") > 0);
    assert_true(json_number(r.out, "context_decode_tps") > 0);
    const char *agg = strstr(r.out, "\"aggregate_tps\": {");
    assert_non_null(agg);
    static const char *const counts[] = {"1", "2", "4", "8"};
    for (int i = 0; i < 4; i++)
        assert_true(json_number(agg, counts[i]) > 0);
    result_free(&r);
    /* a list of prompt lengths: one JSON line each, in the order given */
    r = GRAFT("bench", "speed", "-m", path, "--prompt", "24,8", "--gen", "2", "--reps", "1",
              "--threads", "1", "--json");
    expect_status(&r, 0);
    assert_int_equal((int)json_number(r.out, "prompt_tokens"), 24);
    const char *second = strchr(r.out, '\n');
    assert_non_null(second);
    assert_int_equal((int)json_number(second, "prompt_tokens"), 8);
    result_free(&r);
    r = GRAFT("bench", "speed", "-m", path, "--prompt", "8,16", "--gen", "2", "--reps", "1",
              "--threads", "1");
    expect_status(&r, 0);
    expect_contains(r.out, "cpu features: ");
    expect_contains(r.out, "16 tokens in one batch");
    result_free(&r);
    unlink(path);
}

static void test_bench_prefix(void **state)
{
    (void)state;
    static const char *const fields[] = {
        "engine", "model", "arch", "threads", "reps", "results", "prefix_tokens",
        "suffix_tokens", "matched_tokens", "cold_ttft_ms", "warm_ttft_ms", "lookup_clone_us",
        "warm_total_ms", "ideal_ttft_ms", "warm_over_ideal", "speedup", "snapshot_bytes",
        "same_token", NULL};
    char path[512];
    synth_tiny(path, sizeof path);
    cli_result r = BENCH_JSON(fields, "bench", "prefix", "-m", path, "--max-prefix", "40",
                              "--reps", "1", "--threads", "1", "--json");
    int n = 0;
    for (const char *at = strstr(r.out, "{\"prefix_tokens\": "); at;
         at = strstr(at + 1, "{\"prefix_tokens\": ")) {
        assert_int_equal((int)json_number(at, "prefix_tokens"), 40);
        assert_int_equal((int)json_number(at, "suffix_tokens"), n == 0 ? 16 : 128);
        assert_int_equal((int)json_number(at, "matched_tokens"), 40);
        assert_int_equal((int)json_number(at, "same_token"), 1);
        assert_true(json_number(at, "cold_ttft_ms") > 0);
        assert_true(json_number(at, "warm_ttft_ms") > 0);
        assert_true(json_number(at, "lookup_clone_us") > 0);
        assert_true(json_number(at, "snapshot_bytes") > 0);
        n++;
    }
    assert_int_equal(n, 2);
    result_free(&r);
    FAILURE("--max-prefix 3969 is too long: the model's context length is 4096 and suffixes "
            "are up to 128 tokens, so at most 3968",
            "bench", "prefix", "-m", path, "--max-prefix", "3969");
    unlink(path);
}

/* ---- template ---------------------------------------------------------------------------- */

/* `graft template`: the text alone on stdout (from a file and from stdin), a model's default
 * template said on stderr, exit 1 with the template's message, usage errors. */
static void test_template(void **state)
{
    (void)state;
    char tmpl[512], input[512], bad[512];
    write_file(tmpl, sizeof tmpl, "chat.jinja", "{%- for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                     "{{- bos_token }}{% if add_generation_prompt %}>{% endif %}\n");
    write_file(input, sizeof input, "chat.json", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi \\u00e9\"}], "
                      "\"add_generation_prompt\": true, \"bos_token\": \"<B>\"}");
    write_file(bad, sizeof bad, "bad.jinja", "a\n{{ raise_exception('roles must alternate') }}");
    static const char want[] = "[user] Hi \xc3\xa9\n<B>>";
    cli_result r = GRAFT("template", "--template", tmpl, "--input", input);
    expect_status(&r, 0);
    assert_string_equal(r.out, want);
    assert_string_equal(r.err, "");
    result_free(&r);
    r = spawn_graft(NULL, input,
                    (const char *const[]){"template", "--template", tmpl, "--input", "-", NULL});
    expect_status(&r, 0);
    assert_string_equal(r.out, want);
    result_free(&r);
    r = GRAFT("template", "--template", bad, "--input", input);
    expect_status(&r, 1);
    assert_string_equal(r.out, "");
    expect_contains(r.err, "line 2, column 4: roles must alternate");
    result_free(&r);
    r = GRAFT("template", "-m", stories(), "--input", input);
    expect_status(&r, 0);
    assert_string_equal(r.out, "<|im_start|>user\nHi \xc3\xa9<|im_end|>\n<|im_start|>assistant\n");
    expect_contains(r.err, "has no chat template: using the default (ChatML)");
    result_free(&r);
    r = GRAFT("template", "--help");
    expect_status(&r, 0);
    expect_contains(r.out, "usage: graft template");
    result_free(&r);
    USAGE_ERROR("option --input is required", "template", "--template", tmpl);
    USAGE_ERROR("give one of --template and -m", "template", "--input", input);
    USAGE_ERROR("give one of --template and -m", "template", "--template", tmpl, "-m", "x.gguf",
                "--input", input);
    USAGE_ERROR("option --now: 'x'", "template", "--template", tmpl, "--input", input, "--now",
                "x");
    unlink(tmpl);
    unlink(input);
    unlink(bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_serve_port_taken),
        cmocka_unit_test(test_missing_model),
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_tokenize),
        cmocka_unit_test(test_run_golden),
        cmocka_unit_test(test_run_prompt),
        cmocka_unit_test(test_run_mirostat_and_dry),
        cmocka_unit_test(test_run_default_model),
        cmocka_unit_test(test_logits_out),
        cmocka_unit_test(test_run_engine_options),
        cmocka_unit_test(test_run_json),
        cmocka_unit_test(test_run_grammar),
        cmocka_unit_test(test_run_prompt_cache),
        cmocka_unit_test(test_run_chat),
        cmocka_unit_test(test_synth_archs),
        cmocka_unit_test(test_synth_vocab),
        cmocka_unit_test(test_synth_errors),
        cmocka_unit_test(test_bench_clone),
        cmocka_unit_test(test_bench_speed),
        cmocka_unit_test(test_bench_prefix),
        cmocka_unit_test(test_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
