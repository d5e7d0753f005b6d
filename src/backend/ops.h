/* The op API: every computation the models run, on the CPU or a CUDA device.
 *
 * Contexts. An mm_ctx binds a device: the CPU (with a thread pool) or one GPU
 * (with a CUDA stream, passed around as void* so that nothing outside the CUDA
 * backend sees CUDA headers). Every op takes the context first, then the
 * output, then the inputs, then parameters: op(ctx, out, in..., params).
 *
 * Sticky errors. Ops return 0, or -1 when they fail or the context has
 * already failed. The first failure (a shape or dtype mismatch, a tensor on
 * the wrong device, a CUDA error) is recorded in the context; every later op
 * is a no-op until mm_ctx_clear_error(). Model code therefore issues a run of
 * ops and checks once at a boundary:
 *
 *     mm_rmsnorm(ctx, &h, &x, &w, 1e-5f);
 *     mm_linear_forward(ctx, &qkv, &h, lin);
 *     ...
 *     if (mm_ctx_error(ctx, err) != 0) return mm_error_prefix(err, "block %d", i);
 *
 * On CUDA, ops are asynchronous on the context's stream; mm_ctx_sync() waits
 * and reports errors the device raised in the meantime.
 *
 * Devices. Every tensor an op touches must live on the context's device
 * (mm_copy is the one op that moves data between devices). On the CPU all ops
 * are synchronous and thread-parallel.
 *
 * Dtypes. "float" means F32, BF16 or F16. Float ops accept any mix of float
 * dtypes for inputs and output; the math runs in f32 and the result is
 * rounded once (round-to-nearest-even) to the output dtype. Model code picks
 * its precision islands by picking the dtypes of the tensors it passes.
 * Exceptions are stated per op (the GEMM needs equal input dtypes; index
 * tensors are I32).
 *
 * Layouts. Strides are in elements (see core/tensor.h). Unless stated
 * otherwise:
 *   - elementwise ops take any strides, including 0 (broadcast views made with
 *     mm_tensor_expand), and need equal shapes;
 *   - row ops (norms, softmax, reductions, modulation, RoPE) work along the
 *     last dimension, which must have stride 1; the leading dimensions are the
 *     "rows" and may have any strides (so a head view [S, H, D] of a fused QKV
 *     buffer works directly);
 *   - outputs must not overlap inputs partially. Exact aliasing (out == in,
 *     the same view) is allowed for elementwise and row ops, as documented.
 *
 * Each op has a CPU twin (src/backend/cpu/) that defines its semantics; the
 * CUDA kernels (src/backend/cuda/cuda_ops.h, kernels/) are tested against it.
 */
#ifndef MMH3_BACKEND_OPS_H
#define MMH3_BACKEND_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

/* ================================================================= context */

typedef struct mm_ctx mm_ctx;

/* A context on `dev`. CPU: n_threads workers (0 = the kernel policy's
 * count: $MMH3_THREADS, else one per online core). CUDA: n_threads is
 * ignored; the context creates its own stream on the device. The first
 * context puts the process's kernel policy in place
 * (backend/kernel_policy.h). */
int mm_ctx_create(mm_ctx **out, mm_device dev, int n_threads, mm_error *err);
/* The kernel policy's CPU worker count: $MMH3_THREADS when it is an integer
 * in 1..1024 (the range of --threads), else 0 (one worker per core). */
int mm_env_threads(void);
void mm_ctx_destroy(mm_ctx *ctx);

mm_device mm_ctx_device(const mm_ctx *ctx);
/* CPU worker count (1 for CUDA contexts). */
int mm_ctx_threads(const mm_ctx *ctx);
/* The CUDA stream (cudaStream_t) of a CUDA context; NULL on the CPU. */
void *mm_ctx_stream(const mm_ctx *ctx);

/* Records a failure unless one is already recorded (first failure wins);
 * returns -1. Backends call this; so may model code for its own checks. */
