/* The kernels of kernels/mmk.h that backend/ops.h does not reach (the DiT's
 * fused paths: ConvRot quantization fused with RMSNorm + modulation or
 * SwiGLU, the int8 linear with its gated-residual epilogue, the fused q/k
 * RMSNorm + RoPE), plus independent checks of the GEMMs and attention
 * against double-precision references computed here (test_cuda_ops compares
 * every op with its CPU twin). Random data, sizes that are not multiples of
 * the kernels' tiles, outputs poisoned (0xFF bytes = NaN) before each run.
 * Tolerances are stated per case:
 *   - ops that round once to bf16: at most 1 bf16 ulp from the reference
 *     rounded to bf16 (f32 summation order differs from double);
 *   - GEMMs and attention with bf16 operands: rel_l2 < 4e-3 against the
 *     double product of the same bf16 inputs;
 *   - f32 GEMM: rel_l2 < 1e-5 (no TF32);
 *   - int8 GEMM: exact. */
#include "cuda_test.h"
#include "kernels/mmk.h"

#define DEV 0
#define STREAM ((mmk_stream)mm_cuda_stream(DEV))

static cuda_test_rng rng = {0x9E3779B97F4A7C15ull};

/* ------------------------------------------------------------------ GEMM */

static void gemm_ref(int M, int N, int K, const float *a, const float *w, const float *bias, double *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0;
            for (int k = 0; k < K; k++)
                s += (double)a[(size_t)m * K + k] * w[(size_t)n * K + k];
            y[(size_t)m * N + n] = s;
        }
}

static void test_gemm_bf16_bias(void)
{
    int M = 257, N = 392, K = 328;
    float *a = cuda_test_randn(&rng, (size_t)M * K, 1), *w = cuda_test_randn(&rng, (size_t)N * K, 0.05f);
    float *bias = cuda_test_randn(&rng, N, 1);
    uint16_t *ab = cuda_test_to_bf16(a, (size_t)M * K), *wb = cuda_test_to_bf16(w, (size_t)N * K);
    uint16_t *bb = cuda_test_to_bf16(bias, N);
    double *ref = malloc(sizeof(double) * M * N);
    gemm_ref(M, N, K, a, w, bias, ref);
    void *da = cuda_test_upload(ab, (size_t)M * K * 2), *dw = cuda_test_upload(wb, (size_t)N * K * 2);
    void *db = cuda_test_upload(bias, N * 4), *dy = cuda_test_upload(NULL, (size_t)M * N * 2);
    (void)bb;
    mmk_gemm g = {.M = M, .N = N, .K = K, .ab_dtype = MM_BF16, .a = da, .lda = K, .w = dw, .ldw = K, .bias = db,
                  .y = dy, .ldy = N, .y_dtype = MM_BF16};
    CUDA_TEST_OK(mmk_gemm_run(DEV, STREAM, &g, &cuda_test_err));
    uint16_t *y = cuda_test_download(dy, (size_t)M * N * 2, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    float *yf = cuda_test_from_bf16(y, (size_t)M * N);
    cuda_test_diff d = cuda_test_compare(yf, ref, (size_t)M * N);
    MM_EXPECT(d.nonfinite == 0 && d.rel_l2 < 4e-3, "rel_l2 %.2e max_abs %.3g nonfinite %ld", d.rel_l2, d.max_abs,
              d.nonfinite);
    free(a), free(w), free(bias), free(ab), free(wb), free(bb), free(ref), free(y), free(yf);
    mm_cuda_free(DEV, da), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, db), mm_cuda_free(DEV, dy);
}

static void test_gemm_bf16_f32out_accumulate(void)
{
    int M = 130, N = 200, K = 96;
    float *a = cuda_test_randn(&rng, (size_t)M * K, 1), *w = cuda_test_randn(&rng, (size_t)N * K, 0.1f);
    float *y0 = cuda_test_randn(&rng, (size_t)M * N, 1);
    uint16_t *ab = cuda_test_to_bf16(a, (size_t)M * K), *wb = cuda_test_to_bf16(w, (size_t)N * K);
    double *ref = malloc(sizeof(double) * M * N);
    gemm_ref(M, N, K, a, w, NULL, ref);
    for (int i = 0; i < M * N; i++)
        ref[i] += y0[i];
    /* a and y live inside wider buffers: strides != widths */
    int lda = K + 8, ldy = N + 4;
    uint16_t *ap = calloc((size_t)M * lda, 2);
    float *yp = calloc((size_t)M * ldy, 4);
    for (int m = 0; m < M; m++) {
        memcpy(ap + (size_t)m * lda, ab + (size_t)m * K, (size_t)K * 2);
        memcpy(yp + (size_t)m * ldy, y0 + (size_t)m * N, (size_t)N * 4);
    }
    void *da = cuda_test_upload(ap, (size_t)M * lda * 2), *dw = cuda_test_upload(wb, (size_t)N * K * 2);
    void *dy = cuda_test_upload(yp, (size_t)M * ldy * 4);
    mmk_gemm g = {.M = M, .N = N, .K = K, .ab_dtype = MM_BF16, .a = da, .lda = lda, .w = dw, .ldw = K, .y = dy,
                  .ldy = ldy, .y_dtype = MM_F32, .beta = 1.f};
    CUDA_TEST_OK(mmk_gemm_run(DEV, STREAM, &g, &cuda_test_err));
    float *y = cuda_test_download(dy, (size_t)M * ldy * 4, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    float *yc = malloc(sizeof(float) * M * N);
    for (int m = 0; m < M; m++)
        memcpy(yc + (size_t)m * N, y + (size_t)m * ldy, (size_t)N * 4);
    cuda_test_diff d = cuda_test_compare(yc, ref, (size_t)M * N);
    MM_EXPECT(d.nonfinite == 0 && d.rel_l2 < 1e-5, "rel_l2 %.2e max_abs %.3g", d.rel_l2, d.max_abs);
    free(a), free(w), free(y0), free(ab), free(wb), free(ref), free(ap), free(yp), free(y), free(yc);
    mm_cuda_free(DEV, da), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, dy);
}

