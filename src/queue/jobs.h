/* The job queue as the GPU worker sees it: claim, progress, finish, and
 * recovery of jobs whose worker died.
 *
 * Claim: the oldest queued row, locked with FOR UPDATE SKIP LOCKED so any
 * number of workers on any number of hosts can claim concurrently and never
 * get the same row; committed at once (no transaction stays open during a
 * render). The claim counts an attempt and records the worker and its
 * database session (pid + backend start).
 *
 * Recovery: a processing row whose claiming session no longer exists (the
 * worker was killed: PostgreSQL drops its connection at once) or whose
 * worker's heartbeat is older than the lease (a host that vanished) goes
 * back to queued with its attempt counted, or to failed with a message once
 * it reached max_attempts, or to cancelled when a cancel was pending. Every
 * worker runs it before claiming, so a restarted worker re-queues its own
 * interrupted job at once.
 *
 * Fencing: progress and finish updates match the claim (worker, attempt,
 * status processing); when they match nothing the job was taken away and the
 * worker drops its result.
 */
#ifndef MMH3_QUEUE_JOBS_H
#define MMH3_QUEUE_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "core/error.h"
#include "engine/engine.h"

typedef struct mm_job {
    char id[40];
    int attempts;
    char *prompt;
    char partition[8];
    int frames, width, height, steps, crf;
    uint64_t seed;
    bool no_audio, fast;
    char preset[16];
    int n_references;
    mm_reference_kind ref_kind[MM_MAX_REFERENCES];
    char *ref_path[MM_MAX_REFERENCES]; /* absolute */
    char *last_image_path;             /* absolute, or NULL */
} mm_job;

void mm_job_free(mm_job *job);

int mm_queue_recover(PGconn *c, int max_attempts, double lease_seconds, int *recovered, mm_error *err);
/* *got is false when nothing is queued. Reference paths are resolved under outputs. */
int mm_queue_claim(PGconn *c, const char *worker_id, const char *outputs, mm_job *job, bool *got, mm_error *err);
/* Stores stage/step/timings; reports a pending cancel and whether the job is still ours. */
int mm_queue_progress(PGconn *c, const mm_job *job, const char *worker_id, const char *stage, int step,
                      int total_steps, const char *timings_json, bool *cancel_requested, bool *lost, mm_error *err);
/* After a reconnect: re-binds the claim to this session, if it is still ours. */
int mm_queue_reassert(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err);

typedef struct mm_job_outcome {
    const char *status; /* "succeeded", "failed" or "cancelled" */
    const char *timings_json;
    double total_seconds;
    const char *placement;
    long long peak_device_bytes;
    const char *result_path; /* relative to outputs, succeeded only */
    const char *poster_path; /* relative to outputs, or NULL */
    const char *error_message;
} mm_job_outcome;

int mm_queue_finish(PGconn *c, const mm_job *job, const char *worker_id, const mm_job_outcome *o, bool *lost,
                    mm_error *err);
/* Inside a transaction: locks the row if the claim is still ours (*lost otherwise). */
int mm_queue_lock_claim(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err);
/* A clean worker shutdown mid-render: back to queued, the attempt not counted. */
int mm_queue_requeue(PGconn *c, const mm_job *job, const char *worker_id, const char *reason, mm_error *err);

/* Worker rows (GET /api/status). */
int mm_worker_register(PGconn *c, const char *worker_id, const char *hostname, int pid, const char *engine_kind,
                       mm_error *err);
int mm_worker_set_state(PGconn *c, const char *worker_id, const char *state, const char *message,
                        const char *engine_status_json, const char *current_generation_id, mm_error *err);
int mm_worker_heartbeat(PGconn *c, const char *worker_id, bool *known, mm_error *err);

/* Housekeeping: tombstones older than 7 days, workers silent for a day. */
int mm_queue_prune(PGconn *c, mm_error *err);

#endif
