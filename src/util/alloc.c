/*
 * alloc.c: the allocation seam every layer allocates through, with failure injection.
 *
 * Tests call graft__alloc_fail_after(n, persistent) and then run an operation for
 * n = 0, 1, 2, ... until it succeeds without a refused allocation, asserting each time that
 * the operation reports GRAFT_ENOMEM cleanly and leaks nothing (graft__alloc_live()).
 * The counters are atomics so a test may inject while the engine thread allocates.
 * graft__malloc_aligned is the aligned form (posix_memalign: its memory goes back with
 * free like the rest). graft__advise_huge_pages is here too: a hint about memory this seam
 * handed out.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "util/util.h"

static atomic_long fail_countdown = -1; /* allocations left before failing; -1 = off */
static atomic_bool fail_persistent;
static atomic_long failures;
static atomic_long live;

void graft__alloc_fail_after(long n, bool persistent)
{
    atomic_store(&fail_persistent, persistent);
    atomic_store(&failures, 0);
    atomic_store(&fail_countdown, n);
}

long graft__alloc_failures(void)
{
    return atomic_load(&failures);
}

long graft__alloc_live(void)
{
    return atomic_load(&live);
}

/* True when this allocation must be refused. */
static bool inject_failure(void)
{
    long left = atomic_load(&fail_countdown);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &left, left - 1))
            return false;
    }
    if (left < 0)
        return false;
    if (!atomic_load(&fail_persistent))
        atomic_store(&fail_countdown, -1);
    atomic_fetch_add(&failures, 1);
    return true;
}

void *graft__malloc(size_t size)
{
    if (inject_failure())
        return NULL;
    void *p = malloc(size ? size : 1);
    if (p != NULL)
        atomic_fetch_add(&live, 1);
    return p;
}

void *graft__malloc_aligned(size_t size, size_t align)
{
    if (inject_failure())
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    atomic_fetch_add(&live, 1);
    return p;
}

void *graft__calloc(size_t count, size_t size)
{
    if (inject_failure())
        return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (p != NULL)
        atomic_fetch_add(&live, 1);
    return p;
}

void *graft__realloc(void *ptr, size_t size)
{
    if (ptr == NULL)
        return graft__malloc(size);
    if (inject_failure())
        return NULL;
    return realloc(ptr, size ? size : 1);
}

void *graft__realloc_array(void *ptr, size_t n, size_t elem)
{
    size_t bytes;
    return graft__mul_size(n, elem, &bytes) ? graft__realloc(ptr, bytes) : NULL;
}

void *graft__grow_array(void *items, size_t n, size_t *cap, size_t elem, size_t first)
{
    if (n < *cap)
        return items;
    size_t want = *cap ? *cap * 2 : first;
    void *grown = want > *cap ? graft__realloc_array(items, want, elem) : NULL;
    if (grown != NULL)
        *cap = want;
    return grown;
}

void graft__free(void *ptr)
{
    if (ptr == NULL)
        return;
    atomic_fetch_sub(&live, 1);
    free(ptr);
}

void graft__advise_huge_pages(void *p, size_t size)
{
    const uintptr_t huge = GRAFT_HUGE_PAGE;
    uintptr_t first = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)p + size) & ~(huge - 1);
    if (end > first)
        (void)madvise((void *)first, end - first, MADV_HUGEPAGE);
}

void graft_free(void *ptr)
{
    graft__free(ptr);
}

char *graft__strndup(const char *s, size_t n)
{
    char *copy = graft__malloc(n + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, s, n);
    copy[n] = '\0';
    return copy;
}

bool graft__mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

bool graft__add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

uint64_t graft__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
