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

#include "core/clock.h"

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
static int first_token(PGconn *db, const char *listen, bool loopback, const char *outputs, mm_error *err)
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
               "`mmh3 token create NAME --outputs %s`", total, outputs);
    return 0;
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
    c->started = mm_clock_now();
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
    double end = mm_clock_now() + seconds;
    while (mm_clock_now() < end && kill(pid, 0) == 0 && waitpid(pid, NULL, WNOHANG) == 0) {
        if (pid_in_file(pid_file) != pid) {
            mm_clock_sleep(0.05);
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
        mm_clock_sleep(0.1);
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

/* ---------------------------------------------------------------- the stack */

/* Everything one mmh3 serve holds: its folders, the children and the
 * strings their command lines point to. */
typedef struct stack {
    const mm_serve_options *o;
    bool loopback, auth_required;
    char outputs[PATH_MAX], state[PATH_MAX + 16], run_dir[PATH_MAX + 32], log_dir[PATH_MAX + 32];
    char gen_dir[PATH_MAX + 32], up_dir[PATH_MAX + 32];
    char mmh3_path[PATH_MAX + 16], fcgi_path[PATH_MAX + 16], web_abs[PATH_MAX];
    char fcgi_sock[PATH_MAX + 32], fcgi_upstream[PATH_MAX + 48];
    char conf_path[PATH_MAX + 48], nginx_err[PATH_MAX + 48], nginx_prefix[PATH_MAX + 48];
    char nginx_pid_file[PATH_MAX + 48];
    char threads[16], lease[32], attempts[16], mock_seconds[32], upload_mb[16];
    char rate_enqueue[32], rate_upload[32], max_queued[32], gpus_arg[16];
    char worker_names[MAX_GPU_WORKERS][16], worker_devs[MAX_GPU_WORKERS][24];
    mm_pg_cluster pg;
    child kids[C_COUNT];
} stack;

/* Tokens: required unless nginx answers on loopback only. */
static int settle_auth(stack *st, mm_error *err)
{
    const mm_serve_options *o = st->o;
    st->loopback = mm_serve_listen_is_loopback(o->listen);
    st->auth_required = strcmp(o->auth, "on") == 0 || (strcmp(o->auth, "auto") == 0 && !st->loopback);
    if (strcmp(o->auth, "off") == 0 && !st->loopback)
        return mm_fail(err, "--auth off: nginx would listen on %s, beyond loopback, where access tokens are "
                            "required; accepted: --auth off only with a loopback --listen (127.0.0.1:PORT, "
                            "[::1]:PORT)", o->listen);
    return 0;
}

/* <outputs>/{generations,uploads} and the state folder <outputs>/.mmh3/{run,logs}. */
static int make_folders(stack *st, mm_error *err)
{
    if (make_dir(st->o->outputs, 0755, err) < 0)
        return -1;
    if (!realpath(st->o->outputs, st->outputs))
        return mm_fail_errno(err, "resolving the outputs folder %s", st->o->outputs);
    snprintf(st->state, sizeof st->state, "%s/.mmh3", st->outputs);
    snprintf(st->run_dir, sizeof st->run_dir, "%s/run", st->state);
    snprintf(st->log_dir, sizeof st->log_dir, "%s/logs", st->state);
    snprintf(st->gen_dir, sizeof st->gen_dir, "%s/generations", st->outputs);
    snprintf(st->up_dir, sizeof st->up_dir, "%s/uploads", st->outputs);
    if (make_dir(st->state, 0755, err) < 0 || make_dir(st->run_dir, 0755, err) < 0 ||
        make_dir(st->log_dir, 0755, err) < 0 || make_dir(st->gen_dir, 0755, err) < 0 ||
        make_dir(st->up_dir, 0755, err) < 0)
        return -1;
    return 0;
}

/* One serve per outputs folder: a lock held (fd left open) until exit. */
static int lock_outputs(const stack *st, mm_error *err)
{
    char lock_path[PATH_MAX + 48];
    join(lock_path, sizeof lock_path, st->state, "serve.lock");
    int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0)
        return mm_fail_errno(err, "opening %s", lock_path);
    if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        close(lock_fd);
        return mm_fail(err, "another mmh3 serve is running on %s (it holds %s)", st->outputs, lock_path);
    }
    return 0;
}

static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The private cluster (unless --db), the schema, and the first token. The
 * children find the database and the outputs in their environment, off
 * their command lines. */