static void test_gemm_f32(void)
{
    int M = 75, N = 96, K = 1000;
    float *a = cuda_test_randn(&rng, (size_t)M * K, 1), *w = cuda_test_randn(&rng, (size_t)N * K, 1);
    float *bias = cuda_test_randn(&rng, N, 1);
    double *ref = malloc(sizeof(double) * M * N);
    gemm_ref(M, N, K, a, w, bias, ref);
    void *da = cuda_test_upload(a, (size_t)M * K * 4), *dw = cuda_test_upload(w, (size_t)N * K * 4);
    void *db = cuda_test_upload(bias, N * 4), *dy = cuda_test_upload(NULL, (size_t)M * N * 4);
    mmk_gemm g = {.M = M, .N = N, .K = K, .ab_dtype = MM_F32, .a = da, .lda = K, .w = dw, .ldw = K, .bias = db,
                  .y = dy, .ldy = N, .y_dtype = MM_F32};
    CUDA_TEST_OK(mmk_gemm_run(DEV, STREAM, &g, &cuda_test_err));
    float *y = cuda_test_download(dy, (size_t)M * N * 4, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    cuda_test_diff d = cuda_test_compare(y, ref, (size_t)M * N);
    MM_EXPECT(d.nonfinite == 0 && d.rel_l2 < 1e-5, "rel_l2 %.2e (TF32 would be ~1e-4) max_abs %.3g", d.rel_l2,
              d.max_abs);
    free(a), free(w), free(bias), free(ref), free(y);
    mm_cuda_free(DEV, da), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, db), mm_cuda_free(DEV, dy);
}

static int8_t *rand_i8(size_t n)
{
    int8_t *v = malloc(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (int8_t)((int)(cuda_test_next(&rng) % 255) - 127);
    return v;
}

static void test_gemm_i8_exact(void)
{
    int M = 333, N = 264, K = 512;
    int8_t *a = rand_i8((size_t)M * K), *w = rand_i8((size_t)N * K);
    void *da = cuda_test_upload(a, (size_t)M * K), *dw = cuda_test_upload(w, (size_t)N * K);
    void *dy = cuda_test_upload(NULL, (size_t)M * N * 4);
    mmk_gemm g = {.M = M, .N = N, .K = K, .ab_dtype = MM_I8, .a = da, .lda = K, .w = dw, .ldw = K, .y = dy, .ldy = N,
                  .y_dtype = MM_I32};
    CUDA_TEST_OK(mmk_gemm_run(DEV, STREAM, &g, &cuda_test_err));
    int32_t *y = cuda_test_download(dy, (size_t)M * N * 4, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    long bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int32_t)a[(size_t)m * K + k] * w[(size_t)n * K + k];
            bad += y[(size_t)m * N + n] != s;
        }
    MM_EXPECT(bad == 0, "%ld of %d int32 results differ", bad, M * N);
    free(a), free(w), free(y);
    mm_cuda_free(DEV, da), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, dy);
}

/* The ConvRot epilogue in both forms; the store path must match the
 * reference arithmetic bit for bit, the gated residual within 1 ulp. */
static void qlinear_case(int M, int N, int K, int gated)
{
    int8_t *a = rand_i8((size_t)M * K), *w = rand_i8((size_t)N * K);
    float *sx = malloc(4 * M), *sw = malloc(4 * N);
    for (int i = 0; i < M; i++)
        sx[i] = 0.001f + 0.01f * fabsf(cuda_test_uniform(&rng));
    for (int i = 0; i < N; i++)
        sw[i] = 0.0001f + 0.001f * fabsf(cuda_test_uniform(&rng));
    int T = 5;
    float *gate = cuda_test_randn(&rng, (size_t)T * N, 1), *x0 = cuda_test_randn(&rng, (size_t)M * N, 1);
    uint16_t *gb = cuda_test_to_bf16(gate, (size_t)T * N), *xb = cuda_test_to_bf16(x0, (size_t)M * N);
    (void)gb; /* the gate table goes to the kernel as f32 (of bf16 values) */
    int32_t *idx = malloc(4 * M);
    for (int i = 0; i < M; i++)
        idx[i] = (int32_t)(cuda_test_next(&rng) % T);
    void *da = cuda_test_upload(a, (size_t)M * K), *dw = cuda_test_upload(w, (size_t)N * K);
    void *dsx = cuda_test_upload(sx, 4 * M), *dsw = cuda_test_upload(sw, 4 * N);
    void *dg = cuda_test_upload(gate, (size_t)T * N * 4), *di = cuda_test_upload(idx, 4 * M);
    void *dy = cuda_test_upload(gated ? xb : NULL, (size_t)M * N * 2);
    mmk_qlinear q = {.M = M, .N = N, .K = K, .xq = da, .ldx = K, .sx = dsx, .wq = dw, .ldw = K, .sw = dsw, .y = dy,
                     .ldy = N, .y_dtype = MM_BF16, .gate = gated ? dg : NULL, .ld_gate = N, .mod_idx = gated ? di : NULL};
    CUDA_TEST_OK(mmk_qlinear_i8(DEV, STREAM, &q, &cuda_test_err));
    uint16_t *y = cuda_test_download(dy, (size_t)M * N * 2, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    long exact_miss = 0;
    double *ref = malloc(sizeof(double) * M * N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int32_t)a[(size_t)m * K + k] * w[(size_t)n * K + k];
            float o = (float)s * (sx[m] * sw[n]);
            uint16_t ob = mm_f32_to_bf16(o);
            if (!gated) {
                exact_miss += y[(size_t)m * N + n] != ob;
                ref[(size_t)m * N + n] = o;
            } else {
                ref[(size_t)m * N + n] =
                    (double)x0[(size_t)m * N + n] + (double)gate[(size_t)idx[m] * N + n] * mm_bf16_to_f32(ob);
            }
        }
    if (!gated)
        MM_EXPECT(exact_miss == 0, "M=%d N=%d K=%d: %ld outputs differ from bf16(acc·(sx·sw))", M, N, K, exact_miss);
    long miss = cuda_test_bf16_ulp_misses(y, ref, (size_t)M * N, 1);
    MM_EXPECT(miss == 0, "M=%d N=%d K=%d gated=%d: %ld outputs more than 1 bf16 ulp off", M, N, K, gated, miss);
    free(a), free(w), free(sx), free(sw), free(gate), free(x0), free(gb), free(xb), free(idx), free(y), free(ref);
    mm_cuda_free(DEV, da), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, dsx), mm_cuda_free(DEV, dsw);
    mm_cuda_free(DEV, dg), mm_cuda_free(DEV, di), mm_cuda_free(DEV, dy);
}

