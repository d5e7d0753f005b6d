/* One main block (dit.md §4.7) over all S rows, every row modulated by its
 * (timestep, modality) row of the block's AdaLN table:
 *   h = RMSNorm1(x)·(1 + scale_msa) + shift_msa;  x += gate_msa · out_proj(attn(h))
 *   h = RMSNorm2(x)·(1 + scale_mlp) + shift_mlp;  x += gate_mlp · fc2(silu(g)·u)
 * Gates are raw (no 1+, no tanh). The norm and the modulation are one fused
 * op with a single rounding (the reference rounds each bf16 op; a negligible
 * difference, dit.md §4.7). */
#include "model/dit/model.h"

int mm_dit_block(mm_dit_request *r, int block)
{
    if (r->cuda_path)
        return mm_dit_block_cuda(r, block);
    const mm_dit *d = r->dit;
    const mm_dit_block_weights *bw = &d->blocks[block];
    mm_ctx *ctx = r->ctx;
    const int64_t S = r->rows, H = d->cfg.hidden;
    mm_dit_workspace *ws = &r->ws;
    /* The table as [timesteps·modalities, 6H]; chunk c is a [rows, H] column view. */
    const int64_t trows = (int64_t)r->m * d->cfg.modalities;
    mm_tensor table = mm_tensor_wrap(ws->mod.data, ws->mod.device, MM_BF16, 2, (int64_t[]){trows, 6 * H});
    mm_tensor chunk[6];
    for (int c = 0; c < 6; c++)
        chunk[c] = mm_tensor_narrow(&table, 1, c * H, H);
    mm_tensor *idx = &ws->adaln_idx;

    mm_rmsnorm_modulate(ctx, &ws->h, &ws->x, &bw->norm1, d->cfg.norm_eps, &chunk[1], &chunk[0], idx);
    mm_dit_attention(r, S, &ws->h, bw, true);
    mm_dit_linear_lora(r, &ws->y, &ws->attn, &bw->lin[MM_DIT_OUT], mm_dit_lora_for(r, bw, MM_DIT_OUT));
    mm_gated_residual(ctx, &ws->x, &ws->y, &chunk[2], idx);
    mm_rmsnorm_modulate(ctx, &ws->h, &ws->x, &bw->norm2, d->cfg.norm_eps, &chunk[4], &chunk[3], idx);
    mm_dit_mlp(r, S, &ws->h, bw);
    return mm_gated_residual(ctx, &ws->x, &ws->y, &chunk[5], idx);
}
