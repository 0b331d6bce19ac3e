/*
 * reference.h: an independent, double-precision reference forward pass for tests.
 *
 * It exists so that graft's real forward pass (src/model/) can be checked against separate,
 * obviously-correct code written from the same specification (docs/architectures.md: the
 * llama.cpp GGUF conventions for llama, qwen2, qwen3 and gemma3). It shares nothing with the
 * real forward pass except the GGUF reader: weights are converted to double here (F32, F16,
 * BF16 only), and every step runs in double, one token at a time, with plain loops.
 *
 * Anything the reference does not support (another architecture, a quantized tensor, a
 * tensor it does not know, an unknown rope scaling) is refused with GRAFT_EUNSUPPORTED rather
 * than computed wrongly.
 *
 * CONSTRUCTOR: ref_model_load   DESTRUCTOR: ref_model_free
 */
#ifndef GRAFT_TEST_REFERENCE_H
#define GRAFT_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

typedef enum ref_arch { REF_ARCH_LLAMA, REF_ARCH_QWEN2, REF_ARCH_QWEN3, REF_ARCH_GEMMA3 } ref_arch;

/* Hyperparameters, read from the GGUF keys of the file. */
typedef struct ref_config {
    ref_arch arch;
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_ff;
    int n_head;
    int n_head_kv;
    int head_dim;         /* width of each query and key head */
    int head_dim_v;       /* width of each value head */
    int rope_dims;        /* leading dims of each head that RoPE rotates */
    double rms_eps;
    double rope_base;     /* global layers */
    double rope_base_swa; /* gemma3 sliding-window layers */
    double rope_scale;    /* positions are multiplied by this in global layers (1/linear factor) */
    int sliding_window;   /* gemma3: keys a sliding-window layer sees, itself included; else 0 */
    int swa_pattern;      /* gemma3: layer il is global when (il+1) % swa_pattern == 0 */
    double final_softcap; /* 0: none */
} ref_config;

/* One block's weights as doubles, matrices row-major (out, in). NULL for weights the
 * architecture does not have. */
typedef struct ref_layer {
    double *attn_norm;      /* (n_embd) */
    double *wq;             /* (n_head*head_dim, n_embd) */
    double *wk;             /* (n_head_kv*head_dim, n_embd) */
    double *wv;             /* (n_head_kv*head_dim_v, n_embd) */
    double *bq, *bk, *bv;   /* qwen2 (or any file holding them): biases of q, k, v */
    double *q_norm, *k_norm; /* qwen3, gemma3: (head_dim) */
    double *wo;             /* (n_embd, n_head*head_dim_v) */
    double *post_attn_norm; /* gemma3: (n_embd) */
    double *ffn_norm;       /* (n_embd) */
    double *w_gate;         /* (n_ff, n_embd) */
    double *w_up;           /* (n_ff, n_embd) */
    double *w_down;         /* (n_embd, n_ff) */
    double *post_ffw_norm;  /* gemma3: (n_embd) */
} ref_layer;

typedef struct ref_model {
    ref_config config;
    double *token_embd;  /* (n_vocab, n_embd) */
    double *output_norm; /* (n_embd) */
    double *output;      /* (n_vocab, n_embd); points at token_embd when the file ties them */
    double *rope_freqs;  /* (rope_dims/2) divisors of the rope frequencies, or NULL */
    ref_layer *layers;   /* (n_layer) */
} ref_model;

/* Reads the GGUF file at `path` and converts its weights to double. Returns GRAFT_OK, or a
 * graft_status error (GRAFT_EUNSUPPORTED for what the reference does not do) with a message in
 * *errmsg (free with graft_free) when errmsg is not NULL. A failed load leaves nothing to free. */
int ref_model_load(const char *path, ref_model **out, char **errmsg);
void ref_model_free(ref_model *model);

/* Which keys a sliding-window layer attends to. REF_MASK_MODEL follows the file (the window
 * in gemma3's sliding-window layers); REF_MASK_FULL_CAUSAL lets every layer see every
 * earlier key (a deliberately wrong variant, for tests that must show the window matters). */
typedef enum ref_mask { REF_MASK_MODEL, REF_MASK_FULL_CAUSAL } ref_mask;

/* Runs the sequence tokens[0..n-1] from position 0 and writes the logits of every position:
 * logits is (n, n_vocab), row t for position t. GRAFT_EINVAL for n == 0 or a token out of
 * range, GRAFT_ENOMEM when the working memory cannot be allocated. */
int ref_forward(const ref_model *model, const int32_t *tokens, size_t n, double *logits);
int ref_forward_masked(const ref_model *model, const int32_t *tokens, size_t n, ref_mask mask,
                       double *logits);

#endif /* GRAFT_TEST_REFERENCE_H */
