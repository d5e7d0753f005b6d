/* The DiT's int8 ConvRot linears on Hopper with the epilogue fused
 * (contract in kernels/mmk_qgemm.h).
 *
 * Output tiles of 128 × 256, 384 threads in three warpgroups, one CTA per SM
 * walking the tiles with a stride of the grid:
 *   - warpgroup 0, the producer: one thread streams 128-wide K slices of the
 *     activation tile (128 rows) and the weight tile (256 rows) through a
 *     four-stage ring with TMA, completing on mbarriers; the ring's stage and
 *     phase run on across tiles, so the next tile's first K slices load while
 *     the consumers run the epilogue of the current one (no launch, barrier
 *     set-up or pipeline fill per tile);
 *   - warpgroups 1 and 2, the consumers: 64 rows each, wgmma m64n256k32
 *     s8·s8 → s32 from shared memory, one K slice in flight while the
 *     previous one's stage is handed back; then the epilogue on the int32
 *     accumulators in registers: · (sx·sw), bf16, optionally the gated
 *     residual into y, stored as whole 16-byte row pieces (a transpose across
 *     each quad of lanes: full 32-byte sectors, a quarter of the store
 *     instructions of pair stores, which used half of each sector).
 * Tiles are visited in groups of G row blocks (all column tiles of a group
 * before the next group), so that what the running CTAs read — G activation
 * blocks and a band of weight tiles — stays in L2. The waits spin: sleeping
 * ones measured no faster. Measurements and the variants tried and dropped:
 * docs/PERFORMANCE.md.
 *
 * CPU twin: src/backend/cpu/quant.c (mm_gemm_i8_scaled, then
 * mm_gated_residual); tests/unit/test_speed_qgemm.c demands bit equality
 * with the cuBLASLt path (mmk_qlinear_i8) on the device.
 */
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/mmk_qgemm.h"
#include "kernels/tma_host.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMK_QGEMM_DEVICE 1
#include "kernels/wgmma.cuh"
#endif

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 128, kStages = 4, kThreads = 384;
constexpr int kTileA = kBM * kBK, kTileB = kBN * kBK; /* bytes */
constexpr int kSmem = kStages * (kTileA + kTileB) + 1024;

struct QgParams {
    int M, N, K, n_mt, n_nt, group_m, n_kb;
    const float *sx, *sw;
    bf16 *y;
    int64_t ldy;
    const float *gate;
    int64_t ld_gate;
    const int32_t *mod_idx;
    int y16; /* y and ldy 16-byte aligned (epilogue_vec) */
    uint32_t sleep_producer, sleep_consumer; /* mbarrier waits: ns a try may sleep (0: spin, what both do) */
    const uint64_t *lora_mask; /* LORA: 64-wide chunks of the branch per column tile */
};

#ifdef MMK_QGEMM_DEVICE
/* The epilogue on one consumer warpgroup's 64 × 256 int32 accumulators
 * (the same roundings as the cuBLASLt path's epilogue kernel), with whole
 * 16-byte row pieces per thread: each quad of lanes holds columns 2t, 2t + 1
 * of four 8-column groups; a 4 × 4 transpose of those bf16 pairs across the
 * quad (two shuffle rounds) leaves lane t with the 8 consecutive columns of
 * group 4j + t, stored (and, gated, the residual read) as one 16-byte
 * access. The pairs are rounded to bf16 before the transpose, which is the
 * rounding of (acc · scale); the gated sum then uses exactly those bf16
 * values. y16: y and its rows are 16-byte aligned (else 4-byte pieces,
 * still whole sectors). */
__device__ __forceinline__ uint32_t bf16x2_bits(float a, float b)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ float2 bf16x2_float2(uint32_t w)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&w));
}

/* A tile value before its rounding: the int32 accumulator times its scales,
 * or (the adapter branch's tiles) the f32 accumulator that already holds it. */
__device__ __forceinline__ float tile_value(const int32_t (&acc)[128], int i, float sx, float sw)
{
    return (float)acc[i] * __fmul_rn(sx, sw);
}
__device__ __forceinline__ float tile_value(const float (&o)[128], int i, float, float) { return o[i]; }

template <bool GATED, typename Acc>
__device__ __forceinline__ void epilogue_vec(const Acc (&acc)[128], const QgParams &p, int mt, int nt, int cw,
                                             int warp, int g, int t)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = mt * kBM + cw * 64 + warp * 16 + g + 8 * r;
        const bool row_ok = row < p.M; /* the same for the whole quad: the shuffles run on every lane */
        const float sx = row_ok ? p.sx[row] : 0.f;
        bf16 *yrow = p.y + (int64_t)(row_ok ? row : 0) * p.ldy;
        const float *grow = GATED && row_ok ? p.gate + (int64_t)p.mod_idx[row] * p.ld_gate : nullptr;
