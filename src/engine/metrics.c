/*
 * metrics.c: the engine's counters (graft_engine_metrics_get in include/graft.h).
 *
 * The counters live in the engine and are written by the engine thread only (scheduler,
 * generations, clones). A snapshot is taken on the engine thread between steps: from another
 * thread through a blocking METRICS command, from a callback directly. The KV figures come
 * from the pool's own accounting at that moment.
 */
#include "engine/engine.h"

void graft__metrics_fill(graft_engine *e, graft_engine_metrics *m)
{
    graft__kv_stats kv;
    graft__kv_pool_stats(e->kv, &kv);
    *m = e->counters;
    m->sessions_open = e->n_sessions;
    m->generations_live = e->n_active;
    m->generations_waiting_kv = 0;
    for (int32_t i = 0; i < e->n_active; i++)
        m->generations_waiting_kv += e->active[i]->kv_wait_since != 0;
    m->kv_block_tokens = GRAFT_KV_BLOCK_TOKENS;
    m->kv_block_bytes = kv.bytes_per_block;
    m->kv_blocks_total = kv.blocks_total;
    m->kv_blocks_used = kv.blocks_used;
    m->kv_blocks_shared = kv.blocks_shared;
    m->kv_blocks_free = kv.blocks_free;
    m->kv_cow_copies = (uint64_t)kv.cow_copies;
}

void graft__metrics_count_clone(graft_engine *e, int status)
{
    switch (status) {
    case GRAFT_OK:
        e->counters.clones_done++;
        break;
    case GRAFT_EBOUNDARY:
        e->counters.clones_refused_boundary++;
        break;
    case GRAFT_ERETENTION:
        e->counters.clones_refused_retention++;
        break;
    case GRAFT_ECAPACITY:
        e->counters.clones_refused_capacity++;
        break;
    case GRAFT_ESHUTDOWN:
        e->counters.clones_refused_shutdown++;
        break;
    case GRAFT_ECLOSED:
        e->counters.clones_refused_closed++;
        break;
    default:
        e->counters.clones_refused_nomem++;
        break;
    }
}

int graft_engine_metrics_get(graft_engine *e, graft_engine_metrics *out)
{
    if (e == NULL || out == NULL)
        return GRAFT_EINVAL;
    if (graft__engine_on_thread(e)) {
        graft__metrics_fill(e, out);
        return GRAFT_OK;
    }
    graft__cmd cmd = {.kind = GRAFT__CMD_METRICS, .u.metrics = out};
    return graft__engine_call(e, &cmd);
}
