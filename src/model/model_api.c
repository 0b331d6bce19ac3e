/*
 * model_api.c: the public model and context functions of include/graft.h.
 *
 * graft_context is the simplest way to run a model: one sequence in a graft__kv_simple
 * store, evaluated a batch of tokens at a time through graft__forward. The engine (with
 * paged KV, many sessions and cloning) is built on the same forward pass.
 */
#include <string.h>

#include "model/model.h"

struct graft_context {
    const struct graft_model *model;
    graft__kv_simple *kv;
    int32_t n_ctx;
    int32_t pos;
    graft__batch_entry *batch; /* n_ctx entries */
};

int graft_model_load(const char *path, graft_model **out, char **errmsg)
{
    if (out == NULL || path == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_model_load: NULL argument");
    return graft__model_load(path, out, errmsg);
}

void graft_model_free(graft_model *model)
{
    graft__model_free(model);
}

static void count_tensors(const graft__gguf *g, graft_model_info *info)
{
    info->n_tensors = (int32_t)graft__gguf_n_tensors(g);
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(g, i);
        info->n_params += t->n_elems;
        info->weight_bytes += t->n_bytes;
        if (t->type < sizeof info->tensor_type_count / sizeof info->tensor_type_count[0])
            info->tensor_type_count[t->type]++;
    }
}

void graft_model_get_info(const graft_model *m, graft_model_info *info)
{
    const graft__hparams *hp = &m->hp;
    memset(info, 0, sizeof *info);
    info->arch = graft__arch_name(hp->arch);
    info->name = m->name;
    info->tokenizer = graft__vocab_kind_of(m->vocab) == GRAFT_VOCAB_SPM   ? "spm"
                      : graft__vocab_kind_of(m->vocab) == GRAFT_VOCAB_BPE ? "bpe"
                                                                           : "wpm";
    info->pretokenizer = graft__vocab_pre_name(m->vocab);
    info->n_vocab = hp->n_vocab;
    info->n_ctx_train = hp->n_ctx_train;
    info->n_embd = hp->n_embd;
    info->n_layer = hp->n_layer;
    info->n_head = hp->n_head;
    info->n_head_kv = hp->n_head_kv;
    info->head_dim = hp->head_dim;
    info->n_ff = hp->n_ff;
    info->sliding_window = hp->sliding_window;
    for (int32_t il = 0; il < hp->n_layer; il++)
        info->n_swa_layers += hp->layer_is_swa[il];
    info->rope_freq_base = hp->rope_base;
    info->rope_freq_base_swa = hp->rope_base_swa;
    info->rms_eps = hp->rms_eps;
    info->bos = graft__vocab_bos(m->vocab);
    info->eos = graft__vocab_eos(m->vocab);
    info->add_bos = graft__vocab_add_bos(m->vocab);
    info->file_bytes = graft__gguf_file_size(m->file);
    info->gguf_version = graft__gguf_version(m->file);
    count_tensors(m->file, info);
}

int graft_context_create(const graft_model *model, int32_t n_ctx, graft_context **out,
                         char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || model == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_context_create: NULL argument");
    *out = NULL;
    if (n_ctx == 0)
        n_ctx = model->hp.n_ctx_train;
    if (n_ctx < 0 || n_ctx > model->hp.n_ctx_train)
        return graft__errmsg(errmsg, GRAFT_ERANGE,
                             "context: n_ctx %d is outside [1, %d] (the model's context length)",
                             n_ctx, model->hp.n_ctx_train);
    graft_context *ctx = graft__calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "context: out of memory");
    ctx->model = model;
    ctx->n_ctx = n_ctx;
    ctx->batch = graft__malloc((size_t)n_ctx * sizeof *ctx->batch);
    int rc = ctx->batch ? graft__kv_simple_create(&model->hp, 1, n_ctx, &ctx->kv) : GRAFT_ENOMEM;
    if (rc != GRAFT_OK) {
        graft_context_free(ctx);
        return graft__errmsg(errmsg, rc, "context: cannot allocate KV for %d positions: %s",
                             n_ctx, graft_status_str(rc));
    }
    *out = ctx;
    return GRAFT_OK;
}

void graft_context_free(graft_context *ctx)
{
    if (ctx == NULL)
        return;
    graft__kv_simple_free(ctx->kv);
    graft__free(ctx->batch);
    graft__free(ctx);
}

int graft_context_eval(graft_context *ctx, const int32_t *tokens, size_t n, float *logits)
{
    if (ctx == NULL || (tokens == NULL && n > 0))
        return GRAFT_EINVAL;
    if (n == 0)
        return GRAFT_OK;
    if (n > (size_t)(ctx->n_ctx - ctx->pos))
        return GRAFT_ECAPACITY;
    for (size_t i = 0; i < n; i++) {
        ctx->batch[i] = (graft__batch_entry){0, ctx->pos + (int32_t)i, tokens[i],
                                             logits != NULL && i + 1 == n};
    }
    graft__kv kv = graft__kv_simple_iface(ctx->kv);
    int rc = graft__forward(ctx->model, &kv, ctx->batch, (int32_t)n, logits, NULL);
    if (rc == GRAFT_OK)
        ctx->pos += (int32_t)n;
    return rc;
}

int32_t graft_context_position(const graft_context *ctx)
{
    return ctx->pos;
}