#pragma unroll
        for (int j = 0; j < kBN / 32; j++) {
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int n8 = 4 * j + k, col = nt * kBN + n8 * 8 + 2 * t;
                const float2 sw = col < p.N ? *reinterpret_cast<const float2 *>(p.sw + col) : make_float2(0.f, 0.f);
                w[k] = bf16x2_bits(tile_value(acc, n8 * 4 + 2 * r, sx, sw.x), tile_value(acc, n8 * 4 + 2 * r + 1, sx, sw.y));
            }
            /* w[k] of lane t = pair t of group 4j + k  →  pair k of group 4j + t */
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const uint32_t give = (t & 1) ? w[2 * m] : w[2 * m + 1];
                const uint32_t got = __shfl_xor_sync(0xffffffffu, give, 1);
                if (t & 1)
                    w[2 * m] = got;
                else
                    w[2 * m + 1] = got;
            }
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const uint32_t give = (t & 2) ? w[m] : w[m + 2];
                const uint32_t got = __shfl_xor_sync(0xffffffffu, give, 2);
                if (t & 2)
                    w[m] = got;
                else
                    w[m + 2] = got;
            }
            const int col0 = nt * kBN + (4 * j + t) * 8;
            if (!row_ok || col0 >= p.N)
                continue;
            uint32_t *yp = reinterpret_cast<uint32_t *>(yrow + col0);
            if (GATED) {
                uint32_t x[4];
                if (p.y16) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(yp);
                    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
                } else {
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        x[k] = yp[k];
                }
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 gt = *reinterpret_cast<const float2 *>(grow + col0 + 2 * k);
                    const float2 xo = bf16x2_float2(x[k]), o = bf16x2_float2(w[k]);
                    w[k] = bf16x2_bits(__fadd_rn(xo.x, __fmul_rn(gt.x, o.x)), __fadd_rn(xo.y, __fmul_rn(gt.y, o.y)));
                }
            }
            if (p.y16) {
                *reinterpret_cast<uint4 *>(yp) = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    yp[k] = w[k];
            }
        }
    }
}
#endif

#ifdef MMK_QGEMM_DEVICE
/* The stage ring: kStages A and B tiles in the dynamic
 * shared memory from its first 1024-byte boundary (the 128-byte swizzle's
 * atom repeats every 1024 bytes, and kSmem leaves that much slack), and per
 * stage a FULL barrier (the producer's expect_tx and the TMA bytes) and an
 * EMPTY one (the consumers' hand-back). */
struct QgRing {
    uint32_t sA, sB, bars;
    __device__ __forceinline__ uint32_t full(uint32_t s) const { return bars + 8u * s; }
    __device__ __forceinline__ uint32_t empty(uint32_t s) const { return bars + 8u * (kStages + s); }
};

/* Lays out the ring and initializes its barriers; EMPTY completes after
 * empty_arrivals arrivals (the kernels hand a stage back per thread or per
 * warp). Called by every thread: the block barrier at its end makes the
 * initialization visible before anyone waits on a barrier. */
__device__ __forceinline__ QgRing ring_setup(int empty_arrivals)
{
    extern __shared__ __align__(1024) unsigned char qg_smem[];
    __shared__ __align__(8) uint64_t bars[2 * kStages];
    unsigned char *base = (unsigned char *)(((uintptr_t)qg_smem + 1023) & ~(uintptr_t)1023);
    QgRing ring;
    ring.sA = mmk_smem_addr(base);
    ring.sB = ring.sA + kStages * kTileA;
    ring.bars = mmk_smem_addr(&bars[0]);
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mmk_mbar_init(ring.full(s), 1);
            mmk_mbar_init(ring.empty(s), empty_arrivals);
        }
        mmk_mbar_init_fence();
    }
    __syncthreads();
    return ring;
}
#endif

#ifdef MMK_QGEMM_DEVICE
/* mmk_mbar_wait_ns that gives up: a barrier phase that has not completed
 * after 5 s of waiting can only be a broken handshake (a whole GEMM takes
 * milliseconds), and trapping turns that hang into a launch error the caller
 * sees (a device test must fail, not hang). The clock is read on
 * every failed try that slept, else on every 1024th. */
__device__ __forceinline__ void mbar_wait_bounded(uint32_t bar, uint32_t parity, uint32_t sleep_ns)
{
    uint64_t t0 = 0;
    for (uint32_t n = 1;; n++) {
        const uint32_t done = sleep_ns ? mmk_mbar_try_wait(bar, parity, sleep_ns) : mmk_mbar_try_wait_spin(bar, parity);
        if (done)
            return;
        if (sleep_ns || (n & 1023) == 0) {
            uint64_t now;
            asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
            if (t0 == 0)
                t0 = now;
            else if (now - t0 > 5000000000ull)
                __trap();
        }
    }
}

