/* The ConvRot activation path (spec dit.md §3.2-3.3): optional RMSNorm +
 * modulation or SwiGLU, block-256 regular-Hadamard rotation, per-row absmax,
 * int8 quantization — one pass over the row, one block per row.
 *
 * Layout of the work: 16 threads per group of 256 channels, 16 values each.
 * H256 = H4⊗H4⊗H4⊗H4 acts on the four base-4 digits of the channel index
 * (d3 d2 d1 d0); the butterfly stage with stride 4^s mixes digit s. A thread
 * first holds 16 consecutive channels (digits d1 d0 vary) and does the
 * stride-1 and stride-4 stages in registers; a padded shared-memory transpose
 * then gives it the 16 channels that share its (d1 d0) (digits d3 d2 vary),
 * and it does the stride-16 and stride-64 stages in registers too.
 *
 * Every stage computes out[d] = 0.5·(((±a0 ± a1) ± a2) ± a3) in fp32, in
 * that order, with the signs of row d of H4 = [[1,1,1,-1],[1,1,-1,1],
 * [1,-1,1,1],[-1,1,1,1]]. The rotated value is rounded to bf16 (the
 * reference rotates with a bf16 GEMM), so the rotation's own fp32 summation
 * order almost never shows in the output.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"

namespace {

const int kMaxGroups = 64; /* K ≤ 16384 */

__device__ __forceinline__ void h4(float &a0, float &a1, float &a2, float &a3)
{
    float o0 = 0.5f * (a0 + a1 + a2 - a3);
    float o1 = 0.5f * (a0 + a1 - a2 + a3);
    float o2 = 0.5f * (a0 - a1 + a2 + a3);
    float o3 = 0.5f * (-a0 + a1 + a2 + a3);
    a0 = o0;
    a1 = o1;
    a2 = o2;
    a3 = o3;
}

/* The two butterfly stages over a thread's 16 values v[b], b = 4·hi + lo:
 * stride 1 mixes lo, stride 4 mixes hi. */
__device__ __forceinline__ void h16(float v[16])
{
#pragma unroll
    for (int hi = 0; hi < 4; hi++)
        h4(v[4 * hi + 0], v[4 * hi + 1], v[4 * hi + 2], v[4 * hi + 3]);
#pragma unroll
    for (int lo = 0; lo < 4; lo++)
        h4(v[lo], v[4 + lo], v[8 + lo], v[12 + lo]);
}

__device__ __forceinline__ void load16_bf16(const bf16 *p, float v[16])
{
    uint4 a = reinterpret_cast<const uint4 *>(p)[0], b = reinterpret_cast<const uint4 *>(p)[1];
    const bf16 *x = reinterpret_cast<const bf16 *>(&a), *y = reinterpret_cast<const bf16 *>(&b);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = __bfloat162float(x[i]);
        v[8 + i] = __bfloat162float(y[i]);
    }
}

/* A thread's 16 bf16 values (already rounded) as two 16-byte stores. */
__device__ __forceinline__ void store16_bf16(bf16 *p, const float v[16])
{
    uint4 a, b;
    uint32_t *wa = reinterpret_cast<uint32_t *>(&a), *wb = reinterpret_cast<uint32_t *>(&b);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __nv_bfloat162 x = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]), y = __floats2bfloat162_rn(v[8 + 2 * i], v[9 + 2 * i]);
        wa[i] = *reinterpret_cast<uint32_t *>(&x);
        wb[i] = *reinterpret_cast<uint32_t *>(&y);
    }
    reinterpret_cast<uint4 *>(p)[0] = a;
    reinterpret_cast<uint4 *>(p)[1] = b;
}

