/* Contexts, argument validation and device dispatch for every op.
 *
 * Each public op checks its arguments once here (so the CPU and CUDA
 * implementations see the same accepted inputs and the same error messages),
 * then calls its CPU or CUDA twin. */
#include "backend/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/threadpool.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/device.h"
#include "backend/kernel_policy.h"

struct mm_ctx {
    mm_device dev;
    void *stream;
    mm_threadpool *pool;
    atomic_int failed;
    pthread_mutex_t lock;
    char msg[MM_ERROR_MAX];
};

/* ================================================================ context */

int mm_env_threads(void) { return mm_kernel_policy_get()->cpu_threads; }

int mm_ctx_create(mm_ctx **out, mm_device dev, int n_threads, mm_error *err)
{
    *out = NULL;
    mm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "out of memory");
    c->dev = dev;
    /* the process's kernel policy is in place before the first op (the
     * CUDA kernels read their part at every launch) */
    const mm_kernel_policy *policy = mm_kernel_policy_get();
    pthread_mutex_init(&c->lock, NULL);
    if (dev.kind == MM_DEVICE_CUDA) {
        c->stream = mm_cuda_ops_stream(dev.index, err);
        if (!c->stream) {
            pthread_mutex_destroy(&c->lock);
            free(c);
            return -1;
        }
    } else {
        if (n_threads <= 0)
            n_threads = policy->cpu_threads;
        if (n_threads <= 0) {
            long n = sysconf(_SC_NPROCESSORS_ONLN);
            n_threads = n > 0 ? (int)n : 1;
        }
        if (mm_threadpool_create(&c->pool, n_threads, err) != 0) {
            pthread_mutex_destroy(&c->lock);
            free(c);
            return -1;
        }
    }
    *out = c;
    return 0;
}

