/* Uploaded references (POST /api/images): their rows, their objects, and the
 * lookup an enqueue makes of the ones it names. */
#ifndef MMH3_STORE_UPLOADS_H
#define MMH3_STORE_UPLOADS_H

#include <stdbool.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "core/error.h"
#include "request/request.h"

typedef struct mm_store_upload {
    char id[37];
    char rel[128];        /* uploads/<id>.<ext>, relative to the outputs folder */
    char poster_rel[128]; /* "" or uploads/<id>.poster.jpg */
    char kind[8];         /* image, video or audio */
    char content_type[64];
    char format_name[64];
    char codec_name[64];
    char original_name[256]; /* "" when none */
    long long bytes;
    int width, height; /* 0 for audio */
    double duration;   /* 0 for images */
    bool has_audio;
} mm_store_upload;

/* Records n uploads in one transaction (all or none) and appends their
 * objects (upload_json) to `objects`. */
int mm_store_uploads_insert(PGconn *c, const mm_store_upload *u, int n, json_t *objects, mm_error *err);
/* The upload's object; *json is NULL when no upload has that id. */
int mm_store_upload_json(PGconn *c, const char *id, char **json, mm_error *err);
/* The references of a request, by upload id: kind, width and height of each
 * that exists (request/request.h's lookup). */
int mm_store_uploads_lookup(PGconn *c, mm_request_refs *refs, mm_error *err);

#endif
