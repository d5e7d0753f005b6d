/* A job's live previews as the worker publishes them: the engine's picture
 * to <outputs>/previews/<id>.jpg (written beside it and renamed over it, so
 * nginx serves a whole picture or the previous one), then recorded and
 * announced through the store (store/previews.h). When the job ends,
 * whatever its outcome, the file and the record go (on success the clip
 * takes the preview's place; a DELETE during the render cancels it, so it
 * ends the same way). Files left by a worker that died are swept at start.
 * A preview that cannot be written or stored is logged once and the render
 * goes on: previews never fail a job. */
#ifndef MMH3_WORKER_PREVIEW_H
#define MMH3_WORKER_PREVIEW_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "engine/engine.h"
#include "store/jobs.h"

typedef struct mm_job_preview {
    PGconn *db;
    const mm_job *job;
    const char *worker_id;
    char path[4096]; /* <outputs>/previews/<id>.jpg */
    int seq;         /* previews published */
    bool complained;
} mm_job_preview;

void mm_job_preview_begin(mm_job_preview *p, PGconn *db, const char *outputs, const mm_job *job,
                          const char *worker_id);
void mm_job_preview_publish(mm_job_preview *p, const mm_preview *pv);
void mm_job_preview_end(mm_job_preview *p);

/* At start: preview files whose job is no longer rendering. */
void mm_worker_previews_sweep(PGconn *db, const char *outputs);

#endif
