/* mmk — the plain-C ABI of the CUDA kernels (the .cu files in kernels/).
 *
 * Raw device pointers, an explicit device ordinal and stream, and errors as
 * values: every function returns 0, or -1 with a message in *err. Launches
 * are asynchronous; a fault inside a kernel surfaces at the next
 * mm_cuda_sync().
 *
 * Tensors are passed as mmk_view (pointer, dtype, shape, strides in elements:
 * the fields of an mm_tensor) where an op takes any layout, and as a pointer
 * plus row stride where a kernel is specialised for 2-D row-major data (the
 * DiT's hot path). "float" dtypes are F32, BF16, F16; the math is f32 and the
 * result is rounded once into the output's dtype unless stated otherwise.
 * Small per-channel vectors and modulation tables (norm weights, biases,
 * shift/scale/gate rows, scales) are passed as f32 device arrays: the C side
 * (src/backend/cuda/cuda_ops.c) converts other dtypes first.
 *
 * Each kernel computes the function its CPU twin in src/backend/cpu/ defines
 * (backend/ops.h); tests/unit/test_cuda_*.c compare them on the device.
 * Nothing outside the CUDA backend includes this header.
 */
#ifndef MMH3_KERNELS_MMK_H
#define MMH3_KERNELS_MMK_H

#include <stddef.h>
#include <stdint.h>

/* The core headers have no C++ guards of their own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "core/dtype.h"
#include "core/error.h"

typedef uint16_t mmk_bf16;              /* bfloat16 bits */
typedef struct CUstream_st *mmk_stream; /* a cudaStream_t */

#define MMK_MAX_DIMS 6
typedef struct mmk_view {
    void *p; /* element [0, ..., 0] */
    mm_dtype dtype;
    int ndim;
    int64_t shape[MMK_MAX_DIMS];
    int64_t stride[MMK_MAX_DIMS]; /* in elements; 0 broadcasts */
} mmk_view;

/* ------------------------------------------------------------------ runtime
 * (internal to the backend: kernels use these to reach the device's
 * cuBLASLt handle and scratch memory) */

/* Makes `dev` current on the calling thread. */
int mmk_device_enter(int dev, mm_error *err);
/* The device's cuBLASLt handle (a cublasLtHandle_t), created on first use. */
void *mmk_cublaslt(int dev, mm_error *err);
/* A scratch buffer of at least `bytes` on `dev`, owned by the backend and
 * reused by the next call that asks for the same `slot`: valid until then
 * (all users are on the device's compute stream). */
void *mmk_scratch(int dev, int slot, size_t bytes, mm_error *err);
enum { MMK_SCRATCH_GEMM_WORKSPACE = 0, MMK_SCRATCH_GEMM_I32 = 1, MMK_SCRATCH_COUNT = 4 };

/* Which kernel an op runs where it has two: 1 its default, 0 its portable
 * fallback — the kernels' part of the host's kernel policy
 * (backend/kernel_policy.h), handed over once per process before any work
 * (tests and benchmarks switch it between cases) and read at each launch. */
typedef struct mmk_policy {
    int attention_hopper; /* mmk_attention_run: the sm_90 wgmma kernel for bf16 head dim 128, after its self-check */
    int convrot_pipe;     /* mmk_convrot_quant_run: the pipelined kernel where it fits */
    int qk_norm_vec;      /* mmk_qk_norm_rope_run: four lanes per 128-wide head where it fits */
    int glue_vec;         /* RMSNorm without modulation, RoPE, the gated residual, f16 GLU: 8-wide where views fit */
    int conv_gemm;        /* mmk_conv_run, groups = 1: im2col + cuBLASLt GEMM */
} mmk_policy;
void mmk_policy_set(const mmk_policy *p);
/* The policy in force: every default until mmk_policy_set. */
const mmk_policy *mmk_policy_get(void);

