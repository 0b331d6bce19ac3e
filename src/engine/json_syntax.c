/*
 * json_syntax.c: the byte-at-a-time recognizer of one JSON object that holds a generation
 * to GRAFT_OUTPUT_JSON_OBJECT (its contract and limits are in engine.h).
 *
 * The state is a mode (what the next byte may be), the stack of open objects and arrays as
 * bits, and the few counters a mode needs. A number has no closing byte: the byte after it
 * ends it and is then read as what follows a value. Only prefixes that some accepted text
 * continues are accepted, so a generation held to it can always finish.
 */
#include "engine/engine.h"

enum {
    M_START,       /* before the object: whitespace or '{' */
    M_OBJECT_OPEN, /* after '{': whitespace, a key or '}' */
    M_KEY,         /* after ',' in an object: whitespace or a key */
    M_COLON,       /* after a key: whitespace or ':' */
    M_VALUE,       /* after ':', or ',' in an array: whitespace or a value */
    M_ARRAY_OPEN,  /* after '[': whitespace, a value or ']' */
    M_AFTER,       /* after a value in an object or array: whitespace, ',' or the closer */
    M_STRING,      /* in a string, at a character boundary */
    M_UTF8,        /* in a string, inside a multi-byte character */
    M_ESCAPE,      /* after '\' */
    M_HEX,         /* in a \u escape */
    M_LOW_SLASH,   /* after a high surrogate's escape: '\' must follow */
    M_LOW_U,       /* ... then 'u' */
    M_LITERAL,     /* in true, false or null */
    M_MINUS,       /* a number: after '-' */
    M_ZERO,        /* after a leading 0 */
    M_INTEGER,     /* in the integer digits (1-9 first) */
    M_POINT,       /* after '.' */
    M_FRACTION,    /* in the fraction's digits */
    M_E,           /* after 'e' or 'E' */
    M_EXP_SIGN,    /* after the exponent's sign */
    M_EXPONENT,    /* in the exponent's digits */
    M_DONE         /* after the object: whitespace only */
};

/* The run of whitespace before the next byte. */
enum {
    S_NONE,  /* empty */
    S_BLANK, /* one space or tab */
    S_CR,    /* a CR, which LF must follow */
    S_LINE   /* a line break, then `indent` spaces and tabs */
};

void graft__json_syntax_init(graft__json_syntax *s)
{
    *s = (graft__json_syntax){.mode = M_START};
}

bool graft__json_syntax_done(const graft__json_syntax *s)
{
    return s->mode == M_DONE && s->space != S_CR;
}

bool graft__json_syntax_in_text(const graft__json_syntax *s)
{
    return s->mode == M_STRING;
}

static bool is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

/* Whether the innermost open container is an object. */
static bool in_object(const graft__json_syntax *s)
{
    return (s->nest >> (s->depth - 1)) & 1u;
}

static void value_end(graft__json_syntax *s)
{
    s->mode = s->depth == 0 ? M_DONE : M_AFTER;
}

static bool open_container(graft__json_syntax *s, bool object)
{
    if (s->depth == GRAFT__JSON_MAX_DEPTH)
        return false;
    if (object)
        s->nest |= UINT64_C(1) << s->depth;
    else
        s->nest &= ~(UINT64_C(1) << s->depth);
    s->depth++;
    s->mode = object ? M_OBJECT_OPEN : M_ARRAY_OPEN;
    return true;
}

static bool close_container(graft__json_syntax *s)
{
    s->depth--;
    value_end(s);
    return true;
}

static bool start_literal(graft__json_syntax *s, const char *rest)
{
    s->rest = rest;
    s->mode = M_LITERAL;
    return true;
}

static bool key_start(graft__json_syntax *s, uint8_t c)
{
    s->key = true;
    s->mode = M_STRING;
    return c == '"';
}

/* The first byte of a value. */
static bool value_start(graft__json_syntax *s, uint8_t c)
{
    switch (c) {
    case '"':
        s->key = false;
        s->mode = M_STRING;
        return true;
    case '{':
        return open_container(s, true);
    case '[':
        return open_container(s, false);
    case 't':
        return start_literal(s, "rue");
    case 'f':
        return start_literal(s, "alse");
    case 'n':
        return start_literal(s, "ull");
    case '-':
        s->mode = M_MINUS;
        return true;
    case '0':
        s->mode = M_ZERO;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            s->mode = M_INTEGER;
            return true;
        }
        return false;
    }
}

/* A byte of a string at a character boundary: a UTF-8 lead byte sets the range of the next
 * continuation byte so that overlong forms, surrogates and code points above U+10FFFF are
 * refused at their first impossible byte. */
static bool string_byte(graft__json_syntax *s, uint8_t c)
{
    if (c == '"') {
        if (s->key)
            s->mode = M_COLON;
        else
            value_end(s);
        return true;
    }
    if (c == '\\') {
        s->mode = M_ESCAPE;
        return true;
    }
    if (c < 0x20)
        return false;
    if (c < 0x80)
        return true;
    uint8_t lo = 0x80, hi = 0xBF, more;
    if (c >= 0xC2 && c <= 0xDF)
        more = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        more = 2;
    else if (c >= 0xF0 && c <= 0xF4)
        more = 3;
    else
        return false;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    s->pending = more;
    s->lo = lo;
    s->hi = hi;
    s->mode = M_UTF8;
    return true;
}

