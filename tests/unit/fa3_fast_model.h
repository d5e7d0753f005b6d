/* CPU model of the DiT's fast-mode attention (kernels/attn_fa3.cu) and the
 * error budget its tolerance comes from. Shared by test_fa3_fast_model
 * (CPU: the budget bounds the model's error on many inputs) and
 * test_speed_attention (GPU: the kernel equals the model, and its error
 * against exact attention stays inside the budget).
 *
 * The model repeats the kernel's arithmetic: k and v lose their per-channel
 * means over all keys; q is int8 per (row, head) with s = amax/127, k' per
 * (kv head, 128-key tile); scores are exact int32 sums scaled by
 * scale·log2 e·s_q·s_k; the online softmax runs over 128-key tiles with
 * base-2 exponentials; FA3_FAST rounds P (offset by 2⁸) and
 * (v − v̄)·448/amax to e4m3 and adds v̄ back at the end; FA3_FAST_QK rounds
 * P to bf16 and keeps v (a model only, the q·k half of fast mode's rounding:
 * its kernel was removed, docs/PERFORMANCE.md); the output is rounded to
 * bf16.
 *
 * The budget is first order in each rounding, its errors independent:
 *   q·k: an error δ_ij in score s_ij moves output row i by
 *        Σ_j w_ij δ_ij (v_j − O_i); the int8 steps Δq_i, Δk_t (uniform
 *        rounding, variance Δ²/12 per element) give
 *        Var δ_ij = scale² (Δq_i²/12 |k'_j|² + Δk_t²/12 |q_i|²);
 *   P, V (e4m3): relative rounding with variance ε² = 2⁻⁶/12 · E[1/m²]
 *        = 7.04e-4 for mantissas m spread log-uniformly in [1, 2) (rms
 *        2.65%), each term Σ_j w_ij² |v_j − v̄|²;
 *   P (bf16) and the output: ε² = 2⁻¹⁴/12 · 0.541;
 * predicted rel_l2 = sqrt(Σ_i E|δO_i|² / Σ_i |O_i|²). It leaves out the
 * second-order terms and e4m3's subnormal range, and sits a little above
 * what the model measures (test_fa3_fast_model checks that it does).
 */
#ifndef MMH3_TESTS_FA3_FAST_MODEL_H
#define MMH3_TESTS_FA3_FAST_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/dtype.h"

/* LEGACY: the first fast kernel (device runs #4/#5), for comparison: q and k
 * e4m3 per 128-row block (amax/448, no smoothing), v e4m3 per channel
 * (no smoothing), P e4m3 with the 2⁸ offset. FAST_LEAN: FAST with the
 * softmax's row sums taken over the e4m3-rounded P (the lean kernel's
 * tensor-core sums: what fast mode runs), the same values the output weighs v
 * with; its budget is FAST's. */
enum { FA3_MODEL_EXACT = 0, FA3_MODEL_FAST = 1, FA3_MODEL_FAST_QK = 2, FA3_MODEL_LEGACY = 3, FA3_MODEL_FAST_LEAN = 4 };

#define FA3_D 128
#define FA3_TILE 128
#define FA3_EPS2_E4M3 7.04e-4
#define FA3_EPS2_BF16 (0.541 / 16384.0 / 12.0)

typedef struct fa3_model_in {
    int S, hq, hkv;
    const float *q, *k, *v; /* bf16-valued; [S, heads, 128] with row strides */
    int64_t ldq, ldk, ldv;
    float scale;
} fa3_model_in;

/* Per kv head: the smoothed, quantized operands and their scales. */
typedef struct fa3_model_prep {
    const fa3_model_in *in;
    int mode;
    float *kmean, *vmean, *vscale;  /* [hkv][128] */
    int8_t *q8, *k8;                /* [S][hq][128], [S][hkv][128] */
    float *qs, *ks;                 /* [hq][S], [hkv][tiles] */
    float *vq;                      /* [S][hkv][128]: the values P·V reads (dequantized e4m3, or v) */
    float *qf, *kf;                 /* LEGACY: dequantized e4m3 q [S][hq][128], k [S][hkv][128] */
    float *out;                     /* [S][hq][128] */
    double *err_qk, *err_pv, *den;  /* budget terms per (row, head) */
} fa3_model_prep;

static inline float fa3_e4m3(float x)
{
    x = fminf(fmaxf(x, -448.f), 448.f);
    return mm_e4m3_to_f32(mm_f32_to_e4m3(x));
}

static inline int8_t fa3_i8(float x)
{
    float r = rintf(x);
    return (int8_t)(r > 127.f ? 127 : r < -127.f ? -127 : (int)r);
}

