/* The OpenAI-style video API, as SGLang, vLLM-Omni and MiniMax's own
 * reproducible request scripts use it, mapped onto the same queue:
 *
 *   POST /v1/videos                 {task, prompt, conditions, target{short_edge, aspect_ratio,
 *                                    duration_seconds}, seed} (JSON), or OpenAI's {model, prompt,
 *                                    seconds, size} (JSON or multipart/form-data) -> a video object;
 *                                    loras, sampler, sparse and cache as on /api/ai/queue (JSON)
 *   GET  /v1/videos                 a cursor page {object: "list", data, first_id, last_id, has_more}
 *                                   (?limit=1..100, default 20; ?after=<id>; ?order=desc|asc)
 *   GET  /v1/videos/{id}            the video object (status queued|in_progress|completed|failed)
 *   DELETE /v1/videos/{id}          removes the video (a queued one is cancelled first; a rendering
 *                                   one answers 409 while it stops) -> {id, object: "video.deleted", deleted}
 *   GET  /v1/videos/{id}/content    the mp4 (?variant=thumbnail: the JPEG poster), served by nginx
 *                                   (X-Accel-Redirect to an internal location)
 *
 * A video id is the generation id: the same job is visible in the gallery
 * and through /api/ai/queue. The request is translated into the body of
 * POST /api/ai/queue and goes through the same checks (fcgi/enqueue.c).
 * Conditions name uploads from POST /api/images (by id, or by their
 * /api/files/uploads/... URL); nothing is ever fetched from elsewhere, and
 * a condition's type must be the upload's kind. Errors on /v1 take OpenAI's
 * shape (fcgi/http.c); values snapped to the model's grids are reported in
 * the video object's "warnings" and an X-MMH3-Warning header.
 */
#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fcgi/enqueue.h"
#include "fcgi/multipart.h"
#include "request/request.h"
#include "store/generations.h"
#include "store/uploads.h"

#define ACCEPT_TASK "\"t2va\", \"i2va\", \"fl2va\", \"l2va\" or \"ref2va\""
#define ACCEPT_CONDITION                                                                                          \
    "an object {\"type\": \"image\"|\"video\"|\"audio\", \"upload_id\": <id from POST /api/images> (or "         \
    "\"image_id\", or \"url\": \"/api/files/uploads/<id>.<ext>\"), \"role\": optional \"first_frame\"|"           \
    "\"last_frame\"|\"reference\"}"
#define ACCEPT_TARGET                                                                                             \
    "{\"short_edge\": 32..2048, \"aspect_ratio\": \"W:H\", \"duration_seconds\": > 0} (each optional; or "       \
    "\"width\"/\"height\", \"frames\")"

/* ---------------------------------------------------------------- create */

/* The upload id a condition names. */
static bool condition_upload(json_t *c, char *id, size_t n)
{
    const char *s = json_string_value(json_object_get(c, "upload_id"));
    if (!s)
        s = json_string_value(json_object_get(c, "image_id"));
    if (!s)
        s = json_string_value(json_object_get(c, "id"));
    if (s) {
        snprintf(id, n, "%s", s);
        return mm_is_uuid(id);
    }
    const char *url = json_string_value(json_object_get(c, "url"));
    if (!url)
        return false;
    /* Our own file URL (absolute or not): .../api/files/uploads/<uuid>.<ext> */
    const char *p = strstr(url, "/api/files/uploads/");
    if (!p)
        return false;
    p += strlen("/api/files/uploads/");
    size_t len = strcspn(p, ".?#/");
    if (len != 36 || len >= n)
        return false;
    memcpy(id, p, len);
    id[len] = '\0';
    return mm_is_uuid(id);
}

/* Moves key from src to dst under another name (if present). */
static void carry(json_t *dst, const char *to, json_t *src, const char *from)
{
    json_t *v = json_object_get(src, from);
    if (v)
        json_object_set(dst, to, v);
}

