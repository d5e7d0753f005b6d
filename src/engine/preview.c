/* Live previews (preview.h): the projection's fit, the strip, the cache file. */
#include "engine/preview.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/clock.h"
#include "core/sha256.h"
#include "media/image.h"
#include "model/vae/vae.h"

/* ------------------------------------------------------------ smooth latents */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) / 9007199254740992.0; }

#define WAVES 4

void mm_preview_smooth_latents(uint64_t seed, int C, int T, int h, int w, float *out)
{
    uint64_t s = seed ^ 0x6d6d68337072ull;
    const int64_t plane = (int64_t)T * h * w;
    for (int c = 0; c < C; c++) {
        /* periods of 3 latents and more, so a wave spans several pixel blocks */
        double ft[WAVES], fy[WAVES], fx[WAVES], ph[WAVES];
        for (int k = 0; k < WAVES; k++) {
            ft[k] = 2.0 * M_PI * (uniform(&s) - 0.5) / 3.0;
            fy[k] = 2.0 * M_PI * (uniform(&s) - 0.5) / 3.0;
            fx[k] = 2.0 * M_PI * (uniform(&s) - 0.5) / 3.0;
            ph[k] = 2.0 * M_PI * uniform(&s);
        }
        double offset = 0.5 * (uniform(&s) - 0.5);
        float *o = out + c * plane;
        for (int t = 0; t < T; t++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    double v = offset;
                    for (int k = 0; k < WAVES; k++)
                        v += cos(ft[k] * t + fy[k] * y + fx[k] * x + ph[k]);
                    /* a sum of WAVES unit cosines has variance WAVES/2 */
                    o[((int64_t)t * h + y) * w + x] = (float)(v / sqrt(WAVES / 2.0));
                }
    }
}

/* ------------------------------------------------------------ decode + pool */

typedef struct pool_sink {
    float *rgb; /* [T][h][w][3] sums, then means */
    int T, h, w, patch, frames;
    int64_t got;
    int *count; /* frames pooled per latent frame */
    mm_ctx *ctx;
    const mm_video_vae_config *cfg;
    mm_tensor dev;  /* one frame [3, H, W], contiguous, on the VAE's device */
    float *host;    /* the same on the host */
} pool_sink;

/* The frame before rounding to 8 bits, in RGB 0..1 (unclamped): the fit
 * sees the decoder's own values, not their quantization and clipping. */
static int frame_pixels(pool_sink *s, const mm_tensor *pixels, mm_error *err)
{
    const int64_t H = (int64_t)s->h * s->patch, W = (int64_t)s->w * s->patch;
    if (!s->host) {
        s->host = malloc(sizeof(float) * (size_t)(3 * H * W));
        if (!s->host || mm_tensor_alloc(&s->dev, mm_ctx_device(s->ctx), MM_F32, 3, (int64_t[]){3, H, W}, err) != 0)
            return s->host ? -1 : mm_fail(err, "out of memory");
    }
    mm_tensor hv = mm_tensor_wrap(s->host, mm_cpu(), MM_F32, 3, (int64_t[]){3, H, W});
    mm_copy(s->ctx, &s->dev, pixels);
    mm_copy(s->ctx, &hv, &s->dev);
    if (mm_ctx_sync(s->ctx, err) != 0)
        return -1;
    for (int c = 0; c < 3; c++)
        for (int64_t i = 0; i < H * W; i++)
            s->host[c * H * W + i] = s->host[c * H * W + i] * s->cfg->pixel_std[c] + s->cfg->pixel_mean[c];
    return 0;
}

/* The latent frame a decoded frame belongs to: frames are shared out in
 * proportion (17n+5 frames over 5n+2 latents, about 3.4 each). */
static int latent_of_frame(int64_t f, int frames, int T)
{
    int k = (int)(f * T / frames);
    return k < T ? k : T - 1;
}

