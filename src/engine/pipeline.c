/* The pipeline's resident state: files, placement, device contexts, loaded
 * models, the staging copy, and the driver of one request (see pipeline.h). */
#include "engine/pipeline.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <jansson.h>

#include "backend/device.h"
#include "backend/gpu.h"
#include "engine/memory_plan.h"
#include "engine/pipeline_internal.h"
#include "request/request.h"
#include "model/vae/vae.h"
#include "parallel/transfer.h"
#include "sampler/sigmas.h"

void mm_pipeline_options_defaults(mm_pipeline_options *o)
{
    memset(o, 0, sizeof *o);
    mm_sp_options_defaults(&o->sp);
}


static const char *partition_name(int part) { return part == PL_REF2VA ? "ref2va" : "fl2va"; }

static mm_component partition_component(int part) { return part == PL_REF2VA ? MM_COMP_DIT_REF2VA : MM_COMP_DIT_FL2VA; }

static uint64_t file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Shifts from the release's scheduler configs beside the FL2VA folder
 * (<config>/../scheduler, ../audio_scheduler), else the release's values. */
static float read_shift(const char *config_dir, const char *sub, float fallback)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/../%s/scheduler_config.json", config_dir, sub);
    json_t *j = json_load_file(path, 0, NULL);
    double v = j ? json_number_value(json_object_get(j, "shift")) : 0;
    json_decref(j);
    return v > 0 ? (float)v : fallback;
}

int pl_audio_rate(const mm_pipeline *p)
{
    if (p->avae)
        return mm_audio_vae_get_config(p->avae)->sample_rate;
    mm_audio_vae_options o;
    mm_audio_vae_options_release(&o);
    return o.sample_rate;
}

/* ------------------------------------------------------------- contexts */

static mm_ctx *ctx_for(mm_pipeline *p, mm_device dev, mm_error *err)
{
    for (int i = 0; i < p->n_ctx; i++) {
        mm_device d = mm_ctx_device(p->ctx[i]);
        if (d.kind == dev.kind && d.index == dev.index)
            return p->ctx[i];
    }
    if (p->n_ctx == PL_MAX_CTX) {
        mm_fail(err, "too many devices");
        return NULL;
    }
    mm_ctx *c;
    if (mm_ctx_create(&c, dev, dev.kind == MM_DEVICE_CPU ? p->o.threads : 0, err) != 0)
        return NULL;
    p->ctx[p->n_ctx++] = c;
    return c;
}

int pl_stage_copy(mm_ctx *dst_ctx, mm_tensor *dst, mm_ctx *src_ctx, const mm_tensor *src, mm_error *err)
{
    /* The source's stream must be done before another stream (or the host)
     * reads it; the copy runs on the destination's stream and is awaited so
     * the caller may free the source right after. */
    if (src_ctx && mm_ctx_sync(src_ctx, err) != 0)
        return mm_error_prefix(err, "staging copy (source)");
    mm_tensor contiguous = {0};
    const mm_tensor *from = src;
    mm_device sd = src->device, dd = mm_ctx_device(dst_ctx);
    bool cross = sd.kind != dd.kind || sd.index != dd.index;
    if (cross && !mm_tensor_is_contiguous(src)) {
        /* make it contiguous where it lives, then move whole bytes */
        if (!src_ctx)
            return mm_fail(err, "staging copy: a strided host tensor needs a context");
        if (mm_tensor_alloc(&contiguous, sd, src->dtype, src->ndim, src->shape, err) != 0)
            return -1;
        mm_copy(src_ctx, &contiguous, src);
        if (mm_ctx_sync(src_ctx, err) != 0) {
            mm_tensor_free(&contiguous);
            return -1;
        }
        from = &contiguous;
    }
    int rc = mm_tensor_alloc(dst, dd, src->dtype, src->ndim, src->shape, err);
    if (rc == 0) {
        if (cross) {
            /* GPU pairs whose peer copies are not verified go through the host */
            rc = mm_transfer(dst, from, MM_XFER_AUTO, err);
        } else {
            mm_copy(dst_ctx, dst, from);
            rc = mm_ctx_sync(dst_ctx, err);
        }
        if (rc != 0)
            mm_tensor_free(dst);
    }
    mm_tensor_free(&contiguous);
    return rc != 0 ? mm_error_prefix(err, "staging copy") : 0;
}

