/* mmh3-fcgi: the HTTP API as a FastCGI program behind nginx.
 *
 * One process, a pool of request threads (each with its own PostgreSQL
 * connection) sharing one listening socket, plus the SSE hub thread. nginx
 * opens one FastCGI connection per request, so the pool size bounds the
 * concurrent API calls; SSE streams do not count against it (the hub holds
 * them). Started by `mmh3 serve` or mmh3-fcgi.service.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "auth/tokens.h"
#include "core/log.h"
#include "fcgi/app.h"
#include "media/probe.h"
#include "store/db.h"
#include "store/migrate.h"

static pthread_mutex_t accept_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool shutting_down;
static int listen_fd;
static mm_app app;

static void *request_thread(void *arg)
{
    (void)arg;
    PGconn *db = NULL;
    FCGX_Request *req = malloc(sizeof *req);
    if (!req || FCGX_InitRequest(req, listen_fd, 0) != 0) {
        mm_log("cannot set up a request");
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&accept_mu);
        int rc = FCGX_Accept_r(req);
        pthread_mutex_unlock(&accept_mu);
        if (rc < 0) {
            if (atomic_load(&shutting_down))
                break;
            /* E.g. EMFILE under a crowd of clients: wait and take the next one. */
            mm_log("accept: %s (retrying)", strerror(rc == -9999 ? EIO : -rc));
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        const char *uri = FCGX_GetParam("DOCUMENT_URI", req->envp);
        const char *query = FCGX_GetParam("QUERY_STRING", req->envp);
        const char *method = FCGX_GetParam("REQUEST_METHOD", req->envp);
        char path[2048];
        if (!uri || !*uri) {
            /* Without nginx's fastcgi_params: take REQUEST_URI up to '?'. */
            const char *ru = FCGX_GetParam("REQUEST_URI", req->envp);
            snprintf(path, sizeof path, "%.*s", ru ? (int)strcspn(ru, "?") : 1, ru ? ru : "/");
        } else {
            snprintf(path, sizeof path, "%s", uri);
        }
        mm_req r = {
            .app = &app,
            .fcgx = req,
            .db_slot = &db,
            .method = method ? method : "GET",
            .path = path,
            .query = query ? query : "",
        };
        mm_route(&r);
        if (!r.responded && !r.handed_off)
            mm_reply_error(&r, 500, NULL, NULL, "the handler gave no answer");
        if (r.handed_off) {
            /* The SSE hub owns that request now; take a fresh one. */
            req = malloc(sizeof *req);
            if (!req || FCGX_InitRequest(req, listen_fd, 0) != 0) {
                mm_log("out of memory for a request");
                break;
            }
        } else {
            FCGX_Finish_r(req);
        }
    }
    if (db)
        PQfinish(db);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3-fcgi [options]\n"
            "\n"
            "The mmh3 HTTP API (FastCGI). nginx passes /api/ and /docs to it.\n"
            "\n"
            "  --listen ADDR       unix socket path, or host:port (default: the inherited socket, fd 0)\n"
            "  --threads N         request threads (default 16)\n"
            "  --db URL            database; default $MMH3_DATABASE_URL, else \"%s\"\n"
            "  --outputs DIR       outputs folder (default $MMH3_OUTPUTS, else ./outputs)\n"
            "  --lease S           worker heartbeat age that counts as offline (default 30)\n"
            "  --max-upload-mb N   POST /api/images body limit (default 200)\n"
            "\n"
            "Request safety (docs/SECURITY.md):\n"
            "  --auth on|off       require an access token (default on, or $MMH3_AUTH); `mmh3 serve` turns it\n"
            "                      off only when nginx listens on loopback\n"
            "  --allow-host NAMES  host names the server answers to besides localhost and this host's name\n"
            "                      (comma-separated, repeatable, or $MMH3_ALLOWED_HOSTS; '*' = any)\n"
            "  --cookie-secure     mark the login cookie Secure (TLS in front of nginx)\n"
            "  --rate-enqueue N    enqueue requests per minute per token (default 60; 0 = no limit)\n"
            "  --rate-upload N     upload requests per minute per token (default 120; 0 = no limit)\n"
            "  --rate-rewrite N    prompt rewrites (Oxen credits) per minute per token (default 30; 0 = no limit)\n"
            "  --max-queued N      queued generations beyond which enqueue answers 429 (default 1000; 0 = none)\n",
            MM_DB_DEFAULT_URL);
}

