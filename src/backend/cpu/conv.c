/* Convolutions, padding and resampling on the CPU.
 *
 * conv1d/conv3d: im2col in chunks of output positions (so a video-sized
 * input never needs its full column matrix) followed by the blocked GEMM;
 * conv_transpose1d: a direct scatter loop per output row (BigVGAN-sized
 * channel counts are small); pad and interpolate: index mapping loops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

#define POS_CHUNK 2048

static int p1(int v) { return v > 0 ? v : 1; }

/* Geometry of an N-d conv (N = 3; a 1-D conv uses T = H = 1). */
typedef struct conv_geo {
    int64_t cin_g, cout_g, in[3], out[3], k[3];
    int stride[3], dil[3], pad[3];
    int64_t kvol, opos, ipos;
} conv_geo;

typedef struct col_job {
    const conv_geo *g;
    const float *xf; /* the group's input channels in f32: [cin_g][T][H][W] */
    float *col;      /* [cin_g * kvol][np] */
    int64_t p0, np;
} col_job;

/* One im2col row (input channel ci, kernel tap kt, kh, kw) over output
 * positions [p0, p0 + np): runs along W are copied with one bounds check
 * each, so nothing is divided or converted per element. */
static void fill_cols(void *user, int64_t begin, int64_t end)
{
    const col_job *j = user;
    const conv_geo *g = j->g;
    for (int64_t row = begin; row < end; row++) {
        int64_t ci = row / g->kvol, kr = row % g->kvol;
        int64_t kt = kr / (g->k[1] * g->k[2]), kh = (kr / g->k[2]) % g->k[1], kw = kr % g->k[2];
        float *dst = j->col + row * j->np;
        int64_t ot = j->p0 / (g->out[1] * g->out[2]), oh = (j->p0 / g->out[2]) % g->out[1], ow = j->p0 % g->out[2];
        for (int64_t q = 0; q < j->np;) {
            int64_t n = g->out[2] - ow < j->np - q ? g->out[2] - ow : j->np - q;
            int64_t it = ot * g->stride[0] + kt * g->dil[0] - g->pad[0];
            int64_t ih = oh * g->stride[1] + kh * g->dil[1] - g->pad[1];
            if (it < 0 || it >= g->in[0] || ih < 0 || ih >= g->in[1]) {
                memset(dst + q, 0, (size_t)n * 4);
            } else {
                const float *line = j->xf + ((ci * g->in[0] + it) * g->in[1] + ih) * g->in[2];
                int64_t iw = ow * g->stride[2] + kw * g->dil[2] - g->pad[2], s = g->stride[2];
                for (int64_t t = 0; t < n; t++, iw += s)
                    dst[q + t] = iw >= 0 && iw < g->in[2] ? line[iw] : 0.0f;
            }
            q += n;
            ow += n;
            if (ow == g->out[2]) {
                ow = 0;
                if (++oh == g->out[1]) {
                    oh = 0;
                    ot++;
                }
            }
        }
    }
}

typedef struct cvt_job {
    const void *src;
    mm_dtype dt;
    float *dst;
    int64_t plane;
} cvt_job;

static void convert_planes(void *user, int64_t begin, int64_t end)
{
    const cvt_job *j = user;
    for (int64_t c = begin; c < end; c++)
        cpu_load_f32(j->dst + c * j->plane, cpu_at(j->src, j->dt, c * j->plane), j->dt, j->plane, 1);
}

