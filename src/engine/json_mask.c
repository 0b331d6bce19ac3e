/*
 * json_mask.c: which tokens can continue a JSON text, for generations held to
 * GRAFT_OUTPUT_JSON_OBJECT or GRAFT_OUTPUT_JSON_SCHEMA.
 *
 * The engine builds one graft__json_mask per model vocabulary when it starts: every token's
 * bytes, the tokens grouped by their first byte, and a flag for the tokens that are plain
 * string text. A mask then costs one probe of the recognizer per first byte (a group whose
 * first byte cannot follow is refused whole), and inside a string, where most of the
 * vocabulary can follow, a flag test per plain token; only the other tokens of a group are
 * fed byte by byte. Tokens with no bytes (control tokens: BOS, end of turn) can never
 * continue a text, so they are always masked; the generation ends when the object closes
 * instead (generation.c).
 */
#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

struct graft__json_mask {
    int32_t n_vocab;
    char *bytes;          /* every token's bytes, in id order */
    size_t *offset;       /* (n_vocab + 1) token t's bytes are [offset[t], offset[t + 1]) */
    int32_t *by_first;    /* the tokens with bytes, grouped by first byte, in id order */
    int32_t first[257];   /* group b is by_first[first[b] .. first[b + 1]) */
    uint8_t *plain;       /* (n_vocab) 1: complete UTF-8 characters, none of them '"', '\'
                             or a control byte, so the token can stand anywhere in a string */
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
    if (m == NULL)
        return;
    graft__free(m->bytes);
    graft__free(m->offset);
    graft__free(m->by_first);
    graft__free(m->plain);
    graft__free(m);
}

/* m->offset and m->bytes from the vocabulary. */
static int gather_bytes(graft__json_mask *m, const graft__vocab *v)
{
    size_t total = 0;
    for (int32_t t = 0; t < m->n_vocab; t++) {
        int len = graft__token_bytes(v, t, NULL, 0);
        m->offset[t] = total;
        total += len > 0 ? (size_t)len : 0;
    }
    m->offset[m->n_vocab] = total;
    m->bytes = graft__malloc(total > 0 ? total : 1);
    if (m->bytes == NULL)
        return GRAFT_ENOMEM;
    for (int32_t t = 0; t < m->n_vocab; t++) {
        size_t len = m->offset[t + 1] - m->offset[t];
        if (len > 0)
            graft__token_bytes(v, t, m->bytes + m->offset[t], len);
    }
    return GRAFT_OK;
}

int graft__json_mask_create(const graft__vocab *v, int32_t n_vocab, graft__json_mask **out)
{
    *out = NULL;
    graft__json_mask *m = graft__calloc(1, sizeof *m);
    if (m == NULL)
        return GRAFT_ENOMEM;
    m->n_vocab = n_vocab;
    m->offset = graft__malloc(((size_t)n_vocab + 1) * sizeof *m->offset);
    m->by_first = graft__malloc((size_t)n_vocab * sizeof *m->by_first);
    m->plain = graft__malloc((size_t)n_vocab);
    if (m->offset == NULL || m->by_first == NULL || m->plain == NULL ||
        gather_bytes(m, v) != GRAFT_OK) {
        graft__json_mask_free(m);
        return GRAFT_ENOMEM;
    }
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
    int32_t fill[256];
    memcpy(fill, m->first, sizeof fill);
    for (int32_t t = 0; t < n_vocab; t++)
        if (m->offset[t + 1] > m->offset[t])
            m->by_first[fill[(uint8_t)m->bytes[m->offset[t]]]++] = t;
    *out = m;
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
    for (int32_t t = 0; t < m->n_vocab; t++)
        if (m->offset[t + 1] == m->offset[t])
            logits[t] = -INFINITY;
    const bool in_text = graft__json_syntax_in_text(s);
    int32_t allowed = 0;
    for (int b = 0; b < 256; b++) {
        graft__json_syntax after_first = *s;
        bool first_ok = graft__json_syntax_feed(&after_first, (uint8_t)b);
        for (int32_t i = m->first[b]; i < m->first[b + 1]; i++) {
            int32_t t = m->by_first[i];
            bool ok = first_ok && ((in_text && m->plain[t]) || rest_follows(m, &after_first, t));
            if (ok)
                allowed++;
            else
                logits[t] = -INFINITY;
        }
    }
    return allowed;
}
