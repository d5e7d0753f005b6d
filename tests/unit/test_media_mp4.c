/* The mp4 writer, checked by decoding what it wrote with libavformat and
 * libavcodec directly, and with ffprobe (a failure when it is missing). */
#include <math.h>

#include "media/mp4_writer.h"
#include "test.h"
#include "test_media_common.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static char *tmp_path(const char *name)
{
    static char p[8][1024];
    static int k;
    char *s = p[k++ % 8];
    snprintf(s, 1024, "%s/%s", test_tmpdir(), name);
    return s;
}

/* Frame i: a horizontal ramp whose brightness moves with i, so frames differ. */
static void fill_frame(uint8_t *rgb, int w, int h, int i)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + (size_t)(y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w - 1));
            p[1] = (uint8_t)(y * 255 / (h - 1));
            p[2] = (uint8_t)((i * 37) & 255);
        }
}

/* Left: sine at fl Hz, right: sine at fr Hz, amplitude 0.5. */
static float *stereo_sines(int64_t n, int rate, double fl, double fr)
{
    float *a = malloc((size_t)n * 2 * sizeof *a);
    for (int64_t i = 0; i < n; i++) {
        a[2 * i] = (float)(0.5 * sin(2 * M_PI * fl * (double)i / rate));
        a[2 * i + 1] = (float)(0.5 * sin(2 * M_PI * fr * (double)i / rate));
    }
    return a;
}

/* Zero crossings of channel ch over [from, to) samples: ~2 f per second. */
static double crossing_rate(const float *pcm, int channels, int ch, int64_t from, int64_t to, int rate)
{
    int n = 0;
    for (int64_t i = from + 1; i < to; i++) {
        float a = pcm[(i - 1) * channels + ch], b = pcm[i * channels + ch];
        if ((a < 0) != (b < 0))
            n++;
    }
    return n / 2.0 / ((double)(to - from) / rate);
}

/* The file's top-level box types in order, e.g. "ftyp moov mdat" (64-bit
 * sizes followed); "?" marks a box that runs past the end of the file. */
static void top_level_boxes(const char *path, char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long long size = ftell(f), at = 0;
    while (at + 8 <= size && strlen(out) + 6 < cap) {
        uint8_t h[16];
        fseek(f, at, SEEK_SET);
        if (fread(h, 1, 16, f) < 8)
            break;
        unsigned long long len = (uint32_t)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
        if (len == 1)
            for (int i = 8; i < 16; i++)
                len = len << 8 | h[i];
        if (len == 1 || len < 8 || at + (long long)len > size) {
            strcat(out, out[0] ? " ?" : "?");
            break;
        }
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%.4s", n ? " " : "", (const char *)h + 4);
        at += (long long)len;
    }
    fclose(f);
}

static int write_video(const char *path, const mm_mp4_options *o, int frames, const float *audio, int64_t samples,
                       int audio_first, mm_error *err)
{
    mm_mp4_writer *w;
    if (mm_mp4_writer_open(&w, path, o, err) < 0)
        return -1;
    uint8_t *rgb = malloc((size_t)o->width * o->height * 3);
    if (audio && audio_first && mm_mp4_write_audio(w, audio, (int)samples, err) < 0)
        goto fail;
    for (int i = 0; i < frames; i++) {
        fill_frame(rgb, o->width, o->height, i);
        if (mm_mp4_write_rgb(w, rgb, o->width * 3, err) < 0)
            goto fail;
    }
    /* Odd chunk sizes, as a decoder hands them out. */
    for (int64_t at = 0; audio && !audio_first && at < samples;) {
        int chunk = (int)(samples - at < 777 ? samples - at : 777);
        if (mm_mp4_write_audio(w, audio + at * o->audio_channels, chunk, err) < 0)
            goto fail;
        at += chunk;
    }
    free(rgb);
    return mm_mp4_writer_close(w, err);
fail:
    free(rgb);
    mm_mp4_writer_abort(w);
    return -1;
}

/* The H3 case at a small size: 22 frames (17n+5), stereo 32 kHz, and as
 * much audio as the reference's VAE gives (800 * round(5N/3) samples). */
