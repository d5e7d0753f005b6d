/* Attention on the CPU: a blocked online-softmax (FlashAttention-style) loop,
 * so memory is O(block) rather than O(S^2) and S in the thousands is fine.
 *
 * Work items are (query head, block of BQ query rows). Each item walks the
 * keys it may see in blocks of BK rows: scores S = (scale*q) . k^T in f32,
 * running row max m and sum l, output accumulator O rescaled by exp(m_old -
 * m_new) whenever the max grows, and O / l at the end (one rounding into
 * out). Causal masks and document segments only narrow the key range of
 * each query row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

#define BQ 32
#define BK 64

typedef float v8 __attribute__((vector_size(32)));

typedef struct attn_job {
    mm_tensor *out;
    const mm_tensor *q, *k, *v;
    float scale;
    bool causal;
    const int32_t *seg;
    int n_seg;
    int64_t sq, sk, hq, hkv, d, dv, qblocks;
} attn_job;

/* o += p * v (vectorized explicitly: -O2 does not). */
static inline __attribute__((always_inline)) void axpy(float *o, float p, const float *v, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8 x, y;
        memcpy(&x, o + i, sizeof x);
        memcpy(&y, v + i, sizeof y);
        x += p * y;
        memcpy(o + i, &x, sizeof x);
    }
    for (; i < n; i++)
        o[i] += p * v[i];
}

/* Key range [lo, hi) query row i may attend to. */
static void key_range(const attn_job *j, int64_t i, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = j->sk;
    if (j->seg) {
        int a = 0, b = j->n_seg; /* find the segment with seg[s] <= i < seg[s+1] */
        while (b - a > 1) {
            int m = (a + b) / 2;
            if (j->seg[m] <= i)
                a = m;
            else
                b = m;
        }
        while (a < j->n_seg - 1 && j->seg[a + 1] <= i) /* skip empty segments */
            a++;
        *lo = j->seg[a];
        *hi = j->seg[a + 1];
    }
    if (j->causal && i + 1 < *hi)
        *hi = i + 1;
}

MULTIVERSION
static void attn_items(void *user, int64_t begin, int64_t end)
{
    const attn_job *j = user;
    int64_t d = j->d, dv = j->dv;
    float *qb = malloc((size_t)BQ * d * 4), *kb = malloc((size_t)BK * d * 4), *vb = malloc((size_t)BK * dv * 4);
    float *ob = malloc((size_t)BQ * dv * 4), *sc = malloc((size_t)BQ * BK * 4);
    float m[BQ], l[BQ];
    int64_t lo[BQ], hi[BQ];
    if (!qb || !kb || !vb || !ob || !sc)
        goto out;
    for (int64_t it = begin; it < end; it++) {
        int64_t h = it / j->qblocks, q0 = (it % j->qblocks) * BQ;
        int64_t nq = j->sq - q0 < BQ ? j->sq - q0 : BQ;
        int64_t g = h / (j->hq / j->hkv);
        int64_t klo = j->sk, khi = 0;
        for (int64_t i = 0; i < nq; i++) {
            const mm_tensor *q = j->q;
            cpu_load_f32(qb + i * d, cpu_at(q->data, q->dtype, (q0 + i) * q->stride[0] + h * q->stride[1]), q->dtype,
                         d, 1);
            for (int64_t c = 0; c < d; c++)
                qb[i * d + c] *= j->scale;
            key_range(j, q0 + i, &lo[i], &hi[i]);
            klo = lo[i] < klo ? lo[i] : klo;
            khi = hi[i] > khi ? hi[i] : khi;
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        memset(ob, 0, (size_t)nq * dv * 4);
        for (int64_t k0 = klo; k0 < khi; k0 += BK) {
            int64_t nk = khi - k0 < BK ? khi - k0 : BK;
            for (int64_t t = 0; t < nk; t++) {
                const mm_tensor *k = j->k, *v = j->v;
                cpu_load_f32(kb + t * d, cpu_at(k->data, k->dtype, (k0 + t) * k->stride[0] + g * k->stride[1]),
                             k->dtype, d, 1);
                cpu_load_f32(vb + t * dv, cpu_at(v->data, v->dtype, (k0 + t) * v->stride[0] + g * v->stride[1]),
                             v->dtype, dv, 1);
            }
            for (int64_t i = 0; i < nq; i++) {
                int64_t a = lo[i] - k0, b = hi[i] - k0;
                if (a < 0)
                    a = 0;
                if (b > nk)
                    b = nk;
                if (a >= b)
                    continue;
                float *s = sc + i * BK, mx = m[i];
                for (int64_t t = a; t < b; t++) {
                    s[t] = cpu_dot(qb + i * d, kb + t * d, d);
                    mx = s[t] > mx ? s[t] : mx;
                }
                float corr = expf(m[i] - mx); /* 0 on the first block (m = -inf) */
                float *o = ob + i * dv, psum = 0.0f;
                if (corr != 1.0f)
                    for (int64_t c = 0; c < dv; c++)
                        o[c] *= corr;
                for (int64_t t = a; t < b; t++) {
                    float p = expf(s[t] - mx);
                    psum += p;
                    axpy(o, p, vb + t * dv, dv);
                }
                l[i] = l[i] * corr + psum;
                m[i] = mx;
            }
        }
        for (int64_t i = 0; i < nq; i++) {
            float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            for (int64_t c = 0; c < dv; c++)
                ob[i * dv + c] *= inv;
            mm_tensor *o = j->out;
            cpu_store_f32(cpu_at(o->data, o->dtype, (q0 + i) * o->stride[0] + h * o->stride[1]), o->dtype, 1,
                          ob + i * dv, dv);
        }
    }
out:
    free(qb);
    free(kb);
    free(vb);
    free(ob);
    free(sc);
}

int mm_cpu_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     const mm_attn_params *params)
{
    attn_job j = {.out = out, .q = q, .k = k, .v = v};
    j.sq = q->shape[0];
    j.hq = q->shape[1];
    j.d = q->shape[2];
    j.sk = k->shape[0];
    j.hkv = k->shape[1];
    j.dv = v->shape[2];
    j.scale = params && params->scale != 0.0f ? params->scale : 1.0f / sqrtf((float)j.d);
    j.causal = params && params->causal;
    j.seg = params ? params->seg_offsets : NULL;
    j.n_seg = params ? params->n_seg : 0;
    j.qblocks = (j.sq + BQ - 1) / BQ;
    mm_parallel_for(ctx, j.hq * j.qblocks, 1, attn_items, &j);
    return 0;
}
