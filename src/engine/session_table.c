/*
 * session_table.c: the engine's index of open sessions by id (engine thread only).
 *
 * Commands name their session by id, never by pointer, and look it up when they run: a
 * command queued behind the close of its session then finds nothing and is answered
 * GRAFT_ECLOSED, instead of reading a freed session (or, since KV sequence ids are reused,
 * another session's KV). Ids are never reused, so a stale id can never find a newer session.
 *
 * Layout: open addressing with linear probing over a power-of-two array sized at engine
 * creation for every session that can be open at once (max_sessions, plus the probe's
 * throwaway sequence never enters it) at a load of at most one half; removal shifts the
 * following entries back (no tombstones), so lookups stay short. Nothing allocates after
 * creation.
 */
#include "engine/engine.h"

static size_t slot_of(const graft_engine *e, uint64_t id)
{
    /* Fibonacci hashing: ids are consecutive, the multiply spreads them. */
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (e->id_cap - 1);
}

int graft__sessions_init(graft_engine *e)
{
    size_t cap = 4;
    while (cap < 2 * ((size_t)e->opts.max_sessions + 1))
        cap *= 2;
    e->by_id = graft__calloc(cap, sizeof *e->by_id);
    e->id_cap = cap;
    return e->by_id != NULL ? GRAFT_OK : GRAFT_ENOMEM;
}

void graft__sessions_free(graft_engine *e)
{
    graft__free(e->by_id);
}

void graft__sessions_put(graft_engine *e, graft_session *s)
{
    size_t i = slot_of(e, s->id);
    while (e->by_id[i] != NULL)
        i = (i + 1) & (e->id_cap - 1);
    e->by_id[i] = s;
}

graft_session *graft__sessions_find(const graft_engine *e, uint64_t id)
{
    for (size_t i = slot_of(e, id);; i = (i + 1) & (e->id_cap - 1)) {
        graft_session *s = e->by_id[i];
        if (s == NULL || s->id == id)
            return s;
    }
}

void graft__sessions_remove(graft_engine *e, const graft_session *s)
{
    const size_t mask = e->id_cap - 1;
    size_t hole = slot_of(e, s->id);
    while (e->by_id[hole] != s)
        hole = (hole + 1) & mask;
    e->by_id[hole] = NULL;
    /* Moves back every later entry of the run whose home slot does not lie in (hole, i]. */
    for (size_t i = (hole + 1) & mask; e->by_id[i] != NULL; i = (i + 1) & mask) {
        size_t home = slot_of(e, e->by_id[i]->id);
        bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            e->by_id[hole] = e->by_id[i];
            e->by_id[i] = NULL;
            hole = i;
        }
    }
}
