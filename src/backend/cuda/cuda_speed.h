/* The DiT's Hopper attention (issue 9) on tensors: the mm_tensor face of
 * kernels/mmk_fa3.h, beside backend/ops.h's mm_attention. Model code asks
 * mm_cuda_fa3_fits() and falls back to mm_attention where it does not fit
 * (another GPU, head dim ≠ 128, a build without sm_90a code, no CUDA).
 *
 * Exact (fp8 = false): bf16 products, what mm_attention computes in a
 * different summation order. Fast (fp8 = true): e4m3 products with
 * per-block q/k and per-channel v scales — the DiT's opt-in fast mode; its
 * error against exact mode is measured (bench/dit_quality.c), not bounded.
 *
 * q, k, v, out: bf16 [S, H, 128] views on the context's GPU (rows a multiple
 * of 8 elements apart, heads 128 apart, 16-byte aligned; e.g. the thirds of a
 * fused qkv buffer), one sequence, non-causal, scale 1/sqrt(128) when
 * scale = 0. Failures are recorded in the context (mm_ctx_fail); asynchronous
 * on its stream. Builds without CUDA: fits() is false and the call fails.
 */
/* The int8 ConvRot linear on Hopper with its epilogue fused (kernels/mmk_qgemm.h):
 * y = bf16(float(q_x·q_wᵀ)·(s_x·s_w)), or with gate: y = bf16(y + gate[idx]·bf16(...)),
 * bit for bit what mm_gemm_i8_scaled (then mm_gated_residual) computes. q_x I8 [R, K],
 * q_w I8 [N, K] (rows 16-byte aligned, K % 16 == 0), s_x F32 [R], s_w F32 [N] (or
 * [N, 1]) contiguous, y bf16 [R, N] (N % 8 == 0); gate F32 [T, N] (row stride even,
 * 8-byte aligned) with idx I32 [R], or NULL. fits() says whether this GPU, build and
 * these tensors run it; otherwise use the ops.h / cuda_fused.h calls. */

#ifndef MMH3_BACKEND_CUDA_CUDA_SPEED_H
#define MMH3_BACKEND_CUDA_CUDA_SPEED_H

#include <stdbool.h>

#include "backend/ops.h"

bool mm_cuda_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
int mm_cuda_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                          float scale, bool fp8);

bool mm_cuda_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w);
int mm_cuda_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx);

#endif
