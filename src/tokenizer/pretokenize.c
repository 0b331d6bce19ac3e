/*
 * pretokenize.c: the pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre).
 *
 * Before BPE merges run, the text is cut into words by regexes; merges never cross a word
 * boundary. Each pre type names a list of regexes that llama.cpp applies in sequence: the
 * first splits the whole text into matched and unmatched stretches, each later one splits
 * every piece the previous ones left the same way. A regex sees one piece as its whole
 * subject, so lookaheads and \z stop at the piece's end.
 *
 * The patterns are llama.cpp's, rewritten for PCRE2 (UTF + UCP, JIT when available) so the
 * results match what llama.cpp computes:
 *   - "\s" is Unicode White_Space everywhere ([\t-\r\x{85}\p{Z}]), as llama.cpp maps every
 *     non-ASCII space to one ASCII space before running std::regex.
 *   - The GPT-2 and llama3 regexes run through llama.cpp's hand-written matchers, which
 *     never put an unassigned code point (\p{Cn}) in a punctuation run and emit any code
 *     point no branch matched as a word of its own; the patterns below say so explicitly.
 *   - Literal classes that contain a space character (deepseek-llm's "　") leave it out,
 *     since llama.cpp has turned it into an ASCII space before matching.
 * Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF), so such bytes end up in unmatched
 * stretches: byte-level BPE still encodes them losslessly.
 *
 * The file also wraps PCRE2 for the other tokenizer files (graft__regex_*): PCRE2 allocates
 * through graft__malloc (a general context), so allocation-failure injection reaches the
 * compiled patterns, match data and match frames too.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define MAX_PATTERNS 6

/* Class contents shared by the patterns. */
#define WS "\\t-\\r\\x{85}\\p{Z}" /* White_Space */
#define LN "\\p{L}\\p{N}"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"
#define CONTRACTIONS_ANYCASE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define SPACE_RUNS "[" WS "]+(?![^" WS "])|[" WS "]+"

/* GPT-2's regex with llama.cpp's matcher semantics (see the top of the file). */
#define GPT2                                                                           \
    CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS LN "\\p{Cn}]+|" SPACE_RUNS "|(?s:.)"
#define LLAMA3                                                                         \
    CONTRACTIONS_ANYCASE "|[^\\r\\n" LN "]?\\p{L}+|\\p{N}{1,3}| ?[^" WS LN                \
    "\\p{Cn}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|" SPACE_RUNS "|(?s:.)"
#define QWEN2                                                                          \
    CONTRACTIONS_ANYCASE "|[^\\r\\n" LN "]?\\p{L}+|\\p{N}| ?[^" WS LN "]+[\\r\\n]*|[" WS   \
    "]*[\\r\\n]+|" SPACE_RUNS
/* Han, Hangul and everything in U+0800..U+4E00, less the space characters there (a
 * possessive run: a long one then needs no backtracking stack). */
#define CJK "(?:(?!\\p{Z})[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}])++"
/* deepseek-llm's letters: the cased letters (Lu, Ll, Lt) of an older Unicode version. */
#define DEEPSEEK_LETTERS                                                                 \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"          \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"  \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"           \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"               \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"         \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"         \
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"         \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}" \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"                   \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"         \
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"  \
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"          \
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}" \
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"          \
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"         \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"         \
    "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}" \
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
/* deepseek-llm's punctuation: ASCII, fullwidth forms, quotes, "、" and "。". */
#define DEEPSEEK_PUNCT \
    "!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}\\x{3002}"
#define BLOOM "[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

typedef struct pre_type {
    const char *names; /* tokenizer.ggml.pre values, '|'-separated */
    bool ignore_merges;
    bool adds_bos;
    const char *patterns[MAX_PATTERNS]; /* NULL-terminated */
} pre_type;

