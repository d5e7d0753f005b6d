#include "sampler/euler.h"

/* Every product and sum rounds to fp32 separately, as the reference's tensor
 * ops do (the build keeps -ffp-contract off under -std=c17, so no FMA). */

void mm_euler_step(float *x, const float *v, int64_t n, float t, float sigma, float sigma_next)
{
    const float sigma_t = 1.0f - t;
    const float r = sigma_next / sigma;
    const float keep = 1.0f - r;
    for (int64_t i = 0; i < n; i++) {
        float x0 = x[i] + sigma_t * v[i];
        x[i] = r * x[i] + keep * x0;
    }
}

void mm_scale_noise(float *out, const float *z, const float *noise, int64_t n, float t)
{
    const float u = 1.0f - t;
    for (int64_t i = 0; i < n; i++)
        out[i] = t * z[i] + u * noise[i];
}
