/* Row ops on the CPU: RMSNorm, LayerNorm, GroupNorm, softmax, reductions,
 * AdaLN modulation, gated residual, RoPE. Each row is loaded into an f32
 * buffer, computed in f32 and stored with one rounding. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

/* Sum of squares with 8 independent partial sums (vectorizes; the order is
 * fixed, so results do not depend on the thread count). */
static float sumsq(const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += x[i + k] * x[i + k];
    float s = 0;
    for (; i < n; i++)
        s += x[i] * x[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float sum(const float *x, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += x[i + k];
    float s = 0;
    for (; i < n; i++)
        s += x[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Loads a per-channel vector (or NULL -> fill) into f32. */
static void load_vec(float *dst, const mm_tensor *v, int64_t n, float fill)
{
    if (!v) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = fill;
        return;
    }
    cpu_load_f32(dst, v->data, v->dtype, n, v->ndim == 1 ? v->stride[0] : 1);
}

static int32_t idx_at(const mm_tensor *idx, int64_t r)
{
    return idx ? ((const int32_t *)idx->data)[r * idx->stride[0]] : 0;
}

/* Loads row t of a [T, C] table. */
static void load_table_row(float *dst, const mm_tensor *t, int64_t row, int64_t c)
{
    cpu_load_f32(dst, cpu_at(t->data, t->dtype, row * t->stride[0]), t->dtype, c, 1);
}

/* ----------------------------------------------------- norms and friends */

typedef struct row_job {
    mm_tensor *out;
    const mm_tensor *x, *w, *b, *scale, *shift, *idx;
    float eps;
    int kind;
    int64_t cols;
} row_job;

enum { K_RMS, K_LN, K_SOFTMAX, K_MOD, K_RMSMOD, K_GATED };

static void row_items(void *user, int64_t begin, int64_t end)
{
    const row_job *j = user;
    int64_t c = j->cols;
    float *buf = malloc((size_t)c * 4 * 5);
    if (!buf)
        return;
    float *w = buf + c, *b = buf + 2 * c, *sc = buf + 3 * c, *sh = buf + 4 * c;
    load_vec(w, j->w, c, 1.0f);
    load_vec(b, j->b, c, 0.0f);
    int32_t cached = -1;
    for (int64_t r = begin; r < end; r++) {
        const mm_tensor *src = j->kind == K_GATED ? j->out : j->x;
        cpu_load_f32(buf, cpu_row_ptr(src, r), src->dtype, c, 1);
        if (j->kind == K_MOD || j->kind == K_RMSMOD || j->kind == K_GATED) {
            int32_t t = idx_at(j->idx, r);
            if (t != cached) {
                load_table_row(sc, j->scale, t, c);
                if (j->shift)
                    load_table_row(sh, j->shift, t, c);
                cached = t;
            }
        }
        switch (j->kind) {
        case K_RMS:
        case K_RMSMOD: {
            float rs = 1.0f / sqrtf(sumsq(buf, c) / (float)c + j->eps);
            if (j->kind == K_RMS)
                for (int64_t i = 0; i < c; i++)
                    buf[i] = buf[i] * rs * w[i];
            else
                for (int64_t i = 0; i < c; i++)
                    buf[i] = (buf[i] * rs * w[i]) * (1.0f + sc[i]) + sh[i];
            break;
        }
        case K_LN: {
            float mean = sum(buf, c) / (float)c;
            for (int64_t i = 0; i < c; i++)
                buf[i] -= mean;
            float rs = 1.0f / sqrtf(sumsq(buf, c) / (float)c + j->eps);
            for (int64_t i = 0; i < c; i++)
                buf[i] = buf[i] * rs * w[i] + b[i];
            break;
        }
        case K_SOFTMAX: {
            float m = -INFINITY;
            for (int64_t i = 0; i < c; i++)
                m = buf[i] > m ? buf[i] : m;
            if (m == -INFINITY)
                m = 0; /* an all -inf row gives NaN in torch; keep it finite-free: 0/0 below */
            for (int64_t i = 0; i < c; i++)
                buf[i] = expf(buf[i] - m);
            float s = sum(buf, c);
            for (int64_t i = 0; i < c; i++)
                buf[i] = buf[i] / s;
            break;
        }
        case K_MOD:
            for (int64_t i = 0; i < c; i++)
                buf[i] = buf[i] * (1.0f + sc[i]) + sh[i];
            break;
        case K_GATED: {
            float *y = b; /* reuse: bias is unused here */
            cpu_load_f32(y, cpu_row_ptr(j->x, r), j->x->dtype, c, 1);
            for (int64_t i = 0; i < c; i++)
                buf[i] = buf[i] + sc[i] * y[i];
            break;
        }
        }
        cpu_store_f32(cpu_row_ptr(j->out, r), j->out->dtype, 1, buf, c);
    }
    free(buf);
}

static int run_rows(mm_ctx *ctx, row_job *j)
{
    j->cols = cpu_cols(j->x);
    int64_t rows = cpu_rows(j->x);
    int64_t grain = j->cols >= 4096 ? 1 : 4096 / (j->cols ? j->cols : 1);
    mm_parallel_for(ctx, rows, grain, row_items, j);
    return 0;
}

int mm_cpu_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps)
{
    row_job j = {.out = out, .x = x, .w = weight, .eps = eps, .kind = K_RMS};
    return run_rows(ctx, &j);
}

int mm_cpu_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                     float eps)
{
    row_job j = {.out = out, .x = x, .w = weight, .b = bias, .eps = eps, .kind = K_LN};
    return run_rows(ctx, &j);
}

int mm_cpu_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x)
{
    row_job j = {.out = out, .x = x, .kind = K_SOFTMAX};
    return run_rows(ctx, &j);
}

