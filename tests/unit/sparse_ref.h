/* The precise reference of block-sparse attention (shared/spec/sparse.md
 * §2.2–2.3, §3.1), in double precision, for the CPU twin's test and the
 * device test: the block summaries, the routing scores and thresholds, and
 * the attention over a given block mask — routed blocks exactly, the others
 * through their key centroid and value sum (or not at all).
 *
 * Inputs are host float arrays holding bf16 values: q [S, H, D], k and v
 * [S, Hkv, D] contiguous. Blocks of 64 rows; NT = ceil(S / 64). */
#ifndef MMH3_TESTS_SPARSE_REF_H
#define MMH3_TESTS_SPARSE_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

typedef struct sref_problem {
    int64_t S, H, Hkv, D;
    const float *q, *k, *v;
    double scale; /* 0: 1/sqrt(D) */
} sref_problem;

static inline int64_t sref_blocks(const sref_problem *p) { return (p->S + 63) / 64; }
static inline int64_t sref_len(const sref_problem *p, int64_t n) { return p->S - 64 * n < 64 ? p->S - 64 * n : 64; }
static inline double sref_s2(const sref_problem *p)
{
    return (p->scale > 0 ? p->scale : 1.0 / sqrt((double)p->D)) * 1.4426950408889634;
}

/* kc (bf16 of the mean) and vc (bf16 of the sum) as the spec defines them,
 * from double sums: [NT, Hkv, D] floats holding bf16 values. */
static inline void sref_summaries(const sref_problem *p, float *kc, float *vc)
{
    const int64_t NT = sref_blocks(p), D = p->D, Hkv = p->Hkv;
    for (int64_t n = 0; n < NT; n++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t d = 0; d < D; d++) {
                double sk = 0, sv = 0;
                for (int64_t r = 0; r < sref_len(p, n); r++) {
                    sk += p->k[((64 * n + r) * Hkv + hk) * D + d];
                    sv += p->v[((64 * n + r) * Hkv + hk) * D + d];
                }
                const int64_t at = (n * Hkv + hk) * D + d;
                kc[at] = mm_bf16_to_f32(mm_f32_to_bf16((float)(sk / (double)sref_len(p, n))));
                vc[at] = mm_bf16_to_f32(mm_f32_to_bf16((float)sv));
            }
}

/* Sol-Attn's scores and thresholds from the kc given (the implementation's,
 * so that the comparison isolates the routing): colmean [NT(i), H, NT(n)]
 * and thr [NT, H] in log2 units. */
static inline void sref_sol_scores(const sref_problem *p, const float *kc, double tau, bool exact_thresh,
                                   double *colmean, double *thr)
{
    const int64_t NT = sref_blocks(p), D = p->D, H = p->H, Hkv = p->Hkv;
    const double s2 = sref_s2(p);
    double *qb = malloc(sizeof(double) * (size_t)D), *mu = malloc(sizeof(double) * (size_t)D);
    double *var = malloc(sizeof(double) * (size_t)D), *m2 = malloc(sizeof(double) * (size_t)(D * D));
    for (int64_t h = 0; h < H; h++) {
        const int64_t hk = h / (H / Hkv);
        for (int64_t d = 0; d < D; d++) {
            double s = 0, ss = 0;
            for (int64_t n = 0; n < NT; n++) {
                const double x = kc[(n * Hkv + hk) * D + d];
                s += x;
                ss += x * x;
            }
            mu[d] = s / (double)NT;
            var[d] = fmax(ss / (double)NT - mu[d] * mu[d], 0);
        }
        if (exact_thresh)
            for (int64_t a = 0; a < D; a++)
                for (int64_t b = 0; b < D; b++) {
                    double s = 0;
                    for (int64_t n = 0; n < NT; n++)
                        s += (double)kc[(n * Hkv + hk) * D + a] * kc[(n * Hkv + hk) * D + b];
                    m2[a * D + b] = s / (double)NT;
                }
        for (int64_t i = 0; i < NT; i++) {
            for (int64_t d = 0; d < D; d++) {
                double s = 0;
                for (int64_t r = 0; r < sref_len(p, i); r++)
                    s += p->q[((64 * i + r) * H + h) * D + d];
                qb[d] = s / (double)sref_len(p, i);
            }
            double m = 0, v = 0;
            for (int64_t d = 0; d < D; d++) {
                m += qb[d] * mu[d];
                v += qb[d] * qb[d] * var[d];
            }
            if (exact_thresh) {
                double quad = 0;
                for (int64_t a = 0; a < D; a++)
                    for (int64_t b = 0; b < D; b++)
                        quad += qb[a] * m2[a * D + b] * qb[b];
                v = fmax(quad - m * m, 0);
            }
            thr[i * H + h] = s2 * m + tau * sqrt(s2 * s2 * v + 1e-6);
            for (int64_t n = 0; n < NT; n++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++)
                    s += qb[d] * kc[(n * Hkv + hk) * D + d];
                colmean[(i * H + h) * NT + n] = s2 * s;
            }
        }
    }
    free(qb);
    free(mu);
    free(var);
    free(m2);
}

