/*
 * cpu_features.c: which SIMD instruction sets this processor and OS can run, from CPUID
 * and XGETBV (the OS must save the wider registers on context switches).
 *
 * Read with <cpuid.h> rather than __builtin_cpu_supports so gcc and clang see the same
 * feature names. The matmul dispatch (dispatch.c) and the tests ask here; benchmarks print
 * graft__cpu_features_string so a figure says what it ran on.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"

static bool bit(unsigned reg, int n)
{
    return (reg >> n) & 1u;
}

static unsigned long long xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static bool os_saves(unsigned long long mask)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !bit(c, 27)) /* OSXSAVE */
        return false;
    return (xcr0() & mask) == mask;
}

bool graft__cpu_has_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    bool fma = bit(c, 12), avx = bit(c, 28), f16c = bit(c, 29);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    return fma && avx && f16c && bit(b, 5) && os_saves(0x6); /* XMM, YMM state */
}

bool graft__cpu_has_avx512(void)
{
    unsigned a, b, c, d;
    if (!graft__cpu_has_avx2() || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    bool f = bit(b, 16), dq = bit(b, 17), bw = bit(b, 30), vl = bit(b, 31), vnni = bit(c, 11);
    return f && dq && bw && vl && vnni && os_saves(0xe6); /* + opmask, ZMM state */
}

bool graft__cpu_has_avx_vnni(void)
{
    unsigned a, b, c, d;
    if (!graft__cpu_has_avx2() || !__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return false;
    return bit(a, 4);
}

/* Appends " name" to buf (of size n) when has. */
static void add_feature(char *buf, size_t n, bool has, const char *name)
{
    if (!has)
        return;
    size_t used = strlen(buf);
    if (used + strlen(name) + 2 <= n) {
        buf[used] = used ? ' ' : '\0';
        strcpy(buf + used + (used ? 1 : 0), name);
    }
}

static char features[128]; /* written once, by describe_features */
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void describe_features(void)
{
    unsigned a, b, c, d;
    bool avx2 = graft__cpu_has_avx2(), avx512 = graft__cpu_has_avx512();
    bool bf16 = avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && bit(a, 5);
    add_feature(features, sizeof features, avx2, "avx2 fma f16c");
    add_feature(features, sizeof features, graft__cpu_has_avx_vnni(), "avx-vnni");
    add_feature(features, sizeof features, avx512, "avx512f/bw/vl/dq/vnni");
    add_feature(features, sizeof features, bf16, "avx512-bf16");
    if (features[0] == '\0')
        strcpy(features, "no avx2");
}

const char *graft__cpu_features_string(void)
{
    pthread_once(&features_once, describe_features);
    return features;
}
