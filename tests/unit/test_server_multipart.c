/* The multipart/form-data parser behind POST /api/images. */
#include <string.h>

#include "fcgi/multipart.h"
#include "test.h"

static int parse(const char *body, mm_mp_part *parts, int max, int *n, mm_error *err)
{
    return mm_multipart_parse("XyZ", (const uint8_t *)body, strlen(body), parts, max, n, err);
}

static void test_boundary(void)
{
    char b[80];
    mm_error err = {{0}};
    MM_EXPECT(mm_multipart_boundary("multipart/form-data; boundary=abc123", b, sizeof b, &err) == 0 &&
                  strcmp(b, "abc123") == 0, "plain: %s", b);
    MM_EXPECT(mm_multipart_boundary("multipart/form-data; charset=utf-8; boundary=\"a b\"", b, sizeof b, &err) == 0 &&
                  strcmp(b, "a b") == 0, "quoted: %s", b);
    MM_EXPECT(mm_multipart_boundary("application/json", b, sizeof b, &err) < 0, "not multipart");
    MM_EXPECT(mm_multipart_boundary("multipart/form-data", b, sizeof b, &err) < 0, "no boundary");
    MM_EXPECT(mm_multipart_boundary(NULL, b, sizeof b, &err) < 0, "no header");
}

static void test_two_parts(void)
{
    const char *body = "--XyZ\r\n"
                       "Content-Disposition: form-data; name=\"files\"; filename=\"a \\\"b\\\".png\"\r\n"
                       "Content-Type: image/png\r\n"
                       "\r\n"
                       "\x89PNG\r\n--Xy not a boundary\r\n"
                       "\r\n--XyZ\r\n"
                       "content-disposition: form-data; name=note\r\n"
                       "\r\n"
                       "hello\r\n"
                       "--XyZ--\r\n";
    mm_mp_part parts[4];
    int n = 0;
    mm_error err = {{0}};
    MM_REQUIRE(parse(body, parts, 4, &n, &err) == 0, "%s", err.msg);
    MM_REQUIRE(n == 2, "%d parts", n);
    MM_EXPECT(strcmp(parts[0].name, "files") == 0, "name %s", parts[0].name);
    MM_EXPECT(strcmp(parts[0].filename, "a \"b\".png") == 0, "filename %s", parts[0].filename);
    MM_EXPECT(strcmp(parts[0].content_type, "image/png") == 0, "type %s", parts[0].content_type);
    const char *want = "\x89PNG\r\n--Xy not a boundary\r\n";
    MM_EXPECT(parts[0].len == strlen(want) && memcmp(parts[0].data, want, parts[0].len) == 0, "data (%zu bytes)",
              parts[0].len);
    MM_EXPECT(strcmp(parts[1].name, "note") == 0 && parts[1].filename[0] == '\0', "second part %s", parts[1].name);
    MM_EXPECT(parts[1].len == 5 && memcmp(parts[1].data, "hello", 5) == 0, "second data");
}

static void test_preamble_and_binary(void)
{
    char body[256];
    size_t k = 0;
    const char *head = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"z\"\r\n\r\n";
    memcpy(body + k, head, strlen(head));
    k += strlen(head);
    const uint8_t bin[] = {0, 1, 2, 0, 255, '\r', '\n', '-', '-'};
    memcpy(body + k, bin, sizeof bin);
    k += sizeof bin;
    const char *tail = "\r\n--XyZ--";
    memcpy(body + k, tail, strlen(tail));
    k += strlen(tail);
    mm_mp_part parts[2];
    int n = 0;
    mm_error err = {{0}};
    MM_REQUIRE(mm_multipart_parse("XyZ", (const uint8_t *)body, k, parts, 2, &n, &err) == 0, "%s", err.msg);
    MM_EXPECT(n == 1 && parts[0].len == sizeof bin && memcmp(parts[0].data, bin, sizeof bin) == 0,
              "binary data with NULs survives");
}

static void test_malformed(void)
{
    mm_mp_part parts[2];
    int n = 0;
    mm_error err = {{0}};
    MM_EXPECT(parse("no boundary at all", parts, 2, &n, &err) < 0, "no boundary");
    MM_EXPECT(parse("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\ntruncated", parts, 2, &n, &err) < 0,
              "truncated part");
    MM_EXPECT(parse("--XyZ\r\nContent-Disposition: form-data; name=a\r\n", parts, 2, &n, &err) < 0,
              "headers never end");
    MM_EXPECT(parse("--XyZ\r\nX-Other: 1\r\n\r\nx\r\n--XyZ--", parts, 2, &n, &err) < 0, "no Content-Disposition");
    MM_EXPECT(parse("--XyZ\r\nContent-Disposition: attachment\r\n\r\nx\r\n--XyZ--", parts, 2, &n, &err) < 0,
              "not form-data");
    MM_EXPECT(parse("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--XyZ\r\n"
                    "Content-Disposition: form-data; name=b\r\n\r\n2\r\n--XyZ\r\n"
                    "Content-Disposition: form-data; name=c\r\n\r\n3\r\n--XyZ--",
                    parts, 2, &n, &err) < 0 && strstr(err.msg, "more than 2"),
              "too many parts: %s", err.msg);
}

int main(void)
{
    MM_RUN(test_boundary);
    MM_RUN(test_two_parts);
    MM_RUN(test_preamble_and_binary);
    MM_RUN(test_malformed);
    return mm_test_exit();
}
