/* Memory-bound glue over strided views: copy/convert, fill, arithmetic,
 * activations and gated units, row gather/scatter, Snake, padding,
 * interpolation; plus the int8 embedding, nvfp4 weight decoding and the
 * random fill the benchmarks use. One thread per output element (grid-stride
 * loops); the host collapses dims that are contiguous in every operand, so
 * the common contiguous case indexes with a single stride; same-dtype copies
 * of rows contiguous on both sides move raw 16-byte vectors (k_copy_rows, the
 * Ulysses pack/unpack). CPU twins:
 * src/backend/cpu/elementwise.c, index.c, conv.c (pad, interpolate),
 * quant.c (embedding, nvfp4). */
#include <cuda_fp8.h>

#include <string.h>

#include "kernels/common.cuh"

namespace {

/* ------------------------------------------------------------------ any-dtype values */

__device__ __forceinline__ double ld_any(const void *p, mm_dtype t, int64_t off)
{
    switch (t) {
    case MM_F32: return static_cast<const float *>(p)[off];
    case MM_BF16: return __bfloat162float(static_cast<const bf16 *>(p)[off]);
    case MM_F16: return __half2float(static_cast<const __half *>(p)[off]);
    case MM_F64: return static_cast<const double *>(p)[off];
    case MM_I8: return static_cast<const int8_t *>(p)[off];
    case MM_U8: return static_cast<const uint8_t *>(p)[off];
    case MM_BOOL: return static_cast<const uint8_t *>(p)[off] != 0;
    case MM_I16: return static_cast<const int16_t *>(p)[off];
    case MM_I32: return static_cast<const int32_t *>(p)[off];
    case MM_I64: return (double)static_cast<const int64_t *>(p)[off];
    case MM_F8_E4M3: {
        __nv_fp8_e4m3 v;
        v.__x = static_cast<const uint8_t *>(p)[off];
        return (float)v;
    }
    default: return 0;
    }
}

__device__ __forceinline__ double sat(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* As the CPU backend's cpu_set_any: floats round to nearest even; integers
 * round half even (when the source is a float) and saturate. */
__device__ __forceinline__ void st_any(void *p, mm_dtype t, int64_t off, double v, bool from_float)
{
    if (from_float && t != MM_F32 && t != MM_BF16 && t != MM_F16 && t != MM_F64 && t != MM_F8_E4M3)
        v = rint(v);
    switch (t) {
    case MM_F32: static_cast<float *>(p)[off] = (float)v; break;
    case MM_F64: static_cast<double *>(p)[off] = v; break;
    case MM_BF16: static_cast<bf16 *>(p)[off] = __float2bfloat16_rn((float)v); break;
    case MM_F16: static_cast<__half *>(p)[off] = __float2half_rn((float)v); break;
    case MM_I8: static_cast<int8_t *>(p)[off] = (int8_t)sat(v, -128, 127); break;
    case MM_U8: static_cast<uint8_t *>(p)[off] = (uint8_t)sat(v, 0, 255); break;
    case MM_BOOL: static_cast<uint8_t *>(p)[off] = v != 0; break;
    case MM_I16: static_cast<int16_t *>(p)[off] = (int16_t)sat(v, -32768, 32767); break;
    case MM_I32: static_cast<int32_t *>(p)[off] = (int32_t)sat(v, -2147483648.0, 2147483647.0); break;
    case MM_I64: static_cast<int64_t *>(p)[off] = (int64_t)sat(v, -9.2233720368547748e18, 9.2233720368547748e18); break;
    case MM_F8_E4M3: {
        __nv_fp8_e4m3 q((float)v);
        static_cast<uint8_t *>(p)[off] = q.__x;
        break;
    }
    default: break;
    }
}

__device__ __forceinline__ bool float_like(mm_dtype t)
{
    return t == MM_F32 || t == MM_BF16 || t == MM_F16 || t == MM_F64 || t == MM_F8_E4M3;
}

/* ------------------------------------------------------------------ activations */

__device__ __forceinline__ float act_apply(int act, float x)
{
    switch (act) {
    case MMK_ACT_SILU: return x / (1.0f + expf(-x));
    case MMK_ACT_GELU_TANH: {
        const float k = 0.7978845608028654f;
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case MMK_ACT_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case MMK_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case MMK_ACT_TANH: return tanhf(x);
    case MMK_ACT_RELU: return x > 0 ? x : 0.0f;
    case MMK_ACT_EXP: return expf(x);
    default: return x;
    }
}

/* ------------------------------------------------------------------ elementwise */

__global__ void k_ew(mmk_ew e, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t oy = mmk_view_off(e.y, i);
        if (e.op == MMK_EW_FILL) {
            st_any(e.y.p, e.y.dtype, oy, e.value, true);
            continue;
        }
        int64_t oa = mmk_view_off(e.a, i);
        if (e.op == MMK_EW_COPY) {
            if (mmk_is_float(e.a.dtype) && mmk_is_float(e.y.dtype))
                mmk_st(e.y.p, e.y.dtype, oy, mmk_ld(e.a.p, e.a.dtype, oa));
            else
                st_any(e.y.p, e.y.dtype, oy, ld_any(e.a.p, e.a.dtype, oa), float_like(e.a.dtype));
            continue;
        }
        float a = mmk_ld(e.a.p, e.a.dtype, oa), b = 0.f, v;
        if (e.op == MMK_EW_ADD || e.op == MMK_EW_MUL || e.op == MMK_EW_AXPBY || e.op == MMK_EW_GLU)
            b = mmk_ld(e.b.p, e.b.dtype, mmk_view_off(e.b, i));
        switch (e.op) {
        case MMK_EW_ADD: v = a + b; break;
        case MMK_EW_MUL: v = a * b; break;
        case MMK_EW_AXPBY: v = __fadd_rn(__fmul_rn(e.alpha, a), __fmul_rn(e.beta, b)); break;
        case MMK_EW_AXPB: v = __fadd_rn(__fmul_rn(e.alpha, a), e.beta); break;
        case MMK_EW_CLAMP: v = a < e.alpha ? e.alpha : a > e.beta ? e.beta : a; break;
        case MMK_EW_ACT: v = act_apply(e.act, a); break;
        case MMK_EW_GLU: v = __fmul_rn(act_apply(e.act, a), b); break;
        default: v = a; break;
        }
        mmk_st(e.y.p, e.y.dtype, oy, v);
    }
}

/* The common case, vectorized: every operand a bf16 (or, with
 * mmk_policy.glue_vec, f16: the video VAE's SiLU-GLU) [R, C] view with unit
 * column stride, C and the row strides multiples of 8, 16-byte aligned (row
 * stride 0 broadcasts a row). One thread per 8 consecutive elements; the
 * arithmetic is k_ew's, element by element. */
template <typename T> __global__ void k_ew_x8(mmk_ew e, int64_t rows, int64_t cols)
{
    int64_t per_row = cols / 8, n = rows * per_row;
    bool binary = e.op == MMK_EW_ADD || e.op == MMK_EW_MUL || e.op == MMK_EW_AXPBY || e.op == MMK_EW_GLU;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r, c;
        if (n <= 0xffffffffll) { /* 32-bit division: a 64-bit one costs more than the 16-byte move */
            uint32_t r32 = (uint32_t)i / (uint32_t)per_row;
            r = r32;
            c = (int64_t)((uint32_t)i - r32 * (uint32_t)per_row) * 8;
        } else {
            r = i / per_row;
            c = (i % per_row) * 8;
        }
        uint4 av = *reinterpret_cast<const uint4 *>(static_cast<const T *>(e.a.p) + r * e.a.stride[0] + c), bv = av;
        if (binary)
            bv = *reinterpret_cast<const uint4 *>(static_cast<const T *>(e.b.p) + r * e.b.stride[0] + c);
        const T *ah = reinterpret_cast<const T *>(&av), *bh = reinterpret_cast<const T *>(&bv);
        uint4 out;
        T *oh = reinterpret_cast<T *>(&out);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float a = mmk_to_f32(ah[j]), b = mmk_to_f32(bh[j]), v;
            switch (e.op) {
            case MMK_EW_ADD: v = a + b; break;
            case MMK_EW_MUL: v = a * b; break;
            case MMK_EW_AXPBY: v = __fadd_rn(__fmul_rn(e.alpha, a), __fmul_rn(e.beta, b)); break;
            case MMK_EW_AXPB: v = __fadd_rn(__fmul_rn(e.alpha, a), e.beta); break;
            case MMK_EW_CLAMP: v = a < e.alpha ? e.alpha : a > e.beta ? e.beta : a; break;
            case MMK_EW_ACT: v = act_apply(e.act, a); break;
            case MMK_EW_GLU: v = __fmul_rn(act_apply(e.act, a), b); break;
            default: v = a; break;
            }
            oh[j] = mmk_from_f32<T>(v);
        }
        *reinterpret_cast<uint4 *>(static_cast<T *>(e.y.p) + r * e.y.stride[0] + c) = out;
    }
}

