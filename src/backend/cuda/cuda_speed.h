/* The CUDA backend's Hopper kernels on tensors (cuda_speed.c, the mm_tensor
 * face of kernels/mmk_fa3.h and kernels/mmk_qgemm.h) implement
 * backend/fused.h's fa3, qgemm and kernel paths; this adds what only the
 * backend's own benchmarks ask. Builds without CUDA: cuda_speed_stub.c.
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_SPEED_H
#define MMH3_BACKEND_CUDA_CUDA_SPEED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/fused.h"
#include "backend/ops.h"

/* The kernel mm_attention runs on device `dev` for bf16 head dim 128:
 * "sm90p-wgmma-pipelined (...)" or "sm80-mma" (kernels/attention.cu; runs
 * the Hopper kernel's self-check the first time). */
const char *mm_cuda_attention_path(int dev);

#endif
