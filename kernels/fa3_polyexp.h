/* 2^x on the FMA pipes, for the fa3 attention's softmax (issue 9;
 * MMH3_FA3_POLYEXP, kernels/attn_fa3.cu). Plain C and CUDA: the kernel and
 * its CPU test (tests/unit/test_speed_polyexp.c) compile this same code.
 *
 * Why: at head dim 128 every score costs 512 FLOPs on the tensor cores but
 * one ex2 on the MUFU unit (16 per clock per SM); near 1 PFLOP/s the
 * exponentials alone approach the MUFU's rate. Computing a fixed share of
 * them with FMAs (FlashAttention-4's trick) moves that work onto pipes that
 * are otherwise idle during the softmax.
 *
 * How (Cody-Waite): 2^x = 2^j · 2^g with j = round-to-nearest(x), found by
 * adding the 1.5·2²³ magic constant (float adds only: no F2I, whose rate is
 * the MUFU's), g = x − j ∈ [-0.5, 0.5] exactly; 2^g by a degree-5
 * polynomial (minimax relative error 7.5e-8 = 2^-23.7 in exact arithmetic,
 * Remez exchange on [-0.5, 0.5]; the constant term set to exactly 1, so
 * 2^0 = 1 like ex2, which adds ≤ 7.2e-8); j is added to the result's
 * exponent field with an integer add.
 *
 * Accuracy (measured in fp32 by the CPU test over x ∈ [−150, 9] and bounded
 * there at 2^-22 ≈ 2 ulp, the accuracy class of ex2.approx.f32): relative
 * error below 2^-22 wherever 2^x is a normal float (−126 < x < 128); like
 * ex2.approx.ftz, results below 2^-126 are flushed to +0, as are x = −inf
 * and NaN (a masked key's −inf must give 0).
 */
#ifndef MMH3_KERNELS_FA3_POLYEXP_H
#define MMH3_KERNELS_FA3_POLYEXP_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MMK_POLYEXP_FN __host__ __device__ __forceinline__
#else
#include <string.h>
#define MMK_POLYEXP_FN static inline
#endif

/* q(g) = 1 + C1 g + ... + C5 g⁵ ≈ 2^g on [-0.5, 0.5] (hex floats: exactly
 * the fp32 values both sides use) */
#define MMK_POLYEXP_C1 0x1.62e428p-1f
#define MMK_POLYEXP_C2 0x1.ebf918p-3f
#define MMK_POLYEXP_C3 0x1.c6b6e4p-5f
#define MMK_POLYEXP_C4 0x1.3d0c52p-7f
#define MMK_POLYEXP_C5 0x1.5c08e6p-10f

MMK_POLYEXP_FN uint32_t mmk_polyexp_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

MMK_POLYEXP_FN float mmk_polyexp_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

MMK_POLYEXP_FN float mmk_exp2_poly(float x)
{
    const float magic = 12582912.f; /* 1.5·2²³: x + magic holds round(x) in its low mantissa bits */
    x = fmaxf(x, -128.f);           /* keeps j·2²³ from wrapping; −inf, NaN → −128 → flushed below */
    const float t = x + magic;
    const float g = x - (t - magic); /* x − j, exact */
    float q = fmaf(MMK_POLYEXP_C5, g, MMK_POLYEXP_C4);
    q = fmaf(q, g, MMK_POLYEXP_C3);
    q = fmaf(q, g, MMK_POLYEXP_C2);
    q = fmaf(q, g, MMK_POLYEXP_C1);
    q = fmaf(q, g, 1.f);
    /* j = bits(t) − bits(magic), and bits(magic)·2²³ vanishes mod 2³², so j·2²³ = bits(t) << 23 */
    const int32_t r = (int32_t)(mmk_polyexp_bits(q) + (mmk_polyexp_bits(t) << 23));
    return mmk_polyexp_float(r >= 0x00800000 ? (uint32_t)r : 0u); /* below 2^-126 (or wrapped below 0): +0 */
}

#endif
