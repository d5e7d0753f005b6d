/* The CPU backend against straightforward double-precision loops written
 * here, on seeded random inputs, mixed dtypes and strided views. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/fused.h"
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "test_backend_util.h"

static mm_ctx *ctx;

#define CTX_OK() MM_EXPECT(!mm_ctx_failed(ctx), "ctx failed: %s", ctx_msg())

static const char *ctx_msg(void)
{
    static mm_error e;
    mm_error_clear(&e);
    mm_ctx_error(ctx, &e);
    return e.msg;
}

static double act_ref(double x, mm_act a)
{
    switch (a) {
    case MM_ACT_SILU: return x / (1 + exp(-x));
    case MM_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case MM_ACT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2)));
    case MM_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case MM_ACT_TANH: return tanh(x);
    case MM_ACT_RELU: return x > 0 ? x : 0;
    case MM_ACT_EXP: return exp(x);
    default: return x;
    }
}

/* ------------------------------------------------------------ elementwise */

static void test_elementwise_mixed_dtypes_and_strides(void)
{
    /* a: bf16 [7, 33]; b: f32 [33, 7] transposed to [7, 33]; c: f16 row [1, 33] broadcast */
    mm_tensor a = tb_rand(MM_BF16, 2, MM_SHAPE(7, 33), 2.0);
    mm_tensor bt = tb_rand(MM_F32, 2, MM_SHAPE(33, 7), 2.0);
    mm_tensor b = mm_tensor_transpose(&bt, 0, 1);
    mm_tensor c1 = tb_rand(MM_F16, 2, MM_SHAPE(1, 33), 2.0);
    mm_tensor c = mm_tensor_expand(&c1, 2, MM_SHAPE(7, 33));
    MM_REQUIRE(mm_tensor_valid(&c), "expand");
    double *va = tb_values(&a), *vb = tb_values(&b), *vc = tb_values(&c);
    int64_t n = 7 * 33;
    double *want = malloc((size_t)n * sizeof *want);
    mm_dtype outs[3] = {MM_F32, MM_BF16, MM_F16};
    for (int oi = 0; oi < 3; oi++) {
        mm_tensor o = tb_zeros(outs[oi], 2, MM_SHAPE(7, 33));
        mm_add(ctx, &o, &a, &b);
        for (int64_t i = 0; i < n; i++)
            want[i] = va[i] + vb[i];
        MM_EXPECT(tb_check(&o, want, 1.01, 0, NULL) <= 1, "add into %s", mm_dtype_name(outs[oi]));
        mm_mul(ctx, &o, &a, &c);
        for (int64_t i = 0; i < n; i++)
            want[i] = va[i] * vc[i];
        MM_EXPECT(tb_check(&o, want, 1.01, 0, NULL) <= 1, "mul broadcast into %s", mm_dtype_name(outs[oi]));
        mm_axpby(ctx, &o, 0.5f, &a, -2.0f, &b);
        for (int64_t i = 0; i < n; i++)
            want[i] = 0.5 * va[i] - 2.0 * vb[i];
        MM_EXPECT(tb_check(&o, want, 1.01, 1e-6, NULL) <= 1, "axpby");
        mm_axpby(ctx, &o, 3.0f, &a, 0.25f, NULL);
        for (int64_t i = 0; i < n; i++)
            want[i] = 3.0 * va[i] + 0.25;
        MM_EXPECT(tb_check(&o, want, 1.01, 1e-6, NULL) <= 1, "scale + shift");
        mm_clamp(ctx, &o, &b, -0.5f, 0.75f);
        for (int64_t i = 0; i < n; i++)
            want[i] = vb[i] < -0.5 ? -0.5 : vb[i] > 0.75 ? 0.75 : vb[i];
        MM_EXPECT(tb_check(&o, want, 1.01, 0, NULL) <= 1, "clamp");
        for (int act = MM_ACT_IDENTITY; act <= MM_ACT_EXP; act++) {
            mm_activation(ctx, &o, &b, (mm_act)act);
            for (int64_t i = 0; i < n; i++)
                want[i] = act_ref(vb[i], (mm_act)act);
            MM_EXPECT(tb_check(&o, want, 64, 1, NULL) <= 1, "activation %d into %s", act, mm_dtype_name(outs[oi]));
            mm_glu(ctx, &o, &b, &a, (mm_act)act);
            for (int64_t i = 0; i < n; i++)
                want[i] = act_ref(vb[i], (mm_act)act) * va[i];
            MM_EXPECT(tb_check(&o, want, 64, 1, NULL) <= 1, "glu %d", act);
        }
        mm_tensor_free(&o);
    }
    /* in place, exact alias */
    mm_tensor x = tb_rand(MM_F32, 1, MM_SHAPE(5000), 1.0);
    double *vx = tb_values(&x);
    mm_axpby(ctx, &x, 2.0f, &x, 1.0f, &x);
    double *w = malloc(5000 * sizeof *w);
    for (int i = 0; i < 5000; i++)
        w[i] = 3 * vx[i];
    MM_EXPECT(tb_check(&x, w, 1.01, 0, NULL) <= 1, "aliased axpby");
    CTX_OK();
    free(w);
    free(vx);
    mm_tensor_free(&x);
    free(va);
    free(vb);
    free(vc);
    free(want);
    mm_tensor_free(&a);
    mm_tensor_free(&bt);
    mm_tensor_free(&c1);
}

static void test_copy_convert_fill(void)
{
    /* f32 -> bf16 rounds to nearest even, one rounding */
    float src[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 65504.0f};
    mm_tensor s = mm_tensor_wrap(src, mm_cpu(), MM_F32, 1, MM_SHAPE(4));
    mm_tensor d = tb_zeros(MM_BF16, 1, MM_SHAPE(4));
    mm_copy(ctx, &d, &s);
    const uint16_t *h = d.data;
    MM_EXPECT(h[0] == 0x3f80 && h[1] == 0x3f82 && h[2] == 0xc020, "bf16 RNE %04x %04x %04x", h[0], h[1], h[2]);
    /* I64 -> I32 index conversion, strided */
    int64_t ids[6] = {5, -1, 7, 9, 3, 2147483648LL};
    mm_tensor si = mm_tensor_wrap(ids, mm_cpu(), MM_I64, 1, MM_SHAPE(6));
    mm_tensor di = tb_zeros(MM_I32, 1, MM_SHAPE(6));
    mm_copy(ctx, &di, &si);
    const int32_t *o = di.data;
    MM_EXPECT(o[0] == 5 && o[1] == -1 && o[4] == 3 && o[5] == 2147483647, "i64->i32 saturating");
    /* float -> int rounds half to even */
    float fh[4] = {2.5f, 3.5f, -2.5f, 300.0f};
    mm_tensor fs = mm_tensor_wrap(fh, mm_cpu(), MM_F32, 1, MM_SHAPE(4));
    mm_tensor qi = tb_zeros(MM_I8, 1, MM_SHAPE(4));
    mm_copy(ctx, &qi, &fs);
    const int8_t *q = qi.data;
    MM_EXPECT(q[0] == 2 && q[1] == 4 && q[2] == -2 && q[3] == 127, "f32->i8 %d %d %d %d", q[0], q[1], q[2], q[3]);
    /* strided transpose copy (a permute) */
    mm_tensor a = tb_rand(MM_F32, 3, MM_SHAPE(4, 5, 6), 1.0);
    mm_tensor p = mm_tensor_permute(&a, (const int[]){2, 0, 1});
    mm_tensor c = tb_zeros(MM_F32, 3, MM_SHAPE(6, 4, 5));
    mm_copy(ctx, &c, &p);
    bool ok = true;
    for (int64_t i = 0; i < 6; i++)
        for (int64_t j = 0; j < 4; j++)
            for (int64_t k = 0; k < 5; k++)
                ok = ok && mm_tensor_get(&c, MM_SHAPE(i, j, k)) == mm_tensor_get(&a, MM_SHAPE(j, k, i));
    MM_EXPECT(ok, "permuted copy");
    mm_tensor nar = mm_tensor_narrow(&c, 2, 1, 3);
    mm_fill(ctx, &nar, 7.5);
    MM_EXPECT(mm_tensor_get(&c, MM_SHAPE(5, 3, 3)) == 7.5 && mm_tensor_get(&c, MM_SHAPE(5, 3, 4)) != 7.5 &&
                  mm_tensor_get(&c, MM_SHAPE(0, 0, 0)) != 7.5,
              "strided fill");
    CTX_OK();
    mm_tensor_free(&d);
    mm_tensor_free(&di);
    mm_tensor_free(&qi);
    mm_tensor_free(&a);
    mm_tensor_free(&c);
}

