/* The Oxen HTTP client (src/oxen/client.h, remote.h) against a scripted
 * HTTP server on loopback: remotes accepted and refused, the key in the
 * Authorization header only, redirects not followed, retries of 5xx and
 * timeouts with backoff and none of 4xx, malformed JSON, the size cap. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "oxen/client.h"
#include "oxen/remote.h"
#include "test.h"

/* ---------------------------------------------------------------- scripted server */

#define MAX_ANSWERS 8

typedef struct server {
    int fd, port;
    const char *answers[MAX_ANSWERS]; /* one per connection, in order; NULL: close at once */
    double delay[MAX_ANSWERS];        /* seconds before answering */
    int n_answers, served;
    char last_request[8192];
    pthread_t thread;
} server;

static void *serve(void *arg)
{
    server *s = arg;
    for (int i = 0; i < s->n_answers; i++) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            break;
        char buf[8192];
        size_t got = 0;
        /* Read the head, then the body by Content-Length. */
        while (got < sizeof buf - 1) {
            ssize_t k = recv(c, buf + got, sizeof buf - 1 - got, 0);
            if (k <= 0)
                break;
            got += (size_t)k;
            buf[got] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (end) {
                const char *cl = strcasestr(buf, "Content-Length:");
                size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
                if (got >= want)
                    break;
            }
        }
        buf[got] = '\0';
        memcpy(s->last_request, buf, got + 1);
        s->served++;
        if (s->delay[i] > 0) {
            struct timespec ts = {(time_t)s->delay[i], (long)((s->delay[i] - (long)s->delay[i]) * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (s->answers[i])
            send(c, s->answers[i], strlen(s->answers[i]), MSG_NOSIGNAL);
        close(c);
    }
    return NULL;
}

static void server_start(server *s)
{
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(s->fd, (struct sockaddr *)&a, sizeof a);
    socklen_t len = sizeof a;
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    listen(s->fd, 8);
    pthread_create(&s->thread, NULL, serve, s);
}

static void server_stop(server *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

static void client_for(mm_oxen_client *c, const server *s, const char *token)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/alice/renders", s->port);
    mm_error err = {{0}};
    if (mm_oxen_client_init(c, url, token, &err) < 0)
        printf("     client_for: %s\n", err.msg);
    c->backoff = 0.01;
    c->timeout = 2;
}

#define OK_JSON "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

/* An answer with its Content-Length; buf must outlive the server. */
static const char *answer(char *buf, size_t n, const char *status, const char *body)
{
    snprintf(buf, n, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", status,
             strlen(body), body);
    return buf;
}

/* ---------------------------------------------------------------- remotes */

static void test_remotes(void)
{
    static const struct {
        const char *url;
        int ok;
        const char *origin, *ns, *repo;
    } cases[] = {
        {"https://hub.oxen.ai/alice/h3-renders", 1, "https://hub.oxen.ai", "alice", "h3-renders"},
        {"https://hub.oxen.ai/alice/h3_renders.v2/", 1, "https://hub.oxen.ai", "alice", "h3_renders.v2"},
        {"https://hub.oxen.ai", 1, "https://hub.oxen.ai", "", ""},
        {"http://127.0.0.1:3000/ns/repo", 1, "http://127.0.0.1:3000", "ns", "repo"},
        {"http://localhost:8080/ns/repo", 1, "http://localhost:8080", "ns", "repo"},
        {"http://[::1]:9/ns/repo", 1, "http://[::1]:9", "ns", "repo"},
        {"http://hub.oxen.ai/alice/repo", 0, NULL, NULL, NULL},     /* plain http to the internet */
        {"http://127.0.0.1.evil.com/a/b", 0, NULL, NULL, NULL},
        {"http://10.0.0.5/a/b", 0, NULL, NULL, NULL},
        {"ftp://hub.oxen.ai/a/b", 0, NULL, NULL, NULL},
        {"file:///etc/passwd", 0, NULL, NULL, NULL},
        {"https://user:pw@hub.oxen.ai/a/b", 0, NULL, NULL, NULL},
        {"https://hub.oxen.ai/a/b?token=x", 0, NULL, NULL, NULL},
        {"https://hub.oxen.ai/a", 0, NULL, NULL, NULL},
        {"https://hub.oxen.ai/a/b/c", 0, NULL, NULL, NULL},
        {"https://hub.oxen.ai/a/..", 1, "https://hub.oxen.ai", "", ""}, /* dot segments resolve first */
        {"https://hub.oxen.ai/a/b%2Fc", 0, NULL, NULL, NULL},
        {"", 0, NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_oxen_remote r;
        mm_error err = {{0}};
        int rc = mm_oxen_remote_parse(cases[i].url, &r, &err);
        MM_EXPECT((rc == 0) == cases[i].ok, "%s: rc %d (%s)", cases[i].url, rc, err.msg);
        if (rc == 0 && cases[i].ok)
            MM_EXPECT(strcmp(r.origin, cases[i].origin) == 0 && strcmp(r.ns, cases[i].ns) == 0 &&
                          strcmp(r.repo, cases[i].repo) == 0 && strcmp(r.branch, "main") == 0,
                      "%s -> %s %s %s", cases[i].url, r.origin, r.ns, r.repo);
        if (rc < 0)
            MM_EXPECT(strstr(err.msg, "accepted") != NULL, "%s: the message says nothing accepted: %s",
                      cases[i].url, err.msg);
    }
}

static void test_tokens_are_checked(void)
{
    mm_oxen_client c;
    mm_error err = {{0}};
    MM_EXPECT(mm_oxen_client_init(&c, "https://hub.oxen.ai/a/b", "two words", &err) < 0, "a space was accepted");
    MM_EXPECT(mm_oxen_client_init(&c, "https://hub.oxen.ai/a/b", "ok\r\nX-Evil: 1", &err) < 0,
              "a header injection was accepted");
    MM_EXPECT(strstr(err.msg, "X-Evil") == NULL, "the message repeats the key: %s", err.msg);
}

/* ---------------------------------------------------------------- calls */

static void test_bearer_and_json(void)
{
    server s = {.answers = {OK_JSON}, .n_answers = 1};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "sekrit-123");
    json_t *body = json_pack("{s:s}", "workspace_id", "w1");
    mm_oxen_response resp;
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "PUT", "/api/repos/alice/renders/workspaces", body, &resp, &err);
    json_decref(body);
    server_stop(&s);
    MM_EXPECT(rc == 0 && resp.status == 200 && json_is_true(json_object_get(resp.json, "ok")), "rc %d %ld %s", rc,
              resp.status, err.msg);
    MM_EXPECT(strncmp(s.last_request, "PUT /api/repos/alice/renders/workspaces HTTP/1.1\r\n", 50) == 0,
              "request line: %.60s", s.last_request);
    MM_EXPECT(strstr(s.last_request, "\r\nAuthorization: Bearer sekrit-123\r\n") != NULL, "no bearer header");
    MM_EXPECT(strstr(s.last_request, "Content-Type: application/json") != NULL, "no JSON content type");
    MM_EXPECT(strstr(s.last_request, "{\"workspace_id\":\"w1\"}") != NULL, "body: %s", s.last_request);
    mm_oxen_response_free(&resp);
}

static void test_redirects_are_not_followed(void)
{
    server s = {.answers = {"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/steal\r\nContent-Length: 0\r\n\r\n",
                            OK_JSON},
                .n_answers = 2};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/ai/queue", NULL, NULL, &err);
    int served = s.served;
    /* Release the second slot so the server thread ends. */
    mm_oxen_call(&c, "GET", "/x", NULL, NULL, NULL);
    server_stop(&s);
    MM_EXPECT(rc < 0 && strstr(err.msg, "redirect") && strstr(err.msg, "302"), "rc %d: %s", rc, err.msg);
    MM_EXPECT(served == 1, "%d requests for one redirect", served);
}

static void test_5xx_retried_then_success(void)
{
    static char e500[256];
    answer(e500, sizeof e500, "500 Oops", "{\"status\":\"error\",\"status_message\":\"boom\"}");
    server s = {.answers = {e500, e500, OK_JSON}, .n_answers = 3};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "POST", "/api/x", NULL, NULL, &err);
    server_stop(&s);
    MM_EXPECT(rc == 0 && s.served == 3, "rc %d after %d requests: %s", rc, s.served, err.msg);
}

