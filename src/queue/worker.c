#include "queue/worker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "queue/db.h"
#include "queue/jobs.h"
#include "queue/log.h"
#include "queue/migrate.h"
#include "media/poster.h"
#include "media/probe.h"

/* Shared between the main thread (renders), the heartbeat thread (LISTENs
 * for cancels) and the signal handler. */
static atomic_bool stop_requested;   /* SIGTERM / SIGINT */
static atomic_bool cancel_requested; /* the current job's cancel flag */
static atomic_bool job_lost;         /* the current job was taken away */
static atomic_bool heartbeat_quit;
static pthread_mutex_t current_mu = PTHREAD_MUTEX_INITIALIZER;
static char current_id[40];

static void on_stop_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, true);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_seconds(double s)
{
    double end = now_seconds() + s;
    while (!atomic_load(&stop_requested) && now_seconds() < end) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void mm_worker_options_defaults(mm_worker_options *o)
{
    memset(o, 0, sizeof *o);
    o->engine_kind = "h3";
    mm_engine_options_defaults(&o->engine);
    o->max_attempts = 3;
    o->lease_seconds = 30;
    o->poll_seconds = 2;
    o->outputs = "outputs";
    mm_oxen_options_from_env(&o->oxen);
}

static void set_current(const char *id)
{
    pthread_mutex_lock(&current_mu);
    snprintf(current_id, sizeof current_id, "%s", id ? id : "");
    pthread_mutex_unlock(&current_mu);
}

static bool is_current(const char *id)
{
    pthread_mutex_lock(&current_mu);
    bool yes = id && current_id[0] && strcmp(id, current_id) == 0;
    pthread_mutex_unlock(&current_mu);
    return yes;
}

/* ---------------------------------------------------------------- heartbeat */

typedef struct heartbeat_ctx {
    const mm_worker_options *o;
    const char *worker_id;
} heartbeat_ctx;

/* Takes every buffered NOTIFY (including those mm_db_ensure read ahead, which
 * poll() will not report again): a cancel request for the job in hand sets
 * cancel_requested; true when one says a job was queued. */
static bool take_notifies(PGconn *c)
{
    bool queued = false;
    PGnotify *n;
    while ((n = PQnotifies(c))) {
        json_t *ev = json_loads(n->extra, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "kind"));
        const char *status = json_string_value(json_object_get(ev, "status"));
        if (kind && strcmp(kind, "update") == 0 && json_is_true(json_object_get(ev, "cancel_requested")) &&
            is_current(json_string_value(json_object_get(ev, "generation_id"))))
            atomic_store(&cancel_requested, true);
        if (status && strcmp(status, "queued") == 0)
            queued = true;
        json_decref(ev);
        PQfreemem(n);
    }
    return queued;
}

/* Renews the worker's heartbeat (its lease on the job it holds) and listens
 * for cancel requests, on a connection of its own so neither waits for a
 * render step. */
static void *heartbeat_main(void *arg)
{
    heartbeat_ctx *h = arg;
    PGconn *c = NULL;
    mm_error err = {{0}};
    double last_beat = 0, interval = h->o->lease_seconds / 6;
    bool complained = false;
    while (!atomic_load(&heartbeat_quit)) {
        if (!c || PQstatus(c) != CONNECTION_OK) {
            if (c)
                PQfinish(c);
            c = NULL;
            if (mm_db_connect(h->o->db_url, "mmh3-worker-heartbeat", &c, &err) < 0 ||
                mm_db_exec(c, "LISTEN mmh3_events", &err) < 0) {
                if (!complained)
                    mm_log("heartbeat: %s (retrying)", err.msg);
                complained = true;
                if (c)
                    PQfinish(c);
                c = NULL;
                struct timespec ts = {1, 0};
                nanosleep(&ts, NULL);
                continue;
            }
            if (complained)
                mm_log("heartbeat: database connection is back");
            complained = false;
            last_beat = 0;
        }
        if (now_seconds() - last_beat >= interval) {
            bool known;
            if (mm_worker_heartbeat(c, h->worker_id, &known, &err) < 0)
                mm_log("heartbeat: %s", err.msg);
            last_beat = now_seconds();
        }
        take_notifies(c);
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        if (poll(&pfd, 1, 250) > 0) {
            if (!PQconsumeInput(c))
                continue; /* the status check above reconnects */
            take_notifies(c);
        }
    }
    if (c)
        PQfinish(c);
    return NULL;
}

