/* The GPU worker: one process per GPU host, any number of hosts per
 * database. It registers itself (GET /api/status shows it), keeps a
 * heartbeat, creates the engine (reporting plainly when the real engine
 * cannot start), then loops: recover interrupted jobs, claim the oldest
 * queued job, render it with progress and cancel wired to the database,
 * store the outcome. SIGTERM/SIGINT stop it cleanly: a render in flight is
 * stopped at the next step and re-queued without counting an attempt.
 */
#ifndef MMH3_WORKER_WORKER_H
#define MMH3_WORKER_WORKER_H

#include <libpq-fe.h>

#include "core/error.h"
#include "engine/engines.h"

/* What the worker tells an integration its caller wires up (`mmh3 worker`:
 * the Oxen.ai agent), so the worker itself knows none. Any member may be NULL. */
typedef struct mm_worker_hooks {
    void *user;
    /* Once the worker is registered; -1 stops the worker with err. */
    int (*start)(void *user, const char *db_url, const char *outputs, const char *worker_id, mm_error *err);
    void (*stop)(void *user);
    /* A render begins (told on the worker's own connection) and has ended. */
    void (*render_started)(void *user, PGconn *db, const char *generation_id);
    void (*render_ended)(void *user, const char *generation_id);
} mm_worker_hooks;

typedef struct mm_worker_options {
    const char *db_url;
    const char *outputs;     /* results go to <outputs>/generations/<id>.mp4 */
    const char *engine_kind; /* "h3" or "mock" */
    mm_engine_options engine;
    int max_attempts;        /* renders started before a job is failed (3) */
    double lease_seconds;    /* a worker silent this long is presumed dead (30) */
    double poll_seconds;     /* idle re-check interval besides NOTIFY wake-ups (2) */
    const char *name;        /* worker id; default host:pid:random */
    int preview_interval_ms; /* live previews at most this often (500) */
    mm_worker_hooks hooks;
} mm_worker_options;

void mm_worker_options_defaults(mm_worker_options *o);
/* Runs until SIGTERM/SIGINT; returns 0 after a clean stop. */
int mm_worker_run(const mm_worker_options *o, mm_error *err);

#endif
