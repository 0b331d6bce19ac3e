/*
 * bandwidth_probe.c: the memory-read bandwidth probe (bandwidth_probe.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bandwidth_probe.h"

enum {
    PROBE_PASSES = 2, /* reads of the whole buffer per timed read */
    PROBE_TRIES = 3   /* timed reads per sample, the best kept */
};

struct graft__probe_slice {
    pthread_t thread;
    uint64_t *words;
    size_t n_words;
    int fill;     /* nonzero: write the slice (first touch), else read it PROBE_PASSES times */
    uint64_t sum; /* what the reads added up, so the compiler keeps them */
};

/* Four independent sums, so the loop is bound by loads, not by one addition chain. */
static uint64_t sum_words(const uint64_t *w, size_t n)
{
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    return a ^ b ^ c ^ d;
}

static void *slice_run(void *arg)
{
    graft__probe_slice *s = arg;
    if (s->fill)
        memset(s->words, 0x5a, s->n_words * sizeof *s->words);
    else
        for (int pass = 0; pass < PROBE_PASSES; pass++)
            s->sum += sum_words(s->words, s->n_words);
    return NULL;
}

/* Runs every slice on its own thread; 0 once all have joined. */
static int run_slices(graft__probe *p, int fill)
{
    int started = 0;
    for (; started < p->n_threads; started++) {
        p->slices[started].fill = fill;
        if (pthread_create(&p->slices[started].thread, NULL, slice_run, &p->slices[started]))
            break;
    }
    for (int i = 0; i < started; i++)
        pthread_join(p->slices[i].thread, NULL);
    return started == p->n_threads ? 0 : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int graft__probe_create(graft__probe *p, int n_threads)
{
    p->buf = malloc(GRAFT_PROBE_BYTES);
    p->slices = calloc((size_t)n_threads, sizeof *p->slices);
    p->n_threads = n_threads;
    p->per = GRAFT_PROBE_BYTES / sizeof *p->buf / (size_t)n_threads / 8 * 8;
    if (p->buf == NULL || p->slices == NULL)
        return -1;
    for (int t = 0; t < n_threads; t++) {
        p->slices[t].words = p->buf + (size_t)t * p->per;
        p->slices[t].n_words = p->per;
    }
    return run_slices(p, 1) == 0 ? run_slices(p, 0) : -1;
}

void graft__probe_free(graft__probe *p)
{
    free(p->slices);
    free(p->buf);
}

/* *gbs = the bandwidth of one timed read of the buffer. */
static int timed_read(graft__probe *p, double *gbs)
{
    const double bytes = (double)p->per * sizeof *p->buf * (double)p->n_threads * PROBE_PASSES;
    double t0 = now_s();
    if (run_slices(p, 0) != 0)
        return -1;
    double seconds = now_s() - t0;
    *gbs = seconds > 0 ? bytes / seconds * 1e-9 : 0;
    return 0;
}

int graft__probe_sample(graft__probe *p, double *gbs)
{
    *gbs = 0;
    for (int i = 0; i < PROBE_TRIES; i++) {
        double sample;
        if (timed_read(p, &sample) != 0)
            return -1;
        *gbs = sample > *gbs ? sample : *gbs;
    }
    return 0;
}

/* Whether a decode of n_gen tokens takes a sample just before its token i. */
static int sample_due(int32_t i, int32_t n_gen)
{
    int64_t k = n_gen / GRAFT_PROBE_EVERY > 1 ? n_gen / GRAFT_PROBE_EVERY : 1;
    /* sample j (0 <= j < k) is before token floor((2j + 1) n_gen / 2k), which lies in the
     * j-th share [j n_gen / k, (j + 1) n_gen / k): only the share of i, or one beside it
     * where a floor falls on its edge, can hold i's sample */
    int64_t share = (int64_t)i * k / n_gen;
    for (int64_t j = share - 1; j <= share + 1; j++)
        if (j >= 0 && j < k && (int64_t)i == (2 * j + 1) * n_gen / (2 * k))
            return 1;
    return 0;
}

int graft__probe_during(graft__probe *p, int32_t i, int32_t n_gen, double *sum, int *count)
{
    if (!sample_due(i, n_gen))
        return 0;
    struct timespec pause = {0, GRAFT_PROBE_SETTLE_US * 1000L};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
        ;
    double gbs;
    if (timed_read(p, &gbs) != 0)
        return -1;
    *sum += gbs;
    (*count)++;
    return 0;
}
