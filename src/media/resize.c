#include "media/resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LANCZOS_LOBES 3.0
#define FIXED_BITS 22 /* 32 bits - 8 for the value - 2 for overshoot */

static double sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

/* Pillow's window is half-open: [-3, 3). */
static double lanczos(double x) { return -LANCZOS_LOBES <= x && x < LANCZOS_LOBES ? sinc(x) * sinc(x / 3) : 0.0; }

/* The weights of one axis: output i reads `count[i]` inputs from
 * `first[i]` with fixed-point weights w[i * taps ...]. */
typedef struct axis {
    int taps;
    int *first, *count;
    int32_t *w;
} axis;

/* Leaves *a empty: axis_plan frees on failure and its caller frees again. */
static void axis_free(axis *a)
{
    free(a->first);
    free(a->count);
    free(a->w);
    a->first = a->count = NULL;
    a->w = NULL;
}

static int axis_plan(axis *a, int in_size, int out_size, mm_error *err)
{
    memset(a, 0, sizeof *a);
    double scale = (double)in_size / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = LANCZOS_LOBES * filterscale;
    a->taps = (int)ceil(support) * 2 + 1;
    a->first = malloc((size_t)out_size * sizeof *a->first);
    a->count = malloc((size_t)out_size * sizeof *a->count);
    a->w = malloc((size_t)out_size * (size_t)a->taps * sizeof *a->w);
    double *k = malloc((size_t)a->taps * sizeof *k);
    if (!a->first || !a->count || !a->w || !k) {
        free(k);
        axis_free(a);
        return mm_fail(err, "out of memory (resize to %d)", out_size);
    }
    for (int i = 0; i < out_size; i++) {
        double center = (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5); /* C truncation, as Pillow rounds */
        int hi = (int)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > in_size)
            hi = in_size;
        int n = hi - lo;
        double sum = 0, inv = 1.0 / filterscale; /* multiplied, as Pillow does: same rounding */
        for (int j = 0; j < n; j++) {
            k[j] = lanczos((j + lo - center + 0.5) * inv);
            sum += k[j];
        }
        int32_t *w = a->w + (size_t)i * a->taps;
        for (int j = 0; j < a->taps; j++) {
            double v = j < n ? (sum != 0.0 ? k[j] / sum : k[j]) : 0.0;
            w[j] = (int32_t)(v < 0 ? -0.5 + v * (1 << FIXED_BITS) : 0.5 + v * (1 << FIXED_BITS));
        }
        a->first[i] = lo;
        a->count[i] = n;
    }
    free(k);
    return 0;
}

static uint8_t clip8(int64_t acc)
{
    int64_t v = acc >> FIXED_BITS; /* arithmetic: floors negatives, as Pillow's table index */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int mm_resize_lanczos_u8(const uint8_t *src, int h, int w, int channels, uint8_t *dst, int out_h, int out_w,
                         mm_error *err)
{
    if (h <= 0 || w <= 0 || out_h <= 0 || out_w <= 0 || channels <= 0 || channels > 4)
        return mm_fail(err, "resize %dx%d (%d channels) to %dx%d: sizes must be positive, 1..4 channels", w, h,
                       channels, out_w, out_h);
    if (out_h == h && out_w == w) {
        memcpy(dst, src, (size_t)h * w * channels);
        return 0;
    }
    axis ax = {0}, ay;
    if (axis_plan(&ay, h, out_h, err) < 0)
        return -1;
    int need_x = out_w != w, need_y = out_h != h;
    /* Rows the vertical pass will read. */
    int row0 = ay.first[0], row1 = ay.first[out_h - 1] + ay.count[out_h - 1];
    const uint8_t *rows = src;
    int rows_w = w;
    uint8_t *tmp = NULL;
    int rc = -1;
    if (need_x) {
        if (axis_plan(&ax, w, out_w, err) < 0)
            goto done;
        int nrows = need_y ? row1 - row0 : h;
        int from = need_y ? row0 : 0;
        uint8_t *out = need_y ? (tmp = malloc((size_t)nrows * out_w * channels)) : dst;
        if (!out) {
            mm_fail(err, "out of memory (resize to %dx%d)", out_w, out_h);
            goto done;
        }
        for (int y = 0; y < nrows; y++) {
            const uint8_t *in = src + (size_t)(y + from) * w * channels;
            uint8_t *o = out + (size_t)y * out_w * channels;
            for (int x = 0; x < out_w; x++) {
                const int32_t *k = ax.w + (size_t)x * ax.taps;
                const uint8_t *p = in + (size_t)ax.first[x] * channels;
                for (int c = 0; c < channels; c++) {
                    int64_t acc = 1 << (FIXED_BITS - 1);
                    for (int j = 0; j < ax.count[x]; j++)
                        acc += (int64_t)p[(size_t)j * channels + c] * k[j];
                    o[(size_t)x * channels + c] = clip8(acc);
                }
            }
        }
        rows = tmp;
        rows_w = out_w;
        /* the vertical pass indexes the cut rows */
        for (int y = 0; y < out_h; y++)
            ay.first[y] -= row0;
    }
    if (need_y) {
        for (int y = 0; y < out_h; y++) {
            const int32_t *k = ay.w + (size_t)y * ay.taps;
            uint8_t *o = dst + (size_t)y * rows_w * channels;
            for (int x = 0; x < rows_w * channels; x++) {
                int64_t acc = 1 << (FIXED_BITS - 1);
                const uint8_t *p = rows + (size_t)ay.first[y] * rows_w * channels + x;
                for (int j = 0; j < ay.count[y]; j++)
                    acc += (int64_t)p[(size_t)j * rows_w * channels] * k[j];
                o[x] = clip8(acc);
            }
        }
    }
    rc = 0;
done:
    free(tmp);
    axis_free(&ax);
    axis_free(&ay);
    return rc;
}

/* Python's round(): half to even. */
static int64_t py_round(double x) { return (int64_t)nearbyint(x); }

int mm_resize_cover_lanczos_u8(const uint8_t *src, int h, int w, int channels, uint8_t *dst, int out_h, int out_w,
                               mm_error *err)
{
    if (h <= 0 || w <= 0 || out_h <= 0 || out_w <= 0)
        return mm_fail(err, "cover resize %dx%d to %dx%d: sizes must be positive", w, h, out_w, out_h);
    double sx = (double)out_w / w, sy = (double)out_h / h, s = sx > sy ? sx : sy;
    int64_t rw = py_round(w * s), rh = py_round(h * s);
    if (rw < out_w)
        rw = out_w;
    if (rh < out_h)
        rh = out_h;
    if (rw > 65536 || rh > 65536)
        return mm_fail(err, "cover resize %dx%d to %dx%d: the intermediate %lldx%lld is too large", w, h, out_w, out_h,
                       (long long)rw, (long long)rh);
    uint8_t *big = malloc((size_t)rw * rh * channels);
    if (!big)
        return mm_fail(err, "out of memory (cover resize)");
    if (mm_resize_lanczos_u8(src, h, w, channels, big, (int)rh, (int)rw, err) < 0) {
        free(big);
        return -1;
    }
    int64_t left = (rw - out_w) / 2, top = (rh - out_h) / 2;
    for (int y = 0; y < out_h; y++)
        memcpy(dst + (size_t)y * out_w * channels, big + ((size_t)(y + top) * rw + left) * channels,
               (size_t)out_w * channels);
    free(big);
    return 0;
}
