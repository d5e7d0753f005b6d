#include "queue/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "queue/db.h"

void mm_job_free(mm_job *job)
{
    free(job->prompt);
    for (int i = 0; i < job->n_references; i++)
        free(job->ref_path[i]);
    free(job->last_image_path);
    memset(job, 0, sizeof *job);
}

int mm_queue_recover(PGconn *c, int max_attempts, double lease_seconds, int *recovered, mm_error *err)
{
    char max[16], lease[32];
    snprintf(max, sizeof max, "%d", max_attempts);
    snprintf(lease, sizeof lease, "%.3f", lease_seconds);
    const char *p[] = {max, lease};
    PGresult *r;
    if (mm_db_query(
            c,
            "UPDATE generations g SET"
            "  status = CASE WHEN g.cancel_requested THEN 'cancelled'"
            "                WHEN g.attempts >= $1::int THEN 'failed' ELSE 'queued' END,"
            "  completed_at = CASE WHEN g.cancel_requested OR g.attempts >= $1::int THEN now() END,"
            "  error_message = CASE WHEN g.cancel_requested THEN NULL"
            "    WHEN g.attempts >= $1::int THEN format('the worker stopped during this render %s times (last: %s);"
            " giving up, the request may be crashing the engine', g.attempts, g.worker_id)"
            "    ELSE format('attempt %s was interrupted (worker %s stopped); re-queued', g.attempts, g.worker_id)"
            "  END,"
            "  stage = CASE WHEN g.cancel_requested OR g.attempts >= $1::int THEN g.stage ELSE 'queued' END,"
            "  step = CASE WHEN g.cancel_requested OR g.attempts >= $1::int THEN g.step ELSE 0 END,"
            "  worker_id = NULL, claim_pid = NULL, claim_backend_start = NULL"
            " WHERE g.status = 'processing' AND ("
            "   NOT EXISTS (SELECT 1 FROM pg_stat_activity a"
            "                WHERE a.pid = g.claim_pid AND a.backend_start = g.claim_backend_start)"
            "   OR NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = g.worker_id"
            "                     AND w.heartbeat_at > now() - make_interval(secs => $2::double precision)))"
            " RETURNING g.id, g.status",
            2, p, &r, err) < 0)
        return mm_error_prefix(err, "recovering interrupted jobs");
    if (recovered)
        *recovered = PQntuples(r);
    PQclear(r);
    return 0;
}

static char *path_join(const char *dir, const char *rel)
{
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", dir, rel);
    return s;
}

