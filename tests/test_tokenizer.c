/*
 * test_tokenizer.c: the tokenizers against llama.cpp's test vectors, and their edges.
 *
 * - Every case of every vocab/X.gguf.inp/.out pair in $GRAFT_MODELS_DIR (spm, bpe with each
 *   pre-tokenizer, bert) and of stories260K.tokenizer-tests.inp/.out, tokenized with
 *   add_special and parse_special off, as llama.cpp's test-tokenizer-0 does. One line per
 *   vocab reports passed/total; every mismatch is printed.
 * - Special tokens with parse_special on and off, add_special (BOS / EOS / CLS+SEP), the
 *   decode round trip through the streaming detokenizer, a character split across byte
 *   tokens, invalid bytes, metadata errors with their messages, and allocation-failure
 *   injection over graft__vocab_load and graft__tokenize.
 * The files are found in the shared models folder (tests/support/fixtures.h); a missing
 * one fails the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define SEPARATOR "\n__ggml_vocab_test__\n"

/* ---- helpers ----------------------------------------------------------------------- */

/* Path of a shared model file (fixtures.h), valid until the next call. */
static const char *model_path(const char *rel)
{
    static char path[4096];
    return graft_test_model_path(path, sizeof path, rel);
}

typedef struct loaded {
    graft__gguf *g;
    graft__vocab *v;
} loaded;

static loaded load_vocab(const char *rel)
{
    loaded l = {0};
    const char *path = model_path(rel);
    char *err = NULL;
    if (graft__gguf_open(path, &l.g, &err) != GRAFT_OK)
        fail_msg("%s: %s", path, err ? err : "(no message)");
    if (graft__vocab_load(l.g, &l.v, &err) != GRAFT_OK)
        fail_msg("%s: %s", path, err ? err : "(no message)");
    assert_null(err);
    return l;
}

static void unload(loaded l)
{
    graft__vocab_free(l.v);
    graft__gguf_close(l.g);
}

/* Tokenizes and fails on any error. */
static size_t tok(const graft__vocab *v, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids)
{
    size_t n = 0;
    assert_int_equal(graft__tokenize(v, text, len, add_special, parse_special, ids, &n), GRAFT_OK);
    return n;
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    printf("    %s:", label);
    for (size_t i = 0; i < n; i++)
        printf(" %d", (int)ids[i]);
    printf("\n");
}

/* ---- llama.cpp's test vectors -------------------------------------------------------- */

typedef struct vectors {
    char *inp_data, *out_data;
    char **inputs; /* pointers into inp_data (NUL-terminated in place) */
    size_t *input_lens;
    char **outputs; /* lines of out_data */
    size_t n;
} vectors;

/* Inputs are separated by SEPARATOR; text after the last one is a case too (if any). */
static size_t split_inputs(char *data, size_t len, char **inputs, size_t *lens, size_t max)
{
    size_t n = 0, seplen = strlen(SEPARATOR);
    char *p = data, *end = data + len;
    while (p < end && n < max) {
        char *sep = strstr(p, SEPARATOR);
        char *stop = sep ? sep : end;
        inputs[n] = p;
        lens[n++] = (size_t)(stop - p);
        *stop = '\0';
        if (sep == NULL)
            break;
        p = sep + seplen;
    }
    return n;
}

/* One line per case; a final newline ends the last line rather than starting a case. */
static size_t split_lines(char *data, size_t len, char **lines, size_t max)
{
    size_t n = 0;
    char *p = data, *end = data + len;
    while (p < end && n < max) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        lines[n++] = p;
        if (nl == NULL)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    return n;
}

static vectors read_vectors(const char *inp_rel, const char *out_rel)
{
    vectors t = {0};
    size_t inp_len, out_len;
    t.inp_data = graft__read_file(model_path(inp_rel), &inp_len);
    t.out_data = graft__read_file(model_path(out_rel), &out_len);
    assert_non_null(t.inp_data);
    assert_non_null(t.out_data);
    size_t max = inp_len + 2;
    t.inputs = calloc(max, sizeof *t.inputs);
    t.input_lens = calloc(max, sizeof *t.input_lens);
    t.outputs = calloc(max, sizeof *t.outputs);
    t.n = split_inputs(t.inp_data, inp_len, t.inputs, t.input_lens, max);
    size_t n_out = split_lines(t.out_data, out_len, t.outputs, max);
    if (n_out != t.n)
        fail_msg("%s has %zu cases but %s has %zu lines", inp_rel, t.n, out_rel, n_out);
    return t;
}

