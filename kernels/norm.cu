/* Normalizations: RMSNorm (+ AdaLN modulation), LayerNorm, GroupNorm, and the
 * per-head q/k RMSNorm fused with rotate-half RoPE. One block (or warp) per
 * normalized vector; statistics in fp32. CPU twins: src/backend/cpu/. */
#include "kernels/common.cuh"

namespace {

/* ------------------------------------------------------------------ RMSNorm */

template <typename TX, typename TY>
__global__ void k_rmsnorm(int cols, const TX *__restrict__ x, int64_t ldx, TY *__restrict__ y, int64_t ldy,
                          const bf16 *__restrict__ w, float eps, const bf16 *__restrict__ shift,
                          const bf16 *__restrict__ scale, int64_t ld_mod, const int32_t *__restrict__ mod_idx)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    const TX *xr = x + r * ldx;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = mmk_to_f32(xr[c]);
        ss += v * v;
    }
    ss = mmk_block_sum(ss, scratch);
    float inv = rsqrtf(ss / (float)cols + eps);
    const bf16 *sh = shift ? shift + (int64_t)mod_idx[r] * ld_mod : nullptr;
    const bf16 *sc = scale ? scale + (int64_t)mod_idx[r] * ld_mod : nullptr;
    TY *yr = y + r * ldy;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = mmk_to_f32(xr[c]) * inv;
        if (w)
            v *= __bfloat162float(w[c]);
        if (sh)
            v = v * (1.f + __bfloat162float(sc[c])) + __bfloat162float(sh[c]);
        yr[c] = mmk_from_f32<TY>(v);
    }
}

/* ------------------------------------------------------------------ LayerNorm */

template <typename TX, typename TY, typename TW>
__global__ void k_layernorm(int cols, const TX *__restrict__ x, int64_t ldx, TY *__restrict__ y, int64_t ldy,
                            const TW *__restrict__ w, const TW *__restrict__ b, float eps)
{
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    const TX *xr = x + r * ldx;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += mmk_to_f32(xr[c]);
    float mean = mmk_block_sum(s, scratch) / (float)cols;
    float v2 = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = mmk_to_f32(xr[c]) - mean;
        v2 += d * d;
    }
    float inv = rsqrtf(mmk_block_sum(v2, scratch) / (float)cols + eps);
    TY *yr = y + r * ldy;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = (mmk_to_f32(xr[c]) - mean) * inv;
        if (w)
            v *= mmk_to_f32(w[c]);
        if (b)
            v += mmk_to_f32(b[c]);
        yr[c] = mmk_from_f32<TY>(v);
    }
}

/* ------------------------------------------------------------------ GroupNorm */

/* Block per (n, group, frame): x[n][c][f][s]. Two passes for the variance. */
template <typename T>
__global__ void k_groupnorm(int C, int G, int F, int64_t S, const T *__restrict__ x, T *__restrict__ y,
                            const float *__restrict__ w, const float *__restrict__ b, float eps, int silu)
{
    __shared__ float scratch[32];
    int f = blockIdx.x % F;
    int g = (blockIdx.x / F) % G;
    int64_t n = blockIdx.x / ((int64_t)F * G);
    int cpg = C / G;
    int64_t count = (int64_t)cpg * S;
    int64_t cstride = (int64_t)F * S;
    const T *base = x + (n * C + (int64_t)g * cpg) * cstride + (int64_t)f * S;
    T *ybase = y + (n * C + (int64_t)g * cpg) * cstride + (int64_t)f * S;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
        s += mmk_to_f32(base[(i / S) * cstride + i % S]);
    float mean = mmk_block_sum(s, scratch) / (float)count;
    float v2 = 0.f;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        float d = mmk_to_f32(base[(i / S) * cstride + i % S]) - mean;
        v2 += d * d;
    }
    float inv = rsqrtf(mmk_block_sum(v2, scratch) / (float)count + eps);
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        int c = g * cpg + (int)(i / S);
        int64_t off = (i / S) * cstride + i % S;
        float v = (mmk_to_f32(base[off]) - mean) * inv;
        if (w)
            v *= w[c];
        if (b)
            v += b[c];
        if (silu)
            v = mmk_silu(v);
        ybase[off] = mmk_from_f32<T>(v);
    }
}

/* ------------------------------------------------------------------ q/k RMSNorm + RoPE */

/* One warp per (row, head) of q or k; the head (≤ 128 values) is staged in
 * shared memory so each lane can read its rotation partner. */
const int kQkWarps = 8;

