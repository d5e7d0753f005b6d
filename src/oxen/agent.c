/* The agent's thread, its options and the worker's hooks (see agent.h). */
#include "oxen/agent_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "oxen/remote.h"
#include "store/db.h"
#include "store/generations.h"
#include "store/oxen.h"
#include "store/settings.h"

static mm_oxen_agent *agent; /* the running one, or NULL */

/* NaN (which the checks refuse) for anything but a number. */
static double number_or_nan(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return *end ? NAN : v;
}

void mm_oxen_options_from_env(mm_oxen_options *o)
{
    memset(o, 0, sizeof *o);
    o->model = MM_OXEN_MODEL_DEFAULT;
    o->poll_seconds = 10;
    o->timeout = 60;
    const char *v;
    if ((v = getenv("MMH3_OXEN_REMOTE")) && *v)
        o->remote = v;
    if ((v = getenv("MMH3_OXEN_TOKEN")) && *v)
        o->token = v;
    if ((v = getenv("MMH3_OXEN_MODEL")) && *v)
        o->model = v;
    if ((v = getenv("MMH3_OXEN_POLL")) && *v)
        o->poll_seconds = number_or_nan(v);
    if ((v = getenv("MMH3_OXEN_TIMEOUT")) && *v)
        o->timeout = number_or_nan(v);
}

int mm_oxen_options_check(const mm_oxen_options *o, mm_error *err)
{
    if (!(o->poll_seconds >= 0 && o->poll_seconds <= 86400))
        return mm_fail(err, "--oxen-poll %g: accepted: seconds 0..86400 (0 disables claiming)", o->poll_seconds);
    if (!(o->timeout >= 0.1 && o->timeout <= 3600))
        return mm_fail(err, "--oxen-timeout %g: accepted: seconds 0.1..3600", o->timeout);
    if (!o->model || !*o->model || strlen(o->model) > 200)
        return mm_fail(err, "--oxen-model: accepted: a model name of 1..200 characters");
    if (!o->remote || !*o->remote)
        return 0;
    mm_oxen_remote r;
    if (mm_oxen_remote_parse(o->remote, &r, err) < 0)
        return mm_error_prefix(err, "--oxen-remote");
    if (!mm_oxen_remote_has_repo(&r))
        return mm_fail(err, "--oxen-remote %s names no repository; mirroring and claiming need one: %s", r.origin,
                       MM_OXEN_ACCEPT_REMOTE);
    return 0;
}

void mm_oxen_complain(mm_oxen_agent *a, const char *msg)
{
    char clean[MM_ERROR_MAX];
    snprintf(clean, sizeof clean, "%s", msg);
    mm_oxen_redact(clean, a->client.token);
    if (strncmp(a->last_complaint, clean, sizeof a->last_complaint - 1) == 0)
        return;
    snprintf(a->last_complaint, sizeof a->last_complaint, "%.255s", clean);
    mm_log("oxen: %s", clean);
}

static void wait_wake(mm_oxen_agent *a, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)((seconds - (long)seconds) * 1e9);
    ts.tv_sec += (time_t)seconds + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&a->mu);
    while (!a->woken && !atomic_load(&a->quit))
        if (pthread_cond_timedwait(&a->cond, &a->mu, &ts) != 0)
            break;
    a->woken = false;
    pthread_mutex_unlock(&a->mu);
}

