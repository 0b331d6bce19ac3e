/*
 * reference_forward.c: the double-precision reference forward pass (see reference.h).
 *
 * Written from docs/architectures.md alone, independently of src/model/ and src/kernels/, so
 * that agreement between the two means something. It reads like llama2.c's run.c: the file is
 * loaded into plain double arrays, then each token runs through the layers one at a time with
 * plain loops, a growing key/value cache, and a two-pass softmax. Nothing is fast; nothing is
 * clever.
 *
 * Layout: weight conversion (F32/F16/BF16 to double), loading (keys, then tensors), the
 * building blocks (rmsnorm, matmul, rope, activations), then the forward pass itself.
 */
#include "reference.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "util/util.h"

#define REF_MAX_DIM (1 << 20)
#define REF_MAX_LAYERS 4096

/* ----------------------------------------------------------------------------------------
 * Weight conversion. Every value is converted exactly: double holds every F16, BF16 and F32.
 */

static double f16_to_double(uint16_t h)
{
    int sign = h >> 15;
    int exponent = (h >> 10) & 0x1f;
    int mantissa = h & 0x3ff;
    double value;
    if (exponent == 0)
        value = ldexp(mantissa, -24); /* zero or subnormal: mantissa * 2^-14 / 1024 */
    else if (exponent == 31)
        value = mantissa != 0 ? NAN : INFINITY;
    else
        value = ldexp(1024 + mantissa, exponent - 25); /* (1 + m/1024) * 2^(e-15) */
    return sign ? -value : value;
}

static double bf16_to_double(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16; /* bf16 is the top half of an f32 */
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double f32_to_double(const unsigned char *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* Converts `count` elements of a tensor of `type` (F32, F16 or BF16) to doubles. */
static void convert_to_double(double *out, const void *data, uint32_t type, uint64_t count)
{
    const unsigned char *bytes = data;
    for (uint64_t i = 0; i < count; i++) {
        uint16_t h;
        switch (type) {
        case GRAFT_TYPE_F32:
            out[i] = f32_to_double(bytes + 4 * i);
            break;
        case GRAFT_TYPE_F16:
            memcpy(&h, bytes + 2 * i, sizeof h);
            out[i] = f16_to_double(h);
            break;
        default: /* GRAFT_TYPE_BF16 */
            memcpy(&h, bytes + 2 * i, sizeof h);
            out[i] = bf16_to_double(h);
            break;
        }
    }
}

/* ----------------------------------------------------------------------------------------
 * Loading: the hyperparameters from the GGUF keys, then every tensor, converted.
 */

typedef struct loader {
    graft__gguf *gguf;
    char arch_name[16];
    bool *used; /* (n_tensors) which file tensors the model took */
    char **errmsg;
} loader;

static int read_int_key(loader *ld, const char *suffix, bool required, int fallback, int *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch_name, suffix);
    uint32_t value;
    int rc = graft__gguf_get_u32(ld->gguf, key, &value);
    if (rc == GRAFT_ENOTFOUND && !required) {
        *out = fallback;
        return GRAFT_OK;
    }
    if (rc == GRAFT_ENOTFOUND)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: missing key %s", key);
    if (rc != GRAFT_OK || value > REF_MAX_DIM)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad value of key %s", key);
    *out = (int)value;
    return GRAFT_OK;
}

static int read_real_key(loader *ld, const char *suffix, bool required, double fallback,
                         double *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch_name, suffix);
    float value;
    int rc = graft__gguf_get_f32(ld->gguf, key, &value);
    if (rc == GRAFT_ENOTFOUND && !required) {
        *out = fallback;
        return GRAFT_OK;
    }
    if (rc == GRAFT_ENOTFOUND)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: missing key %s", key);
    if (rc != GRAFT_OK || !isfinite(value))
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad value of key %s", key);
    *out = value;
    return GRAFT_OK;
}

static int read_arch(loader *ld, ref_arch *arch)
{
    static const char *const names[] = {"llama", "qwen2", "qwen3", "gemma3"};
    graft__gguf_str name;
    if (graft__gguf_get_str(ld->gguf, "general.architecture", &name) != GRAFT_OK)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT,
                             "reference: no string key general.architecture");
    for (int i = 0; i < 4; i++) {
        if (graft__gguf_str_eq(name, names[i])) {
            *arch = (ref_arch)i;
            snprintf(ld->arch_name, sizeof ld->arch_name, "%s", names[i]);
            return GRAFT_OK;
        }
    }
    return graft__errmsg(ld->errmsg, GRAFT_EUNSUPPORTED, "reference: architecture '%.*s'",
                         (int)(name.len > 64 ? 64 : name.len), name.ptr);
}

