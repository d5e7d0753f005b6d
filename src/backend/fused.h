/* The DiT block's fast ops, beyond backend/ops.h: the fused passes that
 * spare it the bf16 intermediates a composition of ops.h ops writes and
 * reads again, the Hopper attention (fa3) and int8 GEMM (qgemm), and which
 * of those kernels run on a device. Model code calls these instead of
 * reaching into the CUDA backend (src/backend/cuda/), which implements
 * them (cuda_ops.c: the fused passes; cuda_speed.c: fa3, qgemm, the paths).
 *
 * Only the CUDA backend has them. On another context the fused passes and
 * the kernels record a failure in the context (model code calls them only
 * where mm_dit's CUDA path applies), fits() and ready() say false, and the
 * paths name the portable ops. Builds without CUDA answer the same, with
 * "built without CUDA".
 *
 * Each fused pass computes exactly what the named composition of ops.h ops
 * computes (the same rounding points: the intermediate the composition
 * would write is rounded to its dtype here too), in one pass over the data.
 * Conventions of ops.h: failures recorded with mm_ctx_fail, asynchronous on
 * the context's stream.
 *
 * Shapes and dtypes (checked, with messages): x, y bf16 [R, C] with unit
 * column stride and 16-byte aligned rows; tables [T, C] (any float, row
 * stride free); idx I32 [R]; q I8 [R, K]; s F32 [R].
 */
#ifndef MMH3_BACKEND_FUSED_H
#define MMH3_BACKEND_FUSED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ fused passes */

/* = mm_rmsnorm_modulate(h, x, weight, eps, scale, shift, idx) into a bf16 h,
 *   then mm_convrot_quantize(q, s, h, 256). x bf16 [R, K], K % 256 == 0.
 *   h: NULL (h is never written), or a bf16 [R, K] tensor that receives it
 *   (an adapter branch reads the linear's input: docs/LORA.md). */
int mm_fused_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *x,
                                      const mm_tensor *weight, float eps, const mm_tensor *scale,
                                      const mm_tensor *shift, const mm_tensor *idx);

/* = mm_glu(h, gate_up[:, :K], gate_up[:, K:], MM_ACT_SILU) into a bf16 h, then
 *   mm_convrot_quantize(q, s, h, 256). gate_up bf16 [R, 2K] (fc1's [gate | up]).
 *   h: NULL, or bf16 [R, K] receiving h, as above. */
int mm_fused_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *gate_up);

/* = mm_gemm_i8_scaled(y, q_x, s_x, q_w, s_w, NULL) into a bf16 y, then
 *   mm_gated_residual(x, y, gate, idx). x bf16 [R, N] is updated in place. */
int mm_fused_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                  const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                  const mm_tensor *idx);

/* The int8 linear with an addend (an adapter branch's f32 s·B·u, LoRA):
 *   = mm_gemm_i8_scaled(y32, q_x, s_x, q_w, s_w, NULL) into an f32 y32,
 *     mm_add(y32, y32, add), then (gate NULL) y = bf16(y32), or (gate set)
 *     mm_gated_residual(y, bf16(y32), gate, idx) with y the residual stream.
 *   add f32 [R, N] with unit column stride, or NULL (nothing added). */
int mm_fused_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                                const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                const mm_tensor *idx, const mm_tensor *add);

/* = mm_rmsnorm(q, q, wq, eps); mm_rmsnorm(k, k, wk, eps); mm_rope(q, q, cos,
 *   sin, rot); mm_rope(k, k, cos, sin, rot), in place, one pass. q, k bf16
 *   [S, Hq|Hk, D] views (D ≤ 128, stride 1; heads D apart, e.g. the thirds of
 *   a fused qkv buffer), wq/wk [D] (NULL: no norm), cos/sin bf16 [S, rot]
 *   (NULL: no RoPE). */
int mm_fused_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                             float eps, const mm_tensor *cos, const mm_tensor *sin, int rot);

/* ------------------------------------------------------- the Hopper kernels */