static void fa3_model_prepare(fa3_model_prep *p, const fa3_model_in *in, int mode)
{
    memset(p, 0, sizeof *p);
    p->in = in;
    p->mode = mode;
    const int S = in->S, D = FA3_D, tiles = (in->S + FA3_TILE - 1) / FA3_TILE;
    p->kmean = calloc((size_t)in->hkv * D, sizeof(float));
    p->vmean = calloc((size_t)in->hkv * D, sizeof(float));
    p->vscale = calloc((size_t)in->hkv * D, sizeof(float));
    p->q8 = calloc((size_t)S * in->hq * D, 1);
    p->k8 = calloc((size_t)S * in->hkv * D, 1);
    p->qs = calloc((size_t)in->hq * S, sizeof(float));
    p->ks = calloc((size_t)in->hkv * tiles, sizeof(float));
    p->vq = calloc((size_t)S * in->hkv * D, sizeof(float));
    if (mode == FA3_MODEL_LEGACY) {
        p->qf = calloc((size_t)S * in->hq * D, sizeof(float));
        p->kf = calloc((size_t)S * in->hkv * D, sizeof(float));
        for (int pass = 0; pass < 2; pass++) { /* q, then k: per (head, 128-row block) */
            const int heads = pass ? in->hkv : in->hq;
            const float *x = pass ? in->k : in->q;
            const int64_t ld = pass ? in->ldk : in->ldq;
            float *xf = pass ? p->kf : p->qf;
            for (int h = 0; h < heads; h++)
                for (int t = 0; t < tiles; t++) {
                    const int j0 = t * FA3_TILE, j1 = j0 + FA3_TILE < S ? j0 + FA3_TILE : S;
                    float amax = 0.f;
                    for (int j = j0; j < j1; j++)
                        for (int c = 0; c < D; c++)
                            amax = fmaxf(amax, fabsf(x[(int64_t)j * ld + h * D + c]));
                    const float s = amax > 0.f ? amax / 448.f : 1.f, inv = amax > 0.f ? 448.f / amax : 0.f;
                    for (int j = j0; j < j1; j++)
                        for (int c = 0; c < D; c++)
                            xf[((int64_t)j * heads + h) * D + c] = fa3_e4m3(x[(int64_t)j * ld + h * D + c] * inv) * s;
                }
        }
    }
    p->out = calloc((size_t)S * in->hq * D, sizeof(float));
    p->err_qk = calloc((size_t)S * in->hq, sizeof(double));
    p->err_pv = calloc((size_t)S * in->hq, sizeof(double));
    p->den = calloc((size_t)S * in->hq, sizeof(double));
    for (int hk = 0; hk < in->hkv; hk++)
        for (int c = 0; c < D; c++) {
            double sk = 0, sv = 0;
            float mx = -INFINITY, mn = INFINITY;
            for (int j = 0; j < S; j++) {
                sk += in->k[(int64_t)j * in->ldk + hk * D + c];
                float v = in->v[(int64_t)j * in->ldv + hk * D + c];
                sv += v;
                mx = fmaxf(mx, v);
                mn = fminf(mn, v);
            }
            p->kmean[hk * D + c] = (float)(sk / S);
            p->vmean[hk * D + c] = (float)(sv / S);
            if (mode == FA3_MODEL_LEGACY) /* no smoothing */
                p->vmean[hk * D + c] = 0.f;
            float vm = p->vmean[hk * D + c], amax = fmaxf(mx - vm, vm - mn);
            p->vscale[hk * D + c] = amax > 0.f ? amax / 448.f : 1.f;
            for (int j = 0; j < S; j++) {
                float v = in->v[(int64_t)j * in->ldv + hk * D + c];
                p->vq[((int64_t)j * in->hkv + hk) * D + c] =
                    mode != FA3_MODEL_FAST_QK ? (amax > 0.f ? fa3_e4m3((v - vm) * (448.f / amax)) : 0.f) : v;
            }
        }
    for (int j = 0; j < S; j++)
        for (int h = 0; h < in->hq; h++) {
            const float *x = in->q + (int64_t)j * in->ldq + h * D;
            float amax = 0.f;
            for (int c = 0; c < D; c++)
                amax = fmaxf(amax, fabsf(x[c]));
            p->qs[(int64_t)h * S + j] = amax > 0.f ? amax / 127.f : 1.f;
            float inv = amax > 0.f ? 127.f / amax : 0.f;
            for (int c = 0; c < D; c++)
                p->q8[((int64_t)j * in->hq + h) * D + c] = fa3_i8(x[c] * inv);
        }
    for (int hk = 0; hk < in->hkv; hk++)
        for (int t = 0; t < tiles; t++) {
            const int j0 = t * FA3_TILE, j1 = j0 + FA3_TILE < S ? j0 + FA3_TILE : S;
            float amax = 0.f;
            for (int j = j0; j < j1; j++)
                for (int c = 0; c < D; c++)
                    amax = fmaxf(amax, fabsf(in->k[(int64_t)j * in->ldk + hk * D + c] - p->kmean[hk * D + c]));
            p->ks[hk * tiles + t] = amax > 0.f ? amax / 127.f : 1.f;
            float inv = amax > 0.f ? 127.f / amax : 0.f;
            for (int j = j0; j < j1; j++)
                for (int c = 0; c < D; c++)
                    p->k8[((int64_t)j * in->hkv + hk) * D + c] =
                        fa3_i8((in->k[(int64_t)j * in->ldk + hk * D + c] - p->kmean[hk * D + c]) * inv);
        }
}