template <typename TR>
__global__ void k_qk_norm_rope(int rows, int heads_q, int heads_k, int D, bf16 *__restrict__ q, int64_t ldq,
                               bf16 *__restrict__ k, int64_t ldk, const bf16 *__restrict__ wq,
                               const bf16 *__restrict__ wk, float eps, const TR *__restrict__ cosv,
                               const TR *__restrict__ sinv, int64_t ld_rope, int half)
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
    const bf16 *w = is_q ? wq : wk;
    float *st = stage[warp];
    float ss = 0.f;
    for (int j = lane; j < D; j += 32) {
        float v = __bfloat162float(p[j]);
        st[j] = v;
        ss += v * v;
    }
    ss = mmk_warp_sum(ss);
    if (w) {
        float inv = rsqrtf(ss / (float)D + eps);
        for (int j = lane; j < D; j += 32)
            st[j] = mmk_round_bf16(st[j] * inv * __bfloat162float(w[j]));
    }
    __syncwarp();
    if (cosv) {
        const TR *cr = cosv + r * ld_rope, *sr = sinv + r * ld_rope;
        for (int j = lane; j < D; j += 32) {
            float out = st[j];
            if (j < half)
                out = st[j] * mmk_to_f32(cr[j]) - st[j + half] * mmk_to_f32(sr[j]);
            else if (j < 2 * half)
                out = st[j] * mmk_to_f32(cr[j]) + st[j - half] * mmk_to_f32(sr[j]);
            p[j] = __float2bfloat16_rn(out);
        }
    } else {
        for (int j = lane; j < D; j += 32)
            p[j] = __float2bfloat16_rn(st[j]);
    }
}

int threads_for(int cols)
{
    int t = 32;
    while (t < cols && t < 1024)
        t <<= 1;
    return t > 1024 ? 1024 : t;
}

bool is_bf16_or_f32(mm_dtype t) { return t == MM_BF16 || t == MM_F32; }

} // namespace

extern "C" int mmk_rmsnorm_run(int dev, mmk_stream s, const mmk_rmsnorm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->rows <= 0 || a->cols <= 0)
        return a->rows == 0 ? 0 : mm_fail(err, "rmsnorm: bad size %d×%d", a->rows, a->cols);
    if (!is_bf16_or_f32(a->x_dtype) || !is_bf16_or_f32(a->y_dtype))
        return mm_fail(err, "rmsnorm: x and y must be bf16 or f32 (got %s → %s)", mm_dtype_name(a->x_dtype),
                       mm_dtype_name(a->y_dtype));
    if ((a->shift == nullptr) != (a->scale == nullptr) || (a->shift && !a->mod_idx))
        return mm_fail(err, "rmsnorm: modulation needs shift, scale and mod_idx together");
    int t = threads_for(a->cols / 4 > 32 ? a->cols / 4 : 32);
    if (t > 512)
        t = 512;
    dim3 grid(a->rows);
    const bf16 *w = (const bf16 *)a->w, *sh = (const bf16 *)a->shift, *sc = (const bf16 *)a->scale;
#define MMK_RMS(TX, TY)                                                                                         \
    k_rmsnorm<TX, TY><<<grid, t, 0, s>>>(a->cols, (const TX *)a->x, a->ldx, (TY *)a->y, a->ldy, w, a->eps, sh, sc, \
                                         a->ld_mod, a->mod_idx)
    if (a->x_dtype == MM_BF16 && a->y_dtype == MM_BF16)
        MMK_RMS(bf16, bf16);
    else if (a->x_dtype == MM_BF16)
        MMK_RMS(bf16, float);
    else if (a->y_dtype == MM_BF16)
        MMK_RMS(float, bf16);
    else
        MMK_RMS(float, float);
#undef MMK_RMS
    return mmk_launched(err, "k_rmsnorm");
}

extern "C" int mmk_layernorm_run(int dev, mmk_stream s, const mmk_layernorm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->rows <= 0 || a->cols <= 0)
        return a->rows == 0 ? 0 : mm_fail(err, "layernorm: bad size %d×%d", a->rows, a->cols);
    if (!is_bf16_or_f32(a->x_dtype) || !is_bf16_or_f32(a->y_dtype) || ((a->w || a->b) && !is_bf16_or_f32(a->wb_dtype)))
        return mm_fail(err, "layernorm: x, y, weight and bias must be bf16 or f32");
    int t = threads_for(a->cols / 4 > 32 ? a->cols / 4 : 32);
    if (t > 512)
        t = 512;
    dim3 grid(a->rows);
