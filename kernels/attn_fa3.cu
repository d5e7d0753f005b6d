/* The DiT's attention on Hopper, FlashAttention-3 in structure (issue 9;
 * contract in kernels/mmk_fa3.h).
 *
 * One CTA = 128 query rows of one head, 384 threads in three warpgroups:
 *   - warpgroup 0, the producer: one thread issues TMA copies (Q once, then
 *     K and Vᵀ tiles of 128 keys into a two-stage ring), completing on
 *     mbarriers; the warpgroup gives most of its registers away (setmaxnreg);
 *   - warpgroups 1 and 2, the consumers: 64 query rows each. Per key tile j
 *     a consumer issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} back to back,
 *     waits for S_j only, runs the softmax of tile j while P·V still runs on
 *     the tensor cores, then waits for P·V, rescales O and converts P_j
 *     (the intra-warpgroup overlap); with ping-pong the two consumers take
 *     turns issuing (named barriers), so one's softmax hides behind the
 *     other's products.
 * Stages are handed back through "empty" mbarriers that all 256 consumer
 * threads arrive on once they are done with a tile.
 *
 * Vᵀ: the P·V product needs V K-major (keys contiguous), so V is transposed
 * once per call into a [kv head · 128 dims][keys] copy (exact mode; ≈ 1% of
 * the attention time at S = 38k); fast mode quantizes into e4m3 in the same
 * pass and permutes the keys inside each group of 32 so that the f32
 * accumulators of S_j, converted in place, are already the A fragment of the
 * e4m3 P·V (which key a register holds does not matter to a sum over keys,
 * as long as P and V agree).
 *
 * Softmax: fp32, scores scaled by scale·log2 e (times the tile's q·k
 * dequantization scales in fast mode) inside the exponent (ex2.approx);
 * keys past the end of the sequence (the last tile; TMA fills them with
 * zeros) are masked to −∞. The CPU twin is the exact softmax of
 * src/backend/cpu/ (mm_attention); tests/unit/test_speed_attention.c
 * compares them on the device.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/mmk_fa3.h"
#include "kernels/tma_host.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMK_FA3_DEVICE 1
#include "kernels/wgmma.cuh"
#endif

namespace {

constexpr int kBM = 128, kBN = 128, kD = 128; /* query rows, keys per tile, head dim */
constexpr int kStages = 2;
constexpr int kThreads = 384;
constexpr int kRegsProducer = 24, kRegsConsumer = 240;
constexpr float kFp8Max = 448.f;

template <bool FP8> struct Fa3Tile {
    static constexpr int kBytes = kBM * kD * (FP8 ? 1 : 2); /* one Q, K or Vᵀ tile (kBM = kBN = kD) */
    static constexpr int kSmem = kBytes * (1 + 2 * kStages) + 1024;
};

struct Fa3Params {
    int seq, heads, heads_kv, n_kb;
    float scale_log2;
    bf16 *o;
    int64_t ldo;
    const float *q_scale; /* fast mode: [heads][n_kb] */
    const float *k_scale; /* fast mode: [heads_kv][n_kb] */
    const float *v_amax;  /* fast mode: [heads_kv · 128] */
};

#ifdef MMK_FA3_DEVICE
/* S = Q·Kᵀ for this warpgroup's 64 rows: 8 k-steps of 16 (bf16, two 64-wide
 * halves per tile) or 4 of 32 (e4m3, one 128-byte row). */
template <bool FP8> __device__ __forceinline__ void fa3_issue_s(float (&sc)[64], uint32_t q_addr, uint32_t k_addr)
{
    constexpr int T = Fa3Tile<FP8>::kBytes;
    if constexpr (FP8) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            mmk_wgmma_ss_e4m3(sc, mmk_desc_sw128(q_addr + kk * 32), mmk_desc_sw128(k_addr + kk * 32), kk > 0);
    } else {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t off = (kk >> 2) * (T / 2) + (kk & 3) * 32;
            mmk_wgmma_ss_bf16(sc, mmk_desc_sw128(q_addr + off), mmk_desc_sw128(k_addr + off), kk > 0);
        }
    }
}

