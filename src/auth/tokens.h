/* Access tokens for the HTTP API (docs/SECURITY.md).
 *
 * A token is "mmh3_" + 64 hex digits: 256 bits from getrandom(). The
 * database keeps only its SHA-256 (api_tokens, sql/003_auth.sql) under a
 * name; a token is shown once, when it is made. Several named tokens can be
 * active; revoking one keeps its row (name, dates) until a new token takes
 * the name. Used by `mmh3 token`, `mmh3 serve` (the first token) and
 * mmh3-fcgi (verification).
 */
#ifndef MMH3_AUTH_TOKENS_H
#define MMH3_AUTH_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "core/error.h"

#define MM_TOKEN_PREFIX "mmh3_"
#define MM_TOKEN_LEN (5 + 64)
#define MM_TOKEN_NAME_MAX 64
#define MM_TOKEN_NAME_ACCEPTED "1..64 characters from A-Z a-z 0-9 . _ -"

/* A fresh secret into out (NUL-terminated). */
int mm_token_generate(char out[MM_TOKEN_LEN + 1], mm_error *err);
/* SHA-256 of the token's bytes (whatever they are: a wrong token hashes too). */
void mm_token_digest(const char *token, size_t len, uint8_t digest[32]);
/* Compares two digests in time independent of their contents. */
bool mm_token_digest_equal(const uint8_t a[32], const uint8_t b[32]);
bool mm_token_name_valid(const char *name);

/* Makes a token called `name` and stores its hash; the secret goes to
 * secret_out (shown to the user once). Fails when an active token has that
 * name; a revoked one is replaced. */
int mm_token_create(PGconn *db, const char *name, char secret_out[MM_TOKEN_LEN + 1], mm_error *err);
/* Revokes the active token called `name`; *found says whether there was one. */
int mm_token_revoke(PGconn *db, const char *name, bool *found, mm_error *err);
/* Number of tokens ever made (rows, revoked ones included). */
int mm_token_count(PGconn *db, long *total, long *active, mm_error *err);

/* The first start of a server that requires tokens: when no token was ever
 * made, makes one called "default"; *created says whether it did. */
int mm_token_ensure_first(PGconn *db, bool *created, char secret_out[MM_TOKEN_LEN + 1], mm_error *err);

#endif