#define MMK_LN(TX, TY, TW)                                                                                      \
    k_layernorm<TX, TY, TW><<<grid, t, 0, s>>>(a->cols, (const TX *)a->x, a->ldx, (TY *)a->y, a->ldy,          \
                                               (const TW *)a->w, (const TW *)a->b, a->eps)
    bool wf = a->wb_dtype == MM_F32;
    if (a->x_dtype == MM_BF16 && a->y_dtype == MM_BF16) {
        if (wf) MMK_LN(bf16, bf16, float); else MMK_LN(bf16, bf16, bf16);
    } else if (a->x_dtype == MM_BF16) {
        if (wf) MMK_LN(bf16, float, float); else MMK_LN(bf16, float, bf16);
    } else if (a->y_dtype == MM_BF16) {
        if (wf) MMK_LN(float, bf16, float); else MMK_LN(float, bf16, bf16);
    } else {
        if (wf) MMK_LN(float, float, float); else MMK_LN(float, float, bf16);
    }
#undef MMK_LN
    return mmk_launched(err, "k_layernorm");
}

extern "C" int mmk_groupnorm_run(int dev, mmk_stream s, const mmk_groupnorm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->n <= 0 || a->c <= 0 || a->groups <= 0 || a->frames <= 0 || a->spatial <= 0 || a->c % a->groups)
        return mm_fail(err, "groupnorm: need C (%d) divisible by groups (%d) and positive sizes", a->c, a->groups);
    if (!is_bf16_or_f32(a->dtype))
        return mm_fail(err, "groupnorm: dtype must be bf16 or f32, not %s", mm_dtype_name(a->dtype));
    int64_t blocks = (int64_t)a->n * a->groups * a->frames;
    if (a->dtype == MM_BF16)
        k_groupnorm<bf16><<<(unsigned)blocks, 512, 0, s>>>(a->c, a->groups, a->frames, a->spatial, (const bf16 *)a->x,
                                                           (bf16 *)a->y, a->w, a->b, a->eps, a->silu);
    else
        k_groupnorm<float><<<(unsigned)blocks, 512, 0, s>>>(a->c, a->groups, a->frames, a->spatial,
                                                            (const float *)a->x, (float *)a->y, a->w, a->b, a->eps,
                                                            a->silu);
    return mmk_launched(err, "k_groupnorm");
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
    if (a->cos && a->rope_dtype != MM_BF16 && a->rope_dtype != MM_F32)
        return mm_fail(err, "q/k norm + RoPE: cos/sin tables must be bf16 or f32, not %s", mm_dtype_name(a->rope_dtype));
    int heads_k = a->k ? a->heads_k : 0;
    if (a->rows == 0)
        return 0;
    int64_t items = (int64_t)a->rows * (a->heads_q + heads_k);
    unsigned grid = mmk_blocks(items, kQkWarps);
    if (a->cos && a->rope_dtype == MM_F32)
        k_qk_norm_rope<float><<<grid, kQkWarps * 32, 0, s>>>(
            a->rows, a->heads_q, heads_k, a->head_dim, (bf16 *)a->q, a->ldq, (bf16 *)a->k, a->ldk,
            (const bf16 *)a->wq, (const bf16 *)a->wk, a->eps, (const float *)a->cos, (const float *)a->sin,
            a->ld_rope, a->rot_dim / 2);
    else
        k_qk_norm_rope<bf16><<<grid, kQkWarps * 32, 0, s>>>(
            a->rows, a->heads_q, heads_k, a->head_dim, (bf16 *)a->q, a->ldq, (bf16 *)a->k, a->ldk,
            (const bf16 *)a->wq, (const bf16 *)a->wk, a->eps, (const bf16 *)a->cos, (const bf16 *)a->sin,
            a->ld_rope, a->rot_dim / 2);
    return mmk_launched(err, "k_qk_norm_rope");
}

static const mmk_kernel_entry g_kernels[] = {
    {"rmsnorm_bf16", (const void *)k_rmsnorm<bf16, bf16>, 80},
    {"rmsnorm_f32", (const void *)k_rmsnorm<float, float>, 80},
    {"layernorm_bf16", (const void *)k_layernorm<bf16, bf16, bf16>, 80},
    {"layernorm_f32", (const void *)k_layernorm<float, float, float>, 80},
    {"groupnorm_bf16", (const void *)k_groupnorm<bf16>, 80},
    {"groupnorm_f32", (const void *)k_groupnorm<float>, 80},
    {"qk_norm_rope", (const void *)k_qk_norm_rope<bf16>, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_norm(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
