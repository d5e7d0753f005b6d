/* GEMMs through cuBLASLt, and the ConvRot int8 linear's epilogue.
 *
 * Row-major y = op(a)·op(w) is, in cuBLASLt's column-major terms,
 * yᵀ = op(w)ᵀ·op(a)ᵀ: w is cuBLASLt's A and a its B. A Linear weight w[N, K]
 * (trans_w = 1) with row-major activations gives the "TN" layout, the one
 * the int8 tensor-core (IMMA) kernels require. Plans (descriptors, layouts
 * and the heuristic's algorithm) are built once per shape and cached.
 *
 * Output dtypes cuBLASLt has no kernel for (bf16 inputs → f16 out, say), and
 * an f32 bias with a 16-bit output (cuBLASLt wants the bias in D's type),
 * go through an f32 scratch result and one conversion, so the value is still
 * rounded once.
 *
 * The int8 linear needs acc·(sx[r]·sw[n]) with a scale per row AND per
 * column; cuBLASLt's int8 path scales by a scalar or one vector only, so it
 * writes int32 and a fused kernel applies both scales, the optional bias and
 * the gated residual add in one pass. M is processed in chunks so the int32
 * intermediate stays bounded. MMH3_QLINEAR=outer asks cuBLASLt for its
 * per-row × per-column ("outer vector") scaling on int8 instead, where the
 * library has such a kernel; the benchmark tries both.
 */
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <string.h>
#include <tuple>

#include "kernels/common.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

namespace {

const size_t kWorkspaceBytes = size_t(32) << 20;

enum { MODE_PLAIN = 0, MODE_OUTER_VEC = 1 };

struct PlanKey {
    int dev, M, N, K, batch, ab, y, bias_t, has_bias, beta, mode, ta, tw, align;
    int64_t lda, ldw, ldy, sa, sw, sy;
    bool operator<(const PlanKey &o) const
    {
        return std::tie(dev, M, N, K, batch, ab, y, bias_t, has_bias, beta, mode, ta, tw, align, lda, ldw, ldy, sa, sw,
                        sy) < std::tie(o.dev, o.M, o.N, o.K, o.batch, o.ab, o.y, o.bias_t, o.has_bias, o.beta, o.mode,
                                       o.ta, o.tw, o.align, o.lda, o.ldw, o.ldy, o.sa, o.sw, o.sy);
    }
};

struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo;
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

#define LT_TRY(call, what)                                                                                        \
    do {                                                                                                          \
        cublasStatus_t st_ = (call);                                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                         \
            return mm_fail(err, "cuBLASLt %s: %s", what, cublasLtGetStatusString(st_));                          \
    } while (0)

int alignment(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    return (u & 15) == 0 ? 16 : (u & 7) == 0 ? 8 : (u & 3) == 0 ? 4 : (u & 1) == 0 ? 2 : 1;
}

/* One GEMM exactly as cuBLASLt runs it (no dtype emulation here). */
struct LtGemm {
    int M, N, K, batch;
    mm_dtype ab, y;
    const void *a, *w, *bias;
    mm_dtype bias_t;
    void *out;
    int64_t lda, ldw, ldy, sa, sw, sy;
    int ta, tw;
    float alpha, beta;
    int mode;
    const float *scale_w, *scale_a; /* MODE_OUTER_VEC */
};

void destroy_plan(Plan &p)
{
    if (p.desc)
        cublasLtMatmulDescDestroy(p.desc);
    if (p.la)
        cublasLtMatrixLayoutDestroy(p.la);
    if (p.lb)
        cublasLtMatrixLayoutDestroy(p.lb);
    if (p.lc)
        cublasLtMatrixLayoutDestroy(p.lc);
}

int set_batch(cublasLtMatrixLayout_t l, int batch, int64_t stride, mm_error *err)
{
    if (batch <= 1)
        return 0;
    int32_t b = batch;
    LT_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), "BATCH_COUNT");
    LT_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
           "STRIDED_BATCH_OFFSET");
    return 0;
}