static void test_qlinear_i8_store(void) { qlinear_case(300, 256, 768, 0); }
static void test_qlinear_i8_gated_residual(void) { qlinear_case(181, 136, 256, 1); }
static void test_qlinear_i8_odd_n(void) { qlinear_case(64, 100, 256, 0); }

/* q/k RMSNorm + RoPE on views of a fused [rows, q | k | v] buffer: v must be
 * left untouched. */
static void test_qk_norm_rope(void)
{
    int R = 77, HQ = 4, HK = 2, D = 128, rot = 96, h = rot / 2;
    int ld = (HQ + 2 * HK) * D;
    size_t n = (size_t)R * ld;
    float *x = cuda_test_randn(&rng, n, 4), *wq = cuda_test_randn(&rng, D, 1), *wk = cuda_test_randn(&rng, D, 1);
    uint16_t *xb = cuda_test_to_bf16(x, n), *wqb = cuda_test_to_bf16(wq, D), *wkb = cuda_test_to_bf16(wk, D);
    float *cs = malloc(sizeof(float) * R * rot), *sn = malloc(sizeof(float) * R * rot);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < rot; j++) {
            double ang = (r * 3 + 1) * pow(10000.0, -(double)(j % h % 16) / 16.0);
            cs[r * rot + j] = (float)cos(ang);
            sn[r * rot + j] = (float)sin(ang);
        }
    uint16_t *cb = cuda_test_to_bf16(cs, (size_t)R * rot), *sb = cuda_test_to_bf16(sn, (size_t)R * rot);
    double *ref = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        ref[i] = x[i];
    for (int r = 0; r < R; r++)
        for (int hh = 0; hh < HQ + HK; hh++) {
            float *p = x + (size_t)r * ld + (size_t)hh * D;
            const float *w = hh < HQ ? wq : wk;
            double ss = 0;
            for (int j = 0; j < D; j++)
                ss += (double)p[j] * p[j];
            double inv = 1.0 / sqrt(ss / D + 1e-5);
            float nv[128];
            for (int j = 0; j < D; j++)
                nv[j] = mm_round_bf16((float)(p[j] * inv * w[j]));
            double *o = ref + (size_t)r * ld + (size_t)hh * D;
            for (int j = 0; j < D; j++) {
                if (j < h)
                    o[j] = (double)nv[j] * cs[r * rot + j] - (double)nv[j + h] * sn[r * rot + j];
                else if (j < rot)
                    o[j] = (double)nv[j] * cs[r * rot + j] + (double)nv[j - h] * sn[r * rot + j];
                else
                    o[j] = nv[j];
            }
        }
    uint16_t *dx = cuda_test_upload(xb, n * 2);
    void *dwq = cuda_test_upload(wq, D * 4), *dwk = cuda_test_upload(wk, D * 4); /* f32 of bf16 values */
    void *dc = cuda_test_upload(cb, (size_t)R * rot * 2), *ds = cuda_test_upload(sb, (size_t)R * rot * 2);
    mmk_qk_norm_rope a = {.rows = R, .heads_q = HQ, .heads_k = HK, .head_dim = D, .q = dx, .ldq = ld, .k = dx + HQ * D,
                          .ldk = ld, .wq = dwq, .wk = dwk, .eps = 1e-5f, .cos = dc, .sin = ds, .ld_rope = rot,
                          .rot_dim = rot};
    CUDA_TEST_OK(mmk_qk_norm_rope_run(DEV, STREAM, &a, &cuda_test_err));
    uint16_t *y = cuda_test_download(dx, n * 2, &cuda_test_err);
    MM_REQUIRE(y, "%s", cuda_test_err.msg);
    long miss = cuda_test_bf16_ulp_misses(y, ref, n, 1);
    long v_changed = 0;
    for (int r = 0; r < R; r++)
        for (int j = (HQ + HK) * D; j < ld; j++)
            v_changed += y[(size_t)r * ld + j] != xb[(size_t)r * ld + j];
    MM_EXPECT(miss == 0, "%ld outputs more than 1 bf16 ulp off", miss);
    MM_EXPECT(v_changed == 0, "%ld values of v changed", v_changed);
    free(x), free(wq), free(wk), free(xb), free(wqb), free(wkb), free(cs), free(sn), free(cb), free(sb), free(ref);
    free(y);
    mm_cuda_free(DEV, dx), mm_cuda_free(DEV, dwq), mm_cuda_free(DEV, dwk), mm_cuda_free(DEV, dc), mm_cuda_free(DEV, ds);
}

/* ------------------------------------------------------------------ ConvRot */

/* The reference: H256 applied as a dense matrix in double, rounded to bf16. */
static double h256(int i, int j)
{
    static double m[256][256];
    static int ready;
    if (!ready) {
        static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
        for (int a = 0; a < 256; a++)
            for (int b = 0; b < 256; b++) {
                int s = 1, x = a, y = b;
                for (int d = 0; d < 4; d++) {
                    s *= H4[x & 3][y & 3];
                    x >>= 2;
                    y >>= 2;
                }
                m[a][b] = s / 16.0;
            }
        ready = 1;
    }
    return m[i][j];
}