static void test_mp4_h3_layout_roundtrip(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 96, 64); /* preset medium: B-frames and an edit list */
    int frames = 22;
    int64_t samples = 800 * ((5 * frames + 1) / 3); /* 29600, video is 29333 */
    float *audio = stereo_sines(samples, 32000, 440, 1000);
    const char *path = tmp_path("h3.mp4");
    mm_error err = {{0}};
    int rc = write_video(path, &o, frames, audio, samples, 0, &err);
    free(audio);
    MM_REQUIRE(rc == 0, "write: %s", err.msg);
    MM_EXPECT(!file_exists(tmp_path("h3.mp4.part")), "the .part file is left behind");

    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok, "decode: %s", m.error);
    MM_EXPECT(strstr(m.format, "mp4") != NULL, "container %s", m.format);
    MM_EXPECT(m.has_video && !strcmp(m.video_codec, "h264"), "video codec %s", m.video_codec);
    MM_EXPECT(!strcmp(m.pix_fmt, "yuv420p"), "pix_fmt %s", m.pix_fmt);
    MM_EXPECT(m.width == 96 && m.height == 64, "size %dx%d", m.width, m.height);
    MM_EXPECT(m.frames == frames, "decoded %d frames, wrote %d", m.frames, frames);
    MM_EXPECT(m.r_frame_rate.num == 24 && m.r_frame_rate.den == 1, "r_frame_rate %d/%d", m.r_frame_rate.num,
              m.r_frame_rate.den);
    MM_EXPECT(m.avg_frame_rate.num * 1 == 24 * m.avg_frame_rate.den, "avg_frame_rate %d/%d", m.avg_frame_rate.num,
              m.avg_frame_rate.den);
    MM_EXPECT(fabs(m.video_duration - frames / 24.0) < 1e-3, "video duration %.4f s, expected %.4f",
              m.video_duration, frames / 24.0);
    MM_EXPECT(m.colorspace == AVCOL_SPC_BT709, "colorspace tag %d, expected BT.709", (int)m.colorspace);
    MM_EXPECT(m.has_audio && !strcmp(m.audio_codec, "aac"), "audio codec %s", m.audio_codec);
    MM_EXPECT(m.sample_rate == 32000 && m.channels == 2, "audio %d Hz %d ch", m.sample_rate, m.channels);
    double video_s = frames / 24.0, audio_s = (double)m.samples / 32000;
    MM_EXPECT(fabs(audio_s - video_s) < 1.0 / 24, "decoded audio %.4f s vs video %.4f s", audio_s, video_s);
    MM_EXPECT(fabs(m.audio_duration - video_s) < 1.0 / 24, "audio stream duration %.4f s vs video %.4f s",
              m.audio_duration, video_s);
    /* Left is 440 Hz and right 1000 Hz: channels are not swapped or mixed. */
    if (m.samples > 16000) {
        double l = crossing_rate(m.pcm, 2, 0, 4000, 16000, 32000);
        double r = crossing_rate(m.pcm, 2, 1, 4000, 16000, 32000);
        MM_EXPECT(fabs(l - 440) < 10 && fabs(r - 1000) < 20, "channel tones %.1f / %.1f Hz, expected 440 / 1000", l,
                  r);
    }
    /* The last frame is the last one written (nothing dropped at the end). */
    uint8_t *want = malloc(96 * 64 * 3);
    fill_frame(want, 96, 64, frames - 1);
    int px = (32 * 96 + 48) * 3;
    MM_EXPECT(m.last_rgb && abs(m.last_rgb[px + 2] - want[px + 2]) < 12, "last frame blue %d, expected %d",
              m.last_rgb ? m.last_rgb[px + 2] : -1, want[px + 2]);
    free(want);

    /* ffprobe reads it as well (ours to install: tools/deps.sh brings ffmpeg). */
    const int ffprobe_found = have_ffprobe();
    MM_EXPECT(ffprobe_found, "ffprobe is not installed (tools/deps.sh installs ffmpeg): its reading of the clip "
                             "was not checked");
    if (ffprobe_found) {
        const char *s = ffprobe("-select_streams v:0 -count_frames -show_entries "
                                "stream=nb_read_frames,r_frame_rate,width,height -of csv=p=0",
                                path);
        MM_EXPECT(s && !strcmp(s, "96,64,24/1,22"), "ffprobe video: %s", s ? s : "(failed)");
        s = ffprobe("-select_streams a:0 -show_entries stream=sample_rate,channels,duration -of csv=p=0", path);
        double dur = 0;
        int rate = 0, ch = 0;
        MM_EXPECT(s && sscanf(s, "%d,%d,%lf", &rate, &ch, &dur) == 3 && rate == 32000 && ch == 2 &&
                      fabs(dur - video_s) < 1.0 / 24,
                  "ffprobe audio: %s", s ? s : "(failed)");
    }
    /* +faststart: the moov atom comes before mdat. */
    char boxes[256];
    top_level_boxes(path, boxes, sizeof boxes);
    MM_EXPECT(!strcmp(boxes, "ftyp moov free mdat"), "top-level boxes \"%s\": moov is not in front of mdat", boxes);
    decoded_media_free(&m);
}

