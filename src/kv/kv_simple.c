/*
 * kv_simple.c: the plainest KV store behind the graft__kv interface.
 *
 * Each of n_seq sequences owns a contiguous slab of n_ctx positions per layer, allocated
 * up front (memory is budgeted before it is used). It backs graft_context and tests; the
 * engine's paged, reference-counted pool implements the same interface.
 *
 * Layout: k[layer][seq][pos][n_head_kv * head_dim], v likewise with head_dim_v; elements
 * of the store's type (F16 or F32). Both slabs ask for huge pages: every attention pass
 * sweeps the sequence's rows, often reading only a few cache lines of each, so with 4 KiB
 * pages the TLB would miss on nearly every row.
 */
#include <string.h>

#include "model/model.h"

struct graft__kv_simple {
    int32_t n_layer, n_seq, n_ctx;
    uint32_t type;
    size_t k_bytes, v_bytes; /* bytes per row */
    uint8_t *k;
    uint8_t *v;
};

int graft__kv_simple_create(const graft__hparams *hp, int32_t n_seq, int32_t n_ctx,
                            uint32_t type, graft__kv_simple **out)
{
    *out = NULL;
    if (n_seq <= 0 || n_ctx <= 0 || (type != GRAFT_TYPE_F16 && type != GRAFT_TYPE_F32))
        return GRAFT_EINVAL;
    graft__kv_simple *s = graft__calloc(1, sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    s->n_layer = hp->n_layer;
    s->n_seq = n_seq;
    s->n_ctx = n_ctx;
    s->type = type;
    s->k_bytes = graft__type_row_bytes(type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim);
    s->v_bytes = graft__type_row_bytes(type, (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim_v);
    size_t rows, k_bytes, v_bytes;
    bool fits = graft__mul_size((size_t)hp->n_layer * (size_t)n_seq, (size_t)n_ctx, &rows) &&
                graft__mul_size(rows, s->k_bytes, &k_bytes) &&
                graft__mul_size(rows, s->v_bytes, &v_bytes);
    if (fits) {
        s->k = graft__malloc_aligned(k_bytes, GRAFT_HUGE_PAGE);
        s->v = graft__malloc_aligned(v_bytes, GRAFT_HUGE_PAGE);
    }
    if (s->k == NULL || s->v == NULL) {
        graft__kv_simple_free(s);
        return fits ? GRAFT_ENOMEM : GRAFT_ECAPACITY;
    }
    graft__advise_huge_pages(s->k, k_bytes);
    graft__advise_huge_pages(s->v, v_bytes);
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

static void *simple_k_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    graft__kv_simple *s = self;
    return s->k + row_index(s, layer, seq, pos) * s->k_bytes;
}

static void *simple_v_row(void *self, int32_t layer, int32_t seq, int32_t pos)
{
    graft__kv_simple *s = self;
    return s->v + row_index(s, layer, seq, pos) * s->v_bytes;
}

graft__kv graft__kv_simple_iface(graft__kv_simple *s)
{
    graft__kv kv = {s, s->type, simple_reserve, simple_k_row, simple_v_row};
    return kv;
}
