/* Memory-bound glue: dtype conversion, gated linear units, the gated residual
 * add, activations, the int8 embedding and nvfp4 weight decoding. CPU twins:
 * src/backend/cpu/. */
#include <cuda_fp8.h>

#include "kernels/common.cuh"

namespace {

/* ------------------------------------------------------------------ conversion */

template <typename TI> __device__ __forceinline__ float load_f(const TI *p, int64_t i) { return mmk_to_f32(p[i]); }
template <> __device__ __forceinline__ float load_f<int8_t>(const int8_t *p, int64_t i) { return (float)p[i]; }
template <> __device__ __forceinline__ float load_f<__nv_fp8_e4m3>(const __nv_fp8_e4m3 *p, int64_t i)
{
    return (float)p[i];
}

template <typename TI, typename TO>
__global__ void k_convert(TO *__restrict__ y, const TI *__restrict__ x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = mmk_from_f32<TO>(load_f<TI>(x, i));
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 65536 ? 65536 : (b < 1 ? 1 : b));
}

/* ------------------------------------------------------------------ activations */

__device__ __forceinline__ float act_apply(int act, float x)
{
    switch (act) {
    case MMK_ACT_SILU: return mmk_silu(x);
    case MMK_ACT_GELU_TANH: {
        const float k0 = 0.7978845608028654f, k1 = 0.044715f;
        return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
    }
    case MMK_ACT_GELU_ERF: return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
    default: return x;
    }
}

template <typename T> __global__ void k_activation(T *__restrict__ y, const T *__restrict__ x, int64_t n, int act)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = mmk_from_f32<T>(act_apply(act, mmk_to_f32(x[i])));
}

/* y[r, j] = act(x[r, j]) · x[r, F + j] */
__global__ void k_glu(int rows, int F, const bf16 *__restrict__ x, int64_t ldx, bf16 *__restrict__ y, int64_t ldy,
                      int act)
{
    int64_t n = (int64_t)rows * F;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / F;
        int j = (int)(i % F);
        const bf16 *xr = x + r * ldx;
        y[r * ldy + j] = __float2bfloat16_rn(act_apply(act, __bfloat162float(xr[j])) * __bfloat162float(xr[F + j]));
    }
}

/* x += gate[mod_idx[r]] · y, one rounding */
__global__ void k_gated_add(int rows, int cols, bf16 *__restrict__ x, int64_t ldx, const bf16 *__restrict__ y,
                            int64_t ldy, const bf16 *__restrict__ gate, int64_t ld_gate,
                            const int32_t *__restrict__ mod_idx)
{
    int64_t n = (int64_t)rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols;
        int c = (int)(i % cols);
        float g = gate ? __bfloat162float(gate[(int64_t)mod_idx[r] * ld_gate + c]) : 1.f;
        bf16 *xp = x + r * ldx + c;
        *xp = __float2bfloat16_rn(fmaf(g, __bfloat162float(y[r * ldy + c]), __bfloat162float(*xp)));
    }
}

/* ------------------------------------------------------------------ embedding, nvfp4 */

__global__ void k_embed_i8(int n, int dim, const int32_t *__restrict__ ids, const int8_t *__restrict__ table,
                           const float *__restrict__ scale, bf16 *__restrict__ y)
{
    int64_t total = (int64_t)n * dim;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / dim;
        int c = (int)(i % dim);
        int64_t id = ids[t];
        y[i] = __float2bfloat16_rn((float)table[id * dim + c] * scale[id]);
    }
}

