#include "media/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ZERO_CROSSINGS 6 /* torchaudio lowpass_filter_width */
#define ROLLOFF 0.99

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t mm_resample_length(int64_t n, int orig_rate, int new_rate)
{
    if (orig_rate == new_rate)
        return n;
    int64_t g = gcd64(orig_rate, new_rate), o = orig_rate / g, m = new_rate / g;
    return (n * m + o - 1) / o;
}

int mm_resample_sinc(const float *x, int64_t n, int orig_rate, int new_rate, float *y, mm_error *err)
{
    if (orig_rate <= 0 || new_rate <= 0)
        return mm_fail(err, "resampling from %d Hz to %d Hz: rates must be positive", orig_rate, new_rate);
    if (orig_rate == new_rate) {
        memcpy(y, x, (size_t)n * sizeof *y);
        return 0;
    }
    int64_t g = gcd64(orig_rate, new_rate), o = orig_rate / g, m = new_rate / g;
    double base = (double)(o < m ? o : m) * ROLLOFF;
    int64_t width = (int64_t)ceil(ZERO_CROSSINGS * (double)o / base);
    int64_t taps = 2 * width + o;
    if (m * taps > (int64_t)1 << 26)
        return mm_fail(err, "resampling from %d Hz to %d Hz needs a %lld-tap filter bank: the rates are too far from "
                            "a simple ratio",
                       orig_rate, new_rate, (long long)(m * taps));
    float *kernel = malloc((size_t)(m * taps) * sizeof *kernel);
    if (!kernel)
        return mm_fail(err, "out of memory");
    /* Phase p, tap k: t = (-p/m + (k - width)/o) * base, clamped to the
     * window; Hann window cos^2(t*pi/12); sinc(pi*t); gain base/o. */
    for (int64_t p = 0; p < m; p++)
        for (int64_t k = 0; k < taps; k++) {
            double t = (-(double)p / (double)m + (double)(k - width) / (double)o) * base;
            if (t < -ZERO_CROSSINGS)
                t = -ZERO_CROSSINGS;
            if (t > ZERO_CROSSINGS)
                t = ZERO_CROSSINGS;
            double w = cos(t * M_PI / ZERO_CROSSINGS / 2);
            double tp = t * M_PI;
            double s = tp == 0 ? 1.0 : sin(tp) / tp;
            kernel[p * taps + k] = (float)(s * w * w * base / (double)o);
        }
    /* Output j*m + p reads the input zero-padded by `width` on the left
     * (and enough zeros on the right) from j*o on. */
    int64_t out_n = mm_resample_length(n, orig_rate, new_rate);
    for (int64_t i = 0; i < out_n; i++) {
        int64_t j = i / m, p = i % m;
        int64_t first = j * o - width; /* input index of tap 0 */
        const float *kp = kernel + p * taps;
        int64_t k0 = first < 0 ? -first : 0;
        int64_t k1 = n - first < taps ? n - first : taps;
        double acc = 0;
        for (int64_t k = k0; k < k1; k++)
            acc += (double)x[first + k] * kp[k];
        y[i] = (float)acc;
    }
    free(kernel);
    return 0;
}