static void convrot_case_k(int pre, int groups)
{
    int R = 50, K = groups * 256;
    int in_cols = pre == MMK_PRE_SWIGLU ? 2 * K : K;
    int T = 3;
    float *x = cuda_test_randn(&rng, (size_t)R * in_cols, 2);
    for (int c = 0; c < in_cols; c += 97)
        x[c] = 150.f; /* outliers, as the model has */
    float *w = cuda_test_randn(&rng, K, 1), *tab = cuda_test_randn(&rng, (size_t)T * 2 * K, 0.3f);
    uint16_t *xb = cuda_test_to_bf16(x, (size_t)R * in_cols), *wb = cuda_test_to_bf16(w, K);
    uint16_t *tb = cuda_test_to_bf16(tab, (size_t)T * 2 * K);
    int32_t *idx = malloc(4 * R);
    for (int i = 0; i < R; i++)
        idx[i] = (int32_t)(cuda_test_next(&rng) % T);
    /* row 7 all zero: scale must be 1, codes 0 */
    if (pre != MMK_PRE_RMSNORM_MOD)
        for (int c = 0; c < in_cols; c++) {
            x[7 * in_cols + c] = 0;
            xb[7 * in_cols + c] = 0;
        }
    float *hrow = malloc(sizeof(float) * K);
    float *xr = malloc(sizeof(float) * (size_t)R * K), *sref = malloc(sizeof(float) * R);
    for (int r = 0; r < R; r++) {
        const float *row = x + (size_t)r * in_cols;
        if (pre == MMK_PRE_SWIGLU) {
            for (int c = 0; c < K; c++) {
                double g = row[c];
                hrow[c] = mm_round_bf16((float)(g / (1 + exp(-g)) * row[K + c]));
            }
        } else if (pre == MMK_PRE_RMSNORM_MOD) {
            double ss = 0;
            for (int c = 0; c < K; c++)
                ss += (double)row[c] * row[c];
            double inv = 1.0 / sqrt(ss / K + 1e-5);
            const float *m = tab + (size_t)idx[r] * 2 * K;
            for (int c = 0; c < K; c++)
                hrow[c] = mm_round_bf16((float)(row[c] * inv * w[c] * (1.0 + m[K + c]) + m[c]));
        } else {
            for (int c = 0; c < K; c++)
                hrow[c] = row[c];
        }
        double amax = 0;
        for (int g = 0; g < K / 256; g++)
            for (int j = 0; j < 256; j++) {
                double s = 0;
                for (int i = 0; i < 256; i++)
                    s += hrow[g * 256 + i] * h256(i, j);
                float v = mm_round_bf16((float)s);
                xr[(size_t)r * K + g * 256 + j] = v;
                if (fabs(v) > amax)
                    amax = fabs(v);
            }
        sref[r] = amax > 0 ? (float)amax / 127.f : 1.f;
    }
    void *dx = cuda_test_upload(xb, (size_t)R * in_cols * 2), *dw = cuda_test_upload(w, K * 4);
    float *dt = cuda_test_upload(tab, (size_t)T * 2 * K * 4); /* f32 of bf16 values */
    void *di = cuda_test_upload(idx, 4 * R), *dq = cuda_test_upload(NULL, (size_t)R * K), *ds = cuda_test_upload(NULL, 4 * R);
    bool mod = pre == MMK_PRE_RMSNORM_MOD;
    mmk_convrot_quant a = {.rows = R, .K = K, .group = 256, .pre = pre, .x = dx, .x_dtype = MM_BF16, .ldx = in_cols,
                           .norm_w = mod ? dw : NULL, .eps = 1e-5f, .shift = mod ? dt : NULL,
                           .scale = mod ? dt + K : NULL, .ld_mod = 2 * K, .mod_idx = di, .q = dq, .ldq = K, .s = ds,
                           .s_stride = 1};
    CUDA_TEST_OK(mmk_convrot_quant_run(DEV, STREAM, &a, &cuda_test_err));
    int8_t *q = cuda_test_download(dq, (size_t)R * K, &cuda_test_err);
    float *s = cuda_test_download(ds, 4 * R, &cuda_test_err);
    MM_REQUIRE(q && s, "%s", cuda_test_err.msg);
    long scale_off = 0, code_off = 0, code_far = 0;
    for (int r = 0; r < R; r++) {
        if (fabsf(s[r] - sref[r]) > 1e-6f * sref[r] + 1e-30f)
            scale_off++;
        for (int c = 0; c < K; c++) {
            float want = rintf(xr[(size_t)r * K + c] / sref[r]);
            want = fminf(fmaxf(want, -127.f), 127.f);
            int dlt = abs((int)q[(size_t)r * K + c] - (int)want);
            code_off += dlt != 0;
            code_far += dlt > 1;
        }
    }
    /* pre = none: the same bf16 rotation, so codes match all but a handful
     * (bf16 rounding of the fp32 butterfly vs. the double sum); the fused
     * pre-ops differ by fp32 statistics too. */
    double frac = (double)code_off / ((double)R * K);
    MM_EXPECT(code_far == 0, "pre=%d K=%d: %ld codes off by more than one", pre, K, code_far);
    MM_EXPECT(frac < (pre == MMK_PRE_NONE ? 1e-3 : 5e-3), "pre=%d K=%d: %.3f%% of codes off by one", pre, K,
              100 * frac);
    MM_EXPECT(scale_off <= (pre == MMK_PRE_NONE ? 1 : R / 10), "pre=%d K=%d: %ld row scales differ", pre, K,
              scale_off);
    if (pre != MMK_PRE_RMSNORM_MOD) {
        long nz = 0;
        for (int c = 0; c < K; c++)
            nz += q[7 * K + c] != 0;
        MM_EXPECT(s[7] == 1.f && nz == 0, "zero row: scale %g, %ld nonzero codes", s[7], nz);
    }
    printf("  pre=%d K=%d (%s): %.4f%% codes off by one, %ld row scales differ\n", pre, K,
           mmk_convrot_quant_kernel(&a), 100 * frac, scale_off);
    free(x), free(w), free(tab), free(xb), free(wb), free(tb), free(idx), free(hrow), free(xr), free(sref), free(q);
    free(s);
    mm_cuda_free(DEV, dx), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, dt), mm_cuda_free(DEV, di);
    mm_cuda_free(DEV, dq), mm_cuda_free(DEV, ds);
}

