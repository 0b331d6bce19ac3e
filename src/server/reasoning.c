/*
 * reasoning.c: a thinking model's thought in its generated text (server.h).
 *
 * Thinking models (Qwen3, QwQ, DeepSeek-R1, GLM-4.6, SmolLM3, Command R7B) write a thought
 * between two tags before their answer, and their chat templates say which: a template
 * that mentions a pair's closing tag belongs to such a model. The answer's text is split
 * as llama-server's "deepseek" reasoning format does: the thought, white space stripped at
 * both ends, is the message's reasoning_content; the content begins after the closing tag
 * and the white space that follows it. A thought begins where the prompt opened it (the
 * generation prompt ends with the opening tag) or where the text opens it first, after
 * white space only; text that begins otherwise has no thought. A thought cut short (a stop
 * string, max_tokens) is all there is: the content is empty.
 *
 * The split follows the text as it grows, so that a stream can give out the thought and
 * the content as they come: what may still grow into a tag, and white space at the
 * thought's end and before the content, is held back until the next bytes decide it.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static const graft__reasoning_tags known_tags[] = {
    {"<think>", "</think>"},
    {"<|START_THINKING|>", "<|END_THINKING|>"},
};

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

const graft__reasoning_tags *graft__reasoning_tags_of(const char *template_text)
{
    for (size_t i = 0; i < sizeof known_tags / sizeof known_tags[0]; i++)
        if (template_text != NULL && strstr(template_text, known_tags[i].close) != NULL)
            return &known_tags[i];
    return NULL;
}

/* Where text[from, to) ends without its trailing white space. */
static size_t trimmed_end(const char *text, size_t from, size_t to)
{
    while (to > from && is_space(text[to - 1]))
        to--;
    return to;
}

/* Whether the prompt ends with tag and white space. */
static bool ends_with(const char *prompt, const char *tag)
{
    size_t n = strlen(tag), end = trimmed_end(prompt, 0, strlen(prompt));
    return end >= n && memcmp(prompt + end - n, tag, n) == 0;
}

bool graft__reasoning_opened(const graft__reasoning_tags *tags, const char *prompt)
{
    return ends_with(prompt, tags->open);
}

bool graft__reasoning_closed(const graft__reasoning_tags *tags, const char *prompt)
{
    return ends_with(prompt, tags->close);
}

int graft__reasoning_close(const graft__reasoning_tags *tags, char **prompt)
{
    size_t end = trimmed_end(*prompt, 0, strlen(*prompt)), n = strlen(tags->close);
    char *text = realloc(*prompt, end + n + 5);
    if (text == NULL)
        return GRAFT_ENOMEM;
    memcpy(text + end, "\n\n", 2);
    memcpy(text + end + 2, tags->close, n);
    memcpy(text + end + 2 + n, "\n\n", 3);
    *prompt = text;
    return GRAFT_OK;
}

void graft__reasoning_start(graft__reasoning *t, const graft__reasoning_tags *tags, bool opened)
{
    *t = (graft__reasoning){.tags = tags};
    t->state = tags == NULL ? GRAFT__THOUGHT_NONE
               : opened     ? GRAFT__THOUGHT_OPEN
                            : GRAFT__THOUGHT_UNDECIDED;
}

size_t graft__tail_start(const char *text, size_t len, const char *tag)
{
    for (size_t k = strlen(tag) - 1; k > 0; k--)
        if (k <= len && memcmp(text + len - k, tag, k) == 0)
            return len - k;
    return len;
}

size_t graft__reasoning_scan(graft__reasoning *t, const char *text, size_t len, bool final)
{
    if (t->state == GRAFT__THOUGHT_UNDECIDED) {
        size_t i = 0, n = strlen(t->tags->open);
        while (i < len && is_space(text[i]))
            i++;
        size_t have = len - i < n ? len - i : n;
        if (memcmp(text + i, t->tags->open, have) != 0 || (have < n && final)) {
            t->state = GRAFT__THOUGHT_NONE;
        } else if (have < n) {
            return 0; /* white space, and perhaps the opening tag's start */
        } else {
            t->state = GRAFT__THOUGHT_OPEN;
            t->begin = t->end = i + n;
        }
    }
    if (t->state == GRAFT__THOUGHT_NONE)
        return len;
    /* A stop string may have cut the text since (even inside a tag already seen). */
    t->begin = t->begin < len ? t->begin : len;
    t->end = t->end < len ? t->end : len;
    t->content = t->content < len ? t->content : len;
    if (t->state == GRAFT__THOUGHT_OPEN) {
        size_t n = strlen(t->tags->close);
        const char *hit = memmem(text + t->end, len - t->end, t->tags->close, n);
        if (hit == NULL) {
            t->end += graft__tail_start(text + t->end, len - t->end, t->tags->close);
            return final ? len : t->end;
        }
        t->state = GRAFT__THOUGHT_CLOSED;
        t->end = (size_t)(hit - text);
        t->content = t->end + n;
    }
    while (t->content < len && is_space(text[t->content]))
        t->content++;
    return len;
}

size_t graft__reasoning_content_start(const graft__reasoning *t, size_t len)
{
    if (t->state == GRAFT__THOUGHT_NONE)
        return 0;
    if (t->state == GRAFT__THOUGHT_CLOSED)
        return t->content < len ? t->content : len;
    return len;
}

void graft__reasoning_span(const graft__reasoning *t, const char *text, size_t upto,
                           size_t *from, size_t *to)
{
    *from = *to = 0;
    if (t->state != GRAFT__THOUGHT_OPEN && t->state != GRAFT__THOUGHT_CLOSED)
        return;
    size_t end = t->state == GRAFT__THOUGHT_CLOSED && t->end < upto ? t->end : upto;
    size_t begin = t->begin < end ? t->begin : end;
    while (begin < end && is_space(text[begin]))
        begin++;
    *from = begin;
    *to = trimmed_end(text, begin, end);
}
