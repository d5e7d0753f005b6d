/* The MiniMax-H3 diffusion transformer: load once, then per request build the
 * text-side state (token refiner, rotary tables, index maps, workspace) and
 * run one forward per denoising step.
 *
 *   mm_dit_load(&dit, path, ctx, NULL, err);
 *   mm_dit_request_begin(dit, ctx, &layout, &text, NULL, &req, err);   // refiner runs here, once
 *   for each step:
 *       mm_dit_forward(req, row_t, &video_rows, &audio_rows, &v_video, &v_audio, err);
 *   mm_dit_request_end(req);
 *
 * Precision follows the reference (dit.md §3.4, §4): bf16 residual stream and
 * block activations, W8A8 ConvRot linears, f32 islands for the patch
 * projections, the AdaLN table/projections, the rotary angles and the output
 * heads. Activations live in one workspace per request, reused by every
 * block; nothing is allocated per block or per step.
 *
 * Ownership: the model owns its weights (views into the checkpoint mapping on
 * the CPU, device copies on CUDA) and keeps the checkpoint open; a request
 * owns its workspace; callers own the tensors they pass.
 */
#ifndef MMH3_MODEL_DIT_DIT_H
#define MMH3_MODEL_DIT_DIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/dit/config.h"
#include "model/dit/layout.h"
#include "model/dit/step_cache.h"
#include "model/lora/lora.h"
#include "model/sparse/sparse.h"

typedef struct mm_dit mm_dit;
typedef struct mm_dit_request mm_dit_request;

int mm_dit_load(mm_dit **out, const char *path, mm_ctx *ctx, const mm_dit_config_overrides *ov, mm_error *err);
void mm_dit_free(mm_dit *dit);
const mm_dit_config *mm_dit_get_config(const mm_dit *dit);
/* Device bytes the weights occupy, as the allocator hands them out (0 on
 * the CPU, where they stay mapped, unless own_cpu_weights). */
size_t mm_dit_weight_bytes(const mm_dit *dit);

/* Where the main blocks live (backend/memplan.h decides it). Streamed
 * blocks stay in pinned host memory and are copied into one of two device
 * slots just before they run, the next one's copy overlapping the current
 * block (stream.c); the forward computes the same bits either way. */
typedef struct mm_dit_residency {
    const bool *stream; /* [n = layers]: blocks to stream (block 0 may not); NULL: none */
    int n;
    /* CPU only: every resident weight copied into allocated memory instead
     * of viewed in the file's mapping, so that the CPU's accounting (and a
     * simulated device, backend/device.h) sees the weights as a GPU would. */
    bool own_cpu_weights;
} mm_dit_residency;
int mm_dit_load_ex(mm_dit **out, const char *path, mm_ctx *ctx, const mm_dit_config_overrides *ov,
                   const mm_dit_residency *res, mm_error *err);
int mm_dit_streamed_blocks(const mm_dit *dit);

/* Sizes for the memory plan, from the checkpoint's header (no weights
 * read): the device bytes mm_dit_load would allocate outside the main
 * blocks (*fixed) and for each block (block[0..layers), at most max_blocks),
 * each tensor rounded as the allocator rounds it; and the configuration. */
int mm_dit_file_sizes(const char *path, uint64_t *fixed, uint64_t *block, int max_blocks, mm_dit_config *cfg,
                      mm_error *err);
/* The device bytes mm_dit_request_begin allocates for a request of `rows`
 * rows, `text_rows` of them text, on a GPU (cuda: the fused block's extra
 * table) or the simulated CPU device: the workspace, the layout's tables
 * and the refined text, each rounded as the allocator rounds it. */
uint64_t mm_dit_request_bytes_for(const mm_dit_config *c, int64_t rows, int64_t text_rows, bool cuda);

