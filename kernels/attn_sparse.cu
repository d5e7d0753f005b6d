/* Block-sparse attention on the GPU (contract in kernels/mmk_sparse.h,
 * semantics in src/backend/sparse_attn.h, CPU twin src/backend/cpu/sparse_attn.c).
 *
 * Routing (any sm_80+ GPU), per layer, in one pass over q, k, v and a few
 * small kernels:
 *   k_sp_pool        kc (bf16 mean) and vc (bf16 sum) of every 64-row key
 *                    block, q̄ (fp32 mean) of every query block, and for
 *                    top-k the 16-row sub-block means; fp32 sums in row
 *                    order, as the CPU twin takes them (kc, vc bit for bit);
 *   k_sp_kstats      μ and the diagonal σ² of kc per kv head (+ k_sp_m2,
 *                    the full second moment, for the "exact" threshold);
 *   k_sp_threshold   thr = s2·q̄·μ + τ·std per (query block, head);
 *   k_sp_route_sol   colmean = s2·q̄·kc for every block pair (a 64 × 64
 *                    fp32 tile per CTA in shared memory) against thr;
 *   k_sp_route_forced / the top-k path (sub-block scores through cuBLASLt
 *                    in fp32, k_sp_topk_lse, k_sp_topk_select: an exact
 *                    radix select with ties to the lower block);
 *   k_sp_finish      band, sinks and dense query blocks into the mask, the
 *                    counts and the tally.
 * q̄·kc is the spec's column mean Σ_r S[r,n] / q_len in real arithmetic (the
 * kernel-side formulation computes it from the 64 row scores); computed
 * once per block pair here it costs 1/64 of a row-wise pass.
 *
 * Attention, two kernels with the same items. A (query block, head) walks
 *   1. the centroid tiles: kc as keys and vc as values, the routed blocks
 *      masked out, each column weighted by its block's length in the
 *      softmax sum (Sol-Attn's approximation; none when every block is
 *      routed or without approximation);
 *   2. its routed blocks in increasing order.
 *
 * k_sp_attn_sm80 (portable, mma.sync): FlashAttention-2 in structure, the
 * kernel of kernels/attention.cu with its key loop replaced by the item
 * walk: one CTA of 4 warps per (query block, head), 64-key items (a
 * centroid tile is 64 centroids), double-buffered with cp.async.
 *
 * k_sp_fa3 (Hopper, sm_90a): the FA3 structure of kernels/attn_fa3.cu — a
 * TMA producer warpgroup and two consumer warpgroups with ping-pong and the
 * intra-warpgroup overlap of S_j with P_{j−1}·V_{j−1} — with the tiles
 * mapped onto the 64-row routing blocks as follows, and why:
 *   - one CTA per (64-row query block, head), both consumers on the same 64
 *     query rows (one Q tile): fa3's CTA holds two 64-row query blocks that
 *     share every key tile, but two query blocks have different block lists
 *     here, and walking the union of two lists costs up to twice the work
 *     on weakly correlated routes (random inputs at τ = 1: ≈ 1.8×);
 *   - the items of that one list are dealt to the two consumers
 *     alternately, each with its own producer thread, K stage and two Vᵀ
 *     stages (Q 16 KB + 2 × (32 + 2 × 32) KB = 208 KB of shared memory),
 *     and the two partial softmax states are merged at the end (flash-
 *     decoding inside the CTA): the consumers carry equal work whatever the
 *     list;
 *   - an item is 128 keys: two routed 64-key blocks side by side (four
 *     64 × 64 TMA boxes for K, two 64-key Vᵀ atoms — exactly fa3's 128-key
 *     tile in shared memory, so its S and P·V products apply unchanged), or
 *     128 centroids. A 64-key item would halve each product's N and double
 *     the softmax bookkeeping per key; 192 keys (fa3 exact's best) would
 *     not fit two private stage sets. A last group of one block loads that
 *     block twice and masks the copy (its V stays finite: 0·NaN would not);
 *   - the price of the private stages is that K/V tiles are not shared by
 *     the two consumers: twice fa3's L2 → shared traffic per FLOP (docs/
 *     SPARSE.md discusses what the device measured).
 * Both kernels round P to bf16 for the products and keep fp32 statistics
 * (kernels/attention.cu's numerics), except that a centroid tile's P·V also
 * takes P's bf16 residual (sp_pack_residual: one centroid's rounding is not
 * averaged over keys); their outputs match the CPU twin's within bf16
 * tolerance, also where the approximated blocks' values cancel. The Hopper kernel has a first-use self-check
 * against the portable one (mmk_sparse_verified).
 */
#include <limits.h>
#include <math.h>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "kernels/attn_common.cuh"
#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/mmk_sparse.h"
#include "kernels/tma_host.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMK_SP_SM90 1
#include "kernels/wgmma.cuh"

/* The wgmma shape only these kernels use (kernels/wgmma.cuh keeps the shapes fa3 runs, attn_common.cuh
 * the bf16 S product): d (+)= A·B, m64n128k32 e4m3 → f32 with A from registers (reg 0 = (row g, cols 4t..4t+3), 1 = (row g+8, same), 2 = (row g, cols 16+4t..), 3 = (row g+8,
 * same), low byte first); accumulate 0 overwrites d. */

__device__ __forceinline__ void sp_wgmma_rs_e4m3_n128(float d[64], const uint32_t a[4], uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
#endif

namespace {

constexpr int kB = 64;  /* block rows (query and key side) */
constexpr int kD = 128; /* head dim */
constexpr int kSub = 16; /* top-k sub-block rows */

struct SpRanges {
    int n;
    int r[MMK_SPARSE_MAX_RANGES][2];
};

/* Whether block b (rows [64b, 64b + 64)) overlaps one of the ranges. */
__device__ __forceinline__ bool sp_in_ranges(const SpRanges &s, int b)
{
    const int lo = b * kB, hi = lo + kB;
    for (int e = 0; e < s.n; e++)
        if (s.r[e][0] < hi && s.r[e][1] > lo && s.r[e][1] > s.r[e][0])
            return true;
    return false;
}

__device__ __forceinline__ int sp_len(int seq, int n) { return min(kB, seq - n * kB); }

/* ------------------------------------------------------------------ routing */

/* One CTA per (block n, head h), a thread per dim: q̄ (SOL), the scaled
 * bf16 sub-block means of q and k (TOPK), and for h < Hkv kc and vc. */
__global__ void __launch_bounds__(kD) k_sp_pool(const bf16 *__restrict__ q, int64_t ldq, const bf16 *__restrict__ k,
                                               int64_t ldk, const bf16 *__restrict__ v, int64_t ldv, int seq, int H,
                                               int Hkv, float s2, float *__restrict__ qbar, bf16 *__restrict__ kc,
                                               bf16 *__restrict__ vc, bf16 *__restrict__ qs, bf16 *__restrict__ ks)
{
    const int n = blockIdx.x, h = blockIdx.y, d = threadIdx.x, len = sp_len(seq, n);
    if (qbar || qs) {
        const bf16 *p = q + (int64_t)n * kB * ldq + (int64_t)h * kD + d;
        float s = 0.f, sub = 0.f;
        for (int r = 0; r < len; r++) {
            const float x = __bfloat162float(p[(int64_t)r * ldq]);
            s += x;
            sub += x;
            if (qs && ((r & (kSub - 1)) == kSub - 1 || r == len - 1)) {
                const int u = n * (kB / kSub) + r / kSub, ulen = min(kSub, seq - u * kSub);
                qs[((int64_t)u * H + h) * kD + d] = __float2bfloat16_rn(sub / (float)ulen * s2);
                sub = 0.f;
            }
        }
        if (qbar)
            qbar[((int64_t)n * H + h) * kD + d] = s / (float)len;
    }
    if (h >= Hkv)
        return;
    const bf16 *pk = k + (int64_t)n * kB * ldk + (int64_t)h * kD + d, *pv = v + (int64_t)n * kB * ldv + (int64_t)h * kD + d;
    float sk = 0.f, sv = 0.f, sub = 0.f;
    for (int r = 0; r < len; r++) {
        const float x = __bfloat162float(pk[(int64_t)r * ldk]);
        sk += x;
        sub += x;
        sv += __bfloat162float(pv[(int64_t)r * ldv]);
        if (ks && ((r & (kSub - 1)) == kSub - 1 || r == len - 1)) {
            const int u = n * (kB / kSub) + r / kSub, ulen = min(kSub, seq - u * kSub);
            ks[((int64_t)u * Hkv + h) * kD + d] = __float2bfloat16_rn(sub / (float)ulen * 1.0f);
            sub = 0.f;
        }
    }
    kc[((int64_t)n * Hkv + h) * kD + d] = __float2bfloat16_rn(sk / (float)len);
    vc[((int64_t)n * Hkv + h) * kD + d] = __float2bfloat16_rn(sv);
}

/* μ and σ² of kc over the blocks, per (kv head, dim), in block order. */
__global__ void __launch_bounds__(kD) k_sp_kstats(const bf16 *__restrict__ kc, int NT, int Hkv, float *__restrict__ mu,
                                                 float *__restrict__ var)
{
    const int hk = blockIdx.x, d = threadIdx.x;
    float s = 0.f, ss = 0.f;
    for (int n = 0; n < NT; n++) {
        const float x = __bfloat162float(kc[((int64_t)n * Hkv + hk) * kD + d]);
        s += x;
        ss = __fadd_rn(ss, __fmul_rn(x, x));
    }
    const float m = s / (float)NT;
    mu[hk * kD + d] = m;
    var[hk * kD + d] = fmaxf(__fsub_rn(ss / (float)NT, __fmul_rn(m, m)), 0.f);
}

/* M2[hk][a][b] = Σ_n kc[n,a]·kc[n,b] / NT ("exact" threshold): CTA (a, hk), thread b. */
__global__ void __launch_bounds__(kD) k_sp_m2(const bf16 *__restrict__ kc, int NT, int Hkv, float *__restrict__ m2)
{
    const int a = blockIdx.x, hk = blockIdx.y, b = threadIdx.x;
    float s = 0.f;
    for (int n = 0; n < NT; n++) {
        const bf16 *row = kc + ((int64_t)n * Hkv + hk) * kD;
        s = __fadd_rn(s, __fmul_rn(__bfloat162float(row[a]), __bfloat162float(row[b])));
    }
    m2[((int64_t)hk * kD + a) * kD + b] = s / (float)NT;
}

/* thr per (query block, head): a warp each; 0 for dense query blocks. */
__global__ void __launch_bounds__(256) k_sp_threshold(const float *__restrict__ qbar, const float *__restrict__ mu,
                                                     const float *__restrict__ var, const float *__restrict__ m2,
                                                     int NT, int H, int Hkv, float s2, float tau, SpRanges dense,
                                                     float *__restrict__ thr)
{
    __shared__ float sq[8][kD];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * 8 + w;
    if (item >= (int64_t)NT * H)
        return; /* whole warps leave: no block barrier below */
    const int i = (int)(item / H), h = (int)(item % H), hk = h / (H / Hkv);
    if (sp_in_ranges(dense, i)) {
        if (lane == 0)
            thr[item] = 0.f;
        return;
    }
    const float *qb = qbar + item * kD;
    float m = 0.f, v = 0.f;
    for (int d = lane; d < kD; d += 32) {
        const float x = qb[d];
        sq[w][d] = x;
        m += x * mu[hk * kD + d];
        v += x * x * var[hk * kD + d];
    }
    m = mmk_warp_sum(m);
    if (m2) {
        __syncwarp();
        float quad = 0.f;
        for (int a = lane; a < kD; a += 32) {
            const float *row = m2 + ((int64_t)hk * kD + a) * kD;
            float s = 0.f;
            for (int b = 0; b < kD; b++)
                s += row[b] * sq[w][b];
            quad += sq[w][a] * s;
        }
        quad = mmk_warp_sum(quad);
        v = s2 * s2 * fmaxf(quad - m * m, 0.f);
    } else {
        v = mmk_warp_sum(v) * (s2 * s2);
    }
    if (lane == 0)
        thr[item] = s2 * m + tau * sqrtf(fmaxf(v, 0.f) + 1e-6f);
}

/* Sol's decisions colmean > thr: CTA = 64 query blocks × head, walking the
 * key blocks 64 at a time; each thread a 4 × 4 (query, key) tile of fp32
 * dot products over float4 loads (rows padded to 132 floats: the 8 rows a
 * quarter-warp reads hit distinct banks). Writes whole mask words. */
constexpr int kRt = 64, kRpad = kD + 4;
__global__ void __launch_bounds__(256) k_sp_route_sol(const float *__restrict__ qbar, const bf16 *__restrict__ kc,
                                                     const float *__restrict__ thr, int NT, int H, int Hkv, int W,
                                                     float s2, uint32_t *__restrict__ mask)
{
    extern __shared__ __align__(16) float rs_smem[];
    float *sq = rs_smem, *sk = rs_smem + kRt * kRpad; /* [64][132] each */
    __shared__ uint32_t bits[kRt][2];
    __shared__ float sthr[kRt];
    const int i0 = blockIdx.x * kRt, h = blockIdx.y, hk = h / (H / Hkv);
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int e = threadIdx.x; e < kRt * kD; e += 256) {
        const int r = e / kD, d = e % kD, i = i0 + r;
        sq[r * kRpad + d] = i < NT ? qbar[((int64_t)i * H + h) * kD + d] : 0.f;
    }
    if (threadIdx.x < kRt)
        sthr[threadIdx.x] = i0 + threadIdx.x < NT ? thr[(int64_t)(i0 + threadIdx.x) * H + h] : 0.f;
    for (int n0 = 0; n0 < NT; n0 += kRt) {
        __syncthreads(); /* sk and bits free (and sq, sthr written on the first pass) */
        for (int e = threadIdx.x; e < kRt * kD; e += 256) {
            const int r = e / kD, d = e % kD, n = n0 + r;
            sk[r * kRpad + d] = n < NT ? __bfloat162float(kc[((int64_t)n * Hkv + hk) * kD + d]) : 0.f;
        }
        if (threadIdx.x < kRt * 2)
            bits[threadIdx.x >> 1][threadIdx.x & 1] = 0u;
        __syncthreads();
        float acc[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++)
                acc[a][b] = 0.f;
#pragma unroll 4
        for (int d = 0; d < kD; d += 4) {
            float4 x[4], y[4];
#pragma unroll
            for (int a = 0; a < 4; a++)
                x[a] = *reinterpret_cast<const float4 *>(sq + (ty + 16 * a) * kRpad + d);
#pragma unroll
            for (int b = 0; b < 4; b++)
                y[b] = *reinterpret_cast<const float4 *>(sk + (tx + 16 * b) * kRpad + d);
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    acc[a][b] = fmaf(x[a].x, y[b].x, acc[a][b]);
                    acc[a][b] = fmaf(x[a].y, y[b].y, acc[a][b]);
                    acc[a][b] = fmaf(x[a].z, y[b].z, acc[a][b]);
                    acc[a][b] = fmaf(x[a].w, y[b].w, acc[a][b]);
                }
        }
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int r = ty + 16 * a, c = tx + 16 * b;
                if (i0 + r < NT && n0 + c < NT && s2 * acc[a][b] > sthr[r])
                    atomicOr(&bits[r][c >> 5], 1u << (c & 31));
            }
        __syncthreads();
        if (threadIdx.x < kRt * 2) {
            const int r = threadIdx.x >> 1, wd = (n0 >> 5) + (threadIdx.x & 1), i = i0 + r;
            if (i < NT && wd < W)
                mask[((int64_t)i * H + h) * W + wd] = bits[r][threadIdx.x & 1];
        }
    }
}

