/*
 * read_file.c: the whole of a file in memory, for the tests and the benchmarks that read
 * their inputs (see util.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

char *graft__read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *data = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data == NULL)
        return NULL;
    data[n] = '\0';
    if (len != NULL)
        *len = (size_t)n;
    return data;
}