int mm_ctx_fail(mm_ctx *ctx, const char *fmt, ...) MM_PRINTF(2, 3);
bool mm_ctx_failed(const mm_ctx *ctx);
/* 0 if no failure is recorded; otherwise copies the message to err and
 * returns -1 (the failure stays recorded). */
int mm_ctx_error(const mm_ctx *ctx, mm_error *err);
void mm_ctx_clear_error(mm_ctx *ctx);
/* Waits for all queued work (CUDA), then behaves like mm_ctx_error(). */
int mm_ctx_sync(mm_ctx *ctx, mm_error *err);

/* Runs fn(user, begin, end) over [0, n) split into chunks of at least `grain`
 * items on the CPU context's workers (inline when n is small or the context
 * has one thread). Nested calls run inline. For CPU code outside the backend
 * that has its own hot loop (e.g. a sampler on host memory). */
void mm_parallel_for(mm_ctx *ctx, int64_t n, int64_t grain, void (*fn)(void *user, int64_t begin, int64_t end),
                     void *user);

/* ======================================================== copy and convert */

/* dst = src, converting dtype. Shapes equal; any strides on both sides.
 * Conversions: float <-> float (RNE), integer -> float, float -> integer
 * (round half even, saturating), integer -> integer (saturating; I64 -> I32
 * for index tensors). The one cross-device op: when src and dst live on
 * different devices their dtypes must match (convert on either side first);
 * non-contiguous cross-device copies are staged through the CPU. Runs on the
 * context's stream; a CPU<->CUDA copy is complete when the op returns. */
int mm_copy(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src);

/* mm_copy that may also change the dtype across devices (a checkpoint's
 * tensor into its device copy): src moves as it is into a staging tensor on
 * dst's device, which converts it there. Waits for the work (the staging
 * tensor is freed before it returns); 0, or -1 with err. */
int mm_copy_converting(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src, mm_error *err);

/* Every element of dst = value (rounded to dst's dtype). Any strides. */
int mm_fill(mm_ctx *ctx, mm_tensor *dst, double value);

/* =============================================================== elementwise */
/* Shapes equal; any strides (broadcast with mm_tensor_expand); any float
 * dtypes; out may alias an input exactly. */

int mm_add(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b); /* a + b */
int mm_mul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b); /* a * b */
/* out = alpha*a + beta*b (b may be NULL: out = alpha*a + beta). Covers scale
 * (b NULL, beta 0), axpy (out == b, beta 1) and the Euler update. */
int mm_axpby(mm_ctx *ctx, mm_tensor *out, float alpha, const mm_tensor *a, float beta, const mm_tensor *b);
/* out = min(max(x, lo), hi). */
int mm_clamp(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, float lo, float hi);

typedef enum mm_act {
    MM_ACT_IDENTITY = 0,
    MM_ACT_SILU,      /* x * sigmoid(x) */
    MM_ACT_GELU_TANH, /* 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) ("gelu_pytorch_tanh") */
    MM_ACT_GELU_ERF,  /* 0.5x(1 + erf(x/sqrt(2))) (nn.GELU()) */
    MM_ACT_SIGMOID,
    MM_ACT_TANH,
    MM_ACT_RELU,
    MM_ACT_EXP,
} mm_act;

/* out = act(x). */
int mm_activation(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_act act);
/* Gated unit: out = act(gate) * up. SwiGLU = MM_ACT_SILU, GeGLU =
 * MM_ACT_GELU_TANH. For a fused [.., 2F] projection pass the two halves as
 * narrow views (gate = first half for H3's fc1 and the VAE FFN). */
int mm_glu(mm_ctx *ctx, mm_tensor *out, const mm_tensor *gate, const mm_tensor *up, mm_act act);
/* Snake activations on x [B, C, L] (channel dim 1; L stride 1), per-channel
 * alpha/beta [C]:
 *   beta == NULL (Snake1d):      y = x + sin(alpha*x)^2 / (alpha + 1e-9)
 *   beta != NULL (SnakeBeta, parameters stored log-scale):
 *                                y = x + sin(e^alpha*x)^2 / (e^beta + 1e-9) */
