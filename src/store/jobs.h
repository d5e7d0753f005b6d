/* The job queue: enqueue (the HTTP API and the Oxen claim loop, one
 * statement), and as the GPU worker sees it: claim, progress, finish, and
 * recovery of jobs whose worker died.
 *
 * Enqueue: a settled request (request/request.h) becomes `count` rows in one
 * transaction, all or none.
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
#ifndef MMH3_STORE_JOBS_H
#define MMH3_STORE_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "core/error.h"
#include "request/request.h"

/* ---------------------------------------------------------------- enqueue */

/* A row that comes from a job claimed from the Oxen hub's queue. */
typedef struct mm_store_hub_job {
    const char *generation_id; /* the local id, which is the hub claim's token */
    const char *hub_id;        /* the hub's generation id (oxen_job_id); its claim becomes 'claimed' */
    const char *note;          /* oxen_message */
} mm_store_hub_job;

/* Inserts r->count generations (seeds r->seeds[k]) with status queued; *rows
 * (may be NULL) gets the JSON array text of their generation objects (caller
 * frees). With hub set: one row of that id (none when it exists already),
 * marked for mirroring, and the hub claim marked claimed, in the same
 * transaction. */
int mm_store_enqueue(PGconn *c, const mm_request *r, const mm_store_hub_job *hub, char **rows, mm_error *err);

/* ---------------------------------------------------------------- the worker's side */

typedef struct mm_job {
    char id[40];
    int attempts;
    mm_request req;                    /* as stored; req.prompt and the paths below are the job's */
    char *prompt;
    char *ref_path[MM_MAX_REFERENCES]; /* absolute: outputs + the upload's path */
    char *last_image_path;             /* absolute, or NULL */
} mm_job;

void mm_job_free(mm_job *job);

int mm_store_recover(PGconn *c, int max_attempts, double lease_seconds, int *recovered, mm_error *err);
/* *got is false when nothing is queued. Reference paths are resolved under
 * outputs. -1 with *got true: the job is claimed but cannot be rendered
 * (err says why; the caller fails it). */
int mm_store_claim_next(PGconn *c, const char *worker_id, const char *outputs, mm_job *job, bool *got, mm_error *err);
/* Stores stage/step/timings; reports a pending cancel and whether the job is still ours. */
int mm_store_progress(PGconn *c, const mm_job *job, const char *worker_id, const char *stage, int step,
                      int total_steps, const char *timings_json, bool *cancel_requested, bool *lost, mm_error *err);
/* After a reconnect: re-binds the claim to this session, if it is still ours. */
int mm_store_reassert(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err);

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

/* Runs inside the transaction that holds the job's row locked, once the claim
 * is known to be still ours: moves the clip into place and fills in its paths. */
typedef int (*mm_publish_fn)(void *user, mm_job_outcome *out, mm_error *err);

typedef enum mm_finish_result {
    MM_FINISH_STORED,         /* the outcome is committed */
    MM_FINISH_LOST,           /* the job is no longer ours; nothing was stored */
    MM_FINISH_PUBLISH_FAILED, /* publish failed (err says why); nothing was stored */
    MM_FINISH_RETRY,          /* the database failed (err says how); try again */
} mm_finish_result;

/* One try at storing the outcome, publish (may be NULL) included. */
mm_finish_result mm_store_finish(PGconn *c, const mm_job *job, const char *worker_id, mm_job_outcome *o,
                                 mm_publish_fn publish, void *user, mm_error *err);
/* A clean worker shutdown mid-render: back to queued, the attempt not counted. */
int mm_store_requeue(PGconn *c, const mm_job *job, const char *worker_id, const char *reason, mm_error *err);
/* Whether an attempt's file (generations/.<id>.<attempt>.mp4) belongs to no
 * render that may still finish: its job ended, is gone, or waits for a later
 * attempt. -1 when the id is not a UUID or the database is away. */
int mm_store_attempt_abandoned(PGconn *c, const char *id, int attempt, bool *abandoned, mm_error *err);

/* Worker rows (GET /api/status). */
int mm_store_worker_register(PGconn *c, const char *worker_id, const char *hostname, int pid,
                             const char *engine_kind, mm_error *err);
int mm_store_worker_set_state(PGconn *c, const char *worker_id, const char *state, const char *message,
                              const char *engine_status_json, const char *current_generation_id, mm_error *err);
int mm_store_worker_heartbeat(PGconn *c, const char *worker_id, bool *known, mm_error *err);

/* Housekeeping: tombstones older than 7 days, workers silent for a day. */
int mm_store_prune(PGconn *c, mm_error *err);

#endif
