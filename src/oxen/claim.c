/* The claim loop (see agent.h): jobs queued on the hub against our model
 * name become local generations, exactly once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <jansson.h>

#include "engine/request_rules.h"
#include "oxen/agent_internal.h"
#include "oxen/hub.h"
#include "queue/db.h"
#include "queue/log.h"

/* A hub job as a local request, checked by the same rules as our API. */
typedef struct hub_request {
    const char *prompt;
    int frames, width, height, steps;
    long long seed;
    bool seed_drawn;
    mm_rule_notes notes;
} hub_request;

static int map_job(const mm_oxen_agent *a, json_t *job, hub_request *q, mm_error *err)
{
    memset(q, 0, sizeof *q);
    mm_error e = {{0}};
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
    json_t *prompt = json_object_get(job, "prompt");
    if (!json_is_string(prompt))
        return mm_fail(err, "the job has no prompt");
    if (mm_rule_prompt(json_string_value(prompt), json_string_length(prompt), &e) < 0)
        return mm_fail(err, "prompt: %s", e.msg);
    q->prompt = json_string_value(prompt);

    q->frames = MM_FRAMES_DEFAULT;
    json_t *duration = json_object_get(job, "duration"), *frames = json_object_get(job, "frames");
    if (duration && !json_is_null(duration)) {
        if (!json_is_number(duration) || mm_rule_seconds(json_number_value(duration), &q->frames, &q->notes, &e) < 0)
            return mm_fail(err, "duration: %s; accepted: %s", e.msg[0] ? e.msg : "is not a number",
                           MM_ACCEPT_SECONDS);
    } else if (frames && !json_is_null(frames)) {
        if (!json_is_integer(frames) || mm_rule_frames(json_integer_value(frames), &q->frames, &q->notes, &e) < 0)
            return mm_fail(err, "frames: %s; accepted: %s", e.msg[0] ? e.msg : "is not an integer",
                           MM_ACCEPT_FRAMES);
    }

    mm_canvas_spec canvas = {0};
    json_t *aspect = json_object_get(job, "aspect_ratio"), *size = json_object_get(job, "size");
    if (size && !json_is_null(size) &&
        (!json_is_string(size) || mm_rule_size(json_string_value(size), &canvas, &q->notes, &e) < 0))
        return mm_fail(err, "size: %s; accepted: %s", e.msg[0] ? e.msg : "is not a string", MM_ACCEPT_SIZE);
    if (aspect && !json_is_null(aspect) &&
        (!json_is_string(aspect) ||
         mm_rule_aspect_ratio(json_string_value(aspect), &canvas.ref_width, &canvas.ref_height, &e) < 0))
        return mm_fail(err, "aspect_ratio: %s; accepted: %s", e.msg[0] ? e.msg : "is not a string",
                       MM_ACCEPT_ASPECT);
    mm_canvas_resolve(&canvas, &q->width, &q->height);

    q->steps = MM_STEPS_DEFAULT;
    json_t *steps = json_object_get(job, "steps");
    if (steps && !json_is_null(steps) &&
        (!json_is_integer(steps) || mm_rule_steps(json_integer_value(steps), &q->steps, &e) < 0))
        return mm_fail(err, "steps: %s; accepted: %s", e.msg[0] ? e.msg : "is not an integer", MM_ACCEPT_STEPS);

    json_t *seed = json_object_get(job, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0 || json_integer_value(seed) > MM_SEED_MAX)
            return mm_fail(err, "seed: is not an integer in range; accepted: %s", MM_ACCEPT_SEED);
        q->seed = json_integer_value(seed);
    } else {
        uint32_t s = 0;
        if (getrandom(&s, sizeof s, 0) != sizeof s)
            s = (uint32_t)rand();
        q->seed = s;
        q->seed_drawn = true;
    }
    return 0;
}

static int set_claim(mm_oxen_agent *a, const char *hub_id, const char *state, const char *message, mm_error *err)
{
    const char *p[] = {hub_id, state, message};
    return mm_db_query(a->db,
                       "UPDATE oxen_claims SET state = $2, message = $3, updated_at = now()"
                       " WHERE hub_generation_id = $1",
                       3, p, NULL, err);
}

