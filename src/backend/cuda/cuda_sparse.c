/* The mm_tensor face of kernels/mmk_sparse.h (see cuda_sparse.h). Built only
 * with the CUDA backend (cuda_sparse_stub.c otherwise). */
#include "config.h"

#ifdef MMH3_HAVE_CUDA
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_sparse.h"
#include "kernels/mmk_sparse.h"

/* bf16 [S, H, 128] with unit-stride rows, heads 128 apart, rows a multiple of 8 elements apart, 16-byte aligned. */
static bool head_view(const mm_tensor *t)
{
    return t->dtype == MM_BF16 && t->shape[2] == 128 && (t->shape[1] == 1 || t->stride[1] == 128) &&
           t->stride[0] % 8 == 0 && ((uintptr_t)t->data & 15) == 0 && t->shape[0] <= INT32_MAX;
}

static int qkv_args(mm_ctx *ctx, const char *op, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                    float scale, mmk_sparse_qkv *x)
{
    if (!head_view(q) || !head_view(k) || !head_view(v))
        return mm_ctx_fail(ctx, "%s (CUDA): q, k, v must be bf16 [S, H, 128] views (heads 128 apart, rows a multiple "
                           "of 8 elements apart, 16-byte aligned); the CPU twin takes any float layout", op);
    memset(x, 0, sizeof *x);
    x->seq = (int)q->shape[0];
    x->heads = (int)q->shape[1];
    x->heads_kv = (int)k->shape[1];
    x->q = q->data;
    x->k = k->data;
    x->v = v->data;
    x->ldq = q->stride[0];
    x->ldk = k->stride[0];
    x->ldv = v->stride[0];
    x->scale = scale > 0 ? scale : 1.0f / sqrtf(128.0f);
    return 0;
}

static bool route_contiguous(const mm_sparse_route *r)
{
    return mm_tensor_is_contiguous(&r->mask) && mm_tensor_is_contiguous(&r->count) &&
           mm_tensor_is_contiguous(&r->kc) && mm_tensor_is_contiguous(&r->vc) && mm_tensor_is_contiguous(&r->thr);
}

int mm_cuda_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,
                                const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally)
{
    static const char *op = "mm_sparse_route_blocks";
    mmk_sparse_route_args a;
    memset(&a, 0, sizeof a);
    if (qkv_args(ctx, op, q, k, v, p->scale, &a.x) != 0)
        return -1;
    if (!route_contiguous(route))
        return mm_ctx_fail(ctx, "%s (CUDA): the route's tensors must be contiguous (mm_sparse_route_alloc)", op);
    a.policy = p->policy == MM_SPARSE_TOPK ? MMK_SPARSE_TOPK : p->policy == MM_SPARSE_FORCED ? MMK_SPARSE_FORCED
                                                                                             : MMK_SPARSE_SOL;
    a.tau = p->tau;
    a.thresh_exact = p->thresh == MM_SPARSE_THRESH_EXACT;
    a.keep = p->keep;
    a.band = p->band;
    a.seed = p->seed;
    a.n_sink = p->n_sink_kv;
    a.n_dense = p->n_dense_q;
    for (int i = 0; i < p->n_sink_kv; i++) {
        a.sink[i][0] = p->sink_kv[i].begin;
        a.sink[i][1] = p->sink_kv[i].end;
    }
    for (int i = 0; i < p->n_dense_q; i++) {
        a.dense[i][0] = p->dense_q[i].begin;
        a.dense[i][1] = p->dense_q[i].end;
    }
    a.blocks = (int)route->blocks;
    a.words = (int)route->words;
    a.mask = route->mask.data;
    a.count = route->count.data;
    a.kc = route->kc.data;
    a.vc = route->vc.data;
    a.thr = route->thr.data;
    a.tally = tally ? tally->data : NULL;
    mm_error e = {{0}};
    if (mmk_sparse_route_run(mm_ctx_device(ctx).index, (mmk_stream)mm_ctx_stream(ctx), &a, &e) != 0)
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}

int mm_cuda_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                             const mm_sparse_route *route, const mm_sparse_attn_params *p)
{
    static const char *op = "mm_sparse_attention";
    mmk_sparse_attn_args a;
    memset(&a, 0, sizeof a);
    if (qkv_args(ctx, op, q, k, v, p->scale, &a.x) != 0)
        return -1;
    if (!head_view(out) || !route_contiguous(route))
        return mm_ctx_fail(ctx, "%s (CUDA): out must be a bf16 [S, H, 128] view like q, the route contiguous", op);
    a.o = out->data;
    a.ldo = out->stride[0];
    a.mask = route->mask.data;
    a.count = route->count.data;
    a.kc = route->kc.data;
    a.vc = route->vc.data;
    a.blocks = (int)route->blocks;
    a.words = (int)route->words;
    a.approximate = p->approximate;
    a.kernel = MMK_SPARSE_AUTO;
    a.fast = p->mode == MM_SPARSE_FAST;
    mm_error e = {{0}};
    if (mmk_sparse_attn_run(mm_ctx_device(ctx).index, (mmk_stream)mm_ctx_stream(ctx), &a, &e) != 0)
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}

const char *mm_cuda_sparse_kind(int dev, mm_sparse_mode mode) { return mmk_sparse_kind(dev, mode == MM_SPARSE_FAST); }
#else
typedef int mm_cuda_sparse_unused; /* ISO C forbids an empty translation unit */
#endif
