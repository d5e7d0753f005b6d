/* GET /api/events: the SSE relay.
 *
 * A request thread writes the stream's headers and hands the FastCGI request
 * to the hub, a single thread per process that holds every open stream and
 * one LISTEN connection. On each NOTIFY batch it reads the changed rows once
 * (generation_json) and writes them to all streams, so the cost of an event
 * does not grow with the number of clients in the database, and no request
 * thread is pinned by a long-lived stream.
 *
 * Catch-up: a client that sends Last-Event-ID (the `seq` of the last event
 * it saw) first gets the current snapshot of every row changed since then
 * and the tombstones of rows deleted since then, in seq order. When the id is
 * older than the pruned tombstones (or the gap is huge) it gets `resync`.
 * The same catch-up runs for every stream after the hub's own database
 * connection comes back, since NOTIFY does not queue for absent listeners.
 */
#include "config.h"

#include "fcgi/app.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "store/db.h"
#include "store/generations.h"

#define HEARTBEAT_SECONDS 15
#define CATCHUP_MAX 2000
/* Sequence numbers are taken in statement order but become visible in commit
 * order, so a row with a slightly smaller seq can appear after a larger one
 * was sent. The catch-up re-sends this many seq values before the client's
 * last id; duplicates are harmless (clients compare seq). */
#define CATCHUP_OVERLAP 64
/* NOTIFY batching: a batch closes after QUIET_MS without a notification or
 * BATCH_SECONDS in all; more than FLOOD_ROWS changed rows make a flood. */
#define QUIET_MS 5
#define BATCH_SECONDS 0.1
#define FLOOD_ROWS 1000
/* Streams one process holds. Each is a descriptor, and libfcgi uses select()
 * on descriptors, which must stay below FD_SETSIZE (1024). */
#define MAX_STREAMS 800

typedef struct client {
    FCGX_Request *req;
    long long last_seq; /* the largest event id written to it */
    bool catch_up;      /* sent Last-Event-ID */
    bool has_token;     /* opened with a token: the stream ends when it is revoked */
    unsigned char token_digest[32];
    struct client *next;
} client;

struct mm_sse_hub {
    mm_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake[2];
    client *pending; /* handed over, not yet adopted by the hub thread */
    client *clients; /* hub thread only */
    int n_clients;
    int n_streams; /* clients + pending, under mu (read by request threads) */
    bool flooding;     /* dropping a flood of NOTIFYs; a resync follows */
    double flood_seen; /* when the flood last sent something */
};

static void drop(mm_sse_hub *h, client **link)
{
    client *c = *link;
    *link = c->next;
    FCGX_Finish_r(c->req);
    free(c->req);
    free(c);
    h->n_clients--;
    pthread_mutex_lock(&h->mu);
    h->n_streams--;
    pthread_mutex_unlock(&h->mu);
}

static bool write_to(client *c, const char *text, size_t len)
{
    if (FCGX_PutStr(text, (int)len, c->req->out) < 0 || FCGX_FFlush(c->req->out) < 0 || FCGX_GetError(c->req->out))
        return false;
    return true;
}

/* Sends one event to every client (or to only `one`). Clients whose write
 * fails are dropped (freed): false when that happened to `one`. */
static bool send_event(mm_sse_hub *h, client *one, long long seq, const char *event, const char *json)
{
    char *data = mm_json_compact(json);
    size_t n = data ? strlen(data) + strlen(event) + 64 : 0;
    char *buf = data ? malloc(n) : NULL;
    if (!buf) {
        free(data);
        return true;
    }
    bool one_alive = true;
    int len = seq >= 0 ? snprintf(buf, n, "id: %lld\nevent: %s\ndata: %s\n\n", seq, event, data)
                       : snprintf(buf, n, "event: %s\ndata: %s\n\n", event, data);
    for (client **link = &h->clients; *link;) {
        client *c = *link;
        if (one && c != one) {
            link = &c->next;
            continue;
        }
        if (!write_to(c, buf, (size_t)len)) {
            if (c == one)
                one_alive = false;
            drop(h, link);
            continue;
        }
        if (seq > c->last_seq)
            c->last_seq = seq;
        link = &c->next;
    }
    free(buf);
    free(data);
    return one_alive;
}

