/*
 * lexer.c: template text to tokens, with jinja2's whitespace rules.
 *
 * Text between tags becomes TK_TEXT; inside `{{ }}` and `{% %}` come names, literals and
 * operators; comments and `{% raw %}` are resolved here. The whitespace rules are those of
 * jinja2's lexer with trim_blocks and lstrip_blocks on:
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` strip
 *     all whitespace after it;
 *   - trim_blocks: the first newline after `%}` or `#}` is dropped (`+%}` keeps it);
 *   - lstrip_blocks: spaces and tabs between the start of a line and `{%` or `{#` are
 *     dropped (`{%+` keeps them), where "start of a line" includes the start of the text
 *     and the point just after a tag that itself ended with a newline.
 * String literals are decoded as Python's unicode-escape codec does (\n, \t, \\, \',
 * \xhh, \uhhhh, octal, ...); unknown escapes keep their backslash.
 */
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

typedef struct lexer {
    graft__tpl_ctx *c;
    const char *s;
    size_t n, pos;
    graft__tpl_token *toks;
    size_t n_toks, cap;
    uint32_t loc_line; /* line of offset loc_off */
    size_t loc_off, loc_line_start;
    bool line_starting;
    char stack[64]; /* open brackets inside a tag */
    int depth;
} lexer;

static void locate(lexer *lx, size_t off, uint32_t *line, uint32_t *col)
{
    if (off < lx->loc_off) {
        lx->loc_off = 0;
        lx->loc_line = 1;
        lx->loc_line_start = 0;
    }
    for (; lx->loc_off < off; lx->loc_off++)
        if (lx->s[lx->loc_off] == '\n') {
            lx->loc_line++;
            lx->loc_line_start = lx->loc_off + 1;
        }
    *line = lx->loc_line;
    *col = (uint32_t)(off - lx->loc_line_start + 1);
}

static _Noreturn void lex_error(lexer *lx, size_t off, const char *what)
{
    uint32_t line, col;
    locate(lx, off, &line, &col);
    graft__tpl_fail(lx->c, GRAFT_EFORMAT, line, col, "TemplateSyntaxError: %s", what);
}

static graft__tpl_token *push(lexer *lx, int kind, size_t off)
{
    if (lx->n_toks == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        graft__tpl_token *t = graft__tpl_alloc(lx->c, cap * sizeof *t);
        if (lx->n_toks)
            memcpy(t, lx->toks, lx->n_toks * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    graft__tpl_token *t = &lx->toks[lx->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    locate(lx, off, &t->line, &t->col);
    return t;
}

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Length of text[0, n) once Python's str.rstrip() is applied. */
static size_t rstrip_len(const char *text, size_t n)
{
    while (n > 0) {
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)text[k] & 0xc0) == 0x80)
            k--;
        size_t i = k;
        uint32_t cp = graft__tpl_utf8_next(text, n, &i);
        if (i != n || !graft__tpl_is_space(cp))
            break;
        n = k;
    }
    return n;
}

/* Emits the text before a tag, with the tag's whitespace control applied. sign: '-', '+'
 * or 0; lstrip: whether lstrip_blocks applies to this tag (blocks and comments). */
static void emit_text(lexer *lx, size_t start, size_t end, char sign, bool lstrip)
{
    const char *text = lx->s + start;
    size_t n = end - start;
    if (sign == '-') {
        n = rstrip_len(text, n);
    } else if (sign != '+' && lstrip) {
        size_t l_pos = n;
        while (l_pos > 0 && text[l_pos - 1] != '\n')
            l_pos--;
        if (l_pos > 0 || lx->line_starting) {
            size_t k = l_pos;
            while (k < n && (text[k] == ' ' || text[k] == '\t'))
                k++;
            if (k == n)
                n = l_pos;
        }
    }
    if (n > 0) {
        graft__tpl_token *t = push(lx, TK_TEXT, start);
        t->text = text;
        t->n = n;
    }
}

/* After a tag's closing delimiter at lx->pos (past it): the tag's end sign handling. */
static void after_end(lexer *lx, char sign, bool trim)
{
    if (sign == '-') {
        while (lx->pos < lx->n) { /* Python's \s: Unicode whitespace */
            size_t i = lx->pos;
            if (!graft__tpl_is_space(graft__tpl_utf8_next(lx->s, lx->n, &i)))
                break;
            lx->pos = i;
        }
    } else if (sign != '+' && trim && lx->pos < lx->n && lx->s[lx->pos] == '\n') {
        lx->pos++;
    }
    lx->line_starting = lx->pos > 0 && lx->s[lx->pos - 1] == '\n';
}