/* Same-dtype copies of rows that are contiguous on both sides — permuted or
 * narrowed views whose last dim is unit-stride, e.g. the Ulysses pack
 * [n, H, D] → [N, n, H/N, D], which collapses to [N, n, H/N·D]. k_ew spends
 * three 64-bit divisions per 2-byte element on the view walk and goes
 * through f32 per element, ~10× below HBM speed; here a group of G lanes owns
 * a row, decodes its outer index once with 32-bit math (rows < 2^31), and
 * moves raw W-byte vectors (W = 16, 8 or 4: the widest that divides the row,
 * both bases and every outer stride), four in flight per lane. Raw bytes, so
 * bit-exact by construction, as the CPU twin's memcpy of elements. */
struct CopyRows {
    const void *src;
    void *dst;
    int outer;                          /* outer dims; rows = their product */
    unsigned shape[MMK_MAX_DIMS - 1];
    int64_t sst[MMK_MAX_DIMS - 1];      /* outer strides in vectors */
    int64_t dst_st[MMK_MAX_DIMS - 1];
    unsigned rows, vpr;                 /* vectors per row */
};

/* The rows of one group of G lanes: rows first, first + groups, ...; this
 * lane moves vectors lane, lane + G, ... of each. Host-callable, so the
 * index math can be exercised without a GPU. */