/* ARCH.rope.scaling.type: absent or "none" gives scale 1; "linear" gives 1/factor. */
static int read_rope_scaling(loader *ld, double *scale)
{
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", ld->arch_name);
    graft__gguf_str type;
    int rc = graft__gguf_get_str(ld->gguf, key, &type);
    *scale = 1.0;
    if (rc == GRAFT_ENOTFOUND || (rc == GRAFT_OK && graft__gguf_str_eq(type, "none")))
        return GRAFT_OK;
    if (rc != GRAFT_OK || !graft__gguf_str_eq(type, "linear"))
        return graft__errmsg(ld->errmsg, GRAFT_EUNSUPPORTED,
                             "reference: rope scaling other than none or linear");
    double factor;
    rc = read_real_key(ld, "rope.scaling.factor", true, 1.0, &factor);
    if (rc != GRAFT_OK)
        return rc;
    if (factor <= 0)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: rope scaling factor %g",
                             factor);
    *scale = 1.0 / factor;
    return GRAFT_OK;
}

static int read_gemma3_keys(loader *ld, ref_config *c)
{
    int rc = read_int_key(ld, "attention.sliding_window", true, 0, &c->sliding_window);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "attention.sliding_window_pattern", false, 6, &c->swa_pattern);
    if (rc == GRAFT_OK)
        rc = read_real_key(ld, "rope.freq_base_swa", false, 10000.0, &c->rope_base_swa);
    if (rc == GRAFT_OK)
        rc = read_real_key(ld, "final_logit_softcapping", false, 0.0, &c->final_softcap);
    if (rc == GRAFT_OK && (c->swa_pattern < 1 || c->final_softcap < 0))
        rc = graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad gemma3 window keys");
    return rc;
}

static int check_config(loader *ld, const ref_config *c)
{
    if (c->n_embd < 1 || c->n_layer < 1 || c->n_layer > REF_MAX_LAYERS || c->n_ff < 1 ||
        c->n_head < 1 || c->n_head_kv < 1 || c->n_head % c->n_head_kv != 0 ||
        c->head_dim < 1 || c->head_dim_v < 1)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad dimensions");
    if (c->rope_dims < 0 || c->rope_dims % 2 != 0 || c->rope_dims > c->head_dim)
        return graft__errmsg(ld->errmsg, GRAFT_EUNSUPPORTED,
                             "reference: rope dimension count %d with head_dim %d", c->rope_dims,
                             c->head_dim);
    if (!(c->rms_eps >= 0) || !(c->rope_base > 0) || !(c->rope_base_swa > 0))
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad eps or rope base");
    return GRAFT_OK;
}

static int read_config(loader *ld, ref_config *c)
{
    int rc = read_arch(ld, &c->arch);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "embedding_length", true, 0, &c->n_embd);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "block_count", true, 0, &c->n_layer);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "feed_forward_length", true, 0, &c->n_ff);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "attention.head_count", true, 0, &c->n_head);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "attention.head_count_kv", false, c->n_head, &c->n_head_kv);
    if (rc != GRAFT_OK)
        return rc;
    if (c->n_head < 1)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: zero heads");
    rc = read_int_key(ld, "attention.key_length", false, c->n_embd / c->n_head, &c->head_dim);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "attention.value_length", false, c->head_dim, &c->head_dim_v);
    if (rc == GRAFT_OK)
        rc = read_int_key(ld, "rope.dimension_count", false, c->head_dim, &c->rope_dims);
    if (rc == GRAFT_OK)
        rc = read_real_key(ld, "attention.layer_norm_rms_epsilon", true, 0, &c->rms_eps);
    if (rc == GRAFT_OK)
        rc = read_real_key(ld, "rope.freq_base", false, 10000.0, &c->rope_base);
    if (rc == GRAFT_OK)
        rc = read_rope_scaling(ld, &c->rope_scale);
    c->rope_base_swa = c->rope_base;
    c->swa_pattern = 1;
    if (rc == GRAFT_OK && c->arch == REF_ARCH_GEMMA3)
        rc = read_gemma3_keys(ld, c);
    if (rc == GRAFT_OK)
        rc = check_config(ld, c);
    return rc;
}

