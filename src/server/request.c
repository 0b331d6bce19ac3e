/*
 * request.c: the JSON body of a completion, chat completion or infill request, validated into a
 * graft__completion_request (server.h).
 *
 * What OpenAI clients send and what llama-server users add is accepted: prompt (a string, an array
 * of one string, or token ids; batch.c splits several prompts into one body each before they come
 * here), messages (through the chat template), max_tokens / max_completion_tokens / n_predict, n,
 * best_of (completions: the n best of that many answers), temperature, top_p, top_k, min_p, seed,
 * repetition_penalty / repeat_penalty (and llama-server's window of it, repeat_last_n /
 * penalty_last_n), top_n_sigma, typical_p, xtc_probability and xtc_threshold, dynatemp_range and
 * dynatemp_exponent, mirostat (1 or 2) with mirostat_tau and mirostat_eta, DRY (dry_multiplier,
 * dry_base, dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers), presence_penalty,
 * frequency_penalty, logit_bias, logprobs / top_logprobs (chat: a flag and a count; completions:
 * the legacy count) or llama-server's n_probs, tools and tool_choice (auto, none, required or a
 * named function), parallel_tool_calls, or their legacy form functions and function_call
 * (functions.c), response_format (text, json_object, json_schema) or llama-server's json_schema,
 * llama-server's grammar (GBNF), stop, stream, stream_options.include_usage, ignore_eos,
 * return_tokens, session_id, echo (completions: the prompt comes back before the answer; max_tokens
 * 0 then asks for the prompt alone), reasoning_format (chat: whether a thinking model's thought is
 * split off, reasoning.c), thinking_token_budget (chat: the tokens a thinking model's thought may
 * take before it is closed), continue_final_message (chat: the last message, the assistant's, is a
 * prefill the answer continues, chat.c), suffix and llama-server's n_indent and t_max_predict_ms
 * (completions: fill in the middle, infill.c, and code completion's ends: at a line indented less
 * than n_indent, at a line break once t_max_predict_ms have passed); /infill's own fields
 * (infill.c). A field of the wrong type or out of range is refused naming its JSON path. Known
 * fields graft cannot honour (tfs_z and min_keep, llama.cpp's sampling fields graft's chain lacks,
 * unless sent at their off value; llama-server's post_sampling_probs) are refused by name rather
 * than ignored (an answer that silently differs from what was asked is worse than a clear 400);
 * unknown fields are ignored, since SDKs send extras.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

int graft__refuse(char **param, char **message, const char *path, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    *param = strdup(path);
    *message = strdup(buf);
    return GRAFT_EINVAL;
}

/* The number at key (absent: keep *out): in [lo, hi]. */
static int get_number(const json_t *body, const char *key, double lo, double hi, double *out,
                      char **param, char **message)
{
    const json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v))
        return GRAFT_OK;
    if (!json_is_number(v))
        return graft__refuse(param, message, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return graft__refuse(param, message, key, "'%s' is %g, outside [%g, %g]", key, x, lo, hi);
    *out = x;
    return GRAFT_OK;
}

static int get_int(const json_t *body, const char *key, long long lo, long long hi,
                   long long *out, char **param, char **message)
{
    const json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v))
        return GRAFT_OK;
    if (!json_is_integer(v))
        return graft__refuse(param, message, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return graft__refuse(param, message, key, "'%s' is %lld, outside [%lld, %lld]", key, x,
                             lo, hi);
    *out = x;
    return GRAFT_OK;
}

