#include "store/db.h"
#include "store/sql.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mm_db_url(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *env = getenv("MMH3_DATABASE_URL");
    return env && *env ? env : MM_DB_DEFAULT_URL;
}

static void ignore_notice(void *arg, const char *message)
{
    (void)arg, (void)message;
}

/* libpq messages span lines ("...\n\tIs the server running..."): one log line each. */
static void trim_newline(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = '\0';
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r == '\n' || *r == '\r' || *r == '\t') {
            if (w > s && w[-1] != ' ')
                *w++ = ' ';
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
}

int mm_db_connect(const char *url, const char *app_name, PGconn **out, mm_error *err)
{
    /* expand_dbname=1: the "dbname" value may itself be a URL or conninfo
     * string, and the keywords after it override what it says. */
    const char *keys[] = {"dbname", "application_name", "keepalives", "keepalives_idle", "keepalives_interval",
                          "keepalives_count", "connect_timeout", NULL};
    const char *vals[] = {url, app_name, "1", "30", "10", "3", "10", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c)
        return mm_fail(err, "database: out of memory");
    if (PQstatus(c) != CONNECTION_OK) {
        char msg[MM_ERROR_MAX / 2];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        trim_newline(msg);
        PQfinish(c);
        *out = NULL;
        return mm_fail(err, "cannot connect to the database (%s): %s", url, msg);
    }
    /* Keep notices (e.g. "extension already exists") off stderr. */
    PQsetNoticeProcessor(c, ignore_notice, NULL);
    *out = c;
    return 0;
}

/* A statement's result, kept in *out when out is set (else cleared); a
 * failed one is cleared and named in err. */
static int take_result(PGconn *c, PGresult *r, PGresult **out, mm_error *err)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        char msg[MM_ERROR_MAX / 2];
        snprintf(msg, sizeof msg, "%s", r ? PQresultErrorMessage(r) : PQerrorMessage(c));
        trim_newline(msg);
        PQclear(r);
        return mm_fail(err, "database: %s", msg);
    }
    if (out)
        *out = r;
    else
        PQclear(r);
    return 0;
}

int mm_db_query(PGconn *c, const char *sql, int n, const char *const *params, PGresult **out, mm_error *err)
{
    if (out)
        *out = NULL;
    return take_result(c, PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0), out, err);
}

int mm_db_exec(PGconn *c, const char *sql, mm_error *err) { return take_result(c, PQexec(c, sql), NULL, err); }

int mm_db_ensure(PGconn *c, mm_error *err)
{
    /* libpq notices a server that went away only when it next reads: after a
     * PostgreSQL restart the first query on an idle connection would fail.
     * So read what is pending now (non-blocking; notifications stay buffered
     * for PQnotifies). A backend orphaned by its postmaster's death first sends
     * its FATAL message and then closes: the first read takes the message, a
     * second one sees the end of the stream — hence more than one read. */
    for (int i = 0; i < 3 && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE; i++)
        if (!PQconsumeInput(c))
            break;
    if (PQstatus(c) == CONNECTION_OK)
        return 0;
    PQreset(c);
    if (PQstatus(c) == CONNECTION_OK)
        return 0;
    char msg[MM_ERROR_MAX / 2];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
    trim_newline(msg);
    return mm_fail(err, "database connection lost and not back yet: %s", msg);
}

int mm_db_begin(PGconn *c, mm_error *err)
{
    return mm_db_exec(c, "BEGIN", err);
}

int mm_db_commit(PGconn *c, mm_error *err)
{
    if (mm_db_exec(c, "COMMIT", err) == 0)
        return 0;
    mm_db_rollback(c);
    return -1;
}

void mm_db_rollback(PGconn *c)
{
    PQclear(PQexec(c, "ROLLBACK"));
}

int mm_db_listen_events(PGconn *c, mm_error *err)
{
    return mm_db_exec(c, "LISTEN mmh3_events", err);
}

mm_db_num mm_db_int(long long v)
{
    mm_db_num n;
    snprintf(n.s, sizeof n.s, "%lld", v);
    return n;
}

int mm_db_create_database(PGconn *admin, const char *name, mm_error *err)
{
    const char *p[] = {name};
    PGresult *r;
    if (mm_db_query(admin, "SELECT 1 FROM pg_database WHERE datname = $1", 1, p, &r, err) < 0)
        return -1;
    bool exists = PQntuples(r) > 0;
    PQclear(r);
    if (exists)
        return 0;
    char *ident = PQescapeIdentifier(admin, name, strlen(name));
    if (!ident)
        return mm_fail(err, "database name '%s': %s", name, PQerrorMessage(admin));
    char sql[256];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", ident);
    PQfreemem(ident);
    return mm_db_exec(admin, sql, err);
}
