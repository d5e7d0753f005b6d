/* Internal structures of the DiT shared by its source files (not a public
 * header: use dit.h). */
#ifndef MMH3_MODEL_DIT_MODEL_H
#define MMH3_MODEL_DIT_MODEL_H

#include "backend/fused.h"
#include "backend/sparse_attn.h"
#include "formats/linear.h"
#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "model/dit/step_cache.h"

/* The attention + MLP half of a block: norms and the four linears (qkv, out,
 * fc1, fc2) in their stored format (bf16 in the refiner, int8 ConvRot in the
 * main blocks of the Comfy file); main blocks also carry their AdaLN
 * projection, upcast to f32 once at load. */
typedef struct mm_dit_block_weights {
    mm_tensor norm1, norm2, q_norm, k_norm;
    mm_linear lin[4];
    mm_tensor adaln_w, adaln_b; /* blocks: f32 [modalities·6·H, time_dim], [modalities·6·H] */
} mm_dit_block_weights;

enum { MM_DIT_QKV = 0, MM_DIT_OUT, MM_DIT_FC1, MM_DIT_FC2 };

struct mm_dit {
    mm_dit_config cfg;
    mm_device device;
    mm_safetensors *st;           /* kept open: CPU weights are views into it */
    /* f32 islands and the text path */
    mm_linear video_in, audio_in; /* f32 patch projections (+ bias) */
    mm_linear cond;               /* condition_proj, bf16 (+ bias) */
    float *table;                                 /* host [table_size, time_dim] */
    float *inv_freq;                              /* host [rope_freqs] */
    mm_dit_block_weights *refiner;                /* [refiner_layers] */
    mm_tensor refiner_norm;
    mm_dit_block_weights *blocks;                 /* [layers] */
    mm_tensor final_norm, final_adaln_w, final_adaln_b; /* bf16, f32, f32 */
    mm_linear video_out, audio_out;                     /* f32 heads (+ bias) */
    size_t device_bytes;
    /* Residency (mm_dit_residency): CPU weights copied into allocations
     * rather than viewed in the mapping; the streamed blocks (stream.c,
     * NULL when every block is resident). */
    bool own_cpu_weights;
    struct mm_dit_stream *stream;
    /* SiLU(temb) of the full model on the table's grid (mm_dit_set_silu_grid):
     * what full-width AdaLN adapters read on the pruned base; host f32. */
    float *silu_grid;
    int grid_points, grid_width;
};

/* Activations of one request, sized for its S rows, reused by every block. */
typedef struct mm_dit_workspace {
    mm_tensor x;     /* [S, H] bf16: the residual stream */
    mm_tensor h;     /* [S, H] bf16: normalized + modulated input of a linear */
    mm_tensor qkv;   /* [S, 3A] bf16 (A = heads·head_dim) */
    mm_tensor attn;  /* [S, A] bf16 */
    mm_tensor y;     /* [S, H] bf16: output of out_proj / fc2 */
    mm_tensor fc1;   /* [S, 2F] bf16 view of fc1_store */
    mm_tensor fc1_store; /* owner: [S, max(2F, 2H)] bf16, also holds the f32 rows of the output heads */
    mm_tensor glu;   /* [S, F] bf16 */
    mm_tensor q8;    /* [S, max K] I8: quantized activations */
    mm_tensor s8;    /* [S] F32: their row scales */
    mm_tensor mod32; /* [M_max, modalities·6·H] f32: one block's AdaLN output */
    mm_tensor mod;   /* [M_max, modalities·6·H] bf16 (rows ti·modalities + tag as [M·mod, 6H]) */
    mm_tensor fmod32, fmod; /* [M_max, 2H] f32 / bf16: final layer (shift, scale) */
    mm_tensor temb;  /* [M_max, time_dim] f32 */
    mm_tensor adaln_idx, t_idx; /* I32 [S]: ti·modalities + tag, ti */
} mm_dit_workspace;

/* The step cache of a request (step_cache_forward.c; the policy is step_cache.h). */
typedef struct mm_dit_step_cache {
    mm_step_cache_state state;
    mm_step_cache_report report;
    int next_step;      /* index of the next forward */
    mm_tensor in;       /* [S, H] bf16: block 0's input; FBC: then block 0's output h1 */
    mm_tensor cur, ref; /* FBC: [S, H] f32 residuals of block 0; TeaCache: [S, H] bf16 probes */
    mm_tensor delta;    /* [S, H] f32: D, what stands in for the blocks a skipped forward leaves out */
    mm_tensor sums;     /* [4, S] f32: per-row sums of cur and of cur − ref (step_cache_forward.c) */
    float *host_sums;   /* [4·S] */
    size_t bytes;
} mm_dit_step_cache;
/* One low-rank piece of a linear's adapter branch (lora_branch.c): the
 * pair's bf16 device tensors and its strength-folded scale. */
