/* One main block on a CUDA context: the composition of block.c,
 * attention.c and linear.c, with the memory-bound glue fused into the
 * passes of backend/fused.h so that the bf16 intermediates the
 * composition writes and reads again (h, y, glu) never exist:
 *
 *   q8, s  = quant(rot(RMSNorm1(x)·(1 + scale_msa) + shift_msa))      one pass
 *   qkv    = int8 GEMM (q8, W_qkv) · s · s_w                          bf16
 *   q, k   = RoPE(RMSNorm_q(q)), RoPE(RMSNorm_k(k))                   one pass, in place
 *   attn   = SDPA(q, k, v)                                            Hopper kernel or mm_attention
 *   q8, s  = quant(rot(attn))
 *   x     += gate_msa · (int8 GEMM (q8, W_out) · s · s_w)             residual in the GEMM's epilogue
 *   q8, s  = quant(rot(RMSNorm2(x)·(1 + scale_mlp) + shift_mlp))
 *   fc1    = int8 GEMM (q8, W_fc1) · s · s_w                          [gate | up], bf16
 *   q8, s  = quant(rot(silu(gate)·up))                                one pass
 *   x     += gate_mlp · (int8 GEMM (q8, W_fc2) · s · s_w)
 *
 * Each fused kernel rounds where the composition rounds (backend/fused.h), so
 * the block computes the same function; the conformance kit on CUDA runs
 * this path. Everything is queued on the context's stream: no host
 * synchronization and no allocation besides the caching allocator's reuse.
 * The CPU and other layouts keep block.c.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/fused.h"
#include "backend/kernel_policy.h"
#include "model/dit/model.h"

bool mm_dit_cuda_path_applies(const mm_dit_request *r)
{
    const mm_dit *d = r->dit;
    const mm_dit_config *c = &d->cfg;
    if (mm_ctx_device(r->ctx).kind != MM_DEVICE_CUDA || !mm_kernel_policy_get()->dit_fused)
        return false;
    const int64_t A = (int64_t)c->heads * c->head_dim;
    if (c->hidden % 256 || A % 256 || c->ffn % 256)
        return false;
    for (int b = 0; b < c->layers; b++)
        for (int i = 0; i < 4; i++) {
            const mm_linear *lin = &d->blocks[b].lin[i];
            if (lin->format != MM_WEIGHT_CONVROT_I8 || lin->group != 256 || lin->bias.data)
                return false;
        }
    return true;
}

/* Which Hopper kernels this request runs (backend/fused.h: the
 * kernel policy and the first-use self-checks decide there); fast mode's
 * self-check runs only once a request asks for fast mode. */
static void choose_paths(mm_dit_request *r)
{
    mm_dit_kernel_paths_get(mm_ctx_device(r->ctx), r->fast, &r->paths);
    r->paths_fast = r->fast;
}

int mm_dit_cuda_setup(mm_dit_request *r, mm_error *err)
{
    if (!r->cuda_path)
        return 0;
    choose_paths(r);
    const mm_dit_config *c = &r->dit->cfg;
    const int64_t shape[2] = {(int64_t)MM_DIT_MAX_TIMESTEPS * c->modalities, 6 * (int64_t)c->hidden};
    if (mm_tensor_alloc(&r->mod_f32, mm_ctx_device(r->ctx), MM_F32, 2, shape, err) != 0)
        return -1;
    r->bytes += mm_tensor_nbytes(&r->mod_f32);
    return 0;
}

void mm_dit_cuda_teardown(mm_dit_request *r) { mm_tensor_free(&r->mod_f32); }

void mm_dit_request_set_fast(mm_dit_request *r, bool fast)
{
    r->fast = fast;
    if (r->cuda_path && fast && !r->paths_fast)
        choose_paths(r);
}

void mm_dit_request_set_profile(mm_dit_request *r, const mm_dit_profile *p)
{
    if (p)
        r->profile = *p;
    else
        memset(&r->profile, 0, sizeof r->profile);
}

/* The Hopper attention mode this request runs, or -1 for mm_attention;
 * cross: fewer (or more) queries than keys (the reference KV cache's hook),
 * a case with its own self-check verdict. */
static int fa3_mode(const mm_dit_request *r, bool cross)
{
    if (r->fast && r->paths.fast_fa3 && (!cross || r->paths.fast_fa3_cross))
        return (int)MM_FA3_FAST;
    return r->paths.fa3 && (!cross || r->paths.fa3_cross) ? (int)MM_FA3_EXACT : -1;
}

