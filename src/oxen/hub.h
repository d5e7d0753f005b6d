/* The Oxen hub's endpoints that mmh3 calls, one function each. Paths are
 * those of the hub's OpenAPI documents (docs/OXEN-INTEGRATION.md lists them
 * with their bodies); the two provider calls of the claim loop (claim,
 * complete) are our proposal, marked as such there.
 *
 * Repository calls go to /api/repos/<namespace>/<repo>/..., AI calls to
 * /api/ai/... on the remote's origin.
 */
#ifndef MMH3_OXEN_HUB_H
#define MMH3_OXEN_HUB_H

#include <stdbool.h>

#include <jansson.h>

#include "core/error.h"
#include "oxen/client.h"

/* Where mirrored results go inside the repository. */
#define MM_HUB_VIDEO_DIR "videos"
#define MM_HUB_HISTORY_PATH "history.csv"
/* The history frame's columns, in order (the header of a new frame). Oxen's
 * generation row (queue fields, request fields at the top level) plus ours. */
#define MM_HUB_HISTORY_COLUMNS                                                                                    \
    "generation_id,status,model_name,media_type,prompt,duration,aspect_ratio,width,height,frames,seed,steps,"      \
    "enqueued_at,started_at,completed_at,result_url,file,error_message,source,oxen_job_id,worker_id"

/* Workspaces (staging areas on the hub). Create is get-or-create by id. */
int mm_hub_workspace_create(const mm_oxen_client *c, const char *workspace_id, const char *name, mm_error *err);
int mm_hub_workspace_delete(const mm_oxen_client *c, const char *workspace_id, mm_error *err);
/* Stages a local file as <dir>/<name> in the workspace. */
int mm_hub_workspace_upload(const mm_oxen_client *c, const char *workspace_id, const char *dir, const char *local_path,
                            const char *name, mm_error *err);
/* Indexes a committed data frame in the workspace; *missing when the hub says
 * the file does not exist (404). */
int mm_hub_df_index(const mm_oxen_client *c, const char *workspace_id, const char *path, bool *missing, mm_error *err);
/* Appends one row (column -> value) to an indexed frame. */
int mm_hub_df_append(const mm_oxen_client *c, const char *workspace_id, const char *path, const json_t *row,
                     mm_error *err);
/* Commits the workspace onto the branch; *behind when the hub refuses because
 * the branch moved on (409/422). */
int mm_hub_merge(const mm_oxen_client *c, const char *workspace_id, const char *message, bool *behind,
                 mm_error *err);
/* One-shot upload + commit of a small file (creates the history frame). */
int mm_hub_put_file(const mm_oxen_client *c, const char *dir, const char *name, const char *data, size_t len,
                    const char *message, mm_error *err);

/* The hub URL of a committed file of the repository. */
void mm_hub_file_url(const mm_oxen_client *c, const char *path, char *out, size_t n);

/* Queue: the generations queued against a model (GET /api/ai/queue). *list
 * is the "generations" array (new reference). */
int mm_hub_queue_list(const mm_oxen_client *c, const char *model, json_t **list, mm_error *err);
/* Claims one for rendering here; claim_id makes a repeated claim by us
 * idempotent. *taken when someone else holds it (409); *gone when it is no
 * longer claimable (404, or a terminal status). */
int mm_hub_queue_claim(const mm_oxen_client *c, const char *hub_id, const char *claim_id, const char *worker,
                       bool *taken, bool *gone, mm_error *err);
/* Reports the outcome: status "succeeded" with result_url, or "failed" with
 * error_message. */
int mm_hub_queue_complete(const mm_oxen_client *c, const char *hub_id, const char *claim_id, const char *status,
                          const char *result_url, const char *error_message, mm_error *err);

#endif
