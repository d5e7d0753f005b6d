/* POST /api/ai/queue's work, shared with POST /v1/videos: the body read
 * (request/json.c), settled (mm_request_settle, references looked up in the
 * uploads table) and queued (mm_store_enqueue). */
#ifndef MMH3_FCGI_ENQUEUE_H
#define MMH3_FCGI_ENQUEUE_H

#include <jansson.h>

#include "fcgi/app.h"

#include "request/rules.h"
#include "store/generations.h"

/* 0 with *rows the JSON array text of the new generation objects (caller
 * frees) and *notes the values snapped on the way (notes may be NULL), or -1
 * after answering the error itself (nothing is stored). */
int mm_enqueue_insert(mm_req *r, json_t *body, char **rows, mm_rule_notes *notes);

/* "X-MMH3-Warning: <the notes, joined by " | ">" when there are any, for
 * clients that read headers and not the body's "warnings". */
void mm_add_warning_header(mm_req *r, const mm_rule_notes *notes);

/* DELETE's work for /api/ai/queue/{id} and /v1/videos/{id}: a queued job is
 * cancelled, a rendering one asked to stop, an ended one removed with its
 * files; -1 after answering a database failure. */
int mm_queue_cancel_or_delete(mm_req *r, const char *id, mm_cancel_result *result);

#endif
