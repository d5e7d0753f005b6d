/* The engine interface: what the GPU worker and `mmh3 generate` call.
 *
 * An engine is loaded once and kept resident; generate() renders one request
 * to an mp4, reporting progress through the callback and checking for
 * cancellation between denoising steps. Two implementations: the mock engine
 * (FFmpeg-generated test pattern, chosen with --mock) and the real H3 engine.
 *
 * Ownership: the caller owns the request and everything it points to; the
 * engine owns its weights and scratch until mm_engine_destroy().
 */
#ifndef MMH3_ENGINE_ENGINE_H
#define MMH3_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "engine/timing.h"
#include "model/dit/step_cache.h"
#include "request/rules.h" /* MM_MAX_REFERENCES, mm_reference_kind */

/* The stages a render goes through, in order. Their names are stored in the
 * database, sent over SSE and shown by the UI: keep them stable. */
typedef enum mm_stage {
    MM_STAGE_QUEUED = 0,
    MM_STAGE_LOADING,             /* weights to the device (first job only) */
    MM_STAGE_ENCODING_PROMPT,     /* tokenizer + Qwen3-VL (+ keyframe vision) */
    MM_STAGE_ENCODING_REFERENCES, /* VAE encodes of keyframes / references */
    MM_STAGE_DENOISING,           /* DiT forwards; step/total_steps advance */
    MM_STAGE_DECODING_VIDEO,
    MM_STAGE_DECODING_AUDIO,
    MM_STAGE_WRITING,             /* H.264 + AAC mux, atomic rename */
    MM_STAGE_COUNT
} mm_stage;

const char *mm_stage_name(mm_stage s); /* "queued", "loading", "encoding_prompt", ... */

typedef struct mm_reference {
    mm_reference_kind kind;
    const char *path; /* a local file the engine may read */
} mm_reference;

/* A LoRA adapter of a request: a name under $MODELS_PATH/loras (ComfyUI's
 * folder; a file path too where the engine allows it, i.e. the CLI) and its
 * strength (request_rules.h: mm_rule_lora_strength). */
#define MM_GEN_MAX_LORAS 8
typedef struct mm_gen_lora {
    const char *name;
    float strength;
} mm_gen_lora;

typedef struct mm_gen_request {
    const char *prompt;
    mm_reference references[MM_MAX_REFERENCES]; /* request order; first image = first frame (fl2va) */
    int n_references;
    const char *last_image_path; /* fl2va only, a still image, or NULL */
    const char *partition;       /* "fl2va" or "ref2va" */
    int width, height;           /* multiples of 32 */
    int frames;                  /* on the 17n+5 grid */
    int steps;                   /* grid points: steps-1 forwards (the release grid only) */
    const char *sampler;         /* a preset (sampler/schedule.h: "turbo8", "pdd8", ...), "default" or NULL */
    const char *sigmas;          /* a custom σ list "v0,...,0[;a0,...,0]", or NULL; excludes sampler */
    uint64_t seed;
    bool no_audio;
    bool fast;                   /* opt-in fast mode (FP8 attention) */
    mm_step_cache_config cache;  /* opt-in step caching (zeroed: off; docs/CACHING.md) */
    const char *sparse;          /* sparse attention preset (model/sparse/sparse.h: "sol", "sol:tau=1.25", ...), or NULL: dense */
    int crf;                     /* H.264 CRF, 0..51 */
    const char *preset;          /* x264 preset name */
    const char *out_path;        /* final mp4; written to a temp file and renamed into place */
    const char *frames_dir;      /* optional PNG dump, or NULL */
    mm_gen_lora loras[MM_GEN_MAX_LORAS]; /* adapters, applied in order, never merged into the weights */
    int n_loras;
} mm_gen_request;

typedef struct mm_progress {
    mm_stage stage;
    int step;        /* forwards done in DENOISING, else 0 */
    int total_steps; /* forwards in this request */
    double elapsed;  /* seconds since generate() began */
} mm_progress;

/* A live preview: the clean estimate after a forward (x0 = x + σ·v) as one
 * small encoded picture, its latent frames side by side left to right
 * (engine/preview.h makes it). */
typedef struct mm_preview {
    const uint8_t *data; /* the encoded picture, valid during the call */
    size_t size;
    const char *ext;     /* "jpg" */
    const char *mime;    /* "image/jpeg" */
    int step;            /* forwards done (1..total_steps) */
    int total_steps;
    int frames;          /* pictures in the strip */
    int frame_width, frame_height; /* one picture; the strip is frames·frame_width wide */
} mm_preview;

typedef struct mm_gen_callbacks {
    /* Called at every stage change and after every forward. */
    void (*progress)(void *user, const mm_progress *p);
    /* Polled between forwards (and between stages); true stops the render. */
    bool (*should_cancel)(void *user);
    void *user;
    /* Optional: finer progress inside a stage (frames decoded of all, ...)
     * for progress bars; `progress` keeps step = 0 outside denoising. */
    void (*stage_progress)(void *user, mm_stage stage, int done, int total);
    /* Optional: a preview after a forward, at most one per
     * preview_interval_ms (0: after every forward); called before that
     * forward's progress. Engines that cannot make one skip it and log why. */
    void (*preview)(void *user, const mm_preview *p);
    int preview_interval_ms;
} mm_gen_callbacks;

typedef struct mm_gen_result {
    double stage_seconds[MM_STAGE_COUNT];
    double total_seconds;
    size_t peak_device_bytes;
    char placement[256]; /* e.g. "dit=cuda:0 text_encoder=cuda:0 vae=cuda:0" */
    mm_timing timing;    /* the real engine's detailed rows (timing.h); zero from the mock */
} mm_gen_result;

/* generate() returns 0, -1 (error, message in err), or MM_CANCELLED. */
#define MM_CANCELLED 1

typedef struct mm_engine mm_engine;

typedef struct mm_engine_ops {
    const char *kind; /* "mock" or "h3" */
    int (*load)(mm_engine *e, mm_error *err);
    int (*generate)(mm_engine *e, const mm_gen_request *req, const mm_gen_callbacks *cb, mm_gen_result *res,
                    mm_error *err);
    void (*unload)(mm_engine *e);
    /* Writes a JSON object describing residency, placement and memory. */
    int (*status_json)(mm_engine *e, char *buf, size_t n);
    void (*destroy)(mm_engine *e);
} mm_engine_ops;

struct mm_engine {
    const mm_engine_ops *ops;
    void *impl;
};

#endif
