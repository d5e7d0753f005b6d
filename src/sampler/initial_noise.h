/* The reference's initial latents of one request (dit.md §5.5, §6.4): one
 * CPU generator seeded with the request seed draws, in this order,
 *   1. one randn per video condition (keyframe / reference image or video),
 *      packed order, the shape of that condition's latent [C, T, H, W];
 *   2. the target video latent [C, T, H, W];
 *   3. the target audio, directly in row layout [rows, width] (2A x 32).
 * Conditions are noise-augmented to t (0.999): t·z + (1 − t)·n, then
 * patchified in front of the target's patchified noise. Reference audio rows
 * are clean and draw nothing; the caller places them.
 */
#ifndef MMH3_SAMPLER_INITIAL_NOISE_H
#define MMH3_SAMPLER_INITIAL_NOISE_H

#include <stdint.h>

#include "core/error.h"
#include "model/dit/patchify.h"

typedef struct mm_noise_condition {
    mm_video_shape shape;  /* its latent and patch */
    const float *latent;   /* clean latent [C, T, H, W] */
} mm_noise_condition;

typedef struct mm_noise_plan {
    const mm_noise_condition *conds; /* packed order */
    int n_conds;
    float condition_t;               /* the noise-augmentation time (0.999) */
    mm_video_shape target;
    int64_t audio_rows;              /* target audio rows (2A) */
    int audio_width;                 /* features per audio row (32) */
} mm_noise_plan;

/* Optional: sees every raw draw in order ("cond0", "cond1", ..., "video", "audio"). */
typedef void (*mm_noise_draw_fn)(void *user, const char *name, const float *values, int64_t n);

/* video_rows: [condition rows ; target rows] x row width; audio_rows: the
 * target rows x audio_width. */
int mm_draw_initial_rows(uint64_t seed, const mm_noise_plan *plan, float *video_rows, float *audio_rows,
                         mm_noise_draw_fn draw, void *user, mm_error *err);

#endif
