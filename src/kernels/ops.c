/*
 * ops.c: the element-wise and per-vector kernels of the forward pass: RMS norm, rotary
 * position embedding, softmax, the gated activations (SwiGLU, GeGLU) and logit soft-capping.
 *
 * Each works on one vector (one token's activations or one head) at a time, so it is batch
 * invariant by construction; every reduction (the sums in rmsnorm and softmax) runs in
 * element order in float. Scalar reference versions: the math is written out as in the
 * papers, with float intermediates unless noted.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "util/util.h"

void graft__rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps)
{
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum_sq += x[i] * x[i];
    float mean = sum_sq / (float)n;
    float inv_rms = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * inv_rms * weight[i];
}

void graft__rope_angles(float *angle, int32_t rot_dims, int32_t pos, float base,
                        float freq_scale, const float *freq_factors)
{
    GRAFT_ASSERT(rot_dims >= 0 && rot_dims % 2 == 0);
    const int32_t n_pairs = rot_dims / 2;
    for (int32_t i = 0; i < n_pairs; i++) {
        double inv_freq = pow((double)base, -2.0 * (double)i / (double)rot_dims);
        double theta = (double)pos * (double)freq_scale * inv_freq;
        if (freq_factors != NULL)
            theta /= (double)freq_factors[i];
        angle[i] = (float)cos(theta);
        angle[n_pairs + i] = (float)sin(theta);
    }
}

/* Turns (x[a], x[b]) by the angle whose cosine and sine are c and s. */
static void rotate_pair(float *x, int32_t a, int32_t b, float c, float s)
{
    float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
}

void graft__rope(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dims,
                 const float *angle, graft__rope_layout layout)
{
    GRAFT_ASSERT(rot_dims >= 0 && rot_dims % 2 == 0 && rot_dims <= head_dim);
    const int32_t n_pairs = rot_dims / 2;
    const float *cos_t = angle, *sin_t = angle + n_pairs;
    for (int32_t h = 0; h < n_heads; h++) {
        float *head = x + (int64_t)h * head_dim; // (head_dim)
        for (int32_t i = 0; i < n_pairs; i++) {
            if (layout == GRAFT_ROPE_ADJACENT)
                rotate_pair(head, 2 * i, 2 * i + 1, cos_t[i], sin_t[i]);
            else
                rotate_pair(head, i, i + n_pairs, cos_t[i], sin_t[i]);
        }
    }
}

void graft__softmax(float *x, int64_t n)
{
    if (n <= 0)
        return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        max = fmaxf(max, x[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] /= sum;
}

void graft__swiglu(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float silu = x[i] / (1.0f + expf(-x[i]));
        x[i] = silu * y[i];
    }
}

void graft__geglu(float *x, const float *y, int64_t n)
{
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float gelu = 0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
        x[i] = gelu * y[i];
    }
}

void graft__softcap(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}
