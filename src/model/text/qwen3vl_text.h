/* The Qwen3-VL text decoder as MiniMax-H3 uses it: truncated at the tap.
 *
 * Only the decoder layers below the tap are loaded (the Comfy file holds
 * exactly those: 50 of 64); there is no final norm and no LM head. The output
 * is hidden_states[tap] — the residual stream after the last loaded layer —
 * for every row of the presentation.
 *
 * Weights are used in the checkpoint's own formats: the int8 embedding with
 * per-row scales (gathered on the host: only L rows are ever touched, so the
 * 778 MB table never goes to the device), nvfp4 AWQ linears kept packed
 * (13.7 GB resident for the release on a GPU instead of 48.8 GB of bf16) and
 * run by the project's format-dispatching linear (formats/linear.h: W4A16,
 * the weight dequantized per call right before its GEMM, the reference's
 * arithmetic), bf16 norms.
 *
 * Numerics (text-encoder spec 2.3-2.5): bf16 GEMM inputs with f32
 * accumulation, f32 RMSNorm statistics, softmax and RoPE tables, and an f32
 * residual stream (the reference keeps it in bf16; f32 is never worse).
 */
#ifndef MMH3_MODEL_TEXT_QWEN3VL_TEXT_H
#define MMH3_MODEL_TEXT_QWEN3VL_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "formats/embedding.h"
#include "formats/linear.h"
#include "io/safetensors.h"
#include "model/text/qwen3vl_config.h"
#include "model/text/resident.h"

typedef struct mm_qwen3vl_text_layer {
    mm_tensor input_norm, post_norm; /* BF16 [hidden] */
    mm_tensor q_norm, k_norm;        /* BF16 [head_dim] */
    mm_linear q, k, v, o, gate, up, down; /* nvfp4 AWQ in the Comfy file (formats/linear.h) */
} mm_qwen3vl_text_layer;

typedef struct mm_qwen3vl_text {
    mm_qwen3vl_text_config cfg;
    int n_layers; /* loaded = tap */
    mm_qwen3vl_text_layer *layers;
    /* host (mmap) views: gathered on the CPU whatever the device */
    mm_embedding embed; /* int8_tensorwise: I8 [V, H] and F32 [V] row scales */
    mm_resident weights; /* the device and the device copies owned by the model */
    bool bf16_weights;  /* linears dequantized once at load (3.6x the memory, no per-forward decode) */
} mm_qwen3vl_text;

/* Intermediates for the conformance kit's bring-up order; any pointer may be
 * NULL. Tensors passed are views valid during the call only. */
typedef struct mm_qwen3vl_text_debug {
    void (*tap)(void *user, const char *name, int index, const mm_tensor *t);
    void *user;
} mm_qwen3vl_text_debug;

/* Loads layers [0, tap) (tap <= 0: every layer the file holds) from `st`
 * (Comfy names: model.embed_tokens.*, model.layers.N.*) and places them on
 * the context's device. Shapes and formats are checked against cfg. The
 * mm_safetensors must outlive the model (CPU weights are views into it).
 * bf16_weights: dequantize every linear once here (48.8 GB for the release)
 * instead of one at a time per forward (13.7 GB resident) — the spec's
 * "simplest" Hopper path, for a GPU with room to spare. */
int mm_qwen3vl_text_load(mm_qwen3vl_text *m, const mm_qwen3vl_config *cfg, const mm_safetensors *st, int tap,
                         bool bf16_weights, mm_ctx *ctx, mm_error *err);
void mm_qwen3vl_text_free(mm_qwen3vl_text *m);

/* Layers the file holds (model.layers.0 .. N-1 all present). */
int mm_qwen3vl_text_layers_in_file(const mm_safetensors *st);

/* The forward.
 *   ids        I32 [L] host
 *   pos        I64 [3 × L] host, MRoPE positions (mrope.h)
 *   vision     device tensor [n_vis, H] merged vision tokens in sequence
 *              order over the vision rows, or NULL
 *   vis_rows   I32 [n_vis] host, row index of each vision token (ascending)
 *   deepstack  n_deepstack device tensors [n_vis, H] added after layers
 *              0 .. n_deepstack-1
 *   out        device tensor [L, H], any float dtype (BF16 for the DiT)
 */
int mm_qwen3vl_text_forward(mm_qwen3vl_text *m, mm_ctx *ctx, const int32_t *ids, const int64_t *pos, int64_t L,
                            const mm_tensor *vision, const int32_t *vis_rows, int64_t n_vis,
                            const mm_tensor *deepstack, int n_deepstack, mm_tensor *out,
                            const mm_qwen3vl_text_debug *dbg, mm_error *err);

#endif
