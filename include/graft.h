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
 *     accepts NULL. One destructor verb a kind of constructor: what graft_*_load,
 *     graft_*_create or graft_*_parse makes is freed with graft_*_free; what graft_*_open
 *     makes (a session) is closed with graft_*_close.
 *   - Pointers returned by a getter are borrowed: valid until the object they came from
 *     is freed.
 *
 * The architectures and their GGUF conventions are specified in docs/architectures.md.
 *
 * Threads: a graft_model is immutable after loading and may be used from any number of threads at
 * once. (The first context or engine on the avx512 kernels repacks the model's Q8_0, Q4_0 and Q4_K
 * matrices for them, once, under a lock: it takes about the memory of those matrices, and creating
 * it fails with GRAFT_ENOMEM if that cannot be had.) A graft_context belongs to one thread at a
 * time. The sampler likewise.
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
    XX(ECANCELLED, -13, "cancelled")                                          \
    XX(ECLOSED, -14, "session closed")

typedef enum graft_status {
#define GRAFT_STATUS_ENUM_(name, value, msg) GRAFT_##name = (value),
    GRAFT_STATUS_MAP(GRAFT_STATUS_ENUM_)
#undef GRAFT_STATUS_ENUM_
} graft_status;

/* The fixed English text of a status code ("unknown status" for other values). */
const char *graft_status_str(int status);

/* Frees memory graft handed to the caller (error messages, token arrays). NULL is fine. */
void graft_free(void *ptr);

/* The most compute threads a context or an engine runs (n_threads). */
#define GRAFT_MAX_THREADS 256

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

/* Loads only the tokenizer of a GGUF, of any architecture (vocab-only files included), as
 * llama.cpp's tokenizer tool does: the model then serves graft_tokenize, graft_token_text,
 * graft_token_is_eog, the detokenizer and graft_model_get_chat; graft_model_get_info gives
 * its architecture's name and vocabulary size, and zero for the rest; contexts and engines
 * refuse it (GRAFT_EINVAL). Errors as graft_model_load. DESTRUCTOR: graft_model_free. */
int graft_model_load_vocab(const char *path, graft_model **out, char **errmsg);

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
    int32_t head_dim_v;          /* per-head width of values */
    int32_t n_ff;
    int32_t sliding_window;      /* 0 when no layer uses a sliding window */
    int32_t n_swa_layers;        /* layers with sliding-window attention */
    float rope_freq_base;
    float rope_freq_base_swa;    /* rope base of the sliding-window layers */
    float rms_eps;
    int32_t bos;                 /* -1 when absent */
    int32_t eos;                 /* -1 when absent */
    int32_t add_bos;             /* 1 when tokenizing a prompt adds BOS */
    int32_t fim_pre, fim_suf, fim_mid; /* fill-in-the-middle: the tokens before the prefix,
                                          the suffix and the middle; -1 when absent */
    int32_t fim_pad, fim_rep, fim_sep; /* its pad, and the repository and file separators of
                                          repository-level prompts; -1 when absent */
    int64_t kv_bytes_per_position; /* K and V of one position over every layer in float16
                                      (twice that in float32): n_layer * n_head_kv *
                                      (head_dim + head_dim_v) * 2 */
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

/* The bytes a token stands for on its own, before any UTF-8 check: a byte token's byte (a
 * piece of a character), "▁" as a space, a byte-level BPE token's bytes; none for a control
 * token. Writes at most cap bytes to buf; returns their full count (which may exceed cap),
 * or -1 for an id out of range. */
int graft_token_bytes(const graft_model *model, int32_t token, char *buf, size_t cap);

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
 * Contexts: a fixed set of sequences evaluated a batch of tokens at a time, on a pool of
 * threads owned by the context.
 * CONSTRUCTOR: graft_context_create, graft_context_create_ex   DESTRUCTOR: graft_context_free
 * The model must outlive its contexts. A context is used by one thread at a time.
 */
typedef struct graft_context graft_context;

typedef struct graft_context_options {
    int32_t n_ctx;       /* positions per sequence (0: the model's training length) */
    int32_t n_seq;       /* sequences held, ids 0..n_seq-1 (0: 1) */
    int32_t n_threads;   /* compute threads, the caller's included (0: one per online CPU) */
    const char *kernels; /* "scalar", "avx2", "avxvnni", "avx512", or NULL: the environment
                            variable GRAFT_KERNELS, else the best this processor runs */
    int32_t kv_f32;      /* nonzero: keep K and V in float32 (default: float16) */
} graft_context_options;

/* All zero: the defaults above. */
graft_context_options graft_context_default_options(void);

/* KV for n_seq * n_ctx positions is allocated here, up front. Errors: GRAFT_ERANGE (n_ctx,
 * n_seq or n_threads out of range), GRAFT_EINVAL / GRAFT_EUNSUPPORTED (kernels unknown or
 * not runnable here), GRAFT_ENOMEM / GRAFT_ECAPACITY (KV does not fit). */
int graft_context_create_ex(const graft_model *model, const graft_context_options *opts,
                            graft_context **out, char **errmsg);
/* graft_context_create_ex with one sequence of n_ctx positions and the other defaults. */
int graft_context_create(const graft_model *model, int32_t n_ctx, graft_context **out,
                         char **errmsg);
void graft_context_free(graft_context *ctx);

/* Appends `n` tokens to sequence 0 and runs the forward pass over them in one batch. When
 * logits is not NULL it receives the n_vocab logits of the last token. GRAFT_ECAPACITY when
 * the sequence would exceed n_ctx; on any error nothing is appended. */
int graft_context_eval(graft_context *ctx, const int32_t *tokens, size_t n, float *logits);

/* One token of a multi-sequence batch: appended to sequence `seq` at its next position. */
typedef struct graft_batch_token {
    int32_t seq;
    int32_t token;
    int32_t want_logits; /* nonzero: produce this token's logits */
} graft_batch_token;

/* Runs one forward pass over tokens of any of the context's sequences (a sequence's tokens
 * in order). logits receives n_vocab floats per token that wants them, in batch order.
 * A token's logits are the same bits however it is batched (DESIGN.md invariant 1). */
int graft_context_eval_batch(graft_context *ctx, const graft_batch_token *batch, size_t n,
                             float *logits);

/* Why the last graft_context_eval or graft_context_eval_batch on ctx failed (borrowed,
 * valid until the next of those calls or graft_context_free). NULL after one that succeeded,
 * for a NULL ctx, and for a failure with no more to say than its status (GRAFT_ENOMEM: then
 * graft_status_str of the status says it). */
const char *graft_context_errmsg(const graft_context *ctx);

/* Tokens held by sequence 0 / by sequence `seq` (-1 for a bad id). */
int32_t graft_context_position(const graft_context *ctx);
int32_t graft_context_seq_position(const graft_context *ctx, int32_t seq);
/* Forgets sequence `seq`'s tokens (its position becomes 0). */
int graft_context_seq_reset(graft_context *ctx, int32_t seq);
/* The kernel set in use ("scalar", "avx2", "avxvnni", "avx512") and the thread count. */
const char *graft_context_kernels(const graft_context *ctx);
int32_t graft_context_threads(const graft_context *ctx);
/* The SIMD features of this processor that graft's kernel sets look at, space-separated
 * (e.g. "avx2 fma f16c avx-vnni avx512f/bw/vl/dq/vnni"): a static string, safe from any
 * thread. */
const char *graft_cpu_features(void);

/* ---------------------------------------------------------------------------------------
 * Sampling.
 */
