/* The readers: video frame sampling, audio to stereo 32 kHz, the sinc
 * resampler, images with EXIF orientation, the PNG frame dump. Inputs are
 * made in the test with our writers (and by hand), plus the released H3
 * sample videos (../shared/minimax-h3/assets beside the checkout: a
 * failure when they are missing). */
#include <math.h>

#include "media/audio_reader.h"
#include "media/image.h"
#include "media/mp4_writer.h"
#include "media/resample.h"
#include "media/video_reader.h"
#include "test.h"
#include "test_media_common.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static char *tmp_path(const char *name)
{
    static char p[16][1024];
    static int k;
    char *s = p[k++ % 16];
    snprintf(s, 1024, "%s/%s", test_tmpdir(), name);
    return s;
}

/* Frame i is flat grey at level 10 + 8 (i mod 30): the level tells the frame. */
static int level_of(int i) { return 10 + 8 * (i % 30); }

static int make_counted_mp4(const char *path, int w, int h, int fps, int frames, int channels)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, w, h);
    o.fps = fps;
    o.crf = 8;
    o.preset = "ultrafast";
    o.audio_channels = channels;
    mm_error err;
    mm_mp4_writer *wr;
    if (mm_mp4_writer_open(&wr, path, &o, &err) < 0) {
        printf("     open %s: %s\n", path, err.msg);
        return -1;
    }
    uint8_t *rgb = malloc((size_t)w * h * 3);
    int rc = 0;
    for (int i = 0; i < frames && rc == 0; i++) {
        memset(rgb, level_of(i), (size_t)w * h * 3);
        /* a red marker in the top-left corner shows the orientation */
        for (int y = 0; y < h / 4; y++)
            for (int x = 0; x < w / 4; x++) {
                uint8_t *p = rgb + ((size_t)y * w + x) * 3;
                p[0] = 255, p[1] = 0, p[2] = 0;
            }
        rc = mm_mp4_write_rgb(wr, rgb, w * 3, &err);
    }
    free(rgb);
    if (rc == 0 && channels == 2) {
        int n = frames * 32000 / fps;
        float *a = malloc((size_t)n * 2 * sizeof *a);
        for (int i = 0; i < n; i++) {
            a[2 * i] = (float)(0.4 * sin(2 * M_PI * 440 * i / 32000.0));
            a[2 * i + 1] = (float)(0.4 * sin(2 * M_PI * 1000 * i / 32000.0));
        }
        rc = mm_mp4_write_audio(wr, a, n, &err);
        free(a);
    }
    if (rc < 0) {
        printf("     writing %s: %s\n", path, err.msg);
        mm_mp4_writer_abort(wr);
        return -1;
    }
    return mm_mp4_writer_close(wr, &err);
}

typedef struct collected {
    int n, width, height;
    int64_t source[512];
    int level[512];
    int corner_red[512];
} collected;

static int collect(void *user, const mm_video_frame *f, mm_error *err)
{
    (void)err;
    collected *c = user;
    if (c->n >= 512)
        return 0;
    c->width = f->width;
    c->height = f->height;
    c->source[c->n] = f->source_index;
    const uint8_t *mid = f->rgb + (size_t)(f->height * 3 / 4) * f->stride + (size_t)(f->width * 3 / 4) * 3;
    c->level[c->n] = mid[1];
    const uint8_t *corner = f->rgb + (size_t)(f->height / 16) * f->stride + (size_t)(f->width / 16) * 3;
    c->corner_red[c->n] = corner[0] > 180 && corner[1] < 80;
    c->n++;
    return 0;
}

static collected read_frames(const char *path, mm_frame_sampling s, int count, double fps, int max_frames, int *rc,
                             mm_error *err)
{
    collected c;
    memset(&c, 0, sizeof c);
    mm_video_options o = {0};
    o.sampling = s;
    o.count = count;
    o.fps = fps;
    o.max_frames = max_frames;
    *rc = mm_video_read(path, &o, collect, &c, err);
    return c;
}

/* The reference's 24 fps resampling, written out as diffusers does it:
 * frame i repeated slot(i+1) - slot(i) times, slot(i) = floor(i*s + 0.5). */
