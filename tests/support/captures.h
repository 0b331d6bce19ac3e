/*
 * captures.h: a generation run with a prompt capture (include/graft.h), as the prefix
 * cache tests start one.
 *
 * graft_test_generate_captured wraps the capture around the caller's callbacks and starts
 * the greedy generation with the wrappers, the sequence graft.h shows for a capture. What
 * comes after (wait, cancel, collect, free) stays with the test, which checks it.
 *
 * The test's own thread only (the wrap is asserted; tests/test_prefix.c's workers make
 * their own checks).
 */
#ifndef GRAFT_TEST_CAPTURES_H
#define GRAFT_TEST_CAPTURES_H

#include <stddef.h>
#include <stdint.h>

#include "graft.h"

/* Wraps cap around on_update, on_settled and user (NULL callbacks: none), asserted to
 * succeed, and starts the greedy generation (graft_test_greedy(max_new)) of tokens[0, n)
 * on s with the wrappers. Returns graft_session_generate's status, the generation in *gen. */
int graft_test_generate_captured(graft_session *s, graft_prompt_capture *cap,
                                 const int32_t *tokens, size_t n, int32_t max_new,
                                 graft_update_cb on_update, graft_settled_cb on_settled,
                                 void *user, graft_generation **gen);

#endif /* GRAFT_TEST_CAPTURES_H */
