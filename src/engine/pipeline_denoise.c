/* The packed layout, the seeded initial rows and the denoising loop
 * (dit.md §5–6): [text | keyframe or reference blocks | target audio |
 * target video]; one CPU generator seeded with the request's seed draws the
 * condition noise (packed order), the target video and the target audio;
 * reference audio rows are clean. The request's schedule (the release grid
 * of N points, N−1 forwards, or a few-step preset / custom σ list:
 * sampler/schedule.h) drives the DiT forwards; the Euler update runs on the
 * host in f32 on target rows only, so condition rows are fed unchanged every
 * step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/gpu.h"
#include "engine/pipeline_internal.h"
#include "engine/pipeline_refkv.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"
#include "model/dit/patchify.h"
#include "sampler/flow_sampler.h"
#include "sampler/initial_noise.h"
#include "sampler/sigmas.h"

/* Latent geometry of the target: the VAE's rule (17n+5 frames → 5n+2
 * latents, 16 px per latent) read from its configuration when loaded. */
static void target_geometry(pl_job *j)
{
    mm_pipeline *p = j->p;
    if (p->vvae) {
        const mm_video_vae_config *c = mm_video_vae_get_config(p->vvae);
        j->T = (int)mm_video_vae_latent_frames(c, j->frames);
        j->Hl = j->height / c->patch_s;
        j->Wl = j->width / c->patch_s;
    } else {
        /* not loaded (offloading, no references): the released VAE's rule */
        j->T = (j->frames - 5) / 17 * 5 + 2;
        j->Hl = j->height / 16;
        j->Wl = j->width / 16;
    }
    j->A = (int)mm_audio_vae_latents_for_frames(j->frames);
}

int pl_build_layout(pl_job *j, mm_error *err)
{
    j->dit_cfg = *mm_dit_get_config(j->p->dit[j->partition]);
    const mm_dit_config *cfg = &j->dit_cfg;
    target_geometry(j);
    int8_t *tags = malloc((size_t)(j->cond.len ? j->cond.len : 1));
    mm_dit_anchor anchors[2];
    mm_dit_ref refs[PL_MAX_ITEMS];
    int n_anchors = 0, n_refs = 0;
    if (!tags)
        return mm_fail(err, "out of memory");
    for (int64_t r = 0; r < j->cond.len; r++)
        tags[r] = (int8_t)j->cond.tags[r];
    for (int i = 0; i < j->n_items; i++) {
        const pl_item *it = &j->items[i];
        switch (it->role) {
        case PL_KEYFRAME_FIRST:
        case PL_KEYFRAME_LAST:
            if (it->vshape[1] != 1 || it->vshape[2] != j->Hl || it->vshape[3] != j->Wl) {
                free(tags);
                return mm_fail(err, "keyframe latent %lldx%lldx%lld does not match the target's 1x%dx%d",
                               (long long)it->vshape[1], (long long)it->vshape[2], (long long)it->vshape[3], j->Hl,
                               j->Wl);
            }
            anchors[n_anchors++] = it->role == PL_KEYFRAME_FIRST ? MM_DIT_ANCHOR_FIRST : MM_DIT_ANCHOR_LAST;
            break;
        case PL_REF_IMAGE:
            refs[n_refs++] = (mm_dit_ref){MM_DIT_REF_IMAGE, 1, (int)it->vshape[2], (int)it->vshape[3], 0};
            break;
        case PL_REF_VIDEO:
            refs[n_refs++] = (mm_dit_ref){MM_DIT_REF_VIDEO, (int)it->vshape[1], (int)it->vshape[2],
                                          (int)it->vshape[3], it->alat ? (int)it->a_latents : 0};
            break;
        case PL_REF_AUDIO:
            refs[n_refs++] = (mm_dit_ref){MM_DIT_REF_AUDIO, 0, 0, 0, (int)it->a_latents};
            break;
        case PL_VISION_PICTURE:
            break;
        }
    }
    mm_dit_layout_request lr = {
        .text_tags = tags,
        .text_rows = (int)j->cond.len,
        .target = {j->T, j->Hl, j->Wl, j->A, cfg->patch[0], cfg->patch[1], cfg->patch[2], 2},
        .anchors = n_anchors ? anchors : NULL,
        .n_anchors = n_anchors,
        .refs = n_refs ? refs : NULL,
        .n_refs = n_refs,
    };
    int rc = mm_dit_layout_build(&lr, &j->layout, err);
    free(tags);
    return rc;
}