static int start_database(stack *st, mm_error *err)
{
    const char *db_url = st->o->db_url;
    if (!db_url) {
        if (mm_pg_prepare(&st->pg, st->state, st->log_dir, st->o->pg_bindir, st->o->pg_user, err) < 0 || mm_pg_start(&st->pg, err) < 0)
            return -1;
        write_pid(st->run_dir, "postgres", st->pg.pid);
        db_url = st->pg.url;
        mm_log("PostgreSQL is up (private cluster %s; psql \"%s\")", st->pg.data_dir, st->pg.url);
    }
    setenv("MMH3_DATABASE_URL", db_url, 1);
    setenv("MMH3_OUTPUTS", st->outputs, 1);
    PGconn *db;
    int applied = 0;
    if (mm_db_connect(db_url, "mmh3-serve", &db, err) < 0)
        return -1;
    if (mm_db_migrate(db, &applied, err) < 0 ||
        (st->auth_required && first_token(db, st->o->listen, st->loopback, st->outputs, err) < 0)) {
        PQfinish(db);
        return -1;
    }
    PQfinish(db);
    if (applied)
        mm_log("database schema: applied %d migration(s)", applied);
    return 0;
}

/* The programs next to this one, and the built web app (or a page saying
 * it is not built: no npm at build time). */
