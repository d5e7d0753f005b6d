/* Elementwise ops on the CPU: copy/convert, fill, add, mul, axpby, clamp,
 * activations, gated units, snake. Every op runs through one strided engine:
 * the work is cut into (row, column block) items, each item loads its inputs
 * into f32 buffers, applies the op, and stores with one rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

#define EW_BLOCK 1024

typedef void (*ew_fn)(float *out, const float *const *in, int64_t n, const void *params);

typedef struct ew_job {
    mm_tensor *out;
    const mm_tensor *in[3];
    int nin;
    ew_fn fn;
    const void *params;
    int64_t cols, col_blocks;
} ew_job;

/* A contiguous tensor seen as one row of numel elements (so the blocks are
 * long even when the last dim is short). */
static mm_tensor flat(const mm_tensor *t)
{
    mm_tensor v = *t;
    v.ndim = 1;
    v.shape[0] = mm_tensor_numel(t);
    v.stride[0] = 1;
    return v;
}

static void ew_items(void *user, int64_t begin, int64_t end)
{
    const ew_job *j = user;
    float inbuf[3][EW_BLOCK], outbuf[EW_BLOCK];
    const float *in[3] = {inbuf[0], inbuf[1], inbuf[2]};
    for (int64_t it = begin; it < end; it++) {
        int64_t r = it / j->col_blocks, c0 = (it % j->col_blocks) * EW_BLOCK;
        int64_t n = j->cols - c0 < EW_BLOCK ? j->cols - c0 : EW_BLOCK;
        for (int i = 0; i < j->nin; i++) {
            const mm_tensor *t = j->in[i];
            int64_t ls = cpu_last_stride(t);
            cpu_load_f32(inbuf[i], cpu_at(t->data, t->dtype, cpu_row_offset(t, r) + c0 * ls), t->dtype, n, ls);
        }
        j->fn(outbuf, in, n, j->params);
        int64_t ls = cpu_last_stride(j->out);
        cpu_store_f32(cpu_at(j->out->data, j->out->dtype, cpu_row_offset(j->out, r) + c0 * ls), j->out->dtype, ls,
                      outbuf, n);
    }
}

static int ew_run(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *c, ew_fn fn,
                  const void *params)
{
    const mm_tensor *in[3] = {a, b, c};
    int nin = c ? 3 : b ? 2 : a ? 1 : 0;
    bool all_contig = mm_tensor_is_contiguous(out);
    for (int i = 0; i < nin; i++)
        all_contig = all_contig && mm_tensor_is_contiguous(in[i]);
    mm_tensor fo, fi[3];
    ew_job j = {.out = out, .nin = nin, .fn = fn, .params = params};
    if (all_contig) {
        fo = flat(out);
        j.out = &fo;
        for (int i = 0; i < nin; i++) {
            fi[i] = flat(in[i]);
            j.in[i] = &fi[i];
        }
    } else {
        for (int i = 0; i < nin; i++)
            j.in[i] = in[i];
    }
    j.cols = cpu_cols(j.out);
    j.col_blocks = (j.cols + EW_BLOCK - 1) / EW_BLOCK;
    if (j.cols == 0)
        return 0;
    int64_t items = cpu_rows(j.out) * j.col_blocks;
    mm_parallel_for(ctx, items, 4, ew_items, &j);
    return 0;
}

/* ------------------------------------------------------------------ copy */

static void f_copy(float *o, const float *const *in, int64_t n, const void *p)
{
    (void)p;
    memcpy(o, in[0], (size_t)n * 4);
}

typedef struct copy_job {
    mm_tensor *dst;
    const mm_tensor *src;
} copy_job;

