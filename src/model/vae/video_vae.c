/* The video VAE: loading, and the encode drivers (vae.md §2.4, §2.5, §2.9).
 *
 * Encoding cuts the video into independent clips of clip_length (17)
 * frames — the last one padded by repeating the last frame — and each clip
 * into spatial tiles; every tile runs the causal encoder from zero padding
 * (no cache crosses clips or tiles), the tile moments are stitched in latent
 * space, the clips concatenated and the last token_drop (3) latents, which
 * come from padding, dropped: 17n + 5 frames -> 5n + 2 latents. A single
 * image runs as a one-frame clip without padding. The posterior is sampled
 * on the host with PyTorch's CPU generator (seed 42, fresh per call) and
 * rounded to fp16 before normalization, the released conditioning. */
#include <stdlib.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

int mm_video_vae_load(mm_video_vae **out, const char *path, const mm_video_vae_options *opts, int parts, mm_ctx *ctx,
                      mm_error *err)
{
    *out = NULL;
    mm_video_vae_options rel;
    if (!opts) {
        mm_video_vae_options_release(&rel);
        opts = &rel;
    }
    mm_video_vae *vv = calloc(1, sizeof *vv);
    if (!vv)
        return mm_fail(err, "out of memory");
    vv->device = mm_ctx_device(ctx);
    if (mm_st_open(&vv->st, path, err) != 0) {
        free(vv);
        return mm_error_prefix(err, "video VAE");
    }
    if (vv_config_read(&vv->cfg, vv->st, opts, parts, err) != 0 || vv_weights_load(vv, ctx, err) != 0) {
        mm_video_vae_free(vv);
        return -1;
    }
    *out = vv;
    return 0;
}

void mm_video_vae_free(mm_video_vae *vv)
{
    if (!vv)
        return;
    vv_weights_free(vv);
    mm_st_close(vv->st);
    free(vv);
}

const mm_video_vae_config *mm_video_vae_get_config(const mm_video_vae *vv) { return &vv->cfg; }
size_t mm_video_vae_weight_bytes(const mm_video_vae *vv) { return vv->store.device_bytes; }

void mm_video_vae_set_capture(mm_video_vae *vv, const mm_vae_capture *cap)
{
    if (cap)
        vv->capture = *cap;
    else
        memset(&vv->capture, 0, sizeof vv->capture);
}

/* Encoder output length of n samples along a spatial axis / frames. */
static int64_t down_space(const mm_video_vae_config *c, int64_t n)
{
    for (int l = 0; l < c->levels; l++)
        if (c->space_down[l] == 2)
            n = (n + 1) / 2;
    return n;
}
static int64_t down_time(const mm_video_vae_config *c, int64_t t)
{
    for (int l = 0; l < c->levels; l++)
        t = (t - 1) / c->time_down[l] + 1;
    return t;
}

typedef struct frame_pull {
    mm_vae_frame_source src;
    void *user;
    const uint8_t *single; /* the image path */
} frame_pull;

/* Encodes frames [f0, f0 + T) (indices past n_frames repeat the last) into
 * moments [2C, T', Hl, Wl] (a view of the caller's f32 device tensor). */
static int encode_clip(mm_video_vae *vv, mm_ctx *ctx, const frame_pull *fp, int64_t f0, int64_t T, int64_t n_frames,
                       int width, int height, int64_t stride, mm_tensor *moments, bool capture, mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    const mm_dtype dt = vv->conv_in.w.dtype;
    const int64_t H = height, W = width, ps = c->patch_s;
    mm_vae_tile_plan py, px, ly, lx;
    if (mm_vae_tile_plan_make(H, c->tile_size, c->tile_overlap_min, ps, c->tiling, &py, err) != 0 ||
        mm_vae_tile_plan_make(W, c->tile_size, c->tile_overlap_min, ps, c->tiling, &px, err) != 0)
        return -1;
    int64_t oy[MM_VAE_MAX_TILES], ox[MM_VAE_MAX_TILES];
    for (int i = 0; i < py.n; i++)
        oy[i] = down_space(c, py.len[i]);
    for (int j = 0; j < px.n; j++)
        ox[j] = down_space(c, px.len[j]);
    mm_vae_tile_plan_scale(&py, ps, oy, &ly);
    mm_vae_tile_plan_scale(&px, ps, ox, &lx);
    const int nt = py.n * px.n;
    mm_tensor clip = {0}, *tm = calloc((size_t)nt, sizeof *tm);
    if (!tm)
        return mm_fail(err, "out of memory");
    int rc = 0;
    vae_new(ctx, &clip, dt, 5, MM_SHAPE(1, 3, T, H, W));
    for (int64_t f = 0; f < T && !mm_ctx_failed(ctx); f++) {
        int64_t idx = f0 + f < n_frames ? f0 + f : n_frames - 1;
        const uint8_t *rgb = fp->single ? fp->single : fp->src(fp->user, idx, err);
        if (!rgb) {
            rc = mm_error_prefix(err, "frame %lld", (long long)idx);
            goto out;
        }
        mm_tensor dst = mm_tensor_select(&clip, 0, 0);
        dst = mm_tensor_select(&dst, 1, f);
        vv_pixels_in(vv, ctx, &dst, rgb, width, height, stride);
    }
    for (int i = 0; i < py.n && !mm_ctx_failed(ctx); i++)
        for (int j = 0; j < px.n && !mm_ctx_failed(ctx); j++) {
            mm_tensor v = mm_tensor_narrow(&clip, 3, py.start[i], py.len[i]);
            v = mm_tensor_narrow(&v, 4, px.start[j], px.len[j]);
            mm_tensor xt = {0}, m = {0};
            if (vae_new(ctx, &xt, dt, 5, v.shape) == 0) {
                mm_copy(ctx, &xt, &v);
                if (vv_encoder_forward(vv, ctx, &xt, &m, capture && i == 0 && j == 0) == 0) {
                    mm_tensor m4 = mm_tensor_select(&m, 0, 0);
                    if (vae_new(ctx, &tm[i * px.n + j], MM_F32, 4, m4.shape) == 0)
                        mm_copy(ctx, &tm[i * px.n + j], &m4);
                }
            }
            mm_tensor_free(&xt);
            mm_tensor_free(&m);
        }
    if (!mm_ctx_failed(ctx))
        mm_vae_stitch(ctx, moments, tm, &ly, &lx);
out:
    mm_ctx_sync(ctx, NULL);
    if (rc == 0 && mm_ctx_error(ctx, err) != 0) {
        mm_ctx_clear_error(ctx);
        rc = -1;
    }
    for (int k = 0; k < nt; k++)
        mm_tensor_free(&tm[k]);
    free(tm);
    mm_tensor_free(&clip);
    return rc;
}

