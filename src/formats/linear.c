#include "formats/linear.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *mm_weight_format_name(mm_weight_format f)
{
    switch (f) {
    case MM_WEIGHT_DENSE: return "dense";
    case MM_WEIGHT_CONVROT_I8: return "int8-convrot";
    case MM_WEIGHT_NVFP4: return "nvfp4";
    }
    return "?";
}

int mm_comfy_quant_parse(const mm_tensor *marker, char *format, size_t format_len, bool *convrot, int *group,
                         mm_error *err)
{
    *convrot = false;
    *group = 0;
    if (marker->dtype != MM_U8 || marker->ndim != 1)
        return mm_fail(err, "comfy_quant marker must be U8 [n] JSON bytes (got %s rank %d)",
                       mm_dtype_name(marker->dtype), marker->ndim);
    json_error_t je;
    json_t *root = json_loadb(marker->data, (size_t)marker->shape[0], 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return mm_fail(err, "comfy_quant marker is not a JSON object");
    }
    const char *f = json_string_value(json_object_get(root, "format"));
    if (!f) {
        json_decref(root);
        return mm_fail(err, "comfy_quant marker has no \"format\"");
    }
    snprintf(format, format_len, "%s", f);
    json_t *c = json_object_get(root, "convrot");
    *convrot = json_is_true(c);
    json_t *g = json_object_get(root, "convrot_groupsize");
    if (json_is_integer(g))
        *group = (int)json_integer_value(g);
    else if (*convrot)
        *group = 256; /* comfy-kitchen's default */
    json_decref(root);
    return 0;
}

static int key(char *buf, size_t n, const char *prefix, const char *suffix)
{
    return snprintf(buf, n, "%s.%s", prefix, suffix) < (int)n ? 0 : -1;
}

static bool has(const mm_safetensors *st, const char *prefix, const char *suffix)
{
    char k[256];
    return key(k, sizeof k, prefix, suffix) == 0 && mm_st_find(st, k) != NULL;
}

static int get(const mm_safetensors *st, const char *prefix, const char *suffix, mm_tensor *out, mm_error *err)
{
    char k[256];
    if (key(k, sizeof k, prefix, suffix) != 0)
        return mm_fail(err, "%s: key prefix too long", prefix);
    return mm_st_get(st, k, out, err);
}

static int load_bias(mm_linear *lin, const mm_safetensors *st, const char *prefix, mm_error *err)
{
    if (!has(st, prefix, "bias"))
        return 0;
    if (get(st, prefix, "bias", &lin->bias, err) != 0)
        return -1;
    mm_dtype t = lin->bias.dtype;
    if ((t != MM_F32 && t != MM_BF16 && t != MM_F16) || lin->bias.ndim != 1 ||
        lin->bias.shape[0] != lin->out_features)
        return mm_fail(err, "%s: %s.bias must be an F32/BF16/F16 vector of %lld elements", mm_st_path(st), prefix,
                       (long long)lin->out_features);
    return 0;
}

