/* The login page and its cookie, for browsers: EventSource and <video>
 * cannot send an Authorization header, so the web app rides on a cookie that
 * holds the token itself (HttpOnly: page scripts cannot read it;
 * SameSite=Strict: other sites' requests do not carry it; Secure behind TLS).
 * Revoking the token ends every session that uses it.
 *
 *   GET  /login          a small form (no scripts)
 *   POST /api/login      form (token, next) → cookie + 303 to next; JSON {token} → 200
 *   POST /api/logout     clears the cookie
 *   GET  /api/session    {auth_required, authenticated, token_name}
 *   GET  /_mmh3_auth     nginx's auth_request for /api/files/ and uploads: 204 when allowed
 */
#include "fcgi/app.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/tokens.h"
#include "core/log.h"

#define COOKIE_SECONDS (30 * 24 * 3600)

/* A local path to return to: "/..." but not "//..." or "/\...", printable ASCII. */
static bool safe_next(const char *next)
{
    if (!next || next[0] != '/' || next[1] == '/' || next[1] == '\\' || strlen(next) > 1024)
        return false;
    for (const char *p = next; *p; p++)
        if (*p < 0x21 || *p > 0x7e || *p == '\\')
            return false;
    return true;
}

static void html_escape(const char *in, char *out, size_t n)
{
    size_t w = 0;
    for (const char *p = in; *p && w + 7 < n; p++) {
        const char *rep = *p == '&' ? "&amp;" : *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '"' ? "&quot;"
                        : *p == '\'' ? "&#39;" : NULL;
        if (rep) {
            size_t k = strlen(rep);
            memcpy(out + w, rep, k);
            w += k;
        } else {
            out[w++] = *p;
        }
    }
    out[w] = '\0';
}