static const pre_type PRE_TYPES[] = {
    {"default", false, false,
     {"[\\p{P}$+<=>^~|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL}},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
     "roberta-bpe|mpt|olmo|jais",
     false, false, {GPT2, NULL}},
    {"llama3|llama-v3|llama-bpe|falcon3", true, true, {LLAMA3, NULL}},
    {"dbrx|smaug-bpe", false, false, {LLAMA3, NULL}},
    {"qwen2|stablelm2|megrez", false, false, {QWEN2, NULL}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", false, false,
     {"\\p{N}", GPT2, NULL}},
    {"falcon", false, false, {"[\\p{P}$+<=>^~|`]+", GPT2, "[0-9][0-9][0-9]", NULL}},
    {"deepseek-coder", false, false,
     {"[\\r\\n]", "[" WS "]?\\p{L}+", "[" WS "]?\\p{P}+", CJK, "\\p{N}", NULL}},
    {"deepseek-llm", false, false,
     {"[\\r\\n]", "[" WS "]?[" DEEPSEEK_LETTERS "]+", "[" WS "]?[" DEEPSEEK_PUNCT "]+",
      "[" WS "]+\\z", CJK, "\\p{N}+"}},
    {"bloom|poro-chat|gpt3-finnish", false, false, {" ?" BLOOM, NULL}},
    {"viking", false, false, {" ?" BLOOM, "\\p{N}", NULL}},
};

struct graft__pretok {
    const pre_type *type;
    graft__regex *re[MAX_PATTERNS];
    size_t n_re;
};

/* ---- PCRE2 through graft's allocator ---------------------------------------------- */

struct graft__regex {
    pcre2_general_context *gctx;
    pcre2_code *code;
};

static void *pcre_alloc(size_t size, void *user)
{
    (void)user;
    return graft__malloc(size);
}

static void pcre_free(void *ptr, void *user)
{
    (void)user;
    graft__free(ptr);
}

static int regex_nomem(graft__regex *re, char **errmsg)
{
    graft__regex_free(re);
    return graft__errmsg(errmsg, GRAFT_ENOMEM, "regex: out of memory");
}

int graft__regex_compile(const char *pattern, graft__regex **out, char **errmsg)
{
    *out = NULL;
    graft__regex *re = graft__calloc(1, sizeof *re);
    if (re == NULL)
        return regex_nomem(re, errmsg);
    re->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *cctx = re->gctx ? pcre2_compile_context_create(re->gctx) : NULL;
    if (cctx == NULL)
        return regex_nomem(re, errmsg);
    int err;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &at, cctx);
    pcre2_compile_context_free(cctx);
    if (re->code == NULL && err == PCRE2_ERROR_HEAP_FAILED)
        return regex_nomem(re, errmsg);
    if (re->code == NULL) {
        PCRE2_UCHAR text[128];
        pcre2_get_error_message(err, text, sizeof text);
        graft__regex_free(re);
        return graft__errmsg(errmsg, GRAFT_EINVAL, "regex: error at %zu: %s", (size_t)at,
                             (const char *)text);
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* the interpreter stands in on failure */
    *out = re;
    return GRAFT_OK;
}

void graft__regex_free(graft__regex *re)
{
    if (re == NULL)
        return;
    pcre2_code_free(re->code);
    pcre2_general_context_free(re->gctx);
    graft__free(re);
}

/* The match state is PCRE2's match data under an opaque name. */
graft__regex_match *graft__regex_match_create(const graft__regex *re)
{
    return (graft__regex_match *)pcre2_match_data_create_from_pattern(re->code, re->gctx);
}

void graft__regex_match_free(graft__regex_match *m)
{
    pcre2_match_data_free((pcre2_match_data *)m);
}

int graft__regex_find(const graft__regex *re, graft__regex_match *m, const char *subject,
                      size_t len, size_t from, size_t *ov, int n_pairs)
{
    pcre2_match_data *md = (pcre2_match_data *)m;
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, len, from, PCRE2_NOTEMPTY, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) /* out of memory, or a match or JIT stack limit: both a lack of memory */
        return GRAFT_ENOMEM;
    const PCRE2_SIZE *got = pcre2_get_ovector_pointer(md);
    uint32_t have = pcre2_get_ovector_count(md);
    for (int i = 0; i < 2 * n_pairs; i++)
        ov[i] = (uint32_t)i / 2 < have && i / 2 < rc ? got[i] : SIZE_MAX;
    return 1;
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

/* Whether `name` is one of the '|'-separated names. */
static bool names_contain(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL);
    }
    return false;
}