/* ---------------------------------------------------------------- one render */

typedef struct render_ctx {
    PGconn *db;
    const mm_worker_options *o;
    const char *worker_id;
    const mm_job *job;
    double seconds[MM_STAGE_COUNT]; /* from progress reports */
    mm_stage stage;
    double stage_started; /* engine-elapsed time the stage began */
    double last_write;
    bool db_trouble;
} render_ctx;

static char *timings_json(const double *seconds)
{
    json_t *t = json_object();
    for (int s = MM_STAGE_LOADING; s < MM_STAGE_COUNT; s++)
        if (seconds[s] > 0)
            json_object_set_new(t, mm_stage_name((mm_stage)s), json_real(round(seconds[s] * 1000) / 1000));
    char *out = json_dumps(t, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(t);
    return out;
}

static void store_progress(render_ctx *r, const char *stage, int step, int total, const double *seconds)
{
    mm_error err = {{0}};
    char *timings = timings_json(seconds);
    bool cancel = false, lost = false;
    if (mm_db_ensure(r->db, &err) == 0 && r->db_trouble) {
        /* A new session: make the claim point at it before recovery sweeps
         * by other workers conclude that this worker is gone. */
        if (mm_queue_reassert(r->db, r->job, r->worker_id, &lost, &err) == 0) {
            r->db_trouble = false;
            mm_log("database connection is back");
            if (lost)
                atomic_store(&job_lost, true);
        }
    }
    if (mm_queue_progress(r->db, r->job, r->worker_id, stage, step, total, timings ? timings : "{}", &cancel, &lost,
                          &err) < 0) {
        if (!r->db_trouble)
            mm_log("%s: %s (the render goes on)", r->job->id, err.msg);
        r->db_trouble = true;
    } else {
        if (cancel)
            atomic_store(&cancel_requested, true);
        if (lost)
            atomic_store(&job_lost, true);
    }
    free(timings);
    r->last_write = now_seconds();
}

static void on_progress(void *user, const mm_progress *p)
{
    render_ctx *r = user;
    bool stage_changed = p->stage != r->stage;
    if (stage_changed) {
        r->seconds[r->stage] += p->elapsed - r->stage_started;
        r->stage = p->stage;
        r->stage_started = p->elapsed;
    }
    /* Every stage change and the last step go out; steps at most every 100 ms. */
    if (!stage_changed && p->step != p->total_steps && now_seconds() - r->last_write < 0.1)
        return;
    double snapshot[MM_STAGE_COUNT];
    memcpy(snapshot, r->seconds, sizeof snapshot);
    snapshot[r->stage] += p->elapsed - r->stage_started;
    store_progress(r, mm_stage_name(p->stage), p->step, p->total_steps, snapshot);
}

static bool on_should_cancel(void *user)
{
    (void)user;
    return atomic_load(&cancel_requested) || atomic_load(&stop_requested) || atomic_load(&job_lost);
}

static char *strdup_printf(const char *fmt, const char *a, const char *b)
{
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, fmt, a, b);
    return s;
}

typedef enum job_end { JOB_DONE, JOB_ENGINE_DEAD } job_end;

/* Stores the outcome. `publish` (successes) runs inside the transaction
 * that holds the row locked after checking the claim is still ours, so a clip
 * is moved to its public name only while the job is ours, and the row says
 * succeeded only once the clip is there. */
typedef int (*publish_fn)(void *user, mm_job_outcome *out, mm_error *err);

/* Messages are shown to every user of the web app, which must not learn where
 * the server keeps its files: paths under the outputs folder are written
 * relative to it ("uploads/<id>.png"), whether the engine was given the folder
 * as configured or resolved. */
static void hide_outputs_dir(char *msg, const char *outputs)
{
    char resolved[PATH_MAX];
    const char *forms[2] = {outputs, realpath(outputs, resolved)};
    for (int i = 0; i < 2; i++) {
        size_t n = forms[i] ? strlen(forms[i]) : 0;
        if (n == 0)
            continue;
        for (char *at = msg; (at = strstr(at, forms[i]));) {
            if (at[n] == '/')
                memmove(at, at + n + 1, strlen(at + n + 1) + 1);
            else
                at += n;
        }
    }
}

