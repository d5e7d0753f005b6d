/* mmk_fa3 — the Hopper attention of the DiT's hot path (issue 9), beside the
 * general kernels of kernels/mmk.h: FlashAttention-3 in structure, for one
 * packed sequence, non-causal, head dim 128 (what every main block of the
 * DiT runs: S ≈ 38k rows, 56 heads).
 *
 * Exact mode (fp8 = 0) computes what mmk_attention_run computes — bf16 q, k,
 * v, fp32 scores and softmax statistics (base-2 exponentials with
 * scale·log2 e folded in), P rounded to bf16 for P·V, fp32 accumulation, one
 * rounding of the output — in a different summation order.
 *
 * Fast mode (fp8 = 1) runs both products in e4m3 (SageAttention-style
 * scaling): q and k quantized per (head, 128-row block) with s = amax/448, v
 * per (head, channel) over all keys, P as e4m3 with an offset of 2^8 (so
 * small probabilities keep precision; the offset cancels in the
 * normalization), each key tile's P·V summed into a fresh fp32 accumulator
 * before it joins the running output (the fp8 tensor-core sum is not full
 * fp32). Its error against exact mode is measured, not bounded.
 *
 * Layout: q, k, v, o are bf16 [seq, heads, 128] views: row stride ld (a
 * multiple of 8 elements), heads 128 elements apart, 16-byte aligned — the
 * thirds of the DiT's fused qkv buffer. GQA: q head h reads kv head
 * h / (heads / heads_kv).
 *
 * Needs an sm_90 device and sm_90a code in this build (mmk_fa3_usable).
 * Scratch (the transposed v, the e4m3 copies) comes from the caching
 * allocator and is returned when the launch is queued.
 */
#ifndef MMH3_KERNELS_MMK_FA3_H
#define MMH3_KERNELS_MMK_FA3_H

#include "kernels/mmk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mmk_fa3 {
    int seq, heads, heads_kv;
    const void *q, *k, *v;
    int64_t ldq, ldk, ldv;
    void *o;
    int64_t ldo;
    float scale; /* softmax scale, e.g. 1/sqrt(128) */
    int fp8;     /* 0: exact (bf16 products), 1: fast (e4m3 products) */
    int pingpong; /* -1: default (on), 0: off, 1: on — the two consumer warpgroups take turns on the tensor cores */
} mmk_fa3;

/* 1 when `dev` can run it (sm_90 device, sm_90a code in this build). */
int mmk_fa3_usable(int dev);
int mmk_fa3_run(int dev, mmk_stream s, const mmk_fa3 *a, mm_error *err);

#ifdef __cplusplus
}
#endif

#endif
