/* multipart/form-data (RFC 7578) over a body held in memory: the parts are
 * views into the body, nothing is copied. Pure and bounded, so it can be
 * fuzzed on its own. */
#ifndef MMH3_FCGI_MULTIPART_H
#define MMH3_FCGI_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mm_mp_part {
    char name[128];         /* form field name ("" if none) */
    char filename[256];     /* "" when the part is not a file */
    char content_type[128]; /* as the client said; never trusted */
    const uint8_t *data;
    size_t len;
} mm_mp_part;

/* Takes the boundary from a Content-Type header value. */
int mm_multipart_boundary(const char *content_type, char *boundary, size_t n, mm_error *err);

/* Splits body into at most max parts; *n_parts is how many. Fails on a
 * malformed body or more than max parts. */
int mm_multipart_parse(const char *boundary, const uint8_t *body, size_t len, mm_mp_part *parts, int max,
                       int *n_parts, mm_error *err);

#endif
