/*
 * synth.c: `graft synth`: GGUF files with random weights at the shapes of real models.
 *
 * Tests and benchmarks need every supported architecture at realistic sizes, and real
 * weights are too big to ship. graft_synth_write() writes a GGUF v3 file that follows
 * llama.cpp's conventions (metadata keys, tensor names and shapes of docs/architectures.md),
 * so graft and llama.cpp both load it:
 *   - a preset gives the shapes (tiny, qwen3-0.6b, llama-1b, gemma3-1b); the architecture
 *     picks the tensors and keys, so any architecture can be written at any preset;
 *   - matrices are Normal(0, 1/sqrt(n_in)) so activations stay O(1); norm weights are
 *     1 + Normal(0, 0.1) and qwen2 biases Normal(0, 0.1), both always F32; token_embd is
 *     Normal(0, 1), except gemma3 (whose embeddings are scaled up by sqrt(n_embd)):
 *     Normal(0, 1/sqrt(n_embd)). Output is tied to token_embd at every preset;
 *   - llama at the llama-1b preset also gets rope_freqs.weight, the llama3 scaling factors;
 *   - the tokenizer is copied from a vocab-only GGUF, or a SentencePiece-style vocabulary
 *     is synthesized (see "Synthesized vocabulary").
 *
 * DETERMINISM: each tensor draws from its own xoshiro256** stream, seeded from the seed and
 * the tensor's name, and its rows are generated in order: the same options give the same
 * bytes, and a tensor's values do not depend on which other tensors the file holds.
 *
 * STREAMING: tensor data is produced a row at a time inside the writer's fill callback (which may
 * ask for any number of bytes per call), so only one row of each tensor is held here (the writer
 * itself buffers one whole tensor at a time). The file is written under a temporary name and
 * renamed into place: a failure leaves no partial file behind.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "util/util.h"

#define TWO_PI 6.283185307179586

/* ---- random numbers ------------------------------------------------------------------ */

typedef struct synth_rng {
    graft__rng state;
    double spare;  /* the polar method gives normals in pairs */
    bool has_spare;
} synth_rng;

static double rng_uniform(synth_rng *r)
{
    return graft__rng_unit(&r->state);
}

/* Standard normal (Marsaglia's polar method: Box-Muller without the sine and cosine). */
static double rng_normal(synth_rng *r)
{
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    double u, v, q;
    do {
        u = 2.0 * rng_uniform(r) - 1.0;
        v = 2.0 * rng_uniform(r) - 1.0;
        q = u * u + v * v;
    } while (q >= 1.0 || q == 0.0);
    double scale = sqrt(-2.0 * log(q) / q);
    r->spare = v * scale;
    r->has_spare = true;
    return u * scale;
}

/* The stream of one tensor: the seed mixed with an FNV-1a hash of the tensor's name. */
static void rng_seed(synth_rng *r, uint64_t seed, const char *name)
{
    uint64_t h = graft__fnv1a(GRAFT_FNV1A_BASIS, name, strlen(name));
    graft__rng_seed(&r->state, graft__splitmix64(&seed) ^ h);
    r->has_spare = false;
}

/* ---- presets and architectures ------------------------------------------------------- */

typedef struct synth_preset {
    const char *name;
    int32_t n_embd, n_ff, n_head, n_head_kv, head_dim;
    int32_t n_layer;
    int32_t n_layer_gemma3; /* gemma3 at this preset (tiny gets enough layers for 2 groups) */
    int32_t n_vocab;        /* when no vocabulary file is given */
    int32_t n_ctx;
    float rope_base;
    float rope_base_swa;    /* gemma3 sliding-window layers */
    float rms_eps;
    int32_t sliding_window; /* gemma3 only; presets of other models get gemma3-1b's */
    int32_t swa_pattern;
    bool llama3_rope;       /* llama3 rope scaling (rope_freqs.weight where the arch has it) */
} synth_preset;

static const synth_preset presets[] = {
    {.name = "tiny", .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_layer = 4, .n_layer_gemma3 = 6, .n_vocab = 1024, .n_ctx = 4096, .rope_base = 10000.0f,
     .rope_base_swa = 10000.0f, .rms_eps = 1e-5f, .sliding_window = 16, .swa_pattern = 3},
    {.name = "qwen3-0.6b", .n_embd = 1024, .n_ff = 3072, .n_head = 16, .n_head_kv = 8,
     .head_dim = 128, .n_layer = 28, .n_layer_gemma3 = 28, .n_vocab = 151936, .n_ctx = 40960,
     .rope_base = 1e6f, .rope_base_swa = 10000.0f, .rms_eps = 1e-6f, .sliding_window = 512,
     .swa_pattern = 6},
    {.name = "llama-1b", .n_embd = 2048, .n_ff = 8192, .n_head = 32, .n_head_kv = 8,
     .head_dim = 64, .n_layer = 16, .n_layer_gemma3 = 16, .n_vocab = 128256, .n_ctx = 131072,
     .rope_base = 500000.0f, .rope_base_swa = 10000.0f, .rms_eps = 1e-5f,
     .sliding_window = 512, .swa_pattern = 6, .llama3_rope = true},
    {.name = "gemma3-1b", .n_embd = 1152, .n_ff = 6912, .n_head = 4, .n_head_kv = 1,
     .head_dim = 256, .n_layer = 26, .n_layer_gemma3 = 26, .n_vocab = 262144, .n_ctx = 32768,
     .rope_base = 1e6f, .rope_base_swa = 10000.0f, .rms_eps = 1e-6f, .sliding_window = 512,
     .swa_pattern = 6},
};

