/* mmh3 worker — the GPU worker process (one per GPU host). `mmh3 serve`
 * starts one; on other GPU hosts run it by hand or from mmh3-worker.service,
 * pointed at the same database and a shared outputs folder. */
#include "config.h"

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

/* --oxen-token: kept in a copy (target: the char * the caller owns, blanked
 * and freed there), then blanked on the command line (ps shows argv). */
static int keep_token(const mm_flag *f, char *v, mm_error *why)
{
    char **token = f->target;
    free(*token);
    if (!(*token = strdup(v)))
        return mm_fail(why, "out of memory");
    memset(v, 'x', strlen(v));
    return 0;
}

static mm_flags_result parse_flags(mm_worker_options *o, mm_oxen_options *oxen, const char **db, char **token,
                                   int argc, char **argv)
{
    mm_flag engine[MM_ENGINE_FLAGS_MAX];
    int n_engine = mm_engine_flags_rows(MM_ENGINE_CMD_WORKER, &o->engine, engine);
    const mm_flag rows[] = {
        {"--db", NULL, MM_FLAG_STRING, db,
         "database (libpq URL or conninfo); default $MMH3_DATABASE_URL, else \"" MM_DB_DEFAULT_URL "\"", .arg = "URL"},
        {"--outputs", NULL, MM_FLAG_STRING, &o->outputs,
         "outputs folder shared with the API (default $MMH3_OUTPUTS, else ./outputs)", .arg = "DIR"},
        {"--mock", NULL, MM_FLAG_SET_STR, &o->engine_kind, "use the mock engine (FFmpeg test pattern; no weights, no GPU)",
         .set_str = "mock"},
        {"--mock-seconds", NULL, MM_FLAG_DOUBLE, &o->engine.mock_seconds,
         "mock engine: wall time of one job (default 5)", .arg = "S", .min = 0, .above_min = true, .max = 3600,
         .accepted = "seconds > 0 and <= 3600"},
        {"--max-attempts", NULL, MM_FLAG_INT, &o->max_attempts,
         "renders started before a crashing job is failed (default 3)", .arg = "N", .min = 1, .max = 100},
        {"--lease", NULL, MM_FLAG_DOUBLE, &o->lease_seconds,
         "seconds without a heartbeat before a worker is presumed dead (default 30)", .arg = "S", .min = 3,
         .max = 86400, .accepted = "seconds 3..86400"},
        {"--name", NULL, MM_FLAG_STRING, &o->name, "worker id (default host:pid:random)", .arg = "ID"},
        {"--preview-interval", NULL, MM_FLAG_INT, &o->preview_interval_ms,
         "live previews of a render at most every MS milliseconds (default 500)", .arg = "MS", .min = 0,
         .max = 3600000},
        {.kind = MM_FLAG_SECTION, .help = "\nThe real engine (the same flags as mmh3 generate and mmh3 serve):"},
        {.kind = MM_FLAG_GROUP, .rows = engine, .n_rows = n_engine},
        {.kind = MM_FLAG_SECTION, .help = "\nOxen.ai (off unless a remote is given; see docs/OXEN-INTEGRATION.md):"},
        {"--oxen-remote", NULL, MM_FLAG_STRING, &oxen->remote,
         "hub repository https://hub.oxen.ai/<namespace>/<repo> ($MMH3_OXEN_REMOTE): renders are mirrored there, "
         "and idle workers claim hub jobs",
         .arg = "URL"},
        {"--oxen-token", NULL, MM_FLAG_CUSTOM, token,
         "API key ($MMH3_OXEN_TOKEN, preferred: a flag shows in ps); default: the key stored through /api/settings",
         .arg = "TOKEN", .apply = keep_token},
        {"--oxen-model", NULL, MM_FLAG_STRING, &oxen->model,
         "the hub model name whose queued jobs we claim (default minimax-h3)", .arg = "NAME"},
        {"--oxen-poll", NULL, MM_FLAG_DOUBLE, &oxen->poll_seconds,
         "claim loop interval while idle (default 10; 0 disables claiming)", .arg = "S", .min = 0, .max = 86400,
         .accepted = "seconds 0..86400 (0 disables claiming)"},
        {"--oxen-timeout", NULL, MM_FLAG_DOUBLE, &oxen->timeout, "seconds per hub call before it is retried (default 60)",
         .arg = "S", .min = 0.1, .max = 3600, .accepted = "seconds 0.1..3600"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    const mm_flags_cmd cmd = {
        .prog = "mmh3 worker",
        .synopsis = "usage: mmh3 worker [options]\n"
                    "\n"
                    "Claims queued generations from the PostgreSQL queue and renders them.\n"
                    "\n",
        .rows = rows,
        .n_rows = MM_FLAGS_COUNT(rows),
        .help_column = 22,
    };
    return mm_flags_parse(&cmd, argc, argv);
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
    mm_flags_result parsed = parse_flags(&o, &oxen, &db, token, argc, argv);
    if (parsed != MM_FLAGS_RUN)
        return mm_flags_exit_status(parsed);
    if (*token)
        oxen.token = *token;
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