/* The initial rows: pinned conditions first (noise-augmented video, clean
 * audio), then the seeded target noise. */
static int initial_rows(pl_job *j, const mm_dit_config *cfg, mm_error *err)
{
    const mm_dit_layout *l = &j->layout;
    const int vw = cfg->video_row_width, aw = cfg->audio_row_width, C = cfg->latent_channels;
    j->video_rows = malloc(sizeof(float) * (size_t)(l->video_rows * vw + 1));
    j->audio_rows = malloc(sizeof(float) * (size_t)(l->audio_rows * aw + 1));
    if (!j->video_rows || !j->audio_rows)
        return mm_fail(err, "out of memory for %lld video and %lld audio rows", (long long)l->video_rows,
                       (long long)l->audio_rows);
    mm_noise_condition conds[PL_MAX_ITEMS];
    int n_conds = 0;
    int64_t audio_at = 0;
    for (int i = 0; i < j->n_items; i++) {
        const pl_item *it = &j->items[i];
        if (it->alat && (it->role == PL_REF_AUDIO || it->role == PL_REF_VIDEO)) {
            if (it->a_channels != aw)
                return mm_fail(err, "audio latents have %d channels; the DiT reads %d", it->a_channels, aw);
            mm_pack_audio(2, aw, (int)it->a_latents, it->alat, j->audio_rows + audio_at * aw);
            audio_at += 2 * it->a_latents;
        }
        if (it->vlat) {
            if (it->vshape[0] != C)
                return mm_fail(err, "a condition latent has %lld channels; the DiT reads %d", (long long)it->vshape[0],
                               C);
            conds[n_conds++] = (mm_noise_condition){
                .shape = {C, (int)it->vshape[1], (int)it->vshape[2], (int)it->vshape[3], cfg->patch[0], cfg->patch[1],
                          cfg->patch[2]},
                .latent = it->vlat,
            };
        }
    }
    if (audio_at != l->cond_audio_rows)
        return mm_fail(err, "reference audio: %lld rows packed, the layout has %lld", (long long)audio_at,
                       (long long)l->cond_audio_rows);
    mm_noise_plan plan = {
        .conds = conds,
        .n_conds = n_conds,
        .condition_t = PL_CONDITION_T,
        .target = {C, j->T, j->Hl, j->Wl, cfg->patch[0], cfg->patch[1], cfg->patch[2]},
        .audio_rows = l->audio_rows - l->cond_audio_rows,
        .audio_width = aw,
    };
    return mm_draw_initial_rows(j->req->seed, &plan, j->video_rows, j->audio_rows + l->cond_audio_rows * aw, NULL,
                                NULL, err);
}

/* The layout as the first forward sees it, for tests that check it against
 * the reference's rules computed independently. */
static int dump_layout(const pl_job *j, const mm_sigma_schedule *sv, const mm_sigma_schedule *sa, mm_error *err)
{
    const mm_dit_layout *l = &j->layout;
    float *row_t = malloc(sizeof(float) * (size_t)(l->rows + 1));
    if (!row_t)
        return mm_fail(err, "out of memory");
    mm_dit_row_timesteps(l, sv->timesteps[0], sa->timesteps[0], PL_CONDITION_T, row_t);
    const char *names[] = {"positions", "tags", "roles", "row_t0", "video_index", "audio_index", "t_video", "t_audio"};
    float tv = sv->timesteps[0], ta = sa->timesteps[0];
    mm_tensor t[] = {
        mm_tensor_wrap(l->positions, mm_cpu(), MM_F64, 2, (int64_t[]){l->rows, 3}),
        mm_tensor_wrap(l->tags, mm_cpu(), MM_I8, 1, (int64_t[]){l->rows}),
        mm_tensor_wrap(l->roles, mm_cpu(), MM_U8, 1, (int64_t[]){l->rows}),
        mm_tensor_wrap(row_t, mm_cpu(), MM_F32, 1, (int64_t[]){l->rows}),
        mm_tensor_wrap(l->video_index, mm_cpu(), MM_I64, 1, (int64_t[]){l->video_rows}),
        mm_tensor_wrap(l->audio_index, mm_cpu(), MM_I64, 1, (int64_t[]){l->audio_rows}),
        mm_tensor_wrap(&tv, mm_cpu(), MM_F32, 1, (int64_t[]){1}),
        mm_tensor_wrap(&ta, mm_cpu(), MM_F32, 1, (int64_t[]){1}),
    };
    int rc = mm_st_save(j->p->o.layout_dump, sizeof names / sizeof names[0], names, t, err);
    free(row_t);
    return rc != 0 ? mm_error_prefix(err, "layout dump %s", j->p->o.layout_dump) : 0;
}

