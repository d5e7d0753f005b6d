/* Weight placement, scratch and capture helpers for the VAEs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vae/vae_common.h"

int vae_shape_of(const mm_safetensors *st, const char *kind, const char *name, int ndim, int64_t *shape,
                 mm_error *err)
{
    char file_kind[48];
    snprintf(file_kind, sizeof file_kind, "%s file", kind);
    const mm_st_entry *e = mm_st_find_config(st, name, ndim, file_kind, err);
    if (!e)
        return -1;
    memcpy(shape, e->shape, sizeof(int64_t) * (size_t)ndim);
    return 0;
}

int vae_store_add(vae_store *s, mm_tensor *t, mm_error *err)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        mm_tensor **items = realloc(s->items, cap * sizeof *items);
        if (!items)
            return mm_fail(err, "out of memory");
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = t;
    if (t->storage && t->device.kind != MM_DEVICE_CPU)
        s->device_bytes += mm_tensor_nbytes(t);
    return 0;
}

int vae_place(vae_store *s, mm_ctx *ctx, const mm_safetensors *st, const char *name, mm_dtype want, int ndim,
              const int64_t *shape, mm_tensor *out, mm_error *err)
{
    mm_tensor src;
    memset(out, 0, sizeof *out);
    if (mm_st_get(st, name, &src, err) != 0)
        return -1;
    if (!mm_dtype_is_float(src.dtype))
        return mm_fail(err, "%s: '%s' has dtype %s; accepted: F32, F16, BF16", mm_st_path(st), name,
                       mm_dtype_name(src.dtype));
    if (ndim >= 0 && mm_tensor_expect_shape(&src, ndim, shape, name, err) != 0)
        return mm_error_prefix(err, "%s", mm_st_path(st));
    if (want == MM_DTYPE_COUNT)
        want = src.dtype;
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind == MM_DEVICE_CPU && src.dtype == want) {
        *out = src;
        return vae_store_add(s, out, err);
    }
    if (mm_tensor_alloc(out, dev, want, src.ndim, src.shape, err) != 0)
        return mm_error_prefix(err, "%s", name);
    if (mm_copy_converting(ctx, out, &src, err) != 0) {
        mm_tensor_free(out);
        return mm_error_prefix(err, "loading %s", name);
    }
    return vae_store_add(s, out, err);
}

int vae_upload_f32(vae_store *s, mm_ctx *ctx, const float *host, int ndim, const int64_t *shape, mm_tensor *out,
                   mm_error *err)
{
    if (mm_tensor_alloc(out, mm_ctx_device(ctx), MM_F32, ndim, shape, err) != 0)
        return -1;
    mm_tensor src = mm_tensor_wrap((void *)host, mm_cpu(), MM_F32, ndim, shape);
    mm_copy(ctx, out, &src);
    if (mm_ctx_sync(ctx, err) != 0) {
        mm_tensor_free(out);
        return -1;
    }
    return vae_store_add(s, out, err);
}

void vae_store_free(vae_store *s)
{
    for (size_t i = 0; i < s->n; i++)
        mm_tensor_free(s->items[i]);
    free(s->items);
    memset(s, 0, sizeof *s);
}

int vae_count_indexed(const mm_safetensors *st, const char *fmt)
{
    char name[256];
    int n = 0;
    for (;;) {
        snprintf(name, sizeof name, fmt, n);
        if (mm_st_count_prefix(st, name) == 0)
            return n;
        n++;
    }
}

int vae_new(mm_ctx *ctx, mm_tensor *t, mm_dtype dtype, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    if (mm_ctx_failed(ctx))
        return -1;
    mm_error e;
    if (mm_tensor_alloc(t, mm_ctx_device(ctx), dtype, ndim, shape, &e) != 0)
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}

void vae_capture(const mm_vae_capture *cap, const char *name, const mm_tensor *t)
{
    if (cap && cap->fn)
        cap->fn(cap->user, name, t);
}

mm_tensor vae_channel_view(const mm_tensor *vec, int rank, const int64_t *shape, int cdim)
{
    int64_t shp[MM_MAX_DIMS], str[MM_MAX_DIMS];
    for (int d = 0; d < rank; d++) {
        shp[d] = shape[d];
        str[d] = d == cdim ? vec->stride[0] : 0;
    }
    return mm_tensor_as_strided(vec, rank, shp, str);
}