template <typename V, int G>
__host__ __device__ __forceinline__ void copy_rows_group(const CopyRows &c, unsigned first, unsigned groups,
                                                         unsigned lane)
{
    const V *__restrict__ src = static_cast<const V *>(c.src);
    V *__restrict__ dst = static_cast<V *>(c.dst);
    /* Blackwell's ptxas (CUDA 13.0) copies the parameter arrays to local
     * memory when a loop variable indexes them, and spills in the one-lane
     * uint4 case's four-wide loop; constant indices and the plain loop for
     * one lane avoid both. The tuned targets keep their code. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    constexpr bool blackwell = true;
#else
    constexpr bool blackwell = false;
#endif
    for (unsigned r = first; r < c.rows; r += groups) {
        int64_t so = 0, dof = 0;
        unsigned q = r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#pragma unroll
        for (int d = MMK_MAX_DIMS - 2; d >= 0; d--) {
            if (d >= c.outer)
                continue;
#else
        for (int d = c.outer - 1; d >= 0; d--) {
#endif
            unsigned i = q % c.shape[d];
            q /= c.shape[d];
            so += (int64_t)i * c.sst[d];
            dof += (int64_t)i * c.dst_st[d];
        }
        const V *s = src + so;
        V *o = dst + dof;
        unsigned j = lane;
        for (; (G > 1 || !blackwell) && j + 3 * G < c.vpr; j += 4 * G) {
            V a0 = s[j], a1 = s[j + G], a2 = s[j + 2 * G], a3 = s[j + 3 * G];
            o[j] = a0;
            o[j + G] = a1;
            o[j + 2 * G] = a2;
            o[j + 3 * G] = a3;
        }
        for (; j < c.vpr; j += G)
            o[j] = s[j];
    }
}

template <typename V, int G>
__global__ void __launch_bounds__(256) k_copy_rows(CopyRows c)
{
    copy_rows_group<V, G>(c, (blockIdx.x * blockDim.x + threadIdx.x) / G, gridDim.x * (blockDim.x / G),
                          threadIdx.x % G);
}

/* Lanes per row: a warp for rows of >= 32 vectors, else the smallest power
 * of two that covers the row. */
unsigned copy_rows_lanes(unsigned vpr)
{
    return vpr >= 32 ? 32 : vpr > 8 ? 16 : vpr > 4 ? 8 : vpr > 2 ? 4 : vpr > 1 ? 2 : 1;
}

template <typename V>
void launch_copy_rows(const CopyRows &c, mmk_stream s)
{
    unsigned g = copy_rows_lanes(c.vpr);
    unsigned grid = mmk_grid((int64_t)c.rows * g);
    switch (g) {
    case 32: k_copy_rows<V, 32><<<grid, 256, 0, s>>>(c); break;
    case 16: k_copy_rows<V, 16><<<grid, 256, 0, s>>>(c); break;
    case 8: k_copy_rows<V, 8><<<grid, 256, 0, s>>>(c); break;
    case 4: k_copy_rows<V, 4><<<grid, 256, 0, s>>>(c); break;
    case 2: k_copy_rows<V, 2><<<grid, 256, 0, s>>>(c); break;
    default: k_copy_rows<V, 1><<<grid, 256, 0, s>>>(c); break;
    }
}

/* The vector width (16, 8, 4 bytes) for a collapsed same-dtype copy, or 0
 * when k_copy_rows does not apply: the last dim unit-stride on both sides,
 * rows of >= 16 bytes, bases and outer strides multiples of the width,
 * row count and outer sizes within 32 bits. */
int copy_rows_width(const mmk_view &y, const mmk_view &a)
{
    if (y.dtype != a.dtype || y.ndim < 2 || y.ndim != a.ndim)
        return 0;
    int last = y.ndim - 1;
    if (y.stride[last] != 1 || a.stride[last] != 1)
        return 0;
    int64_t es = mm_dtype_bits(y.dtype) / 8, row = y.shape[last] * es, rows = 1;
    if (es < 1 || row < 16)
        return 0;
    for (int d = 0; d < last; d++)
        rows *= y.shape[d];
    if (rows >= INT32_MAX || row / 4 >= INT32_MAX)
        return 0;
    for (int w = 16; w >= 4; w /= 2) {
        bool ok = row % w == 0 && (uintptr_t)y.p % w == 0 && (uintptr_t)a.p % w == 0;
        for (int d = 0; d < last && ok; d++)
            ok = (y.stride[d] * es) % w == 0 && (a.stride[d] * es) % w == 0;
        if (ok)
            return w;
    }
    return 0;
}

CopyRows copy_rows_args(const mmk_view &y, const mmk_view &a, int w)
{
    CopyRows c;
    memset(&c, 0, sizeof c);
    int last = y.ndim - 1;
    int64_t es = mm_dtype_bits(y.dtype) / 8;
    c.src = a.p;
    c.dst = y.p;
    c.outer = last;
    c.rows = 1;
    for (int d = 0; d < last; d++) {
        c.shape[d] = (unsigned)y.shape[d];
        c.sst[d] = a.stride[d] * es / w;
        c.dst_st[d] = y.stride[d] * es / w;
        c.rows *= c.shape[d];
    }
    c.vpr = (unsigned)(y.shape[last] * es / w);
    return c;
}

void copy_rows_run(const mmk_view &y, const mmk_view &a, int w, mmk_stream s)
{
    CopyRows c = copy_rows_args(y, a, w);
    if (w == 16)
        launch_copy_rows<uint4>(c, s);
    else if (w == 8)
        launch_copy_rows<uint2>(c, s);
    else
        launch_copy_rows<uint32_t>(c, s);
}

bool rows_x8(const mmk_view &v, mm_dtype t)
{
    return v.dtype == t && v.ndim == 2 && (v.stride[1] == 1 || v.shape[1] == 1) && v.stride[0] % 8 == 0 &&
           ((uintptr_t)v.p & 15) == 0;
}

/* Merges dims that are contiguous with their successor in every view and
 * drops size-1 dims, so a contiguous tensor of any rank becomes 1-D. */
void collapse(mmk_view *v[], int nv)
{
    int nd = v[0]->ndim;
    int64_t shape[MMK_MAX_DIMS], st[4][MMK_MAX_DIMS];
    int out = 0;
    for (int d = 0; d < nd; d++) {
        if (v[0]->shape[d] == 1)
            continue;
        bool merge = out > 0;
        for (int k = 0; k < nv && merge; k++)
            merge = st[k][out - 1] == v[k]->stride[d] * v[k]->shape[d];
        if (merge) {
            shape[out - 1] *= v[0]->shape[d];
            for (int k = 0; k < nv; k++)
                st[k][out - 1] = v[k]->stride[d];
        } else {
            shape[out] = v[0]->shape[d];
            for (int k = 0; k < nv; k++)
                st[k][out] = v[k]->stride[d];
            out++;
        }
    }
    if (out == 0) {
        shape[0] = 1;
        for (int k = 0; k < nv; k++)
            st[k][0] = 1;
        out = 1;
    }
    for (int k = 0; k < nv; k++) {
        v[k]->ndim = out;
        for (int d = 0; d < out; d++) {
            v[k]->shape[d] = shape[d];
            v[k]->stride[d] = st[k][d];
        }
    }
}

/* ------------------------------------------------------------------ row gather / scatter */

/* Over the elements of `src` (scatter) or `dst` (gather): dim 0 goes through idx. */
__global__ void k_index_rows(int op, mmk_view y, mmk_view x, const int32_t *idx, int64_t idx_stride, int64_t n,
                             int64_t inner, size_t es)
{
    const mmk_view &it = op == MMK_GATHER ? y : x; /* the view we enumerate */
    bool fl = mmk_is_float(y.dtype) && mmk_is_float(x.dtype);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / inner, rest = i % inner;
        int64_t target = idx[r * idx_stride];
        /* trailing offsets: unravel `rest` over dims 1.. of each view */
        int64_t oy = 0, ox = 0, q = rest;
        for (int d = it.ndim - 1; d >= 1; d--) {
            int64_t c = q % it.shape[d];
            q /= it.shape[d];
            oy += c * y.stride[d];
            ox += c * x.stride[d];
        }
        if (op == MMK_GATHER) {
            oy += r * y.stride[0];
            ox += target * x.stride[0];
        } else {
            oy += target * y.stride[0];
            ox += r * x.stride[0];
        }
        if (op == MMK_SCATTER_ADD)
            mmk_st(y.p, y.dtype, oy, mmk_ld(y.p, y.dtype, oy) + mmk_ld(x.p, x.dtype, ox));
        else if (fl)
            mmk_st(y.p, y.dtype, oy, mmk_ld(x.p, x.dtype, ox));
        else
            memcpy((char *)y.p + oy * es, (const char *)x.p + ox * es, es);
    }
}

