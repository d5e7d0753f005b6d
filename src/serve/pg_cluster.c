#include "serve/pg_cluster.h"

#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "store/db.h"
#include "core/log.h"
#include "serve/proc.h"

static int make_dir(const char *path, mode_t mode, const mm_pg_cluster *c, mm_error *err)
{
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return mm_fail_errno(err, "creating %s", path);
    if (c->as_user && chown(path, c->uid, c->gid) < 0)
        return mm_fail_errno(err, "giving %s to uid %d", path, (int)c->uid);
    if (chmod(path, mode) < 0)
        return mm_fail_errno(err, "chmod %s", path);
    return 0;
}

/* As root, the account the server runs as: its own, never one that other
 * processes share (nginx's workers run as nobody; anything running as the
 * server's account can read every table, the token hashes included). The
 * default `mmh3` is created as a system account when missing. */
static int pg_account(const char *user, const char *log_path, struct passwd **out, mm_error *err)
{
    const char *name = user && *user ? user : "mmh3";
    if (strcmp(name, "nobody") == 0 || strcmp(name, "root") == 0)
        return mm_fail(err, "MMH3_PG_USER=%s: PostgreSQL needs an account of its own (%s is shared with other "
                            "processes, nginx's workers among them); accepted: a dedicated user, default mmh3",
                       name, name);
    struct passwd *pw = getpwnam(name);
    if (!pw && user && *user)
        return mm_fail(err, "MMH3_PG_USER=%s: no such user", name);
    if (!pw) {
        mm_log("creating the system account 'mmh3' for PostgreSQL (it runs as its own user, not as root or nobody)");
        char *argv[] = {"/usr/sbin/useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                        "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment", "mmh3 database", "mmh3", NULL};
        mm_proc_spec spec = {.name = "useradd", .argv = argv, .log_path = log_path};
        if (mm_proc_run(&spec, err) < 0 || !(pw = getpwnam("mmh3")))
            return mm_fail(err, "running as root, PostgreSQL needs an account of its own and 'mmh3' could not be "
                                "created (see %s); create it with: useradd --system --user-group mmh3",
                           log_path);
    }
    *out = pw;
    return 0;
}

/* Hands an existing cluster to the server's account (one made before it had
 * its own, as nobody): PostgreSQL refuses a data folder it does not own. */
static uid_t chown_uid;
static gid_t chown_gid;
static int chown_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return lchown(path, chown_uid, chown_gid) < 0 ? -1 : 0;
}

static int own_data_dir(const mm_pg_cluster *c, mm_error *err)
{
    struct stat st;
    if (stat(c->data_dir, &st) < 0 || st.st_uid == c->uid)
        return 0;
    mm_log("giving %s (owned by uid %d) to uid %d, the database's account", c->data_dir, (int)st.st_uid, (int)c->uid);
    chown_uid = c->uid, chown_gid = c->gid;
    if (nftw(c->data_dir, chown_one, 32, FTW_PHYS) < 0)
        return mm_fail_errno(err, "giving %s to uid %d", c->data_dir, (int)c->uid);
    return 0;
}

/* Local connections authenticate: peer, mapped to the database role mmh3
 * for the server's account and the user who runs mmh3 serve (root, or
 * yourself) and nobody else. Written at every start, so a cluster made with
 * the old trust rule gets this one. */
static int write_auth_files(const mm_pg_cluster *c, mm_error *err)
{
    struct passwd *server = getpwuid(c->uid), *serving = getpwuid(geteuid());
    if (!server || !serving)
        return mm_fail(err, "cannot name the database's users (uid %d, uid %d)", (int)c->uid, (int)geteuid());
    char server_name[256], serving_name[256];
    snprintf(server_name, sizeof server_name, "%s", server->pw_name);
    snprintf(serving_name, sizeof serving_name, "%s", serving->pw_name);
    char path[PATH_MAX + 32];
    const char *files[][2] = {
        {"pg_hba.conf", "# Written by mmh3 serve at every start (src/serve/pg_cluster.c).\n"
                        "local all all peer map=mmh3\n"},
        {"pg_ident.conf", NULL},
    };
    char ident[800];
    snprintf(ident, sizeof ident,
             "# Written by mmh3 serve at every start: who may log in as the role mmh3.\n"
             "mmh3 %s mmh3\n%s%s%s", server_name, strcmp(server_name, serving_name) ? "mmh3 " : "",
             strcmp(server_name, serving_name) ? serving_name : "", strcmp(server_name, serving_name) ? " mmh3\n" : "");
    files[1][1] = ident;
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", c->data_dir, files[i][0]);
        FILE *f = fopen(path, "w");
        if (!f || fputs(files[i][1], f) < 0 || fclose(f) != 0) {
            if (f)
                fclose(f);
            return mm_fail_errno(err, "writing %s", path);
        }
        if (chmod(path, 0600) < 0 || (c->as_user && chown(path, c->uid, c->gid) < 0))
            return mm_fail_errno(err, "giving %s to uid %d", path, (int)c->uid);
    }
    return 0;
}

