/*
 * value_str.c: str() and repr() of template values, as Python prints them.
 *
 * `{{ x }}` prints str(x): None, True and False by name, floats in their shortest form that
 * reads back the same ("1.0", "1e+16", "0.30000000000000004"), and lists, tuples and
 * dicts in repr form (['a', 1, None], ('x',), {'k': 'v'}), whose strings are quoted and
 * escaped as Python's repr() does. Real templates print these when they concatenate a
 * content list or a dict of tool arguments without tojson.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

void graft__tpl_float_repr(double f, char *buf)
{
    if (isnan(f)) {
        strcpy(buf, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(buf, f < 0 ? "-inf" : "inf");
        return;
    }
    char sci[40];
    int p = 0;
    for (; p < 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p, f);
        if (strtod(sci, NULL) == f)
            break;
    }
    /* sci is [-]d[.ddd]e[+-]xx: take the digits and the exponent. */
    char digits[24];
    int nd = 0;
    const char *s = sci;
    bool neg = *s == '-';
    if (neg)
        s++;
    for (; *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = buf;
    if (neg)
        *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++)
                *o++ = '0';
            memcpy(o, digits, (size_t)nd);
            o += nd;
        } else {
            for (int i = 0; i <= exp; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1) {
                memcpy(o, digits + exp + 1, (size_t)(nd - exp - 1));
                o += nd - exp - 1;
            } else {
                *o++ = '0';
            }
        }
        *o = '\0';
        return;
    }
    *o++ = digits[0];
    if (nd > 1) {
        *o++ = '.';
        memcpy(o, digits + 1, (size_t)(nd - 1));
        o += nd - 1;
    }
    sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
}

/* Deeper lists and dicts than this are an error (a namespace may contain itself). */
#define MAX_NEST 200

static void repr_value(graft__tpl_ctx *c, graft__tpl_buf *b, tval v);

static void repr_str(graft__tpl_ctx *c, graft__tpl_buf *b, const char *s, size_t n)
{
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    graft__tpl_buf_addc(c, b, quote);
    size_t run = 0; /* start of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != (unsigned char)quote) {
            i++;
            continue;
        }
        size_t start = i;
        uint32_t cp = ch < 0x80 ? (i++, ch) : graft__tpl_utf8_next(s, n, &i);
        if (cp >= 0x80 && graft__tpl_is_printable(cp))
            continue;
        graft__tpl_buf_add(c, b, s + run, start - run);
        run = i;
        if (cp == '\\' || cp == (uint32_t)quote) {
            graft__tpl_buf_addc(c, b, '\\');
            graft__tpl_buf_addc(c, b, (char)cp);
        } else if (cp == '\n') {
            graft__tpl_buf_add(c, b, "\\n", 2);
        } else if (cp == '\r') {
            graft__tpl_buf_add(c, b, "\\r", 2);
        } else if (cp == '\t') {
            graft__tpl_buf_add(c, b, "\\t", 2);
        } else if (cp < 0x100) {
            graft__tpl_buf_addf(c, b, "\\x%02x", cp);
        } else if (cp < 0x10000) {
            graft__tpl_buf_addf(c, b, "\\u%04x", cp);
        } else {
            graft__tpl_buf_addf(c, b, "\\U%08x", cp);
        }
    }
    graft__tpl_buf_add(c, b, s + run, n - run);
    graft__tpl_buf_addc(c, b, quote);
}

static void repr_dict(graft__tpl_ctx *c, graft__tpl_buf *b, const graft__tpl_dict *d)
{
    graft__tpl_buf_addc(c, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i)
            graft__tpl_buf_add(c, b, ", ", 2);
        graft__tpl_repr(c, b, d->keys[i]);
        graft__tpl_buf_add(c, b, ": ", 2);
        graft__tpl_repr(c, b, d->vals[i]);
    }
    graft__tpl_buf_addc(c, b, '}');
}

void graft__tpl_repr(graft__tpl_ctx *c, graft__tpl_buf *b, tval v)
{
    if (v.kind >= TV_LIST && v.kind <= TV_NS && ++c->nest > MAX_NEST)
        graft__tpl_fail(c, GRAFT_EINVAL, 0, 0, "RecursionError: values nested too deeply");
    repr_value(c, b, v);
    if (v.kind >= TV_LIST && v.kind <= TV_NS)
        c->nest--;
}

static void repr_value(graft__tpl_ctx *c, graft__tpl_buf *b, tval v)
{
    switch (v.kind) {
    case TV_UNDEF:
        graft__tpl_buf_add(c, b, "Undefined", 9);
        return;
    case TV_STR:
        repr_str(c, b, v.u.s, v.n);
        return;
    case TV_LIST: {
        if (v.flags & TVF_GEN) {
            graft__tpl_buf_add(c, b, "<generator object>", 18);
            return;
        }
        bool tuple = v.flags & TVF_TUPLE;
        graft__tpl_buf_addc(c, b, tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i)
                graft__tpl_buf_add(c, b, ", ", 2);
            graft__tpl_repr(c, b, v.u.list->items[i]);
        }
        if (tuple && v.u.list->n == 1)
            graft__tpl_buf_addc(c, b, ',');
        graft__tpl_buf_addc(c, b, tuple ? ')' : ']');
        return;
    }
    case TV_DICT:
        repr_dict(c, b, v.u.dict);
        return;
    default:
        graft__tpl_to_str(c, b, v);
    }
}

void graft__tpl_to_str(graft__tpl_ctx *c, graft__tpl_buf *b, tval v)
{
    char num[40];
    switch (v.kind) {
    case TV_UNDEF:
        return;
    case TV_NONE:
        graft__tpl_buf_add(c, b, "None", 4);
        return;
    case TV_BOOL:
        graft__tpl_buf_add(c, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5);
        return;
    case TV_INT:
        graft__tpl_buf_addf(c, b, "%lld", (long long)v.u.i);
        return;
    case TV_FLOAT:
        graft__tpl_float_repr(v.u.f, num);
        graft__tpl_buf_add(c, b, num, strlen(num));
        return;
    case TV_STR:
        graft__tpl_buf_add(c, b, v.u.s, v.n);
        return;
    case TV_LIST:
    case TV_DICT:
        graft__tpl_repr(c, b, v);
        return;
    case TV_NS:
        graft__tpl_buf_add(c, b, "<Namespace ", 11);
        if (++c->nest > MAX_NEST)
            graft__tpl_fail(c, GRAFT_EINVAL, 0, 0, "RecursionError: values nested too deeply");
        repr_dict(c, b, v.u.dict);
        c->nest--;
        graft__tpl_buf_addc(c, b, '>');
        return;
    case TV_MACRO:
        graft__tpl_buf_addf(c, b, "<Macro '%.*s'>", (int)v.u.macro->node->name_n,
                            v.u.macro->node->name);
        return;
    case TV_FUNC:
        graft__tpl_buf_addf(c, b, "<built-in method %s>", v.u.func->name);
        return;
    default:
        graft__tpl_buf_add(c, b, "<LoopContext>", 13);
    }
}

tval graft__tpl_stringify(graft__tpl_ctx *c, tval v)
{
    if (v.kind == TV_STR)
        return v;
    graft__tpl_buf b = {0};
    graft__tpl_to_str(c, &b, v);
    return graft__tpl_str(b.p ? b.p : "", b.n);
}
