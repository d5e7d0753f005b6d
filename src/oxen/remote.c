#include "oxen/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

/* Repository and namespace names on the hub: letters, digits, '-', '_', '.'. */
static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= 128 || (n <= 2 && s[0] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return false;
    }
    return true;
}

static bool host_is_loopback(const char *host)
{
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0 || strcmp(host, "::1") == 0)
        return true;
    /* 127.0.0.0/8 written as a dotted quad. */
    int a, b, c, d;
    char tail;
    return sscanf(host, "%d.%d.%d.%d%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b >= 0 && b < 256 && c >= 0 &&
           c < 256 && d >= 0 && d < 256;
}

bool mm_oxen_remote_has_repo(const mm_oxen_remote *r)
{
    return r->ns[0] && r->repo[0];
}

int mm_oxen_remote_parse(const char *url, mm_oxen_remote *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->branch, sizeof out->branch, "main");
    if (!url || !*url)
        return mm_fail(err, "the Oxen remote is empty; accepted: %s", MM_OXEN_ACCEPT_REMOTE);
    CURLU *u = curl_url();
    if (!u)
        return mm_fail(err, "out of memory parsing the Oxen remote");
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *user = NULL, *query = NULL, *fragment = NULL;
    int rc = -1;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
        mm_fail(err, "'%s' is not a URL; accepted: %s", url, MM_OXEN_ACCEPT_REMOTE);
        goto done;
    }
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, 0);
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    curl_url_get(u, CURLUPART_USER, &user, 0);
    curl_url_get(u, CURLUPART_QUERY, &query, 0);
    curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0);
    if (!scheme || !host) {
        mm_fail(err, "'%s' has no scheme or host; accepted: %s", url, MM_OXEN_ACCEPT_REMOTE);
        goto done;
    }
    out->loopback = host_is_loopback(host);
    if (strcasecmp(scheme, "https") != 0 && !(strcasecmp(scheme, "http") == 0 && out->loopback)) {
        mm_fail(err, "'%s' is not https (plain http is accepted only for a loopback test hub); accepted: %s", url,
                MM_OXEN_ACCEPT_REMOTE);
        goto done;
    }
    if (user || query || fragment) {
        mm_fail(err, "the Oxen remote must not carry %s (the API key goes in --oxen-token or the settings); "
                     "accepted: %s",
                user ? "a user name" : query ? "a query" : "a fragment", MM_OXEN_ACCEPT_REMOTE);
        goto done;
    }
    const char *sch = strcasecmp(scheme, "https") == 0 ? "https" : "http";
    int n = snprintf(out->origin, sizeof out->origin, "%s://%s%s%s", sch, host, port ? ":" : "", port ? port : "");
    if (n < 0 || (size_t)n >= sizeof out->origin) {
        mm_fail(err, "the Oxen remote's host is too long");
        goto done;
    }
    /* Path: "", "/", "/<ns>/<repo>" or "/<ns>/<repo>/". */
    const char *p = path ? path : "/";
    while (*p == '/')
        p++;
    if (*p) {
        const char *slash = strchr(p, '/');
        const char *repo = slash ? slash + 1 : NULL;
        size_t ns_len = slash ? (size_t)(slash - p) : strlen(p);
        size_t repo_len = repo ? strcspn(repo, "/") : 0;
        const char *rest = repo ? repo + repo_len : "";
        if (!repo || !name_ok(p, ns_len) || !name_ok(repo, repo_len) || (rest[0] && strcmp(rest, "/") != 0)) {
            mm_fail(err, "'%s' does not name a repository as /<namespace>/<repo>; accepted: %s", url,
                    MM_OXEN_ACCEPT_REMOTE);
            goto done;
        }
        memcpy(out->ns, p, ns_len);
        memcpy(out->repo, repo, repo_len);
    }
    rc = 0;
done:
    curl_free(scheme), curl_free(host), curl_free(port), curl_free(path), curl_free(user), curl_free(query),
        curl_free(fragment);
    curl_url_cleanup(u);
    return rc;
}