/* ------------------------------------------------------------------ snake, pad, interpolate */

__global__ void k_snake(mmk_view y, mmk_view x, const float *alpha, const float *beta, int64_t n)
{
    int64_t C = x.shape[1], L = x.shape[2];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / L) % C;
        float a = alpha[c], den;
        if (beta) {
            a = expf(a);
            den = expf(beta[c]) + 1e-9f;
        } else {
            den = a + 1e-9f;
        }
        float v = mmk_ld(x.p, x.dtype, mmk_view_off(x, i));
        float sv = sinf(a * v);
        mmk_st(y.p, y.dtype, mmk_view_off(y, i), v + sv * sv / den);
    }
}

struct PadArgs {
    int pad0[MMK_MAX_DIMS];
    int mode;
    unsigned char value[8];
};

__device__ __forceinline__ int64_t pad_src(int64_t o, int64_t n, int before, int mode)
{
    int64_t i = o - before;
    if (i >= 0 && i < n)
        return i;
    if (mode == 1)
        return i < 0 ? -i : 2 * (n - 1) - i;
    if (mode == 2)
        return i < 0 ? 0 : n - 1;
    return -1;
}

__global__ void k_pad(mmk_view y, mmk_view x, PadArgs pa, int64_t n, size_t es)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = i, oy = 0, ox = 0;
        bool constant = false;
        for (int d = y.ndim - 1; d >= 0; d--) {
            int64_t c = q % y.shape[d];
            q /= y.shape[d];
            oy += c * y.stride[d];
            int64_t sc = pad_src(c, x.shape[d], pa.pad0[d], pa.mode);
            if (sc < 0)
                constant = true;
            else
                ox += sc * x.stride[d];
        }
        const unsigned char *src = constant ? pa.value : (const unsigned char *)x.p + ox * es;
        memcpy((char *)y.p + oy * es, src, es);
    }
}

struct InterpArgs {
    int64_t in[3], on[3];
    int mode, align;
};

__device__ __forceinline__ void taps(int64_t o, int64_t in, int64_t on, int mode, int align, int64_t *i0,
                                     int64_t *i1, float *w1)
{
    if (mode == 0) {
        float scale = (float)in / (float)on;
        int64_t s = (int64_t)floorf((float)o * scale);
        *i0 = *i1 = s < in - 1 ? s : in - 1;
        *w1 = 0.0f;
        return;
    }
    float src;
    if (align) {
        src = on > 1 ? (float)o * (float)(in - 1) / (float)(on - 1) : 0.0f;
    } else {
        src = ((float)o + 0.5f) * (float)in / (float)on - 0.5f;
        if (src < 0)
            src = 0;
    }
    int64_t a = (int64_t)floorf(src);
    if (a > in - 1)
        a = in - 1;
    *i0 = a;
    *i1 = a + 1 < in ? a + 1 : in - 1;
    *w1 = src - (float)a;
}

