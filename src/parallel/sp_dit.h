/* The DiT over N devices, sequence parallel (Ulysses): every rank holds the
 * whole model and S/N rows of the packed sequence. It runs the row-local
 * parts of each block — norms, modulation, the four linears, the MLP, the
 * residuals — on its rows, and attention over all S rows for H/N heads
 * (parallel/ulysses.h); the velocities are gathered back in row order.
 *
 *   mm_sp_dit_load(&sp, path, ctx0, &opts, NULL, err);      // one replica per rank
 *   mm_sp_request_begin(sp, &layout, &text, &req, err);    // refiner, per-rank layouts
 *   for each step:
 *       mm_sp_forward(req, row_t, &video_rows, &audio_rows, &v_video, &v_audio, err);
 *   mm_sp_request_end(req);
 *
 * Same contract as dit.h's request/forward: the caller's tensors live on
 * ctx0's device (rank 0 runs there, on the calling thread; ranks 1..N-1 run
 * on threads of their own, one per device). Every rank computes exactly what
 * the one-device forward computes for its rows: the row-local ops see the
 * same inputs, and attention sees the same keys (the split pads nothing).
 * Each rank's attention share runs its request's own SDPA (mm_dit_sdpa: FA3
 * on Hopper, fast mode when set), the kernel the plain forward runs.
 * N = 1 is the plain forward: no exchange, no staging (the caller's tensors
 * go straight in); mm_sp_options.exchange_self keeps the pack / exchange with
 * itself / unpack steps, which is how one GPU checks that path against the
 * plain forward (parallel/ulysses.h).
 *
 * Inputs and outputs cross between devices through host memory (≈ 15 MB
 * each way per step at 1344×768×124), so no step depends on peer copies.
 */
#ifndef MMH3_PARALLEL_SP_DIT_H
#define MMH3_PARALLEL_SP_DIT_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"
#include "core/error.h"
#include "model/dit/dit.h"
#include "parallel/comm.h"
#include "parallel/sp_options.h"


typedef struct mm_sp_dit mm_sp_dit;
typedef struct mm_sp_request mm_sp_request;

int mm_sp_dit_load(mm_sp_dit **out, const char *path, mm_ctx *ctx0, const mm_sp_options *opts,
                   const mm_dit_config_overrides *ov, mm_error *err);
void mm_sp_dit_free(mm_sp_dit *sp);
int mm_sp_dit_ranks(const mm_sp_dit *sp);
const mm_dit_config *mm_sp_dit_config(const mm_sp_dit *sp);
/* Device bytes of one replica's weights. */
size_t mm_sp_dit_weight_bytes(const mm_sp_dit *sp);
/* Device bytes of one rank's activations for a request of `rows` packed rows
 * (text_rows of them text) over `ranks` GPUs, for the memory plan: the DiT
 * workspace over the largest rank's share of the rows (text shared out in
 * proportion) and the Ulysses buffers, which hold all S rows of the rank's
 * H/N heads. Fails when the rows or heads do not split over `ranks`. */
int mm_sp_rank_work_bytes(const mm_dit_config *c, int64_t rows, int64_t text_rows, int ranks, uint64_t *out,
                          mm_error *err);
/* The model replica of a rank (owned by sp; for its configuration, or as the
 * "is loaded" marker of code written for one mm_dit). */
mm_dit *mm_sp_dit_replica(mm_sp_dit *sp, int rank);
/* "4 ranks on cuda:0..3, nccl (NCCL 2.28.9 ...)". */
void mm_sp_dit_describe(const mm_sp_dit *sp, char *buf, size_t n);

int mm_sp_request_begin(mm_sp_dit *sp, const mm_dit_layout *layout, const mm_tensor *text, mm_sp_request **out,
                        mm_error *err);
void mm_sp_request_end(mm_sp_request *req);
/* Workspace + exchange buffers of the largest rank. */
size_t mm_sp_request_bytes(const mm_sp_request *req);

/* Fast mode (mm_dit_request_set_fast) on every rank's request. */
int mm_sp_request_set_fast(mm_sp_request *req, bool fast, mm_error *err);
/* Step caching on every rank's request (mm_dit_request_set_step_cache): the
 * ranks add their sums before each decision (one all-reduce of a few
 * doubles), so they skip the same forwards. */
int mm_sp_request_set_step_cache(mm_sp_request *req, const mm_step_cache_config *c, int forwards, mm_error *err);
void mm_sp_request_set_step(mm_sp_request *req, int step, int total);
/* A rank's record of what was skipped (NULL without a step cache). */
const mm_step_cache_report *mm_sp_request_step_cache_report(const mm_sp_request *req, int rank);
/* What rank 0's attention share runs ("fa3-bf16", ...: mm_dit_attention_kind
 * of its request without the hook), into buf. */
void mm_sp_request_attention_kind(const mm_sp_request *req, char *buf, size_t n);
/* Stage timing of main block p->block on rank 0 (it runs on the calling
 * thread, on ctx0's stream): the DiT's stage marks (mm_dit_profile) and,
 * inside its attention stage, the Ulysses ones ("Ulysses pack q/k/v",
 * "Ulysses all-to-all (heads)", ...; for every block — the caller keeps
 * those that fall inside the profiled block's "attention" stage). NULL
 * turns it off. */
void mm_sp_request_set_profile(mm_sp_request *req, const mm_dit_profile *p);

/* One forward of the whole sequence: video/audio rows in, velocities out
 * (f32, contiguous, layout order). With N > 1 they may be on any device ctx0
 * copies from (they cross through the host); with N = 1 they go straight in
 * and must be on ctx0's device (refused otherwise). */
int mm_sp_forward(mm_sp_request *req, const float *row_t, const mm_tensor *video_rows, const mm_tensor *audio_rows,
                  mm_tensor *v_video, mm_tensor *v_audio, mm_error *err);

#endif
