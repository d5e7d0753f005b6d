#include "model/dit/patchify.h"

#include <stddef.h>

/* Visits every (row, feature) pair with the latent offset it maps to; both
 * directions share it so they cannot disagree. */
#define VIDEO_PATCH_LOOP(s, BODY)                                                                          \
    do {                                                                                                   \
        const int nt = (s)->frames / (s)->patch_t, nh = (s)->height / (s)->patch_h;                       \
        const int nw = (s)->width / (s)->patch_w, width = mm_video_row_width(s);                          \
        const size_t plane = (size_t)(s)->height * (s)->width, chan = plane * (s)->frames;                \
        for (int t = 0; t < nt; t++)                                                                       \
            for (int i = 0; i < nh; i++)                                                                   \
                for (int j = 0; j < nw; j++) {                                                             \
                    const size_t row = ((size_t)t * nh + i) * nw + j;                                      \
                    int f = 0;                                                                             \
                    for (int c = 0; c < (s)->channels; c++)                                                \
                        for (int pt = 0; pt < (s)->patch_t; pt++)                                          \
                            for (int ph = 0; ph < (s)->patch_h; ph++)                                      \
                                for (int pw = 0; pw < (s)->patch_w; pw++, f++) {                           \
                                    const size_t lat = c * chan + (size_t)(t * (s)->patch_t + pt) * plane + \
                                                       (size_t)(i * (s)->patch_h + ph) * (s)->width +      \
                                                       (size_t)(j * (s)->patch_w + pw);                    \
                                    const size_t ri = row * width + f;                                     \
                                    BODY;                                                                  \
                                }                                                                          \
                }                                                                                          \
    } while (0)

void mm_patchify_video(const mm_video_shape *s, const float *latents, float *rows)
{
    VIDEO_PATCH_LOOP(s, rows[ri] = latents[lat]);
}

void mm_unpatchify_video(const mm_video_shape *s, const float *rows, float *latents)
{
    VIDEO_PATCH_LOOP(s, latents[lat] = rows[ri]);
}

void mm_pack_audio(int channels, int features, int latents, const float *audio, float *rows)
{
    for (int ch = 0; ch < channels; ch++)
        for (int c = 0; c < features; c++)
            for (int a = 0; a < latents; a++)
                rows[((size_t)ch * latents + a) * features + c] = audio[((size_t)ch * features + c) * latents + a];
}

void mm_unpack_audio(int channels, int features, int latents, const float *rows, float *audio)
{
    for (int ch = 0; ch < channels; ch++)
        for (int c = 0; c < features; c++)
            for (int a = 0; a < latents; a++)
                audio[((size_t)ch * features + c) * latents + a] = rows[((size_t)ch * latents + a) * features + c];
}
