/*
 * run_prompts.c: the prompts of `graft run`, in order, and the tokens each gives the engine
 * (see run.h).
 *
 * First the -p values, then the lines of --prompt-file, read one at a time when the next
 * prompt is wanted, so a person typing on stdin sees each reply before writing the next
 * line. Empty lines are skipped; a line's "\n" or "\r\n" is not part of the prompt. Each
 * prompt is tokenized as a chat front end would: BOS added as the model says, control-token
 * texts ("<s>") parsed. With --chat a prompt continues the conversation: its tokens (no BOS)
 * follow every earlier prompt and reply, so the engine is given the whole conversation each
 * time, and a prefix cache finds all of it but the last reply token and the new text
 * already computed. Without any prompt, the one prompt is BOS alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

static int out_of_memory(void)
{
    graft__cli_error("run", "out of memory");
    return GRAFT_CLI_FAILED;
}

/* Appends tokens[0, n) to p->tokens. */
static int append(graft__run_prompts *p, const int32_t *tokens, size_t n)
{
    if (p->n + n > p->cap) {
        size_t cap = p->cap > 0 ? p->cap : 256;
        while (cap < p->n + n)
            cap *= 2;
        int32_t *grown = realloc(p->tokens, cap * sizeof *grown);
        if (grown == NULL)
            return out_of_memory();
        p->tokens = grown;
        p->cap = cap;
    }
    memcpy(p->tokens + p->n, tokens, n * sizeof *tokens);
    p->n += n;
    return GRAFT_CLI_OK;
}

/* The tokens of prompt `index` (*tokens freed with graft_free); none is an error. */
static int tokenize(const graft_model *model, const char *text, bool add_bos, int index,
                    int32_t **tokens, size_t *n)
{
    int rc = graft_tokenize(model, text, strlen(text), add_bos, 1, tokens, n);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot tokenize prompt %d: %s", index, graft_status_str(rc));
        return GRAFT_CLI_FAILED;
    }
    if (*n == 0) {
        graft__cli_error("run", "prompt %d gives no tokens", index);
        graft_free(*tokens);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

int graft__run_prompts_open(graft__run_prompts *p, const graft_model *model,
                            const char *const *texts, int n_texts, const char *file_name,
                            bool chat)
{
    graft_model_info info;
    graft_model_get_info(model, &info);
    *p = (graft__run_prompts){.model = model, .bos = info.bos, .texts = texts,
                              .n_texts = n_texts, .file_name = file_name, .chat = chat,
                              .bos_alone = n_texts == 0 && file_name == NULL};
    if (file_name == NULL)
        return GRAFT_CLI_OK;
    p->file = strcmp(file_name, "-") == 0 ? stdin : fopen(file_name, "r");
    if (p->file == NULL) {
        graft__cli_error("run", "cannot open '%s': %s", file_name, strerror(errno));
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

void graft__run_prompts_close(graft__run_prompts *p)
{
    if (p->file != NULL && p->file != stdin)
        fclose(p->file);
    free(p->line);
    free(p->tokens);
}

/* The next non-empty line of the file, without its line end (*more false at the end). */
static int read_line(graft__run_prompts *p, const char **text, bool *more)
{
    for (;;) {
        errno = 0;
        ssize_t len = getline(&p->line, &p->line_cap, p->file);
        if (len < 0 && ferror(p->file)) {
            graft__cli_error("run", "cannot read '%s': %s", p->file_name,
                             errno ? strerror(errno) : "read error");
            return GRAFT_CLI_FAILED;
        }
        *more = len >= 0;
        if (len < 0)
            return GRAFT_CLI_OK;
        while (len > 0 && (p->line[len - 1] == '\n' || p->line[len - 1] == '\r'))
            p->line[--len] = '\0';
        if (len > 0) {
            *text = p->line;
            return GRAFT_CLI_OK;
        }
    }
}

static int next_bos_alone(graft__run_prompts *p, const char **text, bool *more)
{
    *more = p->index == 0;
    if (!*more)
        return GRAFT_CLI_OK;
    if (p->bos < 0) {
        graft__cli_error("run", "the model has no BOS token: give a prompt with -p");
        return GRAFT_CLI_FAILED;
    }
    p->index = 1;
    *text = NULL;
    return append(p, &p->bos, 1);
}

/* The text of the next prompt, from -p, then from the file. */
static int next_text(graft__run_prompts *p, const char **text, bool *more)
{
    *more = p->next_text < p->n_texts;
    if (*more) {
        *text = p->texts[p->next_text++];
        return GRAFT_CLI_OK;
    }
    return p->file != NULL ? read_line(p, text, more) : GRAFT_CLI_OK;
}

int graft__run_prompts_next(graft__run_prompts *p, const char **text, bool *more)
{
    if (p->bos_alone)
        return next_bos_alone(p, text, more);
    int rc = next_text(p, text, more);
    if (rc != GRAFT_CLI_OK || !*more)
        return rc;
    p->index++;
    bool continues = p->chat && p->index > 1;
    if (!continues)
        p->n = 0;
    int32_t *tokens;
    size_t n;
    if (tokenize(p->model, *text, !continues, p->index, &tokens, &n) != GRAFT_CLI_OK)
        return GRAFT_CLI_FAILED;
    rc = append(p, tokens, n);
    graft_free(tokens);
    return rc;
}

int graft__run_prompts_reply(graft__run_prompts *p, const int32_t *tokens, size_t n)
{
    return p->chat ? append(p, tokens, n) : GRAFT_CLI_OK;
}

int graft__run_prompts_measure(const graft_model *model, const char *const *texts,
                               int n_texts, bool chat, int32_t n_predict, int64_t *positions,
                               int64_t *longest)
{
    int64_t total = 0;
    *longest = 1; /* BOS alone */
    for (int i = 0; i < n_texts; i++) {
        int32_t *tokens;
        size_t n;
        if (tokenize(model, texts[i], !chat || i == 0, i + 1, &tokens, &n) != GRAFT_CLI_OK)
            return GRAFT_CLI_FAILED;
        graft_free(tokens);
        *longest = i == 0 || (int64_t)n > *longest ? (int64_t)n : *longest;
        total += (int64_t)n + n_predict;
    }
    *positions = chat && n_texts > 0 ? total : *longest + n_predict;
    return GRAFT_CLI_OK;
}
