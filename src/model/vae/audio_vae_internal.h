/* The audio VAE's model struct and internal entry points (private to
 * src/model/vae). Everything is f32: the audio path is not usable in half
 * precision (vae.md §3.1, pitfall 11). */
#ifndef MMH3_MODEL_VAE_AUDIO_VAE_INTERNAL_H
#define MMH3_MODEL_VAE_AUDIO_VAE_INTERNAL_H

#include "io/safetensors.h"
#include "model/vae/vae.h"
#include "model/vae/vae_common.h"

typedef struct av_conv {
    mm_tensor w, b; /* Conv1d [Cout, Cin, k] / ConvTranspose1d [Cin, Cout, k]; b.data NULL without bias */
} av_conv;

typedef struct av_resunit {
    mm_tensor alpha1, alpha2; /* Snake1d, linear, [1, C, 1] */
    av_conv conv1, conv2;     /* k7 dilated, k1 */
} av_resunit;

typedef struct av_enc_block {
    av_resunit units[3];
    mm_tensor alpha; /* Snake1d before the strided conv */
    av_conv down;    /* k = 2·stride, stride, pad ceil(stride/2) */
    int stride;
} av_enc_block;

/* An alias-free SnakeBeta: 2x up-sampling, SnakeBeta, 2x down-sampling. */
typedef struct av_act {
    mm_tensor alpha, beta;   /* log-scale [C] */
    mm_tensor up_w, down_w;  /* depthwise [C, 1, K]: the stored filters (up pre-scaled by the ratio 2) */
} av_act;

typedef struct av_amp {
    av_conv convs1[3], convs2[3];
    av_act acts[6];
    int kernel;
} av_amp;

struct mm_audio_vae {
    mm_audio_vae_config cfg;
    mm_safetensors *st;
    vae_store store;
    mm_vae_capture capture;
    /* encoder */
    av_conv conv_in, conv_out;
    av_enc_block *blocks;
    mm_tensor final_alpha;
    /* pre_block */
    mm_tensor norm1_w, norm1_b, norm3_w, norm3_b, norm2_w, norm2_b, mlp_norm_w, mlp_norm_b;
    mm_tensor qkv_w, qkv_b;          /* [3D, D] contiguous Q | K | V rows; bias [q_bias; zero_k_bias; v_bias] */
    mm_tensor attn_proj_w, attn_proj_b, proj_w, proj_b;
    mm_tensor w0_w, w0_b, w1_w, w1_b, w2_w, w2_b;
    mm_tensor mean_w3, mean_w, mean_b; /* mean_proj [32, 32, 1] (owner), [32, 32] view */
    /* decoder */
    av_conv dec_in, conv_pre, conv_post;
    av_conv *ups;
    av_amp *amps;
    av_act act_post;
    mm_tensor latents_mean, latents_std, latents_inv_std; /* f32 [32] on the device */
};

/* audio_encoder.c: x [B, 1, L] f32 (L a multiple of the hop) -> z [B, 32, L/hop] un-normalized (allocated). */
int av_encoder_forward(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *x, mm_tensor *z);
/* audio_decoder.c: z [B, 32, A] de-normalized f32 -> waveform [B, 1, hop·A] clamped (allocated). */
int av_decoder_forward(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *z, mm_tensor *wave);
/* audio_latents.c: out = z·std + mean / (z − mean)/std over dim 1 of [B, C, T] (out may alias z). */
int av_denormalize(mm_audio_vae *av, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z);
int av_normalize(mm_audio_vae *av, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z);

/* A Conv1d helper: out allocated [B, Cout, Lout] from x [B, Cin, L]. */
int av_conv1d(mm_ctx *ctx, const mm_tensor *x, const av_conv *cv, int stride, int dilation, int pad_l, int pad_r,
              int groups, mm_tensor *out);
/* Alias-free activation; out allocated [B, C, L]. capture: fire act_up/act_snake/act_down. */
int av_alias_free(mm_audio_vae *av, mm_ctx *ctx, const av_act *act, const mm_tensor *x, mm_tensor *out, bool capture);

#endif
