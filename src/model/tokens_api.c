/*
 * tokens_api.c: the public token functions of graft.h (tokenize, token text and bytes, end
 * of generation) and the streaming detokenizer.
 *
 * The detokenizer concatenates the pieces graft__token_bytes gives, as llama.cpp's
 * streaming examples print llama_token_to_piece(token, lstrip = 0, special = false) token
 * by token, and makes the stream valid UTF-8:
 *   - a character split across tokens (an emoji as four <0xXX> byte tokens) is held back
 *     until its last byte arrives;
 *   - each maximal ill-formed subsequence becomes one U+FFFD (the Unicode "substitution of
 *     maximal subparts" practice), as does an incomplete character still held at flush.
 * Leading spaces are kept. llama.cpp's whole-sequence llama_detokenize drops the space
 * of the first spm piece only when the sequence does not start with BOS; a stream decoded
 * from BOS, like the greedy output of stories260K, keeps it (" Once upon a time"), and so
 * does this stream always: decoding the output of an spm tokenizer that adds a space prefix
 * gives the text back with that one space in front. Control tokens (BOS, EOS) give nothing.
 */
#include <string.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */
#define HELD_ROOM 4              /* bytes kept free before a piece for held-back ones */

int graft_tokenize(const graft_model *model, const char *text, size_t len, int add_special,
                   int parse_special, int32_t **tokens, size_t *n_tokens)
{
    if (model == NULL || tokens == NULL || n_tokens == NULL)
        return GRAFT_EINVAL;
    return graft__tokenize(model->vocab, text, len, add_special != 0, parse_special != 0, tokens,
                           n_tokens);
}

const char *graft_token_text(const graft_model *model, int32_t token)
{
    return model ? graft__vocab_text(model->vocab, token) : NULL;
}

int graft_token_bytes(const graft_model *model, int32_t token, char *buf, size_t cap)
{
    return model ? graft__token_bytes(model->vocab, token, buf, cap) : -1;
}

int graft_token_is_eog(const graft_model *model, int32_t token)
{
    return model != NULL && graft__vocab_is_eog(model->vocab, token);
}

/* ---- streaming detokenizer ------------------------------------------------------- */

struct graft_detok {
    const graft__vocab *vocab;
    uint8_t held[4]; /* the valid start of a character not yet complete */
    size_t n_held;
    char *piece; /* held-back bytes, then the current token's bytes */
    size_t piece_cap;
    char *text; /* what the last call handed out */
    size_t text_cap;
};

int graft_detok_create(const graft_model *model, graft_detok **out)
{
    if (out == NULL)
        return GRAFT_EINVAL;
    *out = NULL;
    if (model == NULL)
        return GRAFT_EINVAL;
    graft_detok *d = graft__calloc(1, sizeof *d);
    if (d == NULL)
        return GRAFT_ENOMEM;
    d->vocab = model->vocab;
    *out = d;
    return GRAFT_OK;
}

void graft_detok_free(graft_detok *d)
{
    if (d == NULL)
        return;
    graft__free(d->piece);
    graft__free(d->text);
    graft__free(d);
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return GRAFT_OK;
    char *p = graft__realloc(*buf, need);
    if (p == NULL)
        return GRAFT_ENOMEM;
    *buf = p;
    *cap = need;
    return GRAFT_OK;
}

/* The bytes of `token` into d->piece after HELD_ROOM bytes; their count in *n. */
static int fetch_piece(graft_detok *d, int32_t token, size_t *n)
{
    if (grow(&d->piece, &d->piece_cap, HELD_ROOM + 64) != GRAFT_OK)
        return GRAFT_ENOMEM;
    size_t room = d->piece_cap - HELD_ROOM;
    int len = graft__token_bytes(d->vocab, token, d->piece + HELD_ROOM, room);
    if (len < 0)
        return GRAFT_EINVAL;
    if ((size_t)len > room) {
        if (grow(&d->piece, &d->piece_cap, HELD_ROOM + (size_t)len) != GRAFT_OK)
            return GRAFT_ENOMEM;
        graft__token_bytes(d->vocab, token, d->piece + HELD_ROOM, (size_t)len);
    }
    *n = (size_t)len;
    return GRAFT_OK;
}

/* How many bytes a character starting with `lead` has (0: never a lead byte), and the
 * range its second byte must fall in. */
static size_t char_len(uint8_t lead, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF) {
        *lo = lead == 0xE0 ? 0xA0 : 0x80; /* no overlong forms */
        *hi = lead == 0xED ? 0x9F : 0xBF; /* no surrogates */
        return 3;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
        *lo = lead == 0xF0 ? 0x90 : 0x80;
        *hi = lead == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
        return 4;
    }
    return 0;
}

/* How many of the n bytes at s start a valid character (all of it when complete); *want
 * gets the character's length (0 for a byte that cannot start one). */
static size_t valid_start(const uint8_t *s, size_t n, size_t *want)
{
    uint8_t lo, hi;
    if (s[0] < 0x80) {
        *want = 1;
        return 1;
    }
    *want = char_len(s[0], &lo, &hi);
    if (*want == 0)
        return 0;
    size_t ok = 1;
    for (; ok < *want && ok < n; ok++, lo = 0x80, hi = 0xBF)
        if (s[ok] < lo || s[ok] > hi)
            break;
    return ok;
}

/* Turns the held bytes and the n bytes of d->piece into valid UTF-8 in d->text, holding
 * back an incomplete character at the end. */
static int convert(graft_detok *d, size_t n, size_t *len)
{
    uint8_t *in = (uint8_t *)d->piece + HELD_ROOM - d->n_held;
    size_t total = d->n_held + n, out = 0;
    if (grow(&d->text, &d->text_cap, 3 * total + 1) != GRAFT_OK)
        return GRAFT_ENOMEM;
    memcpy(in, d->held, d->n_held);
    d->n_held = 0;
    for (size_t i = 0; i < total;) {
        size_t want, ok = valid_start(in + i, total - i, &want);
        if (ok == want && want > 0) {
            memcpy(d->text + out, in + i, want);
            out += want;
            i += want;
        } else if (ok > 0 && i + ok == total) {
            memcpy(d->held, in + i, ok);
            d->n_held = ok;
            break;
        } else {
            memcpy(d->text + out, REPLACEMENT, 3);
            out += 3;
            i += ok ? ok : 1;
        }
    }
    *len = out;
    return GRAFT_OK;
}

int graft_detok_push(graft_detok *d, int32_t token, const char **text, size_t *len)
{
    if (d == NULL || text == NULL || len == NULL)
        return GRAFT_EINVAL;
    *text = "";
    *len = 0;
    size_t n;
    int rc = fetch_piece(d, token, &n);
    if (rc == GRAFT_OK)
        rc = convert(d, n, len);
    if (rc == GRAFT_OK)
        *text = d->text;
    else
        *len = 0;
    return rc;
}

int graft_detok_flush(graft_detok *d, const char **text, size_t *len)
{
    if (d == NULL || text == NULL || len == NULL)
        return GRAFT_EINVAL;
    *text = "";
    *len = 0;
    if (d->n_held == 0)
        return GRAFT_OK;
    if (grow(&d->text, &d->text_cap, 3) != GRAFT_OK)
        return GRAFT_ENOMEM;
    memcpy(d->text, REPLACEMENT, 3);
    d->n_held = 0;
    *text = d->text;
    *len = 3;
    return GRAFT_OK;
}
