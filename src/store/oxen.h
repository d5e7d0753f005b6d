/* The Oxen.ai integration's rows (sql/004_oxen.sql): the mirroring state of
 * generations, the claim loop's journal (oxen_claims), and the advisory lock
 * that keeps hub writes sequential across workers. Hub jobs become rows
 * through mm_store_enqueue (store/jobs.h), like API requests. */
#ifndef MMH3_STORE_OXEN_H
#define MMH3_STORE_OXEN_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "core/error.h"

/* Marks a starting render for mirroring (oxen_status 'starting') when a key
 * is there: given (key_given) or stored in the settings. */
int mm_store_oxen_mark_render(PGconn *c, const char *generation_id, bool key_given, mm_error *err);

/* What mirroring a render needs of its row. */
typedef struct mm_store_mirror {
    char id[40], status[16], oxen_status[16];
    char *hub_job_id; /* oxen_job_id, or NULL for a local request */
    char *prompt, *result_path, *error_message, *worker_id; /* the last three may be NULL */
    int frames, width, height;
    long long seed, steps;
    bool has_started, has_completed;
    long long enqueued_at, started_at, completed_at; /* unix seconds */
} mm_store_mirror;

/* The next render to mirror (one starting, or pending and ended), oldest
 * first; *found false when there is none. */
int mm_store_oxen_next_mirror(PGconn *c, mm_store_mirror *m, bool *found, mm_error *err);
void mm_store_mirror_free(mm_store_mirror *m);
/* Moves a render's oxen_status from `from` to `to` (no-op when it moved on). */
int mm_store_oxen_set_state(PGconn *c, const char *id, const char *from, const char *to, const char *message,
                            mm_error *err);

/* Writes a listed hub job down before the hub hears of it, with a fresh local
 * id (its claim token) into generation_id; *is_new is false when the job was
 * known already (claimed, lost or refused before). */
int mm_store_oxen_claim_journal(PGconn *c, const char *hub_id, const char *job_json, char generation_id[40],
                                bool *is_new, mm_error *err);
int mm_store_oxen_claim_set(PGconn *c, const char *hub_id, const char *state, const char *message, mm_error *err);
/* Whether the hub job's claim is in state 'claimed'. */
int mm_store_oxen_claim_is_claimed(PGconn *c, const char *hub_id, bool *claimed, mm_error *err);

/* Claims a killed worker left half done ('claiming'), oldest first; false from
 * each stops the walk. */
typedef bool (*mm_store_claim_fn)(void *user, const char *hub_id, const char *generation_id, const char *job_json);
int mm_store_oxen_claims_open(PGconn *c, mm_store_claim_fn each, void *user, mm_error *err);

/* The session-level lock that serialises hub writes; *locked false when
 * another worker's agent holds it. */
int mm_store_oxen_try_lock(PGconn *c, bool *locked, mm_error *err);
int mm_store_oxen_unlock(PGconn *c, mm_error *err);

#endif
