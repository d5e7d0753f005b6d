/* GEMMs through cuBLASLt, and the ConvRot int8 linear's epilogue.
 *
 * Row-major y[M,N] = a[M,K]·w[N,K]ᵀ is, in cuBLASLt's column-major terms,
 * yᵀ[N,M] = op_T(w as K×N)·(a as K×M): the "TN" layout, which is also the one
 * the int8 tensor-core (IMMA) kernels require. Plans (descriptors, layouts
 * and the heuristic's algorithm) are built once per shape and cached.
 *
 * The int8 linear needs acc·sx[r]·sw[n] with a scale per row AND per column;
 * cuBLASLt's int8 path scales by a scalar or one vector only, so it writes
 * int32 and a fused kernel applies both scales, the optional bias and the
 * gated residual add in one pass. M is processed in chunks so the int32
 * intermediate stays bounded (and partly in L2). MMH3_QLINEAR=outer asks
 * cuBLASLt for its per-row × per-column ("outer vector") scaling on int8
 * instead, where the library has such a kernel; the benchmark tries both.
 */
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/common.cuh"

namespace {

const size_t kWorkspaceBytes = size_t(32) << 20;

struct PlanKey {
    int dev, M, N, K;
    int ab, y, bias_t, has_bias, beta, mode;
    int64_t lda, ldw, ldy;
    bool operator<(const PlanKey &o) const
    {
        return std::tie(dev, M, N, K, ab, y, bias_t, has_bias, beta, mode, lda, ldw, ldy) <
               std::tie(o.dev, o.M, o.N, o.K, o.ab, o.y, o.bias_t, o.has_bias, o.beta, o.mode, o.lda, o.ldw, o.ldy);
    }
};

struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool ok = false;
};

std::mutex g_plans_mu;
std::map<PlanKey, Plan> g_plans;

cudaDataType_t cuda_type(mm_dtype t)
{
    switch (t) {
    case MM_BF16: return CUDA_R_16BF;
    case MM_F16: return CUDA_R_16F;
    case MM_F32: return CUDA_R_32F;
    case MM_I8: return CUDA_R_8I;
    case MM_I32: return CUDA_R_32I;
    default: return CUDA_R_32F;
    }
}

int lt_fail(mm_error *err, cublasStatus_t st, const char *what)
{
    return mm_fail(err, "cuBLASLt %s: %s", what, cublasLtGetStatusString(st));
}

#define LT_TRY(call, what)                                                       \
    do {                                                                         \
        cublasStatus_t st_ = (call);                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                        \
            return lt_fail(err, st_, what);                                      \
    } while (0)

enum { MODE_PLAIN = 0, MODE_OUTER_VEC = 1 };

/* Builds the plan for one GEMM shape; called with g_plans_mu held. */
int build_plan(cublasLtHandle_t lt, const PlanKey &k, const mmk_gemm *g, Plan *p, mm_error *err)
{
    bool is_i8 = g->ab_dtype == MM_I8;
    cublasComputeType_t compute = is_i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
    cudaDataType_t scale_t = (is_i8 && k.mode == MODE_PLAIN) ? CUDA_R_32I : CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, compute, scale_t), "creating a matmul descriptor");
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
    if (g->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
        cudaDataType_t bt = cuda_type(g->bias_dtype);
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "BIAS_DATA_TYPE");
    }
    if (k.mode == MODE_OUTER_VEC) {
        /* cuBLASLt's A is our weight (N side), its B our activations (M side). */
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode),
               "A_SCALE_MODE");
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode),
               "B_SCALE_MODE");
    }
    cudaDataType_t ab = cuda_type(g->ab_dtype), yt = cuda_type(g->y_dtype);
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)g->K, (uint64_t)g->N, g->ldw), "layout of w");
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)g->K, (uint64_t)g->M, g->lda), "layout of a");
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, yt, (uint64_t)g->N, (uint64_t)g->M, g->ldy), "layout of y");

    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "creating a preference");
    size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res[1];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        return mm_fail(err,
                       "cuBLASLt has no algorithm for %s×%s GEMM M=%d N=%d K=%d (lda=%lld ldw=%lld ldy=%lld, out %s%s%s)%s%s",
                       mm_dtype_name(g->ab_dtype), mm_dtype_name(g->ab_dtype), g->M, g->N, g->K, (long long)g->lda,
                       (long long)g->ldw, (long long)g->ldy, mm_dtype_name(g->y_dtype), g->bias ? ", bias" : "",
                       k.mode == MODE_OUTER_VEC ? ", outer-vector scales" : "",
                       st != CUBLAS_STATUS_SUCCESS ? ": " : "", st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st) : "");
    p->algo = res[0].algo;
    p->ok = true;
    return 0;
}