static int get_bool(const json_t *body, const char *key, bool *out, char **param,
                    char **message)
{
    const json_t *v = json_object_get(body, key);
    if (v == NULL || json_is_null(v))
        return GRAFT_OK;
    if (!json_is_boolean(v))
        return graft__refuse(param, message, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return GRAFT_OK;
}

bool graft__json_token_id(const json_t *t, int32_t *id)
{
    if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
        return false;
    *id = (int32_t)json_integer_value(t);
    return true;
}

static int parse_prompt(const json_t *body, graft__completion_request *r, char **param,
                        char **message)
{
    const json_t *p = json_object_get(body, "prompt");
    if (p == NULL || json_is_null(p))
        return graft__refuse(param, message, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        r->prompt_text = strdup(json_string_value(p));
        return GRAFT_OK;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return graft__refuse(param, message, "prompt",
                             "'prompt' must be a string, token ids, or an array of strings or of "
                             "token-id arrays");
    const json_t *first = json_array_get(p, 0);
    if (json_is_string(first)) {
        if (json_array_size(p) > 1)
            return graft__refuse(param, message, "prompt",
                                 "'prompt' holds %zu strings: POST /completion takes one prompt "
                                 "(POST /v1/completions takes several)",
                                 json_array_size(p));
        r->prompt_text = strdup(json_string_value(first));
        return GRAFT_OK;
    }
    r->n_prompt_tokens = json_array_size(p);
    r->prompt_tokens = malloc(r->n_prompt_tokens * sizeof *r->prompt_tokens);
    if (r->prompt_tokens == NULL)
        return GRAFT_ENOMEM;
    for (size_t i = 0; i < r->n_prompt_tokens; i++) {
        if (!graft__json_token_id(json_array_get(p, i), &r->prompt_tokens[i])) {
            char path[48];
            snprintf(path, sizeof path, "prompt[%zu]", i);
            return graft__refuse(param, message, path, "'%s' must be a token id", path);
        }
    }
    return GRAFT_OK;
}

static int parse_stop(const json_t *body, graft__completion_request *r, char **param,
                      char **message)
{
    const json_t *s = json_object_get(body, "stop");
    if (s == NULL || json_is_null(s))
        return GRAFT_OK;
    if (json_is_string(s)) {
        if (json_string_length(s) > 0)
            r->stop[r->n_stop++] = strdup(json_string_value(s));
        return GRAFT_OK;
    }
    if (!json_is_array(s))
        return graft__refuse(param, message, "stop",
                             "'stop' must be a string or an array of strings");
    if (json_array_size(s) > GRAFT__MAX_STOP)
        return graft__refuse(param, message, "stop",
                             "'stop' holds %zu strings, at most %d are allowed",
                             json_array_size(s), GRAFT__MAX_STOP);
    for (size_t i = 0; i < json_array_size(s); i++) {
        const json_t *v = json_array_get(s, i);
        char path[32];
        snprintf(path, sizeof path, "stop[%zu]", i);
        if (!json_is_string(v))
            return graft__refuse(param, message, path, "'%s' must be a string", path);
        if (json_string_length(v) > 0)
            r->stop[r->n_stop++] = strdup(json_string_value(v));
    }
    return GRAFT_OK;
}

/* llama.cpp's sampling fields graft's chain lacks, with the value that turns each off: tfs_z
 * (tail-free sampling, which llama.cpp has removed) and min_keep (the fewest tokens its
 * filters keep). Sent at that value (llama.cpp's web UIs send them) they ask for nothing;
 * otherwise they are refused, since the answer would not be what was asked. */
static int refuse_llama_samplers(const json_t *body, char **param, char **message)
{
    static const struct {
        const char *name;
        double off;
    } absent[] = {{"tfs_z", 1.0}, {"min_keep", 0.0}};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        const json_t *v = json_object_get(body, absent[i].name);
        if (v != NULL && !json_is_null(v) &&
            !(json_is_number(v) && json_number_value(v) == absent[i].off))
            return graft__refuse(param, message, absent[i].name, "'%s' (a llama.cpp sampling "
                                 "field) is not supported by this server: send %g or leave it "
                                 "out", absent[i].name, absent[i].off);
    }
    return GRAFT_OK;
}

/* llama-server's integer sampling fields: mirostat (0 off, 1 or 2), DRY's allowed length and
 * its window (-1 the whole history, 0 DRY off). */
static int parse_llama_ints(const json_t *body, graft_sampling *s, char **param,
                            char **message)
{
    long long mirostat = s->mirostat, allowed = s->dry_allowed_length, window = -1;
    int rc;
    if ((rc = get_int(body, "mirostat", 0, 2, &mirostat, param, message)) != GRAFT_OK ||
        (rc = get_int(body, "dry_allowed_length", 0, INT32_MAX, &allowed, param, message)) !=
            GRAFT_OK ||
        (rc = get_int(body, "dry_penalty_last_n", -1, INT32_MAX, &window, param, message)) !=
            GRAFT_OK)
        return rc;
    s->mirostat = (int32_t)mirostat;
    s->dry_allowed_length = (int32_t)allowed;
    if (window == 0)
        s->dry_multiplier = 0.0f;
    s->dry_penalty_last_n = window > 0 ? (int32_t)window : 0;
    return GRAFT_OK;
}

/* dry_sequence_breakers: an array of at most GRAFT_DRY_MAX_BREAKERS strings of 1 to
 * GRAFT_DRY_MAX_BREAKER_BYTES bytes ([]: none); absent, llama.cpp's. */
static int parse_dry_breakers(const json_t *body, graft__completion_request *r, char **param,
                              char **message)
{
    const json_t *a = json_object_get(body, "dry_sequence_breakers");
    if (a == NULL || json_is_null(a))
        return GRAFT_OK;
    if (!json_is_array(a) || json_array_size(a) > GRAFT_DRY_MAX_BREAKERS)
        return graft__refuse(param, message, "dry_sequence_breakers", "'dry_sequence_breakers' "
                             "must be an array of at most %d strings", GRAFT_DRY_MAX_BREAKERS);
    r->dry_breakers_given = true;
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) {
        char path[48];
        snprintf(path, sizeof path, "dry_sequence_breakers[%zu]", i);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > GRAFT_DRY_MAX_BREAKER_BYTES ||
            strlen(json_string_value(v)) != json_string_length(v))
            return graft__refuse(param, message, path, "'%s' must be a string of 1 to %d bytes "
                                 "(no NUL)", path, GRAFT_DRY_MAX_BREAKER_BYTES);
        if ((r->dry_breakers[r->n_dry_breakers] = strdup(json_string_value(v))) == NULL)
            return GRAFT_ENOMEM;
        r->n_dry_breakers++;
    }
    return GRAFT_OK;
}

/* llama-server's repeat_last_n (or penalty_last_n): the repetition penalty's window, -1 the
 * whole history, 0 none (the penalty off). */
static int parse_penalty_window(const json_t *body, graft_sampling *s, char **param,
                                char **message)
{
    const char *key = json_object_get(body, "penalty_last_n") ? "penalty_last_n"
                                                               : "repeat_last_n";
    long long n = -1;
    int rc = get_int(body, key, -1, INT32_MAX, &n, param, message);
    if (rc != GRAFT_OK)
        return rc;
    if (n == 0)
        s->repetition_penalty = 1.0f;
    s->penalty_last_n = n > 0 ? (int32_t)n : 0;
    return GRAFT_OK;
}