/* Intermediates for bring-up and conformance: called with a tensor on the
 * compute device that is only valid during the call. Names follow the kit:
 * "condition_proj_out", "refiner_out" [L, H]; "block0_in", "block0_out",
 * "blocks_out" [S, H] (bf16); "temb" [M, time_dim], "block0_adaln"
 * [3M, 6, H], "final_adaln" [M, 2, H] (f32); "rope_cos", "rope_sin"
 * [S, rope_dim] (f32, before the bf16 rounding). */
typedef struct mm_dit_debug {
    void (*capture)(void *user, const char *name, const mm_tensor *t);
    void *user;
} mm_dit_debug;

/* Per-request state for a layout and its text. text: [L, text_dim] (any float
 * dtype, any device; rounded to bf16 as the reference does). */
int mm_dit_request_begin(mm_dit *dit, mm_ctx *ctx, const mm_dit_layout *layout, const mm_tensor *text,
                         const mm_dit_debug *dbg, mm_dit_request **out, mm_error *err);
void mm_dit_request_end(mm_dit_request *req);
/* Workspace bytes of the request (device memory besides the weights). */
size_t mm_dit_request_bytes(const mm_dit_request *req);

/* Hooks for running one forward over several devices (src/parallel/: each
 * device runs a request over its own rows of the packed sequence). */
/* Replaces the SDPA of the main blocks: q, k, v and out are [rows, heads,
 * head_dim] views of the request's rows (q and k already normalized and
 * rotated). Reports failures through the ctx (mm_ctx_fail); returns 0/-1. */
typedef int (*mm_dit_attention_fn)(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                                   const mm_tensor *v);
/* Sums n host values over every rank of the group, in place, to the same
 * bits on every rank (the step cache's decision, step_cache.h). 0 / -1. */
typedef int (*mm_dit_allreduce_fn)(void *user, mm_ctx *ctx, double *values, int n, mm_error *err);
typedef struct mm_dit_request_opts {
    /* [layout text rows, hidden] bf16, any device: text already through
     * condition_proj and the token refiner (mm_dit_refine_text); the `text`
     * argument is then ignored and nothing runs on it. */
    const mm_tensor *refined_text;
    mm_dit_attention_fn attention; /* NULL: mm_attention over the request's rows */
    void *attention_user;
    /* Fast mode: the main blocks' attention in e4m3 with per-block
     * scales where the GPU runs that kernel (Hopper), exact elsewhere. */
    bool fast;
    /* The request holds some rows of a sequence-parallel group: the step
     * cache's sums go through this before each decision (NULL: all rows are
     * here, nothing to reduce). */
    mm_dit_allreduce_fn allreduce;
    void *allreduce_user;
    /* LoRA adapters (model/lora/lora.h; at most MM_LORA_MAX_USES), each
     * applied with its strength as a separate low-rank branch of every linear
     * it adapts — never merged into the weights (docs/LORA.md). Every handle
     * must be uploaded to the request's device (mm_lora_upload) and fit the
     * model (mm_lora_fit runs here too); the caller keeps them alive until
     * mm_dit_request_end. AdaLN pairs and PDD head banks apply through the
     * AdaLN path (mm_dit_set_silu_grid, mm_dit_request_set_head_weights);
     * time-embedder pairs and FastVideo dense deltas are refused with the
     * reason. */
    const mm_lora_use *loras;
    int n_loras;
    /* Sparse attention (NULL: dense): the main blocks' SDPA
     * through backend/sparse_attn.h as the preset says — its sinks and dense
     * queries from the layout's row roles, dense forwards and blocks, the τ
     * of each forward (mm_dit_request_set_step). An attention hook takes
     * precedence (the hook owns the attention); the refiner stays dense. */
    const mm_sparse_config *sparse;
} mm_dit_request_opts;

/* mm_dit_request_begin with hooks (opts may be NULL). */
int mm_dit_request_begin_ex(mm_dit *dit, mm_ctx *ctx, const mm_dit_layout *layout, const mm_tensor *text,
                            const mm_dit_request_opts *opts, const mm_dit_debug *dbg, mm_dit_request **out,
                            mm_error *err);
