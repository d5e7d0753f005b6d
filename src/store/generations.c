#include "store/generations.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sql.h"

/* The first field of the first row as a copy (NULL and 0 when no row). */
static int first_text(PGresult *r, char **out, mm_error *err)
{
    *out = NULL;
    if (PQntuples(r) > 0 && !(*out = strdup(PQgetvalue(r, 0, 0)))) {
        PQclear(r);
        return mm_fail(err, "out of memory");
    }
    PQclear(r);
    return 0;
}

int mm_store_generation_json(PGconn *c, const char *id, char **json, mm_error *err)
{
    const char *p[] = {id};
    PGresult *r;
    if (mm_db_query(c, "SELECT generation_json(g)::text FROM generations g WHERE g.id = $1::uuid", 1, p, &r, err) < 0)
        return -1;
    return first_text(r, json, err);
}

int mm_store_rate(PGconn *c, const char *id, const char *rating, char **json, mm_error *err)
{
    const char *p[] = {id, rating};
    PGresult *r;
    if (mm_db_query(c, "UPDATE generations g SET rating = $2 WHERE g.id = $1::uuid RETURNING generation_json(g)::text",
                    2, p, &r, err) < 0)
        return -1;
    return first_text(r, json, err);
}

/* Runs a statement matching one row by id; *matched says whether it did. */
static int by_id(PGconn *c, const char *sql, const char *id, bool *matched, PGresult **keep, mm_error *err)
{
    const char *p[] = {id};
    PGresult *r;
    if (mm_db_query(c, sql, 1, p, &r, err) < 0)
        return -1;
    *matched = PQntuples(r) > 0;
    if (keep)
        *keep = r;
    else
        PQclear(r);
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int mm_store_cancel_or_delete(PGconn *c, const char *id, mm_cancel_result *result, char **result_path,
                              char **poster_path, mm_error *err)
{
    *result_path = *poster_path = NULL;
    /* A row can change state between statements (a worker claims or ends
     * it); each statement matches one state, and we go round again. */
    for (int round = 0; round < 4; round++) {
        bool hit;
        if (by_id(c,
                  "UPDATE generations SET status = 'cancelled', completed_at = now()"
                  " WHERE id = $1::uuid AND status = 'queued' RETURNING id",
                  id, &hit, NULL, err) < 0)
            return -1;
        if (hit) {
            *result = MM_CANCEL_CANCELLED;
            return 0;
        }
        if (by_id(c,
                  "UPDATE generations SET cancel_requested = true"
                  " WHERE id = $1::uuid AND status = 'processing' RETURNING id",
                  id, &hit, NULL, err) < 0)
            return -1;
        if (hit) {
            *result = MM_CANCEL_CANCELLING;
            return 0;
        }
        PGresult *r;
        if (by_id(c,
                  "DELETE FROM generations WHERE id = $1::uuid"
                  "   AND status IN ('succeeded', 'failed', 'cancelled') RETURNING result_path, poster_path",
                  id, &hit, &r, err) < 0)
            return -1;
        if (hit) {
            *result_path = dup_or_null(mm_db_get(r, 0, 0));
            *poster_path = dup_or_null(mm_db_get(r, 0, 1));
        }
        PQclear(r);
        if (hit) {
            *result = MM_CANCEL_DELETED;
            return 0;
        }
        if (by_id(c, "SELECT 1 FROM generations WHERE id = $1::uuid", id, &hit, NULL, err) < 0)
            return -1;
        if (!hit) {
            *result = MM_CANCEL_NOT_FOUND;
            return 0;
        }
    }
    *result = MM_CANCEL_BUSY;
    return 0;
}

/* ---------------------------------------------------------------- lists */

/* "{a,b}": a text[] parameter (the names are the caller's checked statuses). */
static void text_array(const char *const *items, int n, char *out, size_t size)
{
    size_t w = (size_t)snprintf(out, size, "{");
    for (int i = 0; i < n && w < size; i++)
        w += (size_t)snprintf(out + w, size - w, "%s%s", i ? "," : "", items[i]);
    if (w < size)
        snprintf(out + w, size - w, "}");
}

/* %text% for ILIKE, with LIKE's wildcards in the text escaped. */
static char *like_pattern(const char *text)
{
    char *pattern = malloc(strlen(text) * 2 + 3), *w = pattern;
    if (!pattern)
        return NULL;
    *w++ = '%';
    for (const char *s = text; *s; s++) {
        if (*s == '%' || *s == '_' || *s == '\\')
            *w++ = '\\';
        *w++ = *s;
    }
    *w++ = '%';
    *w = '\0';
    return pattern;
}

int mm_store_list(PGconn *c, const mm_store_list_query *q, char **json, mm_error *err)
{
    char statuses[MM_STORE_LIST_STATUSES_MAX * 16 + 4];
    text_array(q->statuses, q->n_statuses, statuses, sizeof statuses);
    char *pattern = q->search && *q->search ? like_pattern(q->search) : NULL;
    mm_db_num limit = mm_db_int(q->limit), offset = mm_db_int(q->offset);
    const char *p[] = {q->n_statuses ? statuses : NULL, pattern, q->rating, limit.s, offset.s};
    PGresult *r;
    int rc = mm_db_query(
        c,
        /* Ids first: an index-only scan even deep into the history; then the
         * rows of the page, and the count (also index-only when unfiltered). */
        "WITH page AS ("
        "  SELECT g.id FROM generations g"
        "   WHERE ($1::text[] IS NULL OR g.status = ANY($1::text[]))"
        "     AND ($2::text IS NULL OR g.prompt ILIKE $2)"
        "     AND ($3::text IS NULL OR ($3 = 'none' AND g.rating IS NULL) OR g.rating = $3)"
        "   ORDER BY g.enqueued_at DESC, g.id DESC LIMIT $4::int OFFSET $5::int)"
        " SELECT json_build_object("
        /* Status-only filters count from generation_counts (kept by triggers). */
        "   'count', CASE WHEN $2::text IS NULL AND $3::text IS NULL"
        "     THEN (SELECT COALESCE(sum(n), 0) FROM generation_counts c"
        "            WHERE $1::text[] IS NULL OR c.status = ANY($1::text[]))"
        "     ELSE (SELECT count(*) FROM generations g"
        "            WHERE ($1::text[] IS NULL OR g.status = ANY($1::text[]))"
        "              AND ($2::text IS NULL OR g.prompt ILIKE $2)"
        "              AND ($3::text IS NULL OR ($3 = 'none' AND g.rating IS NULL) OR g.rating = $3)) END,"
        "   'generations', COALESCE((SELECT json_agg(generation_json(g)"
        "                                   ORDER BY g.enqueued_at DESC, g.id DESC)"
        "                              FROM generations g JOIN page USING (id)), '[]'::json))::text",
        5, p, &r, err);
    free(pattern);
    return rc < 0 ? -1 : first_text(r, json, err);
}

/* The page's rows plus one, so has_more needs no count; the cursor row is
 * looked up once, and a missing one gives no row at all. */
#define LIST_AFTER(CMP, DIR)                                                                                    \
    "WITH cursor AS (SELECT enqueued_at, id FROM generations WHERE $1::uuid IS NOT NULL AND id = $1::uuid),"    \
    " page AS ("                                                                                                \
    "  SELECT g.id, g.enqueued_at FROM generations g"                                                           \
    "   WHERE $1::uuid IS NULL OR (g.enqueued_at, g.id) " CMP " (SELECT enqueued_at, id FROM cursor)"             \
    "   ORDER BY g.enqueued_at " DIR ", g.id " DIR " LIMIT $2::int + 1)"                                          \
    " SELECT json_build_object("                                                                                \
    "   'has_more', (SELECT count(*) FROM page) > $2::int,"                                                     \
    "   'generations', COALESCE((SELECT json_agg(generation_json(g) ORDER BY g.enqueued_at " DIR ", g.id " DIR ")" \
    "     FROM generations g JOIN (SELECT id FROM page ORDER BY enqueued_at " DIR ", id " DIR " LIMIT $2::int) p"   \
    "     USING (id)), '[]'::json))::text"                                                                       \
    " WHERE $1::uuid IS NULL OR EXISTS (SELECT 1 FROM cursor)"

int mm_store_list_after(PGconn *c, const char *after, bool ascending, long limit, char **json, mm_error *err)
{
    mm_db_num n = mm_db_int(limit);
    const char *p[] = {after, n.s};
    PGresult *r;
    if (mm_db_query(c, ascending ? LIST_AFTER(">", "ASC") : LIST_AFTER("<", "DESC"), 2, p, &r, err) < 0)
        return -1;
    return first_text(r, json, err);
}

int mm_store_status_json(PGconn *c, const char *version, double lease_seconds, char **json, mm_error *err)
{
    char lease[32];
    snprintf(lease, sizeof lease, "%.3f", lease_seconds);
    const char *p[] = {version, lease};
    PGresult *r;
    if (mm_db_query(c, "SELECT status_json($1, $2::double precision)::text", 2, p, &r, err) < 0)
        return -1;
    return first_text(r, json, err);
}

int mm_store_queued_count(PGconn *c, long *queued, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(c, "SELECT COALESCE((SELECT n FROM generation_counts WHERE status = 'queued'), 0)", 0, NULL, &r,
                    err) < 0)
        return -1;
    *queued = atol(PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

int mm_store_queue_load(PGconn *c, long *queued, double *typical_seconds, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT COALESCE((SELECT n FROM generation_counts WHERE status = 'queued'), 0),"
                    "       (SELECT ceil(avg(total_seconds)) FROM (SELECT total_seconds FROM generations"
                    "          WHERE status = 'succeeded' AND total_seconds IS NOT NULL"
                    "          ORDER BY completed_at DESC LIMIT 20) recent)",
                    0, NULL, &r, err) < 0)
        return -1;
    *queued = atol(PQgetvalue(r, 0, 0));
    *typical_seconds = PQgetisnull(r, 0, 1) ? 0 : atof(PQgetvalue(r, 0, 1));
    PQclear(r);
    return 0;
}

