/* Normalization at the video VAE's edges (vae.md §2.2, §2.8, §2.9): latent
 * de-normalization, ImageNet pixel normalization, uint8 frames, and the
 * seeded posterior sample of the released conditioning recipe. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/vae/video_vae_internal.h"
#include "sampler/torch_rng.h"

int vv_denormalize(mm_video_vae *vv, mm_ctx *ctx, mm_tensor *out, const mm_tensor *z)
{
    mm_tensor sv = vae_channel_view(&vv->latents_std, z->ndim, z->shape, 0);
    mm_tensor mv = vae_channel_view(&vv->latents_mean, z->ndim, z->shape, 0);
    mm_mul(ctx, out, z, &sv);
    mm_add(ctx, out, out, &mv);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int vv_pixels_in(mm_video_vae *vv, mm_ctx *ctx, mm_tensor *dst, const uint8_t *rgb, int width, int height,
                 int64_t stride)
{
    const int64_t H = height, W = width;
    mm_tensor u8 = {0}, f = {0}, inv = {0};
    uint8_t *packed = NULL;
    const uint8_t *src = rgb;
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind != MM_DEVICE_CPU) {
        if (stride != 3 * W) { /* pack rows so one contiguous copy moves the frame */
            packed = malloc((size_t)(H * W * 3));
            if (!packed)
                return mm_ctx_fail(ctx, "pixels: out of memory");
            for (int64_t r = 0; r < H; r++)
                memcpy(packed + r * W * 3, rgb + r * stride, (size_t)(W * 3));
            src = packed;
            stride = 3 * W;
        }
        if (vae_new(ctx, &u8, MM_U8, 3, MM_SHAPE(H, W, 3)) == 0) {
            mm_tensor h = mm_tensor_wrap((void *)src, mm_cpu(), MM_U8, 3, MM_SHAPE(H, W, 3));
            mm_copy(ctx, &u8, &h);
        }
    } else {
        u8 = mm_tensor_wrap((void *)src, mm_cpu(), MM_U8, 3, MM_SHAPE(H, W, 3));
    }
    mm_tensor chw = mm_tensor_as_strided(&u8, 3, MM_SHAPE(3, H, W), MM_SHAPE(1, stride, 3));
    float inv_std[3];
    for (int c = 0; c < 3; c++)
        inv_std[c] = 1.0f / vv->cfg.pixel_std[c];
    if (vae_new(ctx, &f, MM_F32, 3, MM_SHAPE(3, H, W)) == 0 && vae_new(ctx, &inv, MM_F32, 1, MM_SHAPE(3)) == 0) {
        mm_tensor hi = mm_tensor_wrap(inv_std, mm_cpu(), MM_F32, 1, MM_SHAPE(3));
        mm_copy(ctx, &inv, &hi);
        mm_copy(ctx, &f, &chw);
        mm_axpby(ctx, &f, 1.0f / 255.0f, &f, 0.0f, NULL);
        mm_tensor mv = vae_channel_view(&vv->pixel_mean, 3, f.shape, 0);
        mm_tensor iv = vae_channel_view(&inv, 3, f.shape, 0);
        mm_axpby(ctx, &f, 1.0f, &f, -1.0f, &mv);
        mm_mul(ctx, &f, &f, &iv);
        mm_copy(ctx, dst, &f);
    }
    mm_tensor_free(&f); /* stream-ordered; host sources were copied on return */
    mm_tensor_free(&inv);
    mm_tensor_free(&u8);
    free(packed);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int vv_frame_to_rgb(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *frame, uint8_t *rgb, mm_tensor *tmp,
                    mm_tensor *u8)
{
    const int64_t H = frame->shape[1], W = frame->shape[2];
    mm_tensor sv = vae_channel_view(&vv->pixel_std, 3, frame->shape, 0);
    mm_tensor mv = vae_channel_view(&vv->pixel_mean, 3, frame->shape, 0);
    mm_mul(ctx, tmp, frame, &sv);
    mm_add(ctx, tmp, tmp, &mv);
    mm_clamp(ctx, tmp, tmp, 0.0f, 1.0f);
    mm_axpby(ctx, tmp, 255.0f, tmp, 0.0f, NULL);
    /* float -> U8 rounds half to even, as torch.round before the uint8 cast */
    mm_tensor dst = mm_tensor_as_strided(u8, 3, MM_SHAPE(3, H, W), MM_SHAPE(1, 3 * W, 3));
    mm_copy(ctx, &dst, tmp);
    mm_tensor host = mm_tensor_wrap(rgb, mm_cpu(), MM_U8, 3, MM_SHAPE(H, W, 3));
    if (u8->data != rgb)
        mm_copy(ctx, &host, u8);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int vv_posterior(const mm_video_vae_config *c, const float *moments, const int64_t *shape4,
                 const mm_video_encode_options *o, mm_video_latents *out, mm_error *err)
{
    const int64_t C = shape4[0], n = shape4[1] * shape4[2] * shape4[3], total = C * n;
    memset(out, 0, sizeof *out);
    memcpy(out->shape, shape4, sizeof out->shape);
    out->latents = malloc(sizeof(float) * (size_t)total);
    out->mean = malloc(sizeof(float) * (size_t)total);
    out->logvar = malloc(sizeof(float) * (size_t)total);
    if (o->sample)
        out->noise = malloc(sizeof(float) * (size_t)total);
    if (!out->latents || !out->mean || !out->logvar || (o->sample && !out->noise)) {
        mm_video_latents_free(out);
        return mm_fail(err, "posterior: out of memory (%lld values)", (long long)total);
    }
    memcpy(out->mean, moments, sizeof(float) * (size_t)total);
    memcpy(out->logvar, moments + total, sizeof(float) * (size_t)total);
    if (o->sample) {
        /* a fresh torch CPU generator per condition, eps drawn for the whole [1, C, T, h, w] */
        mm_torch_gen g;
        mm_torch_gen_seed(&g, o->seed);
        mm_torch_randn_f32(&g, out->noise, total);
    }
    for (int64_t ch = 0; ch < C; ch++) {
        const float m = c->latents_mean[ch], s = c->latents_std[ch];
        for (int64_t i = ch * n; i < (ch + 1) * n; i++) {
            float z = out->mean[i];
            if (o->sample) {
                float lv = out->logvar[i];
                lv = lv < -30.0f ? -30.0f : (lv > 20.0f ? 20.0f : lv);
                float sd = expf(0.5f * lv);
                float e = sd * out->noise[i];
                z = z + e;
            }
            if (o->fp16_round)
                z = mm_round_f16(z);
            out->latents[i] = (z - m) / s;
        }
    }
    return 0;
}

void mm_video_latents_free(mm_video_latents *l)
{
    if (!l)
        return;
    free(l->latents);
    free(l->mean);
    free(l->logvar);
    free(l->noise);
    memset(l, 0, sizeof *l);
}
