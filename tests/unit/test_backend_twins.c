/* Every op on a CUDA context against its CPU twin, on the same random
 * inputs: exact ops must agree bit for bit, float ops within the stated
 * tolerance (relative to the output's magnitude). Runs only where a GPU is
 * usable (tests/device/core.sh on the device host); on a machine without
 * one it reports nothing (unless MMH3_REQUIRE_GPU is set: then that is a
 * failure). tests/device/run.sh runs it with the other unit tests. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "test_backend_util.h"

static mm_ctx *cpu, *gpu;

static const char *gmsg(void)
{
    static mm_error e;
    mm_error_clear(&e);
    if (mm_ctx_sync(gpu, &e) == 0)
        mm_ctx_error(cpu, &e);
    return e.msg;
}

/* A device copy of a CPU tensor (same shape and strides made contiguous). */
static mm_tensor dev(const mm_tensor *t)
{
    mm_tensor c = tb_zeros(t->dtype, t->ndim, t->shape), d;
    mm_copy(cpu, &c, t);
    mm_error e = {{0}};
    if (mm_tensor_alloc(&d, mm_ctx_device(gpu), t->dtype, t->ndim, t->shape, &e) != 0) {
        printf("FAIL alloc on the GPU: %s\n", e.msg);
        exit(1);
    }
    mm_copy(gpu, &d, &c);
    mm_tensor_free(&c);
    return d;
}

static mm_tensor host(const mm_tensor *d)
{
    mm_tensor h = tb_zeros(d->dtype, d->ndim, d->shape);
    mm_copy(gpu, &h, d);
    return h;
}

/* max |gpu - cpu| / max(|cpu|) over the tensor; exact: bitwise compare. */
static void compare(const char *what, const mm_tensor *c, const mm_tensor *g_dev, double tol, bool exact)
{
    mm_tensor g = host(g_dev);
    MM_REQUIRE(!mm_ctx_failed(gpu), "%s: %s", what, gmsg());
    if (exact) {
        MM_EXPECT(memcmp(c->data, g.data, mm_tensor_nbytes(c)) == 0, "%s: CUDA differs from the CPU bit pattern", what);
    } else {
        double *a = tb_values(c), *b = tb_values(&g), m = 0, e = 0;
        int64_t n = mm_tensor_numel(c);
        for (int64_t i = 0; i < n; i++) {
            m = fmax(m, fabs(a[i]));
            e = fmax(e, fabs(a[i] - b[i]));
        }
        MM_EXPECT(e <= tol * (m > 0 ? m : 1), "%s: max |cuda - cpu| = %.3g (%.3g of max |cpu|), tolerance %.3g", what,
                  e, e / (m > 0 ? m : 1), tol);
        printf("     %-28s rel %.2e\n", what, e / (m > 0 ? m : 1));
        free(a);
        free(b);
    }
    mm_tensor_free(&g);
}

#define BF16_TOL (2 * 0x1p-8)
#define F32_TOL 1e-5

