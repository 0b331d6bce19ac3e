/*
 * model_pack.c: packing a model's weight matrices for the matmul path that runs them.
 *
 * Some paths compute faster from a layout of their own than from GGUF blocks (the avx512 path
 * interleaves the rows of Q8_0, Q4_0 and Q4_K matrices 16 at a time, matmul_r16_avx512.c; the avx2
 * path those of Q4_K matrices 8 at a time, matmul_q4k_r8_avx2.c). The first context or engine
 * created on such a path packs the model for it, on its own threads: the matrices the path packs
 * get a packed copy, and the pages of their file copies are given back (a forward pass on another
 * path reads them from the file again), except the token embedding's when the output matrix is the
 * embedding. Loading alone packs nothing, so `graft info` or a tokenizer-only user never pays for
 * it.
 *
 * One path at most has the packed weights (the first to ask that packs any of the model's
 * matrices); contexts on any other path compute from the GGUF blocks. The packing state is the one
 * part of a model that changes after loading: pack_lock serializes packers, and
 * packed_path is published with release order after every weight's packed fields are
 * written, so a forward pass that reads packed_path == its path (acquire) sees them all,
 * and one on another path never reads them.
 *
 * The packed copies cost about the size of the matrices they pack. If that memory cannot
 * be had, creating the context or engine fails with GRAFT_ENOMEM (rather than running
 * slower than it should without a word); GRAFT_KERNELS=scalar avoids packing.
 */
#include <string.h>

#include "kernels/matmul_path.h"
#include "model/model.h"
#include "util/util.h"

enum { MAX_MATRICES = 1 + 7 * GRAFT_MAX_LAYERS };

/* The matrices a forward pass multiplies by, and how many. */
static int matrices(struct graft_model *m, graft__weight **out)
{
    int n = 0;
    out[n++] = &m->output;
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        graft__layer *L = &m->layers[il];
        graft__weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            out[n++] = ws[i];
    }
    return n;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The packing of one model: the matrices, each one's packed type (0: not packed) and
 * destination. */
typedef struct pack_job {
    struct graft_model *m;
    const graft__matmul_path *path;
    graft__weight *ws[MAX_MATRICES];
    uint32_t types[MAX_MATRICES];
    uint8_t *dst[MAX_MATRICES];
} pack_job;

static void pack_task(void *ctx, int64_t i, int thread)
{
    (void)thread;
    pack_job *j = ctx;
    graft__weight *w = j->ws[i];
    if (j->types[i] == 0)
        return;
    j->path->pack(j->types[i], j->dst[i], w->data, w->cols, w->rows);
    /* An output matrix that is the token embedding stays mapped in: every prompt reads
     * rows of it, scattered, and reading them back from the file would only move its pages
     * in and out (and make RSS grow with the prompts seen). */
    if (w->data != j->m->tok_embd.data)
        graft__gguf_drop_pages(j->m->file, w->data,
                               graft__type_row_bytes(w->type, (uint64_t)w->cols) *
                                   (size_t)w->rows);
    w->packed = j->dst[i];
    w->packed_type = j->types[i];
}

/* Packs into fresh memory (each matrix 64-byte aligned); the caller holds pack_lock. */
static int pack_locked(struct graft_model *m, const graft__matmul_path *path, graft__pool *pool,
                       char **errmsg)
{
    pack_job *j = graft__malloc(sizeof *j);
    if (j == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    j->m = m;
    j->path = path;
    int n = matrices(m, j->ws);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const graft__weight *w = j->ws[i];
        j->types[i] = path->packed_type(w->type, w->cols, w->rows);
        if (j->types[i] != 0)
            total += round64(path->packed_bytes(j->types[i], w->cols, w->rows));
    }
    if (total == 0) { /* nothing this path packs: the model stays free for another path */
        graft__free(j);
        return GRAFT_OK;
    }
    void *memory = graft__malloc_aligned(total, GRAFT_HUGE_PAGE);
    if (memory == NULL) {
        graft__free(j);
        return graft__errmsg(errmsg, GRAFT_ENOMEM,
                             "model: out of memory for the packed weights (%zu MiB)",
                             total >> 20);
    }
    /* Fewer TLB misses while decode streams the weights; only a hint. */
    graft__advise_huge_pages(memory, total);
    uint8_t *dst = memory;
    for (int i = 0; i < n; i++) {
        j->dst[i] = dst;
        if (j->types[i] != 0)
            dst += round64(path->packed_bytes(j->types[i], j->ws[i]->cols, j->ws[i]->rows));
    }
    graft__pool_run(pool, n, pack_task, j);
    graft__free(j);
    m->packed_memory = memory;
    atomic_store_explicit(&m->packed_path, path, memory_order_release);
    return GRAFT_OK;
}

int graft__model_pack(const struct graft_model *model, const graft__matmul_path *path,
                      graft__pool *pool, char **errmsg)
{
    /* The model is allocated mutable by graft__model_load; only the packing state changes,
     * under pack_lock. */
    struct graft_model *m = (struct graft_model *)model;
    if (path->packed_type == NULL)
        return GRAFT_OK;
    pthread_mutex_lock(&m->pack_lock);
    int rc = GRAFT_OK;
    if (atomic_load_explicit(&m->packed_path, memory_order_relaxed) == NULL)
        rc = pack_locked(m, path, pool, errmsg);
    pthread_mutex_unlock(&m->pack_lock);
    return rc;
}

bool graft__model_packed_for(const struct graft_model *m, const graft__matmul_path *path)
{
    return atomic_load_explicit(&m->packed_path, memory_order_acquire) == path;
}
