/* The MiniMax-H3 autoencoders: the video VAE (causal 3-D CNN encoder, ViT
 * decoder) and the audio VAE (DAC-style encoder with a causal-attention
 * projection, BigVGAN decoder), loaded from the released Comfy files
 * `minimax_h3_video_vae_fp16.safetensors` / `minimax_h3_audio_vae_fp32.safetensors`
 * (spec: shared/spec/vae.md; docs/VAE.md).
 *
 *   mm_video_vae_load(&vv, path, NULL, MM_VAE_DECODER, ctx, err);
 *   mm_video_vae_decode(vv, ctx, &latents, on_frame, user, err);   // frames stream out
 *   mm_audio_vae_load(&av, path, NULL, MM_VAE_DECODER, ctx, err);
 *   mm_audio_vae_decode(av, ctx, &audio_latents, &wave, err);
 *
 * What the checkpoint tells (widths, depths, kernel sizes, latent channels)
 * is read from it; what it cannot tell (strides, head counts, tile geometry,
 * clip length, normalization constants) comes from the options, whose
 * defaults are the released values (vae_release.c, one sourced place). A
 * conformance kit overrides them from its manifest.
 *
 * Ownership: a model owns its weights (views into the checkpoint mapping on
 * the CPU, device copies otherwise) and keeps the file open until freed.
 * Results handed back as host arrays are malloc'ed and owned by the caller.
 * Everything runs on the context given at load; the same context (or one on
 * the same device) must be passed to every call. A model serves one call at
 * a time (the first one-frame encode caches per-conv weights in it).
 */
#ifndef MMH3_MODEL_VAE_VAE_H
#define MMH3_MODEL_VAE_VAE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"

#define MM_VAE_MAX_LEVELS 8
#define MM_VAE_MAX_LATENT 64

/* Which halves to load (the pipeline decodes only; references need the encoder). */
enum { MM_VAE_ENCODER = 1, MM_VAE_DECODER = 2, MM_VAE_BOTH = 3 };

/* Bring-up and conformance: called with a tensor on the compute device that
 * is valid only during the call. Fired for the first chunk, first tile and
 * first clip only; names follow the conformance kit (docs/VAE.md lists them). */
typedef struct mm_vae_capture {
    void (*fn)(void *user, const char *name, const mm_tensor *t);
    void *user;
} mm_vae_capture;

/* ================================================================ video VAE */

typedef struct mm_video_vae_options {
    int levels;                         /* entries used in the stride arrays */
    int space_down[MM_VAE_MAX_LEVELS];  /* per encoder level (released 2,2,2,2,1,1) */
    int time_down[MM_VAE_MAX_LEVELS];   /* (released 1,2,2,1,1,1) */
    int norm_groups;                    /* GroupNorm groups (32) */
    float groupnorm_eps;                /* 1e-6 */
    int head_dim;                       /* decoder head dim (64); heads = dim / head_dim */
    float norm_eps;                     /* decoder RMSNorm / LayerNorm eps (1e-5) */
    float rope_theta;                   /* 100 */
    float rope_dim_ratio;               /* 0.75 of each head rotated */
    int clip_length;                    /* 17 frames per encoder clip */
    int token_drop;                     /* 3 latent frames dropped after encoding */
    bool tiling;                        /* spatial tiling (on in the released recipe) */
    int tile_size, tile_overlap_min;    /* pixels (256 / 64) */
    int n_latent_const;                 /* entries in the two arrays below */
    float latents_mean[MM_VAE_MAX_LATENT], latents_std[MM_VAE_MAX_LATENT];
    float pixel_mean[3], pixel_std[3];  /* ImageNet */
    int max_batch_tiles;                /* decoder tiles per ViT pass (0 = all tiles of a chunk) */
    /* Opt-in, lossy: the decoder blocks' linears (to_qkv, to_out, w1, w2) as
     * int8 ConvRot W8A8 (formats/linear.h), their weights quantized at load
     * (per row, after the rotation); everything else as stored. */
    bool int8_linears;
} mm_video_vae_options;

/* The released configuration (FL2VA/video_vae/config.json, source/config.json). */
void mm_video_vae_options_release(mm_video_vae_options *o);

