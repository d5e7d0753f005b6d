/* The memory plan for the model files and a clip (backend/memplan.h): the
 * sizes of the parts as they load, the working memory of each phase, and
 * the GPUs' memory; what `mmh3 check` prints and the pipeline applies. */
#ifndef MMH3_ENGINE_MEMORY_PLAN_H
#define MMH3_ENGINE_MEMORY_PLAN_H

#include <stdint.h>

#include "backend/memplan.h"
#include "core/error.h"

typedef struct mm_plan_clip {
    int width, height, frames; /* 0: the request rules' defaults */
    int text_rows;             /* prompt rows (0: 512, a long prompt) */
    int sp_ranks;              /* 2+: the DiT's activations are one rank's of --gpus N (parallel/sp_dit.h) */
} mm_plan_clip;

/* Sizes from the files (headers and file sizes; no weights read) for one
 * request of that clip. Working memory that no header tells:
 *   text encoder  1 GiB + 256 KiB per prompt row (measured: 15.1 GiB peak
 *                 with 14.6 GiB of weights at 300 and 1,052 rows, H200);
 *   VAEs          the decode's 4.3 GiB above the weights at 1344x768
 *                 (measured, H200), in proportion to the canvas;
 *   DiT           the request's tensors (mm_dit_request_bytes_for) and the
 *                 sampler's four f32 row tensors. */
int mm_plan_sizes(const char *dit, const char *text_encoder, const char *video_vae, const char *audio_vae,
                  const mm_plan_clip *clip, mm_memplan_sizes *out, mm_error *err);
/* The plan over the first `gpus` GPUs of this host (their free memory read
 * now) for a budget in bytes per GPU (0: free minus the margin); sp_ranks
 * 2+: the DiT sequence-parallel over that many of them. */
int mm_plan_for_host(int gpus, int sp_ranks, uint64_t budget, const mm_memplan_sizes *s, mm_memplan *out,
                     mm_error *err);

#endif
