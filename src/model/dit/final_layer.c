/* The final layer (dit.md §4.10): RMSNorm modulated by the (shift, scale) row
 * of the row's timestep (not its modality), cast to f32, then the f32 output
 * heads on the video and on the audio rows (selected by the index maps before
 * the heads, which gives the reference's values for those rows). Both heads
 * predict the data-ward velocity clean − noise. A PDD adapter's head bank
 * replaces the heads by its per-step blend (adaln_adapters.c). */
#include "model/dit/model.h"

static int head(mm_dit_request *r, const mm_tensor *h, const mm_tensor *idx, int64_t n, const mm_linear *lin,
                mm_tensor *out)
{
    if (n == 0)
        return 0;
    const int64_t H = r->dit->cfg.hidden;
    /* f32 copy of the selected rows, in the fc1 buffer (free at this point). */
    mm_tensor rows = mm_tensor_wrap(r->ws.fc1_store.data, r->ws.fc1_store.device, MM_F32, 2, (int64_t[]){n, H});
    mm_gather_rows(r->ctx, &rows, h, idx);
    return mm_dit_linear(r->ctx, &r->ws, out, &rows, lin);
}

int mm_dit_final(mm_dit_request *r, mm_tensor *v_video, mm_tensor *v_audio)
{
    const mm_dit *d = r->dit;
    const int64_t H = d->cfg.hidden;
    mm_dit_workspace *ws = &r->ws;
    mm_tensor table = mm_dit_rows(&ws->fmod, r->m);
    mm_tensor shift = mm_tensor_narrow(&table, 1, 0, H), scale = mm_tensor_narrow(&table, 1, H, H);
    mm_rmsnorm_modulate(r->ctx, &ws->h, &ws->x, &d->final_norm, d->cfg.final_norm_eps, &scale, &shift, &ws->t_idx);
    /* a PDD adapter's blended bank head for this step replaces the base head */
    const mm_linear *vo = mm_dit_adapt_head(r, false), *ao = mm_dit_adapt_head(r, true);
    head(r, &ws->h, &r->video_idx, r->video_rows, vo ? vo : &d->video_out, v_video);
    return head(r, &ws->h, &r->audio_idx, r->audio_rows, ao ? ao : &d->audio_out, v_audio);
}