static void mark_used(loader *ld, const graft__gguf_tensor *t)
{
    uint64_t n = graft__gguf_n_tensors(ld->gguf);
    for (uint64_t i = 0; i < n; i++)
        if (graft__gguf_tensor_at(ld->gguf, i) == t)
            ld->used[i] = true;
}

static const char *type_name(uint32_t type)
{
    const graft__type_traits *traits = graft__type_traits_of(type);
    return traits != NULL && traits->name != NULL ? traits->name : "unknown";
}

/* Loads tensor `name` of shape {ne0, ne1} (ne1 = 1 for a vector) into a new double array.
 * A missing optional tensor leaves *out NULL. */
static int load_tensor(loader *ld, const char *name, int ne0, int ne1, bool required,
                       double **out)
{
    *out = NULL;
    const graft__gguf_tensor *t = graft__gguf_find_tensor(ld->gguf, name);
    if (t == NULL && !required)
        return GRAFT_OK;
    if (t == NULL)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: missing tensor %s", name);
    if (t->ne[0] != (uint64_t)ne0 || t->ne[1] != (uint64_t)ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT,
                             "reference: tensor %s has shape {%llu, %llu, %llu, %llu}, "
                             "expected {%d, %d}",
                             name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                             (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], ne0, ne1);
    if (t->type != GRAFT_TYPE_F32 && t->type != GRAFT_TYPE_F16 && t->type != GRAFT_TYPE_BF16)
        return graft__errmsg(ld->errmsg, GRAFT_EUNSUPPORTED, "reference: tensor %s has type %s",
                             name, type_name(t->type));
    *out = malloc((size_t)ne0 * (size_t)ne1 * sizeof(double));
    if (*out == NULL)
        return graft__errmsg(ld->errmsg, GRAFT_ENOMEM, "reference: no memory for %s", name);
    convert_to_double(*out, t->data, t->type, (uint64_t)ne0 * (uint64_t)ne1);
    mark_used(ld, t);
    return GRAFT_OK;
}

static int load_block_tensor(loader *ld, int layer, const char *suffix, int ne0, int ne1,
                             bool required, double **out)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    return load_tensor(ld, name, ne0, ne1, required, out);
}

static int load_layer(loader *ld, const ref_config *c, int il, ref_layer *L)
{
    int q_dim = c->n_head * c->head_dim;
    int k_dim = c->n_head_kv * c->head_dim;
    int v_dim = c->n_head_kv * c->head_dim_v;
    int o_dim = c->n_head * c->head_dim_v;
    bool has_qk_norm = c->arch == REF_ARCH_QWEN3 || c->arch == REF_ARCH_GEMMA3;
    bool is_qwen2 = c->arch == REF_ARCH_QWEN2;
    bool is_gemma3 = c->arch == REF_ARCH_GEMMA3;
    int rc = load_block_tensor(ld, il, "attn_norm.weight", c->n_embd, 1, true, &L->attn_norm);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_q.weight", c->n_embd, q_dim, true, &L->wq);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_k.weight", c->n_embd, k_dim, true, &L->wk);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_v.weight", c->n_embd, v_dim, true, &L->wv);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_q.bias", q_dim, 1, is_qwen2, &L->bq);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_k.bias", k_dim, 1, is_qwen2, &L->bk);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_v.bias", v_dim, 1, is_qwen2, &L->bv);
    if (rc == GRAFT_OK && has_qk_norm)
        rc = load_block_tensor(ld, il, "attn_q_norm.weight", c->head_dim, 1, true, &L->q_norm);
    if (rc == GRAFT_OK && has_qk_norm)
        rc = load_block_tensor(ld, il, "attn_k_norm.weight", c->head_dim, 1, true, &L->k_norm);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "attn_output.weight", o_dim, c->n_embd, true, &L->wo);
    if (rc == GRAFT_OK && is_gemma3)
        rc = load_block_tensor(ld, il, "post_attention_norm.weight", c->n_embd, 1, true,
                               &L->post_attn_norm);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "ffn_norm.weight", c->n_embd, 1, true, &L->ffn_norm);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "ffn_gate.weight", c->n_embd, c->n_ff, true, &L->w_gate);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "ffn_up.weight", c->n_embd, c->n_ff, true, &L->w_up);
    if (rc == GRAFT_OK)
        rc = load_block_tensor(ld, il, "ffn_down.weight", c->n_ff, c->n_embd, true, &L->w_down);
    if (rc == GRAFT_OK && is_gemma3)
        rc = load_block_tensor(ld, il, "post_ffw_norm.weight", c->n_embd, 1, true,
                               &L->post_ffw_norm);
    return rc;
}

