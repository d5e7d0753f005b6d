/* Attention forward, flash-style: o = softmax(q·kᵀ·scale)·v without the score
 * matrix, bf16 in/out, fp32 scores, statistics and accumulators.
 *
 * Portable path (sm_80+, mma.sync), FlashAttention-2 in structure: a block of
 * 4 warps owns 64 query rows of one head (16 rows per warp, Q fragments held
 * in registers); it walks the keys in tiles of 64, double-buffering K and V
 * in shared memory with cp.async, and keeps a running max and sum per row
 * (online softmax, base-2 exponentials with scale·log2 e folded in). P goes
 * from the score accumulators straight into the A fragments of the P·V MMA.
 * Shared-memory rows are padded by 16 bytes so ldmatrix reads are free of
 * bank conflicts for every head size. Head sizes are padded to a multiple of
 * 16 in shared memory (72 → 80) with zeros, which leave q·k and p·v unchanged.
 * A plain f32 kernel takes what the tensor cores cannot (f32, unaligned
 * views), and on Hopper a wgmma kernel takes bf16 head dim 128 (below).
 *
 * CPU twin: src/backend/cpu/ (exact softmax in fp32/double).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_common.cuh"
#include "kernels/common.cuh"
#include "kernels/mma.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

namespace {

struct AttnParams {
    const void *q, *k, *v;
    void *o;
    int64_t ldq, ldk, ldv, ldo;
    int64_t hsq, hsk, hsv, hso;
    int seq_q, seq_k, heads_q, heads_kv, D;
    float scale_log2;
    int causal;
    const int32_t *cu_q, *cu_k;
    /* Hopper kernels, packed sequences: where sequence z's keys start in the
     * transposed V copy (each start 16-byte aligned there) */
    const int32_t *vt_k0;
};

const int kWarps = 4, kBM = 64, kBN = 64;

template <int DP> struct Tile {
    static const int kStride = DP + 8; /* elements per padded smem row */
    static const int kChunks = DP / 8; /* 16-byte chunks per row */
    static const int kSmemElems = kBM * kStride + 4 * kBN * kStride;
};

/* Copies rows [0, rows) of a row-major [*, D] matrix of 16-bit elements
 * into a padded smem tile of kRows rows; missing rows and the columns past D
 * are zero-filled. */
template <int DP, int kRows, typename T>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t ld, int rows, int D)
{
    const int CH = Tile<DP>::kChunks;
    for (int i = threadIdx.x; i < kRows * CH; i += kWarps * 32) {
        int r = i / CH, c = i % CH;
        bool ok = r < rows && c * 8 < D;
        const T *src = ok ? g + (int64_t)r * ld + c * 8 : g;
        mmk_cp_async16(s + r * Tile<DP>::kStride + c * 8, src, ok ? 16 : 0);
    }
}

/* T: bf16 or f16. Head dims up to 128 keep the Q fragments in registers;
 * 256 reloads them from shared memory at every k-step (registers). */