static int conv_nd(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                   const mm_conv_params *p, int rank)
{
    conv_geo g = {0};
    int groups = p->groups > 0 ? p->groups : 1;
    for (int d = 0; d < 3; d++) {
        int sd = d - (3 - rank); /* spatial dim index in the tensors, or < 0 for a missing one */
        g.in[d] = sd >= 0 ? x->shape[2 + sd] : 1;
        g.out[d] = sd >= 0 ? out->shape[2 + sd] : 1;
        g.k[d] = sd >= 0 ? w->shape[2 + sd] : 1;
        g.stride[d] = sd >= 0 ? p1(p->stride[sd]) : 1;
        g.dil[d] = sd >= 0 ? p1(p->dilation[sd]) : 1;
        g.pad[d] = sd >= 0 ? p->pad[sd][0] : 0;
    }
    g.cin_g = x->shape[1] / groups;
    g.cout_g = w->shape[0] / groups;
    g.kvol = g.k[0] * g.k[1] * g.k[2];
    g.opos = g.out[0] * g.out[1] * g.out[2];
    g.ipos = g.in[0] * g.in[1] * g.in[2];
    int64_t krows = g.cin_g * g.kvol;
    int64_t chunk = g.opos < POS_CHUNK ? g.opos : POS_CHUNK;
    float *col = malloc((size_t)(krows ? krows : 1) * (size_t)chunk * 4);
    int64_t xn = g.cin_g * g.ipos;
    float *xf = malloc((size_t)(xn > 0 ? xn : 1) * 4);
    if (!col || !xf) {
        free(col);
        free(xf);
        return mm_ctx_fail(ctx, "conv: out of host memory (%lld x %lld column block)", (long long)krows,
                           (long long)chunk);
    }
    for (int64_t b = 0; b < x->shape[0] && !mm_ctx_failed(ctx); b++) {
        for (int gi = 0; gi < groups; gi++) {
            cvt_job cv = {cpu_at(x->data, x->dtype, (b * x->shape[1] + gi * g.cin_g) * g.ipos), x->dtype, xf, g.ipos};
            mm_parallel_for(ctx, g.cin_g, 1, convert_planes, &cv);
            for (int64_t p0 = 0; p0 < g.opos; p0 += chunk) {
                int64_t np = g.opos - p0 < chunk ? g.opos - p0 : chunk;
                col_job cj = {&g, xf, col, p0, np};
                mm_parallel_for(ctx, krows, 1, fill_cols, &cj);
                mm_cpu_mat A = {cpu_at(w->data, w->dtype, gi * g.cout_g * krows), w->dtype, krows, 1};
                mm_cpu_mat B = {col, MM_F32, np, 1};
                char *ob = cpu_at(out->data, out->dtype, (b * out->shape[1] + gi * g.cout_g) * g.opos + p0);
                const void *bp = bias ? cpu_at(bias->data, bias->dtype, gi * g.cout_g) : NULL;
                /* A is w's dtype, B f32: the GEMM packs both to f32 */
                mm_cpu_gemm_f32(ctx, g.cout_g, np, krows, 1.0f, A, B, bp, bias ? bias->dtype : MM_F32, true, 0.0f, ob,
                                out->dtype, g.opos);
            }
        }
    }
    free(col);
    free(xf);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int mm_cpu_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                  const mm_conv_params *p)
{
    return conv_nd(ctx, out, x, w, bias, p, 1);
}

int mm_cpu_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                  const mm_conv_params *p)
{
    return conv_nd(ctx, out, x, w, bias, p, 3);
}

/* ------------------------------------------------------- transposed conv */

typedef struct convt_job {
    mm_tensor *out;
    const mm_tensor *x, *w, *bias;
    int groups, stride, dil, pad0;
} convt_job;

static void convt_rows(void *user, int64_t begin, int64_t end)
{
    const convt_job *j = user;
    int64_t cin = j->x->shape[1], len = j->x->shape[2], cout = j->out->shape[1], lout = j->out->shape[2];
    int64_t kk = j->w->shape[2], cout_g = j->w->shape[1], cin_g = cin / j->groups;
    float *acc = malloc((size_t)(lout + len + kk) * 4);
    if (!acc)
        return;
    float *xr = acc + lout, *wr = xr + len;
    for (int64_t row = begin; row < end; row++) {
        int64_t b = row / cout, co = row % cout, gi = co / cout_g, col = co % cout_g;
        float bv = j->bias ? cpu_get_f32(cpu_at(j->bias->data, j->bias->dtype,
                                                co * (j->bias->ndim == 1 ? j->bias->stride[0] : 1)),
                                         j->bias->dtype)
                           : 0.0f;
        for (int64_t i = 0; i < lout; i++)
            acc[i] = 0.0f;
        for (int64_t ci = gi * cin_g; ci < (gi + 1) * cin_g; ci++) {
            cpu_load_f32(xr, cpu_at(j->x->data, j->x->dtype, (b * cin + ci) * len), j->x->dtype, len, 1);
            cpu_load_f32(wr, cpu_at(j->w->data, j->w->dtype, (ci * cout_g + col) * kk), j->w->dtype, kk, 1);
            for (int64_t i = 0; i < len; i++)
                for (int64_t k = 0; k < kk; k++) {
                    int64_t o = i * j->stride + k * j->dil - j->pad0;
                    if (o >= 0 && o < lout)
                        acc[o] += xr[i] * wr[k];
                }
        }
        for (int64_t i = 0; i < lout; i++)
            acc[i] += bv;
        cpu_store_f32(cpu_at(j->out->data, j->out->dtype, row * lout), j->out->dtype, 1, acc, lout);
    }
    free(acc);
}

int mm_cpu_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                            const mm_tensor *bias, const mm_conv_params *p)
{
    convt_job j = {out, x, w, bias, p->groups > 0 ? p->groups : 1, p1(p->stride[0]), p1(p->dilation[0]), p->pad[0][0]};
    mm_parallel_for(ctx, out->shape[0] * out->shape[1], 1, convt_rows, &j);
    return 0;
}

/* -------------------------------------------------------------------- pad */

typedef struct pad_job {
    mm_tensor *out;
    const mm_tensor *x;
    const int (*pads)[2];
    mm_pad_mode mode;
    unsigned char value[8];
} pad_job;

/* Source index for output index o along a dim of size n padded by `before`,
 * or -1 for the constant. */
static int64_t src_index(int64_t o, int64_t n, int before, mm_pad_mode mode)
{
    int64_t i = o - before;
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case MM_PAD_REFLECT: return i < 0 ? -i : 2 * (n - 1) - i;
    case MM_PAD_REPLICATE: return i < 0 ? 0 : n - 1;
    default: return -1;
    }
}

