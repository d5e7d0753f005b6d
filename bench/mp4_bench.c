/* mmh3-bench-mp4: what the H.264 writer costs at the clip's size, per x264
 * preset, on real frames.
 *
 *   mmh3-bench-mp4 --input CLIP.mp4|noise:WxH [--frames 124] [--presets medium,fast,faster]
 *                  [--crf 18] [--pace FPS] [--out DIR]
 *
 * The input's first --frames frames (the release's t2va.mp4 sample is
 * 1344x768) are decoded into memory once; then, per preset, they go through
 * mm_mp4_writer exactly as the pipeline's writer thread feeds it: one
 * mm_mp4_write_rgb per frame, then mm_mp4_writer_close (x264's flush, the
 * trailer, the faststart rewrite, the rename). With --pace the frames arrive
 * no faster than FPS, as the VAE decode delivers them (about 26 frames/s at
 * 1344x768 on an H200), so "close" is the tail a clip waits for after its
 * last decoded frame; without it, the encoder's own throughput.
 * Per preset one line:
 *   MP4 preset=P frames=N feed_s=… close_s=… total_s=… fps=… bytes=… psnr_db=…
 * psnr_db: the output decoded again (mm_video_read) against the input RGB.
 * noise:WxH instead of a file: uniformly random pixels, the content a
 * random-weight VAE decodes to, whose encode costs x264 far more than a real
 * clip's (the device's random-weight renders measure that encoder, not the one
 * real weights would meet).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "media/mp4_writer.h"
#include "media/video_reader.h"

typedef struct clip {
    uint8_t *rgb; /* frames × height × width × 3 */
    int frames, width, height;
    int capacity;
} clip;

static int keep_frame(void *user, const mm_video_frame *f, mm_error *err)
{
    clip *c = user;
    if (c->frames == c->capacity)
        return 1; /* enough */
    if (c->frames == 0) {
        c->width = f->width & ~1;
        c->height = f->height & ~1;
        c->rgb = malloc((size_t)c->capacity * c->width * c->height * 3);
        if (!c->rgb)
            return mm_fail(err, "out of memory for %d frames of %dx%d", c->capacity, c->width, c->height);
    }
    uint8_t *dst = c->rgb + (size_t)c->frames * c->width * c->height * 3;
    for (int y = 0; y < c->height; y++)
        memcpy(dst + (size_t)y * c->width * 3, f->rgb + (size_t)y * f->stride, (size_t)c->width * 3);
    c->frames++;
    return 0;
}

/* Uniform random bytes (xorshift64*: fixed seed, the same frames every run). */
static int noise_clip(clip *c, int width, int height)
{
    if (width < 16 || height < 16 || width > 4096 || height > 4096 || width % 2 || height % 2)
        return -1;
    c->width = width;
    c->height = height;
    c->frames = c->capacity;
    const size_t n = (size_t)c->frames * width * height * 3;
    c->rgb = malloc(n);
    if (!c->rgb)
        return -1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c->rgb[i] = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
    }
    return 0;
}

typedef struct psnr_acc {
    const clip *c;
    double sq;
    int64_t n;
    int frames;
} psnr_acc;

static int compare_frame(void *user, const mm_video_frame *f, mm_error *err)
{
    psnr_acc *a = user;
    const clip *c = a->c;
    if (f->index >= c->frames || f->width != c->width || f->height != c->height)
        return mm_fail(err, "decoded frame %d (%dx%d) does not match the input", f->index, f->width, f->height);
    const uint8_t *src = c->rgb + (size_t)f->index * c->width * c->height * 3;
    for (int y = 0; y < c->height; y++)
        for (int x = 0; x < c->width * 3; x++) {
            const double d = (double)f->rgb[(size_t)y * f->stride + x] - src[(size_t)y * c->width * 3 + x];
            a->sq += d * d;
        }
    a->n += (int64_t)c->width * c->height * 3;
    a->frames++;
    return 0;
}

