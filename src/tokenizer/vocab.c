/*
 * vocab.c: a model's vocabulary, built once from the tokenizer.ggml.* keys of a GGUF file.
 *
 * DESIGN
 * The vocabulary is immutable after graft__vocab_load and shared by every thread that
 * tokenizes. It holds:
 *   - the tokens: text (copied into one arena, NUL-terminated), score, type, attributes;
 *   - a text -> id hash (open addressing) for the tokenizers and special-token matching;
 *   - for bpe, a (left id, right id) -> (rank, merged id) hash built from the merges, and the
 *     compiled pre-tokenizer of tokenizer.ggml.pre;
 *   - the special ids, the add_bos / add_eos / add_space_prefix flags and the set of
 *     end-of-generation tokens.
 * Defaults follow llama.cpp when a key is absent: spm adds BOS, and its BOS/EOS/UNK are
 * 1/2/0; bert's are CLS 101, UNK 100, SEP 102; gpt2 adds BOS only for the llama3 family and
 * has no BOS/EOS unless the file names them (llama.cpp's fallback id 11 is Falcon's and is
 * not copied). As in llama.cpp, tokens whose text marks an end of turn ("<|endoftext|>",
 * "<|im_end|>", ...) or a fill-in-the-middle role count as control tokens, and
 * end-of-generation is EOS, EOT, EOM, the FIM pad/repo/separator tokens and those texts.
 *
 * Validation: array lengths must agree, token types and ids must be in range, texts must
 * be unique, and every bpe merge must join two tokens into a token (as Hugging Face's BPE
 * requires). Each message names the key, the index and the numbers.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define KEY(name) "tokenizer.ggml." name
#define NO_ID 0xFFFFFFFFu /* an id key set to this (or -1) means "none" */

enum { ATTR_EOG = 1, ATTR_LSTRIP = 2, ATTR_RSTRIP = 4 };

typedef struct token_info {
    const char *text; /* into the arena, NUL-terminated */
    uint32_t len;
    float score;
    uint8_t type;  /* GRAFT_TOKEN_*, after llama.cpp's overrides */
    uint8_t attrs; /* ATTR_* */
} token_info;

typedef struct merge_entry {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty slot */
    int32_t rank;
    int32_t merged;
} merge_entry;

struct graft__vocab {
    graft__vocab_kind kind;
    char *pre_name; /* NULL: "default" */
    int32_t n_tokens;
    token_info *tokens;
    char *arena;
    int32_t *slots; /* text hash: token id or -1 */
    uint64_t slot_mask;
    merge_entry *merges;
    uint64_t merge_mask;
    int32_t byte_tokens[256];
    int32_t bos, eos, unk, sep;
    int32_t fim[GRAFT__FIM_COUNT]; /* fill-in-the-middle tokens, -1 when absent */
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    size_t max_token_len;
    graft__special_set specials[2]; /* [0]: user-defined only, [1]: all special tokens */
    uint32_t *special_lens;         /* storage behind both sets */
    graft__pretok *pretok;
    graft__wpm_norm *wpm_norm;
};

/* ---- hashing --------------------------------------------------------------------- */

static uint64_t hash_text(const char *s, size_t len)
{
    return graft__fnv1a(GRAFT_FNV1A_BASIS, s, len);
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdu;
    key ^= key >> 33;
    return key;
}