/* The same hash as mm_sparse_forced_hash (backend/sparse_attn.h). */
__device__ __forceinline__ uint32_t sp_forced_hash(uint64_t seed, int64_t h, int64_t i, int64_t n)
{
    uint64_t x = seed ^ ((uint64_t)h * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i << 32) ^ (uint64_t)n;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (uint32_t)(x >> 40);
}

/* FORCED: a thread per mask word. */
__global__ void k_sp_route_forced(int NT, int H, int W, uint64_t seed, uint32_t level, uint32_t *__restrict__ mask,
                                  float *__restrict__ thr)
{
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)NT * H * W)
        return;
    const int64_t row = e / W;
    const int wd = (int)(e % W), i = (int)(row / H), h = (int)(row % H);
    uint32_t word = 0;
    for (int b = 0; b < 32; b++) {
        const int n = wd * 32 + b;
        if (n < NT && sp_forced_hash(seed, h, i, n) < level)
            word |= 1u << b;
    }
    mask[e] = word;
    if (wd == 0)
        thr[row] = 0.f;
}

/* TOPK scores from the sub-block cells of a chunk of hc heads: cells
 * [hc][U][U] (log2 units: qs carries s2), score[(i·hc + l)·NT + n] =
 * max + log2 Σ exp2(cell − max) over the cells with rows (l: the head's
 * place in the chunk). CTA (i, l), threads over n. */
__global__ void __launch_bounds__(256) k_sp_topk_lse(const float *__restrict__ cells, int U, int NT,
                                                    float *__restrict__ score)
{
    const int i = blockIdx.x, l = blockIdx.y, hc = gridDim.y;
    const float *base = cells + (int64_t)l * U * U;
    for (int n = threadIdx.x; n < NT; n += blockDim.x) {
        const int a1 = min(4 * i + 4, U), b1 = min(4 * n + 4, U);
        float mx = -INFINITY;
        for (int a = 4 * i; a < a1; a++)
            for (int b = 4 * n; b < b1; b++)
                mx = fmaxf(mx, base[(int64_t)a * U + b]);
        float s = 0.f;
        for (int a = 4 * i; a < a1; a++)
            for (int b = 4 * n; b < b1; b++)
                s += exp2f(base[(int64_t)a * U + b] - mx);
        score[((int64_t)i * hc + l) * NT + n] = mx + log2f(s);
    }
}

/* Float → a key whose unsigned order is the float order. */
__device__ __forceinline__ uint32_t sp_order_key(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* TOPK selection per (query block, head of a chunk of hc heads from h0; the
 * scores of k_sp_topk_lse): the k_keep largest scores, ties to the lower
 * block. A radix select (4 passes of 8 bits over order keys) finds the k-th
 * largest key; blocks above it are kept, and of the blocks equal to it the
 * lowest-numbered ones until k are kept (a block-wide scan in index order).
 * NT <= kTopkThreads · kTopkPer. */
constexpr int kTopkThreads = 512, kTopkPer = 8;
__global__ void __launch_bounds__(kTopkThreads) k_sp_topk_select(const float *__restrict__ score, int NT, int H, int h0,
                                                                int hc, int W, int k_keep, SpRanges dense,
                                                                uint32_t *__restrict__ mask, float *__restrict__ thr)
{
    __shared__ uint32_t hist[256];
    __shared__ uint32_t sel_prefix, sel_need;
    __shared__ int scan[kTopkThreads];
    const int i = (int)(blockIdx.x / hc), tid = threadIdx.x;
    const int64_t row = (int64_t)i * H + h0 + (int)(blockIdx.x % hc);
    uint32_t *mrow = mask + row * W;
    for (int w = tid; w < W; w += kTopkThreads)
        mrow[w] = 0u;
    if (sp_in_ranges(dense, i)) {
        if (tid == 0)
            thr[row] = 0.f;
        return; /* the whole block leaves together */
    }
    const float *srow = score + (int64_t)blockIdx.x * NT;
    uint32_t key[kTopkPer];
    const int n0 = tid * kTopkPer; /* contiguous indices per thread: the tie scan runs in index order */
#pragma unroll
    for (int e = 0; e < kTopkPer; e++)
        key[e] = n0 + e < NT ? sp_order_key(srow[n0 + e]) : 0u;
    uint32_t prefix = 0, need = (uint32_t)k_keep; /* the k-th largest key so far: high bits = prefix */
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        const uint32_t hi_mask = pass ? 0xFFFFFFFFu << (32 - 8 * pass) : 0u;
        if (tid < 256)
            if (tid < 256)
            hist[tid] = 0u;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < kTopkPer; e++)
            if (n0 + e < NT && (key[e] & hi_mask) == prefix)
                atomicAdd(&hist[(key[e] >> shift) & 255u], 1u);
        __syncthreads();
        if (tid == 0) {
            uint32_t acc = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (acc + hist[b] >= need)
                    break;
                acc += hist[b];
            }
            sel_prefix = prefix | ((uint32_t)b << shift);
            sel_need = need - acc;
        }
        __syncthreads();
        prefix = sel_prefix;
        need = sel_need;
        __syncthreads();
    }
    /* prefix = the k-th largest key; `need` of the blocks equal to it are kept */
    int ties = 0;
#pragma unroll
    for (int e = 0; e < kTopkPer; e++)
        ties += n0 + e < NT && key[e] == prefix;
    scan[tid] = ties;
    __syncthreads();
    for (int off = 1; off < kTopkThreads; off <<= 1) { /* inclusive scan */
        const int add = tid >= off ? scan[tid - off] : 0;
        __syncthreads();
        scan[tid] += add;
        __syncthreads();
    }
    int before = scan[tid] - ties;
#pragma unroll
    for (int e = 0; e < kTopkPer; e++) {
        const int n = n0 + e;
        const bool tie = n < NT && key[e] == prefix;
        const bool keep = n < NT && (key[e] > prefix || (tie && (uint32_t)before < need));
        before += tie;
        if (keep)
            atomicOr(&mrow[n >> 5], 1u << (n & 31));
    }
    if (tid == 0) {
        const uint32_t u = (prefix & 0x80000000u) ? (prefix & 0x7FFFFFFFu) : ~prefix;
        thr[row] = __uint_as_float(u);
    }
}

/* Band, sinks and dense query blocks into the mask; counts and the tally.
 * A warp per (query block, head). */
__global__ void __launch_bounds__(256) k_sp_finish(uint32_t *__restrict__ mask, int32_t *__restrict__ count,
                                                  long long *__restrict__ tally, int NT, int H, int W, int band,
                                                  SpRanges sink, SpRanges dense)
{
    const int w8 = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 8 + w8;
    if (row >= (int64_t)NT * H)
        return;
    const int i = (int)(row / H);
    const bool all = sp_in_ranges(dense, i);
    uint32_t *mrow = mask + row * W;
    int pop = 0;
    for (int wd = lane; wd < W; wd += 32) {
        uint32_t word = all ? 0xFFFFFFFFu : mrow[wd];
        for (int b = 0; b < 32 && !all; b++) {
            const int n = wd * 32 + b, dist = n > i ? n - i : i - n;
            if ((band >= 0 && dist <= band) || sp_in_ranges(sink, n))
                word |= 1u << b;
        }
        if (wd == W - 1 && (NT & 31))
            word &= (1u << (NT & 31)) - 1u;
        mrow[wd] = word;
        pop += __popc(word);
    }
    pop = __reduce_add_sync(0xffffffffu, pop);
    if (lane == 0) {
        count[row] = pop;
        if (tally)
            atomicAdd((unsigned long long *)tally, (unsigned long long)pop);
    }
}

/* vcᵀ for the Hopper kernel: vct[(hk·128 + d)·ld + n] = vc[n, hk, d]. */
__global__ void k_sp_transpose(const bf16 *__restrict__ src, int64_t ld_src, int rows, bf16 *__restrict__ dst,
                               int64_t ld_dst)
{
    __shared__ bf16 tile[32][33];
    const int h = blockIdx.z, d0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5; /* 32 × 8 */
    for (int e = ty; e < 32; e += 8) {
        const int j = j0 + e;
        tile[e][tx] = j < rows ? src[(int64_t)j * ld_src + (int64_t)h * kD + d0 + tx] : __float2bfloat16_rn(0.f);
    }
    __syncthreads();
    for (int e = ty; e < 32; e += 8) {
        const int j = j0 + tx;
        if (j < rows)
            dst[((int64_t)h * kD + d0 + e) * ld_dst + j] = tile[tx][e];
    }
}

} // namespace

/* ------------------------------------------------------------------ the items of a (query block, head) */