int pl_upload_f32(mm_ctx *ctx, mm_tensor *dst, const float *host, int ndim, const int64_t *shape, mm_error *err)
{
    mm_tensor h = mm_tensor_wrap((void *)host, mm_cpu(), MM_F32, ndim, shape);
    return pl_stage_copy(ctx, dst, NULL, &h, err);
}

/* ----------------------------------------------------------------- create */

/* The memory plan for the DiT's GPU (and the text encoder's, when it has a
 * second one): which DiT blocks stream and what is loaded per use. It takes
 * over the placement's one-GPU rule; --offload still loads per use. */
static int plan_memory(mm_pipeline *p, mm_error *err)
{
    const mm_placement *pl = &p->placement;
    if (pl->dit.kind != MM_DEVICE_CUDA || p->o.gpus > 1)
        return 0;
    const bool apart = !mm_device_eq(pl->dit, pl->text_encoder);
    if (apart && (pl->text_encoder.kind != MM_DEVICE_CUDA || pl->dit.index != 0 || pl->text_encoder.index != 1))
        return 0; /* a layout the plan does not describe: keep the placement's rule */
    if (!apart && pl->dit.index != 0)
        return 0;
    const mm_component dit = p->have[MM_COMP_DIT_FL2VA] ? MM_COMP_DIT_FL2VA : MM_COMP_DIT_REF2VA;
    const mm_plan_clip clip = {.width = p->o.plan_width, .height = p->o.plan_height, .frames = p->o.plan_frames};
    mm_memplan_sizes s;
    if (mm_plan_sizes(p->files[dit].path, p->files[MM_COMP_TEXT_ENCODER].path, p->files[MM_COMP_VIDEO_VAE].path,
                      p->files[MM_COMP_AUDIO_VAE].path, &clip, &s, err) != 0 ||
        mm_plan_for_host(apart ? 2 : 1, 0, p->o.vram_budget, &s, &p->plan, err) != 0)
        return mm_error_prefix(err, "memory plan");
    p->planned = true;
    p->plan_blocks = s.dit_blocks;
    p->placement.te_swapped = p->plan.dit_freed;
    if (p->plan.te_per_use)
        p->o.offload = true;
    pl_log(p, "memory plan: %s", p->plan.summary);
    return 0;
}

