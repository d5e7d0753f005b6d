#include "store/tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sql.h"

/* "\x<64 hex>", bytea's text input. */
static void digest_param(const uint8_t d[32], char out[67])
{
    static const char hex[] = "0123456789abcdef";
    out[0] = '\\', out[1] = 'x';
    for (int i = 0; i < 32; i++) {
        out[2 + 2 * i] = hex[d[i] >> 4];
        out[3 + 2 * i] = hex[d[i] & 15];
    }
    out[66] = '\0';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0;
}

int mm_store_token_insert(PGconn *c, const char *name, const uint8_t digest[32], bool *stored, mm_error *err)
{
    char dp[67];
    digest_param(digest, dp);
    const char *p[] = {name, dp};
    PGresult *r;
    if (mm_db_query(c,
                    "INSERT INTO api_tokens AS t (name, token_sha256) VALUES ($1, $2::bytea)"
                    " ON CONFLICT (name) DO UPDATE SET token_sha256 = EXCLUDED.token_sha256, created_at = now(),"
                    "   last_used_at = NULL, revoked_at = NULL WHERE t.revoked_at IS NOT NULL"
                    " RETURNING name",
                    2, p, &r, err) < 0)
        return -1;
    *stored = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int mm_store_token_revoke(PGconn *c, const char *name, bool *found, mm_error *err)
{
    const char *p[] = {name};
    PGresult *r;
    if (mm_db_query(c, "UPDATE api_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL RETURNING 1",
                    1, p, &r, err) < 0)
        return -1;
    *found = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int mm_store_token_count(PGconn *c, long *total, long *active, mm_error *err)
{
    PGresult *r;
    if (mm_db_query(c, "SELECT count(*), count(*) FILTER (WHERE revoked_at IS NULL) FROM api_tokens", 0, NULL, &r,
                    err) < 0)
        return -1;
    *total = atol(PQgetvalue(r, 0, 0));
    *active = atol(PQgetvalue(r, 0, 1));
    PQclear(r);
    return 0;
}

int mm_store_token_insert_first(PGconn *c, const char *name, const uint8_t digest[32], bool *stored, mm_error *err)
{
    *stored = false;
    long total = 0, active = 0;
    if (mm_db_exec(c, "BEGIN; LOCK TABLE api_tokens IN SHARE ROW EXCLUSIVE MODE", err) < 0 ||
        mm_store_token_count(c, &total, &active, err) < 0 ||
        (total == 0 && mm_store_token_insert(c, name, digest, stored, err) < 0)) {
        mm_db_rollback(c);
        *stored = false;
        return -1;
    }
    if (mm_db_commit(c, err) < 0) {
        *stored = false;
        return -1;
    }
    return 0;
}

int mm_store_tokens_read(PGconn *c, bool all, mm_store_token_row **rows, int *n, mm_error *err)
{
    *rows = NULL;
    *n = 0;
    PGresult *r;
    if (mm_db_query(c,
                    all ? "SELECT name, encode(token_sha256, 'hex'), to_char(created_at, 'YYYY-MM-DD HH24:MI:SS'),"
                          "       COALESCE(to_char(last_used_at, 'YYYY-MM-DD HH24:MI:SS'), '-'),"
                          "       CASE WHEN revoked_at IS NULL THEN 'active'"
                          "            ELSE 'revoked ' || to_char(revoked_at, 'YYYY-MM-DD HH24:MI:SS') END"
                          "  FROM api_tokens ORDER BY created_at, name"
                        : "SELECT name, encode(token_sha256, 'hex'), '', '', 'active'"
                          "  FROM api_tokens WHERE revoked_at IS NULL",
                    0, NULL, &r, err) < 0)
        return -1;
    int k = PQntuples(r);
    mm_store_token_row *out = calloc(k ? (size_t)k : 1, sizeof *out);
    if (!out) {
        PQclear(r);
        return mm_fail(err, "out of memory for %d tokens", k);
    }
    for (int i = 0; i < k; i++) {
        snprintf(out[i].name, sizeof out[i].name, "%s", PQgetvalue(r, i, 0));
        const char *hex = PQgetvalue(r, i, 1);
        for (int b = 0; b < 32 && hex[2 * b] && hex[2 * b + 1]; b++)
            out[i].digest[b] = (uint8_t)(hexval(hex[2 * b]) << 4 | hexval(hex[2 * b + 1]));
        snprintf(out[i].created, sizeof out[i].created, "%s", PQgetvalue(r, i, 2));
        snprintf(out[i].last_used, sizeof out[i].last_used, "%s", PQgetvalue(r, i, 3));
        snprintf(out[i].state, sizeof out[i].state, "%s", PQgetvalue(r, i, 4));
    }
    PQclear(r);
    *rows = out;
    *n = k;
    return 0;
}

int mm_store_token_mark_used(PGconn *c, const char *name, mm_error *err)
{
    const char *p[] = {name};
    return mm_db_query(c, "UPDATE api_tokens SET last_used_at = now() WHERE name = $1", 1, p, NULL, err);
}