/* Slots for n entries at most half full. */
static uint64_t table_size(uint64_t n)
{
    uint64_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

int32_t graft__vocab_find(const graft__vocab *v, const char *text, size_t len)
{
    for (uint64_t i = hash_text(text, len) & v->slot_mask;; i = (i + 1) & v->slot_mask) {
        int32_t id = v->slots[i];
        if (id < 0)
            return -1;
        const token_info *t = &v->tokens[id];
        if (t->len == len && memcmp(t->text, text, len) == 0)
            return id;
    }
}

/* Adds token `id` to the text hash; GRAFT_EFORMAT when its text is already there. */
static int insert_text(graft__vocab *v, int32_t id, char **errmsg)
{
    const token_info *t = &v->tokens[id];
    for (uint64_t i = hash_text(t->text, t->len) & v->slot_mask;;
         i = (i + 1) & v->slot_mask) {
        int32_t other = v->slots[i];
        if (other < 0) {
            v->slots[i] = id;
            return GRAFT_OK;
        }
        if (v->tokens[other].len == t->len && memcmp(v->tokens[other].text, t->text, t->len) == 0)
            return graft__errmsg(errmsg, GRAFT_EFORMAT,
                                 KEY("tokens") "[%d] repeats the text of token %d ('%.64s')",
                                 (int)id, (int)other, t->text);
    }
}

int32_t graft__vocab_merge(const graft__vocab *v, int32_t left, int32_t right, int32_t *merged)
{
    if (v->merges == NULL || left < 0 || right < 0)
        return -1;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = hash_pair(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const merge_entry *e = &v->merges[i];
        if (e->key == UINT64_MAX)
            return -1;
        if (e->key == key) {
            *merged = e->merged;
            return e->rank;
        }
    }
}

/* Adds a merge unless the pair is already there (the first, lowest rank, wins). */
static void insert_merge(graft__vocab *v, int32_t left, int32_t right, int32_t rank,
                         int32_t merged)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = hash_pair(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        merge_entry *e = &v->merges[i];
        if (e->key == key)
            return;
        if (e->key == UINT64_MAX) {
            *e = (merge_entry){key, rank, merged};
            return;
        }
    }
}

/* ---- reading the keys ------------------------------------------------------------ */

static int nomem(char **errmsg)
{
    return graft__errmsg(errmsg, GRAFT_ENOMEM, "tokenizer: out of memory");
}

static int read_kind(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    graft__gguf_str model;
    int rc = graft__gguf_get_str(g, KEY("model"), &model);
    if (rc == GRAFT_ENOTFOUND)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("model") " is missing");
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("model") " is not a string");
    if (graft__gguf_str_eq(model, "llama"))
        v->kind = GRAFT_VOCAB_SPM;
    else if (graft__gguf_str_eq(model, "gpt2"))
        v->kind = GRAFT_VOCAB_BPE;
    else if (graft__gguf_str_eq(model, "bert"))
        v->kind = GRAFT_VOCAB_WPM;
    else
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED,
                             KEY("model") " '%.*s' is not supported (llama, gpt2, bert are)",
                             (int)(model.len > 64 ? 64 : model.len), model.ptr);
    return GRAFT_OK;
}

static int read_pre_name(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    graft__gguf_str pre;
    int rc = graft__gguf_get_str(g, KEY("pre"), &pre);
    if (rc == GRAFT_ENOTFOUND)
        return GRAFT_OK;
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("pre") " is not a string");
    v->pre_name = graft__strndup(pre.ptr, pre.len);
    return v->pre_name ? GRAFT_OK : nomem(errmsg);
}

/* An optional array whose length must be n_tokens. */
static int read_parallel_array(const graft__gguf *g, const char *key, int32_t n_tokens,
                               bool want_float, const graft__gguf_array **out, char **errmsg)
{
    *out = NULL;
    int rc = graft__gguf_get_arr(g, key, GRAFT_GGUF_VTYPE_COUNT, out);
    if (rc == GRAFT_ENOTFOUND)
        return GRAFT_OK;
    graft__gguf_vtype t = rc == GRAFT_OK ? (*out)->elem_type : GRAFT_GGUF_STRING;
    bool is_float = t == GRAFT_GGUF_FLOAT32 || t == GRAFT_GGUF_FLOAT64;
    bool is_int = t <= GRAFT_GGUF_INT32 /* UINT8..INT32 */ || t == GRAFT_GGUF_UINT64 ||
                  t == GRAFT_GGUF_INT64;
    if (want_float ? !is_float : !is_int)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "%s is not an array of %s", key,
                             want_float ? "floats" : "integers");
    if ((*out)->count != (uint64_t)n_tokens)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "%s has %llu entries but " KEY("tokens")
                             " has %d", key, (unsigned long long)(*out)->count, (int)n_tokens);
    return GRAFT_OK;
}

/* The arena bytes for all texts with their NULs. */
static int arena_size(const graft__gguf_array *texts, size_t *total, char **errmsg)
{
    *total = 0;
    for (uint64_t i = 0; i < texts->count; i++)
        if (texts->strings[i].len > UINT32_MAX ||
            !graft__add_size(*total, (size_t)texts->strings[i].len + 1, total))
            return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("tokens") "[%llu] is too long",
                                 (unsigned long long)i);
    return GRAFT_OK;
}

