/*
 * accounting.c: KV accounting for caches above the engine (graft_engine_kv_exclusive_bytes
 * in include/graft.h).
 *
 * A cache of snapshot sessions (src/prefix/) shares KV blocks with live sessions: a block
 * that a live session also references costs the cache nothing, since closing the snapshot
 * would not free it. The figure that bounds such a cache is therefore the bytes of the
 * blocks referenced by its sessions and by no other: graft__kv_seqs_exclusive_bytes counts
 * them in O(blocks of the set). It changes whenever a sharer closes, so it is computed on
 * demand, on the engine thread, between steps.
 *
 * Locking: none beyond engine.c's queue. The caller allocates the scratch for the sessions'
 * sequence ids, so nothing is allocated on the engine thread.
 */
#include "engine/engine.h"

void graft__accounting_run_exclusive(graft_engine *e, graft__cmd *cmd)
{
    size_t n = cmd->u.exclusive.n;
    int rc = e->draining ? GRAFT_ESHUTDOWN : GRAFT_OK;
    if (rc == GRAFT_OK) {
        for (size_t i = 0; i < n; i++)
            cmd->u.exclusive.seqs[i] = cmd->u.exclusive.sessions[i]->seq;
        *cmd->u.exclusive.bytes = graft__kv_seqs_exclusive_bytes(e->kv, cmd->u.exclusive.seqs, n);
    }
    graft__engine_reply(e, cmd, rc);
}

int graft_engine_kv_exclusive_bytes(graft_engine *e, graft_session *const *sessions, size_t n,
                                    int64_t *bytes)
{
    if (bytes != NULL)
        *bytes = 0;
    if (e == NULL || bytes == NULL || (n > 0 && sessions == NULL))
        return GRAFT_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (sessions[i] == NULL || sessions[i]->engine != e)
            return GRAFT_EINVAL;
    if (graft__engine_on_thread(e))
        return GRAFT_EINVAL;
    if (n == 0)
        return GRAFT_OK;
    graft__cmd cmd = {.kind = GRAFT__CMD_EXCLUSIVE};
    cmd.u.exclusive.sessions = sessions;
    cmd.u.exclusive.seqs = graft__calloc(n, sizeof *cmd.u.exclusive.seqs);
    cmd.u.exclusive.n = n;
    cmd.u.exclusive.bytes = bytes;
    if (cmd.u.exclusive.seqs == NULL)
        return GRAFT_ENOMEM;
    int rc = graft__engine_call(e, &cmd);
    graft__free(cmd.u.exclusive.seqs);
    return rc;
}
