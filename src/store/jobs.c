#include "store/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "store/sql.h"

/* ---------------------------------------------------------------- enqueue */

/* "{id,id,...}": a uuid[] parameter. */
static void uuid_array(const mm_request *r, char *out, size_t n)
{
    size_t w = (size_t)snprintf(out, n, "{");
    for (int i = 0; i < r->n_refs && w < n; i++)
        w += (size_t)snprintf(out + w, n - w, "%s%s", i ? "," : "", r->refs[i].source);
    if (w < n)
        snprintf(out + w, n - w, "}");
}

static char *notes_json(const mm_rule_notes *notes)
{
    json_t *a = json_array();
    for (int i = 0; i < notes->n; i++)
        json_array_append_new(a, json_string(notes->msg[i]));
    char *text = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return text;
}

/* The one statement that creates generations. */
static const char insert_generation[] =
    "INSERT INTO generations AS g (id, prompt, partition, image_ids, last_image_id, frames, width, height, steps,"
    "  seed, seed_drawn, no_audio, fast, crf, preset, warnings, loras, sampler, sparse, cache,"
    "  oxen_job_id, oxen_status, oxen_message)"
    " VALUES (COALESCE($1::uuid, gen_random_uuid()), $2, $3, $4::uuid[], $5::uuid, $6::int, $7::int, $8::int,"
    "  $9::int, $10::bigint, $11::boolean, $12::boolean, $13::boolean, $14::int, $15, $16::jsonb, $17::jsonb,"
    "  $18::jsonb, $19, $20, $21::text, CASE WHEN $21::text IS NOT NULL THEN 'pending' END, $22)"
    " ON CONFLICT DO NOTHING"
    " RETURNING generation_json(g)::text";

/* Appends the new rows' objects to *rows ("[a,b" so far). */
static int insert_rows(PGconn *c, const mm_request *r, const mm_store_hub_job *hub, char **rows, size_t *len,
                       mm_error *err)
{
    char refs[(MM_MAX_REFERENCES + 1) * 38 + 4], cache[128];
    uuid_array(r, refs, sizeof refs);
    mm_step_cache_name(&r->cache, cache, sizeof cache);
    mm_db_num frames = mm_db_int(r->frames), w = mm_db_int(r->width), h = mm_db_int(r->height),
              steps = mm_db_int(r->steps), crf = mm_db_int(r->crf);
    char *warnings = notes_json(&r->notes), *loras = mm_request_loras_json(r), *sampler = mm_request_sampler_json(r);
    int rc = warnings && loras ? 0 : mm_fail(err, "out of memory");
    for (int k = 0; k < r->count && rc == 0; k++) {
        mm_db_num seed = mm_db_int((long long)r->seeds[k]);
        const char *p[] = {hub ? hub->generation_id : NULL, r->prompt, r->partition, refs,
                           r->has_last_image ? r->last_image.source : NULL, frames.s, w.s, h.s, steps.s, seed.s,
                           r->seed_drawn ? "t" : "f", r->no_audio ? "t" : "f", r->fast ? "t" : "f", crf.s, r->preset,
                           warnings, loras, sampler, r->sparse, cache, hub ? hub->hub_id : NULL,
                           hub ? hub->note : NULL};
        PGresult *res;
        if ((rc = mm_db_query(c, insert_generation, 22, p, &res, err)) < 0)
            break;
        if (PQntuples(res) == 0 && !hub)
            rc = mm_fail(err, "the database stored no row");
        for (int row = 0; rows && row < PQntuples(res) && rc == 0; row++) {
            const char *g = PQgetvalue(res, row, 0);
            size_t gl = strlen(g);
            char *grown = realloc(*rows, *len + gl + 3);
            if (!grown) {
                rc = mm_fail(err, "out of memory");
                break;
            }
            *rows = grown;
            if (*len > 1)
                (*rows)[(*len)++] = ',';
            memcpy(*rows + *len, g, gl + 1);
            *len += gl;
        }
        PQclear(res);
    }
    free(warnings), free(loras), free(sampler);
    return rc;
}

