/* Linear layers in the weight formats of the released checkpoints, kept in
 * their stored form and dispatched on that form at run time.
 *
 * mm_linear_load() looks at the tensors under a key prefix of a safetensors
 * file (e.g. "blocks.3.attn.qkv_proj") and recognises the format:
 *
 *   dense    <p>.weight F32/BF16/F16 [N, K] (+ <p>.bias)
 *   ConvRot  <p>.weight I8 [N, K], <p>.weight_scale F32 [N, 1] (or [N], or a
 *            scalar), <p>.comfy_quant = {"format": "int8_tensorwise",
 *            "convrot": true, "convrot_groupsize": 256} — W8A8 with the
 *            activation rotated by the block-diagonal regular Hadamard
 *            (DiT spec section 3)
 *   nvfp4    <p>.weight U8 [N, K/2] (e2m1, high nibble first),
 *            <p>.weight_scale F8_E4M3 [N, K/16] (cuBLAS 128x4 swizzle),
 *            <p>.weight_scale_2 F32 scalar, optional <p>.pre_quant_scale
 *            [K] (AWQ), <p>.comfy_quant = {"format": "nvfp4", ...} —
 *            W4A16 (text-encoder spec section 6)
 *
 * Anything else (an unknown marker, an I8 weight without a marker, shapes that
 * do not agree) is an error naming the file, the tensor and what is accepted.
 *
 * Ownership: a loaded linear borrows the file's mapping (CPU views, nothing
 * copied); mm_linear_to_device() makes an owning copy on a device (the stored
 * form, never dequantized). mm_linear_free() releases what a linear owns.
 *
 * Forward arithmetic (x [R, K] -> out [R, N], any float dtypes):
 *   dense:   out = x . W^T + b, f32 accumulation, one rounding; x is first
 *            converted to W's dtype when they differ (as torch's F.linear
 *            requires), so an F32 weight is an f32 island.
 *   ConvRot: q_x, s_x = mm_convrot_quantize(x) (x rotated, rounded to x's
 *            dtype, per-row absmax/127, RNE, +-127); out = float(q_x . q_w)
 *            * (s_x * s_w) + b, one rounding (mm_gemm_i8_scaled).
 *   nvfp4:   W = dequantize(weight) in x's dtype (bf16 for bf16 activations:
 *            RNE of the exact product, -0 kept), x' = round(x * s) when a
 *            pre_quant_scale s exists, out = x' . W^T (+ b). The dequantized
 *            weight is scratch per call unless mm_linear_materialize() was
 *            asked to keep it resident.
 */
#ifndef MMH3_FORMATS_LINEAR_H
#define MMH3_FORMATS_LINEAR_H

#include <stdbool.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"

typedef enum mm_weight_format {
    MM_WEIGHT_DENSE = 0,
    MM_WEIGHT_CONVROT_I8,
    MM_WEIGHT_NVFP4,
} mm_weight_format;

const char *mm_weight_format_name(mm_weight_format f); /* "dense", "int8-convrot", "nvfp4" */

typedef struct mm_linear {
    mm_weight_format format;
    int64_t out_features, in_features; /* N, K */
    mm_tensor weight;          /* dense [N, K]; ConvRot I8 [N, K]; nvfp4 U8 [N, K/2] */
    mm_tensor weight_scale;    /* ConvRot F32 [N] (a stride-0 view for a tensorwise scalar); nvfp4 E4M3 [N, K/16] */
    float weight_scale_2;      /* nvfp4 per-tensor scale */
    mm_tensor pre_quant_scale; /* nvfp4 AWQ [K], or data == NULL */
    mm_tensor bias;            /* [N], or data == NULL */
    int group;                 /* ConvRot rotation group (256) */
    mm_tensor dense_cache;     /* nvfp4 dequantized [N, K] kept by mm_linear_materialize(), or data == NULL */
    char name[160];            /* the key prefix, for messages */
} mm_linear;

/* Recognises and validates the linear stored under `prefix` (views into st's
 * mapping; st must outlive the linear). */
int mm_linear_load(mm_linear *lin, const mm_safetensors *st, const char *prefix, mm_error *err);
/* Checks [N, K] against what the model needs ("<prefix>: 5376 x 7168 expected, file has ..."). */
int mm_linear_expect(const mm_linear *lin, int64_t out_features, int64_t in_features, mm_error *err);
/* An owning copy of src on the context's device (stored form). */
int mm_linear_to_device(mm_linear *dst, const mm_linear *src, mm_ctx *ctx, mm_error *err);
void mm_linear_free(mm_linear *lin);

/* out [R, N] = linear(x [R, K]) as described above. Errors go to the ctx. */
int mm_linear_forward(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_linear *lin);
/* The full-precision weight [N, K] in out's float dtype (dense: converted;
 * ConvRot: q_w * s_w, still rotated — i.e. W.H; nvfp4: e2m1 * d, without the
 * AWQ vector). For tests and for callers that want the dequantized form. */
int mm_linear_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_linear *lin);
/* nvfp4 only: dequantizes once into `dtype` on the ctx device and keeps it
 * (the text encoder's "dequantize at load" path). */
int mm_linear_materialize(mm_ctx *ctx, mm_linear *lin, mm_dtype dtype, mm_error *err);

/* Reads a comfy_quant marker (U8 JSON bytes) into its format string and the
 * ConvRot fields; a missing key leaves the default (convrot false, group 0). */
int mm_comfy_quant_parse(const mm_tensor *marker, char *format, size_t format_len, bool *convrot, int *group,
                         mm_error *err);

#endif