/* The pipeline's order with the length known: the index's room is reserved
 * in front of mdat (no second pass), the video is finished before the audio
 * arrives, and a frame past the announced length is refused in plain words
 * without spoiling the file. 124 frames with 5 s of audio: the H3 clip's
 * sample counts, which the reserved room must hold. */
static void test_mp4_reserved_index_and_late_audio(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    const int frames = 124;
    o.expected_frames = frames;
    int64_t samples = 800 * ((5 * frames + 1) / 3);
    float *audio = stereo_sines(samples, 32000, 440, 1000);
    const char *path = tmp_path("reserved.mp4");
    mm_error err = {{0}};
    mm_mp4_writer *w;
    MM_REQUIRE(mm_mp4_writer_open(&w, path, &o, &err) == 0, "open: %s", err.msg);
    uint8_t *rgb = malloc(64 * 48 * 3);
    int rc = 0;
    for (int i = 0; i < frames && rc == 0; i++) {
        fill_frame(rgb, 64, 48, i);
        rc = mm_mp4_write_rgb(w, rgb, 64 * 3, &err);
    }
    MM_EXPECT(rc == 0, "frames: %s", err.msg);
    MM_EXPECT(mm_mp4_write_rgb(w, rgb, 64 * 3, &err) < 0 && strstr(err.msg, "beyond the 124"),
              "frame 125 of 124: %s", err.msg);
    MM_EXPECT(mm_mp4_writer_finish_video(w, &err) == 0, "finish video: %s", err.msg);
    MM_EXPECT(mm_mp4_write_rgb(w, rgb, 64 * 3, &err) < 0 && strstr(err.msg, "after the video was finished"),
              "a frame after the finish: %s", err.msg);
    free(rgb);
    MM_EXPECT(mm_mp4_write_audio(w, audio, (int)samples, &err) == 0, "audio after the video: %s", err.msg);
    free(audio);
    MM_REQUIRE(mm_mp4_writer_close(w, &err) == 0, "close: %s", err.msg);

    char boxes[256];
    top_level_boxes(path, boxes, sizeof boxes);
    /* the reserved room's unused rest, then the muxer's usual 8-byte free box */
    MM_EXPECT(!strcmp(boxes, "ftyp moov free free mdat"), "top-level boxes \"%s\": moov not reserved in front",
              boxes);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok, "decode: %s", m.error);
    MM_EXPECT(m.frames == frames, "decoded %d frames, wrote %d", m.frames, frames);
    double video_s = frames / 24.0, audio_s = (double)m.samples / 32000;
    MM_EXPECT(m.has_audio && fabs(audio_s - video_s) < 1.0 / 24, "decoded audio %.4f s vs video %.4f s", audio_s,
              video_s);
    if (m.samples > 16000) {
        double l = crossing_rate(m.pcm, 2, 0, 4000, 16000, 32000);
        MM_EXPECT(fabs(l - 440) < 10, "left tone %.1f Hz, expected 440", l);
    }
    decoded_media_free(&m);
}

/* Audio handed over before any frame, and less of it than the video:
 * padded with silence to the video's length. */