__device__ __forceinline__ void mmk_prefetch_l1(const void *p)
{
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

/* RMSNorm's scaling and the modulation of an active thread's 16 values,
 * rs = 1/sqrt(ss/K + eps), v = bf16(v·rs·w·(1 + scale) + shift) (w = 1
 * without norm_w; no modulation without shift); m: the offset of the row's
 * modulation in shift and scale. The tables are read four channels at a
 * time: all 48 values at once would cost the pipelined kernel a second block
 * per SM in registers, and k_convrot_quant its 1024-thread blocks. */
__device__ __forceinline__ void modulate4(float v[16], float ss, int K, float eps, bool active,
                                          const float *__restrict__ norm_w, const float *__restrict__ shift,
                                          const float *__restrict__ scale, int64_t m, int c0)
{
    float rs = 1.f / sqrtf(ss / (float)K + eps);
    if (!active)
        return;
#pragma unroll
    for (int c = 0; c < 16; c += 4) {
        float4 w = norm_w ? *reinterpret_cast<const float4 *>(norm_w + c0 + c) : make_float4(1.f, 1.f, 1.f, 1.f);
        float4 sh = make_float4(0.f, 0.f, 0.f, 0.f), sc = sh;
        if (shift) {
            sh = *reinterpret_cast<const float4 *>(shift + m + c0 + c);
            sc = *reinterpret_cast<const float4 *>(scale + m + c0 + c);
        }
        const float wv[4] = {w.x, w.y, w.z, w.w}, shv[4] = {sh.x, sh.y, sh.z, sh.w}, scv[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float n = __fmul_rn(__fmul_rn(v[c + i], rs), wv[i]);
            if (shift)
                n = __fadd_rn(__fmul_rn(n, 1.f + scv[i]), shv[i]);
            v[c + i] = mmk_round_bf16(n);
        }
        asm volatile("" ::: "memory"); /* keep the chunks' loads apart */
    }
}

/* The fast kernels' rotation after the pre-op: the stride-1 and stride-4
 * stages on the thread's 16 consecutive channels, the transpose through its
 * group's tile of tr ([groups][16][17]), the stride-16 and stride-64 stages,
 * then the rounding to bf16; returns the thread's absmax. `sync` orders the
 * transpose's writes before its reads: k_convrot_quant passes a block
 * barrier, k_convrot_quant_pipe __syncwarp (a group's 16 threads are one
 * half-warp). Every thread calls it (inactive ones hold zeros), so a block
 * barrier is reached by all. */
template <typename Sync>
__device__ __forceinline__ float rotate_rest(float v[16], float *tr, int g, int t, bool active, Sync sync)
{
    h16(v); /* digits d0, d1 */
    float *my = tr + g * (16 * 17);
    if (active) {
#pragma unroll
        for (int b = 0; b < 16; b++)
            my[t * 17 + b] = v[b];
    }
    sync();
    if (active) {
        /* Now hold channels a·16 + t, a = 4·d3 + d2. */
#pragma unroll
        for (int a = 0; a < 16; a++)
            v[a] = my[a * 17 + t];
        h16(v); /* digits d2, d3 */
    }

    float amax = 0.f;
#pragma unroll
    for (int a = 0; a < 16; a++) {
        v[a] = mmk_round_bf16(v[a]);
        amax = fmaxf(amax, fabsf(v[a]));
    }
    return amax;
}

/* The fast path: group 256, bf16 x, quantized output.
 * blockDim.x = 16 · (K / 256) rounded up to whole warps; thread (g, t) owns
 * channels g·256 + 16t .. +15; threads past the last group only take part
 * in the reductions. K = 256 · kMaxGroups takes 1024 threads, hence the
 * bound of 64 registers: with the 48 modulation values loaded at once the
 * kernel took 72, and a block past 28 warps (K > 14,336) failed to launch. */
static_assert(kMaxGroups * 16 <= 1024, "one thread per 16 channels must fit one block");
__global__ void __launch_bounds__(1024)
    k_convrot_quant(int K, int pre, const bf16 *__restrict__ x, int64_t ldx, const float *__restrict__ norm_w,
                    float eps, const float *__restrict__ shift, const float *__restrict__ scale, int64_t ld_mod,
                    const int32_t *__restrict__ mod_idx, int8_t *__restrict__ q, int64_t ldq, float *__restrict__ sq,
                    int64_t s_stride, bf16 *__restrict__ h_out, int64_t ld_h)
{
    __shared__ float scratch[32];
    extern __shared__ float tr[]; /* [groups][16][17] */
    int64_t r = blockIdx.x;
    int g = threadIdx.x >> 4, t = threadIdx.x & 15;
    int c0 = g * 256 + t * 16;
    const bf16 *xr = x + r * ldx;
    bool active = c0 < K;
    float v[16];

    /* Every thread reaches the block reductions from the same place (a
     * partial last warp must not call them from a divergent branch: the
     * shuffles and the barrier inside would deadlock). */
#pragma unroll
    for (int i = 0; i < 16; i++)
        v[i] = 0.f;
    if (active) {
        load16_bf16(xr + c0, v);
        if (pre == MMK_PRE_SWIGLU) {
            float u[16];
            load16_bf16(xr + K + c0, u);
#pragma unroll
            for (int i = 0; i < 16; i++)
                v[i] = mmk_round_bf16(__fmul_rn(mmk_silu(v[i]), u[i]));
        }
    }
    if (pre == MMK_PRE_RMSNORM_MOD) {
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i++)
            ss += v[i] * v[i];
        ss = mmk_block_sum(ss, scratch);
        int64_t m = active && shift ? (int64_t)mod_idx[r] * ld_mod : 0;
        modulate4(v, ss, K, eps, active, norm_w, shift, scale, m, c0);
    }
    if (h_out && active && pre != MMK_PRE_NONE)
        store16_bf16(h_out + r * ld_h + c0, v);

    float amax = rotate_rest(v, tr, g, t, active, [] { __syncthreads(); });
    amax = mmk_block_max(amax, scratch);
    float s = amax > 0.f ? amax / 127.f : 1.f;
    if (!active)
        return;
    int8_t *qr = q + r * ldq + g * 256 + t;
#pragma unroll
    for (int a = 0; a < 16; a++) {
        float qv = rintf(v[a] / s);
        qv = fminf(fmaxf(qv, -127.f), 127.f);
        qr[a * 16] = (int8_t)qv;
    }
    if (threadIdx.x == 0)
        sq[r * s_stride] = s;
}