/* What the model runs with: the checkpoint's shapes plus the options. */
typedef struct mm_video_vae_config {
    bool has_encoder, has_decoder;
    int latent_channels;                /* 24 */
    int in_channels;                    /* 3 */
    /* encoder */
    int levels, layers_per_block;
    int block_out[MM_VAE_MAX_LEVELS];
    int space_down[MM_VAE_MAX_LEVELS], time_down[MM_VAE_MAX_LEVELS];
    int norm_groups;
    float groupnorm_eps;
    /* decoder */
    int dim, heads, head_dim, layers, ffn_hidden, registers, rope_dim;
    float rope_theta, norm_eps;
    int patch_t, patch_s, out_channels; /* unpatchify (4, 16, 16) x 3 */
    /* temporal geometry (vae.md §2.7) */
    int clip_length, token_drop;
    int tokens_chunk_size, frame_pre_padding, token_overlap, frame_overlap, chunk_frames;
    /* spatial tiling */
    bool tiling;
    int tile_size, tile_overlap_min;
    int max_batch_tiles;
    bool int8_linears;
    float latents_mean[MM_VAE_MAX_LATENT], latents_std[MM_VAE_MAX_LATENT];
    float pixel_mean[3], pixel_std[3];
} mm_video_vae_config;

typedef struct mm_video_vae mm_video_vae;

/* opts NULL = released values; parts = MM_VAE_ENCODER | MM_VAE_DECODER. */
int mm_video_vae_load(mm_video_vae **out, const char *path, const mm_video_vae_options *opts, int parts, mm_ctx *ctx,
                      mm_error *err);
void mm_video_vae_free(mm_video_vae *vv);
const mm_video_vae_config *mm_video_vae_get_config(const mm_video_vae *vv);
/* Device bytes the weights occupy (0 on the CPU, where they stay mapped, except upcast copies). */
size_t mm_video_vae_weight_bytes(const mm_video_vae *vv);
void mm_video_vae_set_capture(mm_video_vae *vv, const mm_vae_capture *cap);

/* Frame counts: 5n + 2 latents -> 17n + 5 frames (1 -> 1), and back. */
int64_t mm_video_vae_pixel_frames(const mm_video_vae_config *c, int64_t latent_frames);
int64_t mm_video_vae_latent_frames(const mm_video_vae_config *c, int64_t pixel_frames);

/* One decoded frame. rgb: packed RGB24 [height][width][3] on the host.
 * pixels: the frame before de-normalization ([3, H, W] f32 on the compute
 * device, ImageNet space, unclamped; a strided view) — what conformance
 * compares. Return 0 to continue, -1 (with err) to stop the decode. */
typedef int (*mm_vae_frame_fn)(void *user, int64_t index, const uint8_t *rgb, int width, int height,
                                 const mm_tensor *pixels, mm_error *err);

/* Decodes normalized latents [24, T, h, w] or [1, 24, T, h, w] (any float
 * dtype, any device) into 17n+5 frames of 16h x 16w, calling fn per frame in
 * order as soon as each is final (chunks are decoded one at a time). */
int mm_video_vae_decode(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *latents, mm_vae_frame_fn fn, void *user,
                        mm_error *err);

typedef struct mm_video_encode_options {
    bool sample;   /* true: posterior sample z = mean + std·eps (the released conditioning); false: the mean */
    uint64_t seed; /* torch CPU generator seed for eps (42 in the released recipe), fresh per call */
    bool fp16_round; /* round z to fp16 before normalizing (released recipe) */
} mm_video_encode_options;
void mm_video_encode_options_release(mm_video_encode_options *o); /* sample, seed 42, fp16 round */

typedef struct mm_video_latents {
    int64_t shape[4];  /* [C, T, h, w] */
    float *latents;    /* normalized: (z - latents_mean) / latents_std */
    float *mean;       /* posterior mean and log-variance (un-normalized, unclamped) */
    float *logvar;
    float *noise;      /* eps used for the sample (NULL when not sampled) */
} mm_video_latents;
void mm_video_latents_free(mm_video_latents *l);

/* A frame source for video encodes: packed RGB24 of frame `index` (valid
 * until the next call), or NULL with err set. */
typedef const uint8_t *(*mm_vae_frame_source)(void *user, int64_t index, mm_error *err);

/* One image (keyframe or reference picture) on the canvas: RGB24, height x
 * width, row stride in bytes -> latents [C, 1, h/16, w/16]. */
