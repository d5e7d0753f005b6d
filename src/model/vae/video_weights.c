/* The video VAE's weights, in their stored dtype (F16 in the Comfy file),
 * except the decoder's f32 islands — x_embedder, register tokens and
 * proj_out, which the released recipe evaluates in f32 (vae.md §2.10) — and
 * the latent / pixel constants, uploaded as f32. On the CPU stored tensors
 * stay views into the checkpoint mapping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

#define KEEP MM_DTYPE_COUNT

static int conv(mm_video_vae *vv, mm_ctx *ctx, const char *prefix, mm_dtype dt, int64_t cout, int64_t cin, int k,
                vv_conv *out, mm_error *err)
{
    char n[200];
    snprintf(n, sizeof n, "%s.weight", prefix);
    if (vae_place(&vv->store, ctx, vv->st, n, dt, 5, MM_SHAPE(cout, cin, k, k, k), &out->w, err) != 0)
        return -1;
    snprintf(n, sizeof n, "%s.bias", prefix);
    return vae_place(&vv->store, ctx, vv->st, n, dt, 1, MM_SHAPE(cout), &out->b, err);
}

static int vec(mm_video_vae *vv, mm_ctx *ctx, const char *name, mm_dtype dt, int64_t n, mm_tensor *out, mm_error *err)
{
    return vae_place(&vv->store, ctx, vv->st, name, dt, 1, MM_SHAPE(n), out, err);
}

static int load_encoder(mm_video_vae *vv, mm_ctx *ctx, mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    const mm_st_entry *e = mm_st_find(vv->st, "encoder.conv_in.weight");
    mm_dtype dt = e->dtype; /* every encoder conv runs in this dtype */
    char p[160], n[200];
    if (conv(vv, ctx, "encoder.conv_in", dt, c->block_out[0], c->in_channels, 3, &vv->conv_in, err) != 0)
        return -1;
    vv->levels = calloc((size_t)c->levels, sizeof *vv->levels);
    if (!vv->levels)
        return mm_fail(err, "out of memory");
    int cin = c->block_out[0];
    for (int l = 0; l < c->levels; l++) {
        int ch = c->block_out[l];
        vv_level *lv = &vv->levels[l];
        lv->blocks = calloc((size_t)c->layers_per_block, sizeof *lv->blocks);
        if (!lv->blocks)
            return mm_fail(err, "out of memory");
        for (int j = 0; j < c->layers_per_block; j++) {
            vv_resblock *b = &lv->blocks[j];
            int bin = j == 0 ? cin : ch;
            snprintf(p, sizeof p, "encoder.down.%d.block.%d", l, j);
#define V(leaf, len, dst) (snprintf(n, sizeof n, "%s.%s", p, leaf), vec(vv, ctx, n, KEEP, len, dst, err))
            if (V("norm1.weight", bin, &b->norm1_w) || V("norm1.bias", bin, &b->norm1_b) ||
                V("norm2.weight", ch, &b->norm2_w) || V("norm2.bias", ch, &b->norm2_b))
                return -1;
#undef V
            snprintf(n, sizeof n, "%s.conv1", p);
            if (conv(vv, ctx, n, dt, ch, bin, 3, &b->conv1, err) != 0)
                return -1;
            snprintf(n, sizeof n, "%s.conv2", p);
            if (conv(vv, ctx, n, dt, ch, ch, 3, &b->conv2, err) != 0)
                return -1;
            snprintf(n, sizeof n, "%s.nin_shortcut.weight", p);
            bool has_sc = mm_st_find(vv->st, n) != NULL;
            if (has_sc != (bin != ch))
                return mm_fail(err, "%s: %s %s a shortcut conv (%d -> %d channels)", mm_st_path(vv->st), p,
                               has_sc ? "has" : "lacks", bin, ch);
            snprintf(n, sizeof n, "%s.nin_shortcut", p);
            if (has_sc && conv(vv, ctx, n, dt, ch, bin, 1, &b->shortcut, err) != 0)
                return -1;
        }
        if (c->space_down[l] * c->time_down[l] > 1) {
            snprintf(n, sizeof n, "encoder.down.%d.downsample.conv", l);
            if (conv(vv, ctx, n, dt, ch, ch, 3, &lv->down, err) != 0)
                return -1;
        }
        cin = ch;
    }
    int z2 = 2 * c->latent_channels;
    if (vec(vv, ctx, "encoder.norm_out.weight", KEEP, cin, &vv->norm_out_w, err) ||
        vec(vv, ctx, "encoder.norm_out.bias", KEEP, cin, &vv->norm_out_b, err) ||
        conv(vv, ctx, "encoder.conv_out", dt, z2, cin, 3, &vv->conv_out, err) ||
        conv(vv, ctx, "quant_conv", dt, z2, z2, 1, &vv->quant, err))
        return -1;
    return 0;
}

