/* Block-sparse attention on the CPU (issue 26): the routing and the
 * attention of backend/sparse_attn.h against the double-precision reference
 * of the spec (tests/unit/sparse_ref.h), for ragged lengths, every tile edge,
 * GQA, both thresholds, every sink kind and both policies; the presets and
 * the step schedule of model/sparse. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "backend/sparse_attn.h"
#include "core/dtype.h"
#include "model/sparse/sparse.h"
#include "sparse_ref.h"
#include "test.h"

static mm_ctx *cpu;

/* A problem: q, k, v as thirds of one fused bf16 buffer [S, (H + 2·Hkv)·D]
 * (the DiT's layout), their float copies for the reference. */
typedef struct problem {
    sref_problem p;
    uint16_t *fused;
    float *qf, *kf, *vf;
    mm_tensor q, k, v;
} problem;

static uint64_t rng = 0x5eed;

static double gauss(void) { return sref_gauss(&rng); }

/* kind < 0: random q/k with a few strong channels (so that thresholds are
 * not all ties); else sref_structured(kind). */
static void problem_make(problem *pr, int64_t S, int64_t H, int64_t Hkv, int64_t D, int kind)
{
    memset(pr, 0, sizeof *pr);
    const int64_t W = (H + 2 * Hkv) * D;
    pr->fused = malloc(sizeof(uint16_t) * (size_t)(S * W));
    pr->qf = malloc(sizeof(float) * (size_t)(S * H * D));
    pr->kf = malloc(sizeof(float) * (size_t)(S * Hkv * D));
    pr->vf = malloc(sizeof(float) * (size_t)(S * Hkv * D));
    if (kind >= 0 && H == Hkv) {
        sref_structured(kind, S, H, D, 128, 96, 1.0, 0.5, (uint64_t)S * 7 + (uint64_t)kind, pr->qf, pr->kf, pr->vf);
    } else {
        for (int64_t r = 0; r < S; r++) {
            const double drift = sin((double)r / 40.0);
            for (int64_t e = 0; e < H * D; e++)
                pr->qf[r * H * D + e] = mm_bf16_to_f32(mm_f32_to_bf16((float)(gauss() + (e % D < 4 ? 2 * drift : 0))));
            for (int64_t e = 0; e < Hkv * D; e++) {
                pr->kf[r * Hkv * D + e] = mm_bf16_to_f32(mm_f32_to_bf16((float)(gauss() + (e % D < 4 ? 2 * drift : 0))));
                pr->vf[r * Hkv * D + e] = mm_bf16_to_f32(mm_f32_to_bf16((float)gauss()));
            }
        }
    }
    for (int64_t r = 0; r < S; r++) {
        for (int64_t e = 0; e < H * D; e++)
            pr->fused[r * W + e] = mm_f32_to_bf16(pr->qf[r * H * D + e]);
        for (int64_t e = 0; e < Hkv * D; e++) {
            pr->fused[r * W + H * D + e] = mm_f32_to_bf16(pr->kf[r * Hkv * D + e]);
            pr->fused[r * W + (H + Hkv) * D + e] = mm_f32_to_bf16(pr->vf[r * Hkv * D + e]);
        }
    }
    pr->p = (sref_problem){S, H, Hkv, D, pr->qf, pr->kf, pr->vf, 0};
    mm_tensor all = mm_tensor_wrap(pr->fused, mm_cpu(), MM_BF16, 2, (int64_t[]){S, W});
    mm_tensor q2 = mm_tensor_narrow(&all, 1, 0, H * D), k2 = mm_tensor_narrow(&all, 1, H * D, Hkv * D);
    mm_tensor v2 = mm_tensor_narrow(&all, 1, (H + Hkv) * D, Hkv * D);
    pr->q = mm_tensor_unflatten(&q2, 1, 2, (int64_t[]){H, D});
    pr->k = mm_tensor_unflatten(&k2, 1, 2, (int64_t[]){Hkv, D});
    pr->v = mm_tensor_unflatten(&v2, 1, 2, (int64_t[]){Hkv, D});
}