/* 21 groups: the kernel's odd-group padding */
static void test_convrot_quant_plain(void) { convrot_case_k(MMK_PRE_NONE, 21); }
static void test_convrot_quant_rmsnorm_mod(void) { convrot_case_k(MMK_PRE_RMSNORM_MOD, 21); }
static void test_convrot_quant_swiglu(void) { convrot_case_k(MMK_PRE_SWIGLU, 21); }
/* Past 28 warps (K > 14,336) the one-row kernel once failed to launch
 * (registers); it runs by default for RMSNorm past K = 6144 and for SwiGLU
 * at K = 16,384 (the API's limit, 1024 threads), where the SiLU table leaves
 * no room for the pipelined kernel's stages. */
static void test_convrot_quant_wide(void)
{
    convrot_case_k(MMK_PRE_RMSNORM_MOD, 57);
    convrot_case_k(MMK_PRE_RMSNORM_MOD, 64);
    convrot_case_k(MMK_PRE_SWIGLU, 64);
}

/* The pipelined ConvRot kernel (the default) must give the one-row kernel's
 * codes and scales bit for bit: the same inputs through both, compared byte
 * by byte. Rows outnumber the resident blocks (each block walks several rows
 * through its copy stages); row 3 is zero, row 5 tiny (a subnormal scale:
 * the quantizer's division fallback), every 97th input an outlier. */
/* These tests switch an op between its two kernels through the kernels'
 * policy (kernels/mmk.h), put back afterwards. */
static mmk_policy policy_saved;
static void policy_push(void) { policy_saved = *mmk_policy_get(); }
static void policy_pop(void) { mmk_policy_set(&policy_saved); }

static const float swiglu_edges[] = {0x1p-25f, -0x1p-25f, 0x1.fcp-26f, -0x1.fcp-26f, 31.75f, -31.75f, 32.f, -32.f,
                                     -100.f, 100.f, 0.f, -0.f, 1e-30f, 17.f, -17.f, -90.f};

static void convrot_pipe_case(int pre, int R, int groups, int ldq_pad, int with_w, int with_mod)
{
    int K = groups * 256, in_cols = pre == MMK_PRE_SWIGLU ? 2 * K : K, T = 5, ldq = K + ldq_pad;
    size_t nx = (size_t)R * in_cols;
    uint16_t *xb = malloc(nx * 2);
    for (size_t i = 0; i < nx; i++) {
        size_t r = i / in_cols, c = i % in_cols;
        float v = i % 97 == 0 ? 200.f : cuda_test_uniform(&rng) * 3.f;
        if (pre == MMK_PRE_SWIGLU && (int)c < K && c % 89 == 1) /* gates at the edges of the SiLU table */
            v = swiglu_edges[(i / 89) % (sizeof swiglu_edges / sizeof swiglu_edges[0])];
        if (r == 3)
            v = 0.f;
        if (r == 5 && (pre != MMK_PRE_SWIGLU || (int)c >= K))
            v *= 1e-38f;
        xb[i] = mm_f32_to_bf16(v);
    }
    float *w = malloc(sizeof(float) * K), *tab = malloc(sizeof(float) * T * 2 * K);
    for (int i = 0; i < K; i++)
        w[i] = mm_round_bf16(1.f + 0.5f * cuda_test_uniform(&rng));
    for (int i = 0; i < T * 2 * K; i++)
        tab[i] = mm_round_bf16(0.3f * cuda_test_uniform(&rng));
    int32_t *idx = malloc(4 * R);
    for (int i = 0; i < R; i++)
        idx[i] = (int32_t)(cuda_test_next(&rng) % T);
    void *dx = cuda_test_upload(xb, nx * 2), *dw = cuda_test_upload(w, 4 * K), *di = cuda_test_upload(idx, 4 * R);
    float *dt = cuda_test_upload(tab, sizeof(float) * T * 2 * K);
    void *dq[2], *ds[2];
    int8_t *q[2] = {NULL, NULL};
    float *sc[2] = {NULL, NULL};
    bool mod = pre == MMK_PRE_RMSNORM_MOD;
    for (int v = 0; v < 2; v++) {
        dq[v] = cuda_test_upload(NULL, (size_t)R * ldq);
        ds[v] = cuda_test_upload(NULL, 4 * R);
        policy_push();
        mmk_policy pol = policy_saved;
        pol.convrot_pipe = v;
        mmk_policy_set(&pol);
        mmk_convrot_quant a = {.rows = R, .K = K, .group = 256, .pre = pre, .x = dx, .x_dtype = MM_BF16,
                               .ldx = in_cols, .norm_w = mod && with_w ? dw : NULL, .eps = 1e-5f,
                               .shift = mod && with_mod ? dt : NULL, .scale = mod && with_mod ? dt + K : NULL,
                               .ld_mod = 2 * K, .mod_idx = di, .q = dq[v], .ldq = ldq, .s = ds[v], .s_stride = 1};
        const char *want = v ? "pipe" : "row";
        MM_EXPECT(!strcmp(mmk_convrot_quant_kernel(&a), want), "kernel %d runs %s, not %s", v,
                  mmk_convrot_quant_kernel(&a), want);
        int rc = mmk_convrot_quant_run(DEV, STREAM, &a, &cuda_test_err);
        policy_pop();
        MM_EXPECT(rc == 0, "kernel %d: %s", v, cuda_test_err.msg);
        q[v] = cuda_test_download(dq[v], (size_t)R * ldq, &cuda_test_err);
        sc[v] = cuda_test_download(ds[v], 4 * R, &cuda_test_err);
        MM_EXPECT(q[v] && sc[v], "%s", cuda_test_err.msg);
    }
    if (q[0] && q[1] && sc[0] && sc[1]) {
        long code_diff = 0, scale_diff = 0;
        for (int r = 0; r < R; r++) {
            code_diff += memcmp(q[0] + (size_t)r * ldq, q[1] + (size_t)r * ldq, K) != 0;
            scale_diff += memcmp(&sc[0][r], &sc[1][r], 4) != 0;
        }
        MM_EXPECT(code_diff == 0 && scale_diff == 0,
                  "pipe pre=%d K=%d R=%d ldq=%d: %ld rows of codes and %ld scales differ from k_convrot_quant", pre, K,
                  R, ldq, code_diff, scale_diff);
        MM_EXPECT(pre == MMK_PRE_RMSNORM_MOD || sc[1][3] == 1.f, "zero row: scale %g", sc[1][3]);
    }
    for (int v = 0; v < 2; v++) {
        free(q[v]), free(sc[v]);
        mm_cuda_free(DEV, dq[v]), mm_cuda_free(DEV, ds[v]);
    }
    free(xb), free(w), free(tab), free(idx);
    mm_cuda_free(DEV, dx), mm_cuda_free(DEV, dw), mm_cuda_free(DEV, di), mm_cuda_free(DEV, dt);
}

