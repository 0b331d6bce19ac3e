/*
 * test_template_oracle.c: every real chat template × every conversation of the corpus,
 * rendered by graft and by Python's jinja2, compared byte for byte.
 *
 * The templates are the .jinja files of $GRAFT_TEMPLATES_DIR (../shared/templates, never
 * copied here); the conversations are the JSON files of tests/template_corpus.
 * tests/template_oracle.py runs once under Debian's /usr/bin/python3 with python3-jinja2, set up as Hugging Face sets it
 * up, and writes each pair's text or error; this test then renders each pair in process
 * with graft_template_render (so ASan sees it) with the same fixed strftime_now time, and
 * requires: the same bytes where jinja2 renders, an error where jinja2 raises, and for
 * raise_exception the same message. It prints a line per template and the total
 * ("20 templates × 24 conversations: ..."), and fails on any difference. A missing
 * interpreter, jinja2 or template folder fails the test: it never passes without the oracle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "graft.h"
#include "util/util.h"

#define ORACLE_PYTHON "/usr/bin/python3"
#define FIXED_NOW "1767225600" /* 2026-01-01 00:00:00 UTC */
#define MAX_FILES 256

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir ending in ext, sorted; returns the count. */
static int list_dir(const char *dir, const char *ext, char **names)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        fail_msg("cannot open the folder %s", dir);
    int n = 0;
    struct dirent *e;
    size_t el = strlen(ext);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > el && strcmp(e->d_name + len - el, ext) == 0 && n < MAX_FILES)
            names[n++] = strndup(e->d_name, len - el);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    return n;
}

static const char *templates_dir(char *buf, size_t cap)
{
    const char *dir = getenv("GRAFT_TEMPLATES_DIR");
    if (dir && dir[0])
        return dir;
    snprintf(buf, cap, "%s/../templates", graft_test_models_dir());
    return buf;
}

/* Appends ' s' (single-quoted for the shell) to cmd. */
static void add_arg(char *cmd, size_t cap, const char *s)
{
    size_t k = strlen(cmd);
    k += (size_t)snprintf(cmd + k, cap - k, " '");
    for (; *s && k + 8 < cap; s++) {
        if (*s == '\'')
            k += (size_t)snprintf(cmd + k, cap - k, "'\\''");
        else
            cmd[k++] = *s;
    }
    snprintf(cmd + k, cap - k, "'");
}

typedef struct counts {
    int identical, raised_both, raise_messages_equal, differing;
} counts;

/* Compares graft's result for one pair with the oracle's; returns false (after printing)
 * on a difference. */
static bool compare_pair(const char *tname, const char *iname, const char *expect_base,
                         const graft_template *tmpl, const char *parse_err, counts *c)
{
    char path[4200], input_path[4096];
    const char *src = graft_test_env("GRAFT_SOURCE_DIR");
    snprintf(input_path, sizeof input_path, "%s/tests/template_corpus/%s.json", src, iname);
    size_t input_len;
    char *input = graft__read_file(input_path, &input_len);
    assert_non_null(input);
    char *out = NULL, *err = NULL;
    size_t out_len = 0;
    graft_template_options opts = {0};
    opts.now = atoll(FIXED_NOW);
    int rc = tmpl ? graft_template_render(tmpl, input, input_len, &opts, &out, &out_len, &err)
                  : GRAFT_EFORMAT;
    const char *why = tmpl ? err : parse_err;
    free(input);
    bool ok = true;
    snprintf(path, sizeof path, "%s.out", expect_base);
    size_t want_len;
    char *want = graft__read_file(path, &want_len);
    if (want != NULL) {
        if (rc != GRAFT_OK) {
            printf("DIFFER %s × %s: jinja2 renders, graft fails: %s\n", tname, iname,
                   why ? why : graft_status_str(rc));
            ok = false;
        } else if (want_len != out_len || memcmp(want, out, out_len) != 0) {
            size_t k = 0;
            while (k < want_len && k < out_len && want[k] == out[k])
                k++;
            printf("DIFFER %s × %s: first difference at byte %zu\n  jinja2: %.80s\n  graft:  "
                   "%.80s\n", tname, iname, k, want + k, out + k);
            ok = false;
        } else {
            c->identical++;
        }
    } else {
        snprintf(path, sizeof path, "%s.err", expect_base);
        want = graft__read_file(path, &want_len);
        if (want == NULL)
            fail_msg("the oracle wrote nothing for %s × %s", tname, iname);
        if (rc == GRAFT_OK) {
            printf("DIFFER %s × %s: jinja2 raises (%s), graft renders\n", tname, iname,
                   strchr(want, '\n') + 1);
            ok = false;
        } else if (strncmp(want, "raise\n", 6) == 0) {
            /* graft: "line L, column C: <message>" */
            const char *msg = why ? strstr(why, ": ") : NULL;
            if (msg == NULL || strcmp(msg + 2, want + 6) != 0) {
                printf("DIFFER %s × %s: raise_exception('%s'), graft says '%s'\n", tname, iname,
                       want + 6, why ? why : "");
                ok = false;
            } else {
                c->raised_both++;
                c->raise_messages_equal++;
            }
        } else {
            c->raised_both++;
        }
    }
    if (!ok)
        c->differing++;
    free(want);
    graft_free(out);
    graft_free(err);
    return ok;
}

