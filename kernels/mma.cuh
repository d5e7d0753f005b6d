/* Warp-level tensor-core building blocks (sm_80+): cp.async copies,
 * ldmatrix, and the m16n8k16 bf16 / m16n8k32 int8 mma.sync instructions.
 *
 * Fragment layouts (PTX ISA, "mma.m16n8k16"): with g = lane / 4 and
 * t = lane % 4,
 *   A 16×16: a[0] = (row g,   cols 2t, 2t+1)   a[1] = (row g+8, cols 2t, 2t+1)
 *            a[2] = (row g,   cols 2t+8, +9)   a[3] = (row g+8, cols 2t+8, +9)
 *   B 16×8:  b[0] = (rows 2t, 2t+1, col g)     b[1] = (rows 2t+8, 2t+9, col g)
 *   C 16×8:  c[0], c[1] = (row g, cols 2t, 2t+1)   c[2], c[3] = (row g+8, same cols)
 * (each a[i] / b[i] is one 32-bit register holding two bf16).
 */
#ifndef MMH3_KERNELS_MMA_CUH
#define MMH3_KERNELS_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t mmk_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte asynchronous copy global → shared; src_bytes < 16 zero-fills the
 * rest (0 = all zeros, for rows past the end). */
__device__ __forceinline__ void mmk_cp_async16(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mmk_smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void mmk_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void mmk_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mmk_ldmatrix_x4(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mmk_smem_addr(smem)));
}
__device__ __forceinline__ void mmk_ldmatrix_x4_trans(uint32_t r[4], const void *smem)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mmk_smem_addr(smem)));
}

/* c += a·b, bf16 inputs, f32 accumulators. */
__device__ __forceinline__ void mmk_mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* c += a·b, f16 inputs, f32 accumulators. */
__device__ __forceinline__ void mmk_mma_f16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two floats → one register of two f16 (low half = first). */
__device__ __forceinline__ uint32_t mmk_pack_f16(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Two floats → one register of two bf16 (low half = first). */
__device__ __forceinline__ uint32_t mmk_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* The element type's MMA and packing. */
template <typename T> struct MmkMma;
template <> struct MmkMma<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) { mmk_mma_bf16(c, a, b); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return mmk_pack_bf16(lo, hi); }
};
template <> struct MmkMma<__half> {
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) { mmk_mma_f16(c, a, b); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return mmk_pack_f16(lo, hi); }
};

#endif
