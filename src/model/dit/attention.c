/* The attention and MLP halves shared by the token refiner and the main
 * blocks (dit.md §4.3, §4.7–4.9): fused QKV in contiguous thirds [Q; K; V]
 * (each head-major), per-head RMSNorm on q and k, rotate-half RoPE on the
 * first rope_dim channels of every head (main blocks only), full
 * bidirectional attention with scale 1/sqrt(D), no mask; then the SwiGLU MLP
 * with fc1 = [gate; up]. q, k and v are views into the QKV buffer, rotated and
 * normalized in place. */
#include "model/dit/model.h"

static int linear(mm_dit_request *r, mm_tensor *out, const mm_tensor *x, const mm_dit_block_weights *bw, int which)
{
    return mm_dit_linear_lora(r, out, x, &bw->lin[which], mm_dit_lora_for(r, bw, which));
}

int mm_dit_attention(mm_dit_request *r, int64_t rows, const mm_tensor *h, const mm_dit_block_weights *bw,
                     bool rotary)
{
    const mm_dit_config *c = &r->dit->cfg;
    mm_ctx *ctx = r->ctx;
    const int64_t A = (int64_t)c->heads * c->head_dim;
    const int64_t head[2] = {c->heads, c->head_dim};
    mm_tensor qkv = mm_dit_rows(&r->ws.qkv, rows);
    linear(r, &qkv, h, bw, MM_DIT_QKV);

    mm_tensor q3 = mm_tensor_narrow(&qkv, 1, 0, A), k3 = mm_tensor_narrow(&qkv, 1, A, A);
    mm_tensor v3 = mm_tensor_narrow(&qkv, 1, 2 * A, A);
    mm_tensor q = mm_tensor_unflatten(&q3, 1, 2, head), k = mm_tensor_unflatten(&k3, 1, 2, head);
    mm_tensor v = mm_tensor_unflatten(&v3, 1, 2, head);
    mm_rmsnorm(ctx, &q, &q, &bw->q_norm, c->qk_norm_eps);
    mm_rmsnorm(ctx, &k, &k, &bw->k_norm, c->qk_norm_eps);
    if (rotary) {
        mm_tensor cs = mm_dit_rows(&r->rope_cos, rows), sn = mm_dit_rows(&r->rope_sin, rows);
        mm_rope(ctx, &q, &q, &cs, &sn, c->rope_dim);
        mm_rope(ctx, &k, &k, &cs, &sn, c->rope_dim);
    }
    mm_tensor o2 = mm_dit_rows(&r->ws.attn, rows);
    mm_tensor o = mm_tensor_unflatten(&o2, 1, 2, head);
    if (rotary && r->attention)
        return r->attention(r->attention_user, ctx, &o, &q, &k, &v);
    if (rotary && mm_dit_sparse_applies(r)) /* main blocks only: the refiner stays dense */
        return mm_dit_sparse_sdpa(r, &o, &q, &k, &v);
    return mm_attention(ctx, &o, &q, &k, &v, NULL);
}

int mm_dit_mlp(mm_dit_request *r, int64_t rows, const mm_tensor *h, const mm_dit_block_weights *bw)
{
    const int64_t F = r->dit->cfg.ffn;
    mm_tensor fc1 = mm_dit_rows(&r->ws.fc1, rows), glu = mm_dit_rows(&r->ws.glu, rows);
    mm_tensor y = mm_dit_rows(&r->ws.y, rows);
    linear(r, &fc1, h, bw, MM_DIT_FC1);
    mm_tensor gate = mm_tensor_narrow(&fc1, 1, 0, F), up = mm_tensor_narrow(&fc1, 1, F, F);
    mm_glu(r->ctx, &glu, &gate, &up, MM_ACT_SILU);
    return linear(r, &y, &glu, bw, MM_DIT_FC2);
}
