/*
 * detokenize.c: a whole token sequence back to text, as POST /detokenize and an echoed
 * prompt give it, and one token's own bytes, as log-probabilities and POST /tokenize's
 * pieces give them (server.h).
 *
 * The streaming detokenizer an answer uses, and then the inverse of SentencePiece's leading
 * space: its tokenizer puts a space before the text, so text that starts with one loses it.
 */
#include <stdlib.h>
#include <string.h>

#include "server/completion.h"

int graft__detokenize(const graft_model *model, const int32_t *tokens, size_t n, char **text,
                      size_t *len, size_t *starts)
{
    *text = NULL;
    *len = 0;
    graft_detok *d = NULL;
    if (graft_detok_create(model, &d) != GRAFT_OK)
        return GRAFT_ENOMEM;
    size_t cap = 0;
    const char *piece;
    size_t k;
    bool ok = true;
    for (size_t i = 0; ok && i <= n; i++) {
        if (starts != NULL && i < n)
            starts[i] = *len;
        ok = (i < n ? graft_detok_push(d, tokens[i], &piece, &k)
                    : graft_detok_flush(d, &piece, &k)) == GRAFT_OK &&
             graft__append(text, len, &cap, piece, k);
    }
    graft_detok_free(d);
    if (!ok) {
        free(*text);
        *text = NULL;
        *len = 0;
        return GRAFT_ENOMEM;
    }
    graft_model_info info;
    graft_model_get_info(model, &info);
    if (strcmp(info.tokenizer, "spm") == 0 && *len > 0 && (*text)[0] == ' ') {
        memmove(*text, *text + 1, *len);
        --*len;
        for (size_t i = 0; starts != NULL && i < n; i++)
            starts[i] -= starts[i] > 0;
    }
    return GRAFT_OK;
}

/* Token's bytes (graft_token_bytes) in a new buffer, their count in *n; NULL when out of
 * memory. */
static char *token_bytes(const graft_model *model, int32_t token, size_t *n)
{
    int len = graft_token_bytes(model, token, NULL, 0);
    *n = len > 0 ? (size_t)len : 0;
    char *bytes = malloc(*n > 0 ? *n : 1);
    if (bytes != NULL && *n > 0)
        graft_token_bytes(model, token, bytes, *n);
    return bytes;
}

static json_t *bytes_array(const char *bytes, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; bytes != NULL && i < n; i++)
        json_array_append_new(list, json_integer((unsigned char)bytes[i]));
    return list;
}

json_t *graft__token_bytes_json(const graft_model *model, int32_t token)
{
    size_t n;
    char *bytes = token_bytes(model, token, &n);
    json_t *list = bytes_array(bytes, n);
    free(bytes);
    return list;
}

json_t *graft__token_piece_json(const graft_model *model, int32_t token)
{
    size_t n;
    char *bytes = token_bytes(model, token, &n);
    json_t *piece = bytes != NULL ? json_stringn(bytes, n) : NULL; /* NULL: not UTF-8 */
    if (piece == NULL)
        piece = bytes_array(bytes, n);
    free(bytes);
    return piece;
}