/* acc (+)= P·V over one tile of 128 keys; fast mode starts acc at zero. */
template <bool FP8> __device__ __forceinline__ void fa3_issue_pv(float (&acc)[64], const uint32_t (&pa)[32], uint32_t v_addr)
{
    constexpr int T = Fa3Tile<FP8>::kBytes;
    if constexpr (FP8) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            mmk_wgmma_rs_e4m3(acc, &pa[kk * 4], mmk_desc_sw128(v_addr + kk * 32), kk > 0);
    } else {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t off = (kk >> 2) * (T / 2) + (kk & 3) * 32;
            mmk_wgmma_rs_bf16(acc, &pa[kk * 4], mmk_desc_sw128(v_addr + off), 1);
        }
    }
}

/* Online softmax of one score tile in place (scores → unnormalized
 * probabilities), per thread's two rows (g, g + 8). corr[r] = exp2(m_old −
 * m_new) for the running output; l[r] is updated (this thread's columns). */
template <bool FP8>
__device__ __forceinline__ void fa3_softmax(float (&sc)[64], float (&m)[2], float (&l)[2], float (&corr)[2], float sl,
                                            int key0, int seq, int t)
{
    if (key0 + kBN > seq) {
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + nt * 8 + 2 * t + (e & 1) >= seq)
                    sc[nt * 4 + e] = -INFINITY;
    }
    /* e4m3 P: exponents offset by 8 (values up to 256) so that small
     * probabilities stay above e4m3's subnormal range; cancels in O / l. */
    constexpr float kOffset = FP8 ? 8.f : 0.f;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
            mx = fmaxf(mx, fmaxf(sc[nt * 4 + 2 * r], sc[nt * 4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(m[r], mx * sl);
        float m_use = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = mmk_exp2_approx(m[r] - m_use);
        m[r] = m_new;
        float neg = kOffset - m_use, sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            float p0 = mmk_exp2_approx(fmaf(sc[nt * 4 + 2 * r], sl, neg));
            float p1 = mmk_exp2_approx(fmaf(sc[nt * 4 + 2 * r + 1], sl, neg));
            sc[nt * 4 + 2 * r] = p0;
            sc[nt * 4 + 2 * r + 1] = p1;
            sum += p0 + p1;
        }
        l[r] = l[r] * corr[r] + sum;
    }
}

/* Probabilities → the A fragments of P·V. bf16: k-step kk covers keys
 * 16kk..16kk+15 (columns of score tiles nt = 2kk, 2kk+1). e4m3: k-step kk
 * covers the 32 keys of nt = 4kk..4kk+3 in the permuted order the Vᵀ copy
 * uses (register 0 = row g: nt 4kk cols 2t,2t+1 then nt 4kk+1 cols 2t,2t+1). */
template <bool FP8> __device__ __forceinline__ void fa3_pack_p(uint32_t (&pa)[32], const float (&sc)[64])
{
    if constexpr (FP8) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const float *a = &sc[16 * kk];
            pa[kk * 4 + 0] = mmk_pack_e4m3x4(a[0], a[1], a[4], a[5]);
            pa[kk * 4 + 1] = mmk_pack_e4m3x4(a[2], a[3], a[6], a[7]);
            pa[kk * 4 + 2] = mmk_pack_e4m3x4(a[8], a[9], a[12], a[13]);
            pa[kk * 4 + 3] = mmk_pack_e4m3x4(a[10], a[11], a[14], a[15]);
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const float *a = &sc[8 * kk];
            pa[kk * 4 + 0] = mmk_pack_bf16(a[0], a[1]);
            pa[kk * 4 + 1] = mmk_pack_bf16(a[2], a[3]);
            pa[kk * 4 + 2] = mmk_pack_bf16(a[4], a[5]);
            pa[kk * 4 + 3] = mmk_pack_bf16(a[6], a[7]);
        }
    }
}
#endif