/* ------------------------------------------------- what adapters need
 * (docs/LORA.md): their sampler when the request names none, the SiLU(temb)
 * grid their full-width AdaLN pairs read, a PDD bank's per-step weights. */

static const char *lora_meta(void *user, const char *key) { return mm_lora_metadata(user, key); }

/* The first adapter that says which sampler it was distilled for sets the
 * schedule, unless the request chose one (--sampler, --sigmas, or --steps). */
static int adapters_schedule(pl_job *j, mm_error *err)
{
    if (j->req->sampler || j->req->sigmas)
        return 0;
    for (int i = 0; i < j->n_loras; i++) {
        mm_schedule s;
        bool found;
        if (mm_schedule_from_adapter(j->loras[i]->name, lora_meta, j->loras[i], &s, &found, err) != 0)
            return -1;
        if (!found)
            continue;
        mm_schedule_free(&j->schedule);
        j->schedule = s;
        j->total_forwards = mm_schedule_forwards(&s);
        for (int k = i + 1; k < j->n_loras; k++) {
            mm_schedule other;
            if (mm_schedule_from_adapter(j->loras[k]->name, lora_meta, j->loras[k], &other, &found, err) == 0 &&
                found) {
                pl_log(j->p, "LoRA %s names sampler %s too; %s's (%s) is used", j->loras[k]->name, other.name,
                       j->loras[i]->name, s.name);
                mm_schedule_free(&other);
            }
        }
        return 0;
    }
    return 0;
}

/* The grid beside the adapters: <loras>/h3_silu_temb_grid_<partition>.safetensors, else
 * <loras>/h3_silu_temb_grid.safetensors (the name Larry's node ships). Without one the DiT request says what is
 * missing and where it comes from. */
static int adapters_grid(pl_job *j, mm_dit *dit, mm_error *err)
{
    if (!mm_dit_loras_need_grid(dit, j->lora_uses, j->n_loras) || mm_dit_has_silu_grid(dit))
        return 0;
    char dir[1024], path[1200];
    mm_lora_dir(j->p->o.checkpoints.models_path, dir, sizeof dir);
    const char *names[2] = {j->partition == PL_FL2VA ? "h3_silu_temb_grid_fl2va" : "h3_silu_temb_grid_ref2va",
                            "h3_silu_temb_grid"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, names[i]);
        if (access(path, R_OK) != 0)
            continue;
        if (mm_dit_set_silu_grid(dit, path, err) != 0)
            return -1;
        pl_log(j->p, "AdaLN adapters: SiLU(temb) grid %s", path);
        return 0;
    }
    return 0;
}

/* A PDD bank blends its heads per step: the schedule's weights over that many fine steps (the pdd presets carry
 * them; any other schedule gets them by overlap, sampler/schedule.h). */
static int adapters_bank(pl_job *j, const mm_dit_request *req, mm_error *err)
{
    const int heads = req ? mm_dit_request_bank_heads(req) : 0;
    if (heads == 0 || j->schedule.bank_heads == heads)
        return 0;
    pl_log(j->p, "PDD bank of %d heads: weights for the %s schedule by interval overlap", heads, j->schedule.name);
    return mm_schedule_set_pdd_bank(&j->schedule, heads, j->p->video_shift, j->p->audio_shift, err);
}