static void free_vectors(vectors t)
{
    free(t.inp_data);
    free(t.out_data);
    free(t.inputs);
    free(t.input_lens);
    free(t.outputs);
}

static size_t parse_ids(const char *line, int32_t *ids, size_t max)
{
    size_t n = 0;
    for (char *end; n < max; line = end) {
        long id = strtol(line, &end, 10);
        if (end == line)
            break;
        ids[n++] = (int32_t)id;
    }
    return n;
}

/* Runs every case of one pair; prints "name: passed/total" and each mismatch. */
static void run_vectors(const char *gguf_rel, const char *inp_rel, const char *out_rel)
{
    loaded l = load_vocab(gguf_rel);
    vectors t = read_vectors(inp_rel, out_rel);
    size_t passed = 0;
    int32_t expected[4096];
    for (size_t i = 0; i < t.n; i++) {
        size_t n_exp = parse_ids(t.outputs[i], expected, 4096);
        int32_t *got;
        size_t n = tok(l.v, t.inputs[i], t.input_lens[i], false, false, &got);
        if (ids_equal(got, n, expected, n_exp)) {
            passed++;
        } else {
            printf("  case %zu '%s':\n", i, t.inputs[i]);
            print_ids("expected", expected, n_exp);
            print_ids("got     ", got, n);
        }
        graft__free(got);
    }
    printf("%s: %zu/%zu passed\n", gguf_rel, passed, t.n);
    assert_int_equal(passed, t.n);
    free_vectors(t);
    unload(l);
}

#define VOCAB_TEST(fn, name)                                                                  \
    static void fn(void **state)                                                             \
    {                                                                                         \
        (void)state;                                                                          \
        run_vectors("vocab/ggml-vocab-" name ".gguf", "vocab/ggml-vocab-" name ".gguf.inp", \
                    "vocab/ggml-vocab-" name ".gguf.out");                                   \
    }

VOCAB_TEST(test_vectors_llama_spm, "llama-spm")
VOCAB_TEST(test_vectors_phi3, "phi-3")
VOCAB_TEST(test_vectors_gpt2, "gpt-2")
VOCAB_TEST(test_vectors_bert_bge, "bert-bge")
VOCAB_TEST(test_vectors_deepseek_coder, "deepseek-coder")
VOCAB_TEST(test_vectors_deepseek_llm, "deepseek-llm")
VOCAB_TEST(test_vectors_falcon, "falcon")
VOCAB_TEST(test_vectors_starcoder, "starcoder")
VOCAB_TEST(test_vectors_mpt, "mpt")
VOCAB_TEST(test_vectors_refact, "refact")

static void test_vectors_stories260k(void **state)
{
    (void)state;
    run_vectors("stories260K.gguf", "stories260K.tokenizer-tests.inp",
                "stories260K.tokenizer-tests.out");
}

/* ---- pre-tokenizers without a vocabulary fixture ------------------------------------ */

/* Splits text with pre type `name` and compares the words with the NULL-terminated list. */
static void expect_words(const char *name, const char *text, const char *const *words)
{
    graft__pretok *p;
    assert_int_equal(graft__pretok_create(name, &p, NULL), GRAFT_OK);
    graft__span *spans;
    size_t n;
    assert_int_equal(graft__pretok_split(p, text, strlen(text), &spans, &n), GRAFT_OK);
    size_t i = 0;
    for (; i < n && words[i]; i++)
        if (strlen(words[i]) != spans[i].len || memcmp(words[i], text + spans[i].off, spans[i].len))
            fail_msg("%s: word %zu is '%.*s', expected '%s'", name, i, (int)spans[i].len,
                     text + spans[i].off, words[i]);
    if (i != n || words[i])
        fail_msg("%s: %zu words, expected a different count", name, n);
    graft__free(spans);
    graft__pretok_free(p);
}

