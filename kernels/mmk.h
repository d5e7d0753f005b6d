/* mmk — the plain-C ABI of the CUDA kernels (the .cu files in kernels/).
 *
 * Raw device pointers, row-major matrices with explicit row strides (in
 * elements), an explicit device ordinal and stream, and errors as values:
 * every function returns 0, or -1 with a message in *err. Launches are
 * asynchronous; a fault inside a kernel surfaces at the next mm_cuda_sync().
 *
 * Each kernel here has a CPU twin in src/backend/cpu/ computing the same
 * function with the same rounding points; tests/unit/test_cuda_*.c compare
 * them on the device. Rounding points are stated per function ("rounds to
 * bf16 once" = the value is computed in fp32 from the bf16 inputs and rounded
 * to bf16 at the end).
 *
 * The C side of the backend (src/backend/cuda/) maps mm_tensor arguments onto
 * these calls; nothing outside the CUDA backend includes this header.
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

typedef uint16_t mmk_bf16;           /* bfloat16 bits */
typedef struct CUstream_st *mmk_stream; /* a cudaStream_t */

/* ------------------------------------------------------------------ runtime
 * (internal to the backend: kernels use these to reach the device's
 * cuBLASLt handle and scratch memory) */

/* Makes `dev` current on the calling thread. */
int mmk_device_enter(int dev, mm_error *err);
/* The device's cuBLASLt handle (a cublasLtHandle_t), created on first use. */
void *mmk_cublaslt(int dev, mm_error *err);
/* A scratch buffer of at least `bytes` on `dev`, owned by the backend and
 * reused by the next call that asks for scratch with the same `slot`: valid
 * until then (all users are on the device's compute stream). */
void *mmk_scratch(int dev, int slot, size_t bytes, mm_error *err);
enum { MMK_SCRATCH_GEMM_WORKSPACE = 0, MMK_SCRATCH_GEMM_I32 = 1, MMK_SCRATCH_COUNT = 4 };

/* Kernel registry for the presence check of `mmh3 check`. */
typedef struct mmk_kernel_entry {
    const char *name;
    const void *fn;  /* the __global__ function's address */
    int min_cc;      /* compute capability it needs (80, 90); a device below that does not use it */
} mmk_kernel_entry;
/* Each translation unit lists its kernels. */
const mmk_kernel_entry *mmk_kernels_gemm(int *n);
const mmk_kernel_entry *mmk_kernels_norm(int *n);
const mmk_kernel_entry *mmk_kernels_convrot(int *n);
const mmk_kernel_entry *mmk_kernels_elementwise(int *n);
const mmk_kernel_entry *mmk_kernels_attention(int *n);
const mmk_kernel_entry *mmk_kernels_conv(int *n);

/* ------------------------------------------------------------------ GEMM
 * y[M,N] = a[M,K] · w[N,K]ᵀ (+ bias[N]) (+ beta · y), through cuBLASLt with
 * the algorithm chosen once per shape and cached.
 *   a, w bf16 → y bf16 or f32; f32 accumulation; bias bf16 or f32
 *   a, w f32  → y f32; full fp32 (no TF32)
 *   a, w i8   → y i32; exact int32 accumulation; no bias; K % 4 == 0
 * Strides (lda, ldw, ldy) are in elements. beta is 0 or 1. */
typedef struct mmk_gemm {
    int M, N, K;
    mm_dtype ab_dtype; /* MM_BF16, MM_F32 or MM_I8 */
    const void *a;
    int64_t lda;
    const void *w;
    int64_t ldw;
    const void *bias; /* [N] or NULL */
    mm_dtype bias_dtype;
    void *y;
    int64_t ldy;
    mm_dtype y_dtype;
    float beta;
} mmk_gemm;
int mmk_gemm_run(int dev, mmk_stream s, const mmk_gemm *g, mm_error *err);

/* The ConvRot int8 linear (spec dit.md §3.3 steps 4-5) with its epilogue:
 *   acc[r,n] = Σ_k xq[r,k]·wq[n,k]                       (int32, exact)
 *   o[r,n]   = bf16( float(acc)·(sx[r]·sw[n]) (+ bias[n]) )
 *              (fp32, the two scales multiplied first, one rounding: the
 *              reference's arithmetic, reproduced bit for bit)
 *   store:          y[r,n] = o
 *   gated residual: y[r,n] = bf16( y[r,n] + gate[mod_idx[r]·ld_gate + n]·o )
 *                   (y is the residual stream; one rounding of the fma)
 * gate == NULL selects the plain store. */
