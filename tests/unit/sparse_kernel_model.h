/* A CPU model of the arithmetic of the bf16 sparse attention kernels
 * (kernels/attn_sparse.cu: k_sp_attn_sm80 and k_sp_fa3), to find and check
 * on the CPU what the device's numbers say: the item walk (centroid tiles
 * first, then the routed blocks in increasing order), 64-key items (the
 * portable kernel) or 128-key items dealt alternately to two consumers whose
 * softmax states merge at the end (the Hopper kernel), fp32 online-softmax
 * state, P rounded to bf16 for P·V while the row sums take it unrounded, the
 * output rounded to bf16.
 *
 * SKM_SPLIT models the centroid tiles' P·V with P carried as two bf16
 * terms (hi = bf16(P), lo = bf16(P − hi)): a centroid stands for a whole
 * block, so one rounding of its P is not averaged over 64 keys as the exact
 * blocks' roundings are, and where the approximated blocks' values cancel
 * (attention spread over blocks whose value means sum to ~0) that error
 * dominates the output.
 *
 * Inputs as sparse_ref.h: host floats holding bf16 values; mask [NT, H, W]
 * words, kc / vc [NT, Hkv, D]; out [S, H, D] floats holding bf16 values. */
#ifndef MMH3_TESTS_SPARSE_KERNEL_MODEL_H
#define MMH3_TESTS_SPARSE_KERNEL_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "sparse_ref.h"

enum { SKM_BF16, SKM_SPLIT };

typedef struct skm_kernel {
    int item;            /* keys per item: 64 (portable) or 128 (Hopper: two blocks, or 128 centroids) */
    int consumers;       /* 1, or 2 (items dealt alternately, states merged) */
    int centroid;        /* the centroid tiles' P: SKM_BF16 (rounded once) or SKM_SPLIT (bf16 + its residual) */
    bool centroids_only; /* fast mode's centroid pass: only the centroid tiles, and the row state out */
} skm_kernel;

typedef struct skm_state {
    float m, l;
    float *o; /* [D] */
} skm_state;

static inline float skm_bf16(float x) { return mm_bf16_to_f32(mm_f32_to_bf16(x)); }

static inline float skm_dot(const float *a, const float *b, int64_t D)
{
    float s = 0;
    for (int64_t d = 0; d < D; d++)
        s = fmaf(a[d], b[d], s);
    return s;
}

/* One item's update of a row state: keys[c] / vals[c] for c < n with raw
 * scores x[c] (−inf: masked), weights wt[c] in the row sum. */
static inline void skm_update(skm_state *st, const float *x, const float *wt, const float *const *vals, int n,
                              float s2, int prec, int64_t D)
{
    float mx = -INFINITY;
    for (int c = 0; c < n; c++)
        mx = fmaxf(mx, x[c]);
    const float m_new = fmaxf(st->m, mx * s2), m_use = m_new == -INFINITY ? 0.f : m_new;
    const float corr = exp2f(st->m - m_use);
    st->m = m_new;
    float sum = 0;
    for (int64_t d = 0; d < D; d++)
        st->o[d] *= corr;
    for (int c = 0; c < n; c++) {
        if (x[c] == -INFINITY)
            continue;
        const float p = exp2f(fmaf(x[c], s2, -m_use)), hi = skm_bf16(p), lo = prec == SKM_SPLIT ? skm_bf16(p - hi) : 0.f;
        sum += p * wt[c];
        for (int64_t d = 0; d < D; d++)
            st->o[d] = fmaf(hi, vals[c][d], st->o[d]) + lo * vals[c][d];
    }
    st->l = st->l * corr + sum;
}

