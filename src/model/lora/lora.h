/* LoRA adapters for the MiniMax-H3 DiT (fewstep.md §2; docs/LORA.md).
 *
 * An adapter file is read once into a handle: every published key spelling
 * (native names with the diffusion_model./transformer./base_model.model./
 * model.diffusion_model./model. prefixes or none; PEFT lora_A/lora_B with
 * and without .default; kohya lora_unet_… lora_down/lora_up/.alpha;
 * diffusers module names; DiffSynth's interleaved qkv rows; rank-3r fused
 * q/k/v exports) is normalized to low-rank pairs on the engine's native
 * modules, with the row transforms of §2.3 already applied:
 *
 *   to_q / to_k / to_v      three pairs on qkv_proj, rows [0,A), [A,2A), [2A,3A)
 *   ff.net.0.proj           fc1, B's halves swapped ([up; gate] → [gate; up])
 *   DiffSynth qkv_proj      B rows de-interleaved (h·384 + c·128 + d → c·A + h·128 + d)
 *   fused rank-3r qkv       split back into its three diagonal blocks when B is
 *                           block-diagonal (exactly the same product)
 *
 * and alpha resolved per pair (§2.4): the pair's own .alpha tensor, else
 * __metadata__["alpha"] (or "lora_alpha"), else alpha = rank; the scale is
 * alpha / rank with the pair's own rank. A key the engine cannot place, an A
 * without its B, ranks that disagree, a bad alpha: the load fails with a
 * message naming the file and the keys. Shapes against a DiT are checked by
 * mm_lora_fit (the file, the key and both shapes in the message).
 *
 * What a handle holds, by part:
 *   linear pairs     blocks.N / token_refiner.blocks.J qkv_proj, out_proj, fc1,
 *                    fc2 and condition_proj: the DiT applies them as a
 *                    separate branch, never merged (§2.6; src/model/dit/).
 *   AdaLN pairs      blocks.N.adaln_proj.linear, final_layer.adaln_proj.linear
 *                    (diffusers norm_out.linear): A [r, time width], kept for
 *                    the AdaLN path (fewstep.md §2.5).
 *   time pairs       time_embedder.proj_in/proj_out and HyperFlow's
 *                    endpoint_time_embedder (diffusers linear_1/linear_2).
 *   head banks       PDD's per-step output heads (proj_out / audio_proj_out
 *                    [n, out, in] + bias [n, out]).
 *   dense deltas     FastVideo v2 .diff / .diff_b / .set_weight: recognized and
 *                    listed; the DiT refuses them (they are folded offline by
 *                    `mmh3 convert`).
 * The raw __metadata__ stays readable (mm_lora_metadata) for sampler presets.
 *
 * Ownership: the handle owns everything it points to. Tensors are host
 * views into the open file (kept mapped), or the handle's own copies where a
 * row transform rewrote B; they keep the file's float dtype. mm_lora_upload
 * adds contiguous bf16 copies of the linear pairs on one device (what the
 * branch reads); they live until mm_lora_free. A handle is immutable once
 * loaded and uploaded, so one can serve many requests (and be kept resident
 * in an LRU by mm_lora_bytes) while the base weights are never touched.
 */
#ifndef MMH3_MODEL_LORA_LORA_H
#define MMH3_MODEL_LORA_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/dit/config.h"

/* ------------------------------------------------------------- targets */

/* Where in the DiT a module sits. */
typedef enum mm_lora_scope {
    MM_LORA_BLOCK = 0,         /* blocks.N */
    MM_LORA_REFINER,           /* token_refiner.blocks.N */
    MM_LORA_CONDITION,         /* condition_proj */
    MM_LORA_FINAL,             /* final_layer */
    MM_LORA_TIME_EMBEDDER,     /* time_embedder (full checkpoints only) */
    MM_LORA_ENDPOINT_EMBEDDER, /* endpoint_time_embedder (HyperFlow) */
} mm_lora_scope;

/* Which linear of the scope. The first four match the DiT's MM_DIT_QKV,
 * MM_DIT_OUT, MM_DIT_FC1, MM_DIT_FC2. */
typedef enum mm_lora_which {
    MM_LORA_QKV = 0,   /* attn.qkv_proj  [3A, H] */
    MM_LORA_OUT,       /* attn.out_proj  [H, A] */
    MM_LORA_FC1,       /* mlp.fc1        [2F, H], rows [gate; up] */
    MM_LORA_FC2,       /* mlp.fc2        [H, F] */
    MM_LORA_LINEAR,    /* condition_proj [H, text_dim] */
    MM_LORA_ADALN,     /* adaln_proj.linear: block [modalities·6H, time width], final [2H, time width] */
    MM_LORA_TIME_IN,   /* proj_in  (diffusers linear_1) [5376, 256] */
    MM_LORA_TIME_OUT,  /* proj_out (diffusers linear_2) [2688, 5376] */
} mm_lora_which;

