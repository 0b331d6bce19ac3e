/*
 * check_skips.c: `check_skips DIR` fails when a test skipped what this machine can run.
 *
 * Run after ctest (the Makefile does) on the build's test-skips folder, the
 * $GRAFT_TEST_SKIPS of the tests. Reads every DIR/<test>.skips the tests wrote
 * (tests/support/skips.h) and prints one line per skip. A skipped kernel path that this
 * processor runs (the same CPUID test the kernels' dispatch makes, graft__kernels_by_name)
 * is an error, and so is a line of any other kind: the only skip CI accepts is of a path
 * the processor lacks. The exit status is 1 after any error, else 0. It prints first which
 * kernel paths the processor runs, so a CI log says why a path was or was not checked.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const paths[] = {"scalar", "avx2", "avxvnni", "avx512"};

/* Checks the lines of one skip file; returns the number of errors. */
static int check_file(const char *dir, const char *file)
{
    char name[4096], line[512];
    snprintf(name, sizeof name, "%s/%s", dir, file);
    FILE *f = fopen(name, "r");
    if (f == NULL) {
        printf("check_skips: cannot read %s\n", name);
        return 1;
    }
    size_t len = strlen(file) - strlen(".skips");
    int errors = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *kind = line, *path = strchr(kind, '\t'), *what = path ? strchr(path + 1, '\t') : NULL;
        if (what == NULL) {
            printf("check_skips: %s: malformed line '%s'\n", name, line);
            errors++;
            continue;
        }
        *path++ = '\0';
        *what++ = '\0';
        bool kernel = strcmp(kind, "kernel") == 0;
        bool runs = kernel && graft__kernels_by_name(path) != NULL;
        const char *verdict = !kernel ? "ERROR: not a kernel path"
                              : runs  ? "ERROR: this processor runs it"
                                      : "ok: this processor lacks it";
        printf("  %-20.*s %-8s %-32s %s\n", (int)len, file, kernel ? path : kind, what, verdict);
        errors += !kernel || runs;
    }
    fclose(f);
    return errors;
}

int main(int argc, char **argv)
{
    printf("kernel paths this processor runs:");
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (graft__kernels_by_name(paths[i]) != NULL)
            printf(" %s", paths[i]);
    printf("\n");
    if (argc != 2) {
        printf("usage: check_skips DIR (the tests' $GRAFT_TEST_SKIPS)\n");
        return 1;
    }
    const char *dir = argv[1];
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("check_skips: cannot open %s\n", dir);
        return 1;
    }
    int files = 0, errors = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n <= 6 || strcmp(e->d_name + n - 6, ".skips") != 0)
            continue;
        if (files++ == 0)
            printf("skipped checks (test, kernel path, check, verdict):\n");
        errors += check_file(dir, e->d_name);
    }
    closedir(d);
    if (files == 0)
        printf("no test skipped anything\n");
    if (errors > 0)
        printf("check_skips: %d skip(s) of what this machine can check: FAILED\n", errors);
    return errors > 0;
}
