/* Band-limited resampling with torchaudio's windowed sinc.
 *
 * Hand-written rather than libswresample's resampler because the reference
 * (diffusers / ai-toolkit) resamples reference soundtracks with
 * torchaudio.transforms.Resample(orig, new) at its defaults — Hann-windowed
 * sinc, 6 zero crossings, rolloff 0.99 — and the audio VAE's latents follow
 * those samples; swresample's Kaiser filter differs near Nyquist. The kernel
 * is built in double and rounded to float (as torchaudio caches it), the sum
 * is accumulated in double.
 */
#ifndef MMH3_MEDIA_RESAMPLE_H
#define MMH3_MEDIA_RESAMPLE_H

#include <stdint.h>

#include "core/error.h"

/* Samples the resampled signal has: ceil(n * new_rate / orig_rate). */
int64_t mm_resample_length(int64_t n, int orig_rate, int new_rate);

/* Resamples one channel of n samples from orig_rate to new_rate into y,
 * which holds mm_resample_length() samples. Equal rates copy. */
int mm_resample_sinc(const float *x, int64_t n, int orig_rate, int new_rate, float *y, mm_error *err);

#endif
