/* mmk_fa3 — the Hopper attention of the DiT's hot path (issue 9), beside the
 * general kernels of kernels/mmk.h: FlashAttention-3 in structure, for one
 * packed sequence, non-causal, head dim 128 (what every main block of the
 * DiT runs: S ≈ 38k rows, 56 heads). GQA: q head h reads kv head
 * h / (heads / heads_kv). The keys may be more (or fewer) than the queries
 * (seq_kv: the reference KV cache's forwards, whose queries are the rows
 * not cached and whose keys are those rows plus the cached ones). No causal
 * mask, no packed sequences: callers with those use mmk_attention_run.
 *
 * MMK_FA3_EXACT computes what mmk_attention_run computes — bf16 q, k, v,
 * fp32 scores and softmax statistics (base-2 exponentials with scale·log2 e
 * folded in), P rounded to bf16 for P·V, fp32 accumulation, one rounding of
 * the output — in a different summation order.
 *
 * MMK_FA3_FAST (the DiT's fast mode) runs Q·Kᵀ in int8 and P·V in e4m3
 * (SageAttention-style): q quantized per (row, head) with s = amax/127, k
 * per (kv head, 128-key tile) after its per-channel mean over all keys is
 * subtracted (softmax-invariant), v smoothed the same way (the mean added
 * back to the output) with a per-channel e4m3 scale, P as e4m3 with an
 * exponent offset of 8, each key tile's P·V summed into a fresh fp32
 * accumulator. MMK_FA3_FAST_QK keeps the int8 Q·Kᵀ and runs P·V in bf16
 * (more accurate, less fast). Their error against exact mode follows the
 * budget of tests/unit/test_fa3_fast_model.c (docs/PERFORMANCE.md):
 * rel_l2 ≈ 0.03–0.05 on unstructured random inputs (the e4m3 P·V floor
 * ≈ 0.037), far less on attention with structure.
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

enum { MMK_FA3_EXACT = 0, MMK_FA3_FAST = 1, MMK_FA3_FAST_QK = 2, MMK_FA3_MODES = 3 };

typedef struct mmk_fa3 {
    int seq, heads, heads_kv; /* seq: query rows (and key rows where seq_kv is 0) */
    int seq_kv;               /* key/value rows; 0: seq */
    const void *q, *k, *v;
    int64_t ldq, ldk, ldv;
    void *o;
    int64_t ldo;
    float scale;  /* softmax scale, e.g. 1/sqrt(128) */
    int mode;     /* MMK_FA3_EXACT / _FAST / _FAST_QK */
    int pingpong; /* -1: default (on), 0: off, 1: on — the two consumer warpgroups take turns on the tensor cores */
    int variant;  /* 0: the mode's variant as mmk_fa3_env_variant says (its default unless the environment
                     turns bits on or off; with ping-pong off the plain kernel); MMK_FA3_OPT_SET | bits: exactly
                     those (an error where not built: mmk_fa3_variant_built) */
} mmk_fa3;

/* Kernel variants (issue 9), built with ping-pong:
 *   MMK_FA3_OPT_RESCALE (exact; MMH3_FA3_RESCALE): conditional rescaling —
 *     a row's running max (and with it O and l) moves only when a tile's
 *     max exceeds it by more than 8 (log2 units), decided per warp by a
 *     vote; exact in real arithmetic, P ≤ 2⁸ in bf16 loses nothing.
 *     The default in session 4 (63.6 ms against 65.0); no gain at 192 keys.
 *   MMK_FA3_OPT_LEAN (fast; MMH3_FA3_LEAN): the softmax's row sums on the
 *     tensor cores (8 rows of ones after each e4m3 Vᵀ tile: P·V at N = 136,
 *     the sums of the e4m3 P the output is weighed with) and the int32 →
 *     float conversion's bias folded into the exponent's FMA — 128 fewer
 *     ALU/FMA instructions per thread and key tile, the work that bounds
 *     fast mode. Default (48.6 ms against 53.3).
 *   MMK_FA3_OPT_KEYS176, MMK_FA3_OPT_KEYS192 (exact; MMH3_FA3_KEYS=176 or
 *     192, 128 for neither): key tiles of 176 or 192 keys instead of 128
 *     (176 is FlashAttention-3's width for head dim 128): m64n176/n192
 *     Q·Kᵀ products, 11 or 12 P·V k-steps per tile, 27–33% fewer softmax
 *     passes and stage hand-offs per row; alone or with conditional
 *     rescaling, one width at a time. 192 is the default (session 5: 62.9
 *     ms against 65.0 with rescaling at 128 keys, interleaved runs).
 * MMH3_FA3_SLEEP (benchmarks; 0-3, unset: the mode's default) picks which
 * mbarrier waits sleep in try_wait: 1 the producer's, 2 the consumers';
 * the outputs are the same bits whichever (a device test says so).
 * MMH3_FA3_RESCALE=0 / MMH3_FA3_LEAN=0 / MMH3_FA3_KEYS=128 run the plain kernels. */
enum {
    MMK_FA3_OPT_RESCALE = 1,
    MMK_FA3_OPT_LEAN = 2,
    MMK_FA3_OPT_KEYS176 = 4,
    MMK_FA3_OPT_KEYS192 = 8,
    MMK_FA3_OPT_ALL = 15,
    MMK_FA3_OPT_SET = 1 << 8
};

/* The variant bits `mode` runs with ping-pong: its default, with the bits
 * MMH3_FA3_RESCALE, MMH3_FA3_LEAN set ("1") or cleared ("0"; unset or
 * empty: the default's) and the key tile width of MMH3_FA3_KEYS (128, 176,
 * 192; unset or empty: the default's), of those the mode has; -1 for any
 * other value or mode. */
int mmk_fa3_env_variant(int mode);
/* 1 when the variant bits are built for this mode and schedule (pingpong:
 * 0 off, else on); 0 always is. */
int mmk_fa3_variant_built(int mode, int pingpong, int variant);
/* What mmk_fa3_env_variant(mode) names, for messages: "" (the plain
 * kernel), " +conditional rescaling", " lean", " 176-key tiles" (and
 * combinations), or " (invalid MMH3_FA3_* variant)". */
void mmk_fa3_variant_desc(int mode, char *out, size_t n);

/* 1 when `dev` can run it (sm_90 device, sm_90a code in this build). */
int mmk_fa3_usable(int dev);
int mmk_fa3_run(int dev, mmk_stream s, const mmk_fa3 *a, mm_error *err);
const char *mmk_fa3_mode_name(int mode);

/* First-use self-check of a mode (in the variant mmk_fa3_env_variant names;
 * an invalid environment fails it) on `dev` against the portable attention
 * kernel (mmk_attention_run, portable = 1): two problems of 700 rows (six
 * key tiles, the last partial), 4 heads over 4 and over 2 kv heads, q/k/v
 * the thirds of one fused buffer as the DiT passes them, every output
 * written and finite, rel_l2 below 1e-2 (exact) or 0.08 (fast modes: twice
 * their error budget on these inputs). Runs once per device, mode and
 * variant (later calls return the cached verdict), synchronizes the
 * device's stream, prints one line on stderr the first time. 1 = verified;
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
