/*
 * bandwidth_probe.h: the memory-read bandwidth probe of the benchmark library
 * (bench_lib.h), so that both engines' rooflines come from one measurement: every thread
 * streams over its slice of a GRAFT_PROBE_BYTES buffer, filled and read once at create; a
 * sample is the best of a few timed reads, and a sample during a decode is one read after a
 * pause of GRAFT_PROBE_SETTLE_US (longer than graft's pool workers spin, threadpool.c).
 * How the harnesses use it, and why: bench/README.md.
 */
#ifndef GRAFT_BANDWIDTH_PROBE_H
#define GRAFT_BANDWIDTH_PROBE_H

#include <stddef.h>
#include <stdint.h>

#define GRAFT_PROBE_BYTES ((size_t)512 << 20) /* the buffer, well beyond the caches */
#define GRAFT_PROBE_EVERY 8                   /* decoded tokens per sample during a decode */
#define GRAFT_PROBE_SETTLE_US 2000            /* pause before a sample during a decode */

typedef struct graft__probe_slice graft__probe_slice;
typedef struct graft__probe {
    uint64_t *buf;
    graft__probe_slice *slices;
    int n_threads;
    size_t per; /* words of each thread's slice */
} graft__probe;

/* 0, or -1 when the buffer cannot be allocated or a thread started; p must then still be
 * freed. */
int graft__probe_create(graft__probe *p, int n_threads);
void graft__probe_free(graft__probe *p);
/* *gbs = one sample of the read bandwidth, 1e9 bytes/s; 0, or -1 when a thread cannot be
 * started. */
int graft__probe_sample(graft__probe *p, double *gbs);
/* Called just before token i (0 <= i < n_gen) of a decode of n_gen tokens: when a sample is
 * due there, one read after a pause of GRAFT_PROBE_SETTLE_US, added to *sum (GB/s) and
 * counted in *count. A decode takes max(1, n_gen / GRAFT_PROBE_EVERY) samples, each in the
 * middle of its share of the tokens. 0, or -1 when a thread cannot be started. */
int graft__probe_during(graft__probe *p, int32_t i, int32_t n_gen, double *sum, int *count);

#endif