template <int DP, typename T>
__global__ void __launch_bounds__(kWarps * 32) k_attn_fwd_sm80(AttnParams p)
{
    const int S = Tile<DP>::kStride;
    const bool kQReg = DP <= 128;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + kBM * S;      /* two buffers */
    T *sV = sK + 2 * kBN * S;  /* two buffers */

    int mb = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
    int q0 = 0, k0 = 0, Lq = p.seq_q, Lk = p.seq_k;
    if (p.cu_q) {
        q0 = p.cu_q[z];
        Lq = p.cu_q[z + 1] - q0;
        k0 = p.cu_k[z];
        Lk = p.cu_k[z + 1] - k0;
    }
    if (mb * kBM >= Lq)
        return;
    int hk = h / (p.heads_q / p.heads_kv);
    const T *Q = static_cast<const T *>(p.q) + (int64_t)(q0 + mb * kBM) * p.ldq + (int64_t)h * p.hsq;
    const T *K = static_cast<const T *>(p.k) + (int64_t)k0 * p.ldk + (int64_t)hk * p.hsk;
    const T *V = static_cast<const T *>(p.v) + (int64_t)k0 * p.ldv + (int64_t)hk * p.hsv;
    int rows_q = Lq - mb * kBM < kBM ? Lq - mb * kBM : kBM;

    /* Keys this block needs: all, or up to the diagonal of its last row. */
    int n_kb = (Lk + kBN - 1) / kBN;
    int diag = Lk - Lq; /* query i sees keys j <= i + diag */
    if (p.causal) {
        int last_key = mb * kBM + rows_q - 1 + diag;
        int need = last_key < 0 ? 0 : last_key / kBN + 1;
        n_kb = need < n_kb ? need : n_kb;
    }

    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;

    load_tile<DP, kBM, T>(sQ, Q, p.ldq, rows_q, p.D);
    if (n_kb > 0) {
        load_tile<DP, kBN, T>(sK, K, p.ldk, Lk < kBN ? Lk : kBN, p.D);
        load_tile<DP, kBN, T>(sV, V, p.ldv, Lk < kBN ? Lk : kBN, p.D);
    }
    mmk_cp_async_commit();

    float o[DP / 8][4];
    mmk_zero_acc(o);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t qf[kQReg ? DP / 16 : 1][4];
    int row_i[2] = {mb * kBM + warp * 16 + g, mb * kBM + warp * 16 + g + 8};

    for (int kb = 0; kb < n_kb; kb++) {
        int buf = kb & 1;
        if (kb + 1 < n_kb) {
            int r0 = (kb + 1) * kBN, rows = Lk - r0 < kBN ? Lk - r0 : kBN;
            load_tile<DP, kBN, T>(sK + (buf ^ 1) * kBN * S, K + (int64_t)r0 * p.ldk, p.ldk, rows, p.D);
            load_tile<DP, kBN, T>(sV + (buf ^ 1) * kBN * S, V + (int64_t)r0 * p.ldv, p.ldv, rows, p.D);
        }
        mmk_cp_async_turn(kb + 1 < n_kb);
        if (kQReg && kb == 0) {
#pragma unroll
            for (int ks = 0; ks < (kQReg ? DP / 16 : 1); ks++)
                mmk_ldmatrix_x4(qf[ks], sQ + (warp * 16 + (lane & 15)) * S + ks * 16 + (lane >> 4) * 8);
        }
        const T *cK = sK + buf * kBN * S, *cV = sV + buf * kBN * S;

        /* S = Q·Kᵀ for this warp's 16 rows × 64 keys. */
        float sc[kBN / 8][4];
        mmk_zero_acc(sc);
#pragma unroll
        for (int ks = 0; ks < DP / 16; ks++) {
            uint32_t qtmp[4];
            const uint32_t *qk = qf[kQReg ? ks : 0];
            if (!kQReg) {
                mmk_ldmatrix_x4(qtmp, sQ + (warp * 16 + (lane & 15)) * S + ks * 16 + (lane >> 4) * 8);
                qk = qtmp;
            }
#pragma unroll
            for (int np = 0; np < kBN / 16; np++) {
                uint32_t b[4];
                mmk_ldmatrix_x4(b, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + ks * 16 + ((lane >> 3) & 1) * 8);
                MmkMma<T>::mma(sc[2 * np], qk, b);
                MmkMma<T>::mma(sc[2 * np + 1], qk, b + 2);
            }
        }

        /* Mask keys past the end and, when causal, past the diagonal. */
        int key0 = kb * kBN;
        bool edge = key0 + kBN > Lk || (p.causal && key0 + kBN - 1 > mb * kBM + diag);
        if (edge) {
#pragma unroll
            for (int nt = 0; nt < kBN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = key0 + nt * 8 + 2 * t + (e & 1);
                    int i = row_i[e >> 1];
                    if (j >= Lk || (p.causal && j > i + diag))
                        sc[nt][e] = -INFINITY;
                }
        }

        /* Online softmax over the two rows this thread holds. */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mx = mmk_acc_row_max(sc, r);
            float m_new = fmaxf(row_max[r], mx * p.scale_log2);
            float m_use = m_new == -INFINITY ? 0.f : m_new;
            float corr = exp2f(row_max[r] - m_use);
            row_max[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < kBN / 8; nt++) {
                float p0 = exp2f(sc[nt][2 * r] * p.scale_log2 - m_use);
                float p1 = exp2f(sc[nt][2 * r + 1] * p.scale_log2 - m_use);
                sc[nt][2 * r] = p0;
                sc[nt][2 * r + 1] = p1;
                sum += p0 + p1;
            }
            row_sum[r] = row_sum[r] * corr + sum;
            mmk_rescale_row(o, r, corr);
        }

        /* O += P·V */
#pragma unroll
        for (int kk = 0; kk < kBN / 16; kk++) {
            uint32_t a[4];
            a[0] = MmkMma<T>::pack(sc[2 * kk][0], sc[2 * kk][1]);
            a[1] = MmkMma<T>::pack(sc[2 * kk][2], sc[2 * kk][3]);
            a[2] = MmkMma<T>::pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            a[3] = MmkMma<T>::pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < DP / 16; dp++) {
                uint32_t b[4];
                mmk_ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + dp * 16 +
                                             (lane >> 4) * 8);
                MmkMma<T>::mma(o[2 * dp], a, b);
                MmkMma<T>::mma(o[2 * dp + 1], a, b + 2);
            }
        }
        __syncthreads(); /* this buffer is refilled next iteration */
    }

    /* Normalize and write this thread's rows. */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float s = mmk_quad_sum(row_sum[r]);
        float inv = s > 0.f ? 1.f / s : 0.f;
        int i = row_i[r];
        if (i >= Lq)
            continue;
        T *orow = static_cast<T *>(p.o) + (int64_t)(q0 + i) * p.ldo + (int64_t)h * p.hso;
#pragma unroll
        for (int dt = 0; dt < DP / 8; dt++) {
            int c = dt * 8 + 2 * t;
            if (c < p.D)
                *reinterpret_cast<uint32_t *>(orow + c) = MmkMma<T>::pack(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        }
    }
}

