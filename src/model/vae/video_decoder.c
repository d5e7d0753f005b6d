/* The video VAE's ViT decoder on a batch of tiles (vae.md §2.6).
 *
 * Each tile is its own sequence: t·h·w latent tokens (t-major, then h, w)
 * through post_quant_conv and the f32 x_embedder, then the register tokens
 * and one all-zero token; rotary positions normalized to the tile. Tiles of
 * a batch share one set of rows and one GEMM per linear; attention keeps
 * them apart with segment offsets (block-diagonal), so batching all tiles of
 * a chunk costs nothing in exactness and turns 28 small passes into one.
 *
 * Precision (the released recipe): GEMM inputs in the stored weight dtype
 * (F16) with f32 accumulation; RMSNorm, q/k norm, LayerNorm statistics in
 * f32; the residual stream in f32 (the reference keeps it in F16 with F16
 * weights; f32 is the spec's recommendation and lies between the reference
 * and its fp32 evaluation); x_embedder and proj_out in f32. to_qkv rows are
 * per-head interleaved [q | k | v] (64 each); w1 rows are [gate; value].
 * With int8_linears the four block linears run as ConvRot W8A8 on the same
 * F16 activations (video_weights.c quantizes them at load). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/vae/video_vae_internal.h"

/* cos/sin [S, rope_dim] for one t x h x w tile (f32, host). */
static void rope_tables(const mm_video_vae_config *c, int64_t t, int64_t h, int64_t w, float *cosv, float *sinv)
{
    const int rd = c->rope_dim, nf = rd / 6;
    const int64_t n = t * h * w, S = n + c->registers + 1;
    float inv_freq[MM_VAE_MAX_LATENT];
    for (int j = 0; j < nf; j++)
        inv_freq[j] = 1.0f / powf(c->rope_theta, (float)((double)j * (6.0 / rd)));
    const float two_pi = (float)(2.0 * M_PI);
    const int64_t size[3] = {t, h, w};
    for (int64_t s = 0; s < S; s++) {
        int64_t idx[3] = {0, 0, 0};
        bool token = s < n;
        if (token) {
            idx[0] = s / (h * w);
            idx[1] = (s / w) % h;
            idx[2] = s % w;
        }
        for (int axis = 0; axis < 3; axis++) {
            /* 2·((k + 0.5)/n) − 1, in f32 as the reference's arange; suffix tokens at 0 */
            float pos = token ? 2.0f * (((float)idx[axis] + 0.5f) / (float)size[axis]) - 1.0f : 0.0f;
            float scaled = two_pi * pos;
            for (int j = 0; j < nf; j++) {
                float a = scaled * inv_freq[j];
                float cv = cosf(a), sv = sinf(a);
                int col = axis * nf + j;
                cosv[s * rd + col] = cosv[s * rd + rd / 2 + col] = cv;
                sinv[s * rd + col] = sinv[s * rd + rd / 2 + col] = sv;
            }
        }
    }
}

