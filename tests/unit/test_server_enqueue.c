/* POST /api/ai/queue's request validation without the database: the body
 * read by request/json.c and settled by mm_request_settle (no references). */
#include <string.h>

#include "request/request.h"
#include "test.h"

/* The body as a settled request; q->prompt borrows from the body, kept
 * until the next call. */
static int try(const char *json, mm_request *q, mm_request_error *e)
{
    static json_t *keep;
    json_decref(keep);
    keep = json_loads(json, 0, NULL);
    mm_request_input in;
    if (mm_request_input_from_json(keep, &in, e) < 0)
        return -1;
    return mm_request_settle(&in, NULL, NULL, q, e);
}

static void expect_field(const char *json, const char *field)
{
    mm_request q;
    mm_request_error e;
    int rc = try(json, &q, &e);
    MM_EXPECT(rc < 0 && strcmp(e.field, field) == 0 && e.message[0], "%s: rc %d, field '%s' (%s)", json, rc,
              rc < 0 ? e.field : "", rc < 0 ? e.message : "");
}

static void test_defaults(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(try("{\"prompt\": \"a cat\"}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(strcmp(q.prompt, "a cat") == 0, "prompt");
    MM_EXPECT(q.frames == 124 && q.steps == 28 && q.crf == 18 && strcmp(q.preset, "medium") == 0, "defaults");
    MM_EXPECT(q.width == 1280 && q.height == 704, "default canvas %dx%d", q.width, q.height);
    MM_EXPECT(q.seed_drawn && q.count == 1 && q.n_refs == 0 && !q.has_last_image, "a drawn seed, no refs");
    MM_EXPECT(strcmp(q.partition, "fl2va") == 0, "partition %s", q.partition);
    MM_EXPECT(q.n_loras == 0 && q.sampler.kind == MM_SAMPLER_DEFAULT && strcmp(q.sparse, "off") == 0 &&
                  q.cache.kind == MM_STEP_CACHE_OFF,
              "the few-step fields are off");
}

static void test_snapping(void)
{
    mm_request q;
    mm_request_error e;
    MM_REQUIRE(try("{\"prompt\":\"x\",\"frames\":130,\"width\":1000,\"height\":700,\"seed\":7,\"partition\":\"ref2va\","
                   "\"no_audio\":true,\"crf\":23,\"preset\":\"fast\",\"steps\":40}",
                   &q, &e) == 0,
               "%s", e.message);
    MM_EXPECT(q.frames == 124 && q.width == 992 && q.height == 704, "%d %dx%d (700 is nearest 704)", q.frames, q.width,
              q.height);
    MM_EXPECT(q.notes.n == 3, "3 warnings, got %d", q.notes.n);
    MM_EXPECT(!q.seed_drawn && q.seeds[0] == 7 && q.no_audio && q.crf == 23 && q.steps == 40, "values");
    MM_EXPECT(strcmp(q.partition, "ref2va") == 0 && strcmp(q.preset, "fast") == 0, "partition, preset");
    MM_REQUIRE(try("{\"prompt\":\"x\",\"seconds\":5}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.frames == 124, "5 s -> %d", q.frames);
    MM_REQUIRE(try("{\"prompt\":\"x\",\"size\":\"768\"}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 768 && q.height == 768, "size 768 is a square -> %dx%d", q.width, q.height);
    MM_REQUIRE(try("{\"prompt\":\"x\",\"short_edge\":768}", &q, &e) == 0, "%s", e.message);
    MM_EXPECT(q.width == 1344 && q.height == 768, "short edge 768 -> %dx%d", q.width, q.height);
}

static void test_errors(void)
{
    expect_field("[]", "");
    expect_field("{\"prompt\": null}", "prompt");
    expect_field("{}", "prompt");
    expect_field("{\"prompt\": 5}", "prompt");
    expect_field("{\"prompt\": \"   \"}", "prompt");
    expect_field("{\"prompt\": \"x\", \"colour\": 1}", "colour");
    expect_field("{\"prompt\": \"x\", \"frames\": 3}", "frames");
    expect_field("{\"prompt\": \"x\", \"frames\": 400}", "frames");
    expect_field("{\"prompt\": \"x\", \"frames\": 124.5}", "frames");
    expect_field("{\"prompt\": \"x\", \"frames\": \"124\"}", "frames");
    expect_field("{\"prompt\": \"x\", \"frames\": 124, \"seconds\": 5}", "seconds");
    expect_field("{\"prompt\": \"x\", \"seconds\": 0}", "seconds");
    expect_field("{\"prompt\": \"x\", \"seconds\": 60}", "seconds");
    expect_field("{\"prompt\": \"x\", \"width\": 16}", "width");
    expect_field("{\"prompt\": \"x\", \"height\": 4096}", "height");
    expect_field("{\"prompt\": \"x\", \"size\": \"big\"}", "size");
    expect_field("{\"prompt\": \"x\", \"size\": \"768\", \"width\": 512}", "size");
    expect_field("{\"prompt\": \"x\", \"steps\": 1}", "steps");
    expect_field("{\"prompt\": \"x\", \"steps\": 201}", "steps");
    expect_field("{\"prompt\": \"x\", \"seed\": -1}", "seed");
    expect_field("{\"prompt\": \"x\", \"seed\": 9007199254740992}", "seed");
    expect_field("{\"prompt\": \"x\", \"partition\": \"t2v\"}", "partition");
    expect_field("{\"prompt\": \"x\", \"no_audio\": 1}", "no_audio");
    expect_field("{\"prompt\": \"x\", \"fast\": \"yes\"}", "fast");
    expect_field("{\"prompt\": \"x\", \"crf\": 52}", "crf");
    expect_field("{\"prompt\": \"x\", \"preset\": \"ludicrous\"}", "preset");
    expect_field("{\"prompt\": \"x\", \"image_ids\": \"abc\"}", "image_ids");
    expect_field("{\"prompt\": \"x\", \"image_ids\": [\"not-a-uuid\"]}", "image_ids[0]");
    expect_field("{\"prompt\": \"x\", \"image_ids\": [\"6f1c0a4e-1b2c-4d3e-8f40-123456789abc\","
                 " \"6F1C0A4E-1B2C-4D3E-8F40-123456789ABC\"]}",
                 "image_ids[1]");
    expect_field("{\"prompt\": \"x\", \"last_image_id\": 3}", "last_image_id");
    expect_field("{\"prompt\": \"x\", \"partition\": \"ref2va\","
                 " \"last_image_id\": \"6f1c0a4e-1b2c-4d3e-8f40-123456789abc\"}",
                 "last_image_id");
    char many[2048] = "{\"prompt\": \"x\", \"image_ids\": [";
    for (int i = 0; i < 16; i++)
        sprintf(many + strlen(many), "%s\"6f1c0a4e-1b2c-4d3e-8f40-1234567890%02d\"", i ? "," : "", i);
    strcat(many, "]}");
    expect_field(many, "image_ids");
}

int main(void)
{
    MM_RUN(test_defaults);
    MM_RUN(test_snapping);
    MM_RUN(test_errors);
    return mm_test_exit();
}
