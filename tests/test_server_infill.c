/*
 * test_server_infill.c: fill in the middle through `graft serve` (the real binary, spoken to
 * with libcurl): OpenAI's `suffix` on /v1/completions and llama-server's POST /infill, on
 * random-weight qwen2 models that carry the StarCoder and DeepSeek-Coder vocabularies (their
 * FIM tokens found by text; no repository or file tokens that llama.cpp knows; DeepSeek-Coder
 * adds BOS), StarCoder's again with metadata keys that name its <repo_name> and <file_sep>
 * as the repository and file separators (the keys' path, and the repository-level layout),
 * and stories260K, whose vocabulary has no FIM tokens.
 *
 * The oracle for the prompt is built here from its description (llama-server's layout):
 * the FIM tokens found by scanning the vocabulary's texts, the pieces tokenized without
 * special tokens. That the server's prompt is exactly it is seen through the prefix cache:
 * a /completion of the expected ids right after reuses all its tokens but the last (a prompt
 * that differs at k reuses at most k), and gives the same tokens at temperature 0. The cut
 * of a long /infill prompt is checked the same way against the documented rule.
 *
 * Checked: graft_model_info's FIM ids against the vocabularies' texts (and the FIM pad as an
 * end of generation); suffix's file-level prompt; /infill's repository-level prompt with and
 * without input_extra, with BOS where the vocabulary adds it; code that spells a FIM token
 * stays text; streamed /infill gives the whole answer's tokens; a long prompt is cut to fit
 * (truncated: true) and a short one is not; n_indent and t_max_predict_ms end the plain
 * greedy answer where llama-server's rules say (on stories260K); refusals naming the field,
 * and a model without FIM tokens refused; /metrics counts the endpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#include "gguf/gguf.h"
#include "graft.h"
#include "serve_client.h"

#define CTX 256
#define STARCODER "vocab/ggml-vocab-starcoder.gguf"
#define DEEPSEEK "vocab/ggml-vocab-deepseek-coder.gguf"

/* A coder: its server, and its vocabulary loaded here to build the expected prompts. */
typedef struct coder {
    server srv;
    graft_model *vocab;
    int32_t pre, suf, mid, rep, sep, bos; /* -1: absent */
} coder;

static coder starcoder, deepseek, repo;
static server stories;

/* The id of the token whose text is exactly text, or -1. */
static int32_t find_text(const graft_model *m, const char *text)
{
    graft_model_info info;
    graft_model_get_info(m, &info);
    for (int32_t id = 0; id < info.n_vocab; id++)
        if (strcmp(graft_token_text(m, id), text) == 0)
            return id;
    return -1;
}

/* StarCoder's vocabulary with fim_rep_token_id and fim_sep_token_id naming <repo_name> and
 * <file_sep>, written to the scratch folder as `file` (its path into path). */
static int write_repo_vocab(const char *file, char *path, size_t cap)
{
    char from[1024];
    graft_test_model_path(from, sizeof from, STARCODER);
    graft_test_tmp_path(path, cap, file);
    graft__gguf *g = NULL;
    graft_model *m = NULL;
    if (graft__gguf_open(from, &g, NULL) != GRAFT_OK ||
        graft_model_load_vocab(from, &m, NULL) != GRAFT_OK) {
        graft__gguf_close(g);
        return -1;
    }
    int32_t rep = find_text(m, "<repo_name>"), sep = find_text(m, "<file_sep>");
    graft_model_free(m);
    graft__gguf_writer *w = graft__gguf_writer_create(3, GRAFT_GGUF_DEFAULT_ALIGNMENT);
    int rc = w != NULL && rep >= 0 && sep >= 0 ? GRAFT_OK : GRAFT_ENOMEM;
    for (uint64_t i = 0; rc == GRAFT_OK && i < graft__gguf_n_kv(g); i++)
        rc = graft__gguf_writer_copy_kv(w, graft__gguf_kv_at(g, i));
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_set_u32(w, "tokenizer.ggml.fim_rep_token_id", (uint32_t)rep);
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_set_u32(w, "tokenizer.ggml.fim_sep_token_id", (uint32_t)sep);
    if (rc == GRAFT_OK)
        rc = graft__gguf_writer_write_file(w, path, NULL);
    graft__gguf_writer_free(w);
    graft__gguf_close(g);
    return rc == GRAFT_OK ? 0 : -1;
}

