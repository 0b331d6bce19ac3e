/*
 * infill.c: fill in the middle (FIM), for code completion: the text before a gap and after
 * it become one prompt in the model's own FIM tokens, and the answer is what goes in the gap.
 *
 * Two ways in. OpenAI's legacy `suffix` beside a text `prompt` (/v1/completions) gives the
 * plain file-level prompt, [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>; it is never
 * cut, and one over the context is refused as any prompt is. llama-server's POST /infill
 * (what llama.vscode and llama.vim send) gives the prompt as llama-server lays it out, so a
 * client tuned against it gets the same tokens: the repository-level form of Qwen2.5-Coder's
 * paper (<fim_rep>myproject, then <fim_sep>filename and text for each of input_extra's files,
 * or a "--- snippet ---" line where the model has no file separator, then <fim_sep>filename),
 * then [BOS] <fim_pre> input_prefix prompt <fim_suf> input_suffix <fim_mid>. Editors send
 * whole files there, so /infill cuts what does not fit: the other files from their start
 * first, then the prefix from its start and the suffix from its end. The prompt, the text
 * typed at the gap, is never cut.
 *
 * Prefix and suffix are code: texts of special tokens in them stay text. The part that
 * changes as the user types sits late in the prompt, so the files and the prefix before it
 * come from the prefix cache on the next keystroke.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* ---- the request ----------------------------------------------------------------------------- */

/* The string at key (absent or null: ""), set in `into` under `as`. */
static int take_text(const json_t *body, const char *key, json_t *into, const char *as,
                     char **param, char **message)
{
    json_t *v = json_object_get(body, key);
    if (v != NULL && !json_is_null(v) && !json_is_string(v))
        return graft__refuse(param, message, key, "'%s' must be a string", key);
    return json_object_set_new(into, as, json_is_string(v) ? json_incref(v) : json_string(""))
               ? GRAFT_ENOMEM
               : GRAFT_OK;
}

/* input_extra's files, checked, as [{filename, text}] (a missing filename: "tmp", as
 * llama-server names it). */