int mm_video_vae_encode_image(mm_video_vae *vv, mm_ctx *ctx, const uint8_t *rgb, int width, int height,
                              int64_t stride, const mm_video_encode_options *opts, mm_video_latents *out,
                              mm_error *err);
/* A video of n_frames (17k+5 for the pipeline; other counts are padded by
 * repeating the last frame to whole 17-frame clips, as the reference does)
 * -> latents [C, 5·clips − 3, h/16, w/16]. Frames are pulled one clip at a
 * time. */
int mm_video_vae_encode_video(mm_video_vae *vv, mm_ctx *ctx, int64_t n_frames, int width, int height,
                              int64_t stride, mm_vae_frame_source src, void *user,
                              const mm_video_encode_options *opts, mm_video_latents *out, mm_error *err);

/* ================================================================ audio VAE */

typedef struct mm_audio_vae_options {
    int n_encoder_rates;
    int encoder_rates[MM_VAE_MAX_LEVELS]; /* released 2,4,4,5,5 */
    int n_decoder_rates;
    int decoder_rates[MM_VAE_MAX_LEVELS]; /* released 5,5,2,2,2,2,2 */
    int heads;                            /* pre_block attention heads (8) */
    int dilations[3];                     /* AMP dilations (1,3,5) */
    int residual_dilations[3];            /* encoder residual units (1,3,9) */
    float layernorm_eps;                  /* 1e-5 */
    int sample_rate;                      /* 32000 */
    int n_latent_const;
    float latents_mean[MM_VAE_MAX_LATENT], latents_std[MM_VAE_MAX_LATENT];
} mm_audio_vae_options;

/* The released configuration (FL2VA/audio_vae/config.json, metadata.json). */
void mm_audio_vae_options_release(mm_audio_vae_options *o);

typedef struct mm_audio_vae_config {
    bool has_encoder, has_decoder;
    int latent_channels;   /* 32 */
    int hop;               /* samples per latent (800) */
    int sample_rate;
    /* encoder */
    int encoder_dim, n_encoder_blocks;
    int encoder_rates[MM_VAE_MAX_LEVELS];
    int residual_dilations[3];
    int latent_dim;        /* trunk width (2048) */
    int heads, head_dim, pool_group, mlp_hidden;
    float layernorm_eps;
    /* decoder */
    int decoder_dim, n_stages;
    int decoder_rates[MM_VAE_MAX_LEVELS], decoder_kernels[MM_VAE_MAX_LEVELS];
    int n_amp_kernels, amp_kernels[3], dilations[3];
    int final_channels;
    float latents_mean[MM_VAE_MAX_LATENT], latents_std[MM_VAE_MAX_LATENT];
} mm_audio_vae_config;

typedef struct mm_audio_vae mm_audio_vae;

int mm_audio_vae_load(mm_audio_vae **out, const char *path, const mm_audio_vae_options *opts, int parts, mm_ctx *ctx,
                      mm_error *err);
void mm_audio_vae_free(mm_audio_vae *av);
const mm_audio_vae_config *mm_audio_vae_get_config(const mm_audio_vae *av);
size_t mm_audio_vae_weight_bytes(const mm_audio_vae *av);
void mm_audio_vae_set_capture(mm_audio_vae *av, const mm_vae_capture *cap);

/* Audio latents for n video frames at 24 fps: round(n/24 · 40) = round(5n/3). */
int64_t mm_audio_vae_latents_for_frames(int64_t video_frames);

/* Normalized latents [B, 32, A] (B = 2 for stereo; any float dtype, any
 * device) -> waveform [B][hop·A] f32 on the host (planar, clamped to
 * [-1, 1]; *wave malloc'ed, owned by the caller). */
int mm_audio_vae_decode(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *latents, float **wave, int64_t *samples,
                        mm_error *err);
/* Waveforms at the model rate: channels[c][samples] for c < n_channels (1 or
 * 2; mono is duplicated into both batch items) -> normalized posterior means
 * [2][32][ceil(samples/hop)] on the host (*latents malloc'ed). */
int mm_audio_vae_encode(mm_audio_vae *av, mm_ctx *ctx, const float *const *channels, int n_channels,
                        int64_t samples, float **latents, int64_t *n_latents, mm_error *err);
/* The same on a [B, 1, L] (or [B, L]) batch of mono waveforms: out [B][32][T]. */
int mm_audio_vae_encode_batch(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *waveform, float **latents,
                              int64_t *n_latents, mm_error *err);

#endif
