/* Quantized-weight ops on the CPU: the ConvRot Hadamard rotation and int8
 * activation quantization, the W8A8 int32 GEMM with its scaled epilogue,
 * nvfp4 dequantization and the int8 embedding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

/* ---------------------------------------------------------------- rotation */

/* The regular Hadamard H4 (symmetric): H_G = H4 (x) ... (x) H4 / sqrt(G). */
static const float H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};

/* Rotates each group of G values of x in place: radix-4 butterflies with
 * strides 1, 4, 16, 64 (as many as log4 G), each scaled by 1/2, so that the
 * result is x . H_G (H_G[i][j] = prod_s H4[i_s][j_s] / sqrt(G) over base-4
 * digits; H4 symmetric, so the index order of each stage does not matter). */
static void rotate_groups(float *x, int64_t n, int group)
{
    float tmp[256];
    for (int64_t g0 = 0; g0 < n; g0 += group) {
        float *v = x + g0;
        for (int s = 1; s < group; s *= 4) {
            for (int i = 0; i < group; i++) {
                int d = (i / s) % 4, base = i - d * s;
                tmp[i] = 0.5f * (H4[d][0] * v[base] + H4[d][1] * v[base + s] + H4[d][2] * v[base + 2 * s] +
                                 H4[d][3] * v[base + 3 * s]);
            }
            memcpy(v, tmp, (size_t)group * 4);
        }
    }
}

typedef struct rot_job {
    mm_tensor *out, *q, *s;
    const mm_tensor *x;
    int group;
} rot_job;

static void rotate_rows(void *user, int64_t begin, int64_t end)
{
    const rot_job *j = user;
    int64_t k = cpu_cols(j->x);
    float *buf = malloc((size_t)k * 4);
    if (!buf)
        return;
    for (int64_t r = begin; r < end; r++) {
        cpu_load_f32(buf, cpu_row_ptr(j->x, r), j->x->dtype, k, 1);
        rotate_groups(buf, k, j->group);
        cpu_store_f32(cpu_row_ptr(j->out, r), j->out->dtype, 1, buf, k);
    }
    free(buf);
}

int mm_cpu_hadamard_rotate(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, int group)
{
    rot_job j = {.out = out, .x = x, .group = group};
    mm_parallel_for(ctx, cpu_rows(x), 8, rotate_rows, &j);
    return 0;
}

static void quantize_rows(void *user, int64_t begin, int64_t end)
{
    const rot_job *j = user;
    int64_t k = cpu_cols(j->x);
    float *buf = malloc((size_t)k * 4);
    if (!buf)
        return;
    float *sv = j->s->data;
    int64_t ss = j->s->ndim == 1 ? j->s->stride[0] : 1;
    for (int64_t r = begin; r < end; r++) {
        cpu_load_f32(buf, cpu_row_ptr(j->x, r), j->x->dtype, k, 1);
        rotate_groups(buf, k, j->group);
        float amax = 0.0f;
        for (int64_t i = 0; i < k; i++) {
            /* the reference rounds its rotation to the activation dtype */
            if (j->x->dtype == MM_BF16)
                buf[i] = cpu_bf16_f32(cpu_f32_bf16(buf[i]));
            else if (j->x->dtype == MM_F16)
                buf[i] = mm_f16_to_f32(mm_f32_to_f16(buf[i]));
            float a = fabsf(buf[i]);
            amax = a > amax ? a : amax;
        }
        float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
        int8_t *q = cpu_row_ptr(j->q, r);
        for (int64_t i = 0; i < k; i++) {
            float v = nearbyintf(buf[i] / scale);
            q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
        sv[r * ss] = scale;
    }
    free(buf);
}

int mm_cpu_convrot_quantize(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, const mm_tensor *x, int group)
{
    rot_job j = {.q = q, .s = s, .x = x, .group = group};
    mm_parallel_for(ctx, cpu_rows(x), 4, quantize_rows, &j);
    return 0;
}

/* ------------------------------------------------------------ W8A8 GEMM */

typedef int32_t v8i __attribute__((vector_size(32)));
typedef int8_t v8c __attribute__((vector_size(8)));

#define I8_ROWS 16
#define I8_COLS 64

typedef struct i8_job {
    mm_tensor *out;
    const mm_tensor *qx, *sx, *qw, *sw, *bias;
    int64_t r, n, k, col_blocks;
} i8_job;

/* (Macros, not functions: 32-byte vectors by value change the ABI
 * between the AVX2 and the baseline clone.) */
#define WIDEN(dst, p)                                                                                                \
    do {                                                                                                             \
        v8c c_;                                                                                                      \
        memcpy(&c_, (p), 8);                                                                                         \
        (dst) = __builtin_convertvector(c_, v8i);                                                                    \
    } while (0)
#define HSUM(v) (((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7]))

/* Exact int32 dot products of 2 activation rows with 2 weight rows. */
static inline __attribute__((always_inline)) void dot2x2(const int8_t *a0, const int8_t *a1, const int8_t *b0, const int8_t *b1, int64_t k,
                          int32_t out[4])
{
    v8i c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0};
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        v8i x0, x1, y0, y1;
        WIDEN(x0, a0 + i);
        WIDEN(x1, a1 + i);
        WIDEN(y0, b0 + i);
        WIDEN(y1, b1 + i);
        c00 += x0 * y0;
        c01 += x0 * y1;
        c10 += x1 * y0;
        c11 += x1 * y1;
    }
    int32_t s00 = HSUM(c00), s01 = HSUM(c01), s10 = HSUM(c10), s11 = HSUM(c11);
    for (; i < k; i++) {
        s00 += a0[i] * b0[i];
        s01 += a0[i] * b1[i];
        s10 += a1[i] * b0[i];
        s11 += a1[i] * b1[i];
    }
    out[0] = s00;
    out[1] = s01;
    out[2] = s10;
    out[3] = s11;
}

