/*
 * template.h: the template layer: a Jinja interpreter for the chat templates GGUF models
 * carry (tokenizer.chat_template), rendering them byte for byte as Python's jinja2 does in
 * the setup Hugging Face uses (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loopcontrols; see ../shared/templates/README.md). It sits on util only; the public entry
 * points are graft_template_* in include/graft.h (template_api.c).
 *
 * Pipeline: lexer.c turns the text into tokens (whitespace control applied to the text
 * between tags), parse_stmt.c and parse_expr.c build an AST, and render.c walks it with
 * eval.c evaluating expressions over JSON-like values (value.c; Python's str() and repr()
 * in value_str.c; JSON in and tojson out in json.c; code points in utf8.c). Filters and
 * tests are tables resolved at parse time (filters.c, tests.c); methods and globals are
 * looked up when used (methods.c, globals.c); strings.c has the str operations they share;
 * arena.c the memory and errors; template_api.c the public entry points.
 *
 * Memory: a parsed template owns one arena (its AST, literals and names); a render uses a
 * second arena for every value it makes and drops it whole at the end, so values are plain
 * structs that share memory freely and nothing is reference-counted. Arenas take their
 * chunks from graft__malloc, so allocation failure can be injected.
 *
 * Errors: parsing and rendering run under a graft__tpl_ctx whose jmp_buf the first error
 * (a syntax error, a type error, raise_exception, a limit, a failed allocation) jumps to,
 * with the message formatted into the context ("line L, column C: ..."). Nothing needs
 * unwinding: every allocation belongs to an arena the entry point frees.
 */
#ifndef GRAFT_TEMPLATE_H
#define GRAFT_TEMPLATE_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* ---- arena ------------------------------------------------------------------------- */

typedef struct graft__tpl_chunk graft__tpl_chunk;
typedef struct graft__tpl_arena {
    graft__tpl_chunk *head;
    size_t used_bytes;  /* bytes of all chunks */
    size_t limit_bytes; /* 0: no limit */
} graft__tpl_arena;

/* ---- errors and limits --------------------------------------------------------------- */

typedef struct graft__tpl_ctx {
    jmp_buf jump;
    int status;          /* GRAFT_* of the error jumped with */
    char message[1024];  /* "line L, column C: ..." */
    graft__tpl_arena *arena;
    /* Render limits and counters (unused while parsing). */
    uint64_t steps, max_steps;
    int32_t depth, max_depth;
    size_t max_output;
    int32_t nest; /* nesting of repr() / tojson, bounded (a namespace may hold itself) */
    int32_t eval_depth; /* nesting of expression evaluation, bounded (eval.c) */
    void *json_pending; /* a jansson value being copied (json.c), released on error */
} graft__tpl_ctx;

