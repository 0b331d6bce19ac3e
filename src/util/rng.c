/*
 * rng.c: the one pseudo-random generator graft uses: xoshiro256** seeded through
 * splitmix64. Deterministic for a seed on every machine; each user owns its state (a
 * sampler per generation, a stream per synthetic tensor), so no result depends on what
 * else draws numbers at the same time.
 */
#include "util/util.h"

uint64_t graft__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void graft__rng_seed(graft__rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = graft__splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t graft__rng_next(graft__rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double graft__rng_unit(graft__rng *r)
{
    return (double)(graft__rng_next(r) >> 11) * 0x1.0p-53;
}