template <bool FP8, bool PINGPONG>
__global__ void __launch_bounds__(kThreads, 1)
    k_fa3(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
          const __grid_constant__ CUtensorMap tmV, const Fa3Params p)
{
#ifdef MMK_FA3_DEVICE
    constexpr int T = Fa3Tile<FP8>::kBytes;
    extern __shared__ __align__(1024) unsigned char fa3_smem[];
    __shared__ __align__(8) uint64_t bars[1 + 4 * kStages];
    unsigned char *base = (unsigned char *)(((uintptr_t)fa3_smem + 1023) & ~(uintptr_t)1023);
    const uint32_t sQ = mmk_smem_addr(base), sK = sQ + T, sV = sQ + (1 + kStages) * T;
    /* barriers: Q full; K full ×S; V full ×S; K empty ×S; V empty ×S */
    const uint32_t bQ = mmk_smem_addr(&bars[0]);
#define FULL_K(s) (bQ + 8u * (1 + (s)))
#define FULL_V(s) (bQ + 8u * (1 + kStages + (s)))
#define EMPTY_K(s) (bQ + 8u * (1 + 2 * kStages + (s)))
#define EMPTY_V(s) (bQ + 8u * (1 + 3 * kStages + (s)))
    const int mb = blockIdx.x, h = blockIdx.y, hk = h / (p.heads / p.heads_kv);
    const int n_kb = p.n_kb;

    if (threadIdx.x == 0) {
        mmk_mbar_init(bQ, 1);
        for (int s = 0; s < kStages; s++) {
            mmk_mbar_init(FULL_K(s), 1);
            mmk_mbar_init(FULL_V(s), 1);
            mmk_mbar_init(EMPTY_K(s), 256);
            mmk_mbar_init(EMPTY_V(s), 256);
        }
        mmk_mbar_init_fence();
    }
    __syncthreads();

    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        /* ---------------- producer ---------------- */
        mmk_regs_dealloc<kRegsProducer>();
        if (threadIdx.x == 0) {
            mmk_tma_prefetch_map(&tmQ);
            mmk_tma_prefetch_map(&tmK);
            mmk_tma_prefetch_map(&tmV);
            mmk_mbar_expect_tx(bQ, T);
            mmk_tma_load_2d(sQ, &tmQ, bQ, h * kD, mb * kBM);
            if (!FP8)
                mmk_tma_load_2d(sQ + T / 2, &tmQ, bQ, h * kD + 64, mb * kBM);
            for (int j = 0; j < n_kb; j++) {
                const int s = j % kStages;
                const uint32_t parity = ((j / kStages) & 1) ^ 1;
                mmk_mbar_wait(EMPTY_K(s), parity);
                mmk_mbar_expect_tx(FULL_K(s), T);
                mmk_tma_load_2d(sK + s * T, &tmK, FULL_K(s), hk * kD, j * kBN);
                if (!FP8)
                    mmk_tma_load_2d(sK + s * T + T / 2, &tmK, FULL_K(s), hk * kD + 64, j * kBN);
                mmk_mbar_wait(EMPTY_V(s), parity);
                mmk_mbar_expect_tx(FULL_V(s), T);
                mmk_tma_load_2d(sV + s * T, &tmV, FULL_V(s), j * kBN, hk * kD);
                if (!FP8)
                    mmk_tma_load_2d(sV + s * T + T / 2, &tmV, FULL_V(s), j * kBN + 64, hk * kD);
            }
        }
        return;
    }

    /* ---------------- consumers ---------------- */
    mmk_regs_alloc<kRegsConsumer>();
    const int cw = wg - 1; /* 0 or 1: rows cw·64 .. cw·64 + 63 of the CTA */
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t q_addr = sQ + cw * 64 * 128;
    /* ping-pong: warpgroup cw waits on barrier 1 + cw, and lets the other go
     * through barrier 2 − cw after issuing */
    const int bar_mine = 1 + cw, bar_other = 2 - cw;

    float o[64], sc[64];
    float ot[FP8 ? 64 : 1]; /* fast mode: this tile's P·V before it joins o */
    uint32_t pa[32];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2] = {0.f, 0.f}, corr_prev[2] = {0.f, 0.f};
    float sl = p.scale_log2;
    const float qs = FP8 ? p.q_scale[(int64_t)h * n_kb + mb] : 1.f;
    const float *ks = FP8 ? p.k_scale + (int64_t)hk * n_kb : nullptr;

    if (PINGPONG && cw == 1)
        mmk_bar_arrive(1, 256); /* warpgroup 0 issues first */
    mmk_mbar_wait(bQ, 0);

    /* tile 0: S only */
    mmk_mbar_wait(FULL_K(0), 0);
    if (PINGPONG)
        mmk_bar_sync(bar_mine, 256);
    mmk_wgmma_fence();
    fa3_issue_s<FP8>(sc, q_addr, sK);
    mmk_wgmma_commit();
    if (PINGPONG)
        mmk_bar_arrive(bar_other, 256);
    mmk_wgmma_wait<0>();
    mmk_fence_regs(sc);
    mmk_mbar_arrive(EMPTY_K(0));
    if (FP8)
        sl = p.scale_log2 * qs * ks[0];
    fa3_softmax<FP8>(sc, m, l, corr, sl, 0, p.seq, t);
    corr_prev[0] = corr[0];
    corr_prev[1] = corr[1];
    fa3_pack_p<FP8>(pa, sc);

    for (int j = 1; j < n_kb; j++) {
        const int s = j % kStages, sp = (j - 1) % kStages;
        mmk_mbar_wait(FULL_K(s), (j / kStages) & 1);
        mmk_mbar_wait(FULL_V(sp), ((j - 1) / kStages) & 1);
        if (PINGPONG)
            mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        fa3_issue_s<FP8>(sc, q_addr, sK + s * T);
        mmk_wgmma_commit();
        if constexpr (FP8)
            fa3_issue_pv<FP8>(ot, pa, sV + sp * T);
        else
            fa3_issue_pv<FP8>(o, pa, sV + sp * T);
        mmk_wgmma_commit();
        if (PINGPONG)
            mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<1>(); /* S_j done; P·V of tile j − 1 may still run */
        mmk_fence_regs(sc);
        mmk_mbar_arrive(EMPTY_K(s));
        if (FP8)
            sl = p.scale_log2 * qs * ks[j];
        fa3_softmax<FP8>(sc, m, l, corr, sl, j * kBN, p.seq, t);
        mmk_wgmma_wait<0>();
        if constexpr (FP8) {
            mmk_fence_regs(ot);
            mmk_fence_regs(o);
            /* o was relative to the max of tile j − 2, ot to that of j − 1 */
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] = fmaf(o[i], corr_prev[(i >> 1) & 1], ot[i]);
            corr_prev[0] = corr[0];
            corr_prev[1] = corr[1];
        } else {
            mmk_fence_regs(o);
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] *= corr[(i >> 1) & 1];
        }
        mmk_mbar_arrive(EMPTY_V(sp));
        fa3_pack_p<FP8>(pa, sc);
    }

    /* the last tile's P·V */
    {
        const int sl_ = (n_kb - 1) % kStages;
        mmk_mbar_wait(FULL_V(sl_), ((n_kb - 1) / kStages) & 1);
        if (PINGPONG)
            mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        if constexpr (FP8)
            fa3_issue_pv<FP8>(ot, pa, sV + sl_ * T);
        else
            fa3_issue_pv<FP8>(o, pa, sV + sl_ * T);
        mmk_wgmma_commit();
        if (PINGPONG)
            mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<0>();
        if constexpr (FP8) {
            mmk_fence_regs(ot);
            mmk_fence_regs(o);
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] = fmaf(o[i], corr_prev[(i >> 1) & 1], ot[i]);
        } else {
            mmk_fence_regs(o);
        }
        mmk_mbar_arrive(EMPTY_V(sl_));
    }
    if (PINGPONG && cw == 0)
        mmk_bar_sync(1, 256); /* warpgroup 1's last arrive */

    /* ---------------- epilogue: O / l (· v scale), bf16 ---------------- */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float s = l[r];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        float inv = s > 0.f ? 1.f / s : 0.f;
        int row = mb * kBM + cw * 64 + warp * 16 + g + 8 * r;
        if (row >= p.seq)
            continue;
        bf16 *orow = p.o + (int64_t)row * p.ldo + (int64_t)h * kD;
