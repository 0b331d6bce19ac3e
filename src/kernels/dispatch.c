/*
 * dispatch.c: choosing a matmul path and running a matmul on the thread pool.
 *
 * The path is chosen once per process from CPUID (AVX-512 with VNNI, else AVX2
 * with FMA and F16C, else scalar), unless GRAFT_KERNELS=scalar|avx2|avx512 forces one;
 * forcing a path the processor lacks is refused with a message rather than crashing.
 *
 * graft__matmul_run prepares each token's activations (one task per token), then computes
 * the outputs in row chunks (one task per chunk). Chunks split rows only, never the sum
 * over inputs, so the result is the same bits for any thread count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/matmul_path.h"

const graft__matmul_path *graft__kernels_by_name(const char *name)
{
    if (strcmp(name, "scalar") == 0)
        return &graft__matmul_scalar;
    if (strcmp(name, "avx2") == 0)
        return graft__cpu_has_avx2() ? &graft__matmul_avx2 : NULL;
    if (strcmp(name, "avx512") == 0)
        return graft__cpu_has_avx512() ? &graft__matmul_avx512 : NULL;
    return NULL;
}

int graft__kernels_select(const char *name, const graft__matmul_path **out, char **errmsg)
{
    if (name == NULL || name[0] == '\0')
        name = getenv("GRAFT_KERNELS");
    if (name == NULL || name[0] == '\0') {
        *out = graft__cpu_has_avx512() ? &graft__matmul_avx512
               : graft__cpu_has_avx2() ? &graft__matmul_avx2
                                : &graft__matmul_scalar;
        return GRAFT_OK;
    }
    *out = graft__kernels_by_name(name);
    if (*out != NULL)
        return GRAFT_OK;
    if (strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED,
                             "kernels: this processor cannot run the '%s' kernels", name);
    return graft__errmsg(errmsg, GRAFT_EINVAL,
                         "kernels: unknown kernel set '%s' (scalar, avx2, avx512)", name);
}

graft__attend_heads_fn graft__attend_for(const graft__matmul_path *path)
{
    if (path == &graft__matmul_avx512)
        return graft__attend_heads_avx512;
    if (path == &graft__matmul_avx2)
        return graft__attend_heads_avx2;
    return graft__attend_heads;
}

graft__store_row_fn graft__store_row_for(const graft__matmul_path *path)
{
    if (path == &graft__matmul_avx512 || path == &graft__matmul_avx2)
        return graft__store_row_f16c;
    return graft__store_row;
}

size_t graft__matmul_work_size(const graft__matmul_path *path, uint32_t type, int64_t n_in,
                               int64_t n_tok)
{
    return path->act_bytes(type, n_in) * (size_t)n_tok;
}

typedef struct matmul_job {
    const graft__matmul_path *path;
    float *y;
    const void *w;
    uint32_t type;
    int64_t n_in, n_out, n_tok, chunk;
    const float *x;
    uint8_t *xa;
    size_t xa_bytes;
} matmul_job;

static void prepare_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    j->path->act_prepare(j->type, j->xa + (size_t)t * j->xa_bytes, j->x + t * j->n_in, j->n_in);
}

static void gemm_task(void *ctx, int64_t c, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    int64_t o0 = c * j->chunk, o1 = o0 + j->chunk < j->n_out ? o0 + j->chunk : j->n_out;
    j->path->gemm(j->type, j->y, j->n_out, j->w, j->n_in, o0, o1, j->xa, j->n_tok);
}

/* Rows per task: two tasks per thread, each a multiple of 64 rows so tiles stay whole.
 * Two rather than one lets a thread that finishes early take over part of a slow one's
 * share; more cost more than they balance (measured, decode at 2 threads, 1024 x 3072
 * Q4_0: 24 us with 2 tasks per thread, 34 us with 8). */
static int64_t rows_per_task(int64_t n_out, int threads)
{
    if (threads <= 1)
        return n_out;
    int64_t chunk = n_out / (threads * 2);
    chunk = (chunk + 63) / 64 * 64;
    return chunk < 64 ? 64 : chunk;
}

void graft__matmul_run(const graft__exec *ex, float *y, const void *w, uint32_t type,
                       int64_t n_in, int64_t n_out, const float *x, int64_t n_tok)
{
    matmul_job j = {ex->path, y, w, type, n_in, n_out, n_tok, 0, x, ex->work,
                    ex->path->act_bytes(type, n_in)};
    GRAFT_ASSERT(j.xa_bytes * (size_t)n_tok <= ex->work_size);
    graft__pool_run(ex->pool, n_tok, prepare_task, &j);
    j.chunk = rows_per_task(n_out, graft__pool_size(ex->pool));
    graft__pool_run(ex->pool, (n_out + j.chunk - 1) / j.chunk, gemm_task, &j);
}