/* out [S, H, D]; with k.centroids_only also state [S, H, 2]: (row max, row sum), (−inf, 0) for none. */
static inline void skm_attention(const sref_problem *p, const uint32_t *mask, int64_t W, const float *kc,
                                 const float *vc, bool approximate, skm_kernel k, float *out, float *state)
{
    const int64_t NT = sref_blocks(p), D = p->D, H = p->H, Hkv = p->Hkv, S = p->S;
    const float s2 = (float)sref_s2(p);
    int32_t *routed = malloc(sizeof(int32_t) * (size_t)NT);
    float *x = malloc(sizeof(float) * 128), *wt = malloc(sizeof(float) * 128), *obuf = malloc(sizeof(float) * 2 * (size_t)D);
    const float **vals = malloc(sizeof(float *) * 128);
    for (int64_t i = 0; i < NT; i++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t hk = h / (H / Hkv);
            int count = 0;
            for (int64_t n = 0; n < NT; n++)
                if (sref_bit(mask, W, i, h, H, n))
                    routed[count++] = (int32_t)n;
            const int n_ct = approximate && count < NT ? (int)((NT + k.item - 1) / k.item) : 0;
            const int per = k.item / 64, n_items = n_ct + (k.centroids_only ? 0 : (count + per - 1) / per);
            for (int64_t r = 0; r < sref_len(p, i); r++) {
                const int64_t row = 64 * i + r;
                const float *q = p->q + (row * H + h) * D;
                skm_state st[2] = {{-INFINITY, 0, obuf}, {-INFINITY, 0, obuf + D}};
                memset(obuf, 0, sizeof(float) * 2 * (size_t)D);
                for (int it = 0; it < n_items; it++) {
                    int n = 0;
                    if (it < n_ct) {
                        for (int c = 0; c < k.item; c++, n++) {
                            const int64_t b = (int64_t)it * k.item + c;
                            const bool keep = b < NT && !sref_bit(mask, W, i, h, H, b);
                            const float *kr = kc + ((keep ? b : 0) * Hkv + hk) * D;
                            x[n] = keep ? skm_dot(q, kr, D) : -INFINITY;
                            wt[n] = keep ? (float)sref_len(p, b) : 0.f;
                            vals[n] = vc + ((keep ? b : 0) * Hkv + hk) * D;
                        }
                    } else {
                        for (int s = 0; s < per; s++) {
                            const int at = (it - n_ct) * per + s;
                            for (int c = 0; c < 64; c++, n++) {
                                const int64_t key = at < count ? 64 * (int64_t)routed[at] + c : S;
                                const bool keep = key < S;
                                x[n] = keep ? skm_dot(q, p->k + (key * Hkv + hk) * D, D) : -INFINITY;
                                wt[n] = 1.f;
                                vals[n] = p->v + ((keep ? key : 0) * Hkv + hk) * D;
                            }
                        }
                    }
                    skm_update(&st[it % k.consumers], x, wt, vals, n, s2, it < n_ct ? k.centroid : SKM_BF16, D);
                }
                const float M = fmaxf(st[0].m, st[1].m);
                const float a0 = st[0].m == -INFINITY ? 0.f : exp2f(st[0].m - M);
                const float a1 = st[1].m == -INFINITY ? 0.f : exp2f(st[1].m - M);
                const float L = a0 * st[0].l + a1 * st[1].l, inv = L > 0.f ? 1.f / L : 0.f;
                for (int64_t d = 0; d < D; d++)
                    out[(row * H + h) * D + d] = skm_bf16((a0 * st[0].o[d] + a1 * st[1].o[d]) * inv);
                if (state) {
                    state[(row * H + h) * 2] = L > 0.f ? M : -INFINITY;
                    state[(row * H + h) * 2 + 1] = L;
                }
            }
        }
    free(routed);
    free(x);
    free(wt);
    free(obuf);
    free(vals);
}

/* ------------------------------------------------------------ fast mode */

/* e4m3 (fp8, 3 mantissa bits, exponents −6 … 8), round to nearest even, saturated at ±448: cvt.rn.satfinite. */
static inline float skm_e4m3(float x)
{
    const float a = fabsf(x);
    if (a >= 448.f)
        return copysignf(448.f, x);
    int e;
    frexpf(a, &e);
    const float quantum = ldexpf(1.f, e - 1 >= -6 ? e - 4 : -9);
    return copysignf(rintf(a / quantum) * quantum, x);
}

