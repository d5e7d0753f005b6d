#include "model/text/image_preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mm_vision_pixels_free(mm_vision_pixels *p)
{
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* Python's round(): half to even (rint in the default rounding mode). */
static int64_t py_round(double x) { return (int64_t)rint(x); }

static int check_aspect(int64_t h, int64_t w, mm_error *err)
{
    if (h <= 0 || w <= 0)
        return mm_fail(err, "image size %lldx%lld: both sides must be positive", (long long)w, (long long)h);
    double a = (double)(h > w ? h : w) / (double)(h > w ? w : h);
    if (a > 200)
        return mm_fail(err, "image size %lldx%lld: aspect ratio %.1f exceeds 200", (long long)w, (long long)h, a);
    return 0;
}

static void bound_pixels(int64_t h, int64_t w, double count, int factor, int64_t min_pixels, int64_t max_pixels,
                         int64_t area, int64_t *hb, int64_t *wb)
{
    /* count = frames (videos) or 1 (images); area = t_bar·h_bar·w_bar. */
    if (area > max_pixels) {
        double beta = sqrt(count * (double)h * (double)w / (double)max_pixels);
        int64_t fh = (int64_t)floor((double)h / beta / factor) * factor;
        int64_t fw = (int64_t)floor((double)w / beta / factor) * factor;
        *hb = fh > factor ? fh : factor;
        *wb = fw > factor ? fw : factor;
    } else if (area < min_pixels) {
        double beta = sqrt((double)min_pixels / (count * (double)h * (double)w));
        *hb = (int64_t)ceil((double)h * beta / factor) * factor;
        *wb = (int64_t)ceil((double)w * beta / factor) * factor;
    }
}

int mm_qwen3vl_smart_resize(int64_t h, int64_t w, int factor, int64_t min_pixels, int64_t max_pixels, int64_t *out_h,
                            int64_t *out_w, mm_error *err)
{
    if (check_aspect(h, w, err) < 0)
        return -1;
    int64_t hb = py_round((double)h / factor) * factor;
    int64_t wb = py_round((double)w / factor) * factor;
    bound_pixels(h, w, 1.0, factor, min_pixels, max_pixels, hb * wb, &hb, &wb);
    *out_h = hb;
    *out_w = wb;
    return 0;
}

int mm_qwen3vl_smart_resize_video(int64_t n_frames, int64_t h, int64_t w, int temporal_factor, int factor,
                                  int64_t min_pixels, int64_t max_pixels, int64_t *out_h, int64_t *out_w,
                                  mm_error *err)
{
    if (n_frames < temporal_factor)
        return mm_fail(err, "video: %lld frames, at least %d (one temporal patch) are required", (long long)n_frames,
                       temporal_factor);
    /* Frames smaller than one factor are first scaled up to it (truncating). */
    if (h < factor || w < factor) {
        if (h <= 0 || w <= 0)
            return mm_fail(err, "video frame size %lldx%lld: both sides must be positive", (long long)w,
                           (long long)h);
        double s = fmax((double)factor / (double)h, (double)factor / (double)w);
        h = (int64_t)((double)h * s);
        w = (int64_t)((double)w * s);
    }
    if (check_aspect(h, w, err) < 0)
        return -1;
    int64_t hb = py_round((double)h / factor) * factor;
    int64_t wb = py_round((double)w / factor) * factor;
    int64_t tb = py_round((double)n_frames / temporal_factor) * temporal_factor;
    bound_pixels(h, w, (double)n_frames, factor, min_pixels, max_pixels, tb * hb * wb, &hb, &wb);
    *out_h = hb;
    *out_w = wb;
    return 0;
}

/* ------------------------------------------------------------------ resize */

/* Bicubic with a = -0.5: the antialias filter of Pillow and of PyTorch's
 * _upsample_bicubic2d_aa (the non-antialiased PyTorch kernel uses -0.75). */
static double bicubic(double x)
{
    const double a = -0.5;
    if (x < 0)
        x = -x;
    if (x < 1)
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
}

typedef struct coeffs {
    int ksize;
    int precision;        /* fixed-point fraction bits of k */
    int64_t *xmin, *xlen; /* per output sample */
    int32_t *k;           /* out × ksize fixed-point weights */
} coeffs;

static void coeffs_free(coeffs *c)
{
    free(c->xmin);
    free(c->xlen);
    free(c->k);
}

/* Weights of every output sample along one axis, as torchvision's uint8
 * antialias path (ATen's AVX resampler) computes them: the filter support
 * widened by the downscale factor, weights in double normalised to sum 1,
 * then int16 fixed point with the most fraction bits (< 22) that keep the
 * largest weight of the axis below 2^15. The reference processor ran this
 * path; Pillow's fixed 22 bits differ by one level on ~1% of pixels. */
static int coeffs_make(coeffs *c, int64_t in, int64_t out, mm_error *err)
{
    double scale = (double)in / (double)out;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->xmin = malloc(sizeof(int64_t) * (size_t)out);
    c->xlen = malloc(sizeof(int64_t) * (size_t)out);
    c->k = calloc((size_t)out * (size_t)c->ksize, sizeof(int32_t));
    double *w = calloc((size_t)out * (size_t)c->ksize, sizeof(double));
    if (!c->xmin || !c->xlen || !c->k || !w) {
        free(w);
        coeffs_free(c);
        return mm_fail(err, "resize: out of memory");
    }
    double w_max = 0;
    for (int64_t xx = 0; xx < out; xx++) {
        double center = ((double)xx + 0.5) * scale;
        double ss = 1.0 / filterscale, ww = 0;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in)
            xmax = in;
        xmax -= xmin;
        double *wk = w + xx * c->ksize;
        for (int64_t x = 0; x < xmax; x++) {
            wk[x] = bicubic(((double)(x + xmin) - center + 0.5) * ss);
            ww += wk[x];
        }
        if (ww != 0.0)
            for (int64_t x = 0; x < xmax; x++) {
                wk[x] /= ww;
                if (wk[x] > w_max)
                    w_max = wk[x];
            }
        c->xmin[xx] = xmin;
        c->xlen[xx] = xmax;
    }
    int p = 0;
    for (; p < 22; p++)
        if ((int64_t)(0.5 + w_max * (double)(1 << (p + 1))) >= (1 << 15))
            break;
    c->precision = p;
    for (int64_t i = 0; i < out * c->ksize; i++) {
        double v = w[i] * (double)(1 << p);
        c->k[i] = (int16_t)(v < 0 ? -0.5 + v : 0.5 + v);
    }
    free(w);
    return 0;
}

