/*
 * model_load.c: from a GGUF file to a validated graft_model.
 *
 * Loading reads the architecture's hyperparameters (docs/architectures.md lists the keys),
 * checks them against each other and against the tensor shapes, and binds every weight by
 * name. Anything inconsistent or unsupported is refused here, with a message naming the key
 * or tensor, so the forward pass can trust every shape it is given.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

typedef struct arch_desc {
    const char *name;
    graft__arch arch;
    graft__rope_layout rope_layout;
    bool has_qkv_bias;
    bool has_qk_norm;
    bool has_post_norms;
    bool gelu;
} arch_desc;

static const arch_desc arch_table[] = {
    {"llama", GRAFT_ARCH_LLAMA, GRAFT_ROPE_ADJACENT, false, false, false, false},
    {"qwen2", GRAFT_ARCH_QWEN2, GRAFT_ROPE_HALVES, true, false, false, false},
    {"qwen3", GRAFT_ARCH_QWEN3, GRAFT_ROPE_HALVES, false, true, false, false},
    {"gemma3", GRAFT_ARCH_GEMMA3, GRAFT_ROPE_HALVES, false, true, true, true},
};

const char *graft__arch_name(graft__arch arch)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (arch_table[i].arch == arch)
            return arch_table[i].name;
    return "unknown";
}

static const arch_desc *find_arch(graft__gguf_str name)
{
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (graft__gguf_str_eq(name, arch_table[i].name))
            return &arch_table[i];
    return NULL;
}

/* Key lookups for "<arch>.<suffix>". Absent keys keep *out; wrong types are errors. */
typedef struct loader {
    const graft__gguf *g;
    const char *arch;
    char **errmsg;
} loader;

static int arch_key(const loader *l, const char *suffix, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s.%s", l->arch, suffix);
    return n > 0 && (size_t)n < cap ? GRAFT_OK : GRAFT_EINVAL;
}

static int get_i32(const loader *l, const char *suffix, int32_t *out, bool required)
{
    char key[128];
    GRAFT_ASSERT(arch_key(l, suffix, key, sizeof key) == GRAFT_OK);
    int rc = graft__gguf_get_i32(l->g, key, out);
    if (rc == GRAFT_ENOTFOUND && !required)
        return GRAFT_OK;
    if (rc == GRAFT_ENOTFOUND)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: required key '%s' is missing", key);
    if (rc != GRAFT_OK)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: key '%s' must be an integer that fits in 32 bits", key);
    return GRAFT_OK;
}

static int get_f32(const loader *l, const char *suffix, float *out)
{
    char key[128];
    GRAFT_ASSERT(arch_key(l, suffix, key, sizeof key) == GRAFT_OK);
    int rc = graft__gguf_get_f32(l->g, key, out);
    if (rc == GRAFT_ENOTFOUND)
        return GRAFT_OK;
    if (rc != GRAFT_OK)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: key '%s' must be a float", key);
    if (!isfinite(*out))
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: key '%s' is not finite", key);
    return GRAFT_OK;
}

static int read_rope_scaling(const loader *l, graft__hparams *hp)
{
    char key[128];
    graft__gguf_str type = {0};
    GRAFT_ASSERT(arch_key(l, "rope.scaling.type", key, sizeof key) == GRAFT_OK);
    int rc = graft__gguf_get_str(l->g, key, &type);
    if (rc == GRAFT_ENOTFOUND || (rc == GRAFT_OK && graft__gguf_str_eq(type, "none")))
        return GRAFT_OK;
    if (rc != GRAFT_OK)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: key '%s' must be a string", key);
    if (!graft__gguf_str_eq(type, "linear"))
        return graft__errmsg(l->errmsg, GRAFT_EUNSUPPORTED,
                             "model: rope scaling type '%.*s' is not supported (none, linear)",
                             (int)type.len, type.ptr);
    float factor = 1.0f;
    rc = get_f32(l, "rope.scaling.factor", &factor);
    if (rc != GRAFT_OK)
        return rc;
    if (!(factor > 0.0f))
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: rope scaling factor %g must be positive", factor);
    hp->rope_freq_scale = 1.0f / factor;
    return GRAFT_OK;
}

/* Which layers use the sliding window: gemma3.attention.sliding_window_pattern is either a
 * period P (layer il is global when (il + 1) % P == 0; default 6) or one bool per layer. */