static int start_coder(coder *c, const char *vocab, const char *file, const char *pre,
                       const char *suf, const char *mid, const char *rep, const char *sep)
{
    char path[1024];
    graft_test_tmp_path(path, sizeof path, file);
    graft_synth_options so = {"qwen2", "tiny", GRAFT_TYPE_F32, vocab, 5, path};
    char *err = NULL;
    if (graft_synth_write(&so, &err) != GRAFT_OK ||
        graft_model_load_vocab(vocab, &c->vocab, &err) != GRAFT_OK) {
        fprintf(stderr, "cannot make %s: %s\n", path, err ? err : "?");
        graft_free(err);
        return -1;
    }
    c->pre = find_text(c->vocab, pre);
    c->suf = find_text(c->vocab, suf);
    c->mid = find_text(c->vocab, mid);
    c->rep = rep ? find_text(c->vocab, rep) : -1;
    c->sep = sep ? find_text(c->vocab, sep) : -1;
    graft_model_info info;
    graft_model_get_info(c->vocab, &info);
    c->bos = info.add_bos ? info.bos : -1;
    const char *args[] = {"-m", path, "--ctx", "256", "--threads", "1", NULL};
    c->srv = graft_test_start_server(args);
    return c->pre >= 0 && c->suf >= 0 && c->mid >= 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ctx", "256", "--threads", "1", NULL};
    stories = graft_test_serve_begin(args);
    char starcoder_vocab[1024], deepseek_vocab[1024], repo_vocab[1024];
    graft_test_model_path(starcoder_vocab, sizeof starcoder_vocab, STARCODER);
    graft_test_model_path(deepseek_vocab, sizeof deepseek_vocab, DEEPSEEK);
    if (write_repo_vocab("infill-repo-vocab.gguf", repo_vocab, sizeof repo_vocab) != 0 ||
        start_coder(&starcoder, starcoder_vocab, "infill-starcoder.gguf", "<fim_prefix>",
                    "<fim_suffix>", "<fim_middle>", NULL, NULL) != 0 ||
        start_coder(&deepseek, deepseek_vocab, "infill-deepseek.gguf", "<｜fim▁begin｜>",
                    "<｜fim▁hole｜>", "<｜fim▁end｜>", NULL, NULL) != 0 ||
        start_coder(&repo, repo_vocab, "infill-repo.gguf", "<fim_prefix>", "<fim_suffix>",
                    "<fim_middle>", "<repo_name>", "<file_sep>") != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = graft_test_stop_server(&starcoder.srv) | graft_test_stop_server(&deepseek.srv) |
             graft_test_stop_server(&repo.srv);
    graft_model_free(starcoder.vocab);
    graft_model_free(deepseek.vocab);
    graft_model_free(repo.vocab);
    return graft_test_serve_end(&stories) | rc;
}

/* ---- the expected prompt ------------------------------------------------------------------ */

typedef struct ids {
    int32_t v[4096];
    size_t n;
} ids;

static void add(ids *l, int32_t id)
{
    assert_true(l->n < 4096);
    l->v[l->n++] = id;
}

/* The tokens of text, no BOS, special tokens' texts left as text. */
static ids text_ids(const coder *c, const char *text)
{
    ids out = {.n = 0};
    int32_t *t = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(c->vocab, text, strlen(text), 0, 0, &t, &n), GRAFT_OK);
    for (size_t i = 0; i < n; i++)
        add(&out, t[i]);
    graft_free(t);
    return out;
}

static void add_ids(ids *l, const ids *from, size_t start, size_t count)
{
    for (size_t i = 0; i < count; i++)
        add(l, from->v[start + i]);
}

static void add_text(ids *l, const coder *c, const char *text)
{
    ids t = text_ids(c, text);
    add_ids(l, &t, 0, t.n);
}

