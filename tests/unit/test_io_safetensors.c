/* safetensors reader and writer: round trips, the on-disk layout, and one
 * malformed file per validation rule (each must fail with a message naming
 * the file and, where there is one, the tensor). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "test.h"

static char tmpdir[256];

/* Rotates through a few buffers so that several paths can be alive at once. */
static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* Writes 8-byte length + header + `data_bytes` bytes of 0xab. */
static void write_raw(const char *path, const char *header, uint64_t declared_len, size_t data_bytes)
{
    FILE *f = fopen(path, "wb");
    uint8_t lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (uint8_t)(declared_len >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0xab, f);
    fclose(f);
}

/* Opens a file made from `header` and expects failure mentioning every needle. */
static int expect_bad(const char *header, size_t data_bytes, const char *needle1, const char *needle2)
{
    const char *p = tmp_path("bad.safetensors");
    write_raw(p, header, strlen(header), data_bytes);
    mm_safetensors *st = NULL;
    mm_error err = {{0}};
    int rc = mm_st_open(&st, p, &err);
    if (rc == 0) {
        mm_st_close(st);
        printf("     accepted: %s\n", header);
        return 0;
    }
    int ok = strstr(err.msg, "bad.safetensors") && strstr(err.msg, needle1) && (!needle2 || strstr(err.msg, needle2));
    if (!ok)
        printf("     message: %s\n", err.msg);
    return ok;
}

