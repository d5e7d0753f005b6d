#include "store/loras.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "store/sql.h"

int mm_store_loras_publish(PGconn *c, const char *worker_id, json_t *entries, mm_error *err)
{
    char *text = json_dumps(entries, JSON_COMPACT);
    if (!text)
        return mm_fail(err, "out of memory");
    const char *p[] = {text, worker_id};
    int rc = mm_db_begin(c, err);
    if (rc == 0)
        rc = mm_db_exec(c, "DELETE FROM loras", err);
    if (rc == 0)
        rc = mm_db_query(c,
                         "INSERT INTO loras (name, family, rank, alpha, targets, bytes, preset, forwards, warnings,"
                         "                   error)"
                         " SELECT x.name, COALESCE(x.family, ''), x.rank, x.alpha, COALESCE(x.targets, ''),"
                         "        COALESCE(x.bytes, 0), x.preset, x.forwards, COALESCE(x.warnings, '[]'), x.error"
                         "   FROM jsonb_to_recordset($1::jsonb) AS x(name text, family text, rank integer, alpha real,"
                         "        targets text, bytes bigint, preset text, forwards integer, warnings jsonb,"
                         "        error text)",
                         1, p, NULL, err);
    if (rc == 0)
        rc = mm_db_query(c,
                         "INSERT INTO lora_catalog (one, worker_id, published_at, count)"
                         " VALUES (true, $2, now(), jsonb_array_length($1::jsonb))"
                         " ON CONFLICT (one) DO UPDATE SET worker_id = EXCLUDED.worker_id,"
                         "     published_at = EXCLUDED.published_at, count = EXCLUDED.count",
                         2, p, NULL, err);
    if (rc == 0)
        rc = mm_db_commit(c, err);
    else
        mm_db_rollback(c);
    free(text);
    return rc < 0 ? mm_error_prefix(err, "publishing the adapter catalogue") : 0;
}

int mm_store_loras_json(PGconn *c, char **json, mm_error *err)
{
    PGresult *r;
    *json = NULL;
    if (mm_db_query(c,
                    "SELECT jsonb_build_object("
                    "  'published', EXISTS (SELECT 1 FROM lora_catalog),"
                    "  'published_at', (SELECT floor(extract(epoch FROM published_at))::bigint FROM lora_catalog),"
                    "  'worker_id', (SELECT worker_id FROM lora_catalog),"
                    "  'loras', COALESCE((SELECT jsonb_agg(jsonb_build_object("
                    "      'name', name, 'family', family, 'rank', rank, 'alpha', alpha, 'targets', targets,"
                    "      'bytes', bytes, 'preset', preset, 'forwards', forwards, 'warnings', warnings,"
                    "      'error', error) ORDER BY name) FROM loras), '[]'::jsonb))::text",
                    0, NULL, &r, err) < 0)
        return -1;
    *json = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return *json ? 0 : mm_fail(err, "out of memory");
}

void mm_store_lora_names_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int mm_store_lora_names(PGconn *c, bool *published, char ***names, int *n, mm_error *err)
{
    PGresult *r;
    *published = false, *names = NULL, *n = 0;
    if (mm_db_query(c,
                    "SELECT EXISTS (SELECT 1 FROM lora_catalog), l.name"
                    "  FROM (SELECT 1) AS one LEFT JOIN loras l ON true ORDER BY l.name",
                    0, NULL, &r, err) < 0)
        return -1;
    int rows = PQntuples(r);
    *published = rows > 0 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    char **out = calloc((size_t)rows + 1, sizeof *out);
    int k = 0;
    bool ok = out != NULL;
    for (int i = 0; ok && i < rows; i++)
        if (mm_db_get(r, i, 1))
            ok = (out[k++] = strdup(PQgetvalue(r, i, 1))) != NULL;
    PQclear(r);
    if (!ok) {
        mm_store_lora_names_free(out, k);
        return mm_fail(err, "out of memory");
    }
    *names = out, *n = k;
    return 0;
}