/* Kernel registry for the presence check of `mmh3 check`. */
typedef struct mmk_kernel_entry {
    const char *name;
    const void *fn; /* the __global__ function's address */
    int min_cc;     /* compute capability it needs (80, 90); a device below that does not use it */
} mmk_kernel_entry;
/* Each translation unit lists its kernels. */
const mmk_kernel_entry *mmk_kernels_gemm(int *n);
const mmk_kernel_entry *mmk_kernels_norm(int *n);
const mmk_kernel_entry *mmk_kernels_convrot(int *n);
const mmk_kernel_entry *mmk_kernels_elementwise(int *n);
const mmk_kernel_entry *mmk_kernels_attention(int *n);
const mmk_kernel_entry *mmk_kernels_conv(int *n);
const mmk_kernel_entry *mmk_kernels_fa3(int *n);   /* kernels/attn_fa3.cu */
const mmk_kernel_entry *mmk_kernels_qgemm(int *n); /* kernels/qgemm_sm90.cu */
const mmk_kernel_entry *mmk_kernels_sparse(int *n); /* kernels/attn_sparse.cu */

/* ------------------------------------------------------------------ GEMM */

/* General cuBLASLt GEMM, row-major view:
 *   y[b] = alpha · op(a[b]) · op(w[b]) (+ bias) + beta · y[b]     for b < batch
 * a: M×K (trans_a = 0: row-major with row stride lda; 1: stored K×M, i.e. the
 * column-major M×K, stride lda between its K-rows), w: K×N (trans_w = 0:
 * row-major K×N, stride ldw; 1: stored N×K row-major, stride ldw — a Linear
 * weight), y: row-major M×N with row stride ldy. Batch strides in elements
 * (0 = shared). Inputs share a dtype: BF16/F16/F32 with any float y (full
 * fp32 for F32 inputs: no TF32), or I8 (y: I32, no bias, alpha 1, beta 0/1).
 * bias: [N] of bias_dtype (float) or NULL, added in f32 before the single
 * rounding. The plan (descriptors and algorithm) is chosen once per shape
 * and cached. */
typedef struct mmk_gemm_ex {
    int M, N, K, batch;
    mm_dtype ab_dtype, y_dtype;
    const void *a;
    int64_t lda, batch_a;
    int trans_a;
    const void *w;
    int64_t ldw, batch_w;
    int trans_w;
    void *y;
    int64_t ldy, batch_y;
    const void *bias;
    mm_dtype bias_dtype;
    float alpha, beta;
} mmk_gemm_ex;
int mmk_gemm_ex_run(int dev, mmk_stream s, const mmk_gemm_ex *g, mm_error *err);

/* The linear-layer shorthand: y[M,N] = a[M,K] · w[N,K]ᵀ (+ bias) (+ beta·y).
 * bias f32 or NULL. */
typedef struct mmk_gemm {
    int M, N, K;
    mm_dtype ab_dtype; /* MM_BF16, MM_F16, MM_F32 or MM_I8 */
    const void *a;
    int64_t lda;
    const void *w;
    int64_t ldw;
    const float *bias;
    void *y;
    int64_t ldy;
    mm_dtype y_dtype;
    float beta;
} mmk_gemm;
int mmk_gemm_run(int dev, mmk_stream s, const mmk_gemm *g, mm_error *err);

/* The ConvRot int8 linear (spec dit.md §3.3 steps 4-5) with its epilogue:
 *   acc[r,n] = Σ_k xq[r,k]·wq[n,k]                       (int32, exact)
 *   o[r,n]   = float(acc)·(sx[r]·sw[n]) + bias[n]        (f32, scales multiplied first)
 *   with an addend: o[r,n] += add[r·ld_add + n]           (f32, before any rounding)
 *   store:          y[r,n] = round(o)                     (y_dtype: F32, BF16, F16)
 *   gated residual: y[r,n] = round(y[r,n] + gate[mod_idx[r]·ld_gate + n] · round(o))
 *                   (y is the residual stream: the same value as storing o
 *                   and then mmk_gated_add, in one pass)
 * gate == NULL selects the plain store. sx, sw, bias, gate: f32. */
