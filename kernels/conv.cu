/* Direct convolutions (cuDNN is not available on the target hosts outside
 * PyTorch's own environment). Correct first: one thread per output element,
 * f32 accumulation over the group's input channels × kernel taps, zero
 * padding before/after, dilation, groups; ConvTranspose1d as a gather (each
 * output sums the inputs that scatter onto it). The VAE's heavy convolutions
 * are to move to an implicit-GEMM tensor-core kernel; this stays the
 * reference path. CPU twin: src/backend/cpu/conv.c. */
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

namespace {

/* rank 1 runs as rank 3 with T = H = 1 (extents in index 2). */
struct Geo {
    int n, cin, cout, groups;
    int in[3], k[3], out[3], stride[3], dil[3], pad[3];
};

__global__ void k_conv(Geo g, const void *x, const void *w, mm_dtype xt, const float *bias, void *y, mm_dtype yt,
                       int64_t total)
{
    int cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
    int64_t ipos = (int64_t)g.in[0] * g.in[1] * g.in[2], opos = (int64_t)g.out[0] * g.out[1] * g.out[2];
    int64_t kvol = (int64_t)g.k[0] * g.k[1] * g.k[2];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i % opos;
        int co = (int)((i / opos) % g.cout);
        int64_t n = i / (opos * g.cout);
        int ot = (int)(p / ((int64_t)g.out[1] * g.out[2])), oh = (int)((p / g.out[2]) % g.out[1]),
            ow = (int)(p % g.out[2]);
        int gi = co / cout_g;
        float acc = 0.f;
        for (int cl = 0; cl < cin_g; cl++) {
            int ci = gi * cin_g + cl;
            int64_t xb = (n * g.cin + ci) * ipos;
            int64_t wb = ((int64_t)co * cin_g + cl) * kvol;
            for (int kt = 0; kt < g.k[0]; kt++) {
                int it = ot * g.stride[0] + kt * g.dil[0] - g.pad[0];
                if (it < 0 || it >= g.in[0])
                    continue;
                for (int kh = 0; kh < g.k[1]; kh++) {
                    int ih = oh * g.stride[1] + kh * g.dil[1] - g.pad[1];
                    if (ih < 0 || ih >= g.in[1])
                        continue;
                    int64_t xr = xb + ((int64_t)it * g.in[1] + ih) * g.in[2];
                    int64_t wr = wb + ((int64_t)kt * g.k[1] + kh) * g.k[2];
                    for (int kw = 0; kw < g.k[2]; kw++) {
                        int iw = ow * g.stride[2] + kw * g.dil[2] - g.pad[2];
                        if (iw >= 0 && iw < g.in[2])
                            acc = fmaf(mmk_ld(x, xt, xr + iw), mmk_ld(w, xt, wr + kw), acc);
                    }
                }
            }
        }
        if (bias)
            acc += bias[co];
        mmk_st(y, yt, i, acc);
    }
}

/* ConvTranspose1d: y[b, co, o] = bias[co] + Σ_{ci in co's group} Σ_k
 * x[b, ci, i]·w[ci, co_local, k] over i·s + k·d − p0 = o. */
__global__ void k_conv_t1d(Geo g, const void *x, const void *w, mm_dtype xt, const float *bias, void *y, mm_dtype yt,
                           int64_t total)
{
    int cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
    int len = g.in[2], lout = g.out[2], K = g.k[2], s = g.stride[2], d = g.dil[2], p0 = g.pad[2];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int o = (int)(i % lout);
        int co = (int)((i / lout) % g.cout);
        int64_t n = i / ((int64_t)lout * g.cout);
        int gi = co / cout_g, col = co % cout_g;
        float acc = 0.f;
        for (int cl = 0; cl < cin_g; cl++) {
            int ci = gi * cin_g + cl;
            int64_t xb = (n * g.cin + ci) * len, wb = ((int64_t)ci * cout_g + col) * K;
            for (int k = 0; k < K; k++) {
                int t = o + p0 - k * d;
                if (t < 0 || t % s)
                    continue;
                int ii = t / s;
                if (ii < len)
                    acc = fmaf(mmk_ld(x, xt, xb + ii), mmk_ld(w, xt, wb + k), acc);
            }
        }
        if (bias)
            acc += bias[co];
        mmk_st(y, yt, i, acc);
    }
}