typedef enum mm_lora_part {
    MM_LORA_PART_LINEAR = 0, /* the DiT's branch applies it */
    MM_LORA_PART_ADALN,
    MM_LORA_PART_TIME,
} mm_lora_part;

mm_lora_part mm_lora_which_part(mm_lora_which w);

/* Where a pair's alpha came from (§2.4). */
typedef enum mm_lora_alpha_source {
    MM_LORA_ALPHA_TENSOR = 0, /* <module>.alpha */
    MM_LORA_ALPHA_METADATA,   /* __metadata__["alpha"] or ["lora_alpha"] */
    MM_LORA_ALPHA_RANK,       /* none stored: alpha = rank (PEFT's rule) */
    MM_LORA_ALPHA_FILENAME,   /* LightX2V 4-step v0.1, which stores none: 8 (the reference script's value) */
} mm_lora_alpha_source;

/* How the file spelled the pair's rows, i.e. the transform applied to B. */
typedef enum mm_lora_rows {
    MM_LORA_ROWS_AS_STORED = 0,
    MM_LORA_ROWS_QKV_SLICE,     /* diffusers to_q/to_k/to_v onto a third of qkv_proj */
    MM_LORA_ROWS_FC1_SWAPPED,   /* diffusers ff.net.0.proj: halves swapped back */
    MM_LORA_ROWS_DEINTERLEAVED, /* DiffSynth per-head interleaved qkv rows */
    MM_LORA_ROWS_FUSED_SPLIT,   /* one diagonal block of a block-diagonal rank-3r qkv pair */
} mm_lora_rows;

/* One low-rank pair: Δy[:, row0 : row0 + rows] = strength · scale · B·(A·x). */
typedef struct mm_lora_pair {
    mm_lora_scope scope;
    int index;               /* block / refiner block; 0 elsewhere */
    mm_lora_which which;
    char module[64];         /* native name, e.g. "blocks.3.attn.qkv_proj" */
    int64_t row0, rows;      /* output rows of the target this pair writes (rows = B's rows) */
    int64_t in_features;     /* A's columns */
    int rank;                /* A's rows = B's columns */
    float alpha;
    mm_lora_alpha_source alpha_from;
    float scale;             /* alpha / rank */
    mm_lora_rows row_kind;
    mm_tensor a;             /* host [rank, in_features], file dtype (F32/BF16/F16) */
    mm_tensor b;             /* host [rows, rank], rows in the engine's order */
    mm_tensor dev_a, dev_b;  /* linear pairs after mm_lora_upload: contiguous bf16 on the device */
    char key[160];           /* the A key as the file spells it (messages) */
    char b_key[160];         /* the B key */
} mm_lora_pair;

/* PDD's per-step output heads (fewstep.md §5). */
typedef struct mm_lora_bank {
    bool audio;              /* final_layer.audio_out (audio_proj_out), else video_out (proj_out) */
    mm_tensor weight;        /* host [heads, out, in] */
    mm_tensor bias;          /* host [heads, out], or data == NULL */
    char key[160];
} mm_lora_bank;

/* FastVideo v2 full-rank parts (fewstep.md §8.1). */
typedef enum mm_lora_dense_kind { MM_LORA_DIFF = 0, MM_LORA_DIFF_BIAS, MM_LORA_SET_WEIGHT } mm_lora_dense_kind;
typedef struct mm_lora_dense {
    mm_lora_dense_kind kind;
    mm_tensor t;             /* host, as stored */
    char key[160];
} mm_lora_dense;

/* ------------------------------------------------------------- summary */

#define MM_LORA_MAX_WARNINGS 8

/* What `mmh3 check` prints for a file. */
typedef struct mm_lora_summary {
    char family[48];     /* "LightX2V Turbo", "Larry's Turbo", "PDD Acc", "HyperFlow", "FastH3", "FlashGen",
                            "VDN-H3", "generic" (fewstep.md §1) */
    char spelling[96];   /* e.g. "PEFT lora_A/lora_B .default, diffusers names" */
    int modules;         /* distinct target modules */
    int rank_min, rank_max;     /* over all pairs */
    float alpha_min, alpha_max; /* as resolved */
    char alpha_note[96]; /* where the alphas came from */
    char targets[256];   /* e.g. "qkv, out, fc1, fc2 on 50 blocks; refiner 2 blocks; AdaLN 51" */
    char hint[160];      /* sampler / step hints from the file name and metadata, or "" */
    int n_warnings;
    char warnings[MM_LORA_MAX_WARNINGS][256];
} mm_lora_summary;

/* -------------------------------------------------------------- handle */

typedef struct mm_lora_internal mm_lora_internal;

