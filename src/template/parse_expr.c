/*
 * parse_expr.c: the expression grammar of Jinja, as jinja2's parser has it.
 *
 * From loosest to tightest: conditional (`a if c else b`, else optional), or, and, not,
 * comparisons (chained; `in`, `not in`), + and -, `~`, * / // %, ** (left-associative, as
 * in jinja2), unary - and +, then a primary (literal, name, parenthesised expression or
 * tuple, list, dict) with postfix attribute, subscript, slice and call, then filters
 * (`|name(args)`) and tests (`is [not] name args`). Filters and tests are resolved to their
 * table entries here, so an unknown one is a syntax error with its line and column.
 * Node fields per kind are noted at each constructor below.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/template.h"

#define MAX_EXPR_DEPTH 200

graft__tpl_token *graft__tpl_peek(graft__tpl_parser *p)
{
    return &p->t[p->pos];
}

graft__tpl_token *graft__tpl_next(graft__tpl_parser *p)
{
    graft__tpl_token *t = &p->t[p->pos];
    if (t->kind != TK_EOF)
        p->pos++;
    return t;
}

bool graft__tpl_is_op(const graft__tpl_token *t, const char *op)
{
    return t->kind == TK_OP && t->n == strlen(op) && memcmp(t->text, op, t->n) == 0;
}

bool graft__tpl_is_name(const graft__tpl_token *t, const char *name)
{
    return t->kind == TK_NAME && t->n == strlen(name) && memcmp(t->text, name, t->n) == 0;
}

static const char *describe(const graft__tpl_token *t, char *buf, size_t size)
{
    switch (t->kind) {
    case TK_EOF:
        return "end of template";
    case TK_VAR_END:
        return "'}}'";
    case TK_BLOCK_END:
        return "'%}'";
    case TK_STRING:
        return "string";
    case TK_INT:
    case TK_FLOAT:
        return "number";
    case TK_TEXT:
        return "text";
    default:
        snprintf(buf, size, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->text);
        return buf;
    }
}

_Noreturn void graft__tpl_syntax_error(graft__tpl_parser *p, const graft__tpl_token *at,
                                       const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    graft__tpl_fail(p->c, GRAFT_EFORMAT, at->line, at->col, "TemplateSyntaxError: %s", msg);
}

graft__tpl_token *graft__tpl_expect_op(graft__tpl_parser *p, const char *op)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    if (!graft__tpl_is_op(t, op)) {
        char buf[64];
        graft__tpl_syntax_error(p, t, "expected '%s', got %s", op, describe(t, buf, sizeof buf));
    }
    return graft__tpl_next(p);
}

graft__tpl_token *graft__tpl_expect_name(graft__tpl_parser *p)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    if (t->kind != TK_NAME) {
        char buf[64];
        graft__tpl_syntax_error(p, t, "expected a name, got %s", describe(t, buf, sizeof buf));
    }
    return graft__tpl_next(p);
}

graft__tpl_node *graft__tpl_new_node(graft__tpl_parser *p, int kind, const graft__tpl_token *at)
{
    graft__tpl_node *n = graft__tpl_alloc(p->c, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

void graft__tpl_nodes_push(graft__tpl_parser *p, graft__tpl_nodes *list, graft__tpl_node *n)
{
    /* Capacity is the next power of two at or above the count. */
    if ((list->n & (list->n - 1)) == 0 && (list->n == 0 || list->n >= 4)) {
        uint32_t cap = list->n == 0 ? 4 : list->n * 2;
        graft__tpl_node **v = graft__tpl_alloc(p->c, cap * sizeof *v);
        if (list->n)
            memcpy(v, list->v, list->n * sizeof *v);
        list->v = v;
    }
    list->v[list->n++] = n;
}

static graft__tpl_node *parse_or(graft__tpl_parser *p);
static graft__tpl_node *parse_unary(graft__tpl_parser *p, bool with_filter);
static graft__tpl_node *parse_postfix(graft__tpl_parser *p, graft__tpl_node *n);
static graft__tpl_node *parse_filter_expr(graft__tpl_parser *p, graft__tpl_node *n);