int mm_pipeline_create(mm_pipeline **out, const mm_pipeline_options *o, mm_error *err)
{
    *out = NULL;
    mm_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return mm_fail(err, "out of memory");
    p->o = *o;
    pthread_mutex_init(&p->status_lock, NULL);
    snprintf(p->status_note, sizeof p->status_note, "not loaded");

    /* Files: the text encoder, both VAEs and the config folder are needed;
     * of the DiTs, at least one (a request for a missing one fails then). */
    static const mm_component needed[] = {MM_COMP_TEXT_ENCODER, MM_COMP_VIDEO_VAE, MM_COMP_AUDIO_VAE, MM_COMP_CONFIG};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        if (mm_checkpoint_resolve(needed[i], &o->checkpoints, &p->files[needed[i]], err) != 0) {
            mm_pipeline_destroy(p);
            return -1;
        }
        p->have[needed[i]] = true;
        pl_log(p, "%s: %s (%s)", mm_component_get(needed[i])->title, p->files[needed[i]].path,
               mm_found_where_name(p->files[needed[i]].where));
    }
    mm_error first = {{0}};
    for (int part = 0; part < PL_PARTITIONS; part++) {
        mm_component c = partition_component(part);
        mm_error e = {{0}};
        if (mm_checkpoint_resolve(c, &o->checkpoints, &p->files[c], &e) == 0) {
            p->have[c] = true;
            pl_log(p, "%s: %s (%s)", mm_component_get(c)->title, p->files[c].path,
                   mm_found_where_name(p->files[c].where));
        } else if (!first.msg[0]) {
            first = e;
        }
    }
    if (!p->have[MM_COMP_DIT_FL2VA] && !p->have[MM_COMP_DIT_REF2VA]) {
        *err = first;
        mm_pipeline_destroy(p);
        return -1;
    }
    p->video_shift = read_shift(p->files[MM_COMP_CONFIG].path, "scheduler", PL_VIDEO_SHIFT);
    p->audio_shift = read_shift(p->files[MM_COMP_CONFIG].path, "audio_scheduler", PL_AUDIO_SHIFT);

    /* Cross-GPU copies: staged through the host unless the user opted in. */
    mm_transfer_set_policy(&(mm_transfer_policy){.peer_copy = o->peer_copy});

    /* Placement: the decision `mmh3 check` reports. */
    int n_gpus = mm_cuda_device_count();
    mm_placement_in pin = {.n_gpus = n_gpus, .device = o->device, .te_device = o->te_device};
    for (int g = 0; g < n_gpus && g < 16; g++) {
        mm_gpu_info info;
        mm_error e = {{0}};
        if (mm_gpu_info_get(g, &info, &e) == 0)
            pin.gpu_total[g] = info.total_bytes;
    }
    pin.dit_bytes = file_bytes(p->files[p->have[MM_COMP_DIT_FL2VA] ? MM_COMP_DIT_FL2VA : MM_COMP_DIT_REF2VA].path);
    pin.te_bytes = file_bytes(p->files[MM_COMP_TEXT_ENCODER].path);
    pin.vae_bytes = file_bytes(p->files[MM_COMP_VIDEO_VAE].path) + file_bytes(p->files[MM_COMP_AUDIO_VAE].path);
    if (mm_placement_choose(&pin, &p->placement, err) != 0) {
        mm_pipeline_destroy(p);
        return -1;
    }
    pl_log(p, "placement: %s (%s)", p->placement.summary, p->placement.reason);
    if (plan_memory(p, err) != 0) {
        mm_pipeline_destroy(p);
        return -1;
    }
    if (!(p->dit_ctx = ctx_for(p, p->placement.dit, err)) ||
        !(p->te_ctx = ctx_for(p, p->placement.text_encoder, err)) ||
        !(p->vae_ctx = ctx_for(p, p->placement.vae, err))) {
        mm_pipeline_destroy(p);
        return -1;
    }
    size_t ref_budget = o->ref_cache_bytes ? o->ref_cache_bytes : (size_t)1 << 30;
    if (ref_budget != SIZE_MAX && pl_ref_cache_create(&p->ref_cache, ref_budget, err) != 0) {
        mm_pipeline_destroy(p);
        return -1;
    }
    *out = p;
    return 0;
}

/* ------------------------------------------------------------------- load */

bool pl_swapping(const mm_pipeline *p) { return p->o.offload || p->placement.te_swapped; }

