/*
 * serve_client.h: what the server tests share: a real `graft serve` started in a child
 * process on a free port of 127.0.0.1 (its stderr, the port line and one line per request,
 * in a log file under GRAFT_TEST_TMP), requests to it with libcurl, and checks of the JSON
 * it answers. Failures fail the calling test (cmocka), on the test's thread.
 */
#ifndef GRAFT_TEST_SERVE_CLIENT_H
#define GRAFT_TEST_SERVE_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct server {
    pid_t pid;
    int port;
    char log[512];
} server;

typedef struct response {
    long status;
    char *body;
    size_t len;
    char *headers;
    size_t headers_len;
    int abort_after; /* stop reading after this many body writes (0: never) */
    int writes;
} response;

/* Starts `graft serve --port 0 ARGS...` with its stderr in a log file, and waits for its
 * "listening on" line there. */
server graft_test_start_server(const char *const *extra);

/* A test group's server: libcurl's global init, then graft_test_start_server. */
server graft_test_serve_begin(const char *const *extra);
/* Its end: graft_test_stop_server and libcurl's cleanup; 0 when the server exited 0, else
 * -1 (a cmocka teardown's result). */
int graft_test_serve_end(server *s);

/* SIGTERM, then the exit status (0 expected). */
int graft_test_stop_server(server *s);

/* One request (body NULL: none) with a bearer key (auth, or NULL), reading the body until
 * abort_after writes of it (0: to its end). */
response graft_test_request_full(const server *s, const char *method, const char *path,
                                 const char *body, const char *auth, int abort_after);
/* One request with more headers (each "Name: value", NULL-terminated), read to the end. */
response graft_test_request_headers(const server *s, const char *method, const char *path,
                                    const char *body, const char *auth,
                                    const char *const *headers);
/* The value of the response's header `name` (matched in any case), to free; NULL without
 * one. */
char *graft_test_header(const response *r, const char *name);
/* The same without a key, read to the end. */
response graft_test_request(const server *s, const char *method, const char *path,
                            const char *body);
void graft_test_response_free(response *r);

/* The body as JSON (to json_decref); not JSON fails the test. */
json_t *graft_test_json_of(const response *r);
/* POSTs body (consumed) to path as compact JSON; returns the answer's JSON (to json_decref),
 * which must come with `status` (else the test fails, showing the answer). */
json_t *graft_test_post_json(const server *s, const char *path, json_t *body, long status);

/* The events of a 200 event stream whose events are named (Anthropic's and OpenAI's
 * Responses API's): blocks "event: T\ndata: J" where J is an object of type T; their data
 * (to json_decref). */
json_t *graft_test_named_events(const response *r);

/* The data of a 200 event stream's unnamed events (OpenAI's completions, llama-server's),
 * each parsed (to json_decref), [DONE] left out; a block that is not one data line fails the
 * test. */
json_t *graft_test_data_events(const response *r);

/* j as compact JSON for a failure's message ("(none)" for NULL), valid until the next
 * call; not thread-safe. */
const char *graft_test_shown(const json_t *j);
/* text parsed as JSON (to json_decref); fails the test when it is not JSON. */
json_t *graft_test_parse(const char *text);

/* The text of a whole completion response. */
char *graft_test_completion_text(const response *r);

/* An error response: status, {"error": {"message", "type", "param", "code"}}; returns the
 * message (to free) and checks param when given. */
char *graft_test_expect_error(const response *r, long status, const char *param);

/* The value of the unlabelled Prometheus metric `name` of GET /metrics (-1: absent); a
 * labelled one with name as `graft_x{label="v"}`. */
double graft_test_metric(const server *s, const char *name);
/* Waits up to 3 s for a client's hang-up to be counted (graft_client_disconnects_total above
 * disconnects_before) and for no generation to be live; fails the test otherwise. */
void graft_test_expect_cancelled(const server *s, double disconnects_before);

#endif /* GRAFT_TEST_SERVE_CLIENT_H */