/* graft_sampling's float fields under the names requests give them, with their ranges. */
static const struct {
    const char *key;
    double lo, hi;
    size_t offset; /* of the float in graft_sampling */
} sampling_floats[] = {
    {"temperature", 0, 2, offsetof(graft_sampling, temperature)},
    {"top_p", 0, 1, offsetof(graft_sampling, top_p)},
    {"min_p", 0, 1, offsetof(graft_sampling, min_p)},
    {"top_n_sigma", -1, 100, offsetof(graft_sampling, top_n_sigma)}, /* llama's off: -1 */
    {"xtc_probability", 0, 1, offsetof(graft_sampling, xtc_probability)},
    {"xtc_threshold", 0, 1, offsetof(graft_sampling, xtc_threshold)},
    {"typical_p", 0, 1, offsetof(graft_sampling, typical_p)},
    {"dynatemp_range", 0, 100, offsetof(graft_sampling, dynatemp_range)},
    {"dynatemp_exponent", 0, 100, offsetof(graft_sampling, dynatemp_exponent)},
    {"mirostat_tau", 0, 100, offsetof(graft_sampling, mirostat_tau)},
    {"mirostat_eta", 0, 10, offsetof(graft_sampling, mirostat_eta)},
    {"dry_multiplier", 0, 100, offsetof(graft_sampling, dry_multiplier)},
    {"dry_base", 1, 100, offsetof(graft_sampling, dry_base)},
    {"presence_penalty", -2, 2, offsetof(graft_sampling, presence_penalty)},
    {"frequency_penalty", -2, 2, offsetof(graft_sampling, frequency_penalty)},
};

/* Every field parse_sampling and parse_logit_bias read (tfs_z and min_keep included, so
 * that they are refused wherever they are sent). */
static const char *const sampling_fields[] = {
    "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "repeat_penalty",
    "repeat_last_n", "penalty_last_n", "presence_penalty", "frequency_penalty", "top_n_sigma",
    "typical_p", "xtc_probability", "xtc_threshold", "dynatemp_range", "dynatemp_exponent",
    "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base",
    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "tfs_z", "min_keep",
    "logit_bias"};

void graft__copy_fields(json_t *to, const json_t *from, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(from, names[i]);
        if (v != NULL && !json_is_null(v))
            json_object_set(to, names[i], v);
    }
}

void graft__copy_sampling_fields(json_t *to, const json_t *from)
{
    graft__copy_fields(to, from, sampling_fields,
                       sizeof sampling_fields / sizeof sampling_fields[0]);
}

static int parse_sampling(const json_t *body, graft__completion_request *r, char **param,
                          char **message)
{
    graft_sampling *s = &r->sampling;
    int rc;
    for (size_t i = 0; i < sizeof sampling_floats / sizeof sampling_floats[0]; i++) {
        float *field = (float *)((char *)s + sampling_floats[i].offset);
        double x = *field;
        if ((rc = get_number(body, sampling_floats[i].key, sampling_floats[i].lo,
                             sampling_floats[i].hi, &x, param, message)) != GRAFT_OK)
            return rc;
        *field = (float)x;
    }
    long long k = s->top_k;
    if ((rc = get_int(body, "top_k", 0, INT32_MAX, &k, param, message)) != GRAFT_OK)
        return rc;
    s->top_k = (int32_t)k;
    const char *penalty = json_object_get(body, "repetition_penalty") ? "repetition_penalty"
                                                                       : "repeat_penalty";
    double x = s->repetition_penalty;
    if ((rc = get_number(body, penalty, 0.01, 100, &x, param, message)) != GRAFT_OK)
        return rc;
    s->repetition_penalty = (float)x;
    if ((rc = parse_penalty_window(body, s, param, message)) != GRAFT_OK ||
        (rc = parse_llama_ints(body, s, param, message)) != GRAFT_OK ||
        (rc = parse_dry_breakers(body, r, param, message)) != GRAFT_OK ||
        (rc = refuse_llama_samplers(body, param, message)) != GRAFT_OK)
        return rc;
    long long seed = -1;
    if ((rc = get_int(body, "seed", -1, INT64_MAX, &seed, param, message)) != GRAFT_OK)
        return rc;
    s->seed = seed >= 0 ? (uint64_t)seed : (uint64_t)time(NULL) ^ (uint64_t)clock();
    return GRAFT_OK;
}

