/* The api_tokens table (sql/003_auth.sql): only SHA-256 digests of the
 * tokens are stored, under names. src/auth/tokens.h makes and checks tokens;
 * this is where they are kept. */
#ifndef MMH3_STORE_TOKENS_H
#define MMH3_STORE_TOKENS_H

#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "core/error.h"

/* Stores a digest under name; a revoked token of that name is replaced.
 * *stored is false when an active token has the name. */
int mm_store_token_insert(PGconn *c, const char *name, const uint8_t digest[32], bool *stored, mm_error *err);
/* Revokes the active token called name; *found says whether there was one. */
int mm_store_token_revoke(PGconn *c, const char *name, bool *found, mm_error *err);
/* Tokens ever made (rows, revoked ones included) and active ones. */
int mm_store_token_count(PGconn *c, long *total, long *active, mm_error *err);
/* The first token of a server: stores it only when no token was ever made,
 * with the table locked (two processes starting at once make one). */
int mm_store_token_insert_first(PGconn *c, const char *name, const uint8_t digest[32], bool *stored, mm_error *err);

typedef struct mm_store_token_row {
    char name[65]; /* at most 64 characters (sql/003_auth.sql) */
    uint8_t digest[32];
    char created[24], last_used[24], state[40]; /* for `mmh3 token list` */
} mm_store_token_row;

/* Every token (all = true, oldest first, for listing) or the active ones
 * (their digests, for checking requests). *rows is the caller's to free. */
int mm_store_tokens_read(PGconn *c, bool all, mm_store_token_row **rows, int *n, mm_error *err);
/* Notes a token's use (last_used_at). */
int mm_store_token_mark_used(PGconn *c, const char *name, mm_error *err);

#endif
