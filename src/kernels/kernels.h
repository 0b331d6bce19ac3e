/*
 * kernels.h: the numeric kernels the forward pass is built from.
 *
 * Every kernel here is batch invariant (DESIGN.md invariant 1): the value computed for one
 * token or one output row does not depend on how many other tokens or rows are computed in
 * the same call, and reductions run in a fixed order. This file declares the plain scalar
 * reference versions; faster paths must keep the same interface and invariance.
 *
 * Shapes are written as (outer, inner) for row-major buffers: a weight matrix of a GGUF
 * tensor with ne = {n_in, n_out} is (n_out, n_in): n_out rows of n_in elements, each row
 * stored in its type's blocks.
 */
#ifndef GRAFT_KERNELS_H
#define GRAFT_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* Scalar conversions (IEEE half with subnormals; bfloat16 rounds to nearest even). */
float graft__f16_to_f32(uint16_t h);
uint16_t graft__f32_to_f16(float f);
float graft__bf16_to_f32(uint16_t b);
uint16_t graft__f32_to_bf16(float f);

/* Whether graft computes with weights of this type: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K. */
bool graft__type_is_supported(uint32_t type);

/* dst (n) = the n elements stored at src in `type`. n is a multiple of the block size. */
void graft__dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* dst (row bytes of n) = src (n) quantized to `type` (reference quantizers, round to
 * nearest, as the format defines; used by `graft synth` and tests).
 * GRAFT_EUNSUPPORTED for a type outside the supported list. */
int graft__quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* y (n_tok, n_out) = x (n_tok, n_in) times the transpose of w (n_out, n_in) of `type`:
 * y[t][o] = dot(w row o, x row t), each dot summed in element order. */
void graft__matmul(float *y, const void *w, uint32_t type, int64_t n_in, int64_t n_out,
                   const float *x, int64_t n_tok);

/* out (n) = x (n) / rms(x) * weight (n); out may alias x. */
void graft__rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps);

typedef enum graft__rope_layout {
    GRAFT_ROPE_ADJACENT, /* rotate pairs (x[2i], x[2i+1]): llama ("NORM" in ggml) */
    GRAFT_ROPE_HALVES    /* rotate pairs (x[i], x[i + d/2]): qwen2/3, gemma3 ("NEOX") */
} graft__rope_layout;

/* Rotates the first rot_dims of each of n_heads heads (head_dim apart) in x by position
 * pos: pair i turns by pos * freq_scale * base^(-2i/rot_dims) / freq_factors[i]
 * (freq_factors NULL means all 1). */
void graft__rope(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dims, int32_t pos,
                 float base, float freq_scale, const float *freq_factors,
                 graft__rope_layout layout);

/* x (n) = softmax(x), max-subtracted, summed in order. */
void graft__softmax(float *x, int64_t n);
/* x (n) = silu(x) * y (n)   (SwiGLU) */
void graft__swiglu(float *x, const float *y, int64_t n);
/* x (n) = gelu_tanh(x) * y (n)   (GeGLU with the tanh approximation) */
void graft__geglu(float *x, const float *y, int64_t n);
/* x (n) = cap * tanh(x / cap) */
void graft__softcap(float *x, int64_t n, float cap);

/* One query head against n_keys keys in absolute-position order:
 * out (head_dim) = sum_j softmax_j(scale * q.k_j) v_j, with k_j = keys[j], v_j = values[j]
 * (each head_dim floats). Softmax is computed online over fixed chunks of
 * GRAFT_ATTN_CHUNK keys, so the result depends only on the keys, not on the batch. */
#define GRAFT_ATTN_CHUNK 64
void graft__attend(float *out, const float *q, const float *const *keys,
                   const float *const *values, int64_t n_keys, int32_t head_dim, float scale);

#endif /* GRAFT_KERNELS_H */