static void fa3_model_free(fa3_model_prep *p)
{
    free(p->kmean), free(p->vmean), free(p->vscale), free(p->q8), free(p->k8), free(p->qs), free(p->ks);
    free(p->vq), free(p->qf), free(p->kf), free(p->out), free(p->err_qk), free(p->err_pv), free(p->den);
}

/* Rows [b, e) of (row, head) items: the kernel's arithmetic. */
static void fa3_model_rows(void *user, int64_t b, int64_t e)
{
    fa3_model_prep *p = user;
    const fa3_model_in *in = p->in;
    const int S = in->S, D = FA3_D, tiles = (S + FA3_TILE - 1) / FA3_TILE;
    const bool e4m3_pv = p->mode != FA3_MODEL_FAST_QK, legacy = p->mode == FA3_MODEL_LEGACY;
    const bool sum_rounded = p->mode == FA3_MODEL_FAST_LEAN;
    const float off = e4m3_pv ? 8.f : 0.f;
    float acc[FA3_TILE]; /* exact: int32 sums below 2^24, or the legacy float scores */
    for (int64_t it = b; it < e; it++) {
        const int i = (int)(it / in->hq), h = (int)(it % in->hq), hk = h / (in->hq / in->hkv);
        const int8_t *qi = p->q8 + ((int64_t)i * in->hq + h) * D;
        const float sl_row = in->scale * 1.4426950408889634f * (legacy ? 1.f : p->qs[(int64_t)h * S + i]);
        const float *qfi = legacy ? p->qf + ((int64_t)i * in->hq + h) * D : NULL;
        float o[FA3_D] = {0}, m = -INFINITY, l = 0.f;
        for (int t = 0; t < tiles; t++) {
            const int j0 = t * FA3_TILE, n = j0 + FA3_TILE < S ? FA3_TILE : S - j0;
            const float sl = sl_row * (legacy ? 1.f : p->ks[hk * tiles + t]);
            float mx = -INFINITY;
            for (int jj = 0; jj < n; jj++) {
                if (legacy) {
                    const float *kj = p->kf + ((int64_t)(j0 + jj) * in->hkv + hk) * D;
                    float s = 0.f;
                    for (int c = 0; c < D; c++)
                        s = fmaf(qfi[c], kj[c], s);
                    acc[jj] = s;
                } else {
                    const int8_t *kj = p->k8 + ((int64_t)(j0 + jj) * in->hkv + hk) * D;
                    int32_t s = 0;
                    for (int c = 0; c < D; c++)
                        s += (int32_t)qi[c] * kj[c];
                    acc[jj] = (float)s;
                }
                mx = fmaxf(mx, acc[jj]);
            }
            const float m_new = fmaxf(m, mx * sl), corr = exp2f(m - m_new);
            for (int c = 0; c < D; c++)
                o[c] *= corr;
            float sum = 0.f;
            for (int jj = 0; jj < n; jj++) {
                const float pv = exp2f(fmaf(acc[jj], sl, off - m_new));
                const float pq = e4m3_pv ? fa3_e4m3(pv) : mm_round_bf16(pv);
                sum += sum_rounded ? pq : pv;
                const float *vj = p->vq + ((int64_t)(j0 + jj) * in->hkv + hk) * D;
                for (int c = 0; c < D; c++)
                    o[c] = fmaf(pq, vj[c], o[c]);
            }
            l = l * corr + sum;
            m = m_new;
        }
        float *out = p->out + ((int64_t)i * in->hq + h) * D;
        for (int c = 0; c < D; c++) {
            float x = o[c] / l;
            if (e4m3_pv)
                x = fmaf(x, p->vscale[hk * D + c], p->vmean[hk * D + c]);
            out[c] = mm_round_bf16(x);
        }
    }
}

/* Rows [b, e) of (row, head) items: exact attention in double (into out
 * when given) and the budget's terms. */
typedef struct fa3_budget_job {
    fa3_model_prep *p;
    float *exact; /* [S][hq][128] or NULL */
} fa3_budget_job;