static void test_convrot_pipe_plain_bitwise(void)
{
    convrot_pipe_case(MMK_PRE_NONE, 1100, 28, 0, 0, 0);  /* the attention output, K = 7168 */
    convrot_pipe_case(MMK_PRE_NONE, 700, 21, 4, 0, 0);   /* odd groups; ldq % 16 != 0: byte stores */
    convrot_pipe_case(MMK_PRE_NONE, 37, 3, 0, 0, 0);     /* fewer rows than blocks */
}
static void test_convrot_pipe_rmsnorm_mod_bitwise(void)
{
    convrot_pipe_case(MMK_PRE_RMSNORM_MOD, 1300, 21, 0, 1, 1); /* hidden 5376 */
    convrot_pipe_case(MMK_PRE_RMSNORM_MOD, 300, 21, 0, 0, 1);
    convrot_pipe_case(MMK_PRE_RMSNORM_MOD, 300, 20, 16, 1, 0);
}
static void test_convrot_pipe_swiglu_bitwise(void)
{
    convrot_pipe_case(MMK_PRE_SWIGLU, 600, 56, 0, 0, 0); /* FFN 14336, SiLU by table */
    convrot_pipe_case(MMK_PRE_SWIGLU, 200, 21, 0, 0, 0);
}
/* K = 16,384, the API's limit: the one-row kernel with 1024 threads. */
static void test_convrot_pipe_wide_bitwise(void) { convrot_pipe_case(MMK_PRE_NONE, 300, 64, 0, 0, 0); }

/* The vectorized q/k kernel (the default) against
 * k_qk_norm_rope, byte for byte over the whole fused buffer (v included):
 * head counts that leave a warp's eight head slots straddling q/k and rows,
 * rotary widths 96 (the model's), 128, 64 and none, a NULL k weight. */
static void qk_vec_case(int R, int HQ, int HK, int rot, int wk_null)
{
    int D = 128, ld = (HQ + 2 * HK) * D, rl = rot ? rot : 16;
    size_t n = (size_t)R * ld;
    uint16_t *xb = malloc(n * 2), *cb = malloc((size_t)R * rl * 2), *sb = malloc((size_t)R * rl * 2);
    for (size_t i = 0; i < n; i++)
        xb[i] = mm_f32_to_bf16(i % 101 == 0 ? 90.f : 4.f * cuda_test_uniform(&rng));
    for (size_t i = 0; i < (size_t)R * rl; i++) {
        cb[i] = mm_f32_to_bf16(cuda_test_uniform(&rng));
        sb[i] = mm_f32_to_bf16(cuda_test_uniform(&rng));
    }
    float *wq = malloc(4 * D), *wk = malloc(4 * D);
    for (int i = 0; i < D; i++) {
        wq[i] = mm_round_bf16(1.f + 0.5f * cuda_test_uniform(&rng));
        wk[i] = mm_round_bf16(1.f + 0.5f * cuda_test_uniform(&rng));
    }
    void *dwq = cuda_test_upload(wq, 4 * D), *dwk = cuda_test_upload(wk, 4 * D);
    void *dc = cuda_test_upload(cb, (size_t)R * rl * 2), *dsn = cuda_test_upload(sb, (size_t)R * rl * 2);
    uint16_t *y[2] = {NULL, NULL};
    for (int v = 0; v < 2; v++) {
        uint16_t *dx = cuda_test_upload(xb, n * 2);
        policy_push();
        mmk_policy pol = policy_saved;
        pol.qk_norm_vec = v;
        mmk_policy_set(&pol);
        mmk_qk_norm_rope a = {.rows = R, .heads_q = HQ, .heads_k = HK, .head_dim = D, .q = dx, .ldq = ld,
                              .k = dx + HQ * D, .ldk = ld, .wq = dwq, .wk = wk_null ? NULL : dwk, .eps = 1e-5f,
                              .cos = rot ? dc : NULL, .sin = rot ? dsn : NULL, .ld_rope = rl, .rot_dim = rot};
        const char *want = v ? "vec" : "warp";
        MM_EXPECT(!strcmp(mmk_qk_norm_rope_kernel(&a), want), "kernel %d runs %s, not %s", v,
                  mmk_qk_norm_rope_kernel(&a), want);
        int rc = mmk_qk_norm_rope_run(DEV, STREAM, &a, &cuda_test_err);
        policy_pop();
        MM_EXPECT(rc == 0, "kernel %d: %s", v, cuda_test_err.msg);
        y[v] = cuda_test_download(dx, n * 2, &cuda_test_err);
        MM_EXPECT(y[v], "%s", cuda_test_err.msg);
        mm_cuda_free(DEV, dx);
    }
    if (y[0] && y[1]) {
        long diff = 0, changed = 0;
        for (size_t i = 0; i < n; i++) {
            diff += y[0][i] != y[1][i];
            changed += y[1][i] != xb[i];
        }
        MM_EXPECT(diff == 0, "R=%d HQ=%d HK=%d rot=%d: %ld of %zu values differ from k_qk_norm_rope", R, HQ, HK, rot,
                  diff, n);
        MM_EXPECT(changed > 0, "nothing was written");
    }
    free(y[0]), free(y[1]), free(xb), free(cb), free(sb), free(wq), free(wk);
    mm_cuda_free(DEV, dwq), mm_cuda_free(DEV, dwk), mm_cuda_free(DEV, dc), mm_cuda_free(DEV, dsn);
}

