#include "oxen/chat.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "oxen/sse.h"

typedef struct chat_state {
    mm_chat_token_fn on_token;
    void *user;
    char *text;
    size_t len, cap;
    bool done, finished, stopped, failed;
    mm_error *err;
    mm_sse_reader sse;
} chat_state;

static int keep(chat_state *s, const char *t, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *b = realloc(s->text, cap);
        if (!b)
            return -1;
        s->text = b, s->cap = cap;
    }
    memcpy(s->text + s->len, t, n);
    s->len += n;
    s->text[s->len] = '\0';
    return 0;
}

static int on_event(void *user, const char *event, const char *data, size_t len)
{
    chat_state *s = user;
    if (s->done)
        return 0;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->done = true;
        return 0;
    }
    json_error_t je;
    json_t *j = json_loadb(data, len, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        s->failed = true;
        mm_fail(s->err, "the hub streamed a frame that is not JSON (%s at column %d)", je.text, je.column);
        return -1;
    }
    bool is_error = strcmp(event, "error") == 0 || json_object_get(j, "error");
    const char *hub_error = is_error ? mm_oxen_error_message(j) : NULL;
    if (is_error) {
        s->failed = true;
        mm_fail(s->err, "the hub reported an error mid-stream: %.300s", hub_error ? hub_error : "(no message)");
        json_decref(j);
        return -1;
    }
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    json_t *delta = json_object_get(choice, "delta");
    const char *content = json_string_value(json_object_get(delta, "content"));
    if (!content) /* some servers stream whole messages */
        content = json_string_value(json_object_get(json_object_get(choice, "message"), "content"));
    int rc = 0;
    if (content && *content) {
        size_t n = strlen(content);
        if (keep(s, content, n) < 0) {
            s->failed = true;
            mm_fail(s->err, "out of memory keeping the rewrite");
            rc = -1;
        } else if (s->on_token && s->on_token(s->user, content, n) < 0) {
            s->stopped = true;
            rc = -1;
        }
    }
    if (json_string_value(json_object_get(choice, "finish_reason")))
        s->finished = true;
    json_decref(j);
    return rc;
}

static int on_data(void *user, const char *data, size_t len)
{
    chat_state *s = user;
    if (mm_sse_feed(&s->sse, data, len) < 0) {
        if (!s->failed && !s->stopped) {
            s->failed = true;
            mm_fail(s->err, "the hub's event stream has a line longer than 1 MiB");
        }
        return -1;
    }
    return 0;
}

int mm_oxen_chat_stream(const mm_oxen_client *c, const mm_chat_request *req, mm_chat_token_fn on_token,
                        void *user, char **text, mm_error *err)
{
    if (text)
        *text = NULL;
    json_t *messages = json_array();
    if (req->system_prompt && *req->system_prompt)
        json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", req->system_prompt));
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", req->user_prompt));
    json_t *body = json_pack("{s:s, s:o, s:b}", "model", req->model, "messages", messages, "stream", 1);
    if (req->temperature >= 0)
        json_object_set_new(body, "temperature", json_real(req->temperature));
    if (req->max_tokens > 0)
        json_object_set_new(body, "max_tokens", json_integer(req->max_tokens));

    mm_error local = {{0}};
    chat_state s = {.on_token = on_token, .user = user, .err = &local};
    mm_sse_reader_init(&s.sse, on_event, &s);
    long status = 0;
    int rc = mm_oxen_stream(c, MM_OXEN_CHAT_PATH, body, on_data, &s, &status, err);
    json_decref(body);
    if (rc == 0 && !s.done && !s.failed)
        mm_sse_finish(&s.sse);
    mm_sse_reader_free(&s.sse);
    if (s.failed || (rc < 0 && local.msg[0])) {
        mm_fail(err, "%s", local.msg);
        rc = -1;
    } else if (s.stopped) {
        rc = mm_fail(err, "the reader went away");
    } else if (rc == 0 && !s.done && !s.finished) {
        rc = mm_fail(err, "the hub's stream ended before the rewrite was complete (no [DONE])");
    } else if (rc == 0 && s.len == 0) {
        rc = mm_fail(err, "the model returned an empty rewrite");
    }
    if (rc == 0 && text)
        *text = s.text;
    else
        free(s.text);
    return rc;
}