static void test_roundtrip_and_layout(void)
{
    mm_error err = {{0}};
    float f32[6] = {1, 2, 3, 4, 5, -6.5f};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0};
    int8_t i8[6] = {-128, -1, 0, 1, 2, 127};
    uint8_t u8[5] = {1, 2, 3, 4, 5};
    double f64[1] = {3.25};
    int64_t i64[1] = {-7};
    mm_tensor ts[7] = {
        mm_tensor_wrap(f32, mm_cpu(), MM_F32, 2, MM_SHAPE(2, 3)),
        mm_tensor_wrap(bf, mm_cpu(), MM_BF16, 1, MM_SHAPE(4)),
        mm_tensor_wrap(i8, mm_cpu(), MM_I8, 2, MM_SHAPE(3, 2)),
        mm_tensor_wrap(u8, mm_cpu(), MM_U8, 1, MM_SHAPE(5)),
        mm_tensor_wrap(f64, mm_cpu(), MM_F64, 1, MM_SHAPE(1)),
        mm_tensor_wrap(i64, mm_cpu(), MM_I64, 0, NULL),
        mm_tensor_wrap(f32, mm_cpu(), MM_F32, 2, MM_SHAPE(0, 4)),
    };
    const char *names[7] = {"model.diffusion_model.w", "b16", "q", "blob", "d", "scalar", "empty"};
    const char *p = tmp_path("rt.safetensors");
    MM_REQUIRE(mm_st_save(p, 7, names, ts, &err) == 0, "%s", err.msg);
    MM_EXPECT(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0, "temporary file left behind");

    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_count(st) == 7, "count %zu", mm_st_count(st));
    MM_EXPECT(mm_st_header_size(st) % 8 == 0, "header padded to 8: %llu", (unsigned long long)mm_st_header_size(st));
    /* name order iteration */
    for (size_t i = 1; i < mm_st_count(st); i++)
        MM_EXPECT(strcmp(mm_st_at(st, i - 1)->name, mm_st_at(st, i)->name) < 0, "sorted names");
    /* file order: 8-byte types first, then 4, 2, 1; every tensor aligned; packed without gaps */
    const mm_st_entry *d = mm_st_find(st, "d"), *sc = mm_st_find(st, "scalar"), *bl = mm_st_find(st, "blob");
    MM_REQUIRE(d && sc && bl, "entries present");
    MM_EXPECT(d->begin == 0 && sc->begin == 0 + 8 && d->end == 8, "f64 then i64 first: %llu %llu",
              (unsigned long long)d->begin, (unsigned long long)sc->begin);
    uint64_t total = 0;
    for (size_t i = 0; i < mm_st_count(st); i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        total += e->end - e->begin;
        int a = mm_dtype_bits(e->dtype) / 8;
        MM_EXPECT(((uintptr_t)e->data) % (uintptr_t)a == 0, "%s aligned", e->name);
    }
    MM_EXPECT(total + mm_st_header_size(st) == mm_st_file_size(st), "no gaps, no trailing bytes");

    mm_tensor t;
    MM_REQUIRE(mm_st_get_expect(st, "model.diffusion_model.w", MM_F32, 2, MM_SHAPE(2, 3), &t, &err) == 0, "%s",
               err.msg);
    MM_EXPECT(mm_tensor_get(&t, MM_SHAPE(1, 2)) == -6.5, "f32 value");
    MM_EXPECT(t.storage == NULL, "borrowed view");
    MM_REQUIRE(mm_st_get(st, "q", &t, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tensor_get(&t, MM_SHAPE(0, 0)) == -128 && mm_tensor_get(&t, MM_SHAPE(2, 1)) == 127, "i8 values");
    MM_REQUIRE(mm_st_get(st, "b16", &t, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tensor_get(&t, MM_SHAPE(2)) == -1.0, "bf16 value");
    MM_REQUIRE(mm_st_get(st, "scalar", &t, &err) == 0 && t.ndim == 0, "scalar");
    MM_EXPECT(*(int64_t *)t.data == -7, "i64 scalar");
    MM_REQUIRE(mm_st_get(st, "empty", &t, &err) == 0 && t.shape[0] == 0 && t.shape[1] == 4, "zero-size tensor");

    MM_EXPECT(mm_st_get(st, "nope", &t, &err) == -1 && strstr(err.msg, "'nope' not found") &&
                  strstr(err.msg, "rt.safetensors"),
              "%s", err.msg);
    MM_EXPECT(mm_st_get_expect(st, "q", MM_U8, -1, NULL, &t, &err) == -1 && strstr(err.msg, "dtype U8 expected"),
              "%s", err.msg);
    MM_EXPECT(mm_st_get_expect(st, "q", MM_I8, 2, MM_SHAPE(2, 3), &t, &err) == -1 && strstr(err.msg, "[3, 2]"), "%s",
              err.msg);

    size_t k = 0;
    MM_REQUIRE(mm_st_strip_prefix(st, "model.diffusion_model.", &k, &err) == 0 && k == 1, "strip %zu %s", k,
               err.msg);
    MM_EXPECT(mm_st_find(st, "w") && !mm_st_find(st, "model.diffusion_model.w"), "prefix stripped");
    MM_EXPECT(mm_st_count_prefix(st, "b") == 2, "prefix count");
    mm_st_close(st);
}

static void test_metadata_and_streaming_writer(void)
{
    mm_error err = {{0}};
    mm_st_writer *w;
    const char *p = tmp_path("stream.safetensors");
    MM_REQUIRE(mm_st_writer_open(&w, p, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_st_writer_declare(w, "big", MM_F32, 2, MM_SHAPE(100, 10), &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_st_writer_declare(w, "small", MM_U8, 1, MM_SHAPE(3), &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_writer_declare(w, "small", MM_U8, 1, MM_SHAPE(3), &err) == -1, "duplicate declaration refused");
    MM_REQUIRE(mm_st_writer_metadata(w, "format", "pt", &err) == 0, "%s", err.msg);
    const mm_st_entry *e;
    int seen = 0;
    for (;;) {
        MM_REQUIRE(mm_st_writer_next(w, &e, &err) == 0, "%s", err.msg);
        if (!e)
            break;
        seen++;
        if (strcmp(e->name, "big") == 0) {
            for (int r = 0; r < 100; r++) { /* one row at a time */
                float row[10];
                for (int c = 0; c < 10; c++)
                    row[c] = (float)(r * 10 + c);
                MM_REQUIRE(mm_st_writer_append(w, row, sizeof row, &err) == 0, "%s", err.msg);
            }
            MM_EXPECT(mm_st_writer_append(w, "x", 1, &err) == -1 && strstr(err.msg, "'big'"), "overflow refused");
        } else {
            MM_REQUIRE(mm_st_writer_append(w, "abc", 3, &err) == 0, "%s", err.msg);
        }
    }
    MM_EXPECT(seen == 2, "two tensors");
    MM_REQUIRE(mm_st_writer_close(w, &err) == 0, "%s", err.msg);

    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_metadata(st, "format") && strcmp(mm_st_metadata(st, "format"), "pt") == 0, "metadata");
    MM_EXPECT(mm_st_metadata_count(st) == 1, "one metadata pair");
    mm_tensor t;
    MM_REQUIRE(mm_st_get(st, "big", &t, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tensor_get(&t, MM_SHAPE(99, 9)) == 999.0, "streamed value");
    mm_st_close(st);

    /* a short tensor is an error at close, and nothing is left at the path */
    MM_REQUIRE(mm_st_writer_open(&w, tmp_path("short.safetensors"), &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_st_writer_declare(w, "t", MM_F32, 1, MM_SHAPE(4), &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_st_writer_next(w, &e, &err) == 0 && e, "%s", err.msg);
    MM_REQUIRE(mm_st_writer_append(w, "abcd", 4, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_writer_close(w, &err) == -1 && strstr(err.msg, "4 of its 16 bytes"), "%s", err.msg);
    MM_EXPECT(access(tmp_path("short.safetensors"), F_OK) != 0 && access(tmp_path("short.safetensors.tmp"), F_OK) != 0,
              "no file left");
}

static void test_malformed_files(void)
{
    /* too short / header length */
    FILE *f = fopen(tmp_path("bad.safetensors"), "wb");
    fwrite("abcd", 1, 4, f);
    fclose(f);
    mm_safetensors *st;
    mm_error err = {{0}};
    MM_EXPECT(mm_st_open(&st, tmp_path("bad.safetensors"), &err) == -1 && strstr(err.msg, "too short"), "%s",
              err.msg);
    write_raw(tmp_path("bad.safetensors"), "{}", 1ull << 40, 0);
    MM_EXPECT(mm_st_open(&st, tmp_path("bad.safetensors"), &err) == -1 && strstr(err.msg, "absurd"), "%s", err.msg);
    write_raw(tmp_path("bad.safetensors"), "{}", 4000, 0);
    MM_EXPECT(mm_st_open(&st, tmp_path("bad.safetensors"), &err) == -1 && strstr(err.msg, "exceeds the file"), "%s",
              err.msg);
    MM_EXPECT(mm_st_open(&st, tmp_path("missing.safetensors"), &err) == -1 && strstr(err.msg, "missing.safetensors") &&
                  strstr(err.msg, "No such file"),
              "%s", err.msg);

    MM_EXPECT(expect_bad("{\"a\": ", 0, "not valid JSON", NULL), "invalid JSON");
    MM_EXPECT(expect_bad("[1, 2]", 0, "not an object", NULL), "array header");
    MM_EXPECT(expect_bad("{\"a\": 5}", 0, "'a'", "not a JSON object"), "entry not an object");
    MM_EXPECT(expect_bad("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "'a'", "dtype"), "missing dtype");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "'a'",
                         "unknown dtype \"F33\""),
              "unknown dtype");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "'a'",
                         "shape[0]"),
              "negative dim");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
                         "'a'", "7 dimensions"),
              "rank");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, "'a'",
                         "two integers"),
              "offsets arity");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "'a'",
                         "begin <= end"),
              "begin > end");
    MM_EXPECT(expect_bad("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 12, "'w'",
                         "truncated"),
              "end beyond data");
    MM_EXPECT(expect_bad("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, "'w'",
                         "needs 24 bytes"),
              "size mismatch");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                         "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                         12, "overlaps", "'a'"),
              "overlap");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                         "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                         8, "JSON", "duplicate"),
              "duplicate key");
    MM_EXPECT(expect_bad("{\"__metadata__\": {\"k\": 1}}", 0, "__metadata__", "'k'"), "metadata value");
    MM_EXPECT(expect_bad("{\"__metadata__\": [1]}", 0, "__metadata__", NULL), "metadata type");
    MM_EXPECT(expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], "
                         "\"data_offsets\": [0, 4]}}",
                         4, "'a'", "overflow"),
              "numel overflow");

    /* prefix collision */
    const char *p = tmp_path("col.safetensors");
    write_raw(p,
              "{\"x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
              "\"pre.x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
              strlen("{\"x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
                     "\"pre.x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}"),
              2);
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_strip_prefix(st, "pre.", NULL, &err) == -1 && strstr(err.msg, "'x' appears twice") &&
                  strstr(err.msg, "'pre.'"),
              "%s", err.msg);
    mm_st_close(st);
}