int mm_snake(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *alpha, const mm_tensor *beta);

/* ================================================================== row ops */

/* RMSNorm along the last dim C: out = x * rsqrt(mean(x^2) + eps) * w, with
 * the statistics and the product in f32 and one rounding (weight may be NULL:
 * no affine). Use on [S, H, D] views for per-head q/k norms (weight [D]).
 * out may alias x. */
int mm_rmsnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps);
/* LayerNorm along the last dim: (x - mean) * rsqrt(var + eps) * w + b, biased
 * variance; weight/bias may be NULL. out may alias x. */
int mm_layernorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                 float eps);
/* GroupNorm on a contiguous channel-first x [N, C, ...] (C divisible by
 * groups), biased variance, per-channel weight/bias [C] (either may be NULL).
 * per_frame = false: statistics over (C/groups) x all trailing dims.
 * per_frame = true: x is [N, C, T, H, W] and statistics are taken per frame
 * t over (C/groups) x H x W (the video VAE's time-isolated GroupNorm).
 * out may alias x. */
int mm_groupnorm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, const mm_tensor *bias,
                 int groups, float eps, bool per_frame);

/* Softmax along the last dim (f32, max-subtracted). out may alias x. */
int mm_softmax(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x);

typedef enum mm_reduce { MM_REDUCE_SUM = 0, MM_REDUCE_MEAN, MM_REDUCE_MAX, MM_REDUCE_MIN, MM_REDUCE_ABSMAX } mm_reduce;
/* out[rows] = reduce(x[rows, :]) along the last dim, accumulated in f32 (sum
 * in f64 on the CPU). out has x's shape without its last dim. */
int mm_reduce_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, mm_reduce op);

/* AdaLN modulation with a per-row table index:
 *   out[r, :] = x[r, :] * (1 + scale[idx[r], :]) + shift[idx[r], :]
 * x, out [R, C]; scale, shift [T, C] tables (any row strides: views into a
 * [3M, 6, H] modulation tensor work); idx I32 [R] with 0 <= idx < T (idx NULL:
 * T must be 1 and row 0 applies to every row). f32 math, one rounding. out
 * may alias x. */
int mm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *scale, const mm_tensor *shift,
                const mm_tensor *idx);
/* Fused RMSNorm + modulation (the DiT's norm1/norm2 and final norm):
 *   out[r] = rmsnorm(x[r]) * w * (1 + scale[idx[r]]) + shift[idx[r]]
 * weight may be NULL. Identical to mm_rmsnorm then mm_modulate except that
 * the normalized value is not rounded in between. */
int mm_rmsnorm_modulate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *weight, float eps,
                        const mm_tensor *scale, const mm_tensor *shift, const mm_tensor *idx);
/* Gated residual, in place: x[r, :] += gate[idx[r], :] * y[r, :]
 * (idx NULL: gate has one row). f32 math, one rounding into x. */
int mm_gated_residual(mm_ctx *ctx, mm_tensor *x, const mm_tensor *y, const mm_tensor *gate, const mm_tensor *idx);

/* Rotate-half RoPE on the first rot_dim channels of every head:
 * x, out [S, H, D] (D stride 1), cos/sin [S, rot_dim] (any float dtype, as
 * the caller rounded them), rot_dim even and <= D; with h = rot_dim/2, j < h:
 *   out[j]   = x[j]   * cos[j]   - x[j+h] * sin[j]
 *   out[j+h] = x[j+h] * cos[j+h] + x[j]   * sin[j+h]
 * channels >= rot_dim are copied. f32 math, one rounding. out may alias x. */
int mm_rope(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *cos, const mm_tensor *sin, int rot_dim);

/* ================================================================ attention */

typedef struct mm_attn_params {
    float scale;  /* softmax scale; 0 = 1/sqrt(D) */
    bool causal;  /* query i sees keys j <= i (self-attention: Sq == Sk) */
    /* Optional document boundaries for self-attention (Sq == Sk): host array
     * [0, s1, ..., S] of n_seg + 1 increasing row offsets; a row attends only
     * within its own segment (FlashAttention's cu_seqlens). NULL = one. */
    const int32_t *seg_offsets;
    int n_seg;
} mm_attn_params;

