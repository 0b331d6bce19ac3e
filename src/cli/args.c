/*
 * args.c: option parsing for every command of the `graft` executable (see cli.h).
 *
 * Each command describes its options in a table of graft__cli_opt; this file matches argv
 * against it, converts and range-checks numbers, and turns every mistake into one precise
 * line on stderr ("graft run: option --temp: -1 is out of range (must be at least 0)")
 * and exit status 2.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

void graft__cli_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "graft %s: ", command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int graft__cli_type_by_name(const char *name)
{
    for (int type = 0; type < 64; type++) {
        const char *known = graft_type_name(type);
        if (known != NULL && strcasecmp(known, name) == 0)
            return type;
    }
    return -1;
}

/* The option `name` (len bytes: "--temp" of "--temp=1") names, or NULL. */
static const graft__cli_opt *find_opt(const graft__cli_command *cmd, const char *name,
                                      size_t len)
{
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const graft__cli_opt *o = &cmd->opts[i];
        if ((strlen(o->long_name) == len && strncmp(o->long_name, name, len) == 0) ||
            (o->short_name && strlen(o->short_name) == len &&
             strncmp(o->short_name, name, len) == 0))
            return o;
    }
    return NULL;
}

/* "option --temp: -1 is out of range (must be at least 0)" */
static int range_error(const graft__cli_command *cmd, const char *opt, const char *value,
                       double v, const graft__cli_opt *o)
{
    graft__cli_error(cmd->name, "option %s: %s is out of range (must be at %s %.10g)", opt,
                     value, v < o->min ? "least" : "most", v < o->min ? o->min : o->max);
    return GRAFT_CLI_USAGE;
}

static int parse_int(const graft__cli_command *cmd, const char *opt, const char *value,
                     const graft__cli_opt *o)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (*value == '\0' || *end != '\0') {
        graft__cli_error(cmd->name, "option %s: '%s' is not an integer", opt, value);
        return GRAFT_CLI_USAGE;
    }
    if (errno == ERANGE || (double)v < o->min || (double)v > o->max)
        return range_error(cmd, opt, value, (double)v, o);
    *(int32_t *)o->dest = (int32_t)v;
    return GRAFT_CLI_RUN;
}

static int parse_u64(const graft__cli_command *cmd, const char *opt, const char *value,
                     const graft__cli_opt *o)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (*value < '0' || *value > '9' || *end != '\0') {
        graft__cli_error(cmd->name, "option %s: '%s' is not a non-negative integer", opt,
                         value);
        return GRAFT_CLI_USAGE;
    }
    if (errno == ERANGE) {
        graft__cli_error(cmd->name, "option %s: %s is out of range (must be below 2^64)", opt,
                         value);
        return GRAFT_CLI_USAGE;
    }
    *(uint64_t *)o->dest = (uint64_t)v;
    return GRAFT_CLI_RUN;
}

/* "64M" is 64 << 20 bytes. */
static int parse_size(const graft__cli_command *cmd, const char *opt, const char *value,
                      const graft__cli_opt *o)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    static const char units[] = "KMG";
    const char *unit = *end != '\0' ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (*value < '0' || *value > '9' || (*end != '\0' && (unit == NULL || end[1] != '\0'))) {
        graft__cli_error(cmd->name, "option %s: '%s' is not a size (a byte count, optionally "
                         "followed by K, M or G)", opt, value);
        return GRAFT_CLI_USAGE;
    }
    int shift = unit != NULL ? 10 * (int)(unit - units + 1) : 0;
    if (errno == ERANGE || v > (unsigned long long)SIZE_MAX >> shift) {
        graft__cli_error(cmd->name, "option %s: %s is out of range (must be below 2^64 bytes)",
                         opt, value);
        return GRAFT_CLI_USAGE;
    }
    size_t bytes = (size_t)v << shift;
    if ((double)bytes < o->min || (double)bytes > o->max)
        return range_error(cmd, opt, value, (double)bytes, o);
    *(size_t *)o->dest = bytes;
    return GRAFT_CLI_RUN;
}

