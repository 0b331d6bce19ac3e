/*
 * test_engine_session_file.c: graft_session_save and graft_session_load.
 *
 * The oracle is the saved session itself, on its own engine: the loaded session, on a new
 * engine of the same model, must hold the same tokens, give the same next-token logits
 * (memcmp, through the probe hook) and the same greedy continuation, and keep the same
 * clonable boundaries (on a sliding-window model, whose file leaves out the rows the window
 * dropped). Runs on stories260K and a tiny synthetic gemma3 whose window is shorter than
 * the prompt.
 *
 * Refusals: a session that is not empty, a missing file, one that is not a session file,
 * one cut short, one with a byte changed (its checksum), one written for another model
 * (stories260K's F16 copy), another kernel set, another KV type, more positions than the
 * engine's sessions hold, and a file that cannot be created; each leaves the session empty
 * and usable. Allocation failures during a load are refused with GRAFT_ENOMEM, leak nothing
 * and leave the session empty.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "fixtures.h"
#include "gguf/gguf.h"
#include "graft.h"
#include "models.h"

#define CTX 256
#define N_PROMPT 150

static graft_model *stories, *stories_f16, *gemma;

static int setup(void **state)
{
    (void)state;
    stories = graft_test_load_model(GRAFT_TEST_STORIES);
    stories_f16 = graft_test_load_model(GRAFT_TEST_STORIES_F16);
    gemma = graft_test_synth_model("gemma3", "tiny", GRAFT_TYPE_F32, 11, "session-file-gemma.gguf");
    return stories && stories_f16 && gemma ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    graft_model_free(stories);
    graft_model_free(stories_f16);
    graft_model_free(gemma);
    return 0;
}

static char *file_path(const char *name)
{
    static char path[1024];
    return graft_test_tmp_path(path, sizeof path, name);
}

/* A session of e that has computed a random prompt of n tokens (and one greedy token). */
static graft_session *computed(graft_engine *e, const graft_model *m, int32_t n)
{
    graft_model_info info;
    graft_model_get_info(m, &info);
    int32_t prompt[CTX];
    for (int32_t i = 0; i < n; i++)
        prompt[i] = 1 + (int32_t)((i * 7919u + 13u) % (uint32_t)(info.n_vocab - 1));
    graft_session *s = graft_test_open_session(e);
    assert_int_equal(graft_test_run(s, prompt, n, 1), GRAFT_OK);
    return s;
}

/* The session's next-token logits (n_vocab, to free). */
static float *probe(graft_session *s, int32_t n_vocab)
{
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int32_t tokens[CTX], n = 0;
    assert_non_null(logits);
    assert_int_equal(graft__session_probe(s, logits, tokens, &n), GRAFT_OK);
    return logits;
}

/* The greedy continuation of s after one more token: max_new tokens (to free). */
static int32_t *continuation(graft_session *s, int32_t max_new)
{
    graft_generate_config c = graft_test_greedy(max_new);
    graft_generation *gen = NULL;
    const int32_t next = 5;
    assert_int_equal(graft_session_generate(s, &next, 1, &c, NULL, NULL, NULL, &gen), GRAFT_OK);
    assert_int_equal(graft_generation_wait(gen), GRAFT_OK);
    size_t n = 0;
    const int32_t *out = graft_generation_tokens(gen, &n);
    assert_int_equal(n, (size_t)max_new);
    int32_t *copy = malloc((size_t)max_new * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, out, n * sizeof *copy);
    graft_generation_free(gen);
    return copy;
}

