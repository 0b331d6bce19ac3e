/*
 * model_api.c: the public model and context functions of include/graft.h.
 *
 * graft_context is the simplest way to run a model: a fixed set of sequences in a
 * graft__kv_simple store, evaluated a batch of tokens at a time through graft__forward on
 * the context's own thread pool and matmul path. The engine (with
 * paged KV, many sessions and cloning) is built on the same forward pass.
 */
#include <string.h>
#include <unistd.h>

#include "kernels/matmul_path.h"
#include "model/model.h"

struct graft_context {
    const struct graft_model *model;
    graft__kv_simple *kv;
    graft__pool *pool;
    const graft__matmul_path *path;
    int32_t n_ctx, n_seq;
    int32_t *pos;              /* n_seq: tokens held per sequence */
    graft__batch_entry *batch; /* n_ctx entries for graft_context_eval */
    graft__scratch *scratch;   /* forward buffers of batches up to SCRATCH_TOKENS, or NULL */
    char *errmsg;              /* why the last eval failed (graft_context_errmsg), or NULL */
};

/* Batches of up to this many tokens (decode steps, small chunks) run in buffers the
 * context keeps; bigger ones allocate theirs for the call, which their many tokens
 * amortize, so a long prompt does not leave a big scratch behind. */
#define SCRATCH_TOKENS 64