typedef struct mm_dit_lora_piece {
    const mm_tensor *a, *b; /* A [rank, in], B [rows, rank] */
    int64_t row0, rows;
    int rank;
    float s; /* strength · alpha / rank */
} mm_dit_lora_piece;

/* The pieces of one linear, in the request's adapter order. */
typedef struct mm_dit_lora_list {
    mm_dit_lora_piece *p;
    int n;
} mm_dit_lora_list;

/* One main-block linear's pieces stacked for the Hopper GEMM's fused branch
 * (dit_block_cuda.c): u = h·a_allᵀ in one GEMM, then B·u on the GEMM's f32
 * accumulators (backend/fused.h: mm_qgemm_lora). */
typedef struct mm_dit_lora_fused {
    mm_tensor a_all; /* [Rk, in] bf16: bf16(s·A) of every piece, stacked (Rk: their ranks, padded to 64) */
    mm_tensor b_all; /* [out, Rk] bf16: each piece's B at its rows and columns, zeros elsewhere */
    mm_tensor mask;  /* I64 [ceil(out / 256)]: the 64-wide chunks of Rk each 256-column tile needs */
} mm_dit_lora_fused;
/* AdaLN adapters and PDD head banks of a request (adaln_adapters.c). One
 * piece = one AdaLN pair of one adapter: mod32 += s·B·(A·e(t)) per distinct
 * t, e = the table's temb (adapters trained on the pruned base: A [r, 8]) or
 * the SiLU(temb) grid row (full-model adapters: A [r, 2688]). */
typedef struct mm_dit_adaln_piece {
    mm_tensor a;   /* device f32 [rank, in] */
    mm_tensor b;   /* device [rows, rank] in the file's float dtype */
    int rank;
    float s;       /* strength · alpha / rank */
    bool grid;     /* reads the SiLU(temb) grid row */
} mm_dit_adaln_piece;

typedef struct mm_dit_adapt {
    mm_dit_adaln_piece *p; /* grouped by slot: blocks 0..layers-1, then the final layer */
    int n;
    int *first, *count;    /* [layers + 1] */
    bool grid;             /* some piece reads the grid */
    mm_tensor grid_rows;   /* [M_max, grid width] f32: e(t) per distinct t */
    mm_tensor u;           /* [M_max, max rank] f32 */
    mm_tensor b32;         /* [max rows, max rank] f32: one piece's B */
    /* PDD: one video and one audio bank of `heads` heads; the blended head of this forward */
    const mm_lora_bank *bank[2];
    float strength[2];     /* of the adapter that carries each bank */
    int heads;
    mm_linear head[2];     /* device f32 [out, H] + bias */
    bool heads_set;
} mm_dit_adapt;
/* Sparse attention of one request (sparse.c). */
typedef struct mm_dit_sparse {
    mm_sparse_config cfg;
    mm_sparse_route route;   /* sized for the request's rows */
    mm_tensor tally;         /* I64 [1] on the device: exact pairs of this forward's routed blocks */
    mm_row_range sink[MM_SPARSE_MAX_RANGES], dense_q[MM_SPARSE_MAX_RANGES];
    int n_sink, n_dense_q;
    int step, total;         /* the forward about to run, of total (0: unknown) */
    bool step_set;           /* set by mm_dit_request_set_step for the next forward */
    bool on;                 /* this forward routes its main blocks past the dense ones */
    int routed_blocks;       /* main blocks routed in this forward */
    double density;          /* of the last forward */
    char kind[448];
} mm_dit_sparse;

struct mm_dit_request {
    mm_dit *dit;
    mm_ctx *ctx;
    mm_dit_debug dbg;
    int64_t rows, text_rows, video_rows, audio_rows;
    int8_t *tags;                  /* host copy [S] */
    mm_tensor video_idx, audio_idx, text_idx; /* I32 on the device */
    mm_tensor rope_cos, rope_sin;  /* [S, rope_dim] bf16 */
    mm_tensor text;                /* [L, H] bf16: refined text (computed once) */
    mm_dit_workspace ws;
    int m;                         /* distinct timesteps of the current forward */
    mm_dit_attention_fn attention; /* main blocks' SDPA hook (mm_dit_request_opts), or NULL */
    void *attention_user;
    size_t bytes;
    /* dit_block_cuda.c */
    bool cuda_path;        /* main blocks through the fused CUDA kernels */
    bool fast;             /* fast-mode attention where the GPU runs it */
    mm_dit_kernel_paths paths; /* which Hopper kernels run (backend/fused.h) */
    bool paths_fast;       /* paths were chosen with fast mode's self-check */
    mm_dit_profile profile; /* stage marks of one block (benchmarks) */
    mm_tensor mod_f32;      /* [M_max·modalities, 6H] f32: the block's bf16 AdaLN rows, exactly (qgemm gates) */
    /* step caching (mm_dit_request_set_step_cache), NULL when off */
    mm_dit_step_cache *step_cache;
    mm_dit_allreduce_fn allreduce; /* mm_dit_request_opts: the group's sums, or NULL */
    void *allreduce_user;
    /* LoRA adapters (lora_branch.c): per linear (mm_dit_lora_slot), its
     * pieces; the branch's scratch: u [S, max rank] bf16, the f32
     * accumulator of an adapted linear (mm_dit_lora_acc). NULL/empty: none. */
    mm_dit_lora_list *lora;
    int n_lora_lists;
    mm_tensor lora_u, lora_acc;
    mm_dit_lora_fused *lora_fused; /* [layers·4] on the fused CUDA path with the Hopper GEMM, or NULL */
    mm_tensor lora_uall;           /* [S, max Rk] bf16: a fused linear's u */
    mm_dit_adapt adapt; /* AdaLN pairs and head banks of the request's adapters */
    int block;              /* the main block running (forward.c), for dense blocks */
    mm_dit_sparse *sparse;  /* NULL: dense attention */
};