namespace {

struct SpAttn {
    const bf16 *q, *k, *v, *kc, *vc;
    int64_t ldq, ldk, ldv; /* kc, vc: [NT, Hkv, 128] contiguous */
    bf16 *o;
    int64_t ldo;
    const uint32_t *mask;
    const int32_t *count;
    int seq, H, Hkv, NT, W;
    int approximate;
    float s2;
};

/* Walks the routed blocks of one mask row in increasing order (every thread
 * of the CTA holds the same cursor: the walk is uniform). */
struct SpCursor {
    const uint32_t *row;
    int w, W;
    uint32_t bits;
    __device__ __forceinline__ void start(const uint32_t *r, int words)
    {
        row = r;
        W = words;
        w = 0;
        bits = words ? r[0] : 0u;
    }
    __device__ __forceinline__ int next()
    {
        while (!bits) {
            if (++w >= W)
                return -1;
            bits = row[w];
        }
        const int b = __ffs(bits) - 1;
        bits &= bits - 1;
        return w * 32 + b;
    }
};

/* Centroid tiles of a (query block, head) with `tile` centroids each: none
 * when every block is routed or the approximation is off. */
__device__ __forceinline__ int sp_centroid_tiles(const SpAttn &p, int count, int tile)
{
    return p.approximate && count < p.NT ? (p.NT + tile - 1) / tile : 0;
}

__device__ __forceinline__ bool sp_bit(const uint32_t *row, int n) { return (row[n >> 5] >> (n & 31)) & 1u; }

/* What bf16 rounding leaves of two probabilities, as bf16 (low half = first). A centroid stands for a
 * whole block, so the rounding of its P is one error on 64 keys' mass, not 64 independent errors that
 * average out; where the approximated blocks' values cancel (attention spread over blocks whose value
 * means sum to about zero: periodic maps) that one error dominates the output (rel_l2 0.0085 against the
 * CPU twin on such inputs, tests/unit/test_sparse_kernel_model.c). Adding the residual's product makes
 * the centroid terms exact to ~2^-16 for one more P·V product per centroid tile (1/64 of the exact work). */
__device__ __forceinline__ uint32_t sp_pack_residual(float a, float b)
{
    return mmk_pack_bf16(a - __bfloat162float(__float2bfloat16_rn(a)), b - __bfloat162float(__float2bfloat16_rn(b)));
}

/* ------------------------------------------------------------------ portable kernel (sm_80+) */

constexpr int kStr = kD + 8; /* padded shared-memory row (elements): ldmatrix without bank conflicts */
constexpr int kSm80Smem = (kB * kStr + 4 * kB * kStr) * 2;

/* 64 rows of a [*, 128] bf16 matrix (row stride ld) into a padded tile;
 * rows at or past `rows` are zero. */
__device__ __forceinline__ void sp_load_rows(bf16 *s, const bf16 *g, int64_t ld, int rows)
{
    for (int e = threadIdx.x; e < kB * (kD / 8); e += 128) {
        const int r = e >> 4, c = e & 15;
        const bool ok = r < rows;
        mmk_cp_async16(s + r * kStr + c * 8, ok ? g + (int64_t)r * ld + c * 8 : g, ok ? 16 : 0);
    }
}

/* Item t's keys and values into buffer (sK, sV): a centroid tile of 64 or a
 * routed block (*blk: which). */
__device__ __forceinline__ void sp80_load_item(const SpAttn &p, int t, int n_ct, int hk, SpCursor &cur, bf16 *sK,
                                               bf16 *sV, int *blk)
{
    if (t < n_ct) {
        const int n0 = t * kB, rows = min(kB, p.NT - n0);
        const int64_t ld = (int64_t)p.Hkv * kD, off = (int64_t)n0 * ld + (int64_t)hk * kD;
        sp_load_rows(sK, p.kc + off, ld, rows);
        sp_load_rows(sV, p.vc + off, ld, rows);
        *blk = -1;
    } else {
        const int n = cur.next();
        const int rows = sp_len(p.seq, n);
        sp_load_rows(sK, p.k + (int64_t)n * kB * p.ldk + (int64_t)hk * kD, p.ldk, rows);
        sp_load_rows(sV, p.v + (int64_t)n * kB * p.ldv + (int64_t)hk * kD, p.ldv, rows);
        *blk = n;
    }
}

__global__ void __launch_bounds__(128) k_sp_attn_sm80(SpAttn p)
{
    extern __shared__ __align__(16) unsigned char sp80_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(sp80_smem);
    bf16 *sK = sQ + kB * kStr; /* two buffers */
    bf16 *sV = sK + 2 * kB * kStr;
    const int ib = blockIdx.x, h = blockIdx.y, hk = h / (p.H / p.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const uint32_t *mrow = p.mask + ((int64_t)ib * p.H + h) * p.W;
    const int count = p.count[(int64_t)ib * p.H + h];
    const int n_ct = sp_centroid_tiles(p, count, kB), n_items = n_ct + count;
    const int tail = sp_len(p.seq, p.NT - 1);
    SpCursor cur;
    cur.start(mrow, p.W);

    sp_load_rows(sQ, p.q + (int64_t)ib * kB * p.ldq + (int64_t)h * kD, p.ldq, sp_len(p.seq, ib));
    int blk0 = -1, blk1 = -1; /* the block in each buffer (−1: a centroid tile); scalars, not an indexed array */
    if (n_items > 0)
        sp80_load_item(p, 0, n_ct, hk, cur, sK, sV, &blk0);
    mmk_cp_async_commit();

    float o[kD / 8][4];
    mmk_zero_acc(o);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t qf[kD / 16][4];

    for (int it = 0; it < n_items; it++) {
        const int buf = it & 1;
        if (it + 1 < n_items) {
            sp80_load_item(p, it + 1, n_ct, hk, cur, sK + (buf ^ 1) * kB * kStr, sV + (buf ^ 1) * kB * kStr,
                           buf ? &blk0 : &blk1);
        }
        mmk_cp_async_turn(it + 1 < n_items);
        if (it == 0) {
#pragma unroll
            for (int ks = 0; ks < kD / 16; ks++)
                mmk_ldmatrix_x4(qf[ks], sQ + (warp * 16 + (lane & 15)) * kStr + ks * 16 + (lane >> 4) * 8);
        }
        const bf16 *cK = sK + buf * kB * kStr, *cV = sV + buf * kB * kStr;

        float sc[kB / 8][4];
        mmk_zero_acc(sc);
#pragma unroll
        for (int ks = 0; ks < kD / 16; ks++)
#pragma unroll
            for (int np = 0; np < kB / 16; np++) {
                uint32_t b[4];
                mmk_ldmatrix_x4(b, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kStr + ks * 16 + ((lane >> 3) & 1) * 8);
                mmk_mma_bf16(sc[2 * np], qf[ks], b);
                mmk_mma_bf16(sc[2 * np + 1], qf[ks], b + 2);
            }

        /* masks and weights: a centroid tile drops the routed blocks (and
         * those past the last) and weighs each centroid by its block's
         * length; a block drops the keys past the sequence */
        const int blk = buf ? blk1 : blk0;
        const bool centroid = blk < 0;
        float wt[kB / 8][2];
#pragma unroll
        for (int nt = 0; nt < kB / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = nt * 8 + 2 * t4 + e;
                bool drop;
                if (centroid) {
                    const int n = it * kB + c;
                    drop = n >= p.NT || sp_bit(mrow, n);
                    wt[nt][e] = n == p.NT - 1 ? (float)tail : (float)kB;
                } else {
                    drop = blk * kB + c >= p.seq;
                    wt[nt][e] = 1.f;
                }
                if (drop)
                    sc[nt][e] = sc[nt][2 + e] = -INFINITY;
            }

#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mx = mmk_acc_row_max(sc, r);
            const float m_new = fmaxf(row_max[r], mx * p.s2);
            const float m_use = m_new == -INFINITY ? 0.f : m_new;
            const float corr = exp2f(row_max[r] - m_use);
            row_max[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < kB / 8; nt++) {
                const float p0 = exp2f(sc[nt][2 * r] * p.s2 - m_use), p1 = exp2f(sc[nt][2 * r + 1] * p.s2 - m_use);
                sc[nt][2 * r] = p0;
                sc[nt][2 * r + 1] = p1;
                sum += p0 * wt[nt][0] + p1 * wt[nt][1];
            }
            row_sum[r] = row_sum[r] * corr + sum;
            mmk_rescale_row(o, r, corr);
        }

        /* a centroid tile's P also as its bf16 residual (P = hi + lo to ~16 bits): see sp_pack_residual */
#pragma unroll
        for (int kk = 0; kk < kB / 16; kk++) {
            uint32_t a[4], lo[4];
            a[0] = mmk_pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
            a[1] = mmk_pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
            a[2] = mmk_pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            a[3] = mmk_pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
            if (centroid) {
                lo[0] = sp_pack_residual(sc[2 * kk][0], sc[2 * kk][1]);
                lo[1] = sp_pack_residual(sc[2 * kk][2], sc[2 * kk][3]);
                lo[2] = sp_pack_residual(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                lo[3] = sp_pack_residual(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < kD / 16; dp++) {
                uint32_t b[4];
                mmk_ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStr + dp * 16 +
                                             (lane >> 4) * 8);
                mmk_mma_bf16(o[2 * dp], a, b);
                mmk_mma_bf16(o[2 * dp + 1], a, b + 2);
                if (centroid) {
                    mmk_mma_bf16(o[2 * dp], lo, b);
                    mmk_mma_bf16(o[2 * dp + 1], lo, b + 2);
                }
            }
        }
        __syncthreads(); /* this buffer is refilled next iteration */
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float s = mmk_quad_sum(row_sum[r]);
        const float inv = s > 0.f ? 1.f / s : 0.f;
        const int row = ib * kB + warp * 16 + g + 8 * r;
        if (row >= p.seq)
            continue;
        bf16 *orow = p.o + (int64_t)row * p.ldo + (int64_t)h * kD;
#pragma unroll
        for (int dt = 0; dt < kD / 8; dt++)
            *reinterpret_cast<uint32_t *>(orow + dt * 8 + 2 * t4) =
                mmk_pack_bf16(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
}

} // namespace

/* ------------------------------------------------------------------ Hopper kernel (sm_90a) */

namespace {

constexpr int kHThreads = 384;
constexpr int kHQ = kB * kD * 2;     /* Q: 64 rows, two 64-dim halves of 8 KB */
constexpr int kHQhalf = kB * 128;
constexpr int kHK = 128 * kD * 2;    /* a K stage: 128 keys, two halves of 16 KB (slot s of a half at s · 8 KB) */
constexpr int kHKhalf = 128 * 128;
constexpr int kHKslot = kB * 128;
constexpr int kHV = 2 * kD * 128;    /* a Vᵀ stage: two 64-key atoms of 16 KB (128 dims × 128 bytes) */
constexpr int kHVatom = kD * 128;
constexpr int kHItem = 128;          /* keys (or centroids) per item */
constexpr int kHSmem = kHQ + 2 * kHK + 4 * kHV + 1024; /* consumer c: K stage c, Vᵀ stages 2c, 2c + 1 */
static_assert(kHSmem + 4096 <= 227 * 1024, "the sparse Hopper kernel's tiles exceed an SM's shared memory");

struct SpFa3 {
    int seq, H, Hkv, NT, W, approximate;
    float s2;
    const uint32_t *mask;
    const int32_t *count;
    bf16 *o;
    int64_t ldo;
    /* set: the centroid pass of fast mode — only the centroid tiles, o = their normalized part and
     * state[row·H + h] = (row max, row sum) for the fast kernel's merge (−inf, 0 where there are none) */
    float2 *state;
};

#ifdef MMK_SP_SM90
/* S = Q·Kᵀ over one item: Q's 64 rows (halves kHQhalf apart), 128 keys (halves kHKhalf apart). */
__device__ __forceinline__ void sp_issue_s(float (&sc)[64], uint32_t q_addr, uint32_t k_addr)
{
    const uint32_t qd = mmk_desc_sw128_lo(q_addr), kd = mmk_desc_sw128_lo(k_addr);
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        mmk_wgmma_ss_bf16_n128(sc, mmk_desc_sw128_at(qd, (kk >> 2) * kHQhalf + (kk & 3) * 32),
                          mmk_desc_sw128_at(kd, (kk >> 2) * kHKhalf + (kk & 3) * 32), kk > 0);
}

/* o += P·V over one item: k-step kk reads keys 16kk.. of atom kk / 4. */
__device__ __forceinline__ void sp_issue_pv(float (&o)[64], const uint32_t (&pa)[32], uint32_t v_addr)
{
    const uint32_t vd = mmk_desc_sw128_lo(v_addr);
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        mmk_wgmma_rs_bf16(o, &pa[kk * 4], mmk_desc_sw128_at(vd, (kk >> 2) * kHVatom + (kk & 3) * 32), 1);
}

/* What one item's softmax must mask and weigh (uniform over the warpgroup). */
struct SpItemMask {
    uint32_t keep;    /* bit 2·nt + e: this thread's column 8·nt + 2t + e is a key (or an approximated block) */
    int tail_col;     /* centroid tiles: the column of block NT − 1 (weight tail_len), or −1 */
    float tail_w;
};

/* Online softmax of one 128-column score tile in place (scores → P·2^off),
 * this thread's rows g and g + 8; sl = scale·log2 e. MASK: columns not in
 * keep are −inf; CENTROID: each column weighs its block's length (64, the
 * tail column tail_w) in the row sums. corr: exp2(m_old − m_new). */
template <bool MASK, bool CENTROID>
__device__ __forceinline__ void sp_softmax(float (&sc)[64], float (&m)[2], float (&l)[2], float (&corr)[2], float sl,
                                           float off, const SpItemMask &im, int t)
{
    if constexpr (MASK) {
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (!((im.keep >> (2 * nt + e)) & 1u))
                    sc[nt * 4 + e] = sc[nt * 4 + 2 + e] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float mx = mmk_wg_row_max(sc, r);
        const float m_new = fmaxf(m[r], mx * sl);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = mmk_exp2_approx(m[r] - m_use);
        m[r] = m_new;
        const float neg = off - m_use;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = nt * 4 + 2 * r + e;
                const float pr = mmk_exp2_approx(fmaf(sc[i], sl, neg));
                sc[i] = pr;
                if constexpr (CENTROID)
                    sum += (nt * 8 + 2 * t + e == im.tail_col ? im.tail_w : (float)kB) * pr;
                else
                    sum += pr;
            }
        l[r] = l[r] * corr[r] + sum;
    }
}

/* Probabilities → the bf16 A fragments of P·V (k-step kk: keys 16kk..16kk + 15). */
__device__ __forceinline__ void sp_pack_p(uint32_t (&pa)[32], const float (&sc)[64])
{
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const float *a = &sc[8 * kk];
        pa[kk * 4 + 0] = mmk_pack_bf16(a[0], a[1]);
        pa[kk * 4 + 1] = mmk_pack_bf16(a[2], a[3]);
        pa[kk * 4 + 2] = mmk_pack_bf16(a[4], a[5]);
        pa[kk * 4 + 3] = mmk_pack_bf16(a[6], a[7]);
    }
}
/* A centroid tile's residual P·V (sp_pack_residual), issued on its own as soon as its scores are
 * probabilities: o is relative to this tile's max by then, and the bf16 part follows in the pipeline as
 * every item's does. Nothing is in flight here; the tile's Vᵀ stage is waited for (again, later, by the
 * pipeline: its phase stays complete until this consumer releases the stage). */
__device__ __forceinline__ void sp_centroid_residual(float (&o)[64], uint32_t (&pa)[32], const float (&sc)[64],
                                                     uint32_t v_addr, uint32_t full_v, int parity)
{
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const float *a = &sc[8 * kk];
        pa[kk * 4 + 0] = sp_pack_residual(a[0], a[1]);
        pa[kk * 4 + 1] = sp_pack_residual(a[2], a[3]);
        pa[kk * 4 + 2] = sp_pack_residual(a[4], a[5]);
        pa[kk * 4 + 3] = sp_pack_residual(a[6], a[7]);
    }
    mmk_mbar_wait(full_v, parity);
    mmk_wgmma_fence();
    sp_issue_pv(o, pa, v_addr);
    mmk_wgmma_commit();
    mmk_wgmma_wait<0>();
    mmk_fence_regs(pa);
    mmk_fence_regs(o);
}

/* A consumer's view of its items: which are centroid tiles, which group is
 * the last, and the softmax each needs. */
struct SpConsumer {
    const uint32_t *mrow;
    int NT, W, n_ct, n_groups, count, tail_len;
    float s2, off; /* the scores' scale (1: already scaled) and P's exponent offset (e4m3: 8) */
    int t;
    bool tail_cut;

    /* What item j's softmax masks and weighs: 0 nothing, 1 some columns (the last group: a missing second
     * block — the copy of the first — or a ragged tail), 2 a centroid tile (the routed blocks and blocks past
     * the last out, each column weighing its block's length). Uniform over the warpgroup. */
    __device__ __forceinline__ int item_mask(int j, SpItemMask &im) const
    {
        im = {0xFFFFFFFFu, -1, 0.f};
        if (j < n_ct) {
            uint32_t words[4];
#pragma unroll
            for (int q4 = 0; q4 < 4; q4++)
                words[q4] = 4 * j + q4 < W ? mrow[4 * j + q4] : 0xFFFFFFFFu;
            im.keep = 0u;
#pragma unroll
            for (int nt = 0; nt < 16; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int n = j * kHItem + nt * 8 + 2 * t + e;
                    const bool routed = (words[nt >> 2] >> ((nt & 3) * 8 + 2 * t + e)) & 1u;
                    if (n < NT && !routed)
                        im.keep |= 1u << (2 * nt + e);
                }
            im.tail_col = NT - 1 - j * kHItem;
            im.tail_w = (float)tail_len;
            return 2;
        }
        if (j - n_ct == n_groups - 1 && ((count & 1) || tail_cut)) {
            const int tail_slot = (count - 1) & 1;
#pragma unroll
            for (int nt = 0; nt < 16; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = nt * 8 + 2 * t + e, slot = col >> 6;
                    if ((slot == 1 && (count & 1)) || (tail_cut && slot == tail_slot && (col & 63) >= tail_len))
                        im.keep &= ~(1u << (2 * nt + e));
                }
            return 1;
        }
        return 0;
    }

