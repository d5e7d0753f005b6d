/* Tokens as mmh3-fcgi sees them: what a request presents (Authorization:
 * Bearer, else the login cookie) and the process's cache of the active
 * tokens' hashes.
 *
 * The cache is reloaded when the hub relays a change of api_tokens (a NOTIFY
 * from sql/003_auth.sql's trigger: a revoked token stops working within
 * milliseconds), when a token is not found (a new one may be just made;
 * concurrent misses share one reload) and every CACHE_SECONDS in any case (a
 * notification missed while the hub's connection was down). A lookup hashes the presented token
 * and compares the digest with every cached one in constant time. Last-use
 * dates are written at most once a minute per token.
 */
#include "fcgi/app.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/tokens.h"
#include "store/tokens.h"
#include "core/clock.h"
#include "core/log.h"

#define CACHE_SECONDS 10
#define MARK_USED_SECONDS 60

typedef struct entry {
    unsigned char digest[32];
    char name[MM_TOKEN_NAME_MAX + 1];
    double marked; /* when last_used_at was last written */
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry *entries;
static int n_entries;
static double loaded_at = -1e9;
static atomic_bool stale = true;

void mm_auth_invalidate(void)
{
    atomic_store(&stale, true);
}

/* Under mu. */
static int reload(PGconn *db, mm_error *err)
{
    double began = mm_clock_now(); /* what is read is at least as new as this */
    atomic_store(&stale, false);
    mm_store_token_row *rows = NULL;
    int n = 0;
    if (mm_store_tokens_read(db, false, &rows, &n, err) < 0) {
        atomic_store(&stale, true);
        return mm_error_prefix(err, "reading the access tokens");
    }
    entry *fresh = calloc(n ? (size_t)n : 1, sizeof *fresh);
    if (!fresh) {
        free(rows);
        atomic_store(&stale, true);
        return mm_fail(err, "out of memory for %d tokens", n);
    }
    for (int i = 0; i < n; i++) {
        snprintf(fresh[i].name, sizeof fresh[i].name, "%s", rows[i].name);
        memcpy(fresh[i].digest, rows[i].digest, sizeof fresh[i].digest);
        /* A token still cached keeps its last-use mark. */
        for (int j = 0; j < n_entries; j++)
            if (strcmp(entries[j].name, fresh[i].name) == 0)
                fresh[i].marked = entries[j].marked;
    }
    explicit_bzero(rows, (size_t)n * sizeof *rows);
    free(rows);
    free(entries);
    entries = fresh;
    n_entries = n;
    loaded_at = began;
    return 0;
}

int mm_auth_refresh(PGconn *db, mm_error *err)
{
    pthread_mutex_lock(&mu);
    int rc = reload(db, err);
    pthread_mutex_unlock(&mu);
    return rc;
}

int mm_auth_lookup(PGconn *db, const unsigned char digest[32], char *name, size_t n, mm_error *err)
{
    double asked = mm_clock_now();
    pthread_mutex_lock(&mu);
    if ((atomic_load(&stale) || mm_clock_now() - loaded_at > CACHE_SECONDS) && reload(db, err) < 0) {
        pthread_mutex_unlock(&mu);
        return -1;
    }
    /* Every entry is compared, whichever matches. */
    int found = -1;
    for (int i = 0; i < n_entries; i++) {
        bool eq = mm_token_digest_equal(entries[i].digest, digest);
        found = eq ? i : found;
    }
    /* Not known: perhaps made a moment ago (its NOTIFY still on the way).
     * Reload and look again, unless a reload began after we asked (misses
     * waiting on the lock share one reload). */
    if (found < 0 && loaded_at < asked) {
        if (reload(db, err) < 0) {
            pthread_mutex_unlock(&mu);
            return -1;
        }
        for (int i = 0; i < n_entries; i++) {
            bool eq = mm_token_digest_equal(entries[i].digest, digest);
            found = eq ? i : found;
        }
    }
    bool mark = false;
    char who[MM_TOKEN_NAME_MAX + 1] = "";
    if (found >= 0) {
        snprintf(name, n, "%s", entries[found].name);
        snprintf(who, sizeof who, "%s", entries[found].name);
        if (mm_clock_now() - entries[found].marked > MARK_USED_SECONDS) {
            entries[found].marked = mm_clock_now();
            mark = true;
        }
    }
    pthread_mutex_unlock(&mu);
    if (mark) {
        mm_error ignored = {{0}};
        if (mm_store_token_mark_used(db, who, &ignored) < 0)
            mm_log("noting the use of token '%s': %s", who, ignored.msg);
    }
    return found >= 0 ? 1 : 0;
}

bool mm_auth_cached(const unsigned char digest[32])
{
    pthread_mutex_lock(&mu);
    bool found = false;
    for (int i = 0; i < n_entries; i++)
        found |= mm_token_digest_equal(entries[i].digest, digest);
    pthread_mutex_unlock(&mu);
    return found;
}

/* Copies the value of cookie `name` from a Cookie header. */
static bool cookie_value(const char *header, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *p = header; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t vl = len - nl - 1;
            const char *v = p + nl + 1;
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                vl--;
            if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"')
                v++, vl -= 2;
            if (vl == 0 || vl >= n)
                return false;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
        p = end;
    }
    return false;
}

bool mm_auth_credential(mm_req *r, char *token, size_t n)
{
    const char *h = mm_req_header(r, "HTTP_AUTHORIZATION");
    if (h && *h) {
        while (*h == ' ')
            h++;
        if (strncasecmp(h, "Bearer ", 7) != 0)
            return false; /* another scheme: no token, the guard says what is accepted */
        h += 7;
        while (*h == ' ')
            h++;
        size_t len = strcspn(h, " \t");
        if (len == 0 || len >= n)
            return false;
        memcpy(token, h, len);
        token[len] = '\0';
        return true;
    }
    const char *cookies = mm_req_header(r, "HTTP_COOKIE");
    return cookies && cookie_value(cookies, "mmh3_token", token, n);
}