/* rintf(v / s) without a division per value where that is provably the
 * same integer: y = v·(1/s) is within |v/s|·2^-23 < 2^-16 of v/s (|v/s| ≤
 * 127.0…), and fl(v/s) within 2^-18 of it; when y is more than 2^-14 inside
 * the unit interval around rint(y), no half-integer lies between y and
 * fl(v/s), so both round to the same integer, and |rint(y)| ≤ 127 needs no
 * clamp. The values that miss (about one in 8000; NaN; every value of a row
 * whose scale is not a normal number with a normal reciprocal) are marked in
 * `bad` and divided afterwards, as k_convrot_quant does. v becomes the codes. */
__device__ __forceinline__ void quant_codes(float v[16], float s)
{
    float rinv = 1.f / s;
    bool recip_ok = s >= 0x1p-120f && s <= 0x1p120f;
    unsigned bad = recip_ok ? 0u : 0xffffu;
#pragma unroll
    for (int a = 0; a < 16; a++) {
        float y = __fmul_rn(v[a], rinv);
        float k = rintf(y);
        bool ok = fabsf(__fsub_rn(y, k)) < 0.5f - 0x1p-14f;
        bad |= ok ? 0u : 1u << a;
        v[a] = ok && recip_ok ? k : v[a]; /* in place: the misses keep their value for the division */
    }
    if (bad) {
#pragma unroll
        for (int a = 0; a < 16; a++)
            if (bad & (1u << a))
                v[a] = fminf(fmaxf(rintf(v[a] / s), -127.f), 127.f);
    }
}

