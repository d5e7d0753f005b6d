/* The DiT's attention on Hopper, FlashAttention-3 in structure (contract in
 * kernels/mmk_fa3.h).
 *
 * One CTA = 128 query rows of one head, 384 threads in three warpgroups:
 *   - warpgroup 0, the producer: one thread issues TMA copies (Q once, then
 *     K and Vᵀ tiles into a two-stage ring), completing on mbarriers; the
 *     warpgroup gives most of its registers away (setmaxnreg);
 *   - warpgroups 1 and 2, the consumers: 64 query rows each. Per key tile j
 *     a consumer issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} back to back,
 *     waits for S_j only, runs the softmax of tile j while P·V still runs on
 *     the tensor cores, then waits for P·V, rescales O and converts P_j
 *     (the intra-warpgroup overlap); the two consumers take turns issuing
 *     (ping-pong through named barriers), so one's softmax hides behind the
 *     other's products.
 * Stages are handed back through "empty" mbarriers that all 256 consumer
 * threads arrive on once they are done with a tile.
 *
 * Two kernels (template parameter FAST):
 *   exact: bf16 Q·Kᵀ and P·V over tiles of 192 keys (m64n192 products, 12
 *     P·V k-steps per tile). The kernel is bound by the tensor cores at the
 *     board's power cap, so what pays is fewer instructions per product:
 *     wide tiles cut the per-tile softmax bookkeeping, the stage hand-offs
 *     and the wgmma issues per row.
 *   fast: Q·Kᵀ in int8 (wgmma s8, exact int32 sums) — q quantized per row
 *     and head, k per 128-key tile after the per-channel mean over all keys
 *     is subtracted (the softmax of a row does not change when the same q·k̄
 *     is removed from all its scores; what is left is smaller, so its
 *     quantization steps are finer) — and P·V in e4m3 — V smoothed the same
 *     way (its per-channel mean is added back to the output, exact because
 *     each output row is a convex combination) with a per-channel scale, P
 *     with its exponent offset by 8 (values up to 256, so small
 *     probabilities stay normal numbers), each key tile's P·V summed in a
 *     fresh fp32 accumulator before it joins the running output (the fp8
 *     tensor-core sum is not full fp32). Fast mode is bound by the ALU and
 *     issue work per score, not by the tensor cores, the MUFU or memory, so
 *     its softmax is lean: the row sums of P come from the tensor cores (8
 *     rows of e4m3 ones after each Vᵀ tile make P·V an m64n136 product whose
 *     last 8 columns are Σ P — of the e4m3 P the output weighs v with, so
 *     O / l is an exact convex combination of those weights), the int32 →
 *     float conversion's bias is folded into the exponent's FMA, and the row
 *     max runs in four chains.
 * Why int8 rather than e4m3 for Q·Kᵀ: the scores' error is what the softmax
 * amplifies (an error δ in a score multiplies that probability by e^δ), and
 * 8-bit integers with a per-row scale carry ~7 significant bits where e4m3
 * carries 4 (docs/PERFORMANCE.md has the error budget; the int8 rate equals
 * the e4m3 rate on Hopper).
 *
 * Vᵀ: the P·V product needs V K-major (keys contiguous), so V is transposed
 * once per call into a [kv head · 128 dims][keys] copy (≈ 1% of the
 * attention time at S = 38k); the e4m3 copy is quantized in the same pass
 * with its keys permuted inside each group of 32 so that the f32
 * accumulators of S_j, converted in place, are already the A fragment of
 * the e4m3 P·V (which key a register holds does not matter to a sum over
 * keys, as long as P and V agree).
 *
 * Softmax: fp32, scores scaled by scale·log2 e (times the row's and the
 * tile's dequantization scales with int8) inside the exponent (ex2.approx);
 * keys past the end of the sequence (the last tile; TMA fills them with
 * zeros) are masked. Each wgmma descriptor is a base word plus a constant
 * (one add), and the int8 softmax is built once per edge (the last tile's
 * version alone tests the mask): both were a large share of the kernels'
 * instructions before.
 *
 * The waits: a consumer that sleeps in try_wait wakes after its data is
 * there, so the consumers spin; fast mode's producer sleeps (its spinning
 * took issue slots from the issue-bound kernel on one SM sub-partition),
 * exact mode's spins (a late wake-up delays a load of the tensor-bound
 * kernel). Measurements and the variants tried and dropped:
 * docs/PERFORMANCE.md.
 *
 * The CPU twin is the exact softmax of src/backend/cpu/ (mm_attention);
 * tests/unit/test_speed_attention.c compares them on the device, and
 * tests/unit/test_fa3_fast_model.c holds the CPU model of fast mode's
 * rounding that its tolerance comes from.
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
#include "kernels/mmk_fa3.h"
#include "kernels/tma_host.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMK_FA3_DEVICE 1
#include "kernels/wgmma.cuh"
#endif

namespace {

constexpr int kBM = 128, kBN = 128, kD = 128; /* query rows, keys per tile (fast), head dim */
constexpr int kBNExact = 192;                  /* keys per tile of exact mode */
constexpr int kStages = 2;
/* Keys per tile of a kernel. */
constexpr int fa3_keys(bool fast) { return fast ? kBN : kBNExact; }
constexpr int kThreads = 384;
constexpr int kRegsProducer = 24, kRegsConsumer = 240;
constexpr float kFp8Max = 448.f, kI8Max = 127.f;
constexpr int kStatRows = 512; /* keys per block of the k/v statistics pass */
/* A sleeping try's limit (ns): fast mode's producer waits this way. */
constexpr uint32_t kProducerSleepNs = 10000000u;

/* Shared-memory tiles: Q (128 rows), then ST × (K, Vᵀ) of KB keys. A Vᵀ
 * tile is whole 128-byte atoms of keys (64 bf16 or 128 e4m3 per row of 128
 * dims). */
template <bool QK8, bool PV8, int ST = kStages, bool ONES = false, int KB = kBN> struct Fa3Layout {
    static constexpr int kQ = kBM * kD * (QK8 ? 1 : 2);                      /* the Q tile */
    static constexpr int kK = KB * kD * (QK8 ? 1 : 2);                       /* one K tile */
    static constexpr int kVAtomKeys = PV8 ? 128 : 64;                        /* keys per 128-byte row */
    static constexpr int kVAtoms = (KB + kVAtomKeys - 1) / kVAtomKeys;
    static constexpr int kVAtom = kD * 128;                                  /* bytes of one atom */
    static constexpr int kV = kVAtoms * kVAtom;                              /* one Vᵀ tile (what TMA writes) */
    /* ONES (fast mode): 8 more rows of e4m3 ones after each e4m3 Vᵀ tile */
    static constexpr int kVS = kV + (ONES ? 1024 : 0); /* Vᵀ stage stride */
    static constexpr int kSmem = kQ + kK * ST + kVS * ST + 1024;
    static_assert(kSmem <= 227 * 1024, "fa3 tiles exceed the shared memory of an SM");
};