void mm_ctx_destroy(mm_ctx *ctx)
{
    if (!ctx)
        return;
    mm_threadpool_destroy(ctx->pool);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

mm_device mm_ctx_device(const mm_ctx *ctx) { return ctx->dev; }
int mm_ctx_threads(const mm_ctx *ctx) { return ctx->pool ? mm_threadpool_size(ctx->pool) : 1; }
void *mm_ctx_stream(const mm_ctx *ctx) { return ctx->stream; }

int mm_ctx_fail(mm_ctx *ctx, const char *fmt, ...)
{
    pthread_mutex_lock(&ctx->lock);
    if (!atomic_load(&ctx->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
        va_end(ap);
        atomic_store(&ctx->failed, 1);
    }
    pthread_mutex_unlock(&ctx->lock);
    return -1;
}

bool mm_ctx_failed(const mm_ctx *ctx) { return atomic_load(&ctx->failed) != 0; }

int mm_ctx_error(const mm_ctx *ctx, mm_error *err)
{
    if (!atomic_load(&ctx->failed))
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&ctx->lock);
    mm_fail(err, "%s", ctx->msg);
    pthread_mutex_unlock((pthread_mutex_t *)&ctx->lock);
    return -1;
}

void mm_ctx_clear_error(mm_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->msg[0] = '\0';
    atomic_store(&ctx->failed, 0);
    pthread_mutex_unlock(&ctx->lock);
}

int mm_ctx_sync(mm_ctx *ctx, mm_error *err)
{
    if (ctx->dev.kind == MM_DEVICE_CUDA && !mm_ctx_failed(ctx))
        mm_cuda_ops_sync(ctx);
    return mm_ctx_error(ctx, err);
}

void mm_parallel_for(mm_ctx *ctx, int64_t n, int64_t grain, void (*fn)(void *user, int64_t begin, int64_t end),
                     void *user)
{
    mm_threadpool_run(ctx ? ctx->pool : NULL, n, grain, fn, user);
}

/* ============================================================= validation */

#define CHECK(cond)                                                                                                  \
    do {                                                                                                             \
        if (!(cond))                                                                                                 \
            return -1;                                                                                               \
    } while (0)

static bool is_float(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

static const char *shp(const mm_tensor *t, char *buf, size_t n) { return mm_shape_str(t->ndim, t->shape, buf, n); }

/* A tensor argument: present, a valid view, on the context's device. */
static int arg(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    if (!t)
        return mm_ctx_fail(ctx, "%s: %s is NULL", op, name);
    if (!t->data && mm_tensor_numel(t) != 0)
        return mm_ctx_fail(ctx, "%s: %s is an invalid view (a narrow/reshape/unflatten with bad arguments)", op,
                           name);
    if (!mm_device_eq(t->device, ctx->dev)) {
        char a[32], b[32];
        return mm_ctx_fail(ctx, "%s: %s is on %s, the context runs on %s (mm_copy moves tensors)", op, name,
                           mm_device_name(t->device, a, sizeof a), mm_device_name(ctx->dev, b, sizeof b));
    }
    if (t->dtype == MM_F4_E2M1)
        return mm_ctx_fail(ctx, "%s: %s: packed F4_E2M1 tensors are only read by mm_nvfp4_dequantize (as U8)", op,
                           name);
    return 0;
}

static int arg_float(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    CHECK(arg(ctx, op, name, t) == 0);
    if (!is_float(t->dtype))
        return mm_ctx_fail(ctx, "%s: %s has dtype %s; accepted: F32, BF16, F16", op, name, mm_dtype_name(t->dtype));
    return 0;
}

static int arg_dtype(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t, mm_dtype want)
{
    CHECK(arg(ctx, op, name, t) == 0);
    if (t->dtype != want)
        return mm_ctx_fail(ctx, "%s: %s has dtype %s, %s expected", op, name, mm_dtype_name(t->dtype),
                           mm_dtype_name(want));
    return 0;
}

/* a and b agree in rank and in every dim from `from` on: the same shape
 * (from 0) or rows of one shape (from 1, at least one dim). */
static int shapes_agree(mm_ctx *ctx, const char *op, const char *na, const mm_tensor *a, const char *nb,
                        const mm_tensor *b, int from)
{
    bool ok = a->ndim == b->ndim && a->ndim >= from;
    for (int i = from; ok && i < a->ndim; i++)
        ok = a->shape[i] == b->shape[i];
    if (ok)
        return 0;
    char x[96], y[96];
    return mm_ctx_fail(ctx, "%s: %s %s and %s %s %s", op, na, shp(a, x, sizeof x), nb, shp(b, y, sizeof y),
                       from ? "must differ only in the first dim" : "differ in shape");
}

static int same_shape(mm_ctx *ctx, const char *op, const char *na, const mm_tensor *a, const char *nb,
                      const mm_tensor *b)
{
    return shapes_agree(ctx, op, na, a, nb, b, 0);
}

static int expect_shape(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t, int ndim,
                        const int64_t *shape)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return 0;
    char x[96], y[96];
    return mm_ctx_fail(ctx, "%s: %s: shape %s expected, got %s", op, name, mm_shape_str(ndim, shape, y, sizeof y),
                       shp(t, x, sizeof x));
}

/* The last dim must be unit-stride (row ops). */
static int unit_last(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    if (t->ndim == 0 || t->shape[t->ndim - 1] <= 1 || t->stride[t->ndim - 1] == 1)
        return 0;
    return mm_ctx_fail(ctx, "%s: %s: the last dim must have stride 1 (has %lld); copy it contiguous first", op, name,
                       (long long)t->stride[t->ndim - 1]);
}

static int contiguous(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    if (mm_tensor_is_contiguous(t))
        return 0;
    return mm_ctx_fail(ctx, "%s: %s must be contiguous", op, name);
}

/* A per-channel vector of length n: [n] or [n, 1] / [1, n]. */
static int vec(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t, int64_t n)
{
    if (mm_tensor_numel(t) == n && (t->ndim == 1 || (t->ndim == 2 && (t->shape[0] == 1 || t->shape[1] == 1))) &&
        (t->ndim == 1 || mm_tensor_is_contiguous(t)))
        return 0;
    char x[96];
    return mm_ctx_fail(ctx, "%s: %s: a vector of %lld elements expected, got %s", op, name, (long long)n,
                       shp(t, x, sizeof x));
}

/* An I32 row index [R] whose values are < limit (checked on the CPU only;
 * the CUDA kernels trust them). */
static int index_arg(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *idx, int64_t rows, int64_t limit)
{
    CHECK(arg_dtype(ctx, op, name, idx, MM_I32) == 0);
    if (idx->ndim != 1 || idx->shape[0] != rows) {
        char x[96];
        return mm_ctx_fail(ctx, "%s: %s: shape [%lld] expected, got %s", op, name, (long long)rows,
                           shp(idx, x, sizeof x));
    }
    if (ctx->dev.kind == MM_DEVICE_CPU) {
        const int32_t *p = idx->data;
        for (int64_t r = 0; r < rows; r++) {
            int32_t v = p[r * idx->stride[0]];
            if (v < 0 || v >= limit)
                return mm_ctx_fail(ctx, "%s: %s[%lld] = %d out of range [0, %lld)", op, name, (long long)r, v,
                                   (long long)limit);
        }
    }
    return 0;
}

#define DISPATCH(name, ...)                                                                                          \
    (ctx->dev.kind == MM_DEVICE_CUDA ? mm_cuda_##name(ctx, __VA_ARGS__) : mm_cpu_##name(ctx, __VA_ARGS__))

#define ENTER(ctx)                                                                                                   \
    do {                                                                                                             \
        if (mm_ctx_failed(ctx))                                                                                      \
            return -1;                                                                                               \
    } while (0)

/* ======================================================== copy and convert */

int mm_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src)
{
    static const char *op = "mm_copy";
    ENTER(ctx);
    if (!dst || !src)
        return mm_ctx_fail(ctx, "mm_copy: NULL tensor");
    CHECK(same_shape(ctx, op, "dst", dst, "src", src) == 0);
    if (mm_tensor_numel(dst) == 0)
        return 0;
    if ((!dst->data || !src->data))
        return mm_ctx_fail(ctx, "mm_copy: invalid view");
    bool cross = !mm_device_eq(dst->device, src->device);
    if (!cross) {
        if (dst->dtype == MM_F4_E2M1 || src->dtype == MM_F4_E2M1) {
            if (dst->dtype != src->dtype || !mm_tensor_is_contiguous(dst) || !mm_tensor_is_contiguous(src))
                return mm_ctx_fail(ctx, "mm_copy: packed F4_E2M1 copies must be contiguous and keep the dtype");
            mm_error e = {{0}};
            if (mm_device_memcpy(dst->device, dst->data, src->device, src->data, mm_tensor_nbytes(src), &e) != 0)
                return mm_ctx_fail(ctx, "mm_copy: %s", e.msg);
            return 0;
        }
        if (!mm_device_eq(dst->device, ctx->dev)) {
            char a[32];
            return mm_ctx_fail(ctx, "mm_copy: tensors on %s, the context runs on %s",
                               mm_device_name(dst->device, a, sizeof a), ctx->dev.kind ? "cuda" : "cpu");
        }
        return DISPATCH(copy, dst, src);
    }
    /* Cross-device: byte copies of equal dtypes; strided sides staged. */
    if (dst->dtype != src->dtype)
        return mm_ctx_fail(ctx, "mm_copy: %s -> %s across devices; convert on one side first",
                           mm_dtype_name(src->dtype), mm_dtype_name(dst->dtype));
    if (ctx->dev.kind == MM_DEVICE_CUDA && !mm_ctx_failed(ctx))
        mm_cuda_ops_sync(ctx); /* the copy must see the stream's earlier writes */
    ENTER(ctx);
    mm_error e = {{0}};
    mm_tensor s = *src, d = *dst, tmp_s = {0}, tmp_d = {0};
    int rc = 0;
    if (!mm_tensor_is_contiguous(src)) {
        if (src->device.kind != MM_DEVICE_CPU)
            return mm_ctx_fail(ctx, "mm_copy: a strided source on %s must be made contiguous there first",
                               src->device.kind ? "cuda" : "cpu");
        if (mm_tensor_alloc(&tmp_s, mm_cpu(), src->dtype, src->ndim, src->shape, &e) != 0)
            return mm_ctx_fail(ctx, "mm_copy: %s", e.msg);
        mm_cpu_copy(ctx, &tmp_s, src);
        s = tmp_s;
    }
    if (!mm_tensor_is_contiguous(dst)) {
        if (dst->device.kind != MM_DEVICE_CPU) {
            mm_tensor_free(&tmp_s);
            return mm_ctx_fail(ctx, "mm_copy: a strided destination on %s is not supported across devices",
                               dst->device.kind ? "cuda" : "cpu");
        }
        if (mm_tensor_alloc(&tmp_d, mm_cpu(), dst->dtype, dst->ndim, dst->shape, &e) != 0) {
            mm_tensor_free(&tmp_s);
            return mm_ctx_fail(ctx, "mm_copy: %s", e.msg);
        }
        d = tmp_d;
    }
    if (mm_device_memcpy(d.device, d.data, s.device, s.data, mm_tensor_nbytes(&s), &e) != 0)
        rc = mm_ctx_fail(ctx, "mm_copy: %s", e.msg);
    else if (tmp_d.data)
        mm_cpu_copy(ctx, dst, &tmp_d);
    mm_tensor_free(&tmp_s);
    mm_tensor_free(&tmp_d);
    return rc;
}

int mm_copy_converting(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src, mm_error *err)
{
    if (src->dtype == dst->dtype || mm_device_eq(src->device, dst->device)) {
        mm_copy(ctx, dst, src);
        return mm_ctx_sync(ctx, err);
    }
    mm_tensor staged;
    if (mm_tensor_alloc(&staged, dst->device, src->dtype, src->ndim, src->shape, err) != 0)
        return -1;
    mm_copy(ctx, &staged, src);
    mm_copy(ctx, dst, &staged);
    int rc = mm_ctx_sync(ctx, err);
    mm_tensor_free(&staged);
    return rc;
}

int mm_fill(mm_ctx *ctx, mm_tensor *dst, double value)
{
    ENTER(ctx);
    CHECK(arg(ctx, "mm_fill", "dst", dst) == 0);
    if (mm_tensor_numel(dst) == 0)
        return 0;
    return DISPATCH(fill, dst, value);
}

/* ============================================================= elementwise */

static int ew2(mm_ctx *ctx, const char *op, const mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    CHECK(arg_float(ctx, op, "out", out) == 0);
    CHECK(arg_float(ctx, op, "a", a) == 0);
    CHECK(same_shape(ctx, op, "out", out, "a", a) == 0);
    if (b) {
        CHECK(arg_float(ctx, op, "b", b) == 0);
        CHECK(same_shape(ctx, op, "out", out, "b", b) == 0);
    }
    return 0;
}

/* mm_add and mm_mul: b is required (ew2 lets the unary ops pass none). */
static int binary_run(mm_ctx *ctx, const char *op, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, bool mul)
{
    ENTER(ctx);
    if (!b)
        return mm_ctx_fail(ctx, "%s: b is NULL", op);
    CHECK(ew2(ctx, op, out, a, b) == 0);
    if (mm_tensor_numel(out) == 0)
        return 0;
    return mul ? DISPATCH(mul, out, a, b) : DISPATCH(add, out, a, b);
}

int mm_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return binary_run(ctx, "mm_add", out, a, b, false);
}

