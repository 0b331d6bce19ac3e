/*
 * render.c: executing a template's statements: scopes, loops, macros, output.
 *
 * Scopes follow jinja2: the template's top level is one scope over the input variables;
 * each iteration of a for loop gets a fresh scope (so `set` inside a loop does not leak out
 * of it, nor into the next iteration: namespace() is how templates carry state across), a
 * macro call gets a scope over the scope the macro was defined in, so do the bodies of
 * block sets and filter blocks over theirs, and `if` makes none.
 * The `loop` variable is a TV_LOOP over the iteration's state.
 *
 * Bounds: every loop iteration and macro call counts a step against max_steps (and scans
 * that can be long, such as `in` over a list, count a step per 16 items), macro calls
 * nest at most max_depth deep, and every buffer (the output, a macro's or block's text) is
 * held under max_output bytes, so a hostile template ends with an error instead of running
 * away.
 */
#include <string.h>

#include "template/template.h"

struct graft__tpl_scope {
    graft__tpl_scope *parent;
    const graft__tpl_dict *vars; /* the input variables (top-level scope only) */
    uint32_t n, cap;
    const char **names;
    size_t *lens;
    tval *vals;
};

struct graft__tpl_loop {
    const graft__tpl_list *items;
    size_t index;
    bool has_changed;
    tval last_changed;
};

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static graft__tpl_scope *new_scope(graft__tpl_render *r, graft__tpl_scope *parent)
{
    graft__tpl_scope *s = graft__tpl_alloc(r->c, sizeof *s);
    s->parent = parent;
    return s;
}

static void bind(graft__tpl_render *r, graft__tpl_scope *s, const char *name, size_t n, tval v)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->lens[i] == n && memcmp(s->names[i], name, n) == 0) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        const char **names = graft__tpl_alloc(r->c, cap * sizeof *names);
        size_t *lens = graft__tpl_alloc(r->c, cap * sizeof *lens);
        tval *vals = graft__tpl_alloc(r->c, cap * sizeof *vals);
        if (s->n) {
            memcpy(names, s->names, s->n * sizeof *names);
            memcpy(lens, s->lens, s->n * sizeof *lens);
            memcpy(vals, s->vals, s->n * sizeof *vals);
        }
        s->names = names;
        s->lens = lens;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->lens[s->n] = n;
    s->vals[s->n] = v;
    s->n++;
}

tval graft__tpl_lookup(graft__tpl_render *r, graft__tpl_scope *s, const char *name, size_t n)
{
    for (; s != NULL; s = s->parent) {
        for (uint32_t i = 0; i < s->n; i++)
            if (s->lens[i] == n && s->names[i][0] == name[0] && memcmp(s->names[i], name, n) == 0)
                return s->vals[i];
        if (s->vars != NULL) {
            tval *v = graft__tpl_dict_find_str(s->vars, name, n);
            if (v != NULL)
                return *v;
        }
    }
    tval g = graft__tpl_global(r, name, n);
    if (g.kind != TV_UNDEF)
        return g;
    return graft__tpl_undef(name, n);
}

void graft__tpl_charge(graft__tpl_render *r, uint64_t units, const graft__tpl_node *at)
{
    r->c->steps += units;
    if (r->c->steps > r->c->max_steps)
        graft__tpl_fail(r->c, GRAFT_ECAPACITY, at->line, at->col,
                        "template: more than %llu steps (loop iterations, macro calls, long "
                        "scans)",
                        (unsigned long long)r->c->max_steps);
}

/* ---- the loop variable ------------------------------------------------------------------ */

static tval loop_cycle(graft__tpl_render *r, tval self, tval *args, size_t n,
                       graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)kwargs;
    if (n == 0)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: no items for cycling given");
    return args[self.u.loop->index % n];
}

static tval loop_changed(graft__tpl_render *r, tval self, tval *args, size_t n,
                         graft__tpl_dict *kwargs, const graft__tpl_node *at)
{
    (void)kwargs;
    tval key = graft__tpl_new_list(r->c, n, TVF_TUPLE);
    for (size_t i = 0; i < n; i++)
        key.u.list->items[i] = args[i];
    key.u.list->n = n;
    (void)at;
    graft__tpl_loop *l = self.u.loop;
    bool changed = !l->has_changed || !graft__tpl_equal(l->last_changed, key);
    l->has_changed = true;
    l->last_changed = key;
    return graft__tpl_bool(changed);
}