/* The vocabulary size is the number of rows of token_embd. */
static int read_n_vocab(loader *ld, ref_config *c)
{
    const graft__gguf_tensor *t = graft__gguf_find_tensor(ld->gguf, "token_embd.weight");
    if (t == NULL)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: missing token_embd.weight");
    if (t->ne[1] < 1 || t->ne[1] > (uint64_t)REF_MAX_DIM * 4)
        return graft__errmsg(ld->errmsg, GRAFT_EFORMAT, "reference: bad vocabulary size");
    c->n_vocab = (int)t->ne[1];
    return GRAFT_OK;
}

static int load_globals(loader *ld, ref_model *m)
{
    const ref_config *c = &m->config;
    int rc = load_tensor(ld, "token_embd.weight", c->n_embd, c->n_vocab, true, &m->token_embd);
    if (rc == GRAFT_OK)
        rc = load_tensor(ld, "output_norm.weight", c->n_embd, 1, true, &m->output_norm);
    if (rc == GRAFT_OK)
        rc = load_tensor(ld, "output.weight", c->n_embd, c->n_vocab, false, &m->output);
    if (rc == GRAFT_OK && m->output == NULL)
        m->output = m->token_embd; /* tied embeddings */
    if (rc == GRAFT_OK && c->rope_dims > 0)
        rc = load_tensor(ld, "rope_freqs.weight", c->rope_dims / 2, 1, false, &m->rope_freqs);
    return rc;
}

/* Every tensor in the file must have been used: one the reference does not know might
 * change the output, so it refuses rather than guess. */
static int check_all_used(loader *ld)
{
    uint64_t n = graft__gguf_n_tensors(ld->gguf);
    for (uint64_t i = 0; i < n; i++) {
        if (!ld->used[i]) {
            graft__gguf_str name = graft__gguf_tensor_at(ld->gguf, i)->name;
            return graft__errmsg(ld->errmsg, GRAFT_EUNSUPPORTED,
                                 "reference: unexpected tensor %.*s",
                                 (int)(name.len > 96 ? 96 : name.len), name.ptr);
        }
    }
    return GRAFT_OK;
}

static int load_model(loader *ld, ref_model *m)
{
    int rc = read_config(ld, &m->config);
    if (rc == GRAFT_OK)
        rc = read_n_vocab(ld, &m->config);
    if (rc != GRAFT_OK)
        return rc;
    m->layers = calloc((size_t)m->config.n_layer, sizeof(ref_layer));
    if (m->layers == NULL)
        return graft__errmsg(ld->errmsg, GRAFT_ENOMEM, "reference: no memory for layers");
    rc = load_globals(ld, m);
    for (int il = 0; rc == GRAFT_OK && il < m->config.n_layer; il++)
        rc = load_layer(ld, &m->config, il, &m->layers[il]);
    if (rc == GRAFT_OK)
        rc = check_all_used(ld);
    return rc;
}

int ref_model_load(const char *path, ref_model **out, char **errmsg)
{
    *out = NULL;
    if (errmsg != NULL)
        *errmsg = NULL;
    loader ld = {.errmsg = errmsg};
    int rc = graft__gguf_open(path, &ld.gguf, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    ref_model *m = calloc(1, sizeof *m);
    ld.used = calloc(graft__gguf_n_tensors(ld.gguf) + 1, sizeof(bool));
    if (m == NULL || ld.used == NULL)
        rc = graft__errmsg(errmsg, GRAFT_ENOMEM, "reference: out of memory");
    else
        rc = load_model(&ld, m);
    free(ld.used);
    graft__gguf_close(ld.gguf);
    if (rc != GRAFT_OK) {
        ref_model_free(m);
        return rc;
    }
    *out = m;
    return GRAFT_OK;
}

static void free_layer(ref_layer *L)
{
    double *weights[] = {L->attn_norm, L->wq,       L->wk,     L->wv,   L->bq,
                         L->bk,        L->bv,       L->q_norm, L->k_norm, L->wo,
                         L->post_attn_norm, L->ffn_norm, L->w_gate, L->w_up, L->w_down,
                         L->post_ffw_norm};
    for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++)
        free(weights[i]);
}

