/*
 * json_mask.c: which tokens can continue a JSON text, for generations held to
 * GRAFT_OUTPUT_JSON_OBJECT or GRAFT_OUTPUT_JSON_SCHEMA.
 *
 * The engine builds one graft__json_mask per model vocabulary when it starts, over its token table
 * (tokenizer.h), in one block: the tokens grouped by their first byte, and a flag for the tokens
 * that are plain string text. A mask then costs one probe of the recognizer per first byte (a group
 * whose first byte cannot follow is refused whole), and inside a string, where most of the
 * vocabulary can follow, a flag test per plain token (in a string held to a pattern, format or
 * lengths, a walk of the plain token's characters through the string's automaton alone); only the
 * other tokens of a group are fed byte by byte. While the recognizer follows several alternatives
 * of a union (json_recognizer.c), a token is allowed when one of its states takes it. Tokens with
 * no bytes (control tokens: BOS, end of turn) can never continue a text, so they are always masked;
 * the generation ends when the object closes instead (generation.c).
 *
 * Before a JSON text that begins after a tag (graft_generate_config.output_after), the
 * output is free: a token is refused only when it has no bytes, or when the tag ends in it
 * and its bytes after the tag cannot begin the JSON text. Only tokens holding the tag's
 * last byte can end it: one memchr over every token's bytes finds them. Where the free text
 * is optional (output_opens), its first tokens are each walked: white space, then the
 * opening text or the JSON text.
 */
#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

/* One allocation: the struct, then its arrays (immutable once built). */
struct graft__json_mask {
    const graft__token_table *tokens; /* borrowed: it outlives this */
    int32_t first[257];   /* group b is by_first[first[b] .. first[b + 1]); the tokens
                             without bytes follow, by_first[first[256] .. n_vocab) */
    int32_t *by_first;    /* (n_vocab) the tokens grouped by first byte, in id order */
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
    graft__free(m);
}

int graft__json_mask_create(const graft__token_table *tokens, graft__json_mask **out)
{
    int32_t n_vocab = tokens->n_vocab;
    graft__json_mask *m = graft__malloc(sizeof *m + (size_t)n_vocab * (sizeof(int32_t) + 1));
    *out = m;
    if (m == NULL)
        return GRAFT_ENOMEM;
    m->tokens = tokens;
    m->by_first = (int32_t *)(m + 1); /* the struct's size keeps the arrays aligned */
    m->plain = (uint8_t *)(m->by_first + n_vocab);
    int32_t count[256] = {0};
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t len;
        const char *bytes = graft__token_table_bytes(tokens, t, &len);
        m->plain[t] = len > 0 && plain_text(bytes, len);
        if (len > 0)
            count[(uint8_t)bytes[0]]++;
    }
    m->first[0] = 0;
    for (int b = 0; b < 256; b++)
        m->first[b + 1] = m->first[b] + count[b];
    int32_t fill[257]; /* fill[256]: the tokens without bytes */
    memcpy(fill, m->first, sizeof fill);
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t len;
        const char *bytes = graft__token_table_bytes(tokens, t, &len);
        m->by_first[fill[len > 0 ? (uint8_t)bytes[0] : 256]++] = t;
    }
    return GRAFT_OK;
}

/* Feeds the bytes of token t after the first `from`. */
static bool feed_from(const graft__json_mask *m, graft__json_syntax *s, int32_t t, size_t from)
{
    size_t len;
    const char *bytes = graft__token_table_bytes(m->tokens, t, &len);
    for (size_t i = from; i < len; i++)
        if (!graft__json_syntax_feed(s, (uint8_t)bytes[i]))
            return false;
    return true;
}

bool graft__json_mask_feed(const graft__json_mask *m, graft__json_recognizer *r, int32_t token)
{
    if (token < 0 || token >= m->tokens->n_vocab)
        return false;
    size_t len;
    const char *bytes = graft__token_table_bytes(m->tokens, token, &len);
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!graft__json_recognizer_feed(r, (uint8_t)bytes[i]))
            return false;
    return true;
}

/* ---- free text before the JSON text ---------------------------------------------------------- */