/* --------------------------------------------------------------- row ops */

static void test_norms(void)
{
    const int64_t S = 37, H = 3, D = 40;
    /* x: a [S, H, D] view into a [S, 2*H*D] buffer (second half) */
    mm_tensor buf = tb_rand(MM_BF16, 2, MM_SHAPE(S, 2 * H * D), 3.0);
    mm_tensor half = mm_tensor_narrow(&buf, 1, H * D, H * D);
    mm_tensor x = mm_tensor_unflatten(&half, 1, 2, MM_SHAPE(H, D));
    MM_REQUIRE(mm_tensor_valid(&x) && x.stride[0] == 2 * H * D && x.stride[1] == D, "unflatten view");
    mm_tensor w = tb_rand(MM_BF16, 1, MM_SHAPE(D), 1.0), b = tb_rand(MM_F32, 1, MM_SHAPE(D), 1.0);
    double *vx = tb_values(&x), *vw = tb_values(&w), *vb = tb_values(&b);
    int64_t rows = S * H, n = rows * D;
    double *want = malloc((size_t)n * sizeof *want);
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(S, H, D));
    mm_rmsnorm(ctx, &o, &x, &w, 1e-5f);
    for (int64_t r = 0; r < rows; r++) {
        double ms = 0;
        for (int64_t i = 0; i < D; i++)
            ms += vx[r * D + i] * vx[r * D + i];
        double rs = 1 / sqrt(ms / D + 1e-5);
        for (int64_t i = 0; i < D; i++)
            want[r * D + i] = vx[r * D + i] * rs * vw[i];
    }
    MM_EXPECT(tb_check(&o, want, 64, 1, NULL) <= 1, "rmsnorm");
    mm_layernorm(ctx, &o, &x, &w, &b, 1e-6f);
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < D; i++)
            m += vx[r * D + i];
        m /= D;
        for (int64_t i = 0; i < D; i++)
            v += (vx[r * D + i] - m) * (vx[r * D + i] - m);
        double rs = 1 / sqrt(v / D + 1e-6);
        for (int64_t i = 0; i < D; i++)
            want[r * D + i] = (vx[r * D + i] - m) * rs * vw[i] + vb[i];
    }
    MM_EXPECT(tb_check(&o, want, 64, 1, NULL) <= 1, "layernorm");
    mm_softmax(ctx, &o, &x);
    for (int64_t r = 0; r < rows; r++) {
        double m = -1e300, s = 0;
        for (int64_t i = 0; i < D; i++)
            m = fmax(m, vx[r * D + i]);
        for (int64_t i = 0; i < D; i++)
            s += exp(vx[r * D + i] - m);
        for (int64_t i = 0; i < D; i++)
            want[r * D + i] = exp(vx[r * D + i] - m) / s;
    }
    MM_EXPECT(tb_check(&o, want, 16, 0, NULL) <= 1, "softmax");
    /* in place on the strided view, bf16 */
    mm_rmsnorm(ctx, &x, &x, NULL, 1e-5f);
    for (int64_t r = 0; r < rows; r++) {
        double ms = 0;
        for (int64_t i = 0; i < D; i++)
            ms += vx[r * D + i] * vx[r * D + i];
        for (int64_t i = 0; i < D; i++)
            want[r * D + i] = vx[r * D + i] / sqrt(ms / D + 1e-5);
    }
    MM_EXPECT(tb_check(&x, want, 1.1, 0.01, NULL) <= 1, "in-place rmsnorm, no weight, bf16");
    mm_tensor first = mm_tensor_narrow(&buf, 1, 0, H * D);
    double *vf = tb_values(&first);
    int untouched = 1;
    for (int64_t i = 0; i < S && untouched; i++)
        untouched = fabs(vf[i * H * D]) <= 3.0;
    MM_EXPECT(untouched, "other half of the buffer untouched");
    CTX_OK();
    free(vf);
    free(vx);
    free(vw);
    free(vb);
    free(want);
    mm_tensor_free(&o);
    mm_tensor_free(&buf);
    mm_tensor_free(&w);
    mm_tensor_free(&b);
}

static void test_groupnorm(void)
{
    const int64_t N = 2, C = 8, T = 3, Hh = 4, W = 5, G = 4, cpg = C / G;
    mm_tensor x = tb_rand(MM_F32, 5, MM_SHAPE(N, C, T, Hh, W), 2.0);
    mm_tensor w = tb_rand(MM_F32, 1, MM_SHAPE(C), 1.0), b = tb_rand(MM_F32, 1, MM_SHAPE(C), 1.0);
    double *vx = tb_values(&x), *vw = tb_values(&w), *vb = tb_values(&b);
    int64_t n = N * C * T * Hh * W;
    double *want = malloc((size_t)n * sizeof *want);
    mm_tensor o = tb_zeros(MM_BF16, 5, MM_SHAPE(N, C, T, Hh, W));
    for (int per_frame = 0; per_frame < 2; per_frame++) {
        mm_groupnorm(ctx, &o, &x, &w, &b, (int)G, 1e-6f, per_frame);
        for (int64_t nn = 0; nn < N; nn++)
            for (int64_t g = 0; g < G; g++)
                for (int64_t t = 0; t < (per_frame ? T : 1); t++) {
                    double s = 0, ss = 0, cnt = 0;
                    for (int64_t c = g * cpg; c < (g + 1) * cpg; c++)
                        for (int64_t tt = 0; tt < T; tt++)
                            if (!per_frame || tt == t)
                                for (int64_t p = 0; p < Hh * W; p++) {
                                    double v = vx[((nn * C + c) * T + tt) * Hh * W + p];
                                    s += v;
                                    ss += v * v;
                                    cnt++;
                                }
                    double m = s / cnt, var = ss / cnt - m * m;
                    for (int64_t c = g * cpg; c < (g + 1) * cpg; c++)
                        for (int64_t tt = 0; tt < T; tt++)
                            if (!per_frame || tt == t)
                                for (int64_t p = 0; p < Hh * W; p++) {
                                    int64_t i = ((nn * C + c) * T + tt) * Hh * W + p;
                                    want[i] = (vx[i] - m) / sqrt(var + 1e-6) * vw[c] + vb[c];
                                }
                }
        MM_EXPECT(tb_check(&o, want, 1.1, 0.01, NULL) <= 1, "groupnorm per_frame=%d", per_frame);
    }
    /* per-frame statistics really are per frame: scaling one frame must not change another's output */
    CTX_OK();
    free(vx);
    free(vw);
    free(vb);
    free(want);
    mm_tensor_free(&x);
    mm_tensor_free(&w);
    mm_tensor_free(&b);
    mm_tensor_free(&o);
}

