/*
 * test_threadpool.c: the persistent worker pool runs every task exactly once per job, for any
 * thread count, job after job (also back to back, with no gap for a late worker to fall
 * into), when one thread is slow and the others steal its tasks, and over 65535 tasks
 * (claimed in groups), and shuts down cleanly (also run under TSan).
 *
 * Tasks run on the pool's threads, where a failing cmocka assert would jump across threads:
 * they record what they see (atomics) and the test's thread asserts on the record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <string.h>

#include "kernels/kernels.h"

#define MAX_TASKS 1000

typedef struct job {
    atomic_int runs[MAX_TASKS];
    atomic_int by_thread[GRAFT_MAX_THREADS];
    atomic_llong last[GRAFT_MAX_THREADS]; /* the task each thread ran last, -1: none yet */
    atomic_int out_of_range;              /* a task or thread index outside the job's */
    atomic_int jumps; /* a thread's next task was not the one after its last: a steal */
    int64_t n_tasks;
    int n_threads;
} job;

static void job_reset(job *j, int64_t n_tasks, int n_threads)
{
    memset(j, 0, sizeof *j);
    j->n_tasks = n_tasks;
    j->n_threads = n_threads;
    for (int t = 0; t < GRAFT_MAX_THREADS; t++)
        atomic_store(&j->last[t], -1);
}

/* Runs on any of the pool's threads: records, never asserts. A thread claims the tasks of
 * its own run in order, one at a time, so a task that does not follow the one the thread
 * ran before was stolen from another thread's run (or began a stolen piece). */
static void count_task(void *ctx, int64_t task, int thread)
{
    job *j = ctx;
    if (task < 0 || task >= j->n_tasks || thread < 0 || thread >= j->n_threads) {
        atomic_store(&j->out_of_range, 1);
        return;
    }
    atomic_fetch_add(&j->runs[task], 1);
    atomic_fetch_add(&j->by_thread[thread], 1);
    long long last = atomic_exchange(&j->last[thread], task);
    if (last >= 0 && task != last + 1)
        atomic_fetch_add(&j->jumps, 1);
}

/* On the test's thread, after graft__pool_run returned: every task ran once. */
static void check_job(job *j)
{
    assert_int_equal(atomic_load(&j->out_of_range), 0);
    for (int64_t t = 0; t < j->n_tasks; t++)
        assert_int_equal(atomic_load(&j->runs[t]), 1);
    int total = 0;
    for (int t = 0; t < j->n_threads; t++)
        total += atomic_load(&j->by_thread[t]);
    assert_int_equal(total, j->n_tasks);
}

static void run_and_check(graft__pool *pool, int64_t n_tasks)
{
    static job j;
    job_reset(&j, n_tasks, graft__pool_size(pool));
    graft__pool_run(pool, n_tasks, count_task, &j);
    check_job(&j);
}

static void test_every_task_once(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        graft__pool *pool = NULL;
        assert_int_equal(graft__pool_create(threads, &pool), GRAFT_OK);
        assert_int_equal(graft__pool_size(pool), threads);
        static const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 999, MAX_TASKS};
        for (int round = 0; round < 50; round++)
            run_and_check(pool, sizes[round % 8]);
        graft__pool_free(pool);
    }
}

/* Job after job with nothing between them, the task count changing each time: a worker that
 * has just finished the last task of a job must not claim a task for the old job once the
 * next one is being written (it would run a task past the old job's end, or one of the new
 * job's with the old job's fields, and count it towards the new job, letting the caller
 * return before the new job is done). Tasks record misbehaviour in flags rather than
 * asserting off the main thread. */
typedef struct quick_job {
    int64_t n_tasks;
    atomic_int runs[4];
} quick_job;

static atomic_int out_of_range, unfinished;

static void quick_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    quick_job *j = ctx;
    if (task < 0 || task >= j->n_tasks)
        atomic_store(&out_of_range, 1);
    else
        atomic_fetch_add(&j->runs[task], 1);
}

