/*
 * tests.c: the `is name(args)` tests, each as jinja2 defines it.
 *
 * Kinds: defined, undefined, none, boolean, true, false, integer, float, number, string,
 * mapping, iterable, sequence, callable, escaped. Values: even, odd, divisibleby, lower,
 * upper, sameas, in, and the comparisons eq / equalto / ==, ne / !=, lt / lessthan / <,
 * le / <=, gt / greaterthan / >, ge / >=. Python's quirks are kept: a bool is a number, an
 * undefined value is iterable and a sequence, a string is iterable.
 */
#include <string.h>

#include "template/template.h"

#define TEST(fname)                                                                            \
    static bool fname(graft__tpl_render *r, tval v, tval *args, size_t n,                      \
                      graft__tpl_dict *kwargs, const graft__tpl_node *at)
#define NO_ARGS (void)r, (void)args, (void)n, (void)kwargs, (void)at

TEST(t_defined) { NO_ARGS; return v.kind != TV_UNDEF; }
TEST(t_undefined) { NO_ARGS; return v.kind == TV_UNDEF; }
TEST(t_none) { NO_ARGS; return v.kind == TV_NONE; }
TEST(t_boolean) { NO_ARGS; return v.kind == TV_BOOL; }
TEST(t_true) { NO_ARGS; return v.kind == TV_BOOL && v.u.b; }
TEST(t_false) { NO_ARGS; return v.kind == TV_BOOL && !v.u.b; }
TEST(t_integer) { NO_ARGS; return v.kind == TV_INT; }
TEST(t_float) { NO_ARGS; return v.kind == TV_FLOAT; }
TEST(t_number) { NO_ARGS; return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL; }
TEST(t_string) { NO_ARGS; return v.kind == TV_STR; }
TEST(t_mapping) { NO_ARGS; return v.kind == TV_DICT; }
TEST(t_iterable)
{
    NO_ARGS;
    return v.kind == TV_STR || v.kind == TV_LIST || v.kind == TV_DICT ||
           (v.kind == TV_UNDEF && !(v.flags & TVF_UNSAFE));
}
TEST(t_sequence)
{
    NO_ARGS;
    return v.kind == TV_STR || (v.kind == TV_LIST && !(v.flags & TVF_GEN)) ||
           v.kind == TV_DICT || v.kind == TV_UNDEF;
}
TEST(t_callable) { NO_ARGS; return v.kind == TV_MACRO || v.kind == TV_FUNC; }
TEST(t_escaped) { NO_ARGS; return v.kind == TV_STR && (v.flags & TVF_MARKUP); }

static tval one_arg(graft__tpl_render *r, tval *args, size_t n, const graft__tpl_node *at,
                    const char *test)
{
    if (n != 1)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: the '%s' test takes one argument (%zu given)", test, n);
    return args[0];
}

static bool mod_zero(graft__tpl_render *r, tval v, tval d, const graft__tpl_node *at)
{
    tval m = graft__tpl_binop(r, OP_MOD, v, d, at);
    return graft__tpl_equal(m, graft__tpl_int(0));
}

TEST(t_even) { (void)args; (void)n; (void)kwargs; return mod_zero(r, v, graft__tpl_int(2), at); }
TEST(t_odd) { (void)args; (void)n; (void)kwargs; return !mod_zero(r, v, graft__tpl_int(2), at); }
TEST(t_divisibleby)
{
    (void)kwargs;
    return mod_zero(r, v, one_arg(r, args, n, at, "divisibleby"), at);
}

static bool case_test(graft__tpl_render *r, tval v, bool lower)
{
    tval s = graft__tpl_stringify(r->c, v);
    bool cased = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp = graft__tpl_utf8_next(s.u.s, s.n, &i);
        if ((lower ? graft__tpl_lower(cp) : graft__tpl_upper(cp)) != cp)
            return false;
        cased |= (lower ? graft__tpl_upper(cp) : graft__tpl_lower(cp)) != cp;
    }
    return cased;
}