typedef struct mmk_qlinear {
    int M, N, K;
    const int8_t *xq;
    int64_t ldx;
    const float *sx; /* [M] */
    const int8_t *wq;
    int64_t ldw;
    const float *sw;   /* [N] */
    const float *bias; /* [N] or NULL */
    void *y;
    int64_t ldy;
    mm_dtype y_dtype;
    const float *gate; /* modulation table rows, or NULL */
    int64_t ld_gate;
    const int32_t *mod_idx; /* [M] table row of each row */
    /* f32 [M, N] (row stride ld_add) added to o before its rounding: an
     * adapter branch's s·B·u (docs/LORA.md), or NULL */
    const float *add;
    int64_t ld_add;
} mmk_qlinear;
int mmk_qlinear_i8(int dev, mmk_stream s, const mmk_qlinear *q, mm_error *err);

/* ------------------------------------------------------------------ row ops
 * A "row" is the last dim of a view (stride 1); the leading dims, with any
 * strides, enumerate the rows in row-major order. */

/* RMSNorm and AdaLN modulation, per row r with t = idx[r·idx_stride]
 * (idx NULL: t = 0):
 *   MMK_NORM_RMS:     y = x · (1/sqrt(mean(x²) + eps)) · w
 *   MMK_NORM_RMS_MOD: y = (x · (1/sqrt(mean(x²) + eps)) · w) · (1 + scale[t]) + shift[t]
 *   MMK_NORM_MOD:     y = x · (1 + scale[t]) + shift[t]
 * w (NULL = 1), scale, shift: f32; tables [T, cols] with row stride ld_mod.
 * y may alias x. */
enum { MMK_NORM_RMS = 0, MMK_NORM_RMS_MOD = 1, MMK_NORM_MOD = 2 };
typedef struct mmk_rmsnorm {
    mmk_view x, y;
    int mode;
    const float *w;
    float eps;
    const float *scale, *shift;
    int64_t ld_mod;
    const int32_t *idx;
    int64_t idx_stride;
} mmk_rmsnorm;
int mmk_rmsnorm_run(int dev, mmk_stream s, const mmk_rmsnorm *a, mm_error *err);

/* LayerNorm per row: (x − mean)·(1/sqrt(var + eps))·w + b, biased variance
 * (two passes); w, b f32 or NULL. */
int mmk_layernorm_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const float *w, const float *b,
                      float eps, mm_error *err);

/* Softmax per row (f32, max-subtracted). */
int mmk_softmax_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, mm_error *err);

/* y[row] = reduce(x[row, :]) (f32 accumulation); y is a view with x's
 * leading dims. op: the values of mm_reduce (backend/ops.h). */
enum { MMK_REDUCE_SUM = 0, MMK_REDUCE_MEAN, MMK_REDUCE_MAX, MMK_REDUCE_MIN, MMK_REDUCE_ABSMAX };
int mmk_reduce_rows_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, int op, mm_error *err);

/* x[r] += gate[t] · y[r] per row (t = idx[r·idx_stride], idx NULL: 0); gate
 * f32 [T, cols] with row stride ld_gate; gate NULL: x += y. One rounding. */
int mmk_gated_add_run(int dev, mmk_stream s, const mmk_view *x, const mmk_view *y, const float *gate, int64_t ld_gate,
                      const int32_t *idx, int64_t idx_stride, mm_error *err);

/* Rotate-half RoPE on x viewed as [S, H, D] (any S and H strides): with
 * h = rot/2, j < h:
 *   out[j]   = x[j]·cos[s,j]     − x[j+h]·sin[s,j]
 *   out[j+h] = x[j+h]·cos[s,j+h] + x[j]·sin[s,j+h]
 * channels ≥ rot copied; cos/sin views [S, rot] (row stride free, last 1). */
int mmk_rope_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const mmk_view *cos,
                 const mmk_view *sin, int rot, mm_error *err);

/* The DiT's fused per-head q/k RMSNorm (f32 weights wq, wk over head_dim;
 * NULL = no norm) and RoPE (bf16 cos/sin [rows, rot_dim], row stride
 * ld_rope; NULL = none), in place on bf16 q [rows, heads_q·head_dim] and k
 * [rows, heads_k·head_dim] (row strides ldq, ldk: views into the fused qkv
 * buffer). The normalized value is rounded to bf16 before the rotation (the
 * value mm_rmsnorm then mm_rope would see); the rotation rounds once. */
