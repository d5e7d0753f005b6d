/* Helpers for the device tests (tests/unit/test_cuda_*.c): GPU presence,
 * random data, host <-> device buffers, and error measures.
 *
 * Without a GPU the device tests print "SKIP" and exit 0, so a CUDA build on
 * a machine without one still passes its CPU suites; with MMH3_REQUIRE_GPU=1
 * (set by tests/device/run.sh on the GPU host) a missing GPU is a failure. */
#ifndef MMH3_TESTS_CUDA_TEST_H
#define MMH3_TESTS_CUDA_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "test.h"

static inline int cuda_test_require_gpu(const char *prog)
{
    if (mm_cuda_count() > 0)
        return 1;
    const char *req = getenv("MMH3_REQUIRE_GPU");
    if (req && *req && strcmp(req, "0") != 0) {
        printf("FAIL %s: no CUDA device found (MMH3_REQUIRE_GPU is set)\n", prog);
        exit(1);
    }
    printf("SKIP %s: no CUDA device\n", prog);
    exit(0);
}

/* xorshift64*: reproducible data, different per test via the seed. */
typedef struct cuda_test_rng {
    uint64_t s;
} cuda_test_rng;

static inline uint64_t cuda_test_next(cuda_test_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
/* uniform in [-1, 1) */
static inline float cuda_test_uniform(cuda_test_rng *r)
{
    return (float)((double)(cuda_test_next(r) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
/* approximately normal (sum of 4 uniforms, unit variance) */
static inline float cuda_test_normal(cuda_test_rng *r)
{
    float s = 0;
    for (int i = 0; i < 4; i++)
        s += cuda_test_uniform(r);
    return s * 0.8660254f;
}

static inline float *cuda_test_randn(cuda_test_rng *r, size_t n, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = cuda_test_normal(r) * scale;
    return v;
}

/* Rounds an f32 array through bf16 in place and returns the bf16 bits. */
static inline uint16_t *cuda_test_to_bf16(float *v, size_t n)
{
    uint16_t *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        b[i] = mm_f32_to_bf16(v[i]);
        v[i] = mm_bf16_to_f32(b[i]);
    }
    return b;
}

static inline float *cuda_test_from_bf16(const uint16_t *b, size_t n)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = mm_bf16_to_f32(b[i]);
    return v;
}

/* Device buffer holding a copy of host data (or poisoned with 0xFF bytes
 * when host is NULL, so unwritten outputs show as NaN). Aborts the test
 * program on failure: the device tests cannot continue without memory. */
static inline void *cuda_test_upload(const void *host, size_t bytes)
{
    mm_error err = {{0}};
    void *d = mm_cuda_malloc(0, bytes ? bytes : 1, &err);
    if (!d) {
        printf("FAIL cuda_test_upload: %s\n", err.msg);
        exit(1);
    }
    if (host) {
        if (mm_cuda_memcpy(0, d, -1, host, bytes, &err)) {
            printf("FAIL cuda_test_upload: %s\n", err.msg);
            exit(1);
        }
    } else {
        void *ff = malloc(bytes ? bytes : 1);
        memset(ff, 0xFF, bytes);
        if (mm_cuda_memcpy(0, d, -1, ff, bytes, &err)) {
            printf("FAIL cuda_test_upload: %s\n", err.msg);
            exit(1);
        }
        free(ff);
    }
    return d;
}

/* Waits for the device, then copies back into a new host buffer. */
static inline void *cuda_test_download(const void *dev_ptr, size_t bytes, mm_error *err)
{
    if (mm_cuda_sync(0, err))
        return NULL;
    void *h = malloc(bytes ? bytes : 1);
    if (mm_cuda_memcpy(-1, h, 0, dev_ptr, bytes, err)) {
        free(h);
        return NULL;
    }
    return h;
}

typedef struct cuda_test_diff {
    double rel_l2;   /* ||got - want|| / ||want|| */
    double max_abs;  /* max |got - want| */
    long nonfinite;  /* got values that are NaN/inf where want is finite */
    long worst;      /* index of max_abs */
} cuda_test_diff;

static inline cuda_test_diff cuda_test_compare(const float *got, const double *want, size_t n)
{
    cuda_test_diff d = {0, 0, 0, -1};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(want[i])) {
            d.nonfinite++;
            continue;
        }
        double e = (double)got[i] - want[i];
        num += e * e;
        den += want[i] * want[i];
        if (fabs(e) > d.max_abs) {
            d.max_abs = fabs(e);
            d.worst = (long)i;
        }
    }
    d.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    return d;
}

/* Count of bf16 outputs more than `ulps` bf16 steps away from the reference
 * value rounded to bf16. */
static inline long cuda_test_bf16_ulp_misses(const uint16_t *got, const double *want, size_t n, int ulps)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t w = mm_f32_to_bf16((float)want[i]);
        int gi = (int16_t)got[i] < 0 ? -(int)(got[i] & 0x7fff) : (int)got[i];
        int wi = (int16_t)w < 0 ? -(int)(w & 0x7fff) : (int)w;
        if (abs(gi - wi) > ulps)
            bad++;
    }
    return bad;
}

#include <time.h>

static inline double cuda_test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* MM_RUN with the case name printed (and flushed) before it runs and its
 * wall time after, so a case that hangs or crawls on the device is named in
 * the log even when the program is killed. */
#define CUDA_CASE(fn)                                                            \
    do {                                                                         \
        printf("  .. %s\n", #fn);                                               \
        fflush(stdout);                                                          \
        double t0_ = cuda_test_now();                                            \
        MM_RUN(fn);                                                              \
        printf("  .. %s took %.2f s\n", #fn, cuda_test_now() - t0_);            \
        fflush(stdout);                                                          \
    } while (0)

/* The error every device-test call reports into. */
static mm_error cuda_test_err __attribute__((unused));

/* Runs a 0/-1 call that takes &cuda_test_err; fails and leaves the case when
 * it fails. */
#define CUDA_TEST_OK(call)                                                       \
    do {                                                                         \
        if ((call) != 0) {                                                       \
            MM_EXPECT(0, "%s failed: %s", #call, cuda_test_err.msg);             \
            return;                                                              \
        }                                                                        \
    } while (0)

#endif
