/* mmh3-fcgi: the HTTP API behind nginx. Shared state of the process and the
 * per-request context every handler receives. */
#ifndef MMH3_FCGI_APP_H
#define MMH3_FCGI_APP_H

#include <stdbool.h>
#include <stddef.h>

#include <fcgiapp.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "core/error.h"
#include "fcgi/uuid.h"

typedef struct mm_sse_hub mm_sse_hub;

typedef struct mm_app {
    const char *db_url;
    const char *outputs;       /* absolute path of the outputs folder */
    double lease_seconds;      /* a worker silent this long counts as offline */
    size_t max_upload_bytes;   /* POST /api/images body limit */
    mm_sse_hub *hub;
} mm_app;

typedef struct mm_req {
    mm_app *app;
    FCGX_Request *fcgx;
    PGconn *db;                /* the thread's connection (may be NULL until mm_req_db) */
    PGconn **db_slot;
    const char *method;
    const char *path;          /* without the query string */
    const char *query;         /* may be "" */
    bool handed_off;           /* the SSE hub owns fcgx now */
    bool responded;
} mm_req;

/* The thread's database connection, (re)connected on demand; on failure
 * it answers 503 itself and returns NULL. */
PGconn *mm_req_db(mm_req *r);

const char *mm_req_header(mm_req *r, const char *cgi_name); /* e.g. "HTTP_LAST_EVENT_ID" */

/* Reads the whole body (at most max bytes); *body is NUL-terminated and owned by the caller. */
int mm_req_body(mm_req *r, size_t max, char **body, size_t *len, int *http_status, mm_error *err);

/* Looks up a query parameter, URL-decoded into buf; false when absent. */
bool mm_req_query(mm_req *r, const char *name, char *buf, size_t n);

void mm_reply_json(mm_req *r, int status, json_t *body);          /* steals body */
void mm_reply_raw_json(mm_req *r, int status, const char *text);   /* text is a JSON document */
void mm_reply_text(mm_req *r, int status, const char *content_type, const char *text, size_t len);
/* The API's error body: {status:"error", status_message, error:{field, message, accepted}}. */
void mm_reply_error(mm_req *r, int status, const char *field, const char *accepted, const char *fmt, ...)
    MM_PRINTF(5, 6);

/* A copy of a JSON text without the whitespace between tokens (PostgreSQL's
 * json/jsonb output has spaces); caller frees. */
char *mm_json_compact(const char *text);

/* Decodes %xx and '+' in place; false on malformed escapes or NUL. */
bool mm_url_decode(char *s);

/* Handlers (router.c dispatches). */
void mm_api_enqueue(mm_req *r);
void mm_api_list(mm_req *r);
void mm_api_get(mm_req *r, const char *id);
void mm_api_patch(mm_req *r, const char *id);
void mm_api_delete(mm_req *r, const char *id);
void mm_api_upload(mm_req *r);
void mm_api_upload_get(mm_req *r, const char *id);
void mm_api_status(mm_req *r);
void mm_api_settings_get(mm_req *r);
void mm_api_settings_put(mm_req *r);
void mm_api_docs(mm_req *r);
void mm_api_events(mm_req *r);

void mm_route(mm_req *r);

/* The SSE hub thread (events.c). */
mm_sse_hub *mm_sse_hub_start(mm_app *app, mm_error *err);

#endif
