/* The CUDA twin of every op in backend/ops.h: maps the validated mm_tensor
 * arguments (ops.c checked shapes, dtypes and devices) onto the kernels of
 * kernels/mmk.h, on the context's stream. Small per-channel vectors and
 * modulation tables of other dtypes are converted to f32 first (the kernels
 * read them as f32; the conversion is exact for bf16/f16). A combination a
 * kernel does not support fails with a message, never computes something
 * else. Built only with the CUDA backend (cuda_ops_stub.c otherwise). */
#include "config.h"

#ifdef MMH3_HAVE_CUDA
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/fused.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/kernel_policy.h"
#include "kernels/mmk.h"

/* ------------------------------------------------------------------ helpers */

#define DEV(ctx) (mm_ctx_device(ctx).index)
#define STREAM(ctx) ((mmk_stream)mm_ctx_stream(ctx))

/* Records a kernel-side failure in the context, prefixed with the op. */
static int kfail(mm_ctx *ctx, const char *op, const mm_error *e) { return mm_ctx_fail(ctx, "%s: %s", op, e->msg); }

static mmk_view V(const mm_tensor *t)
{
    mmk_view v = {0};
    v.p = t->data;
    v.dtype = t->dtype;
    v.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        v.shape[d] = t->shape[d];
        v.stride[d] = t->stride[d];
    }
    return v;
}

static mmk_view V1(void *p, mm_dtype t, int64_t n, int64_t stride)
{
    mmk_view v = {0};
    v.p = p;
    v.dtype = t;
    v.ndim = 1;
    v.shape[0] = n;
    v.stride[0] = stride;
    return v;
}

static mmk_view V2(void *p, mm_dtype t, int64_t rows, int64_t cols, int64_t ld)
{
    mmk_view v = V1(p, t, cols, 1);
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.stride[0] = ld;
    v.stride[1] = 1;
    return v;
}

/* Temporary device buffers of one op, freed when it has been queued (a freed
 * block is only handed to work queued later on the same stream). */
typedef struct temps {
    int dev;
    int n;
    void *p[8];
} temps;

static void *temp_alloc(temps *t, size_t bytes, mm_error *e)
{
    if (t->n == 8) {
        mm_fail(e, "too many temporaries");
        return NULL;
    }
    void *p = mm_cuda_malloc(t->dev, bytes ? bytes : 4, e);
    if (p)
        t->p[t->n++] = p;
    return p;
}

static void temps_free(temps *t)
{
    for (int i = 0; i < t->n; i++)
        mm_cuda_free(t->dev, t->p[i]);
    t->n = 0;
}

/* The end of an op that staged temporaries: frees them, then reports a
 * failure (rc: the staging's, or else the kernel's, which runs only after
 * the staging succeeded) against the op. */
static int temps_done(mm_ctx *ctx, const char *op, temps *t, int rc, const mm_error *e)
{
    temps_free(t);
    return rc ? kfail(ctx, op, e) : 0;
}

/* Stride of the elements of a per-channel vector ([n], or [n,1]/[1,n] contiguous). */
/* A new f32 temporary of `floats` elements, laid out as `dst` says (its
 * pointer is filled in), holding a copy of `src`; NULL with *rc = -1 when
 * it cannot be made. */
static float *f32_temp(mm_ctx *ctx, temps *t, size_t floats, mmk_view dst, mmk_view src, mm_error *e, int *rc)
{
    float *p = temp_alloc(t, floats * 4, e);
    if (!p) {
        *rc = -1;
        return NULL;
    }
    mmk_ew c = {0};
    c.op = MMK_EW_COPY;
    dst.p = p;
    c.y = dst;
    c.a = src;
    if (mmk_ew_run(DEV(ctx), STREAM(ctx), &c, e))
        *rc = -1;
    return p;
}

static int64_t vec_stride(const mm_tensor *v) { return v->ndim == 1 ? v->stride[0] : 1; }

/* A per-channel vector as contiguous f32 on the device (no copy when it is
 * one already). NULL stays NULL. */
static const float *vec_f32(mm_ctx *ctx, temps *t, const mm_tensor *v, int64_t n, mm_error *e, int *rc)
{
    if (!v || *rc)
        return NULL;
    int64_t st = vec_stride(v);
    if (v->dtype == MM_F32 && (st == 1 || n <= 1))
        return v->data;
    return f32_temp(ctx, t, (size_t)n, V1(NULL, MM_F32, n, 1), V1(v->data, v->dtype, n, st), e, rc);
}

/* A [T, C] table (rows any stride, columns stride 1) as f32 rows; *ld gets
 * the row stride of the result. */
static const float *table_f32(mm_ctx *ctx, temps *t, const mm_tensor *tab, int64_t *ld, mm_error *e, int *rc)
{
    if (!tab || *rc)
        return NULL;
    int64_t T = tab->shape[0], C = tab->shape[1];
    if (tab->dtype == MM_F32) {
        *ld = tab->stride[0];
        return tab->data;
    }
    *ld = C;
    return f32_temp(ctx, t, (size_t)(T * C), V2(NULL, MM_F32, T, C, C), V2(tab->data, tab->dtype, T, C, tab->stride[0]),
                    e, rc);
}