static void enter(graft__tpl_parser *p, const graft__tpl_token *at)
{
    if (++p->c->depth > MAX_EXPR_DEPTH)
        graft__tpl_syntax_error(p, at, "expression nested too deeply");
}

graft__tpl_node *graft__tpl_parse_expression(graft__tpl_parser *p, bool with_condexpr)
{
    enter(p, graft__tpl_peek(p));
    graft__tpl_node *expr1 = parse_or(p);
    while (with_condexpr && graft__tpl_is_name(graft__tpl_peek(p), "if")) {
        /* N_CONDEXPR: a = value when true, b = condition, c = value when false or NULL */
        graft__tpl_node *n = graft__tpl_new_node(p, N_CONDEXPR, graft__tpl_next(p));
        n->a = expr1;
        n->b = parse_or(p);
        if (graft__tpl_is_name(graft__tpl_peek(p), "else")) {
            graft__tpl_next(p);
            n->c = graft__tpl_parse_expression(p, true);
        }
        expr1 = n;
    }
    p->c->depth--;
    return expr1;
}

static graft__tpl_node *binary(graft__tpl_parser *p, int kind, int op, graft__tpl_token *at,
                               graft__tpl_node *a, graft__tpl_node *b)
{
    graft__tpl_node *n = graft__tpl_new_node(p, kind, at);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static graft__tpl_node *parse_not(graft__tpl_parser *p);

static graft__tpl_node *parse_and(graft__tpl_parser *p)
{
    graft__tpl_node *left = parse_not(p);
    while (graft__tpl_is_name(graft__tpl_peek(p), "and")) {
        graft__tpl_token *at = graft__tpl_next(p);
        left = binary(p, N_AND, 0, at, left, parse_not(p));
    }
    return left;
}

static graft__tpl_node *parse_or(graft__tpl_parser *p)
{
    graft__tpl_node *left = parse_and(p);
    while (graft__tpl_is_name(graft__tpl_peek(p), "or")) {
        graft__tpl_token *at = graft__tpl_next(p);
        left = binary(p, N_OR, 0, at, left, parse_and(p));
    }
    return left;
}

static graft__tpl_node *parse_compare(graft__tpl_parser *p);

static graft__tpl_node *parse_not(graft__tpl_parser *p)
{
    if (graft__tpl_is_name(graft__tpl_peek(p), "not")) {
        graft__tpl_token *at = graft__tpl_next(p);
        enter(p, at);
        graft__tpl_node *n = binary(p, N_NOT, 0, at, parse_not(p), NULL);
        p->c->depth--;
        return n;
    }
    return parse_compare(p);
}

static graft__tpl_node *parse_math1(graft__tpl_parser *p);

static int compare_op(graft__tpl_parser *p)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const int codes[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
    for (int i = 0; i < 6; i++)
        if (graft__tpl_is_op(t, ops[i]))
            return codes[i];
    if (graft__tpl_is_name(t, "in"))
        return OP_IN;
    if (graft__tpl_is_name(t, "not") && graft__tpl_is_name(&p->t[p->pos + 1], "in"))
        return OP_NOTIN;
    return -1;
}

static graft__tpl_node *parse_compare(graft__tpl_parser *p)
{
    graft__tpl_token *start = graft__tpl_peek(p);
    graft__tpl_node *expr = parse_math1(p);
    graft__tpl_node *cmp = NULL;
    int op;
    while ((op = compare_op(p)) >= 0) {
        /* N_COMPARE: a = first operand; args = N_KWARG nodes, each an op and operand a */
        graft__tpl_token *at = graft__tpl_next(p);
        if (op == OP_NOTIN)
            graft__tpl_next(p);
        if (cmp == NULL) {
            cmp = graft__tpl_new_node(p, N_COMPARE, start);
            cmp->a = expr;
        }
        graft__tpl_node *operand = binary(p, N_KWARG, op, at, parse_math1(p), NULL);
        graft__tpl_nodes_push(p, &cmp->args, operand);
    }
    return cmp ? cmp : expr;
}

static graft__tpl_node *parse_concat(graft__tpl_parser *p);

static graft__tpl_node *parse_math1(graft__tpl_parser *p)
{
    graft__tpl_node *left = parse_concat(p);
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        int op = graft__tpl_is_op(t, "+") ? OP_ADD : graft__tpl_is_op(t, "-") ? OP_SUB : -1;
        if (op < 0)
            return left;
        graft__tpl_next(p);
        left = binary(p, N_BINOP, op, t, left, parse_concat(p));
    }
}