/* Same tap order and f32 sums as the CPU twin. */
__global__ void k_interpolate(const void *x, mm_dtype xt, void *y, mm_dtype yt, InterpArgs ia, int64_t n)
{
    int64_t opos = ia.on[0] * ia.on[1] * ia.on[2], ipos = ia.in[0] * ia.in[1] * ia.in[2];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t pl = i / opos, p = i % opos;
        int64_t o[3] = {p / (ia.on[1] * ia.on[2]), (p / ia.on[2]) % ia.on[1], p % ia.on[2]};
        int64_t a[3], b[3];
        float w[3];
        for (int d = 0; d < 3; d++)
            taps(o[d], ia.in[d], ia.on[d], ia.mode, ia.align, &a[d], &b[d], &w[d]);
        float v = 0.0f;
        for (int c = 0; c < 8; c++) {
            float wt = 1.0f;
            int64_t idx[3];
            for (int d = 0; d < 3; d++) {
                int hi = (c >> (2 - d)) & 1;
                wt *= hi ? w[d] : 1.0f - w[d];
                idx[d] = hi ? b[d] : a[d];
            }
            if (wt != 0.0f)
                v = __fadd_rn(v, __fmul_rn(wt, mmk_ld(x, xt, pl * ipos + (idx[0] * ia.in[1] + idx[1]) * ia.in[2] + idx[2])));
        }
        mmk_st(y, yt, i, v);
    }
}

/* ------------------------------------------------------------------ random fill */

__device__ __forceinline__ uint64_t splitmix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void k_fill_random(void *p, mm_dtype t, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix(seed ^ splitmix((uint64_t)i));
        if (t == MM_I8) {
            static_cast<int8_t *>(p)[i] = (int8_t)((int)(h % 255) - 127);
        } else {
            float u = (float)(h >> 40) * (1.f / 16777216.f) * 2.f - 1.f;
            mmk_st(p, t, i, u * scale);
        }
    }
}

/* ------------------------------------------------------------------ embedding, nvfp4 */

__global__ void k_embed_i8(mmk_view y, const int32_t *ids, int64_t ids_stride, const int8_t *table, int64_t ld_table,
                           const float *scale, int64_t scale_stride, int64_t n)
{
    int64_t dim = y.shape[1];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / dim, c = i % dim;
        int64_t id = ids[t * ids_stride];
        mmk_st(y.p, y.dtype, t * y.stride[0] + c * y.stride[1],
               (float)table[id * ld_table + c] * scale[id * scale_stride]);
    }
}

