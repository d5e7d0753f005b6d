/* Mirroring renders to the hub repository (see agent.h): the pending
 * record when a render starts, the mp4 and the final history row when it
 * ends, and the report of a claimed job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/log.h"
#include "oxen/agent_internal.h"
#include "oxen/hub.h"
#include "store/oxen.h"

static long gcd(long a, long b)
{
    while (b) {
        long t = a % b;
        a = b, b = t;
    }
    return a;
}

static json_t *time_or_null(bool has, long long t)
{
    return has ? json_integer(t) : json_null();
}

/* The history row in Oxen's generation-row shape (MM_HUB_HISTORY_COLUMNS). */
static json_t *history_row(const mm_oxen_agent *a, const mm_store_mirror *m, const char *status,
                           const char *result_url, const char *file)
{
    long w = m->width, h = m->height;
    long g = gcd(w, h) ? gcd(w, h) : 1;
    char aspect[48];
    snprintf(aspect, sizeof aspect, "%ld:%ld", w / g, h / g);
    json_t *row = json_object();
    json_object_set_new(row, "generation_id", json_string(m->id));
    json_object_set_new(row, "status", json_string(status));
    json_object_set_new(row, "model_name", json_string(a->model));
    json_object_set_new(row, "media_type", json_string("video"));
    json_object_set_new(row, "prompt", json_string(m->prompt));
    json_object_set_new(row, "duration", json_real(m->frames / 24.0));
    json_object_set_new(row, "aspect_ratio", json_string(aspect));
    json_object_set_new(row, "width", json_integer(w));
    json_object_set_new(row, "height", json_integer(h));
    json_object_set_new(row, "frames", json_integer(m->frames));
    json_object_set_new(row, "seed", json_integer(m->seed));
    json_object_set_new(row, "steps", json_integer(m->steps));
    json_object_set_new(row, "enqueued_at", json_integer(m->enqueued_at));
    json_object_set_new(row, "started_at", time_or_null(m->has_started, m->started_at));
    bool final = strcmp(status, "processing") != 0;
    json_object_set_new(row, "completed_at", time_or_null(final && m->has_completed, m->completed_at));
    json_object_set_new(row, "result_url", result_url ? json_string(result_url) : json_null());
    json_object_set_new(row, "file", file ? json_string(file) : json_null());
    const char *e = final ? m->error_message : NULL;
    json_object_set_new(row, "error_message", e && strcmp(status, "succeeded") != 0 ? json_string(e) : json_null());
    json_object_set_new(row, "source", json_string(m->hub_job_id ? "oxen" : "local"));
    json_object_set_new(row, "oxen_job_id", m->hub_job_id ? json_string(m->hub_job_id) : json_null());
    json_object_set_new(row, "worker_id", m->worker_id ? json_string(m->worker_id) : json_null());
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

/* The render is under way: the pending record. */
static int mirror_start(mm_oxen_agent *a, const mm_store_mirror *m, mm_error *err)
{
    mm_error herr = {{0}};
    json_t *row = history_row(a, m, "processing", NULL, NULL);
    char message[128];
    snprintf(message, sizeof message, "mmh3: render %s started", m->id);
    int rc = commit_record(a, m->id, "start", row, NULL, NULL, message, &herr);
    json_decref(row);
    if (rc < 0) {
        mm_error_prefix(&herr, "recording the render start on the hub");
        mm_oxen_redact(herr.msg, a->client.token);
        mm_log("oxen: %s: %s", m->id, herr.msg);
        return mm_store_oxen_set_state(a->db, m->id, m->oxen_status, "failed", herr.msg, err);
    }
    char done[512];
    snprintf(done, sizeof done, "pending: a processing row is in %s/%s %s", a->client.remote.ns,
             a->client.remote.repo, MM_HUB_HISTORY_PATH);
    return mm_store_oxen_set_state(a->db, m->id, m->oxen_status, "pending", done, err);
}

/* A job claimed from the hub's queue: its outcome reported back; -1 (with
 * *herr saying both troubles when the record had failed too) when that fails. */
static int report_claimed(mm_oxen_agent *a, const mm_store_mirror *m, bool recorded, bool ok, const char *url,
                          mm_error *herr)
{
    bool success = recorded && ok;
    const char *outcome = success                                               ? "succeeded"
                          : recorded && strcmp(m->status, "cancelled") == 0 ? "cancelled"
                                                                            : "failed";
    char why[MM_ERROR_MAX + 64];
    snprintf(why, sizeof why, "%s", !recorded ? herr->msg : m->error_message ? m->error_message : m->status);
    mm_error cerr = {{0}};
    if (mm_hub_queue_complete(&a->client, m->hub_job_id, m->id, outcome, success ? url : NULL, success ? NULL : why,
                              &cerr) == 0)
        return 0;
    char both[MM_ERROR_MAX];
    if (recorded)
        snprintf(both, sizeof both, "reporting the outcome of hub job %.200s: %.700s", m->hub_job_id, cerr.msg);
    else
        snprintf(both, sizeof both, "%.500s; reporting hub job %.100s failed too: %.300s", herr->msg, m->hub_job_id,
                 cerr.msg);
    mm_fail(herr, "%s", both);
    return -1;
}

/* The render has ended: the final row, with the clip when there is one. */
static int mirror_end(mm_oxen_agent *a, const mm_store_mirror *m, mm_error *err)
{
    char file[96], url[1024], video_path[4096], video_name[64];
    bool ok = strcmp(m->status, "succeeded") == 0 && m->result_path;
    snprintf(file, sizeof file, "%s/%s.mp4", MM_HUB_VIDEO_DIR, m->id);
    snprintf(video_name, sizeof video_name, "%s.mp4", m->id);
    snprintf(video_path, sizeof video_path, "%s/%s", a->outputs, m->result_path ? m->result_path : "");
    mm_hub_file_url(&a->client, file, url, sizeof url);
    json_t *row = history_row(a, m, m->status, ok ? url : NULL, ok ? file : NULL);
    char message[320];
    snprintf(message, sizeof message, "mmh3: render %.40s %.16s%s%.100s", m->id, m->status, ok ? ", " : "",
             ok ? file : "");
    mm_error herr = {{0}};
    int rc = commit_record(a, m->id, "end", row, ok ? video_path : NULL, video_name, message, &herr);
    json_decref(row);
    if (rc < 0)
        mm_error_prefix(&herr, ok ? "uploading the result to the hub" : "recording the outcome on the hub");
    if (m->hub_job_id && report_claimed(a, m, rc == 0, ok, url, &herr) < 0)
        rc = -1;
    if (rc < 0) {
        mm_oxen_redact(herr.msg, a->client.token);
        mm_log("oxen: %s: %s", m->id, herr.msg);
        return mm_store_oxen_set_state(a->db, m->id, m->oxen_status, "failed", herr.msg, err);
    }
    const char *reported = m->hub_job_id ? "; reported to the hub queue" : "";
    char done[512];
    if (ok)
        snprintf(done, sizeof done, "mirrored to %s/%s: %s and a row of %s%s", a->client.remote.ns,
                 a->client.remote.repo, file, MM_HUB_HISTORY_PATH, reported);
    else
        snprintf(done, sizeof done, "the %s outcome is recorded in %s/%s %s%s", m->status, a->client.remote.ns,
                 a->client.remote.repo, MM_HUB_HISTORY_PATH, reported);
    return mm_store_oxen_set_state(a->db, m->id, m->oxen_status, "mirrored", done, err);
}

int mm_oxen_mirror_next(mm_oxen_agent *a, bool *did, mm_error *err)
{
    mm_store_mirror m;
    if (mm_store_oxen_next_mirror(a->db, &m, did, err) < 0)
        return mm_error_prefix(err, "looking for renders to mirror");
    if (!*did)
        return 0;
    bool terminal = strcmp(m.status, "succeeded") == 0 || strcmp(m.status, "failed") == 0 ||
                    strcmp(m.status, "cancelled") == 0;
    int rc = terminal ? mirror_end(a, &m, err) : mirror_start(a, &m, err);
    mm_store_mirror_free(&m);
    return rc;
}