/* Attention (fa3): q, out bf16 [S, H, 128] and k, v [S_kv, H_kv, 128] views
 * on the context's GPU (rows a multiple of 8 elements apart, heads 128
 * apart, 16-byte aligned; e.g. the thirds of a fused qkv buffer), one
 * sequence, non-causal, GQA allowed, S_kv = S or not (the reference KV
 * cache: fewer queries than keys; the paths below say whether that case
 * passed its self-check), scale 1/sqrt(128) when scale = 0. Modes:
 *   MM_FA3_EXACT   bf16 products: what mm_attention computes, in another
 *                  summation order;
 *   MM_FA3_FAST    int8 q·k (per-row q, smoothed per-tile k) and e4m3 p·v
 *                  (smoothed per-channel v): the DiT's fast mode, whose
 *                  error follows the budget of
 *                  tests/unit/test_fa3_fast_model.c. */
typedef enum mm_fa3_mode { MM_FA3_EXACT = 0, MM_FA3_FAST = 1 } mm_fa3_mode;

bool mm_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
int mm_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     float scale, mm_fa3_mode mode);

/* int8 GEMM (qgemm): the ConvRot linear with its epilogue fused,
 * y = bf16(float(q_x·q_wᵀ)·(s_x·s_w)), or with gate: y = bf16(y + gate[idx]·
 * bf16(...)), bit for bit what mm_gemm_i8_scaled (then mm_gated_residual)
 * computes. q_x I8 [R, K], q_w I8 [N, K] (rows 16-byte aligned, K % 16 == 0),
 * s_x F32 [R], s_w F32 [N] (or [N, 1]) contiguous, y bf16 [R, N] (N % 8 ==
 * 0); gate F32 [T, N] (row stride even, 8-byte aligned) with idx I32 [R], or
 * NULL. fits(): this GPU, build and these tensors run it. */
bool mm_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w);
int mm_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
             const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx);

/* The int8 linear with an adapter branch fused into the Hopper GEMM: before
 * the one rounding of the store (gate NULL) or of the gated residual
 * (gate32: the f32 table, idx its row indices), o[r, n] += Σ_k u[r, k]·
 * b_all[n, k] over the 64-wide chunks of k that mask[n / 256] marks. u bf16
 * [R, Rk], b_all bf16 [N, Rk] (Rk a multiple of 64 up to 4096), mask I64
 * [ceil(N / 256)], all on the device. Within a bf16 step of
 * mm_fused_gemm_i8_scaled_add with the same sums as its addend. ready():
 * this context's GPU runs the sm90 GEMM and the branch passed its first-use
 * self-check. */
bool mm_qgemm_lora_ready(mm_ctx *ctx);
int mm_qgemm_lora(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate32, const mm_tensor *idx, const mm_tensor *u,
                  const mm_tensor *b_all, const mm_tensor *mask);

/* ------------------------------------------------------ which kernels run */

/* Which of these kernels the DiT runs on device `dev`, by the kernel policy
 * (backend/kernel_policy.h):
 *   attention (exact mode)  fa3 bf16 where the GPU has it and its first-use
 *                           self-check against the portable kernel passes;
 *                           mm_attention otherwise or with the policy's
 *                           portable DiT attention (dit_fa3 off).
 *   fast mode               fa3 MM_FA3_FAST after its own self-check; what
 *                           exact mode runs where there is no such kernel,
 *                           with dit_fa3 off, or with MMH3_DIT_FAST=off.
 *   int8 linears            the sm90 GEMM with the fused epilogue after its
 *                           self-check (bit for bit the cuBLASLt path);
 *                           cuBLASLt + the epilogue kernel otherwise or with
 *                           dit_qgemm off.
 * Self-checks run at the first call that needs them (fast mode's only when
 * want_fast), once per device and process, each announced by one stderr
 * line; a failed one falls back. The texts say what runs and why. */
typedef struct mm_dit_kernel_paths {
    bool fa3;              /* exact-mode attention through fa3 bf16 */
    bool fast_fa3;         /* fast mode through fa3 MM_FA3_FAST (false: as exact mode) */
    bool fa3_cross;        /* ... and those with fewer (more) queries than keys too */
    bool fast_fa3_cross;
    bool qgemm;            /* int8 linears through the sm90 GEMM */
    char attention[200], fast[200], gemm[200];
} mm_dit_kernel_paths;
void mm_dit_kernel_paths_get(mm_device dev, bool want_fast, mm_dit_kernel_paths *out);

/* For `mmh3 check`: one line naming every attention and GEMM path device
 * `dev` uses (mm_attention's kernel, the DiT's exact and fast attention,
 * its int8 linears), running the self-checks that have not run yet. */
void mm_dit_kernel_paths_describe(mm_device dev, char *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