int mm_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return binary_run(ctx, "mm_mul", out, a, b, true);
}

int mm_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b)
{
    ENTER(ctx);
    CHECK(ew2(ctx, "mm_axpby", out, a, b) == 0);
    return mm_tensor_numel(out) ? DISPATCH(axpby, out, alpha, a, beta, b) : 0;
}

int mm_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi)
{
    ENTER(ctx);
    CHECK(ew2(ctx, "mm_clamp", out, x, NULL) == 0);
    if (!(lo <= hi))
        return mm_ctx_fail(ctx, "mm_clamp: lo %g > hi %g", lo, hi);
    return mm_tensor_numel(out) ? DISPATCH(clamp, out, x, lo, hi) : 0;
}

int mm_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act)
{
    ENTER(ctx);
    CHECK(ew2(ctx, "mm_activation", out, x, NULL) == 0);
    if ((unsigned)act > MM_ACT_EXP)
        return mm_ctx_fail(ctx, "mm_activation: unknown activation %d", (int)act);
    return mm_tensor_numel(out) ? DISPATCH(activation, out, x, act) : 0;
}

int mm_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act)
{
    ENTER(ctx);
    if (!up)
        return mm_ctx_fail(ctx, "mm_glu: up is NULL");
    CHECK(ew2(ctx, "mm_glu", out, gate, up) == 0);
    if ((unsigned)act > MM_ACT_EXP)
        return mm_ctx_fail(ctx, "mm_glu: unknown activation %d", (int)act);
    return mm_tensor_numel(out) ? DISPATCH(glu, out, gate, up, act) : 0;
}

int mm_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta)
{
    static const char *op = "mm_snake";
    ENTER(ctx);
    CHECK(ew2(ctx, op, out, x, NULL) == 0);
    if (x->ndim != 3)
        return mm_ctx_fail(ctx, "mm_snake: x must be [B, C, L] (rank %d given)", x->ndim);
    CHECK(unit_last(ctx, op, "x", x) == 0 && unit_last(ctx, op, "out", out) == 0);
    CHECK(arg_float(ctx, op, "alpha", alpha) == 0 && vec(ctx, op, "alpha", alpha, x->shape[1]) == 0);
    if (beta)
        CHECK(arg_float(ctx, op, "beta", beta) == 0 && vec(ctx, op, "beta", beta, x->shape[1]) == 0);
    return mm_tensor_numel(out) ? DISPATCH(snake, out, x, alpha, beta) : 0;
}

