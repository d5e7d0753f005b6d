/* The private PostgreSQL cluster of `mmh3 serve`: a data folder under the
 * outputs folder, reachable only through a unix socket in a private folder
 * (no TCP), created with initdb on first use. When serve runs as root, the
 * server runs as an account of its own, `mmh3` (created as a system account
 * when missing; never nobody, whose processes include nginx's workers),
 * since PostgreSQL refuses to run as root. Local logins authenticate: peer,
 * for the server's account and the user running mmh3 serve. */
#ifndef MMH3_SERVE_PG_CLUSTER_H
#define MMH3_SERVE_PG_CLUSTER_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/error.h"

typedef struct mm_pg_cluster {
    char bindir[PATH_MAX];     /* initdb, postgres */
    char data_dir[PATH_MAX];
    char socket_dir[PATH_MAX];
    char log_path[PATH_MAX];
    char url[PATH_MAX + 64];   /* libpq conninfo for the mmh3 database */
    uid_t uid;
    gid_t gid;
    bool as_user;
    pid_t pid;
} mm_pg_cluster;

/* Lays out <state_dir>/{pgdata,pg.sock/,}, runs initdb when needed and
 * writes the login rules (pg_hba.conf, pg_ident.conf). As root, the server
 * runs as `user` (NULL or "": mmh3, created when missing). */
int mm_pg_prepare(mm_pg_cluster *c, const char *state_dir, const char *log_dir, const char *bindir, const char *user,
                  mm_error *err);
/* Starts the server, waits until it accepts connections, creates the database. */
int mm_pg_start(mm_pg_cluster *c, mm_error *err);
/* Fast shutdown (SIGINT), SIGKILL after 20 s. */
void mm_pg_stop(mm_pg_cluster *c);

#endif
