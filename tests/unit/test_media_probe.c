/* mm_media_probe and the upload fences: real files made in the test (with
 * our writers and by hand), hostile and broken ones, and the released H3
 * sample videos (../shared/minimax-h3/assets beside the checkout: a
 * failure when they are missing). */
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "media/image.h"
#include "media/mp4_writer.h"
#include "media/poster.h"
#include "media/probe.h"
#include "test.h"
#include "test_media_common.h"

static char *tmp_path(const char *name)
{
    static char p[16][1024];
    static int k;
    char *s = p[k++ % 16];
    snprintf(s, 1024, "%s/%s", test_tmpdir(), name);
    return s;
}

static int write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(d, 1, (size_t)len, f);
    fclose(f);
    return d;
}

/* A picture with four coloured quadrants: red top-left, green top-right,
 * blue bottom-left, white bottom-right. */
static uint8_t *quadrants(int w, int h)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    static const uint8_t c[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memcpy(rgb + ((size_t)y * w + x) * 3, c[(y >= h / 2) * 2 + (x >= w / 2)], 3);
    return rgb;
}

static int make_image(const char *path, int w, int h)
{
    uint8_t *rgb = quadrants(w, h);
    mm_error err;
    int rc = mm_image_write(path, rgb, w, h, w * 3, 90, &err);
    if (rc < 0)
        printf("     make_image %s: %s\n", path, err.msg);
    free(rgb);
    return rc;
}

static int make_mp4(const char *path, int w, int h, int frames, int channels)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, w, h);
    o.preset = "ultrafast";
    o.audio_channels = channels;
    mm_error err;
    mm_mp4_writer *wr;
    if (mm_mp4_writer_open(&wr, path, &o, &err) < 0)
        return -1;
    uint8_t *rgb = quadrants(w, h);
    int rc = 0;
    for (int i = 0; i < frames && rc == 0; i++)
        rc = mm_mp4_write_rgb(wr, rgb, w * 3, &err);
    free(rgb);
    if (rc == 0 && channels > 0) {
        int n = frames * 32000 / 24;
        float *a = calloc((size_t)n * channels, sizeof *a);
        for (int i = 0; i < n * channels; i++)
            a[i] = 0.25f * sinf((float)i * 0.07f);
        rc = mm_mp4_write_audio(wr, a, n, &err);
        free(a);
    }
    if (rc < 0) {
        mm_mp4_writer_abort(wr);
        return -1;
    }
    return mm_mp4_writer_close(wr, &err);
}

static int make_wav(const char *path, int rate, int channels, double seconds)
{
    int n = (int)(rate * seconds);
    size_t data = (size_t)n * channels * 2;
    uint8_t *b = calloc(44 + data, 1);
    uint32_t v;
    memcpy(b, "RIFF", 4);
    v = (uint32_t)(36 + data), memcpy(b + 4, &v, 4);
    memcpy(b + 8, "WAVEfmt ", 8);
    v = 16, memcpy(b + 16, &v, 4);
    uint16_t s = 1;
    memcpy(b + 20, &s, 2);
    s = (uint16_t)channels, memcpy(b + 22, &s, 2);
    v = (uint32_t)rate, memcpy(b + 24, &v, 4);
    v = (uint32_t)(rate * channels * 2), memcpy(b + 28, &v, 4);
    s = (uint16_t)(channels * 2), memcpy(b + 32, &s, 2);
    s = 16, memcpy(b + 34, &s, 2);
    memcpy(b + 36, "data", 4);
    v = (uint32_t)data, memcpy(b + 40, &v, 4);
    int16_t *pcm = (int16_t *)(b + 44);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < channels; c++)
            pcm[i * channels + c] = (int16_t)(8000 * sin(2 * 3.14159265 * 440 * i / rate));
    int rc = write_bytes(path, b, 44 + data);
    free(b);
    return rc;
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A real PNG whose IHDR claims w x h (CRC fixed up). */
static int make_png_claiming_depth(const char *path, uint32_t w, uint32_t h, int bits, int colour);

static int make_png_claiming(const char *path, uint32_t w, uint32_t h)
{
    return make_png_claiming_depth(path, w, h, 0, 0);
}

