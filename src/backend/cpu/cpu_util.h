/* Helpers shared by the CPU kernels: element conversion to and from f32,
 * row addressing of strided tensors, and the f32 row buffers every kernel
 * computes in. Internal to src/backend/cpu/. */
#ifndef MMH3_BACKEND_CPU_CPU_UTIL_H
#define MMH3_BACKEND_CPU_CPU_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "core/tensor.h"

/* bf16 <-> f32 inline (the hot-loop versions of core/dtype.h's). */
static inline float cpu_bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t cpu_f32_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f16 -> f32 through a 65536-entry table (built once; see gemm.c). */
extern float mm_cpu_f16_table[65536];
void mm_cpu_tables_init(void);
static inline float cpu_f16_f32(uint16_t h) { return mm_cpu_f16_table[h]; }

static inline size_t cpu_elsize(mm_dtype t) { return (size_t)mm_dtype_bits(t) / 8; }

/* Address of element offset `off` (in elements) of a non-packed dtype. */
static inline char *cpu_at(const void *base, mm_dtype t, int64_t off)
{
    return (char *)base + off * (int64_t)cpu_elsize(t);
}

/* Reads n float elements (F32/BF16/F16) starting at p with element stride s. */
static inline void cpu_load_f32(float *dst, const void *p, mm_dtype t, int64_t n, int64_t s)
{
    switch (t) {
    case MM_F32: {
        const float *q = p;
        if (s == 1)
            memcpy(dst, q, (size_t)n * 4);
        else
            for (int64_t i = 0; i < n; i++)
                dst[i] = q[i * s];
        break;
    }
    case MM_BF16: {
        const uint16_t *q = p;
        for (int64_t i = 0; i < n; i++)
            dst[i] = cpu_bf16_f32(q[i * s]);
        break;
    }
    case MM_F16: {
        const uint16_t *q = p;
        for (int64_t i = 0; i < n; i++)
            dst[i] = cpu_f16_f32(q[i * s]);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN;
        break;
    }
}

/* Writes n f32 values to float elements at p with stride s, rounding once. */
static inline void cpu_store_f32(void *p, mm_dtype t, int64_t s, const float *src, int64_t n)
{
    switch (t) {
    case MM_F32: {
        float *q = p;
        if (s == 1)
            memcpy(q, src, (size_t)n * 4);
        else
            for (int64_t i = 0; i < n; i++)
                q[i * s] = src[i];
        break;
    }
    case MM_BF16: {
        uint16_t *q = p;
        for (int64_t i = 0; i < n; i++)
            q[i * s] = cpu_f32_bf16(src[i]);
        break;
    }
    case MM_F16: {
        uint16_t *q = p;
        for (int64_t i = 0; i < n; i++)
            q[i * s] = mm_f32_to_f16(src[i]);
        break;
    }
    default:
        break;
    }
}

static inline float cpu_get_f32(const void *p, mm_dtype t)
{
    float v;
    cpu_load_f32(&v, p, t, 1, 1);
    return v;
}

/* Number of rows when the last dim is the row (numel / last dim; 1 for 0-d). */
static inline int64_t cpu_rows(const mm_tensor *t)
{
    int64_t r = 1;
    for (int i = 0; i < t->ndim - 1; i++)
        r *= t->shape[i];
    return r;
}

static inline int64_t cpu_cols(const mm_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* Element offset of row r (the leading dims in row-major order). */
static inline int64_t cpu_row_offset(const mm_tensor *t, int64_t r)
{
    int64_t off = 0;
    for (int i = t->ndim - 2; i >= 0; i--) {
        int64_t n = t->shape[i];
        off += (r % n) * t->stride[i];
        r /= n;
    }
    return off;
}

static inline void *cpu_row_ptr(const mm_tensor *t, int64_t r)
{
    return cpu_at(t->data, t->dtype, cpu_row_offset(t, r));
}

static inline int64_t cpu_last_stride(const mm_tensor *t) { return t->ndim ? t->stride[t->ndim - 1] : 1; }

static inline bool cpu_is_float(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

/* Any element as a double, and back (round half even and saturating into
 * integers when the value came from a float). For conversions off the hot
 * paths (copies between integer types, fills, pads). */
static inline double cpu_get_any(const void *p, mm_dtype t)
{
    switch (t) {
    case MM_F32: return *(const float *)p;
    case MM_F64: return *(const double *)p;
    case MM_BF16: return cpu_bf16_f32(*(const uint16_t *)p);
    case MM_F16: return mm_f16_to_f32(*(const uint16_t *)p);
    case MM_I8: return *(const int8_t *)p;
    case MM_U8: return *(const uint8_t *)p;
    case MM_BOOL: return *(const uint8_t *)p != 0;
    case MM_I16: return *(const int16_t *)p;
    case MM_I32: return *(const int32_t *)p;
    case MM_I64: return (double)*(const int64_t *)p;
    case MM_F8_E4M3: return mm_e4m3_to_f32(*(const uint8_t *)p);
    default: return NAN;
    }
}

static inline double cpu_sat(double v, double lo, double hi)
{
    if (isnan(v))
        return 0;
    return v < lo ? lo : v > hi ? hi : v;
}

static inline void cpu_set_any(void *p, mm_dtype t, double v, bool from_float)
{
    if (from_float && !cpu_is_float(t) && t != MM_F64 && t != MM_F8_E4M3)
        v = nearbyint(v); /* round half even */
    switch (t) {
    case MM_F32: *(float *)p = (float)v; break;
    case MM_F64: *(double *)p = v; break;
    case MM_BF16: *(uint16_t *)p = cpu_f32_bf16((float)v); break;
    case MM_F16: *(uint16_t *)p = mm_f32_to_f16((float)v); break;
    case MM_I8: *(int8_t *)p = (int8_t)cpu_sat(v, -128, 127); break;
    case MM_U8: *(uint8_t *)p = (uint8_t)cpu_sat(v, 0, 255); break;
    case MM_BOOL: *(uint8_t *)p = v != 0; break;
    case MM_I16: *(int16_t *)p = (int16_t)cpu_sat(v, -32768, 32767); break;
    case MM_I32: *(int32_t *)p = (int32_t)cpu_sat(v, -2147483648.0, 2147483647.0); break;
    case MM_I64: *(int64_t *)p = (int64_t)cpu_sat(v, -9.2233720368547748e18, 9.2233720368547748e18); break;
    case MM_F8_E4M3: *(uint8_t *)p = mm_f32_to_e4m3((float)v); break;
    default: break;
    }
}

/* Eight floats, the width the hot loops vectorize to by hand (-O2 does not). */
typedef float cpu_v8 __attribute__((vector_size(32)));

/* Hot loops built twice, for AVX2 and for any x86-64 (the loader picks). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

/* sum a[i]·b[i] in eight lanes, then the lanes pairwise, then the tail:
 * one summation order for every caller, so their results agree bit for bit. */
static inline __attribute__((always_inline)) float cpu_dot(const float *a, const float *b, int64_t n)
{
    cpu_v8 acc = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8 x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        acc += x * y;
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

#endif