/* Halfway through a gated tile's K loop: the residual rows this warp's
 * epilogue will read (16 rows × 256 bf16 = 4 lines of 128 bytes each, two
 * per lane) into L2, so that the epilogue does not wait on DRAM. */
__device__ __forceinline__ void prefetch_residual(const QgParams &p, int mt, int nt, int cw, int warp, int lane)
{
    const int row = mt * kBM + cw * 64 + warp * 16 + (lane >> 1), col = nt * kBN + (lane & 1) * 128;
    if (row < p.M && col < p.N) {
        const bf16 *y = p.y + (int64_t)row * p.ldy + col;
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(y));
        if (col + 64 < p.N)
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"(y + 64));
    }
}

/* Tile t of the walk: the grouped raster, G row blocks × all column tiles,
 * column-major inside a group. */
__device__ __forceinline__ void tile_of(const QgParams &p, int t, int &mt, int &nt)
{
    const int per_group = p.group_m * p.n_nt, first = (t / per_group) * p.group_m;
    const int gsize = p.n_mt - first < p.group_m ? p.n_mt - first : p.group_m;
    mt = first + (t % per_group) % gsize;
    nt = (t % per_group) / gsize;
}
#endif

#ifdef MMK_QGEMM_DEVICE
/* The adapter branch of one tile (LORA): the int32 accumulators become
 * f32 values o = float(acc)·(sx·sw) — the epilogue's own products — and the
 * branch's chunks, arriving through the ring after the K slices, add u·blᵀ
 * on them with bf16 wgmma; the epilogue then rounds o once. */
__device__ __forceinline__ void lora_chunks(const int32_t (&acc)[128], float (&o)[128], const QgParams &p,
                                            const QgRing &ring, uint64_t mask, uint32_t &it, int mt, int nt, int cw,
                                            int warp, int g, int t, int lane)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = mt * kBM + cw * 64 + warp * 16 + g + 8 * r;
        const float sx = row < p.M ? p.sx[row] : 0.f;
#pragma unroll
        for (int n8 = 0; n8 < kBN / 8; n8++) {
            const int col = nt * kBN + n8 * 8 + 2 * t;
            const float2 sw = col < p.N ? *reinterpret_cast<const float2 *>(p.sw + col) : make_float2(0.f, 0.f);
            o[n8 * 4 + 2 * r] = tile_value(acc, n8 * 4 + 2 * r, sx, sw.x);
            o[n8 * 4 + 2 * r + 1] = tile_value(acc, n8 * 4 + 2 * r + 1, sx, sw.y);
        }
    }
    for (; mask; mask &= mask - 1, it++) {
        const uint32_t s = it % kStages;
        mbar_wait_bounded(ring.full(s), (it / kStages) & 1, p.sleep_consumer);
        const uint32_t ad = mmk_desc_sw128_lo(ring.sA + s * kTileA + cw * 64 * 128);
        const uint32_t bd = mmk_desc_sw128_lo(ring.sB + s * kTileB);
        mmk_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* 64 bf16 = 128 bytes: four k16 steps of 32 bytes */
            mmk_wgmma_ss_bf16_n256(o, mmk_desc_sw128_at(ad, kk * 32), mmk_desc_sw128_at(bd, kk * 32), 1);
        mmk_wgmma_commit();
        mmk_wgmma_wait<0>();
        mmk_fence_regs(o);
        if (lane == 0)
            mmk_mbar_arrive(ring.empty(s));
    }
}
#endif

/* One CTA per SM walking the tiles of the grouped raster with a stride of
 * the grid (the file's head describes the pipeline). LORA: each tile's
 * branch chunks follow its K slices through the ring (tmU, tmL; unused
 * otherwise). */