int mm_cpu_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,
                    const mm_tensor *idx)
{
    row_job j = {.out = out, .x = x, .scale = scale, .shift = shift, .idx = idx, .kind = K_MOD};
    return run_rows(ctx, &j);
}

int mm_cpu_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,
                            const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx)
{
    row_job j = {.out = out, .x = x, .w = weight, .eps = eps, .scale = scale, .shift = shift, .idx = idx,
                 .kind = K_RMSMOD};
    return run_rows(ctx, &j);
}

int mm_cpu_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx)
{
    row_job j = {.out = x, .x = y, .scale = gate, .idx = idx, .kind = K_GATED};
    return run_rows(ctx, &j);
}

/* ------------------------------------------------------------- reductions */

typedef struct reduce_job {
    mm_tensor *out;
    const mm_tensor *x;
    mm_reduce op;
} reduce_job;

static void reduce_items(void *user, int64_t begin, int64_t end)
{
    const reduce_job *j = user;
    int64_t c = cpu_cols(j->x);
    float *buf = malloc((size_t)(c ? c : 1) * 4);
    if (!buf)
        return;
    for (int64_t r = begin; r < end; r++) {
        cpu_load_f32(buf, cpu_row_ptr(j->x, r), j->x->dtype, c, 1);
        double acc;
        switch (j->op) {
        case MM_REDUCE_SUM:
        case MM_REDUCE_MEAN:
            acc = 0;
            for (int64_t i = 0; i < c; i++)
                acc += buf[i];
            if (j->op == MM_REDUCE_MEAN)
                acc = c ? acc / (double)c : NAN;
            break;
        case MM_REDUCE_MAX:
            acc = -INFINITY;
            for (int64_t i = 0; i < c; i++)
                acc = buf[i] > acc || isnan(buf[i]) ? buf[i] : acc;
            break;
        case MM_REDUCE_MIN:
            acc = INFINITY;
            for (int64_t i = 0; i < c; i++)
                acc = buf[i] < acc || isnan(buf[i]) ? buf[i] : acc;
            break;
        default: /* ABSMAX */
            acc = 0;
            for (int64_t i = 0; i < c; i++)
                acc = fabsf(buf[i]) > acc || isnan(buf[i]) ? fabsf(buf[i]) : acc;
            break;
        }
        float v = (float)acc;
        /* out has the leading dims of x: its element r in row-major order */
        int64_t off = 0, rr = r;
        for (int d = j->out->ndim - 1; d >= 0; d--) {
            off += (rr % j->out->shape[d]) * j->out->stride[d];
            rr /= j->out->shape[d];
        }
        cpu_store_f32(cpu_at(j->out->data, j->out->dtype, off), j->out->dtype, 1, &v, 1);
    }
    free(buf);
}

int mm_cpu_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op)
{
    reduce_job j = {out, x, op};
    mm_parallel_for(ctx, cpu_rows(x), 16, reduce_items, &j);
    return 0;
}

/* -------------------------------------------------------------- GroupNorm */

typedef struct gn_job {
    mm_tensor *out;
    const mm_tensor *x, *w, *b;
    int groups;
    float eps;
    bool per_frame;
    int64_t n_, c, frames, inner; /* inner = positions per channel per frame */
} gn_job;

