/*
 * run_stream.c: sampled tokens on their way from the engine thread to stdout, for
 * `graft run` (see run.h).
 *
 * The generation's on_update runs on the engine thread and must not block, so it only
 * appends the tokens to the stream under its mutex and signals; the printing thread takes
 * them one at a time, detokenizes them and writes the text to stdout, flushed per token so
 * a pipe sees text as it comes. One stream serves every prompt of a run, reset in between.
 */
#include <stdio.h>
#include <stdlib.h>

#include "run.h"

int graft__run_stream_reset(graft__run_stream *st, size_t cap)
{
    if (!st->ready) {
        if (pthread_mutex_init(&st->mu, NULL) != 0)
            return GRAFT_ENOMEM;
        if (pthread_cond_init(&st->cv, NULL) != 0) {
            pthread_mutex_destroy(&st->mu);
            return GRAFT_ENOMEM;
        }
        st->ready = true;
    }
    if (cap > st->cap) {
        int32_t *grown = realloc(st->tokens, cap * sizeof *grown);
        if (grown == NULL)
            return GRAFT_ENOMEM;
        st->tokens = grown;
        st->cap = cap;
    }
    st->n = 0;
    st->settled = false;
    return GRAFT_OK;
}

void graft__run_stream_free(graft__run_stream *st)
{
    free(st->tokens);
    if (st->ready) {
        pthread_cond_destroy(&st->cv);
        pthread_mutex_destroy(&st->mu);
    }
}

void graft__run_stream_update(graft_generation *gen, const int32_t *tokens, size_t n,
                              void *user)
{
    (void)gen;
    graft__run_stream *st = user;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < n && st->n < st->cap; i++)
        st->tokens[st->n++] = tokens[i];
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

void graft__run_stream_settled(graft_generation *gen, void *user)
{
    (void)gen;
    graft__run_stream *st = user;
    pthread_mutex_lock(&st->mu);
    st->settled = true;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

void graft__run_put_text(const char *text, size_t len)
{
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

void graft__run_stream_print(graft__run_stream *st, graft_detok *detok, size_t limit)
{
    size_t printed = 0;
    const char *text;
    size_t len;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (printed == st->n && !st->settled)
            pthread_cond_wait(&st->cv, &st->mu);
        if (printed == st->n)
            break;
        int32_t token = st->tokens[printed++];
        pthread_mutex_unlock(&st->mu);
        if (printed <= limit && graft_detok_push(detok, token, &text, &len) == GRAFT_OK)
            graft__run_put_text(text, len);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    if (graft_detok_flush(detok, &text, &len) == GRAFT_OK)
        graft__run_put_text(text, len);
    graft__run_put_text("\n", 1);
}