typedef struct graft_sampling {
    float temperature;        /* 0: greedy (argmax, lowest id wins ties) */
    int32_t top_k;            /* 0: off */
    float top_p;              /* 1: off; 0 keeps the best candidate alone */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    float presence_penalty;   /* 0: off; subtracted from the logit of a token picked before */
    float frequency_penalty;  /* 0: off; subtracted once per time the token was picked */
    uint64_t seed;
    int32_t penalty_last_n;   /* the repetition penalty looks at the last n tokens of the
                                 history (llama.cpp's repeat_last_n); 0: all of it */
    float top_n_sigma;        /* 0 or below: off; keeps the tokens whose logit is at most n
                                 standard deviations (of the finite logits) below the best */
    float xtc_probability;    /* 0: off; how often XTC ("exclude top choices") acts: it then
                                 drops every kept token of probability xtc_threshold or more
                                 but the least likely of them, when there are two or more */
    float xtc_threshold;      /* above 0.5: XTC never acts */
    float typical_p;          /* 1: off; locally typical sampling: keeps the tokens whose
                                 surprise is nearest the distribution's entropy until they
                                 hold more than this mass */
    float dynatemp_range;     /* 0: off; dynamic temperature: the temperature moves within
                                 temperature +- this range with the entropy of the top-k
                                 candidates (low entropy, low temperature) ... */
    float dynatemp_exponent;  /* ... raised to this power once normalised */
    int32_t mirostat;         /* 0: off; 1 or 2: Mirostat v1 or v2, which then takes the place
                                 of top-n-sigma, top-k, typical, top-p, min-p, XTC and the
                                 dynamic temperature (as in llama.cpp): after the temperature,
                                 the candidates are cut to hold the surprise near mirostat_tau */
    float mirostat_tau;       /* the target surprise, in bits; mu starts at twice it */
    float mirostat_eta;       /* how fast mu follows: mu -= eta * (surprise - tau) */
    float dry_multiplier;     /* 0: off; DRY ("don't repeat yourself"): a token that would
                                 extend a repeat of n >= dry_allowed_length tokens of the
                                 history loses dry_multiplier * dry_base^(n -
                                 dry_allowed_length) from its logit; a repeat does not reach
                                 back across a sequence breaker
                                 (graft_sampler_set_dry_breakers) */
    float dry_base;           /* at least 1 */
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n; /* DRY looks at the last n tokens of the history; 0: all of
                                   it in a generation, while a sampler created alone needs
                                   n > 0 with DRY on */
} graft_sampling;

/* The defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repetition penalty 1,
 * presence and frequency penalties 0, seed 0, penalty_last_n 0, top_n_sigma 0,
 * xtc_probability 0, xtc_threshold 0.1, typical_p 1, dynatemp_range 0, dynatemp_exponent 1,
 * mirostat 0, mirostat_tau 5, mirostat_eta 0.1, dry_multiplier 0, dry_base 1.75,
 * dry_allowed_length 2, dry_penalty_last_n 0. */
graft_sampling graft_sampling_default(void);

enum { GRAFT_DRY_MAX_BREAKERS = 64, GRAFT_DRY_MAX_BREAKER_BYTES = 40 };
/* llama.cpp's DRY sequence breakers, "\n", ":", "\"" and "*": what a generation naming none
 * gets (a static array; *n gets its count). */
const char *const *graft_dry_default_breakers(size_t *n);

/* A bias added to one token's logit before sampling (OpenAI's logit_bias). */
typedef struct graft_logit_bias {
    int32_t token;
    float bias;
} graft_logit_bias;

/* CONSTRUCTOR: graft_sampler_create   DESTRUCTOR: graft_sampler_free */
typedef struct graft_sampler graft_sampler;
int graft_sampler_create(const graft_sampling *params, int32_t n_vocab, graft_sampler **out);
void graft_sampler_free(graft_sampler *sampler);
/* METHOD: graft_sampler. Sets the logit biases (copied; a token listed twice gets both
 * biases added; -INFINITY: the token is never sampled). GRAFT_EINVAL: a token outside the
 * vocabulary, a bias of NaN or +INFINITY; GRAFT_ENOMEM. */
int graft_sampler_set_logit_bias(graft_sampler *sampler, const graft_logit_bias *bias, size_t n);
/* Picks the next token from `logits` (n_vocab values, modified in place). Order: logit
 * biases; the repetition penalty over `history` (its last penalty_last_n tokens); presence and
 * frequency penalties over the tokens this sampler picked before; DRY over `history` (its last
 * dry_penalty_last_n tokens); then greedy, or Mirostat, or top-n-sigma, top-k, temperature
 * (dynamic with dynatemp_range), typical, top-p, min-p, XTC and a draw. Deterministic for a
 * given seed and sequence of calls. */
int32_t graft_sampler_sample(graft_sampler *sampler, float *logits, const int32_t *history,
                             size_t n_history);
/* METHOD: graft_sampler. Sets DRY's sequence breakers (none until set), as llama.cpp reads
 * them from n strings of 1 to GRAFT_DRY_MAX_BREAKER_BYTES bytes each (at most
 * GRAFT_DRY_MAX_BREAKERS): a token whose bytes hold a breaker is one; so is a token whose
 * bytes end with the start of a breaker when the tokens after it in the history are the
 * rest's tokenization (graft_tokenize, nothing added). A repeat is counted only after the
 * history's last breaker, and a token that is a breaker alone is never penalised. Control
 * tokens have no bytes, so they never break. GRAFT_EINVAL: a count or length out of range;
 * GRAFT_ENOMEM. */
int graft_sampler_set_dry_breakers(graft_sampler *sampler, const graft_model *model,
                                   const char *const *breakers, size_t n);

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

/* ---------------------------------------------------------------------------------------
 * The engine: many sessions served at once by one engine thread (DESIGN.md §3).
 *
 * A session is a sequence of committed tokens whose KV lives in the engine's paged,
 * reference-counted pool. graft_session_generate feeds a suffix of tokens and samples new
 * ones; graft_session_clone makes a new session holding the first `upto` committed tokens
 * of another by sharing its KV blocks (no KV bytes copied). The logits of a position depend
 * only on the tokens before it: not on batching, chunking or cloning (DESIGN.md §1).
 *
 * Threads (libuv style):
 *   - graft_engine_create starts the engine thread. It owns every session's state, the KV
 *     pool, the scheduler and the forward pass. The functions below may be called from any
 *     thread: they reach the engine through its command queue (a mutex and a condition
 *     variable) or through atomic flags, as each declaration says.
 *   - Commands run on the engine thread between forward passes, those of one thread in the
 *     order it queued them. A command queued from a callback runs before the next forward
 *     pass (before commands other threads queued meanwhile), so a clone requested at a
 *     generation's first output holds exactly its prompt; a command from another thread
 *     waits at most one forward pass.
 *   - Callbacks (on_update, on_settled, on_done) run on the engine thread, one at a time.
 *     They must not block. Functions marked "callback-safe" may be called from them; the
 *     blocking ones return GRAFT_EINVAL there instead of deadlocking.
 * Lifetimes (libuv style):
 *   - The model must outlive the engine.
 *   - A session handle is valid from the open or clone that gave it until
 *     graft_session_close, or until graft_engine_free, which closes every session still
 *     open.
 *   - A generation handle is reference counted: it stays valid until graft_generation_free,
 *     even after its session is closed or the engine is shut down.
 * CONSTRUCTOR: graft_engine_create   DESTRUCTOR: graft_engine_free
 */
typedef struct graft_engine graft_engine;
typedef struct graft_session graft_session;
typedef struct graft_generation graft_generation;

typedef struct graft_engine_options {
    size_t kv_mem;            /* KV pool budget in bytes, fixed for the engine's life
                                 (0: enough for max_sessions full contexts) */
    int32_t max_sessions;     /* sessions open at once, clones included (0: 8) */
    int32_t max_context;      /* positions per session (0: the model's training length, at
                                 most 4096) */
    int32_t max_batch_tokens; /* tokens per forward pass (0: 512) */
    int32_t n_threads;        /* compute threads, the engine thread included (0: one per
                                 online CPU) */
    const char *kernels;      /* as in graft_context_options; read at create only */
    int32_t kv_f32;           /* nonzero: keep K and V in float32 (default: float16) */
    int32_t kv_wait_ms;       /* how long a generation may wait for KV room before it fails
                                 with GRAFT_ECAPACITY (0: 10000) */
} graft_engine_options;

/* All zero: the defaults above. */
graft_engine_options graft_engine_default_options(void);

/* The spare KV the default kv_mem gives each session beyond max_context positions: room for
 * the copies a clone's first writes take. */