static void test_mp4_audio_first_and_short(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    int frames = 30;
    int64_t samples = 20000; /* 0.625 s for a 1.25 s video */
    float *audio = stereo_sines(samples, 32000, 300, 300);
    const char *path = tmp_path("short_audio.mp4");
    mm_error err = {{0}};
    int rc = write_video(path, &o, frames, audio, samples, 1, &err);
    free(audio);
    MM_REQUIRE(rc == 0, "write: %s", err.msg);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok, "decode: %s", m.error);
    MM_EXPECT(m.frames == frames, "frames %d", m.frames);
    double audio_s = (double)m.samples / 32000;
    MM_EXPECT(fabs(audio_s - frames / 24.0) < 1.0 / 24, "audio %.4f s vs video %.4f s", audio_s, frames / 24.0);
    /* The tone is there at the start and silence after 0.625 s. */
    double loud = 0, quiet = 0;
    for (int64_t i = 2000; i < 18000 && i < m.samples; i++)
        loud += m.pcm[2 * i] * m.pcm[2 * i];
    for (int64_t i = 24000; i < 38000 && i < m.samples; i++)
        quiet += m.pcm[2 * i] * m.pcm[2 * i];
    MM_EXPECT(loud / 16000 > 0.05 && quiet / 14000 < 1e-4, "rms^2 tone %.4g, padding %.4g", loud / 16000,
              quiet / 14000);
    decoded_media_free(&m);
}

/* Planar input (the audio VAE's [2, L] rows) lands on the same channels,
 * and out-of-range samples are clamped rather than wrapped. */
static void test_mp4_planar_audio_and_clamping(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    int frames = 24, n = 32000;
    float *left = malloc(n * sizeof *left), *right = malloc(n * sizeof *right);
    for (int i = 0; i < n; i++) {
        left[i] = (float)(3.0 * sin(2 * M_PI * 440 * i / 32000.0)); /* overdriven: clamps to a square-ish wave */
        right[i] = (float)(0.3 * sin(2 * M_PI * 1000 * i / 32000.0));
    }
    left[100] = NAN;
    const char *path = tmp_path("planar.mp4");
    mm_error err = {{0}};
    mm_mp4_writer *w;
    int opened = mm_mp4_writer_open(&w, path, &o, &err) == 0;
    MM_REQUIRE(opened, "%s", err.msg);
    uint8_t *rgb = calloc((size_t)64 * 48, 3);
    int rc = 0;
    for (int i = 0; i < frames && rc == 0; i++)
        rc = mm_mp4_write_rgb(w, rgb, 64 * 3, &err);
    const float *const planes[2] = {left, right};
    if (rc == 0)
        rc = mm_mp4_write_audio_planar(w, planes, n, &err);
    free(rgb);
    free(left);
    free(right);
    if (rc == 0)
        rc = mm_mp4_writer_close(w, &err);
    else
        mm_mp4_writer_abort(w);
    MM_REQUIRE(rc == 0, "write: %s", err.msg);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok && m.channels == 2 && m.samples > 16000, "decode: %s", m.error);
    double l = crossing_rate(m.pcm, 2, 0, 4000, 16000, 32000), r = crossing_rate(m.pcm, 2, 1, 4000, 16000, 32000);
    float peak = 0;
    for (int64_t i = 0; i < m.samples; i++)
        peak = fmaxf(peak, fabsf(m.pcm[2 * i]));
    MM_EXPECT(fabs(l - 440) < 10 && fabs(r - 1000) < 20, "tones %.1f / %.1f Hz", l, r);
    MM_EXPECT(peak < 1.3f && peak > 0.8f, "left peak %.3f: clamped input should stay near full scale", peak);
    decoded_media_free(&m);
}

static void test_mp4_silent_has_no_audio_stream(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    o.audio_channels = 0;
    const char *path = tmp_path("silent.mp4");
    mm_error err = {{0}};
    int written = write_video(path, &o, 5, NULL, 0, 0, &err) == 0;
    MM_REQUIRE(written, "write: %s", err.msg);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok, "decode: %s", m.error);
    MM_EXPECT(m.frames == 5 && !m.has_audio, "frames %d, audio stream %d", m.frames, m.has_audio);
    decoded_media_free(&m);
    /* and writing audio to it is refused */
    mm_mp4_writer *w;
    int opened = mm_mp4_writer_open(&w, tmp_path("silent2.mp4"), &o, &err) == 0;
    MM_REQUIRE(opened, "%s", err.msg);
    float s[4] = {0};
    MM_EXPECT(mm_mp4_write_audio(w, s, 2, &err) < 0 && strstr(err.msg, "silent"), "err: %s", err.msg);
    mm_mp4_writer_abort(w);
    MM_EXPECT(!file_exists(tmp_path("silent2.mp4.part")) && !file_exists(tmp_path("silent2.mp4")), "files left");
}

