/*
 * captures.c: a generation run with a prompt capture (captures.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "captures.h"
#include "models.h"

int graft_test_generate_captured(graft_session *s, graft_prompt_capture *cap,
                                 const int32_t *tokens, size_t n, int32_t max_new,
                                 graft_update_cb on_update, graft_settled_cb on_settled,
                                 void *user, graft_generation **gen)
{
    assert_int_equal(graft_prompt_capture_wrap(cap, &on_update, &on_settled, &user), GRAFT_OK);
    graft_generate_config cfg = graft_test_greedy(max_new);
    return graft_session_generate(s, tokens, n, &cfg, on_update, on_settled, user, gen);
}
