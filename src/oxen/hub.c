#include "oxen/hub.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "/api/repos/<ns>/<repo>" + fmt. */
static int repo_path(const mm_oxen_client *c, char *out, size_t n, const char *fmt, ...) MM_PRINTF(4, 5);

static int repo_path(const mm_oxen_client *c, char *out, size_t n, const char *fmt, ...)
{
    int k = snprintf(out, n, "/api/repos/%s/%s", c->remote.ns, c->remote.repo);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(out + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return k < 0 || m < 0 || (size_t)(k + m) >= n ? -1 : 0;
}

#define PATH_MAX_LEN 2048

int mm_hub_workspace_create(const mm_oxen_client *c, const char *workspace_id, const char *name, mm_error *err)
{
    char path[PATH_MAX_LEN];
    if (repo_path(c, path, sizeof path, "/workspaces") < 0)
        return mm_fail(err, "workspace path too long");
    json_t *body = json_pack("{s:s, s:s, s:s}", "workspace_id", workspace_id, "branch_name", c->remote.branch, "name",
                             name);
    int rc = mm_oxen_call(c, "PUT", path, body, NULL, err);
    json_decref(body);
    return rc;
}

int mm_hub_workspace_delete(const mm_oxen_client *c, const char *workspace_id, mm_error *err)
{
    char path[PATH_MAX_LEN];
    char *ws = mm_oxen_escape_path(workspace_id, false);
    int bad = !ws || repo_path(c, path, sizeof path, "/workspaces/%s", ws) < 0;
    free(ws);
    if (bad)
        return mm_fail(err, "workspace path too long");
    return mm_oxen_call(c, "DELETE", path, NULL, NULL, err);
}

int mm_hub_workspace_upload(const mm_oxen_client *c, const char *workspace_id, const char *dir, const char *local_path,
                            const char *name, mm_error *err)
{
    char path[PATH_MAX_LEN];
    char *ws = mm_oxen_escape_path(workspace_id, false), *d = mm_oxen_escape_path(dir, true);
    int bad = !ws || !d || repo_path(c, path, sizeof path, "/workspaces/%s/files/%s", ws, d) < 0;
    free(ws), free(d);
    if (bad)
        return mm_fail(err, "upload path too long");
    mm_oxen_part part = {.name = "file", .file_path = local_path, .filename = name, .content_type = "video/mp4"};
    return mm_oxen_upload(c, "POST", path, &part, 1, NULL, err);
}

int mm_hub_df_index(const mm_oxen_client *c, const char *workspace_id, const char *df, bool *missing, mm_error *err)
{
    *missing = false;
    char path[PATH_MAX_LEN];
    char *ws = mm_oxen_escape_path(workspace_id, false), *p = mm_oxen_escape_path(df, true);
    int bad = !ws || !p || repo_path(c, path, sizeof path, "/workspaces/%s/data_frames/resource/%s", ws, p) < 0;
    free(ws), free(p);
    if (bad)
        return mm_fail(err, "data frame path too long");
    json_t *body = json_pack("{s:b}", "is_indexed", 1);
    mm_oxen_response resp;
    int rc = mm_oxen_call(c, "PUT", path, body, &resp, err);
    json_decref(body);
    *missing = rc < 0 && resp.status == 404;
    mm_oxen_response_free(&resp);
    return rc;
}

int mm_hub_df_append(const mm_oxen_client *c, const char *workspace_id, const char *df, const json_t *row,
                     mm_error *err)
{
    char path[PATH_MAX_LEN];
    char *ws = mm_oxen_escape_path(workspace_id, false), *p = mm_oxen_escape_path(df, true);
    int bad = !ws || !p || repo_path(c, path, sizeof path, "/workspaces/%s/data_frames/rows/resource/%s", ws, p) < 0;
    free(ws), free(p);
    if (bad)
        return mm_fail(err, "data frame path too long");
    return mm_oxen_call(c, "POST", path, row, NULL, err);
}

int mm_hub_merge(const mm_oxen_client *c, const char *workspace_id, const char *message, bool *behind, mm_error *err)
{
    *behind = false;
    char path[PATH_MAX_LEN];
    char *ws = mm_oxen_escape_path(workspace_id, false), *b = mm_oxen_escape_path(c->remote.branch, false);
    int bad = !ws || !b || repo_path(c, path, sizeof path, "/workspaces/%s/merge/%s", ws, b) < 0;
    free(ws), free(b);
    if (bad)
        return mm_fail(err, "merge path too long");
    json_t *body = json_pack("{s:s, s:s, s:s}", "message", message, "author", "mmh3", "email", "mmh3@localhost");
    mm_oxen_response resp;
    int rc = mm_oxen_call(c, "POST", path, body, &resp, err);
    json_decref(body);
    *behind = rc < 0 && (resp.status == 409 || resp.status == 422);
    mm_oxen_response_free(&resp);
    return rc;
}

int mm_hub_put_file(const mm_oxen_client *c, const char *dir, const char *name, const char *data, size_t len,
                    const char *message, mm_error *err)
{
    char path[PATH_MAX_LEN];
    char *b = mm_oxen_escape_path(c->remote.branch, false), *d = mm_oxen_escape_path(dir, true);
    int bad = !b || !d || repo_path(c, path, sizeof path, "/file/%s%s%s", b, d[0] ? "/" : "", d) < 0;
    free(b), free(d);
    if (bad)
        return mm_fail(err, "file path too long");
    mm_oxen_part parts[] = {
        {.name = "files[]", .data = data, .len = len, .filename = name, .content_type = "text/csv"},
        {.name = "message", .value = message},
        {.name = "name", .value = "mmh3"},
        {.name = "email", .value = "mmh3@localhost"},
    };
    return mm_oxen_upload(c, "PUT", path, parts, 4, NULL, err);
}

void mm_hub_file_url(const mm_oxen_client *c, const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s/api/repos/%s/%s/file/%s/%s", c->remote.origin, c->remote.ns, c->remote.repo,
             c->remote.branch, path);
}