static const pre_type *find_pre_type(const char *name)
{
    for (size_t i = 0; i < sizeof PRE_TYPES / sizeof PRE_TYPES[0]; i++)
        if (names_contain(PRE_TYPES[i].names, name))
            return &PRE_TYPES[i];
    return NULL;
}

int graft__pretok_create(const char *name, graft__pretok **out, char **errmsg)
{
    *out = NULL;
    const pre_type *type = find_pre_type(name ? name : "default");
    if (type == NULL)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED,
                             "tokenizer.ggml.pre: pre-tokenizer type '%s' is not supported",
                             name);
    graft__pretok *p = graft__calloc(1, sizeof *p);
    if (p == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "pre-tokenizer: out of memory");
    p->type = type;
    for (size_t i = 0; i < MAX_PATTERNS && type->patterns[i]; i++) {
        int rc = graft__regex_compile(type->patterns[i], &p->re[i], errmsg);
        if (rc != GRAFT_OK) {
            graft__pretok_free(p);
            return rc;
        }
        p->n_re++;
    }
    *out = p;
    return GRAFT_OK;
}

void graft__pretok_free(graft__pretok *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_re; i++)
        graft__regex_free(p->re[i]);
    graft__free(p);
}

bool graft__pretok_ignore_merges(const graft__pretok *p)
{
    return p->type->ignore_merges;
}

bool graft__pretok_adds_bos(const graft__pretok *p)
{
    return p->type->adds_bos;
}

/* A growing list of spans. */
typedef struct span_list {
    graft__span *items;
    size_t n;
    size_t cap;
} span_list;

static int span_push(span_list *l, size_t off, size_t len)
{
    if (len == 0)
        return GRAFT_OK;
    graft__span *items = graft__grow_array(l->items, l->n, &l->cap, sizeof *items, 64);
    if (items == NULL)
        return GRAFT_ENOMEM;
    l->items = items;
    l->items[l->n++] = (graft__span){off, len};
    return GRAFT_OK;
}

/* Splits one piece by `re` into matched and unmatched stretches, appended to `out`. */
static int split_piece(const graft__regex *re, graft__regex_match *m, const char *text,
                       graft__span piece, span_list *out)
{
    size_t done = 0; /* bytes of the piece already in `out` */
    size_t ov[2];
    int rc = 0;
    while (done < piece.len &&
           (rc = graft__regex_find(re, m, text + piece.off, piece.len, done, ov, 1)) > 0) {
        if (span_push(out, piece.off + done, ov[0] - done) != GRAFT_OK ||
            span_push(out, piece.off + ov[0], ov[1] - ov[0]) != GRAFT_OK)
            return GRAFT_ENOMEM;
        done = ov[1];
    }
    if (done < piece.len && rc < 0)
        return rc;
    return span_push(out, piece.off + done, piece.len - done);
}

/* Applies one regex to every span of `in`, producing `out`. */
static int split_all(const graft__regex *re, graft__regex_match *m, const char *text,
                     const span_list *in, span_list *out)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        int rc = split_piece(re, m, text, in->items[i], out);
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

int graft__pretok_split(const graft__pretok *p, const char *text, size_t len,
                        graft__span **spans, size_t *n)
{
    *spans = NULL;
    *n = 0;
    span_list a = {0}, b = {0};
    graft__regex_match *m = graft__regex_match_create(p->re[0]);
    int rc = m ? span_push(&a, 0, len) : GRAFT_ENOMEM;
    for (size_t i = 0; rc == GRAFT_OK && i < p->n_re; i++) {
        rc = split_all(p->re[i], m, text, &a, &b);
        span_list t = a;
        a = b;
        b = t;
    }
    graft__regex_match_free(m);
    graft__free(b.items);
    if (rc != GRAFT_OK) {
        graft__free(a.items);
        return rc;
    }
    *spans = a.items;
    *n = a.n;
    return GRAFT_OK;
}
