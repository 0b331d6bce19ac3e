/*
 * skips.c: the record of what a test could not check (skips.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "skips.h"

enum { MAX_SKIPS = 256 };

typedef struct skip_record {
    char kind[8];   /* "kernel" */
    char path[32];  /* the kernel path */
    char what[160]; /* the check */
} skip_record;

static skip_record records[MAX_SKIPS];
static int n_records, n_dropped;

static const char *test_name(void)
{
    return program_invocation_short_name;
}

static void record(const char *kind, const char *path, const char *what, const char *why)
{
    printf("SKIPPED %s: %s: %s\n", test_name(), what, why);
    fflush(stdout);
    if (n_records == MAX_SKIPS) {
        n_dropped++;
        return;
    }
    skip_record *r = &records[n_records++];
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    snprintf(r->path, sizeof r->path, "%s", path);
    snprintf(r->what, sizeof r->what, "%s", what);
    for (char *c = r->what; *c; c++) /* one record per line, three tab-separated fields */
        if (*c == '\t' || *c == '\n')
            *c = ' ';
}

/* Whether GRAFT_TEST_HIDE_PATHS (comma-separated) names `path`. */
static bool hidden(const char *path)
{
    const char *list = getenv("GRAFT_TEST_HIDE_PATHS");
    size_t n = strlen(path);
    for (const char *p = list; p != NULL && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, path, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

void graft_test_skipped_path(const char *path, const char *what)
{
    char why[96];
    snprintf(why, sizeof why, "this processor does not run the %s kernels%s", path,
             hidden(path) ? " (GRAFT_TEST_HIDE_PATHS)" : "");
    record("kernel", path, what, why);
}

bool graft_test_path_runs(const char *path, const char *what)
{
    if (graft__kernels_by_name(path) != NULL && !hidden(path))
        return true;
    graft_test_skipped_path(path, what);
    return false;
}

/* Writes $GRAFT_TEST_SKIPS/<test>.skips, or removes it when nothing was skipped. */
static void write_file(void)
{
    const char *dir = getenv("GRAFT_TEST_SKIPS");
    if (dir == NULL || dir[0] == '\0')
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.skips", dir, test_name());
    if (n_records == 0) {
        if (remove(path) != 0 && errno != ENOENT)
            fprintf(stderr, "%s: cannot remove %s: %s\n", test_name(), path, strerror(errno));
        return;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", test_name(), path, strerror(errno));
        return;
    }
    for (int i = 0; i < n_records; i++)
        fprintf(f, "%s\t%s\t%s\n", records[i].kind, records[i].path, records[i].what);
    if (n_dropped > 0)
        fprintf(f, "overflow\t-\t%d more skips than the record holds\n", n_dropped);
    fclose(f);
}

int graft_test_exit(int failed)
{
    write_file();
    if (failed != 0)
        return 1;
    if (n_records > 0) {
        printf("%s: %d check(s) skipped (see SKIPPED above): exit status %d, skipped\n",
               test_name(), n_records + n_dropped, GRAFT_TEST_SKIPPED);
        return GRAFT_TEST_SKIPPED;
    }
    return 0;
}