int validate(const mmk_gemm *g, int mode, mm_error *err)
{
    if (g->M <= 0 || g->N <= 0 || g->K <= 0)
        return mm_fail(err, "GEMM sizes must be positive, got M=%d N=%d K=%d", g->M, g->N, g->K);
    if (g->lda < g->K || g->ldw < g->K || g->ldy < g->N)
        return mm_fail(err, "GEMM strides too small: lda=%lld ldw=%lld (need >= K=%d), ldy=%lld (need >= N=%d)",
                       (long long)g->lda, (long long)g->ldw, g->K, (long long)g->ldy, g->N);
    switch (g->ab_dtype) {
    case MM_BF16:
        if (g->y_dtype != MM_BF16 && g->y_dtype != MM_F32)
            return mm_fail(err, "bf16 GEMM writes bf16 or f32, not %s", mm_dtype_name(g->y_dtype));
        break;
    case MM_F32:
        if (g->y_dtype != MM_F32)
            return mm_fail(err, "f32 GEMM writes f32, not %s", mm_dtype_name(g->y_dtype));
        break;
    case MM_I8:
        if (mode == MODE_OUTER_VEC) {
            if (g->y_dtype != MM_BF16)
                return mm_fail(err, "int8 GEMM with outer-vector scales writes bf16, not %s", mm_dtype_name(g->y_dtype));
            break;
        }
        if (g->y_dtype != MM_I32)
            return mm_fail(err, "int8 GEMM writes i32, not %s", mm_dtype_name(g->y_dtype));
        if (g->bias)
            return mm_fail(err, "int8 GEMM takes no bias (the epilogue kernel adds it)");
        if (g->K % 4 || g->lda % 4 || g->ldw % 4 || g->ldy % 4)
            return mm_fail(err, "int8 GEMM needs K and all strides multiples of 4 (K=%d lda=%lld ldw=%lld ldy=%lld)",
                           g->K, (long long)g->lda, (long long)g->ldw, (long long)g->ldy);
        break;
    default:
        return mm_fail(err, "GEMM inputs must be bf16, f32 or i8, not %s", mm_dtype_name(g->ab_dtype));
    }
    if (g->bias && g->bias_dtype != MM_BF16 && g->bias_dtype != MM_F32)
        return mm_fail(err, "GEMM bias must be bf16 or f32, not %s", mm_dtype_name(g->bias_dtype));
    if (g->beta != 0.f && g->beta != 1.f)
        return mm_fail(err, "GEMM beta must be 0 or 1, got %g", (double)g->beta);
    return 0;
}

/* Runs one GEMM; outer scales (device vectors) only in MODE_OUTER_VEC. */
int gemm_run(int dev, cudaStream_t s, const mmk_gemm *g, int mode, const float *scale_w, const float *scale_a,
             mm_error *err)
{
    if (validate(g, mode, err))
        return -1;
    cublasLtHandle_t lt = (cublasLtHandle_t)mmk_cublaslt(dev, err);
    if (!lt)
        return -1;
    void *ws = mmk_scratch(dev, MMK_SCRATCH_GEMM_WORKSPACE, kWorkspaceBytes, err);
    if (!ws)
        return -1;
    PlanKey k{dev, g->M, g->N, g->K, (int)g->ab_dtype, (int)g->y_dtype, (int)g->bias_dtype, g->bias != nullptr,
              g->beta != 0.f, mode, g->lda, g->ldw, g->ldy};
    Plan plan;
    {
        std::lock_guard<std::mutex> lock(g_plans_mu);
        auto it = g_plans.find(k);
        if (it == g_plans.end()) {
            Plan p;
            if (build_plan(lt, k, g, &p, err)) {
                if (p.desc)
                    cublasLtMatmulDescDestroy(p.desc);
                if (p.la)
                    cublasLtMatrixLayoutDestroy(p.la);
                if (p.lb)
                    cublasLtMatrixLayoutDestroy(p.lb);
                if (p.lc)
                    cublasLtMatrixLayoutDestroy(p.lc);
                return -1;
            }
            it = g_plans.emplace(k, p).first;
        }
        plan = it->second;
    }
    if (g->bias)
        LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias),
               "BIAS_POINTER");
    if (mode == MODE_OUTER_VEC) {
        LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_w, sizeof scale_w),
               "A_SCALE_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a, sizeof scale_a),
               "B_SCALE_POINTER");
    }
    float alpha_f = 1.f, beta_f = g->beta;
    int32_t alpha_i = 1, beta_i = (int32_t)g->beta;
    bool int_scale = g->ab_dtype == MM_I8 && mode == MODE_PLAIN;
    const void *alpha = int_scale ? (const void *)&alpha_i : (const void *)&alpha_f;
    const void *beta = int_scale ? (const void *)&beta_i : (const void *)&beta_f;
    LT_TRY(cublasLtMatmul(lt, plan.desc, alpha, g->w, plan.la, g->a, plan.lb, beta, g->y, plan.lc, g->y, plan.lc,
                          &plan.algo, ws, kWorkspaceBytes, s),
           "matmul");
    return 0;
}