typedef struct mmk_qlinear {
    int M, N, K;
    const int8_t *xq;
    int64_t ldx;
    const float *sx; /* [M] */
    const int8_t *wq;
    int64_t ldw;
    const float *sw; /* [N] */
    const mmk_bf16 *bias; /* [N] or NULL */
    mmk_bf16 *y;
    int64_t ldy;
    const mmk_bf16 *gate; /* modulation table rows, or NULL */
    int64_t ld_gate;
    const int32_t *mod_idx; /* [M] table row of each row */
} mmk_qlinear;
int mmk_qlinear_i8(int dev, mmk_stream s, const mmk_qlinear *q, mm_error *err);

/* ------------------------------------------------------------------ norms */

/* RMSNorm over `cols`, optionally modulated (AdaLN):
 *   n = x · rsqrt(mean(x²) + eps) · w            (fp32 statistics; w may be NULL = 1)
 *   y = n · (1 + scale[mod_idx[r]]) + shift[mod_idx[r]]   when shift/scale given
 * x, y: bf16 or f32 (x_dtype, y_dtype); w, shift, scale: bf16. Rounds to
 * y's dtype once. y may alias x. */
typedef struct mmk_rmsnorm {
    int rows, cols;
    const void *x;
    int64_t ldx;
    mm_dtype x_dtype;
    void *y;
    int64_t ldy;
    mm_dtype y_dtype;
    const mmk_bf16 *w;
    float eps;
    const mmk_bf16 *shift, *scale; /* both or neither */
    int64_t ld_mod;
    const int32_t *mod_idx;
} mmk_rmsnorm;
int mmk_rmsnorm_run(int dev, mmk_stream s, const mmk_rmsnorm *a, mm_error *err);

/* LayerNorm over `cols` with optional affine weight/bias (bf16 or f32 —
 * wb_dtype), biased variance, fp32 statistics. x, y: bf16 or f32. */
typedef struct mmk_layernorm {
    int rows, cols;
    const void *x;
    int64_t ldx;
    mm_dtype x_dtype;
    void *y;
    int64_t ldy;
    mm_dtype y_dtype;
    const void *w, *b; /* [cols] or NULL */
    mm_dtype wb_dtype;
    float eps;
} mmk_layernorm;
int mmk_layernorm_run(int dev, mmk_stream s, const mmk_layernorm *a, mm_error *err);

/* GroupNorm on a contiguous [N, C, F, S] tensor: statistics per (n, group,
 * f) over the C/G channels of the group and the S positions, biased
 * variance, fp32 statistics; per-channel affine (f32, may be NULL), optional
 * SiLU after. F = 1 is the ordinary GroupNorm over [N, C, S]; the video VAE's
 * per-frame norm on [N, C, T, H·W] is F = T, S = H·W. */
typedef struct mmk_groupnorm {
    int n, c, groups, frames;
    int64_t spatial;
    const void *x;
    void *y;
    mm_dtype dtype; /* bf16 or f32, x and y alike */
    const float *w, *b;
    float eps;
    int silu;
} mmk_groupnorm;
int mmk_groupnorm_run(int dev, mmk_stream s, const mmk_groupnorm *a, mm_error *err);

/* Per-head RMSNorm of q and k (weights wq, wk over head_dim; NULL = no norm),
 * then rotate-half RoPE on the first rot_dim = 2h channels of each head:
 *   out[j]   = x[j]·cos[j]     − x[j+h]·sin[j]
 *   out[j+h] = x[j+h]·cos[j+h] + x[j]·sin[j+h]          (j < h)
 * channels ≥ rot_dim pass through. cos/sin: tables [rows, rot_dim] of
 * rope_dtype (bf16 or f32; row stride ld_rope); NULL = no RoPE. k may be NULL
 * (heads_k ignored): then this is RMSNorm and/or RoPE of one [rows, heads,
 * head_dim] tensor.
 * In place on q [rows, heads_q·head_dim] and k [rows, heads_k·head_dim]
 * (row strides ldq, ldk: both may be views into one fused qkv buffer). The
 * normalized value is rounded to bf16 before the rotation (as the reference
 * materializes it); the rotation rounds once. */
