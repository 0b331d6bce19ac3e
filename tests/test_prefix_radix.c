/*
 * test_prefix_radix.c: the prefix cache's index (src/prefix/radix.c) against a brute-force
 * model: random inserts and removals over a small alphabet (so keys share prefixes, split
 * edges and merge back), each followed by the structural check, exact gets, and matches
 * whose (value, shared length) lists must equal a brute-force scan in non-increasing order.
 * Allocation failures in insert leave the tree unchanged; a merge that cannot allocate
 * leaves a correct, less compact tree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "prefix/prefix.h"

enum { KEYS = 48, MAX_LEN = 12, ALPHABET = 3, OPS = 1500 };

typedef struct key {
    int32_t tokens[MAX_LEN];
    size_t n;
    bool present;
    graft__radix_node *node;
} key;

typedef struct seen {
    void *value[KEYS];
    size_t lcp[KEYS];
    int n;
} seen;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}

static void record(void *value, size_t lcp, void *user)
{
    seen *s = user;
    assert_true(s->n < KEYS);
    s->value[s->n] = value;
    s->lcp[s->n] = lcp;
    s->n++;
}

static size_t shared(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

/* The match of query equals the brute force: every present key sharing >= 1 token, once,
 * with its shared length, in non-increasing order. */
static void check_match(graft__radix *t, key *keys, const int32_t *query, size_t n)
{
    seen s = {.n = 0};
    graft__radix_match(t, query, n, record, &s);
    int expected = 0;
    for (int i = 0; i < KEYS; i++) {
        if (!keys[i].present)
            continue;
        size_t lcp = shared(keys[i].tokens, keys[i].n, query, n);
        if (lcp == 0)
            continue;
        expected++;
        int found = 0;
        for (int j = 0; j < s.n; j++)
            if (s.value[j] == &keys[i]) {
                found++;
                assert_int_equal(s.lcp[j], lcp);
            }
        assert_int_equal(found, 1);
    }
    assert_int_equal(s.n, expected);
    for (int j = 1; j < s.n; j++)
        assert_true(s.lcp[j - 1] >= s.lcp[j]);
}

static void check_tree(graft__radix *t, key *keys, bool compact)
{
    assert_true(graft__radix_check(t, compact));
    size_t present = 0;
    for (int i = 0; i < KEYS; i++) {
        void *v = graft__radix_get(t, keys[i].tokens, keys[i].n);
        if (keys[i].present) {
            present++;
            assert_ptr_equal(v, &keys[i]);
        } else {
            /* another key may have the same tokens */
            assert_true(v == NULL || ((key *)v)->present);
        }
    }
    assert_int_equal(graft__radix_values(t), present);
    if (compact)
        assert_true(graft__radix_nodes(t) <= 2 * present + 1);
}

static void random_key(key *k)
{
    k->n = 1 + rnd(MAX_LEN);
    for (size_t i = 0; i < k->n; i++)
        k->tokens[i] = (int32_t)rnd(ALPHABET);
}

/* The key present with the same tokens, or NULL. */
static key *twin(key *keys, const key *k)
{
    for (int i = 0; i < KEYS; i++)
        if (keys[i].present && &keys[i] != k && keys[i].n == k->n &&
            memcmp(keys[i].tokens, k->tokens, k->n * sizeof(int32_t)) == 0)
            return &keys[i];
    return NULL;
}

static void insert_key(graft__radix *t, key *keys, key *k)
{
    void *existing = NULL;
    graft__radix_node *node = NULL;
    assert_int_equal(graft__radix_insert(t, k->tokens, k->n, k, &node, &existing), GRAFT_OK);
    key *other = twin(keys, k);
    assert_ptr_equal(existing, other);
    if (other == NULL) {
        k->present = true;
        k->node = node;
    }
}

static void test_random_against_brute_force(void **state)
{
    (void)state;
    graft__radix *t = NULL;
    assert_int_equal(graft__radix_create(&t), GRAFT_OK);
    key *keys = calloc(KEYS, sizeof *keys);
    for (int op = 0; op < OPS; op++) {
        key *k = &keys[rnd(KEYS)];
        if (k->present) {
            graft__radix_remove(t, k->node);
            k->present = false;
        } else {
            random_key(k);
            insert_key(t, keys, k);
        }
        check_tree(t, keys, true);
        int32_t query[MAX_LEN + 2];
        size_t n = rnd(MAX_LEN + 3);
        for (size_t i = 0; i < n; i++)
            query[i] = (int32_t)rnd(ALPHABET);
        check_match(t, keys, query, n);
        if (k->present)
            check_match(t, keys, k->tokens, k->n);
    }
    graft__radix_free(t);
    free(keys);
}