/* ================================================================= row ops */

static int rowop(mm_ctx *ctx, const char *op, const mm_tensor *out, const mm_tensor *x)
{
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "x", x) == 0);
    CHECK(same_shape(ctx, op, "out", out, "x", x) == 0);
    if (x->ndim < 1)
        return mm_ctx_fail(ctx, "%s: x must have at least one dim", op);
    CHECK(unit_last(ctx, op, "x", x) == 0 && unit_last(ctx, op, "out", out) == 0);
    return 0;
}

int mm_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps)
{
    static const char *op = "mm_rmsnorm";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0);
    if (weight)
        CHECK(arg_float(ctx, op, "weight", weight) == 0 && vec(ctx, op, "weight", weight, x->shape[x->ndim - 1]) == 0);
    return mm_tensor_numel(out) ? DISPATCH(rmsnorm, out, x, weight, eps) : 0;
}

int mm_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                 float eps)
{
    static const char *op = "mm_layernorm";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0);
    int64_t c = x->shape[x->ndim - 1];
    if (weight)
        CHECK(arg_float(ctx, op, "weight", weight) == 0 && vec(ctx, op, "weight", weight, c) == 0);
    if (bias)
        CHECK(arg_float(ctx, op, "bias", bias) == 0 && vec(ctx, op, "bias", bias, c) == 0);
    return mm_tensor_numel(out) ? DISPATCH(layernorm, out, x, weight, bias, eps) : 0;
}

int mm_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                 int groups, float eps, bool per_frame)
{
    static const char *op = "mm_groupnorm";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "x", x) == 0);
    CHECK(same_shape(ctx, op, "out", out, "x", x) == 0);
    CHECK(contiguous(ctx, op, "x", x) == 0 && contiguous(ctx, op, "out", out) == 0);
    if (x->ndim < 2)
        return mm_ctx_fail(ctx, "mm_groupnorm: x must be [N, C, ...]");
    if (per_frame && x->ndim != 5)
        return mm_ctx_fail(ctx, "mm_groupnorm: per_frame needs x [N, C, T, H, W] (rank %d given)", x->ndim);
    int64_t c = x->shape[1];
    if (groups < 1 || c % groups != 0)
        return mm_ctx_fail(ctx, "mm_groupnorm: %lld channels are not divisible into %d groups", (long long)c, groups);
    if (weight)
        CHECK(arg_float(ctx, op, "weight", weight) == 0 && vec(ctx, op, "weight", weight, c) == 0);
    if (bias)
        CHECK(arg_float(ctx, op, "bias", bias) == 0 && vec(ctx, op, "bias", bias, c) == 0);
    return mm_tensor_numel(out) ? DISPATCH(groupnorm, out, x, weight, bias, groups, eps, per_frame) : 0;
}

int mm_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x)
{
    ENTER(ctx);
    CHECK(rowop(ctx, "mm_softmax", out, x) == 0);
    return mm_tensor_numel(out) ? DISPATCH(softmax, out, x) : 0;
}

int mm_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op_)
{
    static const char *op = "mm_reduce_rows";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "x", x) == 0);
    if (x->ndim < 1)
        return mm_ctx_fail(ctx, "mm_reduce_rows: x must have at least one dim");
    CHECK(unit_last(ctx, op, "x", x) == 0);
    CHECK(expect_shape(ctx, op, "out", out, x->ndim - 1, x->shape) == 0);
    if ((unsigned)op_ > MM_REDUCE_ABSMAX)
        return mm_ctx_fail(ctx, "mm_reduce_rows: unknown reduction %d", (int)op_);
    return mm_tensor_numel(out) ? DISPATCH(reduce_rows, out, x, op_) : 0;
}

/* A modulation table [T, C]: rows any stride, columns stride 1. */
static int table(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t, int64_t c, const mm_tensor *idx,
                 int64_t rows)
{
    CHECK(arg_float(ctx, op, name, t) == 0);
    if (t->ndim != 2 || t->shape[1] != c) {
        char x[96];
        return mm_ctx_fail(ctx, "%s: %s: a table [T, %lld] expected, got %s", op, name, (long long)c,
                           shp(t, x, sizeof x));
    }
    CHECK(unit_last(ctx, op, name, t) == 0);
    if (!idx && t->shape[0] != 1)
        return mm_ctx_fail(ctx, "%s: %s has %lld rows but no index was given (one row needed)", op, name,
                           (long long)t->shape[0]);
    if (idx)
        CHECK(index_arg(ctx, op, "idx", idx, rows, t->shape[0]) == 0);
    return 0;
}

static int rows2d(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    if (t->ndim == 2)
        return 0;
    return mm_ctx_fail(ctx, "%s: %s must be [R, C] (rank %d given)", op, name, t->ndim);
}

int mm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,
                const mm_tensor *idx)
{
    static const char *op = "mm_modulate";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0 && rows2d(ctx, op, "x", x) == 0);
    CHECK(table(ctx, op, "scale", scale, x->shape[1], idx, x->shape[0]) == 0);
    CHECK(table(ctx, op, "shift", shift, x->shape[1], idx, x->shape[0]) == 0);
    if (scale->shape[0] != shift->shape[0])
        return mm_ctx_fail(ctx, "mm_modulate: scale and shift tables differ in rows");
    return mm_tensor_numel(out) ? DISPATCH(modulate, out, x, scale, shift, idx) : 0;
}