/* bits/colour 0: as written (8-bit RGB). */
static int make_png_claiming_depth(const char *path, uint32_t w, uint32_t h, int bits, int colour)
{
    const char *src = tmp_path("small_for_ihdr.png");
    if (make_image(src, 16, 16) < 0)
        return -1;
    size_t n;
    uint8_t *d = read_bytes(src, &n);
    if (!d || n < 33 || memcmp(d + 12, "IHDR", 4))
        return -1;
    put_be32(d + 16, w);
    put_be32(d + 20, h);
    if (bits)
        d[24] = (uint8_t)bits, d[25] = (uint8_t)colour;
    put_be32(d + 29, crc32_of(d + 12, 17));
    int rc = write_bytes(path, d, n);
    free(d);
    return rc;
}

static mm_media_info probe_ok(const char *path, const mm_media_limits *lim, int *ok, char *why, size_t why_n)
{
    mm_media_info info;
    memset(&info, 0, sizeof info);
    mm_error err = {{0}};
    *ok = mm_media_probe(path, lim, &info, &err) == 0;
    snprintf(why, why_n, "%s", err.msg);
    return info;
}

/* Probes a file that must be refused; the message must contain `needle`. */
#define EXPECT_REFUSED(path, lim, needle)                                                                       \
    do {                                                                                                        \
        mm_media_info info_;                                                                                    \
        mm_error err_ = {{0}};                                                                                  \
        int rc_ = mm_media_probe((path), (lim), &info_, &err_);                                                 \
        MM_EXPECT(rc_ < 0, "%s was accepted as %s", (path), mm_media_kind_name(info_.kind));                    \
        MM_EXPECT(rc_ >= 0 || strstr(err_.msg, (needle)) != NULL, "message for %s lacks '%s': %s", (path),      \
                  (needle), err_.msg);                                                                          \
    } while (0)

static void test_probe_images(void)
{
    const char *names[] = {"q.png", "q.jpg", "q.webp"};
    const char *formats[] = {"png", "jpeg", "webp"};
    const char *mimes[] = {"image/png", "image/jpeg", "image/webp"};
    for (int i = 0; i < 3; i++) {
        const char *p = tmp_path(names[i]);
        int made = make_image(p, 120, 80) == 0;
        MM_REQUIRE(made, "writing %s", p);
        int ok;
        char why[1024];
        mm_media_info m = probe_ok(p, NULL, &ok, why, sizeof why);
        MM_EXPECT(ok, "%s: %s", p, why);
        MM_EXPECT(m.kind == MM_MEDIA_IMAGE && m.width == 120 && m.height == 80, "%s: %s %dx%d", p,
                  mm_media_kind_name(m.kind), m.width, m.height);
        MM_EXPECT(!strcmp(m.format_name, formats[i]) && !strcmp(m.mime_type, mimes[i]), "%s: %s %s", p,
                  m.format_name, m.mime_type);
        MM_EXPECT(m.duration_seconds == 0 && !m.has_audio, "%s: duration %g audio %d", p, m.duration_seconds,
                  m.has_audio);
    }
    /* The same bytes through the buffer entry point. */
    size_t n;
    uint8_t *d = read_bytes(tmp_path("q.png"), &n);
    mm_media_info m;
    mm_error err = {{0}};
    MM_EXPECT(d && mm_media_probe_buffer(d, n, NULL, &m, &err) == 0 && m.kind == MM_MEDIA_IMAGE && m.width == 120,
              "buffer probe: %s", err.msg);
    free(d);
}

static void test_probe_video_and_audio(void)
{
    const char *p = tmp_path("v.mp4");
    int made = make_mp4(p, 96, 64, 30, 2) == 0;
    MM_REQUIRE(made, "writing %s", p);
    int ok;
    char why[1024];
    mm_media_info m = probe_ok(p, NULL, &ok, why, sizeof why);
    MM_REQUIRE(ok, "%s", why);
    MM_EXPECT(m.kind == MM_MEDIA_VIDEO && !strcmp(m.format_name, "mp4") && !strcmp(m.mime_type, "video/mp4"),
              "%s %s %s", mm_media_kind_name(m.kind), m.format_name, m.mime_type);
    MM_EXPECT(!strcmp(m.video_codec, "h264") && !strcmp(m.audio_codec, "aac"), "codecs %s %s", m.video_codec,
              m.audio_codec);
    MM_EXPECT(m.width == 96 && m.height == 64 && m.frames == 30 && fabs(m.fps - 24) < 1e-9, "%dx%d %lld frames %g fps",
              m.width, m.height, (long long)m.frames, m.fps);
    MM_EXPECT(fabs(m.duration_seconds - 1.25) < 0.05, "duration %g", m.duration_seconds);
    MM_EXPECT(m.has_audio && m.audio_rate == 32000 && m.audio_channels == 2, "audio %d %d %d", m.has_audio,
              m.audio_rate, m.audio_channels);

    const char *w = tmp_path("a.wav");
    made = make_wav(w, 44100, 1, 1.5) == 0;
    MM_REQUIRE(made, "writing %s", w);
    m = probe_ok(w, NULL, &ok, why, sizeof why);
    MM_EXPECT(ok && m.kind == MM_MEDIA_AUDIO && !strcmp(m.format_name, "wav") && m.audio_rate == 44100 &&
                  m.audio_channels == 1 && fabs(m.duration_seconds - 1.5) < 0.01,
              "wav: %s %s %s %d Hz %d ch %g s", why, mm_media_kind_name(m.kind), m.format_name, m.audio_rate,
              m.audio_channels, m.duration_seconds);
}

