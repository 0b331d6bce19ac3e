/*
 * test_template_model.c: a model's own chat template, from its GGUF to tokens.
 *
 * A tiny qwen2 model is synthesized with the Qwen2 vocabulary of
 * $GRAFT_MODELS_DIR/vocab/ggml-vocab-qwen2.gguf, whose tokenizer.* keys (the chat template
 * among them) synth copies. graft_model_get_chat must give that template and the BOS/EOS
 * texts; the template renders a conversation, and tokenizing the text with parse_special
 * gives <|im_start|> and <|im_end|> as single special tokens, one per occurrence in the
 * text (without parse_special they are spelled out in ordinary tokens). A model without a
 * template (synth's own vocabulary) reports none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "gguf/gguf.h"
#include "graft.h"

static graft_model *synth_and_load(const char *arch, int type, const char *vocab,
                                   const char *name)
{
    char path[1024];
    graft_test_tmp_path(path, sizeof path, name);
    graft_synth_options so = {arch, "tiny", type, vocab, 7, path};
    char *err = NULL;
    if (graft_synth_write(&so, &err) != GRAFT_OK)
        fail_msg("synth %s: %s", name, err ? err : "?");
    graft_model *m = NULL;
    if (graft_model_load(path, &m, &err) != GRAFT_OK)
        fail_msg("load %s: %s", path, err ? err : "?");
    return m;
}

/* The one token `text` is with parse_special, or -1 when it is not a single token. */
static int32_t single_token(const graft_model *m, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(m, text, strlen(text), 0, 1, &ids, &n), GRAFT_OK);
    int32_t id = n == 1 ? ids[0] : -1;
    graft_free(ids);
    return id;
}

static size_t count_substr(const char *s, const char *sub)
{
    size_t n = 0;
    for (const char *p = strstr(s, sub); p != NULL; p = strstr(p + 1, sub))
        n++;
    return n;
}

static size_t count_id(const int32_t *ids, size_t n, int32_t id)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ids[i] == id;
    return k;
}

static void test_qwen2_template_tokens(void **state)
{
    (void)state;
    char vocab[1024];
    graft_test_model_path(vocab, sizeof vocab, "vocab/ggml-vocab-qwen2.gguf");
    graft_model *m = synth_and_load("qwen2", GRAFT_TYPE_Q4_0, vocab, "template-qwen2-tiny.gguf");
    graft_model_chat chat;
    graft_model_get_chat(m, &chat);
    assert_non_null(chat.chat_template);
    assert_non_null(strstr(chat.chat_template, "<|im_start|>"));
    assert_non_null(chat.bos_text);
    assert_string_equal(chat.eos_text, "<|endoftext|>");

    graft_template *t = NULL;
    char *err = NULL;
    if (graft_template_parse(chat.chat_template, strlen(chat.chat_template), &t, &err) !=
        GRAFT_OK)
        fail_msg("the Qwen2 template does not parse: %s", err);
    static const char vars[] =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a poet.\"}, "
        "{\"role\": \"user\", \"content\": \"Write about the sea, 海.\"}, "
        "{\"role\": \"assistant\", \"content\": \"Waves.\"}, "
        "{\"role\": \"user\", \"content\": \"More.\"}], \"add_generation_prompt\": true}";
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(graft_template_render(t, vars, strlen(vars), NULL, &text, &len, &err),
                     GRAFT_OK);
    assert_string_equal(text,
                        "<|im_start|>system\nYou are a poet.<|im_end|>\n"
                        "<|im_start|>user\nWrite about the sea, 海.<|im_end|>\n"
                        "<|im_start|>assistant\nWaves.<|im_end|>\n"
                        "<|im_start|>user\nMore.<|im_end|>\n"
                        "<|im_start|>assistant\n");

    int32_t im_start = single_token(m, "<|im_start|>"), im_end = single_token(m, "<|im_end|>");
    assert_true(im_start >= 0 && im_end >= 0 && im_start != im_end);
    assert_string_equal(graft_token_text(m, im_start), "<|im_start|>");
    assert_string_equal(graft_token_text(m, im_end), "<|im_end|>");
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(graft_tokenize(m, text, len, 0, 1, &ids, &n), GRAFT_OK);
    assert_int_equal(count_id(ids, n, im_start), count_substr(text, "<|im_start|>"));
    assert_int_equal(count_id(ids, n, im_end), count_substr(text, "<|im_end|>"));
    assert_int_equal(ids[0], im_start);
    graft_free(ids);
    /* Without parse_special the markers are ordinary text. */
    assert_int_equal(graft_tokenize(m, text, len, 0, 0, &ids, &n), GRAFT_OK);
    assert_int_equal(count_id(ids, n, im_start), 0);
    assert_int_equal(count_id(ids, n, im_end), 0);
    graft_free(ids);
    graft_free(text);
    graft_template_free(t);
    graft_model_free(m);
}

static void test_model_without_template(void **state)
{
    (void)state;
    graft_model *m = synth_and_load("llama", GRAFT_TYPE_F32, NULL, "template-llama-tiny.gguf");
    graft_model_chat chat;
    graft_model_get_chat(m, &chat);
    assert_null(chat.chat_template);
    graft_model_info info;
    graft_model_get_info(m, &info);
    assert_string_equal(chat.bos_text, info.bos >= 0 ? graft_token_text(m, info.bos) : "");
    assert_string_equal(chat.eos_text, info.eos >= 0 ? graft_token_text(m, info.eos) : "");
    graft_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_template_tokens),
        cmocka_unit_test(test_model_without_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
