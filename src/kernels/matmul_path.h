/*
 * matmul_path.h: the interface every matmul implementation ("path") provides.
 *
 * A path computes y = x w^T for weights of every supported type in two steps:
 *   1. act_prepare turns one token's float activations into the form the path's dot
 *      products consume (floats as they are, or per-token quantized blocks such as Q8_0
 *      or Q8_K, with whatever sums the path needs). Per token, never across tokens, so a
 *      token's prepared activations do not depend on the batch (DESIGN.md invariant 1).
 *   2. gemm computes the outputs rows [o0, o1) for all n_tok tokens from the prepared
 *      activations. Whatever tiling it uses, the value of y[t][o] must be the same bits
 *      for any n_tok, any [o0, o1) containing o, and any position of t in the batch: each
 *      (row, token) output goes through one fixed sequence of operations.
 * The caller splits [0, n_out) among threads (never the reduction over n_in) and calls gemm
 * once per piece; gemm must not allocate and must be safe to run concurrently on disjoint
 * row ranges.
 *
 * Paths: scalar (the reference: dequantize to float, sum in element order), avx2 (AVX2 +
 * FMA + F16C), avxvnni (the same with AVX-VNNI, same bits as avx2), avx512 (AVX-512
 * F/BW/VL/DQ + VNNI). Paths other than scalar agree with scalar within a tolerance (they
 * may quantize activations), and each is bit-exactly batch invariant on its own. Files
 * named *_avx2.c, *_avxvnni.c and *_avx512.c are compiled with their instruction sets
 * enabled (CMakeLists.txt); everything else must not assume them.
 */
#ifndef GRAFT_MATMUL_PATH_H
#define GRAFT_MATMUL_PATH_H

#include <stddef.h>
#include <stdint.h>

typedef struct graft__matmul_path {
    const char *name; /* "scalar", "avx2", "avxvnni", "avx512" */
    /* Bytes of one token's prepared activations for weights of `type`, n_in inputs
     * (a multiple of 64 so rows stay aligned when packed one after the other). */
    size_t (*act_bytes)(uint32_t type, int64_t n_in);
    /* xa (act_bytes) = token activations x (n_in) prepared for weights of `type`. */
    void (*act_prepare)(uint32_t type, void *xa, const float *x, int64_t n_in);
    /* y[t * ldy + o] for t in [0, n_tok), o in [o0, o1), from weights w (n_out, n_in) of
     * `type` (row o at w + o * row_bytes) and prepared activations xa (n_tok rows of
     * act_bytes(type, n_in), 64-byte aligned). */
    void (*gemm)(uint32_t type, float *y, int64_t ldy, const void *w, int64_t n_in, int64_t o0,
                 int64_t o1, const void *xa, int64_t n_tok);
    /* Optional (NULL: the path has none): packed weights, a layout of whole matrices the
     * path computes from faster than from GGUF blocks, made once when a model loads.
     * packed_type: the packed type (>= GRAFT_TYPE_PACKED_BASE) for weights (n_out, n_in)
     * of `type`, or 0 when the path has no packed form for them. packed_bytes: the size of
     * such a matrix. pack: dst (packed_bytes) = w (n_out rows of `type`) packed. A packed
     * type then goes to act_bytes, act_prepare and gemm like any other, with the packed
     * matrix as w, but its [o0, o1) must start and end on a multiple of 16 rows (or at
     * n_out). Packing changes the order of float operations, so a packed matrix gives
     * other bits than the same weights unpacked; each is batch invariant on its own. */
    uint32_t (*packed_type)(uint32_t type, int64_t n_in, int64_t n_out);
    size_t (*packed_bytes)(uint32_t ptype, int64_t n_in, int64_t n_out);
    void (*pack)(uint32_t ptype, void *dst, const void *w, int64_t n_in, int64_t n_out);
} graft__matmul_path;

/* Packed weight types are not GGUF types: only the path that packed them computes with
 * them. GRAFT_TYPE_PACKED_BASE + t is a packed form of GGUF type t. */
enum { GRAFT_TYPE_PACKED_BASE = 0x10000 };

extern const graft__matmul_path graft__matmul_scalar;
extern const graft__matmul_path graft__matmul_avx2;
extern const graft__matmul_path graft__matmul_avxvnni;
extern const graft__matmul_path graft__matmul_avx512;

#endif /* GRAFT_MATMUL_PATH_H */