/* Things that are not media, or media we refuse, each with a clear reason. */
static void test_probe_refuses_wrong_types(void)
{
    const char *empty = tmp_path("empty.mp4");
    write_bytes(empty, "", 0);
    EXPECT_REFUSED(empty, NULL, "empty file");
    const char *text = tmp_path("notes.png");
    write_bytes(text, "just some text, not a picture\n", 30);
    EXPECT_REFUSED(text, NULL, "accepted: PNG, JPEG");
    /* A playlist would make the demuxer open other files (CVE-2016-1897/8). */
    const char *hls = tmp_path("evil.mp4");
    const char *m3u = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n";
    write_bytes(hls, m3u, strlen(m3u));
    EXPECT_REFUSED(hls, NULL, "hls format");
    const char *concat = tmp_path("evil.webm");
    const char *ffc = "ffconcat version 1.0\nfile /etc/passwd\n";
    write_bytes(concat, ffc, strlen(ffc));
    EXPECT_REFUSED(concat, NULL, "concat format");
    EXPECT_REFUSED("/dev/zero", NULL, "not a regular file");
    EXPECT_REFUSED(test_tmpdir(), NULL, "not a regular file");
    EXPECT_REFUSED(tmp_path("does-not-exist.png"), NULL, "No such file");
    /* The buffer entry point refuses the same way. */
    mm_media_info m;
    mm_error err = {{0}};
    MM_EXPECT(mm_media_probe_buffer((const uint8_t *)m3u, strlen(m3u), NULL, &m, &err) < 0 &&
                  strstr(err.msg, "hls"),
              "buffer playlist: %s", err.msg);
    MM_EXPECT(mm_media_probe_buffer((const uint8_t *)"", 0, NULL, &m, &err) < 0 && strstr(err.msg, "empty"),
              "empty buffer: %s", err.msg);
}

/* A 181-byte WAV the fuzzer found: its LIST chunk claims 1.6 GB, which the
 * WAV demuxer allocated and zeroed before reading a byte of it. Probing it
 * must not grow the process anywhere near that (media/ff_common.h,
 * MM_FF_MAX_ALLOC); measured in a child so that the peak is its own. */
