/* Builds without CUDA: the sparse attention ops on a CUDA context record
 * that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_sparse.h"

/* A stub uses only the context of the parameters the op list gives it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define MM_CUDA_STUB(name, params)                                                                                     \
    int mm_cuda_##name params { return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)"); }
MM_BACKEND_SPARSE_OPS(MM_CUDA_STUB)
#pragma GCC diagnostic pop

const char *mm_cuda_sparse_kind(int dev, mm_sparse_mode mode)
{
    (void)dev, (void)mode;
    return "none (this mmh3 was built without CUDA)";
}
#else
typedef int mm_cuda_sparse_stub_unused; /* ISO C forbids an empty translation unit */
#endif