/* ---------------------------------------------------------------- events */

int mm_store_events_expired(PGconn *c, long long last_seq, bool *expired, mm_error *err)
{
    mm_db_num from = mm_db_int(last_seq);
    const char *p[] = {from.s};
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT $1::bigint < (SELECT min_seq FROM event_horizon)"
                    "    OR $1::bigint > (SELECT last_value FROM event_seq)",
                    1, p, &r, err) < 0)
        return -1;
    *expired = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return 0;
}

int mm_store_events_since(PGconn *c, long long after, int max, mm_store_event_fn each, void *user, bool *overflow,
                          mm_error *err)
{
    mm_db_num from = mm_db_int(after), limit = mm_db_int(max + 1);
    const char *p[] = {from.s, limit.s};
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT seq, kind, data FROM ("
                    "  SELECT g.seq, 'generation_update' AS kind, generation_json(g)::text AS data"
                    "    FROM generations g WHERE g.seq > $1::bigint"
                    "  UNION ALL"
                    "  SELECT t.seq, 'generation_deleted',"
                    "         json_build_object('generation_id', t.generation_id, 'seq', t.seq)::text"
                    "    FROM generation_tombstones t WHERE t.seq > $1::bigint) e"
                    " ORDER BY seq LIMIT $2::int",
                    2, p, &r, err) < 0)
        return -1;
    *overflow = PQntuples(r) > max;
    for (int i = 0; !*overflow && i < PQntuples(r); i++)
        if (!each(user, atoll(PQgetvalue(r, i, 0)), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2)))
            break;
    PQclear(r);
    return 0;
}