static inline uint8_t clip8(int64_t v, int precision)
{
    v >>= precision;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Resamples along one axis: `in` elements spaced `in_step` apart, `lines`
 * of them spaced `line_step`, channels interleaved. */
static void resample_axis(const uint8_t *src, uint8_t *dst, const coeffs *c, int64_t out, int64_t lines,
                          int64_t src_line, int64_t src_step, int64_t dst_line, int64_t dst_step, int channels)
{
    const int64_t half = c->precision > 0 ? (int64_t)1 << (c->precision - 1) : 0;
    for (int64_t l = 0; l < lines; l++) {
        for (int64_t xx = 0; xx < out; xx++) {
            const int32_t *k = c->k + xx * c->ksize;
            for (int ch = 0; ch < channels; ch++) {
                int64_t acc = half;
                const uint8_t *p = src + l * src_line + c->xmin[xx] * src_step + ch;
                for (int64_t x = 0; x < c->xlen[xx]; x++)
                    acc += (int64_t)p[x * src_step] * k[x];
                dst[l * dst_line + xx * dst_step + ch] = clip8(acc, c->precision);
            }
        }
    }
}

int mm_resize_bicubic_u8(const uint8_t *src, int64_t h, int64_t w, int channels, uint8_t *dst, int64_t out_h,
                         int64_t out_w, mm_error *err)
{
    if (h <= 0 || w <= 0 || out_h <= 0 || out_w <= 0 || channels <= 0)
        return mm_fail(err, "resize: %lldx%lld → %lldx%lld: sizes must be positive", (long long)w, (long long)h,
                       (long long)out_w, (long long)out_h);
    const int64_t C = channels;
    if (h == out_h && w == out_w) {
        memcpy(dst, src, (size_t)(h * w * C));
        return 0;
    }
    uint8_t *mid = NULL;
    const uint8_t *vin = src;
    if (w != out_w) {
        coeffs cx;
        if (coeffs_make(&cx, w, out_w, err) < 0)
            return -1;
        uint8_t *target = h == out_h ? dst : (mid = malloc((size_t)(h * out_w * C)));
        if (!target) {
            coeffs_free(&cx);
            return mm_fail(err, "resize: out of memory");
        }
        resample_axis(src, target, &cx, out_w, h, w * C, C, out_w * C, C, channels);
        coeffs_free(&cx);
        vin = target;
    }
    if (h != out_h) {
        coeffs cy;
        if (coeffs_make(&cy, h, out_h, err) < 0) {
            free(mid);
            return -1;
        }
        /* Columns as lines: element step one row, line step one pixel. */
        resample_axis(vin, dst, &cy, out_h, out_w, C, out_w * C, C, out_w * C, channels);
        coeffs_free(&cy);
    }
    free(mid);
    return 0;
}

/* ---------------------------------------------------------------- patchify */

int mm_qwen3vl_patchify(const mm_qwen3vl_processor_config *pc, const uint8_t *frames, int64_t n_frames, int64_t h,
                        int64_t w, mm_vision_pixels *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const int64_t P = pc->patch, M = pc->merge, TP = pc->temporal_patch, C = 3;
    if (n_frames <= 0)
        return mm_fail(err, "patchify: no frames");
    if (h % (P * M) || w % (P * M))
        return mm_fail(err, "patchify: frame %lldx%lld is not a multiple of %lld", (long long)w, (long long)h,
                       (long long)(P * M));
    const int64_t gt = (n_frames + TP - 1) / TP, gh = h / P, gw = w / P;
    const int64_t dim = C * TP * P * P;
    out->data = malloc(sizeof(float) * (size_t)(gt * gh * gw * dim));
    if (!out->data)
        return mm_fail(err, "patchify: out of memory for %lld patches", (long long)(gt * gh * gw));
    /* The processors fuse rescale and normalize: (x − 255·mean) / (255·std) in fp32. */
    float lut[3][256];
    for (int c = 0; c < 3; c++) {
        float m = pc->mean[c] * 255.0f, s = pc->std[c] * 255.0f;
        for (int v = 0; v < 256; v++)
            lut[c][v] = ((float)v - m) / s;
    }
    float *o = out->data;
    for (int64_t t = 0; t < gt; t++)
        for (int64_t wr = 0; wr < gh / M; wr++)
            for (int64_t wc = 0; wc < gw / M; wc++)
                for (int64_t ir = 0; ir < M; ir++)
                    for (int64_t ic = 0; ic < M; ic++) {
                        const int64_t py = (wr * M + ir) * P, px = (wc * M + ic) * P;
                        for (int64_t c = 0; c < C; c++)
                            for (int64_t tt = 0; tt < TP; tt++) {
                                int64_t f = t * TP + tt;
                                if (f >= n_frames)
                                    f = n_frames - 1; /* pad by repeating the last frame */
                                const uint8_t *fr = frames + f * h * w * C;
                                for (int64_t y = 0; y < P; y++) {
                                    const uint8_t *row = fr + ((py + y) * w + px) * C + c;
                                    for (int64_t x = 0; x < P; x++)
                                        *o++ = lut[c][row[x * C]];
                                }
                            }
                    }
    out->n_patches = gt * gh * gw;
    out->patch_dim = dim;
    out->grid[0] = gt;
    out->grid[1] = gh;
    out->grid[2] = gw;
    return 0;
}

static int resize_frames(const uint8_t *frames, int64_t n, int64_t h, int64_t w, int64_t oh, int64_t ow,
                         uint8_t **out, mm_error *err)
{
    *out = NULL;
    if (oh == h && ow == w)
        return 0;
    uint8_t *buf = malloc((size_t)(n * oh * ow * 3));
    if (!buf)
        return mm_fail(err, "resize: out of memory");
    for (int64_t f = 0; f < n; f++)
        if (mm_resize_bicubic_u8(frames + f * h * w * 3, h, w, 3, buf + f * oh * ow * 3, oh, ow, err) < 0) {
            free(buf);
            return -1;
        }
    *out = buf;
    return 0;
}

int mm_qwen3vl_preprocess_image(const mm_qwen3vl_processor_config *pc, const uint8_t *rgb, int64_t h, int64_t w,
                                mm_vision_pixels *out, mm_error *err)
{
    int64_t oh, ow;
    if (mm_qwen3vl_smart_resize(h, w, pc->patch * pc->merge, pc->min_pixels, pc->max_pixels, &oh, &ow, err) < 0)
        return mm_error_prefix(err, "image processor");
    uint8_t *resized;
    if (resize_frames(rgb, 1, h, w, oh, ow, &resized, err) < 0)
        return mm_error_prefix(err, "image processor");
    int rc = mm_qwen3vl_patchify(pc, resized ? resized : rgb, 1, oh, ow, out, err);
    free(resized);
    return rc;
}

int mm_qwen3vl_preprocess_video(const mm_qwen3vl_processor_config *pc, const uint8_t *frames, int64_t n_frames,
                                int64_t h, int64_t w, mm_vision_pixels *out, mm_error *err)
{
    int64_t oh, ow;
    if (mm_qwen3vl_smart_resize_video(n_frames, h, w, pc->temporal_patch, pc->patch * pc->merge, pc->min_pixels,
                                      pc->max_pixels, &oh, &ow, err) < 0)
        return mm_error_prefix(err, "video processor");
    uint8_t *resized;
    if (resize_frames(frames, n_frames, h, w, oh, ow, &resized, err) < 0)
        return mm_error_prefix(err, "video processor");
    int rc = mm_qwen3vl_patchify(pc, resized ? resized : frames, n_frames, oh, ow, out, err);
    free(resized);
    return rc;
}

/* ---------------------------------------------------------------- sampling */

static int64_t sample_index(int64_t k, double fps) { return py_round((double)k * fps / 2.0); }

int64_t mm_qwen3vl_sample_count(int64_t n_frames, double fps)
{
    int64_t n = 0, last = -1;
    for (int64_t k = 0;; k++) {
        int64_t idx = sample_index(k, fps);
        if (idx >= n_frames)
            break;
        if (idx != last)
            n++, last = idx;
    }
    return n;
}

int mm_qwen3vl_sample_2fps(int64_t n_frames, double fps, int64_t *indices, double *times, int64_t *n_out,
                           mm_error *err)
{
    if (!(fps > 0) || n_frames <= 0)
        return mm_fail(err, "video sampling: %lld frames at %g fps; a positive count and rate are required",
                       (long long)n_frames, fps);
    int64_t n = 0, last = -1;
    for (int64_t k = 0;; k++) {
        int64_t idx = sample_index(k, fps);
        if (idx >= n_frames)
            break;
        if (idx == last)
            continue;
        indices[n] = idx;
        times[n] = (double)idx / fps;
        n++, last = idx;
    }
    if (n < 2)
        return mm_fail(err, "video sampling: %lld frames at %g fps give %lld frame at 2 fps; at least 2 are required "
                            "(%lld frames or more)",
                       (long long)n_frames, fps, (long long)n, (long long)(sample_index(1, fps) + 1));
    *n_out = n;
    return 0;
}
