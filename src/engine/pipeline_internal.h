/* What the pipeline's stage files share: the resident state and one
 * request's working state. Not for use outside src/engine/pipeline*.c. */
#ifndef MMH3_ENGINE_PIPELINE_INTERNAL_H
#define MMH3_ENGINE_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/log.h"
#include "backend/ops.h"
#include "backend/memplan.h"
#include "backend/placement.h"
#include "engine/pipeline.h"
#include "engine/preview.h"
#include "model/dit/dit.h"
#include "model/lora/lora.h"
#include "model/text/conditioner.h"
#include "model/text/text_tokenizer.h"
#include "parallel/sp_dit.h"
#include "sampler/schedule.h"

enum { PL_FL2VA = 0, PL_REF2VA = 1, PL_PARTITIONS = 2 };

#define PL_MAX_CTX 4
/* fl2va expands each video into 4 pictures: 15 references x 4 + the last image. */
#define PL_MAX_ITEMS 64
/* The release's constants the checkpoints do not carry (dit.md §5.5, §6.1). */
#define PL_CONDITION_T 0.999f
#define PL_VIDEO_SHIFT 12.0f
#define PL_AUDIO_SHIFT 3.0f
#define PL_REF_IMAGE_SHORT_EDGE 2048
#define PL_REF_VIDEO_SHORT_EDGE 768
#define PL_REF_AUDIO_MAX_SECONDS 15.0
#define PL_FL2VA_VIDEO_PICTURES 4

typedef struct pl_ref_cache pl_ref_cache;
/* model/vae/vae.h is not included here: its mm_video_frame_fn clashes with
 * media/video_reader.h's, and pipeline_inputs.c needs the latter. */
typedef struct mm_video_vae mm_video_vae;
typedef struct mm_audio_vae mm_audio_vae;

struct mm_pipeline {
    mm_pipeline_options o;
    mm_resolved files[MM_COMP_COUNT];
    bool have[MM_COMP_COUNT];
    mm_placement placement;
    mm_memplan plan; /* applied when planned (one GPU for the DiT; not --device cpu, not --gpus N) */
    bool planned;
    int plan_blocks; /* the DiT blocks it was made for */
    mm_ctx *ctx[PL_MAX_CTX];
    int n_ctx;
    mm_ctx *dit_ctx, *te_ctx, *vae_ctx;
    /* resident models */
    mm_dit *dit[PL_PARTITIONS]; /* with --gpus N: rank 0's replica of sp[] (owned there) */
    mm_sp_dit *sp[PL_PARTITIONS];
    mm_conditioner *cond;
    mm_qwen3vl_config te_config;
    mm_text_tokenizer tok;
    void *tok_owner;
    mm_prompt_cache *prompt_cache;
    mm_video_vae *vvae;
    mm_audio_vae *avae;
    pl_ref_cache *ref_cache;
    mm_lora_cache *lora_cache; /* adapters resident between jobs (pipeline_lora.c; made on first use) */
    float video_shift, audio_shift;
    /* live previews: the video VAE's projection (pipeline_preview.c) */
    mm_preview_projection preview;
    int preview_state; /* 0: not made yet, 1: ready, -1: failed (no previews in this process) */
    /* what status_json reports (written under status_lock) */
    pthread_mutex_t status_lock;
    int jobs;
    double last_job_seconds;
    char status_note[256];
};

/* ------------------------------------------------------------ one request */

typedef enum pl_role {
    PL_KEYFRAME_FIRST = 0, /* fl2va: pinned rows + <Picture i> */
    PL_KEYFRAME_LAST,
    PL_VISION_PICTURE,     /* fl2va: extra pictures, vision block only */
    PL_REF_IMAGE,          /* ref2va */
    PL_REF_VIDEO,
    PL_REF_AUDIO,
} pl_role;

typedef struct pl_item {
    pl_role role;
    const char *path;
    int ref_index;          /* position in the request's references (-1: the last image) */
    /* pictures: RGB24 on their canvas */
    uint8_t *rgb;
    int width, height;
    int src_width, src_height; /* as the file has it (pictures, ref2va videos) */
    /* ref2va video: every frame on its canvas, and the 2 fps samples for Qwen3-VL */
    uint8_t *frames;
    int n_frames;
    uint8_t *vis;
    int64_t n_vis;
    double *vis_times;
    /* audio clip, or a video's soundtrack: planar stereo at the VAE rate */
    float *audio;
    int64_t audio_samples;
    bool has_audio;
    /* content hash of the file + how it was prepared (reference cache key) */
    uint8_t key[32];
    /* latents (normalized) */
    float *vlat;            /* [C, T, h, w] */
    int64_t vshape[4];
    float *alat;            /* [2][C][A] */
    int64_t a_latents;
    int a_channels;
    bool cached;            /* latents came from the reference cache */
    double video_s, audio_s; /* encode wall seconds (pipeline_references.c's breakdown) */
} pl_item;
/* The name users know an item by, in logs and errors alike: "reference N"
 * (the N-th -i / image_ids entry, keyframes included) or "last image". */
const char *pl_item_name(const pl_item *it, char *buf, size_t n);

