/*
 * eval.c: evaluating expressions, with Python's operators and jinja2's lookups.
 *
 * Operators do what Python does with the same values (int and float arithmetic, floor
 * division and modulo with Python's signs, str and list concatenation and repetition,
 * `in` on strings, lists and dicts, chained comparisons) and raise where Python raises
 * (TypeError for `'a' + 1`, UndefinedError for arithmetic on an undefined value).
 * Attribute and item access follow jinja2's sandboxed getattr / getitem: `d.key` falls
 * back to the item, `d['items']` to the method, a missing one is undefined, and the
 * methods that would modify a list or dict are refused (ImmutableSandboxedEnvironment).
 */
#include <math.h>
#include <string.h>

#include "template/template.h"

#define MAX_EVAL_DEPTH 1000

_Noreturn void graft__tpl_undefined_error(graft__tpl_render *r, tval v, const graft__tpl_node *at)
{
    if (v.flags & TVF_UNSAFE)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "SecurityError: access to attribute '%.*s' is unsafe", (int)v.n, v.u.s);
    if (v.flags & TVF_ATTR)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "UndefinedError: object has no attribute '%.*s'", (int)v.n, v.u.s);
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col, "UndefinedError: '%.*s' is undefined",
                    (int)v.n, v.u.s ? v.u.s : "");
}

static tval attr_undef(const char *name, size_t n)
{
    tval u = graft__tpl_undef(name, n);
    u.flags = TVF_ATTR;
    return u;
}

tval graft__tpl_getattr(graft__tpl_render *r, tval obj, const char *name, size_t n)
{
    switch (obj.kind) {
    case TV_UNDEF:
        return obj; /* the caller raises: undefined.attr is an error */
    case TV_DICT: {
        tval m = graft__tpl_method(r, obj, name, n);
        if (m.kind != TV_UNDEF || (m.flags & TVF_UNSAFE))
            return m;
        tval *v = graft__tpl_dict_find_str(obj.u.dict, name, n);
        return v ? *v : attr_undef(name, n);
    }
    case TV_NS: {
        tval *v = graft__tpl_dict_find_str(obj.u.dict, name, n);
        return v ? *v : attr_undef(name, n);
    }
    case TV_STR:
    case TV_LIST: {
        tval m = graft__tpl_method(r, obj, name, n);
        if (m.kind == TV_UNDEF && !(m.flags & TVF_UNSAFE))
            return attr_undef(name, n);
        return m;
    }
    case TV_LOOP:
        return graft__tpl_loop_attr(r, obj, name, n);
    default:
        return attr_undef(name, n);
    }
}

/* Python's index normalisation: -1 is the last; false when out of range. */
static bool index_of(int64_t i, size_t len, size_t *out)
{
    if (i < 0)
        i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len)
        return false;
    *out = (size_t)i;
    return true;
}

tval graft__tpl_getitem(graft__tpl_render *r, tval obj, tval key, const graft__tpl_node *at)
{
    if (obj.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, obj, at);
    bool int_key = key.kind == TV_INT || key.kind == TV_BOOL;
    int64_t k = key.kind == TV_INT ? key.u.i : key.kind == TV_BOOL ? key.u.b : 0;
    size_t idx;
    switch (obj.kind) {
    case TV_DICT: {
        tval *v = graft__tpl_dict_find(obj.u.dict, key);
        if (v != NULL)
            return *v;
        break;
    }
    case TV_LIST:
        if (int_key && !(obj.flags & TVF_GEN) && index_of(k, obj.u.list->n, &idx))
            return obj.u.list->items[idx];
        break;
    case TV_STR:
        if (int_key) {
            size_t count = graft__tpl_utf8_count(obj.u.s, obj.n);
            if (index_of(k, count, &idx)) {
                size_t start = graft__tpl_utf8_offset(obj.u.s, obj.n, idx);
                size_t end = start;
                graft__tpl_utf8_next(obj.u.s, obj.n, &end);
                return graft__tpl_str(obj.u.s + start, end - start);
            }
        }
        break;
    default:
        break;
    }
    if (key.kind == TV_STR && obj.kind != TV_NS)
        return graft__tpl_getattr(r, obj, key.u.s, key.n);
    if (key.kind == TV_STR)
        return attr_undef(key.u.s, key.n);
    return attr_undef("[]", 2);
}

