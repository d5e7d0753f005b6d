/* GET /api/status, GET/PUT /api/settings, GET /docs. */
#include "config.h"

#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "oxen/rewrite_prompt.h"
#include "queue/db.h"
#include "queue/log.h"

extern const char mm_openapi_json[]; /* fcgi/openapi.json, compiled in */

void mm_api_docs(mm_req *r)
{
    mm_reply_text(r, 200, "application/json", mm_openapi_json, strlen(mm_openapi_json));
}

void mm_api_status(mm_req *r)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char lease[32];
    snprintf(lease, sizeof lease, "%.3f", r->app->lease_seconds);
    const char *p[] = {PACKAGE_VERSION, lease};
    PGresult *res;
    mm_error err = {{0}};
    if (mm_db_query(db, "SELECT status_json($1, $2::double precision)::text", 2, p, &res, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    mm_reply_raw_json(r, 200, PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* ---------------------------------------------------------------- settings */

#define DEFAULT_REWRITE_MODEL MM_REWRITE_MODEL_DEFAULT

static void settings_reply(mm_req *r, PGconn *db)
{
    PGresult *res;
    mm_error err = {{0}};
    if (mm_db_query(db,
                    "SELECT key, value::text FROM settings"
                    " WHERE key IN ('oxen_api_key', 'rewrite_enabled', 'rewrite_model', 'rewrite_system_prompt')",
                    0, NULL, &res, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    json_t *o = json_pack("{s:b, s:b, s:s, s:s, s:s}", "has_oxen_api_key", 0, "rewrite_enabled", 0, "rewrite_model",
                          DEFAULT_REWRITE_MODEL, "rewrite_system_prompt", "", "rewrite_system_prompt_default",
                          mm_rewrite_default_system_prompt());
    for (int i = 0; i < PQntuples(res); i++) {
        const char *key = PQgetvalue(res, i, 0);
        json_t *v = json_loads(PQgetvalue(res, i, 1), JSON_DECODE_ANY, NULL);
        if (!v)
            continue;
        if (strcmp(key, "oxen_api_key") == 0) {
            /* The key itself never leaves the server. */
            json_object_set_new(o, "has_oxen_api_key", json_boolean(json_string_length(v) > 0));
            json_decref(v);
        } else {
            json_object_set_new(o, key, v);
        }
    }
    PQclear(res);
    mm_reply_json(r, 200, o);
}

void mm_api_settings_get(mm_req *r)
{
    PGconn *db = mm_req_db(r);
    if (db)
        settings_reply(r, db);
}

void mm_api_settings_put(mm_req *r)
{
    static const char fields[] = "oxen_api_key, rewrite_enabled, rewrite_model, rewrite_system_prompt";
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
        mm_reply_error(r, 415, NULL, "Content-Type: application/json", "the body must be JSON");
        return;
    }
    char *body;
    size_t len;
    int status;
    mm_error err = {{0}};
    if (mm_req_body(r, 1 << 20, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    if (!json_is_object(j)) {
        mm_reply_error(r, 400, NULL, "a JSON object with any of: oxen_api_key, rewrite_enabled, rewrite_model, "
                                     "rewrite_system_prompt",
                       "the body is not a JSON object");
        json_decref(j);
        return;
    }
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "oxen_api_key") == 0) {
            if (!json_is_null(v) && (!json_is_string(v) || json_string_length(v) > 4096)) {
                mm_reply_error(r, 400, key, "a string (non-empty sets, empty keeps), or null to clear",
                               "is not a key");
                goto done;
            }
        } else if (strcmp(key, "rewrite_enabled") == 0) {
            if (!json_is_boolean(v)) {
                mm_reply_error(r, 400, key, "true or false", "must be a boolean");
                goto done;
            }
        } else if (strcmp(key, "rewrite_model") == 0) {
            if (!json_is_string(v) || json_string_length(v) < 1 || json_string_length(v) > 200) {
                mm_reply_error(r, 400, key, "a model name of 1..200 characters", "is not a model name");
                goto done;
            }
        } else if (strcmp(key, "rewrite_system_prompt") == 0) {
            if (!json_is_string(v) || json_string_length(v) > 20000) {
                mm_reply_error(r, 400, key, "a string of at most 20000 characters", "is not a system prompt");
                goto done;
            }
        } else {
            mm_reply_error(r, 400, key, fields, "is not a setting");
            goto done;
        }
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        goto done;
    if (mm_db_exec(db, "BEGIN", &err) < 0)
        goto failed;
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "oxen_api_key") == 0 && json_is_string(v) && json_string_length(v) == 0)
            continue; /* empty: unchanged */
        if (json_is_null(v)) {
            const char *p[] = {key};
            if (mm_db_query(db, "DELETE FROM settings WHERE key = $1", 1, p, NULL, &err) < 0)
                goto rollback;
            continue;
        }
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        const char *p[] = {key, text};
        int rc = mm_db_query(db,
                             "INSERT INTO settings (key, value) VALUES ($1, $2::jsonb)"
                             " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                             2, p, NULL, &err);
        free(text);
        if (rc < 0)
            goto rollback;
    }
    if (mm_db_exec(db, "COMMIT", &err) < 0)
        goto failed;
    settings_reply(r, db);
    goto done;
rollback:
    PQclear(PQexec(db, "ROLLBACK"));
failed:
    mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
done:
    json_decref(j);
}