int build_plan(cublasLtHandle_t lt, const LtGemm &g, Plan *p, mm_error *err)
{
    bool is_i8 = g.ab == MM_I8;
    cublasComputeType_t compute = is_i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F;
    cudaDataType_t scale_t = (is_i8 && g.mode == MODE_PLAIN) ? CUDA_R_32I : CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, compute, scale_t), "creating a matmul descriptor");
    /* cuBLASLt's A is w, its B is a (see the top of the file). */
    cublasOperation_t opA = g.tw ? CUBLAS_OP_T : CUBLAS_OP_N, opB = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB), "TRANSB");
    if (g.bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
        int32_t bt = cuda_type(g.bias_t);
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "BIAS_DATA_TYPE");
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
               "BIAS_POINTER");
    }
    if (g.mode == MODE_OUTER_VEC) {
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode),
               "A_SCALE_MODE");
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode),
               "B_SCALE_MODE");
    }
    cudaDataType_t ab = cuda_type(g.ab), yt = cuda_type(g.y);
    /* w: N×K as cuBLASLt's A (stored K×N col-major when transposed) */
    if (g.tw)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)g.K, (uint64_t)g.N, g.ldw), "layout of w");
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)g.N, (uint64_t)g.K, g.ldw), "layout of w");
    if (g.ta)
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)g.M, (uint64_t)g.K, g.lda), "layout of a");
    else
        LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)g.K, (uint64_t)g.M, g.lda), "layout of a");
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, yt, (uint64_t)g.N, (uint64_t)g.M, g.ldy), "layout of y");
    if (set_batch(p->la, g.batch, g.sw, err) || set_batch(p->lb, g.batch, g.sa, err) ||
        set_batch(p->lc, g.batch, g.sy, err))
        return -1;

    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "creating a preference");
    size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    uint32_t al_a = alignment(g.w), al_b = alignment(g.a), al_c = alignment(g.out);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulHeuristicResult_t res[1];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        return mm_fail(err,
                       "cuBLASLt has no algorithm for a %s GEMM M=%d N=%d K=%d batch=%d (lda=%lld ldw=%lld ldy=%lld, "
                       "trans a/w %d/%d, out %s%s%s)%s%s",
                       mm_dtype_name(g.ab), g.M, g.N, g.K, g.batch, (long long)g.lda, (long long)g.ldw,
                       (long long)g.ldy, g.ta, g.tw, mm_dtype_name(g.y), g.bias ? ", bias" : "",
                       g.mode == MODE_OUTER_VEC ? ", outer-vector scales" : "",
                       st != CUBLAS_STATUS_SUCCESS ? ": " : "",
                       st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st) : "");
    p->algo = res[0].algo;
    return 0;
}

int lt_run(int dev, cudaStream_t s, const LtGemm &g, mm_error *err)
{
    cublasLtHandle_t lt = (cublasLtHandle_t)mmk_cublaslt(dev, err);
    if (!lt)
        return -1;
    void *ws = mmk_scratch(dev, MMK_SCRATCH_GEMM_WORKSPACE, kWorkspaceBytes, err);
    if (!ws)
        return -1;
    int align = alignment(g.a) * 1000 + alignment(g.w) * 100 + alignment(g.out) * 10 + (g.bias ? alignment(g.bias) : 0);
    PlanKey k{dev,    g.M,         g.N,   g.K,   g.batch, (int)g.ab, (int)g.y, (int)g.bias_t, g.bias != nullptr,
              g.beta != 0.f, g.mode, g.ta, g.tw, align,   g.lda,     g.ldw,    g.ldy,         g.sa,
              g.sw,   g.sy};
    Plan plan;
    {
        std::lock_guard<std::mutex> lock(g_plans_mu);
        auto it = g_plans.find(k);
        if (it == g_plans.end()) {
            Plan p;
            if (build_plan(lt, g, &p, err)) {
                destroy_plan(p);
                return -1;
            }
            it = g_plans.emplace(k, p).first;
        }
        plan = it->second;
        /* Per-call pointers live in the shared descriptor: set them under the
         * lock, and enqueue before another thread can change them. */
        if (g.bias)
            LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
                   "BIAS_POINTER");
        if (g.mode == MODE_OUTER_VEC) {
            LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.scale_w,
                                                  sizeof g.scale_w),
                   "A_SCALE_POINTER");
            LT_TRY(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.scale_a,
                                                  sizeof g.scale_a),
                   "B_SCALE_POINTER");
        }
        float alpha_f = g.alpha, beta_f = g.beta;
        int32_t alpha_i = (int32_t)g.alpha, beta_i = (int32_t)g.beta;
        bool int_scale = g.ab == MM_I8 && g.mode == MODE_PLAIN;
        const void *alpha = int_scale ? (const void *)&alpha_i : (const void *)&alpha_f;
        const void *beta = int_scale ? (const void *)&beta_i : (const void *)&beta_f;
        LT_TRY(cublasLtMatmul(lt, plan.desc, alpha, g.w, plan.la, g.a, plan.lb, beta, g.out, plan.lc, g.out, plan.lc,
                              &plan.algo, ws, kWorkspaceBytes, s),
               "matmul");
    }
    return 0;
}

