/* Limits on what one client can pile up: per-token rates of enqueue,
 * upload and prompt-rewrite requests (a rewrite spends the owner's Oxen
 * credits) (token buckets: N per minute, in bursts of up to N), and a
 * bound on the number of queued generations. Each refusal is a 429 whose
 * JSON says which limit and when to retry, with a Retry-After header.
 *
 * Rates are per token, so they apply where tokens are required; on a
 * loopback-only server (one user, no tokens) only the queue bound does.
 * The buckets live in this process (mmh3-fcgi is one process with many
 * threads; a second front end on the same database keeps its own). The
 * queue length comes from generation_counts (sql/002_counts.sql), one index
 * lookup; concurrent enqueues may overshoot the bound by a few.
 */
#include "fcgi/app.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/generations.h"
#include "core/clock.h"
#include "core/log.h"

#define BUCKETS 256

typedef struct bucket {
    char who[72];
    double level;   /* requests still allowed now */
    double updated; /* monotonic seconds */
} bucket;

typedef struct limiter {
    pthread_mutex_t mu;
    bucket b[BUCKETS];
} limiter;

static limiter enqueue_limiter = {.mu = PTHREAD_MUTEX_INITIALIZER};
static limiter upload_limiter = {.mu = PTHREAD_MUTEX_INITIALIZER};
static limiter rewrite_limiter = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Takes one request from who's bucket; 0 when allowed, else the seconds until one is. */
static double take(limiter *l, const char *who, double per_minute)
{
    double now = mm_clock_now(), rate = per_minute / 60.0, wait = 0;
    pthread_mutex_lock(&l->mu);
    bucket *b = NULL, *oldest = &l->b[0];
    for (int i = 0; i < BUCKETS && !b; i++) {
        if (l->b[i].who[0] && strcmp(l->b[i].who, who) == 0)
            b = &l->b[i];
        else if (!l->b[i].who[0] || l->b[i].updated < oldest->updated)
            oldest = &l->b[i];
    }
    if (!b) {
        /* A new client, or one idle the longest (its bucket is full again by now anyway). */
        b = oldest;
        snprintf(b->who, sizeof b->who, "%s", who);
        b->level = per_minute;
        b->updated = now;
    }
    b->level = fmin(per_minute, b->level + (now - b->updated) * rate);
    b->updated = now;
    if (b->level >= 1) {
        b->level -= 1;
    } else {
        wait = (1 - b->level) / rate;
    }
    pthread_mutex_unlock(&l->mu);
    return wait;
}

static void too_many(mm_req *r, const char *limit, int retry_after, const char *accepted, const char *fmt, ...)
    MM_PRINTF(5, 6);

static void too_many(mm_req *r, const char *limit, int retry_after, const char *accepted, const char *fmt, ...)
{
    char msg[512], full[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s; accepted: %s; retry in %d s", msg, accepted, retry_after);
    mm_req_add_header(r, "Retry-After: %d", retry_after);
    json_t *body = mm_error_body(r, 429, NULL, accepted, msg);
    /* The line with the wait in it, where each shape keeps its whole line. */
    if (mm_req_is_v1(r))
        json_object_set_new(json_object_get(body, "error"), "message", json_string(full));
    else
        json_object_set_new(body, "status_message", json_string(full));
    json_object_set_new(body, "limit", json_string(limit));
    json_object_set_new(body, "retry_after", json_integer(retry_after));
    mm_reply_json(r, 429, body);
}

static const char *who(mm_req *r)
{
    return r->auth_name;
}

static bool rate_ok(mm_req *r, limiter *l, double per_minute, const char *limit, const char *what)
{
    if (per_minute <= 0 || !r->has_token)
        return true; /* no tokens (loopback): one user, nothing to share fairly */
    double wait = take(l, who(r), per_minute);
    if (wait <= 0)
        return true;
    char accepted[160];
    snprintf(accepted, sizeof accepted, "at most %g %s per minute per token, in bursts of up to %g", per_minute,
             what, per_minute);
    mm_log("rate limit %s: token %s", limit, who(r));
    too_many(r, limit, (int)ceil(wait), accepted, "too many %s from token '%s'", what, who(r));
    return false;
}

bool mm_limit_upload(mm_req *r)
{
    return rate_ok(r, &upload_limiter, r->app->rate_upload, "upload_rate", "uploads");
}

bool mm_limit_rewrite(mm_req *r)
{
    return rate_ok(r, &rewrite_limiter, r->app->rate_rewrite, "rewrite_rate", "prompt rewrites");
}

bool mm_limit_enqueue(mm_req *r)
{
    if (!rate_ok(r, &enqueue_limiter, r->app->rate_enqueue, "enqueue_rate", "enqueue requests"))
        return false;
    if (r->app->max_queued <= 0)
        return true;
    PGconn *db = mm_req_db(r);
    if (!db)
        return false;
    long queued = 0;
    double typical = 0;
    mm_error err = {{0}};
    /* When full: retry once a job is likely done (the recent average render). */
    if (mm_store_queue_load(db, &queued, &typical, &err) < 0) {
        mm_log("%s", err.msg);
        mm_reply_error(r, 503, NULL, NULL, "the queue length cannot be read; try again shortly");
        return false;
    }
    if (typical <= 0)
        typical = 60;
    if (queued < r->app->max_queued)
        return true;
    int retry = (int)fmin(3600, fmax(5, typical));
    char accepted[128];
    snprintf(accepted, sizeof accepted, "at most %ld queued generations", r->app->max_queued);
    mm_log("queue full: %ld queued", queued);
    too_many(r, "queue_length", retry, accepted, "the queue is full (%ld generations waiting)", queued);
    return false;
}