/* Formats the message (prefixed with the line and column when line > 0) and jumps. */
_Noreturn void graft__tpl_fail(graft__tpl_ctx *c, int status, uint32_t line, uint32_t col,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

void *graft__tpl_alloc(graft__tpl_ctx *c, size_t size); /* zeroed; fails by jumping */
void graft__tpl_arena_free(graft__tpl_arena *a);
char *graft__tpl_strdup(graft__tpl_ctx *c, const char *s, size_t n); /* NUL-terminated */

/* A growing byte buffer in the arena. */
typedef struct graft__tpl_buf {
    char *p;
    size_t n, cap;
} graft__tpl_buf;
void graft__tpl_buf_add(graft__tpl_ctx *c, graft__tpl_buf *b, const char *s, size_t n);
void graft__tpl_buf_addc(graft__tpl_ctx *c, graft__tpl_buf *b, char ch);
void graft__tpl_buf_addf(graft__tpl_ctx *c, graft__tpl_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- values -------------------------------------------------------------------------- */

typedef enum graft__tpl_kind {
    TV_UNDEF,  /* jinja2's Undefined: s, n = the name looked up (for messages) */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,    /* s, n: UTF-8 bytes (not NUL-terminated) */
    TV_LIST,   /* list (also tuples and generators, by flag) */
    TV_DICT,   /* dict, insertion ordered */
    TV_NS,     /* namespace(): dict is its attributes (the one mutable value) */
    TV_MACRO,  /* macro: a node and its closure */
    TV_FUNC,   /* a builtin bound to its receiver: a method, a global, loop.cycle ... */
    TV_LOOP    /* the `loop` variable of a for loop */
} graft__tpl_kind;

enum {
    TVF_TUPLE = 1,  /* TV_LIST printed as a tuple */
    TVF_GEN = 2,    /* TV_LIST standing for a generator (select, map, ...): no len, no [] */
    TVF_MARKUP = 4, /* TV_STR marked safe (jinja2 Markup) */
    TVF_UNSAFE = 8, /* TV_UNDEF from a sandbox-refused attribute (SecurityError on use) */
    TVF_ATTR = 16   /* TV_UNDEF from a missing attribute or item (else a missing name) */
};

typedef struct graft__tpl_list graft__tpl_list;
typedef struct graft__tpl_dict graft__tpl_dict;
typedef struct graft__tpl_func graft__tpl_func;
typedef struct graft__tpl_macro graft__tpl_macro;
typedef struct graft__tpl_loop graft__tpl_loop;

typedef struct graft__tpl_value {
    uint8_t kind;
    uint8_t flags;
    size_t n; /* TV_STR: byte length */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;
        graft__tpl_list *list;
        graft__tpl_dict *dict;
        graft__tpl_func *func;
        graft__tpl_macro *macro;
        graft__tpl_loop *loop;
    } u;
} graft__tpl_value;
typedef graft__tpl_value tval;

struct graft__tpl_list {
    size_t n, cap;
    tval *items;
};

struct graft__tpl_dict {
    size_t n, cap;
    tval *keys;
    tval *vals;
    uint32_t *slots; /* from 16 entries on: a hash index of the string keys (entry + 1) */
    size_t n_slots;  /* a power of two, at least twice n; 0 without an index */
};

tval graft__tpl_undef(const char *name, size_t n);
tval graft__tpl_none(void);
tval graft__tpl_bool(bool b);
tval graft__tpl_int(int64_t i);
tval graft__tpl_float(double f);
tval graft__tpl_str(const char *s, size_t n); /* shares s */
tval graft__tpl_cstr(const char *s);
tval graft__tpl_str_copy(graft__tpl_ctx *c, const char *s, size_t n);
tval graft__tpl_new_list(graft__tpl_ctx *c, size_t cap, uint8_t flags);
tval graft__tpl_new_dict(graft__tpl_ctx *c, size_t cap);
void graft__tpl_list_push(graft__tpl_ctx *c, graft__tpl_list *l, tval v);
/* Sets key to v (replacing an equal key's value in place). */
void graft__tpl_dict_set(graft__tpl_ctx *c, graft__tpl_dict *d, tval key, tval v);
/* The value of key, or NULL. */
tval *graft__tpl_dict_find(const graft__tpl_dict *d, tval key);
tval *graft__tpl_dict_find_str(const graft__tpl_dict *d, const char *s, size_t n);

bool graft__tpl_truthy(tval v);
/* Numbers as Python sees them: bool, int and float; a number's value as a double, and an
 * int's or a bool's as an int64_t. */
bool graft__tpl_is_number(tval v);
double graft__tpl_as_double(tval v);
int64_t graft__tpl_as_int(tval v);
/* Python ==. */
bool graft__tpl_equal(tval a, tval b);
/* Python <: -1, 0, 1; fails (TypeError) for kinds that do not order. */
int graft__tpl_compare(graft__tpl_ctx *c, tval a, tval b, uint32_t line, uint32_t col);
/* The Python type name ("str", "int", "NoneType", "dict" ...) for messages. */
const char *graft__tpl_type_name(tval v);
/* Python str() and repr() of a value, appended to b. */
void graft__tpl_to_str(graft__tpl_ctx *c, graft__tpl_buf *b, tval v);
void graft__tpl_repr(graft__tpl_ctx *c, graft__tpl_buf *b, tval v);
/* str() as a value (a string is returned as is). */
tval graft__tpl_stringify(graft__tpl_ctx *c, tval v);
/* Python repr of a float ("1.0", "1e+16", "0.30000000000000004"); buf of 32 bytes. */
void graft__tpl_float_repr(double f, char *buf);
/* The items of an iterable as a list: list/tuple items, dict keys, string characters,
 * nothing for undefined. Fails (TypeError) for the rest. */
graft__tpl_list *graft__tpl_iterate(graft__tpl_ctx *c, tval v, uint32_t line, uint32_t col);
/* len(): fails for values without one. */
int64_t graft__tpl_length(graft__tpl_ctx *c, tval v, uint32_t line, uint32_t col);

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* Decodes the code point at s[*i] (advancing *i); invalid bytes decode as themselves. */
uint32_t graft__tpl_utf8_next(const char *s, size_t n, size_t *i);
/* Encodes cp into out (4 bytes); returns the byte count. */
int graft__tpl_utf8_put(uint32_t cp, char *out);
/* Code points in s. */
size_t graft__tpl_utf8_count(const char *s, size_t n);
/* Byte offset of code point index k (k may be the count: n). */
size_t graft__tpl_utf8_offset(const char *s, size_t n, size_t k);
bool graft__tpl_is_space(uint32_t cp); /* Python str.isspace() */
uint32_t graft__tpl_upper(uint32_t cp);
uint32_t graft__tpl_lower(uint32_t cp);
bool graft__tpl_is_printable(uint32_t cp); /* Python str.isprintable(), per code point */

/* ---- JSON ------------------------------------------------------------------------------ */

/* Parses JSON text into a value (objects keep their key order). Fails with GRAFT_EINVAL. */
tval graft__tpl_from_json(graft__tpl_ctx *c, const char *text, size_t len);
/* Releases what an error interrupted graft__tpl_from_json in (the entry points call it). */
void graft__tpl_json_release(graft__tpl_ctx *c);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) appended to b. indent: NULL
 * for none, else the string each level adds. item_sep/key_sep: NULL for the defaults. */
