/*
 * fuzz_request.c: libFuzzer target for the server's request validation (src/server/
 * request.c, functions.c and chat.c).
 *
 * An input is a request body, parsed with jansson as the server does; a JSON object goes
 * through graft__request_parse as a completion, as an /infill body and as a chat completion
 * (with ChatML, and with a thinking model's template whose generation prompt opens a
 * thought). The result must be a validated request, or GRAFT_EINVAL with a message and a
 * JSON path that names a field of the body's shape (never NULL), or GRAFT_ENOMEM; a
 * validated request's sampling and DRY breakers are ones the sampler accepts. The object is
 * also taken as an Anthropic Messages body (messages.c): its translation is refused with a
 * path and a message, or is a chat body that goes through the same checks. ASan and UBSan
 * do the rest. Seeds live in tests/fuzz/seeds/fuzz_request/.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dry.h"
#include "server/server.h"

static graft__chat chat, thinking;

/* ChatML whose generation prompt opens a thought, as QwQ's does (its closing tag named). */
static const char thinking_template[] =
    "{#- a thought ends with </think> #}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";

static void require(int ok)
{
    if (!ok)
        abort();
}

static void check(const json_t *body, graft__prompt_kind kind, const graft__chat *with)
{
    graft__completion_request r;
    char *param = NULL, *message = NULL;
    bool is_chat = kind == GRAFT__PROMPT_CHAT;
    int rc = graft__request_parse(body, kind, with, &r, &param, &message);
    if (rc == GRAFT_OK) {
        require((r.prompt_text != NULL || r.n_prompt_tokens > 0) == (r.infill == NULL));
        require(r.infill == NULL ||
                (json_is_string(json_object_get(r.infill, "prefix")) &&
                 json_is_string(json_object_get(r.infill, "suffix"))));
        require((json_object_get(r.infill, "files") != NULL) == (kind == GRAFT__PROMPT_INFILL));
        require(r.n_stop <= GRAFT__MAX_STOP);
        require(r.n_choices >= 1 && r.n_choices <= GRAFT__MAX_CHOICES);
        require(r.best_of >= r.n_choices && r.best_of <= GRAFT__MAX_CHOICES);
        require((r.best_of == r.n_choices || !is_chat) && !(r.stream && r.best_of > r.n_choices));
        require(r.top_logprobs >= 0 && r.top_logprobs <= GRAFT_MAX_TOP_LOGPROBS);
        require(r.top_logprobs == 0 || r.logprobs);
        require(r.n_logit_bias == 0 || r.logit_bias != NULL);
        for (size_t i = 0; i < r.n_logit_bias; i++)
            require(r.logit_bias[i].token >= 0 && !isnan(r.logit_bias[i].bias) &&
                    r.logit_bias[i].bias != INFINITY);
        for (size_t i = 0; i < r.n_logit_bias_texts; i++)
            require(r.logit_bias_texts[i].text[0] != '\0');
        require(!r.tools || is_chat);
        require(!r.legacy_functions || (is_chat && r.one_call));
        require(r.thought_tags == NULL || r.thought_tags == with->thought_tags);
        require(r.output_after == NULL || (r.output_format != GRAFT_OUTPUT_TEXT &&
                                           !r.forced_call && with->thought_tags != NULL));
        require(!(r.thought_opened && r.forced_call));
        require(r.thought_budget >= 0 && (r.thought_budget == 0 || (r.thought_close != NULL &&
                                                                    with->thought_tags != NULL)));
        graft_sampling sampling = r.sampling; /* a window of 0 is the engine's context */
        sampling.dry_penalty_last_n += sampling.dry_penalty_last_n == 0;
        graft_sampler *sampler = NULL;
        require(graft_sampler_create(&sampling, 2, &sampler) != GRAFT_EINVAL);
        graft_sampler_free(sampler);
        require(graft__dry_breakers_valid((const char *const *)r.dry_breakers,
                                          r.n_dry_breakers));
        require(r.n_dry_breakers == 0 || r.dry_breakers_given);
        require(param == NULL && message == NULL);
        graft__request_free(&r);
    } else {
        require(rc == GRAFT_EINVAL || rc == GRAFT_ENOMEM);
        require(rc == GRAFT_ENOMEM || (param != NULL && message != NULL));
    }
    free(param);
    free(message);
}

/* The body as a Messages body, whole and counted. */
static void check_messages(const json_t *body)
{
    for (int counting = 0; counting < 2; counting++) {
        json_t *translated = NULL;
        char *param = NULL, *message = NULL;
        if (graft__messages_to_chat(body, counting, &translated, &param, &message) == 0) {
            require(param == NULL && message == NULL);
            check(translated, GRAFT__PROMPT_CHAT, &chat);
            check(translated, GRAFT__PROMPT_CHAT, &thinking);
        } else {
            require((param == NULL) == (message == NULL));
        }
        json_decref(translated);
        free(param);
        free(message);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (chat.tmpl == NULL) {
        const char *t = graft_template_default();
        require(graft_template_parse(t, strlen(t), &chat.tmpl, NULL) == GRAFT_OK);
        chat.bos_text = thinking.bos_text = "<s>";
        chat.eos_text = thinking.eos_text = "</s>";
        require(graft_template_parse(thinking_template, strlen(thinking_template),
                                     &thinking.tmpl, NULL) == GRAFT_OK);
        thinking.thought_tags = graft__reasoning_tags_of(thinking_template);
        thinking.split_thoughts = true;
        require(thinking.thought_tags != NULL);
    }
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (body == NULL)
        return 0;
    if (json_is_object(body)) {
        check(body, GRAFT__PROMPT_TEXT, &chat);
        check(body, GRAFT__PROMPT_INFILL, &chat);
        check(body, GRAFT__PROMPT_CHAT, &chat);
        check(body, GRAFT__PROMPT_CHAT, &thinking);
        check_messages(body);
    }
    json_decref(body);
    return 0;
}