typedef struct mmk_qk_norm_rope {
    int rows, heads_q, heads_k, head_dim;
    mmk_bf16 *q;
    int64_t ldq;
    mmk_bf16 *k;
    int64_t ldk;
    const mmk_bf16 *wq, *wk;
    float eps;
    const void *cos, *sin;
    int64_t ld_rope;
    mm_dtype rope_dtype;
    int rot_dim;
} mmk_qk_norm_rope;
int mmk_qk_norm_rope_run(int dev, mmk_stream s, const mmk_qk_norm_rope *a, mm_error *err);

/* ------------------------------------------------------------------ ConvRot activations
 * One pass per row (spec dit.md §3.2-3.3 steps 1-3):
 *   h     = pre(x) rounded to bf16        (the bf16 tensor the reference materializes)
 *   hr    = bf16(h · H256) per group of 256  (fp32 butterflies: 4 radix-4 stages
 *                                          with strides 1, 4, 16, 64, each scaled
 *                                          by 0.5; then rounded to bf16 as the
 *                                          reference's bf16 rotation GEMM does)
 *   s[r]  = max_k |hr[r,k]| / 127   (fp32; 1 for an all-zero row)
 *   q     = clamp(rne(hr / s[r]), −127, 127)           (IEEE fp32 division)
 * (ai-toolkit's convrot8 arithmetic, the conformance kit's reference.)
 * pre:
 *   MMK_PRE_NONE        h = x[:, 0:K]
 *   MMK_PRE_RMSNORM_MOD h = rmsnorm(x)·w·(1 + scale) + shift   (as mmk_rmsnorm)
 *   MMK_PRE_SWIGLU      h = silu(x[:, 0:K]) · x[:, K:2K]       (fc1 out = [gate | up])
 * K must be a multiple of 256. */
enum { MMK_PRE_NONE = 0, MMK_PRE_RMSNORM_MOD = 1, MMK_PRE_SWIGLU = 2 };
typedef struct mmk_convrot_quant {
    int rows, K, pre;
    const mmk_bf16 *x;
    int64_t ldx;
    const mmk_bf16 *norm_w; /* RMSNORM_MOD: [K] or NULL */
    float eps;
    const mmk_bf16 *shift, *scale; /* RMSNORM_MOD: modulation rows, or NULL */
    int64_t ld_mod;
    const int32_t *mod_idx;
    int8_t *q; /* [rows, K] */
    int64_t ldq;
    float *s; /* [rows] */
} mmk_convrot_quant;
int mmk_convrot_quant_run(int dev, mmk_stream s, const mmk_convrot_quant *a, mm_error *err);

/* ------------------------------------------------------------------ elementwise */

/* y[i] = convert(x[i]) for n elements; f32, f16, bf16 in and out (round to
 * nearest even), plus i8 → f32/bf16. */
int mmk_convert(int dev, mmk_stream s, void *y, mm_dtype y_dtype, const void *x, mm_dtype x_dtype, int64_t n,
                mm_error *err);

/* y[r, j] = act(x[r, j]) · x[r, F + j] for j < F (x = [gate | up]); bf16,
 * rounds once. act: MMK_ACT_SILU or MMK_ACT_GELU_TANH. */
enum { MMK_ACT_NONE = 0, MMK_ACT_SILU = 1, MMK_ACT_GELU_TANH = 2, MMK_ACT_GELU_ERF = 3 };
int mmk_glu(int dev, mmk_stream s, int rows, int F, const mmk_bf16 *x, int64_t ldx, mmk_bf16 *y, int64_t ldy, int act,
            mm_error *err);

/* x[r, n] = x[r, n] + gate[mod_idx[r]·ld_gate + n] · y[r, n] (bf16, one rounding);
 * gate == NULL: plain x += y. */
int mmk_gated_add(int dev, mmk_stream s, int rows, int cols, mmk_bf16 *x, int64_t ldx, const mmk_bf16 *y, int64_t ldy,
                  const mmk_bf16 *gate, int64_t ld_gate, const int32_t *mod_idx, mm_error *err);

/* y = act(x) elementwise on n contiguous elements, bf16 or f32 (x may alias y). */
int mmk_activation(int dev, mmk_stream s, void *y, const void *x, mm_dtype dtype, int64_t n, int act, mm_error *err);