int mm_store_enqueue(PGconn *c, const mm_request *r, const mm_store_hub_job *hub, char **rows, mm_error *err)
{
    size_t len = 1;
    char *list = rows ? strdup("[") : NULL;
    if (rows) {
        *rows = NULL;
        if (!list)
            return mm_fail(err, "out of memory");
    }
    int rc = mm_db_begin(c, err);
    if (rc == 0)
        rc = insert_rows(c, r, hub, rows ? &list : NULL, &len, err);
    if (rc == 0 && hub) {
        const char *p[] = {hub->hub_id};
        rc = mm_db_query(c,
                         "UPDATE oxen_claims SET state = 'claimed', message = NULL, updated_at = now()"
                         " WHERE hub_generation_id = $1",
                         1, p, NULL, err);
    }
    if (rc < 0) {
        mm_db_rollback(c);
        free(list);
        return mm_error_prefix(err, "queueing the request");
    }
    if (mm_db_commit(c, err) < 0) {
        free(list);
        return mm_error_prefix(err, "queueing the request");
    }
    if (rows) {
        char *grown = realloc(list, len + 2);
        if (!grown) {
            free(list);
            return mm_fail(err, "out of memory");
        }
        memcpy(grown + len, "]", 2);
        *rows = grown;
    }
    return 0;
}

/* ---------------------------------------------------------------- the worker's side */

void mm_job_free(mm_job *job)
{
    free(job->prompt);
    for (int i = 0; i < job->req.n_refs; i++)
        free(job->ref_path[i]);
    free(job->last_image_path);
    memset(job, 0, sizeof *job);
}

int mm_store_recover(PGconn *c, int max_attempts, double lease_seconds, int *recovered, mm_error *err)
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

/* The columns a claim reads, in this order. */
enum {
    J_ID, J_ATTEMPTS, J_PROMPT, J_PARTITION, J_FRAMES, J_WIDTH, J_HEIGHT, J_STEPS, J_SEED, J_NO_AUDIO, J_FAST,
    J_CRF, J_PRESET, J_REFS, J_LAST, J_N_REFS, J_HAS_LAST, J_LORAS, J_SAMPLER, J_SPARSE, J_CACHE
};

static const char claim_next[] =
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
    "        cardinality(c.image_ids), c.last_image_id IS NOT NULL,"
    "        c.loras::text, c.sampler::text, c.sparse, c.cache"
    "   FROM claimed c";

/* The references' files, resolved under outputs; -1 when some are gone. */
static int read_references(PGresult *r, const char *outputs, mm_job *job, mm_error *err)
{
    int rc = 0;
    const char *refs = mm_db_get(r, 0, J_REFS);
    int wanted = atoi(PQgetvalue(r, 0, J_N_REFS));
    json_t *arr = refs ? json_loads(refs, 0, NULL) : NULL;
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        const char *kind = json_string_value(json_object_get(o, "kind"));
        const char *path = json_string_value(json_object_get(o, "path"));
        if (job->req.n_refs >= MM_MAX_REFERENCES || !kind || !path)
            continue;
        int k = job->req.n_refs++;
        job->ref_path[k] = path_join(outputs, path);
        job->req.refs[k].source = job->ref_path[k];
        job->req.refs[k].kind = strcmp(kind, "video") == 0   ? MM_REF_VIDEO
                                : strcmp(kind, "audio") == 0 ? MM_REF_AUDIO
                                                             : MM_REF_IMAGE;
    }
    json_decref(arr);
    if (job->req.n_refs != wanted)
        rc = mm_fail(err, "%d of the job's %d references are no longer uploaded", wanted - job->req.n_refs, wanted);
    const char *last = mm_db_get(r, 0, J_LAST);
    if (last) {
        job->last_image_path = path_join(outputs, last);
        job->req.has_last_image = true;
        job->req.last_image = (mm_request_ref){.source = job->last_image_path, .kind = MM_REF_IMAGE};
    } else if (PQgetvalue(r, 0, J_HAS_LAST)[0] == 't' && rc == 0) {
        rc = mm_fail(err, "the job's last image is no longer uploaded");
    }
    return rc;
}

