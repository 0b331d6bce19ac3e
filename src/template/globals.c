/*
 * globals.c: the global functions a chat template can call.
 *
 * range (a list, at most 100000 items as jinja2's sandbox allows), namespace (the one
 * mutable object: `set ns.attr` assigns into it), dict(**kw), and the two that Hugging Face
 * adds: raise_exception(msg), which stops the render with msg as the error, and
 * strftime_now(fmt), the time formatted with strftime: the render's fixed time (UTC) when
 * the caller gives one, else the current local time.
 */
#include <string.h>
#include <time.h>

#include "template/template.h"

#define MAX_RANGE 100000

static tval g_range(graft__tpl_render *r, tval self, tval *args, size_t n,
                    graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)self;
    (void)kwargs;
    if (n == 0 || n > 3)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: range expected 1 to 3 arguments, got %zu", n);
    int64_t v[3];
    for (size_t i = 0; i < n; i++) {
        if (args[i].kind != TV_INT && args[i].kind != TV_BOOL)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: '%s' object cannot be interpreted as an integer",
                            graft__tpl_type_name(args[i]));
        v[i] = args[i].kind == TV_INT ? args[i].u.i : args[i].u.b;
    }
    int64_t start = n == 1 ? 0 : v[0], stop = n == 1 ? v[0] : v[1], step = n == 3 ? v[2] : 1;
    if (step == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "ValueError: range() arg 3 must not be zero");
    /* The item count, in 128 bits so that no bound overflows. */
    __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
    __int128 abs_step = step > 0 ? (__int128)step : -(__int128)step;
    __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
    if (count > MAX_RANGE)
        graft__tpl_fail(r->c, GRAFT_ERANGE, at->line, at->col,
                        "OverflowError: Range too big. The sandbox blocks ranges larger than "
                        "MAX_RANGE (%d).", MAX_RANGE);
    tval out = graft__tpl_new_list(r->c, (size_t)count, 0);
    for (int64_t k = 0; k < (int64_t)count; k++)
        out.u.list->items[out.u.list->n++] = graft__tpl_int((int64_t)(start + (__int128)k * step));
    return out;
}

static tval g_namespace(graft__tpl_render *r, tval self, tval *args, size_t n,
                        graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)self;
    tval ns = graft__tpl_new_dict(r->c, 4);
    ns.kind = TV_NS;
    if (n > 1)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: namespace expected at most 1 argument, got %zu", n);
    if (n == 1) {
        if (args[0].kind != TV_DICT && args[0].kind != TV_NS)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: namespace() needs a mapping, not '%s'",
                            graft__tpl_type_name(args[0]));
        for (size_t i = 0; i < args[0].u.dict->n; i++)
            graft__tpl_dict_set(r->c, ns.u.dict, args[0].u.dict->keys[i], args[0].u.dict->vals[i]);
    }
    for (size_t i = 0; kwargs != NULL && i < kwargs->n; i++)
        graft__tpl_dict_set(r->c, ns.u.dict, kwargs->keys[i], kwargs->vals[i]);
    return ns;
}

static tval g_dict(graft__tpl_render *r, tval self, tval *args, size_t n,
                   graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    tval d = g_namespace(r, self, args, n, kwargs, at);
    d.kind = TV_DICT;
    return d;
}

static tval g_raise_exception(graft__tpl_render *r, tval self, tval *args, size_t n,
                              graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)self;
    (void)kwargs;
    tval msg = n > 0 ? graft__tpl_stringify(r->c, args[0]) : graft__tpl_cstr("");
    graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col, "%.*s", (int)msg.n, msg.u.s);
}

static tval g_strftime_now(graft__tpl_render *r, tval self, tval *args, size_t n,
                           graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)self;
    (void)kwargs;
    if (n != 1 || args[0].kind != TV_STR)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: strftime_now() takes one format string");
    struct tm tm;
    time_t t = r->now != 0 ? (time_t)r->now : time(NULL);
    if (r->now != 0)
        gmtime_r(&t, &tm);
    else
        localtime_r(&t, &tm);
    char *fmt = graft__tpl_strdup(r->c, args[0].u.s, args[0].n);
    size_t cap = 64 + 16 * args[0].n;
    char *out = graft__tpl_alloc(r->c, cap);
    size_t k = args[0].n ? strftime(out, cap, fmt, &tm) : 0;
    return graft__tpl_str(out, k);
}

typedef struct global_entry {
    const char *name;
    graft__tpl_builtin fn;
} global_entry;

static const global_entry globals[] = {
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

tval graft__tpl_global(graft__tpl_render *r, const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strlen(globals[i].name) == n && memcmp(globals[i].name, name, n) == 0)
            return graft__tpl_func_value(r, globals[i].name, globals[i].fn, graft__tpl_none());
    return graft__tpl_undef(name, n);
}
