/*
 * model_pack.c: packing a model's weight matrices for the matmul path that will run them.
 *
 * Some paths compute faster from a layout of their own than from GGUF blocks (the avx512
 * path interleaves the rows of Q8_0 and Q4_0 matrices 16 at a time, matmul_r16_avx512.c).
 * The model is shared by every context and engine and immutable after loading, so the
 * packing is done once, here, for the path a context gets by default (GRAFT_KERNELS, else
 * the best the processor has): the matrices that path packs get a packed copy, and the
 * pages of their file copies are given back (a forward pass on another path, or the token
 * embedding that an untied output shares, reads them from the file again). A context on
 * another path simply computes from the GGUF blocks.
 *
 * The packed copies cost about the size of the matrices they pack; if that memory cannot
 * be had, loading fails with GRAFT_ENOMEM (rather than running slower than it should
 * without a word). GRAFT_KERNELS=avx2 or scalar at load time avoids packing.
 */
#include <string.h>
#include <sys/mman.h>

#include "kernels/matmul_path.h"
#include "model/model.h"
#include "util/util.h"

/* The matrices a forward pass multiplies by, and how many. */
static int matrices(struct graft_model *m, graft__weight **out, int cap)
{
    int n = 0;
    out[n++] = &m->output;
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        graft__layer *L = &m->layers[il];
        graft__weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            GRAFT_ASSERT(n < cap);
            out[n++] = ws[i];
        }
    }
    return n;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int graft__model_pack(struct graft_model *m, char **errmsg)
{
    const graft__matmul_path *path;
    if (graft__kernels_select(NULL, &path, NULL) != GRAFT_OK || path->packed_type == NULL)
        return GRAFT_OK;
    enum { CAP = 1 + 7 * GRAFT_MAX_LAYERS };
    graft__weight **ws = graft__malloc(CAP * sizeof *ws);
    if (ws == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "model: out of memory");
    int n = matrices(m, ws, CAP);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        uint32_t pt = path->packed_type(ws[i]->type, ws[i]->cols, ws[i]->rows);
        if (pt != 0)
            total += round64(path->packed_bytes(pt, ws[i]->cols, ws[i]->rows));
    }
    if (total == 0) {
        graft__free(ws);
        return GRAFT_OK;
    }
    void *memory = graft__malloc(total + 64);
    if (memory == NULL) {
        graft__free(ws);
        return graft__errmsg(errmsg, GRAFT_ENOMEM,
                             "model: out of memory for the packed weights (%zu MiB)",
                             total >> 20);
    }
    uint8_t *dst = (uint8_t *)(((uintptr_t)memory + 63) & ~(uintptr_t)63);
    /* Fewer TLB misses while decode streams the weights; only a hint. */
    uintptr_t huge_start = ((uintptr_t)dst + 4095) & ~(uintptr_t)4095;
    uintptr_t huge_end = ((uintptr_t)dst + total) & ~(uintptr_t)4095;
    if (huge_end > huge_start)
        madvise((void *)huge_start, huge_end - huge_start, MADV_HUGEPAGE);
    for (int i = 0; i < n; i++) {
        graft__weight *w = ws[i];
        uint32_t pt = path->packed_type(w->type, w->cols, w->rows);
        if (pt == 0)
            continue;
        path->pack(pt, dst, w->data, w->cols, w->rows);
        graft__gguf_drop_pages(m->file, w->data,
                               graft__type_row_bytes(w->type, (uint64_t)w->cols) *
                                   (size_t)w->rows);
        w->packed = dst;
        w->packed_type = pt;
        dst += round64(path->packed_bytes(pt, w->cols, w->rows));
    }
    graft__free(ws);
    m->packed_path = path;
    m->packed_memory = memory;
    return GRAFT_OK;
}