typedef struct catch_up_ctx {
    mm_sse_hub *h;
    client *c;
    bool alive;
} catch_up_ctx;

static bool send_caught_up(void *user, long long seq, const char *event, const char *json)
{
    catch_up_ctx *k = user;
    k->alive = send_event(k->h, k->c, seq, event, json);
    return k->alive;
}

/* False when c's stream turned out to be gone: c is dropped (freed) then. */
static bool catch_up(mm_sse_hub *h, PGconn *db, client *c)
{
    mm_error err = {{0}};
    bool too_old = false, overflow = false;
    if (mm_store_events_expired(db, c->last_seq, &too_old, &err) < 0) {
        mm_log("events: %s", err.msg);
        return true;
    }
    if (too_old)
        return send_event(h, c, -1, "resync", "{}");
    catch_up_ctx k = {.h = h, .c = c, .alive = true};
    long long from = c->last_seq > CATCHUP_OVERLAP ? c->last_seq - CATCHUP_OVERLAP : 0;
    if (mm_store_events_since(db, from, CATCHUP_MAX, send_caught_up, &k, &overflow, &err) < 0) {
        mm_log("events: %s", err.msg);
        return true;
    }
    return overflow ? send_event(h, c, -1, "resync", "{}") : k.alive;
}

static void adopt_pending(mm_sse_hub *h, PGconn *db)
{
    pthread_mutex_lock(&h->mu);
    client *list = h->pending;
    h->pending = NULL;
    pthread_mutex_unlock(&h->mu);
    char drain[64];
    while (read(h->wake[0], drain, sizeof drain) > 0) {
    }
    while (list) {
        client *c = list;
        list = c->next;
        c->next = h->clients;
        h->clients = c;
        h->n_clients++;
        if (c->catch_up && db)
            catch_up(h, db, c);
    }
}

typedef struct pending_event {
    long long seq;
    char kind; /* 'u' update, 'd' deleted */
    char id[40];
} pending_event;

static int cmp_event(const void *a, const void *b)
{
    long long x = ((const pending_event *)a)->seq, y = ((const pending_event *)b)->seq;
    return x < y ? -1 : x > y;
}

static void broadcast_status(mm_sse_hub *h, PGconn *db)
{
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_status_json(db, PACKAGE_VERSION, h->app->lease_seconds, &json, &err) < 0) {
        mm_log("events: %s", err.msg);
        return;
    }
    send_event(h, NULL, -1, "status_update", json);
    free(json);
}

/* A job's newest live preview in a batch: its NOTIFY payload less "kind". */
#define BATCH_PREVIEWS 64
typedef struct pending_preview {
    char id[40];
    long long seq;
    char json[1024];
} pending_preview;

/* A batch of NOTIFYs, one entry per changed row (its newest seq). */
typedef struct batch {
    pending_event ev[FLOOD_ROWS];
    int n;
    pending_preview previews[BATCH_PREVIEWS]; /* the newest per job; more jobs than this wait for their next */
    int n_previews;
    bool status;   /* a worker changed state */
    bool tokens;   /* access tokens changed */
    bool overflow; /* more rows than FLOOD_ROWS */
} batch;

static void take_preview(batch *b, const char *id, json_t *j)
{
    long long seq = json_integer_value(json_object_get(j, "seq"));
    pending_preview *p = NULL;
    for (int i = 0; i < b->n_previews && !p; i++)
        if (strcmp(b->previews[i].id, id) == 0)
            p = &b->previews[i];
    if (!p && b->n_previews < BATCH_PREVIEWS)
        p = &b->previews[b->n_previews++];
    if (!p || (p->id[0] && seq <= p->seq))
        return;
    json_object_del(j, "kind");
    char *text = json_dumps(j, JSON_COMPACT);
    if (text && strlen(text) < sizeof p->json) {
        snprintf(p->id, sizeof p->id, "%s", id);
        p->seq = seq;
        snprintf(p->json, sizeof p->json, "%s", text);
    } else if (!p->id[0]) {
        b->n_previews--; /* too large to relay: the payload is not ours */
    }
    free(text);
}