static int pool_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                      mm_error *err)
{
    (void)pixels;
    pool_sink *s = user;
    if (width != s->w * s->patch || height != s->h * s->patch || index >= s->frames)
        return mm_fail(err, "preview fit: the VAE decoded frame %lld at %dx%d, %dx%d expected", (long long)index,
                       width, height, s->w * s->patch, s->h * s->patch);
    (void)rgb;
    if (frame_pixels(s, pixels, err) != 0)
        return -1;
    int k = latent_of_frame(index, s->frames, s->T);
    const int64_t plane = (int64_t)width * height;
    const double inv = 1.0 / ((double)s->patch * s->patch);
    for (int y = 0; y < s->h; y++)
        for (int x = 0; x < s->w; x++) {
            double sum[3] = {0, 0, 0};
            for (int py = 0; py < s->patch; py++) {
                const int64_t at = (int64_t)(y * s->patch + py) * width + (int64_t)x * s->patch;
                for (int px = 0; px < s->patch; px++)
                    for (int ch = 0; ch < 3; ch++)
                        sum[ch] += s->host[ch * plane + at + px];
            }
            float *o = s->rgb + (((int64_t)k * s->h + y) * s->w + x) * 3;
            for (int ch = 0; ch < 3; ch++)
                o[ch] += (float)(sum[ch] * inv);
        }
    s->count[k]++;
    s->got = index + 1;
    return 0;
}

int mm_preview_decode_pooled(mm_video_vae *vv, mm_ctx *ctx, const float *latents, int T, int h, int w, float *rgb,
                             mm_error *err)
{
    const mm_video_vae_config *c = mm_video_vae_get_config(vv);
    pool_sink s = {.rgb = rgb, .T = T, .h = h, .w = w, .patch = c->patch_s,
                   .frames = (int)mm_video_vae_pixel_frames(c, T), .ctx = ctx, .cfg = c};
    s.count = calloc((size_t)T, sizeof(int));
    if (!s.count)
        return mm_fail(err, "out of memory");
    memset(rgb, 0, sizeof(float) * (size_t)T * h * w * 3);
    const int64_t shape[4] = {c->latent_channels, T, h, w};
    mm_tensor host = mm_tensor_wrap((void *)latents, mm_cpu(), MM_F32, 4, shape), dev = {0};
    int rc = mm_tensor_alloc(&dev, mm_ctx_device(ctx), MM_F32, 4, shape, err);
    if (rc == 0) {
        mm_copy(ctx, &dev, &host);
        rc = mm_video_vae_decode(vv, ctx, &dev, pool_frame, &s, err);
        if (rc == 0)
            rc = mm_ctx_sync(ctx, err);
    }
    mm_tensor_free(&dev);
    mm_tensor_free(&s.dev);
    free(s.host);
    if (rc == 0 && s.got != s.frames)
        rc = mm_fail(err, "preview fit: the VAE decoded %lld frames, %d expected", (long long)s.got, s.frames);
    for (int k = 0; rc == 0 && k < T; k++) {
        if (s.count[k] == 0) {
            rc = mm_fail(err, "preview fit: latent frame %d got no decoded frame", k);
            break;
        }
        float *o = rgb + (int64_t)k * h * w * 3;
        for (int64_t i = 0; i < (int64_t)h * w * 3; i++)
            o[i] /= (float)s.count[k];
    }
    free(s.count);
    return rc;
}

/* ------------------------------------------------------------------ the fit */

#define FIT_SAMPLES 3
#define FIT_SIDE 12 /* latent pixels per side: 192 px at the VAE's 16 */

/* Solves the n x n symmetric positive definite system a·x = b (a is
 * overwritten by its Cholesky factor) for 3 right-hand sides b[n][3]. */
static int cholesky_solve(double *a, double *b, int n)
{
    for (int j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (int k = 0; k < j; k++)
            d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0))
            return -1;
        d = sqrt(d);
        a[j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int k = 0; k < j; k++)
                v -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = v / d;
        }
    }
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++) { /* L y = b */
            double v = b[i * 3 + r];
            for (int k = 0; k < i; k++)
                v -= a[i * n + k] * b[k * 3 + r];
            b[i * 3 + r] = v / a[i * n + i];
        }
        for (int i = n - 1; i >= 0; i--) { /* Lᵀ x = y */
            double v = b[i * 3 + r];
            for (int k = i + 1; k < n; k++)
                v -= a[k * n + i] * b[k * 3 + r];
            b[i * 3 + r] = v / a[i * n + i];
        }
    }
    return 0;
}

/* Adds one sample's normal equations: features [C, T·h·w] plus a constant
 * 1, targets rgb [T·h·w][3]. */
