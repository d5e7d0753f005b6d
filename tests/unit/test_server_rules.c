/* The request rules shared by the API and `mmh3 generate`. */
#include "request/rules.h"

#include <string.h>

#include "test.h"

static void test_frames_grid(void)
{
    MM_EXPECT(mm_frames_snap_down(124) == 124, "124");
    MM_EXPECT(mm_frames_snap_down(130) == 124, "130 -> %d", mm_frames_snap_down(130));
    MM_EXPECT(mm_frames_snap_down(140) == 124, "140 -> %d", mm_frames_snap_down(140));
    MM_EXPECT(mm_frames_snap_down(141) == 141, "141 -> %d", mm_frames_snap_down(141));
    MM_EXPECT(mm_frames_snap_down(4) == 0, "below the grid");
    MM_EXPECT(mm_frames_snap_up(120) == 124, "120 -> %d", mm_frames_snap_up(120));
    MM_EXPECT(mm_frames_snap_up(124) == 124, "124 up");
    MM_EXPECT(mm_frames_snap_up(1) == 5, "1 up");
    for (int f = 5; f < 400; f++) {
        int d = mm_frames_snap_down(f), u = mm_frames_snap_up(f);
        MM_REQUIRE((d - 5) % 17 == 0 && d <= f && f - d < 17, "down(%d) = %d", f, d);
        MM_REQUIRE((u - 5) % 17 == 0 && u >= f && u - f < 17, "up(%d) = %d", f, u);
    }
}

static void test_frames_rule(void)
{
    mm_rule_notes notes = {0};
    mm_error err = {{0}};
    int f = 0;
    MM_EXPECT(mm_rule_frames(130, &f, &notes, &err) == 0 && f == 124 && notes.n == 1, "130 -> %d, %d notes", f,
              notes.n);
    MM_EXPECT(mm_rule_frames(362, &f, &notes, &err) == 0 && f == 362, "362");
    MM_EXPECT(mm_rule_frames(363, &f, &notes, &err) < 0 && strstr(err.msg, "363 is above the maximum 362"),
              "363 is above the maximum, as the docs say: %s", err.msg);
    MM_EXPECT(mm_rule_frames(378, &f, &notes, &err) < 0, "378 is above the maximum");
    MM_EXPECT(mm_rule_frames(4, &f, &notes, &err) < 0 && strstr(err.msg, "minimum"), "%s", err.msg);
    notes.n = 0;
    MM_EXPECT(mm_rule_seconds(5, &f, &notes, &err) == 0 && f == 124 && notes.n == 1, "5 s -> %d", f);
    MM_EXPECT(mm_rule_seconds(10, &f, &notes, &err) == 0 && f == 243, "10 s -> %d", f);
    MM_EXPECT(mm_rule_seconds(15, &f, &notes, &err) == 0 && f == 362, "15 s -> %d", f);
    MM_EXPECT(mm_rule_seconds(124.0 / 24, &f, &notes, &err) == 0 && f == 124, "124/24 s -> %d", f);
    MM_EXPECT(mm_rule_seconds(15.2, &f, &notes, &err) < 0, "15.2 s is too long");
    MM_EXPECT(mm_rule_seconds(0, &f, &notes, &err) < 0, "0 s");
    MM_EXPECT(mm_rule_seconds(-1, &f, &notes, &err) < 0, "-1 s");
}