__device__ __forceinline__ float e2m1(unsigned code)
{
    const float lut[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    float v = lut[code & 7];
    return (code & 8) ? -v : v;
}

/* Byte offset of block scale (r, c) in the cuBLAS 128×4 swizzle (k_nvfp4
 * spells it out in 64 bits); C = K/16 scales per row. 32-bit: the caller
 * checks N·K/8 < 2^31, so N·C fits. */
__device__ __forceinline__ unsigned nvfp4_scale_off(unsigned r, unsigned c, unsigned C)
{
    return ((r >> 7) * (C >> 2) + (c >> 2)) * 512u + (r & 31u) * 16u + ((r >> 5) & 3u) * 4u + (c & 3u);
}

/* The general decode, one thread per packed byte (two outputs), 64-bit
 * indices: any float output, any alignment. The fast path below must match
 * it bit for bit. */
__global__ void k_nvfp4(int K, int row0, int rows, const uint8_t *__restrict__ packed,
                        const uint8_t *__restrict__ scales, float global_scale, void *y, mm_dtype yt)
{
    int half = K / 2, C = K / 16;
    int64_t total = (int64_t)rows * half;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rr = i / half;
        int j = (int)(i % half);
        int64_t r = row0 + rr;
        int c = (2 * j) / 16;
        int64_t off = ((r / 128) * (C / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
        __nv_fp8_e4m3 sc;
        sc.__x = scales[off];
        float d = (float)sc * global_scale;
        uint8_t b = packed[r * half + j];
        mmk_st(y, yt, rr * K + 2 * j, e2m1(b >> 4) * d);
        mmk_st(y, yt, rr * K + 2 * j + 1, e2m1(b & 15) * d);
    }
}

/* Two decoded weights in the output type, as the scalar stores round them. */
template <typename T> struct nvfp4_out;
template <> struct nvfp4_out<bf16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct nvfp4_out<__half> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

/* The bandwidth-bound decode, hand-written because it runs once per linear
 * per encode and must cost no more than moving its bytes. One thread per
 * 32-bit word of packed codes = 8 weights of one scale block (K % 64 == 0:
 * a word never crosses a block or a row), so a warp reads 128 contiguous
 * bytes and writes 512 contiguous bytes (bf16/f16: one 128-bit store per
 * thread; f32: two) — full sectors both ways. 32-bit index arithmetic (the
 * host checks N·K/8 < 2^31), e2m1 from a 16-entry shared table (16 distinct
 * words in 16 distinct banks: no conflicts), the same f32 products as
 * k_nvfp4, so the result is bit-identical. packed and y start at row row0. */
template <typename T>
__global__ void __launch_bounds__(256) k_nvfp4_vec(unsigned words_per_row, unsigned C, unsigned row0, unsigned n_words,
                                                   const uint32_t *__restrict__ packed,
                                                   const uint8_t *__restrict__ scales, float global_scale,
                                                   T *__restrict__ y)
{
    __shared__ float lut[16];
    if (threadIdx.x < 16)
        lut[threadIdx.x] = e2m1(threadIdx.x);
    __syncthreads();
    for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < n_words; w += gridDim.x * blockDim.x) {
        unsigned rr = w / words_per_row, j = w - rr * words_per_row;
        uint32_t q = __ldg(packed + w);
        __nv_fp8_e4m3 sc;
        sc.__x = __ldg(scales + nvfp4_scale_off(row0 + rr, j >> 1, C)); /* two words per 16-weight block */
        float d = (float)sc * global_scale, f[8];
#pragma unroll
        for (int b = 0; b < 4; b++) { /* byte b holds weights 2b (high nibble) and 2b+1 (low) */
            unsigned byte = (q >> (8 * b)) & 0xffu;
            f[2 * b] = lut[byte >> 4] * d;
            f[2 * b + 1] = lut[byte & 15u] * d;
        }
        if constexpr (sizeof(T) == 4) {
            float4 *o = reinterpret_cast<float4 *>(y) + 2 * (size_t)w;
            o[0] = make_float4(f[0], f[1], f[2], f[3]);
            o[1] = make_float4(f[4], f[5], f[6], f[7]);
        } else {
            reinterpret_cast<uint4 *>(y)[w] = make_uint4(nvfp4_out<T>::pack(f[0], f[1]), nvfp4_out<T>::pack(f[2], f[3]),
                                                         nvfp4_out<T>::pack(f[4], f[5]), nvfp4_out<T>::pack(f[6], f[7]));
        }
    }
}

/* The host twin of st_any (from a float source), for constants. */
void host_set_any(unsigned char *p, mm_dtype t, double v)
{
    if (t != MM_F32 && t != MM_BF16 && t != MM_F16 && t != MM_F64 && t != MM_F8_E4M3)
        v = rint(v);
    auto clampd = [](double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; };
    switch (t) {
    case MM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case MM_F64: memcpy(p, &v, 8); break;
    case MM_BF16: { uint16_t h = mm_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case MM_F16: { uint16_t h = mm_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case MM_I8: { int8_t x = (int8_t)clampd(v, -128, 127); memcpy(p, &x, 1); break; }
    case MM_U8: { uint8_t x = (uint8_t)clampd(v, 0, 255); memcpy(p, &x, 1); break; }
    case MM_BOOL: p[0] = v != 0; break;
    case MM_I16: { int16_t x = (int16_t)clampd(v, -32768, 32767); memcpy(p, &x, 2); break; }
    case MM_I32: { int32_t x = (int32_t)clampd(v, -2147483648.0, 2147483647.0); memcpy(p, &x, 4); break; }
    case MM_I64: { int64_t x = (int64_t)clampd(v, -9.2233720368547748e18, 9.2233720368547748e18); memcpy(p, &x, 8); break; }
    case MM_F8_E4M3: p[0] = mm_f32_to_e4m3((float)v); break;
    default: break;
    }
}

} // namespace

/* ====================================================================== API */

extern "C" int mmk_ew_run(int dev, mmk_stream s, const mmk_ew *e_in, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    mmk_ew e = *e_in;
    int64_t n = mmk_numel(e.y);
    if (n == 0)
        return 0;
    bool unary = e.op == MMK_EW_COPY || e.op == MMK_EW_AXPB || e.op == MMK_EW_CLAMP || e.op == MMK_EW_ACT;
    bool binary = e.op == MMK_EW_ADD || e.op == MMK_EW_MUL || e.op == MMK_EW_AXPBY || e.op == MMK_EW_GLU;
    if (!unary && !binary && e.op != MMK_EW_FILL)
        return mm_fail(err, "elementwise: unknown op %d", e.op);
    if (e.op != MMK_EW_FILL && e.op != MMK_EW_COPY &&
        (!mmk_is_float(e.y.dtype) || !mmk_is_float(e.a.dtype) || (binary && !mmk_is_float(e.b.dtype))))
        return mm_fail(err, "elementwise: arithmetic needs float tensors (F32, BF16, F16)");
    mmk_view *vs[3] = {&e.y, &e.a, &e.b};
    int nv = e.op == MMK_EW_FILL ? 1 : binary ? 3 : 2;
    collapse(vs, nv);
    /* A same-dtype contiguous copy is a memcpy. */
    if (e.op == MMK_EW_COPY && e.y.dtype == e.a.dtype && e.y.ndim == 1 && e.y.stride[0] == 1 && e.a.stride[0] == 1) {
        MMK_TRY(cudaMemcpyAsync(e.y.p, e.a.p, (size_t)n * mm_dtype_bits(e.y.dtype) / 8, cudaMemcpyDeviceToDevice, s),
                err, "copy");
        return 0;
    }
    /* Rows contiguous on both sides (permuted / narrowed views): raw vectors. */
    if (e.op == MMK_EW_COPY && !e.elementwise_copy) {
        int w = copy_rows_width(e.y, e.a);
        if (w) {
            copy_rows_run(e.y, e.a, w, s);
            return mmk_launched(err, w == 16 ? "k_copy_rows16" : w == 8 ? "k_copy_rows8" : "k_copy_rows4");
        }
    }
    /* 2-D bf16 (f16 with mmk_policy.glue_vec) rows: the vectorized kernel
     * (after collapsing, a contiguous tensor is 1-D: view it as one row) */
    mm_dtype vt = e.y.dtype;
    bool vec_dtype = vt == MM_BF16 || (vt == MM_F16 && mmk_policy_get()->glue_vec);
    if (e.op != MMK_EW_FILL && vec_dtype && !(e.op == MMK_EW_COPY && e.a.dtype != vt)) {
        mmk_ew v = e;
        mmk_view *vv[3] = {&v.y, &v.a, &v.b};
        for (int k = 0; k < nv; k++)
            if (vv[k]->ndim == 1) {
                vv[k]->ndim = 2;
                vv[k]->shape[1] = vv[k]->shape[0];
                vv[k]->stride[1] = vv[k]->stride[0];
                vv[k]->shape[0] = 1;
                vv[k]->stride[0] = 0;
            }
        bool fast = v.y.ndim == 2 && v.y.shape[1] % 8 == 0;
        for (int k = 0; k < nv && fast; k++)
            fast = rows_x8(*vv[k], vt) && vv[k]->shape[0] == v.y.shape[0] && vv[k]->shape[1] == v.y.shape[1];
        if (fast) {
            int64_t rows = v.y.shape[0], cols = v.y.shape[1];
            if (vt == MM_BF16) {
                k_ew_x8<bf16><<<mmk_grid(rows * cols / 8), 256, 0, s>>>(v, rows, cols);
                return mmk_launched(err, "k_ew_x8<bf16>");
            }
            k_ew_x8<__half><<<mmk_grid(rows * cols / 8), 256, 0, s>>>(v, rows, cols);
            return mmk_launched(err, "k_ew_x8<half>");
        }
    }
    k_ew<<<mmk_grid(n), 256, 0, s>>>(e, n);
    return mmk_launched(err, "k_ew");
}

extern "C" int mmk_index_rows(int dev, mmk_stream s, int op, const mmk_view *y, const mmk_view *x, const int32_t *idx,
                              int64_t idx_stride, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    const mmk_view &it = op == MMK_GATHER ? *y : *x;
    int64_t n = mmk_numel(it);
    if (n == 0)
        return 0;
    bool fl = mmk_is_float(y->dtype) && mmk_is_float(x->dtype);
    if (!fl && y->dtype != x->dtype)
        return mm_fail(err, "row gather/scatter: %s and %s cannot be combined", mm_dtype_name(y->dtype),
                       mm_dtype_name(x->dtype));
    if (op == MMK_SCATTER_ADD && !fl)
        return mm_fail(err, "row scatter-add needs float tensors");
    int64_t inner = n / it.shape[0];
    k_index_rows<<<mmk_grid(n), 256, 0, s>>>(op, *y, *x, idx, idx_stride, n, inner,
                                              (size_t)mm_dtype_bits(y->dtype) / 8);
    return mmk_launched(err, "k_index_rows");
}

extern "C" int mmk_snake_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const float *alpha,
                             const float *beta, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (x->ndim != 3)
        return mm_fail(err, "snake: x must be [B, C, L]");
    int64_t n = mmk_numel(*x);
    if (n == 0)
        return 0;
    k_snake<<<mmk_grid(n), 256, 0, s>>>(*y, *x, alpha, beta, n);
    return mmk_launched(err, "k_snake");
}

extern "C" int mmk_pad_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, const int (*pads)[2], int mode,
                           double value, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (y->dtype != x->dtype)
        return mm_fail(err, "pad: y and x dtypes differ");
    PadArgs pa;
    memset(&pa, 0, sizeof pa);
    for (int d = 0; d < x->ndim; d++)
        pa.pad0[d] = pads[d][0];
    pa.mode = mode;
    host_set_any(pa.value, y->dtype, value);
    int64_t n = mmk_numel(*y);
    if (n == 0)
        return 0;
    k_pad<<<mmk_grid(n), 256, 0, s>>>(*y, *x, pa, n, (size_t)mm_dtype_bits(y->dtype) / 8);
    return mmk_launched(err, "k_pad");
}

