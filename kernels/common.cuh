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
 * result. `scratch` holds 32 floats in shared memory. */
__device__ __forceinline__ float mmk_block_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = mmk_warp_sum(v);
    __syncthreads(); /* scratch may still be read from a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.f;
    return mmk_warp_sum(v);
}

__device__ __forceinline__ float mmk_block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = mmk_warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return mmk_warp_max(v);
}

__device__ __forceinline__ float mmk_silu(float x) { return x / (1.f + expf(-x)); }

#endif