static void test_elementwise_and_rows(void)
{
    mm_tensor a = tb_rand(MM_BF16, 2, MM_SHAPE(77, 300), 2.0), b = tb_rand(MM_F32, 2, MM_SHAPE(77, 300), 2.0);
    mm_tensor da = dev(&a), db = dev(&b);
    mm_tensor oc = tb_zeros(MM_BF16, 2, MM_SHAPE(77, 300)), og = dev(&oc);
    mm_add(cpu, &oc, &a, &b), mm_add(gpu, &og, &da, &db);
    compare("add", &oc, &og, BF16_TOL, false);
    mm_axpby(cpu, &oc, 0.3f, &a, -1.5f, &b), mm_axpby(gpu, &og, 0.3f, &da, -1.5f, &db);
    compare("axpby", &oc, &og, BF16_TOL, false);
    for (int act = MM_ACT_SILU; act <= MM_ACT_GELU_ERF; act++) {
        mm_activation(cpu, &oc, &b, (mm_act)act), mm_activation(gpu, &og, &db, (mm_act)act);
        compare(act == MM_ACT_SILU ? "silu" : act == MM_ACT_GELU_TANH ? "gelu tanh" : "gelu erf", &oc, &og, BF16_TOL,
                false);
    }
    mm_tensor g1 = mm_tensor_narrow(&b, 1, 0, 150), u1 = mm_tensor_narrow(&b, 1, 150, 150);
    mm_tensor g2 = mm_tensor_narrow(&db, 1, 0, 150), u2 = mm_tensor_narrow(&db, 1, 150, 150);
    mm_tensor hc = tb_zeros(MM_BF16, 2, MM_SHAPE(77, 150)), hg = dev(&hc);
    mm_glu(cpu, &hc, &g1, &u1, MM_ACT_SILU), mm_glu(gpu, &hg, &g2, &u2, MM_ACT_SILU);
    compare("swiglu (narrow views)", &hc, &hg, BF16_TOL, false);
    mm_tensor w = tb_rand(MM_BF16, 1, MM_SHAPE(300), 1.0), dw = dev(&w), bi = tb_rand(MM_BF16, 1, MM_SHAPE(300), 1.0),
              dbi = dev(&bi);
    mm_rmsnorm(cpu, &oc, &a, &w, 1e-5f), mm_rmsnorm(gpu, &og, &da, &dw, 1e-5f);
    compare("rmsnorm", &oc, &og, BF16_TOL, false);
    mm_layernorm(cpu, &oc, &a, &w, &bi, 1e-6f), mm_layernorm(gpu, &og, &da, &dw, &dbi, 1e-6f);
    compare("layernorm", &oc, &og, BF16_TOL, false);
    mm_softmax(cpu, &oc, &b), mm_softmax(gpu, &og, &db);
    compare("softmax", &oc, &og, BF16_TOL, false);
    mm_tensor rc = tb_zeros(MM_F32, 1, MM_SHAPE(77)), rg = dev(&rc);
    mm_reduce_rows(cpu, &rc, &a, MM_REDUCE_ABSMAX), mm_reduce_rows(gpu, &rg, &da, MM_REDUCE_ABSMAX);
    compare("reduce absmax", &rc, &rg, 0, true);
    mm_reduce_rows(cpu, &rc, &b, MM_REDUCE_SUM), mm_reduce_rows(gpu, &rg, &db, MM_REDUCE_SUM);
    compare("reduce sum", &rc, &rg, 1e-5, false);
    /* modulation family with a per-row index into [T, 6, C] tables */
    mm_tensor mod = tb_rand(MM_BF16, 3, MM_SHAPE(5, 6, 300), 0.5), dmod = dev(&mod);
    mm_tensor idx = tb_zeros(MM_I32, 1, MM_SHAPE(77));
    for (int r = 0; r < 77; r++)
        ((int32_t *)idx.data)[r] = (r * 7) % 5;
    mm_tensor didx = dev(&idx);
    mm_tensor sh = mm_tensor_select(&mod, 1, 0), sc = mm_tensor_select(&mod, 1, 1), gt = mm_tensor_select(&mod, 1, 2);
    mm_tensor dsh = mm_tensor_select(&dmod, 1, 0), dsc = mm_tensor_select(&dmod, 1, 1),
              dgt = mm_tensor_select(&dmod, 1, 2);
    mm_rmsnorm_modulate(cpu, &oc, &a, &w, 1e-5f, &sc, &sh, &idx);
    mm_rmsnorm_modulate(gpu, &og, &da, &dw, 1e-5f, &dsc, &dsh, &didx);
    compare("rmsnorm_modulate", &oc, &og, BF16_TOL, false);
    mm_modulate(cpu, &oc, &a, &sc, &sh, &idx), mm_modulate(gpu, &og, &da, &dsc, &dsh, &didx);
    compare("modulate", &oc, &og, BF16_TOL, false);
    mm_tensor xc = tb_zeros(MM_BF16, 2, MM_SHAPE(77, 300));
    mm_copy(cpu, &xc, &a);
    mm_gated_residual(cpu, &xc, &b, &gt, &idx), mm_gated_residual(gpu, &da, &db, &dgt, &didx);
    compare("gated_residual", &xc, &da, BF16_TOL, false);
    /* groupnorm, per frame */
    mm_tensor v = tb_rand(MM_F32, 5, MM_SHAPE(1, 8, 3, 6, 5), 2.0), dv = dev(&v);
    mm_tensor gw = tb_rand(MM_F32, 1, MM_SHAPE(8), 1.0), dgw = dev(&gw);
    mm_tensor vo = tb_zeros(MM_F32, 5, MM_SHAPE(1, 8, 3, 6, 5)), dvo = dev(&vo);
    for (int pf = 0; pf < 2; pf++) {
        mm_groupnorm(cpu, &vo, &v, &gw, &gw, 4, 1e-6f, pf), mm_groupnorm(gpu, &dvo, &dv, &dgw, &dgw, 4, 1e-6f, pf);
        compare(pf ? "groupnorm per frame" : "groupnorm", &vo, &dvo, 1e-5, false);
    }
    MM_EXPECT(!mm_ctx_failed(gpu), "%s", gmsg());
}