static void accumulate(double *ata, double *atb, const float *lat, const float *rgb, int C, int64_t n)
{
    const int m = C + 1;
    double f[MM_PREVIEW_MAX_CHANNELS + 1];
    for (int64_t i = 0; i < n; i++) {
        for (int c = 0; c < C; c++)
            f[c] = lat[c * n + i];
        f[C] = 1.0;
        for (int a = 0; a < m; a++) {
            for (int b = 0; b <= a; b++)
                ata[a * m + b] += f[a] * f[b];
            for (int ch = 0; ch < 3; ch++)
                atb[a * 3 + ch] += f[a] * rgb[i * 3 + ch];
        }
    }
}

/* sums: squared error, then per channel the targets' sum and sum of
 * squares, then the count of pixels. */
static void score(const mm_preview_projection *p, const float *lat, const float *rgb, int T, int h, int w,
                  float *scratch, double sums[8])
{
    const int64_t n = (int64_t)T * h * w;
    mm_preview_project(p, lat, T, h, w, scratch);
    for (int64_t i = 0; i < n * 3; i++) {
        double e = scratch[i] - rgb[i];
        sums[0] += e * e;
        sums[1 + i % 3] += rgb[i];
        sums[4 + i % 3] += (double)rgb[i] * rgb[i];
    }
    sums[7] += (double)n;
}

static int solve_projection(double *ata, double *atb, int C, mm_preview_projection *out, mm_error *err)
{
    const int m = C + 1;
    double trace = 0;
    for (int a = 0; a < m; a++) {
        for (int b = a + 1; b < m; b++)
            ata[a * m + b] = ata[b * m + a];
        trace += ata[a * m + a];
    }
    /* a whisper of ridge keeps the system definite without biasing the fit */
    for (int a = 0; a < m; a++)
        ata[a * m + a] += 1e-9 * trace / m;
    if (cholesky_solve(ata, atb, m) != 0)
        return mm_fail(err, "preview fit: the decoded samples do not determine a projection");
    memset(out, 0, sizeof *out);
    out->channels = C;
    for (int ch = 0; ch < 3; ch++) {
        for (int c = 0; c < C; c++)
            out->weight[ch][c] = (float)atb[c * 3 + ch];
        out->bias[ch] = (float)atb[C * 3 + ch];
    }
    return 0;
}

int mm_preview_fit(mm_video_vae *vv, mm_ctx *ctx, uint64_t seed, mm_preview_projection *out,
                   mm_preview_fit_report *report, mm_error *err)
{
    const double t0 = mm_clock_now();
    const mm_video_vae_config *c = mm_video_vae_get_config(vv);
    const int C = c->latent_channels, T = (int)mm_video_vae_latent_frames(c, 22), h = FIT_SIDE, w = FIT_SIDE;
    if (C < 1 || C > MM_PREVIEW_MAX_CHANNELS)
        return mm_fail(err, "preview fit: %d latent channels (at most %d supported)", C, MM_PREVIEW_MAX_CHANNELS);
    const int64_t n = (int64_t)T * h * w;
    const int m = C + 1;
    float *lat = malloc(sizeof(float) * (size_t)(C * n * FIT_SAMPLES));
    float *rgb = malloc(sizeof(float) * (size_t)(n * 3 * FIT_SAMPLES));
    float *scratch = malloc(sizeof(float) * (size_t)(n * 3));
    double *ata = calloc((size_t)(m * m), sizeof(double)), *atb = calloc((size_t)(m * 3), sizeof(double));
    int rc = -1;
    if (!lat || !rgb || !scratch || !ata || !atb) {
        mm_fail(err, "out of memory");
        goto done;
    }
    for (int k = 0; k < FIT_SAMPLES; k++) {
        float *l = lat + (int64_t)k * C * n, *r = rgb + (int64_t)k * n * 3;
        mm_preview_smooth_latents(seed + (uint64_t)k, C, T, h, w, l);
        if (mm_preview_decode_pooled(vv, ctx, l, T, h, w, r, err) != 0)
            goto done;
        accumulate(ata, atb, l, r, C, n);
    }
    if (solve_projection(ata, atb, C, out, err) != 0)
        goto done;
    double sums[8] = {0};
    for (int k = 0; k < FIT_SAMPLES; k++)
        score(out, lat + (int64_t)k * C * n, rgb + (int64_t)k * n * 3, T, h, w, scratch, sums);
    if (report) {
        double var = 0;
        for (int ch = 0; ch < 3; ch++) {
            double mean = sums[1 + ch] / sums[7];
            var += fmax(0.0, sums[4 + ch] / sums[7] - mean * mean);
        }
        report->samples = n * FIT_SAMPLES;
        report->rmse = sqrt(sums[0] / (3 * sums[7]));
        report->target_std = sqrt(var / 3);
        report->seconds = mm_clock_now() - t0;
    }
    rc = 0;
done:
    free(lat);
    free(rgb);
    free(scratch);
    free(ata);
    free(atb);
    return rc;
}