/* Scaled dot-product attention:
 *   out[i, h, :] = sum_j softmax_j(scale * q[i, h, :] . k[j, g, :]) v[j, g, :]
 * q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv], out [Sq, Hq, Dv]; last dims
 * stride 1, S and H strides free (views into a fused QKV buffer). GQA: Hq is
 * a multiple of Hkv and query head h uses kv head g = h / (Hq / Hkv). Float
 * dtypes (q, k, v equal); scores, softmax and accumulation in f32 (online
 * softmax: memory O(S), not O(S^2)); one rounding into out. params may be
 * NULL (non-causal, default scale). */
int mm_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                 const mm_attn_params *params);

/* ===================================================================== GEMM */

/* out = alpha * (a . b) + bias + beta * out
 * a [M, K], b [K, N], out [M, N] (out rows stride 1); or batched a [B, M, K]
 * with b [B, K, N] or [K, N] and out [B, M, N]. a and b: one of their two
 * last strides must be 1 (pass a Linear weight W [N, K] as
 * mm_tensor_transpose(&W, 0, 1)). a and b have the same float dtype; out any
 * float; bias [N] any float or NULL. f32 accumulation, one rounding. */
int mm_gemm(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias, float alpha,
            float beta);
/* out = a . b (+ bias): mm_gemm with alpha 1, beta 0. */
int mm_matmul(mm_ctx *ctx, mm_tensor *out, const mm_tensor *a, const mm_tensor *b, const mm_tensor *bias);

/* ============================================================ quantization */

/* Block-diagonal regular-Hadamard rotation along the last dim (ConvRot):
 * out[g*G + j] = sum_i x[g*G + i] * H_G[i][j] for each group of G = 256
 * consecutive channels, H_256 = (H4 (x) H4 (x) H4 (x) H4)/16 with H4 =
 * [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]] (symmetric, its own inverse).
 * f32 math, one rounding. K divisible by group (4^n, 4..256). */
int mm_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group);

/* The ConvRot activation side: for each row r of x [R, K] (float),
 *   x_rot = rotate(x) rounded to x's dtype (bf16 in the model, as the
 *           reference rounds its rotation GEMM; f32 input: no rounding),
 *   s[r]  = max_k |x_rot[r, k]| / 127 (f32; 1 for an all-zero row),
 *   q[r, k] = clamp(rne(x_rot[r, k] / s[r]), -127, 127)   (IEEE f32 division)
 * q I8 [R, K], s F32 [R]. This is ai-toolkit's convrot8 arithmetic, the
 * conformance kit's reference; the kit reproduces q from it bit for bit. */
int mm_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group);

/* W8A8 GEMM with the ConvRot epilogue:
 *   acc[r, n] = sum_k q_x[r, k] * q_w[n, k]   (exact, int32)
 *   out[r, n] = round(float(acc) * (s_x[r] * s_w[n]) + bias[n])
 * q_x I8 [R, K] and q_w I8 [N, K] with rows stride 1; s_x F32 [R]; s_w F32 [N]
 * (or the file's [N, 1]); bias any float [N] or NULL; out float [R, N]. */
int mm_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                      const mm_tensor *s_w, const mm_tensor *bias);

/* nvfp4 weight dequantization (Comfy/ModelOpt layout, text-encoder spec 6.3):
 * packed U8 [N, K/2] (element 2k in the HIGH nibble of byte k, e2m1 codes),
 * scales F8_E4M3 [N, K/16] stored in the cuBLAS 128x4 swizzled tile order
 * (N a multiple of 128, K/16 a multiple of 4), per-tensor f32 scale2:
 *   d = f32(e4m3(scale[n, k/16])) * scale2            (f32)
 *   out[n, k] = round(e2m1(code[n, k]) * d)           (one rounding; exact in f32)
 * -0 codes give -0.0. out [N, K] F32 or BF16 (or F16). */