static int sdpa(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    const int mode = r->cuda_path ? fa3_mode(r, q->shape[0] != k->shape[0]) : -1;
    if (mode >= 0 && mm_fa3_fits(r->ctx, o, q, k, v))
        return mm_attention_fa3(r->ctx, o, q, k, v, 0.0f, (mm_fa3_mode)mode);
    return mm_attention(r->ctx, o, q, k, v, NULL);
}

int mm_dit_sdpa(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    return sdpa(r, o, q, k, v);
}

static const char *kind(const mm_dit_request *r, bool cross)
{
    if (!r->cuda_path)
        return r->fast ? "mm_attention (fast mode needs the fused CUDA path: exact)" : "mm_attention";
    const mm_dit_config *c = &r->dit->cfg;
    /* The views the blocks pass: [S, heads, head_dim] thirds of the fused qkv buffer. */
    const int64_t A = (int64_t)c->heads * c->head_dim;
    mm_tensor qkv = mm_dit_rows(&r->ws.qkv, r->rows);
    mm_tensor q3 = mm_tensor_narrow(&qkv, 1, 0, A), k3 = mm_tensor_narrow(&qkv, 1, A, A);
    mm_tensor v3 = mm_tensor_narrow(&qkv, 1, 2 * A, A), o2 = mm_dit_rows(&r->ws.attn, r->rows);
    const int64_t head[2] = {c->heads, c->head_dim};
    mm_tensor qh = mm_tensor_unflatten(&q3, 1, 2, head), kh = mm_tensor_unflatten(&k3, 1, 2, head);
    mm_tensor vh = mm_tensor_unflatten(&v3, 1, 2, head), oh = mm_tensor_unflatten(&o2, 1, 2, head);
    const int mode = fa3_mode(r, cross);
    const bool fits = mm_fa3_fits(r->ctx, &oh, &qh, &kh, &vh);
    if (mode == MM_FA3_FAST && fits)
        return "fa3-i8-e4m3 (fast)";
    if (mode == MM_FA3_EXACT && fits)
        return r->fast ? "fa3-bf16 (fast mode without its kernel: exact)" : "fa3-bf16";
    return r->fast ? "mm_attention (fast mode without its kernel: exact)" : "mm_attention";
}

const char *mm_dit_attention_kind(const mm_dit_request *r)
{
    return r->attention ? "hook (the caller's attention)" : kind(r, false);
}

const char *mm_dit_sdpa_kind(const mm_dit_request *r, bool fewer_queries) { return kind(r, fewer_queries); }

static void mark(const mm_dit_request *r, int block, const char *stage)
{
    if (r->profile.mark && r->profile.block == block)
        r->profile.mark(r->profile.user, stage);
}

static int attention(mm_dit_request *r, int block, mm_tensor *o, mm_tensor *q, mm_tensor *k, mm_tensor *v)
{
    if (r->attention)
        return r->attention(r->attention_user, r->ctx, o, q, k, v);
    if (!mm_dit_sparse_applies(r))
        return sdpa(r, o, q, k, v);
    mm_dit_sparse_route(r, q, k, v);
    mark(r, block, "attention (sparse)");
    return mm_dit_sparse_attend(r, o, q, k, v);
}

/* The int8 linears: the Hopper kernel with the epilogue fused where the
 * policy picked it (bit for bit the same values), cuBLASLt + the epilogue
 * kernel otherwise. gate: the block's f32 AdaLN column view, or NULL for a
 * plain store; add: an adapter branch's f32 delta, or NULL. */
static void qlinear(mm_dit_request *r, mm_tensor *y, const mm_tensor *q, const mm_tensor *s, const mm_linear *w,
                    const mm_tensor *gate32, const mm_tensor *gate16, const mm_tensor *add)
{
    mm_ctx *ctx = r->ctx;
    const mm_tensor *idx = &r->ws.adaln_idx;
    if (add) {
        mm_fused_gemm_i8_scaled_add(ctx, y, q, s, &w->weight, &w->weight_scale, gate16, gate16 ? idx : NULL, add);
        return;
    }
    if (r->paths.qgemm && mm_qgemm_fits(ctx, y, q, &w->weight)) {
        mm_qgemm(ctx, y, q, s, &w->weight, &w->weight_scale, gate32, gate32 ? idx : NULL);
        return;
    }
    if (gate16)
        mm_fused_gemm_i8_scaled_gated(ctx, y, q, s, &w->weight, &w->weight_scale, gate16, idx);
    else
        mm_gemm_i8_scaled(ctx, y, q, s, &w->weight, &w->weight_scale, NULL);
}

/* ------------------------------------------------------------ adapters */

