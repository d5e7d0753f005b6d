/* The MiniMax-H3 generation pipeline: the five model files resident on their
 * devices, and one request rendered through them.
 *
 *   inputs      read the keyframes / references, put them on their canvases
 *   condition   prompt + pictures/videos → Qwen3-VL rows [L, text_dim] + tags
 *   references  keyframes / reference media → VAE latents (pinned rows)
 *   denoise     packed layout, seeded noise, DiT forwards, Euler steps
 *   decode      video VAE → frames → H.264, audio VAE → AAC, mp4 renamed in place
 *
 * One file per stage (pipeline_<stage>.c); this one (pipeline.c) owns the
 * resident state: checkpoint resolution, placement, the device contexts, the
 * loaded models, and the one cross-device staging copy.
 *
 * Thread use: one request at a time per pipeline (the worker renders jobs
 * one after another); mm_pipeline_status_json may be called from any thread.
 */
#ifndef MMH3_ENGINE_PIPELINE_H
#define MMH3_ENGINE_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/timing.h"
#include "io/checkpoint.h"
#include "parallel/sp_options.h"

typedef struct mm_pipeline_options {
    mm_checkpoint_opts checkpoints; /* overrides, $MODELS_PATH, downloads */
    const char *device;             /* NULL/"auto", "cpu", "cuda", "cuda:N": pins every part */
    const char *te_device;          /* moves the text encoder and the VAEs */
    bool offload;                   /* text encoder + VAEs loaded for each request and freed after use */
    int threads;                    /* CPU workers (0 = one per core, or $MMH3_THREADS) */
    bool ref_kv_cache;              /* keep reference rows' K/V across forwards (ref2va) */
    bool peer_copy;                 /* GPU->GPU copies direct where the pair's probe passed (else staged) */
    int ref_image_short_edge;       /* ref2va picture short edge (0 = the reference's 2048) */
    int ref_video_short_edge;       /* ref2va video canvas short edge (0 = 768, area capped like the target) */
    size_t prompt_cache_bytes;      /* in-memory prompt cache (0 = 256 MiB, SIZE_MAX = none) */
    size_t ref_cache_bytes;         /* in-memory reference-latent cache (0 = 1 GiB, SIZE_MAX = none) */
    /* Tests and debugging: each request's packed layout (positions, tags,
     * roles, the first forward's row timesteps, index maps) to this file. */
    const char *layout_dump;
    /* Benchmarks: each request's final target rows ("video_rows" [rows, 96],
     * "audio_rows" [2A, 32], f32) to this file, to compare two runs. */
    const char *latents_dump;
    /* LoRA adapters: names may be file paths (the CLI; the worker takes names
     * under $MODELS_PATH/loras only), and the device bytes kept resident
     * between jobs (an LRU; 0 = 4 GiB, SIZE_MAX = none kept). */
    bool lora_paths;
    size_t lora_cache_bytes;
    /* The DiT sequence-parallel over this many GPUs, starting at its placed
     * device (0/1: one GPU; src/parallel/sp_dit.h). */
    int gpus;
    /* Device memory per GPU the memory plan may use (backend/memplan.h;
     * 0: free memory minus the margin), and the clip it sizes the
     * activations for (0: the request rules' defaults). The plan decides
     * which DiT blocks stream and what is loaded per use; a budget no plan
     * fits fails creation with the smallest one that would. */
    uint64_t vram_budget;
    int plan_width, plan_height, plan_frames;
    /* How those GPUs exchange (sp.ranks is set from gpus): the world and the
     * debugging knobs, which the commands take from MMH3_SP_* at start-up. */
    mm_sp_options sp;
    /* Opt-in, lossy: the video VAE decoder's block linears in int8 ConvRot
     * (model/vae/vae.h int8_linears). */
    bool vae_int8;
    /* On-disk caches that outlive the process (the preview projections);
     * NULL: nothing is kept. */
    const char *cache_dir;
    /* One line per notable event (files found, weights loaded, fallbacks). */
    void (*log)(void *user, const char *line);
    void *log_user;
} mm_pipeline_options;

void mm_pipeline_options_defaults(mm_pipeline_options *o);

typedef struct mm_pipeline mm_pipeline;

/* Resolves every file and chooses the placement; reads no weights. Fails
 * (with what was looked for and where) when a needed file is missing. */
int mm_pipeline_create(mm_pipeline **out, const mm_pipeline_options *o, mm_error *err);
void mm_pipeline_destroy(mm_pipeline *p);

/* Loads the weights of `partition` ("fl2va" / "ref2va") and, unless
 * offloading, the text encoder and the VAEs; adds the load times to t. */
int mm_pipeline_load(mm_pipeline *p, const char *partition, mm_timing *t, mm_error *err);
void mm_pipeline_unload(mm_pipeline *p);
bool mm_pipeline_loaded(const mm_pipeline *p);

/* Renders one request (loading what is missing first). Returns 0,
 * MM_CANCELLED, or -1 with err. res->timing has the rows; res->stage_seconds
 * the per-stage split; res->timing.wall is set to the call's duration. */
int mm_pipeline_run(mm_pipeline *p, const mm_gen_request *req, const mm_gen_callbacks *cb, mm_gen_result *res,
                    mm_error *err);

/* {"resident":bool,"placement":"...","partition":"...","memory":{...},...} */
int mm_pipeline_status_json(mm_pipeline *p, char *buf, size_t n);
/* "dit=cuda:0 text_encoder=cuda:1 vae=cuda:1" */
const char *mm_pipeline_placement(const mm_pipeline *p);

#endif