/* llama-server's repository-level preamble for files [filename, text, ...] (n_files). */
static ids files_ids(const coder *c, const char *const *files, size_t n_files)
{
    ids out = {.n = 0};
    if (c->rep >= 0) {
        add(&out, c->rep);
        add_text(&out, c, "myproject\n");
    }
    for (size_t i = 0; i < n_files; i++) {
        if (c->sep >= 0) {
            char line[256];
            snprintf(line, sizeof line, "%s\n", files[2 * i]);
            add(&out, c->sep);
            add_text(&out, c, line);
        } else {
            add_text(&out, c, "\n\n--- snippet ---\n\n");
        }
        add_text(&out, c, files[2 * i + 1]);
    }
    if (c->sep >= 0) {
        add(&out, c->sep);
        add_text(&out, c, "filename\n");
    }
    return out;
}

/* [files' last take_files] [BOS] <pre> prefix's last take_prefix, prompt <suf> suffix's first
 * take_suffix <mid>. */
static ids fim_ids(const coder *c, const ids *files, size_t take_files, const ids *prefix,
                   size_t take_prefix, const ids *prompt, const ids *suffix, size_t take_suffix)
{
    ids out = {.n = 0};
    add_ids(&out, files, files->n - take_files, take_files);
    if (c->bos >= 0)
        add(&out, c->bos);
    add(&out, c->pre);
    add_ids(&out, prefix, prefix->n - take_prefix, take_prefix);
    add_ids(&out, prompt, 0, prompt->n);
    add(&out, c->suf);
    add_ids(&out, suffix, 0, take_suffix);
    add(&out, c->mid);
    return out;
}

/* ---- requests ---------------------------------------------------------------------------- */

static json_t *ids_json(const ids *l)
{
    json_t *a = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(a, json_integer(l->v[i]));
    return a;
}

/* That the prompt just computed on c's server was exactly `expected`, and that its answer
 * (tokens, at temperature 0) is expected's: a /completion of expected's ids reuses all its
 * tokens but the last from the prefix cache and gives the same tokens. */
static void expect_prompt(const coder *c, const ids *expected, json_t *answer_tokens)
{
    json_t *j = graft_test_post_json(&c->srv, "/completion",
                     json_pack("{s:o, s:i, s:f, s:b}", "prompt", ids_json(expected), "n_predict",
                               (int)json_array_size(answer_tokens), "temperature", 0.0,
                               "return_tokens", 1),
                     200);
    json_int_t reused = json_integer_value(json_object_get(j, "tokens_cached"));
    if (reused != (json_int_t)expected->n - 1)
        fail_msg("the prompt of %zu tokens was not the server's: %lld of its tokens reused",
                 expected->n, (long long)reused);
    if (!json_equal(json_object_get(j, "tokens"), answer_tokens))
        fail_msg("the answer %s differs from the expected prompt's %s",
                 graft_test_shown(answer_tokens), graft_test_shown(json_object_get(j, "tokens")));
    json_decref(j);
}

/* An /infill request on c at temperature 0 with its tokens returned. */
static json_t *infill(const coder *c, const char *prefix, const char *suffix, const char *prompt,
                      json_t *extra, int n_predict)
{
    json_t *body = json_pack("{s:s, s:s, s:i, s:f, s:b}", "input_prefix", prefix, "input_suffix",
                             suffix, "n_predict", n_predict, "temperature", 0.0, "return_tokens",
                             1);
    if (prompt != NULL)
        json_object_set_new(body, "prompt", json_string(prompt));
    if (extra != NULL)
        json_object_set_new(body, "input_extra", extra);
    return graft_test_post_json(&c->srv, "/infill", body, 200);
}

static json_t *extra_json(const char *const *files, size_t n_files)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n_files; i++)
        json_array_append_new(a, json_pack("{s:s, s:s}", "filename", files[2 * i], "text",
                                           files[2 * i + 1]));
    return a;
}

/* ---- the tests ---------------------------------------------------------------------------- */

/* graft_model_info's FIM ids are the tokens the vocabularies spell them with; the pad ends a
 * generation; a vocabulary without them gives -1. */
