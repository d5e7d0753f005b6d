/* Latents <-> DiT rows.
 *
 * Video latents [C, T, H, W] (batch 1) become rows frame-major, then patch
 * row, then patch column; a row's features are ordered (c, pt, ph, pw), so
 * with patch (1, 2, 2) feature = c·4 + ph·2 + pw. Stereo audio latents
 * [channels, C, A] become channel-major rows (row = ch·A + a) of C features.
 * All fp32, all exact inverses of each other.
 */
#ifndef MMH3_MODEL_DIT_PATCHIFY_H
#define MMH3_MODEL_DIT_PATCHIFY_H

#include <stdint.h>

typedef struct mm_video_shape {
    int channels, frames, height, width; /* latent [C, T, H, W] */
    int patch_t, patch_h, patch_w;
} mm_video_shape;

static inline int64_t mm_video_rows(const mm_video_shape *s)
{
    return (int64_t)(s->frames / s->patch_t) * (s->height / s->patch_h) * (s->width / s->patch_w);
}
static inline int mm_video_row_width(const mm_video_shape *s)
{
    return s->channels * s->patch_t * s->patch_h * s->patch_w;
}

void mm_patchify_video(const mm_video_shape *s, const float *latents, float *rows);
void mm_unpatchify_video(const mm_video_shape *s, const float *rows, float *latents);

/* [channels][C][A] <-> [channels·A][C] */
void mm_pack_audio(int channels, int features, int latents, const float *audio, float *rows);
void mm_unpack_audio(int channels, int features, int latents, const float *rows, float *audio);

#endif