static bool dense_dtype(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

int mm_linear_load(mm_linear *lin, const mm_safetensors *st, const char *prefix, mm_error *err)
{
    memset(lin, 0, sizeof *lin);
    snprintf(lin->name, sizeof lin->name, "%s", prefix);
    const char *path = mm_st_path(st);
    mm_tensor w;
    if (get(st, prefix, "weight", &w, err) != 0)
        return -1;
    char sb[96];
    if (w.ndim != 2)
        return mm_fail(err, "%s: %s.weight has shape %s; a linear weight is 2-D", path, prefix,
                       mm_shape_str(w.ndim, w.shape, sb, sizeof sb));
    lin->weight = w;
    if (!has(st, prefix, "comfy_quant")) {
        if (!dense_dtype(w.dtype))
            return mm_fail(err,
                           "%s: %s.weight is %s without a comfy_quant marker; accepted: F32/BF16/F16, or a quantized "
                           "weight with its marker",
                           path, prefix, mm_dtype_name(w.dtype));
        lin->format = MM_WEIGHT_DENSE;
        lin->out_features = w.shape[0];
        lin->in_features = w.shape[1];
        return load_bias(lin, st, prefix, err);
    }
    mm_tensor marker;
    if (get(st, prefix, "comfy_quant", &marker, err) != 0)
        return -1;
    char fmt[64];
    bool convrot;
    int group;
    if (mm_comfy_quant_parse(&marker, fmt, sizeof fmt, &convrot, &group, err) != 0)
        return mm_error_prefix(err, "%s: %s.comfy_quant", path, prefix);

    if (strcmp(fmt, "int8_tensorwise") == 0) {
        if (!convrot)
            return mm_fail(err,
                           "%s: %s: int8_tensorwise without convrot is supported for embeddings only, not as a "
                           "linear",
                           path, prefix);
        if (w.dtype != MM_I8)
            return mm_fail(err, "%s: %s.weight is %s; the int8 ConvRot format stores I8", path, prefix,
                           mm_dtype_name(w.dtype));
        if (group != 4 && group != 16 && group != 64 && group != 256)
            return mm_fail(err, "%s: %s: convrot_groupsize %d; accepted: 4, 16, 64, 256", path, prefix, group);
        lin->format = MM_WEIGHT_CONVROT_I8;
        lin->group = group;
        lin->out_features = w.shape[0];
        lin->in_features = w.shape[1];
        if (lin->in_features % group != 0)
            return mm_fail(err, "%s: %s: %lld input features are not a multiple of the ConvRot group %d", path,
                           prefix, (long long)lin->in_features, group);
        mm_tensor s;
        if (get(st, prefix, "weight_scale", &s, err) != 0)
            return -1;
        if (s.dtype != MM_F32)
            return mm_fail(err, "%s: %s.weight_scale is %s, F32 expected", path, prefix, mm_dtype_name(s.dtype));
        int64_t n = lin->out_features, numel = mm_tensor_numel(&s);
        if (numel == n && (s.ndim == 1 || (s.ndim == 2 && s.shape[1] == 1))) {
            lin->weight_scale = mm_tensor_wrap(s.data, s.device, MM_F32, 1, MM_SHAPE(n));
        } else if (numel == 1) { /* a true tensorwise scale: broadcast */
            lin->weight_scale = mm_tensor_wrap(s.data, s.device, MM_F32, 1, MM_SHAPE(n));
            lin->weight_scale.stride[0] = 0;
        } else {
            return mm_fail(err, "%s: %s.weight_scale has shape %s; [%lld, 1], [%lld] or a scalar expected", path,
                           prefix, mm_shape_str(s.ndim, s.shape, sb, sizeof sb), (long long)n, (long long)n);
        }
        return load_bias(lin, st, prefix, err);
    }

    if (strcmp(fmt, "nvfp4") == 0) {
        if (w.dtype != MM_U8)
            return mm_fail(err, "%s: %s.weight is %s; nvfp4 stores packed U8", path, prefix, mm_dtype_name(w.dtype));
        lin->format = MM_WEIGHT_NVFP4;
        lin->out_features = w.shape[0];
        lin->in_features = w.shape[1] * 2;
        int64_t n = lin->out_features, k = lin->in_features;
        if (n % 128 != 0 || k % 64 != 0)
            return mm_fail(err,
                           "%s: %s: nvfp4 weight [%lld, %lld] is not tile-aligned (rows multiple of 128, columns of "
                           "64); padded layouts are not supported",
                           path, prefix, (long long)n, (long long)k);
        if (get(st, prefix, "weight_scale", &lin->weight_scale, err) != 0)
            return -1;
        if (lin->weight_scale.dtype != MM_F8_E4M3 ||
            mm_tensor_expect_shape(&lin->weight_scale, 2, MM_SHAPE(n, k / 16), "weight_scale", err) != 0)
            return mm_fail(err, "%s: %s.weight_scale must be F8_E4M3 [%lld, %lld] (file has %s %s)", path, prefix,
                           (long long)n, (long long)(k / 16), mm_dtype_name(lin->weight_scale.dtype),
                           mm_shape_str(lin->weight_scale.ndim, lin->weight_scale.shape, sb, sizeof sb));
        mm_tensor s2;
        if (get(st, prefix, "weight_scale_2", &s2, err) != 0)
            return -1;
        if (s2.dtype != MM_F32 || mm_tensor_numel(&s2) != 1)
            return mm_fail(err, "%s: %s.weight_scale_2 must be one F32 value", path, prefix);
        memcpy(&lin->weight_scale_2, s2.data, 4);
        if (!isfinite(lin->weight_scale_2) || lin->weight_scale_2 < 0)
            return mm_fail(err, "%s: %s.weight_scale_2 = %g is not a finite non-negative scale", path, prefix,
                           lin->weight_scale_2);
        if (has(st, prefix, "pre_quant_scale")) {
            if (get(st, prefix, "pre_quant_scale", &lin->pre_quant_scale, err) != 0)
                return -1;
            if (!dense_dtype(lin->pre_quant_scale.dtype) || lin->pre_quant_scale.ndim != 1 ||
                lin->pre_quant_scale.shape[0] != k)
                return mm_fail(err, "%s: %s.pre_quant_scale must be a float vector of %lld elements", path, prefix,
                               (long long)k);
        }
        return load_bias(lin, st, prefix, err);
    }
    return mm_fail(err, "%s: %s: comfy_quant format \"%s\" is not supported; accepted: int8_tensorwise (ConvRot), nvfp4",
                   path, prefix, fmt);
}

int mm_linear_expect(const mm_linear *lin, int64_t out_features, int64_t in_features, mm_error *err)
{
    if (lin->out_features == out_features && lin->in_features == in_features)
        return 0;
    return mm_fail(err, "%s: %lld x %lld (out x in) expected, the file has %lld x %lld (%s)", lin->name,
                   (long long)out_features, (long long)in_features, (long long)lin->out_features,
                   (long long)lin->in_features, mm_weight_format_name(lin->format));
}

/* ------------------------------------------------------------ ownership */

static int copy_to(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src, mm_error *err)
{
    memset(dst, 0, sizeof *dst);
    if (!src->data)
        return 0;
    mm_tensor s = *src;
    int64_t n = mm_tensor_numel(src);
    bool bcast = src->ndim == 1 && src->stride[0] == 0 && n > 0;
    if (bcast) /* keep a broadcast scalar a scalar */
        s = mm_tensor_wrap(src->data, src->device, src->dtype, 1, MM_SHAPE(1));
    if (mm_tensor_alloc(dst, mm_ctx_device(ctx), s.dtype, s.ndim, s.shape, err) != 0)
        return -1;
    if (mm_copy(ctx, dst, &s) != 0 || mm_ctx_error(ctx, err) != 0) {
        mm_tensor_free(dst);
        return -1;
    }
    if (bcast) {
        dst->shape[0] = n;
        dst->stride[0] = 0;
    }
    return 0;
}

int mm_linear_to_device(mm_linear *dst, const mm_linear *src, mm_ctx *ctx, mm_error *err)
{
    *dst = *src;
    memset(&dst->weight, 0, sizeof dst->weight);
    memset(&dst->weight_scale, 0, sizeof dst->weight_scale);
    memset(&dst->pre_quant_scale, 0, sizeof dst->pre_quant_scale);
    memset(&dst->bias, 0, sizeof dst->bias);
    memset(&dst->dense_cache, 0, sizeof dst->dense_cache);
    if (copy_to(ctx, &dst->weight, &src->weight, err) != 0 ||
        copy_to(ctx, &dst->weight_scale, &src->weight_scale, err) != 0 ||
        copy_to(ctx, &dst->pre_quant_scale, &src->pre_quant_scale, err) != 0 ||
        copy_to(ctx, &dst->bias, &src->bias, err) != 0) {
        mm_linear_free(dst);
        return mm_error_prefix(err, "%s", src->name);
    }
    return 0;
}

void mm_linear_free(mm_linear *lin)
{
    if (!lin)
        return;
    mm_tensor_free(&lin->weight);
    mm_tensor_free(&lin->weight_scale);
    mm_tensor_free(&lin->pre_quant_scale);
    mm_tensor_free(&lin->bias);
    mm_tensor_free(&lin->dense_cache);
}

/* ------------------------------------------------------------- forward */

static const mm_tensor *opt(const mm_tensor *t) { return t->data ? t : NULL; }

/* Scratch on the ctx's device; failures go to the ctx. */
static int scratch(mm_ctx *ctx, mm_tensor *t, mm_dtype dt, int64_t a, int64_t b, int ndim)
{
    mm_error e = {{0}};
    int64_t shape[2] = {a, b};
    if (mm_tensor_alloc(t, mm_ctx_device(ctx), dt, ndim, shape, &e) != 0)
        return mm_ctx_fail(ctx, "mm_linear_forward: %s", e.msg);
    return 0;
}

int mm_linear_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_linear *lin)
{
    if (mm_ctx_failed(ctx))
        return -1;
    int64_t n = lin->out_features, k = lin->in_features;
    if (out->ndim != 2 || out->shape[0] != n || out->shape[1] != k)
        return mm_ctx_fail(ctx, "mm_linear_dequantize: %s: out must be [%lld, %lld]", lin->name, (long long)n,
                           (long long)k);
    switch (lin->format) {
    case MM_WEIGHT_DENSE: return mm_copy(ctx, out, &lin->weight);
    case MM_WEIGHT_NVFP4:
        return mm_nvfp4_dequantize(ctx, out, &lin->weight, &lin->weight_scale, lin->weight_scale_2);
    case MM_WEIGHT_CONVROT_I8: {
        /* q_w * s_w[n] as a GEMM-free elementwise product: i8 -> float copy, then scale rows */
        mm_tensor s = mm_tensor_unflatten(&lin->weight_scale, 0, 2, MM_SHAPE(n, 1));
        mm_tensor se = mm_tensor_expand(&s, 2, MM_SHAPE(n, k));
        mm_tensor tmp;
        if (scratch(ctx, &tmp, MM_F32, n, k, 2) != 0)
            return -1;
        mm_copy(ctx, &tmp, &lin->weight);
        mm_mul(ctx, out, &tmp, &se);
        mm_tensor_free(&tmp);
        return mm_ctx_failed(ctx) ? -1 : 0;
    }
    }
    return mm_ctx_fail(ctx, "mm_linear_dequantize: unknown format");
}