/* Adds the names of a comma/space-separated list to the Host allowlist. */
static void allow_hosts(const char *list)
{
    char *copy = strdup(list ? list : ""), *save = NULL;
    for (char *t = strtok_r(copy, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
        if (strcmp(t, "*") == 0) {
            app.any_host = true;
            continue;
        }
        for (char *c = t; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        char **grown = realloc(app.hosts, (size_t)(app.n_hosts + 1) * sizeof *grown);
        if (!grown)
            break;
        app.hosts = grown;
        app.hosts[app.n_hosts++] = strdup(t);
    }
    free(copy);
}

static bool parse_count(const char *flag, const char *text, double max, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (*end || !(v >= 0) || v > max) {
        fprintf(stderr, "mmh3-fcgi: %s %s: accepted: 0..%g\n", flag, text, max);
        return false;
    }
    *out = v;
    return true;
}

/* Spool files of uploads cut short (the process was killed mid-request):
 * hidden, never served, removed once clearly abandoned. */
static void sweep_upload_leftovers(const char *uploads)
{
    DIR *d = opendir(uploads);
    if (!d)
        return;
    struct dirent *e;
    time_t now = time(NULL);
    int removed = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".body-", 6) != 0 && strncmp(e->d_name, ".incoming-", 10) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime > 600 &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    if (removed)
        mm_log("removed %d abandoned upload spool file(s)", removed);
}

/* ---------------------------------------------------------------- steps of main */

static const char *nonempty(const char *s)
{
    return s && *s ? s : NULL;
}

typedef struct fcgi_config {
    const char *listen_addr; /* NULL: the inherited socket, fd 0 */
    const char *db;          /* --db, or NULL */
    const char *outputs;
    int threads;
    bool help; /* --help was printed */
} fcgi_config;

/* The environment's defaults, then the flags. 0 to go on (unless cfg->help),
 * else the exit status. */
static int read_config(int argc, char **argv, fcgi_config *cfg)
{
    *cfg = (fcgi_config){.outputs = getenv("MMH3_OUTPUTS"), .threads = 16};
    app.lease_seconds = 30;
    app.max_upload_bytes = 200u << 20;
    const char *auth = getenv("MMH3_AUTH");
    app.auth_required = !(auth && strcmp(auth, "off") == 0);
    app.rate_enqueue = 60;
    app.rate_upload = 120;
    app.rate_rewrite = 30;
    double max_queued = 1000;
    allow_hosts(getenv("MMH3_ALLOWED_HOSTS"));
    app.oxen_token = nonempty(getenv("MMH3_OXEN_TOKEN"));
    app.oxen_remote = nonempty(getenv("MMH3_OXEN_REMOTE"));
    enum {
        O_LISTEN = 256, O_THREADS, O_DB, O_OUTPUTS, O_LEASE, O_UPLOAD, O_AUTH, O_ALLOW_HOST, O_COOKIE_SECURE,
        O_RATE_ENQUEUE, O_RATE_UPLOAD, O_RATE_REWRITE, O_MAX_QUEUED
    };
    static const struct option opts[] = {
        {"listen", required_argument, 0, O_LISTEN}, {"threads", required_argument, 0, O_THREADS},
        {"db", required_argument, 0, O_DB},         {"outputs", required_argument, 0, O_OUTPUTS},
        {"lease", required_argument, 0, O_LEASE},   {"max-upload-mb", required_argument, 0, O_UPLOAD},
        {"auth", required_argument, 0, O_AUTH},     {"allow-host", required_argument, 0, O_ALLOW_HOST},
        {"cookie-secure", no_argument, 0, O_COOKIE_SECURE},
        {"rate-enqueue", required_argument, 0, O_RATE_ENQUEUE},
        {"rate-upload", required_argument, 0, O_RATE_UPLOAD},
        {"rate-rewrite", required_argument, 0, O_RATE_REWRITE},
        {"max-queued", required_argument, 0, O_MAX_QUEUED},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0},
    };
    int c;
    double mb;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_LISTEN: cfg->listen_addr = optarg; break;
        case O_THREADS:
            cfg->threads = atoi(optarg);
            if (cfg->threads < 1 || cfg->threads > 1024) {
                fprintf(stderr, "mmh3-fcgi: --threads %s: accepted: 1..1024\n", optarg);
                return 2;
            }
            break;
        case O_DB: cfg->db = optarg; break;
        case O_OUTPUTS: cfg->outputs = optarg; break;
        /* atof/atol took "abc" as 0 and "-1" MiB as a near-infinite upload limit. */
        case O_LEASE:
            if (!parse_count("--lease", optarg, 86400, &app.lease_seconds))
                return 2;
            break;
        case O_UPLOAD:
            if (!parse_count("--max-upload-mb", optarg, 1 << 20, &mb))
                return 2;
            app.max_upload_bytes = (size_t)mb << 20;
            break;
        case O_AUTH:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "mmh3-fcgi: --auth %s: accepted: on, off\n", optarg);
                return 2;
            }
            app.auth_required = strcmp(optarg, "on") == 0;
            break;
        case O_ALLOW_HOST: allow_hosts(optarg); break;
        case O_COOKIE_SECURE: app.cookie_secure = true; break;
        case O_RATE_ENQUEUE:
            if (!parse_count("--rate-enqueue", optarg, 1e6, &app.rate_enqueue))
                return 2;
            break;
        case O_RATE_UPLOAD:
            if (!parse_count("--rate-upload", optarg, 1e6, &app.rate_upload))
                return 2;
            break;
        case O_RATE_REWRITE:
            if (!parse_count("--rate-rewrite", optarg, 1e6, &app.rate_rewrite))
                return 2;
            break;
        case O_MAX_QUEUED:
            if (!parse_count("--max-queued", optarg, 1e12, &max_queued))
                return 2;
            break;
        case 'h': usage(stdout); cfg->help = true; return 0;
        default: usage(stderr); return 2;
        }
    }
    app.max_queued = (long)max_queued;
    return 0;
}