static void take_notifies(PGconn *db, batch *b)
{
    PGnotify *nt;
    while ((nt = PQnotifies(db))) {
        json_t *j = b->overflow ? NULL : json_loads(nt->extra, 0, NULL);
        const char *kind = json_string_value(json_object_get(j, "kind"));
        const char *id = json_string_value(json_object_get(j, "generation_id"));
        long long seq = json_integer_value(json_object_get(j, "seq"));
        if (kind && strcmp(kind, "tokens") == 0) {
            b->tokens = true;
        } else if (b->overflow) {
            /* counting is all that is left to do */
        } else if (kind && strcmp(kind, "worker") == 0) {
            b->status = true;
        } else if (kind && id && strcmp(kind, "preview") == 0) {
            take_preview(b, id, j);
        } else if (kind && id) {
            char k = strcmp(kind, "deleted") == 0 ? 'd' : 'u';
            int found = -1;
            for (int i = 0; i < b->n && k == 'u'; i++)
                if (b->ev[i].kind == 'u' && strcmp(b->ev[i].id, id) == 0)
                    found = i;
            if (found >= 0) {
                if (seq > b->ev[found].seq)
                    b->ev[found].seq = seq;
            } else if (b->n == FLOOD_ROWS) {
                b->overflow = true;
            } else {
                pending_event *e = &b->ev[b->n++];
                e->seq = seq;
                e->kind = k;
                snprintf(e->id, sizeof e->id, "%s", id);
            }
        }
        json_decref(j);
        PQfreemem(nt);
    }
}

/* NOTIFYs that came while the snapshot query ran are taken into `next`;
 * those of rows the snapshot already shows at their seq or later are
 * dropped there (sent again, a stream would see the same snapshot twice). */
static void take_during_snapshot(PGconn *db, const mm_store_row *rows, int n_rows, batch *next)
{
    take_notifies(db, next);
    int kept = 0;
    for (int i = 0; i < next->n; i++) {
        bool covered = false;
        for (int row = 0; next->ev[i].kind == 'u' && !covered && row < n_rows; row++)
            covered = strcmp(rows[row].id, next->ev[i].id) == 0 && rows[row].seq >= next->ev[i].seq;
        if (!covered)
            next->ev[kept++] = next->ev[i];
    }
    next->n = kept;
}

/* Sends a batch: its live previews (first: a job that finished in the same
 * batch ends after its last preview), then the current snapshot of each
 * updated row (one query) and the deletions, in seq order. Previews carry
 * no event id: they are not replayed on reconnect, the next one comes. */
static void send_batch(mm_sse_hub *h, PGconn *db, batch *b, batch *next)
{
    for (int i = 0; i < b->n_previews; i++)
        send_event(h, NULL, -1, "generation_preview", b->previews[i].json);
    if (b->n) {
        qsort(b->ev, (size_t)b->n, sizeof b->ev[0], cmp_event);
        const char **ids = malloc((size_t)b->n * sizeof *ids);
        if (!ids)
            return;
        int nu = 0;
        for (int i = 0; i < b->n; i++)
            if (b->ev[i].kind == 'u')
                ids[nu++] = b->ev[i].id;
        mm_store_row *rows = NULL;
        int n_rows = 0;
        mm_error err = {{0}};
        if (mm_store_generations_snapshot(db, ids, nu, &rows, &n_rows, &err) < 0)
            mm_log("events: %s", err.msg);
        free(ids);
        take_during_snapshot(db, rows, n_rows, next);
        for (int i = 0; i < b->n; i++) {
            if (b->ev[i].kind == 'd') {
                char data[128];
                snprintf(data, sizeof data, "{\"generation_id\":\"%s\",\"seq\":%lld}", b->ev[i].id, b->ev[i].seq);
                send_event(h, NULL, b->ev[i].seq, "generation_deleted", data);
                continue;
            }
            for (int row = 0; row < n_rows; row++)
                if (strcmp(rows[row].id, b->ev[i].id) == 0 && rows[row].json)
                    send_event(h, NULL, rows[row].seq, "generation_update", rows[row].json);
        }
        mm_store_rows_free(rows, n_rows);
    }
    if (b->status)
        broadcast_status(h, db);
}

/* Access tokens changed: the process's cache is reloaded, and the streams
 * of tokens no longer active end (their clients reconnect and are refused). */