static void test_back_to_back_jobs(void **state)
{
    (void)state;
    graft__pool *pool = NULL;
    assert_int_equal(graft__pool_create(2, &pool), GRAFT_OK);
    static quick_job jobs[2];
    for (int round = 0; round < 200000; round++) {
        quick_job *j = &jobs[round % 2];
        j->n_tasks = 2 + round % 3;
        for (int t = 0; t < 4; t++)
            atomic_store(&j->runs[t], 0);
        graft__pool_run(pool, j->n_tasks, quick_task, j);
        for (int64_t t = 0; t < j->n_tasks; t++)
            if (atomic_load(&j->runs[t]) != 1)
                atomic_store(&unfinished, 1);
    }
    graft__pool_free(pool);
    assert_int_equal(atomic_load(&out_of_range), 0);
    assert_int_equal(atomic_load(&unfinished), 0);
}

/* Tasks that thread 0 runs take about 20 us, the others' none: the other threads empty
 * their own runs at once and then steal from thread 0's, again and again (or, when a
 * worker wakes late, thread 0 steals from its run). Either way a thread's tasks jump. */
static void slow_on_caller_task(void *ctx, int64_t task, int thread)
{
    if (thread == 0)
        for (volatile int spin = 0; spin < 20000; spin++)
            ;
    count_task(ctx, task, thread);
}

static void test_stealing(void **state)
{
    (void)state;
    for (int threads = 2; threads <= 4; threads++) {
        graft__pool *pool = NULL;
        assert_int_equal(graft__pool_create(threads, &pool), GRAFT_OK);
        static const int64_t sizes[] = {2, 3, 5, 17, 64, 333};
        int jumps = 0;
        for (int round = 0; round < 24; round++) {
            static job j;
            job_reset(&j, sizes[round % 6], threads);
            graft__pool_run(pool, j.n_tasks, slow_on_caller_task, &j);
            check_job(&j);
            jumps += atomic_load(&j.jumps);
        }
        graft__pool_free(pool);
        if (jumps == 0)
            fail_msg("%d threads: no task was stolen in 24 jobs", threads);
    }
}

/* Over 65535 tasks a claim takes a group of consecutive tasks; every task still runs once,
 * the last, shorter group included. */
#define MANY_TASKS (3 * 65535 + 7)
static atomic_uchar many_runs[MANY_TASKS];

static void many_task(void *ctx, int64_t task, int thread)
{
    (void)ctx;
    (void)thread;
    if (task < 0 || task >= MANY_TASKS)
        atomic_store(&out_of_range, 1);
    else
        atomic_fetch_add(&many_runs[task], 1);
}

static void test_many_tasks(void **state)
{
    (void)state;
    graft__pool *pool = NULL;
    assert_int_equal(graft__pool_create(3, &pool), GRAFT_OK);
    static const int64_t sizes[] = {65535, 65536, MANY_TASKS};
    for (int i = 0; i < 3; i++) {
        for (int64_t t = 0; t < MANY_TASKS; t++)
            atomic_store(&many_runs[t], 0);
        graft__pool_run(pool, sizes[i], many_task, NULL);
        for (int64_t t = 0; t < MANY_TASKS; t++)
            assert_int_equal(atomic_load(&many_runs[t]), t < sizes[i] ? 1 : 0);
    }
    graft__pool_free(pool);
    assert_int_equal(atomic_load(&out_of_range), 0);
}

static void test_limits(void **state)
{
    (void)state;
    graft__pool *pool = NULL;
    assert_int_equal(graft__pool_create(0, &pool), GRAFT_EINVAL);
    assert_null(pool);
    assert_int_equal(graft__pool_create(GRAFT_MAX_THREADS + 1, &pool), GRAFT_EINVAL);
    assert_int_equal(graft__pool_size(NULL), 1);
    graft__pool_free(NULL);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    long before = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        graft__pool *pool = NULL;
        int rc = graft__pool_create(3, &pool);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (failures == 0) {
            assert_int_equal(rc, GRAFT_OK);
            run_and_check(pool, 10);
            graft__pool_free(pool);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(pool);
        assert_int_equal(graft__alloc_live(), before);
    }
    assert_int_equal(graft__alloc_live(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_back_to_back_jobs),
        cmocka_unit_test(test_stealing),
        cmocka_unit_test(test_many_tasks),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
