/* Every op of backend/ops.h that a backend implements, with its parameters
 * (the context first): the one list the CPU (cpu_ops.h) and CUDA
 * (cuda_ops.h) twins are declared from, so the two cannot drift apart, and
 * the no-CUDA build's stubs are generated from. X(name, parameters) names
 * the op without its mm_ prefix; ops.h documents each, sparse_attn.h those
 * of the sparse list. */
#ifndef MMH3_BACKEND_OP_LIST_H
#define MMH3_BACKEND_OP_LIST_H

#define MM_BACKEND_OPS(X)                                                                                              \
    X(copy, (mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src))                                                       \
    X(fill, (mm_ctx *ctx, mm_tensor *dst, double value))                                                               \
    X(add, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b))                                      \
    X(mul, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b))                                      \
    X(axpby, (mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b))           \
    X(clamp, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi))                                    \
    X(activation, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act))                                       \
    X(glu, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act))                      \
    X(snake, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta))         \
    X(rmsnorm, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps))                  \
    X(layernorm, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,     \
          float eps))                                                                                                  \
    X(groupnorm, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,     \
          int groups, float eps, bool per_frame))                                                                      \
    X(softmax, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x))                                                      \
    X(reduce_rows, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op))                                    \
    X(modulate, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,      \
          const mm_tensor *idx))                                                                                       \
    X(rmsnorm_modulate, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,          \
          const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx))                                       \
    X(gated_residual, (mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx))    \
    X(rope, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin,              \
          int rot_dim))                                                                                                \
    X(attention, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,             \
          const mm_attn_params *params))                                                                               \
    X(gemm, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias, float alpha,  \
          float beta))                                                                                                 \
    X(hadamard_rotate, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group))                                   \
    X(convrot_quantize, (mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group))                      \
    X(gemm_i8_scaled, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,  \
          const mm_tensor *s_w, const mm_tensor *bias))                                                                \
    X(nvfp4_dequantize, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales, float scale2)) \
    X(embedding_i8, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table,                        \
          const mm_tensor *scale))                                                                                     \
    X(gather_rows, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx))                          \
    X(scatter_rows, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx))                         \
    X(scatter_add_rows, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx))                     \
    X(conv1d, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,             \
          const mm_conv_params *p))                                                                                    \
    X(conv_transpose1d, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,   \
          const mm_conv_params *p))                                                                                    \
    X(conv3d, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,             \
          const mm_conv_params *p))                                                                                    \
    X(pad, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value))     \
    X(interpolate, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode, bool align_corners))

/* The block-sparse attention ops of backend/sparse_attn.h (cpu_sparse.h,
 * cuda_sparse.h). */
#define MM_BACKEND_SPARSE_OPS(X)                                                                                       \
    X(sparse_route_blocks, (mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,               \
          const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally))                                      \
    X(sparse_attention, (mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,      \
          const mm_sparse_route *route, const mm_sparse_attn_params *p))

#endif