extern "C" int mmk_interpolate_run(int dev, mmk_stream s, const mmk_view *y, const mmk_view *x, int spatial, int mode,
                                   int align_corners, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    InterpArgs ia;
    for (int d = 0; d < 3; d++)
        ia.in[d] = ia.on[d] = 1;
    for (int d = 0; d < spatial; d++) {
        ia.in[3 - spatial + d] = x->shape[x->ndim - spatial + d];
        ia.on[3 - spatial + d] = y->shape[y->ndim - spatial + d];
    }
    ia.mode = mode;
    ia.align = align_corners;
    int64_t n = mmk_numel(*y);
    if (n == 0)
        return 0;
    k_interpolate<<<mmk_grid(n), 256, 0, s>>>(x->p, x->dtype, y->p, y->dtype, ia, n);
    return mmk_launched(err, "k_interpolate");
}

extern "C" int mmk_fill_random(int dev, mmk_stream s, void *p, mm_dtype dtype, int64_t n, uint64_t seed, float scale,
                               mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (dtype != MM_I8 && !mmk_is_float(dtype))
        return mm_fail(err, "fill_random: dtype %s not supported", mm_dtype_name(dtype));
    if (n <= 0)
        return 0;
    k_fill_random<<<mmk_grid(n), 256, 0, s>>>(p, dtype, n, seed, scale);
    return mmk_launched(err, "k_fill_random");
}

