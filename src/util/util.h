/*
 * util.h: the bottom layer shared by every other one.
 *
 * - Allocation goes through graft__malloc / graft__calloc / graft__realloc / graft__free so
 *   tests can inject failures (as SQLite's test_malloc.c does): graft__alloc_fail_after(n)
 *   makes the allocation after the next n succeed fail (and, when `persistent`, every one
 *   after it too). The counters are atomic; injection is meant for single-test processes.
 *   graft__malloc_aligned hands out memory aligned for vector loads; graft__advise_huge_pages
 *   asks for huge pages under a large array read in long sweeps.
 * - Error messages: graft__errmsg() formats a heap message into a caller's `char **errmsg`.
 * - Two tiers of assert: GRAFT_ASSERT is always on (shapes, bounds); GRAFT_DEBUG_ASSERT
 *   (O(n) consistency checks) is compiled without NDEBUG or with GRAFT_DEBUG_ASSERTS
 *   defined (the ASan flavour defines it).
 * - Monotonic time in nanoseconds, the pseudo-random generator (rng.c), and a tag followed
 *   through a text byte by byte (tag_match.c).
 */
#ifndef GRAFT_UTIL_H
#define GRAFT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "graft.h"

void *graft__malloc(size_t size);
void *graft__calloc(size_t count, size_t size);
void *graft__realloc(void *ptr, size_t size);
/* graft__realloc to n items of elem bytes; NULL (ptr untouched) when n * elem overflows or
 * memory runs out. For the arrays that grow as they fill. */
void *graft__realloc_array(void *ptr, size_t n, size_t elem);
/* Room for one more item in an array of *cap items of elem bytes, n of them used: the array
 * itself while n < *cap, else the array reallocated to twice *cap items (`first` items when
 * *cap is 0) with *cap updated. NULL (array and *cap untouched) when memory runs out. */
void *graft__grow_array(void *items, size_t n, size_t *cap, size_t elem, size_t first);
void graft__free(void *ptr);
char *graft__strndup(const char *s, size_t n);

/* Bytes of a cache line: the alignment of arrays read by vector loads. */
#define GRAFT_CACHE_LINE 64
/* Bytes of a transparent huge page (x86-64). */
#define GRAFT_HUGE_PAGE ((size_t)2 << 20)

/* graft__malloc for memory that starts at a multiple of `align` (a power of two, at least
 * sizeof(void *)), freed with graft__free. For arrays read by vector loads: malloc puts a
 * large block 16 bytes past a page boundary, so every row of such an array would straddle
 * a cache line more than it needs to, which slows attention over the KV store (figures:
 * bench/results/2026-12-01-kernel-decisions.md). GRAFT_HUGE_PAGE alignment lets
 * graft__advise_huge_pages cover all of it. */
void *graft__malloc_aligned(size_t size, size_t align);

/* Asks the kernel to back the whole 2 MiB pages inside [p, p + size) (an allocation from
 * graft__malloc or graft__malloc_aligned, best before it is first written) with transparent
 * huge pages (madvise MADV_HUGEPAGE). For the KV store, which attention sweeps every step,
 * often reading only a few cache lines of each row: with 4 KiB pages the TLB would miss on
 * nearly every row.
 * Only a hint: where the kernel declines or lacks THP nothing changes, and the memory is
 * still freed with graft__free. */
void graft__advise_huge_pages(void *p, size_t size);

/* The bit pattern of an IEEE binary32 float, and the float of a bit pattern. */
static inline uint32_t graft__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float graft__f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The value of a hexadecimal digit (either case), or -1 for any other character. */
static inline int graft__hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* FNV-1a over n bytes, continuing from h (GRAFT_FNV1A_BASIS to start): a fast hash for
 * tables, seeds, fingerprints and checksums, not against an adversary. */
#define GRAFT_FNV1A_BASIS 0xcbf29ce484222325u
static inline uint64_t graft__fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h;
}

/* Overflow-checked size arithmetic: false when the result does not fit. */
bool graft__mul_size(size_t a, size_t b, size_t *out);
bool graft__add_size(size_t a, size_t b, size_t *out);

/* Failure injection. After `n` more successful allocations the next one fails; with
 * `persistent` all later ones fail too. graft__alloc_fail_after(-1, false) turns it off. */
void graft__alloc_fail_after(long n, bool persistent);
/* How many allocations were refused since injection was last set. */
long graft__alloc_failures(void);
/* Live allocations made through graft__malloc & co. (for leak checks in tests). */
long graft__alloc_live(void);

/* Sets *errmsg (when errmsg is not NULL) to a newly allocated, printf-formatted message and
 * returns `status`, so error paths read `return graft__errmsg(errmsg, GRAFT_EFORMAT, ...)`.
 * If the message itself cannot be allocated, *errmsg is NULL. */
int graft__errmsg(char **errmsg, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints "graft: assertion failed: ..." with file and line, then aborts. */
_Noreturn void graft__assert_fail(const char *expr, const char *file, int line);

#define GRAFT_ASSERT(x) ((x) ? (void)0 : graft__assert_fail(#x, __FILE__, __LINE__))
#if defined(NDEBUG) && !defined(GRAFT_DEBUG_ASSERTS)
#define GRAFT_DEBUG_ASSERT(x) ((void)0)
#else
#define GRAFT_DEBUG_ASSERT(x) GRAFT_ASSERT(x)
#endif

uint64_t graft__now_ns(void);

/* The whole of the file at `path`, NUL-terminated, its length in *len (when len is not
 * NULL); NULL when it cannot be opened or read, or on no memory. malloc'd, not through
 * graft__malloc: free it with free(). For tests and benchmarks (the CLI reads with
 * graft__cli_read_file, which also takes stdin and reports). */
char *graft__read_file(const char *path, size_t *len);

/* xoshiro256** (rng.c). graft__rng_seed expands a 64-bit seed with splitmix64;
 * graft__rng_unit is uniform in [0, 1) with 53 random bits. */
typedef struct graft__rng {
    uint64_t s[4];
} graft__rng;
uint64_t graft__splitmix64(uint64_t *state);
void graft__rng_seed(graft__rng *r, uint64_t seed);
uint64_t graft__rng_next(graft__rng *r);
double graft__rng_unit(graft__rng *r);

/* tag_match.c: the bytes of tag that a text ends with after one more byte, when it ended with
 * `matched` of them before (matched below the tag's length): the longest k such that
 * tag[0, k) is a tail of tag[0, matched) followed by the byte. */
uint32_t graft__tag_step(const char *tag, uint32_t matched, uint8_t byte);

#endif /* GRAFT_UTIL_H */