/* The names this machine answers to, besides IP addresses and --allow-host. */
static void allow_own_names(void)
{
    char self[256] = "";
    allow_hosts("localhost");
    if (gethostname(self, sizeof self - 8) == 0 && self[0]) {
        self[sizeof self - 8] = '\0';
        allow_hosts(self);
        if (!strchr(self, '.')) {
            strcat(self, ".local");
            allow_hosts(self);
        }
    }
}

/* The outputs folder (resolved) and its uploads folder, swept of abandoned spool files. */
static int open_outputs(const fcgi_config *cfg)
{
    static char outputs_abs[PATH_MAX];
    const char *outputs = cfg->outputs ? cfg->outputs : "outputs";
    mkdir(outputs, 0755);
    if (!realpath(outputs, outputs_abs)) {
        mm_log("outputs folder %s: cannot resolve it", outputs);
        return -1;
    }
    app.outputs = outputs_abs;
    char uploads[PATH_MAX + 16];
    snprintf(uploads, sizeof uploads, "%s/uploads", outputs_abs);
    mkdir(uploads, 0755);
    sweep_upload_leftovers(uploads);
    return 0;
}

/* Brings the schema up to date (a no-op when the worker or serve did) and
 * says so when nobody could use the API. The pool's threads connect on their own. */