#pragma unroll
        for (int dt = 0; dt < 16; dt++) {
            int c = dt * 8 + 2 * t;
            float v0 = o[dt * 4 + 2 * r] * inv, v1 = o[dt * 4 + 2 * r + 1] * inv;
            if (FP8) {
                float a0 = p.v_amax[hk * kD + c], a1 = p.v_amax[hk * kD + c + 1];
                v0 *= a0 > 0.f ? a0 / kFp8Max : 1.f;
                v1 *= a1 > 0.f ? a1 / kFp8Max : 1.f;
            }
            *reinterpret_cast<__nv_bfloat162 *>(orow + c) = __floats2bfloat162_rn(v0, v1);
        }
    }
#undef FULL_K
#undef FULL_V
#undef EMPTY_K
#undef EMPTY_V
#else
    (void)p;
    __trap(); /* never launched: the host picks this kernel only on sm_90 with sm_90a code */
#endif
}

/* ------------------------------------------------------------------ operand preparation */

/* Exact mode: vt[(h·128 + d)·ld_vt + j] = v[j, h, d] (32 keys × 32 dims per
 * step through shared memory). */
__global__ void k_fa3_vt_bf16(const bf16 *__restrict__ v, int64_t ldv, int seq, bf16 *__restrict__ vt, int64_t ld_vt)
{
    __shared__ bf16 tile[32][33];
    int h = blockIdx.z, d0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5; /* 32 × 8 */
    for (int k = ty; k < 32; k += 8) {
        int j = j0 + k;
        tile[k][tx] = j < seq ? v[(int64_t)j * ldv + (int64_t)h * kD + d0 + tx] : __float2bfloat16_rn(0.f);
    }
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
        int j = j0 + tx;
        if (j < seq)
            vt[((int64_t)h * kD + d0 + k) * ld_vt + j] = tile[tx][k];
    }
}

