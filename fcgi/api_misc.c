/* GET /api/status, GET /api/loras, GET/PUT /api/settings, GET /docs. */
#include "config.h"

#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "oxen/rewrite_prompt.h"
#include "store/generations.h"
#include "store/loras.h"
#include "store/settings.h"

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
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_status_json(db, PACKAGE_VERSION, r->app->lease_seconds, &json, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    mm_reply_raw_json(r, 200, json);
    free(json);
}

/* The adapters a worker found in its $MODELS_PATH/loras (the API cannot
 * read the folder: it links nothing of the engine). */
void mm_api_loras(mm_req *r)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_loras_json(db, &json, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    mm_reply_raw_json(r, 200, json);
    free(json);
}

/* ---------------------------------------------------------------- settings */

#define DEFAULT_REWRITE_MODEL MM_REWRITE_MODEL_DEFAULT

static const char *const setting_keys[] = {"oxen_api_key", "rewrite_enabled", "rewrite_model",
                                           "rewrite_system_prompt"};

static void settings_reply(mm_req *r, PGconn *db)
{
    json_t *values = NULL;
    mm_error err = {{0}};
    if (mm_store_settings_get(db, setting_keys, 4, &values, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    json_t *o = json_pack("{s:b, s:b, s:s, s:s, s:s}", "has_oxen_api_key", 0, "rewrite_enabled", 0, "rewrite_model",
                          DEFAULT_REWRITE_MODEL, "rewrite_system_prompt", "", "rewrite_system_prompt_default",
                          mm_rewrite_default_system_prompt());
    const char *key;
    json_t *v;
    json_object_foreach(values, key, v)
    {
        if (strcmp(key, "oxen_api_key") == 0) /* the key itself never leaves the server */
            json_object_set_new(o, "has_oxen_api_key", json_boolean(json_string_length(v) > 0));
        else
            json_object_set(o, key, v);
    }
    json_decref(values);
    mm_reply_json(r, 200, o);
}

void mm_api_settings_get(mm_req *r)
{
    PGconn *db = mm_req_db(r);
    if (db)
        settings_reply(r, db);
}

/* The body's members, each checked; false after answering. */
static bool check_settings(mm_req *r, json_t *j)
{
    static const char fields[] = "oxen_api_key, rewrite_enabled, rewrite_model, rewrite_system_prompt";
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "oxen_api_key") == 0) {
            if (!json_is_null(v) && (!json_is_string(v) || json_string_length(v) > 4096)) {
                mm_reply_error(r, 400, key, "a string (non-empty sets, empty keeps), or null to clear",
                               "is not a key");
                return false;
            }
        } else if (strcmp(key, "rewrite_enabled") == 0) {
            if (!json_is_boolean(v)) {
                mm_reply_error(r, 400, key, "true or false", "must be a boolean");
                return false;
            }
        } else if (strcmp(key, "rewrite_model") == 0) {
            if (!json_is_string(v) || json_string_length(v) < 1 || json_string_length(v) > 200) {
                mm_reply_error(r, 400, key, "a model name of 1..200 characters", "is not a model name");
                return false;
            }
        } else if (strcmp(key, "rewrite_system_prompt") == 0) {
            if (!json_is_string(v) || json_string_length(v) > 20000) {
                mm_reply_error(r, 400, key, "a string of at most 20000 characters", "is not a system prompt");
                return false;
            }
        } else {
            mm_reply_error(r, 400, key, fields, "is not a setting");
            return false;
        }
    }
    return true;
}

static json_t *settings_body(mm_req *r)
{
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
        mm_reply_error(r, 415, NULL, "Content-Type: application/json", "the body must be JSON");
        return NULL;
    }
    char *body;
    size_t len;
    int status;
    mm_error err = {{0}};
    if (mm_req_body(r, 1 << 20, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    if (!json_is_object(j)) {
        mm_reply_error(r, 400, NULL, "a JSON object with any of: oxen_api_key, rewrite_enabled, rewrite_model, "
                                     "rewrite_system_prompt",
                       "the body is not a JSON object");
        json_decref(j);
        return NULL;
    }
    return j;
}

void mm_api_settings_put(mm_req *r)
{
    json_t *j = settings_body(r);
    if (!j)
        return;
    PGconn *db = check_settings(r, j) ? mm_req_db(r) : NULL;
    if (db) {
        /* An empty key keeps the one stored. */
        json_t *key = json_object_get(j, "oxen_api_key");
        if (json_is_string(key) && json_string_length(key) == 0)
            json_object_del(j, "oxen_api_key");
        mm_error err = {{0}};
        if (mm_store_settings_put(db, j, &err) < 0)
            mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        else
            settings_reply(r, db);
    }
    json_decref(j);
}
