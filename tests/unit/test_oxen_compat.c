/* Oxen-client compatibility of POST /api/ai/queue (request/json.c and
 * mm_request_settle: model, duration, aspect_ratio, num_generations,
 * generate_audio), the aspect rule (request/rules.h) and the default
 * rewriter system prompt. */
#include <string.h>

#include "oxen/rewrite_prompt.h"
#include "request/request.h"
#include "test.h"

static int try(const char *json, mm_request *q, mm_request_error *e)
{
    static json_t *keep; /* q->prompt borrows from it */
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
    MM_EXPECT(rc < 0 && strcmp(e.field, field) == 0 && e.message[0] && e.accepted[0], "%s: rc %d, field '%s' (%s)",
              json, rc, rc < 0 ? e.field : "", rc < 0 ? e.message : "");
}

static void test_oxen_request(void)
{
    mm_request q;
    mm_request_error fe;
    MM_REQUIRE(try("{\"model\": \"minimax-h3\", \"prompt\": \"a fox\", \"duration\": 5, \"aspect_ratio\": \"16:9\","
                   " \"num_generations\": 2, \"seed\": 3}",
                   &q, &fe) == 0,
               "%s: %s", fe.field, fe.message);
    int w = q.width, h = q.height;
    MM_EXPECT(q.frames == 124 && q.count == 2 && !q.seed_drawn && q.seeds[0] == 3 && q.seeds[1] == 4,
              "frames %d count %d", q.frames, q.count);
    MM_EXPECT(w == 1344 && h == 768, "16:9 -> %dx%d", w, h);
    MM_EXPECT(strcmp(q.partition, "fl2va") == 0, "no reference, no partition asked for: %s", q.partition);
}

static void test_aspect_ratios_map_onto_the_canvas_rule(void)
{
    static const struct {
        const char *body;
        int w, h;
    } cases[] = {
        {"{\"prompt\":\"x\",\"aspect_ratio\":\"9:16\"}", 768, 1344},
        {"{\"prompt\":\"x\",\"aspect_ratio\":\"1:1\"}", 768, 768},
        {"{\"prompt\":\"x\",\"aspect_ratio\":\"4:3\"}", 1024, 768},
        {"{\"prompt\":\"x\",\"aspect_ratio\":\"16:9\",\"size\":\"512\"}", 896, 512},
        {"{\"prompt\":\"x\",\"aspect_ratio\":\"9:16\",\"width\":640}", 640, 1120},
        {"{\"prompt\":\"x\"}", 1280, 704}, /* no aspect: the default canvas is unchanged */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_request q;
        mm_request_error fe;
        MM_REQUIRE(try(cases[i].body, &q, &fe) == 0, "%s: %s", cases[i].body, fe.message);
        int w = q.width, h = q.height;
        MM_EXPECT(w == cases[i].w && h == cases[i].h, "%s -> %dx%d, expected %dx%d", cases[i].body, w, h, cases[i].w,
                  cases[i].h);
        MM_EXPECT(w % 32 == 0 && h % 32 == 0 && (long)w * h <= 1344L * 768 + 0, "%s off the grid or too big",
                  cases[i].body);
    }
}

