/* Builds without CUDA: the Hopper attention never fits, and a call records
 * that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_speed.h"

bool mm_cuda_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    (void)ctx, (void)out, (void)q, (void)k, (void)v;
    return false;
}

int mm_cuda_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                          float scale, bool fp8)
{
    (void)out, (void)q, (void)k, (void)v, (void)scale, (void)fp8;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}

bool mm_cuda_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w)
{
    (void)ctx, (void)y, (void)q_x, (void)q_w;
    return false;
}

int mm_cuda_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx)
{
    (void)y, (void)q_x, (void)s_x, (void)q_w, (void)s_w, (void)gate, (void)idx;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}
#else
typedef int mm_cuda_speed_stub_unused; /* ISO C forbids an empty translation unit */
#endif