static int64_t slice_bound(graft__tpl_render *r, const tval *v, const graft__tpl_node *at)
{
    if (v->kind == TV_INT)
        return v->u.i;
    if (v->kind == TV_BOOL)
        return v->u.b;
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                    "TypeError: slice indices must be integers or None");
}

/* A start or stop given to a slice of len items with step st, as Python adjusts it: counted
 * from the end when negative, then clamped to [-1, len - 1] going down, [0, len] going up. */
static int64_t slice_index(int64_t i, int64_t len, int64_t st)
{
    if (i < 0)
        i += len;
    if (i < 0)
        return st < 0 ? -1 : 0;
    if (i >= len)
        return st < 0 ? len - 1 : len;
    return i;
}

tval graft__tpl_slice(graft__tpl_render *r, tval v, const tval *start, const tval *stop,
                      const tval *step, const graft__tpl_node *at)
{
    if (v.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, v, at);
    bool is_str = v.kind == TV_STR;
    if (!is_str && (v.kind != TV_LIST || (v.flags & TVF_GEN)))
        return attr_undef("[:]", 3);
    graft__tpl_list *chars = is_str ? graft__tpl_iterate(r->c, v, at->line, at->col) : v.u.list;
    int64_t len = (int64_t)chars->n;
    int64_t st = step && step->kind != TV_NONE ? slice_bound(r, step, at) : 1;
    if (st == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "ValueError: slice step cannot be zero");
    if (st < -INT64_MAX)
        st = -INT64_MAX; /* as far as any list goes, and -st is defined */
    int64_t lo = st < 0 ? len - 1 : 0, hi = st < 0 ? -1 : len; /* all, in the step's direction */
    if (start && start->kind != TV_NONE)
        lo = slice_index(slice_bound(r, start, at), len, st);
    if (stop && stop->kind != TV_NONE)
        hi = slice_index(slice_bound(r, stop, at), len, st);
    tval out = graft__tpl_new_list(r->c, 0, v.flags & TVF_TUPLE);
    graft__tpl_buf b = {0};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi;) {
        if (is_str)
            graft__tpl_buf_add(r->c, &b, chars->items[i].u.s, chars->items[i].n);
        else
            graft__tpl_list_push(r->c, out.u.list, chars->items[i]);
        if (st > 0 ? hi - i <= st : i - hi <= -st) /* the next index would be past the end */
            break;
        i += st;
    }
    if (is_str)
        return graft__tpl_str(b.p ? b.p : "", b.n);
    return out;
}

/* ---- arithmetic ------------------------------------------------------------------------ */


static const char *const op_text[] = {"+", "-", "*", "/", "//", "%", "**"};

static _Noreturn void bad_operands(graft__tpl_render *r, const graft__tpl_node *at, int op,
                                   tval a, tval b)
{
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                    "TypeError: unsupported operand type(s) for %s: '%s' and '%s'",
                    op_text[op], graft__tpl_type_name(a), graft__tpl_type_name(b));
}

static _Noreturn void overflow(graft__tpl_render *r, const graft__tpl_node *at)
{
    graft__tpl_fail(r->c, GRAFT_ERANGE, at->line, at->col,
                    "OverflowError: integer result beyond 64 bits");
}

static tval repeat(graft__tpl_render *r, const graft__tpl_node *at, tval seq, int64_t times)
{
    size_t len = seq.kind == TV_STR ? seq.n : seq.u.list->n;
    if (times <= 0 || len == 0) /* and no loop over a huge count of nothing */
        return seq.kind == TV_STR ? graft__tpl_str("", 0)
                                  : graft__tpl_new_list(r->c, 0, seq.flags & TVF_TUPLE);
    if (seq.kind == TV_STR) {
        size_t total;
        if (!graft__mul_size(seq.n, (size_t)times, &total))
            overflow(r, at);
        char *p = graft__tpl_alloc(r->c, total + 1);
        for (int64_t i = 0; i < times; i++)
            memcpy(p + (size_t)i * seq.n, seq.u.s, seq.n);
        return graft__tpl_str(p, total);
    }
    size_t total;
    if (!graft__mul_size(seq.u.list->n, (size_t)times, &total) || total > ((size_t)1 << 28))
        overflow(r, at);
    tval out = graft__tpl_new_list(r->c, total, seq.flags & TVF_TUPLE);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq.u.list->n; j++)
            out.u.list->items[out.u.list->n++] = seq.u.list->items[j];
    return out;
}

