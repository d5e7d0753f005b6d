/* The device-memory plan: given the GPUs' memory, a budget and the sizes of
 * the model's parts, what stays resident, what streams and what is loaded per
 * use, so that no phase of a generation needs more than the budget.
 *
 * A generation runs in phases, each with one model active on its GPU:
 *   condition  the text encoder (weights + its working memory)
 *   vae        the VAEs (reference encodes and the decode, above the weights)
 *   denoise    the DiT (its resident blocks, two streaming slots, the request's
 *              activations)
 * A phase's peak is what stays resident on that GPU plus the active model and
 * its working memory. The planner picks the first of these that fits every
 * phase under the budget, fastest first:
 *   resident       everything stays resident between requests;
 *   per-use        the text encoder and the VAEs are loaded for each use and
 *                  freed after it; the DiT stays resident;
 *   streamed       as per-use, and some DiT blocks live in pinned host memory
 *                  and are copied into one of two device slots just before
 *                  they run (the next one's copy overlapping the current
 *                  block's compute); the rest of the DiT stays resident;
 *   streamed, DiT freed  as streamed, but the DiT's resident part is freed
 *                  after denoising so that the text encoder and VAEs have the
 *                  whole budget (the DiT is loaded again for each request).
 * Streamed blocks are spread evenly over blocks 1..n-1 (block 0 stays: the
 * step cache reads its weights outside the block loop), so each copy hides
 * behind the resident blocks between two streamed ones as well. Streaming
 * fewer than three blocks saves nothing (two slots hold two blocks), so a
 * plan streams none or at least three.
 *
 * With two GPUs the DiT has the first to itself (resident or streamed) and the
 * text encoder and VAEs share the second (resident, else per use).
 *
 * Sequence parallel over N GPUs (--gpus N, src/parallel/sp_dit.h): every GPU
 * holds the whole DiT and one rank's activations (its S/N rows and the
 * Ulysses buffers: the caller's dit_work is that rank's, from
 * mm_sp_rank_work_bytes); GPU 0 also runs the text encoder and the VAEs. The
 * plan is GPU 0's one-GPU plan under the smallest of the N budgets, and
 * every rank streams the same blocks (one replica loader for all).
 *
 * A budget no plan fits is refused with the phase that does not fit and the
 * smallest budget that would work. Pure arithmetic: no device is touched. */
#ifndef MMH3_BACKEND_MEMPLAN_H
#define MMH3_BACKEND_MEMPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

#define MM_MEMPLAN_MAX_BLOCKS 128
#define MM_MEMPLAN_MAX_GPUS 16
/* Room the plan leaves free below the default budget (free memory minus
 * this): the caching allocator's rounding and fragmentation, cuBLASLt
 * workspaces and kernel scratch, none of which the sizes below include. */
#define MM_MEMPLAN_MARGIN (1536ull << 20)
/* A streaming slot is one allocation of a packed block (its tensors back to
 * back, 256-byte aligned): at most the block's per-tensor sizes below plus
 * the allocator's rounding of one allocation. */
#define MM_MEMPLAN_SLOT_ROUNDING (2ull << 20)

/* Device bytes of each part as loaded (not file sizes: the DiT's f16 AdaLN
 * projections are upcast to f32 on load). */
typedef struct mm_memplan_sizes {
    uint64_t dit_fixed;                        /* the DiT outside its main blocks */
    uint64_t dit_block[MM_MEMPLAN_MAX_BLOCKS]; /* each main block */
    int dit_blocks;
    uint64_t dit_work; /* one request's activations at its rows */
    uint64_t te_bytes, te_work;
    uint64_t vae_bytes, vae_work; /* video + audio VAE; decode working memory above the weights */
} mm_memplan_sizes;

typedef struct mm_memplan_in {
    int n_gpus;          /* GPUs the parts go on: 1 (all share it) or 2+ (DiT alone on the first) */
    uint64_t gpu_total[MM_MEMPLAN_MAX_GPUS];
    uint64_t gpu_free[MM_MEMPLAN_MAX_GPUS]; /* 0: unknown (the total is used) */
    uint64_t budget;     /* bytes per GPU; 0: each GPU's free memory minus MM_MEMPLAN_MARGIN */
    int sp_ranks;        /* 2+: the DiT sequence-parallel over GPUs 0..sp_ranks-1 (needs n_gpus >= it) */
    mm_memplan_sizes s;
} mm_memplan_in;

typedef enum mm_memplan_mode {
    MM_PLAN_RESIDENT = 0,
    MM_PLAN_PER_USE,
    MM_PLAN_STREAMED,
    MM_PLAN_STREAMED_DIT_FREED,
} mm_memplan_mode;

typedef struct mm_memplan {
    mm_memplan_mode mode;
    int n_gpus;                    /* 1 or 2 (a third GPU and up get no part; sequence parallel: 1) */
    int sp_ranks;                  /* 0, or the GPUs each holding a DiT replica and S/N rows */
    uint64_t peak_rank;            /* sequence parallel: the peak of GPUs 1..N-1 (DiT + its rows) */
    uint64_t budget[2];            /* per GPU used: [0] the DiT's, [1] the text encoder's and VAEs' */
    bool te_per_use, vae_per_use;  /* loaded for each use, freed after it */
    bool dit_freed;                /* the DiT's resident part freed after denoising */
    int streamed;                  /* DiT blocks streamed from pinned host memory */
    bool stream[MM_MEMPLAN_MAX_BLOCKS];
    uint64_t slot_bytes;           /* one streaming slot (the largest streamed block + MM_MEMPLAN_SLOT_ROUNDING); two */
    uint64_t stream_bytes;         /* host→device bytes per forward */
    uint64_t peak_denoise, peak_condition, peak_vae; /* each phase's peak on its GPU */
    uint64_t peak[2];              /* the largest phase peak per GPU */
    char summary[768];             /* a few lines for `mmh3 check` and the logs */
} mm_memplan;

/* 0 and the plan; -1 when no plan fits the budget: err says which phase and
 * the smallest budget that would work, *min_budget (may be NULL) holds it. */
int mm_memplan_choose(const mm_memplan_in *in, mm_memplan *out, uint64_t *min_budget, mm_error *err);
const char *mm_memplan_mode_name(mm_memplan_mode m);
/* Parses a --vram-budget value in GiB ("22", "30.5"; > 0 and < 16384) to bytes. */
int mm_memplan_parse_budget(const char *s, uint64_t *bytes, mm_error *err);

#endif
