/*
 * parse_stmt.c: the statements of a template: text, `{{ }}` and the `{% %}` tags.
 *
 * Tags: if / elif / else, for (targets, `if` filter, else, recursive is refused), set (a
 * name, a tuple of names, `ns.attr`, or a block set with optional filters), macro, call
 * (with caller parameters), filter blocks, and break / continue (the loopcontrols
 * extension). Tags that need a loader or other extensions (include, import, extends,
 * block, with, do, autoescape) are syntax errors naming the tag. A block's body is parsed
 * until one of its end tags, which is left for the caller to consume.
 */
#include <string.h>

#include "template/template.h"

/* Blocks (and elif branches) nested deeper than this are a syntax error: rendering them
 * recurses as deep. */
#define MAX_NESTING 200

typedef struct stmt_parser {
    graft__tpl_parser p;
    int loop_depth; /* for loops around the statement (break / continue need one) */
} stmt_parser;

static void parse_body(stmt_parser *sp, graft__tpl_nodes *body, const char *const *ends,
                       graft__tpl_token *opener);

static void expect_block_end(stmt_parser *sp)
{
    graft__tpl_token *t = graft__tpl_peek(&sp->p);
    if (t->kind != TK_BLOCK_END)
        graft__tpl_syntax_error(&sp->p, t, "expected the end of the statement ('%%}')");
    graft__tpl_next(&sp->p);
}

/* Consumes `{% name %}` where name is the end tag parse_body stopped at. */
static graft__tpl_token *take_tag(stmt_parser *sp)
{
    graft__tpl_next(&sp->p); /* {% */
    return graft__tpl_next(&sp->p);
}

static const graft__tpl_token *tag_name_at(stmt_parser *sp)
{
    return &sp->p.t[sp->p.pos + 1];
}

/* The rest of a block tag with one end tag, after its own arguments: `%}`, the body up to
 * `{% end_tag %}`, and that tag. With outside_loops, no for loop around the tag is around
 * the body (a macro's or call block's body, which runs as a function of its own; a for
 * loop's else block), so break and continue there are errors. */
static void parse_block_body(stmt_parser *sp, graft__tpl_nodes *body, const char *end_tag,
                             graft__tpl_token *at, bool outside_loops)
{
    const char *const ends[] = {end_tag, NULL};
    expect_block_end(sp);
    int saved = sp->loop_depth;
    if (outside_loops)
        sp->loop_depth = 0;
    parse_body(sp, body, ends, at);
    sp->loop_depth = saved;
    take_tag(sp);
    expect_block_end(sp);
}

static graft__tpl_node *parse_if(stmt_parser *sp, graft__tpl_token *at)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    /* N_IF: a = condition, args = body, kwargs = else body (an elif is a nested N_IF) */
    graft__tpl_node *n = graft__tpl_new_node(&sp->p, N_IF, at);
    n->a = graft__tpl_parse_tuple(&sp->p, false, true);
    expect_block_end(sp);
    parse_body(sp, &n->args, ends, at);
    graft__tpl_token *end = take_tag(sp);
    if (graft__tpl_is_name(end, "elif")) {
        /* An elif is an if nested in the else: it counts as a level of nesting. */
        if (++sp->p.c->depth > MAX_NESTING)
            graft__tpl_syntax_error(&sp->p, end, "blocks nested too deeply");
        graft__tpl_nodes_push(&sp->p, &n->kwargs, parse_if(sp, end));
        sp->p.c->depth--;
        return n;
    }
    if (graft__tpl_is_name(end, "else")) {
        static const char *const endif[] = {"endif", NULL};
        expect_block_end(sp);
        parse_body(sp, &n->kwargs, endif, at);
        take_tag(sp);
    }
    expect_block_end(sp);
    return n;
}

static void check_target(stmt_parser *sp, graft__tpl_node *t, const graft__tpl_token *at)
{
    if (t->kind == N_NAME)
        return;
    if (t->kind == N_TUPLE) {
        for (uint32_t i = 0; i < t->args.n; i++)
            if (t->args.v[i]->kind != N_NAME)
                graft__tpl_syntax_error(&sp->p, at, "can only assign to names");
        return;
    }
    graft__tpl_syntax_error(&sp->p, at, "can only assign to names");
}