static tval concat_seq(graft__tpl_render *r, tval a, tval b)
{
    if (a.kind == TV_STR) {
        bool markup = (a.flags | b.flags) & TVF_MARKUP;
        if (markup && !(a.flags & TVF_MARKUP))
            a = graft__tpl_html_escape(r->c, a);
        if (markup && !(b.flags & TVF_MARKUP))
            b = graft__tpl_html_escape(r->c, b);
        if (a.n == 0 && !markup)
            return b;
        if (b.n == 0 && !markup)
            return a;
        char *p = graft__tpl_alloc(r->c, a.n + b.n + 1);
        if (a.n)
            memcpy(p, a.u.s, a.n);
        if (b.n)
            memcpy(p + a.n, b.u.s, b.n);
        tval v = graft__tpl_str(p, a.n + b.n);
        v.flags = markup ? TVF_MARKUP : 0;
        return v;
    }
    tval out = graft__tpl_new_list(r->c, a.u.list->n + b.u.list->n, a.flags & TVF_TUPLE);
    if (a.u.list->n)
        memcpy(out.u.list->items, a.u.list->items, a.u.list->n * sizeof(tval));
    if (b.u.list->n)
        memcpy(out.u.list->items + a.u.list->n, b.u.list->items, b.u.list->n * sizeof(tval));
    out.u.list->n = a.u.list->n + b.u.list->n;
    return out;
}

static tval int_pow(graft__tpl_render *r, const graft__tpl_node *at, int64_t base, int64_t e)
{
    int64_t result = 1;
    while (e > 0) {
        if (e & 1 && __builtin_mul_overflow(result, base, &result))
            overflow(r, at);
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base))
            overflow(r, at);
    }
    return graft__tpl_int(result);
}

tval graft__tpl_binop(graft__tpl_render *r, int op, tval a, tval b, const graft__tpl_node *at)
{
    if (a.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, a, at);
    if (b.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, b, at);
    if (op == OP_ADD && a.kind == TV_STR && b.kind == TV_STR)
        return concat_seq(r, a, b);
    if (op == OP_ADD && a.kind == TV_LIST && b.kind == TV_LIST &&
        !((a.flags | b.flags) & TVF_GEN) && (a.flags & TVF_TUPLE) == (b.flags & TVF_TUPLE))
        return concat_seq(r, a, b);
    if (op == OP_MUL && (a.kind == TV_STR || (a.kind == TV_LIST && !(a.flags & TVF_GEN))) &&
        (b.kind == TV_INT || b.kind == TV_BOOL))
        return repeat(r, at, a, graft__tpl_as_int(b));
    if (op == OP_MUL && (b.kind == TV_STR || (b.kind == TV_LIST && !(b.flags & TVF_GEN))) &&
        (a.kind == TV_INT || a.kind == TV_BOOL))
        return repeat(r, at, b, graft__tpl_as_int(a));
    if (!graft__tpl_is_number(a) || !graft__tpl_is_number(b)) {
        if (a.kind == TV_STR && op == OP_ADD)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: can only concatenate str (not \"%s\") to str",
                            graft__tpl_type_name(b));
        if (a.kind == TV_STR && op == OP_MOD)
            graft__tpl_fail(r->c, GRAFT_EUNSUPPORTED, at->line, at->col,
                            "printf-style string formatting (str %% x) is not supported");
        bad_operands(r, at, op, a, b);
    }
    bool floats = a.kind == TV_FLOAT || b.kind == TV_FLOAT;
    if (op == OP_DIV || ((op == OP_FLOORDIV || op == OP_MOD) && graft__tpl_as_double(b) == 0.0)) {
        if (graft__tpl_as_double(b) == 0.0)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "ZeroDivisionError: division by zero");
        return graft__tpl_float(graft__tpl_as_double(a) / graft__tpl_as_double(b));
    }
    if (floats) {
        double x = graft__tpl_as_double(a), y = graft__tpl_as_double(b);
        switch (op) {
        case OP_ADD: return graft__tpl_float(x + y);
        case OP_SUB: return graft__tpl_float(x - y);
        case OP_MUL: return graft__tpl_float(x * y);
        case OP_FLOORDIV: return graft__tpl_float(floor(x / y));
        case OP_MOD: {
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return graft__tpl_float(m);
        }
        default: return graft__tpl_float(pow(x, y));
        }
    }
    int64_t x = graft__tpl_as_int(a), y = graft__tpl_as_int(b), z;
    switch (op) {
    case OP_ADD:
        if (__builtin_add_overflow(x, y, &z))
            overflow(r, at);
        return graft__tpl_int(z);
    case OP_SUB:
        if (__builtin_sub_overflow(x, y, &z))
            overflow(r, at);
        return graft__tpl_int(z);
    case OP_MUL:
        if (__builtin_mul_overflow(x, y, &z))
            overflow(r, at);
        return graft__tpl_int(z);
    case OP_FLOORDIV:
        if (x == INT64_MIN && y == -1)
            overflow(r, at);
        z = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0)))
            z--;
        return graft__tpl_int(z);
    case OP_MOD:
        if (y == -1)
            return graft__tpl_int(0);
        z = x % y;
        if (z != 0 && ((z < 0) != (y < 0)))
            z += y;
        return graft__tpl_int(z);
    default:
        if (y < 0)
            return graft__tpl_float(pow((double)x, (double)y));
        return int_pow(r, at, x, y);
    }
}