#define GRAFT_ENGINE_SPARE_POSITIONS 64
/* The most sessions an engine holds (max_sessions), and its default max_context cap. */
#define GRAFT_ENGINE_MAX_SESSIONS 4096
#define GRAFT_ENGINE_DEFAULT_CONTEXT 4096
/* Positions per KV block: the unit of sharing, copy-on-write and retention. */
#define GRAFT_KV_BLOCK_POSITIONS 32

/* Validates every limit, then allocates the KV pool (all of kv_mem, up front), the forward
 * pass's buffers (for max_batch_tokens, written at once so that they are resident from the start),
 * the compute threads and the engine thread. Errors: GRAFT_EINVAL (NULL argument), GRAFT_ERANGE (a
 * limit out of range; the message names it), GRAFT_EINVAL / GRAFT_EUNSUPPORTED (kernels),
 * GRAFT_ECAPACITY (kv_mem below one KV block per layer group), GRAFT_ENOMEM. On failure nothing is
 * left to free. */
int graft_engine_create(const graft_model *model, const graft_engine_options *opts,
                        graft_engine **out, char **errmsg);

/* What an engine runs with, resolved at create: its options with no zero default left
 * (kernels: the set in use, a static string), and what its KV pool holds. */
typedef struct graft_engine_config {
    graft_engine_options options;
    int64_t kv_bytes_per_position; /* K and V of one position over every layer, in the
                                      engine's KV type */
    int32_t kv_block_positions;    /* GRAFT_KV_BLOCK_POSITIONS */
    int64_t kv_blocks_total;       /* blocks of the pool (of the larger layer group) */
    uint64_t kv_fingerprint;       /* what the KV bits this engine computes depend on: the
                                      model's weights, the kernel set and the KV type. Session
                                      files (graft_session_save) carry it, and load only where
                                      it is the same */
} graft_engine_config;

/* Fills *out. Any thread, callback-safe (fixed at create). */
void graft_engine_get_config(const graft_engine *engine, graft_engine_config *out);

/* The default kv_mem of an engine with these limits on this model: max_sessions times
 * (max_context + GRAFT_ENGINE_SPARE_POSITIONS) positions of KV (kv_f32 doubles it); 0 when it
 * overflows. Zero limits take their defaults, as graft_engine_create does. */
size_t graft_engine_default_kv_mem(const graft_model *model, const graft_engine_options *opts);

/* Nonzero when called on the engine's thread, that is from one of its callbacks. Any
 * thread. */
int graft_engine_on_thread(const graft_engine *engine);

/* Stops the engine and frees it: every queued command is answered (opens and probes with
 * GRAFT_ESHUTDOWN, clones through on_done with GRAFT_ESHUTDOWN, queued generations settle
 * cancelled with GRAFT_ESHUTDOWN, closes run), every live generation settles cancelled with
 * status GRAFT_ESHUTDOWN, every session is closed and every KV block released. Callbacks run
 * during shutdown as usual. Returns when the engine thread has ended; afterwards no session
 * handle may be used, generation handles may. NULL is fine (GRAFT_OK). GRAFT_EINVAL from a
 * callback (nothing is done). Other threads must have stopped using the engine. */
int graft_engine_free(graft_engine *engine);

typedef struct graft_engine_metrics {
    uint64_t steps;               /* forward passes of the scheduler */
    uint64_t step_failures;       /* forward passes that failed (their generations failed) */
    uint64_t batch_tokens;        /* tokens over all steps (mean batch: batch_tokens / steps) */
    uint64_t batch_generations;   /* generations over all steps */
    int32_t batch_tokens_max;     /* the largest step */
    uint64_t prefill_tokens;      /* prompt tokens computed */
    uint64_t decode_tokens;       /* sampled tokens fed back */
    uint64_t sampled_tokens;      /* tokens sampled */
    uint64_t generations_started; /* admitted */
    uint64_t generations_stop, generations_length, generations_cancelled,
        generations_failed;       /* settled, by finish reason */
    int32_t sessions_open;
    int32_t generations_live;
    int32_t kv_block_tokens;      /* positions per block */
    int64_t kv_block_bytes;       /* bytes per block (all layers of one group) */
    int64_t kv_blocks_total, kv_blocks_used, kv_blocks_shared, kv_blocks_free;
    uint64_t kv_cow_copies;       /* blocks copied on first write since create */
    uint64_t clones_done;
    uint64_t clones_refused_boundary, clones_refused_retention, clones_refused_capacity,
        clones_refused_nomem, clones_refused_shutdown, clones_refused_closed;
    uint64_t kv_waits;            /* generations that had to wait for KV room */
    uint64_t kv_wait_failures;    /* of them, failed with GRAFT_ECAPACITY (waited kv_wait_ms,
                                     or could never fit) */
    uint64_t kv_reclaims;         /* calls of the reclaim hooks */
    int32_t generations_waiting_kv; /* now */
} graft_engine_metrics;

/* A consistent snapshot of the engine's counters, taken between steps. Any thread (it waits
 * for the current step to end) and callback-safe. GRAFT_ESHUTDOWN once shut down. */
int graft_engine_metrics_get(graft_engine *engine, graft_engine_metrics *out);

/* METHOD: graft_session. Opens an empty session. Blocking (waits for the engine thread);
 * any thread, not callbacks (GRAFT_EINVAL). Errors: GRAFT_ECAPACITY (max_sessions open),
 * GRAFT_ENOMEM, GRAFT_ESHUTDOWN. On failure *out is NULL and nothing is left to free. */
int graft_session_open(graft_engine *engine, graft_session **out, char **errmsg);

/* DESTRUCTOR: graft_session. Queues the close and returns at once; the handle is invalid
 * from this call on. The session's live generation settles cancelled (GRAFT_ECANCELLED);
 * commands queued earlier on it (clones, generations) run first, so a clone requested just
 * before survives with its own references. Its KV references are dropped. Any thread,
 * callback-safe; cannot fail. NULL is fine. */
void graft_session_close(graft_session *session);

/* The committed length: tokens whose KV is computed. A token sampled but not yet fed back
 * is not counted: after a generation settles, its last sampled token is not committed (feed
 * it as the first token of the next generation to continue). Any thread, callback-safe
 * (an atomic read; it may grow while a generation runs). */
int32_t graft_session_position(const graft_session *session);

/* Called on the engine thread once a clone is done. status: GRAFT_OK (clone is a new idle
 * session the callee owns and must close; its position is the boundary the clone was made
 * at), or the refusal: GRAFT_EBOUNDARY (upto < 0 or above the committed position),
 * GRAFT_ERETENTION (sliding-window KV needed for [upto - window + 1, upto) is gone),
 * GRAFT_ECAPACITY (max_sessions open), GRAFT_ENOMEM, GRAFT_ECLOSED (the source was closed
 * before the clone ran), GRAFT_ESHUTDOWN; clone is then NULL. The source session is
 * unaffected either way. */
typedef void (*graft_clone_cb)(int status, graft_session *clone, void *user);

/* Queues a clone of `session` at `upto`: a new, independently writable session holding
 * exactly its committed tokens [0, upto), sharing their KV blocks. on_done is called exactly
 * once when this returns GRAFT_OK; a NULL on_done abandons the result (a clone made is
 * closed at once). Any thread, callback-safe. Errors (no callback): GRAFT_EINVAL (NULL
 * session), GRAFT_ENOMEM (queueing), GRAFT_ESHUTDOWN. */
int graft_session_clone(graft_session *session, int32_t upto, graft_clone_cb on_done,
                        void *user);

/* The same, waiting for the result: *out receives the clone (the caller owns it) or NULL;
 * returns its status as above, with a message in *errmsg. Any thread, not callbacks
 * (GRAFT_EINVAL). */
int graft_session_clone_wait(graft_session *session, int32_t upto, graft_session **out,
                             char **errmsg);

/* A clone whose boundary is chosen when it runs, on the engine thread: the longest
 * b <= min(max_upto, committed position at that moment) at which retention allows a clone
 * (graft_session_retained_boundary), refused when b < min_upto: GRAFT_EBOUNDARY when the
 * committed position is below min_upto (or min_upto < 0, or max_upto < min_upto),
 * GRAFT_ERETENTION when the sliding window lost what a boundary in [min_upto, ...] needs.
 * on_done learns b as the clone's position. A caller cloning a session that is still
 * running (a donor) thus never races its progress: whatever it committed by then counts, and
 * nothing beyond max_upto. graft_session_clone(s, upto) is the range [upto, upto]. Any
 * thread, callback-safe; errors as graft_session_clone. */