int graft_model_load(const char *path, graft_model **out, char **errmsg)
{
    if (out == NULL || path == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_model_load: NULL argument");
    return graft__model_load(path, out, errmsg);
}

int graft_model_load_vocab(const char *path, graft_model **out, char **errmsg)
{
    if (out == NULL || path == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_model_load_vocab: NULL argument");
    return graft__model_load_vocab(path, out, errmsg);
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

size_t graft__model_kv_bytes_per_position(const graft__hparams *hp, uint32_t kv_type)
{
    const uint64_t k = graft__type_row_bytes(kv_type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim);
    const uint64_t v = graft__type_row_bytes(kv_type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim_v);
    return (size_t)((k + v) * (uint64_t)hp->n_layer);
}

void graft_model_get_info(const graft_model *m, graft_model_info *info)
{
    const graft__hparams *hp = &m->hp;
    memset(info, 0, sizeof *info);
    info->arch = m->vocab_only_arch ? m->vocab_only_arch : graft__arch_name(hp->arch);
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
    info->head_dim_v = hp->head_dim_v;
    info->kv_bytes_per_position = (int64_t)graft__model_kv_bytes_per_position(hp, GRAFT_TYPE_F16);
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
    info->fim_pre = graft__vocab_fim(m->vocab, GRAFT__FIM_PRE);
    info->fim_suf = graft__vocab_fim(m->vocab, GRAFT__FIM_SUF);
    info->fim_mid = graft__vocab_fim(m->vocab, GRAFT__FIM_MID);
    info->fim_pad = graft__vocab_fim(m->vocab, GRAFT__FIM_PAD);
    info->fim_rep = graft__vocab_fim(m->vocab, GRAFT__FIM_REP);
    info->fim_sep = graft__vocab_fim(m->vocab, GRAFT__FIM_SEP);
    info->file_bytes = graft__gguf_file_size(m->file);
    info->gguf_version = graft__gguf_version(m->file);
    count_tensors(m->file, info);
}

void graft_model_get_chat(const graft_model *m, graft_model_chat *chat)
{
    int32_t bos = graft__vocab_bos(m->vocab), eos = graft__vocab_eos(m->vocab);
    const char *bos_text = bos >= 0 ? graft__vocab_text(m->vocab, bos) : NULL;
    const char *eos_text = eos >= 0 ? graft__vocab_text(m->vocab, eos) : NULL;
    chat->chat_template = m->chat_template;
    chat->bos_text = bos_text ? bos_text : "";
    chat->eos_text = eos_text ? eos_text : "";
}

graft_context_options graft_context_default_options(void)
{
    graft_context_options o = {0, 0, 0, NULL, 0};
    return o;
}

static int check_options(const graft_model *model, graft_context_options *o, char **errmsg)
{
    if (o->n_ctx == 0)
        o->n_ctx = model->hp.n_ctx_train;
    if (o->n_seq == 0)
        o->n_seq = 1;
    if (o->n_threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = cpus < 1 ? 1 : cpus > GRAFT_MAX_THREADS ? GRAFT_MAX_THREADS : (int32_t)cpus;
    }
    if (o->n_ctx < 0 || o->n_ctx > model->hp.n_ctx_train)
        return graft__errmsg(errmsg, GRAFT_ERANGE,
                             "context: n_ctx %d is outside [1, %d] (the model's context length)",
                             o->n_ctx, model->hp.n_ctx_train);
    if (o->n_seq < 0 || o->n_seq > 4096)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "context: n_seq %d is outside [1, 4096]",
                             o->n_seq);
    if (o->n_threads < 0 || o->n_threads > GRAFT_MAX_THREADS)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "context: n_threads %d is outside [1, %d]",
                             o->n_threads, GRAFT_MAX_THREADS);
    return GRAFT_OK;
}

int graft_context_create_ex(const graft_model *model, const graft_context_options *opts,
                            graft_context **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || model == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_context_create: NULL argument");
    *out = NULL;
    if (model->vocab_only_arch != NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL,
                             "graft_context_create: the model was loaded for its tokenizer only");
    graft_context_options o = opts ? *opts : graft_context_default_options();
    const graft__matmul_path *path = NULL;
    int rc = check_options(model, &o, errmsg);
    if (rc == GRAFT_OK)
        rc = graft__kernels_select(o.kernels, &path, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    graft_context *ctx = graft__calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "context: out of memory");
    ctx->model = model;
    ctx->path = path;
    ctx->n_ctx = o.n_ctx;
    ctx->n_seq = o.n_seq;
    ctx->pos = graft__calloc((size_t)o.n_seq, sizeof *ctx->pos);
    ctx->batch = graft__malloc((size_t)o.n_ctx * sizeof *ctx->batch);
    rc = ctx->pos && ctx->batch ? graft__pool_create(o.n_threads, &ctx->pool) : GRAFT_ENOMEM;
    if (rc == GRAFT_OK)
        rc = graft__kv_simple_create(&model->hp, o.n_seq, o.n_ctx,
                                     o.kv_f32 ? GRAFT_TYPE_F32 : GRAFT_TYPE_F16, &ctx->kv);
    if (rc != GRAFT_OK) {
        graft_context_free(ctx);
        return graft__errmsg(errmsg, rc, "context: cannot allocate %d x %d positions: %s",
                             o.n_seq, o.n_ctx, graft_status_str(rc));
    }
    rc = graft__model_pack(model, path, ctx->pool, errmsg);
    if (rc != GRAFT_OK) {
        graft_context_free(ctx);
        return rc;
    }
    *out = ctx;
    return GRAFT_OK;
}

int graft_context_create(const graft_model *model, int32_t n_ctx, graft_context **out,
                         char **errmsg)
{
    graft_context_options o = graft_context_default_options();
    o.n_ctx = n_ctx;
    return graft_context_create_ex(model, &o, out, errmsg);
}

void graft_context_free(graft_context *ctx)
{
    if (ctx == NULL)
        return;
    graft__kv_simple_free(ctx->kv);
    graft__scratch_free(ctx->scratch);
    graft__pool_free(ctx->pool);
    graft__free(ctx->pos);
    graft__free(ctx->batch);
    graft__free(ctx->errmsg);
    graft__free(ctx);
}

static int run_forward(graft_context *ctx, const graft__batch_entry *entries, int32_t n,
                       float *logits, char **errmsg)
{
    graft__exec ex = {.pool = ctx->pool, .path = ctx->path};
    graft__kv kv = graft__kv_simple_iface(ctx->kv);
    if (n > SCRATCH_TOKENS)
        return graft__forward(ctx->model, &ex, &kv, entries, n, logits, errmsg);
    if (ctx->scratch == NULL) {
        int rc = graft__scratch_create(ctx->model, &ex, SCRATCH_TOKENS, ctx->n_ctx - 1,
                                       &ctx->scratch);
        if (rc != GRAFT_OK)
            return graft__errmsg(errmsg, rc, "cannot allocate the forward pass's buffers");
    }
    return graft__forward_in(ctx->model, ctx->scratch, &kv, entries, n, logits, errmsg);
}

/* Keeps msg (NULL after a success) as the message graft_context_errmsg gives; returns rc. */
static int eval_status(graft_context *ctx, int rc, char *msg)
{
    graft__free(ctx->errmsg);
    ctx->errmsg = msg;
    return rc;
}

int graft_context_eval(graft_context *ctx, const int32_t *tokens, size_t n, float *logits)
{
    if (ctx == NULL)
        return GRAFT_EINVAL;
    char *msg = NULL;
    int rc = GRAFT_OK;
    if (tokens == NULL && n > 0)
        rc = graft__errmsg(&msg, GRAFT_EINVAL, "no tokens (NULL)");
    else if (n > (size_t)(ctx->n_ctx - ctx->pos[0]))
        rc = graft__errmsg(&msg, GRAFT_ECAPACITY, "%zu tokens after %d do not fit in n_ctx %d",
                           n, (int)ctx->pos[0], (int)ctx->n_ctx);
    if (rc != GRAFT_OK || n == 0)
        return eval_status(ctx, rc, msg);
    for (size_t i = 0; i < n; i++)
        ctx->batch[i] = (graft__batch_entry){0, ctx->pos[0] + (int32_t)i, tokens[i],
                                             logits != NULL && i + 1 == n};
    rc = run_forward(ctx, ctx->batch, (int32_t)n, logits, &msg);
    if (rc == GRAFT_OK)
        ctx->pos[0] += (int32_t)n;
    return eval_status(ctx, rc, msg);
}

const char *graft_context_errmsg(const graft_context *ctx)
{
    return ctx == NULL ? NULL : ctx->errmsg;
}

/* Fills entries from the batch, giving each token its sequence's next position; the
 * positions themselves are left unchanged. */
static int plan_batch(graft_context *ctx, const graft_batch_token *batch, size_t n,
                      graft__batch_entry *entries)
{
    for (size_t i = 0; i < n; i++)
        if (batch[i].seq < 0 || batch[i].seq >= ctx->n_seq)
            return GRAFT_EINVAL;
    int rc = GRAFT_OK;
    size_t planned = 0;
    for (; planned < n; planned++) {
        int32_t seq = batch[planned].seq;
        if (ctx->pos[seq] >= ctx->n_ctx) {
            rc = GRAFT_ECAPACITY;
            break;
        }
        entries[planned] = (graft__batch_entry){seq, ctx->pos[seq]++, batch[planned].token,
                                                batch[planned].want_logits != 0};
    }
    for (size_t i = planned; i-- > 0;)
        ctx->pos[batch[i].seq]--;
    return rc;
}

int graft_context_eval_batch(graft_context *ctx, const graft_batch_token *batch, size_t n,
                             float *logits)
{
    if (ctx == NULL)
        return GRAFT_EINVAL;
    char *msg = NULL;
    if ((batch == NULL && n > 0) || n > INT32_MAX) {
        int rc = graft__errmsg(&msg, GRAFT_EINVAL, "no batch, or one too large");
        return eval_status(ctx, rc, msg);
    }
    if (n == 0)
        return eval_status(ctx, GRAFT_OK, NULL);
    graft__batch_entry *entries = graft__malloc(n * sizeof *entries);
    if (entries == NULL)
        return eval_status(ctx, GRAFT_ENOMEM, NULL);
    int rc = plan_batch(ctx, batch, n, entries);
    if (rc == GRAFT_EINVAL)
        graft__errmsg(&msg, rc, "a token's sequence is outside [0, %d)", (int)ctx->n_seq);
    else if (rc != GRAFT_OK)
        graft__errmsg(&msg, rc, "a sequence would hold more than n_ctx %d", (int)ctx->n_ctx);
    if (rc == GRAFT_OK)
        rc = run_forward(ctx, entries, (int32_t)n, logits, &msg);
    if (rc == GRAFT_OK)
        for (size_t i = 0; i < n; i++)
            ctx->pos[batch[i].seq]++;
    graft__free(entries);
    return eval_status(ctx, rc, msg);
}

int32_t graft_context_position(const graft_context *ctx)
{
    return ctx->pos[0];
}

int32_t graft_context_seq_position(const graft_context *ctx, int32_t seq)
{
    return seq < 0 || seq >= ctx->n_seq ? -1 : ctx->pos[seq];
}

int graft_context_seq_reset(graft_context *ctx, int32_t seq)
{
    if (seq < 0 || seq >= ctx->n_seq)
        return GRAFT_EINVAL;
    ctx->pos[seq] = 0;
    return GRAFT_OK;
}

const char *graft_context_kernels(const graft_context *ctx)
{
    return ctx->path->name;
}

const char *graft_cpu_features(void)
{
    return graft__cpu_features_string();
}

int32_t graft_context_threads(const graft_context *ctx)
{
    return graft__pool_size(ctx->pool);
}
