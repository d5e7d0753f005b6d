/* Temporal chunking of the video decode (vae.md §2.7) and the streaming
 * decode driver.
 *
 * The latents are decoded in windows of tokens_chunk_size + token_overlap
 * (7) latents at a stride of tokens_chunk_size (5). Each window decodes to
 * 4 frames per latent; of those, frames [3, 20) are the chunk's own part A
 * and frames [23, 28) its part B, which the next chunk's first 5 frames
 * cross-fade from (B weighs 1 at the first frame). Windows are independent:
 * no cache crosses them, only the pixel cross-fade. Each chunk is tiled
 * spatially (video_tiling.c); its tiles go through the ViT in batches, all
 * of them at once by default. Frames leave through the callback as soon as
 * they are final, so a decode holds one chunk of pixels, never the video. */
#include <stdlib.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

static int64_t pymod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

int vv_chunk_plan_make(const mm_video_vae_config *c, int64_t latents, vv_chunk_plan *p, mm_error *err)
{
    memset(p, 0, sizeof *p);
    if (latents < 1)
        return mm_fail(err, "video decode: %lld latent frames (at least 1)", (long long)latents);
    const int64_t tcs = c->tokens_chunk_size, rt = c->patch_t;
    p->latents = latents;
    p->split_count = c->token_drop > 0 ? 2 : 1;
    /* a lone latent decodes as the first of [z, z] (the reference's image path) */
    int64_t eff = latents == 1 ? 2 : latents;
    int64_t num_tokens = eff + c->token_drop;
    p->pad_tokens = pymod(-num_tokens, tcs);
    p->num_chunks = (num_tokens + p->pad_tokens) / tcs - (p->split_count - 1);
    if (p->num_chunks < 1) {
        p->pad_tokens += tcs;
        p->num_chunks += 1;
    }
    p->window = tcs + c->token_overlap;
    int64_t len_a = c->chunk_frames - c->frame_pre_padding;
    int64_t len_b = p->split_count == 2 ? p->window * rt - c->chunk_frames - c->frame_pre_padding : 0;
    if (len_a <= 0 || len_b < 0)
        return mm_fail(err, "video decode: chunk geometry (%d frames per chunk, %d pre-padding) leaves no frames",
                       c->chunk_frames, c->frame_pre_padding);
    int64_t total = p->num_chunks * len_a + len_b;
    int64_t intra_tail = c->clip_length % rt, pad_frames = 0;
    for (int64_t k = 0; k < p->pad_tokens; k++)
        pad_frames += (intra_tail && (eff + k) % tcs == 0) ? intra_tail : rt;
    p->frames = latents == 1 ? 1 : total - pad_frames;
    if (p->frames < 1)
        return mm_fail(err, "video decode: %lld latent frames give no frames", (long long)latents);
    return 0;
}

int64_t mm_video_vae_pixel_frames(const mm_video_vae_config *c, int64_t latent_frames)
{
    vv_chunk_plan p;
    return vv_chunk_plan_make(c, latent_frames, &p, NULL) == 0 ? p.frames : -1;
}

int64_t mm_video_vae_latent_frames(const mm_video_vae_config *c, int64_t pixel_frames)
{
    if (pixel_frames <= 0)
        return -1;
    if (pixel_frames == 1)
        return 1;
    int64_t t = c->clip_length; /* latents per clip: the temporal strides applied to one clip */
    for (int l = 0; l < c->levels; l++)
        t = (t - 1) / c->time_down[l] + 1;
    int64_t clips = (pixel_frames + c->clip_length - 1) / c->clip_length;
    return clips * t - c->token_drop;
}

/* Emits frames [0, count) of `part` ([3, F, H, W]) while the budget lasts. */
typedef struct emitter {
    mm_video_vae *vv;
    mm_ctx *ctx;
    mm_vae_frame_fn fn;
    void *user;
    int64_t next, total;
    uint8_t *rgb;
    mm_tensor tmp, u8;
    int width, height;
} emitter;

static int emit(emitter *e, const mm_tensor *part, int64_t count, mm_error *err)
{
    for (int64_t f = 0; f < count && e->next < e->total; f++) {
        mm_tensor frame = mm_tensor_select(part, 1, f);
        if (vv_frame_to_rgb(e->vv, e->ctx, &frame, e->rgb, &e->tmp, &e->u8) != 0 || mm_ctx_sync(e->ctx, err) != 0)
            return mm_ctx_error(e->ctx, err);
        if (e->fn && e->fn(e->user, e->next, e->rgb, e->width, e->height, &frame, err) != 0)
            return mm_error_prefix(err, "frame %lld", (long long)e->next);
        e->next++;
    }
    return 0;
}