__device__ __forceinline__ void unpack8(const bf16 *src, float *v)
{
    uint4 u = *reinterpret_cast<const uint4 *>(src);
    const bf16 *b = reinterpret_cast<const bf16 *>(&u);
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = __bfloat162float(b[i]);
}

/* Fast mode, q or k: x8 [seq, heads·128] e4m3 = x / s per (head, block of
 * 128 rows), s = amax/448 (1 for an all-zero block) into scales[h][block]. */
__global__ void __launch_bounds__(256) k_fa3_quant_rows(const bf16 *__restrict__ x, int64_t ld, int seq, int heads,
                                                        uint8_t *__restrict__ x8, float *__restrict__ scales,
                                                        int n_blocks)
{
#ifdef MMK_FA3_DEVICE
    __shared__ float red[32];
    const int b = blockIdx.x, h = blockIdx.y;
    float v[64];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int chunk = threadIdx.x + i * 256, r = chunk >> 4, c = (chunk & 15) * 8, row = b * kBM + r;
        if (row < seq)
            unpack8(x + (int64_t)row * ld + (int64_t)h * kD + c, &v[i * 8]);
        else
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[i * 8 + e] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            amax = fmaxf(amax, fabsf(v[i * 8 + e]));
    }
    amax = mmk_block_max(amax, red);
    const float inv = amax > 0.f ? kFp8Max / amax : 1.f;
    if (threadIdx.x == 0)
        scales[(int64_t)h * n_blocks + b] = amax > 0.f ? amax / kFp8Max : 1.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int chunk = threadIdx.x + i * 256, r = chunk >> 4, c = (chunk & 15) * 8, row = b * kBM + r;
        if (row >= seq)
            continue;
        const float *a = &v[i * 8];
        uint2 w;
        w.x = mmk_pack_e4m3x4(a[0] * inv, a[1] * inv, a[2] * inv, a[3] * inv);
        w.y = mmk_pack_e4m3x4(a[4] * inv, a[5] * inv, a[6] * inv, a[7] * inv);
        *reinterpret_cast<uint2 *>(x8 + (int64_t)row * heads * kD + (int64_t)h * kD + c) = w;
    }