static bool is_space(uint8_t c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

void graft__json_preamble_init(graft__json_preamble *p, const char *tag, const char *open)
{
    size_t n = tag != NULL ? strnlen(tag, GRAFT_MAX_OUTPUT_AFTER) : 0;
    size_t k = n > 0 && open != NULL ? strnlen(open, GRAFT_MAX_OUTPUT_AFTER) : 0;
    *p = (graft__json_preamble){.len = (uint32_t)n, .open_len = (uint32_t)k, .in_free = k == 0,
                                .over = n == 0};
    memcpy(p->tag, tag ? tag : "", n);
    memcpy(p->open, open ? open : "", k);
}

/* Walks token t's bytes through *p: false when they break its opening text off. When the
 * JSON text begins in them, *json_from is the first of its bytes among them and *lead says
 * whether p->lead's white space comes before (the JSON text at once); else *json_from is
 * the token's length. */
static bool preamble_walk(const graft__json_mask *m, graft__json_preamble *p, int32_t t,
                          size_t *json_from, bool *lead)
{
    size_t n;
    const char *bytes = graft__token_table_bytes(m->tokens, t, &n);
    *json_from = n;
    *lead = false;
    for (size_t i = 0; i < n && !p->over; i++) {
        uint8_t c = (uint8_t)bytes[i];
        if (p->in_free) {
            p->matched = graft__tag_step(p->tag, p->matched, c);
            if (p->matched == p->len) {
                p->over = true;
                *json_from = i + 1;
            }
        } else if (p->opening == 0 && is_space(c)) {
            if (p->n_lead < GRAFT__JSON_MAX_LEAD) /* more is no JSON text's white space */
                p->lead[p->n_lead] = (char)c;
            p->n_lead += p->n_lead <= GRAFT__JSON_MAX_LEAD;
        } else if ((uint8_t)p->open[p->opening] == c) {
            p->in_free = ++p->opening == p->open_len;
        } else if (p->opening > 0 || p->n_lead > GRAFT__JSON_MAX_LEAD) {
            return false;
        } else {
            p->over = true;
            *json_from = i;
            *lead = true;
        }
    }
    return true;
}

/* *dst = *src, copying only its live states' live stack entries. */
static void copy_recognizer(graft__json_recognizer *dst, const graft__json_recognizer *src)
{
    dst->n_states = src->n_states;
    for (uint32_t k = 0; k < src->n_states; k++)
        graft__json_syntax_copy(&dst->states[k], &src->states[k]);
}

/* Feeds q's white space before it (lead) and token t's bytes from `from` to r. */
static bool feed_json(const graft__json_mask *m, const graft__json_preamble *q, bool lead,
                      graft__json_recognizer *r, int32_t t, size_t from)
{
    for (uint32_t k = 0; lead && k < q->n_lead; k++)
        if (!graft__json_recognizer_feed(r, (uint8_t)q->lead[k]))
            return false;
    size_t len;
    const char *bytes = graft__token_table_bytes(m->tokens, t, &len);
    for (size_t i = from; i < len; i++)
        if (!graft__json_recognizer_feed(r, (uint8_t)bytes[i]))
            return false;
    return true;
}

/* Walks token t through *q (p before it), feeding the JSON text's bytes in it to r: false
 * when they cannot follow. White space before the free text's opening is what a JSON text
 * may begin with (so that an output cannot run on with white space alone). */
static bool walk_and_feed(const graft__json_mask *m, const graft__json_preamble *p,
                          graft__json_preamble *q, graft__json_recognizer *r, int32_t t)
{
    size_t from, len;
    bool lead;
    graft__token_table_bytes(m->tokens, t, &len);
    if (len == 0 || !preamble_walk(m, q, t, &from, &lead))
        return false;
    if (q->over)
        return feed_json(m, q, lead, r, t, from);
    if (q->n_lead == p->n_lead)
        return true;
    graft__json_recognizer probe;
    copy_recognizer(&probe, r);
    return q->n_lead <= GRAFT__JSON_MAX_LEAD && feed_json(m, q, true, &probe, t, from);
}

/* Whether token t, walked through a copy of p, can follow: the JSON text's bytes in it fed to
 * a copy of r. */
static bool preamble_follows(const graft__json_mask *m, const graft__json_preamble *p,
                             const graft__json_recognizer *r, int32_t t)
{
    graft__json_preamble q = *p;
    graft__json_recognizer copy;
    copy_recognizer(&copy, r);
    return walk_and_feed(m, p, &q, &copy, t);
}

/* The token whose bytes hold byte `off` of the block (tokens with bytes only hold any). */
static int32_t token_at(const graft__json_mask *m, size_t off)
{
    const size_t *offset = m->tokens->offset;
    int32_t lo = 0, hi = m->tokens->n_vocab - 1; /* offset[lo] <= off < offset[hi + 1] */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (offset[mid] <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int32_t graft__json_mask_apply_preamble(const graft__json_mask *m,
                                        const graft__json_preamble *p,
                                        const graft__json_recognizer *r, float *logits)
{
    int32_t allowed = 0;
    if (!p->in_free) { /* the first tokens of an optional free text: each walked */
        for (int32_t t = 0; t < m->tokens->n_vocab; t++)
            if (preamble_follows(m, p, r, t))
                allowed++;
            else
                logits[t] = -INFINITY;
        return allowed;
    }
    for (int32_t i = m->first[256]; i < m->tokens->n_vocab; i++)
        logits[m->by_first[i]] = -INFINITY;
    allowed = m->first[256];
    /* Only the tokens holding the tag's last byte can end it: found in the block at once. */
    const graft__token_table *tokens = m->tokens;
    const char *block = tokens->bytes, *end = block + tokens->offset[tokens->n_vocab];
    const char last = p->tag[p->len - 1];
    const char *hit = memchr(block, last, (size_t)(end - block));
    while (hit != NULL) {
        int32_t t = token_at(m, (size_t)(hit - block));
        if (!preamble_follows(m, p, r, t)) {
            logits[t] = -INFINITY;
            allowed--;
        }
        const char *next = block + tokens->offset[t + 1];
        hit = next < end ? memchr(next, last, (size_t)(end - next)) : NULL;
    }
    return allowed;
}

bool graft__json_mask_feed_preamble(const graft__json_mask *m, graft__json_preamble *p,
                                    graft__json_recognizer *r, int32_t token)
{
    if (token < 0 || token >= m->tokens->n_vocab)
        return false;
    graft__json_preamble q = *p;
    if (!walk_and_feed(m, p, &q, r, token))
        return false;
    *p = q;
    return true;
}

/* A state of the recognizer, and what it is after a first byte. */
typedef struct probe {
    const graft__json_syntax *state;
    bool in_text, held;        /* in a string: graft__json_syntax_in_text, _in_held_text */
    graft__json_syntax after;  /* the state after the first byte (choice 0) ... */
    bool first_ok;             /* ... if it could follow */
} probe;

/* Whether token t's bytes can all follow state p->state (t's first byte: the one p->after
 * read). A walk through one state follows the first alternative of a union whose value the
 * token begins; where it met such a fork the token is fed again through a recognizer, which
 * follows every alternative. */
static bool token_follows(const graft__json_mask *m, const probe *p, int32_t t)
{
    size_t len;
    const char *bytes = graft__token_table_bytes(m->tokens, t, &len);
    if (p->after.n_choices <= 1) {
        if (!p->first_ok)
            return false;
        if (m->plain[t] && p->in_text)
            return true;
        if (m->plain[t] && p->held)
            return graft__json_syntax_text_follows(p->state, bytes, len);
        graft__json_syntax rest;
        graft__json_syntax_copy(&rest, &p->after);
        bool ok = feed_from(m, &rest, t, 1);
        if (rest.n_choices <= 1)
            return ok;
    }
    graft__json_recognizer forks;
    forks.n_states = 1;
    graft__json_syntax_copy(&forks.states[0], p->state);
    for (size_t i = 0; i < len; i++)
        if (!graft__json_recognizer_feed(&forks, (uint8_t)bytes[i]))
            return false;
    return true;
}

int32_t graft__json_mask_apply(const graft__json_mask *m, const graft__json_recognizer *r,
                               float *logits)
{
    for (int32_t i = m->first[256]; i < m->tokens->n_vocab; i++)
        logits[m->by_first[i]] = -INFINITY;
    int32_t allowed = 0;
    probe probes[GRAFT__JSON_MAX_STATES];
    for (uint32_t k = 0; k < r->n_states; k++) {
        probes[k].state = &r->states[k];
        probes[k].in_text = graft__json_syntax_in_text(&r->states[k]);
        probes[k].held = graft__json_syntax_in_held_text(&r->states[k]);
    }
    for (int b = 0; b < 256; b++) {
        uint32_t live[GRAFT__JSON_MAX_STATES], n_live = 0; /* the states b may continue */
        bool text = false; /* b's plain tokens continue some state's string as they are */
        for (uint32_t k = 0; k < r->n_states; k++) {
            probe *p = &probes[k];
            graft__json_syntax_copy(&p->after, &r->states[k]);
            p->after.n_choices = 0;
            p->first_ok = graft__json_syntax_feed(&p->after, (uint8_t)b);
            if (p->first_ok || p->after.n_choices > 1)
                live[n_live++] = k;
            text = text || (p->first_ok && p->in_text);
        }
        for (int32_t i = m->first[b]; i < m->first[b + 1]; i++) {
            int32_t t = m->by_first[i];
            bool ok = text && m->plain[t];
            for (uint32_t k = 0; k < n_live && !ok; k++)
                ok = token_follows(m, &probes[live[k]], t);
            if (ok)
                allowed++;
            else
                logits[t] = -INFINITY;
        }
    }
    return allowed;
}