static inline int skm_i8(float x)
{
    const long r = lrintf(x);
    return r > 127 ? 127 : r < -127 ? -127 : (int)r;
}

/* rows [n0, n1) of x [*, Hkv, D] (head hk) minus mean, as int8 with one scale (amax / 127). */
static inline float skm_quant_rows(const float *x, int64_t n0, int64_t n1, int64_t Hkv, int64_t hk, int64_t D,
                                   const float *mean, int8_t *out)
{
    float amax = 0;
    for (int64_t r = n0; r < n1; r++)
        for (int64_t d = 0; d < D; d++)
            amax = fmaxf(amax, fabsf(x[(r * Hkv + hk) * D + d] - mean[d]));
    const float inv = amax > 0 ? 127.f / amax : 0.f;
    for (int64_t r = n0; r < n1; r++)
        for (int64_t d = 0; d < D; d++)
            out[(r * Hkv + hk) * D + d] = (int8_t)skm_i8((x[(r * Hkv + hk) * D + d] - mean[d]) * inv);
    return amax > 0 ? amax / 127.f : 1.f;
}

enum { SKMF_IN_KERNEL, SKMF_PASS };

/* The fast Hopper kernel (k_sp_fa3_fast): q int8 per (row, head); k − its channel mean int8 per 64-key
 * block; v − its channel mean in e4m3 with per-channel scales; P·2^8 in e4m3 (row sums unrounded); each
 * item's P·V into a fresh fp32 sum folded into the output; two consumers merged; o / l · v scale + v mean.
 * The centroid tiles, mode SKMF_PASS (the kernel now): the bf16 kernel's centroid pass (skm_attention with
 * centroids_only) and a merge of the two normalized parts, the fast part's row max moved by s2·q·(k mean)
 * (what its scores leave out); mode SKMF_IN_KERNEL (the kernel before): inside, kc − k mean int8 per
 * 128-centroid tile, vc − len·(v mean) in e4m3 with channel scales of its own, that tile's P·V folded in
 * at the ratio of vc's and v's scales. */
