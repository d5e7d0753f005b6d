/* Method + path -> handler. Paths arrive from nginx already normalised
 * ($document_uri: decoded, dot segments resolved). Every request passes the
 * guard first (guard.c: Host allowlist, cross-site checks, the token where
 * the server requires one); only the login flow and the API description are
 * public. */
#include "fcgi/app.h"

#include <string.h>

static bool is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* Matches "<prefix><id>" (an optional trailing slash allowed); *id points into buf. */
static bool match_id(const char *path, const char *prefix, char *buf, size_t n)
{
    size_t pl = strlen(prefix);
    if (strncmp(path, prefix, pl) != 0)
        return false;
    const char *rest = path + pl;
    size_t len = strlen(rest);
    if (len && rest[len - 1] == '/')
        len--;
    if (len == 0 || len >= n || memchr(rest, '/', len))
        return false;
    memcpy(buf, rest, len);
    buf[len] = '\0';
    return true;
}

/* Matches "/v1/videos/<id>/content". */
static bool match_video_content(const char *path, char *buf, size_t n)
{
    static const char prefix[] = "/v1/videos/", suffix[] = "/content";
    size_t pl = sizeof prefix - 1, sl = sizeof suffix - 1, len = strlen(path);
    if (len <= pl + sl || strncmp(path, prefix, pl) != 0 || strcmp(path + len - sl, suffix) != 0)
        return false;
    size_t idl = len - pl - sl;
    if (idl >= n || memchr(path + pl, '/', idl))
        return false;
    memcpy(buf, path + pl, idl);
    buf[idl] = '\0';
    return true;
}

static void not_allowed(mm_req *r, const char *allowed)
{
    mm_reply_error(r, 405, NULL, allowed, "%s is not allowed on %s", r->method, r->path);
}

static bool is_docs(const char *p)
{
    return is(p, "/openapi.json") || is(p, "/docs") || is(p, "/docs/") || is(p, "/docs/openapi.json") ||
           is(p, "/api/openapi.json");
}

static bool is_public(const char *p)
{
    return is(p, "/login") || is(p, "/api/login") || is(p, "/api/logout") || is(p, "/api/session") || is_docs(p);
}

/* nginx's error_page for a body over client_max_body_size lands here, after
 * the guard: the original request's path is the one answered for. */
static bool too_large_redirect(mm_req *r, char *original, size_t n)
{
    if (!is(r->path, "/_mmh3_413"))
        return false;
    const char *uri = mm_req_header(r, "REQUEST_URI");
    snprintf(original, n, "%.*s", uri ? (int)strcspn(uri, "?") : 1, uri ? uri : "/");
    r->path = original;
    return true;
}

static void reply_too_large(mm_req *r)
{
    if (is(r->path, "/api/images"))
        mm_reply_error(r, 413, NULL, "at most the server's upload limit in one request (mmh3 serve --upload-mb)",
                       "the upload is larger than this server accepts (%zu MiB)", r->app->max_upload_bytes >> 20);
    else
        mm_reply_error(r, 413, NULL, "a JSON body of at most 1 MiB (uploads go to POST /api/images)",
                       "the request body is larger than this server accepts");
}

