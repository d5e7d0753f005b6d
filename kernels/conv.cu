/* Direct convolutions (cuDNN is not available on the target hosts outside
 * PyTorch's own environment). Correct first: one thread per output element,
 * f32 accumulation over Cin × kernel, zero padding. The VAE's heavy
 * convolutions will move to an implicit-GEMM tensor-core kernel; these stay
 * as the reference path and for the small layers. CPU twins: src/backend/cpu/. */
#include "kernels/common.cuh"

namespace {

template <typename T>
__global__ void k_conv3d(mmk_conv3d a, int to, int ho, int wo)
{
    const T *x = (const T *)a.x, *w = (const T *)a.weight;
    T *y = (T *)a.y;
    int64_t total = (int64_t)a.n * a.cout * to * ho * wo;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int ow = (int)(i % wo);
        int oh = (int)((i / wo) % ho);
        int ot = (int)((i / ((int64_t)wo * ho)) % to);
        int co = (int)((i / ((int64_t)wo * ho * to)) % a.cout);
        int64_t n = i / ((int64_t)wo * ho * to * a.cout);
        float acc = a.bias ? a.bias[co] : 0.f;
        for (int ci = 0; ci < a.cin; ci++) {
            const T *xc = x + (n * a.cin + ci) * (int64_t)a.t * a.h * a.w;
            const T *wc = w + ((int64_t)co * a.cin + ci) * a.kt * a.kh * a.kw;
            for (int dt = 0; dt < a.kt; dt++) {
                int it = ot * a.st - a.pt + dt;
                if (it < 0 || it >= a.t)
                    continue;
                for (int dh = 0; dh < a.kh; dh++) {
                    int ih = oh * a.sh - a.ph + dh;
                    if (ih < 0 || ih >= a.h)
                        continue;
                    const T *xr = xc + ((int64_t)it * a.h + ih) * a.w;
                    const T *wr = wc + (dt * a.kh + dh) * a.kw;
                    for (int dw = 0; dw < a.kw; dw++) {
                        int iw = ow * a.sw - a.pw + dw;
                        if (iw >= 0 && iw < a.w)
                            acc = fmaf(mmk_to_f32(xr[iw]), mmk_to_f32(wr[dw]), acc);
                    }
                }
            }
        }
        y[i] = mmk_from_f32<T>(acc);
    }
}

template <typename T>
__global__ void k_conv1d(mmk_conv1d a, int lo)
{
    const T *x = (const T *)a.x, *w = (const T *)a.weight;
    T *y = (T *)a.y;
    int64_t total = (int64_t)a.n * a.cout * lo;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int ol = (int)(i % lo);
        int co = (int)((i / lo) % a.cout);
        int64_t n = i / ((int64_t)lo * a.cout);
        float acc = a.bias ? a.bias[co] : 0.f;
        for (int ci = 0; ci < a.cin; ci++) {
            const T *xr = x + (n * a.cin + ci) * (int64_t)a.len;
            const T *wr = w + ((int64_t)co * a.cin + ci) * a.k;
            for (int kk = 0; kk < a.k; kk++) {
                int il = ol * a.stride - a.pad + kk * a.dilation;
                if (il >= 0 && il < a.len)
                    acc = fmaf(mmk_to_f32(xr[il]), mmk_to_f32(wr[kk]), acc);
            }
        }
        y[i] = mmk_from_f32<T>(acc);
    }
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 65536 ? 65536 : (b < 1 ? 1 : b));
}

int out_extent(int in, int k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

} // namespace

extern "C" int mmk_conv3d_run(int dev, mmk_stream s, const mmk_conv3d *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->st <= 0 || a->sh <= 0 || a->sw <= 0 || a->kt <= 0 || a->kh <= 0 || a->kw <= 0)
        return mm_fail(err, "conv3d: kernel sizes and strides must be positive");
    int to = out_extent(a->t, a->kt, a->st, a->pt, 1), ho = out_extent(a->h, a->kh, a->sh, a->ph, 1),
        wo = out_extent(a->w, a->kw, a->sw, a->pw, 1);
    if (to <= 0 || ho <= 0 || wo <= 0)
        return mm_fail(err, "conv3d: input %d×%d×%d is smaller than the kernel %d×%d×%d", a->t, a->h, a->w, a->kt,
                       a->kh, a->kw);
    int64_t total = (int64_t)a->n * a->cout * to * ho * wo;
    if (a->dtype == MM_BF16)
        k_conv3d<bf16><<<grid_for(total), 256, 0, s>>>(*a, to, ho, wo);
    else if (a->dtype == MM_F32)
        k_conv3d<float><<<grid_for(total), 256, 0, s>>>(*a, to, ho, wo);
    else
        return mm_fail(err, "conv3d: dtype %s not supported (bf16, f32)", mm_dtype_name(a->dtype));
    return mmk_launched(err, "k_conv3d");
}

extern "C" int mmk_conv1d_run(int dev, mmk_stream s, const mmk_conv1d *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->stride <= 0 || a->k <= 0 || a->dilation <= 0)
        return mm_fail(err, "conv1d: kernel size, stride and dilation must be positive");
    int lo = out_extent(a->len, a->k, a->stride, a->pad, a->dilation);
    if (lo <= 0)
        return mm_fail(err, "conv1d: input length %d is shorter than the dilated kernel", a->len);
    int64_t total = (int64_t)a->n * a->cout * lo;
    if (a->dtype == MM_BF16)
        k_conv1d<bf16><<<grid_for(total), 256, 0, s>>>(*a, lo);
    else if (a->dtype == MM_F32)
        k_conv1d<float><<<grid_for(total), 256, 0, s>>>(*a, lo);
    else
        return mm_fail(err, "conv1d: dtype %s not supported (bf16, f32)", mm_dtype_name(a->dtype));
    return mmk_launched(err, "k_conv1d");
}

static const mmk_kernel_entry g_kernels[] = {
    {"conv3d_bf16", (const void *)k_conv3d<bf16>, 80},
    {"conv3d_f32", (const void *)k_conv3d<float>, 80},
    {"conv1d_bf16", (const void *)k_conv1d<bf16>, 80},
    {"conv1d_f32", (const void *)k_conv1d<float>, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_conv(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