static void fa3_budget_rows(void *user, int64_t b, int64_t e)
{
    fa3_budget_job *job = user;
    fa3_model_prep *p = job->p;
    const fa3_model_in *in = p->in;
    const int S = in->S, D = FA3_D, tiles = (S + FA3_TILE - 1) / FA3_TILE;
    const bool e4m3 = p->mode == FA3_MODEL_FAST || p->mode == FA3_MODEL_FAST_LEAN;
    double *w = malloc(sizeof(double) * (size_t)S);
    for (int64_t it = b; it < e; it++) {
        const int i = (int)(it / in->hq), h = (int)(it % in->hq), hk = h / (in->hq / in->hkv);
        const float *qi = in->q + (int64_t)i * in->ldq + h * D;
        double qn = 0, mx = -INFINITY, sum = 0, O[FA3_D] = {0};
        for (int c = 0; c < D; c++)
            qn += (double)qi[c] * qi[c];
        for (int j = 0; j < S; j++) {
            const float *kj = in->k + (int64_t)j * in->ldk + hk * D;
            double s = 0;
            for (int c = 0; c < D; c++)
                s += (double)qi[c] * kj[c];
            w[j] = s * in->scale;
            mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < S; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int j = 0; j < S; j++) {
            w[j] /= sum;
            const float *vj = in->v + (int64_t)j * in->ldv + hk * D;
            for (int c = 0; c < D; c++)
                O[c] += w[j] * vj[c];
        }
        double on = 0;
        for (int c = 0; c < D; c++)
            on += O[c] * O[c];
        const double dq = p->qs[(int64_t)h * S + i]; /* the int8 step is the scale */
        double e_qk = 0, e_pv = 0;
        for (int j = 0; j < S; j++) {
            const float *kj = in->k + (int64_t)j * in->ldk + hk * D, *vj = in->v + (int64_t)j * in->ldv + hk * D;
            double kn = 0, dist = 0, vs = 0;
            for (int c = 0; c < D; c++) {
                double kc = (double)kj[c] - p->kmean[hk * D + c];
                kn += kc * kc;
                dist += (vj[c] - O[c]) * (vj[c] - O[c]);
                double vc = e4m3 ? (double)vj[c] - p->vmean[hk * D + c] : vj[c];
                vs += vc * vc;
            }
            const double dk = p->ks[hk * tiles + j / FA3_TILE];
            const double var_s = (double)in->scale * in->scale * (dq * dq / 12 * kn + dk * dk / 12 * qn);
            const double w2 = w[j] * w[j];
            e_qk += w2 * var_s * dist;
            e_pv += w2 * vs * (e4m3 ? 2 * FA3_EPS2_E4M3 : FA3_EPS2_BF16);
        }
        p->err_qk[it] = e_qk;
        p->err_pv[it] = e_pv + FA3_EPS2_BF16 * on; /* + the output's bf16 rounding */
        p->den[it] = on;
        if (job->exact)
            for (int c = 0; c < D; c++)
                job->exact[((int64_t)i * in->hq + h) * D + c] = (float)O[c];
    }
    free(w);
}

/* The model's output of `mode` into model_out, exact attention into exact
 * (either may be NULL), and the predicted rel_l2 of the mode (FAST,
 * FAST_LEAN or FAST_QK) against exact attention; parts[0..1] (may be NULL) receive the
 * q·k and the P·V + output shares of it. LEGACY has no budget (0). */
static double fa3_model_run(mm_ctx *cpu, const fa3_model_in *in, int mode, float *model_out, float *exact,
                            double parts[2])
{
    fa3_model_prep p;
    fa3_model_prepare(&p, in, mode);
    const int64_t items = (int64_t)in->S * in->hq;
    if (model_out) {
        mm_parallel_for(cpu, items, 8, fa3_model_rows, &p);
        memcpy(model_out, p.out, sizeof(float) * (size_t)items * FA3_D);
    }
    if (mode == FA3_MODEL_LEGACY) {
        fa3_model_free(&p);
        if (parts)
            parts[0] = parts[1] = 0;
        return 0;
    }
    fa3_budget_job job = {&p, exact};
    mm_parallel_for(cpu, items, 8, fa3_budget_rows, &job);
    double qk = 0, pv = 0, den = 0;
    for (int64_t it = 0; it < items; it++) {
        qk += p.err_qk[it];
        pv += p.err_pv[it];
        den += p.den[it];
    }
    fa3_model_free(&p);
    if (parts) {
        parts[0] = den > 0 ? sqrt(qk / den) : 0;
        parts[1] = den > 0 ? sqrt(pv / den) : 0;
    }
    return den > 0 ? sqrt((qk + pv) / den) : 0;
}

static double fa3_rel_l2(const float *a, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]))
            return INFINITY;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
