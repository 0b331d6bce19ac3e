/*
 * status.c: status code names, heap error messages and the always-on assert.
 * The code list itself is GRAFT_STATUS_MAP in include/graft.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"

const char *graft_status_str(int status)
{
    switch (status) {
#define GRAFT_STATUS_CASE_(name, value, msg) \
    case value:                              \
        return msg;
        GRAFT_STATUS_MAP(GRAFT_STATUS_CASE_)
#undef GRAFT_STATUS_CASE_
    }
    return "unknown status";
}

int graft__errmsg(char **errmsg, int status, const char *fmt, ...)
{
    if (errmsg == NULL)
        return status;
    *errmsg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return status;
    char *msg = graft__malloc((size_t)n + 1);
    if (msg == NULL)
        return status;
    va_start(ap, fmt);
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *errmsg = msg;
    return status;
}

void graft__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "graft: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
