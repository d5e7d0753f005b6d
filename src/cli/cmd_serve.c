/* mmh3 serve — the web app on this machine: PostgreSQL, the FastCGI pool,
 * the GPU worker and nginx, supervised; Ctrl-C stops them all. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"

#ifdef MMH3_HAVE_SERVER
#include "core/log.h"
#include "oxen/agent.h"
#include "backend/device.h"
#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "serve/serve.h"

/* What serve's flags fill in: its own options, and the engine's (checked
 * here rather than in a restarting worker, then passed on as given). */
typedef struct serve_args {
    mm_serve_options o;
    mm_engine_options eo;
    const char *host; /* --host, the original project's spelling of --listen's host */
    int port;         /* --port, of its port; 0 = not given */
    bool listen_given;
    char listen[300]; /* --listen composed from --host/--port */
} serve_args;

static int apply_listen(const mm_flag *f, char *v, mm_error *why)
{
    serve_args *s = f->target;
    if (!*v)
        return mm_fail(why, "is empty");
    s->o.listen = v;
    s->listen_given = true;
    return 0;
}

static int apply_host(const mm_flag *f, char *v, mm_error *why)
{
    serve_args *s = f->target;
    /* A name or an address; one colon is a port (IPv6 addresses have more). */
    const char *colon = strchr(v, ':');
    if (colon && !strchr(colon + 1, ':'))
        return mm_fail(why, "carries a port; give it with --port, or use --listen HOST:PORT");
    if (!*v || strlen(v) > 253 || strpbrk(v, " /[]\t"))
        return mm_fail(why, "is not a host name or address");
    s->host = v;
    return 0;
}

/* --host H / --port P -> --listen H:P (IPv6 in brackets); the defaults of the
 * part not given are --listen's (127.0.0.1, 8000), so the loopback default
 * and the token rule off loopback stay as they are. */
