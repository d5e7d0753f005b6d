/* The timing table's arithmetic (rows, rollups, the unaccounted rest, the
 * derived figures) and the reference canvases of the pipeline. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/pipeline_internal.h"
#include "request/rules.h"
#include "engine/timing.h"
#include "test.h"

/* "  name   1.23s   4.5%" → seconds, or -1 */
static double row_seconds(const char *table, const char *name)
{
    const char *p = strstr(table, name);
    if (!p)
        return -1;
    p += strlen(name);
    double s;
    return sscanf(p, " %lfs", &s) == 1 ? s : -1;
}

static void test_rows_accumulate_and_roll_up_to_wall(void)
{
    mm_timing t = {0};
    mm_timing_add(&t, MM_TG_LOADING, "load DiT", 2.0);
    mm_timing_add(&t, MM_TG_INFERENCE, "denoise (DiT forwards)", 10.0);
    mm_timing_add(&t, MM_TG_INFERENCE, "denoise (DiT forwards)", 5.0);
    mm_timing_add(&t, MM_TG_ENCODE, "mux video (H.264)", 1.5);
    mm_timing_add(&t, MM_TG_OVERHEAD, "read inputs", 0.5);
    t.wall = 20.0;
    t.forwards = 3;
    t.frames = 48;
    t.width = 1000;
    t.height = 500;
    MM_EXPECT(t.n_rows == 4, "one row per name and group: %d", t.n_rows);
    MM_EXPECT(mm_timing_group_total(&t, MM_TG_INFERENCE) == 15.0, "inference %g",
              mm_timing_group_total(&t, MM_TG_INFERENCE));
    MM_EXPECT(fabs(mm_timing_unaccounted(&t) - 1.0) < 1e-12, "unaccounted %g", mm_timing_unaccounted(&t));
    MM_EXPECT(mm_timing_sum(&t, "denoise") == 15.0, "prefix sum");
    char buf[4096];
    mm_timing_format(&t, buf, sizeof buf);
    double groups = row_seconds(buf, "\nloading") + row_seconds(buf, "\ninference") + row_seconds(buf, "\nencode") +
                    row_seconds(buf, "\noverhead");
    MM_EXPECT(fabs(groups - 20.0) < 0.02, "rollups add up to the wall clock: %g\n%s", groups, buf);
    MM_EXPECT(fabs(row_seconds(buf, "\noverhead") - 1.5) < 0.01, "overhead = its rows + the unaccounted rest");
    MM_EXPECT(strstr(buf, "per step: 5.000 s (3 forwards"), "per step\n%s", buf);
    MM_EXPECT(strstr(buf, "frames/s: 2.400"), "frames/s = 48 / 20\n%s", buf);
    MM_EXPECT(strstr(buf, "realtime factor: 10.00x"), "20 s for 2 s of video\n%s", buf);
    MM_EXPECT(strstr(buf, "megapixel-frames/s: 1.200"), "24 MP-frames in 20 s\n%s", buf);
}

static void test_durations_over_a_minute_read_as_minutes(void)
{
    static const struct {
        double s;
        const char *text;
    } cases[] = {{0.5, "0.50s"},        {59.94, "59.94s"},      {60, "1m 00.0s"},     {125.34, "2m 05.3s"},
                 {119.96, "2m 00.0s"},  {3725.0, "62m 05.0s"}};
    char d[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_timing_duration(cases[i].s, d, sizeof d);
        MM_EXPECT(strcmp(d, cases[i].text) == 0, "%g s -> '%s', '%s' expected", cases[i].s, d, cases[i].text);
    }
    mm_timing t = {0};
    mm_timing_add(&t, MM_TG_INFERENCE, "denoise (DiT forwards)", 125.34);
    t.wall = 130.0;
    char buf[4096];
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(strstr(buf, "denoise (DiT forwards)") && strstr(buf, "  2m 05.3s   96.4%"), "a row over a minute\n%s",
              buf);
    MM_EXPECT(strstr(buf, "total (wall clock)") && strstr(buf, "  2m 10.0s  100.0%"), "the total\n%s", buf);
}

static void test_memory_keeps_the_peak_per_device(void)
{
    mm_timing t = {0};
    mm_timing_memory_peak(&t, "cuda:0", 10);
    mm_timing_memory_peak(&t, "cuda:1", 5);
    mm_timing_memory_peak(&t, "cuda:0", 7);
    MM_EXPECT(t.n_memory == 2 && t.memory[0].peak == 10 && t.memory[1].peak == 5, "peaks %zu %zu",
              t.memory[0].peak, t.memory[1].peak);
    t.wall = 1;
    char buf[2048];
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(strstr(buf, "peak memory cuda:1:"), "%s", buf);
}

static void test_full_table_does_not_overflow(void)
{
    mm_timing t = {0};
    char name[40];
    for (int i = 0; i < MM_TIMING_ROWS + 5; i++) {
        snprintf(name, sizeof name, "row %d", i);
        mm_timing_add(&t, MM_TG_INFERENCE, name, 1.0);
    }
    t.wall = 100;
    MM_EXPECT(t.n_rows == MM_TIMING_ROWS, "capped at %d", MM_TIMING_ROWS);
    char small[64];
    mm_timing_format(&t, small, sizeof small);
    MM_EXPECT(strlen(small) < sizeof small, "truncated, terminated");
}