static inline void skm_attention_fast(const sref_problem *p, const uint32_t *mask, int64_t W, const float *kc,
                                      const float *vc, bool approximate, int centroid_mode, float *out)
{
    const int64_t NT = sref_blocks(p), D = p->D, H = p->H, Hkv = p->Hkv, S = p->S, ntile = (NT + 127) / 128;
    const float s2 = (float)sref_s2(p);
    const bool in_kernel = approximate && centroid_mode == SKMF_IN_KERNEL, pass = approximate && !in_kernel;
    float *km = calloc((size_t)(Hkv * D), sizeof(float)), *vm = calloc((size_t)(Hkv * D), sizeof(float));
    float *vsc = malloc(sizeof(float) * (size_t)(Hkv * D)), *vf = malloc(sizeof(float) * (size_t)(Hkv * D));
    float *vcsc = malloc(sizeof(float) * (size_t)(Hkv * D)), *vcf = malloc(sizeof(float) * (size_t)(Hkv * D));
    int8_t *k8 = malloc((size_t)(S * Hkv * D)), *kc8 = malloc((size_t)(NT * Hkv * D));
    float *ksc = malloc(sizeof(float) * (size_t)(NT * Hkv)), *kcsc = malloc(sizeof(float) * (size_t)(ntile * Hkv));
    float *v8 = malloc(sizeof(float) * (size_t)(S * Hkv * D)), *vc8 = malloc(sizeof(float) * (size_t)(NT * Hkv * D));
    float *cout = pass ? malloc(sizeof(float) * (size_t)(S * H * D)) : NULL;
    float *cstate = pass ? malloc(sizeof(float) * (size_t)(S * H * 2)) : NULL;
    if (pass)
        skm_attention(p, mask, W, kc, vc, true, (skm_kernel){128, 2, SKM_SPLIT, true}, cout, cstate);
    for (int64_t hk = 0; hk < Hkv; hk++)
        for (int64_t d = 0; d < D; d++) {
            float sk = 0, sv = 0, mx = -INFINITY, mn = INFINITY;
            for (int64_t r = 0; r < S; r++) {
                sk += p->k[(r * Hkv + hk) * D + d];
                const float v = p->v[(r * Hkv + hk) * D + d];
                sv += v;
                mx = fmaxf(mx, v);
                mn = fminf(mn, v);
            }
            const int64_t at = hk * D + d;
            km[at] = sk / (float)S;
            vm[at] = sv / (float)S;
            const float amax = fmaxf(mx - vm[at], vm[at] - mn);
            float camax = 0;
            for (int64_t n = 0; n < NT; n++)
                camax = fmaxf(camax, fabsf(vc[(n * Hkv + hk) * D + d] - (float)sref_len(p, n) * vm[at]));
            vsc[at] = amax > 0 ? amax / 448.f : 1.f;
            vf[at] = amax > 0 ? 448.f / amax : 0.f;
            vcsc[at] = camax > 0 ? camax / 448.f : 1.f;
            vcf[at] = camax > 0 ? 448.f / camax : 0.f;
            for (int64_t r = 0; r < S; r++)
                v8[(r * Hkv + hk) * D + d] = skm_e4m3((p->v[(r * Hkv + hk) * D + d] - vm[at]) * vf[at]);
            for (int64_t n = 0; n < NT; n++)
                vc8[(n * Hkv + hk) * D + d] =
                    skm_e4m3((vc[(n * Hkv + hk) * D + d] - (float)sref_len(p, n) * vm[at]) * vcf[at]);
        }
    for (int64_t hk = 0; hk < Hkv; hk++) {
        for (int64_t n = 0; n < NT; n++)
            ksc[hk * NT + n] = skm_quant_rows(p->k, 64 * n, 64 * n + sref_len(p, n), Hkv, hk, D, km + hk * D, k8);
        for (int64_t t = 0; t < ntile; t++)
            kcsc[hk * ntile + t] =
                skm_quant_rows(kc, 128 * t, 128 * t + 128 < NT ? 128 * t + 128 : NT, Hkv, hk, D, km + hk * D, kc8);
    }
    int32_t *routed = malloc(sizeof(int32_t) * (size_t)NT);
    float *x = malloc(sizeof(float) * 128), *obuf = malloc(sizeof(float) * 3 * (size_t)D);
    int8_t q8[512];
    for (int64_t i = 0; i < NT; i++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t hk = h / (H / Hkv);
            int count = 0;
            for (int64_t n = 0; n < NT; n++)
                if (sref_bit(mask, W, i, h, H, n))
                    routed[count++] = (int32_t)n;
            const int n_ct = in_kernel && count < NT ? (int)ntile : 0, n_items = n_ct + (count + 1) / 2;
            for (int64_t r = 0; r < sref_len(p, i); r++) {
                const int64_t row = 64 * i + r;
                const float *q = p->q + (row * H + h) * D;
                float qa = 0;
                for (int64_t d = 0; d < D; d++)
                    qa = fmaxf(qa, fabsf(q[d]));
                const float qsc = qa > 0 ? qa / 127.f : 1.f, qinv = qa > 0 ? 127.f / qa : 0.f;
                for (int64_t d = 0; d < D; d++)
                    q8[d] = (int8_t)skm_i8(q[d] * qinv);
                float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, *o[2] = {obuf, obuf + D}, *ot = obuf + 2 * D;
                memset(obuf, 0, sizeof(float) * 2 * (size_t)D);
                for (int it = 0; it < n_items; it++) {
                    const int c = it % 2;
                    const bool centroid = it < n_ct;
                    const float *val[128];
                    float wt[128];
                    for (int col = 0; col < 128; col++) {
                        int64_t key = -1, blk = -1;
                        if (centroid) {
                            blk = (int64_t)it * 128 + col;
                            if (blk >= NT || sref_bit(mask, W, i, h, H, blk))
                                blk = -1;
                        } else {
                            const int at = (it - n_ct) * 2 + col / 64;
                            key = at < count ? 64 * (int64_t)routed[at] + col % 64 : S;
                            key = key < S ? key : -1;
                        }
                        int32_t si = 0;
                        val[col] = NULL;
                        x[col] = -INFINITY;
                        if (blk >= 0) {
                            for (int64_t d = 0; d < D; d++)
                                si += q8[d] * kc8[(blk * Hkv + hk) * D + d];
                            x[col] = (float)si * (s2 * qsc * kcsc[hk * ntile + it]);
                            wt[col] = (float)sref_len(p, blk);
                            val[col] = vc8 + (blk * Hkv + hk) * D;
                        } else if (key >= 0) {
                            for (int64_t d = 0; d < D; d++)
                                si += q8[d] * k8[(key * Hkv + hk) * D + d];
                            x[col] = (float)si * (s2 * qsc * ksc[hk * NT + key / 64]);
                            wt[col] = 1.f;
                            val[col] = v8 + (key * Hkv + hk) * D;
                        }
                    }
                    float mx = -INFINITY;
                    for (int col = 0; col < 128; col++)
                        mx = fmaxf(mx, x[col]);
                    const float m_new = fmaxf(m[c], mx), m_use = m_new == -INFINITY ? 0.f : m_new;
                    const float corr = exp2f(m[c] - m_use);
                    m[c] = m_new;
                    float sum = 0;
                    memset(ot, 0, sizeof(float) * (size_t)D);
                    for (int col = 0; col < 128; col++) {
                        if (!val[col])
                            continue;
                        const float pr = exp2f(x[col] + 8.f - m_use), pq = skm_e4m3(pr);
                        sum += pr * wt[col];
                        for (int64_t d = 0; d < D; d++)
                            ot[d] += pq * val[col][d];
                    }
                    for (int64_t d = 0; d < D; d++)
                        o[c][d] = o[c][d] * corr + ot[d] * (centroid ? vcsc[hk * D + d] / vsc[hk * D + d] : 1.f);
                    l[c] = l[c] * corr + sum;
                }
                const float M = fmaxf(m[0], m[1]);
                const float a0 = m[0] == -INFINITY ? 0.f : exp2f(m[0] - M), a1 = m[1] == -INFINITY ? 0.f : exp2f(m[1] - M);
                const float L = a0 * l[0] + a1 * l[1], inv = L > 0 ? 1.f / L : 0.f;
                float wf = L > 0 ? 1.f : 0.f, wc = 0.f;
                if (pass) {
                    const float cm = cstate[(row * H + h) * 2], cl = cstate[(row * H + h) * 2 + 1];
                    const float mf = L > 0 ? M + s2 * skm_dot(q, km + hk * D, D) : -INFINITY, mm = fmaxf(mf, cm);
                    wf = L > 0 ? exp2f(mf - mm) * L / 256.f : 0.f;
                    wc = cl > 0 ? exp2f(cm - mm) * cl : 0.f;
                    const float iw = wf + wc > 0 ? 1.f / (wf + wc) : 0.f;
                    wf *= iw;
                    wc *= iw;
                }
                for (int64_t d = 0; d < D; d++) {
                    const float of = fmaf((a0 * o[0][d] + a1 * o[1][d]) * inv, vsc[hk * D + d], vm[hk * D + d]);
                    const float oc = wc > 0 ? cout[(row * H + h) * D + d] : 0.f;
                    out[(row * H + h) * D + d] = skm_bf16(fmaf(wf, of, wc * oc));
                }
            }
        }
    free(km);
    free(vm);
    free(vsc);
    free(vf);
    free(vcsc);
    free(vcf);
    free(k8);
    free(kc8);
    free(ksc);
    free(kcsc);
    free(v8);
    free(vc8);
    free(cout);
    free(cstate);
    free(routed);
    free(x);
    free(obuf);
}
#endif
