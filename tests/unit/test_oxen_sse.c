/* The event-stream reader of the prompt rewrite (src/oxen/sse.h): the same
 * events however the bytes are split across reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oxen/sse.h"
#include "test.h"

typedef struct collected {
    char text[8192];
    int n;
    int stop_after; /* 0: never */
} collected;

static int collect(void *user, const char *event, const char *data, size_t len)
{
    collected *c = user;
    size_t used = strlen(c->text);
    snprintf(c->text + used, sizeof c->text - used, "[%s|%.*s]", event, (int)len, data);
    c->n++;
    return c->stop_after && c->n >= c->stop_after ? -1 : 0;
}

/* CR, LF and CRLF endings, a comment, an event name, multi-line data, a
 * field without a colon, an empty data line and a 4-byte UTF-8 sequence. */
static const char stream[] = ": hello\r\n"
                             "data: {\"a\":1}\r\n\r\n"
                             "event: token\n"
                             "data: first\n"
                             "data:second\n\n"
                             "id: 7\rretry: 100\rdata: cr \xf0\x9f\x8e\xac\r\r"
                             "data\n\n"
                             "event: done\r\ndata: [DONE]\r\n\r\n";
static const char expected[] = "[message|{\"a\":1}][token|first\nsecond][message|cr \xf0\x9f\x8e\xac][message|]"
                               "[done|[DONE]]";

static void run(const char *bytes, size_t n, const size_t *cuts, int ncuts, collected *c)
{
    mm_sse_reader r;
    mm_sse_reader_init(&r, collect, c);
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        mm_sse_feed(&r, bytes + at, end - at);
        at = end;
    }
    mm_sse_finish(&r);
    mm_sse_reader_free(&r);
}

static void test_whole_stream(void)
{
    collected c = {0};
    run(stream, sizeof stream - 1, NULL, 0, &c);
    MM_EXPECT(strcmp(c.text, expected) == 0, "got %s", c.text);
}

static void test_every_single_split(void)
{
    size_t n = sizeof stream - 1;
    for (size_t k = 1; k < n; k++) {
        collected c = {0};
        run(stream, n, &k, 1, &c);
        MM_REQUIRE(strcmp(c.text, expected) == 0, "split at %zu: %s", k, c.text);
    }
}

static void test_every_pair_of_splits(void)
{
    size_t n = sizeof stream - 1;
    for (size_t a = 1; a < n; a += 3)
        for (size_t b = a + 1; b < n; b++) {
            size_t cuts[2] = {a, b};
            collected c = {0};
            run(stream, n, cuts, 2, &c);
            MM_REQUIRE(strcmp(c.text, expected) == 0, "splits at %zu,%zu: %s", a, b, c.text);
        }
}

static void test_byte_by_byte(void)
{
    size_t n = sizeof stream - 1;
    size_t cuts[sizeof stream];
    for (size_t i = 0; i + 1 < n; i++)
        cuts[i] = i + 1;
    collected c = {0};
    run(stream, n, cuts, (int)(n - 1), &c);
    MM_EXPECT(strcmp(c.text, expected) == 0, "got %s", c.text);
}

static void test_last_event_without_blank_line(void)
{
    collected c = {0};
    static const char s[] = "data: a\n\ndata: tail";
    run(s, sizeof s - 1, NULL, 0, &c);
    MM_EXPECT(strcmp(c.text, "[message|a][message|tail]") == 0, "got %s", c.text);
}

static void test_callback_stops_the_reader(void)
{
    collected c = {.stop_after = 1};
    mm_sse_reader r;
    mm_sse_reader_init(&r, collect, &c);
    MM_EXPECT(mm_sse_feed(&r, "data: 1\n\ndata: 2\n\n", 18) == -1, "the stop was not reported");
    MM_EXPECT(c.n == 1, "%d events after the stop", c.n);
    MM_EXPECT(mm_sse_feed(&r, "data: 3\n\n", 9) == -1, "a stopped reader read on");
    mm_sse_reader_free(&r);
}

static void test_overlong_line_is_refused(void)
{
    collected c = {0};
    mm_sse_reader r;
    mm_sse_reader_init(&r, collect, &c);
    r.max_line = 64;
    char chunk[40];
    memset(chunk, 'x', sizeof chunk);
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++)
        rc = mm_sse_feed(&r, chunk, sizeof chunk);
    MM_EXPECT(rc == -1, "a 160-byte line passed a 64-byte limit");
    mm_sse_reader_free(&r);
}

int main(void)
{
    MM_RUN(test_whole_stream);
    MM_RUN(test_every_single_split);
    MM_RUN(test_every_pair_of_splits);
    MM_RUN(test_byte_by_byte);
    MM_RUN(test_last_event_without_blank_line);
    MM_RUN(test_callback_stops_the_reader);
    MM_RUN(test_overlong_line_is_refused);
    return mm_test_exit();
}
