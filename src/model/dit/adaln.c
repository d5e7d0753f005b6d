/* The pruned AdaLN path (dit.md §2.2, §4.5): one time embedding per distinct
 * timestep, interpolated from adaln_t_table (no SiLU: the table already holds
 * the post-SiLU curve), then per block W·temb + b evaluated in f32 (the f16
 * weights were upcast at load) and rounded to bf16 where it is applied. Rows
 * of a block's table are (timestep, modality) pairs, row ti·modalities + tag,
 * each holding (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
 * gate_mlp); the final layer's rows are (shift, scale) per timestep only.
 * AdaLN adapters add to the f32 rows before that rounding
 * (adaln_adapters.c). */
#include <math.h>

#include "model/dit/model.h"

void mm_dit_time_embedding(const mm_dit *dit, float t, float *out)
{
    const int size = dit->cfg.table_size, dim = dit->cfg.time_dim;
    float clamped = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    float pos = clamped * (float)(size - 1);
    int lo = (int)floorf(pos);
    if (lo > size - 1)
        lo = size - 1;
    int hi = lo + 1 < size - 1 ? lo + 1 : size - 1;
    float frac = pos - (float)lo;
    float keep = 1.0f - frac;
    const float *a = dit->table + (size_t)lo * dim, *b = dit->table + (size_t)hi * dim;
    for (int k = 0; k < dim; k++)
        out[k] = a[k] * keep + b[k] * frac;
}

/* out32 [m, N] = temb [m, td] · Wᵀ + b in f32, plus the slot's AdaLN
 * adapters (adaln_adapters.c) in f32; out [m, N] = bf16(out32), the one
 * rounding. slot: the block, or layers for the final layer. */
static int project(mm_dit_request *r, int slot, const mm_tensor *w, const mm_tensor *b, mm_tensor *out32,
                   mm_tensor *out, int m)
{
    mm_tensor temb = mm_dit_rows(&r->ws.temb, m);
    mm_tensor o32 = mm_dit_rows(out32, m), o = mm_dit_rows(out, m);
    mm_tensor wt = mm_tensor_transpose(w, 0, 1);
    mm_matmul(r->ctx, &o32, &temb, &wt, b);
    mm_dit_adapt_add(r, slot, &o32, m);
    return mm_copy(r->ctx, &o, &o32);
}

int mm_dit_adaln_block(mm_dit_request *r, int block, int m)
{
    const mm_dit_block_weights *bw = &r->dit->blocks[block];
    int rc = project(r, block, &bw->adaln_w, &bw->adaln_b, &r->ws.mod32, &r->ws.mod, m);
    if (block == 0 && r->dbg.capture) {
        const int64_t H = r->dit->cfg.hidden, rows = (int64_t)m * r->dit->cfg.modalities;
        mm_tensor v = mm_tensor_wrap(r->ws.mod32.data, r->ws.mod32.device, MM_F32, 3, (int64_t[]){rows, 6, H});
        mm_dit_capture(r, "block0_adaln", &v);
    }
    return rc;
}

int mm_dit_adaln_final(mm_dit_request *r, int m)
{
    int rc = project(r, r->dit->cfg.layers, &r->dit->final_adaln_w, &r->dit->final_adaln_b, &r->ws.fmod32,
                     &r->ws.fmod, m);
    if (r->dbg.capture) {
        const int64_t H = r->dit->cfg.hidden;
        mm_tensor v = mm_tensor_wrap(r->ws.fmod32.data, r->ws.fmod32.device, MM_F32, 3, (int64_t[]){m, 2, H});
        mm_dit_capture(r, "final_adaln", &v);
    }
    return rc;
}
