/* Connections to the serving stack's PostgreSQL (libpq).
 *
 * The database is named by a libpq connection string or URL: --db, else
 * $MMH3_DATABASE_URL, else the private cluster of `mmh3 serve`. What is read
 * and written goes through the store's functions (store/jobs.h,
 * store/generations.h, ...); SQL stays inside src/store/.
 */
#ifndef MMH3_STORE_DB_H
#define MMH3_STORE_DB_H

#include <libpq-fe.h>

#include "core/error.h"

/* The default when neither --db nor $MMH3_DATABASE_URL is given. */
#define MM_DB_DEFAULT_URL "dbname=mmh3"

/* --db if given, else $MMH3_DATABASE_URL, else MM_DB_DEFAULT_URL. */
const char *mm_db_url(const char *flag);

/* Connects with TCP keepalives on (a dead peer host is noticed within about
 * a minute) and application_name set. */
int mm_db_connect(const char *url, const char *app_name, PGconn **out, mm_error *err);

/* Reconnects a connection that went bad, including one whose server closed it
 * while it sat idle; 0 when it is usable. */
int mm_db_ensure(PGconn *c, mm_error *err);

/* Creates the database `name` on an administrative connection unless it exists. */
int mm_db_create_database(PGconn *admin, const char *name, mm_error *err);

/* Listens for the change events of sql/001_init.sql (channel mmh3_events);
 * they arrive through PQnotifies(). */
int mm_db_listen_events(PGconn *c, mm_error *err);

#endif
