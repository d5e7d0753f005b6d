/* Request safety, checked in front of every route (router.c), in this order:
 *
 * 1. Host allowlist (DNS rebinding): a Host that is an IP literal is fine
 *    (the browser's origin is then that address, nothing was rebound); a name
 *    must be one this server answers to (localhost, its host name, <host>.local
 *    and --allow-host / MMH3_ALLOWED_HOSTS). Also what nginx's auth_request
 *    asks about files, so a rebound page cannot read clips either.
 * 2. Cross-site requests (CSRF) on unsafe methods: Sec-Fetch-Site other than
 *    same-origin/none, or an Origin whose host:port is not the Host, is
 *    refused. Requests with neither header (curl, scripts, the CLI) pass:
 *    browsers send Origin on every cross-origin POST/PUT/PATCH/DELETE.
 * 3. A token, when the server requires one (any bind beyond loopback):
 *    `Authorization: Bearer <token>` or the login cookie (HttpOnly,
 *    SameSite=Strict), checked against the hashes in the database.
 */
#include "fcgi/app.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "auth/tokens.h"
#include "core/log.h"

static bool unsafe_method(const char *m)
{
    return strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0 && strcmp(m, "OPTIONS") != 0;
}

/* host[:port] → the host part, lower-cased, brackets kept for IPv6. */
static bool host_part(const char *authority, char *out, size_t n)
{
    size_t len = strlen(authority);
    if (authority[0] == '[') {
        const char *close = strchr(authority, ']');
        if (!close || (close[1] && close[1] != ':'))
            return false;
        len = (size_t)(close - authority) + 1;
    } else {
        const char *colon = strrchr(authority, ':');
        if (colon) {
            for (const char *p = colon + 1; *p; p++)
                if (!isdigit((unsigned char)*p))
                    return false;
            len = (size_t)(colon - authority);
        }
    }
    if (len == 0 || len >= n)
        return false;
    for (size_t i = 0; i < len; i++)
        out[i] = (char)tolower((unsigned char)authority[i]);
    out[len] = '\0';
    return true;
}

static bool is_ip_literal(const char *host)
{
    unsigned char buf[16];
    if (host[0] == '[') {
        char inner[64];
        size_t len = strlen(host);
        if (len < 3 || len - 2 >= sizeof inner)
            return false;
        memcpy(inner, host + 1, len - 2);
        inner[len - 2] = '\0';
        return inet_pton(AF_INET6, inner, buf) == 1;
    }
    return inet_pton(AF_INET, host, buf) == 1;
}

static bool host_allowed(const mm_app *a, const char *host)
{
    if (a->any_host || is_ip_literal(host))
        return true;
    for (int i = 0; i < a->n_hosts; i++)
        if (strcmp(a->hosts[i], host) == 0)
            return true;
    return false;
}

/* host[:port] without a default port, lower-cased, for comparing origins. */
static void normalize_authority(const char *in, size_t len, char *out, size_t n)
{
    if (len >= n)
        len = n - 1;
    for (size_t i = 0; i < len; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[len] = '\0';
    size_t l = strlen(out);
    if (l > 3 && strcmp(out + l - 3, ":80") == 0)
        out[l - 3] = '\0';
    else if (l > 4 && strcmp(out + l - 4, ":443") == 0)
        out[l - 4] = '\0';
}

static void refuse(mm_req *r, int status, const char *accepted, const char *what, const char *value)
{
    /* Echo at most a short, printable excerpt of what was sent. */
    char shown[96];
    size_t w = 0;
    for (const char *p = value ? value : ""; *p && w + 1 < sizeof shown; p++)
        shown[w++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    shown[w] = '\0';
    mm_log("refused %s %s: %s '%s'", r->method, r->path, what, shown);
    mm_reply_error(r, status, NULL, accepted, "%s '%s'", what, shown);
}

bool mm_guard(mm_req *r, bool needs_token)
{
    mm_app *a = r->app;
    const char *host = mm_req_header(r, "HTTP_HOST");
    char h[256] = "";
    if (host && *host && (!host_part(host, h, sizeof h) || !host_allowed(a, h))) {
        refuse(r, 403, "this server's own names (see --allow-host) or an IP address",
               "requests must name this server; this one was sent to", host);
        return false;
    }

    if (unsafe_method(r->method)) {
        const char *site = mm_req_header(r, "HTTP_SEC_FETCH_SITE");
        if (site && *site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0) {
            refuse(r, 403, "requests from this server's own pages (Sec-Fetch-Site: same-origin)",
                   "cross-site request refused: Sec-Fetch-Site is", site);
            return false;
        }
        const char *origin = mm_req_header(r, "HTTP_ORIGIN");
        if (origin && *origin) {
            const char *sep = strstr(origin, "://");
            char o[256], self[256];
            if (!sep || strcmp(origin, "null") == 0 || !host || !*host) {
                refuse(r, 403, "requests from this server's own pages", "cross-origin request refused: Origin is",
                       origin);
                return false;
            }
            const char *auth = sep + 3;
            normalize_authority(auth, strcspn(auth, "/"), o, sizeof o);
            normalize_authority(host, strlen(host), self, sizeof self);
            if (strcmp(o, self) != 0) {
                refuse(r, 403, "requests from this server's own pages", "cross-origin request refused: Origin is",
                       origin);
                return false;
            }
        }
    }

    char token[512];
    bool presented = mm_auth_credential(r, token, sizeof token);
    if (presented) {
        mm_token_digest(token, strlen(token), r->token_digest);
        memset(token, 0, sizeof token);
    }
    if (!a->auth_required) {
        r->has_token = false; /* nobody is asked: the identity is the machine's */
        return true;
    }
    if (presented) {
        PGconn *db = mm_req_db(r);
        if (!db)
            return false;
        mm_error err = {{0}};
        int found = mm_auth_lookup(db, r->token_digest, r->auth_name, sizeof r->auth_name, &err);
        if (found < 0) {
            mm_log("%s", err.msg);
            mm_reply_error(r, 503, NULL, NULL, "the access tokens cannot be read; try again shortly");
            return false;
        }
        if (found) {
            r->has_token = true;
            return true;
        }
    }
    if (!needs_token)
        return true;
    mm_req_add_header(r, "WWW-Authenticate: Bearer realm=\"mmh3\"");
    mm_reply_error(r, 401, NULL, "Authorization: Bearer <token>, or the login cookie (log in at /login)",
                   presented ? "the access token is not valid (mistyped, or revoked)"
                             : "this server requires an access token");
    return false;
}