static void problem_free(problem *pr)
{
    free(pr->fused);
    free(pr->qf);
    free(pr->kf);
    free(pr->vf);
}

static float *bf16_tensor_floats(const mm_tensor *t)
{
    const int64_t n = mm_tensor_numel(t);
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        f[i] = mm_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return f;
}

/* Route with p; 0 on success. */
static int route(problem *pr, mm_sparse_route *r, const mm_sparse_route_params *p, mm_tensor *tally)
{
    mm_error err = {{0}};
    if (mm_sparse_route_alloc(r, mm_cpu(), pr->p.S, pr->p.H, pr->p.Hkv, pr->p.D, &err) != 0) {
        printf("     route alloc: %s\n", err.msg);
        return -1;
    }
    mm_sparse_route_blocks(cpu, r, &pr->q, &pr->k, &pr->v, p, tally);
    if (mm_ctx_error(cpu, &err) != 0) {
        printf("     route: %s\n", err.msg);
        mm_ctx_clear_error(cpu);
        return -1;
    }
    return 0;
}

/* kc / vc against the double summaries: within one bf16 step. */
static void check_summaries(problem *pr, const mm_sparse_route *r, const char *what)
{
    const int64_t n = r->blocks * pr->p.Hkv * pr->p.D;
    float *kc = malloc(sizeof(float) * (size_t)n), *vc = malloc(sizeof(float) * (size_t)n);
    sref_summaries(&pr->p, kc, vc);
    float *gk = bf16_tensor_floats(&r->kc), *gv = bf16_tensor_floats(&r->vc);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const float tk = fabsf(kc[i]) * 0x1p-7f + 1e-30f, tv = fabsf(vc[i]) * 0x1p-7f + 1e-30f;
        if (fabsf(gk[i] - kc[i]) > tk || fabsf(gv[i] - vc[i]) > tv) {
            bad++;
            if (first < 0)
                first = i;
        }
    }
    MM_EXPECT(bad == 0, "%s: %lld block summaries off by more than one bf16 step (first at %lld: kc %g vs %g, vc "
              "%g vs %g)", what, (long long)bad, (long long)first, first >= 0 ? gk[first] : 0.0,
              first >= 0 ? kc[first] : 0.0, first >= 0 ? gv[first] : 0.0, first >= 0 ? vc[first] : 0.0);
    free(kc);
    free(vc);
    free(gk);
    free(gv);
}

/* The mask against Sol's reference scores: a decision may differ only where
 * the score ties the threshold within 1e-3; band, sinks and dense queries
 * exactly. Returns the number of decisions checked. */
