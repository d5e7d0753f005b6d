/* mmk_qgemm — the DiT's int8 ConvRot linears on Hopper, beside
 * mmk_qlinear_i8 of kernels/mmk.h: the same function
 *
 *   acc[r,n] = Σ_k xq[r,k]·wq[n,k]                       (int32, exact)
 *   o[r,n]   = float(acc)·(sx[r]·sw[n])                  (f32, scales multiplied first)
 *   store:          y[r,n] = bf16(o)
 *   gated residual: y[r,n] = bf16(y[r,n] + gate[mod_idx[r]·ld_gate + n] · bf16(o))
 *                   (product and sum rounded separately, no fused multiply-add)
 *
 * bit for bit (integer sums are exact, the epilogue is the same sequence of
 * roundings), in one kernel: wgmma s8 tiles of 128×256 with a TMA +
 * mbarrier pipeline (producer warpgroup, two consumer warpgroups; one CTA
 * per SM walking the tiles), the scales and the gated residual applied to
 * the int32 accumulators in registers — no int32 intermediate in device
 * memory (the cuBLASLt path writes and re-reads one, about a third of its
 * time at the DiT's sizes).
 *
 * xq [M, K] and wq [N, K] int8, row-major (K contiguous), rows 16-byte
 * aligned with K a multiple of 16; y bf16 [M, N] with row stride ldy (a
 * multiple of 2), N a multiple of 8; sx [M], sw [N], gate f32. No bias.
 * Needs an sm_90 device and sm_90a code (mmk_qgemm_usable).
 */
#ifndef MMH3_KERNELS_MMK_QGEMM_H
#define MMH3_KERNELS_MMK_QGEMM_H

#include "kernels/mmk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mmk_qgemm {
    int M, N, K;
    const int8_t *xq;
    int64_t ldx;
    const float *sx;
    const int8_t *wq;
    int64_t ldw;
    const float *sw;
    void *y; /* bf16 */
    int64_t ldy;
    const float *gate; /* NULL: plain store */
    int64_t ld_gate;
    const int32_t *mod_idx;
} mmk_qgemm;

int mmk_qgemm_usable(int dev);

int mmk_qgemm_run(int dev, mmk_stream s, const mmk_qgemm *a, mm_error *err);

/* First-use self-check on `dev`: the plain and the gated epilogue on a
 * 300 × 768 × 512 problem (a ragged row tile, several column tiles and K
 * slices) must equal the cuBLASLt path (mmk_qlinear_i8) bit for bit, every
 * output written. Runs once per device (later calls return the cached
 * verdict), synchronizes, prints one line on stderr the first time.
 * 1 = verified; mismatches (may be NULL) receives the count of differing
 * outputs (-1: the check could not run). */
int mmk_qgemm_verified(int dev, long *mismatches);

#ifdef __cplusplus
}
#endif

#endif