static graft__tpl_node *parse_math2(graft__tpl_parser *p);

static graft__tpl_node *parse_concat(graft__tpl_parser *p)
{
    graft__tpl_token *start = graft__tpl_peek(p);
    graft__tpl_node *first = parse_math2(p);
    if (!graft__tpl_is_op(graft__tpl_peek(p), "~"))
        return first;
    /* N_CONCAT: args = the operands */
    graft__tpl_node *n = graft__tpl_new_node(p, N_CONCAT, start);
    graft__tpl_nodes_push(p, &n->args, first);
    while (graft__tpl_is_op(graft__tpl_peek(p), "~")) {
        graft__tpl_next(p);
        graft__tpl_nodes_push(p, &n->args, parse_math2(p));
    }
    return n;
}

static graft__tpl_node *parse_pow(graft__tpl_parser *p);

static graft__tpl_node *parse_math2(graft__tpl_parser *p)
{
    graft__tpl_node *left = parse_pow(p);
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        int op = graft__tpl_is_op(t, "*")    ? OP_MUL
                 : graft__tpl_is_op(t, "/")  ? OP_DIV
                 : graft__tpl_is_op(t, "//") ? OP_FLOORDIV
                 : graft__tpl_is_op(t, "%")  ? OP_MOD
                                             : -1;
        if (op < 0)
            return left;
        graft__tpl_next(p);
        left = binary(p, N_BINOP, op, t, left, parse_pow(p));
    }
}

static graft__tpl_node *parse_pow(graft__tpl_parser *p)
{
    graft__tpl_node *left = parse_unary(p, true);
    while (graft__tpl_is_op(graft__tpl_peek(p), "**")) {
        graft__tpl_token *t = graft__tpl_next(p);
        left = binary(p, N_BINOP, OP_POW, t, left, parse_unary(p, true));
    }
    return left;
}

static graft__tpl_node *parse_primary(graft__tpl_parser *p);

static graft__tpl_node *parse_unary(graft__tpl_parser *p, bool with_filter)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    graft__tpl_node *n;
    enter(p, t);
    if (graft__tpl_is_op(t, "-") || graft__tpl_is_op(t, "+")) {
        /* N_NEG, N_POS: a = operand */
        graft__tpl_next(p);
        n = binary(p, graft__tpl_is_op(t, "-") ? N_NEG : N_POS, 0, t, parse_unary(p, false),
                   NULL);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->c->depth--;
    return n;
}

static bool is_tuple_end(graft__tpl_parser *p, const char *extra_end)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    return t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || t->kind == TK_EOF ||
           graft__tpl_is_op(t, ")") || (extra_end && graft__tpl_is_name(t, extra_end));
}

