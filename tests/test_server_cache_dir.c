/*
 * test_server_cache_dir.c: `graft serve --cache-dir`: the prefix cache kept across restarts
 * (real servers on stories260K, stopped with SIGTERM and started again on the same folder).
 *
 * The oracle is the first server's own answers, computed cold: after a restart the same
 * prompts are answered from the cache (source "cache", every prompt token but the last
 * reused) with the same text, bit for bit, because the KV read back is the KV computed.
 *
 * Checked: one file per snapshot no other snapshot extends; the restarted server reads
 * them (its log says how many) and reuses them; a server on another kernel set finds none
 * of them (its files sit beside them, and each server leaves the other's alone); a damaged
 * file is skipped with the reason in the log, and removed at the next stop; a folder that
 * cannot be made is a usage error naming it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "serve_client.h"

#define P1 "Once upon a time there was a little dog who"
#define P2 P1 " loved to run in the park. One day"
#define P3 "The sun was shining and the birds"

static char dir[1024];

static int setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    graft_test_tmp_path(dir, sizeof dir, "cache-dir-test");
    mkdir(dir, 0777);
    DIR *d = opendir(dir);
    for (struct dirent *de; d != NULL && (de = readdir(d)) != NULL;)
        if (de->d_name[0] != '.') {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            remove(path);
        }
    if (d != NULL)
        closedir(d);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    curl_global_cleanup();
    return 0;
}

static server start(const char *kernels)
{
    const char *args[] = {"--ctx", "256", "--cache-dir", dir, kernels ? "--kernels" : NULL,
                          kernels, NULL};
    return graft_test_start_server(args);
}

/* The greedy answer to prompt and where its prompt's KV came from. */
typedef struct answer {
    char *text;
    char source[16];
    long reused, prompt_tokens;
} answer;

static answer ask(const server *s, const char *prompt)
{
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 16, \"temperature\": 0}",
             prompt);
    response r = graft_test_request(s, "POST", "/v1/completions", body);
    assert_int_equal(r.status, 200);
    json_t *j = graft_test_json_of(&r);
    answer a = {0};
    a.text = strdup(json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")));
    snprintf(a.source, sizeof a.source, "%s",
             json_string_value(json_object_get(json_object_get(j, "graft"), "source")));
    a.reused = (long)json_integer_value(json_object_get(json_object_get(j, "graft"),
                                                        "tokens_reused"));
    a.prompt_tokens = (long)json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                               "prompt_tokens"));
    json_decref(j);
    graft_test_response_free(&r);
    return a;
}

static void expect_from_cache(const server *s, const char *prompt, const answer *cold)
{
    answer a = ask(s, prompt);
    if (strcmp(a.source, "cache") != 0 || a.reused != a.prompt_tokens - 1)
        fail_msg("%s: source %s, %ld of %ld prompt tokens reused", prompt, a.source, a.reused,
                 a.prompt_tokens);
    assert_string_equal(a.text, cold->text);
    free(a.text);
}

/* The folder's files whose names start with `start` (NULL: all). */
static int count_files(const char *start)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        if (de->d_name[0] != '.' &&
            (start == NULL || strncmp(de->d_name, start, strlen(start)) == 0))
            n++;
    closedir(d);
    return n;
}

/* The names of the folder's first n files. */
static void list_files(char (*names)[256], int n)
{
    int k = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL && k < n;)
        if (de->d_name[0] != '.')
            snprintf(names[k++], sizeof names[0], "%s", de->d_name);
    closedir(d);
    assert_int_equal(k, n);
}

/* Whether the server's log has a line containing text. */
static bool logged(const server *s, const char *text)
{
    FILE *f = fopen(s->log, "r");
    assert_non_null(f);
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

static void test_restart_reuses_the_cache(void **state)
{
    (void)state;
    server a = start(NULL);
    assert_true(logged(&a, "prefix cache: 0 snapshots read"));
    answer a1 = ask(&a, P1), a2 = ask(&a, P2), a3 = ask(&a, P3);
    assert_string_equal(a1.source, "cold");
    assert_true(a3.reused <= 1); /* P3 shares BOS alone with the others */
    assert_int_equal(graft_test_stop_server(&a), 0);
    assert_true(logged(&a, "prefix cache: 2 snapshots written")); /* P1 is inside P2 */
    assert_int_equal(count_files("prefix-"), 2);

    server b = start(NULL);
    assert_true(logged(&b, "prefix cache: 2 snapshots read"));
    expect_from_cache(&b, P1, &a1);
    expect_from_cache(&b, P2, &a2);
    expect_from_cache(&b, P3, &a3);
    assert_int_equal(graft_test_stop_server(&b), 0);
    assert_int_equal(count_files("prefix-"), 2);

    /* another kernel set computes other bits: it reads none, and its files sit beside */
    char names[2][256];
    list_files(names, 2);
    server c = start("scalar");
    assert_true(logged(&c, "prefix cache: 0 snapshots read"));
    answer c1 = ask(&c, P1);
    assert_string_equal(c1.source, "cold");
    free(c1.text);
    assert_int_equal(graft_test_stop_server(&c), 0);
    assert_int_equal(count_files("prefix-"), 3);

    /* a damaged file is skipped with its reason, and goes at the next stop */
    char damaged[2048];
    snprintf(damaged, sizeof damaged, "%s/%s", dir, names[0]);
    FILE *f = fopen(damaged, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -100, SEEK_END), 0);
    int byte = fgetc(f);
    assert_int_equal(fseek(f, -100, SEEK_END), 0);
    fputc(byte ^ 0x40, f);
    fclose(f);
    server d = start(NULL);
    assert_true(logged(&d, "prefix cache: 1 snapshots read"));
    assert_true(logged(&d, "checksum"));
    assert_int_equal(graft_test_stop_server(&d), 0);
    assert_int_equal(access(damaged, F_OK), -1);
    assert_int_equal(count_files("prefix-"), 2);
    free(a1.text);
    free(a2.text);
    free(a3.text);
}

/* A folder that cannot be made is a usage error that names it. */
static void test_bad_folder(void **state)
{
    (void)state;
    char log[256], command[3072];
    graft_test_tmp_path(log, sizeof log, "cache-dir-bad.log");
    snprintf(command, sizeof command, "'%s' serve --cache-dir /proc/graft-no/such 2>'%s'",
             getenv("GRAFT_BIN"), log);
    int status = system(command);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    server s = {.log = ""};
    snprintf(s.log, sizeof s.log, "%s", log);
    assert_true(logged(&s, "option --cache-dir: cannot make /proc/graft-no/such"));
    /* a file where the folder should be */
    char file[256];
    graft_test_tmp_path(file, sizeof file, "cache-dir-a-file");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(command, sizeof command, "'%s' serve --cache-dir '%s' 2>'%s'", getenv("GRAFT_BIN"),
             file, log);
    status = system(command);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    assert_true(logged(&s, "a file of that name is there"));
    remove(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart_reuses_the_cache),
        cmocka_unit_test(test_bad_folder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
