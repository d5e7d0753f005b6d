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

/* mm_copy with both tensors on the context's GPU (dtype conversion and any
 * strides). Cross-device copies never reach the CUDA ops: ops.c stages them
 * through mm_device_memcpy. */
int mm_cuda_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src);
int mm_cuda_fill(mm_ctx *ctx, mm_tensor *dst, double value);
int mm_cuda_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b);
int mm_cuda_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b);
int mm_cuda_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b);
int mm_cuda_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi);
int mm_cuda_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act);
int mm_cuda_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act);
int mm_cuda_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta);
int mm_cuda_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps);
int mm_cuda_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias, float eps);
int mm_cuda_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias, int groups, float eps, bool per_frame);
int mm_cuda_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x);
int mm_cuda_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op);
int mm_cuda_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx);
int mm_cuda_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps, const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx);
int mm_cuda_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx);
int mm_cuda_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin, int rot_dim);
int mm_cuda_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v, const mm_attn_params *params);
int mm_cuda_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias, float alpha, float beta);
int mm_cuda_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group);
int mm_cuda_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group);
int mm_cuda_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *bias);
int mm_cuda_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales, float scale2);
int mm_cuda_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table, const mm_tensor *scale);
int mm_cuda_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cuda_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cuda_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cuda_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p);
int mm_cuda_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p);
int mm_cuda_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias, const mm_conv_params *p);
int mm_cuda_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value);
int mm_cuda_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode, bool align_corners);

#ifdef __cplusplus
}
#endif

#endif
