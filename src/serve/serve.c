#include "config.h"

#include "serve/serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth/tokens.h"
#include "store/db.h"
#include "core/log.h"
#include "store/migrate.h"
#include "serve/pg_cluster.h"
#include "serve/proc.h"

/* nginx/mmh3.conf.in and nginx/mmh3-server.conf.in, compiled in. */
extern const char mm_nginx_template[];
extern const char mm_nginx_server_template[];

void mm_serve_options_defaults(mm_serve_options *o)
{
    memset(o, 0, sizeof *o);
    o->outputs = "outputs";
    o->listen = "127.0.0.1:8000";
    o->nginx = MMH3_NGINX;
    o->pg_bindir = MMH3_PG_BINDIR;
    o->worker = true;
    o->engine_kind = "h3";
    o->mock_seconds = 5;
    o->max_attempts = 3;
    o->lease_seconds = 30;
    o->threads = 16;
    o->upload_mb = 200;
    o->auth = "auto";
    o->rate_enqueue = 60;
    o->rate_upload = 120;
    o->max_queued = 1000;
}

bool mm_serve_listen_is_loopback(const char *listen)
{
    if (strncmp(listen, "unix:", 5) == 0)
        return true;
    char host[256];
    const char *colon = listen[0] == '[' ? strstr(listen, "]:") : strrchr(listen, ':');
    if (!colon)
        return false; /* a bare port: every interface */
    size_t n = (size_t)(colon - listen) + (listen[0] == '[');
    if (n >= sizeof host)
        return false;
    memcpy(host, listen, n);
    host[n] = '\0';
    if (strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0)
        return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* The first start of a server that needs tokens makes one and shows it (once). */
static int first_token(PGconn *db, const char *listen, bool loopback, mm_error *err)
{
    bool created = false;
    char secret[MM_TOKEN_LEN + 1];
    if (mm_token_ensure_first(db, &created, secret, err) < 0)
        return -1;
    if (created) {
        printf("\n"
               "  Access tokens are required: nginx listens on %s%s.\n"
               "  The first token, named 'default' (shown only now; `mmh3 token` makes more and revokes):\n"
               "\n"
               "      %s\n"
               "\n"
               "  Log in at http://%s/login, or send `Authorization: Bearer <token>`.\n\n",
               listen, loopback ? " (--auth on)" : ", beyond loopback", secret, listen);
        fflush(stdout);
        memset(secret, 0, sizeof secret);
        return 0;
    }
    long total = 0, active = 0;
    if (mm_token_count(db, &total, &active, err) < 0)
        return -1;
    if (active == 0)
        mm_log("access tokens are required and none is active (all %ld revoked): make one with "
               "`mmh3 token create NAME --outputs %s`", total, getenv("MMH3_OUTPUTS") ? getenv("MMH3_OUTPUTS") : "DIR");
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* out = dir + "/" + name (a function, so the compiler does not second-guess lengths). */
static void join(char *out, size_t n, const char *dir, const char *name)
{
    if (snprintf(out, n, "%s/%s", dir, name) >= (int)n)
        out[0] = '\0';
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int make_dir(const char *p, mode_t mode, mm_error *err)
{
    if (mkdir(p, mode) < 0 && errno != EEXIST)
        return mm_fail_errno(err, "creating %s", p);
    return 0;
}

/* ---------------------------------------------------------------- nginx.conf */

typedef struct subst {
    const char *key, *value;
} subst;

static char *render(const char *tpl, const subst *s, int n)
{
    size_t cap = strlen(tpl) + 1;
    for (int i = 0; i < n; i++)
        cap += 8 * (strlen(s[i].value) + 1);
    char *out = malloc(cap), *w = out;
    if (!out)
        return NULL;
    for (const char *p = tpl; *p;) {
        bool hit = false;
        if (*p == '@')
            for (int i = 0; i < n; i++) {
                size_t kl = strlen(s[i].key);
                if (strncmp(p, s[i].key, kl) == 0) {
                    size_t vl = strlen(s[i].value);
                    if ((size_t)(w - out) + vl + 1 >= cap)
                        break;
                    memcpy(w, s[i].value, vl);
                    w += vl;
                    p += kl;
                    hit = true;
                    break;
                }
            }
        if (!hit)
            *w++ = *p++;
    }
    *w = '\0';
    return out;
}

/* ---------------------------------------------------------------- children */

/* Extra workers (--gpu-workers N) follow nginx: worker i > 0 is C_FIXED + i - 1. */
#define MAX_GPU_WORKERS 16
enum { C_FCGI, C_WORKER, C_NGINX, C_FIXED, C_COUNT = C_FIXED + MAX_GPU_WORKERS - 1 };

typedef struct child {
    const char *name;
    char *argv[32 + MM_SERVE_ENGINE_ARGS];
    char log_path[PATH_MAX];
    pid_t pid;
    double started, restart_at, backoff;
    bool wanted;
} child;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void write_pid(const char *run_dir, const char *name, pid_t pid)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.pid", run_dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
}

static int start_child(child *c, const char *run_dir, mm_error *err)
{
    mm_proc_spec spec = {.name = c->name, .argv = c->argv, .log_path = c->log_path[0] ? c->log_path : NULL};
    if (mm_proc_start(&spec, &c->pid, err) < 0)
        return -1;
    c->started = now_seconds();
    write_pid(run_dir, c->name, c->pid);
    return 0;
}

/* The pid nginx wrote into its pid file (it does so after binding its sockets). */
static pid_t pid_in_file(const char *path)
{
    FILE *f = fopen(path, "r");
    long pid = 0;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

/* Waits until process `pid` has written its pid to pid_file (nginx: its
 * sockets are bound) and a TCP connect to host:port succeeds; false if the
 * process ends first. */
static bool tcp_ready(const char *listen, double seconds, pid_t pid, const char *pid_file)
{
    char host[256] = "127.0.0.1", port[16];
    const char *colon = strrchr(listen, ':');
    if (colon) {
        snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
        snprintf(port, sizeof port, "%s", colon + 1);
    } else {
        snprintf(port, sizeof port, "%s", listen);
    }
    if (!host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (host[0] == '[') { /* [::1] */
        memmove(host, host + 1, strlen(host));
        host[strcspn(host, "]")] = '\0';
    }
    double end = now_seconds() + seconds;
    while (now_seconds() < end && kill(pid, 0) == 0 && waitpid(pid, NULL, WNOHANG) == 0) {
        if (pid_in_file(pid_file) != pid) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, port, &hints, &ai) == 0) {
            for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int fd = socket(a->ai_family, a->ai_socktype, 0);
                if (fd < 0)
                    continue;
                int ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
                close(fd);
                if (ok) {
                    freeaddrinfo(ai);
                    return true;
                }
            }
            freeaddrinfo(ai);
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void self_dir(char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        snprintf(out, n, ".");
        return;
    }
    exe[k] = '\0';
    snprintf(out, n, "%s", dirname(exe));
}

int mm_serve_run(const mm_serve_options *o, mm_error *err)
{
    /* Tokens: required unless nginx answers on loopback only. */
    bool loopback = mm_serve_listen_is_loopback(o->listen);
    bool auth_required = strcmp(o->auth, "on") == 0 || (strcmp(o->auth, "auto") == 0 && !loopback);
    if (strcmp(o->auth, "off") == 0 && !loopback)
        return mm_fail(err, "--auth off: nginx would listen on %s, beyond loopback, where access tokens are "
                            "required; accepted: --auth off only with a loopback --listen (127.0.0.1:PORT, "
                            "[::1]:PORT)", o->listen);

    char outputs[PATH_MAX], state[PATH_MAX + 16], run_dir[PATH_MAX + 32], log_dir[PATH_MAX + 32];
    if (make_dir(o->outputs, 0755, err) < 0)
        return -1;
    if (!realpath(o->outputs, outputs))
        return mm_fail_errno(err, "resolving the outputs folder %s", o->outputs);
    snprintf(state, sizeof state, "%s/.mmh3", outputs);
    snprintf(run_dir, sizeof run_dir, "%s/run", state);
    snprintf(log_dir, sizeof log_dir, "%s/logs", state);
    char gen_dir[PATH_MAX + 32], up_dir[PATH_MAX + 32];
    snprintf(gen_dir, sizeof gen_dir, "%s/generations", outputs);
    snprintf(up_dir, sizeof up_dir, "%s/uploads", outputs);
    if (make_dir(state, 0755, err) < 0 || make_dir(run_dir, 0755, err) < 0 || make_dir(log_dir, 0755, err) < 0 ||
        make_dir(gen_dir, 0755, err) < 0 || make_dir(up_dir, 0755, err) < 0)
        return -1;

    /* One serve per outputs folder. */
    char lock_path[PATH_MAX + 48];
    join(lock_path, sizeof lock_path, state, "serve.lock");
    int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0)
        return mm_fail_errno(err, "opening %s", lock_path);
    if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        close(lock_fd);
        return mm_fail(err, "another mmh3 serve is running on %s (it holds %s)", outputs, lock_path);
    }

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The database. */
    mm_pg_cluster pg;
    memset(&pg, 0, sizeof pg);
    const char *db_url = o->db_url;
    if (!db_url) {
        if (mm_pg_prepare(&pg, state, log_dir, o->pg_bindir, err) < 0 || mm_pg_start(&pg, err) < 0)
            return -1;
        write_pid(run_dir, "postgres", pg.pid);
        db_url = pg.url;
        mm_log("PostgreSQL is up (private cluster %s; psql \"%s\")", pg.data_dir, pg.url);
    }
    setenv("MMH3_DATABASE_URL", db_url, 1); /* the children read it; kept off their command lines */
    setenv("MMH3_OUTPUTS", outputs, 1);
    PGconn *db;
    int applied = 0;
    if (mm_db_connect(db_url, "mmh3-serve", &db, err) < 0)
        goto fail_pg;
    if (mm_db_migrate(db, &applied, err) < 0 || (auth_required && first_token(db, o->listen, loopback, err) < 0)) {
        PQfinish(db);
        goto fail_pg;
    }
    PQfinish(db);
    if (applied)
        mm_log("database schema: applied %d migration(s)", applied);

    /* Programs and the web app. */
    char bindir[PATH_MAX], mmh3_path[PATH_MAX + 16], fcgi_path[PATH_MAX + 16], web[PATH_MAX + 32];
    self_dir(bindir, sizeof bindir);
    snprintf(mmh3_path, sizeof mmh3_path, "%s/mmh3", bindir);
    snprintf(fcgi_path, sizeof fcgi_path, "%s/mmh3-fcgi", bindir);
    if (o->web_root) {
        snprintf(web, sizeof web, "%s", o->web_root);
    } else {
        join(web, sizeof web, bindir, "web/dist");
        if (!is_dir(web))
            snprintf(web, sizeof web, "%s/web", MMH3_DATADIR);
    }
    char web_abs[PATH_MAX];
    if (!is_dir(web) || !realpath(web, web_abs)) {
        /* No built web app (no npm at build time): a page that says so. */
        join(web_abs, sizeof web_abs, state, "www");
        make_dir(web_abs, 0755, err);
        char index[PATH_MAX + 16];
        snprintf(index, sizeof index, "%s/index.html", web_abs);
        FILE *f = fopen(index, "w");
        if (f) {
            fputs("<!doctype html><meta charset=utf-8><title>mmh3</title><p>The mmh3 web app is not built "
                  "(it needs nodejs and npm at build time). The API is running: see <a href=/docs>/docs</a> and "
                  "<a href=/api/status>/api/status</a>.</p>\n",
                  f);
            fclose(f);
        }
        mm_log("no built web app found (%s); serving a placeholder page", web);
    }

    /* The FastCGI socket path must fit a sockaddr_un, like PostgreSQL's. */
    char fcgi_sock[PATH_MAX + 32], fcgi_upstream[PATH_MAX + 48];
    struct sockaddr_un sun;
    join(fcgi_sock, sizeof fcgi_sock, run_dir, "fcgi.sock");
    if (strlen(fcgi_sock) >= sizeof sun.sun_path)
        snprintf(fcgi_sock, sizeof fcgi_sock, "/tmp/mmh3-fcgi-%d.sock", (int)getpid());
    snprintf(fcgi_upstream, sizeof fcgi_upstream, "unix:%s", fcgi_sock);

    /* nginx.conf. As root, nginx's workers run as nobody and must reach the files. */
    char user_line[128] = "";
    char tmp_dir[PATH_MAX + 48];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/nginx-tmp", run_dir);
    make_dir(tmp_dir, 0755, err);
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        struct group *gr = getgrnam("nogroup");
        if (!gr)
            gr = getgrnam("nobody");
        if (pw && gr) {
            snprintf(user_line, sizeof user_line, "user %s %s;", pw->pw_name, gr->gr_name);
            if (chown(tmp_dir, pw->pw_uid, gr->gr_gid) < 0)
                mm_log("cannot give %s to nobody: %s", tmp_dir, strerror(errno));
            mm_path_make_reachable(gen_dir, pw->pw_uid, gr->gr_gid, err);
            mm_path_make_reachable(up_dir, pw->pw_uid, gr->gr_gid, err);
            char index[PATH_MAX + 16];
            snprintf(index, sizeof index, "%s/index.html", web_abs);
            mm_path_make_reachable(index, pw->pw_uid, gr->gr_gid, err);
        }
    }
    char upload_max[32];
    snprintf(upload_max, sizeof upload_max, "%dm", o->upload_mb + 1);
    subst server_subs[] = {
        {"@LISTEN@", o->listen},   {"@SERVER_NAME@", "_"},         {"@FCGI@", fcgi_upstream},
        {"@WEB_ROOT@", web_abs},   {"@OUTPUTS@", outputs},         {"@UPLOAD_MAX@", upload_max},
    };
    char *server = render(mm_nginx_server_template, server_subs, (int)(sizeof server_subs / sizeof server_subs[0]));
    subst subs[] = {
        {"@USER_LINE@", user_line}, {"@RUN_DIR@", run_dir}, {"@LOG_DIR@", log_dir}, {"@SERVER@", server ? server : ""},
    };
    char *conf = server ? render(mm_nginx_template, subs, (int)(sizeof subs / sizeof subs[0])) : NULL;
    free(server);
    char conf_path[PATH_MAX + 48];
    snprintf(conf_path, sizeof conf_path, "%s/nginx.conf", run_dir);
    FILE *f = conf ? fopen(conf_path, "w") : NULL;
    if (!f || fputs(conf, f) < 0 || fclose(f) != 0) {
        free(conf);
        mm_fail_errno(err, "writing %s", conf_path);
        goto fail_pg;
    }
    free(conf);

    /* The children. */
    child kids[C_COUNT];
    memset(kids, 0, sizeof kids);
    char threads[16], lease[32], attempts[16], mock_seconds[32], upload_mb[16];
    char rate_enqueue[32], rate_upload[32], max_queued[32];
    snprintf(rate_enqueue, sizeof rate_enqueue, "%g", o->rate_enqueue);
    snprintf(rate_upload, sizeof rate_upload, "%g", o->rate_upload);
    snprintf(max_queued, sizeof max_queued, "%.0f", o->max_queued);
    snprintf(threads, sizeof threads, "%d", o->threads);
    snprintf(lease, sizeof lease, "%g", o->lease_seconds);
    snprintf(attempts, sizeof attempts, "%d", o->max_attempts);
    snprintf(mock_seconds, sizeof mock_seconds, "%g", o->mock_seconds);
    snprintf(upload_mb, sizeof upload_mb, "%d", o->upload_mb);

    child *k = &kids[C_FCGI];
    k->name = "fcgi";
    k->wanted = true;
    int a = 0;
    k->argv[a++] = fcgi_path;
    k->argv[a++] = "--listen";
    k->argv[a++] = fcgi_sock;
    k->argv[a++] = "--threads";
    k->argv[a++] = threads;
    k->argv[a++] = "--outputs";
    k->argv[a++] = outputs;
    k->argv[a++] = "--lease";
    k->argv[a++] = lease;
    k->argv[a++] = "--max-upload-mb";
    k->argv[a++] = upload_mb;
    k->argv[a++] = "--auth";
    k->argv[a++] = auth_required ? "on" : "off";
    k->argv[a++] = "--rate-enqueue";
    k->argv[a++] = rate_enqueue;
    k->argv[a++] = "--rate-upload";
    k->argv[a++] = rate_upload;
    k->argv[a++] = "--max-queued";
    k->argv[a++] = max_queued;
    if (o->allow_hosts) {
        k->argv[a++] = "--allow-host";
        k->argv[a++] = (char *)o->allow_hosts;
    }
    if (o->cookie_secure)
        k->argv[a++] = "--cookie-secure";
    k->argv[a] = NULL;

    k = &kids[C_WORKER];
    k->name = "worker";
    k->wanted = o->worker;
    a = 0;
    k->argv[a++] = mmh3_path;
    k->argv[a++] = "worker";
    k->argv[a++] = "--outputs";
    k->argv[a++] = outputs;
    k->argv[a++] = "--lease";
    k->argv[a++] = lease;
    k->argv[a++] = "--max-attempts";
    k->argv[a++] = attempts;
    if (strcmp(o->engine_kind, "mock") == 0) {
        k->argv[a++] = "--mock";
        k->argv[a++] = "--mock-seconds";
        k->argv[a++] = mock_seconds;
    }
    for (int i = 0; i < o->n_engine_args && i < MM_SERVE_ENGINE_ARGS; i++)
        k->argv[a++] = (char *)o->engine_args[i];
    /* Several GPUs: each worker gets its own GPU (or group of GPUs). */
    const int n_workers = o->gpu_workers > 1 ? o->gpu_workers : 1, per = o->gpus > 1 ? o->gpus : 1;
    char gpus_arg[16], worker_names[MAX_GPU_WORKERS][16], worker_devs[MAX_GPU_WORKERS][24];
    snprintf(gpus_arg, sizeof gpus_arg, "%d", per);
    if (per > 1) {
        k->argv[a++] = "--gpus";
        k->argv[a++] = gpus_arg;
    }
    const int dev_slot = o->gpu_workers > 1 ? a : -1;
    if (dev_slot >= 0) {
        k->argv[a++] = "--device";
        a++; /* filled per worker below */
    }
    k->argv[a] = NULL;
    for (int w = 0; w < n_workers && w < MAX_GPU_WORKERS; w++) {
        child *kw = w == 0 ? &kids[C_WORKER] : &kids[C_FIXED + w - 1];
        if (w > 0) {
            memcpy(kw->argv, kids[C_WORKER].argv, sizeof kw->argv);
            snprintf(worker_names[w], sizeof worker_names[w], "worker-%d", w);
            kw->name = worker_names[w];
            kw->wanted = o->worker;
        }
        if (dev_slot >= 0) {
            snprintf(worker_devs[w], sizeof worker_devs[w], "cuda:%d", w * per);
            kw->argv[dev_slot + 1] = worker_devs[w];
        }
    }

    k = &kids[C_NGINX];
    k->name = "nginx";
    k->wanted = true;
    char nginx_err[PATH_MAX + 48], nginx_prefix[PATH_MAX + 48];
    snprintf(nginx_err, sizeof nginx_err, "%s/nginx-error.log", log_dir);
    snprintf(nginx_prefix, sizeof nginx_prefix, "%s/", run_dir);
    join(k->log_path, sizeof k->log_path, log_dir, "nginx-error.log");
    a = 0;
    k->argv[a++] = (char *)o->nginx;
    k->argv[a++] = "-e";
    k->argv[a++] = nginx_err;
    k->argv[a++] = "-p";
    k->argv[a++] = nginx_prefix;
    k->argv[a++] = "-c";
    k->argv[a++] = conf_path;
    k->argv[a] = NULL;

    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old);

    char nginx_pid_file[PATH_MAX + 48];
    join(nginx_pid_file, sizeof nginx_pid_file, run_dir, "nginx-master.pid");
    unlink(nginx_pid_file);
    for (int i = 0; i < C_COUNT; i++) {
        if (!kids[i].wanted || stop_signal)
            continue;
        if (start_child(&kids[i], run_dir, err) < 0)
            goto stop_all;
        if (i == C_FCGI) {
            double end = now_seconds() + 15;
            while (access(fcgi_sock, F_OK) != 0 && now_seconds() < end && !stop_signal) {
                struct timespec ts = {0, 50 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            if (access(fcgi_sock, F_OK) != 0) {
                mm_fail(err, "mmh3-fcgi did not open %s within 15 s", fcgi_sock);
                goto stop_all;
            }
        }
        if (i == C_NGINX && !tcp_ready(o->listen, 10, kids[i].pid, nginx_pid_file)) {
            /* Its last complaint usually says it all ("address already in use"). */
            char last[512] = "", line[512];
            FILE *lf = fopen(kids[i].log_path, "r");
            while (lf && fgets(line, sizeof line, lf))
                if ((strstr(line, "emerg") || strstr(line, "[crit]")) && !strstr(line, "still could not"))
                    snprintf(last, sizeof last, "%s", line);
            if (lf)
                fclose(lf);
            last[strcspn(last, "\n")] = '\0';
            mm_fail(err, "nginx is not answering on %s%s%s (see %s)", o->listen, last[0] ? ": " : "", last,
                    kids[i].log_path);
            kids[i].pid = 0;
            goto stop_all;
        }
    }
    if (!stop_signal)
        mm_log("ready: http://%s/ (engine: %s%s; outputs: %s; access tokens %s)", o->listen, o->engine_kind,
               o->worker ? "" : ", no local worker", outputs, auth_required ? "required" : "not required (loopback)");

    /* Supervise: restart what dies, with a growing pause. */
    bool db_owned_elsewhere = o->db_url != NULL;
    double pg_restart_at = 0;
    while (!stop_signal) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        siginfo_t info;
        sigtimedwait(&block, &info, &tick);
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            /* Each child leads its own process group: what it leaves behind
             * when killed (nginx's workers, which would keep the port;
             * PostgreSQL's backends, which would keep its shared memory)
             * goes with it, so the restart starts clean. */
            kill(-p, SIGKILL);
            if (p == pg.pid && pg.pid) {
                char how[128];
                mm_proc_describe(status, how, sizeof how);
                mm_log("postgres %s; restarting it", how);
                pg.pid = 0;
                pg_restart_at = now_seconds();
                continue;
            }
            for (int i = 0; i < C_COUNT; i++) {
                if (kids[i].pid != p)
                    continue;
                char how[128];
                mm_proc_describe(status, how, sizeof how);
                /* Back off only from a process that keeps dying at start;
                 * one that ran a while is back at once (a killed worker
                 * should recover its job promptly). */
                double up = now_seconds() - kids[i].started;
                kids[i].backoff = up > 5 ? 0.2 : kids[i].backoff > 0.2 ? kids[i].backoff * 2 : 1;
                if (kids[i].backoff > 30)
                    kids[i].backoff = 30;
                kids[i].restart_at = now_seconds() + kids[i].backoff;
                kids[i].pid = 0;
                mm_log("%s %s; restarting it in %g s", kids[i].name, how, kids[i].backoff);
            }
        }
        if (!db_owned_elsewhere && pg.pid == 0 && now_seconds() >= pg_restart_at && !stop_signal) {
            if (mm_pg_start(&pg, err) < 0) {
                mm_log("%s (retrying in 1 s)", err->msg);
                pg_restart_at = now_seconds() + 1;
            } else {
                write_pid(run_dir, "postgres", pg.pid);
                mm_log("postgres is back");
            }
        }
        for (int i = 0; i < C_COUNT; i++)
            if (kids[i].wanted && kids[i].pid == 0 && now_seconds() >= kids[i].restart_at && !stop_signal) {
                if (start_child(&kids[i], run_dir, err) < 0)
                    mm_log("%s", err->msg);
            }
    }
    mm_log("stopping (signal %d)", (int)stop_signal);
    mm_error_clear(err);
    int rc = 0;
    goto stop;
stop_all:
    rc = -1;
stop:
    /* Reverse order: stop taking requests, let the worker re-queue its job,
     * then the API, then the database. */
    if (kids[C_NGINX].pid)
        mm_proc_stop(kids[C_NGINX].pid, SIGQUIT, 5);
    /* Every worker re-queues its job on SIGTERM: signal them all, then wait. */
    for (int i = C_FIXED; i < C_COUNT; i++)
        if (kids[i].pid)
            kill(kids[i].pid, SIGTERM);
    for (int i = C_FIXED; i < C_COUNT; i++)
        if (kids[i].pid)
            mm_proc_stop(kids[i].pid, SIGTERM, 30);
    if (kids[C_WORKER].pid)
        mm_proc_stop(kids[C_WORKER].pid, SIGTERM, 30);
    if (kids[C_FCGI].pid)
        mm_proc_stop(kids[C_FCGI].pid, SIGTERM, 5);
    mm_pg_stop(&pg);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        mm_log("stopped");
    return rc;
fail_pg:
    mm_pg_stop(&pg);
    return -1;
}
