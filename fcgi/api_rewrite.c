/* POST /api/rewrite — the prompt rewrite, streamed.
 *
 * The request {prompt, model?} is checked, then relayed to the Oxen hub's
 * OpenAI-compatible chat completions with stream:true, using the API key,
 * model and system prompt from the settings (the built-in system prompt
 * when none is stored). The answer is an SSE stream:
 *
 *   event: token   data: {"token":"..."}      one per upstream delta
 *   event: done    data: {"prompt":"..."}     the whole rewrite
 *   event: error   data: {"message":"..."}    upstream or network failure
 *
 * Refusals before anything is sent upstream (rewrite off, no key, bad
 * prompt) are ordinary JSON errors. The key goes only into the upstream
 * Authorization header: never into an answer, an event or a log line.
 * The upstream is the configured hub ($MMH3_OXEN_REMOTE's origin, set by the
 * operator, never by a request), else https://hub.oxen.ai.
 */
#include "fcgi/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request/rules.h"
#include "oxen/chat.h"
#include "oxen/client.h"
#include "oxen/rewrite_prompt.h"
#include "store/settings.h"
#include "core/log.h"

#define REWRITE_SECONDS 120 /* the whole stream */

typedef struct rewrite_settings {
    bool enabled;
    char *key, *model, *system;
} rewrite_settings;

static void settings_free(rewrite_settings *s)
{
    if (s->key)
        explicit_bzero(s->key, strlen(s->key));
    free(s->key), free(s->model), free(s->system);
}

