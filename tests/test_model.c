/*
 * test_model.c: model loading refuses inconsistent or unsupported files with a precise message.
 *
 * Each case copies stories260K.gguf through the GGUF writer with one change (a key replaced
 * or removed, a tensor dropped, reshaped or retyped) and checks the status and the message.
 * Allocation failures during loading are injected at every allocation point.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "models.h"

typedef enum edit_kind { SET_U32, SET_STR, DROP_KEY, DROP_TENSOR, RESHAPE, RETYPE } edit_kind;

typedef struct edit {
    edit_kind kind;
    const char *name; /* key or tensor */
    uint32_t u32;     /* SET_U32 value; RETYPE type */
    const char *str;  /* SET_STR value */
    uint64_t ne1;     /* RESHAPE: new ne[1] */
} edit;

static graft__gguf *open_stories(void)
{
    char path[512];
    graft_test_model_path(path, sizeof path, GRAFT_TEST_STORIES);
    graft__gguf *g = NULL;
    assert_int_equal(graft__gguf_open(path, &g, NULL), GRAFT_OK);
    return g;
}

static void copy_kvs(graft__gguf_writer *w, const graft__gguf *src, const edit *e)
{
    for (uint64_t i = 0; i < graft__gguf_n_kv(src); i++) {
        const graft__gguf_kv *kv = graft__gguf_kv_at(src, i);
        if (e->kind <= DROP_KEY && graft__gguf_str_eq(kv->key, e->name))
            continue;
        assert_int_equal(graft__gguf_writer_copy_kv(w, kv), GRAFT_OK);
    }
    if (e->kind == SET_U32)
        assert_int_equal(graft__gguf_writer_set_u32(w, e->name, e->u32), GRAFT_OK);
    if (e->kind == SET_STR)
        assert_int_equal(graft__gguf_writer_set_str(w, e->name, e->str), GRAFT_OK);
}