/* Llama 3.x rope scaling (the llama-1b preset): factor, low/high frequency factors and the
 * original training context. */
#define LLAMA3_FACTOR 32.0
#define LLAMA3_LOW_FREQ_FACTOR 1.0
#define LLAMA3_HIGH_FREQ_FACTOR 4.0
#define LLAMA3_ORIGINAL_CTX 8192.0

typedef struct synth_arch {
    const char *name;
    bool qkv_bias;       /* qwen2 */
    bool qk_norm;        /* qwen3, gemma3 */
    bool post_norms;     /* gemma3: post_attention_norm, post_ffw_norm */
    bool sliding_window; /* gemma3 */
    bool small_embd;     /* gemma3: token_embd ~ Normal(0, 1/sqrt(n_embd)) */
    bool rope_freqs;     /* llama: loads rope_freqs.weight (others would refuse the tensor) */
} synth_arch;

static const synth_arch archs[] = {
    {.name = "llama", .rope_freqs = true},
    {.name = "qwen2", .qkv_bias = true},
    {.name = "qwen3", .qk_norm = true},
    {.name = "gemma3", .qk_norm = true, .post_norms = true, .sliding_window = true,
     .small_embd = true},
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* The tensor types synth writes matrices in. */
static const uint32_t synth_types[] = {
    GRAFT_TYPE_F32,  GRAFT_TYPE_F16,  GRAFT_TYPE_BF16, GRAFT_TYPE_Q8_0,
    GRAFT_TYPE_Q4_0, GRAFT_TYPE_Q4_1, GRAFT_TYPE_Q5_0, GRAFT_TYPE_Q5_1,
    GRAFT_TYPE_IQ4_NL, GRAFT_TYPE_Q4_K, GRAFT_TYPE_Q5_K, GRAFT_TYPE_Q6_K,
};

/* llama.cpp's general.file_type (enum llama_ftype) for a file whose matrices are `type`. */
static uint32_t file_type_of(uint32_t type)
{
    switch (type) {
    case GRAFT_TYPE_F32: return 0;
    case GRAFT_TYPE_F16: return 1;
    case GRAFT_TYPE_Q4_0: return 2;
    case GRAFT_TYPE_Q4_1: return 3;
    case GRAFT_TYPE_Q8_0: return 7;
    case GRAFT_TYPE_Q5_0: return 8;
    case GRAFT_TYPE_Q5_1: return 9;
    case GRAFT_TYPE_Q4_K: return 14; /* Q4_K_S */
    case GRAFT_TYPE_Q5_K: return 16; /* Q5_K_S */
    case GRAFT_TYPE_Q6_K: return 18;
    case GRAFT_TYPE_IQ4_NL: return 25;
    case GRAFT_TYPE_BF16: return 32;
    default: return 0;
    }
}

static bool is_float_type(uint32_t type)
{
    return type == GRAFT_TYPE_F32 || type == GRAFT_TYPE_F16 || type == GRAFT_TYPE_BF16;
}

/* factors (rope_dims/2): the llama3 rule. Frequency i (base^(-2i/rope_dims)) keeps its value
 * when its wavelength is below original_ctx/high_freq_factor, is divided by `factor` above
 * original_ctx/low_freq_factor, and in between by a factor that blends the two smoothly.
 * Declared in model.h: tests/test_synth.c checks it against independently computed values. */
void graft__synth_llama3_rope_factors(float *factors, int32_t rope_dims, double base,
                                      double factor, double low_freq_factor,
                                      double high_freq_factor, double original_ctx)
{
    double low_freq_wavelen = original_ctx / low_freq_factor;
    double high_freq_wavelen = original_ctx / high_freq_factor;
    for (int32_t i = 0; i < rope_dims / 2; i++) {
        double freq = pow(base, -2.0 * i / rope_dims);
        double wavelen = TWO_PI / freq;
        if (wavelen < high_freq_wavelen) {
            factors[i] = 1.0f;
        } else if (wavelen > low_freq_wavelen) {
            factors[i] = (float)factor;
        } else {
            double smooth = (original_ctx / wavelen - low_freq_factor) /
                            (high_freq_factor - low_freq_factor);
            factors[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* ---- tensors and their streamed data --------------------------------------------------- */

typedef struct synth_tensor {
    char name[48];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[2];      /* ne[0]: row length; ne[1]: rows (1 for a vector) */
    double mean, std;    /* values are mean + std * Normal(0, 1) ... */
    const float *values; /* ... or these ne[0] fixed values (rope_freqs) */
    synth_rng rng;
    uint64_t rows_done;
    size_t row_bytes;
    size_t row_pos; /* bytes of `packed` already handed out */
    float *row;     /* (ne[0]) the current row, allocated while the tensor is written */
    uint8_t *packed; /* (row_bytes) the current row in `type` */
} synth_tensor;

static void release_row(synth_tensor *t)
{
    graft__free(t->row);
    graft__free(t->packed);
    t->row = NULL;
    t->packed = NULL;
}

/* Generates the tensor's next row into t->packed. */
static int next_row(synth_tensor *t)
{
    if (t->rows_done == t->ne[1])
        return GRAFT_EINVAL; /* the writer asked for more bytes than the tensor holds */
    if (t->row == NULL) {
        t->row = graft__malloc((size_t)t->ne[0] * sizeof *t->row);
        t->packed = graft__malloc(t->row_bytes);
        if (t->row == NULL || t->packed == NULL)
            return GRAFT_ENOMEM;
    }
    for (uint64_t i = 0; i < t->ne[0]; i++)
        t->row[i] = t->values ? t->values[i] : (float)(t->mean + t->std * rng_normal(&t->rng));
    int rc = graft__quantize_row(t->type, t->row, t->packed, (int64_t)t->ne[0]);
    t->rows_done++;
    t->row_pos = 0;
    return rc;
}

/* The writer's fill callback: the next `size` bytes of the tensor's data. */
static int fill_tensor(void *user, void *dst, size_t size)
{
    synth_tensor *t = user;
    uint8_t *out = dst;
    while (size > 0) {
        if (t->row_pos == t->row_bytes) {
            int rc = next_row(t);
            if (rc != GRAFT_OK) {
                release_row(t);
                return rc;
            }
        }
        size_t n = t->row_bytes - t->row_pos < size ? t->row_bytes - t->row_pos : size;
        memcpy(out, t->packed + t->row_pos, n);
        out += n;
        size -= n;
        t->row_pos += n;
    }
    if (t->rows_done == t->ne[1] && t->row_pos == t->row_bytes)
        release_row(t);
    return GRAFT_OK;
}

/* ---- the job: everything one graft_synth_write builds and frees ---------------------- */

typedef struct synth_job {
    const synth_arch *arch;
    const synth_preset *preset;
    const graft_synth_options *opts;
    int32_t n_layer;
    int32_t n_vocab;
    graft__gguf_writer *w;
    graft__gguf *vocab_file; /* open while the writer refers to it, or NULL */
    synth_tensor *tensors;
    size_t n_tensors, cap_tensors;
    float *rope_factors; /* (head_dim/2) or NULL */
} synth_job;

static void job_free(synth_job *job)
{
    for (size_t i = 0; i < job->n_tensors; i++)
        release_row(&job->tensors[i]);
    graft__free(job->tensors);
    graft__free(job->rope_factors);
    graft__gguf_writer_free(job->w);
    graft__gguf_close(job->vocab_file);
}

/* Plans a tensor of ne0 x ne1 (ne1 0: a vector of ne0) with values mean + std * N(0, 1). */
static int add_tensor(synth_job *job, const char *name, uint32_t type, uint64_t ne0,
                      uint64_t ne1, double mean, double std)
{
    if (job->n_tensors == job->cap_tensors) {
        size_t cap = job->cap_tensors ? 2 * job->cap_tensors : 64;
        synth_tensor *grown = graft__realloc(job->tensors, cap * sizeof *grown);
        if (grown == NULL)
            return GRAFT_ENOMEM;
        job->tensors = grown;
        job->cap_tensors = cap;
    }
    synth_tensor *t = &job->tensors[job->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->mean = mean;
    t->std = std;
    t->row_bytes = graft__type_row_bytes(type, ne0);
    t->row_pos = t->row_bytes;
    rng_seed(&t->rng, job->opts->seed, t->name);
    return GRAFT_OK;
}

/* Plans blk.<il>.<what>. */
static int add_layer_tensor(synth_job *job, int32_t il, const char *what, uint32_t type,
                            uint64_t ne0, uint64_t ne1, double mean, double std)
{
    char name[48];
    snprintf(name, sizeof name, "blk.%d.%s", (int)il, what);
    return add_tensor(job, name, type, ne0, ne1, mean, std);
}

/* A matrix y = W x with x of n_in and y of n_out: Normal(0, 1/sqrt(n_in)). */
static int add_matrix(synth_job *job, int32_t il, const char *what, int64_t n_in,
                      int64_t n_out)
{
    return add_layer_tensor(job, il, what, (uint32_t)job->opts->type, (uint64_t)n_in,
                            (uint64_t)n_out, 0.0, 1.0 / sqrt((double)n_in));
}

static int add_norm(synth_job *job, int32_t il, const char *what, int64_t n)
{
    return add_layer_tensor(job, il, what, GRAFT_TYPE_F32, (uint64_t)n, 0, 1.0, 0.1);
}

static int add_bias(synth_job *job, int32_t il, const char *what, int64_t n)
{
    return add_layer_tensor(job, il, what, GRAFT_TYPE_F32, (uint64_t)n, 0, 0.0, 0.1);
}

static int plan_layer(synth_job *job, int32_t il)
{
    const synth_preset *p = job->preset;
    const synth_arch *a = job->arch;
    int64_t n_q = (int64_t)p->n_head * p->head_dim;
    int64_t n_kv = (int64_t)p->n_head_kv * p->head_dim;
    int rc = add_norm(job, il, "attn_norm.weight", p->n_embd);
    rc = rc ? rc : add_matrix(job, il, "attn_q.weight", p->n_embd, n_q);
    rc = rc ? rc : add_matrix(job, il, "attn_k.weight", p->n_embd, n_kv);
    rc = rc ? rc : add_matrix(job, il, "attn_v.weight", p->n_embd, n_kv);
    if (a->qkv_bias) {
        rc = rc ? rc : add_bias(job, il, "attn_q.bias", n_q);
        rc = rc ? rc : add_bias(job, il, "attn_k.bias", n_kv);
        rc = rc ? rc : add_bias(job, il, "attn_v.bias", n_kv);
    }
    if (a->qk_norm) {
        rc = rc ? rc : add_norm(job, il, "attn_q_norm.weight", p->head_dim);
        rc = rc ? rc : add_norm(job, il, "attn_k_norm.weight", p->head_dim);
    }
    rc = rc ? rc : add_matrix(job, il, "attn_output.weight", n_q, p->n_embd);
    if (a->post_norms)
        rc = rc ? rc : add_norm(job, il, "post_attention_norm.weight", p->n_embd);
    rc = rc ? rc : add_norm(job, il, "ffn_norm.weight", p->n_embd);
    rc = rc ? rc : add_matrix(job, il, "ffn_gate.weight", p->n_embd, p->n_ff);
    rc = rc ? rc : add_matrix(job, il, "ffn_up.weight", p->n_embd, p->n_ff);
    rc = rc ? rc : add_matrix(job, il, "ffn_down.weight", p->n_ff, p->n_embd);
    if (a->post_norms)
        rc = rc ? rc : add_norm(job, il, "post_ffw_norm.weight", p->n_embd);
    return rc;
}

/* rope_freqs.weight: the llama3 scaling factors of the preset. */
static int add_rope_freqs(synth_job *job)
{
    const synth_preset *p = job->preset;
    int32_t n = p->head_dim / 2;
    job->rope_factors = graft__malloc((size_t)n * sizeof *job->rope_factors);
    if (job->rope_factors == NULL)
        return GRAFT_ENOMEM;
    graft__synth_llama3_rope_factors(job->rope_factors, p->head_dim, p->rope_base,
                                     LLAMA3_FACTOR, LLAMA3_LOW_FREQ_FACTOR,
                                     LLAMA3_HIGH_FREQ_FACTOR, LLAMA3_ORIGINAL_CTX);
    int rc = add_tensor(job, "rope_freqs.weight", GRAFT_TYPE_F32, (uint64_t)n, 0, 0.0, 0.0);
    if (rc == GRAFT_OK)
        job->tensors[job->n_tensors - 1].values = job->rope_factors;
    return rc;
}

/* Plans every tensor of the file (output tied to token_embd). */
static int plan_tensors(synth_job *job)
{
    const synth_preset *p = job->preset;
    double embd_std = job->arch->small_embd ? 1.0 / sqrt((double)p->n_embd) : 1.0;
    int rc = add_tensor(job, "token_embd.weight", (uint32_t)job->opts->type,
                        (uint64_t)p->n_embd, (uint64_t)job->n_vocab, 0.0, embd_std);
    if (rc == GRAFT_OK && p->llama3_rope && job->arch->rope_freqs)
        rc = add_rope_freqs(job);
    if (rc == GRAFT_OK)
        rc = add_tensor(job, "output_norm.weight", GRAFT_TYPE_F32, (uint64_t)p->n_embd, 0,
                        1.0, 0.1);
    for (int32_t il = 0; rc == GRAFT_OK && il < job->n_layer; il++)
        rc = plan_layer(job, il);
    return rc;
}

/* Hands every planned tensor to the writer, its data to come from fill_tensor. */
static int add_tensors_to_writer(synth_job *job)
{
    for (size_t i = 0; i < job->n_tensors; i++) {
        synth_tensor *t = &job->tensors[i];
        int rc = graft__gguf_writer_add_tensor(job->w, t->name, t->type, t->n_dims, t->ne,
                                               NULL, fill_tensor, t);
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

/* ---- metadata -------------------------------------------------------------------------- */

static int set_arch_u32(synth_job *job, const char *key, uint32_t value)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", job->arch->name, key);
    return graft__gguf_writer_set_u32(job->w, full, value);
}

static int set_arch_f32(synth_job *job, const char *key, float value)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", job->arch->name, key);
    return graft__gguf_writer_set_f32(job->w, full, value);
}

static int write_general(synth_job *job)
{
    uint32_t type = (uint32_t)job->opts->type;
    char name[128];
    snprintf(name, sizeof name, "synth %s %s %s", job->arch->name, job->preset->name,
             graft__type_traits_of(type)->name);
    bool bad = graft__gguf_writer_set_str(job->w, "general.architecture", job->arch->name) ||
               graft__gguf_writer_set_str(job->w, "general.name", name) ||
               graft__gguf_writer_set_u32(job->w, "general.file_type", file_type_of(type));
    if (!is_float_type(type))
        bad = bad || graft__gguf_writer_set_u32(job->w, "general.quantization_version", 2);
    return bad ? GRAFT_ENOMEM : GRAFT_OK;
}

static int write_hparams(synth_job *job)
{
    const synth_preset *p = job->preset;
    bool bad = set_arch_u32(job, "context_length", (uint32_t)p->n_ctx) ||
               set_arch_u32(job, "embedding_length", (uint32_t)p->n_embd) ||
               set_arch_u32(job, "block_count", (uint32_t)job->n_layer) ||
               set_arch_u32(job, "feed_forward_length", (uint32_t)p->n_ff) ||
               set_arch_u32(job, "attention.head_count", (uint32_t)p->n_head) ||
               set_arch_u32(job, "attention.head_count_kv", (uint32_t)p->n_head_kv) ||
               set_arch_u32(job, "attention.key_length", (uint32_t)p->head_dim) ||
               set_arch_u32(job, "attention.value_length", (uint32_t)p->head_dim) ||
               set_arch_f32(job, "attention.layer_norm_rms_epsilon", p->rms_eps) ||
               set_arch_f32(job, "rope.freq_base", p->rope_base) ||
               set_arch_u32(job, "rope.dimension_count", (uint32_t)p->head_dim) ||
               set_arch_u32(job, "vocab_size", (uint32_t)job->n_vocab);
    if (job->arch->sliding_window)
        bad = bad || set_arch_u32(job, "attention.sliding_window", (uint32_t)p->sliding_window) ||
              set_arch_u32(job, "attention.sliding_window_pattern", (uint32_t)p->swa_pattern) ||
              set_arch_f32(job, "rope.freq_base_swa", p->rope_base_swa);
    return bad ? GRAFT_ENOMEM : GRAFT_OK;
}

/* ---- Synthesized vocabulary ------------------------------------------------------------
 * A valid SentencePiece-style vocabulary (tokenizer.ggml.model "llama"), as llama.cpp
 * expects one: <unk> = 0 (unknown), <s> = 1 and </s> = 2 (control), the 256 byte tokens
 * <0x00>..<0xFF>, then normal tokens with descending scores: "▁" and the printable ASCII
 * characters, pieces of common words (every prefix of "▁word", so each piece is the merge
 * of two tokens the vocabulary already has and text tokenizes to fewer tokens than bytes),
 * letter pairs, and "<unusedN>" fillers up to the preset's vocabulary size. All distinct.
 */

static const char *const vocab_words[] = {
    "the", "and", "was", "to", "a", "he", "she", "it", "they", "of", "in", "that", "with",
    "for", "on", "his", "her", "said", "you", "day", "one", "there", "time", "upon", "once",
    "little", "big", "play", "played", "girl", "boy", "named", "loved", "saw", "happy", "very",
    "friend", "friends", "mom", "went", "had", "is", "be", "not", "but", "so", "what", "all",
    "were", "we", "when", "can", "an", "do", "this", "have", "from", "at", "are", "as", "out",
    "up", "then", "them", "like", "him", "into", "go", "see", "no", "could", "my", "who",
    "now", "water", "long", "down", "way", "find", "found", "did", "get", "come", "came",
    "made", "make", "over", "new", "take", "know", "back", "give", "after", "just", "good",
    "man", "think", "say", "great", "where", "help", "helped", "too", "old", "same", "want",
    "wanted", "also", "around", "small", "put", "well", "because", "here", "why", "ask",
    "again", "tree", "park", "ball", "red", "blue", "green", "sun", "dog", "cat", "bird",
    "fun", "toy", "home", "house", "look", "looked", "felt", "sad", "smiled", "together",
    "lily", "tim", "ben", "sue", "sky", "high", "outside", "inside", "best", "bed", "car",
    "run", "ran", "jump", "some", "other", "thing", "things", "would", "your", "how", "about",
    "more", "many", "each", "very", "much", "people", "world", "story", "night", "light",
};

/* Sentence starters: "▁Once", "▁The", ... */
static const char *const vocab_capitalized[] = {
    "once", "the", "she", "he", "they", "one", "it", "lily", "tim", "ben", "sue", "then",
    "but", "mom", "when", "i", "we", "you", "there", "after", "hello", "world",
};

/* Pieces inside words (no "▁"). */
static const char *const vocab_suffixes[] = {
    "ing", "ed", "er", "ly", "es", "en", "an", "on", "in", "at", "ay", "ow", "ould", "ight",
    "'s", "ll", "'t", "th", "st", "nd", "ea", "ou", "oo", "ee",
};

#define SPACE_MARK "\xe2\x96\x81" /* "▁" (U+2581), SentencePiece's space */

typedef struct synth_vocab {
    int32_t n, cap;     /* tokens so far; the vocabulary size */
    int32_t n_special;  /* id of the first normal token */
    char *text;         /* token texts, each NUL-terminated */
    size_t text_len, text_cap;
    size_t *offset;     /* (cap) where each token's text starts */
    float *scores;      /* (cap) */
    int32_t *types;     /* (cap) */
    uint32_t *slots;    /* hash set of ids + 1 (0: empty), for distinctness */
    size_t n_slots;     /* a power of two above 2 * cap */
} synth_vocab;

static void vocab_free(synth_vocab *v)
{
    graft__free(v->text);
    graft__free(v->offset);
    graft__free(v->scores);
    graft__free(v->types);
    graft__free(v->slots);
}

static int vocab_init(synth_vocab *v, int32_t cap)
{
    memset(v, 0, sizeof *v);
    v->cap = cap;
    v->n_slots = 1;
    while (v->n_slots < 2 * (size_t)cap)
        v->n_slots *= 2;
    v->text_cap = 16 * (size_t)cap;
    v->text = graft__malloc(v->text_cap);
    v->offset = graft__malloc((size_t)cap * sizeof *v->offset);
    v->scores = graft__malloc((size_t)cap * sizeof *v->scores);
    v->types = graft__malloc((size_t)cap * sizeof *v->types);
    v->slots = graft__calloc(v->n_slots, sizeof *v->slots);
    return v->text && v->offset && v->scores && v->types && v->slots ? GRAFT_OK : GRAFT_ENOMEM;
}

static size_t text_hash(const char *text, size_t len)
{
    return (size_t)graft__fnv1a(GRAFT_FNV1A_BASIS, text, len);
}

/* The hash slot holding `text`, or the empty slot where it belongs. */
static uint32_t *vocab_slot(synth_vocab *v, const char *text, size_t len)
{
    size_t i = text_hash(text, len) & (v->n_slots - 1);
    while (v->slots[i] != 0) {
        const char *other = v->text + v->offset[v->slots[i] - 1];
        if (strlen(other) == len && memcmp(other, text, len) == 0)
            break;
        i = (i + 1) & (v->n_slots - 1);
    }
    return &v->slots[i];
}

/* Appends a token unless the vocabulary is full or already has this text. Normal tokens
 * get descending scores (0, -1, -2, ...); the others score 0. */
static int vocab_add(synth_vocab *v, const char *text, size_t len, int32_t type)
{
    uint32_t *slot = vocab_slot(v, text, len);
    if (v->n == v->cap || *slot != 0)
        return GRAFT_OK;
    if (v->text_len + len + 1 > v->text_cap) {
        size_t cap = 2 * v->text_cap + len + 1;
        char *grown = graft__realloc(v->text, cap);
        if (grown == NULL)
            return GRAFT_ENOMEM;
        v->text = grown;
        v->text_cap = cap;
    }
    memcpy(v->text + v->text_len, text, len);
    v->text[v->text_len + len] = '\0';
    v->offset[v->n] = v->text_len;
    v->text_len += len + 1;
    v->scores[v->n] = type == GRAFT_TOKEN_NORMAL ? (float)(v->n_special - v->n) : 0.0f;
    v->types[v->n] = type;
    *slot = (uint32_t)v->n + 1;
    v->n++;
    return GRAFT_OK;
}

static int vocab_add_normal(synth_vocab *v, const char *text)
{
    return vocab_add(v, text, strlen(text), GRAFT_TOKEN_NORMAL);
}

/* Every prefix of (▁)word of two symbols or more: "▁t", "▁th", "▁the". */
static int vocab_add_prefixes(synth_vocab *v, const char *word, bool space, bool capital)
{
    char piece[64];
    size_t len = 0;
    if (space) {
        memcpy(piece, SPACE_MARK, 3);
        len = 3;
    }
    int rc = GRAFT_OK;
    for (size_t i = 0; word[i] != '\0' && len + 1 < sizeof piece && rc == GRAFT_OK; i++) {
        char c = word[i];
        piece[len++] = (i == 0 && capital && c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
        if (space || i > 0)
            rc = vocab_add(v, piece, len, GRAFT_TOKEN_NORMAL);
    }
    return rc;
}

static int vocab_add_specials(synth_vocab *v)
{
    int rc = vocab_add(v, "<unk>", 5, GRAFT_TOKEN_UNKNOWN);
    rc = rc ? rc : vocab_add(v, "<s>", 3, GRAFT_TOKEN_CONTROL);
    rc = rc ? rc : vocab_add(v, "</s>", 4, GRAFT_TOKEN_CONTROL);
    for (int b = 0; b < 256 && rc == GRAFT_OK; b++) {
        char text[8];
        snprintf(text, sizeof text, "<0x%02X>", b);
        rc = vocab_add(v, text, 6, GRAFT_TOKEN_BYTE);
    }
    v->n_special = v->n;
    return rc;
}

static int vocab_add_pieces(synth_vocab *v)
{
    int rc = vocab_add_normal(v, SPACE_MARK);
    for (char c = '!'; c <= '~' && rc == GRAFT_OK; c++)
        rc = vocab_add(v, &c, 1, GRAFT_TOKEN_NORMAL);
    for (size_t i = 0; i < N_ELEMS(vocab_words) && rc == GRAFT_OK; i++)
        rc = vocab_add_prefixes(v, vocab_words[i], true, false);
    for (size_t i = 0; i < N_ELEMS(vocab_capitalized) && rc == GRAFT_OK; i++)
        rc = vocab_add_prefixes(v, vocab_capitalized[i], true, true);
    for (size_t i = 0; i < N_ELEMS(vocab_suffixes) && rc == GRAFT_OK; i++)
        rc = vocab_add_prefixes(v, vocab_suffixes[i], false, false);
    for (char a = 'a'; a <= 'z' && rc == GRAFT_OK; a++)
        for (char b = 'a'; b <= 'z' && rc == GRAFT_OK; b++)
            rc = vocab_add(v, (char[]){a, b}, 2, GRAFT_TOKEN_NORMAL);
    for (int i = 0; v->n < v->cap && rc == GRAFT_OK; i++) {
        char text[32];
        snprintf(text, sizeof text, "<unused%d>", i);
        rc = vocab_add_normal(v, text);
    }
    return rc;
}

static int write_vocab_keys(synth_job *job, const synth_vocab *v)
{
    graft__gguf_str *strs = graft__malloc((size_t)v->n * sizeof *strs);
    if (strs == NULL)
        return GRAFT_ENOMEM;
    for (int32_t i = 0; i < v->n; i++) {
        strs[i].ptr = v->text + v->offset[i];
        strs[i].len = strlen(strs[i].ptr);
    }
    graft__gguf_writer *w = job->w;
    bool bad =
        graft__gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") ||
        graft__gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)v->n) ||
        graft__gguf_writer_set_arr(w, "tokenizer.ggml.scores", GRAFT_GGUF_FLOAT32, v->scores,
                                   (uint64_t)v->n) ||
        graft__gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GRAFT_GGUF_INT32, v->types,
                                   (uint64_t)v->n) ||
        graft__gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) ||
        graft__gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) ||
        graft__gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0) ||
        graft__gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true) ||
        graft__gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    graft__free(strs);
    return bad ? GRAFT_ENOMEM : GRAFT_OK;
}