int graft_session_clone_range(graft_session *session, int32_t min_upto, int32_t max_upto,
                              graft_clone_cb on_done, void *user);
/* The same, waiting for the result (as graft_session_clone_wait). Not callbacks. */
int graft_session_clone_range_wait(graft_session *session, int32_t min_upto,
                                   int32_t max_upto, graft_session **out, char **errmsg);

/* METHOD: graft_session. A copy of the session's committed tokens: *tokens (free with
 * graft_free; NULL when there are none) holds *n of them, the history its KV was computed
 * from. Any thread: from other threads blocking (an engine round trip), from a callback
 * read directly. Errors: GRAFT_EINVAL (NULL argument), GRAFT_ENOMEM, GRAFT_ECLOSED (closed
 * before the request ran), GRAFT_ESHUTDOWN; then *tokens is NULL and *n 0. */
int graft_session_tokens(graft_session *session, int32_t **tokens, size_t *n);

/* METHOD: graft_session. Writes the session's committed tokens and the KV it holds of them
 * to the file `path` (written beside it, then renamed over it: a reader never sees half a
 * file), for graft_session_load to read back on an engine of the same model (its weights'
 * fingerprint), kernel set and KV type: the loaded session then gives the same bits a cold
 * computation of those tokens would. Sliding-window layers keep only what the session
 * retains. Blocking: runs on the engine thread between steps (other generations wait for
 * it); not from callbacks (GRAFT_EINVAL). Errors: GRAFT_EINVAL (NULL argument, a generation
 * live on the session), GRAFT_EIO (the message names the file and the system's error),
 * GRAFT_ENOMEM, GRAFT_ECLOSED, GRAFT_ESHUTDOWN. */
int graft_session_save(graft_session *session, const char *path, char **errmsg);

/* METHOD: graft_session. Fills `session`, which must be empty (position 0, no generation:
 * else GRAFT_EINVAL), with the tokens and KV graft_session_save wrote to `path`. Blocking,
 * as graft_session_save. Errors, each message naming the file: GRAFT_EIO (cannot read it),
 * GRAFT_EFORMAT (not such a file, or cut short or altered: its checksum), GRAFT_EUNSUPPORTED
 * (written for another model, kernel set or KV type), GRAFT_ERANGE (more positions than
 * the engine's max_context, or a token outside the vocabulary), GRAFT_ECAPACITY (no room in
 * the KV pool), GRAFT_ENOMEM, GRAFT_ECLOSED, GRAFT_ESHUTDOWN. On failure the session is
 * left empty. */
int graft_session_load(graft_session *session, const char *path, char **errmsg);

typedef enum graft_finish {
    GRAFT_FINISH_NONE,      /* still running */
    GRAFT_FINISH_STOP,      /* sampled a stop token (not reported, not committed) */
    GRAFT_FINISH_LENGTH,    /* max_new_tokens reached, or the session's context is full */
    GRAFT_FINISH_CANCELLED, /* cancelled, freed, session closed (GRAFT_ECANCELLED) or
                               engine shut down (GRAFT_ESHUTDOWN) */
    GRAFT_FINISH_FAILED     /* an error: see graft_generation_status / _error */
} graft_finish;

/* What a generation's output must be. */
typedef enum graft_output_format {
    GRAFT_OUTPUT_TEXT,       /* whatever the sampler picks */
    GRAFT_OUTPUT_JSON_OBJECT, /* one JSON object (RFC 8259; strings valid UTF-8,
                                 surrogate escapes paired, nesting at most 64 deep;
                                 whitespace between tokens, before and after is one space
                                 or tab, or one line break and at most 32 spaces or tabs):
                                 the tokens that cannot continue it get a logit of -infinity
                                 before the sampler's filters, tokens without text (end of
                                 generation) included. The generation stops
                                 (GRAFT_FINISH_STOP) after the token that closes the object,
                                 which is reported; a stop token that can continue the text
                                 still stops it. If no token of the vocabulary can continue
                                 it, the generation fails with GRAFT_ERANGE. */
    GRAFT_OUTPUT_JSON_SCHEMA, /* the same, and the object is an instance of the config's
                                 json_schema (the subset graft_json_schema_check accepts) */
    GRAFT_OUTPUT_GRAMMAR      /* a text that rule `root` of the config's GBNF grammar matches
                                 (graft_grammar_check), from the first token: the tokens whose
                                 bytes cannot continue a match get a logit of -infinity
                                 before the sampler's filters, as do tokens without text,
                                 except that the end tokens (end of generation unless
                                 ignore_eog, and the stop tokens) stay where the text so far is
                                 a whole match. The generation stops (GRAFT_FINISH_STOP) on
                                 an end token, or after the token that makes a whole match
                                 nothing can follow. If no token can continue the text, or the
                                 grammar makes it ambiguous beyond the recognizer's bounds,
                                 the generation fails with GRAFT_ERANGE. Not with output_after
                                 or thought_budget. */
} graft_output_format;

/* Whether `schema` (len bytes of JSON) is a schema GRAFT_OUTPUT_JSON_SCHEMA can hold output
 * to: an object schema of the subset OpenAI's structured outputs and pydantic / zod write.
 * Supported: type (one or a list), properties and required (properties are generated in the
 * order listed; unlisted ones never), items, minItems and maxItems (up to 65534), enum and
 * const of scalars, anyOf of up to 64 alternatives, nested ones counted (those a value's
 * bytes have not yet told apart are followed together; where more than 16 would be open at
 * once, the ones listed later are not), oneOf whose alternatives no value can match together
 * as far as the first byte (object, array, string, number, boolean, null) or a tag (the same
 * first property in each, required, const or enum values no two share) tells, allOf of one
 * schema, $ref to "#" or into $defs / definitions, and on strings pattern (the ECMA-262
 * subset schemas use: classes, groups, alternation, quantifiers, anchors; no lookaround or
 * backreferences), format (date, time, date-time, uuid, ipv4, hostname, email, uri) or,
 * not both, and minLength / maxLength (code
 * points, at most 10000), and on numbers minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum and multipleOf; annotations (title, description, default, examples...) are
 * ignored. A typed number has at most 18 digits before its point, 18 after it and 2 in its
 * exponent (none when it is bounded). Any other keyword (uniqueItems, patternProperties,
 * not...) is refused: GRAFT_EINVAL with
 * *errmsg (when errmsg is not NULL; free with graft_free) naming the keyword and where it
 * is. GRAFT_ENOMEM. */
int graft_json_schema_check(const char *schema, size_t len, char **errmsg);

/* Whether `grammar` (len bytes) is a GBNF grammar GRAFT_OUTPUT_GRAMMAR can hold output to, in
 * llama.cpp's syntax: rules `name ::= alternatives` (names of letters, digits and '-'; the
 * output is held to `root`), alternatives separated by '|', string literals "..." and classes
 * [...] / [^...] with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, '.' for any
 * character, groups (...), the repetitions * + ? {m} {m,} {m,n} {,n} (counts up to 1000), and
 * '#' comments; a line break ends a rule except inside a group and after "::=" or '|'.
 * Characters are Unicode code points, the output strict UTF-8. GRAFT_EINVAL with *errmsg
 * (when errmsg is not NULL; free with graft_free) saying what and where (line and column, or
 * the rule): a syntax error, a rule used and not defined or defined twice, no rule root, left
 * recursion, token references (<...>), or a grammar too large. GRAFT_ENOMEM. */
int graft_grammar_check(const char *grammar, size_t len, char **errmsg);