int mm_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,
                        const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx)
{
    static const char *op = "mm_rmsnorm_modulate";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0 && rows2d(ctx, op, "x", x) == 0);
    if (weight)
        CHECK(arg_float(ctx, op, "weight", weight) == 0 && vec(ctx, op, "weight", weight, x->shape[1]) == 0);
    CHECK(table(ctx, op, "scale", scale, x->shape[1], idx, x->shape[0]) == 0);
    CHECK(table(ctx, op, "shift", shift, x->shape[1], idx, x->shape[0]) == 0);
    if (scale->shape[0] != shift->shape[0])
        return mm_ctx_fail(ctx, "mm_rmsnorm_modulate: scale and shift tables differ in rows");
    return mm_tensor_numel(out) ? DISPATCH(rmsnorm_modulate, out, x, weight, eps, scale, shift, idx) : 0;
}

int mm_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx)
{
    static const char *op = "mm_gated_residual";
    ENTER(ctx);
    CHECK(rowop(ctx, op, x, y) == 0 && rows2d(ctx, op, "x", x) == 0);
    CHECK(table(ctx, op, "gate", gate, x->shape[1], idx, x->shape[0]) == 0);
    return mm_tensor_numel(x) ? DISPATCH(gated_residual, x, y, gate, idx) : 0;
}

int mm_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin, int rot_dim)
{
    static const char *op = "mm_rope";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0);
    if (x->ndim != 3)
        return mm_ctx_fail(ctx, "mm_rope: x must be [S, H, D] (rank %d given)", x->ndim);
    if (rot_dim < 0 || rot_dim % 2 || rot_dim > x->shape[2])
        return mm_ctx_fail(ctx, "mm_rope: rot_dim %d must be even and <= head dim %lld", rot_dim,
                           (long long)x->shape[2]);
    const int64_t want[2] = {x->shape[0], rot_dim};
    CHECK(arg_float(ctx, op, "cos", cos) == 0 && arg_float(ctx, op, "sin", sin) == 0);
    CHECK(expect_shape(ctx, op, "cos", cos, 2, want) == 0 && expect_shape(ctx, op, "sin", sin, 2, want) == 0);
    CHECK(unit_last(ctx, op, "cos", cos) == 0 && unit_last(ctx, op, "sin", sin) == 0);
    return mm_tensor_numel(out) ? DISPATCH(rope, out, x, cos, sin, rot_dim) : 0;
}

/* =============================================================== attention */

int mm_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                 const mm_attn_params *params)
{
    static const char *op = "mm_attention";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "q", q) == 0);
    CHECK(arg_float(ctx, op, "k", k) == 0 && arg_float(ctx, op, "v", v) == 0);
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || out->ndim != 3)
        return mm_ctx_fail(ctx, "mm_attention: q, k, v and out must be [S, H, D]");
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return mm_ctx_fail(ctx, "mm_attention: q, k, v dtypes differ (%s, %s, %s)", mm_dtype_name(q->dtype),
                           mm_dtype_name(k->dtype), mm_dtype_name(v->dtype));
    CHECK(unit_last(ctx, op, "q", q) == 0 && unit_last(ctx, op, "k", k) == 0);
    CHECK(unit_last(ctx, op, "v", v) == 0 && unit_last(ctx, op, "out", out) == 0);
    int64_t sq = q->shape[0], hq = q->shape[1], d = q->shape[2], sk = k->shape[0], hkv = k->shape[1];
    char a[96], b[96];
    if (k->shape[2] != d)
        return mm_ctx_fail(ctx, "mm_attention: q %s and k %s head dims differ", shp(q, a, sizeof a),
                           shp(k, b, sizeof b));
    if (v->shape[0] != sk || v->shape[1] != hkv)
        return mm_ctx_fail(ctx, "mm_attention: k %s and v %s differ in rows or heads", shp(k, a, sizeof a),
                           shp(v, b, sizeof b));
    if (hkv < 1 || hq % hkv != 0)
        return mm_ctx_fail(ctx, "mm_attention: %lld query heads are not a multiple of %lld kv heads", (long long)hq,
                           (long long)hkv);
    const int64_t want[3] = {sq, hq, v->shape[2]};
    CHECK(expect_shape(ctx, op, "out", out, 3, want) == 0);
    if (params && params->causal && sq != sk)
        return mm_ctx_fail(ctx, "mm_attention: causal attention needs Sq == Sk (%lld vs %lld)", (long long)sq,
                           (long long)sk);
    if (params && params->seg_offsets) {
        if (sq != sk || params->n_seg < 1)
            return mm_ctx_fail(ctx, "mm_attention: segments need self-attention (Sq == Sk) and n_seg >= 1");
        if (params->seg_offsets[0] != 0 || params->seg_offsets[params->n_seg] != sq)
            return mm_ctx_fail(ctx, "mm_attention: segment offsets must run from 0 to S = %lld", (long long)sq);
        for (int i = 0; i < params->n_seg; i++)
            if (params->seg_offsets[i + 1] < params->seg_offsets[i])
                return mm_ctx_fail(ctx, "mm_attention: segment offsets decrease at %d", i);
    }
    if (sq == 0 || hq == 0)
        return 0;
    if (sk == 0)
        return mm_ctx_fail(ctx, "mm_attention: no keys (Sk = 0)");
    return DISPATCH(attention, out, q, k, v, params);
}

/* ==================================================================== GEMM */

static bool mat_ok(const mm_tensor *t)
{
    int n = t->ndim;
    return t->stride[n - 1] == 1 || t->stride[n - 2] == 1 || t->shape[n - 1] == 1 || t->shape[n - 2] == 1;
}

