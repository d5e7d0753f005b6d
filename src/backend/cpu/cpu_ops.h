/* The CPU backend: one function per op of backend/ops.h, same arguments and
 * semantics, called by ops.c after validation (so these trust their inputs:
 * consistent shapes, accepted dtypes, CPU memory). They are the reference
 * twins the CUDA kernels are tested against: plain loops in f32, blocked and
 * threaded where the op is a hot spot (GEMM, attention, int8 GEMM, conv). */
#ifndef MMH3_BACKEND_CPU_CPU_OPS_H
#define MMH3_BACKEND_CPU_CPU_OPS_H

#include "backend/ops.h"

int mm_cpu_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src);
int mm_cpu_fill(mm_ctx *ctx, mm_tensor *dst, double value);
int mm_cpu_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b);
int mm_cpu_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b);
int mm_cpu_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b);
int mm_cpu_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi);
int mm_cpu_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act);
int mm_cpu_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act);
int mm_cpu_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta);
int mm_cpu_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps);
int mm_cpu_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight,
                     const mm_tensor *bias, float eps);
int mm_cpu_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight,
                     const mm_tensor *bias, int groups, float eps, bool per_frame);
int mm_cpu_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x);
int mm_cpu_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op);
int mm_cpu_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,
                    const mm_tensor *idx);
int mm_cpu_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,
                            const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx);
int mm_cpu_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx);
int mm_cpu_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin,
                int rot_dim);
int mm_cpu_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     const mm_attn_params *params);
int mm_cpu_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias,
                float alpha, float beta);
int mm_cpu_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group);
int mm_cpu_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group);
int mm_cpu_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x,
                          const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *bias);
int mm_cpu_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales,
                            float scale2);
int mm_cpu_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table,
                        const mm_tensor *scale);
int mm_cpu_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cpu_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cpu_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
int mm_cpu_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                  const mm_conv_params *p);
int mm_cpu_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w,
                            const mm_tensor *bias, const mm_conv_params *p);
int mm_cpu_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                  const mm_conv_params *p);
int mm_cpu_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode,
               float value);
int mm_cpu_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode,
                       bool align_corners);

/* The f32 GEMM engine under mm_cpu_gemm, conv and the quantized linears:
 * C[M, N] = alpha * A[M, K] . B[K, N] (+ bias[N], or bias[M] when bias_rows)
 * (+ beta * C), where each
 * matrix is read through (pointer, dtype, row stride, column stride) in
 * elements, so transposed and strided operands cost nothing extra (they are
 * packed into f32 panels). C is written with one rounding to its dtype. */
typedef struct mm_cpu_mat {
    const void *p;
    mm_dtype dtype;
    int64_t rs, cs;
} mm_cpu_mat;

void mm_cpu_gemm_f32(mm_ctx *ctx, int64_t M, int64_t N, int64_t K, float alpha, mm_cpu_mat A, mm_cpu_mat B,
                     const void *bias, mm_dtype bias_dtype, bool bias_rows, float beta, void *C, mm_dtype c_dtype,
                     int64_t ldc);

#endif