    /* The softmax of item j's scores. */
    __device__ __forceinline__ void softmax(float (&sc)[64], float (&m)[2], float (&l)[2], float (&corr)[2], int j) const
    {
        SpItemMask im;
        const int kind = item_mask(j, im);
        if (kind == 2)
            sp_softmax<true, true>(sc, m, l, corr, s2, off, im, t);
        else if (kind == 1)
            sp_softmax<true, false>(sc, m, l, corr, s2, off, im, t);
        else
            sp_softmax<false, false>(sc, m, l, corr, s2, off, im, t);
    }
};

/* The 13 mbarriers of both Hopper kernels, at bQ: Q full; K full ×2, K empty ×2 (one K stage per consumer);
 * Vᵀ full ×4, Vᵀ empty ×4 (two per consumer). Macros rather than functions: the kernels' address arithmetic
 * stays as the compiler folded it in place. */
#define SP_FULL_K(c) (bQ + 8u * (1 + (c)))
#define SP_EMPTY_K(c) (bQ + 8u * (3 + (c)))
#define SP_FULL_V(s) (bQ + 8u * (5 + (s)))
#define SP_EMPTY_V(s) (bQ + 8u * (9 + (s)))

/* By thread 0, the CTA waiting: one arrival completes a full barrier (the producer's, with the TMA bytes), a
 * consumer's 128 threads an empty one. */
__device__ __forceinline__ void sp_init_bars(uint32_t bQ)
{
    if (threadIdx.x == 0) {
        mmk_mbar_init(bQ, 1);
        for (int c = 0; c < 2; c++) {
            mmk_mbar_init(SP_FULL_K(c), 1);
            mmk_mbar_init(SP_EMPTY_K(c), 128);
        }
        for (int s = 0; s < 4; s++) {
            mmk_mbar_init(SP_FULL_V(s), 1);
            mmk_mbar_init(SP_EMPTY_V(s), 128);
        }
        mmk_mbar_init_fence();
    }
    __syncthreads();
}

/* A producer thread's next item j: its two key blocks b0, b1 from the cursor (past the other consumer's
 * groups first; at_group: the group the cursor stands before), or b0 = b1 = −1 for a centroid tile. A last
 * group of one block loads it twice, the copy masked. */
__device__ __forceinline__ void sp_item_blocks(SpCursor &cur, int &at_group, int j, int n_ct, int &b0, int &b1)
{
    b0 = -1;
    b1 = -1;
    if (j >= n_ct) {
        for (const int g = j - n_ct; at_group < g; at_group++) {
            cur.next();
            cur.next();
        }
        b0 = cur.next();
        b1 = cur.next();
        at_group++;
        if (b1 < 0)
            b1 = b0;
    }
}

/* Item j's Vᵀ stage at vst (its two 64-key slots `slot` bytes apart): a centroid tile's 128 columns of tmVC
 * or blocks b0 and b1 of tmV. */
__device__ __forceinline__ void sp_load_v_item(uint32_t vst, int slot, const CUtensorMap *tmV, const CUtensorMap *tmVC,
                                               uint32_t full, int j, int b0, int b1, int hk)
{
    if (b0 < 0) {
        mmk_tma_load_2d(vst, tmVC, full, j * kHItem, hk * kD);
        mmk_tma_load_2d(vst + slot, tmVC, full, j * kHItem + kB, hk * kD);
    } else {
        mmk_tma_load_2d(vst, tmV, full, b0 * kB, hk * kD);
        mmk_tma_load_2d(vst + slot, tmV, full, b1 * kB, hk * kD);
    }
}

/* The producer's Vᵀ half of its lt-th item j: stage 2c + (lt & 1) (`stage` bytes each, from sV), once its
 * consumer has released it. */
__device__ __forceinline__ void sp_produce_v(uint32_t bQ, uint32_t sV, int stage, int slot, int c, int lt,
                                             const CUtensorMap *tmV, const CUtensorMap *tmVC, int j, int b0, int b1,
                                             int hk)
{
    const int vs = 2 * c + (lt & 1);
    const uint32_t vst = sV + vs * stage;
    mmk_mbar_wait(SP_EMPTY_V(vs), ((lt >> 1) & 1) ^ 1);
    mmk_mbar_expect_tx(SP_FULL_V(vs), stage);
    sp_load_v_item(vst, slot, tmV, tmVC, SP_FULL_V(vs), j, b0, b1, hk);
}

/* The producer thread of consumer 0 first: the five maps prefetched. */
__device__ __forceinline__ void sp_prefetch_maps(const CUtensorMap *q, const CUtensorMap *k, const CUtensorMap *v,
                                                 const CUtensorMap *kc, const CUtensorMap *vc)
{
    mmk_tma_prefetch_map(q);
    mmk_tma_prefetch_map(k);
    mmk_tma_prefetch_map(v);
    mmk_tma_prefetch_map(kc);
    mmk_tma_prefetch_map(vc);
}

/* The two consumers' states meet at the end: l summed over the quad, then consumer 1 leaves its o (spill,
 * a stage idle by then), m and l (ml) in shared memory and returns false; consumer 0 waits for them and
 * returns true. */
__device__ __forceinline__ bool sp_merge_exchange(int cw, const float (&o)[64], const float (&m)[2], float (&l)[2],
                                                  float *spill, float (*ml)[4], int tw)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] = mmk_quad_sum(l[r]);
    }
    if (cw == 1) {
#pragma unroll
        for (int i = 0; i < 64; i++)
            spill[i * 128 + tw] = o[i];
        ml[tw][0] = m[0];
        ml[tw][1] = m[1];
        ml[tw][2] = l[0];
        ml[tw][3] = l[1];
        mmk_bar_arrive(3, 256);
        return false;
    }
    mmk_bar_sync(3, 256);
    return true;
}

/* Row r of the merge: the common max M and each consumer's weight (a0 this one's, a1 consumer 1's, whose
 * row sum is l1). */
struct SpMergeRow {
    float M, a0, a1, l1;
};
__device__ __forceinline__ SpMergeRow sp_merge_row(float m0, const float (&ml)[4], int r)
{
    SpMergeRow w;
    const float m1 = ml[r];
    w.l1 = ml[2 + r];
    w.M = fmaxf(m0, m1);
    w.a0 = m0 == -INFINITY ? 0.f : mmk_exp2_approx(m0 - w.M);
    w.a1 = m1 == -INFINITY ? 0.f : mmk_exp2_approx(m1 - w.M);
    return w;
}
#endif

__global__ void __launch_bounds__(kHThreads, 1)
    k_sp_fa3(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
             const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmKC,
             const __grid_constant__ CUtensorMap tmVC, const SpFa3 p)
{
#ifdef MMK_SP_SM90
    extern __shared__ __align__(1024) unsigned char spf_smem[];
    __shared__ __align__(8) uint64_t bars[13];
    __shared__ float merge_ml[128][4];
    unsigned char *base = (unsigned char *)(((uintptr_t)spf_smem + 1023) & ~(uintptr_t)1023);
    const uint32_t sQ = mmk_smem_addr(base), sK = sQ + kHQ, sV = sK + 2 * kHK;
    const uint32_t bQ = mmk_smem_addr(&bars[0]);
    const int ib = blockIdx.x, h = blockIdx.y, hk = h / (p.H / p.Hkv);
    const uint32_t *mrow = p.mask + ((int64_t)ib * p.H + h) * p.W;
    const int count = p.count[(int64_t)ib * p.H + h];
    const int n_ct = p.approximate && count < p.NT ? (p.NT + kHItem - 1) / kHItem : 0;
    const int n_groups = p.state ? 0 : (count + 1) / 2, n_items = n_ct + n_groups;

    sp_init_bars(bQ);

    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        /* ---------------- producer: thread 0 feeds consumer 0 (and loads Q), thread 32 consumer 1 ---------------- */
        mmk_regs_dealloc<24>();
        if ((threadIdx.x & 31) == 0 && threadIdx.x < 64) {
            const int c = threadIdx.x >> 5;
            if (c == 0) {
                sp_prefetch_maps(&tmQ, &tmK, &tmV, &tmKC, &tmVC);
                mmk_mbar_expect_tx(bQ, kHQ);
                mmk_tma_load_2d(sQ, &tmQ, bQ, h * kD, ib * kB);
                mmk_tma_load_2d(sQ + kHQhalf, &tmQ, bQ, h * kD + 64, ib * kB);
            }
            SpCursor cur;
            cur.start(mrow, p.W);
            int at_group = 0; /* the cursor stands before this group's first block */
            const uint32_t kst = sK + c * kHK;
            for (int j = c, lt = 0; j < n_items; j += 2, lt++) {
                int b0, b1;
                sp_item_blocks(cur, at_group, j, n_ct, b0, b1);
                mmk_mbar_wait(SP_EMPTY_K(c), (lt & 1) ^ 1);
                mmk_mbar_expect_tx(SP_FULL_K(c), kHK);
                if (b0 < 0) {
                    mmk_tma_load_2d(kst, &tmKC, SP_FULL_K(c), hk * kD, j * kHItem);
                    mmk_tma_load_2d(kst + kHKhalf, &tmKC, SP_FULL_K(c), hk * kD + 64, j * kHItem);
                } else {
                    mmk_tma_load_2d(kst, &tmK, SP_FULL_K(c), hk * kD, b0 * kB);
                    mmk_tma_load_2d(kst + kHKslot, &tmK, SP_FULL_K(c), hk * kD, b1 * kB);
                    mmk_tma_load_2d(kst + kHKhalf, &tmK, SP_FULL_K(c), hk * kD + 64, b0 * kB);
                    mmk_tma_load_2d(kst + kHKhalf + kHKslot, &tmK, SP_FULL_K(c), hk * kD + 64, b1 * kB);
                }
                sp_produce_v(bQ, sV, kHV, kHVatom, c, lt, &tmV, &tmVC, j, b0, b1, hk);
            }
        }
        return;
    }

    /* ---------------- consumers: the items cw, cw + 2, ... ---------------- */
    mmk_regs_alloc<240>();
    const int cw = wg - 1;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int bar_mine = 1 + cw, bar_other = 2 - cw;
    /* count comes from memory: broadcast, so that the compiler sees the item loop as uniform */
    const int n_items_u = __shfl_sync(0xffffffffu, n_items, 0), n_ct_u = __shfl_sync(0xffffffffu, n_ct, 0);
    const int n_mine = (n_items_u - cw + 1) / 2, phases = (n_items_u + 1) / 2 + 1; /* equal for both: ping-pong pairs */
    const uint32_t kst = sK + cw * kHK;

    float o[64], sc[64];
    uint32_t pa[32];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2] = {1.f, 1.f};
    SpConsumer cs = {mrow, p.NT, p.W, n_ct, n_groups, count, sp_len(p.seq, p.NT - 1), p.s2, 0.f, t};
    cs.tail_cut = cs.tail_len < kB && sp_bit(mrow, p.NT - 1); /* the last routed block is ragged */

    if (cw == 1)
        mmk_bar_arrive(1, 256); /* consumer 0 issues first */
    mmk_mbar_wait(bQ, 0);
    int ph = 0;
    if (n_mine > 0) {
        /* phase 0: S of the first item */
        mmk_mbar_wait(SP_FULL_K(cw), 0);
        mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        sp_issue_s(sc, sQ, kst);
        mmk_wgmma_commit();
        mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<0>();
        mmk_fence_regs(sc);
        mmk_mbar_arrive(SP_EMPTY_K(cw));
        cs.softmax(sc, m, l, corr, cw);
        if (cw < n_ct_u)
            sp_centroid_residual(o, pa, sc, sV + 2 * cw * kHV, SP_FULL_V(2 * cw), 0);
        sp_pack_p(pa, sc);
        /* phases 1 .. n_mine − 1: S of item ph beside P·V of item ph − 1 */
        for (ph = 1; ph < n_mine; ph++) {
            const int vs = 2 * cw + ((ph - 1) & 1);
            mmk_mbar_wait(SP_FULL_K(cw), ph & 1);
            mmk_mbar_wait(SP_FULL_V(vs), ((ph - 1) >> 1) & 1);
            mmk_bar_sync(bar_mine, 256);
            mmk_wgmma_fence();
            sp_issue_s(sc, sQ, kst);
            mmk_wgmma_commit();
            sp_issue_pv(o, pa, sV + vs * kHV);
            mmk_wgmma_commit();
            mmk_bar_arrive(bar_other, 256);
            mmk_wgmma_wait<1>(); /* S done; P·V may still run */
            mmk_fence_regs(sc);
            mmk_mbar_arrive(SP_EMPTY_K(cw));
            cs.softmax(sc, m, l, corr, cw + 2 * ph);
            mmk_wgmma_wait<0>();
            mmk_fence_regs(pa);
            mmk_fence_regs(o);
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] *= corr[(i >> 1) & 1];
            mmk_mbar_arrive(SP_EMPTY_V(vs));
            if (cw + 2 * ph < n_ct_u)
                sp_centroid_residual(o, pa, sc, sV + (2 * cw + (ph & 1)) * kHV, SP_FULL_V(2 * cw + (ph & 1)), (ph >> 1) & 1);
            sp_pack_p(pa, sc);
        }
        /* phase n_mine: the last item's P·V */
        {
            const int vs = 2 * cw + ((ph - 1) & 1);
            mmk_mbar_wait(SP_FULL_V(vs), ((ph - 1) >> 1) & 1);
            mmk_bar_sync(bar_mine, 256);
            mmk_wgmma_fence();
            sp_issue_pv(o, pa, sV + vs * kHV);
            mmk_wgmma_commit();
            mmk_bar_arrive(bar_other, 256);
            mmk_wgmma_wait<0>();
            mmk_fence_regs(pa);
            mmk_fence_regs(o);
            mmk_mbar_arrive(SP_EMPTY_V(vs));
        }
        ph++;
    }
    for (; ph < phases; ph++) { /* a consumer with one item fewer (or none) keeps the ping-pong in step */
        mmk_bar_sync(bar_mine, 256);
        mmk_bar_arrive(bar_other, 256);
    }
    if (cw == 0)
        mmk_bar_sync(1, 256); /* consumer 1's last arrive */

    /* ---------------- the two consumers' states merged: O / l, bf16 ---------------- */
    const int tw = threadIdx.x & 127;
    float *spill = reinterpret_cast<float *>(base + kHQ + kHK); /* consumer 1's K stage: idle now */
    if (!sp_merge_exchange(cw, o, m, l, spill, merge_ml, tw))
        return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const SpMergeRow w = sp_merge_row(m[r], merge_ml[tw], r);
        const float a0 = w.a0, a1 = w.a1, L = a0 * l[r] + a1 * w.l1, inv = L > 0.f ? 1.f / L : 0.f;
        const int row = ib * kB + warp * 16 + g + 8 * r;
        if (row >= p.seq)
            continue;
        if (p.state && t == 0)
            p.state[(int64_t)row * p.H + h] = make_float2(L > 0.f ? w.M : -INFINITY, L);
        bf16 *orow = p.o + (int64_t)row * p.ldo + (int64_t)h * kD;
#pragma unroll
        for (int dt = 0; dt < 16; dt++) {
            const int i0 = dt * 4 + 2 * r;
            const float v0 = (a0 * o[i0] + a1 * spill[i0 * 128 + tw]) * inv;
            const float v1 = (a0 * o[i0 + 1] + a1 * spill[(i0 + 1) * 128 + tw]) * inv;
            *reinterpret_cast<__nv_bfloat162 *>(orow + dt * 8 + 2 * t) = __floats2bfloat162_rn(v0, v1);
        }
    }
#else
    (void)p;
    __trap(); /* never launched: the host picks this kernel only on sm_90 with sm_90a code */
#endif
}

} // namespace

/* ------------------------------------------------------------------ Hopper kernel, fast mode (int8 q·k, e4m3 p·v) */