static int encode_once(const clip *c, const char *preset, int crf, double pace, const char *path, mm_error *err)
{
    mm_mp4_options o;
    mm_mp4_options_defaults(&o, c->width, c->height);
    o.preset = preset;
    o.crf = crf;
    o.audio_channels = 0;
    mm_mp4_writer *w;
    const double t0 = mm_clock_now();
    if (mm_mp4_writer_open(&w, path, &o, err) != 0)
        return -1;
    for (int i = 0; i < c->frames; i++) {
        if (pace > 0)
            mm_clock_sleep(t0 + (i + 1) / pace - mm_clock_now());
        if (mm_mp4_write_rgb(w, c->rgb + (size_t)i * c->width * c->height * 3, c->width * 3, err) != 0) {
            mm_mp4_writer_abort(w);
            return -1;
        }
    }
    const double t1 = mm_clock_now();
    if (mm_mp4_writer_close(w, err) != 0)
        return -1;
    const double t2 = mm_clock_now();

    psnr_acc acc = {c, 0, 0, 0};
    mm_video_options vo = {.sampling = MM_FRAMES_ALL};
    if (mm_video_read(path, &vo, compare_frame, &acc, err) < 0)
        return -1;
    FILE *f = fopen(path, "rb");
    long bytes = -1;
    if (f) {
        fseek(f, 0, SEEK_END);
        bytes = ftell(f);
        fclose(f);
    }
    const double mse = acc.n ? acc.sq / (double)acc.n : 0;
    printf("MP4 preset=%s crf=%d pace=%g frames=%d decoded=%d feed_s=%.3f close_s=%.3f total_s=%.3f fps=%.1f "
           "bytes=%ld psnr_db=%.2f\n",
           preset, crf, pace, c->frames, acc.frames, t1 - t0, t2 - t1, t2 - t0, c->frames / (t2 - t0), bytes,
           mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : INFINITY);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    const char *input = NULL, *presets = "medium,fast,faster", *out_dir = "/tmp";
    int frames = 124, crf = 18;
    double pace = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--input") == 0 && v)
            input = argv[++i];
        else if (strcmp(a, "--frames") == 0 && v)
            frames = atoi(argv[++i]);
        else if (strcmp(a, "--presets") == 0 && v)
            presets = argv[++i];
        else if (strcmp(a, "--crf") == 0 && v)
            crf = atoi(argv[++i]);
        else if (strcmp(a, "--pace") == 0 && v)
            pace = atof(argv[++i]);
        else if (strcmp(a, "--out") == 0 && v)
            out_dir = argv[++i];
        else {
            fprintf(stderr, "usage: mmh3-bench-mp4 --input CLIP.mp4 [--frames N] [--presets P,P,...] [--crf N] "
                            "[--pace FPS] [--out DIR]\n");
            return 2;
        }
    }
    if (!input || frames < 1) {
        fprintf(stderr, "mmh3-bench-mp4: --input CLIP.mp4 is required (and --frames must be at least 1)\n");
        return 2;
    }
    mm_error err = {{0}};
    clip c = {.capacity = frames};
    mm_video_options vo = {.sampling = MM_FRAMES_ALL};
    int nw = 0, nh = 0;
    if (sscanf(input, "noise:%dx%d", &nw, &nh) == 2) {
        if (noise_clip(&c, nw, nh) != 0) {
            fprintf(stderr, "mmh3-bench-mp4: %s: want noise:WxH with even sizes from 16 to 4096\n", input);
            return 2;
        }
    } else if (mm_video_read(input, &vo, keep_frame, &c, &err) < 0 || c.frames == 0) {
        fprintf(stderr, "mmh3-bench-mp4: %s: %s\n", input, c.frames ? err.msg : "no frames");
        free(c.rgb);
        return 1;
    }
    printf("input %s: %d frames of %dx%d\n", input, c.frames, c.width, c.height);
    char list[256], path[512];
    snprintf(list, sizeof list, "%s", presets);
    int rc = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        snprintf(path, sizeof path, "%s/mmh3-bench-mp4-%s.mp4", out_dir, p);
        if (encode_once(&c, p, crf, pace, path, &err) != 0) {
            fprintf(stderr, "mmh3-bench-mp4: preset %s: %s\n", p, err.msg);
            rc = 1;
        }
        remove(path);
    }
    free(c.rgb);
    return rc;
}
