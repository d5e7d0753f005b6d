/* The CUDA implementations of backend/fused.h's fused passes (the
 * contracts are there; code outside the backend calls those): each
 * mm_cuda_X is fused.h's mm_fused_X / mm_qgemm_lora* on a CUDA context.
 * Implemented in cuda_ops.c; in a build without CUDA (cuda_fused_stub.c)
 * each records "built without CUDA" in the context.
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_FUSED_H
#define MMH3_BACKEND_CUDA_CUDA_FUSED_H

#include "backend/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int mm_cuda_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *x,
                                     const mm_tensor *weight, float eps, const mm_tensor *scale,
                                     const mm_tensor *shift, const mm_tensor *idx);

int mm_cuda_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *gate_up);

int mm_cuda_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                 const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                 const mm_tensor *idx);

int mm_cuda_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                               const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                               const mm_tensor *add);

bool mm_cuda_qgemm_lora_ready(mm_ctx *ctx);
int mm_cuda_qgemm_lora(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                       const mm_tensor *s_w, const mm_tensor *gate32, const mm_tensor *idx, const mm_tensor *u,
                       const mm_tensor *b_all, const mm_tensor *mask);

int mm_cuda_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                            float eps, const mm_tensor *cos, const mm_tensor *sin, int rot);

#ifdef __cplusplus
}
#endif

#endif