void ref_model_free(ref_model *m)
{
    if (m == NULL)
        return;
    if (m->layers != NULL)
        for (int il = 0; il < m->config.n_layer; il++)
            free_layer(&m->layers[il]);
    free(m->layers);
    if (m->output != m->token_embd)
        free(m->output);
    free(m->token_embd);
    free(m->output_norm);
    free(m->rope_freqs);
    free(m);
}

/* ----------------------------------------------------------------------------------------
 * Building blocks.
 */

/* out = x / sqrt(mean(x^2) + eps) * weight. out may be x. */
static void rmsnorm(double *out, const double *x, const double *weight, int size, double eps)
{
    double sum_squares = 0.0;
    for (int i = 0; i < size; i++)
        sum_squares += x[i] * x[i];
    double inv_rms = 1.0 / sqrt(sum_squares / size + eps);
    for (int i = 0; i < size; i++)
        out[i] = x[i] * inv_rms * weight[i];
}

/* out = W x, W (n_out, n_in) row-major. */
static void matmul(double *out, const double *x, const double *w, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double sum = 0.0;
        for (int i = 0; i < n_in; i++)
            sum += w[(size_t)o * n_in + i] * x[i];
        out[o] = sum;
    }
}

static void add_bias(double *x, const double *bias, int size)
{
    if (bias == NULL)
        return;
    for (int i = 0; i < size; i++)
        x[i] += bias[i];
}

static double silu(double x)
{
    return x / (1.0 + exp(-x));
}