typedef struct mm_lora {
    char path[1024];
    const char *name;        /* base name of path */
    mm_lora_summary summary;
    mm_lora_pair *pairs;     /* linear, AdaLN and time pairs, in file order of their A keys */
    int n_pairs;
    mm_lora_bank banks[2];
    int n_banks;
    mm_lora_dense *dense;
    int n_dense;
    bool header_only;        /* opened for the summary: tensors carry shapes, no row transforms ran */
    mm_device device;        /* where dev_a/dev_b live (after mm_lora_upload) */
    bool uploaded;
    size_t host_bytes, device_bytes;
    mm_lora_internal *in;
} mm_lora;

typedef struct mm_lora_open_opts {
    /* Read the header (and the scalar alphas) only: for listings. Pairs carry
     * their stored shapes; B is not transformed and cannot be uploaded. */
    bool header_only;
} mm_lora_open_opts;

/* Opens and normalizes an adapter file (opts may be NULL). */
int mm_lora_open(mm_lora **out, const char *path, const mm_lora_open_opts *opts, mm_error *err);
/* The same from an in-memory safetensors image (borrowed; the fuzzer, tests). */
int mm_lora_open_memory(mm_lora **out, const char *label, const void *data, size_t size,
                        const mm_lora_open_opts *opts, mm_error *err);
void mm_lora_free(mm_lora *l);

/* Checks every pair, bank and dense part against a DiT's configuration:
 * the target exists (block index, refiner block, full-width AdaLN ...) and
 * the shapes fit. The message names the file, the key and both shapes. */
int mm_lora_fit(const mm_lora *l, const mm_dit_config *cfg, mm_error *err);

/* bf16 contiguous copies of the linear pairs on ctx's device (dev_a/dev_b;
 * on the CPU too, so the branch reads one dtype everywhere). Idempotent for
 * the same device; another device is an error. */
int mm_lora_upload(mm_lora *l, mm_ctx *ctx, mm_error *err);
/* Host + device bytes the handle keeps (an LRU's weight). */
size_t mm_lora_bytes(const mm_lora *l);

/* The raw __metadata__ (NULL when absent), for sampler presets. */
const char *mm_lora_metadata(const mm_lora *l, const char *key);
size_t mm_lora_metadata_count(const mm_lora *l);
const char *mm_lora_metadata_at(const mm_lora *l, size_t i, const char **value);

/* Whether the handle has parts beside linear pairs (AdaLN, time, banks,
 * dense deltas), and a one-line description of them for messages. */
bool mm_lora_has_extras(const mm_lora *l);
const char *mm_lora_extras_str(const mm_lora *l, char *buf, size_t n);

/* ------------------------------------------------------ using adapters */

/* One adapter of a request and its strength (ΔW = strength · alpha/rank · B·A). */
typedef struct mm_lora_use {
    const mm_lora *lora;
    float strength;
} mm_lora_use;

#define MM_LORA_MAX_USES 8

/* "FILE[:STRENGTH]" → name and strength (default 1). The strength is the
 * text after the last ':' when it parses as a finite number. */
int mm_lora_parse_spec(const char *spec, char *name, size_t n, float *strength, mm_error *err);
/* A name as the user gave it → an existing file. A name is looked up under
 * <models_path>/loras/ (ComfyUI's layout; sub-folders allowed), with
 * ".safetensors" added when it has no extension. allow_paths (the CLI): a
 * name that exists as given (absolute, or with a '/') is taken as a path
 * first. Without it (names from the API) only the adapter folder is
 * searched and a name must not climb out of it ("..", a leading '/').
 * models_path NULL: $MODELS_PATH, else /data/shared/models. The message
 * says where it looked. */
int mm_lora_resolve(const char *name, const char *models_path, bool allow_paths, char *path, size_t n,
                    mm_error *err);
/* The adapter folder <models_path>/loras (models_path NULL as above). */
const char *mm_lora_dir(const char *models_path, char *buf, size_t n);

/* ------------------------------------------------------------- the LRU */

/* Adapters kept resident between jobs, weighed by mm_lora_bytes: get()
 * returns a loaded, uploaded handle (reopened when the file changed) and pins
 * it until release(); unpinned handles are freed oldest first while the
 * total exceeds the budget. One thread at a time (the worker's job loop). */
typedef struct mm_lora_cache mm_lora_cache;
int mm_lora_cache_create(mm_lora_cache **out, size_t budget_bytes, mm_error *err);
void mm_lora_cache_destroy(mm_lora_cache *c);
int mm_lora_cache_get(mm_lora_cache *c, const char *path, mm_ctx *ctx, mm_lora **out, mm_error *err);
void mm_lora_cache_release(mm_lora_cache *c, mm_lora *l);
size_t mm_lora_cache_bytes(const mm_lora_cache *c);
int mm_lora_cache_count(const mm_lora_cache *c);

#endif
