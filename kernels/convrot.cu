/* The ConvRot activation path (spec dit.md §3.2-3.3): optional RMSNorm +
 * modulation or SwiGLU, block-256 regular-Hadamard rotation, per-row absmax,
 * int8 quantization — one pass over the row, one block per row.
 *
 * Layout of the work: 16 threads per group of 256 channels, 16 values each.
 * H256 = H4⊗H4⊗H4⊗H4 acts on the four base-4 digits of the channel index
 * (d3 d2 d1 d0); the butterfly stage with stride 4^s mixes digit s. A thread
 * first holds 16 consecutive channels (digits d1 d0 vary) and does the
 * stride-1 and stride-4 stages in registers; a padded shared-memory transpose
 * then gives it the 16 channels that share its (d1 d0) (digits d3 d2 vary),
 * and it does the stride-16 and stride-64 stages in registers too.
 *
 * Every stage computes out[d] = 0.5·(((±a0 ± a1) ± a2) ± a3) in fp32, in
 * that order, with the signs of row d of H4 = [[1,1,1,-1],[1,1,-1,1],
 * [1,-1,1,1],[-1,1,1,1]]. The rotated value is rounded to bf16 (the
 * reference rotates with a bf16 GEMM), so the rotation's own fp32 summation
 * order almost never shows in the output.
 */
#include "kernels/common.cuh"

namespace {

const int kMaxGroups = 64; /* K ≤ 16384 */

__device__ __forceinline__ void h4(float &a0, float &a1, float &a2, float &a3)
{
    float o0 = 0.5f * (a0 + a1 + a2 - a3);
    float o1 = 0.5f * (a0 + a1 - a2 + a3);
    float o2 = 0.5f * (a0 - a1 + a2 + a3);
    float o3 = 0.5f * (-a0 + a1 + a2 + a3);
    a0 = o0;
    a1 = o1;
    a2 = o2;
    a3 = o3;
}

/* The two butterfly stages over a thread's 16 values v[b], b = 4·hi + lo:
 * stride 1 mixes lo, stride 4 mixes hi. */
__device__ __forceinline__ void h16(float v[16])
{
#pragma unroll
    for (int hi = 0; hi < 4; hi++)
        h4(v[4 * hi + 0], v[4 * hi + 1], v[4 * hi + 2], v[4 * hi + 3]);
#pragma unroll
    for (int lo = 0; lo < 4; lo++)
        h4(v[lo], v[4 + lo], v[8 + lo], v[12 + lo]);
}

__device__ __forceinline__ void load16_bf16(const bf16 *p, float v[16])
{
    uint4 a = reinterpret_cast<const uint4 *>(p)[0], b = reinterpret_cast<const uint4 *>(p)[1];
    const bf16 *x = reinterpret_cast<const bf16 *>(&a), *y = reinterpret_cast<const bf16 *>(&b);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = __bfloat162float(x[i]);
        v[8 + i] = __bfloat162float(y[i]);
    }
}

/* blockDim.x = 16 · (K / 256) rounded up to whole warps; thread (g, t) owns
 * channels g·256 + 16t .. +15; threads past the last group only take part
 * in the reductions. */