/* The few-step fields as stored, through the same rules as at enqueue time
 * (a row edited by hand may hold anything). */
static int read_extras(PGresult *r, mm_job *job, mm_error *err)
{
    json_t *o = json_object();
    const char *sampler = mm_db_get(r, 0, J_SAMPLER);
    json_object_set_new(o, "loras", json_loads(PQgetvalue(r, 0, J_LORAS), JSON_DECODE_ANY, NULL));
    json_object_set_new(o, "sampler", sampler ? json_loads(sampler, JSON_DECODE_ANY, NULL) : json_null());
    json_object_set_new(o, "sparse", json_string(PQgetvalue(r, 0, J_SPARSE)));
    json_object_set_new(o, "cache", json_string(PQgetvalue(r, 0, J_CACHE)));
    mm_request_input in;
    mm_request_input_init(&in);
    mm_request_error e;
    int rc = mm_request_input_extras_from_json(o, &in, &e);
    if (rc == 0)
        rc = mm_request_settle_extras(&in, &job->req, &e);
    json_decref(o);
    if (rc < 0)
        return mm_fail(err, "the stored request is not valid: %s: %s", e.field, e.message);
    return 0;
}

static void read_request(PGresult *r, mm_job *job)
{
    mm_request *q = &job->req;
    snprintf(job->id, sizeof job->id, "%s", PQgetvalue(r, 0, J_ID));
    job->attempts = atoi(PQgetvalue(r, 0, J_ATTEMPTS));
    job->prompt = strdup(PQgetvalue(r, 0, J_PROMPT));
    q->prompt = job->prompt;
    snprintf(q->partition, sizeof q->partition, "%s", PQgetvalue(r, 0, J_PARTITION));
    q->frames = atoi(PQgetvalue(r, 0, J_FRAMES));
    q->width = atoi(PQgetvalue(r, 0, J_WIDTH));
    q->height = atoi(PQgetvalue(r, 0, J_HEIGHT));
    q->steps = atoi(PQgetvalue(r, 0, J_STEPS));
    q->count = 1;
    q->seeds[0] = strtoull(PQgetvalue(r, 0, J_SEED), NULL, 10);
    q->no_audio = PQgetvalue(r, 0, J_NO_AUDIO)[0] == 't';
    q->fast = PQgetvalue(r, 0, J_FAST)[0] == 't';
    q->crf = atoi(PQgetvalue(r, 0, J_CRF));
    snprintf(q->preset, sizeof q->preset, "%s", PQgetvalue(r, 0, J_PRESET));
}

int mm_store_claim_next(PGconn *c, const char *worker_id, const char *outputs, mm_job *job, bool *got, mm_error *err)
{
    memset(job, 0, sizeof *job);
    *got = false;
    const char *p[] = {worker_id};
    PGresult *r;
    if (mm_db_query(c, claim_next, 1, p, &r, err) < 0)
        return mm_error_prefix(err, "claiming a job");
    if (PQntuples(r) == 0) {
        PQclear(r);
        return 0;
    }
    *got = true;
    read_request(r, job);
    int rc = read_references(r, outputs, job, err);
    if (rc == 0)
        rc = read_extras(r, job, err);
    PQclear(r);
    if (!job->prompt)
        rc = mm_fail(err, "out of memory");
    return rc; /* on -1 the job is claimed; the caller fails it with the message */
}