/* ---------------------------------------------------------------- queue */

int mm_hub_queue_list(const mm_oxen_client *c, const char *model, json_t **list, mm_error *err)
{
    *list = NULL;
    char *m = mm_oxen_escape_path(model, false);
    if (!m)
        return mm_fail(err, "out of memory");
    char path[PATH_MAX_LEN];
    snprintf(path, sizeof path, "/api/ai/queue?model=%s&status=queued", m);
    free(m);
    mm_oxen_response resp;
    if (mm_oxen_call(c, "GET", path, NULL, &resp, err) < 0) {
        mm_oxen_response_free(&resp);
        return -1;
    }
    json_t *g = json_object_get(resp.json, "generations");
    if (!json_is_array(g)) {
        mm_oxen_response_free(&resp);
        return mm_fail(err, "GET /api/ai/queue: the answer has no \"generations\" list");
    }
    *list = json_incref(g);
    mm_oxen_response_free(&resp);
    return 0;
}

static int queue_path(char *out, size_t n, const char *hub_id, const char *action)
{
    char *id = mm_oxen_escape_path(hub_id, false);
    if (!id)
        return -1;
    int k = snprintf(out, n, "/api/ai/queue/%s/%s", id, action);
    free(id);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

int mm_hub_queue_claim(const mm_oxen_client *c, const char *hub_id, const char *claim_id, const char *worker,
                       bool *taken, bool *gone, mm_error *err)
{
    *taken = *gone = false;
    char path[PATH_MAX_LEN];
    if (queue_path(path, sizeof path, hub_id, "claim") < 0)
        return mm_fail(err, "claim path too long");
    json_t *body = json_pack("{s:s, s:s}", "claim_id", claim_id, "worker", worker);
    mm_oxen_response resp;
    int rc = mm_oxen_call(c, "POST", path, body, &resp, err);
    json_decref(body);
    *taken = rc < 0 && resp.status == 409;
    *gone = rc < 0 && (resp.status == 404 || resp.status == 410);
    mm_oxen_response_free(&resp);
    return rc;
}

int mm_hub_queue_complete(const mm_oxen_client *c, const char *hub_id, const char *claim_id, const char *status,
                          const char *result_url, const char *error_message, mm_error *err)
{
    char path[PATH_MAX_LEN];
    if (queue_path(path, sizeof path, hub_id, "complete") < 0)
        return mm_fail(err, "complete path too long");
    json_t *body = json_pack("{s:s, s:s, s:s?, s:s?}", "claim_id", claim_id, "status", status, "result_url",
                             result_url, "error_message", error_message);
    int rc = mm_oxen_call(c, "POST", path, body, NULL, err);
    json_decref(body);
    return rc;
}