static void test_reductions(void)
{
    mm_tensor x = tb_rand(MM_BF16, 3, MM_SHAPE(3, 4, 300), 5.0);
    double *vx = tb_values(&x);
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(3, 4));
    double want[12];
    for (int op = MM_REDUCE_SUM; op <= MM_REDUCE_ABSMAX; op++) {
        mm_reduce_rows(ctx, &o, &x, (mm_reduce)op);
        for (int r = 0; r < 12; r++) {
            double acc = op == MM_REDUCE_MAX ? -1e300 : op == MM_REDUCE_MIN ? 1e300 : 0;
            for (int i = 0; i < 300; i++) {
                double v = vx[r * 300 + i];
                if (op == MM_REDUCE_SUM || op == MM_REDUCE_MEAN)
                    acc += v;
                else if (op == MM_REDUCE_MAX)
                    acc = fmax(acc, v);
                else if (op == MM_REDUCE_MIN)
                    acc = fmin(acc, v);
                else
                    acc = fmax(acc, fabs(v));
            }
            want[r] = op == MM_REDUCE_MEAN ? acc / 300 : acc;
        }
        MM_EXPECT(tb_check(&o, want, 4, 10, NULL) <= 1, "reduce %d", op);
    }
    CTX_OK();
    free(vx);
    mm_tensor_free(&x);
    mm_tensor_free(&o);
}

static void test_modulation_and_gated_residual(void)
{
    const int64_t R = 50, C = 64, T = 6;
    mm_tensor x = tb_rand(MM_BF16, 2, MM_SHAPE(R, C), 2.0);
    /* tables as views into [T, 6, C] like the DiT's [3M, 6, H] */
    mm_tensor mod = tb_rand(MM_F32, 3, MM_SHAPE(T, 6, C), 0.5);
    mm_tensor shift = mm_tensor_select(&mod, 1, 0), scale = mm_tensor_select(&mod, 1, 1),
              gate = mm_tensor_select(&mod, 1, 2);
    mm_tensor idx = tb_zeros(MM_I32, 1, MM_SHAPE(R));
    int32_t *ip = idx.data;
    for (int r = 0; r < R; r++)
        ip[r] = (int32_t)(tb_next() % T);
    mm_tensor w = tb_rand(MM_BF16, 1, MM_SHAPE(C), 1.0);
    double *vx = tb_values(&x), *vm = tb_values(&mod), *vw = tb_values(&w);
    double *want = malloc((size_t)(R * C) * sizeof *want);
    mm_tensor o = tb_zeros(MM_BF16, 2, MM_SHAPE(R, C));
    mm_modulate(ctx, &o, &x, &scale, &shift, &idx);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            want[r * C + c] =
                vx[r * C + c] * (1 + vm[(ip[r] * 6 + 1) * C + c]) + vm[(ip[r] * 6 + 0) * C + c];
    MM_EXPECT(tb_check(&o, want, 1.1, 0.01, NULL) <= 1, "modulate");
    mm_rmsnorm_modulate(ctx, &o, &x, &w, 1e-5f, &scale, &shift, &idx);
    for (int64_t r = 0; r < R; r++) {
        double ms = 0;
        for (int64_t c = 0; c < C; c++)
            ms += vx[r * C + c] * vx[r * C + c];
        double rs = 1 / sqrt(ms / C + 1e-5);
        for (int64_t c = 0; c < C; c++)
            want[r * C + c] =
                vx[r * C + c] * rs * vw[c] * (1 + vm[(ip[r] * 6 + 1) * C + c]) + vm[(ip[r] * 6 + 0) * C + c];
    }
    MM_EXPECT(tb_check(&o, want, 1.1, 0.01, NULL) <= 1, "rmsnorm_modulate");
    mm_tensor y = tb_rand(MM_F32, 2, MM_SHAPE(R, C), 1.0);
    double *vy = tb_values(&y);
    mm_gated_residual(ctx, &x, &y, &gate, &idx);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            want[r * C + c] = vx[r * C + c] + vm[(ip[r] * 6 + 2) * C + c] * vy[r * C + c];
    MM_EXPECT(tb_check(&x, want, 1.1, 0.01, NULL) <= 1, "gated residual");
    /* a bad index is refused and leaves the ctx failed */
    ip[7] = (int32_t)T;
    MM_EXPECT(mm_modulate(ctx, &o, &x, &scale, &shift, &idx) == -1, "index out of range refused");
    MM_EXPECT(strstr(ctx_msg(), "idx[7] = 6 out of range") != NULL, "message: %s", ctx_msg());
    mm_ctx_clear_error(ctx);
    free(vx);
    free(vm);
    free(vw);
    free(vy);
    free(want);
    mm_tensor_free(&x);
    mm_tensor_free(&mod);
    mm_tensor_free(&idx);
    mm_tensor_free(&w);
    mm_tensor_free(&o);
    mm_tensor_free(&y);
}

static void test_rope(void)
{
    const int64_t S = 9, H = 2, D = 16;
    const int rot = 12, half = 6;
    mm_tensor x = tb_rand(MM_BF16, 3, MM_SHAPE(S, H, D), 2.0);
    mm_tensor cs = tb_rand(MM_F32, 2, MM_SHAPE(S, rot), 1.0), sn = tb_rand(MM_BF16, 2, MM_SHAPE(S, rot), 1.0);
    double *vx = tb_values(&x), *vc = tb_values(&cs), *vs = tb_values(&sn);
    double want[S * H * D];
    for (int64_t s = 0; s < S; s++)
        for (int64_t h = 0; h < H; h++) {
            const double *xr = vx + (s * H + h) * D;
            double *o = want + (s * H + h) * D;
            for (int j = 0; j < D; j++)
                o[j] = xr[j];
            for (int j = 0; j < half; j++) {
                o[j] = xr[j] * vc[s * rot + j] - xr[j + half] * vs[s * rot + j];
                o[j + half] = xr[j + half] * vc[s * rot + j + half] + xr[j] * vs[s * rot + j + half];
            }
        }
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(S, H, D));
    mm_rope(ctx, &o, &x, &cs, &sn, rot);
    MM_EXPECT(tb_check(&o, want, 4, 1, NULL) <= 1, "rope");
    mm_rope(ctx, &x, &x, &cs, &sn, rot);
    MM_EXPECT(tb_check(&x, want, 1.1, 0.01, NULL) <= 1, "rope in place");
    MM_EXPECT(mm_rope(ctx, &o, &x, &cs, &sn, 13) == -1, "odd rot_dim refused");
    mm_ctx_clear_error(ctx);
    free(vx);
    free(vc);
    free(vs);
    mm_tensor_free(&x);
    mm_tensor_free(&cs);
    mm_tensor_free(&sn);
    mm_tensor_free(&o);
}

/* -------------------------------------------------------------- attention */

