/*
 * cmd_template.c: `graft template`: renders a chat template with a conversation.
 *
 * The template comes from a file (--template) or from a model's GGUF (-m, its
 * tokenizer.chat_template; a model without one gets graft_template_default(), ChatML, and
 * stderr says which was used). The variables come from a JSON object (--input FILE, or -
 * for stdin): messages, tools, add_generation_prompt, bos_token, eos_token and any other;
 * with -m, bos_token and eos_token default to the model's token texts. stdout gets the
 * rendered text, byte for byte, and nothing else. --now fixes strftime_now's clock, so a
 * render is reproducible (the tests compare it with Python's jinja2).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char template_usage[] =
    "usage: graft template (--template FILE.jinja | -m MODEL.gguf) --input FILE.json\n"
    "                      [--now SECONDS]\n"
    "\n"
    "Renders a chat template with the variables of a JSON object (messages, tools,\n"
    "add_generation_prompt, bos_token, eos_token, and any other the template reads, such\n"
    "as enable_thinking) and prints the text on stdout, byte for byte. With -m the\n"
    "template is the model's tokenizer.chat_template (ChatML when it has none; stderr\n"
    "says which), and bos_token / eos_token default to the model's.\n"
    "\n"
    "options:\n"
    "  --template FILE   the Jinja template to render\n"
    "  -m, --model FILE  take the template from this GGUF model\n"
    "  --input FILE      the JSON object of variables ('-': stdin)\n"
    "  --now SECONDS     strftime_now's time, as Unix seconds shown in UTC (default: the\n"
    "                    current local time)\n"
    "  -h, --help        show this help\n";

/* The input with bos_token / eos_token added where it lacks them (a string to free()),
 * or NULL after printing why. */
static char *with_model_tokens(const char *input, size_t len, const graft_model_chat *chat)
{
    json_error_t err;
    json_t *vars = json_loadb(input, len, JSON_ALLOW_NUL, &err);
    if (vars == NULL || !json_is_object(vars)) {
        graft__cli_error("template", "input: line %d, column %d: %s", err.line, err.column,
                         vars == NULL ? err.text : "the JSON must be an object of variables");
        json_decref(vars);
        return NULL;
    }
    if (json_object_get(vars, "bos_token") == NULL)
        json_object_set_new(vars, "bos_token", json_string(chat->bos_text));
    if (json_object_get(vars, "eos_token") == NULL)
        json_object_set_new(vars, "eos_token", json_string(chat->eos_text));
    char *text = json_dumps(vars, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    json_decref(vars);
    if (text == NULL)
        graft__cli_error("template", "out of memory");
    return text;
}

int graft__cli_template(int argc, char **argv)
{
    const char *template_path = NULL, *model_path = NULL, *input_path = NULL;
    uint64_t now = 0;
    const graft__cli_opt opts[] = {
        {"--template", NULL, GRAFT_CLI_STRING, &template_path, 0, 0, 0},
        {"--model", "-m", GRAFT_CLI_STRING, &model_path, 0, 0, 0},
        {"--input", NULL, GRAFT_CLI_STRING, &input_path, 0, 0, 0},
        {"--now", NULL, GRAFT_CLI_U64, &now, 0, 0, 0},
    };
    const graft__cli_command cmd = {"template", template_usage, opts, 4, NULL, 0};
    int rc = graft__cli_parse(&cmd, argc, argv, NULL);
    if (rc != GRAFT_CLI_RUN)
        return rc;
    if ((template_path == NULL) == (model_path == NULL)) {
        graft__cli_error("template", "give one of --template and -m (see 'graft template --help')");
        return GRAFT_CLI_USAGE;
    }
    if (input_path == NULL) {
        graft__cli_error("template", "option --input is required (see 'graft template --help')");
        return GRAFT_CLI_USAGE;
    }
    size_t input_len = 0, text_len = 0;
    char *input = graft__cli_read_file("template", input_path, &input_len);
    if (input == NULL)
        return GRAFT_CLI_FAILED;
    char *text = NULL, *err = NULL;
    const char *template_text = NULL;
    graft_model *model = NULL;
    if (template_path != NULL) {
        text = graft__cli_read_file("template", template_path, &text_len);
        if (text == NULL) {
            free(input);
            return GRAFT_CLI_FAILED;
        }
        template_text = text;
    } else {
        if (graft_model_load(model_path, &model, &err) != GRAFT_OK) {
            graft__cli_error("template", "%s", err ? err : "cannot load the model");
            graft_free(err);
            free(input);
            return GRAFT_CLI_FAILED;
        }
        graft_model_chat chat;
        graft_model_get_chat(model, &chat);
        template_text = chat.chat_template;
        if (template_text == NULL) {
            template_text = graft_template_default();
            graft__cli_error("template", "%s has no chat template: using the default (ChatML)",
                             model_path);
        } else {
            graft__cli_error("template", "using the chat template of %s", model_path);
        }
        text_len = strlen(template_text);
        char *merged = with_model_tokens(input, input_len, &chat);
        free(input);
        if (merged == NULL) {
            graft_model_free(model);
            return GRAFT_CLI_FAILED;
        }
        input = merged;
        input_len = strlen(merged);
    }
    graft_template *tmpl = NULL;
    char *out = NULL;
    size_t out_len = 0;
    graft_template_options ropts = {0};
    ropts.now = (int64_t)now;
    rc = graft_template_parse(template_text, text_len, &tmpl, &err);
    if (rc == GRAFT_OK)
        rc = graft_template_render(tmpl, input, input_len, &ropts, &out, &out_len, &err);
    if (rc != GRAFT_OK)
        graft__cli_error("template", "%s", err ? err : graft_status_str(rc));
    else
        fwrite(out, 1, out_len, stdout);
    graft_free(out);
    graft_free(err);
    graft_template_free(tmpl);
    graft_model_free(model);
    free(text);
    free(input);
    return rc == GRAFT_OK ? GRAFT_CLI_OK : GRAFT_CLI_FAILED;
}
