/* Where the engine puts each model part: the one decision `mmh3 check`
 * reports and the engine applies.
 *
 *   two or more GPUs: the DiT alone on the first, the text encoder and both
 *                     VAEs on the second; where the second cannot hold the
 *                     text encoder, the VAEs and their decode work, the VAEs
 *                     fall back to the DiT's card;
 *   one GPU:          everything resident when weights + working memory fit
 *                     (an H200 holds all of it); otherwise the text encoder
 *                     is freed before the DiT loads (each request re-loads it);
 *   no GPU / --device cpu: everything on the CPU.
 * An explicit device pins every part there; an explicit text-encoder device
 * moves the text encoder (and the VAEs with it) there.
 *
 * Both partitions' DiTs (fl2va and ref2va) stay resident together only where
 * they fit beside whatever shares their GPU and the working memory; otherwise
 * loading one frees the other. */
#ifndef MMH3_BACKEND_PLACEMENT_H
#define MMH3_BACKEND_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

typedef struct mm_placement_in {
    int n_gpus;
    uint64_t gpu_total[16]; /* bytes per GPU; 0 = unknown (assumed to fit) */
    uint64_t dit_bytes, te_bytes, vae_bytes; /* resident weights (dit_bytes: one partition's DiT) */
    uint64_t work_bytes;    /* activations + scratch at the largest request (0 = 16 GiB) */
    uint64_t vae_work_bytes; /* the VAEs' decode working memory (0 = 4 GiB) */
    const char *device;     /* NULL/"auto", "cpu", "cuda", "cuda:N" */
    const char *te_device;  /* NULL/"auto" or a device */
} mm_placement_in;

typedef struct mm_placement {
    mm_device dit, text_encoder, vae;
    bool te_swapped; /* one GPU that cannot hold everything: the TE is freed before the DiT loads */
    bool both_dits_fit; /* fl2va and ref2va DiTs resident at once (always on the CPU; never on a GPU of unknown size) */
    char summary[256]; /* "dit=cuda:0 text_encoder=cuda:1 vae=cuda:1" (+ " (text encoder freed before the DiT)") */
    char reason[256];  /* why, in a sentence */
} mm_placement;

int mm_placement_choose(const mm_placement_in *in, mm_placement *out, mm_error *err);

#endif