typedef struct graft_generate_config {
    int32_t max_new_tokens;     /* tokens to sample at most (0: until the context is full) */
    const int32_t *stop_tokens; /* extra tokens that end the generation; copied */
    size_t n_stop_tokens;
    int32_t ignore_eog;         /* nonzero: the model's end-of-generation tokens do not stop */
    graft_sampling sampling;    /* with its own random state (the seed): results do not
                                   depend on what else is batched */
    const graft_logit_bias *logit_bias; /* added to the logits before sampling; copied */
    size_t n_logit_bias;
    const char *const *dry_sequence_breakers; /* with sampling.dry_multiplier above 0: DRY's
                                                 sequence breakers (graft_sampler_set_dry_
                                                 breakers); NULL: llama.cpp's
                                                 (graft_dry_default_breakers); non-NULL
                                                 with n 0: none */
    size_t n_dry_sequence_breakers;
    int32_t logprobs;     /* nonzero: each sampled token's log-probability is kept ... */
    int32_t top_logprobs; /* ... with the top_logprobs most likely tokens' (at most
                             GRAFT_MAX_TOP_LOGPROBS; these go with prompt_logprobs too) */
    int32_t prompt_logprobs; /* nonzero: each given token after the first gets its
                                log-probability given the tokens before it
                                (graft_generation_prompt_logprobs); every given token then
                                has logits computed, a step's logit rows bounding its chunk */
    int32_t prefill_only; /* nonzero: feed the tokens and sample none: the generation ends
                             (GRAFT_FINISH_LENGTH) once they are committed; max_new_tokens,
                             logprobs and the output format do not apply */
    graft_output_format output_format;
    const char *json_schema; /* GRAFT_OUTPUT_JSON_SCHEMA: the schema's JSON, json_schema_len
                                bytes (compiled at submission: GRAFT_EINVAL when
                                graft_json_schema_check refuses it) */
    size_t json_schema_len;
    const char *grammar; /* GRAFT_OUTPUT_GRAMMAR: the GBNF grammar, grammar_len bytes
                            (compiled at submission: GRAFT_EINVAL when graft_grammar_check
                            refuses it) */
    size_t grammar_len;
    const char *output_after; /* with a JSON output format, NULL or the text (1 to
                                 GRAFT_MAX_OUTPUT_AFTER bytes, NUL-terminated; copied) the
                                 format begins after, such as a thinking model's "</think>":
                                 until the output holds it, every token may be sampled but
                                 those without text (end of generation) and those whose
                                 bytes after it cannot begin the JSON text; the JSON text
                                 then follows as the format says. NULL: it begins at the
                                 first token. */
    const char *output_opens; /* with output_after, NULL or the text (1 to
                                 GRAFT_MAX_OUTPUT_AFTER bytes; copied), such as "<think>",
                                 that the free text opens with: the free text is then
                                 optional, the output beginning (after white space a JSON
                                 text may begin with) with this text, or with the JSON text
                                 at once. NULL: the free text begins at the first token. */
    int32_t thought_budget;    /* > 0: a thinking model's thought is closed once the output
                                  has this many tokens (those of the thought's opening text
                                  included) and the thought is still open: the next tokens are
                                  a line break and thought_close, tokenized with special
                                  tokens, given out (reported, with their log-probabilities)
                                  in place of sampled ones, without a draw from the sampler;
                                  sampling goes on after them. Where they would not all fit
                                  before max_new_tokens, they begin sooner and end at it, so
                                  a thought under a budget below max_new_tokens always
                                  closes. 0: no budget. */
    const char *thought_close; /* with thought_budget: the closing tag (1 to
                                  GRAFT_MAX_OUTPUT_AFTER bytes; copied), such as "</think>" */
    const char *thought_opens; /* with thought_budget, NULL or the text (such as "<think>") the
                                  output opens the thought with, after white space: an output
                                  that begins otherwise has no thought and no budget. NULL:
                                  the output begins inside the thought (the prompt opened it). */
} graft_generate_config;

#define GRAFT_MAX_OUTPUT_AFTER 32

#define GRAFT_MAX_TOP_LOGPROBS 20

/* max_new_tokens 0, no stop tokens, graft_sampling_default(), GRAFT_OUTPUT_TEXT. */
graft_generate_config graft_generate_default(void);

/* Called on the engine thread with newly sampled tokens (borrowed for the call). */
typedef void (*graft_update_cb)(graft_generation *gen, const int32_t *tokens, size_t n,
                                void *user);
/* Called on the engine thread exactly once per generation, whatever the outcome, after
 * which the generation is done (its results are final before the call). */
typedef void (*graft_settled_cb)(graft_generation *gen, void *user);

/* METHOD: graft_session. Queues a generation: feeds `tokens` (n >= 1, copied), the suffix
 * after the committed position, in chunks under the per-step budget, then samples a token
 * per step, feeding each back before sampling the next. Tokens are committed as they are fed
 * back. A session runs one generation at a time: a second one fails (GRAFT_EINVAL). Either
 * callback may be NULL. *out receives a handle (the caller frees it with
 * graft_generation_free). Any thread, callback-safe. Errors (no handle, no callback):
 * GRAFT_EINVAL (NULL argument, n < 1, a token out of the vocabulary, bad sampling),
 * GRAFT_ERANGE (n above max_context), GRAFT_ENOMEM, GRAFT_ESHUTDOWN. Once queued, failures
 * arrive as the finish reason: the committed position plus n beyond max_context fails with
 * GRAFT_ERANGE; a session closed before the generation was admitted settles it cancelled
 * with GRAFT_ECLOSED.
 *
 * KV room: a generation starts (takes its first step) only when the pool can hold all it may
 * still write, [position, position + prompt + max_new_tokens) capped at max_context, on top
 * of what the generations already started may still write; started generations are thus
 * never starved by later ones. Until then it waits, in arrival order, while the engine asks
 * the reclaim hooks (a prefix cache's) to give KV back; after kv_wait_ms of waiting, or at
 * once when it could never fit in the whole pool, it fails with GRAFT_ECAPACITY. A step that
 * fails fails only its own generations (memory) and leaves their sessions at their
 * committed position; one of them cancelled meanwhile settles cancelled. */
int graft_session_generate(graft_session *session, const int32_t *tokens, size_t n,
                           const graft_generate_config *config, graft_update_cb on_update,
                           graft_settled_cb on_settled, void *user, graft_generation **out);

/* Waits until the generation is done (on_settled has returned) and returns its status:
 * GRAFT_OK (stop, length), GRAFT_ECANCELLED, GRAFT_ESHUTDOWN, or the failure's code. Any
 * thread; from a callback GRAFT_EINVAL unless already done. */
int graft_generation_wait(graft_generation *gen);
/* Asks the generation to stop; it settles cancelled before the next step that would have
 * included it. Tokens already committed stay committed (a cancelled prompt leaves the prefix
 * it consumed). Any thread, callback-safe (an atomic flag). */
void graft_generation_cancel(graft_generation *gen);
/* Nonzero once done. Any thread, callback-safe. */
int graft_generation_done(const graft_generation *gen);
/* GRAFT_FINISH_NONE until done. Any thread. */
graft_finish graft_generation_finish_reason(const graft_generation *gen);
/* Once done: the status as graft_generation_wait returns it, and a message (borrowed, valid
 * until graft_generation_free; NULL when the status is GRAFT_OK). */
int graft_generation_status(const graft_generation *gen);
const char *graft_generation_error(const graft_generation *gen);
/* Once done: the tokens sampled, stop token excluded (borrowed, valid until
 * graft_generation_free). */
const int32_t *graft_generation_tokens(const graft_generation *gen, size_t *n);

typedef struct graft_token_logprob {
    int32_t token;
    float logprob;
} graft_token_logprob;

/* The log-probabilities kept for sampled token `index` (0: the first reported): *entries
 * (borrowed, valid until graft_generation_free) holds *n = 1 + top_logprobs of them, the
 * token itself first, then the most likely tokens in descending order (equal ones: lower
 * id first). They are the log-softmax of the logits as the model gave them, before logit
 * biases, penalties and temperature, and like the tokens they do not depend on what else
 * is batched. Readable in the on_update call that reports the token and after it on the
 * engine thread, and on any thread once done. GRAFT_EINVAL: logprobs were not asked for,
 * or no such token was reported. */
int graft_generation_logprobs(const graft_generation *gen, size_t index,
                              const graft_token_logprob **entries, size_t *n);