struct Fa3Params {
    int seq, seq_kv, heads, heads_kv, n_qb, n_kb; /* queries, keys; their tiles */
    float scale_log2;
    bf16 *o;
    int64_t ldo;
    const float *q_scale; /* fast: [heads][n_kb·128] per row */
    const float *k_scale; /* fast: [heads_kv][n_kb] per key tile */
    const float *v_scale; /* fast: [heads_kv·128] per channel */
    const float *v_mean;  /* fast: [heads_kv·128] per channel, added back */
    uint32_t sleep_producer, sleep_consumer; /* mbarrier waits: ns a try may sleep (0: spin) */
};

#ifdef MMK_FA3_DEVICE
/* S = Q·Kᵀ for this warpgroup's 64 rows: 8 k-steps of 16 (bf16, two 64-wide
 * halves per tile: Q's 128 rows, K's 192 rows of 128 bytes each) or 4 of 32
 * (int8, one 128-byte row). */
__device__ __forceinline__ void fa3_issue_s_bf16(float (&sc)[kBNExact / 2], uint32_t q_addr, uint32_t k_addr)
{
    constexpr int QH = kBM * 128, KH = kBNExact * 128; /* bytes of a 64-dim half of Q, of K */
    const uint32_t qd = mmk_desc_sw128_lo(q_addr), kd = mmk_desc_sw128_lo(k_addr);
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const uint64_t dq = mmk_desc_sw128_at(qd, (kk >> 2) * QH + (kk & 3) * 32);
        const uint64_t dk = mmk_desc_sw128_at(kd, (kk >> 2) * KH + (kk & 3) * 32);
        mmk_wgmma_ss_bf16_n192(sc, dq, dk, kk > 0);
    }
}

__device__ __forceinline__ void fa3_issue_s_i8(int32_t (&si)[64], uint32_t q_addr, uint32_t k_addr)
{
    const uint32_t qd = mmk_desc_sw128_lo(q_addr), kd = mmk_desc_sw128_lo(k_addr);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        mmk_wgmma_ss_s8(si, mmk_desc_sw128_at(qd, kk * 32), mmk_desc_sw128_at(kd, kk * 32), kk > 0);
}

/* Exact mode: acc += P·V over one tile of 192 keys (k-steps of 16 keys,
 * four per 64-key atom of Vᵀ). */
__device__ __forceinline__ void fa3_issue_pv_bf16(float (&acc)[64], const uint32_t (&pa)[kBNExact / 4], uint32_t v_addr)
{
    constexpr int A = Fa3Layout<false, false, kStages, false, kBNExact>::kVAtom;
    const uint32_t vd = mmk_desc_sw128_lo(v_addr);
#pragma unroll
    for (int kk = 0; kk < kBNExact / 16; kk++)
        mmk_wgmma_rs_bf16(acc, &pa[kk * 4], mmk_desc_sw128_at(vd, (kk >> 2) * A + (kk & 3) * 32), 1);
}

/* Lean fast mode: d (+)= P·[Vᵀ; 1] over 32 keys, m64n136k32 e4m3, A (P) from
 * registers — columns 128..135 of d are the row sums of the e4m3 P, the
 * same values the 128 output columns weigh v with. */
__device__ __forceinline__ void fa3_wgmma_rs_e4m3_n136(float (&d)[68], const uint32_t *a, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}, {%68, %69, %70, %71}, %72, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void fa3_issue_pv_lean(float (&acc)[68], const uint32_t (&pa)[32], uint32_t v_addr)
{
    const uint32_t vd = mmk_desc_sw128_lo(v_addr);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        fa3_wgmma_rs_e4m3_n136(acc, &pa[kk * 4], mmk_desc_sw128_at(vd, kk * 32), kk > 0);
}


/* The running maxima move to the tile's (mx, log2 units); corr[r] =
 * exp2(m_old − m_new) for the running output. */
__device__ __forceinline__ void fa3_update_max(float (&m)[2], float (&corr)[2], float (&m_use)[2], const float (&mx)[2])
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float m_new = fmaxf(m[r], mx[r]);
        m_use[r] = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = mmk_exp2_approx(m[r] - m_use[r]);
        m[r] = m_new;
    }
}

/* Online softmax of one exact-mode score tile in place (scores →
 * unnormalized probabilities), per thread's two rows (g, g + 8); sl[r] is
 * row r's scale·log2 e. corr[r] for the running output; l[r] is updated
 * (this thread's columns). bf16 P needs no exponent offset (e4m3 P has one
 * of 8: fa3_softmax_i32_lean). */
__device__ __forceinline__ void fa3_softmax_f32(float (&sc)[kBNExact / 2], float (&m)[2], float (&l)[2],
                                                float (&corr)[2], const float (&sl)[2], int key0, int seq, int t)
{
    constexpr int KB = kBNExact, NT = KB / 8; /* 8-key column groups of the tile */
    if (key0 + KB > seq) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + nt * 8 + 2 * t + (e & 1) >= seq)
                    sc[nt * 4 + e] = -INFINITY;
    }
    float mxs[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            mx = fmaxf(mx, fmaxf(sc[nt * 4 + 2 * r], sc[nt * 4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mxs[r] = mx * sl[r];
    }
    fa3_update_max(m, corr, m_use, mxs);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float neg = 0.f - m_use[r], sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            float p0 = mmk_exp2_approx(fmaf(sc[nt * 4 + 2 * r], sl[r], neg));
            float p1 = mmk_exp2_approx(fmaf(sc[nt * 4 + 2 * r + 1], sl[r], neg));
            sc[nt * 4 + 2 * r] = p0;
            sc[nt * 4 + 2 * r + 1] = p1;
            sum += p0 + p1;
        }
        l[r] = l[r] * corr[r] + sum;
    }
}

/* Row r's probabilities of an int8 score tile: sc = exp2(x·sl + c) with x
 * the score as a biased float (B + s, B = 1.5·2²³: the int32 sum added to
 * the mantissa of B by an integer add, exact for |s| < 127²·128 < 2²²; c
 * carries −B·sl). No sums: the tensor cores make them (fa3_issue_pv_lean).
 * EDGE (the last tile only) zeroes the keys past the sequence (si =
 * INT_MIN). The softmax is built once per EDGE and chosen per tile at its
 * call (one uniform branch): with a run-time flag the compiler kept the test
 * and a select on every score of every tile, and a branch inside would cut
 * the softmax into blocks the scheduler cannot interleave (its two rows'
 * shuffles behind the other's exps). */
