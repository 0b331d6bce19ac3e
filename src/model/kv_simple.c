/*
 * kv_simple.c: the plainest KV store behind the graft__kv interface.
 *
 * Each of n_seq sequences owns a contiguous slab of n_ctx positions per layer, allocated
 * up front (memory is budgeted before it is used). It backs graft_context and tests; the
 * engine's paged, reference-counted pool implements the same interface.
 *
 * Layout: k[layer][seq][pos][n_head_kv * head_dim], v likewise with head_dim_v.
 */
#include <string.h>

#include "model/model.h"

struct graft__kv_simple {
    int32_t n_layer, n_seq, n_ctx;
    int64_t k_width, v_width; /* floats per row */
    float *k;
    float *v;
};

int graft__kv_simple_create(const graft__hparams *hp, int32_t n_seq, int32_t n_ctx,
                            graft__kv_simple **out)
{
    *out = NULL;
    if (n_seq <= 0 || n_ctx <= 0)
        return GRAFT_EINVAL;
    graft__kv_simple *s = graft__calloc(1, sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    s->n_layer = hp->n_layer;
    s->n_seq = n_seq;
    s->n_ctx = n_ctx;
    s->k_width = (int64_t)hp->n_head_kv * hp->head_dim;
    s->v_width = (int64_t)hp->n_head_kv * hp->head_dim_v;
    size_t rows, k_bytes, v_bytes;
    bool fits = graft__mul_size((size_t)hp->n_layer * (size_t)n_seq, (size_t)n_ctx, &rows) &&
                graft__mul_size(rows, (size_t)s->k_width * sizeof(float), &k_bytes) &&
                graft__mul_size(rows, (size_t)s->v_width * sizeof(float), &v_bytes);
    if (fits) {
        s->k = graft__malloc(k_bytes);
        s->v = graft__malloc(v_bytes);
    }
    if (s->k == NULL || s->v == NULL) {
        graft__kv_simple_free(s);
        return fits ? GRAFT_ENOMEM : GRAFT_ECAPACITY;
    }
    *out = s;
    return GRAFT_OK;
}

void graft__kv_simple_free(graft__kv_simple *s)
{
    if (s == NULL)
        return;
    graft__free(s->k);
    graft__free(s->v);
    graft__free(s);
}

static int simple_reserve(void *self, const graft__batch_entry *e, int32_t n)
{
    graft__kv_simple *s = self;
    for (int32_t t = 0; t < n; t++) {
        if (e[t].seq < 0 || e[t].seq >= s->n_seq)
            return GRAFT_EINVAL;
        if (e[t].pos >= s->n_ctx)
            return GRAFT_ECAPACITY;
    }
    return GRAFT_OK;
}

static size_t row_index(const graft__kv_simple *s, int32_t layer, int32_t seq, int32_t pos)
{
    GRAFT_ASSERT(layer >= 0 && layer < s->n_layer && seq >= 0 && seq < s->n_seq && pos >= 0 &&
                 pos < s->n_ctx);
    return ((size_t)layer * (size_t)s->n_seq + (size_t)seq) * (size_t)s->n_ctx + (size_t)pos;
}

static float *simple_k_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    graft__kv_simple *s = self;
    return s->k + row_index(s, layer, seq, pos) * (size_t)s->k_width;
}

static float *simple_v_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    graft__kv_simple *s = self;
    return s->v + row_index(s, layer, seq, pos) * (size_t)s->v_width;
}

graft__kv graft__kv_simple_iface(graft__kv_simple *s)
{
    graft__kv kv = {s, simple_reserve, simple_k_row, simple_v_row};
    return kv;
}