static int prepare_database(void)
{
    mm_error err = {{0}};
    PGconn *conn;
    for (int tries = 0;; tries++) {
        if (mm_db_connect(app.db_url, "mmh3-fcgi", &conn, &err) == 0)
            break;
        if (tries == 0)
            mm_log("%s (retrying)", err.msg);
        if (tries > 60) {
            mm_log("giving up: %s", err.msg);
            return -1;
        }
        sleep(1);
    }
    if (mm_db_migrate(conn, NULL, &err) < 0) {
        mm_log("%s", err.msg);
        PQfinish(conn);
        return -1;
    }
    long tokens_total = 0, tokens_active = 0;
    if (app.auth_required && mm_token_count(conn, &tokens_total, &tokens_active, &err) == 0 && tokens_active == 0)
        mm_log("access tokens are required and none is active: nobody can use the API until one is made "
               "(mmh3 token create NAME)");
    PQfinish(conn);
    return 0;
}

/* "unix:/path" or "/path" -> the path; host:port -> NULL. */
static const char *socket_path(const char *listen_addr)
{
    const char *a = strncmp(listen_addr, "unix:", 5) == 0 ? listen_addr + 5 : listen_addr;
    return strchr(a, ':') ? NULL : a;
}

static int open_socket(const fcgi_config *cfg)
{
    if (FCGX_Init() != 0) {
        mm_log("FCGX_Init failed");
        return -1;
    }
    listen_fd = 0;
    if (!cfg->listen_addr)
        return 0;
    const char *a = strncmp(cfg->listen_addr, "unix:", 5) == 0 ? cfg->listen_addr + 5 : cfg->listen_addr;
    const char *path = socket_path(cfg->listen_addr);
    if (path)
        unlink(path); /* a stale socket from an earlier run */
    listen_fd = FCGX_OpenSocket(a, 256);
    if (listen_fd < 0) {
        mm_log("cannot listen on %s", cfg->listen_addr);
        return -1;
    }
    if (path)
        chmod(path, 0666); /* nginx's workers may run as another user */
    return 0;
}

static int start_sse_hub(void)
{
    mm_error err = {{0}};
    app.hub = mm_sse_hub_start(&app, &err);
    if (!app.hub) {
        mm_log("%s", err.msg);
        return -1;
    }
    return 0;
}

/* The request threads, sharing the socket. */
static int open_pool(const fcgi_config *cfg)
{
    for (int i = 0; i < cfg->threads; i++) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, request_thread, NULL) != 0) {
            mm_log("cannot start request thread %d", i);
            return -1;
        }
        pthread_detach(tid);
    }
    mm_log("listening on %s with %d threads (outputs %s; access tokens %s)",
           cfg->listen_addr ? cfg->listen_addr : "fd 0", cfg->threads, app.outputs,
           app.auth_required ? "required" : "not required");
    return 0;
}

/* Requests in flight are cut; their transactions roll back. The request
 * threads are parked in accept() holding their requests and connections:
 * ending the process is their shutdown (hence _exit, which also keeps
 * LeakSanitizer from listing that state as leaks). */
static _Noreturn void shut_down(const fcgi_config *cfg, int sig)
{
    mm_log("stopping (signal %d)", sig);
    atomic_store(&shutting_down, true);
    FCGX_ShutdownPending();
    shutdown(listen_fd, SHUT_RDWR);
    const char *path = cfg->listen_addr ? socket_path(cfg->listen_addr) : NULL;
    if (path)
        unlink(path);
    _exit(0);
}

int main(int argc, char **argv)
{
    fcgi_config cfg;
    int rc = read_config(argc, argv, &cfg);
    if (rc || cfg.help)
        return rc;
    allow_own_names();
    mm_log_init("fcgi");
    mm_media_set_verbose(0);
    app.db_url = mm_db_url(cfg.db);
    if (open_outputs(&cfg) < 0 || prepare_database() < 0)
        return 1;

    signal(SIGPIPE, SIG_IGN);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL); /* threads inherit; main waits below */
    if (open_socket(&cfg) < 0 || start_sse_hub() < 0 || open_pool(&cfg) < 0)
        return 1;
    int sig = 0;
    sigwait(&stop, &sig); /* the pool serves until a stop signal */
    shut_down(&cfg, sig);
}
