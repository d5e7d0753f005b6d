/* The worker's Oxen agent: one thread per worker, started only when the
 * worker is configured for Oxen (--oxen-remote, or $MMH3_OXEN_REMOTE), so an
 * unconfigured worker makes no Oxen traffic at all.
 *
 * It does two things, one call at a time, never in the render's way:
 *
 * Mirroring. When a render starts (mm_oxen_render_started) the generation is
 * marked oxen_status 'starting'; the agent then commits a "processing" row to
 * the repository's history frame (the pending record on the hub) and marks it
 * 'pending'. When the render has ended, the agent uploads the mp4 (successes)
 * and commits the final row: workspace -> upload -> index the frame -> append
 * the row -> merge, then 'mirrored'. A hub failure (down, slow, refused key,
 * 5xx after retries, malformed answer) ends as oxen_status 'failed' with
 * oxen_message saying which call failed and why; the render and the local
 * result are never touched. The state lives in the generation row, so a
 * killed worker's successor carries on where it stopped. Writes to the hub
 * are sequential, across workers too (a PostgreSQL advisory lock).
 *
 * Claim loop. Every poll seconds, while this worker is idle and nothing is
 * queued locally, the agent lists the hub's queue for jobs against our model
 * name and claims the oldest one: the claim is written down first
 * (oxen_claims, with the local generation id as the claim token), then made
 * on the hub, then the local row is inserted in one transaction with the
 * claim's state. Every step can be repeated after a crash without a second
 * row (the claim token makes the hub's claim idempotent; the local row's id
 * is the token), and the local queue's own transactional claim renders it
 * once. Its outcome is reported back to the hub after the mirror commit.
 */
#ifndef MMH3_OXEN_AGENT_H
#define MMH3_OXEN_AGENT_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "core/error.h"

#define MM_OXEN_MODEL_DEFAULT "minimax-h3"

typedef struct mm_oxen_options {
    const char *remote;    /* NULL or "": Oxen is off */
    const char *token;     /* NULL: the key stored through /api/settings */
    const char *model;     /* the hub model name whose jobs we claim */
    double poll_seconds;   /* claim loop interval; 0 disables claiming */
    double timeout;        /* seconds per hub call (one try) */
} mm_oxen_options;

/* Defaults, then $MMH3_OXEN_REMOTE / _TOKEN / _MODEL / _POLL / _TIMEOUT. */
void mm_oxen_options_from_env(mm_oxen_options *o);
/* Checks the options (remote URL, poll, timeout); a NULL remote is valid (off). */
int mm_oxen_options_check(const mm_oxen_options *o, mm_error *err);

/* Starts the agent thread when o->remote is set (no-op otherwise). */
int mm_oxen_agent_start(const mm_oxen_options *o, const char *db_url, const char *outputs, const char *worker_id,
                        mm_error *err);
/* Stops it (calls in flight are cut short); safe when not started. */
void mm_oxen_agent_stop(void);

/* Worker hooks, cheap and safe to call when the agent is off. started marks
 * the generation for mirroring (on the worker's own connection); ended wakes
 * the agent to finish it. */
void mm_oxen_render_started(PGconn *db, const char *generation_id);
void mm_oxen_render_ended(const char *generation_id);

#endif