/* Fields we know, and the two OpenAI ones we take only at their defaults;
 * false after answering. */
static bool check_fields(mm_req *r, json_t *in)
{
    static const char *const known[] = {"model",  "prompt", "task",  "conditions", "target", "seed",
                                        "seconds", "size",   "steps", "no_audio",   "fast",   "crf",
                                        "preset",  "generate_audio", "negative_prompt", "n", "loras",
                                        "sampler", "sparse", "cache"};
    const char *key;
    json_t *val;
    json_object_foreach(in, key, val)
    {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok) {
            mm_reply_error(r, 400, key,
                           "model, prompt, task, conditions, target, seed, seconds, size, steps, no_audio, fast, "
                           "crf, preset, generate_audio, loras, sampler, sparse, cache",
                           "is not a field of this request");
            return false;
        }
    }
    json_t *neg = json_object_get(in, "negative_prompt");
    if (neg && !json_is_null(neg) && !(json_is_string(neg) && json_string_length(neg) == 0)) {
        mm_reply_error(r, 400, "negative_prompt", "absent or empty",
                       "H3 has no negative prompt (classifier-free guidance is distilled out)");
        return false;
    }
    json_t *nn = json_object_get(in, "n");
    if (nn && !json_is_null(nn) && !(json_is_integer(nn) && json_integer_value(nn) == 1)) {
        mm_reply_error(r, 400, "n", "1 (one video per request; use POST /api/ai/queue num_generations for more)",
                       "is not 1");
        return false;
    }
    return true;
}

/* OpenAI's seconds is a string ("8"); MiniMax's is target.duration_seconds. */
static bool translate_seconds(mm_req *r, json_t *in, json_t *out)
{
    json_t *seconds = json_object_get(in, "seconds");
    if (json_is_string(seconds)) {
        char *end;
        double v = strtod(json_string_value(seconds), &end);
        if (*end || end == json_string_value(seconds)) {
            mm_reply_error(r, 400, "seconds", "a number of seconds, e.g. \"8\" or 8", "'%.40s' is not a number",
                           json_string_value(seconds));
            return false;
        }
        json_object_set_new(out, "seconds", json_real(v));
    } else if (seconds) {
        json_object_set(out, "seconds", seconds);
    }
    return true;
}

static bool translate_target(mm_req *r, json_t *in, json_t *out)
{
    json_t *target = json_object_get(in, "target");
    if (!target || json_is_null(target))
        return true;
    if (!json_is_object(target)) {
        mm_reply_error(r, 400, "target", ACCEPT_TARGET, "must be an object");
        return false;
    }
    const char *key;
    json_t *val;
    json_object_foreach(target, key, val)
    {
        char f[80];
        snprintf(f, sizeof f, "target.%.60s", key);
        if (strcmp(key, "short_edge") == 0) {
            if (!json_is_integer(val)) {
                mm_reply_error(r, 400, f, ACCEPT_TARGET, "must be an integer");
                return false;
            }
            json_object_set(out, "short_edge", val);
        } else if (strcmp(key, "aspect_ratio") == 0) {
            json_object_set(out, "aspect_ratio", val);
        } else if (strcmp(key, "duration_seconds") == 0) {
            json_object_set(out, "seconds", val);
        } else if (strcmp(key, "width") == 0 || strcmp(key, "height") == 0 || strcmp(key, "frames") == 0) {
            json_object_set(out, key, val);
        } else {
            mm_reply_error(r, 400, f, ACCEPT_TARGET, "is not a target field");
            return false;
        }
    }
    if (json_object_get(target, "short_edge") && json_object_get(in, "size")) {
        mm_reply_error(r, 400, "target.short_edge", "either size or target.short_edge",
                       "cannot be given together with size");
        return false;
    }
    if (json_object_get(target, "duration_seconds") && json_object_get(in, "seconds")) {
        mm_reply_error(r, 400, "target.duration_seconds", "either seconds or target.duration_seconds",
                       "cannot be given together with seconds");
        return false;
    }
    return true;
}