static void attn_ref(const double *q, const double *k, const double *v, double *o, int64_t sq, int64_t sk, int64_t hq,
                     int64_t hkv, int64_t d, int64_t dv, double scale, bool causal, const int32_t *seg, int nseg)
{
    double *p = malloc((size_t)sk * sizeof *p);
    for (int64_t h = 0; h < hq; h++) {
        int64_t g = h / (hq / hkv);
        for (int64_t i = 0; i < sq; i++) {
            int64_t lo = 0, hi = sk;
            if (seg)
                for (int s = 0; s < nseg; s++)
                    if (seg[s] <= i && i < seg[s + 1]) {
                        lo = seg[s];
                        hi = seg[s + 1];
                    }
            if (causal && i + 1 < hi)
                hi = i + 1;
            double m = -1e300, sum = 0;
            for (int64_t j = lo; j < hi; j++) {
                double s = 0;
                for (int64_t c = 0; c < d; c++)
                    s += q[(i * hq + h) * d + c] * k[(j * hkv + g) * d + c];
                p[j] = s * scale;
                m = fmax(m, p[j]);
            }
            for (int64_t j = lo; j < hi; j++)
                sum += (p[j] = exp(p[j] - m));
            for (int64_t c = 0; c < dv; c++) {
                double acc = 0;
                for (int64_t j = lo; j < hi; j++)
                    acc += p[j] * v[(j * hkv + g) * dv + c];
                o[(i * hq + h) * dv + c] = acc / sum;
            }
        }
    }
    free(p);
}

static void test_attention(void)
{
    /* a fused qkv buffer [S, (Hq + 2 Hkv) * D], bf16, GQA 4:2 */
    const int64_t S = 150, HQ = 4, HKV = 2, D = 40;
    mm_tensor qkv = tb_rand(MM_BF16, 2, MM_SHAPE(S, (HQ + 2 * HKV) * D), 2.0);
    mm_tensor qn = mm_tensor_narrow(&qkv, 1, 0, HQ * D), kn = mm_tensor_narrow(&qkv, 1, HQ * D, HKV * D),
              vn = mm_tensor_narrow(&qkv, 1, (HQ + HKV) * D, HKV * D);
    mm_tensor q = mm_tensor_unflatten(&qn, 1, 2, MM_SHAPE(HQ, D)), k = mm_tensor_unflatten(&kn, 1, 2, MM_SHAPE(HKV, D)),
              v = mm_tensor_unflatten(&vn, 1, 2, MM_SHAPE(HKV, D));
    double *vq = tb_values(&q), *vk = tb_values(&k), *vv = tb_values(&v);
    double *want = malloc((size_t)(S * HQ * D) * sizeof *want);
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(S, HQ, D));
    int32_t seg[4] = {0, 40, 41, (int32_t)S};
    struct {
        bool causal;
        const int32_t *seg;
        int nseg;
        float scale;
    } cases[4] = {{false, NULL, 0, 0}, {true, NULL, 0, 0.3f}, {false, seg, 3, 0}, {true, seg, 3, 0}};
    for (int c = 0; c < 4; c++) {
        mm_attn_params p = {cases[c].scale, cases[c].causal, cases[c].seg, cases[c].nseg};
        mm_attention(ctx, &o, &q, &k, &v, &p);
        attn_ref(vq, vk, vv, want, S, S, HQ, HKV, D, D, cases[c].scale ? cases[c].scale : 1 / sqrt((double)D),
                 cases[c].causal, cases[c].seg, cases[c].nseg);
        MM_EXPECT(tb_check(&o, want, 64, 1, NULL) <= 1, "attention case %d", c);
    }
    /* cross attention Sq != Sk into bf16 */
    mm_tensor q2 = mm_tensor_narrow(&q, 0, 0, 33);
    mm_tensor o2 = tb_zeros(MM_BF16, 3, MM_SHAPE(33, HQ, D));
    mm_attention(ctx, &o2, &q2, &k, &v, NULL);
    attn_ref(vq, vk, vv, want, 33, S, HQ, HKV, D, D, 1 / sqrt((double)D), false, NULL, 0);
    MM_EXPECT(tb_check(&o2, want, 1.5, 0.05, NULL) <= 1, "cross attention, bf16 out");
    CTX_OK();
    free(vq);
    free(vk);
    free(vv);
    free(want);
    mm_tensor_free(&qkv);
    mm_tensor_free(&o);
    mm_tensor_free(&o2);
}

/* ------------------------------------------------------------------- GEMM */

static void gemm_case(int64_t M, int64_t N, int64_t K, mm_dtype ab, mm_dtype od, bool trans_b, bool bias, float alpha,
                      float beta)
{
    mm_tensor a = tb_rand(ab, 2, MM_SHAPE(M, K), 1.0);
    mm_tensor bst = trans_b ? tb_rand(ab, 2, MM_SHAPE(N, K), 1.0) : tb_rand(ab, 2, MM_SHAPE(K, N), 1.0);
    mm_tensor b = trans_b ? mm_tensor_transpose(&bst, 0, 1) : mm_tensor_view(&bst);
    mm_tensor bv = tb_rand(MM_BF16, 1, MM_SHAPE(N), 1.0);
    mm_tensor o = tb_rand(od, 2, MM_SHAPE(M, N), 1.0);
    double *va = tb_values(&a), *vb = tb_values(&b), *vbias = tb_values(&bv), *vo = tb_values(&o);
    double *want = malloc((size_t)(M * N) * sizeof *want);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += va[i * K + k] * vb[k * N + j];
            want[i * N + j] = alpha * s + (bias ? vbias[j] : 0) + beta * vo[i * N + j];
        }
    mm_gemm(ctx, &o, &a, &b, bias ? &bv : NULL, alpha, beta);
    int64_t wi = 0;
    double e = tb_check(&o, want, od == MM_F32 ? 64 : 1.1, sqrt((double)K), &wi);
    MM_EXPECT(e <= 1, "gemm %lldx%lldx%lld %s->%s trans_b=%d bias=%d: err %.3g at %lld", (long long)M, (long long)N,
              (long long)K, mm_dtype_name(ab), mm_dtype_name(od), trans_b, bias, e, (long long)wi);
    free(va);
    free(vb);
    free(vbias);
    free(vo);
    free(want);
    mm_tensor_free(&a);
    mm_tensor_free(&bst);
    mm_tensor_free(&bv);
    mm_tensor_free(&o);
}

static void test_gemm(void)
{
    gemm_case(1, 1, 1, MM_F32, MM_F32, false, false, 1, 0);
    gemm_case(37, 53, 129, MM_F32, MM_F32, false, true, 1, 0);
    gemm_case(70, 300, 600, MM_BF16, MM_F32, true, true, 0.5f, 1.0f);
    gemm_case(130, 1100, 70, MM_BF16, MM_BF16, true, false, 1, 0);
    gemm_case(5, 17, 300, MM_F16, MM_F32, false, false, 2, 0.5f);
    /* batched with a shared B */
    mm_tensor a = tb_rand(MM_F32, 3, MM_SHAPE(3, 9, 11), 1.0), b = tb_rand(MM_F32, 2, MM_SHAPE(11, 7), 1.0);
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(3, 9, 7));
    mm_matmul(ctx, &o, &a, &b, NULL);
    double *va = tb_values(&a), *vb = tb_values(&b), want[3 * 9 * 7];
    for (int bt = 0; bt < 3; bt++)
        for (int i = 0; i < 9; i++)
            for (int j = 0; j < 7; j++) {
                double s = 0;
                for (int k = 0; k < 11; k++)
                    s += va[(bt * 9 + i) * 11 + k] * vb[k * 7 + j];
                want[(bt * 9 + i) * 7 + j] = s;
            }
    MM_EXPECT(tb_check(&o, want, 64, 4, NULL) <= 1, "batched matmul");
    /* dtype mismatch is refused */
    mm_tensor b16 = tb_rand(MM_BF16, 2, MM_SHAPE(11, 7), 1.0);
    mm_tensor a2 = mm_tensor_select(&a, 0, 0), o2 = mm_tensor_select(&o, 0, 0);
    MM_EXPECT(mm_matmul(ctx, &o2, &a2, &b16, NULL) == -1 && strstr(ctx_msg(), "share a dtype"), "%s", ctx_msg());
    mm_ctx_clear_error(ctx);
    free(va);
    free(vb);
    mm_tensor_free(&a);
    mm_tensor_free(&b);
    mm_tensor_free(&o);
    mm_tensor_free(&b16);
}

