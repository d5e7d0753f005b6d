#include "fcgi/multipart.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Copies a header parameter value (quoted or token) of `key` from a header
 * value like `form-data; name="files"; filename="a.png"`. */
static bool header_param(const char *value, size_t vlen, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    const char *p = value, *end = value + vlen;
    while (p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        if (!semi)
            break;
        p = semi + 1;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if ((size_t)(end - p) > kl && strncasecmp(p, key, kl) == 0 && p[kl] == '=') {
            p += kl + 1;
            size_t w = 0;
            if (p < end && *p == '"') {
                p++;
                while (p < end && *p != '"') {
                    if (*p == '\\' && p + 1 < end)
                        p++;
                    if (w + 1 < n)
                        out[w++] = *p;
                    p++;
                }
            } else {
                while (p < end && *p != ';' && *p != ' ' && *p != '\t') {
                    if (w + 1 < n)
                        out[w++] = *p;
                    p++;
                }
            }
            out[w] = '\0';
            return true;
        }
    }
    return false;
}

int mm_multipart_boundary(const char *ct, char *boundary, size_t n, mm_error *err)
{
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
        return mm_fail(err, "the body is '%s', not multipart/form-data", ct ? ct : "(no Content-Type)");
    if (!header_param(ct, strlen(ct), "boundary", boundary, n) || !boundary[0])
        return mm_fail(err, "the multipart Content-Type has no boundary");
    if (strlen(boundary) > 70)
        return mm_fail(err, "the multipart boundary is longer than 70 characters");
    return 0;
}

static const uint8_t *find(const uint8_t *hay, size_t hlen, const char *needle, size_t nlen)
{
    return nlen <= hlen ? memmem(hay, hlen, needle, nlen) : NULL;
}

int mm_multipart_parse(const char *boundary, const uint8_t *body, size_t len, mm_mp_part *parts, int max,
                       int *n_parts, mm_error *err)
{
    char delim[80];
    int dl = snprintf(delim, sizeof delim, "--%s", boundary);
    if (dl < 3 || (size_t)dl >= sizeof delim)
        return mm_fail(err, "bad multipart boundary");
    *n_parts = 0;
    const uint8_t *end = body + len;
    /* The first delimiter starts the body or follows a preamble line. */
    const uint8_t *p;
    if (len >= (size_t)dl && memcmp(body, delim, (size_t)dl) == 0) {
        p = body;
    } else {
        char crdelim[84];
        int cl = snprintf(crdelim, sizeof crdelim, "\r\n%s", delim);
        p = find(body, len, crdelim, (size_t)cl);
        if (!p)
            return mm_fail(err, "the multipart body has no boundary line");
        p += 2;
    }
    char next_delim[84];
    int nl = snprintf(next_delim, sizeof next_delim, "\r\n%s", delim);
    for (;;) {
        p += dl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0; /* closing delimiter */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return mm_fail(err, "malformed multipart boundary line");
        p += 2;
        if (*n_parts >= max)
            return mm_fail(err, "more than %d parts", max);
        mm_mp_part *part = &parts[(*n_parts)++];
        memset(part, 0, sizeof *part);
        bool has_disposition = false;
        /* Headers, up to an empty line. */
        for (;;) {
            const uint8_t *eol = find(p, (size_t)(end - p), "\r\n", 2);
            if (!eol)
                return mm_fail(err, "part %d: headers do not end", *n_parts - 1);
            if (eol == p) {
                p += 2;
                break;
            }
            if (eol - p > 4096)
                return mm_fail(err, "part %d: a header line is longer than 4096 bytes", *n_parts - 1);
            const char *h = (const char *)p;
            size_t hl = (size_t)(eol - p);
            const char *colon = memchr(h, ':', hl);
            if (!colon)
                return mm_fail(err, "part %d: a header line has no ':'", *n_parts - 1);
            size_t name_len = (size_t)(colon - h);
            const char *v = colon + 1;
            while (v < h + hl && (*v == ' ' || *v == '\t'))
                v++;
            size_t vl = (size_t)(h + hl - v);
            if (name_len == 19 && strncasecmp(h, "Content-Disposition", 19) == 0) {
                if (vl < 9 || strncasecmp(v, "form-data", 9) != 0)
                    return mm_fail(err, "part %d: Content-Disposition is not form-data", *n_parts - 1);
                has_disposition = true;
                header_param(v, vl, "name", part->name, sizeof part->name);
                header_param(v, vl, "filename", part->filename, sizeof part->filename);
            } else if (name_len == 12 && strncasecmp(h, "Content-Type", 12) == 0) {
                size_t k = vl < sizeof part->content_type - 1 ? vl : sizeof part->content_type - 1;
                memcpy(part->content_type, v, k);
                part->content_type[k] = '\0';
            }
            p = eol + 2;
        }
        if (!has_disposition)
            return mm_fail(err, "part %d has no Content-Disposition", *n_parts - 1);
        const uint8_t *stop = find(p, (size_t)(end - p), next_delim, (size_t)nl);
        if (!stop)
            return mm_fail(err, "part %d does not end with a boundary (truncated upload?)", *n_parts - 1);
        part->data = p;
        part->len = (size_t)(stop - p);
        p = stop + 2;
    }
}