/* weights.c */
int mm_dit_weights_load(mm_dit *dit, mm_ctx *ctx, mm_error *err);
void mm_dit_weights_free(mm_dit *dit);
/* Main block `block` on the host through a CPU context: views into the
 * mapping, the AdaLN projection upcast into owned host tensors. */
int mm_dit_load_streamed_block(mm_dit *d, mm_ctx *cpu, int block, mm_dit_block_weights *out, mm_error *err);
void mm_dit_block_weights_free(mm_dit_block_weights *bw);

/* stream.c: main blocks kept in pinned host memory and copied into one of
 * two device slots before they run (mm_dit_residency). setup packs them
 * (after the resident weights are loaded); enter/leave bracket a block's
 * run: enter makes d->blocks[block] the slot's copy (queuing the copy if the
 * slot does not hold it yet) and leave restores the host copy and queues the
 * next streamed block's copy into the other slot. No-ops for resident blocks. */
bool mm_dit_block_streamed(const mm_dit *d, int block);
int mm_dit_stream_init(mm_dit *d, const bool *stream, int n, mm_error *err); /* before the weights load */
int mm_dit_stream_load(mm_dit *d, mm_error *err);                            /* after */
void mm_dit_stream_free(mm_dit *d);
int mm_dit_stream_enter(mm_dit *d, int block, mm_ctx *ctx);
void mm_dit_stream_leave(mm_dit *d, int block, mm_ctx *ctx);

/* linear.c: a linear layer in any stored format, the int8 codes of ConvRot
 * layers in the request's scratch. */
int mm_dit_linear(mm_ctx *ctx, mm_dit_workspace *ws, mm_tensor *out, const mm_tensor *x, const mm_linear *lin);

/* lora_branch.c: adapters of a request (mm_dit_request_opts.loras). */
int mm_dit_lora_setup(mm_dit_request *r, const mm_lora_use *uses, int n, mm_error *err);
void mm_dit_lora_teardown(mm_dit_request *r);
/* The pieces of a block's (or the refiner's) linear `which`, or of
 * condition_proj (bw NULL); NULL when it has none. */
const mm_dit_lora_list *mm_dit_lora_for(const mm_dit_request *r, const mm_dit_block_weights *bw, int which);
/* acc [R, N] f32 += Σ pieces s·B·(A·x): u = bf16(s·x·Aᵀ) in the request's
 * scratch, then acc[:, row0 : row0 + rows] += u·Bᵀ in f32 (mm_gemm with
 * beta 1). x [R, in] bf16. */
int mm_dit_lora_accumulate(mm_dit_request *r, mm_tensor *acc, const mm_tensor *x, const mm_dit_lora_list *l);
/* The request's f32 accumulator as [rows, n] (made on first use at the size
 * asked, grown once if a later use needs more rows; failures go to the ctx). */
int mm_dit_lora_acc(mm_dit_request *r, int64_t rows, int64_t n, mm_tensor *out);
/* linear.c: mm_dit_linear plus its adapter branch, rounded once: the base
 * result in f32 (the GEMM's accumulator after its epilogue), the branch
 * added in f32, then one rounding into out. l NULL or empty: mm_dit_linear. */
int mm_dit_linear_lora(mm_dit_request *r, mm_tensor *out, const mm_tensor *x, const mm_linear *lin,
                       const mm_dit_lora_list *l);

/* attention.c: the shared attention half (fused QKV → per-head q/k RMSNorm →
 * optional RoPE → SDPA over the rows of h → ws->attn). */
int mm_dit_attention(mm_dit_request *r, int64_t rows, const mm_tensor *h, const mm_dit_block_weights *bw,
                     bool rotary);