static void test_qk_norm_rope_vec_bitwise(void)
{
    qk_vec_case(301, 5, 3, 96, 0);
    qk_vec_case(77, 4, 2, 128, 1);
    qk_vec_case(50, 8, 8, 64, 0);
    qk_vec_case(33, 3, 1, 0, 0);
    qk_vec_case(64, 56, 56, 96, 0); /* the model's heads */
}

/* ------------------------------------------------------------------ attention */

static void attn_case_path(int Sq, int Sk, int HQ, int HKV, int D, int causal, int n_seqs, const int32_t *cu_in)
{
    int ldq = HQ * D + 8, ldkv = HKV * D, ldo = HQ * D;
    float *q = cuda_test_randn(&rng, (size_t)Sq * ldq, 1.5f), *k = cuda_test_randn(&rng, (size_t)Sk * ldkv, 1.5f);
    float *v = cuda_test_randn(&rng, (size_t)Sk * ldkv, 1);
    uint16_t *qb = cuda_test_to_bf16(q, (size_t)Sq * ldq), *kb = cuda_test_to_bf16(k, (size_t)Sk * ldkv);
    uint16_t *vb = cuda_test_to_bf16(v, (size_t)Sk * ldkv);
    /* segments (Sq == Sk when n_seqs > 1): cu_in, or an equal split */
    int32_t cu[9];
    for (int i = 0; i <= n_seqs; i++)
        cu[i] = cu_in ? cu_in[i] : (int32_t)((int64_t)Sq * i / n_seqs);
    float scale = 1.f / sqrtf((float)D);
    double *ref = malloc(sizeof(double) * Sq * ldo);
    double *sc = malloc(sizeof(double) * Sk);
    for (int z = 0; z < n_seqs; z++) {
        int q0 = n_seqs > 1 ? cu[z] : 0, q1 = n_seqs > 1 ? cu[z + 1] : Sq;
        int k0 = n_seqs > 1 ? cu[z] : 0, k1 = n_seqs > 1 ? cu[z + 1] : Sk;
        int Lq = q1 - q0, Lk = k1 - k0;
        for (int i = 0; i < Lq; i++)
            for (int h = 0; h < HQ; h++) {
                int g = h / (HQ / HKV);
                double mx = -1e300;
                for (int j = 0; j < Lk; j++) {
                    if (causal && j > i + (Lk - Lq)) {
                        sc[j] = -1e300;
                        continue;
                    }
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += (double)q[(size_t)(q0 + i) * ldq + h * D + d] * k[(size_t)(k0 + j) * ldkv + g * D + d];
                    sc[j] = s * scale;
                    if (sc[j] > mx)
                        mx = sc[j];
                }
                double sum = 0;
                for (int j = 0; j < Lk; j++) {
                    sc[j] = sc[j] <= -1e299 ? 0 : exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < Lk; j++)
                        o += sc[j] * v[(size_t)(k0 + j) * ldkv + g * D + d];
                    ref[(size_t)(q0 + i) * ldo + h * D + d] = sum > 0 ? o / sum : 0;
                }
            }
    }
    void *dq = cuda_test_upload(qb, (size_t)Sq * ldq * 2), *dk = cuda_test_upload(kb, (size_t)Sk * ldkv * 2);
    void *dv = cuda_test_upload(vb, (size_t)Sk * ldkv * 2), *do_ = cuda_test_upload(NULL, (size_t)Sq * ldo * 2);
    void *dcu = cuda_test_upload(cu, 4 * (n_seqs + 1));
    int max_q = 0;
    for (int z = 0; z < n_seqs; z++)
        if (cu[z + 1] - cu[z] > max_q)
            max_q = cu[z + 1] - cu[z];
    mmk_attention a = {.seq_q = Sq, .seq_k = Sk, .heads_q = HQ, .heads_kv = HKV, .head_dim = D, .dtype = MM_BF16, .q = dq, .k = dk,
                       .v = dv, .ldq = ldq, .ldk = ldkv, .ldv = ldkv, .o = do_, .ldo = ldo, .scale = scale,
                       .causal = causal, .cu_seqlens_q = n_seqs > 1 ? dcu : NULL,
                       .cu_seqlens_k = n_seqs > 1 ? dcu : NULL, .n_seqs = n_seqs, .max_seq_q = max_q};
    CUDA_TEST_OK(mmk_attention_run(DEV, STREAM, &a, &cuda_test_err));
    uint16_t *o = cuda_test_download(do_, (size_t)Sq * ldo * 2, &cuda_test_err);
    MM_REQUIRE(o, "%s", cuda_test_err.msg);
    float *of = cuda_test_from_bf16(o, (size_t)Sq * ldo);
    cuda_test_diff d = cuda_test_compare(of, ref, (size_t)Sq * ldo);
    MM_EXPECT(d.nonfinite == 0 && d.rel_l2 < 4e-3, "Sq=%d Sk=%d H=%d/%d D=%d causal=%d segs=%d: rel_l2 %.2e max_abs %.3g "
              "nonfinite %ld (%s)", Sq, Sk, HQ, HKV, D, causal, n_seqs, d.rel_l2, d.max_abs, d.nonfinite,
              mmk_attention_path(DEV));
    free(q), free(k), free(v), free(qb), free(kb), free(vb), free(ref), free(sc), free(o), free(of);
    mm_cuda_free(DEV, dq), mm_cuda_free(DEV, dk), mm_cuda_free(DEV, dv), mm_cuda_free(DEV, do_), mm_cuda_free(DEV, dcu);
}

