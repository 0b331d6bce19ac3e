/*
 * run_cache.c: `graft run --prompt-cache`: the prefix cache around each prompt (see run.h).
 *
 * For each prompt, graft_prefix_cache_lookup gives a clone of the longest cached prefix,
 * whose KV is not computed again (on a miss, a new session is opened), and a prompt capture
 * wraps the generation's callbacks, so the prompt's snapshot is taken at its first token.
 * Once the generation settled the capture is collected into the cache. With --chat the
 * session itself, holding prompt and reply, goes into the cache too, so the next turn finds
 * the whole conversation computed. Then the cache's byte bound is enforced
 * (graft_prefix_cache_trim), since closing the session made the blocks it shared with
 * snapshots the cache's alone. A capture that misses or an insert the cache refuses costs
 * nothing but reuse: a later prompt computes more. Without a cache a turn is a new session.
 */
#include <stdio.h>

#include "run.h"

static int open_session(graft_engine *engine, graft_session **session)
{
    char *err = NULL;
    int rc = graft_session_open(engine, session, &err);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot open a session: %s", err ? err : graft_status_str(rc));
        graft_free(err);
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

int graft__run_turn_begin(graft_engine *engine, graft_prefix_cache *cache,
                          const int32_t *tokens, size_t n, graft_update_cb *on_update,
                          graft_settled_cb *on_settled, void **user, graft__run_turn *turn)
{
    *turn = (graft__run_turn){0};
    if (cache == NULL || graft_prefix_cache_lookup(cache, tokens, n, &turn->session,
                                                   &turn->reused) != GRAFT_OK) {
        turn->reused = 0;
        if (open_session(engine, &turn->session) != GRAFT_CLI_OK)
            return GRAFT_CLI_FAILED;
    }
    if (cache == NULL)
        return GRAFT_CLI_OK;
    int rc = graft_prompt_capture_create(cache, turn->session, tokens, n, &turn->capture);
    if (rc == GRAFT_OK)
        rc = graft_prompt_capture_wrap(turn->capture, on_update, on_settled, user);
    if (rc != GRAFT_OK) {
        graft__cli_error("run", "cannot capture the prompt for the cache: %s",
                         graft_status_str(rc));
        graft_prompt_capture_free(turn->capture);
        graft_session_close(turn->session);
        *turn = (graft__run_turn){0};
        return GRAFT_CLI_FAILED;
    }
    return GRAFT_CLI_OK;
}

void graft__run_turn_end(graft_prefix_cache *cache, graft__run_turn *turn,
                         const int32_t *history, size_t n_history)
{
    if (turn->capture != NULL) {
        graft_prompt_capture_collect(turn->capture);
        graft_prompt_capture_free(turn->capture);
    }
    int32_t position = turn->session != NULL ? graft_session_position(turn->session) : 0;
    if (cache != NULL && history != NULL && position > 0 && (size_t)position <= n_history)
        graft_prefix_cache_insert(cache, history, (size_t)position, turn->session);
    else
        graft_session_close(turn->session);
    if (cache != NULL)
        graft_prefix_cache_trim(cache);
    *turn = (graft__run_turn){0};
}

void graft__run_cache_summary(graft_prefix_cache *cache)
{
    graft_prefix_cache_stats st;
    if (graft_prefix_cache_stats_get(cache, &st) != GRAFT_OK)
        return;
    fprintf(stderr, "prompt cache: %llu lookup%s, %llu hit%s, %llu tokens reused; %d "
            "snapshot%s held, %.1f KiB of KV\n", (unsigned long long)st.lookups,
            st.lookups == 1 ? "" : "s", (unsigned long long)st.hits, st.hits == 1 ? "" : "s",
            (unsigned long long)st.hit_tokens, (int)st.entries, st.entries == 1 ? "" : "s",
            (double)st.bytes / 1024.0);
}
