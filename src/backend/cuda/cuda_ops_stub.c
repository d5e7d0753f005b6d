/* Builds without CUDA link these: every CUDA op records that this build has
 * no CUDA backend, so a CUDA context fails loudly at its first op. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"

#define NO_CUDA(ctx) mm_ctx_fail((ctx), "this mmh3 was built without CUDA (configure --with-cuda)")

void mm_cuda_ops_set_policy(const struct mm_kernel_policy *p) { (void)p; } /* no kernels to tell */

void *mm_cuda_ops_stream(int dev, mm_error *err)
{
    (void)dev;
    mm_fail(err, "this mmh3 was built without CUDA (configure --with-cuda)");
    return NULL;
}
int mm_cuda_ops_sync(mm_ctx *ctx) { return NO_CUDA(ctx); }
int mm_cuda_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src)
{
    (void)dst;
    (void)src;
    return NO_CUDA(ctx);
}
int mm_cuda_fill(mm_ctx *ctx, mm_tensor *dst, double value)
{
    (void)dst;
    (void)value;
    return NO_CUDA(ctx);
}
int mm_cuda_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    (void)out;
    (void)a;
    (void)b;
    return NO_CUDA(ctx);
}
int mm_cuda_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b)
{
    (void)out;
    (void)a;
    (void)b;
    return NO_CUDA(ctx);
}
int mm_cuda_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b)
{
    (void)out;
    (void)alpha;
    (void)a;
    (void)beta;
    (void)b;
    return NO_CUDA(ctx);
}
int mm_cuda_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi)
{
    (void)out;
    (void)x;
    (void)lo;
    (void)hi;
    return NO_CUDA(ctx);
}
int mm_cuda_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act)
{
    (void)out;
    (void)x;
    (void)act;
    return NO_CUDA(ctx);
}
int mm_cuda_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act)
{
    (void)out;
    (void)gate;
    (void)up;
    (void)act;
    return NO_CUDA(ctx);
}
int mm_cuda_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta)
{
    (void)out;
    (void)x;
    (void)alpha;
    (void)beta;
    return NO_CUDA(ctx);
}
int mm_cuda_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps)
{
    (void)out;
    (void)x;
    (void)weight;
    (void)eps;
    return NO_CUDA(ctx);
}
int mm_cuda_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias, float eps)
{
    (void)out;
    (void)x;
    (void)weight;
    (void)bias;
    (void)eps;
    return NO_CUDA(ctx);
}
int mm_cuda_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias, int groups, float eps, bool per_frame)
{
    (void)out;
    (void)x;
    (void)weight;
    (void)bias;
    (void)groups;
    (void)eps;
    (void)per_frame;
    return NO_CUDA(ctx);
}
int mm_cuda_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x)
{
    (void)out;
    (void)x;
    return NO_CUDA(ctx);
}
int mm_cuda_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op)
{
    (void)out;
    (void)x;
    (void)op;
    return NO_CUDA(ctx);
}
int mm_cuda_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx)
{
    (void)out;
    (void)x;
    (void)scale;
    (void)shift;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps, const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx)
{
    (void)out;
    (void)x;
    (void)weight;
    (void)eps;
    (void)scale;
    (void)shift;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx)
{
    (void)x;
    (void)y;
    (void)gate;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin, int rot_dim)
{
    (void)out;
    (void)x;
    (void)cos;
    (void)sin;
    (void)rot_dim;
    return NO_CUDA(ctx);
}
int mm_cuda_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v, const mm_attn_params *params)
{
    (void)out;
    (void)q;
    (void)k;
    (void)v;
    (void)params;
    return NO_CUDA(ctx);
}
int mm_cuda_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias, float alpha, float beta)
{
    (void)out;
    (void)a;
    (void)b;
    (void)bias;
    (void)alpha;
    (void)beta;
    return NO_CUDA(ctx);
}
int mm_cuda_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group)
{
    (void)out;
    (void)x;
    (void)group;
    return NO_CUDA(ctx);
}
int mm_cuda_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group)
{
    (void)q;
    (void)s;
    (void)x;
    (void)group;
    return NO_CUDA(ctx);
}
int mm_cuda_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *bias)
{
    (void)out;
    (void)q_x;
    (void)s_x;
    (void)q_w;
    (void)s_w;
    (void)bias;
    return NO_CUDA(ctx);
}
int mm_cuda_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales, float scale2)
{
    (void)out;
    (void)packed;
    (void)scales;
    (void)scale2;
    return NO_CUDA(ctx);
}
int mm_cuda_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table, const mm_tensor *scale)
{
    (void)out;
    (void)ids;
    (void)table;
    (void)scale;
    return NO_CUDA(ctx);
}
int mm_cuda_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    (void)out;
    (void)src;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    (void)out;
    (void)src;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    (void)out;
    (void)src;
    (void)idx;
    return NO_CUDA(ctx);
}
int mm_cuda_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p)
{
    (void)out;
    (void)x;
    (void)w;
    (void)bias;
    (void)p;
    return NO_CUDA(ctx);
}
int mm_cuda_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p)
{
    (void)out;
    (void)x;
    (void)w;
    (void)bias;
    (void)p;
    return NO_CUDA(ctx);
}
int mm_cuda_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p)
{
    (void)out;
    (void)x;
    (void)w;
    (void)bias;
    (void)p;
    return NO_CUDA(ctx);
}
int mm_cuda_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value)
{
    (void)out;
    (void)x;
    (void)pads;
    (void)mode;
    (void)value;
    return NO_CUDA(ctx);
}
int mm_cuda_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode, bool align_corners)
{
    (void)out;
    (void)x;
    (void)spatial;
    (void)mode;
    (void)align_corners;
    return NO_CUDA(ctx);
}
#else
typedef int mm_cuda_ops_stub_unused; /* ISO C forbids an empty translation unit */
#endif