int mm_queue_claim(PGconn *c, const char *worker_id, const char *outputs, mm_job *job, bool *got, mm_error *err)
{
    memset(job, 0, sizeof *job);
    *got = false;
    const char *p[] = {worker_id};
    PGresult *r;
    if (mm_db_query(
            c,
            "WITH claimed AS ("
            "  UPDATE generations SET status = 'processing', attempts = attempts + 1, worker_id = $1,"
            "         claim_pid = pg_backend_pid(),"
            "         claim_backend_start = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),"
            "         started_at = now(), completed_at = NULL, stage = 'queued', step = 0, total_steps = 0,"
            "         timings = '{}'"
            "   WHERE id = (SELECT id FROM generations WHERE status = 'queued'"
            "                ORDER BY enqueued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
            "  RETURNING *)"
            " SELECT c.id, c.attempts, c.prompt, c.partition, c.frames, c.width, c.height, c.steps, c.seed,"
            "        c.no_audio, c.fast, c.crf, c.preset,"
            "        (SELECT json_agg(json_build_object('kind', u.kind, 'path', u.path) ORDER BY r.ord)"
            "           FROM unnest(c.image_ids) WITH ORDINALITY AS r(id, ord) JOIN uploads u ON u.id = r.id),"
            "        (SELECT u.path FROM uploads u WHERE u.id = c.last_image_id),"
            "        cardinality(c.image_ids), c.last_image_id IS NOT NULL"
            "   FROM claimed c",
            1, p, &r, err) < 0)
        return mm_error_prefix(err, "claiming a job");
    if (PQntuples(r) == 0) {
        PQclear(r);
        return 0;
    }
    *got = true;
    snprintf(job->id, sizeof job->id, "%s", PQgetvalue(r, 0, 0));
    job->attempts = atoi(PQgetvalue(r, 0, 1));
    job->prompt = strdup(PQgetvalue(r, 0, 2));
    snprintf(job->partition, sizeof job->partition, "%s", PQgetvalue(r, 0, 3));
    job->frames = atoi(PQgetvalue(r, 0, 4));
    job->width = atoi(PQgetvalue(r, 0, 5));
    job->height = atoi(PQgetvalue(r, 0, 6));
    job->steps = atoi(PQgetvalue(r, 0, 7));
    job->seed = strtoull(PQgetvalue(r, 0, 8), NULL, 10);
    job->no_audio = PQgetvalue(r, 0, 9)[0] == 't';
    job->fast = PQgetvalue(r, 0, 10)[0] == 't';
    job->crf = atoi(PQgetvalue(r, 0, 11));
    snprintf(job->preset, sizeof job->preset, "%s", PQgetvalue(r, 0, 12));
    int rc = 0;
    const char *refs = mm_db_get(r, 0, 13);
    int wanted = atoi(PQgetvalue(r, 0, 15));
    if (refs) {
        json_t *arr = json_loads(refs, 0, NULL);
        size_t i;
        json_t *o;
        json_array_foreach(arr, i, o)
        {
            if (job->n_references >= MM_MAX_REFERENCES)
                break;
            const char *kind = json_string_value(json_object_get(o, "kind"));
            const char *path = json_string_value(json_object_get(o, "path"));
            if (!kind || !path)
                continue;
            int k = job->n_references++;
            job->ref_kind[k] = strcmp(kind, "video") == 0 ? MM_REF_VIDEO : strcmp(kind, "audio") == 0 ? MM_REF_AUDIO
                                                                                                   : MM_REF_IMAGE;
            job->ref_path[k] = path_join(outputs, path);
        }
        json_decref(arr);
    }
    if (job->n_references != wanted)
        rc = mm_fail(err, "%d of the job's %d references are no longer uploaded", wanted - job->n_references, wanted);
    const char *last = mm_db_get(r, 0, 14);
    if (last)
        job->last_image_path = path_join(outputs, last);
    else if (PQgetvalue(r, 0, 16)[0] == 't' && rc == 0)
        rc = mm_fail(err, "the job's last image is no longer uploaded");
    PQclear(r);
    if (!job->prompt)
        rc = mm_fail(err, "out of memory");
    return rc; /* on -1 the job is claimed; the caller fails it with the message */
}

int mm_queue_progress(PGconn *c, const mm_job *job, const char *worker_id, const char *stage, int step,
                      int total_steps, const char *timings_json, bool *cancel_requested, bool *lost, mm_error *err)
{
    char s[16], t[16], a[16];
    snprintf(s, sizeof s, "%d", step);
    snprintf(t, sizeof t, "%d", total_steps);
    snprintf(a, sizeof a, "%d", job->attempts);
    const char *p[] = {job->id, worker_id, a, stage, s, t, timings_json};
    PGresult *r;
    if (mm_db_query(c,
                    "UPDATE generations SET stage = $4, step = $5, total_steps = $6, timings = $7::jsonb"
                    " WHERE id = $1 AND worker_id = $2 AND attempts = $3 AND status = 'processing'"
                    " RETURNING cancel_requested",
                    7, p, &r, err) < 0)
        return mm_error_prefix(err, "storing progress");
    *lost = PQntuples(r) == 0;
    *cancel_requested = !*lost && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}

int mm_queue_reassert(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err)
{
    char a[16];
    snprintf(a, sizeof a, "%d", job->attempts);
    const char *p[] = {job->id, worker_id, a};
    PGresult *r;
    if (mm_db_query(c,
                    "UPDATE generations SET claim_pid = pg_backend_pid(),"
                    "       claim_backend_start = (SELECT backend_start FROM pg_stat_activity"
                    "                               WHERE pid = pg_backend_pid())"
                    " WHERE id = $1 AND worker_id = $2 AND attempts = $3 AND status = 'processing' RETURNING id",
                    3, p, &r, err) < 0)
        return -1;
    *lost = PQntuples(r) == 0;
    PQclear(r);
    return 0;
}