template <bool GATED, bool LORA>
__global__ void __launch_bounds__(kThreads, 1)
    k_qgemm_persistent(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                       const __grid_constant__ CUtensorMap tmU, const __grid_constant__ CUtensorMap tmL,
                       const QgParams p)
{
#ifdef MMK_QGEMM_DEVICE
    const QgRing ring = ring_setup(8); /* one arrival per consumer warp */
    const uint32_t sA = ring.sA, sB = ring.sB;
    const int n_tiles = p.n_mt * p.n_nt;

    const int wg = threadIdx.x >> 7;
    if (wg == 0) {
        /* the branch's f32 tile next to the int32 one needs 8 more registers per consumer thread */
        if (LORA)
            mmk_regs_dealloc<24>();
        else
            mmk_regs_dealloc<40>();
        if (threadIdx.x == 0) {
            mmk_tma_prefetch_map(&tmA);
            mmk_tma_prefetch_map(&tmB);
            if (LORA) {
                mmk_tma_prefetch_map(&tmU);
                mmk_tma_prefetch_map(&tmL);
            }
            uint32_t it = 0;
            for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
                int mt, nt;
                tile_of(p, tile, mt, nt);
                for (int kb = 0; kb < p.n_kb; kb++, it++) {
                    const uint32_t s = it % kStages;
                    mbar_wait_bounded(ring.empty(s), ((it / kStages) & 1) ^ 1, p.sleep_producer);
                    mmk_mbar_expect_tx(ring.full(s), kTileA + kTileB);
                    mmk_tma_load_2d(sA + s * kTileA, &tmA, ring.full(s), kb * kBK, mt * kBM);
                    mmk_tma_load_2d(sB + s * kTileB, &tmB, ring.full(s), kb * kBK, nt * kBN);
                }
                /* the branch's chunks: a u tile [128 rows × 64] is an A stage, a bl tile [256 × 64] a B stage */
                for (uint64_t m = LORA ? p.lora_mask[nt] : 0; m; m &= m - 1, it++) {
                    const int c = __ffsll((long long)m) - 1;
                    const uint32_t s = it % kStages;
                    mbar_wait_bounded(ring.empty(s), ((it / kStages) & 1) ^ 1, p.sleep_producer);
                    mmk_mbar_expect_tx(ring.full(s), kTileA + kTileB);
                    mmk_tma_load_2d(sA + s * kTileA, &tmU, ring.full(s), c * 64, mt * kBM);
                    mmk_tma_load_2d(sB + s * kTileB, &tmL, ring.full(s), c * 64, nt * kBN);
                }
            }
        }
    } else {
        if (LORA)
            mmk_regs_alloc<240>();
        else
            mmk_regs_alloc<232>();
        const int cw = wg - 1;
        const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        int32_t acc[128];
        uint32_t it = 0;
        for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            int mt, nt;
            tile_of(p, tile, mt, nt);
#pragma unroll
            for (int i = 0; i < 128; i++)
                acc[i] = 0;
            for (int kb = 0; kb < p.n_kb; kb++, it++) {
                const uint32_t s = it % kStages;
                mbar_wait_bounded(ring.full(s), (it / kStages) & 1, p.sleep_consumer);
                const uint32_t ad = mmk_desc_sw128_lo(sA + s * kTileA + cw * 64 * kBK);
                const uint32_t bd = mmk_desc_sw128_lo(sB + s * kTileB);
                mmk_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kBK / 32; kk++)
                    mmk_wgmma_ss_s8_n256(acc, mmk_desc_sw128_at(ad, kk * 32), mmk_desc_sw128_at(bd, kk * 32), 1);
                mmk_wgmma_commit();
                if (GATED && kb == p.n_kb / 2)
                    prefetch_residual(p, mt, nt, cw, warp, lane);
                /* the previous slice's products are done: hand its stage back */
                mmk_wgmma_wait<1>();
                if (kb > 0 && lane == 0)
                    mmk_mbar_arrive(ring.empty((it - 1) % kStages));
            }
            mmk_wgmma_wait<0>();
            mmk_fence_regs(acc);
            if (lane == 0) /* the last slice's stage, before the epilogue: the producer is already on the next tile */
                mmk_mbar_arrive(ring.empty((it - 1) % kStages));
            const uint64_t mask = LORA ? p.lora_mask[nt] : 0;
            if (LORA && mask) {
                float o[128];
                lora_chunks(acc, o, p, ring, mask, it, mt, nt, cw, warp, g, t, lane);
                epilogue_vec<GATED>(o, p, mt, nt, cw, warp, g, t);
            } else {
                epilogue_vec<GATED>(acc, p, mt, nt, cw, warp, g, t);
            }
        }
    }
#else
    (void)p;
    __trap();
#endif
}

bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }
bool al8(const void *p) { return ((uintptr_t)p & 7) == 0; }

/* One CTA per SM (asked once per device), at most one per tile. */
template <bool GATED, bool LORA>
int launch_persistent(int dev, const CUtensorMap &a, const CUtensorMap &b, const CUtensorMap &u, const CUtensorMap &l,
                      const QgParams &p, cudaStream_t s, mm_error *err)
{
    static int sms[64];
    if (sms[dev] <= 0)
        MMK_TRY(cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev), err, "asking for the SM count");
    MMK_TRY(cudaFuncSetAttribute(k_qgemm_persistent<GATED, LORA>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
            err, "raising the shared-memory limit of the int8 GEMM kernel");
    const int n_tiles = p.n_mt * p.n_nt, grid = n_tiles < sms[dev] ? n_tiles : sms[dev];
    k_qgemm_persistent<GATED, LORA><<<grid, kThreads, kSmem, s>>>(a, b, u, l, p);
    return mmk_launched(err, "k_qgemm_persistent");
}

} // namespace