void graft__tpl_to_json(graft__tpl_ctx *c, graft__tpl_buf *b, tval v, bool ensure_ascii,
                        const char *indent, size_t indent_n, tval item_sep, tval key_sep,
                        bool sort_keys, uint32_t line, uint32_t col);

/* ---- lexer ----------------------------------------------------------------------------- */

typedef enum graft__tpl_tok_kind {
    TK_TEXT,        /* text between tags, whitespace control applied */
    TK_VAR_BEGIN,   /* {{ */
    TK_VAR_END,     /* }} */
    TK_BLOCK_BEGIN, /* {% */
    TK_BLOCK_END,   /* %} */
    TK_NAME,
    TK_STRING,      /* text: the decoded literal */
    TK_INT,
    TK_FLOAT,
    TK_OP,          /* text: the operator ("+", "//", "==", "(", ...) */
    TK_EOF
} graft__tpl_tok_kind;

typedef struct graft__tpl_token {
    uint8_t kind;
    uint32_t line, col;
    const char *text; /* in the template's arena */
    size_t n;
    int64_t i;
    double f;
} graft__tpl_token;

/* Tokenizes src (newlines already normalized to \n, one trailing newline dropped). */
void graft__tpl_lex(graft__tpl_ctx *c, const char *src, size_t n, graft__tpl_token **out,
                    size_t *n_out);

/* ---- AST ------------------------------------------------------------------------------- */

typedef enum graft__tpl_node_kind {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK, N_FILTER_BLOCK,
    N_BREAK, N_CONTINUE,
    /* expressions */
    N_CONST, N_NAME, N_TUPLE, N_LIST, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL,
    N_FILTER, N_TEST, N_NOT, N_NEG, N_POS, N_BINOP, N_AND, N_OR, N_CONCAT, N_COMPARE,
    N_CONDEXPR, N_KWARG
} graft__tpl_node_kind;

typedef enum graft__tpl_op {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
} graft__tpl_op;

typedef struct graft__tpl_node graft__tpl_node;
typedef struct graft__tpl_nodes {
    graft__tpl_node **v;
    uint32_t n;
} graft__tpl_nodes;