int mm_linear_materialize(mm_ctx *ctx, mm_linear *lin, mm_dtype dtype, mm_error *err)
{
    if (lin->format != MM_WEIGHT_NVFP4)
        return mm_fail(err, "%s: only nvfp4 linears are materialized (format %s)", lin->name,
                       mm_weight_format_name(lin->format));
    mm_tensor_free(&lin->dense_cache);
    if (mm_tensor_alloc(&lin->dense_cache, mm_ctx_device(ctx), dtype, 2, MM_SHAPE(lin->out_features, lin->in_features),
                        err) != 0)
        return mm_error_prefix(err, "%s", lin->name);
    if (mm_linear_dequantize(ctx, &lin->dense_cache, lin) != 0 || mm_ctx_error(ctx, err) != 0) {
        mm_tensor_free(&lin->dense_cache);
        return mm_error_prefix(err, "%s", lin->name);
    }
    return 0;
}

int mm_linear_forward(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_linear *lin)
{
    if (mm_ctx_failed(ctx))
        return -1;
    int64_t n = lin->out_features, k = lin->in_features;
    if (!x || !out || x->ndim != 2 || out->ndim != 2 || x->shape[1] != k || out->shape[1] != n ||
        out->shape[0] != x->shape[0]) {
        char a[96], b[96];
        return mm_ctx_fail(ctx, "mm_linear_forward: %s (%lld -> %lld): x %s, out %s; x [R, %lld] and out [R, %lld] "
                                "expected",
                           lin->name, (long long)k, (long long)n, x ? mm_shape_str(x->ndim, x->shape, a, sizeof a) : "NULL",
                           out ? mm_shape_str(out->ndim, out->shape, b, sizeof b) : "NULL", (long long)k,
                           (long long)n);
    }
    int64_t r = x->shape[0];
    switch (lin->format) {
    case MM_WEIGHT_DENSE: {
        mm_tensor wt = mm_tensor_transpose(&lin->weight, 0, 1);
        if (x->dtype == lin->weight.dtype)
            return mm_matmul(ctx, out, x, &wt, opt(&lin->bias));
        mm_tensor xc;
        if (scratch(ctx, &xc, lin->weight.dtype, r, k, 2) != 0)
            return -1;
        mm_copy(ctx, &xc, x);
        mm_matmul(ctx, out, &xc, &wt, opt(&lin->bias));
        mm_tensor_free(&xc);
        return mm_ctx_failed(ctx) ? -1 : 0;
    }
    case MM_WEIGHT_CONVROT_I8: {
        mm_tensor q, s;
        if (scratch(ctx, &q, MM_I8, r, k, 2) != 0)
            return -1;
        if (scratch(ctx, &s, MM_F32, r, 1, 1) != 0) {
            mm_tensor_free(&q);
            return -1;
        }
        mm_convrot_quantize(ctx, &q, &s, x, lin->group);
        mm_gemm_i8_scaled(ctx, out, &q, &s, &lin->weight, &lin->weight_scale, opt(&lin->bias));
        mm_tensor_free(&q);
        mm_tensor_free(&s);
        return mm_ctx_failed(ctx) ? -1 : 0;
    }
    case MM_WEIGHT_NVFP4: {
        mm_tensor w = lin->dense_cache, xs = {0};
        bool own_w = false;
        const mm_tensor *xin = x;
        if (!w.data || w.dtype != x->dtype) {
            if (scratch(ctx, &w, x->dtype, n, k, 2) != 0)
                return -1;
            own_w = true;
            if (lin->dense_cache.data)
                mm_copy(ctx, &w, &lin->dense_cache);
            else
                mm_nvfp4_dequantize(ctx, &w, &lin->weight, &lin->weight_scale, lin->weight_scale_2);
        }
        if (lin->pre_quant_scale.data) { /* AWQ: x * s, rounded to x's dtype */
            if (scratch(ctx, &xs, x->dtype, r, k, 2) != 0) {
                if (own_w)
                    mm_tensor_free(&w);
                return -1;
            }
            mm_tensor s2 = mm_tensor_unflatten(&lin->pre_quant_scale, 0, 2, MM_SHAPE(1, k));
            mm_tensor se = mm_tensor_expand(&s2, 2, MM_SHAPE(r, k));
            mm_mul(ctx, &xs, x, &se);
            xin = &xs;
        }
        mm_tensor wt = mm_tensor_transpose(&w, 0, 1);
        mm_matmul(ctx, out, xin, &wt, opt(&lin->bias));
        if (own_w)
            mm_tensor_free(&w);
        mm_tensor_free(&xs);
        return mm_ctx_failed(ctx) ? -1 : 0;
    }
    }
    return mm_ctx_fail(ctx, "mm_linear_forward: %s: unknown format", lin->name);
}