/* A logit_bias value: a bias in [-100, 100], or (llama-server's) false: never sampled. */
static int bias_value(const json_t *v, const char *path, float *bias, char **param,
                      char **message)
{
    if (json_is_false(v)) {
        *bias = -INFINITY;
        return GRAFT_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
        return graft__refuse(param, message, path, "'%s' must be a number in [-100, 100] or "
                             "false", path);
    *bias = (float)json_number_value(v);
    return GRAFT_OK;
}

/* One entry: a token id, or a text whose tokens each get the bias once it is tokenized. */
static int add_bias(graft__completion_request *r, long long id, const char *text, float bias)
{
    if (text == NULL) {
        r->logit_bias[r->n_logit_bias++] = (graft_logit_bias){(int32_t)id, bias};
        return GRAFT_OK;
    }
    char *copy = strdup(text);
    if (copy == NULL)
        return GRAFT_ENOMEM;
    r->logit_bias_texts[r->n_logit_bias_texts++] = (graft__bias_text){copy, bias};
    return GRAFT_OK;
}

/* A key of the object form: a token id when all digits (OpenAI's), else a text. */
static const char *id_or_text(const char *key, long long *id)
{
    char *end = NULL;
    errno = 0;
    *id = strtoll(key, &end, 10);
    bool digits = key[0] >= '0' && key[0] <= '9' && *end == '\0';
    return digits && errno == 0 && *id <= INT32_MAX ? NULL : key;
}

/* logit_bias: OpenAI's {"token id": bias, ...}, or llama-server's forms: keys that are texts,
 * [[token id or text, bias], ...], and false for a bias (never sampled). */
static int parse_logit_bias(const json_t *body, graft__completion_request *r, char **param,
                            char **message)
{
    const json_t *b = json_object_get(body, "logit_bias");
    if (b == NULL || json_is_null(b))
        return GRAFT_OK;
    size_t n = json_is_object(b) ? json_object_size(b) : json_is_array(b) ? json_array_size(b) : 0;
    if (!json_is_object(b) && !json_is_array(b))
        return graft__refuse(param, message, "logit_bias", "'logit_bias' must be an object of "
                             "token ids to biases, or an array of [token id or text, bias]");
    if (n == 0)
        return GRAFT_OK;
    r->logit_bias = malloc(n * sizeof *r->logit_bias);
    r->logit_bias_texts = malloc(n * sizeof *r->logit_bias_texts);
    if (r->logit_bias == NULL || r->logit_bias_texts == NULL)
        return GRAFT_ENOMEM;
    char path[80];
    float bias = 0.0f;
    long long id = 0;
    int rc;
    if (json_is_object(b)) {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)b, key, v) {
            snprintf(path, sizeof path, "logit_bias.%.60s", key);
            const char *text = id_or_text(key, &id);
            if (key[0] == '\0')
                return graft__refuse(param, message, path, "'%s': an empty key is neither a "
                                     "token id nor a text", path);
            if ((rc = bias_value(v, path, &bias, param, message)) != GRAFT_OK ||
                (rc = add_bias(r, id, text, bias)) != GRAFT_OK)
                return rc;
        }
        return GRAFT_OK;
    }
    size_t i;
    const json_t *pair;
    json_array_foreach(b, i, pair) {
        const json_t *what = json_array_get(pair, 0);
        snprintf(path, sizeof path, "logit_bias[%zu]", i);
        if (!json_is_array(pair) || json_array_size(pair) != 2)
            return graft__refuse(param, message, path, "'%s' must be a pair [token id or text, "
                                 "bias]", path);
        snprintf(path, sizeof path, "logit_bias[%zu][0]", i);
        if (!(json_is_string(what) && json_string_length(what) > 0) &&
            !(json_is_integer(what) && json_integer_value(what) >= 0 &&
              json_integer_value(what) <= INT32_MAX))
            return graft__refuse(param, message, path, "'%s' must be a token id or a text",
                                 path);
        snprintf(path, sizeof path, "logit_bias[%zu][1]", i);
        id = json_is_integer(what) ? json_integer_value(what) : 0;
        if ((rc = bias_value(json_array_get(pair, 1), path, &bias, param, message)) != GRAFT_OK ||
            (rc = add_bias(r, id, json_is_string(what) ? json_string_value(what) : NULL,
                           bias)) != GRAFT_OK)
            return rc;
    }
    return GRAFT_OK;
}

/* n, logprobs and top_logprobs, or llama-server's n_probs. */
static int parse_choices(const json_t *body, graft__completion_request *r, char **param,
                         char **message)
{
    long long n = 1;
    int rc = get_int(body, "n", 1, GRAFT__MAX_CHOICES, &n, param, message);
    if (rc != GRAFT_OK)
        return rc;
    r->n_choices = (int32_t)n;
    long long best_of = 0; /* absent */
    if ((rc = get_int(body, "best_of", 1, GRAFT__MAX_CHOICES, &best_of, param, message)) !=
        GRAFT_OK)
        return rc;
    if (r->chat && best_of > 1) /* 1 asks for nothing (some clients send it) */
        return graft__refuse(param, message, "best_of", "'best_of' is a field of "
                             "/v1/completions");
    if (!r->chat && best_of > 0 && best_of < n)
        return graft__refuse(param, message, "best_of", "'best_of' (%lld) must be at least "
                             "'n' (%lld)", best_of, n);
    r->best_of = r->chat || best_of == 0 ? r->n_choices : (int32_t)best_of;
    const json_t *lp = json_object_get(body, "logprobs");
    long long top = 0;
    if (!r->chat) { /* the legacy completions API: logprobs is the count of alternatives */
        if (lp != NULL && !json_is_null(lp) && !json_is_false(lp)) {
            if (json_is_true(lp))
                top = 0;
            else if ((rc = get_int(body, "logprobs", 0, GRAFT_MAX_TOP_LOGPROBS, &top, param,
                                   message)) != GRAFT_OK)
                return rc;
            r->logprobs = true;
        }
    } else {
        if ((rc = get_bool(body, "logprobs", &r->logprobs, param, message)) != GRAFT_OK ||
            (rc = get_int(body, "top_logprobs", 0, GRAFT_MAX_TOP_LOGPROBS, &top, param,
                          message)) != GRAFT_OK)
            return rc;
        if (top > 0 && !r->logprobs)
            return graft__refuse(param, message, "top_logprobs",
                                 "'top_logprobs' needs 'logprobs' to be true");
    }
    /* n_probs: log-probabilities with that many alternatives, unless OpenAI's field asked
     * for them; post_sampling_probs (the sampler's final distribution) is not kept */
    long long n_probs = 0;
    bool post_sampling = false;
    if ((rc = get_int(body, "n_probs", 0, GRAFT_MAX_TOP_LOGPROBS, &n_probs, param, message)) !=
            GRAFT_OK ||
        (rc = get_bool(body, "post_sampling_probs", &post_sampling, param, message)) !=
            GRAFT_OK)
        return rc;
    if (post_sampling)
        return graft__refuse(param, message, "post_sampling_probs", "'post_sampling_probs' is "
                             "not supported: graft gives the model's log-probabilities, before "
                             "sampling");
    if (n_probs > 0 && !r->logprobs) {
        r->logprobs = true;
        top = n_probs;
    }
    r->top_logprobs = (int32_t)top;
    return GRAFT_OK;
}