static int load_conditioner(mm_pipeline *p, mm_timing *t, mm_error *err)
{
    if (p->cond)
        return 0;
    double t0 = mm_timing_now();
    const char *dir = p->files[MM_COMP_CONFIG].path;
    char path[4400];
    mm_conditioner_options co = {0};
    if (!p->tok_owner) {
        snprintf(path, sizeof path, "%s/tokenizer", dir);
        if (mm_text_tokenizer_open(path, &p->tok, &p->tok_owner, err) != 0)
            return mm_error_prefix(err, "tokenizer %s", path);
    }
    snprintf(path, sizeof path, "%s/text_encoder/config.json", dir);
    if (mm_qwen3vl_config_load(&co.config, path, err) != 0)
        return mm_error_prefix(err, "%s", path);
    snprintf(path, sizeof path, "%s/processor/preprocessor_config.json", dir);
    if (mm_qwen3vl_processor_config_load(&co.image_proc, path, err) != 0)
        return mm_error_prefix(err, "%s", path);
    snprintf(path, sizeof path, "%s/processor/video_preprocessor_config.json", dir);
    if (mm_qwen3vl_processor_config_load(&co.video_proc, path, err) != 0)
        return mm_error_prefix(err, "%s", path);
    size_t pc_budget = p->o.prompt_cache_bytes ? p->o.prompt_cache_bytes : (size_t)256 << 20;
    if (!p->prompt_cache && pc_budget != SIZE_MAX &&
        mm_prompt_cache_create(&p->prompt_cache, NULL, pc_budget, 0, err) != 0)
        return -1;
    co.checkpoint = p->files[MM_COMP_TEXT_ENCODER].path;
    co.tokenizer = p->tok;
    co.tap = 0;
    co.out_dtype = MM_BF16;
    co.cache = p->prompt_cache;
    p->te_config = co.config;
    if (mm_conditioner_load(&p->cond, &co, p->te_ctx, err) != 0)
        return mm_error_prefix(err, "text encoder %s", co.checkpoint);
    double s = mm_timing_now() - t0;
    mm_timing_add(t, MM_TG_LOADING, "load text encoder", s);
    pl_log(p, "text encoder loaded in %.2f s (%d layers)", s, mm_conditioner_tap(p->cond));
    return 0;
}

static void free_conditioner(mm_pipeline *p)
{
    if (p->cond) {
        mm_ctx_sync(p->te_ctx, NULL);
        mm_conditioner_free(p->cond);
        p->cond = NULL;
    }
}

static int load_vaes(mm_pipeline *p, mm_timing *t, mm_error *err)
{
    if (!p->vvae) {
        double t0 = mm_timing_now();
        mm_video_vae_options vo;
        mm_video_vae_options_release(&vo);
        vo.int8_linears = p->o.vae_int8;
        if (mm_video_vae_load(&p->vvae, p->files[MM_COMP_VIDEO_VAE].path, &vo, MM_VAE_BOTH, p->vae_ctx, err) != 0)
            return mm_error_prefix(err, "video VAE %s", p->files[MM_COMP_VIDEO_VAE].path);
        mm_timing_add(t, MM_TG_LOADING, p->o.vae_int8 ? "load video VAE (int8 decoder linears)" : "load video VAE",
                      mm_timing_now() - t0);
    }
    if (!p->avae) {
        double t0 = mm_timing_now();
        if (mm_audio_vae_load(&p->avae, p->files[MM_COMP_AUDIO_VAE].path, NULL, MM_VAE_BOTH, p->vae_ctx, err) != 0)
            return mm_error_prefix(err, "audio VAE %s", p->files[MM_COMP_AUDIO_VAE].path);
        mm_timing_add(t, MM_TG_LOADING, "load audio VAE", mm_timing_now() - t0);
    }
    return 0;
}

static void free_vaes(mm_pipeline *p)
{
    if (p->vvae || p->avae)
        mm_ctx_sync(p->vae_ctx, NULL);
    mm_video_vae_free(p->vvae);
    mm_audio_vae_free(p->avae);
    p->vvae = NULL;
    p->avae = NULL;
}