void mm_route(mm_req *r)
{
    char original[2048];
    if (too_large_redirect(r, original, sizeof original)) {
        if (mm_guard(r, !is_public(r->path)))
            reply_too_large(r);
        return;
    }
    /* HEAD is answered as GET: nginx sends the headers and drops the body. */
    bool head = is(r->method, "HEAD");
    const char *m = head ? "GET" : r->method, *p = r->path;
    char id[64];

    if (!mm_guard(r, !is_public(p)))
        return;

    if (is(p, "/_mmh3_auth")) {
        /* nginx's auth_request (files, uploads): the guard above was the check. */
        mm_api_auth_check(r);
    } else if (is(p, "/login")) {
        if (is(m, "GET"))
            mm_page_login(r);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/login") || is(p, "/api/logout")) {
        if (!is(m, "POST"))
            not_allowed(r, "POST");
        else if (is(p, "/api/login"))
            mm_api_login(r);
        else
            mm_api_logout(r);
    } else if (is(p, "/api/session")) {
        if (is(m, "GET"))
            mm_api_session(r);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/ai/queue") || is(p, "/api/ai/queue/")) {
        if (is(m, "POST")) {
            if (mm_limit_enqueue(r))
                mm_api_enqueue(r);
        }
        else if (is(m, "GET"))
            mm_api_list(r);
        else
            not_allowed(r, "GET, POST");
    } else if (match_id(p, "/api/ai/queue/", id, sizeof id)) {
        if (!mm_is_uuid(id))
            mm_reply_error(r, 404, NULL, "a generation_id (UUID)", "'%s' is not a generation id", id);
        else if (is(m, "GET"))
            mm_api_get(r, id);
        else if (is(m, "PATCH"))
            mm_api_patch(r, id);
        else if (is(m, "DELETE"))
            mm_api_delete(r, id);
        else
            not_allowed(r, "GET, PATCH, DELETE");
    } else if (is(p, "/api/images") || is(p, "/api/images/")) {
        if (is(m, "POST")) {
            if (mm_limit_upload(r))
                mm_api_upload(r);
        }
        else
            not_allowed(r, "POST");
    } else if (match_id(p, "/api/images/", id, sizeof id)) {
        if (!mm_is_uuid(id))
            mm_reply_error(r, 404, NULL, "an image_id (UUID)", "'%s' is not an image id", id);
        else if (is(m, "GET"))
            mm_api_upload_get(r, id);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/events")) {
        if (head) /* the stream never ends: its headers alone */
            mm_reply_text(r, 200, "text/event-stream", "", 0);
        else if (is(m, "GET"))
            mm_api_events(r);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/status")) {
        if (is(m, "GET"))
            mm_api_status(r);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/loras")) {
        if (is(m, "GET"))
            mm_api_loras(r);
        else
            not_allowed(r, "GET");
    } else if (is(p, "/api/settings")) {
        if (is(m, "GET"))
            mm_api_settings_get(r);
        else if (is(m, "PUT"))
            mm_api_settings_put(r);
        else
            not_allowed(r, "GET, PUT");
    } else if (is(p, "/api/rewrite")) {
        if (is(m, "POST")) {
            if (mm_limit_rewrite(r)) /* each rewrite spends the owner's Oxen credits */
                mm_api_rewrite(r);
        }
        else
            not_allowed(r, "POST");
    } else if (is(p, "/v1/videos") || is(p, "/v1/videos/")) {
        if (is(m, "POST")) {
            if (mm_limit_enqueue(r)) /* the same queue as POST /api/ai/queue, the same limits */
                mm_api_video_create(r);
        } else if (is(m, "GET")) {
            mm_api_video_list(r);
        } else {
            not_allowed(r, "GET, POST");
        }
    } else if (match_video_content(p, id, sizeof id)) {
        if (!mm_is_uuid(id))
            mm_reply_error(r, 404, NULL, "a video id (UUID)", "'%s' is not a video id", id);
        else if (is(m, "GET"))
            mm_api_video_content(r, id);
        else
            not_allowed(r, "GET");
    } else if (match_id(p, "/v1/videos/", id, sizeof id)) {
        if (!mm_is_uuid(id))
            mm_reply_error(r, 404, NULL, "a video id (UUID)", "'%s' is not a video id", id);
        else if (is(m, "GET"))
            mm_api_video_get(r, id);
        else if (is(m, "DELETE"))
            mm_api_video_delete(r, id);
        else
            not_allowed(r, "GET, DELETE");
    } else if (is_docs(p)) {
        if (is(m, "GET"))
            mm_api_docs(r);
        else
            not_allowed(r, "GET");
    } else {
        mm_reply_error(r, 404, NULL, NULL, "no such API route: %s %s (see /docs)", m, p);
    }
}
