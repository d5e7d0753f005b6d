/* `mmh3 convert`: a dense DiT (bf16 / f16 / f32 safetensors, one file or
 * shards, MiniMax-native or diffusers key names, optionally with FastVideo
 * v2 delta bundles on top) → the int8 ConvRot file the engine loads, laid
 * out as Comfy-Org's `*_pruned_int8_convrot.safetensors` (dit.md §2.1, §3).
 *
 * The recipe (dit.md §3.1, §3.4; the conformance kit's quantizer):
 *   - the four linears of every main block (attn.qkv_proj, attn.out_proj,
 *     mlp.fc1, mlp.fc2): the f32 weight rotated along K by the block-diagonal
 *     regular Hadamard (groups of 256), per output row s = absmax/127 (F32
 *     [N, 1] `weight_scale`), codes rne(w/s) clamped to ±127 (I8 `weight`),
 *     the 72-byte `comfy_quant` marker — exactly mm_convrot_quantize on the
 *     f32 weight, the activation quantizer's arithmetic;
 *   - kept as BF16: norms, condition_proj (+ bias), the token refiner's
 *     linears; as F32: the patch projections and output heads (+ biases),
 *     rope.inv_freq (taken from the input, or 1/10000^(2k/32) in f32 where
 *     diffusers dropped it), adaln_t_table;
 *   - AdaLN (51 linears, F16 weight + bias): a pruned input passes through
 *     unchanged. A full input (time_embedder + [18H, 2688] AdaLN) is
 *     factorized the way the pruned file is built (dit.md §2.2): the curve
 *     c(t) = SiLU(temb(t)) sampled at t = k/1024 (double), centred on its
 *     mean μ, its top-`adaln_rank` principal directions V (the eigenvectors
 *     of the 1025×1025 Gram matrix), table = (c − μ)·V, W' = W·V, b' = b + W·μ.
 *     Comfy-Org's own basis is not published, so the factors are not theirs
 *     bit for bit; the result is the best rank-r approximation of the curve
 *     on the grid, and the report says how much of it the rank keeps.
 *
 * Inputs: native names (`blocks.N.attn.qkv_proj`) need their fused-QKV row
 * order stated (MiniMaxAI's release shards interleave [q_h; k_h; v_h] per
 * head; ComfyUI exports and mmh3's files are contiguous [Q; K; V]); diffusers
 * names (`transformer_blocks.N.attn.to_q`, `ff.net.0.proj` = [value; gate])
 * are placed onto the fused layout. Deltas (FastH3 LoRA bundles, format
 * fastvideo-lora-v2): `.diff` / `.diff_b` added in f32, `.lora_A`/`.lora_B`
 * pairs added as (alpha/rank)·B·A, `.set_weight` replacing the tensor.
 * Anything the engine has no place for (VSA gates, unknown keys) is an error
 * that lists the keys.
 *
 * Memory: one output tensor at a time (plus the time MLP of a full model);
 * the output streams to "<out>.tmp" and is renamed into place.
 */
#ifndef MMH3_FORMATS_CONVERT_H
#define MMH3_FORMATS_CONVERT_H

#include <stdbool.h>

#include "core/error.h"

typedef enum mm_qkv_order {
    MM_QKV_ORDER_UNSET = 0,
    MM_QKV_CONTIGUOUS,  /* [Q; K; V], each head-major (Comfy repack, mmh3) */
    MM_QKV_INTERLEAVED, /* [q_h; k_h; v_h] per head (MiniMaxAI's release shards) */
} mm_qkv_order;

#define MM_CONVERT_MAX_INPUTS 256

typedef struct mm_convert_options {
    const char *inputs[MM_CONVERT_MAX_INPUTS]; /* files, folders of shards, or *.index.json */
    int n_inputs;
    const char *deltas[16];                    /* FastVideo v2 bundles, applied in order */
    int n_deltas;
    const char *out_path;                      /* the int8 ConvRot DiT, or NULL (grid only) */
    const char *grid_path;                     /* also write SiLU(temb) [1025, time_dim] (full inputs), or NULL */
    mm_qkv_order qkv_order;                    /* native-named inputs */
    int adaln_rank;                            /* full inputs: 0 = 8, the released file's */
    int threads;                               /* 0 = one per core */
    void (*log)(void *user, const char *line);
    void *log_user;
} mm_convert_options;

typedef struct mm_convert_report {
    int tensors_in, tensors_out;
    int quantized;          /* ConvRot linears written */
    int deltas_applied;     /* delta tensors folded in */
    bool full_adaln;        /* the AdaLN was factorized from a full model */
    int adaln_rank;
    double adaln_kept;      /* share of the centred curve's energy the rank keeps (1 = all) */
    double adaln_residual;  /* worst relative residual of a grid point of the curve */
    char naming[16];        /* "native" or "diffusers" */
} mm_convert_report;

int mm_convert_dit(const mm_convert_options *o, mm_convert_report *report, mm_error *err);

#endif