extern "C" int mmk_qgemm_usable(int dev)
{
    static int cached[64];
    if (dev < 0 || dev >= 64)
        return 0;
    if (!cached[dev]) {
        cudaDeviceProp prop;
        cudaFuncAttributes fa;
        bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 &&
                  cudaFuncGetAttributes(&fa, k_qgemm_persistent<false, false>) == cudaSuccess && fa.binaryVersion >= 90;
        cudaGetLastError();
        cached[dev] = ok ? 1 : 2;
    }
    return cached[dev] == 1;
}

extern "C" int mmk_qgemm_run(int dev, mmk_stream st, const mmk_qgemm *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (!mmk_qgemm_usable(dev))
        return mm_fail(err, "int8 GEMM (sm90): needs an sm_90 GPU and sm_90a code in this build");
    if (a->M <= 0 || a->N <= 0 || a->K <= 0)
        return a->M == 0 ? 0 : mm_fail(err, "int8 GEMM (sm90): sizes must be positive (M=%d N=%d K=%d)", a->M, a->N, a->K);
    if (a->K % 16 || a->N % 8 || !al16(a->xq) || !al16(a->wq) || a->ldx % 16 || a->ldw % 16 || a->ldy % 2 ||
        !al8(a->sw) || ((uintptr_t)a->y & 3))
        return mm_fail(err, "int8 GEMM (sm90): needs K %% 16 == 0, N %% 8 == 0, 16-byte aligned int8 rows, an "
                       "8-byte aligned sw and 4-byte aligned bf16 pairs in y");
    if (a->gate && (!a->mod_idx || a->ld_gate % 2 || !al8(a->gate)))
        return mm_fail(err, "int8 GEMM (sm90): the gate table needs mod_idx and 8-byte aligned rows");
    const bool lora = a->lora_u != nullptr;
    if (lora && (!a->lora_b || !a->lora_mask || a->lora_r <= 0 || a->lora_r % 64 || a->lora_r > 4096 || a->ld_u % 8 ||
                 a->ld_b % 8 || a->ld_u < a->lora_r || a->ld_b < a->lora_r || !al16(a->lora_u) || !al16(a->lora_b)))
        return mm_fail(err, "int8 GEMM (sm90): the adapter branch needs u, bl and the chunk masks, a rank of 64..4096 "
                       "in steps of 64 and 16-byte aligned bf16 rows");
    CUtensorMap ma, mb, mu, ml;
    if (mmk_tma_map_2d(&ma, true, a->xq, (uint64_t)a->K, (uint64_t)a->M, (uint64_t)a->ldx, kBK, kBM, err) ||
        mmk_tma_map_2d(&mb, true, a->wq, (uint64_t)a->K, (uint64_t)a->N, (uint64_t)a->ldw, kBK, kBN, err))
        return -1;
    if (lora && (mmk_tma_map_2d(&mu, false, a->lora_u, (uint64_t)a->lora_r, (uint64_t)a->M, (uint64_t)a->ld_u * 2, 64,
                                kBM, err) ||
                 mmk_tma_map_2d(&ml, false, a->lora_b, (uint64_t)a->lora_r, (uint64_t)a->N, (uint64_t)a->ld_b * 2, 64,
                                kBN, err)))
        return -1;
    if (!lora)
        mu = ml = ma; /* not read */
    QgParams p;
    memset(&p, 0, sizeof p);
    p.M = a->M;
    p.N = a->N;
    p.K = a->K;
    p.n_mt = (a->M + kBM - 1) / kBM;
    p.n_nt = (a->N + kBN - 1) / kBN;
    p.n_kb = (a->K + kBK - 1) / kBK;
    /* G row blocks of activations ≈ 12 MB, so they and a band of weight tiles stay in L2 */
    int64_t g = ((int64_t)12 << 20) / ((int64_t)kBM * a->K);
    p.group_m = (int)(g < 4 ? 4 : g > 16 ? 16 : g);
    p.sx = a->sx;
    p.sw = a->sw;
    p.y = (bf16 *)a->y;
    p.ldy = a->ldy;
    p.gate = a->gate;
    p.ld_gate = a->ld_gate;
    p.mod_idx = a->mod_idx;
    p.y16 = al16(a->y) && a->ldy % 8 == 0;
    p.sleep_producer = p.sleep_consumer = 0; /* spinning waits */
    p.lora_mask = a->lora_mask;
    cudaStream_t s = (cudaStream_t)st;
    if (lora)
        return a->gate ? launch_persistent<true, true>(dev, ma, mb, mu, ml, p, s, err)
                       : launch_persistent<false, true>(dev, ma, mb, mu, ml, p, s, err);
    return a->gate ? launch_persistent<true, false>(dev, ma, mb, mu, ml, p, s, err)
                   : launch_persistent<false, false>(dev, ma, mb, mu, ml, p, s, err);
}

/* ------------------------------------------------------------------ first-use self-check */