/* Leading dims of a row-op tensor collapsed to one uniformly strided dim:
 * rows and the stride between rows. Fails when they do not collapse. */
static int rows_ld(const mm_tensor *x, int64_t *rows, int64_t *ld)
{
    int64_t r = 1, st = 0;
    int seen = 0;
    for (int d = x->ndim - 2; d >= 0; d--) {
        if (x->shape[d] == 1)
            continue;
        if (!seen) {
            st = x->stride[d];
            seen = 1;
        } else if (x->stride[d] != st * r) {
            return -1;
        }
        r *= x->shape[d];
    }
    *rows = r;
    *ld = seen ? st : (x->ndim ? x->shape[x->ndim - 1] : 1);
    return 0;
}

static int ew(mm_ctx *ctx, const char *op, int code, int act, const mm_tensor *y, const mm_tensor *a,
              const mm_tensor *b, float alpha, float beta, double value)
{
    mmk_ew e = {0};
    e.op = code;
    e.act = act;
    e.y = V(y);
    if (a)
        e.a = V(a);
    if (b)
        e.b = V(b);
    e.alpha = alpha;
    e.beta = beta;
    e.value = value;
    mm_error err = {{0}};
    if (mmk_ew_run(DEV(ctx), STREAM(ctx), &e, &err))
        return kfail(ctx, op, &err);
    return 0;
}

/* ------------------------------------------------------------------ policy */

void mm_cuda_ops_set_policy(const mm_kernel_policy *p)
{
    const mmk_policy k = {p->attention_hopper, p->convrot_pipe, p->qk_norm_vec, p->glue_vec, p->conv_gemm};
    mmk_policy_set(&k);
}

/* ------------------------------------------------------------------ stream */

void *mm_cuda_ops_stream(int dev, mm_error *err)
{
    int n = mm_cuda_count();
    if (dev < 0 || dev >= n) {
        mm_fail(err, n ? "CUDA device %d does not exist; this host has %d (0..%d)"
                       : "CUDA device %d: no CUDA device is usable on this host",
                dev, n, n - 1);
        return NULL;
    }
    void *s = mm_cuda_stream(dev);
    if (!s)
        mm_fail(err, "cuda:%d: could not create its compute stream", dev);
    return s;
}

int mm_cuda_ops_sync(mm_ctx *ctx)
{
    mm_error e = {{0}};
    if (mm_cuda_sync(DEV(ctx), &e))
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}

/* ------------------------------------------------------------------ elementwise */

int mm_cuda_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src)
{
    return ew(ctx, "mm_copy", MMK_EW_COPY, 0, dst, src, NULL, 0, 0, 0);
}
int mm_cuda_fill(mm_ctx *ctx, mm_tensor *dst, double value)
{
    return ew(ctx, "mm_fill", MMK_EW_FILL, 0, dst, NULL, NULL, 0, 0, value);
}
int mm_cuda_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return ew(ctx, "mm_add", MMK_EW_ADD, 0, out, a, b, 0, 0, 0);
}
int mm_cuda_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    return ew(ctx, "mm_mul", MMK_EW_MUL, 0, out, a, b, 0, 0, 0);
}
int mm_cuda_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b)
{
    return ew(ctx, "mm_axpby", b ? MMK_EW_AXPBY : MMK_EW_AXPB, 0, out, a, b, alpha, beta, 0);
}
int mm_cuda_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi)
{
    return ew(ctx, "mm_clamp", MMK_EW_CLAMP, 0, out, x, NULL, lo, hi, 0);
}
int mm_cuda_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act)
{
    return ew(ctx, "mm_activation", MMK_EW_ACT, (int)act, out, x, NULL, 0, 0, 0);
}
int mm_cuda_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act)
{
    return ew(ctx, "mm_glu", MMK_EW_GLU, (int)act, out, gate, up, 0, 0, 0);
}

int mm_cuda_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    const float *a = vec_f32(ctx, &t, alpha, x->shape[1], &e, &rc);
    const float *b = vec_f32(ctx, &t, beta, x->shape[1], &e, &rc);
    mmk_view y = V(out), xv = V(x);
    return temps_done(ctx, "mm_snake", &t, rc ? rc : mmk_snake_run(DEV(ctx), STREAM(ctx), &y, &xv, a, b, &e), &e);
}

/* ------------------------------------------------------------------ row ops */

