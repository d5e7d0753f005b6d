#include "core/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"

struct mm_storage {
    void *base;
    mm_device device;
    size_t bytes;
};

const char *mm_device_name(mm_device d, char *buf, size_t n)
{
    if (d.kind == MM_DEVICE_CPU)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}

int mm_device_parse(const char *s, mm_device *out, mm_error *err)
{
    if (strcmp(s, "cpu") == 0) {
        *out = mm_cpu();
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *out = mm_cuda(0);
        return 0;
    }
    if (strncmp(s, "cuda:", 5) == 0) {
        char *end = NULL;
        long idx = strtol(s + 5, &end, 10);
        if (end != s + 5 && *end == '\0' && idx >= 0 && idx < 64) {
            *out = mm_cuda((int)idx);
            return 0;
        }
    }
    return mm_fail(err, "device '%s' not understood; accepted: cpu, cuda, cuda:N", s);
}

static void set_contiguous_strides(mm_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

static int init_desc(mm_tensor *t, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape, mm_error *err)
{
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > MM_MAX_DIMS)
        return mm_fail(err, "tensor rank %d out of range 0..%d", ndim, MM_MAX_DIMS);
    if ((unsigned)dtype >= MM_DTYPE_COUNT)
        return mm_fail(err, "invalid dtype %d", (int)dtype);
    t->dtype = dtype;
    t->device = dev;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return mm_fail(err, "negative dimension %" PRId64, shape[i]);
        t->shape[i] = shape[i];
    }
    set_contiguous_strides(t);
    return 0;
}

int mm_tensor_alloc(mm_tensor *t, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape, mm_error *err)
{
    if (init_desc(t, dev, dtype, ndim, shape, err) != 0)
        return -1;
    size_t bytes = mm_dtype_nbytes(dtype, mm_tensor_numel(t));
    mm_storage *s = calloc(1, sizeof *s);
    if (!s)
        return mm_fail(err, "out of host memory");
    s->device = dev;
    s->bytes = bytes;
    s->base = mm_device_malloc(dev, bytes ? bytes : 1, err);
    if (!s->base) {
        free(s);
        memset(t, 0, sizeof *t);
        return -1;
    }
    t->storage = s;
    t->data = s->base;
    return 0;
}

int mm_tensor_zeros(mm_tensor *t, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape, mm_error *err)
{
    if (mm_tensor_alloc(t, dev, dtype, ndim, shape, err) != 0)
        return -1;
    if (mm_device_memset0(dev, t->data, t->storage->bytes, err) != 0) {
        mm_tensor_free(t);
        return -1;
    }
    return 0;
}

void mm_tensor_free(mm_tensor *t)
{
    if (!t)
        return;
    if (t->storage) {
        mm_device_free(t->storage->device, t->storage->base);
        free(t->storage);
    }
    memset(t, 0, sizeof *t);
}

mm_tensor mm_tensor_wrap(void *data, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape)
{
    mm_tensor t;
    if (init_desc(&t, dev, dtype, ndim, shape, NULL) != 0)
        memset(&t, 0, sizeof t);
    t.data = data;
    return t;
}

int64_t mm_tensor_numel(const mm_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t mm_tensor_nbytes(const mm_tensor *t) { return mm_dtype_nbytes(t->dtype, mm_tensor_numel(t)); }

bool mm_tensor_is_contiguous(const mm_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

mm_tensor mm_tensor_view(const mm_tensor *t)
{
    mm_tensor v = *t;
    v.storage = NULL;
    return v;
}

mm_tensor mm_tensor_narrow(const mm_tensor *t, int dim, int64_t start, int64_t len)
{
    mm_tensor v = mm_tensor_view(t);
    if (dim < 0 || dim >= t->ndim || start < 0 || len < 0 || start + len > t->shape[dim]) {
        v.data = NULL; /* an invalid view: any use fails loudly */
        return v;
    }
    size_t bits = (size_t)mm_dtype_bits(t->dtype);
    v.data = (char *)t->data + (size_t)(start * t->stride[dim]) * bits / 8;
    v.shape[dim] = len;
    return v;
}

int mm_tensor_reshape(mm_tensor *out, const mm_tensor *t, int ndim, const int64_t *shape, mm_error *err)
{
    char a[96], b[96];
    if (!mm_tensor_is_contiguous(t))
        return mm_fail(err, "reshape of a non-contiguous tensor %s", mm_shape_str(t->ndim, t->shape, a, sizeof a));
    mm_tensor v;
    if (init_desc(&v, t->device, t->dtype, ndim, shape, err) != 0)
        return -1;
    if (mm_tensor_numel(&v) != mm_tensor_numel(t))
        return mm_fail(err, "cannot reshape %s to %s", mm_shape_str(t->ndim, t->shape, a, sizeof a),
                       mm_shape_str(ndim, shape, b, sizeof b));
    v.data = t->data;
    *out = v;
    return 0;
}

mm_tensor mm_tensor_transpose(const mm_tensor *t, int d0, int d1)
{
    mm_tensor v = mm_tensor_view(t);
    if (d0 < 0 || d1 < 0 || d0 >= t->ndim || d1 >= t->ndim) {
        v.data = NULL;
        return v;
    }
    int64_t s = v.shape[d0], st = v.stride[d0];
    v.shape[d0] = v.shape[d1];
    v.stride[d0] = v.stride[d1];
    v.shape[d1] = s;
    v.stride[d1] = st;
    return v;
}

mm_tensor mm_tensor_permute(const mm_tensor *t, const int *perm)
{
    mm_tensor v = mm_tensor_view(t);
    int seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || (seen & (1 << perm[i]))) {
            v.data = NULL;
            return v;
        }
        seen |= 1 << perm[i];
        v.shape[i] = t->shape[perm[i]];
        v.stride[i] = t->stride[perm[i]];
    }
    return v;
}

