#include "sampler/torch_rng.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"

/* at::mt19937 is the reference MT19937: init_genrand seeding, the standard
 * twist and tempering (identical stream to std::mt19937). */
enum { MT_N = 624, MT_M = 397 };

void mm_torch_gen_seed(mm_torch_gen *g, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (int j = 1; j < MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + (uint32_t)j;
    g->next = MT_N;
}

static void twist(mm_torch_gen *g)
{
    uint32_t *s = g->state;
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (s[i] & 0x80000000u) | (s[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t v = s[(i + MT_M) % MT_N] ^ (y >> 1);
        if (y & 1u)
            v ^= 0x9908b0dfu;
        s[i] = v;
    }
    g->next = 0;
}

uint32_t mm_torch_gen_u32(mm_torch_gen *g)
{
    if (g->next >= MT_N)
        twist(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t mm_torch_gen_u64(mm_torch_gen *g)
{
    /* CPUGeneratorImpl::random64: two draws, the first is the high word. */
    uint32_t hi = mm_torch_gen_u32(g);
    uint32_t lo = mm_torch_gen_u32(g);
    return ((uint64_t)hi << 32) | lo;
}

float mm_torch_uniform_f32(mm_torch_gen *g)
{
    return (float)(mm_torch_gen_u32(g) & 0xffffffu) * 0x1p-24f;
}

static double uniform_f64(mm_torch_gen *g)
{
    return (double)(mm_torch_gen_u64(g) & ((1ull << 53) - 1)) * 0x1p-53;
}

/* The float log, sin and cos of torch's AVX2 normal kernel (the build the
 * reference stacks run on x86): Cephes' single-precision polynomials as
 * vectorized by avx_mathfun, compiled with FMA contraction (GCC fuses each
 * multiply into the add that consumes it, the first multiply when two
 * feed one add). Reproduced operation by operation in scalar float so the
 * noise matches bit for bit; libm's values differ from these by a few ulp in
 * about 40% of the draws, and the uncontracted polynomials in about 1%. */

static float cephes_logf(float x)
{
    /* Only called with x in (0, 1]: no invalid or denormal inputs. */
    uint32_t bits = mm_f32_bits(x);
    float e = (float)((int32_t)(bits >> 23) - 0x7f) + 1.0f;
    float m = mm_f32_from_bits((bits & ~0x7f800000u) | mm_f32_bits(0.5f)); /* mantissa in [0.5, 1) */
    float tmp = m < 0.707106781186547524f ? m : 0.0f;
    if (m < 0.707106781186547524f)
        e = e - 1.0f;
    m = (m - 1.0f) + tmp;
    const float z = m * m;
    static const float p[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                               -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                               2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
    float y = p[0];
    for (int i = 1; i < 9; i++)
        y = fmaf(y, m, p[i]);
    y = y * m;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(-z, 0.5f, y);
    float r = m + y;
    return fmaf(e, 0.693359375f, r);
}

static void cephes_sincosf(float x, float *s, float *c)
{
    /* x = 2π·u2 >= 0 here. */
    const uint32_t sign_in = mm_f32_bits(x) & 0x80000000u;
    x = fabsf(x);
    int32_t j = (int32_t)(x * 1.27323954473516f);
    j = (j + 1) & ~1;
    const float y = (float)j;
    const uint32_t swap_sin = (uint32_t)(j & 4) << 29;
    const int poly_cos_first = (j & 2) == 0;
    const uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    /* Extended precision modular arithmetic: x − y·π/4 in three parts. */
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    const float z = x * x;
    float yc = 2.443315711809948E-005f;
    yc = fmaf(yc, z, -1.388731625493765E-003f);
    yc = fmaf(yc, z, 4.166664568298827E-002f);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    float ys = -1.9515295891E-4f;
    ys = fmaf(ys, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    const float sin_v = poly_cos_first ? ys : yc;
    const float cos_v = poly_cos_first ? yc : ys;
    *s = mm_f32_from_bits(mm_f32_bits(sin_v) ^ sign_in ^ swap_sin);
    *c = mm_f32_from_bits(mm_f32_bits(cos_v) ^ sign_cos);
}

/* Box–Muller on 16 uniforms in place (torch's AVX2 normal_fill_16):
 * theta = fp32(2π)·u2 in float. */
static void normal_fill_16(float *d)
{
    const float two_pi = (float)(2.0 * 3.14159265358979323846);
    for (int j = 0; j < 8; j++) {
        const float u1 = 1.0f - d[j];
        const float u2 = d[j + 8];
        const float radius = sqrtf(-2.0f * cephes_logf(u1));
        const float theta = two_pi * u2;
        float s, c;
        cephes_sincosf(theta, &s, &c);
        d[j] = radius * c;
        d[j + 8] = radius * s;
    }
}

/* at::normal_distribution<double> with its cached second value. */
static double normal_f64(mm_torch_gen *g)
{
    if (g->has_cached_normal) {
        g->has_cached_normal = 0;
        return g->cached_normal;
    }
    double u1 = uniform_f64(g);
    double u2 = uniform_f64(g);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = 2.0 * 3.14159265358979323846 * u1;
    g->cached_normal = r * sin(theta);
    g->has_cached_normal = 1;
    return r * cos(theta);
}

void mm_torch_randn_f32(mm_torch_gen *g, float *out, int64_t n)
{
    if (n < 16) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)normal_f64(g);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = mm_torch_uniform_f32(g);
    for (int64_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16(out + i);
    if (n % 16 != 0) {
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++)
            tail[i] = mm_torch_uniform_f32(g);
        normal_fill_16(tail);
    }
}

void mm_torch_linspace_f32(float start, float end, int n, int lanes, float *out)
{
    if (n <= 0)
        return;
    if (n == 1) {
        out[0] = start;
        return;
    }
    const float step = (end - start) / (float)(n - 1);
    const int64_t halfway = n / 2;
    int64_t i = 0;
    /* Vectorized part: pairs of vectors, each written as base + k·step. */
    if (lanes > 1)
        for (; i + 2 * lanes <= n; i += 2 * lanes)
            for (int v = 0; v < 2; v++) {
                int64_t idx = i + (int64_t)v * lanes;
                float base = idx < halfway ? start + step * (float)idx : end - step * (float)(n - idx - 1);
                for (int k = 0; k < lanes; k++)
                    out[idx + k] = k == 0 ? base : base + (float)k * step;
            }
    for (; i < n; i++)
        out[i] = i < halfway ? start + step * (float)i : end - step * (float)(n - i - 1);
}