/* A linear's pieces stacked for the fused branch (model.h); a_all stays
 * empty when they do not fit it (more than 4096 ranks in all). */
static int stack_pieces(mm_dit_request *r, const mm_linear *lin, const mm_dit_lora_list *l, mm_dit_lora_fused *f,
                        mm_error *err)
{
    mm_ctx *ctx = r->ctx;
    const mm_device dev = mm_ctx_device(ctx);
    int64_t rk = 0;
    for (int i = 0; i < l->n; i++)
        rk += l->p[i].rank;
    rk = (rk + 63) / 64 * 64;
    if (rk > 4096)
        return 0;
    const int64_t N = lin->out_features, K = lin->in_features, tiles = (N + 255) / 256;
    uint64_t *mask = calloc((size_t)tiles, sizeof *mask);
    if (!mask)
        return mm_fail(err, "out of memory");
    int rc = -1;
    if (mm_tensor_zeros(&f->a_all, dev, MM_BF16, 2, MM_SHAPE(rk, K), err) != 0 ||
        mm_tensor_zeros(&f->b_all, dev, MM_BF16, 2, MM_SHAPE(N, rk), err) != 0 ||
        mm_tensor_alloc(&f->mask, dev, MM_I64, 1, MM_SHAPE(tiles), err) != 0)
        goto done;
    int64_t col = 0;
    for (int i = 0; i < l->n; i++) {
        const mm_dit_lora_piece *p = &l->p[i];
        mm_tensor a_rows = mm_tensor_narrow(&f->a_all, 0, col, p->rank);
        mm_tensor b_rows = mm_tensor_narrow(&f->b_all, 0, p->row0, p->rows);
        mm_tensor b_block = mm_tensor_narrow(&b_rows, 1, col, p->rank);
        mm_axpby(ctx, &a_rows, p->s, p->a, 0.0f, NULL); /* the strength and scale folded into A, rounded once */
        mm_copy(ctx, &b_block, p->b);
        for (int64_t t = p->row0 / 256; t <= (p->row0 + p->rows - 1) / 256; t++)
            for (int64_t c = col / 64; c <= (col + p->rank - 1) / 64; c++)
                mask[t] |= 1ull << c;
        col += p->rank;
    }
    mm_tensor host = mm_tensor_wrap(mask, mm_cpu(), MM_I64, 1, MM_SHAPE(tiles));
    mm_copy(ctx, &f->mask, &host);
    rc = mm_ctx_sync(ctx, err); /* the host mask must outlive its copy */
    if (rc == 0)
        r->bytes += mm_tensor_nbytes(&f->a_all) + mm_tensor_nbytes(&f->b_all) + mm_tensor_nbytes(&f->mask);
done:
    free(mask);
    return rc;
}

const char *mm_dit_lora_path(const mm_dit_request *r)
{
    if (!r->lora)
        return "none";
    if (!r->cuda_path)
        return "branch on the ops (composition)";
    return r->lora_fused ? "fused into the Hopper int8 GEMM" : "f32 addend in the int8 epilogue (cuBLASLt path)";
}

int mm_dit_cuda_lora_setup(mm_dit_request *r, mm_error *err)
{
    if (!r->cuda_path || !r->lora || !r->paths.qgemm || !mm_qgemm_lora_ready(r->ctx))
        return 0;
    const mm_dit_config *c = &r->dit->cfg;
    r->lora_fused = calloc((size_t)c->layers * 4, sizeof *r->lora_fused);
    if (!r->lora_fused)
        return mm_fail(err, "out of memory");
    int64_t rk_max = 0;
    for (int b = 0; b < c->layers; b++)
        for (int w = 0; w < 4; w++) {
            const mm_dit_lora_list *l = mm_dit_lora_for(r, &r->dit->blocks[b], w);
            mm_dit_lora_fused *f = &r->lora_fused[b * 4 + w];
            if (!l)
                continue;
            if (stack_pieces(r, &r->dit->blocks[b].lin[w], l, f, err) != 0)
                return mm_error_prefix(err, "LoRA: blocks.%d linear %d", b, w);
            if (f->a_all.data && f->a_all.shape[0] > rk_max)
                rk_max = f->a_all.shape[0];
        }
    if (rk_max && mm_tensor_alloc(&r->lora_uall, mm_ctx_device(r->ctx), MM_BF16, 2, MM_SHAPE(r->rows, rk_max), err))
        return -1;
    r->bytes += mm_tensor_nbytes(&r->lora_uall);
    return 0;
}