template <int DP, typename T> int launch_sm80(const AttnParams &p, int max_q, int n_seqs, cudaStream_t s, mm_error *err)
{
    size_t smem = (size_t)Tile<DP>::kSmemElems * sizeof(T);
    MMK_TRY(cudaFuncSetAttribute(k_attn_fwd_sm80<DP, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
            "raising the shared-memory limit of the attention kernel");
    dim3 grid((max_q + kBM - 1) / kBM, p.heads_q, n_seqs);
    k_attn_fwd_sm80<DP, T><<<grid, kWarps * 32, smem, s>>>(p);
    return mmk_launched(err, "k_attn_fwd_sm80");
}

template <typename T> int launch_sm80_any(const AttnParams &p, int max_q, int n_seqs, cudaStream_t s, mm_error *err)
{
    if (p.D <= 64)
        return launch_sm80<64, T>(p, max_q, n_seqs, s, err);
    if (p.D <= 80)
        return launch_sm80<80, T>(p, max_q, n_seqs, s, err);
    if (p.D <= 128)
        return launch_sm80<128, T>(p, max_q, n_seqs, s, err);
    return launch_sm80<256, T>(p, max_q, n_seqs, s, err);
}

/* f32 (or shapes the tensor-core kernels do not take): a warp per (query,
 * head), keys one at a time with an online softmax in f32. For the small
 * attentions of the VAEs; slow at DiT sizes. */
__global__ void k_attn_simt(AttnParams p, mm_dtype t)
{
    int64_t item = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    int z = blockIdx.y;
    int q0 = 0, k0 = 0, Lq = p.seq_q, Lk = p.seq_k;
    if (p.cu_q) {
        q0 = p.cu_q[z];
        Lq = p.cu_q[z + 1] - q0;
        k0 = p.cu_k[z];
        Lk = p.cu_k[z + 1] - k0;
    }
    if (item >= (int64_t)Lq * p.heads_q)
        return;
    int i = (int)(item / p.heads_q), h = (int)(item % p.heads_q);
    int hk = h / (p.heads_q / p.heads_kv);
    const int kMaxPer = 8; /* head dims up to 256 */
    float qv[kMaxPer], acc[kMaxPer];
    int64_t qoff = (int64_t)(q0 + i) * p.ldq + (int64_t)h * p.hsq;
#pragma unroll
    for (int e = 0; e < kMaxPer; e++) {
        int d = lane + 32 * e;
        qv[e] = d < p.D ? mmk_ld(p.q, t, qoff + d) : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    int last = p.causal ? i + (Lk - Lq) : Lk - 1;
    if (last > Lk - 1)
        last = Lk - 1;
    for (int j = 0; j <= last; j++) {
        int64_t koff = (int64_t)(k0 + j) * p.ldk + (int64_t)hk * p.hsk;
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < kMaxPer; e++) {
            int d = lane + 32 * e;
            if (d < p.D)
                s += qv[e] * mmk_ld(p.k, t, koff + d);
        }
        s = mmk_warp_sum(s) * p.scale_log2;
        float m_new = fmaxf(m, s);
        float corr = exp2f(m - m_new), pj = exp2f(s - m_new);
        l = l * corr + pj;
        int64_t voff = (int64_t)(k0 + j) * p.ldv + (int64_t)hk * p.hsv;
#pragma unroll
        for (int e = 0; e < kMaxPer; e++) {
            int d = lane + 32 * e;
            acc[e] = acc[e] * corr + (d < p.D ? pj * mmk_ld(p.v, t, voff + d) : 0.f);
        }
        m = m_new;
    }
    float inv = l > 0.f ? 1.f / l : 0.f;
    int64_t ooff = (int64_t)(q0 + i) * p.ldo + (int64_t)h * p.hso;
#pragma unroll
    for (int e = 0; e < kMaxPer; e++) {
        int d = lane + 32 * e;
        if (d < p.D)
            mmk_st(p.o, t, ooff + d, acc[e] * inv);
    }
}

/* ====================================================================== Hopper path
 *
 * sm_90a, head_dim 128, bf16: the two matrix products run on the warpgroup
 * MMA (wgmma) instead of mma.sync. A block of two warpgroups owns 128 query
 * rows (64 per warpgroup) and walks the keys in tiles of 128. Q, K and Vᵀ
 * tiles live in shared memory in the 128-byte-swizzled, K-major layout
 * wgmma reads through matrix descriptors: rows of 64 bf16 (128 bytes), the
 * 16-byte chunk c of row r stored at chunk c ^ (r mod 8), 8-row groups 1024
 * bytes apart, each tile 1024-byte aligned. V is transposed once per call
 * into a [kv head][dim][key] scratch copy (about 1% of the attention's
 * time at S = 38k) so that P·V also reads a K-major operand; with packed
 * sequences each one starts on a 16-byte boundary of that copy (a sequence
 * may start at any key, the copies move 16-byte chunks). Three K/Vᵀ stages
 * with cp.async: each iteration issues the next-but-one tile's copies while
 * its S = Q·Kᵀ runs on the tensor cores, with one barrier per iteration (so
 * the two warpgroups drift apart and one's softmax overlaps the other's
 * MMAs). S takes A and B from shared memory, O += P·V takes P straight from
 * the score registers (the wgmma accumulator layout per warp is mma.sync's,
 * so the FlashAttention-2 register reuse carries over), V from shared
 * memory. Softmax as in the portable path, exponentials with ex2.approx.
 * (Leaving P·V in flight across the loop's top made ptxas serialize the
 * wgmmas, C7515.) The DiT's own attention is kernels/attn_fa3.cu; this one
 * serves the causal and packed-sequence callers (the text encoder, the
 * sequence-parallel shares) at about twice the portable kernel's rate.
 */
const int kBM90 = 128, kBN90 = 128;
const int kTile90 = 128 * 128 * 2;              /* bytes of one 128×128 bf16 tile (two 64-wide halves) */

__device__ __forceinline__ uint32_t sw128(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

/* Matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)(16 >> 4) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMK_SM90 1
#endif

#ifdef MMK_SM90

/* d += A·B, A from registers (the m16n8k16 A fragment of each warp's 16
 * rows), B from shared memory. */
__device__ __forceinline__ void wgmma_rs_m64n128k16(float d[64], const uint32_t a[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

/* Rows [0, rows) of a [*, 128] row-major bf16 matrix (row stride ld) into a
 * swizzled 128×128 tile (two 64-column halves); missing rows zero-filled. */
__device__ __forceinline__ void load_tile90(unsigned char *tile, const bf16 *g, int64_t ld, int rows)
{
    for (int i = threadIdx.x; i < 128 * 16; i += 256) {
        int r = i >> 4, c = i & 15;
        bool ok = r < rows;
        const bf16 *src = ok ? g + (int64_t)r * ld + c * 8 : g;
        mmk_cp_async16(tile + (c >> 3) * (kTile90 / 2) + sw128(r, c & 7), src, ok ? 16 : 0);
    }
}

/* Vᵀ tile: 128 dims × 128 keys from the transposed copy (row = dim, stride
 * ld_vt), keys from key0; keys at or past `keys` zero-filled. */
__device__ __forceinline__ void load_vt90(unsigned char *tile, const bf16 *g, int64_t ld_vt, int keys)
{
    for (int i = threadIdx.x; i < 128 * 16; i += 256) {
        int d = i >> 4, c = i & 15;
        int valid = keys - c * 8;
        valid = valid < 0 ? 0 : valid > 8 ? 8 : valid;
        const bf16 *src = valid ? g + (int64_t)d * ld_vt + c * 8 : g;
        mmk_cp_async16(tile + (c >> 3) * (kTile90 / 2) + sw128(d, c & 7), src, valid * 2);
    }
}

const int kSmem90p = 7 * kTile90 + 1024; /* Q, K×3, Vᵀ×3, alignment slack */

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__global__ void __launch_bounds__(256, 1) k_attn_fwd_sm90p(AttnParams p, const bf16 *__restrict__ vt, int64_t ld_vt)
{
#ifdef MMK_SM90
    extern __shared__ __align__(1024) unsigned char smem90p_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)smem90p_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sQ = base, *sK = base + kTile90, *sV = base + 4 * kTile90;

    int mb = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
    int q0 = 0, k0 = 0, Lq = p.seq_q, Lk = p.seq_k;
    if (p.cu_q) {
        q0 = p.cu_q[z];
        Lq = p.cu_q[z + 1] - q0;
        k0 = p.cu_k[z];
        Lk = p.cu_k[z + 1] - k0;
    }
    if (mb * kBM90 >= Lq)
        return;
    int hk = h / (p.heads_q / p.heads_kv);
    const bf16 *Q = static_cast<const bf16 *>(p.q) + (int64_t)(q0 + mb * kBM90) * p.ldq + (int64_t)h * p.hsq;
    const bf16 *K = static_cast<const bf16 *>(p.k) + (int64_t)k0 * p.ldk + (int64_t)hk * p.hsk;
    const bf16 *VT = vt + (int64_t)hk * 128 * ld_vt + (p.vt_k0 ? p.vt_k0[z] : k0);
    int rows_q = Lq - mb * kBM90 < kBM90 ? Lq - mb * kBM90 : kBM90;
    int n_kb = (Lk + kBN90 - 1) / kBN90;
    int diag = Lk - Lq;
    if (p.causal) {
        int last_key = mb * kBM90 + rows_q - 1 + diag;
        int need = last_key < 0 ? 0 : last_key / kBN90 + 1;
        n_kb = need < n_kb ? need : n_kb;
    }

    int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;
    int row_i[2] = {mb * kBM90 + wg * 64 + warp * 16 + g, mb * kBM90 + wg * 64 + warp * 16 + g + 8};

    /* tile j → stage j % 3; one cp.async group per tile (empty past the end) */
    auto load_stage = [&](int j) {
        if (j < n_kb) {
            int r0 = j * kBN90, rows = Lk - r0 < kBN90 ? Lk - r0 : kBN90;
            load_tile90(sK + (j % 3) * kTile90, K + (int64_t)r0 * p.ldk, p.ldk, rows);
            load_vt90(sV + (j % 3) * kTile90, VT + r0, ld_vt, Lk - r0);
        }
        mmk_cp_async_commit();
    };
    load_tile90(sQ, Q, p.ldq, rows_q);
    load_stage(0); /* Q rides in tile 0's group */
    load_stage(1);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t q_addr = mmk_smem_addr(sQ) + wg * 64 * 128;

    for (int kb = 0; kb < n_kb; kb++) {
        int st = kb % 3;
        mmk_cp_async_wait<1>(); /* tile kb landed (kb + 1 may still fly) */
        fence_proxy_async();
        __syncthreads(); /* tile kb visible to all; every P·V of tile kb − 1 done: stage (kb + 2) % 3 free */
        uint32_t k_addr = mmk_smem_addr(sK + st * kTile90), v_addr = mmk_smem_addr(sV + st * kTile90);

        float sc[64];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t off = (kk >> 2) * (kTile90 / 2) + (kk & 3) * 32;
            mmk_wgmma_ss_bf16_n128(sc, desc_sw128(q_addr + off), desc_sw128(k_addr + off), kk > 0);
        }
        wgmma_commit();
        load_stage(kb + 2); /* overlaps the S GEMM */
        wgmma_wait0();

        int key0 = kb * kBN90;
        bool edge = key0 + kBN90 > Lk || (p.causal && key0 + kBN90 - 1 > mb * kBM90 + diag);
        if (edge) {
#pragma unroll
            for (int nt = 0; nt < 16; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = key0 + nt * 8 + 2 * t + (e & 1);
                    int i = row_i[e >> 1];
                    if (j >= Lk || (p.causal && j > i + diag))
                        sc[nt * 4 + e] = -INFINITY;
                }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mx = mmk_wg_row_max(sc, r);
            float m_new = fmaxf(row_max[r], mx * p.scale_log2);
            float m_use = m_new == -INFINITY ? 0.f : m_new;
            float corr = fast_exp2(row_max[r] - m_use);
            row_max[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < 16; nt++) {
                float p0 = fast_exp2(sc[nt * 4 + 2 * r] * p.scale_log2 - m_use);
                float p1 = fast_exp2(sc[nt * 4 + 2 * r + 1] * p.scale_log2 - m_use);
                sc[nt * 4 + 2 * r] = p0;
                sc[nt * 4 + 2 * r + 1] = p1;
                sum += p0 + p1;
            }
            row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
            for (int dt = 0; dt < 16; dt++) {
                o[dt * 4 + 2 * r] *= corr;
                o[dt * 4 + 2 * r + 1] *= corr;
            }
        }
        uint32_t pa[8][4];
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            pa[kk][0] = mmk_pack_bf16(sc[(2 * kk) * 4 + 0], sc[(2 * kk) * 4 + 1]);
            pa[kk][1] = mmk_pack_bf16(sc[(2 * kk) * 4 + 2], sc[(2 * kk) * 4 + 3]);
            pa[kk][2] = mmk_pack_bf16(sc[(2 * kk + 1) * 4 + 0], sc[(2 * kk + 1) * 4 + 1]);
            pa[kk][3] = mmk_pack_bf16(sc[(2 * kk + 1) * 4 + 2], sc[(2 * kk + 1) * 4 + 3]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t off = (kk >> 2) * (kTile90 / 2) + (kk & 3) * 32;
            wgmma_rs_m64n128k16(o, pa[kk], desc_sw128(v_addr + off));
        }
        wgmma_commit();
        wgmma_wait0();
    }
    wgmma_wait0();
    mmk_cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float s = mmk_quad_sum(row_sum[r]);
        float inv = s > 0.f ? 1.f / s : 0.f;
        int i = row_i[r];
        if (i >= Lq)
            continue;
        bf16 *orow = static_cast<bf16 *>(p.o) + (int64_t)(q0 + i) * p.ldo + (int64_t)h * p.hso;
#pragma unroll
        for (int dt = 0; dt < 16; dt++) {
            int c = dt * 8 + 2 * t;
            *reinterpret_cast<__nv_bfloat162 *>(orow + c) =
                __floats2bfloat162_rn(o[dt * 4 + 2 * r] * inv, o[dt * 4 + 2 * r + 1] * inv);
        }
    }
#else
    (void)p;
    (void)vt;
    (void)ld_vt;
    __trap();
#endif
}

/* The transposes' first half: keys j0 .. j0 + 31 of dims d0 .. d0 + 31 of kv head h into tile (zeros past
 * `keys`), by 32 × 8 threads (tx, ty). */
__device__ __forceinline__ void attn_vt_tile_load(bf16 (&tile)[32][33], const bf16 *__restrict__ v, int64_t ldv,
                                                  int64_t hsv, int keys, int h, int d0, int j0, int tx, int ty)
{
    for (int k = ty; k < 32; k += 8) {
        int j = j0 + k;
        tile[k][tx] = j < keys ? v[(int64_t)j * ldv + (int64_t)h * hsv + d0 + tx] : __float2bfloat16_rn(0.f);
    }
}

/* vt[h][d][j] = v[j, h, d] for the 128 dims of every kv head: a tiled
 * transpose through shared memory (32 keys × 32 dims per block step). */
__global__ void k_transpose_v(const bf16 *__restrict__ v, int64_t ldv, int64_t hsv, int keys, bf16 *__restrict__ vt,
                              int64_t ld_vt)
{
    __shared__ bf16 tile[32][33];
    int h = blockIdx.z, d0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5; /* 32 × 8 threads */
    attn_vt_tile_load(tile, v, ldv, hsv, keys, h, d0, j0, tx, ty);
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
        int j = j0 + tx;
        if (j < keys)
            vt[((int64_t)h * 128 + d0 + k) * ld_vt + j] = tile[tx][k];
    }
}

