/* The Hopper int8 GEMM with its epilogue fused (backend/cuda/cuda_speed.h,
 * kernels/qgemm_sm90.cu) must reproduce, bit for bit, the path it replaces:
 * mm_gemm_i8_scaled (cuBLASLt int32 + the epilogue kernel) for the plain
 * store, and mm_fused_gemm_i8_scaled_gated for the gated residual — integer
 * sums are exact and both epilogues round at the same points. Shapes: ragged
 * row counts and odd numbers of row blocks and column tiles, N not a
 * multiple of the 256-wide tile, K not a
 * multiple of the 128-wide slice, the DiT's own K values, more tiles than
 * SMs (each CTA walks several, the ring's phase running on across tiles),
 * and y as columns of a wider tensor (row stride not a multiple of 16
 * bytes, the padding left untouched); outputs poisoned first;
 * then the plain path against the CPU twin as well (mm_gemm_i8_scaled on a
 * CPU context, bit for bit).
 *
 * SKIP without an sm_90 GPU; MMH3_REQUIRE_GPU=1 makes that a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/fused.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "test.h"

static mm_ctx *gpu, *cpu;
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}
static float unit(void) { return (float)((next() >> 40) * 0x1p-24); }

static int up(mm_tensor *t, mm_dtype dt, int64_t r, int64_t c, const void *host)
{
    mm_error err = {{0}};
    const int64_t shape[2] = {r, c};
    if (mm_tensor_alloc(t, mm_cuda(0), dt, c ? 2 : 1, shape, &err) != 0) {
        MM_EXPECT(0, "alloc: %s", err.msg);
        return -1;
    }
    mm_tensor h = mm_tensor_wrap((void *)host, mm_cpu(), dt, c ? 2 : 1, shape);
    return mm_copy(gpu, t, &h);
}

/* pad > 0: the kernel's y is columns [pad, pad + N) of an [M, N + pad] tensor
 * (row stride N + pad, base 2·pad bytes in: not 16-byte aligned), and the
 * pad columns must come back untouched. */
