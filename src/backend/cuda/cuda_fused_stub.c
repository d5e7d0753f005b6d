/* Builds without CUDA link these: each fused DiT path records that this
 * build has no CUDA backend (model code only calls them on CUDA contexts). */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/fused.h"

#define NO_CUDA(ctx) mm_ctx_fail((ctx), "this mmh3 was built without CUDA (configure --with-cuda)")

int mm_fused_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *x,
                                      const mm_tensor *weight, float eps, const mm_tensor *scale,
                                      const mm_tensor *shift, const mm_tensor *idx)
{
    (void)q, (void)s, (void)h, (void)x, (void)weight, (void)eps, (void)scale, (void)shift, (void)idx;
    return NO_CUDA(ctx);
}

int mm_fused_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *gate_up)
{
    (void)q, (void)s, (void)h, (void)gate_up;
    return NO_CUDA(ctx);
}

int mm_fused_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                  const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                  const mm_tensor *idx)
{
    (void)x, (void)q_x, (void)s_x, (void)q_w, (void)s_w, (void)gate, (void)idx;
    return NO_CUDA(ctx);
}

int mm_fused_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                                const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                                const mm_tensor *add)
{
    (void)y, (void)q_x, (void)s_x, (void)q_w, (void)s_w, (void)gate, (void)idx, (void)add;
    return NO_CUDA(ctx);
}

bool mm_qgemm_lora_ready(mm_ctx *ctx)
{
    (void)ctx;
    return false;
}

int mm_qgemm_lora(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate32, const mm_tensor *idx, const mm_tensor *u,
                  const mm_tensor *b_all, const mm_tensor *mask)
{
    (void)y, (void)q_x, (void)s_x, (void)q_w, (void)s_w, (void)gate32, (void)idx, (void)u, (void)b_all, (void)mask;
    return NO_CUDA(ctx);
}

int mm_fused_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                             float eps, const mm_tensor *cos, const mm_tensor *sin, int rot)
{
    (void)q, (void)k, (void)wq, (void)wk, (void)eps, (void)cos, (void)sin, (void)rot;
    return NO_CUDA(ctx);
}
#else
typedef int mm_cuda_fused_stub_unused; /* ISO C forbids an empty translation unit */
#endif