/* The schema of one tool's call, {"name": <its name>, "arguments": <args>} (args consumed);
 * folders: its parameters' $defs / definitions, copied so that their $refs resolve. */
static json_t *call_schema(const char *name, json_t *args, const json_t *folders)
{
    json_t *schema = json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s], s:b}", "type", "object",
                               "properties", "name", "const", name, "arguments", args,
                               "required", "name", "arguments", "additionalProperties", 0);
    static const char *const names[] = {"$defs", "definitions"};
    for (int f = 0; f < 2 && schema != NULL && folders != NULL; f++)
        if (json_object_get(folders, names[f]) != NULL)
            json_object_set(schema, names[f], json_object_get(folders, names[f]));
    return schema;
}

/* Whether the engine can hold arguments to a tool's parameters: an object schema of the
 * subset; *why (to graft_free) says why not. */
static bool parameters_followed(const char *name, const json_t *params, char **why)
{
    *why = NULL;
    if (!json_is_object(params))
        return false;
    json_t *schema = call_schema(name, json_incref((json_t *)params), params);
    char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    bool ok = text != NULL && graft_json_schema_check(text, strlen(text), why) == GRAFT_OK;
    free(text);
    return ok;
}

/* The schema of a forced tool call, {"name": ..., "arguments": {...}}: the name one of the
 * tools' (the one `only` names, when given), the arguments held to that tool's parameters
 * when the engine can follow them, else to a JSON object. With several tools the call is
 * one of their calls, told apart by the name (a tag); parameters with $defs are then held
 * to a JSON object only, since two tools' $defs could share names. A tool marked strict
 * whose parameters the engine cannot follow is refused. */
static int forced_call_schema(const json_t *tools, const char *only,
                              graft__completion_request *r, char **param, char **message)
{
    json_t *calls = json_array();
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (only == NULL || strcmp(name, only) == 0)
            n++;
    }
    if (n == 0) {
        json_decref(calls);
        return graft__refuse(param, message, "tool_choice.function.name",
                             "'tool_choice.function.name' %.100s is not among the tools", only);
    }
    int rc = GRAFT_OK;
    for (size_t i = 0; i < json_array_size(tools) && rc == GRAFT_OK; i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (only != NULL && strcmp(name, only) != 0)
            continue;
        const json_t *params = json_object_get(fn, "parameters");
        bool folders = json_object_get(params, "$defs") || json_object_get(params, "definitions");
        char *why = NULL;
        bool followed = parameters_followed(name, params, &why);
        if (!followed && json_is_true(json_object_get(fn, "strict"))) {
            char path[64];
            snprintf(path, sizeof path, "tools[%zu].function.parameters", i);
            rc = graft__refuse(param, message, path, "%s",
                               why ? why : "the schema is not supported");
        } else {
            bool held = followed && (n == 1 || !folders);
            json_t *args = held ? json_incref((json_t *)params)
                                : json_pack("{s:s}", "type", "object");
            json_array_append_new(calls, call_schema(name, args, held ? params : NULL));
        }
        graft_free(why);
    }
    json_t *schema = n == 1 ? json_incref(json_array_get(calls, 0))
                            : json_pack("{s:O}", "anyOf", calls);
    json_decref(calls);
    if (rc == GRAFT_OK) {
        free(r->json_schema);
        r->json_schema = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
        rc = r->json_schema == NULL ? GRAFT_ENOMEM
                                    : graft_json_schema_check(r->json_schema,
                                                              strlen(r->json_schema), NULL);
    }
    json_decref(schema);
    if (rc == GRAFT_EINVAL && *param == NULL) /* two tools of one name */
        rc = graft__refuse(param, message, "tools", "the tools' names must differ");
    r->output_format = GRAFT_OUTPUT_JSON_SCHEMA;
    r->forced_call = rc == GRAFT_OK;
    return rc;
}

/* tools (checked for the shape templates read) and tool_choice: auto, none, required, or
 * {"type": "function", "function": {"name": ...}}; the last two force a call. */
