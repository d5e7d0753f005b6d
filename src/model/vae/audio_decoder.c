/* The audio VAE's BigVGAN decoder (vae.md §3.2, §3.5): dec_in_proj,
 * conv_pre, then per stage a transposed conv up-sampling by its rate and the
 * MEAN of three AMP blocks (kernels 3, 7, 11) run in parallel on the same
 * input; a final alias-free SnakeBeta, conv_post (no bias), clamp to
 * [-1, 1]. Every activation is alias-free: replicate-pad, 2x up-sample with
 * the stored Kaiser-sinc taps, SnakeBeta with log-scale alpha and beta,
 * replicate-pad, 2x low-pass down-sample — composed from the op API
 * (depthwise convs), all f32. */
#include <string.h>

#include "model/vae/audio_vae_internal.h"

int av_conv1d(mm_ctx *ctx, const mm_tensor *x, const av_conv *cv, int stride, int dilation, int pad_l, int pad_r,
              int groups, mm_tensor *out)
{
    const int64_t k = cv->w.shape[2];
    const int64_t lout = (x->shape[2] + pad_l + pad_r - (int64_t)dilation * (k - 1) - 1) / stride + 1;
    mm_conv_params p = {.stride = {stride}, .dilation = {dilation}, .pad = {{pad_l, pad_r}}, .groups = groups};
    if (vae_new(ctx, out, MM_F32, 3, MM_SHAPE(x->shape[0], cv->w.shape[0], lout)) == 0)
        mm_conv1d(ctx, out, x, &cv->w, cv->b.data ? &cv->b : NULL, &p);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int av_alias_free(mm_audio_vae *av, mm_ctx *ctx, const av_act *act, const mm_tensor *x, mm_tensor *out, bool capture)
{
    const int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2], K = act->up_w.shape[2];
    const int ratio = 2;
    /* up: replicate K/r − 1 each side, transposed conv stride r, keep [r·pad + (K − r)/2, +rL) */
    const int up_pad = (int)(K / ratio - 1);
    const int crop_l = up_pad * ratio + (int)(K - ratio) / 2, crop_r = up_pad * ratio + (int)(K - ratio + 1) / 2;
    /* down: replicate K/2 − 1 before and K/2 after, conv stride r */
    const int dn_l = (int)(K / 2 - 1), dn_r = (int)(K / 2);
    mm_tensor p = {0}, u = {0}, p2 = {0};
    av_conv upc = {.w = act->up_w}, dnc = {.w = act->down_w};
    int pads[3][2] = {{0, 0}, {0, 0}, {up_pad, up_pad}};
    if (vae_new(ctx, &p, MM_F32, 3, MM_SHAPE(B, C, L + 2 * up_pad)) == 0)
        mm_pad(ctx, &p, x, (const int(*)[2])pads, MM_PAD_REPLICATE, 0.0f);
    mm_conv_params tp = {.stride = {ratio}, .pad = {{crop_l, crop_r}}, .groups = (int)C};
    if (vae_new(ctx, &u, MM_F32, 3, MM_SHAPE(B, C, ratio * L)) == 0)
        mm_conv_transpose1d(ctx, &u, &p, &upc.w, NULL, &tp);
    mm_tensor_free(&p);
    if (capture)
        vae_capture(&av->capture, "act_up", &u);
    mm_snake(ctx, &u, &u, &act->alpha, &act->beta);
    if (capture)
        vae_capture(&av->capture, "act_snake", &u);
    int pads2[3][2] = {{0, 0}, {0, 0}, {dn_l, dn_r}};
    if (vae_new(ctx, &p2, MM_F32, 3, MM_SHAPE(B, C, ratio * L + dn_l + dn_r)) == 0)
        mm_pad(ctx, &p2, &u, (const int(*)[2])pads2, MM_PAD_REPLICATE, 0.0f);
    mm_tensor_free(&u);
    av_conv1d(ctx, &p2, &dnc, ratio, 1, 0, 0, (int)C, out);
    mm_tensor_free(&p2);
    if (capture)
        vae_capture(&av->capture, "act_down", out);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* AMPBlock1: for each dilation, x += convs2(act(convs1(act(x)))). */
static int amp_block(mm_audio_vae *av, mm_ctx *ctx, const av_amp *a, const mm_tensor *x, mm_tensor *out,
                     bool capture)
{
    const mm_audio_vae_config *c = &av->cfg;
    const int K = a->kernel;
    mm_tensor cur = mm_tensor_view(x);
    bool owned = false;
    for (int n = 0; n < 3 && !mm_ctx_failed(ctx); n++) {
        const int d = c->dilations[n];
        mm_tensor t = {0}, y = {0}, t2 = {0}, y2 = {0}, next = {0};
        av_alias_free(av, ctx, &a->acts[2 * n], &cur, &t, capture && n == 0);
        av_conv1d(ctx, &t, &a->convs1[n], 1, d, d * (K - 1) / 2, d * (K - 1) / 2, 1, &y);
        mm_tensor_free(&t);
        av_alias_free(av, ctx, &a->acts[2 * n + 1], &y, &t2, false);
        mm_tensor_free(&y);
        av_conv1d(ctx, &t2, &a->convs2[n], 1, 1, (K - 1) / 2, (K - 1) / 2, 1, &y2);
        mm_tensor_free(&t2);
        if (vae_new(ctx, &next, MM_F32, 3, cur.shape) == 0)
            mm_add(ctx, &next, &cur, &y2);
        mm_tensor_free(&y2);
        if (owned)
            mm_tensor_free(&cur);
        cur = next;
        owned = true;
    }
    *out = cur;
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int av_decoder_forward(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *z, mm_tensor *wave)
{
    const mm_audio_vae_config *c = &av->cfg;
    mm_tensor h = {0}, next = {0};
    memset(wave, 0, sizeof *wave);
    vae_capture(&av->capture, "latents_denorm", z);
    av_conv1d(ctx, z, &av->dec_in, 1, 1, 0, 0, 1, &h);
    vae_capture(&av->capture, "dec_in_proj", &h);
    av_conv1d(ctx, &h, &av->conv_pre, 1, 1, 3, 3, 1, &next);
    mm_tensor_free(&h);
    h = next;
    vae_capture(&av->capture, "conv_pre", &h);
    for (int i = 0; i < c->n_stages && !mm_ctx_failed(ctx); i++) {
        const int u = c->decoder_rates[i], k = c->decoder_kernels[i], pad = (k - u) / 2;
        const int64_t lout = (h.shape[2] - 1) * u - 2 * pad + k;
        mm_conv_params tp = {.stride = {u}, .pad = {{pad, pad}}};
        mm_tensor x = {0}, acc = {0};
        if (vae_new(ctx, &x, MM_F32, 3, MM_SHAPE(h.shape[0], av->ups[i].w.shape[1], lout)) == 0)
            mm_conv_transpose1d(ctx, &x, &h, &av->ups[i].w, &av->ups[i].b, &tp);
        mm_tensor_free(&h);
        if (i == 0)
            vae_capture(&av->capture, "ups0", &x);
        for (int m = 0; m < c->n_amp_kernels; m++) {
            mm_tensor r = {0};
            amp_block(av, ctx, &av->amps[i * c->n_amp_kernels + m], &x, &r, i == 0 && m == 0);
            if (i == 0 && m == 0)
                vae_capture(&av->capture, "resblock0", &r);
            if (m == 0) {
                acc = r;
            } else {
                mm_add(ctx, &acc, &acc, &r);
                mm_tensor_free(&r);
            }
        }
        mm_tensor_free(&x);
        /* the mean of the parallel blocks (the reference divides the sum by their count) */
        mm_axpby(ctx, &acc, 1.0f / (float)c->n_amp_kernels, &acc, 0.0f, NULL);
        if (i == 0)
            vae_capture(&av->capture, "stage0", &acc);
        h = acc;
    }
    av_alias_free(av, ctx, &av->act_post, &h, &next, false);
    mm_tensor_free(&h);
    vae_capture(&av->capture, "activation_post", &next);
    av_conv1d(ctx, &next, &av->conv_post, 1, 1, 3, 3, 1, wave);
    mm_tensor_free(&next);
    vae_capture(&av->capture, "conv_post", wave);
    mm_clamp(ctx, wave, wave, -1.0f, 1.0f);
    if (mm_ctx_failed(ctx)) {
        mm_tensor_free(wave);
        return -1;
    }
    return 0;
}
