/* The GPU worker: one process per GPU host, any number of hosts per
 * database. It registers itself (GET /api/status shows it), keeps a
 * heartbeat, creates the engine (reporting plainly when the real engine
 * cannot start), then loops: recover interrupted jobs, claim the oldest
 * queued job, render it with progress and cancel wired to the database,
 * store the outcome. SIGTERM/SIGINT stop it cleanly: a render in flight is
 * stopped at the next step and re-queued without counting an attempt.
 */
#ifndef MMH3_QUEUE_WORKER_H
#define MMH3_QUEUE_WORKER_H

#include "core/error.h"
#include "engine/engines.h"
#include "oxen/agent.h"

typedef struct mm_worker_options {
    const char *db_url;
    const char *outputs;     /* results go to <outputs>/generations/<id>.mp4 */
    const char *engine_kind; /* "h3" or "mock" */
    mm_engine_options engine;
    int max_attempts;        /* renders started before a job is failed (3) */
    double lease_seconds;    /* a worker silent this long is presumed dead (30) */
    double poll_seconds;     /* idle re-check interval besides NOTIFY wake-ups (2) */
    const char *name;        /* worker id; default host:pid:random */
    mm_oxen_options oxen;    /* Oxen.ai mirroring + claim loop; off without a remote */
} mm_worker_options;

void mm_worker_options_defaults(mm_worker_options *o);
/* Runs until SIGTERM/SIGINT; returns 0 after a clean stop. */
int mm_worker_run(const mm_worker_options *o, mm_error *err);

#endif