/* Python's `a in b`. */
static bool contains(graft__tpl_render *r, const graft__tpl_node *at, tval a, tval b)
{
    switch (b.kind) {
    case TV_STR:
        if (a.kind != TV_STR)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: 'in <string>' requires string as left operand, not %s",
                            graft__tpl_type_name(a));
        graft__tpl_charge(r, b.n / 4096, at);
        return a.n == 0 || memmem(b.u.s, b.n, a.u.s, a.n) != NULL;
    case TV_LIST:
        graft__tpl_charge(r, b.u.list->n / 16, at);
        for (size_t i = 0; i < b.u.list->n; i++)
            if (graft__tpl_equal(a, b.u.list->items[i]))
                return true;
        return false;
    case TV_DICT:
        graft__tpl_charge(r, b.u.dict->n / 16, at);
        return graft__tpl_dict_find(b.u.dict, a) != NULL;
    case TV_UNDEF:
        if (b.flags & TVF_UNSAFE)
            graft__tpl_undefined_error(r, b, at);
        return false;
    default:
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: argument of type '%s' is not iterable",
                        graft__tpl_type_name(b));
    }
}

/* Comparing two lists or dicts looks at every item: a long scan, counted as one. */
static void charge_items(graft__tpl_render *r, const graft__tpl_node *at, tval a, tval b)
{
    if ((a.kind == TV_LIST && b.kind == TV_LIST) || (a.kind == TV_DICT && b.kind == TV_DICT))
        graft__tpl_charge(r, (a.kind == TV_LIST ? a.u.list->n : a.u.dict->n) / 16, at);
}

bool graft__tpl_compare_op(graft__tpl_render *r, const graft__tpl_node *at, int op, tval a, tval b)
{
    charge_items(r, at, a, b);
    switch (op) {
    case OP_EQ:
        return graft__tpl_equal(a, b);
    case OP_NE:
        return !graft__tpl_equal(a, b);
    case OP_IN:
        return contains(r, at, a, b);
    case OP_NOTIN:
        return !contains(r, at, a, b);
    default:
        break;
    }
    if (a.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, a, at);
    if (b.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, b, at);
    int c = graft__tpl_compare(r->c, a, b, at->line, at->col);
    return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
}

/* ---- calls ------------------------------------------------------------------------------ */

tval graft__tpl_call(graft__tpl_render *r, tval fn, tval *args, size_t n_args,
                     graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    switch (fn.kind) {
    case TV_MACRO:
        return graft__tpl_call_macro(r, fn, args, n_args, kwargs, NULL, at);
    case TV_FUNC:
        return fn.u.func->fn(r, fn.u.func->self, args, n_args, kwargs, at);
    case TV_UNDEF:
        graft__tpl_undefined_error(r, fn, at);
    default:
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: '%s' object is not callable", graft__tpl_type_name(fn));
    }
}