/* Packed sequences: the transposed V gives each sequence its own 16-byte
 * aligned run of columns (cp.async copies 16-byte chunks from it, and a
 * sequence may start at any key): off[z] = Σ_{y<z} align8(len_y). One thread;
 * n_seqs is small (the VAEs' tiles, a few dozen at most). */
__global__ void k_vt_offsets(const int32_t *__restrict__ cu_k, int n_seqs, int32_t *__restrict__ off)
{
    int o = 0;
    for (int z = 0; z < n_seqs; z++) {
        off[z] = o;
        o += (cu_k[z + 1] - cu_k[z] + 7) & ~7;
    }
    off[n_seqs] = o;
}

/* k_transpose_v for packed sequences: key j of sequence z (cu_k[z] <= j <
 * cu_k[z + 1]) goes to column off[z] + j - cu_k[z]; keys outside every
 * sequence are not copied. */
__global__ void k_transpose_v_segs(const bf16 *__restrict__ v, int64_t ldv, int64_t hsv, int keys,
                                   const int32_t *__restrict__ cu_k, int n_seqs, const int32_t *__restrict__ off,
                                   bf16 *__restrict__ vt, int64_t ld_vt)
{
    __shared__ bf16 tile[32][33];
    int h = blockIdx.z, d0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5; /* 32 × 8 threads */
    attn_vt_tile_load(tile, v, ldv, hsv, keys, h, d0, j0, tx, ty);
    /* this thread's key j0 + tx: its sequence by binary search, its column */
    int j = j0 + tx, col = -1;
    if (j < keys && j >= cu_k[0] && j < cu_k[n_seqs]) {
        int lo = 0, hi = n_seqs - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (cu_k[mid] <= j)
                lo = mid;
            else
                hi = mid - 1;
        }
        col = off[lo] + j - cu_k[lo];
    }
    __syncthreads();
    if (col < 0)
        return;
    for (int k = ty; k < 32; k += 8)
        vt[((int64_t)h * 128 + d0 + k) * ld_vt + col] = tile[tx][k];
}