static void find_programs_and_web(stack *st, mm_error *err)
{
    char bindir[PATH_MAX], web[PATH_MAX + 32];
    self_dir(bindir, sizeof bindir);
    snprintf(st->mmh3_path, sizeof st->mmh3_path, "%s/mmh3", bindir);
    snprintf(st->fcgi_path, sizeof st->fcgi_path, "%s/mmh3-fcgi", bindir);
    if (st->o->web_root) {
        snprintf(web, sizeof web, "%s", st->o->web_root);
    } else {
        join(web, sizeof web, bindir, "web/dist");
        if (!is_dir(web))
            snprintf(web, sizeof web, "%s/web", MMH3_DATADIR);
    }
    if (is_dir(web) && realpath(web, st->web_abs))
        return;
    join(st->web_abs, sizeof st->web_abs, st->state, "www");
    make_dir(st->web_abs, 0755, err);
    char index[PATH_MAX + 16];
    snprintf(index, sizeof index, "%s/index.html", st->web_abs);
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
static void choose_fcgi_socket(stack *st)
{
    struct sockaddr_un sun;
    join(st->fcgi_sock, sizeof st->fcgi_sock, st->run_dir, "fcgi.sock");
    if (strlen(st->fcgi_sock) >= sizeof sun.sun_path)
        snprintf(st->fcgi_sock, sizeof st->fcgi_sock, "/tmp/mmh3-fcgi-%d.sock", (int)getpid());
    snprintf(st->fcgi_upstream, sizeof st->fcgi_upstream, "unix:%s", st->fcgi_sock);
}

/* As root, nginx's workers run as nobody: they must reach the files. */
static void nginx_user(const stack *st, char *user_line, size_t n, const char *tmp_dir, mm_error *err)
{
    struct passwd *pw = getpwnam("nobody");
    struct group *gr = getgrnam("nogroup");
    if (!gr)
        gr = getgrnam("nobody");
    if (!pw || !gr)
        return;
    snprintf(user_line, n, "user %s %s;", pw->pw_name, gr->gr_name);
    if (chown(tmp_dir, pw->pw_uid, gr->gr_gid) < 0)
        mm_log("cannot give %s to nobody: %s", tmp_dir, strerror(errno));
    mm_path_make_reachable(st->gen_dir, pw->pw_uid, gr->gr_gid, err);
    mm_path_make_reachable(st->up_dir, pw->pw_uid, gr->gr_gid, err);
    char index[PATH_MAX + 16];
    snprintf(index, sizeof index, "%s/index.html", st->web_abs);
    mm_path_make_reachable(index, pw->pw_uid, gr->gr_gid, err);
}

/* nginx.conf from the two compiled-in templates. */
static int write_nginx_conf(stack *st, mm_error *err)
{
    const mm_serve_options *o = st->o;
    char user_line[128] = "", tmp_dir[PATH_MAX + 48];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/nginx-tmp", st->run_dir);
    make_dir(tmp_dir, 0755, err);
    if (geteuid() == 0)
        nginx_user(st, user_line, sizeof user_line, tmp_dir, err);
    char upload_max[32];
    snprintf(upload_max, sizeof upload_max, "%dm", o->upload_mb + 1);
    subst server_subs[] = {
        {"@LISTEN@", o->listen},       {"@SERVER_NAME@", "_"},      {"@FCGI@", st->fcgi_upstream},
        {"@WEB_ROOT@", st->web_abs},   {"@OUTPUTS@", st->outputs},  {"@UPLOAD_MAX@", upload_max},
    };
    char *server = render(mm_nginx_server_template, server_subs, (int)(sizeof server_subs / sizeof server_subs[0]));
    subst subs[] = {
        {"@USER_LINE@", user_line},
        {"@RUN_DIR@", st->run_dir},
        {"@LOG_DIR@", st->log_dir},
        {"@SERVER@", server ? server : ""},
    };
    char *conf = server ? render(mm_nginx_template, subs, (int)(sizeof subs / sizeof subs[0])) : NULL;
    free(server);
    snprintf(st->conf_path, sizeof st->conf_path, "%s/nginx.conf", st->run_dir);
    FILE *f = conf ? fopen(st->conf_path, "w") : NULL;
    if (!f || fputs(conf, f) < 0 || fclose(f) != 0) {
        free(conf);
        return mm_fail_errno(err, "writing %s", st->conf_path);
    }
    free(conf);
    return 0;
}

/* ------------------------------------------------------------- children */

/* The numbers the children's command lines carry, as text. */
static void format_child_numbers(stack *st)
{
    const mm_serve_options *o = st->o;
    snprintf(st->rate_enqueue, sizeof st->rate_enqueue, "%g", o->rate_enqueue);
    snprintf(st->rate_upload, sizeof st->rate_upload, "%g", o->rate_upload);
    snprintf(st->max_queued, sizeof st->max_queued, "%.0f", o->max_queued);
    snprintf(st->threads, sizeof st->threads, "%d", o->threads);
    snprintf(st->lease, sizeof st->lease, "%g", o->lease_seconds);
    snprintf(st->attempts, sizeof st->attempts, "%d", o->max_attempts);
    snprintf(st->mock_seconds, sizeof st->mock_seconds, "%g", o->mock_seconds);
    snprintf(st->upload_mb, sizeof st->upload_mb, "%d", o->upload_mb);
}

static void plan_fcgi(stack *st)
{
    const mm_serve_options *o = st->o;
    child *k = &st->kids[C_FCGI];
    k->name = "fcgi";
    k->wanted = true;
    int a = 0;
    k->argv[a++] = st->fcgi_path;
    k->argv[a++] = "--listen";
    k->argv[a++] = st->fcgi_sock;
    k->argv[a++] = "--threads";
    k->argv[a++] = st->threads;
    k->argv[a++] = "--outputs";
    k->argv[a++] = st->outputs;
    k->argv[a++] = "--lease";
    k->argv[a++] = st->lease;
    k->argv[a++] = "--max-upload-mb";
    k->argv[a++] = st->upload_mb;
    k->argv[a++] = "--auth";
    k->argv[a++] = st->auth_required ? "on" : "off";
    k->argv[a++] = "--rate-enqueue";
    k->argv[a++] = st->rate_enqueue;
    k->argv[a++] = "--rate-upload";
    k->argv[a++] = st->rate_upload;
    k->argv[a++] = "--max-queued";
    k->argv[a++] = st->max_queued;
    if (o->allow_hosts) {
        k->argv[a++] = "--allow-host";
        k->argv[a++] = (char *)o->allow_hosts;
    }
    if (o->cookie_secure)
        k->argv[a++] = "--cookie-secure";
    k->argv[a] = NULL;
}

/* The worker, or one per GPU (--gpu-workers N): worker i on cuda:i*gpus,
 * each with the engine flags serve was given. */
static void plan_workers(stack *st)
{
    const mm_serve_options *o = st->o;
    child *k = &st->kids[C_WORKER];
    k->name = "worker";
    k->wanted = o->worker;
    int a = 0;
    k->argv[a++] = st->mmh3_path;
    k->argv[a++] = "worker";
    k->argv[a++] = "--outputs";
    k->argv[a++] = st->outputs;
    k->argv[a++] = "--lease";
    k->argv[a++] = st->lease;
    k->argv[a++] = "--max-attempts";
    k->argv[a++] = st->attempts;
    if (strcmp(o->engine_kind, "mock") == 0) {
        k->argv[a++] = "--mock";
        k->argv[a++] = "--mock-seconds";
        k->argv[a++] = st->mock_seconds;
    }
    for (int i = 0; i < o->n_engine_args && i < MM_SERVE_ENGINE_ARGS; i++)
        k->argv[a++] = (char *)o->engine_args[i];
    const int n_workers = o->gpu_workers > 1 ? o->gpu_workers : 1, per = o->gpus > 1 ? o->gpus : 1;
    snprintf(st->gpus_arg, sizeof st->gpus_arg, "%d", per);
    if (per > 1) {
        k->argv[a++] = "--gpus";
        k->argv[a++] = st->gpus_arg;
    }
    const int dev_slot = o->gpu_workers > 1 ? a : -1;
    if (dev_slot >= 0) {
        k->argv[a++] = "--device";
        a++; /* filled per worker below */
    }
    k->argv[a] = NULL;
    for (int w = 0; w < n_workers && w < MAX_GPU_WORKERS; w++) {
        child *kw = w == 0 ? &st->kids[C_WORKER] : &st->kids[C_FIXED + w - 1];
        if (w > 0) {
            memcpy(kw->argv, st->kids[C_WORKER].argv, sizeof kw->argv);
            snprintf(st->worker_names[w], sizeof st->worker_names[w], "worker-%d", w);
            kw->name = st->worker_names[w];
            kw->wanted = o->worker;
        }
        if (dev_slot >= 0) {
            snprintf(st->worker_devs[w], sizeof st->worker_devs[w], "cuda:%d", w * per);
            kw->argv[dev_slot + 1] = st->worker_devs[w];
        }
    }
}

static void plan_nginx(stack *st)
{
    child *k = &st->kids[C_NGINX];
    k->name = "nginx";
    k->wanted = true;
    snprintf(st->nginx_err, sizeof st->nginx_err, "%s/nginx-error.log", st->log_dir);
    snprintf(st->nginx_prefix, sizeof st->nginx_prefix, "%s/", st->run_dir);
    join(k->log_path, sizeof k->log_path, st->log_dir, "nginx-error.log");
    join(st->nginx_pid_file, sizeof st->nginx_pid_file, st->run_dir, "nginx-master.pid");
    int a = 0;
    k->argv[a++] = (char *)st->o->nginx;
    k->argv[a++] = "-e";
    k->argv[a++] = st->nginx_err;
    k->argv[a++] = "-p";
    k->argv[a++] = st->nginx_prefix;
    k->argv[a++] = "-c";
    k->argv[a++] = st->conf_path;
    k->argv[a] = NULL;
}

/* mmh3-fcgi is up when its socket exists. */
static int wait_for_fcgi(const stack *st, mm_error *err)
{
    double end = mm_clock_now() + 15;
    while (access(st->fcgi_sock, F_OK) != 0 && mm_clock_now() < end && !stop_signal)
        mm_clock_sleep(0.05);
    if (access(st->fcgi_sock, F_OK) != 0)
        return mm_fail(err, "mmh3-fcgi did not open %s within 15 s", st->fcgi_sock);
    return 0;
}

/* nginx is up when it answers on its address; if not, its last complaint
 * usually says why ("address already in use"). */
static int wait_for_nginx(stack *st, mm_error *err)
{
    child *k = &st->kids[C_NGINX];
    if (tcp_ready(st->o->listen, 10, k->pid, st->nginx_pid_file))
        return 0;
    char last[512] = "", line[512];
    FILE *lf = fopen(k->log_path, "r");
    while (lf && fgets(line, sizeof line, lf))
        if ((strstr(line, "emerg") || strstr(line, "[crit]")) && !strstr(line, "still could not"))
            snprintf(last, sizeof last, "%s", line);
    if (lf)
        fclose(lf);
    last[strcspn(last, "\n")] = '\0';
    mm_fail(err, "nginx is not answering on %s%s%s (see %s)", st->o->listen, last[0] ? ": " : "", last, k->log_path);
    k->pid = 0;
    return -1;
}

/* In order, each one ready before the next: the API, the workers, nginx. */
static int start_children(stack *st, mm_error *err)
{
    unlink(st->nginx_pid_file);
    for (int i = 0; i < C_COUNT; i++) {
        if (!st->kids[i].wanted || stop_signal)
            continue;
        if (start_child(&st->kids[i], st->run_dir, err) < 0)
            return -1;
        if (i == C_FCGI && wait_for_fcgi(st, err) < 0)
            return -1;
        if (i == C_NGINX && wait_for_nginx(st, err) < 0)
            return -1;
    }
    if (!stop_signal)
        mm_log("ready: http://%s/ (engine: %s%s; outputs: %s; access tokens %s)", st->o->listen, st->o->engine_kind,
               st->o->worker ? "" : ", no local worker", st->outputs,
               st->auth_required ? "required" : "not required (loopback)");
    return 0;
}

/* A child ended: back off only from a process that keeps dying at start;
 * one that ran a while is back at once (a killed worker should recover its
 * job promptly). */
static void child_ended(child *k, int status)
{
    char how[128];
    mm_proc_describe(status, how, sizeof how);
    double up = mm_clock_now() - k->started;
    k->backoff = up > 5 ? 0.2 : k->backoff > 0.2 ? k->backoff * 2 : 1;
    if (k->backoff > 30)
        k->backoff = 30;
    k->restart_at = mm_clock_now() + k->backoff;
    k->pid = 0;
    mm_log("%s %s; restarting it in %g s", k->name, how, k->backoff);
}

/* Collects every ended child. Each leads its own process group: what it
 * leaves behind when killed (nginx's workers, which would keep the port;
 * PostgreSQL's backends, which would keep its shared memory) goes with it,
 * so the restart starts clean. */
static void reap_children(stack *st, double *pg_restart_at)
{
    int status;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
        kill(-p, SIGKILL);
        if (p == st->pg.pid && st->pg.pid) {
            char how[128];
            mm_proc_describe(status, how, sizeof how);
            mm_log("postgres %s; restarting it", how);
            st->pg.pid = 0;
            *pg_restart_at = mm_clock_now();
            continue;
        }
        for (int i = 0; i < C_COUNT; i++)
            if (st->kids[i].pid == p)
                child_ended(&st->kids[i], status);
    }
}