static void login_page(mm_req *r, int status, const char *next, const char *message)
{
    char esc_next[2048], esc_msg[512];
    html_escape(safe_next(next) ? next : "/", esc_next, sizeof esc_next);
    html_escape(message ? message : "", esc_msg, sizeof esc_msg);
    char page[8192];
    int n;
    if (!r->app->auth_required) {
        n = snprintf(page, sizeof page,
                     "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport "
                     "content=\"width=device-width\"><title>mmh3</title><body style=\"font:16px system-ui;"
                     "background:#111;color:#ddd;display:grid;place-items:center;height:90vh\"><p>This server "
                     "listens on loopback only and needs no login. <a style=\"color:#8cf\" href=\"%s\">"
                     "Continue</a></p></body></html>\n",
                     esc_next);
    } else {
        n = snprintf(page, sizeof page,
                     "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport "
                     "content=\"width=device-width\"><title>mmh3 — log in</title>"
                     "<style>body{font:16px system-ui,sans-serif;background:#111;color:#ddd;display:grid;"
                     "place-items:center;height:90vh;margin:0}form{display:grid;gap:12px;width:min(440px,90vw)}"
                     "input{font:14px ui-monospace,monospace;padding:10px;border-radius:6px;border:1px solid #444;"
                     "background:#1b1b1b;color:#eee}button{padding:10px;border-radius:6px;border:0;background:#3a7;"
                     "color:#fff;font-weight:600}p.err{color:#f77;margin:0}small{color:#888}</style>"
                     "<body><form method=post action=/api/login><h1 style=\"margin:0\">mmh3</h1>"
                     "<label for=token>Access token</label><input id=token name=token type=password required "
                     "autocomplete=current-password autofocus placeholder=\"mmh3_…\">"
                     "<input type=hidden name=next value=\"%s\">%s%s%s<button type=submit>Log in</button>"
                     "<small>Tokens come from <code>mmh3 token create NAME</code> (the first one is printed when "
                     "<code>mmh3 serve</code> first starts).</small></form></body></html>\n",
                     esc_next, esc_msg[0] ? "<p class=err role=alert>" : "", esc_msg, esc_msg[0] ? "</p>" : "");
    }
    mm_req_add_header(r, "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; "
                         "form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
    mm_req_add_header(r, "X-Frame-Options: DENY");
    mm_req_add_header(r, "Referrer-Policy: same-origin");
    mm_reply_text(r, status, "text/html; charset=utf-8", page, (size_t)(n < (int)sizeof page ? n : (int)sizeof page - 1));
}

void mm_page_login(mm_req *r)
{
    char next[1100] = "/";
    if (!mm_req_query(r, "next", next, sizeof next) || !safe_next(next))
        snprintf(next, sizeof next, "/");
    login_page(r, 200, next, NULL);
}

static bool secure(mm_req *r)
{
    const char *https = mm_req_header(r, "HTTPS");
    return r->app->cookie_secure || (https && strcasecmp(https, "on") == 0);
}

/* A field of an application/x-www-form-urlencoded body, decoded. */
static bool form_field(char *body, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (char *p = body; p && *p;) {
        char *amp = strchr(p, '&');
        size_t seg = amp ? (size_t)(amp - p) : strlen(p);
        if (seg > nl && p[nl] == '=' && strncmp(p, name, nl) == 0) {
            size_t vl = seg - nl - 1;
            if (vl >= n)
                return false;
            memcpy(out, p + nl + 1, vl);
            out[vl] = '\0';
            return mm_url_decode(out);
        }
        p = amp ? amp + 1 : NULL;
    }
    return false;
}

void mm_api_login(mm_req *r)
{
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    bool json = ct && strncasecmp(ct, "application/json", 16) == 0;
    bool form = ct && strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0;
    if (!json && !form) {
        mm_reply_error(r, 415, NULL, "application/x-www-form-urlencoded (token, next) or application/json {token}",
                       "the login body must be a form or JSON");
        return;
    }
    char *body;
    size_t len;
    int status;
    mm_error err = {{0}};
    if (mm_req_body(r, 8192, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return;
    }
    char token[512] = "", next[1100] = "/";
    if (form) {
        form_field(body, "token", token, sizeof token);
        if (!form_field(body, "next", next, sizeof next) || !safe_next(next))
            snprintf(next, sizeof next, "/");
    } else {
        json_t *j = json_loadb(body, len, 0, NULL);
        const char *t = json_string_value(json_object_get(j, "token"));
        if (t && strlen(t) < sizeof token)
            snprintf(token, sizeof token, "%s", t);
        json_decref(j);
    }
    memset(body, 0, len);
    free(body);
    /* Surrounding blanks from a copy and paste are not part of a token. */
    char *t = token;
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')
        t++;
    size_t tl = strlen(t);
    while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t' || t[tl - 1] == '\n' || t[tl - 1] == '\r'))
        t[--tl] = '\0';

    if (!r->app->auth_required) {
        if (form) {
            mm_req_add_header(r, "Location: %s", next);
            mm_reply_text(r, 303, "text/plain", "", 0);
        } else {
            mm_reply_json(r, 200, json_pack("{s:s, s:b}", "status", "success", "auth_required", 0));
        }
        return;
    }
    unsigned char digest[32];
    mm_token_digest(t, tl, digest);
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char name[MM_TOKEN_NAME_MAX + 8];
    int found = tl ? mm_auth_lookup(db, digest, name, sizeof name, &err) : 0;
    if (found < 0) {
        mm_log("%s", err.msg);
        mm_reply_error(r, 503, NULL, NULL, "the access tokens cannot be read; try again shortly");
    } else if (!found) {
        mm_log("login refused: a wrong or revoked token");
        if (form)
            login_page(r, 401, next, "That token is not valid (mistyped, or revoked).");
        else
            mm_reply_error(r, 401, "token", "an active access token (mmh3 token create NAME)",
                           "is not valid (mistyped, or revoked)");
    } else {
        mm_req_add_header(r, "Set-Cookie: mmh3_token=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict%s", t,
                          COOKIE_SECONDS, secure(r) ? "; Secure" : "");
        if (form) {
            mm_req_add_header(r, "Location: %s", next);
            mm_reply_text(r, 303, "text/plain", "", 0);
        } else {
            mm_reply_json(r, 200, json_pack("{s:s, s:s}", "status", "success", "token_name", name));
        }
    }
    memset(token, 0, sizeof token);
}

void mm_api_logout(mm_req *r)
{
    mm_req_add_header(r, "Set-Cookie: mmh3_token=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict%s",
                      secure(r) ? "; Secure" : "");
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    if (ct && strncasecmp(ct, "application/json", 16) == 0) {
        mm_reply_json(r, 200, json_pack("{s:s}", "status", "success"));
    } else {
        mm_req_add_header(r, "Location: /login");
        mm_reply_text(r, 303, "text/plain", "", 0);
    }
}

void mm_api_session(mm_req *r)
{
    mm_reply_json(r, 200, json_pack("{s:b, s:b, s:s?}", "auth_required", r->app->auth_required, "authenticated",
                                    !r->app->auth_required || r->has_token, "token_name",
                                    r->has_token ? r->auth_name : NULL));
}

void mm_api_auth_check(mm_req *r)
{
    /* The guard ran already (router.c); only the files' own shape is left:
     * nginx's regex locations admit generated names only, this re-checks. */
    const char *uri = mm_req_header(r, "REQUEST_URI");
    if (uri && strncmp(uri, "/api/files/", 11) == 0 &&
        (strstr(uri, "..") || strchr(uri, '\\') || strstr(uri, "%") || strstr(uri, "/."))) {
        mm_reply_error(r, 403, NULL, "/api/files/generations/<id>.mp4|jpg, /api/files/uploads/<id>.<ext>",
                       "not a file this server serves");
        return;
    }
    mm_reply_text(r, 204, "text/plain", "", 0);
}