namespace {

/* Both epilogues (plain store, gated residual) on a 300 × 768 × 512 problem
 * (ragged last row tile, three column tiles, four K slices) against the
 * cuBLASLt path (mmk_qlinear_i8); returns the number of differing outputs,
 * or -1 when something could not run (message in err). */
long qgemm_selfcheck(int dev, mm_error *err)
{
    const int M = 300, N = 768, K = 512, T = 3;
    uint64_t h = 0x51f7c0de5eedull;
    auto next = [&h]() {
        h ^= h >> 12;
        h ^= h << 25;
        h ^= h >> 27;
        return h * 2685821657736338717ull;
    };
    auto unit = [&next]() { return (float)((next() >> 40) * 0x1p-24); };
    std::vector<int8_t> x((size_t)M * K), w((size_t)N * K);
    std::vector<float> sx(M), sw(N), gate((size_t)T * N);
    std::vector<int32_t> idx(M);
    std::vector<uint16_t> res((size_t)M * N), ya((size_t)M * N), yb((size_t)M * N);
    for (auto &v : x)
        v = (int8_t)((int)(next() % 255) - 127);
    for (auto &v : w)
        v = (int8_t)((int)(next() % 255) - 127);
    for (int i = 0; i < M; i++) {
        sx[i] = (0.5f + unit()) * 0.02f;
        idx[i] = (int32_t)(next() % T);
    }
    for (auto &v : sw)
        v = (0.5f + unit()) * 1e-3f;
    for (auto &v : gate)
        v = mm_bf16_to_f32(mm_f32_to_bf16(unit() * 2.f - 1.f));
    for (auto &v : res)
        v = mm_f32_to_bf16(unit() * 4.f - 2.f);
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    void *d[9] = {nullptr};
    const size_t bytes[9] = {x.size(), w.size(), 4 * sx.size(), 4 * sw.size(), 4 * gate.size(), 4 * idx.size(),
                             2 * res.size(), 2 * res.size(), 2 * res.size()};
    const void *src[9] = {x.data(), w.data(), sx.data(), sw.data(), gate.data(), idx.data(), res.data(), res.data(),
                          res.data()};
    long diff = -1;
    bool ok = s != nullptr;
    for (int i = 0; i < 9 && ok; i++)
        ok = (d[i] = mm_cuda_malloc(dev, bytes[i], err)) != nullptr &&
             mm_cuda_memcpy(dev, d[i], -1, src[i], bytes[i], err) == 0;
    for (int gated = 0; gated < 2 && ok; gated++) {
        mmk_qlinear ref;
        memset(&ref, 0, sizeof ref);
        ref.M = M, ref.N = N, ref.K = K;
        ref.xq = (const int8_t *)d[0], ref.ldx = K, ref.sx = (const float *)d[2];
        ref.wq = (const int8_t *)d[1], ref.ldw = K, ref.sw = (const float *)d[3];
        ref.y = d[7], ref.ldy = N, ref.y_dtype = MM_BF16;
        mmk_qgemm q;
        memset(&q, 0, sizeof q);
        q.M = M, q.N = N, q.K = K;
        q.xq = ref.xq, q.ldx = K, q.sx = ref.sx, q.wq = ref.wq, q.ldw = K, q.sw = ref.sw;
        q.y = d[8], q.ldy = N;
        if (gated) {
            ref.gate = q.gate = (const float *)d[4];
            ref.ld_gate = q.ld_gate = N;
            ref.mod_idx = q.mod_idx = (const int32_t *)d[5];
        } else { /* poison: every output must be written */
            ok = cudaMemsetAsync(d[7], 0xff, bytes[7], s) == cudaSuccess &&
                 cudaMemsetAsync(d[8], 0xff, bytes[8], s) == cudaSuccess;
        }
        ok = ok && mmk_qlinear_i8(dev, s, &ref, err) == 0 && mmk_qgemm_run(dev, s, &q, err) == 0 &&
             mm_cuda_memcpy(-1, ya.data(), dev, d[7], bytes[7], err) == 0 &&
             mm_cuda_memcpy(-1, yb.data(), dev, d[8], bytes[8], err) == 0;
        if (ok) {
            diff = gated ? diff : 0;
            for (size_t i = 0; i < ya.size(); i++)
                diff += ya[i] != yb[i];
        }
        /* the gated pass starts from the same residual on both sides */
        ok = ok && mm_cuda_memcpy(dev, d[7], -1, res.data(), bytes[7], err) == 0 &&
             mm_cuda_memcpy(dev, d[8], -1, res.data(), bytes[8], err) == 0;
    }
    for (int i = 0; i < 9; i++)
        mm_cuda_free(dev, d[i]);
    return ok ? diff : -1;
}

/* The adapter branch (mmk_qgemm_lora_verified): u [M, 128], bl [N, 128];
 * column tile 0 has no chunk, tile 1 chunk 0, tile 2 both (bl is zero where
 * the mask is clear, so the reference's sums cover the same terms). The
 * reference: the cuBLASLt path with the host's f32 sums (k ascending) as its
 * addend. Returns the outputs more than one bf16 step apart, plus one per
 * 1% of outputs one step apart beyond the first 1%; -1 when it could not
 * run. */
long qgemm_lora_selfcheck(int dev, mm_error *err)
{
    const int M = 300, N = 768, K = 512, T = 3, R = 128;
    uint64_t h = 0x10a4c0de5eedull;
    auto next = [&h]() {
        h ^= h >> 12;
        h ^= h << 25;
        h ^= h >> 27;
        return h * 2685821657736338717ull;
    };
    auto unit = [&next]() { return (float)((next() >> 40) * 0x1p-24); };
    std::vector<int8_t> x((size_t)M * K), w((size_t)N * K);
    std::vector<float> sx(M), sw(N), gate((size_t)T * N), delta((size_t)M * N);
    std::vector<int32_t> idx(M);
    std::vector<uint16_t> res((size_t)M * N), ya((size_t)M * N), yb((size_t)M * N), u((size_t)M * R), bl((size_t)N * R);
    const uint64_t mask[3] = {0, 1, 3};
    for (auto &v : x)
        v = (int8_t)((int)(next() % 255) - 127);
    for (auto &v : w)
        v = (int8_t)((int)(next() % 255) - 127);
    for (int i = 0; i < M; i++) {
        sx[i] = (0.5f + unit()) * 0.02f;
        idx[i] = (int32_t)(next() % T);
    }
    for (auto &v : sw)
        v = (0.5f + unit()) * 1e-3f;
    for (auto &v : gate)
        v = mm_bf16_to_f32(mm_f32_to_bf16(unit() * 2.f - 1.f));
    for (auto &v : res)
        v = mm_f32_to_bf16(unit() * 4.f - 2.f);
    for (auto &v : u)
        v = mm_f32_to_bf16(unit() * 2.f - 1.f);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < R; k++)
            bl[(size_t)n * R + k] = (mask[n / 256] >> (k / 64)) & 1 ? mm_f32_to_bf16(unit() * 2.f - 1.f) : 0;
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            float acc = 0.f;
            for (int k = 0; k < R; k++)
                acc += mm_bf16_to_f32(u[(size_t)r * R + k]) * mm_bf16_to_f32(bl[(size_t)n * R + k]);
            delta[(size_t)r * N + n] = acc;
        }
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    enum { X, W, SX, SW, GATE, IDX, RES, YA, YB, U, BL, DELTA, MASK, NBUF };
    void *d[NBUF] = {nullptr};
    const size_t bytes[NBUF] = {x.size(), w.size(), 4 * sx.size(), 4 * sw.size(), 4 * gate.size(), 4 * idx.size(),
                                2 * res.size(), 2 * res.size(), 2 * res.size(), 2 * u.size(), 2 * bl.size(),
                                4 * delta.size(), sizeof mask};
    const void *src[NBUF] = {x.data(), w.data(), sx.data(), sw.data(), gate.data(), idx.data(), res.data(),
                             res.data(), res.data(), u.data(), bl.data(), delta.data(), mask};
    long bad = -1;
    bool ok = s != nullptr;
    for (int i = 0; i < NBUF && ok; i++)
        ok = (d[i] = mm_cuda_malloc(dev, bytes[i], err)) != nullptr &&
             mm_cuda_memcpy(dev, d[i], -1, src[i], bytes[i], err) == 0;
    long far = 0, near = 0;
    for (int gated = 0; gated < 2 && ok; gated++) {
        mmk_qlinear ref;
        memset(&ref, 0, sizeof ref);
        ref.M = M, ref.N = N, ref.K = K;
        ref.xq = (const int8_t *)d[X], ref.ldx = K, ref.sx = (const float *)d[SX];
        ref.wq = (const int8_t *)d[W], ref.ldw = K, ref.sw = (const float *)d[SW];
        ref.y = d[YA], ref.ldy = N, ref.y_dtype = MM_BF16;
        ref.add = (const float *)d[DELTA], ref.ld_add = N;
        mmk_qgemm q;
        memset(&q, 0, sizeof q);
        q.M = M, q.N = N, q.K = K;
        q.xq = ref.xq, q.ldx = K, q.sx = ref.sx, q.wq = ref.wq, q.ldw = K, q.sw = ref.sw;
        q.y = d[YB], q.ldy = N;
        q.lora_u = d[U], q.ld_u = R, q.lora_b = d[BL], q.ld_b = R, q.lora_r = R;
        q.lora_mask = (const uint64_t *)d[MASK];
        if (gated) {
            ref.gate = q.gate = (const float *)d[GATE];
            ref.ld_gate = q.ld_gate = N;
            ref.mod_idx = q.mod_idx = (const int32_t *)d[IDX];
        } else {
            ok = cudaMemsetAsync(d[YA], 0xff, bytes[YA], s) == cudaSuccess &&
                 cudaMemsetAsync(d[YB], 0xff, bytes[YB], s) == cudaSuccess;
        }
        ok = ok && mmk_qlinear_i8(dev, s, &ref, err) == 0 && mmk_qgemm_run(dev, s, &q, err) == 0 &&
             mm_cuda_memcpy(-1, ya.data(), dev, d[YA], bytes[YA], err) == 0 &&
             mm_cuda_memcpy(-1, yb.data(), dev, d[YB], bytes[YB], err) == 0;
        for (size_t i = 0; ok && i < ya.size(); i++) {
            /* bf16 bits as an ordered integer line: the distance in steps */
            auto ord = [](uint16_t b) { return (b & 0x8000) ? -(int32_t)(b & 0x7fff) : (int32_t)b; };
            int32_t dist = ord(ya[i]) - ord(yb[i]);
            dist = dist < 0 ? -dist : dist;
            far += dist > 1;
            near += dist == 1;
        }
        ok = ok && mm_cuda_memcpy(dev, d[YA], -1, res.data(), bytes[YA], err) == 0 &&
             mm_cuda_memcpy(dev, d[YB], -1, res.data(), bytes[YB], err) == 0;
    }
    if (ok) {
        const long allowed = 2L * M * N / 100;
        bad = far + (near > allowed ? (near - allowed) / (allowed / 2 > 0 ? allowed / 2 : 1) + 1 : 0);
    }
    for (int i = 0; i < NBUF; i++)
        mm_cuda_free(dev, d[i]);
    return ok ? bad : -1;
}