/* Evaluates a node's args and kwargs. */
static tval *eval_args(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n,
                       graft__tpl_dict **kwargs, size_t extra)
{
    tval *args = graft__tpl_alloc(r->c, (n->args.n + extra + 1) * sizeof *args);
    for (uint32_t i = 0; i < n->args.n; i++)
        args[i + extra] = graft__tpl_eval(r, s, n->args.v[i]);
    *kwargs = NULL;
    if (n->kwargs.n) {
        *kwargs = graft__tpl_new_dict(r->c, n->kwargs.n).u.dict;
        for (uint32_t i = 0; i < n->kwargs.n; i++) {
            const graft__tpl_node *kw = n->kwargs.v[i];
            graft__tpl_dict_set(r->c, *kwargs, graft__tpl_str(kw->name, kw->name_n),
                                graft__tpl_eval(r, s, kw->a));
        }
    }
    return args;
}

tval graft__tpl_eval_call(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n,
                          tval *caller)
{
    tval fn = graft__tpl_eval(r, s, n->a);
    graft__tpl_dict *kwargs;
    tval *args = eval_args(r, s, n, &kwargs, 0);
    if (caller != NULL) {
        if (fn.kind != TV_MACRO)
            graft__tpl_fail(r->c, GRAFT_EINVAL, n->line, n->col,
                            "TypeError: a call block needs a macro");
        return graft__tpl_call_macro(r, fn, args, n->args.n, kwargs, caller, n);
    }
    return graft__tpl_call(r, fn, args, n->args.n, kwargs, n);
}

tval graft__tpl_eval_filter(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *f,
                            tval input)
{
    graft__tpl_dict *kwargs;
    tval *args = eval_args(r, s, f, &kwargs, 0);
    return graft__tpl_apply_filter(r, f->id, input, args, f->args.n, kwargs, f);
}

/* ---- expressions ------------------------------------------------------------------------ */

static tval eval_list(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n,
                      uint8_t flags)
{
    tval l = graft__tpl_new_list(r->c, n->args.n, flags);
    for (uint32_t i = 0; i < n->args.n; i++)
        l.u.list->items[i] = graft__tpl_eval(r, s, n->args.v[i]);
    l.u.list->n = n->args.n;
    return l;
}

static tval eval_dict(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    tval d = graft__tpl_new_dict(r->c, n->args.n);
    for (uint32_t i = 0; i < n->args.n; i++) {
        tval k = graft__tpl_eval(r, s, n->args.v[i]);
        if (k.kind == TV_LIST || k.kind == TV_DICT || k.kind == TV_NS)
            graft__tpl_fail(r->c, GRAFT_EINVAL, n->line, n->col,
                            "TypeError: unhashable type: '%s'", graft__tpl_type_name(k));
        graft__tpl_dict_set(r->c, d.u.dict, k, graft__tpl_eval(r, s, n->kwargs.v[i]));
    }
    return d;
}

static tval eval_getitem(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    tval obj = graft__tpl_eval(r, s, n->a);
    if (n->b->kind == N_SLICE) {
        const graft__tpl_node *sl = n->b;
        tval bounds[3];
        const tval *p[3] = {NULL, NULL, NULL};
        const graft__tpl_node *parts[3] = {sl->a, sl->b, sl->c};
        for (int i = 0; i < 3; i++)
            if (parts[i] != NULL) {
                bounds[i] = graft__tpl_eval(r, s, parts[i]);
                p[i] = &bounds[i];
            }
        return graft__tpl_slice(r, obj, p[0], p[1], p[2], n);
    }
    return graft__tpl_getitem(r, obj, graft__tpl_eval(r, s, n->b), n);
}

static tval eval_compare(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    tval left = graft__tpl_eval(r, s, n->a);
    for (uint32_t i = 0; i < n->args.n; i++) {
        const graft__tpl_node *operand = n->args.v[i];
        tval right = graft__tpl_eval(r, s, operand->a);
        if (!graft__tpl_compare_op(r, operand, operand->op, left, right))
            return graft__tpl_bool(false);
        left = right;
    }
    return graft__tpl_bool(true);
}

