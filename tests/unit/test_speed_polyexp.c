/* The fa3 kernel's polynomial exp2 (kernels/fa3_polyexp.h, MMH3_FA3_POLYEXP)
 * on the CPU: the same header, the same fp32 coefficients and operations
 * (fmaf, float adds, the integer exponent add), against exp2 in double and
 * exp2f. The kernel runs this code on the FMA pipes in place of ex2.approx
 * for a share of the softmax's exponentials, so it must be at least as
 * accurate where the softmax uses it: x ≤ 8 (scores minus the row max, plus
 * fast mode's exponent offset of 8), down to where fp32 flushes (ftz).
 *
 * Bound: relative error ≤ 2^-22 (≈ 2 ulp; ex2.approx.f32's class) for
 * −126 < x ≤ 9; exactly +0 for x < −126 (−inf and NaN included), as
 * ex2.approx.ftz gives for results below 2^-126. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/fa3_polyexp.h"
#include "test.h"

static const double kBound = 0x1p-22;

typedef struct sweep {
    double max_rel, max_rel_vs_exp2f, worst_x;
    long n, flushed_wrong, below_checked;
} sweep;

static void one(sweep *s, float x)
{
    const float p = mmk_exp2_poly(x);
    s->n++;
    if (x < -126.f) {
        s->below_checked++;
        if (!(p == 0.f && !signbit(p)))
            s->flushed_wrong++;
        return;
    }
    if (x == -126.f) /* the boundary: 2^-126 or its flush to 0 are both ftz results */
        return;
    const double t = exp2((double)x), rel = fabs((double)p - t) / t;
    const double rel_f = fabs((double)p - (double)exp2f(x)) / t;
    if (!(rel <= s->max_rel)) {
        s->max_rel = rel;
        s->worst_x = x;
    }
    if (rel_f > s->max_rel_vs_exp2f)
        s->max_rel_vs_exp2f = rel_f;
}

/* A fine grid over [−150, 9] (2^-13 apart: ~1.3M points), every float in
 * [−1, 1] above 2^-20 in magnitude at a stride, the points around each
 * integer and half-integer (where the split changes j), and pseudo-random
 * floats. */
static void test_polyexp_vs_exp2(void)
{
    sweep s = {0, 0, 0, 0, 0, 0};
    for (long i = 0; i <= 159L * 8192; i++)
        one(&s, (float)(-150.0 + (double)i / 8192.0));
    for (float x = 0x1p-20f; x <= 1.f; x = nextafterf(x, 2.f) + x * 0x1p-12f)
        one(&s, x), one(&s, -x);
    for (int k = -300; k <= 18; k++) {
        float c = 0.5f * (float)k, lo = c, hi = c;
        one(&s, c);
        for (int d = 0; d < 4; d++) {
            lo = nextafterf(lo, -INFINITY);
            hi = nextafterf(hi, INFINITY);
            one(&s, lo), one(&s, hi);
        }
    }
    uint64_t r = 0x243f6a8885a308d3ull;
    for (int i = 0; i < 1000000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        one(&s, -150.f + 159.f * (float)((r >> 40) * 0x1p-24));
    }
    printf("  %ld points in [-150, 9]: max rel error %.3g (2^%.2f) at x = %.9g (bound 2^-22 = %.3g); "
           "vs exp2f %.3g; %ld below -126 all +0: %s\n",
           s.n, s.max_rel, log2(s.max_rel), s.worst_x, kBound, s.max_rel_vs_exp2f, s.below_checked,
           s.flushed_wrong ? "NO" : "yes");
    MM_EXPECT(s.max_rel <= kBound, "max rel error %.4g at x = %.9g > 2^-22", s.max_rel, s.worst_x);
    MM_EXPECT(s.max_rel > 0, "no error at all: the comparison is not running");
    MM_EXPECT(s.flushed_wrong == 0, "%ld of %ld results below 2^-126 not flushed to +0", s.flushed_wrong,
              s.below_checked);
    MM_EXPECT(s.below_checked > 100000, "only %ld points below -126", s.below_checked);
}

/* What the softmax feeds it besides ordinary scores: the max itself (x = 0
 * exactly, or 8 with fast mode's offset), masked keys (−inf), and what a
 * NaN score must not turn into (a NaN or an infinity in the row sum). */
static void test_polyexp_special_inputs(void)
{
    MM_EXPECT(mmk_exp2_poly(0.f) == 1.f, "2^0 = %.9g", mmk_exp2_poly(0.f));
    MM_EXPECT(mmk_exp2_poly(8.f) == 256.f, "2^8 = %.9g", mmk_exp2_poly(8.f));
    MM_EXPECT(mmk_exp2_poly(-1.f) == 0.5f, "2^-1 = %.9g", mmk_exp2_poly(-1.f));
    MM_EXPECT(mmk_exp2_poly(-INFINITY) == 0.f, "2^-inf = %g", mmk_exp2_poly(-INFINITY));
    MM_EXPECT(mmk_exp2_poly(NAN) == 0.f, "NaN gave %g", mmk_exp2_poly(NAN));
    MM_EXPECT(mmk_exp2_poly(-1e30f) == 0.f, "2^-1e30 = %g", mmk_exp2_poly(-1e30f));
    MM_EXPECT(mmk_exp2_poly(-127.f) == 0.f && mmk_exp2_poly(-200.f) == 0.f, "not flushed below -127");
    MM_EXPECT(mmk_exp2_poly(-125.f) == 0x1p-125f, "2^-125 = %a", mmk_exp2_poly(-125.f));
}

int main(void)
{
    MM_RUN(test_polyexp_vs_exp2);
    MM_RUN(test_polyexp_special_inputs);
    return mm_test_exit();
}
