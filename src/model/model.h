/*
 * model.h: architectures, weights and the batched forward pass.
 *
 * A graft_model is a mapped GGUF file plus its hyperparameters (validated on load), the
 * weight tensors bound by name for its architecture, and its vocabulary. It is immutable
 * after loading, except for its packed weights, made once under a lock by the first
 * context or engine on a path that packs (model_pack.c).
 *
 * The forward pass runs a batch of (sequence, position, token) entries. It writes each
 * entry's K and V rows through a graft__kv interface, attends over that sequence's keys
 * [lo, pos] (lo > 0 only in sliding-window layers), and produces logits only for the
 * entries that ask for them. The model never sees how KV is stored: a simple per-sequence
 * store (src/kv/kv_simple.c) and the engine's paged, reference-counted pool both sit behind the
 * same interface.
 */
#ifndef GRAFT_MODEL_H
#define GRAFT_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

#define GRAFT_MAX_LAYERS 512

typedef enum graft__arch {
    GRAFT_ARCH_LLAMA,
    GRAFT_ARCH_QWEN2,
    GRAFT_ARCH_QWEN3,
    GRAFT_ARCH_GEMMA3
} graft__arch;

typedef struct graft__hparams {
    graft__arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;      /* key/query width per head */
    int32_t head_dim_v;    /* value width per head */
    int32_t n_ff;
    int32_t rope_dims;     /* rotated dims per head */
    graft__rope_layout rope_layout;
    float rope_base;       /* global layers */
    float rope_base_swa;   /* sliding-window layers */
    float rope_freq_scale; /* 1 / linear scaling factor (global layers) */
    float rms_eps;
    float attn_scale;      /* multiplies q.k */
    float embd_scale;      /* multiplies the token embedding (gemma: sqrt(n_embd)) */
    float final_softcap;   /* 0: none */
    int32_t sliding_window;            /* 0: none */
    bool layer_is_swa[GRAFT_MAX_LAYERS];
} graft__hparams;

/* A weight: a row-major matrix (rows, cols) of `type`, or a vector (rows = 1). A matrix
 * the model is packed for also has `packed`, its packed form of packed_type, which
 * forward passes on the packing path use instead of data (graft_model.packed_path). */
typedef struct graft__weight {
    const void *data;
    uint32_t type;
    int64_t cols; /* ne[0] */
    int64_t rows; /* ne[1] */
    const void *packed;   /* or NULL */
    uint32_t packed_type; /* GRAFT_TYPE_PACKED_BASE + ... (matmul_path.h) */
} graft__weight;

typedef struct graft__layer {
    graft__weight attn_norm, wq, wk, wv, wo;
    graft__weight bq, bk, bv;                 /* qwen2 biases (data NULL when absent) */
    graft__weight q_norm, k_norm;             /* qwen3, gemma3 (per head_dim) */
    graft__weight post_attn_norm;             /* gemma3 */
    graft__weight ffn_norm, w_gate, w_up, w_down;
    graft__weight post_ffn_norm;              /* gemma3 */
} graft__layer;

struct graft_model {
    graft__gguf *file;
    graft__hparams hp;
    graft__vocab *vocab;
    graft__weight tok_embd;    /* (n_vocab, n_embd) */
    graft__weight output_norm; /* (n_embd) */
    graft__weight output;      /* (n_vocab, n_embd); == tok_embd when tied */
    graft__weight rope_freqs;  /* llama3 frequency factors (rope_dims/2), or data NULL */
    graft__layer *layers;      /* n_layer */
    char *name;
    char *chat_template;       /* tokenizer.chat_template, or NULL */
    char *vocab_only_arch;     /* loaded for its tokenizer alone: general.architecture (no
                                  weights, no hyperparameters); NULL for a whole model */
    /* Packing (model_pack.c): the matmul path the weights are packed for (NULL until the
     * first context or engine on a packing path), the memory of the packed weights, and
     * the lock packers take. */
    const struct graft__matmul_path *_Atomic packed_path;
    void *packed_memory;
    pthread_mutex_t pack_lock;
};

/* One row of a forward batch. */
typedef struct graft__batch_entry {
    int32_t seq;      /* the KV store's sequence id */
    int32_t pos;      /* absolute position of this token in its sequence */
    int32_t token;
    bool want_logits; /* produce this row's logits */
} graft__batch_entry;

/* Where the forward pass keeps K and V. Rows hold n_head_kv * head_dim (K) and
 * n_head_kv * head_dim_v (V) elements of `type` (GRAFT_TYPE_F16 or GRAFT_TYPE_F32), one per
 * (layer, sequence, position).
 *   reserve: called once before a forward with the whole batch; makes every entry's
 *            (seq, pos) writable in every layer. Within one sequence, entries come in
 *            increasing position order and attend to positions written earlier or in the
 *            same batch. May refuse (GRAFT_ECAPACITY, GRAFT_ENOMEM): nothing is computed.
 *   k_row / v_row: the row of (layer, seq, pos); writable for batch positions, readable
 *            for every position the sequence holds (in sliding-window layers, at least the
 *            last `sliding_window` ones). */
