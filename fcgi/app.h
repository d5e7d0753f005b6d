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
#include "core/uuid.h"

typedef struct mm_sse_hub mm_sse_hub;

typedef struct mm_app {
    const char *db_url;
    const char *outputs;       /* absolute path of the outputs folder */
    double lease_seconds;      /* a worker silent this long counts as offline */
    size_t max_upload_bytes;   /* POST /api/images body limit */
    mm_sse_hub *hub;
    /* Request safety (guard.c, limits.c; docs/SECURITY.md). */
    bool auth_required;        /* a token (Bearer or login cookie) for every non-public route */
    bool cookie_secure;        /* mark the login cookie Secure even without HTTPS from nginx */
    bool any_host;             /* Host allowlist off ("*") */
    int n_hosts;
    char **hosts;              /* allowed host names (lower case); IP literals are always allowed */
    double rate_enqueue;       /* per token per minute (bursts up to as many); 0 = unlimited */
    double rate_upload;
    double rate_rewrite;
    long max_queued;           /* queued generations beyond which enqueue answers 429; 0 = unlimited */
    const char *oxen_token;    /* MMH3_OXEN_TOKEN: the rewrite's key when none is stored, or NULL */
    const char *oxen_remote;   /* MMH3_OXEN_REMOTE: the hub the rewrite calls, or NULL for the default */
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
    bool has_token;            /* authenticated by a token (set by the guard) */
    unsigned char token_digest[32];
    char auth_name[72];        /* the token's name; "" when authentication is off */
    char extra_headers[512];   /* "Name: value\r\n" lines added to the response */
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
/* The API's error body: {status:"error", status_message, error:{field, message, accepted}};
 * on /v1 OpenAI's {error:{message, type, param, code}} (message = the whole
 * "field: problem; accepted: ..." line), which OpenAI's SDKs read. */
bool mm_req_is_v1(const mm_req *r);
json_t *mm_error_body(const mm_req *r, int status, const char *field, const char *accepted, const char *msg);
void mm_reply_error(mm_req *r, int status, const char *field, const char *accepted, const char *fmt, ...)
    MM_PRINTF(5, 6);

/* A copy of a JSON text without the whitespace between tokens (PostgreSQL's
 * json/jsonb output has spaces); caller frees. */
char *mm_json_compact(const char *text);

/* Reads and parses a JSON request body (Content-Type: application/json,
 * at most 1 MiB); NULL after answering the error itself. */
json_t *mm_req_json(mm_req *r);

/* The rewrite model when the settings name none. */
#define MM_REWRITE_MODEL_DEFAULT "claude-sonnet-4-6"

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
void mm_api_loras(mm_req *r);
void mm_api_settings_get(mm_req *r);
void mm_api_settings_put(mm_req *r);
void mm_api_docs(mm_req *r);
void mm_api_events(mm_req *r);
void mm_api_rewrite(mm_req *r);
void mm_api_video_create(mm_req *r);
void mm_api_video_get(mm_req *r, const char *id);
void mm_api_video_list(mm_req *r);
void mm_api_video_delete(mm_req *r, const char *id);
void mm_api_video_content(mm_req *r, const char *id);

/* Request safety in front of every route (guard.c): the Host allowlist,
 * Origin / Sec-Fetch-Site on unsafe methods, and, when `needs_token`, a valid
 * token. False after it answered the refusal itself. */
bool mm_guard(mm_req *r, bool needs_token);
/* Limits (limits.c): per-token rates and the queue bound; false after answering 429. */
bool mm_limit_enqueue(mm_req *r);
bool mm_limit_upload(mm_req *r);
bool mm_limit_rewrite(mm_req *r);
/* Tokens (auth.c): the process's cache of active token hashes. */
void mm_auth_invalidate(void);
int mm_auth_refresh(PGconn *db, mm_error *err);
/* 1 and the name when the digest is an active token's, 0 when not, -1 on database trouble. */
int mm_auth_lookup(PGconn *db, const unsigned char digest[32], char *name, size_t n, mm_error *err);
/* Whether the digest is in the cache as it is (right after mm_auth_refresh). */
bool mm_auth_cached(const unsigned char digest[32]);
/* The token a request carries (Authorization: Bearer, else the login cookie); false when none. */
bool mm_auth_credential(mm_req *r, char *token, size_t n);
/* Adds a response header line (e.g. "Retry-After: 3"). */
void mm_req_add_header(mm_req *r, const char *fmt, ...) MM_PRINTF(2, 3);

/* Login (login.c): the page, the cookie, who is asking; and nginx's auth_request. */
void mm_page_login(mm_req *r);
void mm_api_login(mm_req *r);
void mm_api_logout(mm_req *r);
void mm_api_session(mm_req *r);
void mm_api_auth_check(mm_req *r);

void mm_route(mm_req *r);

/* The SSE hub thread (events.c). */
mm_sse_hub *mm_sse_hub_start(mm_app *app, mm_error *err);

#endif
