/* Live previews: the clean estimate of a denoising step as a small picture.
 *
 * The video VAE's decode is far too slow to run after every forward, so a
 * preview maps each latent pixel to RGB with one linear projection (+ bias)
 * of its channels, fitted once per VAE by least squares: random smooth
 * latents are decoded by the VAE itself and the frames, averaged over each
 * latent's pixel block and frame span, are the targets. The fit is stored
 * under the engine's cache folder keyed by the VAE file's content, so later
 * processes load it instead of decoding again.
 *
 * A preview picture is the latent frames (at most MM_PREVIEW_MAX_FRAMES,
 * evenly chosen) scaled to a MM_PREVIEW_SHORT_EDGE short edge and laid side
 * by side left to right in one JPEG: a strip a browser can animate by moving
 * the view one frame width at a time.
 */
#ifndef MMH3_ENGINE_PREVIEW_H
#define MMH3_ENGINE_PREVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"

#define MM_PREVIEW_SHORT_EDGE 256
#define MM_PREVIEW_MAX_FRAMES 16
#define MM_PREVIEW_MAX_CHANNELS 64
#define MM_PREVIEW_QUALITY 80

typedef struct mm_video_vae mm_video_vae;

/* RGB in 0..1 = weight · (normalized latent channels) + bias. */
typedef struct mm_preview_projection {
    int channels;
    float weight[3][MM_PREVIEW_MAX_CHANNELS];
    float bias[3];
} mm_preview_projection;

/* How well the fit explains its own samples (RGB in 0..1). */
typedef struct mm_preview_fit_report {
    int64_t samples;   /* latent pixels used */
    double rmse;       /* of the fitted projection over them */
    double target_std; /* of the targets around each channel's mean: what the best constant colour scores */
    double seconds;
} mm_preview_fit_report;

/* Random latents [C, T, h, w] that vary slowly in space and time (a few
 * low-frequency waves per channel, unit variance): the kind of field the
 * VAE's decoder maps almost linearly. Deterministic in seed. */
void mm_preview_smooth_latents(uint64_t seed, int C, int T, int h, int w, float *out);

/* Decodes latents [C, T, h, w] (host f32, normalized) with the VAE and
 * averages every latent's pixel block over its share of the frames:
 * rgb [T][h][w][3] in 0..1. */
int mm_preview_decode_pooled(mm_video_vae *vv, mm_ctx *ctx, const float *latents, int T, int h, int w, float *rgb,
                             mm_error *err);

/* The least-squares fit over decodes of mm_preview_smooth_latents(seed...). */
int mm_preview_fit(mm_video_vae *vv, mm_ctx *ctx, uint64_t seed, mm_preview_projection *out,
                   mm_preview_fit_report *report, mm_error *err);

/* latents [C, T, h, w] -> rgb [T][h][w][3] in 0..1 (unclamped). */
void mm_preview_project(const mm_preview_projection *p, const float *latents, int T, int h, int w, float *rgb);

/* An encoded preview strip (malloc'ed data, owned by the caller). */
typedef struct mm_preview_image {
    uint8_t *data;
    size_t size;
    int frames, frame_width, frame_height;
} mm_preview_image;
void mm_preview_image_free(mm_preview_image *img);

/* The size one frame of w x h gets in a strip: short edge
 * MM_PREVIEW_SHORT_EDGE, aspect kept, even sides. */
void mm_preview_frame_size(int w, int h, int *frame_w, int *frame_h);
/* How many of n frames a strip shows, and which one is its i-th. */
int mm_preview_strip_frames(int n);
int mm_preview_strip_pick(int i, int shown, int n);

/* n frames of packed RGB24 w x h, each scaled to mm_preview_frame_size,
 * side by side, as a JPEG. */
int mm_preview_encode_strip(const uint8_t *const *frames, int n, int w, int h, mm_preview_image *out, mm_error *err);
/* Latents [C, T, h, w] through the projection into a strip of
 * mm_preview_strip_frames(T) frames. */
int mm_preview_from_latents(const mm_preview_projection *p, const float *latents, int T, int h, int w,
                            mm_preview_image *out, mm_error *err);

/* The cache file's key: SHA-256 over the file's size, its safetensors
 * header and 16 evenly spread 64 KiB samples of its data (hashing all of a
 * 1-GB-class VAE would cost seconds at every load; the header and samples
 * differ between any two different weight files). */
int mm_preview_vae_key(const char *vae_path, char hex[65], mm_error *err);
/* <dir>/preview-<key>.txt. 1 = loaded, 0 = absent or unreadable (fit again),
 * -1 = error. save writes it atomically, making dir if needed. */
int mm_preview_projection_load(const char *path, int channels, mm_preview_projection *p, mm_error *err);
int mm_preview_projection_save(const char *path, const mm_preview_projection *p, mm_error *err);

/* The rate limit: true (and *last = now) when no preview went out yet
 * (*last < 0) or interval_ms have passed since the last one. */
static inline bool mm_preview_due(double *last, double now, int interval_ms)
{
    if (*last >= 0 && (now - *last) * 1000.0 < interval_ms)
        return false;
    *last = now;
    return true;
}

#endif