/* The setting's text: a string's contents, else its JSON ("true"). */
static char *setting_text(json_t *values, const char *key)
{
    json_t *v = json_object_get(values, key);
    if (!v || json_is_null(v))
        return NULL;
    if (json_is_string(v))
        return json_string_length(v) ? strdup(json_string_value(v)) : NULL;
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

/* The rewrite's settings; fallback_key (the environment's, read at start-up) when none is stored. */
static int load_settings(PGconn *db, const char *fallback_key, rewrite_settings *s, mm_error *err)
{
    memset(s, 0, sizeof *s);
    static const char *const keys[] = {"oxen_api_key", "rewrite_enabled", "rewrite_model", "rewrite_system_prompt"};
    json_t *values = NULL;
    if (mm_store_settings_get(db, keys, 4, &values, err) < 0)
        return -1;
    char *enabled = setting_text(values, "rewrite_enabled");
    s->enabled = enabled && strcmp(enabled, "true") == 0;
    free(enabled);
    s->key = setting_text(values, "oxen_api_key");
    s->model = setting_text(values, "rewrite_model");
    s->system = setting_text(values, "rewrite_system_prompt");
    json_decref(values);
    if (!s->key && fallback_key)
        s->key = strdup(fallback_key);
    if (!s->model)
        s->model = strdup(MM_REWRITE_MODEL_DEFAULT);
    return 0;
}

/* ---------------------------------------------------------------- the stream */

typedef struct relay {
    mm_req *r;
    const char *key; /* redacted from anything sent */
    bool broken;     /* the browser went away */
} relay;

static int send_event(relay *rl, const char *event, json_t *data)
{
    char *text = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(data);
    if (!text)
        return -1;
    FCGX_Stream *out = rl->r->fcgx->out;
    int rc = FCGX_FPrintF(out, "event: %s\ndata: %s\n\n", event, text);
    free(text);
    if (rc < 0 || FCGX_FFlush(out) < 0) {
        rl->broken = true;
        return -1;
    }
    return 0;
}

static int on_token(void *user, const char *token, size_t len)
{
    relay *rl = user;
    return send_event(rl, "token", json_pack("{s:s%}", "token", token, len));
}

void mm_api_rewrite(mm_req *r)
{
    static const char accept[] = "{\"prompt\": \"text\", \"model\": optional, the rewrite model of the settings}";
    json_t *body = mm_req_json(r);
    if (!body)
        return;
    rewrite_settings set = {0};
    mm_error err = {{0}};
    const char *key;
    json_t *val;
    if (!json_is_object(body)) {
        mm_reply_error(r, 400, NULL, accept, "the body must be a JSON object");
        goto done;
    }
    json_object_foreach(body, key, val)
    {
        if (strcmp(key, "prompt") != 0 && strcmp(key, "model") != 0) {
            mm_reply_error(r, 400, key, accept, "is not a field of this request");
            goto done;
        }
    }
    json_t *prompt = json_object_get(body, "prompt");
    if (!json_is_string(prompt)) {
        mm_reply_error(r, 400, "prompt", MM_ACCEPT_PROMPT, prompt ? "must be a string" : "is required");
        goto done;
    }
    if (mm_rule_prompt(json_string_value(prompt), json_string_length(prompt), &err) < 0) {
        mm_reply_error(r, 400, "prompt", MM_ACCEPT_PROMPT, "%s", err.msg);
        goto done;
    }
    PGconn *db = mm_req_db(r);
    if (!db)
        goto done;
    if (load_settings(db, r->app->oxen_token, &set, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "reading the settings: %s", err.msg);
        goto done;
    }
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model) &&
        (!json_is_string(model) || strcmp(json_string_value(model), set.model) != 0)) {
        /* The model is the owner's choice (it spends the owner's credits). */
        mm_reply_error(r, 400, "model", "the rewrite model set in the settings, or nothing",
                       "'%.100s' is not the rewrite model of the settings ('%.100s')",
                       json_is_string(model) ? json_string_value(model) : "?", set.model);
        goto done;
    }
    if (!set.enabled) {
        mm_reply_error(r, 409, NULL, "PUT /api/settings {\"rewrite_enabled\": true}",
                       "prompt rewrite is turned off in the settings");
        goto done;
    }
    if (!set.key) {
        mm_reply_error(r, 409, NULL, "PUT /api/settings {\"oxen_api_key\": \"...\"}",
                       "no Oxen API key is stored; the rewrite runs on the Oxen hub with your key");
        goto done;
    }
    const char *remote = r->app->oxen_remote;
    mm_oxen_client client;
    if (mm_oxen_client_init(&client, remote ? remote : MM_OXEN_DEFAULT_HUB, set.key, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "the server's Oxen configuration is wrong: %s", err.msg);
        goto done;
    }
    client.timeout = REWRITE_SECONDS;

    /* From here on the answer is the event stream. */
    r->responded = true;
    FCGX_FPrintF(r->fcgx->out, "Status: 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                               "Cache-Control: no-store\r\nX-Accel-Buffering: no\r\n"
                               "X-Content-Type-Options: nosniff\r\n\r\n");
    FCGX_FFlush(r->fcgx->out);
    relay rl = {.r = r, .key = set.key};
    mm_chat_request req = {
        .model = set.model,
        .system_prompt = set.system ? set.system : mm_rewrite_default_system_prompt(),
        .user_prompt = json_string_value(prompt),
        .temperature = -1,
    };
    char *text = NULL;
    size_t prompt_chars = json_string_length(prompt);
    if (mm_oxen_chat_stream(&client, &req, on_token, &rl, &text, &err) == 0) {
        send_event(&rl, "done", json_pack("{s:s}", "prompt", text));
        mm_log("rewrite: %zu -> %zu bytes with %s", prompt_chars, strlen(text), set.model);
    } else if (!rl.broken) {
        mm_oxen_redact(err.msg, set.key);
        send_event(&rl, "error", json_pack("{s:s}", "message", err.msg));
        mm_log("rewrite with %s failed: %s", set.model, err.msg);
    } else {
        mm_log("rewrite: the browser went away mid-stream");
    }
    free(text);
    explicit_bzero(client.token, sizeof client.token);
done:
    settings_free(&set);
    json_decref(body);
}