int pl_load_dit(mm_pipeline *p, int part, mm_timing *t, mm_error *err)
{
    if (p->dit[part])
        return 0;
    mm_component c = partition_component(part);
    if (!p->have[c])
        return mm_fail(err, "partition %s: %s", partition_name(part),
                       "its DiT checkpoint was not found (see `mmh3 check --partition ...`)");
    int other = 1 - part;
    if (p->dit[other] && !p->placement.both_dits_fit) {
        pl_free_dit(p, other);
        pl_log(p, "DiT (%s) freed to make room for %s", partition_name(other), partition_name(part));
    }
    double t0 = mm_timing_now();
    if (p->o.gpus > 1) {
        /* Sequence parallel: one replica per GPU (src/parallel/sp_dit.h). */
        mm_sp_options so = p->o.sp;
        so.ranks = p->o.gpus;
        if (mm_sp_dit_load(&p->sp[part], p->files[c].path, p->dit_ctx, &so, NULL, err) != 0)
            return mm_error_prefix(err, "DiT %s over %d GPUs", p->files[c].path, p->o.gpus);
        p->dit[part] = mm_sp_dit_replica(p->sp[part], 0);
        char desc[800];
        mm_sp_dit_describe(p->sp[part], desc, sizeof desc);
        pl_log(p, "DiT %s sequence-parallel: %s", partition_name(part), desc);
    } else {
        /* Both partitions' DiTs have the release's blocks: the plan made for one fits the other. */
        mm_dit_residency res = {0};
        if (p->planned && p->plan.streamed)
            res = (mm_dit_residency){.stream = p->plan.stream, .n = p->plan_blocks};
        if (mm_dit_load_ex(&p->dit[part], p->files[c].path, p->dit_ctx, NULL, &res, err) != 0)
            return mm_error_prefix(err, "DiT %s", p->files[c].path);
        if (res.n)
            pl_log(p, "DiT %s: %d of %d blocks streamed from pinned host memory", partition_name(part),
                   mm_dit_streamed_blocks(p->dit[part]), res.n);
    }
    const mm_dit_config *cfg = mm_dit_get_config(p->dit[part]);
    if (cfg->text_dim != p->te_config.text.hidden && p->te_config.text.hidden) {
        pl_free_dit(p, part);
        return mm_fail(err, "the DiT reads %d-wide text features but the text encoder is %d wide: files of "
                            "different models",
                       cfg->text_dim, p->te_config.text.hidden);
    }
    char row[40];
    snprintf(row, sizeof row, "load DiT (%s)", partition_name(part));
    double s = mm_timing_now() - t0;
    mm_timing_add(t, MM_TG_LOADING, row, s);
    pl_log(p, "DiT %s loaded in %.2f s (%d blocks, hidden %d)", partition_name(part), s, cfg->layers, cfg->hidden);
    return 0;
}

void pl_free_dit(mm_pipeline *p, int part)
{
    if (p->dit[part]) {
        mm_ctx_sync(p->dit_ctx, NULL);
        if (p->sp[part])
            mm_sp_dit_free(p->sp[part]); /* owns dit[part] */
        else
            mm_dit_free(p->dit[part]);
        p->dit[part] = NULL;
        p->sp[part] = NULL;
    }
}

int pl_ensure_conditioner(mm_pipeline *p, mm_timing *t, mm_error *err) { return load_conditioner(p, t, err); }
void pl_release_conditioner(mm_pipeline *p)
{
    if (pl_swapping(p))
        free_conditioner(p);
}
int pl_ensure_vaes(mm_pipeline *p, mm_timing *t, mm_error *err) { return load_vaes(p, t, err); }
void pl_release_vaes(mm_pipeline *p)
{
    if (pl_swapping(p))
        free_vaes(p);
}

static int parse_partition(const char *s, int *part, mm_error *err)
{
    if (!s || !*s || strcmp(s, "fl2va") == 0)
        *part = PL_FL2VA;
    else if (strcmp(s, "ref2va") == 0)
        *part = PL_REF2VA;
    else
        return mm_fail(err, "partition '%s': accepted: %s", s, MM_ACCEPT_PARTITION);
    return 0;
}

static void set_note(mm_pipeline *p, const char *note)
{
    pthread_mutex_lock(&p->status_lock);
    snprintf(p->status_note, sizeof p->status_note, "%s", note);
    pthread_mutex_unlock(&p->status_lock);
}

int mm_pipeline_load(mm_pipeline *p, const char *partition, mm_timing *t, mm_error *err)
{
    int part;
    if (parse_partition(partition, &part, err) != 0)
        return -1;
    if (!partition && !p->have[partition_component(part)]) /* no choice made: whichever DiT exists */
        part = 1 - part;
    set_note(p, "loading");
    if (!pl_swapping(p)) {
        if (load_conditioner(p, t, err) != 0 || load_vaes(p, t, err) != 0 || pl_load_dit(p, part, t, err) != 0) {
            set_note(p, "load failed");
            return -1;
        }
    } else if (!p->placement.te_swapped && pl_load_dit(p, part, t, err) != 0) {
        /* --offload keeps the DiT resident; the text encoder and VAEs come per request */
        set_note(p, "load failed");
        return -1;
    }
    set_note(p, pl_swapping(p) ? "resident (text encoder and VAEs loaded per request)" : "resident");
    return 0;
}