static graft__tpl_node *parse_for(stmt_parser *sp, graft__tpl_token *at)
{
    /* N_FOR: a = target, b = iterable, c = filter or NULL, args = body, kwargs = else */
    graft__tpl_node *n = graft__tpl_new_node(&sp->p, N_FOR, at);
    graft__tpl_token *target_at = graft__tpl_peek(&sp->p);
    n->a = graft__tpl_parse_tuple(&sp->p, true, false);
    check_target(sp, n->a, target_at);
    if (!graft__tpl_is_name(graft__tpl_peek(&sp->p), "in"))
        graft__tpl_syntax_error(&sp->p, graft__tpl_peek(&sp->p), "expected 'in' in a for loop");
    graft__tpl_next(&sp->p);
    n->b = graft__tpl_parse_tuple(&sp->p, false, false);
    if (graft__tpl_is_name(graft__tpl_peek(&sp->p), "if")) {
        graft__tpl_next(&sp->p);
        n->c = graft__tpl_parse_expression(&sp->p, true);
    }
    if (graft__tpl_is_name(graft__tpl_peek(&sp->p), "recursive"))
        graft__tpl_syntax_error(&sp->p, graft__tpl_peek(&sp->p),
                                "recursive for loops are not supported");
    expect_block_end(sp);
    static const char *const ends[] = {"else", "endfor", NULL};
    sp->loop_depth++;
    parse_body(sp, &n->args, ends, at);
    sp->loop_depth--;
    graft__tpl_token *end = take_tag(sp);
    if (graft__tpl_is_name(end, "else"))
        parse_block_body(sp, &n->kwargs, "endfor", at, true); /* not inside the loop */
    else
        expect_block_end(sp);
    return n;
}

static graft__tpl_node *parse_set(stmt_parser *sp, graft__tpl_token *at)
{
    graft__tpl_parser *p = &sp->p;
    graft__tpl_node *target;
    graft__tpl_token *t = graft__tpl_peek(p);
    if (t->kind == TK_NAME && graft__tpl_is_op(&p->t[p->pos + 1], ".")) {
        /* ns.attr: an N_GETATTR of an N_NAME */
        graft__tpl_next(p);
        graft__tpl_next(p);
        graft__tpl_token *attr = graft__tpl_expect_name(p);
        graft__tpl_node *ns = graft__tpl_new_node(p, N_NAME, t);
        ns->name = t->text;
        ns->name_n = t->n;
        target = graft__tpl_new_node(p, N_GETATTR, t);
        target->a = ns;
        target->name = attr->text;
        target->name_n = attr->n;
    } else {
        target = graft__tpl_parse_tuple(p, true, false);
        check_target(sp, target, t);
    }
    if (graft__tpl_is_op(graft__tpl_peek(p), "=")) {
        /* N_SET: a = target, b = value */
        graft__tpl_next(p);
        graft__tpl_node *n = graft__tpl_new_node(p, N_SET, at);
        n->a = target;
        n->b = graft__tpl_parse_tuple(p, false, true);
        expect_block_end(sp);
        return n;
    }
    /* N_SET_BLOCK: a = target, c = filter chain or NULL, args = body */
    graft__tpl_node *n = graft__tpl_new_node(p, N_SET_BLOCK, at);
    n->a = target;
    if (graft__tpl_is_op(graft__tpl_peek(p), "|"))
        n->c = graft__tpl_parse_filter(p, NULL, false);
    parse_block_body(sp, &n->args, "endset", at, false);
    return n;
}

/* `(a, b=default, ...)` of a macro or call block into params (N_KWARG: name, a = default). */
static void parse_params(stmt_parser *sp, graft__tpl_nodes *params)
{
    graft__tpl_parser *p = &sp->p;
    graft__tpl_expect_op(p, "(");
    while (!graft__tpl_is_op(graft__tpl_peek(p), ")")) {
        if (params->n)
            graft__tpl_expect_op(p, ",");
        graft__tpl_token *name = graft__tpl_expect_name(p);
        graft__tpl_node *param = graft__tpl_new_node(p, N_KWARG, name);
        param->name = name->text;
        param->name_n = name->n;
        if (graft__tpl_is_op(graft__tpl_peek(p), "=")) {
            graft__tpl_next(p);
            param->a = graft__tpl_parse_expression(p, true);
        } else {
            for (uint32_t i = 0; i < params->n; i++)
                if (params->v[i]->a != NULL)
                    graft__tpl_syntax_error(p, name,
                                            "non-default argument follows default argument");
        }
        graft__tpl_nodes_push(p, params, param);
    }
    graft__tpl_next(p);
}

static graft__tpl_node *parse_macro(stmt_parser *sp, graft__tpl_token *at)
{
    graft__tpl_parser *p = &sp->p;
    graft__tpl_token *name = graft__tpl_expect_name(p);
    /* N_MACRO: name, args = parameters (N_KWARG), kwargs = body */
    graft__tpl_node *n = graft__tpl_new_node(p, N_MACRO, at);
    n->name = name->text;
    n->name_n = name->n;
    parse_params(sp, &n->args);
    parse_block_body(sp, &n->kwargs, "endmacro", at, true);
    return n;
}

static graft__tpl_node *parse_call_block(stmt_parser *sp, graft__tpl_token *at)
{
    graft__tpl_parser *p = &sp->p;
    /* N_CALL_BLOCK: a = the call, args = caller's parameters, kwargs = body */
    graft__tpl_node *n = graft__tpl_new_node(p, N_CALL_BLOCK, at);
    if (graft__tpl_is_op(graft__tpl_peek(p), "("))
        parse_params(sp, &n->args);
    graft__tpl_token *call_at = graft__tpl_peek(p);
    n->a = graft__tpl_parse_expression(p, true);
    if (n->a->kind != N_CALL)
        graft__tpl_syntax_error(p, call_at, "expected a call");
    parse_block_body(sp, &n->kwargs, "endcall", at, true);
    return n;
}

