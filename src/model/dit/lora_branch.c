/* LoRA adapters on the DiT (fewstep.md §2.6, docs/LORA.md): never merged
 * into the weights. Per adapted linear, each piece (one low-rank pair of one
 * adapter, possibly on a row slice of the output) adds
 *
 *   u   = bf16(s · x·Aᵀ)            s = strength · alpha / rank, f32 accumulation, one rounding
 *   acc[:, row0 : row0 + rows] += u·Bᵀ    f32 accumulation, into the base GEMM's f32 result
 *
 * and the linear's output is rounded once from acc. x is the linear's bf16
 * input before the ConvRot rotation and quantization, so the branch sees
 * the activation the reference's LoRA sees; the int8 weights are untouched,
 * so switching adapters between requests costs nothing but these lists.
 * This file builds the per-linear lists of a request and runs the branch on
 * the op API (CPU and CUDA alike); the fused CUDA block feeds the same
 * branch into its GEMM epilogues (dit_block_cuda.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit/model.h"

/* Linear slots: block b's linear w at b·4 + w, the refiner's after them,
 * condition_proj last. */
static int slot_of(const mm_dit_config *c, mm_lora_scope scope, int index, int which)
{
    switch (scope) {
    case MM_LORA_BLOCK: return index * 4 + which;
    case MM_LORA_REFINER: return (c->layers + index) * 4 + which;
    case MM_LORA_CONDITION: return (c->layers + c->refiner_layers) * 4;
    default: return -1;
    }
}

const mm_dit_lora_list *mm_dit_lora_for(const mm_dit_request *r, const mm_dit_block_weights *bw, int which)
{
    if (!r->lora)
        return NULL;
    const mm_dit *d = r->dit;
    const mm_dit_config *c = &d->cfg;
    int slot;
    if (!bw)
        slot = slot_of(c, MM_LORA_CONDITION, 0, 0);
    else if (bw >= d->blocks && bw < d->blocks + c->layers)
        slot = slot_of(c, MM_LORA_BLOCK, (int)(bw - d->blocks), which);
    else if (bw >= d->refiner && bw < d->refiner + c->refiner_layers)
        slot = slot_of(c, MM_LORA_REFINER, (int)(bw - d->refiner), which);
    else
        return NULL;
    const mm_dit_lora_list *l = &r->lora[slot];
    return l->n ? l : NULL;
}

/* What no part of the DiT applies at run time, refused with the reason
 * (AdaLN pairs, head banks and time pairs are adaln_adapters.c's). */
static int refuse_extras(const mm_lora *l, mm_error *err)
{
    return mm_fail(err,
                   "%s: FastVideo v2 full-rank parts (%s, ...) cannot run as an adapter; fold them into the "
                   "weights offline with `mmh3 convert` (fewstep.md §8.1)",
                   l->path, l->dense[0].key);
}

static int check_use(const mm_dit_request *r, const mm_lora_use *u, mm_error *err)
{
    const mm_lora *l = u->lora;
    if (!l)
        return mm_fail(err, "an adapter slot is empty");
    if (!isfinite(u->strength))
        return mm_fail(err, "%s: strength %g is not a finite number", l->path, u->strength);
    if (!l->uploaded || !mm_device_eq(l->device, mm_ctx_device(r->ctx))) {
        char dev[32];
        return mm_fail(err, "%s: not resident on %s (mm_lora_upload first)", l->path,
                       mm_device_name(mm_ctx_device(r->ctx), dev, sizeof dev));
    }
    if (mm_lora_fit(l, &r->dit->cfg, err) != 0)
        return -1;
    if (l->n_dense) /* AdaLN pairs, banks and time pairs: adaln_adapters.c takes or refuses them */
        return refuse_extras(l, err);
    return 0;
}