static int norm_common(mm_ctx *ctx, const char *op, int mode, mm_tensor *out, const mm_tensor *x,
                       const mm_tensor *weight, float eps, const mm_tensor *scale, const mm_tensor *shift,
                       const mm_tensor *idx)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    int64_t cols = x->shape[x->ndim - 1], ld_sc = 0, ld_sh = 0;
    mmk_rmsnorm a = {0};
    a.x = V(x);
    a.y = V(out);
    a.mode = mode;
    a.eps = eps;
    a.w = vec_f32(ctx, &t, weight, cols, &e, &rc);
    a.scale = table_f32(ctx, &t, scale, &ld_sc, &e, &rc);
    a.shift = table_f32(ctx, &t, shift, &ld_sh, &e, &rc);
    if (rc == 0 && scale && ld_sc != ld_sh) {
        /* the kernel takes one row stride for both tables: re-lay the shift */
        int64_t T = shift->shape[0];
        a.shift = f32_temp(ctx, &t, (size_t)(T * ld_sc), V2(NULL, MM_F32, T, cols, ld_sc),
                           V2((void *)a.shift, MM_F32, T, cols, ld_sh), &e, &rc);
    }
    a.ld_mod = ld_sc;
    if (idx) {
        a.idx = idx->data;
        a.idx_stride = idx->stride[0];
    }
    return temps_done(ctx, op, &t, rc ? rc : mmk_rmsnorm_run(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

int mm_cuda_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps)
{
    return norm_common(ctx, "mm_rmsnorm", MMK_NORM_RMS, out, x, weight, eps, NULL, NULL, NULL);
}

int mm_cuda_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,
                     const mm_tensor *idx)
{
    return norm_common(ctx, "mm_modulate", MMK_NORM_MOD, out, x, NULL, 0, scale, shift, idx);
}

int mm_cuda_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,
                             const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx)
{
    return norm_common(ctx, "mm_rmsnorm_modulate", MMK_NORM_RMS_MOD, out, x, weight, eps, scale, shift, idx);
}

int mm_cuda_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                      float eps)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    int64_t cols = x->shape[x->ndim - 1];
    const float *w = vec_f32(ctx, &t, weight, cols, &e, &rc);
    const float *b = vec_f32(ctx, &t, bias, cols, &e, &rc);
    mmk_view y = V(out), xv = V(x);
    if (rc == 0)
        rc = mmk_layernorm_run(DEV(ctx), STREAM(ctx), &y, &xv, w, b, eps, &e);
    return temps_done(ctx, "mm_layernorm", &t, rc, &e);
}

int mm_cuda_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                      int groups, float eps, bool per_frame)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    int64_t c = x->shape[1];
    mmk_groupnorm a = {0};
    a.n = (int)x->shape[0];
    a.c = (int)c;
    a.groups = groups;
    int64_t rest = 1;
    for (int d = 2; d < x->ndim; d++)
        rest *= x->shape[d];
    if (per_frame) {
        a.frames = (int)x->shape[2];
        a.spatial = x->shape[3] * x->shape[4];
    } else {
        a.frames = 1;
        a.spatial = rest;
    }
    a.x = x->data;
    a.x_dtype = x->dtype;
    a.y = out->data;
    a.y_dtype = out->dtype;
    a.w = vec_f32(ctx, &t, weight, c, &e, &rc);
    a.b = vec_f32(ctx, &t, bias, c, &e, &rc);
    a.eps = eps;
    if (rc == 0 && a.spatial * a.frames > 0)
        rc = mmk_groupnorm_run(DEV(ctx), STREAM(ctx), &a, &e);
    return temps_done(ctx, "mm_groupnorm", &t, rc, &e);
}

int mm_cuda_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x)
{
    mm_error e = {{0}};
    mmk_view y = V(out), xv = V(x);
    return mmk_softmax_run(DEV(ctx), STREAM(ctx), &y, &xv, &e) ? kfail(ctx, "mm_softmax", &e) : 0;
}

int mm_cuda_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op)
{
    mm_error e = {{0}};
    mmk_view y = V(out), xv = V(x);
    return mmk_reduce_rows_run(DEV(ctx), STREAM(ctx), &y, &xv, (int)op, &e) ? kfail(ctx, "mm_reduce_rows", &e) : 0;
}

int mm_cuda_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    int64_t ld = 0;
    const float *g = table_f32(ctx, &t, gate, &ld, &e, &rc);
    mmk_view xv = V(x), yv = V(y);
    if (rc == 0)
        rc = mmk_gated_add_run(DEV(ctx), STREAM(ctx), &xv, &yv, g, ld, idx ? idx->data : NULL, idx ? idx->stride[0] : 0,
                               &e);
    return temps_done(ctx, "mm_gated_residual", &t, rc, &e);
}

int mm_cuda_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin,
                 int rot_dim)
{
    mm_error e = {{0}};
    mmk_view y = V(out), xv = V(x), c = V(cos), s = V(sin);
    return mmk_rope_run(DEV(ctx), STREAM(ctx), &y, &xv, &c, &s, rot_dim, &e) ? kfail(ctx, "mm_rope", &e) : 0;
}

/* ------------------------------------------------------------------ attention */

