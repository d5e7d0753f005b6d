/* Mirroring renders to the hub repository (see agent.h): the pending
 * record when a render starts, the mp4 and the final history row when it
 * ends, and the report of a claimed job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "oxen/agent_internal.h"
#include "oxen/hub.h"
#include "queue/db.h"
#include "queue/log.h"

enum {
    C_ID, C_STATUS, C_OXEN_STATUS, C_JOB, C_PROMPT, C_FRAMES, C_WIDTH, C_HEIGHT, C_SEED, C_STEPS, C_RESULT,
    C_ERROR, C_ENQUEUED, C_STARTED, C_COMPLETED, C_WORKER
};

static long gcd(long a, long b)
{
    while (b) {
        long t = a % b;
        a = b, b = t;
    }
    return a;
}

static json_t *int_or_null(const char *s)
{
    return s ? json_integer(strtoll(s, NULL, 10)) : json_null();
}

/* The history row in Oxen's generation-row shape (MM_HUB_HISTORY_COLUMNS). */
static json_t *history_row(const mm_oxen_agent *a, PGresult *r, const char *status, const char *result_url,
                           const char *file)
{
    long w = atol(PQgetvalue(r, 0, C_WIDTH)), h = atol(PQgetvalue(r, 0, C_HEIGHT));
    long g = gcd(w, h) ? gcd(w, h) : 1;
    char aspect[48];
    snprintf(aspect, sizeof aspect, "%ld:%ld", w / g, h / g);
    int frames = atoi(PQgetvalue(r, 0, C_FRAMES));
    const char *job = mm_db_get(r, 0, C_JOB);
    json_t *row = json_object();
    json_object_set_new(row, "generation_id", json_string(PQgetvalue(r, 0, C_ID)));
    json_object_set_new(row, "status", json_string(status));
    json_object_set_new(row, "model_name", json_string(a->model));
    json_object_set_new(row, "media_type", json_string("video"));
    json_object_set_new(row, "prompt", json_string(PQgetvalue(r, 0, C_PROMPT)));
    json_object_set_new(row, "duration", json_real(frames / 24.0));
    json_object_set_new(row, "aspect_ratio", json_string(aspect));
    json_object_set_new(row, "width", json_integer(w));
    json_object_set_new(row, "height", json_integer(h));
    json_object_set_new(row, "frames", json_integer(frames));
    json_object_set_new(row, "seed", int_or_null(PQgetvalue(r, 0, C_SEED)));
    json_object_set_new(row, "steps", int_or_null(PQgetvalue(r, 0, C_STEPS)));
    json_object_set_new(row, "enqueued_at", int_or_null(mm_db_get(r, 0, C_ENQUEUED)));
    json_object_set_new(row, "started_at", int_or_null(mm_db_get(r, 0, C_STARTED)));
    bool final = strcmp(status, "processing") != 0;
    json_object_set_new(row, "completed_at", final ? int_or_null(mm_db_get(r, 0, C_COMPLETED)) : json_null());
    json_object_set_new(row, "result_url", result_url ? json_string(result_url) : json_null());
    json_object_set_new(row, "file", file ? json_string(file) : json_null());
    const char *e = final ? mm_db_get(r, 0, C_ERROR) : NULL;
    json_object_set_new(row, "error_message", e && strcmp(status, "succeeded") != 0 ? json_string(e) : json_null());
    json_object_set_new(row, "source", json_string(job ? "oxen" : "local"));
    json_object_set_new(row, "oxen_job_id", job ? json_string(job) : json_null());
    const char *worker = mm_db_get(r, 0, C_WORKER);
    json_object_set_new(row, "worker_id", worker ? json_string(worker) : json_null());
    return row;
}

/* workspace -> (upload) -> index -> append -> merge, redone once from a
 * fresh workspace when the branch moved on or the frame had to be created. */