int mm_store_progress(PGconn *c, const mm_job *job, const char *worker_id, const char *stage, int step,
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

int mm_store_reassert(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err)
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

static int store_outcome(PGconn *c, const mm_job *job, const char *worker_id, const mm_job_outcome *o, bool *lost,
                         mm_error *err)
{
    mm_db_num a = mm_db_int(job->attempts), peak = mm_db_int(o->peak_device_bytes);
    char total[32];
    snprintf(total, sizeof total, "%.3f", o->total_seconds); /* milliseconds are what the table shows */
    const char *p[] = {job->id,      worker_id, a.s,            o->status,      o->timings_json, total,
                       o->placement, peak.s,    o->result_path, o->poster_path, o->error_message};
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

/* Inside a transaction: locks the row if the claim is still ours (*lost otherwise). */
static int lock_claim(PGconn *c, const mm_job *job, const char *worker_id, bool *lost, mm_error *err)
{
    mm_db_num a = mm_db_int(job->attempts);
    const char *p[] = {job->id, worker_id, a.s};
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

mm_finish_result mm_store_finish(PGconn *c, const mm_job *job, const char *worker_id, mm_job_outcome *o,
                                 mm_publish_fn publish, void *user, mm_error *err)
{
    bool lost = false;
    if (mm_db_ensure(c, err) < 0 || mm_db_begin(c, err) < 0)
        return MM_FINISH_RETRY;
    if (lock_claim(c, job, worker_id, &lost, err) < 0 || lost) {
        mm_db_rollback(c);
        return lost ? MM_FINISH_LOST : MM_FINISH_RETRY;
    }
    if (publish && publish(user, o, err) < 0) {
        mm_db_rollback(c);
        return MM_FINISH_PUBLISH_FAILED;
    }
    if (store_outcome(c, job, worker_id, o, &lost, err) < 0 || lost) {
        mm_db_rollback(c);
        return lost ? MM_FINISH_LOST : MM_FINISH_RETRY;
    }
    return mm_db_commit(c, err) == 0 ? MM_FINISH_STORED : MM_FINISH_RETRY;
}

int mm_store_requeue(PGconn *c, const mm_job *job, const char *worker_id, const char *reason, mm_error *err)
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

int mm_store_worker_register(PGconn *c, const char *worker_id, const char *hostname, int pid,
                             const char *engine_kind, mm_error *err)
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

int mm_store_worker_set_state(PGconn *c, const char *worker_id, const char *state, const char *message,
                              const char *engine_status_json, const char *current_generation_id, mm_error *err)
{
    const char *p[] = {worker_id, state, message, engine_status_json, current_generation_id};
    return mm_db_query(c,
                       "UPDATE workers SET state = $2, message = $3,"
                       "       engine_status = COALESCE($4::jsonb, engine_status),"
                       "       current_generation_id = $5::uuid, heartbeat_at = now() WHERE id = $1",
                       5, p, NULL, err);
}

int mm_store_worker_heartbeat(PGconn *c, const char *worker_id, bool *known, mm_error *err)
{
    const char *p[] = {worker_id};
    PGresult *r;
    if (mm_db_query(c, "UPDATE workers SET heartbeat_at = now() WHERE id = $1 RETURNING id", 1, p, &r, err) < 0)
        return -1;
    *known = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int mm_store_prune(PGconn *c, mm_error *err)
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
        mm_db_rollback(c);
    return rc;
}

int mm_store_attempt_abandoned(PGconn *c, const char *id, int attempt, bool *abandoned, mm_error *err)
{
    mm_db_num a = mm_db_int(attempt);
    const char *p[] = {id, a.s};
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT NOT EXISTS (SELECT 1 FROM generations WHERE id = $1::uuid"
                    "   AND ((status = 'processing' AND attempts <= $2::int)"
                    "        OR (status = 'queued' AND attempts < $2::int)))",
                    2, p, &r, err) < 0)
        return -1;
    *abandoned = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}
