/*
 * skips.h: checks a test could not run are reported as skipped, never as passed.
 *
 * A test that cannot check something here (a kernel path this processor does not run)
 * records why with graft_test_path_runs / graft_test_skipped_path and goes on with the rest.
 * Its main returns graft_test_exit(failed): 1 when a check failed, else GRAFT_TEST_SKIPPED
 * when something was recorded, which ctest shows as skipped (SKIP_RETURN_CODE,
 * CMakeLists.txt), else 0.
 *
 * Each skip is printed when it happens ("SKIPPED <test>: <what>: <why>") and written to
 * $GRAFT_TEST_SKIPS/<test>.skips (one "kernel<TAB>path<TAB>what" line each); a run that
 * skipped nothing removes the file. tests/check_skips.c, which the Makefile runs after
 * ctest, reads those files and fails when a kernel path the processor runs was skipped (or
 * a line is of another kind): CI passes with skips only for what the machine cannot run.
 * A missing fixture is not a skip: the test fails.
 *
 * Skips are recorded on the test's own thread (cmocka's), not from workers.
 */
#ifndef GRAFT_TEST_SKIPS_H
#define GRAFT_TEST_SKIPS_H

#include <stdbool.h>

/* The exit status ctest reads as "skipped". */
enum { GRAFT_TEST_SKIPPED = 77 };

/* Whether this processor runs the kernel path `path` ("scalar", "avx2", "avxvnni",
 * "avx512"; the CPUID test the kernels' dispatch makes). When it does not, records the skip
 * of `what` (a few words naming the check). GRAFT_TEST_HIDE_PATHS=avx2,avx512 pretends the processor lacks
 * those paths (to try the skip reporting on a machine that has them). */
bool graft_test_path_runs(const char *path, const char *what);

/* Records that `what` was not checked because the kernel path `path` is not run here. */
void graft_test_skipped_path(const char *path, const char *what);

/* The status main returns, from cmocka_run_group_tests's count of failed tests. Writes or
 * removes the skip file. */
int graft_test_exit(int failed);

/* In a cmocka test: skips the rest of the test (cmocka's skip()) unless the processor runs
 * kernel path `path`, recording the skip of `what`. */
#define GRAFT_TEST_REQUIRE_PATH(path, what)                                                  \
    do {                                                                                     \
        if (!graft_test_path_runs((path), (what)))                                           \
            skip();                                                                          \
    } while (0)

#endif /* GRAFT_TEST_SKIPS_H */