namespace {

/* Fast mode's numerics are fa3's (kernels/attn_fa3.cu, kernels/mmk_fa3.h)
 * on the routing blocks: q as int8 per (row, head); k as int8 after its
 * per-channel mean over all keys is subtracted (the softmax of a row does
 * not change when the same q·k̄ leaves all its scores), one scale per
 * 64-key block (so per column half of an item); kc the same with one scale
 * per centroid tile; v smoothed by its channel mean and scaled per channel
 * into e4m3 (the mean added back at the end: the output is a convex
 * combination), vc = Σ v smoothed by len·mean with its own channel scales
 * (its P·V folded in at the ratio of the two); P in e4m3 with its exponent
 * offset by 8, each item's P·V summed in a fresh fp32 accumulator before
 * it joins the output. (The launcher no longer uses the kc / vc tiles
 * here: fast mode's centroid tiles are the bf16 kernel's centroid pass,
 * merged at the end — sp_launch_sm90_fast says why.) Vᵀ in e4m3 is 64
 * bytes per dim and block: 64-byte-swizzled rows (TMA and wgmma agree on
 * the layout), the keys permuted
 * inside each group of 32 as fa3's copy is, so that the score
 * accumulators, converted in place, are the A fragments of the P·V. */
constexpr float kSpI8 = 127.f, kSpE4 = 448.f;
constexpr int kSpStatRows = 512;
constexpr int kFQ = kB * 128;       /* Q8: 64 rows × 128 bytes */
constexpr int kFK = 128 * 128;      /* a K8 stage: 128 keys (two 64-row slots of 8 KB) */
constexpr int kFKslot = kB * 128;
constexpr int kFV = 2 * kD * 64;    /* a Vᵀ8 stage: two 64-key slots of 128 dims × 64 bytes */
constexpr int kFVslot = kD * 64;
constexpr int kFSmem = kFQ + 2 * kFK + 4 * kFV + 1024;
static_assert(2 * kFV >= kD * 64 * 4, "consumer 1's Vᵀ stages hold its output for the merge");

/* k and v sums and v's extremes per (kv head, dim) over blocks of kSpStatRows rows. */
__global__ void __launch_bounds__(kD) k_spf_kv_partial(const bf16 *__restrict__ k, int64_t ldk, const bf16 *__restrict__ v,
                                                      int64_t ldv, int seq, int Hkv, float *__restrict__ part)
{
    const int c = threadIdx.x, hk = blockIdx.y, b = blockIdx.x;
    const int j0 = b * kSpStatRows, j1 = min(seq, j0 + kSpStatRows);
    const bf16 *kp = k + (int64_t)hk * kD + c, *vp = v + (int64_t)hk * kD + c;
    float sk = 0.f, sv = 0.f, mx = -INFINITY, mn = INFINITY;
    for (int j = j0; j < j1; j++) {
        const float kv = __bfloat162float(kp[(int64_t)j * ldk]), vv = __bfloat162float(vp[(int64_t)j * ldv]);
        sk += kv;
        sv += vv;
        mx = fmaxf(mx, vv);
        mn = fminf(mn, vv);
    }
    mmk_kv_partial_store(part, b, Hkv, hk, c, sk, sv, mx, mn);
}

/* stats [6][Hkv·128]: k mean, v mean, v scale (amax of v − mean over 448), v factor (its inverse, 0 for a
 * constant channel), then from vc: the scale and factor of vc − len·(v mean) over the blocks. */
__global__ void __launch_bounds__(kD) k_spf_kv_finish(const float *__restrict__ part, int n_parts, int Hkv, int seq,
                                                     const bf16 *__restrict__ vc, int NT, float *__restrict__ stats)
{
    const int c = threadIdx.x, hk = blockIdx.x;
    float sk, sv, mx, mn;
    mmk_kv_partial_sum(part, n_parts, Hkv, hk, c, sk, sv, mx, mn);
    const float km = sk / (float)seq, vm = sv / (float)seq, amax = fmaxf(mx - vm, vm - mn);
    float camax = 0.f;
    for (int n = 0; n < NT; n++)
        camax = fmaxf(camax, fabsf(__bfloat162float(vc[((int64_t)n * Hkv + hk) * kD + c]) - (float)sp_len(seq, n) * vm));
    const int64_t plane = (int64_t)Hkv * kD, at = (int64_t)hk * kD + c;
    stats[at] = km;
    stats[plane + at] = vm;
    stats[2 * plane + at] = amax > 0.f ? amax / kSpE4 : 1.f;
    stats[3 * plane + at] = amax > 0.f ? kSpE4 / amax : 0.f;
    stats[4 * plane + at] = camax > 0.f ? camax / kSpE4 : 1.f;
    stats[5 * plane + at] = camax > 0.f ? kSpE4 / camax : 0.f;
}

/* q as int8 per (row, head): scales [H][rows_pad] (amax / 127; 1 for a zero row or one past seq). 16
 * threads per (row, head), 8 values each (a half warp: the shuffles stay inside). */
__global__ void __launch_bounds__(256) k_spf_quant_q(const bf16 *__restrict__ q, int64_t ldq, int seq, int H,
                                                    int rows_pad, int8_t *__restrict__ q8, float *__restrict__ scales)
{
    const int64_t item = (int64_t)blockIdx.x * 16 + (threadIdx.x >> 4);
    const int part = threadIdx.x & 15;
    const bool in_table = item < (int64_t)rows_pad * H;
    const int row = (int)(item / H), h = (int)(item % H);
    const bool live = in_table && row < seq;
    float x[8];
    for (int e = 0; e < 8; e++)
        x[e] = live ? __bfloat162float(q[(int64_t)row * ldq + (int64_t)h * kD + part * 8 + e]) : 0.f;
    float amax = 0.f;
    for (int e = 0; e < 8; e++)
        amax = fmaxf(amax, fabsf(x[e]));
    for (int o = 8; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (in_table && part == 0)
        scales[(int64_t)h * rows_pad + row] = amax > 0.f ? amax / kSpI8 : 1.f;
    if (!live)
        return;
    const float inv = amax > 0.f ? kSpI8 / amax : 0.f;
    *reinterpret_cast<uint2 *>(q8 + (int64_t)row * H * kD + (int64_t)h * kD + part * 8) = mmk_i8x8(x, inv);
}

/* qkm[row·H + h] = s2·q[row, h]·(k mean of its kv head): a warp per (row, head), 4 dims a lane. */
__global__ void __launch_bounds__(256) k_spf_qkm(const bf16 *__restrict__ q, int64_t ldq, int seq, int H, int Hkv,
                                                const float *__restrict__ kmean, float s2, float *__restrict__ qkm)
{
    const int64_t item = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (item >= (int64_t)seq * H)
        return;
    const int row = (int)(item / H), h = (int)(item % H);
    const bf16 *qr = q + (int64_t)row * ldq + (int64_t)h * kD + lane * 4;
    const float *km = kmean + (int64_t)(h / (H / Hkv)) * kD + lane * 4;
    float s = 0.f;
    for (int e = 0; e < 4; e++)
        s = fmaf(__bfloat162float(qr[e]), km[e], s);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        qkm[item] = s2 * s;
}

/* (rows − k mean) as int8 per (kv head, group of ROWS rows) (64: the key blocks of k; 128: the centroid
 * tiles of kc): scales [Hkv][groups]. Thread t holds channels (t mod 16)·8 .. +7 of ROWS / 16 rows. */
template <int ROWS>
__global__ void __launch_bounds__(256) k_spf_quant_rows(const bf16 *__restrict__ src, int64_t ld, int n_rows, int Hkv,
                                                       const float *__restrict__ kmean, int8_t *__restrict__ dst,
                                                       float *__restrict__ scales, int n_groups)
{
    __shared__ float red[32];
    constexpr int IT = ROWS / 16;
    const int b = blockIdx.x, hk = blockIdx.y, c0 = (threadIdx.x & 15) * 8;
    float mean[8], x[IT * 8], amax = 0.f;
    for (int e = 0; e < 8; e++)
        mean[e] = kmean[(int64_t)hk * kD + c0 + e];
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int row = b * ROWS + ((threadIdx.x + i * 256) >> 4);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float v = row < n_rows ? __bfloat162float(src[(int64_t)row * ld + (int64_t)hk * kD + c0 + e]) - mean[e] : 0.f;
            x[i * 8 + e] = v;
            amax = fmaxf(amax, fabsf(v));
        }
    }
    amax = mmk_block_max(amax, red);
    const float inv = amax > 0.f ? kSpI8 / amax : 0.f;
    if (threadIdx.x == 0)
        scales[(int64_t)hk * n_groups + b] = amax > 0.f ? amax / kSpI8 : 1.f;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int row = b * ROWS + ((threadIdx.x + i * 256) >> 4);
        if (row >= n_rows)
            continue;
        *reinterpret_cast<uint2 *>(dst + (int64_t)row * Hkv * kD + (int64_t)hk * kD + c0) = mmk_i8x8(&x[i * 8], inv);
    }
}

/* v (rows of one token; block_seq 0) or vc (rows of a block; block_seq = seq: weight len = its rows)
 * smoothed, scaled and transposed into e4m3: dst[(hk·128 + d)·ld_dst + 32b + k] = e4m3((src[32b + perm(k)]
 * − len·mean[d]) · factor[d]); zero past n_rows (the copy is whole 32-key groups wide). */
__global__ void __launch_bounds__(256) k_spf_v_quant_t(const bf16 *__restrict__ src, int64_t ld_src, int n_rows, int Hkv,
                                                      const float *__restrict__ mean, const float *__restrict__ factor,
                                                      int block_seq, uint8_t *__restrict__ dst, int64_t ld_dst)
{
#ifdef MMK_SP_SM90
    __shared__ float tile[32][kD + 1];
    const int j0 = blockIdx.x * 32, hk = blockIdx.y;
    const float *mu = mean + (int64_t)hk * kD, *fa = factor + (int64_t)hk * kD;
    for (int e = threadIdx.x; e < 32 * kD; e += 256) {
        const int key = e / kD, d = e % kD, j = j0 + key;
        float x = 0.f;
        if (j < n_rows) {
            const float len = block_seq > 0 ? (float)sp_len(block_seq, j) : 1.f;
            x = (__bfloat162float(src[(int64_t)j * ld_src + (int64_t)hk * kD + d]) - len * mu[d]) * fa[d];
        }
        tile[key][d] = x;
    }
    __syncthreads();
    mmk_store_vt8_tile(tile, dst, hk, ld_dst, j0);
#else
    (void)src, (void)ld_src, (void)n_rows, (void)Hkv, (void)mean, (void)factor, (void)block_seq, (void)dst, (void)ld_dst;
    __trap();
#endif
}

struct SpFast {
    int seq, H, Hkv, NT, W, approximate, rows_pad, n_ct_tiles;
    float s2;
    const uint32_t *mask;
    const int32_t *count;
    const float *q_scale;  /* [H][rows_pad] */
    const float *k_scale;  /* [Hkv][NT]: per key block */
    const float *kc_scale; /* [Hkv][n_ct_tiles]: per centroid tile */
    const float *stats;    /* [6][Hkv·128]: k mean, v mean, v scale, v factor, vc scale, vc factor */
    bf16 *o;
    int64_t ldo;
    /* set: the centroid tiles were done by the bf16 kernel's centroid pass (SpFa3::state; approximate is
     * then 0 here): o holds their normalized part, cstate[row·H + h] its (row max, row sum); qkm[row·H + h]
     * = s2·q·(k mean), what this kernel's scores leave out, to put its row max in the same frame */
    const float2 *cstate;
    const float *qkm;
};

#ifdef MMK_SP_SM90
/* K-major operand with the 64-byte swizzle (rows of 64 bytes, 8-row groups 512 bytes apart). */
__device__ __forceinline__ uint64_t spf_desc_sw64(uint32_t smem_addr)
{
    uint64_t d;
    const uint32_t lo = ((smem_addr & 0x3FFFF) >> 4) | ((16u >> 4) << 16), hi = (512u >> 4) | (2u << 30);
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
}

/* si = Q8·K8ᵀ over one item: 4 k-steps of 32 bytes (one 128-byte row each side). */
__device__ __forceinline__ void spf_issue_s(int32_t (&si)[64], uint32_t q_addr, uint32_t k_addr)
{
    const uint32_t qd = mmk_desc_sw128_lo(q_addr), kd = mmk_desc_sw128_lo(k_addr);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        mmk_wgmma_ss_s8(si, mmk_desc_sw128_at(qd, kk * 32), mmk_desc_sw128_at(kd, kk * 32), kk > 0);
}

/* ot = P·V over one item, fresh: k-steps 0, 1 from slot 0 (keys 0..63), 2, 3 from slot 1. */
__device__ __forceinline__ void spf_issue_pv(float (&ot)[64], const uint32_t (&pa)[16], uint32_t v_addr)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        sp_wgmma_rs_e4m3_n128(ot, &pa[kk * 4], spf_desc_sw64(v_addr + (kk >> 1) * kFVslot + (kk & 1) * 32), kk > 0);
}

/* int32 sum → float, exactly for |a| < 2²² (fa3_i2f). */
__device__ __forceinline__ float spf_i2f(int32_t a) { return __uint_as_float((uint32_t)a + 0x4B400000u) - 12582912.f; }

/* o (relative to the max before the previous item) carried to the max after it, plus that item's P·V:
 * o = o·corr + ot, a centroid tile's ot at vc's channel scale over v's. */
__device__ __forceinline__ void spf_fold(float (&o)[64], const float (&ot)[64], const float (&corr)[2], bool centroid,
                                         const float *vc_sc, const float *v_sc, int t)
{
    if (centroid) {
#pragma unroll
        for (int i = 0; i < 64; i++) {
            const int d = (i >> 2) * 8 + 2 * t + (i & 1);
            o[i] = fmaf(o[i], corr[(i >> 1) & 1], ot[i] * (vc_sc[d] / v_sc[d]));
        }
    } else {
#pragma unroll
        for (int i = 0; i < 64; i++)
            o[i] = fmaf(o[i], corr[(i >> 1) & 1], ot[i]);
    }
}

/* Fast mode's softmax of one item's int32 scores si → P·2^8 in sc, as fa3's int8 softmax: the row maxima
 * on the integers (per column half: the two halves' k scales differ; c > 0 keeps the order), then each
 * score converted and exponentiated. slr: s2 · the row's q scale; c0, c1: the halves' k scales. MASK:
 * columns outside keep are out; CENTROID: the row sums weigh each column w_all (the tail column tail_w). */