int mm_cuda_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                      const mm_attn_params *params)
{
    static const char *op = "mm_attention";
    int64_t d = q->shape[2];
    if (out->dtype != q->dtype)
        return mm_ctx_fail(ctx, "%s: the CUDA kernels write out in the dtype of q, k, v (got %s → %s); convert after",
                           op, mm_dtype_name(q->dtype), mm_dtype_name(out->dtype));
    if (d > 256)
        return mm_ctx_fail(ctx, "%s: head dim %lld; the CUDA kernels take up to 256", op, (long long)d);
    if (v->shape[2] != d)
        return mm_ctx_fail(ctx, "%s: the CUDA kernel needs equal q/k and v head dims (%lld vs %lld)", op,
                           (long long)d, (long long)v->shape[2]);
    mmk_attention a = {0};
    a.seq_q = (int)q->shape[0];
    a.seq_k = (int)k->shape[0];
    a.heads_q = (int)q->shape[1];
    a.heads_kv = (int)k->shape[1];
    a.head_dim = (int)d;
    a.dtype = q->dtype;
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.o = out->data;
    a.ldq = q->stride[0];
    a.ldk = k->stride[0];
    a.ldv = v->stride[0];
    a.ldo = out->stride[0];
    a.hsq = q->shape[1] > 1 ? q->stride[1] : d;
    a.hsk = k->shape[1] > 1 ? k->stride[1] : d;
    a.hsv = v->shape[1] > 1 ? v->stride[1] : d;
    a.hso = out->shape[1] > 1 ? out->stride[1] : d;
    a.scale = params && params->scale != 0.f ? params->scale : 1.f / sqrtf((float)d);
    a.causal = params && params->causal;
    a.n_seqs = 1;
    mm_error e = {{0}};
    int32_t *cu = NULL;
    if (params && params->seg_offsets && params->n_seg > 1) {
        int n = params->n_seg;
        cu = mm_cuda_malloc(DEV(ctx), (size_t)(n + 1) * 4, &e);
        if (!cu || mm_cuda_memcpy(DEV(ctx), cu, -1, params->seg_offsets, (size_t)(n + 1) * 4, &e)) {
            mm_cuda_free(DEV(ctx), cu);
            return kfail(ctx, op, &e);
        }
        int mx = 0;
        for (int i = 0; i < n; i++)
            if (params->seg_offsets[i + 1] - params->seg_offsets[i] > mx)
                mx = params->seg_offsets[i + 1] - params->seg_offsets[i];
        a.cu_seqlens_q = a.cu_seqlens_k = cu;
        a.n_seqs = n;
        a.max_seq_q = mx;
    }
    int rc = mmk_attention_run(DEV(ctx), STREAM(ctx), &a, &e);
    mm_cuda_free(DEV(ctx), cu);
    return rc ? kfail(ctx, op, &e) : 0;
}

/* ------------------------------------------------------------------ GEMM */

/* One operand of a row-major product: is it stored transposed, and its
 * leading dimension as cuBLASLt wants it (>= the stored row length). */
static void operand(const mm_tensor *t, int64_t rows, int64_t cols, int *trans, int64_t *ld)
{
    int n = t->ndim;
    int64_t s_r = t->stride[n - 2], s_c = t->stride[n - 1];
    if (cols == 1)
        s_c = 1;
    if (s_c == 1 && (rows == 1 || s_r >= cols)) {
        *trans = 0;
        *ld = rows == 1 ? cols : s_r;
        if (*ld < cols)
            *ld = cols;
    } else {
        *trans = 1;
        *ld = cols == 1 ? rows : s_c;
        if (*ld < rows)
            *ld = rows;
    }
}

int mm_cuda_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias,
                 float alpha, float beta)
{
    int na = a->ndim, nb = b->ndim;
    int64_t m = a->shape[na - 2], k = a->shape[na - 1], n = b->shape[nb - 1];
    mmk_gemm_ex g = {0};
    g.M = (int)m;
    g.N = (int)n;
    g.K = (int)k;
    g.batch = na == 3 ? (int)a->shape[0] : 1;
    g.ab_dtype = a->dtype;
    g.y_dtype = out->dtype;
    g.a = a->data;
    operand(a, m, k, &g.trans_a, &g.lda);
    g.batch_a = na == 3 ? a->stride[0] : 0;
    g.w = b->data;
    operand(b, k, n, &g.trans_w, &g.ldw);
    g.batch_w = nb == 3 ? b->stride[0] : 0;
    g.y = out->data;
    g.ldy = m == 1 ? n : out->stride[out->ndim - 2];
    if (g.ldy < n)
        g.ldy = n;
    g.batch_y = na == 3 ? out->stride[0] : 0;
    g.alpha = alpha;
    g.beta = beta;
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    if (bias) {
        if (bias->dtype == out->dtype && vec_stride(bias) == 1) {
            g.bias = bias->data;
            g.bias_dtype = bias->dtype;
        } else {
            g.bias = vec_f32(ctx, &t, bias, n, &e, &rc);
            g.bias_dtype = MM_F32;
        }
    }
    return temps_done(ctx, "mm_gemm", &t, rc ? rc : mmk_gemm_ex_run(DEV(ctx), STREAM(ctx), &g, &e), &e);
}