static int reference_resample(int n, double src_fps, double dst_fps, int64_t *out, int cap)
{
    double s = dst_fps / src_fps;
    int k = 0;
    for (int i = 0; i < n; i++) {
        int64_t a = (int64_t)floor(i * s + 0.5), b = (int64_t)floor((i + 1) * s + 0.5);
        for (int64_t r = a; r < b && k < cap; r++)
            out[k++] = i;
    }
    return k;
}

static void test_video_all_frames_in_order(void)
{
    const char *p = tmp_path("count24.mp4");
    int made = make_counted_mp4(p, 64, 48, 24, 30, 0) == 0;
    MM_REQUIRE(made, "writing %s", p);
    int rc;
    mm_error err = {{0}};
    collected c = read_frames(p, MM_FRAMES_ALL, 0, 0, 0, &rc, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    MM_EXPECT(c.n == 30 && c.width == 64 && c.height == 48, "%d frames %dx%d", c.n, c.width, c.height);
    int bad = 0;
    for (int i = 0; i < c.n; i++)
        if (c.source[i] != i || abs(c.level[i] - level_of(i)) > 4 || !c.corner_red[i])
            bad++;
    MM_EXPECT(bad == 0, "%d frames out of order or wrong (first: source %lld level %d, want %d)", bad,
              (long long)c.source[0], c.level[0], level_of(0));
    /* max_frames caps */
    c = read_frames(p, MM_FRAMES_ALL, 0, 0, 10, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 10 && c.source[9] == 9, "capped: %d frames, %s", c.n, err.msg);
}

static void test_video_fps_resampling_matches_reference_rule(void)
{
    const char *p = tmp_path("count30.mp4");
    int made = make_counted_mp4(p, 64, 48, 30, 60, 0) == 0;
    MM_REQUIRE(made, "writing %s", p);
    int rc;
    mm_error err = {{0}};
    collected c = read_frames(p, MM_FRAMES_FPS, 0, 24, 0, &rc, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    int64_t want[512];
    int n = reference_resample(60, 30, 24, want, 512);
    MM_EXPECT(c.n == n && n == 48, "%d frames, reference %d", c.n, n);
    int bad = 0;
    for (int i = 0; i < c.n && i < n; i++)
        if (c.source[i] != want[i] || abs(c.level[i] - level_of((int)want[i])) > 4)
            bad++;
    MM_EXPECT(bad == 0, "%d frames differ from the reference rule", bad);
    /* upsampling repeats frames: 30 -> 48 fps */
    c = read_frames(p, MM_FRAMES_FPS, 0, 48, 0, &rc, &err);
    n = reference_resample(60, 30, 48, want, 512);
    bad = rc != 0 || c.n != n;
    for (int i = 0; !bad && i < n; i++)
        bad = c.source[i] != want[i];
    MM_EXPECT(!bad, "48 fps: %d frames vs %d (%s)", c.n, n, err.msg);
}

static void test_video_h3_grid(void)
{
    int rc;
    mm_error err = {{0}};
    MM_EXPECT(mm_h3_grid_floor(21) == 0 && mm_h3_grid_floor(22) == 22 && mm_h3_grid_floor(38) == 22 &&
                  mm_h3_grid_floor(39) == 39 && mm_h3_grid_floor(124) == 124 && mm_h3_grid_floor(140) == 124,
              "grid floor");
    /* 60 frames at 30 fps -> 48 at 24 fps -> 39 on the grid */
    collected c = read_frames(tmp_path("count30.mp4"), MM_FRAMES_H3_GRID, 0, 0, 0, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 39, "grid: %d frames (%s)", c.n, err.msg);
    int64_t want[512];
    reference_resample(60, 30, 24, want, 512);
    int bad = 0;
    for (int i = 0; i < c.n; i++)
        bad += c.source[i] != want[i];
    MM_EXPECT(bad == 0, "%d grid frames differ from the 24 fps rule", bad);
    /* cut to the generated length first, then snapped: 30 -> 22 */
    c = read_frames(tmp_path("count30.mp4"), MM_FRAMES_H3_GRID, 0, 0, 30, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 22, "grid capped at 30: %d frames (%s)", c.n, err.msg);
    /* too short for 17n+5 */
    const char *shortp = tmp_path("short.mp4");
    int made = make_counted_mp4(shortp, 64, 48, 24, 12, 0) == 0;
    MM_REQUIRE(made, "writing %s", shortp);
    c = read_frames(shortp, MM_FRAMES_H3_GRID, 0, 0, 0, &rc, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "at least 22"), "short video: rc %d: %s", rc, err.msg);
}

static void test_video_count_sampling(void)
{
    int rc;
    mm_error err = {{0}};
    collected c = read_frames(tmp_path("count24.mp4"), MM_FRAMES_COUNT, 5, 0, 0, &rc, &err);
    /* round(k * 29 / 4) with ties to even: 0, 7.25, 14.5, 21.75, 29 */
    static const int64_t want[5] = {0, 7, 14, 22, 29};
    int bad = rc != 0 || c.n != 5;
    for (int i = 0; !bad && i < 5; i++)
        bad = c.source[i] != want[i] || abs(c.level[i] - level_of((int)want[i])) > 4;
    MM_EXPECT(!bad, "count 5: rc %d, %d frames, sources %lld %lld %lld %lld %lld (%s)", rc, c.n,
              (long long)c.source[0], (long long)c.source[1], (long long)c.source[2], (long long)c.source[3],
              (long long)c.source[4], err.msg);
    c = read_frames(tmp_path("count24.mp4"), MM_FRAMES_COUNT, 1, 0, 0, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 1 && c.source[0] == 0, "count 1");
    c = read_frames(tmp_path("count24.mp4"), MM_FRAMES_COUNT, 0, 0, 0, &rc, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "at least 1"), "count 0: %s", err.msg);
}

