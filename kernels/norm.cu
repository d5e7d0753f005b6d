/* Row ops over strided views: RMSNorm (+ AdaLN modulation), LayerNorm,
 * softmax, row reductions, the gated residual add, RoPE, the DiT's fused q/k
 * RMSNorm + RoPE, and GroupNorm. One block per row (a warp per head for the
 * q/k kernel, a block per group for GroupNorm); statistics in f32. The
 * arithmetic follows the CPU twins in src/backend/cpu/rowops.c term by term
 * (1/sqrtf, no fused multiply-add where they have none), so the two differ
 * only by the order of the f32 sums. */
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"

namespace {

/* ------------------------------------------------------------------ RMSNorm, modulation */

__global__ void k_rmsnorm(mmk_view x, mmk_view y, int mode, const float *__restrict__ w, float eps,
                          const float *__restrict__ scale, const float *__restrict__ shift, int64_t ld_mod,
                          const int32_t *__restrict__ idx, int64_t idx_stride)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t cols = x.shape[x.ndim - 1];
    int64_t ox = mmk_row_off(x, r), oy = mmk_row_off(y, r);
    float rs = 1.f;
    if (mode != MMK_NORM_MOD) {
        float ss = 0.f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = mmk_ld(x.p, x.dtype, ox + c);
            ss += v * v;
        }
        ss = mmk_block_sum(ss, scratch);
        rs = 1.f / sqrtf(ss / (float)cols + eps);
    }
    const float *sc = nullptr, *sh = nullptr;
    if (mode != MMK_NORM_RMS) {
        int64_t t = idx ? idx[r * idx_stride] : 0;
        sc = scale + t * ld_mod;
        sh = shift + t * ld_mod;
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = mmk_ld(x.p, x.dtype, ox + c);
        if (mode != MMK_NORM_MOD)
            v = __fmul_rn(__fmul_rn(v, rs), w ? w[c] : 1.f);
        if (mode != MMK_NORM_RMS)
            v = __fadd_rn(__fmul_rn(v, 1.f + sc[c]), sh[c]);
        mmk_st(y.p, y.dtype, oy + c, v);
    }
}

/* bf16 rows with 16-byte aligned starts and cols % 8 == 0: the same
 * arithmetic with 8-wide loads and stores. */
__global__ void k_rmsnorm_bf16x8(mmk_view x, mmk_view y, int mode, const float *__restrict__ w, float eps,
                                 const float *__restrict__ scale, const float *__restrict__ shift, int64_t ld_mod,
                                 const int32_t *__restrict__ idx, int64_t idx_stride)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t cols = x.shape[x.ndim - 1];
    const bf16 *xr = static_cast<const bf16 *>(x.p) + mmk_row_off(x, r);
    bf16 *yr = static_cast<bf16 *>(y.p) + mmk_row_off(y, r);
    float rs = 1.f;
    if (mode != MMK_NORM_MOD) {
        float ss = 0.f;
        for (int64_t c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
            uint4 v = *reinterpret_cast<const uint4 *>(xr + c);
            const bf16 *h = reinterpret_cast<const bf16 *>(&v);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float f = __bfloat162float(h[j]);
                ss += f * f;
            }
        }
        ss = mmk_block_sum(ss, scratch);
        rs = 1.f / sqrtf(ss / (float)cols + eps);
    }
    const float *sc = nullptr, *sh = nullptr;
    if (mode != MMK_NORM_RMS) {
        int64_t t = idx ? idx[r * idx_stride] : 0;
        sc = scale + t * ld_mod;
        sh = shift + t * ld_mod;
    }
    for (int64_t c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
        uint4 v = *reinterpret_cast<const uint4 *>(xr + c), out;
        const bf16 *h = reinterpret_cast<const bf16 *>(&v);
        bf16 *o = reinterpret_cast<bf16 *>(&out);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float f = __bfloat162float(h[j]);
            if (mode != MMK_NORM_MOD)
                f = __fmul_rn(__fmul_rn(f, rs), w ? w[c + j] : 1.f);
            if (mode != MMK_NORM_RMS)
                f = __fadd_rn(__fmul_rn(f, 1.f + sc[c + j]), sh[c + j]);
            o[j] = __float2bfloat16_rn(f);
        }
        *reinterpret_cast<uint4 *>(yr + c) = out;
    }
}

/* Short rows (≤ 1024, e.g. per-head q/k norms over 128 channels): a warp
 * per row, 8 rows per block. */
__global__ void k_rmsnorm_warp(mmk_view x, mmk_view y, int mode, const float *__restrict__ w, float eps,
                               const float *__restrict__ scale, const float *__restrict__ shift, int64_t ld_mod,
                               const int32_t *__restrict__ idx, int64_t idx_stride, int64_t rows)
{
    int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int64_t cols = x.shape[x.ndim - 1];
    int64_t ox = mmk_row_off(x, r), oy = mmk_row_off(y, r);
    float rs = 1.f;
    if (mode != MMK_NORM_MOD) {
        float ss = 0.f;
        for (int64_t c = lane; c < cols; c += 32) {
            float v = mmk_ld(x.p, x.dtype, ox + c);
            ss += v * v;
        }
        ss = mmk_warp_sum(ss);
        rs = 1.f / sqrtf(ss / (float)cols + eps);
    }
    const float *sc = nullptr, *sh = nullptr;
    if (mode != MMK_NORM_RMS) {
        int64_t t = idx ? idx[r * idx_stride] : 0;
        sc = scale + t * ld_mod;
        sh = shift + t * ld_mod;
    }
    for (int64_t c = lane; c < cols; c += 32) {
        float v = mmk_ld(x.p, x.dtype, ox + c);
        if (mode != MMK_NORM_MOD)
            v = __fmul_rn(__fmul_rn(v, rs), w ? w[c] : 1.f);
        if (mode != MMK_NORM_RMS)
            v = __fadd_rn(__fmul_rn(v, 1.f + sc[c]), sh[c]);
        mmk_st(y.p, y.dtype, oy + c, v);
    }
}

