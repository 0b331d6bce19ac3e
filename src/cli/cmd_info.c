/*
 * cmd_info.c: `graft info MODEL`: everything graft_model_get_info knows, readable.
 *
 * One "label  value" line per fact, in the order a reader checks a model: the file, the
 * architecture and its sizes, attention (sliding window, RoPE), the tokenizer, and what
 * the weights cost (parameters, bytes, tensor types).
 */
#include <stdio.h>

#include "cli.h"

static const char info_usage[] =
    "usage: graft info MODEL\n"
    "\n"
    "Loads the GGUF model and describes it: architecture, hyperparameters, sliding window,\n"
    "RoPE, tokenizer, special tokens (and fill-in-the-middle tokens where the vocabulary has\n"
    "them), parameter count, tensor types and sizes.\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n";

/* "1.13 MiB" */
static void print_bytes(const char *label, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    printf("%-16s%.*f %s (%llu bytes)\n", label, u ? 2 : 0, v, units[u],
           (unsigned long long)bytes);
}

/* "260.1K (260096)" */
static void print_count(const char *label, uint64_t n)
{
    if (n >= 1000000000ull)
        printf("%-16s%.2fB (%llu)\n", label, (double)n / 1e9, (unsigned long long)n);
    else if (n >= 1000000ull)
        printf("%-16s%.1fM (%llu)\n", label, (double)n / 1e6, (unsigned long long)n);
    else if (n >= 1000ull)
        printf("%-16s%.1fK (%llu)\n", label, (double)n / 1e3, (unsigned long long)n);
    else
        printf("%-16s%llu\n", label, (unsigned long long)n);
}

static void print_token(const graft_model *model, const char *what, int32_t id)
{
    const char *text = id >= 0 ? graft_token_text(model, id) : NULL;
    if (text != NULL)
        printf("%s %d '%s'", what, (int)id, text);
    else
        printf("%s none", what);
}

static void print_shape(const graft_model_info *in)
{
    printf("%-16s%s\n", "architecture", in->arch);
    printf("%-16s%s\n", "name", in->name[0] ? in->name : "(none)");
    printf("%-16s%d\n", "context", (int)in->n_ctx_train);
    printf("%-16s%d\n", "embedding", (int)in->n_embd);
    printf("%-16s%d\n", "layers", (int)in->n_layer);
    printf("%-16s%d heads, %d KV heads, head_dim %d\n", "attention", (int)in->n_head,
           (int)in->n_head_kv, (int)in->head_dim);
    printf("%-16s%d\n", "feed-forward", (int)in->n_ff);
}

static void print_attention(const graft_model_info *in)
{
    if (in->sliding_window > 0 && in->n_swa_layers > 0)
        printf("%-16s%d tokens on %d of %d layers (%d global)\n", "sliding window",
               (int)in->sliding_window, (int)in->n_swa_layers, (int)in->n_layer,
               (int)(in->n_layer - in->n_swa_layers));
    else
        printf("%-16snone\n", "sliding window");
    if (in->n_swa_layers > 0)
        printf("%-16s%.10g (sliding-window layers: %.10g)\n", "rope base", in->rope_freq_base,
               in->rope_freq_base_swa);
    else
        printf("%-16s%.10g\n", "rope base", in->rope_freq_base);
    printf("%-16s%g\n", "rms epsilon", in->rms_eps);
}

static void print_tokenizer(const graft_model *model, const graft_model_info *in)
{
    printf("%-16s%d tokens, %s tokenizer, pre-tokenizer %s\n", "vocabulary", (int)in->n_vocab,
           in->tokenizer, in->pretokenizer);
    printf("%-16s", "special tokens");
    print_token(model, "BOS", in->bos);
    print_token(model, ", EOS", in->eos);
    printf(", BOS added: %s\n", in->add_bos ? "yes" : "no");
    if (in->fim_pre < 0 || in->fim_suf < 0 || in->fim_mid < 0)
        return;
    printf("%-16s", "fill in middle");
    print_token(model, "prefix", in->fim_pre);
    print_token(model, ", suffix", in->fim_suf);
    print_token(model, ", middle", in->fim_mid);
    print_token(model, ", repository", in->fim_rep);
    print_token(model, ", file", in->fim_sep);
    printf("\n");
}

static void print_weights(const graft_model_info *in)
{
    print_count("parameters", in->n_params);
    print_bytes("weights", in->weight_bytes);
    printf("%-16s", "tensor types");
    const char *sep = "";
    for (int type = 0; type < 64; type++) {
        if (in->tensor_type_count[type] == 0)
            continue;
        const char *name = graft_type_name(type);
        if (name != NULL)
            printf("%s%s x%d", sep, name, (int)in->tensor_type_count[type]);
        else
            printf("%stype %d x%d", sep, type, (int)in->tensor_type_count[type]);
        sep = ", ";
    }
    printf("\n");
}

int graft__cli_info(int argc, char **argv)
{
    static const char *const arg_names[] = {"MODEL"};
    const graft__cli_command cmd = {.name = "info", .usage = info_usage, .args = arg_names,
                                    .n_args = 1};
    const char *path;
    int rc = graft__cli_parse(&cmd, argc, argv, &path);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    graft_model *model = NULL;
    char *err = NULL;
    if (graft_model_load(path, &model, &err) != GRAFT_OK) {
        graft__cli_error("info", "%s", err ? err : "cannot load the model");
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    graft_model_info in;
    graft_model_get_info(model, &in);
    printf("%-16s%s\n", "model", path);
    print_bytes("file", in.file_bytes);
    printf("%-16sv%u, %d tensors\n", "gguf", (unsigned)in.gguf_version, (int)in.n_tensors);
    print_shape(&in);
    print_attention(&in);
    print_tokenizer(model, &in);
    print_weights(&in);
    graft_model_free(model);
    return GRAFT_CLI_OK;
}