static void test_oracle_corpus(void **state)
{
    (void)state;
    const char *src = graft_test_env("GRAFT_SOURCE_DIR");
    const char *tmp = graft_test_env("GRAFT_TEST_TMP");
    if (access(ORACLE_PYTHON, X_OK) != 0)
        fail_msg("the oracle needs Debian's %s with python3-jinja2 (tools/install-deps.sh)",
                 ORACLE_PYTHON);
    char tdir_buf[1024], corpus[1024], out_dir[1024];
    const char *tdir = templates_dir(tdir_buf, sizeof tdir_buf);
    snprintf(corpus, sizeof corpus, "%s/tests/template_corpus", src);
    snprintf(out_dir, sizeof out_dir, "%s/template-oracle-%ld", tmp, (long)getpid());
    char *tnames[MAX_FILES], *inames[MAX_FILES];
    int nt = list_dir(tdir, ".jinja", tnames), ni = list_dir(corpus, ".json", inames);
    if (nt == 0 || ni == 0)
        fail_msg("no templates in %s or no conversations in %s", tdir, corpus);

    size_t cap = 1 << 16;
    char *cmd = calloc(cap, 1);
    assert_non_null(cmd);
    char script[4096], path[4096];
    snprintf(script, sizeof script, "%s/tests/template_oracle.py", src);
    snprintf(cmd, cap, "%s", ORACLE_PYTHON);
    add_arg(cmd, cap, script);
    add_arg(cmd, cap, "--now");
    add_arg(cmd, cap, FIXED_NOW);
    add_arg(cmd, cap, out_dir);
    for (int i = 0; i < nt; i++) {
        snprintf(path, sizeof path, "%s/%s.jinja", tdir, tnames[i]);
        add_arg(cmd, cap, path);
    }
    add_arg(cmd, cap, "--");
    for (int i = 0; i < ni; i++) {
        snprintf(path, sizeof path, "%s/%s.json", corpus, inames[i]);
        add_arg(cmd, cap, path);
    }
    int status = system(cmd);
    free(cmd);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the oracle (%s tests/template_oracle.py) failed with status %d%s",
                 ORACLE_PYTHON, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 WIFEXITED(status) && WEXITSTATUS(status) == 3 ? ": jinja2 is missing" : "");

    counts total = {0};
    for (int t = 0; t < nt; t++) {
        snprintf(path, sizeof path, "%s/%s.jinja", tdir, tnames[t]);
        size_t len;
        char *text = graft__read_file(path, &len);
        assert_non_null(text);
        graft_template *tmpl = NULL;
        char *parse_err = NULL;
        if (graft_template_parse(text, len, &tmpl, &parse_err) != GRAFT_OK)
            printf("%s: graft cannot parse it: %s\n", tnames[t], parse_err);
        counts c = {0};
        for (int i = 0; i < ni; i++) {
            char base[4096];
            snprintf(base, sizeof base, "%s/%s__%s", out_dir, tnames[t], inames[i]);
            compare_pair(tnames[t], inames[i], base, tmpl, parse_err, &c);
        }
        printf("%-52s %2d identical, %2d raised by both, %d differing\n", tnames[t],
               c.identical, c.raised_both, c.differing);
        total.identical += c.identical;
        total.raised_both += c.raised_both;
        total.raise_messages_equal += c.raise_messages_equal;
        total.differing += c.differing;
        graft_template_free(tmpl);
        graft_free(parse_err);
        free(text);
    }
    printf("%d templates × %d conversations: %d identical, %d raised by both (%d of them "
           "raise_exception with the same message), %d differing\n",
           nt, ni, total.identical, total.raised_both, total.raise_messages_equal,
           total.differing);
    for (int i = 0; i < nt; i++)
        free(tnames[i]);
    for (int i = 0; i < ni; i++)
        free(inames[i]);
    assert_int_equal(total.differing, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
