#include "oxen/client.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "config.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int mm_oxen_client_init(mm_oxen_client *c, const char *remote_url, const char *token, mm_error *err)
{
    memset(c, 0, sizeof *c);
    c->connect_timeout = 10;
    c->timeout = 60;
    c->upload_timeout = 600;
    c->max_tries = 3;
    c->backoff = 0.5;
    c->max_response = 16u << 20;
    c->user_agent = "mmh3/" PACKAGE_VERSION;
    if (token && strlen(token) > MM_OXEN_TOKEN_MAX)
        return mm_fail(err, "the Oxen API key is longer than %d characters", MM_OXEN_TOKEN_MAX);
    for (const char *t = token; t && *t; t++)
        if ((unsigned char)*t < 0x21 || *t == 0x7f)
            return mm_fail(err, "the Oxen API key contains a space or control character");
    snprintf(c->token, sizeof c->token, "%s", token ? token : "");
    pthread_once(&curl_once, curl_init);
    return mm_oxen_remote_parse(remote_url, &c->remote, err);
}

void mm_oxen_response_free(mm_oxen_response *r)
{
    if (!r)
        return;
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

const char *mm_oxen_error_message(const json_t *j)
{
    if (!json_is_object(j))
        return NULL;
    const char *s = json_string_value(json_object_get(j, "status_message"));
    json_t *e = json_object_get(j, "error");
    if (json_is_object(e) && json_string_value(json_object_get(e, "message")))
        s = json_string_value(json_object_get(e, "message"));
    else if (json_is_string(e))
        s = json_string_value(e);
    if (!s)
        s = json_string_value(json_object_get(j, "message"));
    if (!s)
        s = json_string_value(json_object_get(j, "detail"));
    return s;
}

void mm_oxen_redact(char *text, const char *secret)
{
    size_t kl = secret ? strlen(secret) : 0;
    if (kl < 4)
        return;
    for (char *p = strstr(text, secret); p; p = strstr(p, secret)) {
        memmove(p + 5, p + kl, strlen(p + kl) + 1); /* "<key>" is never longer than the key here */
        memcpy(p, "<key>", 5);
        p += 5;
    }
}

char *mm_oxen_escape_path(const char *s, bool keep_slash)
{
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1), *w = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/'))
            *w++ = (char)*p;
        else
            w += sprintf(w, "%%%02X", *p);
    }
    *w = '\0';
    return out;
}

/* ---------------------------------------------------------------- transfers */

typedef struct transfer {
    const mm_oxen_client *c;
    char *buf;
    size_t len, cap;
    bool too_big;
    /* streaming: 2xx chunks go to on_data */
    CURL *h;
    mm_oxen_data_fn on_data;
    void *user;
    bool stopped;
} transfer;

static size_t on_write(char *data, size_t size, size_t nmemb, void *user)
{
    transfer *t = user;
    size_t n = size * nmemb;
    if (t->on_data) {
        long status = 0;
        curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && status < 300) {
            if (t->on_data(t->user, data, n) < 0) {
                t->stopped = true;
                return 0; /* CURLE_WRITE_ERROR ends the transfer */
            }
            return n;
        }
        /* An error answer: collect it below for the message. */
    }
    if (t->len + n > t->c->max_response) {
        t->too_big = true;
        return 0;
    }
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b)
            return 0;
        t->buf = b, t->cap = cap;
    }
    memcpy(t->buf + t->len, data, n);
    t->len += n;
    t->buf[t->len] = '\0';
    return n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    transfer *t = user;
    return t->c->cancel && atomic_load(t->c->cancel) ? 1 : 0;
}

static bool cancelled(const mm_oxen_client *c)
{
    return c->cancel && atomic_load(c->cancel);
}

/* Sleeps, waking early when the client is cancelled. */
static void pause_seconds(const mm_oxen_client *c, double s)
{
    while (s > 0 && !cancelled(c)) {
        double step = s < 0.05 ? s : 0.05;
        struct timespec ts = {0, (long)(step * 1e9)};
        nanosleep(&ts, NULL);
        s -= step;
    }
}

