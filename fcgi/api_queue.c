/* The queue endpoints: enqueue, list/search, get, rate, cancel/delete. The
 * JSON shapes are built by SQL functions (sql/001_init.sql: generation_json)
 * so the API, the SSE relay and the catch-up send identical objects. */
#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "fcgi/enqueue.h"
#include "queue/db.h"
#include "queue/log.h"

#define JSON_BODY_MAX (1 << 20)

/* Reads and parses a JSON request body; answers the error itself on failure. */
json_t *mm_req_json(mm_req *r)
{
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0 || (ct[16] && ct[16] != ';' && ct[16] != ' ')) {
        mm_reply_error(r, 415, NULL, "Content-Type: application/json", "the body must be JSON, not '%s'",
                       ct ? ct : "(no Content-Type)");
        return NULL;
    }
    char *body;
    size_t len;
    int status;
    mm_error err = {{0}};
    if (mm_req_body(r, JSON_BODY_MAX, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    if (!j)
        mm_reply_error(r, 400, NULL, "a JSON document", "the body is not valid JSON (line %d, column %d: %s)",
                       jerr.line, jerr.column, jerr.text);
    return j;
}

static void db_failed(mm_req *r, const mm_error *err)
{
    mm_log("%s %s: %s", r->method, r->path, err->msg);
    mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err->msg);
}

/* ---------------------------------------------------------------- enqueue */

typedef struct ref_info {
    char kind[8];
    int width, height;
    bool found;
} ref_info;

void mm_api_enqueue(mm_req *r)
{
    json_t *body = mm_req_json(r);
    if (!body)
        return;
    char *rows = NULL;
    if (mm_enqueue_insert(r, body, &rows) == 0) {
        size_t n = strlen(rows) + 32;
        char *out = malloc(n);
        if (out) {
            snprintf(out, n, "{\"generations\":%s}", rows);
            mm_reply_raw_json(r, 200, out);
            free(out);
        } else {
            mm_reply_error(r, 500, NULL, NULL, "out of memory");
        }
        free(rows);
    }
    json_decref(body);
}

