/* The packed layout: rebuilt from each kit case's metadata and checked
 * against the kit's stored inputs exactly (tags, float64 positions bit for
 * bit, index maps, per-row timesteps, distinct timesteps and table indices),
 * plus the spec's full-size worked example and the rotary clock's sums. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/dit_kit.h"
#include "model/dit/layout.h"
#include "test.h"
#include "test_sampler_kit.h"

static json_t *manifest;

static void check_entries(const char *list, const char *file)
{
    mm_safetensors *st = kit_open(file);
    MM_REQUIRE(st, "kit file %s", file);
    size_t i;
    json_t *entry;
    int checked = 0;
    json_array_foreach(json_object_get(manifest, list), i, entry)
    {
        mm_dit_kit_case c;
        mm_error err = {{0}};
        MM_REQUIRE(mm_dit_kit_case_read(manifest, entry, &c, &err) == 0, "%s", err.msg);
        mm_dit_layout l;
        int rc = mm_dit_layout_build(&c.req, &l, &err);
        MM_EXPECT(rc == 0, "%s: %s", c.name, err.msg);
        if (rc == 0) {
            MM_EXPECT(l.rows == c.sequence_length, "%s: S %lld vs %lld", c.name, (long long)l.rows,
                      (long long)c.sequence_length);
            float *row_t = malloc(sizeof(float) * (size_t)l.rows);
            mm_dit_row_timesteps(&l, (float)c.t_video, (float)c.t_audio, (float)c.condition_t, row_t);
            char why[512] = "";
            int ok = mm_dit_kit_check_layout(st, c.name, &l, strcmp(list, "cases") == 0 ? row_t : NULL, why,
                                             sizeof why, &err);
            MM_EXPECT(ok == 1, "%s: %s", c.name, ok < 0 ? err.msg : why);
            checked++;
            free(row_t);
            mm_dit_layout_free(&l);
        }
        mm_dit_kit_case_free(&c);
    }
    MM_EXPECT(checked > 0, "no %s in the manifest", list);
    mm_st_close(st);
}

static void test_forward_case_layouts_match_kit(void) { check_entries("cases", "cases.safetensors"); }
static void test_sampler_run_layouts_match_kit(void) { check_entries("sampler", "sampler.safetensors"); }

/* dit.md §5.6: t2va 1344x768x124 with L = 300. */
static void test_full_size_worked_example(void)
{
    int8_t *tags = malloc(300);
    memset(tags, MM_DIT_TAG_TEXT, 300);
    mm_dit_layout_request req = {.text_tags = tags, .text_rows = 300,
                                 .target = {37, 48, 84, 207, 1, 2, 2, 2}};
    mm_dit_layout l;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_layout_build(&req, &l, &err) == 0, "%s", err.msg);
    MM_EXPECT(l.rows == 38010 && l.video_rows == 37296 && l.audio_rows == 414, "S %lld", (long long)l.rows);
    const double *p = l.positions;
    MM_EXPECT(l.tags[300] == MM_DIT_TAG_AUDIO && p[300 * 3] == 300.0 && fabs(p[300 * 3 + 2] - -5.166010) < 1e-6,
              "audio ch0 row: %g %g", p[900], p[902]);
    MM_EXPECT(p[507 * 3] == 300.0 && fabs(p[507 * 3 + 2] - 36.158105) < 1e-6, "audio ch1 row w %g", p[507 * 3 + 2]);
    MM_EXPECT(p[713 * 3] == 506.0, "last audio time %g", p[713 * 3]);
    MM_EXPECT(fabs(p[714 * 3 + 1] - 3.905137) < 1e-6 && fabs(p[714 * 3 + 2] - -5.166010) < 1e-6, "first video row");
    const int64_t f = 1008;
    MM_EXPECT(fabs(p[(714 + f) * 3] - 301.6666667) < 1e-6 && fabs(p[(714 + 2 * f) * 3] - 308.3333333) < 1e-6 &&
                  fabs(p[(714 + 6 * f) * 3] - 330.0) < 1e-9,
              "video clock");
    MM_EXPECT(fabs(p[(l.rows - 1) * 3] - 500.0) < 1e-9, "last frame at %g", p[(l.rows - 1) * 3]);
    MM_EXPECT(fabs((p[(714 + 1) * 3 + 2] - p[714 * 3 + 2]) - 1.007905) < 1e-6 &&
                  fabs((p[(714 + 42) * 3 + 1] - p[714 * 3 + 1]) - 1.007905) < 1e-6,
              "grid step");
    for (int64_t r = 0; r < l.video_rows; r++)
        MM_REQUIRE(l.tags[l.video_index[r]] == MM_DIT_TAG_VIDEO && l.roles[l.video_index[r]] == MM_DIT_ROW_VIDEO,
                   "video row %lld", (long long)r);
    float *rt = malloc(sizeof(float) * (size_t)l.rows), u[8];
    mm_dit_row_timesteps(&l, 0.0f, 0.0f, 0.999f, rt);
    MM_EXPECT(mm_dit_unique_timesteps(rt, l.rows, u, 8, NULL) == 1, "step 0 collapses to one timestep");
    mm_dit_row_timesteps(&l, 0.25f, 0.5f, 0.999f, rt);
    MM_EXPECT(mm_dit_unique_timesteps(rt, l.rows, u, 8, NULL) == 2 && u[0] == 0.25f && u[1] == 0.5f, "two values");
    free(rt);
    mm_dit_layout_free(&l);
    free(tags);
}