/* SubBlock's scores score[(i·H + h)·NT + n] = log2 Σ exp2(Qs·Ks) over the
 * 16-row sub-block pairs holding rows (Qs = bf16(mean·s2), Ks = bf16(mean)). */
static inline void sref_topk_scores(const sref_problem *p, double *score)
{
    const int64_t NT = sref_blocks(p), D = p->D, H = p->H, Hkv = p->Hkv, U = (p->S + 15) / 16;
    const double s2 = sref_s2(p);
    float *qs = malloc(sizeof(float) * (size_t)(U * H * D)), *ks = malloc(sizeof(float) * (size_t)(U * Hkv * D));
    for (int64_t u = 0; u < U; u++) {
        const int64_t len = p->S - 16 * u < 16 ? p->S - 16 * u : 16;
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++) {
                double s = 0;
                for (int64_t r = 0; r < len; r++)
                    s += p->q[((16 * u + r) * H + h) * D + d];
                qs[(u * H + h) * D + d] = mm_bf16_to_f32(mm_f32_to_bf16((float)(s / (double)len * s2)));
            }
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t d = 0; d < D; d++) {
                double s = 0;
                for (int64_t r = 0; r < len; r++)
                    s += p->k[((16 * u + r) * Hkv + h) * D + d];
                ks[(u * Hkv + h) * D + d] = mm_bf16_to_f32(mm_f32_to_bf16((float)(s / (double)len)));
            }
    }
    for (int64_t i = 0; i < NT; i++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t hk = h / (H / Hkv);
            for (int64_t n = 0; n < NT; n++) {
                double sum = 0;
                for (int64_t a = 4 * i; a < 4 * i + 4 && a < U; a++)
                    for (int64_t b = 4 * n; b < 4 * n + 4 && b < U; b++) {
                        double x = 0;
                        for (int64_t d = 0; d < D; d++)
                            x += (double)qs[(a * H + h) * D + d] * ks[(b * Hkv + hk) * D + d];
                        sum += exp2(x);
                    }
                score[(i * H + h) * NT + n] = log2(sum);
            }
        }
    free(qs);
    free(ks);
}

static inline bool sref_bit(const uint32_t *mask, int64_t W, int64_t i, int64_t h, int64_t H, int64_t n)
{
    return (mask[(i * H + h) * W + (n >> 5)] >> (n & 31)) & 1u;
}

/* The attention over a block mask ([NT, H, W] words): out [S, H, D]. With
 * approximate, each unrouted block n contributes 2^{s2·q·kc_n}·vc_n to the
 * numerator and len_n·2^{s2·q·kc_n} to the denominator (kc, vc: the stored
 * bf16 summaries). */
