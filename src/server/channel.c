/*
 * channel.c: the tokens of one request's generations (its choices), from the engine thread
 * to the request's HTTP thread (server.h).
 *
 * Each choice's generation reports through its own port; the engine's callbacks append
 * (choice, token and, when asked for, its log-probabilities) under the channel's mutex and
 * signal; they never wait for the reader. The buffer is sized at creation for every token
 * the generations may sample, so an append never allocates; should it ever be full, the
 * generation is cancelled rather than a token lost. The HTTP thread waits on the condition
 * variable with a timeout, so it can also watch its client's socket; a poke (a clone a
 * choice waits for) wakes it too. A channel can forward its wake-ups to another (`forward`),
 * on which a thread reading several channels waits.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

int graft__channel_init(graft__channel *ch, size_t cap, int32_t logprob_width)
{
    memset(ch, 0, sizeof *ch);
    ch->cap = cap ? cap : 1;
    ch->logprob_width = logprob_width;
    ch->entries = malloc(ch->cap * sizeof *ch->entries);
    if (logprob_width > 0)
        ch->logprobs = malloc(ch->cap * (size_t)logprob_width * sizeof *ch->logprobs);
    if (ch->entries == NULL || (logprob_width > 0 && ch->logprobs == NULL))
        goto fail;
    if (pthread_mutex_init(&ch->mu, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&ch->cv, NULL) != 0) {
        pthread_mutex_destroy(&ch->mu);
        goto fail;
    }
    return GRAFT_OK;
fail:
    free(ch->entries);
    free(ch->logprobs);
    return GRAFT_ENOMEM;
}

void graft__channel_free(graft__channel *ch)
{
    pthread_cond_destroy(&ch->cv);
    pthread_mutex_destroy(&ch->mu);
    free(ch->entries);
    free(ch->logprobs);
}

void graft__channel_on_update(graft_generation *gen, const int32_t *tokens, size_t n, void *user)
{
    graft__channel_port *port = user;
    graft__channel *ch = port->channel;
    uint64_t now = graft__server_now_ns();
    if (port->last_ns != 0 && port->metrics != NULL)
        graft__metrics_itl(port->metrics, now - port->last_ns);
    port->last_ns = now;
    pthread_mutex_lock(&ch->mu);
    for (size_t i = 0; i < n; i++, port->delivered++) {
        if (ch->n == ch->cap) { /* sized for every token it may sample: never, but safe */
            graft_generation_cancel(gen);
            break;
        }
        ch->entries[ch->n] = (graft__channel_entry){port->choice, tokens[i]};
        if (ch->logprob_width > 0) {
            const graft_token_logprob *lp = NULL;
            size_t k = 0;
            graft_token_logprob *slot = ch->logprobs + ch->n * (size_t)ch->logprob_width;
            if (graft_generation_logprobs(gen, port->delivered, &lp, &k) == GRAFT_OK &&
                k == (size_t)ch->logprob_width)
                memcpy(slot, lp, k * sizeof *lp);
            else
                memset(slot, 0, (size_t)ch->logprob_width * sizeof *slot);
        }
        ch->n++;
    }
    graft__channel *forward = ch->forward;
    pthread_mutex_unlock(&ch->mu);
    /* Signalled after the unlock, so the reader does not wake into a held mutex. The
     * channel outlives this call: it is freed only after the generation settled, and
     * on_settled comes after every update. */
    pthread_cond_signal(&ch->cv);
    if (forward != NULL)
        graft__channel_poke(forward);
}

void graft__channel_on_settled(graft_generation *gen, void *user)
{
    (void)gen;
    graft__channel_port *port = user;
    graft__channel *ch = port->channel;
    pthread_mutex_lock(&ch->mu);
    ch->settled |= 1u << port->choice;
    pthread_cond_signal(&ch->cv);
    graft__channel *forward = ch->forward;
    pthread_mutex_unlock(&ch->mu);
    if (forward != NULL)
        graft__channel_poke(forward);
}

void graft__channel_poke(graft__channel *ch)
{
    pthread_mutex_lock(&ch->mu);
    ch->poked = true;
    pthread_cond_signal(&ch->cv);
    graft__channel *forward = ch->forward;
    pthread_mutex_unlock(&ch->mu);
    if (forward != NULL)
        graft__channel_poke(forward);
}

void graft__channel_wait_poke(graft__channel *ch, int timeout_ms)
{
    struct timespec until = graft__server_realtime_in_ms(timeout_ms);
    pthread_mutex_lock(&ch->mu);
    while (!ch->poked)
        if (pthread_cond_timedwait(&ch->cv, &ch->mu, &until) == ETIMEDOUT)
            break;
    ch->poked = false;
    pthread_mutex_unlock(&ch->mu);
}

size_t graft__channel_take(graft__channel *ch, graft__channel_entry *out,
                           graft_token_logprob *logprobs, size_t cap, int timeout_ms,
                           uint32_t *settled)
{
    struct timespec until = graft__server_realtime_in_ms(timeout_ms);
    pthread_mutex_lock(&ch->mu);
    while (ch->n == 0 && ch->settled == ch->reported && !ch->poked)
        if (pthread_cond_timedwait(&ch->cv, &ch->mu, &until) == ETIMEDOUT)
            break;
    ch->poked = false;
    size_t k = ch->n < cap ? ch->n : cap;
    size_t width = (size_t)ch->logprob_width;
    memcpy(out, ch->entries, k * sizeof *out);
    memmove(ch->entries, ch->entries + k, (ch->n - k) * sizeof *out);
    if (width > 0) {
        memcpy(logprobs, ch->logprobs, k * width * sizeof *logprobs);
        memmove(ch->logprobs, ch->logprobs + k * width, (ch->n - k) * width * sizeof *logprobs);
    }
    ch->n -= k;
    if (ch->n == 0) /* a choice is over once it settled and all its tokens were taken */
        ch->reported = ch->settled;
    *settled = ch->reported;
    pthread_mutex_unlock(&ch->mu);
    return k;
}