static int encode(mm_video_vae *vv, mm_ctx *ctx, int64_t n_frames, int width, int height, int64_t stride,
                  const frame_pull *fp, const mm_video_encode_options *opts, mm_video_latents *out, mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    memset(out, 0, sizeof *out);
    if (!c->has_encoder)
        return mm_fail(err, "video encode: the encoder was not loaded");
    if (n_frames < 1 || width < 2 || height < 2 || stride < 3 * (int64_t)width)
        return mm_fail(err, "video encode: %lld frames of %dx%d (stride %lld): at least one frame of 2x2, stride >= 3·width",
                       (long long)n_frames, width, height, (long long)stride);
    mm_video_encode_options rel;
    if (!opts) {
        mm_video_encode_options_release(&rel);
        opts = &rel;
    }
    const int64_t C2 = 2 * c->latent_channels, Hl = down_space(c, height), Wl = down_space(c, width);
    /* every level reflect-pads by one sample: the deepest level needs two */
    if (Hl < 2 || Wl < 2)
        return mm_fail(err, "video encode: %dx%d is too small (at least %d px per side)", width, height,
                       c->patch_s + 1);
    const bool image = n_frames == 1;
    const int64_t T = image ? 1 : c->clip_length, tl = down_time(c, T);
    const int64_t clips = image ? 1 : (n_frames + T - 1) / T;
    const int64_t keep = image ? 1 : clips * tl - c->token_drop;
    if (keep < 1)
        return mm_fail(err, "video encode: %lld frames give no latents", (long long)n_frames);
    mm_tensor moments = {0};
    float *host = NULL;
    int rc = -1;
    if (vae_new(ctx, &moments, MM_F32, 4, MM_SHAPE(C2, clips * tl, Hl, Wl)) != 0)
        goto ctx_err;
    for (int64_t k = 0; k < clips; k++) {
        /* The encoder is causal (latent i of a clip sees clip frames <= 4i)
         * and its norms are per frame, so a clip whose later latents are
         * dropped (the last one: token_drop) runs on only the frames its kept
         * latents see — the same numbers for a fraction of the work (5 of 17
         * frames for a 17n+5 video). The rows past `keep` stay unwritten. */
        int64_t need = keep - k * tl < tl ? keep - k * tl : tl, Tk = 1;
        while (Tk < T && down_time(c, Tk) < need)
            Tk++;
        mm_tensor m = mm_tensor_narrow(&moments, 1, k * tl, down_time(c, Tk));
        if (encode_clip(vv, ctx, fp, k * T, Tk, n_frames, width, height, stride, &m, k == 0, err) != 0)
            goto out;
    }
    host = malloc(sizeof(float) * (size_t)(C2 * keep * Hl * Wl));
    if (!host) {
        mm_fail(err, "video encode: out of memory");
        goto out;
    }
    {
        mm_tensor kept = mm_tensor_narrow(&moments, 1, 0, keep), cont = {0};
        mm_tensor hv = mm_tensor_wrap(host, mm_cpu(), MM_F32, 4, MM_SHAPE(C2, keep, Hl, Wl));
        if (vae_new(ctx, &cont, MM_F32, 4, kept.shape) == 0) {
            mm_copy(ctx, &cont, &kept);
            mm_copy(ctx, &hv, &cont);
        }
        mm_ctx_sync(ctx, NULL);
        mm_tensor_free(&cont);
        if (mm_ctx_failed(ctx))
            goto ctx_err;
    }
    rc = vv_posterior(c, host, MM_SHAPE(c->latent_channels, keep, Hl, Wl), opts, out, err);
    goto out;
ctx_err:
    mm_ctx_error(ctx, err);
    mm_ctx_clear_error(ctx);
    mm_error_prefix(err, "video encode");
out:
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&moments);
    free(host);
    return rc;
}

int mm_video_vae_encode_image(mm_video_vae *vv, mm_ctx *ctx, const uint8_t *rgb, int width, int height,
                              int64_t stride, const mm_video_encode_options *opts, mm_video_latents *out,
                              mm_error *err)
{
    if (!rgb)
        return mm_fail(err, "video encode: no image");
    frame_pull fp = {.single = rgb};
    return encode(vv, ctx, 1, width, height, stride, &fp, opts, out, err);
}

int mm_video_vae_encode_video(mm_video_vae *vv, mm_ctx *ctx, int64_t n_frames, int width, int height,
                              int64_t stride, mm_vae_frame_source src, void *user,
                              const mm_video_encode_options *opts, mm_video_latents *out, mm_error *err)
{
    if (!src)
        return mm_fail(err, "video encode: no frame source");
    frame_pull fp = {.src = src, .user = user};
    return encode(vv, ctx, n_frames, width, height, stride, &fp, opts, out, err);
}