#else
    (void)x, (void)ld, (void)seq, (void)heads, (void)x8, (void)scales, (void)n_blocks;
    __trap();
#endif
}

/* Fast mode, v: per (kv head, channel) absolute maximum over all keys, as
 * the bits of a non-negative float (atomicMax on the bits orders them). */
__global__ void k_fa3_v_amax(const bf16 *__restrict__ v, int64_t ldv, int seq, unsigned *__restrict__ amax_bits)
{
    const int d = threadIdx.x, h = blockIdx.y, j0 = blockIdx.x * 256;
    const int j1 = j0 + 256 < seq ? j0 + 256 : seq;
    float mx = 0.f;
    for (int j = j0; j < j1; j++)
        mx = fmaxf(mx, fabsf(__bfloat162float(v[(int64_t)j * ldv + (int64_t)h * kD + d])));
    atomicMax(&amax_bits[h * kD + d], __float_as_uint(mx));
}

/* Key order inside a group of 32 in the e4m3 Vᵀ copy: logical column
 * k = 4t + i (+16) holds key 2t + i for i < 2, 8 + 2t + (i − 2) otherwise
 * (+16) — the keys thread t of a quad holds in its score accumulators. */
__device__ __forceinline__ int fa3_perm32(int k)
{
    int hi = k & 16, t = (k & 15) >> 2, i = k & 3;
    return hi + (i < 2 ? 2 * t + i : 8 + 2 * t + i - 2);
}

/* Fast mode: vt8[(h·128 + d)·ld_vt + 32b + k] = e4m3(v[32b + perm(k), h, d] /
 * s[h, d]), zero for keys past seq (the copy is ld_vt = whole tiles wide). */
__global__ void __launch_bounds__(256) k_fa3_v_quant_t(const bf16 *__restrict__ v, int64_t ldv, int seq,
                                                       const float *__restrict__ v_amax, uint8_t *__restrict__ vt8,
                                                       int64_t ld_vt)
{
#ifdef MMK_FA3_DEVICE
    __shared__ float tile[32][kD + 1];
    const int j0 = blockIdx.x * 32, h = blockIdx.y;
    for (int c = threadIdx.x; c < 32 * 16; c += 256) {
        int key = c >> 4, d0 = (c & 15) * 8, j = j0 + key;
        float x[8];
        if (j < seq)
            unpack8(v + (int64_t)j * ldv + (int64_t)h * kD + d0, x);
        else
#pragma unroll
            for (int e = 0; e < 8; e++)
                x[e] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float a = v_amax[h * kD + d0 + e];
            tile[key][d0 + e] = a > 0.f ? x[e] * (kFp8Max / a) : 0.f;
        }
    }
    __syncthreads();
    for (int it = threadIdx.x; it < kD * 8; it += 256) {
        int d = it >> 3, c = it & 7;
        uint32_t w = mmk_pack_e4m3x4(tile[fa3_perm32(4 * c)][d], tile[fa3_perm32(4 * c + 1)][d],
                                     tile[fa3_perm32(4 * c + 2)][d], tile[fa3_perm32(4 * c + 3)][d]);
        *reinterpret_cast<uint32_t *>(vt8 + ((int64_t)h * kD + d) * ld_vt + j0 + 4 * c) = w;
    }
#else
    (void)v, (void)ldv, (void)seq, (void)v_amax, (void)vt8, (void)ld_vt;
    __trap();
#endif
}

/* ------------------------------------------------------------------ host */

template <bool FP8, bool PP>
int launch(const CUtensorMap &q, const CUtensorMap &k, const CUtensorMap &v, const Fa3Params &p, int n_mb,
           cudaStream_t s, mm_error *err)
{
    MMK_TRY(cudaFuncSetAttribute(k_fa3<FP8, PP>, cudaFuncAttributeMaxDynamicSharedMemorySize, Fa3Tile<FP8>::kSmem),
            err, "raising the shared-memory limit of the fa3 attention kernel");
    dim3 grid(n_mb, p.heads);
    k_fa3<FP8, PP><<<grid, kThreads, Fa3Tile<FP8>::kSmem, s>>>(q, k, v, p);
    return mmk_launched(err, FP8 ? "k_fa3 (e4m3)" : "k_fa3 (bf16)");
}

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Device temporaries of one call, returned once the work is queued (every
 * user is on the same stream). */
