/* mmk_fa3 — the Hopper attention of the DiT's hot path, beside the general
 * kernels of kernels/mmk.h: FlashAttention-3 in structure, for one packed
 * sequence, non-causal, head dim 128 (what every main block of the DiT
 * runs: S ≈ 38k rows, 56 heads). GQA: q head h reads kv head
 * h / (heads / heads_kv). The keys may be more (or fewer) than the queries
 * (seq_kv: the reference KV cache's forwards, whose queries are the rows
 * not cached and whose keys are those rows plus the cached ones). No causal
 * mask, no packed sequences: callers with those use mmk_attention_run.
 *
 * MMK_FA3_EXACT computes what mmk_attention_run computes — bf16 q, k, v,
 * fp32 scores and softmax statistics (base-2 exponentials with scale·log2 e
 * folded in), P rounded to bf16 for P·V, fp32 accumulation, one rounding of
 * the output — in a different summation order (192-key tiles).
 *
 * MMK_FA3_FAST (the DiT's fast mode) runs Q·Kᵀ in int8 and P·V in e4m3
 * (SageAttention-style): q quantized per (row, head) with s = amax/127, k
 * per (kv head, 128-key tile) after its per-channel mean over all keys is
 * subtracted (softmax-invariant), v smoothed the same way (the mean added
 * back to the output) with a per-channel e4m3 scale, P as e4m3 with an
 * exponent offset of 8, each key tile's P·V summed into a fresh fp32
 * accumulator, the softmax's row sums those of the e4m3 P (made on the
 * tensor cores). Its error against exact mode follows the budget of
 * tests/unit/test_fa3_fast_model.c (docs/PERFORMANCE.md): rel_l2 ≈
 * 0.03–0.05 on unstructured random inputs (the e4m3 P·V floor ≈ 0.037),
 * far less on attention with structure.
 *
 * Layout: q, k, v, o are bf16 [seq, heads, 128] views: row stride ld (a
 * multiple of 8 elements), heads 128 elements apart, 16-byte aligned — the
 * thirds of the DiT's fused qkv buffer.
 *
 * Needs an sm_90 device and sm_90a code in this build (mmk_fa3_usable).
 * Scratch (the transposed v, the quantized copies) comes from the caching
 * allocator and is returned when the launch is queued.
 */
#ifndef MMH3_KERNELS_MMK_FA3_H
#define MMH3_KERNELS_MMK_FA3_H

#include "kernels/mmk.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MMK_FA3_EXACT = 0, MMK_FA3_FAST = 1, MMK_FA3_MODES = 2 };

typedef struct mmk_fa3 {
    int seq, heads, heads_kv; /* seq: query rows (and key rows where seq_kv is 0) */
    int seq_kv;               /* key/value rows; 0: seq */
    const void *q, *k, *v;
    int64_t ldq, ldk, ldv;
    void *o;
    int64_t ldo;
    float scale; /* softmax scale, e.g. 1/sqrt(128) */
    int mode;    /* MMK_FA3_EXACT / MMK_FA3_FAST */
} mmk_fa3;

/* 1 when `dev` can run it (sm_90 device, sm_90a code in this build). */
int mmk_fa3_usable(int dev);
int mmk_fa3_run(int dev, mmk_stream s, const mmk_fa3 *a, mm_error *err);
const char *mmk_fa3_mode_name(int mode);

/* First-use self-check of a mode on `dev` against the portable attention
 * kernel (mmk_attention_run, portable = 1): two problems of 700 rows (4
 * key tiles of exact mode, 6 of fast mode, the last partial), 4 heads over 4 and over 2 kv heads, q/k/v
 * the thirds of one fused buffer as the DiT passes them, every output
 * written and finite, rel_l2 below 1e-2 (exact) or 0.08 (fast mode: twice
 * its error budget on these inputs). Runs once per device and mode (later
 * calls return the cached verdict), synchronizes the device's stream,
 * prints one line on stderr the first time. 1 = verified;
 * rel_l2 (may be NULL) receives the worse of the two errors. */
int mmk_fa3_verified(int dev, int mode, double *rel_l2);
/* The same self-check's third problem, queries ≠ keys (300 query rows over
 * 700 keys, the seq_kv path): 1 when it passed too. A separate verdict so
 * that a failure there keeps the equal-length kernel in use. */
int mmk_fa3_cross_verified(int dev, int mode);

#ifdef __cplusplus
}
#endif

#endif