static graft__tpl_node *parse_filter_block(stmt_parser *sp, graft__tpl_token *at)
{
    /* N_FILTER_BLOCK: a = filter chain (innermost input NULL), args = body */
    graft__tpl_node *n = graft__tpl_new_node(&sp->p, N_FILTER_BLOCK, at);
    n->a = graft__tpl_parse_filter(&sp->p, NULL, true);
    parse_block_body(sp, &n->args, "endfilter", at, false);
    return n;
}

static graft__tpl_node *parse_statement(stmt_parser *sp)
{
    graft__tpl_parser *p = &sp->p;
    graft__tpl_token *t = graft__tpl_peek(p);
    if (t->kind != TK_NAME)
        graft__tpl_syntax_error(p, t, "tag name expected");
    graft__tpl_next(p);
    static const struct {
        const char *name;
        graft__tpl_node *(*parse)(stmt_parser *sp, graft__tpl_token *at);
    } tags[] = {{"if", parse_if},       {"for", parse_for},         {"set", parse_set},
                {"macro", parse_macro}, {"call", parse_call_block}, {"filter", parse_filter_block}};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++)
        if (graft__tpl_is_name(t, tags[i].name))
            return tags[i].parse(sp, t);
    if (graft__tpl_is_name(t, "break") || graft__tpl_is_name(t, "continue")) {
        if (sp->loop_depth == 0)
            graft__tpl_syntax_error(p, t, "'%.*s' outside of a for loop", (int)t->n, t->text);
        graft__tpl_node *n =
            graft__tpl_new_node(p, graft__tpl_is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
        expect_block_end(sp);
        return n;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block",
                                              "with", "do", "autoescape", "trans"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (graft__tpl_is_name(t, unsupported[i]))
            graft__tpl_syntax_error(p, t, "the '%s' tag is not supported", unsupported[i]);
    graft__tpl_syntax_error(p, t, "encountered unknown tag '%.*s'", (int)t->n, t->text);
}

static bool is_end_tag(const graft__tpl_token *t, const char *const *ends)
{
    for (; ends != NULL && *ends != NULL; ends++)
        if (graft__tpl_is_name(t, *ends))
            return true;
    return false;
}

static void parse_body(stmt_parser *sp, graft__tpl_nodes *body, const char *const *ends,
                       graft__tpl_token *opener)
{
    graft__tpl_parser *p = &sp->p;
    if (++p->c->depth > MAX_NESTING)
        graft__tpl_syntax_error(p, opener, "blocks nested too deeply");
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        switch (t->kind) {
        case TK_EOF:
            if (ends != NULL) {
                const char *const *last = ends;
                while (last[1] != NULL)
                    last++;
                graft__tpl_syntax_error(p, opener,
                                        "unexpected end of template: the '%.*s' block is "
                                        "not closed (expected '%s')",
                                        (int)opener->n, opener->text, *last);
            }
            p->c->depth--;
            return;
        case TK_TEXT: {
            graft__tpl_next(p);
            /* N_TEXT: value = the text */
            graft__tpl_node *n = graft__tpl_new_node(p, N_TEXT, t);
            n->value = graft__tpl_str(t->text, t->n);
            graft__tpl_nodes_push(p, body, n);
            break;
        }
        case TK_VAR_BEGIN: {
            graft__tpl_next(p);
            /* N_OUTPUT: a = the expression */
            graft__tpl_node *n = graft__tpl_new_node(p, N_OUTPUT, t);
            n->a = graft__tpl_parse_tuple(p, false, true);
            graft__tpl_token *end = graft__tpl_peek(p);
            if (end->kind != TK_VAR_END)
                graft__tpl_syntax_error(p, end, "expected the end of the print statement ('}}')");
            graft__tpl_next(p);
            graft__tpl_nodes_push(p, body, n);
            break;
        }
        case TK_BLOCK_BEGIN: {
            const graft__tpl_token *name = tag_name_at(sp);
            if (is_end_tag(name, ends)) {
                p->c->depth--;
                return;
            }
            graft__tpl_next(p);
            graft__tpl_nodes_push(p, body, parse_statement(sp));
            break;
        }
        default:
            graft__tpl_syntax_error(p, t, "unexpected token");
        }
    }
}

void graft__tpl_parse(graft__tpl_ctx *c, const char *src, size_t n, graft__tpl_nodes *body)
{
    stmt_parser sp = {{c, NULL, 0, 0}, 0};
    graft__tpl_lex(c, src, n, &sp.p.t, &sp.p.n);
    body->v = NULL;
    body->n = 0;
    parse_body(&sp, body, NULL, NULL);
}