static int take_files(const json_t *body, json_t *into, char **param, char **message)
{
    const json_t *extra = json_object_get(body, "input_extra");
    json_t *files = json_array();
    if (files == NULL || json_object_set_new(into, "files", files) != 0)
        return GRAFT_ENOMEM;
    if (extra == NULL || json_is_null(extra))
        return GRAFT_OK;
    if (!json_is_array(extra))
        return graft__refuse(param, message, "input_extra",
                             "'input_extra' must be an array of {\"filename\", \"text\"}");
    for (size_t i = 0; i < json_array_size(extra); i++) {
        json_t *file = json_array_get(extra, i), *text = json_object_get(file, "text");
        json_t *name = json_object_get(file, "filename");
        char path[48];
        snprintf(path, sizeof path, "input_extra[%zu]", i);
        if (!json_is_object(file) || !json_is_string(text))
            return graft__refuse(param, message, path, "'%s' must be an object with a string "
                                 "'text' (and optionally a string 'filename')", path);
        if (name != NULL && !json_is_null(name) && !json_is_string(name)) {
            strncat(path, ".filename", sizeof path - strlen(path) - 1);
            return graft__refuse(param, message, path, "'%s' must be a string", path);
        }
        json_t *named = json_is_string(name) ? json_incref(name) : json_string("tmp");
        if (json_array_append_new(files, json_pack("{s:O, s:o}", "text", text, "filename",
                                                   named)) != 0)
            return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

/* suffix beside a text prompt: the prompt is the prefix. */
static int take_suffix(const json_t *body, graft__completion_request *r, char **param,
                       char **message)
{
    json_t *suffix = json_object_get(body, "suffix");
    if (suffix == NULL || json_is_null(suffix))
        return GRAFT_OK;
    if (!json_is_string(suffix))
        return graft__refuse(param, message, "suffix", "'suffix' must be a string");
    if (json_string_length(suffix) == 0) /* OpenAI's neutral value: no gap */
        return GRAFT_OK;
    if (r->prompt_text == NULL)
        return graft__refuse(param, message, "suffix",
                             "'suffix' fills in the middle of a text 'prompt', not of token ids");
    if (r->echo)
        return graft__refuse(param, message, "echo", "'echo' cannot give back a prompt filled "
                             "in the middle ('suffix')");
    r->infill = json_pack("{s:s, s:O}", "prefix", r->prompt_text, "suffix", suffix);
    if (r->infill == NULL)
        return GRAFT_ENOMEM;
    free(r->prompt_text);
    r->prompt_text = NULL;
    return GRAFT_OK;
}

int graft__infill_parse(const json_t *body, graft__prompt_kind kind,
                        graft__completion_request *r, char **param, char **message)
{
    if (kind == GRAFT__PROMPT_TEXT)
        return take_suffix(body, r, param, message);
    if ((r->infill = json_object()) == NULL)
        return GRAFT_ENOMEM;
    int rc = take_text(body, "input_prefix", r->infill, "prefix", param, message);
    if (rc == GRAFT_OK)
        rc = take_text(body, "input_suffix", r->infill, "suffix", param, message);
    if (rc == GRAFT_OK)
        rc = take_text(body, "prompt", r->infill, "prompt", param, message);
    if (rc == GRAFT_OK)
        rc = take_files(body, r->infill, param, message);
    return rc;
}
/* ---- the prompt ------------------------------------------------------------------------------ */

typedef struct token_list {
    int32_t *ids;
    size_t n, cap;
    bool failed;
} token_list;

static void push(token_list *l, const int32_t *ids, size_t n)
{
    if (l->failed || n == 0)
        return;
    if (l->n + n > l->cap) {
        size_t cap = (l->n + n) * 2 + 16;
        int32_t *grown = realloc(l->ids, cap * sizeof *grown);
        if (grown == NULL) {
            l->failed = true;
            return;
        }
        l->ids = grown;
        l->cap = cap;
    }
    memcpy(l->ids + l->n, ids, n * sizeof *ids);
    l->n += n;
}

static void push_one(token_list *l, int32_t id)
{
    push(l, &id, 1);
}

/* Appends the tokens of len bytes of text, without BOS; special tokens' texts are those
 * tokens only where `special`. */
static void push_text(token_list *l, const graft_model *model, const char *text, size_t len,
                      bool special)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (l->failed || len == 0)
        return;
    if (graft_tokenize(model, text, len, 0, special, &ids, &n) != GRAFT_OK)
        l->failed = true;
    else
        push(l, ids, n);
    graft_free(ids);
}

static void push_literal(token_list *l, const graft_model *model, const char *text)
{
    push_text(l, model, text, strlen(text), false);
}

/* The tokens of the string at infill's key (none: nothing). */
static void push_field(token_list *l, const graft_model *model, const json_t *object,
                       const char *key, bool special)
{
    const json_t *v = json_object_get(object, key);
    push_text(l, model, json_string_value(v), json_string_length(v), special);
}

/* <fim_sep> and a file's name line. */
static void push_file_name(token_list *l, const graft_model *model, int32_t sep,
                           const json_t *name)
{
    size_t len = json_string_length(name);
    char *line = malloc(len + 1);
    if (line == NULL) {
        l->failed = true;
        return;
    }
    memcpy(line, json_string_value(name), len);
    line[len] = '\n';
    push_one(l, sep);
    push_text(l, model, line, len + 1, false);
    free(line);
}

/* llama-server's repository-level preamble: the project, then each file, then the file the
 * gap is in. */
static void push_files(token_list *l, const graft_model *model, const graft_model_info *info,
                       const json_t *files)
{
    if (info->fim_rep >= 0) {
        push_one(l, info->fim_rep);
        push_literal(l, model, "myproject\n");
    }
    size_t i;
    const json_t *file;
    json_array_foreach(files, i, file) {
        if (info->fim_sep >= 0)
            push_file_name(l, model, info->fim_sep, json_object_get(file, "filename"));
        else
            push_literal(l, model, "\n\n--- snippet ---\n\n");
        push_field(l, model, file, "text", false);
    }
    if (info->fim_sep >= 0) {
        push_one(l, info->fim_sep);
        push_literal(l, model, "filename\n");
    }
}

/* The last `take` tokens of from. */
static void push_tail(token_list *l, const token_list *from, size_t take)
{
    if (take > 0)
        push(l, from->ids + (from->n - take), take);
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

int graft__infill_tokens(const graft_model *model, const graft_model_info *info,
                         const json_t *infill, int64_t budget, int32_t **tokens,
                         size_t *n_tokens, bool *cut)
{
    *tokens = NULL;
    *n_tokens = 0;
    *cut = false;
    if (info->fim_pre < 0 || info->fim_suf < 0 || info->fim_mid < 0)
        return GRAFT_EUNSUPPORTED;
    const json_t *file_list = json_object_get(infill, "files"); /* /infill's alone */
    token_list prefix = {0}, suffix = {0}, prompt = {0}, files = {0}, out = {0};
    push_field(&prefix, model, infill, "prefix", false);
    push_field(&suffix, model, infill, "suffix", false);
    push_field(&prompt, model, infill, "prompt", true);
    if (file_list != NULL)
        push_files(&files, model, info, file_list);
    size_t take_prefix = prefix.n, take_suffix = suffix.n, take_files = files.n;
    size_t fixed = prompt.n + 3 + (info->add_bos ? 1 : 0);
    if (file_list != NULL && (int64_t)(fixed + prefix.n + suffix.n + files.n) > budget) {
        size_t room = budget > (int64_t)fixed ? (size_t)(budget - (int64_t)fixed) : 0;
        take_prefix = min_size(prefix.n, room - min_size(suffix.n, room / 4));
        take_suffix = min_size(suffix.n, room - take_prefix);
        take_files = min_size(files.n, room - take_prefix - take_suffix);
        *cut = true;
    }
    push_tail(&out, &files, take_files);
    if (info->add_bos)
        push_one(&out, info->bos);
    push_one(&out, info->fim_pre);
    push_tail(&out, &prefix, take_prefix);
    push(&out, prompt.ids, prompt.n);
    push_one(&out, info->fim_suf);
    push(&out, suffix.ids, take_suffix);
    push_one(&out, info->fim_mid);
    bool failed = prefix.failed || suffix.failed || prompt.failed || files.failed || out.failed;
    free(prefix.ids);
    free(suffix.ids);
    free(prompt.ids);
    free(files.ids);
    if (failed) {
        free(out.ids);
        return GRAFT_ENOMEM;
    }
    *tokens = out.ids;
    *n_tokens = out.n;
    return GRAFT_OK;
}