/* -------------------------------------------------------- index and conv */

static void test_gather_scatter(void)
{
    mm_tensor src = tb_rand(MM_F32, 3, MM_SHAPE(10, 3, 4), 1.0);
    mm_tensor idx = tb_zeros(MM_I32, 1, MM_SHAPE(4));
    int32_t ids[4] = {9, 0, 3, 3};
    memcpy(idx.data, ids, sizeof ids);
    mm_tensor g = tb_zeros(MM_BF16, 3, MM_SHAPE(4, 3, 4));
    mm_gather_rows(ctx, &g, &src, &idx);
    bool ok = true;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                ok = ok && mm_tensor_get(&g, MM_SHAPE(r, i, j)) ==
                               (double)mm_round_bf16((float)mm_tensor_get(&src, MM_SHAPE(ids[r], i, j)));
    MM_EXPECT(ok, "gather");
    int32_t sid[4] = {2, 7, 0, 5};
    memcpy(idx.data, sid, sizeof sid);
    mm_tensor dst = tb_zeros(MM_F32, 3, MM_SHAPE(8, 3, 4));
    mm_scatter_rows(ctx, &dst, &g, &idx);
    mm_scatter_add_rows(ctx, &dst, &g, &idx);
    ok = true;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 3; i++)
            ok = ok && mm_tensor_get(&dst, MM_SHAPE(sid[r], i, 1)) == 2 * mm_tensor_get(&g, MM_SHAPE(r, i, 1));
    ok = ok && mm_tensor_get(&dst, MM_SHAPE(1, 0, 0)) == 0.0;
    MM_EXPECT(ok, "scatter and scatter-add");
    CTX_OK();
    mm_tensor_free(&src);
    mm_tensor_free(&idx);
    mm_tensor_free(&g);
    mm_tensor_free(&dst);
}

static void test_conv1d_and_transpose(void)
{
    const int64_t B = 2, CIN = 6, COUT = 4, L = 23, K = 5;
    const int G = 2, S = 2, DL = 2, P0 = 3, P1 = 1;
    mm_tensor x = tb_rand(MM_F32, 3, MM_SHAPE(B, CIN, L), 1.0);
    mm_tensor w = tb_rand(MM_F32, 3, MM_SHAPE(COUT, CIN / G, K), 1.0);
    mm_tensor bias = tb_rand(MM_F32, 1, MM_SHAPE(COUT), 1.0);
    int64_t lout = (L + P0 + P1 - DL * (K - 1) - 1) / S + 1;
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(B, COUT, lout));
    mm_conv_params p = {.stride = {S}, .dilation = {DL}, .pad = {{P0, P1}}, .groups = G};
    mm_conv1d(ctx, &o, &x, &w, &bias, &p);
    double *vx = tb_values(&x), *vw = tb_values(&w), *vb = tb_values(&bias);
    double *want = malloc((size_t)(B * COUT * lout + B * COUT * 200) * sizeof *want);
    for (int64_t b = 0; b < B; b++)
        for (int64_t co = 0; co < COUT; co++)
            for (int64_t i = 0; i < lout; i++) {
                double s = vb[co];
                int64_t g = co / (COUT / G);
                for (int64_t ci = 0; ci < CIN / G; ci++)
                    for (int64_t k = 0; k < K; k++) {
                        int64_t t = i * S + k * DL - P0;
                        if (t >= 0 && t < L)
                            s += vw[(co * (CIN / G) + ci) * K + k] * vx[(b * CIN + g * (CIN / G) + ci) * L + t];
                    }
                want[(b * COUT + co) * lout + i] = s;
            }
    MM_EXPECT(tb_check(&o, want, 64, 4, NULL) <= 1, "conv1d stride/dilation/groups/asymmetric pad");
    /* transposed: w [CIN, COUT/G, K] */
    mm_tensor wt = tb_rand(MM_F32, 3, MM_SHAPE(CIN, COUT / G, K), 1.0);
    double *vwt = tb_values(&wt);
    mm_conv_params pt = {.stride = {S}, .dilation = {1}, .pad = {{2, 2}}, .groups = G, .output_pad = {1}};
    int64_t lt = (L - 1) * S - 4 + (K - 1) + 1 + 1;
    mm_tensor ot = tb_zeros(MM_F32, 3, MM_SHAPE(B, COUT, lt));
    mm_conv_transpose1d(ctx, &ot, &x, &wt, &bias, &pt);
    for (int64_t i = 0; i < B * COUT * lt; i++)
        want[i] = vb[(i / lt) % COUT];
    for (int64_t b = 0; b < B; b++)
        for (int64_t ci = 0; ci < CIN; ci++)
            for (int64_t cl = 0; cl < COUT / G; cl++) {
                int64_t co = (ci / (CIN / G)) * (COUT / G) + cl;
                for (int64_t i = 0; i < L; i++)
                    for (int64_t k = 0; k < K; k++) {
                        int64_t t = i * S + k - 2;
                        if (t >= 0 && t < lt)
                            want[(b * COUT + co) * lt + t] +=
                                vx[(b * CIN + ci) * L + i] * vwt[(ci * (COUT / G) + cl) * K + k];
                    }
            }
    MM_EXPECT(tb_check(&ot, want, 64, 4, NULL) <= 1, "conv_transpose1d");
    CTX_OK();
    free(vx);
    free(vw);
    free(vb);
    free(vwt);
    free(want);
    mm_tensor_free(&x);
    mm_tensor_free(&w);
    mm_tensor_free(&bias);
    mm_tensor_free(&o);
    mm_tensor_free(&wt);
    mm_tensor_free(&ot);
}

static void test_conv3d(void)
{
    const int64_t B = 1, CIN = 3, COUT = 5, T = 4, H = 9, W = 7;
    mm_tensor x = tb_rand(MM_BF16, 5, MM_SHAPE(B, CIN, T, H, W), 1.0);
    mm_tensor w = tb_rand(MM_BF16, 5, MM_SHAPE(COUT, CIN, 3, 3, 3), 1.0);
    mm_tensor bias = tb_rand(MM_F32, 1, MM_SHAPE(COUT), 1.0);
    /* causal time padding (2 before), spatial stride 2 with pad (1, 0) */
    mm_conv_params p = {.stride = {1, 2, 2}, .pad = {{2, 0}, {1, 0}, {1, 1}}};
    int64_t to = T, ho = (H + 1 - 3) / 2 + 1, wo = (W + 2 - 3) / 2 + 1;
    mm_tensor o = tb_zeros(MM_F32, 5, MM_SHAPE(B, COUT, to, ho, wo));
    mm_conv3d(ctx, &o, &x, &w, &bias, &p);
    double *vx = tb_values(&x), *vw = tb_values(&w), *vb = tb_values(&bias);
    double *want = malloc((size_t)(COUT * to * ho * wo) * sizeof *want);
    for (int64_t co = 0; co < COUT; co++)
        for (int64_t t = 0; t < to; t++)
            for (int64_t h = 0; h < ho; h++)
                for (int64_t ww = 0; ww < wo; ww++) {
                    double s = vb[co];
                    for (int64_t ci = 0; ci < CIN; ci++)
                        for (int64_t a = 0; a < 3; a++)
                            for (int64_t bb = 0; bb < 3; bb++)
                                for (int64_t c = 0; c < 3; c++) {
                                    int64_t it = t + a - 2, ih = h * 2 + bb - 1, iw = ww * 2 + c - 1;
                                    if (it >= 0 && it < T && ih >= 0 && ih < H && iw >= 0 && iw < W)
                                        s += vw[(((co * CIN + ci) * 3 + a) * 3 + bb) * 3 + c] *
                                             vx[((ci * T + it) * H + ih) * W + iw];
                                }
                    want[((co * to + t) * ho + h) * wo + ww] = s;
                }
    MM_EXPECT(tb_check(&o, want, 64, 4, NULL) <= 1, "conv3d");
    CTX_OK();
    free(vx);
    free(vw);
    free(vb);
    free(want);
    mm_tensor_free(&x);
    mm_tensor_free(&w);
    mm_tensor_free(&bias);
    mm_tensor_free(&o);
}

