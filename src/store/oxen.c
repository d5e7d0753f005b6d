#include "store/oxen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sql.h"

/* Serialises hub writes across every worker on the database. */
#define OXEN_LOCK "x'6f78656e6d6d6833'::bigint"

int mm_store_oxen_mark_render(PGconn *c, const char *generation_id, bool key_given, mm_error *err)
{
    const char *p[] = {generation_id, key_given ? "t" : "f"};
    return mm_db_query(c,
                       "UPDATE generations SET oxen_status = 'starting', oxen_message = NULL"
                       " WHERE id = $1::uuid AND oxen_status IS NULL"
                       "   AND ($2::boolean OR EXISTS (SELECT 1 FROM settings WHERE key = 'oxen_api_key'"
                       "                                  AND value #>> '{}' <> ''))",
                       2, p, NULL, err);
}

enum {
    C_ID, C_STATUS, C_OXEN_STATUS, C_JOB, C_PROMPT, C_FRAMES, C_WIDTH, C_HEIGHT, C_SEED, C_STEPS, C_RESULT,
    C_ERROR, C_ENQUEUED, C_STARTED, C_COMPLETED, C_WORKER
};

static char *copy(PGresult *r, int col)
{
    const char *v = mm_db_get(r, 0, col);
    return v ? strdup(v) : NULL;
}

int mm_store_oxen_next_mirror(PGconn *c, mm_store_mirror *m, bool *found, mm_error *err)
{
    memset(m, 0, sizeof *m);
    *found = false;
    PGresult *r;
    if (mm_db_query(c,
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
        return -1;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return 0;
    }
    *found = true;
    snprintf(m->id, sizeof m->id, "%s", PQgetvalue(r, 0, C_ID));
    snprintf(m->status, sizeof m->status, "%s", PQgetvalue(r, 0, C_STATUS));
    snprintf(m->oxen_status, sizeof m->oxen_status, "%s", PQgetvalue(r, 0, C_OXEN_STATUS));
    m->hub_job_id = copy(r, C_JOB);
    m->prompt = copy(r, C_PROMPT);
    m->result_path = copy(r, C_RESULT);
    m->error_message = copy(r, C_ERROR);
    m->worker_id = copy(r, C_WORKER);
    m->frames = atoi(PQgetvalue(r, 0, C_FRAMES));
    m->width = atoi(PQgetvalue(r, 0, C_WIDTH));
    m->height = atoi(PQgetvalue(r, 0, C_HEIGHT));
    m->seed = atoll(PQgetvalue(r, 0, C_SEED));
    m->steps = atoll(PQgetvalue(r, 0, C_STEPS));
    m->enqueued_at = atoll(PQgetvalue(r, 0, C_ENQUEUED));
    m->has_started = !PQgetisnull(r, 0, C_STARTED);
    m->started_at = atoll(PQgetvalue(r, 0, C_STARTED));
    m->has_completed = !PQgetisnull(r, 0, C_COMPLETED);
    m->completed_at = atoll(PQgetvalue(r, 0, C_COMPLETED));
    PQclear(r);
    if (!m->prompt) {
        mm_store_mirror_free(m);
        *found = false;
        return mm_fail(err, "out of memory");
    }
    return 0;
}

void mm_store_mirror_free(mm_store_mirror *m)
{
    free(m->hub_job_id), free(m->prompt), free(m->result_path), free(m->error_message), free(m->worker_id);
    memset(m, 0, sizeof *m);
}

int mm_store_oxen_set_state(PGconn *c, const char *id, const char *from, const char *to, const char *message,
                            mm_error *err)
{
    const char *p[] = {id, from, to, message};
    return mm_db_query(c,
                       "UPDATE generations SET oxen_status = $3, oxen_message = $4"
                       " WHERE id = $1::uuid AND oxen_status = $2",
                       4, p, NULL, err);
}

int mm_store_oxen_claim_journal(PGconn *c, const char *hub_id, const char *job_json, char generation_id[40],
                                bool *is_new, mm_error *err)
{
    const char *p[] = {hub_id, job_json};
    PGresult *r;
    if (mm_db_query(c,
                    "INSERT INTO oxen_claims (hub_generation_id, generation_id, state, job)"
                    " VALUES ($1, gen_random_uuid(), 'claiming', $2::jsonb)"
                    " ON CONFLICT (hub_generation_id) DO NOTHING RETURNING generation_id::text",
                    2, p, &r, err) < 0)
        return -1;
    *is_new = PQntuples(r) > 0;
    generation_id[0] = '\0';
    if (*is_new)
        snprintf(generation_id, 40, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

int mm_store_oxen_claim_set(PGconn *c, const char *hub_id, const char *state, const char *message, mm_error *err)
{
    const char *p[] = {hub_id, state, message};
    return mm_db_query(c,
                       "UPDATE oxen_claims SET state = $2, message = $3, updated_at = now()"
                       " WHERE hub_generation_id = $1",
                       3, p, NULL, err);
}

int mm_store_oxen_claim_is_claimed(PGconn *c, const char *hub_id, bool *claimed, mm_error *err)
{
    const char *p[] = {hub_id};
    PGresult *r;
    if (mm_db_query(c, "SELECT 1 FROM oxen_claims WHERE hub_generation_id = $1 AND state = 'claimed'", 1, p, &r,
                    err) < 0)
        return -1;
    *claimed = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int mm_store_oxen_claims_open(PGconn *c, mm_store_claim_fn each, void *user, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT hub_generation_id, generation_id::text, job::text FROM oxen_claims"
                    " WHERE state = 'claiming' ORDER BY created_at",
                    0, NULL, &r, err) < 0)
        return -1;
    for (int i = 0; i < PQntuples(r); i++)
        if (!each(user, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2)))
            break;
    PQclear(r);
    return 0;
}

int mm_store_oxen_try_lock(PGconn *c, bool *locked, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(c, "SELECT pg_try_advisory_lock(" OXEN_LOCK ")", 0, NULL, &r, err) < 0)
        return -1;
    *locked = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}

int mm_store_oxen_unlock(PGconn *c, mm_error *err)
{
    return mm_db_exec(c, "SELECT pg_advisory_unlock(" OXEN_LOCK ")", err);
}
