/*
 * test_server_http.c: malformed HTTP never takes `graft serve` down: huge headers, bad
 * chunked bodies, a garbage request line, a body cut short, and slow clients that drip a
 * request a byte at a time (slowloris) are each answered with an error or a closed
 * connection, while well-formed requests keep being answered; an idle connection is closed
 * after --timeout, and clients that drip requests on every connection the server allows are
 * cut after --request-timeout.
 *
 * Raw sockets speak the broken HTTP; libcurl (serve_client.h) the well-formed requests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve_client.h"

/* MAX_CONNECTIONS is what graft serve allows with these --max-sessions and --max-queue:
 * 2 x (sessions + queue) + 16. */
enum { TIMEOUT_S = 2, REQUEST_TIMEOUT_S = 2, SLOW_CLIENTS = 8, MAX_CONNECTIONS = 22 };

static server srv;

static int setup(void **state)
{
    (void)state;
    char timeout[16], request_timeout[16];
    snprintf(timeout, sizeof timeout, "%d", TIMEOUT_S);
    snprintf(request_timeout, sizeof request_timeout, "%d", REQUEST_TIMEOUT_S);
    const char *args[] = {"--ctx", "256", "--timeout", timeout, "--request-timeout",
                          request_timeout, "--max-sessions", "2", "--max-queue", "1", NULL};
    srv = graft_test_serve_begin(args);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return graft_test_serve_end(&srv);
}

static int connect_raw(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const char *data, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, data, n, MSG_NOSIGNAL);
        if (k <= 0)
            return; /* the server may close first: that is an answer too */
        data += k;
        n -= (size_t)k;
    }
}

/* What the server sends until it closes or `wait_ms` pass without a byte: the status of
 * its first response line (0: none), and whether it closed. */
static int read_status(int fd, int wait_ms, bool *closed)
{
    char buf[4096];
    size_t len = 0;
    *closed = false;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, wait_ms) <= 0)
            break;
        ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (k <= 0) {
            *closed = true;
            break;
        }
        len += (size_t)k;
        if (len == sizeof buf - 1)
            break;
    }
    buf[len] = '\0';
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

/* A well-formed request is still answered. */
static void expect_alive(void)
{
    response r = graft_test_request(&srv, "POST", "/v1/completions",
                                    "{\"prompt\": \"The cat\", \"max_tokens\": 4, "
                                    "\"temperature\": 0}");
    free(graft_test_completion_text(&r));
    graft_test_response_free(&r);
}

static void test_huge_headers(void **state)
{
    (void)state;
    size_t n = 256 * 1024;
    char *req = malloc(n + 256);
    int at = sprintf(req, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + at, 'a', n);
    strcpy(req + at + n, "\r\n\r\n");
    int fd = connect_raw();
    send_all(fd, req, strlen(req));
    bool closed;
    int status = read_status(fd, 5000, &closed);
    assert_true(status == 431 || status == 413 || status == 400 || (status == 0 && closed));
    close(fd);
    free(req);
    expect_alive();
}

static void test_bad_chunking(void **state)
{
    (void)state;
    const char *bad[] = {
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/json\r\n\r\nzz\r\n{\"prompt\": 1}\r\n0\r\n\r\n",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: application/json\r\n\r\nffffffffffffffffff\r\nab\r\n",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "HELLO THERE\r\n\r\n",
        "GET /health HTTP/9.9\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = connect_raw();
        send_all(fd, bad[i], strlen(bad[i]));
        bool closed;
        int status = read_status(fd, 5000, &closed);
        if (!(status >= 400 || (status == 0 && closed)))
            fail_msg("request %zu: status %d, closed %d", i, status, (int)closed);
        close(fd);
    }
    /* a body shorter than its Content-Length, then the client goes away */
    int fd = connect_raw();
    const char *cut = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                      "Content-Type: application/json\r\n\r\n{\"prompt\": \"x\"";
    send_all(fd, cut, strlen(cut));
    close(fd);
    expect_alive();
}

/* Slow clients hold connections open, dripping a request; the server answers others
 * meanwhile, and closes each once it has been idle for --timeout. */
static void test_slowloris_and_idle_timeout(void **state)
{
    (void)state;
    int fds[SLOW_CLIENTS];
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n";
    for (int i = 0; i < SLOW_CLIENTS; i++)
        fds[i] = connect_raw();
    for (size_t k = 0; k < 12; k++) {
        for (int i = 0; i < SLOW_CLIENTS; i++)
            send_all(fds[i], head + k, 1);
        expect_alive();
    }
    /* then they stop sending: each is closed after about TIMEOUT_S of silence */
    time_t t0 = time(NULL);
    for (int i = 0; i < SLOW_CLIENTS; i++) {
        bool closed;
        read_status(fds[i], (TIMEOUT_S + 10) * 1000, &closed);
        assert_true(closed);
        close(fds[i]);
    }
    assert_true(time(NULL) - t0 <= TIMEOUT_S + 10);
    expect_alive();
}

/* As many clients as the server takes connections keep dripping a request, a byte every
 * DRIP_MS, so none is ever idle for --timeout: each is closed once --request-timeout passes
 * without a whole request, and then the server answers others again. */
enum { DRIP_MS = 250 };
static void test_dripping_clients_are_cut(void **state)
{
    (void)state;
    int fds[MAX_CONNECTIONS];
    bool open[MAX_CONNECTIONS];
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Drip: ";
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
        fds[i] = connect_raw();
        open[i] = true;
        send_all(fds[i], head, strlen(head));
    }
    int left = MAX_CONNECTIONS;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double elapsed = 0;
    while (left > 0 && elapsed < REQUEST_TIMEOUT_S + 4) {
        for (int i = 0; i < MAX_CONNECTIONS; i++) {
            if (!open[i])
                continue;
            struct pollfd p = {fds[i], POLLIN, 0};
            char c;
            if (poll(&p, 1, 0) > 0 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0) {
                open[i] = false;
                left--;
                continue;
            }
            send_all(fds[i], "a", 1);
        }
        struct timespec pause = {0, DRIP_MS * 1000000L};
        nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        elapsed = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    }
    for (int i = 0; i < MAX_CONNECTIONS; i++)
        close(fds[i]);
    assert_int_equal(left, 0);
    expect_alive();
    assert_true(graft_test_metric(&srv, "graft_connections_cut_total") >= MAX_CONNECTIONS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_headers),
        cmocka_unit_test(test_bad_chunking),
        cmocka_unit_test(test_slowloris_and_idle_timeout),
        cmocka_unit_test(test_dripping_clients_are_cut),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
