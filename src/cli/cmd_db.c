/* mmh3 db — psql on the queue's database: the private cluster of a running
 * `mmh3 serve` (its socket under the outputs folder), or --db URL. The
 * readable view `queue` (sql/008_queue_view.sql) is there to look at:
 * `mmh3 db -c 'TABLE queue LIMIT 20'`. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"

#ifdef MMH3_HAVE_SERVER
#include "cli/db_target.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: mmh3 db [--outputs DIR | --db URL] [PSQL ARGS...]\n"
                 "\n"
                 "Opens psql on the queue's database: the private cluster of the `mmh3 serve` running on the\n"
                 "outputs folder (its unix socket DIR/.mmh3/pg.sock, database and role mmh3; logins are\n"
                 "peer-checked: the user running serve, or root), else --db / $MMH3_DATABASE_URL.\n"
                 "Arguments after the options go to psql, e.g. mmh3 db -c 'TABLE queue LIMIT 20'.\n"
                 "\n"
                 "  --db URL       a libpq URL or conninfo (default $MMH3_DATABASE_URL)\n"
                 "  --outputs DIR  the outputs folder of that serve (default $MMH3_OUTPUTS, else ./outputs)\n"
                 "\n"
                 "The view `queue` has one line per generation, newest first: id, status, stage, step,\n"
                 "attempts, canvas, enqueued, started, completed, seconds, worker, prompt_head, error.\n");
}

int mm_cmd_db(int argc, char **argv)
{
    const char *db_flag = NULL, *outputs_flag = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        const char **slot = strcmp(a, "--db") == 0 ? &db_flag : strcmp(a, "--outputs") == 0 ? &outputs_flag : NULL;
        if (!slot)
            break; /* psql's from here on */
        if (i + 1 >= argc) {
            fprintf(stderr, "mmh3 db: %s needs a value\n", a);
            return 2;
        }
        *slot = argv[++i];
    }
    char buf[PATH_MAX + 128];
    const char *url = mm_cli_database(db_flag, mm_cli_outputs(outputs_flag), buf, sizeof buf);
    if (!url) {
        fprintf(stderr, "mmh3 db: no running mmh3 serve has its database under %s/.mmh3 (give --outputs DIR, "
                        "or --db URL)\n", mm_cli_outputs(outputs_flag));
        return 1;
    }
    int n = argc - i;
    char **args = calloc((size_t)n + 3, sizeof *args);
    if (!args) {
        fprintf(stderr, "mmh3 db: out of memory\n");
        return 1;
    }
    args[0] = "psql";
    args[1] = (char *)url;
    for (int k = 0; k < n; k++)
        args[2 + k] = argv[i + k];
    execvp("psql", args);
    fprintf(stderr, "mmh3 db: cannot run psql: %s (apt-get install postgresql-client)\n", strerror(errno));
    free(args);
    return 1;
}
#else
int mm_cmd_db(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mmh3 db: this mmh3 was configured without the serving stack (--without-server)\n");
    return 1;
}
#endif
