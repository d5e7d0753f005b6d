/* Block-sparse attention (shared/spec/sparse.md §2–3): the routing
 * of 64-row query blocks to 64-row key blocks, and the attention that
 * computes the routed blocks exactly and the others through their key
 * centroid and value sum (Sol-Attn) or not at all (SubBlock top-k).
 *
 *   mm_sparse_route_blocks(ctx, &route, q, k, v, &rp);          // kc, vc, thresholds, block mask
 *   mm_sparse_attention(ctx, out, q, k, v, &route, &ap);
 *
 * Shapes: q, out [S, H, D], k, v [S, Hkv, D] (H a multiple of Hkv; q head h
 * reads kv head h / (H / Hkv)); self-attention over one sequence, non-causal,
 * last dims unit-stride, row and head strides free (the thirds of the DiT's
 * fused qkv buffer). NT = ceil(S / 64) blocks on both sides; the last block
 * holds len = S − 64 (NT − 1) rows.
 *
 * Routing (per query block i and head h; s2 = scale · log2 e):
 *   kc[n]    = bf16(mean of the k rows of block n)         (fp32 sum of bf16 values)
 *   vc[n]    = bf16(sum of the v rows of block n)
 *   q̄[i]     = mean of the valid q rows of block i         (fp32)
 *   colmean  = s2 · q̄[i] · kc[n]                           (fp32; the spec's mean over rows of the
 *                                                           block-mean logit, equal up to rounding)
 *   SOL      exact(i, n) = dense_q(i) ∨ colmean > thr(i) ∨ |i − n| ≤ band ∨ sink_kv(n), with
 *            thr = s2·q̄·μ + τ · sqrt(var + 1e-6) over the kc of the head (μ their mean;
 *            var = s2²·Σ q̄²σ² for "diag", s2²·(q̄ᵀ M2 q̄ − (q̄·μ)²) with M2 = kcᵀkc / NT for "exact")
 *   TOPK     exact(i, n) = dense_q(i) ∨ n among the k best blocks by the SubBlock score
 *            log2 Σ_{a,b} exp2(Qs[i,a] · Ks[n,b]) over 16-row sub-blocks (Qs = bf16(mean · s2),
 *            Ks = bf16(mean); sub-blocks without rows left out), k = min(NT, 8 · ceil(ceil(keep · NT) / 8));
 *            ties to the lower block; plus band and sink_kv when given
 *   FORCED   exact(i, n) = dense_q(i) ∨ |i − n| ≤ band ∨ sink_kv(n) ∨ hash(seed, h, i, n) < keep
 *            (benchmarks: a mask of known density, keep plus the band's and the sinks' share)
 * dense_q / sink_kv: the blocks that overlap one of the row ranges given.
 *
 * Attention, per row r of query block i (scores in log2 units, s = s2 · q_r · k):
 *   out[r] = (Σ_{exact n} Σ_{j ∈ n} 2^{s(r,j)} v_j + Σ_{other n} 2^{s2·q_r·kc_n} vc_n)
 *          / (Σ_{exact n} Σ_{j ∈ n} 2^{s(r,j)}     + Σ_{other n} len_n · 2^{s2·q_r·kc_n})
 * with the second sums only when `approximate` (Sol-Attn); without it the
 * unrouted blocks contribute nothing (top-k). fp32 statistics and sums, one
 * rounding of the output. The CPU twin keeps P in fp32; the CUDA kernels
 * round P to bf16 for the products (as FlashAttention does), so the two agree
 * within bf16 tolerance, not bit for bit.
 *
 * The route's tensors are allocated by mm_sparse_route_alloc on the context's
 * device and reused for every call of the same (S, H, Hkv, D); the caller owns
 * them (mm_sparse_route_free). */
#ifndef MMH3_BACKEND_SPARSE_ATTN_H
#define MMH3_BACKEND_SPARSE_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/ops.h"

#define MM_SPARSE_BLOCK 64
#define MM_SPARSE_SUB 16       /* SubBlock's pooling granularity (n_q = n_k = 4) */
#define MM_SPARSE_MAX_RANGES 32 /* row ranges per list (text, references, soundtracks, target audio) */

typedef struct mm_row_range {
    int64_t begin, end; /* rows [begin, end) */
} mm_row_range;

typedef enum mm_sparse_policy {
    MM_SPARSE_SOL = 0, /* threshold routing, centroid approximation of the rest */
    MM_SPARSE_TOPK,    /* SubBlock: the k best blocks, the rest dropped */
    MM_SPARSE_FORCED,  /* a pseudo-random mask of a chosen density (benchmarks, tests) */
} mm_sparse_policy;

