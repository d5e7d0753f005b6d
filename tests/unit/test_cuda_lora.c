/* The LoRA branch on the GPU (device test; SKIP without one): the Hopper
 * GEMM with the branch fused (mm_qgemm_lora) and the cuBLASLt path
 * given the branch's f32 sums as its addend, plain and gated, on the shapes
 * of a split q/k/v adapter, both against fp64 within a bound scaled by the
 * summed terms (where the two paths differ by more than a bf16 step, and on
 * a few whole rows); per adapted module of the
 * kit's tiny DiT the CUDA branch against fp64 s·B·A·x; the whole forward
 * with an adapter on CUDA (fused block, and the composition) against the
 * CPU's. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/fused.h"
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "cuda_test.h"
#include "lora_test.h"
#include "model/dit/dit.h"
#include "model/dit/model.h"
#include "test_sampler_kit.h"

static mm_ctx *cpu, *gpu;
static json_t *manifest;
static mm_safetensors *cases;
static kit_forward_case kcase;
static mm_dit *dit_cpu, *dit_gpu;
static double video_tol;

/* A host tensor of random values (float dtypes: uniform in ±scale; I8: ±127). */
static mm_tensor rnd(mm_dtype dt, int64_t r, int64_t c, float scale, cuda_test_rng *g)
{
    mm_tensor t;
    mm_tensor_alloc(&t, mm_cpu(), dt, 2, MM_SHAPE(r, c), NULL);
    for (int64_t i = 0; i < r * c; i++) {
        float u = cuda_test_uniform(g);
        if (dt == MM_I8)
            ((int8_t *)t.data)[i] = (int8_t)lrintf(u * 127.f);
        else if (dt == MM_BF16)
            ((uint16_t *)t.data)[i] = mm_f32_to_bf16(u * scale);
        else
            ((float *)t.data)[i] = u * scale;
    }
    return t;
}

static mm_tensor up(const mm_tensor *h)
{
    mm_tensor d;
    mm_tensor_alloc(&d, mm_cuda(0), h->dtype, h->ndim, h->shape, NULL);
    mm_copy(gpu, &d, h);
    return d;
}

static mm_tensor down(const mm_tensor *d)
{
    mm_tensor h;
    mm_tensor_alloc(&h, mm_cpu(), d->dtype, d->ndim, d->shape, NULL);
    mm_copy(gpu, &h, d);
    mm_ctx_sync(gpu, NULL);
    return h;
}

static int32_t ord16(uint16_t b) { return (b & 0x8000) ? -(int32_t)(b & 0x7fff) : (int32_t)b; }

/* One bf16 step at |x| (the spacing of bf16 values there; the smallest normal's below it). */
static double bf16_step(double x)
{
    int e;
    frexp(fmax(fabs(x), 0x1p-126), &e);
    return ldexp(1.0, e - 8);
}

/* One output of the int8 linear with its addend in fp64: ref = (res +) g·(sx·sw·Σ qx·qw + Σ u·b), and the
 * bound an fp32 pipeline with one bf16 rounding at the end keeps to: a bf16 step at the larger of |got|
 * and |ref| (the final rounding, and where the two straddle a power of two), plus fp32 rounding of the
 * summed terms — the int8 sum is exact in int32 and scaled in a few fp32 operations, the addend's rk
 * products are summed in fp32 (γ_rk), the residual is added once — plus, in the gated form, the
 * intermediate rounding bf16(y32) (half a step at |y32|, times |g|) that both paths make: the Hopper
 * GEMM's gated epilogue adds the residual to the bf16 of acc·scale so that it matches the cuBLASLt
 * path bit for bit without an adapter (kernels/qgemm_sm90.cu). Near cancellation
 * (|ref| far below the terms) is where the last two dominate: a bound in steps of |ref| alone fails
 * correct results there. */
typedef struct lora_ref {
    double ref, bound;
} lora_ref;