int mm_enqueue_insert(mm_req *r, json_t *body, char **rows_out)
{
    *rows_out = NULL;
    mm_enqueue q;
    mm_field_error fe;
    if (mm_enqueue_parse(body, &q, &fe) < 0) {
        mm_reply_error(r, 400, fe.field[0] ? fe.field : NULL, fe.accepted, "%s", fe.message);
        return -1;
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        return -1;
    mm_error err = {{0}};
    int result = -1;

    /* The references: they must exist; their kinds decide limits, partition and canvas. */
    ref_info refs[MM_MAX_REFERENCES + 1];
    memset(refs, 0, sizeof refs);
    int n_lookup = q.n_refs + (q.has_last_image ? 1 : 0);
    char ids_array[(MM_MAX_REFERENCES + 1) * 38 + 4] = "{";
    for (int i = 0; i < n_lookup; i++) {
        strcat(ids_array, i ? "," : "");
        strcat(ids_array, i < q.n_refs ? q.ref_ids[i] : q.last_image_id);
    }
    strcat(ids_array, "}");
    if (n_lookup) {
        const char *p[] = {ids_array};
        PGresult *res;
        if (mm_db_query(db, "SELECT id::text, kind, COALESCE(width, 0), COALESCE(height, 0)"
                            "  FROM uploads WHERE id = ANY($1::uuid[])",
                        1, p, &res, &err) < 0) {
            db_failed(r, &err);
            return -1;
        }
        for (int row = 0; row < PQntuples(res); row++)
            for (int i = 0; i < n_lookup; i++)
                if (strcasecmp(PQgetvalue(res, row, 0), i < q.n_refs ? q.ref_ids[i] : q.last_image_id) == 0) {
                    refs[i].found = true;
                    snprintf(refs[i].kind, sizeof refs[i].kind, "%s", PQgetvalue(res, row, 1));
                    refs[i].width = atoi(PQgetvalue(res, row, 2));
                    refs[i].height = atoi(PQgetvalue(res, row, 3));
                }
        PQclear(res);
    }
    static const char accept_ids[] = "upload ids from POST /api/images: at most 9 images, 3 videos and 3 audio clips";
    int images = 0, videos = 0, audio = 0;
    for (int i = 0; i < q.n_refs; i++) {
        char f[32];
        snprintf(f, sizeof f, "image_ids[%d]", i);
        if (!refs[i].found) {
            mm_reply_error(r, 400, f, accept_ids, "no upload has the id %s", q.ref_ids[i]);
            goto done;
        }
        images += strcmp(refs[i].kind, "image") == 0;
        videos += strcmp(refs[i].kind, "video") == 0;
        audio += strcmp(refs[i].kind, "audio") == 0;
    }
    if (images > MM_MAX_REF_IMAGES || videos > MM_MAX_REF_VIDEOS || audio > MM_MAX_REF_AUDIO) {
        mm_reply_error(r, 400, "image_ids", accept_ids, "has %d images, %d videos and %d audio clips", images, videos,
                       audio);
        goto done;
    }
    if (!q.partition[0])
        snprintf(q.partition, sizeof q.partition, "%s", audio ? "ref2va" : "fl2va");
    if (audio && strcmp(q.partition, "fl2va") == 0) {
        mm_reply_error(r, 400, "image_ids", "audio references with partition ref2va",
                       "has %d audio clip(s), which only ref2va uses, and partition is fl2va", audio);
        goto done;
    }
    if (q.has_last_image) {
        ref_info *l = &refs[q.n_refs];
        static const char accept_last[] = "the upload id of a still image, with partition fl2va";
        if (!l->found) {
            mm_reply_error(r, 400, "last_image_id", accept_last, "no upload has the id %s", q.last_image_id);
            goto done;
        }
        if (strcmp(l->kind, "image") != 0) {
            mm_reply_error(r, 400, "last_image_id", accept_last, "is a%s %s upload, not a still image",
                           l->kind[0] == 'a' ? "n" : "", l->kind);
            goto done;
        }
        if (strcmp(q.partition, "fl2va") != 0) {
            mm_reply_error(r, 400, "last_image_id", accept_last, "is only used by fl2va, and partition is %s",
                           q.partition);
            goto done;
        }
    }

    /* Canvas: the first visual reference sets the aspect. */
    for (int i = 0; i < q.n_refs; i++)
        if (strcmp(refs[i].kind, "audio") != 0 && refs[i].width > 0 && refs[i].height > 0) {
            q.canvas.ref_width = refs[i].width;
            q.canvas.ref_height = refs[i].height;
            break;
        }
    if (q.aspect_w) {
        /* An explicit aspect_ratio wins over the references' aspect. */
        q.canvas.ref_width = q.aspect_w;
        q.canvas.ref_height = q.aspect_h;
    }
    int width, height;
    mm_canvas_resolve(&q.canvas, &width, &height);
    int frames = q.frames ? q.frames : MM_FRAMES_DEFAULT;
    bool drawn = !q.has_seed;

    json_t *warnings = json_array();
    for (int i = 0; i < q.notes.n; i++)
        json_array_append_new(warnings, json_string(q.notes.msg[i]));
    char *warnings_text = json_dumps(warnings, JSON_COMPACT);
    json_decref(warnings);

    char s_frames[16], s_w[16], s_h[16], s_steps[16], s_seed[32], s_crf[16];
    snprintf(s_frames, sizeof s_frames, "%d", frames);
    snprintf(s_w, sizeof s_w, "%d", width);
    snprintf(s_h, sizeof s_h, "%d", height);
    snprintf(s_steps, sizeof s_steps, "%d", q.steps);
    snprintf(s_crf, sizeof s_crf, "%d", q.crf);
    char only_refs[MM_MAX_REFERENCES * 38 + 4] = "{";
    for (int i = 0; i < q.n_refs; i++) {
        strcat(only_refs, i ? "," : "");
        strcat(only_refs, q.ref_ids[i]);
    }
    strcat(only_refs, "}");
    /* num_generations rows, all or none; the answer is their objects as SQL wrote them. */
    size_t rows_len = 1, rows_cap = 4096;
    char *rows = malloc(rows_cap);
    if (!rows || mm_db_exec(db, "BEGIN", &err) < 0) {
        free(warnings_text);
        free(rows);
        if (rows)
            db_failed(r, &err);
        else
            mm_reply_error(r, 500, NULL, NULL, "out of memory");
        goto done;
    }
    strcpy(rows, "[");
    for (int k = 0; k < q.count; k++) {
        long long seed = q.seed + k;
        if (drawn) {
            uint32_t s = 0;
            if (getrandom(&s, sizeof s, 0) != sizeof s)
                s = (uint32_t)rand();
            seed = s;
        } else if (seed > MM_SEED_MAX) {
            seed -= MM_SEED_MAX + 1;
        }
        snprintf(s_seed, sizeof s_seed, "%lld", seed);
        const char *p[] = {q.prompt, q.partition, only_refs, q.has_last_image ? q.last_image_id : NULL,
                           s_frames, s_w, s_h, s_steps, s_seed, drawn ? "t" : "f", q.no_audio ? "t" : "f",
                           q.fast ? "t" : "f", s_crf, q.preset, warnings_text ? warnings_text : "[]"};
        PGresult *res;
        int rc = mm_db_query(db,
                             "INSERT INTO generations AS g (prompt, partition, image_ids, last_image_id, frames, width,"
                             "  height, steps, seed, seed_drawn, no_audio, fast, crf, preset, warnings)"
                             " VALUES ($1, $2, $3::uuid[], $4::uuid, $5::int, $6::int, $7::int, $8::int, $9::bigint,"
                             "  $10::boolean, $11::boolean, $12::boolean, $13::int, $14, $15::jsonb)"
                             " RETURNING generation_json(g)::text",
                             15, p, &res, &err);
        if (rc < 0) {
            PQclear(PQexec(db, "ROLLBACK"));
            free(warnings_text);
            free(rows);
            db_failed(r, &err);
            goto done;
        }
        const char *g = PQgetvalue(res, 0, 0);
        size_t gl = strlen(g);
        if (rows_len + gl + 3 > rows_cap) {
            while (rows_len + gl + 3 > rows_cap)
                rows_cap *= 2;
            char *grown = realloc(rows, rows_cap);
            if (!grown) {
                PQclear(res);
                PQclear(PQexec(db, "ROLLBACK"));
                free(warnings_text);
                free(rows);
                mm_reply_error(r, 500, NULL, NULL, "out of memory");
                goto done;
            }
            rows = grown;
        }
        if (k)
            rows[rows_len++] = ',';
        memcpy(rows + rows_len, g, gl);
        rows_len += gl;
        rows[rows_len] = '\0';
        PQclear(res);
    }
    free(warnings_text);
    if (mm_db_exec(db, "COMMIT", &err) < 0) {
        PQclear(PQexec(db, "ROLLBACK"));
        free(rows);
        db_failed(r, &err);
        goto done;
    }
    rows[rows_len++] = ']';
    rows[rows_len] = '\0';
    *rows_out = rows;
    result = 0;
done:
    return result;
}

/* ---------------------------------------------------------------- list */

static const char *const statuses[] = {"queued", "processing", "succeeded", "failed", "cancelled"};

void mm_api_list(mm_req *r)
{
    static const char accept_status[] =
        "comma-separated statuses (queued, processing, succeeded, failed, cancelled), 'active' or 'all'";
    char status[256] = "", search[8192 * 4] = "", rating[32] = "", num[32];
    char status_array[128] = "";
    if (mm_req_query(r, "status", status, sizeof status) && status[0] && strcmp(status, "all") != 0) {
        strcpy(status_array, "{");
        char *save = NULL;
        for (char *t = strtok_r(status, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ')
                t++;
            bool active = strcmp(t, "active") == 0, ok = active;
            for (size_t i = 0; i < 5; i++)
                if (strcmp(t, statuses[i]) == 0)
                    ok = true;
            if (!ok) {
                mm_reply_error(r, 400, "status", accept_status, "'%s' is not a status", t);
                return;
            }
            /* Every addition is bounded, 'active' included ("active,active,..." once overran the array). */
            const char *add = active ? "queued,processing" : t;
            if (strlen(status_array) + strlen(add) + 3 >= sizeof status_array) {
                mm_reply_error(r, 400, "status", accept_status, "lists too many statuses");
                return;
            }
            strcat(status_array, status_array[1] ? "," : "");
            strcat(status_array, add);
        }
        strcat(status_array, "}");
    }
    char pattern[sizeof search * 2 + 3] = "";
    if (mm_req_query(r, "search", search, sizeof search) && search[0]) {
        /* Substring match: escape LIKE's wildcards in the text. */
        char *w = pattern;
        *w++ = '%';
        for (const char *s = search; *s; s++) {
            if (*s == '%' || *s == '_' || *s == '\\')
                *w++ = '\\';
            *w++ = *s;
        }
        *w++ = '%';
        *w = '\0';
    }
    if (mm_req_query(r, "rating", rating, sizeof rating) && rating[0] && strcmp(rating, "approved") != 0 &&
        strcmp(rating, "rejected") != 0 && strcmp(rating, "none") != 0) {
        mm_reply_error(r, 400, "rating", "approved, rejected or none", "'%s' is not a rating filter", rating);
        return;
    }
    long limit = 60, offset = 0;
    char *end;
    if (mm_req_query(r, "limit", num, sizeof num)) {
        limit = strtol(num, &end, 10);
        if (!num[0] || *end || limit < 1 || limit > 500) {
            mm_reply_error(r, 400, "limit", "integer 1..500 (default 60)", "'%s' is out of range", num);
            return;
        }
    }
    if (mm_req_query(r, "offset", num, sizeof num)) {
        offset = strtol(num, &end, 10);
        if (!num[0] || *end || offset < 0 || offset > 100000000) {
            mm_reply_error(r, 400, "offset", "integer >= 0 (default 0)", "'%s' is out of range", num);
            return;
        }
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char s_limit[16], s_offset[16];
    snprintf(s_limit, sizeof s_limit, "%ld", limit);
    snprintf(s_offset, sizeof s_offset, "%ld", offset);
    const char *p[] = {status_array[0] ? status_array : NULL, pattern[0] ? pattern : NULL, rating[0] ? rating : NULL,
                       s_limit, s_offset};
    PGresult *res;
    mm_error err = {{0}};
    if (mm_db_query(db,
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
                    5, p, &res, &err) < 0) {
        db_failed(r, &err);
        return;
    }
    mm_reply_raw_json(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* ---------------------------------------------------------------- one row */

void mm_api_get(mm_req *r, const char *id)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    const char *p[] = {id};
    PGresult *res;
    mm_error err = {{0}};
    if (mm_db_query(db, "SELECT generation_json(g)::text FROM generations g WHERE g.id = $1::uuid", 1, p, &res,
                    &err) < 0) {
        db_failed(r, &err);
        return;
    }
    if (PQntuples(res) == 0)
        mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
    else
        mm_reply_raw_json(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

void mm_api_patch(mm_req *r, const char *id)
{
    static const char accept[] = "{\"rating\": \"approved\" | \"rejected\" | null}";
    json_t *body = mm_req_json(r);
    if (!body)
        return;
    json_t *rating = json_object_get(body, "rating");
    const char *key;
    json_t *val;
    if (!json_is_object(body)) {
        mm_reply_error(r, 400, NULL, accept, "the body must be a JSON object");
        goto done;
    }
    json_object_foreach(body, key, val)
    {
        if (strcmp(key, "rating") != 0) {
            mm_reply_error(r, 400, key, accept, "is not a field that can be changed");
            goto done;
        }
    }
    if (!rating) {
        mm_reply_error(r, 400, "rating", accept, "is required");
        goto done;
    }
    const char *value = json_string_value(rating);
    if (!json_is_null(rating) && (!value || (strcmp(value, "approved") != 0 && strcmp(value, "rejected") != 0))) {
        mm_reply_error(r, 400, "rating", accept, "is not a rating");
        goto done;
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        goto done;
    const char *p[] = {id, value};
    PGresult *res;
    mm_error err = {{0}};
    if (mm_db_query(db, "UPDATE generations g SET rating = $2 WHERE g.id = $1::uuid RETURNING generation_json(g)::text",
                    2, p, &res, &err) < 0) {
        db_failed(r, &err);
        goto done;
    }
    if (PQntuples(res) == 0)
        mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
    else
        mm_reply_raw_json(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
done:
    json_decref(body);
}

/* Removes a file the database names, relative to the outputs folder; only
 * generated names under generations/ or uploads/ qualify. */
static void remove_output(mm_req *r, const char *rel)
{
    if (!rel || strstr(rel, "..") || (strncmp(rel, "generations/", 12) != 0 && strncmp(rel, "uploads/", 8) != 0))
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->app->outputs, rel);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.part", r->app->outputs, rel);
    unlink(path);
}

void mm_api_delete(mm_req *r, const char *id)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    const char *p[] = {id};
    mm_error err = {{0}};
    /* A row can change state between statements (a worker claims or ends
     * it); each statement matches one state, and we go round again. */
    for (int round = 0; round < 4; round++) {
        PGresult *res;
        if (mm_db_query(db,
                        "UPDATE generations SET status = 'cancelled', completed_at = now()"
                        " WHERE id = $1::uuid AND status = 'queued' RETURNING id",
                        1, p, &res, &err) < 0)
            goto failed;
        int n = PQntuples(res);
        PQclear(res);
        if (n) {
            json_t *o = json_pack("{s:s, s:s, s:s}", "status", "success", "generation_id", id, "action", "cancelled");
            mm_reply_json(r, 200, o);
            return;
        }
        if (mm_db_query(db,
                        "UPDATE generations SET cancel_requested = true"
                        " WHERE id = $1::uuid AND status = 'processing' RETURNING id",
                        1, p, &res, &err) < 0)
            goto failed;
        n = PQntuples(res);
        PQclear(res);
        if (n) {
            json_t *o = json_pack("{s:s, s:s, s:s}", "status", "success", "generation_id", id, "action", "cancelling");
            mm_reply_json(r, 200, o);
            return;
        }
        if (mm_db_query(db,
                        "DELETE FROM generations WHERE id = $1::uuid"
                        "   AND status IN ('succeeded', 'failed', 'cancelled') RETURNING result_path, poster_path",
                        1, p, &res, &err) < 0)
            goto failed;
        n = PQntuples(res);
        if (n) {
            remove_output(r, mm_db_get(res, 0, 0));
            remove_output(r, mm_db_get(res, 0, 1));
            PQclear(res);
            json_t *o = json_pack("{s:s, s:s, s:s}", "status", "success", "generation_id", id, "action", "deleted");
            mm_reply_json(r, 200, o);
            return;
        }
        PQclear(res);
        if (mm_db_query(db, "SELECT 1 FROM generations WHERE id = $1::uuid", 1, p, &res, &err) < 0)
            goto failed;
        n = PQntuples(res);
        PQclear(res);
        if (!n) {
            mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
            return;
        }
    }
    mm_reply_error(r, 409, NULL, NULL, "the generation kept changing state; try again");
    return;
failed:
    db_failed(r, &err);
}
