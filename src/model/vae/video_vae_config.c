/* The video VAE's configuration: widths and depths from the checkpoint's
 * shapes, the rest (strides, head dim, temporal and tiling geometry,
 * constants) from the options (vae.md §2.3, §2.6, §2.7). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

static int pymod(int a, int m) { return ((a % m) + m) % m; }

static int read_encoder(mm_video_vae_config *c, const mm_safetensors *st, const mm_video_vae_options *o,
                        mm_error *err)
{
    int64_t s[5];
    char name[160];
    if (vae_shape_of(st, "video VAE", "encoder.conv_in.weight", 5, s, err) != 0)
        return -1;
    c->in_channels = (int)s[1];
    c->levels = vae_count_indexed(st, "encoder.down.%d.");
    if (c->levels < 1 || c->levels > MM_VAE_MAX_LEVELS)
        return mm_fail(err, "%s: %d encoder levels (accepted: 1..%d)", mm_st_path(st), c->levels, MM_VAE_MAX_LEVELS);
    if (c->levels != o->levels)
        return mm_fail(err, "%s: the checkpoint has %d encoder levels, the configuration gives strides for %d",
                       mm_st_path(st), c->levels, o->levels);
    c->layers_per_block = vae_count_indexed(st, "encoder.down.0.block.%d.");
    if (c->layers_per_block < 1)
        return mm_fail(err, "%s: encoder.down.0 has no blocks", mm_st_path(st));
    for (int l = 0; l < c->levels; l++) {
        snprintf(name, sizeof name, "encoder.down.%d.block.0.conv1.weight", l);
        if (vae_shape_of(st, "video VAE", name, 5, s, err) != 0)
            return -1;
        c->block_out[l] = (int)s[0];
        if (c->block_out[l] % o->norm_groups != 0)
            return mm_fail(err, "%s: level %d has %d channels, not divisible into %d GroupNorm groups", mm_st_path(st),
                           l, c->block_out[l], o->norm_groups);
        c->space_down[l] = o->space_down[l];
        c->time_down[l] = o->time_down[l];
        if ((c->space_down[l] != 1 && c->space_down[l] != 2) || c->time_down[l] < 1)
            return mm_fail(err, "level %d: space stride %d, time stride %d (accepted: space 1 or 2, time >= 1)", l,
                           c->space_down[l], c->time_down[l]);
        snprintf(name, sizeof name, "encoder.down.%d.downsample.conv.weight", l);
        bool has_down = mm_st_find(st, name) != NULL;
        if (has_down != (c->space_down[l] * c->time_down[l] > 1))
            return mm_fail(err, "%s: level %d %s a downsample but the strides are (%d, %d)", mm_st_path(st), l,
                           has_down ? "has" : "lacks", c->time_down[l], c->space_down[l]);
    }
    c->norm_groups = o->norm_groups;
    c->groupnorm_eps = o->groupnorm_eps;
    if (vae_shape_of(st, "video VAE", "quant_conv.weight", 5, s, err) != 0)
        return -1;
    if (s[0] % 2 || s[0] != s[1])
        return mm_fail(err, "%s: quant_conv.weight [%lld, %lld, ...]: a square map onto mean | logvar expected",
                       mm_st_path(st), (long long)s[0], (long long)s[1]);
    c->latent_channels = (int)(s[0] / 2);
    return 0;
}

static int read_decoder(mm_video_vae_config *c, const mm_safetensors *st, const mm_video_vae_options *o,
                        mm_error *err)
{
    int64_t s[5];
    if (vae_shape_of(st, "video VAE", "decoder.x_embedder.weight", 2, s, err) != 0)
        return -1;
    c->dim = (int)s[0];
    if (c->latent_channels && c->latent_channels != s[1])
        return mm_fail(err, "%s: x_embedder takes %lld channels, the encoder gives %d", mm_st_path(st),
                       (long long)s[1], c->latent_channels);
    c->latent_channels = (int)s[1];
    c->head_dim = o->head_dim;
    if (c->head_dim <= 0 || c->dim % c->head_dim)
        return mm_fail(err, "%s: decoder width %d is not a multiple of the head dim %d", mm_st_path(st), c->dim,
                       c->head_dim);
    c->heads = c->dim / c->head_dim;
    c->layers = vae_count_indexed(st, "decoder.transformer_blocks.%d.");
    if (c->layers < 1)
        return mm_fail(err, "%s: the decoder has no transformer blocks", mm_st_path(st));
    if (vae_shape_of(st, "video VAE", "decoder.transformer_blocks.0.ff.w1.weight", 2, s, err) != 0)
        return -1;
    c->ffn_hidden = (int)(s[0] / 2);
    if (vae_shape_of(st, "video VAE", "decoder.register_tokens", 3, s, err) != 0)
        return -1;
    c->registers = (int)s[1];
    c->norm_eps = o->norm_eps;
    c->rope_theta = o->rope_theta;
    c->rope_dim = (int)floor((double)c->head_dim * o->rope_dim_ratio + 1e-9);
    if (c->rope_dim % 6 != 0 || c->rope_dim > c->head_dim)
        return mm_fail(err, "decoder: %d rotary dims of %d (accepted: a multiple of 6 — 3 axes, rotate-half)",
                       c->rope_dim, c->head_dim);
    c->patch_t = 1;
    c->patch_s = 1;
    for (int l = 0; l < o->levels; l++) {
        c->patch_t *= o->time_down[l];
        c->patch_s *= o->space_down[l];
    }
    if (vae_shape_of(st, "video VAE", "decoder.proj_out.weight", 2, s, err) != 0)
        return -1;
    int64_t per = (int64_t)c->patch_t * c->patch_s * c->patch_s;
    if (s[0] % per || s[1] != c->dim)
        return mm_fail(err, "%s: decoder.proj_out.weight [%lld, %lld]: [channels·%d·%d·%d, %d] expected",
                       mm_st_path(st), (long long)s[0], (long long)s[1], c->patch_t, c->patch_s, c->patch_s, c->dim);
    c->out_channels = (int)(s[0] / per);
    if (c->out_channels != 3)
        return mm_fail(err, "%s: the decoder emits %d channels; RGB (3) expected", mm_st_path(st), c->out_channels);
    return 0;
}

int vv_config_read(mm_video_vae_config *c, const mm_safetensors *st, const mm_video_vae_options *o, int parts,
                   mm_error *err)
{
    memset(c, 0, sizeof *c);
    if (o->levels < 1 || o->levels > MM_VAE_MAX_LEVELS)
        return mm_fail(err, "video VAE options: %d levels (accepted: 1..%d)", o->levels, MM_VAE_MAX_LEVELS);
    c->has_encoder = (parts & MM_VAE_ENCODER) != 0;
    c->has_decoder = (parts & MM_VAE_DECODER) != 0;
    if (!c->has_encoder && !c->has_decoder)
        return mm_fail(err, "video VAE: nothing to load (parts = 0)");
    c->levels = o->levels;
    for (int l = 0; l < o->levels; l++) {
        c->space_down[l] = o->space_down[l];
        c->time_down[l] = o->time_down[l];
    }
    if (c->has_encoder && read_encoder(c, st, o, err) != 0)
        return -1;
    if (c->has_decoder && read_decoder(c, st, o, err) != 0)
        return -1;
    int rt = 1, rs = 1;
    for (int l = 0; l < o->levels; l++)
        rt *= o->time_down[l], rs *= o->space_down[l];
    c->patch_t = rt;
    c->patch_s = rs;
    if (o->clip_length < 1 || o->token_drop < 0)
        return mm_fail(err, "video VAE options: clip length %d, token drop %d", o->clip_length, o->token_drop);
    c->clip_length = o->clip_length;
    c->token_drop = o->token_drop;
    c->tokens_chunk_size = (o->clip_length + rt - 1) / rt;
    c->frame_pre_padding = pymod(-o->clip_length, rt);
    c->token_overlap = pymod(-o->token_drop, c->tokens_chunk_size);
    c->frame_overlap = c->token_overlap * rt - c->frame_pre_padding;
    if (c->frame_overlap < 0)
        c->frame_overlap = 0;
    c->chunk_frames = c->tokens_chunk_size * rt;
    c->tiling = o->tiling;
    c->tile_size = o->tile_size;
    c->tile_overlap_min = o->tile_overlap_min;
    if (c->tiling && (c->tile_size <= 0 || c->tile_size % rs || c->tile_overlap_min % rs ||
                      c->tile_overlap_min >= c->tile_size))
        return mm_fail(err, "video VAE options: tile %d px, overlap >= %d px (accepted: multiples of %d, overlap < tile)",
                       c->tile_size, c->tile_overlap_min, rs);
    c->max_batch_tiles = o->max_batch_tiles;
    c->int8_linears = o->int8_linears;
    if (o->n_latent_const != c->latent_channels)
        return mm_fail(err, "video VAE: %d latent normalization constants for %d latent channels", o->n_latent_const,
                       c->latent_channels);
    memcpy(c->latents_mean, o->latents_mean, sizeof c->latents_mean);
    memcpy(c->latents_std, o->latents_std, sizeof c->latents_std);
    memcpy(c->pixel_mean, o->pixel_mean, sizeof c->pixel_mean);
    memcpy(c->pixel_std, o->pixel_std, sizeof c->pixel_std);
    return 0;
}
