/* Input projections and packing (dit.md §4.2, §4.4): the video and audio
 * patch projections are f32 GEMMs (weights, bias and input in f32) whose
 * result is rounded once to bf16; the text goes through condition_proj in
 * bf16 and the token refiner once per request. Each stream is scattered into
 * the residual stream by its index map, so every packed row is written once. */
#include "model/dit/model.h"

int mm_dit_embed_text(mm_dit_request *r, const mm_tensor *text)
{
    mm_dit_linear_lora(r, &r->text, text, &r->dit->cond, mm_dit_lora_for(r, NULL, 0));
    mm_dit_capture(r, "condition_proj_out", &r->text);
    mm_dit_refine(r, &r->text);
    mm_dit_capture(r, "refiner_out", &r->text);
    return mm_ctx_error(r->ctx, NULL);
}

static int project(mm_dit_request *r, const mm_tensor *rows, const mm_linear *lin, const mm_tensor *idx)
{
    mm_tensor e = mm_dit_rows(&r->ws.h, rows->shape[0]);
    mm_dit_linear(r->ctx, &r->ws, &e, rows, lin);
    return mm_scatter_rows(r->ctx, &r->ws.x, &e, idx);
}

int mm_dit_embed_media(mm_dit_request *r, const mm_tensor *video_rows, const mm_tensor *audio_rows)
{
    const mm_dit *d = r->dit;
    mm_scatter_rows(r->ctx, &r->ws.x, &r->text, &r->text_idx);
    if (r->video_rows > 0)
        project(r, video_rows, &d->video_in, &r->video_idx);
    if (r->audio_rows > 0)
        project(r, audio_rows, &d->audio_in, &r->audio_idx);
    return mm_ctx_error(r->ctx, NULL);
}