/* ------------------------------------------------------------------ int8 epilogue */

/* One thread per 8 consecutive outputs of a row (N % 8 == 0 path). */
__global__ void k_dequant_i32_v8(int M, int N, const int32_t *__restrict__ acc, int64_t ldacc,
                                 const float *__restrict__ sx, const float *__restrict__ sw,
                                 const bf16 *__restrict__ bias, bf16 *__restrict__ y, int64_t ldy,
                                 const bf16 *__restrict__ gate, int64_t ld_gate, const int32_t *__restrict__ mod_idx)
{
    int64_t per_row = N / 8;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)M * per_row)
        return;
    int r = (int)(i / per_row);
    int n0 = (int)(i % per_row) * 8;
    const int4 *ap = reinterpret_cast<const int4 *>(acc + (int64_t)r * ldacc + n0);
    int4 a0 = ap[0], a1 = ap[1];
    int av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    float4 w0 = *reinterpret_cast<const float4 *>(sw + n0), w1 = *reinterpret_cast<const float4 *>(sw + n0 + 4);
    float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    float rs = sx[r];
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        o[j] = (float)av[j] * (rs * wv[j]);
    if (bias) {
        uint4 bv = *reinterpret_cast<const uint4 *>(bias + n0);
        const bf16 *b = reinterpret_cast<const bf16 *>(&bv);
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] += __bfloat162float(b[j]);
    }
    bf16 *yp = y + (int64_t)r * ldy + n0;
    uint4 out;
    bf16 *ov = reinterpret_cast<bf16 *>(&out);
    if (gate) {
        uint4 gv = *reinterpret_cast<const uint4 *>(gate + (int64_t)mod_idx[r] * ld_gate + n0);
        uint4 xv = *reinterpret_cast<const uint4 *>(yp);
        const bf16 *g = reinterpret_cast<const bf16 *>(&gv);
        const bf16 *x = reinterpret_cast<const bf16 *>(&xv);
#pragma unroll
        for (int j = 0; j < 8; j++)
            ov[j] = __float2bfloat16_rn(
                fmaf(__bfloat162float(g[j]), mmk_round_bf16(o[j]), __bfloat162float(x[j])));
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            ov[j] = __float2bfloat16_rn(o[j]);
    }
    *reinterpret_cast<uint4 *>(yp) = out;
}

__global__ void k_dequant_i32(int M, int N, const int32_t *__restrict__ acc, int64_t ldacc,
                              const float *__restrict__ sx, const float *__restrict__ sw,
                              const bf16 *__restrict__ bias, bf16 *__restrict__ y, int64_t ldy,
                              const bf16 *__restrict__ gate, int64_t ld_gate, const int32_t *__restrict__ mod_idx)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)M * N)
        return;
    int r = (int)(i / N), n = (int)(i % N);
    float o = (float)acc[(int64_t)r * ldacc + n] * (sx[r] * sw[n]);
    if (bias)
        o += __bfloat162float(bias[n]);
    bf16 *yp = y + (int64_t)r * ldy + n;
    if (gate)
        *yp = __float2bfloat16_rn(fmaf(__bfloat162float(gate[(int64_t)mod_idx[r] * ld_gate + n]), mmk_round_bf16(o),
                                       __bfloat162float(*yp)));
    else
        *yp = __float2bfloat16_rn(o);
}

/* Gated residual for the outer-vector path, whose GEMM already wrote o. */
__global__ void k_gated_from(int M, int N, const bf16 *__restrict__ o, int64_t ldo, bf16 *__restrict__ y, int64_t ldy,
                             const bf16 *__restrict__ gate, int64_t ld_gate, const int32_t *__restrict__ mod_idx)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)M * N)
        return;
    int r = (int)(i / N), n = (int)(i % N);
    bf16 *yp = y + (int64_t)r * ldy + n;
    *yp = __float2bfloat16_rn(fmaf(__bfloat162float(gate[(int64_t)mod_idx[r] * ld_gate + n]),
                                   __bfloat162float(o[(int64_t)r * ldo + n]), __bfloat162float(*yp)));
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

