#include "sampler/sigmas.h"

#include <stdlib.h>
#include <string.h>

#include "sampler/torch_rng.h"

int mm_sigma_schedule_build(int steps, float shift, mm_sigma_schedule *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (steps < 2)
        return mm_fail(err, "sigma grid: %d steps; at least 2 grid points are needed (steps − 1 forwards)", steps);
    if (!(shift > 0.0f))
        return mm_fail(err, "sigma grid: shift %g must be positive", (double)shift);
    float *base = malloc(sizeof(float) * (size_t)steps);
    out->sigmas = malloc(sizeof(float) * (size_t)steps);
    out->timesteps = malloc(sizeof(float) * (size_t)steps);
    if (!base || !out->sigmas || !out->timesteps) {
        free(base);
        mm_sigma_schedule_free(out);
        return mm_fail(err, "sigma grid: out of memory");
    }
    mm_torch_linspace_f32(1.0f, 0.0f, steps, MM_SIGMA_LINSPACE_LANES, base);
    int n = 0;
    for (int i = 0; i < steps; i++) {
        /* Each operation rounds to fp32, as the tensor ops do. */
        float num = shift * base[i];
        float den = 1.0f + (shift - 1.0f) * base[i];
        float s = num / den;
        if (n > 0 && out->sigmas[n - 1] == s)
            continue;
        out->sigmas[n++] = s;
    }
    free(base);
    out->points = n;
    for (int i = 0; i + 1 < n; i++)
        out->timesteps[i] = 1.0f - out->sigmas[i];
    return 0;
}

void mm_sigma_schedule_free(mm_sigma_schedule *s)
{
    if (!s)
        return;
    free(s->sigmas);
    free(s->timesteps);
    memset(s, 0, sizeof *s);
}