/* Token i: its text copied to *at (advanced past it), its score and type. */
static int fill_token(graft__vocab *v, int32_t i, graft__gguf_str text,
                      const graft__gguf_array *scores, const graft__gguf_array *types, char **at,
                      char **errmsg)
{
    token_info *t = &v->tokens[i];
    t->len = (uint32_t)text.len;
    t->text = memcpy(*at, text.ptr, t->len);
    (*at)[t->len] = '\0';
    *at += t->len + 1;
    t->score = scores ? graft__gguf_arr_f32(scores, (uint64_t)i) : 0.0f;
    int64_t type = types ? graft__gguf_arr_i64(types, (uint64_t)i) : GRAFT_TOKEN_NORMAL;
    if (type < 0 || type > GRAFT_TOKEN_BYTE)
        return graft__errmsg(errmsg, GRAFT_EFORMAT,
                             KEY("token_type") "[%d] is %lld, not a token type (0..6)", (int)i,
                             (long long)type);
    t->type = (uint8_t)type;
    if (t->len > v->max_token_len)
        v->max_token_len = t->len;
    return GRAFT_OK;
}

/* Copies the texts into the arena and reads scores and types. */
static int read_tokens(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    const graft__gguf_array *texts, *scores, *types;
    int rc = graft__gguf_get_arr(g, KEY("tokens"), GRAFT_GGUF_STRING, &texts);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("tokens") " is %s",
                             rc == GRAFT_ENOTFOUND ? "missing" : "not an array of strings");
    if (texts->count == 0 || texts->count > INT32_MAX)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("tokens") " has %llu entries",
                             (unsigned long long)texts->count);
    v->n_tokens = (int32_t)texts->count;
    size_t total;
    if ((rc = read_parallel_array(g, KEY("scores"), v->n_tokens, true, &scores, errmsg)) ||
        (rc = read_parallel_array(g, KEY("token_type"), v->n_tokens, false, &types, errmsg)) ||
        (rc = arena_size(texts, &total, errmsg)))
        return rc;
    v->tokens = graft__calloc((size_t)v->n_tokens, sizeof *v->tokens);
    v->arena = graft__malloc(total);
    if (v->tokens == NULL || v->arena == NULL)
        return nomem(errmsg);
    char *at = v->arena;
    for (int32_t i = 0; i < v->n_tokens && rc == GRAFT_OK; i++)
        rc = fill_token(v, i, texts->strings[i], scores, types, &at, errmsg);
    return rc;
}

static int build_text_hash(graft__vocab *v, char **errmsg)
{
    uint64_t size = table_size((uint64_t)v->n_tokens);
    v->slot_mask = size - 1;
    v->slots = graft__malloc(size * sizeof *v->slots);
    if (v->slots == NULL)
        return nomem(errmsg);
    memset(v->slots, 0xff, size * sizeof *v->slots);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (v->tokens[i].len == 0)
            continue; /* an empty token can never be matched */
        int rc = insert_text(v, i, errmsg);
        if (rc != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

/* Reads an id key into *id: left alone when the key is absent, -1 when it says "none"
 * (0xFFFFFFFF or -1, as files write for an unused padding or separator id). */
static int read_id(const graft__gguf *g, const graft__vocab *v, const char *key, int32_t *id,
                   char **errmsg)
{
    uint32_t u;
    int32_t s;
    int rc = graft__gguf_get_u32(g, key, &u);
    if (rc == GRAFT_ENOTFOUND)
        return GRAFT_OK;
    if (rc != GRAFT_OK) {
        if (graft__gguf_get_i32(g, key, &s) != GRAFT_OK || s != -1)
            return graft__errmsg(errmsg, GRAFT_EFORMAT, "%s is not a token id", key);
        u = NO_ID;
    }
    if (u == NO_ID) {
        *id = -1;
        return GRAFT_OK;
    }
    if (u >= (uint32_t)v->n_tokens)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "%s = %u is out of range (%d tokens)", key,
                             u, (int)v->n_tokens);
    *id = (int32_t)u;
    return GRAFT_OK;
}

static int read_flag(const graft__gguf *g, const char *key, bool *flag, char **errmsg)
{
    int rc = graft__gguf_get_bool(g, key, flag);
    if (rc == GRAFT_ETYPE)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "%s is not a bool", key);
    return GRAFT_OK;
}

