/* PyTorch's CPU generator, reproduced so that a seed draws the same noise
 * here as torch.Generator("cpu").manual_seed(seed) does in the Python stacks.
 *
 * The engine is MT19937 seeded with the low 32 bits of the seed. Float32
 * uniforms take 24 bits of one draw. torch.randn on a float32 tensor of
 * at least 16 elements fills all uniforms first, then turns each block of 16
 * into normals with Box–Muller (u1 = 1 − d[j], u2 = d[j+8] for j < 8); when
 * the size is not a multiple of 16 it draws 16 fresh uniforms for the last 16
 * slots and recomputes that (overlapping) block. Smaller tensors take the
 * scalar double path of at::normal_distribution, also reproduced.
 *
 * x86 builds of torch run the AVX2 kernel, whose log/sin/cos are Cephes
 * polynomials rather than libm; torch_rng.c reproduces that kernel exactly
 * (verified bit for bit against the DiT kit's draws).
 */
#ifndef MMH3_SAMPLER_TORCH_RNG_H
#define MMH3_SAMPLER_TORCH_RNG_H

#include <stdint.h>

typedef struct mm_torch_gen {
    uint32_t state[624];
    int next;
    /* at::normal_distribution<double> caches the second Box–Muller value. */
    int has_cached_normal;
    double cached_normal;
} mm_torch_gen;

void mm_torch_gen_seed(mm_torch_gen *g, uint64_t seed);
uint32_t mm_torch_gen_u32(mm_torch_gen *g);
uint64_t mm_torch_gen_u64(mm_torch_gen *g);
/* at::uniform_real_distribution<float>(0, 1): [0, 1) on a 2^-24 grid. */
float mm_torch_uniform_f32(mm_torch_gen *g);
/* torch.randn(n, dtype=float32, generator=g) for a contiguous tensor. */
void mm_torch_randn_f32(mm_torch_gen *g, float *out, int64_t n);

/* torch.linspace(start, end, n, dtype=float32) on the CPU. The kernel writes
 * vector chunks as base + k·step, which rounds differently from the scalar
 * two-sided formula, so the result depends on the SIMD width of the build
 * that ran it: lanes = 8 (AVX2, the reference stacks on x86), 16 (AVX-512) or 1. */
void mm_torch_linspace_f32(float start, float end, int n, int lanes, float *out);

#endif