template <bool MASK, bool CENTROID>
__device__ __forceinline__ void spf_softmax(int32_t (&si)[64], float (&sc)[64], float (&m)[2], float (&l)[2],
                                            float (&corr)[2], const float (&slr)[2], float c0, float c1, uint32_t keep,
                                            float w_all, uint32_t tail_bit, float tail_w)
{
    if constexpr (MASK) { /* no sum reaches INT_MIN: |sum| <= 127²·128 (fa3's EDGE) */
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (!((keep >> (2 * nt + e)) & 1u))
                    si[nt * 4 + e] = si[nt * 4 + 2 + e] = INT_MIN;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int mx0 = INT_MIN, mx1 = INT_MIN;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            mx0 = max(mx0, max(si[nt * 4 + 2 * r], si[nt * 4 + 2 * r + 1]));
#pragma unroll
        for (int nt = 8; nt < 16; nt++)
            mx1 = max(mx1, max(si[nt * 4 + 2 * r], si[nt * 4 + 2 * r + 1]));
        mx0 = max(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = max(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = max(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = max(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float s0 = slr[r] * c0, s1 = slr[r] * c1;
        const float mxs = fmaxf(MASK && mx0 == INT_MIN ? -INFINITY : spf_i2f(mx0) * s0,
                                MASK && mx1 == INT_MIN ? -INFINITY : spf_i2f(mx1) * s1);
        const float m_new = fmaxf(m[r], mxs);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = mmk_exp2_approx(m[r] - m_use);
        m[r] = m_new;
        const float neg = 8.f - m_use;
        float sum = 0.f, tail_p = 0.f;
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = nt * 4 + 2 * r + e;
                float pr = mmk_exp2_approx(fmaf(spf_i2f(si[i]), nt < 8 ? s0 : s1, neg));
                if (MASK && si[i] == INT_MIN)
                    pr = 0.f;
                sc[i] = pr;
                sum += pr;
                if (CENTROID && ((tail_bit >> (2 * nt + e)) & 1u))
                    tail_p = pr;
            }
        /* the columns weigh w_all, the tail column tail_w */
        l[r] = l[r] * corr[r] + (CENTROID ? fmaf(sum, w_all, (tail_w - w_all) * tail_p) : sum);
    }
}

/* Item j's softmax for a fast consumer: its mask as SpConsumer::item_mask says, made from the kernel's
 * parameters (constant memory) each time rather than held in registers (the consumer's registers are
 * full: o, the item's P·V in flight and its scores); the two k scales from shared memory. */
__device__ __forceinline__ void spf_item_softmax(const SpFast &p, int32_t (&si)[64], float (&sc)[64], float (&m)[2],
                                                 float (&l)[2], float (&corr)[2], const float (&slr)[2], float c0,
                                                 float c1, int j, int t)
{
    const int64_t row = (int64_t)blockIdx.x * p.H + blockIdx.y;
    const uint32_t *mrow = p.mask + row * p.W;
    const int count = p.count[row];
    const int n_ct = p.approximate && count < p.NT ? p.n_ct_tiles : 0;
    SpConsumer cs = {mrow, p.NT, p.W, n_ct, (count + 1) / 2, count, sp_len(p.seq, p.NT - 1), 1.f, 8.f, t};
    cs.tail_cut = cs.tail_len < kB && sp_bit(mrow, p.NT - 1);
    SpItemMask im;
    const int kind = cs.item_mask(j, im);
    if (kind == 0) {
        spf_softmax<false, false>(si, sc, m, l, corr, slr, c0, c1, 0u, 1.f, 0u, 0.f);
    } else { /* masked groups and centroid tiles are rare: one variant for both (an exact group weighs its keys 1;
              * three variants inlined here spilled registers) */
        uint32_t tail_bit = 0u; /* this thread's bit of the tail column, if it holds it */
        const int tc = im.tail_col;
        if (kind == 2 && tc >= 0 && tc < kHItem && ((tc & 7) >> 1) == t)
            tail_bit = 1u << (2 * (tc >> 3) + (tc & 1));
        spf_softmax<true, true>(si, sc, m, l, corr, slr, c0, c1, im.keep, kind == 2 ? (float)kB : 1.f, tail_bit,
                                kind == 2 ? im.tail_w : 1.f);
    }
}
#endif

} // namespace

namespace {

__global__ void __launch_bounds__(kHThreads, 1)
    k_sp_fa3_fast(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                  const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmKC,
                  const __grid_constant__ CUtensorMap tmVC, const SpFast p)
{
#ifdef MMK_SP_SM90
    extern __shared__ __align__(1024) unsigned char spq_smem[];
    __shared__ __align__(8) uint64_t bars[13];
    __shared__ float merge_ml[128][4];
    __shared__ float item_scale[2][2]; /* the k scales of each consumer's item in its K stage (the producer's) */
    unsigned char *base = (unsigned char *)(((uintptr_t)spq_smem + 1023) & ~(uintptr_t)1023);
    const uint32_t sQ = mmk_smem_addr(base), sK = sQ + kFQ, sV = sK + 2 * kFK;
    const uint32_t bQ = mmk_smem_addr(&bars[0]);
    const int ib = blockIdx.x, h = blockIdx.y, hk = h / (p.H / p.Hkv);
    const uint32_t *mrow = p.mask + ((int64_t)ib * p.H + h) * p.W;
    const int count = p.count[(int64_t)ib * p.H + h];
    const int n_ct = p.approximate && count < p.NT ? p.n_ct_tiles : 0;
    const int n_groups = (count + 1) / 2, n_items = n_ct + n_groups;

    sp_init_bars(bQ);

    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        /* ---------------- producer: as k_sp_fa3's, with the 8-bit copies ---------------- */
        mmk_regs_dealloc<24>();
        if ((threadIdx.x & 31) == 0 && threadIdx.x < 64) {
            const int c = threadIdx.x >> 5;
            if (c == 0) {
                sp_prefetch_maps(&tmQ, &tmK, &tmV, &tmKC, &tmVC);
                mmk_mbar_expect_tx(bQ, kFQ);
                mmk_tma_load_2d(sQ, &tmQ, bQ, h * kD, ib * kB);
            }
            SpCursor cur;
            cur.start(mrow, p.W);
            int at_group = 0;
            const uint32_t kst = sK + c * kFK;
            for (int j = c, lt = 0; j < n_items; j += 2, lt++) {
                int b0, b1;
                sp_item_blocks(cur, at_group, j, n_ct, b0, b1);
                mmk_mbar_wait(SP_EMPTY_K(c), (lt & 1) ^ 1);
                /* written before the stage's arrival (release): the consumer reads them after its wait */
                item_scale[c][0] = b0 < 0 ? p.kc_scale[(int64_t)hk * p.n_ct_tiles + j] : p.k_scale[(int64_t)hk * p.NT + b0];
                item_scale[c][1] = b0 < 0 ? item_scale[c][0] : p.k_scale[(int64_t)hk * p.NT + b1];
                mmk_mbar_expect_tx(SP_FULL_K(c), kFK);
                if (b0 < 0) {
                    mmk_tma_load_2d(kst, &tmKC, SP_FULL_K(c), hk * kD, j * kHItem);
                } else {
                    mmk_tma_load_2d(kst, &tmK, SP_FULL_K(c), hk * kD, b0 * kB);
                    mmk_tma_load_2d(kst + kFKslot, &tmK, SP_FULL_K(c), hk * kD, b1 * kB);
                }
                sp_produce_v(bQ, sV, kFV, kFVslot, c, lt, &tmV, &tmVC, j, b0, b1, hk);
            }
        }
        return;
    }

    /* ---------------- consumers ---------------- */
    mmk_regs_alloc<240>();
    const int cw = wg - 1;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int bar_mine = 1 + cw, bar_other = 2 - cw;
    const int n_items_u = __shfl_sync(0xffffffffu, n_items, 0);
    const int n_mine = (n_items_u - cw + 1) / 2, phases = (n_items_u + 1) / 2 + 1;
    const uint32_t kst = sK + cw * kFK;
    const int row0 = ib * kB + warp * 16 + g;
    const int64_t plane = (int64_t)p.Hkv * kD;

    float o[64], sc[64], ot[64];
    int32_t si[64];
    uint32_t pa[16];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2] = {1.f, 1.f};
    const float slr[2] = {p.s2 * p.q_scale[(int64_t)h * p.rows_pad + row0],
                          p.s2 * p.q_scale[(int64_t)h * p.rows_pad + row0 + 8]};
    /* the centroid tiles' P·V is in vc's channel scale: folded in at vc scale / v scale (read when needed,
     * and their addresses made there: live registers here spill) */
#define VC_SC (p.stats + 4 * (int64_t)p.Hkv * kD + (int64_t)(blockIdx.y / (p.H / p.Hkv)) * kD)
#define V_SC (p.stats + 2 * (int64_t)p.Hkv * kD + (int64_t)(blockIdx.y / (p.H / p.Hkv)) * kD)

    /* Unlike the bf16 kernel, no S_j beside P_{j−1}·V_{j−1} inside a warpgroup: the e4m3 P·V sums into a
     * fresh accumulator, and o, that accumulator and the scores do not fit the registers together (they
     * spilled); the ping-pong of the two consumers still hides one's softmax behind the other's products.
     * Two issue sections per item (S, then P·V), each one ping-pong turn. */
    if (cw == 1)
        mmk_bar_arrive(1, 256);
    mmk_mbar_wait(bQ, 0);
    int ph = 0;
    for (; ph < n_mine; ph++) {
        const int j = cw + 2 * ph, vs = 2 * cw + (ph & 1);
        mmk_mbar_wait(SP_FULL_K(cw), ph & 1);
        const float c0 = item_scale[cw][0], c1 = item_scale[cw][1];
        mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        spf_issue_s(si, sQ, kst);
        mmk_wgmma_commit();
        mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<0>();
        mmk_fence_regs(si);
        mmk_mbar_arrive(SP_EMPTY_K(cw));
        spf_item_softmax(p, si, sc, m, l, corr, slr, c0, c1, j, t);
        mmk_pack_p_e4m3(pa, sc);
        mmk_mbar_wait(SP_FULL_V(vs), (ph >> 1) & 1);
        mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        spf_issue_pv(ot, pa, sV + vs * kFV);
        mmk_wgmma_commit();
        mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<0>();
        mmk_fence_regs(pa);
        mmk_fence_regs(ot);
        mmk_fence_regs(o);
        /* o was relative to the max before this item, ot to the one after it */
        spf_fold(o, ot, corr, j < n_ct, VC_SC, V_SC, t);
        mmk_mbar_arrive(SP_EMPTY_V(vs));
    }
    for (; ph < phases - 1; ph++) { /* a consumer with an item fewer (or none) keeps the ping-pong in step */
        mmk_bar_sync(bar_mine, 256);
        mmk_bar_arrive(bar_other, 256);
        mmk_bar_sync(bar_mine, 256);
        mmk_bar_arrive(bar_other, 256);
    }
    if (cw == 0)
        mmk_bar_sync(1, 256); /* consumer 1's last arrive */

    /* ---------------- merge, then O / l · v scale + v mean, bf16 ---------------- */
    const int tw = threadIdx.x & 127;
    float *spill = reinterpret_cast<float *>(base + kFQ + 2 * kFK + 2 * kFV); /* consumer 1's Vᵀ stages: idle now */
    if (!sp_merge_exchange(cw, o, m, l, spill, merge_ml, tw))
        return;
#undef VC_SC
#undef V_SC
    const float *vsc = p.stats + 2 * plane + (int64_t)hk * kD, *vmean = p.stats + plane + (int64_t)hk * kD;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const SpMergeRow w = sp_merge_row(m[r], merge_ml[tw], r);
        const float M = w.M, a0 = w.a0, a1 = w.a1, L = a0 * l[r] + a1 * w.l1, inv = L > 0.f ? 1.f / L : 0.f;
        const int row = row0 + 8 * r;
        if (row >= p.seq)
            continue;
        /* the shares of this kernel's normalized part and of the centroid pass's (P here carries 2^8) */
        float wf = L > 0.f ? 1.f : 0.f, wc = 0.f;
        if (p.cstate) {
            const float2 cs = p.cstate[(int64_t)row * p.H + h];
            const float mf = L > 0.f ? M + p.qkm[(int64_t)row * p.H + h] : -INFINITY, mx = fmaxf(mf, cs.x);
            wf = L > 0.f ? mmk_exp2_approx(mf - mx) * L * (1.f / 256.f) : 0.f;
            wc = cs.y > 0.f ? mmk_exp2_approx(cs.x - mx) * cs.y : 0.f;
            const float iw = wf + wc > 0.f ? 1.f / (wf + wc) : 0.f;
            wf *= iw;
            wc *= iw;
        }
        bf16 *orow = p.o + (int64_t)row * p.ldo + (int64_t)h * kD;
#pragma unroll
        for (int dt = 0; dt < 16; dt++) {
            const int i0 = dt * 4 + 2 * r, c = dt * 8 + 2 * t;
            const float v0 = (a0 * o[i0] + a1 * spill[i0 * 128 + tw]) * inv;
            const float v1 = (a0 * o[i0 + 1] + a1 * spill[(i0 + 1) * 128 + tw]) * inv;
            float2 oc = make_float2(0.f, 0.f);
            if (wc > 0.f)
                oc = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(orow + c));
            *reinterpret_cast<__nv_bfloat162 *>(orow + c) =
                __floats2bfloat162_rn(fmaf(wf, fmaf(v0, vsc[c], vmean[c]), wc * oc.x),
                                      fmaf(wf, fmaf(v1, vsc[c + 1], vmean[c + 1]), wc * oc.y));
        }
    }
#else
    (void)p;
    __trap();
#endif
}

} // namespace

#undef SP_FULL_K
#undef SP_EMPTY_K
#undef SP_FULL_V
#undef SP_EMPTY_V

/* ------------------------------------------------------------------ host */

namespace {

using SpTemps = MmkTemps<12>;

bool sp_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

int sp_check_qkv(const mmk_sparse_qkv &x, mm_error *err)
{
    if (x.seq <= 0 || x.heads <= 0 || x.heads_kv <= 0 || x.heads % x.heads_kv)
        return mm_fail(err, "sparse attention: %d rows of %d heads over %d kv heads", x.seq, x.heads, x.heads_kv);
    if (!sp_al16(x.q) || !sp_al16(x.k) || !sp_al16(x.v) || x.ldq % 8 || x.ldk % 8 || x.ldv % 8)
        return mm_fail(err, "sparse attention: q, k, v must be 16-byte aligned bf16 [S, H, 128] views with row "
                       "strides that are multiples of 8 elements");
    return 0;
}

SpRanges sp_ranges(const int64_t (*r)[2], int n)
{
    SpRanges s;
    memset(&s, 0, sizeof s);
    s.n = n;
    for (int i = 0; i < n; i++) {
        s.r[i][0] = (int)(r[i][0] < 0 ? 0 : r[i][0] > INT_MAX ? INT_MAX : r[i][0]);
        s.r[i][1] = (int)(r[i][1] < 0 ? 0 : r[i][1] > INT_MAX ? INT_MAX : r[i][1]);
    }
    return s;
}

/* SubBlock's k for keep of NT blocks (backend/sparse_attn.c's mm_sparse_topk_budget). */
int sp_topk_budget(double keep, int NT)
{
    long long want = (long long)ceil(keep * (double)NT - 1e-9);
    long long k = (want < 1 ? 1 : (want + 7) / 8) * 8;
    return (int)(k < NT ? k : NT);
}

/* TOPK, a few heads at a time (the sub-block cells of one head are U² fp32:
 * 187 MB at S = 109k): the cells through cuBLASLt (fp32 sums of the bf16
 * pooled rows), their log-sum-exp per block pair, the selection. */
int sp_topk_route(int dev, cudaStream_t s, const mmk_sparse_route_args *a, const bf16 *qs, const bf16 *ks, int U,
                  const SpRanges &dense, SpTemps &tmp, mm_error *err)
{
    const int H = a->x.heads, Hkv = a->x.heads_kv, NT = a->blocks;
    const size_t per_head = (size_t)U * U * sizeof(float), budget = (size_t)256 << 20;
    int chunk = (int)(budget / per_head);
    chunk = chunk < 1 ? 1 : chunk > H ? H : chunk;
    if (Hkv != H)
        chunk = 1; /* the batched GEMM's strides cannot express a kv head shared by several query heads */
    float *cells = (float *)tmp.get(per_head * (size_t)chunk, err);
    float *score = (float *)tmp.get((size_t)NT * chunk * NT * sizeof(float), err);
    if (!cells || !score)
        return -1;
    for (int h0 = 0; h0 < H; h0 += chunk) {
        const int hc = H - h0 < chunk ? H - h0 : chunk, hk0 = h0 / (H / Hkv);
        mmk_gemm_ex g;
        memset(&g, 0, sizeof g);
        g.M = U;
        g.N = U;
        g.K = kD;
        g.batch = hc;
        g.ab_dtype = MM_BF16;
        g.y_dtype = MM_F32;
        g.a = qs + (int64_t)h0 * kD;
        g.lda = (int64_t)H * kD;
        g.batch_a = kD;
        g.trans_a = 0;
        g.w = ks + (int64_t)hk0 * kD;
        g.ldw = (int64_t)Hkv * kD;
        g.batch_w = Hkv == H ? kD : 0;
        g.trans_w = 1;
        g.y = cells;
        g.ldy = U;
        g.batch_y = (int64_t)U * U;
        g.alpha = 1.f;
        g.beta = 0.f;
        if (mmk_gemm_ex_run(dev, (mmk_stream)s, &g, err))
            return mm_error_prefix(err, "sparse attention: top-k sub-block scores");
        k_sp_topk_lse<<<dim3(NT, hc), 256, 0, s>>>(cells, U, NT, score);
        if (mmk_launched(err, "k_sp_topk_lse"))
            return -1;
        k_sp_topk_select<<<(unsigned)((int64_t)NT * hc), kTopkThreads, 0, s>>>(
            score, NT, H, h0, hc, a->words, sp_topk_budget(a->keep, NT), dense, a->mask, a->thr);
        if (mmk_launched(err, "k_sp_topk_select"))
            return -1;
    }
    return 0;
}

} // namespace