static lora_ref lora_reference(const mm_tensor *qx, const mm_tensor *qw, const mm_tensor *sx, const mm_tensor *sw,
                               const mm_tensor *u, const mm_tensor *b, const mm_tensor *res, const mm_tensor *gate,
                               const mm_tensor *idx, bool gated, int64_t i, int64_t n)
{
    const int64_t K = qx->shape[1], rk = u->shape[1], N = qw->shape[0];
    const int8_t *xr = (const int8_t *)qx->data + i * K, *wr = (const int8_t *)qw->data + n * K;
    int64_t acc = 0;
    for (int64_t k = 0; k < K; k++)
        acc += (int64_t)xr[k] * wr[k];
    double add = 0, add_abs = 0;
    for (int64_t k = 0; k < rk; k++) {
        const double t = (double)mm_bf16_to_f32(((const uint16_t *)u->data)[i * rk + k]) *
                         mm_bf16_to_f32(((const uint16_t *)b->data)[n * rk + k]);
        add += t;
        add_abs += fabs(t);
    }
    const double lin = (double)((const float *)sx->data)[i] * ((const float *)sw->data)[n] * (double)acc;
    const double y32 = lin + add;
    const double g = gated ? ((const float *)gate->data)[((const int32_t *)idx->data)[i] * N + n] : 1.0;
    const double r = gated ? mm_bf16_to_f32(((const uint16_t *)res->data)[i * N + n]) : 0.0;
    const double f32 = 0x1p-24 * (fabs(g) * (8 * fabs(lin) + (double)(rk + 8) * add_abs) + 4 * fabs(r));
    lora_ref o = {r + g * y32, f32 + (gated ? fabs(g) * bf16_step(y32) / 2 : 0)};
    return o;
}

/* got within one bf16 step of its larger magnitude and the fp32 terms' rounding of ref. */
static bool lora_within(uint16_t got, double ref, double bound)
{
    const double y = mm_bf16_to_f32(got);
    return fabs(y - ref) <= bf16_step(fmax(fabs(y), fabs(ref))) + bound;
}

/* The fused branch against the addend path on one problem: M rows, three
 * q/k/v pieces of rank r on [3A, K] plus a whole-output piece of rank 16
 * (a second adapter), gated or not. Both paths against the fp64 reference
 * (lora_reference's bound) on every output of a few rows spread over M, and
 * on every other output where the two paths are more than one bf16 step
 * apart; the counts of one- and more-step differences are printed. */
