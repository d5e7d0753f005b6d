/* Live previews of rendering jobs (sql/009_previews.sql): the newest one
 * per job, recorded by the worker that holds the claim and relayed to the
 * event streams by the same statement's NOTIFY (kind "preview"). */
#ifndef MMH3_STORE_PREVIEWS_H
#define MMH3_STORE_PREVIEWS_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "core/error.h"
#include "store/jobs.h"

typedef struct mm_store_preview {
    int seq;         /* 1, 2, ... within the job */
    const char *url; /* /api/files/previews/<id>.jpg?seq=N */
    int step, total_steps;
    int frames, frame_width, frame_height;
} mm_store_preview;

/* Records it and notifies, only while the claim (worker, attempt,
 * processing) is still this worker's; *lost when it is not. */
int mm_store_preview_record(PGconn *c, const mm_job *job, const char *worker_id, const mm_store_preview *p, bool *lost,
                            mm_error *err);
/* The job's preview is over (its file is removed). */
int mm_store_preview_clear(PGconn *c, const char *generation_id, mm_error *err);
/* True when no render of generation `id` is in progress, so a preview file
 * of it is left over from a worker that died. */
int mm_store_preview_stale(PGconn *c, const char *id, bool *stale, mm_error *err);

#endif
