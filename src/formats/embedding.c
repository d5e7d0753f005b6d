#include "formats/embedding.h"

#include <stdio.h>
#include <string.h>

#include "formats/linear.h"

int mm_embedding_load(mm_embedding *e, const mm_safetensors *st, const char *prefix, mm_error *err)
{
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", prefix);
    const char *path = mm_st_path(st);
    char k[256];
    snprintf(k, sizeof k, "%s.weight", prefix);
    if (mm_st_get(st, k, &e->weight, err) != 0)
        return -1;
    char sb[96];
    if (e->weight.ndim != 2)
        return mm_fail(err, "%s: %s has shape %s; an embedding table is 2-D", path, k,
                       mm_shape_str(e->weight.ndim, e->weight.shape, sb, sizeof sb));
    e->vocab = e->weight.shape[0];
    e->dim = e->weight.shape[1];
    snprintf(k, sizeof k, "%s.comfy_quant", prefix);
    const mm_st_entry *m = mm_st_find(st, k);
    if (!m) {
        mm_dtype t = e->weight.dtype;
        if (t != MM_F32 && t != MM_BF16 && t != MM_F16)
            return mm_fail(err, "%s: %s.weight is %s without a comfy_quant marker; accepted: F32/BF16/F16 or int8 "
                                "with its marker",
                           path, prefix, mm_dtype_name(t));
        return 0;
    }
    mm_tensor marker;
    char fmt[64];
    bool convrot;
    int group;
    if (mm_st_get(st, k, &marker, err) != 0 || mm_comfy_quant_parse(&marker, fmt, sizeof fmt, &convrot, &group, err) != 0)
        return mm_error_prefix(err, "%s: %s", path, k);
    if (strcmp(fmt, "int8_tensorwise") != 0 || convrot)
        return mm_fail(err, "%s: %s: embedding format \"%s\"%s not supported; accepted: int8_tensorwise (no convrot)",
                       path, prefix, fmt, convrot ? " with convrot" : "");
    if (e->weight.dtype != MM_I8)
        return mm_fail(err, "%s: %s.weight is %s; int8_tensorwise stores I8", path, prefix,
                       mm_dtype_name(e->weight.dtype));
    mm_tensor s;
    snprintf(k, sizeof k, "%s.weight_scale", prefix);
    if (mm_st_get(st, k, &s, err) != 0)
        return -1;
    if (s.dtype != MM_F32 || mm_tensor_numel(&s) != e->vocab || !(s.ndim == 1 || (s.ndim == 2 && s.shape[1] == 1)))
        return mm_fail(err, "%s: %s must be F32 [%lld, 1] (one scale per row), file has %s %s", path, k,
                       (long long)e->vocab, mm_dtype_name(s.dtype), mm_shape_str(s.ndim, s.shape, sb, sizeof sb));
    e->scale = mm_tensor_wrap(s.data, s.device, MM_F32, 1, MM_SHAPE(e->vocab));
    e->quantized = true;
    return 0;
}

void mm_embedding_free(mm_embedding *e)
{
    if (!e)
        return;
    mm_tensor_free(&e->weight);
    mm_tensor_free(&e->scale);
}

int mm_embedding_forward(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_embedding *e)
{
    if (e->quantized)
        return mm_embedding_i8(ctx, out, ids, &e->weight, &e->scale);
    return mm_gather_rows(ctx, out, &e->weight, ids);
}