static int linear(mm_video_vae *vv, mm_ctx *ctx, const char *prefix, int64_t n_out, int64_t n_in, mm_dtype dt,
                  mm_linear *out, mm_error *err)
{
    mm_linear lin;
    if (mm_linear_load(&lin, vv->st, prefix, err) != 0)
        return -1;
    if (mm_linear_expect(&lin, n_out, n_in, err) != 0) {
        mm_linear_free(&lin);
        return -1;
    }
    if (lin.format != MM_WEIGHT_DENSE || !lin.bias.data || lin.weight.dtype != dt) {
        mm_linear_free(&lin);
        return mm_fail(err, "%s: '%s' must be a dense %s linear [%lld, %lld] with a bias", mm_st_path(vv->st), prefix,
                       mm_dtype_name(dt), (long long)n_out, (long long)n_in);
    }
    if (vv->device.kind == MM_DEVICE_CPU) {
        *out = lin;
        return 0;
    }
    int rc = mm_linear_to_device(out, &lin, ctx, err);
    mm_linear_free(&lin);
    if (rc == 0)
        vv->store.device_bytes += mm_tensor_nbytes(&out->weight) + mm_tensor_nbytes(&out->bias);
    return rc;
}

/* The largest ConvRot rotation group (4^n, at most 256) dividing k, or 0. */
static int convrot_group(int64_t k)
{
    for (int g = 256; g >= 4; g /= 4)
        if (k % g == 0)
            return g;
    return 0;
}

/* int8_linears: a dense linear becomes a ConvRot int8 one in place — its
 * weight rows rotated and quantized (per row, absmax/127, in f32 from the
 * stored values) on the model's device; the bias stays as it is. */
static int quantize_linear(mm_video_vae *vv, mm_ctx *ctx, mm_linear *lin, mm_error *err)
{
    const int64_t N = lin->out_features, K = lin->in_features;
    const int group = convrot_group(K);
    if (!group)
        return mm_fail(err, "%s: %lld inputs cannot be rotated in ConvRot groups (a multiple of 4 is needed) for "
                       "int8 linears", lin->name, (long long)K);
    mm_tensor wf = {0}, q = {0}, s = {0};
    mm_device dev = mm_ctx_device(ctx);
    if (mm_tensor_alloc(&wf, dev, MM_F32, 2, MM_SHAPE(N, K), err) != 0 ||
        mm_tensor_alloc(&q, dev, MM_I8, 2, MM_SHAPE(N, K), err) != 0 ||
        mm_tensor_alloc(&s, dev, MM_F32, 1, MM_SHAPE(N), err) != 0)
        goto fail;
    mm_copy(ctx, &wf, &lin->weight);
    mm_convrot_quantize(ctx, &q, &s, &wf, group);
    if (mm_ctx_sync(ctx, err) != 0)
        goto fail;
    mm_tensor_free(&wf);
    if (lin->weight.storage) /* a device copy of the dense weight; a CPU view owns nothing */
        vv->store.device_bytes -= mm_tensor_nbytes(&lin->weight);
    mm_tensor_free(&lin->weight);
    lin->weight = q;
    lin->weight_scale = s;
    lin->format = MM_WEIGHT_CONVROT_I8;
    lin->group = group;
    vv->store.device_bytes += mm_tensor_nbytes(&q) + mm_tensor_nbytes(&s);
    return 0;
fail:
    mm_tensor_free(&wf);
    mm_tensor_free(&q);
    mm_tensor_free(&s);
    return mm_error_prefix(err, "%s: int8 quantization", lin->name);
}