static void test_5xx_gives_up_with_the_hubs_message(void)
{
    static char e503[256];
    answer(e503, sizeof e503, "503 Busy", "{\"status\":\"error\",\"status_message\":\"try later\"}");
    server s = {.answers = {e503, e503, e503}, .n_answers = 3};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    mm_oxen_response resp;
    int rc = mm_oxen_call(&c, "POST", "/api/x", NULL, &resp, &err);
    server_stop(&s);
    MM_EXPECT(rc < 0 && s.served == 3 && resp.status == 503, "rc %d, %d requests, status %ld", rc, s.served,
              resp.status);
    MM_EXPECT(strstr(err.msg, "after 3 tries") && strstr(err.msg, "HTTP 503") && strstr(err.msg, "try later"),
              "message: %s", err.msg);
    mm_oxen_response_free(&resp);
}

static void test_4xx_not_retried(void)
{
    static char e401[256];
    answer(e401, sizeof e401, "401 No", "{\"error\":{\"message\":\"key revoked\"}}");
    server s = {.answers = {e401, OK_JSON}, .n_answers = 2};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    int served = s.served;
    mm_oxen_call(&c, "GET", "/x", NULL, NULL, NULL);
    server_stop(&s);
    MM_EXPECT(rc < 0 && served == 1, "rc %d after %d requests", rc, served);
    MM_EXPECT(strstr(err.msg, "HTTP 401") && strstr(err.msg, "refused the API key") && strstr(err.msg, "key revoked"),
              "message: %s", err.msg);
}

