/* Block-sparse attention: argument checks and device dispatch (the
 * semantics are in sparse_attn.h, the twins in cpu/sparse_attn.c and
 * cuda/cuda_sparse.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_sparse.h"
#include "backend/cuda/cuda_sparse.h"
#include "backend/sparse_attn.h"

int mm_sparse_route_alloc(mm_sparse_route *r, mm_device dev, int64_t rows, int64_t heads, int64_t heads_kv,
                          int64_t head_dim, mm_error *err)
{
    memset(r, 0, sizeof *r);
    if (rows < 1 || heads < 1 || heads_kv < 1 || head_dim < 1 || heads % heads_kv)
        return mm_fail(err, "sparse attention: cannot route %lld rows of %lld heads over %lld kv heads of %lld",
                       (long long)rows, (long long)heads, (long long)heads_kv, (long long)head_dim);
    const int64_t NT = (rows + MM_SPARSE_BLOCK - 1) / MM_SPARSE_BLOCK, W = (NT + 31) / 32;
    r->rows = rows;
    r->heads = heads;
    r->heads_kv = heads_kv;
    r->head_dim = head_dim;
    r->blocks = NT;
    r->words = W;
    if (mm_tensor_alloc(&r->mask, dev, MM_I32, 3, (int64_t[]){NT, heads, W}, err) != 0 ||
        mm_tensor_alloc(&r->count, dev, MM_I32, 2, (int64_t[]){NT, heads}, err) != 0 ||
        mm_tensor_alloc(&r->kc, dev, MM_BF16, 3, (int64_t[]){NT, heads_kv, head_dim}, err) != 0 ||
        mm_tensor_alloc(&r->vc, dev, MM_BF16, 3, (int64_t[]){NT, heads_kv, head_dim}, err) != 0 ||
        mm_tensor_alloc(&r->thr, dev, MM_F32, 2, (int64_t[]){NT, heads}, err) != 0) {
        mm_sparse_route_free(r);
        return mm_error_prefix(err, "sparse attention: routing buffers for %lld rows", (long long)rows);
    }
    return 0;
}

void mm_sparse_route_free(mm_sparse_route *r)
{
    if (!r)
        return;
    mm_tensor *all[] = {&r->mask, &r->count, &r->kc, &r->vc, &r->thr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
}

void mm_sparse_block_flags(const mm_row_range *r, int n, int64_t blocks, uint8_t *flags)
{
    memset(flags, 0, (size_t)blocks);
    for (int i = 0; i < n; i++) {
        if (r[i].end <= r[i].begin)
            continue;
        int64_t b0 = r[i].begin / MM_SPARSE_BLOCK, b1 = (r[i].end - 1) / MM_SPARSE_BLOCK;
        for (int64_t b = b0 < 0 ? 0 : b0; b <= b1 && b < blocks; b++)
            flags[b] = 1;
    }
}

int64_t mm_sparse_topk_budget(double keep, int64_t blocks)
{
    int64_t want = (int64_t)ceil(keep * (double)blocks - 1e-9);
    int64_t k = (want < 1 ? 1 : (want + 7) / 8) * 8;
    return k < blocks ? k : blocks;
}

/* A [S, H, D] float view with unit-stride rows, on the context's device. */
static int head_view(mm_ctx *ctx, const char *op, const char *name, const mm_tensor *t)
{
    if (!t || (!t->data && mm_tensor_numel(t)))
        return mm_ctx_fail(ctx, "%s: %s is missing or an invalid view", op, name);
    if (!mm_device_eq(t->device, mm_ctx_device(ctx)))
        return mm_ctx_fail(ctx, "%s: %s is not on the context's device", op, name);
    if (t->ndim != 3 || (t->shape[2] > 1 && t->stride[2] != 1))
        return mm_ctx_fail(ctx, "%s: %s must be [S, H, D] with unit-stride rows", op, name);
    if (t->dtype != MM_BF16 && t->dtype != MM_F16 && t->dtype != MM_F32)
        return mm_ctx_fail(ctx, "%s: %s has dtype %s; accepted: BF16, F16, F32", op, name, mm_dtype_name(t->dtype));
    return 0;
}

static int ranges_ok(mm_ctx *ctx, const char *op, const char *name, const mm_row_range *r, int n)
{
    if (n < 0 || n > MM_SPARSE_MAX_RANGES || (n > 0 && !r))
        return mm_ctx_fail(ctx, "%s: %d %s ranges given; 0 to %d accepted", op, n, name, MM_SPARSE_MAX_RANGES);
    return 0;
}

