/*
 * tally.c: the disagreements of a test that checks many generated cases against an oracle
 * (tally.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>

#include "tally.h"

static unsigned failures, printed, max_printed;

void graft_test_tally_begin(unsigned max)
{
    failures = printed = 0;
    max_printed = max;
}

bool graft_test_tally_count(void)
{
    failures++;
    if (printed >= max_printed)
        return false;
    printed++;
    return true;
}

unsigned graft_test_tally_failures(void)
{
    return failures;
}

void graft_test_tally_end(uint64_t seed)
{
    if (failures > 0)
        fail_msg("%u disagreements (the first %u printed, seed 0x%" PRIx64 ")", failures,
                 printed, seed);
}
