/* Shared helpers of the CUDA translation units (never included from C). */
#ifndef MMH3_KERNELS_COMMON_CUH
#define MMH3_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/mmk.h"

/* core/error.h has no C++ guards of its own. */
extern "C" {
#include "core/error.h"
}

typedef __nv_bfloat16 bf16;

/* Fails with "<what>: <CUDA's message> (<error name>)". */
static inline int mmk_cuda_fail(mm_error *err, cudaError_t e, const char *what)
{
    return mm_fail(err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define MMK_TRY(call, err, what)                                                 \
    do {                                                                         \
        cudaError_t mmk_e_ = (call);                                             \
        if (mmk_e_ != cudaSuccess)                                               \
            return mmk_cuda_fail((err), mmk_e_, (what));                         \
    } while (0)

/* After a launch: reports configuration errors (bad grid, too much shared
 * memory, no kernel image for this device) right away. Errors inside the
 * kernel surface at the next synchronization. */
static inline int mmk_launched(mm_error *err, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return mm_fail(err, "launching %s: %s (%s)", kernel, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

static inline unsigned mmk_blocks(int64_t n, int per_block)
{
    return (unsigned)((n + per_block - 1) / per_block);
}

/* ---- device-side helpers ---- */

__device__ __forceinline__ float mmk_to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float mmk_to_f32(float v) { return v; }
__device__ __forceinline__ float mmk_to_f32(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T mmk_from_f32(float v);
template <> __device__ __forceinline__ float mmk_from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 mmk_from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half mmk_from_f32<__half>(float v) { return __float2half_rn(v); }

/* The value a bf16 tensor would hold. */
__device__ __forceinline__ float mmk_round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float mmk_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float mmk_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum / max for blocks of up to 1024 threads; every thread gets the
 * result. `scratch` holds 32 floats in shared memory. LEAD_BARRIER = false
 * leaves out the first barrier (the same shuffles and adds otherwise, so the
 * same float), for a caller that already has a block barrier between the
 * last read of this scratch and this call: one barrier per reduction. */
template <bool LEAD_BARRIER = true> __device__ __forceinline__ float mmk_block_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = mmk_warp_sum(v);
    if constexpr (LEAD_BARRIER)
        __syncthreads(); /* scratch may still be read from a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.f;
    return mmk_warp_sum(v);
}

template <bool LEAD_BARRIER = true> __device__ __forceinline__ float mmk_block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = mmk_warp_max(v);
    if constexpr (LEAD_BARRIER)
        __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return mmk_warp_max(v);
}

__device__ __forceinline__ float mmk_silu(float x) { return x / (1.f + expf(-x)); }

/* ---- views: dtype-generic element access (uniform branches) ---- */

__device__ __forceinline__ float mmk_ld(const void *p, mm_dtype t, int64_t off)
{
    switch (t) {
    case MM_BF16: return __bfloat162float(static_cast<const bf16 *>(p)[off]);
    case MM_F16: return __half2float(static_cast<const __half *>(p)[off]);
    case MM_F32: return static_cast<const float *>(p)[off];
    default: return __int_as_float(0x7fc00000);
    }
}

__device__ __forceinline__ void mmk_st(void *p, mm_dtype t, int64_t off, float v)
{
    switch (t) {
    case MM_BF16: static_cast<bf16 *>(p)[off] = __float2bfloat16_rn(v); break;
    case MM_F16: static_cast<__half *>(p)[off] = __float2half_rn(v); break;
    case MM_F32: static_cast<float *>(p)[off] = v; break;
    default: break;
    }
}

/* The value a tensor of dtype t would hold for v. */
__device__ __forceinline__ float mmk_round_to(mm_dtype t, float v)
{
    if (t == MM_BF16)
        return __bfloat162float(__float2bfloat16_rn(v));
    if (t == MM_F16)
        return __half2float(__float2half_rn(v));
    return v;
}

/* Element offset of index i in row-major order over dims [0, last] of a view. */
__device__ __forceinline__ int64_t mmk_off_upto(const mmk_view &v, int64_t i, int last)
{
    int64_t off = 0;
    for (int d = last; d >= 0; d--) {
        int64_t n = v.shape[d];
        off += (i % n) * v.stride[d];
        i /= n;
    }
    return off;
}

/* Element offset of the i-th element (row-major order) of a view. */
__device__ __forceinline__ int64_t mmk_view_off(const mmk_view &v, int64_t i) { return mmk_off_upto(v, i, v.ndim - 1); }

/* Element offset of row r (the leading dims in row-major order). */
__device__ __forceinline__ int64_t mmk_row_off(const mmk_view &v, int64_t r) { return mmk_off_upto(v, r, v.ndim - 2); }

static inline int64_t mmk_rows_of(const mmk_view &v)
{
    int64_t r = 1;
    for (int d = 0; d < v.ndim - 1; d++)
        r *= v.shape[d];
    return r;
}
static inline int64_t mmk_cols_of(const mmk_view &v) { return v.ndim ? v.shape[v.ndim - 1] : 1; }
static inline int64_t mmk_numel(const mmk_view &v)
{
    int64_t n = 1;
    for (int d = 0; d < v.ndim; d++)
        n *= v.shape[d];
    return n;
}
__host__ __device__ static inline bool mmk_is_float(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

/* Grid size for grid-stride loops over n items. */
static inline unsigned mmk_grid(int64_t n, int per_block = 256)
{
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b > 131072 ? 131072 : (b < 1 ? 1 : b));
}

/* Threads for a block that reduces one row of `cols` values. */
static inline int mmk_row_threads(int64_t cols)
{
    int t = 32;
    while (t < cols / 4 && t < 512)
        t <<= 1;
    return t;
}

#endif
