/* `mmh3 serve`: the whole stack on one machine. Starts the private
 * PostgreSQL cluster (unless a database URL is given), applies the schema,
 * renders nginx's configuration (nginx/mmh3.conf.in), starts the FastCGI
 * pool (mmh3-fcgi), the GPU worker and nginx, restarts any of them that
 * dies, and stops them all in order on Ctrl-C / SIGTERM. */
#ifndef MMH3_SERVE_SERVE_H
#define MMH3_SERVE_SERVE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

#define MM_SERVE_ENGINE_ARGS 64

typedef struct mm_serve_options {
    const char *outputs;     /* default ./outputs */
    const char *listen;      /* nginx listen address, default 127.0.0.1:8000 */
    const char *db_url;      /* NULL: the private cluster under <outputs>/.mmh3 */
    const char *web_root;    /* NULL: the built web app next to the binary, else the installed one */
    const char *nginx;       /* nginx binary */
    const char *pg_bindir;   /* initdb/postgres folder */
    const char *pg_user;     /* as root, the private cluster's user ($MMH3_PG_USER; NULL: mmh3, created when missing) */
    bool worker;             /* start a worker (default true) */
    const char *engine_kind; /* "h3" or "mock" */
    double mock_seconds;
    /* The engine flags serve was given (cli/engine_flags.h), each "--flag"
     * followed by its value if it has one, passed on to every worker as
     * given (before serve's own --gpus and per-worker --device). */
    const char *engine_args[MM_SERVE_ENGINE_ARGS];
    int n_engine_args;
    /* Several GPUs (docs/MULTIGPU.md): gpu_workers > 1 starts that many
     * workers, worker i on cuda:(i * gpus); gpus > 1 makes each worker's DiT
     * sequence-parallel over that many GPUs. 0/1: one worker, one GPU. */
    int gpu_workers, gpus;
    int max_attempts;
    double lease_seconds;
    int threads;
    int upload_mb;
    /* Request safety (docs/SECURITY.md). */
    const char *auth;        /* "auto" (tokens unless nginx listens on loopback only), "on", "off" (loopback only) */
    const char *allow_hosts; /* extra host names (comma-separated), or NULL */
    bool cookie_secure;
    double rate_enqueue, rate_upload; /* per token per minute; 0 = no limit */
    double max_queued;                /* 0 = no bound */
} mm_serve_options;

/* Whether an nginx listen address (host:port, [v6]:port, port, unix:path)
 * accepts connections from this machine only. */
bool mm_serve_listen_is_loopback(const char *listen);

void mm_serve_options_defaults(mm_serve_options *o);
int mm_serve_run(const mm_serve_options *o, mm_error *err);

#endif