static tval eval_unary(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    tval v = graft__tpl_eval(r, s, n->a);
    if (v.kind == TV_UNDEF)
        graft__tpl_undefined_error(r, v, n);
    if (v.kind == TV_FLOAT)
        return graft__tpl_float(n->kind == N_NEG ? -v.u.f : v.u.f);
    if (v.kind == TV_INT || v.kind == TV_BOOL) {
        int64_t i = graft__tpl_as_int(v);
        if (n->kind == N_NEG && i == INT64_MIN)
            overflow(r, n);
        return graft__tpl_int(n->kind == N_NEG ? -i : i);
    }
    graft__tpl_fail(r->c, GRAFT_EINVAL, n->line, n->col, "TypeError: bad operand type for unary %c: '%s'",
                    n->kind == N_NEG ? '-' : '+', graft__tpl_type_name(v));
}

static tval eval_node(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n);

tval graft__tpl_eval(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    /* Left-nested chains (a + b + c ..., x|f|g ...) are as deep as they are long: bound the
     * recursion so that no template can exhaust the stack. */
    if (++r->c->eval_depth > MAX_EVAL_DEPTH)
        graft__tpl_fail(r->c, GRAFT_ECAPACITY, n->line, n->col,
                        "template: expressions nested more than %d deep", MAX_EVAL_DEPTH);
    tval v = eval_node(r, s, n);
    r->c->eval_depth--;
    return v;
}

static tval eval_node(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    switch (n->kind) {
    case N_CONST:
        return n->value;
    case N_NAME:
        return graft__tpl_lookup(r, s, n->name, n->name_n);
    case N_TUPLE:
        return eval_list(r, s, n, TVF_TUPLE);
    case N_LIST:
        return eval_list(r, s, n, 0);
    case N_DICT:
        return eval_dict(r, s, n);
    case N_GETATTR: {
        tval obj = graft__tpl_eval(r, s, n->a);
        if (obj.kind == TV_UNDEF)
            graft__tpl_undefined_error(r, obj, n);
        return graft__tpl_getattr(r, obj, n->name, n->name_n);
    }
    case N_GETITEM:
        return eval_getitem(r, s, n);
    case N_CALL:
        return graft__tpl_eval_call(r, s, n, NULL);
    case N_FILTER:
        return graft__tpl_eval_filter(r, s, n, graft__tpl_eval(r, s, n->a));
    case N_TEST: {
        graft__tpl_dict *kwargs;
        tval v = graft__tpl_eval(r, s, n->a);
        tval *args = eval_args(r, s, n, &kwargs, 0);
        return graft__tpl_bool(graft__tpl_apply_test(r, n->id, v, args, n->args.n, kwargs, n));
    }
    case N_NOT:
        return graft__tpl_bool(!graft__tpl_truthy(graft__tpl_eval(r, s, n->a)));
    case N_NEG:
    case N_POS:
        return eval_unary(r, s, n);
    case N_BINOP:
    {
        tval a = graft__tpl_eval(r, s, n->a);
        return graft__tpl_binop(r, n->op, a, graft__tpl_eval(r, s, n->b), n);
    }
    case N_AND: {
        tval a = graft__tpl_eval(r, s, n->a);
        return graft__tpl_truthy(a) ? graft__tpl_eval(r, s, n->b) : a;
    }
    case N_OR: {
        tval a = graft__tpl_eval(r, s, n->a);
        return graft__tpl_truthy(a) ? a : graft__tpl_eval(r, s, n->b);
    }
    case N_CONCAT: {
        graft__tpl_buf b = {0};
        for (uint32_t i = 0; i < n->args.n; i++)
            graft__tpl_to_str(r->c, &b, graft__tpl_eval(r, s, n->args.v[i]));
        return graft__tpl_str(b.p ? b.p : "", b.n);
    }
    case N_COMPARE:
        return eval_compare(r, s, n);
    case N_CONDEXPR:
        if (graft__tpl_truthy(graft__tpl_eval(r, s, n->b)))
            return graft__tpl_eval(r, s, n->a);
        return n->c ? graft__tpl_eval(r, s, n->c) : graft__tpl_undef("", 0);
    default:
        GRAFT_ASSERT(!"expression kind");
    }
}
