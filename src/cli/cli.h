/*
 * cli.h: what the command files of the `graft` executable share.
 *
 * The command line is written against include/graft.h only, as a user's program would be.
 * main.c dispatches `graft COMMAND ...` to one graft__cli_<command>() per file; each parses
 * its options with graft__cli_parse() from a table, so every command reports option errors
 * the same way and exits with the same codes:
 *   0  success (also `--help`, which prints the command's usage on stdout)
 *   1  a runtime failure (the model does not load, a file cannot be written, ...)
 *   2  a usage error: unknown option, missing or extra argument, bad number (one line on
 *      stderr naming the option)
 */
#ifndef GRAFT_CLI_H
#define GRAFT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graft.h"

enum {
    GRAFT_CLI_OK = 0,
    GRAFT_CLI_FAILED = 1,
    GRAFT_CLI_USAGE = 2,
    GRAFT_CLI_RUN = 3 /* not an exit status: the options are parsed, run the command */
};

typedef enum graft__cli_kind {
    GRAFT_CLI_FLAG,   /* no value: stores flag_value into an int */
    GRAFT_CLI_INT,    /* int32_t within [min, max] */
    GRAFT_CLI_U64,    /* uint64_t (decimal) */
    GRAFT_CLI_FLOAT,  /* finite float within [min, max] */
    GRAFT_CLI_SIZE,   /* size_t bytes within [min, max]: decimal, optionally followed by K, M
                         or G (case-insensitive, powers of 1024) */
    GRAFT_CLI_STRING, /* const char *, borrowed from argv */
    GRAFT_CLI_LIST    /* repeatable: each value appended to a graft__cli_list */
} graft__cli_kind;

/* The values of a repeatable option, in order, borrowed from argv. The caller allocates
 * items with room for argc entries (no option occurs more often). */
typedef struct graft__cli_list {
    const char **items;
    int n;
} graft__cli_list;

typedef struct graft__cli_opt {
    const char *long_name;  /* "--temp" */
    const char *short_name; /* "-n", or NULL */
    graft__cli_kind kind;
    void *dest;
    double min, max;        /* GRAFT_CLI_INT, GRAFT_CLI_FLOAT and GRAFT_CLI_SIZE */
    int flag_value;         /* GRAFT_CLI_FLAG */
} graft__cli_opt;

typedef struct graft__cli_command {
    const char *name;          /* "run" */
    const char *usage;         /* the --help text */
    const graft__cli_opt *opts;
    size_t n_opts;
    const char *const *args;   /* names of the positional arguments, all required */
    int n_args;
} graft__cli_command;

/* Parses argv[1..argc) (argv[0] is the command name) into the option destinations and
 * args[0..n_args). Accepts "--opt value", "--opt=value", "-o value" and "--" (the rest
 * is positional). Returns GRAFT_CLI_RUN to go on, or the exit status after printing --help
 * (GRAFT_CLI_OK) or a usage error (GRAFT_CLI_USAGE). */
int graft__cli_parse(const graft__cli_command *cmd, int argc, char **argv, const char **args);

/* Prints "graft COMMAND: <message>\n" on stderr. */
void graft__cli_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The type id named `name` (case-insensitive, as graft_type_name spells it), or -1. */
int graft__cli_type_by_name(const char *name);

/* The whole of a file ("-": stdin), NUL-terminated, its length in *len; NULL after printing
 * "graft COMMAND: cannot open / read 'PATH'". The caller frees it. */
char *graft__cli_read_file(const char *command, const char *path, size_t *len);

/* The model `graft run` uses: `explicit_path` (-m) when given, else the first that exists
 * of $GRAFT_MODEL, $GRAFT_MODELS_DIR/stories260K.gguf, ../shared/models/stories260K.gguf
 * and <folder of the executable>/../../../shared/models/stories260K.gguf. Returns a path to
 * free(), or NULL after printing where it looked. */
char *graft__cli_find_model(const char *command, const char *explicit_path);

/* The commands. argv[0] is the command name. Each returns the exit status. */
int graft__cli_info(int argc, char **argv);
int graft__cli_tokenize(int argc, char **argv);
int graft__cli_run(int argc, char **argv);
int graft__cli_bench(int argc, char **argv);
int graft__cli_bench_clone(int argc, char **argv);  /* `graft bench clone` */
int graft__cli_bench_prefix(int argc, char **argv); /* `graft bench prefix` */
int graft__cli_synth(int argc, char **argv);
int graft__cli_serve(int argc, char **argv);
int graft__cli_template(int argc, char **argv);

#endif /* GRAFT_CLI_H */
