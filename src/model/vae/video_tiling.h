/* Spatial tiling of the video VAE (vae.md §2.5): the tile plan along one
 * axis, and the linear blends that stitch tiles (and cross-fade chunks).
 * Tiling is part of the released model: the blended-tile output is the
 * reference, so the plan and the blend order follow it exactly. */
#ifndef MMH3_MODEL_VAE_VIDEO_TILING_H
#define MMH3_MODEL_VAE_VIDEO_TILING_H

#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"

#define MM_VAE_MAX_TILES 256

typedef struct mm_vae_tile_plan {
    int n;
    int64_t start[MM_VAE_MAX_TILES];
    int64_t len[MM_VAE_MAX_TILES];
    int64_t overlap[MM_VAE_MAX_TILES]; /* overlap[i] between tiles i and i + 1 (n − 1 entries) */
} mm_vae_tile_plan;

/* Tiles of `tile` samples over `length`: one tile [0, length) when it fits;
 * otherwise the fewest tiles whose overlaps are all >= overlap_min, the slack
 * handed out in `step`-sized increments round-robin over the overlaps (so
 * every boundary stays a multiple of `step`, the latent grid). tiling = false
 * gives one tile over the whole length. */
int mm_vae_tile_plan_make(int64_t length, int64_t tile, int64_t overlap_min, int64_t step, bool tiling,
                          mm_vae_tile_plan *p, mm_error *err);
/* The plan of the same tiles in units `div` times coarser (latent space),
 * each tile's length replaced by out_len[i] (the encoder's output size). */
void mm_vae_tile_plan_scale(const mm_vae_tile_plan *p, int64_t div, const int64_t *out_len, mm_vae_tile_plan *q);
/* Length the stitched result covers: start of the last tile + its length. */
int64_t mm_vae_tile_plan_extent(const mm_vae_tile_plan *p);

/* In place along `dim` of b: b[k] = a[k]·(1 − k/e) + b[k]·(k/e) for k < count
 * (count <= e; the later tile weighs 0 at the first overlapped sample). a and
 * b are same-shaped f32 views (any strides) on ctx's device; one rounding per
 * operation, as the reference computes it. Errors go to the context. */
int mm_vae_blend(mm_ctx *ctx, mm_tensor *b, const mm_tensor *a, int dim, int64_t e);

/* Stitches tiles[i·nx + j] ([C, F, py.len[i], px.len[j]] f32 on the device)
 * into out [C, F, extent(py), extent(px)]: each tile blended with the
 * original (unblended) tile above over py.overlap[i − 1], then with the
 * original tile to its left over px.overlap[j − 1], then cropped by the next
 * overlaps. Errors go to the context. */
int mm_vae_stitch(mm_ctx *ctx, mm_tensor *out, const mm_tensor *tiles, const mm_vae_tile_plan *py,
                  const mm_vae_tile_plan *px);

#endif