static void test_pretokenizers(void **state)
{
    (void)state;
    const char *text = "Hello world's 12345 !!\n\n  x";
    expect_words("llama-bpe", text,
                 (const char *const[]){"Hello", " world", "'s", " ", "123", "45", " !!\n\n", " ",
                                       " x", NULL});
    expect_words("qwen2", text,
                 (const char *const[]){"Hello", " world", "'s", " ", "1", "2", "3", "4", "5",
                                       " !!\n\n", " ", " x", NULL});
    expect_words("gpt-2", text,
                 (const char *const[]){"Hello", " world", "'s", " 12345", " !!", "\n\n ", " x",
                                       NULL});
    /* contractions: any case for llama3, lower case only for GPT-2 */
    expect_words("llama3", "I'VE", (const char *const[]){"I", "'VE", NULL});
    expect_words("gpt-2", "I'VE", (const char *const[]){"I", "'", "VE", NULL});
    /* invalid UTF-8 never matches and stays in the stretches between words */
    expect_words("gpt-2", "a\xff\xfe b", (const char *const[]){"a", "\xff\xfe", " b", NULL});
    graft__pretok *p;
    char *err = NULL;
    assert_int_equal(graft__pretok_create("tekken", &p, &err), GRAFT_EUNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(err, "'tekken'"));
    graft__free(err);
}

/* ---- metadata ---------------------------------------------------------------------- */

static void test_metadata(void **state)
{
    (void)state;
    loaded l = load_vocab("stories260K.gguf");
    assert_int_equal(graft__vocab_kind_of(l.v), GRAFT_VOCAB_SPM);
    assert_string_equal(graft__vocab_pre_name(l.v), "default");
    assert_int_equal(graft__vocab_size(l.v), 512);
    assert_int_equal(graft__vocab_bos(l.v), 1);
    assert_int_equal(graft__vocab_eos(l.v), 2);
    assert_true(graft__vocab_add_bos(l.v));
    assert_false(graft__vocab_add_eos(l.v));
    assert_true(graft__vocab_is_eog(l.v, 2));
    assert_false(graft__vocab_is_eog(l.v, 1));
    assert_false(graft__vocab_is_eog(l.v, 512));
    assert_string_equal(graft__vocab_text(l.v, 1), "<s>");
    assert_null(graft__vocab_text(l.v, 512));
    assert_null(graft__vocab_text(l.v, -1));
    unload(l);

    l = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    assert_int_equal(graft__vocab_kind_of(l.v), GRAFT_VOCAB_BPE);
    assert_string_equal(graft__vocab_pre_name(l.v), "gpt-2");
    assert_false(graft__vocab_add_bos(l.v));
    assert_true(graft__vocab_is_eog(l.v, 50256));
    unload(l);

    l = load_vocab("vocab/ggml-vocab-phi-3.gguf");
    int32_t end = graft__vocab_find(l.v, "<|end|>", 7);
    assert_true(end > 0);
    assert_true(graft__vocab_is_eog(l.v, end)); /* found by its text */
    assert_true(graft__vocab_is_eog(l.v, graft__vocab_eos(l.v)));
    unload(l);

    l = load_vocab("vocab/ggml-vocab-bert-bge.gguf");
    assert_int_equal(graft__vocab_kind_of(l.v), GRAFT_VOCAB_WPM);
    assert_int_equal(graft__vocab_bos(l.v), 101);
    unload(l);
}

/* ---- special tokens and add_special ------------------------------------------------ */

