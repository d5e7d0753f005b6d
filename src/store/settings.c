#include "store/settings.h"

#include <stdlib.h>
#include <string.h>

#include "store/sql.h"

int mm_store_settings_get(PGconn *c, const char *const *keys, int n, json_t **values, mm_error *err)
{
    *values = NULL;
    json_t *names = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(names, json_string(keys[i]));
    char *list = json_dumps(names, JSON_COMPACT);
    json_decref(names);
    const char *p[] = {list};
    PGresult *r;
    int rc = mm_db_query(c,
                         "SELECT key, value::text FROM settings"
                         " WHERE key IN (SELECT json_array_elements_text($1::json))",
                         1, p, &r, err);
    free(list);
    if (rc < 0)
        return -1;
    json_t *o = json_object();
    for (int i = 0; i < PQntuples(r); i++) {
        json_t *v = json_loads(PQgetvalue(r, i, 1), JSON_DECODE_ANY, NULL);
        if (v)
            json_object_set_new(o, PQgetvalue(r, i, 0), v);
    }
    PQclear(r);
    *values = o;
    return 0;
}

int mm_store_setting_text(PGconn *c, const char *key, char **text, mm_error *err)
{
    const char *p[] = {key};
    PGresult *r;
    *text = NULL;
    if (mm_db_query(c, "SELECT value #>> '{}' FROM settings WHERE key = $1", 1, p, &r, err) < 0)
        return -1;
    const char *v = PQntuples(r) ? mm_db_get(r, 0, 0) : NULL;
    if (v && !(*text = strdup(v))) {
        PQclear(r);
        return mm_fail(err, "out of memory");
    }
    PQclear(r);
    return 0;
}

static int put_one(PGconn *c, const char *key, json_t *v, mm_error *err)
{
    if (json_is_null(v)) {
        const char *p[] = {key};
        return mm_db_query(c, "DELETE FROM settings WHERE key = $1", 1, p, NULL, err);
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    const char *p[] = {key, text};
    int rc = mm_db_query(c,
                         "INSERT INTO settings (key, value) VALUES ($1, $2::jsonb)"
                         " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                         2, p, NULL, err);
    free(text);
    return rc;
}

int mm_store_settings_put(PGconn *c, json_t *changes, mm_error *err)
{
    if (mm_db_begin(c, err) < 0)
        return -1;
    const char *key;
    json_t *v;
    json_object_foreach(changes, key, v)
    {
        if (put_one(c, key, v, err) < 0) {
            mm_db_rollback(c);
            return -1;
        }
    }
    return mm_db_commit(c, err);
}
