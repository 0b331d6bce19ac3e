/*
 * cpu_features.c: which SIMD instruction sets this processor and OS can run, from CPUID
 * and XGETBV (the OS must save the wider registers on context switches).
 *
 * Read with <cpuid.h> rather than __builtin_cpu_supports so gcc and clang see the same
 * feature names. The matmul dispatch (dispatch.c) and the tests ask here.
 */
#include <cpuid.h>
#include <stdbool.h>

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