static int load_decoder(mm_video_vae *vv, mm_ctx *ctx, mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    const int64_t C = c->latent_channels, D = c->dim, F = c->ffn_hidden;
    const mm_st_entry *e = mm_st_find(vv->st, "decoder.transformer_blocks.0.attn.to_qkv.weight");
    if (!e)
        return mm_fail(err, "%s: decoder.transformer_blocks.0.attn.to_qkv.weight not found", mm_st_path(vv->st));
    mm_dtype dt = e->dtype; /* the blocks' GEMM dtype */
    vv->gemm_dtype = dt;
    if (vae_place(&vv->store, ctx, vv->st, "post_quant_conv.weight", dt, 5, MM_SHAPE(C, C, 1, 1, 1),
                  &vv->post_quant_w5, err) != 0 ||
        vec(vv, ctx, "post_quant_conv.bias", KEEP, C, &vv->post_quant_b, err) != 0)
        return -1;
    vv->post_quant_w = mm_tensor_as_strided(&vv->post_quant_w5, 2, MM_SHAPE(C, C), MM_SHAPE(C, 1));
    if (vae_place(&vv->store, ctx, vv->st, "decoder.x_embedder.weight", MM_F32, 2, MM_SHAPE(D, C), &vv->embed_w,
                  err) != 0 ||
        vec(vv, ctx, "decoder.x_embedder.bias", MM_F32, D, &vv->embed_b, err) != 0 ||
        vae_place(&vv->store, ctx, vv->st, "decoder.register_tokens", MM_F32, 3, MM_SHAPE(1, c->registers, D),
                  &vv->registers3, err) != 0)
        return -1;
    vv->registers = mm_tensor_as_strided(&vv->registers3, 2, MM_SHAPE(c->registers, D), MM_SHAPE(D, 1));
    vv->dblocks = calloc((size_t)c->layers, sizeof *vv->dblocks);
    if (!vv->dblocks)
        return mm_fail(err, "out of memory");
    char p[160], n[200];
    for (int i = 0; i < c->layers; i++) {
        vv_dblock *b = &vv->dblocks[i];
        snprintf(p, sizeof p, "decoder.transformer_blocks.%d", i);
#define V(leaf, dst) (snprintf(n, sizeof n, "%s.%s", p, leaf), vec(vv, ctx, n, KEEP, D, dst, err))
        if (V("norm1.weight", &b->norm1) || V("norm2.weight", &b->norm2) || V("scale1", &b->scale1) ||
            V("scale2", &b->scale2))
            return -1;
#undef V
#define L(leaf, no, ni, dst) (snprintf(n, sizeof n, "%s.%s", p, leaf), linear(vv, ctx, n, no, ni, dt, dst, err))
        if (L("attn.to_qkv", 3 * D, D, &b->qkv) || L("attn.to_out", D, D, &b->out) || L("ff.w1", 2 * F, D, &b->w1) ||
            L("ff.w2", D, F, &b->w2))
            return -1;
#undef L
        if (c->int8_linears && (quantize_linear(vv, ctx, &b->qkv, err) || quantize_linear(vv, ctx, &b->out, err) ||
                                quantize_linear(vv, ctx, &b->w1, err) || quantize_linear(vv, ctx, &b->w2, err)))
            return -1;
    }
    int64_t P = (int64_t)c->out_channels * c->patch_t * c->patch_s * c->patch_s;
    if (vec(vv, ctx, "decoder.norm_out.weight", KEEP, D, &vv->dnorm_w, err) ||
        vec(vv, ctx, "decoder.norm_out.bias", KEEP, D, &vv->dnorm_b, err) ||
        vae_place(&vv->store, ctx, vv->st, "decoder.proj_out.weight", MM_F32, 2, MM_SHAPE(P, D), &vv->proj_w, err) ||
        vec(vv, ctx, "decoder.proj_out.bias", MM_F32, P, &vv->proj_b, err))
        return -1;
    return 0;
}

int vv_weights_load(mm_video_vae *vv, mm_ctx *ctx, mm_error *err)
{
    const mm_video_vae_config *c = &vv->cfg;
    if (c->has_encoder && load_encoder(vv, ctx, err) != 0)
        return mm_error_prefix(err, "video VAE encoder");
    if (c->has_decoder && load_decoder(vv, ctx, err) != 0)
        return mm_error_prefix(err, "video VAE decoder");
    int64_t C = c->latent_channels;
    if (vae_upload_f32(&vv->store, ctx, c->latents_mean, 1, MM_SHAPE(C), &vv->latents_mean, err) ||
        vae_upload_f32(&vv->store, ctx, c->latents_std, 1, MM_SHAPE(C), &vv->latents_std, err) ||
        vae_upload_f32(&vv->store, ctx, c->pixel_mean, 1, MM_SHAPE(3), &vv->pixel_mean, err) ||
        vae_upload_f32(&vv->store, ctx, c->pixel_std, 1, MM_SHAPE(3), &vv->pixel_std, err))
        return -1;
    return 0;
}

void vv_weights_free(mm_video_vae *vv)
{
    if (vv->dblocks)
        for (int i = 0; i < vv->cfg.layers; i++) {
            mm_linear_free(&vv->dblocks[i].qkv);
            mm_linear_free(&vv->dblocks[i].out);
            mm_linear_free(&vv->dblocks[i].w1);
            mm_linear_free(&vv->dblocks[i].w2);
        }
    vae_store_free(&vv->store);
    if (vv->levels)
        for (int l = 0; l < vv->cfg.levels; l++)
            free(vv->levels[l].blocks);
    free(vv->levels);
    free(vv->dblocks);
    vv->levels = NULL;
    vv->dblocks = NULL;
}