/* q, k, v shaped as sparse_attn.h says and the route allocated for them. */
static int shapes_ok(mm_ctx *ctx, const char *op, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     const mm_sparse_route *r)
{
    if (head_view(ctx, op, "q", q) || head_view(ctx, op, "k", k) || head_view(ctx, op, "v", v))
        return -1;
    const int64_t S = q->shape[0], H = q->shape[1], D = q->shape[2], Hkv = k->shape[1];
    if (k->shape[0] != S || v->shape[0] != S || v->shape[1] != Hkv || k->shape[2] != D || v->shape[2] != D)
        return mm_ctx_fail(ctx, "%s: q [%lld, %lld, %lld] needs k and v [%lld, Hkv, %lld] (self-attention, one "
                           "head dim)", op, (long long)S, (long long)H, (long long)D, (long long)S, (long long)D);
    if (Hkv < 1 || H % Hkv)
        return mm_ctx_fail(ctx, "%s: %lld query heads are not a multiple of %lld kv heads", op, (long long)H,
                           (long long)Hkv);
    if (!r || r->rows != S || r->heads != H || r->heads_kv != Hkv || r->head_dim != D || !r->mask.data)
        return mm_ctx_fail(ctx, "%s: the route was not allocated for %lld rows, %lld/%lld heads of %lld "
                           "(mm_sparse_route_alloc)", op, (long long)S, (long long)H, (long long)Hkv, (long long)D);
    if (!mm_device_eq(r->mask.device, mm_ctx_device(ctx)))
        return mm_ctx_fail(ctx, "%s: the route lives on another device than the context", op);
    return 0;
}

int mm_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                    const mm_sparse_route_params *p, mm_tensor *tally)
{
    static const char *op = "mm_sparse_route_blocks";
    if (mm_ctx_failed(ctx))
        return -1;
    if (shapes_ok(ctx, op, q, k, v, route))
        return -1;
    if (!p || p->policy < MM_SPARSE_SOL || p->policy > MM_SPARSE_FORCED)
        return mm_ctx_fail(ctx, "%s: unknown routing policy", op);
    if (!isfinite(p->tau) || !(p->keep >= 0 && p->keep <= 1) || p->scale < 0 || !isfinite(p->scale))
        return mm_ctx_fail(ctx, "%s: tau must be finite, keep in [0, 1], scale >= 0 (tau %g, keep %g, scale %g)", op,
                           (double)p->tau, (double)p->keep, (double)p->scale);
    if (p->policy == MM_SPARSE_SOL && p->thresh != MM_SPARSE_THRESH_DIAG && p->thresh != MM_SPARSE_THRESH_EXACT)
        return mm_ctx_fail(ctx, "%s: unknown threshold type", op);
    if (ranges_ok(ctx, op, "sink", p->sink_kv, p->n_sink_kv) || ranges_ok(ctx, op, "dense-query", p->dense_q,
                                                                           p->n_dense_q))
        return -1;
    if (tally && (tally->dtype != MM_I64 || mm_tensor_numel(tally) != 1 ||
                  !mm_device_eq(tally->device, mm_ctx_device(ctx))))
        return mm_ctx_fail(ctx, "%s: the tally must be one I64 on the context's device", op);
    if (q->shape[0] == 0)
        return 0;
    if (mm_ctx_device(ctx).kind == MM_DEVICE_CUDA)
        return mm_cuda_sparse_route_blocks(ctx, route, q, k, v, p, tally);
    return mm_cpu_sparse_route_blocks(ctx, route, q, k, v, p, tally);
}

int mm_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                        const mm_sparse_route *route, const mm_sparse_attn_params *p)
{
    static const char *op = "mm_sparse_attention";
    if (mm_ctx_failed(ctx))
        return -1;
    if (shapes_ok(ctx, op, q, k, v, route) || head_view(ctx, op, "out", out))
        return -1;
    if (out->shape[0] != q->shape[0] || out->shape[1] != q->shape[1] || out->shape[2] != q->shape[2])
        return mm_ctx_fail(ctx, "%s: out must have q's shape", op);
    if (!p || p->scale < 0 || !isfinite(p->scale) || (p->mode != MM_SPARSE_EXACT && p->mode != MM_SPARSE_FAST))
        return mm_ctx_fail(ctx, "%s: bad parameters (scale >= 0, mode exact or fast)", op);
    if (q->shape[0] == 0)
        return 0;
    if (mm_ctx_device(ctx).kind == MM_DEVICE_CUDA)
        return mm_cuda_sparse_attention(ctx, out, q, k, v, route, p);
    return mm_cpu_sparse_attention(ctx, out, q, k, v, route, p);
}

const char *mm_sparse_attention_kind(mm_ctx *ctx, mm_sparse_mode mode)
{
    mm_device d = mm_ctx_device(ctx);
    if (d.kind == MM_DEVICE_CUDA)
        return mm_cuda_sparse_kind(d.index, mode);
    return "cpu (fp32)";
}