/* One condition: its upload id, and whether it is the last frame; false
 * after answering. */
static bool read_condition(mm_req *r, json_t *c, size_t i, const char *task, char id[40], bool *is_last)
{
    char f[48];
    snprintf(f, sizeof f, "conditions[%zu]", i);
    if (!json_is_object(c) || !condition_upload(c, id, 40)) {
        mm_reply_error(r, 400, f, ACCEPT_CONDITION, "does not name an upload of this server");
        return false;
    }
    const char *type = json_string_value(json_object_get(c, "type"));
    if (type && strcmp(type, "image") != 0 && strcmp(type, "video") != 0 && strcmp(type, "audio") != 0) {
        mm_reply_error(r, 400, f, ACCEPT_CONDITION, "type '%.40s' is not image, video or audio", type);
        return false;
    }
    const char *role = json_string_value(json_object_get(c, "role"));
    if (role && strcmp(role, "first_frame") != 0 && strcmp(role, "last_frame") != 0 &&
        strcmp(role, "reference") != 0) {
        mm_reply_error(r, 400, f, ACCEPT_CONDITION, "role '%.40s' is not first_frame, last_frame or reference", role);
        return false;
    }
    *is_last = (role && strcmp(role, "last_frame") == 0) ||
               (!role && ((strcmp(task, "fl2va") == 0 && i == 1) || strcmp(task, "l2va") == 0));
    return true;
}

/* Why the conditions do not fit the task, or NULL. */
static const char *task_mismatch(const char *task, size_t n_conditions, size_t n_first, bool last)
{
    if (strcmp(task, "t2va") == 0 && n_conditions)
        return "t2va takes no conditions";
    if (strcmp(task, "i2va") == 0 && (n_first != 1 || last))
        return "i2va takes one image condition (the first frame)";
    if (strcmp(task, "fl2va") == 0 && (n_first != 1 || !last))
        return "fl2va takes two image conditions (first and last frame)";
    if (strcmp(task, "l2va") == 0 && (n_first != 0 || !last))
        return "l2va takes one image condition (the last frame)";
    if (strcmp(task, "ref2va") == 0 && (n_conditions == 0 || last))
        return "ref2va takes 1..15 reference conditions (images, videos, audio) and no last frame";
    return NULL;
}

/* Conditions -> image_ids / last_image_id / partition, by task. */
static bool translate_conditions(mm_req *r, json_t *in, json_t *out)
{
    const char *task = json_string_value(json_object_get(in, "task"));
    json_t *task_v = json_object_get(in, "task");
    if (task_v && !json_is_null(task_v) &&
        (!task || (strcmp(task, "t2va") != 0 && strcmp(task, "i2va") != 0 && strcmp(task, "fl2va") != 0 &&
                   strcmp(task, "l2va") != 0 && strcmp(task, "ref2va") != 0))) {
        mm_reply_error(r, 400, "task", ACCEPT_TASK, "is not a task");
        return false;
    }
    json_t *conds = json_object_get(in, "conditions");
    if (conds && !json_is_null(conds) && !json_is_array(conds)) {
        mm_reply_error(r, 400, "conditions", ACCEPT_CONDITION, "must be an array");
        return false;
    }
    size_t nc = conds ? json_array_size(conds) : 0;
    if (!task)
        task = nc == 0 ? "t2va" : "ref2va";
    json_t *ids = json_array();
    char last[40] = "";
    for (size_t i = 0; i < nc; i++) {
        char id[40];
        bool is_last = false;
        if (!read_condition(r, json_array_get(conds, i), i, task, id, &is_last))
            goto fail;
        if (is_last && last[0]) {
            char f[48];
            snprintf(f, sizeof f, "conditions[%zu]", i);
            mm_reply_error(r, 400, f, ACCEPT_CONDITION, "is a second last frame");
            goto fail;
        }
        if (is_last)
            snprintf(last, sizeof last, "%s", id);
        else
            json_array_append_new(ids, json_string(id));
    }
    const char *why = task_mismatch(task, nc, json_array_size(ids), last[0] != '\0');
    if (why) {
        mm_reply_error(r, 400, "conditions", ACCEPT_CONDITION, "%s (%zu given)", why, nc);
        goto fail;
    }
    if (json_array_size(ids))
        json_object_set(out, "image_ids", ids);
    json_decref(ids);
    if (last[0])
        json_object_set_new(out, "last_image_id", json_string(last));
    json_object_set_new(out, "partition", json_string(strcmp(task, "ref2va") == 0 ? "ref2va" : "fl2va"));
    return true;
fail:
    json_decref(ids);
    return false;
}

