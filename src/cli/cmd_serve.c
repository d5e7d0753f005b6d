/* mmh3 serve — the web app on this machine: PostgreSQL, the FastCGI pool,
 * the GPU worker and nginx, supervised; Ctrl-C stops them all. */
#include "config.h"

#include <getopt.h>
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
#include "serve/serve.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3 serve [options]\n"
            "\n"
            "Runs the web app: a private PostgreSQL cluster under the outputs folder (unless --db is\n"
            "given), the FastCGI API pool, the GPU worker and nginx. Ctrl-C stops everything.\n"
            "\n"
            "  --listen ADDR       address nginx listens on (default 127.0.0.1:8000)\n"
            "  --outputs DIR       outputs folder: clips, uploads, and the private database (default ./outputs)\n"
            "  --db URL            use this PostgreSQL database instead of the private cluster\n"
            "  --mock              the mock engine (FFmpeg test pattern; no weights, no GPU)\n"
            "  --mock-seconds S    mock engine: wall time of one job (default 5)\n"
            "  --no-worker         no local worker (workers on other hosts share the database)\n"
            "  --gpu-workers N|all one worker per GPU (worker i on cuda:i), all claiming from the same queue;\n"
            "                      with --gpus N each worker's DiT spans GPUs cuda:i*N..i*N+N-1\n"
            "  --web DIR           (or --web-root) the built web app (default: next to the binary, else the installed one)\n"
            "  --threads N         FastCGI request threads (default 16)\n"
            "  --max-attempts N    renders started before a crashing job is failed (default 3)\n"
            "  --lease S           seconds without a worker heartbeat before its job is recovered (default 30)\n"
            "  --upload-mb N       largest upload request (default 200)\n"
            "\n"
            "The real engine, passed on to every worker (the same flags as mmh3 generate and mmh3 worker):\n");
    mm_engine_flags_usage(out, MM_ENGINE_CMD_SERVE, 2, 22);
    fprintf(out,
            "\n"
            "Request safety (docs/SECURITY.md):\n"
            "  --auth auto|on|off  access tokens: auto (default) requires them unless --listen is loopback;\n"
            "                      off is accepted on loopback only. The first start prints a token;\n"
            "                      `mmh3 token` makes more and revokes them\n"
            "  --allow-host NAMES  host names the server answers to besides localhost, this host's name and\n"
            "                      IP addresses (comma-separated; '*' = any, e.g. behind a proxy that checks)\n"
            "  --cookie-secure     mark the login cookie Secure (TLS terminated in front of nginx)\n"
            "  --rate-enqueue N    enqueue requests per minute per token (default 60; 0 = no limit)\n"
            "  --rate-upload N     upload requests per minute per token (default 120; 0 = no limit)\n"
            "  --max-queued N      queued generations beyond which enqueue answers 429 (default 1000; 0 = none)\n"
            "\n"
            "Oxen.ai (off unless a remote is given; see docs/OXEN-INTEGRATION.md):\n"
            "  --oxen-remote URL   hub repository https://hub.oxen.ai/<namespace>/<repo> ($MMH3_OXEN_REMOTE):\n"
            "                      renders are mirrored there, idle workers claim hub jobs, and the prompt\n"
            "                      rewrite talks to this hub\n"
            "  --oxen-token TOKEN  API key ($MMH3_OXEN_TOKEN); default: the key stored through /api/settings\n"
            "  --oxen-model NAME   hub model name whose queued jobs are claimed (default minimax-h3)\n"
            "  --oxen-poll S       claim loop interval while idle (default 10; 0 disables claiming)\n"
            "  --oxen-timeout S    seconds per hub call before it is retried (default 60)\n");
}

static int parse_limit(const char *flag, const char *text, double max, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (*end || !(v >= 0) || v > max) {
        fprintf(stderr, "mmh3 serve: %s %s: accepted: 0..%g\n", flag, text, max);
        return -1;
    }
    *out = v;
    return 0;
}

