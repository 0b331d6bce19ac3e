/*
 * tokenize.c: text to tokens and tokens to bytes, for every tokenizer family.
 *
 * graft__tokenize follows llama.cpp's llama_tokenize:
 *   1. Special tokens are cut out of the text first ("partitioning"): control, unknown and
 *      user-defined tokens when parse_special, user-defined ones always. Longer texts go
 *      first; each token claims its occurrences from left to right in whatever text no
 *      longer token claimed; tokens marked lstrip/rstrip also swallow the ASCII spaces
 *      beside them. For each special-token length, longest first, one pass over the
 *      still-free text looks that length up where a byte can start a special token; the
 *      hits are then claimed token by token (by id), each from left to right.
 *   2. Each stretch of plain text between them goes to the family's tokenizer (spm also
 *      puts a space in front at the start and after each special token, when the vocab's
 *      add_space_prefix says so).
 *   3. With add_special: BOS first and EOS last as the vocab's add_bos / add_eos say (bert
 *      always: CLS first, SEP last).
 *
 * graft__token_bytes gives what a token stands for (llama.cpp's token_to_piece without
 * special tokens): spm/bert text with "▁" as a space, <0xXX> byte tokens as their byte,
 * bpe text mapped back through GPT-2's byte alphabet (a character outside it stands for its
 * own UTF-8), user-defined tokens as stored, and nothing for control and unknown tokens.
 *
 * The file also holds the small pieces the family tokenizers share: the growing id array,
 * the merge priority queue and UTF-8 decoding.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

/* ---- shared pieces --------------------------------------------------------------- */

int graft__tokbuf_push(graft__tokbuf *b, int32_t id)
{
    int32_t *ids = graft__grow_array(b->ids, b->n, &b->cap, sizeof *ids, 64);
    if (ids == NULL)
        return GRAFT_ENOMEM;
    b->ids = ids;
    b->ids[b->n++] = id;
    return GRAFT_OK;
}

int graft__merge_heap_reserve(graft__merge_heap *h, size_t n)
{
    if (n <= h->cap)
        return GRAFT_OK;
    graft__merge_cand *items = graft__realloc_array(h->items, n, sizeof *items);
    if (items == NULL)
        return GRAFT_ENOMEM;
    h->items = items;
    h->cap = n;
    return GRAFT_OK;
}

int graft__merge_heap_push(graft__merge_heap *h, graft__merge_cand c)
{
    if (h->n == h->cap && graft__merge_heap_reserve(h, h->cap ? h->cap * 2 : 64) != GRAFT_OK)
        return GRAFT_ENOMEM;
    size_t i = h->n++;
    for (; i > 0 && c.key < h->items[(i - 1) / 2].key; i = (i - 1) / 2)
        h->items[i] = h->items[(i - 1) / 2];
    h->items[i] = c;
    return GRAFT_OK;
}

graft__merge_cand graft__merge_heap_pop(graft__merge_heap *h)
{
    graft__merge_cand top = h->items[0], last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->items[child + 1].key < h->items[child].key)
            child++;
        if (last.key <= h->items[child].key)
            break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->n > 0)
        h->items[i] = last;
    return top;
}

static bool is_cont(const uint8_t *s, size_t i)
{
    return (s[i] & 0xC0) == 0x80;
}

size_t graft__utf8_decode(const char *str, size_t len, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)str;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t n = s[0] >= 0xF8 ? 0 : s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (n == 0 || n > len)
        return 0;
    uint32_t c = s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if (!is_cont(s, i))
            return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_of_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