static int read_swa_layers(const loader *l, graft__hparams *hp)
{
    int32_t window = 0;
    int rc = get_i32(l, "attention.sliding_window", &window, false);
    if (rc != GRAFT_OK)
        return rc;
    if (window < 0)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: sliding window %d is negative",
                             window);
    hp->sliding_window = window;
    if (window == 0)
        return GRAFT_OK;
    char key[128];
    GRAFT_ASSERT(arch_key(l, "attention.sliding_window_pattern", key, sizeof key) == GRAFT_OK);
    const graft__gguf_array *flags = NULL;
    if (graft__gguf_get_arr(l->g, key, GRAFT_GGUF_BOOL, &flags) == GRAFT_OK) {
        if (flags->count != (uint64_t)hp->n_layer)
            return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                                 "model: '%s' has %llu entries for %d layers", key,
                                 (unsigned long long)flags->count, hp->n_layer);
        for (int32_t il = 0; il < hp->n_layer; il++)
            hp->layer_is_swa[il] = graft__gguf_arr_i64(flags, (uint64_t)il) != 0;
        return GRAFT_OK;
    }
    int32_t period = 6;
    rc = get_i32(l, "attention.sliding_window_pattern", &period, false);
    if (rc != GRAFT_OK)
        return rc;
    if (period < 1)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: sliding window pattern %d must be at least 1", period);
    for (int32_t il = 0; il < hp->n_layer; il++)
        hp->layer_is_swa[il] = (il + 1) % period != 0;
    return GRAFT_OK;
}

static int positive(const loader *l, const char *what, int32_t v)
{
    if (v > 0)
        return GRAFT_OK;
    return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: %s is %d, must be positive", what, v);
}

static int check_hparams(const loader *l, const graft__hparams *hp)
{
    int rc;
    if ((rc = positive(l, "embedding_length", hp->n_embd)) ||
        (rc = positive(l, "block_count", hp->n_layer)) ||
        (rc = positive(l, "feed_forward_length", hp->n_ff)) ||
        (rc = positive(l, "attention.head_count", hp->n_head)) ||
        (rc = positive(l, "attention.head_count_kv", hp->n_head_kv)) ||
        (rc = positive(l, "attention.key_length", hp->head_dim)) ||
        (rc = positive(l, "attention.value_length", hp->head_dim_v)) ||
        (rc = positive(l, "context_length", hp->n_ctx_train)) ||
        (rc = positive(l, "rope.dimension_count", hp->rope_dims)))
        return rc;
    if (hp->n_layer > GRAFT_MAX_LAYERS)
        return graft__errmsg(l->errmsg, GRAFT_EUNSUPPORTED,
                             "model: %d layers is more than the %d supported", hp->n_layer,
                             GRAFT_MAX_LAYERS);
    if (hp->n_head % hp->n_head_kv != 0)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: head_count %d is not a multiple of head_count_kv %d",
                             hp->n_head, hp->n_head_kv);
    if (hp->rope_dims > hp->head_dim || hp->rope_dims % 2 != 0)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: rope.dimension_count %d must be even and at most the head "
                             "size %d",
                             hp->rope_dims, hp->head_dim);
    if (hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) || hp->head_dim > 4096 ||
        hp->n_head > 4096)
        return graft__errmsg(l->errmsg, GRAFT_EUNSUPPORTED,
                             "model: dimensions beyond supported limits (embd %d, ff %d, "
                             "heads %d x %d)",
                             hp->n_embd, hp->n_ff, hp->n_head, hp->head_dim);
    if (!(hp->rms_eps > 0.0f) || !(hp->rope_base > 0.0f) || !(hp->rope_base_swa > 0.0f))
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: rms epsilon and rope bases must be positive");
    if (hp->final_softcap < 0.0f)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: final_logit_softcapping %g is negative", hp->final_softcap);
    return GRAFT_OK;
}

