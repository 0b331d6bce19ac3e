/*
 * tokenizer.h: the vocabulary and tokenizers of a model, built from GGUF metadata.
 *
 * Three tokenizer families:
 *   - "spm": tokenizer.ggml.model = "llama" (also gemma): SentencePiece-style BPE over
 *     scores, "▁" for spaces (a leading space is added), <0xXX> byte fallback.
 *   - "bpe": tokenizer.ggml.model = "gpt2": byte-level BPE over tokenizer.ggml.merges, after
 *     the pre-tokenizer named by tokenizer.ggml.pre (regexes run with PCRE2).
 *   - "wpm": tokenizer.ggml.model = "bert": WordPiece (greedy longest match per word after
 *     lower-casing, accent stripping and splitting at spaces and punctuation).
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

typedef enum graft__vocab_kind {
    GRAFT_VOCAB_SPM,
    GRAFT_VOCAB_BPE,
    GRAFT_VOCAB_WPM
} graft__vocab_kind;

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
/* Fill-in-the-middle tokens: the prefix, suffix and middle markers, the pad, and the repository
 * and file separators of repository-level prompts. */
typedef enum graft__fim {
    GRAFT__FIM_PRE, GRAFT__FIM_SUF, GRAFT__FIM_MID, GRAFT__FIM_PAD, GRAFT__FIM_REP,
    GRAFT__FIM_SEP, GRAFT__FIM_COUNT
} graft__fim;
int32_t graft__vocab_fim(const graft__vocab *v, graft__fim which); /* -1 when none */
/* The stored text of a token (NUL-terminated), or NULL when out of range. */
const char *graft__vocab_text(const graft__vocab *v, int32_t id);

/* Tokenizes `len` bytes. On success *out (graft__free) holds *n_out ids. */
int graft__tokenize(const graft__vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **out, size_t *n_out);

/* The bytes a token stands for when decoded (spm, wpm: "▁" becomes a space, <0xXX> the
 * byte; bpe: the byte-level alphabet mapped back to bytes; user-defined tokens: their text;
 * control and unknown tokens give no bytes).
 * Writes at most cap bytes and returns the full length (which may exceed cap), or -1 for
 * an id out of range. */
int graft__token_bytes(const graft__vocab *v, int32_t id, char *buf, size_t cap);

/* token_table.c: the bytes of tokens 0 .. n_vocab - 1 (graft__token_bytes, none for an id the
 * vocabulary lacks), in one block; immutable once built, read from any thread. Token t's bytes
 * are bytes[offset[t] .. offset[t + 1]). Errors: GRAFT_ENOMEM (*out NULL). */
typedef struct graft__token_table {
    int32_t n_vocab;
    uint32_t max_len;     /* the most bytes a token has */
    const size_t *offset; /* (n_vocab + 1) */
    const char *bytes;    /* every token's bytes, in id order */
} graft__token_table;
int graft__token_table_create(const graft__vocab *v, int32_t n_vocab, graft__token_table **out);
void graft__token_table_free(graft__token_table *t);
/* Token id's bytes (0 <= id < n_vocab), their count in *len (0: none, a control token). */
static inline const char *graft__token_table_bytes(const graft__token_table *t, int32_t id,
                                                   size_t *len)
{
    *len = t->offset[id + 1] - t->offset[id];
    return t->bytes + t->offset[id];
}

/* ---------------------------------------------------------------------------------------
 * Internals shared by the tokenizer files (vocab.c, pretokenize.c, tokenize*.c,
 * tokens_api.c). Other layers use only the functions above.
 */

/* The effective type of a token (GRAFT_TOKEN_*; 0 = undefined). Texts llama.cpp treats as
 * end-of-generation markers ("<|endoftext|>", ...) count as CONTROL whatever the file says. */