/* im2col for a chunk of output positions [p0, p0 + np) of batch n:
 * col[(ci·kvol + k)][j] = x[n, ci, tap k of position p0 + j] (0 outside).
 * One thread per (input channel, position) walks all kvol taps: the position
 * is decoded once instead of once per tap (the 64-bit divisions of a
 * thread-per-element im2col made it, not the GEMM, the cost of the VAE
 * encoder: about 12 TFLOP/s on an H200). Writes stay coalesced along j. The
 * element is copied as raw bits (E = uint16_t / uint32_t): column and input
 * share a dtype, so this is exact and +0.0 is the zero bit pattern. */
template <typename E>
__global__ void k_im2col(Geo g, const E *x, int64_t n, int64_t p0, int64_t np, E *col)
{
    const int kvol = g.k[0] * g.k[1] * g.k[2];
    const int64_t total = (int64_t)g.cin * np;
    const int64_t ipos = (int64_t)g.in[0] * g.in[1] * g.in[2];
    const int64_t ohw = (int64_t)g.out[1] * g.out[2];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = i % np;
        const int ci = (int)(i / np);
        const int64_t pp = p0 + j;
        const int ot = (int)(pp / ohw);
        const int r = (int)(pp - (int64_t)ot * ohw);
        const int oh = r / g.out[2], ow = r - oh * g.out[2];
        const E *xc = x + (n * g.cin + ci) * ipos;
        E *dst = col + (int64_t)ci * kvol * np + j;
        int k = 0;
        for (int kt = 0; kt < g.k[0]; kt++) {
            const int it = ot * g.stride[0] + kt * g.dil[0] - g.pad[0];
            const bool t_in = it >= 0 && it < g.in[0];
            for (int kh = 0; kh < g.k[1]; kh++) {
                const int ih = oh * g.stride[1] + kh * g.dil[1] - g.pad[1];
                const bool th_in = t_in && ih >= 0 && ih < g.in[1];
                const int64_t row = ((int64_t)it * g.in[1] + ih) * g.in[2];
                for (int kw = 0; kw < g.k[2]; kw++, k++) {
                    const int iw = ow * g.stride[2] + kw * g.dil[2] - g.pad[2];
                    dst[(int64_t)k * np] = th_in && iw >= 0 && iw < g.in[2] ? xc[row + iw] : E(0);
                }
            }
        }
    }
}

/* y[n, co, p0 + j] = round(acc[co][j] + bias[co]) from the f32 GEMM result. */
__global__ void k_conv_epilogue(const float *acc, int cout, int64_t np, const float *bias, void *y, mm_dtype yt,
                                int64_t ybase, int64_t opos)
{
    int64_t total = (int64_t)cout * np;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int co = (int)(i / np);
        int64_t j = i % np;
        float v = acc[i];
        if (bias)
            v = __fadd_rn(v, bias[co]);
        mmk_st(y, yt, ybase + (int64_t)co * opos + j, v);
    }
}

} // namespace

/* groups == 1: chunks of output positions through im2col and a cuBLASLt GEMM
 * (f32 accumulation; f32 result, then bias and one rounding). */
