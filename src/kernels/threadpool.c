/*
 * threadpool.c: persistent worker threads for the forward pass.
 *
 * graft__pool_run(pool, n_tasks, fn, ctx) runs fn(ctx, task, thread) for every task in
 * [0, n_tasks) on the pool's threads and the calling thread, and returns when all are done.
 * Tasks are handed out in order from an atomic counter. The callers split work by output
 * rows, heads or tokens, never along a reduction, so which thread runs a task never changes
 * a result (DESIGN.md invariant 1).
 *
 * Workers are created once. Between jobs a worker spins briefly (a job usually follows
 * within microseconds during a forward pass), then sleeps on a condition variable. Every
 * participant, the caller included, checks in to `finished` when the task counter runs dry;
 * the caller returns only when all have, so no worker can still touch a job's fields when
 * the next job is set up.
 *
 * Locking: `mu` guards sleeping and waking only; the job fields are published by the
 * release store of `generation` and read after its acquire load.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kernels/kernels.h"

enum { SPIN_ROUNDS = 20000 };

struct graft__pool {
    int n_threads; /* participants, the caller included */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint generation;
    atomic_bool stop;
    graft__task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    atomic_int finished;
};

typedef struct worker_arg {
    graft__pool *pool;
    int index;
} worker_arg;

static void cpu_relax(void)
{
    __builtin_ia32_pause();
}

static void run_tasks(graft__pool *p, int thread)
{
    for (;;) {
        long long task = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (task >= p->n_tasks)
            break;
        p->fn(p->ctx, task, thread);
    }
    atomic_fetch_add_explicit(&p->finished, 1, memory_order_acq_rel);
}

/* Waits until generation differs from `seen` or the pool stops; returns the generation. */
static unsigned wait_for_job(graft__pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_acquire))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
           !atomic_load_explicit(&p->stop, memory_order_acquire))
        pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    graft__pool *p = wa->pool;
    int index = wa->index;
    graft__free(wa);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, index);
    }
}

static void stop_workers(graft__pool *p, int started)
{
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++)
        pthread_join(p->threads[i], NULL);
}

int graft__pool_create(int n_threads, graft__pool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > GRAFT_MAX_THREADS)
        return GRAFT_EINVAL;
    graft__pool *p = graft__calloc(1, sizeof *p);
    if (p == NULL)
        return GRAFT_ENOMEM;
    p->n_threads = n_threads;
    p->threads = graft__calloc((size_t)n_threads, sizeof *p->threads);
    if (p->threads == NULL) {
        graft__free(p);
        return GRAFT_ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = graft__malloc(sizeof *wa);
        if (wa != NULL)
            *wa = (worker_arg){p, i};
        if (wa == NULL || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            graft__free(wa);
            p->n_threads = i;
            graft__pool_free(p);
            return GRAFT_ENOMEM;
        }
    }
    *out = p;
    return GRAFT_OK;
}

void graft__pool_free(graft__pool *p)
{
    if (p == NULL)
        return;
    stop_workers(p, p->n_threads - 1);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    graft__free(p->threads);
    graft__free(p);
}

int graft__pool_size(const graft__pool *p)
{
    return p == NULL ? 1 : p->n_threads;
}

void graft__pool_run(graft__pool *p, int64_t n_tasks, graft__task_fn fn, void *ctx)
{
    if (p == NULL || p->n_threads == 1 || n_tasks <= 1) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    while (atomic_load_explicit(&p->finished, memory_order_acquire) < p->n_threads)
        cpu_relax();
}
