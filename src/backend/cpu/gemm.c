/* The CPU GEMM: the hot loop of the CPU path (every linear, conv and the
 * dequantized nvfp4 weights run through it).
 *
 * Hand-written rather than a BLAS because it must read bf16/f16/strided
 * operands without a conversion pass, apply our epilogue (alpha, bias, beta,
 * one rounding to the output dtype) and use our thread pool; a dependency
 * would do none of these. The structure is the classic one (Goto/BLIS): B is
 * packed per NC-column block into NR-wide f32 strips covering all of K, then
 * each task (an MC-row block of A times a group of strips) packs its A block
 * per KC slice into MR-row panels and runs an MR x NR register-blocked
 * micro-kernel, accumulating the whole K in an f32 tile before the epilogue.
 * The micro-kernel uses GCC vector extensions and is compiled twice (AVX2 and
 * baseline) with runtime selection. Accumulation order is fixed by the
 * blocking, never by the thread count, so results are reproducible. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

#define MR 4
#define NR 16
#define KC 256
#define MC 64
#define NC 1024
#define SG 8 /* strips per task: 128 columns */

typedef float v8 __attribute__((vector_size(32)));

/* ---------------------------------------------------------------- packing */

/* Reads element (i, j) of a typed strided matrix as f32. */
static inline void load_strided(float *dst, const mm_cpu_mat *m, int64_t i, int64_t j0, int64_t n)
{
    cpu_load_f32(dst, cpu_at(m->p, m->dtype, i * m->rs + j0 * m->cs), m->dtype, n, m->cs);
}

typedef struct gemm_job {
    int64_t M, N, K;
    float alpha, beta;
    mm_cpu_mat A, B;
    const void *bias;
    mm_dtype bias_dtype;
    bool bias_rows;
    void *C;
    mm_dtype c_dtype;
    int64_t ldc;
    /* current column block */
    int64_t jc, nc, strips;
    float *bp; /* [strips][K][NR] */
} gemm_job;

/* Packs B[0:K, jc + s*NR : +NR] for strips [begin, end). */
static void pack_b_strips(void *user, int64_t begin, int64_t end)
{
    const gemm_job *j = user;
    float row[NR];
    /* A transposed Linear weight (B = W^T, columns contiguous) is read down
     * its columns instead, so every load is sequential. */
    bool by_col = j->B.rs == 1 && j->B.cs != 1;
    float *col = by_col ? malloc((size_t)(j->K ? j->K : 1) * 4) : NULL;
    if (by_col && !col)
        return;
    for (int64_t s = begin; s < end; s++) {
        int64_t c0 = j->jc + s * NR, w = j->jc + j->nc - c0 < NR ? j->jc + j->nc - c0 : NR;
        float *dst = j->bp + s * j->K * NR;
        if (by_col) {
            for (int64_t t = 0; t < NR; t++) {
                if (t < w)
                    cpu_load_f32(col, cpu_at(j->B.p, j->B.dtype, (c0 + t) * j->B.cs), j->B.dtype, j->K, 1);
                for (int64_t k = 0; k < j->K; k++)
                    dst[k * NR + t] = t < w ? col[k] : 0.0f;
            }
            continue;
        }
        for (int64_t k = 0; k < j->K; k++) {
            /* B(k, c0..c0+w): along a row of B, i.e. stride cs */
            load_strided(row, &j->B, k, c0, w);
            for (int64_t t = w; t < NR; t++)
                row[t] = 0.0f;
            memcpy(dst + k * NR, row, sizeof row);
        }
    }
    free(col);
}

/* Packs A[i0 : i0+mc, p0 : p0+kc] into MR-row panels [panel][k][MR]. */
static void pack_a(const gemm_job *j, float *ap, int64_t i0, int64_t mc, int64_t p0, int64_t kc)
{
    float col[KC];
    int64_t panels = (mc + MR - 1) / MR;
    for (int64_t pn = 0; pn < panels; pn++) {
        float *dst = ap + pn * kc * MR;
        for (int r = 0; r < MR; r++) {
            int64_t i = i0 + pn * MR + r;
            if (i < i0 + mc)
                load_strided(col, &j->A, i, p0, kc);
            else
                memset(col, 0, (size_t)kc * 4);
            for (int64_t k = 0; k < kc; k++)
                dst[k * MR + r] = col[k];
        }
    }
}

/* acc[MR][ldacc] += a_panel[kc][MR] . b_strip[kc][NR] */
static inline __attribute__((always_inline)) void micro_kernel(int64_t kc, const float *a, const float *b, float *acc, int64_t ldacc)
{
    v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v8 b0, b1;
        memcpy(&b0, b + k * NR, sizeof b0);
        memcpy(&b1, b + k * NR + 8, sizeof b1);
        float a0 = a[k * MR], a1 = a[k * MR + 1], a2 = a[k * MR + 2], a3 = a[k * MR + 3];
        c00 += a0 * b0;
        c01 += a0 * b1;
        c10 += a1 * b0;
        c11 += a1 * b1;
        c20 += a2 * b0;
        c21 += a2 * b1;
        c30 += a3 * b0;
        c31 += a3 * b1;
    }
    v8 *rows[MR][2] = {{&c00, &c01}, {&c10, &c11}, {&c20, &c21}, {&c30, &c31}};
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2; h++) {
            v8 old;
            memcpy(&old, acc + r * ldacc + h * 8, sizeof old);
            old += *rows[r][h];
            memcpy(acc + r * ldacc + h * 8, &old, sizeof old);
        }
}

