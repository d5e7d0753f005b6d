/* Builds without CUDA link these and the generated cuda_ops_stubs.c (every
 * op of cuda_ops.h, by ops_stubs.awk): each records that this build has no
 * CUDA backend, so a CUDA context fails loudly at its first op. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"

void mm_cuda_ops_set_policy(const struct mm_kernel_policy *p) { (void)p; } /* no kernels to tell */

void *mm_cuda_ops_stream(int dev, mm_error *err)
{
    (void)dev;
    mm_fail(err, "this mmh3 was built without CUDA (configure --with-cuda)");
    return NULL;
}

int mm_cuda_ops_sync(mm_ctx *ctx) { return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)"); }
#else
typedef int mm_cuda_ops_stub_unused; /* ISO C forbids an empty translation unit */
#endif