template <bool EDGE>
__device__ __forceinline__ void fa3_exp_row_i32(const int32_t (&si)[64], float (&sc)[64], int r, float sl, float c)
{
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int i = nt * 4 + 2 * r + e;
            const float x = __uint_as_float((uint32_t)si[i] + 0x4B400000u);
            float pv = mmk_exp2_approx(fmaf(x, sl, c));
            if (EDGE && si[i] == INT_MIN)
                pv = 0.f;
            sc[i] = pv;
        }
}

/* Fast mode's softmax of one int8 score tile: the int32 → float
 * conversion's bias folded into the exponent's FMA: x = (B + s)·sl + c with
 * c = neg − B·sl. c is rounded — by up to 2⁻⁵ (log2 units) where B·sl is
 * large — so the tile's P are all relative to the effective max M = off −
 * (B·sl + c), computed exactly enough (B·sl split into a product and its
 * FMA-exact error; c + B·sl exact by Sterbenz where it matters), and
 * corr[r] = exp2(mref − M) carries O and its row sums from the previous
 * tile's M (mref) to this one. M stays within 2⁻⁵ of the true max:
 * P ≤ 2^(8 + 2⁻⁵) < 448.
 */

template <bool EDGE>
__device__ __forceinline__ void fa3_softmax_i32_lean(int32_t (&si)[64], float (&sc)[64], float (&m)[2], float (&mref)[2],
                                                     float (&corr)[2], const float (&sl)[2], int key0, int seq, int t)
{
    constexpr float kB = 12582912.f, kOff = 8.f;
    if constexpr (EDGE) {
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + nt * 8 + 2 * t + (e & 1) >= seq)
                    si[nt * 4 + e] = INT_MIN; /* its P is set to 0 below */
    }
    /* the row maxima as four chains each (depth 10, not 33: the softmax's
     * critical path is what bounds fast mode; more chains cost registers) */
    int mxr[2][4];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            mxr[r][c] = max(si[c * 4 + 2 * r], si[c * 4 + 2 * r + 1]);
#pragma unroll
    for (int nt = 4; nt < 16; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
            mxr[r][nt & 3] = max(mxr[r][nt & 3], max(si[nt * 4 + 2 * r], si[nt * 4 + 2 * r + 1]));
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int mx = max(max(mxr[r][0], mxr[r][1]), max(mxr[r][2], mxr[r][3]));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* key0 < seq: the quad holds at least one key of the sequence */
        m[r] = fmaxf(m[r], (float)mx * sl[r]);
        const float p_hi = kB * sl[r], p_lo = fmaf(kB, sl[r], -p_hi);
        const float c = (kOff - m[r]) - p_hi;
        const float M = kOff - ((c + p_hi) + p_lo);
        corr[r] = mmk_exp2_approx(mref[r] - M);
        mref[r] = M;
        fa3_exp_row_i32<EDGE>(si, sc, r, sl[r], c);
    }
}


/* Probabilities → the A fragments of P·V. bf16: k-step kk covers keys
 * 16kk..16kk+15 (columns of score tiles nt = 2kk, 2kk+1). e4m3: k-step kk
 * covers the 32 keys of nt = 4kk..4kk+3 in the permuted order the Vᵀ copy
 * uses (register 0 = row g: nt 4kk cols 2t,2t+1 then nt 4kk+1 cols 2t,2t+1). */
template <bool PV8, int KB>
__device__ __forceinline__ void fa3_pack_p(uint32_t (&pa)[KB / 4], const float (&sc)[KB / 2])
{
    if constexpr (PV8) {
        static_assert(KB == kBN, "e4m3 P is built for 128-key tiles");
        mmk_pack_p_e4m3(pa, sc);
    } else {
#pragma unroll
        for (int kk = 0; kk < KB / 16; kk++) {
            const float *a = &sc[8 * kk];
            pa[kk * 4 + 0] = mmk_pack_bf16(a[0], a[1]);
            pa[kk * 4 + 1] = mmk_pack_bf16(a[2], a[3]);
            pa[kk * 4 + 2] = mmk_pack_bf16(a[4], a[5]);
            pa[kk * 4 + 3] = mmk_pack_bf16(a[6], a[7]);
        }
    }
}

/* Fast mode: O (and its row sums l) from the previous tile's max to the next
 * one's, plus that tile's P·V and row sums (ot[64 + 2r]: every thread of a
 * quad holds its rows' whole sums). */
__device__ __forceinline__ void fa3_fold_lean(float (&o)[64], float (&l)[2], const float (&ot)[68], const float (&c)[2])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = fmaf(o[i], c[(i >> 1) & 1], ot[i]);
#pragma unroll
    for (int r = 0; r < 2; r++)
        l[r] = fmaf(l[r], c[r], ot[64 + 2 * r]);
}


/* Fast mode's softmax of tile j, its EDGE version for the last tile. */
__device__ __forceinline__ void fa3_scores_lean(int32_t (&si)[64], float (&sc)[64], float (&m)[2], float (&mref)[2],
                                                float (&corr)[2], const float (&sl_row)[2], const float *ks, int j,
                                                int seq, int t)
{
    const float sl[2] = {sl_row[0] * ks[j], sl_row[1] * ks[j]};
    if ((j + 1) * kBN > seq)
        fa3_softmax_i32_lean<true>(si, sc, m, mref, corr, sl, j * kBN, seq, t);
    else
        fa3_softmax_i32_lean<false>(si, sc, m, mref, corr, sl, j * kBN, seq, t);
}

/* The consumer's steps in the kernel's precision (FAST: int8 scores si, e4m3 P·V into the fresh ot; exact:
 * bf16 scores sc, P·V into o); the array sizes are the kernel's (those a mode does not use are 1). */
template <bool FAST, int NSI, int NSC>
__device__ __forceinline__ void fa3_issue_s(int32_t (&si)[NSI], float (&sc)[NSC], uint32_t q_addr, uint32_t k_addr)
{
    if constexpr (FAST)
        fa3_issue_s_i8(si, q_addr, k_addr);
    else
        fa3_issue_s_bf16(sc, q_addr, k_addr);
}

template <bool FAST, int NOT, int NPA>
__device__ __forceinline__ void fa3_issue_pv(float (&ot)[NOT], float (&o)[64], const uint32_t (&pa)[NPA], uint32_t v_addr)
{
    if constexpr (FAST)
        fa3_issue_pv_lean(ot, pa, v_addr);
    else
        fa3_issue_pv_bf16(o, pa, v_addr);
}

