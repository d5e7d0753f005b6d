/* Device code the attention kernels share (kernels/attention.cu, kernels/attn_fa3.cu,
 * kernels/attn_sparse.cu): the reductions over a quad (the four threads that hold one accumulator row
 * of an m16n8 mma.sync fragment), the rescale of those rows when the row max moves, and the Hopper
 * S = Q·Kᵀ product of the 128-key tiles. Inline helpers only: the kernels compile to what they did
 * with the same lines in place. */
#ifndef MMH3_KERNELS_ATTN_COMMON_CUH
#define MMH3_KERNELS_ATTN_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include "kernels/mma.cuh"

__device__ __forceinline__ float mmk_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float mmk_quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* The max of row r (0: g, 1: g + 8) of an mma.sync score accumulator of N 8-column tiles, over the quad. */
template <int N> __device__ __forceinline__ float mmk_acc_row_max(const float (&sc)[N][4], int r)
{
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < N; nt++)
        mx = fmaxf(mx, fmaxf(sc[nt][2 * r], sc[nt][2 * r + 1]));
    return mmk_quad_max(mx);
}

/* The same for a wgmma m64n128 score accumulator (16 column tiles of 4 values a thread). */
__device__ __forceinline__ float mmk_wg_row_max(const float (&sc)[64], int r)
{
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
        mx = fmaxf(mx, fmaxf(sc[nt * 4 + 2 * r], sc[nt * 4 + 2 * r + 1]));
    return mmk_quad_max(mx);
}

/* Row r (0: g, 1: g + 8) of an mma.sync accumulator of DT 8-column tiles, times corr. */
template <int DT> __device__ __forceinline__ void mmk_rescale_row(float (&o)[DT][4], int r, float corr)
{
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
        o[dt][2 * r] *= corr;
        o[dt][2 * r + 1] *= corr;
    }
}

/* An mma.sync accumulator of N 8-column tiles set to zero. */
template <int N> __device__ __forceinline__ void mmk_zero_acc(float (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.f;
}

/* The cp.async double buffer's turn: the next tile's copies (issued by the caller when more) committed,
 * this tile's awaited, then the CTA in step. */
__device__ __forceinline__ void mmk_cp_async_turn(bool more)
{
    if (more) {
        mmk_cp_async_commit();
        mmk_cp_async_wait<1>();
    } else {
        mmk_cp_async_wait<0>();
    }
    __syncthreads();
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d (+)= A·B, A and B from shared memory (descriptors), m64n128k16 bf16 → f32. */
__device__ __forceinline__ void mmk_wgmma_ss_bf16_n128(float d[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}
#endif

#endif
