/*
 * deadlines.c: how long a connection may take to send a request (server.h).
 *
 * libmicrohttpd's connection timeout counts idle time only, so a client that drips a byte
 * every few seconds (slowloris) keeps its connection forever, and enough such clients fill
 * the connection limit. Here a watcher thread cuts (shuts down the socket of) a connection
 * that is not busy with a request once it has gone too long without sending a whole one
 * (headers and body): first_s from its start, idle_s from the end of its last response (a
 * served connection is an SDK's kept-alive one, whose next request may begin any time).
 * A connection busy with a request (received, generating or streaming) is never cut.
 * libmicrohttpd then sees the socket end and closes the connection as usual.
 *
 * A watch is added when libmicrohttpd reports the connection started and removed when it
 * reports it closed, which it does before closing the socket; the watcher shuts a socket
 * down only under `mu`, with the watch still listed, so it never touches a descriptor
 * that was closed (and perhaps reused by a newer connection).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

enum { WATCH_PERIOD_MS = 200 };

struct graft__conn_watch {
    int fd;
    bool busy, served, cut;
    uint64_t since_ns; /* its start, or the end of its last response */
    graft__conn_watch *prev, *next;
};

struct graft__deadlines {
    uint64_t first_ns, idle_ns;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stopping;
    graft__conn_watch *head;
    atomic_ullong *cut_total; /* counts the connections cut, when not NULL */
    pthread_t thread;
};

static void cut_late(graft__deadlines *d)
{
    uint64_t now = graft__server_now_ns();
    for (graft__conn_watch *w = d->head; w != NULL; w = w->next) {
        uint64_t allowed = w->served ? d->idle_ns : d->first_ns;
        if (w->busy || w->cut || now - w->since_ns < allowed)
            continue;
        shutdown(w->fd, SHUT_RDWR);
        w->cut = true;
        if (d->cut_total != NULL)
            atomic_fetch_add(d->cut_total, 1);
    }
}

static void *watch_main(void *arg)
{
    graft__deadlines *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        cut_late(d);
        struct timespec until = graft__server_realtime_in_ms(WATCH_PERIOD_MS);
        int rc = 0;
        while (!d->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&d->wake, &d->mu, &until);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int graft__deadlines_start(int32_t first_s, int32_t idle_s, atomic_ullong *cut_total,
                           graft__deadlines **out)
{
    *out = NULL;
    graft__deadlines *d = calloc(1, sizeof *d);
    if (d == NULL)
        return GRAFT_ENOMEM;
    d->first_ns = (uint64_t)first_s * 1000000000u;
    d->idle_ns = (uint64_t)idle_s * 1000000000u;
    d->cut_total = cut_total;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    if (pthread_create(&d->thread, NULL, watch_main, d) != 0) {
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return GRAFT_ENOMEM;
    }
    *out = d;
    return GRAFT_OK;
}

void graft__deadlines_stop(graft__deadlines *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    while (d->head != NULL) {
        graft__conn_watch *w = d->head;
        d->head = w->next;
        free(w);
    }
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

graft__conn_watch *graft__deadlines_add(graft__deadlines *d, int fd)
{
    graft__conn_watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL; /* unwatched: it keeps only the idle timeout */
    w->fd = fd;
    w->since_ns = graft__server_now_ns();
    pthread_mutex_lock(&d->mu);
    w->next = d->head;
    if (d->head != NULL)
        d->head->prev = w;
    d->head = w;
    pthread_mutex_unlock(&d->mu);
    return w;
}

void graft__deadlines_remove(graft__deadlines *d, graft__conn_watch *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        d->head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&d->mu);
    free(w);
}

void graft__deadlines_busy(graft__deadlines *d, graft__conn_watch *w, bool busy)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    if (w->busy && !busy) {
        w->served = true;
        w->since_ns = graft__server_now_ns();
    }
    w->busy = busy;
    pthread_mutex_unlock(&d->mu);
}