bool native_out(mm_dtype ab, mm_dtype y)
{
    if (ab == MM_BF16)
        return y == MM_BF16 || y == MM_F32;
    if (ab == MM_F16)
        return y == MM_F16 || y == MM_F32;
    return ab == MM_F32 && y == MM_F32;
}

mmk_view view2d(void *p, mm_dtype t, int64_t rows, int64_t cols, int64_t ld)
{
    mmk_view v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.dtype = t;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.stride[0] = ld;
    v.stride[1] = 1;
    return v;
}

/* ------------------------------------------------------------------ int8 epilogue */

template <typename TY> __device__ __forceinline__ void st_y(TY *p, float v);
template <> __device__ __forceinline__ void st_y<bf16>(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ void st_y<__half>(__half *p, float v) { *p = __float2half_rn(v); }
template <> __device__ __forceinline__ void st_y<float>(float *p, float v) { *p = v; }

/* The value a TY tensor would hold. */
template <typename TY> __device__ __forceinline__ float round_y(float v);
template <> __device__ __forceinline__ float round_y<bf16>(float v) { return mmk_round_bf16(v); }
template <> __device__ __forceinline__ float round_y<__half>(float v) { return __half2float(__float2half_rn(v)); }
template <> __device__ __forceinline__ float round_y<float>(float v) { return v; }

/* One thread per 8 consecutive outputs of a row. */
template <typename TY>
__global__ void k_dequant_i32(int M, int N, const int32_t *__restrict__ acc, int64_t ldacc,
                              const float *__restrict__ sx, const float *__restrict__ sw,
                              const float *__restrict__ bias, TY *__restrict__ y, int64_t ldy,
                              const float *__restrict__ gate, int64_t ld_gate, const int32_t *__restrict__ mod_idx,
                              const float *__restrict__ add, int64_t ld_add, int vec)
{
    int64_t per_row = (N + 7) / 8;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)M * per_row)
        return;
    int r = (int)(i / per_row);
    int n0 = (int)(i % per_row) * 8;
    int cnt = N - n0 < 8 ? N - n0 : 8;
    int av[8];
    float wv[8];
    const int32_t *ap = acc + (int64_t)r * ldacc + n0;
    if (vec && cnt == 8) {
        int4 a0 = reinterpret_cast<const int4 *>(ap)[0], a1 = reinterpret_cast<const int4 *>(ap)[1];
        av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w, av[4] = a1.x, av[5] = a1.y, av[6] = a1.z, av[7] = a1.w;
    } else {
        for (int j = 0; j < 8; j++)
            av[j] = j < cnt ? ap[j] : 0;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        wv[j] = j < cnt ? sw[n0 + j] : 0.f;
    float rs = sx[r];
    TY *yp = y + (int64_t)r * ldy + n0;
    const float *gp = gate ? gate + (int64_t)mod_idx[r] * ld_gate + n0 : nullptr;
    const float *dp = add ? add + (int64_t)r * ld_add + n0 : nullptr;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j >= cnt)
            break;
        float o = (float)av[j] * __fmul_rn(rs, wv[j]);
        if (bias)
            o = __fadd_rn(o, bias[n0 + j]);
        if (dp)
            o = __fadd_rn(o, dp[j]);
        if (gp) {
            float x = mmk_to_f32(yp[j]);
            st_y<TY>(yp + j, __fadd_rn(x, __fmul_rn(gp[j], round_y<TY>(o))));
        } else {
            st_y<TY>(yp + j, o);
        }
    }
}