static void test_rope_attention_gemm(void)
{
    const int64_t S = 300, HQ = 4, HKV = 2, D = 128;
    mm_tensor qkv = tb_rand(MM_BF16, 2, MM_SHAPE(S, (HQ + 2 * HKV) * D), 2.0), dq = dev(&qkv);
    mm_tensor views[2][3];
    const mm_tensor *bufs[2] = {&qkv, &dq};
    for (int i = 0; i < 2; i++) {
        mm_tensor qn = mm_tensor_narrow(bufs[i], 1, 0, HQ * D), kn = mm_tensor_narrow(bufs[i], 1, HQ * D, HKV * D),
                  vn = mm_tensor_narrow(bufs[i], 1, (HQ + HKV) * D, HKV * D);
        views[i][0] = mm_tensor_unflatten(&qn, 1, 2, MM_SHAPE(HQ, D));
        views[i][1] = mm_tensor_unflatten(&kn, 1, 2, MM_SHAPE(HKV, D));
        views[i][2] = mm_tensor_unflatten(&vn, 1, 2, MM_SHAPE(HKV, D));
    }
    mm_tensor cs = tb_rand(MM_BF16, 2, MM_SHAPE(S, 96), 1.0), sn = tb_rand(MM_BF16, 2, MM_SHAPE(S, 96), 1.0);
    mm_tensor dcs = dev(&cs), dsn = dev(&sn);
    mm_rope(cpu, &views[0][0], &views[0][0], &cs, &sn, 96), mm_rope(gpu, &views[1][0], &views[1][0], &dcs, &dsn, 96);
    compare("rope (in place, strided)", &qkv, &dq, BF16_TOL, false);
    mm_tensor oc = tb_zeros(MM_BF16, 3, MM_SHAPE(S, HQ, D)), og = dev(&oc);
    int32_t seg[3] = {0, 120, (int32_t)S};
    mm_attn_params ps[3] = {{0, false, NULL, 0}, {0, true, NULL, 0}, {0, false, seg, 2}};
    const char *names[3] = {"attention", "attention causal", "attention segments"};
    for (int i = 0; i < 3; i++) {
        mm_attention(cpu, &oc, &views[0][0], &views[0][1], &views[0][2], &ps[i]);
        mm_attention(gpu, &og, &views[1][0], &views[1][1], &views[1][2], &ps[i]);
        compare(names[i], &oc, &og, BF16_TOL, false);
    }
    /* GEMMs: bf16 Linear (transposed weight) with bias into bf16; f32 into f32 */
    mm_tensor x = tb_rand(MM_BF16, 2, MM_SHAPE(S, 512), 1.0), wt = tb_rand(MM_BF16, 2, MM_SHAPE(384, 512), 0.1);
    mm_tensor bias = tb_rand(MM_BF16, 1, MM_SHAPE(384), 1.0);
    mm_tensor dx = dev(&x), dwt = dev(&wt), dbias = dev(&bias);
    mm_tensor t1 = mm_tensor_transpose(&wt, 0, 1), t2 = mm_tensor_transpose(&dwt, 0, 1);
    mm_tensor yc = tb_zeros(MM_BF16, 2, MM_SHAPE(S, 384)), yg = dev(&yc);
    mm_matmul(cpu, &yc, &x, &t1, &bias), mm_matmul(gpu, &yg, &dx, &t2, &dbias);
    compare("gemm bf16 (linear + bias)", &yc, &yg, BF16_TOL, false);
    mm_tensor xf = tb_rand(MM_F32, 2, MM_SHAPE(37, 96), 1.0), wf = tb_rand(MM_F32, 2, MM_SHAPE(96, 200), 1.0);
    mm_tensor dxf = dev(&xf), dwf = dev(&wf), zc = tb_zeros(MM_F32, 2, MM_SHAPE(37, 200)), zg = dev(&zc);
    mm_matmul(cpu, &zc, &xf, &wf, NULL), mm_matmul(gpu, &zg, &dxf, &dwf, NULL);
    compare("gemm f32 (no TF32)", &zc, &zg, F32_TOL, false);
    MM_EXPECT(!mm_ctx_failed(gpu), "%s", gmsg());
}