static double gelu_tanh(double x)
{
    const double sqrt_2_over_pi = 0.79788456080286535588;
    return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

/* Rotates the first rope_dims dims of one head: pair i turns by pos * scale * freq_i with
 * freq_i = base^(-2i/rope_dims) / rope_freqs[i]. llama pairs adjacent dims (2i, 2i+1); the
 * others pair the two halves (i, i + rope_dims/2). */
static void rope_head(double *head, const ref_model *m, int pos, double base, double scale)
{
    const ref_config *c = &m->config;
    int half = c->rope_dims / 2;
    bool adjacent = c->arch == REF_ARCH_LLAMA;
    for (int i = 0; i < half; i++) {
        double freq = pow(base, -2.0 * i / c->rope_dims);
        if (m->rope_freqs != NULL)
            freq /= m->rope_freqs[i];
        double angle = pos * scale * freq;
        int i0 = adjacent ? 2 * i : i;
        int i1 = adjacent ? 2 * i + 1 : i + half;
        double a = head[i0];
        double b = head[i1];
        head[i0] = a * cos(angle) - b * sin(angle);
        head[i1] = a * sin(angle) + b * cos(angle);
    }
}

static bool layer_is_sliding(const ref_config *c, int il)
{
    return c->arch == REF_ARCH_GEMMA3 && c->sliding_window > 0 && (il + 1) % c->swa_pattern != 0;
}

/* ----------------------------------------------------------------------------------------
 * The forward pass.
 */

typedef struct run_state {
    int n_pos;           /* positions the caches hold */
    double *x;           /* (n_embd) residual stream */
    double *xb;          /* (n_embd) normed input of a block */
    double *xb2;         /* (n_embd) output of a block */
    double *q;           /* (n_head*head_dim) */
    double *att_out;     /* (n_head*head_dim_v) */
    double *scores;      /* (n_pos) one head's attention scores */
    double *hb;          /* (n_ff) gate, then the gated activation */
    double *hb2;         /* (n_ff) up */
    double *key_cache;   /* (n_layer, n_pos, n_head_kv*head_dim) */
    double *value_cache; /* (n_layer, n_pos, n_head_kv*head_dim_v) */
} run_state;

static void free_state(run_state *s)
{
    free(s->x);
    free(s->xb);
    free(s->xb2);
    free(s->q);
    free(s->att_out);
    free(s->scores);
    free(s->hb);
    free(s->hb2);
    free(s->key_cache);
    free(s->value_cache);
}

static int alloc_state(run_state *s, const ref_config *c, size_t n_pos)
{
    memset(s, 0, sizeof *s);
    s->n_pos = (int)n_pos;
    size_t cache_rows = (size_t)c->n_layer * n_pos;
    s->x = calloc((size_t)c->n_embd, sizeof(double));
    s->xb = calloc((size_t)c->n_embd, sizeof(double));
    s->xb2 = calloc((size_t)c->n_embd, sizeof(double));
    s->q = calloc((size_t)c->n_head * c->head_dim, sizeof(double));
    s->att_out = calloc((size_t)c->n_head * c->head_dim_v, sizeof(double));
    s->scores = calloc(n_pos, sizeof(double));
    s->hb = calloc((size_t)c->n_ff, sizeof(double));
    s->hb2 = calloc((size_t)c->n_ff, sizeof(double));
    s->key_cache = calloc(cache_rows, (size_t)c->n_head_kv * c->head_dim * sizeof(double));
    s->value_cache = calloc(cache_rows, (size_t)c->n_head_kv * c->head_dim_v * sizeof(double));
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->att_out || !s->scores || !s->hb || !s->hb2 ||
        !s->key_cache || !s->value_cache) {
        free_state(s);
        return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

/* One head's attention for the query at `pos` over keys lo..pos:
 * out = sum_j softmax(q.k_j * scale)_j v_j, softmax in two passes (max, then sum). */
static void attend_head(run_state *s, const ref_config *c, int il, int h, int pos, int lo)
{
    int kv_head = h / (c->n_head / c->n_head_kv);
    int k_dim = c->n_head_kv * c->head_dim;
    int v_dim = c->n_head_kv * c->head_dim_v;
    const double *q = s->q + (size_t)h * c->head_dim;
    const double *keys = s->key_cache + (size_t)il * s->n_pos * k_dim;
    const double *values = s->value_cache + (size_t)il * s->n_pos * v_dim;
    double scale = 1.0 / sqrt((double)c->head_dim);

    double max_score = -INFINITY;
    for (int j = lo; j <= pos; j++) {
        const double *k = keys + (size_t)j * k_dim + (size_t)kv_head * c->head_dim;
        double dot = 0.0;
        for (int d = 0; d < c->head_dim; d++)
            dot += q[d] * k[d];
        s->scores[j] = dot * scale;
        if (s->scores[j] > max_score)
            max_score = s->scores[j];
    }
    double sum = 0.0;
    for (int j = lo; j <= pos; j++) {
        s->scores[j] = exp(s->scores[j] - max_score);
        sum += s->scores[j];
    }

    double *out = s->att_out + (size_t)h * c->head_dim_v;
    for (int d = 0; d < c->head_dim_v; d++)
        out[d] = 0.0;
    for (int j = lo; j <= pos; j++) {
        const double *v = values + (size_t)j * v_dim + (size_t)kv_head * c->head_dim_v;
        double weight = s->scores[j] / sum;
        for (int d = 0; d < c->head_dim_v; d++)
            out[d] += weight * v[d];
    }
}

/* x += attention block of layer il for the token at `pos`. */
static void attention_block(run_state *s, const ref_model *m, int il, int pos, ref_mask mask)
{
    const ref_config *c = &m->config;
    const ref_layer *L = &m->layers[il];
    int q_dim = c->n_head * c->head_dim;
    int k_dim = c->n_head_kv * c->head_dim;
    int v_dim = c->n_head_kv * c->head_dim_v;
    double *k = s->key_cache + ((size_t)il * s->n_pos + pos) * k_dim;
    double *v = s->value_cache + ((size_t)il * s->n_pos + pos) * v_dim;

    rmsnorm(s->xb, s->x, L->attn_norm, c->n_embd, c->rms_eps);
    matmul(s->q, s->xb, L->wq, c->n_embd, q_dim);
    matmul(k, s->xb, L->wk, c->n_embd, k_dim);
    matmul(v, s->xb, L->wv, c->n_embd, v_dim);
    add_bias(s->q, L->bq, q_dim);
    add_bias(k, L->bk, k_dim);
    add_bias(v, L->bv, v_dim);

    for (int h = 0; L->q_norm != NULL && h < c->n_head; h++)
        rmsnorm(s->q + (size_t)h * c->head_dim, s->q + (size_t)h * c->head_dim, L->q_norm,
                c->head_dim, c->rms_eps);
    for (int h = 0; L->k_norm != NULL && h < c->n_head_kv; h++)
        rmsnorm(k + (size_t)h * c->head_dim, k + (size_t)h * c->head_dim, L->k_norm, c->head_dim,
                c->rms_eps);

    bool sliding = layer_is_sliding(c, il);
    double base = sliding ? c->rope_base_swa : c->rope_base;
    double scale = sliding ? 1.0 : c->rope_scale;
    for (int h = 0; h < c->n_head; h++)
        rope_head(s->q + (size_t)h * c->head_dim, m, pos, base, scale);
    for (int h = 0; h < c->n_head_kv; h++)
        rope_head(k + (size_t)h * c->head_dim, m, pos, base, scale);

    int lo = 0;
    if (sliding && mask == REF_MASK_MODEL && pos - c->sliding_window + 1 > 0)
        lo = pos - c->sliding_window + 1;
    for (int h = 0; h < c->n_head; h++)
        attend_head(s, c, il, h, pos, lo);

    matmul(s->xb2, s->att_out, L->wo, c->n_head * c->head_dim_v, c->n_embd);
    if (L->post_attn_norm != NULL)
        rmsnorm(s->xb2, s->xb2, L->post_attn_norm, c->n_embd, c->rms_eps);
    for (int i = 0; i < c->n_embd; i++)
        s->x[i] += s->xb2[i];
}

/* x += feed-forward block of layer il: Wdown(act(Wgate h) * Wup h). */
static void ffn_block(run_state *s, const ref_model *m, int il)
{
    const ref_config *c = &m->config;
    const ref_layer *L = &m->layers[il];
    rmsnorm(s->xb, s->x, L->ffn_norm, c->n_embd, c->rms_eps);
    matmul(s->hb, s->xb, L->w_gate, c->n_embd, c->n_ff);
    matmul(s->hb2, s->xb, L->w_up, c->n_embd, c->n_ff);
    for (int i = 0; i < c->n_ff; i++) {
        double gate = c->arch == REF_ARCH_GEMMA3 ? gelu_tanh(s->hb[i]) : silu(s->hb[i]);
        s->hb[i] = gate * s->hb2[i];
    }
    matmul(s->xb2, s->hb, L->w_down, c->n_ff, c->n_embd);
    if (L->post_ffw_norm != NULL)
        rmsnorm(s->xb2, s->xb2, L->post_ffw_norm, c->n_embd, c->rms_eps);
    for (int i = 0; i < c->n_embd; i++)
        s->x[i] += s->xb2[i];
}

/* Runs one token at `pos` (the caches hold positions 0..pos-1) and writes its logits. */
static void forward_token(run_state *s, const ref_model *m, int32_t token, int pos,
                          ref_mask mask, double *logits)
{
    const ref_config *c = &m->config;
    double embd_scale = c->arch == REF_ARCH_GEMMA3 ? sqrt((double)c->n_embd) : 1.0;
    const double *row = m->token_embd + (size_t)token * c->n_embd;
    for (int i = 0; i < c->n_embd; i++)
        s->x[i] = row[i] * embd_scale;

    for (int il = 0; il < c->n_layer; il++) {
        attention_block(s, m, il, pos, mask);
        ffn_block(s, m, il);
    }

    rmsnorm(s->xb, s->x, m->output_norm, c->n_embd, c->rms_eps);
    matmul(logits, s->xb, m->output, c->n_embd, c->n_vocab);
    if (c->final_softcap > 0)
        for (int i = 0; i < c->n_vocab; i++)
            logits[i] = c->final_softcap * tanh(logits[i] / c->final_softcap);
}

int ref_forward_masked(const ref_model *m, const int32_t *tokens, size_t n, ref_mask mask,
                       double *logits)
{
    if (m == NULL || tokens == NULL || logits == NULL || n == 0 || n > (1u << 20))
        return GRAFT_EINVAL;
    for (size_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->config.n_vocab)
            return GRAFT_EINVAL;
    run_state s;
    if (alloc_state(&s, &m->config, n) != GRAFT_OK)
        return GRAFT_ENOMEM;
    for (size_t t = 0; t < n; t++)
        forward_token(&s, m, tokens[t], (int)t, mask, logits + t * (size_t)m->config.n_vocab);
    free_state(&s);
    return GRAFT_OK;
}

int ref_forward(const ref_model *m, const int32_t *tokens, size_t n, double *logits)
{
    return ref_forward_masked(m, tokens, n, REF_MASK_MODEL, logits);
}
