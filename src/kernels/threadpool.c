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
 * Claiming. The tasks are cut into one contiguous run per thread, and each thread claims
 * the tasks of its own run in order, one at a time. A thread whose run is empty steals the
 * back half of what is left of another's, keeps the first stolen task and makes the rest
 * its own run (which can be stolen from in turn). So a thread computing rows of a weight
 * matrix reads them as one stream, and its claims touch a cache line of its own until a
 * thief comes, rather than all threads contending for one shared counter (figures:
 * bench/results/2026-12-01-kernel-decisions.md).
 *
 * A run is one 64-bit word, (job << 32) | (first << 16) | end, in units of a task or, over
 * 65535 tasks, of a group of consecutive tasks claimed together (per_unit). Every claim is
 * a compare-and-swap on such a word that names the job whose fields the claimant read, so
 * a worker that wakes late can never take a task of a later job, nor run one with a later
 * job's fields. The word holds the whole state of the run, so a claimant whose expected
 * value is stale either fails or finds that very state (no ABA hazard within a job). The
 * caller returns once `done` counts every task: it waits only for tasks actually being
 * run, never for a worker that was asleep or descheduled and took none (on a machine with
 * as many threads as cores, waiting for every worker to check in cost up to a scheduler
 * time slice per job whenever another process held a core). The job number wraps after
 * 2^32 jobs; a claim could only be confused across a wrap by a worker stalled between two
 * loads for all of them.
 *
 * Publishing. A job is announced in `announce`, (job << 32) | state. While the caller
 * writes a job's fields and runs the word reads (job, NOT_PUBLISHED), and a worker waits
 * for a published job. A worker that had just run the last task of the previous job may
 * still load the new job's fields before trying one more claim with the old job: every run
 * word then names the new job, or is an empty run of the old one (the old job's runs were
 * all empty before `done` let the caller return), so the exchange fails.
 *
 * Memory order. The caller writes the job's fields and runs (relaxed atomics) after a
 * release fence that follows the NOT_PUBLISHED store, then publishes the job with a store
 * of `announce`; a worker that loads `announce` (acquire) and sees the job sees its fields
 * and runs. A claimant loads the fields (relaxed), then fences (acquire) before its
 * exchange: had it read a later job's field, the fence would order its exchange after
 * this job's end, when no run of it is left. A later job's fields are only written after
 * `done` shows every task of this one finished (acquire, paired with each claimant's
 * release increment after running its tasks). Waking: the caller's store of `announce`
 * and load of `sleepers`, and a worker's increment of `sleepers` (under mu) and load of
 * `announce`, are sequentially consistent, so either the worker sees the job or the caller
 * sees the sleeper and broadcasts under mu.
 */
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "kernels/kernels.h"

enum {
    SPIN_ROUNDS = 20000,
    MAX_UNITS = 0xffff /* units of a job: a run's bounds are 16-bit fields */
};

/* The state field of `announce` while the caller writes a job; 0 once it is published. */
#define NOT_PUBLISHED 1u

/* One thread's run of a job's units, on a cache line of its own: claiming from one's own
 * run touches no line another thread writes, until a thief comes. */
typedef struct run_word {
    alignas(64) atomic_uint_least64_t word; /* (job << 32) | (first << 16) | end */
} run_word;

struct graft__pool {
    int n_threads; /* participants, the caller included */
    pthread_t *threads;
    run_word *runs; /* one per participant, caller first */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_int sleepers; /* workers waiting on `wake` (or about to) */
    atomic_bool stop;
    uint32_t job;        /* the caller's job counter */

    /* The current job. */
    _Atomic(graft__task_fn) fn;
    _Atomic(void *) ctx;
    atomic_llong n_tasks;
    atomic_llong per_unit;          /* consecutive tasks claimed as one unit */
    atomic_uint_least64_t announce; /* (job << 32) | NOT_PUBLISHED or 0 */
    atomic_llong done;              /* tasks of the job finished */
};

typedef struct worker_arg {
    graft__pool *pool;
    int index;
} worker_arg;

static void cpu_relax(void)
{
    __builtin_ia32_pause();
}

static uint32_t job_of(uint64_t word)
{
    return (uint32_t)(word >> 32);
}

static uint64_t run_of(uint32_t job, uint32_t first, uint32_t end)
{
    return (uint64_t)job << 32 | (uint64_t)first << 16 | end;
}

static uint32_t first_of(uint64_t run)
{
    return (uint32_t)(run >> 16) & MAX_UNITS;
}

static uint32_t end_of(uint64_t run)
{
    return (uint32_t)run & MAX_UNITS;
}