static void test_aspect_rule(void)
{
    int w = 0, h = 0;
    mm_error err = {{0}};
    MM_EXPECT(mm_rule_aspect_ratio("21:9", &w, &h, &err) == 0 && w == 21 && h == 9, "21:9");
    static const char *const bad[] = {"16x9", "16:", ":9", "0:1", "1:0", "65:1", "5:1", "1:5", "16:9 ", "-1:2",
                                      "a:b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MM_EXPECT(mm_rule_aspect_ratio(bad[i], &w, &h, &err) < 0, "'%s' accepted", bad[i]);
}

static void test_model_names(void)
{
    mm_request q;
    mm_request_error fe;
    MM_EXPECT(try("{\"prompt\":\"x\",\"model\":\"MiniMaxAI/MiniMax-H3\"}", &q, &fe) == 0, "%s", fe.message);
    MM_EXPECT(try("{\"prompt\":\"x\",\"model\":\"minimax-h3-ref2va\"}", &q, &fe) == 0 &&
                  strcmp(q.partition, "ref2va") == 0,
              "ref2va model: %s", q.partition);
    MM_EXPECT(try("{\"prompt\":\"x\",\"model\":\"MINIMAX-H3-FL2VA\",\"partition\":\"fl2va\"}", &q, &fe) == 0 &&
                  strcmp(q.partition, "fl2va") == 0,
              "fl2va model");
    expect_field("{\"prompt\":\"x\",\"model\":\"kling-video-v2-6-pro-text-to-video\"}", "model");
    expect_field("{\"prompt\":\"x\",\"model\":7}", "model");
    expect_field("{\"prompt\":\"x\",\"model\":\"minimax-h3-fl2va\",\"partition\":\"ref2va\"}", "model");
}

static void test_duration_and_counts(void)
{
    mm_request q;
    mm_request_error fe;
    MM_EXPECT(try("{\"prompt\":\"x\",\"duration\":1}", &q, &fe) == 0 && q.frames == 39, "1 s -> %d", q.frames);
    MM_EXPECT(try("{\"prompt\":\"x\",\"duration\":2.5}", &q, &fe) == 0 && q.frames == 73, "2.5 s -> %d", q.frames);
    MM_EXPECT(try("{\"prompt\":\"x\",\"num_generations\":4}", &q, &fe) == 0 && q.count == 4, "count");
    MM_EXPECT(try("{\"prompt\":\"x\"}", &q, &fe) == 0 && q.count == 1, "default count");
    MM_EXPECT(try("{\"prompt\":\"x\",\"generate_audio\":false}", &q, &fe) == 0 && q.no_audio, "generate_audio");
    expect_field("{\"prompt\":\"x\",\"duration\":\"5\"}", "duration");
    expect_field("{\"prompt\":\"x\",\"duration\":0}", "duration");
    expect_field("{\"prompt\":\"x\",\"duration\":16}", "duration");
    expect_field("{\"prompt\":\"x\",\"duration\":5,\"frames\":124}", "duration");
    expect_field("{\"prompt\":\"x\",\"duration\":5,\"seconds\":5}", "duration");
    expect_field("{\"prompt\":\"x\",\"num_generations\":0}", "num_generations");
    expect_field("{\"prompt\":\"x\",\"num_generations\":5}", "num_generations");
    expect_field("{\"prompt\":\"x\",\"num_generations\":1.5}", "num_generations");
    expect_field("{\"prompt\":\"x\",\"aspect_ratio\":\"wide\"}", "aspect_ratio");
    expect_field("{\"prompt\":\"x\",\"aspect_ratio\":\"16:9\",\"width\":640,\"height\":320}", "aspect_ratio");
    expect_field("{\"prompt\":\"x\",\"aspect_ratio\":\"16:9\",\"size\":\"640x320\"}", "aspect_ratio");
    expect_field("{\"prompt\":\"x\",\"generate_audio\":true,\"no_audio\":true}", "generate_audio");
    expect_field("{\"prompt\":\"x\",\"target_repo\":\"r\"}", "target_repo");
}

static void test_default_rewriter_prompt(void)
{
    const char *p = mm_rewrite_default_system_prompt();
    static const char *const landmarks[] = {"integrated_multimodal_description:", "overall_soundscape:",
                                            "non_diegetic_music:", "[Shot 1]", "[Shot 2] At 00:", "<d>", "</d>",
                                            "(S1)", "N/A"};
    for (size_t i = 0; i < sizeof landmarks / sizeof landmarks[0]; i++)
        MM_EXPECT(strstr(p, landmarks[i]) != NULL, "the default prompt does not teach %s", landmarks[i]);
    MM_EXPECT(strlen(p) < 20000, "longer than a stored system prompt may be (%zu)", strlen(p));
}

int main(void)
{
    MM_RUN(test_oxen_request);
    MM_RUN(test_aspect_ratios_map_onto_the_canvas_rule);
    MM_RUN(test_aspect_rule);
    MM_RUN(test_model_names);
    MM_RUN(test_duration_and_counts);
    MM_RUN(test_default_rewriter_prompt);
    return mm_test_exit();
}