/* One node kind for all: which fields a kind uses is written at its parser. */
struct graft__tpl_node {
    uint8_t kind;
    uint8_t op;        /* graft__tpl_op, or a flag (N_FOR: recursive) */
    uint16_t id;       /* N_FILTER / N_TEST: the table index */
    uint32_t line, col;
    const char *name;  /* identifiers, attribute names, filter / test / kwarg names */
    size_t name_n;
    graft__tpl_node *a, *b, *c;
    graft__tpl_nodes args;   /* call arguments, list items, body */
    graft__tpl_nodes kwargs; /* keyword arguments (N_KWARG), else body, dict values */
    tval value;              /* N_CONST, N_TEXT */
};

/* Parses the template text into body (the AST in c's arena). */
void graft__tpl_parse(graft__tpl_ctx *c, const char *src, size_t n, graft__tpl_nodes *body);
/* Parsing of expressions (parse_expr.c), used by the statement parser (parse_stmt.c). */
typedef struct graft__tpl_parser {
    graft__tpl_ctx *c;
    graft__tpl_token *t;
    size_t n, pos;
} graft__tpl_parser;
graft__tpl_node *graft__tpl_new_node(graft__tpl_parser *p, int kind, const graft__tpl_token *at);
void graft__tpl_nodes_push(graft__tpl_parser *p, graft__tpl_nodes *list, graft__tpl_node *n);
graft__tpl_node *graft__tpl_parse_expression(graft__tpl_parser *p, bool with_condexpr);
/* A comma-separated expression list; a tuple node when there is a comma (or none and
 * allow_empty). simplified: names only (for-loop and set targets). */
graft__tpl_node *graft__tpl_parse_tuple(graft__tpl_parser *p, bool simplified,
                                        bool with_condexpr);
/* The filter chain after `|` for an input node (NULL input: a filter block). */
graft__tpl_node *graft__tpl_parse_filter(graft__tpl_parser *p, graft__tpl_node *input,
                                         bool start_inline);
