/* Running SQL: for the files of src/store/ only (callers outside use the
 * store's functions, never SQL). libpq failures become mm_error messages. */
#ifndef MMH3_STORE_SQL_H
#define MMH3_STORE_SQL_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "core/error.h"
#include "store/db.h"

/* Runs sql with text parameters (NULL entries are SQL NULL). On success
 * *out holds the result (caller PQclear()s; out may be NULL to discard). */
int mm_db_query(PGconn *c, const char *sql, int n, const char *const *params, PGresult **out, mm_error *err);
/* Runs one or more statements without parameters. */
int mm_db_exec(PGconn *c, const char *sql, mm_error *err);

int mm_db_begin(PGconn *c, mm_error *err);
int mm_db_commit(PGconn *c, mm_error *err); /* rolls back when the commit fails */
void mm_db_rollback(PGconn *c);

/* A field of row r, or NULL when SQL NULL. */
static inline const char *mm_db_get(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

/* A text parameter from an integer (keep the variable alive while the query runs). */
typedef struct mm_db_num {
    char s[32];
} mm_db_num;
mm_db_num mm_db_int(long long v);

#endif
