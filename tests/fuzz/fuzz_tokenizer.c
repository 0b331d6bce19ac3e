/*
 * fuzz_tokenizer.c: libFuzzer target for the tokenizers and the streaming detokenizer.
 *
 * The first input byte picks a vocabulary from $GRAFT_MODELS_DIR (spm: stories260K and
 * Phi-3 with its special tokens; bpe: GPT-2 and deepseek-llm's sequence of regexes; bert),
 * loaded once and kept. The rest is tokenized with parse_special off and on (add_special
 * with it). Every call must succeed with ids in range; the ids are decoded through the
 * streaming detokenizer, whose output must be valid UTF-8. Where the tokenizer is lossless
 * the text must come back: GPT-2 (byte-level) and stories260K (byte fallback; after the
 * space it puts in front) for valid UTF-8 input without parsed special tokens (and, for
 * spm, without a literal "▁", which stands for a space). ASan and UBSan do the rest.
 * Seeds live in tests/fuzz/seeds/fuzz_tokenizer/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

enum { STORIES, GPT2, BERT, DEEPSEEK_LLM, PHI3, N_VOCABS };

static const char *const FILES[N_VOCABS] = {
    "stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-bert-bge.gguf",
    "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-phi-3.gguf"};

static graft__gguf *files[N_VOCABS];
static graft__vocab *vocabs[N_VOCABS];

static void require(bool ok)
{
    if (!ok)
        abort();
}

static graft__vocab *vocab_at(int which)
{
    if (vocabs[which])
        return vocabs[which];
    const char *dir = getenv("GRAFT_MODELS_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "../shared/models", FILES[which]);
    char *err = NULL;
    if (graft__gguf_open(path, &files[which], &err) != GRAFT_OK ||
        graft__vocab_load(files[which], &vocabs[which], &err) != GRAFT_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err ? err : "?");
        abort();
    }
    return vocabs[which];
}

static bool valid_utf8(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = graft__utf8_decode(s + i, len - i, &cp);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

/* Decodes ids through the public detokenizer into a malloc'd buffer. */
static char *decode(const graft__vocab *v, const int32_t *ids, size_t n, size_t *len)
{
    struct graft_model model = {.vocab = (graft__vocab *)v};
    graft_detok *d;
    require(graft_detok_create(&model, &d) == GRAFT_OK);
    char *text = NULL;
    size_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t piece_len;
        int rc = i < n ? graft_detok_push(d, ids[i], &piece, &piece_len)
                       : graft_detok_flush(d, &piece, &piece_len);
        require(rc == GRAFT_OK && valid_utf8(piece, piece_len));
        text = realloc(text, total + piece_len + 1);
        require(text != NULL);
        memcpy(text + total, piece, piece_len);
        total += piece_len;
    }
    graft_detok_free(d);
    *len = total;
    return text;
}

/* Whether decoding must give the text back (after `prefix` bytes of added space). */
static bool lossless(int which, const char *text, size_t len, size_t *prefix)
{
    *prefix = which == STORIES && len > 0;
    if (which == STORIES)
        return valid_utf8(text, len) && !memmem(text, len, "\xe2\x96\x81", 3);
    return which == GPT2 && valid_utf8(text, len);
}

static void check(int which, const char *text, size_t len, bool special)
{
    const graft__vocab *v = vocab_at(which);
    int32_t *ids;
    size_t n;
    require(graft__tokenize(v, text, len, special, special, &ids, &n) == GRAFT_OK);
    for (size_t i = 0; i < n; i++)
        require(ids[i] >= 0 && ids[i] < graft__vocab_size(v));
    size_t out_len, prefix;
    char *out = decode(v, ids, n, &out_len);
    if (!special && lossless(which, text, len, &prefix))
        require(out_len == len + prefix && memcmp(out + prefix, text, len) == 0);
    free(out);
    graft__free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int which = data[0] % N_VOCABS;
    check(which, (const char *)data + 1, size - 1, false);
    check(which, (const char *)data + 1, size - 1, true);
    return 0;
}
