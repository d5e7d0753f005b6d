/* The DiT's Hopper attention (backend/cuda/cuda_speed.h, kernels/attn_fa3.cu)
 * against its CPU twin, mm_attention on a CPU context in f32 over the same
 * bf16 inputs. Inputs are laid out as the DiT passes them: q, k, v are the
 * thirds of one fused [S, 3·H·128] buffer, out a [S, H·128] buffer poisoned
 * with NaN first (every element must be written). Sequence lengths cover one
 * partial tile, exact tiles, many tiles with a ragged end; GQA; both
 * schedules (ping-pong on and off); large score magnitudes (the running max
 * must move); exact (bf16) and fast (e4m3) modes.
 *
 * Exact mode must agree with the f32 reference as bf16 attention does
 * (rel_l2 < 1e-2: P and the output are rounded to bf16). Fast mode is
 * measured against the same reference (rel_l2 < 0.08, the fp8 products'
 * error; tests/device/speed.sh prints the figures).
 *
 * Without a GPU (or on a GPU without the kernel) it prints SKIP;
 * MMH3_REQUIRE_GPU=1 turns a missing sm_90 GPU into a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "test.h"

static mm_ctx *gpu, *cpu;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float normal(void) { return (uniform() + uniform() + uniform() + uniform()) * 0.8660254f; }

typedef struct result {
    double rel_l2;
    long nonfinite;
    int ok; /* ran */
} result;

/* One attention of S rows, hq query heads over hkv kv heads, q/k values of
 * scale `qk` (large values = sharp softmax), on the GPU and on the CPU. */
static result run_case(int S, int hq, int hkv, float qk, bool fp8, int pingpong)
{
    result res = {0, 0, 0};
    const int D = 128;
    const int64_t A = (int64_t)hq * D, Akv = (int64_t)hkv * D, W = A + 2 * Akv;
    const int64_t n = (int64_t)S * W, no = (int64_t)S * A;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    float *hf = malloc(sizeof(float) * (size_t)n);
    uint16_t *ob = malloc(sizeof(uint16_t) * (size_t)no);
    float *ref = malloc(sizeof(float) * (size_t)no);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = i % W;
        float v = normal() * (c < A + Akv ? qk : 1.0f);
        if (c < A + Akv && c % D == 5)
            v *= 6.0f; /* an outlier channel per head, as the model's q/k have */
        h[i] = mm_f32_to_bf16(v);
        hf[i] = mm_bf16_to_f32(h[i]);
    }
    mm_error err = {{0}};
    mm_tensor dq = {0}, dout = {0};
    const int64_t shp[2] = {S, W}, oshp[2] = {S, A};
    if (mm_tensor_alloc(&dq, mm_ctx_device(gpu), MM_BF16, 2, shp, &err) ||
        mm_tensor_alloc(&dout, mm_ctx_device(gpu), MM_BF16, 2, oshp, &err)) {
        MM_EXPECT(0, "allocating: %s", err.msg);
        goto done;
    }
    mm_tensor hq_t = mm_tensor_wrap(h, mm_cpu(), MM_BF16, 2, shp);
    mm_copy(gpu, &dq, &hq_t);
    mm_fill(gpu, &dout, NAN);

    const int64_t hd[2] = {hq, D}, hdkv[2] = {hkv, D};
    mm_tensor q3 = mm_tensor_narrow(&dq, 1, 0, A), k3 = mm_tensor_narrow(&dq, 1, A, Akv);
    mm_tensor v3 = mm_tensor_narrow(&dq, 1, A + Akv, Akv);
    mm_tensor q = mm_tensor_unflatten(&q3, 1, 2, hd), k = mm_tensor_unflatten(&k3, 1, 2, hdkv);
    mm_tensor v = mm_tensor_unflatten(&v3, 1, 2, hdkv), o = mm_tensor_unflatten(&dout, 1, 2, hd);
    if (!mm_cuda_fa3_fits(gpu, &o, &q, &k, &v)) {
        MM_EXPECT(0, "the views do not fit the kernel");
        goto done;
    }
    char pp[4];
    snprintf(pp, sizeof pp, "%d", pingpong);
    setenv("MMH3_FA3_PINGPONG", pp, 1);
    mm_cuda_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, fp8);
    unsetenv("MMH3_FA3_PINGPONG");
    mm_tensor hob = mm_tensor_wrap(ob, mm_cpu(), MM_BF16, 2, oshp);
    mm_copy(gpu, &hob, &dout);
    if (mm_ctx_sync(gpu, &err) != 0) {
        MM_EXPECT(0, "GPU: %s", err.msg);
        goto done;
    }

    /* CPU twin in f32 on the same (bf16-rounded) values */
    mm_tensor cq = mm_tensor_wrap(hf, mm_cpu(), MM_F32, 2, shp);
    mm_tensor cq3 = mm_tensor_narrow(&cq, 1, 0, A), ck3 = mm_tensor_narrow(&cq, 1, A, Akv);
    mm_tensor cv3 = mm_tensor_narrow(&cq, 1, A + Akv, Akv);
    mm_tensor cqh = mm_tensor_unflatten(&cq3, 1, 2, hd), ckh = mm_tensor_unflatten(&ck3, 1, 2, hdkv);
    mm_tensor cvh = mm_tensor_unflatten(&cv3, 1, 2, hdkv);
    mm_tensor cref = mm_tensor_wrap(ref, mm_cpu(), MM_F32, 3, (int64_t[]){S, hq, D});
    mm_attention(cpu, &cref, &cqh, &ckh, &cvh, NULL);
    if (mm_ctx_sync(cpu, &err) != 0) {
        MM_EXPECT(0, "CPU: %s", err.msg);
        goto done;
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < no; i++) {
        float g = mm_bf16_to_f32(ob[i]);
        if (!isfinite(g)) {
            res.nonfinite++;
            continue;
        }
        double e = (double)g - ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    res.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    res.ok = 1;
done:
    mm_tensor_free(&dq);
    mm_tensor_free(&dout);
    free(h);
    free(hf);
    free(ob);
    free(ref);
    return res;
}