static int parse_tools(const json_t *body, graft__completion_request *r, char **param,
                       char **message)
{
    const json_t *tools = json_object_get(body, "tools");
    if (tools == NULL || json_is_null(tools))
        return GRAFT_OK;
    if (!r->chat)
        return graft__refuse(param, message, "tools", "'tools' needs /v1/chat/completions");
    if (!json_is_array(tools))
        return graft__refuse(param, message, "tools", "'tools' must be an array");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const json_t *fn = json_object_get(t, "function");
        char path[64];
        snprintf(path, sizeof path, "tools[%zu]", i);
        if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")) ||
            strcmp(json_string_value(json_object_get(t, "type")), "function") != 0)
            return graft__refuse(param, message, path,
                                 "'%s' must be {\"type\": \"function\", ...}", path);
        snprintf(path, sizeof path, "tools[%zu].function.name", i);
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return graft__refuse(param, message, path, "'%s' must be a string", path);
    }
    const json_t *choice = json_object_get(body, "tool_choice");
    const char *mode = json_is_null(choice) || choice == NULL ? "auto" : json_string_value(choice);
    const char *only = json_string_value(
        json_object_get(json_object_get(choice, "function"), "name"));
    if (json_is_object(choice) && only != NULL)
        mode = "required";
    if (mode == NULL || (strcmp(mode, "auto") != 0 && strcmp(mode, "none") != 0 &&
                         strcmp(mode, "required") != 0))
        return graft__refuse(param, message, "tool_choice",
                             "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                             "\"function\", \"function\": {\"name\": ...}}");
    r->tools = json_array_size(tools) > 0 && strcmp(mode, "none") != 0;
    if (strcmp(mode, "required") != 0)
        return GRAFT_OK;
    if (json_array_size(tools) == 0)
        return graft__refuse(param, message, "tool_choice", "'tool_choice' %s needs tools",
                             only ? "naming a function" : "required");
    return forced_call_schema(tools, only, r, param, message);
}

/* A schema (at `path` in the body) the output is held to: one outside the subset the
 * engine follows is refused naming the keyword. */
static int parse_json_schema(const json_t *schema, const char *path,
                             graft__completion_request *r, char **param, char **message)
{
    if (!json_is_object(schema))
        return graft__refuse(param, message, path, "'%s' must be a JSON schema object", path);
    r->json_schema = json_dumps(schema, JSON_COMPACT);
    if (r->json_schema == NULL)
        return GRAFT_ENOMEM;
    char *why = NULL;
    int rc = graft_json_schema_check(r->json_schema, strlen(r->json_schema), &why);
    if (rc == GRAFT_EINVAL)
        graft__refuse(param, message, path, "%s", why ? why : "the schema is not supported");
    graft_free(why);
    r->output_format = GRAFT_OUTPUT_JSON_SCHEMA;
    return rc;
}

/* response_format: {"type": "text"} (the default), {"type": "json_object"} (the output held
 * to one JSON object), or {"type": "json_schema", "json_schema": {"name": ..., "schema":
 * {...}, "strict": ...}} (and to an instance of the schema, strict or not); or
 * llama-server's json_schema field, the schema itself. */
static int parse_response_format(const json_t *body, graft__completion_request *r,
                                 char **param, char **message)
{
    const json_t *f = json_object_get(body, "response_format");
    const json_t *llama_schema = json_object_get(body, "json_schema");
    if (r->forced_call && ((f != NULL && !json_is_null(f)) ||
                           (llama_schema != NULL && !json_is_null(llama_schema))))
        return graft__refuse(param, message, "tool_choice",
                             "a forced tool call's output is the call: it cannot also follow a "
                             "response format");
    if (llama_schema != NULL && !json_is_null(llama_schema)) {
        if (f != NULL && !json_is_null(f))
            return graft__refuse(param, message, "json_schema",
                                 "'json_schema' and 'response_format' cannot both be given");
        return parse_json_schema(llama_schema, "json_schema", r, param, message);
    }
    if (f == NULL || json_is_null(f))
        return GRAFT_OK;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || type == NULL)
        return graft__refuse(param, message, "response_format",
                             "'response_format' must be an object with a string 'type'");
    if (strcmp(type, "json_object") == 0)
        r->output_format = GRAFT_OUTPUT_JSON_OBJECT;
    else if (strcmp(type, "json_schema") == 0)
        return parse_json_schema(json_object_get(json_object_get(f, "json_schema"), "schema"),
                                 "response_format.json_schema.schema", r, param, message);
    else if (strcmp(type, "text") != 0)
        return graft__refuse(param, message, "response_format.type",
                             "'response_format.type' must be \"text\", \"json_object\" or "
                             "\"json_schema\", not \"%.40s\"", type);
    return GRAFT_OK;
}