/* A condition's declared type against its upload's kind (a picture sent as
 * "video" would be used as a picture without a word otherwise); false after
 * answering. Unknown uploads are left to the settle step, which names them. */
static bool check_condition_kinds(mm_req *r, json_t *in)
{
    static const char *const kinds[] = {[MM_REF_IMAGE] = "image", [MM_REF_VIDEO] = "video", [MM_REF_AUDIO] = "audio"};
    json_t *conds = json_object_get(in, "conditions");
    mm_request_refs refs;
    memset(&refs, 0, sizeof refs);
    char ids[MM_MAX_REFERENCES + 1][40];
    size_t at[MM_MAX_REFERENCES + 1];
    for (size_t i = 0; i < json_array_size(conds) && refs.n_refs <= MM_MAX_REFERENCES; i++) {
        json_t *c = json_array_get(conds, i);
        if (!json_is_string(json_object_get(c, "type")) || !condition_upload(c, ids[refs.n_refs], 40))
            continue;
        at[refs.n_refs] = i;
        refs.refs[refs.n_refs].source = ids[refs.n_refs];
        refs.n_refs++;
    }
    if (refs.n_refs == 0)
        return true;
    PGconn *db = mm_req_db(r);
    if (!db)
        return false;
    mm_error err = {{0}};
    if (mm_store_uploads_lookup(db, &refs, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err.msg);
        return false;
    }
    for (int k = 0; k < refs.n_refs; k++) {
        const char *type = json_string_value(json_object_get(json_array_get(conds, at[k]), "type"));
        const char *kind = kinds[refs.refs[k].kind];
        if (!refs.found[k] || strcmp(type, kind) == 0)
            continue;
        char f[64];
        snprintf(f, sizeof f, "conditions[%zu].type", at[k]);
        mm_reply_error(r, 400, f, "the kind of the upload it names (image, video or audio)",
                       "is '%s', but upload %s is %s %s", type, ids[k], strcmp(kind, "image") == 0 ? "an" : "a", kind);
        return false;
    }
    return true;
}

/* The /v1 request as the body of POST /api/ai/queue; NULL after answering
 * the error. */
