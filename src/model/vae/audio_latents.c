/* The audio VAE's edges (vae.md §3.6-3.8): the 32-channel latent
 * normalization, stereo as two batch items, the right zero-padding to whole
 * hops, latent counts for a video length, and the public encode/decode. */
#include <stdlib.h>
#include <string.h>

#include "model/vae/audio_vae_internal.h"

int av_denormalize(mm_audio_vae *av, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z)
{
    mm_tensor sv = vae_channel_view(&av->latents_std, 3, z->shape, 1);
    mm_tensor mv = vae_channel_view(&av->latents_mean, 3, z->shape, 1);
    mm_mul(ctx, out, z, &sv);
    mm_add(ctx, out, out, &mv);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int av_normalize(mm_audio_vae *av, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z)
{
    mm_tensor mv = vae_channel_view(&av->latents_mean, 3, z->shape, 1);
    mm_tensor iv = vae_channel_view(&av->latents_inv_std, 3, z->shape, 1);
    mm_axpby(ctx, out, 1.0f, z, -1.0f, &mv);
    mm_mul(ctx, out, out, &iv);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int64_t mm_audio_vae_latents_for_frames(int64_t video_frames)
{
    /* round(5n/3): the fraction is 0, 1/3 or 2/3, never a tie */
    return video_frames > 0 ? (5 * video_frames + 1) / 3 : 0;
}

/* A float tensor (any device, dtype) as f32 on ctx's device: a view when it
 * already is one, else *owned. */
static int to_device_f32(mm_ctx *ctx, const mm_tensor *in, mm_tensor *owned, mm_tensor *out)
{
    memset(owned, 0, sizeof *owned);
    if (mm_device_eq(in->device, mm_ctx_device(ctx)) && in->dtype == MM_F32 && mm_tensor_is_contiguous(in)) {
        *out = mm_tensor_view(in);
        return 0;
    }
    mm_tensor staged = {0}, src = mm_tensor_view(in);
    if (!mm_device_eq(in->device, mm_ctx_device(ctx))) {
        if (!mm_tensor_is_contiguous(in))
            return mm_ctx_fail(ctx, "audio VAE: tensors on another device must be contiguous");
        if (vae_new(ctx, &staged, in->dtype, in->ndim, in->shape) != 0)
            return -1;
        mm_copy(ctx, &staged, in);
        src = staged;
    }
    if (vae_new(ctx, owned, MM_F32, in->ndim, in->shape) == 0)
        mm_copy(ctx, owned, &src);
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&staged);
    *out = *owned;
    out->storage = NULL;
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* Device result -> malloc'ed host copy. */
static float *to_host(mm_ctx *ctx, const mm_tensor *t)
{
    size_t n = (size_t)mm_tensor_numel(t);
    float *h = malloc(sizeof(float) * (n ? n : 1));
    if (!h) {
        mm_ctx_fail(ctx, "out of memory (%zu floats)", n);
        return NULL;
    }
    mm_tensor hv = mm_tensor_wrap(h, mm_cpu(), MM_F32, t->ndim, t->shape);
    mm_copy(ctx, &hv, t);
    if (mm_ctx_sync(ctx, NULL) != 0) {
        free(h);
        return NULL;
    }
    return h;
}

static int finish(mm_ctx *ctx, int rc, mm_error *err, const char *what)
{
    if (rc != 0 || mm_ctx_failed(ctx)) {
        if (mm_ctx_failed(ctx)) {
            mm_ctx_error(ctx, err);
            mm_ctx_clear_error(ctx);
        }
        return mm_error_prefix(err, "%s", what);
    }
    return 0;
}

int mm_audio_vae_decode(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *latents, float **wave, int64_t *samples,
                        mm_error *err)
{
    const mm_audio_vae_config *c = &av->cfg;
    *wave = NULL;
    *samples = 0;
    if (!c->has_decoder)
        return mm_fail(err, "audio decode: the decoder was not loaded");
    if (latents->ndim != 3 || latents->shape[1] != c->latent_channels || latents->shape[2] < 1 ||
        !mm_dtype_is_float(latents->dtype))
        return mm_fail(err, "audio decode: latents [B, %d, A] of floats expected", c->latent_channels);
    mm_tensor owned, z, zd = {0}, w = {0};
    int rc = to_device_f32(ctx, latents, &owned, &z);
    if (rc == 0 && vae_new(ctx, &zd, MM_F32, 3, z.shape) == 0) {
        av_denormalize(av, ctx, &zd, &z);
        if (av_decoder_forward(av, ctx, &zd, &w) == 0 && (*wave = to_host(ctx, &w)) != NULL)
            *samples = w.shape[2];
    }
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&owned);
    mm_tensor_free(&zd);
    mm_tensor_free(&w);
    rc = finish(ctx, rc, err, "audio decode");
    if (rc != 0) {
        free(*wave);
        *wave = NULL;
        *samples = 0;
    }
    return rc;
}

int mm_audio_vae_encode_batch(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *waveform, float **latents,
                              int64_t *n_latents, mm_error *err)
{
    const mm_audio_vae_config *c = &av->cfg;
    *latents = NULL;
    *n_latents = 0;
    if (!c->has_encoder)
        return mm_fail(err, "audio encode: the encoder was not loaded");
    mm_tensor in = mm_tensor_view(waveform);
    if (in.ndim == 2)
        in = mm_tensor_unflatten(&in, 0, 2, MM_SHAPE(in.shape[0], 1));
    if (in.ndim != 3 || in.shape[1] != 1 || in.shape[2] < 1 || !mm_dtype_is_float(in.dtype))
        return mm_fail(err, "audio encode: mono waveforms [B, 1, L] (or [B, L]) of floats expected");
    const int64_t B = in.shape[0], L = in.shape[2], T = (L + c->hop - 1) / c->hop;
    mm_tensor owned, x, xp = {0}, z = {0};
    int rc = to_device_f32(ctx, &in, &owned, &x);
    /* right-pad with zeros to whole hops */
    int pads[3][2] = {{0, 0}, {0, 0}, {0, (int)(T * c->hop - L)}};
    if (rc == 0 && vae_new(ctx, &xp, MM_F32, 3, MM_SHAPE(B, 1, T * c->hop)) == 0) {
        mm_pad(ctx, &xp, &x, (const int(*)[2])pads, MM_PAD_CONSTANT, 0.0f);
        vae_capture(&av->capture, "padded_input", &xp);
        if (av_encoder_forward(av, ctx, &xp, &z) == 0) {
            av_normalize(av, ctx, &z, &z);
            if ((*latents = to_host(ctx, &z)) != NULL)
                *n_latents = T;
        }
    }
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&owned);
    mm_tensor_free(&xp);
    mm_tensor_free(&z);
    rc = finish(ctx, rc, err, "audio encode");
    if (rc != 0) {
        free(*latents);
        *latents = NULL;
        *n_latents = 0;
    }
    return rc;
}

int mm_audio_vae_encode(mm_audio_vae *av, mm_ctx *ctx, const float *const *channels, int n_channels,
                        int64_t samples, float **latents, int64_t *n_latents, mm_error *err)
{
    if (n_channels != 1 && n_channels != 2)
        return mm_fail(err, "audio encode: %d channels (accepted: 1, duplicated to stereo, or 2)", n_channels);
    if (samples < 1)
        return mm_fail(err, "audio encode: no samples");
    float *buf = malloc(sizeof(float) * 2 * (size_t)samples);
    if (!buf)
        return mm_fail(err, "audio encode: out of memory");
    memcpy(buf, channels[0], sizeof(float) * (size_t)samples);
    memcpy(buf + samples, channels[n_channels == 2 ? 1 : 0], sizeof(float) * (size_t)samples);
    mm_tensor w = mm_tensor_wrap(buf, mm_cpu(), MM_F32, 3, MM_SHAPE(2, 1, samples));
    int rc = mm_audio_vae_encode_batch(av, ctx, &w, latents, n_latents, err);
    free(buf);
    return rc;
}
