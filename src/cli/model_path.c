/*
 * model_path.c: which model `graft run` uses when none is named on the command line.
 *
 * -m wins. Otherwise the candidates, in order, are $GRAFT_MODEL, stories260K.gguf in
 * $GRAFT_MODELS_DIR, ../shared/models/ relative to the current folder, and the same folder
 * relative to the executable (../../../shared/models/ from build/release/graft), so
 * `make run` works from the repository root and the binary works from anywhere in the
 * checkout. The first that exists wins; when none does, the message lists them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_MODEL "stories260K.gguf"
#define MAX_CANDIDATES 4

static char *join(const char *dir, const char *rest)
{
    size_t n = strlen(dir) + strlen(rest) + 2;
    char *path = malloc(n);
    if (path != NULL)
        snprintf(path, n, "%s/%s", dir, rest);
    return path;
}

/* The folder holding the running executable, or NULL. */
static char *executable_dir(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL)
        return NULL;
    *slash = '\0';
    return strdup(buf[0] ? buf : "/");
}

/* Fills cand[] with the default candidates (each malloc'ed); returns how many. */
static int default_candidates(char **cand)
{
    int n = 0;
    const char *env = getenv("GRAFT_MODEL");
    if (env != NULL && env[0] != '\0')
        cand[n++] = strdup(env);
    const char *dir = getenv("GRAFT_MODELS_DIR");
    if (dir != NULL && dir[0] != '\0')
        cand[n++] = join(dir, DEFAULT_MODEL);
    cand[n++] = strdup("../shared/models/" DEFAULT_MODEL);
    char *exe = executable_dir();
    if (exe != NULL)
        cand[n++] = join(exe, "../../../shared/models/" DEFAULT_MODEL);
    free(exe);
    return n;
}

char *graft__cli_find_model(const char *command, const char *explicit_path)
{
    if (explicit_path != NULL) {
        char *copy = strdup(explicit_path);
        if (copy == NULL)
            graft__cli_error(command, "out of memory");
        return copy;
    }
    char *cand[MAX_CANDIDATES] = {0};
    int n = default_candidates(cand);
    char *found = NULL;
    for (int i = 0; i < n && found == NULL; i++)
        if (cand[i] != NULL && access(cand[i], R_OK) == 0)
            found = cand[i];
    const char *env = getenv("GRAFT_MODEL");
    if (found != NULL && env != NULL && env[0] != '\0' && found != cand[0])
        graft__cli_error(command, "GRAFT_MODEL '%s' is not readable; using %s", env, found);
    if (found == NULL) {
        graft__cli_error(command, "no model given (-m) and none found; looked for:");
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  %s\n", cand[i] ? cand[i] : "(out of memory)");
    }
    for (int i = 0; i < n; i++)
        if (cand[i] != found)
            free(cand[i]);
    return found;
}