static void wake(mm_oxen_agent *a)
{
    pthread_mutex_lock(&a->mu);
    a->woken = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

/* The key: --oxen-token / $MMH3_OXEN_TOKEN, else the one stored through
 * /api/settings (read each round, so storing one takes effect at once). */
static void refresh_token(mm_oxen_agent *a)
{
    if (a->token) {
        atomic_store(&a->active, true);
        return;
    }
    char *key = NULL;
    mm_error err = {{0}};
    if (mm_store_setting_text(a->db, "oxen_api_key", &key, &err) < 0)
        return;
    if (key && *key && strlen(key) <= MM_OXEN_TOKEN_MAX)
        snprintf(a->client.token, sizeof a->client.token, "%s", key);
    else
        explicit_bzero(a->client.token, sizeof a->client.token);
    if (key)
        explicit_bzero(key, strlen(key));
    free(key);
    bool was = atomic_load(&a->active);
    atomic_store(&a->active, a->client.token[0] != '\0');
    if (!a->client.token[0] && was)
        mm_log("oxen: no API key is stored any more; mirroring and claiming pause");
}

/* Local queue idle: this worker renders nothing and nothing waits. */
static bool locally_idle(mm_oxen_agent *a)
{
    if (atomic_load(&a->busy))
        return false;
    long queued = 1;
    mm_error err = {{0}};
    return mm_store_queued_count(a->db, &queued, &err) == 0 && queued == 0;
}

static void one_round(mm_oxen_agent *a)
{
    mm_error err = {{0}};
    bool locked = false;
    if (mm_store_oxen_try_lock(a->db, &locked, &err) < 0) {
        mm_oxen_complain(a, err.msg);
        return;
    }
    if (!locked)
        return; /* another worker's agent is writing to the hub */
    /* Claims a killed worker left half done: at start, then at the poll's pace
     * (a hub that is down is not asked every second). */
    if (mm_clock_now() >= a->next_resume && !atomic_load(&a->quit)) {
        a->next_resume = mm_clock_now() + (a->poll_seconds > 0 ? a->poll_seconds : 10);
        if (mm_oxen_claims_resume(a, &err) < 0)
            mm_oxen_complain(a, err.msg);
    }
    bool did = true;
    while (did && !atomic_load(&a->quit)) {
        if (mm_oxen_mirror_next(a, &did, &err) < 0) {
            mm_oxen_complain(a, err.msg);
            break;
        }
    }
    if (a->poll_seconds > 0 && mm_clock_now() >= a->next_poll && !atomic_load(&a->quit)) {
        a->next_poll = mm_clock_now() + a->poll_seconds;
        if (locally_idle(a) && mm_oxen_claim_poll(a, &err) < 0)
            mm_oxen_complain(a, err.msg);
        /* A claimed job waits in the queue now; its mirror work comes next round. */
    }
    mm_store_oxen_unlock(a->db, &err);
}

static void *agent_main(void *arg)
{
    mm_oxen_agent *a = arg;
    mm_error err = {{0}};
    while (!atomic_load(&a->quit)) {
        if (!a->db || PQstatus(a->db) != CONNECTION_OK) {
            if (a->db)
                PQfinish(a->db);
            a->db = NULL;
            if (mm_db_connect(a->db_url, "mmh3-worker-oxen", &a->db, &err) < 0) {
                mm_oxen_complain(a, err.msg);
                if (a->db)
                    PQfinish(a->db);
                a->db = NULL;
                wait_wake(a, 2);
                continue;
            }
        }
        refresh_token(a);
        if (atomic_load(&a->active))
            one_round(a);
        /* Woken by the hooks; else a short nap (mirror work can appear from
         * other workers' renders too), bounded by the next poll. */
        double nap = 1.0;
        if (a->poll_seconds > 0 && a->next_poll - mm_clock_now() < nap)
            nap = a->next_poll - mm_clock_now();
        if (nap > 0.01)
            wait_wake(a, nap);
    }
    if (a->db)
        PQfinish(a->db);
    a->db = NULL;
    return NULL;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int mm_oxen_agent_start(const mm_oxen_options *o, const char *db_url, const char *outputs, const char *worker_id,
                        mm_error *err)
{
    if (!o->remote || !*o->remote)
        return 0;
    if (mm_oxen_options_check(o, err) < 0)
        return -1;
    mm_oxen_agent *a = calloc(1, sizeof *a);
    if (!a)
        return mm_fail(err, "out of memory");
    if (mm_oxen_client_init(&a->client, o->remote, o->token, err) < 0) {
        free(a);
        return -1;
    }
    a->client.timeout = o->timeout;
    a->client.connect_timeout = o->timeout < 10 ? o->timeout : 10;
    a->client.upload_timeout = o->timeout * 10;
    a->client.cancel = &a->quit;
    a->remote = strdup(o->remote);
    a->token = dup_or_null(o->token && *o->token ? o->token : NULL);
    a->model = strdup(o->model ? o->model : MM_OXEN_MODEL_DEFAULT);
    a->db_url = strdup(db_url);
    a->outputs = strdup(outputs);
    a->worker_id = strdup(worker_id);
    a->poll_seconds = o->poll_seconds;
    a->next_poll = mm_clock_now() + (o->poll_seconds > 1 ? 1 : o->poll_seconds);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cond, NULL);
    if (pthread_create(&a->thread, NULL, agent_main, a) != 0) {
        free(a);
        return mm_fail(err, "cannot start the Oxen agent thread");
    }
    agent = a;
    mm_log("oxen: mirroring to %s/%s/%s (%s), %s", a->client.remote.origin, a->client.remote.ns,
           a->client.remote.repo, a->token ? "key from --oxen-token/$MMH3_OXEN_TOKEN" : "key from the settings",
           o->poll_seconds > 0 ? "claiming hub jobs when idle" : "claiming off");
    return 0;
}

void mm_oxen_agent_stop(void)
{
    mm_oxen_agent *a = agent;
    if (!a)
        return;
    atomic_store(&a->quit, true);
    wake(a);
    pthread_join(a->thread, NULL);
    agent = NULL;
    explicit_bzero(a->client.token, sizeof a->client.token);
    if (a->token)
        explicit_bzero(a->token, strlen(a->token));
    free(a->remote), free(a->token), free(a->model), free(a->db_url), free(a->outputs), free(a->worker_id);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cond);
    free(a);
}

void mm_oxen_render_started(PGconn *db, const char *generation_id)
{
    mm_oxen_agent *a = agent;
    if (!a)
        return;
    atomic_store(&a->busy, true);
    /* Marked only when a key is there: given, or stored (checked here, not
     * from the agent's once-a-second view, so a key stored just now counts). */
    mm_error err = {{0}};
    if (mm_store_oxen_mark_render(db, generation_id, a->token != NULL, &err) < 0)
        mm_log("oxen: %s: cannot mark the render for mirroring: %s", generation_id, err.msg);
    wake(a);
}

void mm_oxen_render_ended(const char *generation_id)
{
    (void)generation_id;
    mm_oxen_agent *a = agent;
    if (!a)
        return;
    atomic_store(&a->busy, false);
    wake(a);
}
