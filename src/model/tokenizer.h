/*
 * tokenizer.h: the vocabulary and tokenizers of a model, built from GGUF metadata.
 *
 * Two tokenizer families:
 *   - "spm": tokenizer.ggml.model = "llama" (also gemma): SentencePiece-style BPE over
 *     scores, "▁" for spaces (a leading space is added), <0xXX> byte fallback.
 *   - "bpe": tokenizer.ggml.model = "gpt2": byte-level BPE over tokenizer.ggml.merges, after
 *     the pre-tokenizer named by tokenizer.ggml.pre (regexes run with PCRE2).
 * Special (control / user-defined) tokens are matched in the text first when parse_special.
 * A graft__vocab is immutable after loading and safe to use from any thread.
 */
#ifndef GRAFT_TOKENIZER_H
#define GRAFT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct graft__vocab graft__vocab;

typedef enum graft__vocab_kind { GRAFT_VOCAB_SPM, GRAFT_VOCAB_BPE } graft__vocab_kind;

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    GRAFT_TOKEN_NORMAL = 1,
    GRAFT_TOKEN_UNKNOWN = 2,
    GRAFT_TOKEN_CONTROL = 3,
    GRAFT_TOKEN_USER_DEFINED = 4,
    GRAFT_TOKEN_UNUSED = 5,
    GRAFT_TOKEN_BYTE = 6
};

/* Builds the vocabulary from the tokenizer.ggml.* keys. Errors: GRAFT_EFORMAT (missing or
 * inconsistent keys, named in the message), GRAFT_EUNSUPPORTED (tokenizer model or pre type
 * not supported), GRAFT_ENOMEM. The reader must outlive the vocab. */
int graft__vocab_load(const graft__gguf *g, graft__vocab **out, char **errmsg);
void graft__vocab_free(graft__vocab *v);

graft__vocab_kind graft__vocab_kind_of(const graft__vocab *v);
const char *graft__vocab_pre_name(const graft__vocab *v); /* "default" when none */
int32_t graft__vocab_size(const graft__vocab *v);
int32_t graft__vocab_bos(const graft__vocab *v); /* -1 when none */
int32_t graft__vocab_eos(const graft__vocab *v); /* -1 when none */
bool graft__vocab_add_bos(const graft__vocab *v);
bool graft__vocab_add_eos(const graft__vocab *v);
bool graft__vocab_is_eog(const graft__vocab *v, int32_t id);
/* The stored text of a token (NUL-terminated), or NULL when out of range. */
const char *graft__vocab_text(const graft__vocab *v, int32_t id);

/* Tokenizes `len` bytes. On success *out (graft__free) holds *n_out ids. */
int graft__tokenize(const graft__vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **out, size_t *n_out);

/* The bytes a token stands for when decoded (spm: "▁" becomes a space, <0xXX> the byte;
 * bpe: the byte-level alphabet mapped back to bytes; control tokens give no bytes).
 * Writes at most cap bytes and returns the full length (which may exceed cap), or -1 for
 * an id out of range. */
int graft__token_bytes(const graft__vocab *v, int32_t id, char *buf, size_t cap);

#endif /* GRAFT_TOKENIZER_H */