/* Decodes the string literal body s[0, n) (escapes) into the arena. */
static void decode_string(lexer *lx, graft__tpl_token *t, const char *s, size_t n, size_t off)
{
    char *out = graft__tpl_alloc(lx->c, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) {
            out[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        i += 2;
        static const char simple_from[] = "\\'\"abfnrtv", simple_to[] = "\\'\"\a\b\f\n\r\t\v";
        const char *hit = strchr(simple_from, e);
        if (e != '\0' && hit != NULL) {
            out[o++] = simple_to[hit - simple_from];
        } else if (e == '\n') {
            /* a line continuation: nothing */
        } else if (e >= '0' && e <= '7') {
            uint32_t cp = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                cp = cp * 8 + (uint32_t)(s[i++] - '0');
            o += (size_t)graft__tpl_utf8_put(cp, out + o);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i < n ? graft__hex_digit((unsigned char)s[i]) : -1;
                if (h < 0)
                    lex_error(lx, off, "truncated escape in a string literal");
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10ffff)
                lex_error(lx, off, "illegal Unicode character in a string literal");
            o += (size_t)graft__tpl_utf8_put(cp, out + o);
        } else if (e == 'N') {
            lex_error(lx, off, "\\N{...} escapes are not supported");
        } else {
            out[o++] = '\\';
            out[o++] = e;
        }
    }
    t->text = out;
    t->n = o;
}

static const char *const operators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                        "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                        ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

static size_t digits_end(const char *s, size_t n, size_t i)
{
    /* (\d+_)*\d+ starting at a digit */
    while (i < n) {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i + 1 < n && s[i] == '_' && s[i + 1] >= '0' && s[i + 1] <= '9')
            i++;
        else
            break;
    }
    return i;
}

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* A number token at lx->pos (a digit). */
static void lex_number(lexer *lx)
{
    const char *s = lx->s;
    size_t start = lx->pos, i = digits_end(s, lx->n, start), end_int = i;
    bool is_float = false;
    bool after_dot = start > 0 && s[start - 1] == '.';
    if (!after_dot) {
        size_t j = i;
        if (j + 1 < lx->n && s[j] == '.' && is_digit(s[j + 1])) {
            j = digits_end(s, lx->n, j + 1);
            is_float = true;
            i = j;
        }
        if (j < lx->n && (s[j] == 'e' || s[j] == 'E')) {
            size_t k = j + 1;
            if (k < lx->n && (s[k] == '+' || s[k] == '-'))
                k++;
            if (k < lx->n && is_digit(s[k])) {
                i = digits_end(s, lx->n, k);
                is_float = true;
            }
        }
    }
    if (!is_float)
        i = end_int;
    char buf[64];
    size_t m = 0;
    for (size_t k = start; k < i && m < sizeof buf - 1; k++)
        if (s[k] != '_')
            buf[m++] = s[k];
    buf[m] = '\0';
    graft__tpl_token *t = push(lx, is_float ? TK_FLOAT : TK_INT, start);
    t->text = s + start;
    t->n = i - start;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (m > 18 && v > (unsigned long long)INT64_MAX)
            lex_error(lx, start, "integer literal too large");
        t->i = (int64_t)v;
    }
    lx->pos = i;
}

static void lex_string(lexer *lx)
{
    const char *s = lx->s;
    char q = s[lx->pos];
    size_t i = lx->pos + 1;
    while (i < lx->n && s[i] != q) {
        if (s[i] == '\\' && i + 1 < lx->n)
            i++;
        i++;
    }
    if (i >= lx->n)
        lex_error(lx, lx->pos, "unterminated string literal");
    graft__tpl_token *t = push(lx, TK_STRING, lx->pos);
    decode_string(lx, t, s + lx->pos + 1, i - lx->pos - 1, lx->pos);
    lx->pos = i + 1;
}

static void lex_operator(lexer *lx)
{
    const char *s = lx->s + lx->pos;
    size_t left = lx->n - lx->pos;
    for (size_t k = 0; k < sizeof operators / sizeof operators[0]; k++) {
        size_t len = strlen(operators[k]);
        if (len > left || memcmp(s, operators[k], len) != 0)
            continue;
        char ch = s[0];
        if (len == 1 && (ch == '(' || ch == '[' || ch == '{')) {
            if (lx->depth == (int)sizeof lx->stack)
                lex_error(lx, lx->pos, "brackets nested too deeply");
            lx->stack[lx->depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (len == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            if (lx->depth == 0 || lx->stack[lx->depth - 1] != ch) {
                char msg[40];
                snprintf(msg, sizeof msg, "unexpected '%c'", ch);
                lex_error(lx, lx->pos, msg);
            }
            lx->depth--;
        }
        graft__tpl_token *t = push(lx, TK_OP, lx->pos);
        t->text = operators[k];
        t->n = len;
        lx->pos += len;
        return;
    }
    lex_error(lx, lx->pos, "unexpected character");
}

/* The tokens of a {{ }} or {% %} tag up to its end. block: {% %}. */
static void lex_tag(lexer *lx, bool block, size_t tag_start)
{
    const char *s = lx->s;
    lx->depth = 0;
    for (;;) {
        if (lx->pos >= lx->n)
            lex_error(lx, tag_start, block ? "unexpected end of template: '%}' is missing"
                                           : "unexpected end of template: '}}' is missing");
        const char *p = s + lx->pos;
        size_t left = lx->n - lx->pos;
        if (lx->depth == 0) {
            char end = block ? '%' : '}';
            char sign = 0;
            size_t len = 0;
            if (left >= 3 && (p[0] == '-' || (block && p[0] == '+')) && p[1] == end && p[2] == '}')
                sign = p[0], len = 3;
            else if (left >= 2 && p[0] == end && p[1] == '}')
                len = 2;
            if (len) {
                push(lx, block ? TK_BLOCK_END : TK_VAR_END, lx->pos);
                lx->pos += len;
                after_end(lx, sign, block);
                return;
            }
        }
        char ch = *p;
        if (is_ws(ch))
            lx->pos++;
        else if (is_digit(ch))
            lex_number(lx);
        else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t i = lx->pos + 1;
            while (i < lx->n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                                 s[i] == '_' || is_digit(s[i])))
                i++;
            graft__tpl_token *t = push(lx, TK_NAME, lx->pos);
            t->text = s + lx->pos;
            t->n = i - lx->pos;
            lx->pos = i;
        } else if (ch == '\'' || ch == '"')
            lex_string(lx);
        else
            lex_operator(lx);
    }
}

