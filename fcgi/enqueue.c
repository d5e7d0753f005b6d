/* parse -> settle -> store for a new generation request (enqueue.h). */
#include "fcgi/enqueue.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "request/request.h"
#include "store/jobs.h"
#include "store/loras.h"
#include "store/uploads.h"

typedef struct lookup {
    mm_req *r;
    bool answered; /* mm_req_db answered (503) itself */
} lookup;

/* The references are uploads: their kinds and sizes from the database,
 * connected to only when a request names some. */
static int resolve_uploads(void *user, mm_request_refs *refs, mm_request_error *e)
{
    lookup *l = user;
    mm_error err = {{0}};
    PGconn *db = mm_req_db(l->r);
    if (!db) {
        l->answered = true;
        mm_request_fail(e, NULL, NULL, "the database is not reachable");
    } else if (mm_store_uploads_lookup(db, refs, &err) == 0) {
        return 0;
    } else {
        mm_request_fail(e, NULL, NULL, "%s", err.msg);
    }
    e->internal = true;
    return -1;
}

static void reply_refused(mm_req *r, const mm_request_error *e)
{
    char message[sizeof e->message], accepted[sizeof e->accepted];
    mm_request_render(e->message, NULL, NULL, message, sizeof message);
    mm_request_render(e->accepted, NULL, NULL, accepted, sizeof accepted);
    if (e->internal) {
        mm_log("%s %s: %s", r->method, r->path, message);
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", message);
        return;
    }
    mm_reply_error(r, 400, e->field[0] ? e->field : NULL, accepted[0] ? accepted : NULL, "%s", message);
}

void mm_add_warning_header(mm_req *r, const mm_rule_notes *notes)
{
    char line[400] = "";
    size_t w = 0;
    for (int i = 0; notes && i < notes->n && w < sizeof line; i++)
        w += (size_t)snprintf(line + w, sizeof line - w, "%s%s", i ? " | " : "", notes->msg[i]);
    if (line[0])
        mm_req_add_header(r, "X-MMH3-Warning: %s", line);
}

/* The adapter names a worker published, for a request that names adapters
 * (in->loras_known stays false until a worker has published a catalogue);
 * false after answering. */
static bool known_loras(mm_req *r, mm_request_input *in, char ***names, int *n)
{
    if (in->n_loras == 0)
        return true;
    PGconn *db = mm_req_db(r);
    if (!db)
        return false;
    mm_error err = {{0}};
    bool published = false;
    if (mm_store_lora_names(db, &published, names, n, &err) < 0) {
        mm_log("%s %s: %s", r->method, r->path, err.msg);
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err.msg);
        return false;
    }
    in->loras_known = published;
    in->known_loras = (const char *const *)*names;
    in->n_known_loras = *n;
    return true;
}

/* The body as a settled request, or false after answering. */
static bool settle(mm_req *r, json_t *body, mm_request *q)
{
    mm_request_input in;
    mm_request_error e;
    if (mm_request_input_from_json(body, &in, &e) < 0) {
        reply_refused(r, &e);
        return false;
    }
    char **names = NULL;
    int n = 0;
    if (!known_loras(r, &in, &names, &n))
        return false;
    lookup l = {.r = r};
    int rc = mm_request_settle(&in, resolve_uploads, &l, q, &e);
    if (rc < 0 && !l.answered)
        reply_refused(r, &e);
    mm_store_lora_names_free(names, n);
    return rc == 0;
}

int mm_enqueue_insert(mm_req *r, json_t *body, char **rows, mm_rule_notes *notes)
{
    *rows = NULL;
    mm_request q;
    if (!settle(r, body, &q))
        return -1;
    PGconn *db = mm_req_db(r);
    if (!db)
        return -1;
    mm_error err = {{0}};
    if (notes)
        *notes = q.notes;
    if (mm_store_enqueue(db, &q, NULL, rows, &err) < 0) {
        mm_log("%s %s: %s", r->method, r->path, err.msg);
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err.msg);
        return -1;
    }
    return 0;
}