static int read_hparams(const loader *l, const arch_desc *ad, graft__hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    hp->arch = ad->arch;
    hp->rope_layout = ad->rope_layout;
    hp->rope_base = 10000.0f;
    hp->rope_base_swa = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rms_eps = 1e-5f;
    hp->head_dim = -1;
    hp->head_dim_v = -1;
    hp->rope_dims = -1;
    int rc;
    if ((rc = get_i32(l, "context_length", &hp->n_ctx_train, true)) ||
        (rc = get_i32(l, "embedding_length", &hp->n_embd, true)) ||
        (rc = get_i32(l, "block_count", &hp->n_layer, true)) ||
        (rc = get_i32(l, "feed_forward_length", &hp->n_ff, true)) ||
        (rc = get_i32(l, "attention.head_count", &hp->n_head, true)))
        return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = get_i32(l, "attention.head_count_kv", &hp->n_head_kv, false)))
        return rc;
    if (hp->n_head > 0 && hp->n_embd % hp->n_head == 0)
        hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = get_i32(l, "attention.key_length", &hp->head_dim, false)))
        return rc;
    hp->head_dim_v = hp->head_dim;
    hp->rope_dims = hp->head_dim;
    if ((rc = get_i32(l, "attention.value_length", &hp->head_dim_v, false)) ||
        (rc = get_i32(l, "rope.dimension_count", &hp->rope_dims, false)) ||
        (rc = get_f32(l, "attention.layer_norm_rms_epsilon", &hp->rms_eps)) ||
        (rc = get_f32(l, "rope.freq_base", &hp->rope_base)) ||
        (rc = get_f32(l, "rope.freq_base_swa", &hp->rope_base_swa)) ||
        (rc = get_f32(l, "final_logit_softcapping", &hp->final_softcap)) ||
        (rc = read_rope_scaling(l, hp)))
        return rc;
    if (hp->n_head <= 0 || hp->n_embd % hp->n_head != 0) {
        if (hp->head_dim < 0)
            return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                                 "model: embedding_length %d is not a multiple of head_count %d "
                                 "and attention.key_length is missing",
                                 hp->n_embd, hp->n_head);
    }
    if (hp->n_layer > 0 && hp->n_layer <= GRAFT_MAX_LAYERS && (rc = read_swa_layers(l, hp)))
        return rc;
    if ((rc = check_hparams(l, hp)))
        return rc;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = ad->arch == GRAFT_ARCH_GEMMA3 ? sqrtf((float)hp->n_embd) : 1.0f;
    return GRAFT_OK;
}

/* Binds tensor `name` with ne = {cols, rows} (rows 0: a vector of cols). */
static int bind(const loader *l, graft__weight *w, const char *name, int64_t cols, int64_t rows,
                bool required)
{
    const graft__gguf_tensor *t = graft__gguf_find_tensor(l->g, name);
    if (t == NULL) {
        if (!required)
            return GRAFT_OK;
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT, "model: tensor '%s' is missing", name);
    }
    uint32_t want_dims = rows == 0 ? 1 : 2;
    bool shape_ok = t->n_dims == want_dims && t->ne[0] == (uint64_t)cols &&
                    (rows == 0 || t->ne[1] == (uint64_t)rows);
    if (!shape_ok)
        return graft__errmsg(l->errmsg, GRAFT_EFORMAT,
                             "model: tensor '%s' has shape [%llu, %llu] (%u dims), expected "
                             "[%lld, %lld]",
                             name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                             t->n_dims, (long long)cols, (long long)(rows == 0 ? 1 : rows));
    if (!graft__type_is_supported(t->type)) {
        const graft__type_traits *tr = graft__type_traits_of(t->type);
        return graft__errmsg(l->errmsg, GRAFT_EUNSUPPORTED,
                             "model: tensor '%s' has type %s, which graft does not compute with",
                             name, tr ? tr->name : "unknown");
    }
    if (rows == 0 && t->type != GRAFT_TYPE_F32)
        return graft__errmsg(l->errmsg, GRAFT_EUNSUPPORTED,
                             "model: vector tensor '%s' must be F32", name);
    w->data = t->data;
    w->type = t->type;
    w->cols = cols;
    w->rows = rows == 0 ? 1 : rows;
    return GRAFT_OK;
}