int mm_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias, float alpha,
            float beta)
{
    static const char *op = "mm_gemm";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "a", a) == 0 && arg_float(ctx, op, "b", b) == 0);
    if (a->dtype != b->dtype)
        return mm_ctx_fail(ctx, "mm_gemm: a is %s and b is %s; the two operands must share a dtype",
                           mm_dtype_name(a->dtype), mm_dtype_name(b->dtype));
    if (a->ndim < 2 || a->ndim > 3 || b->ndim < 2 || b->ndim > 3 || out->ndim != a->ndim ||
        (b->ndim == 3 && a->ndim != 3))
        return mm_ctx_fail(ctx, "mm_gemm: a [M, K] . b [K, N] (or batched [B, M, K] . [B or -, K, N]) expected");
    int64_t m = a->shape[a->ndim - 2], kk = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    char x[96], y[96];
    if (b->shape[b->ndim - 2] != kk)
        return mm_ctx_fail(ctx, "mm_gemm: inner dims differ: a %s, b %s", shp(a, x, sizeof x), shp(b, y, sizeof y));
    if (a->ndim == 3 && b->ndim == 3 && a->shape[0] != b->shape[0])
        return mm_ctx_fail(ctx, "mm_gemm: batch dims differ: a %s, b %s", shp(a, x, sizeof x), shp(b, y, sizeof y));
    int64_t want[3];
    if (a->ndim == 3) {
        want[0] = a->shape[0];
        want[1] = m;
        want[2] = n;
    } else {
        want[0] = m;
        want[1] = n;
    }
    CHECK(expect_shape(ctx, op, "out", out, a->ndim, want) == 0);
    CHECK(unit_last(ctx, op, "out", out) == 0);
    if (!mat_ok(a) || !mat_ok(b))
        return mm_ctx_fail(ctx, "mm_gemm: one of the two last strides of a and of b must be 1");
    if (bias)
        CHECK(arg_float(ctx, op, "bias", bias) == 0 && vec(ctx, op, "bias", bias, n) == 0);
    if (mm_tensor_numel(out) == 0)
        return 0;
    return DISPATCH(gemm, out, a, b, bias, alpha, beta);
}

int mm_matmul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias)
{
    return mm_gemm(ctx, out, a, b, bias, 1.0f, 0.0f);
}

/* ============================================================ quantization */

static int group_ok(mm_ctx *ctx, const char *op, int group, int64_t k)
{
    if (group != 4 && group != 16 && group != 64 && group != 256)
        return mm_ctx_fail(ctx, "%s: group %d; accepted: 4, 16, 64, 256", op, group);
    if (k % group != 0)
        return mm_ctx_fail(ctx, "%s: %lld channels are not a multiple of the rotation group %d", op, (long long)k,
                           group);
    return 0;
}

int mm_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group)
{
    static const char *op = "mm_hadamard_rotate";
    ENTER(ctx);
    CHECK(rowop(ctx, op, out, x) == 0);
    CHECK(group_ok(ctx, op, group, x->shape[x->ndim - 1]) == 0);
    return mm_tensor_numel(out) ? DISPATCH(hadamard_rotate, out, x, group) : 0;
}

int mm_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group)
{
    static const char *op = "mm_convrot_quantize";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "x", x) == 0 && rows2d(ctx, op, "x", x) == 0 && unit_last(ctx, op, "x", x) == 0);
    CHECK(arg_dtype(ctx, op, "q", q, MM_I8) == 0 && same_shape(ctx, op, "q", q, "x", x) == 0);
    CHECK(unit_last(ctx, op, "q", q) == 0);
    CHECK(arg_dtype(ctx, op, "s", s, MM_F32) == 0 && vec(ctx, op, "s", s, x->shape[0]) == 0);
    CHECK(group_ok(ctx, op, group, x->shape[1]) == 0);
    return mm_tensor_numel(x) ? DISPATCH(convrot_quantize, q, s, x, group) : 0;
}

int mm_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                      const mm_tensor *s_w, const mm_tensor *bias)
{
    static const char *op = "mm_gemm_i8_scaled";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && rows2d(ctx, op, "out", out) == 0);
    CHECK(arg_dtype(ctx, op, "q_x", q_x, MM_I8) == 0 && rows2d(ctx, op, "q_x", q_x) == 0);
    CHECK(arg_dtype(ctx, op, "q_w", q_w, MM_I8) == 0 && rows2d(ctx, op, "q_w", q_w) == 0);
    CHECK(unit_last(ctx, op, "q_x", q_x) == 0 && unit_last(ctx, op, "q_w", q_w) == 0);
    CHECK(unit_last(ctx, op, "out", out) == 0);
    int64_t r = q_x->shape[0], k = q_x->shape[1], n = q_w->shape[0];
    if (q_w->shape[1] != k) {
        char a[96], b[96];
        return mm_ctx_fail(ctx, "mm_gemm_i8_scaled: q_x %s and q_w %s differ in K", shp(q_x, a, sizeof a),
                           shp(q_w, b, sizeof b));
    }
    const int64_t want[2] = {r, n};
    CHECK(expect_shape(ctx, op, "out", out, 2, want) == 0);
    CHECK(arg_dtype(ctx, op, "s_x", s_x, MM_F32) == 0 && vec(ctx, op, "s_x", s_x, r) == 0);
    CHECK(arg_dtype(ctx, op, "s_w", s_w, MM_F32) == 0 && vec(ctx, op, "s_w", s_w, n) == 0);
    if (bias)
        CHECK(arg_float(ctx, op, "bias", bias) == 0 && vec(ctx, op, "bias", bias, n) == 0);
    return mm_tensor_numel(out) ? DISPATCH(gemm_i8_scaled, out, q_x, s_x, q_w, s_w, bias) : 0;
}

int mm_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales, float scale2)
{
    static const char *op = "mm_nvfp4_dequantize";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && rows2d(ctx, op, "out", out) == 0);
    CHECK(arg_dtype(ctx, op, "packed", packed, MM_U8) == 0 && contiguous(ctx, op, "packed", packed) == 0);
    CHECK(arg_dtype(ctx, op, "scales", scales, MM_F8_E4M3) == 0 && contiguous(ctx, op, "scales", scales) == 0);
    CHECK(contiguous(ctx, op, "out", out) == 0);
    int64_t n = out->shape[0], k = out->shape[1];
    if (k % 64 != 0 || n % 128 != 0)
        return mm_ctx_fail(ctx,
                           "mm_nvfp4_dequantize: [%lld, %lld] is not tile-aligned (rows a multiple of 128, columns "
                           "of 64); padded nvfp4 layouts are not supported",
                           (long long)n, (long long)k);
    const int64_t wp[2] = {n, k / 2}, ws[2] = {n, k / 16};
    CHECK(expect_shape(ctx, op, "packed", packed, 2, wp) == 0 && expect_shape(ctx, op, "scales", scales, 2, ws) == 0);
    return mm_tensor_numel(out) ? DISPATCH(nvfp4_dequantize, out, packed, scales, scale2) : 0;
}

