/*
 * dispatch.c: choosing a matmul path and running a matmul on the thread pool.
 *
 * The path is chosen once per process from CPUID (AVX-512 with VNNI, else AVX2 with FMA,
 * F16C and AVX-VNNI, else AVX2 with FMA and F16C, else scalar), unless
 * GRAFT_KERNELS=scalar|avx2|avxvnni|avx512 forces one; forcing a path the processor lacks
 * is refused with a message rather than crashing.
 *
 * graft__matmul_many prepares each token's activations (one task per token and weight type),
 * then computes the outputs of all its matrices in row chunks (one task per chunk), so that
 * matrices reading the same input (q, k and v; gate and up) cost one wait for the threads,
 * not one each. Chunks split rows only, never the sum over inputs, so the result is the
 * same bits for any thread count and however matrices are grouped.
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
    if (strcmp(name, "avxvnni") == 0)
        return graft__cpu_has_avx_vnni() ? &graft__matmul_avxvnni : NULL;
    if (strcmp(name, "avx512") == 0)
        return graft__cpu_has_avx512() ? &graft__matmul_avx512 : NULL;
    return NULL;
}

int graft__kernels_select(const char *name, const graft__matmul_path **out, char **errmsg)
{
    if (name == NULL || name[0] == '\0')
        name = getenv("GRAFT_KERNELS");
    if (name == NULL || name[0] == '\0') {
        *out = graft__cpu_has_avx512()     ? &graft__matmul_avx512
               : graft__cpu_has_avx_vnni() ? &graft__matmul_avxvnni
               : graft__cpu_has_avx2()     ? &graft__matmul_avx2
                                           : &graft__matmul_scalar;
        return GRAFT_OK;
    }
    *out = graft__kernels_by_name(name);
    if (*out != NULL)
        return GRAFT_OK;
    if (strcmp(name, "avx2") == 0 || strcmp(name, "avxvnni") == 0 || strcmp(name, "avx512") == 0)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED,
                             "kernels: this processor cannot run the '%s' kernels", name);
    return graft__errmsg(errmsg, GRAFT_EINVAL,
                         "kernels: unknown kernel set '%s' (scalar, avx2, avxvnni, avx512)", name);
}

graft__attend_heads_fn graft__attend_for(const graft__matmul_path *path)
{
    if (path == &graft__matmul_avx512)
        return graft__attend_heads_avx512;
    if (path == &graft__matmul_avx2 || path == &graft__matmul_avxvnni)
        return graft__attend_heads_avx2;
    return graft__attend_heads;
}

graft__store_row_fn graft__store_row_for(const graft__matmul_path *path)
{
    if (path == &graft__matmul_avx512 || path == &graft__matmul_avx2 ||
        path == &graft__matmul_avxvnni)
        return graft__store_row_f16c;
    return graft__store_row;
}

graft__rmsnorm_fn graft__rmsnorm_for(const graft__matmul_path *path)
{
    return path == &graft__matmul_avx512 ? graft__rmsnorm_avx512 : graft__rmsnorm;
}

graft__swiglu_fn graft__swiglu_for(const graft__matmul_path *path)
{
    return path == &graft__matmul_avx512 ? graft__swiglu_avx512 : graft__swiglu;
}

/* The prepared activations of a call: one slot per distinct weight type among its
 * matrices, in the order the types first appear; slot[i] is matrix i's. */
typedef struct act_slots {
    int n;                          /* distinct types */
    uint32_t type[GRAFT_MATMUL_MAX_MATRICES];
    size_t bytes[GRAFT_MATMUL_MAX_MATRICES];  /* one token's, per distinct type */
    size_t offset[GRAFT_MATMUL_MAX_MATRICES]; /* of each distinct type's tokens in work */
    int slot[GRAFT_MATMUL_MAX_MATRICES];      /* per matrix */
} act_slots;

/* Plans the slots; returns the work bytes they take for n_tok tokens. */
static size_t plan_slots(act_slots *a, const graft__matmul_path *path,
                         const graft__matmul_one *m, int n, int64_t n_in, int64_t n_tok)
{
    GRAFT_ASSERT(n >= 1 && n <= GRAFT_MATMUL_MAX_MATRICES);
    size_t total = 0;
    a->n = 0;
    for (int i = 0; i < n; i++) {
        int s = 0;
        while (s < a->n && a->type[s] != m[i].type)
            s++;
        if (s == a->n) {
            a->type[s] = m[i].type;
            a->bytes[s] = path->act_bytes(m[i].type, n_in);
            a->offset[s] = total;
            total += a->bytes[s] * (size_t)n_tok;
            a->n++;
        }
        a->slot[i] = s;
    }
    return total;
}

