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

#include "graft.h"
#include "gguf/gguf.h"

/* Scalar conversions (IEEE half with subnormals; bfloat16 rounds to nearest even). */
float graft__f16_to_f32(uint16_t h);
uint16_t graft__f32_to_f16(float f);
float graft__bf16_to_f32(uint16_t b);
uint16_t graft__f32_to_bf16(float f);

/* Whether graft computes with weights of this type: F32, F16, BF16 and the block types of
 * GRAFT_BLOCK_TYPES (quant_formats.h). */
bool graft__type_is_supported(uint32_t type);

/* dst (n) = the n elements stored at src in `type`. n is a multiple of the block size. */
void graft__dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Scale and min (6 bits each) of sub-block j (0..7) of a Q4_K/Q5_K block, from its 12
 * packed scale bytes (dequantize.c). */
void graft__scale_min_k4(const uint8_t *scales, int j, int *sc, int *m);

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
/* The same with AVX-512 (ops_avx512.c): a fixed order of sums that depends only on n, a
 * few ulp from the reference's; graft__rmsnorm_for picks one for a path. */
void graft__rmsnorm_avx512(float *out, const float *x, const float *weight, int64_t n,
                           float eps);
typedef void (*graft__rmsnorm_fn)(float *out, const float *x, const float *weight, int64_t n,
                                  float eps);

typedef enum graft__rope_layout {
    GRAFT_ROPE_ADJACENT, /* rotate pairs (x[2i], x[2i+1]): llama ("NORM" in ggml) */
    GRAFT_ROPE_HALVES    /* rotate pairs (x[i], x[i + d/2]): qwen2/3, gemma3 ("NEOX") */
} graft__rope_layout;

/* The rotation of position pos for rot_dims rotated dimensions: angle (rot_dims / 2) holds
 * the cosines, then the sines, of each pair's angle pos * freq_scale * base^(-2i/rot_dims)
 * / freq_factors[i] (freq_factors NULL means all 1), computed in double and rounded. They
 * depend only on the position and the model, so a forward pass computes them once per
 * entry for all its layers. */
void graft__rope_angles(float *angle, int32_t rot_dims, int32_t pos, float base,
                        float freq_scale, const float *freq_factors);
/* Rotates the first rot_dims of each of n_heads heads (head_dim apart) in x by the
 * rotation `angle` of graft__rope_angles. */
void graft__rope(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dims,
                 const float *angle, graft__rope_layout layout);

/* x (n) = softmax(x), max-subtracted, summed in order. */
void graft__softmax(float *x, int64_t n);
/* x (n) = silu(x) * y (n)   (SwiGLU) */
void graft__swiglu(float *x, const float *y, int64_t n);
/* The same with AVX-512 (ops_avx512.c), exp within 2 ulp of expf; graft__swiglu_for picks
 * one for a path. */
void graft__swiglu_avx512(float *x, const float *y, int64_t n);
typedef void (*graft__swiglu_fn)(float *x, const float *y, int64_t n);
/* x (n) = gelu_tanh(x) * y (n)   (GeGLU with the tanh approximation) */
void graft__geglu(float *x, const float *y, int64_t n);
/* x (n) = cap * tanh(x / cap) */
void graft__softcap(float *x, int64_t n, float cap);

/* n_q query heads that share their keys (a GQA group), against n_keys keys in
 * absolute-position order: for each head h,
 * out[h] (head_dim) = sum_j softmax_j(scale * q[h].k_j) v_j, with k_j = keys[j] and
 * v_j = values[j] (each head_dim elements of kv_type: GRAFT_TYPE_F16 or GRAFT_TYPE_F32).
 * Softmax is computed online over fixed chunks of GRAFT_ATTN_CHUNK keys, so each head's
 * result depends only on its query and the keys, not on the batch or on n_q. out must not
 * overlap q. This is the scalar reference; each kernel path has its own (matmul_path.h). */
#define GRAFT_ATTN_CHUNK 64
#define GRAFT_ATTN_MAX_HEAD_DIM 512
typedef void (*graft__attend_fn)(float *out, const float *q, int32_t n_q,
                                 const void *const *keys, const void *const *values,
                                 uint32_t kv_type, int64_t n_keys, int32_t head_dim, float scale);
void graft__attend(float *out, const float *q, int32_t n_q, const void *const *keys,
                   const void *const *values, uint32_t kv_type, int64_t n_keys, int32_t head_dim,
                   float scale);

/* The same for the avx2 and avx512 kernel paths (attention_avx2.c, attention_avx512.c). */
void graft__attend_avx2(float *out, const float *q, int32_t n_q, const void *const *keys,
                        const void *const *values, uint32_t kv_type, int64_t n_keys,
                        int32_t head_dim, float scale);
void graft__attend_avx512(float *out, const float *q, int32_t n_q, const void *const *keys,
                          const void *const *values, uint32_t kv_type, int64_t n_keys,
                          int32_t head_dim, float scale);