typedef struct mmk_qk_norm_rope {
    int rows, heads_q, heads_k, head_dim;
    mmk_bf16 *q;
    int64_t ldq;
    mmk_bf16 *k;
    int64_t ldk;
    const float *wq, *wk;
    float eps;
    const mmk_bf16 *cos, *sin;
    int64_t ld_rope;
    int rot_dim;
} mmk_qk_norm_rope;
int mmk_qk_norm_rope_run(int dev, mmk_stream s, const mmk_qk_norm_rope *a, mm_error *err);
/* The kernel mmk_qk_norm_rope_run would launch: "vec" (the default, for
 * head_dim 128, 16-byte aligned rows, rot_dim % 16 == 0) or "warp"
 * (otherwise, or mmk_policy.qk_norm_vec = 0). */
const char *mmk_qk_norm_rope_kernel(const mmk_qk_norm_rope *a);

/* GroupNorm on contiguous x, y [N, C, F, S]: statistics per (n, group, f)
 * over the C/G channels of the group and the S positions (biased variance,
 * two passes, f32), per-channel affine (f32 w, b or NULL), optional SiLU.
 * F = 1 is the ordinary GroupNorm; the video VAE's per-frame norm on
 * [N, C, T, H·W] is F = T. */
typedef struct mmk_groupnorm {
    int n, c, groups, frames;
    int64_t spatial;
    const void *x;
    mm_dtype x_dtype;
    void *y;
    mm_dtype y_dtype;
    const float *w, *b;
    float eps;
    int silu;
} mmk_groupnorm;
int mmk_groupnorm_run(int dev, mmk_stream s, const mmk_groupnorm *a, mm_error *err);

/* ------------------------------------------------------------------ ConvRot
 * Per row of K channels (K a multiple of the group):
 *   h     = pre(x)                       (rounded to x's dtype: the tensor the
 *                                         reference materializes)
 *   hr    = round_x(h · H_G) per group   (f32 radix-4 butterflies with strides
 *                                         1, 4, 16, 64, each ·0.5, then rounded
 *                                         to x's dtype; f32 x: no rounding)
 *   s[r]  = max_k |hr[r,k]| / 127        (f32; 1 for an all-zero row)
 *   q     = clamp(rne(hr / s[r]), −127, 127)   (IEEE f32 division)
 * (ai-toolkit's convrot8 arithmetic, the conformance kit's reference.)
 * pre (group 256 and bf16 x only, the DiT's fused paths):
 *   MMK_PRE_NONE        h = x[:, 0:K]
 *   MMK_PRE_RMSNORM_MOD h = rmsnorm(x)·w·(1 + scale[t]) + shift[t]   (as MMK_NORM_RMS_MOD)
 *   MMK_PRE_SWIGLU      h = silu(x[:, 0:K]) · x[:, K:2K]             (fc1 out = [gate | up])
 * q == NULL: only rotate, writing hr to `rot` (hadamard_rotate).
 * h_out (the fused pre-ops, bf16 [rows, K] with row stride ld_h, 16-byte
 * aligned rows): h as well, the bf16 tensor the composition would have
 * written (an adapter branch reads it: docs/LORA.md), or NULL. */
enum { MMK_PRE_NONE = 0, MMK_PRE_RMSNORM_MOD = 1, MMK_PRE_SWIGLU = 2 };
typedef struct mmk_convrot_quant {
    int rows, K, group, pre;
    const void *x;
    mm_dtype x_dtype;
    int64_t ldx;
    const float *norm_w; /* RMSNORM_MOD: [K] or NULL */
    float eps;
    const float *shift, *scale; /* RMSNORM_MOD: f32 tables [T, K], or NULL */
    int64_t ld_mod;
    const int32_t *mod_idx;
    int8_t *q; /* [rows, K] with row stride ldq */
    int64_t ldq;
    float *s;  /* [rows] with stride s_stride */
    int64_t s_stride;
    void *rot; /* q == NULL: output of the rotation, dtype rot_dtype, row stride ld_rot */
    mm_dtype rot_dtype;
    int64_t ld_rot;
    void *h_out; /* fused pre-ops: bf16 h as well, or NULL */
    int64_t ld_h;
} mmk_convrot_quant;
int mmk_convrot_quant_run(int dev, mmk_stream s, const mmk_convrot_quant *a, mm_error *err);
/* The kernel mmk_convrot_quant_run would launch: "pipe" (the default on the
 * fast path when its stages fit), "row" (the fast path otherwise, or
 * mmk_policy.convrot_pipe = 0) or "generic" (other groups and dtypes). */