TEST(t_lower) { (void)args; (void)n; (void)kwargs; (void)at; return case_test(r, v, true); }
TEST(t_upper) { (void)args; (void)n; (void)kwargs; (void)at; return case_test(r, v, false); }

TEST(t_sameas)
{
    (void)kwargs;
    tval other = one_arg(r, args, n, at, "sameas");
    if (v.kind != other.kind)
        return false;
    switch (v.kind) {
    case TV_NONE:
    case TV_UNDEF:
        return true;
    case TV_BOOL:
        return v.u.b == other.u.b;
    case TV_INT:
        return v.u.i == other.u.i && v.u.i >= -5 && v.u.i <= 256;
    case TV_STR:
        return v.u.s == other.u.s && v.n == other.n;
    default:
        return v.u.list == other.u.list;
    }
}

/* Comparison and membership tests: the operator of the same meaning. */
static bool compare_test(graft__tpl_render *r, tval v, tval *args, size_t n,
                         const graft__tpl_node *at, int op)
{
    return graft__tpl_compare_op(r, at, op, v,
                                 one_arg(r, args, n, at, op == OP_IN ? "in" : "comparison"));
}

TEST(t_eq) { (void)kwargs; return compare_test(r, v, args, n, at, OP_EQ); }
TEST(t_ne) { (void)kwargs; return compare_test(r, v, args, n, at, OP_NE); }
TEST(t_lt) { (void)kwargs; return compare_test(r, v, args, n, at, OP_LT); }
TEST(t_le) { (void)kwargs; return compare_test(r, v, args, n, at, OP_LE); }
TEST(t_gt) { (void)kwargs; return compare_test(r, v, args, n, at, OP_GT); }
TEST(t_ge) { (void)kwargs; return compare_test(r, v, args, n, at, OP_GE); }

TEST(t_in) { (void)kwargs; return compare_test(r, v, args, n, at, OP_IN); }

TEST(t_filter)
{
    (void)kwargs;
    (void)r;
    (void)args;
    (void)n;
    (void)at;
    return v.kind == TV_STR && graft__tpl_filter_id(v.u.s, v.n) >= 0;
}

TEST(t_test)
{
    (void)kwargs;
    (void)r;
    (void)args;
    (void)n;
    (void)at;
    return v.kind == TV_STR && graft__tpl_test_id(v.u.s, v.n) >= 0;
}

typedef bool (*test_fn)(graft__tpl_render *r, tval v, tval *args, size_t n,
                        graft__tpl_dict *kwargs, const graft__tpl_node *at);

static const struct {
    const char *name;
    test_fn fn;
} tests[] = {
    {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
    {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
    {"integer", t_integer},   {"float", t_float},         {"number", t_number},
    {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
    {"sequence", t_sequence}, {"callable", t_callable},   {"escaped", t_escaped},
    {"even", t_even},         {"odd", t_odd},             {"divisibleby", t_divisibleby},
    {"lower", t_lower},       {"upper", t_upper},         {"sameas", t_sameas},
    {"eq", t_eq},             {"equalto", t_eq},          {"==", t_eq},
    {"ne", t_ne},             {"!=", t_ne},               {"lt", t_lt},
    {"lessthan", t_lt},       {"<", t_lt},                {"le", t_le},
    {"<=", t_le},             {"gt", t_gt},               {"greaterthan", t_gt},
    {">", t_gt},              {"ge", t_ge},               {">=", t_ge},
    {"in", t_in},             {"filter", t_filter},       {"test", t_test},
};

int graft__tpl_test_id(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strlen(tests[i].name) == n && memcmp(tests[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

bool graft__tpl_apply_test(graft__tpl_render *r, int id, tval v, tval *args, size_t n,
                           graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    return tests[id].fn(r, v, args, n, kwargs, at);
}
