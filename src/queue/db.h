/* PostgreSQL access for the serving stack (libpq).
 *
 * The database is named by a libpq connection string or URL: --db, else
 * $MMH3_DATABASE_URL, else the private cluster of `mmh3 serve`. Queries go
 * through mm_db_query(), which turns libpq failures into mm_error messages.
 */
#ifndef MMH3_QUEUE_DB_H
#define MMH3_QUEUE_DB_H

#include <libpq-fe.h>

#include "core/error.h"

/* The default when neither --db nor $MMH3_DATABASE_URL is given. */
#define MM_DB_DEFAULT_URL "dbname=mmh3"

/* --db if given, else $MMH3_DATABASE_URL, else MM_DB_DEFAULT_URL. */
const char *mm_db_url(const char *flag);

/* Connects with TCP keepalives on (a dead peer host is noticed within about
 * a minute) and application_name set. */
int mm_db_connect(const char *url, const char *app_name, PGconn **out, mm_error *err);

/* Runs sql with text parameters (NULL entries are SQL NULL). On success
 * *out holds the result (caller PQclear()s; out may be NULL to discard). */
int mm_db_query(PGconn *c, const char *sql, int n, const char *const *params, PGresult **out, mm_error *err);
/* Runs one or more statements without parameters. */
int mm_db_exec(PGconn *c, const char *sql, mm_error *err);

/* Reconnects a connection that went bad, including one whose server closed it
 * while it sat idle; 0 when it is usable. */
int mm_db_ensure(PGconn *c, mm_error *err);

/* A field of row r, or NULL when SQL NULL. */
static inline const char *mm_db_get(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

#endif