static int bind_layer(const loader *l, const arch_desc *ad, const graft__hparams *hp, int32_t il,
                      graft__layer *L)
{
    const int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim;
    const int64_t k = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t v = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t o = (int64_t)hp->n_head * hp->head_dim_v;
    struct {
        graft__weight *w;
        const char *name;
        int64_t cols, rows;
        bool required;
    } spec[] = {
        {&L->attn_norm, "attn_norm.weight", e, 0, true},
        {&L->wq, "attn_q.weight", e, q, true},
        {&L->wk, "attn_k.weight", e, k, true},
        {&L->wv, "attn_v.weight", e, v, true},
        {&L->wo, "attn_output.weight", o, e, true},
        {&L->bq, "attn_q.bias", q, 0, ad->has_qkv_bias},
        {&L->bk, "attn_k.bias", k, 0, ad->has_qkv_bias},
        {&L->bv, "attn_v.bias", v, 0, ad->has_qkv_bias},
        {&L->q_norm, "attn_q_norm.weight", hp->head_dim, 0, ad->has_qk_norm},
        {&L->k_norm, "attn_k_norm.weight", hp->head_dim, 0, ad->has_qk_norm},
        {&L->post_attn_norm, "post_attention_norm.weight", e, 0, ad->has_post_norms},
        {&L->ffn_norm, "ffn_norm.weight", e, 0, true},
        {&L->w_gate, "ffn_gate.weight", e, hp->n_ff, true},
        {&L->w_up, "ffn_up.weight", e, hp->n_ff, true},
        {&L->w_down, "ffn_down.weight", hp->n_ff, e, true},
        {&L->post_ffn_norm, "post_ffw_norm.weight", e, 0, ad->has_post_norms},
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[i].name);
        int rc = bind(l, spec[i].w, name, spec[i].cols, spec[i].rows, spec[i].required);
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

static int bind_weights(const loader *l, const arch_desc *ad, struct graft_model *m)
{
    const graft__hparams *hp = &m->hp;
    int rc;
    if ((rc = bind(l, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, true)) ||
        (rc = bind(l, &m->output_norm, "output_norm.weight", hp->n_embd, 0, true)) ||
        (rc = bind(l, &m->output, "output.weight", hp->n_embd, hp->n_vocab, false)) ||
        (rc = bind(l, &m->rope_freqs, "rope_freqs.weight", hp->rope_dims / 2, 0, false)))
        return rc;
    if (m->output.data == NULL)
        m->output = m->tok_embd;
    m->layers = graft__calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return graft__errmsg(l->errmsg, GRAFT_ENOMEM, "model: out of memory");
    for (int32_t il = 0; il < hp->n_layer; il++)
        if ((rc = bind_layer(l, ad, hp, il, &m->layers[il])))
            return rc;
    return GRAFT_OK;
}

/* What a tokenizer-only model holds: the vocabulary, the name and the chat template. */
static int load_tokenizer(struct graft_model *m, char **errmsg)
{
    int rc = graft__vocab_load(m->file, &m->vocab, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    m->hp.n_vocab = graft__vocab_size(m->vocab);
    graft__gguf_str name = {"", 0};
    graft__gguf_get_str(m->file, "general.name", &name);
    m->name = graft__strndup(name.ptr, (size_t)name.len);
    if (m->name == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    graft__gguf_str chat;
    if (graft__gguf_get_str(m->file, "tokenizer.chat_template", &chat) == GRAFT_OK) {
        m->chat_template = graft__strndup(chat.ptr, (size_t)chat.len);
        if (m->chat_template == NULL)
            return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    }
    return GRAFT_OK;
}

static int load_from_file(struct graft_model *m, char **errmsg)
{
    graft__gguf_str arch_name;
    int rc = graft__gguf_get_str(m->file, "general.architecture", &arch_name);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EFORMAT,
                             "model: key 'general.architecture' is missing or not a string");
    const arch_desc *ad = find_arch(arch_name);
    if (ad == NULL)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED,
                             "model: architecture '%.*s' is not supported (llama, qwen2, qwen3, "
                             "gemma3)",
                             (int)arch_name.len, arch_name.ptr);
    loader l = {m->file, ad->name, errmsg};
    if ((rc = read_hparams(&l, ad, &m->hp)) || (rc = load_tokenizer(m, errmsg)))
        return rc;
    return bind_weights(&l, ad, m);
}

static int load_vocab_only(struct graft_model *m, char **errmsg)
{
    graft__gguf_str arch = {"", 0};
    graft__gguf_get_str(m->file, "general.architecture", &arch);
    m->vocab_only_arch = graft__strndup(arch.ptr, (size_t)arch.len);
    if (m->vocab_only_arch == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    return load_tokenizer(m, errmsg);
}

void graft__model_free(struct graft_model *m)
{
    if (m == NULL)
        return;
    graft__vocab_free(m->vocab);
    graft__free(m->layers);
    graft__free(m->name);
    graft__free(m->chat_template);
    graft__free(m->vocab_only_arch);
    graft__free(m->packed_memory);
    pthread_mutex_destroy(&m->pack_lock);
    graft__gguf_close(m->file);
    graft__free(m);
}

static int open_model(const char *path, bool vocab_only, struct graft_model **out,
                      char **errmsg)
{
    *out = NULL;
    if (errmsg)
        *errmsg = NULL;
    struct graft_model *m = graft__calloc(1, sizeof *m);
    if (m == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    pthread_mutex_init(&m->pack_lock, NULL);
    int rc = graft__gguf_open(path, &m->file, errmsg);
    if (rc == GRAFT_OK)
        rc = vocab_only ? load_vocab_only(m, errmsg) : load_from_file(m, errmsg);
    if (rc != GRAFT_OK) {
        graft__model_free(m);
        return rc;
    }
    *out = m;
    return GRAFT_OK;
}

int graft__model_load(const char *path, struct graft_model **out, char **errmsg)
{
    return open_model(path, false, out, errmsg);
}

int graft__model_load_vocab(const char *path, struct graft_model **out, char **errmsg)
{
    return open_model(path, true, out, errmsg);
}