bool mm_pipeline_loaded(const mm_pipeline *p)
{
    return p->dit[PL_FL2VA] || p->dit[PL_REF2VA] || p->cond;
}

void mm_pipeline_unload(mm_pipeline *p)
{
    if (!p)
        return;
    free_conditioner(p);
    free_vaes(p);
    for (int part = 0; part < PL_PARTITIONS; part++)
        pl_free_dit(p, part);
    set_note(p, "not loaded");
}

void mm_pipeline_destroy(mm_pipeline *p)
{
    if (!p)
        return;
    mm_pipeline_unload(p);
    if (p->tok_owner)
        mm_text_tokenizer_close(p->tok_owner);
    mm_prompt_cache_destroy(p->prompt_cache);
    pl_ref_cache_destroy(p->ref_cache);
    mm_lora_cache_destroy(p->lora_cache);
    for (int i = 0; i < p->n_ctx; i++)
        mm_ctx_destroy(p->ctx[i]);
    pthread_mutex_destroy(&p->status_lock);
    free(p);
}

const char *mm_pipeline_placement(const mm_pipeline *p) { return p->placement.summary; }

/* --------------------------------------------------------------- one run */

void pl_report(pl_job *j, mm_stage stage, int step, int total)
{
    double now = mm_timing_now();
    if (stage != j->stage) {
        j->res->stage_seconds[j->stage] += now - j->stage_t0;
        j->stage = stage;
        j->stage_t0 = now;
    }
    if (j->cb && j->cb->progress) {
        /* every report carries the request's forward count, as the mock's do */
        mm_progress pr = {.stage = stage, .step = step, .total_steps = total ? total : j->total_forwards,
                          .elapsed = now - j->t0};
        j->cb->progress(j->cb->user, &pr);
    }
}

bool pl_cancelled(const pl_job *j)
{
    return j->cb && j->cb->should_cancel && j->cb->should_cancel(j->cb->user);
}

/* The request's values against the request rules (request/request.h), for
 * callers that did not come through mm_request_settle; and what only the
 * engine needs: files to read and write. */
static int validate(const mm_gen_request *r, int part, mm_error *err)
{
    if (!r->out_path || !*r->out_path)
        return mm_fail(err, "no output path");
    if (mm_step_cache_check(&r->cache, part == PL_REF2VA, err) != 0)
        return mm_error_prefix(err, "step cache");
    if (r->n_references < 0 || r->n_references > MM_MAX_REFERENCES)
        return mm_fail(err, "%d references: accepted: at most %d", r->n_references, MM_MAX_REFERENCES);
    mm_request q = {.prompt = r->prompt, .n_refs = r->n_references, .has_last_image = r->last_image_path != NULL,
                    .frames = r->frames, .width = r->width, .height = r->height, .steps = r->steps, .crf = r->crf};
    snprintf(q.partition, sizeof q.partition, "%s", partition_name(part));
    snprintf(q.preset, sizeof q.preset, "%s", r->preset ? r->preset : MM_PRESET_DEFAULT);
    for (int i = 0; i < r->n_references; i++) {
        if ((unsigned)r->references[i].kind > MM_REF_AUDIO || !r->references[i].path)
            return mm_fail(err, "reference %d: no file", i + 1);
        q.refs[i].kind = r->references[i].kind;
    }
    if (r->n_loras < 0 || r->n_loras > MM_GEN_MAX_LORAS)
        return mm_fail(err, "%d LoRA adapters: accepted: %s", r->n_loras, MM_ACCEPT_LORA);
    for (int i = 0; i < r->n_loras; i++)
        if (!r->loras[i].name || !*r->loras[i].name || mm_rule_lora_strength(r->loras[i].strength, err) != 0)
            return mm_fail(err, "LoRA %d: accepted: %s", i + 1, MM_ACCEPT_LORA);
    return mm_request_verify(&q, err);
}