/* Writes the synthesized vocabulary of the preset's size. */
static int write_synth_vocab(synth_job *job)
{
    synth_vocab v;
    int rc = vocab_init(&v, job->preset->n_vocab);
    rc = rc ? rc : vocab_add_specials(&v);
    rc = rc ? rc : vocab_add_pieces(&v);
    rc = rc ? rc : write_vocab_keys(job, &v);
    vocab_free(&v);
    job->n_vocab = job->preset->n_vocab;
    return rc;
}

/* Opens the vocab-only GGUF, takes its token count as n_vocab and copies every
 * tokenizer.* key. */
static int copy_vocab(synth_job *job, char **errmsg)
{
    const char *path = job->opts->vocab_path;
    char *msg = NULL;
    int rc = graft__gguf_open(path, &job->vocab_file, &msg);
    if (rc != GRAFT_OK) {
        rc = graft__errmsg(errmsg, rc, "cannot read vocabulary '%s': %s", path,
                           msg ? msg : graft_status_str(rc));
        graft__free(msg);
        return rc;
    }
    const graft__gguf_array *tokens = NULL;
    graft__gguf_str model;
    if (graft__gguf_get_arr(job->vocab_file, "tokenizer.ggml.tokens", GRAFT_GGUF_STRING,
                            &tokens) != GRAFT_OK ||
        tokens->count == 0 || tokens->count > INT32_MAX ||
        graft__gguf_get_str(job->vocab_file, "tokenizer.ggml.model", &model) != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "'%s' is not a vocabulary: it needs a tokenizer.ggml.model string "
                             "and a non-empty tokenizer.ggml.tokens string array",
                             path);
    job->n_vocab = (int32_t)tokens->count;
    for (uint64_t i = 0; i < graft__gguf_n_kv(job->vocab_file); i++) {
        const graft__gguf_kv *kv = graft__gguf_kv_at(job->vocab_file, i);
        if (kv->key.len > 10 && memcmp(kv->key.ptr, "tokenizer.", 10) == 0 &&
            graft__gguf_writer_copy_kv(job->w, kv) != GRAFT_OK)
            return graft__errmsg(errmsg, GRAFT_ENOMEM, "out of memory");
    }
    return GRAFT_OK;
}