static void test_pad(void)
{
    float v[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    mm_tensor x = mm_tensor_wrap(v, mm_cpu(), MM_F32, 2, MM_SHAPE(2, 4));
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(3, 7));
    const int pads[2][2] = {{0, 1}, {2, 1}};
    mm_pad(ctx, &o, &x, pads, MM_PAD_REFLECT, 0);
    const float refl[3][7] = {{3, 2, 1, 2, 3, 4, 3}, {7, 6, 5, 6, 7, 8, 7}, {3, 2, 1, 2, 3, 4, 3}};
    MM_EXPECT(memcmp(o.data, refl, sizeof refl) == 0, "reflect");
    mm_pad(ctx, &o, &x, pads, MM_PAD_REPLICATE, 0);
    const float repl[3][7] = {{1, 1, 1, 2, 3, 4, 4}, {5, 5, 5, 6, 7, 8, 8}, {5, 5, 5, 6, 7, 8, 8}};
    MM_EXPECT(memcmp(o.data, repl, sizeof repl) == 0, "replicate");
    mm_pad(ctx, &o, &x, pads, MM_PAD_CONSTANT, -1);
    const float cons[3][7] = {{-1, -1, 1, 2, 3, 4, -1}, {-1, -1, 5, 6, 7, 8, -1}, {-1, -1, -1, -1, -1, -1, -1}};
    MM_EXPECT(memcmp(o.data, cons, sizeof cons) == 0, "constant");
    const int big[2][2] = {{0, 1}, {4, 0}};
    mm_tensor o2 = tb_zeros(MM_F32, 2, MM_SHAPE(3, 8));
    MM_EXPECT(mm_pad(ctx, &o2, &x, big, MM_PAD_REFLECT, 0) == -1, "reflect wider than the dim refused");
    mm_ctx_clear_error(ctx);
    mm_tensor_free(&o);
    mm_tensor_free(&o2);
}

static double lin_src(int64_t o, int64_t in, int64_t on, bool align)
{
    if (align)
        return on > 1 ? (double)o * (in - 1) / (on - 1) : 0;
    double s = (o + 0.5) * in / on - 0.5;
    return s < 0 ? 0 : s;
}

static void test_interpolate(void)
{
    const int64_t C = 2, IH = 5, IW = 6, OH = 9, OW = 4;
    mm_tensor x = tb_rand(MM_BF16, 3, MM_SHAPE(C, IH, IW), 1.0);
    double *vx = tb_values(&x);
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(C, OH, OW));
    double want[C * OH * OW];
    for (int align = 0; align < 2; align++) {
        mm_interpolate(ctx, &o, &x, 2, MM_INTERP_LINEAR, align);
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double sy = lin_src(i, IH, OH, align), sx = lin_src(j, IW, OW, align);
                    int64_t y0 = (int64_t)floor(sy), x0 = (int64_t)floor(sx);
                    int64_t y1 = y0 + 1 < IH ? y0 + 1 : IH - 1, x1 = x0 + 1 < IW ? x0 + 1 : IW - 1;
                    double wy = sy - y0, wx = sx - x0;
                    const double *p = vx + c * IH * IW;
                    want[(c * OH + i) * OW + j] = (1 - wy) * ((1 - wx) * p[y0 * IW + x0] + wx * p[y0 * IW + x1]) +
                                                   wy * ((1 - wx) * p[y1 * IW + x0] + wx * p[y1 * IW + x1]);
                }
        MM_EXPECT(tb_check(&o, want, 16, 1, NULL) <= 1, "bilinear align_corners=%d", align);
    }
    mm_interpolate(ctx, &o, &x, 2, MM_INTERP_NEAREST, false);
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++)
                want[(c * OH + i) * OW + j] = vx[c * IH * IW + (i * IH / OH) * IW + (j * IW / OW)];
    MM_EXPECT(tb_check(&o, want, 1, 0, NULL) <= 1, "nearest");
    CTX_OK();
    free(vx);
    mm_tensor_free(&x);
    mm_tensor_free(&o);
}

static void test_snake(void)
{
    mm_tensor x = tb_rand(MM_F32, 3, MM_SHAPE(2, 3, 50), 3.0);
    mm_tensor a = tb_rand(MM_F32, 1, MM_SHAPE(3), 1.0), b = tb_rand(MM_F32, 1, MM_SHAPE(3), 1.0);
    double *vx = tb_values(&x), *va = tb_values(&a), *vb = tb_values(&b), want[300];
    mm_tensor o = tb_zeros(MM_F32, 3, MM_SHAPE(2, 3, 50));
    for (int beta = 0; beta < 2; beta++) {
        mm_snake(ctx, &o, &x, &a, beta ? &b : NULL);
        for (int i = 0; i < 300; i++) {
            int c = (i / 50) % 3;
            double al = beta ? exp(va[c]) : va[c], den = (beta ? exp(vb[c]) : va[c]) + 1e-9;
            want[i] = vx[i] + pow(sin(al * vx[i]), 2) / den;
        }
        /* Snake1d divides by alpha itself: near-zero alphas amplify rounding; scale accordingly */
        MM_EXPECT(tb_check(&o, want, 4096, 10, NULL) <= 1, "snake beta=%d", beta);
    }
    CTX_OK();
    free(vx);
    free(va);
    free(vb);
    mm_tensor_free(&x);
    mm_tensor_free(&a);
    mm_tensor_free(&b);
    mm_tensor_free(&o);
}

/* ------------------------------------------------------- quantized ops */