/* A short printable excerpt of an answer, for messages. */
static void excerpt(const char *s, size_t len, char *out, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < len && w + 4 < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        out[w++] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
    }
    if (len > 0 && w + 4 >= n) {
        memcpy(out + w, "...", 3);
        w += 3;
    }
    out[w] = '\0';
}

static CURL *make_handle(const mm_oxen_client *c, const char *method, const char *url, struct curl_slist **headers,
                         transfer *t, char *errbuf, double timeout)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, c->remote.loopback ? "http,https" : "https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->connect_timeout * 1000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout > 0 ? (long)(timeout * 1000) : 0L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, t);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->max_response);
    if (c->remote.loopback)
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (c->token[0]) {
        char auth[MM_OXEN_TOKEN_MAX + 32];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token);
        *headers = curl_slist_append(*headers, auth);
        explicit_bzero(auth, sizeof auth);
    }
    t->h = h;
    return h;
}

static bool retryable(CURLcode rc, long status)
{
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_GOT_NOTHING ||
        rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_PARTIAL_FILE || rc == CURLE_SSL_CONNECT_ERROR)
        return true;
    return rc == CURLE_OK && (status == 429 || status >= 500);
}

/* Turns the outcome of one try into 0 or -1 + message. */
static int judge(const mm_oxen_client *c, const char *method, const char *path, CURLcode rc, long status,
                 const transfer *t, const char *errbuf, double timeout, mm_oxen_response *resp, mm_error *err)
{
    char ex[160];
    resp->status = rc == CURLE_OK || rc == CURLE_WRITE_ERROR ? status : 0;
    resp->body = t->buf;
    resp->len = t->len;
    if (cancelled(c))
        return mm_fail(err, "%s %s: stopped (the worker is shutting down)", method, path);
    if (t->too_big || rc == CURLE_FILESIZE_EXCEEDED)
        return mm_fail(err, "%s %s: the answer is larger than %zu bytes", method, path, c->max_response);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return mm_fail(err, "%s %s: no complete answer from %s within %g s (timed out)", method, path,
                       c->remote.origin, timeout);
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)
        return mm_fail(err, "%s %s: cannot connect to %s (%s); is the hub down or the remote wrong?", method, path,
                       c->remote.origin, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    if (rc == CURLE_UNSUPPORTED_PROTOCOL)
        return mm_fail(err, "%s %s: refused to use that protocol (https only, or http to a loopback hub)", method,
                       path);
    if (rc != CURLE_OK)
        return mm_fail(err, "%s %s: %s", method, path, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    json_t *j = NULL;
    if (t->len) {
        json_error_t je;
        j = json_loadb(t->buf, t->len, JSON_DECODE_ANY, &je);
    }
    resp->json = j;
    if (status >= 300 && status < 400)
        return mm_fail(err, "%s %s: HTTP %ld, a redirect, which is not followed (check the remote URL)", method,
                       path, status);
    if (status < 200 || status >= 300) {
        const char *hub = mm_oxen_error_message(j);
        excerpt(hub ? hub : t->buf ? t->buf : "", hub ? strlen(hub) : t->len, ex, sizeof ex);
        const char *hint = status == 401 || status == 403 ? " (the hub refused the API key)"
                           : status == 404                ? " (not found)"
                           : status == 429                ? " (rate limited)"
                                                          : "";
        return mm_fail(err, "%s %s: HTTP %ld%s%s%s", method, path, status, hint, ex[0] ? ": " : "", ex);
    }
    if (t->len && !j) {
        excerpt(t->buf, t->len, ex, 60);
        return mm_fail(err, "%s %s: HTTP %ld but the answer is not JSON ('%s')", method, path, status, ex);
    }
    return 0;
}

typedef struct request {
    const char *method, *path;
    const json_t *body;
    const mm_oxen_part *parts;
    int n_parts;
    mm_oxen_data_fn on_data;
    void *user;
    long *status_out;
} request;

static int perform(const mm_oxen_client *c, const request *q, mm_oxen_response *resp, mm_error *err)
{
    if (resp)
        memset(resp, 0, sizeof *resp);
    if (q->path[0] != '/')
        return mm_fail(err, "%s %s: the path must start with '/'", q->method, q->path);
    char *url = malloc(strlen(c->remote.origin) + strlen(q->path) + 1);
    if (!url)
        return mm_fail(err, "out of memory");
    strcpy(url, c->remote.origin);
    strcat(url, q->path);
    char *json_text = q->body ? json_dumps(q->body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int tries = q->on_data ? 1 : c->max_tries < 1 ? 1 : c->max_tries;
    double pause = c->backoff;
    double timeout = q->parts ? c->upload_timeout : c->timeout;
    int rc = -1;
    for (int attempt = 1; attempt <= tries; attempt++) {
        transfer t = {.c = c, .on_data = q->on_data, .user = q->user};
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *headers = NULL;
        curl_mime *mime = NULL;
        CURL *h = make_handle(c, q->method, url, &headers, &t, errbuf, timeout);
        if (!h) {
            rc = mm_fail(err, "out of memory for an HTTP request");
            break;
        }
        headers = curl_slist_append(headers, q->on_data ? "Accept: text/event-stream" : "Accept: application/json");
        if (json_text) {
            headers = curl_slist_append(headers, "Content-Type: application/json");
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, json_text);
        } else if (q->parts) {
            mime = curl_mime_init(h);
            for (int i = 0; i < q->n_parts; i++) {
                const mm_oxen_part *p = &q->parts[i];
                curl_mimepart *mp = curl_mime_addpart(mime);
                curl_mime_name(mp, p->name);
                if (p->value)
                    curl_mime_data(mp, p->value, CURL_ZERO_TERMINATED);
                else if (p->file_path)
                    curl_mime_filedata(mp, p->file_path);
                else
                    curl_mime_data(mp, p->data ? p->data : "", p->len);
                if (p->filename)
                    curl_mime_filename(mp, p->filename);
                if (!p->value)
                    curl_mime_type(mp, p->content_type ? p->content_type : "application/octet-stream");
            }
            curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
        } else if (strcmp(q->method, "POST") == 0 || strcmp(q->method, "PUT") == 0) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        }
        headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        CURLcode cr = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (q->status_out)
            *q->status_out = status;
        curl_slist_free_all(headers);
        curl_mime_free(mime);
        curl_easy_cleanup(h);
        if (t.stopped) {
            free(t.buf);
            rc = mm_fail(err, "%s %s: stopped by the reader", q->method, q->path);
            break;
        }
        bool again = attempt < tries && retryable(cr, status) && !cancelled(c);
        mm_oxen_response got = {0};
        rc = judge(c, q->method, q->path, cr, status, &t, errbuf, timeout, &got, err);
        if (rc == 0 || !again) {
            if (resp)
                *resp = got;
            else
                mm_oxen_response_free(&got);
            if (rc < 0 && attempt > 1)
                mm_error_prefix(err, "after %d tries", attempt);
            break;
        }
        mm_oxen_response_free(&got);
        pause_seconds(c, pause);
        pause *= 2;
    }
    free(json_text);
    free(url);
    return rc;
}

int mm_oxen_call(const mm_oxen_client *c, const char *method, const char *path, const json_t *body,
                 mm_oxen_response *resp, mm_error *err)
{
    request q = {.method = method, .path = path, .body = body};
    return perform(c, &q, resp, err);
}

int mm_oxen_upload(const mm_oxen_client *c, const char *method, const char *path, const mm_oxen_part *parts,
                   int n_parts, mm_oxen_response *resp, mm_error *err)
{
    request q = {.method = method, .path = path, .parts = parts, .n_parts = n_parts};
    return perform(c, &q, resp, err);
}

int mm_oxen_stream(const mm_oxen_client *c, const char *path, const json_t *body, mm_oxen_data_fn on_data,
                   void *user, long *status, mm_error *err)
{
    long st = 0;
    request q = {.method = "POST", .path = path, .body = body, .on_data = on_data, .user = user, .status_out = &st};
    int rc = perform(c, &q, NULL, err);
    if (status)
        *status = st;
    return rc;
}
