#include "config.h"

#include "io/download.h"

#include <ctype.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/sha256.h"

#ifdef MMH3_HAVE_CURL
#include <curl/curl.h>
#endif

int mm_sha256_file(const char *path, char hex[65], mm_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mm_fail_errno(err, "%s", path);
    mm_sha256_ctx s;
    mm_sha256_init(&s);
    static _Thread_local unsigned char buf[1 << 20];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int rc = mm_fail_errno(err, "%s: read", path);
            close(fd);
            return rc;
        }
        if (n == 0)
            break;
        mm_sha256_update(&s, buf, (size_t)n);
    }
    close(fd);
    uint8_t d[32];
    mm_sha256_final(&s, d);
    mm_sha256_hex(d, hex);
    return 0;
}

int mm_make_parent_dirs(const char *path, mm_error *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return mm_fail(err, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return mm_fail_errno(err, "mkdir %s", buf);
        *p = '/';
    }
    return 0;
}

#ifndef MMH3_HAVE_CURL

bool mm_download_available(void) { return false; }

int mm_download(const char *url, const char *dest, const mm_download_opts *opts, mm_error *err)
{
    (void)dest;
    (void)opts;
    return mm_fail(err, "cannot download %s: this mmh3 was built without libcurl", url);
}

#else

bool mm_download_available(void) { return true; }

typedef struct dl_state {
    FILE *f;
    const char *part;
    uint64_t offset;    /* bytes of .part kept when the request was made */
    uint64_t written;   /* bytes written by this request */
    long status;        /* status of the last response seen */
    bool decided;       /* first body byte seen: resume or restart decided */
    uint64_t announced; /* total size announced by the server (0 = unknown) */
    uint64_t linked_size;
    char sha[65];       /* sha256 announced by the server, or "" */
    const mm_download_opts *o;
    int write_error;
} dl_state;

