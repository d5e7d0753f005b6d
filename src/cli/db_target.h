/* Which database a command-line tool talks to (mmh3 token, mmh3 db): --db,
 * else $MMH3_DATABASE_URL, else the socket of the private cluster of a
 * running `mmh3 serve --outputs DIR`. */
#ifndef MMH3_CLI_DB_TARGET_H
#define MMH3_CLI_DB_TARGET_H

#include <stddef.h>

/* The outputs folder: --outputs's value, else $MMH3_OUTPUTS, else ./outputs. */
const char *mm_cli_outputs(const char *flag);
/* The libpq conninfo (buf holds it when built here), or NULL when none of
 * the three names one: the caller decides (the default URL, or a refusal). */
const char *mm_cli_database(const char *flag, const char *outputs, char *buf, size_t n);

#endif