static json_t *translate(mm_req *r, json_t *in)
{
    if (!check_fields(r, in))
        return NULL;
    json_t *out = json_object();
    static const char *const same[] = {"prompt", "model", "seed",   "steps",          "no_audio", "fast",
                                       "crf",    "preset", "generate_audio", "size",  "loras",    "sampler",
                                       "sparse", "cache"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        carry(out, same[i], in, same[i]);
    if (!translate_seconds(r, in, out) || !translate_target(r, in, out) || !translate_conditions(r, in, out)) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* multipart/form-data (OpenAI's SDK sends it): text fields only. */
static json_t *form_body(mm_req *r)
{
    char boundary[256];
    mm_error err = {{0}};
    if (mm_multipart_boundary(mm_req_header(r, "CONTENT_TYPE"), boundary, sizeof boundary, &err) < 0) {
        mm_reply_error(r, 400, NULL, "multipart/form-data with a boundary, or application/json", "%s", err.msg);
        return NULL;
    }
    char *body;
    size_t len;
    int status;
    if (mm_req_body(r, 1 << 20, &body, &len, &status, &err) < 0) {
        mm_reply_error(r, status, NULL, NULL, "%s", err.msg);
        return NULL;
    }
    mm_mp_part parts[32];
    int n = 0;
    json_t *out = NULL;
    if (mm_multipart_parse(boundary, (const uint8_t *)body, len, parts, 32, &n, &err) < 0) {
        mm_reply_error(r, 400, NULL, "a multipart/form-data body", "%s", err.msg);
        goto done;
    }
    out = json_object();
    for (int i = 0; i < n; i++) {
        mm_mp_part *p = &parts[i];
        if (p->filename[0]) {
            mm_reply_error(r, 400, p->name, "text fields; upload references with POST /api/images, then name them "
                                            "in conditions (JSON)",
                           "file parts are not accepted here");
            json_decref(out);
            out = NULL;
            goto done;
        }
        json_t *v = json_stringn((const char *)p->data, p->len);
        if (v && (strcmp(p->name, "seed") == 0 || strcmp(p->name, "steps") == 0)) {
            json_error_t je;
            json_t *num = json_loadb((const char *)p->data, p->len, JSON_DECODE_ANY, &je);
            if (json_is_integer(num)) {
                json_decref(v);
                v = num;
            } else {
                json_decref(num);
            }
        }
        if (!v) {
            mm_reply_error(r, 400, p->name, "UTF-8 text", "is not UTF-8 text");
            json_decref(out);
            out = NULL;
            goto done;
        }
        json_object_set_new(out, p->name, v);
    }
done:
    free(body);
    return out;
}

/* ---------------------------------------------------------------- the video object */

static const char *task_of(json_t *g)
{
    const char *partition = json_string_value(json_object_get(g, "partition"));
    size_t refs = json_array_size(json_object_get(g, "image_ids"));
    bool last = json_is_string(json_object_get(g, "last_image_id"));
    if (partition && strcmp(partition, "ref2va") == 0)
        return "ref2va";
    return refs && last ? "fl2va" : refs ? "i2va" : last ? "l2va" : "t2va";
}

/* OpenAI's video object, from a generation object. */
static json_t *video_json(json_t *g)
{
    const char *id = json_string_value(json_object_get(g, "generation_id"));
    const char *status = json_string_value(json_object_get(g, "status"));
    const char *st = !status                                ? "queued"
                     : strcmp(status, "processing") == 0    ? "in_progress"
                     : strcmp(status, "succeeded") == 0     ? "completed"
                     : strcmp(status, "queued") == 0        ? "queued"
                                                            : "failed";
    char size[32], seconds[32], content[96];
    snprintf(size, sizeof size, "%lldx%lld", (long long)json_integer_value(json_object_get(g, "width")),
             (long long)json_integer_value(json_object_get(g, "height")));
    snprintf(seconds, sizeof seconds, "%.3f", json_number_value(json_object_get(g, "seconds")));
    snprintf(content, sizeof content, "/v1/videos/%s/content", id ? id : "");
    json_t *v = json_object();
    json_object_set_new(v, "id", json_string(id ? id : ""));
    json_object_set_new(v, "object", json_string("video"));
    json_object_set(v, "model", json_object_get(g, "model_name"));
    json_object_set_new(v, "status", json_string(st));
    json_object_set_new(v, "progress",
                        json_integer((json_int_t)(json_number_value(json_object_get(g, "progress")) * 100 + 0.5)));
    json_object_set(v, "created_at", json_object_get(g, "enqueued_at"));
    json_object_set(v, "completed_at", json_object_get(g, "completed_at"));
    json_object_set_new(v, "seconds", json_string(seconds));
    json_object_set_new(v, "size", json_string(size));
    json_object_set_new(v, "task", json_string(task_of(g)));
    json_object_set(v, "prompt", json_object_get(g, "prompt"));
    json_object_set(v, "seed", json_object_get(g, "seed"));
    bool done = strcmp(st, "completed") == 0;
    json_object_set_new(v, "content_url", done ? json_string(content) : json_null());
    if (strcmp(st, "failed") == 0) {
        bool cancelled = status && strcmp(status, "cancelled") == 0;
        const char *msg = json_string_value(json_object_get(g, "error_message"));
        json_object_set_new(v, "error", json_pack("{s:s, s:s}", "code", cancelled ? "cancelled" : "generation_failed",
                                                  "message", msg ? msg : cancelled ? "the video was cancelled"
                                                                                   : "the render failed"));
    } else {
        json_object_set_new(v, "error", json_null());
    }
    json_object_set(v, "generation_id", json_object_get(g, "generation_id"));
    return v;
}

static json_t *load_generation(mm_req *r, const char *id)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return NULL;
    char *text = NULL;
    mm_error err = {{0}};
    if (mm_store_generation_json(db, id, &text, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err.msg);
        return NULL;
    }
    json_t *g = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!g)
        mm_reply_error(r, 404, NULL, NULL, "no video has the id %s", id);
    return g;
}

/* ---------------------------------------------------------------- handlers */

void mm_api_video_create(mm_req *r)
{
    const char *ct = mm_req_header(r, "CONTENT_TYPE");
    json_t *in = ct && strncasecmp(ct, "multipart/form-data", 19) == 0 ? form_body(r) : mm_req_json(r);
    if (!in)
        return;
    if (!json_is_object(in)) {
        mm_reply_error(r, 400, NULL, "a JSON object with at least \"prompt\"", "the body must be a JSON object");
        json_decref(in);
        return;
    }
    json_t *body = translate(r, in);
    bool kinds_ok = body && check_condition_kinds(r, in);
    json_decref(in);
    if (!body || !kinds_ok) {
        json_decref(body);
        return;
    }
    char *rows = NULL;
    mm_rule_notes notes = {0};
    if (mm_enqueue_insert(r, body, &rows, &notes) == 0) {
        json_t *list = json_loads(rows, 0, NULL);
        json_t *g = json_array_get(list, 0);
        if (g) {
            json_t *v = video_json(g);
            json_object_set(v, "warnings", json_object_get(g, "warnings"));
            mm_add_warning_header(r, &notes);
            mm_reply_json(r, 200, v);
        } else {
            mm_reply_error(r, 500, NULL, NULL, "the new video could not be read back");
        }
        json_decref(list);
        free(rows);
    }
    json_decref(body);
}

/* ?limit=1..100 (default 20), ?after=<video id>, ?order=desc|asc (newest first by default). */
void mm_api_video_list(mm_req *r)
{
    char limit_s[24] = "", after[64] = "", order[16] = "desc";
    long limit = 20;
    if (mm_req_query(r, "limit", limit_s, sizeof limit_s)) {
        char *end;
        limit = strtol(limit_s, &end, 10);
        if (!limit_s[0] || *end || limit < 1 || limit > 100) {
            mm_reply_error(r, 400, "limit", "an integer 1..100 (default 20)", "'%.20s' is out of range", limit_s);
            return;
        }
    }
    bool has_after = mm_req_query(r, "after", after, sizeof after);
    if (has_after && !mm_is_uuid(after)) {
        mm_reply_error(r, 400, "after", "the id of a video from an earlier page", "'%.40s' is not a video id", after);
        return;
    }
    mm_req_query(r, "order", order, sizeof order);
    if (strcmp(order, "desc") != 0 && strcmp(order, "asc") != 0) {
        mm_reply_error(r, 400, "order", "desc (newest first, the default) or asc", "'%.10s' is not an order", order);
        return;
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char *text = NULL;
    mm_error err = {{0}};
    if (mm_store_list_after(db, has_after ? after : NULL, strcmp(order, "asc") == 0, limit, &text, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "the database refused the request (%s)", err.msg);
        return;
    }
    json_t *page = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!page) {
        mm_reply_error(r, 400, "after", "the id of a video from an earlier page", "no video has the id %s", after);
        return;
    }
    json_t *data = json_array(), *g;
    size_t i;
    json_array_foreach(json_object_get(page, "generations"), i, g) json_array_append_new(data, video_json(g));
    size_t n = json_array_size(data);
    json_t *out = json_pack("{s:s, s:o, s:O}", "object", "list", "data", data, "has_more",
                            json_object_get(page, "has_more"));
    json_object_set(out, "first_id", n ? json_object_get(json_array_get(data, 0), "id") : json_null());
    json_object_set(out, "last_id", n ? json_object_get(json_array_get(data, n - 1), "id") : json_null());
    json_decref(page);
    mm_reply_json(r, 200, out);
}

void mm_api_video_delete(mm_req *r, const char *id)
{
    mm_cancel_result result;
    if (mm_queue_cancel_or_delete(r, id, &result) < 0)
        return;
    /* A queued video is only cancelled by the first pass; the second removes it. */
    if (result == MM_CANCEL_CANCELLED && mm_queue_cancel_or_delete(r, id, &result) < 0)
        return;
    if (result == MM_CANCEL_NOT_FOUND)
        mm_reply_error(r, 404, NULL, NULL, "no video has the id %s", id);
    else if (result == MM_CANCEL_CANCELLING)
        mm_reply_error(r, 409, NULL, "DELETE again once GET /v1/videos/{id} says failed (cancelled)",
                       "the video is rendering; it is being cancelled and stops at the next step");
    else if (result == MM_CANCEL_DELETED)
        mm_reply_json(r, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "video.deleted", "deleted", 1));
    else
        mm_reply_error(r, 409, NULL, NULL, "the video kept changing state; try again");
}