size_t graft__utf8_encode(uint32_t cp, char *buf)
{
    uint8_t *b = (uint8_t *)buf;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- special-token partitioning -------------------------------------------------- */

typedef struct special_hit {
    size_t pos;
    uint32_t len;
    int32_t id;
} special_hit;

typedef struct hit_list {
    special_hit *items;
    size_t n;
    size_t cap;
} hit_list;

static int hit_push(hit_list *l, special_hit h)
{
    special_hit *items = graft__grow_array(l->items, l->n, &l->cap, sizeof *items, 16);
    if (items == NULL)
        return GRAFT_ENOMEM;
    l->items = items;
    l->items[l->n++] = h;
    return GRAFT_OK;
}

enum { FREE = 0, STRIPPED = 1, CLAIMED = 2 };

/* The free occurrences of special tokens whose text is tok_len bytes, in text order. */
static int find_hits(const graft__vocab *v, const char *text, size_t len, bool parse_special,
                     uint32_t tok_len, const uint8_t *state, hit_list *hits)
{
    const graft__special_set *set = graft__vocab_specials(v, parse_special);
    hits->n = 0;
    for (size_t p = 0; p + tok_len <= len; p++) {
        uint8_t b = (uint8_t)text[p];
        if (state[p] != FREE || !(set->first[b / 8] & (1u << (b % 8))))
            continue;
        int32_t id = graft__vocab_find(v, text + p, tok_len);
        if (graft__vocab_is_special(v, id, parse_special) &&
            hit_push(hits, (special_hit){p, tok_len, id}) != GRAFT_OK)
            return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

/* One token's occurrences together, left to right (tokens of one length by id). */
static int cmp_id_pos(const void *a, const void *b)
{
    const special_hit *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int cmp_pos(const void *a, const void *b)
{
    const special_hit *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static bool is_free_space(const char *text, const uint8_t *state, size_t i)
{
    return state[i] == FREE && isspace((uint8_t)text[i]);
}

/* Claims a hit if its bytes are all free, with the spaces it strips. */
static bool claim(const graft__vocab *v, const char *text, size_t len, uint8_t *state,
                  special_hit h)
{
    for (size_t i = h.pos; i < h.pos + h.len; i++)
        if (state[i] != FREE)
            return false;
    memset(state + h.pos, CLAIMED, h.len);
    if (graft__vocab_lstrip(v, h.id))
        for (size_t i = h.pos; i > 0 && is_free_space(text, state, i - 1); i--)
            state[i - 1] = STRIPPED;
    if (graft__vocab_rstrip(v, h.id))
        for (size_t i = h.pos + h.len; i < len && is_free_space(text, state, i); i++)
            state[i] = STRIPPED;
    return true;
}

/* Claims the special tokens of the text, longest texts first; `claimed` gets them in text
 * order and `state` marks which bytes are left as plain text. */
static int partition(const graft__vocab *v, const char *text, size_t len, bool parse_special,
                     uint8_t *state, hit_list *claimed)
{
    const graft__special_set *set = graft__vocab_specials(v, parse_special);
    hit_list found = {0};
    int rc = GRAFT_OK;
    for (size_t k = set->n_lens; k-- > 0 && rc == GRAFT_OK;) {
        rc = find_hits(v, text, len, parse_special, set->lens[k], state, &found);
        if (found.n > 1)
            qsort(found.items, found.n, sizeof *found.items, cmp_id_pos);
        for (size_t i = 0; i < found.n && rc == GRAFT_OK; i++)
            if (claim(v, text, len, state, found.items[i]))
                rc = hit_push(claimed, found.items[i]);
    }
    graft__free(found.items);
    if (claimed->n > 1)
        qsort(claimed->items, claimed->n, sizeof *claimed->items, cmp_pos);
    return rc;
}

/* ---- tokenizing ------------------------------------------------------------------ */

typedef struct tok_run {
    const graft__vocab *v;
    graft__tokbuf *out;
    bool after_special; /* spm: the next plain text follows the start or a special token */
} tok_run;

static int plain_text(tok_run *r, const char *text, size_t len)
{
    bool after_special = r->after_special;
    r->after_special = false;
    switch (graft__vocab_kind_of(r->v)) {
    case GRAFT_VOCAB_SPM:
        return graft__spm_tokenize(r->v, text, len,
                                   after_special && graft__vocab_add_space_prefix(r->v), r->out);
    case GRAFT_VOCAB_BPE:
        return graft__bpe_tokenize(r->v, text, len, r->out);
    case GRAFT_VOCAB_WPM:
        return graft__wpm_tokenize(r->v, text, len, r->out);
    }
    return GRAFT_EINVAL;
}

static int special_token(tok_run *r, int32_t id)
{
    r->after_special = true;
    return graft__tokbuf_push(r->out, id);
}

/* Tokenizes the text given the claimed hits (in text order) and the byte states. */
static int tokenize_parts(tok_run *r, const char *text, size_t len, const hit_list *hits,
                          const uint8_t *state)
{
    size_t k = 0;
    int rc = GRAFT_OK;
    for (size_t i = 0; i < len && rc == GRAFT_OK;) {
        if (k < hits->n && hits->items[k].pos == i) {
            rc = special_token(r, hits->items[k].id);
            i += hits->items[k++].len;
        } else if (state[i] == STRIPPED) {
            i++;
        } else {
            size_t j = i;
            while (j < len && state[j] == FREE)
                j++;
            rc = plain_text(r, text + i, j - i);
            i = j;
        }
    }
    return rc;
}

static int tokenize_body(tok_run *r, const char *text, size_t len, bool parse_special)
{
    if (len == 0)
        return GRAFT_OK;
    if (graft__vocab_specials(r->v, parse_special)->n_lens == 0)
        return plain_text(r, text, len);
    hit_list claimed = {0};
    uint8_t *state = graft__calloc(len, 1);
    int rc = state ? partition(r->v, text, len, parse_special, state, &claimed) : GRAFT_ENOMEM;
    if (rc == GRAFT_OK)
        rc = tokenize_parts(r, text, len, &claimed, state);
    graft__free(state);
    graft__free(claimed.items);
    return rc;
}

/* The ids add_special puts first (first) or last. */
static int32_t added_id(const graft__vocab *v, bool first)
{
    if (graft__vocab_kind_of(v) == GRAFT_VOCAB_WPM)
        return first ? graft__vocab_bos(v) : graft__vocab_sep(v);
    if (first)
        return graft__vocab_add_bos(v) ? graft__vocab_bos(v) : -1;
    return graft__vocab_add_eos(v) ? graft__vocab_eos(v) : -1;
}

int graft__tokenize(const graft__vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (text == NULL && len > 0)
        return GRAFT_EINVAL;
    graft__tokbuf buf = {0};
    tok_run r = {v, &buf, true};
    int32_t first = add_special ? added_id(v, true) : -1;
    int32_t last = add_special ? added_id(v, false) : -1;
    int rc = first >= 0 ? graft__tokbuf_push(&buf, first) : GRAFT_OK;
    if (rc == GRAFT_OK)
        rc = tokenize_body(&r, text, len, parse_special);
    if (rc == GRAFT_OK && last >= 0)
        rc = graft__tokbuf_push(&buf, last);
    if (rc == GRAFT_OK && buf.ids == NULL && (buf.ids = graft__malloc(sizeof *buf.ids)) == NULL)
        rc = GRAFT_ENOMEM;
    if (rc != GRAFT_OK) {
        graft__free(buf.ids);
        return rc;
    }
    *out = buf.ids;
    *n_out = buf.n;
    return GRAFT_OK;
}

/* ---- tokens to bytes ------------------------------------------------------------- */

/* Appends n bytes to buf as far as cap allows; *len counts them all. */
static void put(char *buf, size_t cap, size_t *len, const char *bytes, size_t n)
{
    if (*len < cap)
        memcpy(buf + *len, bytes, n < cap - *len ? n : cap - *len);
    *len += n;
}

/* spm and bert: "▁" stands for a space. */
static size_t unescape_spaces(const char *text, size_t n, char *buf, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        bool space = n - i >= 3 && memcmp(text + i, "\xe2\x96\x81", 3) == 0;
        put(buf, cap, &len, space ? " " : text + i, 1);
        i += space ? 3 : 1;
    }
    return len;
}

/* bpe: each character of GPT-2's alphabet stands for a byte. */
static size_t unmap_bytes(const char *text, size_t n, char *buf, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t used = graft__utf8_decode(text + i, n - i, &cp);
        int byte = used ? graft__bpe_cp_to_byte(cp) : -1;
        if (used == 0)
            used = 1;
        if (byte >= 0)
            put(buf, cap, &len, (const char[]){(char)byte}, 1);
        else
            put(buf, cap, &len, text + i, used);
        i += used;
    }
    return len;
}

/* "<0xXX>" as its byte; -1 when the text is not of that form. */
static int byte_of(const char *text, size_t n)
{
    if (n != 6 || memcmp(text, "<0x", 3) != 0 || text[5] != '>' ||
        !isxdigit((uint8_t)text[3]) || !isxdigit((uint8_t)text[4]))
        return -1;
    return (int)strtol((const char[]){text[3], text[4], '\0'}, NULL, 16);
}

int graft__token_bytes(const graft__vocab *v, int32_t id, char *buf, size_t cap)
{
    const char *text = graft__vocab_text(v, id);
    if (text == NULL)
        return -1;
    size_t n = graft__vocab_text_len(v, id), len = 0;
    bool bpe = graft__vocab_kind_of(v) == GRAFT_VOCAB_BPE;
    int byte;
    switch (graft__vocab_type(v, id)) {
    case GRAFT_TOKEN_NORMAL:
        len = bpe ? unmap_bytes(text, n, buf, cap) : unescape_spaces(text, n, buf, cap);
        break;
    case GRAFT_TOKEN_USER_DEFINED:
        put(buf, cap, &len, text, n);
        break;
    case GRAFT_TOKEN_BYTE:
        if (!bpe && (byte = byte_of(text, n)) >= 0)
            put(buf, cap, &len, (const char[]){(char)byte}, 1);
        break;
    default:
        break;
    }
    return len > INT32_MAX ? INT32_MAX : (int)len;
}