/* Fills n elements with reproducible pseudo-random values (a hash of seed
 * and index): uniform in [-scale, scale) for float dtypes (f32, bf16, f16),
 * uniform codes in [-127, 127] for i8. For benchmarks and device tests that
 * need large inputs without a host round trip. */
int mmk_fill_random(int dev, mmk_stream s, void *p, mm_dtype dtype, int64_t n, uint64_t seed, float scale,
                    mm_error *err);

/* Integer-table embedding: y[i, :] = bf16(table[ids[i], :] · scale[ids[i]]). */
int mmk_embed_i8(int dev, mmk_stream s, int n, int dim, const int32_t *ids, const int8_t *table, const float *scale,
                 mmk_bf16 *y, mm_error *err);

/* nvfp4 weight rows → bf16 (spec text-encoder.md §6.3-6.4):
 *   d     = float(e4m3(scale of (n, k/16), read through the cuBLAS 128×4
 *           swizzle)) · global_scale                     (fp32)
 *   w[n,k] = bf16(e2m1(code of (n, k)) · d)              (one rounding)
 * packed: [N, K/2] bytes, element 2j in the HIGH nibble of byte j. Rows
 * [row0, row0 + rows) of the weight go to y [rows, K]. N % 128 == 0,
 * (K/16) % 4 == 0. */
int mmk_nvfp4_to_bf16(int dev, mmk_stream s, int N, int K, int row0, int rows, const uint8_t *packed,
                      const uint8_t *scales, float global_scale, mmk_bf16 *y, mm_error *err);

/* ------------------------------------------------------------------ attention
 * o = softmax(q·kᵀ·scale) · v per head, bf16 in/out, fp32 statistics and
 * accumulation, never materializing the score matrix. Row strides are
 * between consecutive tokens; heads sit head_dim apart within a row. GQA:
 * q head h reads kv head h / (heads_q / heads_kv). causal: query i sees keys
 * j ≤ i + (seq_k − seq_q). head_dim: 64, 72, 128 (others up to 128 that are
 * multiples of 8 run too). cu_seqlens (device int32 [n_seqs + 1]) pack several
 * independent sequences along the rows (NULL: one sequence of seq_q/seq_k). */
typedef struct mmk_attention {
    int seq_q, seq_k, heads_q, heads_kv, head_dim;
    const mmk_bf16 *q, *k, *v;
    int64_t ldq, ldk, ldv;
    mmk_bf16 *o;
    int64_t ldo;
    float scale;
    int causal;
    const int32_t *cu_seqlens_q, *cu_seqlens_k;
    int n_seqs;
    int max_seq_q; /* the longest sequence of cu_seqlens_q (sizes the grid) */
} mmk_attention;
int mmk_attention_run(int dev, mmk_stream s, const mmk_attention *a, mm_error *err);
/* Which attention kernel mmk_attention_run would use on `dev` ("sm90-wgmma",
 * "sm80-mma"). MMH3_ATTN=sm80 forces the portable one. */
const char *mmk_attention_path(int dev);

/* ------------------------------------------------------------------ convolution
 * Direct convolutions with f32 accumulation; x, w, y share the dtype (bf16 or
 * f32), bias is f32 or NULL. Padding here is zeros; callers pad otherwise
 * (reflect, causal) beforehand. */
typedef struct mmk_conv3d {
    int n, cin, cout;
    int t, h, w;         /* input extent */
    int kt, kh, kw;
    int st, sh, sw;      /* strides */
    int pt, ph, pw;      /* zero padding on both sides */
    const void *x;       /* [n, cin, t, h, w] */
    const void *weight;  /* [cout, cin, kt, kh, kw] */
    const float *bias;   /* [cout] or NULL */
    void *y;             /* [n, cout, t', h', w'] */
    mm_dtype dtype;
} mmk_conv3d;
int mmk_conv3d_run(int dev, mmk_stream s, const mmk_conv3d *a, mm_error *err);

typedef struct mmk_conv1d {
    int n, cin, cout, len;
    int k, stride, pad, dilation;
    const void *x;      /* [n, cin, len] */
    const void *weight; /* [cout, cin, k] */
    const float *bias;
    void *y;            /* [n, cout, len'] */
    mm_dtype dtype;
} mmk_conv1d;
int mmk_conv1d_run(int dev, mmk_stream s, const mmk_conv1d *a, mm_error *err);

#ifdef __cplusplus
}
#endif

#endif
