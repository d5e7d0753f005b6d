/* mmk_sparse — block-sparse attention on the GPU, beside
 * kernels/mmk.h: the routing kernels (block summaries, thresholds, the
 * per-(query block, head) bitmask of exact key blocks) and the attention
 * that walks only those blocks and adds Sol-Attn's centroid term for the
 * rest. Semantics: src/backend/sparse_attn.h (the CPU twin defines them);
 * kernels/attn_sparse.cu says how the Hopper kernel maps 64-row blocks onto
 * its tiles.
 *
 * Layout: q, k, v bf16 [seq, heads, 128] views (row stride ld, a multiple of
 * 8 elements; heads 128 apart; 16-byte aligned), one sequence, non-causal,
 * GQA allowed. Route buffers: mask uint32 [NT, heads, words], count int32
 * [NT, heads], kc / vc bf16 [NT, heads_kv, 128], thr f32 [NT, heads], all
 * contiguous. */
#ifndef MMH3_KERNELS_MMK_SPARSE_H
#define MMH3_KERNELS_MMK_SPARSE_H

#include "kernels/mmk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MMK_SPARSE_MAX_RANGES 32

enum { MMK_SPARSE_SOL = 0, MMK_SPARSE_TOPK = 1, MMK_SPARSE_FORCED = 2 };

typedef struct mmk_sparse_qkv {
    int seq, heads, heads_kv; /* head dim 128 */
    const void *q, *k, *v;
    int64_t ldq, ldk, ldv;
    float scale; /* softmax scale (> 0) */
} mmk_sparse_qkv;

typedef struct mmk_sparse_route_args {
    mmk_sparse_qkv x;
    int policy;
    float tau;
    int thresh_exact; /* SOL: the full second moment instead of the diagonal one */
    float keep;       /* TOPK: share kept; FORCED: density */
    int band;         /* negative: none */
    uint64_t seed;
    int n_sink, n_dense;
    int64_t sink[MMK_SPARSE_MAX_RANGES][2], dense[MMK_SPARSE_MAX_RANGES][2]; /* row ranges [begin, end) */
    int blocks, words;
    uint32_t *mask;
    int32_t *count;
    void *kc, *vc;
    float *thr;
    long long *tally; /* += Σ count, or NULL */
} mmk_sparse_route_args;
int mmk_sparse_route_run(int dev, mmk_stream s, const mmk_sparse_route_args *a, mm_error *err);

/* Which attention kernel: the portable one (mma.sync, sm_80+), Hopper's in
 * bf16, Hopper's with int8 q·k and e4m3 p·v (fast mode: fa3 fast mode's
 * numerics, kernels/mmk_fa3.h); AUTO picks the fastest this device has
 * verified for `fast`. */
enum { MMK_SPARSE_AUTO = -1, MMK_SPARSE_PORTABLE = 0, MMK_SPARSE_SM90 = 1, MMK_SPARSE_SM90_FAST = 2, MMK_SPARSE_KERNELS = 3 };

typedef struct mmk_sparse_attn_args {
    mmk_sparse_qkv x;
    void *o;
    int64_t ldo;
    const uint32_t *mask;
    const int32_t *count;
    const void *kc, *vc;
    int blocks, words;
    int approximate;
    int kernel; /* MMK_SPARSE_* (AUTO: by `fast`) */
    int fast;
} mmk_sparse_attn_args;
int mmk_sparse_attn_run(int dev, mmk_stream s, const mmk_sparse_attn_args *a, mm_error *err);

/* 1 when `dev` has that kernel (sm_90 and sm_90a code for the Hopper ones). */
int mmk_sparse_usable(int dev, int kernel);
/* First-use self-check of a Hopper kernel against the portable one on two
 * problems (700 rows: ragged tail, partial groups, every item kind; Sol with
 * sinks and dense query blocks, and top-k without approximation): rel_l2 below
 * 1e-2 (bf16) or 0.08 (8-bit). Once per device and kernel; one stderr line.
 * 1 = verified; rel_l2 may be NULL. */
int mmk_sparse_verified(int dev, int kernel, double *rel_l2);
/* What AUTO runs on `dev` for fast / exact, e.g. "sm90 bf16 (self-check rel_l2 0.0021)". */
const char *mmk_sparse_kind(int dev, int fast);

#ifdef __cplusplus
}
#endif

#endif