/* ------------------------------------------------------------------ LayerNorm, softmax */

__global__ void k_layernorm(mmk_view x, mmk_view y, const float *__restrict__ w, const float *__restrict__ b,
                            float eps)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t cols = x.shape[x.ndim - 1];
    int64_t ox = mmk_row_off(x, r), oy = mmk_row_off(y, r);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += mmk_ld(x.p, x.dtype, ox + c);
    float mean = mmk_block_sum(s, scratch) / (float)cols;
    float v2 = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = mmk_ld(x.p, x.dtype, ox + c) - mean;
        v2 += d * d;
    }
    float rs = 1.f / sqrtf(mmk_block_sum(v2, scratch) / (float)cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = __fmul_rn(__fmul_rn(mmk_ld(x.p, x.dtype, ox + c) - mean, rs), w ? w[c] : 1.f);
        mmk_st(y.p, y.dtype, oy + c, __fadd_rn(v, b ? b[c] : 0.f));
    }
}

__global__ void k_softmax(mmk_view x, mmk_view y)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t cols = x.shape[x.ndim - 1];
    int64_t ox = mmk_row_off(x, r), oy = mmk_row_off(y, r);
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, mmk_ld(x.p, x.dtype, ox + c));
    m = mmk_block_max(m, scratch);
    if (m == -INFINITY)
        m = 0.f;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(mmk_ld(x.p, x.dtype, ox + c) - m);
    s = mmk_block_sum(s, scratch);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        mmk_st(y.p, y.dtype, oy + c, expf(mmk_ld(x.p, x.dtype, ox + c) - m) / s);
}

/* ------------------------------------------------------------------ reductions */

__global__ void k_reduce_rows(mmk_view x, mmk_view y, int op)
{
    __shared__ float scratch[32];
    __shared__ int nan_seen;
    int64_t r = blockIdx.x;
    int64_t cols = x.shape[x.ndim - 1];
    int64_t ox = mmk_row_off(x, r);
    if (threadIdx.x == 0)
        nan_seen = 0;
    __syncthreads();
    float acc = op == MMK_REDUCE_MAX ? -INFINITY : op == MMK_REDUCE_MIN ? INFINITY : 0.f;
    bool nan_local = false;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = mmk_ld(x.p, x.dtype, ox + c);
        if (isnan(v))
            nan_local = true;
        switch (op) {
        case MMK_REDUCE_SUM:
        case MMK_REDUCE_MEAN: acc += v; break;
        case MMK_REDUCE_MAX: acc = fmaxf(acc, v); break;
        case MMK_REDUCE_MIN: acc = fminf(acc, v); break;
        default: acc = fmaxf(acc, fabsf(v)); break;
        }
    }
    if (nan_local)
        nan_seen = 1;
    float out;
    if (op == MMK_REDUCE_SUM || op == MMK_REDUCE_MEAN) {
        out = mmk_block_sum(acc, scratch);
        if (op == MMK_REDUCE_MEAN)
            out = cols ? out / (float)cols : __int_as_float(0x7fc00000);
    } else if (op == MMK_REDUCE_MIN) {
        out = -mmk_block_max(-acc, scratch);
    } else {
        out = mmk_block_max(acc, scratch);
    }
    if (nan_seen && op >= MMK_REDUCE_MAX)
        out = __int_as_float(0x7fc00000);
    if (threadIdx.x == 0) {
        /* y has x's leading dims: its element r in row-major order */
        mmk_st(y.p, y.dtype, y.ndim ? mmk_view_off(y, r) : 0, out);
    }
}

/* ------------------------------------------------------------------ gated residual */

__global__ void k_gated_add(mmk_view x, mmk_view y, const float *__restrict__ gate, int64_t ld_gate,
                            const int32_t *__restrict__ idx, int64_t idx_stride, int64_t n)
{
    int64_t cols = x.shape[x.ndim - 1];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        int64_t ox = mmk_row_off(x, r) + c, oy = mmk_row_off(y, r) + c;
        float g = 1.f;
        if (gate)
            g = gate[(idx ? idx[r * idx_stride] : 0) * ld_gate + c];
        mmk_st(x.p, x.dtype, ox, __fadd_rn(mmk_ld(x.p, x.dtype, ox), __fmul_rn(g, mmk_ld(y.p, y.dtype, oy))));
    }
}

__global__ void k_gated_add_bf16x8(mmk_view x, mmk_view y, const float *__restrict__ gate, int64_t ld_gate,
                                   const int32_t *__restrict__ idx, int64_t idx_stride, int64_t n8)
{
    int64_t per_row = x.shape[x.ndim - 1] / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / per_row, c = (i % per_row) * 8;
        bf16 *xp = static_cast<bf16 *>(x.p) + mmk_row_off(x, r) + c;
        const bf16 *yp = static_cast<const bf16 *>(y.p) + mmk_row_off(y, r) + c;
        uint4 xv = *reinterpret_cast<const uint4 *>(xp), yv = *reinterpret_cast<const uint4 *>(yp), out;
        const bf16 *xh = reinterpret_cast<const bf16 *>(&xv), *yh = reinterpret_cast<const bf16 *>(&yv);
        bf16 *oh = reinterpret_cast<bf16 *>(&out);
        const float *g = gate ? gate + (idx ? idx[r * idx_stride] : 0) * ld_gate + c : nullptr;
#pragma unroll
        for (int j = 0; j < 8; j++)
            oh[j] = __float2bfloat16_rn(
                __fadd_rn(__bfloat162float(xh[j]), __fmul_rn(g ? g[j] : 1.f, __bfloat162float(yh[j]))));
        *reinterpret_cast<uint4 *>(xp) = out;
    }
}

/* ------------------------------------------------------------------ 8-wide glue paths (mmk_policy.glue_vec) */