const char *mmk_convrot_quant_kernel(const mmk_convrot_quant *a);

/* ------------------------------------------------------------------ elementwise (views) */

enum {
    MMK_EW_COPY = 0, /* y = convert(a): float/int conversions as mm_copy (RNE, saturating) */
    MMK_EW_FILL,     /* y = alpha (as a double in `value`) */
    MMK_EW_ADD,      /* y = a + b */
    MMK_EW_MUL,      /* y = a · b */
    MMK_EW_AXPBY,    /* y = alpha·a + beta·b */
    MMK_EW_AXPB,     /* y = alpha·a + beta */
    MMK_EW_CLAMP,    /* y = min(max(a, alpha), beta) */
    MMK_EW_ACT,      /* y = act(a) */
    MMK_EW_GLU,      /* y = act(a) · b */
};
/* Activations: the values of mm_act (backend/ops.h). */
enum {
    MMK_ACT_IDENTITY = 0,
    MMK_ACT_SILU,
    MMK_ACT_GELU_TANH,
    MMK_ACT_GELU_ERF,
    MMK_ACT_SIGMOID,
    MMK_ACT_TANH,
    MMK_ACT_RELU,
    MMK_ACT_EXP,
};
typedef struct mmk_ew {
    int op, act;
    mmk_view y, a, b; /* a, b unused by FILL; b unused by unary ops */
    float alpha, beta;
    double value;
    int elementwise_copy; /* COPY: skip the raw-row kernel (A/B benchmarks of the element-wise walk); 0 in the product */
} mmk_ew;
int mmk_ew_run(int dev, mmk_stream s, const mmk_ew *e, mm_error *err);

/* Row gather/scatter along dim 0 (views of equal trailing shape; idx int32
 * with stride idx_stride): GATHER y[r] = x[idx[r]]; SCATTER y[idx[r]] = x[r];
 * SCATTER_ADD y[idx[r]] += x[r] (f32 add, one rounding; indices distinct).
 * Floats convert; integer dtypes must match. */
enum { MMK_GATHER = 0, MMK_SCATTER = 1, MMK_SCATTER_ADD = 2 };
int mmk_index_rows(int dev, mmk_stream s, int op, const mmk_view *y, const mmk_view *x, const int32_t *idx,
                   int64_t idx_stride, mm_error *err);

/* Snake on x [B, C, L] (views): beta NULL: y = x + sin(α x)²/(α + 1e-9);
 * else y = x + sin(e^α x)²/(e^β + 1e-9). alpha, beta f32 [C]. */
int mmk_snake_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const float *alpha, const float *beta,
                  mm_error *err);

/* Padding (any dtype; y and x share it): mode 0 constant (value), 1 reflect,
 * 2 replicate; pads[d][0] before, [d][1] after. */
int mmk_pad_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const int (*pads)[2], int mode,
                double value, mm_error *err);

/* Resize the last `spatial` (1..3) dims of contiguous x to y's: mode 0
 * nearest (src = floor(dst·in/out)), 1 (multi)linear with align_corners or
 * half-pixel centres (clamped at 0); f32 weights, one rounding. */
int mmk_interpolate_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, int spatial, int mode,
                        int align_corners, mm_error *err);

/* Fills n elements with reproducible pseudo-random values (a hash of seed
 * and index): uniform in [-scale, scale) for float dtypes (f32, bf16, f16),
 * uniform codes in [-127, 127] for i8. For benchmarks and device tests that
 * need large inputs without a host round trip. */