/* The family defaults, then the keys. */
static int read_specials(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    int32_t defaults[3][4] = {{1, 2, 0, -1}, {-1, -1, -1, -1}, {101, -1, 100, 102}};
    int32_t *ids[4] = {&v->bos, &v->eos, &v->unk, &v->sep};
    for (int i = 0; i < 4; i++) {
        int32_t d = defaults[v->kind][i];
        *ids[i] = d < v->n_tokens ? d : -1;
    }
    v->add_bos = v->kind != GRAFT_VOCAB_BPE || graft__pretok_adds_bos(v->pretok);
    v->add_space_prefix = v->kind == GRAFT_VOCAB_SPM;
    int rc;
    if (v->kind == GRAFT_VOCAB_WPM && (rc = read_id(g, v, KEY("cls_token_id"), &v->bos, errmsg)))
        return rc;
    if ((rc = read_id(g, v, KEY("bos_token_id"), &v->bos, errmsg)) ||
        (rc = read_id(g, v, KEY("eos_token_id"), &v->eos, errmsg)) ||
        (rc = read_id(g, v, KEY("unknown_token_id"), &v->unk, errmsg)) ||
        (rc = read_id(g, v, KEY("seperator_token_id"), &v->sep, errmsg)) ||
        (rc = read_flag(g, KEY("add_bos_token"), &v->add_bos, errmsg)) ||
        (rc = read_flag(g, KEY("add_eos_token"), &v->add_eos, errmsg)) ||
        (rc = read_flag(g, KEY("add_space_prefix"), &v->add_space_prefix, errmsg)))
        return rc;
    if (v->add_bos && v->bos < 0)
        return graft__errmsg(errmsg, GRAFT_EFORMAT,
                             "the vocabulary adds BOS but has no " KEY("bos_token_id"));
    if (v->add_eos && v->eos < 0)
        return graft__errmsg(errmsg, GRAFT_EFORMAT,
                             KEY("add_eos_token") " is set but there is no " KEY("eos_token_id"));
    return GRAFT_OK;
}

/* ---- end of generation and control overrides ------------------------------------- */

/* A role llama.cpp finds by key (or its older key) or, when both are absent, by the first
 * text present; fim: where the vocabulary keeps its id (GRAFT__FIM_COUNT: not kept). */
typedef struct role {
    const char *key, *old_key;
    bool eog;
    graft__fim fim;
    const char *texts[8];
} role;