/* The video VAE's glue — f32 residual rows, fp16 activations, per-head views
 * of 64 channels 192 apart in the fused qkv rows — ran the generic kernels
 * above at a tenth of HBM speed: 2-byte accesses, a 64-bit division per row
 * or element, a block (two barriers) per 2048-wide row. These kernels move 8
 * consecutive elements per access (two float4 for f32, one uint4 for 16-bit
 * types; any float dtype per operand, a uniform branch), give a short row to
 * a group of cols/8 lanes and a long row to a warp, and index rows with
 * 32-bit divisions. Element by element the arithmetic is the generic
 * kernels' (same correctly rounded products and sums), so the gated residual
 * and RoPE are bit-identical to them; the RMSNorms only sum their squares in
 * another order (as the generic kernels already do against the CPU twin). */
const int kVecWarps = 8;

__device__ __forceinline__ void ld8(const void *p, mm_dtype t, int64_t off, float f[8])
{
    if (t == MM_F32) {
        const float4 *q = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + off);
        float4 a = q[0], b = q[1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
        return;
    }
    uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + off);
    if (t == MM_BF16) {
        const bf16 *h = reinterpret_cast<const bf16 *>(&u);
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = __bfloat162float(h[j]);
    } else {
        const __half *h = reinterpret_cast<const __half *>(&u);
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = __half2float(h[j]);
    }
}

__device__ __forceinline__ void st8(void *p, mm_dtype t, int64_t off, const float f[8])
{
    if (t == MM_F32) {
        float4 *q = reinterpret_cast<float4 *>(static_cast<float *>(p) + off);
        q[0] = make_float4(f[0], f[1], f[2], f[3]);
        q[1] = make_float4(f[4], f[5], f[6], f[7]);
        return;
    }
    uint4 u;
    if (t == MM_BF16) {
        bf16 *h = reinterpret_cast<bf16 *>(&u);
#pragma unroll
        for (int j = 0; j < 8; j++)
            h[j] = __float2bfloat16_rn(f[j]);
    } else {
        __half *h = reinterpret_cast<__half *>(&u);
#pragma unroll
        for (int j = 0; j < 8; j++)
            h[j] = __float2half_rn(f[j]);
    }
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p) + off) = u;
}

/* Eight f32 values of a weight or gate vector: one pair of float4 when the
 * host found them 16-byte aligned, else scalar loads. */
__device__ __forceinline__ void ld8_f32(const float *__restrict__ p, bool al, float f[8])
{
    if (al) {
        float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = p[j];
    }
}

/* A view's rows as the 8-wide kernels walk them: row r starts at element
 * (r / inner)·st_hi + (r % inner)·st_lo (32-bit division; the host checks
 * rows < 2^31). Built on the host, so the kernels never index a view's
 * shape or strides with a runtime dim (that copies the view to local
 * memory in every thread). */
struct VecRows {
    void *p;
    mm_dtype t;
    uint32_t inner;
    int64_t st_hi, st_lo;
};

__device__ __forceinline__ int64_t vr_off(const VecRows &v, uint32_t r)
{
    uint32_t hi = r / v.inner, lo = r - hi * v.inner;
    return (int64_t)hi * v.st_hi + (int64_t)lo * v.st_lo;
}

/* RMSNorm (no modulation) of rows longer than 256: a warp per row, two
 * passes (the second reads the row back from L1/L2). */
