/*
 * utf8.c: the Unicode facts Python's str operations need, over UTF-8 bytes.
 *
 * Python indexes, slices and measures strings by code point, strips and splits at Unicode
 * whitespace, maps case per character and escapes unprintable characters in repr(); the
 * template layer keeps strings as UTF-8 bytes and asks this file. Case mapping covers
 * ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (the scripts of chat text whose
 * case changes); other characters keep their case. Printability follows Python for
 * controls, separators, format characters, surrogates and private use; unassigned code
 * points are treated as printable.
 */
#include "template/template.h"

uint32_t graft__tpl_utf8_next(const char *str, size_t n, size_t *i)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t k = *i;
    unsigned char b = s[k];
    int len = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 1 || len == 0 || k + (size_t)len > n) {
        *i = k + 1;
        return b;
    }
    uint32_t cp = b & (0x7f >> len);
    for (int j = 1; j < len; j++) {
        if ((s[k + j] & 0xc0) != 0x80) {
            *i = k + 1;
            return b;
        }
        cp = cp << 6 | (s[k + j] & 0x3f);
    }
    *i = k + (size_t)len;
    return cp;
}

int graft__tpl_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t graft__tpl_utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80)
            i++;
        else
            graft__tpl_utf8_next(s, n, &i);
        count++;
    }
    return count;
}

size_t graft__tpl_utf8_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (k > 0 && i < n) {
        if ((unsigned char)s[i] < 0x80)
            i++;
        else
            graft__tpl_utf8_next(s, n, &i);
        k--;
    }
    return i;
}

bool graft__tpl_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t graft__tpl_upper(uint32_t cp)
{
    if (cp >= 'a' && cp <= 'z')
        return cp - 32;
    if (cp < 0x80)
        return cp;
    if (cp == 0xb5)
        return 0x39c;
    if (cp == 0xff)
        return 0x178;
    if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7)
        return cp - 32;
    if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 &&
        cp != 0x149 && cp != 0x178 && cp != 0x17f) {
        bool odd_lower = (cp < 0x138) || (cp > 0x148 && cp < 0x178);
        if (odd_lower ? (cp & 1) : !(cp & 1))
            return cp - 1;
        return cp;
    }
    if (cp == 0x3c2)
        return 0x3a3;
    if (cp >= 0x3b1 && cp <= 0x3cb)
        return cp - 32;
    if (cp >= 0x430 && cp <= 0x44f)
        return cp - 32;
    if (cp >= 0x450 && cp <= 0x45f)
        return cp - 80;
    return cp;
}

uint32_t graft__tpl_lower(uint32_t cp)
{
    if (cp >= 'A' && cp <= 'Z')
        return cp + 32;
    if (cp < 0x80)
        return cp;
    if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7)
        return cp + 32;
    if (cp == 0x178)
        return 0xff;
    if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 &&
        cp != 0x149 && cp != 0x17f) {
        bool even_upper = (cp < 0x138) || (cp > 0x148 && cp < 0x178);
        if (even_upper ? !(cp & 1) : (cp & 1))
            return cp + 1;
        return cp;
    }
    if (cp >= 0x391 && cp <= 0x3ab && cp != 0x3a2)
        return cp + 32;
    if (cp >= 0x410 && cp <= 0x42f)
        return cp + 32;
    if (cp >= 0x400 && cp <= 0x40f)
        return cp + 80;
    return cp;
}

bool graft__tpl_is_printable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad)
        return false;
    if (cp < 0x300)
        return true;
    return !(cp == 0x61c || cp == 0x1680 || cp == 0x180e || (cp >= 0x2000 && cp <= 0x200f) ||
             (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f) ||
             cp == 0x3000 || (cp >= 0xd800 && cp <= 0xf8ff) || cp == 0xfeff ||
             (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe0000 && cp <= 0xe007f) ||
             cp >= 0xf0000 || cp == 0x110bd || (cp >= 0x1bca0 && cp <= 0x1bca3) ||
             (cp >= 0x1d173 && cp <= 0x1d17a) || cp == 0x600 || cp == 0x601 ||
             cp == 0x602 || cp == 0x603 || cp == 0x604 || cp == 0x605 || cp == 0x6dd ||
             cp == 0x70f || cp == 0x8e2);
}