static void gn_items(void *user, int64_t begin, int64_t end)
{
    const gn_job *j = user;
    int64_t cpg = j->c / j->groups;
    float *buf = malloc((size_t)(j->inner ? j->inner : 1) * 4);
    if (!buf)
        return;
    for (int64_t it = begin; it < end; it++) {
        int64_t f = it % j->frames, g = (it / j->frames) % j->groups, n = it / j->frames / j->groups;
        /* element offset of (n, channel ch, frame f, position 0) */
#define GN_OFF(ch) ((((n)*j->c + (ch)) * j->frames + f) * j->inner)
        double s = 0;
        for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ch++) {
            cpu_load_f32(buf, cpu_at(j->x->data, j->x->dtype, GN_OFF(ch)), j->x->dtype, j->inner, 1);
            for (int64_t i = 0; i < j->inner; i++)
                s += buf[i];
        }
        double cnt = (double)(cpg * j->inner), mean = s / cnt, v = 0;
        for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ch++) {
            cpu_load_f32(buf, cpu_at(j->x->data, j->x->dtype, GN_OFF(ch)), j->x->dtype, j->inner, 1);
            for (int64_t i = 0; i < j->inner; i++)
                v += ((double)buf[i] - mean) * ((double)buf[i] - mean);
        }
        float meanf = (float)mean, rs = (float)(1.0 / sqrt(v / cnt + (double)j->eps));
        for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ch++) {
            float wv = 1.0f, bv = 0.0f;
            if (j->w)
                wv = cpu_get_f32(cpu_at(j->w->data, j->w->dtype, ch * (j->w->ndim == 1 ? j->w->stride[0] : 1)),
                                 j->w->dtype);
            if (j->b)
                bv = cpu_get_f32(cpu_at(j->b->data, j->b->dtype, ch * (j->b->ndim == 1 ? j->b->stride[0] : 1)),
                                 j->b->dtype);
            cpu_load_f32(buf, cpu_at(j->x->data, j->x->dtype, GN_OFF(ch)), j->x->dtype, j->inner, 1);
            for (int64_t i = 0; i < j->inner; i++)
                buf[i] = (buf[i] - meanf) * rs * wv + bv;
            cpu_store_f32(cpu_at(j->out->data, j->out->dtype, GN_OFF(ch)), j->out->dtype, 1, buf, j->inner);
        }
#undef GN_OFF
    }
    free(buf);
}

int mm_cpu_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                     int groups, float eps, bool per_frame)
{
    gn_job j = {out, x, weight, bias, groups, eps, per_frame, x->shape[0], x->shape[1], 1, 1};
    int64_t rest = 1;
    for (int d = 2; d < x->ndim; d++)
        rest *= x->shape[d];
    if (per_frame) {
        j.frames = x->shape[2];
        j.inner = x->shape[3] * x->shape[4];
    } else {
        j.inner = rest;
    }
    mm_parallel_for(ctx, j.n_ * groups * j.frames, 1, gn_items, &j);
    return 0;
}

/* ------------------------------------------------------------------- RoPE */

typedef struct rope_job {
    mm_tensor *out;
    const mm_tensor *x, *cos, *sin;
    int rot;
} rope_job;

static void rope_items(void *user, int64_t begin, int64_t end)
{
    const rope_job *j = user;
    int64_t h = j->x->shape[1], d = j->x->shape[2];
    int half = j->rot / 2;
    float *buf = malloc((size_t)(d + 2 * j->rot + 1) * 4);
    if (!buf)
        return;
    float *cs = buf + d, *sn = cs + j->rot;
    int64_t cached = -1;
    for (int64_t r = begin; r < end; r++) {
        int64_t s = r / h;
        if (s != cached) {
            cpu_load_f32(cs, cpu_at(j->cos->data, j->cos->dtype, s * j->cos->stride[0]), j->cos->dtype, j->rot, 1);
            cpu_load_f32(sn, cpu_at(j->sin->data, j->sin->dtype, s * j->sin->stride[0]), j->sin->dtype, j->rot, 1);
            cached = s;
        }
        cpu_load_f32(buf, cpu_row_ptr(j->x, r), j->x->dtype, d, 1);
        for (int i = 0; i < half; i++) {
            float a = buf[i], b = buf[i + half];
            buf[i] = a * cs[i] - b * sn[i];
            buf[i + half] = b * cs[i + half] + a * sn[i + half];
        }
        cpu_store_f32(cpu_row_ptr(j->out, r), j->out->dtype, 1, buf, d);
    }
    free(buf);
}

int mm_cpu_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin,
                int rot_dim)
{
    rope_job j = {out, x, cos, sin, rot_dim};
    mm_parallel_for(ctx, cpu_rows(x), 64, rope_items, &j);
    return 0;
}
