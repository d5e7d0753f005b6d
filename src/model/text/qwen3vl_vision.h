/* The Qwen3-VL vision tower: patches → merged tokens for the decoder, plus
 * the deepstack features injected after its first layers.
 *
 *   patch embedding   Conv3d (temporal × patch × patch, stride = kernel) as a
 *                     GEMM on [c][t][y][x] patch vectors, bf16
 *   + position        the learned side×side table, bilinearly interpolated
 *                     (align-corners sample points, f32 taps, one bf16
 *                     rounding), in merge-window order, repeated per slice
 *   blocks            pre-norm LayerNorm blocks; attention non-causal within
 *                     each temporal slice of each image/video, 2-D rotary
 *                     (row, col) on q/k; GELU(tanh) MLP
 *   deepstack         after the configured blocks: LayerNorm over the 2×2
 *                     window (merge²·width), fc1, GELU(erf), fc2
 *   merger            LayerNorm per patch, 2×2 window, fc1, GELU(erf), fc2
 *
 * Weights are the checkpoint's bf16 tensors (prefix "visual."), on the
 * context's device. The residual stream is f32.
 */
#ifndef MMH3_MODEL_TEXT_QWEN3VL_VISION_H
#define MMH3_MODEL_TEXT_QWEN3VL_VISION_H

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/text/image_preprocess.h"
#include "model/text/qwen3vl_config.h"
#include "model/text/resident.h"

typedef struct mm_qwen3vl_vision_block {
    mm_tensor norm1_w, norm1_b, norm2_w, norm2_b;
    mm_tensor qkv_w, qkv_b, proj_w, proj_b;
    mm_tensor fc1_w, fc1_b, fc2_w, fc2_b;
} mm_qwen3vl_vision_block;

typedef struct mm_qwen3vl_merger {
    mm_tensor norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
    bool postshuffle; /* norm over the whole 2×2 window (deepstack) */
} mm_qwen3vl_merger;

typedef struct mm_qwen3vl_vision {
    mm_qwen3vl_vision_config cfg;
    mm_tensor patch_w, patch_b; /* [hidden, C·T·P·P], [hidden] */
    mm_tensor pos_table;        /* host BF16 [side², hidden] (interpolated on the host) */
    mm_qwen3vl_vision_block *blocks;
    mm_qwen3vl_merger merger;
    mm_qwen3vl_merger *deepstack;
    mm_resident weights; /* the device and the device copies owned by the model */
} mm_qwen3vl_vision;

typedef struct mm_qwen3vl_vision_debug {
    void (*tap)(void *user, const char *name, int index, const mm_tensor *t);
    void *user;
} mm_qwen3vl_vision_debug;

int mm_qwen3vl_vision_load(mm_qwen3vl_vision *m, const mm_qwen3vl_config *cfg, const mm_safetensors *st,
                           mm_ctx *ctx, mm_error *err);
void mm_qwen3vl_vision_free(mm_qwen3vl_vision *m);

/* One vision call over the inputs of one modality, in order (their patches
 * concatenated). merged: allocated here on the context's device, [N/4, out];
 * deepstack: n_deepstack tensors [N/4, out] allocated here. The caller frees
 * them (mm_tensor_free). */
int mm_qwen3vl_vision_forward(mm_qwen3vl_vision *m, mm_ctx *ctx, const mm_vision_pixels *inputs, int n_inputs,
                              mm_dtype out_dtype, mm_tensor *merged, mm_tensor *deepstack,
                              const mm_qwen3vl_vision_debug *dbg, mm_error *err);

/* Host-side tables, exposed for tests: the interpolated position embedding
 * [N, hidden] (f32 values already rounded to bf16) and the rotary cos/sin
 * [N, head_dim] for the patches of the given grids, in merge-window order. */
int mm_qwen3vl_vision_pos_embed(const mm_qwen3vl_vision *m, const int64_t (*grids)[3], int n, float *out,
                                mm_error *err);
int mm_qwen3vl_vision_rotary(const mm_qwen3vl_vision_config *cfg, const int64_t (*grids)[3], int n, float *cos_out,
                             float *sin_out, mm_error *err);

#endif