static void test_quantized(void)
{
    mm_tensor x = tb_rand(MM_BF16, 2, MM_SHAPE(100, 512), 3.0), dx = dev(&x);
    mm_tensor rc = tb_zeros(MM_BF16, 2, MM_SHAPE(100, 512)), rg = dev(&rc);
    mm_hadamard_rotate(cpu, &rc, &x, 256), mm_hadamard_rotate(gpu, &rg, &dx, 256);
    compare("hadamard rotate", &rc, &rg, BF16_TOL, false);
    mm_tensor qc = tb_zeros(MM_I8, 2, MM_SHAPE(100, 512)), qg = dev(&qc);
    mm_tensor sc = tb_zeros(MM_F32, 1, MM_SHAPE(100)), sg = dev(&sc);
    mm_convrot_quantize(cpu, &qc, &sc, &x, 256), mm_convrot_quantize(gpu, &qg, &sg, &dx, 256);
    compare("convrot scales", &sc, &sg, 1e-6, false);
    mm_tensor qh = host(&qg);
    int64_t diff = 0;
    for (int64_t i = 0; i < 100 * 512; i++)
        diff += ((int8_t *)qh.data)[i] != ((int8_t *)qc.data)[i];
    MM_EXPECT(diff * 1000 <= 100 * 512, "convrot codes: %lld of 51200 differ", (long long)diff);
    mm_tensor w = tb_zeros(MM_I8, 2, MM_SHAPE(256, 512));
    for (int64_t i = 0; i < 256 * 512; i++)
        ((int8_t *)w.data)[i] = (int8_t)((int)(tb_next() % 255) - 127);
    mm_tensor ws = tb_rand(MM_F32, 1, MM_SHAPE(256), 0.01), dw = dev(&w), dws = dev(&ws);
    mm_tensor yc = tb_zeros(MM_F32, 2, MM_SHAPE(100, 256)), yg = dev(&yc);
    mm_tensor dqc = dev(&qc), dsc = dev(&sc); /* the same codes on both sides */
    mm_gemm_i8_scaled(cpu, &yc, &qc, &sc, &w, &ws, NULL), mm_gemm_i8_scaled(gpu, &yg, &dqc, &dsc, &dw, &dws, NULL);
    compare("int8 gemm (f32 out: exact)", &yc, &yg, 0, true);
    /* nvfp4: random codes and (positive) block scales */
    mm_tensor pk = tb_zeros(MM_U8, 2, MM_SHAPE(256, 64)), bs = tb_zeros(MM_F8_E4M3, 2, MM_SHAPE(256, 8));
    for (int64_t i = 0; i < 256 * 64; i++)
        ((uint8_t *)pk.data)[i] = (uint8_t)tb_next();
    for (int64_t i = 0; i < 256 * 8; i++)
        ((uint8_t *)bs.data)[i] = (uint8_t)(tb_next() % 0x7e);
    mm_tensor dpk = dev(&pk), dbs = dev(&bs);
    mm_tensor dc = tb_zeros(MM_BF16, 2, MM_SHAPE(256, 128)), dg = dev(&dc);
    mm_nvfp4_dequantize(cpu, &dc, &pk, &bs, 0.013f), mm_nvfp4_dequantize(gpu, &dg, &dpk, &dbs, 0.013f);
    compare("nvfp4 dequantize (bf16: exact)", &dc, &dg, 0, true);
    mm_tensor tab = tb_zeros(MM_I8, 2, MM_SHAPE(50, 64)), tsc = tb_rand(MM_F32, 1, MM_SHAPE(50), 1.0);
    for (int64_t i = 0; i < 50 * 64; i++)
        ((int8_t *)tab.data)[i] = (int8_t)tb_next();
    mm_tensor ids = tb_zeros(MM_I32, 1, MM_SHAPE(20));
    for (int i = 0; i < 20; i++)
        ((int32_t *)ids.data)[i] = (i * 13) % 50;
    mm_tensor dtab = dev(&tab), dtsc = dev(&tsc), dids = dev(&ids);
    mm_tensor ec = tb_zeros(MM_BF16, 2, MM_SHAPE(20, 64)), eg = dev(&ec);
    mm_embedding_i8(cpu, &ec, &ids, &tab, &tsc), mm_embedding_i8(gpu, &eg, &dids, &dtab, &dtsc);
    compare("int8 embedding (exact)", &ec, &eg, 0, true);
    mm_tensor gc = tb_zeros(MM_BF16, 2, MM_SHAPE(20, 64)), gg = dev(&gc);
    mm_tensor ftab = tb_rand(MM_F32, 2, MM_SHAPE(50, 64), 1.0), dftab = dev(&ftab);
    mm_gather_rows(cpu, &gc, &ftab, &ids), mm_gather_rows(gpu, &gg, &dftab, &dids);
    compare("gather rows (exact)", &gc, &gg, 0, true);
    mm_scatter_add_rows(cpu, &ftab, &gc, &ids), mm_scatter_add_rows(gpu, &dftab, &gg, &dids);
    compare("scatter-add rows", &ftab, &dftab, F32_TOL, false);
    MM_EXPECT(!mm_ctx_failed(gpu), "%s", gmsg());
}