/* ------------------------------------------------------------------ quantization */

int mm_cuda_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group)
{
    int64_t rows, ldx, rows_o, ldo;
    if (rows_ld(x, &rows, &ldx) || rows_ld(out, &rows_o, &ldo))
        return mm_ctx_fail(ctx, "mm_hadamard_rotate: the CUDA kernel needs the leading dims to collapse into one");
    mmk_convrot_quant a = {0};
    a.rows = (int)rows;
    a.K = (int)x->shape[x->ndim - 1];
    a.group = group;
    a.x = x->data;
    a.x_dtype = x->dtype;
    a.ldx = ldx;
    a.rot = out->data;
    a.rot_dtype = out->dtype;
    a.ld_rot = ldo;
    mm_error e = {{0}};
    return mmk_convrot_quant_run(DEV(ctx), STREAM(ctx), &a, &e) ? kfail(ctx, "mm_hadamard_rotate", &e) : 0;
}

/* Where a ConvRot quant pass writes: the int8 codes q, the row scales s and,
 * when h is given, the bf16 rows the pass quantized (an adapter's input). */
static void quant_outputs(mmk_convrot_quant *a, mm_tensor *q, mm_tensor *s, mm_tensor *h)
{
    a->q = q->data;
    a->ldq = q->stride[0];
    a->s = s->data;
    a->s_stride = vec_stride(s);
    if (h) {
        a->h_out = h->data;
        a->ld_h = h->stride[0];
    }
}

int mm_cuda_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group)
{
    mmk_convrot_quant a = {0};
    a.rows = (int)x->shape[0];
    a.K = (int)x->shape[1];
    a.group = group;
    a.x = x->data;
    a.x_dtype = x->dtype;
    a.ldx = x->stride[0];
    quant_outputs(&a, q, s, NULL);
    mm_error e = {{0}};
    return mmk_convrot_quant_run(DEV(ctx), STREAM(ctx), &a, &e) ? kfail(ctx, "mm_convrot_quantize", &e) : 0;
}

/* The int8 GEMM's operands: quantized rows q_x [r, K] with per-row scales
 * s_x, quantized weights q_w [n, K] with per-output scales s_w (both scale
 * vectors made f32 in t's temporaries). */
static mmk_qlinear qlinear_operands(mm_ctx *ctx, temps *t, const mm_tensor *q_x, const mm_tensor *s_x,
                                    const mm_tensor *q_w, const mm_tensor *s_w, mm_error *e, int *rc)
{
    int64_t r = q_x->shape[0], n = q_w->shape[0];
    mmk_qlinear a = {0};
    a.M = (int)r;
    a.N = (int)n;
    a.K = (int)q_x->shape[1];
    a.xq = q_x->data;
    a.ldx = q_x->stride[0];
    a.wq = q_w->data;
    a.ldw = q_w->stride[0];
    a.sx = vec_f32(ctx, t, s_x, r, e, rc);
    a.sw = vec_f32(ctx, t, s_w, n, e, rc);
    return a;
}

int mm_cuda_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x,
                           const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *bias)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    mmk_qlinear a = qlinear_operands(ctx, &t, q_x, s_x, q_w, s_w, &e, &rc);
    a.bias = vec_f32(ctx, &t, bias, q_w->shape[0], &e, &rc);
    a.y = out->data;
    a.ldy = out->stride[0];
    a.y_dtype = out->dtype;
    return temps_done(ctx, "mm_gemm_i8_scaled", &t, rc ? rc : mmk_qlinear_i8(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

int mm_cuda_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales,
                             float scale2)
{
    mm_error e = {{0}};
    int n = (int)out->shape[0], k = (int)out->shape[1];
    return mmk_nvfp4_dequant(DEV(ctx), STREAM(ctx), n, k, 0, n, packed->data, scales->data, scale2, out->data,
                             out->dtype, &e)
               ? kfail(ctx, "mm_nvfp4_dequantize", &e)
               : 0;
}

int mm_cuda_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table,
                         const mm_tensor *scale)
{
    mm_error e = {{0}};
    mmk_view y = V(out);
    return mmk_embed_i8(DEV(ctx), STREAM(ctx), &y, ids->data, ids->stride[0], table->data, table->stride[0],
                        scale->data, vec_stride(scale), &e)
               ? kfail(ctx, "mm_embedding_i8", &e)
               : 0;
}

/* ------------------------------------------------------------------ gather / scatter */

