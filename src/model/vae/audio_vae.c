/* The audio VAE: configuration from the checkpoint's shapes plus the
 * options, weights (all f32), and the public encode/decode entry points
 * (vae.md §3). Stereo travels as two batch items; the hop (800) is the
 * product of the decoder rates and must equal the encoder's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vae/audio_vae_internal.h"

static int read_config(mm_audio_vae_config *c, const mm_safetensors *st, const mm_audio_vae_options *o, int parts,
                       mm_error *err)
{
    int64_t s[3];
    char n[200];
    memset(c, 0, sizeof *c);
    c->has_encoder = (parts & MM_VAE_ENCODER) != 0;
    c->has_decoder = (parts & MM_VAE_DECODER) != 0;
    if (!c->has_encoder && !c->has_decoder)
        return mm_fail(err, "audio VAE: nothing to load (parts = 0)");
    c->sample_rate = o->sample_rate;
    c->layernorm_eps = o->layernorm_eps;
    memcpy(c->dilations, o->dilations, sizeof c->dilations);
    memcpy(c->residual_dilations, o->residual_dilations, sizeof c->residual_dilations);
    if (vae_shape_of(st, "audio VAE", "mean_proj.weight", 3, s, err) != 0)
        return -1;
    c->latent_channels = (int)s[0];
    if (o->n_latent_const != c->latent_channels)
        return mm_fail(err, "audio VAE: %d latent normalization constants for %d latent channels", o->n_latent_const,
                       c->latent_channels);
    memcpy(c->latents_mean, o->latents_mean, sizeof c->latents_mean);
    memcpy(c->latents_std, o->latents_std, sizeof c->latents_std);
    int hop_enc = 0, hop_dec = 0;
    if (c->has_encoder) {
        if (vae_shape_of(st, "audio VAE", "encoder.block.0.weight", 3, s, err) != 0)
            return -1;
        c->encoder_dim = (int)s[0];
        int count = vae_count_indexed(st, "encoder.block.%d.");
        c->n_encoder_blocks = count - 3;
        if (c->n_encoder_blocks < 1 || c->n_encoder_blocks > MM_VAE_MAX_LEVELS)
            return mm_fail(err, "%s: %d encoder blocks (accepted: 1..%d)", mm_st_path(st), c->n_encoder_blocks,
                           MM_VAE_MAX_LEVELS);
        if (c->n_encoder_blocks != o->n_encoder_rates)
            return mm_fail(err, "%s: %d encoder blocks, the configuration gives %d rates", mm_st_path(st),
                           c->n_encoder_blocks, o->n_encoder_rates);
        hop_enc = 1;
        for (int b = 0; b < c->n_encoder_blocks; b++) {
            c->encoder_rates[b] = o->encoder_rates[b];
            snprintf(n, sizeof n, "encoder.block.%d.block.4.weight", b + 1);
            if (vae_shape_of(st, "audio VAE", n, 3, s, err) != 0)
                return -1;
            if (s[2] != 2 * o->encoder_rates[b])
                return mm_fail(err, "%s: %s has kernel %lld; rate %d needs %d", mm_st_path(st), n, (long long)s[2],
                               o->encoder_rates[b], 2 * o->encoder_rates[b]);
            hop_enc *= o->encoder_rates[b];
        }
        snprintf(n, sizeof n, "encoder.block.%d.weight", c->n_encoder_blocks + 2);
        if (vae_shape_of(st, "audio VAE", n, 3, s, err) != 0)
            return -1;
        c->latent_dim = (int)s[0];
        if (vae_shape_of(st, "audio VAE", "pre_block.attn.qkv.weight", 2, s, err) != 0)
            return -1;
        if (s[0] != 3 * c->latent_dim || s[1] != c->latent_dim)
            return mm_fail(err, "%s: pre_block.attn.qkv.weight [%lld, %lld]; [%d, %d] expected", mm_st_path(st),
                           (long long)s[0], (long long)s[1], 3 * c->latent_dim, c->latent_dim);
        c->heads = o->heads;
        if (c->heads < 1 || c->latent_dim % c->heads)
            return mm_fail(err, "audio VAE: %d heads do not divide the trunk width %d", c->heads, c->latent_dim);
        c->head_dim = c->latent_dim / c->heads;
        if (c->head_dim % c->latent_channels)
            return mm_fail(err, "audio VAE: head dim %d does not pool evenly to %d channels", c->head_dim,
                           c->latent_channels);
        c->pool_group = c->head_dim / c->latent_channels;
        if (vae_shape_of(st, "audio VAE", "pre_block.mlp.w0.weight", 2, s, err) != 0)
            return -1;
        c->mlp_hidden = (int)s[0];
    }
    if (c->has_decoder) {
        if (vae_shape_of(st, "audio VAE", "decoder.conv_pre.weight", 3, s, err) != 0)
            return -1;
        c->decoder_dim = (int)s[0];
        c->n_stages = vae_count_indexed(st, "decoder.ups.%d.");
        if (c->n_stages < 1 || c->n_stages != o->n_decoder_rates)
            return mm_fail(err, "%s: %d decoder stages, the configuration gives %d rates", mm_st_path(st), c->n_stages,
                           o->n_decoder_rates);
        int nres = vae_count_indexed(st, "decoder.resblocks.%d.");
        if (nres % c->n_stages || nres / c->n_stages < 1 || nres / c->n_stages > 3)
            return mm_fail(err, "%s: %d AMP blocks for %d stages", mm_st_path(st), nres, c->n_stages);
        c->n_amp_kernels = nres / c->n_stages;
        hop_dec = 1;
        int ch = c->decoder_dim;
        for (int i = 0; i < c->n_stages; i++) {
            snprintf(n, sizeof n, "decoder.ups.%d.0.weight", i);
            if (vae_shape_of(st, "audio VAE", n, 3, s, err) != 0)
                return -1;
            if (s[0] != ch || s[1] != ch / 2)
                return mm_fail(err, "%s: %s [%lld, %lld, k]; [%d, %d, k] expected", mm_st_path(st), n,
                               (long long)s[0], (long long)s[1], ch, ch / 2);
            c->decoder_rates[i] = o->decoder_rates[i];
            c->decoder_kernels[i] = (int)s[2];
            if ((s[2] - o->decoder_rates[i]) % 2 || s[2] < o->decoder_rates[i])
                return mm_fail(err, "%s: kernel %lld cannot up-sample by %d with symmetric padding", n,
                               (long long)s[2], o->decoder_rates[i]);
            hop_dec *= o->decoder_rates[i];
            ch /= 2;
        }
        c->final_channels = ch;
        for (int m = 0; m < c->n_amp_kernels; m++) {
            snprintf(n, sizeof n, "decoder.resblocks.%d.convs1.0.weight", m);
            if (vae_shape_of(st, "audio VAE", n, 3, s, err) != 0)
                return -1;
            c->amp_kernels[m] = (int)s[2];
        }
    }
    if (hop_enc && hop_dec && hop_enc != hop_dec)
        return mm_fail(err, "audio VAE: the encoder hops %d samples per latent, the decoder %d", hop_enc, hop_dec);
    c->hop = hop_enc ? hop_enc : hop_dec;
    return 0;
}

#define F32 MM_F32

static int place(mm_audio_vae *av, mm_ctx *ctx, const char *name, int ndim, const int64_t *shape, mm_tensor *out,
                 mm_error *err)
{
    return vae_place(&av->store, ctx, av->st, name, F32, ndim, shape, out, err);
}

static int conv(mm_audio_vae *av, mm_ctx *ctx, const char *prefix, int64_t a, int64_t b, int64_t k, bool bias,
                av_conv *out, mm_error *err)
{
    char n[200];
    snprintf(n, sizeof n, "%s.weight", prefix);
    if (place(av, ctx, n, 3, MM_SHAPE(a, b, k), &out->w, err) != 0)
        return -1;
    if (!bias)
        return 0;
    snprintf(n, sizeof n, "%s.bias", prefix);
    return place(av, ctx, n, 1, MM_SHAPE(a), &out->b, err);
}

static int snake_alpha(mm_audio_vae *av, mm_ctx *ctx, const char *name, int64_t ch, mm_tensor *out, mm_error *err)
{
    return place(av, ctx, name, 3, MM_SHAPE(1, ch, 1), out, err);
}

static int load_encoder(mm_audio_vae *av, mm_ctx *ctx, mm_error *err)
{
    const mm_audio_vae_config *c = &av->cfg;
    char p[160], n[200];
    int64_t ch = c->encoder_dim;
    if (conv(av, ctx, "encoder.block.0", ch, 1, 7, true, &av->conv_in, err) != 0)
        return -1;
    av->blocks = calloc((size_t)c->n_encoder_blocks, sizeof *av->blocks);
    if (!av->blocks)
        return mm_fail(err, "out of memory");
    for (int b = 0; b < c->n_encoder_blocks; b++) {
        av_enc_block *bl = &av->blocks[b];
        bl->stride = c->encoder_rates[b];
        for (int r = 0; r < 3; r++) {
            av_resunit *u = &bl->units[r];
            snprintf(p, sizeof p, "encoder.block.%d.block.%d.block", b + 1, r);
#define N(leaf) (snprintf(n, sizeof n, "%s.%s", p, leaf), n)
            if (snake_alpha(av, ctx, N("0.alpha"), ch, &u->alpha1, err) ||
                conv(av, ctx, N("1"), ch, ch, 7, true, &u->conv1, err) ||
                snake_alpha(av, ctx, N("2.alpha"), ch, &u->alpha2, err) ||
                conv(av, ctx, N("3"), ch, ch, 1, true, &u->conv2, err))
                return -1;
#undef N
        }
        snprintf(n, sizeof n, "encoder.block.%d.block.3.alpha", b + 1);
        if (snake_alpha(av, ctx, n, ch, &bl->alpha, err) != 0)
            return -1;
        snprintf(n, sizeof n, "encoder.block.%d.block.4", b + 1);
        if (conv(av, ctx, n, 2 * ch, ch, 2 * bl->stride, true, &bl->down, err) != 0)
            return -1;
        ch *= 2;
    }
    const int64_t D = c->latent_dim, L = c->latent_channels, Hm = c->mlp_hidden;
    snprintf(n, sizeof n, "encoder.block.%d.alpha", c->n_encoder_blocks + 1);
    if (snake_alpha(av, ctx, n, ch, &av->final_alpha, err) != 0)
        return -1;
    snprintf(n, sizeof n, "encoder.block.%d", c->n_encoder_blocks + 2);
    if (conv(av, ctx, n, D, ch, 3, true, &av->conv_out, err) != 0)
        return -1;
#define V(name, len, dst) place(av, ctx, name, 1, MM_SHAPE(len), dst, err)
#define M(name, r, k, dst) place(av, ctx, name, 2, MM_SHAPE(r, k), dst, err)
    if (V("pre_block.norm1.weight", D, &av->norm1_w) || V("pre_block.norm1.bias", D, &av->norm1_b) ||
        V("pre_block.norm3.weight", D, &av->norm3_w) || V("pre_block.norm3.bias", D, &av->norm3_b) ||
        V("pre_block.norm2.weight", L, &av->norm2_w) || V("pre_block.norm2.bias", L, &av->norm2_b) ||
        V("pre_block.mlp.norm.weight", L, &av->mlp_norm_w) || V("pre_block.mlp.norm.bias", L, &av->mlp_norm_b) ||
        M("pre_block.attn.qkv.weight", 3 * D, D, &av->qkv_w) ||
        M("pre_block.attn.proj.weight", L, L, &av->attn_proj_w) || V("pre_block.attn.proj.bias", L, &av->attn_proj_b) ||
        M("pre_block.proj.weight", L, D, &av->proj_w) || V("pre_block.proj.bias", L, &av->proj_b) ||
        M("pre_block.mlp.w0.weight", Hm, L, &av->w0_w) || V("pre_block.mlp.w0.bias", Hm, &av->w0_b) ||
        M("pre_block.mlp.w1.weight", Hm, L, &av->w1_w) || V("pre_block.mlp.w1.bias", Hm, &av->w1_b) ||
        M("pre_block.mlp.w2.weight", L, Hm, &av->w2_w) || V("pre_block.mlp.w2.bias", L, &av->w2_b) ||
        place(av, ctx, "mean_proj.weight", 3, MM_SHAPE(L, L, 1), &av->mean_w3, err) ||
        V("mean_proj.bias", L, &av->mean_b))
        return -1;
#undef V
#undef M
    av->mean_w = mm_tensor_as_strided(&av->mean_w3, 2, MM_SHAPE(L, L), MM_SHAPE(L, 1));
    /* the qkv bias: [q_bias; zero_k_bias; v_bias] (the key bias is the stored zero buffer) */
    static const char *const parts[3] = {"pre_block.attn.q_bias", "pre_block.attn.zero_k_bias",
                                         "pre_block.attn.v_bias"};
    float *bias = malloc(sizeof(float) * 3 * (size_t)D);
    if (!bias)
        return mm_fail(err, "out of memory");
    for (int k = 0; k < 3; k++) {
        mm_tensor t;
        if (mm_st_get_expect(av->st, parts[k], MM_F32, 1, MM_SHAPE(D), &t, err) != 0) {
            free(bias);
            return mm_error_prefix(err, "%s", mm_st_path(av->st));
        }
        memcpy(bias + k * D, t.data, sizeof(float) * (size_t)D);
    }
    int rc = vae_upload_f32(&av->store, ctx, bias, 1, MM_SHAPE(3 * D), &av->qkv_b, err);
    free(bias);
    return rc;
}