typedef struct pl_job {
    mm_pipeline *p;
    const mm_gen_request *req;
    const mm_gen_callbacks *cb;
    mm_gen_result *res;
    mm_timing *t;
    int partition;
    int width, height, frames;
    int T, Hl, Wl, A; /* latent frames, latent canvas, audio latents per channel */
    pl_item items[PL_MAX_ITEMS];
    int n_items;
    mm_cond_result cond;
    mm_dit_config dit_cfg; /* of the DiT that denoised (it may be freed before decoding) */
    mm_dit_layout layout;
    float *video_rows, *audio_rows; /* host f32 state of the sampler */
    mm_schedule schedule;           /* the request's σ points and per-step extras */
    int forwards, total_forwards;
    /* the request's adapters, pinned in the pipeline's LRU for the job */
    mm_lora *loras[MM_GEN_MAX_LORAS];
    mm_lora_use lora_uses[MM_GEN_MAX_LORAS];
    int n_loras;
    double t0, stage_t0;
    mm_stage stage;
    /* live previews of this job (pipeline_preview.c) */
    bool preview_on;
    double preview_last, preview_seconds;
    double preview_fit_seconds; /* making the projection in pl_preview_begin (a loading row of its own) */
} pl_job;

/* Loading on demand (pipeline.c). "Swapping": the text encoder and the VAEs
 * are loaded for each request and freed after use (--offload, or one GPU too
 * small for everything, where the DiT is freed after denoising as well). */
bool pl_swapping(const mm_pipeline *p);
int pl_load_dit(mm_pipeline *p, int part, mm_timing *t, mm_error *err);
void pl_free_dit(mm_pipeline *p, int part);
int pl_ensure_conditioner(mm_pipeline *p, mm_timing *t, mm_error *err);
void pl_release_conditioner(mm_pipeline *p);
int pl_ensure_vaes(mm_pipeline *p, mm_timing *t, mm_error *err);
void pl_release_vaes(mm_pipeline *p);

/* The audio VAE's sample rate (the release's 32 kHz until it is loaded). */
int pl_audio_rate(const mm_pipeline *p);

/* Stage bookkeeping: moves to `stage` (closing the previous one's seconds)
 * and reports progress. */
void pl_report(pl_job *j, mm_stage stage, int step, int total);
bool pl_cancelled(const pl_job *j);
#define pl_log(p, ...) mm_log_to((p)->o.log, (p)->o.log_user, __VA_ARGS__)

/* The one cross-device copy: src (on src_ctx's device, or the host) into a
 * new tensor on dst_ctx's device, after src_ctx's queued work. */
int pl_stage_copy(mm_ctx *dst_ctx, mm_tensor *dst, mm_ctx *src_ctx, const mm_tensor *src, mm_error *err);
/* Host f32 array → a new f32 tensor on ctx's device. */
int pl_upload_f32(mm_ctx *ctx, mm_tensor *dst, const float *host, int ndim, const int64_t *shape, mm_error *err);

/* pipeline_inputs.c: read and place every keyframe / reference. */
int pl_inputs_read(pl_job *j, mm_error *err);
void pl_items_free(pl_job *j);
/* The canvas of a reference of w x h with the given short edge: the target
 * rule scaled (short edge, area capped at short·short·1344/768, 32-px grid). */
void pl_ref_canvas(int w, int h, int short_edge, int *out_w, int *out_h);
/* ref2va picture size: short edge `short_edge`, sides rounded to 32. */
void pl_ref_picture_size(int w, int h, int short_edge, int *out_w, int *out_h);

/* pipeline_condition.c: the prompt (+ pictures/videos) through Qwen3-VL. */
int pl_condition(pl_job *j, mm_error *err);

/* pipeline_references.c: VAE encodes of keyframes and references. */
int pl_encode_references(pl_job *j, mm_error *err);
int pl_ref_cache_create(pl_ref_cache **out, size_t budget, mm_error *err);
void pl_ref_cache_destroy(pl_ref_cache *c);

/* pipeline_denoise.c: layout, noise, DiT forwards. */
int pl_build_layout(pl_job *j, mm_error *err);
int pl_denoise(pl_job *j, mm_error *err);

/* pipeline_lora.c: the request's adapters from the LRU onto the DiT's device
 * (j->lora_uses), and back. */
int pl_loras_acquire(pl_job *j, mm_error *err);
void pl_loras_release(pl_job *j);

/* pipeline_preview.c: live previews of the clean estimate. begin decides
 * whether this job makes them (a callback, a projection: loaded from the
 * cache or fitted now while the video VAE is resident); forward makes one
 * when due from the rows and velocities of a forward at t_video; fit_late
 * fits once the VAE is loaded where it was not resident at begin. A preview
 * that fails is logged and the job goes on without previews. */
void pl_preview_begin(pl_job *j);
void pl_preview_forward(pl_job *j, int step, float t_video, const float *rows, int64_t n_rows, int64_t cond_rows,
                        const float *v_video);
void pl_preview_fit_late(pl_job *j);

/* pipeline_decode.c: latents → frames and waveform → mp4. */
int pl_decode(pl_job *j, mm_error *err);

#endif
