/* The queue endpoints: enqueue, list/search, get, rate, cancel/delete. Each
 * parses the request, asks the store (src/store/), and replies; the JSON
 * objects are the database's (generation_json), so the API, the SSE relay
 * and the catch-up send identical ones. */
#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "fcgi/enqueue.h"
#include "store/generations.h"

#define JSON_BODY_MAX (1 << 20)

/* Reads and parses a JSON request body; answers the error itself on failure. */
json_t *mm_req_json(mm_req *r)
{
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0 || (ct[16] && ct[16] != ';' && ct[16] != ' ')) {
        mm_reply_error(r, 415, NULL, "Content-Type: application/json", "the body must be JSON, not '%s'",
                       ct ? ct : "(no Content-Type)");
        return NULL;
    }
    char *body;
    size_t len;
    int status;
    mm_error err = {{0}};
    if (mm_req_body(r, JSON_BODY_MAX, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    if (!j)
        mm_reply_error(r, 400, NULL, "a JSON document", "the body is not valid JSON (line %d, column %d: %s)",
                       jerr.line, jerr.column, jerr.text);
    return j;
}

static void db_failed(mm_req *r, const mm_error *err)
{
    mm_log("%s %s: %s", r->method, r->path, err->msg);
    mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err->msg);
}

/* ---------------------------------------------------------------- enqueue */

void mm_api_enqueue(mm_req *r)
{
    json_t *body = mm_req_json(r);
    if (!body)
        return;
    char *rows = NULL;
    mm_rule_notes notes = {0};
    if (mm_enqueue_insert(r, body, &rows, &notes) == 0) {
        /* Each generation object carries the notes as "warnings"; the header
         * is for clients that read only headers. */
        size_t n = strlen(rows) + 32;
        char *out = malloc(n);
        if (out) {
            snprintf(out, n, "{\"generations\":%s}", rows);
            mm_add_warning_header(r, &notes);
            mm_reply_raw_json(r, 200, out);
            free(out);
        } else {
            mm_reply_error(r, 500, NULL, NULL, "out of memory");
        }
        free(rows);
    }
    json_decref(body);
}

/* ---------------------------------------------------------------- list */

static const char *const statuses[] = {"queued", "processing", "succeeded", "failed", "cancelled"};

/* ?status=a,b,active: checked names into q; false after answering. */
static bool parse_statuses(mm_req *r, char *list, mm_store_list_query *q)
{
    static const char accept_status[] =
        "comma-separated statuses (queued, processing, succeeded, failed, cancelled), 'active' or 'all'";
    if (!list[0] || strcmp(list, "all") == 0)
        return true;
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        bool active = strcmp(t, "active") == 0;
        const char *name = NULL;
        for (size_t i = 0; i < 5; i++)
            if (strcmp(t, statuses[i]) == 0)
                name = statuses[i];
        if (!active && !name) {
            mm_reply_error(r, 400, "status", accept_status, "'%s' is not a status", t);
            return false;
        }
        /* Every addition is bounded, 'active' included ("active,active,..." once overran the array). */
        if (q->n_statuses + (active ? 2 : 1) > MM_STORE_LIST_STATUSES_MAX) {
            mm_reply_error(r, 400, "status", accept_status, "lists too many statuses");
            return false;
        }
        if (active) {
            q->statuses[q->n_statuses++] = "queued";
            q->statuses[q->n_statuses++] = "processing";
        } else {
            q->statuses[q->n_statuses++] = name;
        }
    }
    return true;
}

/* ?name=N within lo..hi; false after answering. */
static bool parse_count(mm_req *r, const char *name, long lo, long hi, const char *accepted, long *out)
{
    char num[32], *end;
    if (!mm_req_query(r, name, num, sizeof num))
        return true;
    long v = strtol(num, &end, 10);
    if (!num[0] || *end || v < lo || v > hi) {
        mm_reply_error(r, 400, name, accepted, "'%s' is out of range", num);
        return false;
    }
    *out = v;
    return true;
}