static graft__tpl_node *parse_tuple_ex(graft__tpl_parser *p, bool simplified,
                                       bool with_condexpr, bool explicit_parens,
                                       const char *extra_end)
{
    graft__tpl_token *start = graft__tpl_peek(p);
    /* N_TUPLE: args = items */
    graft__tpl_node *tuple = graft__tpl_new_node(p, N_TUPLE, start);
    bool is_tuple = false;
    for (;;) {
        if (tuple->args.n)
            graft__tpl_expect_op(p, ",");
        if (is_tuple_end(p, extra_end))
            break;
        graft__tpl_node *item = simplified ? parse_primary(p)
                                           : graft__tpl_parse_expression(p, with_condexpr);
        graft__tpl_nodes_push(p, &tuple->args, item);
        if (graft__tpl_is_op(graft__tpl_peek(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (tuple->args.n)
            return tuple->args.v[0];
        if (!explicit_parens) {
            char buf[64];
            graft__tpl_token *t = graft__tpl_peek(p);
            graft__tpl_syntax_error(p, t, "expected an expression, got %s",
                                    describe(t, buf, sizeof buf));
        }
    }
    return tuple;
}

graft__tpl_node *graft__tpl_parse_tuple(graft__tpl_parser *p, bool simplified,
                                        bool with_condexpr)
{
    return parse_tuple_ex(p, simplified, with_condexpr, false, simplified ? "in" : NULL);
}

static graft__tpl_node *constant(graft__tpl_parser *p, const graft__tpl_token *at, tval v)
{
    /* N_CONST: value */
    graft__tpl_node *n = graft__tpl_new_node(p, N_CONST, at);
    n->value = v;
    return n;
}

static graft__tpl_node *parse_list_or_dict(graft__tpl_parser *p, graft__tpl_token *open)
{
    bool dict = graft__tpl_is_op(open, "{");
    const char *close = dict ? "}" : "]";
    /* N_LIST: args = items. N_DICT: args = keys, kwargs = values */
    graft__tpl_node *n = graft__tpl_new_node(p, dict ? N_DICT : N_LIST, open);
    while (!graft__tpl_is_op(graft__tpl_peek(p), close)) {
        if (n->args.n)
            graft__tpl_expect_op(p, ",");
        if (graft__tpl_is_op(graft__tpl_peek(p), close))
            break;
        graft__tpl_nodes_push(p, &n->args, graft__tpl_parse_expression(p, true));
        if (dict) {
            graft__tpl_expect_op(p, ":");
            graft__tpl_nodes_push(p, &n->kwargs, graft__tpl_parse_expression(p, true));
        }
    }
    graft__tpl_expect_op(p, close);
    return n;
}

static graft__tpl_node *parse_primary(graft__tpl_parser *p)
{
    graft__tpl_token *t = graft__tpl_peek(p);
    switch (t->kind) {
    case TK_NAME:
        graft__tpl_next(p);
        if (graft__tpl_is_name(t, "true") || graft__tpl_is_name(t, "True"))
            return constant(p, t, graft__tpl_bool(true));
        if (graft__tpl_is_name(t, "false") || graft__tpl_is_name(t, "False"))
            return constant(p, t, graft__tpl_bool(false));
        if (graft__tpl_is_name(t, "none") || graft__tpl_is_name(t, "None"))
            return constant(p, t, graft__tpl_none());
        {
            /* N_NAME: name */
            graft__tpl_node *n = graft__tpl_new_node(p, N_NAME, t);
            n->name = t->text;
            n->name_n = t->n;
            return n;
        }
    case TK_STRING: {
        graft__tpl_next(p);
        if (graft__tpl_peek(p)->kind != TK_STRING)
            return constant(p, t, graft__tpl_str(t->text, t->n));
        graft__tpl_buf b = {0};
        graft__tpl_buf_add(p->c, &b, t->text, t->n);
        while (graft__tpl_peek(p)->kind == TK_STRING) {
            graft__tpl_token *more = graft__tpl_next(p);
            graft__tpl_buf_add(p->c, &b, more->text, more->n);
        }
        return constant(p, t, graft__tpl_str(b.p ? b.p : "", b.n));
    }
    case TK_INT:
        graft__tpl_next(p);
        return constant(p, t, graft__tpl_int(t->i));
    case TK_FLOAT:
        graft__tpl_next(p);
        return constant(p, t, graft__tpl_float(t->f));
    default:
        break;
    }
    if (graft__tpl_is_op(t, "(")) {
        graft__tpl_next(p);
        graft__tpl_node *n = parse_tuple_ex(p, false, true, true, NULL);
        graft__tpl_expect_op(p, ")");
        return n;
    }
    if (graft__tpl_is_op(t, "[") || graft__tpl_is_op(t, "{"))
        return parse_list_or_dict(p, graft__tpl_next(p));
    char buf[64];
    graft__tpl_syntax_error(p, t, "unexpected %s", describe(t, buf, sizeof buf));
}

/* Arguments of a call, filter or test, after its '(': positional into args, name=value
 * into kwargs (N_KWARG: name, a = value). */
static void parse_call_args(graft__tpl_parser *p, graft__tpl_node *n)
{
    while (!graft__tpl_is_op(graft__tpl_peek(p), ")")) {
        if (n->args.n || n->kwargs.n)
            graft__tpl_expect_op(p, ",");
        graft__tpl_token *t = graft__tpl_peek(p);
        if (graft__tpl_is_op(t, ")"))
            break;
        if (graft__tpl_is_op(t, "*") || graft__tpl_is_op(t, "**"))
            graft__tpl_syntax_error(p, t, "*args and **kwargs in calls are not supported");
        if (t->kind == TK_NAME && graft__tpl_is_op(&p->t[p->pos + 1], "=")) {
            graft__tpl_next(p);
            graft__tpl_next(p);
            graft__tpl_node *kw = graft__tpl_new_node(p, N_KWARG, t);
            kw->name = t->text;
            kw->name_n = t->n;
            kw->a = graft__tpl_parse_expression(p, true);
            graft__tpl_nodes_push(p, &n->kwargs, kw);
        } else {
            if (n->kwargs.n)
                graft__tpl_syntax_error(p, t, "positional argument follows keyword argument");
            graft__tpl_nodes_push(p, &n->args, graft__tpl_parse_expression(p, true));
        }
    }
    graft__tpl_expect_op(p, ")");
}

static graft__tpl_node *parse_subscript(graft__tpl_parser *p, graft__tpl_node *obj,
                                        graft__tpl_token *open)
{
    /* N_GETITEM: a = object, b = key or N_SLICE (a, b, c = start, stop, step or NULL) */
    graft__tpl_node *n = graft__tpl_new_node(p, N_GETITEM, open);
    n->a = obj;
    graft__tpl_node *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        if (graft__tpl_is_op(t, ":")) {
            if (k == 2)
                graft__tpl_syntax_error(p, t, "too many ':' in a slice");
            slice = true;
            k++;
            graft__tpl_next(p);
            continue;
        }
        if (graft__tpl_is_op(t, "]"))
            break;
        if (parts[k] != NULL)
            graft__tpl_expect_op(p, "]");
        parts[k] = graft__tpl_parse_expression(p, true);
    }
    graft__tpl_expect_op(p, "]");
    if (!slice) {
        if (parts[0] == NULL)
            graft__tpl_syntax_error(p, open, "expected a subscript");
        n->b = parts[0];
    } else {
        graft__tpl_node *s = graft__tpl_new_node(p, N_SLICE, open);
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
        n->b = s;
    }
    return n;
}

/* A call of callee, at its `(`. N_CALL: a = callee, args, kwargs; placed at the callee. */
static graft__tpl_node *parse_call(graft__tpl_parser *p, graft__tpl_node *callee)
{
    graft__tpl_node *call = graft__tpl_new_node(p, N_CALL, graft__tpl_next(p));
    call->a = callee;
    call->line = callee->line;
    call->col = callee->col;
    parse_call_args(p, call);
    return call;
}

static graft__tpl_node *parse_postfix(graft__tpl_parser *p, graft__tpl_node *n)
{
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        if (graft__tpl_is_op(t, ".")) {
            graft__tpl_next(p);
            graft__tpl_token *attr = graft__tpl_peek(p);
            if (attr->kind == TK_INT) {
                graft__tpl_next(p);
                graft__tpl_node *g = graft__tpl_new_node(p, N_GETITEM, t);
                g->a = n;
                g->b = constant(p, attr, graft__tpl_int(attr->i));
                n = g;
                continue;
            }
            attr = graft__tpl_expect_name(p);
            /* N_GETATTR: a = object, name = attribute */
            graft__tpl_node *g = graft__tpl_new_node(p, N_GETATTR, t);
            g->a = n;
            g->name = attr->text;
            g->name_n = attr->n;
            n = g;
        } else if (graft__tpl_is_op(t, "[")) {
            n = parse_subscript(p, n, graft__tpl_next(p));
        } else if (graft__tpl_is_op(t, "(")) {
            n = parse_call(p, n);
        } else {
            return n;
        }
    }
}

/* A dotted name after `|` or `is`: "name" or "name.sub". */
static graft__tpl_token *parse_dotted(graft__tpl_parser *p, char *buf, size_t size)
{
    graft__tpl_token *t = graft__tpl_expect_name(p);
    snprintf(buf, size, "%.*s", (int)t->n, t->text);
    while (graft__tpl_is_op(graft__tpl_peek(p), ".")) {
        graft__tpl_next(p);
        graft__tpl_token *more = graft__tpl_expect_name(p);
        size_t k = strlen(buf);
        snprintf(buf + k, size - k, ".%.*s", (int)more->n, more->text);
    }
    return t;
}

/* The node of the filter (is NULL) or test (after `is`, where the node is placed) named next:
 * a = input, id = its index in the filter or test table, name. An unknown name is a syntax
 * error. Its arguments are left to the caller. */
static graft__tpl_node *parse_filter_or_test(graft__tpl_parser *p, graft__tpl_node *input,
                                             graft__tpl_token *is)
{
    char name[128];
    graft__tpl_token *t = parse_dotted(p, name, sizeof name);
    int id = is == NULL ? graft__tpl_filter_id(name, strlen(name))
                        : graft__tpl_test_id(name, strlen(name));
    if (id < 0)
        graft__tpl_syntax_error(p, t, "no %s named '%s'", is == NULL ? "filter" : "test", name);
    graft__tpl_node *n = graft__tpl_new_node(p, is == NULL ? N_FILTER : N_TEST, is ? is : t);
    n->a = input;
    n->id = (uint16_t)id;
    n->name = t->text;
    n->name_n = t->n;
    return n;
}

graft__tpl_node *graft__tpl_parse_filter(graft__tpl_parser *p, graft__tpl_node *input,
                                         bool start_inline)
{
    graft__tpl_node *n = input;
    while (start_inline || graft__tpl_is_op(graft__tpl_peek(p), "|")) {
        if (!start_inline)
            graft__tpl_next(p);
        start_inline = false;
        /* N_FILTER: a = input (NULL in a filter block), id, name, args, kwargs */
        graft__tpl_node *f = parse_filter_or_test(p, n, NULL);
        if (graft__tpl_is_op(graft__tpl_peek(p), "(")) {
            graft__tpl_next(p);
            parse_call_args(p, f);
        }
        n = f;
    }
    return n;
}

static graft__tpl_node *parse_test(graft__tpl_parser *p, graft__tpl_node *input)
{
    graft__tpl_token *is = graft__tpl_next(p);
    bool negated = false;
    if (graft__tpl_is_name(graft__tpl_peek(p), "not")) {
        graft__tpl_next(p);
        negated = true;
    }
    /* N_TEST: a = input, id, name, args, kwargs */
    graft__tpl_node *n = parse_filter_or_test(p, input, is);
    graft__tpl_token *cur = graft__tpl_peek(p);
    if (graft__tpl_is_op(cur, "(")) {
        graft__tpl_next(p);
        parse_call_args(p, n);
    } else if ((cur->kind == TK_NAME || cur->kind == TK_STRING || cur->kind == TK_INT ||
                cur->kind == TK_FLOAT || graft__tpl_is_op(cur, "[") ||
                graft__tpl_is_op(cur, "{")) &&
               !graft__tpl_is_name(cur, "else") && !graft__tpl_is_name(cur, "or") &&
               !graft__tpl_is_name(cur, "and")) {
        if (graft__tpl_is_name(cur, "is"))
            graft__tpl_syntax_error(p, cur, "you cannot chain multiple tests with is");
        graft__tpl_nodes_push(p, &n->args, parse_postfix(p, parse_primary(p)));
    }
    if (negated) {
        graft__tpl_node *no = graft__tpl_new_node(p, N_NOT, is);
        no->a = n;
        return no;
    }
    return n;
}

static graft__tpl_node *parse_filter_expr(graft__tpl_parser *p, graft__tpl_node *n)
{
    for (;;) {
        graft__tpl_token *t = graft__tpl_peek(p);
        if (graft__tpl_is_op(t, "|")) {
            n = graft__tpl_parse_filter(p, n, false);
        } else if (graft__tpl_is_name(t, "is")) {
            n = parse_test(p, n);
        } else if (graft__tpl_is_op(t, "(")) {
            n = parse_call(p, n);
        } else {
            return n;
        }
    }
}