static bool is_hex64(const char *s, size_t n)
{
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* Header value after "name:" with surrounding blanks and quotes trimmed. */
static bool header_value(const char *line, size_t len, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return false;
    const char *v = line + nl + 1, *e = line + len;
    while (v < e && (*v == ' ' || *v == '\t' || *v == '"'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '"'))
        e--;
    if (v < e && strncmp(v, "W/", 2) == 0)
        v += 2;
    while (v < e && *v == '"')
        v++;
    size_t k = (size_t)(e - v) < n - 1 ? (size_t)(e - v) : n - 1;
    memcpy(out, v, k);
    out[k] = '\0';
    return true;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *user)
{
    dl_state *s = user;
    size_t len = size * nitems;
    char v[256];
    if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        const char *sp = memchr(buf, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        s->announced = 0; /* a new response: forget the previous one's length */
    } else if (header_value(buf, len, "Content-Range", v, sizeof v)) {
        const char *slash = strchr(v, '/');
        if (slash && slash[1] != '*')
            s->announced = strtoull(slash + 1, NULL, 10);
    } else if (header_value(buf, len, "Content-Length", v, sizeof v)) {
        if (s->status == 200)
            s->announced = strtoull(v, NULL, 10);
    } else if (header_value(buf, len, "X-Linked-Size", v, sizeof v)) {
        s->linked_size = strtoull(v, NULL, 10);
    } else if (header_value(buf, len, "X-Linked-Etag", v, sizeof v) ||
               (s->sha[0] == '\0' && header_value(buf, len, "ETag", v, sizeof v))) {
        if (is_hex64(v, strlen(v))) {
            for (int i = 0; i < 64; i++)
                s->sha[i] = (char)tolower((unsigned char)v[i]);
            s->sha[64] = '\0';
        }
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    dl_state *s = user;
    size_t len = size * nmemb;
    if (!s->decided) {
        s->decided = true;
        if (s->offset > 0 && s->status != 206) { /* the server ignored the Range: start over */
            if (fflush(s->f) != 0 || ftruncate(fileno(s->f), 0) != 0 || fseeko(s->f, 0, SEEK_SET) != 0) {
                s->write_error = errno ? errno : EIO;
                return 0;
            }
            s->offset = 0;
        }
    }
    if (fwrite(data, 1, len, s->f) != len) {
        s->write_error = errno ? errno : EIO;
        return 0;
    }
    s->written += len;
    return len;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)ultotal;
    (void)ulnow;
    dl_state *s = user;
    if (s->o && s->o->progress) {
        uint64_t total = s->o->expected_size ? s->o->expected_size
                         : s->linked_size    ? s->linked_size
                         : dltotal > 0       ? s->offset + (uint64_t)dltotal
                                             : 0;
        s->o->progress(s->o->user, s->offset + (uint64_t)dlnow, total);
    }
    return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int mm_download(const char *url, const char *dest, const mm_download_opts *opts, mm_error *err)
{
    static const mm_download_opts none = {0};
    const mm_download_opts *o = opts ? opts : &none;
    pthread_once(&curl_once, curl_init_once);
    if (mm_make_parent_dirs(dest, err) != 0)
        return -1;
    char part[4096];
    if (snprintf(part, sizeof part, "%s.part", dest) >= (int)sizeof part)
        return mm_fail(err, "path too long: %s", dest);
    FILE *f = fopen(part, "ab");
    if (!f)
        return mm_fail_errno(err, "%s", part);
    struct stat sb;
    dl_state s = {.f = f, .part = part, .o = o};
    if (fstat(fileno(f), &sb) == 0)
        s.offset = (uint64_t)sb.st_size;
    if (o->expected_size && s.offset > o->expected_size) { /* longer than it can be: start over */
        if (ftruncate(fileno(f), 0) != 0) {
            fclose(f);
            return mm_fail_errno(err, "%s", part);
        }
        s.offset = 0;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        fclose(f);
        return mm_fail(err, "cannot start libcurl");
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    const char *token = getenv("HF_TOKEN");
    if (token && *token) {
        char h[1024];
        snprintf(h, sizeof h, "Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "mmh3/" PACKAGE_VERSION);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s ? o->connect_timeout_s : 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->low_speed_timeout_s ? o->low_speed_timeout_s : 60L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    if (hdrs)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    if (s.offset > 0)
        curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)s.offset);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    int ferr = fclose(f) != 0 ? errno : 0;

    if (s.write_error || ferr)
        return mm_fail(err, "%s: write failed: %s", part, strerror(s.write_error ? s.write_error : ferr));
    bool complete_already = rc == CURLE_HTTP_RETURNED_ERROR && status == 416 && s.offset > 0;
    if (rc != CURLE_OK && !complete_already) {
        if (rc == CURLE_HTTP_RETURNED_ERROR)
            return mm_fail(err, "download %s: HTTP %ld%s", url, status,
                           status == 401 || status == 403 ? " (gated or private: set HF_TOKEN)" : "");
        return mm_fail(err, "download %s: %s (partial data kept in %s; run again to resume)", url,
                       errbuf[0] ? errbuf : curl_easy_strerror(rc), part);
    }

    /* size: the caller's, else what the server announced */
    if (stat(part, &sb) != 0)
        return mm_fail_errno(err, "%s", part);
    uint64_t have = (uint64_t)sb.st_size;
    uint64_t want = o->expected_size ? o->expected_size : s.linked_size ? s.linked_size : s.announced;
    if (want && have != want) {
        if (have > want)
            unlink(part);
        return mm_fail(err, "download %s: %llu bytes received, %llu expected%s", url, (unsigned long long)have,
                       (unsigned long long)want, have > want ? " (partial file deleted)" : "; run again to resume");
    }
    const char *want_sha = o->expected_sha256 ? o->expected_sha256 : s.sha[0] ? s.sha : NULL;
    if (want_sha) {
        char hex[65];
        if (mm_sha256_file(part, hex, err) != 0)
            return -1;
        if (strcasecmp(hex, want_sha) != 0) {
            unlink(part);
            return mm_fail(err, "download %s: sha256 %s, expected %s (corrupt download deleted)", url, hex, want_sha);
        }
    }
    if (rename(part, dest) != 0)
        return mm_fail_errno(err, "rename %s -> %s", part, dest);
    if (o->progress)
        o->progress(o->user, have, have);
    return 0;
}

#endif