typedef enum mm_sparse_thresh { MM_SPARSE_THRESH_DIAG = 0, MM_SPARSE_THRESH_EXACT } mm_sparse_thresh;

typedef struct mm_sparse_route_params {
    mm_sparse_policy policy;
    float scale;             /* softmax scale; 0: 1/sqrt(D) */
    float tau;               /* SOL: larger = higher threshold = fewer exact blocks */
    mm_sparse_thresh thresh; /* SOL */
    float keep;              /* TOPK: 1 − sparsity; FORCED: the density aimed at */
    int band;                /* |i − n| <= band is exact (Sol: 1); negative: no band */
    uint64_t seed;           /* FORCED */
    const mm_row_range *sink_kv; /* host arrays of at most MM_SPARSE_MAX_RANGES ranges each */
    int n_sink_kv;
    const mm_row_range *dense_q;
    int n_dense_q;
} mm_sparse_route_params;

typedef struct mm_sparse_route {
    int64_t rows, heads, heads_kv, head_dim; /* what it was allocated for */
    int64_t blocks, words;                   /* NT and ceil(NT / 32) */
    mm_tensor mask;  /* I32 [NT, H, words]: bit n % 32 of word n / 32 = key block n exact for (query block, head) */
    mm_tensor count; /* I32 [NT, H]: exact key blocks per (query block, head) */
    mm_tensor kc;    /* BF16 [NT, Hkv, D]: block means of k */
    mm_tensor vc;    /* BF16 [NT, Hkv, D]: block sums of v */
    mm_tensor thr;   /* F32 [NT, H]: SOL: the threshold (log2 units); TOPK: the k-th best score; FORCED: 0 */
} mm_sparse_route;

int mm_sparse_route_alloc(mm_sparse_route *r, mm_device dev, int64_t rows, int64_t heads, int64_t heads_kv,
                          int64_t head_dim, mm_error *err);
void mm_sparse_route_free(mm_sparse_route *r);

/* Fills route (allocated for q's and k's shapes). tally (optional, I64 [1]
 * on the context's device, or NULL): Σ count is added to it, so a caller can
 * total the exact pairs of many calls without waiting for each. */
int mm_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                    const mm_sparse_route_params *p, mm_tensor *tally);

typedef enum mm_sparse_mode {
    MM_SPARSE_EXACT = 0, /* bf16 products (the CPU twin: fp32) */
    MM_SPARSE_FAST,      /* 8-bit products where the GPU has that kernel (Hopper), else exact */
} mm_sparse_mode;

typedef struct mm_sparse_attn_params {
    float scale;      /* 0: 1/sqrt(D) */
    bool approximate; /* Sol-Attn: unrouted blocks through kc / vc; false: dropped */
    mm_sparse_mode mode;
} mm_sparse_attn_params;

int mm_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                        const mm_sparse_route *route, const mm_sparse_attn_params *p);

/* What mm_sparse_attention runs on ctx for bf16 [S, H, 128] views in `mode`
 * ("cpu", "sm80 portable", "sm90 exact", "sm90 fast", with the reason when
 * a faster kernel is not used). */
const char *mm_sparse_attention_kind(mm_ctx *ctx, mm_sparse_mode mode);

/* The blocks of a row range list as a per-block flag: flags[n] = 1 when
 * block n overlaps a range (flags has `blocks` entries). */
void mm_sparse_block_flags(const mm_row_range *r, int n, int64_t blocks, uint8_t *flags);

/* SubBlock's budget: k = min(NT, 8 · ceil(ceil(keep · NT) / 8)), at least 8 (or NT). */
int64_t mm_sparse_topk_budget(double keep, int64_t blocks);

/* FORCED's choice: block n is picked for (head h, query block i) when a
 * 24-bit hash of (seed, h, i, n) is below keep · 2^24 (the kernels compute
 * the same hash; the device test compares the masks bit for bit). */
static inline uint32_t mm_sparse_forced_hash(uint64_t seed, int64_t h, int64_t i, int64_t n)
{
    uint64_t x = seed ^ ((uint64_t)h * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i << 32) ^ (uint64_t)n;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (uint32_t)(x >> 40);
}
static inline uint32_t mm_sparse_forced_level(double keep)
{
    return keep <= 0 ? 0u : keep >= 1 ? 16777216u : (uint32_t)(keep * 16777216.0);
}

#endif
