/* The reference sigma grid (release / diffusers MiniMaxH3Scheduler).
 *
 * steps = N grid points, terminal 0 included: b = linspace(1, 0, N) in fp32,
 * sigma = s·b / (1 + (s−1)·b) in fp32, consecutive duplicates collapsed;
 * N grid points drive N−1 forwards with model time t = 1 − sigma. Video and
 * audio use the same base grid through their own shift (12 and 3).
 */
#ifndef MMH3_SAMPLER_SIGMAS_H
#define MMH3_SAMPLER_SIGMAS_H

#include "core/error.h"

/* Lanes of torch.linspace on the reference machine: the AVX2 build, the same
 * one whose randn the kit pins (see torch_rng.h). */
#define MM_SIGMA_LINSPACE_LANES 8

typedef struct mm_sigma_schedule {
    int points;        /* grid points after duplicate collapse (forwards = points − 1) */
    float *sigmas;     /* [points], ends at 0 */
    float *timesteps;  /* [points − 1], t = 1 − sigma */
} mm_sigma_schedule;

/* Builds the grid for `steps` points (>= 2) with the given shift (> 0). */
int mm_sigma_schedule_build(int steps, float shift, mm_sigma_schedule *out, mm_error *err);
void mm_sigma_schedule_free(mm_sigma_schedule *s);

#endif