int mm_pg_prepare(mm_pg_cluster *c, const char *state_dir, const char *log_dir, const char *bindir, const char *user,
                  mm_error *err)
{
    memset(c, 0, sizeof *c);
    snprintf(c->bindir, sizeof c->bindir, "%s", bindir);
    snprintf(c->data_dir, sizeof c->data_dir, "%s/pgdata", state_dir);
    snprintf(c->socket_dir, sizeof c->socket_dir, "%s/pg.sock", state_dir);
    snprintf(c->log_path, sizeof c->log_path, "%s/postgres.log", log_dir);
    if (geteuid() == 0) {
        struct passwd *pw = NULL;
        if (pg_account(user, c->log_path, &pw, err) < 0)
            return -1;
        c->uid = pw->pw_uid;
        c->gid = pw->pw_gid;
        c->as_user = true;
    } else {
        c->uid = geteuid();
        c->gid = getegid();
    }
    /* The socket path ("<dir>/.s.PGSQL.5432") must fit a sockaddr_un. */
    struct sockaddr_un sun;
    if (strlen(c->socket_dir) + 16 >= sizeof sun.sun_path) {
        snprintf(c->socket_dir, sizeof c->socket_dir, "/tmp/mmh3-pg-%d-%ld", (int)c->uid, (long)time(NULL));
        mm_log("the outputs path is too long for a unix socket; PostgreSQL's socket goes to %s", c->socket_dir);
    }
    if (make_dir(c->data_dir, 0700, c, err) < 0 || make_dir(c->socket_dir, 0700, c, err) < 0)
        return -1;
    if (c->as_user && (mm_path_make_reachable(c->data_dir, c->uid, c->gid, err) < 0 ||
                       mm_path_make_reachable(c->socket_dir, c->uid, c->gid, err) < 0))
        return -1;
    snprintf(c->url, sizeof c->url, "host=%s port=5432 dbname=mmh3 user=mmh3", c->socket_dir);

    char version[PATH_MAX + 16];
    snprintf(version, sizeof version, "%s/PG_VERSION", c->data_dir);
    if (access(version, F_OK) == 0)
        return c->as_user && own_data_dir(c, err) < 0 ? -1 : write_auth_files(c, err);
    mm_log("creating the PostgreSQL cluster in %s", c->data_dir);
    char initdb[PATH_MAX + 16];
    snprintf(initdb, sizeof initdb, "%s/initdb", c->bindir);
    char *argv[] = {initdb, "-D", c->data_dir, "-U", "mmh3", "--auth-local=peer", "--auth-host=reject", "-E", "UTF8",
                    "--locale=C.UTF-8", "--no-instructions", NULL};
    mm_proc_spec spec = {.name = "initdb", .argv = argv, .log_path = c->log_path, .uid = c->uid, .gid = c->gid,
                         .as_user = c->as_user};
    if (mm_proc_run(&spec, err) < 0)
        return mm_error_prefix(err, "creating the database cluster");
    return write_auth_files(c, err);
}

int mm_pg_start(mm_pg_cluster *c, mm_error *err)
{
    char postgres[PATH_MAX + 16];
    snprintf(postgres, sizeof postgres, "%s/postgres", c->bindir);
    char *argv[] = {postgres, "-D", c->data_dir, "-k", c->socket_dir, "-c", "listen_addresses=", "-c", "port=5432",
                    "-c", "max_connections=300", "-c", "unix_socket_permissions=0700", NULL};
    /* A postgres left running on this folder would answer our pings while
     * ours fails on its lock file: refuse plainly instead. */
    char pidfile[PATH_MAX + 32];
    snprintf(pidfile, sizeof pidfile, "%s/postmaster.pid", c->data_dir);
    FILE *pf = fopen(pidfile, "r");
    if (pf) {
        long other = 0;
        if (fscanf(pf, "%ld", &other) == 1 && other > 0 && kill((pid_t)other, 0) == 0) {
            char exe[64], target[PATH_MAX];
            snprintf(exe, sizeof exe, "/proc/%ld/exe", other);
            ssize_t k = readlink(exe, target, sizeof target - 1);
            target[k > 0 ? k : 0] = '\0';
            if (k <= 0 || strstr(target, "postgres")) {
                fclose(pf);
                return mm_fail(err, "a PostgreSQL server (pid %ld) is already running on %s; is another mmh3 serve "
                                    "using this outputs folder?", other, c->data_dir);
            }
        }
        fclose(pf);
    }
    mm_proc_spec spec = {.name = "postgres", .argv = argv, .log_path = c->log_path, .uid = c->uid, .gid = c->gid,
                         .as_user = c->as_user, .death_signal = SIGINT};
    if (mm_proc_start(&spec, &c->pid, err) < 0)
        return -1;
    char admin[PATH_MAX + 64];
    snprintf(admin, sizeof admin, "host=%s port=5432 dbname=postgres user=mmh3", c->socket_dir);
    for (int i = 0;; i++) {
        if (PQping(admin) == PQPING_OK)
            break;
        int status;
        if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
            char how[128];
            mm_proc_describe(status, how, sizeof how);
            c->pid = 0;
            return mm_fail(err, "PostgreSQL %s while starting; see %s", how, c->log_path);
        }
        if (i > 600) {
            mm_pg_stop(c);
            return mm_fail(err, "PostgreSQL did not accept connections within 60 s; see %s", c->log_path);
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    PGconn *db;
    if (mm_db_connect(admin, "mmh3-serve", &db, err) < 0)
        return -1;
    int rc = mm_db_create_database(db, "mmh3", err);
    PQfinish(db);
    return rc;
}

void mm_pg_stop(mm_pg_cluster *c)
{
    if (c->pid > 0)
        mm_proc_stop(c->pid, SIGINT, 20);
    c->pid = 0;
}
