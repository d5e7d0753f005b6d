/* mmh3 worker — the GPU worker process (one per GPU host). `mmh3 serve`
 * starts one; on other GPU hosts run it by hand or from mmh3-worker.service,
 * pointed at the same database and a shared outputs folder. */
#include "config.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"

#ifdef MMH3_HAVE_SERVER
#include "cli/engine_flags.h"
#include "core/log.h"
#include "oxen/agent.h"
#include "store/db.h"
#include "worker/worker.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3 worker [options]\n"
            "\n"
            "Claims queued generations from the PostgreSQL queue and renders them.\n"
            "\n"
            "  --db URL            database (libpq URL or conninfo); default $MMH3_DATABASE_URL, else \"%s\"\n"
            "  --outputs DIR       outputs folder shared with the API (default $MMH3_OUTPUTS, else ./outputs)\n"
            "  --mock              use the mock engine (FFmpeg test pattern; no weights, no GPU)\n"
            "  --mock-seconds S    mock engine: wall time of one job (default 5)\n"
            "  --max-attempts N    renders started before a crashing job is failed (default 3)\n"
            "  --lease S           seconds without a heartbeat before a worker is presumed dead (default 30)\n"
            "  --name ID           worker id (default host:pid:random)\n"
            "\n"
            "The real engine (the same flags as mmh3 generate and mmh3 serve):\n",
            MM_DB_DEFAULT_URL);
    mm_engine_flags_usage(out, MM_ENGINE_CMD_WORKER, 2, 22);
    fprintf(out,
            "\n"
            "Oxen.ai (off unless a remote is given; see docs/OXEN-INTEGRATION.md):\n"
            "  --oxen-remote URL   hub repository https://hub.oxen.ai/<namespace>/<repo> ($MMH3_OXEN_REMOTE):\n"
            "                      renders are mirrored there, and idle workers claim hub jobs\n"
            "  --oxen-token TOKEN  API key ($MMH3_OXEN_TOKEN, preferred: a flag shows in ps);\n"
            "                      default: the key stored through /api/settings\n"
            "  --oxen-model NAME   the hub model name whose queued jobs we claim (default minimax-h3)\n"
            "  --oxen-poll S       claim loop interval while idle (default 10; 0 disables claiming)\n"
            "  --oxen-timeout S    seconds per hub call before it is retried (default 60)\n");
}

/* The worker's hooks, wired to the Oxen.ai agent (which does nothing unless
 * a remote is configured). */
static int oxen_start(void *user, const char *db_url, const char *outputs, const char *worker_id, mm_error *err)
{
    if (mm_oxen_agent_start(user, db_url, outputs, worker_id, err) < 0)
        return mm_error_prefix(err, "starting the Oxen agent");
    return 0;
}

static void oxen_stop(void *user)
{
    (void)user;
    mm_oxen_agent_stop();
}

static void oxen_render_started(void *user, PGconn *db, const char *generation_id)
{
    (void)user;
    mm_oxen_render_started(db, generation_id);
}

static void oxen_render_ended(void *user, const char *generation_id)
{
    (void)user;
    mm_oxen_render_ended(generation_id);
}