int mm_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *tab, const mm_tensor *scale)
{
    static const char *op = "mm_embedding_i8";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && rows2d(ctx, op, "out", out) == 0);
    CHECK(arg_dtype(ctx, op, "table", tab, MM_I8) == 0 && rows2d(ctx, op, "table", tab) == 0);
    CHECK(unit_last(ctx, op, "table", tab) == 0 && unit_last(ctx, op, "out", out) == 0);
    CHECK(arg_dtype(ctx, op, "scale", scale, MM_F32) == 0 && vec(ctx, op, "scale", scale, tab->shape[0]) == 0);
    if (out->shape[1] != tab->shape[1])
        return mm_ctx_fail(ctx, "mm_embedding_i8: out has %lld columns, the table %lld", (long long)out->shape[1],
                           (long long)tab->shape[1]);
    CHECK(index_arg(ctx, op, "ids", ids, out->shape[0], tab->shape[0]) == 0);
    return mm_tensor_numel(out) ? DISPATCH(embedding_i8, out, ids, tab, scale) : 0;
}

/* ======================================================== gather / scatter */

/* The tensors of a row-index op: gather (out[i] = src[idx[i]]: idx as long
 * as out, indexing src's rows) or scatter (out[idx[i]] (+)= src[i]: idx as
 * long as src, indexing out's rows). Copies move any dtype to its own kind
 * (float to float, others unchanged); the accumulating scatter takes floats. */
static int row_index_args(mm_ctx *ctx, const char *op, const mm_tensor *out, const mm_tensor *src,
                          const mm_tensor *idx, bool gather, bool accumulate)
{
    int (*tensor_arg)(mm_ctx *, const char *, const char *, const mm_tensor *) = accumulate ? arg_float : arg;
    CHECK(tensor_arg(ctx, op, "out", out) == 0 && tensor_arg(ctx, op, "src", src) == 0);
    CHECK(shapes_agree(ctx, op, "out", out, "src", src, 1) == 0);
    bool fo = is_float(out->dtype), fs = is_float(src->dtype);
    if (fo != fs || (!fo && out->dtype != src->dtype))
        return mm_ctx_fail(ctx, "%s: dtypes %s and %s cannot be combined here", op, mm_dtype_name(out->dtype),
                           mm_dtype_name(src->dtype));
    const mm_tensor *by = gather ? out : src, *into = gather ? src : out;
    return index_arg(ctx, op, "idx", idx, by->shape[0], into->shape[0]);
}

int mm_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    ENTER(ctx);
    CHECK(row_index_args(ctx, "mm_gather_rows", out, src, idx, true, false) == 0);
    return mm_tensor_numel(out) ? DISPATCH(gather_rows, out, src, idx) : 0;
}

int mm_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    ENTER(ctx);
    CHECK(row_index_args(ctx, "mm_scatter_rows", out, src, idx, false, false) == 0);
    return mm_tensor_numel(src) ? DISPATCH(scatter_rows, out, src, idx) : 0;
}

int mm_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    ENTER(ctx);
    CHECK(row_index_args(ctx, "mm_scatter_add_rows", out, src, idx, false, true) == 0);
    return mm_tensor_numel(src) ? DISPATCH(scatter_add_rows, out, src, idx) : 0;
}

/* ============================================================ convolutions */

static int conv_common(mm_ctx *ctx, const char *op, const mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                       const mm_tensor *bias, int rank)
{
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "x", x) == 0 && arg_float(ctx, op, "w", w) == 0);
    if (x->dtype != w->dtype)
        return mm_ctx_fail(ctx, "%s: x is %s and w is %s; they must share a dtype", op, mm_dtype_name(x->dtype),
                           mm_dtype_name(w->dtype));
    if (x->ndim != rank + 2 || w->ndim != rank + 2 || out->ndim != rank + 2)
        return mm_ctx_fail(ctx, "%s: x, w and out must have rank %d", op, rank + 2);
    CHECK(contiguous(ctx, op, "x", x) == 0 && contiguous(ctx, op, "w", w) == 0 &&
          contiguous(ctx, op, "out", out) == 0);
    if (bias)
        CHECK(arg_float(ctx, op, "bias", bias) == 0);
    return 0;
}

static int pget(const int *v, int i) { return v[i] > 0 ? v[i] : 1; }

static int conv_forward(mm_ctx *ctx, const char *op, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                        const mm_tensor *bias, const mm_conv_params *p, int rank)
{
    CHECK(conv_common(ctx, op, out, x, w, bias, rank) == 0);
    mm_conv_params z = {0};
    if (!p)
        p = &z;
    int g = p->groups > 0 ? p->groups : 1;
    int64_t cin = x->shape[1], cout = w->shape[0];
    if (cin % g || cout % g || w->shape[1] != cin / g)
        return mm_ctx_fail(ctx, "%s: w [%lld, %lld, ...] does not fit %lld input channels in %d groups", op,
                           (long long)w->shape[0], (long long)w->shape[1], (long long)cin, g);
    int64_t want[5] = {x->shape[0], cout};
    for (int d = 0; d < rank; d++) {
        int s = pget(p->stride, d), dl = pget(p->dilation, d);
        if (p->pad[d][0] < 0 || p->pad[d][1] < 0)
            return mm_ctx_fail(ctx, "%s: negative padding", op);
        int64_t span = x->shape[2 + d] + p->pad[d][0] + p->pad[d][1] - (int64_t)dl * (w->shape[2 + d] - 1) - 1;
        if (span < 0)
            return mm_ctx_fail(ctx, "%s: kernel larger than the padded input along spatial dim %d", op, d);
        want[2 + d] = span / s + 1;
    }
    CHECK(expect_shape(ctx, op, "out", out, rank + 2, want) == 0);
    if (bias)
        CHECK(vec(ctx, op, "bias", bias, cout) == 0);
    return 0;
}