static void copy_rows_any(void *user, int64_t begin, int64_t end)
{
    const copy_job *j = user;
    mm_dtype dt = j->dst->dtype, st = j->src->dtype;
    int64_t cols = cpu_cols(j->dst), ds = cpu_last_stride(j->dst), ss = cpu_last_stride(j->src);
    size_t es = cpu_elsize(dt);
    bool ff = cpu_is_float(st) || st == MM_F64 || st == MM_F8_E4M3;
    for (int64_t r = begin; r < end; r++) {
        char *d = cpu_at(j->dst->data, dt, cpu_row_offset(j->dst, r));
        const char *s = cpu_at(j->src->data, st, cpu_row_offset(j->src, r));
        if (dt == st) {
            if (ds == 1 && ss == 1)
                memcpy(d, s, (size_t)cols * es);
            else
                for (int64_t c = 0; c < cols; c++)
                    memcpy(d + c * ds * (int64_t)es, s + c * ss * (int64_t)es, es);
        } else {
            for (int64_t c = 0; c < cols; c++)
                cpu_set_any(d + c * ds * (int64_t)es, dt, cpu_get_any(s + c * ss * (int64_t)cpu_elsize(st), st), ff);
        }
    }
}

int mm_cpu_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src)
{
    if (cpu_is_float(dst->dtype) && cpu_is_float(src->dtype) && dst->dtype != src->dtype)
        return ew_run(ctx, dst, src, NULL, NULL, f_copy, NULL);
    copy_job j = {dst, src};
    mm_tensor fd, fs;
    if (mm_tensor_is_contiguous(dst) && mm_tensor_is_contiguous(src)) {
        fd = flat(dst);
        fs = flat(src);
        if (dst->dtype == src->dtype) { /* one memcpy per 64k-element piece */
            int64_t n = fd.shape[0], piece = 1 << 16;
            fd.ndim = fs.ndim = 2;
            int64_t rows = (n + piece - 1) / piece;
            if (rows * piece == n) {
                fd.shape[0] = fs.shape[0] = rows;
                fd.shape[1] = fs.shape[1] = piece;
                fd.stride[0] = fs.stride[0] = piece;
                fd.stride[1] = fs.stride[1] = 1;
            } else {
                fd.ndim = fs.ndim = 1;
            }
        }
        j.dst = &fd;
        j.src = &fs;
    }
    mm_parallel_for(ctx, cpu_rows(j.dst), 1, copy_rows_any, &j);
    return 0;
}

typedef struct fill_job {
    mm_tensor *dst;
    double v;
} fill_job;

static void fill_rows(void *user, int64_t begin, int64_t end)
{
    const fill_job *j = user;
    mm_dtype t = j->dst->dtype;
    size_t es = cpu_elsize(t);
    unsigned char one[8];
    cpu_set_any(one, t, j->v, true);
    int64_t cols = cpu_cols(j->dst), s = cpu_last_stride(j->dst);
    for (int64_t r = begin; r < end; r++) {
        char *d = cpu_at(j->dst->data, t, cpu_row_offset(j->dst, r));
        for (int64_t c = 0; c < cols; c++)
            memcpy(d + c * s * (int64_t)es, one, es);
    }
}

int mm_cpu_fill(mm_ctx *ctx, mm_tensor *dst, double value)
{
    fill_job j = {dst, value};
    mm_parallel_for(ctx, cpu_rows(dst), 16, fill_rows, &j);
    return 0;
}

/* ------------------------------------------------------------ arithmetic */

static void f_add(float *o, const float *const *in, int64_t n, const void *p)
{
    (void)p;
    for (int64_t i = 0; i < n; i++)
        o[i] = in[0][i] + in[1][i];
}

static void f_mul(float *o, const float *const *in, int64_t n, const void *p)
{
    (void)p;
    for (int64_t i = 0; i < n; i++)
        o[i] = in[0][i] * in[1][i];
}

typedef struct ab {
    float alpha, beta;
} ab;

static void f_axpby(float *o, const float *const *in, int64_t n, const void *p)
{
    const ab *c = p;
    for (int64_t i = 0; i < n; i++)
        o[i] = c->alpha * in[0][i] + c->beta * in[1][i];
}