void mm_api_video_get(mm_req *r, const char *id)
{
    json_t *g = load_generation(r, id);
    if (!g)
        return;
    mm_reply_json(r, 200, video_json(g));
    json_decref(g);
}

void mm_api_video_content(mm_req *r, const char *id)
{
    char variant[32] = "video";
    if (mm_req_query(r, "variant", variant, sizeof variant) && strcmp(variant, "video") != 0 &&
        strcmp(variant, "thumbnail") != 0) {
        mm_reply_error(r, 400, "variant", "video (default) or thumbnail", "'%s' is not a variant", variant);
        return;
    }
    json_t *g = load_generation(r, id);
    if (!g)
        return;
    const char *status = json_string_value(json_object_get(g, "status"));
    bool thumb = strcmp(variant, "thumbnail") == 0;
    const char *url = json_string_value(json_object_get(g, thumb ? "poster_url" : "result_url"));
    static const char files[] = "/api/files/generations/";
    if (!status || strcmp(status, "succeeded") != 0 || !url || strncmp(url, files, sizeof files - 1) != 0 ||
        strstr(url, "..")) {
        if (status && strcmp(status, "succeeded") == 0)
            mm_reply_error(r, 404, NULL, NULL, "the video has no %s", variant);
        else
            mm_reply_error(r, 409, NULL, "GET /v1/videos/{id} until its status is completed",
                           "the video is %s; its content is there once completed", status ? status : "unknown");
        json_decref(g);
        return;
    }
    /* nginx sends the file itself (Range requests, sendfile) from an internal location. */
    r->responded = true;
    FCGX_FPrintF(r->fcgx->out,
                 "Status: 200 OK\r\nContent-Type: %s\r\nX-Accel-Redirect: /internal/generations/%s\r\n"
                 "Cache-Control: private, max-age=3600\r\nX-Content-Type-Options: nosniff\r\n\r\n",
                 thumb ? "image/jpeg" : "video/mp4", url + sizeof files - 1);
    json_decref(g);
}
