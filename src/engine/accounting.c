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
 * Reclaim hooks: a list the engine thread owns (added and removed by blocking commands, so
 * that once removal returns the hook never runs again); the scheduler calls every hook when
 * a generation waits for KV room.
 *
 * Locking: none beyond engine.c's queue. The caller allocates the scratch for the sessions'
 * ids and sequence ids, and the hooks' nodes, so nothing is allocated on the engine thread.
 */
#include "engine/engine.h"

/* Engine thread: the bytes held alone by the sessions `ids`; GRAFT_ECLOSED if one is gone. */
static int exclusive_bytes(graft_engine *e, const uint64_t *ids, int32_t *seqs, size_t n,
                           int64_t *bytes)
{
    for (size_t i = 0; i < n; i++) {
        const graft_session *s = graft__sessions_find(e, ids[i]);
        if (s == NULL)
            return GRAFT_ECLOSED;
        seqs[i] = s->seq;
    }
    *bytes = graft__kv_seqs_exclusive_bytes(e->kv, seqs, n);
    return GRAFT_OK;
}

void graft__accounting_run_exclusive(graft_engine *e, graft__cmd *cmd)
{
    int rc = e->draining ? GRAFT_ESHUTDOWN
                         : exclusive_bytes(e, cmd->u.exclusive.ids, cmd->u.exclusive.seqs,
                                           cmd->u.exclusive.n, cmd->u.exclusive.bytes);
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
    if (n == 0)
        return GRAFT_OK;
    uint64_t *ids = graft__malloc(n * (sizeof *ids + sizeof(int32_t)));
    if (ids == NULL)
        return GRAFT_ENOMEM;
    int32_t *seqs = (int32_t *)(ids + n);
    for (size_t i = 0; i < n; i++)
        ids[i] = sessions[i]->id;
    int rc;
    if (graft__engine_on_thread(e)) {
        rc = exclusive_bytes(e, ids, seqs, n, bytes);
    } else {
        graft__cmd cmd = {.kind = GRAFT__CMD_EXCLUSIVE};
        cmd.u.exclusive.ids = ids;
        cmd.u.exclusive.seqs = seqs;
        cmd.u.exclusive.n = n;
        cmd.u.exclusive.bytes = bytes;
        rc = graft__engine_call(e, &cmd);
    }
    if (rc != GRAFT_OK)
        *bytes = 0;
    graft__free(ids);
    return rc;
}

/* ---- reclaim hooks ---------------------------------------------------------------------------- */

void graft__accounting_run_reclaim(graft_engine *e, graft__cmd *cmd)
{
    int rc = GRAFT_OK;
    if (cmd->u.reclaim.add) {
        cmd->u.reclaim.hook->next = e->reclaim;
        e->reclaim = cmd->u.reclaim.hook;
    } else {
        graft__reclaim_hook **at = &e->reclaim;
        while (*at != NULL && ((*at)->cb != cmd->u.reclaim.cb || (*at)->user != cmd->u.reclaim.user))
            at = &(*at)->next;
        cmd->u.reclaim.hook = *at;
        if (*at != NULL)
            *at = (*at)->next;
        else
            rc = GRAFT_ENOTFOUND;
    }
    graft__engine_reply(e, cmd, rc);
}

void graft__accounting_reclaim(graft_engine *e, int64_t bytes_short)
{
    for (graft__reclaim_hook *h = e->reclaim; h != NULL; h = h->next) {
        e->counters.kv_reclaims++;
        h->cb(e, bytes_short, h->user);
    }
}

void graft__accounting_free_hooks(graft_engine *e)
{
    while (e->reclaim != NULL) {
        graft__reclaim_hook *h = e->reclaim;
        e->reclaim = h->next;
        graft__free(h);
    }
}

int graft_engine_reclaim_add(graft_engine *e, graft_reclaim_cb cb, void *user)
{
    if (e == NULL || cb == NULL || graft__engine_on_thread(e))
        return GRAFT_EINVAL;
    graft__reclaim_hook *hook = graft__calloc(1, sizeof *hook);
    if (hook == NULL)
        return GRAFT_ENOMEM;
    hook->cb = cb;
    hook->user = user;
    graft__cmd cmd = {.kind = GRAFT__CMD_RECLAIM};
    cmd.u.reclaim.hook = hook;
    cmd.u.reclaim.add = true;
    int rc = graft__engine_call(e, &cmd);
    if (rc != GRAFT_OK)
        graft__free(hook);
    return rc;
}

int graft_engine_reclaim_remove(graft_engine *e, graft_reclaim_cb cb, void *user)
{
    if (e == NULL || cb == NULL || graft__engine_on_thread(e))
        return GRAFT_EINVAL;
    graft__cmd cmd = {.kind = GRAFT__CMD_RECLAIM};
    cmd.u.reclaim.cb = cb;
    cmd.u.reclaim.user = user;
    int rc = graft__engine_call(e, &cmd);
    graft__free(cmd.u.reclaim.hook);
    return rc;
}