graft__tpl_token *graft__tpl_peek(graft__tpl_parser *p);
graft__tpl_token *graft__tpl_next(graft__tpl_parser *p);
bool graft__tpl_is_op(const graft__tpl_token *t, const char *op);
bool graft__tpl_is_name(const graft__tpl_token *t, const char *name);
graft__tpl_token *graft__tpl_expect_op(graft__tpl_parser *p, const char *op);
graft__tpl_token *graft__tpl_expect_name(graft__tpl_parser *p);
_Noreturn void graft__tpl_syntax_error(graft__tpl_parser *p, const graft__tpl_token *at,
                                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- rendering ------------------------------------------------------------------------- */

typedef struct graft__tpl_scope graft__tpl_scope;
typedef struct graft__tpl_render {
    graft__tpl_ctx *c;
    graft__tpl_buf *out;       /* where output goes now */
    int64_t now;               /* strftime_now's time (Unix seconds, UTC) */
} graft__tpl_render;

struct graft__tpl_macro {
    const graft__tpl_node *node; /* N_MACRO (params in args, defaults in kwargs, body in c) */
    graft__tpl_scope *closure;
};

/* Counts units of work against max_steps; fails beyond it. One unit: a loop iteration, a
 * macro call, 16 items of a scan (`in` over a list, unique) or 4 KiB of string comparing. */
void graft__tpl_charge(graft__tpl_render *r, uint64_t units, const graft__tpl_node *at);
/* Renders body with the variables of `vars` (a dict) into out. */
void graft__tpl_render_body(graft__tpl_render *r, const graft__tpl_nodes *body, tval vars);
tval graft__tpl_eval(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n);
/* The variable `name` seen from scope s: a local, an input variable, a global, or an
 * undefined value naming it (render.c). */
tval graft__tpl_lookup(graft__tpl_render *r, graft__tpl_scope *s, const char *name, size_t n);
/* An attribute of the loop variable (loop.index, loop.cycle, ...), or undefined. */
tval graft__tpl_loop_attr(graft__tpl_render *r, tval loop, const char *name, size_t n);
/* Calls a macro (or a call block's `caller`) and returns its output; caller: the value
 * bound to `caller` inside it, or NULL. */
tval graft__tpl_call_macro(graft__tpl_render *r, tval fn, tval *args, size_t n_args,
                           graft__tpl_dict *kwargs, tval *caller, const graft__tpl_node *at);
/* Evaluates an N_CALL node, passing `caller` when not NULL (a call block). */
tval graft__tpl_eval_call(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n,
                          tval *caller);
/* Applies the N_FILTER node f (its arguments evaluated in s) to input. */
tval graft__tpl_eval_filter(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *f,
                            tval input);
/* Python's a <op> b for an arithmetic graft__tpl_op (OP_ADD .. OP_POW). */
tval graft__tpl_binop(graft__tpl_render *r, int op, tval a, tval b, const graft__tpl_node *at);
/* Calls a callable value with evaluated arguments (kwargs: a dict, or NULL). */
tval graft__tpl_call(graft__tpl_render *r, tval fn, tval *args, size_t n_args,
                     graft__tpl_dict *kwargs, const graft__tpl_node *at);
/* obj.name and obj[key] as jinja2's sandboxed getattr / getitem do them. */
tval graft__tpl_getattr(graft__tpl_render *r, tval obj, const char *name, size_t n);
tval graft__tpl_getitem(graft__tpl_render *r, tval obj, tval key, const graft__tpl_node *at);
/* `a op b` for a comparison or membership operator (OP_EQ ... OP_NOTIN): the operators and
 * the tests of the same meaning (jinja2's tests are the operators). */
bool graft__tpl_compare_op(graft__tpl_render *r, const graft__tpl_node *at, int op, tval a, tval b);
/* Fails with "'x' is undefined" (or the sandbox's refusal) for an undefined value. */
_Noreturn void graft__tpl_undefined_error(graft__tpl_render *r, tval v,
                                          const graft__tpl_node *at);

/* Builtin callables: methods of str/dict/list (methods.c), globals (globals.c), loop
 * methods (render.c). A TV_FUNC value is one of these bound to its receiver. */
typedef tval (*graft__tpl_builtin)(graft__tpl_render *r, tval self, tval *args, size_t n,
                                   graft__tpl_dict *kwargs, const graft__tpl_node *at);
struct graft__tpl_func {
    const char *name;
    graft__tpl_builtin fn;
    tval self;
};
tval graft__tpl_func_value(graft__tpl_render *r, const char *name, graft__tpl_builtin fn,
                           tval self);
/* The method `name` of a str / dict / list value, or an undefined value. */
tval graft__tpl_method(graft__tpl_render *r, tval self, const char *name, size_t n);
/* The global `name` (range, namespace, raise_exception, strftime_now, dict), or undef. */
tval graft__tpl_global(graft__tpl_render *r, const char *name, size_t n);

/* Argument helpers for builtins, filters and tests: argument i by position or keyword
 * (NULL when absent); fails when more than max positional arguments are given. */
tval *graft__tpl_arg(tval *args, size_t n, graft__tpl_dict *kwargs, size_t i,
                     const char *name);
void graft__tpl_check_args(graft__tpl_render *r, const graft__tpl_node *at, const char *fn,
                           size_t n, size_t max);

/* Filters and tests: resolved by name at parse time (-1 when unknown). */
int graft__tpl_filter_id(const char *name, size_t n);
int graft__tpl_test_id(const char *name, size_t n);
tval graft__tpl_apply_filter(graft__tpl_render *r, int id, tval v, tval *args, size_t n,
                             graft__tpl_dict *kwargs, const graft__tpl_node *at);
bool graft__tpl_apply_test(graft__tpl_render *r, int id, tval v, tval *args, size_t n,
                           graft__tpl_dict *kwargs, const graft__tpl_node *at);

/* Python string operations shared by filters and methods (strings as values). */
tval graft__tpl_str_strip(graft__tpl_ctx *c, tval s, const tval *chars, bool left, bool right);
tval graft__tpl_str_replace(graft__tpl_ctx *c, tval s, tval old, tval new_, int64_t count);
tval graft__tpl_str_case(graft__tpl_ctx *c, tval s, int mode); /* 0 lower 1 upper 2 cap 3 title */
tval graft__tpl_html_escape(graft__tpl_ctx *c, tval s);
/* s[start:stop:step] over code points (or list items); absent bounds are NULL. */
tval graft__tpl_slice(graft__tpl_render *r, tval v, const tval *start, const tval *stop,
                      const tval *step, const graft__tpl_node *at);

#endif /* GRAFT_TEMPLATE_H */
