/* The video VAE's encoder for one tile of one clip (vae.md §2.3): a causal
 * 3-D CNN. Every conv pads the two previous frames with zeros (causality;
 * not a copy of the first frame) and the spatial border by reflection; the
 * stride-2 downsamples reflect-pad one sample on the right and bottom only;
 * GroupNorm statistics are per frame. Activations stay in the stored weight
 * dtype (F16 in the Comfy file) with f32 math inside every op, as the
 * reference runs it. Scratch is allocated per step and freed as soon as the
 * next step has consumed it (stream-ordered on CUDA), so the peak is about
 * four activations of the largest level. */
#include <stdio.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

enum { PAD_NONE = 0, PAD_SYMMETRIC = 1, PAD_RIGHT_BOTTOM = 2 };

/* The last temporal tap of a conv as its own contiguous weight: a one-frame
 * input sees only that tap (the others meet the zero frames), so a keyframe
 * needs a third of the work. Made once, kept with the model. */
static const mm_tensor *last_tap(mm_video_vae *vv, mm_ctx *ctx, vv_conv *cv)
{
    if (!cv->w_last.data) {
        int64_t kt = cv->w.shape[2];
        mm_tensor v = mm_tensor_narrow(&cv->w, 2, kt - 1, 1);
        mm_error e;
        if (vae_new(ctx, &cv->w_last, cv->w.dtype, 5, v.shape) != 0)
            return NULL;
        mm_copy(ctx, &cv->w_last, &v);
        if (vae_store_add(&vv->store, &cv->w_last, &e) != 0) {
            mm_ctx_sync(ctx, NULL);
            mm_tensor_free(&cv->w_last);
            mm_ctx_fail(ctx, "%s", e.msg);
            return NULL;
        }
    }
    return &cv->w_last;
}

/* y = conv3d(pad(x)) with kt − 1 zero frames in front. */
static int causal_conv(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *x, vv_conv *cv, int spatial, int st, int ss,
                       mm_tensor *out)
{
    mm_tensor src = mm_tensor_view(x), padded = {0};
    if (spatial != PAD_NONE) {
        int before = spatial == PAD_SYMMETRIC ? 1 : 0;
        int pads[5][2] = {{0, 0}, {0, 0}, {0, 0}, {before, 1}, {before, 1}};
        int64_t shape[5] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3] + before + 1, x->shape[4] + before + 1};
        if (vae_new(ctx, &padded, x->dtype, 5, shape) != 0)
            return -1;
        mm_pad(ctx, &padded, x, (const int(*)[2])pads, MM_PAD_REFLECT, 0.0f);
        src = padded;
    }
    int64_t kt = cv->w.shape[2], kh = cv->w.shape[3], kw = cv->w.shape[4];
    const mm_tensor *w = &cv->w;
    if (x->shape[2] == 1 && kt > 1) {
        w = last_tap(vv, ctx, cv);
        kt = 1;
    }
    mm_conv_params p = {.stride = {st, ss, ss}, .pad = {{(int)kt - 1, 0}, {0, 0}, {0, 0}}};
    int64_t shape[5] = {src.shape[0], cv->w.shape[0], (src.shape[2] - 1) / st + 1, (src.shape[3] - kh) / ss + 1,
                        (src.shape[4] - kw) / ss + 1};
    if (vae_new(ctx, out, x->dtype, 5, shape) == 0)
        mm_conv3d(ctx, out, &src, w, &cv->b, &p);
    mm_tensor_free(&padded);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* SiLU(GroupNorm(x)) per frame, into a new tensor. */
static int norm_silu(mm_ctx *ctx, const mm_video_vae_config *c, const mm_tensor *x, const mm_tensor *w,
                     const mm_tensor *b, mm_tensor *out)
{
    if (vae_new(ctx, out, x->dtype, 5, x->shape) != 0)
        return -1;
    mm_groupnorm(ctx, out, x, w, b, c->norm_groups, c->groupnorm_eps, true);
    mm_activation(ctx, out, out, MM_ACT_SILU);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* out = shortcut(x) + conv2(SiLU(GN2(conv1(SiLU(GN1(x)))))). */
static int resblock(mm_video_vae *vv, mm_ctx *ctx, const mm_video_vae_config *c, vv_resblock *b, const mm_tensor *x,
                    mm_tensor *out)
{
    mm_tensor t = {0}, h = {0}, sc = {0};
    norm_silu(ctx, c, x, &b->norm1_w, &b->norm1_b, &t);
    causal_conv(vv, ctx, &t, &b->conv1, PAD_SYMMETRIC, 1, 1, &h);
    mm_tensor_free(&t);
    norm_silu(ctx, c, &h, &b->norm2_w, &b->norm2_b, &t);
    mm_tensor_free(&h);
    causal_conv(vv, ctx, &t, &b->conv2, PAD_SYMMETRIC, 1, 1, out);
    mm_tensor_free(&t);
    if (b->shortcut.w.data) {
        causal_conv(vv, ctx, x, &b->shortcut, PAD_NONE, 1, 1, &sc);
        mm_add(ctx, out, &sc, out);
        mm_tensor_free(&sc);
    } else {
        mm_add(ctx, out, x, out);
    }
    return mm_ctx_failed(ctx) ? -1 : 0;
}

static void cap(mm_video_vae *vv, bool on, const char *name, const mm_tensor *t)
{
    if (on)
        vae_capture(&vv->capture, name, t);
}

int vv_encoder_forward(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *x, mm_tensor *out, bool capture)
{
    const mm_video_vae_config *c = &vv->cfg;
    mm_tensor h = {0}, next = {0};
    char name[32];
    memset(out, 0, sizeof *out);
    cap(vv, capture, "input", x);
    causal_conv(vv, ctx, x, &vv->conv_in, PAD_SYMMETRIC, 1, 1, &h);
    cap(vv, capture, "conv_in", &h);
    for (int l = 0; l < c->levels && !mm_ctx_failed(ctx); l++) {
        vv_level *lv = &vv->levels[l];
        for (int j = 0; j < c->layers_per_block; j++) {
            resblock(vv, ctx, c, &lv->blocks[j], &h, &next);
            mm_tensor_free(&h);
            h = next;
            if (l == 0 && j == 0)
                cap(vv, capture, "down0_block0", &h);
        }
        if (lv->down.w.data) {
            int sp = c->space_down[l] == 2 ? PAD_RIGHT_BOTTOM : PAD_NONE;
            causal_conv(vv, ctx, &h, &lv->down, sp, c->time_down[l], c->space_down[l], &next);
            mm_tensor_free(&h);
            h = next;
        }
        snprintf(name, sizeof name, "level%d", l);
        cap(vv, capture, name, &h);
    }
    norm_silu(ctx, c, &h, &vv->norm_out_w, &vv->norm_out_b, &next);
    mm_tensor_free(&h);
    causal_conv(vv, ctx, &next, &vv->conv_out, PAD_SYMMETRIC, 1, 1, &h);
    mm_tensor_free(&next);
    cap(vv, capture, "encoder_out", &h);
    causal_conv(vv, ctx, &h, &vv->quant, PAD_NONE, 1, 1, out);
    mm_tensor_free(&h);
    cap(vv, capture, "tile_moments", out);
    if (mm_ctx_failed(ctx)) {
        mm_tensor_free(out);
        return -1;
    }
    return 0;
}