/* token: the --oxen-token copy, owned by mm_cmd_worker (blanked and freed there). */
static int worker_with_args(int argc, char **argv, char **token)
{
    mm_worker_options o;
    mm_worker_options_defaults(&o);
    mm_oxen_options oxen;
    mm_oxen_options_from_env(&oxen);
    o.hooks = (mm_worker_hooks){.user = &oxen,
                                .start = oxen_start,
                                .stop = oxen_stop,
                                .render_started = oxen_render_started,
                                .render_ended = oxen_render_ended};
    mm_error err = {{0}};
    const char *db = NULL;
    if (getenv("MMH3_OUTPUTS"))
        o.outputs = getenv("MMH3_OUTPUTS");
    enum {
        O_DB = 256, O_OUTPUTS, O_MOCK, O_MOCK_SECONDS, O_ATTEMPTS, O_LEASE, O_NAME, O_OXEN_REMOTE, O_OXEN_TOKEN,
        O_OXEN_MODEL, O_OXEN_POLL, O_OXEN_TIMEOUT
    };
    static const struct option own[] = {
        {"db", required_argument, 0, O_DB},
        {"outputs", required_argument, 0, O_OUTPUTS},
        {"mock", no_argument, 0, O_MOCK},
        {"mock-seconds", required_argument, 0, O_MOCK_SECONDS},
        {"max-attempts", required_argument, 0, O_ATTEMPTS},
        {"lease", required_argument, 0, O_LEASE},
        {"name", required_argument, 0, O_NAME},
        {"oxen-remote", required_argument, 0, O_OXEN_REMOTE},
        {"oxen-token", required_argument, 0, O_OXEN_TOKEN},
        {"oxen-model", required_argument, 0, O_OXEN_MODEL},
        {"oxen-poll", required_argument, 0, O_OXEN_POLL},
        {"oxen-timeout", required_argument, 0, O_OXEN_TIMEOUT},
        {"help", no_argument, 0, 'h'},
    };
    struct option opts[sizeof own / sizeof own[0] + MM_ENGINE_FLAGS_MAX + 1];
    int n_opts = (int)(sizeof own / sizeof own[0]);
    memcpy(opts, own, sizeof own);
    mm_engine_flags_options(MM_ENGINE_CMD_WORKER, opts, &n_opts);
    int c, li = 0;
    char *end;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, &li)) != -1) {
        switch (c) {
        case O_DB: db = optarg; break;
        case O_OUTPUTS: o.outputs = optarg; break;
        case O_MOCK: o.engine_kind = "mock"; break;
        case O_MOCK_SECONDS:
            o.engine.mock_seconds = strtod(optarg, &end);
            if (*end || !(o.engine.mock_seconds > 0) || o.engine.mock_seconds > 3600) {
                fprintf(stderr, "mmh3 worker: --mock-seconds %s: accepted: seconds > 0 and <= 3600\n", optarg);
                return 2;
            }
            break;
        case O_ATTEMPTS:
            if (!mm_flag_int(optarg, 1, 100, &o.max_attempts)) {
                fprintf(stderr, "mmh3 worker: --max-attempts %s: accepted: integer 1..100\n", optarg);
                return 2;
            }
            break;
        case O_LEASE:
            o.lease_seconds = strtod(optarg, &end);
            if (*end || o.lease_seconds < 3 || o.lease_seconds > 86400) {
                fprintf(stderr, "mmh3 worker: --lease %s: accepted: seconds 3..86400\n", optarg);
                return 2;
            }
            break;
        case O_NAME: o.name = optarg; break;
        case O_OXEN_REMOTE: oxen.remote = optarg; break;
        case O_OXEN_TOKEN:
            /* Kept, then blanked on the command line (ps shows argv). */
            free(*token);
            if (!(*token = strdup(optarg))) {
                fprintf(stderr, "mmh3 worker: out of memory\n");
                return 1;
            }
            oxen.token = *token;
            memset(optarg, 'x', strlen(optarg));
            break;
        case O_OXEN_MODEL: oxen.model = optarg; break;
        case O_OXEN_POLL:
            oxen.poll_seconds = strtod(optarg, &end);
            if (*end) {
                fprintf(stderr, "mmh3 worker: --oxen-poll %s: accepted: seconds 0..86400 (0 disables claiming)\n",
                        optarg);
                return 2;
            }
            break;
        case O_OXEN_TIMEOUT:
            oxen.timeout = strtod(optarg, &end);
            if (*end) {
                fprintf(stderr, "mmh3 worker: --oxen-timeout %s: accepted: seconds 0.1..3600\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "mmh3 worker: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            if (!mm_engine_flags_owns(c)) {
                fprintf(stderr, "mmh3 worker: unknown option '%s' (see mmh3 worker --help)\n", argv[optind - 1]);
                return 2;
            }
            if (mm_engine_flags_apply(c, opts[li].name, optarg, &o.engine, &err) < 0) {
                fprintf(stderr, "mmh3 worker: %s\n", err.msg);
                return 2;
            }
            break;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mmh3 worker: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (mm_engine_flags_finish(&o.engine, &err) < 0) {
        fprintf(stderr, "mmh3 worker: %s\n", err.msg);
        return 2;
    }
    o.db_url = mm_db_url(db);
    mm_log_init("worker");
    if (mm_oxen_options_check(&oxen, &err) < 0) {
        fprintf(stderr, "mmh3 worker: %s\n", err.msg);
        return 2;
    }
    if (mm_worker_run(&o, &err) < 0) {
        mm_log("%s", err.msg);
        return 1;
    }
    return 0;
}

int mm_cmd_worker(int argc, char **argv)
{
    char *token = NULL;
    int rc = worker_with_args(argc, argv, &token);
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    return rc;
}
#else
int mm_cmd_worker(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mmh3 worker: this mmh3 was configured without the serving stack (--without-server); "
                    "rebuild with libpq-dev, libfcgi-dev, libcurl4-openssl-dev, nginx and postgresql installed\n");
    return 1;
}
#endif
