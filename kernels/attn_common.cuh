/* Device code the attention kernels share (kernels/attention.cu, kernels/attn_fa3.cu,
 * kernels/attn_sparse.cu): the reductions over a quad (the four threads that hold one accumulator row
 * of an m16n8 mma.sync fragment), the rescale of those rows when the row max moves, the Hopper
 * S = Q·Kᵀ product of the 128-key tiles, and the operand preparation of the 8-bit (fast) modes that
 * fa3 and the sparse kernels share: k and v statistics, int8 codes, the e4m3 Vᵀ copy's key order and
 * P's fragments in it. Inline helpers only: the kernels compile to what they did with the same lines
 * in place (SASS compared function by function). */
#ifndef MMH3_KERNELS_ATTN_COMMON_CUH
#define MMH3_KERNELS_ATTN_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"
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

/* ---- 8-bit modes: operand preparation (head dim 128) */

/* The k and v statistics' first pass, one (block b, kv head hk, channel c): Σ k, Σ v and v's extremes
 * into part[b][hk][0..3][c] (heads_kv heads). */
__device__ __forceinline__ void mmk_kv_partial_store(float *part, int b, int heads_kv, int hk, int c, float sk, float sv,
                                                     float mx, float mn)
{
    float *out = part + ((int64_t)b * heads_kv + hk) * 4 * 128;
    out[c] = sk;
    out[128 + c] = sv;
    out[2 * 128 + c] = mx;
    out[3 * 128 + c] = mn;
}

/* Its second pass: the n_parts blocks' values of (hk, c) summed (and their extremes taken) in block order,
 * so that the same inputs give the same bits. */
__device__ __forceinline__ void mmk_kv_partial_sum(const float *part, int n_parts, int heads_kv, int hk, int c, float &sk,
                                                   float &sv, float &mx, float &mn)
{
    sk = 0.f, sv = 0.f, mx = -INFINITY, mn = INFINITY;
    for (int b = 0; b < n_parts; b++) {
        const float *in = part + ((int64_t)b * heads_kv + hk) * 4 * 128;
        sk += in[c];
        sv += in[128 + c];
        mx = fmaxf(mx, in[2 * 128 + c]);
        mn = fminf(mn, in[3 * 128 + c]);
    }
}

/* Four values as int8 codes (low byte first): the values are inside ±127 by construction, the clamp guards
 * rounding. */
__device__ __forceinline__ uint32_t mmk_pack_i8x4(float a, float b, float c, float d)
{
    auto q = [](float x) { return (uint32_t)(uint8_t)(int8_t)max(-127, min(127, __float2int_rn(x))); };
    return q(a) | q(b) << 8 | q(c) << 16 | q(d) << 24;
}

/* x[0..7] · inv as 8 int8 codes (for one 8-byte store). */
__device__ __forceinline__ uint2 mmk_i8x8(const float *x, float inv)
{
    uint2 w;
    w.x = mmk_pack_i8x4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    w.y = mmk_pack_i8x4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv);
    return w;
}

/* Key order inside a group of 32 in the e4m3 Vᵀ copies: logical column k = 4t + i (+16) holds key 2t + i
 * for i < 2, 8 + 2t + (i − 2) otherwise (+16) — the keys thread t of a quad holds in its score
 * accumulators, so that those, converted in place, are the A fragments of the e4m3 P·V (which key a
 * register holds does not matter to a sum over keys, as long as P and V agree). */
__device__ __forceinline__ int mmk_perm32(int k)
{
    const int hi = k & 16, t = (k & 15) >> 2, i = k & 3;
    return hi + (i < 2 ? 2 * t + i : 8 + 2 * t + i - 2);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "kernels/wgmma.cuh"

/* The e4m3 Vᵀ copy of a 32-key tile of kv head h (tile[key][dim], already smoothed and scaled), by a CTA of
 * 256 threads: dst[(h·128 + d)·ld + j0 + k] = e4m3(tile[perm(k)][d]). */
__device__ __forceinline__ void mmk_store_vt8_tile(const float (&tile)[32][129], uint8_t *dst, int h, int64_t ld, int j0)
{
    for (int it = threadIdx.x; it < 128 * 8; it += 256) {
        const int d = it >> 3, c = it & 7;
        const uint32_t w = mmk_pack_e4m3x4(tile[mmk_perm32(4 * c)][d], tile[mmk_perm32(4 * c + 1)][d],
                                           tile[mmk_perm32(4 * c + 2)][d], tile[mmk_perm32(4 * c + 3)][d]);
        *reinterpret_cast<uint32_t *>(dst + ((int64_t)h * 128 + d) * ld + j0 + 4 * c) = w;
    }
}

/* P of a 128-key score tile (P·2^8) → the e4m3 A fragments of P·V in that order: k-step kk covers the 32
 * keys of score tiles 4kk..4kk + 3 (register 0 = row g: tile 4kk columns 2t, 2t + 1, then tile 4kk + 1's). */
template <int NP> __device__ __forceinline__ void mmk_pack_p_e4m3(uint32_t (&pa)[NP], const float (&sc)[64])
{
    static_assert(NP >= 16, "16 A registers for 128 keys");
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const float *a = &sc[16 * kk];
        pa[kk * 4 + 0] = mmk_pack_e4m3x4(a[0], a[1], a[4], a[5]);
        pa[kk * 4 + 1] = mmk_pack_e4m3x4(a[2], a[3], a[6], a[7]);
        pa[kk * 4 + 2] = mmk_pack_e4m3x4(a[8], a[9], a[12], a[13]);
        pa[kk * 4 + 3] = mmk_pack_e4m3x4(a[10], a[11], a[14], a[15]);
    }
}

/* d (+)= A·B, A and B from shared memory (descriptors), m64n128k16 bf16 → f32. */
__device__ __forceinline__ void mmk_wgmma_ss_bf16_n128(float d[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}
#endif

/* ---- host */

/* Device temporaries of one call of the fa3 or the sparse attention (at most N; `what` names the caller in
 * the error), returned once the work is queued (every user is on the same stream). */
template <int N> struct MmkTemps {
    int dev;
    const char *what;
    void *p[N];
    int n;
    void *get(size_t bytes, mm_error *err)
    {
        if (n == N) {
            mm_fail(err, "%s: too many temporaries", what);
            return nullptr;
        }
        void *q = mm_cuda_malloc(dev, bytes ? bytes : 16, err);
        if (q)
            p[n++] = q;
        return q;
    }
    ~MmkTemps()
    {
        for (int i = 0; i < n; i++)
            mm_cuda_free(dev, p[i]);
    }
};

#endif