/* Device cos/sin [n·S, rope_dim] in dtype dt; the one-tile f32 tables captured. */
static int rope_upload(mm_video_vae *vv, mm_ctx *ctx, int64_t t, int64_t h, int64_t w, int n, mm_dtype dt,
                       bool capture, mm_tensor *cos_out, mm_tensor *sin_out)
{
    const mm_video_vae_config *c = &vv->cfg;
    const int64_t S = t * h * w + c->registers + 1, rd = c->rope_dim;
    float *host = malloc(sizeof(float) * 2 * (size_t)(S * rd));
    if (!host)
        return mm_ctx_fail(ctx, "rope: out of memory");
    rope_tables(c, t, h, w, host, host + S * rd);
    mm_tensor one = {0};
    if (vae_new(ctx, &one, MM_F32, 2, MM_SHAPE(2 * S, rd)) == 0) {
        mm_tensor src = mm_tensor_wrap(host, mm_cpu(), MM_F32, 2, MM_SHAPE(2 * S, rd));
        mm_copy(ctx, &one, &src);
    }
    mm_tensor cos1 = mm_tensor_narrow(&one, 0, 0, S), sin1 = mm_tensor_narrow(&one, 0, S, S);
    if (capture && !mm_ctx_failed(ctx)) {
        vae_capture(&vv->capture, "rope_cos", &cos1);
        vae_capture(&vv->capture, "rope_sin", &sin1);
    }
    if (vae_new(ctx, cos_out, dt, 2, MM_SHAPE(n * S, rd)) == 0 && vae_new(ctx, sin_out, dt, 2, MM_SHAPE(n * S, rd)) == 0)
        for (int b = 0; b < n; b++) {
            mm_tensor dc = mm_tensor_narrow(cos_out, 0, b * S, S), ds = mm_tensor_narrow(sin_out, 0, b * S, S);
            mm_copy(ctx, &dc, &cos1);
            mm_copy(ctx, &ds, &sin1);
        }
    mm_tensor_free(&one); /* stream-ordered; the host tables were copied on return */
    free(host);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* Rows [b·S, b·S + n_tok) = x_embedder(post_quant_conv(tile)), then the
 * registers and the zero token. */
static int embed_tile(mm_video_vae *vv, mm_ctx *ctx, const mm_tensor *tile, mm_tensor *x, int64_t row0, mm_dtype dt,
                      bool capture)
{
    const mm_video_vae_config *c = &vv->cfg;
    const int64_t C = c->latent_channels, t = tile->shape[1], h = tile->shape[2], w = tile->shape[3];
    const int64_t n_tok = t * h * w;
    mm_tensor tok = {0}, pq = {0}, pqf = {0};
    if (vae_new(ctx, &tok, dt, 4, MM_SHAPE(C, t, h, w)) == 0 && vae_new(ctx, &pq, dt, 2, MM_SHAPE(n_tok, C)) == 0 &&
        vae_new(ctx, &pqf, MM_F32, 2, MM_SHAPE(n_tok, C)) == 0) {
        mm_copy(ctx, &tok, tile); /* the autocast cast of the conv input */
        mm_tensor a = mm_tensor_as_strided(&tok, 2, MM_SHAPE(n_tok, C), MM_SHAPE(1, n_tok));
        mm_tensor wt = mm_tensor_transpose(&vv->post_quant_w, 0, 1);
        mm_matmul(ctx, &pq, &a, &wt, &vv->post_quant_b); /* the 1x1x1 conv as a GEMM over tokens */
        if (capture) {
            mm_tensor v = mm_tensor_as_strided(&pq, 5, MM_SHAPE(1, C, t, h, w),
                                               MM_SHAPE(n_tok * C, 1, h * w * C, w * C, C));
            vae_capture(&vv->capture, "post_quant_conv", &v);
        }
        mm_copy(ctx, &pqf, &pq);
        mm_tensor xb = mm_tensor_narrow(x, 0, row0, n_tok);
        mm_tensor et = mm_tensor_transpose(&vv->embed_w, 0, 1);
        mm_matmul(ctx, &xb, &pqf, &et, &vv->embed_b);
        mm_tensor regs = mm_tensor_narrow(x, 0, row0 + n_tok, c->registers);
        mm_copy(ctx, &regs, &vv->registers);
        mm_tensor zero = mm_tensor_narrow(x, 0, row0 + n_tok + c->registers, 1);
        mm_fill(ctx, &zero, 0.0);
    }
    mm_tensor_free(&tok);
    mm_tensor_free(&pq);
    mm_tensor_free(&pqf);
    return mm_ctx_failed(ctx) ? -1 : 0;
}

static void cap_rows(mm_video_vae *vv, bool on, const char *name, const mm_tensor *x, int64_t S)
{
    if (!on)
        return;
    mm_tensor v = mm_tensor_narrow(x, 0, 0, S);
    vae_capture(&vv->capture, name, &v);
}

/* Projected rows of one tile [n_tok, P] -> pixels [3, pt·t, ps·h, ps·w]. */
static void unpatchify(mm_ctx *ctx, const mm_video_vae_config *c, const mm_tensor *proj, int64_t t, int64_t h,
                       int64_t w, mm_tensor *pix)
{
    const int64_t pt = c->patch_t, ps = c->patch_s, P = proj->shape[1], per = pt * ps * ps;
    const int64_t Hp = ps * h, Wp = ps * w;
    for (int ch = 0; ch < c->out_channels; ch++) {
        mm_tensor base = mm_tensor_narrow(proj, 1, ch * per, per);
        mm_tensor src = mm_tensor_as_strided(&base, 6, MM_SHAPE(t, pt, h, ps, w, ps),
                                             MM_SHAPE(h * w * P, ps * ps, w * P, ps, P, 1));
        mm_tensor plane = mm_tensor_select(pix, 0, ch);
        mm_tensor dst = mm_tensor_as_strided(&plane, 6, MM_SHAPE(t, pt, h, ps, w, ps),
                                             MM_SHAPE(pt * Hp * Wp, Hp * Wp, ps * Wp, Wp, ps, 1));
        mm_copy(ctx, &dst, &src);
    }
}

/* The transformer blocks' workspace: freed before the f32 head (the peak is
 * lower without it) and on the way out after a failure. */
static void free_block_workspace(mm_tensor *hn, mm_tensor *qkv, mm_tensor *att, mm_tensor *y, mm_tensor *u,
                                 mm_tensor *g)
{
    mm_tensor_free(hn);
    mm_tensor_free(qkv);
    mm_tensor_free(att);
    mm_tensor_free(y);
    mm_tensor_free(u);
    mm_tensor_free(g);
}

int vv_decoder_forward(mm_video_vae *vv, mm_ctx *ctx, int n, const mm_tensor *tiles, mm_tensor *pixels, bool capture)
{
    const mm_video_vae_config *c = &vv->cfg;
    const int64_t t = tiles[0].shape[1], h = tiles[0].shape[2], w = tiles[0].shape[3];
    const int64_t n_tok = t * h * w, S = n_tok + c->registers + 1, rows = (int64_t)n * S;
    const int64_t D = c->dim, H = c->heads, hd = c->head_dim, F = c->ffn_hidden;
    const mm_dtype dt = vv->gemm_dtype;
    for (int b = 0; b < n; b++)
        if (tiles[b].shape[1] != t || tiles[b].shape[2] != h || tiles[b].shape[3] != w)
            return mm_ctx_fail(ctx, "decoder: tiles of one batch must share their geometry");
    memset(pixels, 0, sizeof(mm_tensor) * (size_t)n);

    mm_tensor x = {0}, hn = {0}, qkv = {0}, att = {0}, y = {0}, u = {0}, g = {0}, cosv = {0}, sinv = {0};
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!seg)
        return mm_ctx_fail(ctx, "decoder: out of memory");
    for (int b = 0; b <= n; b++)
        seg[b] = (int32_t)(b * S);
    if (vae_new(ctx, &x, MM_F32, 2, MM_SHAPE(rows, D)) != 0)
        goto out;
    for (int b = 0; b < n; b++)
        embed_tile(vv, ctx, &tiles[b], &x, b * S, dt, capture && b == 0);
    cap_rows(vv, capture, "block0_in", &x, S);
    rope_upload(vv, ctx, t, h, w, n, dt, capture, &cosv, &sinv);

    vae_new(ctx, &hn, dt, 2, MM_SHAPE(rows, D));
    vae_new(ctx, &qkv, dt, 2, MM_SHAPE(rows, 3 * D));
    vae_new(ctx, &att, dt, 2, MM_SHAPE(rows, D));
    vae_new(ctx, &y, dt, 2, MM_SHAPE(rows, D));
    vae_new(ctx, &u, dt, 2, MM_SHAPE(rows, 2 * F));
    vae_new(ctx, &g, dt, 2, MM_SHAPE(rows, F));
    if (mm_ctx_failed(ctx))
        goto out;
    mm_tensor q3 = mm_tensor_unflatten(&qkv, 1, 2, MM_SHAPE(H, 3 * hd));
    mm_tensor q = mm_tensor_narrow(&q3, 2, 0, hd), k = mm_tensor_narrow(&q3, 2, hd, hd),
              v = mm_tensor_narrow(&q3, 2, 2 * hd, hd);
    mm_tensor o3 = mm_tensor_unflatten(&att, 1, 2, MM_SHAPE(H, hd));
    mm_tensor gate = mm_tensor_narrow(&u, 1, 0, F), value = mm_tensor_narrow(&u, 1, F, F);
    mm_attn_params ap = {.scale = 0.0f, .causal = false, .seg_offsets = seg, .n_seg = n};
    for (int i = 0; i < c->layers && !mm_ctx_failed(ctx); i++) {
        const vv_dblock *bl = &vv->dblocks[i];
        mm_tensor s1 = mm_tensor_as_strided(&bl->scale1, 2, MM_SHAPE(1, D), MM_SHAPE(D, 1));
        mm_tensor s2 = mm_tensor_as_strided(&bl->scale2, 2, MM_SHAPE(1, D), MM_SHAPE(D, 1));
        mm_rmsnorm(ctx, &hn, &x, &bl->norm1, c->norm_eps);
        mm_linear_forward(ctx, &qkv, &hn, &bl->qkv);
        mm_rmsnorm(ctx, &q, &q, NULL, c->norm_eps);
        mm_rmsnorm(ctx, &k, &k, NULL, c->norm_eps);
        mm_rope(ctx, &q, &q, &cosv, &sinv, c->rope_dim);
        mm_rope(ctx, &k, &k, &cosv, &sinv, c->rope_dim);
        mm_attention(ctx, &o3, &q, &k, &v, &ap);
        mm_linear_forward(ctx, &y, &att, &bl->out);
        cap_rows(vv, capture && i == 0, "block0_attn", &y, S);
        mm_gated_residual(ctx, &x, &y, &s1, NULL);
        mm_rmsnorm(ctx, &hn, &x, &bl->norm2, c->norm_eps);
        mm_linear_forward(ctx, &u, &hn, &bl->w1);
        mm_glu(ctx, &g, &gate, &value, MM_ACT_SILU);
        mm_linear_forward(ctx, &y, &g, &bl->w2);
        mm_gated_residual(ctx, &x, &y, &s2, NULL);
        cap_rows(vv, capture && i == 0, "block0_out", &x, S);
    }
    cap_rows(vv, capture, "blocks_out", &x, S);
    free_block_workspace(&hn, &qkv, &att, &y, &u, &g);
    mm_layernorm(ctx, &x, &x, &vv->dnorm_w, &vv->dnorm_b, c->norm_eps);
    {
        const int64_t P = vv->proj_w.shape[0];
        mm_tensor proj = {0};
        mm_tensor pt = mm_tensor_transpose(&vv->proj_w, 0, 1);
        if (vae_new(ctx, &proj, MM_F32, 2, MM_SHAPE(n_tok, P)) == 0)
            for (int b = 0; b < n && !mm_ctx_failed(ctx); b++) {
                mm_tensor xb = mm_tensor_narrow(&x, 0, b * S, n_tok);
                mm_matmul(ctx, &proj, &xb, &pt, &vv->proj_b);
                if (vae_new(ctx, &pixels[b], MM_F32, 4,
                            MM_SHAPE(c->out_channels, c->patch_t * t, c->patch_s * h, c->patch_s * w)) == 0)
                    unpatchify(ctx, c, &proj, t, h, w, &pixels[b]);
            }
        mm_tensor_free(&proj);
    }
out:
    free_block_workspace(&hn, &qkv, &att, &y, &u, &g);
    mm_tensor_free(&cosv);
    mm_tensor_free(&sinv);
    mm_tensor_free(&x);
    /* seg is read by the attention launches: wait before releasing it */
    mm_ctx_sync(ctx, NULL);
    free(seg);
    if (mm_ctx_failed(ctx)) {
        for (int b = 0; b < n; b++)
            mm_tensor_free(&pixels[b]);
        return -1;
    }
    return 0;
}