/* With config.prompt_logprobs: the log-probabilities of given token index + 1 (the first
 * given token has none: the logits before it are not at hand), in graft_generation_logprobs'
 * shape and with its guarantees. Readable on any thread once the last given token is
 * committed: in the on_update call of the first sampled token and after it, or once done.
 * GRAFT_EINVAL: prompt logprobs were not asked for, index + 1 is not a given token, or the
 * tokens are not all committed yet (a generation that failed or was cancelled before). */
int graft_generation_prompt_logprobs(const graft_generation *gen, size_t index,
                                     const graft_token_logprob **entries, size_t *n);

typedef struct graft_generation_metrics {
    uint64_t queue_wait_ns;          /* submission to the start of its first step */
    uint64_t time_to_first_token_ns; /* submission to first sampled token */
    int32_t prompt_tokens;           /* tokens given */
    int32_t prompt_tokens_computed;  /* of them, fed through the model so far */
    int32_t prompt_tokens_reused;    /* committed tokens already in the session's KV when
                                        admitted (not recomputed) */
    int32_t generated_tokens;        /* tokens sampled, stop token included */
    uint64_t kv_wait_ns;             /* time it waited for KV room before it started */
    double prefill_tokens_per_s;     /* computed prompt tokens / (first token - first step) */
    double decode_tokens_per_s;      /* (generated - 1) / (last token - first token) */
    uint64_t inter_token_mean_ns;    /* mean gap between sampled tokens */
    uint64_t inter_token_max_ns;
} graft_generation_metrics;

/* The metrics so far (final once done). Any thread, callback-safe. */
void graft_generation_metrics_get(graft_generation *gen, graft_generation_metrics *out);

/* DESTRUCTOR: graft_generation. Drops the caller's reference; a generation not yet done is
 * cancelled first (its callbacks still run). Any thread, callback-safe (on_settled may free
 * its own generation). NULL is fine. */
void graft_generation_free(graft_generation *gen);

/* ---------------------------------------------------------------------------------------
 * Engine queries for caches. A cache above the engine (the prefix cache below, a server's
 * reuse policy) keeps sessions as snapshots; these let it identify sessions across handle
 * reuse, back off to a clonable boundary, and measure what its snapshots cost.
 */

/* METHOD: graft_session. The session's id: unique among the sessions an engine ever opened
 * or cloned (never reused), so it identifies a session where a handle (a pointer, whose
 * memory may be reused after a close) cannot. Any thread, callback-safe, while the handle is
 * valid. */
uint64_t graft_session_id(const graft_session *session);

/* METHOD: graft_generation. The session the generation was queued on (borrowed). It is open
 * at least while the generation's on_update and on_settled run (when on_settled runs from the
 * session's close, it is closed right after); from another thread or after the generation
 * settled it may be closed, and then the handle must not be used. Any thread,
 * callback-safe. */
graft_session *graft_generation_session(const graft_generation *gen);

/* METHOD: graft_session. The longest boundary b <= upto at which graft_session_clone would
 * not be refused for retention (GRAFT_ERETENTION) given the session's state now: upto itself
 * when its sliding-window KV is there, 0 at worst (a clone at 0 is always possible). On a
 * model without sliding windows it is upto. Blocking (it waits for the engine thread); any
 * thread, not callbacks (GRAFT_EINVAL). Errors: GRAFT_EINVAL (NULL argument),
 * GRAFT_EBOUNDARY (upto outside [0, position]), GRAFT_ECLOSED, GRAFT_ESHUTDOWN; *boundary is
 * then -1. */
int graft_session_retained_boundary(graft_session *session, int32_t upto, int32_t *boundary);

/* METHOD: graft_engine. *bytes receives the KV bytes of the blocks referenced by the given
 * sessions and by no other session: what closing all of them would give back to the pool.
 * A block shared with any session outside the set counts nothing, so the figure grows when
 * such a sharer closes. The sessions must be distinct open sessions of this engine.
 * O(KV blocks of the set) on the engine thread. Any thread: from other threads blocking,
 * from a callback computed directly. Errors: GRAFT_EINVAL (NULL argument, a session of
 * another engine), GRAFT_ENOMEM, GRAFT_ECLOSED (one was closed before the request ran),
 * GRAFT_ESHUTDOWN; *bytes is then 0. */
int graft_engine_kv_exclusive_bytes(graft_engine *engine, graft_session *const *sessions,
                                    size_t n, int64_t *bytes);

/* Reclaim hooks: a cache above the engine that holds KV only as an optimisation (the prefix
 * cache's snapshots) registers one, and the engine calls it, on its thread, when a
 * generation has to wait for KV room, once per step while any waits; bytes_short is the KV
 * the first waiting generation lacks. The hook must not block: it gives KV back by closing
 * sessions it owns (graft_session_close: the closes run before the next step), and returns
 * at once when it has nothing to give. */
typedef void (*graft_reclaim_cb)(graft_engine *engine, int64_t bytes_short, void *user);
/* METHOD: graft_engine. Registers (cb, user). Blocking; any thread, not callbacks
 * (GRAFT_EINVAL). Errors: GRAFT_EINVAL (NULL argument), GRAFT_ENOMEM, GRAFT_ESHUTDOWN. */
int graft_engine_reclaim_add(graft_engine *engine, graft_reclaim_cb cb, void *user);
/* Removes the registration of (cb, user); once it returns the hook never runs again.
 * Blocking; any thread, not callbacks (GRAFT_EINVAL). GRAFT_ENOTFOUND when not registered,
 * GRAFT_ESHUTDOWN while the engine shuts down (no hook runs then). */
int graft_engine_reclaim_remove(graft_engine *engine, graft_reclaim_cb cb, void *user);

/* ---------------------------------------------------------------------------------------
 * The prefix cache: snapshot sessions of prompts already computed, indexed by their tokens
 * (DESIGN.md §3). lookup hands out a clone of the longest usable snapshot; since clones
 * share KV blocks, a snapshot costs only the blocks no live session holds.
 *
 * Typical use, for a prompt `tokens` of n tokens:
 *     graft_session *s; int32_t matched;
 *     if (graft_prefix_cache_lookup(cache, tokens, n, &s, &matched) != GRAFT_OK)
 *         graft_session_open(engine, &s, NULL), matched = 0;      (a miss: start cold)
 *     graft_prompt_capture *cap;
 *     graft_prompt_capture_create(cache, s, tokens, n, &cap);
 *     graft_update_cb up = my_update; graft_settled_cb st = my_settled; void *u = me;
 *     graft_prompt_capture_wrap(cap, &up, &st, &u);
 *     graft_session_generate(s, tokens + matched, n - matched, &config, up, st, u, &gen);
 *     graft_generation_wait(gen);
 *     graft_prompt_capture_collect(cap);           (inserts the prompt's snapshot)
 *     graft_prompt_capture_free(cap);
 *
 * Ownership: a snapshot given to graft_prefix_cache_insert belongs to the cache from the
 * call on, whatever it returns (kept, or closed at once). A session returned by lookup is a
 * new clone that belongs to the caller, who closes it; the cache never touches it again, so
 * the cache and the sessions it handed out may be closed in any order. Evicting, clearing or
 * destroying closes only the cache's own snapshots: a live session sharing their KV blocks
 * keeps its own references and is never disturbed.
 *
 * Bounds: at most max_entries snapshots, and at most max_bytes of KV held by the cache alone
 * (graft_engine_kv_exclusive_bytes of its snapshots). When an insert goes beyond either,
 * the least recently used snapshots are evicted (a hit or a duplicate insert makes a snapshot
 * the most recently used). The byte figure grows without an insert when live sessions that
 * shared the cache's blocks close (a snapshot usually starts out sharing all its blocks with
 * the session it was cloned from); it is measured and enforced at each insert and by
 * graft_prefix_cache_trim, which a caller may run after closing sessions. Snapshots are
 * sessions, so they count against the engine's max_sessions. The index itself (4 bytes per
 * key token, plus nodes) is ordinary memory, not counted in max_bytes.
 *
 * Giving back: the cache registers a reclaim hook with its engine (graft_engine_reclaim_add):
 * when a generation waits for KV room, the least recently used snapshots no lookup is using
 * are evicted until what they held alone covers the shortfall (counted in evictions and
 * reclaim_evictions), before any generation fails for KV.
 *
 * Threads: the cache may be used from any number of threads at once (an internal mutex
 * guards it, never held while waiting for the engine), but not from an engine callback:
 * lookup, stats, trim, collect and insert with max_bytes wait for the engine thread, which a
 * callback would deadlock; they return GRAFT_EINVAL there (an insert closes its snapshot).
 * An insert without a byte bound may be made from a callback.
 * graft_prefix_cache_free must not race with any other call on the same cache.
 *
 * Lifetimes: the engine must outlive the cache: destroy the cache (and free its captures)
 * before graft_engine_free, which would otherwise close its snapshots under it.
 * CONSTRUCTOR: graft_prefix_cache_create   DESTRUCTOR: graft_prefix_cache_free
 */
