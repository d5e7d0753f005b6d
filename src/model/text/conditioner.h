/* The MiniMax-H3 prompt conditioner: prompt + references → the (L, hidden)
 * conditioning rows and their (L) modality tags that the DiT consumes.
 *
 *   references ─ image / video processor ─ vision tower (one call per modality)
 *   prompt + labels ─ tokenizer ─ presentation (ids, tags, row types)
 *   ids ─ int8 embedding; vision rows ← vision tokens; MRoPE positions
 *   decoder layers 0 .. tap−1 (+ deepstack after the first ones) → rows
 *
 * with a prompt-conditioning cache in front: a repeated (prompt, references,
 * checkpoint) skips all of it.
 *
 * Lifetime: load once (weights stay resident on the context's device),
 * encode many times from one thread at a time per context.
 */
#ifndef MMH3_MODEL_TEXT_CONDITIONER_H
#define MMH3_MODEL_TEXT_CONDITIONER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/text/presentation.h"
#include "model/text/prompt_cache.h"
#include "model/text/qwen3vl_config.h"

typedef struct mm_conditioner mm_conditioner;

typedef struct mm_conditioner_options {
    const char *checkpoint;                 /* the Comfy safetensors file */
    mm_qwen3vl_config config;               /* text_encoder/config.json (mm_qwen3vl_config_load) */
    mm_qwen3vl_processor_config image_proc; /* processor/preprocessor_config.json */
    mm_qwen3vl_processor_config video_proc; /* processor/video_preprocessor_config.json */
    mm_text_tokenizer tokenizer;            /* borrowed; must outlive the conditioner */
    int tap;             /* hidden_states[tap]; 0 = every decoder layer in the file (50 for the release) */
    mm_dtype out_dtype;  /* of the rows (MM_BF16 for the DiT; 0 = BF16) */
    mm_prompt_cache *cache; /* borrowed, or NULL */
    bool bf16_weights;   /* dequantize the nvfp4 linears once at load (48.8 GB for the release) rather
                            than one at a time per forward (13.7 GB resident, the default) */
} mm_conditioner_options;

/* A reference as the engine hands it over: decoded RGB, already on the
 * canvas the pipeline chose (keyframes, 2048-px references). */
typedef struct mm_cond_reference {
    mm_pres_kind kind;
    const uint8_t *rgb;   /* picture: (height, width, 3); video: (n_frames, height, width, 3) */
    int64_t width, height;
    int64_t n_frames;     /* video: the frames sampled at 2 fps (mm_qwen3vl_sample_2fps) */
    const double *times;  /* video: their times in seconds */
    bool has_audio;       /* video with a soundtrack */
} mm_cond_reference;

typedef struct mm_cond_result {
    mm_tensor rows;  /* [L, hidden] on the context's device, out_dtype; owned */
    uint8_t *tags;   /* [L] host: 1 text, 0 vision; malloc'ed */
    int64_t len;
    bool cached;     /* served by the prompt cache */
    double seconds;  /* wall time of the call */
} mm_cond_result;

typedef struct mm_conditioner_debug {
    /* name: "embed_rows", "layer_out" ... for the text model, "vision_image.<name>" /
     * "vision_video.<name>" for the tower. */
    void (*tap)(void *user, const char *name, int index, const mm_tensor *t);
    void *user;
} mm_conditioner_debug;

int mm_conditioner_load(mm_conditioner **out, const mm_conditioner_options *opts, mm_ctx *ctx, mm_error *err);
void mm_conditioner_free(mm_conditioner *c);

int mm_conditioner_encode(mm_conditioner *c, mm_ctx *ctx, const char *prompt, size_t prompt_len,
                          const mm_cond_reference *refs, int n_refs, mm_cond_result *out,
                          const mm_conditioner_debug *dbg, mm_error *err);
void mm_cond_result_free(mm_cond_result *r);

/* The number of decoder layers loaded (the tap). */
int mm_conditioner_tap(const mm_conditioner *c);
/* Hex SHA-256 over the checkpoint's header and size: its identity in cache keys. */
const char *mm_conditioner_checkpoint_id(const mm_conditioner *c);

#endif