__global__ void __launch_bounds__(kVecWarps * 32)
    k_rmsnorm_vec(VecRows x, VecRows y, int cols, const float *__restrict__ w, bool w_al, float eps, int rows)
{
    int r = blockIdx.x * kVecWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    int64_t ox = vr_off(x, r), oy = vr_off(y, r);
    float ss = 0.f;
#pragma unroll 4
    for (int c = lane * 8; c < cols; c += 256) {
        float f[8];
        ld8(x.p, x.t, ox + c, f);
#pragma unroll
        for (int j = 0; j < 8; j++)
            ss += f[j] * f[j];
    }
    ss = mmk_warp_sum(ss);
    float rs = 1.f / sqrtf(ss / (float)cols + eps);
#pragma unroll 4
    for (int c = lane * 8; c < cols; c += 256) {
        float f[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
        ld8(x.p, x.t, ox + c, f);
        if (w)
            ld8_f32(w + c, w_al, wv);
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = __fmul_rn(__fmul_rn(f[j], rs), wv[j]);
        st8(y.p, y.t, oy + c, f);
    }
}

/* Row r and this lane's octet for the short-row kernels: `lpr` = cols/8
 * lanes (a power of two ≤ 32) per row, 32/lpr rows per warp. */
__device__ __forceinline__ int group_row(int lpr, int *octet)
{
    int lane = threadIdx.x & 31;
    *octet = lane & (lpr - 1);
    return (blockIdx.x * kVecWarps + (threadIdx.x >> 5)) * (32 / lpr) + lane / lpr;
}

/* RMSNorm of rows of 8..256 channels (the per-head q/k norms), in place
 * safe: each lane loads its octet before any lane of its row stores. */
__global__ void __launch_bounds__(kVecWarps * 32)
    k_rmsnorm_group_vec(VecRows x, VecRows y, const float *__restrict__ w, bool w_al, float eps, int rows, int lpr)
{
    int a, r = group_row(lpr, &a);
    bool valid = r < rows; /* rows past the end still take part in the shuffles */
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (valid)
        ld8(x.p, x.t, vr_off(x, r) + 8 * a, f);
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++)
        ss += f[j] * f[j];
    for (int o = lpr / 2; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (!valid)
        return;
    float rs = 1.f / sqrtf(ss / (float)(8 * lpr) + eps), wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
    if (w)
        ld8_f32(w + 8 * a, w_al, wv);
#pragma unroll
    for (int j = 0; j < 8; j++)
        f[j] = __fmul_rn(__fmul_rn(f[j], rs), wv[j]);
    st8(y.p, y.t, vr_off(y, r) + 8 * a, f);
}

/* k_rope on [S, H, D] views with D = 8·lpr and rot % 16 == 0: lane a holds
 * channels 8a..8a+7; its rotation partner (a ± rot/16) arrives by shuffle.
 * x and y rows are (s, h) pairs (inner = H); row s of cos/sin is the
 * rotation of them all. */
__global__ void __launch_bounds__(kVecWarps * 32)
    k_rope_vec(VecRows x, VecRows y, VecRows cs, VecRows sn, int rot, int rows, int lpr)
{
    int a, r = group_row(lpr, &a);
    bool valid = r < rows;
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (valid)
        ld8(x.p, x.t, vr_off(x, r) + 8 * a, f);
    int half = rot / 2, j0 = 8 * a;
    bool lo = j0 < half, rotated = j0 < rot;
    int src = !rotated ? a : lo ? a + half / 8 : a - half / 8;
    float p[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        p[j] = __shfl_sync(0xffffffffu, f[j], src, lpr);
    if (!valid)
        return;
    if (rotated) {
        float c[8], s[8];
        uint32_t si = (uint32_t)r / x.inner;
        ld8(cs.p, cs.t, vr_off(cs, si) + j0, c);
        ld8(sn.p, sn.t, vr_off(sn, si) + j0, s);
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = lo ? __fsub_rn(__fmul_rn(f[j], c[j]), __fmul_rn(p[j], s[j]))
                      : __fadd_rn(__fmul_rn(f[j], c[j]), __fmul_rn(p[j], s[j]));
    }
    st8(y.p, y.t, vr_off(y, r) + j0, f);
}

/* k_gated_add, 8 elements per thread (x and y of any float dtypes). */
__global__ void k_gated_add_vec(VecRows x, VecRows y, uint32_t per_row, const float *__restrict__ gate,
                                int64_t ld_gate, bool g_al, const int32_t *__restrict__ idx, int64_t idx_stride,
                                uint32_t n8)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        uint32_t r = i / per_row, c = (i - r * per_row) * 8;
        float xv[8], yv[8], g[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
        int64_t ox = vr_off(x, r) + c;
        ld8(x.p, x.t, ox, xv);
        ld8(y.p, y.t, vr_off(y, r) + c, yv);
        if (gate)
            ld8_f32(gate + (idx ? idx[r * idx_stride] : 0) * ld_gate + c, g_al, g);
#pragma unroll
        for (int j = 0; j < 8; j++)
            xv[j] = __fadd_rn(xv[j], __fmul_rn(g[j], yv[j]));
        st8(x.p, x.t, ox, xv);
    }
}

/* What the 8-wide kernels need of a view: a float dtype, at most 3 dims,
 * a unit-stride last dim of a multiple of 8, and every 8-element group
 * 16-byte aligned (base and outer strides). */
bool rows_vec8(const mmk_view &v)
{
    if (!mmk_is_float(v.dtype) || v.ndim < 1 || v.ndim > 3)
        return false;
    int64_t cols = v.shape[v.ndim - 1];
    if (cols % 8 || (cols > 1 && v.stride[v.ndim - 1] != 1) || ((uintptr_t)v.p & 15))
        return false;
    int64_t unit = v.dtype == MM_F32 ? 4 : 8;
    for (int d = 0; d < v.ndim - 1; d++)
        if (v.shape[d] > 1 && v.stride[d] % unit)
            return false;
    return mmk_rows_of(v) < ((int64_t)1 << 31);
}

/* Lanes per row for the short-row kernels: cols/8 when it is a power of two ≤ 32, else 0. */
int lanes_per_row(int64_t cols)
{
    int64_t l = cols / 8;
    return cols % 8 == 0 && l >= 1 && l <= 32 && (l & (l - 1)) == 0 ? (int)l : 0;
}

VecRows vec_rows(const mmk_view &v)
{
    VecRows m = {v.p, v.dtype, 1u, 0, 0};
    if (v.ndim == 2) {
        m.inner = 0xffffffffu; /* r / inner = 0 for every row < 2^31 */
        m.st_lo = v.stride[0];
    } else if (v.ndim == 3) {
        m.inner = (uint32_t)v.shape[1];
        m.st_hi = v.stride[0];
        m.st_lo = v.stride[1];
    }
    return m;
}

bool f32_al16(const float *p, int64_t ld) { return ((uintptr_t)p & 15) == 0 && ld % 4 == 0; }

/* The 8-wide paths where the views fit them (they took the video VAE's
 * decode to half its time: docs/PERFORMANCE.md, VAEs), the kernels above
 * for every other view and where the policy asks for them. */
bool glue_vec() { return mmk_policy_get()->glue_vec != 0; }

/* ------------------------------------------------------------------ RoPE (views) */

/* One warp per (s, h) row of x [S, H, D]; the row is staged in shared memory
 * so lanes can read their rotation partner (in-place safe). */
const int kRopeWarps = 8;

__global__ void k_rope(mmk_view x, mmk_view y, mmk_view cs, mmk_view sn, int rot, int64_t rows)
{
    extern __shared__ float stage[]; /* [kRopeWarps][D] */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t D = x.shape[2], H = x.shape[1];
    int64_t r = (int64_t)blockIdx.x * kRopeWarps + warp;
    if (r >= rows)
        return;
    int64_t si = r / H, hi = r % H;
    int64_t ox = si * x.stride[0] + hi * x.stride[1], oy = si * y.stride[0] + hi * y.stride[1];
    int64_t oc = si * cs.stride[0], os = si * sn.stride[0];
    float *st = stage + warp * D;
    for (int64_t j = lane; j < D; j += 32)
        st[j] = mmk_ld(x.p, x.dtype, ox + j);
    __syncwarp();
    int half = rot / 2;
    for (int64_t j = lane; j < D; j += 32) {
        float v = st[j];
        if (j < half)
            v = __fsub_rn(__fmul_rn(st[j], mmk_ld(cs.p, cs.dtype, oc + j)),
                          __fmul_rn(st[j + half], mmk_ld(sn.p, sn.dtype, os + j)));
        else if (j < rot)
            v = __fadd_rn(__fmul_rn(st[j], mmk_ld(cs.p, cs.dtype, oc + j)),
                          __fmul_rn(st[j - half], mmk_ld(sn.p, sn.dtype, os + j)));
        mmk_st(y.p, y.dtype, oy + j, v);
    }
}

/* ------------------------------------------------------------------ fused q/k RMSNorm + RoPE (DiT) */

const int kQkWarps = 8;

__global__ void k_qk_norm_rope(int rows, int heads_q, int heads_k, int D, bf16 *__restrict__ q, int64_t ldq,
                               bf16 *__restrict__ k, int64_t ldk, const float *__restrict__ wq,
                               const float *__restrict__ wk, float eps, const bf16 *__restrict__ cosv,
                               const bf16 *__restrict__ sinv, int64_t ld_rope, int half)
{
    __shared__ float stage[kQkWarps][128];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int heads = heads_q + heads_k;
    int64_t item = (int64_t)blockIdx.x * kQkWarps + warp;
    if (item >= (int64_t)rows * heads)
        return;
    int64_t r = item / heads;
    int h = (int)(item % heads);
    bool is_q = h < heads_q;
    bf16 *p = is_q ? q + r * ldq + (int64_t)h * D : k + r * ldk + (int64_t)(h - heads_q) * D;
    const float *w = is_q ? wq : wk;
    float *st = stage[warp];
    float ss = 0.f;
    for (int j = lane; j < D; j += 32) {
        float v = __bfloat162float(p[j]);
        st[j] = v;
        ss += v * v;
    }
    ss = mmk_warp_sum(ss);
    if (w) {
        float rs = 1.f / sqrtf(ss / (float)D + eps);
        for (int j = lane; j < D; j += 32)
            st[j] = mmk_round_bf16(__fmul_rn(__fmul_rn(st[j], rs), w[j]));
    }
    __syncwarp();
    const bf16 *cr = cosv ? cosv + r * ld_rope : nullptr, *sr = sinv ? sinv + r * ld_rope : nullptr;
    for (int j = lane; j < D; j += 32) {
        float out = st[j];
        if (cr && j < half)
            out = __fsub_rn(__fmul_rn(st[j], __bfloat162float(cr[j])), __fmul_rn(st[j + half], __bfloat162float(sr[j])));
        else if (cr && j < 2 * half)
            out = __fadd_rn(__fmul_rn(st[j], __bfloat162float(cr[j])), __fmul_rn(st[j - half], __bfloat162float(sr[j])));
        p[j] = __float2bfloat16_rn(out);
    }
}

/* The vectorized kernel (the default; mmk_policy.qk_norm_vec = 0 selects the
 * one above), head_dim 128 only. Four lanes per head, eight heads per warp: lane
 * a = lane % 4 holds the 32 channels j = 32·qd + 8·a + e (qd, e < 4, 8) as
 * four 16-byte loads, so a warp moves 2 KB per load wave instead of 256 B
 * in 2-byte pieces. The results are bit-identical to k_qk_norm_rope: that
 * kernel's lane m sums x[m]², x[m+32]², x[m+64]², x[m+96]² with fused
 * multiply-adds in that order (here the same chain over qd for m = 8a + e)
 * and then adds lanes m ^ 16, ^ 8, ^ 4, ^ 2, ^ 1 in turn (here m ^ 16 and
 * m ^ 8 are lanes a ^ 2 and a ^ 1, the rest are registers e ^ 4, ^ 2, ^ 1);
 * the normalization and rotation are the same correctly rounded products.
 * The rotation partners (j ± rot/2, a whole octet when rot % 16 == 0) are
 * read back from a bf16 copy of the normalized head in shared memory (the
 * normalized values are bf16 values, so the copy is exact). */
const int kQkVecWarps = 4;
const int kQkVecStride = 160; /* bf16 per head slot: 128 + 32, so the 16-byte accesses of a quarter-warp hit distinct banks */

__device__ __forceinline__ void unpack8_bf16(uint4 u, float f[8])
{
    const bf16 *h = reinterpret_cast<const bf16 *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++)
        f[i] = __bfloat162float(h[i]);
}