static bool contains(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static void test_special_parsing(void **state)
{
    (void)state;
    loaded l = load_vocab("stories260K.gguf");
    const char *text = "<s> hi</s>";
    int32_t *ids;
    size_t n = tok(l.v, text, strlen(text), false, true, &ids);
    assert_true(n >= 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 2);
    graft__free(ids);
    n = tok(l.v, text, strlen(text), false, false, &ids);
    assert_false(contains(ids, n, 1));
    assert_false(contains(ids, n, 2));
    graft__free(ids);
    /* after a special token spm puts a space in front: "<s>a" == <s> "▁a" */
    int32_t *a, *b;
    size_t na = tok(l.v, "<s>Once", 7, false, true, &a);
    size_t nb = tok(l.v, "Once", 4, false, false, &b);
    assert_int_equal(na, nb + 1);
    assert_true(ids_equal(a + 1, na - 1, b, nb));
    graft__free(a);
    graft__free(b);
    unload(l);

    l = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    text = "a<|endoftext|>b";
    n = tok(l.v, text, strlen(text), false, true, &ids);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    graft__free(ids);
    n = tok(l.v, text, strlen(text), false, false, &ids);
    assert_true(n > 3);
    assert_false(contains(ids, n, 50256));
    graft__free(ids);
    unload(l);
}

static void test_user_defined_always_split(void **state)
{
    (void)state;
    /* mpt's runs of spaces are user-defined tokens: matched even without parse_special */
    loaded l = load_vocab("vocab/ggml-vocab-mpt.gguf");
    int32_t three = graft__vocab_find(l.v, "   ", 3);
    assert_true(three >= 0);
    int32_t *ids;
    size_t n = tok(l.v, "a   b", 5, false, false, &ids);
    assert_true(contains(ids, n, three));
    graft__free(ids);
    unload(l);
}

static void test_add_special(void **state)
{
    (void)state;
    int32_t *ids;
    loaded l = load_vocab("stories260K.gguf");
    size_t n = tok(l.v, "Hello", 5, true, false, &ids);
    assert_int_equal(ids[0], 1);
    assert_int_not_equal(ids[n - 1], 2);
    graft__free(ids);
    n = tok(l.v, "", 0, true, false, &ids);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    graft__free(ids);
    n = tok(l.v, "", 0, false, false, &ids);
    assert_int_equal(n, 0);
    graft__free(ids);
    unload(l);

    l = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    n = tok(l.v, "Hello", 5, true, false, &ids);
    assert_int_equal(n, 1); /* gpt-2 adds nothing */
    graft__free(ids);
    unload(l);

    l = load_vocab("vocab/ggml-vocab-deepseek-coder.gguf");
    n = tok(l.v, "Hello", 5, true, false, &ids);
    assert_int_equal(ids[0], 32013); /* add_bos_token = true */
    graft__free(ids);
    unload(l);

    l = load_vocab("vocab/ggml-vocab-bert-bge.gguf");
    n = tok(l.v, "Hello world", 11, true, false, &ids);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 101);
    assert_int_equal(ids[1], 7592);
    assert_int_equal(ids[3], 102);
    graft__free(ids);
    unload(l);
}

/* ---- decoding ---------------------------------------------------------------------- */

/* Decodes ids through the public streaming detokenizer (malloc'd, NUL-terminated). */
static char *decode(const graft__vocab *v, const int32_t *ids, size_t n, size_t *len)
{
    struct graft_model model = {.vocab = (graft__vocab *)v};
    graft_detok *d;
    assert_int_equal(graft_detok_create(&model, &d), GRAFT_OK);
    char *text = malloc(1);
    size_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t piece_len;
        if (i < n)
            assert_int_equal(graft_detok_push(d, ids[i], &piece, &piece_len), GRAFT_OK);
        else
            assert_int_equal(graft_detok_flush(d, &piece, &piece_len), GRAFT_OK);
        text = realloc(text, total + piece_len + 1);
        memcpy(text + total, piece, piece_len);
        total += piece_len;
    }
    text[total] = '\0';
    graft_detok_free(d);
    *len = total;
    return text;
}

/* decode(encode(x)) == x (after the one space spm puts in front), over every test input. */
static void round_trip(const char *gguf_rel, const char *inp_rel, const char *out_rel)
{
    loaded l = load_vocab(gguf_rel);
    vectors t = read_vectors(inp_rel, out_rel);
    bool prefix = graft__vocab_add_space_prefix(l.v);
    for (size_t i = 0; i < t.n; i++) {
        int32_t *ids;
        size_t n = tok(l.v, t.inputs[i], t.input_lens[i], false, false, &ids), len;
        char *text = decode(l.v, ids, n, &len);
        size_t skip = prefix && t.input_lens[i] > 0;
        if (skip)
            assert_int_equal(text[0], ' ');
        if (len != t.input_lens[i] + skip || memcmp(text + skip, t.inputs[i], t.input_lens[i]))
            fail_msg("%s case %zu: '%s' decodes to '%s'", gguf_rel, i, t.inputs[i], text);
        free(text);
        graft__free(ids);
    }
    free_vectors(t);
    unload(l);
}