/* condition_proj + token refiner of a whole text [L, text_dim] (any float
 * dtype, any device) into out [L, hidden] bf16 on ctx's device (allocated by
 * the caller): what mm_dit_request_begin computes once per request. */
int mm_dit_refine_text(mm_dit *dit, mm_ctx *ctx, const mm_tensor *text, mm_tensor *out, mm_error *err);
/* The same with a request's adapters (their refiner and condition_proj
 * pairs apply; see mm_dit_request_opts.loras). */
int mm_dit_refine_text_ex(mm_dit *dit, mm_ctx *ctx, const mm_tensor *text, const mm_lora_use *loras, int n_loras,
                          mm_tensor *out, mm_error *err);

/* AdaLN adapters on the pruned base (docs/LORA.md). Pairs trained on the
 * full model (A [r, 2688]: Larry's Turbo, PDD, FlashGen) read SiLU(temb(t))
 * of its time MLP, which the pruned file does not carry: this loads it from a
 * grid file (tensor silu_t_emb_grid [points, width], float, sampled at
 * t = k/(points − 1): Larry's h3_silu_temb_grid.safetensors or `mmh3 convert
 * --silu-temb-grid`), kept on the host with the model. Pairs trained on the
 * pruned base (A [r, time_dim]) read the table row and need no grid. */
int mm_dit_set_silu_grid(mm_dit *dit, const char *path, mm_error *err);
bool mm_dit_has_silu_grid(const mm_dit *dit);
/* Whether these adapters have AdaLN pairs that read the grid. */
bool mm_dit_loras_need_grid(const mm_dit *dit, const mm_lora_use *uses, int n);
/* PDD: the bank heads of the request's adapters (0: none), and this
 * forward's head weights per modality (heads values each, summing to 1: the
 * schedule's bank_weights row, sampler/schedule.h), blended into the heads
 * that replace final_layer.video_out / audio_out. Required before every
 * forward of a request whose adapters carry a bank. */
int mm_dit_request_bank_heads(const mm_dit_request *r);
int mm_dit_request_set_head_weights(mm_dit_request *r, const float *video, const float *audio, mm_error *err);

/* One forward. row_t: host [S] per-row timesteps (mm_dit_row_timesteps).
 * video_rows [Nv, video_row_width] and audio_rows [Na, audio_row_width]: f32
 * on the context's device, condition rows first (layout order); the
 * velocities v_video / v_audio (same shapes, f32, on the device) cover every
 * row, condition rows included. */
int mm_dit_forward(mm_dit_request *req, const float *row_t, const mm_tensor *video_rows, const mm_tensor *audio_rows,
                   mm_tensor *v_video, mm_tensor *v_audio, mm_error *err);

/* Step caching (step_cache.h, docs/CACHING.md) for the forwards of this
 * request: c NULL or off turns it off; `forwards` is how many the request
 * will run (the last `final` always compute; 0 = unknown). Allocates the
 * cache's buffers on the request's device, as much as 5 (TeaCache) or 7
 * (FBC) bf16 residual streams [S, H] (≈ 0.41 GB each at 1344×768×124).
 * Forwards then go through the cache; mm_dit_request_set_step names the
 * index of the next one (they count on from 0 otherwise). */
int mm_dit_request_set_step_cache(mm_dit_request *req, const mm_step_cache_config *c, int forwards, mm_error *err);
/* What the request's forwards skipped so far, or NULL without a step cache. */
const mm_step_cache_report *mm_dit_request_step_cache_report(const mm_dit_request *req);
/* Device bytes of the step cache's buffers (0 without one). */
size_t mm_dit_request_step_cache_bytes(const mm_dit_request *req);