static void test_fim_tokens_found(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(starcoder.vocab, &info);
    assert_int_equal(info.fim_pre, starcoder.pre);
    assert_int_equal(info.fim_suf, starcoder.suf);
    assert_int_equal(info.fim_mid, starcoder.mid);
    assert_int_equal(info.fim_rep, -1);
    assert_int_equal(info.fim_sep, -1);
    assert_int_equal(info.fim_pad, find_text(starcoder.vocab, "<fim_pad>"));
    assert_true(graft_token_is_eog(starcoder.vocab, info.fim_pad));
    assert_false(graft_token_is_eog(starcoder.vocab, info.fim_mid));
    graft_model_get_info(deepseek.vocab, &info);
    assert_int_equal(info.fim_pre, deepseek.pre);
    assert_int_equal(info.fim_suf, deepseek.suf);
    assert_int_equal(info.fim_mid, deepseek.mid);
    assert_true(deepseek.bos >= 0);
    graft_model_get_info(repo.vocab, &info);
    assert_int_equal(info.fim_pre, repo.pre);
    assert_int_equal(info.fim_rep, repo.rep);
    assert_int_equal(info.fim_sep, repo.sep);
    assert_true(repo.rep >= 0 && repo.sep >= 0);
    assert_true(graft_token_is_eog(repo.vocab, repo.rep));
    assert_true(graft_token_is_eog(repo.vocab, repo.sep));
    graft_model *m = NULL;
    char path[1024];
    graft_test_model_path(path, sizeof path, GRAFT_TEST_STORIES);
    assert_int_equal(graft_model_load_vocab(path, &m, NULL), GRAFT_OK);
    graft_model_get_info(m, &info);
    assert_int_equal(info.fim_pre, -1);
    assert_int_equal(info.fim_suf, -1);
    assert_int_equal(info.fim_mid, -1);
    graft_model_free(m);
}

/* /v1/completions with suffix: <pre> prompt <suf> suffix <mid>, BOS first where the
 * vocabulary adds it; the answer is the completion of those ids. */
static void test_suffix(void **state)
{
    (void)state;
    const coder *cs[] = {&starcoder, &deepseek};
    for (size_t k = 0; k < 2; k++) {
        const coder *c = cs[k];
        const char *prefix = "def area(width, height):\n    return ";
        const char *suffix = "\n\nprint(area(3, 4))\n";
        json_t *j = graft_test_post_json(&c->srv, "/v1/completions",
                         json_pack("{s:s, s:s, s:i, s:f, s:b}", "prompt", prefix, "suffix",
                                   suffix, "max_tokens", 8, "temperature", 0.0,
                                   "return_tokens", 1),
                         200);
        ids p = text_ids(c, prefix), s = text_ids(c, suffix), none = {.n = 0};
        ids expected = fim_ids(c, &none, 0, &p, p.n, &none, &s, s.n);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                            "prompt_tokens")),
                         expected.n);
        json_t *tokens = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                         "tokens");
        expect_prompt(c, &expected, tokens);
        json_decref(j);
    }
}

/* /infill: the project's files first, then the file-level prompt with the typed prompt after
 * the prefix; without input_extra the preamble is the project alone. */
static void test_infill_layout(void **state)
{
    (void)state;
    static const char *const files[] = {"src/shapes.py", "class Square:\n    side = 2\n",
                                        "README.md", "Shapes and their areas.\n"};
    const coder *cs[] = {&starcoder, &deepseek, &repo};
    for (size_t k = 0; k < 3; k++) {
        const coder *c = cs[k];
        for (size_t n_files = 0; n_files <= 2; n_files += 2) {
            const char *prefix = "import shapes\n\ndef total(items):\n    ";
            const char *prompt = "s = sum(";
            const char *suffix = ")\n    return s\n";
            json_t *j = infill(c, prefix, suffix, prompt, extra_json(files, n_files), 8);
            ids f = files_ids(c, files, n_files), p = text_ids(c, prefix),
                q = text_ids(c, prompt), s = text_ids(c, suffix);
            ids expected = fim_ids(c, &f, f.n, &p, p.n, &q, &s, s.n);
            assert_int_equal(json_integer_value(json_object_get(j, "tokens_evaluated")),
                             expected.n);
            assert_false(json_is_true(json_object_get(j, "truncated")));
            expect_prompt(c, &expected, json_object_get(j, "tokens"));
            json_decref(j);
        }
    }
}

