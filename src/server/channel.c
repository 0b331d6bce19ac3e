/*
 * channel.c: the tokens of one generation, from the engine thread to the HTTP thread of its
 * request (server.h).
 *
 * The engine's callbacks append under the channel's mutex and signal; they never wait for
 * the reader. The buffer is sized at creation for every token the generation may sample, so
 * an append never allocates; should it ever be full, the generation is cancelled rather
 * than a token lost. The HTTP thread waits on the condition variable with a timeout, so it
 * can also watch its client's socket.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

int graft__channel_init(graft__channel *ch, size_t cap)
{
    memset(ch, 0, sizeof *ch);
    ch->tokens = malloc((cap ? cap : 1) * sizeof *ch->tokens);
    if (ch->tokens == NULL)
        return GRAFT_ENOMEM;
    ch->cap = cap ? cap : 1;
    if (pthread_mutex_init(&ch->mu, NULL) != 0) {
        free(ch->tokens);
        return GRAFT_ENOMEM;
    }
    if (pthread_cond_init(&ch->cv, NULL) != 0) {
        pthread_mutex_destroy(&ch->mu);
        free(ch->tokens);
        return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

void graft__channel_free(graft__channel *ch)
{
    pthread_cond_destroy(&ch->cv);
    pthread_mutex_destroy(&ch->mu);
    free(ch->tokens);
}

void graft__channel_on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    graft__channel *ch = user;
    pthread_mutex_lock(&ch->mu);
    for (size_t i = 0; i < n; i++) {
        if (ch->n == ch->cap) { /* sized for every token it may sample: never, but safe */
            graft_generation_cancel(gen);
            break;
        }
        ch->tokens[ch->n++] = tokens[i];
    }
    pthread_cond_signal(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
}

void graft__channel_on_settled(graft_generation *gen, void *user)
{
    (void)gen;
    graft__channel *ch = user;
    pthread_mutex_lock(&ch->mu);
    ch->settled = true;
    pthread_cond_signal(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
}

size_t graft__channel_take(graft__channel *ch, int32_t *out, size_t cap, int timeout_ms,
                           bool *settled)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)timeout_ms * 1000000L;
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&ch->mu);
    while (ch->n == 0 && !ch->settled)
        if (pthread_cond_timedwait(&ch->cv, &ch->mu, &until) == ETIMEDOUT)
            break;
    size_t k = ch->n < cap ? ch->n : cap;
    memcpy(out, ch->tokens, k * sizeof *out);
    memmove(ch->tokens, ch->tokens + k, (ch->n - k) * sizeof *out);
    ch->n -= k;
    *settled = ch->settled && ch->n == 0;
    pthread_mutex_unlock(&ch->mu);
    return k;
}