static int compose_listen(serve_args *s, mm_error *err)
{
    if (!s->host && !s->port)
        return 0;
    if (s->listen_given)
        return mm_fail(err, "--listen cannot be given together with --host/--port; accepted: --listen HOST:PORT, or "
                            "--host HOST and/or --port PORT");
    const char *host = s->host ? s->host : "127.0.0.1";
    int port = s->port ? s->port : 8000;
    bool v6 = strchr(host, ':') != NULL;
    snprintf(s->listen, sizeof s->listen, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
    s->o.listen = s->listen;
    return 0;
}

static int apply_gpu_workers(const mm_flag *f, char *v, mm_error *why)
{
    int *n = f->target;
    if (strcmp(v, "all") == 0) {
        *n = mm_cuda_device_count();
        return *n >= 1 ? 0 : mm_fail(why, "no usable GPU on this host; accepted: 1..16 (or all, with GPUs)");
    }
    return mm_flag_int(v, 1, 16, n) ? 0 : mm_fail(why, "out of range");
}

/* The Oxen flags reach the children (worker, mmh3-fcgi) through the
 * environment (the row's set_str names the variable): the key never appears
 * on a command line, and is blanked on serve's own (ps shows argv). */
static int apply_oxen(const mm_flag *f, char *v, mm_error *why)
{
    (void)why;
    setenv(f->set_str, v, 1);
    if (f->set_int)
        memset(v, 'x', strlen(v));
    return 0;
}

/* After each flag: the engine's are passed on to every worker as given
 * (as the worker spells it, and the value), except --gpus, which serve
 * spreads itself. */
static int pass_engine_flag(void *user, const mm_flag *f, const char *spelled, const char *value, mm_error *why)
{
    (void)spelled;
    serve_args *s = user;
    if (!mm_engine_flags_owns(f->id))
        return 0;
    if (f->id == MM_EF_GPUS) {
        s->o.gpus = s->eo.h3.gpus;
        return 0;
    }
    if (s->o.n_engine_args + 2 > MM_SERVE_ENGINE_ARGS)
        return mm_fail(why, "too many engine flags; accepted: at most %d values", MM_SERVE_ENGINE_ARGS);
    s->o.engine_args[s->o.n_engine_args++] = mm_engine_flags_worker_name(f->id);
    if (value)
        s->o.engine_args[s->o.n_engine_args++] = value;
    return 0;
}

static mm_flags_result parse_flags(serve_args *s, int argc, char **argv)
{
    mm_serve_options *o = &s->o;
    mm_flag engine[MM_ENGINE_FLAGS_MAX];
    int n_engine = mm_engine_flags_rows(MM_ENGINE_CMD_SERVE, &s->eo, engine);
    const mm_flag rows[] = {
        {"--listen", NULL, MM_FLAG_CUSTOM, s,
         "address nginx listens on (default 127.0.0.1:8000, loopback only; access tokens are required on any "
         "other address)",
         .arg = "HOST:PORT", .apply = apply_listen},
        {"--host", NULL, MM_FLAG_CUSTOM, s, "the host part of --listen (default 127.0.0.1; 0.0.0.0 = every address)",
         .arg = "HOST", .apply = apply_host},
        {"--port", NULL, MM_FLAG_INT, &s->port, "the port part of --listen (default 8000)", .arg = "PORT", .min = 1,
         .max = 65535},
        {"--outputs", NULL, MM_FLAG_STRING, &o->outputs,
         "outputs folder: clips, uploads, and the private database (default ./outputs)", .arg = "DIR"},
        {"--db", NULL, MM_FLAG_STRING, &o->db_url, "use this PostgreSQL database instead of the private cluster",
         .arg = "URL"},
        {"--mock", NULL, MM_FLAG_SET_STR, &o->engine_kind, "the mock engine (FFmpeg test pattern; no weights, no GPU)",
         .set_str = "mock"},
        {"--mock-seconds", NULL, MM_FLAG_DOUBLE, &o->mock_seconds, "mock engine: wall time of one job (default 5)",
         .arg = "S", .min = 0, .above_min = true, .max = 3600, .accepted = "seconds > 0 and <= 3600"},
        {"--no-worker", NULL, MM_FLAG_FALSE, &o->worker,
         .help = "no local worker (workers on other hosts share the database)"},
        {"--gpu-workers", NULL, MM_FLAG_CUSTOM, &o->gpu_workers,
         "one worker per GPU (worker i on cuda:i), all claiming from the same queue; with --gpus N each worker's "
         "DiT spans GPUs cuda:i*N..i*N+N-1",
         .arg = "N|all", .accepted = "1..16 or all", .apply = apply_gpu_workers},
        {"--web", "--web-root", MM_FLAG_STRING, &o->web_root,
         "the built web app (default: next to the binary, else the installed one)", .arg = "DIR"},
        {"--threads", NULL, MM_FLAG_INT, &o->threads, "FastCGI request threads (default 16)", .arg = "N", .min = 1,
         .max = 1024},
        {"--max-attempts", NULL, MM_FLAG_INT, &o->max_attempts,
         "renders started before a crashing job is failed (default 3)", .arg = "N", .min = 1, .max = 100},
        {"--lease", NULL, MM_FLAG_DOUBLE, &o->lease_seconds,
         "seconds without a worker heartbeat before its job is recovered (default 30)", .arg = "S", .min = 3,
         .max = 86400, .accepted = "seconds 3..86400"},
        {"--upload-mb", NULL, MM_FLAG_INT, &o->upload_mb, "largest upload request (default 200)", .arg = "N", .min = 1,
         .max = 16384},
        {.kind = MM_FLAG_SECTION,
         .help = "\nThe real engine, passed on to every worker (the same flags as mmh3 generate and mmh3 worker):"},
        {.kind = MM_FLAG_GROUP, .rows = engine, .n_rows = n_engine},
        {.kind = MM_FLAG_SECTION, .help = "\nRequest safety (docs/SECURITY.md):"},
        {"--auth", NULL, MM_FLAG_CHOICE, &o->auth,
         "access tokens: auto (default) requires them unless --listen is loopback; off is accepted on loopback "
         "only. The first start prints a token; `mmh3 token` makes more and revokes them",
         .arg = "auto|on|off", .choices = "auto on off"},
        {"--allow-host", NULL, MM_FLAG_STRING, &o->allow_hosts,
         "host names the server answers to besides localhost, this host's name and IP addresses (comma-separated; "
         "'*' = any, e.g. behind a proxy that checks)",
         .arg = "NAMES"},
        {"--cookie-secure", NULL, MM_FLAG_TRUE, &o->cookie_secure,
         .help = "mark the login cookie Secure (TLS terminated in front of nginx)"},
        {"--rate-enqueue", NULL, MM_FLAG_DOUBLE, &o->rate_enqueue,
         "enqueue requests per minute per token (default 60; 0 = no limit)", .arg = "N", .min = 0, .max = 1e6},
        {"--rate-upload", NULL, MM_FLAG_DOUBLE, &o->rate_upload,
         "upload requests per minute per token (default 120; 0 = no limit)", .arg = "N", .min = 0, .max = 1e6},
        {"--max-queued", NULL, MM_FLAG_DOUBLE, &o->max_queued,
         "queued generations beyond which enqueue answers 429 (default 1000; 0 = none)", .arg = "N", .min = 0,
         .max = 1e12},
        {.kind = MM_FLAG_SECTION, .help = "\nOxen.ai (off unless a remote is given; see docs/OXEN-INTEGRATION.md):"},
        {"--oxen-remote", NULL, MM_FLAG_CUSTOM, NULL,
         "hub repository https://hub.oxen.ai/<namespace>/<repo> ($MMH3_OXEN_REMOTE): renders are mirrored there, "
         "idle workers claim hub jobs, and the prompt rewrite talks to this hub",
         .arg = "URL", .apply = apply_oxen, .set_str = "MMH3_OXEN_REMOTE"},
        {"--oxen-token", NULL, MM_FLAG_CUSTOM, NULL,
         "API key ($MMH3_OXEN_TOKEN); default: the key stored through /api/settings", .arg = "TOKEN",
         .apply = apply_oxen, .set_str = "MMH3_OXEN_TOKEN", .set_int = 1},
        {"--oxen-model", NULL, MM_FLAG_CUSTOM, NULL,
         "hub model name whose queued jobs are claimed (default minimax-h3)", .arg = "NAME", .apply = apply_oxen,
         .set_str = "MMH3_OXEN_MODEL"},
        {"--oxen-poll", NULL, MM_FLAG_CUSTOM, NULL, "claim loop interval while idle (default 10; 0 disables claiming)",
         .arg = "S", .apply = apply_oxen, .set_str = "MMH3_OXEN_POLL"},
        {"--oxen-timeout", NULL, MM_FLAG_CUSTOM, NULL,
         "seconds per hub call before it is retried (default 60)", .arg = "S", .apply = apply_oxen,
         .set_str = "MMH3_OXEN_TIMEOUT"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    const mm_flags_cmd cmd = {
        .prog = "mmh3 serve",
        .synopsis = "usage: mmh3 serve [options]\n"
                    "\n"
                    "Runs the web app: a private PostgreSQL cluster under the outputs folder (unless --db is\n"
                    "given), the FastCGI API pool, the GPU worker and nginx. Ctrl-C stops everything.\n"
                    "\n",
        .rows = rows,
        .n_rows = MM_FLAGS_COUNT(rows),
        .help_column = 22,
        .seen = pass_engine_flag,
        .user = s,
    };
    return mm_flags_parse(&cmd, argc, argv);
}

/* Refuses a bad Oxen configuration here, not in a restarting worker. */
static int check_oxen(void)
{
    mm_oxen_options ox;
    mm_oxen_options_from_env(&ox);
    mm_error err = {{0}};
    if (mm_oxen_options_check(&ox, &err) < 0) {
        fprintf(stderr, "mmh3 serve: %s\n", err.msg);
        return 2;
    }
    return 0;
}

int mm_cmd_serve(int argc, char **argv)
{
    serve_args s = {0};
    mm_serve_options_defaults(&s.o);
    s.o.db_url = getenv("MMH3_DATABASE_URL"); /* the documented default of --db */
    if (s.o.db_url && !*s.o.db_url)
        s.o.db_url = NULL;
    s.o.pg_user = getenv("MMH3_PG_USER");
    mm_engine_options_defaults(&s.eo);
    mm_flags_result parsed = parse_flags(&s, argc, argv);
    if (parsed != MM_FLAGS_RUN)
        return mm_flags_exit_status(parsed);
    mm_error err = {{0}};
    if (compose_listen(&s, &err) < 0) {
        fprintf(stderr, "mmh3 serve: %s\n", err.msg);
        return 2;
    }
    if (mm_engine_flags_finish(&s.eo, &err) < 0) {
        fprintf(stderr, "mmh3 serve: %s\n", err.msg);
        return 2;
    }
    if (check_oxen() != 0)
        return 2;
    mm_log_init("serve");
    if (mm_serve_run(&s.o, &err) < 0) {
        mm_log("%s", err.msg);
        return 1;
    }
    return 0;
}
#else
int mm_cmd_serve(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mmh3 serve: this mmh3 was configured without the serving stack (--without-server); "
                    "rebuild with libpq-dev, libfcgi-dev, libcurl4-openssl-dev, nginx and postgresql installed\n");
    return 1;
}
#endif
