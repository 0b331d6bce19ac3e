/*
 * cmd_tokenize.c: `graft tokenize MODEL TEXT`: the tokens graft_tokenize gives for a text.
 *
 * One line per token, its id and its vocabulary text in double quotes with C escapes for
 * quotes, backslashes and control bytes (UTF-8 is printed as is), then the count. BOS/EOS
 * are added as the model says unless --no-special; control-token texts in TEXT ("<s>") are
 * matched only with --parse-special.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char tokenize_usage[] =
    "usage: graft tokenize MODEL TEXT [--no-special] [--parse-special]\n"
    "\n"
    "Prints the tokens of TEXT, one per line: the id and the token's text (quoted, with\n"
    "escapes), then the number of tokens. MODEL may be any GGUF that carries a tokenizer,\n"
    "vocab-only files and architectures graft does not run included.\n"
    "\n"
    "options:\n"
    "  --no-special      do not add BOS/EOS (by default they are added as the model says)\n"
    "  --parse-special   turn control-token texts in TEXT (such as <s>) into those tokens\n"
    "  -h, --help        show this help\n";

static void print_escaped(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", stdout);
        else if (*p == '\t')
            fputs("\\t", stdout);
        else if (*p == '\r')
            fputs("\\r", stdout);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\x%02x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

int graft__cli_tokenize(int argc, char **argv)
{
    int add_special = 1, parse_special = 0;
    const graft__cli_opt opts[] = {
        {"--no-special", NULL, GRAFT_CLI_FLAG, &add_special, 0, 0, 0},
        {"--parse-special", NULL, GRAFT_CLI_FLAG, &parse_special, 0, 0, 1},
    };
    static const char *const arg_names[] = {"MODEL", "TEXT"};
    const graft__cli_command cmd = {"tokenize", tokenize_usage, opts, 2, arg_names, 2};
    const char *args[2];
    int rc = graft__cli_parse(&cmd, argc, argv, args);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    graft_model *model = NULL;
    char *err = NULL;
    if (graft_model_load_vocab(args[0], &model, &err) != GRAFT_OK) {
        graft__cli_error("tokenize", "%s", err ? err : "cannot load the model");
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    int32_t *tokens = NULL;
    size_t n = 0;
    rc = graft_tokenize(model, args[1], strlen(args[1]), add_special, parse_special, &tokens,
                        &n);
    if (rc != GRAFT_OK) {
        graft__cli_error("tokenize", "cannot tokenize: %s", graft_status_str(rc));
        graft_model_free(model);
        return GRAFT_CLI_FAILED;
    }
    for (size_t i = 0; i < n; i++) {
        const char *text = graft_token_text(model, tokens[i]);
        printf("%7d  ", (int)tokens[i]);
        print_escaped(text ? text : "");
        putchar('\n');
    }
    printf("%zu token%s\n", n, n == 1 ? "" : "s");
    graft_free(tokens);
    graft_model_free(model);
    return GRAFT_CLI_OK;
}