__device__ __forceinline__ uint4 pack8_bf16(const float f[8])
{
    uint4 u;
    bf16 *h = reinterpret_cast<bf16 *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++)
        h[i] = __float2bfloat16_rn(f[i]);
    return u;
}

__global__ void __launch_bounds__(kQkVecWarps * 32)
    k_qk_norm_rope_vec(int64_t items, int heads_q, int heads, bf16 *__restrict__ q, int64_t ldq,
                       bf16 *__restrict__ k, int64_t ldk, const float *__restrict__ wq, const float *__restrict__ wk,
                       float eps, const bf16 *__restrict__ cosv, const bf16 *__restrict__ sinv, int64_t ld_rope,
                       int half)
{
    const int D = 128;
    __shared__ __align__(16) bf16 stage[kQkVecWarps][8][kQkVecStride];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, a = lane & 3, slot = lane >> 2;
    int64_t item = ((int64_t)blockIdx.x * kQkVecWarps + warp) * 8 + slot;
    bool valid = item < items; /* invalid lanes still take part in the shuffles */
    int64_t r = 0;
    int h = 0;
    if (valid) {
        if (items <= 0xffffffffll) {
            r = (uint32_t)item / (uint32_t)heads;
            h = (int)((uint32_t)item - (uint32_t)r * (uint32_t)heads);
        } else {
            r = item / heads;
            h = (int)(item - r * heads);
        }
    }
    bool is_q = h < heads_q;
    bf16 *p = is_q ? q + r * ldq + (int64_t)h * D : k + r * ldk + (int64_t)(h - heads_q) * D;
    const float *w = is_q ? wq : wk;
    uint4 xv[4];
#pragma unroll
    for (int qd = 0; qd < 4; qd++)
        xv[qd] = valid ? *reinterpret_cast<const uint4 *>(p + 32 * qd + 8 * a) : make_uint4(0, 0, 0, 0);

    float part[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
        part[e] = 0.f;
#pragma unroll
    for (int qd = 0; qd < 4; qd++) {
        float f[8];
        unpack8_bf16(xv[qd], f);
#pragma unroll
        for (int e = 0; e < 8; e++)
            part[e] = __fmaf_rn(f[e], f[e], part[e]); /* k_qk_norm_rope's ss += v·v, contracted */
    }
#pragma unroll
    for (int e = 0; e < 8; e++)
        part[e] += __shfl_xor_sync(0xffffffffu, part[e], 2); /* lane m ^ 16 */
#pragma unroll
    for (int e = 0; e < 8; e++)
        part[e] += __shfl_xor_sync(0xffffffffu, part[e], 1); /* lane m ^ 8 */
    float q4[4], q2[2];
#pragma unroll
    for (int e = 0; e < 4; e++)
        q4[e] = part[e] + part[e + 4];
#pragma unroll
    for (int e = 0; e < 2; e++)
        q2[e] = q4[e] + q4[e + 2];
    float ss = q2[0] + q2[1];

    bf16 *my = stage[warp][slot];
    float rs = w ? 1.f / sqrtf(ss / (float)D + eps) : 1.f;
#pragma unroll
    for (int qd = 0; qd < 4; qd++) {
        int j0 = 32 * qd + 8 * a;
        if (w) {
            float f[8];
            unpack8_bf16(xv[qd], f);
            float4 w0 = *reinterpret_cast<const float4 *>(w + j0), w1 = *reinterpret_cast<const float4 *>(w + j0 + 4);
            const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int e = 0; e < 8; e++)
                f[e] = __fmul_rn(__fmul_rn(f[e], rs), wv[e]);
            xv[qd] = pack8_bf16(f); /* mmk_round_bf16: exact in bf16 */
        }
        *reinterpret_cast<uint4 *>(my + j0) = xv[qd];
    }
    __syncwarp();
    if (!valid)
        return;
    const bf16 *cr = cosv ? cosv + r * ld_rope : nullptr, *sr = sinv ? sinv + r * ld_rope : nullptr;
#pragma unroll
    for (int qd = 0; qd < 4; qd++) {
        int j0 = 32 * qd + 8 * a;
        if (cr && j0 < 2 * half) {
            bool lo = j0 < half;
            float n[8], pn[8], c[8], sn[8];
            unpack8_bf16(xv[qd], n);
            unpack8_bf16(*reinterpret_cast<const uint4 *>(my + (lo ? j0 + half : j0 - half)), pn);
            unpack8_bf16(*reinterpret_cast<const uint4 *>(cr + j0), c);
            unpack8_bf16(*reinterpret_cast<const uint4 *>(sr + j0), sn);
#pragma unroll
            for (int e = 0; e < 8; e++)
                n[e] = lo ? __fsub_rn(__fmul_rn(n[e], c[e]), __fmul_rn(pn[e], sn[e]))
                          : __fadd_rn(__fmul_rn(n[e], c[e]), __fmul_rn(pn[e], sn[e]));
            xv[qd] = pack8_bf16(n);
        }
        *reinterpret_cast<uint4 *>(p + j0) = xv[qd];
    }
}

