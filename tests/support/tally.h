/*
 * tally.h: the disagreements of a test that checks many generated cases against an oracle.
 * Each is counted; only the first few are printed (a long list would bury the first one);
 * the test fails at its end when there was any, with the seed that reproduces the run.
 * One tally at a time, on the test's thread (cmocka's).
 */
#ifndef GRAFT_TEST_TALLY_H
#define GRAFT_TEST_TALLY_H

#include <stdbool.h>
#include <stdint.h>

/* Starts a test's tally: nothing counted, the first max_printed disagreements to print. */
void graft_test_tally_begin(unsigned max_printed);
/* Counts a disagreement; whether it is among those to print (the caller prints it then). */
bool graft_test_tally_count(void);
/* The disagreements counted since graft_test_tally_begin. */
unsigned graft_test_tally_failures(void);
/* Ends the tally: fails the test (cmocka) when something was counted, saying how many, how
 * many were printed, and the seed. */
void graft_test_tally_end(uint64_t seed);

#endif /* GRAFT_TEST_TALLY_H */