static inline void sref_attention(const sref_problem *p, const uint32_t *mask, int64_t W, const float *kc,
                                  const float *vc, bool approximate, double *out)
{
    const int64_t NT = sref_blocks(p), D = p->D, H = p->H, Hkv = p->Hkv, S = p->S;
    const double s2 = sref_s2(p);
    double *sc = malloc(sizeof(double) * (size_t)(S + NT)), *acc = malloc(sizeof(double) * (size_t)D);
    for (int64_t h = 0; h < H; h++) {
        const int64_t hk = h / (H / Hkv);
        for (int64_t row = 0; row < S; row++) {
            const int64_t i = row / 64;
            const float *q = p->q + (row * H + h) * D;
            double mx = -INFINITY;
            for (int64_t n = 0; n < NT; n++) {
                const bool ex = sref_bit(mask, W, i, h, H, n);
                for (int64_t j = 64 * n; ex && j < 64 * n + sref_len(p, n); j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)q[d] * p->k[(j * Hkv + hk) * D + d];
                    sc[j] = s2 * s;
                    mx = fmax(mx, sc[j]);
                }
                if (!ex && approximate) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)q[d] * kc[(n * Hkv + hk) * D + d];
                    sc[S + n] = s2 * s;
                    mx = fmax(mx, sc[S + n]);
                }
            }
            double l = 0;
            memset(acc, 0, sizeof(double) * (size_t)D);
            for (int64_t n = 0; n < NT && mx > -INFINITY; n++) {
                if (sref_bit(mask, W, i, h, H, n)) {
                    for (int64_t j = 64 * n; j < 64 * n + sref_len(p, n); j++) {
                        const double w = exp2(sc[j] - mx);
                        l += w;
                        for (int64_t d = 0; d < D; d++)
                            acc[d] += w * p->v[(j * Hkv + hk) * D + d];
                    }
                } else if (approximate) {
                    const double w = exp2(sc[S + n] - mx);
                    l += w * (double)sref_len(p, n);
                    for (int64_t d = 0; d < D; d++)
                        acc[d] += w * vc[(n * Hkv + hk) * D + d];
                }
            }
            for (int64_t d = 0; d < D; d++)
                out[(row * H + h) * D + d] = l > 0 ? acc[d] / l : 0;
        }
    }
    free(sc);
    free(acc);
}

/* Dense softmax attention in double (the reference of the density-1 cases). */
static inline void sref_dense(const sref_problem *p, double *out)
{
    const int64_t NT = sref_blocks(p), W = (NT + 31) / 32;
    uint32_t *all = malloc(sizeof(uint32_t) * (size_t)(NT * p->H * W));
    memset(all, 0xff, sizeof(uint32_t) * (size_t)(NT * p->H * W));
    sref_attention(p, all, W, NULL, NULL, false, out);
    free(all);
}

/* The dense softmax mass of every (row, head) on each key block, relative to
 * the row's max (unnormalized): blk [S·H, NT]. */
static inline void sref_block_masses(const sref_problem *p, double *blk)
{
    const int64_t S = p->S, H = p->H, Hkv = p->Hkv, D = p->D, NT = sref_blocks(p);
    const double s2 = sref_s2(p);
    double *sc = malloc(sizeof(double) * (size_t)S);
    for (int64_t r = 0; r < S; r++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t hk = h / (H / Hkv);
            const float *q = p->q + (r * H + h) * D;
            double m = -INFINITY;
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++)
                    s += (double)q[d] * p->k[(j * Hkv + hk) * D + d];
                sc[j] = s2 * s;
                m = fmax(m, sc[j]);
            }
            double *b = blk + (r * H + h) * NT;
            for (int64_t n = 0; n < NT; n++)
                b[n] = 0;
            for (int64_t j = 0; j < S; j++)
                b[j / 64] += exp2(sc[j] - m);
        }
    free(sc);
}

/* The dense softmax mass on the blocks a mask leaves out, averaged over rows
 * (how much of the attention the routing does not compute exactly). */
static inline double sref_missed_mass(const sref_problem *p, const uint32_t *mask, int64_t W, const double *blk)
{
    const int64_t S = p->S, H = p->H, NT = sref_blocks(p);
    double sum = 0;
    for (int64_t r = 0; r < S; r++)
        for (int64_t h = 0; h < H; h++) {
            const double *b = blk + (r * H + h) * NT;
            double all = 0, ex = 0;
            for (int64_t n = 0; n < NT; n++) {
                all += b[n];
                ex += sref_bit(mask, W, r / 64, h, H, n) ? b[n] : 0;
            }
            sum += (all - ex) / all;
        }
    return sum / (double)(S * H);
}