static void test_int8_gemm_and_quantize(void)
{
    const int64_t R = 37, N = 70, K = 300;
    mm_tensor qx = tb_zeros(MM_I8, 2, MM_SHAPE(R, K)), qw = tb_zeros(MM_I8, 2, MM_SHAPE(N, K));
    int8_t *a = qx.data, *b = qw.data;
    for (int64_t i = 0; i < R * K; i++)
        a[i] = (int8_t)((int)(tb_next() % 255) - 127);
    for (int64_t i = 0; i < N * K; i++)
        b[i] = (int8_t)((int)(tb_next() % 256) - 128);
    mm_tensor sx = tb_rand(MM_F32, 1, MM_SHAPE(R), 0.01), sw = tb_rand(MM_F32, 2, MM_SHAPE(N, 1), 0.01);
    mm_tensor swv = mm_tensor_wrap(sw.data, mm_cpu(), MM_F32, 1, MM_SHAPE(N));
    mm_tensor bias = tb_rand(MM_BF16, 1, MM_SHAPE(N), 1.0);
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(R, N));
    mm_gemm_i8_scaled(ctx, &o, &qx, &sx, &qw, &swv, &bias);
    const float *fs = sx.data, *fw = sw.data, *got = o.data;
    int64_t bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < N; n++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (int64_t)a[r * K + k] * b[n * K + k];
            float want = (float)acc * (fs[r] * fw[n]) + (float)mm_tensor_get(&bias, MM_SHAPE(n));
            bad += memcmp(&want, &got[r * N + n], 4) != 0;
        }
    MM_EXPECT(bad == 0, "int8 GEMM + epilogue: %lld of %lld differ from the exact formula", (long long)bad,
              (long long)(R * N));
    /* f32 input: no rounding of the rotation; codes are rne(x_rot / s) within +-127 */
    mm_tensor x = tb_rand(MM_F32, 2, MM_SHAPE(5, 512), 3.0);
    mm_tensor q = tb_zeros(MM_I8, 2, MM_SHAPE(5, 512)), s = tb_zeros(MM_F32, 1, MM_SHAPE(5));
    mm_tensor xr = tb_zeros(MM_F32, 2, MM_SHAPE(5, 512));
    mm_convrot_quantize(ctx, &q, &s, &x, 256);
    mm_hadamard_rotate(ctx, &xr, &x, 256);
    const float *vr = xr.data, *vs = s.data;
    const int8_t *vq = q.data;
    bad = 0;
    for (int r = 0; r < 5; r++) {
        float amax = 0;
        for (int k = 0; k < 512; k++)
            amax = fmaxf(amax, fabsf(vr[r * 512 + k]));
        bad += vs[r] != amax / 127.0f;
        for (int k = 0; k < 512; k++)
            bad += vq[r * 512 + k] != (int8_t)nearbyintf(vr[r * 512 + k] / vs[r]);
    }
    MM_EXPECT(bad == 0, "convrot quantize = rne(rotate(x) / (absmax/127)): %lld mismatches", (long long)bad);
    /* an all-zero row gets scale 1 and zero codes */
    mm_tensor z = tb_zeros(MM_BF16, 2, MM_SHAPE(1, 256)), zq = tb_zeros(MM_I8, 2, MM_SHAPE(1, 256)),
              zs = tb_zeros(MM_F32, 1, MM_SHAPE(1));
    mm_convrot_quantize(ctx, &zq, &zs, &z, 256);
    MM_EXPECT(((float *)zs.data)[0] == 1.0f, "zero row scale 1");
    MM_EXPECT(mm_convrot_quantize(ctx, &zq, &zs, &z, 128) == -1, "group 128 refused");
    mm_ctx_clear_error(ctx);
    /* int8 embedding: rows times their scale, ids range-checked */
    mm_tensor tab = tb_zeros(MM_I8, 2, MM_SHAPE(6, 4)), tsc = tb_rand(MM_F32, 2, MM_SHAPE(6, 1), 1.0);
    for (int i = 0; i < 24; i++)
        ((int8_t *)tab.data)[i] = (int8_t)(i * 11 - 100);
    mm_tensor tscv = mm_tensor_wrap(tsc.data, mm_cpu(), MM_F32, 1, MM_SHAPE(6));
    mm_tensor ids = tb_zeros(MM_I32, 1, MM_SHAPE(3));
    int32_t idv[3] = {5, 0, 5};
    memcpy(ids.data, idv, sizeof idv);
    mm_tensor er = tb_zeros(MM_F32, 2, MM_SHAPE(3, 4));
    mm_embedding_i8(ctx, &er, &ids, &tab, &tscv);
    MM_EXPECT(((float *)er.data)[0] == (float)((int8_t *)tab.data)[20] * ((float *)tsc.data)[5] &&
                  ((float *)er.data)[4 + 3] == (float)((int8_t *)tab.data)[3] * ((float *)tsc.data)[0],
              "embedding rows");
    idv[1] = 6;
    memcpy(ids.data, idv, sizeof idv);
    MM_EXPECT(mm_embedding_i8(ctx, &er, &ids, &tab, &tscv) == -1 && strstr(ctx_msg(), "ids[1] = 6"), "%s",
              ctx_msg());
    mm_ctx_clear_error(ctx);
    mm_tensor_free(&qx);
    mm_tensor_free(&qw);
    mm_tensor_free(&sx);
    mm_tensor_free(&sw);
    mm_tensor_free(&bias);
    mm_tensor_free(&o);
    mm_tensor_free(&x);
    mm_tensor_free(&q);
    mm_tensor_free(&s);
    mm_tensor_free(&xr);
    mm_tensor_free(&z);
    mm_tensor_free(&zq);
    mm_tensor_free(&zs);
    mm_tensor_free(&tab);
    mm_tensor_free(&tsc);
    mm_tensor_free(&ids);
    mm_tensor_free(&er);
}

/* ------------------------------------------------ errors and threading */

static void test_sticky_errors(void)
{
    mm_tensor a = tb_rand(MM_F32, 2, MM_SHAPE(3, 4), 1.0), b = tb_rand(MM_F32, 2, MM_SHAPE(4, 3), 1.0);
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(3, 4));
    MM_EXPECT(mm_add(ctx, &o, &a, &b) == -1, "shape mismatch fails");
    MM_EXPECT(mm_ctx_failed(ctx), "ctx failed");
    /* later ops are no-ops, even valid ones */
    MM_EXPECT(mm_fill(ctx, &o, 5.0) == -1 && mm_tensor_get(&o, MM_SHAPE(0, 0)) == 0.0, "later op skipped");
    mm_error e = {{0}};
    MM_EXPECT(mm_ctx_error(ctx, &e) == -1 && strstr(e.msg, "mm_add") && strstr(e.msg, "[3, 4]") &&
                  strstr(e.msg, "[4, 3]"),
              "first failure kept: %s", e.msg);
    mm_ctx_clear_error(ctx);
    MM_EXPECT(mm_fill(ctx, &o, 5.0) == 0 && mm_tensor_get(&o, MM_SHAPE(2, 3)) == 5.0, "works after clear");
    mm_tensor i8 = tb_zeros(MM_I8, 2, MM_SHAPE(3, 4));
    MM_EXPECT(mm_rmsnorm(ctx, &o, &i8, NULL, 1e-5f) == -1 && strstr(ctx_msg(), "dtype I8"), "%s", ctx_msg());
    mm_ctx_clear_error(ctx);
    mm_tensor gpu = o;
    gpu.device = mm_cuda(0);
    MM_EXPECT(mm_add(ctx, &o, &a, &gpu) == -1 && strstr(ctx_msg(), "cuda:0"), "%s", ctx_msg());
    mm_ctx_clear_error(ctx);
    if (mm_cuda_count() == 0) { /* no usable GPU: a CUDA context is refused with a reason */
        mm_ctx *cu = NULL;
        MM_EXPECT(mm_ctx_create(&cu, mm_cuda(0), 0, &e) == -1 &&
                      (strstr(e.msg, "without CUDA") || strstr(e.msg, "no CUDA device")),
                  "%s", e.msg);
    }
    mm_tensor_free(&a);
    mm_tensor_free(&b);
    mm_tensor_free(&o);
    mm_tensor_free(&i8);
}

/* backend/fused.h off CUDA: the kernels never fit, the fused passes and
 * kernels refuse the context by name (so a caller that forgot the CUDA
 * path's condition learns it), and the paths name the portable ops. */
