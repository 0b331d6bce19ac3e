/*
 * token_table.c: every token's bytes in one immutable block, indexed by id
 * (graft__token_table, tokenizer.h).
 *
 * The masks that hold a generation to a format (json_mask.c, grammar_mask.c) walk token
 * bytes for every token at every step; graft__token_bytes decodes a token each call. The
 * engine builds one table when it starts and every mask reads the same bytes from it.
 */
#include "tokenizer/tokenizer.h"
#include "util/util.h"

void graft__token_table_free(graft__token_table *t)
{
    graft__free(t);
}

int graft__token_table_create(const graft__vocab *v, int32_t n_vocab, graft__token_table **out)
{
    size_t total = 0, n = (size_t)n_vocab;
    for (int32_t t = 0; t < n_vocab; t++) {
        int len = graft__token_bytes(v, t, NULL, 0);
        total += len > 0 ? (size_t)len : 0;
    }
    graft__token_table *tt = graft__malloc(sizeof *tt + (n + 1) * sizeof(size_t) + total);
    *out = tt;
    if (tt == NULL)
        return GRAFT_ENOMEM;
    size_t *offset = (size_t *)(tt + 1); /* the struct's size keeps the offsets aligned */
    char *bytes = (char *)(offset + n + 1);
    size_t at = 0;
    uint32_t max_len = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        offset[t] = at;
        int len = graft__token_bytes(v, t, bytes + at, total - at);
        if (len > 0) {
            at += (size_t)len;
            max_len = (uint32_t)len > max_len ? (uint32_t)len : max_len;
        }
    }
    offset[n] = at;
    *tt = (graft__token_table){n_vocab, max_len, offset, bytes};
    return GRAFT_OK;
}
