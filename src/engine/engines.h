/* Choosing and driving an engine (see engine.h for the interface itself).
 *
 * The worker and `mmh3 generate` create an engine by kind: "mock" (the
 * FFmpeg test pattern, chosen explicitly with --mock) or "h3" (the real
 * MiniMax-H3 engine). When the real engine cannot start (no weights, no GPU,
 * not built), creation or load fails with a message that says why; callers
 * report it instead of falling back to the mock.
 */
#ifndef MMH3_ENGINE_ENGINES_H
#define MMH3_ENGINE_ENGINES_H

#include <stdbool.h>

#include "engine/engine.h"

/* Per-file overrides, indexed like io/checkpoint.h's mm_component: DiT
 * fl2va, DiT ref2va, text encoder, video VAE, audio VAE, config folder. */
#define MM_ENGINE_PATHS 6

typedef struct mm_engine_options {
    const char *checkpoints; /* folder with the release checkpoints, or NULL for the default search */
    const char *device;      /* "cuda:0", "cpu", ... or NULL for automatic placement */
    bool preload;            /* load the weights at start instead of on the first job */
    double mock_seconds;     /* mock engine: wall time of one job (default 5) */
    /* real engine (engine_h3.c) */
    const char *paths[MM_ENGINE_PATHS]; /* explicit files (--dit-path, ...), or NULL */
    bool allow_download;      /* fetch missing files from the hub */
    const char *te_device;    /* text encoder + VAEs on this device */
    bool offload;             /* text encoder + VAEs loaded per request, freed after use */
    int threads;              /* CPU workers (0 = one per core) */
    bool ref_kv_cache;        /* ref2va: keep reference rows' K/V across forwards */
    int ref_image_short_edge; /* ref2va pictures (0 = 2048, the reference's) */
    int ref_video_short_edge; /* ref2va video canvases (0 = 768) */
    const char *layout_dump;  /* debugging/tests: the packed layout of each request to this safetensors file */
    const char *latents_dump; /* debugging/benchmarks: the final target rows of each request (safetensors) */
    int gpus;                 /* the DiT sequence-parallel over this many GPUs from its device (0/1: one) */
    void (*log)(void *user, const char *line); /* notable events, one line each */
    void *log_user;
} mm_engine_options;

void mm_engine_options_defaults(mm_engine_options *o);

int mm_engine_mock_create(const mm_engine_options *opt, mm_engine **out, mm_error *err);
/* The real engine; engine_h3.c. */
int mm_engine_h3_create(const mm_engine_options *opt, mm_engine **out, mm_error *err);
/* kind: "mock" or "h3". */
int mm_engine_create(const char *kind, const mm_engine_options *opt, mm_engine **out, mm_error *err);

static inline int mm_engine_load(mm_engine *e, mm_error *err) { return e->ops->load(e, err); }
static inline int mm_engine_generate(mm_engine *e, const mm_gen_request *req, const mm_gen_callbacks *cb,
                                     mm_gen_result *res, mm_error *err)
{
    return e->ops->generate(e, req, cb, res, err);
}
static inline int mm_engine_status_json(mm_engine *e, char *buf, size_t n) { return e->ops->status_json(e, buf, n); }
void mm_engine_destroy(mm_engine *e); /* unloads and frees; NULL is fine */

#endif