/* The "last" keyframe anchor sits at the last pixel frame: L + (5/3)(F - 1). */
static void test_last_anchor_and_spans(void)
{
    for (int n = 0; n < 30; n++) {
        int T = 5 * n + 2, frames = 17 * n + 5;
        double pw = mm_dit_temporal_span_pairwise(T), sq = mm_dit_temporal_span_sequential(T);
        MM_EXPECT(fabs(pw - (5.0 / 3.0) * frames) < 1e-9 && fabs(sq - pw) < 1e-9, "T %d: %.17g %.17g", T, pw, sq);
    }
    /* Pairwise and sequential sums part ways in the last ulp somewhere past 16 latents. */
    int differ = 0;
    for (int T = 2; T < 400; T++)
        differ += mm_dit_temporal_span_pairwise(T) != mm_dit_temporal_span_sequential(T);
    MM_EXPECT(differ > 0, "the two summation orders never differ; the anchor rule would be untested");

    int8_t tags[5] = {1, 1, 1, 1, 1};
    mm_dit_anchor anchors[2] = {MM_DIT_ANCHOR_FIRST, MM_DIT_ANCHOR_LAST};
    mm_dit_layout_request req = {.text_tags = tags, .text_rows = 5, .target = {37, 8, 12, 207, 1, 2, 2, 2},
                                 .anchors = anchors, .n_anchors = 2};
    mm_dit_layout l;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_layout_build(&req, &l, &err) == 0, "%s", err.msg);
    MM_EXPECT(l.cond_video_rows == 48 && l.positions[5 * 3] == 5.0, "first anchor");
    MM_EXPECT(l.positions[(5 + 24) * 3] == 5.0 + mm_dit_temporal_span_pairwise(37) - 5.0 / 3.0, "last anchor");
    MM_EXPECT(fabs(l.positions[(5 + 24) * 3] - (5.0 + (5.0 / 3.0) * 123)) < 1e-9, "last pixel frame");
    float *rt = malloc(sizeof(float) * (size_t)l.rows);
    mm_dit_row_timesteps(&l, 0.2f, 0.4f, 0.999f, rt);
    MM_EXPECT(rt[5] == 0.999f && rt[4] == 0.2f && rt[l.audio_index[0]] == 0.4f && rt[l.rows - 1] == 0.2f, "pins");
    free(rt);
    mm_dit_layout_free(&l);
}

/* ref2va: an audio clip, a silent video and an image; the clock advances per block. */
static void test_reference_blocks(void)
{
    int8_t tags[4] = {1, 0, 0, 1};
    mm_dit_ref refs[3] = {{MM_DIT_REF_AUDIO, 0, 0, 0, 10}, {MM_DIT_REF_VIDEO, 7, 8, 8, 0}, {MM_DIT_REF_IMAGE, 1, 4, 8, 0}};
    mm_dit_layout_request req = {.text_tags = tags, .text_rows = 4, .target = {2, 8, 12, 4, 1, 2, 2, 2},
                                 .refs = refs, .n_refs = 3};
    mm_dit_layout l;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_layout_build(&req, &l, &err) == 0, "%s", err.msg);
    /* [text 4 | audio ref 20 | video ref 7*16 | image 8 | target audio 8 | target video 2*24] */
    MM_EXPECT(l.rows == 4 + 20 + 112 + 8 + 8 + 48, "S %lld", (long long)l.rows);
    MM_EXPECT(l.cond_audio_rows == 20 && l.cond_video_rows == 120, "cond rows");
    MM_EXPECT(l.tags[1] == 0 && l.positions[1 * 3] == 1.0, "vision rows keep text positions");
    MM_EXPECT(l.positions[4 * 3] == 4.0 && l.positions[23 * 3] == 13.0 && l.roles[4] == MM_DIT_ROW_REF_AUDIO,
              "audio clip at the clock");
    double video_start = 4.0 + 10.0, span = mm_dit_temporal_span_sequential(7);
    MM_EXPECT(l.positions[24 * 3] == video_start && l.positions[(24 + 16) * 3] == video_start + 5.0 / 3.0,
              "video ref clock");
    MM_EXPECT(l.positions[136 * 3] == video_start + span, "image after the video's span");
    MM_EXPECT(l.positions[144 * 3] == video_start + span + 1.0, "target after the image");
    MM_EXPECT(l.audio_index[0] == 4 && l.audio_index[20] == 144 && l.video_index[0] == 24 && l.video_index[112] == 136,
              "condition rows first in the index maps");
    mm_dit_layout_free(&l);

    mm_dit_ref bad = {MM_DIT_REF_IMAGE, 2, 8, 8, 0};
    req.refs = &bad;
    req.n_refs = 1;
    MM_EXPECT(mm_dit_layout_build(&req, &l, &err) != 0 && strstr(err.msg, "image"), "image with 2 frames refused: %s",
              err.msg);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    if (!manifest) {
        printf("FAIL manifest: %s: %s\n", path, jerr.text);
        return 1;
    }
    MM_RUN(test_forward_case_layouts_match_kit);
    MM_RUN(test_sampler_run_layouts_match_kit);
    MM_RUN(test_full_size_worked_example);
    MM_RUN(test_last_anchor_and_spans);
    MM_RUN(test_reference_blocks);
    json_decref(manifest);
    return mm_test_exit();
}
