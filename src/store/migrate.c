#include "store/migrate.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/sql.h"

/* Any constant; shared by every mmh3 process that migrates. */
#define MIGRATION_LOCK "7369636b6d6d6833"

int mm_db_migrate(PGconn *c, int *applied, mm_error *err)
{
    int done = 0;
    if (applied)
        *applied = 0;
    if (mm_db_exec(c,
                   "BEGIN;"
                   "SELECT pg_advisory_xact_lock(x'" MIGRATION_LOCK "'::bigint);"
                   "CREATE TABLE IF NOT EXISTS schema_migrations ("
                   "  version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());",
                   err) < 0)
        goto fail;
    PGresult *r;
    if (mm_db_query(c, "SELECT COALESCE(max(version), 0) FROM schema_migrations", 0, NULL, &r, err) < 0)
        goto fail;
    int current = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    int newest = mm_migrations_count ? mm_migrations[mm_migrations_count - 1].version : 0;
    if (current > newest) {
        mm_fail(err, "the database schema is at version %d, newer than this mmh3 knows (%d); upgrade mmh3",
                current, newest);
        goto fail;
    }
    /* Every migration not yet recorded, in order, older ones included: the
     * branches of the tree number theirs as they are planned, so one may
     * reach a database after a higher-numbered one already has. Migrations
     * are idempotent. */
    for (int i = 0; i < mm_migrations_count; i++) {
        const mm_migration *m = &mm_migrations[i];
        char v[16];
        snprintf(v, sizeof v, "%d", m->version);
        const char *p[] = {v, m->name};
        if (mm_db_query(c, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, p, &r, err) < 0)
            goto fail;
        bool recorded = PQntuples(r) > 0;
        PQclear(r);
        if (recorded)
            continue;
        if (mm_db_exec(c, m->sql, err) < 0) {
            mm_error_prefix(err, "applying migration %s", m->name);
            goto fail;
        }
        if (mm_db_query(c, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2, p, NULL, err) < 0)
            goto fail;
        done++;
    }
    if (mm_db_exec(c, "COMMIT", err) < 0)
        goto fail;
    if (applied)
        *applied = done;
    return 0;
fail:
    PQclear(PQexec(c, "ROLLBACK"));
    return mm_error_prefix(err, "migrating the database schema");
}
