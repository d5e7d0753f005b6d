/* Ulysses attention for one rank of a sequence-parallel group: the rank
 * holds n_me rows of q, k and v for all H heads; attention needs all S rows
 * of some heads. So:
 *
 *   1. pack q, k, v by destination head group: send [3][N][n_me][H/N·D]
 *      (one strided copy per part);
 *   2. all-to-all: the rows of the rank's H/N heads arrive from every peer,
 *      in packed-row order: recv [3][S][H/N·D] — q, k, v of all S rows;
 *   3. attention over all S rows for H/N heads (the caller's SDPA, see
 *      mm_ulysses_set_sdpa: no padding exists, so nothing is masked);
 *   4. all-to-all back: rows [row_begin[p], row_begin[p+1]) of the result go
 *      to rank p; the rank gets its n_me rows for every head group;
 *   5. unpack into the caller's out [n_me, H, D] (one strided copy).
 *
 * Per block and rank that moves 3·n_me·A + n_me·A elements each way (A =
 * H·D): at 1344×768×124 over 8 GPUs ≈ 0.24 GB out and in per block.
 * Messages are posted on the compute stream (NCCL) so the host never waits;
 * see docs/MULTIGPU.md for the overlap plan.
 *
 * One rank (N = 1) has nothing to exchange: the hook is then just the SDPA
 * on the caller's views, with no buffers, copies or messages (the plain
 * forward, bit for bit). exchange_self keeps steps 1-5 at N = 1,
 * so that one GPU can still check the pack/exchange/unpack path.
 */
#ifndef MMH3_PARALLEL_ULYSSES_H
#define MMH3_PARALLEL_ULYSSES_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"
#include "core/error.h"
#include "parallel/comm.h"
#include "parallel/partition.h"

typedef struct mm_ulysses mm_ulysses;

/* Buffers and message plans for one request on one rank (dtype: that of
 * q/k/v, bf16 in the DiT). */
int mm_ulysses_create(mm_ulysses **out, mm_comm *comm, const mm_sp_split *split, int head_dim, mm_dtype dtype,
                      bool exchange_self, mm_error *err);
void mm_ulysses_free(mm_ulysses *u);
size_t mm_ulysses_bytes(const mm_ulysses *u);

/* The attention over the rank's share (out, q, k, v: [rows, heads, D]
 * views; the contract of mm_dit_attention_fn). Default (fn NULL):
 * mm_attention. The sequence-parallel DiT passes its request's own SDPA
 * (mm_dit_sdpa), so the share runs the kernel the plain forward picks (FA3
 * on Hopper, fast mode) instead of the portable-interface one. */
typedef int (*mm_ulysses_sdpa_fn)(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                                  const mm_tensor *v);
void mm_ulysses_set_sdpa(mm_ulysses *u, mm_ulysses_sdpa_fn fn, void *user);

/* Stage marks for benchmarks (like mm_dit_profile): mark(user, stage) is
 * called on the host before each stage of every call ("Ulysses pack q/k/v",
 * "Ulysses all-to-all (heads)", ...), in stream order; NULL turns it off. */
void mm_ulysses_set_profile(mm_ulysses *u, void (*mark)(void *user, const char *stage), void *user);

/* The DiT's attention hook (mm_dit_attention_fn; user = the mm_ulysses):
 * q, k, v, out [n_me, H, D] views. Failures are recorded in ctx. */
int mm_ulysses_attention(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                         const mm_tensor *v);

#endif