/* SiLU by table where the gate is a bf16 value of magnitude in [2^-25, 32):
 * the table holds mmk_silu of each of those 7680 values, computed by the
 * same code at the block's start, so a lookup is the same float as the
 * computation (an expf and an IEEE division, ~18 instructions, the largest
 * part of the SwiGLU pass). Other gates (zero, tiny, large, inf, NaN) are
 * computed. */
const int kSiluExpLo = 102, kSiluExps = 30, kSiluTab = 2 * kSiluExps * 128;

__device__ __forceinline__ uint16_t silu_tab_bits(int i)
{
    int sign = i >= kSiluExps * 128;
    return (uint16_t)((sign << 15) | (i - sign * kSiluExps * 128 + kSiluExpLo * 128));
}

__device__ __forceinline__ float silu_of(float x, const float *tab)
{
    uint32_t b = __float_as_uint(x) >> 16; /* x is a bf16 value */
    uint32_t e = (b >> 7) & 0xff;
    if (e - kSiluExpLo < (uint32_t)kSiluExps)
        return tab[(b >> 15) * (kSiluExps * 128) + (b & 0x7fff) - kSiluExpLo * 128];
    return mmk_silu(x);
}

/* The pipelined kernel (the default; mmk_policy.convrot_pipe = 0 selects the
 * one above): the same threads, values and arithmetic as k_convrot_quant — thread
 * (g, t) of a row holds the same 16 channels, the block reductions run over
 * the same block shape, so codes and scales are bit-identical — but
 *  - a block stays resident and walks rows r, r + grid, ...; each thread
 *    copies its own 32 (SwiGLU: 64) input bytes of the rows STAGES-1 ahead
 *    into shared memory with cp.async, so HBM reads overlap the reductions
 *    and barriers of the rows before (one row per 448-thread block left
 *    ~20 KB in flight per SM: latency-bound at ~0.6 TB/s);
 *  - the transpose stays inside a group's 16 threads (one half-warp), so it
 *    needs __syncwarp, not a block barrier, and the reductions drop their
 *    leading barrier (one barrier per reduction, not two);
 *  - the modulation rows are prefetched into L1 before the sum of squares'
 *    barriers (their table index a row ahead), not requested after them;
 *  - the codes go back through shared memory so each thread stores its 16
 *    consecutive codes as one 16-byte vector (instead of 16 byte stores);
 *  - SwiGLU's SiLU is a shared-memory table lookup for most gates (silu_of). */
/* RMSNorm + modulation: at most 384 threads (K ≤ 6144) so that three blocks
 * fit an SM's registers; larger K take k_convrot_quant. */