static void pad_rows(void *user, int64_t begin, int64_t end)
{
    const pad_job *j = user;
    const mm_tensor *o = j->out, *x = j->x;
    int nd = o->ndim;
    size_t es = cpu_elsize(o->dtype);
    int64_t cols = cpu_cols(o);
    for (int64_t r = begin; r < end; r++) {
        /* source offset of the row's leading index, or constant row */
        int64_t rr = r, soff = 0;
        bool constant = false;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t od = rr % o->shape[d];
            rr /= o->shape[d];
            int64_t sd = src_index(od, x->shape[d], j->pads[d][0], j->mode);
            if (sd < 0)
                constant = true;
            else
                soff += sd * x->stride[d];
        }
        char *dp = cpu_row_ptr(o, r);
        int64_t ds = cpu_last_stride(o), xs = nd ? x->stride[nd - 1] : 1;
        for (int64_t c = 0; c < cols; c++) {
            int64_t sc = nd ? src_index(c, x->shape[nd - 1], j->pads[nd - 1][0], j->mode) : 0;
            const void *src = (constant || sc < 0) ? (const void *)j->value : cpu_at(x->data, x->dtype, soff + sc * xs);
            memcpy(dp + c * ds * (int64_t)es, src, es);
        }
    }
}

int mm_cpu_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value)
{
    pad_job j = {out, x, pads, mode, {0}};
    cpu_set_any(j.value, out->dtype, value, true);
    mm_parallel_for(ctx, cpu_rows(out), 8, pad_rows, &j);
    return 0;
}

/* ------------------------------------------------------------ interpolate */

typedef struct interp_job {
    mm_tensor *out;
    const mm_tensor *x;
    int spatial;
    mm_interp mode;
    bool align;
    int64_t in[3], on[3], ipos, opos;
} interp_job;

/* Source coordinate and the two taps with weights along one dim. */
static void taps(int64_t o, int64_t in, int64_t on, mm_interp mode, bool align, int64_t *i0, int64_t *i1, float *w1)
{
    if (mode == MM_INTERP_NEAREST) {
        float scale = (float)in / (float)on;
        int64_t s = (int64_t)floorf((float)o * scale);
        *i0 = *i1 = s < in - 1 ? s : in - 1;
        *w1 = 0.0f;
        return;
    }
    float src;
    if (align)
        src = on > 1 ? (float)o * (float)(in - 1) / (float)(on - 1) : 0.0f;
    else {
        src = ((float)o + 0.5f) * (float)in / (float)on - 0.5f;
        if (src < 0)
            src = 0;
    }
    int64_t a = (int64_t)floorf(src);
    if (a > in - 1)
        a = in - 1;
    *i0 = a;
    *i1 = a + 1 < in ? a + 1 : in - 1;
    *w1 = src - (float)a;
}

static void interp_planes(void *user, int64_t begin, int64_t end)
{
    const interp_job *j = user;
    float *src = malloc((size_t)j->ipos * 4), *dst = malloc((size_t)j->opos * 4);
    if (!src || !dst)
        goto out;
    for (int64_t pl = begin; pl < end; pl++) {
        cpu_load_f32(src, cpu_at(j->x->data, j->x->dtype, pl * j->ipos), j->x->dtype, j->ipos, 1);
        for (int64_t p = 0; p < j->opos; p++) {
            int64_t o[3] = {p / (j->on[1] * j->on[2]), (p / j->on[2]) % j->on[1], p % j->on[2]};
            int64_t a[3], b[3];
            float w[3];
            for (int d = 0; d < 3; d++)
                taps(o[d], j->in[d], j->on[d], j->mode, j->align, &a[d], &b[d], &w[d]);
            float v = 0.0f;
            for (int c = 0; c < 8; c++) {
                float wt = 1.0f;
                int64_t idx[3];
                for (int d = 0; d < 3; d++) {
                    int hi = (c >> (2 - d)) & 1;
                    wt *= hi ? w[d] : 1.0f - w[d];
                    idx[d] = hi ? b[d] : a[d];
                }
                if (wt != 0.0f)
                    v += wt * src[(idx[0] * j->in[1] + idx[1]) * j->in[2] + idx[2]];
            }
            dst[p] = v;
        }
        cpu_store_f32(cpu_at(j->out->data, j->out->dtype, pl * j->opos), j->out->dtype, 1, dst, j->opos);
    }
out:
    free(src);
    free(dst);
}

int mm_cpu_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode,
                       bool align_corners)
{
    interp_job j = {out, x, spatial, mode, align_corners, {1, 1, 1}, {1, 1, 1}, 1, 1};
    for (int d = 0; d < spatial; d++) {
        j.in[3 - spatial + d] = x->shape[x->ndim - spatial + d];
        j.on[3 - spatial + d] = out->shape[out->ndim - spatial + d];
    }
    j.ipos = j.in[0] * j.in[1] * j.in[2];
    j.opos = j.on[0] * j.on[1] * j.on[2];
    int64_t planes = mm_tensor_numel(out) / (j.opos ? j.opos : 1);
    mm_parallel_for(ctx, planes, 1, interp_planes, &j);
    return 0;
}