static void finish(render_ctx *r, mm_job_outcome *out, publish_fn publish, void *user)
{
    mm_error err = {{0}};
    char shown[MM_ERROR_MAX];
    if (out->error_message) {
        snprintf(shown, sizeof shown, "%s", out->error_message);
        hide_outputs_dir(shown, r->o->outputs);
        out->error_message = shown;
    }
    bool lost = false, done = false;
    for (int tries = 0; tries < 30 && !atomic_load(&job_lost) && !done; tries++) {
        if (tries) {
            mm_log("%s: %s (retrying)", r->job->id, err.msg);
            sleep_seconds(1);
            if (atomic_load(&stop_requested) && tries > 3)
                break;
        }
        if (mm_db_ensure(r->db, &err) < 0 || mm_db_exec(r->db, "BEGIN", &err) < 0)
            continue;
        if (mm_queue_lock_claim(r->db, r->job, r->worker_id, &lost, &err) < 0) {
            PQclear(PQexec(r->db, "ROLLBACK"));
            continue;
        }
        if (lost) {
            PQclear(PQexec(r->db, "ROLLBACK"));
            break;
        }
        if (publish && publish(user, out, &err) < 0) {
            /* The clip cannot be made public: the job fails with why. */
            PQclear(PQexec(r->db, "ROLLBACK"));
            static char why[MM_ERROR_MAX];
            snprintf(why, sizeof why, "%s", err.msg);
            hide_outputs_dir(why, r->o->outputs);
            out->status = "failed";
            out->result_path = out->poster_path = NULL;
            out->error_message = why;
            publish = NULL;
            continue;
        }
        if (mm_queue_finish(r->db, r->job, r->worker_id, out, &lost, &err) < 0 || lost) {
            PQclear(PQexec(r->db, "ROLLBACK"));
            continue;
        }
        if (mm_db_exec(r->db, "COMMIT", &err) == 0)
            done = true;
    }
    if (lost || atomic_load(&job_lost))
        mm_log("%s: the job was taken away from this worker (lease lost); its outcome is dropped", r->job->id);
    else if (!done)
        mm_log("%s: could not store the outcome (%s): %s", r->job->id, out->status, err.msg);
    else
        mm_log("%s: %s%s%s", r->job->id, out->status, out->error_message ? ": " : "",
               out->error_message ? out->error_message : "");
}

/* The engine writes to a hidden per-attempt name; publishing renames it to
 * generations/<id>.mp4 and makes the poster. */
typedef struct publish_ctx {
    const char *outputs, *id, *tmp_path;
    char *rel, *poster_rel;
} publish_ctx;

static int publish_clip(void *user, mm_job_outcome *out, mm_error *err)
{
    publish_ctx *p = user;
    char *final = strdup_printf("%s/%s", p->outputs, p->rel);
    int rc = rename(p->tmp_path, final);
    if (rc < 0 && errno == ENOENT && access(final, F_OK) == 0)
        rc = 0; /* moved by an earlier try of this same transaction */
    if (rc < 0)
        mm_fail_errno(err, "moving the finished clip into place");
    else if (!p->poster_rel) {
        /* A poster for the gallery; a clip without one is still a result. */
        char *rel = strdup_printf("generations/%s%s", p->id, ".jpg");
        char *poster = strdup_printf("%s/%s", p->outputs, rel);
        mm_error perr = {{0}};
        if (mm_media_poster(final, poster, 640, &perr) < 0) {
            mm_log("%s: no poster: %s", p->id, perr.msg);
            free(rel);
        } else {
            p->poster_rel = rel;
        }
        free(poster);
    }
    out->result_path = p->rel;
    out->poster_path = p->poster_rel;
    free(final);
    return rc;
}

/* Removes what earlier attempts at this job left: generations/.<id>.* */
static void remove_attempt_files(const char *dir, const char *id)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t il = strlen(id);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] == '.' && strncmp(e->d_name + 1, id, il) == 0 && e->d_name[il + 1] == '.')
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* At start: attempt files (generations/.<id>.<attempt>.mp4[.part]) that no
 * render will finish — their job ended, is gone, or is waiting for a later
 * attempt — left by workers that were killed mid-render. A file of an
 * attempt in progress (here or on another host) stays. */