static void revalidate_streams(mm_sse_hub *h, PGconn *db)
{
    mm_auth_invalidate();
    mm_error err = {{0}};
    if (mm_auth_refresh(db, &err) < 0) {
        mm_log("events: %s", err.msg);
        return;
    }
    int ended = 0;
    for (client **link = &h->clients; *link;) {
        if ((*link)->has_token && !mm_auth_cached((*link)->token_digest)) {
            drop(h, link);
            ended++;
        } else {
            link = &(*link)->next;
        }
    }
    if (ended)
        mm_log("events: ended %d stream(s) of revoked tokens", ended);
}

static bool batch_empty(const batch *b)
{
    return !b->n && !b->n_previews && !b->status && !b->tokens && !b->overflow;
}

/* The batch being gathered (hub thread only). The hub's own queries (the
 * snapshots below, the catch-ups, the status) read NOTIFYs that arrive
 * meanwhile into libpq's queue, where poll() cannot see them: they are taken
 * into the next batch right away and `carried` makes the hub come back at
 * once (they once waited for the next unrelated NOTIFY). */
static batch batches[2];
static int gathering; /* index of the batch being gathered */
static bool carried;

/* Reads NOTIFYs until the database has been quiet for a moment (so a burst
 * becomes one batch and one query), then relays them. A flood (a bulk
 * UPDATE or DELETE of thousands of rows) is not relayed row by row: the
 * streams get one `resync` once it is over, and the clients reload. */
static void relay_notifies(mm_sse_hub *h, PGconn *db)
{
    batch *b = &batches[gathering], *next = &batches[!gathering];
    memset(next, 0, sizeof *next);
    if (!carried) {
        memset(b, 0, sizeof *b);
        take_notifies(db, b);
    }
    carried = false;
    if (batch_empty(b))
        return;
    double start = mm_clock_now();
    for (;;) {
        struct pollfd pfd = {.fd = PQsocket(db), .events = POLLIN};
        if (mm_clock_now() - start > BATCH_SECONDS || poll(&pfd, 1, QUIET_MS) <= 0 || !PQconsumeInput(db))
            break;
        take_notifies(db, b);
    }
    if (b->tokens)
        revalidate_streams(h, db);
    if (b->overflow) {
        if (!h->flooding)
            mm_log("events: more than %d rows changed at once; streams will get a resync", FLOOD_ROWS);
        h->flooding = true;
        h->flood_seen = mm_clock_now();
    } else if (h->flooding) {
        h->flood_seen = mm_clock_now(); /* the flood's tail: covered by the resync */
    } else {
        send_batch(h, db, b, next);
    }
    take_notifies(db, next);
    gathering = !gathering;
    carried = !batch_empty(next);
}