static int step_heads(const pl_job *j, mm_dit_request *req, int step, mm_error *err)
{
    const int heads = mm_dit_request_bank_heads(req);
    if (heads == 0)
        return 0;
    const mm_schedule *s = &j->schedule;
    return mm_dit_request_set_head_weights(req, s->bank_weights[MM_SCHED_VIDEO] + (size_t)step * heads,
                                           s->bank_weights[MM_SCHED_AUDIO] + (size_t)step * heads, err);
}

typedef struct loop_state {
    pl_job *j;
    mm_ctx *ctx;
    mm_dit *dit;
    mm_dit_request *dreq;
    mm_sp_request *sreq; /* --gpus N: the sequence-parallel request instead */
    mm_tensor video, audio, vv, va; /* device rows and velocities */
    float *row_t;
    /* reference KV cache: forwards after the first run the reduced layout */
    pl_refkv *kv;
    mm_tensor refined;
    mm_dit_request *rreq;
    /* step cache: what the requests of this job skipped */
    int forwards;
    bool cache_unavailable; /* its buffers did not fit: the job runs uncached */
    mm_step_cache_report cache_report;
    /* sparse attention: the request's preset */
    mm_sparse_config sparse;
    const mm_sparse_config *sparse_on;
} loop_state;

/* The job's step cache on a request that starts now (nothing when off).
 * Its buffers are an extra the render can do without: where they do not
 * fit, the job runs uncached and the log says why. */
static void start_step_cache(loop_state *s, mm_dit_request *dreq)
{
    const mm_step_cache_config *c = &s->j->req->cache;
    if (c->kind == MM_STEP_CACHE_OFF || s->cache_unavailable)
        return;
    mm_error why = {{0}};
    if ((s->sreq ? mm_sp_request_set_step_cache(s->sreq, c, s->forwards, &why)
                 : mm_dit_request_set_step_cache(dreq, c, s->forwards, &why)) != 0) {
        mm_error ignored = {{0}};
        if (s->sreq) /* the ranks whose buffers did fit free them */
            mm_sp_request_set_step_cache(s->sreq, NULL, 0, &ignored);
        s->cache_unavailable = true;
        pl_log(s->j->p, "step cache: %s; running without it", why.msg);
        return;
    }
    char desc[400];
    mm_step_cache_describe(c, desc, sizeof desc);
    if (s->sreq)
        pl_log(s->j->p, "step cache %s (decided over every rank's rows)", desc);
    else
        pl_log(s->j->p, "step cache %s (%.2f GiB of buffers)", desc,
               mm_dit_request_step_cache_bytes(dreq) / 1073741824.0);
}

/* What a request skipped, kept before it ends. */
static void keep_cache_report(loop_state *s, const mm_step_cache_report *r)
{
    if (r)
        mm_step_cache_report_merge(&s->cache_report, r);
}

/* A forward on the reduced layout: target rows only; the pinned rows'
 * velocities (ignored by the sampler) are zero. */