static void record_memory(mm_pipeline *p, mm_timing *t, size_t *peak_device)
{
    char name[32];
    *peak_device = 0;
    for (int i = 0; i < p->n_ctx; i++) {
        mm_device d = mm_ctx_device(p->ctx[i]);
        mm_device_name(d, name, sizeof name);
        if (d.kind == MM_DEVICE_CPU) {
            struct rusage ru;
            if (getrusage(RUSAGE_SELF, &ru) == 0)
                mm_timing_memory_peak(t, "cpu (peak RSS)", (size_t)ru.ru_maxrss * 1024);
            continue;
        }
        mm_memory_stats ms;
        if (mm_device_memory_stats(d, &ms) == 0) {
            mm_timing_memory_peak(t, name, ms.peak);
            if (ms.peak > *peak_device)
                *peak_device = ms.peak;
        }
    }
}

int mm_pipeline_run(mm_pipeline *p, const mm_gen_request *req, const mm_gen_callbacks *cb, mm_gen_result *res,
                    mm_error *err)
{
    pl_job *j = calloc(1, sizeof *j);
    if (!j)
        return mm_fail(err, "out of memory");
    j->p = p;
    j->req = req;
    j->cb = cb;
    j->res = res;
    j->t = &res->timing;
    j->t0 = j->stage_t0 = mm_timing_now();
    j->stage = MM_STAGE_QUEUED;
    int rc = -1;
    if (parse_partition(req->partition, &j->partition, err) != 0 || validate(req, j->partition, err) != 0)
        goto done;
    if (mm_schedule_resolve(req->sigmas, req->sampler, req->steps, p->video_shift, p->audio_shift, &j->schedule,
                            err) != 0)
        goto done;
    j->total_forwards = mm_schedule_forwards(&j->schedule);
    j->width = req->width;
    j->height = req->height;
    j->frames = req->frames;
    j->t->frames = req->frames;
    j->t->width = req->width;
    j->t->height = req->height;
    snprintf(res->placement, sizeof res->placement, "%s", p->placement.summary);
    set_note(p, "rendering");

    if (!pl_swapping(p) && (!p->cond || !p->dit[j->partition])) {
        pl_report(j, MM_STAGE_LOADING, 0, 0);
        if (mm_pipeline_load(p, partition_name(j->partition), j->t, err) != 0)
            goto done;
    }
    pl_report(j, MM_STAGE_ENCODING_PROMPT, 0, 0);
    double t0 = mm_timing_now();
    if (pl_inputs_read(j, err) != 0)
        goto done;
    mm_timing_add(j->t, MM_TG_OVERHEAD, "read + place inputs", mm_timing_now() - t0);
    if (pl_cancelled(j)) {
        rc = MM_CANCELLED;
        goto done;
    }
    if (pl_condition(j, err) != 0)
        goto done;
    if (pl_cancelled(j)) {
        rc = MM_CANCELLED;
        goto done;
    }
    if ((rc = pl_encode_references(j, err)) != 0)
        goto done;
    rc = -1;
    if (pl_cancelled(j)) {
        rc = MM_CANCELLED;
        goto done;
    }
    rc = pl_denoise(j, err);
    if (rc != 0)
        goto done;
    rc = pl_decode(j, err);
done:
    if (rc < 0)
        mm_error_prefix(err, "%s", partition_name(j->partition));
    pl_report(j, j->stage, 0, 0); /* closes the last stage's seconds */
    if (rc != 0)
        for (int i = 0; i < p->n_ctx; i++) { /* a failed job must not poison the next one */
            mm_ctx_sync(p->ctx[i], NULL);
            mm_ctx_clear_error(p->ctx[i]);
        }
    double wall = mm_timing_now() - j->t0;
    res->total_seconds = wall;
    j->t->wall = wall;
    j->t->forwards = j->forwards;
    record_memory(p, j->t, &res->peak_device_bytes);
    pl_items_free(j);
    mm_cond_result_free(&j->cond);
    mm_dit_layout_free(&j->layout);
    mm_schedule_free(&j->schedule);
    free(j->video_rows);
    free(j->audio_rows);
    free(j);
    pthread_mutex_lock(&p->status_lock);
    p->jobs++;
    p->last_job_seconds = wall;
    snprintf(p->status_note, sizeof p->status_note, "%s",
             mm_pipeline_loaded(p) ? "resident" : pl_swapping(p) ? "idle (weights loaded per request)" : "not loaded");
    pthread_mutex_unlock(&p->status_lock);
    return rc;
}