int mm_store_generations_snapshot(PGconn *c, const char *const *ids, int n, mm_store_row **rows, int *n_rows,
                                  mm_error *err)
{
    *rows = NULL;
    *n_rows = 0;
    if (n == 0)
        return 0;
    char *array = malloc((size_t)n * 40 + 4);
    if (!array)
        return mm_fail(err, "out of memory");
    text_array(ids, n, array, (size_t)n * 40 + 4);
    const char *p[] = {array};
    PGresult *r;
    int rc = mm_db_query(c,
                         "SELECT g.id::text, g.seq, generation_json(g)::text FROM generations g"
                         " WHERE g.id = ANY($1::uuid[])",
                         1, p, &r, err);
    free(array);
    if (rc < 0)
        return -1;
    int k = PQntuples(r);
    mm_store_row *out = calloc(k ? (size_t)k : 1, sizeof *out);
    for (int i = 0; out && i < k; i++) {
        snprintf(out[i].id, sizeof out[i].id, "%s", PQgetvalue(r, i, 0));
        out[i].seq = atoll(PQgetvalue(r, i, 1));
        out[i].json = strdup(PQgetvalue(r, i, 2));
    }
    PQclear(r);
    if (!out)
        return mm_fail(err, "out of memory");
    *rows = out;
    *n_rows = k;
    return 0;
}

void mm_store_rows_free(mm_store_row *rows, int n)
{
    for (int i = 0; rows && i < n; i++)
        free(rows[i].json);
    free(rows);
}