static void check_sol_mask(problem *pr, const mm_sparse_route *r, const mm_sparse_route_params *p, const char *what)
{
    const int64_t NT = r->blocks, H = pr->p.H, W = r->words;
    float *kc = bf16_tensor_floats(&r->kc);
    double *colmean = malloc(sizeof(double) * (size_t)(NT * H * NT)), *thr = malloc(sizeof(double) * (size_t)(NT * H));
    sref_sol_scores(&pr->p, kc, p->tau, p->thresh == MM_SPARSE_THRESH_EXACT, colmean, thr);
    uint8_t *sink = malloc((size_t)NT), *dense = malloc((size_t)NT);
    mm_sparse_block_flags(p->sink_kv, p->n_sink_kv, NT, sink);
    mm_sparse_block_flags(p->dense_q, p->n_dense_q, NT, dense);
    const uint32_t *mask = r->mask.data;
    const int32_t *count = r->count.data;
    const float *gthr = r->thr.data;
    int64_t wrong = 0, ties = 0, bad_count = 0, bad_thr = 0, first = -1;
    for (int64_t i = 0; i < NT; i++)
        for (int64_t h = 0; h < H; h++) {
            int32_t pop = 0;
            for (int64_t n = 0; n < NT; n++) {
                const double c = colmean[(i * H + h) * NT + n], t = thr[i * H + h];
                const int64_t dist = n > i ? n - i : i - n;
                const bool forced = dense[i] || sink[n] || (p->band >= 0 && dist <= p->band);
                const bool want = forced || c > t, got = sref_bit(mask, W, i, h, H, n);
                pop += got;
                if (want != got) {
                    if (!forced && fabs(c - t) < 1e-3) {
                        ties++;
                    } else {
                        wrong++;
                        if (first < 0)
                            first = (i * H + h) * NT + n;
                    }
                }
            }
            bad_count += pop != count[i * H + h];
            if (!dense[i] && fabs(gthr[i * H + h] - thr[i * H + h]) > 1e-4 * (1 + fabs(thr[i * H + h])))
                bad_thr++;
        }
    MM_EXPECT(wrong == 0, "%s: %lld routing decisions differ from the reference beyond ties (first: query block "
              "%lld head %lld key block %lld: colmean %.6f thr %.6f)", what, (long long)wrong,
              (long long)(first / NT / H), (long long)(first / NT % H), (long long)(first % NT),
              first >= 0 ? colmean[first] : 0.0, first >= 0 ? thr[first / NT] : 0.0);
    MM_EXPECT(bad_count == 0, "%s: %lld counts differ from the mask's popcount", what, (long long)bad_count);
    MM_EXPECT(bad_thr == 0, "%s: %lld thresholds off the reference by > 1e-4", what, (long long)bad_thr);
    MM_EXPECT(ties * 1000 <= NT * NT * H + 1000, "%s: %lld tie flips, more than 1 per 1000 decisions", what,
              (long long)ties);
    free(kc);
    free(colmean);
    free(thr);
    free(sink);
    free(dense);
}

/* out (F32 and BF16) against the double reference over the route's mask. */
static void check_attention(problem *pr, const mm_sparse_route *r, bool approximate, const char *what)
{
    const int64_t S = pr->p.S, H = pr->p.H, D = pr->p.D, n = S * H * D;
    float *kc = bf16_tensor_floats(&r->kc), *vc = bf16_tensor_floats(&r->vc);
    double *want = malloc(sizeof(double) * (size_t)n);
    sref_attention(&pr->p, r->mask.data, r->words, kc, vc, approximate, want);
    mm_sparse_attn_params ap = {.approximate = approximate};
    float *o32 = malloc(sizeof(float) * (size_t)n);
    uint16_t *o16 = malloc(sizeof(uint16_t) * (size_t)n);
    mm_tensor t32 = mm_tensor_wrap(o32, mm_cpu(), MM_F32, 3, (int64_t[]){S, H, D});
    mm_tensor t16 = mm_tensor_wrap(o16, mm_cpu(), MM_BF16, 3, (int64_t[]){S, H, D});
    mm_sparse_attention(cpu, &t32, &pr->q, &pr->k, &pr->v, r, &ap);
    mm_sparse_attention(cpu, &t16, &pr->q, &pr->k, &pr->v, r, &ap);
    mm_error err = {{0}};
    MM_EXPECT(mm_ctx_error(cpu, &err) == 0, "%s: %s", what, err.msg);
    mm_ctx_clear_error(cpu);
    sref_err e32 = sref_compare(o32, want, n, 1e-5, 1e-4);
    MM_EXPECT(e32.rel_l2 < 2e-5 && e32.first_bad < 0, "%s: f32 out rel_l2 %.3g max_abs %.3g, first element beyond "
              "1e-5 + 1e-4|ref| at %lld (row %lld head %lld)", what, e32.rel_l2, e32.max_abs, (long long)e32.first_bad,
              (long long)(e32.first_bad / (H * D)), (long long)(e32.first_bad / D % H));
    float *f16 = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        f16[i] = mm_bf16_to_f32(o16[i]);
    sref_err e16 = sref_compare(f16, want, n, 1e-3, 1.0 / 128);
    MM_EXPECT(e16.rel_l2 < 5e-3 && e16.first_bad < 0, "%s: bf16 out rel_l2 %.3g max_abs %.3g, first element beyond "
              "one bf16 step at %lld", what, e16.rel_l2, e16.max_abs, (long long)e16.first_bad);
    free(kc);
    free(vc);
    free(want);
    free(o32);
    free(o16);
    free(f16);
}