static void copy_tensors(graft__gguf_writer *w, const graft__gguf *src, const edit *e)
{
    for (uint64_t i = 0; i < graft__gguf_n_tensors(src); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(src, i);
        bool target = e->kind >= DROP_TENSOR && graft__gguf_str_eq(t->name, e->name);
        if (target && e->kind == DROP_TENSOR)
            continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        uint64_t ne[GRAFT_GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        uint32_t type = t->type;
        if (target && e->kind == RESHAPE)
            ne[1] = e->ne1;
        if (target && e->kind == RETYPE)
            type = e->u32;
        assert_int_equal(graft__gguf_writer_add_tensor(w, name, type, t->n_dims, ne, t->data,
                                                       NULL, NULL),
                         GRAFT_OK);
    }
}

/* Writes stories260K with the edit applied, loads it, and checks status and message. */
static void expect_refusal(const edit *e, int status, const char *needle)
{
    graft__gguf *src = open_stories();
    graft__gguf_writer *w = graft__gguf_writer_create(3, GRAFT_GGUF_DEFAULT_ALIGNMENT);
    assert_non_null(w);
    copy_kvs(w, src, e);
    copy_tensors(w, src, e);
    char path[512];
    snprintf(path, sizeof path, "%s/test_model_%s.gguf", graft_test_tmp_dir(), e->name);
    assert_int_equal(graft__gguf_writer_write_file(w, path, NULL), GRAFT_OK);
    graft__gguf_writer_free(w);
    graft__gguf_close(src);

    graft_model *m = NULL;
    char *err = NULL;
    int rc = graft_model_load(path, &m, &err);
    assert_null(m);
    assert_non_null(err);
    if (rc != status || strstr(err, needle) == NULL)
        fail_msg("edit of '%s': got %d '%s', want %d containing '%s'", e->name, rc, err, status,
                 needle);
    graft_free(err);
    remove(path);
}

/* Every edit is refused with its status and a message containing its words. */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        edit e;
        int status;
        const char *words;
    } cases[] = {
        {{DROP_KEY, "general.architecture", 0, NULL, 0}, GRAFT_EFORMAT,
         "'general.architecture' is missing"},
        {{SET_STR, "general.architecture", 0, "mamba", 0}, GRAFT_EUNSUPPORTED,
         "architecture 'mamba' is not supported"},
        {{DROP_KEY, "llama.block_count", 0, NULL, 0}, GRAFT_EFORMAT,
         "'llama.block_count' is missing"},
        {{SET_STR, "llama.embedding_length", 0, "64", 0}, GRAFT_EFORMAT,
         "'llama.embedding_length' must be an integer"},
        {{SET_U32, "llama.attention.head_count_kv", 3, NULL, 0}, GRAFT_EFORMAT,
         "head_count 8 is not a multiple of head_count_kv 3"},
        {{SET_U32, "llama.rope.dimension_count", 7, NULL, 0}, GRAFT_EFORMAT,
         "rope.dimension_count 7 must be even"},
        {{SET_U32, "llama.embedding_length", 0, NULL, 0}, GRAFT_EFORMAT,
         "embedding_length is 0, must be positive"},
        {{DROP_TENSOR, "blk.2.ffn_up.weight", 0, NULL, 0}, GRAFT_EFORMAT,
         "tensor 'blk.2.ffn_up.weight' is missing"},
        {{RESHAPE, "blk.0.attn_k.weight", 0, NULL, 16}, GRAFT_EFORMAT,
         "tensor 'blk.0.attn_k.weight' has shape [64, 16]"},
        {{RETYPE, "blk.1.attn_q.weight", GRAFT_TYPE_Q8_1, NULL, 0}, GRAFT_EUNSUPPORTED,
         "has type Q8_1, which graft does not compute with"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_refusal(&cases[i].e, cases[i].status, cases[i].words);
}

static void test_not_gguf(void **state)
{
    (void)state;
    graft_model *m = NULL;
    char *err = NULL;
    assert_int_equal(graft_model_load("/nonexistent/model.gguf", &m, &err), GRAFT_EIO);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    graft_free(err);
}

/* A failed graft_context_eval or _eval_batch says why (graft_context_errmsg); a successful
 * one clears the message. Each case runs on a context of 4 positions, sequence 0 empty. */
static void test_eval_errmsg(void **state)
{
    (void)state;
    graft_model *m = graft_test_load_model(GRAFT_TEST_STORIES);
    assert_non_null(m);
    graft_context *ctx = graft_test_cold_context(m, 4);
    assert_non_null(ctx);
    assert_null(graft_context_errmsg(ctx));
    static const struct {
        int32_t tokens[5];
        size_t n;
        int32_t seq; /* -1: graft_context_eval, else a batch of one token of this sequence */
        int status;
        const char *says; /* NULL: no message */
    } cases[] = {
        {{1, 2, 3, 4, 5}, 5, -1, GRAFT_ECAPACITY, "n_ctx 4"},
        {{512}, 1, -1, GRAFT_EINVAL, "token 512 is outside the vocabulary"},
        {{1}, 1, 1, GRAFT_EINVAL, "sequence is outside [0, 1)"},
        {{1, 2, 3, 4}, 4, -1, GRAFT_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const graft_batch_token one = {cases[i].seq, cases[i].tokens[0], 0};
        int rc = cases[i].seq < 0 ? graft_context_eval(ctx, cases[i].tokens, cases[i].n, NULL)
                                  : graft_context_eval_batch(ctx, &one, 1, NULL);
        assert_int_equal(rc, cases[i].status);
        const char *said = graft_context_errmsg(ctx);
        if (cases[i].says == NULL)
            assert_null(said);
        else if (said == NULL || strstr(said, cases[i].says) == NULL)
            fail_msg("case %zu: message '%s', expected one with '%s'", i, said ? said : "(none)",
                     cases[i].says);
    }
    assert_null(graft_context_errmsg(NULL));
    graft_context_free(ctx);
    graft_model_free(m);
}

/* Fails the n-th allocation of a load for every n until a load succeeds. */
static void test_allocation_failures(void **state)
{
    (void)state;
    char path[512];
    graft_test_model_path(path, sizeof path, GRAFT_TEST_STORIES);
    long before = graft__alloc_live();
    int n;
    for (n = 0; n < 100000; n++) {
        graft__alloc_fail_after(n, false);
        graft_model *m = NULL;
        char *err = NULL;
        int rc = graft_model_load(path, &m, &err);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        graft_free(err);
        if (failures == 0) {
            assert_int_equal(rc, GRAFT_OK);
            graft_model_free(m);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_null(m);
        assert_int_equal(graft__alloc_live(), before);
    }
    if (n == 100000)
        fail_msg("a load still met an injected failure after 100000 allocations");
    assert_true(n > 3);
    assert_int_equal(graft__alloc_live(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_errmsg),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_not_gguf),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