/* ---- options and the whole file ---------------------------------------------------------- */

static const synth_arch *find_arch(const char *name)
{
    for (size_t i = 0; name != NULL && i < N_ELEMS(archs); i++)
        if (strcmp(archs[i].name, name) == 0)
            return &archs[i];
    return NULL;
}

static const synth_preset *find_preset(const char *name)
{
    for (size_t i = 0; name != NULL && i < N_ELEMS(presets); i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

static bool is_synth_type(int type)
{
    for (size_t i = 0; i < N_ELEMS(synth_types); i++)
        if ((int)synth_types[i] == type)
            return true;
    return false;
}

/* Every matrix row (n_embd, n_head*head_dim, n_ff) must be a whole number of blocks. */
static int check_row_lengths(const synth_preset *p, int type, char **errmsg)
{
    const graft__type_traits *t = graft__type_traits_of((uint32_t)type);
    const struct {
        const char *what;
        int64_t n;
    } rows[] = {{"n_embd", p->n_embd},
                {"n_head*head_dim", (int64_t)p->n_head * p->head_dim},
                {"n_ff", p->n_ff}};
    for (size_t i = 0; i < N_ELEMS(rows); i++)
        if (rows[i].n % t->block_elems != 0)
            return graft__errmsg(errmsg, GRAFT_EINVAL,
                                 "type %s packs rows in blocks of %u elements, but preset %s "
                                 "has rows of %lld (%s); use a type with 32-element blocks",
                                 t->name, t->block_elems, p->name, (long long)rows[i].n,
                                 rows[i].what);
    return GRAFT_OK;
}

static int check_options(const graft_synth_options *o, synth_job *job, char **errmsg)
{
    if (o == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "no options given");
    job->opts = o;
    job->arch = find_arch(o->arch);
    job->preset = find_preset(o->preset);
    if (job->arch == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "unknown architecture '%s' (expected llama, qwen2, qwen3 or gemma3)",
                             o->arch ? o->arch : "(none)");
    if (job->preset == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "unknown preset '%s' (expected tiny, qwen3-0.6b, llama-1b or "
                             "gemma3-1b)",
                             o->preset ? o->preset : "(none)");
    if (!is_synth_type(o->type)) {
        const char *name = graft_type_name(o->type);
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "tensor type %d (%s) is not one synth writes (expected F32, F16, "
                             "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K or Q6_K)",
                             o->type, name ? name : "unknown");
    }
    if (o->out_path == NULL || o->out_path[0] == '\0')
        return graft__errmsg(errmsg, GRAFT_EINVAL, "no output path given");
    job->n_layer = job->arch->sliding_window ? job->preset->n_layer_gemma3 : job->preset->n_layer;
    return check_row_lengths(job->preset, o->type, errmsg);
}

/* Metadata (general.*, tokenizer.*, then the architecture's keys, which need n_vocab) and
 * the tensor plan, all in the writer. */
static int build_file(synth_job *job, char **errmsg)
{
    job->w = graft__gguf_writer_create(3, GRAFT_GGUF_DEFAULT_ALIGNMENT);
    if (job->w == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "out of memory");
    int rc = write_general(job);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, rc, "out of memory");
    rc = job->opts->vocab_path ? copy_vocab(job, errmsg) : write_synth_vocab(job);
    if (rc != GRAFT_OK)
        return errmsg && *errmsg ? rc : graft__errmsg(errmsg, rc, "out of memory");
    rc = write_hparams(job);
    rc = rc ? rc : plan_tensors(job);
    rc = rc ? rc : add_tensors_to_writer(job);
    return rc ? graft__errmsg(errmsg, rc, "out of memory") : GRAFT_OK;
}

/* Writes under a temporary name, then renames into place. */
static int write_renamed(synth_job *job, char **errmsg)
{
    const char *path = job->opts->out_path;
    size_t len = strlen(path) + 32;
    char *tmp = graft__malloc(len);
    if (tmp == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "out of memory");
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    int rc = graft__gguf_writer_write_file(job->w, tmp, errmsg);
    if (rc == GRAFT_OK && rename(tmp, path) != 0) {
        rc = graft__errmsg(errmsg, GRAFT_EIO, "cannot rename '%s' to '%s': %s", tmp, path,
                           strerror(errno));
        unlink(tmp);
    }
    graft__free(tmp);
    return rc;
}

int graft_synth_write(const graft_synth_options *opts, char **errmsg)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    synth_job job = {0};
    int rc = check_options(opts, &job, errmsg);
    rc = rc ? rc : build_file(&job, errmsg);
    rc = rc ? rc : write_renamed(&job, errmsg);
    job_free(&job);
    return rc;
}
