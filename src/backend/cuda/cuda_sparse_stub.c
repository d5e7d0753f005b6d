/* Builds without CUDA: the sparse attention ops on a CUDA context record
 * that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_sparse.h"

int mm_cuda_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,
                         const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally)
{
    (void)route, (void)q, (void)k, (void)v, (void)p, (void)tally;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}

int mm_cuda_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                             const mm_sparse_route *route, const mm_sparse_attn_params *p)
{
    (void)out, (void)q, (void)k, (void)v, (void)route, (void)p;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}

const char *mm_cuda_sparse_kind(int dev, mm_sparse_mode mode)
{
    (void)dev, (void)mode;
    return "none (this mmh3 was built without CUDA)";
}
#else
typedef int mm_cuda_sparse_stub_unused; /* ISO C forbids an empty translation unit */
#endif