static void test_video_reader_refuses_non_video(void)
{
    const char *img = tmp_path("still.png");
    uint8_t px[16 * 16 * 3] = {0};
    mm_error err = {{0}};
    int written = mm_image_write(img, px, 16, 16, 48, 0, &err) == 0;
    MM_REQUIRE(written, "%s", err.msg);
    mm_video_reader *r = NULL;
    mm_video_options o = {0};
    MM_EXPECT(mm_video_open(&r, img, &o, &err) < 0 && strstr(err.msg, "not a video"), "image: %s", err.msg);
    MM_EXPECT(r == NULL, "reader returned on failure");
    mm_audio a;
    MM_EXPECT(mm_audio_read(tmp_path("count24.mp4"), NULL, &a, &err) < 0 && strstr(err.msg, "without audio"),
              "silent video: %s", err.msg);
    MM_EXPECT(mm_audio_read(img, NULL, &a, &err) < 0 && strstr(err.msg, "without audio"), "image: %s", err.msg);
}

static double tone_hz(const float *x, int64_t from, int64_t to, int rate)
{
    int n = 0;
    for (int64_t i = from + 1; i < to; i++)
        n += (x[i - 1] < 0) != (x[i] < 0);
    return n / 2.0 / ((double)(to - from) / rate);
}

