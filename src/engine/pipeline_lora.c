/* A request's LoRA adapters (docs/LORA.md): resolved by name, taken from
 * the resident LRU (opened, checked and uploaded to the DiT's device on
 * first use), pinned for the job and handed to the DiT as mm_lora_use. The
 * base weights are never touched, so switching adapters between jobs costs
 * a lookup, or one file read when the adapter is not resident. */
#include <stdint.h>
#include <string.h>

#include "engine/pipeline_internal.h"
#include "request/rules.h"
#include "io/checkpoint.h"

static int cache(mm_pipeline *p, mm_error *err)
{
    if (p->lora_cache)
        return 0;
    size_t budget = p->o.lora_cache_bytes == SIZE_MAX ? 0
                    : p->o.lora_cache_bytes          ? p->o.lora_cache_bytes
                                                     : (size_t)4 << 30;
    return mm_lora_cache_create(&p->lora_cache, budget, err);
}

int pl_loras_acquire(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    const mm_gen_request *req = j->req;
    if (req->n_loras <= 0)
        return 0;
    if (p->sp[j->partition])
        return mm_fail(err, "LoRA adapters with the DiT over several GPUs (--gpus) are not supported yet; run on one GPU");
    if (cache(p, err) != 0)
        return -1;
    double t0 = mm_timing_now();
    const mm_dit_config *cfg = mm_dit_get_config(p->dit[j->partition]);
    for (int i = 0; i < req->n_loras; i++) {
        const mm_gen_lora *g = &req->loras[i];
        char path[2048];
        mm_lora *l;
        const float strength = (float)g->strength;
        if (mm_rule_lora_strength(g->strength, err) != 0 ||
            mm_lora_resolve(g->name ? g->name : "", p->o.checkpoints.models_path, p->o.lora_paths, path, sizeof path,
                            err) != 0 ||
            mm_lora_cache_get(p->lora_cache, path, p->dit_ctx, &l, err) != 0)
            return mm_error_prefix(err, "LoRA %d (%s)", i + 1, g->name ? g->name : "no name");
        j->loras[j->n_loras] = l;
        j->lora_uses[j->n_loras++] = (mm_lora_use){l, strength};
        if (mm_lora_fit(l, cfg, err) != 0)
            return mm_error_prefix(err, "LoRA %d", i + 1);
        const mm_lora_summary *s = &l->summary;
        pl_log(p, "LoRA %s (strength %g): %s, rank %d%s, alpha %g, %s", l->name, strength, s->family, s->rank_max,
               s->rank_min != s->rank_max ? " (max)" : "", s->alpha_max, s->targets);
        for (int w = 0; w < s->n_warnings; w++)
            pl_log(p, "LoRA %s: warning: %s", l->name, s->warnings[w]);
    }
    mm_timing_add(j->t, MM_TG_LOADING, "LoRA adapters", mm_timing_now() - t0);
    return 0;
}

void pl_loras_release(pl_job *j)
{
    for (int i = 0; i < j->n_loras; i++)
        mm_lora_cache_release(j->p->lora_cache, j->loras[i]);
    j->n_loras = 0;
}
