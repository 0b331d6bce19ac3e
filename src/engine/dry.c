/*
 * dry.c: the DRY penalty (dry.h), as llama.cpp's DRY sampler computes it.
 *
 * Breakers: a breaker string gives the tokens whose bytes hold it (each a breaker alone) and
 * the tokens whose bytes end with a proper prefix of it, each followed by the tokenization
 * of the rest (a restart sequence of several tokens).
 *
 * A pick: the window is the history's last `window` tokens. The repeat limit is the count of
 * tokens after the window's last restart sequence (all of them when there is none). The
 * Z-algorithm over the reversed window gives, for every position, the length of the longest
 * run ending there that the window also ends with, in O(window); capped at the limit, that
 * is the repeat the token after the position would extend. A token gets the longest repeat
 * it would extend, and loses multiplier * base^(repeat - allowed_length) when the repeat is
 * at least allowed_length, unless it is a breaker alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dry.h"
#include "util/util.h"

const char *const *graft_dry_default_breakers(size_t *n)
{
    static const char *const llama_breakers[] = {"\n", ":", "\"", "*"};
    *n = sizeof llama_breakers / sizeof *llama_breakers;
    return llama_breakers;
}

/* The exponent at which base^e would pass the largest float (llama.cpp's cap). */
static int32_t max_exponent_of(float base)
{
    return base > 1.000001f ? (int32_t)(88.7228391f / logf(base)) : 0;
}

graft__dry *graft__dry_create(const graft_sampling *p, int32_t n_vocab)
{
    graft__dry *d = graft__calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    *d = (graft__dry){.multiplier = p->dry_multiplier,
                      .base = p->dry_base,
                      .allowed_length = p->dry_allowed_length,
                      .window = p->dry_penalty_last_n,
                      .n_vocab = n_vocab,
                      .max_exponent = max_exponent_of(p->dry_base)};
    d->z = graft__malloc((size_t)d->window * sizeof *d->z);
    d->marked = graft__malloc((size_t)d->window * sizeof *d->marked);
    d->longest = graft__malloc((size_t)n_vocab * sizeof *d->longest);
    if (d->z == NULL || d->marked == NULL || d->longest == NULL) {
        graft__dry_free(d);
        return NULL;
    }
    for (int32_t t = 0; t < n_vocab; t++)
        d->longest[t] = -1;
    return d;
}

void graft__dry_free(graft__dry *d)
{
    if (d == NULL)
        return;
    graft__free(d->breakers);
    graft__free(d->tails);
    graft__free(d->z);
    graft__free(d->marked);
    graft__free(d->longest);
    graft__free(d);
}

/* The breakers and tails being gathered. */
typedef struct gathered {
    graft__dry_breaker *list;
    size_t n, cap;
    int32_t *tails;
    size_t n_tails, cap_tails;
} gathered;

static bool add_breaker(gathered *g, int32_t head, int32_t tail_at, int32_t tail_len)
{
    graft__dry_breaker *list = graft__grow_array(g->list, g->n, &g->cap, sizeof *list, 256);
    if (list == NULL)
        return false;
    g->list = list;
    g->list[g->n++] = (graft__dry_breaker){head, tail_at, tail_len};
    return true;
}

/* Appends the tokenization of text[0, len) to the tails; its place in *at, *count. */
static int add_tail(gathered *g, const graft__vocab *v, const char *text, size_t len,
                    int32_t *at, int32_t *count)
{
    int32_t *tokens = NULL;
    size_t n = 0;
    int rc = graft__tokenize(v, text, len, false, false, &tokens, &n);
    if (rc != GRAFT_OK)
        return rc;
    if (g->n_tails + n > g->cap_tails) {
        size_t cap = 2 * (g->n_tails + n);
        int32_t *tails = graft__realloc_array(g->tails, cap, sizeof *tails);
        if (tails == NULL) {
            graft__free(tokens);
            return GRAFT_ENOMEM;
        }
        g->tails = tails;
        g->cap_tails = cap;
    }
    if (n > 0)
        memcpy(g->tails + g->n_tails, tokens, n * sizeof *tokens);
    *at = (int32_t)g->n_tails;
    *count = (int32_t)n;
    g->n_tails += n;
    graft__free(tokens);
    return GRAFT_OK;
}

/* Whether s[0, len) (len >= 1) occurs in bytes[0, n). */
static bool contains(const char *bytes, size_t n, const char *s, size_t len)
{
    const char *end = bytes + n;
    for (const char *at = bytes; (size_t)(end - at) >= len; at++) {
        at = memchr(at, s[0], (size_t)(end - at) - len + 1);
        if (at == NULL)
            return false;
        if (memcmp(at, s, len) == 0)
            return true;
    }
    return false;
}