int launch_sm90(const AttnParams &p_in, const mmk_attention *a, int max_q, int n_seqs, int dev, cudaStream_t s,
                mm_error *err)
{
    AttnParams p = p_in;
    const int keys = a->seq_k;
    const bool packed = a->cu_seqlens_k != nullptr;
    /* the transposed V: keys padded to a multiple of 8 (16-byte rows), plus
     * up to 7 columns per packed sequence so each one starts aligned; the
     * sequences' column offsets follow it in the same scratch block */
    const int64_t ld_vt = ((int64_t)keys + (packed ? 8 * (int64_t)n_seqs : 0) + 7) / 8 * 8;
    const size_t vt_bytes = (size_t)a->heads_kv * 128 * ld_vt * sizeof(bf16);
    unsigned char *block =
        (unsigned char *)mmk_scratch(dev, 2, vt_bytes + (packed ? (size_t)(n_seqs + 1) * sizeof(int32_t) : 0), err);
    if (!block)
        return -1;
    bf16 *vt = (bf16 *)block;
    dim3 tg((keys + 31) / 32, 128 / 32, a->heads_kv);
    if (packed) {
        int32_t *off = (int32_t *)(block + vt_bytes);
        k_vt_offsets<<<1, 1, 0, s>>>(a->cu_seqlens_k, n_seqs, off);
        if (mmk_launched(err, "k_vt_offsets"))
            return -1;
        k_transpose_v_segs<<<tg, 256, 0, s>>>(static_cast<const bf16 *>(p.v), p.ldv, p.hsv, keys, a->cu_seqlens_k,
                                              n_seqs, off, vt, ld_vt);
        if (mmk_launched(err, "k_transpose_v_segs"))
            return -1;
        p.vt_k0 = off;
    } else {
        k_transpose_v<<<tg, 256, 0, s>>>(static_cast<const bf16 *>(p.v), p.ldv, p.hsv, keys, vt, ld_vt);
        if (mmk_launched(err, "k_transpose_v"))
            return -1;
        p.vt_k0 = nullptr;
    }
    dim3 grid((max_q + kBM90 - 1) / kBM90, p.heads_q, n_seqs);
    MMK_TRY(cudaFuncSetAttribute(k_attn_fwd_sm90p, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem90p), err,
            "raising the shared-memory limit of the Hopper attention kernel");
    k_attn_fwd_sm90p<<<grid, 256, kSmem90p, s>>>(p, vt, ld_vt);
    return mmk_launched(err, "k_attn_fwd_sm90p");
}