static mm_sparse_route_params sol(double tau, mm_sparse_thresh th)
{
    return (mm_sparse_route_params){.policy = MM_SPARSE_SOL, .tau = (float)tau, .thresh = th, .keep = 1, .band = 1};
}

/* Sol-Attn over ragged lengths and every tile edge: routing and output. */
static void test_sol_matches_reference(void)
{
    static const int64_t lengths[] = {1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 700, 1283};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t S = lengths[li];
        problem pr;
        problem_make(&pr, S, 2, 2, 128, -1);
        const double taus[] = {1.0, 1.25, 1.5};
        for (int t = 0; t < 3; t++)
            for (int th = 0; th < 2; th++) {
                if (th == 1 && S > 700)
                    continue; /* the exact threshold's D×D reference is slow */
                char what[96];
                snprintf(what, sizeof what, "S=%lld tau=%.2f %s", (long long)S, taus[t], th ? "exact" : "diag");
                mm_sparse_route_params p = sol(taus[t], (mm_sparse_thresh)th);
                mm_sparse_route r;
                if (route(&pr, &r, &p, NULL) != 0) {
                    MM_EXPECT(0, "%s: routing failed", what);
                    continue;
                }
                check_summaries(&pr, &r, what);
                check_sol_mask(&pr, &r, &p, what);
                if (t == 0)
                    check_attention(&pr, &r, true, what);
                mm_sparse_route_free(&r);
            }
        problem_free(&pr);
    }
}

/* GQA (4 query heads over 2 kv heads) and head dim 64. */
static void test_sol_gqa_and_head_dim(void)
{
    const int64_t shapes[][3] = {{4, 2, 128}, {3, 1, 64}};
    for (int s = 0; s < 2; s++) {
        problem pr;
        problem_make(&pr, 333, shapes[s][0], shapes[s][1], shapes[s][2], -1);
        char what[64];
        snprintf(what, sizeof what, "H=%lld Hkv=%lld D=%lld", (long long)shapes[s][0], (long long)shapes[s][1],
                 (long long)shapes[s][2]);
        mm_sparse_route_params p = sol(1.0, MM_SPARSE_THRESH_DIAG);
        mm_sparse_route r;
        if (route(&pr, &r, &p, NULL) == 0) {
            check_sol_mask(&pr, &r, &p, what);
            check_attention(&pr, &r, true, what);
            mm_sparse_route_free(&r);
        }
        problem_free(&pr);
    }
}

/* Sinks: the prefix (KV and queries), two disjoint ranges (text + audio),
 * dense queries alone; ragged ranges that cut into blocks. */
