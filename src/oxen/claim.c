/* The claim loop (see agent.h): jobs queued on the hub against our model
 * name become local generations, exactly once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/log.h"
#include "oxen/agent_internal.h"
#include "oxen/hub.h"
#include "request/request.h"
#include "store/jobs.h"
#include "store/oxen.h"

/* Copies a hub job's field into the request body under our name, unless it is absent or null. */
static void carry(json_t *body, const char *to, json_t *job, const char *from)
{
    json_t *v = json_object_get(job, from);
    if (v && !json_is_null(v))
        json_object_set(body, to, v);
}

/* A hub job as a local request, settled by the same rules as our API's.
 * Hub jobs are text-to-video: a job for another model, or with media, is
 * refused. The request borrows its prompt from job. */
static int map_job(const mm_oxen_agent *a, json_t *job, mm_request *q, mm_error *err)
{
    const char *model = json_string_value(json_object_get(job, "model_name"));
    if (!model)
        model = json_string_value(json_object_get(job, "model"));
    if (model && strcasecmp(model, a->model) != 0)
        return mm_fail(err, "the job is for model '%.100s', not '%s'", model, a->model);
    static const char *const unsupported[] = {"input_image", "input_video", "input_audio", "image_url",
                                              "video_url",   "images",      "multi_prompt"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        json_t *v = json_object_get(job, unsupported[i]);
        if (v && !json_is_null(v))
            return mm_fail(err, "%s is not supported for jobs claimed from the hub (text-to-video only)",
                           unsupported[i]);
    }
    /* The hub's length is its duration; frames only when it gives none. */
    json_t *body = json_object();
    json_object_set(body, "prompt", json_object_get(job, "prompt"));
    carry(body, "duration", job, "duration");
    if (!json_object_get(body, "duration"))
        carry(body, "frames", job, "frames");
    carry(body, "size", job, "size");
    carry(body, "aspect_ratio", job, "aspect_ratio");
    carry(body, "steps", job, "steps");
    carry(body, "seed", job, "seed");
    mm_request_input in;
    mm_request_error e;
    int rc = mm_request_input_from_json(body, &in, &e);
    if (rc == 0)
        rc = mm_request_settle(&in, NULL, NULL, q, &e);
    json_decref(body); /* the strings in q live in job */
    if (rc < 0) {
        char message[sizeof e.message], accepted[sizeof e.accepted];
        mm_request_render(e.message, NULL, NULL, message, sizeof message);
        mm_request_render(e.accepted, NULL, NULL, accepted, sizeof accepted);
        return mm_fail(err, "%s: %s%s%s", e.field[0] ? e.field : "the job", message, accepted[0] ? "; accepted: " : "",
                       accepted);
    }
    return 0;
}

static int set_claim(mm_oxen_agent *a, const char *hub_id, const char *state, const char *message, mm_error *err)
{
    return mm_store_oxen_claim_set(a->db, hub_id, state, message, err);
}

/* Claims on the hub (again, after a crash: the claim id makes it idempotent)
 * and creates the local row. -1 leaves the claim 'claiming' for a later try. */
static int claim_one(mm_oxen_agent *a, const char *hub_id, const char *gen_id, json_t *job, mm_error *err)
{
    mm_request q;
    mm_error merr = {{0}};
    if (map_job(a, job, &q, &merr) < 0)
        return set_claim(a, hub_id, "refused", merr.msg, err);
    bool taken = false, gone = false;
    mm_error herr = {{0}};
    if (mm_hub_queue_claim(&a->client, hub_id, gen_id, a->worker_id, &taken, &gone, &herr) < 0) {
        mm_oxen_redact(herr.msg, a->client.token);
        if (taken || gone)
            return set_claim(a, hub_id, "lost", herr.msg, err);
        return mm_fail(err, "claiming hub job %s: %s", hub_id, herr.msg);
    }
    /* The claim is ours on the hub: the local row and the claim's state, together. */
    char note[300];
    snprintf(note, sizeof note, "claimed from the Oxen hub queue (job %.200s)", hub_id);
    mm_store_hub_job hub = {.generation_id = gen_id, .hub_id = hub_id, .note = note};
    if (mm_store_enqueue(a->db, &q, &hub, NULL, err) < 0)
        return mm_error_prefix(err, "hub job %s is claimed, its local row is not yet written", hub_id);
    mm_log("oxen: claimed hub job %s as generation %s", hub_id, gen_id);
    return 0;
}

typedef struct resume_ctx {
    mm_oxen_agent *a;
    mm_error *err;
    int rc;
} resume_ctx;

static bool resume_one(void *user, const char *hub_id, const char *gen_id, const char *job_json)
{
    resume_ctx *r = user;
    json_t *job = json_loads(job_json, 0, NULL);
    if (claim_one(r->a, hub_id, gen_id, job, r->err) < 0)
        r->rc = -1;
    json_decref(job);
    return !atomic_load(&r->a->quit);
}

int mm_oxen_claims_resume(mm_oxen_agent *a, mm_error *err)
{
    resume_ctx r = {.a = a, .err = err};
    if (mm_store_oxen_claims_open(a->db, resume_one, &r, err) < 0)
        return -1;
    return r.rc;
}

int mm_oxen_claim_poll(mm_oxen_agent *a, mm_error *err)
{
    json_t *list = NULL;
    if (mm_hub_queue_list(&a->client, a->model, &list, err) < 0)
        return mm_error_prefix(err, "polling the hub queue");
    int rc = 0;
    size_t i;
    json_t *job;
    json_array_foreach(list, i, job)
    {
        const char *hub_id = json_string_value(json_object_get(job, "generation_id"));
        const char *status = json_string_value(json_object_get(job, "status"));
        if (!hub_id || strlen(hub_id) > 200 || (status && strcmp(status, "queued") != 0))
            continue;
        char *text = json_dumps(job, JSON_COMPACT);
        char gen_id[40];
        bool is_new = false;
        /* Written down before the hub hears of it: the local id is the claim token. */
        rc = mm_store_oxen_claim_journal(a->db, hub_id, text, gen_id, &is_new, err);
        free(text);
        if (rc < 0)
            break;
        if (!is_new) /* known already: claimed, lost or refused before */
            continue;
        rc = claim_one(a, hub_id, gen_id, job, err);
        /* One job per poll: a busy local queue is not the place to hoard work. */
        bool claimed = false;
        if (rc == 0 && mm_store_oxen_claim_is_claimed(a->db, hub_id, &claimed, err) == 0 && claimed)
            break;
        if (rc < 0)
            break;
    }
    json_decref(list);
    return rc;
}
