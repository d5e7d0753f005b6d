/* A job's live previews (preview.h). */
#include "worker/preview.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "media/image.h"
#include "store/previews.h"
#include "worker/sweep.h"

void mm_job_preview_begin(mm_job_preview *p, PGconn *db, const char *outputs, const mm_job *job,
                          const char *worker_id)
{
    memset(p, 0, sizeof *p);
    p->db = db;
    p->job = job;
    p->worker_id = worker_id;
    char dir[3800];
    snprintf(dir, sizeof dir, "%s/previews", outputs);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        mm_log("%s: no previews: cannot create %s: %s", job->id, dir, strerror(errno));
    snprintf(p->path, sizeof p->path, "%s/%.40s.jpg", dir, job->id);
}

static void complain(mm_job_preview *p, const char *what)
{
    if (!p->complained)
        mm_log("%s: preview: %s (the render goes on; said once per job)", p->job->id, what);
    p->complained = true;
}

void mm_job_preview_publish(mm_job_preview *p, const mm_preview *pv)
{
    mm_error err = {{0}};
    if (strcmp(pv->ext, "jpg") != 0) { /* nginx serves previews/<id>.jpg only */
        complain(p, "the engine made a picture that is not a JPEG");
        return;
    }
    if (mm_file_write_atomic(p->path, pv->data, pv->size, &err) != 0) {
        complain(p, err.msg);
        return;
    }
    char url[128];
    snprintf(url, sizeof url, "/api/files/previews/%s.jpg?seq=%d", p->job->id, p->seq + 1);
    mm_store_preview rec = {.seq = p->seq + 1, .url = url, .step = pv->step, .total_steps = pv->total_steps,
                            .frames = pv->frames, .frame_width = pv->frame_width, .frame_height = pv->frame_height};
    bool lost = false;
    if (mm_store_preview_record(p->db, p->job, p->worker_id, &rec, &lost, &err) != 0) {
        complain(p, err.msg);
        return;
    }
    if (!lost)
        p->seq++;
}

void mm_job_preview_end(mm_job_preview *p)
{
    mm_error err = {{0}};
    unlink(p->path);
    if (p->seq > 0 && mm_store_preview_clear(p->db, p->job->id, &err) != 0)
        mm_log("%s: %s", p->job->id, err.msg);
}

/* <id>.jpg[.part] of a job that no longer renders. */
static bool preview_stale(void *db, const char *name)
{
    char id[40];
    int used = 0;
    bool stale = false;
    mm_error err = {{0}};
    if (sscanf(name, "%36[0-9a-f-]%n", id, &used) != 1 || used != 36 ||
        (strcmp(name + used, ".jpg") != 0 && strcmp(name + used, ".jpg.part") != 0))
        return false;
    return mm_store_preview_stale(db, id, &stale, &err) == 0 && stale;
}

void mm_worker_previews_sweep(PGconn *db, const char *outputs)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/previews", outputs);
    int removed = mm_worker_sweep_dir(dir, preview_stale, db);
    if (removed)
        mm_log("removed %d preview(s) of renders that ended elsewhere", removed);
}