void mm_preview_project(const mm_preview_projection *p, const float *latents, int T, int h, int w, float *rgb)
{
    const int64_t n = (int64_t)T * h * w;
    for (int64_t i = 0; i < n; i++) {
        float acc[3] = {p->bias[0], p->bias[1], p->bias[2]};
        for (int c = 0; c < p->channels; c++) {
            float v = latents[c * n + i];
            acc[0] += p->weight[0][c] * v;
            acc[1] += p->weight[1][c] * v;
            acc[2] += p->weight[2][c] * v;
        }
        rgb[i * 3 + 0] = acc[0];
        rgb[i * 3 + 1] = acc[1];
        rgb[i * 3 + 2] = acc[2];
    }
}

/* ---------------------------------------------------------------- the strip */

void mm_preview_image_free(mm_preview_image *img)
{
    if (img) {
        free(img->data);
        memset(img, 0, sizeof *img);
    }
}

void mm_preview_frame_size(int w, int h, int *frame_w, int *frame_h)
{
    const int s = MM_PREVIEW_SHORT_EDGE;
    int64_t fw = w <= h ? s : ((int64_t)w * s + h / 2) / h;
    int64_t fh = h <= w ? s : ((int64_t)h * s + w / 2) / w;
    *frame_w = (int)((fw + 1) & ~(int64_t)1);
    *frame_h = (int)((fh + 1) & ~(int64_t)1);
}

int mm_preview_strip_frames(int n) { return n < MM_PREVIEW_MAX_FRAMES ? n : MM_PREVIEW_MAX_FRAMES; }

int mm_preview_strip_pick(int i, int shown, int n)
{
    return shown <= 1 ? 0 : (int)(((int64_t)i * (n - 1) + (shown - 1) / 2) / (shown - 1));
}

int mm_preview_encode_strip(const uint8_t *const *frames, int n, int w, int h, mm_preview_image *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || w < 1 || h < 1)
        return mm_fail(err, "preview: %d frames of %dx%d", n, w, h);
    int fw, fh;
    mm_preview_frame_size(w, h, &fw, &fh);
    if (mm_image_encode_strip(frames, n, w, h, fw, fh, MM_PREVIEW_QUALITY, &out->data, &out->size, err) != 0)
        return mm_error_prefix(err, "preview");
    out->frames = n;
    out->frame_width = fw;
    out->frame_height = fh;
    return 0;
}

static uint8_t to_u8(float v)
{
    float s = v * 255.0f + 0.5f;
    return (uint8_t)(s <= 0 ? 0 : s >= 255 ? 255 : s);
}

int mm_preview_from_latents(const mm_preview_projection *p, const float *latents, int T, int h, int w,
                            mm_preview_image *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const int shown = mm_preview_strip_frames(T);
    const int64_t plane = (int64_t)h * w, n = (int64_t)T * plane;
    float *one = malloc(sizeof(float) * (size_t)plane * 3);
    float *lat = malloc(sizeof(float) * (size_t)(p->channels * plane));
    uint8_t *rgb = malloc((size_t)(plane * 3 * shown));
    const uint8_t *frames[MM_PREVIEW_MAX_FRAMES];
    int rc = -1;
    if (!one || !lat || !rgb) {
        mm_fail(err, "out of memory for a preview");
        goto done;
    }
    for (int i = 0; i < shown; i++) {
        const int t = mm_preview_strip_pick(i, shown, T);
        for (int c = 0; c < p->channels; c++) /* one latent frame, [C, 1, h, w] */
            memcpy(lat + c * plane, latents + c * n + t * plane, sizeof(float) * (size_t)plane);
        mm_preview_project(p, lat, 1, h, w, one);
        uint8_t *f = rgb + (int64_t)i * plane * 3;
        for (int64_t k = 0; k < plane * 3; k++)
            f[k] = to_u8(one[k]);
        frames[i] = f;
    }
    rc = mm_preview_encode_strip(frames, shown, w, h, out, err);
done:
    free(one);
    free(lat);
    free(rgb);
    return rc;
}