int qlinear_outer(int dev, cudaStream_t s, const mmk_qlinear *q, mm_error *err)
{
    /* bf16 output straight from cuBLASLt; the gated residual needs o first. */
    bf16 *o = (bf16 *)q->y;
    int64_t ldo = q->ldy;
    if (q->gate) {
        o = (bf16 *)mmk_scratch(dev, MMK_SCRATCH_GEMM_I32, (size_t)q->M * q->N * sizeof(bf16), err);
        if (!o)
            return -1;
        ldo = q->N;
    }
    mmk_gemm g = {q->M, q->N, q->K, MM_I8, q->xq, q->ldx, q->wq, q->ldw, q->bias, MM_BF16, o, ldo, MM_BF16, 0.f};
    if (gemm_run(dev, s, &g, MODE_OUTER_VEC, q->sw, q->sx, err))
        return -1;
    if (q->gate) {
        int64_t n = (int64_t)q->M * q->N;
        k_gated_from<<<mmk_blocks(n, 256), 256, 0, s>>>(q->M, q->N, o, ldo, (bf16 *)q->y, q->ldy,
                                                         (const bf16 *)q->gate, q->ld_gate, q->mod_idx);
        return mmk_launched(err, "k_gated_from");
    }
    return 0;
}

/* Read on every call (cheap next to a GEMM) so a benchmark can switch. */
int qlinear_mode()
{
    const char *e = getenv("MMH3_QLINEAR");
    return (e && strcmp(e, "outer") == 0) ? MODE_OUTER_VEC : MODE_PLAIN;
}

} // namespace

extern "C" int mmk_gemm_run(int dev, mmk_stream s, const mmk_gemm *g, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    return gemm_run(dev, s, g, MODE_PLAIN, nullptr, nullptr, err);
}

extern "C" int mmk_qlinear_i8(int dev, mmk_stream s, const mmk_qlinear *q, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (q->M <= 0 || q->N <= 0 || q->K <= 0)
        return mm_fail(err, "int8 linear sizes must be positive, got M=%d N=%d K=%d", q->M, q->N, q->K);
    if (q->gate && !q->mod_idx)
        return mm_fail(err, "int8 linear: a gate table needs mod_idx");
    if (qlinear_mode() == MODE_OUTER_VEC)
        return qlinear_outer(dev, s, q, err);

    /* Chunk rows so the int32 intermediate stays under ~512 MiB. */
    int64_t rows_per = ((int64_t)512 << 20) / ((int64_t)q->N * 4);
    rows_per = rows_per < 128 ? 128 : rows_per / 128 * 128;
    if (rows_per > q->M)
        rows_per = q->M;
    int32_t *acc = (int32_t *)mmk_scratch(dev, MMK_SCRATCH_GEMM_I32, (size_t)rows_per * q->N * 4, err);
    if (!acc)
        return -1;
    bool vec = q->N % 8 == 0 && q->ldy % 8 == 0 && aligned16(q->y) && aligned16(q->sw) && (!q->bias || aligned16(q->bias)) &&
               (!q->gate || (q->ld_gate % 8 == 0 && aligned16(q->gate)));
    for (int64_t r0 = 0; r0 < q->M; r0 += rows_per) {
        int m = (int)(q->M - r0 < rows_per ? q->M - r0 : rows_per);
        mmk_gemm g = {m, q->N, q->K, MM_I8, q->xq + r0 * q->ldx, q->ldx, q->wq, q->ldw, nullptr, MM_BF16, acc,
                      (int64_t)q->N, MM_I32, 0.f};
        if (gemm_run(dev, s, &g, MODE_PLAIN, nullptr, nullptr, err))
            return -1;
        const int32_t *mi = q->mod_idx ? q->mod_idx + r0 : nullptr;
        bf16 *y = (bf16 *)q->y + r0 * q->ldy;
        if (vec) {
            int64_t n = (int64_t)m * (q->N / 8);
            k_dequant_i32_v8<<<mmk_blocks(n, 256), 256, 0, s>>>(m, q->N, acc, q->N, q->sx + r0, q->sw,
                                                                (const bf16 *)q->bias, y, q->ldy,
                                                                (const bf16 *)q->gate, q->ld_gate, mi);
            if (mmk_launched(err, "k_dequant_i32_v8"))
                return -1;
        } else {
            int64_t n = (int64_t)m * q->N;
            k_dequant_i32<<<mmk_blocks(n, 256), 256, 0, s>>>(m, q->N, acc, q->N, q->sx + r0, q->sw,
                                                             (const bf16 *)q->bias, y, q->ldy, (const bf16 *)q->gate,
                                                             q->ld_gate, mi);
            if (mmk_launched(err, "k_dequant_i32"))
                return -1;
        }
    }
    return 0;
}

static const mmk_kernel_entry g_kernels[] = {
    {"dequant_i32_v8", (const void *)k_dequant_i32_v8, 80},
    {"dequant_i32", (const void *)k_dequant_i32, 80},
    {"gated_from", (const void *)k_gated_from, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_gemm(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