static void test_audio_soundtrack_stereo(void)
{
    const char *p = tmp_path("tones.mp4");
    int made = make_counted_mp4(p, 64, 48, 24, 48, 2) == 0;
    MM_REQUIRE(made, "writing %s", p);
    mm_audio a;
    mm_error err = {{0}};
    int rc = mm_audio_read(p, NULL, &a, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    MM_EXPECT(a.rate == 32000 && a.channels == 2 && a.source_rate == 32000 && a.source_channels == 2,
              "%d Hz %d ch from %d Hz %d ch", a.rate, a.channels, a.source_rate, a.source_channels);
    MM_EXPECT(llabs(a.frames - 64000) <= 32000 / 24, "%lld samples for 2 s of video", (long long)a.frames);
    double l = tone_hz(a.samples, 4000, 60000, 32000), r = tone_hz(a.samples + a.frames, 4000, 60000, 32000);
    MM_EXPECT(fabs(l - 440) < 8 && fabs(r - 1000) < 15, "tones %.1f / %.1f Hz, want 440 / 1000 (left, right)", l, r);
    mm_audio_free(&a);
    /* cut at the source rate: floor(0.5 * 32000) */
    mm_audio_options o = {0};
    o.max_seconds = 0.5;
    rc = mm_audio_read(p, &o, &a, &err);
    MM_EXPECT(rc == 0 && a.frames == 16000, "max 0.5 s: %lld samples (%s)", (long long)a.frames, err.msg);
    mm_audio_free(&a);
}

static int write_wav_mono(const char *path, int rate, int n, double hz, double amp)
{
    size_t data = (size_t)n * 2;
    uint8_t *b = calloc(44 + data, 1);
    uint32_t v;
    uint16_t s;
    memcpy(b, "RIFF", 4), v = (uint32_t)(36 + data), memcpy(b + 4, &v, 4);
    memcpy(b + 8, "WAVEfmt ", 8), v = 16, memcpy(b + 16, &v, 4);
    s = 1, memcpy(b + 20, &s, 2), s = 1, memcpy(b + 22, &s, 2);
    v = (uint32_t)rate, memcpy(b + 24, &v, 4), v = (uint32_t)rate * 2, memcpy(b + 28, &v, 4);
    s = 2, memcpy(b + 32, &s, 2), s = 16, memcpy(b + 34, &s, 2);
    memcpy(b + 36, "data", 4), v = (uint32_t)data, memcpy(b + 40, &v, 4);
    for (int i = 0; i < n; i++) {
        int16_t x = (int16_t)lrint(amp * 32767 * sin(2 * M_PI * hz * i / rate));
        memcpy(b + 44 + 2 * i, &x, 2);
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, 44 + data, f) == 44 + data;
    if (f)
        fclose(f);
    free(b);
    return ok ? 0 : -1;
}

static void test_audio_mono_wav_resampled(void)
{
    const char *p = tmp_path("tone441.wav");
    int made = write_wav_mono(p, 44100, 66150, 440, 0.5) == 0;
    MM_REQUIRE(made, "writing %s", p);
    mm_audio a;
    mm_error err = {{0}};
    int rc = mm_audio_read(p, NULL, &a, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    MM_EXPECT(a.frames == 48000 && a.rate == 32000 && a.source_rate == 44100 && a.source_channels == 1,
              "%lld samples at %d Hz from %d Hz %d ch", (long long)a.frames, a.rate, a.source_rate, a.source_channels);
    MM_EXPECT(!memcmp(a.samples, a.samples + a.frames, (size_t)a.frames * sizeof(float)),
              "mono is not duplicated to both channels");
    double peak = 0;
    for (int64_t i = 1000; i < a.frames - 1000; i++)
        peak = fmax(peak, fabs(a.samples[i]));
    MM_EXPECT(fabs(peak - 0.5) < 0.005, "peak %.4f, want 0.5 (passband gain 1)", peak);
    MM_EXPECT(fabs(tone_hz(a.samples, 1000, 47000, 32000) - 440) < 5, "tone %.1f Hz",
              tone_hz(a.samples, 1000, 47000, 32000));
    mm_audio_free(&a);
}

/* The polyphase resampler against the sinc sum written out directly:
 * y[i] = sum_k x[k] h((k/o - i/m) base), the same filter, other indexing. */
static void test_resample_matches_direct_sinc_sum(void)
{
    const int rates[][2] = {{44100, 32000}, {48000, 32000}, {16000, 32000}, {22050, 32000}};
    for (int r = 0; r < 4; r++) {
        int orig = rates[r][0], neu = rates[r][1];
        int64_t n = 3000;
        float *x = malloc((size_t)n * sizeof *x);
        uint32_t seed = 12345;
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = (float)((seed >> 8) / 16777216.0 - 0.5);
        }
        int64_t out_n = mm_resample_length(n, orig, neu);
        int64_t g = orig, b = neu;
        while (b) {
            int64_t t = g % b;
            g = b, b = t;
        }
        int64_t o = orig / g, m = neu / g;
        MM_EXPECT(out_n == (n * m + o - 1) / o, "length %lld", (long long)out_n);
        float *y = malloc((size_t)out_n * sizeof *y);
        mm_error err = {{0}};
        int rc = mm_resample_sinc(x, n, orig, neu, y, &err);
        MM_REQUIRE(rc == 0, "%s", err.msg);
        double base = (o < m ? o : m) * 0.99, worst = 0;
        for (int64_t i = 0; i < out_n; i += 7) {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) {
                double t = ((double)k / o - (double)i / m) * base;
                if (t < -6 || t > 6)
                    continue;
                double w = cos(t * M_PI / 12), tp = t * M_PI;
                acc += x[k] * (float)((tp == 0 ? 1 : sin(tp) / tp) * w * w * base / o);
            }
            worst = fmax(worst, fabs(acc - y[i]));
        }
        MM_EXPECT(worst < 1e-5, "%d -> %d Hz: worst difference %.3g", orig, neu, worst);
        free(x);
        free(y);
    }
    /* equal rates copy */
    float a[3] = {1, 2, 3}, b[3];
    mm_error err = {{0}};
    MM_EXPECT(mm_resample_sinc(a, 3, 32000, 32000, b, &err) == 0 && !memcmp(a, b, sizeof a), "32 kHz copy");
}

