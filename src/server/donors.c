/*
 * donors.c: active prefix reuse (server.h): a request takes the already computed prompt of
 * a request that is still running, its donor, instead of computing the same tokens again.
 *
 * Every request that computes a prompt registers its prompt and session here for as long
 * as it runs. An arriving request (anonymous, or the first of a new named session) holds the
 * prefix cache's offer already; a donor offers min(common prompt prefix, donor's committed
 * position, prompt length - 1): never the donor's output, never the recipient's last prompt
 * token. The donor is used only when it saves at least min_tokens more than the cache (the
 * cache wins ties). A donor still prefilling a prefix the recipient shares, at least as far
 * along as the cache's offer, is waited for (bounded by wait_ms) until it has committed the
 * shared part, when that gives more than the best offer now: two requests arriving
 * together with a long common prefix compute it once.
 * The one clone of the donor picks its boundary on the engine thread when it runs
 * (graft_session_clone_range), so the donor's progress can never make it wrong; a refusal
 * (retention, the donor gone, capacity) falls back to the cache's offer, counted by reason.
 *
 * Choosing and registering are one step under the registry's mutex, so of two requests
 * arriving together one is the other's donor. A request that waits is registered only once
 * it has its session: nobody waits on a waiter. The mutex is what keeps a donor's session
 * handle valid while another thread clones it or reads its position: a request leaves the
 * registry (graft__donors_leave) before it closes its session. Positions are read by polling
 * (an atomic read each millisecond while waiting); the engine thread is never blocked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

enum { POLL_NS = 1000000 };

struct graft__donor {
    graft__donor *next;
    uint64_t id;
    const int32_t *prompt; /* the request's, valid while registered */
    size_t n_prompt;
    graft_session *session;
};

int graft__donors_init(graft__donors *d, int32_t min_tokens, int32_t wait_ms)
{
    memset(d, 0, sizeof *d);
    d->min_tokens = min_tokens;
    d->wait_ns = (uint64_t)wait_ms * 1000000u;
    return pthread_mutex_init(&d->mu, NULL) == 0 ? GRAFT_OK : GRAFT_ENOMEM;
}

void graft__donors_free(graft__donors *d)
{
    pthread_mutex_destroy(&d->mu);
}

typedef struct offer {
    const graft__donor *donor;
    int32_t now;    /* tokens it offers at its committed position now */
    int32_t target; /* tokens it will offer once it committed the shared prefix */
    int32_t position;
} offer;

/* Under mu: the donor offering most now (ties: the earliest), and the one that will offer
 * most once its prefill got there. */
static void best_offers(const graft__donors *d, const int32_t *prompt, size_t n, offer *now,
                        offer *later)
{
    *now = *later = (offer){0};
    for (const graft__donor *x = d->head; x != NULL; x = x->next) {
        size_t lcp = graft__common_prefix(prompt, n, x->prompt, x->n_prompt);
        int32_t target = (int32_t)(lcp < n - 1 ? lcp : n - 1);
        int32_t position = graft_session_position(x->session);
        int32_t offered = position < target ? position : target;
        if (offered > now->now || (offered == now->now && now->donor && x->id < now->donor->id))
            *now = (offer){x, offered, target, position};
        if (target > later->target)
            *later = (offer){x, offered, target, position};
    }
}

static graft__donor *find(graft__donors *d, uint64_t id)
{
    for (graft__donor *x = d->head; x != NULL; x = x->next)
        if (x->id == id)
            return x;
    return NULL;
}

typedef struct clone_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
    graft_session *clone;
} clone_wait;

