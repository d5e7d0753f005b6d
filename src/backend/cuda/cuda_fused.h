/* Fused CUDA paths for the DiT block, beyond backend/ops.h. Each computes
 * exactly what the named composition of ops.h ops computes (the same
 * rounding points: the intermediate tensor the composition would write is
 * rounded to its dtype here too), in one pass over the data; model code
 * calls them when its context is a CUDA one and the composition otherwise.
 * Plain C; in a build without CUDA (cuda_fused_stub.c) each records "built
 * without CUDA" in the context. They follow the conventions of cuda_ops.h:
 * failures recorded with mm_ctx_fail, asynchronous on the context's stream.
 *
 * Shapes and dtypes (checked here, with messages): x, y bf16 [R, C] with
 * unit column stride and 16-byte aligned rows; tables [T, C] (any float, row
 * stride free); idx I32 [R]; q I8 [R, K]; s F32 [R].
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_FUSED_H
#define MMH3_BACKEND_CUDA_CUDA_FUSED_H

#include "backend/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* = mm_rmsnorm_modulate(h, x, weight, eps, scale, shift, idx) into a bf16 h,
 *   then mm_convrot_quantize(q, s, h, 256). x bf16 [R, K], K % 256 == 0. */
int mm_cuda_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x,
                                     const mm_tensor *weight, float eps, const mm_tensor *scale,
                                     const mm_tensor *shift, const mm_tensor *idx);

/* = mm_glu(h, gate_up[:, :K], gate_up[:, K:], MM_ACT_SILU) into a bf16 h, then
 *   mm_convrot_quantize(q, s, h, 256). gate_up bf16 [R, 2K] (fc1's [gate | up]). */
int mm_cuda_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *gate_up);

/* = mm_gemm_i8_scaled(y, q_x, s_x, q_w, s_w, NULL) into a bf16 y, then
 *   mm_gated_residual(x, y, gate, idx). x bf16 [R, N] is updated in place. */
int mm_cuda_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                 const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                 const mm_tensor *idx);

/* The int8 linear with an addend (an adapter branch's f32 s·B·u, LoRA):
 *   = mm_gemm_i8_scaled(y32, q_x, s_x, q_w, s_w, NULL) into an f32 y32,
 *     mm_add(y32, y32, add), then (gate NULL) y = bf16(y32), or (gate set)
 *     mm_gated_residual(y, bf16(y32), gate, idx) with y the residual stream.
 *   add f32 [R, N] with unit column stride, or NULL (nothing added). */
int mm_cuda_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                               const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                               const mm_tensor *add);

/* = mm_rmsnorm(q, q, wq, eps); mm_rmsnorm(k, k, wk, eps); mm_rope(q, q, cos,
 *   sin, rot); mm_rope(k, k, cos, sin, rot), in place, one pass. q, k bf16
 *   [S, Hq|Hk, D] views (D ≤ 128, stride 1; heads D apart, e.g. the thirds of
 *   a fused qkv buffer), wq/wk [D] (NULL: no norm), cos/sin bf16 [S, rot]
 *   (NULL: no RoPE). */
int mm_cuda_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                            float eps, const mm_tensor *cos, const mm_tensor *sin, int rot);

#ifdef __cplusplus
}
#endif

#endif