size_t graft__matmul_work_size(const graft__matmul_path *path, const graft__matmul_one *m,
                               int n, int64_t n_in, int64_t n_tok)
{
    act_slots a;
    return plan_slots(&a, path, m, n, n_in, n_tok);
}

typedef struct matmul_job {
    const graft__matmul_path *path;
    const graft__matmul_one *m;
    int64_t n_in, n_tok;
    const float *x;
    uint8_t *work;
    act_slots act;
    int64_t chunk[GRAFT_MATMUL_MAX_MATRICES];       /* rows per task of each matrix */
    int64_t first_task[GRAFT_MATMUL_MAX_MATRICES + 1]; /* matrix i's tasks start here */
} matmul_job;

#ifdef GRAFT_TSAN_DECLARED_MATMUL
/* The TSan build compiles the matmul kernels uninstrumented (CMakeLists.txt); these tell TSan
 * what each task reads and writes. The weights are not declared: they are written once, when
 * the model loads (or is packed for a path, model_pack.c), before any matmul reads them. */
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);
#define DECLARE_READ(p, bytes) __tsan_read_range((void *)(p), (unsigned long)(bytes))
#define DECLARE_WRITE(p, bytes) __tsan_write_range((void *)(p), (unsigned long)(bytes))
#else
#define DECLARE_READ(p, bytes) ((void)(p), (void)(bytes))
#define DECLARE_WRITE(p, bytes) ((void)(p), (void)(bytes))
#endif

/* Task (slot, token): that token's activations in that slot's format. */
static void prepare_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    int s = (int)(task / j->n_tok);
    int64_t t = task % j->n_tok;
    uint8_t *xa = j->work + j->act.offset[s] + (size_t)t * j->act.bytes[s];
    const float *x = j->x + t * j->n_in;
    DECLARE_READ(x, (size_t)j->n_in * sizeof(float));
    DECLARE_WRITE(xa, j->act.bytes[s]);
    j->path->act_prepare(j->act.type[s], xa, x, j->n_in);
}

static void gemm_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    int i = 0;
    while (task >= j->first_task[i + 1])
        i++;
    const graft__matmul_one *m = &j->m[i];
    int64_t o0 = (task - j->first_task[i]) * j->chunk[i];
    int64_t o1 = o0 + j->chunk[i] < m->n_out ? o0 + j->chunk[i] : m->n_out;
    const uint8_t *xa = j->work + j->act.offset[j->act.slot[i]];
    DECLARE_READ(xa, j->act.bytes[j->act.slot[i]] * (size_t)j->n_tok);
    for (int64_t t = 0; t < j->n_tok; t++)
        DECLARE_WRITE(m->y + t * m->n_out + o0, (size_t)(o1 - o0) * sizeof(float));
    j->path->gemm(m->type, m->y, m->n_out, m->w, j->n_in, o0, o1, xa, j->n_tok);
}

/* Rows per task: two tasks per thread, each a multiple of 64 rows so tiles stay whole.
 * Two rather than one lets a thread that finishes early take over part of a slow one's
 * share; more cost more than they balance, as each call's weight streams start cold. A
 * batch of at most STREAM_TOKENS tokens, which streams the weights from memory, takes
 * tasks of at least STREAM_ROWS rows: a task of a few hundred KB spends too much of itself
 * starting its streams, and much longer ones balance worse (figures:
 * bench/results/2026-12-01-kernel-decisions.md). */
enum { STREAM_TOKENS = 4, STREAM_ROWS = 512 };

static int64_t rows_per_task(int64_t n_out, int threads, int64_t n_tok)
{
    if (threads <= 1)
        return n_out;
    int64_t chunk = n_out / (threads * 2);
    chunk = (chunk + 63) / 64 * 64;
    const int64_t least = n_tok <= STREAM_TOKENS ? STREAM_ROWS : 64;
    return chunk < least ? least : chunk;
}

void graft__matmul_many(const graft__exec *ex, const graft__matmul_one *m, int n, int64_t n_in,
                        const float *x, int64_t n_tok)
{
    matmul_job j = {.path = ex->path, .m = m, .n_in = n_in, .n_tok = n_tok, .x = x,
                    .work = ex->work};
    size_t bytes = plan_slots(&j.act, ex->path, m, n, n_in, n_tok);
    GRAFT_ASSERT(bytes <= ex->work_size);
    graft__pool_run(ex->pool, j.act.n * n_tok, prepare_task, &j);
    j.first_task[0] = 0;
    for (int i = 0; i < n; i++) {
        j.chunk[i] = rows_per_task(m[i].n_out, graft__pool_size(ex->pool), n_tok);
        j.first_task[i + 1] = j.first_task[i] + (m[i].n_out + j.chunk[i] - 1) / j.chunk[i];
    }
    graft__pool_run(ex->pool, j.first_task[n], gemm_task, &j);
}