static int load_act(mm_audio_vae *av, mm_ctx *ctx, const char *prefix, int64_t ch, av_act *a, mm_error *err)
{
    char n[220];
    snprintf(n, sizeof n, "%s.act.alpha", prefix);
    if (place(av, ctx, n, 1, MM_SHAPE(ch), &a->alpha, err) != 0)
        return -1;
    snprintf(n, sizeof n, "%s.act.beta", prefix);
    if (place(av, ctx, n, 1, MM_SHAPE(ch), &a->beta, err) != 0)
        return -1;
    static const char *const leaf[2] = {"upsample.filter", "downsample.lowpass.filter"};
    for (int k = 0; k < 2; k++) {
        snprintf(n, sizeof n, "%s.%s", prefix, leaf[k]);
        const mm_st_entry *e = mm_st_find(av->st, n);
        if (!e || e->dtype != MM_F32 || e->ndim != 3 || e->shape[0] != 1 || e->shape[1] != 1 || e->shape[2] < 2 ||
            e->shape[2] % 2)
            return mm_fail(err, "%s: '%s' must be an F32 [1, 1, K] filter with K even", mm_st_path(av->st), n);
        int64_t K = e->shape[2];
        float *w = malloc(sizeof(float) * (size_t)(ch * K));
        if (!w)
            return mm_fail(err, "out of memory");
        /* the up-sampler multiplies its output by the ratio (2): exact when folded into the taps */
        for (int64_t c = 0; c < ch; c++)
            for (int64_t j = 0; j < K; j++)
                w[c * K + j] = ((const float *)e->data)[j] * (k == 0 ? 2.0f : 1.0f);
        int rc = vae_upload_f32(&av->store, ctx, w, 3, MM_SHAPE(ch, 1, K), k == 0 ? &a->up_w : &a->down_w, err);
        free(w);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int load_decoder(mm_audio_vae *av, mm_ctx *ctx, mm_error *err)
{
    const mm_audio_vae_config *c = &av->cfg;
    const mm_st_entry *e = mm_st_find(av->st, "dec_in_proj.weight");
    if (!e || e->ndim != 3)
        return mm_fail(err, "%s: dec_in_proj.weight [D, %d, 1] not found", mm_st_path(av->st), c->latent_channels);
    int64_t din = e->shape[0];
    char n[200], p[160];
    if (conv(av, ctx, "dec_in_proj", din, c->latent_channels, 1, true, &av->dec_in, err) ||
        conv(av, ctx, "decoder.conv_pre", c->decoder_dim, din, 7, true, &av->conv_pre, err))
        return -1;
    av->ups = calloc((size_t)c->n_stages, sizeof *av->ups);
    av->amps = calloc((size_t)(c->n_stages * c->n_amp_kernels), sizeof *av->amps);
    if (!av->ups || !av->amps)
        return mm_fail(err, "out of memory");
    int64_t ch = c->decoder_dim;
    for (int i = 0; i < c->n_stages; i++) {
        snprintf(n, sizeof n, "decoder.ups.%d.0.weight", i);
        if (place(av, ctx, n, 3, MM_SHAPE(ch, ch / 2, c->decoder_kernels[i]), &av->ups[i].w, err) != 0)
            return -1;
        snprintf(n, sizeof n, "decoder.ups.%d.0.bias", i);
        if (place(av, ctx, n, 1, MM_SHAPE(ch / 2), &av->ups[i].b, err) != 0)
            return -1;
        ch /= 2;
        for (int m = 0; m < c->n_amp_kernels; m++) {
            int q = i * c->n_amp_kernels + m, K = c->amp_kernels[m];
            av_amp *a = &av->amps[q];
            a->kernel = K;
            for (int k = 0; k < 3; k++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs1.%d", q, k);
                if (conv(av, ctx, p, ch, ch, K, true, &a->convs1[k], err) != 0)
                    return -1;
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs2.%d", q, k);
                if (conv(av, ctx, p, ch, ch, K, true, &a->convs2[k], err) != 0)
                    return -1;
            }
            for (int k = 0; k < 6; k++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.activations.%d", q, k);
                if (load_act(av, ctx, p, ch, &a->acts[k], err) != 0)
                    return -1;
            }
        }
    }
    if (load_act(av, ctx, "decoder.activation_post", ch, &av->act_post, err) != 0)
        return -1;
    if (mm_st_find(av->st, "decoder.conv_post.bias"))
        return mm_fail(err, "%s: decoder.conv_post has a bias; the BigVGAN output conv has none", mm_st_path(av->st));
    return conv(av, ctx, "decoder.conv_post", 1, ch, 7, false, &av->conv_post, err);
}

int mm_audio_vae_load(mm_audio_vae **out, const char *path, const mm_audio_vae_options *opts, int parts, mm_ctx *ctx,
                      mm_error *err)
{
    *out = NULL;
    mm_audio_vae_options rel;
    if (!opts) {
        mm_audio_vae_options_release(&rel);
        opts = &rel;
    }
    mm_audio_vae *av = calloc(1, sizeof *av);
    if (!av)
        return mm_fail(err, "out of memory");
    if (mm_st_open(&av->st, path, err) != 0) {
        free(av);
        return mm_error_prefix(err, "audio VAE");
    }
    const mm_audio_vae_config *c = &av->cfg;
    int rc = read_config(&av->cfg, av->st, opts, parts, err);
    if (rc == 0 && c->has_encoder && load_encoder(av, ctx, err) != 0)
        rc = mm_error_prefix(err, "audio VAE encoder");
    if (rc == 0 && c->has_decoder && load_decoder(av, ctx, err) != 0)
        rc = mm_error_prefix(err, "audio VAE decoder");
    if (rc == 0) {
        float inv[MM_VAE_MAX_LATENT];
        for (int k = 0; k < c->latent_channels; k++)
            inv[k] = 1.0f / c->latents_std[k];
        int64_t L = c->latent_channels;
        rc = vae_upload_f32(&av->store, ctx, c->latents_mean, 1, MM_SHAPE(L), &av->latents_mean, err) ||
             vae_upload_f32(&av->store, ctx, c->latents_std, 1, MM_SHAPE(L), &av->latents_std, err) ||
             vae_upload_f32(&av->store, ctx, inv, 1, MM_SHAPE(L), &av->latents_inv_std, err);
    }
    if (rc != 0) {
        mm_audio_vae_free(av);
        return -1;
    }
    *out = av;
    return 0;
}

void mm_audio_vae_free(mm_audio_vae *av)
{
    if (!av)
        return;
    vae_store_free(&av->store);
    free(av->blocks);
    free(av->ups);
    free(av->amps);
    mm_st_close(av->st);
    free(av);
}

const mm_audio_vae_config *mm_audio_vae_get_config(const mm_audio_vae *av) { return &av->cfg; }
size_t mm_audio_vae_weight_bytes(const mm_audio_vae *av) { return av->store.device_bytes; }

void mm_audio_vae_set_capture(mm_audio_vae *av, const mm_vae_capture *cap)
{
    if (cap)
        av->capture = *cap;
    else
        memset(&av->capture, 0, sizeof av->capture);
}