static void test_sol_sinks(void)
{
    problem pr;
    problem_make(&pr, 1000, 2, 2, 128, -1);
    const mm_row_range prefix[] = {{0, 300}}, two[] = {{0, 70}, {500, 630}}, mid[] = {{129, 130}};
    struct {
        const char *name;
        const mm_row_range *kv, *dq;
        int nkv, ndq;
    } cases[] = {
        {"prefix sink + dense prefix queries", prefix, prefix, 1, 1},
        {"text + audio sinks", two, two, 2, 2},
        {"two sinks, no dense queries", two, NULL, 2, 0},
        {"dense queries only", NULL, two, 0, 2},
        {"one-row sink inside a block", mid, mid, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mm_sparse_route_params p = sol(1.5, MM_SPARSE_THRESH_DIAG);
        p.sink_kv = cases[c].kv;
        p.n_sink_kv = cases[c].nkv;
        p.dense_q = cases[c].dq;
        p.n_dense_q = cases[c].ndq;
        mm_sparse_route r;
        if (route(&pr, &r, &p, NULL) != 0)
            continue;
        check_sol_mask(&pr, &r, &p, cases[c].name);
        check_attention(&pr, &r, true, cases[c].name);
        /* dense query blocks: every key block; sinks: the same key blocks for every query */
        uint8_t dq[16], sk[16];
        mm_sparse_block_flags(p.dense_q, p.n_dense_q, r.blocks, dq);
        mm_sparse_block_flags(p.sink_kv, p.n_sink_kv, r.blocks, sk);
        for (int64_t i = 0; i < r.blocks; i++)
            for (int64_t h = 0; h < 2; h++) {
                const int32_t cnt = ((int32_t *)r.count.data)[i * 2 + h];
                if (dq[i])
                    MM_EXPECT(cnt == r.blocks, "%s: dense query block %lld has %d of %lld blocks", cases[c].name,
                              (long long)i, cnt, (long long)r.blocks);
                for (int64_t n = 0; n < r.blocks; n++)
                    if (sk[n])
                        MM_EXPECT(sref_bit(r.mask.data, r.words, i, h, 2, n), "%s: sink block %lld not exact for "
                                  "query block %lld", cases[c].name, (long long)n, (long long)i);
            }
        mm_sparse_route_free(&r);
    }
    problem_free(&pr);
}

/* τ very low: every block exact, the output is dense attention (and
 * mm_attention's), and the tally counts every pair. */
static void test_density_one_is_dense(void)
{
    const int64_t lengths[] = {65, 640, 1001};
    for (int li = 0; li < 3; li++) {
        const int64_t S = lengths[li], H = 2, D = 128;
        problem pr;
        problem_make(&pr, S, H, H, D, -1);
        mm_sparse_route_params p = sol(-1000, MM_SPARSE_THRESH_DIAG);
        p.band = -1;
        int64_t tally_v = 5;
        mm_tensor tally = mm_tensor_wrap(&tally_v, mm_cpu(), MM_I64, 1, (int64_t[]){1});
        mm_sparse_route r;
        if (route(&pr, &r, &p, &tally) != 0)
            continue;
        const int64_t NT = r.blocks;
        MM_EXPECT(tally_v == 5 + NT * NT * H, "S=%lld: tally %lld, want %lld", (long long)S, (long long)tally_v,
                  (long long)(5 + NT * NT * H));
        double *want = malloc(sizeof(double) * (size_t)(S * H * D));
        sref_dense(&pr.p, want);
        float *o = malloc(sizeof(float) * (size_t)(S * H * D)), *od = malloc(sizeof(float) * (size_t)(S * H * D));
        mm_tensor to = mm_tensor_wrap(o, mm_cpu(), MM_F32, 3, (int64_t[]){S, H, D});
        mm_tensor td = mm_tensor_wrap(od, mm_cpu(), MM_F32, 3, (int64_t[]){S, H, D});
        mm_sparse_attn_params ap = {.approximate = true};
        mm_sparse_attention(cpu, &to, &pr.q, &pr.k, &pr.v, &r, &ap);
        mm_attention(cpu, &td, &pr.q, &pr.k, &pr.v, NULL);
        sref_err e = sref_compare(o, want, S * H * D, 1e-5, 1e-4), ed = sref_compare(od, want, S * H * D, 1e-5, 1e-4);
        MM_EXPECT(e.rel_l2 < 2e-5 && e.first_bad < 0, "S=%lld: sparse at density 1 vs dense reference: rel_l2 %.3g, "
                  "first bad %lld", (long long)S, e.rel_l2, (long long)e.first_bad);
        MM_EXPECT(ed.rel_l2 < 2e-5, "S=%lld: mm_attention vs the reference: rel_l2 %.3g", (long long)S, ed.rel_l2);
        free(want);
        free(o);
        free(od);
        mm_sparse_route_free(&r);
        problem_free(&pr);
    }
}

/* SubBlock: the selection is the reference's top-k (ties within 1e-3 aside),
 * k snapped up to 8, and the attention without approximation equals dense
 * attention restricted to the mask. */
static void test_topk_matches_reference(void)
{
    const int64_t lengths[] = {700, 1283};
    for (int li = 0; li < 2; li++) {
        const int64_t S = lengths[li], H = 2;
        problem pr;
        problem_make(&pr, S, H, H, 128, -1);
        const mm_row_range dq[] = {{0, 100}};
        mm_sparse_route_params p = {.policy = MM_SPARSE_TOPK, .keep = 0.3f, .band = -1, .dense_q = dq, .n_dense_q = 1};
        mm_sparse_route r;
        if (route(&pr, &r, &p, NULL) != 0)
            continue;
        const int64_t NT = r.blocks, kk = mm_sparse_topk_budget(0.3, NT);
        double *score = malloc(sizeof(double) * (size_t)(NT * H * NT));
        sref_topk_scores(&pr.p, score);
        int64_t wrong = 0;
        for (int64_t i = 0; i < NT; i++)
            for (int64_t h = 0; h < H; h++) {
                const int32_t cnt = ((int32_t *)r.count.data)[i * H + h];
                if (i < 2) { /* rows 0..99: blocks 0 and 1 are dense */
                    MM_EXPECT(cnt == NT, "S=%lld: dense query block %lld: %d blocks", (long long)S, (long long)i, cnt);
                    continue;
                }
                MM_EXPECT(cnt == kk, "S=%lld: query block %lld head %lld keeps %d blocks, want %lld", (long long)S,
                          (long long)i, (long long)h, cnt, (long long)kk);
                /* the k-th best reference score; every kept block >= it, every dropped <= it, up to ties */
                const double *s = score + (i * H + h) * NT;
                double kth = -INFINITY;
                for (int64_t n = 0; n < NT; n++)
                    if (sref_bit(r.mask.data, r.words, i, h, H, n)) {
                        double lo = s[n];
                        kth = kth == -INFINITY || lo < kth ? lo : kth;
                    }
                for (int64_t n = 0; n < NT; n++)
                    if (!sref_bit(r.mask.data, r.words, i, h, H, n) && s[n] > kth + 1e-3)
                        wrong++;
            }
        MM_EXPECT(wrong == 0, "S=%lld: %lld dropped blocks score above a kept one beyond ties", (long long)S,
                  (long long)wrong);
        check_attention(&pr, &r, false, "top-k without approximation");
        free(score);
        mm_sparse_route_free(&r);
        problem_free(&pr);
    }
    MM_EXPECT(mm_sparse_topk_budget(0.25, 590) == 152, "SubBlock's budget for 0.25 of 590 blocks: %lld, the README's "
              "152", (long long)mm_sparse_topk_budget(0.25, 590));
    MM_EXPECT(mm_sparse_topk_budget(0.001, 100) == 8 && mm_sparse_topk_budget(1, 13) == 13 &&
                  mm_sparse_topk_budget(0.5, 5) == 5,
              "budget snapping: %lld %lld %lld", (long long)mm_sparse_topk_budget(0.001, 100),
              (long long)mm_sparse_topk_budget(1, 13), (long long)mm_sparse_topk_budget(0.5, 5));
}

/* FORCED: the density aimed at (plus the band), and the attention over it. */
static void test_forced_density(void)
{
    problem pr;
    problem_make(&pr, 2000, 2, 2, 128, -1);
    const double keeps[] = {0.1, 0.25, 0.5};
    for (int c = 0; c < 3; c++) {
        mm_sparse_route_params p = {.policy = MM_SPARSE_FORCED, .keep = (float)keeps[c], .band = -1, .seed = 7};
        int64_t tally_v = 0;
        mm_tensor tally = mm_tensor_wrap(&tally_v, mm_cpu(), MM_I64, 1, (int64_t[]){1});
        mm_sparse_route r;
        if (route(&pr, &r, &p, &tally) != 0)
            continue;
        const double pairs = (double)(r.blocks * r.blocks * 2), d = (double)tally_v / pairs;
        /* binomial: sd = sqrt(k(1−k)/pairs) ≈ 0.003; 6 sd */
        MM_EXPECT(fabs(d - keeps[c]) < 6 * sqrt(keeps[c] * (1 - keeps[c]) / pairs) + 1e-9, "keep %.2f: density %.4f",
                  keeps[c], d);
        if (c == 1)
            check_attention(&pr, &r, true, "forced 0.25");
        mm_sparse_route_free(&r);
    }
    problem_free(&pr);
}

/* Wrong arguments are refused with a message, and nothing is computed. */
static void test_bad_arguments(void)
{
    problem pr;
    problem_make(&pr, 100, 2, 2, 128, -1);
    mm_sparse_route r;
    mm_error err = {{0}};
    MM_REQUIRE(mm_sparse_route_alloc(&r, mm_cpu(), 99, 2, 2, 128, &err) == 0, "%s", err.msg);
    mm_sparse_route_params p = sol(1, MM_SPARSE_THRESH_DIAG);
    MM_EXPECT(mm_sparse_route_blocks(cpu, &r, &pr.q, &pr.k, &pr.v, &p, NULL) != 0 && mm_ctx_error(cpu, &err) != 0 &&
                  strstr(err.msg, "not allocated for 100 rows"),
              "a route of the wrong size: %s", err.msg);
    mm_ctx_clear_error(cpu);
    mm_sparse_route_free(&r);
    MM_EXPECT(mm_sparse_route_alloc(&r, mm_cpu(), 100, 3, 2, 128, &err) != 0, "3 heads over 2 kv heads accepted");
    problem_free(&pr);
}

/* ---------------------------------------------------------------- presets */

static void test_presets_and_overrides(void)
{
    mm_sparse_config c;
    mm_error err = {{0}};
    MM_REQUIRE(mm_sparse_config_parse(NULL, &c, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(c.name, "sol") == 0 && c.policy == MM_SPARSE_SOL && c.tau_start == 1.0f && c.dense_layers == 2 &&
                  c.sink_rows == MM_SPARSE_ROWS_PREFIX && c.band == 1,
              "the default preset: %s", c.name);
    /* Sana's 50-step grid: 49 forwards, the first 10 dense */
    MM_EXPECT(mm_sparse_dense_forwards(&c, 49) == 10 && !mm_sparse_step_sparse(&c, 9, 49) &&
                  mm_sparse_step_sparse(&c, 10, 49),
              "sol on 49 forwards: %d dense", mm_sparse_dense_forwards(&c, 49));
    MM_REQUIRE(mm_sparse_config_parse("sol-4step", &c, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_sparse_dense_forwards(&c, 4) == 1 && fabsf(mm_sparse_step_tau(&c, 1, 4) - 1.0f) < 1e-6f &&
                  fabsf(mm_sparse_step_tau(&c, 2, 4) - 1.25f) < 1e-6f && fabsf(mm_sparse_step_tau(&c, 3, 4) - 1.5f) < 1e-6f,
              "sol-4step: tau %.3f %.3f %.3f", mm_sparse_step_tau(&c, 1, 4), mm_sparse_step_tau(&c, 2, 4),
              mm_sparse_step_tau(&c, 3, 4));
    MM_REQUIRE(mm_sparse_config_parse("sol:tau=1.25..0.75,dense_steps=0,sinks=text+audio,thresh=exact,band=-1", &c,
                                      &err) == 0,
               "%s", err.msg);
    MM_EXPECT(c.tau_start == 1.25f && c.tau_end == 0.75f && c.dense_steps == 0 && c.thresh == MM_SPARSE_THRESH_EXACT &&
                  c.band == -1 && c.sink_rows == (MM_SPARSE_ROWS_TEXT | MM_SPARSE_ROWS_AUDIO | MM_SPARSE_ROWS_REF_AUDIO),
              "overrides not applied");
    MM_REQUIRE(mm_sparse_config_parse("sol-4step:tau=1/1.25/1.5/2,dense_steps=2", &c, &err) == 0, "%s", err.msg);
    MM_EXPECT(c.n_tau_steps == 4 && mm_sparse_step_tau(&c, 1, 8) == 1.0f && mm_sparse_step_tau(&c, 2, 8) == 1.0f &&
                  mm_sparse_step_tau(&c, 3, 8) == 1.25f && mm_sparse_step_tau(&c, 5, 8) == 2.0f &&
                  mm_sparse_step_tau(&c, 7, 8) == 2.0f,
              "tau per sparse forward: %g %g %g %g", mm_sparse_step_tau(&c, 2, 8), mm_sparse_step_tau(&c, 3, 8),
              mm_sparse_step_tau(&c, 4, 8), mm_sparse_step_tau(&c, 7, 8));
    MM_REQUIRE(mm_sparse_config_parse("subblock:sparsity=0.8", &c, &err) == 0, "%s", err.msg);
    MM_EXPECT(c.policy == MM_SPARSE_TOPK && fabsf(c.keep - 0.2f) < 1e-6f, "subblock sparsity: keep %g", c.keep);
    MM_REQUIRE(mm_sparse_config_parse("full", &c, &err) == 0, "%s", err.msg);
    MM_EXPECT(c.tau_start < -100 && c.dense_layers == 0 && mm_sparse_dense_forwards(&c, 27) == 0, "full preset");
    const char *bad[] = {"nope", "sol:tau", "sol:tau=x", "sol:what=1", "sol:sinks=video", "forced:density=2",
                         "sol:dense_steps=2.5", "sol:thresh=full", "sol:tau=1/x", "sol:tau=1//2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        MM_EXPECT(mm_sparse_config_parse(bad[i], &c, &err) != 0 && strstr(err.msg, "sparse attention"),
                  "'%s' accepted (or no message: %s)", bad[i], err.msg);
    }
    MM_EXPECT(strstr(mm_sparse_presets_help(), "subblock") && strstr(mm_sparse_presets_help(), "dense_layers"),
              "help lists presets and keys");
}

static void test_role_ranges(void)
{
    /* text 0..3, audio 4..5, cond video 6, ref audio 7, target video 8..9, text 10 */
    const uint8_t roles[] = {0, 0, 0, 0, 2, 2, 3, 4, 1, 1, 0};
    mm_row_range r[4];
    mm_error err = {{0}};
    int n = mm_sparse_role_ranges(roles, 11, MM_SPARSE_ROWS_PREFIX, r, 4, &err);
    MM_EXPECT(n == 2 && r[0].begin == 0 && r[0].end == 8 && r[1].begin == 10 && r[1].end == 11, "prefix: %d ranges", n);
    n = mm_sparse_role_ranges(roles, 11, MM_SPARSE_ROWS_TEXT | MM_SPARSE_ROWS_AUDIO | MM_SPARSE_ROWS_REF_AUDIO, r, 4,
                              &err);
    MM_EXPECT(n == 3 && r[0].end == 6 && r[1].begin == 7 && r[1].end == 8, "text_audio: %d ranges", n);
    MM_EXPECT(mm_sparse_role_ranges(roles, 11, MM_SPARSE_ROWS_TEXT, r, 1, &err) == -1 && strstr(err.msg, "more than"),
              "too many ranges accepted");
}

int main(void)
{
    mm_error err = {{0}};
    if (mm_ctx_create(&cpu, mm_cpu(), 0, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_sol_matches_reference);
    MM_RUN(test_sol_gqa_and_head_dim);
    MM_RUN(test_sol_sinks);
    MM_RUN(test_density_one_is_dense);
    MM_RUN(test_topk_matches_reference);
    MM_RUN(test_forced_density);
    MM_RUN(test_bad_arguments);
    MM_RUN(test_presets_and_overrides);
    MM_RUN(test_role_ranges);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