typedef struct graft_prefix_cache graft_prefix_cache;

/* A cache on `engine` holding at most max_entries snapshots (0: disabled, every insert
 * closes its snapshot) and at most max_bytes of KV held by the cache alone (0: no byte
 * bound). Any thread. Errors: GRAFT_EINVAL (NULL argument, max_entries < 0), GRAFT_ENOMEM;
 * on failure nothing is left to free. */
int graft_prefix_cache_create(graft_engine *engine, int32_t max_entries, size_t max_bytes,
                              graft_prefix_cache **out, char **errmsg);

/* DESTRUCTOR. Closes every snapshot the cache holds (queued closes; it does not wait) and
 * frees the cache. Sessions handed out by lookup stay open. NULL is fine. Any thread but
 * engine callbacks; no other call on this cache may run or follow. */
void graft_prefix_cache_free(graft_prefix_cache *cache);

/* Closes every snapshot the cache holds; the cache stays usable and its counters stay.
 * Sessions handed out by lookup stay open. Any thread but engine callbacks. */
void graft_prefix_cache_clear(graft_prefix_cache *cache);

/* Finds the snapshot sharing the longest usable prefix with tokens[0, n) and clones it.
 * Usable: a snapshot whose key shares m tokens with the query offers min(m, n - 1) tokens
 * (the last prompt token always gets a fresh forward pass, for fresh logits). Longer offers
 * are tried first; equal offers the most recently used first. A clone refused for retention
 * (a sliding-window model, boundary inside the snapshot) is retried at the longest shorter
 * boundary that snapshot still retains (graft_session_retained_boundary), ranked with the
 * other offers, before any shorter offer. On a hit, *out receives the clone (the caller owns
 * it and closes it; its position is *matched) and the snapshot becomes the most recently
 * used. Blocking (one engine round trip per clone attempt); any thread, not callbacks.
 * Returns GRAFT_OK (hit) or the reason of the miss, counted in the stats (*out NULL,
 * *matched 0; compute the prompt cold): GRAFT_ENOTFOUND (no snapshot shares a usable
 * prefix), GRAFT_ERETENTION (every offer was refused for retention), GRAFT_ECAPACITY (the
 * engine has max_sessions open), GRAFT_ENOMEM, GRAFT_ESHUTDOWN. GRAFT_EINVAL (not counted):
 * NULL argument, or called from a callback (refused by the engine at the first clone). A
 * miss changes nothing in the cache. */
int graft_prefix_cache_lookup(graft_prefix_cache *cache, const int32_t *tokens, size_t n,
                              graft_session **out, int32_t *matched);

/* Gives the cache `snapshot`, a session whose committed history is tokens[0, n) (checked
 * against graft_session_tokens, so that no bookkeeping error can file KV under the wrong
 * key) and that nothing else uses: the caller must not use the handle after this call.
 * Then, while a bound is exceeded, evicts the least recently used snapshots. With max_bytes
 * set it measures the bytes through the engine (blocking; a measurement that fails, for
 * memory, leaves the bound to the next insert). Any thread; from a callback only without a
 * byte bound. Returns:
 *   GRAFT_OK        kept (the most recently used); or the key was already cached: that
 *                   snapshot becomes the most recently used and `snapshot` is closed;
 *   GRAFT_EINVAL    NULL cache or tokens, n < 1, the snapshot's tokens are not tokens[0, n),
 *                   or called from a callback with max_bytes set: `snapshot` is closed, the
 *                   cache is unchanged (an entry already cached for the key stays);
 *   GRAFT_EBOUNDARY the snapshot's position is not n: closed likewise;
 *   GRAFT_ECAPACITY the cache is disabled (max_entries 0), or the snapshot was evicted at
 *                   this insert (it alone held more than max_bytes, or it was the last one
 *                   over the bound): closed;
 *   GRAFT_ENOMEM    closed, the cache unchanged;
 *   GRAFT_ECLOSED   the snapshot was closed already (a caller's error): nothing to close.
 * A NULL snapshot is GRAFT_EINVAL. */
int graft_prefix_cache_insert(graft_prefix_cache *cache, const int32_t *tokens, size_t n,
                              graft_session *snapshot);

/* Enforces the byte bound now: measures the KV the snapshots hold alone and evicts the least
 * recently used ones while it exceeds max_bytes (nothing to do without a byte bound).
 * Blocking; any thread, not callbacks. Returns the measurement's status: GRAFT_OK,
 * GRAFT_EINVAL (NULL cache, or called from a callback), GRAFT_ENOMEM, GRAFT_ESHUTDOWN. */
int graft_prefix_cache_trim(graft_prefix_cache *cache);

typedef struct graft_prefix_cache_stats {
    int32_t entries;             /* snapshots held */
    int64_t bytes;               /* KV bytes held by the snapshots alone, measured now */
    uint64_t lookups;            /* lookups that ran (not GRAFT_EINVAL) */
    uint64_t hits;
    uint64_t hit_tokens;         /* matched tokens over all hits */
    uint64_t misses_no_match, misses_retention, misses_capacity, misses_nomem,
        misses_shutdown;         /* misses, by the status lookup returned */
    uint64_t retention_refusals; /* clones refused for retention during lookups (each one
                                    was retried shorter or passed to the next offer) */
    uint64_t inserts;            /* snapshots kept */
    uint64_t inserts_duplicate;  /* keys already cached (recency refreshed) */
    uint64_t inserts_refused;    /* invalid, disabled, too large or out of memory */
    uint64_t evictions;          /* snapshots closed to respect a bound or to give KV back */
    uint64_t reclaim_evictions;  /* of them, closed because a generation waited for KV room */
    uint64_t captures;           /* prompt captures collected that inserted a snapshot */
    uint64_t captures_missed;    /* collected with nothing to insert */
} graft_prefix_cache_stats;

/* A consistent copy of the counters; `bytes` is measured through the engine (blocking).
 * Any thread, not callbacks. Errors: GRAFT_EINVAL, GRAFT_ENOMEM, GRAFT_ESHUTDOWN (then
 * bytes is 0 and the rest is filled). */
int graft_prefix_cache_stats_get(graft_prefix_cache *cache, graft_prefix_cache_stats *out);

/* Writes the cache's snapshots to the folder `dir` (which must exist), one file each
 * (prefix-<engine's kv_fingerprint>-<hash of the key>.kv, graft_session_save), so that
 * graft_prefix_cache_load can read them back after a restart. A snapshot whose key another
 * snapshot's key extends is not written (the longer one serves its lookups). Files with the
 * engine's fingerprint that the save did not write are removed; files of other models,
 * kernel sets or KV types, and other files, are left alone. *saved (may be NULL): files
 * written. Blocking
 * (an engine round trip per snapshot, each one stalling generations for its I/O: meant for
 * shutdown); any thread, not callbacks. Errors: GRAFT_EINVAL, GRAFT_ENOMEM, and the first
 * save's failure (GRAFT_EIO: the message names the file), which ends the save. */
int graft_prefix_cache_save(graft_prefix_cache *cache, const char *dir, int32_t *saved,
                            char **errmsg);

