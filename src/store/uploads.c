#include "store/uploads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/sql.h"

static int insert_one(PGconn *c, const mm_store_upload *u, json_t *objects, mm_error *err)
{
    mm_db_num bytes = mm_db_int(u->bytes), w = mm_db_int(u->width), h = mm_db_int(u->height);
    char dur[32];
    snprintf(dur, sizeof dur, "%.6f", u->duration);
    const char *p[] = {u->id,    u->kind, u->rel, u->poster_rel[0] ? u->poster_rel : NULL, u->content_type,
                       u->original_name, bytes.s, w.s, h.s, dur, u->has_audio ? "t" : "f", u->format_name,
                       u->codec_name};
    PGresult *r;
    if (mm_db_query(c,
                    "INSERT INTO uploads AS u (id, kind, path, poster_path, content_type, original_name, bytes,"
                    "  width, height, duration_seconds, has_audio, format_name, codec_name)"
                    " VALUES ($1::uuid, $2, $3, $4, $5, NULLIF($6, ''), $7::bigint, NULLIF($8::int, 0),"
                    "  NULLIF($9::int, 0), NULLIF($10::double precision, 0), $11::boolean, $12, $13)"
                    " RETURNING upload_json(u)::text",
                    13, p, &r, err) < 0)
        return -1;
    json_array_append_new(objects, json_loads(PQgetvalue(r, 0, 0), 0, NULL));
    PQclear(r);
    return 0;
}

int mm_store_uploads_insert(PGconn *c, const mm_store_upload *u, int n, json_t *objects, mm_error *err)
{
    if (mm_db_begin(c, err) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (insert_one(c, &u[i], objects, err) < 0) {
            mm_db_rollback(c);
            return -1;
        }
    return mm_db_commit(c, err);
}

int mm_store_upload_json(PGconn *c, const char *id, char **json, mm_error *err)
{
    const char *p[] = {id};
    PGresult *r;
    *json = NULL;
    if (mm_db_query(c, "SELECT upload_json(u)::text FROM uploads u WHERE u.id = $1::uuid", 1, p, &r, err) < 0)
        return -1;
    if (PQntuples(r) && !(*json = strdup(PQgetvalue(r, 0, 0)))) {
        PQclear(r);
        return mm_fail(err, "out of memory");
    }
    PQclear(r);
    return 0;
}

int mm_store_uploads_lookup(PGconn *c, mm_request_refs *refs, mm_error *err)
{
    int n = refs->n_refs + (refs->has_last ? 1 : 0);
    char ids[(MM_MAX_REFERENCES + 1) * 38 + 4];
    size_t w = (size_t)snprintf(ids, sizeof ids, "{");
    for (int i = 0; i < n; i++)
        w += (size_t)snprintf(ids + w, sizeof ids - w, "%s%s", i ? "," : "", refs->refs[i].source);
    snprintf(ids + w, sizeof ids - w, "}");
    const char *p[] = {ids};
    PGresult *r;
    if (mm_db_query(c,
                    "SELECT id::text, kind, COALESCE(width, 0), COALESCE(height, 0)"
                    "  FROM uploads WHERE id = ANY($1::uuid[])",
                    1, p, &r, err) < 0)
        return -1;
    for (int row = 0; row < PQntuples(r); row++) {
        const char *kind = PQgetvalue(r, row, 1);
        for (int i = 0; i < n; i++) {
            if (strcasecmp(PQgetvalue(r, row, 0), refs->refs[i].source) != 0)
                continue;
            refs->found[i] = true;
            refs->refs[i].kind = strcmp(kind, "video") == 0   ? MM_REF_VIDEO
                                 : strcmp(kind, "audio") == 0 ? MM_REF_AUDIO
                                                              : MM_REF_IMAGE;
            refs->refs[i].width = atoi(PQgetvalue(r, row, 2));
            refs->refs[i].height = atoi(PQgetvalue(r, row, 3));
        }
    }
    PQclear(r);
    return 0;
}
