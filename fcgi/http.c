/* Request parsing and response writing over FastCGI. */
#include "fcgi/app.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/db.h"
#include "core/log.h"

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 303: return "See Other";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

PGconn *mm_req_db(mm_req *r)
{
    mm_error err = {{0}};
    if (*r->db_slot && mm_db_ensure(*r->db_slot, &err) == 0)
        return r->db = *r->db_slot;
    if (*r->db_slot) {
        PQfinish(*r->db_slot);
        *r->db_slot = NULL;
    }
    if (mm_db_connect(r->app->db_url, "mmh3-fcgi", r->db_slot, &err) < 0) {
        mm_log("%s", err.msg);
        mm_reply_error(r, 503, NULL, NULL, "the database is not reachable; try again shortly");
        return r->db = NULL;
    }
    return r->db = *r->db_slot;
}

const char *mm_req_header(mm_req *r, const char *cgi_name)
{
    return FCGX_GetParam(cgi_name, r->fcgx->envp);
}

int mm_req_body(mm_req *r, size_t max, char **body, size_t *len, int *http_status, mm_error *err)
{
    *body = NULL;
    *len = 0;
    const char *cl = mm_req_header(r, "CONTENT_LENGTH");
    char *end;
    unsigned long long n = cl && *cl ? strtoull(cl, &end, 10) : 0;
    if (cl && *cl && *end) {
        *http_status = 400;
        return mm_fail(err, "Content-Length '%s' is not a number", cl);
    }
    if (n > max) {
        *http_status = 413;
        return mm_fail(err, "the body is %llu bytes, more than the %zu accepted", n, max);
    }
    char *buf = malloc(n + 1);
    if (!buf) {
        *http_status = 500;
        return mm_fail(err, "out of memory for a %llu-byte body", n);
    }
    size_t got = 0;
    while (got < n) {
        int chunk = n - got > (1u << 30) ? (1 << 30) : (int)(n - got);
        int k = FCGX_GetStr(buf + got, chunk, r->fcgx->in);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got != n) {
        free(buf);
        *http_status = 400;
        return mm_fail(err, "the body ended after %zu of %llu bytes", got, n);
    }
    buf[n] = '\0';
    *body = buf;
    *len = n;
    return 0;
}

bool mm_url_decode(char *s)
{
    char *w = s;
    for (const char *p = s; *p; p++) {
        if (*p == '+') {
            *w++ = ' ';
        } else if (*p == '%') {
            if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2]))
                return false;
            char hex[3] = {p[1], p[2], 0};
            int v = (int)strtol(hex, NULL, 16);
            if (v == 0)
                return false;
            *w++ = (char)v;
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return true;
}

bool mm_req_query(mm_req *r, const char *name, char *buf, size_t n)
{
    size_t nl = strlen(name);
    for (const char *p = r->query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t seg = amp ? (size_t)(amp - p) : strlen(p);
        if (seg > nl && p[nl] == '=' && strncmp(p, name, nl) == 0) {
            size_t vl = seg - nl - 1;
            if (vl >= n)
                vl = n - 1;
            memcpy(buf, p + nl + 1, vl);
            buf[vl] = '\0';
            return mm_url_decode(buf) || (buf[0] = '\0', true);
        }
        if (seg == nl && strncmp(p, name, nl) == 0) {
            buf[0] = '\0';
            return true;
        }
        p = amp ? amp + 1 : NULL;
    }
    return false;
}

void mm_req_add_header(mm_req *r, const char *fmt, ...)
{
    size_t used = strlen(r->extra_headers);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->extra_headers + used, sizeof r->extra_headers - used, fmt, ap);
    va_end(ap);
    if (n < 0 || used + (size_t)n + 2 >= sizeof r->extra_headers) {
        r->extra_headers[used] = '\0'; /* does not fit: dropped whole, never cut */
        mm_log("%s %s: a response header was dropped (too long)", r->method, r->path);
        return;
    }
    strcat(r->extra_headers, "\r\n");
}