/* SwiGLU MLP of h → ws->y (rows of h). */
int mm_dit_mlp(mm_dit_request *r, int64_t rows, const mm_tensor *h, const mm_dit_block_weights *bw);

/* embed.c */
int mm_dit_embed_text(mm_dit_request *r, const mm_tensor *text); /* condition_proj + refiner → r->text */
int mm_dit_embed_media(mm_dit_request *r, const mm_tensor *video_rows, const mm_tensor *audio_rows);

/* refiner.c */
int mm_dit_refine(mm_dit_request *r, mm_tensor *text);

/* adaln.c */
int mm_dit_adaln_block(mm_dit_request *r, int block, int m);
int mm_dit_adaln_final(mm_dit_request *r, int m);

/* adaln_adapters.c: the AdaLN pairs and head banks of a request's adapters
 * (their linear pairs are lora_branch.c's). setup checks and uploads them;
 * forward_begin fills the grid rows for the forward's distinct timesteps;
 * add folds slot `slot`'s pieces (a block, or layers for the final layer)
 * into out32 [m, rows] f32; the heads are the blended bank heads, or NULL. */
int mm_dit_adapt_setup(mm_dit_request *r, const mm_lora_use *uses, int n, mm_error *err);
void mm_dit_adapt_teardown(mm_dit_request *r);
int mm_dit_adapt_forward_begin(mm_dit_request *r, const float *unique, int m, mm_error *err);
int mm_dit_adapt_add(mm_dit_request *r, int slot, mm_tensor *out32, int m);
const mm_linear *mm_dit_adapt_head(const mm_dit_request *r, bool audio);

/* rope.c: host cos/sin [S, rope_dim] in f32 (before bf16). */
void mm_dit_rope_tables(const mm_dit *dit, const double *positions, int64_t rows, float *cos_out, float *sin_out);

/* dit_block_cuda.c: whether the fused CUDA block applies to this request
 * (CUDA context, int8 ConvRot group-256 linears without bias, the kernel
 * policy's fused DiT block), and that block. */
bool mm_dit_cuda_path_applies(const mm_dit_request *r);
int mm_dit_cuda_setup(mm_dit_request *r, mm_error *err); /* its buffers (nothing off the path) */
void mm_dit_cuda_teardown(mm_dit_request *r);
/* The fused branch's stacked pieces (after mm_dit_lora_setup; nothing
 * without adapters or off the Hopper GEMM) and their release. */
int mm_dit_cuda_lora_setup(mm_dit_request *r, mm_error *err);
void mm_dit_cuda_lora_teardown(mm_dit_request *r);
int mm_dit_block_cuda(mm_dit_request *r, int block);

/* forward.c: main blocks [first, end) with their AdaLN rows (and the
 * block0_out capture), for the m timesteps of the current forward. */
int mm_dit_run_blocks(mm_dit_request *r, int first, int end, int m);

/* step_cache_forward.c: the main blocks of one forward through the step
 * cache (some or none of them run), and the cache's teardown. */
int mm_dit_cached_blocks(mm_dit_request *r, int m, mm_error *err);
void mm_dit_step_cache_free(mm_dit_request *r);
void mm_dit_step_cache_set_step(mm_dit_request *r, int step);
/* sparse.c: the request's sparse attention. setup allocates
 * the route for the layout (nothing when opts ask for none); begin/end
 * bracket a forward (its τ, dense or not; the density it achieved); sdpa
 * is the main blocks' attention when sparse_applies says so. */
int mm_dit_sparse_setup(mm_dit_request *r, const mm_dit_layout *l, const mm_sparse_config *cfg, mm_error *err);
void mm_dit_sparse_teardown(mm_dit_request *r);
void mm_dit_sparse_forward_begin(mm_dit_request *r);
int mm_dit_sparse_forward_end(mm_dit_request *r, mm_error *err);
bool mm_dit_sparse_applies(const mm_dit_request *r);
void mm_dit_sparse_set_step(mm_dit_request *r, int step, int total);
int mm_dit_sparse_sdpa(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
/* ... in its two steps (the benchmark's stage marks time them apart) */
int mm_dit_sparse_route(mm_dit_request *r, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);
int mm_dit_sparse_attend(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v);

/* block.c, final_layer.c */
int mm_dit_block(mm_dit_request *r, int block);
int mm_dit_final(mm_dit_request *r, mm_tensor *v_video, mm_tensor *v_audio);

/* Views of a [R, C] tensor's first `rows` rows. */
static inline mm_tensor mm_dit_rows(const mm_tensor *t, int64_t rows) { return mm_tensor_narrow(t, 0, 0, rows); }

static inline void mm_dit_capture(const mm_dit_request *r, const char *name, const mm_tensor *t)
{
    if (r->dbg.capture)
        r->dbg.capture(r->dbg.user, name, t);
}

#endif