int mm_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales, float scale2);

/* int8 embedding rows: out[r, :] = round(f32(table[ids[r], :]) * scale[ids[r]])
 * ids I32 [R] (0 <= id < V, checked on the CPU), table I8 [V, H] (rows stride
 * 1), scale F32 [V] or [V, 1], out float [R, H]. */
int mm_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table,
                    const mm_tensor *scale);

/* ========================================================= gather / scatter */
/* Row indices are I32 [R]; rows are the first dim; trailing dims equal. */

/* out[r] = src[idx[r]]  (float or integer; dtypes convert as in mm_copy). */
int mm_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
/* out[idx[r]] = src[r]  (indices distinct). */
int mm_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);
/* out[idx[r]] += src[r]  (indices distinct; float). */
int mm_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx);

/* ============================================================ convolutions */
/* Cross-correlation as in PyTorch. Contiguous inputs; weights in PyTorch
 * layout; float dtypes (x and w equal), f32 accumulation, one rounding.
 * Padding here is zeros and may be asymmetric (pad[d][0] before, pad[d][1]
 * after); reflect/replicate padding is a separate mm_pad first. */

typedef struct mm_conv_params {
    int stride[3];      /* per spatial dim (0 = 1) */
    int dilation[3];    /* (0 = 1) */
    int pad[3][2];      /* zero padding before/after per spatial dim */
    int groups;         /* (0 = 1) */
    int output_pad[3];  /* conv_transpose only: extra output on the end */
} mm_conv_params;

/* x [B, Cin, L], w [Cout, Cin/groups, K], bias [Cout] or NULL,
 * out [B, Cout, (L + p0 + p1 - d(K-1) - 1)/s + 1]. */
int mm_conv1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
              const mm_conv_params *p);
/* Transposed: x [B, Cin, L], w [Cin, Cout/groups, K], out [B, Cout, Lout]
 * with Lout = (L-1)s - p0 - p1 + d(K-1) + 1 + output_pad: y[i*s + k*d - p0]
 * += x[i] w[k] (pad[0] plays PyTorch's `padding` on each side when p0 == p1). */
int mm_conv_transpose1d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
                        const mm_conv_params *p);
/* x [B, Cin, T, H, W], w [Cout, Cin/groups, kt, kh, kw]; dims (T, H, W) map
 * to index 0, 1, 2 of stride/dilation/pad. (A 2-D conv is kt = 1, T = 1.) */
int mm_conv3d(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *bias,
              const mm_conv_params *p);

typedef enum mm_pad_mode {
    MM_PAD_CONSTANT = 0, /* value */
    MM_PAD_REFLECT,      /* mirror excluding the edge sample (pad < size) */
    MM_PAD_REPLICATE,    /* repeat the edge sample */
} mm_pad_mode;

/* out = x padded by pads[d][0] before and pads[d][1] after along every dim d
 * (pads has x->ndim rows; all >= 0). Any strides, any dtype; out's shape must
 * be x's plus the pads. */
int mm_pad(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const int (*pads)[2], mm_pad_mode mode, float value);

/* ============================================================ resampling */

typedef enum mm_interp {
    MM_INTERP_NEAREST = 0, /* src = floor(dst * in / out) (PyTorch "nearest") */
    MM_INTERP_LINEAR,      /* 1-3 spatial dims: (bi/tri)linear */
} mm_interp;

/* Resizes the trailing 1..3 spatial dims of a contiguous x [N, C, *in] to
 * out [N, C, *out] (a [C, *in] input is fine too: every dim before the last
 * `spatial` ones is a batch dim). LINEAR: align_corners = true maps the
 * corner samples onto each other (src = dst * (in-1)/(out-1)); false uses
 * half-pixel centres (src = (dst + 0.5) * in/out - 0.5, clamped at 0).
 * f32 weights and sums, one rounding. */
int mm_interpolate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int spatial, mm_interp mode,
                   bool align_corners);

#endif
