/* The audio VAE's encoder (vae.md §3.3, §3.4): a DAC-style conv encoder with
 * Snake1d activations (alpha stored linear), then `pre_block`, a causal
 * attention projection from the trunk width to the 32 latent channels:
 *
 *   y = proj(LN3(x)) + attn(LN1(x))
 *   y = y + w2(gelu_tanh(w0(LNm(LN2(y)))) * w1(LNm(LN2(y))))   (two LayerNorms in a row)
 *
 * attn: qkv rows are contiguous [Q; K; V] (not per-head interleaved), with
 * the bias [q_bias; 0; v_bias]; causal softmax per head; the heads are
 * AVERAGED (not concatenated), the head dim average-pooled to 32, then proj.
 * mean_proj gives the latent (the posterior mean, what H3 uses). All f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/vae/audio_vae_internal.h"

static int snake(mm_ctx *ctx, const mm_tensor *x, const mm_tensor *alpha, mm_tensor *out)
{
    /* alpha is stored [1, C, 1] */
    mm_tensor a = mm_tensor_as_strided(alpha, 1, MM_SHAPE(x->shape[1]), MM_SHAPE(1));
    if (vae_new(ctx, out, MM_F32, 3, x->shape) == 0)
        mm_snake(ctx, out, x, &a, NULL);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* x + conv2(snake(conv1(snake(x)))) */
