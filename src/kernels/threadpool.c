/*
 * threadpool.c: persistent worker threads for the forward pass.
 *
 * graft__pool_run(pool, n_tasks, fn, ctx) runs fn(ctx, task, thread) for every task in
 * [0, n_tasks) on the pool's threads and the calling thread, and returns when all are done.
 * The callers split work by output rows, heads or tokens, never along a reduction, so which
 * thread runs a task never changes a result (DESIGN.md invariant 1).
 *
 * Workers are created once. Between jobs a worker spins briefly (a job usually follows
 * within microseconds during a forward pass), then sleeps on a condition variable.
 *
 * Claiming. Tasks are claimed from one 64-bit atomic word, `claim` = (job << 32) | next
 * task, by compare-and-swap: a claim succeeds only while the word still names the job the
 * claimant read the job's fields for, so a worker that wakes late can never take a task of
 * a later job, nor run one with a later job's fields. The caller returns once `done` counts
 * every task: it waits only for tasks actually being run, never for a worker that was
 * asleep or descheduled and took none (on a machine with as many threads as cores, waiting
 * for every worker to check in cost up to a scheduler time slice per job whenever another
 * process held a core). The job number wraps after 2^32 jobs; a claim could only be
 * confused across a wrap by a worker stalled between two loads for all of them.
 *
 * Publishing. While the caller writes a job's fields the word reads (job, NOT_PUBLISHED).
 * Without that step a worker that had just run the last task of the previous job could
 * load the old word (all its tasks claimed), then the new job's larger task count, and
 * claim one more task with the old word before the new one was stored: it would run a
 * task past the old job's end, or a task of the new job twice, and count it towards the
 * new job's `done`, letting the caller return while a real task still ran (seen as
 * rare wrong logits in decode; test_threadpool's back-to-back jobs catch it). Now a
 * worker that sees any field of the new job (acquire fence, paired with the caller's
 * release fence after the NOT_PUBLISHED store) finds the word already moved on, and its
 * exchange fails.
 *
 * Memory order. The caller writes the job's fields (relaxed atomics), then publishes the
 * job with a store of `claim`; a worker that loads `claim` (acquire) and sees the job sees
 * its fields. A later job's fields are only written after `done` shows every task of this
 * one finished (acquire, paired with each task's release increment). Waking: the caller's
 * store of `claim` and load of `sleepers`, and a worker's increment of `sleepers` (under mu)
 * and load of `claim`, are sequentially consistent, so either the worker sees the job or
 * the caller sees the sleeper and broadcasts under mu.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kernels/kernels.h"

enum { SPIN_ROUNDS = 20000 };

/* The task field of the claim word while the caller writes a job's fields: above any task
 * count (at most INT32_MAX), so nothing can be claimed. */
#define NOT_PUBLISHED UINT32_MAX

struct graft__pool {
    int n_threads; /* participants, the caller included */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_int sleepers; /* workers waiting on `wake` (or about to) */
    atomic_bool stop;
    uint32_t job;        /* the caller's job counter */

    /* The current job. */
    _Atomic(graft__task_fn) fn;
    _Atomic(void *) ctx;
    atomic_llong n_tasks;
    atomic_uint_least64_t claim; /* (job << 32) | next task */
    atomic_llong done;           /* tasks of the job finished */
};

typedef struct worker_arg {
    graft__pool *pool;
    int index;
} worker_arg;

static void cpu_relax(void)
{
    __builtin_ia32_pause();
}

static uint32_t job_of(uint64_t claim)
{
    return (uint32_t)(claim >> 32);
}

/* Claims and runs tasks of the job in `claim` (as last loaded) until none is left or the
 * word names another job. */
static void run_tasks(graft__pool *p, uint64_t claim, int thread)
{
    uint32_t job = job_of(claim);
    while (job_of(claim) == job) {
        graft__task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        long long n_tasks = atomic_load_explicit(&p->n_tasks, memory_order_relaxed);
        uint32_t task = (uint32_t)claim;
        if ((long long)task >= n_tasks)
            return;
        /* Pairs with the caller's release fence: fields of a later job imply the claim word
         * has already left this job, so the exchange below fails. */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_compare_exchange_weak_explicit(&p->claim, &claim, claim + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            fn(ctx, task, thread);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
            claim = atomic_load_explicit(&p->claim, memory_order_acquire);
        }
    }
}

/* Whether `claim` names a published job other than `seen`. */
static bool is_new_job(uint64_t claim, uint32_t seen)
{
    return job_of(claim) != seen && (uint32_t)claim != NOT_PUBLISHED;
}

/* Waits until `claim` names a published job other than `seen` or the pool stops; returns
 * `claim`. */
static uint64_t wait_for_job(graft__pool *p, uint32_t seen)
{
    uint64_t claim;
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        claim = atomic_load_explicit(&p->claim, memory_order_acquire);
        if (is_new_job(claim, seen) || atomic_load_explicit(&p->stop, memory_order_acquire))
            return claim;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!is_new_job(claim = atomic_load(&p->claim), seen) &&
           !atomic_load_explicit(&p->stop, memory_order_acquire))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return claim;
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    graft__pool *p = wa->pool;
    int index = wa->index;
    graft__free(wa);
    uint32_t seen = 0;
    for (;;) {
        uint64_t claim = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        seen = job_of(claim);
        run_tasks(p, claim, index);
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
    GRAFT_ASSERT(n_tasks <= INT32_MAX);
    p->job++;
    atomic_store_explicit(&p->claim, (uint64_t)p->job << 32 | NOT_PUBLISHED, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint64_t claim = (uint64_t)p->job << 32;
    atomic_store(&p->claim, claim);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, claim, 0);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks)
        cpu_relax();
}