/* A JPEG with an EXIF APP1 segment carrying only the Orientation tag. */
static int jpeg_with_orientation(const char *src, const char *dst, int orientation)
{
    FILE *f = fopen(src, "rb");
    if (!f)
        return -1;
    uint8_t *d = malloc(1 << 20);
    size_t n = fread(d, 1, 1 << 20, f);
    fclose(f);
    uint8_t app1[] = {0xff, 0xe1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 0x2a, 0, 0, 0, 8, 0, 1,
                      0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, (uint8_t)orientation, 0, 0, 0, 0, 0, 0};
    f = fopen(dst, "wb");
    int ok = f && n > 2 && fwrite(d, 1, 2, f) == 2 && fwrite(app1, 1, sizeof app1, f) == sizeof app1 &&
             fwrite(d + 2, 1, n - 2, f) == n - 2;
    if (f)
        fclose(f);
    free(d);
    return ok ? 0 : -1;
}

static void test_image_exif_orientation(void)
{
    /* 80x40, red top-left quadrant, green top-right, blue bottom-left, white bottom-right */
    int w = 80, h = 40;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    static const uint8_t col[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memcpy(rgb + ((size_t)y * w + x) * 3, col[(y >= h / 2) * 2 + (x >= w / 2)], 3);
    const char *plain = tmp_path("plain.jpg");
    mm_error err = {{0}};
    int written = mm_image_write(plain, rgb, w, h, w * 3, 95, &err) == 0;
    free(rgb);
    MM_REQUIRE(written, "%s", err.msg);
    /* orientation -> expected size and the colour now at the top-left */
    const struct {
        int o, w, h, top_left;
    } cases[] = {{1, 80, 40, 0}, {2, 80, 40, 1}, {3, 80, 40, 3}, {4, 80, 40, 2},
                 {5, 40, 80, 0}, {6, 40, 80, 2}, {7, 40, 80, 3}, {8, 40, 80, 1}};
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "exif%d.jpg", cases[i].o);
        const char *p = tmp_path(name);
        int made = jpeg_with_orientation(plain, p, cases[i].o) == 0;
        MM_REQUIRE(made, "writing %s", p);
        mm_image img;
        int rc = mm_image_read(p, NULL, &img, &err);
        MM_EXPECT(rc == 0, "orientation %d: %s", cases[i].o, err.msg);
        if (rc < 0)
            continue;
        const uint8_t *tl = img.rgb + (5 * img.stride + 5 * 3);
        const uint8_t *want = col[cases[i].top_left];
        int close = abs(tl[0] - want[0]) < 40 && abs(tl[1] - want[1]) < 40 && abs(tl[2] - want[2]) < 40;
        MM_EXPECT(img.width == cases[i].w && img.height == cases[i].h && close,
                  "orientation %d: %dx%d, top-left %d,%d,%d (want %dx%d, %d,%d,%d)", cases[i].o, img.width,
                  img.height, tl[0], tl[1], tl[2], cases[i].w, cases[i].h, want[0], want[1], want[2]);
        mm_image_free(&img);
    }
}