static void sweep_attempt_files(PGconn *db, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d))) {
        char id[40];
        int attempt = 0, used = 0;
        if (e->d_name[0] != '.' || strlen(e->d_name) < 40 ||
            sscanf(e->d_name, ".%36[0-9a-f-].%d.mp4%n", id, &attempt, &used) != 2 ||
            (e->d_name[used] != '\0' && strcmp(e->d_name + used, ".part") != 0))
            continue;
        char a[16];
        snprintf(a, sizeof a, "%d", attempt);
        const char *p[] = {id, a};
        PGresult *r;
        mm_error err = {{0}};
        if (mm_db_query(db,
                        "SELECT NOT EXISTS (SELECT 1 FROM generations WHERE id = $1::uuid"
                        "   AND ((status = 'processing' AND attempts <= $2::int)"
                        "        OR (status = 'queued' AND attempts < $2::int)))",
                        2, p, &r, &err) < 0)
            continue; /* not a UUID after all, or the database is away: keep it */
        bool stale = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (stale && unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    if (removed)
        mm_log("removed %d file(s) of interrupted renders", removed);
}

static job_end run_job(PGconn *db, const mm_worker_options *o, const char *worker_id, mm_engine *engine,
                       bool *loaded, mm_job *job, int claim_rc, const mm_error *claim_err, mm_error *engine_err)
{
    render_ctx r = {.db = db, .o = o, .worker_id = worker_id, .job = job, .stage = MM_STAGE_QUEUED};
    mm_job_outcome out = {.status = "failed", .placement = NULL};
    mm_error err = {{0}};
    atomic_store(&cancel_requested, false);
    atomic_store(&job_lost, false);
    set_current(job->id);
    mm_oxen_render_started(db, job->id);
    mm_log("%s: claimed (attempt %d), %dx%d, %d frames, %d steps", job->id, job->attempts, job->width, job->height,
           job->frames, job->steps);
    if (mm_worker_set_state(db, worker_id, "busy", "rendering", NULL, job->id, &err) < 0)
        mm_log("%s", err.msg);

    if (claim_rc < 0) {
        out.error_message = claim_err->msg;
        finish(&r, &out, NULL, NULL);
        set_current(NULL);
        mm_oxen_render_ended(job->id);
        return JOB_DONE;
    }

    /* Each attempt renders to its own hidden name (nginx never serves dot
     * files), so a worker that lost this job cannot touch another's file. */
    char gen_dir[4096], attempt[32];
    snprintf(gen_dir, sizeof gen_dir, "%s/generations", o->outputs);
    snprintf(attempt, sizeof attempt, ".%d.mp4", job->attempts);
    remove_attempt_files(gen_dir, job->id);
    char *rel = strdup_printf("generations/%s%s", job->id, ".mp4");
    char *tmp_name = strdup_printf(".%s%s", job->id, attempt);
    char *path = strdup_printf("%s/%s", gen_dir, tmp_name);

    double t0 = now_seconds(), load_seconds = 0;
    if (!*loaded) {
        mm_worker_set_state(db, worker_id, "loading", "loading the model", NULL, job->id, &err);
        double z[MM_STAGE_COUNT] = {0};
        store_progress(&r, "loading", 0, 0, z);
        if (mm_engine_load(engine, &err) < 0) {
            mm_log("engine cannot load: %s", err.msg);
            *engine_err = err;
            char reason[MM_ERROR_MAX + 64];
            snprintf(reason, sizeof reason, "the engine could not load (%s); re-queued", err.msg);
            mm_queue_requeue(db, job, worker_id, reason, &err);
            free(rel), free(tmp_name), free(path);
            set_current(NULL);
            mm_oxen_render_ended(job->id);
            return JOB_ENGINE_DEAD;
        }
        *loaded = true;
        load_seconds = now_seconds() - t0;
        r.seconds[MM_STAGE_LOADING] = load_seconds;
    }

    mm_gen_request req = {
        .prompt = job->prompt,
        .n_references = job->n_references,
        .last_image_path = job->last_image_path,
        .partition = job->partition,
        .width = job->width,
        .height = job->height,
        .frames = job->frames,
        .steps = job->steps,
        .seed = job->seed,
        .no_audio = job->no_audio,
        .fast = job->fast,
        .crf = job->crf,
        .preset = job->preset,
        .out_path = path,
    };
    for (int i = 0; i < job->n_references; i++)
        req.references[i] = (mm_reference){.kind = job->ref_kind[i], .path = job->ref_path[i]};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_should_cancel, .user = &r};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    /* The engine's first report (encoding_prompt) is then a stage change and always stored. */
    r.stage = MM_STAGE_QUEUED;
    r.stage_started = 0;
    int rc = mm_engine_generate(engine, &req, &cb, &res, &err);

    /* The engine's own stage times win; the progress reports fill gaps. */
    double seconds[MM_STAGE_COUNT];
    memcpy(seconds, r.seconds, sizeof seconds);
    if (rc == 0)
        seconds[r.stage] += res.total_seconds - r.stage_started;
    for (int s = 0; s < MM_STAGE_COUNT; s++)
        if (res.stage_seconds[s] > 0)
            seconds[s] = res.stage_seconds[s];
    seconds[MM_STAGE_LOADING] = load_seconds;
    char *timings = timings_json(seconds);
    out.timings_json = timings;
    out.total_seconds = now_seconds() - t0;
    out.placement = res.placement[0] ? res.placement : NULL;
    out.peak_device_bytes = (long long)res.peak_device_bytes;

    publish_ctx pub = {.outputs = o->outputs, .id = job->id, .tmp_path = path, .rel = rel};
    if (rc == 0) {
        out.status = "succeeded";
        finish(&r, &out, publish_clip, &pub);
    } else if (rc == MM_CANCELLED && atomic_load(&job_lost)) {
        mm_log("%s: stopped: the job was taken away from this worker", job->id);
    } else if (rc == MM_CANCELLED && atomic_load(&stop_requested) && !atomic_load(&cancel_requested)) {
        if (mm_queue_requeue(db, job, worker_id, "the worker shut down during the render; re-queued", &err) < 0)
            mm_log("%s: %s", job->id, err.msg);
        else
            mm_log("%s: re-queued (worker shutting down)", job->id);
    } else if (rc == MM_CANCELLED) {
        out.status = "cancelled";
        finish(&r, &out, NULL, NULL);
    } else {
        out.error_message = err.msg;
        finish(&r, &out, NULL, NULL);
    }
    unlink(path); /* still here unless published */
    free(timings);
    free(pub.poster_rel);
    free(rel), free(tmp_name), free(path);
    set_current(NULL);
    mm_oxen_render_ended(job->id);
    return JOB_DONE;
}