typedef struct sref_err {
    double rel_l2, max_abs, mean_abs;
    int64_t worst, first_bad; /* index of max_abs; first element beyond the element bound (-1 none) */
    int64_t nonfinite;
} sref_err;

/* Errors of got against want over n values; an element is "bad" when
 * |got − want| > abs_tol + rel_tol·|want|. */
static inline sref_err sref_compare(const float *got, const double *want, int64_t n, double abs_tol, double rel_tol)
{
    sref_err e = {0, 0, 0, -1, -1, 0};
    double num = 0, den = 0, sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            e.nonfinite++;
            if (e.first_bad < 0)
                e.first_bad = i;
            continue;
        }
        const double d = fabs((double)got[i] - want[i]);
        num += d * d;
        den += want[i] * want[i];
        sum += d;
        if (d > e.max_abs) {
            e.max_abs = d;
            e.worst = i;
        }
        if (d > abs_tol + rel_tol * fabs(want[i]) && e.first_bad < 0)
            e.first_bad = i;
    }
    e.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    e.mean_abs = n ? sum / (double)n : 0;
    return e;
}

/* Structured synthetic q/k (for the error-vs-density curve and its test):
 *   0 LOCAL     a position code along the sequence (frequencies of 1/50 to
 *               1/5 cycles per 64-row block): q·k falls with distance, the
 *               attention mass sits near the diagonal and thins out over a
 *               few blocks;
 *   1 PERIODIC  the same code repeating every `period` rows (frames of a
 *               video): mass on the same phase of every other period, far
 *               from the diagonal;
 *   2 SINK      LOCAL plus a prefix of `sink_rows` rows whose keys every
 *               query favours (text rows that every video row reads).
 * q, k = strength·code + noise·N(0,1); v a smooth function of the position
 * plus noise (so that the output is a signal, not an average of noise).
 * Values are bf16 (returned as floats). */
enum { SREF_LOCAL = 0, SREF_PERIODIC, SREF_SINK, SREF_KINDS };

static inline double sref_gauss(uint64_t *s)
{
    double a = 0;
    for (int i = 0; i < 4; i++) {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        a += (double)((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
    }
    return a * 0.8660254037844386;
}

static inline void sref_structured(int kind, int64_t S, int64_t H, int64_t D, int64_t period, int64_t sink_rows,
                                   double strength, double noise, uint64_t seed, float *q, float *k, float *v)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    const double two_pi = 6.283185307179586;
    for (int64_t r = 0; r < S; r++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++) {
                const double pos = (double)(kind == SREF_PERIODIC ? r % period : r) / 64.0; /* in blocks */
                const double f = 0.02 + 0.18 * (double)((d / 2 + 5 * h) % 32) / 32.0;
                const double code = (d & 1) ? cos(two_pi * f * pos) : sin(two_pi * f * pos);
                double qs = code, ks = code;
                if (kind == SREF_SINK) {
                    const double dir = (d % 4) == 0 ? 1.0 : -0.33;
                    qs = 0.7 * code + 0.7 * dir;
                    if (r < sink_rows)
                        ks = 1.5 * dir;
                }
                const int64_t at = (r * H + h) * D + d;
                q[at] = mm_bf16_to_f32(mm_f32_to_bf16((float)(strength * qs + noise * sref_gauss(&s))));
                k[at] = mm_bf16_to_f32(mm_f32_to_bf16((float)(strength * ks + noise * sref_gauss(&s))));
                const double vs = sin(two_pi * (double)r / (double)S * (double)(1 + (d + h) % 7) + 0.1 * (double)d);
                v[at] = mm_bf16_to_f32(mm_f32_to_bf16((float)(vs + 0.3 * sref_gauss(&s))));
            }
}

#endif