/* The scores the wgmma wrote: fenced before registers are read. */
template <bool FAST, int NSI, int NSC> __device__ __forceinline__ void fa3_fence_s(int32_t (&si)[NSI], float (&sc)[NSC])
{
    if constexpr (FAST)
        mmk_fence_regs(si);
    else
        mmk_fence_regs(sc);
}

/* The softmax of tile j (its first key j·KB). */
template <bool FAST, int KB, int NSI, int NSC>
__device__ __forceinline__ void fa3_softmax(int32_t (&si)[NSI], float (&sc)[NSC], float (&m)[2], float (&mref)[2],
                                            float (&l)[2], float (&corr)[2], const float (&sl_row)[2], const float *ks,
                                            int j, int seq, int t)
{
    if constexpr (FAST)
        fa3_scores_lean(si, sc, m, mref, corr, sl_row, ks, j, seq, t);
    else
        fa3_softmax_f32(sc, m, l, corr, sl_row, j * KB, seq, t);
}

/* After a P·V has completed: its accumulators fenced; fast mode folds ot (and its row sums) into o and l at
 * corr_prev (o was relative to the max of the tile before ot's). */
template <bool FAST, int NOT>
__device__ __forceinline__ void fa3_join_pv(float (&o)[64], float (&l)[2], float (&ot)[NOT], const float (&corr_prev)[2])
{
    if constexpr (FAST) {
        mmk_fence_regs(ot);
        mmk_fence_regs(o);
        fa3_fold_lean(o, l, ot, corr_prev);
    } else {
        mmk_fence_regs(o);
    }
}
#endif

