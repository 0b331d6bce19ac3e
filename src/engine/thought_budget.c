/*
 * thought_budget.c: a thinking model's thought held to a number of tokens
 * (graft_generate_config.thought_budget).
 *
 * The output's bytes are followed as they come: when the model opens its thought itself,
 * white space and then the opening text; then the thought, until its closing tag. Once the
 * output has thought_budget tokens and the thought is still open, the tokens of a line
 * break and the closing tag are given out in turn instead of sampled ones, and sampling
 * goes on after them: the answer that follows is the model's own. Where those tokens would
 * not all fit before max_new_tokens, they begin sooner and end at it, so that a budgeted
 * thought is never cut inside its tag. An output that begins
 * with anything but the opening text has no thought, and the budget does not apply. A
 * forced token draws nothing from the sampler, so the tokens before and after it are what
 * they would be at that point, whatever else is batched.
 */
#include <string.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

int graft__thought_budget_init(graft__thought_budget *b, const graft__vocab *v, int32_t budget,
                               const char *close, const char *open)
{
    memset(b, 0, sizeof *b);
    if (budget <= 0)
        return GRAFT_OK;
    b->budget = budget;
    b->close_len = (uint32_t)strnlen(close, GRAFT_MAX_OUTPUT_AFTER);
    b->open_len = open != NULL ? (uint32_t)strnlen(open, GRAFT_MAX_OUTPUT_AFTER) : 0;
    memcpy(b->close, close, b->close_len);
    memcpy(b->open, open ? open : "", b->open_len);
    b->inside = b->open_len == 0;
    char text[GRAFT_MAX_OUTPUT_AFTER + 2] = "\n";
    memcpy(text + 1, close, b->close_len);
    size_t n = 0;
    int rc = graft__tokenize(v, text, b->close_len + 1, false, true, &b->closing, &n);
    b->n_closing = (int32_t)n;
    return rc;
}

void graft__thought_budget_free(graft__thought_budget *b)
{
    graft__free(b->closing);
    b->closing = NULL;
}

int32_t graft__thought_budget_forced(const graft__thought_budget *b, int32_t n_out,
                                     int32_t max_new)
{
    int32_t from = b->budget;
    if (max_new > 0 && b->budget < max_new && max_new - b->budget < b->n_closing)
        from = max_new > b->n_closing ? max_new - b->n_closing : 0;
    if (b->budget == 0 || b->over || !b->inside || n_out < from || b->given >= b->n_closing)
        return -1;
    return b->closing[b->given];
}

void graft__thought_budget_feed(graft__thought_budget *b, const graft__vocab *v, int32_t token,
                                bool forced)
{
    if (b->budget == 0 || b->over)
        return;
    char bytes[1024];
    int len = graft__token_bytes(v, token, bytes, sizeof bytes);
    size_t n = len < 0 ? 0 : (size_t)len < sizeof bytes ? (size_t)len : sizeof bytes;
    for (size_t i = 0; i < n && !b->over; i++) {
        uint8_t c = (uint8_t)bytes[i];
        if (b->inside) {
            b->matched = graft__tag_step(b->close, b->matched, c);
            b->over = b->matched == b->close_len;
        } else if (b->opening == 0 && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
            continue;
        } else if ((uint8_t)b->open[b->opening] == c) {
            b->inside = ++b->opening == b->open_len;
        } else {
            b->over = true; /* the output has no thought */
        }
    }
    if (forced && ++b->given == b->n_closing)
        b->over = true; /* the tag is out, whether or not its token had bytes */
}