static bool escape_byte(graft__json_syntax *s, uint8_t c)
{
    switch (c) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        s->mode = M_STRING;
        return true;
    case 'u':
        s->code = 0;
        s->pending = 4;
        s->mode = M_HEX;
        return true;
    default:
        return false;
    }
}

static bool hex_byte(graft__json_syntax *s, uint8_t c)
{
    int v = graft__hex_digit(c);
    if (v < 0)
        return false;
    s->code = (uint16_t)(s->code << 4 | (unsigned)v);
    if (--s->pending > 0)
        return true;
    bool high = s->code >= 0xD800 && s->code <= 0xDBFF;
    bool low = s->code >= 0xDC00 && s->code <= 0xDFFF;
    if (s->low_due != low)
        return false;
    s->low_due = high;
    s->mode = high ? M_LOW_SLASH : M_STRING;
    return true;
}

/* A byte while reading a number: a byte that cannot extend it ends it when it may end. */
static bool number_byte(graft__json_syntax *s, uint8_t c)
{
    bool digit = is_digit(c), e = c == 'e' || c == 'E';
    switch (s->mode) {
    case M_MINUS:
        if (!digit)
            return false;
        s->mode = c == '0' ? M_ZERO : M_INTEGER;
        return true;
    case M_POINT:
        s->mode = M_FRACTION;
        return digit;
    case M_E:
        if (c == '+' || c == '-') {
            s->mode = M_EXP_SIGN;
            return true;
        }
        s->mode = M_EXPONENT;
        return digit;
    case M_EXP_SIGN:
        s->mode = M_EXPONENT;
        return digit;
    case M_INTEGER:
    case M_FRACTION:
    case M_EXPONENT:
        if (digit)
            return true;
        break;
    default: /* M_ZERO */
        break;
    }
    if (c == '.' && (s->mode == M_ZERO || s->mode == M_INTEGER)) {
        s->mode = M_POINT;
        return true;
    }
    if (e && s->mode != M_EXPONENT) {
        s->mode = M_E;
        return true;
    }
    value_end(s);
    return graft__json_syntax_feed(s, c);
}

/* A whitespace byte between tokens, if the run can hold it. */
static bool space_byte(graft__json_syntax *s, uint8_t c)
{
    switch (c) {
    case ' ':
    case '\t':
        if (s->space == S_NONE) {
            s->space = S_BLANK;
            return true;
        }
        return s->space == S_LINE && s->indent++ < GRAFT__JSON_MAX_INDENT;
    case '\r':
        if (s->space != S_NONE)
            return false;
        s->space = S_CR;
        return true;
    default: /* '\n' */
        if (s->space != S_NONE && s->space != S_CR)
            return false;
        s->space = S_LINE;
        s->indent = 0;
        return true;
    }
}

/* A byte between tokens: whitespace the run can hold, or what the mode takes. */
static bool structural_byte(graft__json_syntax *s, uint8_t c)
{
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
        return space_byte(s, c);
    if (s->space == S_CR)
        return false;
    s->space = S_NONE;
    switch (s->mode) {
    case M_START:
        return c == '{' && open_container(s, true);
    case M_OBJECT_OPEN:
        return c == '}' ? close_container(s) : key_start(s, c);
    case M_KEY:
        return key_start(s, c);
    case M_COLON:
        s->mode = M_VALUE;
        return c == ':';
    case M_ARRAY_OPEN:
        return c == ']' ? close_container(s) : value_start(s, c);
    case M_VALUE:
        return value_start(s, c);
    case M_AFTER:
        if (c == ',') {
            s->mode = in_object(s) ? M_KEY : M_VALUE;
            return true;
        }
        return c == (in_object(s) ? '}' : ']') && close_container(s);
    default: /* M_DONE */
        return false;
    }
}

bool graft__json_syntax_feed(graft__json_syntax *s, uint8_t c)
{
    switch (s->mode) {
    case M_STRING:
        return string_byte(s, c);
    case M_UTF8:
        if (c < s->lo || c > s->hi)
            return false;
        s->lo = 0x80;
        s->hi = 0xBF;
        if (--s->pending == 0)
            s->mode = M_STRING;
        return true;
    case M_ESCAPE:
        return escape_byte(s, c);
    case M_HEX:
        return hex_byte(s, c);
    case M_LOW_SLASH:
        s->mode = M_LOW_U;
        return c == '\\';
    case M_LOW_U:
        s->code = 0;
        s->pending = 4;
        s->mode = M_HEX;
        return c == 'u';
    case M_LITERAL:
        if (c != (uint8_t)*s->rest)
            return false;
        if (*++s->rest == '\0')
            value_end(s);
        return true;
    case M_MINUS:
    case M_ZERO:
    case M_INTEGER:
    case M_POINT:
    case M_FRACTION:
    case M_E:
    case M_EXP_SIGN:
    case M_EXPONENT:
        return number_byte(s, c);
    default:
        return structural_byte(s, c);
    }
}