static int velocity_cached(loop_state *s, int step, float t_video, float t_audio, const mm_flow_stream *video,
                           const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    const mm_dit_layout *r = pl_refkv_reduced(s->kv);
    if (!s->rreq) {
        /* the full request's workspace goes before the reduced one comes */
        keep_cache_report(s, mm_dit_request_step_cache_report(s->dreq));
        mm_dit_request_end(s->dreq);
        s->dreq = NULL;
        mm_dit_request_opts o = pl_refkv_cached_opts(s->kv, &s->refined);
        o.loras = s->j->lora_uses;
        o.n_loras = s->j->n_loras;
        o.sparse = s->sparse_on;
        pl_refkv_attach(s->kv, NULL);
        if (mm_dit_request_begin_ex(s->dit, s->ctx, r, NULL, &o, NULL, &s->rreq, err) != 0)
            return mm_error_prefix(err, "reference KV cache: reduced request");
        mm_dit_request_set_fast(s->rreq, s->j->req->fast);
        start_step_cache(s, s->rreq);
        pl_refkv_attach(s->kv, s->rreq);
        pl_log(s->j->p, "reference KV cache: forwards 2.. run %lld rows, attention %s over %lld keys",
               (long long)r->rows, mm_dit_sdpa_kind(s->rreq, true), (long long)(r->rows + pl_refkv_rows(s->kv)));
    }
    const int vw = video->width, aw = audio->width;
    const int64_t nv = video->n_rows - video->cond_rows, na = audio->n_rows - audio->cond_rows;
    mm_dit_row_timesteps(r, t_video, t_audio, PL_CONDITION_T, s->row_t);
    mm_tensor dv = mm_tensor_narrow(&s->video, 0, 0, nv), da = mm_tensor_narrow(&s->audio, 0, 0, na);
    mm_tensor ov = mm_tensor_narrow(&s->vv, 0, 0, nv), oa = mm_tensor_narrow(&s->va, 0, 0, na);
    mm_tensor hv = mm_tensor_wrap(video->rows + video->cond_rows * vw, mm_cpu(), MM_F32, 2, dv.shape);
    mm_tensor ha = mm_tensor_wrap(audio->rows + audio->cond_rows * aw, mm_cpu(), MM_F32, 2, da.shape);
    mm_copy(s->ctx, &dv, &hv);
    mm_copy(s->ctx, &da, &ha);
    pl_refkv_begin_forward(s->kv);
    mm_dit_request_set_step(s->rreq, step, s->forwards);
    if (mm_ctx_error(s->ctx, err) != 0 || step_heads(s->j, s->rreq, step, err) != 0 ||
        mm_dit_forward(s->rreq, s->row_t, &dv, &da, &ov, &oa, err) != 0)
        return -1;
    memset(v_video, 0, sizeof(float) * (size_t)(video->cond_rows * vw));
    memset(v_audio, 0, sizeof(float) * (size_t)(audio->cond_rows * aw));
    mm_tensor rv = mm_tensor_wrap(v_video + video->cond_rows * vw, mm_cpu(), MM_F32, 2, ov.shape);
    mm_tensor ra = mm_tensor_wrap(v_audio + audio->cond_rows * aw, mm_cpu(), MM_F32, 2, oa.shape);
    mm_copy(s->ctx, &rv, &ov);
    mm_copy(s->ctx, &ra, &oa);
    return mm_ctx_sync(s->ctx, err);
}

static int velocity_full(loop_state *s, int step, float t_video, float t_audio, const mm_flow_stream *video,
                         const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    if (s->kv)
        pl_refkv_begin_forward(s->kv);
    mm_dit_row_timesteps(&s->j->layout, t_video, t_audio, PL_CONDITION_T, s->row_t);
    mm_tensor hv = mm_tensor_wrap(video->rows, mm_cpu(), MM_F32, 2, s->video.shape);
    mm_tensor ha = mm_tensor_wrap(audio->rows, mm_cpu(), MM_F32, 2, s->audio.shape);
    mm_copy(s->ctx, &s->video, &hv);
    mm_copy(s->ctx, &s->audio, &ha);
    if (s->sreq)
        mm_sp_request_set_step(s->sreq, step, s->forwards);
    else
        mm_dit_request_set_step(s->dreq, step, s->forwards);
    if (mm_ctx_error(s->ctx, err) != 0 || (s->dreq && step_heads(s->j, s->dreq, step, err) != 0) ||
        (s->sreq ? mm_sp_forward(s->sreq, s->row_t, &s->video, &s->audio, &s->vv, &s->va, err)
                 : mm_dit_forward(s->dreq, s->row_t, &s->video, &s->audio, &s->vv, &s->va, err)) != 0)
        return -1;
    if (s->dreq && s->sparse_on)
        mm_timing_density(s->j->t, step, mm_dit_request_density(s->dreq));
    mm_tensor ov = mm_tensor_wrap(v_video, mm_cpu(), MM_F32, 2, s->vv.shape);
    mm_tensor oa = mm_tensor_wrap(v_audio, mm_cpu(), MM_F32, 2, s->va.shape);
    mm_copy(s->ctx, &ov, &s->vv);
    mm_copy(s->ctx, &oa, &s->va);
    return mm_ctx_sync(s->ctx, err);
}

/* One forward (the reduced layout after the first where the reference KV
 * cache holds the pinned rows), then the live preview when one is due: it
 * needs this forward's rows and velocities, which the Euler step replaces. */