static int index_rows(mm_ctx *ctx, const char *op, int code, mm_tensor *out, const mm_tensor *src,
                      const mm_tensor *idx)
{
    mm_error e = {{0}};
    mmk_view y = V(out), x = V(src);
    return mmk_index_rows(DEV(ctx), STREAM(ctx), code, &y, &x, idx->data, idx->stride[0], &e) ? kfail(ctx, op, &e)
                                                                                              : 0;
}
int mm_cuda_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return index_rows(ctx, "mm_gather_rows", MMK_GATHER, out, src, idx);
}
int mm_cuda_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return index_rows(ctx, "mm_scatter_rows", MMK_SCATTER, out, src, idx);
}
int mm_cuda_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return index_rows(ctx, "mm_scatter_add_rows", MMK_SCATTER_ADD, out, src, idx);
}

/* ------------------------------------------------------------------ convolutions */

static int conv(mm_ctx *ctx, const char *op, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                const mm_tensor *bias, const mm_conv_params *p, int rank, int transposed)
{
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    mmk_conv a = {0};
    a.rank = rank;
    a.n = (int)x->shape[0];
    a.cin = (int)x->shape[1];
    a.cout = (int)out->shape[1];
    a.groups = p->groups > 0 ? p->groups : 1;
    for (int d = 0; d < rank; d++) {
        a.in[d] = (int)x->shape[2 + d];
        a.k[d] = (int)w->shape[2 + d];
        a.out[d] = (int)out->shape[2 + d];
        a.stride[d] = p->stride[d];
        a.dilation[d] = p->dilation[d];
        a.pad0[d] = p->pad[d][0];
    }
    a.transposed = transposed;
    a.x = x->data;
    a.w = w->data;
    a.xw_dtype = x->dtype;
    a.bias = vec_f32(ctx, &t, bias, out->shape[1], &e, &rc);
    a.y = out->data;
    a.y_dtype = out->dtype;
    return temps_done(ctx, op, &t, rc ? rc : mmk_conv_run(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

int mm_cuda_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                   const mm_conv_params *p)
{
    return conv(ctx, "mm_conv1d", out, x, w, bias, p, 1, 0);
}
int mm_cuda_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                             const mm_tensor *bias, const mm_conv_params *p)
{
    return conv(ctx, "mm_conv_transpose1d", out, x, w, bias, p, 1, 1);
}
int mm_cuda_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                   const mm_conv_params *p)
{
    return conv(ctx, "mm_conv3d", out, x, w, bias, p, 3, 0);
}

int mm_cuda_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value)
{
    mm_error e = {{0}};
    mmk_view y = V(out), xv = V(x);
    return mmk_pad_run(DEV(ctx), STREAM(ctx), &y, &xv, pads, (int)mode, value, &e) ? kfail(ctx, "mm_pad", &e) : 0;
}

int mm_cuda_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode,
                        bool align_corners)
{
    mm_error e = {{0}};
    mmk_view y = V(out), xv = V(x);
    return mmk_interpolate_run(DEV(ctx), STREAM(ctx), &y, &xv, spatial, (int)mode, align_corners, &e)
               ? kfail(ctx, "mm_interpolate", &e)
               : 0;
}

/* ------------------------------------------------------------------ fused DiT paths (backend/fused.h) */

/* A fresh contiguous f32 copy (16-byte aligned, as the fused kernels load
 * their side vectors 4 floats at a time) of a [n] vector or a [T, C] table. */
static const float *fresh_f32(mm_ctx *ctx, temps *t, const mm_tensor *v, mm_error *e, int *rc)
{
    if (!v || *rc)
        return NULL;
    bool table = v->ndim == 2 && !(v->shape[0] == 1 || v->shape[1] == 1);
    int64_t rows = table ? v->shape[0] : 1, cols = table ? v->shape[1] : mm_tensor_numel(v);
    mmk_view src = table ? V2(v->data, v->dtype, rows, cols, v->stride[0]) : V2(v->data, v->dtype, 1, cols, 0);
    if (!table)
        src.stride[1] = vec_stride(v);
    return f32_temp(ctx, t, (size_t)(rows * cols), V2(NULL, MM_F32, rows, cols, cols), src, e, rc);
}

/* The fused passes of backend/fused.h run on a CUDA context only (model
 * code calls them where the DiT's CUDA path applies). */
static int unusable(mm_ctx *ctx, const char *op)
{
    if (mm_ctx_failed(ctx))
        return -1;
    if (mm_ctx_device(ctx).kind != MM_DEVICE_CUDA) {
        char dev[32];
        return mm_ctx_fail(ctx, "%s: a CUDA context only (this one is on %s); the portable ops compute the same", op,
                           mm_device_name(mm_ctx_device(ctx), dev, sizeof dev));
    }
    return 0;
}

static int rows_bf16(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *x)
{
    if (x->dtype != MM_BF16 || x->ndim != 2 || (x->shape[1] > 1 && x->stride[1] != 1) || x->stride[0] % 8 ||
        ((uintptr_t)x->data & 15))
        return mm_ctx_fail(ctx, "%s: %s must be a bf16 [R, C] tensor with unit column stride and 16-byte aligned rows",
                           op, name);
    return 0;
}