/* The claim is ours on the hub: the local row and the claim's state, together. */
static int insert_local(mm_oxen_agent *a, const char *hub_id, const char *gen_id, const hub_request *q, mm_error *err)
{
    char frames[16], w[16], h[16], steps[16], seed[32], note[300];
    snprintf(frames, sizeof frames, "%d", q->frames);
    snprintf(w, sizeof w, "%d", q->width);
    snprintf(h, sizeof h, "%d", q->height);
    snprintf(steps, sizeof steps, "%d", q->steps);
    snprintf(seed, sizeof seed, "%lld", q->seed);
    snprintf(note, sizeof note, "claimed from the Oxen hub queue (job %.200s)", hub_id);
    json_t *warnings = json_array();
    for (int i = 0; i < q->notes.n; i++)
        json_array_append_new(warnings, json_string(q->notes.msg[i]));
    char *wtext = json_dumps(warnings, JSON_COMPACT);
    json_decref(warnings);
    const char *p[] = {gen_id, q->prompt, frames, w, h, steps, seed, q->seed_drawn ? "t" : "f",
                       wtext ? wtext : "[]", hub_id, note};
    int rc = mm_db_exec(a->db, "BEGIN", err);
    if (rc == 0)
        rc = mm_db_query(a->db,
                         "INSERT INTO generations (id, prompt, partition, frames, width, height, steps, seed,"
                         "  seed_drawn, warnings, oxen_job_id, oxen_status, oxen_message)"
                         " VALUES ($1::uuid, $2, 'fl2va', $3::int, $4::int, $5::int, $6::int, $7::bigint,"
                         "  $8::boolean, $9::jsonb, $10, 'pending', $11)"
                         " ON CONFLICT DO NOTHING",
                         11, p, NULL, err);
    free(wtext);
    if (rc == 0)
        rc = set_claim(a, hub_id, "claimed", NULL, err);
    if (rc == 0)
        rc = mm_db_exec(a->db, "COMMIT", err);
    if (rc < 0)
        PQclear(PQexec(a->db, "ROLLBACK"));
    return rc;
}

/* Claims on the hub (again, after a crash: the claim id makes it idempotent)
 * and creates the local row. -1 leaves the claim 'claiming' for a later try. */
static int claim_one(mm_oxen_agent *a, const char *hub_id, const char *gen_id, json_t *job, mm_error *err)
{
    hub_request q;
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
    if (insert_local(a, hub_id, gen_id, &q, err) < 0)
        return mm_error_prefix(err, "hub job %s is claimed, its local row is not yet written", hub_id);
    mm_log("oxen: claimed hub job %s as generation %s", hub_id, gen_id);
    return 0;
}

int mm_oxen_claims_resume(mm_oxen_agent *a, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(a->db,
                    "SELECT hub_generation_id, generation_id::text, job::text FROM oxen_claims"
                    " WHERE state = 'claiming' ORDER BY created_at",
                    0, NULL, &r, err) < 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && !atomic_load(&a->quit); i++) {
        json_t *job = json_loads(PQgetvalue(r, i, 2), 0, NULL);
        if (claim_one(a, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), job, err) < 0)
            rc = -1;
        json_decref(job);
    }
    PQclear(r);
    return rc;
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
        const char *p[] = {hub_id, text};
        PGresult *r = NULL;
        /* Written down before the hub hears of it: the local id is the claim token. */
        rc = mm_db_query(a->db,
                         "INSERT INTO oxen_claims (hub_generation_id, generation_id, state, job)"
                         " VALUES ($1, gen_random_uuid(), 'claiming', $2::jsonb)"
                         " ON CONFLICT (hub_generation_id) DO NOTHING RETURNING generation_id::text",
                         2, p, &r, err);
        free(text);
        if (rc < 0)
            break;
        if (PQntuples(r) == 0) { /* known already: claimed, lost or refused before */
            PQclear(r);
            continue;
        }
        char gen_id[40];
        snprintf(gen_id, sizeof gen_id, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        rc = claim_one(a, hub_id, gen_id, job, err);
        /* One job per poll: a busy local queue is not the place to hoard work. */
        const char *p2[] = {hub_id};
        if (rc == 0 &&
            mm_db_query(a->db, "SELECT 1 FROM oxen_claims WHERE hub_generation_id = $1 AND state = 'claimed'", 1, p2,
                        &r, err) == 0) {
            bool claimed = PQntuples(r) > 0;
            PQclear(r);
            if (claimed)
                break;
        }
        if (rc < 0)
            break;
    }
    json_decref(list);
    return rc;
}
