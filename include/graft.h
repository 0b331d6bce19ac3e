/*
 * graft.h: the public C API of graft, an LLM inference engine for GGUF models.
 *
 * This header is the only contract between graft and its users (the command line, the
 * server and the prefix cache are written against it too). Conventions, as in SQLite and
 * libuv:
 *   - Public symbols are graft_<object>_<verb>. Functions that can fail return an int
 *     status: GRAFT_OK (0) or a negative graft_status code. graft_status_str() names it.
 *   - Functions that can fail with a detailed message take `char **errmsg`: on failure,
 *     when errmsg is not NULL, *errmsg receives a message the caller frees with graft_free().
 *     On success *errmsg is set to NULL.
 *   - A failed graft_*_load / graft_*_create leaves nothing to free. Every destructor
 *     accepts NULL.
 *   - Pointers returned by a getter are borrowed: valid until the object they came from
 *     is freed.
 *
 * The architectures and their GGUF conventions are specified in docs/architectures.md.
 *
 * Threads: a graft_model is immutable after loading and may be used from any number of
 * threads at once. A graft_context belongs to one thread at a time. The sampler likewise.
 */
#ifndef GRAFT_H
#define GRAFT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRAFT_VERSION "0.1.0"

/* ---------------------------------------------------------------------------------------
 * Status codes. One list; the enum and graft_status_str() are generated from it.
 * XX(name, value, message)
 */
#define GRAFT_STATUS_MAP(XX)                                                  \
    XX(OK, 0, "success")                                                      \
    XX(EINVAL, -1, "invalid argument")                                        \
    XX(ENOMEM, -2, "out of memory")                                           \
    XX(EIO, -3, "input/output error")                                         \
    XX(EFORMAT, -4, "malformed file")                                         \
    XX(EUNSUPPORTED, -5, "unsupported feature")                               \
    XX(ENOTFOUND, -6, "not found")                                            \
    XX(ETYPE, -7, "wrong type")                                               \
    XX(ERANGE, -8, "value out of range")                                      \
    XX(ECAPACITY, -9, "capacity exceeded")                                    \
    XX(EBOUNDARY, -10, "bad boundary")                                        \
    XX(ERETENTION, -11, "retention lost")                                     \
    XX(ESHUTDOWN, -12, "shutting down")                                       \
    XX(ECANCELLED, -13, "cancelled")

typedef enum graft_status {
#define GRAFT_STATUS_ENUM_(name, value, msg) GRAFT_##name = (value),
    GRAFT_STATUS_MAP(GRAFT_STATUS_ENUM_)
#undef GRAFT_STATUS_ENUM_
} graft_status;

/* The fixed English text of a status code ("unknown status" for other values). */
const char *graft_status_str(int status);

/* Frees memory graft handed to the caller (error messages, token arrays). NULL is fine. */
void graft_free(void *ptr);

/* ---------------------------------------------------------------------------------------
 * Models.
 * CONSTRUCTOR: graft_model_load   DESTRUCTOR: graft_model_free
 */
typedef struct graft_model graft_model;

/* Maps the GGUF file at `path`, validates it, and prepares the weights and the tokenizer.
 * The file stays mapped until graft_model_free. Errors: GRAFT_EIO (cannot open or map),
 * GRAFT_EFORMAT (malformed file: the message names the byte offset), GRAFT_EUNSUPPORTED
 * (architecture, tensor type or hyperparameter not supported), GRAFT_ENOMEM. */
int graft_model_load(const char *path, graft_model **out, char **errmsg);
void graft_model_free(graft_model *model);

/* Facts about a loaded model. Strings are borrowed from the model. */
typedef struct graft_model_info {
    const char *arch;            /* "llama", "qwen2", "qwen3", "gemma3" */
    const char *name;            /* general.name, or "" */
    const char *tokenizer;       /* "spm" (tokenizer.ggml.model=llama) or "bpe" (gpt2) */
    const char *pretokenizer;    /* tokenizer.ggml.pre, or "default" */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;            /* per-head width of queries and keys */
    int32_t n_ff;
    int32_t sliding_window;      /* 0 when no layer uses a sliding window */
    int32_t n_swa_layers;        /* layers with sliding-window attention */
    float rope_freq_base;
    float rope_freq_base_swa;    /* rope base of the sliding-window layers */
    float rms_eps;
    int32_t bos;                 /* -1 when absent */
    int32_t eos;                 /* -1 when absent */
    int32_t add_bos;             /* 1 when tokenizing a prompt adds BOS */
    uint64_t n_params;           /* elements over all weight tensors */
    uint64_t weight_bytes;       /* bytes of all tensor data */
    uint64_t file_bytes;
    uint32_t gguf_version;
    int32_t n_tensors;
    int32_t tensor_type_count[64]; /* tensors per GGUF type id */
} graft_model_info;

