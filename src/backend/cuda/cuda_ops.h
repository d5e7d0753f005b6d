/* The CUDA twin of every op in backend/ops.h, one function per op with the
 * same arguments and semantics (read ops.h for those). Plain C: implemented
 * by the CUDA backend (src/backend/cuda/ over kernels/), and by
 * cuda_ops_stub.c in builds without CUDA, where each records "built without
 * CUDA" in the context.
 *
 * Contract with backend/ops.c, which calls these: arguments are validated
 * before the call (shapes consistent as ops.h states, dtypes among the
 * accepted ones, every tensor on the context's device, the context not
 * failed), so implementations only check what is specific to the device
 * (alignment a kernel needs, a combination it does not support yet). They
 * run on mm_ctx_stream(ctx), may return before the work is done, and report
 * failures with mm_ctx_fail(ctx, ...) (returning -1). A combination a kernel
 * does not support yet must fail that way, never compute something else.
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_OPS_H
#define MMH3_BACKEND_CUDA_CUDA_OPS_H

#include "backend/op_list.h"
#include "backend/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mm_kernel_policy;
/* Hands the kernels their part of the kernel policy (backend/kernel_policy.h:
 * mm_kernel_policy_install calls this). */
void mm_cuda_ops_set_policy(const struct mm_kernel_policy *p);

/* The compute stream new contexts on GPU `dev` use (a cudaStream_t). */
void *mm_cuda_ops_stream(int dev, mm_error *err);
/* Waits for the context's stream; reports asynchronous errors via the ctx. */
int mm_cuda_ops_sync(mm_ctx *ctx);

/* mm_cuda_NAME for every op of op_list.h. mm_cuda_copy takes both tensors
 * on the context's GPU (dtype conversion and any strides): cross-device
 * copies never reach the CUDA ops, ops.c stages them through
 * mm_device_memcpy. */
#define MM_CUDA_DECLARE(name, params) int mm_cuda_##name params;
MM_BACKEND_OPS(MM_CUDA_DECLARE)
#undef MM_CUDA_DECLARE

#ifdef __cplusplus
}
#endif

#endif