static void test_mp4_mono_input(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    o.audio_channels = 1;
    int64_t n = 16000;
    float *a = malloc(n * sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)(0.3 * sin(2 * M_PI * 500 * i / 32000.0));
    const char *path = tmp_path("mono.mp4");
    mm_error err = {{0}};
    int rc = write_video(path, &o, 12, a, n, 0, &err);
    free(a);
    MM_REQUIRE(rc == 0, "write: %s", err.msg);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok, "decode: %s", m.error);
    MM_EXPECT(m.channels == 1 && m.sample_rate == 32000, "%d ch %d Hz", m.channels, m.sample_rate);
    MM_EXPECT(llabs(m.samples - 16000) < 32000 / 24, "samples %lld", (long long)m.samples);
    decoded_media_free(&m);
}

/* crf 0 is lossless in YUV: flat colours come back within conversion error,
 * which also pins the BT.709 matrix and the limited range. */
static void test_mp4_colours_roundtrip(void)
{
    static const uint8_t colours[6][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255},
                                          {255, 255, 255}, {0, 0, 0}, {200, 120, 40}};
    int w = 96, h = 64;
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, w, h);
    o.preset = "ultrafast";
    o.crf = 0;
    o.audio_channels = 0;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memcpy(rgb + (y * w + x) * 3, colours[(y / 32) * 3 + x / 32], 3);
    const char *path = tmp_path("colours.mp4");
    mm_error err = {{0}};
    mm_mp4_writer *wr;
    int opened = mm_mp4_writer_open(&wr, path, &o, &err) == 0;
    MM_REQUIRE(opened, "%s", err.msg);
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = mm_mp4_write_rgb(wr, rgb, w * 3, &err);
    if (rc == 0)
        rc = mm_mp4_writer_close(wr, &err);
    else
        mm_mp4_writer_abort(wr);
    free(rgb);
    MM_REQUIRE(rc == 0, "write: %s", err.msg);
    decoded_media m = decode_media(path);
    MM_REQUIRE(m.ok && m.first_rgb, "decode: %s", m.error);
    int worst = 0;
    for (int k = 0; k < 6; k++) {
        int cx = (k % 3) * 32 + 16, cy = (k / 3) * 32 + 16;
        const uint8_t *p = m.first_rgb + (cy * w + cx) * 3;
        for (int c = 0; c < 3; c++) {
            int d = abs(p[c] - colours[k][c]);
            if (d > worst)
                worst = d;
        }
    }
    MM_EXPECT(worst <= 3, "worst colour error %d levels (BT.709 limited range round trip)", worst);
    decoded_media_free(&m);
}

static void test_mp4_abort_removes_partial(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    const char *path = tmp_path("aborted.mp4");
    mm_error err = {{0}};
    mm_mp4_writer *w;
    int opened = mm_mp4_writer_open(&w, path, &o, &err) == 0;
    MM_REQUIRE(opened, "%s", err.msg);
    uint8_t *rgb = calloc(64 * 48, 3);
    MM_EXPECT(mm_mp4_write_rgb(w, rgb, 64 * 3, &err) == 0, "%s", err.msg);
    free(rgb);
    MM_EXPECT(file_exists(tmp_path("aborted.mp4.part")), "no .part file while writing");
    MM_EXPECT(!file_exists(path), "final file exists before close");
    mm_mp4_writer_abort(w);
    MM_EXPECT(!file_exists(tmp_path("aborted.mp4.part")) && !file_exists(path), "abort left files behind");
}