void mm_dit_cuda_lora_teardown(mm_dit_request *r)
{
    if (r->lora_fused)
        for (int i = 0; i < r->dit->cfg.layers * 4; i++) {
            mm_tensor_free(&r->lora_fused[i].a_all);
            mm_tensor_free(&r->lora_fused[i].b_all);
            mm_tensor_free(&r->lora_fused[i].mask);
        }
    free(r->lora_fused);
    r->lora_fused = NULL;
    mm_tensor_free(&r->lora_uall);
}

/* An adapted int8 linear: the branch fused into the Hopper GEMM (u by one
 * bf16 GEMM from the linear's input x, B·u on the GEMM's accumulators), or
 * else the branch's f32 sums (lora_branch.c) as the cuBLASLt path's addend.
 * Without pieces, qlinear. */
static void qlinear_lora(mm_dit_request *r, int block, int which, mm_tensor *y, const mm_tensor *q, const mm_tensor *s,
                         const mm_linear *w, const mm_tensor *gate32, const mm_tensor *gate16, const mm_tensor *x)
{
    const mm_dit_lora_list *l = mm_dit_lora_for(r, &r->dit->blocks[block], which);
    if (!l) {
        qlinear(r, y, q, s, w, gate32, gate16, NULL);
        return;
    }
    mm_ctx *ctx = r->ctx;
    const mm_dit_lora_fused *f = r->lora_fused ? &r->lora_fused[block * 4 + which] : NULL;
    if (f && f->a_all.data && mm_qgemm_fits(ctx, y, q, &w->weight)) {
        mm_tensor u = mm_tensor_wrap(r->lora_uall.data, r->lora_uall.device, MM_BF16, 2,
                                     MM_SHAPE(x->shape[0], f->a_all.shape[0]));
        mm_tensor at = mm_tensor_transpose(&f->a_all, 0, 1);
        mm_gemm(ctx, &u, x, &at, NULL, 1.0f, 0.0f);
        mm_qgemm_lora(ctx, y, q, s, &w->weight, &w->weight_scale, gate32, gate32 ? &r->ws.adaln_idx : NULL, &u,
                      &f->b_all, &f->mask);
        return;
    }
    mm_tensor delta;
    if (mm_dit_lora_acc(r, x->shape[0], w->out_features, &delta) != 0)
        return;
    mm_fill(ctx, &delta, 0.0);
    mm_dit_lora_accumulate(r, &delta, x, l);
    qlinear(r, y, q, s, w, gate32, gate16, &delta);
}

/* The entry of either half of a block: RMSNorm + AdaLN modulation + ConvRot
 * quant of the residual stream (written as bf16 to h too when linear `which`
 * has an adapter, whose input it is), then that linear's int8 GEMM into y. */
static void modulated_qlinear(mm_dit_request *r, int block, int which, const mm_tensor *norm_w, const mm_tensor *scale,
                              const mm_tensor *shift, mm_tensor *y, mm_tensor *q8, mm_tensor *s8, mm_tensor *h,
                              const char *norm_stage, const char *gemm_stage)
{
    const mm_dit_block_weights *bw = &r->dit->blocks[block];
    const bool adapted = mm_dit_lora_for(r, bw, which);
    mark(r, block, norm_stage);
    mm_fused_rmsnorm_modulate_convrot(r->ctx, q8, s8, adapted ? h : NULL, &r->ws.x, norm_w, r->dit->cfg.norm_eps, scale,
                                      shift, &r->ws.adaln_idx);
    mark(r, block, gemm_stage);
    qlinear_lora(r, block, which, y, q8, s8, &bw->lin[which], NULL, NULL, h);
}