/* The restart sequences of one breaker s (len bytes) over every token. */
static int gather(gathered *g, const graft__vocab *v, const graft__token_table *t,
                  const char *s, size_t len)
{
    /* rest_at[k], rest_len[k]: the tokens of s[k, len), which follow a token ending with
     * s[0, k) */
    int32_t rest_at[GRAFT_DRY_MAX_BREAKER_BYTES], rest_len[GRAFT_DRY_MAX_BREAKER_BYTES];
    for (size_t k = 1; k < len; k++) {
        int rc = add_tail(g, v, s + k, len - k, &rest_at[k], &rest_len[k]);
        if (rc != GRAFT_OK)
            return rc;
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *bytes = graft__token_table_bytes(t, id, &n);
        if (contains(bytes, n, s, len)) {
            if (!add_breaker(g, id, 0, 0))
                return GRAFT_ENOMEM;
            continue;
        }
        for (size_t k = n < len ? n : len - 1; k >= 1; k--)
            if (rest_len[k] > 0 && memcmp(bytes + n - k, s, k) == 0 &&
                !add_breaker(g, id, rest_at[k], rest_len[k]))
                return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

static int by_head_then_tail(const void *a, const void *b)
{
    const graft__dry_breaker *x = a, *y = b;
    if (x->head != y->head)
        return x->head < y->head ? -1 : 1;
    if (x->tail_len != y->tail_len)
        return x->tail_len < y->tail_len ? -1 : 1;
    return (x->tail_at > y->tail_at) - (x->tail_at < y->tail_at);
}

bool graft__dry_breakers_valid(const char *const *breakers, size_t n)
{
    if (n > GRAFT_DRY_MAX_BREAKERS || (n > 0 && breakers == NULL))
        return false;
    for (size_t i = 0; i < n; i++)
        if (breakers[i] == NULL || breakers[i][0] == '\0' ||
            strlen(breakers[i]) > GRAFT_DRY_MAX_BREAKER_BYTES)
            return false;
    return true;
}

int graft__dry_set_breakers(graft__dry *d, const graft__vocab *v, const graft__token_table *t,
                            const char *const *breakers, size_t n)
{
    if (!graft__dry_breakers_valid(breakers, n))
        return GRAFT_EINVAL;
    gathered g = {0};
    int rc = GRAFT_OK;
    for (size_t i = 0; i < n && rc == GRAFT_OK; i++)
        rc = gather(&g, v, t, breakers[i], strlen(breakers[i]));
    if (rc != GRAFT_OK) {
        graft__free(g.list);
        graft__free(g.tails);
        return rc;
    }
    if (g.n > 0)
        qsort(g.list, g.n, sizeof *g.list, by_head_then_tail);
    graft__free(d->breakers);
    graft__free(d->tails);
    d->breakers = g.list;
    d->n_breakers = g.n;
    d->tails = g.tails;
    return GRAFT_OK;
}

/* The first of the restart sequences headed by token, or n_breakers when there is none. */
static size_t first_headed_by(const graft__dry *d, int32_t token)
{
    size_t lo = 0, hi = d->n_breakers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->breakers[mid].head < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n_breakers && d->breakers[lo].head == token ? lo : d->n_breakers;
}

/* The count of tokens of w[0, n) after its last restart sequence (n when it has none): the
 * longest a repeat of its end may be. */
static int32_t repeat_limit(const graft__dry *d, const int32_t *w, int32_t n)
{
    for (int32_t i = 0; i < n; i++) { /* w[n - 1 - i]: i tokens after it */
        int32_t longest = -1;
        for (size_t b = first_headed_by(d, w[n - 1 - i]);
             b < d->n_breakers && d->breakers[b].head == w[n - 1 - i]; b++) {
            const graft__dry_breaker *r = &d->breakers[b];
            if (r->tail_len <= longest || r->tail_len > i)
                continue;
            if (r->tail_len == 0 ||
                memcmp(d->tails + r->tail_at, w + n - i, (size_t)r->tail_len * sizeof *w) == 0)
                longest = r->tail_len;
        }
        if (longest >= 0)
            return i - longest;
    }
    return n;
}

void graft__dry_apply(graft__dry *d, float *logits, const int32_t *history, size_t n_history)
{
    int32_t n = n_history < (size_t)d->window ? (int32_t)n_history : d->window;
    const int32_t *w = history + n_history - (size_t)n;
    if (n <= d->allowed_length)
        return;
    int32_t limit = repeat_limit(d, w, n);
    if (limit < d->allowed_length)
        return;
    /* z[k]: how many of the reversed window's tokens, from the k-th on, equal its first
     * ones: the run ending at w[n - 1 - k] that w also ends with; [left, right) is the
     * rightmost match found so far. */
    int32_t n_marked = 0, left = 0, right = 0;
    for (int32_t k = 1; k < n; k++) {
        int32_t z = 0;
        if (k < right)
            z = d->z[k - left] < right - k ? d->z[k - left] : right - k;
        while (k + z < n && w[n - 1 - z] == w[n - 1 - k - z])
            z++;
        d->z[k] = z;
        if (k + z > right) {
            left = k;
            right = k + z;
        }
        int32_t repeat = z < limit ? z : limit;
        int32_t next = w[n - k];
        if (repeat < d->allowed_length || next < 0 || next >= d->n_vocab)
            continue;
        if (d->longest[next] < 0)
            d->marked[n_marked++] = next;
        if (repeat > d->longest[next])
            d->longest[next] = repeat;
    }
    for (int32_t i = 0; i < n_marked; i++) {
        int32_t token = d->marked[i];
        size_t b = first_headed_by(d, token);
        bool breaks_alone = b < d->n_breakers && d->breakers[b].tail_len == 0;
        if (!breaks_alone) {
            int32_t e = d->longest[token] - d->allowed_length;
            if (d->max_exponent > 0 && e > d->max_exponent)
                e = d->max_exponent;
            logits[token] -= (float)((double)d->multiplier * pow((double)d->base, (double)e));
        }
        d->longest[token] = -1;
    }
}