static int velocity(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                    const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    loop_state *s = user;
    int rc = s->kv && step > 0 ? velocity_cached(s, step, t_video, t_audio, video, audio, v_video, v_audio, err)
                               : velocity_full(s, step, t_video, t_audio, video, audio, v_video, v_audio, err);
    if (rc == 0)
        pl_preview_forward(s->j, step, t_video, video->rows, video->n_rows, video->cond_rows, v_video);
    return rc;
}

static void on_progress(void *user, int done, int total)
{
    loop_state *s = user;
    s->j->forwards = done;
    pl_report(s->j, MM_STAGE_DENOISING, done, total);
}

static bool on_cancel(void *user) { return pl_cancelled(((loop_state *)user)->j); }

/* What the job's step cache skipped, into its timings and the log. */
static void report_step_cache(loop_state *s)
{
    const mm_step_cache_config *c = &s->j->req->cache;
    if (c->kind == MM_STEP_CACHE_OFF)
        return;
    if (s->sreq)
        keep_cache_report(s, mm_sp_request_step_cache_report(s->sreq, 0));
    else if (s->rreq)
        keep_cache_report(s, mm_dit_request_step_cache_report(s->rreq));
    else if (s->dreq)
        keep_cache_report(s, mm_dit_request_step_cache_report(s->dreq));
    if (s->cache_report.decided == 0)
        return; /* it never started (no room for its buffers, logged) */
    mm_step_cache_summary *sum = &s->j->t->step_cache;
    mm_step_cache_summarize(c, &s->cache_report, sum);
    char list[1200];
    mm_step_cache_format_skipped(sum->skipped_bits, sum->forwards, list, sizeof list);
    pl_log(s->j->p, "step cache %s: %d of %d forwards skipped their blocks (%s)", sum->policy, sum->skipped,
           sum->forwards, list);
}

/* The cache needs its bytes beside the weights and workspace; where they
 * are not free on the DiT's GPU, the request runs without it. */
static bool use_ref_kv(mm_pipeline *p, const mm_dit_config *cfg, const mm_dit_layout *l)
{
    mm_device d = mm_ctx_device(p->dit_ctx);
    size_t need = pl_refkv_bytes(cfg, l);
    if (d.kind != MM_DEVICE_CUDA)
        return true;
    mm_gpu_info info;
    mm_error e = {{0}};
    if (mm_gpu_info_get(d.index, &info, &e) != 0 || info.free_bytes > need + ((size_t)8 << 30))
        return true;
    pl_log(p, "reference KV cache: %.1f GiB needed, %.1f GiB free on the DiT's GPU; running without it",
           need / 1073741824.0, info.free_bytes / 1073741824.0);
    return false;
}

/* The DiT request of one job: sequence-parallel (--gpus N), through the reference KV cache, or plain;
 * then its attention mode and what it runs, said in the log. */