const int kPipeNormThreads = 384;
/* Blackwell's compiler needs a few more registers for the same code: three
 * blocks per SM would spill there, so its images ask for two. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define PIPE_NORM_MIN_BLOCKS 2
#else
#define PIPE_NORM_MIN_BLOCKS 3
#endif

template <int PRE, int STAGES, bool LUT>
__global__ void __launch_bounds__(PRE == MMK_PRE_RMSNORM_MOD ? kPipeNormThreads : 1024,
                                  PRE == MMK_PRE_RMSNORM_MOD ? PIPE_NORM_MIN_BLOCKS : 1)
    k_convrot_quant_pipe(int K, int64_t rows, const bf16 *__restrict__ x, int64_t ldx,
                                     const float *__restrict__ norm_w, float eps, const float *__restrict__ shift,
                                     const float *__restrict__ scale, int64_t ld_mod,
                                     const int32_t *__restrict__ mod_idx, int8_t *__restrict__ q, int64_t ldq,
                                     bool q_vec, float *__restrict__ sq, int64_t s_stride, bf16 *__restrict__ h_out,
                                     int64_t ld_h)
{
    /* the sum's scratch, and two for the max: with RMSNorm the next row's sum
     * barrier separates two uses of one max scratch; without it, alternate.
     * A barrier thus always lies between two uses of one scratch, and the
     * reductions go without their leading one (mmk_block_sum/max<false>). */
    __shared__ float scratch_sum[32], scratch_max[2][32];
    extern __shared__ __align__(16) unsigned char smem[];
    const int in_elems = PRE == MMK_PRE_SWIGLU ? 2 * K : K;
    const int groups = K / 256;
    bf16 *stage = reinterpret_cast<bf16 *>(smem);                        /* [STAGES][in_elems] */
    float *tr = reinterpret_cast<float *>(smem + (size_t)STAGES * in_elems * 2); /* [groups][16][17] */
    int8_t *codes = reinterpret_cast<int8_t *>(tr + groups * 16 * 17);   /* [groups][256] */
    float *silu_tab = reinterpret_cast<float *>(codes + groups * 256); /* SwiGLU with LUT: [kSiluTab] */
    int g = threadIdx.x >> 4, t = threadIdx.x & 15;
    int c0 = g * 256 + t * 16;
    bool active = c0 < K;
    if (PRE == MMK_PRE_SWIGLU && LUT) {
        for (int i = threadIdx.x; i < kSiluTab; i += blockDim.x)
            silu_tab[i] = mmk_silu(__uint_as_float((uint32_t)silu_tab_bits(i) << 16));
        __syncthreads();
    }

    /* Each thread copies (and later reads) only its own bytes: the async
     * copies need no barrier, and a stage is rewritten only after the block
     * barriers of the row that last read it. */
    auto fetch = [&](int64_t r, int st) {
        if (active && r < rows) {
            const bf16 *xr = x + r * ldx + c0;
            bf16 *d = stage + (size_t)st * in_elems + c0;
            mmk_cp_async16(d, xr, 16);
            mmk_cp_async16(d + 8, xr + 8, 16);
            if (PRE == MMK_PRE_SWIGLU) {
                mmk_cp_async16(d + K, xr + K, 16);
                mmk_cp_async16(d + K + 8, xr + K + 8, 16);
            }
        }
        mmk_cp_async_commit(); /* empty groups too: the wait counts stay uniform */
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++)
        fetch((int64_t)blockIdx.x + (int64_t)s * gridDim.x, s);

    int st = 0, it = 0;
    int32_t idx_next = PRE == MMK_PRE_RMSNORM_MOD && shift ? mod_idx[blockIdx.x] : 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        fetch(r + (int64_t)(STAGES - 1) * gridDim.x, (st + STAGES - 1) % STAGES);
        int32_t idx_cur = idx_next;
        if (PRE == MMK_PRE_RMSNORM_MOD && shift && r + gridDim.x < rows)
            idx_next = mod_idx[r + gridDim.x];
        mmk_cp_async_wait<STAGES - 1>();
        float v[16];