int mm_cmd_serve(int argc, char **argv)
{
    mm_serve_options o;
    mm_serve_options_defaults(&o);
    o.db_url = getenv("MMH3_DATABASE_URL");
    if (o.db_url && !*o.db_url)
        o.db_url = NULL;
    enum {
        O_LISTEN = 256, O_OUTPUTS, O_DB, O_MOCK, O_MOCK_SECONDS, O_NO_WORKER, O_WEB, O_THREADS, O_ATTEMPTS, O_LEASE,
        O_UPLOAD, O_AUTH, O_ALLOW_HOST, O_COOKIE_SECURE, O_RATE_ENQUEUE, O_RATE_UPLOAD, O_MAX_QUEUED, O_OXEN_REMOTE,
        O_OXEN_TOKEN, O_OXEN_MODEL, O_OXEN_POLL, O_OXEN_TIMEOUT, O_GPU_WORKERS
    };
    static const struct option own[] = {
        {"listen", required_argument, 0, O_LISTEN},   {"outputs", required_argument, 0, O_OUTPUTS},
        {"db", required_argument, 0, O_DB},           {"mock", no_argument, 0, O_MOCK},
        {"mock-seconds", required_argument, 0, O_MOCK_SECONDS},
        {"no-worker", no_argument, 0, O_NO_WORKER},
        {"web", required_argument, 0, O_WEB},         {"web-root", required_argument, 0, O_WEB},         {"threads", required_argument, 0, O_THREADS},
        {"max-attempts", required_argument, 0, O_ATTEMPTS}, {"lease", required_argument, 0, O_LEASE},
        {"upload-mb", required_argument, 0, O_UPLOAD}, {"help", no_argument, 0, 'h'},
        {"auth", required_argument, 0, O_AUTH},       {"allow-host", required_argument, 0, O_ALLOW_HOST},
        {"cookie-secure", no_argument, 0, O_COOKIE_SECURE},
        {"rate-enqueue", required_argument, 0, O_RATE_ENQUEUE},
        {"rate-upload", required_argument, 0, O_RATE_UPLOAD},
        {"max-queued", required_argument, 0, O_MAX_QUEUED},
        {"oxen-remote", required_argument, 0, O_OXEN_REMOTE}, {"oxen-token", required_argument, 0, O_OXEN_TOKEN},
        {"oxen-model", required_argument, 0, O_OXEN_MODEL},   {"oxen-poll", required_argument, 0, O_OXEN_POLL},
        {"oxen-timeout", required_argument, 0, O_OXEN_TIMEOUT},
        {"gpu-workers", required_argument, 0, O_GPU_WORKERS},
    };
    struct option opts[sizeof own / sizeof own[0] + MM_ENGINE_FLAGS_MAX + 1];
    int n_opts = (int)(sizeof own / sizeof own[0]);
    memcpy(opts, own, sizeof own);
    mm_engine_flags_options(MM_ENGINE_CMD_SERVE, opts, &n_opts);
    mm_engine_options eo; /* the engine flags, checked here rather than in a restarting worker */
    mm_engine_options_defaults(&eo);
    mm_error err = {{0}};
    int c, li = 0;
    char *end;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        switch (c) {
        case O_LISTEN: o.listen = optarg; break;
        case O_OUTPUTS: o.outputs = optarg; break;
        case O_DB: o.db_url = optarg; break;
        case O_MOCK: o.engine_kind = "mock"; break;
        case O_MOCK_SECONDS:
            o.mock_seconds = strtod(optarg, &end);
            if (*end || !(o.mock_seconds > 0) || o.mock_seconds > 3600) {
                fprintf(stderr, "mmh3 serve: --mock-seconds %s: accepted: seconds > 0 and <= 3600\n", optarg);
                return 2;
            }
            break;
        case O_NO_WORKER: o.worker = false; break;
        case O_GPU_WORKERS:
            if (strcmp(optarg, "all") == 0) {
                o.gpu_workers = mm_cuda_device_count();
                if (o.gpu_workers < 1) {
                    fprintf(stderr, "mmh3 serve: --gpu-workers all: no usable GPU on this host\n");
                    return 2;
                }
                break;
            }
            if (!mm_flag_int(optarg, 1, 16, &o.gpu_workers)) {
                fprintf(stderr, "mmh3 serve: --gpu-workers %s: accepted: 1..16 or all\n", optarg);
                return 2;
            }
            break;
        case O_WEB: o.web_root = optarg; break;
        case O_THREADS:
            if (!mm_flag_int(optarg, 1, 1024, &o.threads)) {
                fprintf(stderr, "mmh3 serve: --threads %s: accepted: 1..1024\n", optarg);
                return 2;
            }
            break;
        case O_ATTEMPTS:
            if (!mm_flag_int(optarg, 1, 100, &o.max_attempts)) {
                fprintf(stderr, "mmh3 serve: --max-attempts %s: accepted: 1..100\n", optarg);
                return 2;
            }
            break;
        case O_LEASE:
            o.lease_seconds = strtod(optarg, &end);
            if (*end || o.lease_seconds < 3 || o.lease_seconds > 86400) {
                fprintf(stderr, "mmh3 serve: --lease %s: accepted: seconds 3..86400\n", optarg);
                return 2;
            }
            break;
        case O_UPLOAD:
            if (!mm_flag_int(optarg, 1, 16384, &o.upload_mb)) {
                fprintf(stderr, "mmh3 serve: --upload-mb %s: accepted: 1..16384\n", optarg);
                return 2;
            }
            break;
        case O_AUTH:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "mmh3 serve: --auth %s: accepted: auto, on, off\n", optarg);
                return 2;
            }
            o.auth = optarg;
            break;
        case O_ALLOW_HOST: o.allow_hosts = optarg; break;
        case O_COOKIE_SECURE: o.cookie_secure = true; break;
        case O_RATE_ENQUEUE:
            if (parse_limit("--rate-enqueue", optarg, 1e6, &o.rate_enqueue) < 0)
                return 2;
            break;
        case O_RATE_UPLOAD:
            if (parse_limit("--rate-upload", optarg, 1e6, &o.rate_upload) < 0)
                return 2;
            break;
        case O_MAX_QUEUED:
            if (parse_limit("--max-queued", optarg, 1e12, &o.max_queued) < 0)
                return 2;
            break;
        /* The children (worker, mmh3-fcgi) read these from the environment:
         * the key never appears on a command line. */
        case O_OXEN_REMOTE: setenv("MMH3_OXEN_REMOTE", optarg, 1); break;
        case O_OXEN_TOKEN:
            setenv("MMH3_OXEN_TOKEN", optarg, 1);
            memset(optarg, 'x', strlen(optarg));
            break;
        case O_OXEN_MODEL: setenv("MMH3_OXEN_MODEL", optarg, 1); break;
        case O_OXEN_POLL: setenv("MMH3_OXEN_POLL", optarg, 1); break;
        case O_OXEN_TIMEOUT: setenv("MMH3_OXEN_TIMEOUT", optarg, 1); break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "mmh3 serve: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            if (!mm_engine_flags_owns(c)) {
                fprintf(stderr, "mmh3 serve: unknown option '%s' (see mmh3 serve --help)\n", argv[optind - 1]);
                return 2;
            }
            if (mm_engine_flags_apply(c, opts[li].name, optarg, &eo, &err) < 0) {
                fprintf(stderr, "mmh3 serve: %s\n", err.msg);
                return 2;
            }
            if (c == MM_EF_GPUS) { /* serve's own: per worker, with --gpu-workers */
                o.gpus = eo.h3.gpus;
                break;
            }
            if (o.n_engine_args + 2 > MM_SERVE_ENGINE_ARGS) {
                fprintf(stderr, "mmh3 serve: %s: too many engine flags; accepted: at most %d values\n",
                        argv[optind - 1], MM_SERVE_ENGINE_ARGS);
                return 2;
            }
            o.engine_args[o.n_engine_args++] = mm_engine_flags_name(c);
            if (mm_engine_flags_has_value(c))
                o.engine_args[o.n_engine_args++] = optarg;
            break;
        }
    }
    if (mm_engine_flags_finish(&eo, &err) < 0) {
        fprintf(stderr, "mmh3 serve: %s\n", err.msg);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "mmh3 serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    {
        /* Refuse a bad Oxen configuration here, not in a restarting worker. */
        mm_oxen_options ox;
        mm_oxen_options_from_env(&ox);
        mm_error oerr = {{0}};
        if (mm_oxen_options_check(&ox, &oerr) < 0) {
            fprintf(stderr, "mmh3 serve: %s\n", oerr.msg);
            return 2;
        }
    }
    mm_log_init("serve");
    if (mm_serve_run(&o, &err) < 0) {
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
