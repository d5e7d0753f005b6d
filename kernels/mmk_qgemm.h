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
 *
 * Adapter branch (docs/LORA.md; lora_u set): before o's rounding
 *   o[r,n] += Σ_k u[r,k]·bl[n,k]      (bf16 products, f32 accumulation on the
 *                                      tile's accumulators: wgmma m64n256k16)
 * over the 64-wide chunks c of k that lora_mask[n / 256] marks (bit c): u
 * bf16 [M, lora_r] (u = s·x·Aᵀ, every adapter's pieces side by side), bl bf16
 * [N, lora_r] (each piece's B on its output rows and its u columns, zeros
 * elsewhere), lora_r a multiple of 64 up to 4096, row strides multiples of
 * 8, 16-byte aligned. The chunks stream through the same TMA ring as the K
 * slices (a u tile is an A stage's 16 KB, a bl tile a B stage's 32 KB).
 * Not bit for bit the cuBLAS composition (the f32 sums run in another
 * order): mmk_qgemm_lora_verified bounds it.
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
    const void *lora_u; /* adapter branch (above), or NULL */
    int64_t ld_u;
    const void *lora_b;
    int64_t ld_b;
    int lora_r;
    const uint64_t *lora_mask; /* device, [ceil(N / 256)] */
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
/* The same for the adapter branch, against the cuBLASLt path with the
 * branch's f32 sums as its addend (mmk_qlinear.add): plain and gated, a
 * tile without chunks, one with one, one with both of r = 128; every output
 * within one bf16 step of the reference and at most 1% one step apart.
 * 1 = verified (the DiT then fuses its adapters into this kernel). */
int mmk_qgemm_lora_verified(int dev, long *mismatches);

#ifdef __cplusplus
}
#endif

#endif
