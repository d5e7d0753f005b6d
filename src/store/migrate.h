/* Versioned schema migrations, applied automatically at start.
 *
 * The SQL files in sql/ (NNN_name.sql) are compiled into the program
 * (sql/embed.sh), so an installed binary always carries its schema. Applying
 * takes a transaction-level advisory lock, so processes starting together
 * apply each version exactly once; re-running is a no-op.
 */
#ifndef MMH3_STORE_MIGRATE_H
#define MMH3_STORE_MIGRATE_H

#include <libpq-fe.h>

#include "core/error.h"

typedef struct mm_migration {
    int version;
    const char *name;
    const char *sql;
} mm_migration;

extern const mm_migration mm_migrations[];
extern const int mm_migrations_count;

/* Brings the schema up to date; *applied (may be NULL) gets how many versions ran. */
int mm_db_migrate(PGconn *c, int *applied, mm_error *err);

#endif