static int residual_unit(mm_audio_vae *av, mm_ctx *ctx, const av_resunit *u, int dil, const mm_tensor *x,
                         mm_tensor *out, bool capture)
{
    mm_tensor s = {0}, y = {0}, s2 = {0};
    snake(ctx, x, &u->alpha1, &s);
    if (capture)
        vae_capture(&av->capture, "snake", &s);
    av_conv1d(ctx, &s, &u->conv1, 1, dil, 3 * dil, 3 * dil, 1, &y);
    mm_tensor_free(&s);
    snake(ctx, &y, &u->alpha2, &s2);
    mm_tensor_free(&y);
    av_conv1d(ctx, &s2, &u->conv2, 1, 1, 0, 0, 1, out);
    mm_tensor_free(&s2);
    mm_add(ctx, out, x, out);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* a [R, K] . W^T [K, N] + b -> out [R, N] (views allowed for a). */
static void linear(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *w, const mm_tensor *b)
{
    mm_tensor wt = mm_tensor_transpose(w, 0, 1);
    mm_matmul(ctx, out, a, &wt, b);
}

/* Causal softmax attention per head, written out as two batched GEMMs and a
 * masked softmax, all f32: the sequence is short (40 latents per second)
 * and the head dim (256 in the released model) is beyond what fused
 * attention kernels take. qkv [T, 3D] contiguous Q | K | V -> o [H, T, hd]. */
static int causal_attention(mm_ctx *ctx, const mm_tensor *qkv, int64_t H, int64_t hd, mm_tensor *o)
{
    if (mm_ctx_failed(ctx))
        return -1;
    const int64_t T = qkv->shape[0], D = H * hd;
    mm_tensor s = {0}, mask = {0};
    float *m = malloc(sizeof(float) * (size_t)(T * T));
    if (!m)
        return mm_ctx_fail(ctx, "audio attention: out of memory");
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
            m[i * T + j] = j <= i ? 0.0f : -1e30f; /* exp underflows to exactly 0 */
    if (vae_new(ctx, &mask, MM_F32, 2, MM_SHAPE(T, T)) == 0 && vae_new(ctx, &s, MM_F32, 3, MM_SHAPE(H, T, T)) == 0) {
        mm_tensor hm = mm_tensor_wrap(m, mm_cpu(), MM_F32, 2, MM_SHAPE(T, T));
        mm_copy(ctx, &mask, &hm);
        /* [T, D] column blocks viewed [H, T, hd] */
        mm_tensor q = mm_tensor_as_strided(qkv, 3, MM_SHAPE(H, T, hd), MM_SHAPE(hd, 3 * D, 1));
        mm_tensor k0 = mm_tensor_narrow(qkv, 1, D, D), v0 = mm_tensor_narrow(qkv, 1, 2 * D, D);
        mm_tensor kt = mm_tensor_as_strided(&k0, 3, MM_SHAPE(H, hd, T), MM_SHAPE(hd, 1, 3 * D));
        mm_tensor v = mm_tensor_as_strided(&v0, 3, MM_SHAPE(H, T, hd), MM_SHAPE(hd, 3 * D, 1));
        mm_gemm(ctx, &s, &q, &kt, NULL, 1.0f / sqrtf((float)hd), 0.0f);
        mm_tensor mv = mm_tensor_as_strided(&mask, 3, MM_SHAPE(H, T, T), MM_SHAPE(0, T, 1));
        mm_add(ctx, &s, &s, &mv);
        mm_softmax(ctx, &s, &s);
        mm_matmul(ctx, o, &s, &v, NULL);
    }
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&s);
    mm_tensor_free(&mask);
    free(m);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* pre_block for one batch item: xt [T, D] -> y [T, 32] (attn part kept in attn_out). */
static int pre_block(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *xt, mm_tensor *attn_out, mm_tensor *y)
{
    const mm_audio_vae_config *c = &av->cfg;
    const int64_t T = xt->shape[0], D = c->latent_dim, H = c->heads, hd = c->head_dim, L = c->latent_channels;
    const int64_t Hm = c->mlp_hidden, g = c->pool_group;
    const float eps = c->layernorm_eps;
    mm_tensor n = {0}, qkv = {0}, o = {0}, r1 = {0}, r2 = {0}, r3 = {0}, p = {0}, n2 = {0}, g0 = {0}, g1 = {0};
    vae_new(ctx, &n, MM_F32, 2, MM_SHAPE(T, D));
    vae_new(ctx, &p, MM_F32, 2, MM_SHAPE(T, L));
    mm_layernorm(ctx, &n, xt, &av->norm3_w, &av->norm3_b, eps);
    linear(ctx, &p, &n, &av->proj_w, &av->proj_b);
    mm_layernorm(ctx, &n, xt, &av->norm1_w, &av->norm1_b, eps);
    if (vae_new(ctx, &qkv, MM_F32, 2, MM_SHAPE(T, 3 * D)) == 0 && vae_new(ctx, &o, MM_F32, 3, MM_SHAPE(H, T, hd)) == 0)
        linear(ctx, &qkv, &n, &av->qkv_w, &av->qkv_b);
    causal_attention(ctx, &qkv, H, hd, &o);
    mm_tensor_free(&qkv);
    /* mean over heads and average pool hd -> 32, as means of means */
    if (vae_new(ctx, &r1, MM_F32, 3, MM_SHAPE(H, T, L)) == 0 && vae_new(ctx, &r2, MM_F32, 3, MM_SHAPE(T, L, H)) == 0 &&
        vae_new(ctx, &r3, MM_F32, 2, MM_SHAPE(T, L)) == 0) {
        mm_tensor o4 = mm_tensor_unflatten(&o, 2, 2, MM_SHAPE(L, g));
        mm_reduce_rows(ctx, &r1, &o4, MM_REDUCE_MEAN);
        mm_tensor r1p = mm_tensor_permute(&r1, (const int[]){1, 2, 0});
        mm_copy(ctx, &r2, &r1p);
        mm_reduce_rows(ctx, &r3, &r2, MM_REDUCE_MEAN);
        linear(ctx, attn_out, &r3, &av->attn_proj_w, &av->attn_proj_b);
    }
    mm_add(ctx, y, &p, attn_out);
    /* MLP: its own LayerNorm after norm2 */
    if (vae_new(ctx, &n2, MM_F32, 2, MM_SHAPE(T, L)) == 0 && vae_new(ctx, &g0, MM_F32, 2, MM_SHAPE(T, Hm)) == 0 &&
        vae_new(ctx, &g1, MM_F32, 2, MM_SHAPE(T, Hm)) == 0) {
        mm_layernorm(ctx, &n2, y, &av->norm2_w, &av->norm2_b, eps);
        mm_layernorm(ctx, &n2, &n2, &av->mlp_norm_w, &av->mlp_norm_b, eps);
        linear(ctx, &g0, &n2, &av->w0_w, &av->w0_b);
        linear(ctx, &g1, &n2, &av->w1_w, &av->w1_b);
        mm_glu(ctx, &g0, &g0, &g1, MM_ACT_GELU_TANH);
        linear(ctx, &p, &g0, &av->w2_w, &av->w2_b);
        mm_add(ctx, y, y, &p);
    }
    mm_tensor *all[] = {&n, &o, &r1, &r2, &r3, &p, &n2, &g0, &g1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

int av_encoder_forward(mm_audio_vae *av, mm_ctx *ctx, const mm_tensor *x, mm_tensor *z)
{
    const mm_audio_vae_config *c = &av->cfg;
    const int64_t B = x->shape[0], L = c->latent_channels;
    mm_tensor h = {0}, next = {0}, s = {0};
    memset(z, 0, sizeof *z);
    av_conv1d(ctx, x, &av->conv_in, 1, 1, 3, 3, 1, &h);
    vae_capture(&av->capture, "conv_in", &h);
    for (int b = 0; b < c->n_encoder_blocks && !mm_ctx_failed(ctx); b++) {
        const av_enc_block *bl = &av->blocks[b];
        for (int r = 0; r < 3; r++) {
            residual_unit(av, ctx, &bl->units[r], c->residual_dilations[r], &h, &next, b == 0 && r == 0);
            mm_tensor_free(&h);
            h = next;
            if (b == 0 && r == 0)
                vae_capture(&av->capture, "residual_unit0", &h);
        }
        snake(ctx, &h, &bl->alpha, &s);
        mm_tensor_free(&h);
        av_conv1d(ctx, &s, &bl->down, bl->stride, 1, (bl->stride + 1) / 2, (bl->stride + 1) / 2, 1, &h);
        mm_tensor_free(&s);
        if (b == 0)
            vae_capture(&av->capture, "enc_block1", &h);
    }
    snake(ctx, &h, &av->final_alpha, &s);
    mm_tensor_free(&h);
    av_conv1d(ctx, &s, &av->conv_out, 1, 1, 1, 1, 1, &h);
    mm_tensor_free(&s);
    vae_capture(&av->capture, "encoder_out", &h);
    const int64_t T = h.shape[2], D = c->latent_dim;
    mm_tensor attn = {0}, y = {0}, xt = {0}, zt = {0};
    vae_new(ctx, &attn, MM_F32, 3, MM_SHAPE(B, T, L));
    vae_new(ctx, &y, MM_F32, 3, MM_SHAPE(B, T, L));
    vae_new(ctx, &xt, MM_F32, 2, MM_SHAPE(T, D));
    for (int64_t b = 0; b < B && !mm_ctx_failed(ctx); b++) {
        mm_tensor hb = mm_tensor_select(&h, 0, b);
        mm_tensor hbt = mm_tensor_transpose(&hb, 0, 1); /* [T, D] */
        mm_copy(ctx, &xt, &hbt);
        mm_tensor ab = mm_tensor_select(&attn, 0, b), yb = mm_tensor_select(&y, 0, b);
        pre_block(av, ctx, &xt, &ab, &yb);
    }
    mm_tensor_free(&xt);
    mm_tensor_free(&h);
    vae_capture(&av->capture, "preblock_attn", &attn);
    vae_capture(&av->capture, "preblock_out", &y);
    /* mean_proj (k = 1) on [B, T, 32] rows, then [B, 32, T] */
    if (vae_new(ctx, &zt, MM_F32, 3, MM_SHAPE(B, T, L)) == 0 && vae_new(ctx, z, MM_F32, 3, MM_SHAPE(B, L, T)) == 0) {
        mm_tensor wt = mm_tensor_transpose(&av->mean_w, 0, 1);
        mm_matmul(ctx, &zt, &y, &wt, &av->mean_b);
        mm_tensor ztt = mm_tensor_transpose(&zt, 1, 2);
        mm_copy(ctx, z, &ztt);
    }
    mm_tensor_free(&zt);
    mm_tensor_free(&attn);
    mm_tensor_free(&y);
    vae_capture(&av->capture, "z", z);
    if (mm_ctx_failed(ctx)) {
        mm_tensor_free(z);
        return -1;
    }
    return 0;
}
