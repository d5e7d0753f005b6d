/* The prompt and the pictures / videos through Qwen3-VL (text-encoder.md §4):
 * the references in request order — fl2va: the first keyframe, any further
 * pictures, the last keyframe; ref2va: pictures, videos at 2 fps with their
 * soundtrack's label, audio clips as labels — then the prompt. The rows stay
 * on the text encoder's device; the denoise stage stages them to the DiT's. */
#include <string.h>

#include "engine/pipeline_internal.h"

static mm_cond_reference cond_ref(const pl_item *it)
{
    mm_cond_reference r = {0};
    switch (it->role) {
    case PL_REF_VIDEO:
        r.kind = MM_PRES_VIDEO;
        r.rgb = it->vis;
        r.width = it->width;
        r.height = it->height;
        r.n_frames = it->n_vis;
        r.times = it->vis_times;
        r.has_audio = it->has_audio;
        break;
    case PL_REF_AUDIO:
        r.kind = MM_PRES_AUDIO;
        break;
    default:
        r.kind = MM_PRES_PICTURE;
        r.rgb = it->rgb;
        r.width = it->width;
        r.height = it->height;
        break;
    }
    return r;
}

int pl_condition(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    if (pl_ensure_conditioner(p, j->t, err) != 0)
        return -1;
    mm_cond_reference refs[PL_MAX_ITEMS];
    for (int i = 0; i < j->n_items; i++)
        refs[i] = cond_ref(&j->items[i]);
    double t0 = mm_timing_now();
    int rc = mm_conditioner_encode(p->cond, p->te_ctx, j->req->prompt, strlen(j->req->prompt), refs, j->n_items,
                                   &j->cond, NULL, err);
    if (rc == 0)
        rc = mm_ctx_sync(p->te_ctx, err);
    double s = mm_timing_now() - t0;
    mm_timing_add(j->t, MM_TG_INFERENCE, j->cond.cached ? "encode prompt (cached)" : "encode prompt (Qwen3-VL)", s);
    if (rc == 0)
        pl_log(p, "prompt: %lld rows%s in %.2f s", (long long)j->cond.len, j->cond.cached ? " (prompt cache)" : "", s);
    pl_release_conditioner(p);
    return rc != 0 ? mm_error_prefix(err, "encoding the prompt") : 0;
}