static void run(int M, int N, int K, int T, bool gated, int pad)
{
    const int ldy = N + pad;
    int8_t *x = malloc((size_t)M * K), *w = malloc((size_t)N * K);
    float *sx = malloc(4 * (size_t)M), *sw = malloc(4 * (size_t)N), *gate = malloc(4 * (size_t)T * N);
    int32_t *idx = malloc(4 * (size_t)M);
    uint16_t *res = malloc(2 * (size_t)M * N), *a = malloc(2 * (size_t)M * N), *b = malloc(2 * (size_t)M * N);
    uint16_t *full = malloc(2 * (size_t)M * ldy);
    for (int64_t i = 0; i < (int64_t)M * K; i++)
        x[i] = (int8_t)((int)(next() % 255) - 127);
    for (int64_t i = 0; i < (int64_t)N * K; i++)
        w[i] = (int8_t)((int)(next() % 255) - 127);
    for (int i = 0; i < M; i++) {
        sx[i] = (0.5f + unit()) * 0.02f;
        idx[i] = (int32_t)(next() % (uint64_t)T);
    }
    for (int i = 0; i < N; i++)
        sw[i] = (0.5f + unit()) * 1e-3f;
    for (int64_t i = 0; i < (int64_t)T * N; i++)
        gate[i] = mm_bf16_to_f32(mm_f32_to_bf16(unit() * 2.0f - 1.0f)); /* bf16 values, as the DiT's tables */
    for (int64_t i = 0; i < (int64_t)M * N; i++)
        res[i] = mm_f32_to_bf16(unit() * 4.0f - 2.0f);

    /* the kernel's output tensor: the residual (gated) or NaN poison (store: every element must be written)
     * in the N columns, a sentinel in the pad */
    for (int64_t i = 0; i < M; i++)
        for (int j = 0; j < ldy; j++)
            full[i * ldy + j] = j < pad ? 0x1234 : gated ? res[i * N + j - pad] : 0x7fc0;
    mm_tensor dx = {0}, dw = {0}, dsx = {0}, dsw = {0}, dg = {0}, dg16 = {0}, didx = {0}, yfull = {0}, yb = {0};
    mm_tensor ya = {0};
    uint16_t *g16 = malloc(2 * (size_t)T * N);
    for (int64_t i = 0; i < (int64_t)T * N; i++)
        g16[i] = mm_f32_to_bf16(gate[i]);
    mm_error err = {{0}};
    if (up(&dx, MM_I8, M, K, x) || up(&dw, MM_I8, N, K, w) || up(&dsx, MM_F32, M, 0, sx) ||
        up(&dsw, MM_F32, N, 0, sw) || up(&dg, MM_F32, T, N, gate) || up(&dg16, MM_BF16, T, N, g16) ||
        up(&didx, MM_I32, M, 0, idx) || up(&yfull, MM_BF16, M, ldy, full) || up(&yb, MM_BF16, M, N, res))
        goto done;
    ya = mm_tensor_narrow(&yfull, 1, pad, N);
    if (!gated) /* poison: every element must be written */
        mm_fill(gpu, &yb, NAN);
    MM_EXPECT(mm_qgemm_fits(gpu, &ya, &dx, &dw), "M=%d N=%d K=%d does not fit the kernel", M, N, K);
    mm_qgemm(gpu, &ya, &dx, &dsx, &dw, &dsw, gated ? &dg : NULL, gated ? &didx : NULL);
    if (gated)
        mm_fused_gemm_i8_scaled_gated(gpu, &yb, &dx, &dsx, &dw, &dsw, &dg16, &didx);
    else
        mm_gemm_i8_scaled(gpu, &yb, &dx, &dsx, &dw, &dsw, NULL);
    mm_tensor hf = mm_tensor_wrap(full, mm_cpu(), MM_BF16, 2, (int64_t[]){M, ldy});
    mm_tensor hb = mm_tensor_wrap(b, mm_cpu(), MM_BF16, 2, (int64_t[]){M, N});
    mm_copy(gpu, &hf, &yfull);
    mm_copy(gpu, &hb, &yb);
    if (mm_ctx_sync(gpu, &err) != 0) {
        MM_EXPECT(0, "GPU: %s", err.msg);
        goto done;
    }
    int64_t touched = 0;
    for (int64_t i = 0; i < M; i++)
        for (int j = 0; j < ldy; j++) {
            if (j < pad)
                touched += full[i * ldy + j] != 0x1234;
            else
                a[i * N + j - pad] = full[i * ldy + j];
        }
    MM_EXPECT(touched == 0, "%lld elements of y's padding were written", (long long)touched);
    int64_t diff = 0, first = -1, nonfinite = 0;
    for (int64_t i = 0; i < (int64_t)M * N; i++) {
        if (!isfinite(mm_bf16_to_f32(a[i])))
            nonfinite++;
        if (a[i] != b[i] && first < 0)
            first = i;
        diff += a[i] != b[i];
    }
    printf("  M=%d N=%d K=%d ldy=%d %s: %lld of %lld outputs differ from the cuBLASLt path, %lld not finite\n", M, N,
           K, ldy, gated ? "gated residual" : "store", (long long)diff, (long long)M * N, (long long)nonfinite);
    MM_EXPECT(diff == 0, "first difference at row %lld col %lld: 0x%04x vs 0x%04x", (long long)(first / N),
              (long long)(first % N), first >= 0 ? a[first] : 0, first >= 0 ? b[first] : 0);
    MM_EXPECT(nonfinite == 0, "%lld outputs not finite (unwritten?)", (long long)nonfinite);

    if (!gated && (int64_t)M * N * K <= (int64_t)1 << 31) { /* the CPU twin */
        mm_tensor cx = mm_tensor_wrap(x, mm_cpu(), MM_I8, 2, (int64_t[]){M, K});
        mm_tensor cw = mm_tensor_wrap(w, mm_cpu(), MM_I8, 2, (int64_t[]){N, K});
        mm_tensor csx = mm_tensor_wrap(sx, mm_cpu(), MM_F32, 1, (int64_t[]){M});
        mm_tensor csw = mm_tensor_wrap(sw, mm_cpu(), MM_F32, 1, (int64_t[]){N});
        mm_tensor cy = mm_tensor_wrap(b, mm_cpu(), MM_BF16, 2, (int64_t[]){M, N});
        mm_gemm_i8_scaled(cpu, &cy, &cx, &csx, &cw, &csw, NULL);
        MM_EXPECT(mm_ctx_sync(cpu, &err) == 0, "CPU: %s", err.msg);
        int64_t cd = 0;
        for (int64_t i = 0; i < (int64_t)M * N; i++)
            cd += a[i] != b[i];
        printf("  M=%d N=%d K=%d store: %lld outputs differ from the CPU twin\n", M, N, K, (long long)cd);
        MM_EXPECT(cd == 0, "%lld outputs differ from the CPU twin", (long long)cd);
    }
done:
    mm_tensor *all[] = {&dx, &dw, &dsx, &dsw, &dg, &dg16, &didx, &yfull, &yb}; /* ya: a view of yfull */
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    free(x), free(w), free(sx), free(sw), free(gate), free(idx), free(res), free(a), free(b), free(g16), free(full);
}