/* Several query heads over one list of keys, each with its own key count: head h attends
 * with q[h] over keys [0, n_keys[h]) into out[h], for h < n_heads <= GRAFT_ATTN_MAX_HEADS
 * (the heads of a GQA group for several tokens of one sequence: the keys are read once for
 * all of them). Each head's result is the same bits as graft__attend's kernel of the same
 * path gives it alone. */
#define GRAFT_ATTN_MAX_HEADS 32
typedef void (*graft__attend_heads_fn)(float *const *out, const float *const *q,
                                       const int64_t *n_keys, int32_t n_heads,
                                       const void *const *keys, const void *const *values,
                                       uint32_t kv_type, int32_t head_dim, float scale);
void graft__attend_heads(float *const *out, const float *const *q, const int64_t *n_keys,
                         int32_t n_heads, const void *const *keys, const void *const *values,
                         uint32_t kv_type, int32_t head_dim, float scale);
void graft__attend_heads_avx2(float *const *out, const float *const *q, const int64_t *n_keys,
                              int32_t n_heads, const void *const *keys,
                              const void *const *values, uint32_t kv_type, int32_t head_dim,
                              float scale);
void graft__attend_heads_avx512(float *const *out, const float *const *q,
                                const int64_t *n_keys, int32_t n_heads,
                                const void *const *keys, const void *const *values,
                                uint32_t kv_type, int32_t head_dim, float scale);
/* For kernels that share keys only within one call of graft__attend_fn: runs of heads with
 * the same key count whose queries and outputs lie one after another go to one call. */
void graft__attend_heads_by_runs(graft__attend_fn attend, float *const *out,
                                 const float *const *q, const int64_t *n_keys,
                                 int32_t n_heads, const void *const *keys,
                                 const void *const *values, uint32_t kv_type,
                                 int32_t head_dim, float scale);
/* The other way round, for paths whose kernel is the heads form (graft__attend_avx2,
 * graft__attend_avx512): the n_q heads of one graft__attend_fn call as one call of `heads`,
 * every head over the n_keys keys; more than GRAFT_ATTN_MAX_HEADS go to graft__attend. */
void graft__attend_as_heads(graft__attend_heads_fn heads, float *out, const float *q,
                            int32_t n_q, const void *const *keys, const void *const *values,
                            uint32_t kv_type, int64_t n_keys, int32_t head_dim, float scale);

/* The chunk form, for a decode step's attention shared between threads a chunk (or a share
 * of a chunk's heads) at a time.
 * chunk: query heads of one token over one chunk of n_keys (1 .. GRAFT_ATTN_CHUNK) rows
 * that hold every KV head of a position (the KV store's rows, listed whole), head h reading
 * elements [col[h], col[h] + head_dim) of each row, for h < n_heads <= GRAFT_ATTN_MAX_HEADS:
 * max[h] = the chunk's largest score s_j = scale * q[h].k_j, out[h] (head_dim) = the sum of
 * p_j v_j and sum[h] = the sum of p_j, p_j = exp(s_j - max[h]).
 * merge: out (n_heads, head_dim) = the heads' attention from the n_chunks chunks' results
 * (chunks (n_chunks, n_heads, head_dim), max and sum (n_chunks, n_heads)), merged in chunk
 * order by the operations the path's graft__attend_heads kernel merges each chunk with.
 * So a head gets the same bits that kernel gives it over the rows offset by col[h]
 * elements, whichever heads share a chunk's call and whichever thread computed which chunk.
 * The avx2 and avx512 paths have it: graft__attend_split_for gives it for a path and head
 * size. */
typedef void (*graft__attend_chunk_fn)(float *const *out, float *max, float *sum,
                                       const float *const *q, const int32_t *col,
                                       int32_t n_heads, int32_t n_keys, const void *const *keys,
                                       const void *const *values, uint32_t kv_type,
                                       int32_t head_dim, float scale);
typedef void (*graft__attend_merge_fn)(float *out, const float *chunks, const float *max,
                                       const float *sum, int32_t n_chunks, int32_t n_heads,
                                       int32_t head_dim);
void graft__attend_chunk_avx2(float *const *out, float *max, float *sum, const float *const *q,
                              const int32_t *col, int32_t n_heads, int32_t n_keys,
                              const void *const *keys, const void *const *values,
                              uint32_t kv_type, int32_t head_dim, float scale);
void graft__attend_merge_avx2(float *out, const float *chunks, const float *max,
                              const float *sum, int32_t n_chunks, int32_t n_heads,
                              int32_t head_dim);
void graft__attend_chunk_avx512(float *const *out, float *max, float *sum,
                                const float *const *q, const int32_t *col, int32_t n_heads,
                                int32_t n_keys, const void *const *keys,
                                const void *const *values, uint32_t kv_type, int32_t head_dim,
                                float scale);
void graft__attend_merge_avx512(float *out, const float *chunks, const float *max,
                                const float *sum, int32_t n_chunks, int32_t n_heads,
                                int32_t head_dim);
typedef struct graft__attend_split {
    graft__attend_chunk_fn chunk;
    graft__attend_merge_fn merge;
} graft__attend_split;
struct graft__matmul_path;
/* The chunk form of a path for a head size into *out; false where it has none. */
bool graft__attend_split_for(const struct graft__matmul_path *path, int32_t head_dim,
                             graft__attend_split *out);