/* Code that spells a FIM token is text, in the prefix, the suffix and a file. */
static void test_special_text_is_code(void **state)
{
    (void)state;
    const coder *c = &starcoder;
    static const char *const files[] = {"t.py", "x = '<fim_middle>'\n"};
    const char *prefix = "tag = '<fim_suffix>'\n";
    const char *suffix = "# <fim_prefix> ends here\n";
    json_t *j = infill(c, prefix, suffix, NULL, extra_json(files, 1), 4);
    ids f = files_ids(c, files, 1), p = text_ids(c, prefix), s = text_ids(c, suffix),
        none = {.n = 0};
    for (size_t i = 0; i < p.n; i++)
        assert_int_not_equal(p.v[i], c->suf);
    ids expected = fim_ids(c, &f, f.n, &p, p.n, &none, &s, s.n);
    expect_prompt(c, &expected, json_object_get(j, "tokens"));
    json_decref(j);
}

/* Streamed, /infill gives the whole answer's content and tokens (the random models' answers
 * are runs of one control token, so this checks the token ids more than the text). */
static void test_infill_streamed(void **state)
{
    (void)state;
    const coder *c = &deepseek;
    json_t *whole = infill(c, "int main(void)\n{\n    ", "\n}\n", "return ", NULL, 12);
    json_t *body = json_pack("{s:s, s:s, s:s, s:i, s:f, s:b, s:b}", "input_prefix",
                             "int main(void)\n{\n    ", "input_suffix", "\n}\n", "prompt",
                             "return ", "n_predict", 12, "temperature", 0.0, "return_tokens", 1,
                             "stream", 1);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    response r = graft_test_request(&c->srv, "POST", "/infill", text);
    free(text);
    assert_int_equal(r.status, 200);
    json_t *events = graft_test_data_events(&r), *tokens = json_array(), *chunk;
    char *content = calloc(1, r.len + 1);
    bool stopped = false;
    size_t i;
    json_array_foreach(events, i, chunk) {
        strcat(content, json_string_value(json_object_get(chunk, "content")));
        json_array_extend(tokens, json_object_get(chunk, "tokens"));
        stopped = json_is_true(json_object_get(chunk, "stop"));
    }
    json_decref(events);
    assert_int_equal(json_array_size(tokens), 12);
    assert_true(stopped);
    assert_string_equal(content, json_string_value(json_object_get(whole, "content")));
    if (!json_equal(tokens, json_object_get(whole, "tokens")))
        fail_msg("streamed %s, whole %s", graft_test_shown(tokens),
                 graft_test_shown(json_object_get(whole, "tokens")));
    free(content);
    json_decref(tokens);
    json_decref(whole);
    graft_test_response_free(&r);
}

/* A prompt over the context less n_predict is cut: the files from their start first, then
 * the prefix from its start and the suffix from its end, the suffix keeping a quarter of
 * what is left when both are long; the typed prompt is whole. */
static void test_infill_cut(void **state)
{
    (void)state;
    const coder *c = &repo;
    char prefix[4096] = "", suffix[4096] = "", file_text[4096] = "";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "value_%d = compute(%d)\n", i, i * 7);
        strcat(prefix, line);
        snprintf(line, sizeof line, "check(value_%d)\n", i);
        strcat(suffix, line);
        snprintf(line, sizeof line, "def helper_%d(): pass\n", i);
        strcat(file_text, line);
    }
    const char *const files[] = {"helpers.py", file_text};
    const int n_predict = 16;
    const char *prompt = "total = ";
    ids f = files_ids(c, files, 1), p = text_ids(c, prefix), q = text_ids(c, prompt),
        s = text_ids(c, suffix);
    size_t fixed = q.n + 3 + (c->bos >= 0), budget = CTX - n_predict;
    assert_true(p.n + s.n + fixed > budget); /* the files alone go, and more */
    size_t room = budget - fixed;
    size_t take_s_min = s.n < room / 4 ? s.n : room / 4;
    size_t take_p = p.n < room - take_s_min ? p.n : room - take_s_min;
    size_t take_s = s.n < room - take_p ? s.n : room - take_p;
    ids expected = fim_ids(c, &f, 0, &p, take_p, &q, &s, take_s);
    json_t *j = infill(c, prefix, suffix, prompt, extra_json(files, 1), n_predict);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_evaluated")), expected.n);
    assert_int_equal(expected.n, budget);
    expect_prompt(c, &expected, json_object_get(j, "tokens"));
    json_decref(j);

    /* only the files' start goes when prefix and suffix fit */
    char short_prefix[256], short_suffix[256];
    snprintf(short_prefix, sizeof short_prefix, "%.120s", prefix);
    snprintf(short_suffix, sizeof short_suffix, "%.60s", suffix);
    p = text_ids(c, short_prefix);
    s = text_ids(c, short_suffix);
    assert_true(f.n + p.n + s.n + fixed > budget && p.n + s.n + fixed < budget);
    expected = fim_ids(c, &f, budget - fixed - p.n - s.n, &p, p.n, &q, &s, s.n);
    j = infill(c, short_prefix, short_suffix, prompt, extra_json(files, 1), n_predict);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    expect_prompt(c, &expected, json_object_get(j, "tokens"));
    json_decref(j);
}