/* ----------------------------------------------------------------- status */

int mm_pipeline_status_json(mm_pipeline *p, char *buf, size_t n)
{
    json_t *o = json_object();
    pthread_mutex_lock(&p->status_lock);
    json_object_set_new(o, "resident", json_boolean(p->dit[PL_FL2VA] || p->dit[PL_REF2VA]));
    json_object_set_new(o, "placement", json_string(p->placement.summary));
    json_object_set_new(o, "placement_reason", json_string(p->placement.reason));
    json_object_set_new(o, "state_note", json_string(p->status_note));
    json_t *parts = json_array();
    for (int part = 0; part < PL_PARTITIONS; part++)
        if (p->dit[part])
            json_array_append_new(parts, json_string(partition_name(part)));
    json_object_set_new(o, "partitions_resident", parts);
    json_object_set_new(o, "text_encoder_resident", json_boolean(p->cond != NULL));
    json_object_set_new(o, "vae_resident", json_boolean(p->vvae != NULL));
    json_object_set_new(o, "offload", json_boolean(pl_swapping(p)));
    json_object_set_new(o, "jobs", json_integer(p->jobs));
    json_t *lo = json_object();
    json_object_set_new(lo, "resident", json_integer(p->lora_cache ? mm_lora_cache_count(p->lora_cache) : 0));
    json_object_set_new(lo, "bytes", json_integer(p->lora_cache ? (json_int_t)mm_lora_cache_bytes(p->lora_cache) : 0));
    json_object_set_new(o, "loras", lo);
    json_object_set_new(o, "last_job_seconds", json_real(p->last_job_seconds));
    json_t *mem = json_object();
    char name[32];
    for (int i = 0; i < p->n_ctx; i++) {
        mm_device d = mm_ctx_device(p->ctx[i]);
        mm_device_name(d, name, sizeof name);
        json_t *m = json_object();
        if (d.kind == MM_DEVICE_CPU) {
            struct rusage ru;
            if (getrusage(RUSAGE_SELF, &ru) == 0)
                json_object_set_new(m, "peak_rss_bytes", json_integer((json_int_t)ru.ru_maxrss * 1024));
        } else {
            mm_memory_stats ms;
            mm_gpu_info info;
            mm_error e = {{0}};
            if (mm_device_memory_stats(d, &ms) == 0) {
                json_object_set_new(m, "in_use_bytes", json_integer((json_int_t)ms.in_use));
                json_object_set_new(m, "peak_bytes", json_integer((json_int_t)ms.peak));
                json_object_set_new(m, "reserved_bytes", json_integer((json_int_t)ms.reserved));
            }
            if (mm_gpu_info_get(d.index, &info, &e) == 0) {
                json_object_set_new(m, "total_bytes", json_integer((json_int_t)info.total_bytes));
                json_object_set_new(m, "free_bytes", json_integer((json_int_t)info.free_bytes));
            }
        }
        json_object_set_new(mem, name, m);
    }
    json_object_set_new(o, "memory", mem);
    pthread_mutex_unlock(&p->status_lock);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -1;
    int rc = strlen(s) < n ? 0 : -1;
    if (rc == 0)
        memcpy(buf, s, strlen(s) + 1);
    free(s);
    return rc;
}