int graft__vocab_type(const graft__vocab *v, int32_t id);
float graft__vocab_score(const graft__vocab *v, int32_t id);
size_t graft__vocab_text_len(const graft__vocab *v, int32_t id);
/* The id of the token whose text is exactly these bytes, or -1. */
int32_t graft__vocab_find(const graft__vocab *v, const char *text, size_t len);
/* spm: the <0xXX> token of a byte; bpe: the token of the byte's GPT-2 character; -1: none. */
int32_t graft__vocab_byte_token(const graft__vocab *v, uint8_t byte);
int32_t graft__vocab_unk(const graft__vocab *v); /* -1 when none */
int32_t graft__vocab_sep(const graft__vocab *v); /* -1 when none (wpm appends it) */
bool graft__vocab_add_space_prefix(const graft__vocab *v);
size_t graft__vocab_max_token_len(const graft__vocab *v); /* bytes */

/* bpe: the rank of merging the adjacent tokens left, right (lower merges first) and the
 * merged token in *merged; -1 when the pair never merges. */
int32_t graft__vocab_merge(const graft__vocab *v, int32_t left, int32_t right, int32_t *merged);
/* bpe: whether a pre-token word that is itself a token is taken whole (llama3). */
bool graft__vocab_ignore_merges(const graft__vocab *v);

/* Special tokens matched in the text before tokenizing (llama.cpp's partitioning): control,
 * unknown and user-defined tokens when parse_special, user-defined ones only otherwise.
 * Longer texts take precedence; the set says which lengths and first bytes to look for. */
typedef struct graft__special_set {
    const uint32_t *lens; /* distinct text lengths, ascending */
    size_t n_lens;
    uint8_t first[32];    /* bitmap of first bytes */
} graft__special_set;
const graft__special_set *graft__vocab_specials(const graft__vocab *v, bool parse_special);
/* Whether `id` takes part in partitioning (see above) under parse_special. */
bool graft__vocab_is_special(const graft__vocab *v, int32_t id, bool parse_special);
/* Whether spaces left (lstrip) or right (rstrip) of a matched special token are dropped. */
bool graft__vocab_lstrip(const graft__vocab *v, int32_t id);
bool graft__vocab_rstrip(const graft__vocab *v, int32_t id);

/* A PCRE2 pattern compiled through graft's allocator: UTF and UCP, invalid UTF-8 in a
 * subject never matches, JIT when available. Immutable once compiled.
 * CONSTRUCTOR: graft__regex_compile   DESTRUCTOR: graft__regex_free */
typedef struct graft__regex graft__regex;
int graft__regex_compile(const char *pattern, graft__regex **out, char **errmsg);
void graft__regex_free(graft__regex *re);
/* One thread's match state, sized for the groups of `re` (usable with any pattern).
 * CONSTRUCTOR: graft__regex_match_create (NULL: out of memory)
 * DESTRUCTOR: graft__regex_match_free */
typedef struct graft__regex_match graft__regex_match;
graft__regex_match *graft__regex_match_create(const graft__regex *re);
void graft__regex_match_free(graft__regex_match *m);
/* Finds the first non-empty match at or after byte `from` of subject[0, len). Returns 1
 * and fills ov with n_pairs (start, end) offset pairs (the match, then its groups; SIZE_MAX
 * for a group that did not take part), 0 when there is none, or GRAFT_ENOMEM (out of
 * memory, or past one of PCRE2's match or stack limits). */
int graft__regex_find(const graft__regex *re, graft__regex_match *m, const char *subject,
                      size_t len, size_t from, size_t *ov, int n_pairs);

/* The pre-tokenizer of a bpe vocab: the regexes of its tokenizer.ggml.pre type, applied in
 * sequence as llama.cpp does (each splits every piece the previous ones left, matched and
 * unmatched stretches alike). Compiled once; safe to share between threads.
 * CONSTRUCTOR: graft__pretok_create   DESTRUCTOR: graft__pretok_free */
typedef struct graft__pretok graft__pretok;
/* name: tokenizer.ggml.pre, NULL for "default". Errors: GRAFT_EUNSUPPORTED (unknown type,
 * named in the message), GRAFT_ENOMEM. */
