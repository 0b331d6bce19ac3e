/*
 * json_recognizer.c: following every alternative of the unions that a schema'd text's bytes
 * have not yet told apart (graft__json_recognizer, json_output.h).
 *
 * A graft__json_syntax follows one alternative of each union, the choice-th of those the
 * value's first byte allows. Each byte is fed to a copy of every state with choice 0; where
 * the byte began a union value that n_choices alternatives allow, copies with the other
 * choices are fed too. A state that refuses the byte is dropped. Two states whose open forks
 * (json_output.h: where each began and the alternative taken) are the same read the same
 * bytes with the same choices wherever it mattered, so they are the same recognizer from
 * here on and one is kept: the first, so the states stay in the order of their choices.
 */
#include "engine/engine.h"

void graft__json_recognizer_init(graft__json_recognizer *r, const graft__json_schema *schema)
{
    r->n_states = 1;
    graft__json_syntax_init_schema(&r->states[0], schema);
}

bool graft__json_recognizer_done(const graft__json_recognizer *r)
{
    for (uint32_t i = 0; i < r->n_states; i++)
        if (graft__json_syntax_done(&r->states[i]))
            return true;
    return false;
}

static bool same_forks(const graft__json_syntax *a, const graft__json_syntax *b)
{
    if (a->n_forks != b->n_forks)
        return false;
    for (uint32_t i = 0; i < a->n_forks; i++)
        if (a->forks[i].at != b->forks[i].at || a->forks[i].choice != b->forks[i].choice)
            return false;
    return true;
}

/* Appends *s to out[0, *n) unless a state of the same forks is there or out is full. */
static void keep(graft__json_syntax *out, uint32_t *n, const graft__json_syntax *s)
{
    for (uint32_t i = 0; i < *n; i++)
        if (same_forks(&out[i], s))
            return;
    if (*n < GRAFT__JSON_MAX_STATES)
        graft__json_syntax_copy(&out[(*n)++], s);
}

bool graft__json_recognizer_feed(graft__json_recognizer *r, uint8_t byte)
{
    graft__json_syntax out[GRAFT__JSON_MAX_STATES];
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n_states; i++) {
        uint32_t choices = 1;
        for (uint32_t k = 0; k < choices; k++) {
            graft__json_syntax s;
            graft__json_syntax_copy(&s, &r->states[i]);
            s.choice = (uint8_t)k;
            s.n_choices = 0;
            bool ok = graft__json_syntax_feed(&s, byte);
            if (k == 0 && s.n_choices > 1)
                choices = s.n_choices;
            if (ok)
                keep(out, &n, &s);
        }
    }
    if (n == 0)
        return false;
    r->n_states = n;
    for (uint32_t i = 0; i < n; i++) {
        graft__json_syntax_copy(&r->states[i], &out[i]);
        r->states[i].choice = 0;
        r->states[i].n_choices = 0;
    }
    return true;
}