static void test_image_formats_and_frames_dir(void)
{
    int w = 33, h = 17; /* odd sizes on purpose */
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        rgb[i] = (uint8_t)(i * 7);
    mm_error err = {{0}};
    /* PNG is lossless: the frame dump reads back bit for bit */
    for (int k = 0; k < 3; k++) {
        int written = mm_frames_dir_write(test_tmpdir(), k, rgb, w, h, w * 3, &err) == 0;
        MM_REQUIRE(written, "%s", err.msg);
    }
    mm_image img;
    int rc = mm_image_read(tmp_path("frame_00002.png"), NULL, &img, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    MM_EXPECT(img.width == w && img.height == h && !memcmp(img.rgb, rgb, (size_t)w * h * 3),
              "PNG frame does not read back exactly");
    mm_image_free(&img);
    MM_EXPECT(file_exists(tmp_path("frame_00000.png")) && !file_exists(tmp_path("frame_00000.png.part")),
              "frame files");
    /* JPEG and WebP round trip approximately */
    const char *names[] = {"x.jpg", "x.webp", "X.JPEG"};
    for (int k = 0; k < 3; k++) {
        const char *p = tmp_path(names[k]);
        rc = mm_image_write(p, rgb, w, h, w * 3, 95, &err);
        MM_EXPECT(rc == 0, "%s: %s", names[k], err.msg);
        rc = rc == 0 ? mm_image_read(p, NULL, &img, &err) : -1;
        MM_EXPECT(rc == 0 && img.width == w && img.height == h, "%s: read back %dx%d (%s)", names[k], img.width,
                  img.height, err.msg);
        if (rc == 0)
            mm_image_free(&img);
    }
    MM_EXPECT(mm_image_write(tmp_path("x.tga"), rgb, w, h, w * 3, 0, &err) < 0 && strstr(err.msg, ".png"),
              "unknown extension: %s", err.msg);
    free(rgb);
}

static void test_read_h3_sample_videos(void)
{
    char missing[1024];
    const char *assets = h3_assets_dir(missing, sizeof missing);
    MM_REQUIRE(assets, "%s", missing);
    char p[1100];
    snprintf(p, sizeof p, "%s/ref2va.mp4", assets);
    int rc;
    mm_error err = {{0}};
    collected c = read_frames(p, MM_FRAMES_ALL, 0, 0, 0, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 124 && c.width == 1344 && c.height == 768, "ref2va: %d frames %dx%d (%s)", c.n,
              c.width, c.height, err.msg);
    snprintf(p, sizeof p, "%s/t2va.mp4", assets);
    c = read_frames(p, MM_FRAMES_H3_GRID, 0, 0, 124, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 124 && c.source[123] == 123, "t2va grid at 124: %d frames (%s)", c.n, err.msg);
    c = read_frames(p, MM_FRAMES_H3_GRID, 0, 0, 0, &rc, &err);
    MM_EXPECT(rc == 0 && c.n == 243, "t2va grid: %d frames (243 = 17*14+5)", c.n);
    mm_audio a;
    mm_audio_options o = {0};
    o.max_seconds = 124 / 24.0;
    rc = mm_audio_read(p, &o, &a, &err);
    MM_EXPECT(rc == 0 && a.frames == 165333 && a.source_rate == 32000 && a.source_channels == 2,
              "t2va soundtrack cut to 124 frames: %lld samples (%s)", (long long)a.frames, err.msg);
    if (rc == 0) {
        double e = 0;
        for (int64_t i = 0; i < a.frames; i++)
            e += a.samples[i] * a.samples[i];
        MM_EXPECT(e / a.frames > 1e-6, "soundtrack is silent (mean square %.3g)", e / a.frames);
        mm_audio_free(&a);
    }
}

int main(void)
{
    av_log_set_level(AV_LOG_QUIET);
    MM_RUN(test_video_all_frames_in_order);
    MM_RUN(test_video_fps_resampling_matches_reference_rule);
    MM_RUN(test_video_h3_grid);
    MM_RUN(test_video_count_sampling);
    MM_RUN(test_video_reader_refuses_non_video);
    MM_RUN(test_audio_soundtrack_stereo);
    MM_RUN(test_audio_mono_wav_resampled);
    MM_RUN(test_resample_matches_direct_sinc_sum);
    MM_RUN(test_image_exif_orientation);
    MM_RUN(test_image_formats_and_frames_dir);
    MM_RUN(test_read_h3_sample_videos);
    if (!getenv("KEEP"))
        rm_tree(test_tmpdir());
    return mm_test_exit();
}
