/*
 * cmd_synth.c: `graft synth`: write a random-weight GGUF model at real shapes.
 *
 * A thin front end to graft_synth_write(): it parses the options (the type by its GGUF
 * name, case-insensitive) and reports the file written. Options graft_synth_write refuses
 * as invalid (unknown architecture or preset, a type it cannot write, rows that are not a
 * whole number of blocks) are usage errors (exit 2); failing to read the vocabulary or to
 * write the file is a runtime failure (exit 1).
 */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

static const char synth_usage[] =
    "usage: graft synth --arch ARCH --preset PRESET [--type TYPE] [--vocab VOCAB.gguf]\n"
    "                   [--seed S] -o FILE\n"
    "\n"
    "Writes a GGUF model with random weights (deterministic for a seed) at the shapes of a\n"
    "real model, for tests and benchmarks.\n"
    "\n"
    "options:\n"
    "  --arch ARCH          llama, qwen2, qwen3 or gemma3 (tensors and metadata keys)\n"
    "  --preset PRESET      tiny, qwen3-0.6b, llama-1b or gemma3-1b (shapes)\n"
    "  --type TYPE          type of the matrices: F32, F16 (default), BF16, Q8_0, Q4_0,\n"
    "                       Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K or Q6_K; norms stay F32\n"
    "  --vocab FILE         copy the tokenizer of this vocab-only GGUF (default: a\n"
    "                       synthesized SentencePiece-style vocabulary)\n"
    "  --seed S             random seed (default 0)\n"
    "  -o, --output FILE    the file to write\n"
    "  -h, --help           show this help\n";

static int missing(const char *option)
{
    graft__cli_error("synth", "missing %s (see 'graft synth --help')", option);
    return GRAFT_CLI_USAGE;
}

int graft__cli_synth(int argc, char **argv)
{
    graft_synth_options so = {0};
    const char *type_name = "F16";
    const graft__cli_opt opts[] = {
        {"--arch", NULL, GRAFT_CLI_STRING, &so.arch, 0, 0, 0},
        {"--preset", NULL, GRAFT_CLI_STRING, &so.preset, 0, 0, 0},
        {"--type", NULL, GRAFT_CLI_STRING, &type_name, 0, 0, 0},
        {"--vocab", NULL, GRAFT_CLI_STRING, &so.vocab_path, 0, 0, 0},
        {"--seed", NULL, GRAFT_CLI_U64, &so.seed, 0, 0, 0},
        {"--output", "-o", GRAFT_CLI_STRING, &so.out_path, 0, 0, 0},
    };
    const graft__cli_command cmd = {"synth", synth_usage, opts, sizeof opts / sizeof opts[0],
                                    NULL, 0};
    int rc = graft__cli_parse(&cmd, argc, argv, NULL);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    if (so.arch == NULL)
        return missing("--arch");
    if (so.preset == NULL)
        return missing("--preset");
    if (so.out_path == NULL)
        return missing("-o");
    so.type = graft__cli_type_by_name(type_name);
    if (so.type < 0) {
        graft__cli_error("synth", "option --type: unknown type '%s'", type_name);
        return GRAFT_CLI_USAGE;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *err = NULL;
    rc = graft_synth_write(&so, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("synth", "%s", err ? err : graft_status_str(rc));
        graft_free(err);
        return rc == GRAFT_EINVAL ? GRAFT_CLI_USAGE : GRAFT_CLI_FAILED;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat st;
    long long size = stat(so.out_path, &st) == 0 ? (long long)st.st_size : -1;
    printf("wrote %s: %s at preset %s, %s, %lld bytes in %.1f s\n", so.out_path, so.arch,
           so.preset, graft_type_name(so.type), size,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return GRAFT_CLI_OK;
}
