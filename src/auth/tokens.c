#include "auth/tokens.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/sha256.h"
#include "store/tokens.h"

int mm_token_generate(char out[MM_TOKEN_LEN + 1], mm_error *err)
{
    uint8_t bits[32];
    size_t got = 0;
    while (got < sizeof bits) {
        ssize_t k = getrandom(bits + got, sizeof bits - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return mm_fail_errno(err, "reading random bits for a token");
        got += (size_t)k;
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(out, MM_TOKEN_PREFIX, 5);
    for (size_t i = 0; i < sizeof bits; i++) {
        out[5 + 2 * i] = hex[bits[i] >> 4];
        out[5 + 2 * i + 1] = hex[bits[i] & 15];
    }
    out[MM_TOKEN_LEN] = '\0';
    memset(bits, 0, sizeof bits);
    return 0;
}

void mm_token_digest(const char *token, size_t len, uint8_t digest[32])
{
    mm_sha256(token, len, digest);
}

bool mm_token_digest_equal(const uint8_t a[32], const uint8_t b[32])
{
    volatile uint8_t diff = 0;
    for (int i = 0; i < 32; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

bool mm_token_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > MM_TOKEN_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

int mm_token_create(PGconn *db, const char *name, char secret_out[MM_TOKEN_LEN + 1], mm_error *err)
{
    if (!mm_token_name_valid(name))
        return mm_fail(err, "token name '%.80s': accepted: %s", name, MM_TOKEN_NAME_ACCEPTED);
    char secret[MM_TOKEN_LEN + 1];
    if (mm_token_generate(secret, err) < 0)
        return -1;
    uint8_t d[32];
    mm_token_digest(secret, MM_TOKEN_LEN, d);
    bool stored = false;
    if (mm_store_token_insert(db, name, d, &stored, err) < 0)
        return mm_error_prefix(err, "storing token '%s'", name);
    if (!stored)
        return mm_fail(err, "a token named '%s' is already active; revoke it first (mmh3 token revoke %s) or "
                            "pick another name", name, name);
    memcpy(secret_out, secret, sizeof secret);
    return 0;
}

int mm_token_revoke(PGconn *db, const char *name, bool *found, mm_error *err)
{
    if (mm_store_token_revoke(db, name, found, err) < 0)
        return mm_error_prefix(err, "revoking token '%s'", name);
    return 0;
}

int mm_token_count(PGconn *db, long *total, long *active, mm_error *err)
{
    if (mm_store_token_count(db, total, active, err) < 0)
        return mm_error_prefix(err, "counting tokens");
    return 0;
}

int mm_token_ensure_first(PGconn *db, bool *created, char secret_out[MM_TOKEN_LEN + 1], mm_error *err)
{
    *created = false;
    char secret[MM_TOKEN_LEN + 1];
    if (mm_token_generate(secret, err) < 0)
        return -1;
    uint8_t d[32];
    mm_token_digest(secret, MM_TOKEN_LEN, d);
    if (mm_store_token_insert_first(db, "default", d, created, err) < 0)
        return mm_error_prefix(err, "storing token 'default'");
    if (*created)
        memcpy(secret_out, secret, sizeof secret);
    explicit_bzero(secret, sizeof secret);
    return 0;
}