/* ------------------------------------------------------------------ GroupNorm */

/* Block per (n, group, frame) of x[n][c][f][s]; two passes for the variance. */
__global__ void k_groupnorm(int C, int G, int F, int64_t S, const void *x, mm_dtype xt, void *y, mm_dtype yt,
                            const float *__restrict__ w, const float *__restrict__ b, float eps, int silu)
{
    __shared__ float scratch[32];
    int f = blockIdx.x % F;
    int g = (blockIdx.x / F) % G;
    int64_t n = blockIdx.x / ((int64_t)F * G);
    int cpg = C / G;
    int64_t count = (int64_t)cpg * S, cstride = (int64_t)F * S;
    int64_t base = (n * C + (int64_t)g * cpg) * cstride + (int64_t)f * S;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
        s += mmk_ld(x, xt, base + (i / S) * cstride + i % S);
    float mean = mmk_block_sum(s, scratch) / (float)count;
    float v2 = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        float d = mmk_ld(x, xt, base + (i / S) * cstride + i % S) - mean;
        v2 += d * d;
    }
    float rs = 1.f / sqrtf(mmk_block_sum(v2, scratch) / (float)count + eps);
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        int c = g * cpg + (int)(i / S);
        int64_t off = base + (i / S) * cstride + i % S;
        float v = __fadd_rn(__fmul_rn(__fmul_rn(mmk_ld(x, xt, off) - mean, rs), w ? w[c] : 1.f), b ? b[c] : 0.f);
        if (silu)
            v = mmk_silu(v);
        mmk_st(y, yt, off, v);
    }
}

bool float_view(const mmk_view &v) { return mmk_is_float(v.dtype) && v.ndim >= 1; }

/* bf16 rows whose every start is 16-byte aligned, with a multiple of 8 columns. */
bool rows_aligned_bf16x8(const mmk_view &v)
{
    if (v.dtype != MM_BF16 || v.shape[v.ndim - 1] % 8 || ((uintptr_t)v.p & 15))
        return false;
    for (int d = 0; d < v.ndim - 1; d++)
        if (v.shape[d] > 1 && v.stride[d] % 8)
            return false;
    return true;
}

bool unit_last(const mmk_view &v) { return v.shape[v.ndim - 1] <= 1 || v.stride[v.ndim - 1] == 1; }

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The default is k_qk_norm_rope_vec (bit-identical to k_qk_norm_rope and
 * faster: docs/PERFORMANCE.md); the warp-per-head kernel stays for head
 * dims other than 128, unaligned rows, rot_dim % 16 != 0 and where the
 * policy asks for it. */
bool qk_vec_selected() { return mmk_policy_get()->qk_norm_vec != 0; }

/* What k_qk_norm_rope_vec needs: 128-channel heads, 16-byte aligned rows and
 * weights, and rotation partners that are whole octets (rot_dim % 16 == 0);
 * anything else keeps k_qk_norm_rope. */
bool qk_vec_fits(const mmk_qk_norm_rope *a, int heads_k)
{
    if (a->head_dim != 128 || !al16(a->q) || a->ldq % 8 || (a->wq && !al16(a->wq)))
        return false;
    if (heads_k && (!al16(a->k) || a->ldk % 8 || (a->wk && !al16(a->wk))))
        return false;
    if (a->cos && (a->rot_dim % 16 || !al16(a->cos) || !al16(a->sin) || a->ld_rope % 8))
        return false;
    return true;
}

} // namespace