/* Until a stop signal: restart what dies, with a growing pause. */
static void supervise(stack *st, const sigset_t *block, mm_error *err)
{
    bool db_owned_elsewhere = st->o->db_url != NULL;
    double pg_restart_at = 0;
    while (!stop_signal) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        siginfo_t info;
        sigtimedwait(block, &info, &tick);
        reap_children(st, &pg_restart_at);
        if (!db_owned_elsewhere && st->pg.pid == 0 && mm_clock_now() >= pg_restart_at && !stop_signal) {
            if (mm_pg_start(&st->pg, err) < 0) {
                mm_log("%s (retrying in 1 s)", err->msg);
                pg_restart_at = mm_clock_now() + 1;
            } else {
                write_pid(st->run_dir, "postgres", st->pg.pid);
                mm_log("postgres is back");
            }
        }
        for (int i = 0; i < C_COUNT; i++) {
            child *k = &st->kids[i];
            if (k->wanted && k->pid == 0 && mm_clock_now() >= k->restart_at && !stop_signal &&
                start_child(k, st->run_dir, err) < 0)
                mm_log("%s", err->msg);
        }
    }
    mm_log("stopping (signal %d)", (int)stop_signal);
}

/* Reverse order: stop taking requests, let the workers re-queue their jobs
 * (each does on SIGTERM: signal them all, then wait), then the API, then
 * the database. */
