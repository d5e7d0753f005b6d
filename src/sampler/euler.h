/* The flow-matching Euler update of MiniMax-H3 (eta = 0), fp32.
 *
 * The model predicts a data-ward velocity, so x0 = x + (1 − t)·v with the
 * sigma recovered from the timestep the model was conditioned on; then
 * x ← r·x + (1 − r)·x0 with r = sigma_next / sigma from the grid. Applied to
 * the target rows of one stream only; condition rows are never written.
 */
#ifndef MMH3_SAMPLER_EULER_H
#define MMH3_SAMPLER_EULER_H

#include <stdint.h>

void mm_euler_step(float *x, const float *v, int64_t n, float t, float sigma, float sigma_next);

/* Noise augmentation of a condition latent to time t (0.999 for keyframes):
 * t·z + (1 − t)·n, fp32 per operation. */
void mm_scale_noise(float *out, const float *z, const float *noise, int64_t n, float t);

#endif