/* The Hopper kernel can run where the device is sm_90 and this build
 * carries sm_90a code for it. */
bool sm90_usable(int dev)
{
    static int cached[64];
    if (dev < 0 || dev >= 64)
        return false;
    if (!cached[dev]) {
        cudaDeviceProp prop;
        cudaFuncAttributes fa;
        bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 &&
                  cudaFuncGetAttributes(&fa, k_attn_fwd_sm90p) == cudaSuccess && fa.binaryVersion >= 90;
        cudaGetLastError();
        cached[dev] = ok ? 1 : 2;
    }
    return cached[dev] == 1;
}

/* Whether the Hopper kernel agrees with the portable one on problems that
 * exercise every tile path (6 key tiles, the last partial; causal with GQA
 * and two packed sequences, and plain): checked once per device on first
 * use and announced on stderr; a kernel that disagrees is not used. */
bool hopper_verified(int dev)
{
    static int cached[64];
    if (dev < 0 || dev >= 64)
        return false;
    if (cached[dev])
        return cached[dev] == 1;
    const int S = 700, H = 4, D = 128, W = 3 * H * D; /* q: 4 heads; k, v: 4 (run 1) or the first 2 (run 2, GQA) */
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    mm_error err = {{0}};
    size_t n = (size_t)S * W, no = (size_t)S * H * D;
    bf16 *qkv = (bf16 *)mm_cuda_malloc(dev, n * 2, &err), *o80 = (bf16 *)mm_cuda_malloc(dev, no * 2, &err),
         *o90 = (bf16 *)mm_cuda_malloc(dev, no * 2, &err);
    int32_t *cu = (int32_t *)mm_cuda_malloc(dev, 3 * sizeof(int32_t), &err);
    const int32_t cu_host[3] = {0, 300, S}; /* two packed sequences, the first ending mid-tile */
    uint16_t *h80 = (uint16_t *)malloc(no * 2), *h90 = (uint16_t *)malloc(no * 2);
    bool ok = s && qkv && o80 && o90 && h80 && h90 && cu &&
              mmk_fill_random(dev, s, qkv, MM_BF16, (int64_t)n, 0x5eed, 2.f, &err) == 0 &&
              cudaMemcpy(cu, cu_host, sizeof cu_host, cudaMemcpyHostToDevice) == cudaSuccess;
    double worst = 0;
    for (int causal = 0; causal < 2 && ok; causal++) {
        AttnParams p;
        memset(&p, 0, sizeof p);
        p.q = qkv;
        p.k = qkv + H * D;
        p.v = qkv + 2 * H * D;
        p.ldq = p.ldk = p.ldv = W;
        p.hsq = p.hsk = p.hsv = p.hso = D;
        p.ldo = H * D;
        p.seq_q = p.seq_k = S;
        /* run 1: plain; run 2: causal, GQA (4 query heads on 2 kv heads), two packed sequences */
        p.heads_q = H;
        p.heads_kv = causal ? H / 2 : H;
        p.D = D;
        p.scale_log2 = 0.08838834764831845f * 1.4426950408889634f;
        p.causal = causal;
        p.cu_q = p.cu_k = causal ? cu : nullptr;
        int n_seqs = causal ? 2 : 1, max_q = causal ? 400 : S;
        mmk_attention a;
        memset(&a, 0, sizeof a);
        a.seq_k = S;
        a.heads_kv = p.heads_kv;
        a.cu_seqlens_k = p.cu_k;
        p.o = o80;
        if (launch_sm80_any<bf16>(p, max_q, n_seqs, s, &err)) {
            ok = false;
            break;
        }
        p.o = o90;
        if (launch_sm90(p, &a, max_q, n_seqs, dev, s, &err) || cudaStreamSynchronize(s) != cudaSuccess ||
            cudaMemcpy(h80, o80, no * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(h90, o90, no * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
            cudaGetLastError();
            ok = false;
            break;
        }
        double num = 0, den = 0;
        for (size_t i = 0; i < no; i++) {
            double x = mm_bf16_to_f32(h80[i]), y = mm_bf16_to_f32(h90[i]);
            num += (x - y) * (x - y);
            den += x * x;
        }
        double rel = den > 0 ? sqrt(num / den) : 1.0;
        if (!(rel < 1e-2))
            ok = false;
        worst = rel > worst || rel != rel ? rel : worst;
    }
    if (ok)
        fprintf(stderr, "mmh3: cuda:%d attention: sm90p kernel (self-check against the portable one: rel_l2 %.2g)\n",
                dev, worst);
    else
        fprintf(stderr, "mmh3: cuda:%d attention: the sm90p kernel disagrees with the portable one (rel_l2 %.3g%s%s); "
                        "not used\n", dev, worst, err.msg[0] ? ", " : "", err.msg);
    mm_cuda_free(dev, qkv);
    mm_cuda_free(dev, o80);
    mm_cuda_free(dev, o90);
    mm_cuda_free(dev, cu);
    free(h80);
    free(h90);
    cached[dev] = ok ? 1 : 2;
    return ok;
}

/* The Hopper kernel where the policy allows it, the device runs it and its
 * self-check passed; else the portable one. */
bool hopper_chosen(int dev)
{
    return mmk_policy_get()->attention_hopper && sm90_usable(dev) && hopper_verified(dev);
}

bool al4(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

extern "C" const char *mmk_attention_path(int dev)
{
    return hopper_chosen(dev) ? "sm90p-wgmma-pipelined (bf16 head_dim 128; others sm80-mma)" : "sm80-mma";
}

extern "C" int mmk_attention_run(int dev, mmk_stream s, const mmk_attention *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    mm_dtype t = a->dtype;
    if (t != MM_BF16 && t != MM_F16 && t != MM_F32)
        return mm_fail(err, "attention: dtype %s not supported (bf16, f16, f32)", mm_dtype_name(t));
    if (a->head_dim <= 0 || a->head_dim > 256)
        return mm_fail(err, "attention: head_dim %d not supported (1..256)", a->head_dim);
    if (a->heads_q <= 0 || a->heads_kv <= 0 || a->heads_q % a->heads_kv)
        return mm_fail(err, "attention: %d query heads cannot share %d kv heads evenly", a->heads_q, a->heads_kv);
    int64_t hsq = a->hsq ? a->hsq : a->head_dim, hsk = a->hsk ? a->hsk : a->head_dim,
            hsv = a->hsv ? a->hsv : a->head_dim, hso = a->hso ? a->hso : a->head_dim;
    if ((a->cu_seqlens_q == nullptr) != (a->cu_seqlens_k == nullptr))
        return mm_fail(err, "attention: give both cu_seqlens_q and cu_seqlens_k or neither");
    int n_seqs = a->cu_seqlens_q ? a->n_seqs : 1;
    int max_q = a->cu_seqlens_q ? a->max_seq_q : a->seq_q;
    if (n_seqs <= 0 || max_q <= 0)
        return 0;
    AttnParams p;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.o = a->o;
    p.ldq = a->ldq;
    p.ldk = a->ldk;
    p.ldv = a->ldv;
    p.ldo = a->ldo;
    p.hsq = hsq;
    p.hsk = hsk;
    p.hsv = hsv;
    p.hso = hso;
    p.seq_q = a->seq_q;
    p.seq_k = a->seq_k;
    p.heads_q = a->heads_q;
    p.heads_kv = a->heads_kv;
    p.D = a->head_dim;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    p.causal = a->causal;
    p.cu_q = a->cu_seqlens_q;
    p.cu_k = a->cu_seqlens_k;
    p.vt_k0 = nullptr;
    /* the tensor-core kernels read 16-byte chunks of 16-bit rows */
    bool tc = t != MM_F32 && a->head_dim % 8 == 0 && al4(a->q) && al4(a->k) && al4(a->v) && a->ldq % 8 == 0 &&
              a->ldk % 8 == 0 && a->ldv % 8 == 0 && hsq % 8 == 0 && hsk % 8 == 0 && hsv % 8 == 0 && a->ldo % 2 == 0 &&
              hso % 2 == 0 && ((uintptr_t)a->o & 3) == 0;
    if (!tc) {
        dim3 grid((unsigned)(((int64_t)max_q * a->heads_q + 7) / 8), n_seqs);
        k_attn_simt<<<grid, 256, 0, s>>>(p, t);
        return mmk_launched(err, "k_attn_simt");
    }
    if (t == MM_BF16 && a->head_dim == 128 && !a->portable && hopper_chosen(dev))
        return launch_sm90(p, a, max_q, n_seqs, dev, s, err);
    if (t == MM_F16)
        return launch_sm80_any<__half>(p, max_q, n_seqs, s, err);
    return launch_sm80_any<bf16>(p, max_q, n_seqs, s, err);
}

static const mmk_kernel_entry g_kernels[] = {
    {"attn_fwd_sm80_d64", (const void *)k_attn_fwd_sm80<64, bf16>, 80},
    {"attn_fwd_sm80_d80", (const void *)k_attn_fwd_sm80<80, bf16>, 80},
    {"attn_fwd_sm80_d128", (const void *)k_attn_fwd_sm80<128, bf16>, 80},
    {"attn_fwd_sm80_d256", (const void *)k_attn_fwd_sm80<256, bf16>, 80},
    {"attn_fwd_sm80_d64_f16", (const void *)k_attn_fwd_sm80<64, __half>, 80},
    {"attn_fwd_sm80_d80_f16", (const void *)k_attn_fwd_sm80<80, __half>, 80},
    {"attn_fwd_sm80_d128_f16", (const void *)k_attn_fwd_sm80<128, __half>, 80},
    {"attn_fwd_sm80_d256_f16", (const void *)k_attn_fwd_sm80<256, __half>, 80},
    {"attn_simt", (const void *)k_attn_simt, 80},
    {"attn_transpose_v", (const void *)k_transpose_v, 80},
    {"attn_transpose_v_segs", (const void *)k_transpose_v_segs, 80},
    {"attn_vt_offsets", (const void *)k_vt_offsets, 80},
    {"attn_fwd_sm90p", (const void *)k_attn_fwd_sm90p, 90},
};

extern "C" const mmk_kernel_entry *mmk_kernels_attention(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