tval graft__tpl_loop_attr(graft__tpl_render *r, tval loop, const char *name, size_t n)
{
    const graft__tpl_loop *l = loop.u.loop;
    size_t len = l->items->n, i = l->index;
    char key[16];
    if (n >= sizeof key)
        return graft__tpl_undef(name, n);
    memcpy(key, name, n);
    key[n] = '\0';
    if (strcmp(key, "index") == 0)
        return graft__tpl_int((int64_t)i + 1);
    if (strcmp(key, "index0") == 0)
        return graft__tpl_int((int64_t)i);
    if (strcmp(key, "revindex") == 0)
        return graft__tpl_int((int64_t)(len - i));
    if (strcmp(key, "revindex0") == 0)
        return graft__tpl_int((int64_t)(len - i - 1));
    if (strcmp(key, "first") == 0)
        return graft__tpl_bool(i == 0);
    if (strcmp(key, "last") == 0)
        return graft__tpl_bool(i + 1 == len);
    if (strcmp(key, "length") == 0)
        return graft__tpl_int((int64_t)len);
    if (strcmp(key, "depth") == 0)
        return graft__tpl_int(1);
    if (strcmp(key, "depth0") == 0)
        return graft__tpl_int(0);
    if (strcmp(key, "previtem") == 0)
        return i > 0 ? l->items->items[i - 1] : graft__tpl_undef("previtem", 8);
    if (strcmp(key, "nextitem") == 0)
        return i + 1 < len ? l->items->items[i + 1] : graft__tpl_undef("nextitem", 8);
    if (strcmp(key, "cycle") == 0)
        return graft__tpl_func_value(r, "cycle", loop_cycle, loop);
    if (strcmp(key, "changed") == 0)
        return graft__tpl_func_value(r, "changed", loop_changed, loop);
    return graft__tpl_undef(name, n);
}

/* ---- statements ------------------------------------------------------------------------- */

static int exec_body(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_nodes *body);

/* Binds a for or set target (a name or a tuple of names) to v. */
static void assign(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *target,
                   tval v)
{
    if (target->kind == N_NAME) {
        bind(r, s, target->name, target->name_n, v);
        return;
    }
    graft__tpl_list *items = graft__tpl_iterate(r->c, v, target->line, target->col);
    if (items->n != target->args.n)
        graft__tpl_fail(r->c, GRAFT_EINVAL, target->line, target->col,
                        "ValueError: %s values to unpack (expected %u, got %zu)",
                        items->n > target->args.n ? "too many" : "not enough", target->args.n,
                        items->n);
    for (uint32_t i = 0; i < target->args.n; i++)
        bind(r, s, target->args.v[i]->name, target->args.v[i]->name_n, items->items[i]);
}

static int exec_for(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    tval iterable = graft__tpl_eval(r, s, n->b);
    if (iterable.kind == TV_UNDEF && (iterable.flags & TVF_UNSAFE))
        graft__tpl_undefined_error(r, iterable, n->b);
    graft__tpl_list *items = graft__tpl_iterate(r->c, iterable, n->b->line, n->b->col);
    if (n->c != NULL) {
        graft__tpl_list *kept = graft__tpl_new_list(r->c, items->n, 0).u.list;
        for (size_t i = 0; i < items->n; i++) {
            graft__tpl_charge(r, 1, n);
            graft__tpl_scope *it = new_scope(r, s);
            assign(r, it, n->a, items->items[i]);
            if (graft__tpl_truthy(graft__tpl_eval(r, it, n->c)))
                kept->items[kept->n++] = items->items[i];
        }
        items = kept;
    }
    if (items->n == 0)
        return exec_body(r, s, &n->kwargs);
    graft__tpl_loop *state = graft__tpl_alloc(r->c, sizeof *state);
    state->items = items;
    tval loop = {.kind = TV_LOOP};
    loop.u.loop = state;
    for (size_t i = 0; i < items->n; i++) {
        graft__tpl_charge(r, 1, n);
        state->index = i;
        graft__tpl_scope *it = new_scope(r, s);
        bind(r, it, "loop", 4, loop);
        assign(r, it, n->a, items->items[i]);
        if (exec_body(r, it, &n->args) == FLOW_BREAK)
            break;
    }
    return FLOW_NORMAL;
}

static void exec_set(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *target,
                     tval v)
{
    if (target->kind != N_GETATTR) {
        assign(r, s, target, v);
        return;
    }
    tval ns = graft__tpl_lookup(r, s, target->a->name, target->a->name_n);
    if (ns.kind != TV_NS)
        graft__tpl_fail(r->c, GRAFT_EINVAL, target->line, target->col,
                        "TemplateRuntimeError: cannot assign attribute on non-namespace object");
    graft__tpl_dict_set(r->c, ns.u.dict, graft__tpl_str(target->name, target->name_n), v);
}

/* Renders body in scope s into a new buffer; returns its text. */
static tval capture(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_nodes *body)
{
    graft__tpl_buf *saved = r->out;
    graft__tpl_buf b = {0};
    r->out = &b;
    exec_body(r, s, body);
    r->out = saved;
    return graft__tpl_str(b.p ? b.p : "", b.n);
}

/* Applies a filter chain whose innermost input is NULL to v. */
static tval apply_chain(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *f,
                        tval v)
{
    if (f == NULL)
        return v;
    return graft__tpl_eval_filter(r, s, f, apply_chain(r, s, f->a, v));
}

/* The macro a {% macro %} defines, or the caller of a {% call %} block: node n, closing
 * over scope s. */
static tval macro_of(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    graft__tpl_macro *m = graft__tpl_alloc(r->c, sizeof *m);
    m->node = n;
    m->closure = s;
    tval v = {.kind = TV_MACRO};
    v.u.macro = m;
    return v;
}