__global__ void k_convrot_quant(int K, int pre, const bf16 *__restrict__ x, int64_t ldx,
                                const bf16 *__restrict__ norm_w, float eps, const bf16 *__restrict__ shift,
                                const bf16 *__restrict__ scale, int64_t ld_mod, const int32_t *__restrict__ mod_idx,
                                int8_t *__restrict__ q, int64_t ldq, float *__restrict__ sq)
{
    __shared__ float scratch[32];
    extern __shared__ float tr[]; /* [groups][16][17] */
    int64_t r = blockIdx.x;
    int g = threadIdx.x >> 4, t = threadIdx.x & 15;
    int c0 = g * 256 + t * 16;
    const bf16 *xr = x + r * ldx;
    bool active = c0 < K;
    float v[16];

    if (!active) {
#pragma unroll
        for (int i = 0; i < 16; i++)
            v[i] = 0.f;
        if (pre == MMK_PRE_RMSNORM_MOD)
            mmk_block_sum(0.f, scratch);
    } else if (pre == MMK_PRE_SWIGLU) {
        float u[16];
        load16_bf16(xr + c0, v);
        load16_bf16(xr + K + c0, u);
#pragma unroll
        for (int i = 0; i < 16; i++)
            v[i] = mmk_round_bf16(mmk_silu(v[i]) * u[i]);
    } else {
        load16_bf16(xr + c0, v);
        if (pre == MMK_PRE_RMSNORM_MOD) {
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++)
                ss += v[i] * v[i];
            ss = mmk_block_sum(ss, scratch);
            float inv = rsqrtf(ss / (float)K + eps);
            float w[16], sh[16], sc[16];
            if (norm_w)
                load16_bf16(norm_w + c0, w);
            if (shift) {
                int64_t m = (int64_t)mod_idx[r] * ld_mod;
                load16_bf16(shift + m + c0, sh);
                load16_bf16(scale + m + c0, sc);
            }
#pragma unroll
            for (int i = 0; i < 16; i++) {
                float n = v[i] * inv;
                if (norm_w)
                    n *= w[i];
                if (shift)
                    n = n * (1.f + sc[i]) + sh[i];
                v[i] = mmk_round_bf16(n);
            }
        }
    }

    h16(v); /* digits d0, d1 */
    float *my = tr + g * (16 * 17);
    if (active) {
#pragma unroll
        for (int b = 0; b < 16; b++)
            my[t * 17 + b] = v[b];
    }
    __syncthreads();
    if (active) {
        /* Now hold channels a·16 + t, a = 4·d3 + d2. */
#pragma unroll
        for (int a = 0; a < 16; a++)
            v[a] = my[a * 17 + t];
        h16(v); /* digits d2, d3 */
    }

    float amax = 0.f;
#pragma unroll
    for (int a = 0; a < 16; a++) {
        v[a] = mmk_round_bf16(v[a]);
        amax = fmaxf(amax, fabsf(v[a]));
    }
    amax = mmk_block_max(amax, scratch);
    float s = amax > 0.f ? amax / 127.f : 1.f;
    if (!active)
        return;
    int8_t *qr = q + r * ldq + g * 256 + t;
#pragma unroll
    for (int a = 0; a < 16; a++) {
        float qv = rintf(v[a] / s);
        qv = fminf(fmaxf(qv, -127.f), 127.f);
        qr[a * 16] = (int8_t)qv;
    }
    if (threadIdx.x == 0)
        sq[r] = s;
}

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

extern "C" int mmk_convrot_quant_run(int dev, mmk_stream s, const mmk_convrot_quant *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->K <= 0 || a->K % 256 || a->K / 256 > kMaxGroups)
        return mm_fail(err, "ConvRot quantization: K=%d must be a positive multiple of 256 up to %d", a->K,
                       256 * kMaxGroups);
    if (a->pre != MMK_PRE_NONE && a->pre != MMK_PRE_RMSNORM_MOD && a->pre != MMK_PRE_SWIGLU)
        return mm_fail(err, "ConvRot quantization: unknown pre-op %d", a->pre);
    if (a->pre == MMK_PRE_RMSNORM_MOD && ((a->shift == nullptr) != (a->scale == nullptr) || (a->shift && !a->mod_idx)))
        return mm_fail(err, "ConvRot quantization: modulation needs shift, scale and mod_idx together");
    /* 16-byte vector loads: rows, norm weight and modulation rows must be aligned. */
    if (!al16(a->x) || a->ldx % 8 || (a->norm_w && !al16(a->norm_w)) ||
        (a->shift && (!al16(a->shift) || !al16(a->scale) || a->ld_mod % 8)))
        return mm_fail(err, "ConvRot quantization: inputs must be 16-byte aligned with row strides multiple of 8");
    if (a->rows == 0)
        return 0;
    int groups = a->K / 256;
    int threads = (groups * 16 + 31) / 32 * 32;
    size_t smem = (size_t)groups * 16 * 17 * sizeof(float);
    if (smem > 48 * 1024)
        MMK_TRY(cudaFuncSetAttribute(k_convrot_quant, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
                "raising the shared-memory limit of k_convrot_quant");
    k_convrot_quant<<<a->rows, threads, smem, s>>>(a->K, a->pre, (const bf16 *)a->x, a->ldx,
                                                        (const bf16 *)a->norm_w, a->eps, (const bf16 *)a->shift,
                                                        (const bf16 *)a->scale, a->ld_mod, a->mod_idx, a->q, a->ldq,
                                                        a->s);
    return mmk_launched(err, "k_convrot_quant");
}

static const mmk_kernel_entry g_kernels[] = {
    {"convrot_quant", (const void *)k_convrot_quant, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_convrot(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
