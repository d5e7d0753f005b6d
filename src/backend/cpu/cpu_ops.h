/* The CPU backend: one function per op of backend/ops.h, same arguments and
 * semantics, called by ops.c after validation (so these trust their inputs:
 * consistent shapes, accepted dtypes, CPU memory). They are the reference
 * twins the CUDA kernels are tested against: plain loops in f32, blocked and
 * threaded where the op is a hot spot (GEMM, attention, int8 GEMM, conv). */
#ifndef MMH3_BACKEND_CPU_CPU_OPS_H
#define MMH3_BACKEND_CPU_CPU_OPS_H

#include "backend/op_list.h"
#include "backend/ops.h"

#define MM_CPU_DECLARE(name, params) int mm_cpu_##name params;
MM_BACKEND_OPS(MM_CPU_DECLARE)
#undef MM_CPU_DECLARE

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