static void f_axpb(float *o, const float *const *in, int64_t n, const void *p)
{
    const ab *c = p;
    for (int64_t i = 0; i < n; i++)
        o[i] = c->alpha * in[0][i] + c->beta;
}

static void f_clamp(float *o, const float *const *in, int64_t n, const void *p)
{
    const ab *c = p;
    for (int64_t i = 0; i < n; i++) {
        float v = in[0][i];
        o[i] = v < c->alpha ? c->alpha : v > c->beta ? c->beta : v;
    }
}

int mm_cpu_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return ew_run(ctx, out, a, b, NULL, f_add, NULL);
}

int mm_cpu_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return ew_run(ctx, out, a, b, NULL, f_mul, NULL);
}

int mm_cpu_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b)
{
    ab c = {alpha, beta};
    return b ? ew_run(ctx, out, a, b, NULL, f_axpby, &c) : ew_run(ctx, out, a, NULL, NULL, f_axpb, &c);
}

int mm_cpu_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi)
{
    ab c = {lo, hi};
    return ew_run(ctx, out, x, NULL, NULL, f_clamp, &c);
}

/* ----------------------------------------------------------- activations */

static inline float act1(float x, mm_act a)
{
    switch (a) {
    case MM_ACT_SILU: return x / (1.0f + expf(-x));
    case MM_ACT_GELU_TANH: {
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case MM_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case MM_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case MM_ACT_TANH: return tanhf(x);
    case MM_ACT_RELU: return x > 0 ? x : 0.0f;
    case MM_ACT_EXP: return expf(x);
    default: return x;
    }
}

static void f_act(float *o, const float *const *in, int64_t n, const void *p)
{
    mm_act a = *(const mm_act *)p;
    for (int64_t i = 0; i < n; i++)
        o[i] = act1(in[0][i], a);
}

static void f_glu(float *o, const float *const *in, int64_t n, const void *p)
{
    mm_act a = *(const mm_act *)p;
    for (int64_t i = 0; i < n; i++)
        o[i] = act1(in[0][i], a) * in[1][i];
}

int mm_cpu_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act)
{
    return ew_run(ctx, out, x, NULL, NULL, f_act, &act);
}

int mm_cpu_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act)
{
    return ew_run(ctx, out, gate, up, NULL, f_glu, &act);
}

/* ----------------------------------------------------------------- snake */

typedef struct snake_job {
    mm_tensor *out;
    const mm_tensor *x, *alpha, *beta;
} snake_job;

static void snake_rows(void *user, int64_t begin, int64_t end)
{
    const snake_job *j = user;
    int64_t c_n = j->x->shape[1], len = j->x->shape[2];
    float *buf = malloc((size_t)len * 4);
    if (!buf)
        return;
    for (int64_t r = begin; r < end; r++) {
        int64_t ch = r % c_n;
        int64_t as = j->alpha->ndim == 1 ? j->alpha->stride[0] : 1;
        float a = cpu_get_f32(cpu_at(j->alpha->data, j->alpha->dtype, ch * as), j->alpha->dtype), den;
        if (j->beta) {
            int64_t bs = j->beta->ndim == 1 ? j->beta->stride[0] : 1;
            float b = cpu_get_f32(cpu_at(j->beta->data, j->beta->dtype, ch * bs), j->beta->dtype);
            a = expf(a);
            den = expf(b) + 1e-9f;
        } else {
            den = a + 1e-9f;
        }
        cpu_load_f32(buf, cpu_row_ptr(j->x, r), j->x->dtype, len, 1);
        for (int64_t i = 0; i < len; i++) {
            float s = sinf(a * buf[i]);
            buf[i] = buf[i] + s * s / den;
        }
        cpu_store_f32(cpu_row_ptr(j->out, r), j->out->dtype, 1, buf, len);
    }
    free(buf);
}

int mm_cpu_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta)
{
    snake_job j = {out, x, alpha, beta};
    mm_parallel_for(ctx, cpu_rows(x), 1, snake_rows, &j);
    return 0;
}