static const role ROLES[] = {
    {KEY("eot_token_id"), NULL, true, GRAFT__FIM_COUNT,
     {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
      "<｜end▁of▁sentence｜>"}},
    {KEY("eom_token_id"), NULL, true, GRAFT__FIM_COUNT, {"<|eom_id|>"}},
    {KEY("fim_pre_token_id"), KEY("prefix_token_id"), false, GRAFT__FIM_PRE,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
      "<|code_prefix|>"}},
    {KEY("fim_suf_token_id"), KEY("suffix_token_id"), false, GRAFT__FIM_SUF,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
      "<|code_suffix|>"}},
    {KEY("fim_mid_token_id"), KEY("middle_token_id"), false, GRAFT__FIM_MID,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
      "<|code_middle|>"}},
    {KEY("fim_pad_token_id"), NULL, true, GRAFT__FIM_PAD,
     {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
    {KEY("fim_rep_token_id"), NULL, true, GRAFT__FIM_REP,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {KEY("fim_sep_token_id"), NULL, true, GRAFT__FIM_SEP, {"<|file_sep|>"}},
};

/* Texts that always end a generation (and are control tokens). */
static const char *const EOG_TEXTS[] = {"<|eot_id|>",    "<|im_end|>",  "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|eom_id|>", "<EOT>"};

static int32_t find_cstr(const graft__vocab *v, const char *text)
{
    return graft__vocab_find(v, text, strlen(text));
}

static void mark_control(graft__vocab *v, int32_t id, bool eog)
{
    v->tokens[id].type = GRAFT_TOKEN_CONTROL;
    if (eog)
        v->tokens[id].attrs |= ATTR_EOG;
}

static int apply_role(const graft__gguf *g, graft__vocab *v, const role *r, char **errmsg)
{
    int32_t id = -1;
    int rc = read_id(g, v, r->key, &id, errmsg);
    if (rc == GRAFT_OK && id < 0 && r->old_key != NULL)
        rc = read_id(g, v, r->old_key, &id, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    if (id >= 0) {
        v->tokens[id].attrs |= r->eog ? ATTR_EOG : 0;
    } else {
        for (size_t i = 0; i < 8 && r->texts[i] && id < 0; i++)
            if ((id = find_cstr(v, r->texts[i])) >= 0)
                mark_control(v, id, r->eog);
    }
    if (r->fim != GRAFT__FIM_COUNT)
        v->fim[r->fim] = id;
    return GRAFT_OK;
}

static int mark_eog(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++) {
        int rc = apply_role(g, v, &ROLES[i], errmsg);
        if (rc != GRAFT_OK)
            return rc;
    }
    for (size_t i = 0; i < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; i++) {
        int32_t id = find_cstr(v, EOG_TEXTS[i]);
        if (id >= 0)
            mark_control(v, id, true);
    }
    if (v->eos >= 0)
        v->tokens[v->eos].attrs |= ATTR_EOG;
    return GRAFT_OK;
}

/* ---- special tokens -------------------------------------------------------------- */

static bool is_special_type(int type, bool parse_special)
{
    return type == GRAFT_TOKEN_USER_DEFINED ||
           (parse_special && (type == GRAFT_TOKEN_CONTROL || type == GRAFT_TOKEN_UNKNOWN));
}

bool graft__vocab_is_special(const graft__vocab *v, int32_t id, bool parse_special)
{
    return id >= 0 && id < v->n_tokens && v->tokens[id].len > 0 &&
           is_special_type(v->tokens[id].type, parse_special);
}

static void set_strip(graft__vocab *v, const char *text, int attr, bool on)
{
    int32_t id = find_cstr(v, text);
    if (id < 0)
        return;
    if (on)
        v->tokens[id].attrs |= (uint8_t)attr;
    else
        v->tokens[id].attrs &= (uint8_t)~attr;
}

/* llama.cpp's per-model strip attributes: Phi-3's special tokens eat the spaces after them
 * (except <unk>, <s>, <|endoftext|>); jina-v2's <mask> eats the spaces before it. */
static void set_strip_attrs(const graft__gguf *g, graft__vocab *v)
{
    if (v->pre_name && strstr(v->pre_name, "jina-v2-"))
        set_strip(v, "<mask>", ATTR_LSTRIP, true);
    graft__gguf_str name;
    if (graft__gguf_get_str(g, "general.name", &name) != GRAFT_OK)
        return;
    char lower[256];
    size_t n = name.len < sizeof lower - 1 ? (size_t)name.len : sizeof lower - 1;
    for (size_t i = 0; i < n; i++)
        lower[i] = (char)tolower((unsigned char)name.ptr[i]);
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
        return;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (graft__vocab_is_special(v, i, true))
            v->tokens[i].attrs |= ATTR_RSTRIP;
    set_strip(v, "</s>", ATTR_RSTRIP, true);
    set_strip(v, "<unk>", ATTR_RSTRIP, false);
    set_strip(v, "<s>", ATTR_RSTRIP, false);
    set_strip(v, "<|endoftext|>", ATTR_RSTRIP, false);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Fills one special set: its distinct lengths (stored from `lens`) and first bytes. */
static size_t fill_special_set(graft__vocab *v, bool parse_special, uint32_t *lens)
{
    graft__special_set *set = &v->specials[parse_special];
    size_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (!graft__vocab_is_special(v, i, parse_special))
            continue;
        lens[n++] = v->tokens[i].len;
        uint8_t first = (uint8_t)v->tokens[i].text[0];
        set->first[first / 8] |= (uint8_t)(1u << (first % 8));
    }
    qsort(lens, n, sizeof *lens, cmp_u32);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (distinct == 0 || lens[distinct - 1] != lens[i])
            lens[distinct++] = lens[i];
    set->lens = lens;
    set->n_lens = distinct;
    return distinct;
}

static int build_special_sets(graft__vocab *v, char **errmsg)
{
    size_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        n += graft__vocab_is_special(v, i, true);
    v->special_lens = graft__malloc(2 * (n ? n : 1) * sizeof *v->special_lens);
    if (v->special_lens == NULL)
        return nomem(errmsg);
    size_t used = fill_special_set(v, false, v->special_lens);
    fill_special_set(v, true, v->special_lens + used);
    return GRAFT_OK;
}

/* ---- byte tokens, merges, pre-tokenizer ------------------------------------------ */

static void find_byte_tokens(graft__vocab *v)
{
    for (int b = 0; b < 256; b++) {
        char text[8];
        int32_t id = -1;
        if (v->kind == GRAFT_VOCAB_SPM) {
            snprintf(text, sizeof text, "<0x%02X>", b);
            id = find_cstr(v, text);
            if (id < 0)
                id = graft__vocab_find(v, (const char[]){(char)b}, 1);
        } else if (v->kind == GRAFT_VOCAB_BPE) {
            size_t len = graft__utf8_encode(graft__bpe_byte_to_cp((uint8_t)b), text);
            id = graft__vocab_find(v, text, len);
        }
        v->byte_tokens[b] = id;
    }
}

/* Parses merge i ("left right", split at the first space after the first byte). */
static int add_merge(graft__vocab *v, graft__gguf_str m, int32_t rank, char *buf, char **errmsg)
{
    const char *space = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
    if (space == NULL)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("merges") "[%d] has no space",
                             (int)rank);
    size_t left_len = (size_t)(space - m.ptr), right_len = m.len - left_len - 1;
    memcpy(buf, m.ptr, left_len);
    memcpy(buf + left_len, space + 1, right_len);
    int32_t left = graft__vocab_find(v, m.ptr, left_len);
    int32_t right = graft__vocab_find(v, space + 1, right_len);
    int32_t merged = graft__vocab_find(v, buf, left_len + right_len);
    if (left < 0 || right < 0 || merged < 0)
        return graft__errmsg(errmsg, GRAFT_EFORMAT,
                             KEY("merges") "[%d] '%.*s': '%.*s' is not a token", (int)rank,
                             (int)(m.len > 64 ? 64 : m.len), m.ptr,
                             (int)(left < 0 ? left_len : right < 0 ? right_len : m.len - 1),
                             left < 0 ? m.ptr : right < 0 ? space + 1 : buf);
    insert_merge(v, left, right, rank, merged);
    return GRAFT_OK;
}

static int read_merges(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    const graft__gguf_array *merges;
    int rc = graft__gguf_get_arr(g, KEY("merges"), GRAFT_GGUF_STRING, &merges);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("merges") " is %s",
                             rc == GRAFT_ENOTFOUND ? "missing" : "not an array of strings");
    if (merges->count > INT32_MAX)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("merges") " has too many entries");
    uint64_t size = table_size(merges->count);
    v->merge_mask = size - 1;
    v->merges = graft__malloc(size * sizeof *v->merges);
    char *buf = graft__malloc(2 * v->max_token_len + 2);
    if (v->merges == NULL || buf == NULL) {
        graft__free(buf);
        return nomem(errmsg);
    }
    for (uint64_t i = 0; i < size; i++)
        v->merges[i].key = UINT64_MAX;
    for (uint64_t i = 0; rc == GRAFT_OK && i < merges->count; i++) {
        graft__gguf_str m = merges->strings[i];
        rc = m.len > 2 * v->max_token_len + 1
                 ? graft__errmsg(errmsg, GRAFT_EFORMAT, KEY("merges") "[%d] is too long",
                                 (int)i)
                 : add_merge(v, m, (int32_t)i, buf, errmsg);
    }
    graft__free(buf);
    return rc;
}