std::mutex g_qgemm_check_mu;

} // namespace

extern "C" int mmk_qgemm_verified(int dev, long *mismatches)
{
    static int verdict[64];
    static long found[64];
    if (dev < 0 || dev >= 64 || !mmk_qgemm_usable(dev))
        return 0;
    std::lock_guard<std::mutex> lock(g_qgemm_check_mu);
    if (!verdict[dev]) {
        mm_error err = {{0}};
        long diff = qgemm_selfcheck(dev, &err);
        found[dev] = diff;
        verdict[dev] = diff == 0 ? 1 : 2;
        if (diff == 0)
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: sm90 kernel with the fused epilogue in use (self-check: "
                            "bit for bit the cuBLASLt path)\n", dev);
        else if (diff > 0)
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: the sm90 kernel differs from the cuBLASLt path in %ld of "
                            "%d outputs; not used\n", dev, diff, 2 * 300 * 768);
        else
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: the sm90 kernel's self-check failed (%s); not used\n", dev,
                    err.msg);
    }
    if (mismatches)
        *mismatches = found[dev];
    return verdict[dev] == 1;
}

extern "C" int mmk_qgemm_lora_verified(int dev, long *mismatches)
{
    static int verdict[64];
    static long found[64];
    if (dev < 0 || dev >= 64 || !mmk_qgemm_usable(dev))
        return 0;
    std::lock_guard<std::mutex> lock(g_qgemm_check_mu);
    if (!verdict[dev]) {
        mm_error err = {{0}};
        long bad = qgemm_lora_selfcheck(dev, &err);
        found[dev] = bad;
        verdict[dev] = bad == 0 ? 1 : 2;
        if (bad == 0)
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: the adapter branch fused into the sm90 kernel (self-check: "
                            "within one bf16 step of the cuBLASLt path with the branch as its addend)\n", dev);
        else if (bad > 0)
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: the sm90 kernel's adapter branch is off the reference (%ld); "
                            "adapters run through the cuBLASLt path\n", dev, bad);
        else
            fprintf(stderr, "mmh3: cuda:%d int8 GEMM: the adapter branch's self-check failed (%s); adapters run "
                            "through the cuBLASLt path\n", dev, err.msg);
    }
    if (mismatches)
        *mismatches = found[dev];
    return verdict[dev] == 1;
}

static const mmk_kernel_entry g_qgemm_kernels[] = {
    {"qgemm_sm90", (const void *)k_qgemm_persistent<false, false>, 90},
    {"qgemm_sm90_gated", (const void *)k_qgemm_persistent<true, false>, 90},
    {"qgemm_sm90_lora", (const void *)k_qgemm_persistent<false, true>, 90},
    {"qgemm_sm90_gated_lora", (const void *)k_qgemm_persistent<true, true>, 90},
};

extern "C" const mmk_kernel_entry *mmk_kernels_qgemm(int *n)
{
    *n = (int)(sizeof g_qgemm_kernels / sizeof g_qgemm_kernels[0]);
    return g_qgemm_kernels;
}