static void put_headers(mm_req *r, int status, const char *content_type)
{
    FCGX_FPrintF(r->fcgx->out,
                 "Status: %d %s\r\nContent-Type: %s\r\nCache-Control: no-store\r\n"
                 "X-Content-Type-Options: nosniff\r\n%s\r\n",
                 status, reason(status), content_type, r->extra_headers);
}

void mm_reply_text(mm_req *r, int status, const char *content_type, const char *text, size_t len)
{
    if (r->responded)
        return;
    r->responded = true;
    put_headers(r, status, content_type);
    FCGX_PutStr(text, (int)len, r->fcgx->out);
}

char *mm_json_compact(const char *text)
{
    size_t n = strlen(text);
    char *out = malloc(n + 1), *w = out;
    if (!out)
        return NULL;
    bool in_string = false;
    for (const char *p = text; *p; p++) {
        char c = *p;
        if (in_string) {
            *w++ = c;
            if (c == '\\' && p[1])
                *w++ = *++p;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
            *w++ = c;
        } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
            *w++ = c;
        }
    }
    *w = '\0';
    return out;
}

void mm_reply_raw_json(mm_req *r, int status, const char *text)
{
    char *compact = mm_json_compact(text);
    if (!compact) {
        mm_reply_text(r, 500, "application/json", "{\"status\":\"error\"}", 18);
        return;
    }
    mm_reply_text(r, status, "application/json", compact, strlen(compact));
    free(compact);
}

void mm_reply_json(mm_req *r, int status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(body);
    if (!text) {
        mm_reply_error(r, 500, NULL, NULL, "out of memory");
        return;
    }
    mm_reply_raw_json(r, status, text);
    free(text);
}

bool mm_req_is_v1(const mm_req *r)
{
    return r->path && (strcmp(r->path, "/v1") == 0 || strncmp(r->path, "/v1/", 4) == 0);
}

/* OpenAI's error type and a code for an HTTP status. */
static void openai_kind(int status, const char **type, const char **code)
{
    static const struct {
        int status;
        const char *type, *code;
    } kinds[] = {{401, "authentication_error", "invalid_api_key"},
                 {403, "permission_error", "forbidden"},
                 {404, "invalid_request_error", "not_found"},
                 {405, "invalid_request_error", "method_not_allowed"},
                 {409, "invalid_request_error", "conflict"},
                 {413, "invalid_request_error", "request_too_large"},
                 {415, "invalid_request_error", "unsupported_media_type"},
                 {429, "rate_limit_error", "rate_limit_exceeded"},
                 {503, "server_error", "service_unavailable"}};
    *type = status >= 500 ? "server_error" : "invalid_request_error";
    *code = status >= 500 ? "server_error" : "invalid_value";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].status == status)
            *type = kinds[i].type, *code = kinds[i].code;
}

json_t *mm_error_body(const mm_req *r, int status, const char *field, const char *accepted, const char *msg)
{
    char full[4096];
    snprintf(full, sizeof full, "%s%s%s%s%s", field ? field : "", field ? ": " : "", msg,
             accepted ? "; accepted: " : "", accepted ? accepted : "");
    if (!mm_req_is_v1(r))
        return json_pack("{s:s, s:s, s:{s:s?, s:s, s:s?}}", "status", "error", "status_message", full, "error",
                         "field", field, "message", msg, "accepted", accepted);
    /* OpenAI's shape, which its SDKs read: the SDK shows error.message as the
     * exception's text, so it carries the field and what is accepted too. */
    const char *type, *code;
    openai_kind(status, &type, &code);
    return json_pack("{s:{s:s, s:s, s:s?, s:s, s:s?}}", "error", "message", full, "type", type, "param", field, "code",
                     code, "accepted", accepted);
}

void mm_reply_error(mm_req *r, int status, const char *field, const char *accepted, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = mm_error_body(r, status, field, accepted, msg);
    if (status >= 500)
        mm_log("%s %s: %d %s%s%s", r->method, r->path, status, field ? field : "", field ? ": " : "", msg);
    mm_reply_json(r, status, e);
}
