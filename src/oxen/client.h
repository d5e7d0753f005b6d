/* The HTTP client every Oxen call goes through (libcurl).
 *
 * Hardened the way a process holding someone's API key must be: the key is
 * sent only as "Authorization: Bearer" to the configured hub (never on a
 * command line, never in a log line or an error message); https only, plain
 * http only to a loopback test hub; redirects are not followed (a redirect
 * is an error naming the status); connect and total timeouts; answers larger
 * than a cap are refused; proxies from the environment are bypassed for
 * loopback hubs.
 *
 * Retries: connection failures, timeouts, 429 and 5xx are retried with
 * exponential backoff (max_tries in all); other 4xx answers and malformed
 * JSON are final. Errors name the call ("POST /api/repos/a/b/workspaces"),
 * the status and the hub's own message (status_message / error.message).
 */
#ifndef MMH3_OXEN_CLIENT_H
#define MMH3_OXEN_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/error.h"
#include "oxen/remote.h"

#define MM_OXEN_TOKEN_MAX 4096

typedef struct mm_oxen_client {
    mm_oxen_remote remote;
    char token[MM_OXEN_TOKEN_MAX + 1];
    double connect_timeout; /* seconds (default 10) */
    double timeout;         /* seconds per try, whole transfer (default 60) */
    double upload_timeout;  /* seconds per try for file uploads (default 600) */
    int max_tries;          /* default 3 */
    double backoff;         /* first pause between tries, doubled each time (default 0.5 s) */
    size_t max_response;    /* bytes (default 16 MiB) */
    const char *user_agent;
    const atomic_bool *cancel; /* when set to true, calls in flight stop (NULL: never) */
} mm_oxen_client;

/* Fills the defaults above; token and remote from the arguments (the token may be ""). */
int mm_oxen_client_init(mm_oxen_client *c, const char *remote_url, const char *token, mm_error *err);

typedef struct mm_oxen_response {
    long status;  /* HTTP status of the last try; 0 when no answer came */
    char *body;   /* NUL-terminated, may be NULL */
    size_t len;
    json_t *json; /* the body parsed, when it is JSON */
} mm_oxen_response;

void mm_oxen_response_free(mm_oxen_response *r);

/* A file or field of a multipart/form-data body. */
typedef struct mm_oxen_part {
    const char *name;
    const char *value;        /* a text field, or */
    const char *file_path;    /* a file read from disk, or */
    const char *data;         /* bytes in memory (with len) */
    size_t len;
    const char *filename;     /* the name the hub stores */
    const char *content_type; /* NULL: application/octet-stream */
} mm_oxen_part;

/* One JSON call: method + path (starting with "/", appended to the origin),
 * body (NULL for none). 0 when the answer is 2xx with a JSON body (or
 * empty), -1 otherwise. resp (may be NULL) holds the last answer either way,
 * so callers can act on a 404 or 409. */
int mm_oxen_call(const mm_oxen_client *c, const char *method, const char *path, const json_t *body,
                 mm_oxen_response *resp, mm_error *err);

/* The same with a multipart/form-data body (a file upload). */
int mm_oxen_upload(const mm_oxen_client *c, const char *method, const char *path, const mm_oxen_part *parts,
                   int n_parts, mm_oxen_response *resp, mm_error *err);

/* A streamed POST of a JSON body: each chunk of a 2xx answer goes to
 * on_data as it arrives (return -1 to stop); a non-2xx answer is collected
 * and turned into the error message instead. One try: a stream cannot be
 * replayed to its reader. *status (may be NULL) is the HTTP status. */
typedef int (*mm_oxen_data_fn)(void *user, const char *data, size_t len);
int mm_oxen_stream(const mm_oxen_client *c, const char *path, const json_t *body, mm_oxen_data_fn on_data,
                   void *user, long *status, mm_error *err);

/* The hub's message in an error body ({"status_message"}, {"error":{"message"}},
 * {"error":"..."}, {"message"}), or NULL. Borrowed from json. */
const char *mm_oxen_error_message(const json_t *json);

/* Replaces every occurrence of secret (the API key) in text by "<key>", in
 * place: hub error messages are quoted to users and logs, and a hub (or a
 * proxy) might echo what it was sent. Secrets shorter than 4 bytes are left. */
void mm_oxen_redact(char *text, const char *secret);

/* "a/b c" -> "a%2Fb%20c" for one path segment (slashes kept when keep_slash). */
char *mm_oxen_escape_path(const char *s, bool keep_slash);

#endif