__device__ __forceinline__ float e2m1(unsigned code)
{
    const float lut[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    float v = lut[code & 7];
    return (code & 8) ? -v : v;
}

/* One thread per packed byte (two outputs). */
__global__ void k_nvfp4_to_bf16(int K, int row0, int rows, const uint8_t *__restrict__ packed,
                                const uint8_t *__restrict__ scales, float global_scale, bf16 *__restrict__ y)
{
    int half = K / 2, C = K / 16;
    int64_t total = (int64_t)rows * half;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rr = i / half;
        int j = (int)(i % half);
        int64_t r = row0 + rr;
        int c = (2 * j) / 16;
        int64_t off = ((r / 128) * (C / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
        __nv_fp8_e4m3 sc;
        sc.__x = scales[off];
        float d = (float)sc * global_scale;
        uint8_t b = packed[r * half + j];
        __nv_bfloat162 out;
        out.x = __float2bfloat16_rn(e2m1(b >> 4) * d);
        out.y = __float2bfloat16_rn(e2m1(b & 15) * d);
        reinterpret_cast<__nv_bfloat162 *>(y + rr * K)[j] = out;
    }
}

/* ------------------------------------------------------------------ random fill */

__device__ __forceinline__ uint64_t splitmix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <typename T> __global__ void k_fill_random(T *p, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix(seed ^ splitmix((uint64_t)i));
        float u = (float)(h >> 40) * (1.f / 16777216.f) * 2.f - 1.f;
        p[i] = mmk_from_f32<T>(u * scale);
    }
}

__global__ void k_fill_random_i8(int8_t *p, int64_t n, uint64_t seed)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = (int8_t)((int)(splitmix(seed ^ splitmix((uint64_t)i)) % 255) - 127);
}

} // namespace

extern "C" int mmk_fill_random(int dev, mmk_stream s, void *p, mm_dtype dtype, int64_t n, uint64_t seed, float scale,
                               mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (n <= 0)
        return 0;
    switch (dtype) {
    case MM_F32: k_fill_random<float><<<grid_for(n), 256, 0, s>>>((float *)p, n, seed, scale); break;
    case MM_BF16: k_fill_random<bf16><<<grid_for(n), 256, 0, s>>>((bf16 *)p, n, seed, scale); break;
    case MM_F16: k_fill_random<__half><<<grid_for(n), 256, 0, s>>>((__half *)p, n, seed, scale); break;
    case MM_I8: k_fill_random_i8<<<grid_for(n), 256, 0, s>>>((int8_t *)p, n, seed); break;
    default: return mm_fail(err, "fill_random: dtype %s not supported", mm_dtype_name(dtype));
    }
    return mmk_launched(err, "k_fill_random");
}

extern "C" int mmk_convert(int dev, mmk_stream s, void *y, mm_dtype yt, const void *x, mm_dtype xt, int64_t n,
                           mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (n <= 0)
        return 0;
    unsigned g = grid_for(n);
#define MMK_CV(TI, TO) k_convert<TI, TO><<<g, 256, 0, s>>>((TO *)y, (const TI *)x, n)
#define MMK_CV_TO(TI)                                                                                           \
    do {                                                                                                        \
        if (yt == MM_F32)                                                                                       \
            MMK_CV(TI, float);                                                                                  \
        else if (yt == MM_BF16)                                                                                 \
            MMK_CV(TI, bf16);                                                                                   \
        else if (yt == MM_F16)                                                                                  \
            MMK_CV(TI, __half);                                                                                 \
        else                                                                                                    \
            return mm_fail(err, "convert: output dtype %s not supported (f32, bf16, f16)", mm_dtype_name(yt));    \
    } while (0)
    switch (xt) {
    case MM_F32: MMK_CV_TO(float); break;
    case MM_BF16: MMK_CV_TO(bf16); break;
    case MM_F16: MMK_CV_TO(__half); break;
    case MM_I8: MMK_CV_TO(int8_t); break;
    case MM_F8_E4M3: MMK_CV_TO(__nv_fp8_e4m3); break;
    default: return mm_fail(err, "convert: input dtype %s not supported (f32, bf16, f16, i8, f8_e4m3)", mm_dtype_name(xt));
    }
#undef MMK_CV_TO
#undef MMK_CV
    return mmk_launched(err, "k_convert");
}

