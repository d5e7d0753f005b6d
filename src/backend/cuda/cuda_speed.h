/* The CUDA backend's Hopper kernels on tensors — the mm_tensor face of
 * kernels/mmk_fa3.h and kernels/mmk_qgemm.h — and the policy that picks
 * them: the implementations behind backend/fused.h (the contracts are
 * there; code outside the backend calls those). fits() is false off an
 * sm_90a-capable GPU; the calls record failures in the context and are
 * asynchronous on its stream. Builds without CUDA: fits() is false, the
 * calls fail (cuda_speed_stub.c).
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_SPEED_H
#define MMH3_BACKEND_CUDA_CUDA_SPEED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/fused.h"
#include "backend/ops.h"

bool mm_cuda_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
int mm_cuda_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                          float scale, mm_fa3_mode mode);

bool mm_cuda_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w);
int mm_cuda_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx);

/* backend/fused.h's mm_dit_kernel_paths_get on CUDA device `dev`. */
void mm_cuda_speed_paths_get(int dev, bool want_fast, mm_dit_kernel_paths *out);

/* The kernel mm_attention runs on device `dev` for bf16 head dim 128:
 * "sm90p-wgmma-pipelined (...)" or "sm80-mma" (kernels/attention.cu; runs
 * the Hopper kernel's self-check the first time). */
const char *mm_cuda_attention_path(int dev);

/* backend/fused.h's mm_dit_kernel_paths_describe on CUDA device `dev`. */
void mm_cuda_speed_describe(int dev, char *out, size_t n);

#endif