static void test_mp4_close_without_frames_fails(void)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    const char *path = tmp_path("empty.mp4");
    mm_error err = {{0}};
    mm_mp4_writer *w;
    int opened = mm_mp4_writer_open(&w, path, &o, &err) == 0;
    MM_REQUIRE(opened, "%s", err.msg);
    MM_EXPECT(mm_mp4_writer_close(w, &err) < 0 && strstr(err.msg, "no video frames"), "err: %s", err.msg);
    MM_EXPECT(!file_exists(path) && !file_exists(tmp_path("empty.mp4.part")), "files left behind");
}

static void test_mp4_bad_options_are_explained(void)
{
    mm_mp4_options o;
    mm_mp4_writer *w = NULL;
    mm_error err = {{0}};
    mm_mp4_options_defaults(&o, 65, 48);
    MM_EXPECT(mm_mp4_writer_open(&w, tmp_path("bad.mp4"), &o, &err) < 0 && strstr(err.msg, "even"), "odd width: %s",
              err.msg);
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "turbo";
    MM_EXPECT(mm_mp4_writer_open(&w, tmp_path("bad.mp4"), &o, &err) < 0 && strstr(err.msg, "ultrafast"),
              "preset: %s", err.msg);
    mm_mp4_options_defaults(&o, 64, 48);
    o.crf = 60;
    MM_EXPECT(mm_mp4_writer_open(&w, tmp_path("bad.mp4"), &o, &err) < 0 && strstr(err.msg, "0..51"), "crf: %s",
              err.msg);
    mm_mp4_options_defaults(&o, 64, 48);
    o.audio_channels = 6;
    MM_EXPECT(mm_mp4_writer_open(&w, tmp_path("bad.mp4"), &o, &err) < 0 && strstr(err.msg, "audio_channels"),
              "channels: %s", err.msg);
    mm_mp4_options_defaults(&o, 64, 48);
    MM_EXPECT(mm_mp4_writer_open(&w, "/nonexistent-dir/x.mp4", &o, &err) < 0 && strstr(err.msg, "x.mp4"),
              "missing folder: %s", err.msg);
    MM_EXPECT(w == NULL, "writer returned on failure");
    MM_EXPECT(!file_exists(tmp_path("bad.mp4")) && !file_exists(tmp_path("bad.mp4.part")), "files left behind");
}

/* A name that looks like a URL is still a local file. */
static void test_mp4_path_is_never_a_url(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/http:", test_tmpdir());
    mkdir(dir, 0700);
    char path[1100];
    snprintf(path, sizeof path, "%s/x.mp4", dir);
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, 64, 48);
    o.preset = "ultrafast";
    o.audio_channels = 0;
    mm_error err = {{0}};
    int written = write_video(path, &o, 2, NULL, 0, 0, &err) == 0;
    MM_REQUIRE(written, "write: %s", err.msg);
    MM_EXPECT(file_exists(path), "not written where asked");
    /* relative "tcp:..." style name in the current folder */
    char cwd[1024];
    int have_cwd = getcwd(cwd, sizeof cwd) != NULL;
    MM_REQUIRE(have_cwd, "getcwd");
    int in_tmp = chdir(test_tmpdir()) == 0;
    MM_REQUIRE(in_tmp, "chdir");
    int rc = write_video("tcp:127.0.0.1:9.mp4", &o, 2, NULL, 0, 0, &err);
    int exists = file_exists("tcp:127.0.0.1:9.mp4");
    int back = chdir(cwd) == 0;
    MM_REQUIRE(back, "chdir back");
    MM_EXPECT(rc == 0 && exists, "relative tcp: name: %s", err.msg);
}

int main(void)
{
    av_log_set_level(AV_LOG_ERROR);
    MM_RUN(test_mp4_h3_layout_roundtrip);
    MM_RUN(test_mp4_reserved_index_and_late_audio);
    MM_RUN(test_mp4_audio_first_and_short);
    MM_RUN(test_mp4_planar_audio_and_clamping);
    MM_RUN(test_mp4_silent_has_no_audio_stream);
    MM_RUN(test_mp4_mono_input);
    MM_RUN(test_mp4_colours_roundtrip);
    MM_RUN(test_mp4_abort_removes_partial);
    MM_RUN(test_mp4_close_without_frames_fails);
    MM_RUN(test_mp4_bad_options_are_explained);
    MM_RUN(test_mp4_path_is_never_a_url);
    rm_tree(test_tmpdir());
    return mm_test_exit();
}