extern "C" int mmk_rmsnorm_run(int dev, mmk_stream s, const mmk_rmsnorm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!float_view(a->x) || !float_view(a->y) || !unit_last(a->x) || !unit_last(a->y))
        return mm_fail(err, "rmsnorm: x and y must be float views with a unit-stride last dim");
    if (a->mode != MMK_NORM_RMS && (!a->scale || !a->shift))
        return mm_fail(err, "rmsnorm: modulation needs scale and shift tables");
    int64_t rows = mmk_rows_of(a->x), cols = mmk_cols_of(a->x);
    if (rows == 0 || cols == 0)
        return 0;
    if (a->mode == MMK_NORM_RMS && glue_vec() && rows_vec8(a->x) && rows_vec8(a->y)) {
        bool w_al = a->w && f32_al16(a->w, 0);
        if (int lpr = lanes_per_row(cols)) {
            k_rmsnorm_group_vec<<<mmk_blocks(rows, kVecWarps * 32 / lpr), kVecWarps * 32, 0, s>>>(
                vec_rows(a->x), vec_rows(a->y), a->w, w_al, a->eps, (int)rows, lpr);
            return mmk_launched(err, "k_rmsnorm_group_vec");
        }
        if (cols > 256 && cols < ((int64_t)1 << 30)) {
            k_rmsnorm_vec<<<mmk_blocks(rows, kVecWarps), kVecWarps * 32, 0, s>>>(vec_rows(a->x), vec_rows(a->y),
                                                                                 (int)cols, a->w, w_al, a->eps, (int)rows);
            return mmk_launched(err, "k_rmsnorm_vec");
        }
    }
    if (cols <= 1024) {
        k_rmsnorm_warp<<<mmk_blocks(rows, 8), 256, 0, s>>>(a->x, a->y, a->mode, a->w, a->eps, a->scale, a->shift,
                                                           a->ld_mod, a->idx, a->idx_stride, rows);
        return mmk_launched(err, "k_rmsnorm_warp");
    }
    if (rows_aligned_bf16x8(a->x) && rows_aligned_bf16x8(a->y)) {
        k_rmsnorm_bf16x8<<<(unsigned)rows, mmk_row_threads(cols / 2), 0, s>>>(
            a->x, a->y, a->mode, a->w, a->eps, a->scale, a->shift, a->ld_mod, a->idx, a->idx_stride);
        return mmk_launched(err, "k_rmsnorm_bf16x8");
    }
    k_rmsnorm<<<(unsigned)rows, mmk_row_threads(cols), 0, s>>>(a->x, a->y, a->mode, a->w, a->eps, a->scale, a->shift,
                                                               a->ld_mod, a->idx, a->idx_stride);
    return mmk_launched(err, "k_rmsnorm");
}

extern "C" int mmk_layernorm_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const float *w,
                                 const float *b, float eps, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!float_view(*x) || !float_view(*y) || !unit_last(*x) || !unit_last(*y))
        return mm_fail(err, "layernorm: x and y must be float views with a unit-stride last dim");
    int64_t rows = mmk_rows_of(*x), cols = mmk_cols_of(*x);
    if (rows == 0 || cols == 0)
        return 0;
    k_layernorm<<<(unsigned)rows, mmk_row_threads(cols), 0, s>>>(*x, *y, w, b, eps);
    return mmk_launched(err, "k_layernorm");
}

extern "C" int mmk_softmax_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!float_view(*x) || !float_view(*y) || !unit_last(*x) || !unit_last(*y))
        return mm_fail(err, "softmax: x and y must be float views with a unit-stride last dim");
    int64_t rows = mmk_rows_of(*x), cols = mmk_cols_of(*x);
    if (rows == 0 || cols == 0)
        return 0;
    k_softmax<<<(unsigned)rows, mmk_row_threads(cols), 0, s>>>(*x, *y);
    return mmk_launched(err, "k_softmax");
}

extern "C" int mmk_reduce_rows_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, int op, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!float_view(*x) || !mmk_is_float(y->dtype) || !unit_last(*x))
        return mm_fail(err, "reduce_rows: float views expected, x with a unit-stride last dim");
    int64_t rows = mmk_rows_of(*x);
    if (rows == 0)
        return 0;
    k_reduce_rows<<<(unsigned)rows, mmk_row_threads(mmk_cols_of(*x)), 0, s>>>(*x, *y, op);
    return mmk_launched(err, "k_reduce_rows");
}

extern "C" int mmk_gated_add_run(int dev, mmk_stream s, const mmk_view *x, const mmk_view *y, const float *gate,
                                 int64_t ld_gate, const int32_t *idx, int64_t idx_stride, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!float_view(*x) || !float_view(*y))
        return mm_fail(err, "gated add: float views expected");
    int64_t n = mmk_numel(*x);
    if (n == 0)
        return 0;
    if (!rows_aligned_bf16x8(*x) && glue_vec() && rows_vec8(*x) && rows_vec8(*y) &&
        mmk_rows_of(*y) == mmk_rows_of(*x) && n / 8 < ((int64_t)1 << 31)) {
        k_gated_add_vec<<<mmk_grid(n / 8), 256, 0, s>>>(vec_rows(*x), vec_rows(*y), (uint32_t)(mmk_cols_of(*x) / 8),
                                                        gate, ld_gate, gate && f32_al16(gate, ld_gate), idx, idx_stride,
                                                        (uint32_t)(n / 8));
        return mmk_launched(err, "k_gated_add_vec");
    }
    if (rows_aligned_bf16x8(*x) && rows_aligned_bf16x8(*y)) {
        k_gated_add_bf16x8<<<mmk_grid(n / 8), 256, 0, s>>>(*x, *y, gate, ld_gate, idx, idx_stride, n / 8);
        return mmk_launched(err, "k_gated_add_bf16x8");
    }
    k_gated_add<<<mmk_grid(n), 256, 0, s>>>(*x, *y, gate, ld_gate, idx, idx_stride, n);
    return mmk_launched(err, "k_gated_add");
}

