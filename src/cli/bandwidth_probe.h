/*
 * bandwidth_probe.h: the memory-read bandwidth probe of `graft bench speed`, shared with
 * bench/llama_speed.c so that both engines' rooflines come from the same measurement. It
 * depends on nothing of graft (plain C11, POSIX threads), so the llama.cpp harness compiles
 * bandwidth_probe.c as it is.
 *
 * Every thread streams over its slice of a GRAFT_PROBE_BYTES buffer. The buffer is filled
 * and read once at create (the first read after a fill runs well below the rate of the
 * next ones), then kept for the samples. A sample is
 * the best of a few timed reads, as a read can start while a thread that just finished
 * computing still holds a core (a pool worker spins a while before it sleeps) and run at
 * half the rate.
 *
 * A sample taken during a decode is one read after a pause of GRAFT_PROBE_SETTLE_US, which
 * outlasts the spin of graft's pool workers (SPIN_ROUNDS, threadpool.c): the benchmarks
 * take a few of them between the decoded tokens (graft__probe_during), not timed as
 * decode, and their mean is the bandwidth of the memory system during the decode. On a
 * machine whose bandwidth changes from second to second with where its virtual cores run,
 * the samples around a decode can find a state the decode never ran in.
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