#pragma unroll
        for (int i = 0; i < 16; i++)
            v[i] = 0.f;
        const bf16 *in = stage + (size_t)st * in_elems + c0;
        if (active) {
            load16_bf16(in, v);
            if (PRE == MMK_PRE_SWIGLU) {
                float u[16];
                load16_bf16(in + K, u);
#pragma unroll
                for (int i = 0; i < 16; i++)
                    v[i] = mmk_round_bf16(__fmul_rn(LUT ? silu_of(v[i], silu_tab) : mmk_silu(v[i]), u[i]));
            }
        }
        if (PRE == MMK_PRE_RMSNORM_MOD) {
            /* The modulation rows (L2-resident tables) are pulled into L1
             * while the sum of squares waits at its barriers; registers would
             * cost occupancy. The row's table index was read a row ahead. */
            int64_t m = (int64_t)idx_cur * ld_mod;
            if (active && shift) {
                mmk_prefetch_l1(shift + m + c0);
                mmk_prefetch_l1(scale + m + c0);
            }
            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++)
                ss = __fmaf_rn(v[i], v[i], ss); /* k_convrot_quant's ss += v·v, contracted */
            ss = mmk_block_sum<false>(ss, scratch_sum);
            modulate4(v, ss, K, eps, active, norm_w, shift, scale, m, c0);
        }
        if (PRE != MMK_PRE_NONE && h_out && active)
            store16_bf16(h_out + r * ld_h + c0, v);

        float amax = rotate_rest(v, tr, g, t, active, [] { __syncwarp(); });
        amax = mmk_block_max<false>(amax, scratch_max[PRE == MMK_PRE_RMSNORM_MOD ? 0 : it & 1]);
        float s = amax > 0.f ? amax / 127.f : 1.f;
        if (active) {
            int8_t *qr = q + r * ldq + g * 256;
            int8_t *cg = codes + g * 256;
            quant_codes(v, s);
#pragma unroll
            for (int a = 0; a < 16; a++) {
                float qv = v[a];
                if (q_vec)
                    cg[a * 16 + t] = (int8_t)qv;
                else
                    qr[a * 16 + t] = (int8_t)qv;
            }
            if (q_vec) {
                __syncwarp(0xffffu << (threadIdx.x & 16));
                *reinterpret_cast<uint4 *>(qr + t * 16) = *reinterpret_cast<const uint4 *>(cg + t * 16);
            }
        }
        if (threadIdx.x == 0)
            sq[r * s_stride] = s;
        st = (st + 1) % STAGES;
        it++;
    }
    mmk_cp_async_wait<0>();
}

/* Any group (4, 16, 64, 256) and float dtype; the row lives in shared memory
 * and each butterfly stage updates disjoint quads in place. Quantizes (q !=
 * NULL) or writes the rotation rounded to rot's dtype. */
__global__ void k_convrot_generic(int K, int group, const void *x, mm_dtype xt, int64_t ldx, int8_t *q, int64_t ldq,
                                  float *sq, int64_t s_stride, void *rot, mm_dtype rt, int64_t ld_rot)
{
    __shared__ float scratch[32];
    extern __shared__ float row[];
    int64_t r = blockIdx.x;
    for (int c = threadIdx.x; c < K; c += blockDim.x)
        row[c] = mmk_ld(x, xt, r * ldx + c);
    __syncthreads();
    int quads = K / 4, qpg = group / 4;
    for (int st = 1; st < group; st *= 4) {
        for (int qd = threadIdx.x; qd < quads; qd += blockDim.x) {
            int g = qd / qpg, j = qd % qpg;
            int base = g * group + (j / st) * (4 * st) + (j % st);
            float a0 = row[base], a1 = row[base + st], a2 = row[base + 2 * st], a3 = row[base + 3 * st];
            h4(a0, a1, a2, a3);
            row[base] = a0;
            row[base + st] = a1;
            row[base + 2 * st] = a2;
            row[base + 3 * st] = a3;
        }
        __syncthreads();
    }
    if (!q) {
        for (int c = threadIdx.x; c < K; c += blockDim.x)
            mmk_st(rot, rt, r * ld_rot + c, row[c]);
        return;
    }
    float amax = 0.f;
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float v = mmk_round_to(xt, row[c]);
        row[c] = v;
        amax = fmaxf(amax, fabsf(v));
    }
    amax = mmk_block_max(amax, scratch); /* also orders the row writes above */
    float s = amax > 0.f ? amax / 127.f : 1.f;
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        float qv = fminf(fmaxf(rintf(row[c] / s), -127.f), 127.f);
        q[r * ldq + c] = (int8_t)qv;
    }
    if (threadIdx.x == 0)
        sq[r * s_stride] = s;
}

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The default is k_convrot_quant_pipe, bit-identical to k_convrot_quant
 * (codes and scales) and faster on every shape of the DiT
 * (docs/PERFORMANCE.md); k_convrot_quant stays as the fallback where the
 * pipelined kernel does not fit (RMSNorm with K > 6144: registers; shared
 * memory past 227 KB) and where the policy asks for it. */
bool pipe_selected() { return mmk_policy_get()->convrot_pipe != 0; }