typedef struct graft__kv {
    void *self;
    uint32_t type;
    int (*reserve)(void *self, const graft__batch_entry *entries, int32_t n);
    void *(*k_row)(void *self, int32_t layer, int32_t seq, int32_t pos);
    void *(*v_row)(void *self, int32_t layer, int32_t seq, int32_t pos);
} graft__kv;

/* Loads and validates a model (see graft_model_load). */
int graft__model_load(const char *path, struct graft_model **out, char **errmsg);
/* The tokenizer (and name, chat template) of any GGUF that carries one, vocab-only files
 * included: a model with no weights (vocab_only_arch set). */
int graft__model_load_vocab(const char *path, struct graft_model **out, char **errmsg);
void graft__model_free(struct graft_model *m);
/* Packs the matrices `path` has a packed form for, on pool's threads, unless the model is
 * packed already (for any path); drops the pages of their file copies. Safe to call from
 * any thread, at any time (model_pack.c). Errors: GRAFT_ENOMEM. */
int graft__model_pack(const struct graft_model *m, const struct graft__matmul_path *path,
                      graft__pool *pool, char **errmsg);
/* Whether the model's weights are packed for path (then forward passes on path use them). */
bool graft__model_packed_for(const struct graft_model *m, const struct graft__matmul_path *path);
const char *graft__arch_name(graft__arch arch);

/* Runs the batch on ex's threads and matmul path (ex->work is not used: the forward pass
 * sizes its own). logits (rows that want them, in entry order; n_vocab each).
 * Errors: GRAFT_EINVAL (token out of range, bad position), whatever kv->reserve refuses,
 * GRAFT_ENOMEM. On error nothing is written to logits. */
int graft__forward(const struct graft_model *m, const graft__exec *ex, graft__kv *kv,
                   const graft__batch_entry *entries, int32_t n, float *logits, char **errmsg);

/* Bytes of K and V of one position over every layer, in KV type kv_type (GRAFT_TYPE_F16 or
 * GRAFT_TYPE_F32): what the KV pool stores per position (model_api.c). */
size_t graft__model_kv_bytes_per_position(const graft__hparams *hp, uint32_t kv_type);

/* The first key position a query at `pos` reads in `layer`: 0, or in a sliding-window layer
 * the start of its window, pos - sliding_window + 1. The forward pass reads keys
 * [graft__model_first_key, pos]; the KV pool's retention rule (kv.h) keeps what it reads. */
int32_t graft__model_first_key(const graft__hparams *hp, int32_t layer, int32_t pos);

/* Buffers for forward passes of up to max_tokens entries at positions up to max_pos on ex's
 * threads and path, allocated and written once here, so that a caller running many passes
 * (the engine) holds its working memory from the start and allocates nothing per pass.
 * Errors: GRAFT_EINVAL, GRAFT_ENOMEM.
 * CONSTRUCTOR: graft__scratch_create   DESTRUCTOR: graft__scratch_free */
typedef struct graft__scratch graft__scratch;
int graft__scratch_create(const struct graft_model *m, const graft__exec *ex,
                          int32_t max_tokens, int32_t max_pos, graft__scratch **out);
void graft__scratch_free(graft__scratch *s);
/* graft__forward in the caller's scratch (the exec it was made for); GRAFT_EINVAL for a
 * batch beyond its sizes. Same results, bit for bit. */
int graft__forward_in(const struct graft_model *m, graft__scratch *s, graft__kv *kv,
                      const graft__batch_entry *entries, int32_t n, float *logits,
                      char **errmsg);

/* The llama3 rope-scaling frequency factors (rope_dims/2 of them), as `graft synth` writes
 * them into rope_freqs.weight (synth.c). */
void graft__synth_llama3_rope_factors(float *factors, int32_t rope_dims, double base,
                                      double factor, double low_freq_factor,
                                      double high_freq_factor, double original_ctx);

/* A simple KV store (src/kv/kv_simple.c): `n_seq` sequences of up to `n_ctx` positions each,
 * all contiguous, rows of `type` (GRAFT_TYPE_F16 or GRAFT_TYPE_F32).
 * CONSTRUCTOR: graft__kv_simple_create   DESTRUCTOR: graft__kv_simple_free */
typedef struct graft__kv_simple graft__kv_simple;
int graft__kv_simple_create(const graft__hparams *hp, int32_t n_seq, int32_t n_ctx,
                            uint32_t type, graft__kv_simple **out);
void graft__kv_simple_free(graft__kv_simple *s);
graft__kv graft__kv_simple_iface(graft__kv_simple *s);

#endif /* GRAFT_MODEL_H */