/* text cut as n_indent cuts it: at the first character other than a space or a tab of the
 * first line after the first that is indented by fewer than n_indent; NULL: not cut. */
static char *dedent_cut(const char *text, int n_indent)
{
    const char *line = strchr(text, '\n');
    while (line != NULL) {
        line++;
        size_t indent = strspn(line, " \t");
        if (line[indent] == '\0')
            return NULL;
        if ((int)indent < n_indent)
            return strndup(text, (size_t)(line + indent - text));
        line = strchr(line + indent, '\n');
    }
    return NULL;
}

/* n_indent (llama-server's, for code completion): the answer is the plain greedy answer up
 * to its first line after the first indented less, whole and streamed, on /v1/completions
 * and /completion (stop_type "limit"); the first line is never judged. */
static void test_n_indent(void **state)
{
    (void)state;
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 120, "
                       "\"temperature\": 0}";
    response r = graft_test_request(&stories, "POST", "/v1/completions", body);
    char *plain = graft_test_completion_text(&r);
    graft_test_response_free(&r);
    for (int n_indent = 1; n_indent <= 4; n_indent += 3) {
        char *expected = dedent_cut(plain, n_indent);
        assert_non_null(expected); /* stories260K writes lines without indentation */
        assert_true(strlen(expected) < strlen(plain));
        json_t *j = graft_test_post_json(&stories, "/v1/completions",
                         json_pack("{s:s, s:i, s:f, s:i}", "prompt", "Once upon a time",
                                   "max_tokens", 120, "temperature", 0.0, "n_indent", n_indent),
                         200);
        json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(choice, "text")), expected);
        assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "stop");
        json_decref(j);
        j = graft_test_post_json(&stories, "/completion",
                 json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", "Once upon a time",
                           "n_predict", 120, "temperature", 0.0, "n_indent", n_indent,
                           "stream", 0),
                 200);
        assert_string_equal(json_string_value(json_object_get(j, "content")), expected);
        assert_string_equal(json_string_value(json_object_get(j, "stop_type")), "limit");
        json_decref(j);
        char streamed_body[256];
        snprintf(streamed_body, sizeof streamed_body,
                 "{\"prompt\": \"Once upon a time\", \"max_tokens\": 120, \"temperature\": 0, "
                 "\"n_indent\": %d, \"stream\": true}", n_indent);
        r = graft_test_request(&stories, "POST", "/v1/completions", streamed_body);
        json_t *events = graft_test_data_events(&r), *chunk;
        char *streamed = calloc(1, r.len + 1);
        size_t i;
        json_array_foreach(events, i, chunk) {
            json_t *c = json_array_get(json_object_get(chunk, "choices"), 0);
            strcat(streamed, json_string_value(json_object_get(c, "text")));
            if (i + 1 == json_array_size(events))
                assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                                    "stop");
        }
        assert_string_equal(streamed, expected);
        free(streamed);
        json_decref(events);
        graft_test_response_free(&r);
        free(expected);
    }
    free(plain);
}

/* t_max_predict_ms (llama-server's): with a limit that passes before the first line break
 * (1 ms: stories260K writes dozens of tokens first, taking a few ms), the answer is the plain
 * greedy answer up to a token with a line break (the first one the server sees past the
 * limit: tokens taken together are timed together); with one that does not pass, the plain
 * answer. */
