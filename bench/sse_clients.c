/* bench/sse_clients — many /api/events clients in one process, for the load
 * benchmark (bench/load.py). Each client is a plain HTTP/1.0 connection
 * (close-delimited body, no chunking to undo) read with epoll; every
 * `generation_update` event's id (the row's seq) is kept. On SIGTERM or
 * SIGINT it writes one line per client to OUT: "<client> <status> <resyncs>
 * <closed> <ids...>" (ids sorted, each once), so the caller can compare them with the
 * rows the run created and count lost events.
 *
 *   sse_clients HOST PORT N TOKEN OUT     (TOKEN "-" sends no Authorization)
 *
 * Prints "connected N" once every stream answered, then a line a second.
 * Written in C because 200 streams x hundreds of events a second would
 * take a Python client more CPU than the server it measures. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct stream {
    int fd;
    int status;
    int header_done;
    char line[1 << 16];
    size_t line_len;
    char event[64];
    long long id;
    long long *ids;
    size_t n_ids, cap_ids;
    long resyncs;
    long events;
    int closed;
} stream;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void keep_id(stream *s, long long id)
{
    if (s->n_ids == s->cap_ids) {
        s->cap_ids = s->cap_ids ? s->cap_ids * 2 : 1024;
        s->ids = realloc(s->ids, s->cap_ids * sizeof *s->ids);
        if (!s->ids) {
            perror("realloc");
            exit(1);
        }
    }
    s->ids[s->n_ids++] = id;
}

/* One line of the response (without its newline). */
static void take_line(stream *s, char *line)
{
    if (!s->header_done) {
        if (s->status == 0 && strncmp(line, "HTTP/", 5) == 0) {
            const char *sp = strchr(line, ' ');
            s->status = sp ? atoi(sp + 1) : -1;
        } else if (line[0] == '\0' || (line[0] == '\r' && line[1] == '\0')) {
            s->header_done = 1;
        }
        return;
    }
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r')
        line[--n] = '\0';
    if (n == 0) { /* the event ends */
        if (s->event[0]) {
            s->events++;
            if (strcmp(s->event, "generation_update") == 0 && s->id >= 0)
                keep_id(s, s->id);
            else if (strcmp(s->event, "resync") == 0)
                s->resyncs++;
        }
        s->event[0] = '\0';
        s->id = -1;
    } else if (strncmp(line, "event: ", 7) == 0) {
        snprintf(s->event, sizeof s->event, "%s", line + 7);
    } else if (strncmp(line, "id: ", 4) == 0) {
        s->id = atoll(line + 4);
    }
}

static void take_bytes(stream *s, const char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            s->line[s->line_len] = '\0';
            take_line(s, s->line);
            s->line_len = 0;
        } else if (s->line_len + 1 < sizeof s->line) {
            s->line[s->line_len++] = buf[i];
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: sse_clients HOST PORT N TOKEN OUT\n");
        return 2;
    }
    const char *host = argv[1], *token = argv[4], *out = argv[5];
    int port = atoi(argv[2]), n = atoi(argv[3]);
    if (n < 1 || n > 100000) {
        fprintf(stderr, "sse_clients: N %s: accepted: 1..100000\n", argv[3]);
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    stream *streams = calloc((size_t)n, sizeof *streams);
    int ep = epoll_create1(0);
    if (!streams || ep < 0) {
        perror("sse_clients");
        return 1;
    }
    char request[1024];
    int rl = snprintf(request, sizeof request,
                      "GET /api/events HTTP/1.0\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n%s%s%s\r\n", host,
                      port, strcmp(token, "-") ? "Authorization: Bearer " : "", strcmp(token, "-") ? token : "",
                      strcmp(token, "-") ? "\r\n" : "");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "sse_clients: HOST must be an IPv4 address\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        stream *s = &streams[i];
        s->id = -1;
        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
            write(s->fd, request, (size_t)rl) != rl) {
            fprintf(stderr, "sse_clients: client %d: %s\n", i, strerror(errno));
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
    }
    int announced = 0;
    time_t last_report = time(NULL);
    char buf[1 << 16];
    struct epoll_event evs[256];
    while (!stop) {
        int k = epoll_wait(ep, evs, 256, 200);
        for (int e = 0; e < k; e++) {
            stream *s = &streams[evs[e].data.u32];
            ssize_t got = read(s->fd, buf, sizeof buf);
            if (got > 0) {
                take_bytes(s, buf, (size_t)got);
            } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                s->closed = 1;
                epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
                close(s->fd);
            }
        }
        if (!announced) {
            int ok = 0;
            for (int i = 0; i < n; i++)
                ok += streams[i].header_done && streams[i].status == 200;
            if (ok == n) {
                printf("connected %d\n", n);
                fflush(stdout);
                announced = 1;
            }
        }
        if (time(NULL) != last_report) {
            last_report = time(NULL);
            long events = 0, closed = 0;
            for (int i = 0; i < n; i++)
                events += streams[i].events, closed += streams[i].closed;
            printf("events %ld closed %ld\n", events, closed);
            fflush(stdout);
        }
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        perror(out);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        stream *s = &streams[i];
        qsort(s->ids, s->n_ids, sizeof *s->ids, cmp_ll);
        fprintf(f, "%d %d %ld %d", i, s->status, s->resyncs, s->closed);
        for (size_t j = 0; j < s->n_ids; j++)
            if (j == 0 || s->ids[j] != s->ids[j - 1])
                fprintf(f, " %lld", s->ids[j]);
        fputc('\n', f);
    }
    fclose(f);
    return 0;
}