/* Each case on the portable kernel and, where it runs (sm_90 with sm_90a
 * code, its self-check passed; head_dim 128), on the Hopper one. */
static void attn_case_cu(int Sq, int Sk, int HQ, int HKV, int D, int causal, int n_seqs, const int32_t *cu)
{
    policy_push();
    mmk_policy pol = policy_saved;
    pol.attention_hopper = 0;
    mmk_policy_set(&pol);
    attn_case_path(Sq, Sk, HQ, HKV, D, causal, n_seqs, cu);
    pol.attention_hopper = 1;
    mmk_policy_set(&pol);
    if (strncmp(mmk_attention_path(DEV), "sm90p", 5) == 0)
        attn_case_path(Sq, Sk, HQ, HKV, D, causal, n_seqs, cu);
    policy_pop();
}

static void attn_case(int Sq, int Sk, int HQ, int HKV, int D, int causal, int n_seqs)
{
    attn_case_cu(Sq, Sk, HQ, HKV, D, causal, n_seqs, NULL);
}

static void test_attention_d128_noncausal(void) { attn_case(333, 333, 2, 2, 128, 0, 1); }
static void test_attention_d128_cross_lengths(void) { attn_case(70, 250, 2, 2, 128, 0, 1); }
static void test_attention_d128_causal_gqa(void) { attn_case(200, 200, 8, 2, 128, 1, 1); }
static void test_attention_d128_causal_sq_lt_sk(void) { attn_case(65, 190, 4, 1, 128, 1, 1); }
static void test_attention_d72_segments(void) { attn_case(300, 300, 3, 3, 72, 0, 3); }
static void test_attention_d64_causal(void) { attn_case(129, 129, 2, 2, 64, 1, 1); }
static void test_attention_tiny(void) { attn_case(1, 5, 1, 1, 128, 0, 1); }
static void test_attention_d128_long(void) { attn_case(500, 500, 2, 2, 128, 0, 1); }
static void test_attention_d128_causal_segments(void) { attn_case(400, 400, 4, 2, 128, 1, 3); }
/* Packed sequences that start at keys that are not multiples of 8 (the
 * Hopper kernels' transposed V must still be read 16 bytes at a time), one
 * shorter than 8 rows, one spanning several tiles; GQA; with and without
 * the causal mask. */
static const int32_t ragged_cu[6] = {0, 5, 138, 139, 437, 600};
static void test_attention_d128_ragged_segments_gqa(void) { attn_case_cu(600, 600, 4, 2, 128, 0, 5, ragged_cu); }
static void test_attention_d128_ragged_segments_causal(void) { attn_case_cu(600, 600, 4, 1, 128, 1, 5, ragged_cu); }

static void test_errors_are_reported(void)
{
    mmk_convrot_quant a = {.rows = 1, .K = 300, .group = 256, .x_dtype = MM_BF16, .ldx = 300, .ldq = 300};
    MM_EXPECT(mmk_convrot_quant_run(DEV, STREAM, &a, &cuda_test_err) == -1 &&
                  strstr(cuda_test_err.msg, "multiple of the group"),
              "K=300 accepted or unclear: %s", cuda_test_err.msg);
    mmk_attention at = {0};
    at.dtype = MM_BF16;
    at.head_dim = 300;
    at.heads_q = at.heads_kv = 1;
    MM_EXPECT(mmk_attention_run(DEV, STREAM, &at, &cuda_test_err) == -1, "head_dim 300 accepted");
    MM_EXPECT(mmk_device_enter(mm_cuda_count(), &cuda_test_err) == -1, "bad device accepted");
}

int main(void)
{
    cuda_test_require_gpu("test_cuda_kernels");
    printf("  attention path: %s\n", mmk_attention_path(DEV));
    CUDA_CASE(test_gemm_bf16_bias);
    CUDA_CASE(test_gemm_bf16_f32out_accumulate);
    CUDA_CASE(test_gemm_f32);
    CUDA_CASE(test_gemm_i8_exact);
    CUDA_CASE(test_qlinear_i8_store);
    CUDA_CASE(test_qlinear_i8_gated_residual);
    CUDA_CASE(test_qlinear_i8_odd_n);
    CUDA_CASE(test_qk_norm_rope);
    CUDA_CASE(test_convrot_quant_plain);
    CUDA_CASE(test_convrot_quant_rmsnorm_mod);
    CUDA_CASE(test_convrot_quant_swiglu);
    CUDA_CASE(test_convrot_pipe_plain_bitwise);
    CUDA_CASE(test_convrot_pipe_rmsnorm_mod_bitwise);
    CUDA_CASE(test_convrot_pipe_swiglu_bitwise);
    CUDA_CASE(test_convrot_quant_wide);
    CUDA_CASE(test_convrot_pipe_wide_bitwise);
    CUDA_CASE(test_qk_norm_rope_vec_bitwise);
    CUDA_CASE(test_attention_d128_noncausal);
    CUDA_CASE(test_attention_d128_cross_lengths);
    CUDA_CASE(test_attention_d128_causal_gqa);
    CUDA_CASE(test_attention_d128_causal_sq_lt_sk);
    CUDA_CASE(test_attention_d72_segments);
    CUDA_CASE(test_attention_d64_causal);
    CUDA_CASE(test_attention_tiny);
    CUDA_CASE(test_attention_d128_long);
    CUDA_CASE(test_attention_d128_causal_segments);
    CUDA_CASE(test_attention_d128_ragged_segments_gqa);
    CUDA_CASE(test_attention_d128_ragged_segments_causal);
    CUDA_CASE(test_errors_are_reported);
    return mm_test_exit();
}