static void test_convs(void)
{
    mm_tensor x = tb_rand(MM_F32, 3, MM_SHAPE(2, 12, 50), 1.0), w = tb_rand(MM_F32, 3, MM_SHAPE(8, 6, 7), 0.3);
    mm_tensor b = tb_rand(MM_F32, 1, MM_SHAPE(8), 1.0);
    mm_tensor dx = dev(&x), dw = dev(&w), db = dev(&b);
    mm_conv_params p = {.stride = {2}, .dilation = {3}, .pad = {{9, 9}}, .groups = 2};
    mm_tensor oc = tb_zeros(MM_F32, 3, MM_SHAPE(2, 8, 25)), og = dev(&oc);
    mm_conv1d(cpu, &oc, &x, &w, &b, &p), mm_conv1d(gpu, &og, &dx, &dw, &db, &p);
    compare("conv1d", &oc, &og, F32_TOL, false);
    mm_tensor wt = tb_rand(MM_F32, 3, MM_SHAPE(12, 4, 9), 0.3), dwt = dev(&wt);
    mm_conv_params pt = {.stride = {5}, .pad = {{2, 2}}};
    mm_tensor tc = tb_zeros(MM_F32, 3, MM_SHAPE(2, 4, 250)), tg = dev(&tc);
    mm_conv_transpose1d(cpu, &tc, &x, &wt, NULL, &pt), mm_conv_transpose1d(gpu, &tg, &dx, &dwt, NULL, &pt);
    compare("conv_transpose1d", &tc, &tg, F32_TOL, false);
    mm_tensor v = tb_rand(MM_F16, 5, MM_SHAPE(1, 4, 5, 12, 10), 1.0), vw = tb_rand(MM_F16, 5, MM_SHAPE(6, 4, 3, 3, 3), 0.3);
    mm_tensor dvv = dev(&v), dvw = dev(&vw);
    mm_conv_params p3 = {.stride = {1, 2, 2}, .pad = {{2, 0}, {0, 1}, {0, 1}}};
    mm_tensor c3 = tb_zeros(MM_F32, 5, MM_SHAPE(1, 6, 5, 6, 5)), g3 = dev(&c3);
    mm_conv3d(cpu, &c3, &v, &vw, NULL, &p3), mm_conv3d(gpu, &g3, &dvv, &dvw, NULL, &p3);
    compare("conv3d (f16)", &c3, &g3, 1e-4, false);
    /* the same with 8 input channels (K = 216, a multiple of 8) and groups 1 in f32: the CUDA side takes
     * im2col + cuBLASLt (16- and 32-bit im2col) instead of the direct kernel */
    mm_tensor v8 = tb_rand(MM_F16, 5, MM_SHAPE(1, 8, 5, 12, 10), 1.0), vw8 = tb_rand(MM_F16, 5, MM_SHAPE(6, 8, 3, 3, 3), 0.3);
    mm_tensor dv8 = dev(&v8), dvw8 = dev(&vw8);
    mm_tensor c8 = tb_zeros(MM_F32, 5, MM_SHAPE(1, 6, 5, 6, 5)), g8 = dev(&c8);
    mm_conv3d(cpu, &c8, &v8, &vw8, NULL, &p3), mm_conv3d(gpu, &g8, &dv8, &dvw8, NULL, &p3);
    compare("conv3d (f16, im2col + GEMM)", &c8, &g8, 1e-4, false);
    mm_tensor w1 = tb_rand(MM_F32, 3, MM_SHAPE(8, 12, 7), 0.3), dw1 = dev(&w1);
    mm_conv_params p1 = {.stride = {2}, .dilation = {3}, .pad = {{9, 9}}, .groups = 1};
    mm_tensor o1 = tb_zeros(MM_F32, 3, MM_SHAPE(2, 8, 25)), g1 = dev(&o1);
    mm_conv1d(cpu, &o1, &x, &w1, &b, &p1), mm_conv1d(gpu, &g1, &dx, &dw1, &db, &p1);
    compare("conv1d (f32, im2col + GEMM)", &o1, &g1, F32_TOL, false);
    mm_tensor *gemm_path[] = {&v8, &vw8, &dv8, &dvw8, &c8, &g8, &w1, &dw1, &o1, &g1};
    for (size_t i = 0; i < sizeof gemm_path / sizeof gemm_path[0]; i++)
        mm_tensor_free(gemm_path[i]);
    const int pads[5][2] = {{0, 0}, {0, 0}, {0, 0}, {1, 1}, {1, 1}};
    mm_tensor pc = tb_zeros(MM_F16, 5, MM_SHAPE(1, 4, 5, 14, 12)), pg = dev(&pc);
    mm_pad(cpu, &pc, &v, pads, MM_PAD_REFLECT, 0), mm_pad(gpu, &pg, &dvv, pads, MM_PAD_REFLECT, 0);
    compare("pad reflect (exact)", &pc, &pg, 0, true);
    mm_tensor ic = tb_zeros(MM_F32, 3, MM_SHAPE(12, 80, 33)), ig = dev(&ic);
    mm_tensor src = tb_rand(MM_F32, 3, MM_SHAPE(12, 10, 5), 1.0), dsrc = dev(&src);
    mm_interpolate(cpu, &ic, &src, 2, MM_INTERP_LINEAR, true), mm_interpolate(gpu, &ig, &dsrc, 2, MM_INTERP_LINEAR, true);
    compare("bilinear (align corners)", &ic, &ig, F32_TOL, false);
    mm_tensor al = tb_rand(MM_F32, 1, MM_SHAPE(12), 1.0), dal = dev(&al);
    mm_tensor sc = tb_zeros(MM_F32, 3, MM_SHAPE(2, 12, 50)), sg = dev(&sc);
    mm_snake(cpu, &sc, &x, &al, &al), mm_snake(gpu, &sg, &dx, &dal, &dal);
    compare("snake beta", &sc, &sg, F32_TOL * 10, false);
    MM_EXPECT(!mm_ctx_failed(gpu), "%s", gmsg());
}

int main(void)
{
    mm_error e = {{0}};
    /* MMH3_TWINS_SELF=1 runs the harness CPU against CPU (a check of the test itself) */
    bool self = getenv("MMH3_TWINS_SELF") != NULL;
    if (mm_cuda_device_count() == 0 && !self) {
        if (getenv("MMH3_REQUIRE_GPU")) {
            printf("FAIL setup: MMH3_REQUIRE_GPU is set but no CUDA device is usable\n");
            return 1;
        }
        printf("SKIP test_backend_twins: no CUDA device (the device run sets MMH3_REQUIRE_GPU=1)\n");
        return 0;
    }
    if (mm_ctx_create(&cpu, mm_cpu(), 0, &e) != 0 ||
        mm_ctx_create(&gpu, self ? mm_cpu() : mm_cuda(0), 1, &e) != 0) {
        printf("FAIL setup: %s\n", e.msg);
        return 1;
    }
    MM_RUN(test_elementwise_and_rows);
    MM_RUN(test_rope_attention_gemm);
    MM_RUN(test_quantized);
    MM_RUN(test_convs);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