MULTIVERSION
static void i8_tasks(void *user, int64_t begin, int64_t end)
{
    const i8_job *j = user;
    float yrow[I8_COLS], swv[I8_COLS], bv[I8_COLS];
    int32_t acc[I8_ROWS][I8_COLS];
    const float *sx = j->sx->data, *sw = j->sw->data;
    int64_t sxs = j->sx->ndim == 1 ? j->sx->stride[0] : 1, sws = j->sw->ndim == 1 ? j->sw->stride[0] : 1;
    for (int64_t t = begin; t < end; t++) {
        int64_t r0 = (t / j->col_blocks) * I8_ROWS, n0 = (t % j->col_blocks) * I8_COLS;
        int64_t nr = j->r - r0 < I8_ROWS ? j->r - r0 : I8_ROWS, nn = j->n - n0 < I8_COLS ? j->n - n0 : I8_COLS;
        for (int64_t i = 0; i < nr; i += 2) {
            const int8_t *a0 = cpu_row_ptr(j->qx, r0 + i), *a1 = i + 1 < nr ? cpu_row_ptr(j->qx, r0 + i + 1) : a0;
            for (int64_t c = 0; c < nn; c += 2) {
                const int8_t *b0 = cpu_row_ptr(j->qw, n0 + c), *b1 = c + 1 < nn ? cpu_row_ptr(j->qw, n0 + c + 1) : b0;
                int32_t d[4];
                dot2x2(a0, a1, b0, b1, j->k, d);
                acc[i][c] = d[0];
                if (c + 1 < nn)
                    acc[i][c + 1] = d[1];
                if (i + 1 < nr) {
                    acc[i + 1][c] = d[2];
                    if (c + 1 < nn)
                        acc[i + 1][c + 1] = d[3];
                }
            }
        }
        for (int64_t c = 0; c < nn; c++)
            swv[c] = sw[(n0 + c) * sws];
        if (j->bias)
            cpu_load_f32(bv, cpu_at(j->bias->data, j->bias->dtype, n0 * (j->bias->ndim == 1 ? j->bias->stride[0] : 1)),
                         j->bias->dtype, nn, j->bias->ndim == 1 ? j->bias->stride[0] : 1);
        for (int64_t i = 0; i < nr; i++) {
            float s = sx[(r0 + i) * sxs];
            for (int64_t c = 0; c < nn; c++) {
                float v = (float)acc[i][c] * (s * swv[c]);
                yrow[c] = j->bias ? v + bv[c] : v;
            }
            mm_tensor *o = j->out;
            cpu_store_f32(cpu_at(o->data, o->dtype, (r0 + i) * o->stride[0] + n0), o->dtype, 1, yrow, nn);
        }
    }
}

