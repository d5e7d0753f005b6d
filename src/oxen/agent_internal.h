/* State shared by the agent's thread (agent.c) and its two duties
 * (mirror.c, claim.c). Not for use outside src/oxen/. */
#ifndef MMH3_OXEN_AGENT_INTERNAL_H
#define MMH3_OXEN_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <libpq-fe.h>

#include "oxen/agent.h"
#include "oxen/client.h"

typedef struct mm_oxen_agent {
    char *remote, *token, *model, *db_url, *outputs, *worker_id;
    double poll_seconds;
    PGconn *db;              /* the agent's own connection */
    mm_oxen_client client;   /* its token refreshed from the settings when none was given */
    atomic_bool quit;        /* also the client's cancel flag */
    atomic_bool busy;        /* the worker is rendering */
    atomic_bool active;      /* a key is known: the agent talks to the hub */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool woken;
    pthread_t thread;
    double next_poll, next_resume;
    char last_complaint[256]; /* logged once until it changes */
} mm_oxen_agent;

/* Mirrors the next generation that needs it; *did is false when none does.
 * -1 only for database trouble (hub trouble is recorded on the row). */
int mm_oxen_mirror_next(mm_oxen_agent *a, bool *did, mm_error *err);

/* Carries on claims a killed worker left half done. */
int mm_oxen_claims_resume(mm_oxen_agent *a, mm_error *err);
/* Lists the hub's queue and claims one job when there is one we can render. */
int mm_oxen_claim_poll(mm_oxen_agent *a, mm_error *err);

/* Logs a line unless it repeats the previous complaint. */
void mm_oxen_complain(mm_oxen_agent *a, const char *msg);

#endif