static void check(const char *what, int S, int hq, int hkv, float qk, bool fp8, int pingpong)
{
    result r = run_case(S, hq, hkv, qk, fp8, pingpong);
    if (!r.ok)
        return;
    double tol = fp8 ? 0.08 : 1e-2;
    printf("  %s: S=%d heads %d/%d q/k scale %.1f %s pingpong %d: rel_l2 %.3g (tolerance %.3g), %ld unwritten/NaN\n",
           what, S, hq, hkv, qk, fp8 ? "e4m3" : "bf16", pingpong, r.rel_l2, tol, r.nonfinite);
    fflush(stdout);
    MM_EXPECT(r.nonfinite == 0, "%s: %ld outputs unwritten or not finite", what, r.nonfinite);
    MM_EXPECT(r.rel_l2 < tol, "%s: rel_l2 %.4g >= %.3g", what, r.rel_l2, tol);
}

static void test_exact_one_partial_tile(void) { check("exact", 77, 2, 2, 1.0f, false, 1); }
static void test_exact_one_row(void) { check("exact", 1, 1, 1, 1.0f, false, 1); }
static void test_exact_whole_tiles(void) { check("exact", 256, 2, 2, 1.0f, false, 1); }
static void test_exact_ragged_many_tiles(void) { check("exact", 1000, 3, 3, 1.0f, false, 1); }
static void test_exact_no_pingpong(void) { check("exact", 1000, 2, 2, 1.0f, false, 0); }
static void test_exact_gqa(void) { check("exact", 517, 4, 2, 1.0f, false, 1); }
static void test_exact_sharp_softmax(void) { check("exact", 700, 2, 2, 3.0f, false, 1); }
static void test_exact_long(void) { check("exact", 2949, 2, 2, 1.0f, false, 1); }
static void test_fast_ragged(void) { check("fast", 1000, 3, 3, 1.0f, true, 1); }
static void test_fast_no_pingpong(void) { check("fast", 333, 2, 2, 1.0f, true, 0); }
static void test_fast_gqa_sharp(void) { check("fast", 517, 4, 2, 3.0f, true, 1); }
static void test_fast_long(void) { check("fast", 2949, 2, 2, 1.0f, true, 1); }

int main(void)
{
    const char *req = getenv("MMH3_REQUIRE_GPU");
    bool required = req && *req && strcmp(req, "0") != 0;
    mm_error err = {{0}};
    if (mm_cuda_count() == 0 || mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0) {
        printf("%s test_speed_attention: no CUDA device\n", required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    mm_ctx_create(&cpu, mm_cpu(), 0, &err);
    /* a probe the size of the smallest case: does this GPU run the kernel? */
    mm_tensor probe = {0};
    const int64_t ps[3] = {8, 1, 128};
    bool fits = mm_tensor_alloc(&probe, mm_cuda(0), MM_BF16, 3, ps, &err) == 0 &&
                mm_cuda_fa3_fits(gpu, &probe, &probe, &probe, &probe);
    mm_tensor_free(&probe);
    if (!fits) {
        printf("%s test_speed_attention: this GPU or build has no sm_90a attention kernel\n",
               required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    MM_RUN(test_exact_one_partial_tile);
    MM_RUN(test_exact_one_row);
    MM_RUN(test_exact_whole_tiles);
    MM_RUN(test_exact_ragged_many_tiles);
    MM_RUN(test_exact_no_pingpong);
    MM_RUN(test_exact_gqa);
    MM_RUN(test_exact_sharp_softmax);
    MM_RUN(test_exact_long);
    MM_RUN(test_fast_ragged);
    MM_RUN(test_fast_no_pingpong);
    MM_RUN(test_fast_gqa_sharp);
    MM_RUN(test_fast_long);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