static int commit_record(mm_oxen_agent *a, const char *gen_id, const char *phase, const json_t *row,
                         const char *video_path, const char *video_name, const char *message, mm_error *err)
{
    const mm_oxen_client *c = &a->client;
    char ws[128], name[160];
    snprintf(ws, sizeof ws, "mmh3-%s-%s", gen_id, phase);
    snprintf(name, sizeof name, "mmh3 %s %s", phase, gen_id);
    bool created_frame = false;
    for (int round = 0; round < 3; round++) {
        bool missing = false, behind = false;
        if (mm_hub_workspace_create(c, ws, name, err) < 0)
            return mm_error_prefix(err, "creating the workspace");
        if (video_path && mm_hub_workspace_upload(c, ws, MM_HUB_VIDEO_DIR, video_path, video_name, err) < 0)
            goto drop;
        if (mm_hub_df_index(c, ws, MM_HUB_HISTORY_PATH, &missing, err) < 0) {
            if (!missing || created_frame) {
                mm_error_prefix(err, "indexing %s", MM_HUB_HISTORY_PATH);
                goto drop;
            }
            /* First use of the repository: create the frame (committed), then
             * start over from a workspace that contains it. */
            mm_error ignored = {{0}};
            mm_hub_workspace_delete(c, ws, &ignored);
            static const char header[] = MM_HUB_HISTORY_COLUMNS "\n";
            if (mm_hub_put_file(c, "", MM_HUB_HISTORY_PATH, header, sizeof header - 1,
                                "mmh3: create the render history frame", err) < 0)
                return mm_error_prefix(err, "creating %s", MM_HUB_HISTORY_PATH);
            created_frame = true;
            continue;
        }
        if (mm_hub_df_append(c, ws, MM_HUB_HISTORY_PATH, row, err) < 0) {
            mm_error_prefix(err, "appending the history row");
            goto drop;
        }
        if (mm_hub_merge(c, ws, message, &behind, err) < 0) {
            if (behind && round == 0) {
                mm_error ignored = {{0}};
                mm_hub_workspace_delete(c, ws, &ignored);
                continue;
            }
            mm_error_prefix(err, "merging the workspace");
            goto drop;
        }
        mm_error ignored = {{0}};
        mm_hub_workspace_delete(c, ws, &ignored); /* merged; the hub may already have dropped it */
        return 0;
    drop:;
        mm_error ignored2 = {{0}};
        mm_hub_workspace_delete(c, ws, &ignored2);
        return -1;
    }
    return mm_fail(err, "the workspace kept falling behind the branch");
}

static int set_state(mm_oxen_agent *a, const char *id, const char *from, const char *to, const char *message,
                     mm_error *err)
{
    const char *p[] = {id, from, to, message};
    return mm_db_query(a->db,
                       "UPDATE generations SET oxen_status = $3, oxen_message = $4"
                       " WHERE id = $1::uuid AND oxen_status = $2",
                       4, p, NULL, err);
}