static void stop_children(stack *st)
{
    child *kids = st->kids;
    if (kids[C_NGINX].pid)
        mm_proc_stop(kids[C_NGINX].pid, SIGQUIT, 5);
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
    mm_pg_stop(&st->pg);
}

/* The children run with SIGCHLD blocked, so the supervision loop takes it
 * in sigtimedwait instead of a handler. */
static int run_children(stack *st, mm_error *err)
{
    format_child_numbers(st);
    plan_fcgi(st);
    plan_workers(st);
    plan_nginx(st);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old);
    int rc = start_children(st, err);
    if (rc == 0) {
        supervise(st, &block, err);
        mm_error_clear(err);
    }
    stop_children(st);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        mm_log("stopped");
    return rc;
}

int mm_serve_run(const mm_serve_options *o, mm_error *err)
{
    stack *st = calloc(1, sizeof *st);
    if (!st)
        return mm_fail(err, "out of memory");
    st->o = o;
    int rc = -1;
    if (settle_auth(st, err) < 0 || make_folders(st, err) < 0 || lock_outputs(st, err) < 0)
        goto out;
    catch_stop_signals();
    if (start_database(st, err) < 0)
        goto stop_db;
    find_programs_and_web(st, err);
    choose_fcgi_socket(st);
    if (write_nginx_conf(st, err) < 0)
        goto stop_db;
    rc = run_children(st, err); /* stops the database too */
    goto out;
stop_db:
    mm_pg_stop(&st->pg);
out:
    free(st);
    return rc;
}