typedef struct qcase {
    const char *name;
    int M, N, K, T;
    bool gated;
    int pad;
} qcase;

static const qcase cases[] = {
    {"test_store_small_ragged", 37, 264, 272, 1, false, 0},
    {"test_store_tiles", 256, 512, 512, 1, false, 0},
    {"test_store_qkv_k", 300, 768, 5376, 1, false, 0},
    {"test_store_fc2_k", 129, 256, 14336, 1, false, 0},
    {"test_gated_out_k", 333, 512, 7168, 3, true, 0},
    {"test_gated_ragged", 1000, 264, 5376, 6, true, 0},
    {"test_store_many_tiles", 2049, 2304, 1024, 1, false, 0},
    /* 32 × 8 tiles of 9 K slices (not a multiple of the 4-stage ring) */
    {"test_store_tiles_past_sms", 4000, 2048, 1040, 1, false, 0},
    /* 24 × 6 tiles, gated, the out linear's K */
    {"test_gated_tiles_past_sms", 3000, 1536, 7168, 3, true, 0},
    /* y inside a wider tensor: row stride N + 2, base 4 bytes in (no 16-byte pieces) */
    {"test_store_padded_y", 300, 768, 512, 1, false, 2},
    {"test_gated_padded_y", 333, 520, 7168, 3, true, 2},
};

int main(void)
{
    const char *req = getenv("MMH3_REQUIRE_GPU");
    bool required = req && *req && strcmp(req, "0") != 0;
    mm_error err = {{0}};
    if (mm_cuda_count() == 0 || mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0) {
        printf("%s test_speed_qgemm: no CUDA device\n", required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    mm_ctx_create(&cpu, mm_cpu(), 0, &err);
    mm_tensor y = {0}, q = {0};
    bool fits = mm_tensor_alloc(&y, mm_cuda(0), MM_BF16, 2, (int64_t[]){16, 16}, &err) == 0 &&
                mm_tensor_alloc(&q, mm_cuda(0), MM_I8, 2, (int64_t[]){16, 16}, &err) == 0 &&
                mm_qgemm_fits(gpu, &y, &q, &q);
    mm_tensor_free(&y);
    mm_tensor_free(&q);
    if (!fits) {
        printf("%s test_speed_qgemm: this GPU or build has no sm_90a int8 GEMM kernel\n", required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mm_test_current = cases[c].name; /* MM_RUN over the table */
        mm_test_case_failed = 0;
        run(cases[c].M, cases[c].N, cases[c].K, cases[c].T, cases[c].gated, cases[c].pad);
        if (mm_test_case_failed)
            mm_test_failures++;
        else
            printf("PASS %s\n", cases[c].name);
        fflush(stdout);
    }
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
