/*
 * tokenize_spm.c: SentencePiece-style BPE over token scores (tokenizer.ggml.model =
 * "llama"), as llama.cpp's SPM tokenizer does it.
 *
 * Spaces become "▁" (U+2581), and a space is put in front when the caller asks (at the
 * start of the text and after each special token, when add_space_prefix). The text starts
 * as one symbol per UTF-8 character (length from the lead byte, as llama.cpp reads it, so
 * invalid bytes stay symbols of their own). Then the adjacent pair whose concatenation is
 * the highest-scoring token is merged, leftmost first among equal scores, until no
 * adjacent pair forms a token; a priority queue makes this O(n log n) over the text, and a
 * candidate is stale when either symbol has changed length since it was queued (a symbol
 * that has not grown still has the same right neighbour).
 *
 * A final symbol that is not a token (a character the vocabulary lacks) falls back to its
 * bytes as <0xXX> tokens; a byte without such a token gives the unknown token (llama.cpp
 * would abort), or nothing when there is none.
 */
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define ESCAPED_SPACE "\xe2\x96\x81" /* U+2581 "▁" */

typedef struct spm_sym {
    uint32_t off; /* into the escaped text */
    uint32_t len; /* 0 once merged into the left neighbour */
    int32_t prev;
    int32_t next;
} spm_sym;

typedef struct spm_work {
    const graft__vocab *v;
    char *text; /* escaped */
    size_t len;
    spm_sym *syms;
    graft__merge_heap heap;
} spm_work;

/* Orders candidates by decreasing score (equal scores, -0 included, compare equal). */
static uint32_t prio_of(float score)
{
    if (score == 0.0f)
        score = 0.0f;
    uint32_t u;
    memcpy(&u, &score, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* increasing with the score */
    return ~u;
}

/* The text with spaces escaped, after a space when space_prefix. */
static int escape(spm_work *w, const char *text, size_t len, bool space_prefix)
{
    size_t cap;
    if (!graft__mul_size(len + space_prefix, 3, &cap) || cap > UINT32_MAX)
        return GRAFT_ENOMEM;
    w->text = graft__malloc(cap ? cap : 1);
    if (w->text == NULL)
        return GRAFT_ENOMEM;
    size_t n = 0;
    if (space_prefix) {
        memcpy(w->text, ESCAPED_SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->text + n, ESCAPED_SPACE, 3);
            n += 3;
        } else {
            w->text[n++] = text[i];
        }
    }
    w->len = n;
    return GRAFT_OK;
}

/* One symbol per character, its length read from the lead byte as llama.cpp does. */
static int split_chars(spm_work *w, size_t *n_syms)
{
    static const uint8_t len_of_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    w->syms = graft__malloc((w->len ? w->len : 1) * sizeof *w->syms);
    if (w->syms == NULL)
        return GRAFT_ENOMEM;
    size_t n = 0;
    for (size_t off = 0; off < w->len; n++) {
        size_t len = len_of_nibble[(uint8_t)w->text[off] >> 4];
        if (len > w->len - off)
            len = w->len - off;
        w->syms[n] = (spm_sym){(uint32_t)off, (uint32_t)len, (int32_t)n - 1, -1};
        if (n > 0)
            w->syms[n - 1].next = (int32_t)n;
        off += len;
    }
    *n_syms = n;
    return GRAFT_OK;
}

/* Queues merging `left` and `right` when their concatenation is a token. */
static int try_pair(spm_work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return GRAFT_OK;
    uint32_t size = w->syms[left].len + w->syms[right].len;
    int32_t id = graft__vocab_find(w->v, w->text + w->syms[left].off, size);
    if (id < 0)
        return GRAFT_OK;
    uint64_t prio = prio_of(graft__vocab_score(w->v, id));
    graft__merge_cand c = {prio << 32 | (uint32_t)left, (int32_t)size, 0};
    return graft__merge_heap_push(&w->heap, c);
}

static int merge_all(spm_work *w, size_t n_syms)
{
    int rc = graft__merge_heap_reserve(&w->heap, n_syms);
    for (size_t i = 1; i < n_syms && rc == GRAFT_OK; i++)
        rc = try_pair(w, (int32_t)i - 1, (int32_t)i);
    while (rc == GRAFT_OK && w->heap.n > 0) {
        graft__merge_cand c = graft__merge_heap_pop(&w->heap);
        int32_t left = (int32_t)(uint32_t)c.key;
        spm_sym *l = &w->syms[left];
        if (l->len == 0 || l->next < 0 || l->len + w->syms[l->next].len != (uint32_t)c.a)
            continue; /* stale: a symbol changed since (the right one is still l->next) */
        spm_sym *r = &w->syms[l->next];
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = left;
        rc = try_pair(w, l->prev, left);
        if (rc == GRAFT_OK)
            rc = try_pair(w, left, l->next);
    }
    return rc;
}

/* Emits a final symbol: its token, or its bytes. */
static int emit(const spm_work *w, const spm_sym *s, graft__tokbuf *out)
{
    const char *text = w->text + s->off;
    int32_t id = graft__vocab_find(w->v, text, s->len);
    if (id >= 0)
        return graft__tokbuf_push(out, id);
    for (uint32_t i = 0; i < s->len; i++) {
        id = graft__vocab_byte_token(w->v, (uint8_t)text[i]);
        if (id < 0)
            id = graft__vocab_unk(w->v);
        int rc = id >= 0 ? graft__tokbuf_push(out, id) : GRAFT_OK;
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

int graft__spm_tokenize(const graft__vocab *v, const char *text, size_t len, bool space_prefix,
                        graft__tokbuf *out)
{
    spm_work w = {.v = v};
    size_t n_syms = 0;
    int rc = escape(&w, text, len, space_prefix);
    if (rc == GRAFT_OK)
        rc = split_chars(&w, &n_syms);
    if (rc == GRAFT_OK)
        rc = merge_all(&w, n_syms);
    for (int32_t i = n_syms ? 0 : -1; i >= 0 && rc == GRAFT_OK; i = w.syms[i].next)
        rc = emit(&w, &w.syms[i], out);
    graft__free(w.heap.items);
    graft__free(w.syms);
    graft__free(w.text);
    return rc;
}
