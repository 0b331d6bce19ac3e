/*
 * tag_match.c: how much of a tag (a thought's closing "</think>", say) a text ends with,
 * followed one byte at a time as a generation's output comes.
 */
#include "util/util.h"

uint32_t graft__tag_step(const char *tag, uint32_t matched, uint8_t byte)
{
    for (uint32_t k = matched + 1; k > 0; k--)
        if ((uint8_t)tag[k - 1] == byte && memcmp(tag, tag + matched + 1 - k, k - 1) == 0)
            return k;
    return 0;
}