/* If a `{% raw %}` tag starts at `at` (just past `{%` and its sign), its end offset. */
static size_t raw_begin(lexer *lx, size_t at, char *sign_out)
{
    const char *s = lx->s;
    size_t i = at;
    while (i < lx->n && is_ws(s[i]))
        i++;
    if (lx->n - i < 3 || memcmp(s + i, "raw", 3) != 0)
        return 0;
    i += 3;
    while (i < lx->n && is_ws(s[i]))
        i++;
    if (lx->n - i >= 3 && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}') {
        *sign_out = '-';
        return i + 3;
    }
    if (lx->n - i >= 2 && s[i] == '%' && s[i + 1] == '}') {
        *sign_out = 0;
        return i + 2;
    }
    return 0;
}

/* The body of a raw block starting at lx->pos, through its `{% endraw %}`. */
static void lex_raw(lexer *lx, size_t tag_start)
{
    const char *s = lx->s;
    for (size_t i = lx->pos; i + 1 < lx->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char sign = 0;
        if (j < lx->n && (s[j] == '-' || s[j] == '+'))
            sign = s[j++];
        while (j < lx->n && is_ws(s[j]))
            j++;
        if (lx->n - j < 6 || memcmp(s + j, "endraw", 6) != 0)
            continue;
        j += 6;
        while (j < lx->n && is_ws(s[j]))
            j++;
        char end_sign = 0;
        if (lx->n - j >= 3 && (s[j] == '-' || s[j] == '+') && s[j + 1] == '%' && s[j + 2] == '}')
            end_sign = s[j], j += 3;
        else if (lx->n - j >= 2 && s[j] == '%' && s[j + 1] == '}')
            j += 2;
        else
            continue;
        emit_text(lx, lx->pos, i, sign, true);
        lx->pos = j;
        after_end(lx, end_sign, true);
        return;
    }
    lex_error(lx, tag_start, "missing end of raw directive");
}

/* A comment starting at lx->pos (past `{#` and its sign), through its end. */
static void lex_comment(lexer *lx, size_t tag_start)
{
    const char *s = lx->s;
    for (size_t i = lx->pos; i + 1 < lx->n; i++) {
        if (s[i] == '#' && s[i + 1] == '}') {
            char sign = i > lx->pos && (s[i - 1] == '-' || s[i - 1] == '+') ? s[i - 1] : 0;
            lx->pos = i + 2;
            after_end(lx, sign, true);
            return;
        }
    }
    lex_error(lx, tag_start, "missing end of comment tag");
}

void graft__tpl_lex(graft__tpl_ctx *c, const char *src, size_t n, graft__tpl_token **out,
                    size_t *n_out)
{
    lexer lx = {.c = c, .s = src, .n = n, .loc_line = 1, .line_starting = true};
    while (lx.pos < n) {
        const char *hit = NULL;
        for (const char *p = memchr(src + lx.pos, '{', n - lx.pos); p != NULL && p + 1 < src + n;
             p = memchr(p + 1, '{', (size_t)(src + n - p - 1))) {
            if (p[1] == '{' || p[1] == '%' || p[1] == '#') {
                hit = p;
                break;
            }
        }
        if (hit == NULL) {
            emit_text(&lx, lx.pos, n, 0, false);
            break;
        }
        size_t start = (size_t)(hit - src);
        char kind = hit[1];
        size_t after = start + 2;
        char sign = 0;
        if (after < n && (src[after] == '-' || src[after] == '+'))
            sign = src[after++];
        char raw_sign = 0;
        size_t raw_end = kind == '%' ? raw_begin(&lx, after, &raw_sign) : 0;
        emit_text(&lx, lx.pos, start, sign, kind != '{');
        lx.pos = after;
        if (raw_end) {
            lx.pos = raw_end;
            after_end(&lx, raw_sign, false);
            lex_raw(&lx, start);
        } else if (kind == '#') {
            lex_comment(&lx, start);
        } else {
            push(&lx, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, start);
            lex_tag(&lx, kind == '%', start);
        }
    }
    push(&lx, TK_EOF, n);
    *out = lx.toks;
    *n_out = lx.n_toks;
}