template <int PRE, int STAGES, bool LUT = false>
int launch_pipe_t(const mmk_convrot_quant *a, int threads, size_t smem, mmk_stream s, mm_error *err)
{
    auto kern = k_convrot_quant_pipe<PRE, STAGES, LUT>;
    MMK_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
            "raising the shared-memory limit of k_convrot_quant_pipe");
    int per_sm = 0, dev = 0, sms = 0;
    MMK_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem), err,
            "occupancy of k_convrot_quant_pipe");
    if (per_sm < 1)
        return 1;
    MMK_TRY(cudaGetDevice(&dev), err, "cudaGetDevice");
    MMK_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), err, "counting SMs");
    int64_t grid = (int64_t)per_sm * sms;
    if (grid > a->rows)
        grid = a->rows;
    bool q_vec = al16(a->q) && a->ldq % 16 == 0;
    kern<<<(unsigned)grid, threads, smem, s>>>(a->K, a->rows, (const bf16 *)a->x, a->ldx, a->norm_w, a->eps, a->shift,
                                               a->scale, a->ld_mod, a->mod_idx, a->q, a->ldq, q_vec, a->s,
                                               a->s_stride ? a->s_stride : 1, (bf16 *)a->h_out, a->ld_h);
    return mmk_launched(err, "k_convrot_quant_pipe");
}

/* Whether k_convrot_quant_pipe takes this call: the fast path's conditions
 * (checked by the caller) plus the shared memory of its stages (SwiGLU's
 * with the SiLU table) and, with RMSNorm, the block size its register
 * budget allows. */
bool pipe_fits(const mmk_convrot_quant *a, int threads, int *stages, size_t *smem)
{
    size_t in_row = (size_t)(a->pre == MMK_PRE_SWIGLU ? 2 : 1) * a->K * 2;
    size_t fixed = (size_t)(a->K / 256) * (16 * 17 * sizeof(float) + 256) +
                   (a->pre == MMK_PRE_SWIGLU ? kSiluTab * sizeof(float) : 0);
    *stages = fixed + 3 * in_row <= 100 * 1024 ? 3 : 2;
    *smem = fixed + *stages * in_row;
    return *smem <= 227 * 1024 && !(a->pre == MMK_PRE_RMSNORM_MOD && threads > kPipeNormThreads);
}

bool fast_fits(const mmk_convrot_quant *a, int G)
{
    return G == 256 && a->x_dtype == MM_BF16 && a->q && al16(a->x) && a->ldx % 8 == 0 &&
           (!a->norm_w || al16(a->norm_w)) && (!a->shift || (al16(a->shift) && al16(a->scale) && a->ld_mod % 4 == 0));
}

int threads_for(int K) { return (K / 256 * 16 + 31) / 32 * 32; }

/* 0 launched, -1 failed, 1 does not fit (the caller runs k_convrot_quant). */
int launch_pipe(const mmk_convrot_quant *a, int threads, mmk_stream s, mm_error *err)
{
    int stages;
    size_t smem;
    if (!pipe_fits(a, threads, &stages, &smem))
        return 1;
    switch (a->pre * 4 + stages) {
    case MMK_PRE_NONE * 4 + 2: return launch_pipe_t<MMK_PRE_NONE, 2>(a, threads, smem, s, err);
    case MMK_PRE_NONE * 4 + 3: return launch_pipe_t<MMK_PRE_NONE, 3>(a, threads, smem, s, err);
    case MMK_PRE_RMSNORM_MOD * 4 + 2: return launch_pipe_t<MMK_PRE_RMSNORM_MOD, 2>(a, threads, smem, s, err);
    case MMK_PRE_RMSNORM_MOD * 4 + 3: return launch_pipe_t<MMK_PRE_RMSNORM_MOD, 3>(a, threads, smem, s, err);
    case MMK_PRE_SWIGLU * 4 + 2: return launch_pipe_t<MMK_PRE_SWIGLU, 2, true>(a, threads, smem, s, err);
    default: return launch_pipe_t<MMK_PRE_SWIGLU, 3, true>(a, threads, smem, s, err);
    }
}

} // namespace