/* Speed controls (src/model/dit/dit_block_cuda.c). On a CUDA context the
 * main blocks run through the fused kernels (norm + modulation + rotation +
 * int8 quantization in one pass, int8 GEMM with the gated residual in its
 * epilogue, q/k norm + RoPE in one pass) unless the kernel policy says
 * portable (backend/kernel_policy.h: MMH3_KERNELS=portable). On Hopper the
 * attention runs the FA3-style kernel and the int8 linears the GEMM with
 * the fused epilogue, each once its first-use self-check passes
 * (backend/fused.h: mm_dit_kernel_paths_get). Fast mode: int8 q·k
 * + e4m3 p·v attention where the GPU has it (its error budget:
 * docs/PERFORMANCE.md), exact elsewhere or with MMH3_DIT_FAST=off. */
void mm_dit_request_set_fast(mm_dit_request *req, bool fast);
/* The next forward is forward `step` (0-based) of `total` (0: unknown):
 * the step cache's warm-up and final forwards, sparse attention's dense
 * forwards and τ follow from it. Without calls, forwards are counted from
 * the request's first. */
void mm_dit_request_set_step(mm_dit_request *req, int step, int total);
/* The share of (query block, key block, head) pairs the last forward
 * computed exactly over all main blocks (dense blocks count 1); 1 without
 * sparse attention, or before the first forward. */
double mm_dit_request_density(const mm_dit_request *req);
/* One line on the sparse attention: the preset and the kernel, or why it
 * does not run ("off", "off: the attention hook owns the attention"). */
const char *mm_dit_sparse_kind(const mm_dit_request *req);
/* What the main blocks' attention runs now, e.g. "fa3-i8-e4m3 (fast)",
 * "fa3-bf16", "mm_attention", "hook (the caller's attention)". */
const char *mm_dit_attention_kind(const mm_dit_request *req);
/* The request's own SDPA (the kernel the policy above picked for its mode;
 * the attention hook is not called): for hooks that split the heads and
 * still want the fast kernel on their share. Same contract as the hook. */
int mm_dit_sdpa(mm_dit_request *req, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
/* What mm_dit_sdpa runs on views like the blocks' (fewer_queries: k/v with
 * more rows than q, as the reference KV cache's hook passes them), e.g.
 * "fa3-bf16"; mm_dit_attention_kind without the hook. */
const char *mm_dit_sdpa_kind(const mm_dit_request *req, bool fewer_queries);
/* How the request applies its adapters (mm_dit_request_opts.loras): "none",
 * "branch on the ops (composition)" (the CPU, or CUDA off the fused block),
 * "f32 addend in the int8 epilogue (cuBLASLt path)", or "fused into the
 * Hopper int8 GEMM" (docs/LORA.md). */
const char *mm_dit_lora_path(const mm_dit_request *req);

/* Stage timing of one main block for benchmarks: mark(user, stage) is called
 * on the host before each stage of block `block` (stage names such as
 * "attention", "fc1 int8 GEMM") and with NULL after its last stage, in
 * stream order — record a device event there. NULL turns it off. */
typedef struct mm_dit_profile {
    int block;
    void (*mark)(void *user, const char *stage);
    void *user;
} mm_dit_profile;
void mm_dit_request_set_profile(mm_dit_request *req, const mm_dit_profile *p);

/* Views of one ConvRot linear of main block `block` (which: 0 qkv, 1 out,
 * 2 fc1, 3 fc2): its int8 weight [N, K] and f32 row scales [N]; *group is
 * the rotation group. For unit checks of the W8A8 path. */
int mm_dit_convrot_layer(const mm_dit *dit, int block, int which, mm_tensor *weight, mm_tensor *scale, int *group,
                         mm_error *err);

/* The most distinct timestep values one forward may carry. */
#define MM_DIT_MAX_TIMESTEPS 8

/* temb for one timestep: the adaln_t_table row interpolated at
 * clamp(t, 0, 1)·(size − 1), f32, no SiLU (dit.md §2.2). */
void mm_dit_time_embedding(const mm_dit *dit, float t, float *out);

#endif
