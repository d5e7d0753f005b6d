/* An incremental reader of text/event-stream (the WHATWG "server-sent
 * events" format), for the streamed chat completions the prompt rewrite
 * relays. Bytes are fed as they arrive, split anywhere (inside a line, a
 * UTF-8 sequence or a CRLF pair); each complete event (ended by a blank line)
 * is handed to the callback with its event name ("message" by default) and
 * its data lines joined by "\n". Comment lines (":...") are skipped; "id" and
 * "retry" are ignored. A line longer than max_line is an error.
 */
#ifndef MMH3_OXEN_SSE_H
#define MMH3_OXEN_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* Return -1 to stop reading. */
typedef int (*mm_sse_event_fn)(void *user, const char *event, const char *data, size_t len);

typedef struct mm_sse_reader {
    mm_sse_event_fn on_event;
    void *user;
    size_t max_line;   /* default 1 MiB */
    char *line;        /* the line being assembled */
    size_t line_len, line_cap;
    char *data;        /* data lines of the event being assembled */
    size_t data_len, data_cap;
    bool has_data;
    char event[64];
    bool cr_pending;   /* the last byte was '\r': a following '\n' belongs to it */
    bool failed;
} mm_sse_reader;

void mm_sse_reader_init(mm_sse_reader *r, mm_sse_event_fn on_event, void *user);
/* 0, or -1 when the callback stopped or a line was too long / memory ran out. */
int mm_sse_feed(mm_sse_reader *r, const char *bytes, size_t n);
/* End of stream: a final event without its blank line is dispatched
 * (browsers drop it; upstream servers that close right after "data: [DONE]"
 * are common enough to accept it). */
int mm_sse_finish(mm_sse_reader *r);
void mm_sse_reader_free(mm_sse_reader *r);

#endif
