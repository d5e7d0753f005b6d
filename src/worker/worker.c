#include "worker/worker.h"

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

#include "core/clock.h"
#include "core/log.h"
#include "engine/lora_catalog.h"
#include "media/poster.h"
#include "media/probe.h"
#include "store/db.h"
#include "store/jobs.h"
#include "store/loras.h"
#include "store/migrate.h"
#include "worker/preview.h"
#include "worker/sweep.h"

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

static void sleep_seconds(double s)
{
    double end = mm_clock_now() + s;
    while (!atomic_load(&stop_requested) && mm_clock_now() < end) {
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
    o->preview_interval_ms = 500;
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
                mm_db_listen_events(c, &err) < 0) {
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
        if (mm_clock_now() - last_beat >= interval) {
            bool known;
            if (mm_store_worker_heartbeat(c, h->worker_id, &known, &err) < 0)
                mm_log("heartbeat: %s", err.msg);
            last_beat = mm_clock_now();
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
    double load_seconds;  /* loading the model before this job (first job only) */
    int steps_done;       /* the last denoising step reported */
    double last_write;
    bool db_trouble;
    mm_job_preview *preview;
} render_ctx;

/* What the engine's timing table says beside the stage times: the forwards
 * run, the attention density of each (sparse attention) and the forwards a
 * step cache skipped. */
static void timing_extras(json_t *t, const mm_timing *tm)
{
    if (tm->forwards > 0)
        json_object_set_new(t, "forwards", json_integer(tm->forwards));
    if (tm->n_density > 0) {
        json_t *d = json_array();
        for (int i = 0; i < tm->n_density; i++)
            json_array_append_new(d, json_real(round(tm->density[i] * 10000) / 10000));
        json_object_set_new(t, "sparse_density", d);
    }
    const mm_step_cache_summary *sc = &tm->step_cache;
    if (sc->policy[0]) {
        json_t *skipped = json_array();
        for (int i = 0; i < sc->forwards && i < MM_STEP_CACHE_MAX_FORWARDS; i++)
            if (mm_step_cache_skipped(sc->skipped_bits, i))
                json_array_append_new(skipped, json_integer(i + 1));
        json_object_set_new(t, "step_cache",
                            json_pack("{s:s, s:i, s:i, s:o}", "policy", sc->policy, "forwards", sc->forwards,
                                      "skipped", sc->skipped, "skipped_forwards", skipped));
    }
}

/* The stage times (and, for a finished render, the engine's extras). */
static char *timings_json(const double *seconds, const mm_timing *tm)
{
    json_t *t = json_object();
    for (int s = MM_STAGE_LOADING; s < MM_STAGE_COUNT; s++)
        if (seconds[s] > 0)
            json_object_set_new(t, mm_stage_name((mm_stage)s), json_real(round(seconds[s] * 1000) / 1000));
    if (tm)
        timing_extras(t, tm);
    char *out = json_dumps(t, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(t);
    return out;
}

static void store_progress(render_ctx *r, const char *stage, int step, int total, const double *seconds)
{
    mm_error err = {{0}};
    char *timings = timings_json(seconds, NULL);
    bool cancel = false, lost = false;
    if (mm_db_ensure(r->db, &err) == 0 && r->db_trouble) {
        /* A new session: make the claim point at it before recovery sweeps
         * by other workers conclude that this worker is gone. */
        if (mm_store_reassert(r->db, r->job, r->worker_id, &lost, &err) == 0) {
            r->db_trouble = false;
            mm_log("database connection is back");
            if (lost)
                atomic_store(&job_lost, true);
        }
    }
    if (mm_store_progress(r->db, r->job, r->worker_id, stage, step, total, timings ? timings : "{}", &cancel, &lost,
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
    r->last_write = mm_clock_now();
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
    if (!stage_changed && p->step != p->total_steps && mm_clock_now() - r->last_write < 0.1)
        return;
    /* The engines report the stages after denoising at step 0; the steps are
     * all done by then, and the job's step says so instead of falling back. */
    if (p->stage == MM_STAGE_DENOISING)
        r->steps_done = p->step;
    int step = p->stage > MM_STAGE_DENOISING && p->step == 0 ? r->steps_done : p->step;
    double snapshot[MM_STAGE_COUNT];
    memcpy(snapshot, r->seconds, sizeof snapshot);
    snapshot[r->stage] += p->elapsed - r->stage_started;
    store_progress(r, mm_stage_name(p->stage), step, p->total_steps, snapshot);
}

static void on_preview(void *user, const mm_preview *pv) { mm_job_preview_publish(((render_ctx *)user)->preview, pv); }

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

/* Messages are shown to every user of the web app, which must not learn where
 * the server keeps its files: paths under the outputs folder are written
 * relative to it ("uploads/<id>.png"), adapters relative to their folder
 * ("broken.safetensors"), whether the engine was given a folder as
 * configured or resolved. */
static void hide_dir(char *msg, size_t size, const char *dir, const char *bare_as)
{
    char resolved[PATH_MAX];
    const char *forms[2] = {dir, dir ? realpath(dir, resolved) : NULL};
    for (int i = 0; i < 2; i++) {
        size_t n = forms[i] ? strlen(forms[i]) : 0;
        if (n == 0)
            continue;
        for (char *at = msg; (at = strstr(at, forms[i]));) {
            size_t b = bare_as ? strlen(bare_as) : 0, tail = strlen(at + n) + 1;
            if (at[n] == '/') {
                memmove(at, at + n + 1, tail - 1);
            } else if (bare_as && (size_t)(at - msg) + b + tail <= size) {
                memmove(at + b, at + n, tail);
                memcpy(at, bare_as, b);
                at += b;
            } else {
                at += n;
            }
        }
    }
}

static void hide_server_dirs(char *msg, size_t size, const mm_worker_options *o)
{
    char loras[1100];
    hide_dir(msg, size, mm_lora_catalog_dir(o->engine.h3.checkpoints.models_path, loras, sizeof loras),
             "$MODELS_PATH/loras");
    hide_dir(msg, size, o->outputs, NULL);
}

/* Stores the outcome, retrying through database trouble. publish (for
 * successes) runs while the store holds the row locked with the claim still
 * ours, so a clip is moved to its public name only while the job is ours,
 * and the row says succeeded only once the clip is there. */
static void finish(render_ctx *r, mm_job_outcome *out, mm_publish_fn publish, void *user)
{
    mm_error err = {{0}};
    char shown[MM_ERROR_MAX], why[MM_ERROR_MAX];
    if (out->error_message) {
        snprintf(shown, sizeof shown, "%s", out->error_message);
        hide_server_dirs(shown, sizeof shown, r->o);
        out->error_message = shown;
    }
    mm_finish_result res = MM_FINISH_RETRY;
    for (int tries = 0; tries < 30 && !atomic_load(&job_lost) && res != MM_FINISH_STORED; tries++) {
        if (tries && res == MM_FINISH_RETRY) {
            mm_log("%s: %s (retrying)", r->job->id, err.msg);
            sleep_seconds(1);
            if (atomic_load(&stop_requested) && tries > 3)
                break;
        }
        res = mm_store_finish(r->db, r->job, r->worker_id, out, publish, user, &err);
        if (res == MM_FINISH_LOST)
            break;
        if (res == MM_FINISH_PUBLISH_FAILED) {
            /* The clip cannot be made public: the job fails with why. */
            snprintf(why, sizeof why, "%s", err.msg);
            hide_server_dirs(why, sizeof why, r->o);
            out->status = "failed";
            out->result_path = out->poster_path = NULL;
            out->error_message = why;
            publish = NULL;
        }
    }
    if (res == MM_FINISH_LOST || atomic_load(&job_lost))
        mm_log("%s: the job was taken away from this worker (lease lost); its outcome is dropped", r->job->id);
    else if (res != MM_FINISH_STORED)
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
static bool attempt_file_stale(void *db, const char *name)
{
    char id[40];
    int attempt = 0, used = 0;
    if (name[0] != '.' || strlen(name) < 40 || sscanf(name, ".%36[0-9a-f-].%d.mp4%n", id, &attempt, &used) != 2 ||
        (name[used] != '\0' && strcmp(name + used, ".part") != 0))
        return false;
    bool stale = false;
    mm_error err = {{0}};
    /* not a UUID after all, or the database is away: keep it */
    return mm_store_attempt_abandoned(db, id, attempt, &stale, &err) == 0 && stale;
}

static void sweep_attempt_files(PGconn *db, const char *dir)
{
    int removed = mm_worker_sweep_dir(dir, attempt_file_stale, db);
    if (removed)
        mm_log("removed %d file(s) of interrupted renders", removed);
}

/* ---------------------------------------------------------------- one job */

/* The worker's state, for the main loop and the jobs it runs. */
typedef struct worker {
    const mm_worker_options *o;
    const mm_worker_hooks *hooks;
    PGconn *db;
    char host[256], id[320];
    char gen_dir[4096];       /* <outputs>/generations */
    mm_engine_options engine_opts; /* the caller's, with the log wired to the worker's */
    mm_engine *engine;
    bool loaded, engine_ok;
    mm_error engine_err;      /* why the engine cannot start or load */
    const char *idle_message;
    pthread_t heartbeat;
    heartbeat_ctx hctx;
    uint64_t loras_fingerprint; /* of the adapter folder last published */
    bool loras_published;
    double loras_checked;       /* when the folder was last looked at */
} worker;

static void job_begins(worker *w, const mm_job *job)
{
    mm_error err = {{0}};
    atomic_store(&cancel_requested, false);
    atomic_store(&job_lost, false);
    set_current(job->id);
    if (w->hooks->render_started)
        w->hooks->render_started(w->hooks->user, w->db, job->id);
    mm_log("%s: claimed (attempt %d), %dx%d, %d frames, %d steps", job->id, job->attempts, job->req.width,
           job->req.height, job->req.frames, job->req.steps);
    if (mm_store_worker_set_state(w->db, w->id, "busy", "rendering", NULL, job->id, &err) < 0)
        mm_log("%s", err.msg);
}

static void job_ends(worker *w, const mm_job *job)
{
    set_current(NULL);
    if (w->hooks->render_ended)
        w->hooks->render_ended(w->hooks->user, job->id);
}

/* The first job loads the model (unless --preload did); false when it cannot
 * be loaded: the job goes back to the queue for a worker that can. */
static bool load_engine(worker *w, render_ctx *r, mm_job *job)
{
    if (w->loaded)
        return true;
    mm_error err = {{0}};
    double t0 = mm_clock_now();
    mm_store_worker_set_state(w->db, w->id, "loading", "loading the model", NULL, job->id, &err);
    double z[MM_STAGE_COUNT] = {0};
    store_progress(r, "loading", 0, 0, z);
    if (mm_engine_load(w->engine, &err) < 0) {
        mm_log("engine cannot load: %s", err.msg);
        w->engine_err = err;
        char reason[MM_ERROR_MAX + 64];
        snprintf(reason, sizeof reason, "the engine could not load (%s); re-queued", err.msg);
        mm_store_requeue(w->db, job, w->id, reason, &err);
        return false;
    }
    w->loaded = true;
    r->load_seconds = r->seconds[MM_STAGE_LOADING] = mm_clock_now() - t0;
    /* back to what job_begins said: the load is over, the job renders */
    if (mm_store_worker_set_state(w->db, w->id, "busy", "rendering", NULL, job->id, &err) < 0)
        mm_log("%s", err.msg);
    return true;
}

/* What the engine request points into beside the job: the sigma list as
 * text. */
typedef struct request_texts {
    char sigmas[MM_SIGMAS_MAX * 24];
} request_texts;

/* The stored sampler as the engine's: a preset by name, a custom list as the
 * text the CLI's --sigmas takes, or none (the release grid, unless an
 * adapter names its own sampler). */
static void engine_sampler(const mm_request_sampler *s, mm_gen_request *req, request_texts *t)
{
    if (s->kind == MM_SAMPLER_PRESET) {
        req->sampler = s->preset;
    } else if (s->kind == MM_SAMPLER_SIGMAS) {
        size_t n = 0;
        for (int i = 0; i < s->n_sigmas && n + 24 < sizeof t->sigmas; i++) {
            char num[24];
            mm_number_shortest(s->sigmas[i], num, sizeof num);
            n += (size_t)snprintf(t->sigmas + n, sizeof t->sigmas - n, "%s%s", i ? "," : "", num);
        }
        req->sigmas = t->sigmas;
    }
}

/* The stored step-cache setting, as settled, checked against the partition. */
static int engine_cache(const mm_request *q, mm_gen_request *req, mm_error *err)
{
    req->cache = q->cache;
    return mm_step_cache_check(&req->cache, strcmp(q->partition, "ref2va") == 0, err);
}

/* The stored job as the engine's request, writing to out_path: everything
 * it asked for, the few-step fields included (adapters by name, resolved by
 * the engine under $MODELS_PATH/loras). */
static int engine_request(const mm_job *job, const char *out_path, mm_gen_request *req, request_texts *t,
                          mm_error *err)
{
    const mm_request *q = &job->req;
    *req = (mm_gen_request){
        .prompt = q->prompt,
        .n_references = q->n_refs,
        .last_image_path = job->last_image_path,
        .partition = q->partition,
        .width = q->width,
        .height = q->height,
        .frames = q->frames,
        .steps = q->steps,
        .seed = q->seeds[0],
        .no_audio = q->no_audio,
        .fast = q->fast,
        .crf = q->crf,
        .preset = q->preset,
        .out_path = out_path,
        .sparse = strcmp(q->sparse, "off") != 0 ? q->sparse : NULL,
    };
    for (int i = 0; i < q->n_refs; i++)
        req->references[i] = (mm_reference){.kind = q->refs[i].kind, .path = job->ref_path[i]};
    for (int i = 0; i < q->n_loras && i < MM_GEN_MAX_LORAS; i++)
        req->loras[req->n_loras++] = (mm_gen_lora){.name = q->loras[i].name, .strength = (float)q->loras[i].strength};
    engine_sampler(&q->sampler, req, t);
    return engine_cache(q, req, err);
}

/* The engine's own stage times win; the progress reports fill gaps. */
static char *outcome_timings(const render_ctx *r, int rc, const mm_gen_result *res)
{
    double seconds[MM_STAGE_COUNT];
    memcpy(seconds, r->seconds, sizeof seconds);
    if (rc == 0)
        seconds[r->stage] += res->total_seconds - r->stage_started;
    for (int s = 0; s < MM_STAGE_COUNT; s++)
        if (res->stage_seconds[s] > 0)
            seconds[s] = res->stage_seconds[s];
    seconds[MM_STAGE_LOADING] = r->load_seconds;
    return timings_json(seconds, rc == 0 ? &res->timing : NULL);
}

/* Stores how the render ended: a success (published), a cancel, a failure,
 * or, when the worker is shutting down, the job back in the queue. */
static void conclude(worker *w, render_ctx *r, const mm_job *job, int rc, mm_job_outcome *out,
                     const mm_error *render_err, publish_ctx *pub)
{
    mm_error err = {{0}};
    if (rc == 0) {
        out->status = "succeeded";
        finish(r, out, publish_clip, pub);
    } else if (rc == MM_CANCELLED && atomic_load(&job_lost)) {
        mm_log("%s: stopped: the job was taken away from this worker", job->id);
    } else if (rc == MM_CANCELLED && atomic_load(&stop_requested) && !atomic_load(&cancel_requested)) {
        if (mm_store_requeue(w->db, job, w->id, "the worker shut down during the render; re-queued", &err) < 0)
            mm_log("%s: %s", job->id, err.msg);
        else
            mm_log("%s: re-queued (worker shutting down)", job->id);
    } else if (rc == MM_CANCELLED) {
        out->status = "cancelled";
        finish(r, out, NULL, NULL);
    } else {
        out->error_message = render_err->msg;
        finish(r, out, NULL, NULL);
    }
}

static job_end run_job(worker *w, mm_job *job, int claim_rc, const mm_error *claim_err)
{
    render_ctx r = {.db = w->db, .o = w->o, .worker_id = w->id, .job = job, .stage = MM_STAGE_QUEUED};
    mm_job_outcome out = {.status = "failed", .placement = NULL};
    job_begins(w, job);
    if (claim_rc < 0) {
        out.error_message = claim_err->msg;
        finish(&r, &out, NULL, NULL);
        job_ends(w, job);
        return JOB_DONE;
    }

    /* Each attempt renders to its own hidden name (nginx never serves dot
     * files), so a worker that lost this job cannot touch another's file. */
    char attempt[32];
    snprintf(attempt, sizeof attempt, ".%d.mp4", job->attempts);
    remove_attempt_files(w->gen_dir, job->id);
    char *rel = strdup_printf("generations/%s%s", job->id, ".mp4");
    char *tmp_name = strdup_printf(".%s%s", job->id, attempt);
    char *path = strdup_printf("%s/%s", w->gen_dir, tmp_name);

    double t0 = mm_clock_now();
    if (!load_engine(w, &r, job)) {
        free(rel), free(tmp_name), free(path);
        job_ends(w, job);
        return JOB_ENGINE_DEAD;
    }
    mm_gen_request req;
    request_texts texts;
    mm_job_preview preview;
    mm_job_preview_begin(&preview, w->db, w->o->outputs, job, w->id);
    r.preview = &preview;
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_should_cancel, .user = &r,
                           .preview = on_preview, .preview_interval_ms = w->o->preview_interval_ms};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    /* The engine's first report (encoding_prompt) is then a stage change and always stored. */
    r.stage = MM_STAGE_QUEUED;
    r.stage_started = 0;
    mm_error err = {{0}};
    int rc = engine_request(job, path, &req, &texts, &err);
    if (rc == 0)
        rc = mm_engine_generate(w->engine, &req, &cb, &res, &err);

    char *timings = outcome_timings(&r, rc, &res);
    out.timings_json = timings;
    out.total_seconds = mm_clock_now() - t0;
    out.placement = res.placement[0] ? res.placement : NULL;
    out.peak_device_bytes = (long long)res.peak_device_bytes;
    publish_ctx pub = {.outputs = w->o->outputs, .id = job->id, .tmp_path = path, .rel = rel};
    conclude(w, &r, job, rc, &out, &err, &pub);
    mm_job_preview_end(&preview);
    unlink(path); /* still here unless published */
    free(timings);
    free(pub.poster_rel);
    free(rel), free(tmp_name), free(path);
    job_ends(w, job);
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
    double end = mm_clock_now() + timeout;
    if (take_notifies(db))
        return;
    while (!atomic_load(&stop_requested)) {
        double left = end - mm_clock_now();
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

static void set_idle(worker *w)
{
    char status[4096];
    mm_error err = {{0}};
    engine_status(w->engine, status, sizeof status);
    if (mm_store_worker_set_state(w->db, w->id, "idle", w->idle_message, status, NULL, &err) < 0)
        mm_log("%s", err.msg);
}

static void set_failed(worker *w, const char *what)
{
    char msg[MM_ERROR_MAX + 64];
    mm_error err = {{0}};
    snprintf(msg, sizeof msg, "the %s engine %s: %s", w->o->engine_kind, what, w->engine_err.msg);
    mm_store_worker_set_state(w->db, w->id, "failed", msg, NULL, NULL, &err);
}

/* The process's identity: --name, else host:pid:random. */
static void identify(worker *w)
{
    snprintf(w->host, sizeof w->host, "localhost");
    gethostname(w->host, sizeof w->host - 1);
    unsigned short rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (unsigned short)(time(NULL) ^ getpid());
    if (w->o->name && *w->o->name)
        snprintf(w->id, sizeof w->id, "%s", w->o->name);
    else
        snprintf(w->id, sizeof w->id, "%s:%d:%04x", w->host, (int)getpid(), rnd);
}

/* Folders, the database (schema up to date), the worker's row, the hooks and
 * the heartbeat thread. */
static int worker_start(worker *w, mm_error *err)
{
    identify(w);
    snprintf(w->gen_dir, sizeof w->gen_dir, "%s/generations", w->o->outputs);
    mkdir(w->o->outputs, 0755);
    if (mkdir(w->gen_dir, 0755) < 0 && errno != EEXIST)
        return mm_fail_errno(err, "creating %s", w->gen_dir);
    if (connect_with_retry(w->o, &w->db, err) < 0)
        return -1;
    int applied = 0;
    if (mm_db_migrate(w->db, &applied, err) < 0)
        return -1;
    if (applied)
        mm_log("database schema: applied %d migration(s)", applied);
    sweep_attempt_files(w->db, w->gen_dir);
    mm_worker_previews_sweep(w->db, w->o->outputs);
    if (mm_store_worker_register(w->db, w->id, w->host, (int)getpid(), w->o->engine_kind, err) < 0)
        return -1;
    mm_log("worker %s started (engine %s, outputs %s)", w->id, w->o->engine_kind, w->o->outputs);
    /* The hooks' work (Oxen.ai) runs on threads of their own, so a slow hub
     * never touches a render. */
    if (w->hooks->start && w->hooks->start(w->hooks->user, w->o->db_url, w->o->outputs, w->id, err) < 0)
        return -1;
    w->hctx = (heartbeat_ctx){.o = w->o, .worker_id = w->id};
    atomic_store(&heartbeat_quit, false);
    if (pthread_create(&w->heartbeat, NULL, heartbeat_main, &w->hctx) != 0) {
        if (w->hooks->stop)
            w->hooks->stop(w->hooks->user);
        return mm_fail(err, "cannot start the heartbeat thread");
    }
    return 0;
}

/* The engine's notable events (files found, adapters loaded) in the worker's log. */
static void engine_log(void *user, const char *line)
{
    (void)user;
    mm_log("%s", line);
}

/* The engine is created at start (and loaded with --preload); when it cannot
 * start, the worker says why and leaves the jobs to others. */
static void engine_start(worker *w)
{
    mm_error err = {{0}};
    w->idle_message = strcmp(w->o->engine_kind, "mock") == 0
                          ? "mock engine: FFmpeg test pattern, no model weights are used"
                          : "ready";
    w->engine_ok = true;
    w->engine_opts = w->o->engine;
    if (!w->engine_opts.h3.log)
        w->engine_opts.h3.log = engine_log;
    if (mm_engine_create(w->o->engine_kind, &w->engine_opts, &w->engine, &w->engine_err) < 0) {
        w->engine_ok = false;
    } else if (w->o->engine.preload) {
        mm_store_worker_set_state(w->db, w->id, "loading", "loading the model", NULL, NULL, &err);
        if (mm_engine_load(w->engine, &w->engine_err) < 0)
            w->engine_ok = false;
        else
            w->loaded = true;
    }
    if (!w->engine_ok) {
        mm_log("the %s engine cannot start: %s; jobs stay queued until a worker with a working engine takes them",
               w->o->engine_kind, w->engine_err.msg);
        set_failed(w, "cannot start");
    } else {
        set_idle(w);
    }
}

/* Recovery of interrupted jobs, housekeeping, then one claim; false when
 * nothing was there to render. */
static bool claim_and_render(worker *w, double *last_prune, mm_error *err)
{
    int recovered = 0;
    if (mm_store_recover(w->db, w->o->max_attempts, w->o->lease_seconds, &recovered, err) < 0)
        mm_log("%s", err->msg);
    else if (recovered) {
        mm_log("recovered %d interrupted job(s)", recovered);
        sweep_attempt_files(w->db, w->gen_dir); /* their attempts' files, if they are ours to see */
    }
    if (mm_clock_now() - *last_prune > 3600) {
        if (mm_store_prune(w->db, err) < 0)
            mm_log("%s", err->msg);
        *last_prune = mm_clock_now();
    }
    mm_job job;
    bool got = false;
    mm_error cerr = {{0}};
    int crc = mm_store_claim_next(w->db, w->id, w->o->outputs, &job, &got, &cerr);
    if (!got) {
        if (crc < 0)
            mm_log("%s", cerr.msg);
        return false;
    }
    job_end end = run_job(w, &job, crc, &cerr);
    mm_job_free(&job);
    if (end == JOB_ENGINE_DEAD) {
        w->engine_ok = false;
        set_failed(w, "cannot load its model");
    } else {
        set_idle(w);
    }
    return true;
}

/* The adapter catalogue for the API (GET /api/loras, enqueue's name check):
 * published at start and again whenever the folder's files change, looked
 * at between jobs at most once a second. */
static void publish_loras(worker *w)
{
    if (w->loras_published && mm_clock_now() - w->loras_checked < 1.0)
        return;
    w->loras_checked = mm_clock_now();
    const char *models = w->o->engine.h3.checkpoints.models_path;
    uint64_t fp;
    mm_error err = {{0}};
    if (mm_lora_catalog_fingerprint(models, &fp, &err) < 0) {
        mm_log("adapter folder: %s", err.msg);
        return;
    }
    if (w->loras_published && fp == w->loras_fingerprint)
        return;
    json_t *list = NULL;
    if (mm_lora_catalog_scan(models, &list, &err) < 0 || mm_store_loras_publish(w->db, w->id, list, &err) < 0) {
        mm_log("adapter catalogue: %s", err.msg);
    } else {
        mm_log("adapter catalogue: %zu adapter(s) published", json_array_size(list));
        w->loras_fingerprint = fp;
        w->loras_published = true;
    }
    json_decref(list);
}

static void worker_loop(worker *w, mm_error *err)
{
    double last_prune = 0;
    bool listening = false;
    while (!atomic_load(&stop_requested)) {
        if (mm_db_ensure(w->db, err) < 0) {
            listening = false;
            mm_log("%s", err->msg);
            sleep_seconds(2);
            continue;
        }
        if (!listening) {
            if (mm_db_listen_events(w->db, err) < 0) {
                mm_log("%s", err->msg);
                sleep_seconds(2);
                continue;
            }
            listening = true;
        }
        publish_loras(w);
        if (!w->engine_ok)
            wait_for_work(w->db, 5);
        else if (!claim_and_render(w, &last_prune, err))
            wait_for_work(w->db, w->o->poll_seconds);
    }
}

int mm_worker_run(const mm_worker_options *o, mm_error *err)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    mm_media_set_verbose(0); /* libx264's statistics are not log lines */

    worker w = {.o = o, .hooks = &o->hooks};
    if (worker_start(&w, err) < 0) {
        if (w.db)
            PQfinish(w.db);
        return -1;
    }
    publish_loras(&w); /* before the worker says it is ready, so a first request is checked against it */
    engine_start(&w);
    worker_loop(&w, err);

    mm_log("worker %s stopping", w.id);
    if (w.hooks->stop)
        w.hooks->stop(w.hooks->user);
    mm_store_worker_set_state(w.db, w.id, "stopped", "stopped", NULL, NULL, err);
    atomic_store(&heartbeat_quit, true);
    pthread_join(w.heartbeat, NULL);
    mm_engine_destroy(w.engine);
    PQfinish(w.db);
    return 0;
}