static int begin_dit_request(loop_state *s, pl_job *j, const mm_tensor *text_rows,
                             const mm_dit_request_opts *lora_opts, mm_error *err)
{
    mm_pipeline *p = j->p;
    mm_dit *dit = s->dit;
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const mm_dit_layout *l = &j->layout;
    mm_device dd = mm_ctx_device(p->dit_ctx);
    if (p->sp[j->partition]) {
        /* --gpus N: the sequence-parallel DiT (its ranks use the attention hook, so no reference KV cache) */
        if (mm_sp_request_begin(p->sp[j->partition], l, text_rows, &s->sreq, err) != 0 ||
            mm_sp_request_set_fast(s->sreq, j->req->fast, err) != 0)
            return -1;
        if (s->sparse_on)
            pl_log(p, "sparse attention: off with --gpus (the sequence-parallel attention owns the attention)");
        char kind[200];
        mm_sp_request_attention_kind(s->sreq, kind, sizeof kind);
        pl_log(p, "DiT attention: %s", kind);
    } else if (p->o.ref_kv_cache && l->cond_video_rows + l->cond_audio_rows > 0 && use_ref_kv(p, cfg, l)) {
        mm_dit_request_opts o;
        if (pl_refkv_create(&s->kv, p->dit_ctx, cfg, l, err) != 0 ||
            mm_tensor_alloc(&s->refined, dd, MM_BF16, 2, (int64_t[]){l->text_rows, cfg->hidden}, err) != 0 ||
            mm_dit_refine_text_ex(dit, p->dit_ctx, text_rows, j->lora_uses, j->n_loras, &s->refined, err) != 0)
            return -1;
        o = pl_refkv_capture_opts(s->kv, &s->refined);
        o.loras = j->lora_uses;
        o.n_loras = j->n_loras;
        o.sparse = s->sparse_on;
        if (mm_dit_request_begin_ex(dit, p->dit_ctx, l, NULL, &o, NULL, &s->dreq, err) != 0)
            return -1;
        pl_log(p, "reference KV cache: %lld pinned rows kept per block after the first forward (%.2f GiB)",
               (long long)pl_refkv_rows(s->kv), pl_refkv_bytes(cfg, l) / 1073741824.0);
    } else if (mm_dit_request_begin_ex(dit, p->dit_ctx, l, text_rows, lora_opts, NULL, &s->dreq, err) != 0) {
        return -1;
    }
    if (s->dreq) { /* fast mode: the DiT's 8-bit attention where the GPU has it */
        mm_dit_request_set_fast(s->dreq, j->req->fast);
        if (j->n_loras)
            pl_log(p, "LoRA adapters: %d, %s", j->n_loras, mm_dit_lora_path(s->dreq));
        if (s->kv) {
            pl_refkv_attach(s->kv, s->dreq);
            pl_log(p, "DiT attention: %s (through the reference KV cache's hook)", mm_dit_sdpa_kind(s->dreq, false));
        } else {
            pl_log(p, "DiT attention: %s", mm_dit_attention_kind(s->dreq));
        }
        if (s->sparse_on)
            pl_log(p, "sparse attention: %s", mm_dit_sparse_kind(s->dreq));
    }
    return 0;
}

