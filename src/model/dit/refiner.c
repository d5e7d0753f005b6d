/* The token refiner (dit.md §1.2, §4.3): plain pre-norm blocks over the text
 * rows only (their own attention document), no AdaLN, no RoPE, bf16 linears,
 * then a final RMSNorm. Independent of the timestep: run once per request. */
#include "model/dit/model.h"

int mm_dit_refine(mm_dit_request *r, mm_tensor *text)
{
    const mm_dit *d = r->dit;
    mm_ctx *ctx = r->ctx;
    const int64_t L = text->shape[0];
    mm_tensor h = mm_dit_rows(&r->ws.h, L), attn = mm_dit_rows(&r->ws.attn, L), y = mm_dit_rows(&r->ws.y, L);
    for (int b = 0; b < d->cfg.refiner_layers; b++) {
        const mm_dit_block_weights *bw = &d->refiner[b];
        mm_rmsnorm(ctx, &h, text, &bw->norm1, d->cfg.norm_eps);
        mm_dit_attention(r, L, &h, bw, false);
        mm_dit_linear_lora(r, &y, &attn, &bw->lin[MM_DIT_OUT], mm_dit_lora_for(r, bw, MM_DIT_OUT));
        mm_add(ctx, text, text, &y);
        mm_rmsnorm(ctx, &h, text, &bw->norm2, d->cfg.norm_eps);
        mm_dit_mlp(r, L, &h, bw);
        mm_add(ctx, text, text, &y);
    }
    return mm_rmsnorm(ctx, text, text, &d->refiner_norm, d->cfg.final_norm_eps);
}