/* The step cache's line: which forwards skipped, 1-based like the progress
 * lines; none without a step cache. */
static void test_step_cache_line(void)
{
    mm_timing t = {0};
    t.wall = 10;
    t.forwards = 27;
    mm_timing_add(&t, MM_TG_INFERENCE, "denoise (DiT forwards)", 8.0);
    char buf[4096];
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(!strstr(buf, "step cache"), "no step cache, no line\n%s", buf);
    mm_step_cache_config c;
    mm_step_cache_report rep;
    MM_REQUIRE(mm_step_cache_parse("fbc:medium", &c, NULL) == 0, "parse");
    mm_step_cache_report_init(&rep);
    for (int i = 0; i < 27; i++) {
        mm_step_decision d = {.skip = (i >= 4 && i <= 6) || i == 8 || i == 26};
        mm_step_cache_report_add(&rep, i, &d);
    }
    mm_step_cache_summarize(&c, &rep, &t.step_cache);
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(strstr(buf, "step cache fbc:medium: 5 of 27 forwards skipped their blocks (forwards 5-7, 9, 27)\n"),
              "the line\n%s", buf);
    rep.skipped = 0;
    memset(rep.skipped_bits, 0, sizeof rep.skipped_bits);
    mm_step_cache_summarize(&c, &rep, &t.step_cache);
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(strstr(buf, "step cache fbc:medium: 0 of 27 forwards skipped their blocks\n"), "none skipped\n%s", buf);
}

/* Sparse attention's density per forward: forwards not reported count as
 * dense, the table lists every one and the mean. */
static void test_density_per_step(void)
{
    mm_timing t = {0};
    mm_timing_density(&t, 0, 1.0);
    mm_timing_density(&t, 2, 0.25);
    mm_timing_density(&t, MM_TIMING_STEPS, 0.5); /* past the array: dropped */
    MM_EXPECT(t.n_density == 3 && t.density[1] == 1.0f && t.density[2] == 0.25f, "%d: %g %g %g", t.n_density,
              t.density[0], t.density[1], t.density[2]);
    t.wall = 1;
    char buf[2048];
    mm_timing_format(&t, buf, sizeof buf);
    MM_EXPECT(strstr(buf, "attention density per step: 1.00 1.00 0.25 (mean 0.75)"), "%s", buf);
    mm_timing none = {0};
    none.wall = 1;
    mm_timing_format(&none, buf, sizeof buf);
    MM_EXPECT(!strstr(buf, "density"), "no density line without sparse attention:\n%s", buf);
}

static void test_reference_canvases(void)
{
    /* at 768 the video canvas is exactly the target's rule */
    int sizes[][2] = {{1920, 1080}, {1080, 1920}, {640, 480}, {500, 500}, {3000, 1000}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int w, h, rw, rh;
        mm_canvas_spec spec = {.ref_width = sizes[i][0], .ref_height = sizes[i][1]};
        mm_canvas_resolve(&spec, &w, &h);
        pl_ref_canvas(sizes[i][0], sizes[i][1], 768, &rw, &rh);
        MM_EXPECT(w == rw && h == rh, "%dx%d: %dx%d vs the rule's %dx%d", sizes[i][0], sizes[i][1], rw, rh, w, h);
    }
    int w, h;
    pl_ref_canvas(1920, 1080, 768, &w, &h);
    MM_EXPECT(w == 1344 && h == 768, "16:9 → 1344x768, got %dx%d", w, h);
    pl_ref_canvas(1920, 1080, 384, &w, &h);
    MM_EXPECT(w == 672 && h == 384, "the same rule at half the short edge: %dx%d", w, h);
    pl_ref_canvas(1000, 1000, 768, &w, &h);
    MM_EXPECT(w == 768 && h == 768, "square: %dx%d", w, h);
    /* 2048-px pictures, sides rounded to 32 (text-encoder.md §3.2: a 16:9 ref is 2048x3648) */
    pl_ref_picture_size(1920, 1080, 2048, &w, &h);
    MM_EXPECT(w == 3648 && h == 2048, "16:9 picture → 3648x2048, got %dx%d", w, h);
    pl_ref_picture_size(1080, 1920, 2048, &w, &h);
    MM_EXPECT(w == 2048 && h == 3648, "9:16 picture → 2048x3648, got %dx%d", w, h);
    pl_ref_picture_size(320, 180, 64, &w, &h);
    MM_EXPECT(w == 128 && h == 64, "small short edge: %dx%d", w, h);
}

int main(void)
{
    MM_RUN(test_rows_accumulate_and_roll_up_to_wall);
    MM_RUN(test_durations_over_a_minute_read_as_minutes);
    MM_RUN(test_memory_keeps_the_peak_per_device);
    MM_RUN(test_full_table_does_not_overflow);
    MM_RUN(test_step_cache_line);
    MM_RUN(test_density_per_step);
    MM_RUN(test_reference_canvases);
    return mm_test_exit();
}