static void fused_case(int64_t M, int64_t A, int64_t K, int r, bool gated)
{
    cuda_test_rng g = {0x5eed1234u + (uint64_t)M};
    const int64_t N = 3 * A, rk = ((3 * r + 16) + 63) / 64 * 64, tiles = (N + 255) / 256;
    mm_tensor qx = rnd(MM_I8, M, K, 1, &g), qw = rnd(MM_I8, N, K, 1, &g);
    mm_tensor sx = rnd(MM_F32, 1, M, 1, &g), sw = rnd(MM_F32, 1, N, 1, &g);
    for (int64_t i = 0; i < M; i++)
        ((float *)sx.data)[i] = 0.01f + 0.01f * fabsf(((float *)sx.data)[i]);
    for (int64_t i = 0; i < N; i++)
        ((float *)sw.data)[i] = 1e-3f + 1e-3f * fabsf(((float *)sw.data)[i]);
    mm_tensor u = rnd(MM_BF16, M, rk, 1.f, &g), b = rnd(MM_BF16, N, rk, 0.f, &g);
    uint64_t *mask = calloc((size_t)tiles, sizeof *mask);
    /* piece c: rows [cA, (c+1)A), columns [c·r, (c+1)·r); the rank-16 piece: every row, columns [3r, 3r + 16) */
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < rk; k++) {
            bool on = (k / r == n / A && k < 3 * r) || (k >= 3 * r && k < 3 * r + 16);
            ((uint16_t *)b.data)[n * rk + k] = on ? mm_f32_to_bf16(cuda_test_uniform(&g)) : 0;
            if (on)
                mask[n / 256] |= 1ull << (k / 64);
        }
    mm_tensor mask_h = mm_tensor_wrap(mask, mm_cpu(), MM_I64, 1, MM_SHAPE(tiles));
    mm_tensor gate = rnd(MM_F32, 3, N, 1.f, &g), idx;
    mm_tensor_alloc(&idx, mm_cpu(), MM_I32, 1, MM_SHAPE(M), NULL);
    for (int64_t i = 0; i < M; i++)
        ((int32_t *)idx.data)[i] = (int32_t)(cuda_test_next(&g) % 3);
    mm_tensor res = rnd(MM_BF16, M, N, 2.f, &g);
    mm_tensor gqx = up(&qx), gqw = up(&qw), gsx = up(&sx), gsw = up(&sw), gu = up(&u), gb = up(&b);
    mm_tensor gmask = up(&mask_h), ggate = up(&gate), gidx = up(&idx);
    mm_tensor ya = up(&res), yb = up(&res), delta;
    mm_tensor_alloc(&delta, mm_cuda(0), MM_F32, 2, MM_SHAPE(M, N), NULL);
    mm_tensor vsx = mm_tensor_wrap(gsx.data, gsx.device, MM_F32, 1, MM_SHAPE(M));
    mm_tensor vsw = mm_tensor_wrap(gsw.data, gsw.device, MM_F32, 1, MM_SHAPE(N));
    mm_tensor bt = mm_tensor_transpose(&gb, 0, 1);
    mm_gemm(gpu, &delta, &gu, &bt, NULL, 1.0f, 0.0f); /* the branch's f32 sums */
    mm_fused_gemm_i8_scaled_add(gpu, &ya, &gqx, &vsx, &gqw, &vsw, gated ? &ggate : NULL, gated ? &gidx : NULL, &delta);
    mm_qgemm_lora(gpu, &yb, &gqx, &vsx, &gqw, &vsw, gated ? &ggate : NULL, gated ? &gidx : NULL, &gu, &gb, &gmask);
    mm_error err = {{0}};
    MM_EXPECT(mm_ctx_sync(gpu, &err) == 0, "%s", err.msg);
    mm_tensor ha = down(&ya), hb = down(&yb);
    const uint16_t *pa = ha.data, *pb = hb.data;
    long far = 0, near = 0, checked = 0, bad_fused = 0, bad_addend = 0, first = -1;
    enum { SAMPLED_ROWS = 6 };
    for (int64_t i = 0; i < M; i++) {
        const bool sampled = i % (M / SAMPLED_ROWS) == M / SAMPLED_ROWS / 2;
        for (int64_t n = 0; n < N; n++) {
            const int64_t e = i * N + n;
            const int32_t d = abs(ord16(pa[e]) - ord16(pb[e]));
            far += d > 1;
            near += d == 1;
            if (!sampled && d <= 1)
                continue;
            const lora_ref ref = lora_reference(&qx, &qw, &sx, &sw, &u, &b, &res, &gate, &idx, gated, i, n);
            const bool ok_fused = lora_within(pb[e], ref.ref, ref.bound);
            const bool ok_addend = lora_within(pa[e], ref.ref, ref.bound);
            checked++;
            bad_fused += !ok_fused;
            bad_addend += !ok_addend;
            if ((!ok_fused || !ok_addend) && first < 0)
                first = e;
        }
    }
    printf("     M %lld N %lld K %lld r %d %s: %ld outputs one bf16 step apart, %ld more; %ld checked against fp64\n",
           (long long)M, (long long)N, (long long)K, r, gated ? "gated" : "plain", near, far, checked);
    if (first >= 0) {
        const lora_ref ref = lora_reference(&qx, &qw, &sx, &sw, &u, &b, &res, &gate, &idx, gated, first / N, first % N);
        MM_EXPECT(0, "M %lld A %lld K %lld r %d %s: %ld fused and %ld addend outputs beyond the fp64 bound (of %ld "
                  "checked); first at row %lld col %lld: fused %.9g addend %.9g fp64 %.9g bound %.3g",
                  (long long)M, (long long)A, (long long)K, r, gated ? "gated" : "plain", bad_fused, bad_addend,
                  checked, (long long)(first / N), (long long)(first % N), (double)mm_bf16_to_f32(pb[first]),
                  (double)mm_bf16_to_f32(pa[first]), ref.ref, ref.bound);
    }
    mm_tensor *all[] = {&qx, &qw, &sx, &sw, &u, &b, &gate, &idx, &res, &gqx, &gqw, &gsx, &gsw, &gu, &gb, &gmask,
                        &ggate, &gidx, &ya, &yb, &delta, &ha, &hb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        mm_tensor_free(all[i]);
    free(mask);
}