int mm_dit_block_cuda(mm_dit_request *r, int block)
{
    const mm_dit *d = r->dit;
    const mm_dit_config *c = &d->cfg;
    const mm_dit_block_weights *bw = &d->blocks[block];
    mm_ctx *ctx = r->ctx;
    mm_dit_workspace *ws = &r->ws;
    const int64_t S = r->rows, H = c->hidden, A = (int64_t)c->heads * c->head_dim, F = c->ffn;
    const int64_t head[2] = {c->heads, c->head_dim};

    /* The block's AdaLN rows as [timesteps·modalities, 6H]; chunk i is a column view. */
    const int64_t trows = (int64_t)r->m * c->modalities;
    mm_tensor table = mm_tensor_wrap(ws->mod.data, ws->mod.device, MM_BF16, 2, (int64_t[]){trows, 6 * H});
    mm_tensor shift_msa = mm_tensor_narrow(&table, 1, 0, H), scale_msa = mm_tensor_narrow(&table, 1, H, H);
    mm_tensor gate_msa = mm_tensor_narrow(&table, 1, 2 * H, H), shift_mlp = mm_tensor_narrow(&table, 1, 3 * H, H);
    mm_tensor scale_mlp = mm_tensor_narrow(&table, 1, 4 * H, H), gate_mlp = mm_tensor_narrow(&table, 1, 5 * H, H);
    /* the same rows as f32 (exact), for the gated epilogues of the Hopper GEMM */
    mm_tensor table32 = mm_tensor_wrap(r->mod_f32.data, r->mod_f32.device, MM_F32, 2, (int64_t[]){trows, 6 * H});
    if (r->paths.qgemm)
        mm_copy(ctx, &table32, &table);
    mm_tensor gate_msa32 = mm_tensor_narrow(&table32, 1, 2 * H, H), gate_mlp32 = mm_tensor_narrow(&table32, 1, 5 * H, H);

    /* int8 codes and row scales of the current GEMM's input, in the request's scratch */
    mm_tensor s8 = mm_tensor_wrap(ws->s8.data, ws->s8.device, MM_F32, 1, (int64_t[]){S});
    mm_tensor q8h = mm_tensor_wrap(ws->q8.data, ws->q8.device, MM_I8, 2, (int64_t[]){S, H});
    mm_tensor q8a = mm_tensor_wrap(ws->q8.data, ws->q8.device, MM_I8, 2, (int64_t[]){S, A});
    mm_tensor q8f = mm_tensor_wrap(ws->q8.data, ws->q8.device, MM_I8, 2, (int64_t[]){S, F});
    const mm_linear *out_w = &bw->lin[MM_DIT_OUT], *fc2_w = &bw->lin[MM_DIT_FC2];

    mm_tensor qkv = mm_dit_rows(&ws->qkv, S), o2 = mm_dit_rows(&ws->attn, S), fc1 = mm_dit_rows(&ws->fc1, S);
    mm_tensor q3 = mm_tensor_narrow(&qkv, 1, 0, A), k3 = mm_tensor_narrow(&qkv, 1, A, A);
    mm_tensor v3 = mm_tensor_narrow(&qkv, 1, 2 * A, A);
    mm_tensor q = mm_tensor_unflatten(&q3, 1, 2, head), k = mm_tensor_unflatten(&k3, 1, 2, head);
    mm_tensor v = mm_tensor_unflatten(&v3, 1, 2, head), o = mm_tensor_unflatten(&o2, 1, 2, head);
    mm_tensor cs = mm_dit_rows(&r->rope_cos, S), sn = mm_dit_rows(&r->rope_sin, S);

    /* adapters: the bf16 inputs of the adapted linears (h, glu), written by the fused passes only then */
    const bool l2 = mm_dit_lora_for(r, bw, MM_DIT_FC2);
    mm_tensor h = mm_dit_rows(&ws->h, S), glu = mm_dit_rows(&ws->glu, S);

    modulated_qlinear(r, block, MM_DIT_QKV, &bw->norm1, &scale_msa, &shift_msa, &qkv, &q8h, &s8, &h,
                      "norm1 + modulation + ConvRot quant", "qkv int8 GEMM");
    mark(r, block, "q/k norm + RoPE");
    mm_fused_qk_rmsnorm_rope(ctx, &q, &k, &bw->q_norm, &bw->k_norm, c->qk_norm_eps, &cs, &sn, c->rope_dim);
    mark(r, block, mm_dit_sparse_applies(r) ? "sparse routing" : "attention");
    attention(r, block, &o, &q, &k, &v);
    mark(r, block, "attn ConvRot quant");
    mm_convrot_quantize(ctx, &q8a, &s8, &o2, out_w->group);
    mark(r, block, "out int8 GEMM + gated residual");
    qlinear_lora(r, block, MM_DIT_OUT, &ws->x, &q8a, &s8, out_w, &gate_msa32, &gate_msa, &o2);
    modulated_qlinear(r, block, MM_DIT_FC1, &bw->norm2, &scale_mlp, &shift_mlp, &fc1, &q8h, &s8, &h,
                      "norm2 + modulation + ConvRot quant", "fc1 int8 GEMM");
    mark(r, block, "SwiGLU + ConvRot quant");
    mm_fused_swiglu_convrot(ctx, &q8f, &s8, l2 ? &glu : NULL, &fc1);
    mark(r, block, "fc2 int8 GEMM + gated residual");
    qlinear_lora(r, block, MM_DIT_FC2, &ws->x, &q8f, &s8, fc2_w, &gate_mlp32, &gate_mlp, &glu);
    mark(r, block, NULL);
    return mm_ctx_failed(ctx) ? -1 : 0;
}
