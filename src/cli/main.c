/*
 * main.c: the `graft` executable: dispatches `graft COMMAND [ARGS]` to the command files.
 *
 * Each command lives in its own file (cmd_<name>.c) and is written against include/graft.h
 * only. This file knows the list of commands, prints the overall usage and the version,
 * and returns the command's exit status (see cli.h for the meaning of 0, 1 and 2).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"serve", graft__cli_serve, "serve the model over HTTP (OpenAI-compatible API)"},
    {"run", graft__cli_run, "generate text from a prompt"},
    {"info", graft__cli_info, "describe a GGUF model"},
    {"tokenize", graft__cli_tokenize, "show the tokens of a text"},
    {"template", graft__cli_template, "render a chat template with a conversation"},
    {"synth", graft__cli_synth, "write a random-weight model at real shapes"},
    {"bench", graft__cli_bench, "benchmarks: speed, clone costs, prefix cache"},
};

static void print_usage(FILE *out)
{
    fputs("usage: graft COMMAND [OPTIONS] [ARGS]\n"
          "\n"
          "graft is an LLM inference engine for GGUF models.\n"
          "\n"
          "commands:\n",
          out);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "'graft COMMAND --help' describes a command's options.\n"
          "'graft --version' prints the version.\n",
          out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return GRAFT_CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_usage(stdout);
        return GRAFT_CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("graft %s\n", GRAFT_VERSION);
        return GRAFT_CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "graft: unknown command '%s' (see 'graft --help')\n", argv[1]);
    return GRAFT_CLI_USAGE;
}