static void test_fused_branch_matches_the_addend_path(void)
{
    MM_REQUIRE(mm_qgemm_lora_ready(gpu), "the sm90 GEMM's adapter branch is not in use on this GPU (self-check "
                                              "failed or no sm_90 kernel): see the stderr line");
    fused_case(300, 512, 512, 64, false);
    fused_case(300, 512, 512, 64, true);
    fused_case(1000, 7168, 5376, 128, false); /* the DiT's qkv: rank 128 q/k/v slices + a second adapter */
    fused_case(1000, 7168, 5376, 128, true);
}

/* --------------------------------------------------------- the kit's DiT */

static mm_lora *adapter(mm_ctx *ctx, const char *file, const char *opts)
{
    char path[700];
    mm_lora *l = NULL;
    mm_error err = {{0}};
    if (!lora_test_write(path, sizeof path, file, "%s", opts) || mm_lora_open(&l, path, NULL, &err) != 0 ||
        mm_lora_upload(l, ctx, &err) != 0) {
        printf("     %s: %s\n", file, err.msg);
        mm_lora_free(l);
        return NULL;
    }
    return l;
}

/* A forward of the kit case on ctx with these adapters: host velocities. */
static float *forward(mm_ctx *ctx, mm_dit *dit, const mm_lora_use *uses, int n, int64_t *count, bool *fused)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t nv = kcase.l.video_rows * c->video_row_width, na = kcase.l.audio_rows * c->audio_row_width;
    mm_device dev = mm_ctx_device(ctx);
    mm_tensor v = {0}, a = {0}, t = {0}, vv = {0}, va = {0};
    mm_error err = {{0}};
    mm_tensor_alloc(&v, dev, MM_F32, 2, kcase.video.shape, &err);
    mm_tensor_alloc(&a, dev, MM_F32, 2, kcase.audio.shape, &err);
    mm_tensor_alloc(&t, dev, kcase.text.dtype, 2, kcase.text.shape, &err);
    mm_tensor_alloc(&vv, dev, MM_F32, 2, kcase.video.shape, &err);
    mm_tensor_alloc(&va, dev, MM_F32, 2, kcase.audio.shape, &err);
    mm_copy(ctx, &v, &kcase.video);
    mm_copy(ctx, &a, &kcase.audio);
    mm_copy(ctx, &t, &kcase.text);
    mm_dit_request_opts o = {.loras = uses, .n_loras = n};
    mm_dit_request *r = NULL;
    float *out = calloc((size_t)(nv + na), sizeof(float));
    if (mm_dit_request_begin_ex(dit, ctx, &kcase.l, &t, &o, NULL, &r, &err) != 0 ||
        mm_dit_forward(r, kcase.row_t, &v, &a, &vv, &va, &err) != 0) {
        printf("     forward: %s\n", err.msg);
        free(out);
        out = NULL;
    } else {
        if (fused)
            *fused = r->lora_fused != NULL;
        mm_tensor hv = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, kcase.video.shape);
        mm_tensor ha = mm_tensor_wrap(out + nv, mm_cpu(), MM_F32, 2, kcase.audio.shape);
        mm_copy(ctx, &hv, &vv);
        mm_copy(ctx, &ha, &va);
        mm_ctx_sync(ctx, NULL);
    }
    mm_dit_request_end(r);
    mm_tensor *all[] = {&v, &a, &t, &vv, &va};
    for (size_t i = 0; i < 5; i++)
        mm_tensor_free(all[i]);
    *count = nv + na;
    return out;
}

