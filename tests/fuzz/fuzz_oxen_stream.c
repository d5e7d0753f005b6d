/* libFuzzer: what the Oxen hub sends back, on arbitrary bytes. The body is
 * fed to the event-stream reader of the prompt rewrite (src/oxen/sse.c) in
 * chunks whose sizes come from the input, and must give the same events as
 * when fed whole; each event's data goes through the chat frame's JSON
 * reading. The first line is also parsed as an --oxen-remote URL, whose
 * checks must hold for anything accepted. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "oxen/remote.h"
#include "oxen/sse.h"

typedef struct event_log {
    char *text;
    size_t len, cap;
} event_log;

static int record(void *user, const char *event, const char *data, size_t len)
{
    event_log *l = user;
    size_t need = l->len + strlen(event) + len + 3;
    if (need > l->cap) {
        l->cap = need * 2;
        l->text = realloc(l->text, l->cap);
    }
    l->len += (size_t)sprintf(l->text + l->len, "%s\x01", event);
    memcpy(l->text + l->len, data, len);
    l->len += len;
    l->text[l->len++] = '\x02';
    /* The chat reader's use of a frame. */
    json_t *j = json_loadb(data, len, 0, NULL);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const char *content = json_string_value(json_object_get(json_object_get(choice, "delta"), "content"));
    if (content && strlen(content) > len)
        abort();
    json_decref(j);
    return 0;
}

static void run(const uint8_t *data, size_t size, const uint8_t *cuts, size_t n_cuts, event_log *l)
{
    mm_sse_reader r;
    mm_sse_reader_init(&r, record, l);
    r.max_line = 4096;
    size_t at = 0, c = 0;
    while (at < size) {
        size_t step = n_cuts ? (size_t)cuts[c++ % n_cuts] % 17 + 1 : size;
        if (step > size - at)
            step = size - at;
        if (mm_sse_feed(&r, (const char *)data + at, step) < 0)
            break;
        at += step;
    }
    mm_sse_finish(&r);
    mm_sse_reader_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    event_log whole = {0}, pieces = {0};
    run(data, size, NULL, 0, &whole);
    run(data, size, data, size < 64 ? size : 64, &pieces);
    /* Splits never change the events (unless a line was too long, which stops both). */
    if (whole.len != pieces.len || (whole.len && memcmp(whole.text, pieces.text, whole.len) != 0))
        abort();
    free(whole.text);
    free(pieces.text);

    char url[512];
    size_t k = 0;
    while (k < size && k + 1 < sizeof url && data[k] != '\n' && data[k] != '\0') {
        url[k] = (char)data[k];
        k++;
    }
    url[k] = '\0';
    mm_oxen_remote rem;
    if (mm_oxen_remote_parse(url, &rem, NULL) == 0) {
        bool https = strncmp(rem.origin, "https://", 8) == 0, http = strncmp(rem.origin, "http://", 7) == 0;
        if (!(https || (http && rem.loopback)) || strchr(rem.origin + 8, '@') || strchr(rem.ns, '/') ||
            strchr(rem.repo, '/') || (rem.ns[0] != 0) != (rem.repo[0] != 0))
            abort();
    }
    return 0;
}