int mmk_fill_random(int dev, mmk_stream s, void *p, mm_dtype dtype, int64_t n, uint64_t seed, float scale,
                    mm_error *err);

/* int8 embedding: y[i, :] = round(float(table[ids[i], :]) · scale[ids[i]]);
 * y a 2-D view (float), table rows with stride ld_table, ids/scale strided. */
int mmk_embed_i8(int dev, mmk_stream s, const mmk_view *y, const int32_t *ids, int64_t ids_stride,
                 const int8_t *table, int64_t ld_table, const float *scale, int64_t scale_stride, mm_error *err);

/* nvfp4 weight rows → float (spec text-encoder.md §6.3-6.4):
 *   d      = float(e4m3(scale of (n, k/16), read through the cuBLAS 128×4
 *            swizzle)) · global_scale                     (f32)
 *   w[n,k] = round(e2m1(code of (n, k)) · d)              (one rounding)
 * packed: [N, K/2] bytes, element 2j in the HIGH nibble of byte j. Rows
 * [row0, row0 + rows) of the weight go to contiguous y [rows, K] of y_dtype.
 * N % 128 == 0, K % 64 == 0. */
int mmk_nvfp4_dequant(int dev, mmk_stream s, int N, int K, int row0, int rows, const uint8_t *packed,
                      const uint8_t *scales, float global_scale, void *y, mm_dtype y_dtype, mm_error *err);

/* ------------------------------------------------------------------ attention
 * o = softmax(q·kᵀ·scale) · v per head, fp32 statistics and accumulation,
 * never materializing the score matrix; q, k, v, o share a dtype (bf16, f16:
 * tensor cores, head dims multiples of 8 up to 256; f32 or unaligned data: a
 * plain f32 kernel for the small attentions of the VAEs). Row strides are
 * between consecutive tokens, head strides between heads of one token. GQA:
 * q head h reads kv head h / (heads_q / heads_kv). causal: query i sees keys
 * j ≤ i + (seq_k − seq_q). cu_seqlens (device int32 [n_seqs + 1]) pack
 * several independent sequences along the rows (NULL: one sequence of
 * seq_q/seq_k). */
typedef struct mmk_attention {
    int seq_q, seq_k, heads_q, heads_kv, head_dim;
    mm_dtype dtype; /* of q, k, v and o */
    const void *q, *k, *v;
    int64_t ldq, ldk, ldv;
    int64_t hsq, hsk, hsv; /* head strides (0 = head_dim) */
    void *o;
    int64_t ldo, hso;
    float scale;
    int causal;
    const int32_t *cu_seqlens_q, *cu_seqlens_k;
    int n_seqs;
    int max_seq_q; /* the longest sequence of cu_seqlens_q (sizes the grid) */
    int portable;  /* 1: the portable kernel whatever the device and policy (the reference of the self-checks) */
} mmk_attention;
int mmk_attention_run(int dev, mmk_stream s, const mmk_attention *a, mm_error *err);
/* Which attention kernel mmk_attention_run uses on `dev` for bf16 head dim
 * 128 (running the Hopper kernel's self-check the first time). */
const char *mmk_attention_path(int dev);

/* ------------------------------------------------------------------ convolution
 * Direct convolutions (cross-correlation, as PyTorch), f32 accumulation,
 * groups, dilation, zero padding before/after per dim. x and w share a float
 * dtype; y any float; bias f32 or NULL; all contiguous. */
typedef struct mmk_conv {
    int rank; /* 1 or 3 */
    int n, cin, cout, groups;
    int in[3], k[3], out[3]; /* spatial extents (rank 1: index 0 only) */
    int stride[3], dilation[3], pad0[3];
    int transposed; /* rank 1 only: ConvTranspose1d, w [cin, cout/groups, k] */
    const void *x;
    const void *w;
    mm_dtype xw_dtype;
    const float *bias;
    void *y;
    mm_dtype y_dtype;
} mmk_conv;
int mmk_conv_run(int dev, mmk_stream s, const mmk_conv *a, mm_error *err);

#ifdef __cplusplus
}
#endif

#endif