int mm_oxen_mirror_next(mm_oxen_agent *a, bool *did, mm_error *err)
{
    *did = false;
    PGresult *r;
    if (mm_db_query(a->db,
                    "SELECT g.id, g.status, g.oxen_status, g.oxen_job_id, g.prompt, g.frames, g.width, g.height,"
                    "       g.seed, g.steps, g.result_path, g.error_message,"
                    "       floor(extract(epoch FROM g.enqueued_at))::bigint,"
                    "       floor(extract(epoch FROM g.started_at))::bigint,"
                    "       floor(extract(epoch FROM g.completed_at))::bigint, g.worker_id"
                    "  FROM generations g"
                    " WHERE g.oxen_status = 'starting'"
                    "    OR (g.oxen_status = 'pending' AND g.status IN ('succeeded', 'failed', 'cancelled'))"
                    " ORDER BY COALESCE(g.completed_at, g.started_at, g.enqueued_at), g.id LIMIT 1",
                    0, NULL, &r, err) < 0)
        return mm_error_prefix(err, "looking for renders to mirror");
    if (PQntuples(r) == 0) {
        PQclear(r);
        return 0;
    }
    *did = true;
    char id[40], from[16], status[16];
    snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, C_ID));
    snprintf(from, sizeof from, "%s", PQgetvalue(r, 0, C_OXEN_STATUS));
    snprintf(status, sizeof status, "%s", PQgetvalue(r, 0, C_STATUS));
    char job_id[256] = "";
    if (mm_db_get(r, 0, C_JOB))
        snprintf(job_id, sizeof job_id, "%s", PQgetvalue(r, 0, C_JOB));
    const char *job = job_id[0] ? job_id : NULL;
    bool terminal = strcmp(status, "succeeded") == 0 || strcmp(status, "failed") == 0 ||
                    strcmp(status, "cancelled") == 0;
    mm_error herr = {{0}};
    int rc = 0;
    char done_msg[512] = "";

    if (!terminal) {
        /* The render is under way: the pending record. */
        json_t *row = history_row(a, r, "processing", NULL, NULL);
        char message[128];
        snprintf(message, sizeof message, "mmh3: render %s started", id);
        if (commit_record(a, id, "start", row, NULL, NULL, message, &herr) < 0) {
            mm_error_prefix(&herr, "recording the render start on the hub");
            rc = -1;
        }
        json_decref(row);
        if (rc == 0)
            snprintf(done_msg, sizeof done_msg, "pending: a processing row is in %s/%s %s", a->client.remote.ns,
                     a->client.remote.repo, MM_HUB_HISTORY_PATH);
        PQclear(r);
        if (rc == 0)
            return set_state(a, id, from, "pending", done_msg, err);
        mm_oxen_redact(herr.msg, a->client.token);
        mm_log("oxen: %s: %s", id, herr.msg);
        return set_state(a, id, from, "failed", herr.msg, err);
    }

    /* The render has ended: the final row, with the clip when there is one. */
    char file[96], url[1024], video_path[4096], video_name[64];
    const char *result = mm_db_get(r, 0, C_RESULT);
    bool ok = strcmp(status, "succeeded") == 0 && result;
    snprintf(file, sizeof file, "%s/%s.mp4", MM_HUB_VIDEO_DIR, id);
    snprintf(video_name, sizeof video_name, "%s.mp4", id);
    snprintf(video_path, sizeof video_path, "%s/%s", a->outputs, result ? result : "");
    mm_hub_file_url(&a->client, file, url, sizeof url);
    const char *error_text = mm_db_get(r, 0, C_ERROR);
    char *error_copy = error_text ? strdup(error_text) : NULL;
    json_t *row = history_row(a, r, status, ok ? url : NULL, ok ? file : NULL);
    PQclear(r);
    char message[320];
    snprintf(message, sizeof message, "mmh3: render %.40s %.16s%s%.100s", id, status, ok ? ", " : "", ok ? file : "");
    if (commit_record(a, id, "end", row, ok ? video_path : NULL, video_name, message, &herr) < 0) {
        mm_error_prefix(&herr, ok ? "uploading the result to the hub" : "recording the outcome on the hub");
        rc = -1;
    }
    json_decref(row);
    if (job) {
        /* A job claimed from the hub's queue: report its outcome. */
        bool success = rc == 0 && ok;
        const char *outcome = success                                       ? "succeeded"
                              : rc == 0 && strcmp(status, "cancelled") == 0 ? "cancelled"
                                                                            : "failed";
        char why[MM_ERROR_MAX + 64];
        snprintf(why, sizeof why, "%s", rc < 0 ? herr.msg : error_copy ? error_copy : status);
        mm_error cerr = {{0}};
        if (mm_hub_queue_complete(&a->client, job, id, outcome, success ? url : NULL, success ? NULL : why, &cerr) <
            0) {
            char both[MM_ERROR_MAX];
            if (rc == 0)
                snprintf(both, sizeof both, "reporting the outcome of hub job %.200s: %.700s", job, cerr.msg);
            else
                snprintf(both, sizeof both, "%.500s; reporting hub job %.100s failed too: %.300s", herr.msg, job,
                         cerr.msg);
            mm_fail(&herr, "%s", both);
            rc = -1;
        }
    }
    free(error_copy);
    if (rc < 0) {
        mm_oxen_redact(herr.msg, a->client.token);
        mm_log("oxen: %s: %s", id, herr.msg);
        return set_state(a, id, from, "failed", herr.msg, err);
    }
    if (ok)
        snprintf(done_msg, sizeof done_msg, "mirrored to %s/%s: %s and a row of %s%s", a->client.remote.ns,
                 a->client.remote.repo, file, MM_HUB_HISTORY_PATH, job ? "; reported to the hub queue" : "");
    else
        snprintf(done_msg, sizeof done_msg, "the %s outcome is recorded in %s/%s %s%s", status, a->client.remote.ns,
                 a->client.remote.repo, MM_HUB_HISTORY_PATH, job ? "; reported to the hub queue" : "");
    return set_state(a, id, from, "mirrored", done_msg, err);
}
