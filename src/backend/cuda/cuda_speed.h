/* The DiT's Hopper kernels on tensors — the mm_tensor face of
 * kernels/mmk_fa3.h and kernels/mmk_qgemm.h, beside backend/ops.h — and
 * which of them run.
 *
 * Attention (fa3): q, out bf16 [S, H, 128] and k, v [S_kv, H_kv, 128] views
 * on the context's GPU (rows a multiple of 8 elements apart, heads 128
 * apart, 16-byte aligned; e.g. the thirds of a fused qkv buffer), one
 * sequence, non-causal, GQA allowed, S_kv = S or not (the reference KV
 * cache: fewer queries than keys; the policy below says whether that
 * case passed its self-check), scale 1/sqrt(128) when scale = 0. Modes:
 *   MM_FA3_EXACT   bf16 products: what mm_attention computes, in another
 *                  summation order;
 *   MM_FA3_FAST    int8 q·k (per-row q, smoothed per-tile k) and e4m3 p·v
 *                  (smoothed per-channel v): the DiT's fast mode, whose
 *                  error follows the budget of
 *                  tests/unit/test_fa3_fast_model.c.
 *
 * int8 GEMM (qgemm): the ConvRot linear with its epilogue fused,
 * y = bf16(float(q_x·q_wᵀ)·(s_x·s_w)), or with gate: y = bf16(y + gate[idx]·
 * bf16(...)), bit for bit what mm_gemm_i8_scaled (then mm_gated_residual)
 * computes. q_x I8 [R, K], q_w I8 [N, K] (rows 16-byte aligned, K % 16 == 0),
 * s_x F32 [R], s_w F32 [N] (or [N, 1]) contiguous, y bf16 [R, N] (N % 8 ==
 * 0); gate F32 [T, N] (row stride even, 8-byte aligned) with idx I32 [R], or
 * NULL.
 *
 * fits() says whether this GPU, build and these tensors run a kernel; the
 * calls record failures in the context (mm_ctx_fail) and are asynchronous
 * on its stream. Builds without CUDA: fits() is false, the calls fail.
 */
#ifndef MMH3_BACKEND_CUDA_CUDA_SPEED_H
#define MMH3_BACKEND_CUDA_CUDA_SPEED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"

typedef enum mm_fa3_mode { MM_FA3_EXACT = 0, MM_FA3_FAST = 1 } mm_fa3_mode;

bool mm_cuda_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
int mm_cuda_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                          float scale, mm_fa3_mode mode);

bool mm_cuda_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w);
int mm_cuda_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx);

/* Which of these kernels the DiT runs on CUDA device `dev`, by the kernel
 * policy (backend/kernel_policy.h):
 *   attention (exact mode)  fa3 bf16 where the GPU has it and its first-use
 *                           self-check against the portable kernel passes;
 *                           mm_attention otherwise or with the policy's
 *                           portable DiT attention (dit_fa3 off).
 *   fast mode               fa3 MM_FA3_FAST after its own self-check; what
 *                           exact mode runs where there is no such kernel,
 *                           with dit_fa3 off, or with MMH3_DIT_FAST=off.
 *   int8 linears            the sm90 GEMM with the fused epilogue after its
 *                           self-check (bit for bit the cuBLASLt path);
 *                           cuBLASLt + the epilogue kernel otherwise or with
 *                           dit_qgemm off.
 * Self-checks run at the first call that needs them (fast mode's only when
 * want_fast), once per device and process, each announced by one stderr
 * line; a failed one falls back. The texts say what runs and why. */
typedef struct mm_cuda_speed_paths {
    bool fa3;              /* exact-mode attention through fa3 bf16 */
    bool fast_fa3;         /* fast mode through fa3 MM_FA3_FAST (false: as exact mode) */
    bool fa3_cross;        /* ... and those with fewer (more) queries than keys too */
    bool fast_fa3_cross;
    bool qgemm;            /* int8 linears through the sm90 GEMM */
    char attention[200], fast[200], gemm[200];
} mm_cuda_speed_paths;
void mm_cuda_speed_paths_get(int dev, bool want_fast, mm_cuda_speed_paths *out);

/* The kernel mm_attention runs on device `dev` for bf16 head dim 128:
 * "sm90p-wgmma-pipelined (...)" or "sm80-mma" (kernels/attention.cu; runs
 * the Hopper kernel's self-check the first time). */
const char *mm_cuda_attention_path(int dev);

/* For `mmh3 check`: one line naming every attention and GEMM path device
 * `dev` uses (mm_attention's kernel, the DiT's exact and fast attention,
 * its int8 linears), running the self-checks that have not run yet. */
void mm_cuda_speed_describe(int dev, char *out, size_t n);

#endif