static int exec_stmt(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_node *n)
{
    switch (n->kind) {
    case N_TEXT:
        graft__tpl_buf_add(r->c, r->out, n->value.u.s, n->value.n);
        return FLOW_NORMAL;
    case N_OUTPUT: {
        tval v = graft__tpl_eval(r, s, n->a);
        graft__tpl_to_str(r->c, r->out, v);
        return FLOW_NORMAL;
    }
    case N_IF:
        if (graft__tpl_truthy(graft__tpl_eval(r, s, n->a)))
            return exec_body(r, s, &n->args);
        return exec_body(r, s, &n->kwargs);
    case N_FOR:
        return exec_for(r, s, n);
    case N_SET:
        exec_set(r, s, n->a, graft__tpl_eval(r, s, n->b));
        return FLOW_NORMAL;
    case N_SET_BLOCK: /* its body has a scope of its own, as a filter block's has */
        exec_set(r, s, n->a, apply_chain(r, s, n->c, capture(r, new_scope(r, s), &n->args)));
        return FLOW_NORMAL;
    case N_MACRO:
        bind(r, s, n->name, n->name_n, macro_of(r, s, n));
        return FLOW_NORMAL;
    case N_CALL_BLOCK: {
        tval caller = macro_of(r, s, n);
        tval v = graft__tpl_eval_call(r, s, n->a, &caller);
        graft__tpl_to_str(r->c, r->out, v);
        return FLOW_NORMAL;
    }
    case N_FILTER_BLOCK: {
        tval v = apply_chain(r, s, n->a, capture(r, new_scope(r, s), &n->args));
        graft__tpl_to_str(r->c, r->out, v);
        return FLOW_NORMAL;
    }
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    default:
        GRAFT_ASSERT(!"statement kind");
    }
}

static int exec_body(graft__tpl_render *r, graft__tpl_scope *s, const graft__tpl_nodes *body)
{
    for (uint32_t i = 0; i < body->n; i++) {
        int flow = exec_stmt(r, s, body->v[i]);
        if (flow != FLOW_NORMAL)
            return flow;
    }
    return FLOW_NORMAL;
}

/* ---- macros --------------------------------------------------------------------------- */

tval graft__tpl_call_macro(graft__tpl_render *r, tval fn, tval *args, size_t n_args,
                           graft__tpl_dict *kwargs, tval *caller, const graft__tpl_node *at)
{
    const graft__tpl_macro *m = fn.u.macro;
    const graft__tpl_node *def = m->node;
    const char *name = def->kind == N_MACRO ? def->name : "caller";
    int name_n = def->kind == N_MACRO ? (int)def->name_n : 6;
    graft__tpl_charge(r, 1, at);
    if (++r->c->depth > r->c->max_depth)
        graft__tpl_fail(r->c, GRAFT_ECAPACITY, at->line, at->col,
                        "template: macro calls nested more than %d deep", r->c->max_depth);
    if (n_args > def->args.n)
        graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                        "TypeError: macro '%.*s' takes not more than %u argument(s)", name_n,
                        name, def->args.n);
    graft__tpl_scope *s = new_scope(r, m->closure);
    for (size_t k = 0; kwargs != NULL && k < kwargs->n; k++) {
        tval key = kwargs->keys[k];
        bool known = false;
        for (uint32_t i = 0; i < def->args.n && !known; i++)
            known = def->args.v[i]->name_n == key.n &&
                    memcmp(def->args.v[i]->name, key.u.s, key.n) == 0;
        if (!known)
            graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                            "TypeError: macro '%.*s' takes no keyword argument '%.*s'", name_n,
                            name, (int)key.n, key.u.s);
    }
    for (uint32_t i = 0; i < def->args.n; i++) {
        const graft__tpl_node *param = def->args.v[i];
        tval *kw = kwargs ? graft__tpl_dict_find_str(kwargs, param->name, param->name_n) : NULL;
        tval v;
        if (i < n_args) {
            if (kw != NULL)
                graft__tpl_fail(r->c, GRAFT_EINVAL, at->line, at->col,
                                "TypeError: macro '%.*s' got multiple values for argument '%.*s'",
                                name_n, name, (int)param->name_n, param->name);
            v = args[i];
        } else if (kw != NULL) {
            v = *kw;
        } else if (param->a != NULL) {
            v = graft__tpl_eval(r, s, param->a);
        } else {
            v = graft__tpl_undef(param->name, param->name_n);
        }
        bind(r, s, param->name, param->name_n, v);
    }
    if (caller != NULL)
        bind(r, s, "caller", 6, *caller);
    tval out = capture(r, s, &def->kwargs);
    r->c->depth--;
    return out;
}

void graft__tpl_render_body(graft__tpl_render *r, const graft__tpl_nodes *body, tval vars)
{
    graft__tpl_scope *top = new_scope(r, NULL);
    top->vars = vars.u.dict;
    exec_body(r, top, body);
}