static void test_t_max_predict_ms(void **state)
{
    (void)state;
    const char *plain_body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 80, "
                             "\"temperature\": 0, \"return_tokens\": true}";
    response r = graft_test_request(&stories, "POST", "/v1/completions", plain_body);
    json_t *whole = graft_test_json_of(&r);
    json_t *plain = json_array_get(json_object_get(whole, "choices"), 0);
    graft_test_response_free(&r);
    const char *plain_text = json_string_value(json_object_get(plain, "text"));
    size_t n_plain = json_array_size(json_object_get(plain, "tokens"));
    assert_non_null(strchr(plain_text, '\n'));
    int32_t limits[] = {1, 600000};
    for (size_t k = 0; k < 2; k++) {
        json_t *j = NULL;
        size_t n = 0;
        /* tokens the server takes in one go are timed together: when all of them come at
         * once (the HTTP thread was late), the limit cannot pass between them; a few tries
         * see it pass */
        for (int attempt = 0; attempt < 5 && (j == NULL || (k == 0 && n == n_plain));
             attempt++) {
            json_decref(j);
            j = graft_test_post_json(&stories, "/completion",
                                     json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt",
                                               "Once upon a time", "n_predict", 80,
                                               "temperature", 0.0, "t_max_predict_ms",
                                               limits[k], "return_tokens", 1),
                                     200);
            n = json_array_size(json_object_get(j, "tokens"));
        }
        const char *text = json_string_value(json_object_get(j, "content"));
        if (k == 0) {
            /* a prefix of the plain answer whose last token breaks a line */
            assert_true(n < n_plain);
            assert_memory_equal(text, plain_text, strlen(text));
            char body[256];
            snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time\", \"max_tokens\": %zu, "
                     "\"temperature\": 0}", n - 1);
            response shorter = graft_test_request(&stories, "POST", "/v1/completions", body);
            char *before = graft_test_completion_text(&shorter);
            assert_true(strlen(before) < strlen(text));
            assert_non_null(strchr(text + strlen(before), '\n'));
            free(before);
            graft_test_response_free(&shorter);
            assert_string_equal(json_string_value(json_object_get(j, "stop_type")), "limit");
        } else {
            assert_int_equal(n, n_plain);
            assert_string_equal(text, plain_text);
        }
        json_decref(j);
    }
    json_decref(whole);
}

static void expect_refusal(const server *s, const char *path, const char *body,
                           const char *param, const char *words)
{
    response r = graft_test_request(s, "POST", path, body);
    char *message = graft_test_expect_error(&r, 400, param);
    if (strstr(message, words) == NULL)
        fail_msg("%s %s: '%s' does not say '%s'", path, body, message, words);
    free(message);
    graft_test_response_free(&r);
}

/* Bad fields are refused naming them, a model without FIM tokens is refused, and the
 * server goes on. */
