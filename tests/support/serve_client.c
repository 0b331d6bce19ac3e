/*
 * serve_client.c: a real `graft serve` for tests, and libcurl requests to it
 * (serve_client.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve_client.h"

/* Starts `graft serve --port 0 ARGS...` with its stderr in a log file, and waits for its
 * "listening on" line there. */
server graft_test_start_server(const char *const *extra)
{
    server s = {0};
    const char *bin = getenv("GRAFT_BIN"), *tmp = getenv("GRAFT_TEST_TMP");
    static int n_started;
    snprintf(s.log, sizeof s.log, "%s/server-%d-%d.log", tmp ? tmp : "/tmp", (int)getpid(),
             n_started++);
    s.pid = fork();
    assert_true(s.pid >= 0);
    if (s.pid == 0) {
        /* A failed check ends the test program without stopping its servers: they end with
         * it rather than keep the test's output open until ctest's timeout. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
            _exit(125);
        const char *argv[32] = {bin ? bin : "graft", "serve", "--port", "0", "--threads", "1"};
        int argc = 6;
        for (int i = 0; extra && extra[i]; i++)
            argv[argc++] = extra[i];
        argv[argc] = NULL;
        if (freopen(s.log, "w", stderr) == NULL)
            _exit(126);
        execv(argv[0], (char **)argv);
        _exit(127);
    }
    const char *mark = "graft: listening on http://"; /* then HOST:PORT */
    for (int tries = 0; tries < 6000 && s.port == 0; tries++) {
        FILE *log = fopen(s.log, "r");
        char line[1024];
        while (log != NULL && fgets(line, sizeof line, log) != NULL)
            if (strncmp(line, mark, strlen(mark)) == 0)
                s.port = atoi(strrchr(line, ':') + 1);
        if (log != NULL)
            fclose(log);
        int status;
        if (s.port == 0 && waitpid(s.pid, &status, WNOHANG) == s.pid)
            fail_msg("graft serve exited before listening (see %s)", s.log);
        if (s.port == 0)
            usleep(10000);
    }
    if (s.port == 0)
        fail_msg("graft serve did not start listening within 60 s (see %s)", s.log);
    return s;
}

/* SIGTERM, then the exit status (0 expected). */
int graft_test_stop_server(server *s)
{
    kill(s->pid, SIGTERM);
    int status = 0;
    waitpid(s->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */


/* Appends bytes to a NUL-terminated buffer. */
static void append_bytes(char **buf, size_t *len, const char *data, size_t bytes)
{
    *buf = realloc(*buf, *len + bytes + 1);
    memcpy(*buf + *len, data, bytes);
    *len += bytes;
    (*buf)[*len] = '\0';
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    response *r = user;
    append_bytes(&r->body, &r->len, data, size * n);
    if (r->abort_after > 0 && ++r->writes >= r->abort_after)
        return 0;
    return size * n;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    response *r = user;
    append_bytes(&r->headers, &r->headers_len, data, size * n);
    return size * n;
}

/* One request with the headers given (each "Name: value", NULL-terminated; NULL for
 * none). */
static response request(const server *s, const char *method, const char *path,
                        const char *body, const char *auth, int abort_after,
                        const char *const *headers)
{
    response r = {0};
    r.abort_after = abort_after;
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char bearer[256];
    if (auth != NULL) {
        snprintf(bearer, sizeof bearer, "Authorization: Bearer %s", auth);
        h = curl_slist_append(h, bearer);
    }
    for (int i = 0; headers != NULL && headers[i] != NULL; i++)
        h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L); /* else libcurl waits for a body */
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

response graft_test_request_full(const server *s, const char *method, const char *path,
                                 const char *body, const char *auth, int abort_after)
{
    return request(s, method, path, body, auth, abort_after, NULL);
}

response graft_test_request_headers(const server *s, const char *method, const char *path,
                                    const char *body, const char *auth,
                                    const char *const *headers)
{
    return request(s, method, path, body, auth, 0, headers);
}

char *graft_test_header(const response *r, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = r->headers; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            size_t len = end ? (size_t)(end - v) : strlen(v);
            while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == ' '))
                len--;
            return strndup(v, len);
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

response graft_test_request(const server *s, const char *method, const char *path,
                            const char *body)
{
    return graft_test_request_full(s, method, path, body, NULL, 0);
}

void graft_test_response_free(response *r)
{
    free(r->body);
    free(r->headers);
}

json_t *graft_test_json_of(const response *r)
{
    json_error_t e;
    json_t *j = json_loads(r->body ? r->body : "", 0, &e);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", e.text, r->body ? r->body : "(empty)");
    return j;
}

json_t *graft_test_post_json(const server *s, const char *path, json_t *body, long status)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    assert_non_null(text);
    response r = graft_test_request(s, "POST", path, text);
    free(text);
    if (r.status != status)
        fail_msg("%s: status %ld, expected %ld: %s", path, r.status, status,
                 r.body ? r.body : "");
    json_t *j = graft_test_json_of(&r);
    graft_test_response_free(&r);
    return j;
}

json_t *graft_test_named_events(const response *r)
{
    if (r->status != 200)
        fail_msg("status %ld: %s", r->status, r->body ? r->body : "");
    char *type = graft_test_header(r, "Content-Type");
    assert_non_null(type);
    assert_non_null(strstr(type, "text/event-stream"));
    free(type);
    json_t *events = json_array();
    for (const char *p = r->body; p != NULL && *p != '\0';) {
        const char *end = strstr(p, "\n\n");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *block = strndup(p, len);
        char *nl = strchr(block, '\n');
        if (strncmp(block, "event: ", 7) != 0 || nl == NULL || strncmp(nl + 1, "data: ", 6) != 0 ||
            strchr(nl + 1, '\n') != NULL)
            fail_msg("not an event and its data: '%s'", block);
        *nl = '\0';
        json_error_t e;
        json_t *data = json_loads(nl + 7, 0, &e);
        const char *data_type = json_string_value(json_object_get(data, "type"));
        if (data_type == NULL || strcmp(data_type, block + 7) != 0)
            fail_msg("event %s carries %s", block + 7, nl + 7);
        json_array_append_new(events, data);
        free(block);
        p = end ? end + 2 : NULL;
    }
    return events;
}

json_t *graft_test_data_events(const response *r)
{
    if (r->status != 200)
        fail_msg("status %ld: %s", r->status, r->body ? r->body : "");
    json_t *events = json_array();
    for (const char *p = r->body; p != NULL && *p != '\0';) {
        const char *end = strstr(p, "\n\n");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *block = strndup(p, len);
        if (strncmp(block, "data: ", 6) != 0 || strchr(block, '\n') != NULL)
            fail_msg("not a data event: '%s'", block);
        if (strcmp(block + 6, "[DONE]") != 0)
            json_array_append_new(events, graft_test_parse(block + 6));
        free(block);
        p = end ? end + 2 : NULL;
    }
    return events;
}

/* The text of a whole completion response. */
char *graft_test_completion_text(const response *r)
{
    assert_int_equal(r->status, 200);
    json_t *j = graft_test_json_of(r);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const char *t = json_string_value(json_object_get(choice, "text"));
    assert_non_null(t);
    char *copy = strdup(t);
    json_decref(j);
    return copy;
}

/* An error response: status, {"error": {"message", "type", "param", "code"}}; returns the
 * message (to free) and checks param when given. */
char *graft_test_expect_error(const response *r, long status, const char *param)
{
    if (r->status != status)
        fail_msg("status %ld, expected %ld: %s", r->status, status, r->body ? r->body : "");
    json_t *j = graft_test_json_of(r);
    json_t *err = json_object_get(j, "error");
    assert_non_null(err);
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(json_is_string(json_object_get(err, "type")));
    assert_int_equal(json_integer_value(json_object_get(err, "code")), status);
    if (param != NULL)
        assert_string_equal(json_string_value(json_object_get(err, "param")), param);
    char *m = strdup(json_string_value(json_object_get(err, "message")));
    json_decref(j);
    return m;
}

double graft_test_metric(const server *s, const char *name)
{
    response r = graft_test_request(s, "GET", "/metrics", NULL);
    double v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = r.body ? strstr(r.body, key) : NULL;
    if (at != NULL)
        v = atof(at + strlen(key));
    graft_test_response_free(&r);
    return v;
}

void graft_test_expect_cancelled(const server *s, double disconnects_before)
{
    double live = -1, disconnects = -1;
    for (int i = 0; i < 300; i++) {
        live = graft_test_metric(s, "graft_generations_live");
        disconnects = graft_test_metric(s, "graft_client_disconnects_total");
        if (live == 0 && disconnects > disconnects_before)
            return;
        usleep(10000);
    }
    fail_msg("after 3 s: %g generations live, %g disconnects counted (%g before)", live,
             disconnects, disconnects_before);
}

server graft_test_serve_begin(const char *const *extra)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return graft_test_start_server(extra);
}

int graft_test_serve_end(server *s)
{
    int rc = graft_test_stop_server(s);
    curl_global_cleanup();
    return rc == 0 ? 0 : -1;
}

const char *graft_test_shown(const json_t *j)
{
    static char buf[4096];
    size_t n = j ? json_dumpb(j, buf, sizeof buf - 1, JSON_COMPACT) : 0;
    buf[n < sizeof buf ? n : sizeof buf - 1] = '\0';
    return j ? buf : "(none)";
}

json_t *graft_test_parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (j == NULL)
        fail_msg("not JSON (%s): %s", err.text, text);
    return j;
}