/* Gated residual for the outer-vector path, whose GEMM already wrote o. */
__global__ void k_gated_from(int M, int N, const bf16 *__restrict__ o, int64_t ldo, bf16 *__restrict__ y, int64_t ldy,
                             const float *__restrict__ gate, int64_t ld_gate, const int32_t *__restrict__ mod_idx)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)M * N)
        return;
    int r = (int)(i / N), n = (int)(i % N);
    bf16 *yp = y + (int64_t)r * ldy + n;
    *yp = __float2bfloat16_rn(__fadd_rn(__bfloat162float(*yp), __fmul_rn(gate[(int64_t)mod_idx[r] * ld_gate + n],
                                                                          __bfloat162float(o[(int64_t)r * ldo + n]))));
}

/* Read on every call (cheap next to a GEMM) so a benchmark can switch. */
int qlinear_mode()
{
    const char *e = getenv("MMH3_QLINEAR");
    return (e && strcmp(e, "outer") == 0) ? MODE_OUTER_VEC : MODE_PLAIN;
}

int qlinear_outer(int dev, cudaStream_t s, const mmk_qlinear *q, mm_error *err)
{
    if (q->y_dtype != MM_BF16 || q->bias)
        return mm_fail(err, "int8 linear (outer-vector path): bf16 output without bias only");
    bf16 *o = (bf16 *)q->y;
    int64_t ldo = q->ldy;
    if (q->gate) {
        o = (bf16 *)mmk_scratch(dev, MMK_SCRATCH_GEMM_I32, (size_t)q->M * q->N * sizeof(bf16), err);
        if (!o)
            return -1;
        ldo = q->N;
    }
    LtGemm g = {q->M, q->N, q->K, 1, MM_I8, MM_BF16, q->xq, q->wq, nullptr, MM_F32, o, q->ldx, q->ldw, ldo, 0, 0, 0,
                0, 1, 1.f, 0.f, MODE_OUTER_VEC, q->sw, q->sx};
    if (lt_run(dev, s, g, err))
        return -1;
    if (q->gate) {
        int64_t n = (int64_t)q->M * q->N;
        k_gated_from<<<mmk_blocks(n, 256), 256, 0, s>>>(q->M, q->N, o, ldo, (bf16 *)q->y, q->ldy, q->gate, q->ld_gate,
                                                         q->mod_idx);
        return mmk_launched(err, "k_gated_from");
    }
    return 0;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

/* ====================================================================== API */

extern "C" int mmk_gemm_ex_run(int dev, mmk_stream s, const mmk_gemm_ex *g, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 1)
        return mm_fail(err, "GEMM sizes must be non-negative (M=%d N=%d K=%d batch=%d)", g->M, g->N, g->K, g->batch);
    if (g->M == 0 || g->N == 0)
        return 0;
    if (g->ab_dtype == MM_I8) {
        if (g->y_dtype != MM_I32 || g->bias || g->alpha != 1.f || !g->trans_w || g->trans_a)
            return mm_fail(err, "int8 GEMM: only y (i32) = a · wᵀ (+ beta·y), no bias, no alpha");
        if (g->K % 4 || g->lda % 4 || g->ldw % 4 || g->ldy % 4)
            return mm_fail(err, "int8 GEMM needs K and all strides multiples of 4 (K=%d lda=%lld ldw=%lld ldy=%lld)",
                           g->K, (long long)g->lda, (long long)g->ldw, (long long)g->ldy);
    } else if (!mmk_is_float(g->ab_dtype) || !mmk_is_float(g->y_dtype)) {
        return mm_fail(err, "GEMM: inputs %s, output %s not supported", mm_dtype_name(g->ab_dtype),
                       mm_dtype_name(g->y_dtype));
    }
    if (g->K == 0) {
        /* y = beta·y (+ bias): no product; keep it simple and rare */
        return mm_fail(err, "GEMM with K = 0 is not supported on CUDA");
    }
    LtGemm lg = {g->M,  g->N,   g->K,   g->batch, g->ab_dtype, g->y_dtype, g->a, g->w, g->bias, g->bias_dtype,
                 g->y,  g->lda, g->ldw, g->ldy,   g->batch_a,  g->batch_w, g->batch_y, g->trans_a, g->trans_w,
                 g->alpha, g->beta, MODE_PLAIN, nullptr, nullptr};
    if (g->bias && !mmk_is_float(g->bias_dtype))
        return mm_fail(err, "GEMM: bias dtype %s not supported", mm_dtype_name(g->bias_dtype));
    /* cuBLASLt adds a bias of D's own dtype only */
    bool direct = g->ab_dtype == MM_I8 || (native_out(g->ab_dtype, g->y_dtype) && (!g->bias || g->bias_dtype == g->y_dtype));
    if (direct)
        return lt_run(dev, s, lg, err);

    /* Through an f32 scratch result: y32 = beta·f32(y) + alpha·a·w + bias, then one rounding into y. */
    size_t per = (size_t)g->M * g->N;
    float *y32 = (float *)mm_cuda_malloc(dev, per * g->batch * sizeof(float), err);
    if (!y32)
        return -1;
    int rc = 0;
    float *b32 = nullptr;
    if (g->bias && g->bias_dtype != MM_F32) {
        b32 = (float *)mm_cuda_malloc(dev, (size_t)g->N * sizeof(float), err);
        if (!b32) {
            mm_cuda_free(dev, y32);
            return -1;
        }
        mmk_ew cp;
        memset(&cp, 0, sizeof cp);
        cp.op = MMK_EW_COPY;
        cp.y = view2d(b32, MM_F32, 1, g->N, g->N);
        cp.a = view2d((void *)g->bias, g->bias_dtype, 1, g->N, g->N);
        rc = mmk_ew_run(dev, s, &cp, err);
        lg.bias = b32;
    }
    lg.bias_t = MM_F32;
    for (int b = 0; b < g->batch && rc == 0; b++) {
        mmk_view yv = view2d((char *)g->y + (size_t)b * g->batch_y * mm_dtype_bits(g->y_dtype) / 8, g->y_dtype, g->M,
                             g->N, g->ldy);
        mmk_view sv = view2d(y32 + b * per, MM_F32, g->M, g->N, g->N);
        if (g->beta != 0.f) {
            mmk_ew cp;
            memset(&cp, 0, sizeof cp);
            cp.op = MMK_EW_COPY;
            cp.y = sv;
            cp.a = yv;
            rc = mmk_ew_run(dev, s, &cp, err);
        }
    }
    if (rc == 0) {
        lg.y = MM_F32;
        lg.out = y32;
        lg.ldy = g->N;
        lg.sy = (int64_t)per;
        rc = lt_run(dev, s, lg, err);
    }
    for (int b = 0; b < g->batch && rc == 0; b++) {
        mmk_ew cp;
        memset(&cp, 0, sizeof cp);
        cp.op = MMK_EW_COPY;
        cp.y = view2d((char *)g->y + (size_t)b * g->batch_y * mm_dtype_bits(g->y_dtype) / 8, g->y_dtype, g->M, g->N,
                      g->ldy);
        cp.a = view2d(y32 + b * per, MM_F32, g->M, g->N, g->N);
        rc = mmk_ew_run(dev, s, &cp, err);
    }
    mm_cuda_free(dev, y32); /* reused only by work queued later on this stream */
    mm_cuda_free(dev, b32);
    return rc;
}

