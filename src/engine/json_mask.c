/*
 * json_mask.c: which tokens can continue a JSON text, for generations held to
 * GRAFT_OUTPUT_JSON_OBJECT or GRAFT_OUTPUT_JSON_SCHEMA.
 *
 * The engine builds one graft__json_mask per model vocabulary when it starts, in one block:
 * every token's bytes, the tokens grouped by their first byte, and a flag for the tokens
 * that are plain string text. A mask then costs one probe of the recognizer per first byte
 * (a group whose first byte cannot follow is refused whole), and inside a string, where most
 * of the vocabulary can follow, a flag test per plain token (in a string held to a pattern,
 * format or lengths, a walk of the plain token's characters through the string's automaton
 * alone); only the other tokens of a group are fed byte by byte. Tokens with no bytes
 * (control tokens: BOS, end of turn) can never continue a text, so they are always masked;
 * the generation ends when the object closes instead (generation.c).
 */
#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

/* One allocation: the struct, then its arrays (immutable once built). */
struct graft__json_mask {
    int32_t n_vocab;
    int32_t first[257];   /* group b is by_first[first[b] .. first[b + 1]); the tokens
                             without bytes follow, by_first[first[256] .. n_vocab) */
    size_t *offset;       /* (n_vocab + 1) token t's bytes are [offset[t], offset[t + 1]) */
    int32_t *by_first;    /* (n_vocab) the tokens grouped by first byte, in id order */
    uint8_t *plain;       /* (n_vocab) 1: complete UTF-8 characters, none of them '"', '\'
                             or a control byte, so the token can stand anywhere in a string */
    char *bytes;          /* every token's bytes, in id order */
};

/* Whether n bytes are complete UTF-8 characters with no '"', '\' or byte below 0x20: fed to
 * a recognizer in a string at a character boundary, they keep it there. */
static bool plain_text(const char *p, size_t n)
{
    graft__json_syntax s;
    graft__json_syntax_init(&s);
    for (const char *start = "{\"\":\""; *start != '\0'; start++)
        graft__json_syntax_feed(&s, (uint8_t)*start);
    for (size_t i = 0; i < n; i++)
        if (p[i] == '"' || p[i] == '\\' || !graft__json_syntax_feed(&s, (uint8_t)p[i]))
            return false;
    return graft__json_syntax_in_text(&s);
}

void graft__json_mask_free(graft__json_mask *m)
{
    graft__free(m);
}

/* The mask's block, its arrays placed after the struct, with every token's bytes. */
static graft__json_mask *alloc_with_bytes(const graft__vocab *v, int32_t n_vocab)
{
    size_t total = 0, n = (size_t)n_vocab;
    for (int32_t t = 0; t < n_vocab; t++) {
        int len = graft__token_bytes(v, t, NULL, 0);
        total += len > 0 ? (size_t)len : 0;
    }
    size_t arrays = (n + 1) * sizeof(size_t) + n * sizeof(int32_t) + n;
    graft__json_mask *m = graft__malloc(sizeof *m + arrays + total);
    if (m == NULL)
        return NULL;
    m->n_vocab = n_vocab;
    m->offset = (size_t *)(m + 1); /* the struct's size keeps the arrays aligned */
    m->by_first = (int32_t *)(m->offset + n + 1);
    m->plain = (uint8_t *)(m->by_first + n);
    m->bytes = (char *)(m->plain + n);
    size_t at = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        m->offset[t] = at;
        int len = graft__token_bytes(v, t, m->bytes + at, total - at);
        at += len > 0 ? (size_t)len : 0;
    }
    m->offset[n] = at;
    return m;
}

int graft__json_mask_create(const graft__vocab *v, int32_t n_vocab, graft__json_mask **out)
{
    graft__json_mask *m = alloc_with_bytes(v, n_vocab);
    *out = m;
    if (m == NULL)
        return GRAFT_ENOMEM;
    int32_t count[256] = {0};
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t at = m->offset[t], len = m->offset[t + 1] - at;
        m->plain[t] = len > 0 && plain_text(m->bytes + at, len);
        if (len > 0)
            count[(uint8_t)m->bytes[at]]++;
    }
    m->first[0] = 0;
    for (int b = 0; b < 256; b++)
        m->first[b + 1] = m->first[b] + count[b];
    int32_t fill[257]; /* fill[256]: the tokens without bytes */
    memcpy(fill, m->first, sizeof fill);
    for (int32_t t = 0; t < n_vocab; t++) {
        bool has_bytes = m->offset[t + 1] > m->offset[t];
        m->by_first[fill[has_bytes ? (uint8_t)m->bytes[m->offset[t]] : 256]++] = t;
    }
    return GRAFT_OK;
}

/* Feeds the bytes of token t after the first `from`. */
static bool feed_from(const graft__json_mask *m, graft__json_syntax *s, int32_t t, size_t from)
{
    for (size_t i = m->offset[t] + from; i < m->offset[t + 1]; i++)
        if (!graft__json_syntax_feed(s, (uint8_t)m->bytes[i]))
            return false;
    return true;
}

/* Whether token t's bytes after its first can follow *s (which has read the first). */
static bool rest_follows(const graft__json_mask *m, const graft__json_syntax *s, int32_t t)
{
    graft__json_syntax probe = *s;
    return feed_from(m, &probe, t, 1);
}

bool graft__json_mask_feed(const graft__json_mask *m, graft__json_syntax *s, int32_t token)
{
    return token >= 0 && token < m->n_vocab && m->offset[token + 1] > m->offset[token] &&
           feed_from(m, s, token, 0);
}

int32_t graft__json_mask_apply(const graft__json_mask *m, const graft__json_syntax *s,
                               float *logits)
{
    for (int32_t i = m->first[256]; i < m->n_vocab; i++)
        logits[m->by_first[i]] = -INFINITY;
    const bool in_text = graft__json_syntax_in_text(s);
    const bool held = graft__json_syntax_in_held_text(s);
    int32_t allowed = 0;
    for (int b = 0; b < 256; b++) {
        graft__json_syntax after_first = *s;
        bool first_ok = graft__json_syntax_feed(&after_first, (uint8_t)b);
        for (int32_t i = m->first[b]; i < m->first[b + 1]; i++) {
            int32_t t = m->by_first[i];
            const char *bytes = m->bytes + m->offset[t];
            size_t len = m->offset[t + 1] - m->offset[t];
            bool ok = first_ok &&
                      (in_text && m->plain[t] ? true
                       : held && m->plain[t]  ? graft__json_syntax_text_follows(s, bytes, len)
                                              : rest_follows(m, &after_first, t));
            if (ok)
                allowed++;
            else
                logits[t] = -INFINITY;
        }
    }
    return allowed;
}