static void expect_same_tokens(graft_session *a, graft_session *b)
{
    int32_t *ta = NULL, *tb = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(graft_session_tokens(a, &ta, &na), GRAFT_OK);
    assert_int_equal(graft_session_tokens(b, &tb, &nb), GRAFT_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na * sizeof *ta);
    graft_free(ta);
    graft_free(tb);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Saved on one engine, loaded on another: the same tokens, logits, continuation and
 * clonable boundaries. */
static void round_trip(const graft_model *m, const char *name, bool window_dropped)
{
    graft_model_info info;
    graft_model_get_info(m, &info);
    graft_engine_options o = graft_test_engine_options(4, CTX);
    graft_engine *ea = graft_test_engine(m, &o), *eb = graft_test_engine(m, &o);
    graft_session *a = computed(ea, m, N_PROMPT);
    char *err = NULL;
    assert_int_equal(graft_session_save(a, file_path(name), &err), GRAFT_OK);
    assert_null(err);
    /* every layer's rows, or fewer where the window dropped some: the header (64 bytes),
     * the tokens, the rows, the checksum */
    graft_engine_config config;
    graft_engine_get_config(ea, &config);
    size_t size = 0, n = (size_t)graft_session_position(a);
    free(graft_test_read_file(file_path(name), &size));
    size_t all_rows = 64 + n * 4 + n * (size_t)config.kv_bytes_per_position + 8;
    if (window_dropped)
        assert_true(size < all_rows);
    else
        assert_int_equal(size, all_rows);
    graft_session *b = graft_test_open_session(eb);
    if (graft_session_load(b, file_path(name), &err) != GRAFT_OK)
        fail_msg("%s", err);
    assert_int_equal(graft_session_position(b), graft_session_position(a));
    expect_same_tokens(a, b);
    float *la = probe(a, info.n_vocab), *lb = probe(b, info.n_vocab);
    assert_memory_equal(la, lb, (size_t)info.n_vocab * sizeof *la);
    for (int32_t upto = graft_session_position(a); upto >= 0; upto -= 7) {
        int32_t ra = -1, rb = -1;
        assert_int_equal(graft_session_retained_boundary(a, upto, &ra), GRAFT_OK);
        assert_int_equal(graft_session_retained_boundary(b, upto, &rb), GRAFT_OK);
        assert_int_equal(ra, rb);
    }
    int32_t *ca = continuation(a, 24), *cb = continuation(b, 24);
    assert_memory_equal(ca, cb, 24 * sizeof *ca);
    free(ca);
    free(cb);
    free(la);
    free(lb);
    graft_session_close(a);
    graft_session_close(b);
    graft_test_engine_end(ea);
    graft_test_engine_end(eb);
    unlink(file_path(name));
}

static void test_round_trip(void **state)
{
    (void)state;
    round_trip(stories, "session-stories.kv", false);
}

/* gemma3 tiny's window is shorter than the prompt: the file leaves the dropped rows out and
 * the loaded session retains what the saved one did. */
static void test_round_trip_sliding_window(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(gemma, &info);
    assert_true(info.sliding_window > 0 && info.sliding_window < N_PROMPT - 32);
    round_trip(gemma, "session-gemma.kv", true);
}

/* A failed load leaves s empty and usable: a prompt runs on it. */
static void expect_refused(graft_session *s, const char *path, int status, const char *words)
{
    char *err = NULL;
    int rc = graft_session_load(s, path, &err);
    if (rc != status || err == NULL || strstr(err, words) == NULL)
        fail_msg("load %s: %d (%s), expected %d saying '%s'", path, rc, err ? err : "(none)",
                 status, words);
    graft_free(err);
    assert_int_equal(graft_session_position(s), 0);
}

static void test_refusals(void **state)
{
    (void)state;
    graft_engine_options o = graft_test_engine_options(4, CTX);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *a = computed(e, stories, 40);
    const char *good = "session-good.kv";
    char path[1024];
    snprintf(path, sizeof path, "%s", file_path(good));
    assert_int_equal(graft_session_save(a, path, NULL), GRAFT_OK);

    /* a session that is not empty */
    char *err = NULL;
    assert_int_equal(graft_session_load(a, path, &err), GRAFT_EINVAL);
    assert_non_null(strstr(err, "not empty"));
    graft_free(err);

    graft_session *s = graft_test_open_session(e);
    expect_refused(s, file_path("session-missing.kv"), GRAFT_EIO, "session-missing.kv");
    write_bytes(file_path("session-junk.kv"), "hello, world", 12);
    expect_refused(s, file_path("session-junk.kv"), GRAFT_EFORMAT, "not a graft session file");
    size_t n = 0;
    unsigned char *bytes = graft_test_read_file(path, &n);
    write_bytes(file_path("session-short.kv"), bytes, n - 10);
    expect_refused(s, file_path("session-short.kv"), GRAFT_EFORMAT, "header describes");
    bytes[n - 100] ^= 0x40; /* a K or V byte of the last position */
    write_bytes(file_path("session-changed.kv"), bytes, n);
    expect_refused(s, file_path("session-changed.kv"), GRAFT_EFORMAT, "checksum");
    free(bytes);
    /* the refusals left s usable */
    int32_t one = 5;
    assert_int_equal(graft_test_run(s, &one, 1, 1), GRAFT_OK);
    graft_session_close(s);

    /* another model, kernel set, KV type, context */
    graft_engine *other = graft_test_engine(stories_f16, &o);
    s = graft_test_open_session(other);
    expect_refused(s, path, GRAFT_EUNSUPPORTED, "another model");
    graft_session_close(s);
    graft_test_engine_end(other);
    graft_engine_options scalar = o;
    scalar.kernels = "scalar";
    graft_engine *es = graft_test_engine(stories, &scalar);
    graft_engine_config config;
    graft_engine_get_config(e, &config);
    if (strcmp(config.options.kernels, "scalar") != 0) {
        s = graft_test_open_session(es);
        expect_refused(s, path, GRAFT_EUNSUPPORTED, "kernels");
        graft_session_close(s);
    }
    graft_test_engine_end(es);
    graft_engine_options f32 = o;
    f32.kv_f32 = 1;
    graft_engine *ef = graft_test_engine(stories, &f32);
    s = graft_test_open_session(ef);
    expect_refused(s, path, GRAFT_EUNSUPPORTED, "KV type");
    graft_session_close(s);
    graft_test_engine_end(ef);
    graft_engine_options small = graft_test_engine_options(4, 32);
    graft_engine *eshort = graft_test_engine(stories, &small);
    s = graft_test_open_session(eshort);
    expect_refused(s, path, GRAFT_ERANGE, "positions");
    graft_session_close(s);
    graft_test_engine_end(eshort);

    /* a file that cannot be created */
    assert_int_equal(graft_session_save(a, file_path("no-such-dir/x.kv"), &err), GRAFT_EIO);
    assert_non_null(strstr(err, "no-such-dir"));
    graft_free(err);
    graft_session_close(a);
    graft_test_engine_end(e);
    unlink(path);
    unlink(file_path("session-junk.kv"));
    unlink(file_path("session-short.kv"));
    unlink(file_path("session-changed.kv"));
}

/* Every allocation a load makes may fail: GRAFT_ENOMEM, nothing leaked, the session empty;
 * then the load that succeeds gives the saved logits. */
static void test_allocation_failures(void **state)
{
    (void)state;
    graft_model_info info;
    graft_model_get_info(stories, &info);
    graft_engine_options o = graft_test_engine_options(4, CTX);
    graft_engine *e = graft_test_engine(stories, &o);
    graft_session *a = computed(e, stories, 100);
    assert_int_equal(graft_session_save(a, file_path("session-oom.kv"), NULL), GRAFT_OK);
    float *want = probe(a, info.n_vocab);
    graft_session *s = graft_test_open_session(e);
    graft_test_metrics(e);
    long base = graft__alloc_live();
    for (long n = 0;; n++) {
        graft__alloc_fail_after(n, false);
        int rc = graft_session_load(s, file_path("session-oom.kv"), NULL);
        long failures = graft__alloc_failures();
        graft__alloc_fail_after(-1, false);
        if (rc == GRAFT_OK) {
            assert_int_equal(failures, 0);
            break;
        }
        assert_int_equal(rc, GRAFT_ENOMEM);
        assert_int_equal(graft_session_position(s), 0);
        graft_test_metrics(e);
        assert_int_equal(graft__alloc_live(), base);
    }
    float *got = probe(s, info.n_vocab);
    assert_memory_equal(got, want, (size_t)info.n_vocab * sizeof *got);
    free(got);
    free(want);
    graft_session_close(s);
    graft_session_close(a);
    graft_test_engine_end(e);
    unlink(file_path("session-oom.kv"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_sliding_window),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