int graft__pretok_create(const char *name, graft__pretok **out, char **errmsg);
void graft__pretok_free(graft__pretok *p);
/* Pre-type defaults llama.cpp applies: take whole-token words unmerged; add BOS. */
bool graft__pretok_ignore_merges(const graft__pretok *p);
bool graft__pretok_adds_bos(const graft__pretok *p);
const graft__pretok *graft__vocab_pretok(const graft__vocab *v);

/* A piece of text: bytes [off, off + len). */
typedef struct graft__span {
    size_t off;
    size_t len;
} graft__span;
/* Splits text into pre-token words covering it in order. *spans (graft__free) gets *n. */
int graft__pretok_split(const graft__pretok *p, const char *text, size_t len,
                        graft__span **spans, size_t *n);

/* A growing array of token ids. */
typedef struct graft__tokbuf {
    int32_t *ids;
    size_t n;
    size_t cap;
} graft__tokbuf;
int graft__tokbuf_push(graft__tokbuf *b, int32_t id); /* GRAFT_OK or GRAFT_ENOMEM */

/* A merge candidate: symbol `left` (the low 32 bits of key) and its right neighbour, to
 * be checked when popped with a, b. Candidates pop in increasing key order: priority (the
 * high 32 bits), then position. */
typedef struct graft__merge_cand {
    uint64_t key;
    int32_t a;
    int32_t b;
} graft__merge_cand;
typedef struct graft__merge_heap {
    graft__merge_cand *items;
    size_t n;
    size_t cap;
} graft__merge_heap;
/* Makes room for n candidates in all (or GRAFT_ENOMEM): pushes up to n allocate nothing. */
int graft__merge_heap_reserve(graft__merge_heap *h, size_t n);
int graft__merge_heap_push(graft__merge_heap *h, graft__merge_cand c); /* or GRAFT_ENOMEM */
graft__merge_cand graft__merge_heap_pop(graft__merge_heap *h);         /* h->n > 0 */

/* GPT-2's byte-level alphabet: the code point standing for a byte, and the byte a code
 * point stands for (-1 when it stands for none). */
uint32_t graft__bpe_byte_to_cp(uint8_t byte);
int graft__bpe_cp_to_byte(uint32_t cp);

/* The tokenizers of each family, over one piece of text without special tokens; each
 * appends to `out`. spm: `space_prefix` puts a space before the text (llama.cpp does at the
 * start and after each special token when add_space_prefix). */
int graft__spm_tokenize(const graft__vocab *v, const char *text, size_t len, bool space_prefix,
                        graft__tokbuf *out);
int graft__bpe_tokenize(const graft__vocab *v, const char *text, size_t len, graft__tokbuf *out);
int graft__wpm_tokenize(const graft__vocab *v, const char *text, size_t len, graft__tokbuf *out);

/* wpm: the per-vocab normaliser (a C.UTF-8 locale for lower-casing and the regex that
 * classifies characters). Errors: GRAFT_EUNSUPPORTED when the C.UTF-8 locale is not
 * installed, GRAFT_ENOMEM. */
typedef struct graft__wpm_norm graft__wpm_norm;
int graft__wpm_norm_create(graft__wpm_norm **out, char **errmsg);
void graft__wpm_norm_free(graft__wpm_norm *n);
const graft__wpm_norm *graft__vocab_wpm_norm(const graft__vocab *v);

/* Decodes one UTF-8 character at s (len > 0 bytes): returns its length and sets *cp, or
 * returns 0 when the bytes there are not a complete, valid (shortest-form) character. */
size_t graft__utf8_decode(const char *s, size_t len, uint32_t *cp);
/* Encodes a code point (<= 0x10FFFF) into buf (4 bytes); returns the length. */
size_t graft__utf8_encode(uint32_t cp, char *buf);

#endif /* GRAFT_TOKENIZER_H */