extern "C" int mmk_rope_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const mmk_view *cos,
                            const mmk_view *sin, int rot, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (x->ndim != 3 || y->ndim != 3 || !float_view(*x) || !float_view(*y) || !float_view(*cos) || !float_view(*sin))
        return mm_fail(err, "rope: x, y must be float [S, H, D] views, cos/sin float [S, rot]");
    int64_t rows = x->shape[0] * x->shape[1], D = x->shape[2];
    if (rows == 0)
        return 0;
    int lpr = lanes_per_row(D);
    if (glue_vec() && lpr && rot % 16 == 0 && rot <= D && rows_vec8(*x) && rows_vec8(*y) && rows_vec8(*cos) &&
        rows_vec8(*sin) && cos->ndim == 2 && sin->ndim == 2) {
        k_rope_vec<<<mmk_blocks(rows, kVecWarps * 32 / lpr), kVecWarps * 32, 0, s>>>(
            vec_rows(*x), vec_rows(*y), vec_rows(*cos), vec_rows(*sin), rot, (int)rows, lpr);
        return mmk_launched(err, "k_rope_vec");
    }
    size_t smem = (size_t)kRopeWarps * D * sizeof(float);
    if (smem > 48 * 1024)
        MMK_TRY(cudaFuncSetAttribute(k_rope, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
                "raising the shared-memory limit of k_rope");
    k_rope<<<mmk_blocks(rows, kRopeWarps), kRopeWarps * 32, smem, s>>>(*x, *y, *cos, *sin, rot, rows);
    return mmk_launched(err, "k_rope");
}

extern "C" int mmk_qk_norm_rope_run(int dev, mmk_stream s, const mmk_qk_norm_rope *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->head_dim <= 0 || a->head_dim > 128)
        return mm_fail(err, "q/k norm + RoPE: head_dim %d not supported (1..128)", a->head_dim);
    if (a->cos && (a->rot_dim <= 0 || a->rot_dim % 2 || a->rot_dim > a->head_dim || !a->sin))
        return mm_fail(err, "q/k norm + RoPE: rot_dim %d must be even, in 2..head_dim (%d), with cos and sin tables",
                       a->rot_dim, a->head_dim);
    int heads_k = a->k ? a->heads_k : 0;
    if (a->rows == 0)
        return 0;
    int64_t items = (int64_t)a->rows * (a->heads_q + heads_k);
    if (qk_vec_selected() && qk_vec_fits(a, heads_k)) {
        k_qk_norm_rope_vec<<<mmk_blocks(items, kQkVecWarps * 8), kQkVecWarps * 32, 0, s>>>(
            items, a->heads_q, a->heads_q + heads_k, (bf16 *)a->q, a->ldq, (bf16 *)a->k, a->ldk, a->wq, a->wk, a->eps,
            (const bf16 *)a->cos, (const bf16 *)a->sin, a->ld_rope, a->cos ? a->rot_dim / 2 : 0);
        return mmk_launched(err, "k_qk_norm_rope_vec");
    }
    k_qk_norm_rope<<<mmk_blocks(items, kQkWarps), kQkWarps * 32, 0, s>>>(
        a->rows, a->heads_q, heads_k, a->head_dim, (bf16 *)a->q, a->ldq, (bf16 *)a->k, a->ldk, a->wq, a->wk, a->eps,
        (const bf16 *)a->cos, (const bf16 *)a->sin, a->ld_rope, a->rot_dim / 2);
    return mmk_launched(err, "k_qk_norm_rope");
}

extern "C" const char *mmk_qk_norm_rope_kernel(const mmk_qk_norm_rope *a)
{
    return qk_vec_selected() && qk_vec_fits(a, a->k ? a->heads_k : 0) ? "vec" : "warp";
}

extern "C" int mmk_groupnorm_run(int dev, mmk_stream s, const mmk_groupnorm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->n <= 0 || a->c <= 0 || a->groups <= 0 || a->frames <= 0 || a->spatial <= 0 || a->c % a->groups)
        return mm_fail(err, "groupnorm: need C (%d) divisible by groups (%d) and positive sizes", a->c, a->groups);
    if (!mmk_is_float(a->x_dtype) || !mmk_is_float(a->y_dtype))
        return mm_fail(err, "groupnorm: float tensors expected");
    int64_t blocks = (int64_t)a->n * a->groups * a->frames;
    k_groupnorm<<<(unsigned)blocks, 512, 0, s>>>(a->c, a->groups, a->frames, a->spatial, a->x, a->x_dtype, a->y,
                                                 a->y_dtype, a->w, a->b, a->eps, a->silu);
    return mmk_launched(err, "k_groupnorm");
}

static const mmk_kernel_entry g_kernels[] = {
    {"rmsnorm", (const void *)k_rmsnorm, 80},         {"rmsnorm_bf16x8", (const void *)k_rmsnorm_bf16x8, 80},
    {"rmsnorm_warp", (const void *)k_rmsnorm_warp, 80}, {"gated_add_bf16x8", (const void *)k_gated_add_bf16x8, 80},         {"layernorm", (const void *)k_layernorm, 80},
    {"softmax", (const void *)k_softmax, 80},         {"reduce_rows", (const void *)k_reduce_rows, 80},
    {"gated_add", (const void *)k_gated_add, 80},     {"rope", (const void *)k_rope, 80},
    {"qk_norm_rope", (const void *)k_qk_norm_rope, 80}, {"qk_norm_rope_vec", (const void *)k_qk_norm_rope_vec, 80},
    {"groupnorm", (const void *)k_groupnorm, 80},
    {"rmsnorm_vec", (const void *)k_rmsnorm_vec, 80}, {"rmsnorm_group_vec", (const void *)k_rmsnorm_group_vec, 80},
    {"rope_vec", (const void *)k_rope_vec, 80},       {"gated_add_vec", (const void *)k_gated_add_vec, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_norm(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