template <bool FAST>
__global__ void __launch_bounds__(kThreads, 1)
    k_fa3(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
          const __grid_constant__ CUtensorMap tmV, const Fa3Params p)
{
#ifdef MMK_FA3_DEVICE
    constexpr int KB = fa3_keys(FAST); /* keys per tile */
    using L = Fa3Layout<FAST, FAST, kStages, FAST, KB>;
    constexpr int TQ = L::kQ, TK = L::kK, TV = L::kV, TVS = L::kVS;
    extern __shared__ __align__(1024) unsigned char fa3_smem[];
    __shared__ __align__(8) uint64_t bars[1 + 4 * kStages];
    unsigned char *base = (unsigned char *)(((uintptr_t)fa3_smem + 1023) & ~(uintptr_t)1023);
    const uint32_t sQ = mmk_smem_addr(base), sK = sQ + TQ, sV = sK + kStages * TK; /* Vᵀ stages TVS apart */
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
    if constexpr (FAST) {
        /* the ones rows after each Vᵀ stage (TMA writes only the 16 KB before them); written by the generic
         * proxy, read by wgmma through the async proxy */
        for (int i = threadIdx.x; i < kStages * 256; i += kThreads)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sV + (i >> 8) * TVS + TV + (i & 255) * 4), "r"(0x38383838u)
                         : "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
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
            mmk_mbar_expect_tx(bQ, TQ);
            mmk_tma_load_2d(sQ, &tmQ, bQ, h * kD, mb * kBM);
            if (!FAST)
                mmk_tma_load_2d(sQ + TQ / 2, &tmQ, bQ, h * kD + 64, mb * kBM);
            for (int j = 0; j < n_kb; j++) {
                const int s = j % kStages;
                const uint32_t parity = ((j / kStages) & 1) ^ 1;
                mmk_mbar_wait_ns(EMPTY_K(s), parity, p.sleep_producer);
                mmk_mbar_expect_tx(FULL_K(s), TK);
                mmk_tma_load_2d(sK + s * TK, &tmK, FULL_K(s), hk * kD, j * KB);
                if (!FAST)
                    mmk_tma_load_2d(sK + s * TK + TK / 2, &tmK, FULL_K(s), hk * kD + 64, j * KB);
                mmk_mbar_wait_ns(EMPTY_V(s), parity, p.sleep_producer);
                mmk_mbar_expect_tx(FULL_V(s), TV);
#pragma unroll
                for (int a = 0; a < L::kVAtoms; a++)
                    mmk_tma_load_2d(sV + s * TVS + a * L::kVAtom, &tmV, FULL_V(s), j * KB + a * L::kVAtomKeys, hk * kD);
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
    const int row0 = mb * kBM + cw * 64 + warp * 16 + g; /* this thread's rows: row0, row0 + 8 */

    float o[64], sc[KB / 2];
    float ot[FAST ? 68 : 1]; /* fast: this tile's P·V and its row sums before they join o */
    float mref[2] = {-INFINITY, -INFINITY}; /* fast: the effective max of the last tile */
    int32_t si[FAST ? 64 : 1]; /* fast: this tile's int8 scores */
    uint32_t pa[KB / 4];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2] = {0.f, 0.f}, corr_prev[2] = {0.f, 0.f};
    float sl_row[2] = {p.scale_log2, p.scale_log2};
    if constexpr (FAST) {
        /* rows past the sequence have scale 1 (the table covers whole tiles) */
        const float *qs = p.q_scale + (int64_t)h * p.n_qb * kBM;
        sl_row[0] *= qs[row0];
        sl_row[1] *= qs[row0 + 8];
    }
    const float *ks = FAST ? p.k_scale + (int64_t)hk * n_kb : nullptr;

    if (cw == 1)
        mmk_bar_arrive(1, 256); /* warpgroup 0 issues first */
    mmk_mbar_wait_ns(bQ, 0, p.sleep_consumer);

    /* tile 0: S only */
    mmk_mbar_wait_ns(FULL_K(0), 0, p.sleep_consumer);
    mmk_bar_sync(bar_mine, 256);
    mmk_wgmma_fence();
    fa3_issue_s<FAST>(si, sc, q_addr, sK);
    mmk_wgmma_commit();
    mmk_bar_arrive(bar_other, 256);
    mmk_wgmma_wait<0>();
    fa3_fence_s<FAST>(si, sc);
    mmk_mbar_arrive(EMPTY_K(0));
    fa3_softmax<FAST, KB>(si, sc, m, mref, l, corr, sl_row, ks, 0, p.seq_kv, t);
    corr_prev[0] = corr[0];
    corr_prev[1] = corr[1];
    fa3_pack_p<FAST, KB>(pa, sc);

    for (int j = 1; j < n_kb; j++) {
        const int s = j % kStages, sp = (j - 1) % kStages;
        mmk_mbar_wait_ns(FULL_K(s), (j / kStages) & 1, p.sleep_consumer);
        mmk_mbar_wait_ns(FULL_V(sp), ((j - 1) / kStages) & 1, p.sleep_consumer);
        mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        fa3_issue_s<FAST>(si, sc, q_addr, sK + s * TK);
        mmk_wgmma_commit();
        fa3_issue_pv<FAST>(ot, o, pa, sV + sp * TVS);
        mmk_wgmma_commit();
        mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<1>(); /* S_j done; P·V of tile j − 1 may still run */
        fa3_fence_s<FAST>(si, sc);
        mmk_mbar_arrive(EMPTY_K(s));
        fa3_softmax<FAST, KB>(si, sc, m, mref, l, corr, sl_row, ks, j, p.seq_kv, t);
        mmk_wgmma_wait<0>();
        /* P·V read pa from registers until now: keep them from being reused
         * for anything written meanwhile (sc above) */
        mmk_fence_regs(pa);
        fa3_join_pv<FAST>(o, l, ot, corr_prev); /* fast: o was relative to the max of tile j − 2, ot to j − 1's */
        if constexpr (FAST) {
            corr_prev[0] = corr[0];
            corr_prev[1] = corr[1];
        } else {
#pragma unroll
            for (int i = 0; i < 64; i++)
                o[i] *= corr[(i >> 1) & 1];
        }
        mmk_mbar_arrive(EMPTY_V(sp));
        fa3_pack_p<FAST, KB>(pa, sc);
    }

    /* the last tile's P·V */
    {
        const int sl_ = (n_kb - 1) % kStages;
        mmk_mbar_wait_ns(FULL_V(sl_), ((n_kb - 1) / kStages) & 1, p.sleep_consumer);
        mmk_bar_sync(bar_mine, 256);
        mmk_wgmma_fence();
        fa3_issue_pv<FAST>(ot, o, pa, sV + sl_ * TVS);
        mmk_wgmma_commit();
        mmk_bar_arrive(bar_other, 256);
        mmk_wgmma_wait<0>();
        mmk_fence_regs(pa);
        fa3_join_pv<FAST>(o, l, ot, corr_prev);
        mmk_mbar_arrive(EMPTY_V(sl_));
    }
    if (cw == 0)
        mmk_bar_sync(1, 256); /* warpgroup 1's last arrive */

    /* ---------------- epilogue: O / l (· v scale + v mean), bf16 ---------------- */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float s = l[r];
        if constexpr (!FAST) { /* fast: every thread of the quad holds the whole row's sum */
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
        }
        float inv = s > 0.f ? 1.f / s : 0.f;
        int row = row0 + 8 * r;
        if (row >= p.seq)
            continue;
        bf16 *orow = p.o + (int64_t)row * p.ldo + (int64_t)h * kD;
#pragma unroll
        for (int dt = 0; dt < 16; dt++) {
            int c = dt * 8 + 2 * t;
            float v0 = o[dt * 4 + 2 * r] * inv, v1 = o[dt * 4 + 2 * r + 1] * inv;
            if constexpr (FAST) {
                const float2 vs = *reinterpret_cast<const float2 *>(p.v_scale + hk * kD + c);
                const float2 vm = *reinterpret_cast<const float2 *>(p.v_mean + hk * kD + c);
                v0 = fmaf(v0, vs.x, vm.x);
                v1 = fmaf(v1, vs.y, vm.y);
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

/* Fast mode, k and v statistics over all keys, per (kv head, channel), in
 * two deterministic passes (no float atomics: the same inputs give the same
 * bits): partial sums of k and v and the extremes of v over blocks of
 * kStatRows keys, then their reduction in block order into
 * stats[0..3][hk][c] = k mean, v mean, v dequantization scale (amax of
 * v − mean, / 448), v quantization factor (448 / that amax, 0 for a
 * constant channel). */
__global__ void __launch_bounds__(kD) k_fa3_kv_partial(const bf16 *__restrict__ k, int64_t ldk,
                                                       const bf16 *__restrict__ v, int64_t ldv, int seq, int heads_kv,
                                                       float *__restrict__ part)
{
    const int c = threadIdx.x, hk = blockIdx.y, b = blockIdx.x;
    const int j0 = b * kStatRows, j1 = min(seq, j0 + kStatRows);
    const bf16 *kp = k + (int64_t)hk * kD + c, *vp = v + (int64_t)hk * kD + c;
    float sk = 0.f, sv = 0.f, mx = -INFINITY, mn = INFINITY;
#pragma unroll 8
    for (int j = j0; j < j1; j++) {
        float kv = __bfloat162float(kp[(int64_t)j * ldk]), vv = __bfloat162float(vp[(int64_t)j * ldv]);
        sk += kv;
        sv += vv;
        mx = fmaxf(mx, vv);
        mn = fminf(mn, vv);
    }
    mmk_kv_partial_store(part, b, heads_kv, hk, c, sk, sv, mx, mn);
}

__global__ void __launch_bounds__(kD) k_fa3_kv_finish(const float *__restrict__ part, int n_parts, int heads_kv,
                                                      int seq, float *__restrict__ stats)
{
    const int c = threadIdx.x, hk = blockIdx.x;
    float sk, sv, mx, mn;
    mmk_kv_partial_sum(part, n_parts, heads_kv, hk, c, sk, sv, mx, mn);
    const float k_mean = sk / (float)seq, v_mean = sv / (float)seq;
    const float amax = fmaxf(mx - v_mean, v_mean - mn);
    const int64_t plane = (int64_t)heads_kv * kD, at = (int64_t)hk * kD + c;
    stats[at] = k_mean;
    stats[plane + at] = v_mean;
    stats[2 * plane + at] = amax > 0.f ? amax / kFp8Max : 1.f;
    stats[3 * plane + at] = amax > 0.f ? kFp8Max / amax : 0.f;
}

/* Fast mode, q: per (row, head) int8 with s = amax/127 (1 for a zero row)
 * into scales[h][row] for rows < rows_pad (whole tiles; rows past seq get
 * 1 and no codes). 16 threads per (row, head), 8 values each. */
__global__ void __launch_bounds__(256) k_fa3_quant_q(const bf16 *__restrict__ q, int64_t ldq, int seq, int heads,
                                                     int rows_pad, int8_t *__restrict__ q8, float *__restrict__ scales)
{
    const int64_t item = (int64_t)blockIdx.x * 16 + (threadIdx.x >> 4);
    const int part = threadIdx.x & 15;
    const bool in_table = item < (int64_t)rows_pad * heads;
    const int row = (int)(item / heads), h = (int)(item % heads);
    const bool live = in_table && row < seq;
    float v[8];
    if (live)
        unpack8(q + (int64_t)row * ldq + (int64_t)h * kD + part * 8, v);
    else
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = 0.f;
    float amax = 0.f;
#pragma unroll
    for (int e = 0; e < 8; e++)
        amax = fmaxf(amax, fabsf(v[e]));
    /* the 16 threads of a (row, head) are one half of a warp: xor < 16 stays inside */
#pragma unroll
    for (int o = 8; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (in_table && part == 0)
        scales[(int64_t)h * rows_pad + row] = amax > 0.f ? amax / kI8Max : 1.f;
    if (!live)
        return;
    const float inv = amax > 0.f ? kI8Max / amax : 0.f;
    *reinterpret_cast<uint2 *>(q8 + (int64_t)row * heads * kD + (int64_t)h * kD + part * 8) = mmk_i8x8(v, inv);
}

/* Fast mode, k: k − mean (stats[0][hk]) as int8 per (kv head, tile of 128
 * keys), s = amax/127 (1 for an all-zero tile) into scales[hk][tile]. */
__global__ void __launch_bounds__(256) k_fa3_quant_k(const bf16 *__restrict__ k, int64_t ldk, int seq, int heads_kv,
                                                     const float *__restrict__ stats, int8_t *__restrict__ k8,
                                                     float *__restrict__ scales, int n_blocks)
{
    __shared__ float red[32];
    const int b = blockIdx.x, hk = blockIdx.y;
    /* thread t always holds channels (t mod 16)·8 .. +7 (256 is a multiple of 16) */
    const int c0 = (threadIdx.x & 15) * 8;
    float mean[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
        mean[e] = stats[(int64_t)hk * kD + c0 + e];
    float v[64];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r = (threadIdx.x + i * 256) >> 4, row = b * kBN + r;
        if (row < seq) {
            unpack8(k + (int64_t)row * ldk + (int64_t)hk * kD + c0, &v[i * 8]);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[i * 8 + e] -= mean[e];
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[i * 8 + e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < 8; e++)
            amax = fmaxf(amax, fabsf(v[i * 8 + e]));
    }
    amax = mmk_block_max(amax, red);
    const float inv = amax > 0.f ? kI8Max / amax : 0.f;
    if (threadIdx.x == 0)
        scales[(int64_t)hk * n_blocks + b] = amax > 0.f ? amax / kI8Max : 1.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r = (threadIdx.x + i * 256) >> 4, row = b * kBN + r;
        if (row >= seq)
            continue;
        *reinterpret_cast<uint2 *>(k8 + (int64_t)row * heads_kv * kD + (int64_t)hk * kD + c0) = mmk_i8x8(&v[i * 8], inv);
    }
}

/* Fast mode, v: vt8[(h·128 + d)·ld_vt + 32b + k] = e4m3((v[32b + mmk_perm32(k), h, d]
 * − mean[h, d]) · factor[h, d]) (stats[1][h] and [3][h]), zero for keys
 * past seq (the copy is ld_vt = whole tiles wide). */
__global__ void __launch_bounds__(256) k_fa3_v_quant_t(const bf16 *__restrict__ v, int64_t ldv, int seq, int heads_kv,
                                                       const float *__restrict__ stats, uint8_t *__restrict__ vt8,
                                                       int64_t ld_vt)
{
#ifdef MMK_FA3_DEVICE
    __shared__ float tile[32][kD + 1];
    const int j0 = blockIdx.x * 32, h = blockIdx.y;
    const int64_t plane = (int64_t)heads_kv * kD;
    const float *mean = stats + plane + (int64_t)h * kD, *factor = stats + 3 * plane + (int64_t)h * kD;
    for (int c = threadIdx.x; c < 32 * 16; c += 256) {
        int key = c >> 4, d0 = (c & 15) * 8, j = j0 + key;
        float x[8];
        if (j < seq) {
            unpack8(v + (int64_t)j * ldv + (int64_t)h * kD + d0, x);
#pragma unroll
            for (int e = 0; e < 8; e++)
                x[e] = (x[e] - mean[d0 + e]) * factor[d0 + e];
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++)
                x[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < 8; e++)
            tile[key][d0 + e] = x[e];
    }
    __syncthreads();
    mmk_store_vt8_tile(tile, vt8, h, ld_vt, j0);
#else
    (void)v, (void)ldv, (void)seq, (void)heads_kv, (void)stats, (void)vt8, (void)ld_vt;
    __trap();
#endif
}

/* ------------------------------------------------------------------ host */

template <bool FAST>
int launch(const CUtensorMap &q, const CUtensorMap &k, const CUtensorMap &v, const Fa3Params &p, int n_mb,
           cudaStream_t s, mm_error *err)
{
    constexpr int smem = Fa3Layout<FAST, FAST, kStages, FAST, fa3_keys(FAST)>::kSmem;
    MMK_TRY(cudaFuncSetAttribute(k_fa3<FAST>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err,
            "raising the shared-memory limit of the fa3 attention kernel");
    dim3 grid(n_mb, p.heads);
    k_fa3<FAST><<<grid, kThreads, smem, s>>>(q, k, v, p);
    return mmk_launched(err, FAST ? "k_fa3 (int8 q·k, e4m3 p·v)" : "k_fa3 (bf16)");
}

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

using Temps = MmkTemps<8>;

/* Exact mode's transposed bf16 V (seq_kv keys) and its tensor map. */
int prepare_vt_bf16(Temps &tmp, const mmk_fa3 *a, int seq_kv, cudaStream_t s, CUtensorMap *mv, mm_error *err)
{
    const int64_t ld_vt = (seq_kv + 7) / 8 * 8;
    bf16 *vt = (bf16 *)tmp.get((size_t)a->heads_kv * kD * ld_vt * sizeof(bf16), err);
    if (!vt)
        return -1;
    dim3 tg((seq_kv + 31) / 32, kD / 32, a->heads_kv);
    k_fa3_vt_bf16<<<tg, 256, 0, s>>>((const bf16 *)a->v, a->ldv, seq_kv, vt, ld_vt);
    if (mmk_launched(err, "k_fa3_vt_bf16"))
        return -1;
    return mmk_tma_map_2d(mv, false, vt, (uint64_t)seq_kv, (uint64_t)a->heads_kv * kD, (uint64_t)ld_vt * 2, 64, kD, err);
}

} // namespace

extern "C" int mmk_fa3_usable(int dev)
{
    static int cached[64];
    return mmk_hopper_kernel_usable(dev, (const void *)k_fa3<false>, cached);
}

extern "C" const char *mmk_fa3_mode_name(int mode)
{
    return mode == MMK_FA3_FAST ? "fa3 int8 q·k + e4m3 p·v (fast)" : "fa3 bf16 (exact, 192-key tiles)";
}

extern "C" int mmk_fa3_run(int dev, mmk_stream st, const mmk_fa3 *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!mmk_fa3_usable(dev))
        return mm_fail(err, "attention (fa3): needs an sm_90 GPU and sm_90a code in this build");
    const int seq_kv = a->seq_kv > 0 ? a->seq_kv : a->seq;
    if (a->seq <= 0)
        return 0;
    if (a->mode != MMK_FA3_EXACT && a->mode != MMK_FA3_FAST)
        return mm_fail(err, "attention (fa3): unknown mode %d (%d exact, %d fast)", a->mode, MMK_FA3_EXACT,
                       MMK_FA3_FAST);
    if (a->heads <= 0 || a->heads_kv <= 0 || a->heads % a->heads_kv)
        return mm_fail(err, "attention (fa3): %d query heads cannot share %d kv heads evenly", a->heads, a->heads_kv);
    if (!al16(a->q) || !al16(a->k) || !al16(a->v) || !al16(a->o) || a->ldq % 8 || a->ldk % 8 || a->ldv % 8 ||
        a->ldo % 8)
        return mm_fail(err, "attention (fa3): q, k, v, o must be 16-byte aligned with row strides that are multiples "
                       "of 8 elements");
    cudaStream_t s = (cudaStream_t)st;
    const bool fast = a->mode == MMK_FA3_FAST;
    const int kb = fa3_keys(fast); /* keys per tile */
    const int n_kb = (seq_kv + kb - 1) / kb, n_qb = (a->seq + kBM - 1) / kBM, rows_pad = n_qb * kBM;
    Fa3Params p;
    memset(&p, 0, sizeof p);
    p.seq = a->seq;
    p.seq_kv = seq_kv;
    p.heads = a->heads;
    p.heads_kv = a->heads_kv;
    p.n_qb = n_qb;
    p.n_kb = n_kb;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    p.sleep_producer = fast ? kProducerSleepNs : 0; /* the consumers spin (the file's head says why) */
    p.sleep_consumer = 0;
    p.o = (bf16 *)a->o;
    p.ldo = a->ldo;
    Temps tmp = {dev, "attention (fa3)", {nullptr}, 0};
    CUtensorMap mq, mk, mv;
    if (!fast) {
        if (prepare_vt_bf16(tmp, a, seq_kv, s, &mv, err) ||
            mmk_tma_map_2d(&mq, false, a->q, (uint64_t)a->heads * kD, a->seq, (uint64_t)a->ldq * 2, 64, kBM, err) ||
            mmk_tma_map_2d(&mk, false, a->k, (uint64_t)a->heads_kv * kD, seq_kv, (uint64_t)a->ldk * 2, 64, kb, err))
            return -1;
        return launch<false>(mq, mk, mv, p, n_qb, s, err);
    }

    /* fast mode: k/v statistics, int8 q (per row) and k (smoothed, per tile) */
    const int n_parts = (seq_kv + kStatRows - 1) / kStatRows;
    float *part = (float *)tmp.get((size_t)n_parts * a->heads_kv * 4 * kD * sizeof(float), err);
    float *stats = (float *)tmp.get((size_t)a->heads_kv * 4 * kD * sizeof(float), err);
    int8_t *q8 = (int8_t *)tmp.get((size_t)a->seq * a->heads * kD, err);
    int8_t *k8 = (int8_t *)tmp.get((size_t)seq_kv * a->heads_kv * kD, err);
    float *qs = (float *)tmp.get((size_t)a->heads * rows_pad * sizeof(float), err);
    float *ks = (float *)tmp.get((size_t)a->heads_kv * n_kb * sizeof(float), err);
    if (!part || !stats || !q8 || !k8 || !qs || !ks)
        return -1;
    k_fa3_kv_partial<<<dim3(n_parts, a->heads_kv), kD, 0, s>>>((const bf16 *)a->k, a->ldk, (const bf16 *)a->v, a->ldv,
                                                                seq_kv, a->heads_kv, part);
    if (mmk_launched(err, "k_fa3_kv_partial"))
        return -1;
    k_fa3_kv_finish<<<a->heads_kv, kD, 0, s>>>(part, n_parts, a->heads_kv, seq_kv, stats);
    if (mmk_launched(err, "k_fa3_kv_finish"))
        return -1;
    k_fa3_quant_q<<<(unsigned)(((int64_t)rows_pad * a->heads + 15) / 16), 256, 0, s>>>(
        (const bf16 *)a->q, a->ldq, a->seq, a->heads, rows_pad, q8, qs);
    if (mmk_launched(err, "k_fa3_quant_q"))
        return -1;
    k_fa3_quant_k<<<dim3(n_kb, a->heads_kv), 256, 0, s>>>((const bf16 *)a->k, a->ldk, seq_kv, a->heads_kv, stats, k8,
                                                           ks, n_kb);
    if (mmk_launched(err, "k_fa3_quant_k"))
        return -1;
    p.q_scale = qs;
    p.k_scale = ks;
    if (mmk_tma_map_2d(&mq, true, q8, (uint64_t)a->heads * kD, a->seq, (uint64_t)a->heads * kD, 128, kBM, err) ||
        mmk_tma_map_2d(&mk, true, k8, (uint64_t)a->heads_kv * kD, seq_kv, (uint64_t)a->heads_kv * kD, 128, kBN, err))
        return -1;
    /* e4m3 P·V: the smoothed, scaled, permuted, transposed v */
    const int64_t ld_vt = (int64_t)n_kb * kBN;
    uint8_t *vt8 = (uint8_t *)tmp.get((size_t)a->heads_kv * kD * ld_vt, err);
    if (!vt8)
        return -1;
    k_fa3_v_quant_t<<<dim3((unsigned)(ld_vt / 32), a->heads_kv), 256, 0, s>>>((const bf16 *)a->v, a->ldv, seq_kv,
                                                                              a->heads_kv, stats, vt8, ld_vt);
    if (mmk_launched(err, "k_fa3_v_quant_t"))
        return -1;
    p.v_mean = stats + (size_t)a->heads_kv * kD;
    p.v_scale = stats + (size_t)2 * a->heads_kv * kD;
    if (mmk_tma_map_2d(&mv, true, vt8, (uint64_t)ld_vt, (uint64_t)a->heads_kv * kD, (uint64_t)ld_vt, 128, kD, err))
        return -1;
    return launch<true>(mq, mk, mv, p, n_qb, s, err);
}

/* ------------------------------------------------------------------ first-use self-check */

namespace {

/* rel_l2 of b against a (bf16 host copies); NaN/inf in b → +inf. */
double rel_l2_bf16(const uint16_t *a, const uint16_t *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = mm_bf16_to_f32(a[i]), y = mm_bf16_to_f32(b[i]);
        if (!isfinite(y))
            return INFINITY;
        num += (x - y) * (x - y);
        den += x * x;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One mode on the self-check problems: two of equal lengths (returns the
 * worse rel_l2, or a negative value when something could not run, message
 * in err) and one with fewer queries than keys (*cross: its rel_l2, or
 * negative). */
double fa3_selfcheck(int dev, int mode, double *cross, mm_error *err)
{
    const int S = 700, H = 4, W = 3 * H * kD;
    const size_t n = (size_t)S * W, no = (size_t)S * H * kD;
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    bf16 *qkv = (bf16 *)mm_cuda_malloc(dev, n * 2, err);
    bf16 *o_ref = (bf16 *)mm_cuda_malloc(dev, no * 2, err), *o_fa3 = (bf16 *)mm_cuda_malloc(dev, no * 2, err);
    uint16_t *h_ref = (uint16_t *)malloc(no * 2), *h_fa3 = (uint16_t *)malloc(no * 2);
    double worst = -1;
    *cross = -1;
    if (s && qkv && o_ref && o_fa3 && h_ref && h_fa3 &&
        mmk_fill_random(dev, s, qkv, MM_BF16, (int64_t)n, 0xfa3c0de, 2.f, err) == 0) {
        worst = 0;
        /* problems 0, 1: 700 × 700 rows over 4 and 2 kv heads; 2: 300 query
         * rows (three tiles, the last partial) over the 700 keys */
        for (int prob = 0; prob < 3 && worst >= 0; prob++) {
            const int hkv = prob == 1 ? H / 2 : H, sq = prob == 2 ? 300 : S;
            const size_t nq = (size_t)sq * H * kD;
            mmk_attention r;
            memset(&r, 0, sizeof r);
            r.seq_q = sq;
            r.seq_k = S;
            r.heads_q = H;
            r.heads_kv = hkv;
            r.head_dim = kD;
            r.dtype = MM_BF16;
            r.q = qkv;
            r.k = qkv + H * kD;
            r.v = qkv + 2 * H * kD;
            r.ldq = r.ldk = r.ldv = W;
            r.o = o_ref;
            r.ldo = H * kD;
            r.scale = 0.08838834764831845f;
            r.portable = 1;
            mmk_fa3 f;
            memset(&f, 0, sizeof f);
            f.seq = sq;
            f.seq_kv = S;
            f.heads = H;
            f.heads_kv = hkv;
            f.q = r.q;
            f.k = r.k;
            f.v = r.v;
            f.ldq = f.ldk = f.ldv = W;
            f.o = o_fa3;
            f.ldo = H * kD;
            f.scale = r.scale;
            f.mode = mode;
            if (mmk_attention_run(dev, s, &r, err) || cudaMemsetAsync(o_fa3, 0xff, no * 2, s) != cudaSuccess ||
                mmk_fa3_run(dev, s, &f, err) || cudaStreamSynchronize(s) != cudaSuccess ||
                cudaMemcpy(h_ref, o_ref, no * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
                cudaMemcpy(h_fa3, o_fa3, no * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
                cudaError_t e = cudaGetLastError();
                if (!err->msg[0])
                    mm_fail(err, "%s", cudaGetErrorString(e));
                if (prob < 2)
                    worst = -1;
                break;
            }
            double rel = rel_l2_bf16(h_ref, h_fa3, nq);
            if (prob == 2)
                *cross = rel;
            else
                worst = rel > worst ? rel : worst;
        }
    }
    mm_cuda_free(dev, qkv);
    mm_cuda_free(dev, o_ref);
    mm_cuda_free(dev, o_fa3);
    free(h_ref);
    free(h_fa3);
    return worst;
}

std::mutex g_fa3_check_mu;

} // namespace

/* verdicts per device and mode; 1: passed, 2: failed */
static int g_verdict[64][MMK_FA3_MODES];
static int g_cross_verdict[64][MMK_FA3_MODES]; /* the queries ≠ keys problem */
static double g_error[64][MMK_FA3_MODES];

extern "C" int mmk_fa3_verified(int dev, int mode, double *rel_l2)
{
    if (dev < 0 || dev >= 64 || mode < 0 || mode >= MMK_FA3_MODES || !mmk_fa3_usable(dev))
        return 0;
    std::lock_guard<std::mutex> lock(g_fa3_check_mu);
    if (!g_verdict[dev][mode]) {
        mm_error err = {{0}};
        double cross = -1;
        double rel = fa3_selfcheck(dev, mode, &cross, &err);
        const double tol = mode == MMK_FA3_EXACT ? 1e-2 : 0.08;
        const bool ok = rel >= 0 && rel < tol, cross_ok = ok && cross >= 0 && cross < tol;
        const char *name = mmk_fa3_mode_name(mode);
        g_error[dev][mode] = rel;
        g_verdict[dev][mode] = ok ? 1 : 2;
        g_cross_verdict[dev][mode] = cross_ok ? 1 : 2;
        if (ok)
            fprintf(stderr, "mmh3: cuda:%d attention: %s kernel in use (self-check against the portable one: rel_l2 "
                            "%.2g; fewer queries than keys: %s rel_l2 %.2g)\n", dev, name, rel,
                    cross_ok ? "in use," : "NOT used,", cross);
        else if (rel >= 0)
            fprintf(stderr, "mmh3: cuda:%d attention: the %s kernel disagrees with the portable one (rel_l2 %.3g, "
                            "limit %.2g); not used\n", dev, name, rel, tol);
        else
            fprintf(stderr, "mmh3: cuda:%d attention: the %s kernel's self-check failed (%s); not used\n", dev,
                    name, err.msg);
    }
    if (rel_l2)
        *rel_l2 = g_error[dev][mode];
    return g_verdict[dev][mode] == 1;
}

extern "C" int mmk_fa3_cross_verified(int dev, int mode)
{
    if (!mmk_fa3_verified(dev, mode, NULL))
        return 0;
    std::lock_guard<std::mutex> lock(g_fa3_check_mu);
    return g_cross_verdict[dev][mode] == 1;
}

static const mmk_kernel_entry g_fa3_kernels[] = {
    {"attn_fa3_bf16", (const void *)k_fa3<false>, 90},
    {"attn_fa3_i8_e4m3", (const void *)k_fa3<true>, 90},
    {"attn_fa3_vt_bf16", (const void *)k_fa3_vt_bf16, 90},
    {"attn_fa3_kv_partial", (const void *)k_fa3_kv_partial, 90},
    {"attn_fa3_kv_finish", (const void *)k_fa3_kv_finish, 90},
    {"attn_fa3_quant_q", (const void *)k_fa3_quant_q, 90},
    {"attn_fa3_quant_k", (const void *)k_fa3_quant_k, 90},
    {"attn_fa3_v_quant_t", (const void *)k_fa3_v_quant_t, 90},
};

extern "C" const mmk_kernel_entry *mmk_kernels_fa3(int *n)
{
    *n = (int)(sizeof g_fa3_kernels / sizeof g_fa3_kernels[0]);
    return g_fa3_kernels;
}