/* mm_conv1d and mm_conv3d: one validation, then the backend's kernel of the rank. */
static int conv_forward_run(mm_ctx *ctx, const char *op, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                            const mm_tensor *bias, const mm_conv_params *p, int rank)
{
    ENTER(ctx);
    CHECK(conv_forward(ctx, op, out, x, w, bias, p, rank) == 0);
    if (mm_tensor_numel(out) == 0)
        return 0;
    mm_conv_params z = {0};
    if (!p)
        p = &z;
    return rank == 1 ? DISPATCH(conv1d, out, x, w, bias, p) : DISPATCH(conv3d, out, x, w, bias, p);
}

int mm_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
              const mm_conv_params *p)
{
    return conv_forward_run(ctx, "mm_conv1d", out, x, w, bias, p, 1);
}

int mm_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
              const mm_conv_params *p)
{
    return conv_forward_run(ctx, "mm_conv3d", out, x, w, bias, p, 3);
}

int mm_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                        const mm_conv_params *p)
{
    static const char *op = "mm_conv_transpose1d";
    ENTER(ctx);
    CHECK(conv_common(ctx, op, out, x, w, bias, 1) == 0);
    mm_conv_params z = {0};
    if (!p)
        p = &z;
    int g = p->groups > 0 ? p->groups : 1;
    int64_t cin = x->shape[1];
    if (w->shape[0] != cin || cin % g)
        return mm_ctx_fail(ctx, "%s: w [%lld, %lld, %lld] does not fit %lld input channels in %d groups", op,
                           (long long)w->shape[0], (long long)w->shape[1], (long long)w->shape[2], (long long)cin, g);
    int64_t cout = w->shape[1] * g;
    int s = pget(p->stride, 0), dl = pget(p->dilation, 0);
    if (p->pad[0][0] < 0 || p->pad[0][1] < 0 || p->output_pad[0] < 0)
        return mm_ctx_fail(ctx, "%s: negative padding", op);
    int64_t lout = (x->shape[2] - 1) * s - p->pad[0][0] - p->pad[0][1] + (int64_t)dl * (w->shape[2] - 1) + 1 +
                   p->output_pad[0];
    if (lout < 0)
        return mm_ctx_fail(ctx, "%s: negative output length", op);
    const int64_t want[3] = {x->shape[0], cout, lout};
    CHECK(expect_shape(ctx, op, "out", out, 3, want) == 0);
    if (bias)
        CHECK(vec(ctx, op, "bias", bias, cout) == 0);
    return mm_tensor_numel(out) ? DISPATCH(conv_transpose1d, out, x, w, bias, p) : 0;
}

int mm_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value)
{
    static const char *op = "mm_pad";
    ENTER(ctx);
    CHECK(arg(ctx, op, "out", out) == 0 && arg(ctx, op, "x", x) == 0);
    if (out->dtype != x->dtype)
        return mm_ctx_fail(ctx, "mm_pad: out and x dtypes differ");
    if ((unsigned)mode > MM_PAD_REPLICATE)
        return mm_ctx_fail(ctx, "mm_pad: unknown mode %d", (int)mode);
    int64_t want[MM_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (pads[d][0] < 0 || pads[d][1] < 0)
            return mm_ctx_fail(ctx, "mm_pad: negative pad on dim %d (crop with mm_tensor_narrow)", d);
        if (mode == MM_PAD_REFLECT && (pads[d][0] >= x->shape[d] || pads[d][1] >= x->shape[d]))
            return mm_ctx_fail(ctx, "mm_pad: reflect pad %d/%d needs a dim longer than the pad (dim %d has %lld)",
                               pads[d][0], pads[d][1], d, (long long)x->shape[d]);
        if (mode == MM_PAD_REPLICATE && x->shape[d] == 0 && (pads[d][0] || pads[d][1]))
            return mm_ctx_fail(ctx, "mm_pad: cannot replicate an empty dim");
        want[d] = x->shape[d] + pads[d][0] + pads[d][1];
    }
    CHECK(expect_shape(ctx, op, "out", out, x->ndim, want) == 0);
    return mm_tensor_numel(out) ? DISPATCH(pad, out, x, pads, mode, value) : 0;
}

int mm_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode, bool align_corners)
{
    static const char *op = "mm_interpolate";
    ENTER(ctx);
    CHECK(arg_float(ctx, op, "out", out) == 0 && arg_float(ctx, op, "x", x) == 0);
    CHECK(contiguous(ctx, op, "x", x) == 0 && contiguous(ctx, op, "out", out) == 0);
    if (spatial < 1 || spatial > 3 || x->ndim < spatial + 1 || out->ndim != x->ndim)
        return mm_ctx_fail(ctx, "mm_interpolate: 1..3 spatial dims after at least one batch/channel dim");
    if ((unsigned)mode > MM_INTERP_LINEAR)
        return mm_ctx_fail(ctx, "mm_interpolate: unknown mode %d", (int)mode);
    for (int d = 0; d < x->ndim - spatial; d++)
        if (out->shape[d] != x->shape[d])
            return mm_ctx_fail(ctx, "mm_interpolate: dim %d differs (%lld vs %lld); only the last %d may change", d,
                               (long long)out->shape[d], (long long)x->shape[d], spatial);
    for (int d = x->ndim - spatial; d < x->ndim; d++)
        if (x->shape[d] == 0 && out->shape[d] != 0)
            return mm_ctx_fail(ctx, "mm_interpolate: cannot resize an empty dim");
    return mm_tensor_numel(out) ? DISPATCH(interpolate, out, x, spatial, mode, align_corners) : 0;
}
