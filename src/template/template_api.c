/*
 * template_api.c: graft_template_* of include/graft.h: parse once, render many times.
 *
 * Parsing normalizes newlines as jinja2 does (\r\n and \r become \n, and one trailing
 * newline is dropped: keep_trailing_newline is off) and keeps the AST in the template's
 * arena. A render makes its own context and arena, so one parsed template may be rendered
 * from many threads at once. Both entry points set up the jump target the layer's errors
 * return to (template.h) and free everything on the way out.
 */
#include <string.h>

#include "template/template.h"

struct graft_template {
    graft__tpl_arena arena;
    graft__tpl_nodes body;
};

#define DEFAULT_MAX_OUTPUT ((size_t)16 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define DEFAULT_MAX_STEPS 1000000u
#define DEFAULT_MAX_DEPTH 100

/* ChatML. An assistant message that only calls tools has no content (null in OpenAI's
 * shape): it renders as an empty turn rather than failing. */
static const char chatml[] =
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

const char *graft_template_default(void)
{
    return chatml;
}

/* The error of a context as the caller's message and status. */
static int report(graft__tpl_ctx *c, char **errmsg)
{
    return graft__errmsg(errmsg, c->status, "%s", c->message);
}

int graft_template_parse(const char *text, size_t len, graft_template **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || (text == NULL && len > 0))
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_template_parse: NULL argument");
    *out = NULL;
    graft_template *t = graft__calloc(1, sizeof *t);
    if (t == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "template: out of memory");
    graft__tpl_ctx *c = graft__calloc(1, sizeof *c);
    if (c == NULL) {
        graft__free(t);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "template: out of memory");
    }
    c->arena = &t->arena;
    if (setjmp(c->jump) != 0) {
        int rc = report(c, errmsg);
        graft__tpl_arena_free(&t->arena);
        graft__free(t);
        graft__free(c);
        return rc;
    }
    char *src = graft__tpl_alloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n')
                i++;
        } else {
            src[n++] = text[i];
        }
    }
    if (n > 0 && src[n - 1] == '\n')
        n--;
    graft__tpl_parse(c, src, n, &t->body);
    graft__free(c);
    *out = t;
    return GRAFT_OK;
}

void graft_template_free(graft_template *tmpl)
{
    if (tmpl == NULL)
        return;
    graft__tpl_arena_free(&tmpl->arena);
    graft__free(tmpl);
}

/* What a render needs that must survive the jump back to its entry point: in the heap,
 * not in the entry point's locals. */
typedef struct render_state {
    graft__tpl_ctx c;
    graft__tpl_arena arena;
    graft__tpl_buf result;
} render_state;

int graft_template_render(const graft_template *tmpl, const char *json, size_t json_len,
                          const graft_template_options *opts, char **out, size_t *out_len,
                          char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (out == NULL || tmpl == NULL || json == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "graft_template_render: NULL argument");
    *out = NULL;
    if (out_len)
        *out_len = 0;
    graft_template_options o = {0};
    if (opts != NULL)
        o = *opts;
    render_state *st = graft__calloc(1, sizeof *st);
    if (st == NULL)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "template: out of memory");
    graft__tpl_ctx *c = &st->c;
    st->arena.limit_bytes = o.max_memory ? o.max_memory : DEFAULT_MAX_MEMORY;
    c->arena = &st->arena;
    c->max_steps = o.max_steps ? o.max_steps : DEFAULT_MAX_STEPS;
    c->max_depth = o.max_depth > 0 ? o.max_depth : DEFAULT_MAX_DEPTH;
    c->max_output = o.max_output ? o.max_output : DEFAULT_MAX_OUTPUT;
    graft__tpl_render r = {c, &st->result, o.now};
    if (setjmp(c->jump) != 0) {
        int rc = report(c, errmsg);
        graft__tpl_json_release(c);
        graft__tpl_arena_free(&st->arena);
        graft__free(st);
        return rc;
    }
    tval vars = graft__tpl_from_json(c, json, json_len);
    if (vars.kind != TV_DICT)
        graft__tpl_fail(c, GRAFT_EINVAL, 0, 0, "input: the JSON must be an object of variables");
    graft__tpl_render_body(&r, &tmpl->body, vars);
    char *text = graft__malloc(st->result.n + 1);
    if (text == NULL)
        graft__tpl_fail(c, GRAFT_ENOMEM, 0, 0, "template: out of memory");
    if (st->result.n)
        memcpy(text, st->result.p, st->result.n);
    text[st->result.n] = '\0';
    *out = text;
    if (out_len)
        *out_len = st->result.n;
    graft__tpl_arena_free(&st->arena);
    graft__free(st);
    return GRAFT_OK;
}