/* Reads every file graft_prefix_cache_save wrote in `dir` with the engine's kv_fingerprint
 * into a new session and inserts it (graft_session_load, graft_prefix_cache_insert). Files
 * the engine or the cache refuses (damaged, no room, the cache's bounds) are skipped:
 * *loaded and *refused count them, and *errmsg (may be NULL) receives the first refusal's
 * reason (NULL when none). Blocking; any thread, not callbacks. Errors: GRAFT_EINVAL,
 * GRAFT_EIO (the folder cannot be read). */
int graft_prefix_cache_load(graft_prefix_cache *cache, const char *dir, int32_t *loaded,
                            int32_t *refused, char **errmsg);

/* ---------------------------------------------------------------------------------------
 * Prompt capture: snapshots a generation's prompt for the cache at the exact moment it is
 * complete. The wrapped on_update, at the generation's first update with tokens (on the
 * engine thread), queues one clone of the session at the full-prompt boundary n, before it
 * calls the caller's on_update: the clone runs before the next forward pass (so a
 * sliding-window model still has the window of position n) and before any close or cancel
 * the caller's callback queues. It never blocks. collect, on the caller's thread, inserts the
 * snapshot into the cache. A prefill that fails or is cancelled gives no update, so nothing
 * is captured.
 *
 * The capture is bound to the session's identity (graft_session_id), read at create: the
 * caller may move, copy or close its session handle afterwards. The clone is only taken when
 * the generation's session is that session and its committed position at the first update
 * is n (tokens[0, n) is then what it holds, when the caller passed its history); otherwise
 * the capture misses. A generation whose first sampled token stops it gives no update; its
 * session then holds exactly the prompt, and the clone is queued when it settles.
 *
 * Lifetimes: the capture is the `user` of the wrapped callbacks, so it must stay alive until
 * the generation settled (or graft_session_generate refused it); collect and free come after.
 * A clone still in flight when the capture is freed is closed when it arrives. Free every
 * capture before graft_engine_free.
 * CONSTRUCTOR: graft_prompt_capture_create   DESTRUCTOR: graft_prompt_capture_free
 */
typedef struct graft_prompt_capture graft_prompt_capture;

/* A capture of tokens[0, n) (copied; n >= 1), the full prompt (history and suffix) of the
 * next generation on `session`, for `cache`. Any thread. Errors: GRAFT_EINVAL (NULL argument,
 * n < 1 or above INT32_MAX), GRAFT_ENOMEM; on failure *out is NULL. */
int graft_prompt_capture_create(graft_prefix_cache *cache, graft_session *session,
                                const int32_t *tokens, size_t n, graft_prompt_capture **out);

/* Replaces the caller's callbacks and user pointer (in: the caller's, either callback may be
 * NULL; out: the capture's wrappers and the capture) for graft_session_generate; the
 * wrappers call the caller's callbacks with the caller's user pointer. Once per capture:
 * GRAFT_EINVAL (nothing changed) for a NULL argument or a second call. Any thread. */
int graft_prompt_capture_wrap(graft_prompt_capture *capture, graft_update_cb *on_update,
                              graft_settled_cb *on_settled, void **user);

/* After the generation settled: waits for the clone the capture queued, if any (it is
 * answered within one engine step), and inserts it into the cache
 * (graft_prefix_cache_insert). Returns insert's status when there was a snapshot; otherwise
 * the reason nothing was captured: GRAFT_ENOTFOUND (no update with tokens came: the
 * generation failed, was cancelled before its first token, or was never queued),
 * GRAFT_EBOUNDARY (the session or its position did not match), or the clone's refusal
 * (GRAFT_ECAPACITY, GRAFT_ENOMEM, GRAFT_ECLOSED: the session was closed before the clone
 * ran, GRAFT_ESHUTDOWN). Once per capture: a later call, or an update after it, does nothing
 * (GRAFT_EINVAL for a second call). Any thread but engine callbacks (GRAFT_EINVAL there,
 * nothing changed); the cache must still exist. */
int graft_prompt_capture_collect(graft_prompt_capture *capture);

/* DESTRUCTOR. Frees the capture; a snapshot not collected is closed (now, or when its clone
 * arrives). NULL is fine. Any thread, callback-safe (the generation's own on_settled may
 * free it: that is the wrappers' last use of it). */
void graft_prompt_capture_free(graft_prompt_capture *capture);

/* ---------------------------------------------------------------------------------------
 * Chat templates: the Jinja template a chat model's GGUF carries (tokenizer.chat_template)
 * turns a conversation into the prompt text the model was trained on. graft renders it as
 * Hugging Face does (Python's jinja2 in an ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks and loop controls; tojson is json.dumps; raise_exception and strftime_now
 * as globals), byte for byte. See README "Chat templates" for the language covered.
 *
 * A parsed template is immutable: it may be rendered from any number of threads at once.
 * Rendering is bounded (steps, macro nesting, output size, memory), so a hostile template in
 * a GGUF ends with an error, never a hang or an exhausted process.
 * CONSTRUCTOR: graft_template_parse   DESTRUCTOR: graft_template_free
 */
typedef struct graft_template graft_template;

/* Parses `len` bytes of template text. Errors: GRAFT_EFORMAT (a syntax error, an unknown
 * filter or test, an unsupported tag: the message starts "line L, column C: "),
 * GRAFT_ENOMEM. On failure *out is NULL and nothing is left to free. */
int graft_template_parse(const char *text, size_t len, graft_template **out, char **errmsg);

/* DESTRUCTOR. NULL is fine. */
void graft_template_free(graft_template *tmpl);

/* Limits and the clock of a render. All zero: the defaults. */
typedef struct graft_template_options {
    int64_t now;         /* strftime_now's time: Unix seconds, formatted as UTC (0: the
                            current local time, as Hugging Face does) */
    size_t max_output;   /* bytes of any text the render builds (0: 16 MiB) */
    size_t max_memory;   /* bytes the render may allocate (0: 256 MiB) */
    uint64_t max_steps;  /* loop iterations and macro calls, plus long scans (`in` over a
                            list: a step per 16 items) (0: 1,000,000) */
    int32_t max_depth;   /* macro calls nested (0: 100) */
} graft_template_options;

/* Renders the template with the variables of `json` (json_len bytes of a JSON object:
 * messages, tools, add_generation_prompt, bos_token, eos_token and any other variable the
 * template reads, such as enable_thinking; objects keep their key order). opts may be NULL.
 * On success *out (free with graft_free) holds the text, NUL-terminated, and *out_len
 * (when not NULL) its length in bytes. Errors, with *out NULL:
 *   GRAFT_EINVAL     the JSON is malformed or not an object ("input: ..."), or the template
 *                    failed on this input: raise_exception(msg), a type error, an
 *                    undefined value used (all "line L, column C: " then the reason;
 *                    for raise_exception the reason is msg itself);
 *   GRAFT_ECAPACITY  a limit of opts was reached;
 *   GRAFT_ERANGE     an integer overflowed 64 bits, or range() went over 100000 items;
 *   GRAFT_EUNSUPPORTED  a construct graft does not implement (named in the message);
 *   GRAFT_ENOMEM     (the JSON is parsed by jansson, whose own allocations are outside
 *                    graft's allocation hooks: a failure there reads as "input: ...").
 * Any thread; the template is not modified. */
int graft_template_render(const graft_template *tmpl, const char *json, size_t json_len,
                          const graft_template_options *opts, char **out, size_t *out_len,
                          char **errmsg);

/* The template to use when a model has none: ChatML, as llama.cpp uses then. Static text,
 * NUL-terminated. */
const char *graft_template_default(void);

/* What a model's chat template needs from the model. Strings are borrowed from the model
 * (valid until graft_model_free) and NUL-terminated. */
typedef struct graft_model_chat {
    const char *chat_template; /* tokenizer.chat_template, or NULL when the GGUF has none */
    const char *bos_text;      /* the BOS token's text ("<s>", "<|endoftext|>"), "" if none */
    const char *eos_text;      /* the EOS token's text, "" if none */
} graft_model_chat;

/* METHOD: graft_model. Fills *chat. Any thread. */
void graft_model_get_chat(const graft_model *model, graft_model_chat *chat);

#ifdef __cplusplus
}
#endif
#endif /* GRAFT_H */
