/* The video VAE's model struct and the internal entry points of its files
 * (private to src/model/vae). */
#ifndef MMH3_MODEL_VAE_VIDEO_VAE_INTERNAL_H
#define MMH3_MODEL_VAE_VIDEO_VAE_INTERNAL_H

#include "formats/linear.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"
#include "model/vae/vae_common.h"
#include "model/vae/video_tiling.h"

typedef struct vv_conv {
    mm_tensor w, b;  /* Conv3d [Cout, Cin, kt, kh, kw], [Cout] as stored */
    mm_tensor w_last; /* [Cout, Cin, 1, kh, kw]: the last temporal tap, made on the first one-frame input */
} vv_conv;

typedef struct vv_resblock {
    mm_tensor norm1_w, norm1_b, norm2_w, norm2_b;
    vv_conv conv1, conv2;
    vv_conv shortcut; /* w.data NULL when Cin == C */
} vv_resblock;

typedef struct vv_level {
    vv_resblock *blocks;
    vv_conv down; /* w.data NULL without a downsample */
} vv_level;

typedef struct vv_dblock {
    mm_tensor norm1, norm2;  /* RMSNorm gains [dim] */
    mm_tensor scale1, scale2; /* layer scales as [1, dim] */
    mm_linear qkv, out, w1, w2;
} vv_dblock;

struct mm_video_vae {
    mm_video_vae_config cfg;
    mm_safetensors *st;
    mm_device device;
    vae_store store;
    mm_vae_capture capture;
    /* encoder */
    vv_conv conv_in, conv_out, quant;
    vv_level *levels;
    mm_tensor norm_out_w, norm_out_b;
    /* decoder */
    mm_tensor post_quant_w5;              /* [24, 24, 1, 1, 1] as stored (owner) */
    mm_tensor post_quant_w, post_quant_b; /* [24, 24] view, [24] */
    mm_tensor embed_w, embed_b;           /* x_embedder, f32 [dim, 24], [dim] */
    mm_tensor registers3;                 /* f32 [1, R, dim] (owner) */
    mm_tensor registers;                  /* [R, dim] view */
    vv_dblock *dblocks;
    mm_dtype gemm_dtype;                  /* the blocks' activations: the stored weight dtype (F16) */
    mm_tensor dnorm_w, dnorm_b;           /* LayerNorm [dim] */
    mm_tensor proj_w, proj_b;             /* f32 [3·pt·ps·ps, dim], [..] */
    mm_tensor latents_mean, latents_std;  /* f32 [C] on the device */
    mm_tensor pixel_mean, pixel_std;      /* f32 [3] on the device */
};

/* video_vae_config.c */
int vv_config_read(mm_video_vae_config *c, const mm_safetensors *st, const mm_video_vae_options *o, int parts,
                   mm_error *err);

/* video_weights.c */
int vv_weights_load(mm_video_vae *vv, mm_ctx *ctx, mm_error *err);
void vv_weights_free(mm_video_vae *vv);

/* video_encoder.c: one tile of one clip. x [1, 3, T, H, W] in the encoder's
 * dtype (the stored one), contiguous -> moments [1, 2C, T', H/16, W/16] in
 * the same dtype (*out allocated). capture: for the first tile only. */
int vv_encoder_forward(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *x, mm_tensor *out, bool capture);

/* video_decoder.c: a batch of n tiles, each the latent window
 * tiles[b] ([C, t, h, w] f32 views of the de-normalized latents, same
 * geometry) -> pixels[b] [3, pt·t, ps·h, ps·w] f32 (allocated here). */
int vv_decoder_forward(mm_video_vae *vv, mm_ctx *ctx, int n, const mm_tensor *tiles, mm_tensor *pixels, bool capture);

/* video_latents.c */
/* z [C, ...] f32 on the device: out = z·std[c] + mean[c] (out may alias z). */
int vv_denormalize(mm_video_vae *vv, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z);
/* host u8 RGB (stride bytes per row) -> dst [3, H, W] view in the encoder dtype: (u/255 − mean_c)/std_c. */
int vv_pixels_in(mm_video_vae *vv, mm_ctx *ctx, mm_tensor *dst, const uint8_t *rgb, int width, int height,
                 int64_t stride);
/* frame [3, H, W] f32 view (ImageNet space) -> rgb (host, H·W·3) = round(255·clamp(x·std + mean, 0, 1)). */
int vv_frame_to_rgb(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *frame, uint8_t *rgb, mm_tensor *scratch_f32,
                    mm_tensor *scratch_u8);
/* Host posterior: moments [2C, n] -> result (sample / mean, fp16 round, normalization). */
int vv_posterior(const mm_video_vae_config *c, const float *moments, const int64_t *shape4,
                 const mm_video_encode_options *o, mm_video_latents *out, mm_error *err);

/* video_chunking.c */
typedef struct vv_chunk_plan {
    int64_t latents;     /* input latent frames */
    int64_t pad_tokens;  /* copies of the last latent appended */
    int64_t num_chunks;
    int64_t window;      /* latents per window (tokens_chunk_size + token_overlap) */
    int64_t frames;      /* frames emitted */
    int split_count;     /* 2 with token_drop > 0 */
} vv_chunk_plan;
int vv_chunk_plan_make(const mm_video_vae_config *c, int64_t latents, vv_chunk_plan *p, mm_error *err);

#endif
