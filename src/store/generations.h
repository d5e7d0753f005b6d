/* The generations as the HTTP API and its event stream see them: one row's
 * object, history pages with search, ratings, cancel/delete, the status
 * document, the queue's load, and the event catch-up.
 *
 * Every object is built by the database (generation_json, status_json in
 * sql/) so the API, the SSE relay and the catch-up send identical JSON;
 * functions hand it back as text the caller frees.
 */
#ifndef MMH3_STORE_GENERATIONS_H
#define MMH3_STORE_GENERATIONS_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "core/error.h"

/* The generation's object; *json is NULL when no generation has that id. */
int mm_store_generation_json(PGconn *c, const char *id, char **json, mm_error *err);
/* Sets (or with NULL clears) the rating; *json as above. */
int mm_store_rate(PGconn *c, const char *id, const char *rating, char **json, mm_error *err);

typedef enum mm_cancel_result {
    MM_CANCEL_NOT_FOUND,
    MM_CANCEL_CANCELLED,  /* was queued */
    MM_CANCEL_CANCELLING, /* is rendering: its worker stops at the next step */
    MM_CANCEL_DELETED,    /* had ended: the row is gone; its files are the caller's to remove */
    MM_CANCEL_BUSY,       /* kept changing state under us */
} mm_cancel_result;

/* DELETE /api/ai/queue/{id}. After MM_CANCEL_DELETED, *result_path and
 * *poster_path (relative to the outputs folder, or NULL) are the caller's. */
int mm_store_cancel_or_delete(PGconn *c, const char *id, mm_cancel_result *result, char **result_path,
                              char **poster_path, mm_error *err);

#define MM_STORE_LIST_STATUSES_MAX 24

typedef struct mm_store_list_query {
    const char *statuses[MM_STORE_LIST_STATUSES_MAX]; /* any of; none = all */
    int n_statuses;
    const char *search; /* a substring of the prompt (case-insensitive), or NULL */
    const char *rating; /* "approved", "rejected", "none" or NULL */
    long limit, offset;
} mm_store_list_query;

/* {"count", "generations"}, newest first. */
int mm_store_list(PGconn *c, const mm_store_list_query *q, char **json, mm_error *err);

/* A cursor page for GET /v1/videos: up to limit generations enqueued after
 * (ascending) or before (descending) the one with the id `after` (NULL: from
 * the start), as {"generations": [...], "has_more": bool}. *json is NULL
 * when `after` names no generation. */
int mm_store_list_after(PGconn *c, const char *after, bool ascending, long limit, char **json, mm_error *err);

/* GET /api/status's document. */
int mm_store_status_json(PGconn *c, const char *version, double lease_seconds, char **json, mm_error *err);
/* Generations waiting. */
int mm_store_queued_count(PGconn *c, long *queued, mm_error *err);
/* Generations waiting, and the recent average render (0 when none). */
int mm_store_queue_load(PGconn *c, long *queued, double *typical_seconds, mm_error *err);

/* ---------------------------------------------------------------- events */

/* Whether an event id can no longer be caught up with (older than the pruned
 * tombstones, or from another database's numbering). */
int mm_store_events_expired(PGconn *c, long long last_seq, bool *expired, mm_error *err);

/* event is "generation_update" or "generation_deleted"; false stops the walk. */
typedef bool (*mm_store_event_fn)(void *user, long long seq, const char *event, const char *json);

/* The changes after seq `after`, in seq order: each changed row's object and
 * each deletion. More than max of them: *overflow, and none is passed on. */
int mm_store_events_since(PGconn *c, long long after, int max, mm_store_event_fn each, void *user, bool *overflow,
                          mm_error *err);

typedef struct mm_store_row {
    char id[40];
    long long seq;
    char *json;
} mm_store_row;

/* The current objects of these generations (those that still exist). */
int mm_store_generations_snapshot(PGconn *c, const char *const *ids, int n, mm_store_row **rows, int *n_rows,
                                  mm_error *err);
void mm_store_rows_free(mm_store_row *rows, int n);

#endif