int mm_cpu_gemm_i8_scaled(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q_x, const mm_tensor *s_x,
                          const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *bias)
{
    i8_job j = {out, q_x, s_x, q_w, s_w, bias, q_x->shape[0], q_w->shape[0], q_x->shape[1], 0};
    j.col_blocks = (j.n + I8_COLS - 1) / I8_COLS;
    int64_t tasks = ((j.r + I8_ROWS - 1) / I8_ROWS) * j.col_blocks;
    mm_parallel_for(ctx, tasks, 1, i8_tasks, &j);
    return 0;
}

/* ------------------------------------------------------------------ nvfp4 */

/* Byte offset of logical block scale (r, c) in the cuBLAS 128x4 swizzle
 * (text-encoder spec 6.3); C = K/16 scales per row. */
static inline int64_t swizzled(int64_t r, int64_t c, int64_t C)
{
    return ((r / 128) * (C / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

typedef struct fp4_job {
    mm_tensor *out;
    const uint8_t *packed, *scales;
    float scale2;
    int64_t n, k;
    float e4m3[256];
} fp4_job;

static void fp4_rows(void *user, int64_t begin, int64_t end)
{
    const fp4_job *j = user;
    static const float e2m1[16] = {0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    float *row = malloc((size_t)j->k * 4);
    if (!row)
        return;
    int64_t C = j->k / 16;
    for (int64_t r = begin; r < end; r++) {
        const uint8_t *p = j->packed + r * (j->k / 2);
        for (int64_t b = 0; b < C; b++) {
            float d = j->e4m3[j->scales[swizzled(r, b, C)]] * j->scale2;
            for (int64_t e = 0; e < 16; e += 2) {
                uint8_t byte = p[(b * 16 + e) / 2];
                row[b * 16 + e] = e2m1[byte >> 4] * d; /* element 2k: high nibble */
                row[b * 16 + e + 1] = e2m1[byte & 15] * d;
            }
        }
        cpu_store_f32(cpu_at(j->out->data, j->out->dtype, r * j->k), j->out->dtype, 1, row, j->k);
    }
    free(row);
}

int mm_cpu_nvfp4_dequantize(mm_ctx *ctx, mm_tensor *out, const mm_tensor *packed, const mm_tensor *scales,
                            float scale2)
{
    fp4_job *j = malloc(sizeof *j);
    if (!j)
        return mm_ctx_fail(ctx, "mm_nvfp4_dequantize: out of memory");
    j->out = out;
    j->packed = packed->data;
    j->scales = scales->data;
    j->scale2 = scale2;
    j->n = out->shape[0];
    j->k = out->shape[1];
    for (int i = 0; i < 256; i++)
        j->e4m3[i] = mm_e4m3_to_f32((uint8_t)i);
    mm_parallel_for(ctx, j->n, 16, fp4_rows, j);
    free(j);
    return 0;
}

/* -------------------------------------------------------- int8 embedding */

typedef struct emb_job {
    mm_tensor *out;
    const mm_tensor *ids, *table, *scale;
} emb_job;

static void emb_rows(void *user, int64_t begin, int64_t end)
{
    const emb_job *j = user;
    int64_t h = j->table->shape[1];
    float *row = malloc((size_t)h * 4);
    if (!row)
        return;
    const int32_t *ids = j->ids->data;
    const float *sc = j->scale->data;
    int64_t ss = j->scale->ndim == 1 ? j->scale->stride[0] : 1;
    for (int64_t r = begin; r < end; r++) {
        int32_t id = ids[r * j->ids->stride[0]];
        const int8_t *q = (const int8_t *)j->table->data + id * j->table->stride[0];
        float s = sc[id * ss];
        for (int64_t i = 0; i < h; i++)
            row[i] = (float)q[i] * s;
        cpu_store_f32(cpu_row_ptr(j->out, r), j->out->dtype, 1, row, h);
    }
    free(row);
}

int mm_cpu_embedding_i8(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_tensor *table,
                        const mm_tensor *scale)
{
    emb_job j = {out, ids, table, scale};
    mm_parallel_for(ctx, out->shape[0], 16, emb_rows, &j);
    return 0;
}