MULTIVERSION
static void gemm_tasks(void *user, int64_t begin, int64_t end)
{
    const gemm_job *j = user;
    int64_t groups = (j->strips + SG - 1) / SG;
    float *ap = aligned_alloc(64, (size_t)MC * KC * 4);
    float *acc = aligned_alloc(64, (size_t)MC * SG * NR * 4);
    float *orow = malloc((size_t)SG * NR * 4 * 2);
    if (!ap || !acc || !orow) {
        free(ap);
        free(acc);
        free(orow);
        return;
    }
    float *brow = orow + SG * NR;
    const int64_t ldacc = SG * NR;
    for (int64_t t = begin; t < end; t++) {
        int64_t ib = t / groups, g = t % groups;
        int64_t i0 = ib * MC, mc = j->M - i0 < MC ? j->M - i0 : MC;
        int64_t s0 = g * SG, ns = j->strips - s0 < SG ? j->strips - s0 : SG;
        memset(acc, 0, (size_t)MC * ldacc * 4);
        for (int64_t p0 = 0; p0 < j->K; p0 += KC) {
            int64_t kc = j->K - p0 < KC ? j->K - p0 : KC;
            pack_a(j, ap, i0, mc, p0, kc);
            for (int64_t s = 0; s < ns; s++) {
                const float *bs = j->bp + (s0 + s) * j->K * NR + p0 * NR;
                for (int64_t pn = 0; pn * MR < mc; pn++)
                    micro_kernel(kc, ap + pn * kc * MR, bs, acc + pn * MR * ldacc + s * NR, ldacc);
            }
        }
        /* epilogue: alpha*acc + bias + beta*C, one rounding */
        int64_t c0 = j->jc + s0 * NR, w = j->jc + j->nc - c0;
        if (w > ns * NR)
            w = ns * NR;
        if (j->bias && !j->bias_rows)
            cpu_load_f32(brow, cpu_at(j->bias, j->bias_dtype, c0), j->bias_dtype, w, 1);
        for (int64_t i = 0; i < mc; i++) {
            void *crow = cpu_at(j->C, j->c_dtype, (i0 + i) * j->ldc + c0);
            if (j->beta != 0.0f)
                cpu_load_f32(orow, crow, j->c_dtype, w, 1);
            float rb = j->bias && j->bias_rows ? cpu_get_f32(cpu_at(j->bias, j->bias_dtype, i0 + i), j->bias_dtype) : 0;
            for (int64_t c = 0; c < w; c++) {
                float v = j->alpha * acc[i * ldacc + c];
                if (j->bias)
                    v += j->bias_rows ? rb : brow[c];
                if (j->beta != 0.0f)
                    v += j->beta * orow[c];
                orow[c] = v;
            }
            cpu_store_f32(crow, j->c_dtype, 1, orow, w);
        }
    }
    free(ap);
    free(acc);
    free(orow);
}

void mm_cpu_gemm_f32(mm_ctx *ctx, int64_t M, int64_t N, int64_t K, float alpha, mm_cpu_mat A, mm_cpu_mat B,
                     const void *bias, mm_dtype bias_dtype, bool bias_rows, float beta, void *C, mm_dtype c_dtype,
                     int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_job j = {M, N, K, alpha, beta, A, B, bias, bias_dtype, bias_rows, C, c_dtype, ldc, 0, 0, 0, NULL};
    int64_t ncmax = N < NC ? N : NC;
    int64_t smax = (ncmax + NR - 1) / NR;
    j.bp = aligned_alloc(64, (size_t)((smax * (K ? K : 1) * NR * 4 + 63) / 64 * 64));
    if (!j.bp) {
        mm_ctx_fail(ctx, "mm_gemm: out of host memory packing B (%lld x %lld)", (long long)K, (long long)ncmax);
        return;
    }
    for (int64_t jc = 0; jc < N; jc += NC) {
        j.jc = jc;
        j.nc = N - jc < NC ? N - jc : NC;
        j.strips = (j.nc + NR - 1) / NR;
        mm_parallel_for(ctx, j.strips, 1, pack_b_strips, &j);
        int64_t tasks = ((M + MC - 1) / MC) * ((j.strips + SG - 1) / SG);
        mm_parallel_for(ctx, tasks, 1, gemm_tasks, &j);
    }
    free(j.bp);
}

int mm_cpu_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias,
                float alpha, float beta)
{
    int batched = a->ndim == 3;
    int64_t nb = batched ? a->shape[0] : 1;
    int na = a->ndim, nbd = b->ndim, no = out->ndim;
    int64_t M = a->shape[na - 2], K = a->shape[na - 1], N = b->shape[nbd - 1];
    if (bias && bias->ndim == 1 && bias->stride[0] != 1) {
        return mm_ctx_fail(ctx, "mm_gemm: a strided bias vector is not supported on the CPU; copy it first");
    }
    for (int64_t i = 0; i < nb; i++) {
        const char *ap = cpu_at(a->data, a->dtype, batched ? i * a->stride[0] : 0);
        const char *bp = cpu_at(b->data, b->dtype, (nbd == 3) ? i * b->stride[0] : 0);
        char *op = cpu_at(out->data, out->dtype, batched ? i * out->stride[0] : 0);
        mm_cpu_mat A = {ap, a->dtype, a->stride[na - 2], a->stride[na - 1]};
        mm_cpu_mat B = {bp, b->dtype, b->stride[nbd - 2], b->stride[nbd - 1]};
        mm_cpu_gemm_f32(ctx, M, N, K, alpha, A, B, bias ? bias->data : NULL, bias ? bias->dtype : MM_F32, false, beta, op,
                        out->dtype, out->stride[no - 2]);
        if (mm_ctx_failed(ctx))
            return -1;
    }
    return 0;
}