/* Decodes latent window [z0, z0 + window) of zp into the chunk buffer
 * [3, window·pt, Hp, Wp]: every tile through the ViT, then stitched. */
static int decode_window(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *zp, int64_t z0, int64_t window,
                         const mm_vae_tile_plan *py, const mm_vae_tile_plan *px, mm_tensor *chunk, bool capture)
{
    const mm_video_vae_config *c = &vv->cfg;
    const int ps = c->patch_s, nt = py->n * px->n;
    mm_tensor *lat = calloc((size_t)nt, sizeof *lat), *pix = calloc((size_t)nt, sizeof *pix);
    if (!lat || !pix) {
        free(lat);
        free(pix);
        return mm_ctx_fail(ctx, "decode: out of memory");
    }
    for (int i = 0; i < py->n; i++)
        for (int j = 0; j < px->n; j++) {
            mm_tensor v = mm_tensor_narrow(zp, 1, z0, window);
            v = mm_tensor_narrow(&v, 2, py->start[i] / ps, py->len[i] / ps);
            lat[i * px->n + j] = mm_tensor_narrow(&v, 3, px->start[j] / ps, px->len[j] / ps);
        }
    if (capture)
        vae_capture(&vv->capture, "latents_denorm", &lat[0]);
    int batch = c->max_batch_tiles > 0 ? c->max_batch_tiles : nt;
    /* one ViT pass per group of tiles of equal geometry (all of them but edge tiles shorter than a tile) */
    for (int b0 = 0; b0 < nt && !mm_ctx_failed(ctx);) {
        int n = 1;
        while (b0 + n < nt && n < batch && lat[b0 + n].shape[2] == lat[b0].shape[2] &&
               lat[b0 + n].shape[3] == lat[b0].shape[3])
            n++;
        vv_decoder_forward(vv, ctx, n, &lat[b0], &pix[b0], capture && b0 == 0);
        b0 += n;
    }
    if (!mm_ctx_failed(ctx))
        mm_vae_stitch(ctx, chunk, pix, py, px);
    for (int k = 0; k < nt; k++)
        mm_tensor_free(&pix[k]);
    free(lat);
    free(pix);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* The latents as de-normalized f32 [C, eff + pad, h, w] on the device. */
static int prepare_latents(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *in, const vv_chunk_plan *p,
                           mm_tensor *zp)
{
    const int64_t C = in->shape[0], L = in->shape[1], h = in->shape[2], w = in->shape[3];
    const int64_t eff = L == 1 ? 2 : L, total = eff + p->pad_tokens;
    mm_tensor staged = {0}, src = mm_tensor_view(in);
    if (!mm_device_eq(in->device, mm_ctx_device(ctx))) {
        /* cross-device copies keep the dtype: move, then convert here */
        mm_tensor cont = {0};
        if (!mm_tensor_is_contiguous(in))
            return mm_ctx_fail(ctx, "decode: latents on another device must be contiguous");
        if (vae_new(ctx, &staged, in->dtype, 4, in->shape) != 0)
            return -1;
        cont = mm_tensor_view(in);
        mm_copy(ctx, &staged, &cont);
        src = staged;
    }
    if (vae_new(ctx, zp, MM_F32, 4, MM_SHAPE(C, total, h, w)) == 0) {
        mm_tensor head = mm_tensor_narrow(zp, 1, 0, L);
        mm_copy(ctx, &head, &src);
        mm_tensor last = mm_tensor_narrow(zp, 1, L - 1, 1);
        for (int64_t k = L; k < total; k++) {
            mm_tensor d = mm_tensor_narrow(zp, 1, k, 1);
            mm_copy(ctx, &d, &last);
        }
        vv_denormalize(vv, ctx, zp, zp);
    }
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&staged);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int mm_video_vae_decode(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *latents, mm_vae_frame_fn fn, void *user,
                        mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    if (!c->has_decoder)
        return mm_fail(err, "video decode: the decoder was not loaded");
    mm_tensor in = mm_tensor_view(latents);
    if (in.ndim == 5 && in.shape[0] == 1)
        in = mm_tensor_select(&in, 0, 0);
    if (in.ndim != 4 || in.shape[0] != c->latent_channels || !mm_dtype_is_float(in.dtype))
        return mm_fail(err, "video decode: latents [%d, T, h, w] (or [1, %d, T, h, w]) of floats expected",
                       c->latent_channels, c->latent_channels);
    vv_chunk_plan plan;
    if (vv_chunk_plan_make(c, in.shape[1], &plan, err) != 0)
        return -1;
    const int64_t ps = c->patch_s, rt = c->patch_t, Hp = in.shape[2] * ps, Wp = in.shape[3] * ps;
    mm_vae_tile_plan py, px;
    if (mm_vae_tile_plan_make(Hp, c->tile_size, c->tile_overlap_min, ps, c->tiling, &py, err) != 0 ||
        mm_vae_tile_plan_make(Wp, c->tile_size, c->tile_overlap_min, ps, c->tiling, &px, err) != 0)
        return mm_error_prefix(err, "video decode");
    const int64_t frames_w = plan.window * rt, len_a = c->chunk_frames - c->frame_pre_padding;
    const int64_t len_b = plan.split_count == 2 ? frames_w - c->chunk_frames - c->frame_pre_padding : 0;

    emitter e = {.vv = vv, .ctx = ctx, .fn = fn, .user = user, .total = plan.frames, .width = (int)Wp,
                 .height = (int)Hp};
    mm_tensor zp = {0}, chunk = {0}, bprev = {0};
    int rc = -1;
    e.rgb = malloc((size_t)(Hp * Wp * 3));
    if (!e.rgb) {
        mm_fail(err, "video decode: out of memory");
        goto out;
    }
    if (prepare_latents(vv, ctx, &in, &plan, &zp) != 0 ||
        vae_new(ctx, &chunk, MM_F32, 4, MM_SHAPE(c->out_channels, frames_w, Hp, Wp)) != 0 ||
        vae_new(ctx, &e.tmp, MM_F32, 3, MM_SHAPE(3, Hp, Wp)) != 0 ||
        (len_b > 0 && vae_new(ctx, &bprev, MM_F32, 4, MM_SHAPE(c->out_channels, len_b, Hp, Wp)) != 0))
        goto ctx_err;
    if (mm_ctx_device(ctx).kind == MM_DEVICE_CPU)
        e.u8 = mm_tensor_wrap(e.rgb, mm_cpu(), MM_U8, 3, MM_SHAPE(Hp, Wp, 3));
    else if (vae_new(ctx, &e.u8, MM_U8, 3, MM_SHAPE(Hp, Wp, 3)) != 0)
        goto ctx_err;
    bool have_b = false;
    for (int64_t ci = 0; ci < plan.num_chunks; ci++) {
        if (decode_window(vv, ctx, &zp, ci * c->tokens_chunk_size, plan.window, &py, &px, &chunk, ci == 0) != 0)
            goto ctx_err;
        mm_tensor a = mm_tensor_narrow(&chunk, 1, c->frame_pre_padding, len_a);
        if (have_b) {
            int64_t ov = c->frame_overlap;
            ov = ov < len_b ? ov : len_b;
            ov = ov < len_a ? ov : len_a;
            if (ci == 1) {
                mm_tensor head = mm_tensor_narrow(&a, 1, 0, ov);
                vae_capture(&vv->capture, "chunk1_head", &head);
            }
            if (ov > 0) {
                mm_tensor bh = mm_tensor_narrow(&a, 1, 0, ov), av = mm_tensor_narrow(&bprev, 1, len_b - ov, ov);
                mm_vae_blend(ctx, &bh, &av, 1, ov);
            }
        }
        if (emit(&e, &a, len_a, err) != 0)
            goto out;
        if (len_b > 0) {
            mm_tensor b = mm_tensor_narrow(&chunk, 1, c->chunk_frames + c->frame_pre_padding, len_b);
            mm_copy(ctx, &bprev, &b);
            if (ci == 0)
                vae_capture(&vv->capture, "chunk0_tail", &bprev);
            have_b = true;
        }
    }
    if (have_b && emit(&e, &bprev, len_b, err) != 0)
        goto out;
    if (e.next != plan.frames) {
        mm_fail(err, "video decode: %lld frames emitted, %lld planned", (long long)e.next, (long long)plan.frames);
        goto out;
    }
    rc = 0;
    goto out;
ctx_err:
    mm_ctx_error(ctx, err);
    mm_error_prefix(err, "video decode");
out:
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&zp);
    mm_tensor_free(&chunk);
    mm_tensor_free(&bprev);
    mm_tensor_free(&e.tmp);
    mm_tensor_free(&e.u8);
    free(e.rgb);
    if (rc != 0 && mm_ctx_failed(ctx))
        mm_ctx_clear_error(ctx);
    return rc;
}