void graft_model_get_info(const graft_model *model, graft_model_info *info);

/* The name of a GGUF tensor type id ("F32", "Q4_K", ...), or NULL when unknown. */
const char *graft_type_name(int type);

/* ---------------------------------------------------------------------------------------
 * Tokens.
 */

/* Tokenizes `len` bytes of `text`. add_special adds BOS/EOS as the model's metadata says;
 * parse_special turns control-token texts ("<s>") in the text into those tokens. On
 * success *tokens (free with graft_free) holds *n_tokens ids. */
int graft_tokenize(const graft_model *model, const char *text, size_t len, int add_special,
                   int parse_special, int32_t **tokens, size_t *n_tokens);

/* The vocabulary entry's text as stored (e.g. "▁the", "<0x0A>", "Ġthe"); borrowed. NULL for
 * an id out of range. */
const char *graft_token_text(const graft_model *model, int32_t token);

/* Whether the token ends a generation (EOS, EOT and the like). */
int graft_token_is_eog(const graft_model *model, int32_t token);

/* Streaming detokenizer: turns tokens into text bytes, holding back a multi-byte UTF-8
 * character split across tokens until it is complete, so each piece it gives is valid
 * UTF-8 (bytes that can never become valid are given as U+FFFD).
 * CONSTRUCTOR: graft_detok_create   DESTRUCTOR: graft_detok_free */
typedef struct graft_detok graft_detok;
int graft_detok_create(const graft_model *model, graft_detok **out);
void graft_detok_free(graft_detok *detok);
/* Feeds one token; writes the newly completed text to *text (borrowed, valid until the next
 * call) and its length to *len (may be 0). */
int graft_detok_push(graft_detok *detok, int32_t token, const char **text, size_t *len);
/* Ends the stream: anything held back is given as U+FFFD. */
int graft_detok_flush(graft_detok *detok, const char **text, size_t *len);

/* ---------------------------------------------------------------------------------------
 * Contexts: one sequence evaluated token by token or in prompt batches.
 * CONSTRUCTOR: graft_context_create   DESTRUCTOR: graft_context_free
 * The model must outlive its contexts.
 */
typedef struct graft_context graft_context;

/* n_ctx: the most positions the context will hold (0: the model's training length). */
int graft_context_create(const graft_model *model, int32_t n_ctx, graft_context **out,
                         char **errmsg);
void graft_context_free(graft_context *ctx);

/* Appends `n` tokens at the current position and runs the forward pass over them in one
 * batch. When logits is not NULL it receives the n_vocab logits of the last token.
 * GRAFT_ECAPACITY when the context would exceed n_ctx (nothing is appended). */
int graft_context_eval(graft_context *ctx, const int32_t *tokens, size_t n, float *logits);
int32_t graft_context_position(const graft_context *ctx);

/* ---------------------------------------------------------------------------------------
 * Sampling.
 */
typedef struct graft_sampling {
    float temperature;        /* 0: greedy (argmax, lowest id wins ties) */
    int32_t top_k;            /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    uint64_t seed;
} graft_sampling;

/* The defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalty 1, seed 0. */
graft_sampling graft_sampling_default(void);

/* CONSTRUCTOR: graft_sampler_create   DESTRUCTOR: graft_sampler_free */
typedef struct graft_sampler graft_sampler;
int graft_sampler_create(const graft_sampling *params, int32_t n_vocab, graft_sampler **out);
void graft_sampler_free(graft_sampler *sampler);
/* Picks the next token from `logits` (n_vocab values, modified in place). `history` holds
 * the tokens the repetition penalty looks at. Deterministic for a given seed. */
int32_t graft_sampler_sample(graft_sampler *sampler, float *logits, const int32_t *history,
                             size_t n_history);

/* ---------------------------------------------------------------------------------------
 * Synthetic models: random weights at real shapes, for tests and benchmarks.
 * The metadata keys, tensor names and forward-pass semantics of each architecture are
 * specified in docs/architectures.md.
 */
typedef struct graft_synth_options {
    const char *arch;        /* "llama", "qwen2", "qwen3", "gemma3" */
    const char *preset;      /* "tiny", "qwen3-0.6b", "llama-1b", "gemma3-1b" */
    int type;                /* GGUF type id of the matrices (norms stay F32) */
    const char *vocab_path;  /* vocab-only GGUF whose tokenizer to copy, or NULL */
    uint64_t seed;
    const char *out_path;
} graft_synth_options;

int graft_synth_write(const graft_synth_options *opts, char **errmsg);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_H */