/* dst (n elements of type F16 or F32) = src (n floats). The F16C version (convert_avx2.c)
 * gives the same bits (NaN payloads aside); graft__store_row_for picks one for a path. */
typedef void (*graft__store_row_fn)(uint32_t type, void *dst, const float *src, int64_t n);
void graft__store_row(uint32_t type, void *dst, const float *src, int64_t n);
void graft__store_row_f16c(uint32_t type, void *dst, const float *src, int64_t n);

/* ---------------------------------------------------------------------------------------
 * Thread pool (threadpool.c). Persistent workers; graft__pool_run runs fn(ctx, task, thread)
 * for task in [0, n_tasks) on the pool's threads and the caller (thread 0) and returns when
 * all are done. One caller at a time per pool. A NULL pool runs everything on the caller.
 * CONSTRUCTOR: graft__pool_create   DESTRUCTOR: graft__pool_free
 */
typedef struct graft__pool graft__pool;
typedef void (*graft__task_fn)(void *ctx, int64_t task, int thread);
int graft__pool_create(int n_threads, graft__pool **out);
void graft__pool_free(graft__pool *pool);
int graft__pool_size(const graft__pool *pool);
void graft__pool_run(graft__pool *pool, int64_t n_tasks, graft__task_fn fn, void *ctx);

/* ---------------------------------------------------------------------------------------
 * Matmul paths and their dispatch (dispatch.c; the path interface is matmul_path.h).
 */
typedef struct graft__matmul_path graft__matmul_path;

/* Whether this processor and OS run the avx2 path (AVX2, FMA, F16C) and the avx512 path
 * (AVX-512 F, BW, VL, DQ and VNNI) (cpu_features.c). */
bool graft__cpu_has_avx2(void);
bool graft__cpu_has_avx512(void);
/* Whether it runs the avx2 path and has AVX-VNNI (256-bit vpdpbusd, VEX-encoded: Intel
 * from Alder Lake on, AMD from Zen 4 on): the avxvnni path. */
bool graft__cpu_has_avx_vnni(void);
/* The SIMD features the kernel paths care about that this processor has, as a static
 * string such as "avx2 fma f16c avx-vnni avx512f/bw/vl/dq/vnni". */
const char *graft__cpu_features_string(void);

/* Picks the path: `name` ("scalar", "avx2", "avxvnni", "avx512"), else the environment variable
 * GRAFT_KERNELS, else the best the processor supports. GRAFT_EINVAL for an unknown name,
 * GRAFT_EUNSUPPORTED for a path this processor cannot run (with a message). */
int graft__kernels_select(const char *name, const graft__matmul_path **out, char **errmsg);
/* The path of that name if this processor can run it, else NULL. */
const graft__matmul_path *graft__kernels_by_name(const char *name);

/* How a forward pass runs its kernels: on which threads, with which path, and the buffer
 * for prepared activations (64-byte aligned, work_size bytes). */
typedef struct graft__exec {
    graft__pool *pool;
    const graft__matmul_path *path;
    graft__attend_heads_fn attend; /* the attention kernel of the same instruction set */
    graft__store_row_fn store_row; /* K/V row conversion of the same instruction set */
    graft__rmsnorm_fn rmsnorm;     /* RMS norm of the same instruction set */
    graft__swiglu_fn swiglu;       /* SwiGLU of the same instruction set */
    void *work;
    size_t work_size;
} graft__exec;

/* The attention kernel, the K/V row conversion, the RMS norm and SwiGLU that go with a
 * matmul path. */
graft__attend_heads_fn graft__attend_for(const graft__matmul_path *path);
graft__store_row_fn graft__store_row_for(const graft__matmul_path *path);
graft__rmsnorm_fn graft__rmsnorm_for(const graft__matmul_path *path);
graft__swiglu_fn graft__swiglu_for(const graft__matmul_path *path);

/* One matrix of a graft__matmul_many call: y (n_tok, n_out) = x w^T. */
enum { GRAFT_MATMUL_MAX_MATRICES = 4 };
typedef struct graft__matmul_one {
    float *y;
    const void *w;
    uint32_t type;
    int64_t n_out;
} graft__matmul_one;

/* Bytes of work buffer graft__matmul_many needs for these n (<= GRAFT_MATMUL_MAX_MATRICES)
 * matrices over n_tok tokens of n_in inputs. */
size_t graft__matmul_work_size(const graft__matmul_path *path, const graft__matmul_one *m,
                               int n, int64_t n_in, int64_t n_tok);
/* Every matrix of m over the same x (n_tok, n_in), in one job on the exec's threads and
 * path; each y gets the same bits for any number of threads, any n_tok and any grouping
 * of matrices. */
void graft__matmul_many(const graft__exec *ex, const graft__matmul_one *m, int n, int64_t n_in,
                        const float *x, int64_t n_tok);

#endif /* GRAFT_KERNELS_H */