/* ---------------------------------------------------------------- main loop */

static int connect_with_retry(const mm_worker_options *o, PGconn **out, mm_error *err)
{
    bool complained = false;
    while (!atomic_load(&stop_requested)) {
        if (mm_db_connect(o->db_url, "mmh3-worker", out, err) == 0)
            return 0;
        if (!complained)
            mm_log("%s (retrying every 2 s)", err->msg);
        complained = true;
        sleep_seconds(2);
    }
    return mm_fail(err, "stopped before the database was reachable");
}

/* Waits for a NOTIFY that may mean new work, a signal, or the timeout. */
static void wait_for_work(PGconn *db, double timeout)
{
    double end = now_seconds() + timeout;
    if (take_notifies(db))
        return;
    while (!atomic_load(&stop_requested)) {
        double left = end - now_seconds();
        if (left <= 0)
            return;
        struct pollfd pfd = {.fd = PQsocket(db), .events = POLLIN};
        int n = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (n <= 0)
            continue;
        if (!PQconsumeInput(db) || take_notifies(db))
            return;
    }
}

static void engine_status(mm_engine *engine, char *buf, size_t n)
{
    if (!engine || mm_engine_status_json(engine, buf, n) < 0)
        snprintf(buf, n, "{}");
}

int mm_worker_run(const mm_worker_options *o, mm_error *err)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    mm_media_set_verbose(0); /* libx264's statistics are not log lines */

    char host[256] = "localhost", worker_id[320];
    gethostname(host, sizeof host - 1);
    unsigned short rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (unsigned short)(time(NULL) ^ getpid());
    if (o->name && *o->name)
        snprintf(worker_id, sizeof worker_id, "%s", o->name);
    else
        snprintf(worker_id, sizeof worker_id, "%s:%d:%04x", host, (int)getpid(), rnd);

    char dir[4096];
    snprintf(dir, sizeof dir, "%s/generations", o->outputs);
    mkdir(o->outputs, 0755);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return mm_fail_errno(err, "creating %s", dir);

    PGconn *db = NULL;
    if (connect_with_retry(o, &db, err) < 0)
        return -1;
    int applied = 0;
    if (mm_db_migrate(db, &applied, err) < 0) {
        PQfinish(db);
        return -1;
    }
    if (applied)
        mm_log("database schema: applied %d migration(s)", applied);
    sweep_attempt_files(db, dir);
    if (mm_worker_register(db, worker_id, host, (int)getpid(), o->engine_kind, err) < 0) {
        PQfinish(db);
        return -1;
    }
    mm_log("worker %s started (engine %s, outputs %s)", worker_id, o->engine_kind, o->outputs);

    /* Oxen.ai (only when configured): mirroring and the claim loop, on a thread
     * of their own so the hub's speed never touches a render. */
    if (mm_oxen_agent_start(&o->oxen, o->db_url, o->outputs, worker_id, err) < 0) {
        PQfinish(db);
        return mm_error_prefix(err, "starting the Oxen agent");
    }

    pthread_t hb;
    heartbeat_ctx hctx = {.o = o, .worker_id = worker_id};
    atomic_store(&heartbeat_quit, false);
    if (pthread_create(&hb, NULL, heartbeat_main, &hctx) != 0) {
        mm_oxen_agent_stop();
        PQfinish(db);
        return mm_fail(err, "cannot start the heartbeat thread");
    }

    char status[4096];
    const char *idle_message = strcmp(o->engine_kind, "mock") == 0
                                   ? "mock engine: FFmpeg test pattern, no model weights are used"
                                   : "ready";
    mm_engine *engine = NULL;
    bool loaded = false, engine_ok = true;
    mm_error eerr = {{0}};
    if (mm_engine_create(o->engine_kind, &o->engine, &engine, &eerr) < 0) {
        engine_ok = false;
    } else if (o->engine.preload) {
        mm_worker_set_state(db, worker_id, "loading", "loading the model", NULL, NULL, err);
        if (mm_engine_load(engine, &eerr) < 0)
            engine_ok = false;
        else
            loaded = true;
    }
    if (!engine_ok) {
        char msg[MM_ERROR_MAX + 64];
        snprintf(msg, sizeof msg, "the %s engine cannot start: %s", o->engine_kind, eerr.msg);
        mm_log("%s; jobs stay queued until a worker with a working engine takes them", msg);
        mm_worker_set_state(db, worker_id, "failed", msg, NULL, NULL, err);
    } else {
        engine_status(engine, status, sizeof status);
        mm_worker_set_state(db, worker_id, "idle", idle_message, status, NULL, err);
    }

    double last_prune = 0;
    bool listening = false;
    while (!atomic_load(&stop_requested)) {
        if (mm_db_ensure(db, err) < 0) {
            listening = false;
            mm_log("%s", err->msg);
            sleep_seconds(2);
            continue;
        }
        if (!listening) {
            if (mm_db_exec(db, "LISTEN mmh3_events", err) < 0) {
                mm_log("%s", err->msg);
                sleep_seconds(2);
                continue;
            }
            listening = true;
        }
        if (!engine_ok) {
            wait_for_work(db, 5);
            continue;
        }
        int recovered = 0;
        if (mm_queue_recover(db, o->max_attempts, o->lease_seconds, &recovered, err) < 0)
            mm_log("%s", err->msg);
        else if (recovered) {
            mm_log("recovered %d interrupted job(s)", recovered);
            sweep_attempt_files(db, dir); /* their attempts' files, if they are ours to see */
        }
        if (now_seconds() - last_prune > 3600) {
            if (mm_queue_prune(db, err) < 0)
                mm_log("%s", err->msg);
            last_prune = now_seconds();
        }
        mm_job job;
        bool got = false;
        mm_error cerr = {{0}};
        int crc = mm_queue_claim(db, worker_id, o->outputs, &job, &got, &cerr);
        if (!got) {
            if (crc < 0)
                mm_log("%s", cerr.msg);
            wait_for_work(db, o->poll_seconds);
            continue;
        }
        job_end end = run_job(db, o, worker_id, engine, &loaded, &job, crc, &cerr, &eerr);
        mm_job_free(&job);
        if (end == JOB_ENGINE_DEAD) {
            engine_ok = false;
            char msg[MM_ERROR_MAX + 64];
            snprintf(msg, sizeof msg, "the %s engine cannot load its model: %s", o->engine_kind, eerr.msg);
            mm_worker_set_state(db, worker_id, "failed", msg, NULL, NULL, err);
            continue;
        }
        engine_status(engine, status, sizeof status);
        if (mm_worker_set_state(db, worker_id, "idle", idle_message, status, NULL, err) < 0)
            mm_log("%s", err->msg);
    }

    mm_log("worker %s stopping", worker_id);
    mm_oxen_agent_stop();
    mm_worker_set_state(db, worker_id, "stopped", "stopped", NULL, NULL, err);
    atomic_store(&heartbeat_quit, true);
    pthread_join(hb, NULL);
    mm_engine_destroy(engine);
    PQfinish(db);
    return 0;
}
