/* mmh3 token — the access tokens of the HTTP API: create (shown once),
 * list, revoke. Works on the database directly, so whoever can reach the
 * database (psql users) manages access; a running server notices changes at
 * once (a revoked token's requests and event streams end). */
#include "config.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"

#ifdef MMH3_HAVE_SERVER
#include "auth/tokens.h"
#include "cli/db_target.h"
#include "store/db.h"
#include "store/migrate.h"
#include "store/tokens.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3 token create NAME | list | revoke NAME [options]\n"
            "\n"
            "Access tokens of the HTTP API (needed when `mmh3 serve` listens beyond loopback).\n"
            "\n"
            "  create NAME   makes a token and prints it once on stdout (only its hash is stored)\n"
            "  list          names, dates and state of every token (never the tokens)\n"
            "  revoke NAME   revokes a token: its requests and open event streams are refused at once\n"
            "\n"
            "  --db URL       database; default $MMH3_DATABASE_URL, else the private cluster of\n"
            "                 `mmh3 serve --outputs DIR` (running), else \"%s\"\n"
            "  --outputs DIR  the outputs folder of that serve (default $MMH3_OUTPUTS, else ./outputs)\n"
            "\n"
            "NAME: %s.\n",
            MM_DB_DEFAULT_URL, MM_TOKEN_NAME_ACCEPTED);
}

static int list(PGconn *db)
{
    mm_store_token_row *rows = NULL;
    int n = 0;
    mm_error err = {{0}};
    if (mm_store_tokens_read(db, true, &rows, &n, &err) < 0) {
        fprintf(stderr, "mmh3 token: %s\n", err.msg);
        return 1;
    }
    if (n == 0)
        fprintf(stderr, "no tokens yet (mmh3 token create NAME)\n");
    else
        printf("%-24s %-19s  %-19s  %s\n", "NAME", "CREATED", "LAST USED", "STATE");
    for (int i = 0; i < n; i++)
        printf("%-24s %-19s  %-19s  %s\n", rows[i].name, rows[i].created, rows[i].last_used, rows[i].state);
    free(rows);
    return 0;
}

int mm_cmd_token(int argc, char **argv)
{
    const char *db_flag = NULL, *outputs = mm_cli_outputs(NULL);
    enum { O_DB = 256, O_OUTPUTS };
    static const struct option opts[] = {
        {"db", required_argument, 0, O_DB},
        {"outputs", required_argument, 0, O_OUTPUTS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_DB: db_flag = optarg; break;
        case O_OUTPUTS: outputs = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *verb = optind < argc ? argv[optind] : NULL;
    const char *name = optind + 1 < argc ? argv[optind + 1] : NULL;
    bool needs_name = verb && (strcmp(verb, "create") == 0 || strcmp(verb, "revoke") == 0);
    if (!verb || (strcmp(verb, "list") != 0 && !needs_name) || (needs_name && !name) ||
        optind + (needs_name ? 2 : 1) < argc) {
        usage(stderr);
        return 2;
    }
    if (needs_name && !mm_token_name_valid(name)) {
        fprintf(stderr, "mmh3 token: name '%s': accepted: %s\n", name, MM_TOKEN_NAME_ACCEPTED);
        return 2;
    }
    char buf[PATH_MAX + 128];
    const char *url = mm_cli_database(db_flag, outputs, buf, sizeof buf);
    if (!url)
        url = MM_DB_DEFAULT_URL;
    PGconn *db;
    mm_error err = {{0}};
    if (mm_db_connect(url, "mmh3-token", &db, &err) < 0 || mm_db_migrate(db, NULL, &err) < 0) {
        fprintf(stderr, "mmh3 token: %s\n(is `mmh3 serve` running? else give --db URL or --outputs DIR)\n",
                err.msg);
        return 1;
    }
    int rc = 0;
    if (strcmp(verb, "list") == 0) {
        rc = list(db);
    } else if (strcmp(verb, "create") == 0) {
        char secret[MM_TOKEN_LEN + 1];
        if (mm_token_create(db, name, secret, &err) < 0) {
            fprintf(stderr, "mmh3 token: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s\n", secret);
            fflush(stdout);
            fprintf(stderr, "token '%s' created; it is shown only now (the database keeps its hash). Use it as "
                            "`Authorization: Bearer <token>` or on the login page.\n", name);
            memset(secret, 0, sizeof secret);
        }
    } else {
        bool found = false;
        if (mm_token_revoke(db, name, &found, &err) < 0) {
            fprintf(stderr, "mmh3 token: %s\n", err.msg);
            rc = 1;
        } else if (!found) {
            fprintf(stderr, "mmh3 token: no active token is named '%s' (mmh3 token list)\n", name);
            rc = 1;
        } else {
            fprintf(stderr, "token '%s' revoked\n", name);
        }
    }
    PQfinish(db);
    return rc;
}
#else
int mm_cmd_token(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mmh3 token: this mmh3 was configured without the serving stack (--without-server)\n");
    return 1;
}
#endif