static void clone_done(int status, graft_session *clone, void *user)
{
    clone_wait *w = user;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->clone = clone;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Under mu: queues the one clone of donor `id`'s session in [min_upto, max_upto]; then,
 * outside it, waits for the result. */
static int clone_donor(graft__donors *d, uint64_t id, int32_t min_upto, int32_t max_upto,
                       graft_session **out)
{
    *out = NULL;
    clone_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_mutex_lock(&d->mu);
    const graft__donor *x = find(d, id);
    int rc = x ? graft_session_clone_range(x->session, min_upto, max_upto, clone_done, &w)
               : GRAFT_ECLOSED;
    atomic_fetch_add(&d->attempts, 1); /* once queued (or refused), under the mutex */
    pthread_mutex_unlock(&d->mu);
    if (rc == GRAFT_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.status;
        *out = w.clone;
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

/* Waits until donor `id` has committed `target` tokens, is gone, or the deadline passed;
 * true when it got there. */
static bool wait_for(graft__donors *d, uint64_t id, int32_t target, uint64_t deadline)
{
    for (;;) {
        pthread_mutex_lock(&d->mu);
        const graft__donor *x = find(d, id);
        int32_t position = x ? graft_session_position(x->session) : -1;
        pthread_mutex_unlock(&d->mu);
        if (position < 0)
            return false;
        if (position >= target)
            return true;
        if (graft__server_now_ns() >= deadline)
            return false;
        struct timespec pause = {0, POLL_NS};
        nanosleep(&pause, NULL);
    }
}

static void count_refusal(graft__donors *d, int status)
{
    int reason = status == GRAFT_ERETENTION  ? GRAFT__DONOR_RETENTION
                 : status == GRAFT_EBOUNDARY ? GRAFT__DONOR_BOUNDARY
                 : status == GRAFT_ECLOSED   ? GRAFT__DONOR_CLOSED
                 : status == GRAFT_ECAPACITY ? GRAFT__DONOR_CAPACITY
                                             : GRAFT__DONOR_OTHER;
    atomic_fetch_add(&d->refusals[reason], 1);
}

static void enter(graft__donors *d, graft__donor *self)
{
    self->id = ++d->next_id;
    self->next = d->head;
    d->head = self;
}

int graft__donors_join(graft__donors *d, const int32_t *prompt, size_t n, bool take,
                       graft_session **session, int32_t *reused, graft__donor **self,
                       graft__donor_result *result)
{
    *self = NULL;
    *result = (graft__donor_result){0};
    graft__donor *me = calloc(1, sizeof *me);
    if (me == NULL)
        return GRAFT_ENOMEM;
    me->prompt = prompt;
    me->n_prompt = n;
    const int32_t cached = *reused, least = cached + d->min_tokens;
    uint64_t deadline = graft__server_now_ns() + d->wait_ns;
    for (int round = 0; round < 2 && take && d->min_tokens > 0 && n > 1; round++) {
        pthread_mutex_lock(&d->mu);
        offer now, later;
        best_offers(d, prompt, n, &now, &later);
        /* a donor still prefilling what it shares is waited for when it will give more than
         * the best offer now: taking part of it now would compute the rest twice, and
         * computing it alongside takes no less time than the donor needs to finish it */
        bool wait = d->wait_ns > 0 && later.donor != NULL && later.target >= least &&
                    later.position >= cached && later.position < later.target &&
                    later.target > now.now;
        bool take_now = !wait && now.donor != NULL && now.now >= least;
        if (!take_now && !wait) { /* nothing to take: this request is a donor from now on */
            me->session = *session;
            enter(d, me);
            pthread_mutex_unlock(&d->mu);
            *self = me;
            return GRAFT_OK;
        }
        const offer chosen = take_now ? now : later;
        uint64_t id = chosen.donor->id;
        pthread_mutex_unlock(&d->mu);
        uint64_t t0 = graft__server_now_ns();
        if (wait) {
            atomic_fetch_add(&d->waits, 1);
            bool there = wait_for(d, id, chosen.target, deadline);
            result->wait_ns = graft__server_now_ns() - t0;
            atomic_fetch_add(&d->wait_ns_total, result->wait_ns);
            if (!there) {
                pthread_mutex_lock(&d->mu);
                bool gone = find(d, id) == NULL;
                pthread_mutex_unlock(&d->mu);
                if (gone) { /* released to the next best offer */
                    atomic_fetch_add(&d->waits_released, 1);
                    continue;
                }
                atomic_fetch_add(&d->waits_timed_out, 1);
            }
        }
        graft_session *clone = NULL;
        int rc = clone_donor(d, id, least, chosen.target, &clone);
        if (rc != GRAFT_OK) {
            count_refusal(d, rc);
            break;
        }
        atomic_fetch_add(&d->successes, 1);
        atomic_fetch_add(&d->tokens_saved,
                         (unsigned long long)(graft_session_position(clone) - cached));
        graft_session_close(*session);
        *session = clone;
        *reused = graft_session_position(clone);
        result->from_donor = true;
        result->waited = wait;
        break;
    }
    me->session = *session;
    pthread_mutex_lock(&d->mu);
    enter(d, me);
    pthread_mutex_unlock(&d->mu);
    *self = me;
    return GRAFT_OK;
}

void graft__donors_leave(graft__donors *d, graft__donor *self)
{
    if (self == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    for (graft__donor **p = &d->head; *p != NULL; p = &(*p)->next)
        if (*p == self) {
            *p = self->next;
            break;
        }
    pthread_mutex_unlock(&d->mu);
    free(self);
}
