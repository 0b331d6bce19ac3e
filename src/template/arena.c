/*
 * arena.c: the template layer's memory and errors (see template.h).
 *
 * An arena is a list of chunks from graft__malloc, bumped through and freed whole; a render
 * arena has a byte limit, so a template that builds huge values stops with an error instead
 * of exhausting memory. graft__tpl_fail formats the message into the context and jumps
 * back to the entry point, which frees the arenas: no error path needs cleanup code.
 * Growing buffers (output, string building) live in the arena too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/template.h"

#define CHUNK_BYTES ((size_t)64 << 10)

struct graft__tpl_chunk {
    graft__tpl_chunk *next;
    size_t used, size;
    _Alignas(16) char data[];
};

_Noreturn void graft__tpl_fail(graft__tpl_ctx *c, int status, uint32_t line, uint32_t col,
                               const char *fmt, ...)
{
    int k = 0;
    if (line > 0)
        k = snprintf(c->message, sizeof c->message, "line %u, column %u: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message + k, sizeof c->message - (size_t)k, fmt, ap);
    va_end(ap);
    c->status = status;
    longjmp(c->jump, 1);
}

void *graft__tpl_alloc(graft__tpl_ctx *c, size_t size)
{
    graft__tpl_arena *a = c->arena;
    size = (size + 15) & ~(size_t)15;
    graft__tpl_chunk *h = a->head;
    if (h == NULL || h->size - h->used < size) {
        size_t want = size > CHUNK_BYTES / 4 ? size : CHUNK_BYTES;
        if (a->limit_bytes != 0 && (want > a->limit_bytes || a->used_bytes > a->limit_bytes - want))
            graft__tpl_fail(c, GRAFT_ECAPACITY, 0, 0,
                            "template: rendering needs more than the memory limit (%zu bytes)",
                            a->limit_bytes);
        h = graft__malloc(sizeof *h + want);
        if (h == NULL)
            graft__tpl_fail(c, GRAFT_ENOMEM, 0, 0, "template: out of memory");
        h->used = 0;
        h->size = want;
        a->used_bytes += want;
        if (a->head != NULL && size == want) {
            /* A big block of its own: keep the current chunk in front for small ones. */
            h->next = a->head->next;
            a->head->next = h;
        } else {
            h->next = a->head;
            a->head = h;
        }
    }
    void *p = h->data + h->used;
    h->used += size;
    memset(p, 0, size);
    return p;
}

void graft__tpl_arena_free(graft__tpl_arena *a)
{
    graft__tpl_chunk *h = a->head;
    while (h != NULL) {
        graft__tpl_chunk *next = h->next;
        graft__free(h);
        h = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

char *graft__tpl_strdup(graft__tpl_ctx *c, const char *s, size_t n)
{
    char *p = graft__tpl_alloc(c, n + 1);
    memcpy(p, s, n);
    return p;
}

static void buf_reserve(graft__tpl_ctx *c, graft__tpl_buf *b, size_t more)
{
    if (b->cap - b->n >= more)
        return;
    size_t need = b->n + more;
    if (need < b->n || (c->max_output != 0 && need > c->max_output))
        graft__tpl_fail(c, GRAFT_ECAPACITY, 0, 0,
                        "template: output longer than the limit (%zu bytes)", c->max_output);
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    char *p = graft__tpl_alloc(c, cap);
    if (b->n)
        memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
}

void graft__tpl_buf_add(graft__tpl_ctx *c, graft__tpl_buf *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    buf_reserve(c, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void graft__tpl_buf_addc(graft__tpl_ctx *c, graft__tpl_buf *b, char ch)
{
    buf_reserve(c, b, 1);
    b->p[b->n++] = ch;
}

void graft__tpl_buf_addf(graft__tpl_ctx *c, graft__tpl_buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0)
        graft__tpl_buf_add(c, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}