static int quant_out(mm_ctx *ctx, const char *op, const mm_tensor *q, const mm_tensor *s, int64_t r, int64_t k)
{
    if (q->dtype != MM_I8 || q->ndim != 2 || q->shape[0] != r || q->shape[1] != k || q->stride[1] != 1)
        return mm_ctx_fail(ctx, "%s: q must be I8 [%lld, %lld] with unit column stride", op, (long long)r, (long long)k);
    if (s->dtype != MM_F32 || mm_tensor_numel(s) != r)
        return mm_ctx_fail(ctx, "%s: s must be F32 with %lld elements", op, (long long)r);
    return 0;
}

/* The optional bf16 h of a fused pass: [R, K] like x's first K columns. */
static int h_side_out(mm_ctx *ctx, const char *op, const mm_tensor *h, int64_t r, int64_t k)
{
    if (!h)
        return 0;
    if (rows_bf16(ctx, op, "h", h))
        return -1;
    if (h->shape[0] != r || h->shape[1] != k)
        return mm_ctx_fail(ctx, "%s: h must be [%lld, %lld]", op, (long long)r, (long long)k);
    return 0;
}

int mm_fused_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *x,
                                      const mm_tensor *weight, float eps, const mm_tensor *scale,
                                      const mm_tensor *shift, const mm_tensor *idx)
{
    static const char *op = "mm_fused_rmsnorm_modulate_convrot";
    if (unusable(ctx, op))
        return -1;
    if (rows_bf16(ctx, op, "x", x) || quant_out(ctx, op, q, s, x->shape[0], x->shape[1]) ||
        h_side_out(ctx, op, h, x->shape[0], x->shape[1]))
        return -1;
    if (!scale || !shift || !idx || scale->ndim != 2 || shift->ndim != 2 || scale->shape[1] != x->shape[1] ||
        shift->shape[1] != x->shape[1] || idx->dtype != MM_I32 || idx->stride[0] != 1)
        return mm_ctx_fail(ctx, "%s: scale and shift [T, %lld] tables and a contiguous I32 idx are needed", op,
                           (long long)x->shape[1]);
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    mmk_convrot_quant a = {0};
    a.rows = (int)x->shape[0];
    a.K = (int)x->shape[1];
    a.group = 256;
    a.pre = MMK_PRE_RMSNORM_MOD;
    a.x = x->data;
    a.x_dtype = MM_BF16;
    a.ldx = x->stride[0];
    a.norm_w = fresh_f32(ctx, &t, weight, &e, &rc);
    a.eps = eps;
    a.scale = fresh_f32(ctx, &t, scale, &e, &rc);
    a.shift = fresh_f32(ctx, &t, shift, &e, &rc);
    a.ld_mod = x->shape[1];
    a.mod_idx = idx->data;
    quant_outputs(&a, q, s, h);
    return temps_done(ctx, op, &t, rc ? rc : mmk_convrot_quant_run(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

int mm_fused_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *gate_up)
{
    static const char *op = "mm_fused_swiglu_convrot";
    if (unusable(ctx, op))
        return -1;
    if (rows_bf16(ctx, op, "gate_up", gate_up) || gate_up->shape[1] % 2)
        return mm_ctx_fail(ctx, "%s: gate_up must be bf16 [R, 2K]", op);
    int64_t k = gate_up->shape[1] / 2;
    if (quant_out(ctx, op, q, s, gate_up->shape[0], k) || h_side_out(ctx, op, h, gate_up->shape[0], k))
        return -1;
    mmk_convrot_quant a = {0};
    a.rows = (int)gate_up->shape[0];
    a.K = (int)k;
    a.group = 256;
    a.pre = MMK_PRE_SWIGLU;
    a.x = gate_up->data;
    a.x_dtype = MM_BF16;
    a.ldx = gate_up->stride[0];
    quant_outputs(&a, q, s, h);
    mm_error e = {{0}};
    return mmk_convrot_quant_run(DEV(ctx), STREAM(ctx), &a, &e) ? kfail(ctx, op, &e) : 0;
}

/* The fused int8 linear of the DiT block: plain store into a bf16 y, or
 * (gate set) the gated residual into y; add (f32 [R, N], or NULL) joins the
 * f32 result before its rounding. */
static int qlinear_fused(mm_ctx *ctx, const char *op, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                         const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                         const mm_tensor *add)
{
    if (unusable(ctx, op))
        return -1;
    if (rows_bf16(ctx, op, "y", y))
        return -1;
    int64_t r = q_x->shape[0], n = q_w->shape[0];
    if (q_x->dtype != MM_I8 || q_w->dtype != MM_I8 || q_x->ndim != 2 || q_w->ndim != 2 || q_x->shape[1] != q_w->shape[1] ||
        y->shape[0] != r || y->shape[1] != n || q_x->stride[1] != 1 || q_w->stride[1] != 1)
        return mm_ctx_fail(ctx, "%s: q_x I8 [R, K], q_w I8 [N, K] and y [R, N] expected", op);
    if (gate && (gate->ndim != 2 || gate->shape[1] != n || (gate->shape[0] != 1 && !idx)))
        return mm_ctx_fail(ctx, "%s: gate must be a [T, %lld] table (with idx when T > 1)", op, (long long)n);
    if (add && (add->dtype != MM_F32 || add->ndim != 2 || add->shape[0] != r || add->shape[1] != n ||
                add->stride[1] != 1 || !mm_device_eq(add->device, mm_ctx_device(ctx))))
        return mm_ctx_fail(ctx, "%s: add must be f32 [%lld, %lld] with unit column stride on the context's device", op,
                           (long long)r, (long long)n);
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    int32_t *zero_idx = NULL;
    mmk_qlinear a = qlinear_operands(ctx, &t, q_x, s_x, q_w, s_w, &e, &rc);
    a.y = y->data;
    a.ldy = y->stride[0];
    a.y_dtype = MM_BF16;
    if (add) {
        a.add = add->data;
        a.ld_add = add->stride[0];
    }
    if (gate) {
        a.gate = fresh_f32(ctx, &t, gate, &e, &rc);
        a.ld_gate = n;
        if (idx) {
            if (idx->dtype != MM_I32 || idx->stride[0] != 1 || mm_tensor_numel(idx) != r)
                rc = mm_fail(&e, "idx must be a contiguous I32 [%lld]", (long long)r);
            a.mod_idx = idx->data;
        } else if (rc == 0) {
            zero_idx = temp_alloc(&t, (size_t)r * 4, &e);
            if (!zero_idx || mm_cuda_memset0(DEV(ctx), zero_idx, (size_t)r * 4, &e))
                rc = -1;
            a.mod_idx = zero_idx;
        }
    }
    return temps_done(ctx, op, &t, rc ? rc : mmk_qlinear_i8(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

int mm_fused_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                  const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                  const mm_tensor *idx)
{
    static const char *op = "mm_fused_gemm_i8_scaled_gated";
    if (!gate)
        return mm_ctx_fail(ctx, "%s: a gate table is required", op);
    return qlinear_fused(ctx, op, x, q_x, s_x, q_w, s_w, gate, idx, NULL);
}

int mm_fused_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                                const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                                const mm_tensor *add)
{
    return qlinear_fused(ctx, "mm_fused_gemm_i8_scaled_add", y, q_x, s_x, q_w, s_w, gate, idx, add);
}

int mm_fused_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                             float eps, const mm_tensor *cos, const mm_tensor *sin, int rot)
{
    static const char *op = "mm_fused_qk_rmsnorm_rope";
    if (unusable(ctx, op))
        return -1;
    const mm_tensor *qk[2] = {q, k};
    for (int i = 0; i < 2; i++) {
        const mm_tensor *t = qk[i];
        if (t->dtype != MM_BF16 || t->ndim != 3 || t->shape[2] > 128 || t->stride[2] != 1 ||
            (t->shape[1] > 1 && t->stride[1] != t->shape[2]) || t->shape[0] != q->shape[0] || t->shape[2] != q->shape[2])
            return mm_ctx_fail(ctx, "%s: q and k must be bf16 [S, H, D] views (D <= 128, heads D apart)", op);
    }
    if ((cos == NULL) != (sin == NULL) ||
        (cos && (cos->dtype != MM_BF16 || sin->dtype != MM_BF16 || cos->ndim != 2 || cos->shape[0] != q->shape[0] ||
                 cos->shape[1] != rot || cos->stride[0] != sin->stride[0] || (rot > 1 && (cos->stride[1] != 1 || sin->stride[1] != 1)))))
        return mm_ctx_fail(ctx, "%s: cos and sin must be bf16 [S, %d] tables with the same row stride", op, rot);
    mm_error e = {{0}};
    temps t = {DEV(ctx), 0, {0}};
    int rc = 0;
    mmk_qk_norm_rope a = {0};
    a.rows = (int)q->shape[0];
    a.heads_q = (int)q->shape[1];
    a.heads_k = (int)k->shape[1];
    a.head_dim = (int)q->shape[2];
    a.q = q->data;
    a.ldq = q->stride[0];
    a.k = k->data;
    a.ldk = k->stride[0];
    a.wq = fresh_f32(ctx, &t, wq, &e, &rc);
    a.wk = fresh_f32(ctx, &t, wk, &e, &rc);
    a.eps = eps;
    if (cos) {
        a.cos = cos->data;
        a.sin = sin->data;
        a.ld_rope = cos->stride[0];
        a.rot_dim = rot;
    }
    return temps_done(ctx, op, &t, rc ? rc : mmk_qk_norm_rope_run(DEV(ctx), STREAM(ctx), &a, &e), &e);
}

#else
typedef int mm_cuda_ops_unused; /* ISO C forbids an empty translation unit */
#endif
