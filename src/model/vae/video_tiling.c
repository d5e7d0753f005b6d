/* Spatial tile plans and the linear blends of the video VAE (vae.md §2.5). */
#include <stdlib.h>
#include <string.h>

#include "model/vae/vae_common.h"
#include "model/vae/video_tiling.h"

int mm_vae_tile_plan_make(int64_t length, int64_t tile, int64_t overlap_min, int64_t step, bool tiling,
                          mm_vae_tile_plan *p, mm_error *err)
{
    memset(p, 0, sizeof *p);
    if (length <= 0)
        return mm_fail(err, "tile plan: length %lld must be positive", (long long)length);
    if (!tiling || length <= tile) {
        p->n = 1;
        p->len[0] = length;
        return 0;
    }
    if (tile <= 0 || overlap_min < 0 || overlap_min >= tile || step <= 0)
        return mm_fail(err, "tile plan: tile %lld, minimum overlap %lld, step %lld (accepted: 0 <= overlap < tile, step > 0)",
                       (long long)tile, (long long)overlap_min, (long long)step);
    int64_t n = (length + tile - 1) / tile;
    while (tile * n - overlap_min * (n - 1) < length)
        n++;
    if (n > MM_VAE_MAX_TILES)
        return mm_fail(err, "tile plan: %lld px needs %lld tiles of %lld (at most %d)", (long long)length, (long long)n,
                       (long long)tile, MM_VAE_MAX_TILES);
    p->n = (int)n;
    int64_t slack = tile * n - overlap_min * (n - 1) - length;
    for (int i = 0; i < p->n - 1; i++)
        p->overlap[i] = overlap_min;
    for (int64_t k = 0; k < slack / step; k++)
        p->overlap[k % (n - 1)] += step;
    for (int i = 0; i < p->n; i++) {
        p->start[i] = i ? p->start[i - 1] + tile - p->overlap[i - 1] : 0;
        /* a tile running past the end is cut, as a slice of the frame would be */
        p->len[i] = length - p->start[i] < tile ? length - p->start[i] : tile;
    }
    return 0;
}

void mm_vae_tile_plan_scale(const mm_vae_tile_plan *p, int64_t div, const int64_t *out_len, mm_vae_tile_plan *q)
{
    mm_vae_tile_plan r = {.n = p->n};
    for (int i = 0; i < p->n; i++) {
        r.start[i] = p->start[i] / div;
        r.len[i] = out_len[i];
        r.overlap[i] = i < p->n - 1 ? p->overlap[i] / div : 0;
    }
    *q = r;
}

int64_t mm_vae_tile_plan_extent(const mm_vae_tile_plan *p) { return p->start[p->n - 1] + p->len[p->n - 1]; }

int mm_vae_blend(mm_ctx *ctx, mm_tensor *b, const mm_tensor *a, int dim, int64_t e)
{
    if (mm_ctx_failed(ctx))
        return -1;
    int64_t count = b->shape[dim];
    if (count <= 0)
        return 0;
    if (count > e || e <= 0)
        return mm_ctx_fail(ctx, "blend: %lld samples over an extent of %lld", (long long)count, (long long)e);
    float *ramp = malloc(sizeof(float) * 2 * (size_t)count);
    if (!ramp)
        return mm_ctx_fail(ctx, "blend: out of memory");
    for (int64_t k = 0; k < count; k++) {
        ramp[k] = (float)k / (float)e;      /* weight of the later tile */
        ramp[count + k] = 1.0f - ramp[k];   /* weight of the earlier one */
    }
    mm_tensor w = {0}, tmp = {0};
    int rc = -1;
    if (vae_new(ctx, &w, MM_F32, 1, MM_SHAPE(2 * count)) != 0)
        goto out;
    mm_tensor host = mm_tensor_wrap(ramp, mm_cpu(), MM_F32, 1, MM_SHAPE(2 * count));
    mm_copy(ctx, &w, &host);
    if (vae_new(ctx, &tmp, MM_F32, b->ndim, b->shape) != 0)
        goto out;
    mm_tensor wb = mm_tensor_narrow(&w, 0, 0, count), wa = mm_tensor_narrow(&w, 0, count, count);
    mm_tensor vb = vae_channel_view(&wb, b->ndim, b->shape, dim);
    mm_tensor va = vae_channel_view(&wa, b->ndim, b->shape, dim);
    mm_mul(ctx, &tmp, a, &va);
    mm_mul(ctx, b, b, &vb);
    mm_add(ctx, b, b, &tmp);
    rc = mm_ctx_failed(ctx) ? -1 : 0;
out:
    /* host->device copies are complete on return and device frees are
     * stream-ordered, so nothing waits here */
    mm_tensor_free(&tmp);
    mm_tensor_free(&w);
    free(ramp);
    return rc;
}

/* Blends the seam of tile dst with its original neighbour a along spatial
 * axis (2 = H, 3 = W): the first rows of dst with the last rows of a
 * (a_len long), over the overlap clipped to both tiles and to the part
 * dst keeps, and over the `across` positions dst keeps on the other axis. */
static void blend_seam(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *a, int axis, int64_t a_len, int64_t overlap,
                       int64_t tile_len, int64_t kept, int64_t across)
{
    int64_t e = overlap < a_len ? overlap : a_len;
    e = e < tile_len ? e : tile_len;
    int64_t cnt = e < kept ? e : kept;
    if (cnt <= 0)
        return;
    mm_tensor b = mm_tensor_narrow(dst, axis, 0, cnt);
    mm_tensor av = mm_tensor_narrow(a, axis, a_len - e, cnt);
    av = mm_tensor_narrow(&av, axis == 2 ? 3 : 2, 0, across);
    mm_vae_blend(ctx, &b, &av, axis, e);
}

int mm_vae_stitch(mm_ctx *ctx, mm_tensor *out, const mm_tensor *tiles, const mm_vae_tile_plan *py,
                  const mm_vae_tile_plan *px)
{
    for (int i = 0; i < py->n; i++) {
        for (int j = 0; j < px->n; j++) {
            const mm_tensor *t = &tiles[i * px->n + j];
            int64_t th = py->len[i], tw = px->len[j];
            if (t->shape[2] != th || t->shape[3] != tw)
                return mm_ctx_fail(ctx, "stitch: tile (%d, %d) is %lld x %lld, the plan says %lld x %lld", i, j,
                                   (long long)t->shape[2], (long long)t->shape[3], (long long)th, (long long)tw);
            int64_t ch = i < py->n - 1 ? th - py->overlap[i] : th;
            int64_t cw = j < px->n - 1 ? tw - px->overlap[j] : tw;
            if (ch <= 0 || cw <= 0)
                return mm_ctx_fail(ctx, "stitch: tile (%d, %d) overlaps its successor entirely", i, j);
            mm_tensor dst = mm_tensor_narrow(out, 2, py->start[i], ch);
            dst = mm_tensor_narrow(&dst, 3, px->start[j], cw);
            mm_tensor src = mm_tensor_narrow(t, 2, 0, ch);
            src = mm_tensor_narrow(&src, 3, 0, cw);
            mm_copy(ctx, &dst, &src);
            if (i > 0) /* with the original tile above, along H */
                blend_seam(ctx, &dst, &tiles[(i - 1) * px->n + j], 2, py->len[i - 1], py->overlap[i - 1], th, ch, cw);
            if (j > 0) /* then with the original tile to the left, along W */
                blend_seam(ctx, &dst, &tiles[i * px->n + j - 1], 3, px->len[j - 1], px->overlap[j - 1], tw, cw, ch);
        }
    }
    return mm_ctx_failed(ctx) ? -1 : 0;
}