static void test_fused_ops_refuse_a_cpu_context(void)
{
    mm_tensor x = tb_rand(MM_BF16, 2, MM_SHAPE(4, 256), 1.0), gu = tb_rand(MM_BF16, 2, MM_SHAPE(4, 512), 1.0);
    mm_tensor q = tb_zeros(MM_I8, 2, MM_SHAPE(4, 256)), s = tb_zeros(MM_F32, 1, MM_SHAPE(4));
    MM_EXPECT(!mm_qgemm_fits(ctx, &x, &q, &q) && !mm_qgemm_lora_ready(ctx), "the int8 GEMM fits a CPU context");
#ifdef MMH3_HAVE_CUDA
    const bool cuda_built = true;
#else
    const bool cuda_built = false;
#endif
    MM_EXPECT(mm_fused_swiglu_convrot(ctx, &q, &s, NULL, &gu) == -1 &&
                  (cuda_built ? strstr(ctx_msg(), "mm_fused_swiglu_convrot: a CUDA context only (this one is on cpu)")
                              : strstr(ctx_msg(), "built without CUDA")),
              "%s", ctx_msg());
    mm_ctx_clear_error(ctx);
    MM_EXPECT(mm_qgemm(ctx, &x, &q, &s, &q, &s, NULL, NULL) == -1 &&
                  strstr(ctx_msg(), cuda_built ? "on an sm_90 GPU" : "built without CUDA"),
              "%s", ctx_msg());
    mm_ctx_clear_error(ctx);
    mm_dit_kernel_paths p;
    mm_dit_kernel_paths_get(mm_cpu(), true, &p);
    MM_EXPECT(!p.fa3 && !p.fast_fa3 && !p.qgemm && strstr(p.attention, "mm_attention") &&
                  strstr(p.gemm, "mm_gemm_i8_scaled"),
              "%s | %s | %s", p.attention, p.fast, p.gemm);
    char line[300];
    mm_dit_kernel_paths_describe(mm_cpu(), line, sizeof line);
    MM_EXPECT(strncmp(line, "cpu: ", 5) == 0 && strstr(line, cuda_built ? "mm_attention" : "built without CUDA"), "%s",
              line);
    mm_tensor_free(&x);
    mm_tensor_free(&gu);
    mm_tensor_free(&q);
    mm_tensor_free(&s);
}

static void test_threads_bitwise_equal(void)
{
    mm_error e = {{0}};
    mm_ctx *one = NULL, *many = NULL;
    MM_REQUIRE(mm_ctx_create(&one, mm_cpu(), 1, &e) == 0 && mm_ctx_create(&many, mm_cpu(), 5, &e) == 0, "%s", e.msg);
    MM_EXPECT(mm_ctx_threads(one) == 1 && mm_ctx_threads(many) == 5, "thread counts");
    mm_tensor a = tb_rand(MM_BF16, 2, MM_SHAPE(200, 300), 1.0), w = tb_rand(MM_BF16, 2, MM_SHAPE(500, 300), 1.0);
    mm_tensor wt = mm_tensor_transpose(&w, 0, 1);
    mm_tensor o1 = tb_zeros(MM_F32, 2, MM_SHAPE(200, 500)), o2 = tb_zeros(MM_F32, 2, MM_SHAPE(200, 500));
    mm_matmul(one, &o1, &a, &wt, NULL);
    mm_matmul(many, &o2, &a, &wt, NULL);
    MM_EXPECT(memcmp(o1.data, o2.data, 200 * 500 * 4) == 0, "gemm: 1 and 5 threads agree bit for bit");
    mm_tensor q = tb_rand(MM_F32, 3, MM_SHAPE(300, 2, 32), 1.0);
    mm_tensor a1 = tb_zeros(MM_F32, 3, MM_SHAPE(300, 2, 32)), a2 = tb_zeros(MM_F32, 3, MM_SHAPE(300, 2, 32));
    mm_attention(one, &a1, &q, &q, &q, NULL);
    mm_attention(many, &a2, &q, &q, &q, NULL);
    MM_EXPECT(memcmp(a1.data, a2.data, 300 * 64 * 4) == 0, "attention: 1 and 5 threads agree bit for bit");
    MM_EXPECT(!mm_ctx_failed(one) && !mm_ctx_failed(many), "no failure");
    mm_ctx_destroy(one);
    mm_ctx_destroy(many);
    mm_tensor_free(&a);
    mm_tensor_free(&w);
    mm_tensor_free(&o1);
    mm_tensor_free(&o2);
    mm_tensor_free(&q);
    mm_tensor_free(&a1);
    mm_tensor_free(&a2);
}

/* A CPU context with no thread count takes the kernel policy's, which
 * $MMH3_THREADS sets only when it is a count in 1..1024; anything else means
 * one worker per core, and the policy names the value it did not take. */
static void test_threads_from_the_environment(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    static const struct {
        const char *value;
        long want; /* 0: one per core */
    } cases[] = {{"3", 3}, {"4294967297", 0}, {"99999", 0}, {"2x", 0}, {"0", 0}, {"-4", 0}, {"", 0}};
    const mm_kernel_policy process = *mm_kernel_policy_get();
    const char *saved = getenv("MMH3_THREADS");
    char keep[64] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("MMH3_THREADS", cases[i].value, 1);
        mm_kernel_policy p;
        mm_kernel_policy_from_env(&p);
        const bool refused = cases[i].want == 0 && cases[i].value[0];
        MM_EXPECT(refused ? p.n_problems == 1 && strstr(p.problems[0], "MMH3_THREADS=") &&
                                strstr(p.problems[0], "1..1024")
                          : p.n_problems == 0,
                  "MMH3_THREADS=%s: %d problems (%s)", cases[i].value, p.n_problems, p.n_problems ? p.problems[0] : "");
        mm_kernel_policy_install(&p);
        mm_ctx *c = NULL;
        mm_error e = {{0}};
        MM_REQUIRE(mm_ctx_create(&c, mm_cpu(), 0, &e) == 0, "MMH3_THREADS=%s: %s", cases[i].value, e.msg);
        long want = cases[i].want ? cases[i].want : (cores > 0 ? cores : 1);
        MM_EXPECT(mm_ctx_threads(c) == want, "MMH3_THREADS=%s: %d workers, %ld expected", cases[i].value,
                  mm_ctx_threads(c), want);
        mm_ctx_destroy(c);
    }
    if (saved)
        setenv("MMH3_THREADS", keep, 1);
    else
        unsetenv("MMH3_THREADS");
    mm_kernel_policy_install(&process);
}

int main(void)
{
    mm_error e = {{0}};
    if (mm_ctx_create(&ctx, mm_cpu(), 3, &e) != 0) {
        printf("FAIL setup: %s\n", e.msg);
        return 1;
    }
    MM_RUN(test_elementwise_mixed_dtypes_and_strides);
    MM_RUN(test_copy_convert_fill);
    MM_RUN(test_norms);
    MM_RUN(test_groupnorm);
    MM_RUN(test_reductions);
    MM_RUN(test_modulation_and_gated_residual);
    MM_RUN(test_rope);
    MM_RUN(test_attention);
    MM_RUN(test_gemm);
    MM_RUN(test_gather_scatter);
    MM_RUN(test_conv1d_and_transpose);
    MM_RUN(test_conv3d);
    MM_RUN(test_pad);
    MM_RUN(test_interpolate);
    MM_RUN(test_snake);
    MM_RUN(test_int8_gemm_and_quantize);
    MM_RUN(test_sticky_errors);
    MM_RUN(test_fused_ops_refuse_a_cpu_context);
    MM_RUN(test_threads_bitwise_equal);
    MM_RUN(test_threads_from_the_environment);
    mm_ctx_destroy(ctx);
    return mm_test_exit();
}