int mm_dit_lora_setup(mm_dit_request *r, const mm_lora_use *uses, int n, mm_error *err)
{
    if (n <= 0)
        return 0;
    const mm_dit_config *c = &r->dit->cfg;
    if (n > MM_LORA_MAX_USES)
        return mm_fail(err, "%d adapters in one request; at most %d", n, MM_LORA_MAX_USES);
    for (int i = 0; i < n; i++)
        if (check_use(r, &uses[i], err) != 0)
            return -1;
    r->n_lora_lists = (c->layers + c->refiner_layers) * 4 + 1;
    r->lora = calloc((size_t)r->n_lora_lists, sizeof *r->lora);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += uses[i].lora->n_pairs;
    mm_dit_lora_piece *pool = calloc((size_t)(total ? total : 1), sizeof *pool);
    if (!r->lora || !pool) {
        free(pool);
        return mm_fail(err, "out of memory");
    }
    /* count per slot, then hand out consecutive runs of the pool (lists own
     * nothing; the pool hangs off slot 0's list) */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < uses[i].lora->n_pairs; k++) {
            const mm_lora_pair *p = &uses[i].lora->pairs[k];
            if (mm_lora_which_part(p->which) == MM_LORA_PART_LINEAR) /* AdaLN / time pairs: adaln_adapters.c */
                r->lora[slot_of(c, p->scope, p->index, p->which)].n++;
        }
    int at = 0;
    for (int s = 0; s < r->n_lora_lists; s++) {
        r->lora[s].p = pool + at;
        at += r->lora[s].n;
        r->lora[s].n = 0;
    }
    int max_rank = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < uses[i].lora->n_pairs; k++) {
            const mm_lora_pair *p = &uses[i].lora->pairs[k];
            if (mm_lora_which_part(p->which) != MM_LORA_PART_LINEAR)
                continue;
            mm_dit_lora_list *l = &r->lora[slot_of(c, p->scope, p->index, p->which)];
            l->p[l->n++] = (mm_dit_lora_piece){&p->dev_a, &p->dev_b, p->row0, p->rows, p->rank,
                                               uses[i].strength * p->scale};
            max_rank = p->rank > max_rank ? p->rank : max_rank;
        }
    mm_device dev = mm_ctx_device(r->ctx);
    if (mm_tensor_alloc(&r->lora_u, dev, MM_BF16, 2, MM_SHAPE(r->rows, max_rank ? max_rank : 1), err) != 0)
        return mm_error_prefix(err, "LoRA scratch");
    r->bytes += mm_tensor_nbytes(&r->lora_u);
    return 0;
}

void mm_dit_lora_teardown(mm_dit_request *r)
{
    if (r->lora)
        free(r->lora[0].p);
    free(r->lora);
    r->lora = NULL;
    mm_tensor_free(&r->lora_u);
    mm_tensor_free(&r->lora_acc);
}

int mm_dit_lora_acc(mm_dit_request *r, int64_t rows, int64_t n, mm_tensor *out)
{
    const mm_dit_config *c = &r->dit->cfg;
    const int64_t A = (int64_t)c->heads * c->head_dim, F = c->ffn, H = c->hidden;
    const int64_t width = 3 * A > 2 * F ? 3 * A : 2 * F > H ? 2 * F : H;
    if (n > width || rows > r->rows)
        return mm_ctx_fail(r->ctx, "dit: LoRA accumulator [%lld, %lld] beyond the request's [%lld, %lld]",
                           (long long)rows, (long long)n, (long long)r->rows, (long long)width);
    if (!r->lora_acc.data || r->lora_acc.shape[0] < rows) {
        /* once per request for its largest use: the refiner's text rows first, then (off the fused
         * GEMM) the blocks' S rows */
        mm_error e = {{0}};
        r->bytes -= r->lora_acc.data ? mm_tensor_nbytes(&r->lora_acc) : 0;
        mm_tensor_free(&r->lora_acc);
        if (mm_tensor_alloc(&r->lora_acc, mm_ctx_device(r->ctx), MM_F32, 2, MM_SHAPE(rows, width), &e) != 0)
            return mm_ctx_fail(r->ctx, "LoRA accumulator: %s", e.msg);
        r->bytes += mm_tensor_nbytes(&r->lora_acc);
    }
    *out = mm_tensor_wrap(r->lora_acc.data, r->lora_acc.device, MM_F32, 2, MM_SHAPE(rows, n));
    return 0;
}

int mm_dit_lora_accumulate(mm_dit_request *r, mm_tensor *acc, const mm_tensor *x, const mm_dit_lora_list *l)
{
    mm_ctx *ctx = r->ctx;
    const int64_t rows = x->shape[0];
    for (int i = 0; i < l->n; i++) {
        const mm_dit_lora_piece *p = &l->p[i];
        mm_tensor u = mm_tensor_wrap(r->lora_u.data, r->lora_u.device, MM_BF16, 2, MM_SHAPE(rows, p->rank));
        mm_tensor at = mm_tensor_transpose(p->a, 0, 1), bt = mm_tensor_transpose(p->b, 0, 1);
        mm_tensor slice = mm_tensor_narrow(acc, 1, p->row0, p->rows);
        mm_gemm(ctx, &u, x, &at, NULL, p->s, 0.0f);
        mm_gemm(ctx, &slice, &u, &bt, NULL, 1.0f, 1.0f);
    }
    return mm_ctx_failed(ctx) ? -1 : 0;
}