extern "C" int mmk_glu(int dev, mmk_stream s, int rows, int F, const mmk_bf16 *x, int64_t ldx, mmk_bf16 *y,
                       int64_t ldy, int act, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (rows <= 0 || F <= 0)
        return rows == 0 ? 0 : mm_fail(err, "glu: bad size %d×%d", rows, F);
    k_glu<<<grid_for((int64_t)rows * F), 256, 0, s>>>(rows, F, (const bf16 *)x, ldx, (bf16 *)y, ldy, act);
    return mmk_launched(err, "k_glu");
}

extern "C" int mmk_gated_add(int dev, mmk_stream s, int rows, int cols, mmk_bf16 *x, int64_t ldx, const mmk_bf16 *y,
                             int64_t ldy, const mmk_bf16 *gate, int64_t ld_gate, const int32_t *mod_idx, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (gate && !mod_idx)
        return mm_fail(err, "gated add: a gate table needs mod_idx");
    if (rows <= 0 || cols <= 0)
        return 0;
    k_gated_add<<<grid_for((int64_t)rows * cols), 256, 0, s>>>(rows, cols, (bf16 *)x, ldx, (const bf16 *)y, ldy,
                                                               (const bf16 *)gate, ld_gate, mod_idx);
    return mmk_launched(err, "k_gated_add");
}

extern "C" int mmk_activation(int dev, mmk_stream s, void *y, const void *x, mm_dtype dtype, int64_t n, int act,
                              mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (n <= 0)
        return 0;
    if (dtype == MM_BF16)
        k_activation<bf16><<<grid_for(n), 256, 0, s>>>((bf16 *)y, (const bf16 *)x, n, act);
    else if (dtype == MM_F32)
        k_activation<float><<<grid_for(n), 256, 0, s>>>((float *)y, (const float *)x, n, act);
    else
        return mm_fail(err, "activation: dtype %s not supported (bf16, f32)", mm_dtype_name(dtype));
    return mmk_launched(err, "k_activation");
}

extern "C" int mmk_embed_i8(int dev, mmk_stream s, int n, int dim, const int32_t *ids, const int8_t *table,
                            const float *scale, mmk_bf16 *y, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (n <= 0)
        return 0;
    k_embed_i8<<<grid_for((int64_t)n * dim), 256, 0, s>>>(n, dim, ids, table, scale, (bf16 *)y);
    return mmk_launched(err, "k_embed_i8");
}

extern "C" int mmk_nvfp4_to_bf16(int dev, mmk_stream s, int N, int K, int row0, int rows, const uint8_t *packed,
                                 const uint8_t *scales, float global_scale, mmk_bf16 *y, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (N % 128 || K % 64)
        return mm_fail(err, "nvfp4 decode: N=%d must be a multiple of 128 and K=%d of 64 (the 128×4 scale tiles)", N,
                       K);
    if (row0 < 0 || rows < 0 || row0 + rows > N)
        return mm_fail(err, "nvfp4 decode: rows [%d, %d) outside the weight's %d rows", row0, row0 + rows, N);
    if (rows == 0)
        return 0;
    k_nvfp4_to_bf16<<<grid_for((int64_t)rows * K / 2), 256, 0, s>>>(K, row0, rows, packed, scales, global_scale,
                                                                     (bf16 *)y);
    return mmk_launched(err, "k_nvfp4_to_bf16");
}

static const mmk_kernel_entry g_kernels[] = {
    {"convert_f32_bf16", (const void *)k_convert<float, bf16>, 80},
    {"convert_bf16_f32", (const void *)k_convert<bf16, float>, 80},
    {"glu", (const void *)k_glu, 80},
    {"gated_add", (const void *)k_gated_add, 80},
    {"activation_bf16", (const void *)k_activation<bf16>, 80},
    {"embed_i8", (const void *)k_embed_i8, 80},
    {"nvfp4_to_bf16", (const void *)k_nvfp4_to_bf16, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_elementwise(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