static void test_probe_header_claiming_gigabytes(void)
{
    static const uint8_t wav[] = {
    0x52, 0x49, 0x46, 0x46, 0x86, 0x06, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20,
    0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x40, 0x1f, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00,
    0x02, 0x00, 0x10, 0x00, 0x4c, 0x49, 0x53, 0x54, 0x63, 0x6f, 0x64, 0x65, 0x49, 0x4e, 0x46, 0x4f,
    0x49, 0x53, 0x46, 0x54, 0x0a, 0x00, 0x00, 0x00, 0x4c, 0x61, 0x76, 0x63, 0x6f, 0x64, 0x65, 0x32,
    0x37, 0x2e, 0x31, 0x30, 0x30, 0x00, 0x64, 0x61, 0x74, 0x61, 0x40, 0x06, 0x00, 0x00, 0x00, 0x00,
    0x6b, 0x05, 0x32, 0x0a, 0xc5, 0x0d, 0xb6, 0x0f, 0xcd, 0x0f, 0x05, 0x0e, 0x94, 0x0a, 0xe4, 0x05,
    0x81, 0x00, 0x0f, 0xfb, 0x33, 0xf6, 0x7f, 0xf2, 0x74, 0xf0, 0x21, 0xf5, 0x09, 0xf0, 0x51, 0xf1,
    0x57, 0xf4, 0xbd, 0xf8, 0xfe, 0xfd, 0x7d, 0x03, 0x00, 0x00, 0x00, 0x00, 0x0f, 0xa4, 0x0c, 0x93,
    0x08, 0x7d, 0x03, 0xff, 0xfd, 0xbd, 0xf8, 0x57, 0xf4, 0x52, 0x00, 0x00, 0x00, 0x00, 0x00, 0xb6,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfa, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf1, 0x09, 0xf0, 0xa3, 0xf0, 0x0f,
    0xf3, 0x02, 0x00, 0x00, 0xf7,
    };
    pid_t pid = fork();
    MM_REQUIRE(pid >= 0, "fork failed");
    if (pid == 0) {
        mm_media_info m;
        mm_error err = {{0}};
        int rc = mm_media_probe_buffer(wav, sizeof wav, NULL, &m, &err);
        _exit(rc < 0 && !err.msg[0] ? 3 : 0); /* a refusal always explains itself */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    MM_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the probe child ended with status %d", status);
    MM_EXPECT(ru.ru_maxrss < 300 * 1024, "probing 181 bytes took the process to %ld MB", ru.ru_maxrss / 1024);
}

static void test_probe_refuses_truncated(void)
{
    size_t n;
    const char *full[] = {"q.png", "q.jpg", "v.mp4"};
    for (int i = 0; i < 3; i++) {
        uint8_t *d = read_bytes(tmp_path(full[i]), &n);
        MM_REQUIRE(d && n > 100, "test input %s missing (earlier case failed)", full[i]);
        char name[64];
        snprintf(name, sizeof name, "cut_%s", full[i]);
        const char *cut = tmp_path(name);
        write_bytes(cut, d, n * 2 / 3);
        free(d);
        mm_media_info m;
        mm_error err = {{0}};
        int rc = mm_media_probe(cut, NULL, &m, &err);
        MM_EXPECT(rc < 0, "%s cut to 2/3 was accepted", full[i]);
        MM_EXPECT(rc >= 0 || strstr(err.msg, "truncated") || strstr(err.msg, "does not decode"),
                  "%s: unclear message: %s", name, err.msg);
    }
}

static void test_probe_limits(void)
{
    mm_media_limits lim;
    mm_media_limits_defaults(&lim);
    const char *big = tmp_path("claims_9000.png");
    int made = make_png_claiming(big, 9000, 9000) == 0;
    MM_REQUIRE(made, "crafting a PNG header");
    EXPECT_REFUSED(big, NULL, "at most 8192 pixels per side");
    const char *bomb = tmp_path("claims_8000.png");
    made = make_png_claiming(bomb, 8000, 8000) == 0;
    MM_REQUIRE(made, "crafting a PNG header");
    EXPECT_REFUSED(bomb, NULL, "megapixels");
    const char *huge = tmp_path("claims_100000.png");
    made = make_png_claiming(huge, 100000, 100000) == 0;
    MM_REQUIRE(made, "crafting a PNG header");
    EXPECT_REFUSED(huge, NULL, "at most 8192 pixels per side");
    /* Bytes per pixel from the header, before any decoding: 16-bit RGBA
     * doubles 8-bit RGBA's cost, and the budget is 128 MiB decoded. */
    const char *deep = tmp_path("deep_4096x4100.png");
    made = make_png_claiming_depth(deep, 4096, 4100, 16, 6) == 0;
    MM_REQUIRE(made, "crafting a PNG header");
    EXPECT_REFUSED(deep, NULL, "a 4096x4100 picture at 16 bits per channel needs 128 MiB to decode: refused before decoding");
    const char *over = tmp_path("claims_8200x4200.png");
    made = make_png_claiming_depth(over, 8192, 4200, 8, 2) == 0;
    MM_REQUIRE(made, "crafting a PNG header");
    EXPECT_REFUSED(over, NULL, "the engine uses a picture at most at 33.6 megapixels");
    const char *wide = tmp_path("wide.png");
    made = make_image(wide, 2010, 10) == 0;
    MM_REQUIRE(made, "writing %s", wide);
    EXPECT_REFUSED(wide, NULL, "aspect ratio");

    mm_media_limits small = lim;
    small.max_side = 64;
    EXPECT_REFUSED(tmp_path("q.png"), &small, "at most 64 pixels per side");
    small = lim;
    small.max_bytes = 100;
    EXPECT_REFUSED(tmp_path("q.png"), &small, "MiB is too large");
    small = lim;
    small.max_seconds = 1.0;
    EXPECT_REFUSED(tmp_path("v.mp4"), &small, "at most 1 s");
    small = lim;
    small.max_video_pixels = 96 * 64 - 1;
    EXPECT_REFUSED(tmp_path("v.mp4"), &small, "megapixels");
}

/* An mp4 whose video track holds no samples. */
static void test_probe_video_without_frames(void)
{
    const char *p = tmp_path("noframes.mp4");
    AVFormatContext *oc = NULL;
    int ok = avformat_alloc_output_context2(&oc, NULL, "mp4", p) >= 0;
    MM_REQUIRE(ok, "mp4 muxer");
    AVStream *st = avformat_new_stream(oc, NULL);
    st->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    st->codecpar->codec_id = AV_CODEC_ID_H264;
    st->codecpar->width = 64;
    st->codecpar->height = 48;
    st->time_base = (AVRational){1, 24};
    ok = avio_open(&oc->pb, p, AVIO_FLAG_WRITE) >= 0 && avformat_write_header(oc, NULL) >= 0 &&
         av_write_trailer(oc) >= 0;
    avio_closep(&oc->pb);
    avformat_free_context(oc);
    MM_REQUIRE(ok, "writing %s", p);
    mm_media_info m;
    mm_error err = {{0}};
    int rc = mm_media_probe(p, NULL, &m, &err);
    MM_EXPECT(rc < 0 && (strstr(err.msg, "no video frames") || strstr(err.msg, "contains no frames")),
              "message: %s", err.msg);
}

/* A display matrix turning the video a quarter turn: the probe reports the
 * upright size and the poster is upright. */
static void test_probe_rotated_video_and_poster(void)
{
    const char *p = tmp_path("rot.mp4");
    int made = make_mp4(p, 96, 64, 6, 0) == 0;
    MM_REQUIRE(made, "writing %s", p);
    size_t n;
    uint8_t *d = read_bytes(p, &n);
    MM_REQUIRE(d != NULL, "reading back");
    /* tkhd v0: the matrix starts 48 bytes after the type; [a b u; c d v; x y w]
     * with a=d=0, b=1, c=-1 (16.16) turns the picture 90 degrees clockwise. */
    uint8_t *t = NULL;
    for (size_t i = 4; i + 90 < n; i++)
        if (!memcmp(d + i, "tkhd", 4)) {
            t = d + i + 4;
            break;
        }
    MM_REQUIRE(t != NULL && t[0] == 0, "no version-0 tkhd found");
    uint8_t *mx = t + 40;
    put_be32(mx + 0, 0);
    put_be32(mx + 4, 0x10000);
    put_be32(mx + 12, 0xffff0000u);
    put_be32(mx + 16, 0);
    const char *r = tmp_path("rot90.mp4");
    write_bytes(r, d, n);
    free(d);
    int ok;
    char why[1024];
    mm_media_info m = probe_ok(r, NULL, &ok, why, sizeof why);
    MM_REQUIRE(ok, "%s", why);
    MM_EXPECT(m.rotation == 90 && m.width == 64 && m.height == 96, "rotation %d, %dx%d", m.rotation, m.width,
              m.height);
    const char *poster = tmp_path("rot_poster.png");
    mm_error err = {{0}};
    int posted = mm_media_poster(r, poster, 0, &err) == 0;
    MM_REQUIRE(posted, "poster: %s", err.msg);
    decoded_media dm = decode_media(poster);
    MM_REQUIRE(dm.ok && dm.first_rgb, "decoding the poster: %s", dm.error);
    MM_EXPECT(dm.width == 64 && dm.height == 96, "poster %dx%d", dm.width, dm.height);
    /* Turned clockwise, the blue bottom-left quadrant is now top-left. */
    const uint8_t *px = dm.first_rgb + (10 * 64 + 10) * 3;
    MM_EXPECT(px[2] > 200 && px[0] < 60 && px[1] < 60, "top-left after turning is %d,%d,%d, expected blue", px[0],
              px[1], px[2]);
    decoded_media_free(&dm);
}

static void test_poster_formats_and_size(void)
{
    const char *v = tmp_path("v.mp4");
    const char *outs[] = {"poster.jpg", "poster.webp", "poster.png"};
    const char *codecs[] = {"mjpeg", "webp", "png"};
    for (int i = 0; i < 3; i++) {
        mm_error err = {{0}};
        const char *o = tmp_path(outs[i]);
        int rc = mm_media_poster(v, o, 48, &err);
        MM_EXPECT(rc == 0, "%s: %s", outs[i], err.msg);
        decoded_media dm = decode_media(o);
        MM_EXPECT(dm.ok && !strcmp(dm.video_codec, codecs[i]) && dm.width == 48 && dm.height == 32,
                  "%s: %s %dx%d", outs[i], dm.video_codec, dm.width, dm.height);
        decoded_media_free(&dm);
        MM_EXPECT(!file_exists(tmp_path("poster.jpg.part")), "part file left");
    }
    mm_error err = {{0}};
    const char *thumb = tmp_path("thumb.jpg");
    MM_EXPECT(mm_media_poster(tmp_path("q.png"), thumb, 60, &err) == 0, "image thumbnail: %s", err.msg);
    decoded_media dm = decode_media(thumb);
    MM_EXPECT(dm.ok && dm.width == 60 && dm.height == 40, "thumbnail %dx%d", dm.width, dm.height);
    decoded_media_free(&dm);
    MM_EXPECT(mm_media_poster(tmp_path("a.wav"), tmp_path("x.jpg"), 60, &err) < 0 && strstr(err.msg, "no picture"),
              "audio poster: %s", err.msg);
    MM_EXPECT(mm_media_poster(v, tmp_path("x.gif"), 60, &err) < 0 && strstr(err.msg, ".png, .jpg"),
              "unknown extension: %s", err.msg);
}

static void test_probe_h3_sample_videos(void)
{
    char missing[1024];
    const char *assets = h3_assets_dir(missing, sizeof missing);
    MM_REQUIRE(assets, "%s", missing);
    const char *names[] = {"fl2va.mp4", "i2va.mp4", "ref2va.mp4", "t2va.mp4"};
    const int frames[] = {192, 192, 124, 243};
    for (int i = 0; i < 4; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", assets, names[i]);
        int ok;
        char why[1024];
        mm_media_info m = probe_ok(p, NULL, &ok, why, sizeof why);
        MM_EXPECT(ok, "%s: %s", names[i], why);
        MM_EXPECT(m.kind == MM_MEDIA_VIDEO && m.width == 1344 && m.height == 768 && m.frames == frames[i] &&
                      fabs(m.fps - 24) < 1e-9,
                  "%s: %s %dx%d %lld frames %g fps", names[i], mm_media_kind_name(m.kind), m.width, m.height,
                  (long long)m.frames, m.fps);
        MM_EXPECT(m.has_audio && m.audio_rate == 32000 && m.audio_channels == 2 && !strcmp(m.audio_codec, "aac"),
                  "%s: audio %s %d Hz %d ch", names[i], m.audio_codec, m.audio_rate, m.audio_channels);
        MM_EXPECT(fabs(m.duration_seconds - frames[i] / 24.0) < 1.0 / 24 + 0.02, "%s: %g s", names[i],
                  m.duration_seconds);
    }
    char p[1100];
    snprintf(p, sizeof p, "%s/t2va.mp4", assets);
    const char *poster = tmp_path("t2va.jpg");
    mm_error err = {{0}};
    MM_EXPECT(mm_media_poster(p, poster, 480, &err) == 0, "poster: %s", err.msg);
    decoded_media dm = decode_media(poster);
    MM_EXPECT(dm.ok && dm.width == 480 && dm.height == 274, "poster %dx%d", dm.width, dm.height);
    decoded_media_free(&dm);
}

static void test_media_check_finds_the_codecs_we_use(void)
{
    mm_error err = {{0}};
    MM_EXPECT(mm_media_check(&err) == 0, "%s", err.msg);
}

int main(void)
{
    mm_media_set_verbose(0);
    av_log_set_level(AV_LOG_QUIET);
    MM_RUN(test_media_check_finds_the_codecs_we_use);
    MM_RUN(test_probe_images);
    MM_RUN(test_probe_video_and_audio);
    MM_RUN(test_probe_refuses_wrong_types);
    MM_RUN(test_probe_refuses_truncated);
    MM_RUN(test_probe_limits);
    MM_RUN(test_probe_header_claiming_gigabytes);
    MM_RUN(test_probe_video_without_frames);
    MM_RUN(test_probe_rotated_video_and_poster);
    MM_RUN(test_poster_formats_and_size);
    MM_RUN(test_probe_h3_sample_videos);
    if (!getenv("KEEP")) rm_tree(test_tmpdir());
    return mm_test_exit();
}
