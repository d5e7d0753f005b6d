#include "config.h"

#include "cli/db_target.h"

#ifdef MMH3_HAVE_SERVER

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

const char *mm_cli_outputs(const char *flag)
{
    if (flag)
        return flag;
    const char *env = getenv("MMH3_OUTPUTS");
    return env && *env ? env : "outputs";
}

const char *mm_cli_database(const char *flag, const char *outputs, char *buf, size_t n)
{
    if (flag)
        return flag;
    const char *env = getenv("MMH3_DATABASE_URL");
    if (env && *env)
        return env;
    char abs[PATH_MAX], sock[PATH_MAX + 64];
    struct stat st;
    if (realpath(outputs, abs)) {
        snprintf(sock, sizeof sock, "%s/.mmh3/pg.sock/.s.PGSQL.5432", abs);
        if (stat(sock, &st) == 0) {
            snprintf(buf, n, "host=%s/.mmh3/pg.sock port=5432 dbname=mmh3 user=mmh3", abs);
            return buf;
        }
    }
    return NULL;
}
#endif