int mm_queue_finish(PGconn *c, const mm_job *job, const char *worker_id, const mm_job_outcome *o, bool *lost,
                    mm_error *err)
{
    char a[16], total[32], peak[32];
    snprintf(a, sizeof a, "%d", job->attempts);
    snprintf(total, sizeof total, "%.3f", o->total_seconds);
    snprintf(peak, sizeof peak, "%lld", o->peak_device_bytes);
    const char *p[] = {job->id,        worker_id,      a,           o->status,        o->timings_json, total,
                       o->placement,   peak,           o->result_path, o->poster_path, o->error_message};
    PGresult *r;
    if (mm_db_query(c,
                    "UPDATE generations SET status = $4, timings = COALESCE($5::jsonb, timings),"
                    "       total_seconds = $6::double precision, placement = $7,"
                    "       peak_device_bytes = NULLIF($8::bigint, 0), result_path = $9, poster_path = $10,"
                    "       error_message = $11, completed_at = now(),"
                    "       step = CASE WHEN $4 = 'succeeded' THEN total_steps ELSE step END"
                    " WHERE id = $1 AND worker_id = $2 AND attempts = $3 AND status = 'processing' RETURNING id",
                    11, p, &r, err) < 0)
        return mm_error_prefix(err, "storing the outcome");
    *lost = PQntuples(r) == 0;
    PQclear(r);
    return 0;
}

int mm_queue_lock_claim(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err)
{
    char a[16];
    snprintf(a, sizeof a, "%d", job->attempts);
    const char *p[] = {job->id, worker_id, a};
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT 1 FROM generations"
                    " WHERE id = $1 AND worker_id = $2 AND attempts = $3 AND status = 'processing' FOR UPDATE",
                    3, p, &r, err) < 0)
        return -1;
    *lost = PQntuples(r) == 0;
    PQclear(r);
    return 0;
}

int mm_queue_requeue(PGconn *c, const mm_job *job, const char *worker_id, const char *reason, mm_error *err)
{
    char a[16];
    snprintf(a, sizeof a, "%d", job->attempts);
    const char *p[] = {job->id, worker_id, a, reason};
    return mm_db_query(c,
                       "UPDATE generations SET status = 'queued', attempts = attempts - 1, stage = 'queued', step = 0,"
                       "       worker_id = NULL, claim_pid = NULL, claim_backend_start = NULL, error_message = $4"
                       " WHERE id = $1 AND worker_id = $2 AND attempts = $3 AND status = 'processing'",
                       4, p, NULL, err);
}

int mm_worker_register(PGconn *c, const char *worker_id, const char *hostname, int pid, const char *engine_kind,
                       mm_error *err)
{
    char pids[16];
    snprintf(pids, sizeof pids, "%d", pid);
    const char *p[] = {worker_id, hostname, pids, engine_kind};
    return mm_db_query(c,
                       "INSERT INTO workers (id, hostname, pid, engine_kind, state, message)"
                       " VALUES ($1, $2, $3::int, $4, 'starting', 'connecting')"
                       " ON CONFLICT (id) DO UPDATE SET state = 'starting', heartbeat_at = now()",
                       4, p, NULL, err);
}

int mm_worker_set_state(PGconn *c, const char *worker_id, const char *state, const char *message,
                        const char *engine_status_json, const char *current_generation_id, mm_error *err)
{
    const char *p[] = {worker_id, state, message, engine_status_json, current_generation_id};
    return mm_db_query(c,
                       "UPDATE workers SET state = $2, message = $3,"
                       "       engine_status = COALESCE($4::jsonb, engine_status),"
                       "       current_generation_id = $5::uuid, heartbeat_at = now() WHERE id = $1",
                       5, p, NULL, err);
}

int mm_worker_heartbeat(PGconn *c, const char *worker_id, bool *known, mm_error *err)
{
    const char *p[] = {worker_id};
    PGresult *r;
    if (mm_db_query(c, "UPDATE workers SET heartbeat_at = now() WHERE id = $1 RETURNING id", 1, p, &r, err) < 0)
        return -1;
    *known = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int mm_queue_prune(PGconn *c, mm_error *err)
{
    int rc = mm_db_exec(c,
                      "BEGIN;"
                      "WITH gone AS (DELETE FROM generation_tombstones WHERE deleted_at < now() - interval '7 days'"
                      "              RETURNING seq)"
                      " UPDATE event_horizon SET min_seq = greatest(min_seq, (SELECT max(seq) FROM gone))"
                      "  WHERE EXISTS (SELECT 1 FROM gone);"
                      "DELETE FROM workers WHERE heartbeat_at < now() - interval '1 day';"
                      "COMMIT;",
                      err);
    if (rc < 0)
        PQclear(PQexec(c, "ROLLBACK"));
    return rc;
}
