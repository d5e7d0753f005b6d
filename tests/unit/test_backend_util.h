/* Shared helpers of the backend/formats unit tests: seeded random tensors,
 * double-precision views of tensors, and tolerance checks. */
#ifndef MMH3_TESTS_BACKEND_UTIL_H
#define MMH3_TESTS_BACKEND_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/ops.h"
#include "core/tensor.h"
#include "test.h"

static uint64_t tb_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t tb_next(void)
{
    tb_rng ^= tb_rng << 13;
    tb_rng ^= tb_rng >> 7;
    tb_rng ^= tb_rng << 17;
    return tb_rng;
}

/* Uniform in [-1, 1). */
static inline double tb_uniform(void) { return (double)(tb_next() >> 11) * 0x1p-52 - 1.0; }

/* A fresh tensor filled with uniform values in [-scale, scale). */
static inline mm_tensor tb_rand(mm_dtype dt, int ndim, const int64_t *shape, double scale)
{
    mm_tensor t;
    mm_error err = {{0}};
    if (mm_tensor_alloc(&t, mm_cpu(), dt, ndim, shape, &err) != 0) {
        printf("FAIL alloc: %s\n", err.msg);
        exit(1);
    }
    int64_t n = mm_tensor_numel(&t);
    int64_t idx[MM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        mm_tensor_set(&t, idx, tb_uniform() * scale);
    }
    return t;
}

static inline mm_tensor tb_zeros(mm_dtype dt, int ndim, const int64_t *shape)
{
    mm_tensor t;
    mm_error err = {{0}};
    if (mm_tensor_zeros(&t, mm_cpu(), dt, ndim, shape, &err) != 0) {
        printf("FAIL alloc: %s\n", err.msg);
        exit(1);
    }
    return t;
}

/* The tensor's values in logical row-major order, as doubles (malloc'ed). */
static inline double *tb_values(const mm_tensor *t)
{
    int64_t n = mm_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int64_t idx[MM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = r % t->shape[d];
            r /= t->shape[d];
        }
        v[i] = mm_tensor_get(t, idx);
    }
    return v;
}

/* Relative precision of one rounding into dt. */
static inline double tb_eps(mm_dtype dt)
{
    return dt == MM_BF16 ? 0x1p-8 : dt == MM_F16 ? 0x1p-11 : 0x1p-22;
}

/* Worst |got - want| / (atol + rtol |want|) over all elements (<= 1 passes),
 * with rtol = eps(out dtype) * slack and atol = rtol * scale (for values near
 * zero that came out of long sums). */
static inline double tb_check(const mm_tensor *got, const double *want, double slack, double scale, int64_t *worst)
{
    double *g = tb_values(got);
    int64_t n = mm_tensor_numel(got);
    double rtol = tb_eps(got->dtype) * slack, atol = rtol * scale, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(g[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= bad)) { /* NaN counts as worst */
            bad = isnan(e) ? INFINITY : e;
            if (worst)
                *worst = i;
        }
    }
    free(g);
    return bad;
}

#endif