static double rel_l2(const float *a, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++)
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]), den += (double)ref[i] * ref[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* Per adapted module of the kit DiT, on the CUDA context: the branch
 * (lora_branch.c on the CUDA ops) against fp64. */
static void test_cuda_branch_matches_fp64(void)
{
    mm_lora *l = adapter(gpu, "cuda_branch.safetensors", "--seed 51 --rank 16 --alpha 8 --spelling diffusers");
    mm_lora *lc = adapter(cpu, "cuda_branch.safetensors", "--seed 51 --rank 16 --alpha 8 --spelling diffusers");
    MM_REQUIRE(l && lc, "adapter");
    mm_lora_use use = {l, 1.25f};
    mm_dit_request_opts o = {.loras = &use, .n_loras = 1};
    mm_error err = {{0}};
    mm_tensor t;
    mm_tensor_alloc(&t, mm_cuda(0), kcase.text.dtype, 2, kcase.text.shape, &err);
    mm_copy(gpu, &t, &kcase.text);
    mm_dit_request *r = NULL;
    MM_REQUIRE(mm_dit_request_begin_ex(dit_gpu, gpu, &kcase.l, &t, &o, NULL, &r, &err) == 0, "%s", err.msg);
    const mm_dit_config *c = mm_dit_get_config(dit_gpu);
    cuda_test_rng g = {77};
    double worst = 0;
    for (int b = 0; b < c->layers; b++)
        for (int w = 0; w < 4; w++) {
            const mm_linear *lin = &dit_gpu->blocks[b].lin[w];
            const int64_t rows = 64, N = lin->out_features, K = lin->in_features;
            mm_tensor x = rnd(MM_BF16, rows, K, 2.f, &g), gx = up(&x), y1, y0;
            mm_tensor_alloc(&y1, mm_cuda(0), MM_F32, 2, MM_SHAPE(rows, N), NULL);
            mm_tensor_alloc(&y0, mm_cuda(0), MM_F32, 2, MM_SHAPE(rows, N), NULL);
            mm_dit_linear_lora(r, &y1, &gx, lin, mm_dit_lora_for(r, &dit_gpu->blocks[b], w));
            mm_dit_linear(gpu, &r->ws, &y0, &gx, lin);
            mm_tensor h1 = down(&y1), h0 = down(&y0);
            double *dw = lora_test_dense_delta(lc, lin->name, N, K);
            double *ref = calloc((size_t)(rows * N), sizeof *ref), *got = malloc(sizeof(double) * (size_t)(rows * N));
            for (int64_t i = 0; dw && i < rows; i++)
                for (int64_t n = 0; n < N; n++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += dw[n * K + k] * mm_bf16_to_f32(((uint16_t *)x.data)[i * K + k]);
                    ref[i * N + n] = use.strength * s;
                    got[i * N + n] = (double)((float *)h1.data)[i * N + n] - ((float *)h0.data)[i * N + n];
                }
            double e = dw ? lora_test_rel_l2(got, ref, rows * N) : INFINITY;
            worst = e > worst ? e : worst;
            MM_EXPECT(e < 1e-2, "%s on CUDA: rel_l2 %.3g against fp64", lin->name, e);
            free(dw), free(ref), free(got);
            mm_tensor *all[] = {&x, &gx, &y1, &y0, &h1, &h0};
            for (size_t i = 0; i < 6; i++)
                mm_tensor_free(all[i]);
        }
    printf("     worst rel_l2 %.2e (tolerance 1e-2)\n", worst);
    mm_dit_request_end(r);
    mm_tensor_free(&t);
    mm_lora_free(l);
    mm_lora_free(lc);
}

/* The forward with an adapter: the fused CUDA block (the branch in the
 * Hopper GEMM) and the composition on CUDA against the CPU's; the
 * adapter's effect itself agrees. */
static void test_forward_with_an_adapter_matches_the_cpu(void)
{
    mm_lora *lg = adapter(gpu, "cuda_fwd.safetensors", "--seed 52 --rank 32 --gain 0.5 --spelling comfy");
    mm_lora *lc = adapter(cpu, "cuda_fwd.safetensors", "--seed 52 --rank 32 --gain 0.5 --spelling comfy");
    MM_REQUIRE(lg && lc, "adapter");
    mm_lora_use ug = {lg, 1.0f}, uc = {lc, 1.0f};
    int64_t n;
    bool fused = false;
    float *cpu_base = forward(cpu, dit_cpu, NULL, 0, &n, NULL), *cpu_lora = forward(cpu, dit_cpu, &uc, 1, &n, NULL);
    float *gpu_base = forward(gpu, dit_gpu, NULL, 0, &n, NULL), *gpu_lora = forward(gpu, dit_gpu, &ug, 1, &n, &fused);
    MM_REQUIRE(cpu_base && cpu_lora && gpu_base && gpu_lora, "forwards");
    MM_EXPECT(fused || !mm_qgemm_lora_ready(gpu), "the fused block did not take the fused branch");
    const double base = rel_l2(gpu_base, cpu_base, n), with = rel_l2(gpu_lora, cpu_lora, n);
    float *dg = malloc(sizeof(float) * (size_t)n), *dc = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        dg[i] = gpu_lora[i] - gpu_base[i], dc[i] = cpu_lora[i] - cpu_base[i];
    const double effect = rel_l2(dg, dc, n), size = rel_l2(cpu_lora, cpu_base, n);
    printf("     CUDA vs CPU: base %.4f, with the adapter %.4f; the adapter's effect (%.3f of the output) %.4f apart\n",
           base, with, size, effect);
    MM_EXPECT(with < video_tol, "with the adapter, CUDA vs CPU rel_l2 %.4f > %.4f", with, video_tol);
    MM_EXPECT(effect < 0.1, "the adapter's effect differs between CUDA and the CPU by %.3f", effect);
    /* the composition on CUDA (portable kernels: block.c through the ops) */
    mm_kernel_policy p;
    mm_kernel_policy_portable(&p);
    mm_kernel_policy_install(&p);
    float *comp = forward(gpu, dit_gpu, &ug, 1, &n, NULL);
    mm_kernel_policy_defaults(&p);
    mm_kernel_policy_install(&p);
    MM_REQUIRE(comp, "composition forward");
    const double e = rel_l2(comp, cpu_lora, n);
    MM_EXPECT(e < video_tol, "the composition on CUDA vs CPU rel_l2 %.4f", e);
    free(cpu_base), free(cpu_lora), free(gpu_base), free(gpu_lora), free(dg), free(dc), free(comp);
    mm_lora_free(lg);
    mm_lora_free(lc);
}

int main(void)
{
    cuda_test_require_gpu("test_cuda_lora");
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (!manifest || !cases || lora_test_setup("cuda-lora") != 0 || mm_ctx_create(&cpu, mm_cpu(), 0, &err) != 0 ||
        mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0) {
        printf("FAIL setup: %s\n", manifest ? err.msg : jerr.text);
        return 1;
    }
    mm_conf_tol tol;
    snprintf(path, sizeof path, "%s/dit/dit.safetensors", mm_test_data_dir());
    if (mm_conf_tolerance(json_object_get(manifest, "tolerances"), "forward.video", &tol, &err) != 0 ||
        mm_dit_load(&dit_cpu, path, cpu, NULL, &err) != 0 || mm_dit_load(&dit_gpu, path, gpu, NULL, &err) != 0 ||
        kit_forward_case_load(&kcase, manifest, cases, "fl2va_first_step2") != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    video_tol = tol.rel_l2;
    CUDA_CASE(test_fused_branch_matches_the_addend_path);
    CUDA_CASE(test_cuda_branch_matches_fp64);
    CUDA_CASE(test_forward_with_an_adapter_matches_the_cpu);
    kit_forward_case_free(&kcase);
    mm_dit_free(dit_cpu);
    mm_dit_free(dit_gpu);
    lora_test_cleanup();
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