static int load_bpe_parts(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    int rc = graft__pretok_create(v->pre_name, &v->pretok, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    v->ignore_merges = graft__pretok_ignore_merges(v->pretok);
    return read_merges(g, v, errmsg);
}

/* ---- load / free ----------------------------------------------------------------- */

static int load(const graft__gguf *g, graft__vocab *v, char **errmsg)
{
    int rc;
    if ((rc = read_kind(g, v, errmsg)) || (rc = read_pre_name(g, v, errmsg)) ||
        (rc = read_tokens(g, v, errmsg)) || (rc = build_text_hash(v, errmsg)))
        return rc;
    if (v->kind == GRAFT_VOCAB_BPE && (rc = load_bpe_parts(g, v, errmsg)))
        return rc;
    if (v->kind == GRAFT_VOCAB_WPM && (rc = graft__wpm_norm_create(&v->wpm_norm, errmsg)))
        return rc;
    if ((rc = read_specials(g, v, errmsg)) || (rc = mark_eog(g, v, errmsg)))
        return rc;
    set_strip_attrs(g, v);
    find_byte_tokens(v);
    return build_special_sets(v, errmsg);
}

int graft__vocab_load(const graft__gguf *g, graft__vocab **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    *out = NULL;
    graft__vocab *v = graft__calloc(1, sizeof *v);
    if (v == NULL)
        return nomem(errmsg);
    int rc = load(g, v, errmsg);
    if (rc != GRAFT_OK) {
        graft__vocab_free(v);
        return rc;
    }
    *out = v;
    return GRAFT_OK;
}

void graft__vocab_free(graft__vocab *v)
{
    if (v == NULL)
        return;
    graft__wpm_norm_free(v->wpm_norm);
    graft__pretok_free(v->pretok);
    graft__free(v->special_lens);
    graft__free(v->merges);
    graft__free(v->slots);
    graft__free(v->arena);
    graft__free(v->tokens);
    graft__free(v->pre_name);
    graft__free(v);
}

/* ---- getters --------------------------------------------------------------------- */

graft__vocab_kind graft__vocab_kind_of(const graft__vocab *v)
{
    return v->kind;
}

const char *graft__vocab_pre_name(const graft__vocab *v)
{
    return v->pre_name ? v->pre_name : "default";
}

int32_t graft__vocab_size(const graft__vocab *v)
{
    return v->n_tokens;
}

int32_t graft__vocab_fim(const graft__vocab *v, graft__fim which)
{
    return v->fim[which];
}

int32_t graft__vocab_bos(const graft__vocab *v)
{
    return v->bos;
}

int32_t graft__vocab_eos(const graft__vocab *v)
{
    return v->eos;
}

int32_t graft__vocab_unk(const graft__vocab *v)
{
    return v->unk;
}

int32_t graft__vocab_sep(const graft__vocab *v)
{
    return v->sep;
}

bool graft__vocab_add_bos(const graft__vocab *v)
{
    return v->add_bos;
}

bool graft__vocab_add_eos(const graft__vocab *v)
{
    return v->add_eos;
}

bool graft__vocab_add_space_prefix(const graft__vocab *v)
{
    return v->add_space_prefix;
}

bool graft__vocab_ignore_merges(const graft__vocab *v)
{
    return v->ignore_merges;
}

size_t graft__vocab_max_token_len(const graft__vocab *v)
{
    return v->max_token_len;
}

bool graft__vocab_is_eog(const graft__vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && (v->tokens[id].attrs & ATTR_EOG);
}

const char *graft__vocab_text(const graft__vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens ? v->tokens[id].text : NULL;
}

size_t graft__vocab_text_len(const graft__vocab *v, int32_t id)
{
    return v->tokens[id].len;
}

int graft__vocab_type(const graft__vocab *v, int32_t id)
{
    return v->tokens[id].type;
}

float graft__vocab_score(const graft__vocab *v, int32_t id)
{
    return v->tokens[id].score;
}

int32_t graft__vocab_byte_token(const graft__vocab *v, uint8_t byte)
{
    return v->byte_tokens[byte];
}

const graft__special_set *graft__vocab_specials(const graft__vocab *v, bool parse_special)
{
    return &v->specials[parse_special];
}

bool graft__vocab_lstrip(const graft__vocab *v, int32_t id)
{
    return v->tokens[id].attrs & ATTR_LSTRIP;
}

bool graft__vocab_rstrip(const graft__vocab *v, int32_t id)
{
    return v->tokens[id].attrs & ATTR_RSTRIP;
}

const graft__pretok *graft__vocab_pretok(const graft__vocab *v)
{
    return v->pretok;
}

const graft__wpm_norm *graft__vocab_wpm_norm(const graft__vocab *v)
{
    return v->wpm_norm;
}