mm_tensor mm_tensor_unflatten(const mm_tensor *t, int dim, int n, const int64_t *sizes)
{
    mm_tensor v = mm_tensor_view(t);
    int64_t prod = 1;
    for (int i = 0; i < n; i++)
        prod *= sizes[i];
    if (dim < 0 || dim >= t->ndim || n < 1 || t->ndim - 1 + n > MM_MAX_DIMS || prod != t->shape[dim]) {
        v.data = NULL;
        return v;
    }
    v.ndim = t->ndim - 1 + n;
    for (int i = t->ndim - 1; i > dim; i--) {
        v.shape[i + n - 1] = t->shape[i];
        v.stride[i + n - 1] = t->stride[i];
    }
    int64_t s = t->stride[dim];
    for (int i = n - 1; i >= 0; i--) {
        v.shape[dim + i] = sizes[i];
        v.stride[dim + i] = s;
        s *= sizes[i];
    }
    return v;
}

mm_tensor mm_tensor_expand(const mm_tensor *t, int ndim, const int64_t *shape)
{
    mm_tensor v = mm_tensor_view(t);
    if (ndim != t->ndim) {
        v.data = NULL;
        return v;
    }
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] == shape[i])
            continue;
        if (t->shape[i] != 1 || shape[i] < 0) {
            v.data = NULL;
            return v;
        }
        v.shape[i] = shape[i];
        v.stride[i] = 0;
    }
    return v;
}

mm_tensor mm_tensor_select(const mm_tensor *t, int dim, int64_t i)
{
    mm_tensor v = mm_tensor_narrow(t, dim, i, 1);
    if (!v.data || i < 0)
        return v;
    for (int d = dim; d < v.ndim - 1; d++) {
        v.shape[d] = v.shape[d + 1];
        v.stride[d] = v.stride[d + 1];
    }
    v.ndim--;
    return v;
}

mm_tensor mm_tensor_as_strided(const mm_tensor *t, int ndim, const int64_t *shape, const int64_t *stride)
{
    mm_tensor v = mm_tensor_view(t);
    if (ndim < 0 || ndim > MM_MAX_DIMS) {
        v.data = NULL;
        return v;
    }
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v.shape[i] = shape[i];
        v.stride[i] = stride[i];
    }
    return v;
}

const char *mm_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

int mm_tensor_expect_shape(const mm_tensor *t, int ndim, const int64_t *shape, const char *what, mm_error *err)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return 0;
    char a[96], b[96];
    return mm_fail(err, "%s: shape %s expected, got %s", what, mm_shape_str(ndim, shape, a, sizeof a),
                   mm_shape_str(t->ndim, t->shape, b, sizeof b));
}

static int64_t elem_offset(const mm_tensor *t, const int64_t *index)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += index[i] * t->stride[i];
    return off;
}

double mm_tensor_get(const mm_tensor *t, const int64_t *index)
{
    int64_t o = elem_offset(t, index);
    const char *p = t->data;
    switch (t->dtype) {
    case MM_F32: return ((const float *)p)[o];
    case MM_F64: return ((const double *)p)[o];
    case MM_F16: return mm_f16_to_f32(((const uint16_t *)p)[o]);
    case MM_BF16: return mm_bf16_to_f32(((const uint16_t *)p)[o]);
    case MM_I8: return ((const int8_t *)p)[o];
    case MM_U8: case MM_BOOL: return ((const uint8_t *)p)[o];
    case MM_I16: return ((const int16_t *)p)[o];
    case MM_I32: return ((const int32_t *)p)[o];
    case MM_I64: return (double)((const int64_t *)p)[o];
    case MM_F8_E4M3: return mm_e4m3_to_f32(((const uint8_t *)p)[o]);
    case MM_F4_E2M1: {
        uint8_t byte = ((const uint8_t *)p)[o / 2];
        return mm_e2m1_to_f32((o & 1) ? (byte >> 4) : (byte & 15));
    }
    default: return 0.0;
    }
}

void mm_tensor_set(mm_tensor *t, const int64_t *index, double v)
{
    int64_t o = elem_offset(t, index);
    char *p = t->data;
    switch (t->dtype) {
    case MM_F32: ((float *)p)[o] = (float)v; break;
    case MM_F64: ((double *)p)[o] = v; break;
    case MM_F16: ((uint16_t *)p)[o] = mm_f32_to_f16((float)v); break;
    case MM_BF16: ((uint16_t *)p)[o] = mm_f32_to_bf16((float)v); break;
    case MM_I8: ((int8_t *)p)[o] = (int8_t)v; break;
    case MM_U8: case MM_BOOL: ((uint8_t *)p)[o] = (uint8_t)v; break;
    case MM_I16: ((int16_t *)p)[o] = (int16_t)v; break;
    case MM_I32: ((int32_t *)p)[o] = (int32_t)v; break;
    case MM_I64: ((int64_t *)p)[o] = (int64_t)v; break;
    case MM_F8_E4M3: ((uint8_t *)p)[o] = mm_f32_to_e4m3((float)v); break;
    case MM_F4_E2M1: {
        uint8_t *b = (uint8_t *)p + o / 2;
        uint8_t nib = mm_f32_to_e2m1((float)v);
        *b = (o & 1) ? (uint8_t)((*b & 0x0f) | (nib << 4)) : (uint8_t)((*b & 0xf0) | nib);
        break;
    }
    default: break;
    }
}
