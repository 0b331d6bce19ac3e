/*
 * tokenize_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The text is cut into words by the pre-tokenizer (pretokenize.c); each word then starts as
 * one symbol per byte, the token of that byte's character in GPT-2's byte-level alphabet
 * (printable Latin-1 bytes stand for themselves, the 68 others for U+0100..U+0143). The
 * adjacent pair with the lowest merge rank is merged, again and again, until no pair in the
 * word has a merge; a priority queue keyed by (rank, position) keeps this O(n log n) per
 * word, and stale candidates are recognised by their token ids when popped. Merges never
 * cross words, so the work is linear in the text for bounded words.
 *
 * As in llama.cpp: a llama3-family vocabulary takes a word that is itself a token whole
 * (ignore_merges), and a byte without a token (possible only in a malformed vocabulary) is
 * dropped.
 */
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

static bool stands_for_itself(uint32_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The bytes that do not stand for themselves are 0x00..0x20, 0x7F..0xA0 and 0xAD, in
 * that order, as U+0100 onwards. */
uint32_t graft__bpe_byte_to_cp(uint8_t byte)
{
    if (stands_for_itself(byte))
        return byte;
    if (byte <= 0x20)
        return 0x100 + byte;
    if (byte <= 0xA0)
        return 0x121 + (byte - 0x7Fu);
    return 0x143;
}

int graft__bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return stands_for_itself(cp) ? (int)cp : -1;
    if (cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp <= 0x142)
        return (int)(cp - 0x121 + 0x7F);
    return cp == 0x143 ? 0xAD : -1;
}

typedef struct bpe_sym {
    int32_t id; /* token, or -1 for a byte without one */
    int32_t prev;
    int32_t next; /* -1 at the ends */
    bool gone;    /* merged into its left neighbour */
} bpe_sym;

/* Buffers reused from word to word. */
typedef struct bpe_work {
    const graft__vocab *v;
    bpe_sym *syms;
    size_t cap;
    char *encoded; /* the word in GPT-2 characters (ignore_merges only) */
    graft__merge_heap heap;
} bpe_work;

static int reserve(bpe_work *w, size_t n)
{
    if (n <= w->cap)
        return GRAFT_OK;
    if (n > INT32_MAX)
        return GRAFT_ENOMEM;
    bpe_sym *syms = graft__realloc_array(w->syms, n, sizeof *syms);
    if (syms == NULL)
        return GRAFT_ENOMEM;
    w->syms = syms;
    char *encoded = graft__realloc(w->encoded, 2 * n);
    if (encoded == NULL)
        return GRAFT_ENOMEM;
    w->encoded = encoded;
    w->cap = n;
    return GRAFT_OK;
}

/* Queues the merge of symbol `left` with its right neighbour, if the pair merges. */
static int try_pair(bpe_work *w, int32_t left)
{
    if (left < 0 || w->syms[left].next < 0)
        return GRAFT_OK;
    int32_t right = w->syms[left].next, merged;
    int32_t rank = graft__vocab_merge(w->v, w->syms[left].id, w->syms[right].id, &merged);
    if (rank < 0)
        return GRAFT_OK;
    graft__merge_cand c = {(uint64_t)rank << 32 | (uint32_t)left, w->syms[left].id,
                           w->syms[right].id};
    return graft__merge_heap_push(&w->heap, c);
}

/* The left symbol of a popped candidate that still describes two adjacent, unchanged
 * symbols (a symbol that has not merged still has the same right neighbour), or -1. */
static int32_t still_valid(const bpe_work *w, graft__merge_cand c)
{
    int32_t left = (int32_t)(uint32_t)c.key;
    const bpe_sym *l = &w->syms[left];
    bool ok = !l->gone && l->next >= 0 && l->id == c.a && w->syms[l->next].id == c.b;
    return ok ? left : -1;
}

static int merge_word(bpe_work *w, size_t n)
{
    w->heap.n = 0;
    int rc = graft__merge_heap_reserve(&w->heap, n);
    for (size_t i = 0; i + 1 < n && rc == GRAFT_OK; i++)
        rc = try_pair(w, (int32_t)i);
    while (rc == GRAFT_OK && w->heap.n > 0) {
        int32_t left = still_valid(w, graft__merge_heap_pop(&w->heap)), merged;
        if (left < 0)
            continue;
        bpe_sym *l = &w->syms[left], *r = &w->syms[l->next];
        graft__vocab_merge(w->v, l->id, r->id, &merged);
        l->id = merged;
        r->gone = true;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = left;
        rc = try_pair(w, l->prev);
        if (rc == GRAFT_OK)
            rc = try_pair(w, left);
    }
    return rc;
}

/* The id of the whole word when it is a token (ignore_merges), or -1. */
static int32_t whole_word(bpe_work *w, const uint8_t *word, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += graft__utf8_encode(graft__bpe_byte_to_cp(word[i]), w->encoded + len);
    return graft__vocab_find(w->v, w->encoded, len);
}

static int tokenize_word(bpe_work *w, const uint8_t *word, size_t n, graft__tokbuf *out)
{
    int rc = reserve(w, n);
    if (rc != GRAFT_OK)
        return rc;
    if (graft__vocab_ignore_merges(w->v)) {
        int32_t id = whole_word(w, word, n);
        if (id >= 0)
            return graft__tokbuf_push(out, id);
    }
    for (size_t i = 0; i < n; i++)
        w->syms[i] = (bpe_sym){graft__vocab_byte_token(w->v, word[i]), (int32_t)i - 1,
                               i + 1 < n ? (int32_t)i + 1 : -1, false};
    if ((rc = merge_word(w, n)) != GRAFT_OK)
        return rc;
    for (int32_t i = 0; i >= 0 && rc == GRAFT_OK; i = w->syms[i].next)
        if (w->syms[i].id >= 0)
            rc = graft__tokbuf_push(out, w->syms[i].id);
    return rc;
}

int graft__bpe_tokenize(const graft__vocab *v, const char *text, size_t len, graft__tokbuf *out)
{
    graft__span *words;
    size_t n_words;
    int rc = graft__pretok_split(graft__vocab_pretok(v), text, len, &words, &n_words);
    if (rc != GRAFT_OK)
        return rc;
    bpe_work w = {.v = v};
    for (size_t i = 0; i < n_words && rc == GRAFT_OK; i++)
        rc = tokenize_word(&w, (const uint8_t *)text + words[i].off, words[i].len, out);
    graft__free(w.heap.items);
    graft__free(w.encoded);
    graft__free(w.syms);
    graft__free(words);
    return rc;
}