extern "C" int mmk_sparse_route_run(int dev, mmk_stream st, const mmk_sparse_route_args *a, mm_error *err)
{
    if (mmk_device_enter(dev, err) || sp_check_qkv(a->x, err))
        return -1;
    const int S = a->x.seq, H = a->x.heads, Hkv = a->x.heads_kv, NT = a->blocks, W = a->words;
    if (NT != (S + kB - 1) / kB || W != (NT + 31) / 32 || a->n_sink < 0 || a->n_sink > MMK_SPARSE_MAX_RANGES ||
        a->n_dense < 0 || a->n_dense > MMK_SPARSE_MAX_RANGES)
        return mm_fail(err, "sparse routing: %d blocks / %d words / %d + %d ranges do not fit %d rows", NT, W,
                       a->n_sink, a->n_dense, S);
    if (a->policy == MMK_SPARSE_TOPK && NT > kTopkThreads * kTopkPer)
        return mm_fail(err, "sparse routing: top-k takes at most %d blocks (%d rows), not %d", kTopkThreads * kTopkPer,
                       kTopkThreads * kTopkPer * kB, NT);
    cudaStream_t s = (cudaStream_t)st;
    const float s2 = a->x.scale * 1.4426950408889634f;
    const SpRanges sink = sp_ranges(a->sink, a->n_sink), dense = sp_ranges(a->dense, a->n_dense);
    SpTemps tmp = {dev, "sparse attention", {nullptr}, 0};
    const bool sol = a->policy == MMK_SPARSE_SOL, topk = a->policy == MMK_SPARSE_TOPK;
    const int U = (S + kSub - 1) / kSub;
    float *qbar = sol ? (float *)tmp.get((size_t)NT * H * kD * sizeof(float), err) : nullptr;
    bf16 *qs = topk ? (bf16 *)tmp.get((size_t)U * H * kD * sizeof(bf16), err) : nullptr;
    bf16 *ks = topk ? (bf16 *)tmp.get((size_t)U * Hkv * kD * sizeof(bf16), err) : nullptr;
    if ((sol && !qbar) || (topk && (!qs || !ks)))
        return -1;
    k_sp_pool<<<dim3(NT, H > Hkv ? H : Hkv), kD, 0, s>>>((const bf16 *)a->x.q, a->x.ldq, (const bf16 *)a->x.k, a->x.ldk,
                                                         (const bf16 *)a->x.v, a->x.ldv, S, H, Hkv, s2, qbar,
                                                         (bf16 *)a->kc, (bf16 *)a->vc, qs, ks);
    if (mmk_launched(err, "k_sp_pool"))
        return -1;
    if (sol) {
        float *mu = (float *)tmp.get((size_t)Hkv * kD * sizeof(float), err);
        float *var = (float *)tmp.get((size_t)Hkv * kD * sizeof(float), err);
        float *m2 = a->thresh_exact ? (float *)tmp.get((size_t)Hkv * kD * kD * sizeof(float), err) : nullptr;
        if (!mu || !var || (a->thresh_exact && !m2))
            return -1;
        k_sp_kstats<<<Hkv, kD, 0, s>>>((const bf16 *)a->kc, NT, Hkv, mu, var);
        if (mmk_launched(err, "k_sp_kstats"))
            return -1;
        if (m2) {
            k_sp_m2<<<dim3(kD, Hkv), kD, 0, s>>>((const bf16 *)a->kc, NT, Hkv, m2);
            if (mmk_launched(err, "k_sp_m2"))
                return -1;
        }
        const int64_t items = (int64_t)NT * H;
        k_sp_threshold<<<(unsigned)((items + 7) / 8), 256, 0, s>>>(qbar, mu, var, m2, NT, H, Hkv, s2, a->tau, dense,
                                                                  a->thr);
        if (mmk_launched(err, "k_sp_threshold"))
            return -1;
        const int smem = 2 * kRt * kRpad * (int)sizeof(float);
        MMK_TRY(cudaFuncSetAttribute(k_sp_route_sol, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err,
                "raising the shared-memory limit of the sparse routing kernel");
        k_sp_route_sol<<<dim3((NT + kRt - 1) / kRt, H), 256, smem, s>>>(qbar, (const bf16 *)a->kc, a->thr, NT, H, Hkv,
                                                                        W, s2, a->mask);
        if (mmk_launched(err, "k_sp_route_sol"))
            return -1;
    } else if (topk) {
        if (sp_topk_route(dev, s, a, qs, ks, U, dense, tmp, err))
            return -1;
    } else {
        const uint32_t level = a->keep <= 0 ? 0u : a->keep >= 1 ? 16777216u : (uint32_t)(a->keep * 16777216.0);
        const int64_t words = (int64_t)NT * H * W;
        k_sp_route_forced<<<(unsigned)((words + 255) / 256), 256, 0, s>>>(NT, H, W, a->seed, level, a->mask, a->thr);
        if (mmk_launched(err, "k_sp_route_forced"))
            return -1;
    }
    k_sp_finish<<<(unsigned)(((int64_t)NT * H + 7) / 8), 256, 0, s>>>(a->mask, a->count, a->tally, NT, H, W, a->band,
                                                                       sink, dense);
    return mmk_launched(err, "k_sp_finish");
}

namespace {

int sp_launch_sm80(const mmk_sparse_attn_args *a, cudaStream_t s, mm_error *err)
{
    SpAttn p;
    memset(&p, 0, sizeof p);
    p.q = (const bf16 *)a->x.q;
    p.k = (const bf16 *)a->x.k;
    p.v = (const bf16 *)a->x.v;
    p.kc = (const bf16 *)a->kc;
    p.vc = (const bf16 *)a->vc;
    p.ldq = a->x.ldq;
    p.ldk = a->x.ldk;
    p.ldv = a->x.ldv;
    p.o = (bf16 *)a->o;
    p.ldo = a->ldo;
    p.mask = a->mask;
    p.count = a->count;
    p.seq = a->x.seq;
    p.H = a->x.heads;
    p.Hkv = a->x.heads_kv;
    p.NT = a->blocks;
    p.W = a->words;
    p.approximate = a->approximate;
    p.s2 = a->x.scale * 1.4426950408889634f;
    MMK_TRY(cudaFuncSetAttribute(k_sp_attn_sm80, cudaFuncAttributeMaxDynamicSharedMemorySize, kSm80Smem), err,
            "raising the shared-memory limit of the portable sparse attention kernel");
    k_sp_attn_sm80<<<dim3(a->blocks, a->x.heads), 128, kSm80Smem, s>>>(p);
    return mmk_launched(err, "k_sp_attn_sm80");
}

/* The bf16 Hopper kernel; with state, fast mode's centroid pass (SpFa3::state): only kc and vc are read,
 * so their maps stand in for k's and v's. tmp holds the transposed copies until the work is queued. */
int sp_launch_fa3(SpTemps &tmp, const mmk_sparse_attn_args *a, float2 *state, cudaStream_t s, mm_error *err)
{
    const int S = a->x.seq, H = a->x.heads, Hkv = a->x.heads_kv, NT = a->blocks;
    const int64_t ld_vt = (S + 7) / 8 * 8, ld_vc = (NT + 7) / 8 * 8;
    bf16 *vt = state ? nullptr : (bf16 *)tmp.get((size_t)Hkv * kD * ld_vt * sizeof(bf16), err);
    bf16 *vct = (bf16 *)tmp.get((size_t)Hkv * kD * ld_vc * sizeof(bf16), err);
    if ((!vt && !state) || !vct)
        return -1;
    if (!state) {
        k_sp_transpose<<<dim3((S + 31) / 32, kD / 32, Hkv), 256, 0, s>>>((const bf16 *)a->x.v, a->x.ldv, S, vt, ld_vt);
        if (mmk_launched(err, "k_sp_transpose (v)"))
            return -1;
    }
    k_sp_transpose<<<dim3((NT + 31) / 32, kD / 32, Hkv), 256, 0, s>>>((const bf16 *)a->vc, (int64_t)Hkv * kD, NT, vct,
                                                                       ld_vc);
    if (mmk_launched(err, "k_sp_transpose (vc)"))
        return -1;
    CUtensorMap mq, mk, mv, mkc, mvc;
    if (mmk_tma_map_2d(&mq, false, a->x.q, (uint64_t)H * kD, S, (uint64_t)a->x.ldq * 2, 64, kB, err) ||
        mmk_tma_map_2d(&mkc, false, a->kc, (uint64_t)Hkv * kD, NT, (uint64_t)Hkv * kD * 2, 64, kHItem, err) ||
        mmk_tma_map_2d(&mvc, false, vct, (uint64_t)NT, (uint64_t)Hkv * kD, (uint64_t)ld_vc * 2, 64, kD, err))
        return -1;
    if (state) {
        mk = mkc;
        mv = mvc;
    } else if (mmk_tma_map_2d(&mk, false, a->x.k, (uint64_t)Hkv * kD, S, (uint64_t)a->x.ldk * 2, 64, kB, err) ||
               mmk_tma_map_2d(&mv, false, vt, (uint64_t)S, (uint64_t)Hkv * kD, (uint64_t)ld_vt * 2, 64, kD, err)) {
        return -1;
    }
    const SpFa3 p = {S,       H,        Hkv,           NT,    a->words, a->approximate, a->x.scale * 1.4426950408889634f,
                     a->mask, a->count, (bf16 *)a->o, a->ldo, state};
    MMK_TRY(cudaFuncSetAttribute(k_sp_fa3, cudaFuncAttributeMaxDynamicSharedMemorySize, kHSmem), err,
            "raising the shared-memory limit of the sparse Hopper attention kernel");
    k_sp_fa3<<<dim3(NT, H), kHThreads, kHSmem, s>>>(mq, mk, mv, mkc, mvc, p);
    return mmk_launched(err, "k_sp_fa3");
}

int sp_launch_sm90(int dev, const mmk_sparse_attn_args *a, cudaStream_t s, mm_error *err)
{
    SpTemps tmp = {dev, "sparse attention", {nullptr}, 0};
    return sp_launch_fa3(tmp, a, nullptr, s, err);
}

/* Fast mode: the 8-bit copies (k/v statistics, q and k as int8, v as e4m3 Vᵀ); with the approximation, the
 * centroid pass first (the bf16 kernel over the centroid tiles alone) and s2·q·(k mean) for the merge; then
 * the kernel over the routed blocks, merging the centroid pass's part at the end. The centroid tiles are
 * not the 8-bit kernel's own: a centroid's P·V is one error on a whole block's mass, and e4m3 P and vc make
 * it ~2^-4 — rel_l2 0.19 against the CPU twin where the approximated values cancel, 0.09 with the pass
 * (tests/unit/test_sparse_kernel_model.c; the rest is the e4m3 P·V of the exact blocks). The kernel's
 * in-kernel centroid tiles (SpFast::approximate) are therefore not used here; their maps are k's and v's. */
int sp_launch_sm90_fast(int dev, const mmk_sparse_attn_args *a, cudaStream_t s, mm_error *err)
{
    const int S = a->x.seq, H = a->x.heads, Hkv = a->x.heads_kv, NT = a->blocks;
    const int rows_pad = NT * kB, n_parts = (S + kSpStatRows - 1) / kSpStatRows;
    const int64_t ld_vt = (int64_t)NT * kB, plane = (int64_t)Hkv * kD;
    SpTemps tmp = {dev, "sparse attention", {nullptr}, 0};
    float *part = (float *)tmp.get((size_t)n_parts * plane * 4 * sizeof(float), err);
    float *stats = (float *)tmp.get((size_t)6 * plane * sizeof(float), err);
    int8_t *q8 = (int8_t *)tmp.get((size_t)S * H * kD, err), *k8 = (int8_t *)tmp.get((size_t)S * plane, err);
    float *qs = (float *)tmp.get((size_t)H * rows_pad * sizeof(float), err);
    float *ks = (float *)tmp.get((size_t)Hkv * NT * sizeof(float), err);
    uint8_t *vt8 = (uint8_t *)tmp.get((size_t)plane * ld_vt, err);
    if (!part || !stats || !q8 || !k8 || !qs || !ks || !vt8)
        return -1;
    k_spf_kv_partial<<<dim3(n_parts, Hkv), kD, 0, s>>>((const bf16 *)a->x.k, a->x.ldk, (const bf16 *)a->x.v, a->x.ldv, S,
                                                        Hkv, part);
    k_spf_kv_finish<<<Hkv, kD, 0, s>>>(part, n_parts, Hkv, S, (const bf16 *)a->vc, NT, stats);
    k_spf_quant_q<<<(unsigned)(((int64_t)rows_pad * H + 15) / 16), 256, 0, s>>>((const bf16 *)a->x.q, a->x.ldq, S, H,
                                                                              rows_pad, q8, qs);
    k_spf_quant_rows<kB><<<dim3(NT, Hkv), 256, 0, s>>>((const bf16 *)a->x.k, a->x.ldk, S, Hkv, stats, k8, ks, NT);
    k_spf_v_quant_t<<<dim3((unsigned)(ld_vt / 32), Hkv), 256, 0, s>>>((const bf16 *)a->x.v, a->x.ldv, S, Hkv,
                                                                      stats + plane, stats + 3 * plane, 0, vt8, ld_vt);
    if (mmk_launched(err, "the sparse fast mode's 8-bit copies"))
        return -1;
    float2 *cstate = nullptr;
    float *qkm = nullptr;
    if (a->approximate) {
        cstate = (float2 *)tmp.get((size_t)S * H * sizeof(float2), err);
        qkm = (float *)tmp.get((size_t)S * H * sizeof(float), err);
        if (!cstate || !qkm)
            return -1;
        k_spf_qkm<<<(unsigned)(((int64_t)S * H + 7) / 8), 256, 0, s>>>((const bf16 *)a->x.q, a->x.ldq, S, H, Hkv, stats,
                                                                      a->x.scale * 1.4426950408889634f, qkm);
        if (mmk_launched(err, "k_spf_qkm") || sp_launch_fa3(tmp, a, cstate, s, err))
            return -1;
    }
    CUtensorMap mq, mk, mv;
    if (mmk_tma_map_2d(&mq, true, q8, (uint64_t)H * kD, S, (uint64_t)H * kD, 128, kB, err) ||
        mmk_tma_map_2d(&mk, true, k8, (uint64_t)plane, S, (uint64_t)plane, 128, kB, err) ||
        mmk_tma_map_2d_swizzled(&mv, true, vt8, (uint64_t)ld_vt, (uint64_t)plane, (uint64_t)ld_vt, kB, kD,
                                CU_TENSOR_MAP_SWIZZLE_64B, err))
        return -1;
    SpFast p;
    memset(&p, 0, sizeof p);
    p.seq = S;
    p.H = H;
    p.Hkv = Hkv;
    p.NT = NT;
    p.W = a->words;
    p.approximate = 0;
    p.rows_pad = rows_pad;
    p.s2 = a->x.scale * 1.4426950408889634f;
    p.mask = a->mask;
    p.count = a->count;
    p.q_scale = qs;
    p.k_scale = ks;
    p.stats = stats;
    p.o = (bf16 *)a->o;
    p.ldo = a->ldo;
    p.cstate = cstate;
    p.qkm = qkm;
    MMK_TRY(cudaFuncSetAttribute(k_sp_fa3_fast, cudaFuncAttributeMaxDynamicSharedMemorySize, kFSmem), err,
            "raising the shared-memory limit of the sparse fast attention kernel");
    k_sp_fa3_fast<<<dim3(NT, H), kHThreads, kFSmem, s>>>(mq, mk, mv, mk, mv, p);
    return mmk_launched(err, "k_sp_fa3_fast");
}

int g_hopper[64]; /* 0 unknown, 1 usable, 2 not */

} // namespace

extern "C" int mmk_sparse_usable(int dev, int kernel)
{
    if (dev < 0 || dev >= 64)
        return 0;
    if (kernel == MMK_SPARSE_PORTABLE) {
        cudaDeviceProp prop;
        const bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major >= 8;
        cudaGetLastError();
        return ok;
    }
    if (kernel != MMK_SPARSE_SM90 && kernel != MMK_SPARSE_SM90_FAST)
        return 0;
    return mmk_hopper_kernel_usable(dev, (const void *)k_sp_fa3, g_hopper);
}

extern "C" int mmk_sparse_attn_run(int dev, mmk_stream st, const mmk_sparse_attn_args *a, mm_error *err)
{
    if (mmk_device_enter(dev, err) || sp_check_qkv(a->x, err))
        return -1;
    if (a->blocks != (a->x.seq + kB - 1) / kB || a->words != (a->blocks + 31) / 32 || !sp_al16(a->o) || a->ldo % 8)
        return mm_fail(err, "sparse attention: the route (%d blocks, %d words) or out (16-byte aligned, row stride a "
                       "multiple of 8) does not fit %d rows", a->blocks, a->words, a->x.seq);
    int kernel = a->kernel;
    if (kernel == MMK_SPARSE_AUTO) {
        kernel = mmk_sparse_usable(dev, MMK_SPARSE_SM90) && mmk_sparse_verified(dev, MMK_SPARSE_SM90, NULL)
                     ? MMK_SPARSE_SM90
                     : MMK_SPARSE_PORTABLE;
        if (a->fast && kernel == MMK_SPARSE_SM90 && mmk_sparse_verified(dev, MMK_SPARSE_SM90_FAST, NULL))
            kernel = MMK_SPARSE_SM90_FAST;
    }
    if (!mmk_sparse_usable(dev, kernel))
        return mm_fail(err, "sparse attention: kernel %d does not run on cuda:%d (sm_90 with sm_90a code for the "
                       "Hopper kernel, sm_80+ for the portable one)", kernel, dev);
    cudaStream_t s = (cudaStream_t)st;
    if (kernel == MMK_SPARSE_SM90_FAST)
        return sp_launch_sm90_fast(dev, a, s, err);
    return kernel == MMK_SPARSE_SM90 ? sp_launch_sm90(dev, a, s, err) : sp_launch_sm80(a, s, err);
}

/* ------------------------------------------------------------------ first-use self-check */

namespace {

double sp_rel_l2(const uint16_t *ref, const uint16_t *got, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = mm_bf16_to_f32(ref[i]), y = mm_bf16_to_f32(got[i]);
        if (!isfinite(y))
            return INFINITY;
        num += (x - y) * (x - y);
        den += x * x;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The Hopper kernel against the portable one: 700 rows (a ragged tail of
 * 60), 4 heads; Sol at τ 1 with a sink and dense query blocks, and top-k
 * without approximation (odd counts: a last group of one block). Returns
 * the worse rel_l2, negative when something could not run. */
double sp_selfcheck(int dev, int kernel, mm_error *err)
{
    const int S = 700, H = 4, NT = (S + kB - 1) / kB, W = (NT + 31) / 32, F = 3 * H * kD;
    const size_t n_qkv = (size_t)S * F, n_o = (size_t)S * H * kD;
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    SpTemps tmp = {dev, "sparse attention", {nullptr}, 0};
    bf16 *qkv = (bf16 *)tmp.get(n_qkv * 2, err), *o_ref = (bf16 *)tmp.get(n_o * 2, err);
    bf16 *o_got = (bf16 *)tmp.get(n_o * 2, err), *kc = (bf16 *)tmp.get((size_t)NT * H * kD * 2, err);
    bf16 *vc = (bf16 *)tmp.get((size_t)NT * H * kD * 2, err);
    uint32_t *mask = (uint32_t *)tmp.get((size_t)NT * H * W * 4, err);
    int32_t *count = (int32_t *)tmp.get((size_t)NT * H * 4, err);
    float *thr = (float *)tmp.get((size_t)NT * H * 4, err);
    uint16_t *h_ref = (uint16_t *)malloc(n_o * 2), *h_got = (uint16_t *)malloc(n_o * 2);
    double worst = -1;
    if (s && qkv && o_ref && o_got && kc && vc && mask && count && thr && h_ref && h_got &&
        mmk_fill_random(dev, (mmk_stream)s, qkv, MM_BF16, (int64_t)n_qkv, 0x5ba75e, 2.f, err) == 0) {
        worst = 0;
        for (int prob = 0; prob < 2 && worst >= 0; prob++) {
            mmk_sparse_route_args r;
            memset(&r, 0, sizeof r);
            r.x = {S, H, H, qkv, qkv + H * kD, qkv + 2 * H * kD, F, F, F, 0.08838834764831845f};
            r.policy = prob == 0 ? MMK_SPARSE_SOL : MMK_SPARSE_TOPK;
            r.tau = 1.f;
            r.keep = 0.3f;
            r.band = prob == 0 ? 1 : -1;
            r.n_sink = r.n_dense = prob == 0 ? 1 : 0;
            r.sink[0][1] = r.dense[0][1] = 100;
            r.blocks = NT;
            r.words = W;
            r.mask = mask;
            r.count = count;
            r.kc = kc;
            r.vc = vc;
            r.thr = thr;
            mmk_sparse_attn_args at;
            memset(&at, 0, sizeof at);
            at.x = r.x;
            at.ldo = H * kD;
            at.mask = mask;
            at.count = count;
            at.kc = kc;
            at.vc = vc;
            at.blocks = NT;
            at.words = W;
            at.approximate = prob == 0;
            mmk_sparse_attn_args ref = at, got = at;
            ref.o = o_ref;
            ref.kernel = MMK_SPARSE_PORTABLE;
            got.o = o_got;
            got.kernel = kernel;
            if (mmk_sparse_route_run(dev, (mmk_stream)s, &r, err) ||
                mmk_sparse_attn_run(dev, (mmk_stream)s, &ref, err) ||
                cudaMemsetAsync(o_got, 0xff, n_o * 2, s) != cudaSuccess ||
                mmk_sparse_attn_run(dev, (mmk_stream)s, &got, err) || cudaStreamSynchronize(s) != cudaSuccess ||
                cudaMemcpy(h_ref, o_ref, n_o * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
                cudaMemcpy(h_got, o_got, n_o * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
                cudaError_t e = cudaGetLastError();
                if (!err->msg[0])
                    mm_fail(err, "%s", cudaGetErrorString(e));
                worst = -1;
                break;
            }
            const double rel = sp_rel_l2(h_ref, h_got, n_o);
            worst = rel > worst ? rel : worst;
        }
    }
    free(h_ref);
    free(h_got);
    return worst;
}

std::mutex g_sp_mu;
int g_sp_verdict[64][MMK_SPARSE_KERNELS];
double g_sp_error[64][MMK_SPARSE_KERNELS];

const char *sp_kernel_name(int kernel)
{
    return kernel == MMK_SPARSE_SM90 ? "sm90 bf16" : kernel == MMK_SPARSE_SM90_FAST ? "sm90 int8 q·k + e4m3 p·v" : "portable";
}

} // namespace

extern "C" int mmk_sparse_verified(int dev, int kernel, double *rel_l2)
{
    if (dev < 0 || dev >= 64 || kernel < 0 || kernel >= MMK_SPARSE_KERNELS || !mmk_sparse_usable(dev, kernel))
        return 0;
    if (kernel == MMK_SPARSE_PORTABLE)
        return 1; /* the reference itself */
    std::lock_guard<std::mutex> lock(g_sp_mu);
    if (!g_sp_verdict[dev][kernel]) {
        mm_error err = {{0}};
        const double rel = sp_selfcheck(dev, kernel, &err);
        const double tol = kernel == MMK_SPARSE_SM90 ? 1e-2 : 0.08; /* fast: twice fa3 fast mode's budget here */
        const bool ok = rel >= 0 && rel < tol;
        g_sp_error[dev][kernel] = rel;
        g_sp_verdict[dev][kernel] = ok ? 1 : 2;
        if (ok)
            fprintf(stderr, "mmh3: cuda:%d sparse attention: %s kernel in use (self-check against the portable one: "
                            "rel_l2 %.2g)\n", dev, sp_kernel_name(kernel), rel);
        else if (rel >= 0)
            fprintf(stderr, "mmh3: cuda:%d sparse attention: the %s kernel disagrees with the portable one (rel_l2 "
                            "%.3g, limit %.2g); not used\n", dev, sp_kernel_name(kernel), rel, tol);
        else
            fprintf(stderr, "mmh3: cuda:%d sparse attention: the %s kernel's self-check failed (%s); not used\n", dev,
                    sp_kernel_name(kernel), err.msg);
    }
    if (rel_l2)
        *rel_l2 = g_sp_error[dev][kernel];
    return g_sp_verdict[dev][kernel] == 1;
}

extern "C" const char *mmk_sparse_kind(int dev, int fast)
{
    static thread_local char text[200];
    double rel = 0, rel8 = 0;
    if (fast && mmk_sparse_usable(dev, MMK_SPARSE_SM90) && mmk_sparse_verified(dev, MMK_SPARSE_SM90, &rel) &&
        mmk_sparse_verified(dev, MMK_SPARSE_SM90_FAST, &rel8))
        snprintf(text, sizeof text, "sparse sm90 int8 q·k + e4m3 p·v (fast; self-check vs the portable kernel: rel_l2 "
                 "%.2g)", rel8);
    else if (mmk_sparse_usable(dev, MMK_SPARSE_SM90) && mmk_sparse_verified(dev, MMK_SPARSE_SM90, &rel))
        snprintf(text, sizeof text, "sparse sm90 bf16%s (self-check vs the portable kernel: rel_l2 %.2g)",
                 fast ? ", fast mode: the 8-bit sparse kernel failed its self-check" : "", rel);
    else if (mmk_sparse_usable(dev, MMK_SPARSE_PORTABLE))
        snprintf(text, sizeof text, "sparse portable mma.sync%s", mmk_sparse_usable(dev, MMK_SPARSE_SM90) ?
                 " (the sm90 kernel failed its self-check)" : "");
    else
        snprintf(text, sizeof text, "none (sparse attention needs an sm_80+ GPU)");
    return text;
}

static const mmk_kernel_entry g_sparse_kernels[] = {
    {"sparse_pool", (const void *)k_sp_pool, 80},
    {"sparse_kstats", (const void *)k_sp_kstats, 80},
    {"sparse_m2", (const void *)k_sp_m2, 80},
    {"sparse_threshold", (const void *)k_sp_threshold, 80},
    {"sparse_route_sol", (const void *)k_sp_route_sol, 80},
    {"sparse_route_forced", (const void *)k_sp_route_forced, 80},
    {"sparse_topk_lse", (const void *)k_sp_topk_lse, 80},
    {"sparse_topk_select", (const void *)k_sp_topk_select, 80},
    {"sparse_finish", (const void *)k_sp_finish, 80},
    {"sparse_transpose", (const void *)k_sp_transpose, 80},
    {"sparse_attn_sm80", (const void *)k_sp_attn_sm80, 80},
    {"sparse_attn_sm90", (const void *)k_sp_fa3, 90},
    {"sparse_attn_sm90_fast", (const void *)k_sp_fa3_fast, 90},
    {"sparse_fast_kv_partial", (const void *)k_spf_kv_partial, 80},
    {"sparse_fast_kv_finish", (const void *)k_spf_kv_finish, 80},
    {"sparse_fast_quant_q", (const void *)k_spf_quant_q, 80},
    {"sparse_fast_qkm", (const void *)k_spf_qkm, 80},
    {"sparse_fast_quant_rows", (const void *)k_spf_quant_rows<kB>, 80},
    {"sparse_fast_v_quant_t", (const void *)k_spf_v_quant_t, 90},
};

extern "C" const mmk_kernel_entry *mmk_kernels_sparse(int *n)
{
    *n = (int)(sizeof g_sparse_kernels / sizeof g_sparse_kernels[0]);
    return g_sparse_kernels;
}