int pl_denoise(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    if (!p->dit[j->partition]) {
        pl_report(j, MM_STAGE_LOADING, 0, 0);
        if (pl_load_dit(p, j->partition, j->t, err) != 0)
            return -1;
    }
    mm_dit *dit = p->dit[j->partition];
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const mm_sigma_schedule *sv = &j->schedule.video, *sa = &j->schedule.audio;
    loop_state s = {.j = j, .ctx = p->dit_ctx, .dit = dit};
    mm_tensor text = {0};
    const mm_tensor *text_rows = &j->cond.rows;
    int rc = -1;
    double t0 = mm_timing_now();
    mm_dit_request_opts lora_opts = {0};
    if (pl_loras_acquire(j, err) != 0 || adapters_schedule(j, err) != 0 || adapters_grid(j, dit, err) != 0)
        goto done;
    /* where the setup's time goes (-v): adapters ready, rows drawn, request begun */
    double adapters_ready = mm_timing_now(), rows_drawn = 0, request_begun = 0;
    lora_opts.loras = j->lora_uses;
    lora_opts.n_loras = j->n_loras;
    const int total = mm_schedule_forwards(&j->schedule);
    s.forwards = total;
    if (j->req->sparse) {
        if (mm_sparse_config_parse(j->req->sparse, &s.sparse, err) != 0)
            goto done;
        s.sparse_on = &s.sparse;
        lora_opts.sparse = s.sparse_on;
    }
    pl_report(j, MM_STAGE_DENOISING, 0, total);
    if (pl_build_layout(j, err) != 0 || initial_rows(j, cfg, err) != 0)
        goto done;
    if (p->o.layout_dump && dump_layout(j, sv, sa, err) != 0)
        goto done;
    rows_drawn = mm_timing_now();
    pl_preview_begin(j);
    const mm_dit_layout *l = &j->layout;
    mm_device dd = mm_ctx_device(p->dit_ctx);
    if (text_rows->device.kind != dd.kind || text_rows->device.index != dd.index) {
        if (pl_stage_copy(p->dit_ctx, &text, p->te_ctx, text_rows, err) != 0)
            goto done;
        text_rows = &text;
    }
    s.row_t = malloc(sizeof(float) * (size_t)l->rows);
    if (!s.row_t) {
        mm_fail(err, "out of memory");
        goto done;
    }
    const int vw = cfg->video_row_width, aw = cfg->audio_row_width;
    if (mm_tensor_alloc(&s.video, dd, MM_F32, 2, (int64_t[]){l->video_rows, vw}, err) != 0 ||
        mm_tensor_alloc(&s.audio, dd, MM_F32, 2, (int64_t[]){l->audio_rows, aw}, err) != 0 ||
        mm_tensor_alloc(&s.vv, dd, MM_F32, 2, (int64_t[]){l->video_rows, vw}, err) != 0 ||
        mm_tensor_alloc(&s.va, dd, MM_F32, 2, (int64_t[]){l->audio_rows, aw}, err) != 0)
        goto done;
    if (begin_dit_request(&s, j, text_rows, &lora_opts, err) != 0)
        goto done;
    request_begun = mm_timing_now();
    mm_step_cache_report_init(&s.cache_report);
    start_step_cache(&s, s.dreq);
    if (adapters_bank(j, s.dreq, err) != 0)
        goto done;
    mm_tensor_free(&text);
    mm_timing_add(j->t, MM_TG_INFERENCE, "DiT setup (layout, noise, refiner)",
                  mm_timing_now() - t0 - j->preview_fit_seconds);
    pl_log(p, "DiT setup: adapters %.3f s, layout and noise %.3f s, request (buffers, text, refiner) %.3f s, "
              "step cache and banks %.3f s", adapters_ready - t0, rows_drawn - adapters_ready,
           request_begun - rows_drawn - j->preview_fit_seconds, mm_timing_now() - request_begun);
    pl_log(p, "denoise: %lld rows (%lld text, %lld video, %lld audio), %d forwards (%s)", (long long)l->rows,
           (long long)l->text_rows, (long long)l->video_rows, (long long)l->audio_rows, total, j->schedule.origin);

    t0 = mm_timing_now();
    mm_flow_stream vstream = {j->video_rows, l->video_rows, l->cond_video_rows, vw, sv};
    mm_flow_stream astream = {j->audio_rows, l->audio_rows, l->cond_audio_rows, aw, sa};
    mm_flow_callbacks fcb = {.progress = on_progress, .should_cancel = on_cancel, .user = &s};
    rc = mm_flow_sample(&vstream, &astream, velocity, &s, &fcb, err);
    mm_timing_add(j->t, MM_TG_INFERENCE, "denoise (DiT forwards)", mm_timing_now() - t0 - j->preview_seconds);
    if (j->preview_seconds > 0)
        mm_timing_add(j->t, MM_TG_OVERHEAD, "live previews", j->preview_seconds);
    report_step_cache(&s);
    if (rc == 0 && p->o.latents_dump) {
        const char *names[] = {"video_rows", "audio_rows"};
        mm_tensor t[] = {
            mm_tensor_wrap(j->video_rows + l->cond_video_rows * vw, mm_cpu(), MM_F32, 2,
                           (int64_t[]){l->video_rows - l->cond_video_rows, vw}),
            mm_tensor_wrap(j->audio_rows + l->cond_audio_rows * aw, mm_cpu(), MM_F32, 2,
                           (int64_t[]){l->audio_rows - l->cond_audio_rows, aw}),
        };
        if (mm_st_save(p->o.latents_dump, 2, names, t, err) != 0)
            rc = mm_error_prefix(err, "latents dump %s", p->o.latents_dump);
    }
done:
    mm_dit_request_end(s.dreq);
    mm_dit_request_end(s.rreq);
    mm_sp_request_end(s.sreq);
    pl_refkv_free(s.kv);
    pl_loras_release(j);
    mm_tensor *all[] = {&text, &s.video, &s.audio, &s.vv, &s.va, &s.refined};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    free(s.row_t);
    /* the text rows are not needed any more */
    mm_tensor_free(&j->cond.rows);
    if (p->placement.te_swapped) { /* one small GPU: the text encoder needs the room next time */
        pl_free_dit(p, j->partition);
        mm_lora_cache_destroy(p->lora_cache); /* the adapters' device copies too (nothing is pinned now) */
        p->lora_cache = NULL;
    }
    if (rc < 0)
        mm_error_prefix(err, "denoising");
    return rc == MM_FLOW_CANCELLED ? MM_CANCELLED : rc;
}