/* Takes the first unit of `thread`'s own run of `job`, or steals the back half of
 * another's (the first stolen unit taken, the rest made the thread's own run). Returns
 * the unit, or -1 when every run of the job is empty (or names another job). */
static int64_t claim_unit(graft__pool *p, uint32_t job, int thread)
{
    atomic_uint_least64_t *own = &p->runs[thread].word;
    uint64_t run = atomic_load_explicit(own, memory_order_relaxed);
    while (job_of(run) == job && first_of(run) < end_of(run))
        if (atomic_compare_exchange_weak_explicit(
                own, &run, run_of(job, first_of(run) + 1, end_of(run)), memory_order_relaxed,
                memory_order_relaxed))
            return first_of(run);
    for (int k = 1; k < p->n_threads; k++) {
        atomic_uint_least64_t *other = &p->runs[(thread + k) % p->n_threads].word;
        run = atomic_load_explicit(other, memory_order_relaxed);
        while (job_of(run) == job && first_of(run) < end_of(run)) {
            uint32_t first = first_of(run), end = end_of(run);
            uint32_t cut = end - (end - first + 1) / 2;
            if (atomic_compare_exchange_weak_explicit(other, &run, run_of(job, first, cut),
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                /* Own run is empty, and only its owner makes an empty run nonempty. */
                atomic_store_explicit(own, run_of(job, cut + 1, end), memory_order_relaxed);
                return cut;
            }
        }
    }
    return -1;
}

/* Claims and runs units of `job` until every run is empty or names another job. */
static void run_tasks(graft__pool *p, uint32_t job, int thread)
{
    for (;;) {
        graft__task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        long long n_tasks = atomic_load_explicit(&p->n_tasks, memory_order_relaxed);
        long long per_unit = atomic_load_explicit(&p->per_unit, memory_order_relaxed);
        /* Pairs with the caller's release fence: fields of a later job imply every run of
         * this job is already empty, so no claim below succeeds. */
        atomic_thread_fence(memory_order_acquire);
        int64_t unit = claim_unit(p, job, thread);
        if (unit < 0)
            return;
        long long first = unit * per_unit;
        long long end = first + per_unit < n_tasks ? first + per_unit : n_tasks;
        for (long long task = first; task < end; task++)
            fn(ctx, task, thread);
        atomic_fetch_add_explicit(&p->done, end - first, memory_order_release);
    }
}

/* Whether `announce` names a published job other than `seen`. */
static bool is_new_job(uint64_t announce, uint32_t seen)
{
    return job_of(announce) != seen && (uint32_t)announce != NOT_PUBLISHED;
}

/* Waits until `announce` names a published job other than `seen` or the pool stops;
 * returns the job. */
static uint32_t wait_for_job(graft__pool *p, uint32_t seen)
{
    uint64_t announce;
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        announce = atomic_load_explicit(&p->announce, memory_order_acquire);
        if (is_new_job(announce, seen) || atomic_load_explicit(&p->stop, memory_order_acquire))
            return job_of(announce);
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!is_new_job(announce = atomic_load(&p->announce), seen) &&
           !atomic_load_explicit(&p->stop, memory_order_acquire))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return job_of(announce);
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    graft__pool *p = wa->pool;
    int index = wa->index;
    graft__free(wa);
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, seen, index);
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
    p->runs = graft__malloc_aligned((size_t)n_threads * sizeof *p->runs, alignof(run_word));
    if (p->threads == NULL || p->runs == NULL) {
        graft__free(p->threads);
        graft__free(p->runs);
        graft__free(p);
        return GRAFT_ENOMEM;
    }
    for (int i = 0; i < n_threads; i++)
        atomic_init(&p->runs[i].word, 0);
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
    graft__free(p->runs);
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
    const int64_t per_unit = (n_tasks + MAX_UNITS - 1) / MAX_UNITS;
    const int64_t units = (n_tasks + per_unit - 1) / per_unit;
    const uint32_t job = ++p->job;
    atomic_store_explicit(&p->announce, (uint64_t)job << 32 | NOT_PUBLISHED,
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->per_unit, per_unit, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    for (int i = 0; i < p->n_threads; i++)
        atomic_store_explicit(&p->runs[i].word,
                              run_of(job, (uint32_t)(units * i / p->n_threads),
                                     (uint32_t)(units * (i + 1) / p->n_threads)),
                              memory_order_relaxed);
    atomic_store(&p->announce, (uint64_t)job << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, job, 0);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks)
        cpu_relax();
}