static void test_truncated_real_file(void)
{
    mm_error err = {{0}};
    float v[256];
    for (int i = 0; i < 256; i++)
        v[i] = (float)i;
    mm_tensor ts[2] = {mm_tensor_wrap(v, mm_cpu(), MM_F32, 1, MM_SHAPE(128)),
                       mm_tensor_wrap(v + 128, mm_cpu(), MM_F32, 1, MM_SHAPE(128))};
    const char *names[2] = {"first", "second"};
    const char *p = tmp_path("trunc.safetensors");
    MM_REQUIRE(mm_st_save(p, 2, names, ts, &err) == 0, "%s", err.msg);
    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    uint64_t size = mm_st_file_size(st);
    mm_st_close(st);
    MM_REQUIRE(truncate(p, (off_t)(size - 10)) == 0, "truncate");
    MM_EXPECT(mm_st_open(&st, p, &err) == -1 && strstr(err.msg, "'second'") && strstr(err.msg, "truncated") &&
                  strstr(err.msg, "trunc.safetensors"),
              "%s", err.msg);
    /* every shorter prefix of the file fails cleanly too */
    FILE *f = fopen(p, "rb");
    uint8_t *buf = malloc(size);
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    int crashes_or_accepts = 0;
    for (size_t n = 0; n < got; n += 7) {
        if (mm_st_open_memory(&st, "mem", buf, n, &err) == 0) {
            crashes_or_accepts++;
            mm_st_close(st);
        }
    }
    MM_EXPECT(crashes_or_accepts == 0, "%d truncated prefixes accepted", crashes_or_accepts);
    free(buf);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mmh3-test-st-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    MM_RUN(test_roundtrip_and_layout);
    MM_RUN(test_metadata_and_streaming_writer);
    MM_RUN(test_malformed_files);
    MM_RUN(test_truncated_real_file);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", tmpdir);
    return mm_test_exit();
}