extern "C" int mmk_convrot_quant_run(int dev, mmk_stream s, const mmk_convrot_quant *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    int G = a->group ? a->group : 256;
    if (G != 4 && G != 16 && G != 64 && G != 256)
        return mm_fail(err, "ConvRot: group %d not supported (4, 16, 64, 256)", G);
    if (a->K <= 0 || a->K % G || a->K > 256 * kMaxGroups)
        return mm_fail(err, "ConvRot: K=%d must be a positive multiple of the group %d up to %d", a->K, G,
                       256 * kMaxGroups);
    if (a->pre != MMK_PRE_NONE && a->pre != MMK_PRE_RMSNORM_MOD && a->pre != MMK_PRE_SWIGLU)
        return mm_fail(err, "ConvRot: unknown pre-op %d", a->pre);
    if (a->pre == MMK_PRE_RMSNORM_MOD && ((a->shift == nullptr) != (a->scale == nullptr) || (a->shift && !a->mod_idx)))
        return mm_fail(err, "ConvRot: modulation needs shift, scale and mod_idx together");
    if (!mmk_is_float(a->x_dtype))
        return mm_fail(err, "ConvRot: x must be a float tensor");
    if (a->rows == 0)
        return 0;
    if (a->h_out && (a->pre == MMK_PRE_NONE || !al16(a->h_out) || a->ld_h % 8))
        return mm_fail(err, "ConvRot: h_out is for the fused pre-ops and needs 16-byte aligned bf16 rows");
    if (!fast_fits(a, G)) {
        if (a->pre != MMK_PRE_NONE)
            return mm_fail(err, "ConvRot: the fused pre-ops need group 256, bf16 x and 16-byte aligned inputs");
        size_t smem = (size_t)a->K * sizeof(float);
        if (smem > 48 * 1024)
            MMK_TRY(cudaFuncSetAttribute(k_convrot_generic, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
                    "raising the shared-memory limit of k_convrot_generic");
        k_convrot_generic<<<a->rows, 256, smem, s>>>(a->K, G, a->x, a->x_dtype, a->ldx, a->q, a->ldq, a->s,
                                                     a->s_stride, a->rot, a->rot_dtype, a->ld_rot);
        return mmk_launched(err, "k_convrot_generic");
    }
    int groups = a->K / 256;
    int threads = threads_for(a->K);
    if (pipe_selected()) {
        int rc = launch_pipe(a, threads, s, err);
        if (rc <= 0)
            return rc;
        /* rc > 0: does not fit (shared memory, registers); the one-row kernel below */
    }
    size_t smem = (size_t)groups * 16 * 17 * sizeof(float);
    if (smem > 48 * 1024)
        MMK_TRY(cudaFuncSetAttribute(k_convrot_quant, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
                "raising the shared-memory limit of k_convrot_quant");
    k_convrot_quant<<<a->rows, threads, smem, s>>>(a->K, a->pre, (const bf16 *)a->x, a->ldx, a->norm_w, a->eps,
                                                   a->shift, a->scale, a->ld_mod, a->mod_idx, a->q, a->ldq, a->s,
                                                   a->s_stride ? a->s_stride : 1, (bf16 *)a->h_out, a->ld_h);
    return mmk_launched(err, "k_convrot_quant");
}

extern "C" const char *mmk_convrot_quant_kernel(const mmk_convrot_quant *a)
{
    int G = a->group ? a->group : 256, stages;
    size_t smem;
    if (!fast_fits(a, G))
        return "generic";
    if (!pipe_selected() || !pipe_fits(a, threads_for(a->K), &stages, &smem))
        return "row";
    return "pipe";
}

static const mmk_kernel_entry g_kernels[] = {
    {"convrot_quant", (const void *)k_convrot_quant, 80},
    {"convrot_generic", (const void *)k_convrot_generic, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_convrot(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