/* llama-server's grammar: a GBNF grammar the output is held to (an empty one: none). */
static int parse_grammar(const json_t *body, graft__completion_request *r, char **param,
                         char **message)
{
    const json_t *v = json_object_get(body, "grammar");
    if (v == NULL || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
        return GRAFT_OK;
    if (!json_is_string(v))
        return graft__refuse(param, message, "grammar", "'grammar' must be a string");
    if (r->output_format != GRAFT_OUTPUT_TEXT)
        return graft__refuse(param, message, "grammar",
                             r->forced_call ? "a forced tool call's output is the call: it "
                                              "cannot also follow a grammar"
                                            : "'grammar' cannot go with 'response_format' or "
                                              "'json_schema'");
    r->grammar_len = json_string_length(v);
    r->grammar = malloc(r->grammar_len);
    if (r->grammar == NULL)
        return GRAFT_ENOMEM;
    memcpy(r->grammar, json_string_value(v), r->grammar_len);
    char *why = NULL;
    int rc = graft_grammar_check(r->grammar, r->grammar_len, &why);
    if (rc == GRAFT_EINVAL)
        graft__refuse(param, message, "grammar", "%s", why ? why : "the grammar is not valid");
    graft_free(why);
    r->output_format = GRAFT_OUTPUT_GRAMMAR;
    return rc;
}

/* The lengths, and echo: the completions API may ask for the prompt back, then with
 * max_tokens 0 for the prompt alone. */
static int parse_lengths(const json_t *body, graft__completion_request *r, char **param,
                         char **message)
{
    int rc = get_bool(body, "echo", &r->echo, param, message);
    if (rc != GRAFT_OK)
        return rc;
    if (r->echo && r->chat)
        return graft__refuse(param, message, "echo", "'echo' is a field of /v1/completions");
    /* n_predict is llama-server's, max_output_tokens the Responses API's (responses.c) */
    static const char *const keys[4] = {"max_tokens", "max_completion_tokens", "n_predict",
                                        "max_output_tokens"};
    for (int i = 0; i < 4; i++) {
        long long v = -2;
        if ((rc = get_int(body, keys[i], i == 2 ? -1 : 0, INT32_MAX, &v, param, message)) !=
            GRAFT_OK)
            return rc;
        if (v != -2) {
            r->max_tokens = v < 0 ? 0 : (int32_t)v;
            r->max_tokens_key = keys[i];
            r->prompt_only = v == 0 && i != 2;
            if (r->prompt_only && !r->echo)
                return graft__refuse(param, message, keys[i],
                                     r->chat ? "'%s' must be at least 1"
                                   : "'%s' must be at least 1 (0 only with 'echo')",
                                     keys[i]);
            break;
        }
    }
    return GRAFT_OK;
}

/* A limit of code completion's (llama-server's n_indent and t_max_predict_ms): a count, 0
 * when absent; refused on chat. */
static int get_code_limit(const json_t *body, const char *key, bool chat, int32_t *out,
                          char **param, char **message)
{
    long long v = 0;
    int rc = get_int(body, key, 0, INT32_MAX, &v, param, message);
    if (rc == GRAFT_OK && v > 0 && chat)
        return graft__refuse(param, message, key, "'%s' is for code completion: "
                             "/v1/completions, /completion and /infill", key);
    *out = (int32_t)v;
    return rc;
}

static int parse_flags(const json_t *body, graft__completion_request *r, char **param,
                       char **message)
{
    int rc;
    bool parallel = true;
    if ((rc = get_bool(body, "parallel_tool_calls", &parallel, param, message)) != GRAFT_OK)
        return rc;
    r->one_call = !parallel;
    if ((rc = get_code_limit(body, "n_indent", r->chat, &r->n_indent, param, message)) !=
            GRAFT_OK ||
        (rc = get_code_limit(body, "t_max_predict_ms", r->chat, &r->t_max_predict_ms, param,
                             message)) != GRAFT_OK)
        return rc;
    if ((rc = get_bool(body, "stream", &r->stream, param, message)) != GRAFT_OK ||
        (rc = get_bool(body, "ignore_eos", &r->ignore_eos, param, message)) != GRAFT_OK ||
        (rc = get_bool(body, "return_tokens", &r->return_tokens, param, message)) != GRAFT_OK)
        return rc;
    if (r->stream && r->best_of > r->n_choices)
        return graft__refuse(param, message, "best_of", "'best_of' above 'n' picks among whole "
                             "answers, so it cannot be streamed");
    const json_t *so = json_object_get(body, "stream_options");
    if (so != NULL && !json_is_null(so)) {
        if (!json_is_object(so))
            return graft__refuse(param, message, "stream_options",
                                 "'stream_options' must be an object");
        const json_t *u = json_object_get(so, "include_usage");
        if (u != NULL && !json_is_boolean(u))
            return graft__refuse(param, message, "stream_options.include_usage",
                                 "'stream_options.include_usage' must be true or false");
        r->include_usage = json_is_true(u);
    }
    const json_t *sid = json_object_get(body, "session_id");
    if (sid != NULL && !json_is_null(sid)) {
        if (!json_is_string(sid) || json_string_length(sid) == 0 || json_string_length(sid) > 128)
            return graft__refuse(param, message, "session_id",
                                 "'session_id' must be a string of 1 to 128 bytes");
        r->session_id = strdup(json_string_value(sid));
    }
    const json_t *model = json_object_get(body, "model");
    if (model != NULL && !json_is_null(model) && !json_is_string(model))
        return graft__refuse(param, message, "model", "'model' must be a string");
    return GRAFT_OK;
}

/* Appends tail to the prompt *text: what the answer begins with, written after the
 * generation prompt (a forced call's opening tag, so that the model writes the call's
 * object next, which completion.c gives back to the parse of tool calls; a prefill). */
static int append_text(char **text, const char *tail)
{
    size_t n = strlen(*text), m = strlen(tail);
    char *grown = realloc(*text, n + m + 1);
    if (grown == NULL)
        return GRAFT_ENOMEM;
    memcpy(grown + n, tail, m + 1);
    *text = grown;
    return GRAFT_OK;
}

/* reasoning_format (llama-server's): whether a thinking model's thought is split off into
 * reasoning_content ("auto", "deepseek") or left in the content ("none"); absent: as the
 * server was started. */
static int parse_reasoning_format(const json_t *body, const graft__chat *chat, bool *split,
                                  char **param, char **message)
{
    *split = chat->split_thoughts;
    const json_t *f = json_object_get(body, "reasoning_format");
    if (f == NULL || json_is_null(f))
        return GRAFT_OK;
    const char *v = json_string_value(f);
    if (v != NULL && (strcmp(v, "auto") == 0 || strcmp(v, "deepseek") == 0))
        *split = true;
    else if (v != NULL && strcmp(v, "none") == 0)
        *split = false;
    else
        return graft__refuse(param, message, "reasoning_format",
                             "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
    return GRAFT_OK;
}

/* A chat prompt rendered by a thinking model's template: whether the answer begins inside a
 * thought, and the tags to split it off by. JSON output in such an answer begins after the
 * thought's closing tag: the prompt opened the thought, or the model may open one, unless
 * the prompt ends with a closed one (thinking off); so does thinking_token_budget (vLLM's
 * name) hold that thought, and a budget for a model that writes no thought has nothing to
 * hold. A forced call, whose opening tag ends the prompt, would be written inside a thought
 * the prompt opened: the thought is closed empty first, as the template closes it when
 * thinking is off. */
static int shape_thought(const json_t *body, const graft__chat *chat,
                         graft__completion_request *r, char **param, char **message)
{
    bool split;
    long long budget = 0;
    int rc = parse_reasoning_format(body, chat, &split, param, message);
    if (rc == GRAFT_OK)
        rc = get_int(body, "thinking_token_budget", 1, INT32_MAX, &budget, param, message);
    if (rc != GRAFT_OK || chat->thought_tags == NULL)
        return rc;
    if (budget > 0 && r->output_format == GRAFT_OUTPUT_GRAMMAR)
        return graft__refuse(param, message, "thinking_token_budget",
                             "'thinking_token_budget' cannot go with 'grammar': the grammar "
                             "holds the whole answer, thought included");
    r->thought_tags = split ? chat->thought_tags : NULL;
    r->thought_opened = graft__reasoning_opened(chat->thought_tags, r->prompt_text);
    if (r->thought_opened && r->forced_call) {
        r->thought_opened = false;
        return graft__reasoning_close(chat->thought_tags, &r->prompt_text);
    }
    if (r->forced_call || graft__reasoning_closed(chat->thought_tags, r->prompt_text))
        return GRAFT_OK;
    r->thought_budget = (int32_t)budget;
    r->thought_close = chat->thought_tags->close;
    r->thought_opens = r->thought_opened ? NULL : chat->thought_tags->open;
    if (r->output_format == GRAFT_OUTPUT_TEXT || r->output_format == GRAFT_OUTPUT_GRAMMAR)
        return GRAFT_OK;
    r->output_after = chat->thought_tags->close;
    r->output_opens = r->thought_opened ? NULL : chat->thought_tags->open;
    return GRAFT_OK;
}

/* A chat request's prompt: its messages rendered, its thought shaped, then the answer begun
 * (continue_final_message's prefill, or a forced call's opening tag). */
static int parse_chat(const json_t *body, const graft__chat *chat, graft__completion_request *r,
                      char **param, char **message)
{
    char *prefill = NULL;
    int rc = graft__chat_render(chat, body, &r->prompt_text, &prefill, param, message);
    if (rc != GRAFT_OK && *param == NULL)
        *param = strdup("messages");
    if (rc == GRAFT_OK)
        rc = shape_thought(body, chat, r, param, message);
    if (rc == GRAFT_OK && prefill != NULL && r->forced_call)
        rc = graft__refuse(param, message, "continue_final_message", "a forced tool call cannot "
                           "continue the assistant's message");
    else if (rc == GRAFT_OK && prefill != NULL)
        rc = append_text(&r->prompt_text, prefill);
    else if (rc == GRAFT_OK && r->forced_call)
        rc = append_text(&r->prompt_text, GRAFT__FORCED_CALL_OPEN);
    free(prefill);
    return rc;
}

int graft__request_parse(const json_t *body, graft__prompt_kind kind,
                         const graft__chat *chat_template, graft__completion_request *r,
                         char **param, char **message)
{
    memset(r, 0, sizeof *r);
    *param = *message = NULL;
    r->chat = kind == GRAFT__PROMPT_CHAT;
    r->sampling = graft_sampling_default();
    json_t *as_tools = NULL;
    int rc;
    if (!json_is_object(body))
        rc = graft__refuse(param, message, "", "the body must be a JSON object");
    else
        rc = graft__functions_as_tools(body, r->chat, &as_tools, &r->legacy_functions, param,
                                       message);
    if (as_tools != NULL)
        body = as_tools;
    if (rc == GRAFT_OK && (rc = parse_sampling(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_lengths(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_stop(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_logit_bias(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_choices(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_tools(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_response_format(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_grammar(body, r, param, message)) == GRAFT_OK &&
        (rc = parse_flags(body, r, param, message)) == GRAFT_OK) {
        if (kind == GRAFT__PROMPT_CHAT)
            rc = chat_template == NULL ? GRAFT_EUNSUPPORTED
                                       : parse_chat(body, chat_template, r, param, message);
        else if (kind == GRAFT__PROMPT_INFILL || (rc = parse_prompt(body, r, param, message)) ==
                                                     GRAFT_OK)
            rc = graft__infill_parse(body, kind, r, param, message);
    }
    if (rc != GRAFT_OK && r->legacy_functions)
        graft__functions_legacy_path(param, message);
    if (rc != GRAFT_OK)
        graft__request_free(r);
    json_decref(as_tools);
    return rc;
}

void graft__request_free(graft__completion_request *r)
{
    free(r->prompt_text);
    free(r->prompt_tokens);
    json_decref(r->infill);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    for (size_t i = 0; i < r->n_dry_breakers; i++)
        free(r->dry_breakers[i]);
    free(r->session_id);
    free(r->logit_bias);
    for (size_t i = 0; i < r->n_logit_bias_texts; i++)
        free(r->logit_bias_texts[i].text);
    free(r->logit_bias_texts);
    free(r->json_schema);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}