static void test_round_trip(void **state)
{
    (void)state;
    round_trip("stories260K.gguf", "stories260K.tokenizer-tests.inp",
               "stories260K.tokenizer-tests.out");
    round_trip("vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-spm.gguf.inp",
               "vocab/ggml-vocab-llama-spm.gguf.out");
    round_trip("vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-gpt-2.gguf.inp",
               "vocab/ggml-vocab-gpt-2.gguf.out");
}

static void test_detok_split_character(void **state)
{
    (void)state;
    loaded l = load_vocab("stories260K.gguf");
    struct graft_model model = {.vocab = l.v};
    graft_detok *d;
    assert_int_equal(graft_detok_create(&model, &d), GRAFT_OK);
    const char *piece;
    size_t len;
    /* "🦙" = F0 9F A6 99 has no token: four byte tokens <0xF0> <0x9F> <0xA6> <0x99> */
    const uint8_t llama[4] = {0xF0, 0x9F, 0xA6, 0x99};
    for (int i = 0; i < 4; i++) {
        int32_t id = graft__vocab_byte_token(l.v, llama[i]);
        assert_true(id >= 0);
        assert_int_equal(graft_detok_push(d, id, &piece, &len), GRAFT_OK);
        assert_int_equal(len, i < 3 ? 0 : 4);
    }
    assert_memory_equal(piece, llama, 4);
    /* an invalid byte is U+FFFD at once; a broken-off start is U+FFFD before what follows */
    assert_int_equal(graft_detok_push(d, graft__vocab_byte_token(l.v, 0xFF), &piece, &len),
                     GRAFT_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(piece, "\xef\xbf\xbd", 3);
    assert_int_equal(graft_detok_push(d, graft__vocab_byte_token(l.v, 0xE2), &piece, &len),
                     GRAFT_OK);
    assert_int_equal(len, 0);
    assert_int_equal(graft_detok_push(d, graft__vocab_byte_token(l.v, 'A'), &piece, &len),
                     GRAFT_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(piece, "\xef\xbf\xbd" "A", 4);
    /* an incomplete character at the end is U+FFFD at flush; control tokens give nothing */
    assert_int_equal(graft_detok_push(d, graft__vocab_byte_token(l.v, 0xF0), &piece, &len),
                     GRAFT_OK);
    assert_int_equal(graft_detok_push(d, 1, &piece, &len), GRAFT_OK);
    assert_int_equal(len, 0);
    assert_int_equal(graft_detok_flush(d, &piece, &len), GRAFT_OK);
    assert_int_equal(len, 3);
    assert_int_equal(graft_detok_flush(d, &piece, &len), GRAFT_OK);
    assert_int_equal(len, 0);
    assert_int_equal(graft_detok_push(d, 512, &piece, &len), GRAFT_EINVAL);
    graft_detok_free(d);
    unload(l);
}

static void test_token_bytes(void **state)
{
    (void)state;
    loaded l = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    char buf[8];
    int32_t id = graft__vocab_find(l.v, "\xc4\xa0the", 5); /* "Ġthe" */
    assert_true(id >= 0);
    assert_int_equal(graft__token_bytes(l.v, id, buf, sizeof buf), 4);
    assert_memory_equal(buf, " the", 4);
    assert_int_equal(graft__token_bytes(l.v, id, buf, 2), 4); /* full length, 2 written */
    assert_int_equal(graft__token_bytes(l.v, 50256, buf, sizeof buf), 0);
    assert_int_equal(graft__token_bytes(l.v, 50257, buf, sizeof buf), -1);
    unload(l);
}

static void test_utf8_decode(void **state)
{
    (void)state;
    uint32_t cp;
    assert_int_equal(graft__utf8_decode("\xf0\x9f\xa6\x99", 4, &cp), 4);
    assert_int_equal(cp, 0x1F999);
    assert_int_equal(graft__utf8_decode("\xc3\xa9", 2, &cp), 2);
    assert_int_equal(cp, 0xE9);
    const char *bad[] = {"\xf8\x9f\x98\x81", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                         "\xf4\x90\x80\x80", "\x80", "\xc3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(graft__utf8_decode(bad[i], strlen(bad[i]), &cp), 0);
    assert_int_equal(graft__utf8_decode("\xe2\x96\x81", 2, &cp), 0); /* cut short */
}

/* ---- invalid input and metadata ------------------------------------------------------ */

static void test_arbitrary_bytes(void **state)
{
    (void)state;
    const char *files[] = {"stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf",
                           "vocab/ggml-vocab-deepseek-llm.gguf"};
    const char text[] = "\xff\xfe a\x80\xc3 \xe2\x82 \xf0\x9f\x98\x00<s>\xed\xa0\x80 z";
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        loaded l = load_vocab(files[f]);
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n = tok(l.v, text, sizeof text - 1, true, special, &ids);
            assert_true(n > 0);
            for (size_t i = 0; i < n; i++)
                assert_true(ids[i] >= 0 && ids[i] < graft__vocab_size(l.v));
            graft__free(ids);
        }
        unload(l);
    }
}

/* Loads a copy of `rel` with one key replaced by a string (or removed when value is NULL). */
static int load_altered(const char *rel, const char *key, const char *value, char **err)
{
    loaded l = {0};
    assert_int_equal(graft__gguf_open(model_path(rel), &l.g, NULL), GRAFT_OK);
    graft__gguf_writer *w = graft__gguf_writer_create(3, 32);
    assert_non_null(w);
    for (uint64_t i = 0; i < graft__gguf_n_kv(l.g); i++) {
        const graft__gguf_kv *kv = graft__gguf_kv_at(l.g, i);
        if (!graft__gguf_str_eq(kv->key, key))
            assert_int_equal(graft__gguf_writer_copy_kv(w, kv), GRAFT_OK);
    }
    if (value)
        assert_int_equal(graft__gguf_writer_set_str(w, key, value), GRAFT_OK);
    void *data;
    size_t size;
    assert_int_equal(graft__gguf_writer_write_memory(w, &data, &size), GRAFT_OK);
    graft__gguf_writer_free(w);
    graft__gguf_close(l.g);
    assert_int_equal(graft__gguf_open_memory(data, size, &l.g, NULL), GRAFT_OK);
    int rc = graft__vocab_load(l.g, &l.v, err);
    unload(l);
    graft__free(data);
    return rc;
}

static void test_bad_metadata(void **state)
{
    (void)state;
    char *err = NULL;
    const char *gpt2 = "vocab/ggml-vocab-gpt-2.gguf";
    assert_int_equal(load_altered(gpt2, "tokenizer.ggml.pre", "tekken-9", &err),
                     GRAFT_EUNSUPPORTED);
    assert_non_null(strstr(err, "'tekken-9'"));
    graft__free(err);
    assert_int_equal(load_altered(gpt2, "tokenizer.ggml.model", "t5", &err), GRAFT_EUNSUPPORTED);
    assert_non_null(strstr(err, "'t5'"));
    graft__free(err);
    assert_int_equal(load_altered(gpt2, "tokenizer.ggml.merges", NULL, &err), GRAFT_EFORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.merges is missing"));
    graft__free(err);
    assert_int_equal(load_altered(gpt2, "tokenizer.ggml.token_type", NULL, &err), GRAFT_OK);
    assert_int_equal(load_altered("stories260K.gguf", "tokenizer.ggml.scores", "x", &err),
                     GRAFT_EFORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.scores is not an array of floats"));
    graft__free(err);
    assert_int_equal(load_altered("stories260K.gguf", "tokenizer.ggml.tokens", NULL, &err),
                     GRAFT_EFORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.tokens is missing"));
    graft__free(err);
}

/* ---- allocation failures ------------------------------------------------------------- */

static void test_alloc_failures_load(void **state)
{
    (void)state;
    const char *files[] = {"stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        graft__gguf *g;
        assert_int_equal(graft__gguf_open(model_path(files[f]), &g, NULL), GRAFT_OK);
        long live = graft__alloc_live();
        for (long n = 0;; n++) {
            graft__vocab *v = NULL;
            char *err = NULL;
            graft__alloc_fail_after(n, false);
            int rc = graft__vocab_load(g, &v, &err);
            bool refused = graft__alloc_failures() > 0;
            graft__alloc_fail_after(-1, false);
            if (!refused) {
                if (rc != GRAFT_OK)
                    fail_msg("%s, n = %ld: %s", files[f], n, err ? err : "(no message)");
                graft__vocab_free(v);
                break;
            }
            if (rc == GRAFT_OK) { /* a refusal with a fallback (PCRE2's JIT) */
                graft__vocab_free(v);
                assert_int_equal(graft__alloc_live(), live);
                continue;
            }
            assert_int_equal(rc, GRAFT_ENOMEM);
            assert_null(v);
            graft__free(err);
            assert_int_equal(graft__alloc_live(), live);
        }
        assert_int_equal(graft__alloc_live(), live);
        graft__gguf_close(g);
    }
}

static void test_alloc_failures_tokenize(void **state)
{
    (void)state;
    const char *files[] = {"stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf", "vocab/ggml-vocab-mpt.gguf",
                           "vocab/ggml-vocab-deepseek-llm.gguf"};
    const char *text = "<s>Hello,  wörld! <|endoftext|> 12345 \xf0\x9f\xa6\x99 [CLS] Führer";
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        loaded l = load_vocab(files[f]);
        int32_t *want;
        size_t n_want = tok(l.v, text, strlen(text), true, true, &want);
        long live = graft__alloc_live();
        for (long n = 0;; n++) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            graft__alloc_fail_after(n, false);
            int rc = graft__tokenize(l.v, text, strlen(text), true, true, &ids, &n_ids);
            bool refused = graft__alloc_failures() > 0;
            graft__alloc_fail_after(-1, false);
            if (!refused) {
                assert_int_equal(rc, GRAFT_OK);
                assert_true(ids_equal(ids, n_ids, want, n_want));
                graft__free(ids);
                break;
            }
            assert_int_equal(rc, GRAFT_ENOMEM);
            assert_null(ids);
            assert_int_equal(graft__alloc_live(), live);
        }
        graft__free(want);
        unload(l);
    }
}

/* ---- scale ------------------------------------------------------------------------- */

/* A prompt of about 10k tokens takes milliseconds (printed, not asserted: timings are for
 * bench/). */
static void test_long_prompt(void **state)
{
    (void)state;
    const char *files[] = {"stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                           "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-bert-bge.gguf"};
    const char *line = "Once upon a time, there was a little girl named Lily who loved to "
                       "play outside in the park with her friends 123 !! \n";
    size_t line_len = strlen(line), reps = 500, len = line_len * reps;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(text + i * line_len, line, line_len);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        loaded l = load_vocab(files[f]);
        int32_t *ids;
        uint64_t t0 = graft__now_ns();
        size_t n = tok(l.v, text, len, true, true, &ids);
        double ms = (double)(graft__now_ns() - t0) / 1e6;
        printf("%s: %zu bytes -> %zu tokens in %.1f ms\n", files[f], len, n, ms);
        assert_true(n > 5000);
        graft__free(ids);
        unload(l);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_llama_spm),
        cmocka_unit_test(test_vectors_phi3),
        cmocka_unit_test(test_vectors_gpt2),
        cmocka_unit_test(test_vectors_bert_bge),
        cmocka_unit_test(test_vectors_deepseek_coder),
        cmocka_unit_test(test_vectors_deepseek_llm),
        cmocka_unit_test(test_vectors_falcon),
        cmocka_unit_test(test_vectors_starcoder),
        cmocka_unit_test(test_vectors_mpt),
        cmocka_unit_test(test_vectors_refact),
        cmocka_unit_test(test_vectors_stories260k),
        cmocka_unit_test(test_pretokenizers),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_special_parsing),
        cmocka_unit_test(test_user_defined_always_split),
        cmocka_unit_test(test_add_special),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_detok_split_character),
        cmocka_unit_test(test_token_bytes),
        cmocka_unit_test(test_utf8_decode),
        cmocka_unit_test(test_arbitrary_bytes),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_alloc_failures_load),
        cmocka_unit_test(test_alloc_failures_tokenize),
        cmocka_unit_test(test_long_prompt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