static void test_malformed_json(void)
{
    server s = {.answers = {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"a\": [1,"}, .n_answers = 1};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    server_stop(&s);
    MM_EXPECT(rc < 0 && strstr(err.msg, "not JSON") && s.served == 1, "rc %d (%d requests): %s", rc, s.served,
              err.msg);
}

static void test_answer_size_cap(void)
{
    static char big[4096];
    snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n");
    size_t n = strlen(big);
    memset(big + n, ' ', 3000);
    big[n + 3000] = '\0';
    server s = {.answers = {big}, .n_answers = 1};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    c.max_response = 1000;
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    server_stop(&s);
    MM_EXPECT(rc < 0 && strstr(err.msg, "larger than 1000"), "rc %d: %s", rc, err.msg);
}

static void test_timeout_retried_then_reported(void)
{
    server s = {.answers = {OK_JSON, OK_JSON}, .delay = {1.0, 1.0}, .n_answers = 2};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    c.timeout = 0.3;
    c.max_tries = 2;
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    server_stop(&s);
    MM_EXPECT(rc < 0 && strstr(err.msg, "timed out") && strstr(err.msg, "after 2 tries") && strstr(err.msg, "0.3 s"),
              "rc %d: %s", rc, err.msg);
}

static void test_connection_refused(void)
{
    server s = {.n_answers = 0};
    server_start(&s);
    int port = s.port;
    server_stop(&s); /* nothing listens there now */
    s.port = port;
    mm_oxen_client c;
    client_for(&c, &s, "k");
    mm_error err = {{0}};
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "cannot connect") && strstr(err.msg, "after 3 tries"), "rc %d: %s", rc,
              err.msg);
}

static void test_cancel_stops_calls(void)
{
    server s = {.answers = {OK_JSON}, .delay = {1.5}, .n_answers = 1};
    server_start(&s);
    mm_oxen_client c;
    client_for(&c, &s, "k");
    atomic_bool stop = true;
    c.cancel = &stop;
    mm_error err = {{0}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = mm_oxen_call(&c, "GET", "/api/x", NULL, NULL, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    server_stop(&s);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    MM_EXPECT(rc < 0 && strstr(err.msg, "stopped") && took < 1.4, "rc %d after %.2f s: %s", rc, took, err.msg);
}

static void test_escape_and_messages(void)
{
    char *e = mm_oxen_escape_path("a b/c?d#é", false);
    MM_EXPECT(strcmp(e, "a%20b%2Fc%3Fd%23%C3%A9") == 0, "%s", e);
    free(e);
    e = mm_oxen_escape_path("videos/x y.mp4", true);
    MM_EXPECT(strcmp(e, "videos/x%20y.mp4") == 0, "%s", e);
    free(e);
    json_t *j = json_loads("{\"status\":\"error\",\"status_message\":\"nope\"}", 0, NULL);
    MM_EXPECT(strcmp(mm_oxen_error_message(j), "nope") == 0, "status_message");
    json_decref(j);
    j = json_loads("{\"error\":{\"message\":\"bad key\",\"type\":\"auth\"}}", 0, NULL);
    MM_EXPECT(strcmp(mm_oxen_error_message(j), "bad key") == 0, "error.message");
    json_decref(j);
}

static void test_redaction(void)
{
    char msg[256] = "HTTP 401: bad key oxk-secret-9 (Bearer oxk-secret-9) end";
    mm_oxen_redact(msg, "oxk-secret-9");
    MM_EXPECT(strcmp(msg, "HTTP 401: bad key <key> (Bearer <key>) end") == 0, "%s", msg);
    char short_one[32] = "abc abc";
    mm_oxen_redact(short_one, "abc");
    MM_EXPECT(strcmp(short_one, "abc abc") == 0, "a 3-byte secret was redacted: %s", short_one);
    char none[32] = "nothing here";
    mm_oxen_redact(none, "");
    mm_oxen_redact(none, NULL);
    MM_EXPECT(strcmp(none, "nothing here") == 0, "%s", none);
}

int main(void)
{
    MM_RUN(test_remotes);
    MM_RUN(test_tokens_are_checked);
    MM_RUN(test_bearer_and_json);
    MM_RUN(test_redirects_are_not_followed);
    MM_RUN(test_5xx_retried_then_success);
    MM_RUN(test_5xx_gives_up_with_the_hubs_message);
    MM_RUN(test_4xx_not_retried);
    MM_RUN(test_malformed_json);
    MM_RUN(test_answer_size_cap);
    MM_RUN(test_timeout_retried_then_reported);
    MM_RUN(test_connection_refused);
    MM_RUN(test_cancel_stops_calls);
    MM_RUN(test_escape_and_messages);
    MM_RUN(test_redaction);
    return mm_test_exit();
}
