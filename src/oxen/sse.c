#include "oxen/sse.h"

#include <stdlib.h>
#include <string.h>

void mm_sse_reader_init(mm_sse_reader *r, mm_sse_event_fn on_event, void *user)
{
    memset(r, 0, sizeof *r);
    r->on_event = on_event;
    r->user = user;
    r->max_line = 1u << 20;
}

void mm_sse_reader_free(mm_sse_reader *r)
{
    free(r->line);
    free(r->data);
    r->line = r->data = NULL;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return -1;
        *buf = b, *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int dispatch(mm_sse_reader *r)
{
    int rc = 0;
    if (r->has_data)
        rc = r->on_event(r->user, r->event[0] ? r->event : "message", r->data ? r->data : "", r->data_len);
    r->has_data = false;
    r->data_len = 0;
    if (r->data)
        r->data[0] = '\0';
    r->event[0] = '\0';
    return rc;
}

static int end_line(mm_sse_reader *r)
{
    const char *line = r->line ? r->line : "";
    size_t len = r->line_len;
    r->line_len = 0;
    if (len == 0)
        return dispatch(r);
    if (line[0] == ':')
        return 0;
    const char *colon = memchr(line, ':', len);
    size_t flen = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t vlen = colon ? len - flen - 1 : 0;
    if (vlen && value[0] == ' ')
        value++, vlen--;
    if (flen == 4 && memcmp(line, "data", 4) == 0) {
        if (r->has_data && append(&r->data, &r->data_len, &r->data_cap, "\n", 1) < 0)
            return -1;
        if (append(&r->data, &r->data_len, &r->data_cap, value, vlen) < 0)
            return -1;
        r->has_data = true;
    } else if (flen == 5 && memcmp(line, "event", 5) == 0) {
        size_t n = vlen < sizeof r->event - 1 ? vlen : sizeof r->event - 1;
        memcpy(r->event, value, n);
        r->event[n] = '\0';
    }
    return 0;
}

int mm_sse_feed(mm_sse_reader *r, const char *bytes, size_t n)
{
    if (r->failed)
        return -1;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        char c = bytes[i];
        if (r->cr_pending) {
            r->cr_pending = false;
            if (c == '\n') {
                start = i + 1;
                continue;
            }
        }
        if (c != '\n' && c != '\r')
            continue;
        if (r->line_len + (i - start) > r->max_line ||
            append(&r->line, &r->line_len, &r->line_cap, bytes + start, i - start) < 0 || end_line(r) < 0)
            return r->failed = true, -1;
        r->cr_pending = c == '\r';
        start = i + 1;
    }
    if (start < n) {
        if (r->line_len + (n - start) > r->max_line ||
            append(&r->line, &r->line_len, &r->line_cap, bytes + start, n - start) < 0)
            return r->failed = true, -1;
    }
    return 0;
}

int mm_sse_finish(mm_sse_reader *r)
{
    if (r->failed)
        return -1;
    if (r->line_len && end_line(r) < 0)
        return -1;
    return dispatch(r);
}
