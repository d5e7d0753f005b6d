/* Builds without CUDA link these, a stub of every op of op_list.h among them:
 * each records that this build has no CUDA backend, so a CUDA context fails
 * loudly at its first op. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"

#define NO_CUDA "this mmh3 was built without CUDA (configure --with-cuda)"

void mm_cuda_ops_set_policy(const struct mm_kernel_policy *p) { (void)p; } /* no kernels to tell */

void *mm_cuda_ops_stream(int dev, mm_error *err)
{
    (void)dev;
    mm_fail(err, NO_CUDA);
    return NULL;
}

int mm_cuda_ops_sync(mm_ctx *ctx) { return mm_ctx_fail(ctx, NO_CUDA); }

/* A stub uses only the context of the parameters the op list gives it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define MM_CUDA_STUB(name, params)                                                                                     \
    int mm_cuda_##name params { return mm_ctx_fail(ctx, NO_CUDA); }
MM_BACKEND_OPS(MM_CUDA_STUB)
#pragma GCC diagnostic pop
#else
typedef int mm_cuda_ops_stub_unused; /* ISO C forbids an empty translation unit */
#endif