/* ------------------------------------------------------------- cache file */

#define KEY_SAMPLES 16
#define KEY_SAMPLE_BYTES 65536

static int hash_range(FILE *f, mm_sha256_ctx *s, long long at, size_t n, uint8_t *buf, const char *path,
                      mm_error *err)
{
    if (fseeko(f, (off_t)at, SEEK_SET) != 0 || fread(buf, 1, n, f) != n)
        return mm_fail_errno(err, "reading %s", path);
    mm_sha256_update(s, buf, n);
    return 0;
}

int mm_preview_vae_key(const char *vae_path, char hex[65], mm_error *err)
{
    FILE *f = fopen(vae_path, "rb");
    if (!f)
        return mm_fail_errno(err, "opening %s", vae_path);
    struct stat st;
    uint8_t head[8], *buf = NULL;
    int rc = -1;
    if (fstat(fileno(f), &st) != 0 || fread(head, 1, 8, f) != 8) {
        mm_fail_errno(err, "reading %s", vae_path);
        goto done;
    }
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--)
        header = header << 8 | head[i];
    const long long size = (long long)st.st_size;
    if (header > (uint64_t)size - 8) {
        mm_fail(err, "%s: not a safetensors file (header of %llu bytes in %lld)", vae_path,
                (unsigned long long)header, size);
        goto done;
    }
    buf = malloc(header > KEY_SAMPLE_BYTES ? header : KEY_SAMPLE_BYTES);
    if (!buf) {
        mm_fail(err, "out of memory");
        goto done;
    }
    mm_sha256_ctx s;
    mm_sha256_init(&s);
    mm_sha256_update(&s, head, 8);
    if (hash_range(f, &s, 8, header, buf, vae_path, err) != 0)
        goto done;
    const long long data = 8 + (long long)header, span = size - data;
    for (int i = 0; i < KEY_SAMPLES && span > 0; i++) {
        long long n = span < KEY_SAMPLE_BYTES ? span : KEY_SAMPLE_BYTES;
        long long at = data + (span - n) * i / (KEY_SAMPLES - 1);
        if (hash_range(f, &s, at, (size_t)n, buf, vae_path, err) != 0)
            goto done;
    }
    uint8_t d[32];
    mm_sha256_final(&s, d);
    mm_sha256_hex(d, hex);
    rc = 0;
done:
    free(buf);
    fclose(f);
    return rc;
}

#define CACHE_MAGIC "mmh3 preview projection 1"

int mm_preview_projection_load(const char *path, int channels, mm_preview_projection *p, mm_error *err)
{
    (void)err;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char magic[64] = "";
    int c = 0, ok = fgets(magic, sizeof magic, f) && strncmp(magic, CACHE_MAGIC "\n", sizeof CACHE_MAGIC) == 0 &&
                    fscanf(f, "channels %d", &c) == 1 && c == channels && c >= 1 && c <= MM_PREVIEW_MAX_CHANNELS;
    memset(p, 0, sizeof *p);
    p->channels = c;
    for (int ch = 0; ok && ch < 3; ch++) {
        for (int k = 0; ok && k < c; k++)
            ok = fscanf(f, "%f", &p->weight[ch][k]) == 1 && isfinite(p->weight[ch][k]);
        ok = ok && fscanf(f, "%f", &p->bias[ch]) == 1 && isfinite(p->bias[ch]);
    }
    fclose(f);
    return ok ? 1 : 0;
}

static int make_parent(const char *path, mm_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *s = dir + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return mm_fail_errno(err, "creating %s", dir);
        *s = '/';
    }
    return 0;
}

int mm_preview_projection_save(const char *path, const mm_preview_projection *p, mm_error *err)
{
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof text, CACHE_MAGIC "\nchannels %d\n", p->channels);
    for (int ch = 0; ch < 3 && n < sizeof text; ch++) {
        for (int k = 0; k < p->channels && n < sizeof text; k++)
            n += (size_t)snprintf(text + n, sizeof text - n, "%.9g ", p->weight[ch][k]);
        if (n < sizeof text)
            n += (size_t)snprintf(text + n, sizeof text - n, "%.9g\n", p->bias[ch]);
    }
    if (n >= sizeof text)
        return mm_fail(err, "preview projection: too many channels to store");
    if (make_parent(path, err) != 0)
        return -1;
    return mm_file_write_atomic(path, (const uint8_t *)text, n, err);
}