static void test_dims_and_canvas(void)
{
    mm_rule_notes notes = {0};
    mm_error err = {{0}};
    int v = 0, w, h;
    MM_EXPECT(mm_rule_dim("width", 1000, &v, &notes, &err) == 0 && v == 992 && notes.n == 1, "1000 -> %d", v);
    notes.n = 0;
    MM_EXPECT(mm_rule_dim("width", 700, &v, &notes, &err) == 0 && v == 704 && notes.n == 1 &&
                  strstr(notes.msg[0], "width 700 is off the 32-px grid; using 704"),
              "700 -> %d (the nearest multiple, not the one below)", v);
    MM_EXPECT(mm_rule_dim("height", 687, &v, &notes, &err) == 0 && v == 672, "687 -> %d", v);
    MM_EXPECT(mm_rule_dim("height", 688, &v, &notes, &err) == 0 && v == 672, "688 -> %d (halfway goes down)", v);
    MM_EXPECT(mm_rule_dim("height", 689, &v, &notes, &err) == 0 && v == 704, "689 -> %d", v);
    MM_EXPECT(mm_rule_dim("height", 720, &v, &notes, &err) == 0 && v == 704, "720 -> %d", v);
    MM_EXPECT(mm_rule_dim("width", 2047, &v, &notes, &err) == 0 && v == 2048, "2047 -> %d", v);
    MM_EXPECT(mm_rule_dim("width", 32, &v, &notes, &err) == 0 && v == 32, "32, the minimum: %s", err.msg);
    MM_EXPECT(mm_rule_dim("width", 31, &v, &notes, &err) < 0 && strstr(err.msg, "below the minimum 32"),
              "31 is below the minimum: %s", err.msg);
    MM_EXPECT(mm_rule_dim("width", 2080, &v, &notes, &err) < 0, "2080 is above the maximum");

    mm_canvas_spec s = {0};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 1280 && h == 704, "default %dx%d", w, h);
    s = (mm_canvas_spec){.ref_width = 1920, .ref_height = 1080};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 1344 && h == 768, "16:9 reference %dx%d", w, h);
    s = (mm_canvas_spec){.ref_width = 720, .ref_height = 1280};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 768 && h == 1344, "9:16 reference %dx%d", w, h);
    s = (mm_canvas_spec){.ref_width = 3000, .ref_height = 1000};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w % 32 == 0 && h % 32 == 0 && w * h <= 1344 * 768 && w > 2 * h, "3:1 reference %dx%d", w, h);
    s = (mm_canvas_spec){.width = 1024};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 1024 && h == 576, "width only %dx%d", w, h);
    s = (mm_canvas_spec){.height = 768, .ref_width = 1000, .ref_height = 1000};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 768 && h == 768, "height only, square reference %dx%d", w, h);
    s = (mm_canvas_spec){0};
    MM_EXPECT(mm_rule_size("768", &s, &notes, &err) == 0 && s.short_edge == 768 && !s.width && !s.height,
              "size 768 is one edge, made square or short by the caller: %s", err.msg);
    s = (mm_canvas_spec){.short_edge = 768};
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 1344 && h == 768, "short edge 768 %dx%d", w, h);
    s = (mm_canvas_spec){0};
    MM_EXPECT(mm_rule_size("640x360", &s, &notes, &err) == 0, "%s", err.msg);
    mm_canvas_resolve(&s, &w, &h);
    MM_EXPECT(w == 640 && h == 352, "size 640x360 %dx%d", w, h);
    MM_EXPECT(mm_rule_size("640x", &s, &notes, &err) < 0, "640x");
    MM_EXPECT(mm_rule_size("x360", &s, &notes, &err) < 0, "x360");
    MM_EXPECT(mm_rule_size("12ax3", &s, &notes, &err) < 0, "12ax3");
    /* digits past the range of a long long: the error names them as typed */
    MM_EXPECT(mm_rule_size("99999999999999999999x64", &s, &notes, &err) < 0 &&
                  strstr(err.msg, "width 99999999999999999999 is above the maximum"),
              "huge width: %s", err.msg);
    MM_EXPECT(mm_rule_size("640x123456789012345678901", &s, &notes, &err) < 0 &&
                  strstr(err.msg, "height 123456789012345678901 is above the maximum"),
              "huge height: %s", err.msg);
    MM_EXPECT(mm_rule_size("99999999999999999999", &s, &notes, &err) < 0 &&
                  strstr(err.msg, "size 99999999999999999999 is above the maximum"),
              "huge short edge: %s", err.msg);
    MM_EXPECT(mm_rule_size("99999x64", &s, &notes, &err) < 0 && strstr(err.msg, "99999 is above the maximum"),
              "large width: %s", err.msg);
}

static void test_prompt(void)
{
    mm_error err = {{0}};
    char big[8001 * 2 + 1];
    MM_EXPECT(mm_rule_prompt("a cat", 5, &err) == 0, "plain");
    MM_EXPECT(mm_rule_prompt(" \n\t", 3, &err) < 0, "whitespace only");
    MM_EXPECT(mm_rule_prompt("", 0, &err) < 0, "empty");
    MM_EXPECT(mm_rule_prompt("a\xff", 2, &err) < 0, "invalid UTF-8");
    MM_EXPECT(mm_rule_prompt("a\0b", 3, &err) < 0, "NUL");
    /* 8000 two-byte characters are fine: the limit counts characters. */
    for (int i = 0; i < 8000; i++)
        big[2 * i] = (char)0xc3, big[2 * i + 1] = (char)0xa9;
    MM_EXPECT(mm_rule_prompt(big, 16000, &err) == 0, "8000 x 'é': %s", err.msg);
    big[16000] = (char)0xc3, big[16001] = (char)0xa9;
    MM_EXPECT(mm_rule_prompt(big, 16002, &err) < 0, "8001 characters");
}

int main(void)
{
    MM_RUN(test_frames_grid);
    MM_RUN(test_frames_rule);
    MM_RUN(test_dims_and_canvas);
    MM_RUN(test_prompt);
    return mm_test_exit();
}