static int parse_float(const graft__cli_command *cmd, const char *opt, const char *value,
                       const graft__cli_opt *o)
{
    char *end;
    double v = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || !isfinite(v)) {
        graft__cli_error(cmd->name, "option %s: '%s' is not a number", opt, value);
        return GRAFT_CLI_USAGE;
    }
    if (v < o->min || v > o->max)
        return range_error(cmd, opt, value, v, o);
    *(float *)o->dest = (float)v;
    return GRAFT_CLI_RUN;
}

/* Stores an option's value; GRAFT_CLI_RUN on success, else the exit status. */
static int store_value(const graft__cli_command *cmd, const char *opt, const char *value,
                       const graft__cli_opt *o)
{
    switch (o->kind) {
    case GRAFT_CLI_INT:
        return parse_int(cmd, opt, value, o);
    case GRAFT_CLI_U64:
        return parse_u64(cmd, opt, value, o);
    case GRAFT_CLI_FLOAT:
        return parse_float(cmd, opt, value, o);
    case GRAFT_CLI_SIZE:
        return parse_size(cmd, opt, value, o);
    case GRAFT_CLI_STRING:
        *(const char **)o->dest = value;
        return GRAFT_CLI_RUN;
    case GRAFT_CLI_LIST: {
        graft__cli_list *list = o->dest;
        list->items[list->n++] = value;
        return GRAFT_CLI_RUN;
    }
    case GRAFT_CLI_FLAG:
        break;
    }
    *(int *)o->dest = o->flag_value;
    return GRAFT_CLI_RUN;
}

/* Handles the option at argv[*i], consuming its value; GRAFT_CLI_RUN to go on, else the exit
 * status. */
static int parse_option(const graft__cli_command *cmd, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const graft__cli_opt *o = find_opt(cmd, arg, name_len);
    if (o == NULL) {
        graft__cli_error(cmd->name, "unknown option '%.*s' (see 'graft %s --help')",
                         (int)name_len, arg, cmd->name);
        return GRAFT_CLI_USAGE;
    }
    char opt[64];
    snprintf(opt, sizeof opt, "%.*s", (int)name_len, arg);
    if (o->kind == GRAFT_CLI_FLAG) {
        if (eq != NULL) {
            graft__cli_error(cmd->name, "option %s takes no value", opt);
            return GRAFT_CLI_USAGE;
        }
        return store_value(cmd, opt, NULL, o);
    }
    if (eq != NULL)
        return store_value(cmd, opt, eq + 1, o);
    if (*i + 1 >= argc) {
        graft__cli_error(cmd->name, "option %s needs a value", opt);
        return GRAFT_CLI_USAGE;
    }
    *i += 1;
    return store_value(cmd, opt, argv[*i], o);
}

static bool is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

static bool is_option(const char *arg)
{
    return arg[0] == '-' && arg[1] != '\0';
}

int graft__cli_parse(const graft__cli_command *cmd, int argc, char **argv, const char **args)
{
    int n_args = 0;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        if (!options_done && strcmp(argv[i], "--") == 0) {
            options_done = true;
        } else if (!options_done && is_help(argv[i])) {
            fputs(cmd->usage, stdout);
            return GRAFT_CLI_OK;
        } else if (!options_done && is_option(argv[i])) {
            int rc = parse_option(cmd, argc, argv, &i);
            if (rc != GRAFT_CLI_RUN)
                return rc;
        } else if (n_args < cmd->n_args) {
            args[n_args++] = argv[i];
        } else {
            graft__cli_error(cmd->name, "unexpected argument '%s' (see 'graft %s --help')",
                             argv[i], cmd->name);
            return GRAFT_CLI_USAGE;
        }
    }
    if (n_args < cmd->n_args) {
        graft__cli_error(cmd->name, "missing %s (see 'graft %s --help')", cmd->args[n_args],
                         cmd->name);
        return GRAFT_CLI_USAGE;
    }
    return GRAFT_CLI_RUN;
}