void mm_api_list(mm_req *r)
{
    char status[256] = "", search[8192 * 4] = "", rating[32] = "";
    mm_store_list_query q = {.limit = 60, .offset = 0};
    mm_req_query(r, "status", status, sizeof status);
    if (!parse_statuses(r, status, &q))
        return;
    if (mm_req_query(r, "search", search, sizeof search) && search[0])
        q.search = search;
    if (mm_req_query(r, "rating", rating, sizeof rating) && rating[0]) {
        if (strcmp(rating, "approved") != 0 && strcmp(rating, "rejected") != 0 && strcmp(rating, "none") != 0) {
            mm_reply_error(r, 400, "rating", "approved, rejected or none", "'%s' is not a rating filter", rating);
            return;
        }
        q.rating = rating;
    }
    if (!parse_count(r, "limit", 1, 500, "integer 1..500 (default 60)", &q.limit) ||
        !parse_count(r, "offset", 0, 100000000, "integer >= 0 (default 0)", &q.offset))
        return;
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_list(db, &q, &json, &err) < 0) {
        db_failed(r, &err);
        return;
    }
    mm_reply_raw_json(r, 200, json);
    free(json);
}

/* ---------------------------------------------------------------- one row */

void mm_api_get(mm_req *r, const char *id)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_generation_json(db, id, &json, &err) < 0) {
        db_failed(r, &err);
        return;
    }
    if (!json)
        mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
    else
        mm_reply_raw_json(r, 200, json);
    free(json);
}

/* PATCH's body: {"rating": ...} and nothing else; false after answering. */
static bool parse_rating(mm_req *r, json_t *body, const char **value)
{
    static const char accept[] = "{\"rating\": \"approved\" | \"rejected\" | null}";
    if (!json_is_object(body)) {
        mm_reply_error(r, 400, NULL, accept, "the body must be a JSON object");
        return false;
    }
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val)
    {
        if (strcmp(key, "rating") != 0) {
            mm_reply_error(r, 400, key, accept, "is not a field that can be changed");
            return false;
        }
    }
    json_t *rating = json_object_get(body, "rating");
    if (!rating) {
        mm_reply_error(r, 400, "rating", accept, "is required");
        return false;
    }
    *value = json_string_value(rating);
    if (!json_is_null(rating) && (!*value || (strcmp(*value, "approved") != 0 && strcmp(*value, "rejected") != 0))) {
        mm_reply_error(r, 400, "rating", accept, "is not a rating");
        return false;
    }
    return true;
}

void mm_api_patch(mm_req *r, const char *id)
{
    json_t *body = mm_req_json(r);
    if (!body)
        return;
    const char *value = NULL;
    PGconn *db = parse_rating(r, body, &value) ? mm_req_db(r) : NULL;
    char *json = NULL;
    mm_error err = {{0}};
    if (!db) {
        /* answered */
    } else if (mm_store_rate(db, id, value, &json, &err) < 0) {
        db_failed(r, &err);
    } else if (!json) {
        mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
    } else {
        mm_reply_raw_json(r, 200, json);
    }
    free(json);
    json_decref(body);
}

/* Removes a file the database names, relative to the outputs folder; only
 * generated names under generations/ or uploads/ qualify. */
static void remove_output(mm_req *r, const char *rel)
{
    if (!rel || strstr(rel, "..") || (strncmp(rel, "generations/", 12) != 0 && strncmp(rel, "uploads/", 8) != 0))
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->app->outputs, rel);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.part", r->app->outputs, rel);
    unlink(path);
}

int mm_queue_cancel_or_delete(mm_req *r, const char *id, mm_cancel_result *result)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return -1;
    char *result_path = NULL, *poster_path = NULL;
    mm_error err = {{0}};
    if (mm_store_cancel_or_delete(db, id, result, &result_path, &poster_path, &err) < 0) {
        db_failed(r, &err);
        return -1;
    }
    if (*result == MM_CANCEL_DELETED) {
        remove_output(r, result_path);
        remove_output(r, poster_path);
    }
    free(result_path);
    free(poster_path);
    return 0;
}

void mm_api_delete(mm_req *r, const char *id)
{
    mm_cancel_result result;
    if (mm_queue_cancel_or_delete(r, id, &result) < 0)
        return;
    static const char *const actions[] = {
        [MM_CANCEL_CANCELLED] = "cancelled", [MM_CANCEL_CANCELLING] = "cancelling", [MM_CANCEL_DELETED] = "deleted"};
    if (result == MM_CANCEL_NOT_FOUND)
        mm_reply_error(r, 404, NULL, NULL, "no generation has the id %s", id);
    else if (result == MM_CANCEL_BUSY)
        mm_reply_error(r, 409, NULL, NULL, "the generation kept changing state; try again");
    else
        mm_reply_json(r, 200,
                      json_pack("{s:s, s:s, s:s}", "status", "success", "generation_id", id, "action", actions[result]));
}