static void test_refusals(void **state)
{
    (void)state;
    const server *s = &starcoder.srv;
    expect_refusal(s, "/infill", "{\"input_prefix\": 1}", "input_prefix", "string");
    expect_refusal(s, "/infill", "{\"input_suffix\": [\"a\"]}", "input_suffix", "string");
    expect_refusal(s, "/infill", "{\"prompt\": [1, 2]}", "prompt", "string");
    expect_refusal(s, "/infill", "{\"input_extra\": {}}", "input_extra", "array");
    expect_refusal(s, "/infill", "{\"input_extra\": [{\"text\": \"a\"}, {\"filename\": \"b\"}]}",
                   "input_extra[1]", "'text'");
    expect_refusal(s, "/infill", "{\"input_extra\": [{\"text\": \"a\", \"filename\": 3}]}",
                   "input_extra[0].filename", "string");
    expect_refusal(s, "/infill", "{\"input_prefix\": \"a\", \"n\": 2}", "n", "/infill");
    expect_refusal(s, "/infill", "{\"n_indent\": -1}", "n_indent", "outside");
    expect_refusal(&stories, "/v1/chat/completions",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                   "\"n_indent\": 2}", "n_indent", "code completion");
    expect_refusal(&stories, "/v1/chat/completions",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                   "\"t_max_predict_ms\": 500}", "t_max_predict_ms", "code completion");
    expect_refusal(s, "/v1/completions", "{\"prompt\": [1, 2], \"suffix\": \"x\"}", "suffix",
                   "token ids");
    expect_refusal(s, "/v1/completions", "{\"prompt\": \"a\", \"suffix\": 7}", "suffix",
                   "string");
    expect_refusal(s, "/v1/completions", "{\"prompt\": \"a\", \"suffix\": \"b\", \"echo\": true}",
                   "echo", "suffix");
    expect_refusal(&stories, "/infill", "{\"input_prefix\": \"Once\"}", "input_prefix",
                   "fill-in-the-middle");
    expect_refusal(&stories, "/v1/completions", "{\"prompt\": \"Once\", \"suffix\": \"end\"}",
                   "suffix", "fill-in-the-middle");
    /* an empty suffix is OpenAI's neutral value: a plain completion */
    json_t *j = graft_test_post_json(&stories, "/v1/completions",
                     json_pack("{s:s, s:s, s:i}", "prompt", "Once", "suffix", "", "max_tokens", 2),
                     200);
    json_decref(j);
    j = infill(&starcoder, "a = ", "\n", NULL, NULL, 2);
    json_decref(j);
    /* a body as llama.vscode sends it: the fields graft has no use for are ignored */
    j = graft_test_post_json(&repo.srv, "/infill",
             graft_test_parse("{\"input_prefix\": \"def f():\\n\", \"input_suffix\": \"\\n\", "
                              "\"input_extra\": [{\"filename\": \"a.py\", "
                              "\"text\": \"x = 1\\n\"}], "
                              "\"prompt\": \"    return \", \"n_predict\": 8, \"top_k\": 40, "
                              "\"top_p\": 0.99, \"stream\": false, \"n_indent\": 4, "
                              "\"samplers\": [\"top_k\", \"top_p\", \"infill\"], "
                              "\"cache_prompt\": true, \"t_max_prompt_ms\": 500, "
                              "\"t_max_predict_ms\": 1000, \"response_fields\": [\"content\"]}"),
             200);
    assert_true(json_is_string(json_object_get(j, "content")));
    json_decref(j);
}

/* graft_requests_total counts POST /infill under endpoint="infill", answered and refused;
 * /v1/completions with a suffix stays under "completions". */
static void test_metrics(void **state)
{
    (void)state;
    const server *s = &starcoder.srv;
    const char *ok = "graft_requests_total{endpoint=\"infill\",status=\"2xx\"}";
    const char *refused = "graft_requests_total{endpoint=\"infill\",status=\"4xx\"}";
    const char *text = "graft_requests_total{endpoint=\"completions\",status=\"2xx\"}";
    double ok_before = graft_test_metric(s, ok), refused_before = graft_test_metric(s, refused);
    double text_before = graft_test_metric(s, text);
    assert_true(ok_before >= 0 && refused_before >= 0 && text_before >= 0);
    json_decref(infill(&starcoder, "x = ", "\n", NULL, NULL, 2));
    expect_refusal(s, "/infill", "{\"input_prefix\": 1}", "input_prefix", "string");
    json_decref(graft_test_post_json(s, "/v1/completions",
                     json_pack("{s:s, s:s, s:i}", "prompt", "x = ", "suffix", "\n", "max_tokens",
                               2),
                     200));
    /* a request is counted as it ends, which its client may see first */
    for (int i = 0; i < 100 && graft_test_metric(s, text) < text_before + 1; i++)
        usleep(10000);
    assert_int_equal(graft_test_metric(s, ok), ok_before + 1);
    assert_int_equal(graft_test_metric(s, refused), refused_before + 1);
    assert_int_equal(graft_test_metric(s, text), text_before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fim_tokens_found), cmocka_unit_test(test_suffix),
        cmocka_unit_test(test_infill_layout),    cmocka_unit_test(test_special_text_is_code),
        cmocka_unit_test(test_infill_streamed),  cmocka_unit_test(test_infill_cut),
        cmocka_unit_test(test_n_indent),         cmocka_unit_test(test_t_max_predict_ms),
        cmocka_unit_test(test_refusals),         cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
