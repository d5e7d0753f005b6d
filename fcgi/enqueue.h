/* POST /api/ai/queue's work, shared with POST /v1/videos: the body read
 * (request/json.c), settled (mm_request_settle, references looked up in the
 * uploads table) and queued (mm_store_enqueue). */
#ifndef MMH3_FCGI_ENQUEUE_H
#define MMH3_FCGI_ENQUEUE_H

#include <jansson.h>

#include "fcgi/app.h"

/* 0 with *rows the JSON array text of the new generation objects (caller
 * frees), or -1 after answering the error itself (nothing is stored). */
int mm_enqueue_insert(mm_req *r, json_t *body, char **rows);

#endif