extern "C" int mmk_embed_i8(int dev, mmk_stream s, const mmk_view *y, const int32_t *ids, int64_t ids_stride,
                            const int8_t *table, int64_t ld_table, const float *scale, int64_t scale_stride,
                            mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    int64_t n = mmk_numel(*y);
    if (n == 0)
        return 0;
    k_embed_i8<<<mmk_grid(n), 256, 0, s>>>(*y, ids, ids_stride, table, ld_table, scale, scale_stride, n);
    return mmk_launched(err, "k_embed_i8");
}

extern "C" int mmk_nvfp4_dequant(int dev, mmk_stream s, int N, int K, int row0, int rows, const uint8_t *packed,
                                 const uint8_t *scales, float global_scale, void *y, mm_dtype y_dtype, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (N % 128 || K % 64)
        return mm_fail(err, "nvfp4 decode: N=%d must be a multiple of 128 and K=%d of 64 (the 128×4 scale tiles)", N,
                       K);
    if (row0 < 0 || rows < 0 || row0 + rows > N)
        return mm_fail(err, "nvfp4 decode: rows [%d, %d) outside the weight's %d rows", row0, row0 + rows, N);
    if (!mmk_is_float(y_dtype))
        return mm_fail(err, "nvfp4 decode: output dtype %s not supported", mm_dtype_name(y_dtype));
    if (rows == 0)
        return 0;
    int64_t n_words = (int64_t)rows * (K / 8);
    bool aligned = (uintptr_t)packed % 4 == 0 && (uintptr_t)y % 16 == 0;
    if (aligned && (int64_t)N * (K / 8) < INT32_MAX) {
        unsigned wpr = (unsigned)(K / 8), C = (unsigned)(K / 16), r0 = (unsigned)row0, nw = (unsigned)n_words;
        const uint32_t *pw = reinterpret_cast<const uint32_t *>(packed) + (size_t)row0 * wpr;
        unsigned grid = mmk_grid(n_words);
        switch (y_dtype) {
        case MM_BF16:
            k_nvfp4_vec<bf16><<<grid, 256, 0, s>>>(wpr, C, r0, nw, pw, scales, global_scale, static_cast<bf16 *>(y));
            break;
        case MM_F16:
            k_nvfp4_vec<__half><<<grid, 256, 0, s>>>(wpr, C, r0, nw, pw, scales, global_scale, static_cast<__half *>(y));
            break;
        default:
            k_nvfp4_vec<float><<<grid, 256, 0, s>>>(wpr, C, r0, nw, pw, scales, global_scale, static_cast<float *>(y));
            break;
        }
        return mmk_launched(err, "k_nvfp4_vec");
    }
    k_nvfp4<<<mmk_grid((int64_t)rows * K / 2), 256, 0, s>>>(K, row0, rows, packed, scales, global_scale, y, y_dtype);
    return mmk_launched(err, "k_nvfp4");
}

static const mmk_kernel_entry g_kernels[] = {
    {"ew", (const void *)k_ew, 80},
    {"ew_bf16x8", (const void *)k_ew_x8<bf16>, 80}, {"ew_f16x8", (const void *)k_ew_x8<__half>, 80},
    {"copy_rows16_w32", (const void *)k_copy_rows<uint4, 32>, 80},
    {"copy_rows16_w16", (const void *)k_copy_rows<uint4, 16>, 80},
    {"copy_rows16_w8", (const void *)k_copy_rows<uint4, 8>, 80},
    {"copy_rows16_w4", (const void *)k_copy_rows<uint4, 4>, 80},
    {"copy_rows16_w2", (const void *)k_copy_rows<uint4, 2>, 80},
    {"copy_rows16_w1", (const void *)k_copy_rows<uint4, 1>, 80},
    {"copy_rows8_w32", (const void *)k_copy_rows<uint2, 32>, 80},
    {"copy_rows8_w16", (const void *)k_copy_rows<uint2, 16>, 80},
    {"copy_rows8_w8", (const void *)k_copy_rows<uint2, 8>, 80},
    {"copy_rows8_w4", (const void *)k_copy_rows<uint2, 4>, 80},
    {"copy_rows8_w2", (const void *)k_copy_rows<uint2, 2>, 80},
    {"copy_rows8_w1", (const void *)k_copy_rows<uint2, 1>, 80},
    {"copy_rows4_w32", (const void *)k_copy_rows<uint32_t, 32>, 80},
    {"copy_rows4_w16", (const void *)k_copy_rows<uint32_t, 16>, 80},
    {"copy_rows4_w8", (const void *)k_copy_rows<uint32_t, 8>, 80},
    {"copy_rows4_w4", (const void *)k_copy_rows<uint32_t, 4>, 80},
    {"copy_rows4_w2", (const void *)k_copy_rows<uint32_t, 2>, 80},
    {"copy_rows4_w1", (const void *)k_copy_rows<uint32_t, 1>, 80},
    {"index_rows", (const void *)k_index_rows, 80},
    {"snake", (const void *)k_snake, 80},
    {"pad", (const void *)k_pad, 80},
    {"interpolate", (const void *)k_interpolate, 80},
    {"fill_random", (const void *)k_fill_random, 80},
    {"embed_i8", (const void *)k_embed_i8, 80},
    {"nvfp4", (const void *)k_nvfp4, 80},
    {"nvfp4_vec_bf16", (const void *)k_nvfp4_vec<bf16>, 80},
    {"nvfp4_vec_f16", (const void *)k_nvfp4_vec<__half>, 80},
    {"nvfp4_vec_f32", (const void *)k_nvfp4_vec<float>, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_elementwise(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
