/*
 * attention.c: scaled dot-product attention of one query head over a list of keys, the
 * scalar reference version.
 *
 * The softmax is computed online (one pass over the keys, as in FlashAttention) in fixed
 * chunks of GRAFT_ATTN_CHUNK keys counted from the first key. The caller always passes the
 * keys of a sequence from the same absolute start, so the chunks sit at fixed absolute
 * positions and the result for a given set of keys is always computed by the same
 * operations in the same order (DESIGN.md invariant 1): it cannot depend on how the query
 * was batched, and adding later keys never changes how the earlier ones are reduced.
 *
 * Per chunk, on its own: the scores s_j = scale * (q . k_j) (dot summed in element order),
 * the chunk's maximum m, the weights p_j = exp(s_j - m), their sum l and the weighted values
 * o = sum_j p_j v_j, both summed in key order from zero. Then the chunk is merged into the
 * running maximum M, sum L and output O: with M' = max(M, m), a = exp(M - M') (0 before
 * the first chunk) and b = exp(m - M'), L = L a + l b and O = O a + o b, and M = M'. At
 * the end O is divided by L. A chunk's results depend only on its own keys, so a path may
 * compute the chunks of a decode step on different threads and merge them afterwards, in
 * the same order and by the same operations, and get the same bits (graft__attend_split_for).
 * `out` itself holds O, so it must not overlap q. K and V rows are decoded from their
 * storage type (F16 or F32) one at a time.
 *
 * graft__attend_heads (the form the forward pass calls, kernels.h) takes heads with their
 * own key counts; graft__attend_heads_by_runs hands runs of them to a per-group kernel
 * (this one), and graft__attend_as_heads hands a group to a heads kernel (the AVX2 and
 * AVX-512 ones). The chunk form (kernels.h) exists on the avx2 and avx512 paths; the
 * choice of it for a path is here, as plain code any processor can run.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_path.h"
#include "util/util.h"

/* x (n) = the n elements of a K or V row stored in kv_type. */
static void load_row(float *x, const void *row, uint32_t kv_type, int32_t n)
{
    if (kv_type == GRAFT_TYPE_F32) {
        memcpy(x, row, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *h = row;
    for (int32_t i = 0; i < n; i++)
        x[i] = graft__f16_to_f32(h[i]);
}

static float dot(const float *a, const float *b, int32_t n)
{
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void scale_vec(float *v, int32_t n, float factor)
{
    for (int32_t i = 0; i < n; i++)
        v[i] *= factor;
}

/* acc (n) += p * v (n) */
static void add_scaled(float *acc, const float *v, int32_t n, float p)
{
    for (int32_t i = 0; i < n; i++)
        acc[i] += p * v[i];
}

/* One head: out (head_dim) over all keys. row and chunk (head_dim each) are scratch for a
 * decoded row and a chunk's weighted values. */
static void attend_head(float *out, const float *q, const void *const *keys,
                        const void *const *values, uint32_t kv_type, int64_t n_keys,
                        int32_t head_dim, float scale, float *row, float *chunk)
{
    memset(out, 0, (size_t)head_dim * sizeof(float));
    float running_max = -INFINITY;
    float running_sum = 0.0f;
    float scores[GRAFT_ATTN_CHUNK]; // (chunk keys)

    for (int64_t c0 = 0; c0 < n_keys; c0 += GRAFT_ATTN_CHUNK) {
        int n = n_keys - c0 < GRAFT_ATTN_CHUNK ? (int)(n_keys - c0) : GRAFT_ATTN_CHUNK;
        float chunk_max = -INFINITY;
        for (int j = 0; j < n; j++) {
            load_row(row, keys[c0 + j], kv_type, head_dim);
            scores[j] = scale * dot(q, row, head_dim);
            chunk_max = fmaxf(chunk_max, scores[j]);
        }
        float chunk_sum = 0.0f;
        memset(chunk, 0, (size_t)head_dim * sizeof(float));
        for (int j = 0; j < n; j++) {
            float p = expf(scores[j] - chunk_max);
            chunk_sum += p;
            load_row(row, values[c0 + j], kv_type, head_dim);
            add_scaled(chunk, row, head_dim, p);
        }
        float merged = fmaxf(running_max, chunk_max);
        float a = running_max == -INFINITY ? 0.0f : expf(running_max - merged);
        float b = expf(chunk_max - merged);
        running_sum = running_sum * a + chunk_sum * b;
        running_max = merged;
        for (int32_t i = 0; i < head_dim; i++)
            out[i] = out[i] * a + chunk[i] * b;
    }
    if (running_sum > 0.0f)
        scale_vec(out, head_dim, 1.0f / running_sum);
}

void graft__attend(float *out, const float *q, int32_t n_q, const void *const *keys,
                   const void *const *values, uint32_t kv_type, int64_t n_keys, int32_t head_dim,
                   float scale)
{
    GRAFT_ASSERT(n_keys >= 0 && head_dim > 0 && head_dim <= GRAFT_ATTN_MAX_HEAD_DIM);
    GRAFT_ASSERT(kv_type == GRAFT_TYPE_F16 || kv_type == GRAFT_TYPE_F32);
    float row[GRAFT_ATTN_MAX_HEAD_DIM];   // (head_dim) one decoded K or V row
    float chunk[GRAFT_ATTN_MAX_HEAD_DIM]; // (head_dim) a chunk's weighted values
    for (int32_t h = 0; h < n_q; h++)
        attend_head(out + (int64_t)h * head_dim, q + (int64_t)h * head_dim, keys, values, kv_type,
                    n_keys, head_dim, scale, row, chunk);
}

void graft__attend_heads_by_runs(graft__attend_fn attend, float *const *out,
                                 const float *const *q, const int64_t *n_keys,
                                 int32_t n_heads, const void *const *keys,
                                 const void *const *values, uint32_t kv_type,
                                 int32_t head_dim, float scale)
{
    for (int32_t h0 = 0, h1; h0 < n_heads; h0 = h1) {
        for (h1 = h0 + 1; h1 < n_heads; h1++)
            if (n_keys[h1] != n_keys[h0] || q[h1] != q[h1 - 1] + head_dim ||
                out[h1] != out[h1 - 1] + head_dim)
                break;
        attend(out[h0], q[h0], h1 - h0, keys, values, kv_type, n_keys[h0], head_dim, scale);
    }
}

void graft__attend_as_heads(graft__attend_heads_fn heads, float *out, const float *q,
                            int32_t n_q, const void *const *keys, const void *const *values,
                            uint32_t kv_type, int64_t n_keys, int32_t head_dim, float scale)
{
    if (n_q > GRAFT_ATTN_MAX_HEADS) {
        graft__attend(out, q, n_q, keys, values, kv_type, n_keys, head_dim, scale);
        return;
    }
    float *outs[GRAFT_ATTN_MAX_HEADS];
    const float *qs[GRAFT_ATTN_MAX_HEADS];
    int64_t counts[GRAFT_ATTN_MAX_HEADS];
    for (int32_t h = 0; h < n_q; h++) {
        outs[h] = out + (int64_t)h * head_dim;
        qs[h] = q + (int64_t)h * head_dim;
        counts[h] = n_keys;
    }
    heads(outs, qs, counts, n_q, keys, values, kv_type, head_dim, scale);
}

void graft__attend_heads(float *const *out, const float *const *q, const int64_t *n_keys,
                         int32_t n_heads, const void *const *keys, const void *const *values,
                         uint32_t kv_type, int32_t head_dim, float scale)
{
    graft__attend_heads_by_runs(graft__attend, out, q, n_keys, n_heads, keys, values, kv_type,
                                head_dim, scale);
}

bool graft__attend_split_for(const struct graft__matmul_path *path, int32_t head_dim,
                             graft__attend_split *out)
{
    /* The avx512 kernels vectorise head sizes that are whole multiples of their 16 lanes. */
    if (path == &graft__matmul_avx512 && head_dim % 16 == 0 &&
        head_dim <= GRAFT_ATTN_MAX_HEAD_DIM) {
        *out = (graft__attend_split){graft__attend_chunk_avx512, graft__attend_merge_avx512};
        return true;
    }
    /* The avx2 kernels (also the avxvnni path's) vectorise multiples of their 8 lanes. */
    bool avx2 = path == &graft__matmul_avx2 || path == &graft__matmul_avxvnni;
    if (avx2 && head_dim % 8 == 0 && head_dim <= GRAFT_ATTN_MAX_HEAD_DIM) {
        *out = (graft__attend_split){graft__attend_chunk_avx2, graft__attend_merge_avx2};
        return true;
    }
    return false;
}