static void test_splits_and_merges(void **state)
{
    (void)state;
    graft__radix *t = NULL;
    assert_int_equal(graft__radix_create(&t), GRAFT_OK);
    key keys[KEYS];
    memset(keys, 0, sizeof keys);
    const int32_t a[6] = {1, 2, 3, 4, 5, 6};
    /* abcdef, then abc (split: key ends mid-edge), then abx (split: diverges mid-edge) */
    memcpy(keys[0].tokens, a, sizeof a);
    keys[0].n = 6;
    memcpy(keys[1].tokens, a, 3 * sizeof(int32_t));
    keys[1].n = 3;
    memcpy(keys[2].tokens, a, 2 * sizeof(int32_t));
    keys[2].tokens[2] = 9;
    keys[2].n = 3;
    for (int i = 0; i < 3; i++) {
        insert_key(t, keys, &keys[i]);
        check_tree(t, keys, true);
    }
    assert_int_equal(graft__radix_nodes(t), 5); /* root, ab, c, def, x */
    int32_t q[4] = {1, 2, 3, 7};
    check_match(t, keys, q, 4);
    /* removing abc merges "c" and "def" back; removing abx merges "ab" and "cdef" */
    graft__radix_remove(t, keys[1].node);
    keys[1].present = false;
    check_tree(t, keys, true);
    assert_int_equal(graft__radix_nodes(t), 4);
    graft__radix_remove(t, keys[2].node);
    keys[2].present = false;
    check_tree(t, keys, true);
    assert_int_equal(graft__radix_nodes(t), 2);
    graft__radix_remove(t, keys[0].node);
    keys[0].present = false;
    check_tree(t, keys, true);
    assert_int_equal(graft__radix_nodes(t), 1);
    assert_null(graft__radix_get(t, a, 6));
    graft__radix_free(t);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    graft__radix *t = NULL;
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = graft__radix_create(&t);
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK)
            break;
        assert_int_equal(rc, GRAFT_ENOMEM);
    }
    key keys[KEYS];
    memset(keys, 0, sizeof keys);
    for (int i = 0; i < KEYS; i++)
        random_key(&keys[i]);
    /* every insert, under every single failure it can meet */
    for (int i = 0; i < KEYS; i++) {
        for (long n = 0;; n++) {
            size_t nodes = graft__radix_nodes(t);
            long live = graft__alloc_live();
            void *existing = NULL;
            graft__radix_node *node = NULL;
            graft__alloc_fail_after(n, false);
            int rc = graft__radix_insert(t, keys[i].tokens, keys[i].n, &keys[i], &node, &existing);
            graft__alloc_fail_after(-1, false);
            if (rc == GRAFT_OK) {
                key *other = twin(keys, &keys[i]);
                assert_ptr_equal(existing, other);
                if (other == NULL) {
                    keys[i].present = true;
                    keys[i].node = node;
                }
                break;
            }
            assert_int_equal(rc, GRAFT_ENOMEM);
            assert_int_equal(graft__radix_nodes(t), nodes);
            assert_int_equal(graft__alloc_live(), live);
            check_tree(t, keys, true);
        }
        check_tree(t, keys, true);
    }
    /* removals whose merges fail: the tree stays correct, if less compact */
    for (int i = 0; i < KEYS; i++) {
        if (!keys[i].present)
            continue;
        graft__alloc_fail_after(0, true);
        graft__radix_remove(t, keys[i].node);
        graft__alloc_fail_after(-1, false);
        keys[i].present = false;
        check_tree(t, keys, false);
        int32_t query[MAX_LEN];
        for (size_t k = 0; k < MAX_LEN; k++)
            query[k] = (int32_t)rnd(ALPHABET);
        check_match(t, keys, query, MAX_LEN);
    }
    assert_int_equal(graft__radix_values(t), 0);
    assert_int_equal(graft__radix_nodes(t), 1);
    graft__radix_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splits_and_merges),
        cmocka_unit_test(test_random_against_brute_force),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