static int conv_gemm(int dev, mmk_stream s, const Geo &g, const mmk_conv *a, mm_error *err)
{
    int64_t kvol = (int64_t)g.k[0] * g.k[1] * g.k[2], K = (int64_t)g.cin * kvol;
    int64_t opos = (int64_t)g.out[0] * g.out[1] * g.out[2];
    size_t es = (size_t)mm_dtype_bits(a->xw_dtype) / 8;
    /* chunk so the column block and the f32 result stay under ~256 MiB each */
    int64_t chunk = ((int64_t)256 << 20) / (K * (int64_t)es > (int64_t)g.cout * 4 ? K * (int64_t)es : (int64_t)g.cout * 4);
    chunk = chunk < 256 ? 256 : chunk / 8 * 8;
    if (chunk > opos)
        chunk = opos;
    void *col = mm_cuda_malloc(dev, (size_t)(K * chunk) * es, err);
    float *acc = col ? (float *)mm_cuda_malloc(dev, (size_t)g.cout * chunk * 4, err) : nullptr;
    int rc = (col && acc) ? 0 : -1;
    for (int64_t n = 0; n < g.n && rc == 0; n++)
        for (int64_t p0 = 0; p0 < opos && rc == 0; p0 += chunk) {
            int64_t np = opos - p0 < chunk ? opos - p0 : chunk;
            if (es == 2)
                k_im2col<uint16_t><<<mmk_grid((int64_t)g.cin * np), 256, 0, s>>>(
                    g, static_cast<const uint16_t *>(a->x), n, p0, np, static_cast<uint16_t *>(col));
            else
                k_im2col<uint32_t><<<mmk_grid((int64_t)g.cin * np), 256, 0, s>>>(
                    g, static_cast<const uint32_t *>(a->x), n, p0, np, static_cast<uint32_t *>(col));
            if ((rc = mmk_launched(err, "k_im2col")))
                break;
            mmk_gemm_ex ge;
            memset(&ge, 0, sizeof ge);
            ge.M = g.cout;
            ge.N = (int)np;
            ge.K = (int)K;
            ge.batch = 1;
            ge.ab_dtype = a->xw_dtype;
            ge.y_dtype = MM_F32;
            ge.a = a->w; /* [cout, K] row-major */
            ge.lda = K;
            ge.w = col; /* [K, np] row-major */
            ge.ldw = np;
            ge.y = acc;
            ge.ldy = np;
            ge.alpha = 1.f;
            if ((rc = mmk_gemm_ex_run(dev, s, &ge, err)))
                break;
            k_conv_epilogue<<<mmk_grid((int64_t)g.cout * np), 256, 0, s>>>(acc, g.cout, np, a->bias, a->y, a->y_dtype,
                                                                           n * g.cout * opos + p0, opos);
            rc = mmk_launched(err, "k_conv_epilogue");
        }
    mm_cuda_free(dev, col);
    mm_cuda_free(dev, acc);
    return rc;
}

extern "C" int mmk_conv_run(int dev, mmk_stream s, const mmk_conv *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->rank != 1 && a->rank != 3)
        return mm_fail(err, "conv: rank %d not supported (1 or 3)", a->rank);
    if (a->transposed && a->rank != 1)
        return mm_fail(err, "conv: only 1-D transposed convolutions are supported");
    if (!mmk_is_float(a->xw_dtype) || !mmk_is_float(a->y_dtype))
        return mm_fail(err, "conv: float tensors expected");
    int groups = a->groups > 0 ? a->groups : 1;
    if (a->cin % groups || a->cout % groups)
        return mm_fail(err, "conv: %d/%d channels do not split into %d groups", a->cin, a->cout, groups);
    Geo g;
    g.n = a->n;
    g.cin = a->cin;
    g.cout = a->cout;
    g.groups = groups;
    for (int d = 0; d < 3; d++) {
        int sd = a->rank == 3 ? d : (d == 2 ? 0 : -1);
        g.in[d] = sd >= 0 ? a->in[sd] : 1;
        g.k[d] = sd >= 0 ? a->k[sd] : 1;
        g.out[d] = sd >= 0 ? a->out[sd] : 1;
        g.stride[d] = sd >= 0 && a->stride[sd] > 0 ? a->stride[sd] : 1;
        g.dil[d] = sd >= 0 && a->dilation[sd] > 0 ? a->dilation[sd] : 1;
        g.pad[d] = sd >= 0 ? a->pad0[sd] : 0;
    }
    int64_t total = (int64_t)g.n * g.cout * g.out[0] * g.out[1] * g.out[2];
    if (total == 0)
        return 0;
    /* cuBLASLt needs 16-bit operands' leading dims even: fall back to the
     * direct kernel for the odd shapes */
    bool gemm_ok = !a->transposed && groups == 1 &&
                   (a->xw_dtype == MM_F32 || ((int64_t)g.cin * g.k[0] * g.k[1] * g.k[2]) % 8 == 0);
    if (gemm_ok && mmk_policy_get()->conv_gemm)
        return conv_gemm(dev, s, g, a, err);
    if (a->transposed)
        k_conv_t1d<<<mmk_grid(total), 256, 0, s>>>(g, a->x, a->w, a->xw_dtype, a->bias, a->y, a->y_dtype, total);
    else
        k_conv<<<mmk_grid(total), 256, 0, s>>>(g, a->x, a->w, a->xw_dtype, a->bias, a->y, a->y_dtype, total);
    return mmk_launched(err, "k_conv");
}

static const mmk_kernel_entry g_kernels[] = {
    {"conv", (const void *)k_conv, 80},
    {"conv_t1d", (const void *)k_conv_t1d, 80},
    {"im2col_16", (const void *)k_im2col<uint16_t>, 80},
    {"im2col_32", (const void *)k_im2col<uint32_t>, 80},
    {"conv_epilogue", (const void *)k_conv_epilogue, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_conv(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