struct Temps {
    int dev;
    void *p[8];
    int n;
    void *get(size_t bytes, mm_error *err)
    {
        if (n == 8) {
            mm_fail(err, "attention (fa3): too many temporaries");
            return nullptr;
        }
        void *q = mm_cuda_malloc(dev, bytes ? bytes : 16, err);
        if (q)
            p[n++] = q;
        return q;
    }
    ~Temps()
    {
        for (int i = 0; i < n; i++)
            mm_cuda_free(dev, p[i]);
    }
};

} // namespace

extern "C" int mmk_fa3_usable(int dev)
{
    static int cached[64];
    if (dev < 0 || dev >= 64)
        return 0;
    if (!cached[dev]) {
        cudaDeviceProp prop;
        cudaFuncAttributes fa;
        bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 &&
                  cudaFuncGetAttributes(&fa, k_fa3<false, true>) == cudaSuccess && fa.binaryVersion >= 90;
        cudaGetLastError();
        cached[dev] = ok ? 1 : 2;
    }
    return cached[dev] == 1;
}

extern "C" int mmk_fa3_run(int dev, mmk_stream st, const mmk_fa3 *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!mmk_fa3_usable(dev))
        return mm_fail(err, "attention (fa3): needs an sm_90 GPU and sm_90a code in this build");
    if (a->seq <= 0)
        return 0;
    if (a->heads <= 0 || a->heads_kv <= 0 || a->heads % a->heads_kv)
        return mm_fail(err, "attention (fa3): %d query heads cannot share %d kv heads evenly", a->heads, a->heads_kv);
    if (!al16(a->q) || !al16(a->k) || !al16(a->v) || !al16(a->o) || a->ldq % 8 || a->ldk % 8 || a->ldv % 8 ||
        a->ldo % 8)
        return mm_fail(err, "attention (fa3): q, k, v, o must be 16-byte aligned with row strides that are multiples "
                       "of 8 elements");
    cudaStream_t s = (cudaStream_t)st;
    const int n_kb = (a->seq + kBN - 1) / kBN;
    const bool pp = a->pingpong != 0;
    Fa3Params p;
    memset(&p, 0, sizeof p);
    p.seq = a->seq;
    p.heads = a->heads;
    p.heads_kv = a->heads_kv;
    p.n_kb = n_kb;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    p.o = (bf16 *)a->o;
    p.ldo = a->ldo;
    Temps tmp = {dev, {nullptr}, 0};
    CUtensorMap mq, mk, mv;
    if (!a->fp8) {
        const int64_t ld_vt = (a->seq + 7) / 8 * 8;
        bf16 *vt = (bf16 *)tmp.get((size_t)a->heads_kv * kD * ld_vt * sizeof(bf16), err);
        if (!vt)
            return -1;
        dim3 tg((a->seq + 31) / 32, kD / 32, a->heads_kv);
        k_fa3_vt_bf16<<<tg, 256, 0, s>>>((const bf16 *)a->v, a->ldv, a->seq, vt, ld_vt);
        if (mmk_launched(err, "k_fa3_vt_bf16"))
            return -1;
        if (mmk_tma_map_2d(&mq, false, a->q, (uint64_t)a->heads * kD, a->seq, (uint64_t)a->ldq * 2, 64, kBM, err) ||
            mmk_tma_map_2d(&mk, false, a->k, (uint64_t)a->heads_kv * kD, a->seq, (uint64_t)a->ldk * 2, 64, kBN, err) ||
            mmk_tma_map_2d(&mv, false, vt, (uint64_t)a->seq, (uint64_t)a->heads_kv * kD, (uint64_t)ld_vt * 2, 64, kD, err))
            return -1;
        return pp ? launch<false, true>(mq, mk, mv, p, n_kb, s, err) : launch<false, false>(mq, mk, mv, p, n_kb, s, err);
    }
    /* fast mode: e4m3 copies of q, k and the permuted, transposed v */
    const int64_t ld_vt = (int64_t)n_kb * kBN;
    uint8_t *q8 = (uint8_t *)tmp.get((size_t)a->seq * a->heads * kD, err);
    uint8_t *k8 = (uint8_t *)tmp.get((size_t)a->seq * a->heads_kv * kD, err);
    uint8_t *vt8 = (uint8_t *)tmp.get((size_t)a->heads_kv * kD * ld_vt, err);
    float *qs = (float *)tmp.get((size_t)a->heads * n_kb * 4, err);
    float *ks = (float *)tmp.get((size_t)a->heads_kv * n_kb * 4, err);
    float *vamax = (float *)tmp.get((size_t)a->heads_kv * kD * 4, err);
    if (!q8 || !k8 || !vt8 || !qs || !ks || !vamax)
        return -1;
    MMK_TRY(cudaMemsetAsync(vamax, 0, (size_t)a->heads_kv * kD * 4, s), err, "clearing the v maxima");
    k_fa3_quant_rows<<<dim3(n_kb, a->heads), 256, 0, s>>>((const bf16 *)a->q, a->ldq, a->seq, a->heads, q8, qs, n_kb);
    if (mmk_launched(err, "k_fa3_quant_rows (q)"))
        return -1;
    k_fa3_quant_rows<<<dim3(n_kb, a->heads_kv), 256, 0, s>>>((const bf16 *)a->k, a->ldk, a->seq, a->heads_kv, k8, ks,
                                                              n_kb);
    if (mmk_launched(err, "k_fa3_quant_rows (k)"))
        return -1;
    k_fa3_v_amax<<<dim3((a->seq + 255) / 256, a->heads_kv), kD, 0, s>>>((const bf16 *)a->v, a->ldv, a->seq,
                                                                         (unsigned *)vamax);
    if (mmk_launched(err, "k_fa3_v_amax"))
        return -1;
    k_fa3_v_quant_t<<<dim3((unsigned)(ld_vt / 32), a->heads_kv), 256, 0, s>>>((const bf16 *)a->v, a->ldv, a->seq, vamax,
                                                                              vt8, ld_vt);
    if (mmk_launched(err, "k_fa3_v_quant_t"))
        return -1;
    p.q_scale = qs;
    p.k_scale = ks;
    p.v_amax = vamax;
    if (mmk_tma_map_2d(&mq, true, q8, (uint64_t)a->heads * kD, a->seq, (uint64_t)a->heads * kD, 128, kBM, err) ||
        mmk_tma_map_2d(&mk, true, k8, (uint64_t)a->heads_kv * kD, a->seq, (uint64_t)a->heads_kv * kD, 128, kBN, err) ||
        mmk_tma_map_2d(&mv, true, vt8, (uint64_t)ld_vt, (uint64_t)a->heads_kv * kD, (uint64_t)ld_vt, 128, kD, err))
        return -1;
    return pp ? launch<true, true>(mq, mk, mv, p, n_kb, s, err) : launch<true, false>(mq, mk, mv, p, n_kb, s, err);
}

static const mmk_kernel_entry g_fa3_kernels[] = {
    {"attn_fa3_bf16", (const void *)k_fa3<false, true>, 90},
    {"attn_fa3_bf16_nopp", (const void *)k_fa3<false, false>, 90},
    {"attn_fa3_e4m3", (const void *)k_fa3<true, true>, 90},
    {"attn_fa3_e4m3_nopp", (const void *)k_fa3<true, false>, 90},
    {"attn_fa3_vt_bf16", (const void *)k_fa3_vt_bf16, 90},
    {"attn_fa3_quant_rows", (const void *)k_fa3_quant_rows, 90},
    {"attn_fa3_v_amax", (const void *)k_fa3_v_amax, 90},
    {"attn_fa3_v_quant_t", (const void *)k_fa3_v_quant_t, 90},
};

extern "C" const mmk_kernel_entry *mmk_kernels_fa3(int *n)
{
    *n = (int)(sizeof g_fa3_kernels / sizeof g_fa3_kernels[0]);
    return g_fa3_kernels;
}