static void *hub_main(void *arg)
{
    mm_sse_hub *h = arg;
    PGconn *db = NULL;
    mm_error err = {{0}};
    double next_ping = mm_clock_now() + HEARTBEAT_SECONDS, next_connect = 0;
    bool complained = false;
    for (;;) {
        if ((!db || PQstatus(db) != CONNECTION_OK) && mm_clock_now() >= next_connect) {
            if (db)
                PQfinish(db);
            db = NULL;
            if (mm_db_connect(h->app->db_url, "mmh3-fcgi-events", &db, &err) == 0 &&
                mm_db_listen_events(db, &err) == 0) {
                if (complained)
                    mm_log("events: database connection is back; catching the streams up");
                complained = false;
                /* Whatever happened while we were away, every stream gets it now.
                 * A stream that closed meanwhile is dropped (freed) by its
                 * catch-up, and *link then already holds the next one. */
                for (client **link = &h->clients; *link;) {
                    client *c = *link;
                    if (catch_up(h, db, c))
                        link = &c->next;
                }
            } else {
                if (!complained)
                    mm_log("events: %s (retrying)", err.msg);
                complained = true;
                if (db)
                    PQfinish(db);
                db = NULL;
                next_connect = mm_clock_now() + 1;
            }
        }
        struct pollfd pfd[2] = {{.fd = h->wake[0], .events = POLLIN}, {.fd = db ? PQsocket(db) : -1, .events = POLLIN}};
        double wait = next_ping - mm_clock_now();
        if (h->flooding && wait > 0.6)
            wait = 0.6;
        if (!db && next_connect - mm_clock_now() < wait)
            wait = next_connect - mm_clock_now();
        int timeout = wait > 0 && !carried ? (int)(wait * 1000) + 1 : 0;
        int k = poll(pfd, 2, timeout);
        if (k < 0 && errno != EINTR)
            mm_log("events: poll: %s", strerror(errno));
        if (pfd[0].revents & POLLIN)
            adopt_pending(h, db && PQstatus(db) == CONNECTION_OK ? db : NULL);
        /* Also when the socket is quiet: NOTIFYs read by our own queries (catch-ups) wait in libpq. */
        bool readable = db && (pfd[1].revents & (POLLIN | POLLERR | POLLHUP));
        if (db && PQstatus(db) == CONNECTION_OK && (!readable || PQconsumeInput(db)))
            relay_notifies(h, db);
        if (h->flooding && mm_clock_now() - h->flood_seen > 0.5) {
            h->flooding = false;
            send_event(h, NULL, -1, "resync", "{}");
            mm_log("events: the flood is over; sent resync");
        }
        if (mm_clock_now() >= next_ping) {
            char ping[64];
            int len = snprintf(ping, sizeof ping, ": ping %lld\n\n", (long long)time(NULL));
            for (client **link = &h->clients; *link;) {
                if (!write_to(*link, ping, (size_t)len))
                    drop(h, link);
                else
                    link = &(*link)->next;
            }
            next_ping = mm_clock_now() + HEARTBEAT_SECONDS;
        }
    }
    return NULL;
}

mm_sse_hub *mm_sse_hub_start(mm_app *app, mm_error *err)
{
    mm_sse_hub *h = calloc(1, sizeof *h);
    if (!h) {
        mm_fail(err, "out of memory");
        return NULL;
    }
    h->app = app;
    pthread_mutex_init(&h->mu, NULL);
    if (pipe2(h->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        mm_fail_errno(err, "pipe");
        free(h);
        return NULL;
    }
    if (pthread_create(&h->thread, NULL, hub_main, h) != 0) {
        mm_fail(err, "cannot start the events thread");
        free(h);
        return NULL;
    }
    return h;
}

void mm_api_events(mm_req *r)
{
    long long last = -1;
    const char *hdr = mm_req_header(r, "HTTP_LAST_EVENT_ID");
    char q[32];
    if ((!hdr || !*hdr) && mm_req_query(r, "last_event_id", q, sizeof q))
        hdr = q;
    if (hdr && *hdr) {
        char *end;
        last = strtoll(hdr, &end, 10);
        if (*end || last < 0) {
            mm_reply_error(r, 400, "Last-Event-ID", "the id of an event this stream sent (a non-negative integer)",
                           "'%s' is not an event id", hdr);
            return;
        }
    }
    mm_sse_hub *hub = r->app->hub;
    pthread_mutex_lock(&hub->mu);
    int open_streams = hub->n_streams;
    pthread_mutex_unlock(&hub->mu);
    if (open_streams >= MAX_STREAMS) {
        mm_reply_error(r, 503, NULL, NULL, "%d event streams are open, the most this server holds; retry later",
                       open_streams);
        return;
    }
    /* A stuck client must not stall the hub: writes give up after 10 s. */
    struct timeval tv = {10, 0};
    setsockopt(r->fcgx->ipcFd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    r->responded = true;
    FCGX_PutS("Status: 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
              "X-Accel-Buffering: no\r\n\r\nretry: 2000\n\n",
              r->fcgx->out);
    if (FCGX_FFlush(r->fcgx->out) < 0)
        return;
    client *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->req = r->fcgx;
    c->last_seq = last >= 0 ? last : 0;
    c->catch_up = last >= 0;
    c->has_token = r->has_token;
    memcpy(c->token_digest, r->token_digest, sizeof c->token_digest);
    mm_sse_hub *h = r->app->hub;
    pthread_mutex_lock(&h->mu);
    c->next = h->pending;
    h->pending = c;
    h->n_streams++;
    pthread_mutex_unlock(&h->mu);
    r->handed_off = true;
    if (write(h->wake[1], "x", 1) < 0) {
        /* The pipe is full: the hub wakes anyway. */
    }
}