extern "C" int mmk_gemm_run(int dev, mmk_stream s, const mmk_gemm *g, mm_error *err)
{
    mmk_gemm_ex e;
    memset(&e, 0, sizeof e);
    e.M = g->M;
    e.N = g->N;
    e.K = g->K;
    e.batch = 1;
    e.ab_dtype = g->ab_dtype;
    e.y_dtype = g->y_dtype;
    e.a = g->a;
    e.lda = g->lda;
    e.w = g->w;
    e.ldw = g->ldw;
    e.trans_w = 1;
    e.y = g->y;
    e.ldy = g->ldy;
    e.bias = g->bias;
    e.bias_dtype = MM_F32;
    e.alpha = 1.f;
    e.beta = g->beta;
    return mmk_gemm_ex_run(dev, s, &e, err);
}

extern "C" int mmk_qlinear_i8(int dev, mmk_stream s, const mmk_qlinear *q, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (q->M <= 0 || q->N <= 0 || q->K <= 0)
        return q->M == 0 ? 0 : mm_fail(err, "int8 linear sizes must be positive, got M=%d N=%d K=%d", q->M, q->N, q->K);
    if (q->gate && !q->mod_idx)
        return mm_fail(err, "int8 linear: a gate table needs mod_idx");
    if (!mmk_is_float(q->y_dtype))
        return mm_fail(err, "int8 linear: output dtype %s not supported", mm_dtype_name(q->y_dtype));
    if (qlinear_mode() == MODE_OUTER_VEC && !q->add) /* cuBLASLt's scaling has no addend: the plain path takes it */
        return qlinear_outer(dev, s, q, err);

    /* Chunk rows so the int32 intermediate stays under ~512 MiB. */
    int64_t rows_per = ((int64_t)512 << 20) / ((int64_t)q->N * 4);
    rows_per = rows_per < 128 ? 128 : rows_per / 128 * 128;
    if (rows_per > q->M)
        rows_per = q->M;
    int64_t ldacc = (q->N + 3) / 4 * 4;
    int32_t *acc = (int32_t *)mmk_scratch(dev, MMK_SCRATCH_GEMM_I32, (size_t)rows_per * ldacc * 4, err);
    if (!acc)
        return -1;
    int vec = ldacc % 4 == 0;
    for (int64_t r0 = 0; r0 < q->M; r0 += rows_per) {
        int m = (int)(q->M - r0 < rows_per ? q->M - r0 : rows_per);
        mmk_gemm_ex g;
        memset(&g, 0, sizeof g);
        g.M = m;
        g.N = q->N;
        g.K = q->K;
        g.batch = 1;
        g.ab_dtype = MM_I8;
        g.y_dtype = MM_I32;
        g.a = q->xq + r0 * q->ldx;
        g.lda = q->ldx;
        g.w = q->wq;
        g.ldw = q->ldw;
        g.trans_w = 1;
        g.y = acc;
        g.ldy = ldacc;
        g.alpha = 1.f;
        if (mmk_gemm_ex_run(dev, s, &g, err))
            return -1;
        const int32_t *mi = q->mod_idx ? q->mod_idx + r0 : nullptr;
        const float *ad = q->add ? q->add + r0 * q->ld_add : nullptr;
        int64_t n = (int64_t)m * ((q->N + 7) / 8);
        size_t es = (size_t)mm_dtype_bits(q->y_dtype) / 8;
        void *y = (char *)q->y + (size_t)(r0 * q->ldy) * es;
#define MMK_DQ(TY)                                                                                                \
    k_dequant_i32<TY><<<mmk_blocks(n, 256), 256, 0, s>>>(m, q->N, acc, ldacc, q->sx + r0, q->sw, q->bias, (TY *)y, \
                                                        q->ldy, q->gate, q->ld_gate, mi, ad, q->ld_add, vec)
        if (q->y_dtype == MM_BF16)
            MMK_DQ(bf16);
        else if (q->y_dtype == MM_F16)
            MMK_DQ(__half);
        else
            MMK_DQ(float);
#undef MMK_DQ
        if (mmk_launched(err, "k_dequant_i32"))
            return -1;
    }
    (void)aligned16;
    return 0;
}

static const mmk_kernel_entry g_kernels[] = {
    {"dequant_i32_bf16", (const void *)k_dequant_i32<bf16>, 80},
    {"dequant_i32_f16", (const void *)k_dequant_i32<__half>, 80},
    {"dequant_i32_f32", (const void *)k_dequant_i32<float>, 80},
    {"gated_from", (const void *)k_gated_from, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_gemm(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
